/*
 * inputs_gpu.h — the caches of a large pool generated on the GPU (inputs_gpu.cu): gigabytes of
 * index-K pages and MLA KV slots written in milliseconds instead of seconds of host generation and
 * upload. Element i of stream s is drawn from dsa_rng_hash(seed, s, i) (rng.h), so a pool is
 * reproducible from its seed, and the distributions are those of inputs.h: e4m3 codes uniform over
 * every code but the NaNs (dsa_input_fp8_codes), float32 scales uniform in [0.01, 0.1)
 * (dsa_input_scales), bf16 values of random sign and mantissa with a binary exponent uniform in
 * [-4, 3] (dsa_input_bf16_exp(r, -4, 7)).
 */
#ifndef DSA_INPUTS_GPU_H
#define DSA_INPUTS_GPU_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* `pages` index-K pages of 64 rows at dst (device): [64 x 128 e4m3][64 float32 scales] a page,
 * codes from stream 1, scales from stream 2. On stream 0; returns the launch's error. */
cudaError_t dsa_input_gpu_index_k(void *dst, int64_t pages, uint64_t seed);

/* `slots` MLA KV slots at dst (device). fp8: packed slots of DSA_MLA_FP8_SLOT_BYTES, [512 e4m3]
 * [4 float32 scales][64 bf16 rope] (streams 3, 4, 5); else dense bf16 rows of DSA_MLA_QK_DIM
 * (stream 6). On stream 0; returns the launch's error. */
cudaError_t dsa_input_gpu_kv(void *dst, int64_t slots, int fp8, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* DSA_INPUTS_GPU_H */
