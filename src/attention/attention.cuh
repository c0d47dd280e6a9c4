/*
 * attention/attention.cuh — what the three sparse MLA attention kernels share (DESIGN.md §4
 * "Attention"): their common arguments, which entries of an index row they use, the lse, and the
 * host-side loop that cuts a grid past 2^31 - 1 CTAs into launches.
 *
 * Every kernel computes, per token t and head h over the valid entries i of indices[t]:
 *   s_i = softmax_scale * q[t,h,0:576] . k_idx[0:576],   out[t,h] = softmax(s) . v  (v = k[0:512]),
 *   lse[t,h] = m + ln(sum_i exp(s_i - m));  no valid entry: out = 0, lse = -inf.
 * The softmax runs in the log2 domain (scores times log2(e), the lse back times ln(2)).
 */
#pragma once
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "common/layout.h"
#include "kernels.h"

/* The softmax runs in the log2 domain: scores times log2(e), the lse back times ln(2). */
#define MLA_LOG2E 1.4426950408889634f
#define MLA_LN2 0.6931471805599453f

/* The arguments every attention kernel takes, the first member of each kernel's parameters
 * (mla_io_of fills it from the call's arguments). */
typedef struct {
  const __nv_bfloat16 *q; /* [T, H, 576] bf16 */
  const void *kv;         /* bf16 [num_slots, kv_stride] or packed FP8 [num_slots] x 656 B */
  int64_t kv_stride;      /* bf16 rows: elements between rows (a multiple of 8) */
  int64_t num_slots;      /* entries outside [0, num_slots) are skipped */
  const int32_t *indices; /* [T, indices_stride] global slots, topk used */
  int64_t indices_stride;
  const int32_t *lens;    /* [T] or NULL: entries at or past lens[t] are skipped */
  __nv_bfloat16 *out;     /* [T, H, 512] bf16 */
  float *lse;             /* [T, H] float32, or NULL */
} mla_io;

static inline mla_io mla_io_of(const dsa_sparse_mla_args *a) {
  mla_io io;
  io.q = (const __nv_bfloat16 *)a->q;
  io.kv = a->kv_cache;
  io.kv_stride = a->kv_stride;
  io.num_slots = a->num_slots;
  io.indices = a->indices;
  io.indices_stride = a->indices_stride;
  io.lens = a->lens;
  io.out = (__nv_bfloat16 *)a->out;
  io.lse = a->lse;
  return io;
}

/* The softmax scale in the log2 domain. */
static inline float mla_scale_log2(const dsa_sparse_mla_args *a) { return a->softmax_scale * MLA_LOG2E; }

/* Host: a grid of num_tokens x per_token CTAs in launches of at most 2^31 - 1 CTAs (gridDim.x);
 * launch(t0, nt) runs tokens [t0, t0 + nt). */
template <typename F>
static cudaError_t mla_launch_tokens(int64_t num_tokens, int64_t per_token, F launch) {
  const int64_t max_tokens = (int64_t)0x7fffffff / per_token;
  for (int64_t t0 = 0; t0 < num_tokens; t0 += max_tokens) {
    const int64_t nt = num_tokens - t0 < max_tokens ? num_tokens - t0 : max_tokens;
    const cudaError_t err = launch(t0, nt);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

/* The natural-log lse of a row from its running max m (log2 domain) and sum l; -inf when the row had
 * no valid entry (l = 0). */
static __device__ __forceinline__ float mla_lse(float m, float l) {
  return l > 0.f ? (m + log2f(l)) * MLA_LN2 : -INFINITY;
}
/* The KV slot of entry e of an index row, or -1 when the entry is skipped: e at or past the row's
 * end (topk, lens), or an index outside [0, num_slots). */
static __device__ __forceinline__ int mla_entry_slot(const int32_t *idx_row, int e, int end, int64_t num_slots) {
  if (e >= end) return -1;
  const int idx = __ldg(idx_row + e);
  return (idx >= 0 && (int64_t)idx < num_slots) ? idx : -1;
}
/* The same in two halves, for a loop that loads its entries one iteration ahead: the raw entry (-1
 * past `end`) now, the range check where it is used, so the thread does not stall on the load. */
static __device__ __forceinline__ int mla_entry_raw(const int32_t *idx_row, int e, int end) {
  return e < end ? __ldg(idx_row + e) : -1;
}
/* One compare: a negative idx is >= 2^31 as unsigned, and num_slots <= 2^31 (mla_slots_cap). */
static __device__ __forceinline__ int mla_slot_checked(int idx, int64_t num_slots) {
  return (int64_t)(uint32_t)idx < num_slots ? idx : -1;
}
/* num_slots as a kernel using mla_slot_checked takes it: no int32 index reaches 2^31, so the cap
 * changes no result. */
static inline int64_t mla_slots_cap(int64_t num_slots) {
  return num_slots < DSA_ATTN_SLOTS_CAP ? num_slots : DSA_ATTN_SLOTS_CAP;
}
