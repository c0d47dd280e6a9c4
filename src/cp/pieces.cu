/*
 * cp/pieces.cu — the single-GPU pieces of context parallelism (dsa.h "Context parallelism", DESIGN.md §9).
 *
 *   cp_candidates     [rows, k] local top-k positions -> (score, global position) pairs
 *   topk_merge        [W, rows, k_in] pairs -> the exact top-k ids of each row, ascending (the select
 *                     kernel below; the runs kernel, for lists in ascending id order: merge_runs.cu)
 *   cp_local_indices  [tokens, k] global positions -> this rank's cache slots (-1: another rank's),
 *                     or compacted: its own first, with their count
 *   lse_combine       [W, tokens, heads, 512] partial outputs + [W, tokens, heads] lse -> out, lse
 *
 * The merge ranks a candidate by the composite (score key << 32 | ~id): the score's order-preserving
 * bits (NaN lowest, -0 = +0, as topk/) then the lower id, so composites of distinct ids are
 * distinct and the k-th largest is one value, found by a radix select of 8-bit digits over the
 * row's composites in shared memory (at most 16,384: 128 KiB); the selected ids are then sorted
 * (bitonic: registers, shuffles, shared memory) so the output does not depend on the order of the
 * lists.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/launch.cuh"
#include "common/layout.h"
#include "common/score_key.cuh"
#include "common/shard.h"
#include "cp/bitonic.cuh"
#include "kernels.h"

/* ---- candidates ---- */

__global__ void cp_candidates_kernel(const dsa_cp_candidates_args a) {
  const int64_t n = (int64_t)a.num_rows * a.topk;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = i / a.topk;
    const int p = a.local_indices[i];
    float s = -__int_as_float(0x7f800000);
    int id = -1;
    if (p >= 0 && p < a.max_len) {
      const int64_t g = shard_global(&a.shard, (a.row_offsets ? a.row_offsets[t] : 0) + (int64_t)p);
      if (g <= 0x7fffffff) {
        s = a.scores[t * a.scores_stride + p];
        id = (int)g;
      }
    }
    a.cand_scores[i] = s;
    a.cand_ids[i] = id;
  }
}

extern "C" int dsa_cp_candidates_launch(const dsa_cp_candidates_args *a, cudaStream_t stream) {
  const int64_t n = (int64_t)a->num_rows * a->topk;
  const int64_t blocks = (n + 255) / 256;
  return (int)dsa_launch(cp_candidates_kernel, dim3((unsigned)(blocks < 4096 ? blocks : 4096)), 256, 0, stream,
                         false, *a);
}

/* ---- merge ---- */

#define MERGE_THREADS 1024

/* gather_composites: the row's valid candidates as composites (0 = no candidate: a valid one is
 * never 0, since ~id >= 2^31 for id >= 0); returns how many are valid, and the smallest and largest
 * valid composite in *cmin / *cmax (shared). */
static __device__ int gather_composites(const dsa_topk_merge_args &a, int t, uint64_t *comp, int *count,
                                        unsigned long long *cmin, unsigned long long *cmax) {
  const int n = a.num_lists * a.k_in;
  int mine = 0;
  unsigned long long lo = ~0ull, hi = 0ull;
  for (int i = threadIdx.x; i < n; i += MERGE_THREADS) {
    const int w = i / a.k_in, j = i - w * a.k_in;
    const int64_t at = ((int64_t)w * a.num_rows + t) * a.k_in + j;
    const int id = a.cand_ids[at];
    uint64_t c = 0;
    if (id >= 0) {
      c = make_comp(score_key(a.cand_scores[at]), id);
      mine++;
      lo = c < lo ? c : lo;
      hi = c > hi ? c : hi;
    }
    comp[i] = c;
  }
  if (threadIdx.x == 0) {
    *count = 0;
    *cmin = ~0ull;
    *cmax = 0ull;
  }
  __syncthreads();
  for (int o = 16; o > 0; o >>= 1) {
    mine += __shfl_xor_sync(0xffffffffu, mine, o);
    const unsigned long long l2 = __shfl_xor_sync(0xffffffffu, lo, o), h2 = __shfl_xor_sync(0xffffffffu, hi, o);
    lo = l2 < lo ? l2 : lo;
    hi = h2 > hi ? h2 : hi;
  }
  if ((threadIdx.x & 31) == 0 && mine) {
    atomicAdd(count, mine);
    atomicMin(cmin, lo);
    atomicMax(cmax, hi);
  }
  __syncthreads();
  return *count;
}

/* radix_threshold: the k-th largest composite T (need >= 1, fewer than the valid ones, so
 * cmin < cmax). The bits every valid composite shares (cmin's and cmax's common prefix) are not
 * counted; then digits of up to 8 bits from the first bit that differs, each pass a histogram of
 * the composites still matching the prefix (warp-aggregated adds with __match_any_sync measured
 * slower: 4,096-row prefill merge 0.75 against 0.66 ms); stops early once the digit's bin holds exactly what is still needed (T then has zero low bits:
 * every composite of that bin is >= T, every lower one below). */
static __device__ uint64_t radix_threshold(const uint64_t *comp, int n, int need, uint64_t cmin, uint64_t cmax,
                                           uint32_t *hist, uint64_t *s_prefix, int *s_need, int *s_done) {
  if (cmin == cmax) return cmin; /* one value (ids repeated against dsa.h): the output takes k of them */
  const int first = 63 - __clzll((long long)(cmin ^ cmax)); /* the highest bit that differs */
  uint64_t mask = first == 63 ? 0ull : ~((2ull << first) - 1);
  uint64_t prefix = cmin & mask;
  const int lane = threadIdx.x & 31;
  for (int top = first; top >= 0; top -= 8) {
    const int shift = top - 7 > 0 ? top - 7 : 0;
    const uint64_t dmask = (2ull << (top - shift)) - 1; /* top - shift + 1 <= 8 bits */
    for (int b = threadIdx.x; b < 256; b += MERGE_THREADS) hist[b] = 0u;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += MERGE_THREADS) {
      const uint64_t c = comp[i];
      if (c && (c & mask) == prefix) atomicAdd(&hist[(c >> shift) & dmask], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      /* lane l sums bins [248 - 8l, 256 - 8l) (lane 0 the top ones); an inclusive scan over lanes
       * counts what lies at or above each lane's bins; the first lane to reach `need` walks its own */
      uint32_t sum = 0;
#pragma unroll
      for (int j = 0; j < 8; j++) sum += hist[255 - 8 * lane - j];
      uint32_t incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, incl >= (uint32_t)need);
      const int l = __ffs(hit) - 1; /* exists: the bins hold more than need */
      if (lane == l) {
        uint32_t above = incl - sum;
        int b = 255 - 8 * l;
        for (int j = 0; j < 8; j++, b--) {
          if (above + hist[b] >= (uint32_t)need) break;
          above += hist[b];
        }
        const int left = need - (int)above;
        *s_prefix = prefix | ((uint64_t)b << shift);
        *s_need = left;
        *s_done = hist[b] == (uint32_t)left;
      }
    }
    __syncthreads();
    prefix = *s_prefix;
    need = *s_need;
    mask |= dmask << shift;
    const int done = *s_done;
    __syncthreads(); /* every thread has read the shared results before the next pass writes them */
    if (done) break;
  }
  return prefix;
}

/* Dynamic shared memory, nearly all of it: the 48 KiB a launch gets without opting in covers static +
 * dynamic, and dsa_set_smem opts in by the dynamic size alone, so the static part (48 bytes of
 * scalars) is counted in the 128 bytes of slack: composites [n] u64 | selected ids [DSA_MAX_TOPK] i32
 * | histogram [256] u32. */
static size_t merge_smem(int n) { return (size_t)n * 8 + DSA_MAX_TOPK * 4 + 256 * 4 + 128; }

__global__ void __launch_bounds__(MERGE_THREADS, 1) topk_merge_kernel(const dsa_topk_merge_args a) {
  extern __shared__ uint64_t comp[]; /* [num_lists * k_in] */
  int *sel = (int *)(comp + a.num_lists * a.k_in);
  uint32_t *hist = (uint32_t *)(sel + DSA_MAX_TOPK);
  __shared__ uint64_t s_prefix;
  __shared__ unsigned long long s_min, s_max;
  __shared__ int s_need, s_done, s_count, s_sel;
  const int t = blockIdx.x;
  const int n = a.num_lists * a.k_in;
  const int valid = gather_composites(a, t, comp, &s_count, &s_min, &s_max);
  const int k = valid < a.topk ? valid : a.topk;
  /* every valid composite is >= 1; with k < valid, the k-th largest */
  const uint64_t T = k < valid ? radix_threshold(comp, n, k, s_min, s_max, hist, &s_prefix, &s_need, &s_done) : 1ull;
  if (threadIdx.x == 0) s_sel = 0;
  __syncthreads();
  /* the selected, in any order (sorted below): one shared add a warp (an add per element measured
   * the same — ncu, one token of 4,096 candidates: 21.2 us either way; the kernel is issue-bound,
   * ~3,100 instructions a warp at 12.5 cycles each, the sort a third of them) */
  const int lane = threadIdx.x & 31;
  for (int i0 = 0; i0 < n; i0 += MERGE_THREADS) { /* whole warps every round */
    const int i = i0 + threadIdx.x;
    const uint64_t c = i < n ? comp[i] : 0ull;
    const bool take = c >= T; /* T >= 1: no empty entry */
    const unsigned m = __ballot_sync(0xffffffffu, take);
    int base = 0;
    if (lane == 0 && m) base = atomicAdd(&s_sel, __popc(m));
    base = __shfl_sync(0xffffffffu, base, 0);
    const int at = base + __popc(m & ((1u << lane) - 1));
    if (take && at < k) sel[at] = (int)~(uint32_t)c; /* the id back from the low half */
  }
  __syncthreads();
  int n2 = 64;
  while (n2 < k) n2 <<= 1;
  for (int i = k + threadIdx.x; i < n2; i += MERGE_THREADS) sel[i] = 0x7fffffff;
  __syncthreads();
  if (k > 1) bitonic_sort(sel, n2);
  int32_t *out = a.indices + (int64_t)t * a.topk;
  for (int i = threadIdx.x; i < a.topk; i += MERGE_THREADS) out[i] = i < k ? sel[i] : -1;
  if (a.lens && threadIdx.x == 0) a.lens[t] = k;
}

/* The merge's kernel as the choice table (host/choose.c) names it: select here, runs in
 * cp/merge_runs.cu. */
extern "C" int dsa_topk_merge_launch(const dsa_topk_merge_args *a, int kernel, cudaStream_t stream) {
  if (kernel == DSA_MERGE_RUNS) return dsa_topk_merge_runs_launch(a, stream);
  if (kernel == DSA_MERGE_TREE) return dsa_topk_merge_tree_launch(a, stream);
  static dsa_smem_cache cache;
  const size_t smem = merge_smem(a->num_lists * a->k_in);
  return (int)dsa_launch_smem(topk_merge_kernel, &cache, dim3((unsigned)a->num_rows), MERGE_THREADS, smem, stream,
                              false, *a);
}

/* ---- local indices ---- */

static __device__ __forceinline__ int local_slot(const dsa_cp_local_indices_args &a, int64_t t, int g) {
  const int64_t p = g >= 0 ? shard_local(&a.shard, g) : -1;
  if (p < 0) return -1;
  if (a.workspace_slots) {
    if (p >= a.num_workspace_rows) return -1;
    const int64_t s = a.workspace_slots[p];
    return s >= 0 && s <= 0x7fffffff ? (int)s : -1;
  }
  if (p >= (int64_t)a.max_blocks_per_req * a.page_size) return -1;
  const int page = a.block_table[(t / a.q_len_per_req) * a.block_table_stride + p / a.page_size];
  if (page < 0 || page >= a.num_pages) return -1;
  const int64_t s = (int64_t)page * a.page_size + p % a.page_size;
  return s <= 0x7fffffff ? (int)s : -1;
}

__global__ void cp_local_indices_kernel(const dsa_cp_local_indices_args a) {
  const int64_t n = (int64_t)a.num_tokens * a.topk;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    a.out_slots[i] = local_slot(a, i / a.topk, a.indices[i]);
}

/* Compacted: one CTA of 1,024 threads a token, thread t holding entries [2t, 2t + 2) (topk <= 2048),
 * all loads issued at once; the owned ones are written in order at offsets from one block scan of
 * the threads' counts (shuffles in warps, the warp totals scanned by warp 0). */
#define LOCAL_THREADS 1024
__global__ void __launch_bounds__(LOCAL_THREADS) cp_local_indices_compact_kernel(const dsa_cp_local_indices_args a) {
  __shared__ int warp_sum[LOCAL_THREADS / 32];
  __shared__ int s_total;
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, i0 = 2 * threadIdx.x;
  const int32_t *in = a.indices + t * a.topk;
  int32_t *out = a.out_slots + t * a.topk;
  const int s0 = i0 < a.topk ? local_slot(a, t, in[i0]) : -1;
  const int s1 = i0 + 1 < a.topk ? local_slot(a, t, in[i0 + 1]) : -1;
  const int mine = (s0 >= 0) + (s1 >= 0);
  int incl = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_sum[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int w = warp_sum[lane];
    int x = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += v;
    }
    warp_sum[lane] = x - w; /* exclusive */
    if (lane == 31) s_total = x;
  }
  __syncthreads();
  int at = warp_sum[warp] + incl - mine;
  if (s0 >= 0) out[at++] = s0;
  if (s1 >= 0) out[at] = s1;
  const int total = s_total;
  for (int i = total + threadIdx.x; i < a.topk; i += LOCAL_THREADS) out[i] = -1;
  if (threadIdx.x == 0) a.out_lens[t] = total;
}

extern "C" int dsa_cp_local_indices_launch(const dsa_cp_local_indices_args *a, cudaStream_t stream) {
  if (a->out_lens)
    return (int)dsa_launch(cp_local_indices_compact_kernel, dim3((unsigned)a->num_tokens), LOCAL_THREADS, 0, stream,
                           false, *a);
  const int64_t n = (int64_t)a->num_tokens * a->topk;
  const int64_t blocks = (n + 255) / 256;
  return (int)dsa_launch(cp_local_indices_kernel, dim3((unsigned)(blocks < 4096 ? blocks : 4096)), 256, 0, stream,
                         false, *a);
}

/* ---- LSE combine: one warp a (token, head), 16 of the 512 values a lane ---- */

static __device__ __forceinline__ void load16(const dsa_lse_combine_args &a, int64_t row, int lane, float v[16]) {
  if (a.parts_dtype == DSA_DTYPE_F32) {
    const float4 *src = (const float4 *)((const float *)a.outs + row * MLA_V_DIM) + lane * 4;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float4 x = src[j];
      v[4 * j] = x.x, v[4 * j + 1] = x.y, v[4 * j + 2] = x.z, v[4 * j + 3] = x.w;
    }
  } else {
    const uint4 *src = (const uint4 *)((const uint16_t *)a.outs + row * MLA_V_DIM) + lane * 2;
#pragma unroll
    for (int j = 0; j < 2; j++) {
      const uint4 x = src[j];
      const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int u = 0; u < 4; u++) {
        v[8 * j + 2 * u] = __uint_as_float(w[u] << 16);
        v[8 * j + 2 * u + 1] = __uint_as_float(w[u] & 0xffff0000u);
      }
    }
  }
}

static __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *(const uint32_t *)&h;
}

__global__ void lse_combine_kernel(const dsa_lse_combine_args a) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = (int64_t)a.num_tokens * a.num_heads;
  const int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + (threadIdx.x >> 5);
  if (r >= rows) return;
  float m = -__int_as_float(0x7f800000);
  for (int w = 0; w < a.num_parts; w++) {
    const float l = a.lses[w * rows + r];
    if (isfinite(l)) m = fmaxf(m, l);
  }
  float acc[16];
#pragma unroll
  for (int j = 0; j < 16; j++) acc[j] = 0.f;
  float lse = m;
  if (isfinite(m)) {
    float sum = 0.f;
    for (int w = 0; w < a.num_parts; w++) {
      const float l = a.lses[w * rows + r];
      if (isfinite(l)) sum += __expf(l - m);
    }
    for (int w = 0; w < a.num_parts; w++) {
      const float l = a.lses[w * rows + r];
      if (!isfinite(l)) continue; /* a rank with no rows: its out is not read */
      const float scale = __expf(l - m) / sum;
      float v[16];
      load16(a, w * rows + r, lane, v);
#pragma unroll
      for (int j = 0; j < 16; j++) acc[j] = fmaf(scale, v[j], acc[j]);
    }
    lse = m + logf(sum);
  }
  uint4 *dst = (uint4 *)((uint16_t *)a.out + r * MLA_V_DIM) + lane * 2;
  dst[0] = make_uint4(pack_bf16x2(acc[0], acc[1]), pack_bf16x2(acc[2], acc[3]), pack_bf16x2(acc[4], acc[5]),
                      pack_bf16x2(acc[6], acc[7]));
  dst[1] = make_uint4(pack_bf16x2(acc[8], acc[9]), pack_bf16x2(acc[10], acc[11]), pack_bf16x2(acc[12], acc[13]),
                      pack_bf16x2(acc[14], acc[15]));
  if (a.lse && lane == 0) a.lse[r] = lse;
}

extern "C" int dsa_lse_combine_launch(const dsa_lse_combine_args *a, cudaStream_t stream) {
  const int64_t rows = (int64_t)a->num_tokens * a->num_heads;
  return (int)dsa_launch(lse_combine_kernel, dim3((unsigned)((rows + 7) / 8)), 256, 0, stream, false, *a);
}
