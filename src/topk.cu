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
 * Three launches per batch of rows (the rows of one launch share the workspace):
 *   1. topk_hist     grid (chunks of 8192, rows): 2048-bin histogram of the top 11 key bits,
 *                    per-CTA in shared memory, merged into the row's global histogram.
 *   2. topk_filter   same grid: every CTA finds the threshold bin b1 from the global histogram;
 *                    elements above b1 are selected outright (appended to the row's list),
 *                    elements in b1 are appended to a candidate buffer (if the bin fits in it).
 *   3. topk_resolve  one CTA per row: radix passes of 11 bits over the candidates' remaining
 *                    composite bits (in shared memory; or over the row in global memory when the
 *                    bin overflowed the buffer — slow but exact), then the selected positions are
 *                    sorted ascending (so the output is deterministic whatever the atomics' order),
 *                    mapped to slots / rows and written with lens and the -1 tail.
 * Workspace per row: histogram + counters (zeroed by a memset), the above-list, the candidates.
 */
#include <cub/block/block_radix_sort.cuh>
#include <stdint.h>

#include "dsa_kernels.h"
#include "rows.cuh"

#define TK_BINS 2048
#define TK_CHUNK 8192
#define TK_THREADS 256
#define TK_CAND_CAP 8192
#define TK_RESOLVE_THREADS 512
#define TK_SORT_ITEMS (DSA_MAX_TOPK / TK_RESOLVE_THREADS)

/* Workspace: [rows][TK_BINS + 4] uint32 (histogram, n_above, n_cand) | [rows][DSA_MAX_TOPK] int32
 * above-lists | [rows][TK_CAND_CAP] uint64 candidates. */
typedef struct {
  uint32_t *hist;      /* row stride TK_BINS + 4; [TK_BINS] = n_above, [TK_BINS+1] = n_cand */
  int32_t *above;      /* row stride DSA_MAX_TOPK */
  uint64_t *cand;      /* row stride TK_CAND_CAP */
} tk_ws;

static size_t tk_hist_bytes(int rows) { return (size_t)rows * (TK_BINS + 4) * 4; }
static size_t tk_round256(size_t b) { return (b + 255) & ~(size_t)255; }

static tk_ws tk_carve(void *ws, int rows) {
  tk_ws w;
  char *p = (char *)ws;
  w.hist = (uint32_t *)p;
  p += tk_round256(tk_hist_bytes(rows));
  w.above = (int32_t *)p;
  p += tk_round256((size_t)rows * DSA_MAX_TOPK * 4);
  w.cand = (uint64_t *)p;
  return w;
}

extern "C" size_t dsa_topk_workspace_impl(int num_rows, int topk) {
  (void)topk;
  if (num_rows <= 0) return 0;
  return tk_round256(tk_hist_bytes(num_rows)) + tk_round256((size_t)num_rows * DSA_MAX_TOPK * 4) +
         (size_t)num_rows * TK_CAND_CAP * 8;
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

/* Find, in a histogram of nb bins, the bin holding the need-th largest element (counting from the
 * top bin). Returns the bin, and in *above the count in higher bins. All threads of the block get
 * the answer. scratch: blockDim.x + 2 ints of shared memory. */
static __device__ int find_bin(const uint32_t *hist, int nb, int need, int *above, int *scratch) {
  const int tid = threadIdx.x, nt = blockDim.x;
  const int per = (nb + nt - 1) / nt;
  /* thread i owns bins [nb - per*(i+1), nb - per*i) — thread 0 the highest. */
  const int hi = nb - per * tid, lo = max(0, hi - per);
  int sum = 0;
  for (int b = lo; b < hi; b++) sum += hist[b];
  scratch[tid] = sum;
  __syncthreads();
  /* inclusive scan over threads (Hillis-Steele in place, nt <= 1024) */
  for (int off = 1; off < nt; off <<= 1) {
    const int v = tid >= off ? scratch[tid - off] : 0;
    __syncthreads();
    scratch[tid] += v;
    __syncthreads();
  }
  const int before = scratch[tid] - sum; /* elements in bins above this thread's range */
  __syncthreads();
  if (before < need && before + sum >= need) {
    int run = before;
    for (int b = hi - 1; b >= lo; b--) {
      if (run + (int)hist[b] >= need) {
        scratch[nt] = b;
        scratch[nt + 1] = run;
        break;
      }
      run += hist[b];
    }
  }
  __syncthreads();
  const int bin = scratch[nt];
  *above = scratch[nt + 1];
  __syncthreads();
  return bin;
}

/* Warp-aggregated append: each lane with pred gets a unique index in [*counter, ...). */
static __device__ __forceinline__ int warp_append(bool pred, uint32_t *counter) {
  const unsigned mask = __ballot_sync(0xffffffffu, pred);
  const int lane = threadIdx.x & 31;
  int base = 0;
  if (mask) {
    const int leader = __ffs(mask) - 1;
    if (lane == leader) base = (int)atomicAdd(counter, (uint32_t)__popc(mask));
    base = __shfl_sync(0xffffffffu, base, leader);
  }
  return base + __popc(mask & ((1u << lane) - 1u));
}

__global__ void __launch_bounds__(TK_THREADS) topk_hist_kernel(const dsa_topk_params p, tk_ws ws) {
  __shared__ uint32_t hist[TK_BINS];
  const int row = blockIdx.y;
  const int L = rows_len(p.rows, row);
  const int start = blockIdx.x * TK_CHUNK;
  if (L <= p.topk || start >= L) return;
  for (int b = threadIdx.x; b < TK_BINS; b += TK_THREADS) hist[b] = 0;
  __syncthreads();
  const float *s = p.scores + (long long)row * p.scores_stride;
  const int end = min(L, start + TK_CHUNK);
  for (int i = start + threadIdx.x; i < end; i += TK_THREADS) atomicAdd(&hist[score_key(s[i]) >> 21], 1u);
  __syncthreads();
  uint32_t *gh = ws.hist + (size_t)row * (TK_BINS + 4);
  for (int b = threadIdx.x; b < TK_BINS; b += TK_THREADS)
    if (hist[b]) atomicAdd(&gh[b], hist[b]);
}

__global__ void __launch_bounds__(TK_THREADS) topk_filter_kernel(const dsa_topk_params p, tk_ws ws) {
  __shared__ uint32_t hist[TK_BINS];
  __shared__ int scratch[TK_THREADS + 2];
  const int row = blockIdx.y;
  const int L = rows_len(p.rows, row);
  const int start = blockIdx.x * TK_CHUNK;
  if (L <= p.topk || start >= L) return;
  uint32_t *gh = ws.hist + (size_t)row * (TK_BINS + 4);
  for (int b = threadIdx.x; b < TK_BINS; b += TK_THREADS) hist[b] = gh[b];
  __syncthreads();
  int above;
  const uint32_t b1 = (uint32_t)find_bin(hist, TK_BINS, p.topk, &above, scratch);
  const bool keep_cands = hist[b1] <= TK_CAND_CAP;
  const float *s = p.scores + (long long)row * p.scores_stride;
  int32_t *abv = ws.above + (size_t)row * DSA_MAX_TOPK;
  uint64_t *cand = ws.cand + (size_t)row * TK_CAND_CAP;
  const int end = min(L, start + TK_CHUNK);
  /* Loop bound is warp-uniform so that every lane takes part in the ballots. */
  for (int base = start; base < end; base += TK_THREADS) {
    const int i = base + threadIdx.x;
    uint32_t key = 0, d = 0;
    if (i < end) {
      key = score_key(s[i]);
      d = key >> 21;
    }
    const bool sel = i < end && d > b1;
    const bool cnd = keep_cands && i < end && d == b1;
    const int ia = warp_append(sel, &gh[TK_BINS]);
    if (sel) abv[ia] = i;
    const int ic = warp_append(cnd, &gh[TK_BINS + 1]);
    if (cnd) cand[ic] = make_comp(key, i);
  }
}

typedef cub::BlockRadixSort<int, TK_RESOLVE_THREADS, TK_SORT_ITEMS> tk_sort;

__global__ void __launch_bounds__(TK_RESOLVE_THREADS) topk_resolve_kernel(const dsa_topk_params p, tk_ws ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint64_t *cs = (uint64_t *)smem;                               /* [TK_CAND_CAP] candidates */
  uint32_t *hist = (uint32_t *)(cs + TK_CAND_CAP);               /* [TK_BINS] */
  int *scratch = (int *)(hist + TK_BINS);                        /* [threads + 4] */
  int *sel = scratch + TK_RESOLVE_THREADS + 4;                   /* [DSA_MAX_TOPK] */
  typename tk_sort::TempStorage *sort_tmp = (typename tk_sort::TempStorage *)(sel + DSA_MAX_TOPK);

  const int row = blockIdx.x, tid = threadIdx.x;
  const int L = rows_len(p.rows, row);
  const int k = min(p.topk, L);
  int32_t *out = p.out + (size_t)row * p.topk;
  if (p.out_lens && tid == 0) p.out_lens[row] = k;
  if (L <= p.topk) {
    for (int i = tid; i < p.topk; i += TK_RESOLVE_THREADS) out[i] = i < L ? rows_output(p.rows, row, i) : -1;
    return;
  }

  /* Threshold bin of the first digit again (same answer as every filter CTA). */
  uint32_t *gh = ws.hist + (size_t)row * (TK_BINS + 4);
  for (int b = tid; b < TK_BINS; b += TK_RESOLVE_THREADS) hist[b] = gh[b];
  __syncthreads();
  int above;
  const uint32_t b1 = (uint32_t)find_bin(hist, TK_BINS, p.topk, &above, scratch);
  const int n_in_bin = (int)hist[b1];
  const bool in_smem = n_in_bin <= TK_CAND_CAP;
  const float *s = p.scores + (long long)row * p.scores_stride;
  const int32_t *abv = ws.above + (size_t)row * DSA_MAX_TOPK;
  if (in_smem)
    for (int i = tid; i < n_in_bin; i += TK_RESOLVE_THREADS) cs[i] = ws.cand[(size_t)row * TK_CAND_CAP + i];
  const int n_src = in_smem ? n_in_bin : L;
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
      uint64_t c;
      if (in_smem) {
        c = cs[i];
      } else {
        c = make_comp(score_key(s[i]), i);
      }
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
    uint64_t c;
    if (in_smem) {
      c = cs[i];
    } else {
      const uint32_t key = score_key(s[i]);
      if ((key >> 21) != b1) continue;
      c = make_comp(key, i);
    }
    if (c >= prefix) {
      const int j = atomicAdd(&scratch[0], 1);
      if (above + j < DSA_MAX_TOPK) sel[above + j] = (int)~(uint32_t)c;
    }
  }
  __syncthreads();
  /* Deterministic order: ascending position. */
  int items[TK_SORT_ITEMS];
#pragma unroll
  for (int j = 0; j < TK_SORT_ITEMS; j++) {
    const int i = tid * TK_SORT_ITEMS + j;
    items[j] = i < k ? sel[i] : 0x7fffffff;
  }
  tk_sort(*sort_tmp).Sort(items);
#pragma unroll
  for (int j = 0; j < TK_SORT_ITEMS; j++) {
    const int i = tid * TK_SORT_ITEMS + j;
    if (i < p.topk) out[i] = i < k ? rows_output(p.rows, row, items[j]) : -1;
  }
}

static size_t tk_resolve_smem(void) {
  return (size_t)TK_CAND_CAP * 8 + TK_BINS * 4 + (TK_RESOLVE_THREADS + 4) * 4 + DSA_MAX_TOPK * 4 +
         sizeof(typename tk_sort::TempStorage) + 16;
}

extern "C" int dsa_topk_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream) {
  const int rows = p->num_tokens;
  if (rows <= 0) return 0;
  const tk_ws ws = tk_carve(workspace, rows);
  cudaError_t err;
  if (p->rows.max_len > p->topk) {
    err = cudaMemsetAsync(ws.hist, 0, tk_hist_bytes(rows), stream);
    if (err != cudaSuccess) return (int)err;
    const dim3 grid((p->rows.max_len + TK_CHUNK - 1) / TK_CHUNK, rows);
    topk_hist_kernel<<<grid, TK_THREADS, 0, stream>>>(*p, ws);
    if ((err = cudaGetLastError()) != cudaSuccess) return (int)err;
    topk_filter_kernel<<<grid, TK_THREADS, 0, stream>>>(*p, ws);
    if ((err = cudaGetLastError()) != cudaSuccess) return (int)err;
  }
  const size_t smem = tk_resolve_smem();
  err = cudaFuncSetAttribute(topk_resolve_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err != cudaSuccess) return (int)err;
  topk_resolve_kernel<<<rows, TK_RESOLVE_THREADS, smem, stream>>>(*p, ws);
  return (int)cudaGetLastError();
}
