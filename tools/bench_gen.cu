/*
 * bench_gen.cu — dsa-bench's caches generated on the GPU: the index-K pages and the MLA KV slots of
 * a pool of gigabytes are written in a few milliseconds instead of seconds of host generation and
 * upload (a 256 x 64k pool took 33 s). Every 8-byte word (or element) is a splitmix64 hash of
 * (seed, stream, its index), so a run is reproducible from --seed; the distributions are the ones
 * the host generators used: e4m3 codes uniform over all codes but the NaNs (0x7F, 0xFF -> +-448),
 * float32 scales uniform in [0.01, 0.1), bf16 values with a random sign and mantissa and a binary
 * exponent uniform in [-4, 3]. --check copies the pool back to the host for the references.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "dsa.h"

#define GEN_PAGE 64                      /* tokens per index-K page */
#define GEN_IDX_DIM DSA_INDEX_HEAD_DIM   /* 128 */
#define GEN_IDX_PAGE_BYTES (GEN_PAGE * (GEN_IDX_DIM + 4))
#define GEN_KV_FP8 DSA_MLA_FP8_SLOT_BYTES /* 656: 512 e4m3, 4 float32 scales, 64 bf16 */
#define GEN_QK_DIM DSA_MLA_QK_DIM         /* 576 */

__device__ __forceinline__ uint64_t gen_hash(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + i * 0xBF58476D1CE4E5B9ull +
               0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* eight e4m3 codes, the NaN codes moved to +-448 */
__device__ __forceinline__ uint64_t gen_fp8x8(uint64_t h) {
#pragma unroll
  for (int b = 0; b < 8; ++b)
    if (((h >> (8 * b)) & 0x7F) == 0x7F) h ^= 1ull << (8 * b);
  return h;
}

__device__ __forceinline__ float gen_scale(uint64_t h) { return 0.01f + 0.09f * (float)(h >> 40) * (1.0f / 16777216.0f); }

__device__ __forceinline__ uint16_t gen_bf16(uint64_t h) {
  const uint16_t sign = (uint16_t)((h & 1) << 15), mant = (uint16_t)((h >> 1) & 0x7F);
  const uint16_t e = (uint16_t)(127 - 4 + (int)((h >> 8) % 7));
  return (uint16_t)(sign | (uint16_t)(e << 7) | mant);
}

/* index-K pages: [64 rows x 128 e4m3][64 float32 scales] */
__global__ void gen_index_k_kernel(uint8_t *dst, int64_t pages, uint64_t seed) {
  const int64_t words = pages * (GEN_PAGE * GEN_IDX_DIM / 8), scales = pages * GEN_PAGE;
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < words + scales;
       w += (int64_t)gridDim.x * blockDim.x) {
    if (w < words) {
      const int64_t page = w / (GEN_PAGE * GEN_IDX_DIM / 8), j = w % (GEN_PAGE * GEN_IDX_DIM / 8);
      *(uint64_t *)(dst + page * GEN_IDX_PAGE_BYTES + j * 8) = gen_fp8x8(gen_hash(seed, 1, (uint64_t)w));
    } else {
      const int64_t s = w - words, page = s / GEN_PAGE, k = s % GEN_PAGE;
      *(float *)(dst + page * GEN_IDX_PAGE_BYTES + GEN_PAGE * GEN_IDX_DIM + k * 4) = gen_scale(gen_hash(seed, 2, (uint64_t)s));
    }
  }
}

/* packed FP8 KV slots: [512 e4m3][4 float32 scales][64 bf16 rope] */
__global__ void gen_kv_fp8_kernel(uint8_t *dst, int64_t slots, uint64_t seed) {
  const int64_t words = slots * 64, scales = slots * 4, rope = slots * 64;
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < words + scales + rope;
       w += (int64_t)gridDim.x * blockDim.x) {
    if (w < words) {
      *(uint64_t *)(dst + (w / 64) * GEN_KV_FP8 + (w % 64) * 8) = gen_fp8x8(gen_hash(seed, 3, (uint64_t)w));
    } else if (w < words + scales) {
      const int64_t s = w - words;
      *(float *)(dst + (s / 4) * GEN_KV_FP8 + 512 + (s % 4) * 4) = gen_scale(gen_hash(seed, 4, (uint64_t)s));
    } else {
      const int64_t e = w - words - scales;
      *(uint16_t *)(dst + (e / 64) * GEN_KV_FP8 + 528 + (e % 64) * 2) = gen_bf16(gen_hash(seed, 5, (uint64_t)e));
    }
  }
}

/* dense bf16 KV rows of 576 */
__global__ void gen_kv_bf16_kernel(uint16_t *dst, int64_t elems, uint64_t seed) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < elems; e += (int64_t)gridDim.x * blockDim.x)
    dst[e] = gen_bf16(gen_hash(seed, 6, (uint64_t)e));
}

/* Launchers (stream 0, synchronous errors returned): 0 on success, else the CUDA error. */
extern "C" int bench_gen_index_k(void *dst, int64_t pages, uint64_t seed) {
  gen_index_k_kernel<<<1024, 256>>>((uint8_t *)dst, pages, seed);
  return (int)cudaGetLastError();
}
extern "C" int bench_gen_kv(void *dst, int64_t slots, int fp8, uint64_t seed) {
  if (fp8) gen_kv_fp8_kernel<<<1024, 256>>>((uint8_t *)dst, slots, seed);
  else gen_kv_bf16_kernel<<<1024, 256>>>((uint16_t *)dst, slots * GEN_QK_DIM, seed);
  return (int)cudaGetLastError();
}
