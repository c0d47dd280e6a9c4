/*
 * attention/heads_as_m.cu — sparse MLA attention on Hopper tensor cores with the heads as M (64-head
 * tiles), warp-specialised. The math: attention.cuh.
 *
 * One CTA = one token x 64 heads (heads past H are zero rows) x one split: the token's index entries
 * in chunks of 64 rows, all of them, or below a wave of CTAs a contiguous share (splits = 2 to 8:
 * the CTAs of a (token, group) form a cluster and merge their (m, l, O) through distributed shared
 * memory in rank order, hm_merge_splits; no workspace). Unsplit over bf16 KV (or FP8 rows converted
 * first) the grid is persistent
 * instead (hm_attention_units_kernel): min(units, SMs) CTAs, each taking units (token, group) in turn
 * with one ring throughout, so the producer fills the next unit's tiles during the last one's epilogue.
 * Token groups (TG = H of 8, 16, 32; dsa_attention_token_groups_launch): a CTA takes 64 / H neighbouring
 * tokens as one token of 64 heads (their rows of q, out and lse are consecutive) over the union of
 * their index lists that token_groups.cu built into the workspace, sorted by slot; the producers put
 * each union row's token mask in valid_s and the softmax keeps a row of M's score only where its
 * token's bit is set (hm_softmax); a group's last rows past the call's tokens are neither read nor
 * written (q_rows).
 *   qk_tile  S[64 heads, 64 rows] = Q[64, 576] . K^T      wgmma m64n64k16; A = Q (no swizzle), B = the
 *                                                        tile (128-byte swizzle), both K-major
 *   pv_tile  O[64, 512] += P[64, 64] . V[64, 512]         four m64n256k16 k-steps per warpgroup on
 *                                                        its 256 output dims; A = P, B = the same tile
 *                                                        read MN-major
 * Roles (384 threads), each a phase below: warpgroup 0 (hm_consume_qk) runs QK, the online softmax,
 * P to shared memory and PV for dims 0..255; warpgroup 1 (hm_consume_pv) runs PV for dims 256..511
 * with the P and alpha warpgroup 0 publishes (named barriers hm_barrier, bar.sync on both sides);
 * warpgroup 2 (hm_produce_bf16 / hm_produce_fp8) gathers rows into a two-tile full/empty mbarrier
 * ring (common/mbar_ring.cuh). Both consumers first stage Q (hm_load_q). Registers (setmaxnreg):
 * HM_REG_*. The seesaw (DSA_ATTN_SEESAW, hm_consume_seesaw; chosen for prefills over their own
 * context, host/choose.c) keeps the CTA and the plan
 * but pairs the chunks as FlashMLA's prefill does: warpgroup j runs QK + softmax of the pair's chunk
 * in tile j and PV of both on its 256 dims, the tiles filled and freed by halves of dims
 * (hm_produce_pairs, hm_half_ring); its producer only copies rows (bf16, or packed FP8 converted
 * into the workspace first by hm_convert_rows_kernel), which leaves both consumers 208 registers.
 * Measured (H100, 2026-12-06): prefill 2-6 % faster than heads_as_m, decode batches 1-3 % slower
 * (docs/PERF.md); dev/seesaw_protocol_model.py replays its synchronisation.
 * Packed FP8 KV read many times over (host/choose.c: prefill over its own context) is converted first, as
 * for the seesaw, and then copied by the bf16 producer (hm_produce_bf16<CONVERTED>) into the same FP8
 * consumers: the same bits as converting in the producer, at the copying producer's pace.
 * Gathers: the 8 lanes of a row cover one 128-byte line of it per instruction (whole L2 lines) and one
 * swizzled 128-byte tile row (conflict-free stores).
 *   bf16 KV   cp.async straight into the tile, up to two chunks in flight; a landed chunk is
 *             published before the producer blocks on the next tile (mbarrier.test_wait first).
 *   FP8 KV    the 512 e4m3 bytes of a row (four lines = its four scale groups) wait in registers one
 *             chunk ahead (the next chunk's rows prefetched into L2 meanwhile); converted to f16 as
 *             e4m3 x f16(scale_g 2^-K_r) with K_r the largest binary exponent of the row's scales
 *             (one rounding to 11 bits, values < 896); the rope (bf16) lands by cp.async as it
 *             is (scaling it in place, a shared-memory round trip at the chunk's end, cost the
 *             producer-bound kernel 4 %: H100, 2026-12-05).
 * Numerics, FP8: Q's latent dims are f16 and its rope dims bf16, both times 2^-e_h per head (e_h puts
 * the head's largest |q| in [2^14, 2^15): exact for bf16 input); QK sums the latent dims by f16
 * wgmmas in fp32, multiplies each column by its row's 2^K_r (exact), then adds the rope's bf16 wgmmas
 * to the same accumulator; the score is S 2^e_h (a power of two); P goes to PV in f16 times 2^K_r.
 * bf16 KV: everything bf16, rows exact. P is rounded to the 16-bit type, as in every tensor-core
 * attention.
 * Shared memory (hm_smem, 227 KiB: the limit): Q 72 KiB, two tiles of 72 KiB, P 8 KiB, per-chunk row
 * slots and factors, the barriers. Everything is fixed-order: same input, same bits.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>

#include "attention/attention.cuh"
#include "common/launch.cuh"
#include "common/mbar_ring.cuh"
#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "common/ptx/sync.cuh"
#include "common/ptx/wgmma.cuh"
#include "host/plan.h" /* dsa_select_layout */
#include "kernels.h"

#include <cub/block/block_scan.cuh>

#define HM_THREADS 384 /* 2 consumer warpgroups + 1 producer warpgroup */
#define HM_HEADS 64
#define HM_ROWS 64
#define HM_RG 9216 /* Q: one 8-head group of 576 dims = 72 core matrices of 128 B */
#define HM_SEG 8192 /* tile: one 64-dim segment of 64 rows, 128-byte swizzle (8 atoms of 1 KB) */
#define HM_TILE (9 * HM_SEG)
#define HM_OST 520 /* O staging row stride (floats): a warp's float2 stores take the minimum 2 wavefronts */

/* The shared-memory plan (the base aligned to 1 KB for the swizzle atoms). */
typedef struct {
  uint8_t q[8 * HM_RG];       /* Q: 8 groups of 8 heads x 72 core matrices (no swizzle) */
  uint8_t tile[2][HM_TILE];   /* the ring's two tiles of 64 rows (128-byte swizzle); after the chunks,
                                 the splits' unnormalised O, fp32 [64][HM_OST] */
  uint8_t p[8 * 1024];        /* P [8 head groups][8 row blocks][128 B] */
  int valid[2][HM_ROWS];      /* slot of each tile row, -1 = skipped */
  float alpha[HM_HEADS];      /* per-head rescale of this chunk; with l, after the chunks: the splits' */
  float l[HM_HEADS];          /*   (m, l) float2 [64]; l: the final sums */
  float colf[2][HM_ROWS];     /* FP8: the rows' power-of-two factor 2^K */
  float qexp[HM_HEADS];       /* FP8: the per-head q factor 2^e */
  uint64_t bar_full[2], bar_empty[2];
  uint64_t bar_pair_full[4], bar_pair_empty[4]; /* the seesaw's tile halves (hm_half_ring) */
} hm_smem;
#define HM_Q_OFF ((int)offsetof(hm_smem, q))
#define HM_TILE_OFF ((int)offsetof(hm_smem, tile))
#define HM_P_OFF ((int)offsetof(hm_smem, p))
#define HM_VALID_OFF ((int)offsetof(hm_smem, valid))
#define HM_ALPHA_OFF ((int)offsetof(hm_smem, alpha))
#define HM_L_OFF ((int)offsetof(hm_smem, l))
#define HM_COLF_OFF ((int)offsetof(hm_smem, colf))
#define HM_QEXP_OFF ((int)offsetof(hm_smem, qexp))
#define HM_BAR_OFF ((int)offsetof(hm_smem, bar_full))
#define HM_PBAR_OFF ((int)offsetof(hm_smem, bar_pair_full))
#define HM_ML_OFF HM_ALPHA_OFF /* splits, after the chunks: float2 [64] (m, l) over alpha and l */
#define HM_OST_OFF HM_TILE_OFF /* splits, after the chunks: the O staging over the tiles */
static_assert(HM_TILE_OFF % 1024 == 0, "swizzle atoms");
static_assert(offsetof(hm_smem, bar_empty) == HM_BAR_OFF + 16, "empty barriers follow the full ones");
static_assert(offsetof(hm_smem, bar_pair_empty) == HM_PBAR_OFF + 32, "the halves' empty barriers follow their full ones");
static_assert(64 * HM_OST * 4 <= 2 * HM_TILE, "O staging fits in the tiles");
#define HM_SMEM (sizeof(hm_smem) + 1024) /* + slack to align the base to 1 KB (swizzle atoms) */
static_assert(HM_SMEM <= 227 * 1024, "shared memory");

/* Named barriers (bar.sync ids; 0 is __syncthreads), all over the two consumer warpgroups. */
enum hm_barrier {
  HM_BAR_P_READY = 1,  /* warpgroup 0 has published P(c) and alpha(c) */
  HM_BAR_P_FREE = 2,   /* warpgroup 1 is done with P(c) and alpha(c) */
  HM_BAR_Q_LOADED = 3, /* Q staged (and the FP8 head factors) */
  HM_BAR_EPILOGUE = 4, /* warpgroup 1 has read its last alpha: (m, l) and O may be written */
  /* the seesaw consumers (hm_consume_seesaw): one direction each, bar.arrive by the writer, bar.sync
   * by the reader */
  HM_BAR_M_0TO1 = 5,   /* warpgroup 0 has published m and alpha of its chunk */
  HM_BAR_M_1TO0 = 6,
  HM_BAR_P_0TO1 = 7,   /* warpgroup 0 has published P of its chunk */
  HM_BAR_P_1TO0 = 8,
  HM_BAR_MERGE = 9     /* splits: the merge weights are in shared memory (hm_merge_splits) */
};

/* setmaxnreg per warpgroup (QK + softmax, PV only, producer): 128 x (sum) <= 384 x 168 = 64512 */
#define HM_REG_QK(FP8) 208
#define HM_REG_PV(FP8) ((FP8) ? 168 : 216)
#define HM_REG_PRODUCER(FP8) ((FP8) ? 128 : 80)
static_assert(HM_REG_QK(true) + HM_REG_PV(true) + HM_REG_PRODUCER(true) <= 504, "registers");
static_assert(HM_REG_QK(false) + HM_REG_PV(false) + HM_REG_PRODUCER(false) <= 504, "registers");
/* The seesaw: both consumer warpgroups hold an O half, S and the softmax, 208 each, the copying
 * producer 80. The converting FP8 producer would not fit beside them: at 2 x 208 it gets 88 and its
 * chunk of rows in registers spills; at 2 x 184 + 136, 2 x 192 + 120, 2 x 200 + 104 the consumers
 * spill (468 / 184 / 176 bytes of loads) and ptxas serialises the wgmmas (C7512) — hence the
 * conversion beforehand. docs/PERF.md. */
#define HM_REG_SEESAW 208
static_assert(2 * HM_REG_SEESAW + HM_REG_PRODUCER(false) <= 504, "registers");
/* bf16 KV: warpgroup 0 issues its PV from P in registers (wgmma RS) and stores P for warpgroup 1 while it
 * runs, the P store and both hand-off barriers off its chain: H100 2026-12-05, 4096 x 128 heads 4,725 ->
 * 4,639 us, prefill 64 x 128 77.1 -> 75.5, the GLM chunk 2,661 -> 2,636, decode 128 x 128 157.6 -> 156.7.
 * FP8 KV keeps P from shared memory after the store: there warpgroup 1's PV, and so the tile's release
 * to the producer the chunks wait on, would start later (128 x 128 201.5 -> 205.8, 256 x 64 208.5 ->
 * 212.5). docs/bench/attn-wg0-pv-rs-h100-2026-12-05/. */
#define HM_WG0_PV_RS(FP8) (!(FP8))

typedef struct {
  mla_io io;              /* num_slots capped at 2^31 (mla_slots_cap) */
  float scale_log2;       /* softmax_scale * log2(e) */
  int topk, num_heads;
  int num_groups;         /* ceil(H / 64): head groups per token */
  int splits;             /* CTAs per (token, group), one cluster, each a contiguous share of the chunks */
  int64_t token_offset;   /* first token of this launch (grids past 2^31 - 1 CTAs are cut) */
  int64_t num_units;      /* (token, group) units of this launch */
  union { /* a union of one: declared plainly, NVVM left a dead `mask_row + 4` in the FP8 token-group kernels
             and ptxas spilled 84 bytes of loads there, not 60 (their PTX is now what it was before) */
    const uint8_t *tg_masks; /* token groups: [launch's groups][io.indices_stride] the union rows' token
                                masks (bit j: the group's token j sees the row); else NULL */
  };
  const int *gate; /* the selected rows' gated launches (hm_select_rows): the kernel runs only where
                      *gate != 0 (the other of the two returns at once); else NULL */
  /* packed FP8 KV converted first (hm_convert_rows_kernel): io.kv holds the converted rows, their factors
   * 2^K after them (hm_converted_factors) */
} hm_params;

/* Byte offset of 16-byte chunk `chunk` (0..71, 8 dims each) of tile row r: 128-byte swizzle. */
__device__ __forceinline__ uint32_t hm_tile_off(int r, int chunk) {
  return (uint32_t)((chunk >> 3) * HM_SEG + (r >> 3) * 1024 + (r & 7) * 128 + (((chunk & 7) ^ (r & 7)) << 4));
}

/* 16 e4m3 values x mult (f16x2, both halves the same) -> 16 f16 in o: e4m3 -> f16 is exact, the
 * product rounded once (the FP8 producer and hm_convert_rows_kernel: the same bits). */
__device__ __forceinline__ void hm_e4m3x16_to_f16(uint4 v, uint32_t mult, uint32_t (&o)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    ptx_e4m3x4_to_f16x2x2(w[i], o[2 * i], o[2 * i + 1]);
    o[2 * i] = ptx_mul_f16x2(o[2 * i], mult);
    o[2 * i + 1] = ptx_mul_f16x2(o[2 * i + 1], mult);
  }
}

/* ... stored as two 16-byte chunks of a swizzled tile row at addr + off_first and addr + off_second
 * (the caller orders the two chunks so that the eight lanes of a row hit eight different 16-byte
 * bank groups in each store). */
__device__ __forceinline__ void hm_store_fp8(uint32_t addr, uint32_t off_first, uint32_t off_second, bool odd_first,
                                             uint4 v, uint32_t mult) {
  /* the 8 values stored first: the odd chunk's (v.zw) where odd_first, else the even's (v.xy); swapped
   * before the conversion (4 selects) rather than after it (8) */
  const uint4 u = odd_first ? make_uint4(v.z, v.w, v.x, v.y) : v;
  uint32_t o[8];
  hm_e4m3x16_to_f16(u, mult, o);
  ptx_st_shared_v4(addr + off_first, o[0], o[1], o[2], o[3]);
  ptx_st_shared_v4(addr + off_second, o[4], o[5], o[6], o[7]);
}

/* What both consumer warpgroups share. */
typedef struct {
  uint32_t q_u32, tile_u32, p_u32;                       /* shared-window addresses */
  mbar_ring ring;                                        /* the two tiles: full = rows landed, empty = both PVs done */
  int *valid_s;                                          /* [2][64] slot of each tile row, -1 = skipped */
  float *alpha_s, *l_s;                                  /* [64] per-head rescale of this chunk; final sums */
  const float *colf_s, *qexp_s;                          /* FP8: [2][64] row factors, [64] head factors */
  int n, head0, splits;                                  /* chunks; first head of this CTA; CTAs a cluster */
  int c0;                                                /* the ring's uses before this unit's chunks (the
                                                            CTA's earlier units): chunk c is use c0 + c */
  bool last;                                             /* the CTA's last unit */
  int64_t t;                                             /* token (token groups: the group) */
  int q_rows;                                            /* token groups: the group's rows of q, out, lse */
} hm_ctx;

/* The 16-bit type of the tile, Q and P: bf16 for bf16 KV (exact rows); for FP8 KV the latent dims
 * and P are f16 (e4m3 x scale rounded once to 11 significant bits, 4x finer than bf16; ranges kept
 * by power-of-two factors) and the rope dims stay bf16. */
template <bool F16>
__device__ __forceinline__ uint32_t hm_pack(float lo, float hi) {
  return F16 ? ptx_f32x2_to_f16x2(lo, hi) : ptx_f32x2_to_bf16x2(lo, hi);
}
/* f16 is a constant once the caller's k loop is unrolled */
__device__ __forceinline__ void hm_wgmma_n64(bool f16, float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  if (f16) ptx_wgmma_m64n64k16_f16<0, 0>(d, da, db, scale_d);
  else ptx_wgmma_m64n64k16_bf16<0, 0>(d, da, db, scale_d);
}
/* 2^e as a float, e clamped to the normal range */
__device__ __forceinline__ float hm_pow2(int e) { return __int_as_float((min(max(e, -126), 127) + 127) << 23); }
/* floor(log2(x)) of a positive normal float (0 and denormals: -127) */
__device__ __forceinline__ int hm_ilogb(float x) { return ((__float_as_int(x) >> 23) & 0xFF) - 127; }
/* K_r of a packed FP8 row: the largest binary exponent of its four scales, within +-100; sc is scale
 * (lane % 4) of the lane's row, the row's four scales in lanes 4-aligned (the FP8 producer and
 * hm_convert_rows_kernel). */
__device__ __forceinline__ int hm_row_exponent(float sc) {
  int K = hm_ilogb(sc);
  K = max(K, __shfl_xor_sync(0xffffffffu, K, 1));
  K = max(K, __shfl_xor_sync(0xffffffffu, K, 2));
  return min(max(K, -100), 100);
}

/* pv_tile: O[64 heads, 256 dims of this warpgroup] += P[64, 64 rows] . V[64 rows, those dims]; the
 * tile is read MN-major through the same 128-byte swizzle it was written with. */
template <bool F16>
__device__ __forceinline__ void hm_pv_issue(float (&o)[128], uint32_t p_u32, uint32_t kv_u32, int dbase) {
  const uint64_t dp = ptx_wgmma_desc(p_u32, 128, 1024), dv = ptx_wgmma_desc_sw128(kv_u32 + (dbase / 64) * HM_SEG, HM_SEG, 1024);
  ptx_reg_fence(o);
  ptx_wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    if (F16) ptx_wgmma_m64n256k16_f16<0, 1>(o, dp + 16 * ks, dv + 128 * ks, 1);
    else ptx_wgmma_m64n256k16_bf16<0, 1>(o, dp + 16 * ks, dv + 128 * ks, 1);
  }
  ptx_wgmma_commit();
}

__device__ __forceinline__ void hm_rescale(float (&o)[128], float a0, float a1) {
  if (a0 != 1.f || a1 != 1.f) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j + 0] *= a0;
      o[4 * j + 1] *= a0;
      o[4 * j + 2] *= a1;
      o[4 * j + 3] *= a1;
    }
  }
}

/* Normalised O half -> out (bf16), heads past H skipped (token groups, TG: rows past the group's);
 * L0, L1: the sums of rows h0, h0 + 8. */
template <int TG>
__device__ __forceinline__ void hm_store_out(const hm_params &p, const hm_ctx &x, const float (&o)[128], int h0, int qd,
                                             int dbase, float L0, float L1) {
  const float i0 = L0 > 0.f ? 1.f / L0 : 0.f, i1 = L1 > 0.f ? 1.f / L1 : 0.f;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int h = x.head0 + h0 + 8 * hf;
    if (h >= (TG ? x.q_rows : p.num_heads)) continue;
    const float inv = hf ? i1 : i0;
    /* token groups: a token without entries multiplied P = 0 by its neighbours' rows, which may hold
     * inf / NaN (0 x inf): its out is 0 as the contract says, by a select */
    const bool none = TG && !((hf ? L1 : L0) > 0.f);
    __nv_bfloat16 *dst = p.io.out + (x.t * p.num_heads + h) * MLA_V_DIM + dbase + 2 * qd;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      *(uint32_t *)(dst + 8 * j) =
          none ? 0u : ptx_f32x2_to_bf16x2(o[4 * j + 2 * hf] * inv, o[4 * j + 2 * hf + 1] * inv);
  }
}

/* Splits: this warpgroup's unnormalised O half to the staging area (the tiles, now free). */
__device__ __forceinline__ void hm_stage_o(const hm_ctx &x, const float (&o)[128], int h0, int qd, int dbase) {
  float *ost = (float *)__cvta_shared_to_generic(x.tile_u32); /* HM_OST_OFF */
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    *(float2 *)(ost + h0 * HM_OST + dbase + 8 * j + 2 * qd) = make_float2(o[4 * j], o[4 * j + 1]);
    *(float2 *)(ost + (h0 + 8) * HM_OST + dbase + 8 * j + 2 * qd) = make_float2(o[4 * j + 2], o[4 * j + 3]);
  }
}

/* QK k-steps [k0, k1) of tile kv_u32 into s (the first accumulates from zero where first); the caller
 * fences, commits and waits. Q no-swizzle K-major, tile 128B-swizzle K-major; the descriptors advance
 * by adding (byte offset >> 4) to the start-address field. */
template <bool F16>
__device__ __forceinline__ void hm_qk_steps(float (&s)[32], const hm_ctx &x, uint32_t kv_u32, int k0, int k1,
                                            bool first) {
  const uint64_t dq = ptx_wgmma_desc(x.q_u32, 128, HM_RG), dk = ptx_wgmma_desc_sw128(kv_u32, 16, 1024);
#pragma unroll
  for (int k = k0; k < k1; ++k)
    hm_wgmma_n64(F16, s, dq + 16 * k, dk + (((k >> 2) * HM_SEG + (k & 3) * 32) >> 4), k > k0 || !first);
}

/* The end of a QK whose k-steps (FP8: the latent ones) are issued: commit and wait; FP8: the latent sums
 * times the rows' 2^K_r of tile b (exact), then the rope's k-steps on top, unscaled. */
template <bool FP8>
__device__ __forceinline__ void hm_qk_finish(float (&s)[32], const hm_ctx &x, uint32_t kv_u32, int b, int qd) {
  ptx_wgmma_commit();
  ptx_wgmma_wait<0>();
  ptx_reg_fence(s);
  if (FP8) {
    const float *colf = x.colf_s + b * HM_ROWS;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[4 * j + e] *= colf[8 * j + 2 * qd + (e & 1)];
    ptx_wgmma_fence();
    hm_qk_steps<false>(s, x, kv_u32, 32, 36, false);
    ptx_wgmma_commit();
    ptx_wgmma_wait<0>();
    ptx_reg_fence(s);
  }
}

/* qk_tile: S[64 heads, 64 rows] of the tile at kv_u32 (tile b's row factors). */
template <bool FP8>
__device__ __forceinline__ void hm_qk_tile(float (&s)[32], float (&o)[128], const hm_ctx &x, uint32_t kv_u32, int b,
                                           int qd) {
  ptx_wgmma_fence();
  hm_qk_steps<FP8>(s, x, kv_u32, 0, FP8 ? 32 : 36, true);
  hm_qk_finish<FP8>(s, x, kv_u32, b, qd);
  ptx_reg_fence(o);
}

/* online_softmax of tile b's S (a head row lives in one lane quad): the running max (m0, m1) moves
 * to the chunk's, s becomes P, (a0, a1) = exp of old max - new, (ps0, ps1) the quad-partial sums of
 * P. FP8: S = (Q 2^-e_h).(K 2^-K_r) 2^K_r over the latent dims (hm_qk_tile) plus (Q 2^-e_h).K over the
 * rope's, the score is S 2^e_h (powers of two: exact). Token groups of TG heads a token: row h (h0,
 * h0 + 8) belongs to token h / TG, and a column counts for it where its mask has that token's bit. */
template <bool FP8, int TG>
__device__ __forceinline__ void hm_softmax(float (&s)[32], const hm_params &p, const hm_ctx &x, int b, int qd, float qs0,
                                           float qs1, float &m0, float &m1, float &a0, float &a1, float &ps0,
                                           float &ps1, int h0) {
  const int *valid = x.valid_s + b * HM_ROWS;
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = 8 * j + 2 * qd + (e & 1);
      const bool ok =
          TG ? ((valid[col] >> (((e & 2) ? h0 + 8 : h0) / (TG > 0 ? TG : 1))) & 1) != 0 : valid[col] >= 0;
      const float f = FP8 ? ((e & 2) ? qs1 : qs0) : p.scale_log2;
      s[4 * j + e] = ok ? s[4 * j + e] * f : -INFINITY;
      if (e < 2) mx0 = fmaxf(mx0, s[4 * j + e]);
      else mx1 = fmaxf(mx1, s[4 * j + e]);
    }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
  const float b0 = n0 == -INFINITY ? 0.f : n0, b1 = n1 == -INFINITY ? 0.f : n1;
  a0 = ptx_ex2(m0 - b0);
  a1 = ptx_ex2(m1 - b1);
  m0 = n0;
  m1 = n1;
  ps0 = 0.f;
  ps1 = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[4 * j + e] = ptx_ex2(s[4 * j + e] - ((e & 2) ? b1 : b0));
      if (e < 2) ps0 += s[4 * j + e];
      else ps1 += s[4 * j + e];
    }
}

/* FP8: PV reads rows scaled by 2^-K_r, so P's column r takes 2^K_r (clamped to the f16 range). */
template <bool FP8>
__device__ __forceinline__ void hm_p_row_factors(float (&s)[32], const hm_ctx &x, int b, int qd) {
  if (FP8) {
    const float *colf = x.colf_s + b * HM_ROWS;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[4 * j + e] = fminf(s[4 * j + e] * colf[8 * j + 2 * qd + (e & 1)], 65504.f);
  }
}

/* P packed in the 16-bit type, k-step by k-step: pa[jp] = rows (h0, h0 + 8) x columns 16 jp + 2 qd
 * + {0, 1} and + 8 — four 8x8 matrices for stmatrix, and wgmma's A fragment. */
template <bool FP8>
__device__ __forceinline__ void hm_pack_p(const float (&s)[32], uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int jp = 0; jp < 4; ++jp)
#pragma unroll
    for (int r = 0; r < 4; ++r) pa[jp][r] = hm_pack<FP8>(s[8 * jp + 2 * r], s[8 * jp + 2 * r + 1]);
}

/* P to shared memory, [8 head groups][8 row blocks][128 B], by stmatrix. */
__device__ __forceinline__ void hm_store_p_packed(const uint32_t (&pa)[4][4], uint32_t p_u32, int w, int lane) {
  const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
  for (int jp = 0; jp < 4; ++jp) {
    /* matrices: (heads 16w.., rows 16jp..), (heads 16w+8.., 16jp..), (16w.., 16jp+8..), (16w+8.., 16jp+8..) */
    const uint32_t addr = p_u32 + (2 * w + (mi & 1)) * 1024 + (2 * jp + (mi >> 1)) * 128 + ri * 16;
    ptx_stmatrix_x4(addr, pa[jp][0], pa[jp][1], pa[jp][2], pa[jp][3]);
  }
}

template <bool FP8>
__device__ __forceinline__ void hm_store_p(const float (&s)[32], uint32_t p_u32, int w, int lane) {
  uint32_t pa[4][4];
  hm_pack_p<FP8>(s, pa);
  hm_store_p_packed(pa, p_u32, w, lane);
}

/* pv_tile with P from registers: the S accumulators' layout is wgmma's A fragment, four k-steps of
 * 16 rows (pa[ks]: rows h0, h0 + 8 x columns 16 ks + 2 qd + {0, 1, 8, 9}, packed). */
template <bool F16>
__device__ __forceinline__ void hm_pv_issue_rs(float (&o)[128], const uint32_t (&pa)[4][4], uint32_t kv_u32, int dbase) {
  const uint64_t dv = ptx_wgmma_desc_sw128(kv_u32 + (dbase / 64) * HM_SEG, HM_SEG, 1024);
  ptx_reg_fence(o);
  ptx_wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    if (F16) ptx_wgmma_m64n256k16_rs_f16<1>(o, pa[ks], dv + 128 * ks, 1);
    else ptx_wgmma_m64n256k16_rs_bf16<1>(o, pa[ks], dv + 128 * ks, 1);
  }
  ptx_wgmma_commit();
}
/* Keeps P's registers allocated until the wgmma that reads them has completed (an RS wgmma reads its A
 * registers asynchronously; the compiler sees them consumed at the issue). */
__device__ __forceinline__ void hm_keep_p(uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(pa[i][j])::"memory");
}
/* Warpgroup 0: qk_tile, online_softmax, P to shared memory and PV for dims 0..255 (bf16 KV: PV from P in
 * registers first, P stored for warpgroup 1 while it runs; HM_WG0_PV_RS); the lse and the final sums for
 * both warpgroups. Thread (w, lane) holds head rows h0 = 16w + lane/4 and h0 + 8. */
template <bool FP8, int TG>
__device__ __forceinline__ void hm_consume_qk(const hm_params &p, const hm_ctx &x, int w, int lane) {
  const int g = lane >> 2, qd = lane & 3, h0 = 16 * w + g;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  const float qs0 = FP8 ? p.scale_log2 * x.qexp_s[h0] : 0.f, qs1 = FP8 ? p.scale_log2 * x.qexp_s[h0 + 8] : 0.f;
  for (int c = 0; c < x.n; ++c) {
    const int b = (x.c0 + c) & 1;
    ring_wait_full<2>(x.ring, x.c0 + c);
    const uint32_t kv_u32 = x.tile_u32 + b * HM_TILE;
    float s[32];
    hm_qk_tile<FP8>(s, o, x, kv_u32, b, qd);
    float a0, a1, ps0, ps1;
    hm_softmax<FP8, TG>(s, p, x, b, qd, qs0, qs1, m0, m1, a0, a1, ps0, ps1, h0);
    l0 = l0 * a0 + ps0; /* quad-partial sums, reduced at the end */
    l1 = l1 * a1 + ps1;
    hm_p_row_factors<FP8>(s, x, b, qd);
    if (HM_WG0_PV_RS(FP8)) {
      /* ---- this warpgroup's PV from registers at once; P and alpha to shared memory for warpgroup 1's
       * while it runs ---- */
      uint32_t pa[4][4];
      hm_pack_p<FP8>(s, pa);
      hm_rescale(o, a0, a1);
      hm_pv_issue_rs<FP8>(o, pa, kv_u32, 0);
      if (c >= 1) ptx_bar_sync(HM_BAR_P_FREE, 256); /* warpgroup 1 is done with P(c-1) and alpha(c-1) */
      hm_store_p_packed(pa, x.p_u32, w, lane);
      if (qd == 0) {
        x.alpha_s[h0] = a0;
        x.alpha_s[h0 + 8] = a1;
      }
      ptx_fence_proxy_async_smem();
      ptx_bar_sync(HM_BAR_P_READY, 256); /* P(c), alpha(c) ready for warpgroup 1's PV (already waiting) */
      ptx_wgmma_wait<0>();
      hm_keep_p(pa);
    } else {
      /* ---- P and alpha to shared memory, for both warpgroups' PV ---- */
      if (c >= 1) ptx_bar_sync(HM_BAR_P_FREE, 256); /* warpgroup 1 is done with P(c-1) and alpha(c-1) */
      hm_store_p<FP8>(s, x.p_u32, w, lane);
      if (qd == 0) {
        x.alpha_s[h0] = a0;
        x.alpha_s[h0 + 8] = a1;
      }
      ptx_fence_proxy_async_smem();
      ptx_bar_sync(HM_BAR_P_READY, 256); /* P(c), alpha(c) ready for both PVs (warpgroup 1 is already waiting) */
      hm_rescale(o, a0, a1);
      hm_pv_issue<FP8>(o, x.p_u32, kv_u32, 0);
      ptx_wgmma_wait<0>();
    }
    ptx_reg_fence(o);
    ptx_mbar_arrive(ring_empty(x.ring, b));
  }
  if (x.last) ptx_griddep_launch_dependents();
  /* ---- epilogue: quad sums -> l for both warpgroups, lse ---- */
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (x.splits > 1) { /* (m, l) and O to shared memory for the cluster merge (hm_merge_splits) */
    ptx_bar_sync(HM_BAR_EPILOGUE, 256); /* warpgroup 1 has read its last alpha: (m, l) may overwrite it */
    if (qd == 0) {
      float2 *ml = (float2 *)x.alpha_s; /* HM_ML_OFF */
      ml[h0] = make_float2(m0, l0);
      ml[h0 + 8] = make_float2(m1, l1);
    }
    hm_stage_o(x, o, h0, qd, 0);
    return;
  }
  if (qd == 0) {
    x.l_s[h0] = l0;
    x.l_s[h0 + 8] = l1;
    const int H = p.num_heads, lim = TG ? x.q_rows : H;
    if (p.io.lse) {
      if (x.head0 + h0 < lim) p.io.lse[x.t * H + x.head0 + h0] = mla_lse(m0, l0);
      if (x.head0 + h0 + 8 < lim)
        p.io.lse[x.t * H + x.head0 + h0 + 8] = mla_lse(m1, l1);
    }
  }
  ptx_bar_sync(HM_BAR_EPILOGUE, 256);
  hm_store_out<TG>(p, x, o, h0, qd, 0, x.l_s[h0], x.l_s[h0 + 8]);
}

/* Warpgroup 1: PV for dims 256..511 with the P and alpha warpgroup 0 publishes. */
template <bool FP8, int TG>
__device__ __forceinline__ void hm_consume_pv(const hm_params &p, const hm_ctx &x, int w, int lane) {
  const int g = lane >> 2, qd = lane & 3, h0 = 16 * w + g;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  for (int c = 0; c < x.n; ++c) {
    const int b = (x.c0 + c) & 1;
    ring_wait_full<2>(x.ring, x.c0 + c);
    ptx_bar_sync(HM_BAR_P_READY, 256);
    hm_rescale(o, x.alpha_s[h0], x.alpha_s[h0 + 8]);
    hm_pv_issue<FP8>(o, x.p_u32, x.tile_u32 + b * HM_TILE, 256);
    ptx_wgmma_wait<0>();
    ptx_reg_fence(o);
    ptx_mbar_arrive(ring_empty(x.ring, b));
    /* done with P(c) and alpha(c): warpgroup 0 may write the next ones (both sides bar.sync, so
     * the hand-off is one a race checker can follow) */
    if (c + 1 < x.n) ptx_bar_sync(HM_BAR_P_FREE, 256);
  }
  ptx_bar_sync(HM_BAR_EPILOGUE, 256);
  if (x.splits > 1) hm_stage_o(x, o, h0, qd, 256);
  else hm_store_out<TG>(p, x, o, h0, qd, 256, x.l_s[h0], x.l_s[h0 + 8]);
}

/* The seesaw's tile halves: a tile's dims 0-255 (segments 0-3, "L": what warpgroup 0's PVs read) and
 * 256-575 (segments 4-8, "R": warpgroup 1's, and the rope), each with a full and an empty barrier in a
 * ring of its own (hm_pair_ring_of: bar_pair_full / bar_pair_empty), stage 2 t + h; hm_half_ring is
 * one half's as a one-stage ring (its use i = the pair). */
#define HM_HALF_L 0
#define HM_HALF_R 1
__device__ __forceinline__ mbar_ring hm_pair_ring_of(uint32_t s_u32) {
  mbar_ring r;
  r.full = s_u32 + HM_PBAR_OFF;
  r.empty = r.full + 32;
  return r;
}
__device__ __forceinline__ mbar_ring hm_half_ring(const mbar_ring &pr, int t, int h) {
  mbar_ring r;
  r.full = ring_full(pr, 2 * t + h);
  r.empty = ring_empty(pr, 2 * t + h);
  return r;
}

/* A consumer's wait for a half to hold its rows: the barrier completes when the producer's copies have
 * landed (hm_produce_pairs), which no producer thread fences for the async proxy, so the consumer does
 * before its wgmma read them. */
__device__ __forceinline__ void hm_half_wait_full(const mbar_ring &hr, int use) {
  ring_wait_full<1>(hr, use);
  ptx_fence_proxy_async_smem();
}

/* QK of the chunk in tile t by its warpgroup, halves in the order they land (warpgroup 0: L then R;
 * warpgroup 1: R then L, as the producer fills them), the rope's k-steps last (FP8: after the latent
 * sums are scaled by the rows' 2^K). */
template <bool FP8>
__device__ __forceinline__ void hm_pair_qk(float (&s)[32], float (&o)[128], const hm_ctx &x, const mbar_ring &pr,
                                           int t, int use, int qd) {
  const uint32_t kv = x.tile_u32 + t * HM_TILE;
  const int kr_end = FP8 ? 32 : 36; /* the R half's k-steps before the rope's (FP8) */
  ptx_wgmma_fence();
  if (t == 0) {
    hm_half_wait_full(hm_half_ring(pr, 0, HM_HALF_L), use);
    hm_qk_steps<FP8>(s, x, kv, 0, 16, true);
    hm_half_wait_full(hm_half_ring(pr, 0, HM_HALF_R), use);
    hm_qk_steps<FP8>(s, x, kv, 16, kr_end, false);
  } else {
    hm_half_wait_full(hm_half_ring(pr, 1, HM_HALF_R), use);
    hm_qk_steps<FP8>(s, x, kv, 16, kr_end, true);
    hm_half_wait_full(hm_half_ring(pr, 1, HM_HALF_L), use);
    hm_qk_steps<FP8>(s, x, kv, 0, 16, false);
  }
  hm_qk_finish<FP8>(s, x, kv, t, qd);
  ptx_reg_fence(o);
}

/* A warpgroup's running max of rows h0, h0 + 8 to the one m buffer, for the other (bar.arrive on bar):
 * the quad has read the buffer's last value first, so its lane 0 may overwrite it. */
__device__ __forceinline__ void hm_publish_max(float *m_s, int h0, int qd, float m0, float m1, int bar) {
  __syncwarp();
  if (qd == 0) {
    m_s[h0] = m0;
    m_s[h0 + 8] = m1;
  }
  ptx_bar_arrive(bar, 256);
}

/* 2^(m - M) of a running max m against the new M (-inf: 0, and M = -inf as 0) */
__device__ __forceinline__ float hm_rescale_factor(float m, float M) { return ptx_ex2(m - (M == -INFINITY ? 0.f : M)); }

/* Seesaw consumers (DSA_ATTN_SEESAW; FlashMLA's prefill schedule): the chunks go in pairs, chunk 2i in
 * tile 0 and 2i + 1 in tile 1; warpgroup j owns O dims [256j, 256j + 256) and runs QK and the softmax of
 * the pair's chunk in tile j, both at once. Per pair:
 *   wg 0: QK(tile 0); softmax from its running max -> m0; m0 to shared memory (bar M 0->1); PV(P0,
 *         tile 0's L) from registers; L half of tile 0 free; the pair's max M (bar M 1->0); P0, O and the
 *         sums rescaled by 2^(m0 - M); P0 to tile 0's rope segment (free after QK) (bar P 0->1); PV(P1
 *         from shared memory, tile 1's L) (bar P 1->0); the next pair's QK on tile 0's L half issued
 *         behind it (the tensor pipe not left idle between them); tile 1's L free once PV(P1) is done;
 *         the QK's R half.
 *   wg 1: QK(tile 1); m0 (bar M 0->1); softmax from max(m0, its chunk) = M, O and the sums rescaled from
 *         the last pair's M; M to shared memory (bar M 1->0); PV(P1, tile 1's R) from registers; P1 to
 *         the P area (bar P 1->0); PV(P0, tile 0's R) (bar P 0->1); tile 1's R, then tile 0's R free.
 * Each half's release comes after every read of it (a chunk's QK precedes the P its PVs wait for), so
 * the producer refills a half while the other is in use. One buffer for m serves both directions (each
 * warpgroup reads the other's value before writing its own; the barriers order the rest); P0 and P1
 * each have their own. Each warpgroup keeps the sums of its own chunks' P; the total is the two. m
 * lives in l_s during the chunks. An odd count ends with a pair whose tile 1 holds no rows (all skipped:
 * P1 = 0), so every pair runs the same code (wgmma under a branch is serialised, ptxas C7520; the next
 * pair's QK, under one, is not: no wgmma is in flight where its paths join). */
template <bool FP8, int j, int TG = 0>
__device__ __forceinline__ void hm_consume_seesaw(const hm_params &p, const hm_ctx &x, int w, int lane) {
  const int g = lane >> 2, qd = lane & 3, h0 = 16 * w + g, dbase = 256 * j;
  const mbar_ring pr = hm_pair_ring_of(x.q_u32 - HM_Q_OFF);
  const uint32_t p0_u32 = x.tile_u32 + 8 * HM_SEG, p1_u32 = x.p_u32; /* P0 over tile 0's rope segment */
  float *m_s = x.l_s;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  const float qs0 = FP8 ? p.scale_log2 * x.qexp_s[h0] : 0.f, qs1 = FP8 ? p.scale_log2 * x.qexp_s[h0 + 8] : 0.f;
  float s0[32]; /* warpgroup 0: the pair's QK, the next pair's issued behind this pair's last PV */
  if constexpr (j == 0)
    if (x.n > 0) hm_pair_qk<FP8>(s0, o, x, pr, 0, 0, qd);
  for (int i = 0; 2 * i < x.n; ++i) {
    if constexpr (j == 0) {
      float(&s)[32] = s0;
      float a0, a1, ps0, ps1;
      hm_softmax<FP8, TG>(s, p, x, 0, qd, qs0, qs1, m0, m1, a0, a1, ps0, ps1, h0);
      l0 = l0 * a0 + ps0;
      l1 = l1 * a1 + ps1;
      hm_p_row_factors<FP8>(s, x, 0, qd);
      hm_publish_max(m_s, h0, qd, m0, m1, HM_BAR_M_0TO1); /* the quad read the last pair's M before */
      uint32_t pa[4][4];
      hm_pack_p<FP8>(s, pa);
      hm_rescale(o, a0, a1);
      hm_pv_issue_rs<FP8>(o, pa, x.tile_u32, 0);
      ptx_wgmma_wait<0>();
      hm_keep_p(pa);
      ptx_reg_fence(o);
      ptx_mbar_arrive(ring_empty(hm_half_ring(pr, 0, HM_HALF_L), 0));
      ptx_bar_sync(HM_BAR_M_1TO0, 256); /* the pair's max */
      const float M0 = m_s[h0], M1 = m_s[h0 + 8];
      const float f0 = hm_rescale_factor(m0, M0), f1 = hm_rescale_factor(m1, M1);
      m0 = M0;
      m1 = M1;
#pragma unroll
      for (int e = 0; e < 32; ++e) s[e] *= (e & 2) ? f1 : f0;
      hm_pack_p<FP8>(s, pa);
      hm_store_p_packed(pa, p0_u32, w, lane);
      ptx_fence_proxy_async_smem();
      ptx_bar_arrive(HM_BAR_P_0TO1, 256);
      hm_rescale(o, f0, f1);
      l0 *= f0;
      l1 *= f1;
      hm_half_wait_full(hm_half_ring(pr, 1, HM_HALF_L), i); /* complete (warpgroup 1 waited); this thread's acquire */
      ptx_bar_sync(HM_BAR_P_1TO0, 256); /* P1 */
      hm_pv_issue<FP8>(o, p1_u32, x.tile_u32 + HM_TILE, 0);
      if (2 * (i + 1) < x.n) { /* the next pair's QK on tile 0's L half behind PV(P1) */
        hm_half_wait_full(hm_half_ring(pr, 0, HM_HALF_L), i + 1);
        ptx_wgmma_fence();
        hm_qk_steps<FP8>(s, x, x.tile_u32, 0, 16, true);
        ptx_wgmma_commit();
        ptx_wgmma_wait<1>(); /* PV(P1) done: tile 1's L is free */
        ptx_mbar_arrive(ring_empty(hm_half_ring(pr, 1, HM_HALF_L), 0));
        hm_half_wait_full(hm_half_ring(pr, 0, HM_HALF_R), i + 1);
        hm_qk_steps<FP8>(s, x, x.tile_u32, 16, FP8 ? 32 : 36, false);
        hm_qk_finish<FP8>(s, x, x.tile_u32, 0, qd);
        ptx_reg_fence(o);
        continue;
      }
      ptx_wgmma_wait<0>();
      ptx_reg_fence(o);
      ptx_mbar_arrive(ring_empty(hm_half_ring(pr, 1, HM_HALF_L), 0));
    } else {
      float s[32];
      hm_pair_qk<FP8>(s, o, x, pr, 1, i, qd);
      ptx_bar_sync(HM_BAR_M_0TO1, 256); /* m0 */
      float M0 = m_s[h0], M1 = m_s[h0 + 8];
      float a0, a1, ps0, ps1;
      hm_softmax<FP8, TG>(s, p, x, 1, qd, qs0, qs1, M0, M1, a0, a1, ps0, ps1, h0);
      hm_p_row_factors<FP8>(s, x, 1, qd);
      const float f0 = hm_rescale_factor(m0, M0), f1 = hm_rescale_factor(m1, M1);
      m0 = M0;
      m1 = M1;
      l0 = l0 * f0 + ps0;
      l1 = l1 * f1 + ps1;
      hm_rescale(o, f0, f1);
      hm_publish_max(m_s, h0, qd, M0, M1, HM_BAR_M_1TO0); /* the quad read m0 before */
      uint32_t pa[4][4];
      hm_pack_p<FP8>(s, pa);
      hm_pv_issue_rs<FP8>(o, pa, x.tile_u32 + HM_TILE, 256);
      hm_store_p_packed(pa, p1_u32, w, lane);
      ptx_fence_proxy_async_smem();
      hm_half_wait_full(hm_half_ring(pr, 0, HM_HALF_R), i); /* complete (warpgroup 0 waited); this thread's acquire */
      ptx_bar_sync(HM_BAR_P_0TO1, 256); /* P0 */
      hm_pv_issue<FP8>(o, p0_u32, x.tile_u32, 256);
      ptx_bar_arrive(HM_BAR_P_1TO0, 256);
      ptx_wgmma_wait<1>(); /* PV(P1): tile 1's R is done */
      hm_keep_p(pa);
      ptx_mbar_arrive(ring_empty(hm_half_ring(pr, 1, HM_HALF_R), 0));
      ptx_wgmma_wait<0>();
      ptx_reg_fence(o);
      ptx_mbar_arrive(ring_empty(hm_half_ring(pr, 0, HM_HALF_R), 0));
    }
  }
  if (j == 0 && x.last) ptx_griddep_launch_dependents();
  /* ---- epilogue: the two warpgroups' partial sums -> l, lse (warpgroup 0), O halves ---- */
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  ptx_bar_sync(HM_BAR_EPILOGUE, 256); /* both are done with m_s and alpha_s */
  float *mine = j ? x.l_s : x.alpha_s;
  if (qd == 0) {
    mine[h0] = l0;
    mine[h0 + 8] = l1;
  }
  ptx_bar_sync(HM_BAR_EPILOGUE, 256);
  const float L0 = x.alpha_s[h0] + x.l_s[h0], L1 = x.alpha_s[h0 + 8] + x.l_s[h0 + 8];
  if (x.splits > 1) { /* (m, l) and O to shared memory for the cluster merge (hm_merge_splits) */
    ptx_bar_sync(HM_BAR_EPILOGUE, 256); /* both have read the sums: (m, l) may overwrite them */
    if (j == 0 && qd == 0) {
      float2 *ml = (float2 *)x.alpha_s; /* HM_ML_OFF */
      ml[h0] = make_float2(m0, L0);
      ml[h0 + 8] = make_float2(m1, L1);
    }
    hm_stage_o(x, o, h0, qd, dbase);
    return;
  }
  if (j == 0 && qd == 0 && p.io.lse) {
    const int H = p.num_heads, lim = TG ? x.q_rows : H; /* token groups: the group's rows */
    if (x.head0 + h0 < lim) p.io.lse[x.t * H + x.head0 + h0] = mla_lse(m0, L0);
    if (x.head0 + h0 + 8 < lim) p.io.lse[x.t * H + x.head0 + h0 + 8] = mla_lse(m1, L1);
  }
  hm_store_out<TG>(p, x, o, h0, qd, dbase, L0, L1);
}

/* Splits: merge the cluster's (m, l, O) through distributed shared memory, in rank order (the same
 * bits whichever CTA computes them): rank r of S writes the 4-dim columns [128 r / S, 128 (r + 1) / S)
 * of every head of its group, and rank 0 the lse. A split without entries (l = 0) contributes nothing.
 * Called by the 256 consumer threads (ctid) between two cluster barriers, in two phases, over the
 * group's real heads only (a 16-head call reads a quarter of the staging):
 *   weights  threads 0-63, one head each: the S splits' (m, l) -> w_r = 2^(m_r - M) (-1: no entries)
 *            and 1 / L into this CTA's P area (free after the chunks);
 *   columns  each thread 16 / S outputs of 4 dims a batch (about two batches), the batch's 16 peer
 *            loads issued before the first is used (a loop of dependent round trips took 6-10 us a
 *            wave, dev/attention_heads_as_m_trace).
 * A peer's staging is its base (mapa) plus the local offset: a CTA's window is contiguous. */
#define HM_MW_OFF HM_P_OFF /* splits, after the chunks: float [64][8] weights, then float [64] 1 / L */
static_assert(HM_HEADS * 9 * 4 <= 8 * 1024, "merge weights fit in the P area");
template <int S>
__device__ __forceinline__ void hm_merge_splits(__nv_bfloat16 *out, float *lse, int H, uint32_t s_u32, uint8_t *smem,
                                                int64_t t, int head0, int ctid) {
  const int rank = (int)ptx_cluster_ctarank();
  float *wgt_s = (float *)(smem + HM_MW_OFF), *inv_s = wgt_s + HM_HEADS * 8;
  const int c0 = rank * (MLA_V_DIM / 4) / S, nc = (rank + 1) * (MLA_V_DIM / 4) / S - c0;
  const int hv = min(HM_HEADS, H - head0); /* the group's real heads: padding rows are never read */
  if (ctid < hv) {
    const int h = ctid;
    float2 ml[S];
#pragma unroll
    for (int r = 0; r < S; ++r) ml[r] = ptx_ld_cluster_f32x2(ptx_mapa(s_u32 + HM_ML_OFF, r) + h * 8);
    float M = -INFINITY;
#pragma unroll
    for (int r = 0; r < S; ++r)
      if (ml[r].y > 0.f) M = fmaxf(M, ml[r].x);
    float L = 0.f;
#pragma unroll
    for (int r = 0; r < S; ++r) {
      float wgt = -1.f;
      if (ml[r].y > 0.f) {
        wgt = ptx_ex2(ml[r].x - M);
        L += wgt * ml[r].y;
      }
      wgt_s[h * 8 + r] = wgt;
    }
    inv_s[h] = L > 0.f ? 1.f / L : 0.f;
    if (lse && c0 == 0) lse[t * H + head0 + h] = mla_lse(M, L);
  }
  ptx_bar_sync(HM_BAR_MERGE, 256);
  uint32_t peer[S];
#pragma unroll
  for (int r = 0; r < S; ++r) peer[r] = ptx_mapa(s_u32 + HM_OST_OFF, r);
  constexpr int B = 16 / S > 0 ? 16 / S : 1; /* outputs a thread requests at once */
  const int units = hv * nc;
  for (int u0 = ctid; u0 < units; u0 += 256 * B) {
    float4 ov[B][S];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int u = u0 + 256 * b, h = u / nc, d = 4 * (c0 + u - h * nc);
      if (u < units)
#pragma unroll
        for (int r = 0; r < S; ++r) ov[b][r] = ptx_ld_cluster_f32x4(peer[r] + (h * HM_OST + d) * 4);
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int u = u0 + 256 * b, h = u / nc, d = 4 * (c0 + u - h * nc);
      if (u >= units) continue;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int r = 0; r < S; ++r) {
        const float wgt = wgt_s[h * 8 + r];
        if (wgt >= 0.f) {
          acc.x += wgt * ov[b][r].x;
          acc.y += wgt * ov[b][r].y;
          acc.z += wgt * ov[b][r].z;
          acc.w += wgt * ov[b][r].w;
        }
      }
      const float inv = inv_s[h];
      uint2 packed;
      packed.x = ptx_f32x2_to_bf16x2(acc.x * inv, acc.y * inv);
      packed.y = ptx_f32x2_to_bf16x2(acc.z * inv, acc.w * inv);
      *(uint2 *)(out + ((t * H + head0 + h) * MLA_V_DIM + d)) = packed;
    }
  }
}

/* The FP8 kernels call the merge as a function of its own: inlined there, the seven sizes' code cost
 * the chunk loops registers (spills 16 / 76 B -> 172 / 520) and the unsplit rows 3 % (H200
 * 2026-12-05, 256 x 64 heads 207.2 -> 214.5 us); outlined, 24 / 24 B. The bf16 kernel, with registers to
 * spare, keeps it inline: outlined, its unsplit rows lost 2-4 % (H100, 128 x 128 heads 166.6 -> 170.0). */
template <int S>
__device__ __noinline__ void hm_merge_splits_outlined(__nv_bfloat16 *out, float *lse, int H, uint32_t s_u32,
                                                      uint8_t *smem, int64_t t, int head0, int ctid) {
  hm_merge_splits<S>(out, lse, H, s_u32, smem, t, head0, ctid);
}
template <int S, bool OUTLINED>
__device__ __forceinline__ void hm_merge_size(const hm_params &p, uint32_t s_u32, uint8_t *smem, int64_t t, int head0,
                                              int ctid) {
  if (OUTLINED) hm_merge_splits_outlined<S>(p.io.out, p.io.lse, p.num_heads, s_u32, smem, t, head0, ctid);
  else hm_merge_splits<S>(p.io.out, p.io.lse, p.num_heads, s_u32, smem, t, head0, ctid);
}

/* A split CTA's end: the cluster's merge between two cluster barriers, which every thread of the CTA
 * joins; the 256 consumer threads (merges, ctid their thread) merge. */
/* This CTA's share of the merge, for the cluster's size (2..8). */
template <bool OUTLINED>
__device__ __forceinline__ void hm_merge_any(const hm_params &p, uint32_t s_u32, uint8_t *smem, int64_t t, int head0,
                                             int ctid) {
  switch (p.splits) {
    case 2: hm_merge_size<2, OUTLINED>(p, s_u32, smem, t, head0, ctid); break;
    case 3: hm_merge_size<3, OUTLINED>(p, s_u32, smem, t, head0, ctid); break;
    case 4: hm_merge_size<4, OUTLINED>(p, s_u32, smem, t, head0, ctid); break;
    case 5: hm_merge_size<5, OUTLINED>(p, s_u32, smem, t, head0, ctid); break;
    case 6: hm_merge_size<6, OUTLINED>(p, s_u32, smem, t, head0, ctid); break;
    case 7: hm_merge_size<7, OUTLINED>(p, s_u32, smem, t, head0, ctid); break;
    default: hm_merge_size<8, OUTLINED>(p, s_u32, smem, t, head0, ctid); break;
  }
}
template <bool OUTLINED>
__device__ __forceinline__ void hm_merge_cluster(const hm_params &p, uint32_t s_u32, uint8_t *smem, int64_t t,
                                                 int head0, bool merges, int ctid) {
  ptx_cluster_sync(); /* every CTA of the (token, group) has its (m, l, O) staged */
  if (merges) hm_merge_any<OUTLINED>(p, s_u32, smem, t, head0, ctid);
  ptx_cluster_sync(); /* peers may still read this CTA's staging */
}

/* ---------------------------------------------------------------------------------------------
 * Producer (warpgroup 2): gather rows into the tile ring. The 8 lanes p of a row cover one 128-byte
 * line of it per instruction (whole lines from L2) and one 128-byte swizzled tile row in shared
 * memory (conflict-free). Warp w (0..3) owns rows 16w + 4q + r4 (q = 0..3) of every chunk.
 */

/* The token mask of union row e of a token group (mask_row: the group's masks), 0 past `end`. */
__device__ __forceinline__ int hm_tg_mask(const uint8_t *mask_row, int e, int end) {
  return e < end ? (int)__ldg(mask_row + e) : 0;
}

/* The factors 2^K of packed FP8 rows converted first: after the rows in the workspace (p.io.kv). */
__device__ __forceinline__ const float *hm_converted_factors(const hm_params &p) {
  return (const float *)((const uint8_t *)p.io.kv + DSA_CONVERTED_COLF_OFF(p.io.num_slots));
}

/* A producer thread's cp.async copies but the last N have landed: made visible to the consumers' wgmma
 * (async proxy) and arrived on stage s's full barrier of ring r. */
template <int N>
__device__ __forceinline__ void hm_publish_landed(const mbar_ring &r, int s) {
  ptx_cp_async_wait<N>();
  ptx_fence_proxy_async_smem();
  ptx_mbar_arrive(ring_full(r, s));
}

/* The 16-bit row of slot (-1: zeros, nothing read) into tile row r, segments [kb0, kb1) of 64 dims: lane
 * pl of the row's 8 copies 16 bytes of each (whole 128-byte lines; one swizzled tile row: no conflicts). */
__device__ __forceinline__ void hm_copy_row(uint32_t tile, int r, int pl, const hm_params &p, int slot, int kb0,
                                            int kb1) {
  const __nv_bfloat16 *src =
      (const __nv_bfloat16 *)p.io.kv + (slot >= 0 ? (int64_t)slot * p.io.kv_stride : 0) + pl * 8;
#pragma unroll
  for (int kb = kb0; kb < kb1; ++kb)
    ptx_cp_async_16(tile + hm_tile_off(r, 8 * kb + pl), src + 64 * kb, slot >= 0 ? 16 : 0);
}

/* bf16 KV: cp.async, up to two chunks in flight. CONVERTED (packed FP8 KV converted first): the rows
 * are the converted ones (f16 latent x 2^-K, bf16 rope as stored), and each row's 2^K goes to colf_s.
 * Token groups (TG): valid_s holds each row's token mask (mask_row), 0 for a skipped row. */
template <bool CONVERTED, int TG = 0>
__device__ __forceinline__ void hm_produce_bf16(const hm_params &p, const int32_t *idx_row, int end, int n, int c0,
                                                uint32_t tile_u32, const mbar_ring &ring, int *valid_s, float *colf_s,
                                                int w, int lane, const uint8_t *mask_row = nullptr) {
  const int r4 = lane >> 3, pl = lane & 7;
  const float *colf_rows = CONVERTED ? hm_converted_factors(p) : nullptr;
  int slot[4], msk[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    slot[q] = mla_entry_slot(idx_row, 16 * w + 4 * q + r4, end, p.io.num_slots);
    msk[q] = TG ? hm_tg_mask(mask_row, 16 * w + 4 * q + r4, end) : 0;
  }
  for (int c = 0; c < n; ++c) {
    const int b = (c0 + c) & 1;
    /* Chunk c-1 is published when it has landed: right after chunk c is issued if c's tile is
     * already free (two chunks in flight), else before waiting for the tile, so that the
     * consumers' next QK never waits on a tile they have yet to free. */
    const bool tile_free = ring_test_empty<2>(ring, c0 + c);
    bool published = c < 1; /* the unit's first chunk: the previous unit's last was published at its end */
    if (!tile_free) {
      if (!published) {
        hm_publish_landed<0>(ring, (c0 + c - 1) & 1);
        published = true;
      }
      ring_wait_empty<2>(ring, c0 + c);
    }
    const uint32_t tile = tile_u32 + b * HM_TILE;
    /* CONVERTED: the rows' factors loaded before their copies are issued and stored after (a load
     * waited for before them put four L2 round trips a chunk on the producer's path: 4096 x 128 heads
     * 5.70 ms, 4.96 with them in flight, H100) */
    float cf[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      slot[q] = mla_slot_checked(slot[q], p.io.num_slots); /* loaded an iteration ago */
      if (CONVERTED) cf[q] = pl == 0 && slot[q] >= 0 ? __ldg(colf_rows + slot[q]) : 1.f;
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = 16 * w + 4 * q + r4;
      if (pl == 0) valid_s[b * HM_ROWS + r] = TG ? (slot[q] >= 0 ? msk[q] : 0) : slot[q];
      hm_copy_row(tile, r, pl, p, slot[q], 0, 9);
    }
    ptx_cp_async_commit();
    if (CONVERTED && pl == 0) {
#pragma unroll
      for (int q = 0; q < 4; ++q) colf_s[b * HM_ROWS + 16 * w + 4 * q + r4] = cf[q];
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      slot[q] = mla_entry_raw(idx_row, (c + 1) * HM_ROWS + 16 * w + 4 * q + r4, end);
      if (TG) msk[q] = hm_tg_mask(mask_row, (c + 1) * HM_ROWS + 16 * w + 4 * q + r4, end);
    }
    if (!published) { /* chunk c-1 has landed: publish it (chunk c stays in flight) */
      hm_publish_landed<1>(ring, (c0 + c - 1) & 1);
    }
  }
  if (n > 0) {
    /* written out: through hm_publish_landed, NVVM numbers the persistent grid's registers otherwise (the
     * same instructions), and ptxas's allocation follows the numbering */
    ptx_cp_async_wait<0>();
    ptx_fence_proxy_async_smem();
    ptx_mbar_arrive(ring_full(ring, (c0 + n - 1) & 1));
  }
}

/* The seesaw's producer: the halves of each pair's two tiles (hm_consume_seesaw) in the order they are
 * freed and read, (0, L), (1, R), (0, R), (1, L), by cp.async as hm_produce_bf16 copies (CONVERTED: the
 * rows converted first, each row's 2^K with its chunk); a chunk's rows, their slots (valid_s) and
 * factors go with its first half. Each thread's arrival on a half's full barrier is counted with its
 * copies (cp.async.mbarrier.arrive): the half is published when they have landed and the producer goes
 * on to the next free half at once. It used to wait for each half to land, publishing it after issuing
 * the next; H100, 2026-12-06, us, that / this / this with warpgroup 0's next QK behind its PV (as now):
 * decode 128 x 128 bf16 172.1 / 160.6 / 160.3, prefill 4096 x 128 FP8 4,751 / 4,676 / 4,632, bf16
 * 4,589 / 4,679 / 4,560 (docs/bench/attn-seesaw-arrivals-h100-2026-12-06/). */
template <bool CONVERTED, int TG = 0>
__device__ __forceinline__ void hm_produce_pairs(const hm_params &p, const int32_t *idx_row, int end, int n,
                                                 uint32_t tile_u32, const mbar_ring &pr, int *valid_s, float *colf_s,
                                                 int w, int lane, const uint8_t *mask_row = nullptr) {
  const int r4 = lane >> 3, pl = lane & 7;
  const float *colf_rows = CONVERTED ? hm_converted_factors(p) : nullptr;
  int raw[2][4], slot[2][4], msk[2][4]; /* per tile: the next chunk's entries (token groups: masks); the chunk in it */
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      raw[t][q] = mla_entry_raw(idx_row, t * HM_ROWS + 16 * w + 4 * q + r4, end);
      msk[t][q] = TG ? hm_tg_mask(mask_row, t * HM_ROWS + 16 * w + 4 * q + r4, end) : 0;
      slot[t][q] = -1;
    }
  for (int i = 0; 2 * i < n; ++i) {
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
      const int t = jb & 1, h = (jb == 1 || jb == 2) ? HM_HALF_R : HM_HALF_L, c = 2 * i + t; /* c = n: no rows */
      const mbar_ring hr = hm_half_ring(pr, t, h);
      ring_wait_empty<1>(hr, i);
      const uint32_t tile = tile_u32 + t * HM_TILE;
      const bool first = jb < 2; /* the chunk's first half: its rows' slots and factors */
      float cf[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if (first) {
          slot[t][q] = mla_slot_checked(raw[t][q], p.io.num_slots);
          if (CONVERTED) cf[q] = pl == 0 && slot[t][q] >= 0 ? __ldg(colf_rows + slot[t][q]) : 1.f;
        }
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = 16 * w + 4 * q + r4;
        if (first && pl == 0) valid_s[t * HM_ROWS + r] = TG ? (slot[t][q] >= 0 ? msk[t][q] : 0) : slot[t][q];
        hm_copy_row(tile, r, pl, p, slot[t][q], h == HM_HALF_L ? 0 : 4, h == HM_HALF_L ? 4 : 9);
      }
      ptx_cp_async_mbar_arrive(ring_full(hr, 0)); /* the phase waits for these copies to land */
      if (first && CONVERTED && pl == 0) {
#pragma unroll
        for (int q = 0; q < 4; ++q) colf_s[t * HM_ROWS + 16 * w + 4 * q + r4] = cf[q];
      }
      ptx_mbar_arrive(ring_full(hr, 0)); /* the slots and factors (release) */
      if (first) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          raw[t][q] = mla_entry_raw(idx_row, (c + 2) * HM_ROWS + 16 * w + 4 * q + r4, end);
          if (TG) msk[t][q] = hm_tg_mask(mask_row, (c + 2) * HM_ROWS + 16 * w + 4 * q + r4, end);
        }
      }
    }
  }
}

/* Packed FP8 KV. The 512 e4m3 bytes of a row are four 128-byte lines = its four scale groups; the
 * next chunk's lines wait in registers (loaded as soon as this chunk's are converted) while the
 * consumers work. The tile holds the latent dims in f16 times 2^-K_r and the rope dims in bf16 as stored.
 * Token groups (TG): valid_s holds each row's token mask (mask_row, loaded two chunks ahead), 0 for a
 * skipped row. */
template <int TG = 0>
__device__ __forceinline__ void hm_produce_fp8(const hm_params &p, const int32_t *idx_row, int end, int n, int c0,
                                               uint32_t tile_u32, const mbar_ring &ring, int *valid_s, float *colf_s,
                                               int w, int lane, const uint8_t *mask_row = nullptr) {
  const int r4 = lane >> 3, pl = lane & 7;
  const uint8_t *kvb = (const uint8_t *)p.io.kv;
  uint4 pay[4][4];
  float sc[4]; /* lane p holds scale p & 3 of its row; shuffled to the row's lanes when used */
  int slot[4], nslot[4], pslot[4]; /* the rows of chunks c, c + 1 (raw), c + 2 (raw, prefetched into L2) */
  int msk[4], nmsk[4];             /* token groups: the masks of chunks c, c + 1 */
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    slot[q] = mla_entry_slot(idx_row, 16 * w + 4 * q + r4, end, p.io.num_slots);
    msk[q] = TG ? hm_tg_mask(mask_row, 16 * w + 4 * q + r4, end) : 0;
    nmsk[q] = TG ? hm_tg_mask(mask_row, HM_ROWS + 16 * w + 4 * q + r4, end) : 0;
    const uint8_t *row = kvb + (int64_t)(slot[q] >= 0 ? slot[q] : 0) * MLA_FP8_SLOT_BYTES;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      pay[q][j] = slot[q] >= 0 ? ptx_ld_nc_v4(row + 128 * j + 16 * pl) : make_uint4(0, 0, 0, 0);
    sc[q] = slot[q] >= 0 ? __ldg((const float *)(row + MLA_FP8_SCALE_OFF) + (pl & 3)) : 0.f;
    nslot[q] = mla_entry_raw(idx_row, HM_ROWS + 16 * w + 4 * q + r4, end);
    pslot[q] = mla_entry_raw(idx_row, 2 * HM_ROWS + 16 * w + 4 * q + r4, end);
  }
  for (int c = 0; c < n; ++c) {
    const int b = (c0 + c) & 1;
    /* chunk c + 2's rows into L2, lane p of a row the line at byte 128p (p < 6) or its last byte
     * (p = 6), so that the register loads of chunk c + 1 find them there, not in HBM: where rows
     * come from HBM (decode 256 x 64 heads) 231 -> 214 us, elsewhere the same (H200, 2026-12-05) */
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int ps = mla_slot_checked(pslot[q], p.io.num_slots);
      if (pl < 7 && ps >= 0)
        ptx_prefetch_l2(kvb + (int64_t)ps * MLA_FP8_SLOT_BYTES + (pl < 6 ? 128 * pl : MLA_FP8_SLOT_BYTES - 1));
    }
    ring_wait_empty<2>(ring, c0 + c);
    const uint32_t tile = tile_u32 + b * HM_TILE;
    /* rope (bf16) lands by cp.async while the e4m3 lines are converted, as it is (QK scales only the latent
     * sums: hm_qk_tile) */
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint8_t *row = kvb + (int64_t)(slot[q] >= 0 ? slot[q] : 0) * MLA_FP8_SLOT_BYTES;
      ptx_cp_async_16(tile + hm_tile_off(16 * w + 4 * q + r4, 64 + pl), row + MLA_FP8_ROPE_OFF + 16 * pl,
                      slot[q] >= 0 ? 16 : 0);
    }
    ptx_cp_async_commit();
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = 16 * w + 4 * q + r4;
      /* K_r = the largest binary exponent of the row's four scales: group g is stored as
       * e4m3 x f16(scale_g 2^-K_r) (a multiplier below 2, values below 896), and 2^K_r goes to the
       * consumers for the score and P */
      const int K = hm_row_exponent(sc[q]);
      const float f = hm_pow2(-K);
      const uint32_t mult_mine = ptx_f32x2_to_f16x2(sc[q] * f, sc[q] * f);
      if (pl == 0) {
        valid_s[b * HM_ROWS + r] = TG ? (slot[q] >= 0 ? msk[q] : 0) : slot[q];
        colf_s[b * HM_ROWS + r] = hm_pow2(K);
      }
      /* row r = 16w + 4q + r4: (r >> 3) * 1024 + (r & 7) * 128 = 2048w + 512q + 128 r4; the 16 dims
       * of line j sit in segment 2j + (p >> 2), chunks 2(p & 3) and 2(p & 3) + 1, swizzled by r & 7 */
      const uint32_t addr = tile + 2048 * w + 512 * q + 128 * r4 + (pl >> 2) * HM_SEG;
      const uint32_t r7 = (uint32_t)(4 * (q & 1) + r4), ce = (uint32_t)(2 * (pl & 3));
      const uint32_t off_e = ((ce ^ r7) << 4), off_o = (((ce + 1) ^ r7) << 4);
      const bool odd_first = pl >= 4;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        hm_store_fp8(addr + 2 * j * HM_SEG, odd_first ? off_o : off_e, odd_first ? off_e : off_o, odd_first, pay[q][j],
                     __shfl_sync(0xffffffffu, mult_mine, (lane & 0x18) | j));
      /* this row's registers are free: load the next chunk's row */
      nslot[q] = mla_slot_checked(nslot[q], p.io.num_slots); /* loaded an iteration ago */
      const uint8_t *nrow = kvb + (int64_t)(nslot[q] >= 0 ? nslot[q] : 0) * MLA_FP8_SLOT_BYTES;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        pay[q][j] = nslot[q] >= 0 ? ptx_ld_nc_v4(nrow + 128 * j + 16 * pl) : make_uint4(0, 0, 0, 0);
      sc[q] = nslot[q] >= 0 ? __ldg((const float *)(nrow + MLA_FP8_SCALE_OFF) + (pl & 3)) : 0.f;
      slot[q] = nslot[q];
      nslot[q] = pslot[q];
      pslot[q] = mla_entry_raw(idx_row, (c + 3) * HM_ROWS + 16 * w + 4 * q + r4, end); /* checked when used */
      if (TG) {
        msk[q] = nmsk[q];
        nmsk[q] = hm_tg_mask(mask_row, (c + 2) * HM_ROWS + 16 * w + 4 * q + r4, end);
      }
    }
    hm_publish_landed<0>(ring, b);
  }
}

/* Consumers (both warpgroups): Q, 64 heads x 72 chunks of 16 B (no swizzle), rows past H zero. FP8 KV:
 * Q times 2^-e_h, e_h putting the head's largest value in [2^14, 2^15): latent dims in f16 (exact for
 * bf16 input in range), rope dims bf16 (as the tile's rope); 2^e_h to qexp_s. Warp w stages its core
 * matrices' group, heads 8w .. 8w + 7: lane (i, j) = (lane & 7, lane >> 3) holds head 8w + i's chunks
 * 4k + j, k < 18, every load issued before the first is used. So each store covers four whole core
 * matrices (512 contiguous bytes, conflict-free); a warp storing one head's 32 chunks 128 B apart hit
 * the same four banks 32 times (ncu, 16 tokens x 64 heads: 444k store conflicts, now 59k). The head's
 * largest |q| is reduced over its four lanes. Q is staged 4.0 us after a CTA's entry (H200,
 * dev/attention_heads_as_m_trace; 5.9 when a lane staged one head's chunks, conflicting). */
template <bool FP8, int TG = 0>
__device__ __forceinline__ void hm_load_q(const hm_params &p, uint8_t *smem, float *qexp_s, int64_t t, int head0,
                                          int warp, int lane, int q_rows = 0) {
  constexpr int NK = 72 / 4; /* chunks a lane stages */
  const int H = p.num_heads, i = lane & 7, j = lane >> 3, hh = 8 * warp + i, h = head0 + hh;
  const int lim = TG ? q_rows : H; /* token groups: the group's rows (H = 64 its stride) */
  uint4 v[NK];
  /* one 64-bit base a lane, the chunks at immediate offsets (per-chunk addresses were hoisted out of
   * the units' loop and spilled) */
  const uint4 *src = (const uint4 *)(p.io.q + (t * H + (h < lim ? h : 0)) * MLA_QK_DIM) + j;
#pragma unroll
  for (int k = 0; k < NK; ++k) v[k] = h < lim ? __ldg(src + 4 * k) : make_uint4(0, 0, 0, 0);
  if (FP8) {
    float amax = 0.f;
#pragma unroll
    for (int k = 0; k < NK; ++k) {
      const uint32_t u[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        amax = fmaxf(amax, fmaxf(fabsf(__uint_as_float(u[e] << 16)), fabsf(__uint_as_float(u[e] & 0xFFFF0000u))));
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 8));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 16));
    const int e = amax > 0.f ? max(min(hm_ilogb(amax) - 14, 100), -100) : 0;
    const float f = hm_pow2(-e);
#pragma unroll
    for (int k = 0; k < NK; ++k) {
      const uint32_t u[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
      uint32_t r[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float lo = __uint_as_float(u[q] << 16) * f, hi = __uint_as_float(u[q] & 0xFFFF0000u) * f;
        r[q] = k < 64 / 4 ? ptx_f32x2_to_f16x2(lo, hi) : ptx_f32x2_to_bf16x2(lo, hi); /* chunks >= 64: rope, bf16 */
      }
      v[k] = make_uint4(r[0], r[1], r[2], r[3]);
    }
    if (j == 0) qexp_s[hh] = hm_pow2(e);
  }
  uint8_t *q_s = smem + HM_Q_OFF + warp * HM_RG + i * 16;
#pragma unroll
  for (int k = 0; k < NK; ++k) *(uint4 *)(q_s + (4 * k + j) * 128) = v[k];
}

/* ---------------------------------------------------------------------------------------------
 * Packed FP8 KV converted first (heads_as_m and token groups where the rows are read many times over;
 * the seesaw always): every slot converted once, before the attention kernel, into the tile row
 * hm_produce_fp8 would make of it (the same operations, so the same bits): 512 latent dims
 * e4m3 x f16(scale_g 2^-K) in f16, 64 rope dims bf16 as stored, and colf[s] = 2^K (K: the largest
 * binary exponent of the four scales, within +-100) after the rows. The attention kernel's producer
 * then copies rows (hm_produce_bf16<true>): no conversion per CTA, and for the seesaw room for both
 * consumer warpgroups' registers.
 * A warp a slot: lane l converts latent bytes [16 l, 16 l + 16) (scale group l / 8), lanes 0..7 the
 * rope's 16-byte pieces.
 */
#define HM_CONVERT_THREADS 256
/* Slot s into row r of `rows` and its factor into colf[r], by the warp (lane). */
__device__ __forceinline__ void hm_convert_row(const uint8_t *kv, int64_t s, uint8_t *rows, float *colf, int64_t r,
                                               int lane) {
  const uint8_t *row = kv + s * MLA_FP8_SLOT_BYTES;
  const float sc = __ldg((const float *)(row + MLA_FP8_SCALE_OFF) + (lane & 3)); /* lane l: scale l % 4 */
  const int K = hm_row_exponent(sc);
  const float f = hm_pow2(-K);
  const uint32_t mult_mine = ptx_f32x2_to_f16x2(sc * f, sc * f);
  const uint32_t mult = __shfl_sync(0xffffffffu, mult_mine, lane >> 3); /* scale of group l / 8 */
  uint32_t o[8];
  hm_e4m3x16_to_f16(ptx_ld_nc_v4(row + 16 * lane), mult, o);
  uint4 *dst = (uint4 *)(rows + r * (int64_t)DSA_CONVERTED_ROW_BYTES) + 2 * lane;
  dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
  dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  if (lane < 8) /* the rope as it is */
    ((uint4 *)(rows + r * (int64_t)DSA_CONVERTED_ROW_BYTES + 2 * MLA_V_DIM))[lane] =
        ptx_ld_nc_v4(row + MLA_FP8_ROPE_OFF + 16 * lane);
  if (lane == 0) colf[r] = hm_pow2(K);
}
__global__ void __launch_bounds__(HM_CONVERT_THREADS) hm_convert_rows_kernel(const uint8_t *kv, int64_t num_slots,
                                                                             uint8_t *rows, float *colf) {
  const int lane = threadIdx.x & 31;
  const int64_t s = blockIdx.x * (int64_t)(HM_CONVERT_THREADS / 32) + (threadIdx.x >> 5);
  if (s >= num_slots) return;
  hm_convert_row(kv, s, rows, colf, s, lane);
}

/* ---------------------------------------------------------------------------------------------
 * The rows a call selects, converted first (the plan's convert_rows 2: the seesaw and token groups over a
 * cache too large to convert whole, an engine's pool; the layout: dsa_select_layout). After a memset of the
 * bitmap, six kernels: mark (a bit for each slot a valid entry names), count (each word into the words
 * with rows, a uint2: .x its marks, .y its prefix of the marked slots within its block of 1024 words; and
 * the block's total), total (the blocks' prefixes, the count, and whether it fits DSA_SELECT_ROWS: the
 * gate), list (each marked word's .y made the call's, the row of its first marked slot, and its marked
 * slots into their rows' places in the rows' slots: the rows in slot order), convert (a warp a row) and
 * remap (each entry to its slot's row, .y + the marked slots below it in its word; -1 where skipped).
 * Where the count does not fit, list, convert, remap and the converted rows' kernels return at once, and
 * the unconverted ones run the call.
 *
 * The entries name few slots many times (a prefill's tokens share their context): the slots' words are a
 * few KiB that every SM hits, and atomics and loads on them serialise in L2. H100, prefill 4096 x 128 heads
 * over a 16k context in a 4M-slot pool: a plain atomicOr an entry 263 us; a load from L2 first and the
 * atomic only where the bit was not yet set, 83 (91-122 with eight entries a thread in flight: the L2
 * slices of those words are the bound, not the latency). A table of words in each CTA's shared memory
 * first (open addressing, each table word added to the bitmap once) was slower: 390 against 92 us on the
 * GLM chunk, 182 against 111 on the prefill; so was marking the uint2 words' .x in place of a bitmap of
 * its own (140 against 111 on the prefill, 87 against 92 on the chunk; 2026-12-06). remap reads a word's
 * marks and row in one 8-byte load: 41 us on the chunk's 8.4M entries, 67 with three loads an entry (the
 * marks, the word's and the block's prefixes). mark and remap take HM_SELECT_BATCH entries a thread at once.
 */
#define HM_SELECT_THREADS 1024
#define HM_SELECT_BATCH 8
__device__ __forceinline__ uint32_t hm_select_row(const uint2 *words, uint32_t s) {
  const uint2 v = words[s >> 5];
  return v.y + __popc(v.x & ((1u << (s & 31)) - 1u));
}
/* Entry e of the round's [tokens, topk] entries: its slot, or -1 where skipped (attention.cuh's rule). A
 * round has at most DSA_SELECT_ROUND_ENTRIES entries, so e and the grid's strides stay in 32 bits (a 64-bit
 * division an entry was most of these passes' instructions). */
static_assert(DSA_SELECT_ROUND_ENTRIES + (int64_t)DSA_PLAN_MAX_SMS * 16 * 256 * HM_SELECT_BATCH < ((int64_t)1 << 32),
              "a round's entries in 32 bits");
__device__ __forceinline__ int hm_select_entry(const mla_io &io, int topk, uint32_t e) {
  const uint32_t t = e / (uint32_t)topk;
  const int i = (int)(e - t * (uint32_t)topk);
  /* loaded whatever lens says (i < topk <= the row's stride: inside the checked extent), so that no load
   * waits on another */
  const int idx = __ldg(io.indices + t * io.indices_stride + i);
  const int end = io.lens ? min(topk, max(__ldg(io.lens + t), 0)) : topk;
  return i < end ? mla_slot_checked(idx, io.num_slots) : -1; /* num_slots capped: hm_params_of */
}
/* A batch of a thread's entries: e0 + k * 256 (blocks of 256 threads), k < HM_SELECT_BATCH; -1 past the end. */
__device__ __forceinline__ void hm_select_batch(const mla_io &io, uint32_t entries, int topk, uint32_t e0,
                                                int (&s)[HM_SELECT_BATCH]) {
#pragma unroll
  for (int k = 0; k < HM_SELECT_BATCH; ++k) {
    const uint32_t e = e0 + 256u * k;
    s[k] = e < entries ? hm_select_entry(io, topk, e) : -1;
  }
}
/* A slot's word is read from L2 first, and only a bit not yet set takes an atomic. */
__global__ void __launch_bounds__(256) hm_select_mark_kernel(const mla_io io, uint32_t entries, int topk,
                                                             uint32_t *bits) {
  for (uint32_t e0 = blockIdx.x * 256u * HM_SELECT_BATCH + threadIdx.x; e0 < entries;
       e0 += gridDim.x * 256u * HM_SELECT_BATCH) {
    int s[HM_SELECT_BATCH];
    uint32_t w[HM_SELECT_BATCH];
    hm_select_batch(io, entries, topk, e0, s);
#pragma unroll
    for (int k = 0; k < HM_SELECT_BATCH; ++k) w[k] = s[k] >= 0 ? __ldcg(bits + (s[k] >> 5)) : ~0u;
#pragma unroll
    for (int k = 0; k < HM_SELECT_BATCH; ++k)
      if (s[k] >= 0 && !((w[k] >> (s[k] & 31)) & 1u)) atomicOr(bits + (s[k] >> 5), 1u << (s[k] & 31));
  }
}
static_assert(DSA_SELECT_BLOCK_WORDS == HM_SELECT_THREADS, "a word a thread in the count");
__global__ void __launch_bounds__(HM_SELECT_THREADS) hm_select_count_kernel(const uint32_t *bits, int64_t num_words,
                                                                           uint2 *words, uint32_t *bsum) {
  typedef cub::BlockScan<uint32_t, HM_SELECT_THREADS> scan_t;
  __shared__ typename scan_t::TempStorage tmp;
  const int64_t w = blockIdx.x * (int64_t)DSA_SELECT_BLOCK_WORDS + threadIdx.x;
  uint32_t pre, total;
  const uint32_t marks = w < num_words ? bits[w] : 0u;
  scan_t(tmp).ExclusiveSum((uint32_t)__popc(marks), pre, total);
  if (w < num_words) words[w] = make_uint2(marks, pre);
  if (threadIdx.x == 0) bsum[blockIdx.x] = total;
}
#define HM_SELECT_BLOCKS_A_THREAD 4
static_assert(DSA_SELECT_MAX_SLOTS / 32 / DSA_SELECT_BLOCK_WORDS <= HM_SELECT_THREADS * HM_SELECT_BLOCKS_A_THREAD,
              "the blocks' prefixes in one CTA");
__global__ void __launch_bounds__(HM_SELECT_THREADS) hm_select_total_kernel(uint32_t *bprefix, int64_t blocks,
                                                                           int *ctl) {
  typedef cub::BlockScan<uint32_t, HM_SELECT_THREADS> scan_t;
  __shared__ typename scan_t::TempStorage tmp;
  uint32_t v[HM_SELECT_BLOCKS_A_THREAD];
#pragma unroll
  for (int k = 0; k < HM_SELECT_BLOCKS_A_THREAD; ++k) {
    const int64_t b = threadIdx.x * (int64_t)HM_SELECT_BLOCKS_A_THREAD + k;
    v[k] = b < blocks ? bprefix[b] : 0u;
  }
  uint32_t total;
  scan_t(tmp).ExclusiveSum(v, v, total);
#pragma unroll
  for (int k = 0; k < HM_SELECT_BLOCKS_A_THREAD; ++k) {
    const int64_t b = threadIdx.x * (int64_t)HM_SELECT_BLOCKS_A_THREAD + k;
    if (b < blocks) bprefix[b] = v[k];
  }
  if (threadIdx.x == 0) {
    ctl[0] = (int)total;
    ctl[1] = (int64_t)total <= DSA_SELECT_ROWS ? 1 : 0;
    ctl[2] = 1 - ctl[1];
  }
}
/* A thread a word: a marked word's row made the call's (its block's prefix added), its marked slots into the
 * rows' slots (row -> slot), in slot order. */
__global__ void __launch_bounds__(256) hm_select_list_kernel(uint2 *words, const uint32_t *bprefix, int64_t num_words,
                                                             const int *ctl, int32_t *row_slots) {
  const int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (w >= num_words || !ctl[1]) return;
  uint2 v = words[w];
  if (!v.x) return;
  v.y += bprefix[w / DSA_SELECT_BLOCK_WORDS];
  words[w].y = v.y;
  for (uint32_t r = v.y; v.x; v.x &= v.x - 1u, ++r) row_slots[r] = (int32_t)(w * 32 + __ffs(v.x) - 1);
}
/* A warp a row (DSA_SELECT_ROWS / 8 CTAs; those past the count return): as hm_convert_rows_kernel, each warp
 * its own row, not a word's rows in turn (a warp a word: 122 us for the GLM chunk's 131k rows of a 4M-slot
 * pool, most of it warps reading empty words or converting a word's rows one after another; this, 89). */
__global__ void __launch_bounds__(HM_CONVERT_THREADS) hm_select_convert_kernel(const uint8_t *kv,
                                                                              const int32_t *row_slots,
                                                                              const int *ctl, uint8_t *rows,
                                                                              float *colf) {
  const int64_t r = blockIdx.x * (int64_t)(HM_CONVERT_THREADS / 32) + (threadIdx.x >> 5);
  if (!ctl[1] || r >= ctl[0]) return;
  hm_convert_row(kv, row_slots[r], rows, colf, r, threadIdx.x & 31);
}
__global__ void __launch_bounds__(256) hm_select_remap_kernel(const mla_io io, uint32_t entries, int topk,
                                                              const uint2 *words, const int *ctl, int32_t *out) {
  if (!ctl[1]) return;
  for (uint32_t e0 = blockIdx.x * 256u * HM_SELECT_BATCH + threadIdx.x; e0 < entries;
       e0 += gridDim.x * 256u * HM_SELECT_BATCH) {
    int s[HM_SELECT_BATCH], row[HM_SELECT_BATCH];
    hm_select_batch(io, entries, topk, e0, s);
#pragma unroll
    for (int k = 0; k < HM_SELECT_BATCH; ++k) /* every load before the first store (out may alias, for all nvcc knows) */
      row[k] = s[k] >= 0 ? (int)hm_select_row(words, (uint32_t)s[k]) : -1;
#pragma unroll
    for (int k = 0; k < HM_SELECT_BATCH; ++k)
      if (e0 + 256u * k < entries) out[e0 + 256u * k] = row[k];
  }
}

/* ---------------------------------------------------------------------------------------------
 * The kernels. hm_attention_kernel: a CTA per unit (token, group) and split, tokens x groups x splits
 * CTAs (split fastest: a cluster is one unit). hm_attention_units_kernel (bf16 KV or FP8 rows
 * converted first, unsplit): a persistent grid of at most a wave, CTA i taking units i, i + G, i + 2G, ... (G = the grid) with one
 * ring throughout: the producer goes on to the next unit's rows as soon as a tile is free, the
 * consumers stage the next Q after their epilogue. One loop for both would not do: the FP8 kernel's
 * code around it lost 1-4 % (H100, 2026-12-05), whose producer-bound chunks gained nothing from it.
 */
/* The CTA's shared-memory plan (hm_smem) at its dynamic window aligned up to 1 KB (the swizzle atoms):
 * a pointer to it, its shared-window address in s_u32 (an out-parameter: the same helper returning both
 * as a struct moved the FP8 kernel's register allocation); and the ring's barriers there. */
__device__ __forceinline__ uint8_t *hm_smem_base(uint8_t *smem_raw, uint32_t &s_u32) {
  const uint32_t raw_u32 = ptx_smem_u32(smem_raw);
  s_u32 = (raw_u32 + 1023u) & ~1023u;
  return smem_raw + (s_u32 - raw_u32);
}
__device__ __forceinline__ mbar_ring hm_ring_of(uint32_t s_u32) {
  mbar_ring r;
  r.full = s_u32 + HM_BAR_OFF;
  r.empty = r.full + 16;
  return r;
}

/* A unit's share of the chunks: token t, heads head0 .., entries [c0 * 64, c0 * 64 + end) of its index
 * row (idx_row points at the first), n chunks; after the grid dependency (lens). q_rows: the unit's
 * rows of q, out and lse past head0 that exist (64; token groups: the group's). */
typedef struct {
  int64_t t;
  int head0, end, n, q_rows;
  const int32_t *idx_row;
} hm_unit;

__device__ __forceinline__ hm_unit hm_unit_of(const hm_params &p, int64_t unit, int split) {
  hm_unit u;
  u.t = p.token_offset + unit / p.num_groups;
  u.head0 = (int)(unit % p.num_groups) * HM_HEADS;
  int end = p.topk;
  if (p.io.lens) end = min(end, max(__ldg(p.io.lens + u.t), 0));
  const int n_all = end > 0 ? (end + HM_ROWS - 1) / HM_ROWS : 0;
  /* this split's chunks: [c0, c0 + n) of the token's n_all; entries counted from c0's first */
  const int per = (n_all + p.splits - 1) / p.splits, c0 = split * per;
  u.n = max(0, min(per, n_all - c0));
  u.end = min(end - c0 * HM_ROWS, u.n * HM_ROWS);
  u.idx_row = p.io.indices + u.t * p.io.indices_stride + (int64_t)c0 * HM_ROWS;
  u.q_rows = HM_HEADS;
  return u;
}

/* Token groups: the launch's group blockIdx.x as a unit — a token of 64 heads (token_offset: the
 * launch's first group) over its union rows (io.indices, io.indices_stride a group; io.lens holds each
 * group's (union rows, rows of q)). */
__device__ __forceinline__ hm_unit hm_unit_tg(const hm_params &p) {
  hm_unit u;
  u.t = p.token_offset + blockIdx.x;
  u.head0 = 0;
  u.end = __ldg(p.io.lens + 2 * (int64_t)blockIdx.x);
  u.q_rows = __ldg(p.io.lens + 2 * (int64_t)blockIdx.x + 1);
  u.n = (u.end + HM_ROWS - 1) / HM_ROWS;
  u.idx_row = p.io.indices + (int64_t)blockIdx.x * p.io.indices_stride;
  return u;
}

/* The consumers' context for unit u in the CTA's shared memory (base s_u32 / smem): the windows, the
 * unit, its splits, the ring's uses before it (c0) and whether it is the CTA's last. */
__device__ __forceinline__ hm_ctx hm_ctx_of(uint32_t s_u32, uint8_t *smem, const hm_unit &u, int splits, int c0,
                                            bool last) {
  hm_ctx x;
  x.q_u32 = s_u32 + HM_Q_OFF;
  x.tile_u32 = s_u32 + HM_TILE_OFF;
  x.p_u32 = s_u32 + HM_P_OFF;
  x.ring = hm_ring_of(s_u32);
  x.valid_s = (int *)(smem + HM_VALID_OFF);
  x.alpha_s = (float *)(smem + HM_ALPHA_OFF);
  x.l_s = (float *)(smem + HM_L_OFF);
  x.colf_s = (const float *)(smem + HM_COLF_OFF);
  x.qexp_s = (const float *)(smem + HM_QEXP_OFF);
  x.n = u.n;
  x.head0 = u.head0;
  x.splits = splits;
  x.c0 = c0;
  x.last = last;
  x.t = u.t;
  x.q_rows = u.q_rows;
  return x;
}

/* GATED (the selected rows' launches, hm_select_rows): the kernel runs only where *p.gate != 0; else every
 * CTA returns at once. */
__device__ __forceinline__ bool hm_gated_out(const hm_params &p) { return *(volatile const int *)p.gate == 0; }

template <bool FP8, bool SEESAW, bool CONVERTED, int TG = 0, bool GATED = false>
__global__ void __launch_bounds__(HM_THREADS, 1) hm_attention_kernel(const hm_params p) {
  static_assert(!(FP8 && SEESAW) || CONVERTED, "the seesaw's producer copies rows: FP8 ones converted first");
  static_assert(FP8 || !CONVERTED, "only packed FP8 rows are converted");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint32_t s_u32;
  uint8_t *smem = hm_smem_base(smem_raw, s_u32);
  const uint32_t tile_u32 = s_u32 + HM_TILE_OFF;
  int *valid_s = (int *)(smem + HM_VALID_OFF);
  float *colf_s = (float *)(smem + HM_COLF_OFF), *qexp_s = (float *)(smem + HM_QEXP_OFF);
  const mbar_ring ring = hm_ring_of(s_u32);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int split = (int)(blockIdx.x % p.splits); /* = the rank in the cluster */

  if (tid == 0) {
    ring_init(ring, 2, 128, 256);
    if (SEESAW) ring_init(hm_pair_ring_of(s_u32), 4, 128, 128); /* a half is released by its last reader */
  }
  __syncthreads();
  ptx_griddep_wait();
  if (GATED && hm_gated_out(p)) return; /* the other one runs */
  const hm_unit u = TG ? hm_unit_tg(p) : hm_unit_of(p, blockIdx.x / p.splits, split);
  /* token groups: the group's union rows' masks */
  const uint8_t *mask_row = TG ? p.tg_masks + (int64_t)blockIdx.x * p.io.indices_stride : nullptr;

  if (warp >= 8) {
    const int w = warp - 8;
    if constexpr (SEESAW) { /* bf16 rows or FP8 ones converted first, by tile halves */
      ptx_setmaxnreg_dec<HM_REG_PRODUCER(false)>();
      hm_produce_pairs<FP8, TG>(p, u.idx_row, u.end, u.n, tile_u32, hm_pair_ring_of(s_u32), valid_s, colf_s, w, lane,
                                mask_row);
    } else if constexpr (!FP8) {
      ptx_setmaxnreg_dec<HM_REG_PRODUCER(false)>();
      hm_produce_bf16<false, TG>(p, u.idx_row, u.end, u.n, 0, tile_u32, ring, valid_s, colf_s, w, lane, mask_row);
    } else if constexpr (CONVERTED) { /* the converted rows: copies, as bf16 KV */
      ptx_setmaxnreg_dec<HM_REG_PRODUCER(false)>();
      hm_produce_bf16<true, TG>(p, u.idx_row, u.end, u.n, 0, tile_u32, ring, valid_s, colf_s, w, lane, mask_row);
    } else {
      ptx_setmaxnreg_dec<HM_REG_PRODUCER(true)>();
      hm_produce_fp8<TG>(p, u.idx_row, u.end, u.n, 0, tile_u32, ring, valid_s, colf_s, w, lane, mask_row);
    }
    if (p.splits > 1) hm_merge_cluster<FP8>(p, s_u32, smem, u.t, u.head0, false, tid); /* joins the barriers only */
    return;
  }

  const int cw = warp >> 2;
  hm_load_q<FP8, TG>(p, smem, qexp_s, u.t, u.head0, warp, lane, u.q_rows);
  ptx_fence_proxy_async_smem();
  ptx_bar_sync(HM_BAR_Q_LOADED, 256);
  const hm_ctx x = hm_ctx_of(s_u32, smem, u, p.splits, 0, true);
  if (SEESAW) {
    if (cw == 0) { /* each role's loop after its setmaxnreg (else ptxas serialises its wgmmas, C7520) */
      ptx_setmaxnreg_inc<HM_REG_SEESAW>(); /* both: an O half, S and the softmax */
      hm_consume_seesaw<FP8, 0, TG>(p, x, warp & 3, lane);
    } else {
      ptx_setmaxnreg_inc<HM_REG_SEESAW>();
      hm_consume_seesaw<FP8, 1, TG>(p, x, warp & 3, lane);
    }
  } else if (cw == 0) {
    ptx_setmaxnreg_inc<HM_REG_QK(FP8)>(); /* O half, S and the softmax */
    hm_consume_qk<FP8, TG>(p, x, warp & 3, lane);
  } else {
    if (HM_REG_PV(FP8) > 168) ptx_setmaxnreg_inc<(HM_REG_PV(FP8) > 168 ? HM_REG_PV(FP8) : 168)>();
    hm_consume_pv<FP8, TG>(p, x, warp & 3, lane);
  }
  if (p.splits > 1) hm_merge_cluster<FP8>(p, s_u32, smem, u.t, u.head0, true, tid);
}

/* A consumer warpgroup of the persistent grid (QK = 1: warpgroup 0), over its CTA's units: Q staged
 * (both warpgroups), the chunks, the epilogue. The context is rebuilt a unit from the window's base
 * (pointers kept live across the units spilled the chunk loops). Q's buffer is free when a unit
 * starts: warpgroup 0's last QK came before the P it published for the last PV, which warpgroup 1
 * waited for before the epilogue barrier. */
template <bool FP8, bool QK>
__device__ __forceinline__ void hm_consumer_units(const hm_params &p, uint8_t *smem, uint32_t s_u32, int warp,
                                                  int lane) {
  int c0 = 0; /* the ring's uses so far */
  for (int64_t unit = blockIdx.x; unit < p.num_units; unit += gridDim.x) {
    const hm_unit u = hm_unit_of(p, unit, 0);
    hm_load_q<FP8>(p, smem, (float *)(smem + HM_QEXP_OFF), u.t, u.head0, warp, lane);
    ptx_fence_proxy_async_smem();
    ptx_bar_sync(HM_BAR_Q_LOADED, 256);
    const hm_ctx x = hm_ctx_of(s_u32, smem, u, 1, c0, unit + gridDim.x >= p.num_units);
    if (QK) hm_consume_qk<FP8, 0>(p, x, warp & 3, lane);
    else hm_consume_pv<FP8, 0>(p, x, warp & 3, lane);
    c0 += u.n;
  }
}

/* FP8: packed FP8 rows converted first (hm_convert_rows_kernel), copied as bf16 rows are. CONVERTING: packed
 * FP8 rows converted by the producer (hm_produce_fp8), gated (hm_gated_out): the selected rows' fallback, a
 * persistent grid so that, gated out, it costs a wave of CTAs returning, not a CTA a unit. */
template <bool FP8, bool CONVERTING = false>
__global__ void __launch_bounds__(HM_THREADS, 1) hm_attention_units_kernel(const hm_params p) {
  static_assert(FP8 || !CONVERTING, "only packed FP8 rows are converted");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint32_t s_u32;
  uint8_t *smem = hm_smem_base(smem_raw, s_u32);
  const mbar_ring ring = hm_ring_of(s_u32);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  if (tid == 0) ring_init(ring, 2, 128, 256);
  __syncthreads();
  ptx_griddep_wait();
  if (CONVERTING && hm_gated_out(p)) return; /* the seesaw runs */

  if (warp >= 8) {
    ptx_setmaxnreg_dec<HM_REG_PRODUCER(CONVERTING)>();
    int c0 = 0; /* the ring's uses so far */
    for (int64_t unit = blockIdx.x; unit < p.num_units; unit += gridDim.x) {
      const hm_unit u = hm_unit_of(p, unit, 0);
      if constexpr (CONVERTING)
        hm_produce_fp8(p, u.idx_row, u.end, u.n, c0, s_u32 + HM_TILE_OFF, ring, (int *)(smem + HM_VALID_OFF),
                       (float *)(smem + HM_COLF_OFF), warp - 8, lane);
      else
        hm_produce_bf16<FP8>(p, u.idx_row, u.end, u.n, c0, s_u32 + HM_TILE_OFF, ring, (int *)(smem + HM_VALID_OFF),
                             (float *)(smem + HM_COLF_OFF), warp - 8, lane);
      c0 += u.n;
    }
    return;
  }
  /* each role's loop after its setmaxnreg (ptxas sizes the code a setmaxnreg dominates by it) */
  if (warp < 4) {
    ptx_setmaxnreg_inc<HM_REG_QK(FP8)>(); /* O half, S and the softmax */
    hm_consumer_units<FP8, true>(p, smem, s_u32, warp, lane);
  } else {
    if (HM_REG_PV(FP8) > 168) ptx_setmaxnreg_inc<(HM_REG_PV(FP8) > 168 ? HM_REG_PV(FP8) : 168)>();
    hm_consumer_units<FP8, false>(p, smem, s_u32, warp, lane);
  }
}

/* ---------------------------------------------------------------------------------------------
 * Host side.
 */
/* The kernel's parameters for a call and its plan. */
static hm_params hm_params_of(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl) {
  hm_params prm;
  prm.io = mla_io_of(a);
  prm.io.num_slots = mla_slots_cap(a->num_slots);
  prm.scale_log2 = mla_scale_log2(a);
  prm.topk = a->topk;
  prm.num_heads = a->num_heads;
  prm.num_groups = pl->groups;
  prm.splits = pl->splits;
  prm.token_offset = 0;
  prm.num_units = (int64_t)a->num_tokens * pl->groups;
  prm.tg_masks = NULL;
  prm.gate = NULL;
  return prm;
}

/* The rows the call selects (the plan's convert_rows 2), converted into the workspace (dsa_select_layout)
 * by the five kernels above; conv then reads those rows, the entries rewritten, gated on the count
 * fitting DSA_SELECT_ROWS (ctl[1]), and prm (unconverted) gated on its not fitting (ctl[2]). */
static cudaError_t hm_select_rows(const dsa_sparse_mla_args *a, hm_params &prm, hm_params &conv, void *workspace,
                                  cudaStream_t stream) {
  const dsa_select_layout lay = dsa_select_layout_of(a);
  uint8_t *ws = (uint8_t *)workspace;
  uint32_t *bits = (uint32_t *)(ws + lay.bits_off);
  uint2 *words = (uint2 *)(ws + lay.words_off);
  uint32_t *bprefix = (uint32_t *)(ws + lay.bprefix_off);
  int *ctl = (int *)(ws + lay.ctl_off);
  int32_t *idx = (int32_t *)(ws + lay.idx_off), *row_slots = (int32_t *)(ws + lay.row_slots_off);
  const uint32_t entries = (uint32_t)((int64_t)a->num_tokens * a->topk); /* a round's: <= 2^24 */
  /* mark and remap: a batch of entries a thread, at most a wave of 256-thread CTAs (grid-stride beyond) */
  const int64_t blocks = entries / (256 * HM_SELECT_BATCH) + 1, max_blocks = DSA_PLAN_MAX_SMS * 8;
  const unsigned grid = (unsigned)(blocks < max_blocks ? blocks : max_blocks);
  cudaError_t err = cudaMemsetAsync(bits, 0, (size_t)lay.words * 4, stream);
  if (err == cudaSuccess)
    err = dsa_launch(hm_select_mark_kernel, dim3(grid), 256, 0, stream, false, prm.io, entries, a->topk, bits);
  if (err == cudaSuccess)
    err = dsa_launch(hm_select_count_kernel, dim3((unsigned)lay.blocks), HM_SELECT_THREADS, 0, stream, false,
                     (const uint32_t *)bits, lay.words, words, bprefix);
  if (err == cudaSuccess)
    err = dsa_launch(hm_select_total_kernel, dim3(1), HM_SELECT_THREADS, 0, stream, false, bprefix, lay.blocks, ctl);
  if (err == cudaSuccess)
    err = dsa_launch(hm_select_list_kernel, dim3((unsigned)((lay.words + 255) / 256)), 256, 0, stream, false, words,
                     (const uint32_t *)bprefix, lay.words, (const int *)ctl, row_slots);
  if (err == cudaSuccess)
    err = dsa_launch(hm_select_convert_kernel, dim3((unsigned)(DSA_SELECT_ROWS / (HM_CONVERT_THREADS / 32))),
                     HM_CONVERT_THREADS, 0, stream, false, (const uint8_t *)a->kv_cache, (const int32_t *)row_slots,
                     (const int *)ctl, ws, (float *)(ws + DSA_CONVERTED_COLF_OFF(DSA_SELECT_ROWS)));
  if (err == cudaSuccess)
    err = dsa_launch(hm_select_remap_kernel, dim3(grid), 256, 0, stream, false, prm.io, entries, a->topk,
                     (const uint2 *)words, (const int *)ctl, idx);
  if (err != cudaSuccess) return err;
  conv = prm;
  conv.io.kv = ws; /* the factors after the rows: hm_converted_factors */
  conv.io.kv_stride = MLA_QK_DIM;
  conv.io.num_slots = DSA_SELECT_ROWS;
  conv.io.indices = idx;
  conv.io.indices_stride = a->topk;
  conv.gate = ctl + 1; /* the count fits */
  prm.gate = ctl + 2;  /* it does not */
  return cudaSuccess;
}

/* Packed FP8 KV converted first (the plan's convert_rows): every slot into the workspace's start as the
 * f16 tile row heads_as_m's FP8 producer would make (hm_convert_rows_kernel; the same bits), prm then
 * reading those rows as 16-bit ones with their factors 2^K. The bytes taken: dsa_plan_attention_converted_bytes. */
static cudaError_t hm_convert_rows(const dsa_sparse_mla_args *a, hm_params &prm, void *workspace, cudaStream_t stream) {
  const int64_t slots = prm.io.num_slots;
  uint8_t *rows = (uint8_t *)workspace;
  float *colf = (float *)(rows + DSA_CONVERTED_COLF_OFF(slots));
  if (slots > 0) {
    const int64_t blocks = (slots + HM_CONVERT_THREADS / 32 - 1) / (HM_CONVERT_THREADS / 32);
    const cudaError_t err = dsa_launch(hm_convert_rows_kernel, dim3((unsigned)blocks), HM_CONVERT_THREADS, 0, stream,
                                       false, (const uint8_t *)a->kv_cache, slots, rows, colf);
    if (err != cudaSuccess) return err;
  }
  prm.io.kv = rows; /* the factors after them: hm_converted_factors */
  prm.io.kv_stride = MLA_QK_DIM;
  return cudaSuccess;
}

/* ctas > 0 (the plan's persistent grid: bf16 or converted FP8 rows, unsplit): one launch of min(units,
 * ctas) CTAs looping over the units; else a CTA per unit and split. */
template <bool FP8, bool SEESAW, bool CONVERTED, bool GATED = false>
static cudaError_t hm_launch(hm_params prm, int64_t num_tokens, int ctas, cudaStream_t stream) {
  static dsa_smem_cache cache, cache_units;
  if constexpr (GATED && FP8 && !SEESAW && !CONVERTED) { /* the selected rows' fallback */
    if (prm.splits == 1) {
      prm.token_offset = 0;
      prm.num_units = num_tokens * prm.num_groups;
      const int64_t grid = prm.num_units < DSA_PLAN_MAX_SMS ? prm.num_units : DSA_PLAN_MAX_SMS;
      return dsa_launch_smem(hm_attention_units_kernel<true, true>, &cache_units, dim3((unsigned)grid), HM_THREADS,
                             HM_SMEM, stream, true, prm);
    }
  }
  if (ctas > 0 && prm.splits == 1 && (!FP8 || CONVERTED) && !SEESAW) { /* the persistent grid */
    prm.token_offset = 0;
    prm.num_units = num_tokens * prm.num_groups;
    const int64_t grid = prm.num_units < ctas ? prm.num_units : ctas;
    return dsa_launch_smem(hm_attention_units_kernel<FP8>, &cache_units, dim3((unsigned)grid), HM_THREADS, HM_SMEM,
                           stream, true, prm);
  }
  const int64_t per_token = (int64_t)prm.num_groups * prm.splits;
  return mla_launch_tokens(num_tokens, per_token, [&](int64_t t0, int64_t nt) {
    prm.token_offset = t0;
    prm.num_units = nt * prm.num_groups;
    /* the splits of a (token, group) are adjacent CTAs: one cluster */
    return dsa_launch_smem_cluster(hm_attention_kernel<FP8, SEESAW, CONVERTED, 0, GATED>, &cache,
                                   dim3((unsigned)(nt * per_token)), HM_THREADS, HM_SMEM, stream, true,
                                   prm.splits > 1 ? (unsigned)prm.splits : 0u, prm);
  });
}

/* Token groups: per launch of the plan's groups, the unions (token_groups.cu) into the workspace (after
 * the converted rows, if any), then a CTA a group; each group is a token of 64 heads for q, out and lse
 * (its tokens' rows are consecutive), the workspace's unions its index rows. */
template <bool FP8, bool SEESAW, bool CONVERTED, int TG, bool GATED = false>
static cudaError_t hm_tg_launch(const hm_params &prm, int64_t groups, cudaStream_t stream) {
  static dsa_smem_cache cache;
  return dsa_launch_smem_cluster(hm_attention_kernel<FP8, SEESAW, CONVERTED, TG, GATED>, &cache, dim3((unsigned)groups),
                                 HM_THREADS, HM_SMEM, stream, true, 0u, prm);
}

/* Packed FP8 rows converted first: the seesaw's consumers (its producer copies rows). H100, 2026-12-06,
 * the GLM chunk over its 128k context, heads_as_m's consumers / the seesaw's, us: 16 heads 2,578 / 2,481
 * distinct, 1,071 / 1,046 90 % shared; 8 heads 2,543 / 2,444, 944 / 927. Over bf16 rows the seesaw's
 * gained nothing (16 heads 2,321 / 2,327, 949 / 941): heads_as_m's, as unconverted FP8
 * (docs/bench/attn-token-groups-seesaw-h100-2026-12-06/). */
template <int TG>
static cudaError_t hm_tg_launch_of(bool fp8, bool converted, bool gated, const hm_params &prm, int64_t groups,
                                   cudaStream_t stream) {
  if (!fp8) return hm_tg_launch<false, false, false, TG>(prm, groups, stream);
  if (gated) /* the selected rows' two launches */
    return converted ? hm_tg_launch<true, true, true, TG, true>(prm, groups, stream)
                     : hm_tg_launch<true, false, false, TG, true>(prm, groups, stream);
  return converted ? hm_tg_launch<true, true, true, TG>(prm, groups, stream)
                   : hm_tg_launch<true, false, false, TG>(prm, groups, stream);
}

/* The token groups of a's tokens over the rows prm reads: per launch of the plan's groups, their unions of
 * a's entries (its indices, lens and num_slots) into ws, then a CTA a group. prm.gate (the selected rows):
 * both launches run only where *gate != 0. */
static int hm_tg_run(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl, hm_params prm, bool converted,
                     uint8_t *ws, cudaStream_t stream) {
  const int G = pl->token_group, H = a->num_heads; /* H: the template's heads a token (8, 16, 32) */
  const int64_t all = ((int64_t)a->num_tokens + G - 1) / G;
  const dsa_tg_layout lay = dsa_tg_layout_of(a, pl->tg_groups);
  const bool fp8 = a->kv_format == DSA_KV_FP8_PACKED, gated = prm.gate != NULL;
  prm.num_heads = HM_HEADS; /* a group: a token of 64 heads */
  prm.num_groups = 1;
  prm.splits = 1;
  prm.topk = (int)lay.cap;
  prm.io.indices = (const int32_t *)(ws + lay.slots_off);
  prm.io.indices_stride = lay.cap;
  prm.io.lens = (const int32_t *)(ws + lay.counts_off);
  prm.tg_masks = ws + lay.masks_off;
  for (int64_t g0 = 0; g0 < all; g0 += pl->tg_groups) {
    const int64_t n = all - g0 < pl->tg_groups ? all - g0 : pl->tg_groups;
    int err = dsa_attention_tg_union_launch(a, g0, n, &lay, ws, prm.gate, stream);
    if (err) return err;
    prm.token_offset = g0;
    prm.num_units = n;
    cudaError_t e;
    if (H == 8) e = hm_tg_launch_of<8>(fp8, converted, gated, prm, n, stream);
    else if (H == 16) e = hm_tg_launch_of<16>(fp8, converted, gated, prm, n, stream);
    else e = hm_tg_launch_of<32>(fp8, converted, gated, prm, n, stream);
    if (e != cudaSuccess) return (int)e;
  }
  return 0;
}

/* The arguments of tokens [t0, t0 + nt) of a: q, out, lse, indices and lens from t0. */
static dsa_sparse_mla_args hm_args_tokens(const dsa_sparse_mla_args *a, int64_t t0, int64_t nt) {
  dsa_sparse_mla_args r = *a;
  const int64_t H = a->num_heads;
  r.num_tokens = (int)nt;
  r.q = (const __nv_bfloat16 *)a->q + t0 * H * MLA_QK_DIM;
  r.out = (__nv_bfloat16 *)a->out + t0 * H * MLA_V_DIM;
  if (a->lse) r.lse = a->lse + t0 * H;
  r.indices = a->indices + t0 * a->indices_stride;
  if (a->lens) r.lens = a->lens + t0;
  return r;
}

extern "C" int dsa_attention_token_groups_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl,
                                                 void *workspace, cudaStream_t stream) {
  if (a->num_tokens <= 0) return 0;
  const bool fp8 = a->kv_format == DSA_KV_FP8_PACKED;
  uint8_t *ws = (uint8_t *)workspace + dsa_plan_attention_converted_bytes(a, pl); /* the unions */
  if (fp8 && pl->convert_rows == 2) {
    /* the rows selected (hm_select_rows), by rounds: their unions and groups over the converted rows (the
     * rewritten entries, DSA_SELECT_ROWS slots), gated on the count fitting, else the call's own unions and
     * groups unconverted; both write the same unions, one of them runs */
    const int64_t round = dsa_select_round_tokens(a);
    for (int64_t t0 = 0; t0 < a->num_tokens; t0 += round) {
      const dsa_sparse_mla_args r = hm_args_tokens(a, t0, a->num_tokens - t0 < round ? a->num_tokens - t0 : round);
      hm_params rp = hm_params_of(&r, pl), conv;
      const cudaError_t e = hm_select_rows(&r, rp, conv, workspace, stream);
      if (e != cudaSuccess) return (int)e;
      dsa_sparse_mla_args u = r; /* the rewritten entries: [tokens, topk], -1 past lens */
      u.indices = conv.io.indices;
      u.indices_stride = r.topk;
      u.num_slots = DSA_SELECT_ROWS;
      int err = hm_tg_run(&u, pl, conv, true, ws, stream);
      if (!err) err = hm_tg_run(&r, pl, rp, false, ws, stream);
      if (err) return err;
    }
    return 0;
  }
  const bool converted = fp8 && pl->convert_rows;
  hm_params prm = hm_params_of(a, pl);
  if (converted) {
    const cudaError_t e = hm_convert_rows(a, prm, workspace, stream);
    if (e != cudaSuccess) return (int)e;
  }
  return hm_tg_run(a, pl, prm, converted, ws, stream);
}

extern "C" int dsa_attention_heads_as_m_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl,
                                               void *workspace, cudaStream_t stream) {
  if (a->num_tokens <= 0) return 0;
  hm_params prm = hm_params_of(a, pl);
  const bool fp8 = a->kv_format == DSA_KV_FP8_PACKED, seesaw = pl->kernel == DSA_ATTN_SEESAW;
  cudaError_t err;
  if (fp8 && pl->convert_rows == 2) { /* the seesaw on the rows selected, else heads_as_m unconverted, by rounds
                                       (unsplit: its persistent grid, which gated out costs a wave) */
    err = cudaSuccess;
    const int64_t round = dsa_select_round_tokens(a);
    for (int64_t t0 = 0; t0 < a->num_tokens && err == cudaSuccess; t0 += round) {
      const int64_t nt = a->num_tokens - t0 < round ? a->num_tokens - t0 : round;
      const dsa_sparse_mla_args r = hm_args_tokens(a, t0, nt);
      hm_params rp = hm_params_of(&r, pl), conv;
      err = hm_select_rows(&r, rp, conv, workspace, stream);
      if (err == cudaSuccess) err = hm_launch<true, true, true, true>(conv, nt, 0, stream);
      if (err == cudaSuccess) err = hm_launch<true, false, false, true>(rp, nt, 0, stream);
    }
  } else if (fp8 && pl->convert_rows) { /* the slots converted into the workspace, then copied */
    err = hm_convert_rows(a, prm, workspace, stream);
    if (err != cudaSuccess) return (int)err;
    err = seesaw ? hm_launch<true, true, true>(prm, a->num_tokens, pl->ctas, stream)
                 : hm_launch<true, false, true>(prm, a->num_tokens, pl->ctas, stream);
  } else if (fp8)
    err = hm_launch<true, false, false>(prm, a->num_tokens, pl->ctas, stream);
  else if (seesaw)
    err = hm_launch<false, true, false>(prm, a->num_tokens, pl->ctas, stream);
  else
    err = hm_launch<false, false, false>(prm, a->num_tokens, pl->ctas, stream);
  return (int)err;
}
