/*
 * mla_dev_inputs.h — what the attention development tools (dsa-trace-mla, dsa-trace-mla-v1,
 * dsa-mla-v3-modes) share: CK, a 64-bit LCG, random inputs drawn from it in the caller's order —
 * KV rows, q, index rows — and the attention call they time. No check here: the tests do that.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsa.h"

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e_ = (cudaError_t)(x);                                                       \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static uint32_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33);
}

/* S KV rows: packed FP8 (656 B: finite e4m3 codes, scales 0.01 .. 0.04, 64 bf16 rope values in
 * [0.0078, 0.0156)) or dense bf16 (576 values in that range). */
static void mla_dev_kv(uint8_t *kv, int64_t S, int fp8, uint64_t *seed) {
  const size_t row = fp8 ? 656 : 1152;
  for (int64_t r = 0; r < S; ++r) {
    uint8_t *p = kv + (size_t)r * row;
    if (fp8) {
      for (int i = 0; i < 512; ++i) p[i] = (uint8_t)(lcg(seed) & 0x77);
      const float sc[4] = {0.01f, 0.02f, 0.03f, 0.04f};
      memcpy(p + 512, sc, 16);
    }
    for (int i = 0; i < (fp8 ? 64 : 576); ++i) {
      const uint16_t b = (uint16_t)(0x3c00 + (lcg(seed) & 0xff));
      memcpy(p + (fp8 ? 528 : 0) + 2 * i, &b, 2);
    }
  }
}

/* n bf16 q values in [0.5, 1). */
static void mla_dev_q(uint16_t *q, size_t n, uint64_t *seed) {
  for (size_t i = 0; i < n; ++i) q[i] = (uint16_t)(0x3f00 + (lcg(seed) & 0xff));
}

/* n index entries, uniform over S slots (every one valid). */
static void mla_dev_indices(int32_t *idx, size_t n, int64_t S, uint64_t *seed) {
  for (size_t i = 0; i < n; ++i) idx[i] = (int32_t)(lcg(seed) % (uint32_t)S);
}

/* The call the tools time: T tokens x H heads, q [T, H, 576] bf16, S KV rows (bf16 rows 576
 * elements apart; the stride is ignored for packed FP8), topk indices a token (row stride topk),
 * softmax scale 1/16, out [T, H, 512], lse when given. */
static dsa_sparse_mla_args mla_dev_args(const void *q, int T, int H, const void *kv, dsa_kv_format fmt, int64_t S,
                                        const void *idx, int topk, void *out, float *lse) {
  dsa_sparse_mla_args a;
  memset(&a, 0, sizeof a);
  a.q = q;
  a.num_tokens = T;
  a.num_heads = H;
  a.kv_cache = kv;
  a.kv_format = fmt;
  a.num_slots = S;
  a.kv_stride = 576;
  a.indices = (const int32_t *)idx;
  a.indices_stride = topk;
  a.topk = topk;
  a.softmax_scale = 0.0625f;
  a.out = out;
  a.lse = lse;
  return a;
}
