/*
 * topk.cu — stage 2 of DSA: per-row top-k by radix select, no sorting of whole rows.
 *
 * For row t (L = visible length, k = min(topk, L)): the k positions with the largest scores,
 * ties to the lower position, NaN below every number. Rows with L <= topk select every position
 * without reading a score.
 *
 * Scores are ranked through a 64-bit composite that is unique per element:
 *   comp = key(score) << 32 | ~position,  key = order-preserving bits of the float (NaN -> 0)
 * so "largest k composites" is exactly the contract's order, and a radix select over comp always
 * ends with the k-th element isolated.
 *
 * Two ways to run it, one launch each where it can:
 *
 * Slices (topk_slices_kernel): a row is cut into C contiguous slices, one CTA each, the C CTAs of a
 * row one thread-block cluster (C = 1: a plain CTA; C up to 8). Used for rows up to
 * TKS_ONE_CTA_MAX_LEN (any number of rows, C = 1) and for few long rows (rows x C <= SMs). A CTA:
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
 *
 * Small rows (<= TKSM_MAX_LEN = 16,384, at most one a SM; topk_small_kernel): one CTA of 1,024 threads a row with
 * the keys in registers, thread t owning positions [PER t, PER t + PER): the same digits as the
 * slices (over the row's key range, then radix passes of 11 bits), each pass a loop over a
 * thread's own keys; the ascending output is one block scan of the threads' selected counts.
 * DSA_TOPK_SMALL=0 routes these rows to the slices kernel instead (tests, comparisons).
 *
 * Many long rows: a chain per batch of rows (the rows of one launch share the workspace):
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
 * Workspace per row: histogram + counters, the above-list, the candidate list (the slices kernel
 * needs none).
 */
#include <cub/block/block_radix_sort.cuh>
#include <stddef.h>
#include <stdint.h>

#include "dsa_kernels.h"
#include "launch.cuh"
#include "ptx.cuh"
#include "rows.cuh"
#include "score_key.cuh"

/* TK_BINS, TK_CHUNK, TK_CAND_CAP, TK_HDR: config.h (the host sizes the workspace from them). */
#define TK_THREADS 256
#define TK_CAND_SMEM 8192  /* candidates the resolve step holds in shared memory */
#define TK_RESOLVE_THREADS 256
#define TK_SORT_ITEMS (DSA_MAX_TOPK / TK_RESOLVE_THREADS)

/* Workspace (plan.c, dsa_topk_ws_layout): [rows][TK_HDR] uint32 (histogram + the row's counters,
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

/* Exclusive prefix sum over the block (blockDim.x a multiple of 32, <= 1024) with warp shuffles;
 * *total gets the block's sum. scratch: 32 ints of shared memory. */
static __device__ int block_exclusive_sum(int v, int *scratch, int *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < nw ? scratch[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  const int excl = x - v + (warp ? scratch[warp - 1] : 0);
  *total = scratch[nw - 1];
  __syncthreads(); /* scratch may be reused right after */
  return excl;
}

/* Find, in a histogram of nb bins, the bin holding the need-th largest element (counting from the
 * top bin). Returns the bin, and in *above the count in higher bins. All threads of the block get
 * the answer. scratch: 34 ints of shared memory. */
static __device__ int find_bin(const uint32_t *hist, int nb, int need, int *above, int *scratch) {
  const int tid = threadIdx.x, nt = blockDim.x;
  const int per = (nb + nt - 1) / nt;
  /* If no bin reaches `need` (fewer elements than need: only with inconsistent inputs, e.g. an
   * output aliasing a length), the answer is bin 0: defined, and in range. */
  if (tid == 0) {
    scratch[32] = 0;
    scratch[33] = 0;
  }
  /* thread i owns bins [nb - per*(i+1), nb - per*i) — thread 0 the highest. */
  const int hi = nb - per * tid, lo = max(0, hi - per);
  int sum = 0;
  for (int b = lo; b < hi; b++) sum += hist[b];
  int total;
  const int before = block_exclusive_sum(sum, scratch, &total); /* elements in higher bins */
  if (before < need && before + sum >= need) {
    int run = before;
    for (int b = hi - 1; b >= lo; b--) {
      if (run + (int)hist[b] >= need) {
        scratch[32] = b;
        scratch[33] = run;
        break;
      }
      run += hist[b];
    }
  }
  __syncthreads();
  const int bin = scratch[32];
  *above = scratch[33];
  __syncthreads();
  return bin;
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
  /* Deterministic order: ascending position. Positions are < L < 2^pos_bits; the pad sorts last. */
  const int pos_bits = 32 - __clz(L);
  const unsigned pad = (1u << pos_bits) - 1u;
  unsigned items[TK_SORT_ITEMS];
#pragma unroll
  for (int j = 0; j < TK_SORT_ITEMS; j++) {
    const int i = tid * TK_SORT_ITEMS + j;
    items[j] = i < k ? (unsigned)sel[i] : pad;
  }
  tk_sort(*sort_tmp).Sort(items, 0, pos_bits);
  /* every lookup (block table) in flight before any store: a store between them would order them */
  int outv[TK_SORT_ITEMS];
#pragma unroll
  for (int j = 0; j < TK_SORT_ITEMS; j++) {
    const int i = tid * TK_SORT_ITEMS + j;
    outv[j] = i < k && items[j] < (unsigned)L ? rows_output(p.rows, row, (int)items[j]) : -1;
  }
#pragma unroll
  for (int j = 0; j < TK_SORT_ITEMS; j++) {
    const int i = tid * TK_SORT_ITEMS + j;
    if (i < p.topk) out[i] = outv[j];
  }
}

/* ---------------------------------------------------------------------------------------------
 * Slices: one CTA a slice of the row, a thread-block cluster a row (header comment, "Slices").
 */
#define TKS_THREADS 512
#define TKS_WARPS (TKS_THREADS / 32)
#define TKS_MAX_CTAS 8         /* a portable cluster size (16 measured slower than the chain: docs/PERF.md) */
#define TKS_SLICE 16384        /* few long rows are cut into slices of at most this many positions */
#define TKS_SMEM_KEYS 40960    /* positions of a slice held in shared memory (160 KB) */
#define TKS_ONE_CTA_MAX_LEN TKS_SMEM_KEYS /* rows up to this long run one CTA each, however many */
static_assert(TKS_ONE_CTA_MAX_LEN == DSA_TOPK_ONE_CTA_MAX_LEN, "config.h states it for the host");
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

/* The normalised composite of the slices kernel: the key's offset from the row's smallest key
 * (so the first digit spreads the row's actual range over the bins, not over all of float space)
 * above ~position. Same order as make_comp. */
static __device__ __forceinline__ uint64_t tks_comp(uint32_t key, uint32_t kmin, int pos) {
  return ((uint64_t)(key - kmin) << 32) | (uint32_t)~(uint32_t)pos;
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
      const bool sel = j < we && tks_comp(key[u], kmin, lo + j) >= T;
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
      if (in && base < TKS_CAND) sm->cand[base] = tks_comp(key, kmin, lo + j);
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
        if (valid) count(tks_comp(key, kmin, lo + j));
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

static size_t tk_resolve_smem(void) {
  return (size_t)TK_CAND_SMEM * 8 + TK_BINS * 4 + 36 * 4 + DSA_MAX_TOPK * 4 +
         sizeof(typename tk_sort::TempStorage) + 16;
}

/* Slices of the rows, C CTAs (one cluster) a row. */
static cudaError_t tks_launch(const dsa_topk_params *p, int C, cudaStream_t stream) {
  /* One limit for the kernel, whatever C: per-C caches let a smaller C lower the limit another C's
   * cache still trusted, and the launch failed once before its retry (an error left in the runtime,
   * and a broken graph capture). */
  static dsa_smem_cache cache;
  const int max_len = p->rows.max_len > p->topk ? p->rows.max_len : 0;
  const size_t smem = tks_smem_bytes(max_len, C);
  const int nk = max_len == 0 ? 0 : (int)((smem - offsetof(tks_smem, keys)) / 4 - 4);
  return dsa_launch_smem_cluster(topk_slices_kernel, &cache, dim3((unsigned)(p->num_tokens * C)),
                                 TKS_THREADS, smem, stream, true, C > 1 ? (unsigned)C : 0u, *p, nk);
}

/* ---------------------------------------------------------------------------------------------
 * Small rows: one CTA a row, keys in registers (header comment, "Small rows"). */
#define TKSM_THREADS 1024
#define TKSM_MAX_LEN (TKSM_THREADS * 16)
#define TKSM_WARPS (TKSM_THREADS / 32)

template <int PER>
__global__ void __launch_bounds__(TKSM_THREADS, 1) topk_small_kernel(const dsa_topk_params p) {
  __shared__ uint32_t hist[2][TK_BINS];
  __shared__ int scratch[40];
  __shared__ uint32_t red[2][TKSM_WARPS];
  __shared__ uint32_t range[2];
  __shared__ int len_s;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row = blockIdx.x;

  /* A programmatic dependent (scores, lengths, block table may come from the previous kernel). */
  ptx_griddep_wait();
  /* The length is read once, before anything is written (lens may alias a length input). */
  if (tid == 0) len_s = rows_len(p.rows, row);
  __syncthreads();
  const int L = min(len_s, PER * TKSM_THREADS); /* the host routes only rows this long here */
  const int k = min(p.topk, L);
  int32_t *out = p.out + (size_t)row * p.topk;
  if (L <= p.topk) { /* every position, no score read */
    if (p.out_lens && tid == 0) p.out_lens[row] = k;
    for (int i = tid; i < p.topk; i += TKSM_THREADS) out[i] = i < L ? rows_output(p.rows, row, i) : -1;
    return;
  }

  /* 1. this thread's keys (positions >= L hold 0 and are never counted) */
  const float *s = p.scores + (long long)row * p.scores_stride;
  const int base = PER * tid;
  uint32_t key[PER];
  if (base + PER <= L && ((uintptr_t)(s + base) & 15) == 0) {
#pragma unroll
    for (int v = 0; v < PER / 4; v++) {
      const float4 f = *(const float4 *)(s + base + 4 * v);
      key[4 * v] = score_key(f.x);
      key[4 * v + 1] = score_key(f.y);
      key[4 * v + 2] = score_key(f.z);
      key[4 * v + 3] = score_key(f.w);
    }
  } else {
#pragma unroll
    for (int i = 0; i < PER; i++) key[i] = base + i < L ? score_key(s[base + i]) : 0u;
  }
  const int nv = max(0, min(PER, L - base)); /* this thread's valid keys: the first nv */

  /* 2. the row's key range; the first digit spreads it over the 2048 bins */
  uint32_t mn = 0xffffffffu, mx = 0u;
#pragma unroll
  for (int i = 0; i < PER; i++)
    if (i < nv) {
      mn = min(mn, key[i]);
      mx = max(mx, key[i]);
    }
  mn = __reduce_min_sync(0xffffffffu, mn);
  mx = __reduce_max_sync(0xffffffffu, mx);
  if (lane == 0) {
    red[0][warp] = mn;
    red[1][warp] = mx;
  }
  for (int b = tid; b < TK_BINS; b += TKSM_THREADS) hist[0][b] = 0u;
  __syncthreads();
  if (warp == 0) {
    mn = __reduce_min_sync(0xffffffffu, red[0][lane]);
    mx = __reduce_max_sync(0xffffffffu, red[1][lane]);
    if (lane == 0) {
      range[0] = mn;
      range[1] = mx;
    }
  }
  __syncthreads();
  const uint32_t kmin = range[0], span = range[1] - kmin;
  const int sh = max(0, (32 - __clz((int)span)) - 11); /* span >> sh < 2048 */
#pragma unroll
  for (int i = 0; i < PER; i++)
    if (i < nv) atomicAdd(&hist[0][(key[i] - kmin) >> sh], 1u);
  __syncthreads();
  int above;
  const uint32_t b1 = (uint32_t)find_bin(hist[0], TK_BINS, p.topk, &above, scratch);
  int need = p.topk - above;
  bool done = (int)hist[0][b1] == need; /* all of b1 is selected */
  int shift = 32 + sh;                  /* composite bits [shift, 64) are fixed by T */
  uint64_t T = (uint64_t)b1 << shift;   /* selected <=> comp >= T (T's bits below shift are 0) */

  /* 3. radix passes of 11 bits below the first digit over the elements still tied with T */
  for (int pass = 1; !done; ++pass) {
    const int width = shift >= 11 ? 11 : shift;
    const int nsh = shift - width;
    const int nb = 1 << width;
    uint32_t *h = hist[pass & 1]; /* the other buffer was read last in the previous pass */
    for (int b = tid; b < nb; b += TKSM_THREADS) h[b] = 0u;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < PER; i++) {
      const uint64_t c = tks_comp(key[i], kmin, base + i);
      if (i < nv && (c >> shift) == (T >> shift)) atomicAdd(&h[(c >> nsh) & (nb - 1)], 1u);
    }
    __syncthreads();
    int higher;
    const int bb = find_bin(h, nb, need, &higher, scratch);
    const int in_bb = (int)h[bb];
    need -= higher;
    T |= (uint64_t)bb << nsh;
    shift = nsh;
    done = in_bb == need || shift == 0;
  }

  /* 4. the selected positions (comp >= T) in ascending order: thread t's come after the selected
   *    positions of threads < t — one block scan of the counts; lookups four at a time in flight
   *    before their stores */
  int cnt = 0;
#pragma unroll
  for (int i = 0; i < PER; i++) cnt += i < nv && tks_comp(key[i], kmin, base + i) >= T;
  int total;
  int r = block_exclusive_sum(cnt, scratch, &total);
#pragma unroll
  for (int i0 = 0; i0 < PER; i0 += 4) {
    int slot[4], v[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int i = i0 + u;
      const bool sel = i < nv && tks_comp(key[i], kmin, base + i) >= T;
      slot[u] = sel && r < k ? r : -1;
      r += sel;
      v[u] = slot[u] >= 0 ? rows_output(p.rows, row, base + i) : -1;
    }
#pragma unroll
    for (int u = 0; u < 4; u++)
      if (slot[u] >= 0) out[slot[u]] = v[u];
  }
  /* fewer than k selected happens only with inconsistent inputs; what is left stays defined: -1 */
  for (int i = min(total, k) + tid; i < p.topk; i += TKSM_THREADS) out[i] = -1;
  if (p.out_lens && tid == 0) p.out_lens[row] = k;
}

static cudaError_t tksm_launch(const dsa_topk_params *p, cudaStream_t stream) {
  const dim3 grid((unsigned)p->num_tokens);
  return p->rows.max_len <= 8 * TKSM_THREADS
             ? dsa_launch(topk_small_kernel<8>, grid, TKSM_THREADS, 0, stream, true, *p)
             : dsa_launch(topk_small_kernel<16>, grid, TKSM_THREADS, 0, stream, true, *p);
}

extern "C" int dsa_topk_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream) {
  const int rows = p->num_tokens;
  if (rows <= 0) return 0;
  const int max_len = p->rows.max_len;
  /* Few rows up to TKS_MAX_CTAS x TKS_SLICE: a cluster of C CTAs each; rows that fit one CTA's shared
   * memory: one CTA each, however many; no score to read: one CTA each. */
  if (max_len <= p->topk) return (int)tks_launch(p, 1, stream);
  const int sms = p->num_sms > 0 ? p->num_sms : 132;
  /* one CTA an SM: beyond one wave the slices kernel wins (H200, 2026-11-30: 64 x 8k 13.0 against
   * 19.3 us, 256 x 8k 25.0 against 21.4) */
  if (max_len <= TKSM_MAX_LEN && p->allow_small && rows <= sms) return (int)tksm_launch(p, stream);
  int C = 1;
  while (C < TKS_MAX_CTAS && (max_len + C - 1) / C > TKS_SLICE) C *= 2;
  /* rows x C <= allow_cluster x SMs: more clusters than the SMs hold at once run in waves (a
   * cluster only needs its own C CTAs resident); which budget beats the chain is measured */
  if (p->allow_cluster && (max_len + C - 1) / C <= TKS_SLICE &&
      (int64_t)rows * C <= (int64_t)sms * p->allow_cluster) {
    const cudaError_t err = tks_launch(p, C, stream);
    if (err != cudaErrorInvalidClusterSize) return (int)err;
    (void)cudaGetLastError(); /* a device that cannot form the clusters: the paths below */
  }
  if (max_len <= TKS_ONE_CTA_MAX_LEN) return (int)tks_launch(p, 1, stream);

  /* Many long rows: the chain. */
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
 * Deferred resolve (long rows whose scores do not all fit the workspace: dsa.c scores a group's
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
