/*
 * dev/scores_wgmma_plain.cu — the FP8-q scorer on e4m3 wgmma WITHOUT warp specialisation (every warp
 * copies its keys and computes), kept beside the library, not in it: it never ran by default — the
 * warp-specialised scorer (src/indexer/scores_wgmma.cu, built from the same tile pieces) replaced it
 * (timings in dev/README.md). The tool below checks it against the library's decode scores on the
 * same inputs and times both.
 *
 *   score[t, x] = softmax_scale * sum_h w[t,h] * relu( q_scale[t,h] * k_scale[x] * (q8[t,h,:] . k8[x,:]) )
 *
 * Both operands stay e4m3, as stored: FP8 wgmma takes both K-major, and both already are — a key is
 * a 128-byte row of the paged cache (DESIGN §3), a (token, head) of q a 128-byte row of q.
 *
 * Per CTA (two warpgroups, 256 threads): a group of T tokens, a contiguous range of key tiles of
 * 128 keys, 64 a warpgroup. Per warpgroup and tile:
 *   keys   each warp copies 16 of the 64 rows global -> shared memory with cp.async (zero-filled for
 *          slots outside the cache) into an NS-stage ring, in the 128-byte-swizzle layout wgmma
 *          reads (16-byte chunk c of row r at chunk c ^ (r & 7), 1024-byte atoms of 8 rows); the
 *          row's scale and a valid flag beside the rows;
 *   S      D[64 keys, N] = A[64 keys, 128] . B[N, 128]^T, N = (token, head) columns of the group in
 *          chunks of NC <= 256: four m64nNCk32 e4m3 wgmma, f32 accumulation;
 *   out    per token: relu, weight (x q_scale), sum over its heads (a thread holds 2 keys x 2 columns
 *          of every 8; two quad shuffles), x k_scale; -inf for keys outside the cache; one float
 *          store per key and token.
 * A warpgroup waits for its own copies (cp.async.wait_group, fence.proxy.async, a named barrier of
 * its 128 threads) and refills the stage it finished last tile, so NS-1 tiles are in flight.
 * Shapes: HP = heads padded to 32 or 64 (zero q rows, zero weights); T <= 16.
 */
#include <stdint.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "check.h"
#include "common/launch.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "common/rows.cuh"
#include "indexer/scores.cuh"
#include "indexer/wgmma_tile.cuh"
#include "inputs.h"
#include "kernels.h"

#define WP_THREADS 256
#define WP_TILE (2 * WT_WG_KEYS)            /* keys a CTA takes per step: 64 a warpgroup */
#define WP_STAGE (2 * WT_WG_STAGE)
#define WP_NS 4                             /* stages of the key ring */
#define WP_PREFILL_T32 16                   /* prefill tokens a CTA groups, 32 heads (two chunks of 256) */
#define WP_PREFILL_T64 8                    /* 64 heads */

/* Shared memory after aligning the base to 1024: q tile [qrows][128] | NS stages | wq, w, qsc
 * [qrows] floats | the group. */
static size_t wp_smem_bytes(int qrows) {
  return 1024 + (size_t)wt_q_bytes(qrows) + (size_t)WP_NS * WP_STAGE + (size_t)3 * qrows * 4 + sizeof(sc_group) + 16;
}

/*
 * grid: x = ranges of tiles_per_cta tiles, y = token groups of T tokens.
 * Decode requires T == q_len_per_req and token_begin a multiple of it (one request per group).
 */
template <int HP, int NC>
__global__ void __launch_bounds__(WP_THREADS, NC <= 64 ? 2 : 1)
    wp_scores_kernel(const dsa_scores_params p, int T, int tiles_per_cta) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (ptx_smem_u32(smem_raw) & 1023)) & 1023);
  const int chunks = (T * HP + NC - 1) / NC;
  const int qrows = chunks * NC;
  unsigned char *q_tile = smem;                              /* [qrows][128] e4m3, swizzled */
  unsigned char *stages = smem + wt_q_bytes(qrows);          /* NS x 2 warpgroups x WT_WG_STAGE */
  float *wq_smem = (float *)(stages + WP_NS * WP_STAGE);     /* w * softmax_scale * q_scale */
  float *w_smem = wq_smem + qrows;                           /* w * softmax_scale */
  float *qsc_smem = w_smem + qrows;                          /* q_scale */
  sc_group *grp = (sc_group *)(qsc_smem + qrows);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2, wi = warp & 3;
  sc_cta cta;
  if (!sc_cta_begin(p, grp, T, WP_TILE, tiles_per_cta, &cta)) return;
  const int t0 = cta.t0, nt = cta.nt, lo = cta.lo, hi = cta.hi, tile_begin = cta.tile_begin, tile_end = cta.tile_end;
  const long long range_lo = cta.range_lo, range_hi = cta.range_hi;

  /* The key ring's first NS-1 tiles go out before q is staged. */
  const int row0 = 16 * wi;
#define WP_WG_STAGE_PTR(i) (stages + ((i) % WP_NS) * WP_STAGE + wg * WT_WG_STAGE)
#pragma unroll
  for (int i = 0; i < WP_NS - 1; i++) {
    const int xt = (tile_begin + i) * WP_TILE + wg * WT_WG_KEYS;
    if (tile_begin + i < tile_end)
      wt_issue_keys(WP_WG_STAGE_PTR(i), p, wt_key_raw(p, t0, xt, row0, lo, hi, lane), xt, row0, lane);
    ptx_cp_async_commit();
  }
  /* the lookup for the first refill (tile tile_begin + NS - 1) */
  long long raw_next = wt_key_raw(p, t0, (tile_begin + WP_NS - 1) * WP_TILE + wg * WT_WG_KEYS, row0, lo, hi, lane);

  wt_stage_q<HP>(p, grp, q_tile, wq_smem, w_smem, qsc_smem, qrows, nt, t0, warp, WP_THREADS / 32, lane);
  ptx_fence_proxy_async_smem(); /* q's generic stores before wgmma reads them */
  __syncthreads();
  const bool qscale_nonneg = grp->any_negative_qscale == 0;

  const uint32_t q_addr = ptx_smem_u32(q_tile);
  wt_out_ctx none = {};
  for (int tile = tile_begin; tile < tile_end; tile++) {
    const int it = tile - tile_begin;
    const int x0 = tile * WP_TILE + wg * WT_WG_KEYS;
    /* this warp's copies of tile `it` landed; the warpgroup's barrier makes all four warps' visible
     * (to wgmma too: the fence orders them before async-proxy reads), and every warp is past the
     * previous tile, whose stage is refilled now */
    ptx_cp_async_wait<WP_NS - 2>();
    ptx_fence_proxy_async_smem();
    ptx_bar_sync(1 + wg, 128);
    if (tile + WP_NS - 1 < tile_end)
      wt_issue_keys(WP_WG_STAGE_PTR(it + WP_NS - 1), p, raw_next, x0 + (WP_NS - 1) * WP_TILE, row0, lane);
    ptx_cp_async_commit();
    /* the next refill's lookup now; its value is first used one tile later */
    raw_next = wt_key_raw(p, t0, x0 + WP_NS * WP_TILE, row0, lo, hi, lane);

    /* nothing to do when no token of the group sees one of these 64 keys (warpgroup-uniform) */
    if (!wt_any_visible(grp, nt, x0)) continue;
    wt_tile_scores<HP, NC>(p, grp, WP_WG_STAGE_PTR(it), q_addr, wq_smem, w_smem, qsc_smem, chunks, nt, t0, x0,
                           qscale_nonneg, wi, lane, none);
  }
#undef WP_WG_STAGE_PTR
  sc_fill_tail(p, grp, nt, t0, range_lo, range_hi);
}

template <int HP, int NC>
static cudaError_t wp_launch_t(const dsa_scores_params *p, dim3 grid, int T, int tpc, cudaStream_t stream) {
  static dsa_smem_cache cache;
  const int qrows = (T * HP + NC - 1) / NC * NC;
  return dsa_launch_smem(wp_scores_kernel<HP, NC>, &cache, grid, WP_THREADS, wp_smem_bytes(qrows), stream,
                         false, *p, T, tpc);
}

/* max_x <= DSA_MAX_ROW_LEN (dsa.c): tile arithmetic in the kernel stays inside int. */
static int wp_launch(const dsa_scores_params *p, int T, int HP, int groups, int max_x, cudaStream_t stream) {
  const int total_tiles = (int)(((int64_t)max_x + WP_TILE - 1) / WP_TILE);
  if (total_tiles == 0 || groups == 0) return 0;
  /* About two CTAs an SM, each over many tiles: a CTA's setup (group, q) and its ring's first
   * fill are paid once per CTA, not once per few tiles (its first version used the mma scorer's 8 per
   * SM and lost to it at 128k and 1M decode). */
  const long long want = (long long)(p->num_sms > 0 ? p->num_sms : 132) * 2;
  int tpc;
  const dim3 grid = sc_grid(total_tiles, groups, want, 256, &tpc);
  const int n = T * HP;
  cudaError_t err;
  if (HP == 32)
    err = n <= 32    ? wp_launch_t<32, 32>(p, grid, T, tpc, stream)
          : n <= 64  ? wp_launch_t<32, 64>(p, grid, T, tpc, stream)
          : n <= 128 ? wp_launch_t<32, 128>(p, grid, T, tpc, stream)
                     : wp_launch_t<32, 256>(p, grid, T, tpc, stream);
  else
    err = n <= 64    ? wp_launch_t<64, 64>(p, grid, T, tpc, stream)
          : n <= 128 ? wp_launch_t<64, 128>(p, grid, T, tpc, stream)
                     : wp_launch_t<64, 256>(p, grid, T, tpc, stream);
  return (int)err;
}

static int wp_scores_launch(const dsa_scores_params *p, cudaStream_t stream) {
  if (p->num_tokens <= 0) return 0;
  const int HP = p->q.num_heads <= 32 ? 32 : 64;
  int T, groups, max_x;
  sc_token_groups(p, HP == 32 ? WP_PREFILL_T32 : WP_PREFILL_T64, &T, &groups, &max_x);
  return wp_launch(p, T, HP, groups, max_x, stream);
}

/* ---------------------------------------------------------------------------------------------
 * The tool: one FP8-q decode request of S keys (32 index heads, 64-key pages in a random order),
 * scored by this kernel and by the library (dsa_indexer_decode_scores), compared (DESIGN.md §5: 2e-3
 * of the row's largest score) and timed (CUDA events around 50 launches each, hot L2).
 */
static double time_us(cudaEvent_t e0, cudaEvent_t e1, int iters) {
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  return 1000.0 * ms / iters;
}

static void run(int64_t S) {
  const int H = 32, D = DSA_INDEX_HEAD_DIM, P = 64, topk = 2048;
  const int64_t pages = (S + P - 1) / P;
  dsa_rng r = dsa_rng_make(11, (uint64_t)S);
  std::vector<uint8_t> q((size_t)H * D), cache((size_t)pages * P * (D + 4));
  std::vector<float> qs(H), w(H);
  dsa_input_fp8_codes(&r, q.data(), q.size());
  dsa_input_scales(&r, qs.data(), H, 0.5f / 448, 1.f / 448);
  for (int h = 0; h < H; ++h) w[h] = (float)dsa_input_nonzero(&r, 1.0);
  for (int64_t pg = 0; pg < pages; ++pg) {
    uint8_t *page = cache.data() + (size_t)pg * P * (D + 4);
    dsa_input_fp8_codes(&r, page, (size_t)P * D);
    dsa_input_scales(&r, (float *)(page + P * D), P, 0.01f, 0.1f);
  }
  std::vector<int32_t> bt(pages);
  dsa_input_perm(&r, bt.data(), pages);
  const int32_t len = (int32_t)S;
  void *dq, *dqs, *dw, *dcache, *dbt, *dlen, *dA, *dB;
  CK(cudaMalloc(&dq, q.size()));
  CK(cudaMalloc(&dqs, H * 4));
  CK(cudaMalloc(&dw, H * 4));
  CK(cudaMalloc(&dcache, cache.size()));
  CK(cudaMalloc(&dbt, pages * 4));
  CK(cudaMalloc(&dlen, 4));
  CK(cudaMalloc(&dA, (size_t)S * 4));
  CK(cudaMalloc(&dB, (size_t)S * 4));
  CK(cudaMemcpy(dq, q.data(), q.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dqs, qs.data(), H * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, w.data(), H * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dcache, cache.data(), cache.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbt, bt.data(), pages * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dlen, &len, 4, cudaMemcpyHostToDevice));

  dsa_indexer_decode_scores_args a;
  memset(&a, 0, sizeof a);
  a.decode.query.q = dq;
  a.decode.query.q_dtype = DSA_DTYPE_FP8_E4M3;
  a.decode.query.q_scale = (const float *)dqs;
  a.decode.query.weights = dw;
  a.decode.query.weights_dtype = DSA_DTYPE_F32;
  a.decode.query.weights_stride = H;
  a.decode.query.num_heads = H;
  a.decode.query.head_dim = D;
  a.decode.query.softmax_scale = 1.f / sqrtf((float)D * H);
  a.decode.cache.data = (const uint8_t *)dcache;
  a.decode.cache.num_pages = pages;
  a.decode.cache.page_size = P;
  a.decode.seq_lens = (const int32_t *)dlen;
  a.decode.block_table = (const int32_t *)dbt;
  a.decode.block_table_stride = pages;
  a.decode.max_blocks_per_req = (int)pages;
  a.decode.num_reqs = 1;
  a.decode.q_len_per_req = 1;
  a.decode.topk = topk;
  a.scores = (float *)dB;
  a.scores_stride = S;

  /* the same launch as the library's scoring of this call (host/api_indexer.c), on this kernel */
  dsa_scores_params sp;
  memset(&sp, 0, sizeof sp);
  sp.q = a.decode.query;
  sp.cache = a.decode.cache;
  sp.rows.mode = DSA_ROWS_DECODE;
  sp.rows.max_len = (int)S;
  sp.rows.seq_lens = a.decode.seq_lens;
  sp.rows.block_table = a.decode.block_table;
  sp.rows.block_table_stride = pages;
  sp.rows.max_blocks = (int)pages;
  sp.rows.q_len_per_req = 1;
  sp.rows.num_pages = pages;
  sp.rows.page_size = P;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sp.num_sms, cudaDevAttrMultiProcessorCount, dev));
  sp.num_tokens = 1;
  sp.skip_len = -1;
  sp.scores = (float *)dA;
  sp.scores_stride = S;
  sp.fill_tail = 1;

  CK((cudaError_t)wp_scores_launch(&sp, 0));
  DSA_CK(dsa_indexer_decode_scores(&a, 0));
  CK(cudaDeviceSynchronize());
  std::vector<float> A((size_t)S), B((size_t)S);
  CK(cudaMemcpy(A.data(), dA, (size_t)S * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(B.data(), dB, (size_t)S * 4, cudaMemcpyDeviceToHost));
  double mx = 0, diff = 0;
  for (int64_t i = 0; i < S; ++i) {
    mx = fmax(mx, fabs(B[i]));
    diff = fmax(diff, fabs((double)A[i] - B[i]));
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int iters = 50;
  CK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) CK((cudaError_t)wp_scores_launch(&sp, 0));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  const double t_plain = time_us(e0, e1, iters);
  CK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) DSA_CK(dsa_indexer_decode_scores(&a, 0));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  const double t_lib = time_us(e0, e1, iters);
  printf("decode scores, 1 request x %8lld keys: plain wgmma %8.1f us, library %8.1f us; max |plain - library| = "
         "%.2e of max |score| %s\n",
         (long long)S, t_plain, t_lib, diff / (mx > 0 ? mx : 1), diff <= 2e-3 * mx ? "ok" : "MISMATCH");
  CK(cudaFree(dq));
  CK(cudaFree(dqs));
  CK(cudaFree(dw));
  CK(cudaFree(dcache));
  CK(cudaFree(dbt));
  CK(cudaFree(dlen));
  CK(cudaFree(dA));
  CK(cudaFree(dB));
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("dsa-dev-scores-wgmma-plain: no CUDA device\n");
    return 77;
  }
  const int64_t sizes[] = {8192, 131072, 1 << 20};
  for (int i = 0; i < 3; ++i) run(sizes[i]);
  return 0;
}
