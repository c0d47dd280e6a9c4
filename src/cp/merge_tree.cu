/*
 * cp/merge_tree.cu — dsa_topk_merge in one CTA a row, the candidates in registers, the selected
 * ids put in order by a tree of pairwise merges of the lists' ascending runs (what dsa_cp_candidates
 * hands over: a rank's top-k in ascending position, so ascending global ids).
 *
 *   in   cand_scores, cand_ids [num_lists, num_rows, k_in]   (num_lists * k_in <= 16,384)
 *   out  indices [num_rows, topk], lens [num_rows]           (dsa.h: ascending id order, -1 after)
 *
 * One CTA of 1,024 threads a row; thread t holds the row's candidates [16 t, 16 t + 16) in flat
 * (list-major) order: score keys and ids (the composite score key << 32 | ~id of common/score_key.cuh
 * made where a pass needs it).
 * Phases, every one inside the CTA (no cluster, no workspace):
 *   1. range    the row's valid count and smallest / largest key (block reduce); k = min(topk, valid);
 *   2. select   (k < valid) radix passes over the composites offset by the row's smallest key, as
 *               merge_runs.cu counts them: the first digit 11 bits spread over the key range, then 11
 *               bits a pass below the bits found, a shared-memory histogram and topk/radix.cuh's
 *               find_bin a pass, until the bin holds exactly what is still needed: the k-th largest
 *               composite's prefix T, selected <=> composite >= T;
 *   3. compact  the selected ids in flat order (block scan) into `cat`: list after list, each list's
 *               selected a run; where each run starts;
 *   4. order    if every run ascends (checked) and there are at most TREE_MAX_LISTS of them: log2(W)
 *               rounds, each merging neighbouring runs pairwise into the other buffer — thread t
 *               finds outputs 2t and 2t + 1 by a merge-path search of their pair (the left run first
 *               on equal ids: deterministic whatever the ids), no sort. Otherwise cp/bitonic.cuh sorts
 *               `cat` (exact, slower);
 *   5. write    the sorted ids, -1 after, lens.
 * Why one CTA: select's and runs' costs are the path a warp runs (ncu: latency- and issue-bound, the
 * radix passes of 8 bits over 64-bit composites, the bitonic network, the cluster barriers); this
 * kernel keeps the candidates in registers, needs one or two passes on random scores, and puts 2,048
 * ids in order in three merge rounds (W = 8) instead of a 30-barrier network. Measured (H100, 2026-12-05,
 * docs/PERF.md): ahead of runs and select at every row count and list count but one token of 8 lists
 * (18.8 us against runs' 17.3), where its one SM issues every instruction (ncu: 2,470 a warp at 0.6
 * issued a scheduler-cycle); 64 tokens of 8 lists 21.1 us (select 32.3), 4096 tokens 530 (1,029).
 */
#include <stdint.h>

#include "common/launch.cuh"
#include "common/score_key.cuh"
#include "cp/bitonic.cuh"
#include "cp/merge_load.cuh"
#include "kernels.h"
#include "topk/radix.cuh" /* block_exclusive_sum, find_bin */

#define TREE_THREADS 1024
#define TREE_ITEMS (DSA_MAX_MERGE_CANDIDATES / TREE_THREADS) /* candidates a thread: 16 */
#define TREE_BINS 2048                                        /* a digit of 11 bits */
#define TREE_MAX_LISTS 64                                     /* runs merged; more lists: the sort */
#define TREE_OUT_PER_THREAD (DSA_MAX_TOPK / TREE_THREADS)     /* merge outputs a thread a round: 2 */
static_assert(TREE_THREADS * TREE_ITEMS == DSA_MAX_MERGE_CANDIDATES, "a row's candidates fit the CTA's registers");
static_assert(TREE_OUT_PER_THREAD * TREE_THREADS == DSA_MAX_TOPK, "a merge round covers every output");
static_assert(2 * TREE_THREADS >= DSA_MAX_TOPK, "bitonic_sort: two elements a thread");

typedef struct {
  uint32_t hist[TREE_BINS];                /* a pass's histogram */
  __align__(16) int32_t cat[2][DSA_MAX_TOPK]; /* the selected ids: runs (phase 3), then merge rounds' buffers */
  int32_t start[TREE_MAX_LISTS + 1];       /* run w is cat[b][start[w], start[w + 1]) */
  int32_t scratch[40];                     /* block scans, find_bin */
  uint32_t kmin[TREE_THREADS / 32], kmax[TREE_THREADS / 32];
  int32_t nvalid[TREE_THREADS / 32];
} tree_smem;

/* A candidate's composite offset from the row's smallest key: (key - kmin) << 32 | ~id. */
static __device__ __forceinline__ uint64_t tree_offset(uint32_t key, int id, uint32_t kmin) {
  return ((uint64_t)(key - kmin) << 32) | (uint32_t)~(uint32_t)id;
}

/* Output d of merging run A = cat[a, a + na) and run B = cat[b, b + nb) (A first on equal ids):
 * the number of A's elements among outputs [0, d) by a merge-path search, *ia; *ib = d - *ia. */
static __device__ __forceinline__ void tree_split(const int32_t *cat, int a, int na, int b, int nb, int d, int *ia,
                                                  int *ib) {
  int lo = max(0, d - nb), hi = min(d, na);
  while (lo < hi) { /* the first x whose A[x] does not come before B[d - 1 - x] */
    const int mid = (lo + hi) >> 1;
    if (cat[a + mid] <= cat[b + d - 1 - mid]) lo = mid + 1;
    else hi = mid;
  }
  *ia = lo;
  *ib = d - lo;
}

__global__ void __launch_bounds__(TREE_THREADS, 1) topk_merge_tree_kernel(const dsa_topk_merge_args a) {
  __shared__ tree_smem sm;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row = blockIdx.x;
  const int W = a.num_lists, n = W * a.k_in;

  /* 1. range: the candidates, the row's valid count and key range */
  uint32_t key[TREE_ITEMS];
  int id[TREE_ITEMS];
  {
    float s[TREE_ITEMS];
    merge_load<TREE_ITEMS>(a, row, tid * TREE_ITEMS, n, s, id);
#pragma unroll
    for (int u = 0; u < TREE_ITEMS; ++u) key[u] = score_key(s[u]); /* no 64-bit composite held: a pass makes it */
  }
  uint32_t mn = 0xffffffffu, mx = 0u, nv = 0u;
#pragma unroll
  for (int u = 0; u < TREE_ITEMS; ++u)
    if (id[u] >= 0) {
      mn = min(mn, key[u]);
      mx = max(mx, key[u]);
      ++nv;
    }
  for (int b = tid; b < TREE_BINS; b += TREE_THREADS) sm.hist[b] = 0u;
  mn = __reduce_min_sync(0xffffffffu, mn);
  mx = __reduce_max_sync(0xffffffffu, mx);
  nv = __reduce_add_sync(0xffffffffu, nv);
  if (lane == 0) {
    sm.kmin[warp] = mn;
    sm.kmax[warp] = mx;
    sm.nvalid[warp] = (int)nv;
  }
  __syncthreads();
  mn = __reduce_min_sync(0xffffffffu, sm.kmin[lane]); /* 32 warps: a lane each */
  mx = __reduce_max_sync(0xffffffffu, sm.kmax[lane]);
  const int valid = (int)__reduce_add_sync(0xffffffffu, (uint32_t)sm.nvalid[lane]);
  static_assert(TREE_THREADS / 32 == 32, "the range's second step: a lane a warp");
  const int k = min(a.topk, valid);

  /* 2. select: T, the k-th largest offset composite's prefix (0: every valid candidate, k = valid) */
  uint64_t T = 0ull;
  if (k < valid) {
    const uint32_t span = mx - mn;
    const int sh = merge_first_shift(span);
    int need = k, shift = 64; /* offset bits [shift, 64) are T's (64: none yet) */
    for (;;) {
      int width, nsh;
      merge_next_digit(shift, sh, &width, &nsh);
      const uint64_t dmask = (1ull << width) - 1;
      if (shift == 64) { /* the first digit: the key's offset alone */
#pragma unroll
        for (int u = 0; u < TREE_ITEMS; ++u)
          if (id[u] >= 0) atomicAdd(&sm.hist[((key[u] - mn) >> sh) & (TREE_BINS - 1)], 1u);
      } else {
#pragma unroll
        for (int u = 0; u < TREE_ITEMS; ++u) {
          const uint64_t oc = tree_offset(key[u], id[u], mn);
          if (id[u] >= 0 && (oc >> shift) == (T >> shift)) atomicAdd(&sm.hist[(oc >> nsh) & dmask], 1u);
        }
      }
      __syncthreads();
      int above;
      const int bin = find_bin(sm.hist, TREE_BINS, need, &above, sm.scratch); /* ends with a barrier */
      const int in_bin = (int)sm.hist[bin];
      need -= above;
      T |= (uint64_t)bin << nsh;
      shift = nsh;
      __syncthreads(); /* every thread has read hist[bin] */
      if (in_bin == need || shift == 0) break;
      for (int b = tid; b < TREE_BINS; b += TREE_THREADS) sm.hist[b] = 0u;
      __syncthreads();
    }
  }

  /* 3. compact: the selected ids in flat order into cat[0]; the runs' starts */
  unsigned mask = 0u;
#pragma unroll
  for (int u = 0; u < TREE_ITEMS; ++u)
    if (id[u] >= 0 && tree_offset(key[u], id[u], mn) >= T) mask |= 1u << u;
  int total;
  const int excl = block_exclusive_sum(__popc(mask), sm.scratch, &total);
  const int m = min(total, k); /* more than k only with repeated ids (against dsa.h): the first k kept */
  {
    int o = excl;
#pragma unroll
    for (int u = 0; u < TREE_ITEMS; ++u)
      if (mask >> u & 1u) {
        if (o < m) sm.cat[0][o] = id[u];
        ++o;
      }
  }
  const bool tree = W <= TREE_MAX_LISTS;
  if (tree)
    for (int w = 0; w <= W; ++w) { /* list w's first candidate: the thread holding it counts what is before */
      const int f = w * a.k_in, f0 = tid * TREE_ITEMS;
      if (f >= n ? tid == 0 : f / TREE_ITEMS == tid)
        sm.start[w] = min(f >= n ? total : excl + __popc(mask & ((1u << (f - f0)) - 1u)), m);
    }
  __syncthreads();

  /* 4. order: merge the runs, or sort. The check: thread t the pairs (i, i + 1), i in [2t, 2t + 2), of
   *    cat but those where a run starts at i + 1 */
  bool unsorted = !tree;
  if (tree)
    for (int i = TREE_OUT_PER_THREAD * tid; i < min(TREE_OUT_PER_THREAD * (tid + 1), m - 1); ++i) {
      bool starts = false;
      for (int w = 1; w < W; ++w) starts |= sm.start[w] == i + 1;
      if (!starts && sm.cat[0][i] > sm.cat[0][i + 1]) unsorted = true;
    }
  unsorted = __syncthreads_or(unsorted);
  int buf = 0;
  if (!unsorted) {
    for (int width = 1; width < W; width <<= 1, buf ^= 1) { /* runs [w, w + width) are merged already */
      const int32_t *cur = sm.cat[buf];
      int32_t *nxt = sm.cat[buf ^ 1];
      int g_end = -1, ia = 0, ib = 0, ra = 0, na = 0, rb = 0, nb = 0;
      for (int i = TREE_OUT_PER_THREAD * tid; i < min(TREE_OUT_PER_THREAD * (tid + 1), m); ++i) {
        if (i >= g_end) { /* output i's pair: the last whose first run starts at or below i */
          int g0 = 0;
          while (g0 + 2 * width < W && sm.start[g0 + 2 * width] <= i) g0 += 2 * width;
          const int g1 = min(g0 + width, W), g2 = min(g0 + 2 * width, W);
          ra = sm.start[g0];
          na = sm.start[g1] - ra;
          rb = sm.start[g1];
          nb = sm.start[g2] - rb;
          g_end = sm.start[g2];
          tree_split(cur, ra, na, rb, nb, i - ra, &ia, &ib);
        }
        const bool take_a = ia < na && (ib >= nb || cur[ra + ia] <= cur[rb + ib]);
        nxt[i] = take_a ? cur[ra + ia++] : cur[rb + ib++];
      }
      __syncthreads();
    }
  } else {
    int n2 = 64;
    while (n2 < m) n2 <<= 1;
    for (int i = m + tid; i < n2; i += TREE_THREADS) sm.cat[0][i] = 0x7fffffff;
    __syncthreads();
    if (m > 1) bitonic_sort(sm.cat[0], n2);
  }

  /* 5. write */
  int32_t *out = a.indices + (int64_t)row * a.topk;
  for (int i = tid; i < a.topk; i += TREE_THREADS) out[i] = i < m ? sm.cat[buf][i] : -1;
  if (a.lens && tid == 0) a.lens[row] = m;
}

/* One CTA of 1,024 threads a row. */
extern "C" int dsa_topk_merge_tree_launch(const dsa_topk_merge_args *a, cudaStream_t stream) {
  return (int)dsa_launch(topk_merge_tree_kernel, dim3((unsigned)a->num_rows), TREE_THREADS, 0, stream, false, *a);
}
