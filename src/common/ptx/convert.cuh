/*
 * ptx/convert.cuh — conversions and packed arithmetic (e4m3 / f16 / bf16 / f32), as small inline-PTX
 * helpers with their PTX ISA sections.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

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
