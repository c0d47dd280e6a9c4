/*
 * dev/mla_dev_inputs.h — what the attention development tools share: random inputs drawn from the
 * one generator (tests/support/rng.h) in the caller's order — KV rows, q, index rows — and the
 * attention call they time. No check here: the tests do that.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dsa.h"
#include "rng.h"

/* S KV rows: packed FP8 (656 B: finite positive e4m3 codes (code & 0x77), scales 0.01 .. 0.04 by
 * group, 64 bf16 rope values in [0.0078, 0.0156)) or dense bf16 (576 values in that range). */
static void mla_dev_kv(uint8_t *kv, int64_t S, int fp8, dsa_rng *r) {
  const size_t row = fp8 ? 656 : 1152;
  for (int64_t i = 0; i < S; ++i) {
    uint8_t *p = kv + (size_t)i * row;
    if (fp8) {
      for (int j = 0; j < 512; ++j) p[j] = (uint8_t)(dsa_rng_next(r) & 0x77);
      const float sc[4] = {0.01f, 0.02f, 0.03f, 0.04f};
      memcpy(p + 512, sc, 16);
    }
    for (int j = 0; j < (fp8 ? 64 : 576); ++j) {
      const uint16_t b = (uint16_t)(0x3c00 + (dsa_rng_next(r) & 0xff));
      memcpy(p + (fp8 ? 528 : 0) + 2 * j, &b, 2);
    }
  }
}

/* n bf16 q values in [0.5, 1). */
static void mla_dev_q(uint16_t *q, size_t n, dsa_rng *r) {
  for (size_t i = 0; i < n; ++i) q[i] = (uint16_t)(0x3f00 + (dsa_rng_next(r) & 0xff));
}

/* n index entries, uniform over S slots (every one valid). */
static void mla_dev_indices(int32_t *idx, size_t n, int64_t S, dsa_rng *r) {
  for (size_t i = 0; i < n; ++i) idx[i] = (int32_t)dsa_rng_below(r, (uint64_t)S);
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

/* A device copy of a host buffer. */
static void *mla_dev_put(const void *h, size_t bytes) {
  void *d = NULL;
  CK(cudaMalloc(&d, bytes));
  CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}
