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
 * Rows up to TK_FUSED_MAX_LEN: one CTA per row does everything below in one launch. Longer rows,
 * a chain per batch of rows (the rows of one launch share the workspace):
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
#include <stdint.h>

#include "dsa_kernels.h"
#include "launch.cuh"
#include "rows.cuh"

/* TK_BINS, TK_CHUNK, TK_CAND_CAP, TK_HDR: config.h (the host sizes the workspace from them). */
#define TK_THREADS 256
#define TK_CAND_SMEM 8192  /* candidates the resolve step holds in shared memory */
#define TK_RESOLVE_THREADS 256
#define TK_FUSED_MAX_LEN 12288 /* rows up to this long are selected by one CTA each (measured: faster than the chain up to ~12k) */
#define TK_SORT_ITEMS (DSA_MAX_TOPK / TK_RESOLVE_THREADS)

/* Workspace (plan.c, dsa_topk_ws_layout): [rows][TK_HDR] uint32 (histogram + the row's counters,
 * zeroed by a memset) | [rows][DSA_MAX_TOPK] int32 above-lists | [rows][TK_CAND_CAP] int32
 * candidate positions. */
#define TK_N_ABOVE (TK_BINS + 0) /* entries appended to the above-list */
#define TK_N_CAND (TK_BINS + 1)  /* entries appended to the candidate list */
#define TK_DONE (TK_BINS + 2)    /* histogram CTAs finished */
#define TK_B1 (TK_BINS + 3)      /* threshold bin of the first digit (set by the last CTA) */
#define TK_ABOVE (TK_BINS + 4)   /* elements in higher bins */
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

static __device__ __forceinline__ uint32_t score_key(float f) {
  uint32_t u = __float_as_uint(f);
  if (f != f) return 0u;            /* NaN: below every number */
  if (u == 0x80000000u) u = 0u;     /* -0 ties with +0 */
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __device__ __forceinline__ uint64_t make_comp(uint32_t key, int pos) {
  return ((uint64_t)key << 32) | (uint32_t)~(uint32_t)pos;
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
__global__ void __launch_bounds__(TK_THREADS) topk_filter_kernel(const dsa_topk_params p, tk_ws ws) {
  __shared__ int s_above[DSA_MAX_TOPK];
  __shared__ int s_cand[TK_CHUNK];
  __shared__ int cnt[2], base[2];
  const int row = blockIdx.y, tid = threadIdx.x;
  const int L = rows_len(p.rows, row);
  const int start = blockIdx.x * TK_CHUNK;
  if (L <= p.topk || start >= L) return;
  uint32_t *gh = ws.hist + (size_t)row * TK_HDR;
  const uint32_t b1 = __ldcg(&gh[TK_B1]);
  const bool keep_cands = __ldcg(&gh[b1]) <= TK_CAND_CAP;
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
  int32_t *cand = ws.cand + (size_t)row * TK_CAND_CAP + base[1];
  for (int j = tid; j < cnt[0]; j += TK_THREADS) abv[j] = s_above[j];
  for (int j = tid; j < cnt[1]; j += TK_THREADS) cand[j] = s_cand[j];
}

/* Candidate i of the resolve step as a composite (mode 2: position i of the row, whatever its bin;
 * callers compare the top bits against b1). A listed position outside [0, L) (a list entry the
 * filter never wrote: only with inconsistent inputs) reads nothing and ranks as position -1,
 * which the output step turns into -1. */
static __device__ __forceinline__ uint64_t tk_source(int mode, int i, const uint64_t *cs, const int32_t *cand,
                                                     const float *s, int L) {
  if (mode == 0) return cs[i];
  const int pos = mode == 1 ? cand[i] : i;
  if ((unsigned)pos >= (unsigned)L) return 0;
  return make_comp(score_key(s[pos]), pos);
}

typedef cub::BlockRadixSort<unsigned, TK_RESOLVE_THREADS, TK_SORT_ITEMS> tk_sort;

/* FUSED: the whole select in one CTA per row (short rows: one launch instead of a memset and three
 * dependent kernels); else the last step after topk_hist and topk_filter. */
template <bool FUSED>
__global__ void __launch_bounds__(TK_RESOLVE_THREADS, 1) topk_resolve_kernel(const dsa_topk_params p, tk_ws ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint64_t *cs = (uint64_t *)smem;                               /* [TK_CAND_SMEM] candidates */
  uint32_t *hist = (uint32_t *)(cs + TK_CAND_SMEM);              /* [TK_BINS] */
  int *scratch = (int *)(hist + TK_BINS);                        /* [36] */
  int *sel = scratch + 36;                                       /* [DSA_MAX_TOPK] */
  typename tk_sort::TempStorage *sort_tmp = (typename tk_sort::TempStorage *)(sel + DSA_MAX_TOPK);

  __shared__ int row_len_s;
  const int row = blockIdx.x, tid = threadIdx.x;
  /* The row's length is read once, by one thread, before anything is written: every thread then
   * agrees on it even if an output (lens) aliases an input (row_lens, seq_lens). */
  if (tid == 0) row_len_s = rows_len(p.rows, row);
  __syncthreads();
  const int L = row_len_s;
  const int k = min(p.topk, L);
  int32_t *out = p.out + (size_t)row * p.topk;
  if (p.out_lens && tid == 0) p.out_lens[row] = k;
  if (L <= p.topk) {
    for (int i = tid; i < p.topk; i += TK_RESOLVE_THREADS) out[i] = i < L ? rows_output(p.rows, row, i) : -1;
    return;
  }

  const float *s = p.scores + (long long)row * p.scores_stride;
  int32_t *cand = ws.cand + (size_t)row * TK_CAND_CAP;
  const int32_t *abv = ws.above + (size_t)row * DSA_MAX_TOPK;
  uint32_t b1;
  int above, n_in_bin;
  if (FUSED) {
    /* Histogram of the first digit over the whole row, then split it: above b1 straight into the
     * selection, b1 into the candidates. */
    for (int b = tid; b < TK_BINS; b += TK_RESOLVE_THREADS) hist[b] = 0;
    __syncthreads();
    for (int i = tid; i < L; i += TK_RESOLVE_THREADS) atomicAdd(&hist[score_key(s[i]) >> 21], 1u);
    __syncthreads();
    b1 = (uint32_t)find_bin(hist, TK_BINS, p.topk, &above, scratch);
    n_in_bin = (int)hist[b1];
    if (tid == 0) scratch[34] = scratch[35] = 0;
    __syncthreads();
    for (int i = tid; i < L; i += TK_RESOLVE_THREADS) {
      const uint32_t key = score_key(s[i]);
      const uint32_t d = key >> 21;
      if (d > b1) {
        sel[atomicAdd(&scratch[34], 1)] = i;
      } else if (d == b1 && n_in_bin <= TK_CAND_CAP) {
        const int j = atomicAdd(&scratch[35], 1);
        if (n_in_bin <= TK_CAND_SMEM) cs[j] = make_comp(key, i);
        else cand[j] = i;
      }
    }
  } else {
    /* Threshold of the first digit, found once by the histogram step. */
    /* Clamped, not trusted: the chain's earlier kernels saw the row's length when they ran. */
    const uint32_t *gh = ws.hist + (size_t)row * TK_HDR;
    b1 = gh[TK_B1] & (TK_BINS - 1);
    above = min((int)min(gh[TK_ABOVE], gh[TK_N_ABOVE]), k);
    n_in_bin = (int)min(gh[b1], (uint32_t)TK_CAND_CAP + 1);
  }
  /* Where the candidates (the elements of bin b1) are read from in each pass: shared memory when
   * they fit, the workspace list when the bin fit the list, else the whole row (slow, exact). */
  const int src_mode = n_in_bin <= TK_CAND_SMEM ? 0 : n_in_bin <= TK_CAND_CAP ? 1 : 2;
  if (!FUSED && src_mode == 0)
    for (int i = tid; i < n_in_bin; i += TK_RESOLVE_THREADS) {
      const int pos = cand[i]; /* clamped like tk_source: a list entry never written reads nothing */
      cs[i] = (unsigned)pos < (unsigned)L ? make_comp(score_key(s[pos]), pos) : 0;
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
  if (!FUSED)
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
#pragma unroll
  for (int j = 0; j < TK_SORT_ITEMS; j++) {
    const int i = tid * TK_SORT_ITEMS + j;
    if (i < p.topk) out[i] = i < k && items[j] < (unsigned)L ? rows_output(p.rows, row, (int)items[j]) : -1;
  }
}

static size_t tk_resolve_smem(void) {
  return (size_t)TK_CAND_SMEM * 8 + TK_BINS * 4 + 36 * 4 + DSA_MAX_TOPK * 4 +
         sizeof(typename tk_sort::TempStorage) + 16;
}

extern "C" int dsa_topk_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream) {
  const int rows = p->num_tokens;
  if (rows <= 0) return 0;
  const tk_ws ws = tk_carve(workspace, rows);
  cudaError_t err;
  /* Short rows: one CTA per row does the whole select (a launch chain costs more than the reads). */
  const bool fused = p->rows.max_len <= TK_FUSED_MAX_LEN;
  if (!fused && p->rows.max_len > p->topk) {
    err = cudaMemsetAsync(ws.hist, 0, (size_t)rows * TK_HDR * 4, stream);
    if (err != cudaSuccess) return (int)err;
    const dim3 grid((unsigned)(((int64_t)p->rows.max_len + TK_CHUNK - 1) / TK_CHUNK), (unsigned)rows);
    err = dsa_launch(topk_hist_kernel, grid, TK_THREADS, 0, stream, false, *p, ws);
    if (err != cudaSuccess) return (int)err;
    err = dsa_launch(topk_filter_kernel, grid, TK_THREADS, 0, stream, false, *p, ws);
    if (err != cudaSuccess) return (int)err;
  }
  static dsa_smem_cache fused_cache, chain_cache;
  const size_t smem = tk_resolve_smem();
  if (fused)
    return (int)dsa_launch_smem(topk_resolve_kernel<true>, &fused_cache, dim3((unsigned)rows), TK_RESOLVE_THREADS, smem,
                                stream, false, *p, ws);
  return (int)dsa_launch_smem(topk_resolve_kernel<false>, &chain_cache, dim3((unsigned)rows), TK_RESOLVE_THREADS, smem,
                              stream, false, *p, ws);
}
