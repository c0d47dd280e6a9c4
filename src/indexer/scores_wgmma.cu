/*
 * indexer/scores_wgmma.cu — indexer scores on warp-specialised wgmma (wgmma_tile.cuh: e4m3 x e4m3
 * wgmma straight on the cache bytes, 64 keys a tile), the copies taken off the warps that compute:
 * the prefill scorer for both q types and the FP8-q decode scorer (host/choose.c); bf16 q on f16
 * wgmma and decode pages by TMA (wgmma_tma) are described below.
 *
 * Per CTA (four warpgroups, 512 threads): a group of T tokens, a contiguous range of 64-key tiles.
 *   producer   warpgroup 0: warp w owns tiles w, w + 4, ... of the range — its lookups (block table
 *              / workspace slots, issued one of its tiles ahead) and cp.async copies into an
 *              NS-stage ring (common/mbar_ring.cuh); the copies arrive on the stage's `full` barrier
 *              as they land (cp.async.mbarrier.arrive.noinc), so the warp never waits for data
 *              (publishing a tile only after the warp's next tile was issued starved the consumers:
 *              ncu showed them waiting on `full` 21 % of the time while the producers waited on
 *              `empty`).
 *   consumers  warpgroups 1-3 take every third tile (two epilogues overlap the third's wgmma; with
 *              two, a warp's epilogue — latency-bound, ~0.2 IPC a warp — left the tensor pipe idle
 *              most of the time): wait `full`, scores (wt_tile_scores), arrive on the stage's
 *              `empty` barrier (128 arrivals).
 * NS is a multiple of 4 and of 3, so stage s always has the same producer warp (s % 4) and consumer
 * warpgroup (s % 3): a parity wait is then never two phases ahead (WS_NS below). Chunks of at most
 * 128 columns (64 accumulators a thread); the producers give registers to the consumers
 * (setmaxnreg 56 / 144).
 *
 * bf16 q (F16; the bf16-q prefill default: 1.29 ms at 1M against mma's 1.96): q staged times a
 * power of two into f16 (exact, as scores_mma.cu), two K-atoms a row; a consumer warpgroup converts
 * its tile's e4m3 keys to f16 in its own 16 KB buffer (exact), releases the stage at once, then f16
 * wgmma (k16, eight steps a chunk); the epilogue is the FP8 path's. 8 tokens a prefill group (q
 * rows are 256 B).
 *
 * OUT (wgmma_tile.cuh, wt_out) says where the scores go:
 *   WT_OUT_SCORES  the scores-only output and the separate indexer's workspace.
 *   WT_OUT_KEYS    the decode indexer in one kernel (dsa_indexer_fused_launch): the epilogue keeps the
 *                  CTA's scores in shared memory as score keys instead of storing them, a CTA with no
 *                  tiles still runs, and after the ring every thread runs the exact top-k of
 *                  indexer/fused_topk.cuh with the request's other CTAs — one cooperative launch,
 *                  declined (nothing launched) where the grid cannot be resident at once or a CTA's
 *                  scores do not fit beside the ring.
 *   WT_OUT_SAMPLE  the fused prefill indexer's sample (indexer/prefill_select.cu; FP8 q): the grid
 *                  covers only every DSA_PREFILL_SAMPLE_STRIDE-th tile (tile i of a CTA is key
 *                  coordinate (tile_begin + i) x 64 x stride), scores stored compacted.
 *   WT_OUT_FILTER  its filtered pass (FP8 q): keys at or above the token's threshold appended to the
 *                  token's candidate list through two staging buffers a consumer warpgroup (~4.5 KB
 *                  each: a tile's scores and kept-lane masks while the previous tile's are appended).
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <string.h>

#include "common/launch.cuh"
#include "common/layout.h"
#include "common/mbar_ring.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "common/rows.cuh"
#include "indexer/fused_topk.cuh"
#include "indexer/scores.cuh"
#include "indexer/wgmma_tile.cuh"
#include "kernels.h"

#define WS_CONSUMERS 3         /* consumer warpgroups */
#define WS_THREADS (128 * (1 + WS_CONSUMERS))
#define WS_NS 12              /* ring stages of one 64-key tile each */
#define WS_PREFILL_T32 16     /* prefill tokens a CTA groups, 32 heads (four chunks of 128 columns) */
#define WS_PREFILL_T64 8      /* 64 heads */
#define WS_F16_PREFILL_T32 8  /* bf16 q (f16 path): q rows take twice the bytes, so half the tokens */
#define WS_F16_PREFILL_T64 4
/* A stage always has the same producer warp and the same consumer warpgroup. Waits use a phase's
 * parity, which only names the current phase or the one before it: whoever waits for stage s's round
 * r must itself have seen round r - 1 through (else it can pass on round r - 2's parity while round
 * r - 1 is still unfilled — with 8 stages and three consumers a consumer met a stage last used by
 * another warpgroup, and a lagging producer warp let it read a stale stage: decode runs, whose fast
 * consumers wait on `full`, failed with error 719). */
static_assert(WS_NS % 4 == 0 && WS_NS % WS_CONSUMERS == 0, "stage s: producer warp s % 4, consumer s % 3");
/* SHARE (TMA at 32 columns — one decode token — with few tiles a CTA, ws_launch): one producer warp
 * fills every stage (lane j looks up tile base + j's page, 32 tiles a load; lane 0 issues), six
 * stages, ~61 KB and 64 registers a thread, so two CTAs share an SM and more tiles' latencies
 * overlap (H200: 1 token 1M 46.0 -> 43.7 us, B = 64 x 8k 39.6 -> 26.3, 128 x 8k 66.9 -> 55.2; it
 * lost with a group or more an SM, 256 x 8k 86.6 -> 95.8, and at 512 tiles a CTA, 128 x 64k 294 -> 311). */
#define WS_NS_SHARE 6
#define WS_MAX_SMEM (227 * 1024) /* dynamic shared memory a CTA may opt into on sm_90 */
static_assert(WS_NS_SHARE % WS_CONSUMERS == 0, "stage s: consumer s % 3");
static __host__ __device__ constexpr int ws_ns(bool share) { return share ? WS_NS_SHARE : WS_NS; }
/* Key coordinates from one of a CTA's tiles to the next: 64, or for the sample pass
 * (WT_OUT_SAMPLE) DSA_PREFILL_SAMPLE_STRIDE tiles of 64. */
static __host__ __device__ constexpr int ws_tile_step(int out) {
  return out == WT_OUT_SAMPLE ? 1 << DSA_PREFILL_SAMPLE_SHIFT : WT_WG_KEYS;
}

/* Named barriers (bar.sync ids; 0 is __syncthreads). */
enum ws_barrier {
  WS_BAR_Q_STAGED = 1, /* the 12 consumer warps: q and the weights staged */
  WS_BAR_CONSUMER = 2, /* + g: consumer warpgroup g's 128 threads (bf16 q: its key buffer) */
  WS_BAR_REGS = 2 + WS_CONSUMERS, /* FUSED: the consumers gave their extra registers back (all 512) */
  WS_BAR_PRODUCERS = 3 + WS_CONSUMERS /* FUSED with SHARE: the producer warpgroup's 128 threads, so that
                                         every warp has passed one named barrier before the select */
};

/* Shared memory: full[NS], empty[NS] mbarriers | the group | (aligned to 1024) q tile | NS stages |
 * wq, w, qsc [qrows] (F16: the consumers' key buffers before wq). The barriers sit first, at one
 * offset in every instantiation, apart from anything staged. */
static size_t ws_smem_bytes(int qrows, bool f16, int ns) {
  return 2 * ns * 8 + sizeof(sc_group) + 1024 + (size_t)wt_q_bytes(qrows) * (f16 ? 2 : 1) +
         (size_t)ns * WT_WG_STAGE + (f16 ? (size_t)WS_CONSUMERS * WT_F16_KEYS : 0) + (size_t)3 * qrows * 4 + 16;
}
/* WT_OUT_KEYS: + the CTA's scores as keys, T tokens x its tiles' positions (after qsc, 16-byte
 * aligned), then each token's histogram of their first digit (T x TK_BINS), then (TMA) its tiles'
 * page ids. */
static size_t ws_fused_keys_bytes(int T, int tiles_per_cta) {
  return (size_t)T * tiles_per_cta * WT_WG_KEYS * 4 + 16 + (size_t)T * TK_BINS * 4 + (size_t)tiles_per_cta * 4;
}
/* WT_OUT_FILTER: + the group's thresholds (after qsc, 16-byte aligned), then two staging buffers a
 * consumer warpgroup. */
static constexpr size_t ws_filter_bytes(void) {
  return 16 + SC_MAX_T * 8 + (size_t)2 * WS_CONSUMERS * sizeof(wt_stage);
}
static_assert(sizeof(wt_stage) % 16 == 0, "staging buffers stay 16-byte aligned");
static_assert(WS_NS_SHARE * WT_WG_STAGE >= sizeof(fz_smem), "the select phase lives in the ring's stages");

/* Producer, TMA: one tile's page pg into stage st — the validity flags by every lane of the warp
 * (32 arrivals), then lane 0's arrive.expect_tx, the tensor copy of the 64 rows (an out-of-bounds
 * box, zeros, for a bad page id) and the bulk copy of the scales (valid pages only), all completing
 * on `bar` (33 arrivals in all). */
static __device__ __forceinline__ void ws_tma_fill(const dsa_scores_params &p, const CUtensorMap *kmap,
                                                   unsigned char *st, uint32_t bar, long long pg, int lane) {
  const bool valid = pg >= 0 && pg < p.cache.num_pages;
  int *s_ok = (int *)(st + WT_WG_ROWS_BYTES + WT_WG_KEYS * 4);
  s_ok[lane] = valid;
  s_ok[lane + 32] = valid;
  ptx_mbar_arrive(bar); /* the flags (release) */
  if (lane == 0) {
    ptx_mbar_arrive_expect_tx(bar, WT_WG_ROWS_BYTES + (valid ? WT_WG_KEYS * 4 : 0));
    ptx_tma_load_3d(ptx_smem_u32(st), kmap, 0, 0, valid ? (int)pg : (int)p.cache.num_pages, bar);
    if (valid)
      ptx_bulk_load(ptx_smem_u32(st + WT_WG_ROWS_BYTES),
                    p.cache.data + pg * (WT_WG_KEYS * IDXK_SLOT_BYTES) + WT_WG_ROWS_BYTES, WT_WG_KEYS * 4,
                    bar);
  }
}

/* F16: bf16 q on the f16 path (q staged scaled into f16, each consumer warpgroup converts its tile's
 * e4m3 keys to f16 in its own buffer, releases the stage, then f16 wgmma); else FP8 q, e4m3 wgmma.
 * TMA (decode, FP8 q, page size 64: a tile is one page; wgmma_tma): the producer warp's
 * lane 0 moves a page with one TMA tensor load (kmap: [pages][64 rows][128 B], 128-byte swizzle —
 * the layout wgmma reads) and its 256 B of scales with one bulk copy, both completing the stage's
 * `full` transaction count; a bad page id loads an out-of-bounds box (zeros) and flags its keys
 * invalid. Else cp.async per 16 bytes, every lane. */
template <int HP, int NC, bool F16, bool TMA, bool SHARE, int OUT>
__global__ void __launch_bounds__(WS_THREADS, SHARE ? 2 : 1)
    scores_wgmma_kernel(const dsa_scores_params p, int T, int tiles_per_cta, const __grid_constant__ CUtensorMap kmap,
                        const dsa_fused_topk f, const dsa_prefill_select sel) {
  constexpr bool FUSED = OUT == WT_OUT_KEYS, FILTER = OUT == WT_OUT_FILTER;
  static_assert(OUT <= WT_OUT_KEYS || (!F16 && !TMA), "the prefill indexer's passes: FP8 q, cp.async keys");
  constexpr int XSTEP = ws_tile_step(OUT);
  extern __shared__ unsigned char smem_raw[];
  uint64_t *full = (uint64_t *)smem_raw; /* the ring's barriers; dynamic shared memory is >= 16-byte aligned */
  constexpr int NS = ws_ns(SHARE);
  static_assert(!SHARE || (TMA && NC == 32), "two CTAs an SM: TMA decode at 32 columns");
  uint64_t *empty = full + NS;
  sc_group *grp = (sc_group *)(empty + NS);
  unsigned char *after = (unsigned char *)(grp + 1);
  mbar_ring ring;
  ring.full = ptx_smem_u32(full);
  ring.empty = ptx_smem_u32(empty);
  unsigned char *smem = after + ((1024 - (ptx_smem_u32(after) & 1023)) & 1023);
  const int chunks = (T * HP + NC - 1) / NC;
  const int qrows = chunks * NC;
  unsigned char *q_tile = smem; /* [qrows][128] e4m3, or F16: [2 K-atoms][qrows][128 B] f16; swizzled */
  unsigned char *stages = smem + wt_q_bytes(qrows) * (F16 ? 2 : 1); /* NS x WT_WG_STAGE */
  unsigned char *kbufs = stages + NS * WT_WG_STAGE;               /* F16: consumers x WT_F16_KEYS */
  float *wq_smem = (float *)(kbufs + (F16 ? WS_CONSUMERS * WT_F16_KEYS : 0));
  float *w_smem = wq_smem + qrows;
  float *qsc_smem = w_smem + qrows;
  /* FUSED: token ti's scores of positions pos0 .. pos0 + ks as keys (indexer/fused_topk.cuh) */
  uint32_t *fkeys = (uint32_t *)(((uintptr_t)(qsc_smem + qrows) + 15) & ~(uintptr_t)15);
  const int ks = tiles_per_cta * WT_WG_KEYS;
  uint32_t *fhist = fkeys + (size_t)T * ks; /* FUSED: T x TK_BINS */
  int *fpages = (int *)(fhist + (size_t)T * TK_BINS); /* FUSED and TMA: tile i's block-table entry */
  unsigned long long *ftau = (unsigned long long *)fkeys; /* FILTER: [SC_MAX_T], then the staging buffers */
  wt_stage *fstages = (wt_stage *)(ftau + SC_MAX_T);

  /* the warp index through a shuffle: ptxas then sees the role branches as warp-uniform (fewer
   * registers held across them: no spills; and wgmma overlap needs it) */
  const int tid = threadIdx.x, warp = __shfl_sync(0xffffffffu, tid >> 5, 0), lane = tid & 31;
  sc_cta cta;
  /* FUSED: a CTA with nothing to score still takes part in its request's selection */
  if (!sc_cta_begin(p, grp, T, XSTEP, tiles_per_cta, &cta) && !FUSED) return;
  wt_out_ctx ko = {};
  ko.keys = fkeys;
  ko.hist = fhist;
  ko.stride = ks;
  ko.pos0 = (int)cta.range_lo;
  if constexpr (FUSED)
    for (int i = threadIdx.x; i < T * TK_BINS; i += WS_THREADS) fhist[i] = 0u; /* before the barrier below */
  const int t0 = cta.t0, nt = cta.nt, lo = cta.lo, hi = cta.hi, tile_begin = cta.tile_begin, tile_end = cta.tile_end;
  const long long range_lo = cta.range_lo, range_hi = cta.range_hi;
  const int ntiles = tile_end - tile_begin;

  /* FUSED: the histograms' zeros before any epilogue counts into them. Otherwise not needed for
   * correctness (the group's lengths and the barriers are disjoint): it separates
   * sc_group_setup's reads from mbarrier.init in time for racecheck, which reported them as a race
   * (as it did mbarrier.init against q staging before that moved past the barrier below). */
  __syncthreads();
  if (tid < NS) {
    /* the producer warp's lanes: copies landed + flags (TMA: the flags + lane 0's expect_tx) */
    ptx_mbar_init(ring_full(ring, tid), TMA ? 33 : 64);
    ptx_mbar_init(ring_empty(ring, tid), 128); /* the consumer warpgroup's threads */
  }
  /* The barriers' initialisation, for every role. The producers then start filling the ring while
   * the consumer warps alone stage q (its load latency overlaps the first lookups and copies: what a
   * one-tile decode CTA waits for); the consumers meet on named barrier 1 before any wgmma. */
  __syncthreads();

  if (warp < 4) {
    /* ---- producer warp `warp`: tiles warp, warp + 4, ... ---- */
    if constexpr (!SHARE) ptx_setmaxnreg_dec<56>(); /* SHARE: 64 a thread, no exchange */
    if constexpr (TMA && SHARE) {
      /* warp 0 alone (six stages): lane j holds the page of tile base + j (one load for 32 tiles,
       * the next 32 loaded while these are issued); the other producer warps have nothing to do */
      if (warp == 0) {
        long long page = lane < ntiles ? rows_key_raw(p.rows, t0, (tile_begin + lane) * XSTEP) : -1;
        for (int base = 0; base < ntiles; base += 32) {
          const long long page_next =
              base + 32 + lane < ntiles ? rows_key_raw(p.rows, t0, (tile_begin + base + 32 + lane) * XSTEP) : -1;
          const int n = ntiles - base < 32 ? ntiles - base : 32;
          if (FUSED && lane < n) fpages[base + lane] = (int)page; /* the output's slots (fused_topk.cuh) */
          for (int j = 0; j < n; j++) {
            const int i = base + j, s = i % NS;
            ring_wait_empty<NS>(ring, i);
            ws_tma_fill(p, &kmap, stages + s * WT_WG_STAGE, ring_full(ring, s), __shfl_sync(0xffffffffu, page, j),
                        lane);
          }
          page = page_next;
        }
      }
    } else if constexpr (TMA) {
      /* every producer warp its own tiles (warp, warp + 4, ...), the page looked up a tile ahead by
       * lane 0 (one warp alone measured 4-6 % slower at B = 256 x 32k / 64k) */
      long long page = lane == 0 && warp < ntiles ? rows_key_raw(p.rows, t0, (tile_begin + warp) * XSTEP) : -1;
      for (int i = warp; i < ntiles; i += 4) {
        const int s = i % NS;
        const int x0 = (tile_begin + i) * XSTEP;
        const long long page_next =
            lane == 0 && i + 4 < ntiles ? rows_key_raw(p.rows, t0, x0 + 4 * XSTEP) : -1;
        if (FUSED && lane == 0) fpages[i] = (int)page; /* the output's slots (fused_topk.cuh) */
        ring_wait_empty<NS>(ring, i);
        ws_tma_fill(p, &kmap, stages + s * WT_WG_STAGE, ring_full(ring, s), __shfl_sync(0xffffffffu, page, 0),
                    lane);
        page = page_next;
      }
    } else {
    /* Tile i's lookups are issued one of this warp's tiles ahead (their latency passes while the
     * warp waits for a free stage); its copies arrive on `full` by themselves when they land
     * (cp.async.mbarrier.arrive.noinc), its flags by a plain arrive: the warp never waits for data. */
    long long raw[4], raw_next[4];
#pragma unroll
    for (int q4 = 0; q4 < 4; q4++)
      raw[q4] = warp < ntiles ? wt_key_raw(p, t0, (tile_begin + warp) * XSTEP, 16 * q4, lo, hi, lane) : -1;
    for (int i = warp; i < ntiles; i += 4) {
      const int s = i % NS;
      const int x0 = (tile_begin + i) * XSTEP;
#pragma unroll
      for (int q4 = 0; q4 < 4; q4++)
        raw_next[q4] = i + 4 < ntiles ? wt_key_raw(p, t0, x0 + 4 * XSTEP, 16 * q4, lo, hi, lane) : -1;
      ring_wait_empty<NS>(ring, i);
      unsigned char *st = stages + s * WT_WG_STAGE;
#pragma unroll
      for (int q4 = 0; q4 < 4; q4++) wt_issue_keys(st, p, raw[q4], x0, 16 * q4, lane);
      ptx_cp_async_mbar_arrive_noinc(ring_full(ring, s)); /* when this lane's copies land */
      ptx_mbar_arrive(ring_full(ring, s));                /* its flag stores (release) */
#pragma unroll
      for (int q4 = 0; q4 < 4; q4++) raw[q4] = raw_next[q4];
    }
    }
    /* FUSED: back to the launch's 128 registers for the select phase, once the consumers gave theirs
     * back (an inc before the consumers' own inc to 144 would take what they wait for: a CTA with no
     * tiles deadlocked so) */
    if constexpr (FUSED && !SHARE) {
      ptx_bar_sync(WS_BAR_REGS, WS_THREADS);
      ptx_setmaxnreg_inc<128>();
    }
    /* For compute-sanitizer alone: racecheck's model of barrier 0 goes wrong when some warps pass a
     * named barrier the others do not — with the consumers' WS_BAR_Q_STAGED unmatched here it
     * reported 12 hazards in the select between accesses __syncthreads orders (on a 30-line kernel:
     * dev/racecheck_named_barrier.cu). The producers wait here only for warp 0's last copy. */
    if constexpr (FUSED && SHARE) ptx_bar_sync(WS_BAR_PRODUCERS, 128);
  } else {
    /* ---- consumer warps: q and weights, then warpgroup g: tiles g, g + 3, ... ---- */
    constexpr int CW = 4 * WS_CONSUMERS; /* consumer warps */
    if constexpr (F16)
      wt_stage_q_f16<HP>(p, grp, q_tile, wq_smem, w_smem, qsc_smem, qrows, nt, t0, warp - 4, CW, lane);
    else
      wt_stage_q<HP>(p, grp, q_tile, wq_smem, w_smem, qsc_smem, qrows, nt, t0, warp - 4, CW, lane);
    if constexpr (FILTER)
      if (tid - 128 < SC_MAX_T) { /* the threshold as {score, position} (wt_out_ctx.tau_s) */
        const int j = tid - 128;
        const unsigned long long tau = j < nt ? sel.tau[t0 + j] : 0ull;
        const uint32_t key = (uint32_t)(tau >> 32);
        uint2 th = make_uint2(0x7fc00000u, 0u); /* NaN: keeps every key (or no token) */
        if (tau != 0ull) th = key == 0u ? make_uint2(__float_as_uint(-INFINITY), 0xffffffffu)
                                        : make_uint2(__float_as_uint(score_of_key(key)), ~(uint32_t)tau);
        ((uint2 *)ftau)[j] = th;
      }
    ptx_fence_proxy_async_smem(); /* q's generic stores before wgmma reads them */
    ptx_bar_sync(WS_BAR_Q_STAGED, 32 * CW); /* every consumer's rows (and any_negative_qscale) staged */
    const bool qscale_nonneg = grp->any_negative_qscale == 0;
    if constexpr (!SHARE) ptx_setmaxnreg_inc<144>();
    const int g = (warp >> 2) - 1, wi = warp & 3;
    const uint32_t q_addr = ptx_smem_u32(q_tile);
    if constexpr (FILTER) {
      ko.tau_s = ptx_smem_u32(ftau);
      for (int ti = 0; ti < nt; ti++) ko.dense |= grp->len[ti] > 0 && isnan(__uint_as_float(((const uint2 *)ftau)[ti].x));
      ko.cand = sel.cand;
      ko.cap = sel.cap;
      ko.count = sel.count;
      ko.stages = fstages + 2 * g;
      ko.stage_s = ptx_smem_u32(ko.stages);
      ko.bar = WS_BAR_CONSUMER + g;
    }
    for (int i = g; i < ntiles; i += WS_CONSUMERS) {
      const int s = i % NS;
      ring_wait_full<NS>(ring, i);
      ptx_fence_proxy_async_smem();
      const int x0 = (tile_begin + i) * XSTEP;
      if constexpr (F16) {
        const unsigned char *st = stages + s * WT_WG_STAGE;
        unsigned char *kbuf = kbufs + g * WT_F16_KEYS;
        const int r0 = 16 * wi + (lane >> 2), r1 = r0 + 8;
        const float ks0 = ((const float *)(st + WT_WG_ROWS_BYTES))[r0];
        const float ks1 = ((const float *)(st + WT_WG_ROWS_BYTES))[r1];
        const int ok0 = ((const int *)(st + WT_WG_ROWS_BYTES + WT_WG_KEYS * 4))[r0];
        const int ok1 = ((const int *)(st + WT_WG_ROWS_BYTES + WT_WG_KEYS * 4))[r1];
        const bool fast = qscale_nonneg && __all_sync(0xffffffffu, ks0 >= 0.f && ks1 >= 0.f);
        ptx_bar_sync(WS_BAR_CONSUMER + g, 128); /* the warpgroup's wgmma on the previous tile's kbuf are done */
        wt_keys_to_f16(st, kbuf, tid & 127);
        ptx_fence_proxy_async_smem();      /* the f16 keys' generic stores before wgmma reads them */
        ptx_bar_sync(WS_BAR_CONSUMER + g, 128); /* every warp's rows converted */
        ptx_mbar_arrive(ring_empty(ring, s));     /* the stage is free: rows converted, scales read */
        if (wt_any_visible(grp, nt, x0))
          wt_tile_scores_f16<HP, NC, FUSED ? WT_OUT_KEYS : WT_OUT_SCORES>(
              p, grp, ptx_smem_u32(kbuf), ptx_smem_u32(q_tile), qrows, wq_smem, w_smem, qsc_smem, chunks, nt, t0, x0,
              ks0, ks1, ok0, ok1, fast, wi, lane, ko);
        continue;
      }
      if (wt_any_visible(grp, nt, x0))
        wt_tile_scores<HP, NC, OUT>(p, grp, stages + s * WT_WG_STAGE, q_addr, wq_smem, w_smem, qsc_smem, chunks, nt,
                                    t0, x0, qscale_nonneg, wi, lane, ko);
      ptx_mbar_arrive(ring_empty(ring, s)); /* this warpgroup is done with the stage */
    }
    if constexpr (FILTER) wt_filter_flush(ko, grp, t0, nt, tid & 127); /* the warpgroup's last tile */
    if constexpr (FUSED && !SHARE) {
      ptx_setmaxnreg_dec<128>();
      ptx_bar_arrive(WS_BAR_REGS, WS_THREADS);
    }
  }
  /* Every role is done with the ring: invalidate its barriers (PTX: a barrier's memory may hold other
   * data only after mbarrier.inval; the next CTA on this SM lays its own data there). */
  __syncthreads();
  if (tid < NS) {
    ptx_mbar_inval(ring_full(ring, tid));
    ptx_mbar_inval(ring_empty(ring, tid));
  }
  if constexpr (FUSED) {
    /* the ring's stages hold the select phase's state now (every copy into them has landed) */
    fz_select(p, f, grp, nt, t0, fkeys, fhist, TMA ? fpages : nullptr, ks, (int)range_lo, (fz_smem *)stages);
    return;
  }
  sc_fill_tail(p, grp, nt, t0, range_lo, range_hi);
}

/* WT_OUT_KEYS (f non-null): DSA_FUSED_DECLINED where the CTA's scores do not fit beside the ring or
 * the grid cannot be resident at once; else the request barriers zeroed and one cooperative launch.
 * WT_OUT_SAMPLE / WT_OUT_FILTER: sel the prefill indexer's state. */
template <int HP, int NC, bool F16, bool TMA, bool SHARE, int OUT>
static int ws_launch_t(const dsa_scores_params *p, const dsa_fused_topk *f, const dsa_prefill_select *sel, dim3 grid,
                       int T, int tpc, const CUtensorMap &kmap, cudaStream_t stream) {
  static dsa_smem_cache cache;
  const int qrows = (T * HP + NC - 1) / NC * NC;
  const size_t smem = ws_smem_bytes(qrows, F16, ws_ns(SHARE)) +
                      (OUT == WT_OUT_KEYS ? ws_fused_keys_bytes(T, tpc) : OUT == WT_OUT_FILTER ? ws_filter_bytes() : 0);
  dsa_fused_topk no_f;
  memset(&no_f, 0, sizeof no_f);
  dsa_prefill_select no_sel;
  memset(&no_sel, 0, sizeof no_sel);
  if constexpr (OUT != WT_OUT_KEYS) {
    return (int)dsa_launch_smem(scores_wgmma_kernel<HP, NC, F16, TMA, SHARE, OUT>, &cache, grid, WS_THREADS, smem,
                                stream, false, *p, T, tpc, kmap, no_f, sel ? *sel : no_sel);
  } else {
    if (smem > WS_MAX_SMEM || grid.x > DSA_FUSED_MAX_CTAS) return DSA_FUSED_DECLINED;
    cudaError_t err = cudaMemsetAsync(f->ctl, 0, fz_zeroed_bytes((int)grid.y, p->num_tokens), stream);
    if (err != cudaSuccess) return (int)err;
    bool resident = false;
    err = dsa_launch_smem_cooperative(scores_wgmma_kernel<HP, NC, F16, TMA, SHARE, WT_OUT_KEYS>, &cache, grid,
                                      WS_THREADS, smem, stream, p->num_sms > 0 ? p->num_sms : 132, &resident, *p, T,
                                      tpc, kmap, *f, no_sel);
    if (err == cudaSuccess && !resident) return DSA_FUSED_DECLINED; /* the memset alone is harmless */
    if (err == cudaErrorCooperativeLaunchTooLarge) { /* fewer SMs than the device reports (MPS, ...) */
      (void)cudaGetLastError();                      /* the launch's own error */
      return DSA_FUSED_DECLINED;
    }
    return (int)err;
  }
}

/* The index-K cache as a TMA tensor map for decode with 64-key pages: dims (128 B, 64 rows, pages),
 * strides (1, 128, page bytes), a [128 B x 64 rows x 1 page] box, 128-byte swizzle. False when the
 * driver has no encoder or refuses the map (the caller takes the cp.async path). */
static bool ws_key_map(const dsa_scores_params *p, CUtensorMap *map) {
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
  if (!encode || p->cache.page_size != WT_WG_KEYS || p->cache.num_pages <= 0 || p->cache.num_pages >= 0x7fffffffLL)
    return false;
  const cuuint64_t dims[3] = {DSA_INDEX_HEAD_DIM, WT_WG_KEYS, (cuuint64_t)p->cache.num_pages};
  const cuuint64_t strides[2] = {DSA_INDEX_HEAD_DIM, (cuuint64_t)WT_WG_KEYS * IDXK_SLOT_BYTES};
  const cuuint32_t box[3] = {DSA_INDEX_HEAD_DIM, WT_WG_KEYS, 1};
  const cuuint32_t estr[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, (void *)p->cache.data, dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* max_x <= DSA_MAX_ROW_LEN (checked in host/api_indexer.c): tile arithmetic in the kernel stays
 * inside int. kmap: TMA only. */
template <bool F16, bool TMA, int OUT = WT_OUT_SCORES>
static int ws_launch(const dsa_scores_params *p, const CUtensorMap &kmap, cudaStream_t stream,
                     const dsa_fused_topk *f = nullptr, const dsa_prefill_select *sel = nullptr) {
  constexpr bool FUSED = OUT == WT_OUT_KEYS;
  if (p->num_tokens <= 0) return FUSED ? DSA_FUSED_DECLINED : 0;
  const int HP = p->q.num_heads <= 32 ? 32 : 64;
  int T, groups, max_x;
  sc_token_groups(p, HP == 32 ? (F16 ? WS_F16_PREFILL_T32 : WS_PREFILL_T32) : (F16 ? WS_F16_PREFILL_T64 : WS_PREFILL_T64),
                  &T, &groups, &max_x);
  /* the f16 path's q rows take 256 B: more than 256 of them (a decode group of 5-8 tokens x 64 heads)
   * would not fit beside the ring and the key buffers (the choice table sends those to mma) */
  if (F16 && T * HP > 256) return FUSED ? DSA_FUSED_DECLINED : (int)cudaErrorInvalidValue;
  const int total_tiles = (int)(((int64_t)max_x + ws_tile_step(OUT) - 1) / ws_tile_step(OUT));
  if (total_tiles == 0 || groups == 0) return FUSED ? DSA_FUSED_DECLINED : 0;
  /* one long-lived CTA an SM (512 threads x 128 registers fill its register file; its setup and the
   * ring's first fill paid once); two with SHARE (WS_NS_SHARE) */
  const long long sms = p->num_sms > 0 ? p->num_sms : 132;
  const long long share_tpc = ((long long)total_tiles * groups + 2 * sms - 1) / (2 * sms); /* ~tiles a CTA */
  const bool share = TMA && !F16 && T * HP <= 32 && groups < sms && share_tpc <= 256;
  const long long want = sms * (share ? 2 : 1);
  int tpc;
  const dim3 grid = sc_grid(total_tiles, groups, want, 512, &tpc);
  const int n = T * HP;
  if constexpr (OUT == WT_OUT_SAMPLE || OUT == WT_OUT_FILTER) {
    /* prefill groups: 16 tokens x 32 heads or 8 x 64, four chunks of 128 columns */
    if (n != 512) return (int)cudaErrorInvalidValue;
    return HP == 32 ? ws_launch_t<32, 128, false, false, false, OUT>(p, f, sel, grid, T, tpc, kmap, stream)
                    : ws_launch_t<64, 128, false, false, false, OUT>(p, f, sel, grid, T, tpc, kmap, stream);
  } else {
    if (HP == 32)
      return share     ? ws_launch_t<32, 32, F16, TMA, TMA && !F16, OUT>(p, f, sel, grid, T, tpc, kmap, stream)
             : n <= 32 ? ws_launch_t<32, 32, F16, TMA, false, OUT>(p, f, sel, grid, T, tpc, kmap, stream)
             : n <= 64 ? ws_launch_t<32, 64, F16, TMA, false, OUT>(p, f, sel, grid, T, tpc, kmap, stream)
                       : ws_launch_t<32, 128, F16, TMA, false, OUT>(p, f, sel, grid, T, tpc, kmap, stream);
    return n <= 64 ? ws_launch_t<64, 64, F16, TMA, false, OUT>(p, f, sel, grid, T, tpc, kmap, stream)
                   : ws_launch_t<64, 128, F16, TMA, false, OUT>(p, f, sel, grid, T, tpc, kmap, stream);
  }
}

/* FP8 q: e4m3 wgmma; bf16 q: the f16 path. */
extern "C" int dsa_scores_wgmma_launch(const dsa_scores_params *p, cudaStream_t stream) {
  CUtensorMap none;
  memset(&none, 0, sizeof none);
  return p->q.q_dtype == DSA_DTYPE_FP8_E4M3 ? ws_launch<false, false>(p, none, stream)
                                            : ws_launch<true, false>(p, none, stream);
}

/* Decode with FP8 q, pages by TMA: DSA_SCORES_NO_TENSOR_MAP (nothing launched) where the cache
 * allows no tensor map (the choice table routes only 64-key pages here) or the driver makes none. */
extern "C" int dsa_scores_wgmma_tma_launch(const dsa_scores_params *p, cudaStream_t stream) {
  CUtensorMap kmap;
  memset(&kmap, 0, sizeof kmap);
  if (p->q.q_dtype != DSA_DTYPE_FP8_E4M3 || p->rows.mode != DSA_ROWS_DECODE || !ws_key_map(p, &kmap))
    return DSA_SCORES_NO_TENSOR_MAP;
  return ws_launch<false, true>(p, kmap, stream);
}

/* The fused indexer (indexer/fused_topk.cuh): decode scores kept in shared memory and their exact
 * top-k, one cooperative launch — on the scorer p->kernel names (wgmma_tma: FP8 q, 64-key pages by
 * TMA; wgmma: cp.async pages, FP8 or bf16 q). DSA_FUSED_DECLINED (nothing launched) for anything else
 * or a shape that does not fit (ws_launch_t). */
extern "C" int dsa_indexer_fused_launch(const dsa_scores_params *p, const dsa_fused_topk *f, cudaStream_t stream) {
  if (p->rows.mode != DSA_ROWS_DECODE || p->fill_tail || p->skip_len != f->topk) return DSA_FUSED_DECLINED;
  CUtensorMap kmap;
  memset(&kmap, 0, sizeof kmap);
  const bool fp8 = p->q.q_dtype == DSA_DTYPE_FP8_E4M3;
  if (p->kernel == DSA_SCORES_WGMMA_TMA && fp8 && ws_key_map(p, &kmap))
    return ws_launch<false, true, WT_OUT_KEYS>(p, kmap, stream, f);
  if (p->kernel == DSA_SCORES_WGMMA || p->kernel == DSA_SCORES_WGMMA_TMA)
    return fp8 ? ws_launch<false, false, WT_OUT_KEYS>(p, kmap, stream, f)
               : ws_launch<true, false, WT_OUT_KEYS>(p, kmap, stream, f);
  return DSA_FUSED_DECLINED;
}

/* The fused prefill indexer's scoring passes (indexer/prefill_select.cu): FP8 q, prefill rows, the
 * cp.async scorer. The sample pass writes s->sample (rows s->sample_len apart) of tokens longer than
 * p->skip_len; the filtered pass appends to s->cand past the counts s->count. */
template <int OUT>
static int ws_prefill_pass(const dsa_scores_params *p, const dsa_prefill_select *s, cudaStream_t stream) {
  if (p->q.q_dtype != DSA_DTYPE_FP8_E4M3 || p->rows.mode != DSA_ROWS_PREFILL || p->fill_tail)
    return (int)cudaErrorInvalidValue;
  CUtensorMap none;
  memset(&none, 0, sizeof none);
  dsa_scores_params q = *p;
  if (OUT == WT_OUT_SAMPLE) {
    q.scores = s->sample;
    q.scores_stride = s->sample_len;
  }
  return ws_launch<false, false, OUT>(&q, none, stream, nullptr, s);
}

extern "C" int dsa_scores_wgmma_sample_launch(const dsa_scores_params *p, const dsa_prefill_select *s,
                                              cudaStream_t stream) {
  return ws_prefill_pass<WT_OUT_SAMPLE>(p, s, stream);
}

extern "C" int dsa_scores_wgmma_filter_launch(const dsa_scores_params *p, const dsa_prefill_select *s,
                                              cudaStream_t stream) {
  return ws_prefill_pass<WT_OUT_FILTER>(p, s, stream);
}
