/*
 * v3_sm90.cu — sparse MLA attention forward on Hopper tensor cores, v3: heads as M (64-head tiles).
 *
 * Math (as v1_mma.cu), per token t and head h over the valid entries i of indices[t]:
 *   s_i = softmax_scale * q[t,h,0:576] . k_idx[0:576],  out[t,h] = softmax(s) . v (v = k[0:512]),
 *   lse[t,h] = m + ln(sum exp(s_i - m)); no valid entry: out = 0, lse = -inf.
 *
 * One CTA = one token x 64 heads (heads past H are zero rows) x one split: the token's index entries
 * in chunks of 64 rows, all of them, or below a wave of CTAs a contiguous share (splits = 2, 4, 8:
 * the CTAs of a (token, group) form a cluster and merge their (m, l, O) through distributed shared
 * memory in rank order, v3_merge_splits; no workspace).
 *   qk_tile  S[64 heads, 64 rows] = Q[64, 576] . K^T      wgmma m64n64k16; A = Q (no swizzle), B = the
 *                                                        tile (128-byte swizzle), both K-major
 *   pv_tile  O[64, 512] += P[64, 64] . V[64, 512]         four m64n256k16 k-steps per warpgroup on
 *                                                        its 256 output dims; A = P, B = the same tile
 *                                                        read MN-major
 * Roles (384 threads): warpgroup 0 runs QK, the online softmax, P to shared memory and PV for dims
 * 0..255; warpgroup 1 runs PV for dims 256..511 with the P and alpha warpgroup 0 publishes (named
 * barriers, bar.sync on both sides: 1 "P ready", 2 "P free", 3 Q loaded, 4 epilogue); warpgroup 2
 * gathers rows into a two-tile full/empty mbarrier ring. Registers (setmaxnreg): V3_REG_*.
 * Gathers: the 8 lanes of a row cover one 128-byte line of it per instruction (whole L2 lines) and one
 * swizzled 128-byte tile row (conflict-free stores).
 *   bf16 KV   cp.async straight into the tile, up to two chunks in flight; a landed chunk is
 *             published before the producer blocks on the next tile (mbarrier.test_wait first).
 *   FP8 KV    the 512 e4m3 bytes of a row (four lines = its four scale groups) wait in registers one
 *             chunk ahead; converted to f16 as e4m3 x f16(scale_g 2^-K_r) with K_r the largest binary
 *             exponent of the row's scales (one rounding to 11 bits, values < 896); the rope (bf16)
 *             lands by cp.async and is scaled by 2^-K_r in place (exact).
 * Numerics, FP8: Q's latent dims are f16 and its rope dims bf16, both times 2^-e_h per head (e_h puts
 * the head's largest |q| in [2^14, 2^15): exact for bf16 input); QK mixes f16 (latent) and bf16
 * (rope) wgmmas into one fp32 accumulator; the score is S 2^e_h 2^K_r (powers of two); P goes to PV
 * in f16 times 2^K_r. bf16 KV: everything bf16, rows exact. P is rounded to the 16-bit type, as in
 * every tensor-core attention.
 * Shared memory (227 KiB, the limit): Q 72 KiB, two tiles of 72 KiB, P 8 KiB, per-chunk row slots and
 * factors, the barriers. Everything is fixed-order: same input, same bits.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

#include "dsa_kernels.h"
#include "launch.cuh"
#include "ptx.cuh"
#include "rows.cuh"

#define V3_THREADS 384 /* 2 consumer warpgroups + 1 producer warpgroup */
#define V3_HEADS 64
#define V3_ROWS 64
#define V3_RG 9216 /* Q: one 8-head group of 576 dims = 72 core matrices of 128 B */
#define V3_SEG 8192 /* tile: one 64-dim segment of 64 rows, 128-byte swizzle (8 atoms of 1 KB) */
#define V3_TILE (9 * V3_SEG)
#define V3_Q_OFF 0
#define V3_TILE_OFF (V3_Q_OFF + 8 * V3_RG)
#define V3_P_OFF (V3_TILE_OFF + 2 * V3_TILE)     /* P [8 head groups][8 row blocks][128 B] */
#define V3_VALID_OFF (V3_P_OFF + 8 * 1024)      /* int [2][64] */
#define V3_ALPHA_OFF (V3_VALID_OFF + 2 * 64 * 4) /* float [64] */
#define V3_L_OFF (V3_ALPHA_OFF + 64 * 4)         /* float [64] */
#define V3_COLF_OFF (V3_L_OFF + 64 * 4)          /* float [2][64]: FP8 rows' power-of-two factor 2^K */
#define V3_QEXP_OFF (V3_COLF_OFF + 2 * 64 * 4)   /* float [64]: FP8 path's per-head q factor 2^e */
#define V3_BAR_OFF (V3_QEXP_OFF + 64 * 4)        /* full[2], empty[2] */
#define V3_ML_OFF V3_ALPHA_OFF /* splits, after the chunks: float2 [64] (m, l) over alpha and l */
#define V3_OST_OFF V3_TILE_OFF /* splits, after the chunks: unnormalised O, fp32 [64][V3_OST] over the tiles */
#define V3_OST 520             /* row stride (floats): a warp's float2 stores take the minimum 2 wavefronts */
static_assert(64 * V3_OST * 4 <= 2 * V3_TILE, "O staging fits in the tiles");
#define V3_SMEM_USED (V3_BAR_OFF + 32)
#define V3_SMEM (V3_SMEM_USED + 1024) /* + slack to align the base to 1 KB (swizzle atoms) */
static_assert(V3_SMEM <= 227 * 1024, "shared memory");
#define V3_FP8_ROW 656
/* setmaxnreg per warpgroup (QK + softmax, PV only, producer): 128 x (sum) <= 384 x 168 = 64512 */
#define V3_REG_QK(FP8) 208
#define V3_REG_PV(FP8) ((FP8) ? 168 : 216)
#define V3_REG_PRODUCER(FP8) ((FP8) ? 128 : 80)
static_assert(V3_REG_QK(true) + V3_REG_PV(true) + V3_REG_PRODUCER(true) <= 504, "registers");
static_assert(V3_REG_QK(false) + V3_REG_PV(false) + V3_REG_PRODUCER(false) <= 504, "registers");

typedef struct {
  const __nv_bfloat16 *q; /* [T, H, 576] bf16 */
  const void *kv;         /* bf16 [num_slots, kv_stride] or packed FP8 [num_slots] x 656 B */
  int64_t kv_stride;      /* bf16: elements between rows (multiple of 8) */
  int64_t num_slots;      /* capped at 2^31 (mla_slots_cap) */
  const int32_t *indices; /* [T, indices_stride] global slots */
  int64_t indices_stride;
  const int32_t *lens;    /* [T] or NULL */
  __nv_bfloat16 *out;     /* [T, H, 512] bf16 */
  float *lse;             /* [T, H] float32, or NULL */
  float scale_log2;       /* softmax_scale * log2(e) */
  int topk, num_heads;
  int num_groups;         /* ceil(H / 64): head groups per token */
  int splits;             /* CTAs per (token, group), one cluster, each a contiguous share of the chunks */
  int64_t token_offset;   /* first token of this launch (grids past 2^31 - 1 CTAs are cut) */
#ifdef DSA_V3_MODES
  int mode; /* tools/mla_v3_modes.cu, bits: 1 no row loads, 2 no MMA / softmax */
#endif
} v3_params;
#ifdef DSA_V3_MODES
#define V3_MODE(p) ((p).mode)
/* SM clock (32 bits: differences wrap correctly) at phase boundaries of CTA 0, chunks < 32
 * (tools/mla_v3_modes.cu prints them): 0 full seen, 1 QK done, 2 softmax done, 3 P free, 4 P stored,
 * 5 PV done (warpgroup 0); 6 full seen, 7 P ready, 8 PV done (warpgroup 1); 9 tile free,
 * 10 chunk published, 11 FP8: rows converted (producer) */
__device__ unsigned g_v3_trace[32][12];
#define V3_STAMP(c, k)                                                                             \
  do {                                                                                             \
    if (blockIdx.x == 0 && (threadIdx.x & 127) == 0 && (c) < 32) g_v3_trace[c][k] = (unsigned)clock(); \
  } while (0)
#else
#define V3_MODE(p) 0
#define V3_STAMP(c, k) \
  do {                 \
  } while (0)
#endif

/* Byte offset of 16-byte chunk `chunk` (0..71, 8 dims each) of tile row r: 128-byte swizzle. */
__device__ __forceinline__ uint32_t v3_tile_off(int r, int chunk) {
  return (uint32_t)((chunk >> 3) * V3_SEG + (r >> 3) * 1024 + (r & 7) * 128 + (((chunk & 7) ^ (r & 7)) << 4));
}

/* 16 e4m3 values x mult (f16x2, both halves the same) -> 16 f16 = two 16-byte chunks of a swizzled
 * tile row, stored at addr + off_first and addr + off_second (the caller orders the two chunks so
 * that the eight lanes of a row hit eight different 16-byte bank groups in each store). e4m3 -> f16
 * is exact; the product is rounded once. */
__device__ __forceinline__ void v3_store_fp8(uint32_t addr, uint32_t off_first, uint32_t off_second, bool odd_first,
                                             uint4 v, uint32_t mult) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t o[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    ptx_e4m3x4_to_f16x2x2(w[i], o[2 * i], o[2 * i + 1]);
    o[2 * i] = ptx_mul_f16x2(o[2 * i], mult);
    o[2 * i + 1] = ptx_mul_f16x2(o[2 * i + 1], mult);
  }
  ptx_st_shared_v4(addr + off_first, odd_first ? o[4] : o[0], odd_first ? o[5] : o[1], odd_first ? o[6] : o[2],
                   odd_first ? o[7] : o[3]);
  ptx_st_shared_v4(addr + off_second, odd_first ? o[0] : o[4], odd_first ? o[1] : o[5], odd_first ? o[2] : o[6],
                   odd_first ? o[3] : o[7]);
}

/* What both consumer warpgroups share. */
typedef struct {
  uint32_t q_u32, tile_u32, p_u32, bar_full, bar_empty; /* shared-window addresses */
  int *valid_s;                                          /* [2][64] slot of each tile row, -1 = skipped */
  float *alpha_s, *l_s;                                  /* [64] per-head rescale of this chunk; final sums */
  const float *colf_s, *qexp_s;                          /* FP8: [2][64] row factors, [64] head factors */
  int n, head0, splits;                                  /* chunks; first head of this CTA; CTAs a cluster */
  int64_t t;                                             /* token */
} v3_ctx;

/* The 16-bit type of the tile, Q and P: bf16 for bf16 KV (exact rows); for FP8 KV the latent dims
 * and P are f16 (e4m3 x scale rounded once to 11 significant bits, 4x finer than bf16; ranges kept
 * by power-of-two factors) and the rope dims stay bf16. */
template <bool F16>
__device__ __forceinline__ uint32_t v3_pack(float lo, float hi) {
  return F16 ? ptx_f32x2_to_f16x2(lo, hi) : ptx_f32x2_to_bf16x2(lo, hi);
}
/* f16 is a constant once the caller's k loop is unrolled */
__device__ __forceinline__ void v3_wgmma_n64(bool f16, float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  if (f16) ptx_wgmma_m64n64k16_f16<0, 0>(d, da, db, scale_d);
  else ptx_wgmma_m64n64k16_bf16<0, 0>(d, da, db, scale_d);
}
/* 2^e as a float, e clamped to the normal range */
__device__ __forceinline__ float v3_pow2(int e) { return __int_as_float((min(max(e, -126), 127) + 127) << 23); }
/* floor(log2(x)) of a positive normal float (0 and denormals: -127) */
__device__ __forceinline__ int v3_ilogb(float x) { return ((__float_as_int(x) >> 23) & 0xFF) - 127; }

/* pv_tile: O[64 heads, 256 dims of this warpgroup] += P[64, 64 rows] . V[64 rows, those dims]; the
 * tile is read MN-major through the same 128-byte swizzle it was written with. */
template <bool F16>
__device__ __forceinline__ void v3_pv_issue(float (&o)[128], uint32_t p_u32, uint32_t kv_u32, int dbase) {
  const uint64_t dp = ptx_wgmma_desc(p_u32, 128, 1024), dv = ptx_wgmma_desc_sw128(kv_u32 + (dbase / 64) * V3_SEG, V3_SEG, 1024);
  ptx_reg_fence(o);
  ptx_wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    if (F16) ptx_wgmma_m64n256k16_f16<0, 1>(o, dp + 16 * ks, dv + 128 * ks, 1);
    else ptx_wgmma_m64n256k16_bf16<0, 1>(o, dp + 16 * ks, dv + 128 * ks, 1);
  }
  ptx_wgmma_commit();
}

__device__ __forceinline__ void v3_rescale(float (&o)[128], float a0, float a1) {
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

/* Normalised O half -> out (bf16), heads past H skipped. */
__device__ __forceinline__ void v3_store_out(const v3_params &p, const v3_ctx &x, const float (&o)[128], int h0, int qd,
                                             int dbase) {
  const float L0 = x.l_s[h0], L1 = x.l_s[h0 + 8];
  const float i0 = L0 > 0.f ? 1.f / L0 : 0.f, i1 = L1 > 0.f ? 1.f / L1 : 0.f;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int h = x.head0 + h0 + 8 * hf;
    if (h >= p.num_heads) continue;
    const float inv = hf ? i1 : i0;
    __nv_bfloat16 *dst = p.out + (x.t * p.num_heads + h) * 512 + dbase + 2 * qd;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      *(uint32_t *)(dst + 8 * j) = ptx_f32x2_to_bf16x2(o[4 * j + 2 * hf] * inv, o[4 * j + 2 * hf + 1] * inv);
  }
}

/* Splits: this warpgroup's unnormalised O half to the staging area (the tiles, now free). */
__device__ __forceinline__ void v3_stage_o(const v3_ctx &x, const float (&o)[128], int h0, int qd, int dbase) {
  float *ost = (float *)__cvta_shared_to_generic(x.tile_u32); /* V3_OST_OFF */
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    *(float2 *)(ost + h0 * V3_OST + dbase + 8 * j + 2 * qd) = make_float2(o[4 * j], o[4 * j + 1]);
    *(float2 *)(ost + (h0 + 8) * V3_OST + dbase + 8 * j + 2 * qd) = make_float2(o[4 * j + 2], o[4 * j + 3]);
  }
}

/* Warpgroup 0: qk_tile, online_softmax, P to shared memory, PV for dims 0..255; the lse and the
 * final sums for both warpgroups. Thread (w, lane) holds head rows h0 = 16w + lane/4 and h0 + 8. */
template <bool FP8>
__device__ __forceinline__ void v3_consumer_qk(const v3_params &p, const v3_ctx &x, int w, int lane) {
  const int g = lane >> 2, qd = lane & 3, h0 = 16 * w + g;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  const float qs0 = FP8 ? p.scale_log2 * x.qexp_s[h0] : 0.f, qs1 = FP8 ? p.scale_log2 * x.qexp_s[h0 + 8] : 0.f;
  for (int c = 0; c < x.n; ++c) {
    const int b = c & 1;
    ptx_mbar_wait(x.bar_full + 8 * b, (c >> 1) & 1);
    V3_STAMP(c, 0);
    const uint32_t kv_u32 = x.tile_u32 + b * V3_TILE;
    if (V3_MODE(p) & 2) {
      ptx_mbar_arrive(x.bar_empty + 8 * b);
      continue;
    }
    /* ---- qk_tile: S[64 heads, 64 rows]; Q no-swizzle K-major, tile 128B-swizzle K-major; the
     * descriptors advance by adding (byte offset >> 4) to the start-address field ---- */
    float s[32];
    const uint64_t dq = ptx_wgmma_desc(x.q_u32, 128, V3_RG), dk = ptx_wgmma_desc_sw128(kv_u32, 16, 1024);
    ptx_wgmma_fence();
#pragma unroll
    for (int k = 0; k < 36; ++k)
      v3_wgmma_n64(FP8 && k < 32, s, dq + 16 * k, dk + (((k >> 2) * V3_SEG + (k & 3) * 32) >> 4), k > 0);
    ptx_wgmma_commit();
    ptx_wgmma_wait<0>();
    V3_STAMP(c, 1);
    ptx_reg_fence(s);
    ptx_reg_fence(o);
    /* ---- online_softmax: a head row lives in one lane quad ---- */
    /* FP8: S = (Q 2^-e_h).(K 2^-K_r): the score is S 2^e_h 2^K_r, both powers of two (exact) */
    const int *valid = x.valid_s + b * V3_ROWS;
    const float *colf = x.colf_s + b * V3_ROWS;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * j + 2 * qd + (e & 1);
        const bool ok = valid[col] >= 0;
        const float f = FP8 ? ((e & 2) ? qs1 : qs0) * colf[col] : p.scale_log2;
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
    const float a0 = ptx_ex2(m0 - b0), a1 = ptx_ex2(m1 - b1);
    m0 = n0;
    m1 = n1;
    float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[4 * j + e] = ptx_ex2(s[4 * j + e] - ((e & 2) ? b1 : b0));
        if (e < 2) ps0 += s[4 * j + e];
        else ps1 += s[4 * j + e];
      }
    l0 = l0 * a0 + ps0; /* quad-partial sums, reduced at the end */
    l1 = l1 * a1 + ps1;
    if (FP8) { /* PV reads rows scaled by 2^-K_r: P's column r takes 2^K_r (clamped to the f16 range) */
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[4 * j + e] = fminf(s[4 * j + e] * colf[8 * j + 2 * qd + (e & 1)], 65504.f);
    }
    /* ---- P (bf16) and alpha to shared memory, for both warpgroups' PV ---- */
    V3_STAMP(c, 2);
    if (c >= 1) ptx_bar_sync(2, 256); /* warpgroup 1 is done with P(c-1) and alpha(c-1) */
    V3_STAMP(c, 3);
    {
      const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        /* matrices: (heads 16w.., rows 16jp..), (heads 16w+8.., 16jp..), (16w.., 16jp+8..), (16w+8.., 16jp+8..) */
        const uint32_t x0 = v3_pack<FP8>(s[8 * jp + 0], s[8 * jp + 1]);
        const uint32_t x1 = v3_pack<FP8>(s[8 * jp + 2], s[8 * jp + 3]);
        const uint32_t x2 = v3_pack<FP8>(s[8 * jp + 4], s[8 * jp + 5]);
        const uint32_t x3 = v3_pack<FP8>(s[8 * jp + 6], s[8 * jp + 7]);
        const uint32_t addr = x.p_u32 + (2 * w + (mi & 1)) * 1024 + (2 * jp + (mi >> 1)) * 128 + ri * 16;
        ptx_stmatrix_x4(addr, x0, x1, x2, x3);
      }
    }
    if (qd == 0) {
      x.alpha_s[h0] = a0;
      x.alpha_s[h0 + 8] = a1;
    }
    ptx_fence_proxy_async_smem();
    ptx_bar_sync(1, 256); /* P(c), alpha(c) ready for both warpgroups' PV (warpgroup 1 is already waiting) */
    V3_STAMP(c, 4);
    v3_rescale(o, a0, a1);
    v3_pv_issue<FP8>(o, x.p_u32, kv_u32, 0);
    ptx_wgmma_wait<0>();
    V3_STAMP(c, 5);
    ptx_reg_fence(o);
    ptx_mbar_arrive(x.bar_empty + 8 * b);
  }
  ptx_griddep_launch_dependents();
  /* ---- epilogue: quad sums -> l for both warpgroups, lse ---- */
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (x.splits > 1) { /* (m, l) and O to shared memory for the cluster merge (v3_merge_splits) */
    ptx_bar_sync(4, 256); /* warpgroup 1 has read its last alpha: (m, l) may overwrite it */
    if (qd == 0) {
      float2 *ml = (float2 *)x.alpha_s; /* V3_ML_OFF */
      ml[h0] = make_float2(m0, l0);
      ml[h0 + 8] = make_float2(m1, l1);
    }
    v3_stage_o(x, o, h0, qd, 0);
    return;
  }
  if (qd == 0) {
    x.l_s[h0] = l0;
    x.l_s[h0 + 8] = l1;
    const int H = p.num_heads;
    if (p.lse) {
      if (x.head0 + h0 < H) p.lse[x.t * H + x.head0 + h0] = mla_lse(m0, l0);
      if (x.head0 + h0 + 8 < H)
        p.lse[x.t * H + x.head0 + h0 + 8] = mla_lse(m1, l1);
    }
  }
  ptx_bar_sync(4, 256);
  v3_store_out(p, x, o, h0, qd, 0);
}

/* Warpgroup 1: PV for dims 256..511 with the P and alpha warpgroup 0 publishes. */
template <bool FP8>
__device__ __forceinline__ void v3_consumer_pv(const v3_params &p, const v3_ctx &x, int w, int lane) {
  const int g = lane >> 2, qd = lane & 3, h0 = 16 * w + g;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  for (int c = 0; c < x.n; ++c) {
    const int b = c & 1;
    ptx_mbar_wait(x.bar_full + 8 * b, (c >> 1) & 1);
    V3_STAMP(c, 6);
    if (!(V3_MODE(p) & 2)) {
      ptx_bar_sync(1, 256);
      V3_STAMP(c, 7);
      v3_rescale(o, x.alpha_s[h0], x.alpha_s[h0 + 8]);
      v3_pv_issue<FP8>(o, x.p_u32, x.tile_u32 + b * V3_TILE, 256);
      ptx_wgmma_wait<0>();
      V3_STAMP(c, 8);
      ptx_reg_fence(o);
    }
    ptx_mbar_arrive(x.bar_empty + 8 * b);
    /* done with P(c) and alpha(c): warpgroup 0 may write the next ones (both sides bar.sync, so
     * the hand-off is one a race checker can follow) */
    if (!(V3_MODE(p) & 2) && c + 1 < x.n) ptx_bar_sync(2, 256);
  }
  ptx_bar_sync(4, 256);
  if (x.splits > 1) v3_stage_o(x, o, h0, qd, 256);
  else v3_store_out(p, x, o, h0, qd, 256);
}

/* Splits: merge the cluster's (m, l, O) through distributed shared memory, in rank order (the same
 * bits whichever CTA computes them): rank r writes dims [r 512 / S, (r + 1) 512 / S) of every head of
 * its group, and rank 0 the lse. A split without entries (l = 0) contributes nothing. Called by the
 * 128 threads of warpgroup 0 between two cluster barriers. */
template <int S>
__device__ __forceinline__ void v3_merge_splits(const v3_params &p, uint32_t s_u32, int64_t t, int head0, int ctid) {
  const int H = p.num_heads;
  const uint32_t rank = ptx_cluster_ctarank();
  constexpr int lq = 7 - (S == 8 ? 3 : S == 4 ? 2 : 1); /* log2 of the float4 columns a rank writes */
  const int q4 = 1 << lq;
#pragma unroll 4 /* several peers' round trips in flight a thread */
  for (int u = ctid; u < (V3_HEADS << lq); u += 128) {
    const int h = u >> lq, d = 4 * ((int)rank * q4 + (u & (q4 - 1)));
    if (head0 + h >= H) continue;
    float2 ml[S];
    float4 ov[S];
#pragma unroll
    for (int r = 0; r < S; ++r) {
      ml[r] = ptx_ld_cluster_f32x2(ptx_mapa(s_u32 + V3_ML_OFF + h * 8, r));
      ov[r] = ptx_ld_cluster_f32x4(ptx_mapa(s_u32 + V3_OST_OFF + (h * V3_OST + d) * 4, r));
    }
    float M = -INFINITY;
#pragma unroll
    for (int r = 0; r < S; ++r)
      if (ml[r].y > 0.f) M = fmaxf(M, ml[r].x);
    float L = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int r = 0; r < S; ++r)
      if (ml[r].y > 0.f) {
        const float wgt = ptx_ex2(ml[r].x - M);
        L += wgt * ml[r].y;
        acc.x += wgt * ov[r].x;
        acc.y += wgt * ov[r].y;
        acc.z += wgt * ov[r].z;
        acc.w += wgt * ov[r].w;
      }
    const float inv = L > 0.f ? 1.f / L : 0.f;
    uint2 packed;
    packed.x = ptx_f32x2_to_bf16x2(acc.x * inv, acc.y * inv);
    packed.y = ptx_f32x2_to_bf16x2(acc.z * inv, acc.w * inv);
    *(uint2 *)(p.out + ((t * H + head0 + h) * 512 + d)) = packed;
    if (p.lse && d == 0) p.lse[t * H + head0 + h] = mla_lse(M, L);
  }
}

template <bool FP8>
__global__ void __launch_bounds__(V3_THREADS, 1) mla_v3_kernel(const v3_params p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw_u32 = ptx_smem_u32(smem_raw);
  const uint32_t s_u32 = (raw_u32 + 1023u) & ~1023u;
  uint8_t *smem = smem_raw + (s_u32 - raw_u32);
  const uint32_t q_u32 = s_u32 + V3_Q_OFF, tile_u32 = s_u32 + V3_TILE_OFF, p_u32 = s_u32 + V3_P_OFF;
  int *valid_s = (int *)(smem + V3_VALID_OFF);
  float *alpha_s = (float *)(smem + V3_ALPHA_OFF);
  float *l_s = (float *)(smem + V3_L_OFF);
  float *colf_s = (float *)(smem + V3_COLF_OFF), *qexp_s = (float *)(smem + V3_QEXP_OFF);
  const uint32_t bar_full = s_u32 + V3_BAR_OFF, bar_empty = bar_full + 16;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int split = (int)(blockIdx.x % p.splits); /* = the rank in the cluster */
  const int64_t unit = blockIdx.x / p.splits;
  const int group = (int)(unit % p.num_groups);
  const int64_t t = p.token_offset + unit / p.num_groups;
  const int head0 = group * V3_HEADS, H = p.num_heads;

  if (tid == 0) {
    for (int b = 0; b < 2; ++b) {
      ptx_mbar_init(bar_full + 8 * b, 128);
      ptx_mbar_init(bar_empty + 8 * b, 256);
    }
  }
  __syncthreads();
  ptx_griddep_wait();

  int end = p.topk;
  if (p.lens) end = min(end, max(__ldg(p.lens + t), 0));
  const int n_all = end > 0 ? (end + V3_ROWS - 1) / V3_ROWS : 0;
  /* this split's chunks: [c0, c0 + n) of the token's n_all; entries counted from c0's first */
  const int per = (n_all + p.splits - 1) / p.splits, c0 = split * per;
  const int n = max(0, min(per, n_all - c0));
  end = min(end - c0 * V3_ROWS, n * V3_ROWS);
  const int32_t *idx_row = p.indices + t * p.indices_stride + (int64_t)c0 * V3_ROWS;

  if (warp >= 8) {
    /* ================= producer: gather rows into the tile ring =================
     * The 8 lanes p of a row cover one 128-byte line of it per instruction (whole lines from L2)
     * and one 128-byte swizzled tile row in shared memory (conflict-free). */
    const int w = warp - 8, r4 = lane >> 3, pl = lane & 7;
    if (!FP8) {
      /* bf16: warp w (0..3) copies rows 16w + 4q + r4 (q = 0..3) by cp.async, one chunk in flight */
      ptx_setmaxnreg_dec<V3_REG_PRODUCER(false)>();
      int slot[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) slot[q] = mla_entry_slot(idx_row, 16 * w + 4 * q + r4, end, p.num_slots);
      for (int c = 0; c < n; ++c) {
        const int b = c & 1;
        /* Chunk c-1 is published when it has landed: right after chunk c is issued if c's tile is
         * already free (two chunks in flight), else before waiting for the tile, so that the
         * consumers' next QK never waits on a tile they have yet to free. */
        const bool tile_free = c < 2 || ptx_mbar_test(bar_empty + 8 * b, ((c >> 1) - 1) & 1);
        bool published = c < 1;
        if (!tile_free) {
          ptx_cp_async_wait<0>();
          ptx_fence_proxy_async_smem();
          ptx_mbar_arrive(bar_full + 8 * ((c - 1) & 1));
          V3_STAMP(c - 1, 10);
          published = true;
          ptx_mbar_wait(bar_empty + 8 * b, ((c >> 1) - 1) & 1);
        }
        V3_STAMP(c, 9);
        const uint32_t tile = tile_u32 + b * V3_TILE;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = 16 * w + 4 * q + r4;
          slot[q] = mla_slot_checked(slot[q], p.num_slots); /* loaded an iteration ago */
          if (pl == 0) valid_s[b * V3_ROWS + r] = slot[q];
          if (!(V3_MODE(p) & 1)) {
            const __nv_bfloat16 *src =
                (const __nv_bfloat16 *)p.kv + (slot[q] >= 0 ? (int64_t)slot[q] * p.kv_stride : 0) + pl * 8;
#pragma unroll
            for (int kb = 0; kb < 9; ++kb)
              ptx_cp_async_16(tile + v3_tile_off(r, 8 * kb + pl), src + 64 * kb, slot[q] >= 0 ? 16 : 0);
          }
        }
        ptx_cp_async_commit();
#pragma unroll
        for (int q = 0; q < 4; ++q) slot[q] = mla_entry_raw(idx_row, (c + 1) * V3_ROWS + 16 * w + 4 * q + r4, end);
        if (!published) { /* chunk c-1 has landed: publish it (chunk c stays in flight) */
          ptx_cp_async_wait<1>();
          ptx_fence_proxy_async_smem();
          ptx_mbar_arrive(bar_full + 8 * ((c - 1) & 1));
          V3_STAMP(c - 1, 10);
        }
      }
      if (n > 0) {
        ptx_cp_async_wait<0>();
        ptx_fence_proxy_async_smem();
        ptx_mbar_arrive(bar_full + 8 * ((n - 1) & 1));
      }
    } else {
      /* Packed FP8: warp w (0..3) owns rows 16w + 4q + r4 (q = 0..3). The 512 e4m3 bytes of a row are
       * four 128-byte lines = its four scale groups; the next chunk's lines wait in registers
       * (loaded as soon as this chunk's are converted) while the consumers work. The tile holds the
       * latent dims in f16 and the rope dims in bf16, both times 2^-K_r. */
      ptx_setmaxnreg_dec<V3_REG_PRODUCER(true)>();
      const uint8_t *kvb = (const uint8_t *)p.kv;
      uint4 pay[4][4];
      float sc[4]; /* lane p holds scale p & 3 of its row; shuffled to the row's lanes when used */
      int slot[4], nslot[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        slot[q] = mla_entry_slot(idx_row, 16 * w + 4 * q + r4, end, p.num_slots);
        const uint8_t *row = kvb + (int64_t)(slot[q] >= 0 ? slot[q] : 0) * V3_FP8_ROW;
#pragma unroll
        for (int j = 0; j < 4; ++j)
          pay[q][j] = (slot[q] >= 0 && !(V3_MODE(p) & 1)) ? ptx_ld_nc_v4(row + 128 * j + 16 * pl) : make_uint4(0, 0, 0, 0);
        sc[q] = slot[q] >= 0 ? __ldg((const float *)(row + 512) + (pl & 3)) : 0.f;
        nslot[q] = mla_entry_raw(idx_row, V3_ROWS + 16 * w + 4 * q + r4, end);
      }
      for (int c = 0; c < n; ++c) {
        const int b = c & 1;
        if (c >= 2) ptx_mbar_wait(bar_empty + 8 * b, ((c >> 1) - 1) & 1);
        V3_STAMP(c, 9);
        const uint32_t tile = tile_u32 + b * V3_TILE;
        /* rope (bf16) lands by cp.async while the e4m3 lines are converted; scaled by 2^-K_r in place below */
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint8_t *row = kvb + (int64_t)(slot[q] >= 0 ? slot[q] : 0) * V3_FP8_ROW;
          ptx_cp_async_16(tile + v3_tile_off(16 * w + 4 * q + r4, 64 + pl), row + 528 + 16 * pl, slot[q] >= 0 ? 16 : 0);
        }
        ptx_cp_async_commit();
        uint32_t fq[4]; /* 2^-K_r of each of this lane's rows, bf16x2 */
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = 16 * w + 4 * q + r4;
          /* K_r = the largest binary exponent of the row's four scales: group g is stored as
           * e4m3 x f16(scale_g 2^-K_r) (a multiplier below 2, values below 896), the rope as
           * bf16 x 2^-K_r (exact), and 2^K_r goes to the consumers for the score and P */
          int K = v3_ilogb(sc[q]);
          K = max(K, __shfl_xor_sync(0xffffffffu, K, 1));
          K = max(K, __shfl_xor_sync(0xffffffffu, K, 2));
          K = min(max(K, -100), 100);
          const float f = v3_pow2(-K);
          fq[q] = ptx_f32x2_to_bf16x2(f, f);
          const uint32_t mult_mine = ptx_f32x2_to_f16x2(sc[q] * f, sc[q] * f);
          if (pl == 0) {
            valid_s[b * V3_ROWS + r] = slot[q];
            colf_s[b * V3_ROWS + r] = v3_pow2(K);
          }
          /* row r = 16w + 4q + r4: (r >> 3) * 1024 + (r & 7) * 128 = 2048w + 512q + 128 r4; the 16 dims
           * of line j sit in segment 2j + (p >> 2), chunks 2(p & 3) and 2(p & 3) + 1, swizzled by r & 7 */
          const uint32_t addr = tile + 2048 * w + 512 * q + 128 * r4 + (pl >> 2) * V3_SEG;
          const uint32_t r7 = (uint32_t)(4 * (q & 1) + r4), ce = (uint32_t)(2 * (pl & 3));
          const uint32_t off_e = ((ce ^ r7) << 4), off_o = (((ce + 1) ^ r7) << 4);
          const bool odd_first = pl >= 4;
#pragma unroll
          for (int j = 0; j < 4; ++j)
            v3_store_fp8(addr + 2 * j * V3_SEG, odd_first ? off_o : off_e, odd_first ? off_e : off_o, odd_first, pay[q][j],
                         __shfl_sync(0xffffffffu, mult_mine, (lane & 0x18) | j));
          /* this row's registers are free: load the next chunk's row */
          nslot[q] = mla_slot_checked(nslot[q], p.num_slots); /* loaded an iteration ago */
          const uint8_t *nrow = kvb + (int64_t)(nslot[q] >= 0 ? nslot[q] : 0) * V3_FP8_ROW;
#pragma unroll
          for (int j = 0; j < 4; ++j)
            pay[q][j] = (nslot[q] >= 0 && !(V3_MODE(p) & 1)) ? ptx_ld_nc_v4(nrow + 128 * j + 16 * pl) : make_uint4(0, 0, 0, 0);
          sc[q] = nslot[q] >= 0 ? __ldg((const float *)(nrow + 512) + (pl & 3)) : 0.f;
          slot[q] = nslot[q];
          nslot[q] = mla_entry_raw(idx_row, (c + 2) * V3_ROWS + 16 * w + 4 * q + r4, end); /* checked when used */
        }
        V3_STAMP(c, 11);
        ptx_cp_async_wait<0>();
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint32_t a = tile + v3_tile_off(16 * w + 4 * q + r4, 64 + pl);
          const uint4 v = ptx_ld_shared_v4(a); /* bf16 x 2^-K_r: exact */
          ptx_st_shared_v4(a, ptx_mul_bf16x2(v.x, fq[q]), ptx_mul_bf16x2(v.y, fq[q]), ptx_mul_bf16x2(v.z, fq[q]),
                           ptx_mul_bf16x2(v.w, fq[q]));
        }
        ptx_fence_proxy_async_smem();
        ptx_mbar_arrive(bar_full + 8 * b);
        V3_STAMP(c, 10);
      }
    }
    if (p.splits > 1) { /* the merge's two cluster barriers count every thread */
      ptx_cluster_sync();
      ptx_cluster_sync();
    }
    return;
  }

  /* ================= consumers ================= */
  const int cw = warp >> 2;
  /* Q: 64 heads x 72 chunks of 16 B (no swizzle), rows past H zero */
  for (int hh = warp; hh < V3_HEADS; hh += 8) {
    const int h = head0 + hh;
    uint4 v[3];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      const int c = lane + 32 * i;
      v[i] = make_uint4(0, 0, 0, 0);
      if (h < H && c < 72) v[i] = *(const uint4 *)(p.q + ((t * H + h) * 576 + c * 8));
      if (FP8) {
        const uint32_t u[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
        for (int k = 0; k < 4; ++k)
          amax = fmaxf(amax, fmaxf(fabsf(__uint_as_float(u[k] << 16)), fabsf(__uint_as_float(u[k] & 0xFFFF0000u))));
      }
    }
    if (FP8) { /* Q times 2^-e_h, e_h putting the head's largest value in [2^14, 2^15): latent dims in
                * f16 (exact for bf16 input in range), rope dims bf16 (as the tile's rope) */
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      const int e = amax > 0.f ? max(min(v3_ilogb(amax) - 14, 100), -100) : 0;
      const float f = v3_pow2(-e);
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        const uint32_t u[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
        uint32_t r[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float lo = __uint_as_float(u[k] << 16) * f, hi = __uint_as_float(u[k] & 0xFFFF0000u) * f;
          r[k] = lane + 32 * i < 64 ? ptx_f32x2_to_f16x2(lo, hi) : ptx_f32x2_to_bf16x2(lo, hi); /* rope: bf16 */
        }
        v[i] = make_uint4(r[0], r[1], r[2], r[3]);
      }
      if (lane == 0) qexp_s[hh] = v3_pow2(e);
    }
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      const int c = lane + 32 * i;
      if (c < 72) *(uint4 *)(smem + V3_Q_OFF + (hh >> 3) * V3_RG + c * 128 + (hh & 7) * 16) = v[i];
    }
  }
  ptx_fence_proxy_async_smem();
  ptx_bar_sync(3, 256);
  v3_ctx x;
  x.q_u32 = q_u32;
  x.tile_u32 = tile_u32;
  x.p_u32 = p_u32;
  x.bar_full = bar_full;
  x.bar_empty = bar_empty;
  x.valid_s = valid_s;
  x.alpha_s = alpha_s;
  x.l_s = l_s;
  x.colf_s = colf_s;
  x.qexp_s = qexp_s;
  x.n = n;
  x.head0 = head0;
  x.splits = p.splits;
  x.t = t;
  if (cw == 0) {
    ptx_setmaxnreg_inc<V3_REG_QK(FP8)>(); /* O half, S and the softmax */
    v3_consumer_qk<FP8>(p, x, warp & 3, lane);
    if (p.splits > 1) { /* warpgroup 0 merges; warpgroup 1 only joins the cluster barriers */
      ptx_cluster_sync(); /* every CTA of the (token, group) has its (m, l, O) staged */
      if (p.splits == 2) v3_merge_splits<2>(p, s_u32, t, head0, tid);
      else if (p.splits == 4) v3_merge_splits<4>(p, s_u32, t, head0, tid);
      else v3_merge_splits<8>(p, s_u32, t, head0, tid);
      ptx_cluster_sync(); /* peers may still read this CTA's staging */
    }
  } else {
    if (V3_REG_PV(FP8) > 168) ptx_setmaxnreg_inc<(V3_REG_PV(FP8) > 168 ? V3_REG_PV(FP8) : 168)>();
    v3_consumer_pv<FP8>(p, x, warp & 3, lane);
    if (p.splits > 1) {
      ptx_cluster_sync();
      ptx_cluster_sync();
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * Host side.
 */
#ifdef DSA_V3_MODES
static int g_v3_mode; /* set by tools/mla_v3_modes.cu */
#endif

template <bool FP8>
static cudaError_t v3_launch(v3_params prm, int64_t num_tokens, cudaStream_t stream) {
  static dsa_smem_cache cache;
  const int64_t max_tokens = (int64_t)0x7fffffff / (prm.num_groups * prm.splits); /* gridDim.x limit */
  for (int64_t t0 = 0; t0 < num_tokens; t0 += max_tokens) {
    const int64_t nt = num_tokens - t0 < max_tokens ? num_tokens - t0 : max_tokens;
    prm.token_offset = t0;
    /* the splits of a (token, group) are adjacent CTAs: one cluster */
    const cudaError_t err = dsa_launch_smem_cluster(
        mla_v3_kernel<FP8>, &cache, dim3((unsigned)(nt * prm.num_groups * prm.splits)), V3_THREADS, V3_SMEM, stream,
        true, prm.splits > 1 ? (unsigned)prm.splits : 0u, prm);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

extern "C" int dsa_sparse_mla_v3_launch(const dsa_sparse_mla_args *a, const dsa_mla_plan *pl, cudaStream_t stream) {
  if (a->num_tokens <= 0) return 0;
  v3_params prm;
  prm.q = (const __nv_bfloat16 *)a->q;
  prm.kv = a->kv_cache;
  prm.kv_stride = a->kv_stride;
  prm.num_slots = mla_slots_cap(a->num_slots);
  prm.indices = a->indices;
  prm.indices_stride = a->indices_stride;
  prm.lens = a->lens;
  prm.out = (__nv_bfloat16 *)a->out;
  prm.lse = a->lse;
  prm.scale_log2 = a->softmax_scale * MLA_LOG2E;
  prm.topk = a->topk;
  prm.num_heads = a->num_heads;
  prm.num_groups = pl->groups;
  prm.splits = pl->splits;
  prm.token_offset = 0;
#ifdef DSA_V3_MODES
  prm.mode = g_v3_mode;
#endif
  const cudaError_t err = a->kv_format == DSA_KV_FP8_PACKED ? v3_launch<true>(prm, a->num_tokens, stream)
                                                            : v3_launch<false>(prm, a->num_tokens, stream);
  return (int)err;
}
