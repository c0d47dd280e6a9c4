/*
 * topk/slices.cu — top-k with a row in shared memory: a row is cut into C contiguous slices, one CTA
 * each, the C CTAs of a row one thread-block cluster (C = 1: a plain CTA; C up to 8). The choice
 * table (host/choose.c) sends it rows up to DSA_TOPK_ONE_CTA_MAX_LEN (any number of rows, C = 1),
 * few long rows (rows x C <= SMs), and rows with nothing to score. The order and the digits:
 * radix.cuh. A CTA:
 *   1. copies its slice into shared memory (cp.async, every load in flight at once; the host routes
 *      only rows whose slices fit: <= 40,960 positions for one CTA, <= 16,384 a cluster CTA);
 *   2. turns the scores into keys in place, finds the row's key range (over the cluster) and counts
 *      the first digit, 11 bits spread over that range; the cluster's histogram is the sum of the C
 *      CTAs' (read through distributed shared memory, the same sums in every CTA, so each finds the
 *      same threshold bin b1 on its own);
 *   3. keeps its elements of bin b1 as composites (shared memory) and runs the radix passes of 11
 *      bits over them, each pass a local histogram + one cluster barrier + the same sum, until
 *      the last bin holds exactly what is still needed — the k-th composite T;
 *   4. selected <=> comp >= T: each warp counts its contiguous part of the slice (ballots), the
 *      counts are scanned over warps and over the cluster's ranks, and a second walk writes the
 *      positions at their offsets: ascending, deterministic, no sort.
 * No workspace.
 */
#include <stddef.h>
#include <stdint.h>

#include "common/launch.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "common/rows.cuh"
#include "kernels.h"
#include "topk/radix.cuh"

#define TKS_THREADS 512
#define TKS_WARPS (TKS_THREADS / 32)
/* DSA_TOPK_MAX_CLUSTER (8: a portable cluster size; 16 measured slower than the chain, docs/PERF.md),
 * DSA_TOPK_SLICE_MAX (few long rows are cut into slices of at most this many positions) and
 * DSA_TOPK_ONE_CTA_MAX_LEN (rows up to this long run one CTA each, however many): config.h */
#define TKS_SMEM_KEYS DSA_TOPK_ONE_CTA_MAX_LEN /* positions of a slice held in shared memory (160 KB) */
#define TKS_CAND 4096          /* bin-b1 elements a CTA keeps in shared memory (composites) */
#define TKS_OUT_BATCH 4     /* output lookups (block table) a thread keeps in flight */
#define TKS_BATCH 4            /* shared-memory keys a thread loads before it uses them */
static_assert(TK_BINS == 4 * TKS_THREADS, "the cluster sum gives each thread four bins");
static_assert(TK_BINS >= DSA_MAX_TOPK, "step 4 keeps a CTA's selected positions in `sum`");

typedef struct {
  uint32_t hist[2][TK_BINS];   /* this CTA's histogram of the current pass (two: peers may still be
                                  reading the previous pass's) */
  uint32_t sum[TK_BINS];       /* the cluster's histogram of the current pass (C > 1) */
  uint64_t cand[TKS_CAND];     /* this CTA's elements of bin b1, as composites */
  int warp_off[TKS_WARPS];     /* step 4: each warp's selected count, then its offset in the CTA */
  int scratch[40];
  int len;                     /* the row's length, read once by thread 0 */
  int n_sel;                   /* this CTA's selected count, read by the higher ranks */
  int n_cand;
  uint32_t range[2];           /* this CTA's smallest and largest key (read by the peers) */
  uint32_t row_range[2];       /* the row's */
  __align__(16) uint32_t keys[4]; /* [nk + 4]: the slice's head as keys (dynamic size: last member) */
} tks_smem;

static size_t tks_smem_bytes(int max_len, int ctas) {
  const int per = (max_len + ctas - 1) / ctas;
  const int nk = per < TKS_SMEM_KEYS ? per : TKS_SMEM_KEYS;
  return offsetof(tks_smem, keys) + (size_t)(nk + 4) * 4;
}

/* Barrier over the row's CTAs; cluster-wide release / acquire of shared memory when C > 1. */
static __device__ __forceinline__ void tks_sync(int C) {
  if (C > 1) ptx_cluster_sync();
  else __syncthreads();
}

/* After a pass's local histogram: the row's histogram (C = 1: the CTA's own; else the sum over the
 * cluster, each thread four bins, the C peers' loads issued together). All threads get it. */
static __device__ const uint32_t *tks_total(tks_smem *sm, int which, int C) {
  tks_sync(C);
  if (C == 1) return sm->hist[which];
  const uint32_t a = ptx_smem_u32(&sm->hist[which][4 * threadIdx.x]);
  uint4 t = make_uint4(0u, 0u, 0u, 0u);
  for (int r0 = 0; r0 < C; r0 += 4) { /* four peers' loads in flight at a time */
    uint4 v[4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (r0 + r < C) v[r] = ptx_ld_cluster_u32x4(ptx_mapa(a, (uint32_t)(r0 + r)));
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (r0 + r < C) {
        t.x += v[r].x;
        t.y += v[r].y;
        t.z += v[r].z;
        t.w += v[r].w;
      }
  }
  *(uint4 *)&sm->sum[4 * threadIdx.x] = t;
  __syncthreads();
  return sm->sum;
}


/* f(j, key, valid) for every position j of the slice (all in shared memory: the host sizes it so);
 * every thread makes the same calls (valid = false past the end), so f may use warp votes. */
template <typename F>
static __device__ __forceinline__ void tks_each(const uint32_t *keys, int nk, F f) {
  /* TKS_BATCH keys loaded before any is used: f's shared-memory atomics would otherwise order
   * each load behind the previous element's atomic */
  for (int j0 = 0; j0 < nk; j0 += TKS_BATCH * TKS_THREADS) {
    uint32_t kv[TKS_BATCH];
#pragma unroll
    for (int u = 0; u < TKS_BATCH; ++u) {
      const int j = j0 + u * TKS_THREADS + (int)threadIdx.x;
      kv[u] = j < nk ? keys[j] : 0u;
    }
#pragma unroll
    for (int u = 0; u < TKS_BATCH; ++u) {
      const int j = j0 + u * TKS_THREADS + (int)threadIdx.x;
      f(j, kv[u], j < nk);
    }
  }
}

/* Step 4's walk over warp w's part [wb, we) of the slice, 32 consecutive positions a step,
 * TKS_BATCH steps' keys loaded before they are used: f(j, selected, ballot) in position order. */
template <typename F>
static __device__ __forceinline__ void tks_walk(const uint32_t *keys, int lo, int wb, int we, uint32_t kmin, uint64_t T,
                                                F f) {
  const int lane = threadIdx.x & 31;
  for (int j0 = wb; j0 < we; j0 += 32 * TKS_BATCH) {
    uint32_t key[TKS_BATCH];
#pragma unroll
    for (int u = 0; u < TKS_BATCH; ++u) {
      const int j = j0 + 32 * u + lane;
      key[u] = j < we ? keys[j] : 0u;
    }
#pragma unroll
    for (int u = 0; u < TKS_BATCH; ++u) {
      const int j = j0 + 32 * u + lane;
      const bool sel = j < we && tk_offset_comp(key[u], kmin, lo + j) >= T;
      f(j, sel, __ballot_sync(0xffffffffu, sel));
    }
  }
}

__global__ void __launch_bounds__(TKS_THREADS, 2) topk_slices_kernel(const dsa_topk_params p, int smem_keys) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  tks_smem *sm = (tks_smem *)smem_raw;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned lt = (1u << lane) - 1u;
  const int C = (int)ptx_cluster_nctarank();
  const int rank = (int)ptx_cluster_ctarank();
  const int row = blockIdx.x / C;

  /* Launched as a programmatic dependent (the scores, lengths, block table may come from the
   * previous kernel): nothing is read before that kernel's writes are visible. */
  ptx_griddep_wait();
  /* The row's length, read once a CTA; lens (which may alias an input of it) is written only after
   * a barrier that every CTA of the row reaches after its read. */
  if (tid == 0) sm->len = rows_len(p.rows, row);
  __syncthreads();
  const int L = sm->len;
  const int k = min(p.topk, L);
  int32_t *out = p.out + (size_t)row * p.topk;
  if (L <= p.topk) { /* every position, no score read */
    tks_sync(C);
    if (rank == 0) {
      if (p.out_lens && tid == 0) p.out_lens[row] = k;
      for (int i = tid; i < p.topk; i += TKS_THREADS) out[i] = i < L ? rows_output(p.rows, row, i) : -1;
    }
    return;
  }

  /* 1. the slice [lo, hi): its first nk positions into shared memory, every copy in flight */
  const float *s = p.scores + (long long)row * p.scores_stride;
  const int per = (L + C - 1) / C;
  const int lo = min(L, rank * per), hi = min(L, lo + per);
  /* the host sizes shared memory for the longest slice (smem_keys >= every n); the min only keeps
   * an impossible overflow inside the allocation */
  const int n = min(hi - lo, smem_keys), nk = n;
  const int mis = (int)(((uintptr_t)(s + lo) >> 2) & 3); /* keys[j] <-> position lo + j, both 16-B aligned together */
  uint32_t *keys = sm->keys + mis;
  {
    const uint32_t kb = ptx_smem_u32(keys);
    const int head = min(nk, (4 - mis) & 3), nv = (nk - head) >> 2;
    for (int j = tid; j < head; j += TKS_THREADS) ptx_cp_async_4(kb + 4 * j, s + lo + j);
    for (int v = tid; v < nv; v += TKS_THREADS) ptx_cp_async_16(kb + 4 * (head + 4 * v), s + lo + head + 4 * v, 16);
    for (int j = head + 4 * nv + tid; j < nk; j += TKS_THREADS) ptx_cp_async_4(kb + 4 * j, s + lo + j);
    ptx_cp_async_commit();
  }
  for (int b = tid; b < TK_BINS; b += TKS_THREADS) sm->hist[0][b] = 0;
  ptx_cp_async_wait<0>();
  __syncthreads();

  /* 2. keys in place and the row's key range [kmin, kmax] (over the cluster); the first digit is
   *    (key - kmin) >> sh, sh chosen so that the range fills the 2048 bins: few elements share a
   *    bin (the shared-memory atomics do not queue) and the threshold bin holds few candidates */
  uint32_t mn = 0xffffffffu, mx = 0u;
  for (int j0 = 0; j0 < nk; j0 += TKS_BATCH * TKS_THREADS) {
    uint32_t kv[TKS_BATCH];
#pragma unroll
    for (int u = 0; u < TKS_BATCH; ++u) {
      const int j = j0 + u * TKS_THREADS + tid;
      kv[u] = j < nk ? keys[j] : 0u;
    }
#pragma unroll
    for (int u = 0; u < TKS_BATCH; ++u) {
      const int j = j0 + u * TKS_THREADS + tid;
      if (j < nk) {
        const uint32_t key = score_key(__uint_as_float(kv[u]));
        keys[j] = key;
        mn = min(mn, key);
        mx = max(mx, key);
      }
    }
  }
  mn = __reduce_min_sync(0xffffffffu, mn);
  mx = __reduce_max_sync(0xffffffffu, mx);
  if (lane == 0) {
    sm->scratch[warp] = (int)mn;
    sm->scratch[TKS_WARPS + warp] = (int)mx;
  }
  __syncthreads();
  if (warp == 0) {
    mn = lane < TKS_WARPS ? (uint32_t)sm->scratch[lane] : 0xffffffffu;
    mx = lane < TKS_WARPS ? (uint32_t)sm->scratch[TKS_WARPS + lane] : 0u;
    mn = __reduce_min_sync(0xffffffffu, mn);
    mx = __reduce_max_sync(0xffffffffu, mx);
    if (lane == 0) {
      sm->range[0] = mn;
      sm->range[1] = mx;
    }
  }
  tks_sync(C); /* every CTA's range is complete */
  if (C > 1 && warp == 0) {
    mn = 0xffffffffu;
    mx = 0u;
    if (lane < C) {
      const uint2 r = make_uint2(ptx_ld_cluster_u32(ptx_mapa(ptx_smem_u32(&sm->range[0]), (uint32_t)lane)),
                                 ptx_ld_cluster_u32(ptx_mapa(ptx_smem_u32(&sm->range[1]), (uint32_t)lane)));
      mn = r.x;
      mx = r.y;
    }
    mn = __reduce_min_sync(0xffffffffu, mn);
    mx = __reduce_max_sync(0xffffffffu, mx);
    if (lane == 0) {
      sm->row_range[0] = mn;
      sm->row_range[1] = mx;
    }
  } else if (C == 1 && tid == 0) {
    sm->row_range[0] = sm->range[0];
    sm->row_range[1] = sm->range[1];
  }
  __syncthreads();
  const uint32_t kmin = sm->row_range[0], span = sm->row_range[1] - kmin;
  const int sh = max(0, (32 - __clz((int)span)) - 11); /* span >> sh < 2048 */
  tks_each(keys, n, [&](int, uint32_t key, bool valid) {
    if (valid) atomicAdd(&sm->hist[0][(key - kmin) >> sh], 1u);
  });
  const uint32_t *tot = tks_total(sm, 0, C);
  int above;
  const uint32_t b1 = (uint32_t)find_bin(tot, TK_BINS, p.topk, &above, sm->scratch);
  int need = p.topk - above;
  bool done = (int)tot[b1] == need;  /* all of b1 is selected */
  int shift = 32 + sh;               /* composite bits [shift, 64) are fixed by T */
  uint64_t T = (uint64_t)b1 << shift; /* selected <=> comp >= T (T's bits below shift are 0) */

  /* 3. bin b1's elements as composites (shared memory when they fit, else re-derived from the
   *    slice in each pass); radix passes of 11 bits below the first digit, the same in every CTA */
  const bool cand_smem = sm->hist[0][b1] <= TKS_CAND;
  if (!done && cand_smem) {
    if (tid == 0) sm->n_cand = 0;
    __syncthreads();
    tks_each(keys, n, [&](int j, uint32_t key, bool valid) {
      const bool in = valid && ((key - kmin) >> sh) == b1;
      const unsigned bal = __ballot_sync(0xffffffffu, in);
      if (!bal) return;
      int base = 0;
      if (lane == 0) base = atomicAdd(&sm->n_cand, __popc(bal));
      base = __shfl_sync(0xffffffffu, base, 0) + __popc(bal & lt);
      if (in && base < TKS_CAND) sm->cand[base] = tk_offset_comp(key, kmin, lo + j);
    });
    __syncthreads();
  }
  const int n_cand = cand_smem ? min(sm->n_cand, TKS_CAND) : 0;
  int pass = 1;
  while (!done) {
    const int width = shift >= 11 ? 11 : shift;
    const int nsh = shift - width;
    const int nb = 1 << width;
    uint32_t *h = sm->hist[pass & 1];
    for (int b = tid; b < TK_BINS; b += TKS_THREADS) h[b] = 0;
    __syncthreads();
    auto count = [&](uint64_t c) {
      if ((c >> shift) == (T >> shift)) atomicAdd(&h[(c >> nsh) & (nb - 1)], 1u);
    };
    if (cand_smem) {
      for (int i = tid; i < n_cand; i += TKS_THREADS) count(sm->cand[i]);
    } else {
      tks_each(keys, n, [&](int j, uint32_t key, bool valid) {
        if (valid) count(tk_offset_comp(key, kmin, lo + j));
      });
    }
    const uint32_t *t = tks_total(sm, pass & 1, C);
    int higher;
    const int bb = find_bin(t, nb, need, &higher, sm->scratch);
    const int in_bb = (int)t[bb];
    need -= higher;
    T |= (uint64_t)bb << nsh;
    shift = nsh;
    ++pass;
    __syncthreads();
    done = in_bb == need || shift == 0;
  }

  /* 4. write the selected positions in ascending order: each warp counts its contiguous part, the
   *    counts are scanned over the warps and the cluster's ranks, then a second walk writes */
  const int wlen = (n + TKS_WARPS * 32 - 1) / (TKS_WARPS * 32) * 32;
  const int wb = min(n, warp * wlen), we = min(n, wb + wlen);
  int cnt = 0;
  tks_walk(keys, lo, wb, we, kmin, T, [&](int, bool, unsigned bal) { cnt += __popc(bal); });
  if (lane == 0) sm->warp_off[warp] = cnt;
  __syncthreads();
  if (tid == 0) {
    int run = 0;
    for (int w = 0; w < TKS_WARPS; ++w) {
      const int c = sm->warp_off[w];
      sm->warp_off[w] = run;
      run += c;
    }
    sm->n_sel = run;
  }
  tks_sync(C); /* n_sel and warp_off are complete (cluster-wide when C > 1) */
  int offset = 0;
  if (C > 1) {
    const uint32_t a = ptx_smem_u32(&sm->n_sel);
    for (int r = 0; r < rank; ++r) offset += (int)ptx_ld_cluster_u32(ptx_mapa(a, (uint32_t)r));
  }
  /* the CTA's positions in order into shared memory (`sum` is free after the last pass; peers
   * read only `hist`), then mapped to outputs with every lookup in flight before any store */
  int *pos = (int *)sm->sum;
  const int mine = min(sm->n_sel, DSA_MAX_TOPK);
  int base = sm->warp_off[warp];
  tks_walk(keys, lo, wb, we, kmin, T, [&](int j, bool sel, unsigned bal) {
    const int o = base + __popc(bal & lt);
    if (sel && o < DSA_MAX_TOPK) pos[o] = lo + j;
    base += __popc(bal);
  });
  __syncthreads();
  for (int i0 = 0; i0 < mine; i0 += TKS_OUT_BATCH * TKS_THREADS) {
    int v[TKS_OUT_BATCH];
#pragma unroll
    for (int u = 0; u < TKS_OUT_BATCH; ++u) {
      const int i = i0 + u * TKS_THREADS + tid;
      v[u] = i < mine ? rows_output(p.rows, row, pos[i]) : -1;
    }
#pragma unroll
    for (int u = 0; u < TKS_OUT_BATCH; ++u) {
      const int i = i0 + u * TKS_THREADS + tid;
      if (i < mine && offset + i < k) out[offset + i] = v[u];
    }
  }
  /* Fewer than k selected happens only with inconsistent inputs (the tail's scores changed under
   * the call); what is left stays defined: -1. */
  if (rank == C - 1)
    for (int i = offset + sm->n_sel + tid; i < p.topk; i += TKS_THREADS) out[i] = -1;
  if (C > 1) ptx_cluster_sync(); /* no CTA leaves while a peer may still read its n_sel or range */
  if (rank == 0 && tid == 0 && p.out_lens) p.out_lens[row] = k;
}


/* Slices of the rows, C CTAs (one cluster) a row. */
extern "C" int dsa_topk_slices_launch(const dsa_topk_params *p, int C, cudaStream_t stream) {
  /* One limit for the kernel, whatever C: per-C caches let a smaller C lower the limit another C's
   * cache still trusted, and the launch failed once before its retry (an error left in the runtime,
   * and a broken graph capture). */
  static dsa_smem_cache cache;
  const int max_len = p->rows.max_len > p->topk ? p->rows.max_len : 0;
  const size_t smem = tks_smem_bytes(max_len, C);
  const int nk = max_len == 0 ? 0 : (int)((smem - offsetof(tks_smem, keys)) / 4 - 4);
  return (int)dsa_launch_smem_cluster(topk_slices_kernel, &cache, dim3((unsigned)(p->num_tokens * C)), TKS_THREADS,
                                      smem, stream, true, C > 1 ? (unsigned)C : 0u, *p, nk);
}

