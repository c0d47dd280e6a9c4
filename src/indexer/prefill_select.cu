/*
 * indexer/prefill_select.cu — the fused prefill indexer: scores and exact top-k without storing a
 * token's scores, in four launches a chunk of tokens (dsa_indexer_prefill_fused_launch):
 *
 *   1. sample   the FP8 wgmma scorer (scores_wgmma.cu, WT_OUT_SAMPLE) over every
 *               DSA_PREFILL_SAMPLE_STRIDE-th 64-key tile only, for tokens longer than `cap`:
 *               ~1/16 of the scoring, their scores into the token's sample row.
 *   2. tau      one CTA a token: the k-th largest composite (score key << 32 | ~position) of its
 *               sample. The sample is part of the row, so at least k of the row's composites are at
 *               or above it: every key of the top-k is. A token no longer than cap gets tau 0 (keep
 *               every key, at its position). Also the token's candidate count (0; L for tau 0).
 *   3. filter   the scorer over every tile (WT_OUT_FILTER): each key at or above its token's tau is
 *               appended to the token's list as a composite (~stride x k of them, wherever they are:
 *               ~32k at topk 2048, whatever the row's length).
 *   4. select   one CTA a token: the exact top-k of its list (block_comp_threshold, topk/radix.cuh),
 *               positions sorted ascending, written as the other top-k kernels write them. A list
 *               that overflowed its capacity (an adversarial order of scores: a sample holding only a
 *               row's smallest) or holds fewer than k (scores that differ between the passes: never
 *               seen) is not trusted: the CTA rescores the token's whole row on CUDA cores, keeping the
 *               best in the list by threshold and compaction — slow (tens of milliseconds at 1M
 *               positions), exact, and the same selection.
 *
 * Workspace (host/plan.c, dsa_plan_prefill_fused): per token 8 + 4 bytes, cap composites and, for
 * rows longer than cap, the sample row: 640 KiB a token at 1M positions and topk 2048, 416 KiB at
 * 128k — O(stride x topk + L / stride), not O(L).
 * Order and ties as every top-k of dsa: the composite ranks scores by their order-preserving key (NaN
 * lowest) and equal scores by the lower position; output ascending; deterministic (the lists' order
 * depends on atomics, the selection and its sorted output do not).
 */
#include <cub/block/block_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "common/launch.cuh"
#include "common/layout.h"
#include "common/ptx/convert.cuh"
#include "common/ptx/sync.cuh"
#include "common/rows.cuh"
#include "common/score_key.cuh"
#include "indexer/scores.cuh"
#include "kernels.h"
#include "topk/radix.cuh"

static_assert(64 * DSA_PREFILL_SAMPLE_STRIDE == 1 << DSA_PREFILL_SAMPLE_SHIFT, "sample tiles of 64 keys");

#define PS_TAU_THREADS 512
#define PS_THREADS 512
#define PS_SORT_ITEMS (DSA_MAX_TOPK / PS_THREADS)
typedef cub::BlockRadixSort<unsigned, PS_THREADS, PS_SORT_ITEMS> ps_sort;

/* A token's sample row as composites, four a load (entry j: key jb * 1024 + (j / 64) * 1024 + j % 64,
 * 0 where that key is not in the token's row [bt, bt + L)). Rows are 256-byte aligned. */
struct ps_sample_src {
  static constexpr int V = 4;
  const float *s;
  int bt, L, jb;
  __device__ __forceinline__ void load(int v, int n, unsigned long long (&c)[V]) const {
    const float4 f = __ldcg((const float4 *)s + v);
    const float fs[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
    for (int e = 0; e < V; e++) {
      const int j = 4 * v + e;
      const int x = ((jb + (j >> 6)) << DSA_PREFILL_SAMPLE_SHIFT) + (j & 63);
      c[e] = j < n && x >= bt && x < bt + L ? make_comp(score_key(fs[e]), x - bt) : 0ull;
    }
  }
};

/* A token's list, two composites a load; 0 for an entry naming no position of the row (only an entry
 * no pass wrote, with inconsistent inputs: an output aliasing a length). Lists are 512-byte aligned. */
struct ps_list_src {
  static constexpr int V = 2;
  const unsigned long long *c;
  int L;
  __device__ __forceinline__ unsigned long long valid(unsigned long long v) const {
    return (unsigned)~(uint32_t)v < (unsigned)L ? v : 0ull;
  }
  __device__ __forceinline__ void load(int v, int n, unsigned long long (&out)[V]) const {
    const ulonglong2 two = __ldcg((const ulonglong2 *)c + v);
    out[0] = 2 * v < n ? valid(two.x) : 0ull;
    out[1] = 2 * v + 1 < n ? valid(two.y) : 0ull;
  }
};

/* ---- 2. tau ---- */
__global__ void __launch_bounds__(PS_TAU_THREADS) prefill_tau_kernel(const dsa_scores_params p, const dsa_prefill_select s) {
  extern __shared__ __align__(16) unsigned char tau_smem[];
  bct_smem *sm = (bct_smem *)tau_smem;
  __shared__ int row[2];
  ptx_griddep_wait(); /* the sample pass's scores (and the previous chunk's select done with the state) */
  const int t = blockIdx.x;
  if (threadIdx.x == 0) {
    row[0] = rows_len(p.rows, t);
    row[1] = rows_begin(p.rows, t);
  }
  __syncthreads();
  const int L = row[0], bt = row[1];
  if (L <= s.topk) return; /* nothing scored: the select step takes every position */
  if (L <= s.cap) {        /* every key kept at its position */
    if (threadIdx.x == 0) {
      s.tau[t] = 0ull;
      s.count[t] = (uint32_t)L;
    }
    return;
  }
  const ps_sample_src src = {s.sample + (size_t)t * s.sample_len, bt, L, bt >> DSA_PREFILL_SAMPLE_SHIFT};
  unsigned long long thr = 0;
  const bool ok = block_comp_threshold(src, (int)s.sample_len, s.topk, sm, &thr);
  if (threadIdx.x == 0) {
    /* no k-th in the sample (a row longer than cap always has k sample keys: host/plan.c) keeps
     * everything, which overflows the list: the select step then rescores the token */
    s.tau[t] = ok && thr > 0ull ? thr : 1ull;
    s.count[t] = 0u;
  }
}

/* ---- 4. select ---- */
typedef struct {
  bct_smem bct;
  int sel[DSA_MAX_TOPK];
  typename ps_sort::TempStorage sort;
  float q[DSA_MAX_INDEX_HEADS][DSA_INDEX_HEAD_DIM]; /* the rescoring's query (q_scale applied) */
  float w[DSA_MAX_INDEX_HEADS];                     /* and weights (softmax_scale applied) */
  int n_sel, n_buf, L, bt;
} ps_smem;

/* Token t's score of the index-K slot `slot` (-inf outside the cache) on CUDA cores, in float32:
 * sum_h w[h] relu(scale x sum_d q[h][d] k[d]). */
static __device__ float ps_score(const dsa_scores_params &p, const ps_smem *sm, int H, long long slot) {
  if (slot < 0) return -INFINITY;
  int row;
  const long long page = div_page((int)slot, p.cache.page_size, &row);
  const uint8_t *pg = p.cache.data + page * p.cache.page_size * IDXK_SLOT_BYTES;
  const uint4 *kr = (const uint4 *)(pg + (long long)row * DSA_INDEX_HEAD_DIM);
  const float scale = *(const float *)(pg + (long long)p.cache.page_size * DSA_INDEX_HEAD_DIM + row * 4);
  uint32_t kw[32];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const uint4 v = kr[i];
    kw[4 * i] = v.x;
    kw[4 * i + 1] = v.y;
    kw[4 * i + 2] = v.z;
    kw[4 * i + 3] = v.w;
  }
  float s = 0.f;
  for (int h = 0; h < H; h++) {
    float d = 0.f;
#pragma unroll
    for (int i = 0; i < 32; i++) {
      uint32_t lo, hi;
      ptx_e4m3x4_to_f16x2x2(kw[i], lo, hi);
      const float2 a = __half22float2(*(const __half2 *)&lo), b = __half22float2(*(const __half2 *)&hi);
      const float4 q = *(const float4 *)&sm->q[h][4 * i];
      d = fmaf(q.x, a.x, d);
      d = fmaf(q.y, a.y, d);
      d = fmaf(q.z, b.x, d);
      d = fmaf(q.w, b.y, d);
    }
    s = fmaf(sm->w[h], fmaxf(d * scale, 0.f), s);
  }
  return s;
}

/* The slow exact path for token t: every key of its row rescored and appended to `list` while at or
 * above `floor` (at first every key); whenever the list nears its capacity the k largest are kept
 * and floor rises to the k-th. Returns the list's length: it holds the row's top k. */
static __device__ int ps_rescore(const dsa_scores_params &p, const dsa_prefill_select &s, int t, int L, int bt,
                                 int k, unsigned long long *list, ps_smem *sm) {
  const int tid = threadIdx.x, nt = blockDim.x, H = p.q.num_heads;
  const long long ta = (long long)p.rows.token_begin + t;
  for (int i = tid; i < H * DSA_INDEX_HEAD_DIM; i += nt) {
    const int h = i / DSA_INDEX_HEAD_DIM, d = i % DSA_INDEX_HEAD_DIM;
    const long long e = (ta * H + h) * DSA_INDEX_HEAD_DIM + d;
    float v;
    if (p.q.q_dtype == DSA_DTYPE_FP8_E4M3) {
      const uint32_t h2 = ptx_e4m3x2_to_f16x2((uint16_t)((const uint8_t *)p.q.q)[e]);
      v = __half2float(__ushort_as_half((unsigned short)(h2 & 0xffffu))) * p.q.q_scale[ta * H + h];
    } else {
      v = __bfloat162float(((const __nv_bfloat16 *)p.q.q)[e]);
    }
    sm->q[h][d] = v;
  }
  for (int h = tid; h < H; h += nt) sm->w[h] = sc_weight(p, ta, h);
  if (tid == 0) sm->n_buf = 0;
  __syncthreads();
  const ps_list_src src = {list, L};
  unsigned long long floor = 1ull; /* every composite of a row position is >= 1 */
  const int lane = tid & 31;
  for (int base = 0; base < L; base += nt) {
    const int i = base + tid;
    unsigned long long c = 0ull;
    if (i < L) c = make_comp(score_key(ps_score(p, sm, H, rows_key_slot(p.rows, t, bt + i))), i);
    const bool keep = c >= floor;
    const unsigned m = __ballot_sync(0xffffffffu, keep);
    int at = 0;
    if (lane == 0 && m) at = atomicAdd(&sm->n_buf, __popc(m));
    at = __shfl_sync(0xffffffffu, at, 0);
    const int idx = at + __popc(m & ((1u << lane) - 1u));
    if (keep && idx < s.cap) list[idx] = c; /* always below cap, but for inconsistent inputs (a row grown since its plan) */
    __syncthreads();
    if (sm->n_buf > s.cap - nt && sm->n_buf > k) { /* room for less than one more round: keep the k largest */
      unsigned long long thr = 0;
      block_comp_threshold(src, min(sm->n_buf, s.cap), k, &sm->bct, &thr); /* more than k: found */
      if (tid == 0) sm->n_sel = 0;
      __syncthreads();
      bct_for_each(src, min(sm->n_buf, s.cap), [&](unsigned long long v) {
        if (v >= thr) {
          const int at2 = atomicAdd(&sm->n_sel, 1);
          if (at2 < BCT_LIST) sm->bct.list[at2] = v;
        }
      });
      __syncthreads();
      const int kept = min(sm->n_sel, BCT_LIST);
      for (int j = tid; j < kept; j += nt) list[j] = sm->bct.list[j];
      __syncthreads();
      if (tid == 0) sm->n_buf = kept;
      floor = thr > 1ull ? thr : 1ull;
      __syncthreads();
    }
  }
  return min(sm->n_buf, s.cap);
}

__global__ void __launch_bounds__(PS_THREADS) prefill_select_kernel(const dsa_scores_params p, const dsa_prefill_select s) {
  extern __shared__ __align__(16) unsigned char sel_smem[];
  ps_smem *sm = (ps_smem *)sel_smem;
  ptx_griddep_wait(); /* the filtered pass's lists */
  const int t = blockIdx.x, tid = threadIdx.x;
  /* the row read once, by one thread, before anything is written (lens may alias a length input) */
  if (tid == 0) {
    sm->L = rows_len(p.rows, t);
    sm->bt = rows_begin(p.rows, t);
    sm->n_sel = 0;
  }
  __syncthreads();
  const int L = sm->L, bt = sm->bt, k = min(s.topk, L);
  int32_t *out = s.out + (size_t)t * s.topk;
  if (s.out_lens && tid == 0) s.out_lens[t] = k;
  if (L <= s.topk) {
    for (int i = tid; i < s.topk; i += PS_THREADS) out[i] = i < L ? rows_output(p.rows, t, i) : -1;
    return;
  }
  unsigned long long *list = s.cand + (size_t)t * s.cap;
  const ps_list_src src = {list, L};
  const unsigned long long tau = __ldcg(s.tau + t);
  const unsigned n = tau == 0ull ? (unsigned)L : __ldcg(s.count + t);
  int n_list = (int)n;
  unsigned long long thr = 0;
  if (n < (unsigned)k || n > (unsigned)s.cap || !block_comp_threshold(src, n_list, k, &sm->bct, &thr)) {
    n_list = ps_rescore(p, s, t, L, bt, k, list, sm);
    if (!block_comp_threshold(src, n_list, k, &sm->bct, &thr)) thr = ~0ull; /* inconsistent inputs: -1s */
  }
  /* the k composites at or above thr, by position */
  if (tid == 0) sm->n_sel = 0;
  __syncthreads();
  bct_for_each(src, n_list, [&](unsigned long long c) {
    if (c >= thr) {
      const int j = atomicAdd(&sm->n_sel, 1);
      if (j < k) sm->sel[j] = (int)~(uint32_t)c;
    }
  });
  __syncthreads();
  sorted_rows_output<ps_sort, PS_SORT_ITEMS>(sm->sort, sm->sel, min(sm->n_sel, k), L, s.topk, p.rows, t, out, tid);
}

extern "C" int dsa_indexer_prefill_fused_launch(const dsa_scores_params *p, const dsa_prefill_select *s,
                                                cudaStream_t stream) {
  const int n = p->num_tokens;
  if (n <= 0) return 0;
  int err;
  if (s->sample && s->sample_len > 0) { /* only tokens longer than cap need a sample */
    dsa_scores_params q = *p;
    q.skip_len = s->cap;
    if ((err = dsa_scores_wgmma_sample_launch(&q, s, stream)) != 0) return err;
  }
  static dsa_smem_cache tau_cache, sel_cache;
  if ((err = (int)dsa_launch_smem(prefill_tau_kernel, &tau_cache, dim3((unsigned)n), PS_TAU_THREADS, sizeof(bct_smem),
                                  stream, true, *p, *s)) != 0)
    return err;
  if ((err = dsa_scores_wgmma_filter_launch(p, s, stream)) != 0) return err;
  return (int)dsa_launch_smem(prefill_select_kernel, &sel_cache, dim3((unsigned)n), PS_THREADS, sizeof(ps_smem), stream,
                              true, *p, *s);
}
