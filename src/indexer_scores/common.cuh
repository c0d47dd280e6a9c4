/*
 * indexer_scores/common.cuh — what both scoring kernels do the same way: a CTA's token group (each
 * token's scored length, first key coordinate, where its -inf tail starts) and the -inf tail of the
 * scores-only calls.
 */
#pragma once
#include "dsa_kernels.h"
#include "rows.cuh"

#define SC_MAX_T 16 /* tokens a CTA groups at most */

/* Per-CTA token-group state in shared memory. */
typedef struct {
  int len[SC_MAX_T];   /* scored length (0: not scored) */
  int begin[SC_MAX_T];
  int fill[SC_MAX_T];  /* fill_tail: -inf from this position on (the visible length) */
  int any_negative_qscale;
} sc_group;

/* Fills the group's lengths (threads 0..SC_MAX_T-1) and, after a barrier, returns in every thread
 * the union [*lo, *hi) of the key coordinates its tokens see (*hi <= *lo: none). */
static __device__ __forceinline__ void sc_group_setup(const dsa_scores_params &p, sc_group *grp, int nt, int t0,
                                                      int *lo_out, int *hi_out) {
  const int tid = threadIdx.x;
  if (tid < SC_MAX_T) {
    int L = 0, b = 0, f = 0x7fffffff;
    if (tid < nt) {
      L = rows_len(p.rows, t0 + tid);
      b = rows_begin(p.rows, t0 + tid);
      f = L;
      if (L <= p.skip_len) L = 0;
    }
    grp->len[tid] = L;
    grp->begin[tid] = b;
    grp->fill[tid] = f;
  }
  if (tid == 0) grp->any_negative_qscale = 0;
  __syncthreads();
  int lo = 0x7fffffff, hi = 0;
  for (int i = 0; i < nt; i++) {
    if (grp->len[i] > 0) {
      lo = min(lo, grp->begin[i]);
      hi = max(hi, grp->begin[i] + grp->len[i]);
    }
  }
  *lo_out = lo;
  *hi_out = hi;
}

/* fill_tail: positions [L, max_len) of the group's rows inside [range_lo, range_hi) (this CTA's
 * tiles, in output positions) get -inf; never overlaps a score store (those are below L). */
static __device__ __forceinline__ void sc_fill_tail(const dsa_scores_params &p, const sc_group *grp, int nt, int t0,
                                                    long long range_lo, long long range_hi) {
  if (!p.fill_tail) return;
  if (range_hi > p.rows.max_len) range_hi = p.rows.max_len;
  for (int ti = 0; ti < nt; ti++) {
    float *row = p.scores + (long long)(t0 + ti) * p.scores_stride;
    for (long long i = (grp->fill[ti] > range_lo ? grp->fill[ti] : range_lo) + threadIdx.x; i < range_hi;
         i += blockDim.x)
      row[i] = -INFINITY;
  }
}
