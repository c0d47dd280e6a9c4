/*
 * dev/mla_dev_inputs.h — what the attention development tools share: random inputs drawn from the
 * one generator (tests/support/rng.h) in the caller's order — KV rows, q, index rows — the attention
 * call they time, and how the trace tools time a graph and print a stamp's spread over CTAs. No
 * check here: the tests do that.
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

/* A random FP8 problem on the device, as the trace tools draw it: S packed FP8 KV rows, q of T x H,
 * topk slots a token (drawn in that order from one generator of `seed`), out and lse allocated; `a`
 * is the call over them. */
typedef struct {
  void *kv, *q, *idx, *out;
  float *lse;
  dsa_sparse_mla_args a;
} mla_dev_problem;

static mla_dev_problem mla_dev_problem_fp8(int T, int H, int64_t S, int topk, uint64_t seed) {
  mla_dev_problem p;
  dsa_rng r = dsa_rng_make(seed, 0);
  const size_t nq = (size_t)T * H * 576, nidx = (size_t)T * topk, rows = (size_t)T * H;
  uint8_t *kv = (uint8_t *)malloc((size_t)S * 656);
  uint16_t *q = (uint16_t *)malloc(nq * 2);
  int32_t *idx = (int32_t *)malloc(nidx * 4);
  if (!kv || !q || !idx) {
    fprintf(stderr, "mla_dev_problem_fp8: out of host memory\n");
    exit(1);
  }
  mla_dev_kv(kv, S, 1, &r);
  mla_dev_q(q, nq, &r);
  mla_dev_indices(idx, nidx, S, &r);
  p.kv = mla_dev_put(kv, (size_t)S * 656);
  p.q = mla_dev_put(q, nq * 2);
  p.idx = mla_dev_put(idx, nidx * 4);
  free(kv);
  free(q);
  free(idx);
  CK(cudaMalloc(&p.out, rows * 512 * 2));
  CK(cudaMalloc((void **)&p.lse, rows * 4));
  p.a = mla_dev_args(p.q, T, H, p.kv, DSA_KV_FP8_PACKED, S, p.idx, topk, p.out, p.lse);
  return p;
}

static void mla_dev_problem_free(mla_dev_problem *p) {
  CK(cudaFree(p->kv));
  CK(cudaFree(p->q));
  CK(cudaFree(p->idx));
  CK(cudaFree(p->out));
  CK(cudaFree(p->lse));
}

static int mla_dev_cmp_ll(const void *a, const void *b) {
  const long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

static int mla_dev_cmp_f(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The median us of `n` replays of a graph on stream st, each between two events, after `warmup`
 * replays (hot L2, as dsa-bench times a kernel). */
static float mla_dev_replay_us(cudaGraphExec_t ge, cudaStream_t st, int warmup, int n) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float *ms = (float *)malloc((size_t)n * sizeof(float));
  for (int i = 0; i < warmup + n; ++i) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float x;
    CK(cudaEventElapsedTime(&x, e0, e1));
    if (i >= warmup) ms[i - warmup] = x;
  }
  qsort(ms, (size_t)n, sizeof(float), mla_dev_cmp_f);
  const float us = 1000.f * ms[n / 2];
  free(ms);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return us;
}

/* One stamp's spread over CTAs: its name, min / median / max of v[0 .. n) (sorted in place). */
static void mla_dev_print_spread(const char *name, long long *v, int n) {
  qsort(v, (size_t)n, sizeof(long long), mla_dev_cmp_ll);
  printf("  %-30s %8lld %8lld %8lld\n", name, v[0], v[n / 2], v[n - 1]);
}
