/*
 * score_key.cuh — the order every top-k in dsa ranks by (topk.cu's selects, cp.cu's merge): a
 * float's order-preserving 32-bit key (NaN below every number, -0 ties with +0), and the 64-bit
 * composite (key << 32 | ~position) that breaks equal keys toward the lower position, so that
 * composites of distinct positions are distinct.
 */
#pragma once
#include <stdint.h>

static __device__ __forceinline__ uint32_t score_key(float f) {
  uint32_t u = __float_as_uint(f);
  if (f != f) return 0u;            /* NaN: below every number */
  if (u == 0x80000000u) u = 0u;     /* -0 ties with +0 */
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* A float with that key (the inverse of score_key for every key but NaN's, 0). */
static __device__ __forceinline__ float score_of_key(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

static __device__ __forceinline__ uint64_t make_comp(uint32_t key, int pos) {
  return ((uint64_t)key << 32) | (uint32_t)~(uint32_t)pos;
}
