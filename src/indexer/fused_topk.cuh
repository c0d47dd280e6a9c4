/*
 * indexer/fused_topk.cuh — the exact top-k of the fused indexer (scores_wgmma.cu with FUSED): the
 * scores of a decode request never leave the chip. Each of the gridDim.x CTAs of a request (one
 * grid row, blockIdx.y) scores a contiguous range of positions [pos0, pos0 + ks) and keeps them in
 * shared memory as order-preserving keys (common/score_key.cuh: NaN lowest, -0 = +0); then, for
 * every token of the request together:
 *
 *   pass 1     the key's top 11 bits: the scoring epilogue counts each key into the CTA's
 *              shared-memory histogram as it stores it (wgmma_tile.cuh), the CTA adds the non-zero
 *              bins to the token's histogram in global memory (L2 atomics), and after a barrier of
 *              the request's CTAs every CTA reads the same sums into registers and finds the same
 *              bin b1 holding the k-th largest key (fz_find_bin).
 *   gather     when b1 holds at most DSA_FUSED_CAND keys (or exactly what is still needed): each
 *              CTA publishes its count above b1 and appends its keys of b1, as composites
 *              (key << 32 | ~position), to the token's candidate list (its place reserved by one
 *              atomic, issued as soon as b1 is known: its count of b1 is its histogram's); after
 *              one more barrier every CTA loads the list and finds the k-th composite T in its own
 *              shared memory (the key's next 11 bits, its last 10, the positions only for a tie at
 *              the k-th key: fz_resolve; the same T everywhere), and the lower CTAs' share of the
 *              output from their counts and the candidates' positions: selected <=> above b1, or in
 *              b1 with composite >= T.
 *   passes 2-3 (a b1 too full to gather: e.g. every key equal) the next 11 and 10 bits the same way
 *              as pass 1, over the keys matching the prefix so far, until the prefix is the k-th
 *              key T itself; then each CTA publishes its counts above and equal to T, and the
 *              equal keys go to the lowest positions (a CTA takes what the lower CTAs' equal
 *              counts leave).
 * Either way ties go to the lower position, the output is ascending (the top-k kernels' order),
 * and nothing depends on timing: deterministic. Two barriers after the scores in the usual case.
 *
 * The barriers count arrivals on the request's counter; barrier i completes at i x gridDim.x. They
 * are safe only because the launch is cooperative (every CTA resident at once; the launcher
 * declines a grid that is not). The launcher's memset node zeroes the counters, the histograms and
 * the candidate counts (fz_zeroed_bytes) before the kernel, so no barrier guards their zeros (one
 * did, and its poll cost an L2 round trip, ~1 us, before the first flush). Workspace:
 * DSA_FUSED_CTL_BYTES (config.h), not O(L). Tokens whose L <= topk select every position with
 * nothing scored (CTA 0 writes them).
 */
#pragma once
#include <stdint.h>

#include "common/ptx/sync.cuh"
#include "common/rows.cuh"
#include "common/score_key.cuh"
#include "indexer/scores.cuh"
#include "indexer/wgmma_tile.cuh"
#include "kernels.h"
#include "topk/radix.cuh"

#define FZ_THREADS 512 /* the scoring kernel's */
#define FZ_WARPS (FZ_THREADS / 32)
#define FZ_LO_BITS 10 /* gather: the key's last bits, resolved after its next 11 */
#define FZ_LO_BINS (1 << FZ_LO_BITS)

/* The select phase's shared memory (laid over the scoring ring, which is free by then). */
typedef struct {
  uint32_t hist[TK_BINS];        /* 16-byte aligned (fz_find_bin): the first member */
  uint32_t hist_lo[FZ_LO_BINS];  /* gather: the key's last 10 bits */
  uint64_t cand[DSA_FUSED_CAND]; /* gather: the token's candidates */
  uint32_t prefix[SC_MAX_T]; /* the k-th key's bits found so far (the top 32 - shift) */
  int shift[SC_MAX_T];       /* 32: nothing found yet */
  int need[SC_MAX_T];        /* of the keys matching prefix, how many are still to select */
  int done[SC_MAX_T];        /* 1: no more digit passes (resolved, gathered, or not scored) */
  int gather[SC_MAX_T];      /* 1: resolved from the candidate list (prefix = b1, shift 21) */
  int ncand[SC_MAX_T];       /* gather: the list's length (b1's count) */
  int warp_above[SC_MAX_T][FZ_WARPS], warp_eq[SC_MAX_T][FZ_WARPS]; /* final: per warp part */
  int warp_sel[SC_MAX_T][FZ_WARPS]; /* gathered: the part's selected keys of b1 (from the candidates) */
  int scratch[40];
  int red[2][FZ_WARPS];
  int bcast[2];
  int found[SC_MAX_T][3]; /* fz_find_bin's answers (bin, above, in_bin): pass 1 token ti's in [ti], fz_resolve's in [0], [1] */
} fz_smem;

/* Token words: histograms [3][TK_BINS], candidate count (+ pad), pairs [DSA_FUSED_MAX_CTAS][2],
 * candidates [DSA_FUSED_CAND] (8-byte aligned); every token's histograms 16-byte aligned (the
 * workspace is 256-byte aligned and DSA_FUSED_TOKEN_WORDS a multiple of 4: fz_find_bin's vector
 * loads). */
#define FZ_W_COUNT (3 * TK_BINS)
#define FZ_W_PAIRS (FZ_W_COUNT + 4)
#define FZ_W_CANDS (FZ_W_PAIRS + 2 * DSA_FUSED_MAX_CTAS)
static_assert(TK_BINS == 1 << (32 - 11 - FZ_LO_BITS), "first digit 11 bits, then 11, then FZ_LO_BITS");
static_assert(DSA_FUSED_TOKEN_WORDS == FZ_W_CANDS + 2 * DSA_FUSED_CAND && FZ_W_CANDS % 2 == 0 &&
                  DSA_FUSED_TOKEN_WORDS % 4 == 0, "the token words' layout");

/* The request's barrier counter and token t's words. */
static __device__ __forceinline__ uint32_t *fz_bar(const dsa_fused_topk &f) {
  return (uint32_t *)((char *)f.ctl + (size_t)blockIdx.y * DSA_FUSED_BAR_BYTES);
}
static __device__ __forceinline__ uint32_t *fz_token_words(const dsa_fused_topk &f, int t) {
  const size_t head = ((size_t)gridDim.y * DSA_FUSED_BAR_BYTES + 255) & ~(size_t)255;
  return (uint32_t *)((char *)f.ctl + head) + (size_t)t * DSA_FUSED_TOKEN_WORDS;
}

/* Thread 0: arrive on the request's counter, a release at gpu scope after the caller's
 * __syncthreads (so it orders the whole CTA's writes before it) / wait until it reaches target, an
 * acquire that the caller's __syncthreads extends to the CTA. */
static __device__ __forceinline__ void fz_arrive(uint32_t *bar) { ptx_red_release_gpu_add(bar, 1u); }
static __device__ __forceinline__ void fz_wait(const uint32_t *bar, uint32_t target) {
  while (ptx_ld_relaxed_gpu(bar) < target) { /* polls without the acquire's cost each time */
  }
  (void)ptx_ld_acquire_gpu(bar); /* sees target or later: synchronises with every arrival */
}
/* Every CTA of the request: all writes before it are visible to all reads after it. */
static __device__ __forceinline__ void fz_grid_sync(uint32_t *bar, uint32_t target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    fz_arrive(bar);
    fz_wait(bar, target);
  }
  __syncthreads();
}

/* Host: the bytes of the control block the launcher zeroes before the launch (a memset node): the
 * requests' barrier counters and, per token, the histograms and the candidate count — everything a
 * CTA adds to; the per-CTA counts and the candidates are written before they are read. */
static inline size_t fz_zeroed_bytes(int groups, int tokens) {
  return tokens <= 0 ? (size_t)groups * DSA_FUSED_BAR_BYTES
                     : (((size_t)groups * DSA_FUSED_BAR_BYTES + 255) & ~(size_t)255) +
                           ((size_t)(tokens - 1) * DSA_FUSED_TOKEN_WORDS + FZ_W_PAIRS) * 4;
}

/* A token's n keys of this CTA cut into FZ_WARPS parts of wlen (a multiple of 32; 0 when n is 0):
 * warp w's part is [*wb, *we). The counts before barrier B and the walk after it use the same
 * parts (the gathered tokens' per-part counts carry over). Returns wlen. */
static __device__ __forceinline__ int fz_warp_part(int n, int warp, int *wb, int *we) {
  const int wlen = (n + FZ_WARPS * 32 - 1) / (FZ_WARPS * 32) * 32;
  *wb = min(n, warp * wlen);
  *we = min(n, *wb + wlen);
  return wlen;
}

/* Block-wide sum of two ints (every thread gets both). */
static __device__ __forceinline__ int2 fz_block_sum2(int a, int b, fz_smem *sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  a = __reduce_add_sync(0xffffffffu, a);
  b = __reduce_add_sync(0xffffffffu, b);
  if (lane == 0) {
    sm->red[0][warp] = a;
    sm->red[1][warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = lane < FZ_WARPS ? sm->red[0][lane] : 0;
    b = lane < FZ_WARPS ? sm->red[1][lane] : 0;
    a = __reduce_add_sync(0xffffffffu, a);
    b = __reduce_add_sync(0xffffffffu, b);
    if (lane == 0) {
      sm->bcast[0] = a;
      sm->bcast[1] = b;
    }
  }
  __syncthreads();
  const int2 r = make_int2(sm->bcast[0], sm->bcast[1]);
  __syncthreads();
  return r;
}

/* (key >> shift) against prefix as -1 below / 0 equal / 1 above (shift 32: everything is equal). */
static __device__ __forceinline__ int fz_cmp(uint32_t key, uint32_t prefix, int shift) {
  if (shift >= 32) return 0;
  const uint32_t v = key >> shift;
  return v > prefix ? 1 : v == prefix ? 0 : -1;
}

/* The need-th largest of the n candidates in sm->cand whose composites agree with T above bit
 * `shift`, by radix passes of 11 bits over the rest of the composite, each a shared-memory histogram;
 * returns T with selected <=> composite >= T. Every thread calls it. */
static __device__ uint64_t fz_resolve_bits(fz_smem *sm, int n, int need, uint64_t T, int shift) {
  for (;;) {
    const int w = shift >= 11 ? 11 : shift, nsh = shift - w;
    for (int b = threadIdx.x; b < TK_BINS; b += FZ_THREADS) sm->hist[b] = 0u;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += FZ_THREADS) {
      const uint64_t c = sm->cand[i];
      if ((c >> shift) == (T >> shift)) atomicAdd(&sm->hist[(uint32_t)(c >> nsh) & ((1u << w) - 1u)], 1u);
    }
    __syncthreads();
    int above = 0;
    const int bin = find_bin(sm->hist, 1 << w, need, &above, sm->scratch);
    const int in_bin = (int)sm->hist[bin];
    need -= above;
    T |= (uint64_t)bin << nsh;
    shift = nsh;
    __syncthreads();
    if (in_bin == need || shift == 0) return T;
  }
}

/* fz_resolve's histograms zeroed (every thread; the caller's barrier follows). */
static __device__ __forceinline__ void fz_zero_resolve_hists(fz_smem *sm) {
  for (int b = threadIdx.x; b < TK_BINS; b += FZ_THREADS) sm->hist[b] = 0u;
  for (int b = threadIdx.x; b < FZ_LO_BINS; b += FZ_THREADS) sm->hist_lo[b] = 0u;
}

/* find_bin (topk/radix.cuh) with its histogram's bins in registers and two block barriers: in NB
 * bins (2048 or 1024; global memory read through L2 when GLOBAL, else shared; 16-byte aligned) the
 * bin holding the need-th largest element from the top, the count in higher bins and its own count
 * into found[0..2] (shared memory; each call site its own slot: a slot is written before the first
 * barrier). Thread i holds bins [NB - PER (i + 1), NB - PER i) (thread 0 the top ones); a scan of
 * the threads' sums finds the thread whose bins cross need, and it walks them. No bin reaches need
 * (inconsistent inputs only): bin 0, as find_bin. Every thread calls it and may read found after. */
template <int NB, bool GLOBAL>
static __device__ __forceinline__ void fz_find_bin(const uint32_t *hist, int need, fz_smem *sm, int *found) {
  constexpr int PER = NB / FZ_THREADS;
  static_assert(PER == 4 || PER == 2, "a uint4 or a uint2 of bins a thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b0 = NB - PER * (tid + 1);
  uint32_t v[4] = {0u, 0u, 0u, 0u};
  if constexpr (PER == 4) {
    const uint4 q = GLOBAL ? __ldcg((const uint4 *)(hist + b0)) : *(const uint4 *)(hist + b0);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    const uint2 q = GLOBAL ? __ldcg((const uint2 *)(hist + b0)) : *(const uint2 *)(hist + b0);
    v[0] = q.x, v[1] = q.y;
  }
  int sum = 0;
#pragma unroll
  for (int c = 0; c < PER; c++) sum += (int)v[c];
  int incl = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) sm->red[0][warp] = incl;
  if (tid == FZ_THREADS - 1) { /* bin 0's holder: the answer where no bin reaches need */
    found[0] = 0;
    found[1] = 0;
    found[2] = (int)v[0];
  }
  __syncthreads();
  int wbase = 0; /* elements in the warps above */
#pragma unroll
  for (int i = 0; i < FZ_WARPS; i++) wbase += i < warp ? sm->red[0][i] : 0;
  incl += wbase;
  const int before = incl - sum;
  if (before < need && incl >= need) {
    int run = before;
    bool hit = false;
#pragma unroll
    for (int c = PER - 1; c >= 0; c--) {
      if (!hit && run + (int)v[c] >= need) {
        hit = true;
        found[0] = b0 + c;
        found[1] = run;
        found[2] = (int)v[c];
      }
      run += (int)v[c];
    }
  }
  __syncthreads();
}

/* Gather: the need-th largest of the n candidates in sm->cand (all of whose keys share the top 11
 * bits): the key's next 11 bits, then its last 10, each a shared-memory histogram (fz_find_bin);
 * only a tie at the k-th key that not all of its candidates make (positions decide) takes
 * fz_resolve_bits' passes over the positions. Returns T with selected <=> composite >= T.
 * sm->hist and sm->hist_lo are zero on entry (left dirty). Every thread calls it. */
static __device__ uint64_t fz_resolve(fz_smem *sm, int n, int need) {
  const uint32_t top = (uint32_t)(sm->cand[0] >> 53); /* the shared top 11 bits (n >= need >= 1) */
  for (int i = threadIdx.x; i < n; i += FZ_THREADS)
    atomicAdd(&sm->hist[(uint32_t)(sm->cand[i] >> (32 + FZ_LO_BITS)) & (TK_BINS - 1)], 1u);
  __syncthreads();
  fz_find_bin<TK_BINS, false>(sm->hist, need, sm, sm->found[0]);
  const uint32_t mid = (uint32_t)sm->found[0][0];
  int in_bin = sm->found[0][2];
  need -= sm->found[0][1];
  const uint32_t key22 = top << 11 | mid;
  if (in_bin == need) return (uint64_t)(key22 << FZ_LO_BITS) << 32; /* the whole bin */
  for (int i = threadIdx.x; i < n; i += FZ_THREADS) {
    const uint32_t key = (uint32_t)(sm->cand[i] >> 32);
    if ((key >> FZ_LO_BITS) == key22) atomicAdd(&sm->hist_lo[key & (FZ_LO_BINS - 1u)], 1u);
  }
  __syncthreads();
  fz_find_bin<FZ_LO_BINS, false>(sm->hist_lo, need, sm, sm->found[1]);
  const uint32_t low = (uint32_t)sm->found[1][0];
  in_bin = sm->found[1][2];
  need -= sm->found[1][1];
  const uint64_t T = (uint64_t)(key22 << FZ_LO_BITS | low) << 32; /* the k-th key, lowest position part */
  if (in_bin == need) return T; /* every candidate with the k-th key */
  return fz_resolve_bits(sm, n, need, T, 32); /* the k-th key's candidates by position */
}

/* Token ti's digit pass found `bin` (w bits), `above` keys above it and in_bin in it: the prefix
 * grows; done when the bin holds exactly what is still needed or the key is complete; after the
 * first digit, a bin of at most DSA_FUSED_CAND keys is gathered instead of more passes. One thread. */
static __device__ __forceinline__ void fz_take_digit(fz_smem *sm, int ti, int bin, int above, int in_bin, int w,
                                                     int pass) {
  const int left = sm->need[ti] - above;
  const int s = sm->shift[ti] - w;
  sm->prefix[ti] = (sm->shift[ti] >= 32 ? 0u : sm->prefix[ti] << w) | (uint32_t)bin;
  sm->shift[ti] = s;
  sm->need[ti] = left;
  sm->done[ti] = in_bin == left || s == 0;
  if (pass == 0 && in_bin != left && in_bin <= DSA_FUSED_CAND) {
    sm->gather[ti] = 1; /* resolved from b1's candidates instead of two more passes */
    sm->ncand[ti] = in_bin;
    sm->done[ti] = 1;
  }
}

/* The top-k of the CTA's tokens from their keys in shared memory (keys[ti * ks + j] = position
 * pos0 + j of token ti, for j < the token's visible positions in the range). Every thread of every
 * CTA of the request calls it, whatever it scored. */
static __device__ void fz_select(const dsa_scores_params &p, const dsa_fused_topk &f, const sc_group *grp, int nt,
                                 int t0, const uint32_t *keys, const uint32_t *hist1, const int *pages, int ks,
                                 int pos0, fz_smem *sm) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned lt = (1u << lane) - 1u;
  const int x = blockIdx.x, nx = gridDim.x;
  uint32_t *bar = fz_bar(f);
  uint32_t barriers = 0;
  const int topk = f.topk;
  if (tid < SC_MAX_T) {
    sm->prefix[tid] = 0u;
    sm->shift[tid] = 32;
    sm->need[tid] = topk;
    sm->done[tid] = !(tid < nt && grp->len[tid] > 0); /* scored: L > topk */
    sm->gather[tid] = 0;
    sm->ncand[tid] = 0;
  }
  for (int i = tid; i < SC_MAX_T * FZ_WARPS; i += FZ_THREADS) (&sm->warp_sel[0][0])[i] = 0;
  __syncthreads();

  /* ---- digit passes: pass 1 always (for scored tokens), 2 and 3 for a b1 too full to gather ---- */
  for (int pass = 0; pass < 3; ++pass) {
    bool any = false;
    for (int ti = 0; ti < nt; ++ti) any |= !sm->done[ti];
    if (!any) break; /* the same in every CTA: decided from the same global sums */
    const int w = pass < 2 ? 11 : 10;
    for (int ti = 0; ti < nt; ++ti) {
      if (sm->done[ti]) continue;
      uint32_t *g = fz_token_words(f, t0 + ti) + pass * TK_BINS;
      if (pass == 0) { /* the first digit was counted in the scoring epilogue */
        for (int b = tid; b < TK_BINS; b += FZ_THREADS) {
          const uint32_t c = hist1[ti * TK_BINS + b];
          if (c) atomicAdd(&g[b], c);
        }
        continue;
      }
      for (int b = tid; b < TK_BINS; b += FZ_THREADS) sm->hist[b] = 0u;
      __syncthreads();
      const int n = min(max(grp->fill[ti] - pos0, 0), ks);
      const uint32_t P = sm->prefix[ti];
      const int s = sm->shift[ti], d = s - w;
      const uint32_t *k = keys + (size_t)ti * ks;
      for (int j = tid; j < n; j += FZ_THREADS) {
        const uint32_t key = k[j];
        if (fz_cmp(key, P, s) == 0) atomicAdd(&sm->hist[(key >> d) & ((1u << w) - 1u)], 1u);
      }
      __syncthreads();
      for (int b = tid; b < (1 << w); b += FZ_THREADS)
        if (sm->hist[b]) atomicAdd(&g[b], sm->hist[b]);
      __syncthreads();
    }
    fz_grid_sync(bar, ++barriers * (uint32_t)nx);
    if (pass == 0) { /* the sums straight from L2 into registers */
      for (int ti = 0; ti < nt; ++ti) {
        if (sm->done[ti]) continue;
        fz_find_bin<TK_BINS, true>(fz_token_words(f, t0 + ti), sm->need[ti], sm, sm->found[ti]);
        if (tid == 0) fz_take_digit(sm, ti, sm->found[ti][0], sm->found[ti][1], sm->found[ti][2], w, pass);
      }
      __syncthreads();
      continue;
    }
    for (int ti = 0; ti < nt; ++ti) {
      if (sm->done[ti]) continue;
      const uint32_t *g = fz_token_words(f, t0 + ti) + pass * TK_BINS;
      for (int b = tid; b < (1 << w); b += FZ_THREADS) sm->hist[b] = __ldcg(&g[b]);
      __syncthreads();
      int above = 0;
      const int bin = find_bin(sm->hist, 1 << w, sm->need[ti], &above, sm->scratch);
      if (tid == 0) fz_take_digit(sm, ti, bin, above, (int)sm->hist[bin], w, pass);
      __syncthreads();
    }
  }

  /* ---- final: counts above (and equal to) the threshold, per warp part and per CTA; gathered
   * tokens also append their keys of b1 to the candidate list ---- */
  for (int ti = 0; ti < nt; ++ti) {
    if (!(grp->len[ti] > 0)) continue;
    const int n = min(max(grp->fill[ti] - pos0, 0), ks);
    const uint32_t P = sm->prefix[ti];
    const int s = sm->shift[ti];
    const bool gather = sm->gather[ti];
    uint32_t *words = fz_token_words(f, t0 + ti);
    uint64_t *cands = (uint64_t *)(words + FZ_W_CANDS);
    const uint32_t *k = keys + (size_t)ti * ks;
    int wb, we;
    (void)fz_warp_part(n, warp, &wb, &we);
    /* gathered: one L2 atomic a CTA reserves its keys' place in the list (an atomic a warp step —
     * 33k on one address at 1M — cost more than the rest of the select); their count is the
     * epilogue's count of b1 (P, shift 21), so it is issued before the counting below, under which
     * its round trip passes */
    uint32_t reserved = 0;
    if (tid == 0 && gather) {
      const uint32_t in_b1 = hist1[ti * TK_BINS + P];
      if (in_b1) reserved = atomicAdd(&words[FZ_W_COUNT], in_b1);
    }
    int a = 0, e = 0;
    for (int j = wb + lane; j < we; j += 32) {
      const int c = fz_cmp(k[j], P, s);
      a += c > 0;
      e += c == 0;
    }
    a = __reduce_add_sync(0xffffffffu, a);
    e = __reduce_add_sync(0xffffffffu, e);
    if (lane == 0) {
      sm->warp_above[ti][warp] = a;
      sm->warp_eq[ti][warp] = e;
    }
    __syncthreads();
    if (tid == 0) {
      int sa = 0, se = 0;
      for (int i = 0; i < FZ_WARPS; ++i) sa += sm->warp_above[ti][i], se += sm->warp_eq[ti][i];
      int *pairs = (int *)(words + FZ_W_PAIRS);
      pairs[2 * x] = sa;
      pairs[2 * x + 1] = gather ? 0 : se; /* gathered: the candidates say which equal ones count */
      sm->bcast[0] = (int)reserved;
    }
    if (gather) {
      __syncthreads();
      int base = sm->bcast[0];
      for (int i = 0; i < warp; ++i) base += sm->warp_eq[ti][i];
      for (int j0 = wb; j0 < we; j0 += 32) {
        const int j = j0 + lane;
        const uint32_t key = j < we ? k[j] : 0u;
        const bool in = j < we && fz_cmp(key, P, s) == 0;
        const unsigned eb = __ballot_sync(0xffffffffu, in);
        const int o = base + __popc(eb & lt);
        if (in && o < DSA_FUSED_CAND) cands[o] = make_comp(key, pos0 + j);
        base += __popc(eb);
      }
    }
    __syncthreads(); /* sm->bcast and the warp counts are the next token's */
  }
  fz_zero_resolve_hists(sm); /* the barrier's __syncthreads orders it before fz_resolve */
  fz_grid_sync(bar, ++barriers * (uint32_t)nx);

  /* ---- final: this CTA's selected positions, ascending, at their offset ---- */
  for (int ti = 0; ti < nt; ++ti) {
    const int t = t0 + ti;
    int32_t *out = f.out + (size_t)t * topk;
    const int L = grp->fill[ti];
    if (!(grp->len[ti] > 0)) { /* L <= topk: every visible position, nothing scored */
      if (x == 0) {
        for (int i = tid; i < topk; i += FZ_THREADS) out[i] = i < L ? rows_output(p.rows, t, i) : -1;
        if (tid == 0 && f.out_lens) f.out_lens[t] = min(topk, L);
      }
      continue;
    }
    const int need = sm->need[ti];
    const uint32_t P = sm->prefix[ti];
    const int s = sm->shift[ti];
    const bool gather = sm->gather[ti];
    const uint32_t *words = fz_token_words(f, t0 + ti);
    /* the lower CTAs' counts: where this CTA's output starts (and, resolved by digits, how many of
     * its keys equal to T it takes) */
    const int *pairs = (const int *)(words + FZ_W_PAIRS);
    int a_lo = 0, e_lo = 0;
    for (int c = tid; c < x; c += FZ_THREADS) {
      a_lo += __ldcg(&pairs[2 * c]);
      e_lo += __ldcg(&pairs[2 * c + 1]);
    }
    /* the keys' warp parts, as in the counts before the barrier */
    const int n = min(max(L - pos0, 0), ks);
    int wb, we;
    const int wlen = fz_warp_part(n, warp, &wb, &we);
    uint64_t T = 0;
    if (gather) { /* the candidates: T, those selected below this CTA's positions, and its own
                     selected ones by warp part (no walk over the keys to count them) */
      const int nc = min(sm->ncand[ti], DSA_FUSED_CAND);
      const uint64_t *cands = (const uint64_t *)(words + FZ_W_CANDS);
      for (int i = tid; i < nc; i += FZ_THREADS) sm->cand[i] = __ldcg(&cands[i]);
      __syncthreads();
      T = fz_resolve(sm, nc, need);
      for (int i = tid; i < nc; i += FZ_THREADS) {
        const uint64_t c = sm->cand[i];
        const int pos = (int)~(uint32_t)c;
        if (c < T) continue;
        if (pos < pos0)
          e_lo++;
        else if (pos - pos0 < n) /* n > 0, so wlen > 0 */
          atomicAdd(&sm->warp_sel[ti][(pos - pos0) / wlen], 1);
      }
    }
    const int2 lo_sums = fz_block_sum2(a_lo, e_lo, sm); /* its barriers: warp_sel complete */
    const int offset = lo_sums.x + (gather ? lo_sums.y : min(lo_sums.y, need));
    const int take_eq = max(0, need - lo_sums.y);
    /* warp w's first output (and first equal key): the lower warps' counts */
    const uint32_t *k = keys + (size_t)ti * ks;
    int sel_base = offset, eq_base = 0;
    if (gather) {
      for (int i = 0; i < warp; ++i) sel_base += sm->warp_above[ti][i] + sm->warp_sel[ti][i];
    } else {
      for (int i = 0; i < warp; ++i) {
        const int ei = sm->warp_eq[ti][i];
        sel_base += sm->warp_above[ti][i] + min(ei, max(0, take_eq - eq_base));
        eq_base += ei;
      }
    }
    for (int j0 = wb; j0 < we; j0 += 32) {
      const int j = j0 + lane;
      const uint32_t key = j < we ? k[j] : 0u;
      const int c = j < we ? fz_cmp(key, P, s) : -1;
      const unsigned eb = __ballot_sync(0xffffffffu, c == 0);
      const bool sel = c > 0 || (c == 0 && (gather ? make_comp(key, pos0 + j) >= T
                                                   : eq_base + __popc(eb & lt) < take_eq));
      const unsigned sb = __ballot_sync(0xffffffffu, sel);
      const int o = sel_base + __popc(sb & lt);
      if (sel && o < topk) /* TMA pages: the producer's page ids, no block-table lookup */
        out[o] = pages ? (int)rows_key_slot_from_raw(p.rows, pos0 + j, pages[j / WT_WG_KEYS]) : rows_output(p.rows, t, pos0 + j);
      sel_base += __popc(sb);
      eq_base += __popc(eb);
    }
    /* the last CTA: past what was selected, -1 (only inconsistent inputs leave any) */
    if (x == nx - 1 && warp == FZ_WARPS - 1) {
      for (int i = sel_base + lane; i < topk; i += 32) out[i] = -1;
    }
    if (x == 0 && tid == 0 && f.out_lens) f.out_lens[t] = min(topk, L);
    if (gather) fz_zero_resolve_hists(sm); /* fz_resolve's finds read them before its barriers */
    __syncthreads(); /* sm->cand, the warp counts and the histograms are the next token's */
  }
}
