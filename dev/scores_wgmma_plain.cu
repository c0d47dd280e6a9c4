/*
 * indexer_scores/v2_fp8_wgmma.cu — stage 1 of DSA for FP8 q: lightning-indexer scores on e4m3 wgmma.
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

#include "kernels.h"
#include "indexer/scores.cuh"
#include "indexer/wgmma_tile.cuh"
#include "common/launch.cuh"
#include "common/ptx/sync.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/convert.cuh"
#include "common/ptx/mma.cuh"
#include "common/ptx/wgmma.cuh"
#include "common/rows.cuh"

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
    indexer_scores_v2_kernel(const dsa_scores_params p, int T, int tiles_per_cta) {
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
                           qscale_nonneg, wi, lane);
  }
#undef WP_WG_STAGE_PTR
  sc_fill_tail(p, grp, nt, t0, range_lo, range_hi);
}

template <int HP, int NC>
static cudaError_t wp_launch_t(const dsa_scores_params *p, dim3 grid, int T, int tpc, cudaStream_t stream) {
  static dsa_smem_cache cache;
  const int qrows = (T * HP + NC - 1) / NC * NC;
  return dsa_launch_smem(indexer_scores_v2_kernel<HP, NC>, &cache, grid, WP_THREADS, wp_smem_bytes(qrows), stream,
                         false, *p, T, tpc);
}

/* max_x <= DSA_MAX_ROW_LEN (dsa.c): tile arithmetic in the kernel stays inside int. */
static int wp_launch(const dsa_scores_params *p, int T, int HP, int groups, int max_x, cudaStream_t stream) {
  const int total_tiles = (int)(((int64_t)max_x + WP_TILE - 1) / WP_TILE);
  if (total_tiles == 0 || groups == 0) return 0;
  /* About two CTAs an SM, each over many tiles: a CTA's setup (group, q) and its ring's first
   * fill are paid once per CTA, not once per few tiles (v2's first version used v1's 8 per SM and
   * lost to v1 at 128k and 1M decode). */
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

extern "C" int dsa_indexer_scores_v2_launch(const dsa_scores_params *p, cudaStream_t stream) {
  if (p->num_tokens <= 0) return 0;
  const int HP = p->q.num_heads <= 32 ? 32 : 64;
  int T, groups, max_x;
  sc_token_groups(p, HP == 32 ? WP_PREFILL_T32 : WP_PREFILL_T64, &T, &groups, &max_x);
  return wp_launch(p, T, HP, groups, max_x, stream);
}
