/*
 * mla_v3_bf16.cu — development version v3 of sparse MLA attention: heads as M (64-head tiles,
 * FlashMLA's orientation), dense bf16 KV. NOT part of the library yet: written without device
 * time (2026-11-30, after v2's measurements showed N = 16 wgmma is bound by shared-memory reads,
 * docs/PERF.md); this file carries its own check against the float64 reference and a timer, so
 * the next device session can run, fix and measure it before it moves to src/.
 *
 * Per CTA: one token x 64 heads, all of the token's index entries in chunks of 64 rows.
 *   QK  S[64 heads, 64 rows] = Q[64, 576] . K^T     wgmma m64n64k16, A = Q, B = the K tile (both
 *                                                    K-major, shared memory)
 *   PV  O[64, 512] += P[64, 64] . V[64, 512]          two m64n256k16 per k-step, A = P (shared
 *                                                    memory, K-major), B = the tile read MN-major
 * Roles (384 threads): warpgroup 0 runs QK and the online softmax for the chunk and PV for dims
 * 0..255; warpgroup 1 runs PV for dims 256..511 with the P and alpha warpgroup 0 publishes
 * (named barriers 1 "P ready" / 2 "P free"; 3 Q loaded, 4 epilogue, 5 P complete within warpgroup 0); warpgroup 2 gathers rows by cp.async into a
 * two-tile mbarrier ring (two chunks of copies in flight). setmaxnreg: 224 registers for the
 * consumers (O half = 128 a thread), 56 for the producer.
 * Budget arithmetic (PERF.md): ~2,200 tensor cycles per chunk and 64 heads.
 *
 * Usage: dsa-dev-mla-v3 [check_tokens heads topk time_tokens]   (default 16 128 2048 4096): checks
 * check_tokens tokens (random lens, -1 and out-of-range slots) against the float64 reference, then
 * times time_tokens tokens (prefill-like, all entries valid).
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsa.h"
#include "dsa_ref.h"
#include "ptx.cuh"

#define V3_THREADS 384
#define V3_HEADS 64
#define V3_ROWS 64
#define V3_RG 9216 /* one 8-row (or 8-head) group of a 576-wide tile: 72 core matrices */
#define V3_TILE (8 * V3_RG)
#define V3_Q_OFF 0
#define V3_TILE_OFF (V3_Q_OFF + 8 * V3_RG)
#define V3_P_OFF (V3_TILE_OFF + 2 * V3_TILE)     /* P [8 head groups][8 row blocks][128 B] */
#define V3_VALID_OFF (V3_P_OFF + 8 * 1024)      /* int [2][64] */
#define V3_ALPHA_OFF (V3_VALID_OFF + 2 * 64 * 4) /* float [64] */
#define V3_L_OFF (V3_ALPHA_OFF + 64 * 4)         /* float [64] */
#define V3_BAR_OFF (V3_L_OFF + 64 * 4)           /* full[2], empty[2] */
#define V3_SMEM (V3_BAR_OFF + 32)
static_assert(V3_SMEM <= 227 * 1024, "shared memory");

typedef struct {
  const __nv_bfloat16 *q;  /* [T, H, 576] */
  const __nv_bfloat16 *kv; /* [num_slots, kv_stride] */
  int64_t kv_stride;
  int64_t num_slots;
  const int32_t *indices; /* [T, indices_stride] */
  int64_t indices_stride;
  const int32_t *lens; /* [T] or NULL */
  __nv_bfloat16 *out;  /* [T, H, 512] */
  float *lse;          /* [T, H] or NULL */
  float scale_log2;
  int topk, num_heads, num_groups;
} v3_params;

__device__ __forceinline__ int v3_slot(const int32_t *idx_row, int e, int end, int64_t num_slots) {
  if (e >= end) return -1;
  const int idx = __ldg(idx_row + e);
  return (idx >= 0 && (int64_t)idx < num_slots) ? idx : -1;
}

__global__ void __launch_bounds__(V3_THREADS, 1) mla_v3_kernel(const v3_params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t s_u32 = ptx_smem_u32(smem);
  const uint32_t q_u32 = s_u32 + V3_Q_OFF, tile_u32 = s_u32 + V3_TILE_OFF, p_u32 = s_u32 + V3_P_OFF;
  int *valid_s = (int *)(smem + V3_VALID_OFF);
  float *alpha_s = (float *)(smem + V3_ALPHA_OFF);
  float *l_s = (float *)(smem + V3_L_OFF);
  const uint32_t bar_full = s_u32 + V3_BAR_OFF, bar_empty = bar_full + 16;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int group = (int)(blockIdx.x % p.num_groups);
  const int64_t t = blockIdx.x / p.num_groups;
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
  const int n = end > 0 ? (end + V3_ROWS - 1) / V3_ROWS : 0;
  const int32_t *idx_row = p.indices + t * p.indices_stride;

  if (warp >= 8) {
    /* ================= producer: cp.async rows into the tile ring ================= */
    ptx_setmaxnreg_dec<56>();
    const int w = warp - 8, r = lane & 7, kk = lane >> 3;
    for (int c = 0; c < n; ++c) {
      const int b = c & 1;
      if (c >= 2) ptx_mbar_wait(bar_empty + 8 * b, ((c >> 1) - 1) & 1);
      int slot[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) slot[i] = v3_slot(idx_row, c * V3_ROWS + 8 * i + r, end, p.num_slots);
      if (w == 0 && kk == 0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) valid_s[b * V3_ROWS + 8 * i + r] = slot[i];
      }
      const uint32_t dst = tile_u32 + b * V3_TILE;
#pragma unroll
      for (int j = 0; j < 5; ++j) {
        const int col = kk + 4 * w + 16 * j;
        if (col < 72) {
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const __nv_bfloat16 *src = slot[i] >= 0 ? p.kv + (int64_t)slot[i] * p.kv_stride + col * 8 : p.kv;
            ptx_cp_async_16(dst + i * V3_RG + col * 128 + r * 16, src, slot[i] >= 0 ? 16 : 0);
          }
        }
      }
      ptx_cp_async_commit();
      if (c >= 1) { /* chunk c-1 has landed: publish it (chunk c stays in flight) */
        ptx_cp_async_wait<1>();
        ptx_fence_proxy_async_smem();
        ptx_mbar_arrive(bar_full + 8 * ((c - 1) & 1));
      }
    }
    if (n > 0) {
      ptx_cp_async_wait<0>();
      ptx_fence_proxy_async_smem();
      ptx_mbar_arrive(bar_full + 8 * ((n - 1) & 1));
    }
    return;
  }

  /* ================= consumers ================= */
  ptx_setmaxnreg_inc<224>();
  const int cw = warp >> 2, w = warp & 3, g = lane >> 2, qd = lane & 3;
  /* Q: 64 heads x 72 chunks of 16 B, rows past H zero */
  for (int hh = warp; hh < V3_HEADS; hh += 8) {
    const int h = head0 + hh;
    for (int c = lane; c < 72; c += 32) {
      uint4 v = make_uint4(0, 0, 0, 0);
      if (h < H) v = *(const uint4 *)(p.q + ((t * H + h) * 576 + c * 8));
      *(uint4 *)(smem + V3_Q_OFF + (hh >> 3) * V3_RG + c * 128 + (hh & 7) * 16) = v;
    }
  }
  ptx_fence_proxy_async_smem();
  ptx_bar_sync(3, 256);

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  const int dbase = 256 * cw; /* this warpgroup's output dims */
  const int h0 = 16 * w + g;  /* this thread's head rows h0, h0 + 8 (within the 64) */
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  for (int c = 0; c < n; ++c) {
    const int b = c & 1;
    ptx_mbar_wait(bar_full + 8 * b, (c >> 1) & 1);
    const uint32_t kv_u32 = tile_u32 + b * V3_TILE;
    float a0 = 1.f, a1 = 1.f;
    if (cw == 0) {
      /* ---- qk_tile ---- */
      float s[32];
      const uint64_t dq = ptx_wgmma_desc(q_u32, 128, V3_RG), dk = ptx_wgmma_desc(kv_u32, 128, V3_RG);
      ptx_wgmma_fence();
#pragma unroll
      for (int k = 0; k < 36; ++k) ptx_wgmma_m64n64k16_bf16<0, 0>(s, dq + 16 * k, dk + 16 * k, k > 0);
      ptx_wgmma_commit();
      ptx_wgmma_wait<0>();
      ptx_reg_fence(s);
      /* ---- online_softmax: a head row lives in one lane quad ---- */
      const int *valid = valid_s + b * V3_ROWS;
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool ok = valid[8 * j + 2 * qd + (e & 1)] >= 0;
          s[4 * j + e] = ok ? s[4 * j + e] * p.scale_log2 : -INFINITY;
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
      /* ---- P (bf16) and alpha to shared memory, for both warpgroups' PV ---- */
      if (c >= 1) ptx_bar_sync(2, 256); /* warpgroup 1 is done with P(c-1) and alpha(c-1) */
      {
        const int mi = lane >> 3, ri = lane & 7;
#pragma unroll
        for (int jp = 0; jp < 4; ++jp) {
          /* matrices: (heads 16w.., rows 16jp..), (heads 16w+8.., 16jp..), (16w.., 16jp+8..), (16w+8.., 16jp+8..) */
          const uint32_t x0 = ptx_f32x2_to_bf16x2(s[8 * jp + 0], s[8 * jp + 1]);
          const uint32_t x1 = ptx_f32x2_to_bf16x2(s[8 * jp + 2], s[8 * jp + 3]);
          const uint32_t x2 = ptx_f32x2_to_bf16x2(s[8 * jp + 4], s[8 * jp + 5]);
          const uint32_t x3 = ptx_f32x2_to_bf16x2(s[8 * jp + 6], s[8 * jp + 7]);
          const uint32_t addr = p_u32 + (2 * w + (mi & 1)) * 1024 + (2 * jp + (mi >> 1)) * 128 + ri * 16;
          ptx_stmatrix_x4(addr, x0, x1, x2, x3);
        }
      }
      if (qd == 0) {
        alpha_s[h0] = a0;
        alpha_s[h0 + 8] = a1;
      }
      ptx_fence_proxy_async_smem();
      ptx_bar_arrive(1, 256); /* P(c), alpha(c) ready for warpgroup 1 */
      ptx_bar_sync(5, 128);   /* ... and complete for this warpgroup's own PV */
    } else {
      ptx_bar_sync(1, 256);
      a0 = alpha_s[h0];
      a1 = alpha_s[h0 + 8];
    }
    /* ---- rescale this warpgroup's O half, then pv_tile ---- */
    if (a0 != 1.f || a1 != 1.f) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        o[4 * j + 0] *= a0;
        o[4 * j + 1] *= a0;
        o[4 * j + 2] *= a1;
        o[4 * j + 3] *= a1;
      }
    }
    ptx_reg_fence(o);
    ptx_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint64_t da = ptx_wgmma_desc(p_u32 + ks * 256, 128, 1024);
      const uint64_t db = ptx_wgmma_desc(kv_u32 + ks * 2 * V3_RG + (dbase / 8) * 128, V3_RG, 128);
      ptx_wgmma_m64n256k16_bf16<0, 1>(o, da, db, 1);
    }
    ptx_wgmma_commit();
    ptx_wgmma_wait<0>();
    ptx_reg_fence(o);
    if (cw == 1 && c + 1 < n) ptx_bar_arrive(2, 256); /* done with P(c) and alpha(c) */
    ptx_mbar_arrive(bar_empty + 8 * b);
  }
  ptx_griddep_launch_dependents();

  /* ---- epilogue: l (quad sums) from warpgroup 0 to both, normalise, store ---- */
  if (cw == 0) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if (qd == 0) {
      l_s[h0] = l0;
      l_s[h0 + 8] = l1;
      if (p.lse) {
        if (head0 + h0 < H) p.lse[t * H + head0 + h0] = l0 > 0.f ? (m0 + log2f(l0)) * 0.6931471805599453f : -INFINITY;
        if (head0 + h0 + 8 < H)
          p.lse[t * H + head0 + h0 + 8] = l1 > 0.f ? (m1 + log2f(l1)) * 0.6931471805599453f : -INFINITY;
      }
    }
  }
  ptx_bar_sync(4, 256);
  const float L0 = l_s[h0], L1 = l_s[h0 + 8];
  const float i0 = L0 > 0.f ? 1.f / L0 : 0.f, i1 = L1 > 0.f ? 1.f / L1 : 0.f;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int h = head0 + h0 + 8 * hf;
    if (h >= H) continue;
    const float inv = hf ? i1 : i0;
    __nv_bfloat16 *dst = p.out + (t * H + h) * 512 + dbase + 2 * qd;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      *(uint32_t *)(dst + 8 * j) = ptx_f32x2_to_bf16x2(o[4 * j + 2 * hf] * inv, o[4 * j + 2 * hf + 1] * inv);
  }
}

/* ---------------------------------------------------------------------------------------------
 * Self-check and timer.
 */
#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)g_rng;
}
static float frnd(void) { return (float)(rnd() >> 8) / 16777216.f * 2.f - 1.f; }
int main(int argc, char **argv) {
  const int T = argc > 1 ? atoi(argv[1]) : 16, H = argc > 2 ? atoi(argv[2]) : 128,
            topk = argc > 3 ? atoi(argv[3]) : 2048, TT = argc > 4 ? atoi(argv[4]) : 4096;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("dsa-dev-mla-v3: no CUDA device\n");
    return 77;
  }
  if (T < 1 || H < 1 || H > 128 || topk < 1 || topk > 2048 || TT < 1) {
    fprintf(stderr, "usage: dsa-dev-mla-v3 [check_tokens heads 1..128 topk 1..2048 time_tokens]\n");
    return 2;
  }
  const int64_t S = 20000, stride = 576;
  const float scale = 0.0625f;
  uint16_t *kv = (uint16_t *)malloc(sizeof(uint16_t) * S * stride), *q = (uint16_t *)malloc(2 * (size_t)T * H * 576);
  int32_t *idx = (int32_t *)malloc(4 * (size_t)T * topk), *lens = (int32_t *)malloc(4 * (size_t)T);
  for (int64_t i = 0; i < S * stride; ++i) kv[i] = dsa_float_to_bf16(frnd());
  for (size_t i = 0; i < (size_t)T * H * 576; ++i) q[i] = dsa_float_to_bf16(2.f * frnd());
  for (int t = 0; t < T; ++t) {
    lens[t] = t % 7 == 3 ? (int)(rnd() % (uint32_t)(topk + 1)) : topk; /* some short rows, one maybe 0 */
    for (int i = 0; i < topk; ++i) {
      const uint32_t k = rnd() % 50;
      idx[(size_t)t * topk + i] = k == 0 ? -1 : k == 1 ? (int32_t)(S + 5) : (int32_t)(rnd() % (uint32_t)S);
    }
  }
  void *dkv, *dq, *didx, *dlens, *dout;
  float *dlse;
  CK(cudaMalloc(&dkv, 2 * (size_t)S * stride));
  CK(cudaMalloc(&dq, 2 * (size_t)T * H * 576));
  CK(cudaMalloc(&didx, 4 * (size_t)T * topk));
  CK(cudaMalloc(&dlens, 4 * (size_t)T));
  CK(cudaMalloc(&dout, 2 * (size_t)T * H * 512));
  CK(cudaMalloc(&dlse, 4 * (size_t)T * H));
  CK(cudaMemcpy(dkv, kv, 2 * (size_t)S * stride, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dq, q, 2 * (size_t)T * H * 576, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(didx, idx, 4 * (size_t)T * topk, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dlens, lens, 4 * (size_t)T, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xFF, 2 * (size_t)T * H * 512));

  v3_params prm;
  prm.q = (const __nv_bfloat16 *)dq;
  prm.kv = (const __nv_bfloat16 *)dkv;
  prm.kv_stride = stride;
  prm.num_slots = S;
  prm.indices = (const int32_t *)didx;
  prm.indices_stride = topk;
  prm.lens = (const int32_t *)dlens;
  prm.out = (__nv_bfloat16 *)dout;
  prm.lse = dlse;
  prm.scale_log2 = scale * 1.4426950408889634f;
  prm.topk = topk;
  prm.num_heads = H;
  prm.num_groups = (H + V3_HEADS - 1) / V3_HEADS;
  CK(cudaFuncSetAttribute(mla_v3_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, V3_SMEM));
  const dim3 grid((unsigned)(T * prm.num_groups));
  mla_v3_kernel<<<grid, V3_THREADS, V3_SMEM>>>(prm);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  /* reference */
  uint16_t *out = (uint16_t *)malloc(2 * (size_t)T * H * 512), *ref_b = (uint16_t *)malloc(2 * (size_t)T * H * 512);
  float *lse = (float *)malloc(4 * (size_t)T * H), *ref_lse = (float *)malloc(4 * (size_t)T * H);
  float *ref = (float *)malloc(4 * (size_t)T * H * 512);
  CK(cudaMemcpy(out, dout, 2 * (size_t)T * H * 512, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lse, dlse, 4 * (size_t)T * H, cudaMemcpyDeviceToHost));
  dsa_sparse_mla_args a;
  memset(&a, 0, sizeof a);
  a.q = q;
  a.num_tokens = T;
  a.num_heads = H;
  a.kv_cache = kv;
  a.kv_format = DSA_KV_BF16;
  a.num_slots = S;
  a.kv_stride = stride;
  a.indices = idx;
  a.indices_stride = topk;
  a.topk = topk;
  a.lens = lens;
  a.softmax_scale = scale;
  a.out = ref_b;
  a.lse = ref_lse;
  dsa_ref_sparse_mla(&a, ref);
  double worst = 0.0, worst_lse = 0.0;
  for (int t = 0; t < T; ++t) {
    double num = 0.0, den = 0.0;
    for (size_t e = 0; e < (size_t)H * 512; ++e) {
      const double gv = dsa_bf16_to_float(out[(size_t)t * H * 512 + e]), rv = ref[(size_t)t * H * 512 + e];
      num += (gv - rv) * (gv - rv);
      den += rv * rv;
    }
    const double rel = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
    if (!(rel <= worst)) worst = rel;
    for (int h = 0; h < H; ++h) {
      const double gl = lse[(size_t)t * H + h], rl = ref_lse[(size_t)t * H + h];
      const double err = (isinf(gl) && isinf(rl) && gl == rl) ? 0.0 : fabs(gl - rl) / fmax(1.0, fabs(rl));
      if (!(err <= worst_lse)) worst_lse = err;
    }
  }
  const int ok = worst <= 1e-2 && worst_lse <= 1e-3;
  printf("%s v3 bf16: %d tokens x %d heads, topk %d: max rel L2 %.3g, max lse err %.3g\n", ok ? "ok  " : "FAIL", T, H,
         topk, worst, worst_lse);

  /* timing: time_tokens tokens, every entry valid, back-to-back launches (hot L2) */
  int32_t *tidx = (int32_t *)malloc(4 * (size_t)TT * topk);
  for (size_t i = 0; i < (size_t)TT * topk; ++i) tidx[i] = (int32_t)(rnd() % (uint32_t)S);
  void *tq, *tdidx, *tout;
  float *tlse;
  CK(cudaMalloc(&tq, 2 * (size_t)TT * H * 576));
  CK(cudaMemset(tq, 0x3C, 2 * (size_t)TT * H * 576)); /* bf16 0x3C3C: any finite q times the same */
  CK(cudaMalloc(&tdidx, 4 * (size_t)TT * topk));
  CK(cudaMemcpy(tdidx, tidx, 4 * (size_t)TT * topk, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&tout, 2 * (size_t)TT * H * 512));
  CK(cudaMalloc(&tlse, 4 * (size_t)TT * H));
  v3_params tp = prm;
  tp.q = (const __nv_bfloat16 *)tq;
  tp.indices = (const int32_t *)tdidx;
  tp.lens = NULL;
  tp.out = (__nv_bfloat16 *)tout;
  tp.lse = tlse;
  const dim3 tgrid((unsigned)(TT * tp.num_groups));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) mla_v3_kernel<<<tgrid, V3_THREADS, V3_SMEM>>>(tp);
  CK(cudaEventRecord(e0));
  const int iters = 20;
  for (int i = 0; i < iters; ++i) mla_v3_kernel<<<tgrid, V3_THREADS, V3_SMEM>>>(tp);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaGetLastError());
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  const double us = 1000.0 * ms / iters;
  const double flop = 2.0 * TT * H * (double)topk * (576 + 512);
  printf("     %d tokens x %d heads, topk %d: %.1f us a launch (events, %d back-to-back), %.1f TFLOP/s\n", TT, H, topk,
         us, iters, flop / us * 1e-6);
  return ok ? 0 : 1;
}
