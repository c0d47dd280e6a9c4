/*
 * attention/rows_as_m.cu — sparse MLA attention on Hopper tensor cores (wgmma) with the KV rows as
 * M. The math: attention.cuh.
 *
 * Orientation: KV rows are the M side of every MMA and heads the N side, so a CTA of HN = 16 or 32
 * heads does exactly HN columns of work — small head counts (TP8: 8-16 heads a GPU) are not padded
 * to 64 rows. Per consumer warpgroup (16 heads, N = 16):
 *   QK   S^T[64 rows, 16] = K[64, 576] . Q^T        A = K tile (K-major), B = Q (K-major)
 *   PV   O^T[512, 16] += V^T[512, 64] . P^T[64, 16]  A = the same tile read MN-major, B = P^T
 * Both operands of both MMAs come from shared memory in the no-swizzle core-matrix layout
 * (8 rows x 16 B blocks): tile row r, dims d8..d8+7 at (r/8)*9216 + (d/8)*128 + (r%8)*16.
 *
 * Roles: HN/16 consumer warpgroups (QK, online softmax, PV for their 16 heads; O^T in registers)
 * and one producer warpgroup; the kernel's phases:
 *   rm_produce_fp8   packed FP8 rows (656 B) are read into registers one chunk ahead, the 512 e4m3
 *                    latent values converted to f16 (exact) and the 64 bf16 rope values copied into
 *                    the tile; the 4 per-128 scales go to a table, NOT into the tile (exact scores, as
 *                    mma_split). With one consumer warpgroup (16 heads) the raw rows of the next chunk
 *                    come by bulk copy (one `cp.async.bulk` a row) into a staging buffer and are read
 *                    into registers from there (rm_produce_fp8_staged): a warp's gather of 8 rows x
 *                    64 B from global memory took ~30 L1 wavefronts where a shared load takes 4, and
 *                    those gathers were 2/3 of the L1 data pipe's work, the kernel's bound on the GLM
 *                    chunk (ncu, H100, 2026-12-06). With two (32 heads) the buffer does not fit: rows
 *                    are loaded from global memory into registers, one chunk ahead.
 *   rm_produce_bf16  dense bf16 rows: cp.async into the tile.
 *   rm_consume       per chunk: qk_tile, online_softmax, P^T to shared memory, pv_tile.
 *   rm_stage_partials, rm_merge_splits   the epilogue of a split CTA (below); an unsplit one stores out
 *                    from its accumulators (rm_store_unsplit).
 * A two-stage ring of tiles with full/empty mbarriers (common/mbar_ring.cuh): the producer fills
 * chunk c+1 while the consumer works on chunk c. The split's index entries are turned into slots
 * once, in shared memory, so no index load stands in front of a row load.
 * FP8 numerics: QK runs in f16 on (e4m3 latent, q scaled per head by a power of two so q fits f16
 * exactly) plus bf16 on the rope; the four 128-dim groups accumulate apart and are added times the
 * rows' fp32 scales. PV runs in f16 with P'_g = p * scale[row,g] / u_g, u_g = the largest scale of
 * group g seen so far (P' <= 1 keeps f16's precision), and O's group-g columns are carried in
 * units of u_g (rescaled, like alpha, only when u_g grows).
 *
 * Splits: the CTAs of one (token, head group) form a thread-block cluster (up to 8), each taking a
 * contiguous range of 64-entry chunks; they merge their (m, l, O) through distributed shared memory
 * in rank order — one kernel, no workspace, same bits every run.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
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
#include "kernels.h"

#define RM_ROWS 64                 /* KV rows per chunk (= MLA_BLOCK_N) */
#define RM_RG_BYTES 9216           /* one 8-row group of a 576-wide tile: 72 core matrices */
#define RM_TILE_BYTES (RM_ROWS / 8 * RM_RG_BYTES)
#define RM_OSTRIDE 516             /* floats per head row of the O staging area (conflict-free) */
#define RM_MAX_CLUSTER 8
#define RM_OUT_STRIDE 1040         /* bytes per head row of out staged in a warpgroup's Q area (conflict-free) */

static_assert(RM_ROWS == MLA_BLOCK_N, "chunk = plan block");

#define RM_WN 16                   /* heads per consumer warpgroup (the N of its MMAs) */
static_assert(RM_WN * RM_OUT_STRIDE <= 2 * RM_RG_BYTES, "a warpgroup's 16 out rows fit its Q area");
template <int HN, bool FP8>
struct rm_cfg {
  static constexpr int CWG = HN / RM_WN;                 /* consumer warpgroups */
  static constexpr int THREADS = 128 * (CWG + 1);        /* + one producer warpgroup */
  static constexpr int NACC = RM_WN / 2;                 /* accumulators of one m64n16 tile */
  static constexpr int NCOL = RM_WN / 4;                 /* head columns a thread holds */
  static constexpr int PVER = FP8 ? 4 : 1;               /* P^T versions (one per scale group) */
  static constexpr int Q_BYTES = HN / 8 * RM_RG_BYTES;
  static constexpr int P_VER_BYTES = RM_WN * RM_ROWS * 2; /* [2][8 k-blocks][128 B] */
  static constexpr int P_WG_BYTES = PVER * P_VER_BYTES;
  static constexpr int Q_OFF = 0;
  static constexpr int TILE_OFF = Q_OFF + Q_BYTES;
  static constexpr int P_OFF = TILE_OFF + 2 * RM_TILE_BYTES;
  static constexpr int SC_OFF = P_OFF + CWG * P_WG_BYTES;   /* FP8: [2][scales 4x64 | chunk max 4] */
  static constexpr int SC_STAGE = (4 * RM_ROWS + 4) * 4;
  static constexpr int SLOT_OFF = SC_OFF + (FP8 ? 2 * SC_STAGE : 0); /* int [entries of the split] */
  static constexpr int RED_OFF = SLOT_OFF + DSA_MAX_TOPK * 4;         /* float [CWG][2][4][16] */
  static constexpr int QINV_OFF = RED_OFF + CWG * 2 * 4 * RM_WN * 4;  /* float [HN] */
  static constexpr int ML_OFF = QINV_OFF + HN * 4;                    /* float2 [HN] */
  static constexpr int BAR_OFF = ML_OFF + HN * 8;                     /* full[2], empty[2], staged */
  /* FP8, one consumer warpgroup: a chunk's raw rows, [64][656 B], filled by bulk copies */
  static constexpr bool STAGED = FP8 && CWG == 1;
  static constexpr int STG_OFF = (BAR_OFF + 5 * 8 + 127) / 128 * 128;
  static constexpr int SMEM_BYTES = STAGED ? STG_OFF + RM_ROWS * MLA_FP8_SLOT_BYTES : BAR_OFF + 4 * 8;
  /* named barriers: consumer warpgroup cw's 128 threads on BAR_CONSUMER + cw, the producer's on
   * BAR_PRODUCER (0 is __syncthreads) */
  static constexpr int BAR_CONSUMER = 1;
  static constexpr int BAR_PRODUCER = 1 + CWG;
  static_assert(HN * RM_OSTRIDE * 4 <= 2 * RM_TILE_BYTES, "O staging fits the tiles");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory");
};

typedef struct {
  mla_io io;
  float scale_log2;           /* softmax_scale * log2(e) */
  int topk;
  int num_heads;
  int64_t token_offset;       /* first token of this launch */
  int num_groups;             /* head groups of HN per token */
  int splits;                 /* CTAs (cluster size) per (token, group) */
  int blocks_per_split;
  int num_blocks;
} rm_params;

/* Entries [begin, end) of token t's index list that split s covers; returns the chunk count. */
__device__ __forceinline__ int rm_range(const rm_params &p, int64_t t, int s, int *begin, int *end) {
  const int blk0 = s * p.blocks_per_split;
  const int blk1 = min(p.num_blocks, blk0 + p.blocks_per_split);
  *begin = blk0 * RM_ROWS;
  int e = min(p.topk, blk1 * RM_ROWS);
  if (p.io.lens) e = min(e, max(__ldg(p.io.lens + t), 0));
  *end = e;
  return e > *begin ? (e - *begin + RM_ROWS - 1) / RM_ROWS : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Producer (the last warpgroup). Lane l handles rows 8i + (l & 7): the 8 lanes of a quarter-warp
 * write one 128-byte core matrix (conflict-free). FP8 rows travel in halves of 32 rows through
 * registers, so the next one or two chunks are in flight while this one is converted.
 */
typedef struct {
  uint4 lat[8];   /* rows 32h + 8(i&3) + r, 16-byte columns kk + 4w + 16(i>>2) (16 e4m3 values) */
  uint4 rope[2];  /* rows 32h + 8(2(w>>1) + i) + r, columns kk + 4(w&1) (8 bf16 values) */
  float4 sc;      /* warp 0: the 4 scales of row 32h + lane */
  int slot[4];    /* rows 32h + 8i + r */
} rm_half;

__device__ __forceinline__ void rm_gather_fp8_load(rm_half &R, const rm_params &p, const int *slots, int half, int w,
                                                int lane) {
  const int r = lane & 7, kk = lane >> 3;
  const uint8_t *kv = (const uint8_t *)p.io.kv;
  slots += 32 * half;
#pragma unroll
  for (int i = 0; i < 4; ++i) R.slot[i] = slots[8 * i + r];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int sl = R.slot[i & 3];
    const int col = kk + 4 * w + 16 * (i >> 2);
    R.lat[i] = sl >= 0 ? ptx_ld_nc_v4(kv + (int64_t)sl * MLA_FP8_SLOT_BYTES + col * 16) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int sl = (w >> 1) ? R.slot[2 + i] : R.slot[i]; /* compile-time indices keep slot[] in registers */
    const int col = kk + 4 * (w & 1);
    R.rope[i] = sl >= 0 ? ptx_ld_nc_v4(kv + (int64_t)sl * MLA_FP8_SLOT_BYTES + MLA_FP8_ROPE_OFF + col * 16)
                        : make_uint4(0, 0, 0, 0);
  }
  R.sc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (w == 0) {
    const int sl = slots[lane];
    if (sl >= 0) {
      const uint4 u = ptx_ld_nc_v4(kv + (int64_t)sl * MLA_FP8_SLOT_BYTES + MLA_FP8_SCALE_OFF);
      R.sc = make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
    }
  }
}

/* Converts one half (in registers) into the tile: e4m3 -> f16 (exact), rope copied. */
__device__ __forceinline__ void rm_gather_fp8_store(const rm_half &R, uint8_t *tile, int half, int w, int lane) {
  const int r = lane & 7, kk = lane >> 3;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = 32 * half + 8 * (i & 3) + r;
    const int col = kk + 4 * w + 16 * (i >> 2); /* 16 latent values = 2 core matrices of f16 */
    const uint4 v = R.lat[i];
    uint4 lo, hi;
    lo.x = ptx_e4m3x2_to_f16x2((uint16_t)(v.x & 0xffffu)); lo.y = ptx_e4m3x2_to_f16x2((uint16_t)(v.x >> 16));
    lo.z = ptx_e4m3x2_to_f16x2((uint16_t)(v.y & 0xffffu)); lo.w = ptx_e4m3x2_to_f16x2((uint16_t)(v.y >> 16));
    hi.x = ptx_e4m3x2_to_f16x2((uint16_t)(v.z & 0xffffu)); hi.y = ptx_e4m3x2_to_f16x2((uint16_t)(v.z >> 16));
    hi.z = ptx_e4m3x2_to_f16x2((uint16_t)(v.w & 0xffffu)); hi.w = ptx_e4m3x2_to_f16x2((uint16_t)(v.w >> 16));
    uint8_t *dst = tile + (row >> 3) * RM_RG_BYTES + (2 * col) * 128 + r * 16;
    *(uint4 *)dst = lo;
    *(uint4 *)(dst + 128) = hi;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = 32 * half + 8 * (2 * (w >> 1) + i) + r;
    const int col = kk + 4 * (w & 1);
    *(uint4 *)(tile + (row >> 3) * RM_RG_BYTES + (64 + col) * 128 + r * 16) = R.rope[i];
  }
}

/* Warp 0: the chunk's scales from rows lane (s0) and 32 + lane (s1), [4][64], and the largest of
 * each group [4] (1 when none is positive and finite: the consumer's unit only needs to bound them). */
__device__ __forceinline__ void rm_gather_fp8_scales(float4 s0, float4 s1, float *sc, int lane) {
  const float a[4] = {s0.x, s0.y, s0.z, s0.w}, b[4] = {s1.x, s1.y, s1.z, s1.w};
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    float mx = fmaxf(a[g], b[g]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (!(mx > 0.f) || isinf(mx)) mx = 1.f;
    sc[g * RM_ROWS + lane] = a[g];
    sc[g * RM_ROWS + 32 + lane] = b[g];
    if (lane == 0) sc[4 * RM_ROWS + g] = mx;
  }
}

/* bf16 rows: cp.async straight into the tile (zero rows for skipped entries). */
__device__ __forceinline__ void rm_gather_bf16_issue(const rm_params &p, const int *slots, uint32_t tile_u32, int w,
                                                  int lane) {
  const int r = lane & 7, kk = lane >> 3;
  const __nv_bfloat16 *kv = (const __nv_bfloat16 *)p.io.kv;
  int slot[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) slot[i] = slots[8 * i + r];
#pragma unroll
  for (int j = 0; j < 5; ++j) {
    const int col = kk + 4 * w + 16 * j;
    if (col < 72) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int s = slot[i];
        const __nv_bfloat16 *src = s >= 0 ? kv + (int64_t)s * p.io.kv_stride + col * 8 : kv;
        ptx_cp_async_16(tile_u32 + i * RM_RG_BYTES + col * 128 + r * 16, src, s >= 0 ? 16 : 0);
      }
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * Consumer phases (warpgroups 0 .. HN/16 - 1, 16 heads each). Thread (warp w of its warpgroup,
 * lane = 4g + qd) holds, in every m64n16 accumulator, rows 16w + g (+8) and head columns
 * 8j + 2qd (+1), j < 2.
 */
template <int HN, bool FP8>
__device__ __forceinline__ void rm_load_q(const rm_params &p, int64_t t, int head0, int hoff, uint8_t *q_s,
                                          float *qinv_s, int w, int lane) {
  const int H = p.num_heads;
  for (int hh = hoff + w; hh < hoff + RM_WN; hh += 4) {
    const int h = head0 + hh;
    uint4 v[3];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
      const int c = lane + 32 * k;
      v[k] = make_uint4(0, 0, 0, 0);
      if (h < H && c < 72) v[k] = *(const uint4 *)(p.io.q + ((t * H + h) * MLA_QK_DIM + c * 8));
    }
    uint8_t *row = q_s + (hh >> 3) * RM_RG_BYTES + (hh & 7) * 16;
    if (FP8) {
      /* latent (chunks < 64) to f16 times 2^e, e such that max |q| lands in [2^13, 2^14) */
      float mx = 0.f;
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const uint32_t u[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          mx = fmaxf(mx, fabsf(__uint_as_float(u[i] << 16)));
          mx = fmaxf(mx, fabsf(__uint_as_float(u[i] & 0xffff0000u)));
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      int e = 0;
      if (mx > 0.f && !isinf(mx)) {
        int ex;
        frexpf(mx, &ex);
        e = min(max(14 - ex, -100), 100);
      }
      const float up = ldexpf(1.f, e);
      if (lane == 0) qinv_s[hh] = ldexpf(1.f, -e);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const uint32_t u[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
        uint4 o;
        uint32_t *op = &o.x;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          op[i] = ptx_f32x2_to_f16x2(__uint_as_float(u[i] << 16) * up, __uint_as_float(u[i] & 0xffff0000u) * up);
        *(uint4 *)(row + (lane + 32 * k) * 128) = o;
      }
      if (lane < 8) *(uint4 *)(row + (64 + lane) * 128) = v[2];
    } else {
#pragma unroll
      for (int k = 0; k < 3; ++k)
        if (lane + 32 * k < 72) *(uint4 *)(row + (lane + 32 * k) * 128) = v[k];
    }
  }
}

/* S^T = K . Q^T for one chunk. FP8: per-group accumulation, scaled by the rows' scales and the
 * heads' 2^-e, plus the bf16 rope part. Returns with every wgmma issued so far complete. */
template <int HN, bool FP8>
__device__ __forceinline__ void rm_qk(float (&s)[HN / 2], uint64_t dk, uint64_t dq, const float *sc_raw,
                                      const float (&qv)[HN / 4], int r0) {
  constexpr int NA = HN / 2;
  if (!FP8) {
    ptx_wgmma_fence();
#pragma unroll
    for (int k = 0; k < 36; ++k) ptx_wgmma_k16<HN, false, 0, 0>(s, dk + 16 * k, dq + 16 * k, k > 0);
    ptx_wgmma_commit();
    ptx_wgmma_wait<0>();
    ptx_reg_fence(s);
    return;
  }
  /* One accumulator per scale group and one for the rope, all issued before a single wait: an
   * accumulator read while another wgmma is in flight would make ptxas serialise every wgmma of
   * the kernel (C7514), and a wait per group drains the tensor pipe each time. */
  float acc[5][NA];
  ptx_wgmma_fence();
#pragma unroll
  for (int g = 0; g < 4; ++g)
#pragma unroll
    for (int k = 0; k < 8; ++k)
      ptx_wgmma_k16<HN, true, 0, 0>(acc[g], dk + 16 * (8 * g + k), dq + 16 * (8 * g + k), k > 0);
#pragma unroll
  for (int k = 32; k < 36; ++k) ptx_wgmma_k16<HN, false, 0, 0>(acc[4], dk + 16 * k, dq + 16 * k, k > 32);
  ptx_wgmma_commit();
  ptx_wgmma_wait<0>();
#pragma unroll
  for (int g = 0; g < 5; ++g) ptx_reg_fence(acc[g]);
  float sc0[4], sc1[4];
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    sc0[g] = sc_raw[g * RM_ROWS + r0];
    sc1[g] = sc_raw[g * RM_ROWS + r0 + 8];
  }
#pragma unroll
  for (int i = 0; i < NA; ++i) {
    const float *f = (i & 2) ? sc1 : sc0;
    s[i] = ((acc[0][i] * f[0] + acc[1][i] * f[1]) + acc[2][i] * f[2]) + acc[3][i] * f[3];
  }
  float (&a)[NA] = acc[4];
#pragma unroll
  for (int j = 0; j < HN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[4 * j + e] = s[4 * j + e] * qv[2 * j + (e & 1)] + a[4 * j + e];
}

/* ---------------------------------------------------------------------------------------------
 * The kernel's phases. The CTA's shared memory (rm_cfg's plan) as pointers:
 */
typedef struct {
  uint8_t *q_s, *tile_s, *p_s;
  float *sc_s;        /* FP8: [2][scales 4x64 | chunk max 4] */
  int *slot_s;        /* the split's entries as slots, -1 = skipped */
  float *red_s, *qinv_s;
  float2 *ml_s;
  float *ost_s;       /* after the last chunk: O staging [HN][RM_OSTRIDE] fp32, over the tiles */
  mbar_ring ring;     /* two tiles: full = rows landed, empty = the consumers are done */
  uint8_t *stg_s;     /* STAGED: the raw rows of the chunk in flight, [64][656 B] */
  uint32_t stg_full;  /* STAGED: its mbarrier (64 arrivals, the copies' bytes) */
} rm_smem;

/* Producer, FP8, two consumer warpgroups (32 heads; the staging buffer does not fit beside their
 * plan): chunk c + 1's halves are loaded into registers from global memory while chunk c's are
 * converted into the tile, the scales to their table. (Two chunks ahead, as the 16-head CTAs did
 * before they were STAGED, needs more registers than a 384-thread CTA has.) */
template <int HN, bool FP8>
__device__ __forceinline__ void rm_produce_fp8(const rm_params &p, const rm_smem &m, int nchunks, int w, int lane) {
  typedef rm_cfg<HN, FP8> C;
  rm_half h0, h1;
  if (nchunks > 0) {
    rm_gather_fp8_load(h0, p, m.slot_s, 0, w, lane);
    rm_gather_fp8_load(h1, p, m.slot_s, 1, w, lane);
  }
  for (int c = 0; c < nchunks; ++c) {
    const int b = c & 1;
    const int *next = m.slot_s + (c + 1) * RM_ROWS;
    const bool more = c + 1 < nchunks;
    uint8_t *tile = m.tile_s + b * RM_TILE_BYTES;
    ring_wait_empty<2>(m.ring, c);
    rm_gather_fp8_store(h0, tile, 0, w, lane);
    const float4 sc0 = h0.sc;
    if (more) rm_gather_fp8_load(h0, p, next, 0, w, lane);
    rm_gather_fp8_store(h1, tile, 1, w, lane);
    if (w == 0) rm_gather_fp8_scales(sc0, h1.sc, m.sc_s + b * (C::SC_STAGE / 4), lane);
    if (more) rm_gather_fp8_load(h1, p, next, 1, w, lane);
    ptx_fence_proxy_async_smem();
    ptx_mbar_arrive(ring_full(m.ring, b));
  }
}

/* STAGED, lanes 0-15 of each producer warp (row 16w + lane each): the chunk's raw rows into the
 * staging buffer, one bulk copy a row; a skipped row arrives without bytes (its registers are zeroed
 * when read). A bulk copy takes its operands in uniform registers, so a warp issues its lanes' copies
 * one after another: four warps of 16 rows, not two of 32 (ncu: the issue loop of two warps held ~10 %
 * of the kernel's stall samples on the chunk). */
__device__ __forceinline__ void rm_stage_issue(const rm_params &p, const rm_smem &m, const int *slots, int w,
                                               int lane) {
  if (lane >= 16) return;
  const int i = 16 * w + lane, sl = slots[i];
  ptx_mbar_arrive_expect_tx(m.stg_full, sl >= 0 ? MLA_FP8_SLOT_BYTES : 0);
  if (sl >= 0)
    ptx_bulk_load(ptx_smem_u32(m.stg_s + i * MLA_FP8_SLOT_BYTES),
                  (const uint8_t *)p.io.kv + (int64_t)sl * MLA_FP8_SLOT_BYTES, MLA_FP8_SLOT_BYTES, m.stg_full);
}

/* STAGED: one half of the chunk from the staging buffer into registers, in rm_gather_fp8_load's
 * layout. Bank groups (r + kk) mod 8 (a row is 41 16-byte units): 4 wavefronts a 512-byte load. */
__device__ __forceinline__ void rm_gather_fp8_lds(rm_half &R, const uint8_t *stg, const int *slots, int half, int w,
                                               int lane) {
  const int r = lane & 7, kk = lane >> 3;
  slots += 32 * half;
  stg += 32 * half * MLA_FP8_SLOT_BYTES;
#pragma unroll
  for (int i = 0; i < 4; ++i) R.slot[i] = slots[8 * i + r];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = 8 * (i & 3) + r, col = kk + 4 * w + 16 * (i >> 2);
    R.lat[i] = R.slot[i & 3] >= 0 ? *(const uint4 *)(stg + row * MLA_FP8_SLOT_BYTES + col * 16)
                                  : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int sl = (w >> 1) ? R.slot[2 + i] : R.slot[i];
    const int row = 8 * (2 * (w >> 1) + i) + r, col = kk + 4 * (w & 1);
    R.rope[i] = sl >= 0 ? *(const uint4 *)(stg + row * MLA_FP8_SLOT_BYTES + MLA_FP8_ROPE_OFF + col * 16)
                        : make_uint4(0, 0, 0, 0);
  }
  R.sc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (w == 0 && slots[lane] >= 0) R.sc = *(const float4 *)(stg + lane * MLA_FP8_SLOT_BYTES + MLA_FP8_SCALE_OFF);
}

/* Producer, FP8, STAGED: per chunk c, its rows from the staging buffer into registers; once every
 * producer thread has read them, chunk c + 1's bulk copies into the buffer (they land while chunk c
 * is converted and the consumer works); then chunk c converted into its tile. */
template <int HN, bool FP8>
__device__ __forceinline__ void rm_produce_fp8_staged(const rm_params &p, const rm_smem &m, int nchunks, int w,
                                                      int lane) {
  typedef rm_cfg<HN, FP8> C;
  if (nchunks > 0) rm_stage_issue(p, m, m.slot_s, w, lane);
  for (int c = 0; c < nchunks; ++c) {
    const int b = c & 1;
    const int *slots = m.slot_s + c * RM_ROWS;
    rm_half h0, h1;
    ptx_mbar_wait(m.stg_full, (uint32_t)(c & 1));
    rm_gather_fp8_lds(h0, m.stg_s, slots, 0, w, lane);
    rm_gather_fp8_lds(h1, m.stg_s, slots, 1, w, lane);
    ptx_bar_sync(C::BAR_PRODUCER, 128); /* the buffer read by all: it may be overwritten */
    if (c + 1 < nchunks) {
      ptx_fence_proxy_async_smem(); /* those generic-proxy reads before the copies' async-proxy writes */
      rm_stage_issue(p, m, slots + RM_ROWS, w, lane);
    }
    uint8_t *tile = m.tile_s + b * RM_TILE_BYTES;
    ring_wait_empty<2>(m.ring, c);
    rm_gather_fp8_store(h0, tile, 0, w, lane);
    rm_gather_fp8_store(h1, tile, 1, w, lane);
    if (w == 0) rm_gather_fp8_scales(h0.sc, h1.sc, m.sc_s + b * (C::SC_STAGE / 4), lane);
    ptx_fence_proxy_async_smem();
    ptx_mbar_arrive(ring_full(m.ring, b));
  }
}

/* Producer, bf16: one chunk's copies in flight at a time: chunk c-1 is published before chunk c's
 * are issued. (Written when the consumer freed a buffer only after the next chunk's QK; it now frees
 * it at the end of its own chunk, so two chunks could be in flight — not yet measured.) */
__device__ __forceinline__ void rm_produce_bf16(const rm_params &p, const rm_smem &m, int nchunks, int w, int lane) {
  const uint32_t tile_u32 = ptx_smem_u32(m.tile_s);
  for (int c = 0; c < nchunks; ++c) {
    const int b = c & 1;
    if (c >= 1) {
      ptx_cp_async_wait<0>();
      ptx_fence_proxy_async_smem();
      ptx_mbar_arrive(ring_full(m.ring, (c - 1) & 1));
    }
    ring_wait_empty<2>(m.ring, c);
    rm_gather_bf16_issue(p, m.slot_s + c * RM_ROWS, tile_u32 + b * RM_TILE_BYTES, w, lane);
    ptx_cp_async_commit();
  }
  if (nchunks > 0) {
    ptx_cp_async_wait<0>();
    ptx_fence_proxy_async_smem();
    ptx_mbar_arrive(ring_full(m.ring, (nchunks - 1) & 1));
  }
}

/* Consumer warpgroup cw (16 heads): Q, then per chunk qk_tile, online_softmax, P^T to shared
 * memory, pv_tile; m_run, l_run (per head column, log2 domain), O^T and the FP8 units carried. */
template <int HN, bool FP8>
__device__ __forceinline__ void rm_consume(const rm_params &p, const rm_smem &m, int64_t t, int head0, int nchunks,
                                           int warp, int lane, float (&m_run)[rm_cfg<HN, FP8>::NCOL],
                                           float (&l_run)[rm_cfg<HN, FP8>::NCOL],
                                           float (&o)[8][rm_cfg<HN, FP8>::NACC], float (&smax_run)[4]) {
  typedef rm_cfg<HN, FP8> C;
  constexpr int NA = C::NACC;
  constexpr int WN = RM_WN;
  const int cw = warp >> 2, w = warp & 3, g = lane >> 2, qd = lane & 3;
  const int hoff = WN * cw; /* this warpgroup's heads within the CTA */
  const int bar_wg = C::BAR_CONSUMER + cw;
  const int r0 = 16 * w + g; /* rows r0, r0 + 8 of every S^T tile */
  rm_load_q<WN, FP8>(p, t, head0, hoff, m.q_s, m.qinv_s, w, lane);
  ptx_fence_proxy_async_smem();
  ptx_bar_sync(bar_wg, 128);

#pragma unroll
  for (int i = 0; i < C::NCOL; ++i) {
    m_run[i] = -INFINITY;
    l_run[i] = 0.f;
  }
#pragma unroll
  for (int mt = 0; mt < 8; ++mt)
#pragma unroll
    for (int i = 0; i < NA; ++i) o[mt][i] = 0.f;

  const uint32_t q_u32 = ptx_smem_u32(m.q_s) + cw * 2 * RM_RG_BYTES, tile_u32 = ptx_smem_u32(m.tile_s);
  const uint32_t p_u32 = ptx_smem_u32(m.p_s) + cw * C::P_WG_BYTES;
  const uint64_t dq = ptx_wgmma_desc(q_u32, 128, RM_RG_BYTES);
  float qv[C::NCOL]; /* FP8: 2^-e of this thread's head columns */
#pragma unroll
  for (int j = 0; j < WN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) qv[2 * j + e] = FP8 ? m.qinv_s[hoff + 8 * j + 2 * qd + e] : 1.f;

  for (int c = 0; c < nchunks; ++c) {
    const int b = c & 1;
    ring_wait_full<2>(m.ring, c);
    const float *sc = m.sc_s + b * (C::SC_STAGE / 4);

    /* ---- qk_tile: S^T for the chunk's 64 rows and this warpgroup's 16 heads ---- */
    float s[NA];
    rm_qk<WN, FP8>(s, ptx_wgmma_desc(tile_u32 + b * RM_TILE_BYTES, 128, RM_RG_BYTES), dq, sc, qv, r0);

    /* ---- online_softmax over the chunk's 64 rows, per head column ---- */
    const int *valid = m.slot_s + c * RM_ROWS;
    const bool v0 = valid[r0] >= 0, v1 = valid[r0 + 8] >= 0;
    float cmax[C::NCOL];
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool ok = (e & 2) ? v1 : v0;
        s[4 * j + e] = ok ? s[4 * j + e] * p.scale_log2 : -INFINITY;
      }
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) cmax[2 * j + e] = fmaxf(s[4 * j + e], s[4 * j + e + 2]);
#pragma unroll
    for (int i = 0; i < C::NCOL; ++i) {
      cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 4));
      cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 8));
      cmax[i] = fmaxf(cmax[i], __shfl_xor_sync(0xffffffffu, cmax[i], 16));
    }
    float *red = m.red_s + cw * 8 * WN + (c & 1) * 4 * WN;
    if (g == 0) {
#pragma unroll
      for (int j = 0; j < WN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) red[w * WN + 8 * j + 2 * qd + e] = cmax[2 * j + e];
    }
    ptx_bar_sync(bar_wg, 128);
    float alpha[C::NCOL], base[C::NCOL];
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * j + 2 * qd + e, i = 2 * j + e;
        const float mx = fmaxf(fmaxf(red[col], red[WN + col]), fmaxf(red[2 * WN + col], red[3 * WN + col]));
        const float m_new = fmaxf(m_run[i], mx);
        base[i] = m_new == -INFINITY ? 0.f : m_new;
        alpha[i] = ptx_ex2(m_run[i] - base[i]);
        m_run[i] = m_new;
      }
    float pr[NA];
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) pr[4 * j + e] = ptx_ex2(s[4 * j + e] - base[2 * j + (e & 1)]);
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        l_run[2 * j + e] = l_run[2 * j + e] * alpha[2 * j + e] + (pr[4 * j + e] + pr[4 * j + e + 2]);

    /* FP8: O's group-g columns are kept in units of the largest scale of group g seen so far */
    float ratio[4] = {1.f, 1.f, 1.f, 1.f}, unit_inv[4] = {1.f, 1.f, 1.f, 1.f};
    if (FP8) {
#pragma unroll
      for (int gq = 0; gq < 4; ++gq) {
        const float u = fmaxf(smax_run[gq], sc[4 * RM_ROWS + gq]);
        unit_inv[gq] = __frcp_rn(u);
        if (u != smax_run[gq]) ratio[gq] = smax_run[gq] * unit_inv[gq];
        smax_run[gq] = u;
      }
    }

    /* ---- P^T to shared memory (stmatrix.trans writes the core matrices directly) ---- */
    {
      const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
      for (int v = 0; v < C::PVER; ++v) {
        float f0 = 1.f, f1 = 1.f;
        if (FP8) { /* P' = p * scale / unit, unit = the running largest scale: P' <= 1 */
          f0 = sc[v * RM_ROWS + r0] * unit_inv[v];
          f1 = sc[v * RM_ROWS + r0 + 8] * unit_inv[v];
        }
#pragma unroll
        for (int j = 0; j < WN / 8; j += 2) {
          uint32_t x[4];
#pragma unroll
          for (int jj = 0; jj < 2; ++jj) {
            const int q4 = 4 * (j + jj);
            if (FP8) {
              x[2 * jj] = ptx_f32x2_to_f16x2(pr[q4] * f0, pr[q4 + 1] * f0);
              x[2 * jj + 1] = ptx_f32x2_to_f16x2(pr[q4 + 2] * f1, pr[q4 + 3] * f1);
            } else {
              x[2 * jj] = ptx_f32x2_to_bf16x2(pr[q4], pr[q4 + 1]);
              x[2 * jj + 1] = ptx_f32x2_to_bf16x2(pr[q4 + 2], pr[q4 + 3]);
            }
          }
          const uint32_t addr = p_u32 + v * C::P_VER_BYTES + (j + (mi >> 1)) * 1024 + (2 * w + (mi & 1)) * 128 +
                                ri * 16;
          ptx_stmatrix_x4_trans(addr, x[0], x[1], x[2], x[3]);
        }
      }
    }
    /* ---- rescale O (alpha per head column, FP8: the unit's change) only when one changed ---- */
    bool same = ratio[0] == 1.f && ratio[1] == 1.f && ratio[2] == 1.f && ratio[3] == 1.f;
#pragma unroll
    for (int i = 0; i < C::NCOL; ++i) same = same && alpha[i] == 1.f;
    if (!same) {
#pragma unroll
      for (int mt = 0; mt < 8; ++mt)
#pragma unroll
        for (int j = 0; j < WN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[mt][4 * j + e] *= alpha[2 * j + (e & 1)] * ratio[mt >> 1];
    }
    ptx_fence_proxy_async_smem();
    ptx_bar_sync(bar_wg, 128); /* P^T complete */

    /* ---- pv_tile: O^T += V^T . P^T, then the tile goes back to the producer ---- */
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) ptx_reg_fence(o[mt]);
    ptx_wgmma_fence();
    const uint32_t v_u32 = tile_u32 + b * RM_TILE_BYTES;
#pragma unroll
    for (int mt = 0; mt < 8; ++mt)
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint64_t da = ptx_wgmma_desc(v_u32 + mt * 1024 + ks * 2 * RM_RG_BYTES, RM_RG_BYTES, 128);
        const uint64_t db = ptx_wgmma_desc(p_u32 + (FP8 ? (mt >> 1) : 0) * C::P_VER_BYTES + ks * 256, 128, 1024);
        ptx_wgmma_k16<WN, FP8, 1, 0>(o[mt], da, db, 1);
      }
    ptx_wgmma_commit();
    ptx_wgmma_wait<0>();
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) ptx_reg_fence(o[mt]);
    ptx_mbar_arrive(ring_empty(m.ring, b)); /* the producer may refill this tile while we go on */
  }
}

/* Consumer warpgroup cw, after the last chunk: each head column's l summed over the 16 row-lanes of a
 * warp (butterfly; every lane gets it), and the warp's sums to red[w][16] (m.red_s's first half for
 * cw). Returns red; rm_l_total adds a column's four warps in order, after a warpgroup barrier. */
template <int HN, bool FP8>
__device__ __forceinline__ float *rm_l_to_red(const rm_smem &m, int warp, int lane,
                                              float (&l_run)[rm_cfg<HN, FP8>::NCOL]) {
  typedef rm_cfg<HN, FP8> C;
  constexpr int WN = RM_WN;
  const int cw = warp >> 2, w = warp & 3, g = lane >> 2, qd = lane & 3;
  float *red = m.red_s + cw * 8 * WN;
#pragma unroll
  for (int i = 0; i < C::NCOL; ++i) {
    float l = l_run[i];
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    l_run[i] = l;
  }
  if (g == 0) {
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) red[w * WN + 8 * j + 2 * qd + e] = l_run[2 * j + e];
  }
  return red;
}
__device__ __forceinline__ float rm_l_total(const float *red, int col) {
  return ((red[col] + red[RM_WN + col]) + red[2 * RM_WN + col]) + red[3 * RM_WN + col];
}

/* Consumer warpgroup, after the last chunk: l summed over the column's 16 row-lanes of each warp
 * (butterfly) then over the warps in order, and the unnormalised O (true units) to the staging
 * area [head][dim], (m, l) beside it. */
template <int HN, bool FP8>
__device__ __forceinline__ void rm_stage_partials(const rm_smem &m, int warp, int lane,
                                                  const float (&m_run)[rm_cfg<HN, FP8>::NCOL],
                                                  float (&l_run)[rm_cfg<HN, FP8>::NCOL],
                                                  const float (&o)[8][rm_cfg<HN, FP8>::NACC],
                                                  const float (&smax_run)[4]) {
  typedef rm_cfg<HN, FP8> C;
  constexpr int WN = RM_WN;
  const int cw = warp >> 2, w = warp & 3, g = lane >> 2, qd = lane & 3;
  const int hoff = WN * cw;
  const float *red = rm_l_to_red<HN, FP8>(m, warp, lane, l_run);
#pragma unroll
  for (int mt = 0; mt < 8; ++mt)
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int dim = 64 * mt + 16 * w + g + 8 * (e >> 1);
        const int h = hoff + 8 * j + 2 * qd + (e & 1);
        m.ost_s[h * RM_OSTRIDE + dim] = o[mt][4 * j + e] * (FP8 ? smax_run[mt >> 1] : 1.f); /* 0 * 0 if none */
      }
  ptx_bar_sync(C::BAR_CONSUMER + cw, 128);
  if (w == 0 && g == 0) {
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * j + 2 * qd + e;
        m.ml_s[hoff + col] = make_float2(m_run[2 * j + e], rm_l_total(red, col));
      }
  }
}

/* Consumer warpgroup of an unsplit CTA (a cluster of one): l summed as rm_stage_partials sums it, then
 * O^T normalised from the accumulators and stored through the warpgroup's own Q area — no fp32
 * staging, no cluster barriers, no merge (the arithmetic of staging and merging one split, its tests
 * included: a head whose l is not positive gets out 0 and lse -inf). */
template <int HN, bool FP8>
__device__ __forceinline__ void rm_store_unsplit(const rm_params &p, const rm_smem &m, int64_t t, int head0,
                                                 int warp, int lane, const float (&m_run)[rm_cfg<HN, FP8>::NCOL],
                                                 float (&l_run)[rm_cfg<HN, FP8>::NCOL],
                                                 const float (&o)[8][rm_cfg<HN, FP8>::NACC],
                                                 const float (&smax_run)[4]) {
  typedef rm_cfg<HN, FP8> C;
  constexpr int WN = RM_WN;
  const int cw = warp >> 2, w = warp & 3, g = lane >> 2, qd = lane & 3;
  const int hoff = WN * cw, H = p.num_heads;
  const float *red = rm_l_to_red<HN, FP8>(m, warp, lane, l_run);
  ptx_bar_sync(C::BAR_CONSUMER + cw, 128);
  float inv[C::NCOL];
#pragma unroll
  for (int j = 0; j < WN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = 8 * j + 2 * qd + e, h = head0 + hoff + col;
      const float L = rm_l_total(red, col);
      const bool live = L > 0.f; /* the merge's test: anything else (0, NaN) gives out 0, lse -inf */
      inv[2 * j + e] = live ? __frcp_rn(L) : 0.f;
      if (p.io.lse && w == 0 && g == 0 && h < H)
        p.io.lse[t * H + h] = live ? mla_lse(m_run[2 * j + e], L) : mla_lse(-INFINITY, 0.f);
    }
  /* out through this warpgroup's Q area (free since its last QK): its 16 heads' rows of 512 bf16 at
   * RM_OUT_STRIDE bytes, written by stmatrix.trans (each 8 x 8 block of the accumulators turned head-
   * major, conflict-free), then each head's row by 16-byte coalesced stores. */
  const uint32_t ob = ptx_smem_u32(m.q_s) + cw * 2 * RM_RG_BYTES;
  const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
  for (int mt = 0; mt < 8; ++mt) {
    const float u = FP8 ? smax_run[mt >> 1] : 1.f;
    uint32_t x[4];
#pragma unroll
    for (int j = 0; j < WN / 8; ++j)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) { /* dims 16w + g (e = 0, 1) and 16w + g + 8 (e = 2, 3) */
        const float a = inv[2 * j] > 0.f ? o[mt][4 * j + 2 * hh] * u * inv[2 * j] : 0.f;
        const float b = inv[2 * j + 1] > 0.f ? o[mt][4 * j + 2 * hh + 1] * u * inv[2 * j + 1] : 0.f;
        x[2 * j + hh] = ptx_f32x2_to_bf16x2(a, b);
      }
    ptx_stmatrix_x4_trans(ob + (8 * (mi >> 1) + ri) * RM_OUT_STRIDE + (64 * mt + 16 * w + 8 * (mi & 1)) * 2, x[0],
                          x[1], x[2], x[3]);
  }
  ptx_bar_sync(C::BAR_CONSUMER + cw, 128);
  const uint8_t *rows = m.q_s + cw * 2 * RM_RG_BYTES;
#pragma unroll
  for (int k = 0; k < WN * MLA_V_DIM / 8 / 128; ++k) {
    const int c = 32 * w + lane + 128 * k, hh = c / (MLA_V_DIM / 8), c16 = c % (MLA_V_DIM / 8);
    const uint4 v = *(const uint4 *)(rows + hh * RM_OUT_STRIDE + c16 * 16);
    if (head0 + hoff + hh < H) *(uint4 *)(p.io.out + (t * H + head0 + hoff + hh) * MLA_V_DIM + c16 * 8) = v;
  }
}

/* Every thread of a split CTA (S = 2..8; an unsplit one stores its own out, rm_store_unsplit), between
 * two cluster barriers: merge the S splits through distributed shared memory in rank order. Rank r
 * writes the 4-dim columns [128 r / S, 128 (r + 1) / S) of every head, U units (head, column) a thread
 * at most; each thread issues every load of all its units — S peers' (m, l) and O pieces each, a round
 * trip over the SM-to-SM network — before it combines any (a loop that waited for each unit's loads in
 * turn took 2.6 us at S = 2: H100 trace, 2026-12-06). */
template <int HN, bool FP8, int S>
__device__ __forceinline__ void rm_merge_splits_s(const rm_params &p, const rm_smem &m, int64_t t, int head0,
                                                  int tid) {
  typedef rm_cfg<HN, FP8> C;
  constexpr int U = (HN * ((MLA_V_DIM / 4 + S - 1) / S) + C::THREADS - 1) / C::THREADS;
  const int H = p.num_heads;
  static_assert(S >= 2 && S <= RM_MAX_CLUSTER, "a split CTA's cluster");
  const int rank = (int)ptx_cluster_ctarank();
  const uint32_t ml_u32 = ptx_smem_u32(m.ml_s), ost_u32 = ptx_smem_u32(m.ost_s);
  const int c0 = rank * (MLA_V_DIM / 4) / S;            /* this rank's first float4 column */
  const int nc = (rank + 1) * (MLA_V_DIM / 4) / S - c0; /* and how many (S divides 128 or not) */
  const int units = HN * nc;
  float2 ml[U][S];
  float4 ov[U][S];
  int hs[U], ds[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int u = tid + k * C::THREADS;
    hs[k] = u / nc;
    ds[k] = 4 * (c0 + u - hs[k] * nc);
    if (u >= units || head0 + hs[k] >= H) hs[k] = -1;
#pragma unroll
    for (int s = 0; s < S; ++s) {
      ml[k][s] = make_float2(0.f, 0.f);
      ov[k][s] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (hs[k] >= 0) {
        ml[k][s] = ptx_ld_cluster_f32x2(ptx_mapa(ml_u32 + hs[k] * 8, s));
        ov[k][s] = ptx_ld_cluster_f32x4(ptx_mapa(ost_u32 + (hs[k] * RM_OSTRIDE + ds[k]) * 4, s));
      }
    }
  }
#pragma unroll
  for (int k = 0; k < U; ++k) {
    if (hs[k] < 0) continue;
    float M = -INFINITY;
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (ml[k][s].y > 0.f) M = fmaxf(M, ml[k][s].x);
    float L = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (ml[k][s].y > 0.f) { /* a split with nothing (l = 0) contributes nothing */
        const float wgt = ptx_ex2(ml[k][s].x - M);
        const float4 v = ov[k][s];
        L += wgt * ml[k][s].y;
        acc.x += wgt * v.x; acc.y += wgt * v.y; acc.z += wgt * v.z; acc.w += wgt * v.w;
      }
    const float inv = L > 0.f ? __frcp_rn(L) : 0.f;
    uint2 packed;
    packed.x = ptx_f32x2_to_bf16x2(acc.x * inv, acc.y * inv);
    packed.y = ptx_f32x2_to_bf16x2(acc.z * inv, acc.w * inv);
    const int h = hs[k], d = ds[k];
    *(uint2 *)(p.io.out + ((t * H + head0 + h) * MLA_V_DIM + d)) = packed;
    if (p.io.lse && d == 0) p.io.lse[t * H + head0 + h] = mla_lse(M, L);
  }
}
template <int HN, bool FP8>
__device__ __forceinline__ void rm_merge_splits(const rm_params &p, const rm_smem &m, int64_t t, int head0, int tid) {
  static_assert(RM_MAX_CLUSTER == 8, "one case a cluster size");
  switch (p.splits) { /* 2..8: the kernel returned before the merge when unsplit */
    case 2: rm_merge_splits_s<HN, FP8, 2>(p, m, t, head0, tid); break;
    case 3: rm_merge_splits_s<HN, FP8, 3>(p, m, t, head0, tid); break;
    case 4: rm_merge_splits_s<HN, FP8, 4>(p, m, t, head0, tid); break;
    case 5: rm_merge_splits_s<HN, FP8, 5>(p, m, t, head0, tid); break;
    case 6: rm_merge_splits_s<HN, FP8, 6>(p, m, t, head0, tid); break;
    case 7: rm_merge_splits_s<HN, FP8, 7>(p, m, t, head0, tid); break;
    default: rm_merge_splits_s<HN, FP8, 8>(p, m, t, head0, tid); break;
  }
}

/* The CTA's shared memory (rm_cfg's plan) as pointers, and its barriers' initialisation (one thread,
 * before a __syncthreads). */
template <int HN, bool FP8>
__device__ __forceinline__ rm_smem rm_smem_of(uint8_t *smem) {
  typedef rm_cfg<HN, FP8> C;
  rm_smem m;
  m.q_s = smem + C::Q_OFF;
  m.tile_s = smem + C::TILE_OFF;
  m.p_s = smem + C::P_OFF;
  m.sc_s = (float *)(smem + C::SC_OFF);
  m.slot_s = (int *)(smem + C::SLOT_OFF);
  m.red_s = (float *)(smem + C::RED_OFF);
  m.qinv_s = (float *)(smem + C::QINV_OFF);
  m.ml_s = (float2 *)(smem + C::ML_OFF);
  m.ost_s = (float *)m.tile_s;
  m.ring.full = ptx_smem_u32(smem + C::BAR_OFF);
  m.ring.empty = m.ring.full + 16;
  m.stg_s = smem + (C::STAGED ? C::STG_OFF : 0);
  m.stg_full = m.ring.full + 32;
  return m;
}
template <int HN, bool FP8>
__device__ __forceinline__ void rm_init_barriers(const rm_smem &m) {
  typedef rm_cfg<HN, FP8> C;
  ring_init(m.ring, 2, 128, 128 * C::CWG);
  if (C::STAGED) {
    ptx_mbar_init(m.stg_full, 64);
    ptx_fence_mbar_init(); /* the bulk copies complete on it (async proxy) */
  }
}

/* ---------------------------------------------------------------------------------------------
 * The kernel. Grid: tokens x groups x splits CTAs (split fastest: a cluster is one (token, group)).
 */
template <int HN, bool FP8>
__global__ void __launch_bounds__(rm_cfg<HN, FP8>::THREADS, 1) rm_attention_kernel(const rm_params p) {
  typedef rm_cfg<HN, FP8> C;
  constexpr int NA = C::NACC;
  extern __shared__ __align__(1024) uint8_t smem[];
  const rm_smem m = rm_smem_of<HN, FP8>(smem);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int64_t cta = blockIdx.x;
  const int split = (int)(cta % p.splits);
  cta /= p.splits;
  const int group = (int)(cta % p.num_groups);
  const int64_t t = p.token_offset + cta / p.num_groups;
  const int head0 = group * HN;

  if (tid == 0) rm_init_barriers<HN, FP8>(m);
  __syncthreads();
  ptx_griddep_wait(); /* q, indices, lens, KV may come from the previous kernel */

  int begin, end;
  const int nchunks = rm_range(p, t, split, &begin, &end);
  const int32_t *idx_row = p.io.indices + t * p.io.indices_stride;

  float m_run[C::NCOL], l_run[C::NCOL]; /* consumer: per head column, log2 domain */
  float o[8][NA];                       /* consumer: O^T, m-tile mt = dims 64mt.. */
  float smax_run[4] = {0.f, 0.f, 0.f, 0.f}; /* FP8: O's unit per scale group (0 until the first chunk) */

  if (warp >= 4 * C::CWG) {
    /* producer: every entry of the split as a slot or -1, once (no index load sits in front of a
     * row load, and the consumer masks with the same array), then the rows */
    const int w = warp - 4 * C::CWG;
    for (int i = tid - 128 * C::CWG; i < nchunks * RM_ROWS; i += 128)
      m.slot_s[i] = mla_entry_slot(idx_row, begin + i, end, p.io.num_slots);
    ptx_bar_sync(C::BAR_PRODUCER, 128);
    if (C::STAGED) rm_produce_fp8_staged<HN, FP8>(p, m, nchunks, w, lane);
    else if (FP8) rm_produce_fp8<HN, FP8>(p, m, nchunks, w, lane);
    else rm_produce_bf16(p, m, nchunks, w, lane);
  } else {
    rm_consume<HN, FP8>(p, m, t, head0, nchunks, warp, lane, m_run, l_run, o, smax_run);
  }

  ptx_griddep_launch_dependents();
  if (p.splits == 1) { /* the consumers store out from their accumulators; nothing to merge */
    if (warp < 4 * C::CWG) rm_store_unsplit<HN, FP8>(p, m, t, head0, warp, lane, m_run, l_run, o, smax_run);
    return;
  }
  __syncthreads(); /* tiles free: the O staging area reuses them */
  if (warp < 4 * C::CWG) rm_stage_partials<HN, FP8>(m, warp, lane, m_run, l_run, o, smax_run);
  ptx_cluster_sync(); /* every CTA of the (token, group) has its (m, l, O) staged */
  rm_merge_splits<HN, FP8>(p, m, t, head0, tid);
  ptx_cluster_sync(); /* peers may still read this CTA's staging */
}

/* ---------------------------------------------------------------------------------------------
 * Host side.
 */
/* The kernel's parameters for a call and its plan. */
static rm_params rm_params_of(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl) {
  rm_params prm;
  prm.io = mla_io_of(a);
  prm.scale_log2 = mla_scale_log2(a);
  prm.topk = a->topk;
  prm.num_heads = a->num_heads;
  prm.token_offset = 0;
  prm.num_groups = pl->groups;
  prm.splits = pl->splits;
  prm.blocks_per_split = pl->blocks_per_split;
  prm.num_blocks = pl->num_blocks;
  return prm;
}

template <int HN, bool FP8>
static cudaError_t rm_launch(rm_params prm, int64_t num_tokens, cudaStream_t stream) {
  static dsa_smem_cache cache;
  const int64_t per_token = (int64_t)prm.num_groups * prm.splits;
  return mla_launch_tokens(num_tokens, per_token, [&](int64_t t0, int64_t nt) {
    prm.token_offset = t0;
    /* PDL, and the splits of a (token, group) as one cluster */
    return dsa_launch_smem_cluster(rm_attention_kernel<HN, FP8>, &cache, dim3((unsigned)(nt * per_token)),
                                   rm_cfg<HN, FP8>::THREADS, rm_cfg<HN, FP8>::SMEM_BYTES, stream, true,
                                   (unsigned)prm.splits, prm);
  });
}

extern "C" int dsa_attention_rows_as_m_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl,
                                              cudaStream_t stream) {
  if (a->num_tokens <= 0) return 0;
  const rm_params prm = rm_params_of(a, pl);
  const bool fp8 = a->kv_format == DSA_KV_FP8_PACKED;
  cudaError_t err;
  if (pl->mt == 1)
    err = fp8 ? rm_launch<16, true>(prm, a->num_tokens, stream) : rm_launch<16, false>(prm, a->num_tokens, stream);
  else
    err = fp8 ? rm_launch<32, true>(prm, a->num_tokens, stream) : rm_launch<32, false>(prm, a->num_tokens, stream);
  return (int)err;
}
