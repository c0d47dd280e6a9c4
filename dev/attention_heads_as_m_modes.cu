/*
 * dev/attention_heads_as_m_modes.cu — where the heads_as_m attention kernel spends its time, by
 * leaving work out. The library's file is compiled into this one (src/attention/heads_as_m.cu); its
 * producer, its two consumer roles and its kernel are copied below with switches (g_mode bits: 1 = no
 * row loads, the producer only publishes (FP8 still converts zeros); 2 = no MMA / softmax, the
 * consumers only release tiles; 4 = no producer work, the producer publishes the row slots of tiles
 * it never writes (the consumers alone); 8 = FP8 QK with every k-step an f16 wgmma (the rope's four
 * too: what mixing bf16 and f16 wgmmas in one accumulation costs; scores wrong); 16 = FP8 converted
 * without the scale multiply (what the HMUL2s cost; values wrong); 32 = FP8 converted and multiplied
 * but the latent dims not stored (what the tile stores cost); 64 = the stores without the conversion
 * (the e4m3 bytes stored as they are: what the conversion costs beside them); 256 = only half the rows converted and
 * stored (each CTA's share of the conversion in a 2-CTA pair, without the pair's exchange)) and
 * SM-clock stamps of CTA 0, chunks < 32: 0 full seen, 1 QK done,
 * 2 softmax done, 3 P free, 4 P stored, 5 PV done (warpgroup 0; bf16 issues its PV at 2, before P is
 * stored, so there "P store" and "PV" split one span); 6 full seen, 7 P ready, 8 PV done
 * (warpgroup 1); 9 tile free, 10 chunk published, 11 FP8: rows converted (producer). Keep the copies
 * in step with the library's when it changes. Times each mode for a few shapes (events around 20
 * back-to-back launches, hot L2, every index entry valid, random data; no check: the tests do that),
 * then the mean SM cycles per chunk of each phase over chunks 4..27.
 * Last, FP8 at 64 heads over 66 and 132 tokens (half the SMs busy, then all): cycles against time.
 * Usage: dsa-dev-attention-heads-as-m-modes   (on the GPU machine; ~10 s)
 */
#include "attention/heads_as_m.cu"

#include "mla_dev_inputs.h"

__device__ int g_mode;
__device__ unsigned g_trace[32][12];
#define STAMP(c, k)                                                                                 \
  do {                                                                                              \
    if (blockIdx.x == 0 && (threadIdx.x & 127) == 0 && (c) < 32) g_trace[c][k] = (unsigned)clock(); \
  } while (0)

/* hm_produce_bf16, with the switch and the stamps */
__device__ __forceinline__ void hmx_produce_bf16(const hm_params &p, const int32_t *idx_row, int end, int n,
                                                uint32_t tile_u32, const mbar_ring &ring, int *valid_s, int w,
                                                int lane) {
  const int r4 = lane >> 3, pl = lane & 7;
  int slot[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) slot[q] = mla_entry_slot(idx_row, 16 * w + 4 * q + r4, end, p.io.num_slots);
  for (int c = 0; c < n; ++c) {
    const int b = c & 1;
    /* Chunk c-1 is published when it has landed: right after chunk c is issued if c's tile is
     * already free (two chunks in flight), else before waiting for the tile, so that the
     * consumers' next QK never waits on a tile they have yet to free. */
    const bool tile_free = ring_test_empty<2>(ring, c);
    bool published = c < 1;
    if (!tile_free) {
      ptx_cp_async_wait<0>();
      ptx_fence_proxy_async_smem();
      ptx_mbar_arrive(ring_full(ring, (c - 1) & 1));
      STAMP(c - 1, 10);
      published = true;
      ring_wait_empty<2>(ring, c);
    }
    STAMP(c, 9);
    const uint32_t tile = tile_u32 + b * HM_TILE;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = 16 * w + 4 * q + r4;
      slot[q] = mla_slot_checked(slot[q], p.io.num_slots); /* loaded an iteration ago */
      if (pl == 0) valid_s[b * HM_ROWS + r] = slot[q];
      if (!(g_mode & 5)) {
        const __nv_bfloat16 *src =
            (const __nv_bfloat16 *)p.io.kv + (slot[q] >= 0 ? (int64_t)slot[q] * p.io.kv_stride : 0) + pl * 8;
#pragma unroll
        for (int kb = 0; kb < 9; ++kb)
          ptx_cp_async_16(tile + hm_tile_off(r, 8 * kb + pl), src + 64 * kb, slot[q] >= 0 ? 16 : 0);
      }
    }
    ptx_cp_async_commit();
#pragma unroll
    for (int q = 0; q < 4; ++q) slot[q] = mla_entry_raw(idx_row, (c + 1) * HM_ROWS + 16 * w + 4 * q + r4, end);
    if (!published) { /* chunk c-1 has landed: publish it (chunk c stays in flight) */
      ptx_cp_async_wait<1>();
      ptx_fence_proxy_async_smem();
      ptx_mbar_arrive(ring_full(ring, (c - 1) & 1));
      STAMP(c - 1, 10);
    }
  }
  if (n > 0) {
    ptx_cp_async_wait<0>();
    ptx_fence_proxy_async_smem();
    ptx_mbar_arrive(ring_full(ring, (n - 1) & 1));
  }
}

/* mode 16: hm_store_fp8 without the multiply */
__device__ __forceinline__ void hmx_store_fp8_unscaled(uint32_t addr, uint32_t off_first, uint32_t off_second,
                                                       bool odd_first, uint4 v) {
  uint32_t o[8];
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) ptx_e4m3x4_to_f16x2x2(w[i], o[2 * i], o[2 * i + 1]);
  ptx_st_shared_v4(addr + off_first, odd_first ? o[4] : o[0], odd_first ? o[5] : o[1], odd_first ? o[6] : o[2],
                   odd_first ? o[7] : o[3]);
  ptx_st_shared_v4(addr + off_second, odd_first ? o[0] : o[4], odd_first ? o[1] : o[5], odd_first ? o[2] : o[6],
                   odd_first ? o[3] : o[7]);
}

/* mode 32: the conversion and its multiply without the stores (the f16 words folded into sink) */
__device__ __forceinline__ void hmx_convert_only(uint4 v, uint32_t mult, uint32_t &sink) {
  uint32_t o[8];
  hm_e4m3x16_to_f16(v, mult, o);
#pragma unroll
  for (int i = 0; i < 8; ++i) sink ^= o[i];
}

/* mode 64: the two stores without the conversion (the e4m3 bytes stored as they are) */
__device__ __forceinline__ void hmx_store_raw(uint32_t addr, uint32_t off_first, uint32_t off_second, uint4 v) {
  ptx_st_shared_v4(addr + off_first, v.x, v.y, v.z, v.w);
  ptx_st_shared_v4(addr + off_second, v.w, v.z, v.y, v.x);
}

/* mode 8: hm_qk_tile with every k-step an f16 wgmma */
__device__ __forceinline__ void hmx_qk_tile_f16(float (&s)[32], float (&o)[128], const hm_ctx &x, uint32_t kv_u32) {
  const uint64_t dq = ptx_wgmma_desc(x.q_u32, 128, HM_RG), dk = ptx_wgmma_desc_sw128(kv_u32, 16, 1024);
  ptx_wgmma_fence();
#pragma unroll
  for (int k = 0; k < 36; ++k)
    hm_wgmma_n64(true, s, dq + 16 * k, dk + (((k >> 2) * HM_SEG + (k & 3) * 32) >> 4), k > 0);
  ptx_wgmma_commit();
  ptx_wgmma_wait<0>();
  ptx_reg_fence(s);
  ptx_reg_fence(o);
}

/* hm_produce_fp8, with the switches and the stamps */
__device__ __forceinline__ void hmx_produce_fp8(const hm_params &p, const int32_t *idx_row, int end, int n,
                                               uint32_t tile_u32, const mbar_ring &ring, int *valid_s, float *colf_s,
                                               int w, int lane) {
  const int r4 = lane >> 3, pl = lane & 7;
  const int mode = g_mode; /* read once: the 128 registers are tight */
  const uint8_t *kvb = (const uint8_t *)p.io.kv;
  uint4 pay[4][4];
  float sc[4]; /* lane p holds scale p & 3 of its row; shuffled to the row's lanes when used */
  int slot[4], nslot[4], pslot[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    slot[q] = mla_entry_slot(idx_row, 16 * w + 4 * q + r4, end, p.io.num_slots);
    const uint8_t *row = kvb + (int64_t)(slot[q] >= 0 ? slot[q] : 0) * MLA_FP8_SLOT_BYTES;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      pay[q][j] = (slot[q] >= 0 && !(mode & 1)) ? ptx_ld_nc_v4(row + 128 * j + 16 * pl) : make_uint4(0, 0, 0, 0);
    sc[q] = slot[q] >= 0 ? __ldg((const float *)(row + MLA_FP8_SCALE_OFF) + (pl & 3)) : 0.f;
    nslot[q] = mla_entry_raw(idx_row, HM_ROWS + 16 * w + 4 * q + r4, end);
    pslot[q] = mla_entry_raw(idx_row, 2 * HM_ROWS + 16 * w + 4 * q + r4, end);
  }
  for (int c = 0; c < n; ++c) {
    const int b = c & 1;
#pragma unroll
    for (int q = 0; q < 4; ++q) { /* chunk c + 2's rows into L2 */
      const int ps = mla_slot_checked(pslot[q], p.io.num_slots);
      if (!(mode & 1) && pl < 7 && ps >= 0)
        ptx_prefetch_l2(kvb + (int64_t)ps * MLA_FP8_SLOT_BYTES + (pl < 6 ? 128 * pl : MLA_FP8_SLOT_BYTES - 1));
    }
    ring_wait_empty<2>(ring, c);
    STAMP(c, 9);
    if (mode & 4) { /* no producer work: the row slots only */
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if (pl == 0) {
          valid_s[b * HM_ROWS + 16 * w + 4 * q + r4] = slot[q];
          colf_s[b * HM_ROWS + 16 * w + 4 * q + r4] = 1.f;
        }
        slot[q] = mla_slot_checked(nslot[q], p.io.num_slots);
        nslot[q] = pslot[q];
        pslot[q] = mla_entry_raw(idx_row, (c + 3) * HM_ROWS + 16 * w + 4 * q + r4, end);
      }
      STAMP(c, 11);
      ptx_fence_proxy_async_smem();
      ptx_mbar_arrive(ring_full(ring, b));
      STAMP(c, 10);
      continue;
    }
    const uint32_t tile = tile_u32 + b * HM_TILE;
    /* rope (bf16) lands by cp.async while the e4m3 lines are converted, as it is */
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint8_t *row = kvb + (int64_t)(slot[q] >= 0 ? slot[q] : 0) * MLA_FP8_SLOT_BYTES;
      ptx_cp_async_16(tile + hm_tile_off(16 * w + 4 * q + r4, 64 + pl), row + MLA_FP8_ROPE_OFF + 16 * pl,
                      slot[q] >= 0 ? 16 : 0);
    }
    ptx_cp_async_commit();
    uint32_t sink = 0; /* mode 32 */
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = 16 * w + 4 * q + r4;
      /* K_r = the largest binary exponent of the row's four scales: group g is stored as
       * e4m3 x f16(scale_g 2^-K_r) (a multiplier below 2, values below 896), and 2^K_r goes to the
       * consumers for the score and P */
      int K = hm_ilogb(sc[q]);
      K = max(K, __shfl_xor_sync(0xffffffffu, K, 1));
      K = max(K, __shfl_xor_sync(0xffffffffu, K, 2));
      K = min(max(K, -100), 100);
      const float f = hm_pow2(-K);
      const uint32_t mult_mine = ptx_f32x2_to_f16x2(sc[q] * f, sc[q] * f);
      if (pl == 0) {
        valid_s[b * HM_ROWS + r] = slot[q];
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
        if ((mode & 256) && q >= 2) /* half the rows converted: what a 2-CTA pair would leave each CTA */
          ;
        else if (mode & 64)
          hmx_store_raw(addr + 2 * j * HM_SEG, odd_first ? off_o : off_e, odd_first ? off_e : off_o, pay[q][j]);
        else if (mode & 32)
          hmx_convert_only(pay[q][j], __shfl_sync(0xffffffffu, mult_mine, (lane & 0x18) | j), sink);
        else if (mode & 16)
          hmx_store_fp8_unscaled(addr + 2 * j * HM_SEG, odd_first ? off_o : off_e, odd_first ? off_e : off_o, odd_first,
                                 pay[q][j]);
        else
          hm_store_fp8(addr + 2 * j * HM_SEG, odd_first ? off_o : off_e, odd_first ? off_e : off_o, odd_first,
                       pay[q][j], __shfl_sync(0xffffffffu, mult_mine, (lane & 0x18) | j));
      /* this row's registers are free: load the next chunk's row */
      nslot[q] = mla_slot_checked(nslot[q], p.io.num_slots); /* loaded an iteration ago */
      const uint8_t *nrow = kvb + (int64_t)(nslot[q] >= 0 ? nslot[q] : 0) * MLA_FP8_SLOT_BYTES;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        pay[q][j] = (nslot[q] >= 0 && !(mode & 1)) ? ptx_ld_nc_v4(nrow + 128 * j + 16 * pl) : make_uint4(0, 0, 0, 0);
      sc[q] = nslot[q] >= 0 ? __ldg((const float *)(nrow + MLA_FP8_SCALE_OFF) + (pl & 3)) : 0.f;
      slot[q] = nslot[q];
      nslot[q] = pslot[q];
      pslot[q] = mla_entry_raw(idx_row, (c + 3) * HM_ROWS + 16 * w + 4 * q + r4, end); /* checked when used */
    }
    if (mode & 32) /* the conversion kept live: one word a lane (its row's first chunk) */
      ptx_st_shared_v4(tile + hm_tile_off(16 * w + r4, pl), sink, sink, sink, sink);
    STAMP(c, 11);
    ptx_cp_async_wait<0>();
    ptx_fence_proxy_async_smem();
    ptx_mbar_arrive(ring_full(ring, b));
    STAMP(c, 10);
  }
}

/* hm_consume_qk, with the switch and the stamps */
template <bool FP8>
__device__ __forceinline__ void hmx_consume_qk(const hm_params &p, const hm_ctx &x, int w, int lane) {
  const int g = lane >> 2, qd = lane & 3, h0 = 16 * w + g;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  const float qs0 = FP8 ? p.scale_log2 * x.qexp_s[h0] : 0.f, qs1 = FP8 ? p.scale_log2 * x.qexp_s[h0 + 8] : 0.f;
  for (int c = 0; c < x.n; ++c) {
    const int b = c & 1;
    ring_wait_full<2>(x.ring, c);
    STAMP(c, 0);
    const uint32_t kv_u32 = x.tile_u32 + b * HM_TILE;
    if (g_mode & 2) {
      ptx_mbar_arrive(ring_empty(x.ring, b));
      continue;
    }
    float s[32];
    if (FP8 && (g_mode & 8)) hmx_qk_tile_f16(s, o, x, kv_u32);
    else hm_qk_tile<FP8>(s, o, x, kv_u32, b, qd);
    STAMP(c, 1);
    float a0, a1, ps0, ps1;
    hm_softmax<FP8, 0>(s, p, x, b, qd, qs0, qs1, m0, m1, a0, a1, ps0, ps1, h0);
    l0 = l0 * a0 + ps0; /* quad-partial sums, reduced at the end */
    l1 = l1 * a1 + ps1;
    hm_p_row_factors<FP8>(s, x, b, qd);
    if (HM_WG0_PV_RS(FP8)) { /* the library's bf16 order: PV from registers, then P for warpgroup 1 */
      STAMP(c, 2);
      uint32_t pa[4][4];
      hm_pack_p<FP8>(s, pa);
      hm_rescale(o, a0, a1);
      hm_pv_issue_rs<FP8>(o, pa, kv_u32, 0);
      if (c >= 1) ptx_bar_sync(HM_BAR_P_FREE, 256);
      STAMP(c, 3);
      hm_store_p_packed(pa, x.p_u32, w, lane);
      if (qd == 0) {
        x.alpha_s[h0] = a0;
        x.alpha_s[h0 + 8] = a1;
      }
      ptx_fence_proxy_async_smem();
      ptx_bar_sync(HM_BAR_P_READY, 256);
      STAMP(c, 4);
      ptx_wgmma_wait<0>();
      hm_keep_p(pa);
      STAMP(c, 5);
      ptx_reg_fence(o);
      ptx_mbar_arrive(ring_empty(x.ring, b));
      continue;
    }
    /* ---- P (bf16) and alpha to shared memory, for both warpgroups' PV ---- */
    STAMP(c, 2);
    if (c >= 1) ptx_bar_sync(HM_BAR_P_FREE, 256);
    STAMP(c, 3); /* warpgroup 1 is done with P(c-1) and alpha(c-1) */
    hm_store_p<FP8>(s, x.p_u32, w, lane);
    if (qd == 0) {
      x.alpha_s[h0] = a0;
      x.alpha_s[h0 + 8] = a1;
    }
    ptx_fence_proxy_async_smem();
    ptx_bar_sync(HM_BAR_P_READY, 256); /* P(c), alpha(c) ready for both warpgroups' PV (warpgroup 1 is already waiting) */
    STAMP(c, 4);
    hm_rescale(o, a0, a1);
    hm_pv_issue<FP8>(o, x.p_u32, kv_u32, 0);
    ptx_wgmma_wait<0>();
    STAMP(c, 5);
    ptx_reg_fence(o);
    ptx_mbar_arrive(ring_empty(x.ring, b));
  }
  ptx_griddep_launch_dependents();
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
    const int H = p.num_heads;
    if (p.io.lse) {
      if (x.head0 + h0 < H) p.io.lse[x.t * H + x.head0 + h0] = mla_lse(m0, l0);
      if (x.head0 + h0 + 8 < H)
        p.io.lse[x.t * H + x.head0 + h0 + 8] = mla_lse(m1, l1);
    }
  }
  ptx_bar_sync(HM_BAR_EPILOGUE, 256);
  hm_store_out<0>(p, x, o, h0, qd, 0, x.l_s[h0], x.l_s[h0 + 8]);
}

/* hm_consume_pv, with the switch and the stamps */
template <bool FP8>
__device__ __forceinline__ void hmx_consume_pv(const hm_params &p, const hm_ctx &x, int w, int lane) {
  const int g = lane >> 2, qd = lane & 3, h0 = 16 * w + g;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  for (int c = 0; c < x.n; ++c) {
    const int b = c & 1;
    ring_wait_full<2>(x.ring, c);
    STAMP(c, 6);
    if (!(g_mode & 2)) {
      ptx_bar_sync(HM_BAR_P_READY, 256);
      STAMP(c, 7);
      hm_rescale(o, x.alpha_s[h0], x.alpha_s[h0 + 8]);
      hm_pv_issue<FP8>(o, x.p_u32, x.tile_u32 + b * HM_TILE, 256);
      ptx_wgmma_wait<0>();
      STAMP(c, 8);
      ptx_reg_fence(o);
    }
    ptx_mbar_arrive(ring_empty(x.ring, b));
    /* done with P(c) and alpha(c): warpgroup 0 may write the next ones (both sides bar.sync, so
     * the hand-off is one a race checker can follow) */
    if (!(g_mode & 2) && c + 1 < x.n) ptx_bar_sync(HM_BAR_P_FREE, 256);
  }
  ptx_bar_sync(HM_BAR_EPILOGUE, 256);
  if (x.splits > 1) hm_stage_o(x, o, h0, qd, 256);
  else hm_store_out<0>(p, x, o, h0, qd, 256, x.l_s[h0], x.l_s[h0 + 8]);
}

/* hm_attention_kernel on the copies */
template <bool FP8>
__global__ void __launch_bounds__(HM_THREADS, 1) hmx_attention_kernel(const hm_params p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint32_t s_u32;
  uint8_t *smem = hm_smem_base(smem_raw, s_u32);
  const uint32_t tile_u32 = s_u32 + HM_TILE_OFF;
  int *valid_s = (int *)(smem + HM_VALID_OFF);
  float *colf_s = (float *)(smem + HM_COLF_OFF), *qexp_s = (float *)(smem + HM_QEXP_OFF);
  const mbar_ring ring = hm_ring_of(s_u32);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int split = (int)(blockIdx.x % p.splits); /* = the rank in the cluster */

  if (tid == 0) ring_init(ring, 2, 128, 256);
  __syncthreads();
  ptx_griddep_wait();
  const hm_unit u = hm_unit_of(p, blockIdx.x / p.splits, split);

  if (warp >= 8) {
    const int w = warp - 8;
    if (!FP8) {
      ptx_setmaxnreg_dec<HM_REG_PRODUCER(false)>();
      hmx_produce_bf16(p, u.idx_row, u.end, u.n, tile_u32, ring, valid_s, w, lane);
    } else {
      ptx_setmaxnreg_dec<HM_REG_PRODUCER(true)>();
      hmx_produce_fp8(p, u.idx_row, u.end, u.n, tile_u32, ring, valid_s, colf_s, w, lane);
    }
    if (p.splits > 1) hm_merge_cluster<FP8>(p, s_u32, smem, u.t, u.head0, false, tid); /* joins the barriers only */
    return;
  }

  const int cw = warp >> 2;
  hm_load_q<FP8>(p, smem, qexp_s, u.t, u.head0, warp, lane);
  ptx_fence_proxy_async_smem();
  ptx_bar_sync(HM_BAR_Q_LOADED, 256);
  const hm_ctx x = hm_ctx_of(s_u32, smem, u, p.splits, 0, true);
  if (cw == 0) {
    ptx_setmaxnreg_inc<HM_REG_QK(FP8)>(); /* O half, S and the softmax */
    hmx_consume_qk<FP8>(p, x, warp & 3, lane);
  } else {
    if (HM_REG_PV(FP8) > 168) ptx_setmaxnreg_inc<(HM_REG_PV(FP8) > 168 ? HM_REG_PV(FP8) : 168)>();
    hmx_consume_pv<FP8>(p, x, warp & 3, lane);
  }
  if (p.splits > 1) hm_merge_cluster<FP8>(p, s_u32, smem, u.t, u.head0, true, tid);
}

static void run(int fp8, int T, int H) {
  const int64_t S = 20000;
  const int topk = 2048;
  dsa_rng r = dsa_rng_make(7, 0);
  const size_t row = fp8 ? 656 : 1152, kv_bytes = (size_t)S * row;
  uint8_t *kv = (uint8_t *)malloc(kv_bytes);
  mla_dev_kv(kv, S, fp8, &r);
  int32_t *idx = (int32_t *)malloc(4 * (size_t)T * topk);
  mla_dev_indices(idx, (size_t)T * topk, S, &r);
  void *dkv = mla_dev_put(kv, kv_bytes), *didx = mla_dev_put(idx, 4 * (size_t)T * topk), *dq, *dout;
  CK(cudaMalloc(&dq, 2 * (size_t)T * H * 576));
  CK(cudaMalloc(&dout, 2 * (size_t)T * H * 512));
  CK(cudaMemset(dq, 0x3C, 2 * (size_t)T * H * 576)); /* bf16 0x3C3C ~ 0.0115 */
  const dsa_sparse_mla_args a =
      mla_dev_args(dq, T, H, dkv, fp8 ? DSA_KV_FP8_PACKED : DSA_KV_BF16, S, didx, topk, dout, NULL);
  dsa_attention_plan pl;
  memset(&pl, 0, sizeof pl);
  pl.kernel = DSA_ATTN_HEADS_AS_M;
  pl.groups = (H + 63) / 64;
  pl.splits = 1;
  const hm_params prm = hm_params_of(&a, &pl);
  static dsa_smem_cache cache_fp8, cache_bf16;
  auto launch = [&]() {
    if (fp8)
      CK(dsa_launch_smem(hmx_attention_kernel<true>, &cache_fp8, dim3((unsigned)(T * prm.num_groups)), HM_THREADS,
                         HM_SMEM, 0, true, prm));
    else
      CK(dsa_launch_smem(hmx_attention_kernel<false>, &cache_bf16, dim3((unsigned)(T * prm.num_groups)), HM_THREADS,
                         HM_SMEM, 0, true, prm));
  };
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  static const struct {
    int mode;
    const char *name;
  } modes[] = {{0, "full kernel"},      {1, "no row loads"},     {2, "no MMA / softmax"},
               {4, "no producer work"}, {8, "QK all f16 (FP8)"}, {16, "no scale multiply"},
               {32, "convert, no stores"}, {64, "stores, no convert"}, {256, "half the rows"}};
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; ++m) {
    if (!fp8 && modes[m].mode >= 8) continue;
    CK(cudaMemcpyToSymbol(g_mode, &modes[m].mode, sizeof(int)));
    for (int i = 0; i < 3; ++i) launch();
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 20; ++i) launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1000.0 * ms / 20, flop = 2.0 * T * H * (double)topk * (576 + 512);
    printf("heads_as_m %-4s %5d tokens x %3d heads  %-19s %9.1f us  %6.1f TFLOP/s\n", fp8 ? "fp8" : "bf16", T, H,
           modes[m].name, us, flop / us * 1e-6);
    if (modes[m].mode == 2) continue;
    /* phase stamps of CTA 0 (the last launch's) */
    CK(cudaDeviceSynchronize());
    unsigned tr[32][12];
    CK(cudaMemcpyFromSymbol(tr, g_trace, sizeof tr));
    double d[12] = {0};
    const int c0 = 4, c1 = 28;
    for (int c = c0; c < c1; ++c) {
      d[0] += (double)(int)(tr[c][0] - tr[c - 1][5]); /* wg0: waiting for the tile */
      d[1] += (double)(int)(tr[c][1] - tr[c][0]);     /* QK */
      d[2] += (double)(int)(tr[c][2] - tr[c][1]);     /* softmax */
      d[3] += (double)(int)(tr[c][3] - tr[c][2]);     /* waiting for warpgroup 1 to free P */
      d[4] += (double)(int)(tr[c][4] - tr[c][3]);     /* P to shared memory */
      d[5] += (double)(int)(tr[c][5] - tr[c][4]);     /* PV (own half) */
      d[6] += (double)(int)(tr[c][7] - tr[c][6]);     /* wg1: waiting for P */
      d[7] += (double)(int)(tr[c][8] - tr[c][7]);     /* wg1: PV */
      d[8] += (double)(int)(tr[c][10] - tr[c][9]);    /* producer: tile free -> published */
      d[9] += (double)(int)(tr[c][5] - tr[c - 1][5]); /* wg0: one chunk */
      if (fp8) {
        d[10] += (double)(int)(tr[c][11] - tr[c][9]); /* producer: convert (and load the next rows) */
        d[11] += (double)(int)(tr[c][10] - tr[c][11]); /* producer: wait for the rope, scale it */
      }
    }
    for (int i = 0; i < 12; ++i) d[i] /= (c1 - c0);
    printf("      CTA 0 cycles/chunk %.0f | wg0 wait tile %.0f, QK %.0f, softmax %.0f, wait P free %.0f, P store %.0f, "
           "PV %.0f | wg1 wait P %.0f, PV %.0f | producer %.0f",
           d[9], d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8]);
    if (fp8) printf(" (convert %.0f, rope %.0f)", d[10], d[11]);
    printf("\n");
  }
  CK(cudaFree(dkv));
  CK(cudaFree(dq));
  CK(cudaFree(didx));
  CK(cudaFree(dout));
  free(kv);
  free(idx);
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("dsa-dev-attention-heads-as-m-modes: no CUDA device\n");
    return 77;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int fp8 = 1; fp8 >= 0; --fp8) {
    run(fp8, 128, 128);
    run(fp8, 4096, 128);
  }
  /* a chunk's SM cycles with half the SMs busy and all of them (FP8, 64 heads, one CTA a token): the
   * same cycles at a longer time would be the clock under load, more cycles contention */
  run(1, 66, 64);
  run(1, 132, 64);
  return 0;
}
