/*
 * inputs_gpu.cu — see inputs_gpu.h. Every 8-byte word of e4m3 codes, every scale and every bf16
 * value is one dsa_rng_hash of (seed, stream, its index); a grid-stride loop a buffer.
 */
#include "inputs_gpu.h"

#include <cuda_runtime.h>

#include "dsa.h"
#include "rng.h"

#define IDX_PAGE 64                                    /* rows of an index-K page */
#define IDX_DIM DSA_INDEX_HEAD_DIM                     /* 128 */
#define IDX_PAGE_BYTES (IDX_PAGE * (IDX_DIM + 4))      /* 8448 */
#define KV_FP8_BYTES DSA_MLA_FP8_SLOT_BYTES            /* 656: 512 e4m3, 4 float32 scales, 64 bf16 */
#define QK_DIM DSA_MLA_QK_DIM                          /* 576 */

/* eight e4m3 codes (little-endian, as dsa_input_fp8_codes copies a draw), the NaN codes moved to
 * +-448 */
static __device__ __forceinline__ uint64_t e4m3x8_of(uint64_t h) {
#pragma unroll
  for (int b = 0; b < 8; ++b)
    if (((h >> (8 * b)) & 0x7F) == 0x7F) h ^= 1ull << (8 * b);
  return h;
}

/* uniform in [0.01, 0.1) from the draw's top 24 bits: dsa_input_scales' distribution */
static __device__ __forceinline__ float scale_of(uint64_t h) { return 0.01f + 0.09f * (float)(h >> 40) * (1.0f / 16777216.0f); }

/* dsa_input_bf16_exp(r, -4, 7) with h as the draw */
static __device__ __forceinline__ uint16_t bf16_of(uint64_t h) {
  const uint16_t sign = (uint16_t)((h & 1) << 15), mant = (uint16_t)((h >> 1) & 0x7F);
  const uint16_t e = (uint16_t)(127 - 4 + (int)((h >> 8) % 7));
  return (uint16_t)(sign | (uint16_t)(e << 7) | mant);
}

/* index-K pages: [64 rows x 128 e4m3][64 float32 scales] */
static __global__ void index_k_kernel(uint8_t *dst, int64_t pages, uint64_t seed) {
  const int64_t words = pages * (IDX_PAGE * IDX_DIM / 8), scales = pages * IDX_PAGE;
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < words + scales;
       w += (int64_t)gridDim.x * blockDim.x) {
    if (w < words) {
      const int64_t page = w / (IDX_PAGE * IDX_DIM / 8), j = w % (IDX_PAGE * IDX_DIM / 8);
      *(uint64_t *)(dst + page * IDX_PAGE_BYTES + j * 8) = e4m3x8_of(dsa_rng_hash(seed, 1, (uint64_t)w));
    } else {
      const int64_t s = w - words, page = s / IDX_PAGE, k = s % IDX_PAGE;
      *(float *)(dst + page * IDX_PAGE_BYTES + IDX_PAGE * IDX_DIM + k * 4) = scale_of(dsa_rng_hash(seed, 2, (uint64_t)s));
    }
  }
}

/* packed FP8 KV slots: [512 e4m3][4 float32 scales][64 bf16 rope] */
static __global__ void kv_fp8_kernel(uint8_t *dst, int64_t slots, uint64_t seed) {
  const int64_t words = slots * 64, scales = slots * 4, rope = slots * 64;
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < words + scales + rope;
       w += (int64_t)gridDim.x * blockDim.x) {
    if (w < words) {
      *(uint64_t *)(dst + (w / 64) * KV_FP8_BYTES + (w % 64) * 8) = e4m3x8_of(dsa_rng_hash(seed, 3, (uint64_t)w));
    } else if (w < words + scales) {
      const int64_t s = w - words;
      *(float *)(dst + (s / 4) * KV_FP8_BYTES + 512 + (s % 4) * 4) = scale_of(dsa_rng_hash(seed, 4, (uint64_t)s));
    } else {
      const int64_t e = w - words - scales;
      *(uint16_t *)(dst + (e / 64) * KV_FP8_BYTES + 528 + (e % 64) * 2) = bf16_of(dsa_rng_hash(seed, 5, (uint64_t)e));
    }
  }
}

/* dense bf16 KV rows of 576 */
static __global__ void kv_bf16_kernel(uint16_t *dst, int64_t elems, uint64_t seed) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < elems; e += (int64_t)gridDim.x * blockDim.x)
    dst[e] = bf16_of(dsa_rng_hash(seed, 6, (uint64_t)e));
}

extern "C" cudaError_t dsa_input_gpu_index_k(void *dst, int64_t pages, uint64_t seed) {
  index_k_kernel<<<1024, 256>>>((uint8_t *)dst, pages, seed);
  return cudaGetLastError();
}

extern "C" cudaError_t dsa_input_gpu_kv(void *dst, int64_t slots, int fp8, uint64_t seed) {
  if (fp8)
    kv_fp8_kernel<<<1024, 256>>>((uint8_t *)dst, slots, seed);
  else
    kv_bf16_kernel<<<1024, 256>>>((uint16_t *)dst, slots * QK_DIM, seed);
  return cudaGetLastError();
}
