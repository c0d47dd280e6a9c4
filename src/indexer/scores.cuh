/*
 * indexer/scores.cuh — what every scoring kernel does the same way: a CTA's token group (each
 * token's scored length, first key coordinate, where its -inf tail starts), the range of key tiles
 * a CTA scores, the -inf tail of the scores-only calls, q's weights and bf16 rows, and (host) how
 * tokens form groups.
 */
#pragma once
#include <cuda_bf16.h>

#include "common/ptx/sync.cuh"
#include "common/rows.cuh"
#include "kernels.h"

#define SC_MAX_T 16 /* tokens a CTA groups at most */

/* Per-CTA token-group state in shared memory. */
typedef struct {
  int len[SC_MAX_T];   /* scored length (0: not scored) */
  int begin[SC_MAX_T];
  int fill[SC_MAX_T];  /* fill_tail: -inf from this position on (the visible length) */
  int any_negative_qscale;
} sc_group;

/* Token ta's weight for head h times the softmax scale (weights float32 or bf16, rows strided). */
static __device__ __forceinline__ float sc_weight(const dsa_scores_params &p, long long ta, int h) {
  const long long off = ta * p.q.weights_stride + h;
  return (p.q.weights_dtype == DSA_DTYPE_F32 ? ((const float *)p.q.weights)[off]
                                             : __bfloat162float(((const __nv_bfloat16 *)p.q.weights)[off])) *
         p.q.softmax_scale;
}

/* bf16 q for f16 tensor cores: a lane's four values of a 128-dim row (raw: its 8 bytes) times the
 * power of two 2^e that puts the row's amax in (2^13, 2^14] — f16 then holds every bf16 value of the
 * row exactly (down to amax * 2^-27), and 128 products with |k| <= 448 stay far below f32's range;
 * e = 0 for a zero or non-finite row. Returns 2^-e, which undoes it after the dot product. Every
 * lane of the warp calls it (the amax is warp-wide). */
static __device__ __forceinline__ float sc_bf16_row_scaled(uint2 raw, float v[4]) {
  v[0] = __uint_as_float(raw.x << 16);
  v[1] = __uint_as_float(raw.x & 0xffff0000u);
  v[2] = __uint_as_float(raw.y << 16);
  v[3] = __uint_as_float(raw.y & 0xffff0000u);
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  int e = 0;
  if (amax > 0.f && isfinite(amax)) {
    int ex;
    frexpf(amax, &ex); /* amax = f * 2^ex, f in [0.5, 1) */
    e = min(max(14 - ex, -126), 100); /* keep 2^-e a finite, non-zero float */
  }
#pragma unroll
  for (int i = 0; i < 4; i++) v[i] = ldexpf(v[i], e);
  return ldexpf(1.f, -e);
}

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

/* The key tiles [*tile_begin, *tile_end) of tile_keys keys that CTA blockIdx.x scores: its
 * tiles_per_cta tiles, cut to the group's union [lo, hi) of visible keys. Returns false — after
 * filling this CTA's part of the -inf tail — when there is nothing to score; on true the caller
 * fills the tail at its end over [*range_lo, *range_hi) (the CTA's tiles in output positions). */
static __device__ __forceinline__ bool sc_cta_tiles(const dsa_scores_params &p, const sc_group *grp, int nt, int t0,
                                                    int lo, int hi, int tile_keys, int tiles_per_cta,
                                                    int *tile_begin, int *tile_end, long long *range_lo,
                                                    long long *range_hi) {
  const int tile_first = blockIdx.x * tiles_per_cta;
  const int tile_last = tile_first + tiles_per_cta;
  *range_lo = (long long)tile_first * tile_keys;
  *range_hi = (long long)tile_last * tile_keys;
  *tile_end = min(tile_last, (hi + tile_keys - 1) / tile_keys);
  *tile_begin = max(tile_first, lo / tile_keys);
  if (hi <= lo || *tile_begin >= *tile_end) {
    sc_fill_tail(p, grp, nt, t0, *range_lo, *range_hi);
    return false;
  }
  return true;
}

/* A scoring CTA's start, the same in every scorer: its token group (blockIdx.y, T tokens), the
 * group's lengths and key union (sc_group_setup), its key tiles (sc_cta_tiles); first lets the top-k
 * kernel after this one start launching (it waits with griddepcontrol.wait before reading scores).
 * False: nothing to score here, the CTA returns. */
typedef struct {
  int t0, nt;                  /* first token of the group, tokens in it */
  int lo, hi;                  /* union of the tokens' visible key coordinates */
  int tile_begin, tile_end;    /* this CTA's tiles */
  long long range_lo, range_hi; /* its part of the -inf tail (sc_fill_tail at its end) */
} sc_cta;

static __device__ __forceinline__ bool sc_cta_begin(const dsa_scores_params &p, sc_group *grp, int T, int tile_keys,
                                                    int tiles_per_cta, sc_cta *c) {
  c->t0 = blockIdx.y * T;
  c->nt = min(T, p.num_tokens - c->t0);
  ptx_griddep_launch_dependents();
  sc_group_setup(p, grp, c->nt, c->t0, &c->lo, &c->hi);
  return sc_cta_tiles(p, grp, c->nt, c->t0, c->lo, c->hi, tile_keys, tiles_per_cta, &c->tile_begin, &c->tile_end,
                      &c->range_lo, &c->range_hi);
}

/* Host: a scorer's grid — tiles_per_cta (*tpc, at most max_tpc) so that about `ctas` CTAs cover
 * total_tiles key tiles for each of `groups` token groups (grid.y). */
static inline dim3 sc_grid(int total_tiles, int groups, long long ctas, int max_tpc, int *tpc) {
  long long t = ((long long)total_tiles * groups + ctas - 1) / ctas;
  if (t < 1) t = 1;
  if (t > max_tpc) t = max_tpc;
  *tpc = (int)t;
  return dim3((unsigned)((total_tiles + t - 1) / t), (unsigned)groups);
}

/* Host: how a scoring launch groups its tokens — decode: one request's q_len_per_req tokens (they
 * see the same keys); prefill: prefill_T consecutive tokens — and how far key coordinates reach
 * (prefill: workspace rows, <= DSA_MAX_ROW_LEN; with fill_tail the CTAs also cover the output
 * positions up to max_len, which may pass num_ws_rows). */
static inline void sc_token_groups(const dsa_scores_params *p, int prefill_T, int *T, int *groups, int *max_x) {
  if (p->rows.mode == DSA_ROWS_DECODE) {
    *T = p->rows.q_len_per_req;
    *groups = p->num_tokens / *T;
    *max_x = p->rows.max_len;
    return;
  }
  *T = prefill_T;
  *groups = (p->num_tokens + prefill_T - 1) / prefill_T;
  *max_x = (int)p->rows.num_ws_rows;
  if (p->fill_tail && p->rows.max_len > *max_x) *max_x = p->rows.max_len;
}
