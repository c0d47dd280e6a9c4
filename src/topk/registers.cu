/*
 * topk/registers.cu — top-k of rows up to DSA_TOPK_REGISTERS_MAX_LEN = 16,384 with the keys in
 * registers: one CTA of 1,024 threads a row, thread t owning positions [PER t, PER t + PER). The
 * choice table (host/choose.c) sends it such rows while they are at most one an SM. The same digits
 * as the slices kernel (radix.cuh: over the row's key range, then radix passes of 11 bits), each pass
 * a loop over a thread's own keys; the ascending output is one block scan of the threads' selected
 * counts. No workspace.
 */
#include <stdint.h>

#include "common/launch.cuh"
#include "common/ptx/sync.cuh"
#include "common/rows.cuh"
#include "kernels.h"
#include "topk/radix.cuh"

#define TKR_THREADS 1024
#define TKR_MAX_LEN DSA_TOPK_REGISTERS_MAX_LEN
static_assert(TKR_MAX_LEN == TKR_THREADS * 16, "16 keys a thread at most");
#define TKR_WARPS (TKR_THREADS / 32)

template <int PER>
__global__ void __launch_bounds__(TKR_THREADS, 1) topk_registers_kernel(const dsa_topk_params p) {
  __shared__ uint32_t hist[2][TK_BINS];
  __shared__ int scratch[40];
  __shared__ uint32_t red[2][TKR_WARPS];
  __shared__ uint32_t range[2];
  __shared__ int len_s;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row = blockIdx.x;

  /* A programmatic dependent (scores, lengths, block table may come from the previous kernel). */
  ptx_griddep_wait();
  /* The length is read once, before anything is written (lens may alias a length input). */
  if (tid == 0) len_s = rows_len(p.rows, row);
  __syncthreads();
  const int L = min(len_s, PER * TKR_THREADS); /* the host routes only rows this long here */
  const int k = min(p.topk, L);
  int32_t *out = p.out + (size_t)row * p.topk;
  if (L <= p.topk) { /* every position, no score read */
    if (p.out_lens && tid == 0) p.out_lens[row] = k;
    for (int i = tid; i < p.topk; i += TKR_THREADS) out[i] = i < L ? rows_output(p.rows, row, i) : -1;
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
  for (int b = tid; b < TK_BINS; b += TKR_THREADS) hist[0][b] = 0u;
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
    for (int b = tid; b < nb; b += TKR_THREADS) h[b] = 0u;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < PER; i++) {
      const uint64_t c = tk_offset_comp(key[i], kmin, base + i);
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
  for (int i = 0; i < PER; i++) cnt += i < nv && tk_offset_comp(key[i], kmin, base + i) >= T;
  int total;
  int r = block_exclusive_sum(cnt, scratch, &total);
#pragma unroll
  for (int i0 = 0; i0 < PER; i0 += 4) {
    int slot[4], v[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int i = i0 + u;
      const bool sel = i < nv && tk_offset_comp(key[i], kmin, base + i) >= T;
      slot[u] = sel && r < k ? r : -1;
      r += sel;
      v[u] = slot[u] >= 0 ? rows_output(p.rows, row, base + i) : -1;
    }
#pragma unroll
    for (int u = 0; u < 4; u++)
      if (slot[u] >= 0) out[slot[u]] = v[u];
  }
  /* fewer than k selected happens only with inconsistent inputs; what is left stays defined: -1 */
  for (int i = min(total, k) + tid; i < p.topk; i += TKR_THREADS) out[i] = -1;
  if (p.out_lens && tid == 0) p.out_lens[row] = k;
}

extern "C" int dsa_topk_registers_launch(const dsa_topk_params *p, cudaStream_t stream) {
  const dim3 grid((unsigned)p->num_tokens);
  return (int)(p->rows.max_len <= 8 * TKR_THREADS
                   ? dsa_launch(topk_registers_kernel<8>, grid, TKR_THREADS, 0, stream, true, *p)
                   : dsa_launch(topk_registers_kernel<16>, grid, TKR_THREADS, 0, stream, true, *p));
}

