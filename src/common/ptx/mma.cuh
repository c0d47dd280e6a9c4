/*
 * ptx/mma.cuh — warp-level matrix instructions: ldmatrix, mma.sync, stmatrix, as small inline-PTX
 * helpers with their PTX ISA sections.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

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

/* ---- mma.sync (§9.7.14.5.14): D += A(16x16, row) * B(16x8, col), fp32 accumulate; bf16 or f16 in ---- */
__device__ __forceinline__ void ptx_mma_m16n8k16_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void ptx_mma_m16n8k16_f16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
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
