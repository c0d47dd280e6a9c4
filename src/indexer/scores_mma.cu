/*
 * indexer/scores_mma.cu — indexer scores on mma.sync, keys as M: the scorer for bf16-q decode and
 * other page sizes than 64 (host/choose.c), and for every shape when forced (DSA_KERNEL=scores:mma).
 *
 *   score[t, x] = softmax_scale * sum_h w[t,h] * relu( q[t,h,:] . k[x,:] ),   h < H <= 64, dims 128
 *
 * k comes from the paged FP8 index-K cache (k = fp8 * scale, one float scale per 128-dim row).
 * Decode and prefill share one kernel; they differ only in how a key coordinate x maps to a cache
 * slot (common/rows.cuh) and in which tokens a CTA groups (decode: the n MTP tokens of one request,
 * who see the same keys; prefill: up to 16 consecutive tokens).
 *
 * Per CTA (8 warps): a group of T tokens, a contiguous range of key tiles of 256 keys. Per warp and
 * tile: 32 keys x all heads of every token of the group as an MMA with M = keys, N = heads:
 *   A (32 keys x 128 dims): FP8 rows streamed global -> shared memory by cp.async through a
 *     3-4 stage pipeline per warp (zero-filled for slots outside the cache), then read into
 *     registers and converted to f16 pairs (e4m3 -> f16 is exact). Because a dot product does not
 *     care about the order of its terms, thread (g, c) of the warp takes bytes [16c, 16c+16) and
 *     [64+16c, 64+16c+16) of its rows as its fragment slots directly: 16-byte reads, no shuffles.
 *   B (128 dims x 32 heads): q staged once per CTA in shared memory as f16; the permutation above
 *     makes each thread's B slots 8 contiguous halves, one 16-byte shared load per two k-steps.
 *   mma.sync m16n8k16 f16 -> f32. bf16 q is scaled per (token, head) by a power of two into f16's
 *     range first (exact for bf16's 8-bit significand), undone with the head's q-scale after the
 *     dot product; FP8 q converts exactly and carries its q_scale the same way.
 *   Epilogue in registers: relu, weight, sum over heads (2 shuffles over the quad), one coalesced
 *     128-byte store per warp and token.
 *   Scores-only calls (fill_tail): positions [L, max_len) of each row are -inf; each CTA fills the
 *     part of that range that falls in its own tiles' positions, so rows with L = max_len cost
 *     nothing and no launch is added.
 * Shapes: T <= 16 tokens, H padded to 32 or 64 (zero q, zero weight), 256 keys a tile.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "common/launch.cuh"
#include "common/layout.h"
#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/mma.cuh"
#include "common/rows.cuh"
#include "indexer/scores.cuh"
#include "kernels.h"

#define MMA_WARPS 8
#define MMA_THREADS (MMA_WARPS * 32)
#define MMA_TILE (MMA_WARPS * 32)     /* keys per tile: 32 per warp */
#define MMA_QROW 136                 /* halves per staged q row: 128 + 8 pad (272 B: conflict-free) */
#define MMA_SMALL_T 8
#define MMA_STAGE_BYTES (MMA_TILE * (IDXK_SLOT_BYTES + 4)) /* rows, scales, valid flags */
#define MMA_WARP_ROWS_BYTES (32 * DSA_INDEX_HEAD_DIM)

static __host__ __device__ size_t sc_q_bytes(int T, int HP) {
  return ((size_t)T * HP * MMA_QROW * 2 + (size_t)3 * T * HP * 4 + sizeof(sc_group) + 127) & ~(size_t)127;
}
static size_t sc_smem_bytes(int T, int HP, int NS) { return sc_q_bytes(T, HP) + (size_t)NS * MMA_STAGE_BYTES; }

/* ---- the key pipeline: each warp streams its own 32 keys of every tile through NS shared-memory
 * stages with cp.async (zero-filled for keys outside the cache), so NS-1 tiles of loads are in
 * flight per warp without holding registers. Stage layout per warp: 32 rows x 128 B (16-byte
 * chunk j of row r at position j ^ 4*(r&1): the fragment reads below are conflict-free), then 32
 * float scales, then 32 validity flags. */

/* Issue the loads of this warp's 32 keys [x0, x0 + 32) into a stage. */
static __device__ __forceinline__ void sc_issue_keys(unsigned char *stage, const dsa_scores_params &p, int t0,
                                                     int x0, int lo, int hi, int lane) {
  const int page_size = p.cache.page_size;
  const long long page_bytes = (long long)page_size * IDXK_SLOT_BYTES;
  const int x = x0 + lane;
  long long slot = -1;
  if (x >= lo && x < hi) slot = rows_key_slot(p.rows, t0, x);
  const uint8_t *base = p.cache.data;
  int row = 0;
  if (slot >= 0) base += (long long)div_page((int)slot, page_size, &row) * page_bytes; /* slots < 2^31 */
  const uint32_t s_rows = (uint32_t)__cvta_generic_to_shared(stage);
  const uint32_t s_scale = s_rows + MMA_WARP_ROWS_BYTES;
  int *s_ok = (int *)(stage + MMA_WARP_ROWS_BYTES + 32 * 4);
  s_ok[lane] = slot >= 0;
  ptx_cp_async_4_zfill(s_scale + lane * 4, base + (long long)page_size * DSA_INDEX_HEAD_DIM + row * 4, slot >= 0 ? 4 : 0);
  const uint8_t *krow = base + (long long)row * DSA_INDEX_HEAD_DIM;
  const int ch = lane & 7;
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const int r = j * 4 + (lane >> 3);
    const unsigned long long src = __shfl_sync(0xffffffffu, (unsigned long long)krow, r);
    const int valid = __shfl_sync(0xffffffffu, (int)(slot >= 0), r);
    const uint32_t dst = s_rows + r * DSA_INDEX_HEAD_DIM + ((ch ^ ((r & 1) << 2)) << 4);
    ptx_cp_async_16(dst, (const void *)(src + ch * 16), valid ? 16 : 0);
  }
}

static __device__ __forceinline__ uint32_t u4_word(const uint4 &v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

/*
 * grid: x = ranges of tiles_per_cta tiles, y = token groups of T tokens.
 * Decode requires T == q_len_per_req and token_begin a multiple of it (one request per group).
 */
template <int HP, int NS, bool ONE>
__global__ void __launch_bounds__(MMA_THREADS, ONE ? 2 : 1)
    scores_mma_kernel(const dsa_scores_params p, int T, int tiles_per_cta) {
  extern __shared__ __align__(16) unsigned char smem[];
  __half *qs_smem = (__half *)smem;                                /* [T][HP][MMA_QROW] */
  float *wq_smem = (float *)(smem + (size_t)T * HP * MMA_QROW * 2); /* w * scale * qscale */
  float *w_smem = wq_smem + T * HP;                                /* w * scale */
  float *qsc_smem = w_smem + T * HP;                               /* q scale per (t, h) */
  sc_group *grp = (sc_group *)(qsc_smem + T * HP);
  unsigned char *kstages = smem + sc_q_bytes(T, HP); /* NS x [8 warps x stage] */

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  sc_cta cta;
  if (!sc_cta_begin(p, grp, T, MMA_TILE, tiles_per_cta, &cta)) return;
  const int t0 = cta.t0, nt = cta.nt, lo = cta.lo, hi = cta.hi, tile_begin = cta.tile_begin, tile_end = cta.tile_end;
  const long long range_lo = cta.range_lo, range_hi = cta.range_hi;

  /* Stage q (f16, scaled) and weights: one warp per (token, head) row, 4 dims a lane. */
  const int H = p.q.num_heads;
  for (int row = warp; row < T * HP; row += MMA_WARPS) {
    const int ti = row / HP, h = row % HP;
    const int ta = p.rows.token_begin + t0 + ti;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    float qscale = 1.f, w = 0.f;
    const bool live = ti < nt && h < H && grp->len[ti] > 0;
    if (live) {
      const long long qoff = ((long long)ta * H + h) * DSA_INDEX_HEAD_DIM + lane * 4;
      if (p.q.q_dtype == DSA_DTYPE_BF16) {
        qscale = sc_bf16_row_scaled(*(const uint2 *)((const __nv_bfloat16 *)p.q.q + qoff), v); /* live: warp-uniform */
      } else {
        const uint32_t raw = *(const uint32_t *)((const uint8_t *)p.q.q + qoff);
        const uint32_t lo2 = ptx_e4m3x2_to_f16x2((uint16_t)(raw & 0xffffu)), hi2 = ptx_e4m3x2_to_f16x2((uint16_t)(raw >> 16));
        const __half2 a = *(const __half2 *)&lo2, b = *(const __half2 *)&hi2;
        v[0] = __low2float(a);
        v[1] = __high2float(a);
        v[2] = __low2float(b);
        v[3] = __high2float(b);
        qscale = p.q.q_scale[(long long)ta * H + h];
      }
      w = sc_weight(p, ta, h);
    }
    __half2 h01 = __floats2half2_rn(v[0], v[1]), h23 = __floats2half2_rn(v[2], v[3]);
    uint2 packed;
    packed.x = *(uint32_t *)&h01;
    packed.y = *(uint32_t *)&h23;
    *(uint2 *)(qs_smem + (size_t)row * MMA_QROW + lane * 4) = packed;
    if (lane == 0) {
      wq_smem[row] = w * qscale;
      w_smem[row] = w;
      qsc_smem[row] = qscale;
      if (!(qscale >= 0.f)) grp->any_negative_qscale = 1;
    }
  }
  __syncthreads();
  const bool qscale_nonneg = grp->any_negative_qscale == 0;

  const int g = lane >> 2, c = lane & 3;
  unsigned char *my_stages = kstages + warp * (MMA_STAGE_BYTES / MMA_WARPS);
#define MMA_STAGE(i) (my_stages + ((i) % NS) * MMA_STAGE_BYTES)
#pragma unroll
  for (int i = 0; i < NS - 1; i++) {
    if (tile_begin + i < tile_end) sc_issue_keys(MMA_STAGE(i), p, t0, (tile_begin + i) * MMA_TILE + warp * 32, lo, hi, lane);
    ptx_cp_async_commit();
  }
  for (int tile = tile_begin; tile < tile_end; tile++) {
    const int it = tile - tile_begin;
    const int x0 = tile * MMA_TILE + warp * 32;
    ptx_cp_async_wait<NS - 2>();
    __syncwarp();
    /* The stage refilled now was read in the previous iteration, before the __syncwarp. */
    if (tile + NS - 1 < tile_end)
      sc_issue_keys(MMA_STAGE(it + NS - 1), p, t0, x0 + (NS - 1) * MMA_TILE, lo, hi, lane);
    ptx_cp_async_commit();
    /* This tile's keys -> A fragments (e4m3 pairs -> f16 pairs). */
    const unsigned char *st = MMA_STAGE(it);
    /* With one token (ONE) nothing is reused across tokens: fragments are converted as the MMAs
     * need them, which frees the registers of a[] for two CTAs per SM. */
    uint32_t a[ONE ? 1 : 2][8][4];
    float kscale[2][2];
    int kok[2][2];
#pragma unroll
    for (int m = 0; m < 2; m++) {
#pragma unroll
      for (int rh = 0; rh < 2; rh++) {
        const int r = m * 16 + g + 8 * rh;
        kscale[m][rh] = ((const float *)(st + MMA_WARP_ROWS_BYTES))[r];
        kok[m][rh] = ((const int *)(st + MMA_WARP_ROWS_BYTES + 32 * 4))[r];
      }
    }
#pragma unroll
    for (int m = 0; m < (ONE ? 0 : 2); m++) {
      uint4 rb[2][2];
#pragma unroll
      for (int rh = 0; rh < 2; rh++) {
        const int r = m * 16 + g + 8 * rh;
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
          rb[rh][hh] = *(const uint4 *)(st + r * DSA_INDEX_HEAD_DIM + (((c + 4 * hh) ^ ((r & 1) << 2)) << 4));
      }
#pragma unroll
      for (int s = 0; s < 8; s++) {
        const uint32_t w0 = u4_word(rb[0][s >> 2], s & 3);
        const uint32_t w1 = u4_word(rb[1][s >> 2], s & 3);
        a[m][s][0] = ptx_e4m3x2_to_f16x2((uint16_t)(w0 & 0xffffu));
        a[m][s][1] = ptx_e4m3x2_to_f16x2((uint16_t)(w1 & 0xffffu));
        a[m][s][2] = ptx_e4m3x2_to_f16x2((uint16_t)(w0 >> 16));
        a[m][s][3] = ptx_e4m3x2_to_f16x2((uint16_t)(w1 >> 16));
      }
    }
    const bool fast = qscale_nonneg && __all_sync(0xffffffffu, kscale[0][0] >= 0.f && kscale[0][1] >= 0.f &&
                                                                  kscale[1][0] >= 0.f && kscale[1][1] >= 0.f);

    for (int ti = 0; ti < nt; ti++) {
      const int L = grp->len[ti];
      if (L == 0) continue;
      const int bt = grp->begin[ti];
      if (x0 + 32 <= bt || x0 >= bt + L) continue; /* warp-uniform: no key of this warp is visible */
      float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
      for (int hg = 0; hg < HP / 32; hg++) {
        float acc[2][4][4];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
          for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.f;
        const __half *qrow = qs_smem + ((size_t)ti * HP + hg * 32 + g) * MMA_QROW + 16 * c;
#pragma unroll
        for (int sp = 0; sp < 4; sp++) {
          if constexpr (ONE) {
            /* k-steps 2sp, 2sp+1 of both m-tiles: one 8-byte read per row. */
            uint32_t a0[2][4], a1[2][4];
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
              for (int rh = 0; rh < 2; rh++) {
                const int r = m * 16 + g + 8 * rh;
                const uint2 w = *(const uint2 *)(st + r * DSA_INDEX_HEAD_DIM +
                                                 (((c + 4 * (sp >> 1)) ^ ((r & 1) << 2)) << 4) + 8 * (sp & 1));
                a0[m][rh] = ptx_e4m3x2_to_f16x2((uint16_t)(w.x & 0xffffu));
                a0[m][2 + rh] = ptx_e4m3x2_to_f16x2((uint16_t)(w.x >> 16));
                a1[m][rh] = ptx_e4m3x2_to_f16x2((uint16_t)(w.y & 0xffffu));
                a1[m][2 + rh] = ptx_e4m3x2_to_f16x2((uint16_t)(w.y >> 16));
              }
#pragma unroll
            for (int n = 0; n < 4; n++) {
              const uint4 b = *(const uint4 *)(qrow + n * 8 * MMA_QROW + 64 * (sp >> 1) + 8 * (sp & 1));
#pragma unroll
              for (int m = 0; m < 2; m++) {
                ptx_mma_m16n8k16_f16(acc[m][n], a0[m], b.x, b.y);
                ptx_mma_m16n8k16_f16(acc[m][n], a1[m], b.z, b.w);
              }
            }
          } else {
#pragma unroll
            for (int n = 0; n < 4; n++) {
              const uint4 b = *(const uint4 *)(qrow + n * 8 * MMA_QROW + 64 * (sp >> 1) + 8 * (sp & 1));
#pragma unroll
              for (int m = 0; m < 2; m++) {
                ptx_mma_m16n8k16_f16(acc[m][n], a[m][2 * sp], b.x, b.y);
                ptx_mma_m16n8k16_f16(acc[m][n], a[m][2 * sp + 1], b.z, b.w);
              }
            }
          }
        }
        /* Epilogue: this thread holds heads hg*32 + n*8 + 2c + {0,1} of rows g, g+8 per m-tile. */
        const float *wq = (fast ? wq_smem : w_smem) + ti * HP + hg * 32 + 2 * c;
        const float *qsc = qsc_smem + ti * HP + hg * 32 + 2 * c;
#pragma unroll
        for (int n = 0; n < 4; n++) {
          const float2 wv = *(const float2 *)(wq + n * 8);
          if (fast) {
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
              for (int rh = 0; rh < 2; rh++)
                part[m][rh] += wv.x * fmaxf(acc[m][n][2 * rh], 0.f) +
                               wv.y * fmaxf(acc[m][n][2 * rh + 1], 0.f);
          } else {
            const float2 sv = *(const float2 *)(qsc + n * 8);
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
              for (int rh = 0; rh < 2; rh++)
                part[m][rh] += wv.x * fmaxf(acc[m][n][2 * rh] * sv.x * kscale[m][rh], 0.f) +
                               wv.y * fmaxf(acc[m][n][2 * rh + 1] * sv.y * kscale[m][rh], 0.f);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < 2; m++)
#pragma unroll
        for (int rh = 0; rh < 2; rh++) {
          float v = part[m][rh];
          v += __shfl_xor_sync(0xffffffffu, v, 1);
          v += __shfl_xor_sync(0xffffffffu, v, 2);
          if (fast) v *= kscale[m][rh];
          part[m][rh] = kok[m][rh] ? v : -INFINITY;
        }
      /* Lane c stores key (m, rh) = (c >> 1, c & 1): 32 lanes, 32 distinct keys. */
      const float out = c == 0 ? part[0][0] : c == 1 ? part[0][1] : c == 2 ? part[1][0] : part[1][1];
      const int x = x0 + (c >> 1) * 16 + g + 8 * (c & 1);
      if (x >= bt && x < bt + L) p.scores[(long long)(t0 + ti) * p.scores_stride + (x - bt)] = out;
    }
  }
  sc_fill_tail(p, grp, nt, t0, range_lo, range_hi);
}

template <int HP, int NS, bool ONE>
static cudaError_t mma_launch_t(const dsa_scores_params *p, dim3 grid, int T, int tpc, cudaStream_t stream) {
  static dsa_smem_cache cache;
  return dsa_launch_smem(scores_mma_kernel<HP, NS, ONE>, &cache, grid, MMA_THREADS, sc_smem_bytes(T, HP, NS), stream,
                         false, *p, T, tpc);
}

#define MMA_SMEM_LIMIT (227 * 1024)

/* max_x <= DSA_MAX_ROW_LEN (checked in host/api_indexer.c): tile arithmetic in the kernel stays inside int. */
static int mma_launch(const dsa_scores_params *p, int T, int HP, int groups, int max_x,
                     cudaStream_t stream) {
  const int total_tiles = (int)(((int64_t)max_x + MMA_TILE - 1) / MMA_TILE);
  if (total_tiles == 0 || groups == 0) return 0;
  /* Enough CTAs to fill the SMs several times over; with a big token group the q staging is
   * worth amortising over more tiles per CTA, so aim for fewer waves. */
  const long long want = (long long)(p->num_sms > 0 ? p->num_sms : 132) * ((long long)T * HP >= 256 ? 2 : 8);
  int tpc;
  const dim3 grid = sc_grid(total_tiles, groups, want, 32, &tpc);
  cudaError_t err;
  if (T == 1 && HP == 32) {
    /* Decode without MTP: two CTAs per SM, three stages each. (64 heads would spill at the
     * 128-register cap, so they take the general path.) */
    err = mma_launch_t<32, 3, true>(p, grid, T, tpc, stream);
  } else {
    /* Four stages (three tiles of loads in flight) where shared memory allows, else two. */
    const bool deep = sc_smem_bytes(T, HP, 4) <= MMA_SMEM_LIMIT;
    if (HP == 32)
      err = deep ? mma_launch_t<32, 4, false>(p, grid, T, tpc, stream) : mma_launch_t<32, 2, false>(p, grid, T, tpc, stream);
    else
      err = deep ? mma_launch_t<64, 4, false>(p, grid, T, tpc, stream) : mma_launch_t<64, 2, false>(p, grid, T, tpc, stream);
  }
  return (int)err;
}

extern "C" int dsa_scores_mma_launch(const dsa_scores_params *p, cudaStream_t stream) {
  if (p->num_tokens <= 0) return 0;
  const int HP = p->q.num_heads <= 32 ? 32 : 64;
  int T, groups, max_x;
  sc_token_groups(p, HP == 32 ? SC_MAX_T : MMA_SMALL_T, &T, &groups, &max_x);
  return mma_launch(p, T, HP, groups, max_x, stream);
}
