/*
 * cache/store.cu — the two cache writers (dsa.h "Cache writers"; layouts: common/layout.h).
 *
 * Index-K store: k bf16 [T, 128] (row t at k + t * k_stride elements), slot_mapping int64 [T].
 *   amax = max_d |k[t, d]|, scale = max(amax, DSA_FP8_AMAX_FLOOR) / 448,
 *   fp8[d] = e4m3_rn_satfinite(k[t, d] / scale)      (float32 division, as the CPU reference)
 *   Paged layout (P = page_size, G = 1): page = slot / P, row = slot % P;
 *   fp8 row at byte page * P * 132 + row * 128, scale at byte page * P * 132 + P * 128 + row * 4.
 * MLA KV store: kv bf16 [T, 576] (row stride kv_stride elements) ->
 *   packed FP8, 656 B at cache + slot * 656: 512 e4m3 (per group g of 128 values
 *   scale_g = max(amax_g, DSA_FP8_AMAX_FLOOR) / 448), 4 float32 scales, 64 bf16 rope copied; or
 *   a plain bf16 copy of the 576 values to cache + slot * cache_stride elements.
 * Slots < 0 (padding) or past the cache are skipped. One warp per token; every lane of the warp
 * takes the same branch, so the shuffles are always full-warp.
 *
 * The VEC variants use 8/16-byte accesses and need the pointers and strides aligned for them;
 * the launchers check and fall back to element-wise variants otherwise.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "common/launch.cuh"
#include "common/layout.h"
#include "kernels.h"

#define STORE_THREADS 256
#define STORE_WARPS (STORE_THREADS / 32)
#define FP8_E4M3_MAX 448.0f

__device__ __forceinline__ float warp_max(float v, int width) {
  for (int o = width / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ uint8_t fp8_of(float x, float scale) {
  return (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float fp8_scale_of(float amax) {
  return __fdiv_rn(fmaxf(amax, DSA_FP8_AMAX_FLOOR), FP8_E4M3_MAX);
}

/* ---------------------------------------------------------------------------------------------
 * Index-K: lane l quantises k[t, 4l .. 4l+3].
 */
template <bool VEC>
__global__ void __launch_bounds__(STORE_THREADS) index_k_store_kernel(
    const __nv_bfloat16 *k, int64_t k_stride, const int64_t *slot_mapping, int num_tokens,
    uint8_t *cache, int64_t num_pages, int page_size) {
  const int lane = threadIdx.x & 31;
  const int64_t t = (int64_t)blockIdx.x * STORE_WARPS + (threadIdx.x >> 5);
  if (t >= num_tokens) return;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_pages * (int64_t)page_size) return;

  const __nv_bfloat16 *row = k + t * k_stride + 4 * lane;
  float v[4];
  if (VEC) {
    const uint2 raw = *(const uint2 *)row;
    const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.x);
    const float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&raw.y);
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = __bfloat162float(row[i]);
  }
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float scale = fp8_scale_of(warp_max(amax, 32));

  const int64_t page = slot / page_size, r = slot % page_size;
  uint8_t *page_base = cache + page * (int64_t)page_size * (IDXK_DIM + 4);
  uint8_t *dst = page_base + r * IDXK_DIM + 4 * lane;
  uint8_t q[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) q[i] = fp8_of(v[i], scale);
  uint8_t *scale_dst = page_base + (int64_t)page_size * IDXK_DIM + r * 4;
  if (VEC) {
    *(uint32_t *)dst = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) |
                       ((uint32_t)q[3] << 24);
    if (lane == 0) *(float *)scale_dst = scale;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = q[i];
    if (lane < 4) scale_dst[lane] = (uint8_t)(__float_as_uint(scale) >> (8 * lane));
  }
}

/* ---------------------------------------------------------------------------------------------
 * MLA KV, packed FP8: lane l quantises latent values [16l, 16l + 16) (group l / 8, so the group
 * amax is a reduction over 8 lanes); lanes 0..7 copy 16 bytes of rope each.
 */
template <bool VEC>
__global__ void __launch_bounds__(STORE_THREADS) mla_kv_store_fp8_kernel(
    const __nv_bfloat16 *kv, int64_t kv_stride, const int64_t *slot_mapping, int num_tokens,
    uint8_t *cache, int64_t num_slots) {
  const int lane = threadIdx.x & 31;
  const int64_t t = (int64_t)blockIdx.x * STORE_WARPS + (threadIdx.x >> 5);
  if (t >= num_tokens) return;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;

  const __nv_bfloat16 *row = kv + t * kv_stride;
  uint8_t *dst = cache + slot * MLA_FP8_SLOT_BYTES;
  float v[16];
  if (VEC) {
    const uint4 *src = (const uint4 *)(row + 16 * lane);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 raw = src[h];
      const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)&w[i]);
        v[8 * h + 2 * i] = f.x;
        v[8 * h + 2 * i + 1] = f.y;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = __bfloat162float(row[16 * lane + i]);
  }
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float scale = fp8_scale_of(warp_max(amax, 8)); /* xor 4, 2, 1: stays in the 8-lane group */

  uint8_t q[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) q[i] = fp8_of(v[i], scale);
  uint8_t *scale_dst = dst + MLA_V_DIM + 4 * (lane >> 3);
  if (VEC) {
    uint4 packed;
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = (uint32_t)q[4 * i] | ((uint32_t)q[4 * i + 1] << 8) | ((uint32_t)q[4 * i + 2] << 16) |
             ((uint32_t)q[4 * i + 3] << 24);
    packed.x = w[0]; packed.y = w[1]; packed.z = w[2]; packed.w = w[3];
    *(uint4 *)(dst + 16 * lane) = packed;
    if ((lane & 7) == 0) *(float *)scale_dst = scale;
    if (lane < 8) *(uint4 *)(dst + MLA_V_DIM + 16 + 16 * lane) = *(const uint4 *)(row + MLA_V_DIM + 8 * lane);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) dst[16 * lane + i] = q[i];
    if ((lane & 7) < 4) /* 4 lanes of each group write the 4 bytes of its scale */
      dst[MLA_V_DIM + 4 * (lane >> 3) + (lane & 7)] =
          (uint8_t)(__float_as_uint(scale) >> (8 * (lane & 7)));
    for (int i = lane; i < 64; i += 32) {
      const uint16_t bits = *(const uint16_t *)(row + MLA_V_DIM + i);
      dst[MLA_V_DIM + 16 + 2 * i] = (uint8_t)bits;
      dst[MLA_V_DIM + 16 + 2 * i + 1] = (uint8_t)(bits >> 8);
    }
  }
}

/* MLA KV, plain bf16 copy of 576 values (72 chunks of 8 when VEC). */
template <bool VEC>
__global__ void __launch_bounds__(STORE_THREADS) mla_kv_store_bf16_kernel(
    const __nv_bfloat16 *kv, int64_t kv_stride, const int64_t *slot_mapping, int num_tokens,
    __nv_bfloat16 *cache, int64_t num_slots, int64_t cache_stride) {
  const int lane = threadIdx.x & 31;
  const int64_t t = (int64_t)blockIdx.x * STORE_WARPS + (threadIdx.x >> 5);
  if (t >= num_tokens) return;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  const __nv_bfloat16 *src = kv + t * kv_stride;
  __nv_bfloat16 *dst = cache + slot * cache_stride;
  if (VEC) {
    for (int i = lane; i < MLA_QK_DIM / 8; i += 32) ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
  } else {
    for (int i = lane; i < MLA_QK_DIM; i += 32) dst[i] = src[i];
  }
}

/* ---------------------------------------------------------------------------------------------
 * Launchers.
 */
/* One warp per token: ceil(num_tokens / STORE_WARPS) CTAs, <= 2^28 for any int count. */
static dim3 store_grid(int num_tokens) {
  return dim3((unsigned)(((int64_t)num_tokens + STORE_WARPS - 1) / STORE_WARPS));
}

static int aligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

extern "C" int dsa_index_k_store_launch(const dsa_index_k_store_args *a, cudaStream_t stream) {
  if (a->num_tokens <= 0) return 0;
  const __nv_bfloat16 *k = (const __nv_bfloat16 *)a->k;
  const int vec = aligned(k, 8) && (a->k_stride % 4) == 0 && aligned(a->cache, 4);
  return (int)dsa_launch(vec ? index_k_store_kernel<true> : index_k_store_kernel<false>, store_grid(a->num_tokens),
                         STORE_THREADS, 0, stream, false, k, a->k_stride, a->slot_mapping, a->num_tokens,
                         a->cache, a->num_pages, a->page_size);
}

extern "C" int dsa_mla_kv_store_launch(const dsa_mla_kv_store_args *a, cudaStream_t stream) {
  if (a->num_tokens <= 0) return 0;
  const __nv_bfloat16 *kv = (const __nv_bfloat16 *)a->kv;
  const int src_vec = aligned(kv, 16) && (a->kv_stride % 8) == 0;
  if (a->kv_format == DSA_KV_FP8_PACKED) {
    uint8_t *cache = (uint8_t *)a->cache;
    const bool vec = src_vec && aligned(cache, 16);
    return (int)dsa_launch(vec ? mla_kv_store_fp8_kernel<true> : mla_kv_store_fp8_kernel<false>,
                           store_grid(a->num_tokens), STORE_THREADS, 0, stream, false, kv, a->kv_stride,
                           a->slot_mapping, a->num_tokens, cache, a->num_slots);
  }
  __nv_bfloat16 *cache = (__nv_bfloat16 *)a->cache;
  const bool vec = src_vec && aligned(cache, 16) && (a->cache_stride % 8) == 0;
  return (int)dsa_launch(vec ? mla_kv_store_bf16_kernel<true> : mla_kv_store_bf16_kernel<false>,
                         store_grid(a->num_tokens), STORE_THREADS, 0, stream, false, kv, a->kv_stride,
                         a->slot_mapping, a->num_tokens, cache, a->num_slots, a->cache_stride);
}
