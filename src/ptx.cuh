/*
 * ptx.cuh — the Hopper (sm_90a) instructions dsa's kernels use, each as a small inline-PTX helper
 * with the PTX ISA section it comes from (PTX ISA 8.x numbering, "parallel-thread-execution").
 * Kept in one place so a reader can check every operand against the manual once.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

/* Generic -> shared-window address (cvta, §9.7.9.16). */
__device__ __forceinline__ uint32_t ptx_smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- grid dependency control (§9.7.12.16 griddepcontrol) ---- */
__device__ __forceinline__ void ptx_griddep_wait(void) { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void ptx_griddep_launch_dependents(void) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

/* ---- named barriers (§9.7.12.1 bar.sync / bar.arrive): id 0 is __syncthreads ---- */
__device__ __forceinline__ void ptx_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* Signals barrier `id` without waiting (a producer's half of a bar.sync handshake). */
__device__ __forceinline__ void ptx_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* ---- per-warpgroup register budget (§9.7.17.1 setmaxnreg, sm_90a): the kernel needs a register
 * cap at entry (__launch_bounds__(threads, 1)) and each role in one branch ---- */
template <int N>
__device__ __forceinline__ void ptx_setmaxnreg_inc(void) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void ptx_setmaxnreg_dec(void) {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* ---- global loads ---- */
/* 16-byte read-only load that does not allocate in L1 (ld, §9.7.9.8: .global.nc.L1::no_allocate). */
__device__ __forceinline__ uint4 ptx_ld_nc_v4(const void *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/* 16-byte async copy global -> shared; src_bytes = 0 writes zeros and reads nothing
 * (cp.async, §9.7.9.25.3.1). */
__device__ __forceinline__ void ptx_cp_async_16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(src_bytes)
               : "memory");
}
/* 4-byte async copy global -> shared, through L1 (cp.async, §9.7.9.25.3.1: .ca is the only
 * cache mode for sizes below 16). */
__device__ __forceinline__ void ptx_cp_async_4(uint32_t dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(__cvta_generic_to_global(src)) : "memory");
}
/* cp.async.commit_group / wait_group (§9.7.9.25.3.2, §9.7.9.25.3.3). */
__device__ __forceinline__ void ptx_cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ptx_cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* An arrive on an mbarrier, made when all of this thread's earlier cp.async copies have landed, not
 * counted in advance (cp.async.mbarrier.arrive.noinc, §9.7.9.25.3.4): the producer never waits for
 * its own copies. */
__device__ __forceinline__ void ptx_cp_async_mbar_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

/* ---- shared memory, in program order ---- */
/* 16-byte shared store kept in program order (st.shared, §9.7.9.10): callers order their stores to
 * spread one instruction over all banks. */
__device__ __forceinline__ void ptx_st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
/* 16-byte shared load kept in program order (ld.shared, §9.7.9.8). */
__device__ __forceinline__ uint4 ptx_ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

/* ---- conversions ---- */
/* Two e4m3 bytes (low byte = first value) -> f16x2, exact (cvt, §9.7.9.21: .f16x2.e4m3x2). */
__device__ __forceinline__ uint32_t ptx_e4m3x2_to_f16x2(uint16_t two) {
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(two));
  return r;
}
/* Four e4m3 bytes (byte 0 = first value) -> two f16x2 (lo: bytes 0-1, hi: bytes 2-3), exact; the
 * 16-bit halves go to cvt as register halves, with no shift (cvt, §9.7.9.21). */
__device__ __forceinline__ void ptx_e4m3x4_to_f16x2x2(uint32_t four, uint32_t &lo, uint32_t &hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(four));
}
/* Byte permute (prmt, §9.7.8.7 prmt.b32, default mode): result byte i = the byte of {b, a} that
 * selector nibble i names (low 3 bits), or that byte's sign replicated when the nibble's bit 3 is set. */
__device__ __forceinline__ uint32_t ptx_prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
/* Two e4m3 bytes of `four` (sel 0x9180: bytes 0-1; 0xb3a2: bytes 2-3) -> bf16x2 holding value * 2^-120,
 * exact with no conversion instruction: byte s.eeee.mmm becomes bf16 s.0000eeee.mmm0000 (an e4m3
 * subnormal lands on a bf16 subnormal, the same 2^-120 apart). The e4m3 NaN codes come out finite.
 * prmt puts [sign-fill, byte] in each 16-bit lane; the shift and mask keep sign, exponent, mantissa. */
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2_pow2m120(uint32_t four, uint32_t sel) {
  return (ptx_prmt(four, 0u, sel) << 4) & 0x87f087f0u;
}
/* bf16x2 product, rounded to nearest (mul, §9.7.4.2 half precision mul.rn.bf16x2). */
__device__ __forceinline__ uint32_t ptx_mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
/* f16x2 product, rounded to nearest (mul, §9.7.4.2 half precision mul.rn.f16x2). */
__device__ __forceinline__ uint32_t ptx_mul_f16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
/* Two floats -> f16x2, lo = first (cvt, §9.7.9.21: .f16x2.f32 packs the second operand low). */
__device__ __forceinline__ uint32_t ptx_f32x2_to_f16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/* Two floats -> bf16x2, lo = first (cvt, §9.7.9.21: .bf16x2.f32). */
__device__ __forceinline__ uint32_t ptx_f32x2_to_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* 2^x, approximate (ex2, §9.7.3.22 ex2.approx.ftz.f32: max relative error 2^-22; results below
 * 2^-126 flush to 0, which a softmax weight can afford). ex2(-inf) = +0. */
__device__ __forceinline__ float ptx_ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

/* ---- mbarrier (§9.7.12.15) ---- */
/* mbarrier.init (§9.7.12.15.9). */
__device__ __forceinline__ void ptx_mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* mbarrier.inval (§9.7.12.15.11): before the barrier's shared memory may hold anything else. */
__device__ __forceinline__ void ptx_mbar_inval(uint32_t bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/* mbarrier.arrive.expect_tx (PTX ISA, mbarrier.expect_tx / arrive): one arrival, and `bytes` more
 * of transaction count for the phase (the bulk / tensor copies that complete on it). */
__device__ __forceinline__ void ptx_mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
/* A 3-D tensor tile global -> shared by the TMA unit, completing `bar`'s transaction count (PTX ISA,
 * cp.async.bulk.tensor; tmap: the address of a __grid_constant__ CUtensorMap; out-of-bounds boxes
 * arrive zero-filled). */
__device__ __forceinline__ void ptx_tma_load_3d(uint32_t dst, const void *tmap, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
/* A contiguous bulk copy global -> shared (bytes a multiple of 16, both ends 16-byte aligned),
 * completing `bar`'s transaction count (PTX ISA, cp.async.bulk). */
__device__ __forceinline__ void ptx_bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar)
               : "memory");
}
/* mbarrier.arrive with release semantics at CTA scope (§9.7.12.15.13). */
__device__ __forceinline__ void ptx_mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
/* Non-blocking: has the phase with parity `parity` completed? (mbarrier.test_wait.parity, §9.7.12.15.16) */
__device__ __forceinline__ bool ptx_mbar_test(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
/* Blocks until the phase with parity `parity` has completed (mbarrier.try_wait.parity, §9.7.12.15.16;
 * acquire at CTA scope). */
__device__ __forceinline__ void ptx_mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

/* Orders this thread's generic-proxy shared-memory writes before later async-proxy reads (wgmma
 * operands) (fence.proxy.async, §9.7.12.4 membar/fence). */
__device__ __forceinline__ void ptx_fence_proxy_async_smem(void) {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* ---- ldmatrix (§9.7.14.5.15): four 8x8 b16 matrices from shared memory, lanes 8j..8j+7 giving
 * the row addresses of matrix j; thread i receives row i/4, columns 2(i%4), 2(i%4)+1 (.trans: the
 * transposed matrix) ---- */
__device__ __forceinline__ void ptx_ldmatrix_x4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ptx_ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* ---- mma.sync (§9.7.14.5.14): D += A(16x16, row) * B(16x8, col), bf16 in, fp32 accumulate ---- */
__device__ __forceinline__ void ptx_mma_m16n8k16_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ---- stmatrix (§9.7.14.5.16): four 8x8 b16 matrices, transposed on the way to shared memory.
 * Thread i holds row i/4, columns 2(i%4), 2(i%4)+1 of each matrix (the mma accumulator layout);
 * lanes 8j..8j+7 give the 8 row addresses (16 B each) of matrix j as stored, i.e. of its columns. */
__device__ __forceinline__ void ptx_stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                      uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

/* Same, not transposed: lanes 8j..8j+7 give the addresses of the 8 rows of matrix j. */
__device__ __forceinline__ void ptx_stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

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

/* m64n64k16 and m64n256k16 (heads-as-M attention, dev/mla_v3.cu), same operands and flags. */
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
#define DSA_WGMMA_N256(TYPE)                                                                                             \
template <int TA, int TB>                                                                                                \
__device__ __forceinline__ void ptx_wgmma_m64n256k16_##TYPE(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {    \
  asm volatile(                                                                                                          \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                                      \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." #TYPE "." #TYPE " {"                                                \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                           \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                                                 \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                                                 \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                                                 \
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                                                 \
      "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"                                                 \
      "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"                                     \
      "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"                                  \
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n"                                                                         \
      :                                                                                                                  \
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),                  \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),            \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),          \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),          \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),          \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),          \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),          \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),          \
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),          \
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),          \
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),          \
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),          \
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),      \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),  \
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),  \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])   \
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));                                                               \
}
DSA_WGMMA_N64(f16)
DSA_WGMMA_N64(bf16)
DSA_WGMMA_N256(f16)
DSA_WGMMA_N256(bf16)
#undef DSA_WGMMA_N64
#undef DSA_WGMMA_N256
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

/* ---- thread-block clusters (§9.7.12.2 barrier.cluster, §9.7.9.17 mapa, §9.7.9.8 ld) ---- */
__device__ __forceinline__ uint32_t ptx_cluster_ctarank(void) {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
/* CTAs in this CTA's cluster (1 for a launch without clusters). */
__device__ __forceinline__ uint32_t ptx_cluster_nctarank(void) {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}
/* All threads of all CTAs of the cluster; release/acquire orders shared-memory writes before the
 * barrier with reads after it, across the cluster. */
__device__ __forceinline__ void ptx_cluster_sync(void) {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* The address of the same shared-memory variable in CTA `rank` of the cluster. */
__device__ __forceinline__ uint32_t ptx_mapa(uint32_t smem_addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr), "r"(rank));
  return r;
}
/* Loads from a peer CTA's shared memory. Not volatile: they follow a cluster barrier and may be
 * issued together (each costs a round trip over the SM-to-SM network). */
__device__ __forceinline__ float4 ptx_ld_cluster_f32x4(uint32_t addr) {
  float4 v;
  asm("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t ptx_ld_cluster_u32(uint32_t addr) {
  uint32_t v;
  asm("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint4 ptx_ld_cluster_u32x4(uint32_t addr) {
  uint4 v;
  asm("ld.shared::cluster.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ float2 ptx_ld_cluster_f32x2(uint32_t addr) {
  float2 v;
  asm("ld.shared::cluster.v2.f32 {%0,%1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
