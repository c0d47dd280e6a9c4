/*
 * cp/merge_runs.cu — dsa_topk_merge over a cluster, the output placed by merging the lists' runs:
 * no sort when each list's ids ascend (what dsa_cp_candidates keeps of dsa_topk's output: a rank's
 * top-k in ascending local position, which its shard maps to ascending global positions).
 *
 *   in   cand_scores, cand_ids [num_lists, num_rows, k_in]   (num_lists <= DSA_MERGE_RUNS_MAX_LISTS)
 *   out  indices [num_rows, topk], lens [num_rows]           (dsa.h: ascending id order, -1 after)
 *
 * A row's n = num_lists * k_in candidates (<= 16,384) are cut into C = ceil(n / 2048) slices in flat
 * (list-major) order, one CTA of 512 threads each (config.h), 4 consecutive candidates a thread held in
 * registers as composites (score key << 32 | ~id, common/score_key.cuh; 0 = no candidate); the C CTAs
 * of a row form one thread-block cluster (C = 1: a plain CTA). A CTA:
 *   1. range: publishes its smallest and largest key and its candidate count; after a cluster barrier
 *      every CTA reads the C triples: the row's key range and count, k = min(topk, count);
 *   2. select (k < count): radix passes over the composites offset by the row's smallest key — the
 *      first digit 11 bits spread over the key range, then 11 bits a pass below the bits found —
 *      each a local shared-memory histogram with 64 group sums, one cluster barrier, then warp 0
 *      finds the threshold bin from the C CTAs' group sums and then from that one group's bins (two
 *      rounds of loads over the SM-to-SM network instead of C whole histograms); until the bin holds
 *      exactly what is still needed: the k-th composite's prefix T, selected <=> composite >= T;
 *   3. gather: its selected in flat order (block scan) and, for each list starting in its slice, its
 *      selected before that start; after a cluster barrier each CTA knows its offset among the row's
 *      selected and where each list's selected begin, stores its selected ids at their offsets in its
 *      `cat` and copies that segment into every peer's (16-byte stores over the SM-to-SM network);
 *      after one more cluster barrier every CTA holds the row's selected ids, list after list;
 *   4. place: if each list's selected ids ascend (checked on `cat`), id x, the i-th selected of list
 *      w, goes to i + sum over the other lists v of their selected below x (at most x for v < w: a
 *      permutation even if ids repeat) — binary searches of the other runs in shared memory, all v
 *      at once; each CTA places its own selected. Lists in another order: rank 0 sorts `cat`
 *      (cub::BlockRadixSort): exact, slower.
 * No workspace; a row costs at least four cluster barriers (range, a pass, counts, ids).
 * Measured (H200, 2026-12-05; docs/PERF.md): one token of 8 x 2048 candidates 15.2 us, a warp's path
 * about 1,900 instructions at 13-14 cycles each (latency-bound: fixed-latency waits, instruction
 * fetch, the barriers); host/choose.c picks it where a row holds 7 slices or more and the clusters fit one
 * wave (elsewhere merge_tree.cu's one CTA a row is faster).
 */
#include <cub/block/block_radix_sort.cuh>
#include <stddef.h>
#include <stdint.h>

#include "common/launch.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "common/score_key.cuh"
#include "cp/merge_load.cuh"
#include "kernels.h"
#include "topk/radix.cuh" /* block_exclusive_sum, warp_inclusive_sum */

#define MR_THREADS DSA_MERGE_RUNS_THREADS
#define MR_ITEMS (DSA_MERGE_RUNS_SLICE / MR_THREADS) /* candidates a thread */
#define MR_WARPS (MR_THREADS / 32)
#define MR_SLICE DSA_MERGE_RUNS_SLICE /* candidates a CTA: MR_THREADS x MR_ITEMS */
#define MR_BINS 2048                  /* a digit of 11 bits */
#define MR_GROUPS (MR_BINS / 32)      /* group g: bins [32g, 32g + 32) */
#define MR_LISTS DSA_MERGE_RUNS_MAX_LISTS
#define MR_MAX_CLUSTER 8
static_assert(MR_SLICE == MR_THREADS * MR_ITEMS, "config.h's slice is the CTA's candidates");
static_assert(MR_SLICE * MR_MAX_CLUSTER >= DSA_MAX_MERGE_CANDIDATES, "a row fits a portable cluster");
static_assert(MR_SLICE >= DSA_MAX_TOPK, "the fallback sorts a row's selected in one CTA");
static_assert(MR_GROUPS == 2 * 32, "warp 0 takes two groups a lane");
static_assert(3 * MR_WARPS + 8 >= 32, "block_exclusive_sum's warp 0 writes 32 scratch entries");
static_assert((MR_ITEMS == 8 || MR_ITEMS == 4) && DSA_MAX_TOPK % MR_ITEMS == 0,
              "a thread's candidates are one or two 16-byte loads; step 4's check reads its cat entries so");

typedef cub::BlockRadixSort<int, MR_THREADS, MR_ITEMS> mr_sort;

typedef struct {
  union {
    struct {
      uint32_t hist[2][MR_BINS];    /* this CTA's histogram of a pass (two: peers may still read the
                                       previous pass's while this one is counted) */
      uint32_t group[2][MR_GROUPS]; /* its group sums */
    } pass;
    mr_sort::TempStorage sort;      /* step 4's fallback (after the last barrier: no peer reads) */
  } u;
  __align__(16) int32_t cat[DSA_MAX_TOPK]; /* the row's selected ids, list after list (every CTA's copy) */
  int32_t below[MR_LISTS + 1];       /* this CTA's selected before list w's first candidate (peers read) */
  int32_t list_start[MR_LISTS + 1];  /* the row's: list w's selected are cat[list_start[w], [w + 1]) */
  uint32_t range[3];                 /* this CTA's smallest key, largest key, candidates (peers read) */
  int32_t n_sel;                     /* this CTA's selected (peers read) */
  int32_t scratch[3 * MR_WARPS + 8]; /* the range's three values a warp; block_exclusive_sum's 32 */
  uint32_t row_kmin, row_kmax;
  int32_t row_valid;
  int32_t bin, above, in_bin;        /* a pass's answer from warp 0 */
  int32_t offset, total;             /* this CTA's first place among the row's selected; their count */
} mr_smem;

/* A barrier over the row's CTAs: cluster-wide release / acquire of shared memory when C > 1. */
static __device__ __forceinline__ void mr_sync(int C) {
  if (C > 1) ptx_cluster_sync();
  else __syncthreads();
}

/* The 32-bit word at p in CTA r of the cluster (C = 1: this CTA's). */
static __device__ __forceinline__ uint32_t mr_peer(const void *p, int r, int C) {
  return C == 1 ? *(const volatile uint32_t *)p : ptx_ld_cluster_u32(ptx_mapa(ptx_smem_u32(p), (uint32_t)r));
}

/* The thread's candidates (cp/merge_load.cuh) as composites, 0 past n or where the id is negative. */
static __device__ __forceinline__ void mr_load(const dsa_topk_merge_args &a, int row, int f0, int n,
                                               uint64_t c[MR_ITEMS]) {
  float s[MR_ITEMS];
  int id[MR_ITEMS];
  merge_load<MR_ITEMS>(a, row, f0, n, s, id);
#pragma unroll
  for (int u = 0; u < MR_ITEMS; ++u) c[u] = id[u] >= 0 ? make_comp(score_key(s[u]), id[u]) : 0ull;
}

/* Warp 0, after the pass's cluster barrier: the bin of the need-th largest counted composite (bins
 * from the top) in the sum of the C CTAs' histograms `buf`, the count above it and in it -> sm->bin,
 * above, in_bin. First the group: lane l sums groups 63 - 2l and 62 - 2l over the CTAs, a scan over
 * the lanes from the top finds it; then its 32 bins, a lane each, the same way. */
static __device__ void mr_find_bin(mr_smem *sm, int buf, int need, int C) {
  const int lane = threadIdx.x & 31;
  const int ga = MR_GROUPS - 1 - 2 * lane, gb = ga - 1;
  uint32_t pa[MR_MAX_CLUSTER], pb[MR_MAX_CLUSTER];
#pragma unroll
  for (int r = 0; r < MR_MAX_CLUSTER; ++r)
    if (r < C) {
      pa[r] = mr_peer(&sm->u.pass.group[buf][ga], r, C);
      pb[r] = mr_peer(&sm->u.pass.group[buf][gb], r, C);
    }
  uint32_t va = 0, vb = 0;
#pragma unroll
  for (int r = 0; r < MR_MAX_CLUSTER; ++r)
    if (r < C) va += pa[r], vb += pb[r];
  const uint32_t s = va + vb;
  const uint32_t incl = warp_inclusive_sum(s);
  /* no bin reaching need happens only with counts that disagree with the candidates (it cannot with
   * the composites in registers); the answer then ends the passes */
  int bin = 0, above = 0, in_bin = need;
  const unsigned hit = __ballot_sync(0xffffffffu, incl >= (uint32_t)need);
  if (hit) {
    const int l = __ffs(hit) - 1;
    const uint32_t before = __shfl_sync(0xffffffffu, incl - s, l), a_l = __shfl_sync(0xffffffffu, va, l);
    const bool in_a = before + a_l >= (uint32_t)need;
    const int g = in_a ? MR_GROUPS - 1 - 2 * l : MR_GROUPS - 2 - 2 * l;
    const uint32_t above_g = in_a ? before : before + a_l;
    const int b = 32 * g + 31 - lane; /* lane 0 the group's top bin */
    uint32_t p[MR_MAX_CLUSTER];
#pragma unroll
    for (int r = 0; r < MR_MAX_CLUSTER; ++r)
      if (r < C) p[r] = mr_peer(&sm->u.pass.hist[buf][b], r, C);
    uint32_t v = 0;
#pragma unroll
    for (int r = 0; r < MR_MAX_CLUSTER; ++r)
      if (r < C) v += p[r];
    const uint32_t incl2 = warp_inclusive_sum(v);
    const unsigned hit2 = __ballot_sync(0xffffffffu, above_g + incl2 >= (uint32_t)need);
    const int l2 = hit2 ? __ffs(hit2) - 1 : 31;
    bin = 32 * g + 31 - l2;
    above = (int)(above_g + __shfl_sync(0xffffffffu, incl2 - v, l2));
    in_bin = hit2 ? (int)__shfl_sync(0xffffffffu, v, l2) : need - above;
  }
  if (lane == 0) {
    sm->bin = bin;
    sm->above = above;
    sm->in_bin = in_bin;
  }
}

__global__ void __launch_bounds__(MR_THREADS, 1024 / MR_THREADS) topk_merge_runs_kernel(const dsa_topk_merge_args a) {
  __shared__ __align__(16) mr_smem sm; /* hist read as uint4 */
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int C = (int)ptx_cluster_nctarank(), rank = (int)ptx_cluster_ctarank();
  const int row = blockIdx.x / C;
  const int W = a.num_lists, n = W * a.k_in;
  const int slice0 = rank * MR_SLICE, slice_len = max(0, min(MR_SLICE, n - slice0));

  /* 1. range: the candidates, this CTA's key range and count, then the row's */
  uint64_t c[MR_ITEMS];
  mr_load(a, row, slice0 + tid * MR_ITEMS, n, c);
  uint32_t mn = 0xffffffffu, mx = 0u, nv = 0u;
#pragma unroll
  for (int u = 0; u < MR_ITEMS; ++u)
    if (c[u]) {
      const uint32_t key = (uint32_t)(c[u] >> 32);
      mn = min(mn, key);
      mx = max(mx, key);
      ++nv;
    }
  for (int b = tid; b < MR_BINS; b += MR_THREADS) sm.u.pass.hist[0][b] = 0u;
  if (tid < MR_GROUPS) sm.u.pass.group[0][tid] = 0u;
  mn = __reduce_min_sync(0xffffffffu, mn);
  mx = __reduce_max_sync(0xffffffffu, mx);
  nv = __reduce_add_sync(0xffffffffu, nv);
  if (lane == 0) {
    sm.scratch[warp] = (int)mn;
    sm.scratch[MR_WARPS + warp] = (int)mx;
    sm.scratch[2 * MR_WARPS + warp] = (int)nv;
  }
  __syncthreads();
  if (warp == 0) {
    const bool lw = lane < MR_WARPS;
    mn = __reduce_min_sync(0xffffffffu, lw ? (uint32_t)sm.scratch[lane] : 0xffffffffu);
    mx = __reduce_max_sync(0xffffffffu, lw ? (uint32_t)sm.scratch[MR_WARPS + lane] : 0u);
    nv = __reduce_add_sync(0xffffffffu, lw ? (uint32_t)sm.scratch[2 * MR_WARPS + lane] : 0u);
    if (lane == 0) {
      sm.range[0] = mn;
      sm.range[1] = mx;
      sm.range[2] = nv;
    }
  }
  mr_sync(C); /* every CTA's range is complete */
  if (warp == 0) {
    uint32_t pm = 0xffffffffu, px = 0u, pv = 0u;
    if (lane < C) {
      pm = mr_peer(&sm.range[0], lane, C);
      px = mr_peer(&sm.range[1], lane, C);
      pv = mr_peer(&sm.range[2], lane, C);
    }
    pm = __reduce_min_sync(0xffffffffu, pm);
    px = __reduce_max_sync(0xffffffffu, px);
    pv = __reduce_add_sync(0xffffffffu, pv);
    if (lane == 0) {
      sm.row_kmin = pm;
      sm.row_kmax = px;
      sm.row_valid = (int)pv;
    }
  }
  __syncthreads();
  const int valid = sm.row_valid;
  const int k = min(a.topk, valid);
  const uint64_t kbase = (uint64_t)sm.row_kmin << 32; /* c - kbase: the key's offset from the row's smallest */

  /* 2. select: T, the k-th largest offset composite's prefix (0: every candidate, k = valid) */
  uint64_t T = 0ull;
  if (k < valid) {
    const uint32_t span = sm.row_kmax - sm.row_kmin;
    const int sh = merge_first_shift(span);
    int need = k, shift = 64, pass = 0; /* offset bits [shift, 64) are T's (64: none yet) */
    for (;;) {
      int width, nsh;
      merge_next_digit(shift, sh, &width, &nsh);
      const uint64_t dmask = (1ull << width) - 1;
      const int buf = pass & 1;
      uint32_t *h = sm.u.pass.hist[buf];
#pragma unroll
      for (int u = 0; u < MR_ITEMS; ++u) {
        const uint64_t oc = c[u] - kbase;
        if (c[u] && (shift == 64 || (oc >> shift) == (T >> shift))) atomicAdd(&h[(oc >> nsh) & dmask], 1u);
      }
      __syncthreads();
      { /* group sums: thread t adds bins [B t, B t + B), B = 2048 / threads (8 or 4), 32 / B threads a group */
        constexpr int B = MR_BINS / MR_THREADS, TPG = 32 / B;
        uint32_t s = 0u;
#pragma unroll
        for (int q = 0; q < B / 4; ++q) {
          const uint4 v = *(const uint4 *)&h[B * tid + 4 * q];
          s += v.x + v.y + v.z + v.w;
        }
#pragma unroll
        for (int o = 1; o < TPG; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (tid % TPG == 0) sm.u.pass.group[buf][tid / TPG] = s;
      }
      mr_sync(C); /* every CTA's histogram and group sums of this pass are complete */
      /* the other buffer is free: every CTA finished reading it (the previous pass) before this barrier */
      for (int b = tid; b < MR_BINS; b += MR_THREADS) sm.u.pass.hist[buf ^ 1][b] = 0u;
      if (tid < MR_GROUPS) sm.u.pass.group[buf ^ 1][tid] = 0u;
      if (warp == 0) mr_find_bin(&sm, buf, need, C);
      __syncthreads();
      need -= sm.above;
      T |= (uint64_t)sm.bin << nsh;
      shift = nsh;
      ++pass;
      if (sm.in_bin == need || shift == 0) break;
    }
  }

  /* 3. gather: this CTA's selected in flat order, its offset among the row's, the lists' starts, and
   *    the ids into every CTA's cat */
  unsigned mask = 0u;
#pragma unroll
  for (int u = 0; u < MR_ITEMS; ++u)
    if (c[u] && c[u] - kbase >= T) mask |= 1u << u;
  int cta_sel;
  const int excl = block_exclusive_sum(__popc(mask), sm.scratch, &cta_sel);
  for (int w = 0; w <= W; ++w) { /* list w's first candidate, relative to this slice */
    const int b = w * a.k_in - slice0;
    if (b <= 0 || b >= slice_len) {
      if (tid == 0) sm.below[w] = b <= 0 ? 0 : cta_sel;
    } else if (b / MR_ITEMS == tid) {
      sm.below[w] = excl + __popc(mask & ((1u << (b % MR_ITEMS)) - 1u));
    }
  }
  if (tid == 0) sm.n_sel = cta_sel;
  mr_sync(C); /* every CTA's count and list offsets are complete */
  if (warp == 0) {
    const int nr = lane < C ? (int)mr_peer(&sm.n_sel, lane, C) : 0;
    const int incl = warp_inclusive_sum(nr);
    const int off = __shfl_sync(0xffffffffu, incl - nr, rank), tot = __shfl_sync(0xffffffffu, incl, 31);
    int ls = 0;
    if (lane <= W)
      for (int r = 0; r < C; ++r) ls += (int)mr_peer(&sm.below[lane], r, C);
    if (lane == 0) {
      sm.offset = off;
      sm.total = tot;
    }
    if (lane <= W) sm.list_start[lane] = min(ls, min(tot, k)); /* more than k only with repeated ids */
  }
  __syncthreads();
  const int m = min(sm.total, k);
  { /* this CTA's selected into its own cat, at their places among the row's */
    int o = sm.offset + excl;
#pragma unroll
    for (int u = 0; u < MR_ITEMS; ++u)
      if (mask >> u & 1u) {
        if (o < m) sm.cat[o] = (int)~(uint32_t)c[u]; /* the id back from the composite's low half */
        ++o;
      }
  }
  if (C > 1) { /* then that segment [lo, hi) into every peer's: 16-byte stores, single ids at its ends
                  (the chunks it shares with a neighbour's segment) */
    __syncthreads();
    const int lo = min(sm.offset, m), hi = min(sm.offset + sm.n_sel, m);
    const int q0 = lo >> 2, nq = hi > lo ? ((hi + 3) >> 2) - q0 : 0;
    const uint32_t cat0 = ptx_smem_u32(sm.cat);
    for (int it = tid; it < nq * (C - 1); it += MR_THREADS) {
      const int pr = it / nq, q = q0 + (it - pr * nq);
      const uint32_t peer = (uint32_t)(pr + (pr >= rank)), a0 = (uint32_t)(4 * q);
      if (4 * q >= lo && 4 * q + 4 <= hi) {
        ptx_st_cluster_u32x4(ptx_mapa(cat0 + 4u * a0, peer), *(const uint4 *)&sm.cat[4 * q]);
      } else {
        for (int i = max(4 * q, lo); i < min(4 * q + 4, hi); ++i)
          ptx_st_cluster_u32(ptx_mapa(cat0 + 4u * (uint32_t)i, peer), (uint32_t)sm.cat[i]);
      }
    }
  }
  mr_sync(C); /* every CTA's cat is whole; no CTA touches a peer's shared memory after this */

  /* 4. place: merge the lists' runs (each ascending), or sort. The check: thread t the pairs
   *    (i, i + 1), i in [MR_ITEMS t, MR_ITEMS (t + 1)), of cat but those where a list starts at i + 1 */
  bool unsorted = false;
  {
    const int i0 = tid * MR_ITEMS;
    if (i0 < m - 1) {
      unsigned starts = 0u; /* bit u: a list starts at i0 + u + 1 */
      for (int w = 1; w < W; ++w) {
        const int b = sm.list_start[w] - 1 - i0;
        if (b >= 0 && b < MR_ITEMS) starts |= 1u << b;
      }
      int v[MR_ITEMS + 1];
#pragma unroll
      for (int q = 0; q < MR_ITEMS / 4; ++q) {
        const int4 x = *(const int4 *)&sm.cat[i0 + 4 * q];
        v[4 * q] = x.x, v[4 * q + 1] = x.y, v[4 * q + 2] = x.z, v[4 * q + 3] = x.w;
      }
      v[MR_ITEMS] = i0 + MR_ITEMS < m ? sm.cat[i0 + MR_ITEMS] : 0;
#pragma unroll
      for (int u = 0; u < MR_ITEMS; ++u)
        if (i0 + u < m - 1 && !(starts >> u & 1u) && v[u] > v[u + 1]) unsorted = true;
    }
  }
  unsorted = __syncthreads_or(unsorted);
  int32_t *out = a.indices + (int64_t)row * a.topk;
  if (!unsorted) {
    const int hi = min(sm.offset + sm.n_sel, m);
    int longest = 0; /* the longest run: its bit length is the halvings a search needs */
    for (int v = 0; v < W; ++v) longest = max(longest, sm.list_start[v + 1] - sm.list_start[v]);
    const int steps = 32 - __clz(longest);
    for (int i = sm.offset + tid; i < hi; i += MR_THREADS) {
      const int x = sm.cat[i];
      int w = 0; /* i's list: the last whose start is at or below i */
      for (int v = 1; v < W; ++v) w += i >= sm.list_start[v];
      int base[MR_LISTS], len[MR_LISTS];
      uint32_t bound[MR_LISTS]; /* y below x in run v <=> y < bound: x + 1 for the runs before w's
                                   (ties); ids are >= 0, so x + 1 <= 2^31 and unsigned order is theirs */
#pragma unroll
      for (int v = 0; v < MR_LISTS; ++v) {
        base[v] = v < W ? sm.list_start[v] : 0;
        len[v] = v < W && v != w ? sm.list_start[v + 1] - base[v] : 0;
        bound[v] = (uint32_t)x + (v < w ? 1u : 0u);
      }
      /* every other run's count below x, the runs' searches side by side, branch-free: an empty
       * range stays where it is (its load clamped into cat) */
      for (int step = 0; step < steps; ++step)
#pragma unroll
        for (int v = 0; v < MR_LISTS; ++v) {
          if (v >= W) break; /* uniform: the lists there are */
          const int half = len[v] >> 1;
          const int y = sm.cat[min(base[v] + half, DSA_MAX_TOPK - 1)];
          const bool lower = len[v] > 0 && (uint32_t)y < bound[v];
          base[v] += lower ? half + 1 : 0;
          len[v] = lower ? len[v] - half - 1 : half;
        }
      int pos = i - sm.list_start[w];
#pragma unroll
      for (int v = 0; v < MR_LISTS; ++v)
        if (v < W && v != w) pos += base[v] - sm.list_start[v];
      out[pos] = x;
    }
  } else if (rank == 0) {
    int key[MR_ITEMS];
#pragma unroll
    for (int u = 0; u < MR_ITEMS; ++u) {
      const int i = tid * MR_ITEMS + u;
      key[u] = i < m ? sm.cat[i] : 0x7fffffff;
    }
    mr_sort(sm.u.sort).Sort(key);
#pragma unroll
    for (int u = 0; u < MR_ITEMS; ++u) {
      const int i = tid * MR_ITEMS + u;
      if (i < m) out[i] = key[u];
    }
  }
  if (rank == 0) {
    for (int i = m + tid; i < a.topk; i += MR_THREADS) out[i] = -1;
    if (a.lens && tid == 0) a.lens[row] = m;
  }
}

/* One cluster of ceil(n / 2048) CTAs a row (the choice table sends rows x CTAs <= 2^31 - 1). */
extern "C" int dsa_topk_merge_runs_launch(const dsa_topk_merge_args *a, cudaStream_t stream) {
  const int n = a->num_lists * a->k_in;
  const int C = (n + MR_SLICE - 1) / MR_SLICE;
  return (int)dsa_launch_cluster(topk_merge_runs_kernel, dim3((unsigned)((int64_t)a->num_rows * C)), MR_THREADS, 0,
                                 stream, false, C > 1 ? (unsigned)C : 0u, *a);
}
