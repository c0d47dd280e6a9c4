/*
 * indexer_scores/v3_fp8_ws.cu — stage 1 of DSA for FP8 q, warp-specialised: the same math and tile
 * as v2 (fp8_tile.cuh: e4m3 x e4m3 wgmma on the cache bytes, 64 keys a tile), with the copies taken
 * off the warps that compute.
 *
 * Per CTA (three warpgroups, 384 threads): a group of T tokens, a contiguous range of 64-key tiles.
 *   producer   warpgroup 0: warp w owns tiles w, w + 4, ... of the range — its lookups (block table
 *              / workspace slots) and cp.async copies into an NS-stage ring; it signals a tile's
 *              `full` barrier once the copies of its previous tile landed (one tile of lag, so a
 *              tile's copies fly while the next tile's lookups wait), after fence.proxy.async.
 *   consumers  warpgroups 1 and 2 take alternate tiles (one's epilogue overlaps the other's wgmma):
 *              wait `full`, scores (w2_tile_scores), arrive on the stage's `empty` barrier.
 * NS is a multiple of 4 and of 2, so stage s always has the same producer warp (s % 4) and the
 * same consumer warpgroup (s % 2). With wide chunks (prefill, N = 256) the producers give registers
 * to the consumers (setmaxnreg 56 / 216).
 */
#include <stdint.h>

#include "dsa_kernels.h"
#include "indexer_scores/common.cuh"
#include "indexer_scores/fp8_tile.cuh"
#include "launch.cuh"
#include "ptx.cuh"
#include "rows.cuh"

#define W3_THREADS 384
#define W3_NS 8               /* ring stages of one 64-key tile each */
#define W3_PREFILL_T32 16     /* prefill tokens a CTA groups, 32 heads (two chunks of 256) */
#define W3_PREFILL_T64 8      /* 64 heads */
static_assert(W3_NS % 4 == 0, "stage s belongs to producer warp s % 4 and consumer warpgroup s % 2");

/* Shared memory after aligning the base to 1024: q tile | NS stages | wq, w, qsc [qrows] | full[NS],
 * empty[NS] mbarriers | the group. */
static size_t w3_smem_bytes(int qrows) {
  return 1024 + (size_t)w2_q_bytes(qrows) + (size_t)W3_NS * W2_WG_STAGE + (size_t)3 * qrows * 4 + 2 * W3_NS * 8 +
         sizeof(sc_group) + 16;
}

template <int HP, int NC>
__global__ void __launch_bounds__(W3_THREADS, NC <= 64 ? 2 : 1)
    indexer_scores_v3_kernel(const dsa_scores_params p, int T, int tiles_per_cta) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (ptx_smem_u32(smem_raw) & 1023)) & 1023);
  const int chunks = (T * HP + NC - 1) / NC;
  const int qrows = chunks * NC;
  unsigned char *q_tile = smem;                          /* [qrows][128] e4m3, swizzled */
  unsigned char *stages = smem + w2_q_bytes(qrows);      /* NS x W2_WG_STAGE */
  float *wq_smem = (float *)(stages + W3_NS * W2_WG_STAGE);
  float *w_smem = wq_smem + qrows;
  float *qsc_smem = w_smem + qrows;
  uint64_t *full = (uint64_t *)(qsc_smem + qrows);       /* 8-byte aligned: qrows is a multiple of 32 */
  uint64_t *empty = full + W3_NS;
  sc_group *grp = (sc_group *)(empty + W3_NS);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int t0 = blockIdx.y * T;
  const int nt = min(T, p.num_tokens - t0);
  /* The top-k kernel after this one may start launching (it waits with griddepcontrol.wait). */
  ptx_griddep_launch_dependents();

  int lo, hi, tile_begin, tile_end;
  long long range_lo, range_hi;
  sc_group_setup(p, grp, nt, t0, &lo, &hi);
  if (!sc_cta_tiles(p, grp, nt, t0, lo, hi, W2_WG_KEYS, tiles_per_cta, &tile_begin, &tile_end, &range_lo, &range_hi))
    return;
  const int ntiles = tile_end - tile_begin;

  if (tid < W3_NS) {
    ptx_mbar_init(ptx_smem_u32(&full[tid]), 32);   /* the producer warp's lanes */
    ptx_mbar_init(ptx_smem_u32(&empty[tid]), 128); /* the consumer warpgroup's threads */
  }
  w2_stage_q<HP>(p, grp, q_tile, wq_smem, w_smem, qsc_smem, qrows, nt, t0, warp, W3_THREADS / 32, lane);
  ptx_fence_proxy_async_smem(); /* q's generic stores before wgmma reads them */
  __syncthreads();              /* q, weights and the barriers' initialisation, for every role */
  const bool qscale_nonneg = grp->any_negative_qscale == 0;

  if (warp < 4) {
    /* ---- producer warp `warp`: tiles warp, warp + 4, ... ---- */
    if constexpr (NC > 64) ptx_setmaxnreg_dec<56>();
    int prev = -1;
    for (int i = warp; i < ntiles; i += 4) {
      const int s = i % W3_NS;
      if (i >= W3_NS) ptx_mbar_wait(ptx_smem_u32(&empty[s]), (uint32_t)((i / W3_NS - 1) & 1));
      unsigned char *st = stages + s * W2_WG_STAGE;
      const int x0 = (tile_begin + i) * W2_WG_KEYS;
      long long raw[4];
#pragma unroll
      for (int q4 = 0; q4 < 4; q4++) raw[q4] = w2_key_raw(p, t0, x0, 16 * q4, lo, hi, lane);
#pragma unroll
      for (int q4 = 0; q4 < 4; q4++) w2_issue_keys(st, p, raw[q4], x0, 16 * q4, lane);
      ptx_cp_async_commit();
      if (prev >= 0) { /* the previous tile's copies have landed: publish it */
        ptx_cp_async_wait<1>();
        ptx_fence_proxy_async_smem();
        ptx_mbar_arrive(ptx_smem_u32(&full[prev % W3_NS]));
      }
      prev = i;
    }
    if (prev >= 0) {
      ptx_cp_async_wait<0>();
      ptx_fence_proxy_async_smem();
      ptx_mbar_arrive(ptx_smem_u32(&full[prev % W3_NS]));
    }
  } else {
    /* ---- consumer warpgroup g: tiles g, g + 2, ... ---- */
    if constexpr (NC > 64) ptx_setmaxnreg_inc<216>();
    const int g = (warp >> 2) - 1, wi = warp & 3;
    const uint32_t q_addr = ptx_smem_u32(q_tile);
    for (int i = g; i < ntiles; i += 2) {
      const int s = i % W3_NS;
      ptx_mbar_wait(ptx_smem_u32(&full[s]), (uint32_t)((i / W3_NS) & 1));
      ptx_fence_proxy_async_smem();
      const int x0 = (tile_begin + i) * W2_WG_KEYS;
      if (w2_any_visible(grp, nt, x0))
        w2_tile_scores<HP, NC>(p, grp, stages + s * W2_WG_STAGE, q_addr, wq_smem, w_smem, qsc_smem, chunks, nt, t0,
                               x0, qscale_nonneg, wi, lane);
      ptx_mbar_arrive(ptx_smem_u32(&empty[s])); /* this warpgroup is done with the stage */
    }
  }
  sc_fill_tail(p, grp, nt, t0, range_lo, range_hi);
}

template <int HP, int NC>
static cudaError_t w3_launch_t(const dsa_scores_params *p, dim3 grid, int T, int tpc, cudaStream_t stream) {
  static dsa_smem_cache cache;
  const int qrows = (T * HP + NC - 1) / NC * NC;
  return dsa_launch_smem(indexer_scores_v3_kernel<HP, NC>, &cache, grid, W3_THREADS, w3_smem_bytes(qrows), stream,
                         false, *p, T, tpc);
}

/* max_x <= DSA_MAX_ROW_LEN (dsa.c): tile arithmetic in the kernel stays inside int. */
static int w3_launch(const dsa_scores_params *p, int T, int HP, int groups, int max_x, cudaStream_t stream) {
  const int total_tiles = (int)(((int64_t)max_x + W2_WG_KEYS - 1) / W2_WG_KEYS);
  if (total_tiles == 0 || groups == 0) return 0;
  /* about two long-lived CTAs an SM (their setup and the ring's first fill paid once) */
  const long long want = (long long)(p->num_sms > 0 ? p->num_sms : 132) * 2;
  int tpc = (int)(((long long)total_tiles * groups + want - 1) / want);
  if (tpc < 1) tpc = 1;
  if (tpc > 512) tpc = 512;
  const dim3 grid((total_tiles + tpc - 1) / tpc, groups);
  const int n = T * HP;
  cudaError_t err;
  if (HP == 32)
    err = n <= 32    ? w3_launch_t<32, 32>(p, grid, T, tpc, stream)
          : n <= 64  ? w3_launch_t<32, 64>(p, grid, T, tpc, stream)
          : n <= 128 ? w3_launch_t<32, 128>(p, grid, T, tpc, stream)
                     : w3_launch_t<32, 256>(p, grid, T, tpc, stream);
  else
    err = n <= 64    ? w3_launch_t<64, 64>(p, grid, T, tpc, stream)
          : n <= 128 ? w3_launch_t<64, 128>(p, grid, T, tpc, stream)
                     : w3_launch_t<64, 256>(p, grid, T, tpc, stream);
  return (int)err;
}

extern "C" int dsa_indexer_scores_v3_launch(const dsa_scores_params *p, cudaStream_t stream) {
  if (p->num_tokens <= 0) return 0;
  const int HP = p->q.num_heads <= 32 ? 32 : 64;
  int T, groups, max_x;
  sc_token_groups(p, HP == 32 ? W3_PREFILL_T32 : W3_PREFILL_T64, &T, &groups, &max_x);
  return w3_launch(p, T, HP, groups, max_x, stream);
}
