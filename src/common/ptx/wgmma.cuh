/*
 * ptx/wgmma.cuh — warpgroup matrix instructions (wgmma, sm_90a): shared-memory descriptors, fence /
 * commit / wait, and the m64nNk16 (f16, bf16) and m64nNk32 (e4m3) shapes dsa's kernels use, with
 * their PTX ISA sections.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

/* ---- wgmma (§9.7.15) ---- */
/* Shared-memory matrix descriptor (§9.7.15.5.1.2), no swizzle ("interleave"): the operand is made
 * of 8x8 core matrices of 16-bit values, each 8 rows of 16 contiguous bytes (128 B). lbo = bytes
 * between core matrices adjacent along K, sbo = along M or N (both K-major and MN-major). */
__device__ __forceinline__ uint64_t ptx_wgmma_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((smem_addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo & 0x3FFFFu) >> 4) << 16) |
         ((uint64_t)((sbo & 0x3FFFFu) >> 4) << 32);
}
/* The same descriptor for the 128-byte swizzle (layout type 1, bits 62-63): the operand is made of
 * 1024-byte atoms of 8 rows x 128 B (16-byte chunk c of row r stored at chunk c ^ r; atoms
 * 1024-aligned). K-major: sbo = bytes between 8-row groups, lbo unused (1); a k16 step inside the
 * 128-byte row advances the start address by 32 B. MN-major: lbo = bytes between 64-element blocks
 * along M/N, sbo = bytes between 8-row groups along K. */
__device__ __forceinline__ uint64_t ptx_wgmma_desc_sw128(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return ptx_wgmma_desc(smem_addr, lbo, sbo) | ((uint64_t)1 << 62);
}
/* wgmma.fence (§9.7.15.5.3): before the first wgmma and after registers it uses were touched. */
__device__ __forceinline__ void ptx_wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/* wgmma.commit_group (§9.7.15.5.4) and wgmma.wait_group (§9.7.15.5.5). */
__device__ __forceinline__ void ptx_wgmma_commit(void) {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void ptx_wgmma_wait(void) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accumulator reads/writes across a wgmma fence/wait. */
template <int R>
__device__ __forceinline__ void ptx_reg_fence(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* wgmma.mma_async m64nNk16, A and B from shared memory, fp32 accumulate (§9.7.15.5.2).
 * TYPE: f16 or bf16. scale_d = 0: D = A.B (the old D is ignored); 1: D += A.B.
 * TA / TB = 1: that operand is MN-major (transposed; allowed for 16-bit types only). */
#define DSA_WGMMA_N16(TYPE)                                                                              \
  template <int TA, int TB>                                                                               \
  __device__ __forceinline__ void ptx_wgmma_m64n16k16_##TYPE(float (&d)[8], uint64_t da, uint64_t db,   \
                                                              int scale_d) {                              \
    asm volatile(                                                                                         \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"                                                      \
        "wgmma.mma_async.sync.aligned.m64n16k16.f32." #TYPE "." #TYPE                                     \
        " {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, %11, %12;\n}\n"                                     \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]) \
        : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));                                             \
  }
#define DSA_WGMMA_N32(TYPE)                                                                               \
  template <int TA, int TB>                                                                                \
  __device__ __forceinline__ void ptx_wgmma_m64n32k16_##TYPE(float (&d)[16], uint64_t da, uint64_t db,   \
                                                              int scale_d) {                               \
    asm volatile(                                                                                          \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                       \
        "wgmma.mma_async.sync.aligned.m64n32k16.f32." #TYPE "." #TYPE                                      \
        " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, %19, %20;\n}\n"      \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),        \
          "+f"(d[15])                                                                                      \
        : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));                                              \
  }
DSA_WGMMA_N16(f16)
DSA_WGMMA_N16(bf16)
DSA_WGMMA_N32(f16)
DSA_WGMMA_N32(bf16)
#undef DSA_WGMMA_N16
#undef DSA_WGMMA_N32

/* m64n64k16 and m64n256k16 (the heads_as_m attention), same operands and flags. */
#define DSA_WGMMA_N64(TYPE)                                                                                          \
template <int TA, int TB>                                                                                            \
__device__ __forceinline__ void ptx_wgmma_m64n64k16_##TYPE(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {  \
  asm volatile(                                                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                                   \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." #TYPE "." #TYPE " {"                                             \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                       \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"                                              \
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n"                                                                         \
      :                                                                                                              \
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),              \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),        \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),      \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])       \
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));                                                           \
}
/* The 128 fp32 accumulators of an m64n256 wgmma: their operand list in the asm text and their
 * constraints (outputs %0..%127). */
#define DSA_WGMMA_D128_ASM \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
  "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
  "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
  "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
  "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
  "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define DSA_WGMMA_D128_OUT(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define DSA_WGMMA_N256(TYPE)                                                                                             \
template <int TA, int TB>                                                                                                \
__device__ __forceinline__ void ptx_wgmma_m64n256k16_##TYPE(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {    \
  asm volatile(                                                                                                          \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                                      \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." #TYPE "." #TYPE " {"                                                \
      DSA_WGMMA_D128_ASM                                                                                                 \
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n"                                                                         \
      :                                                                                                                  \
      DSA_WGMMA_D128_OUT(d)                                                                                          \
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));                                                               \
}
DSA_WGMMA_N64(f16)
DSA_WGMMA_N64(bf16)
DSA_WGMMA_N256(f16)
DSA_WGMMA_N256(bf16)
#undef DSA_WGMMA_N64
#undef DSA_WGMMA_N256
/* wgmma.mma_async m64n256k16 with A from registers (§9.7.15.5.2; the register fragment of
 * §9.7.15.5.1.1: thread (warp w, lane) holds rows 16w + lane/4 and + 8, columns 2 (lane % 4) + {0, 1}
 * and + 8, as four 16-bit pairs — the layout of an m64nN accumulator's 16 columns, so a softmax's
 * probabilities go from the S accumulators to A without shared memory). B from shared memory,
 * TB = 1: MN-major. scale_d as above. */
#define DSA_WGMMA_N256_RS(TYPE)                                                                                          \
template <int TB>                                                                                                        \
__device__ __forceinline__ void ptx_wgmma_m64n256k16_rs_##TYPE(float (&d)[128], const uint32_t (&a)[4], uint64_t db,     \
                                                              int scale_d) {                                            \
  asm volatile(                                                                                                          \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                                                      \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." #TYPE "." #TYPE " {"                                                \
      DSA_WGMMA_D128_ASM                                                                                                 \
      "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"                                                           \
      : DSA_WGMMA_D128_OUT(d)                                                                                          \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));                                    \
}
DSA_WGMMA_N256_RS(f16)
DSA_WGMMA_N256_RS(bf16)
#undef DSA_WGMMA_N256_RS
/* m64n128k16 (the f16 indexer scorer: 128 (token, head) columns a chunk), same operands and flags. */
#define DSA_WGMMA_N128(TYPE)                                                                              \
template <int TA, int TB>                                                                                 \
__device__ __forceinline__ void ptx_wgmma_m64n128k16_##TYPE(float (&d)[64], uint64_t da, uint64_t db, int scale_d) { \
  asm volatile(                                                                                           \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                        \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." #TYPE "." #TYPE " {"                                 \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"                                                                                       \
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n"                                                               \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                                 \
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));                                                \
}
DSA_WGMMA_N128(f16)
#undef DSA_WGMMA_N128
/* f16 x f16 -> f32, both K-major, N columns (32 / 64 / 128 / 256), one k16 step. */
template <int N>
__device__ __forceinline__ void ptx_wgmma_k16_f16(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (N == 32) ptx_wgmma_m64n32k16_f16<0, 0>(d, da, db, scale_d);
  else if constexpr (N == 64) ptx_wgmma_m64n64k16_f16<0, 0>(d, da, db, scale_d);
  else if constexpr (N == 128) ptx_wgmma_m64n128k16_f16<0, 0>(d, da, db, scale_d);
  else ptx_wgmma_m64n256k16_f16<0, 0>(d, da, db, scale_d);
}

/* One m64nNk16 for N = 16 or 32 (HN/2 accumulators a thread), f16 or bf16 operands. */
template <int HN, bool F16, int TA, int TB>
__device__ __forceinline__ void ptx_wgmma_k16(float (&d)[HN / 2], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (HN == 16) {
    if constexpr (F16) ptx_wgmma_m64n16k16_f16<TA, TB>(d, da, db, scale_d);
    else ptx_wgmma_m64n16k16_bf16<TA, TB>(d, da, db, scale_d);
  } else {
    static_assert(HN == 32, "wgmma N: 16 or 32");
    if constexpr (F16) ptx_wgmma_m64n32k16_f16<TA, TB>(d, da, db, scale_d);
    else ptx_wgmma_m64n32k16_bf16<TA, TB>(d, da, db, scale_d);
  }
}


/* wgmma.mma_async m64nNk32, e4m3 x e4m3 -> f32, A and B from shared memory, both K-major (the only
 * layout FP8 wgmma takes) (§9.7.15.5.2). scale_d = 0: D = A.B; 1: D += A.B. N = 32, 64, 128, 256. */
__device__ __forceinline__ void ptx_wgmma_m64n32k32_e4m3(float (&d)[16], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void ptx_wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void ptx_wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void ptx_wgmma_m64n256k32_e4m3(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(scale_d));
}
template <int N>
__device__ __forceinline__ void ptx_wgmma_k32_e4m3(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (N == 32) ptx_wgmma_m64n32k32_e4m3(d, da, db, scale_d);
  else if constexpr (N == 64) ptx_wgmma_m64n64k32_e4m3(d, da, db, scale_d);
  else if constexpr (N == 128) ptx_wgmma_m64n128k32_e4m3(d, da, db, scale_d);
  else ptx_wgmma_m64n256k32_e4m3(d, da, db, scale_d);
}
