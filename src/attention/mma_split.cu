/*
 * attention/mma_split.cu — sparse MLA attention on mma.sync, the index list split over CTAs; decode
 * and prefill are the same call. The math: attention.cuh.
 *
 * Shapes: q [T, H, 576] bf16; KV rows either dense bf16 (576 values, row stride kv_stride) or
 * packed FP8 (656 B: 512 e4m3, 4 float32 scales for groups of 128, 64 bf16 rope);
 * out [T, H, 512] bf16; lse [T, H] float32.
 *
 * Work split. One CTA (8 warps) owns one (token, head group of HG = 16*MT heads, split). A split is
 * a contiguous range of 64-entry blocks of the token's index list. Per chunk of 64 entries, the
 * phases of the kernel:
 *   ms_gather     the 64 selected rows into shared memory with cp.async (invalid entries: zero
 *                 row); the next chunk's gather is in flight while this one computes. bf16 rows go
 *                 straight to one of two tiles. FP8 rows land raw in a staging buffer and
 *   ms_unpack_fp8 are unpacked into one bf16 tile WITHOUT their scales (e4m3 -> bf16 is exact);
 *                 the scales go to a small table. Why: fp8*scale rounded to bf16 puts ~2e-3 of
 *                 error on each score, which a token with few entries sees in full in its lse
 *                 (tolerance 1e-3).
 *   ms_qk         S[HG x 64] = Q[HG x 576] . K^T with mma.sync m16n8k16 (bf16 in, fp32
 *                 accumulate). Warp tile 16 heads x 32 keys x (576 / KSPLIT) dims, KSPLIT = 4 / MT;
 *                 the KSPLIT partial sums go to shared memory. FP8: each 128-dim group is
 *                 accumulated apart and added times its per-key fp32 scale. For MT = 1 the warp's
 *                 Q fragments stay in registers for the whole CTA (loaded once).
 *   ms_softmax    256 / HG threads per head row sum the partials, mask invalid entries to -inf,
 *                 and run the online softmax in the log2 domain (log2(e) folded into the scale); P
 *                 goes to shared memory as bf16, the per-row rescale factor alpha next to it.
 *   ms_pv         O[HG x 512] = alpha * O + P[HG x 64] . V[64 x 512] with mma.sync; warp w owns
 *                 output dims [64w, 64w + 64) for all HG rows (fp32 accumulators, 32*MT registers a
 *                 thread). FP8: those dims lie in one scale group, so the warp multiplies its P
 *                 fragments by the keys' bf16 scales (one HMUL2 a register) and V stays unscaled.
 *   ms_finish     one split: out = O / l and lse written directly. Several splits: each writes its
 *                 unnormalised O (fp32), m (log2 domain) and l to the workspace, and
 * ms_combine_kernel (one CTA per (t, h)) merges them in split order. Everything is fixed-order: same
 * input, same bits.
 *
 * Shared-memory rows of 576 bf16 (1152 B = 72 chunks of 16 B) use the XOR swizzle
 * chunk' = chunk ^ (row & 7), so the 8 row addresses of every ldmatrix hit 8 distinct bank groups.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <math.h>

#include "attention/attention.cuh"
#include "common/launch.cuh"
#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "common/ptx/sync.cuh"
#include "kernels.h"

#define MS_ROW_CHUNKS (MLA_BF16_ROW_BYTES / 16)      /* 72: 16-byte chunks of a bf16 row */
#define MS_FP8_ROW_CHUNKS (MLA_FP8_SLOT_BYTES / 16)  /* 41 */
/* MLA_BLOCK_N (entries per chunk and per split block): config.h, shared with the split plan. */
#define MS_THREADS 256
#define MS_SROW 72 /* floats per S row in shared memory (64 + 8: conflict-free float2) */
#define MS_NEG_INF (-INFINITY)

/* ---------------------------------------------------------------------------------------------
 * Compile-time tile configuration and shared-memory plan: MT m-tiles of 16 heads, FP8 or bf16 KV.
 */
template <int MT, bool FP8>
struct ms_cfg {
  static constexpr int HG = 16 * MT;                 /* heads per CTA (rows of the MMAs) */
  static constexpr int KSPLIT = 4 / MT;              /* S phase: warps splitting the 576 dims */
  static constexpr int KSTEPS = 36 / KSPLIT;         /* k-steps of 16 dims per S warp */
  static constexpr bool Q_REGS = (MT == 1);          /* Q fragments held in registers */
  static constexpr int ROW_THREADS = MS_THREADS / HG;        /* softmax threads per head row */
  static constexpr int ROW_GROUPS = MLA_BLOCK_N / 4 / ROW_THREADS; /* float4 key groups each */
  static constexpr int NBUF = FP8 ? 1 : 2;           /* bf16 tiles (FP8 double-buffers raw rows) */
  static constexpr int Q_BYTES = HG * MLA_BF16_ROW_BYTES;
  static constexpr int TILE_BYTES = MLA_BLOCK_N * MLA_BF16_ROW_BYTES;
  static constexpr int STAGE_BYTES = FP8 ? MLA_BLOCK_N * MLA_FP8_SLOT_BYTES : 0;
  static constexpr int SBUF_BYTES = KSPLIT * HG * MS_SROW * 4;
  static constexpr int P_BYTES = HG * MLA_BLOCK_N * 2;
  static constexpr int IDX_BYTES = 3 * MLA_BLOCK_N * 4;
  static constexpr int STAT_BYTES = 3 * HG * 4;
  static constexpr int SCALE_BYTES = FP8 ? 4 * MLA_BLOCK_N * 4 + 4 * (MLA_BLOCK_N / 2) * 4 : 0;
  static constexpr int Q_OFF = 0;
  static constexpr int TILE_OFF = Q_OFF + Q_BYTES;
  static constexpr int STAGE_OFF = TILE_OFF + NBUF * TILE_BYTES;
  static constexpr int SBUF_OFF = STAGE_OFF + STAGE_BYTES;
  static constexpr int P_OFF = SBUF_OFF + SBUF_BYTES;
  static constexpr int IDX_OFF = P_OFF + P_BYTES;
  static constexpr int STAT_OFF = IDX_OFF + IDX_BYTES;
  static constexpr int SCALE_OFF = STAT_OFF + STAT_BYTES;
  static constexpr int SMEM_BYTES = SCALE_OFF + SCALE_BYTES;
};

typedef struct {
  mla_io io;
  float *o_part;              /* [splits, T, H, 512] or NULL when splits == 1 */
  float2 *ml_part;            /* [splits, T, H] (m in log2 domain, l) */
  float scale_log2;           /* softmax_scale * log2(e) */
  int topk;
  int num_heads;
  int num_tokens;             /* tokens of the whole call (workspace indexing) */
  int64_t token_offset;       /* first token of this launch */
  int num_groups;
  int splits;
  int blocks_per_split;
  int num_blocks;
} ms_params;

/* The CTA's shared memory (ms_cfg's plan) as pointers and shared-window addresses. */
typedef struct {
  uint8_t *smem, *stage, *p_s;
  float *sbuf;                  /* S partials [KSPLIT][HG][MS_SROW] */
  int *idx_s;                   /* [3][64] ring: chunk c's slots in slot c % 3 */
  float *alpha_s, *row_m_s, *row_l_s;
  float *kscale_s;              /* FP8: [4 groups][64 keys] */
  uint32_t *vscale_s;           /* FP8: [4][32] bf16 key pairs */
  uint32_t q_u32, tile_u32, stage_u32, p_u32;
} ms_smem;

/* Byte offset of 16-byte chunk c of row r in a swizzled [rows][576] bf16 tile. */
__device__ __forceinline__ uint32_t tile_off(int r, int c) {
  return (uint32_t)(r * MLA_BF16_ROW_BYTES + ((c ^ (r & 7)) << 4));
}

/* Two fp8-e4m3 (low byte first) as a packed bf16 pair: exact (e4m3 -> f16 -> f32 -> bf16). */
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 r = __hmul2(*(const __nv_bfloat162 *)&a, *(const __nv_bfloat162 *)&b);
  return *(const uint32_t *)&r;
}

/* ---------------------------------------------------------------------------------------------
 * The phases (header comment), each called by all 256 threads.
 */

/* The Q tile, rows past H zero (cp.async; the caller commits). */
template <int MT, bool FP8>
__device__ __forceinline__ void ms_load_q(const ms_params &p, const ms_smem &m, int64_t t, int head0, int tid) {
  typedef ms_cfg<MT, FP8> C;
  const int H = p.num_heads;
  for (int x = tid; x < C::HG * MS_ROW_CHUNKS; x += MS_THREADS) {
    const int r = x / MS_ROW_CHUNKS, c = x - r * MS_ROW_CHUNKS;
    const int h = head0 + r;
    const __nv_bfloat16 *src = p.io.q;
    if (h < H) src = p.io.q + ((t * H + h) * MLA_QK_DIM + c * 8);
    ptx_cp_async_16(m.q_u32 + tile_off(r, c), src, h < H ? 16 : 0);
  }
}

/* Gather chunk `chunk` (its slots are in idx_s) into the tile (bf16) or staging (FP8) buffer. */
template <int MT, bool FP8>
__device__ __forceinline__ void ms_gather(const ms_params &p, const ms_smem &m, int chunk, int tid) {
  typedef ms_cfg<MT, FP8> C;
  const int *slots = m.idx_s + (chunk % 3) * MLA_BLOCK_N;
  if (FP8) {
    const uint8_t *kv = (const uint8_t *)p.io.kv;
    for (int x = tid; x < MLA_BLOCK_N * MS_FP8_ROW_CHUNKS; x += MS_THREADS) {
      const int r = x / MS_FP8_ROW_CHUNKS, c = x - r * MS_FP8_ROW_CHUNKS;
      const int slot = slots[r];
      const uint8_t *src = slot >= 0 ? kv + (int64_t)slot * MLA_FP8_SLOT_BYTES + c * 16 : kv;
      ptx_cp_async_16(m.stage_u32 + r * MLA_FP8_SLOT_BYTES + c * 16, src, slot >= 0 ? 16 : 0);
    }
  } else {
    const __nv_bfloat16 *kv = (const __nv_bfloat16 *)p.io.kv;
    const uint32_t dst = m.tile_u32 + (chunk & 1) * C::TILE_BYTES;
#pragma unroll 2
    for (int x = tid; x < MLA_BLOCK_N * MS_ROW_CHUNKS; x += MS_THREADS) {
      const int r = x / MS_ROW_CHUNKS, c = x - r * MS_ROW_CHUNKS;
      const int slot = slots[r];
      const __nv_bfloat16 *src = slot >= 0 ? kv + (int64_t)slot * p.io.kv_stride + c * 8 : kv;
      ptx_cp_async_16(dst + tile_off(r, c), src, slot >= 0 ? 16 : 0);
    }
  }
}

/* FP8: the staged rows -> the bf16 tile. 64 rows x 72 chunks of 8 values. The latent stays unscaled
 * (fp8 -> bf16 is exact): S applies the group scales in fp32 (an fp8*scale rounded to bf16 would cost
 * ~1e-3 in lse), PV folds them into P. Rope is copied. Each thread reads its 18 chunks in 3 batches of
 * 6 (the reads in flight together) and converts by byte permutes and one exact bf16x2 multiply by
 * 2^120 a pair: the conversion-unit path (e4m3 -> f16 -> f32 -> bf16) took 1.7 us a chunk. */
template <int MT, bool FP8>
__device__ __forceinline__ void ms_unpack_fp8(const ms_smem &m, int tid) {
  typedef ms_cfg<MT, FP8> C;
  constexpr int UNPACK_ITERS = MLA_BLOCK_N * MS_ROW_CHUNKS / MS_THREADS;
  static_assert(UNPACK_ITERS * MS_THREADS == MLA_BLOCK_N * MS_ROW_CHUNKS && UNPACK_ITERS % 6 == 0,
                "unpack batches");
  const uint32_t two_pow120 = 0x7b807b80u; /* bf16x2 (2^120, 2^120) */
#pragma unroll
  for (int b0 = 0; b0 < UNPACK_ITERS; b0 += 6) {
    uint4 raw[6];
#pragma unroll
    for (int i = 0; i < 6; ++i) {
      const int x = tid + (b0 + i) * MS_THREADS;
      const int r = x / MS_ROW_CHUNKS, ch = x - r * MS_ROW_CHUNKS;
      const uint8_t *srow = m.stage + r * MLA_FP8_SLOT_BYTES;
      if (ch < 64) {
        const uint2 lat = *(const uint2 *)(srow + ch * 8);
        raw[i] = make_uint4(lat.x, lat.y, 0u, 0u);
      } else {
        raw[i] = *(const uint4 *)(srow + MLA_FP8_ROPE_OFF + (ch - 64) * 16);
      }
    }
#pragma unroll
    for (int i = 0; i < 6; ++i) {
      const int x = tid + (b0 + i) * MS_THREADS;
      const int r = x / MS_ROW_CHUNKS, ch = x - r * MS_ROW_CHUNKS;
      uint4 v = raw[i];
      if (ch < 64) {
        v.x = ptx_mul_bf16x2(e4m3x2_to_bf16x2_pow2m120(raw[i].x, 0x9180u), two_pow120);
        v.y = ptx_mul_bf16x2(e4m3x2_to_bf16x2_pow2m120(raw[i].x, 0xb3a2u), two_pow120);
        v.z = ptx_mul_bf16x2(e4m3x2_to_bf16x2_pow2m120(raw[i].y, 0x9180u), two_pow120);
        v.w = ptx_mul_bf16x2(e4m3x2_to_bf16x2_pow2m120(raw[i].y, 0xb3a2u), two_pow120);
      }
      *(uint4 *)(m.smem + C::TILE_OFF + tile_off(r, ch)) = v;
    }
  }
  { /* scales: fp32 per (group, key) for S; bf16 pairs of adjacent keys for P */
    const int grp = tid >> 6, r = tid & 63;
    m.kscale_s[tid] = *(const float *)(m.stage + r * MLA_FP8_SLOT_BYTES + MLA_FP8_SCALE_OFF + grp * 4);
    if (tid < 128) {
      const int pg = tid >> 5, pr = 2 * (tid & 31);
      const float s0 = *(const float *)(m.stage + pr * MLA_FP8_SLOT_BYTES + MLA_FP8_SCALE_OFF + pg * 4);
      const float s1 = *(const float *)(m.stage + (pr + 1) * MLA_FP8_SLOT_BYTES + MLA_FP8_SCALE_OFF + pg * 4);
      __nv_bfloat162 b = __floats2bfloat162_rn(s0, s1);
      m.vscale_s[tid] = *(const uint32_t *)&b;
    }
  }
}

/* S phase: this warp's partial S[16 x 32] over its k range, into sbuf. */
template <int MT, bool FP8>
__device__ __forceinline__ void ms_qk(const ms_smem &m, uint32_t kv_u32, const uint32_t (&qfrag)[ms_cfg<MT, FP8>::Q_REGS ? ms_cfg<MT, FP8>::KSTEPS : 1][4],
                                      int warp, int lane, int g, int qd) {
  typedef ms_cfg<MT, FP8> C;
  constexpr int HG = C::HG;
  /* S-phase role: m-tile, key half, k range. */
  const int s_mi = warp % MT;
  const int s_kh = (warp / MT) & 1;
  const int s_kq = warp / (2 * MT);
  float sacc[4][4]; /* FP8: the current 128-dim group only; scaled sums build up in sbuf */
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) sacc[j][k] = 0.f;
  float *sb = m.sbuf + (s_kq * HG + s_mi * 16 + g) * MS_SROW + s_kh * 32 + 2 * qd;
  bool first_group = true;
  /* ldmatrix x4 of K rows: matrices (keys 0-7, k lo), (keys 0-7, k hi), (keys 8-15, k lo),
   * (keys 8-15, k hi) = b0,b1 of n-tile 2j and b0,b1 of n-tile 2j+1. */
  const int krow = s_kh * 32 + (lane & 7) + ((lane >> 4) << 3);
  const int khi = (lane >> 3) & 1;
  const int qrow = s_mi * 16 + (lane & 15);
#pragma unroll(C::Q_REGS ? C::KSTEPS : 4)
  for (int s = 0; s < C::KSTEPS; ++s) {
    const int ks = s_kq * C::KSTEPS + s;
    uint32_t afr[4];
    if (C::Q_REGS) {
#pragma unroll
      for (int k = 0; k < 4; ++k) afr[k] = qfrag[C::Q_REGS ? s : 0][k];
    } else {
      ptx_ldmatrix_x4(afr, m.q_u32 + tile_off(qrow, 2 * ks + (lane >> 4)));
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      uint32_t b[4];
      ptx_ldmatrix_x4(b, kv_u32 + tile_off(krow + 16 * j, 2 * ks + khi));
      ptx_mma_m16n8k16_bf16(sacc[2 * j], afr, b[0], b[1]);
      ptx_mma_m16n8k16_bf16(sacc[2 * j + 1], afr, b[2], b[3]);
    }
    /* FP8: at the end of a 128-dim group (8 k-steps) or of the warp's range, add the group's
     * dot products times the keys' group scales (rope: k-steps 32..35, scale 1). */
    if (FP8 && (s == C::KSTEPS - 1 || ((ks + 1) & 7) == 0)) {
      const int grp = ks >> 3;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float2 sc = make_float2(1.f, 1.f);
        if (grp < 4) sc = *(const float2 *)(m.kscale_s + grp * MLA_BLOCK_N + s_kh * 32 + 8 * j + 2 * qd);
        float2 lo = make_float2(sc.x * sacc[j][0], sc.y * sacc[j][1]);
        float2 hi = make_float2(sc.x * sacc[j][2], sc.y * sacc[j][3]);
        if (!first_group) { /* this thread's own entries: no barrier needed */
          const float2 plo = *(const float2 *)(sb + 8 * j);
          const float2 phi = *(const float2 *)(sb + 8 * MS_SROW + 8 * j);
          lo.x += plo.x; lo.y += plo.y; hi.x += phi.x; hi.y += phi.y;
        }
        *(float2 *)(sb + 8 * j) = lo;
        *(float2 *)(sb + 8 * MS_SROW + 8 * j) = hi;
        sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.f;
      }
      first_group = false;
    }
  }
  if (!FP8) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      *(float2 *)(sb + 8 * j) = make_float2(sacc[j][0], sacc[j][1]);
      *(float2 *)(sb + 8 * MS_SROW + 8 * j) = make_float2(sacc[j][2], sacc[j][3]);
    }
  }
}

/* Online softmax of one head row (ROW_THREADS threads, ROW_GROUPS x 4 keys each): P to shared
 * memory as bf16, alpha beside it; m_run / l_run carried across chunks (l: this thread's part). */
template <int MT, bool FP8>
__device__ __forceinline__ void ms_softmax(const ms_params &p, const ms_smem &m, int c, int sm_row, int sm_part,
                                           float &m_run, float &l_run) {
  typedef ms_cfg<MT, FP8> C;
  constexpr int HG = C::HG;
  const int *valid = m.idx_s + (c % 3) * MLA_BLOCK_N;
  float sv[C::ROW_GROUPS][4];
  float mx = MS_NEG_INF;
#pragma unroll
  for (int i = 0; i < C::ROW_GROUPS; ++i) {
    const int kg = sm_part + C::ROW_THREADS * i; /* interleaved: conflict-free float4 reads */
    float4 v = *(const float4 *)(m.sbuf + sm_row * MS_SROW + 4 * kg);
#pragma unroll
    for (int ks = 1; ks < C::KSPLIT; ++ks) {
      const float4 w = *(const float4 *)(m.sbuf + (ks * HG + sm_row) * MS_SROW + 4 * kg);
      v.x += w.x; v.y += w.y; v.z += w.z; v.w += w.w;
    }
    const int4 ok = *(const int4 *)(valid + 4 * kg);
    sv[i][0] = ok.x >= 0 ? v.x * p.scale_log2 : MS_NEG_INF;
    sv[i][1] = ok.y >= 0 ? v.y * p.scale_log2 : MS_NEG_INF;
    sv[i][2] = ok.z >= 0 ? v.z * p.scale_log2 : MS_NEG_INF;
    sv[i][3] = ok.w >= 0 ? v.w * p.scale_log2 : MS_NEG_INF;
#pragma unroll
    for (int k = 0; k < 4; ++k) mx = fmaxf(mx, sv[i][k]);
  }
#pragma unroll
  for (int o = C::ROW_THREADS / 2; o > 0; o >>= 1)
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float m_new = fmaxf(m_run, mx);
  const float base = m_new == MS_NEG_INF ? 0.f : m_new; /* all masked so far: p = 0 */
  const float alpha = exp2f(m_run - base);
  float lsum = 0.f;
#pragma unroll
  for (int i = 0; i < C::ROW_GROUPS; ++i) {
    const int kg = sm_part + C::ROW_THREADS * i;
    float pv[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      pv[k] = exp2f(sv[i][k] - base);
      lsum += pv[k];
    }
    __nv_bfloat162 lo = __floats2bfloat162_rn(pv[0], pv[1]);
    __nv_bfloat162 hi = __floats2bfloat162_rn(pv[2], pv[3]);
    uint2 packed;
    packed.x = *(const uint32_t *)&lo;
    packed.y = *(const uint32_t *)&hi;
    *(uint2 *)(m.p_s + sm_row * (MLA_BLOCK_N * 2) + (((kg >> 1) ^ (sm_row & 7)) << 4) + ((kg & 1) << 3)) = packed;
  }
  l_run = l_run * alpha + lsum;
  m_run = m_new;
  if (sm_part == 0) m.alpha_s[sm_row] = alpha;
}

/* PV phase: O[:, 64w : 64w+64] = alpha * O + P . V. */
template <int MT, bool FP8>
__device__ __forceinline__ void ms_pv(const ms_smem &m, uint32_t kv_u32, float (&oacc)[MT][8][4], int warp, int lane,
                                      int g, int qd) {
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) {
    const float a0 = m.alpha_s[mi * 16 + g], a1 = m.alpha_s[mi * 16 + g + 8];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      oacc[mi][nt][0] *= a0; oacc[mi][nt][1] *= a0;
      oacc[mi][nt][2] *= a1; oacc[mi][nt][3] *= a1;
    }
  }
  /* ldmatrix x4.trans of V rows (keys): matrices (keys 0-7, dims lo), (keys 8-15, dims lo),
   * (keys 0-7, dims hi), (keys 8-15, dims hi) = b0,b1 of n-tile 2j and of n-tile 2j+1. */
  const int vkey = (lane & 7) + (((lane >> 3) & 1) << 3);
  const int vchunk = warp * 8 + (lane >> 4);
  const int prow = lane & 15;
#pragma unroll
  for (int ks = 0; ks < MLA_BLOCK_N / 16; ++ks) {
    uint32_t afr[MT][4];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      const int r = mi * 16 + prow;
      ptx_ldmatrix_x4(afr[mi], m.p_u32 + r * (MLA_BLOCK_N * 2) + (((2 * ks + (lane >> 4)) ^ (r & 7)) << 4));
    }
    if (FP8) {
      /* P' = P * scale(key, this warp's group): a0,a1 hold keys 2q,2q+1, a2,a3 keys 2q+8,2q+9 */
      const uint32_t sc_lo = m.vscale_s[(warp >> 1) * 32 + ks * 8 + qd];
      const uint32_t sc_hi = m.vscale_s[(warp >> 1) * 32 + ks * 8 + 4 + qd];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        afr[mi][0] = bf16x2_mul(afr[mi][0], sc_lo);
        afr[mi][1] = bf16x2_mul(afr[mi][1], sc_lo);
        afr[mi][2] = bf16x2_mul(afr[mi][2], sc_hi);
        afr[mi][3] = bf16x2_mul(afr[mi][3], sc_hi);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t b[4];
      ptx_ldmatrix_x4_trans(b, kv_u32 + tile_off(ks * 16 + vkey, vchunk + 2 * j));
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        ptx_mma_m16n8k16_bf16(oacc[mi][2 * j], afr[mi], b[0], b[1]);
        ptx_mma_m16n8k16_bf16(oacc[mi][2 * j + 1], afr[mi], b[2], b[3]);
      }
    }
  }
}

/* After the last chunk: the row statistics (l summed over the row's threads in a fixed butterfly
 * order), then out and lse (one split) or the unnormalised partials (several). */
template <int MT, bool FP8>
__device__ __forceinline__ void ms_finish(const ms_params &p, const ms_smem &m, const float (&oacc)[MT][8][4], int64_t t,
                                          int head0, int split, int nchunks, int sm_row, int sm_part, float m_run,
                                          float l_run, int tid, int warp, int g, int qd) {
  typedef ms_cfg<MT, FP8> C;
  constexpr int HG = C::HG;
  const int H = p.num_heads;
  {
    float l_tot = l_run;
#pragma unroll
    for (int o = C::ROW_THREADS / 2; o > 0; o >>= 1) l_tot += __shfl_xor_sync(0xffffffffu, l_tot, o);
    if (sm_part == 0) {
      m.row_m_s[sm_row] = m_run;
      m.row_l_s[sm_row] = l_tot;
    }
  }
  __syncthreads();

  const int dim0 = warp * 64 + 2 * qd;
  if (p.o_part == nullptr) {
    /* Single split: normalise and write bf16 out (and lse). */
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = mi * 16 + g + 8 * hf;
        const int h = head0 + r;
        if (h < H) {
          const float l = m.row_l_s[r];
          const float inv = l > 0.f ? 1.f / l : 0.f;
          __nv_bfloat16 *o = p.io.out + (t * H + h) * MLA_V_DIM + dim0;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
            *(__nv_bfloat162 *)(o + 8 * nt) =
                __floats2bfloat162_rn(oacc[mi][nt][2 * hf] * inv, oacc[mi][nt][2 * hf + 1] * inv);
        }
      }
    if (p.io.lse && tid < HG && head0 + tid < H) {
      const float l = m.row_l_s[tid];
      /* mla_lse's formula, kept inline: the shared-memory m is read only for rows with entries */
      p.io.lse[t * H + head0 + tid] = l > 0.f ? (m.row_m_s[tid] + log2f(l)) * MLA_LN2 : MS_NEG_INF;
    }
  } else {
    /* Several splits: unnormalised fp32 O, (m, l) for the combine kernel. */
    const int64_t prow0 = ((int64_t)split * p.num_tokens + t) * H;
    if (nchunks > 0) { /* a split with nothing has l = 0: the combine never reads its O */
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = mi * 16 + g + 8 * hf;
          const int h = head0 + r;
          if (h < H) {
            float *o = p.o_part + (prow0 + h) * MLA_V_DIM + dim0;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
              *(float2 *)(o + 8 * nt) = make_float2(oacc[mi][nt][2 * hf], oacc[mi][nt][2 * hf + 1]);
          }
        }
    }
    if (tid < HG && head0 + tid < H)
      p.ml_part[prow0 + head0 + tid] = make_float2(m.row_m_s[tid], m.row_l_s[tid]);
  }
}

/* ---------------------------------------------------------------------------------------------
 * The attention kernel. Grid: num_groups * splits * tokens CTAs (group fastest: the CTAs of one
 * token's head groups run side by side and share the gathered rows in L2).
 */
template <int MT, bool FP8>
__global__ void __launch_bounds__(MS_THREADS, 1) ms_attention_kernel(const ms_params p) {
  typedef ms_cfg<MT, FP8> C;
  extern __shared__ __align__(128) uint8_t smem[];
  ms_smem m;
  m.smem = smem;
  m.stage = smem + C::STAGE_OFF;
  m.sbuf = (float *)(smem + C::SBUF_OFF);
  m.p_s = smem + C::P_OFF;
  m.idx_s = (int *)(smem + C::IDX_OFF);
  m.alpha_s = (float *)(smem + C::STAT_OFF);
  m.row_m_s = m.alpha_s + C::HG;
  m.row_l_s = m.row_m_s + C::HG;
  m.kscale_s = (float *)(smem + C::SCALE_OFF);
  m.vscale_s = (uint32_t *)(m.kscale_s + 4 * MLA_BLOCK_N);
  m.q_u32 = ptx_smem_u32(smem + C::Q_OFF);
  m.tile_u32 = ptx_smem_u32(smem + C::TILE_OFF);
  m.stage_u32 = ptx_smem_u32(m.stage);
  m.p_u32 = ptx_smem_u32(m.p_s);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, qd = lane & 3; /* mma fragment row / column pair */

  int64_t cta = blockIdx.x;
  const int group = (int)(cta % p.num_groups);
  cta /= p.num_groups;
  const int split = (int)(cta % p.splits);
  const int64_t t = p.token_offset + cta / p.splits;
  const int head0 = group * C::HG;

  ptx_griddep_wait(); /* inputs may come from the previous kernel in the stream */

  /* Entries [begin, end) of the index row belong to this CTA. */
  const int blk0 = split * p.blocks_per_split;
  const int blk1 = min(p.num_blocks, blk0 + p.blocks_per_split);
  const int begin = blk0 * MLA_BLOCK_N;
  int end = min(p.topk, blk1 * MLA_BLOCK_N);
  if (p.io.lens) end = min(end, max(__ldg(p.io.lens + t), 0));
  const int nchunks = end > begin ? (end - begin + MLA_BLOCK_N - 1) / MLA_BLOCK_N : 0;
  const int32_t *idx_row = p.io.indices + t * p.io.indices_stride;

  /* Slots of chunks 0 and 1 (loads first: their latency hides behind the Q copies). */
  int slot0 = -1, slot1 = -1;
  if (tid < MLA_BLOCK_N) {
    slot0 = mla_entry_slot(idx_row, begin + tid, end, p.io.num_slots);
    slot1 = mla_entry_slot(idx_row, begin + MLA_BLOCK_N + tid, end, p.io.num_slots);
  }
  ms_load_q<MT, FP8>(p, m, t, head0, tid);
  ptx_cp_async_commit();
  if (tid < MLA_BLOCK_N) {
    m.idx_s[tid] = slot0;
    m.idx_s[MLA_BLOCK_N + tid] = slot1;
  }
  __syncthreads();

  if (nchunks > 0) ms_gather<MT, FP8>(p, m, 0, tid);
  ptx_cp_async_commit();

  uint32_t qfrag[C::Q_REGS ? C::KSTEPS : 1][4];
  if (C::Q_REGS) {
    ptx_cp_async_wait<1>(); /* Q has landed (chunk 0 may still be in flight) */
    __syncthreads();
    const int s_mi = warp % MT, s_kq = warp / (2 * MT);
    const int r = s_mi * 16 + (lane & 15);
#pragma unroll
    for (int s = 0; s < C::KSTEPS; ++s)
      ptx_ldmatrix_x4(qfrag[C::Q_REGS ? s : 0], m.q_u32 + tile_off(r, 2 * (s_kq * C::KSTEPS + s) + (lane >> 4)));
  }

  /* Softmax role: one head row, ROW_THREADS threads per row (adjacent lanes). */
  const int sm_row = tid / C::ROW_THREADS;
  const int sm_part = tid % C::ROW_THREADS;
  float m_run = MS_NEG_INF, l_run = 0.f; /* log2 domain; l is this thread's partial sum */

  float oacc[MT][8][4];
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k) oacc[mi][nt][k] = 0.f;

  for (int c = 0; c < nchunks; ++c) {
    ptx_cp_async_wait<0>();
    __syncthreads(); /* chunk c landed; chunk c-1's PV phase is done with P and the tiles */
    if (FP8) {
      ms_unpack_fp8<MT, FP8>(m, tid);
      __syncthreads(); /* tile ready, staging free */
    }
    if (c + 1 < nchunks) ms_gather<MT, FP8>(p, m, c + 1, tid);
    ptx_cp_async_commit();
    int next_slot = -1; /* chunk c+2's slot for row tid, stored after the math hides the load */
    if (tid < MLA_BLOCK_N)
      next_slot = mla_entry_slot(idx_row, begin + (c + 2) * MLA_BLOCK_N + tid, end, p.io.num_slots);

    const uint32_t kv_u32 = m.tile_u32 + (FP8 ? 0 : (c & 1) * C::TILE_BYTES);
    ms_qk<MT, FP8>(m, kv_u32, qfrag, warp, lane, g, qd);
    __syncthreads(); /* S partials complete */
    ms_softmax<MT, FP8>(p, m, c, sm_row, sm_part, m_run, l_run);
    __syncthreads(); /* P and alpha ready */
    ms_pv<MT, FP8>(m, kv_u32, oacc, warp, lane, g, qd);
    if (tid < MLA_BLOCK_N) m.idx_s[((c + 2) % 3) * MLA_BLOCK_N + tid] = next_slot;
  }

  ptx_griddep_launch_dependents(); /* the combine kernel may start its launch */
  ptx_cp_async_wait<0>();
  ms_finish<MT, FP8>(p, m, oacc, t, head0, split, nchunks, sm_row, sm_part, m_run, l_run, tid, warp, g, qd);
}

/* ---------------------------------------------------------------------------------------------
 * Combine: one CTA of 256 threads per (token, head) row. Split s has weight w_s = exp2(m_s - M)
 * (0 when l_s = 0: such a split may not have written its O); out = sum_s w_s O_s / sum_s w_s l_s,
 * lse = (M + log2 L) ln 2. Thread (col, half) sums float4 column col over the splits of parity
 * half (splits <= 32 as topk <= 2048), all 16 loads issued at once: decode latency is the cost.
 */
#define MS_COMBINE_THREADS 256
/* The combine's work for row blockIdx.x, once the partials are visible. */
__device__ __forceinline__ void ms_combine_row(const float *o_part, const float2 *ml_part, int splits, int64_t rows,
                                               __nv_bfloat16 *out, float *lse) {
  __shared__ float w_s[32];
  __shared__ float inv_l_s;
  __shared__ float4 half_s[MLA_V_DIM / 4];
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x;
  /* The partial O loads go out first, beside the (m, l) loads: both are one L2 round trip, and the
   * weights only select and scale what has landed. */
  const int col = tid & (MLA_V_DIM / 4 - 1), half = tid >> 7;
  float4 v[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int s = 2 * i + half;
    v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (s < splits) v[i] = __ldcs((const float4 *)(o_part + ((int64_t)s * rows + r) * MLA_V_DIM) + col);
  }
  if (tid < 32) {
    float m = MS_NEG_INF, l = 0.f;
    if (tid < splits) {
      const float2 ml = ml_part[(int64_t)tid * rows + r];
      m = ml.x;
      l = ml.y;
    }
    float M = m;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    const float w = l > 0.f ? exp2f(m - M) : 0.f;
    float L = w * l;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
    w_s[tid] = w;
    if (tid == 0) {
      inv_l_s = L > 0.f ? 1.f / L : 0.f;
      if (lse) lse[r] = mla_lse(M, L);
    }
  }
  __syncthreads();
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int s = 2 * i + half;
    const float ws = s < splits ? w_s[s] : 0.f;
    if (ws > 0.f) { /* a select, so garbage in an unwritten O never reaches acc */
      acc.x += ws * v[i].x; acc.y += ws * v[i].y; acc.z += ws * v[i].z; acc.w += ws * v[i].w;
    }
  }
  if (half) half_s[col] = acc;
  __syncthreads();
  if (!half) {
    const float4 o = half_s[col];
    const float inv = inv_l_s;
    __nv_bfloat162 lo = __floats2bfloat162_rn((acc.x + o.x) * inv, (acc.y + o.y) * inv);
    __nv_bfloat162 hi = __floats2bfloat162_rn((acc.z + o.z) * inv, (acc.w + o.w) * inv);
    uint2 packed;
    packed.x = *(const uint32_t *)&lo;
    packed.y = *(const uint32_t *)&hi;
    *(uint2 *)(out + r * MLA_V_DIM + 4 * col) = packed;
  }
}

__global__ void __launch_bounds__(MS_COMBINE_THREADS) ms_combine_kernel(const float *o_part, const float2 *ml_part,
                                                                        int splits, int64_t rows, __nv_bfloat16 *out,
                                                                        float *lse) {
  ptx_griddep_wait(); /* partials come from the attention kernel */
  ms_combine_row(o_part, ml_part, splits, rows, out, lse);
}

/* ---------------------------------------------------------------------------------------------
 * Host side: launches for a split plan made by host/plan.c (dsa_attention_plan).
 */
/* The kernel's parameters for a call and its plan; with splits > 1 the partials are the workspace:
 * O [splits][tokens x heads][512] fp32, then (m, l) [splits][tokens x heads]. */
static ms_params ms_params_of(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl, void *workspace) {
  ms_params prm;
  prm.io = mla_io_of(a);
  prm.o_part = nullptr;
  prm.ml_part = nullptr;
  if (pl->splits > 1) {
    const size_t rows = (size_t)a->num_tokens * (size_t)a->num_heads;
    prm.o_part = (float *)workspace;
    prm.ml_part = (float2 *)((uint8_t *)workspace + (size_t)pl->splits * rows * MLA_V_DIM * sizeof(float));
  }
  prm.scale_log2 = mla_scale_log2(a);
  prm.topk = a->topk;
  prm.num_heads = a->num_heads;
  prm.num_tokens = a->num_tokens;
  prm.token_offset = 0;
  prm.num_groups = pl->groups;
  prm.splits = pl->splits;
  prm.blocks_per_split = pl->blocks_per_split;
  prm.num_blocks = pl->num_blocks;
  return prm;
}

template <int MT, bool FP8>
static cudaError_t ms_launch(ms_params prm, int64_t num_tokens, cudaStream_t stream) {
  static dsa_smem_cache cache;
  const int smem = ms_cfg<MT, FP8>::SMEM_BYTES;
  const int64_t per_token = (int64_t)prm.num_groups * prm.splits;
  return mla_launch_tokens(num_tokens, per_token, [&](int64_t t0, int64_t nt) {
    prm.token_offset = t0;
    return dsa_launch_smem(ms_attention_kernel<MT, FP8>, &cache, dim3((unsigned)(nt * per_token)), MS_THREADS, smem,
                           stream, true, prm);
  });
}

extern "C" int dsa_attention_mma_split_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl,
                                              void *workspace, cudaStream_t stream) {
  if (a->num_tokens <= 0) return 0;
  const bool fp8 = a->kv_format == DSA_KV_FP8_PACKED;

  const ms_params prm = ms_params_of(a, pl, workspace);
  const size_t rows = (size_t)a->num_tokens * (size_t)a->num_heads;

  cudaError_t err;
  if (fp8) {
    if (pl->mt == 1) err = ms_launch<1, true>(prm, a->num_tokens, stream);
    else if (pl->mt == 2) err = ms_launch<2, true>(prm, a->num_tokens, stream);
    else err = ms_launch<4, true>(prm, a->num_tokens, stream);
  } else {
    if (pl->mt == 1) err = ms_launch<1, false>(prm, a->num_tokens, stream);
    else err = ms_launch<2, false>(prm, a->num_tokens, stream);
  }
  if (err != cudaSuccess) return (int)err;

  if (pl->splits > 1) /* splits > 1 only for < DSA_PLAN_MAX_SMS units: rows fit a grid */
    err = dsa_launch(ms_combine_kernel, dim3((unsigned)rows), MS_COMBINE_THREADS, 0, stream, true,
                     (const float *)prm.o_part, (const float2 *)prm.ml_part, (int)pl->splits, (int64_t)rows,
                     prm.io.out, a->lse);
  return (int)err;
}
