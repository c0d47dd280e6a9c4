/*
 * indexer_scores/v3_fp8_ws.cu — stage 1 of DSA for FP8 q, warp-specialised: the same math and tile
 * as v2 (fp8_tile.cuh: e4m3 x e4m3 wgmma on the cache bytes, 64 keys a tile), with the copies taken
 * off the warps that compute.
 *
 * Per CTA (four warpgroups, 512 threads): a group of T tokens, a contiguous range of 64-key tiles.
 *   producer   warpgroup 0: warp w owns tiles w, w + 4, ... of the range — its lookups (block table
 *              / workspace slots, issued one of its tiles ahead) and cp.async copies into an
 *              NS-stage ring; the copies arrive on the stage's `full` barrier as they land
 *              (cp.async.mbarrier.arrive.noinc), so the warp never waits for data (publishing a tile
 *              only after the warp's next tile was issued starved the consumers: ncu showed them
 *              waiting on `full` 21 % of the time while the producers waited on `empty`).
 *   consumers  warpgroups 1-3 take every third tile (two epilogues overlap the third's wgmma; with
 *              two, a warp's epilogue — latency-bound, ~0.2 IPC a warp — left the tensor pipe idle
 *              most of the time): wait `full`, scores (w2_tile_scores), arrive on the stage's
 *              `empty` barrier (128 arrivals, whichever warpgroup consumed it).
 * NS is a multiple of 4, so stage s always has the same producer warp (s % 4). Chunks of at most
 * 128 columns (64 accumulators a thread); the producers give registers to the consumers
 * (setmaxnreg 56 / 144).
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <string.h>

#include "dsa_kernels.h"
#include "indexer_scores/common.cuh"
#include "indexer_scores/fp8_tile.cuh"
#include "launch.cuh"
#include "ptx.cuh"
#include "rows.cuh"

#define W3_CONSUMERS 3         /* consumer warpgroups */
#define W3_THREADS (128 * (1 + W3_CONSUMERS))
#define W3_NS 8               /* ring stages of one 64-key tile each */
#define W3_PREFILL_T32 16     /* prefill tokens a CTA groups, 32 heads (four chunks of 128 columns) */
#define W3_PREFILL_T64 8      /* 64 heads */
static_assert(W3_NS % 4 == 0, "stage s belongs to producer warp s % 4");

/* Shared memory: full[NS], empty[NS] mbarriers | the group | (aligned to 1024) q tile | NS stages |
 * wq, w, qsc [qrows]. The barriers sit first, at one offset in every instantiation, apart from
 * anything staged (moved there against a racecheck report of q stores over barriers; the report
 * persists, docs/PERF.md). */
static size_t w3_smem_bytes(int qrows) {
  return 2 * W3_NS * 8 + sizeof(sc_group) + 1024 + (size_t)w2_q_bytes(qrows) + (size_t)W3_NS * W2_WG_STAGE +
         (size_t)3 * qrows * 4 + 16;
}

/* TMA (decode, page size 64: a tile is one page): the producer's lane 0 moves a page with one TMA
 * tensor load (kmap: [pages][64 rows][128 B], 128-byte swizzle — the layout wgmma reads) and its
 * 256 B of scales with one bulk copy, both completing the stage's `full` transaction count; a bad
 * page id loads an out-of-bounds box (zeros) and flags its keys invalid. Else cp.async per row. */
template <int HP, int NC, bool TMA>
__global__ void __launch_bounds__(W3_THREADS, NC <= 32 ? 2 : 1)
    indexer_scores_v3_kernel(const dsa_scores_params p, int T, int tiles_per_cta,
                             const __grid_constant__ CUtensorMap kmap) {
  extern __shared__ unsigned char smem_raw[];
  uint64_t *full = (uint64_t *)smem_raw; /* dynamic shared memory is at least 16-byte aligned */
  uint64_t *empty = full + W3_NS;
  sc_group *grp = (sc_group *)(empty + W3_NS);
  unsigned char *after = (unsigned char *)(grp + 1);
  unsigned char *smem = after + ((1024 - (ptx_smem_u32(after) & 1023)) & 1023);
  const int chunks = (T * HP + NC - 1) / NC;
  const int qrows = chunks * NC;
  unsigned char *q_tile = smem;                          /* [qrows][128] e4m3, swizzled */
  unsigned char *stages = smem + w2_q_bytes(qrows);      /* NS x W2_WG_STAGE */
  float *wq_smem = (float *)(stages + W3_NS * W2_WG_STAGE);
  float *w_smem = wq_smem + qrows;
  float *qsc_smem = w_smem + qrows;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  sc_cta cta;
  if (!sc_cta_begin(p, grp, T, W2_WG_KEYS, tiles_per_cta, &cta)) return;
  const int t0 = cta.t0, nt = cta.nt, lo = cta.lo, hi = cta.hi, tile_begin = cta.tile_begin, tile_end = cta.tile_end;
  const long long range_lo = cta.range_lo, range_hi = cta.range_hi;
  const int ntiles = tile_end - tile_begin;

  if (tid < W3_NS) {
    /* the producer warp's lanes: copies landed + flags (TMA: the flags + lane 0's expect_tx) */
    ptx_mbar_init(ptx_smem_u32(&full[tid]), TMA ? 33 : 64);
    ptx_mbar_init(ptx_smem_u32(&empty[tid]), 128); /* the consumer warpgroup's threads */
  }
  w2_stage_q<HP>(p, grp, q_tile, wq_smem, w_smem, qsc_smem, qrows, nt, t0, warp, W3_THREADS / 32, lane);
  ptx_fence_proxy_async_smem(); /* q's generic stores before wgmma reads them */
  __syncthreads();              /* q, weights and the barriers' initialisation, for every role */
  const bool qscale_nonneg = grp->any_negative_qscale == 0;

  if (warp < 4) {
    /* ---- producer warp `warp`: tiles warp, warp + 4, ... ---- */
    /* two CTAs an SM at 32 columns (decode, one token): 64 registers each, no exchange */
    if constexpr (NC > 32) ptx_setmaxnreg_dec<56>();
    if constexpr (TMA) {
      /* the page of this warp's next tile, looked up a tile ahead by lane 0 */
      long long page = lane == 0 && warp < ntiles ? rows_key_raw(p.rows, t0, (tile_begin + warp) * W2_WG_KEYS) : -1;
      for (int i = warp; i < ntiles; i += 4) {
        const int s = i % W3_NS;
        const int x0 = (tile_begin + i) * W2_WG_KEYS;
        const long long page_next =
            lane == 0 && i + 4 < ntiles ? rows_key_raw(p.rows, t0, x0 + 4 * W2_WG_KEYS) : -1;
        if (i >= W3_NS) ptx_mbar_wait(ptx_smem_u32(&empty[s]), (uint32_t)((i / W3_NS - 1) & 1));
        const long long pg = __shfl_sync(0xffffffffu, page, 0);
        const bool valid = pg >= 0 && pg < p.cache.num_pages;
        unsigned char *st = stages + s * W2_WG_STAGE;
        int *s_ok = (int *)(st + W2_WG_ROWS_BYTES + W2_WG_KEYS * 4);
        s_ok[lane] = valid;
        s_ok[lane + 32] = valid;
        const uint32_t bar = ptx_smem_u32(&full[s]);
        ptx_mbar_arrive(bar); /* the flags (release) */
        if (lane == 0) {
          ptx_mbar_arrive_expect_tx(bar, W2_WG_ROWS_BYTES + (valid ? W2_WG_KEYS * 4 : 0));
          ptx_tma_load_3d(ptx_smem_u32(st), &kmap, 0, 0, valid ? (int)pg : (int)p.cache.num_pages, bar);
          if (valid)
            ptx_bulk_load(ptx_smem_u32(st + W2_WG_ROWS_BYTES),
                          p.cache.data + pg * (W2_WG_KEYS * (DSA_INDEX_HEAD_DIM + 4)) + W2_WG_ROWS_BYTES,
                          W2_WG_KEYS * 4, bar);
        }
        page = page_next;
      }
    } else {
    /* Tile i's lookups are issued one of this warp's tiles ahead (their latency passes while the
     * warp waits for a free stage); its copies arrive on `full` by themselves when they land
     * (cp.async.mbarrier.arrive.noinc), its flags by a plain arrive: the warp never waits for data. */
    long long raw[4], raw_next[4];
#pragma unroll
    for (int q4 = 0; q4 < 4; q4++)
      raw[q4] = warp < ntiles ? w2_key_raw(p, t0, (tile_begin + warp) * W2_WG_KEYS, 16 * q4, lo, hi, lane) : -1;
    for (int i = warp; i < ntiles; i += 4) {
      const int s = i % W3_NS;
      const int x0 = (tile_begin + i) * W2_WG_KEYS;
#pragma unroll
      for (int q4 = 0; q4 < 4; q4++)
        raw_next[q4] = i + 4 < ntiles ? w2_key_raw(p, t0, x0 + 4 * W2_WG_KEYS, 16 * q4, lo, hi, lane) : -1;
      if (i >= W3_NS) ptx_mbar_wait(ptx_smem_u32(&empty[s]), (uint32_t)((i / W3_NS - 1) & 1));
      unsigned char *st = stages + s * W2_WG_STAGE;
#pragma unroll
      for (int q4 = 0; q4 < 4; q4++) w2_issue_keys(st, p, raw[q4], x0, 16 * q4, lane);
      ptx_cp_async_mbar_arrive_noinc(ptx_smem_u32(&full[s])); /* when this lane's copies land */
      ptx_mbar_arrive(ptx_smem_u32(&full[s]));                /* its flag stores (release) */
#pragma unroll
      for (int q4 = 0; q4 < 4; q4++) raw[q4] = raw_next[q4];
    }
    }
  } else {
    /* ---- consumer warpgroup g: tiles g, g + 3, ... ---- */
    if constexpr (NC > 32) ptx_setmaxnreg_inc<144>();
    const int g = (warp >> 2) - 1, wi = warp & 3;
    const uint32_t q_addr = ptx_smem_u32(q_tile);
    for (int i = g; i < ntiles; i += W3_CONSUMERS) {
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
  /* Every role is done with the ring: invalidate its barriers (PTX: a barrier's memory may hold other
   * data only after mbarrier.inval; the next CTA on this SM lays its own data there). */
  __syncthreads();
  if (tid < W3_NS) {
    ptx_mbar_inval(ptx_smem_u32(&full[tid]));
    ptx_mbar_inval(ptx_smem_u32(&empty[tid]));
  }
  sc_fill_tail(p, grp, nt, t0, range_lo, range_hi);
}

template <int HP, int NC, bool TMA>
static cudaError_t w3_launch_t(const dsa_scores_params *p, dim3 grid, int T, int tpc, const CUtensorMap &kmap,
                               cudaStream_t stream) {
  static dsa_smem_cache cache;
  const int qrows = (T * HP + NC - 1) / NC * NC;
  return dsa_launch_smem(indexer_scores_v3_kernel<HP, NC, TMA>, &cache, grid, W3_THREADS, w3_smem_bytes(qrows), stream,
                         false, *p, T, tpc, kmap);
}

/* The index-K cache as a TMA tensor map for decode with 64-key pages: dims (128 B, 64 rows, pages),
 * strides (1, 128, page bytes), a [128 B x 64 rows x 1 page] box, 128-byte swizzle. False when the
 * driver has no encoder or refuses the map (the caller takes the cp.async path). */
static bool w3_key_map(const dsa_scores_params *p, CUtensorMap *map) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  static bool looked = false;
  if (!looked) { /* benign race: every thread stores the same pointer */
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    (void)cudaGetLastError();
    looked = true;
  }
  if (!encode || p->cache.page_size != W2_WG_KEYS || p->cache.num_pages <= 0 || p->cache.num_pages >= 0x7fffffffLL)
    return false;
  const cuuint64_t dims[3] = {DSA_INDEX_HEAD_DIM, W2_WG_KEYS, (cuuint64_t)p->cache.num_pages};
  const cuuint64_t strides[2] = {DSA_INDEX_HEAD_DIM, (cuuint64_t)W2_WG_KEYS * (DSA_INDEX_HEAD_DIM + 4)};
  const cuuint32_t box[3] = {DSA_INDEX_HEAD_DIM, W2_WG_KEYS, 1};
  const cuuint32_t estr[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, (void *)p->cache.data, dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* max_x <= DSA_MAX_ROW_LEN (dsa.c): tile arithmetic in the kernel stays inside int. */
template <bool TMA>
static int w3_launch(const dsa_scores_params *p, int T, int HP, int groups, int max_x, const CUtensorMap &kmap,
                     cudaStream_t stream) {
  const int total_tiles = (int)(((int64_t)max_x + W2_WG_KEYS - 1) / W2_WG_KEYS);
  if (total_tiles == 0 || groups == 0) return 0;
  /* one long-lived CTA an SM (512 threads x 128 registers fill its register file; its setup and the
   * ring's first fill paid once) */
  /* one CTA an SM; two at 32 columns (one decode token: 64 registers a thread suffice, and a batch's
   * groups fill the SMs in fewer, fuller waves) */
  const long long want = (long long)(p->num_sms > 0 ? p->num_sms : 132) * (T * HP <= 32 ? 2 : 1);
  int tpc;
  const dim3 grid = sc_grid(total_tiles, groups, want, 512, &tpc);
  const int n = T * HP;
  cudaError_t err;
  if (HP == 32)
    err = n <= 32    ? w3_launch_t<32, 32, TMA>(p, grid, T, tpc, kmap, stream)
          : n <= 64  ? w3_launch_t<32, 64, TMA>(p, grid, T, tpc, kmap, stream)
                     : w3_launch_t<32, 128, TMA>(p, grid, T, tpc, kmap, stream);
  else
    err = n <= 64 ? w3_launch_t<64, 64, TMA>(p, grid, T, tpc, kmap, stream)
                  : w3_launch_t<64, 128, TMA>(p, grid, T, tpc, kmap, stream);
  return (int)err;
}

/* tma: decode's pages by TMA where the cache allows (DSA_INDEXER_KERNEL=v3t); else cp.async. */
static int w3_dispatch(const dsa_scores_params *p, bool tma, cudaStream_t stream) {
  if (p->num_tokens <= 0) return 0;
  const int HP = p->q.num_heads <= 32 ? 32 : 64;
  int T, groups, max_x;
  sc_token_groups(p, HP == 32 ? W3_PREFILL_T32 : W3_PREFILL_T64, &T, &groups, &max_x);
  CUtensorMap kmap;
  memset(&kmap, 0, sizeof kmap);
  if (tma && p->rows.mode == DSA_ROWS_DECODE && w3_key_map(p, &kmap))
    return w3_launch<true>(p, T, HP, groups, max_x, kmap, stream);
  return w3_launch<false>(p, T, HP, groups, max_x, kmap, stream);
}

extern "C" int dsa_indexer_scores_v3_launch(const dsa_scores_params *p, cudaStream_t stream) {
  return w3_dispatch(p, false, stream);
}

extern "C" int dsa_indexer_scores_v3t_launch(const dsa_scores_params *p, cudaStream_t stream) {
  return w3_dispatch(p, true, stream);
}
