/*
 * topk/chain.cu — top-k of many long rows: a chain of launches per batch of rows (the rows of one
 * launch share the workspace). The choice table (host/choose.c) sends it rows longer than one CTA's
 * shared memory holds (> DSA_TOPK_ONE_CTA_MAX_LEN) when too many for a cluster each; the indexer's
 * capped plan (host/plan.c) runs its deferred form. The order and the digits: radix.cuh.
 *   0. memset        the rows' histograms and counters.
 *   1. topk_hist     grid (chunks of 8192, rows): 2048-bin histogram of the top 11 key bits,
 *                    per-CTA in shared memory, merged into the row's global histogram; the last
 *                    CTA of a row finds the threshold bin b1 once.
 *   2. topk_filter   same grid: elements above b1 are selected outright (appended to the row's
 *                    list), elements in b1 to the candidate list (if the whole bin fits in it).
 *   3. topk_resolve  one CTA per row: radix passes of 11 bits over the candidates' remaining
 *                    composite bits (from shared memory, from the workspace list, or — when the
 *                    bin overflowed the list — from the whole row: slow but exact), then the
 *                    selected positions are sorted ascending (so the output is deterministic
 *                    whatever the atomics' order), mapped to slots / rows and written with lens and
 *                    the -1 tail.
 * Workspace per row: histogram + counters, the above-list, the candidate list.
 */
#include <cub/block/block_radix_sort.cuh>
#include <stddef.h>
#include <stdint.h>

#include "common/launch.cuh"
#include "common/ptx/sync.cuh"
#include "common/rows.cuh"
#include "kernels.h"
#include "topk/radix.cuh"

/* TK_BINS, TK_CHUNK, TK_CAND_CAP, TK_HDR: config.h (the host sizes the workspace from them). */
#define TK_THREADS 256
#define TK_CAND_SMEM 8192  /* candidates the resolve step holds in shared memory */
#define TK_RESOLVE_THREADS 256
#define TK_SORT_ITEMS (DSA_MAX_TOPK / TK_RESOLVE_THREADS)

/* Workspace (host/plan.c, dsa_topk_ws_layout): [rows][TK_HDR] uint32 (histogram + the row's counters,
 * zeroed by a memset) | [rows][DSA_MAX_TOPK] int32 above-lists | [rows][TK_CAND_CAP] int32
 * candidate positions. */
#define TK_N_ABOVE (TK_BINS + 0) /* entries appended to the above-list */
#define TK_N_CAND (TK_BINS + 1)  /* entries appended to the candidate list */
#define TK_DONE (TK_BINS + 2)    /* histogram CTAs finished */
#define TK_B1 (TK_BINS + 3)      /* threshold bin of the first digit (set by the last CTA) */
#define TK_ABOVE (TK_BINS + 4)   /* elements in higher bins */
#define TK_RESOLVED (TK_BINS + 5) /* deferred: the row was resolved in its chunk (its bin overflowed) */
/* Deferred resolve (dsa_topk_chunk_launch / dsa_topk_final_launch: long rows whose scores do not all
 * fit the workspace at once): the filter keeps bin b1's elements as composites (key, ~position) in
 * the candidate region — half as many fit — so the final step needs no scores; a row whose bin holds
 * more is resolved at once by its chunk, from the scores, and flagged TK_RESOLVED. */
#define TK_COMP_CAP (TK_CAND_CAP / 2)
typedef struct {
  uint32_t *hist;      /* row stride TK_HDR */
  int32_t *above;      /* row stride DSA_MAX_TOPK */
  int32_t *cand;       /* row stride TK_CAND_CAP */
} tk_ws;

static tk_ws tk_carve(void *ws, int rows) {
  const dsa_topk_layout l = dsa_topk_ws_layout(rows);
  tk_ws w;
  char *p = (char *)ws;
  w.hist = (uint32_t *)(p + l.hist_off);
  w.above = (int32_t *)(p + l.above_off);
  w.cand = (int32_t *)(p + l.cand_off);
  return w;
}


/* Histogram of the first digit; the last CTA of a row to finish also finds the threshold bin b1
 * once, for every filter CTA and the resolve step to read. */
__global__ void __launch_bounds__(TK_THREADS) topk_hist_kernel(const dsa_topk_params p, tk_ws ws) {
  __shared__ uint32_t hist[TK_BINS];
  __shared__ int scratch[34];
  __shared__ int is_last;
  const int row = blockIdx.y, tid = threadIdx.x;
  const int L = rows_len(p.rows, row);
  const int start = blockIdx.x * TK_CHUNK;
  if (L <= p.topk || start >= L) return;
  for (int b = tid; b < TK_BINS; b += TK_THREADS) hist[b] = 0;
  __syncthreads();
  const float *s = p.scores + (long long)row * p.scores_stride;
  const int end = min(L, start + TK_CHUNK);
  for (int i = start + tid; i < end; i += TK_THREADS) atomicAdd(&hist[score_key(s[i]) >> 21], 1u);
  __syncthreads();
  uint32_t *gh = ws.hist + (size_t)row * TK_HDR;
  for (int b = tid; b < TK_BINS; b += TK_THREADS)
    if (hist[b]) atomicAdd(&gh[b], hist[b]);
  __threadfence();
  __syncthreads();
  if (tid == 0) is_last = atomicAdd(&gh[TK_DONE], 1u) == (uint32_t)((L + TK_CHUNK - 1) / TK_CHUNK) - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for (int b = tid; b < TK_BINS; b += TK_THREADS) hist[b] = __ldcg(&gh[b]);
  __syncthreads();
  int above;
  const int b1 = find_bin(hist, TK_BINS, p.topk, &above, scratch);
  if (tid == 0) {
    gh[TK_B1] = (uint32_t)b1;
    gh[TK_ABOVE] = (uint32_t)above;
  }
}

/* Split a chunk by the first digit: above b1 -> selected outright, in b1 -> candidate (when the
 * whole bin fits the candidate buffer). Appends are staged in shared memory and placed with one
 * global atomic per list per CTA (a global atomic per warp step would serialise on round trips). */
template <bool COMPS>
__global__ void __launch_bounds__(TK_THREADS) topk_filter_kernel(const dsa_topk_params p, tk_ws ws) {
  __shared__ int s_above[DSA_MAX_TOPK];
  __shared__ int s_cand[TK_CHUNK];
  __shared__ int cnt[2], base[2];
  /* a programmatic dependent of the histogram step: nothing read before its writes are visible */
  ptx_griddep_wait();
  const int row = blockIdx.y, tid = threadIdx.x;
  const int L = rows_len(p.rows, row);
  const int start = blockIdx.x * TK_CHUNK;
  if (L <= p.topk || start >= L) return;
  uint32_t *gh = ws.hist + (size_t)row * TK_HDR;
  const uint32_t b1 = __ldcg(&gh[TK_B1]);
  const bool keep_cands = __ldcg(&gh[b1]) <= (COMPS ? TK_COMP_CAP : TK_CAND_CAP);
  if (tid < 2) cnt[tid] = 0;
  __syncthreads();
  const float *s = p.scores + (long long)row * p.scores_stride;
  const int end = min(L, start + TK_CHUNK);
  const int lane = tid & 31;
  for (int i0 = start; i0 < end; i0 += TK_THREADS * 8) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int i = i0 + j * TK_THREADS + tid;
      v[j] = i < end ? s[i] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int i = i0 + j * TK_THREADS + tid;
      const uint32_t d = score_key(v[j]) >> 21;
      const bool sel = i < end && d > b1, cnd = keep_cands && i < end && d == b1;
      const unsigned ms = __ballot_sync(0xffffffffu, sel), mc = __ballot_sync(0xffffffffu, cnd);
      int bs = 0, bc = 0;
      if (lane == 0) {
        if (ms) bs = atomicAdd(&cnt[0], __popc(ms));
        if (mc) bc = atomicAdd(&cnt[1], __popc(mc));
      }
      bs = __shfl_sync(0xffffffffu, bs, 0);
      bc = __shfl_sync(0xffffffffu, bc, 0);
      const unsigned below = (1u << lane) - 1u;
      if (sel) s_above[bs + __popc(ms & below)] = i;
      if (cnd) s_cand[bc + __popc(mc & below)] = i;
    }
  }
  __syncthreads();
  if (tid == 0) {
    base[0] = cnt[0] ? (int)atomicAdd(&gh[TK_N_ABOVE], (uint32_t)cnt[0]) : 0;
    base[1] = cnt[1] ? (int)atomicAdd(&gh[TK_N_CAND], (uint32_t)cnt[1]) : 0;
  }
  __syncthreads();
  int32_t *abv = ws.above + (size_t)row * DSA_MAX_TOPK + base[0];
  for (int j = tid; j < cnt[0]; j += TK_THREADS) abv[j] = s_above[j];
  if constexpr (COMPS) {
    /* the score again (this CTA just read it: L1 / L2) beside its position */
    uint64_t *comp = (uint64_t *)(ws.cand + (size_t)row * TK_CAND_CAP) + base[1];
    for (int j = tid; j < cnt[1]; j += TK_THREADS) comp[j] = make_comp(score_key(s[s_cand[j]]), s_cand[j]);
  } else {
    int32_t *cand = ws.cand + (size_t)row * TK_CAND_CAP + base[1];
    for (int j = tid; j < cnt[1]; j += TK_THREADS) cand[j] = s_cand[j];
  }
}

/* Candidate i of the resolve step as a composite (mode 2: position i of the row, whatever its bin;
 * callers compare the top bits against b1). A listed position outside [0, L) (a list entry the
 * filter never wrote: only with inconsistent inputs) reads nothing and ranks as position -1,
 * which the output step turns into -1. */
static __device__ __forceinline__ uint64_t tk_source(int mode, int i, const uint64_t *cs, const int32_t *cand,
                                                     const float *s, int L) {
  if (mode == 0) return cs[i];
  if (mode == 3) { /* deferred: composites in the workspace (their positions were < L when written) */
    const uint64_t c = __ldcg((const unsigned long long *)cand + i);
    return (unsigned)~(uint32_t)c < (unsigned)L ? c : 0;
  }
  const int pos = mode == 1 ? cand[i] : i;
  if ((unsigned)pos >= (unsigned)L) return 0;
  return make_comp(score_key(s[pos]), pos);
}

typedef cub::BlockRadixSort<unsigned, TK_RESOLVE_THREADS, TK_SORT_ITEMS> tk_sort;

/* The chain's last step: one CTA per row. PHASE 0: the chain's (scores in the workspace); 1: a
 * deferred chunk's rows whose bin overflowed the composites (the others return at once); 2: the
 * deferred final step over a group's rows, from the composites (rows done in phase 1 skipped). */
template <int PHASE>
__global__ void __launch_bounds__(TK_RESOLVE_THREADS, 1) topk_resolve_kernel(const dsa_topk_params p, tk_ws ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint64_t *cs = (uint64_t *)smem;                               /* [TK_CAND_SMEM] candidates */
  uint32_t *hist = (uint32_t *)(cs + TK_CAND_SMEM);              /* [TK_BINS] */
  int *scratch = (int *)(hist + TK_BINS);                        /* [36] */
  int *sel = scratch + 36;                                       /* [DSA_MAX_TOPK] */
  typename tk_sort::TempStorage *sort_tmp = (typename tk_sort::TempStorage *)(sel + DSA_MAX_TOPK);

  __shared__ int row_len_s;
  /* a programmatic dependent of the filter (or, deferred final, of the last chunk's step) */
  ptx_griddep_wait();
  const int row = blockIdx.x, tid = threadIdx.x;
  const uint32_t *gh = ws.hist + (size_t)row * TK_HDR;
  /* Phase 2 skips a row phase 1 resolved before reading its length (lens may alias a length input
   * and now hold the output). */
  if (PHASE == 2 && __ldcg(&gh[TK_RESOLVED])) return;
  /* The row's length is read once, by one thread, before anything is written: every thread then
   * agrees on it even if an output (lens) aliases an input (row_lens, seq_lens). */
  if (tid == 0) row_len_s = rows_len(p.rows, row);
  __syncthreads();
  const int L = row_len_s;
  /* Phase 1: only rows with scores whose threshold bin overflowed the composites */
  if (PHASE == 1) {
    if (L <= p.topk || __ldcg(&gh[__ldcg(&gh[TK_B1]) & (TK_BINS - 1)]) <= (uint32_t)TK_COMP_CAP) return;
    if (tid == 0) ws.hist[(size_t)row * TK_HDR + TK_RESOLVED] = 1u; /* read by phase 2, a later kernel */
  }
  const int k = min(p.topk, L);
  int32_t *out = p.out + (size_t)row * p.topk;
  if (p.out_lens && tid == 0) p.out_lens[row] = k;
  if (L <= p.topk) {
    for (int i = tid; i < p.topk; i += TK_RESOLVE_THREADS) out[i] = i < L ? rows_output(p.rows, row, i) : -1;
    return;
  }

  const float *s = p.scores + (long long)row * p.scores_stride; /* not read in phase 2 */
  int32_t *cand = ws.cand + (size_t)row * TK_CAND_CAP;
  const int32_t *abv = ws.above + (size_t)row * DSA_MAX_TOPK;
  /* Threshold of the first digit, found once by the histogram step. Clamped, not trusted: the
   * chain's earlier kernels saw the row's length when they ran. */
  const uint32_t b1 = gh[TK_B1] & (TK_BINS - 1);
  const int above = min((int)min(gh[TK_ABOVE], gh[TK_N_ABOVE]), k);
  /* phase 2 reads at most the composites' capacity (more only with inconsistent inputs) */
  const int n_in_bin = (int)min(gh[b1], PHASE == 2 ? (uint32_t)TK_COMP_CAP : (uint32_t)TK_CAND_CAP + 1);
  /* Where the candidates (the elements of bin b1) are read from in each pass: shared memory when
   * they fit, the workspace list when the bin fit the list, else the whole row (slow, exact).
   * Phase 1 (overflowed composites): the whole row; phase 2: the composites (shared memory when
   * they fit, else the workspace: mode 3). */
  const int src_mode = PHASE == 1 ? 2
                       : PHASE == 2 ? (n_in_bin <= TK_CAND_SMEM ? 0 : 3)
                                    : (n_in_bin <= TK_CAND_SMEM ? 0 : n_in_bin <= TK_CAND_CAP ? 1 : 2);
  if (src_mode == 0)
    for (int i = tid; i < n_in_bin; i += TK_RESOLVE_THREADS) {
      if (PHASE == 2) {
        cs[i] = tk_source(3, i, cs, cand, s, L);
      } else {
        const int pos = cand[i]; /* clamped like tk_source: a list entry never written reads nothing */
        cs[i] = (unsigned)pos < (unsigned)L ? make_comp(score_key(s[pos]), pos) : 0;
      }
    }
  const int n_src = src_mode == 2 ? L : n_in_bin;
  __syncthreads();

  /* Radix passes over the remaining 53 composite bits until the last bin holds exactly `need`. */
  int need = p.topk - above;
  uint64_t prefix = (uint64_t)b1 << 53;
  int shift = 53; /* composite bits [shift, 64) are fixed by prefix */
  while (true) {
    const int width = shift >= 11 ? 11 : shift;
    const int nsh = shift - width;
    const int nb = 1 << width;
    for (int b = tid; b < nb; b += TK_RESOLVE_THREADS) hist[b] = 0;
    __syncthreads();
    for (int i = tid; i < n_src; i += TK_RESOLVE_THREADS) {
      const uint64_t c = tk_source(src_mode, i, cs, cand, s, L);
      if ((c >> shift) == (prefix >> shift)) atomicAdd(&hist[(c >> nsh) & (nb - 1)], 1u);
    }
    __syncthreads();
    int higher;
    const int bb = find_bin(hist, nb, need, &higher, scratch);
    const int in_bb = (int)hist[bb];
    need -= higher;
    prefix |= (uint64_t)bb << nsh;
    shift = nsh;
    __syncthreads();
    if (in_bb == need || shift == 0) break;
  }
  /* Selected: every above-list entry, and every candidate with comp >= prefix (prefix has the
   * remaining low bits zero, and its bin holds exactly `need`). */
  if (tid == 0) scratch[0] = 0;
  __syncthreads();
  for (int i = tid; i < above; i += TK_RESOLVE_THREADS) sel[i] = abv[i];
  for (int i = tid; i < n_src; i += TK_RESOLVE_THREADS) {
    const uint64_t c = tk_source(src_mode, i, cs, cand, s, L);
    if ((c >> 53) == b1 && c >= prefix) {
      const int j = atomicAdd(&scratch[0], 1);
      if (above + j < DSA_MAX_TOPK) sel[above + j] = (int)~(uint32_t)c;
    }
  }
  __syncthreads();
  sorted_rows_output<tk_sort, TK_SORT_ITEMS>(*sort_tmp, sel, k, L, p.topk, p.rows, row, out, tid);
}


static size_t tk_resolve_smem(void) {
  return (size_t)TK_CAND_SMEM * 8 + TK_BINS * 4 + 36 * 4 + DSA_MAX_TOPK * 4 +
         sizeof(typename tk_sort::TempStorage) + 16;
}


extern "C" int dsa_topk_chain_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream) {
  const int rows = p->num_tokens;
  const int max_len = p->rows.max_len;
  const tk_ws ws = tk_carve(workspace, rows);
  cudaError_t err = cudaMemsetAsync(ws.hist, 0, (size_t)rows * TK_HDR * 4, stream);
  if (err != cudaSuccess) return (int)err;
  const dim3 grid((unsigned)(((int64_t)max_len + TK_CHUNK - 1) / TK_CHUNK), (unsigned)rows);
  err = dsa_launch(topk_hist_kernel, grid, TK_THREADS, 0, stream, false, *p, ws);
  if (err != cudaSuccess) return (int)err;
  err = dsa_launch(topk_filter_kernel<false>, grid, TK_THREADS, 0, stream, true, *p, ws);
  if (err != cudaSuccess) return (int)err;
  static dsa_smem_cache chain_cache;
  return (int)dsa_launch_smem(topk_resolve_kernel<0>, &chain_cache, dim3((unsigned)rows), TK_RESOLVE_THREADS,
                              tk_resolve_smem(), stream, true, *p, ws);
}


/* ---------------------------------------------------------------------------------------------
 * Deferred resolve (long rows whose scores do not all fit the workspace: host/api_indexer.c scores a group's
 * tokens a chunk at a time into one buffer). Each chunk runs the chain's histogram and filter
 * (bin b1 kept as composites) and resolves only rows whose bin overflowed the composites; the
 * group's rows are resolved once at the end from the composites, without the scores. */

/* rows [row0, ...) of a top-k workspace carved for ws_rows rows */
static tk_ws tk_rows(void *workspace, int ws_rows, int row0) {
  tk_ws w = tk_carve(workspace, ws_rows);
  w.hist += (size_t)row0 * TK_HDR;
  w.above += (size_t)row0 * DSA_MAX_TOPK;
  w.cand += (size_t)row0 * TK_CAND_CAP;
  return w;
}

extern "C" int dsa_topk_chunk_launch(const dsa_topk_params *p, void *workspace, int ws_rows, int row0,
                                     cudaStream_t stream) {
  const int rows = p->num_tokens;
  if (rows <= 0) return 0;
  const tk_ws ws = tk_rows(workspace, ws_rows, row0);
  cudaError_t err = cudaMemsetAsync(ws.hist, 0, (size_t)rows * TK_HDR * 4, stream);
  if (err != cudaSuccess || p->rows.max_len <= p->topk) return (int)err;
  const dim3 grid((unsigned)(((int64_t)p->rows.max_len + TK_CHUNK - 1) / TK_CHUNK), (unsigned)rows);
  err = dsa_launch(topk_hist_kernel, grid, TK_THREADS, 0, stream, false, *p, ws);
  if (err != cudaSuccess) return (int)err;
  err = dsa_launch(topk_filter_kernel<true>, grid, TK_THREADS, 0, stream, true, *p, ws);
  if (err != cudaSuccess) return (int)err;
  static dsa_smem_cache cache;
  return (int)dsa_launch_smem(topk_resolve_kernel<1>, &cache, dim3((unsigned)rows), TK_RESOLVE_THREADS,
                              tk_resolve_smem(), stream, true, *p, ws);
}

extern "C" int dsa_topk_final_launch(const dsa_topk_params *p, void *workspace, int ws_rows, cudaStream_t stream) {
  if (p->num_tokens <= 0) return 0;
  static dsa_smem_cache cache;
  return (int)dsa_launch_smem(topk_resolve_kernel<2>, &cache, dim3((unsigned)p->num_tokens), TK_RESOLVE_THREADS,
                              tk_resolve_smem(), stream, true, *p, tk_rows(workspace, ws_rows, 0));
}

