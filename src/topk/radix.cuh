/*
 * topk/radix.cuh — what the three top-k kernels (registers.cu, slices.cu, chain.cu) and the fused
 * prefill indexer's select (indexer/prefill_select.cu) share: the order they select by, the pieces of
 * a radix select, and the sorted output of a row's selected positions.
 *
 * For row t (L = visible length, k = min(topk, L)): the k positions with the largest scores, ties to
 * the lower position, NaN below every number. Rows with L <= topk select every position without
 * reading a score. Scores are ranked through a 64-bit composite that is unique per element
 * (common/score_key.cuh):
 *   comp = key(score) << 32 | ~position,  key = order-preserving bits of the float (NaN -> 0)
 * so "largest k composites" is exactly the contract's order, and a radix select over comp always
 * ends with the k-th element isolated: a histogram of one digit (11 bits) finds the bin holding the
 * k-th composite (find_bin), the elements above it are selected, and the next digit is counted only
 * over that bin's, until its bin holds exactly what is still needed.
 */
#pragma once
#include <stdint.h>

#include "common/rows.cuh"

#include "common/score_key.cuh"
#include "kernels.h"

/* Inclusive prefix sum over the 32 lanes of a warp (every lane taking part). */
template <typename T>
static __device__ __forceinline__ T warp_inclusive_sum(T x) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}

/* Exclusive prefix sum over the block (blockDim.x a multiple of 32, <= 1024) with warp shuffles;
 * *total gets the block's sum. scratch: 32 ints of shared memory. */
static __device__ int block_exclusive_sum(int v, int *scratch, int *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int x = warp_inclusive_sum(v);
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) scratch[lane] = warp_inclusive_sum(lane < nw ? scratch[lane] : 0);
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


/* The normalised composite of the slices and registers kernels: the key's offset from the row's smallest key
 * (so the first digit spreads the row's actual range over the bins, not over all of float space)
 * above ~position. Same order as make_comp. */
static __device__ __forceinline__ uint64_t tk_offset_comp(uint32_t key, uint32_t kmin, int pos) {
  return ((uint64_t)(key - kmin) << 32) | (uint32_t)~(uint32_t)pos;
}


/* ---- the k-th largest of a list of composites (the fused prefill indexer: indexer/prefill_select.cu) ---- */

/* A source of composites read from global memory a vector at a time: Src::V elements per load
 * (src.load(v, n, c): elements v * V .. v * V + V - 1 of the n, 0 past n). bct_for_each applies f
 * to each of the n elements, BCT_UNROLL vector loads a thread in flight before any is used (one load
 * at a time left these passes waiting on L2 latency: ~1 us a step). 0 means no element. */
#define BCT_UNROLL 8
template <class Src, class F>
static __device__ __forceinline__ void bct_for_each(const Src &src, int n, F &&f) {
  constexpr int V = Src::V;
  const int nv = (n + V - 1) / V, nt = blockDim.x;
  for (int v0 = threadIdx.x; v0 < nv; v0 += nt * BCT_UNROLL) {
    unsigned long long c[BCT_UNROLL][V];
#pragma unroll
    for (int u = 0; u < BCT_UNROLL; u++) {
      if (v0 + u * nt < nv) src.load(v0 + u * nt, n, c[u]);
      else
#pragma unroll
        for (int e = 0; e < V; e++) c[u][e] = 0ull;
    }
#pragma unroll
    for (int u = 0; u < BCT_UNROLL; u++)
#pragma unroll
      for (int e = 0; e < V; e++)
        if (c[u][e] != 0ull) f(c[u][e]);
  }
}

/* Shared memory of block_comp_threshold: a histogram, the elements of the bin it narrows to once they
 * fit (read from there instead of the source), find_bin's scratch. */
#define BCT_LIST 8192
typedef struct {
  uint32_t hist[TK_BINS];
  unsigned long long list[BCT_LIST];
  int scratch[36];
  int n_list;
} bct_smem;

/* The threshold t with exactly k of the n composites of src (0 = no element, never counted;
 * composites are distinct) at or above it: radix passes of 11 bits from the top until the k-th's bin
 * holds exactly what is still needed (t is that bin's lower edge). Reads the source once a pass until
 * the bin's elements fit sm->list, then from there. Returns false (t undefined) when fewer than k
 * elements are present. Every thread of the block calls it and gets the answer. */
template <class Src>
static __device__ bool block_comp_threshold(const Src &src, int n, int k, bct_smem *sm, unsigned long long *t) {
  const int tid = threadIdx.x, nt = blockDim.x;
  unsigned long long prefix = 0;
  int shift = 64, need = k, m = 0;
  bool in_list = false;
  for (;;) {
    const int width = shift < 11 ? shift : 11, nsh = shift - width, nb = 1 << width;
    for (int b = tid; b < nb; b += nt) sm->hist[b] = 0;
    __syncthreads();
    const unsigned long long pre = shift == 64 ? 0ull : prefix >> shift;
    const auto count = [&](unsigned long long c) {
      if (shift == 64 || (c >> shift) == pre) atomicAdd(&sm->hist[(unsigned)(c >> nsh) & (unsigned)(nb - 1)], 1u);
    };
    if (in_list)
      for (int i = tid; i < m; i += nt) count(sm->list[i]);
    else
      bct_for_each(src, n, count);
    __syncthreads();
    int higher;
    const int bb = find_bin(sm->hist, nb, need, &higher, sm->scratch);
    const int in_bb = (int)sm->hist[bb];
    __syncthreads(); /* every thread read the bin before the next pass clears it */
    if (higher + in_bb < need) return false; /* fewer than k elements */
    need -= higher;
    prefix |= (unsigned long long)bb << nsh;
    shift = nsh;
    if (in_bb == need || shift == 0) break;
    if (!in_list && in_bb <= BCT_LIST) { /* the bin's elements into shared memory */
      if (tid == 0) sm->n_list = 0;
      __syncthreads();
      const unsigned long long pre2 = prefix >> shift;
      bct_for_each(src, n, [&](unsigned long long c) {
        if ((c >> shift) == pre2) sm->list[atomicAdd(&sm->n_list, 1)] = c;
      });
      __syncthreads();
      m = sm->n_list;
      in_list = true;
    }
  }
  *t = prefix;
  return true;
}

/* The selected positions sel[0, n) (each < L) of row `row` in ascending order — deterministic
 * output — through the rows' output mapping (rows_output) into out[0, topk), -1 past n: one block
 * radix sort of the positions over the bits of L (the pad sorts last), then every lookup in flight
 * before any store (a store between them would order them). SORT: cub::BlockRadixSort<unsigned,
 * the block's threads, ITEMS>; tid < the block's threads. */
template <typename SORT, int ITEMS>
static __device__ __forceinline__ void sorted_rows_output(typename SORT::TempStorage &sort_tmp, const int *sel, int n,
                                                          int L, int topk, const dsa_rows &rows, int row,
                                                          int32_t *out, int tid) {
  const int pos_bits = 32 - __clz(L);
  const unsigned pad = (1u << pos_bits) - 1u;
  unsigned items[ITEMS];
#pragma unroll
  for (int j = 0; j < ITEMS; j++) {
    const int i = tid * ITEMS + j;
    items[j] = i < n ? (unsigned)sel[i] : pad;
  }
  SORT(sort_tmp).Sort(items, 0, pos_bits);
  int outv[ITEMS];
#pragma unroll
  for (int j = 0; j < ITEMS; j++) {
    const int i = tid * ITEMS + j;
    outv[j] = i < n && items[j] < (unsigned)L ? rows_output(rows, row, (int)items[j]) : -1;
  }
#pragma unroll
  for (int j = 0; j < ITEMS; j++) {
    const int i = tid * ITEMS + j;
    if (i < topk) out[i] = outv[j];
  }
}

