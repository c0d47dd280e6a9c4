/*
 * indexer/wgmma_tile.cuh — the pieces of the wgmma scorers (scores_wgmma.cu; the plain one kept in
 * dev/) that do not depend on how a CTA divides its work: a 64-key tile's copies into the
 * 128-byte-swizzled layout wgmma reads, q staged as the B operand, and one warpgroup's scores of a
 * tile (four m64nNk32 e4m3 wgmma a chunk of N columns — or, for bf16 q, eight f16 k16 steps — then
 * relu, weight, head sum, k-scale).
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include "common/layout.h"
#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "common/ptx/wgmma.cuh"
#include "common/rows.cuh"
#include "common/score_key.cuh"
#include "indexer/scores.cuh"
#include "kernels.h"

#define WT_WG_KEYS 64                          /* keys of a tile: one warpgroup's wgmma M */
#define WT_ROW 128                             /* bytes of a key / q row (DSA_INDEX_HEAD_DIM e4m3) */
#define WT_WG_ROWS_BYTES (WT_WG_KEYS * WT_ROW) /* 8 KB, 1024-aligned */
#define WT_WG_STAGE 9216                       /* a tile's stage: rows, 64 scales, 64 flags; 1024-multiple */
#define WT_QBATCH 4                            /* q rows a warp loads before it stores them */
static_assert(DSA_INDEX_HEAD_DIM == WT_ROW, "one e4m3 key row is one 128-byte swizzle row");

static __host__ __device__ __forceinline__ int wt_round1024(int v) { return (v + 1023) & ~1023; }
static __host__ __device__ __forceinline__ int wt_q_bytes(int qrows) { return wt_round1024(qrows * WT_ROW); }

/* The lookup of this lane's key of a warp's 16 (lanes 0-15: key x0 + row0 + lane), issued a tile
 * ahead of its copies so that the load's latency passes under a tile of work: the raw block-table
 * entry / workspace slot (-1: nothing to read). */
static __device__ __forceinline__ long long wt_key_raw(const dsa_scores_params &p, int t0, int x0, int row0, int lo,
                                                       int hi, int lane) {
  const int x = x0 + row0 + (lane & 15);
  return lane < 16 && x >= lo && x < hi ? rows_key_raw(p.rows, t0, x) : -1;
}

/* Issue this warp's 16 rows [row0, row0 + 16) of its warpgroup's 64 keys (key coordinates
 * x0 + row0 + i, looked up by wt_key_raw) into the warpgroup's stage `st`. */
static __device__ __forceinline__ void wt_issue_keys(unsigned char *st, const dsa_scores_params &p, long long raw,
                                                     int x0, int row0, int lane) {
  const int page_size = p.cache.page_size;
  const long long page_bytes = (long long)page_size * IDXK_SLOT_BYTES;
  const long long slot = lane < 16 && raw >= 0 ? rows_key_slot_from_raw(p.rows, x0 + row0 + lane, raw) : -1;
  const uint8_t *base = p.cache.data;
  int row = 0;
  if (slot >= 0) base += (long long)div_page((int)slot, page_size, &row) * page_bytes; /* slots < 2^31 */
  const uint32_t s_rows = ptx_smem_u32(st);
  const uint32_t s_scale = s_rows + WT_WG_ROWS_BYTES;
  int *s_ok = (int *)(st + WT_WG_ROWS_BYTES + WT_WG_KEYS * 4);
  if (lane < 16) {
    s_ok[row0 + lane] = slot >= 0;
    ptx_cp_async_4_zfill(s_scale + (row0 + lane) * 4, base + (long long)page_size * DSA_INDEX_HEAD_DIM + row * 4,
                         slot >= 0 ? 4 : 0);
  }
  const uint8_t *krow = base + (long long)row * DSA_INDEX_HEAD_DIM;
  const int ch = lane & 7;
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const int r = j * 4 + (lane >> 3); /* 0..15 */
    const unsigned long long src = __shfl_sync(0xffffffffu, (unsigned long long)krow, r);
    const int valid = __shfl_sync(0xffffffffu, (int)(slot >= 0), r);
    const int R = row0 + r;
    ptx_cp_async_16(s_rows + R * WT_ROW + ((ch ^ (R & 7)) << 4), (const void *)(src + ch * 16), valid ? 16 : 0);
  }
}


/* q rows (e4m3, as stored) into the swizzled B tile [qrows][128], weights beside (w x softmax_scale
 * (x q_scale), q_scale): warp w of nwarps takes rows w, w + nwarps, ...; WT_QBATCH rows' loads are
 * issued before any of them is stored (prefill stages 512 rows: one load latency a row would cost
 * tens of microseconds a CTA). Sets grp->any_negative_qscale; the caller fences and syncs. */
template <int HP>
static __device__ __forceinline__ void wt_stage_q(const dsa_scores_params &p, sc_group *grp, unsigned char *q_tile,
                                                  float *wq_smem, float *w_smem, float *qsc_smem, int qrows, int nt,
                                                  int t0, int warp, int nwarps, int lane) {
  const int H = p.q.num_heads;
  for (int n0 = warp; n0 < qrows; n0 += WT_QBATCH * nwarps) {
    uint32_t v[WT_QBATCH];
    float qscale[WT_QBATCH], w[WT_QBATCH];
#pragma unroll
    for (int u = 0; u < WT_QBATCH; u++) {
      const int n = n0 + u * nwarps;
      const int ti = n / HP, h = n % HP;
      const int ta = p.rows.token_begin + t0 + ti;
      const bool live = n < qrows && ti < nt && h < H && grp->len[ti] > 0;
      v[u] = 0;
      qscale[u] = 1.f;
      w[u] = 0.f;
      if (live) {
        const long long row = (long long)ta * H + h;
        v[u] = *(const uint32_t *)((const uint8_t *)p.q.q + row * DSA_INDEX_HEAD_DIM + lane * 4);
        qscale[u] = p.q.q_scale[row];
        w[u] = sc_weight(p, ta, h);
      }
    }
#pragma unroll
    for (int u = 0; u < WT_QBATCH; u++) {
      const int n = n0 + u * nwarps;
      if (n >= qrows) break;
      *(uint32_t *)(q_tile + n * WT_ROW + (((lane >> 2) ^ (n & 7)) << 4) + (lane & 3) * 4) = v[u];
      if (lane == 0) {
        wq_smem[n] = w[u] * qscale[u];
        w_smem[n] = w[u];
        qsc_smem[n] = qscale[u];
        if (!(qscale[u] >= 0.f)) grp->any_negative_qscale = 1;
      }
    }
  }
}

/* ---- the f16 path (bf16 q): keys e4m3 -> f16 and q bf16 -> f16, both exact, f16 wgmma ---- */
#define WT_F16_ATOM 8192 /* one 64-element K-atom of a 64-key tile: 64 rows x 128 B */
#define WT_F16_KEYS (2 * WT_F16_ATOM) /* a tile's keys in f16: two K-atoms */

/* bf16 q rows for the f16 scorer: row n's 128 values times 2^e (amax x 2^e in (2^13, 2^14], as
 * scores_mma.cu: f16 then holds every bf16 value of the row exactly), as two K-atoms
 * [2][qrows][128 B], 128-byte swizzled; qsc = 2^-e undoes it after the dot product. Weights as
 * wt_stage_q. WT_QBATCH rows' loads in flight a warp. */
template <int HP>
static __device__ __forceinline__ void wt_stage_q_f16(const dsa_scores_params &p, sc_group *grp, unsigned char *q_tile,
                                                      float *wq_smem, float *w_smem, float *qsc_smem, int qrows,
                                                      int nt, int t0, int warp, int nwarps, int lane) {
  const int H = p.q.num_heads;
  for (int n0 = warp; n0 < qrows; n0 += WT_QBATCH * nwarps) {
    uint2 raw[WT_QBATCH];
    float w[WT_QBATCH];
#pragma unroll
    for (int u = 0; u < WT_QBATCH; u++) {
      const int n = n0 + u * nwarps;
      const int ti = n / HP, h = n % HP;
      const int ta = p.rows.token_begin + t0 + ti;
      const bool live = n < qrows && ti < nt && h < H && grp->len[ti] > 0;
      raw[u] = make_uint2(0u, 0u);
      w[u] = 0.f;
      if (live) {
        const long long row = (long long)ta * H + h;
        raw[u] = *(const uint2 *)((const __nv_bfloat16 *)p.q.q + row * DSA_INDEX_HEAD_DIM + lane * 4);
        w[u] = sc_weight(p, ta, h);
      }
    }
#pragma unroll
    for (int u = 0; u < WT_QBATCH; u++) {
      const int n = n0 + u * nwarps;
      if (n >= qrows) break;
      float v[4];
      const float qscale = sc_bf16_row_scaled(raw[u], v); /* 1 for a row not staged (zeros) */
      const __half2 h01 = __floats2half2_rn(v[0], v[1]);
      const __half2 h23 = __floats2half2_rn(v[2], v[3]);
      uint2 packed;
      packed.x = *(const uint32_t *)&h01;
      packed.y = *(const uint32_t *)&h23;
      /* dims 4 lane ..: K-atom lane / 16, 16-byte chunk (lane % 16) / 2, half lane % 2 */
      *(uint2 *)(q_tile + (size_t)(lane >> 4) * qrows * WT_ROW + n * WT_ROW + ((((lane & 15) >> 1) ^ (n & 7)) << 4) +
                 (lane & 1) * 8) = packed;
      if (lane == 0) {
        wq_smem[n] = w[u] * qscale;
        w_smem[n] = w[u];
        qsc_smem[n] = qscale;
      }
    }
  }
}

/* A stage's 64 e4m3 key rows -> f16 in buf ([2 K-atoms][64 rows][128 B], 128-byte swizzled: what the
 * f16 wgmma reads K-major), exact. Thread tw of the warpgroup (0..127): row tw / 2, K-atom tw % 2 —
 * its four 16-byte e4m3 chunks become eight f16 chunks. The caller fences (proxy) and syncs the
 * warpgroup before the wgmma. */
static __device__ __forceinline__ void wt_keys_to_f16(const unsigned char *st, unsigned char *buf, int tw) {
  const int R = tw >> 1, atom = tw & 1;
  unsigned char *row = buf + atom * WT_F16_ATOM + R * WT_ROW;
#pragma unroll
  for (int cc = 0; cc < 4; cc++) {
    const int c = atom * 4 + cc; /* e4m3 chunk: dims 16 c .. 16 c + 15 */
    const uint4 v = *(const uint4 *)(st + R * WT_ROW + ((c ^ (R & 7)) << 4));
    uint4 lo, hi;
    ptx_e4m3x4_to_f16x2x2(v.x, lo.x, lo.y);
    ptx_e4m3x4_to_f16x2x2(v.y, lo.z, lo.w);
    ptx_e4m3x4_to_f16x2x2(v.z, hi.x, hi.y);
    ptx_e4m3x4_to_f16x2x2(v.w, hi.z, hi.w);
    *(uint4 *)(row + (((2 * cc) ^ (R & 7)) << 4)) = lo;
    *(uint4 *)(row + (((2 * cc + 1) ^ (R & 7)) << 4)) = hi;
  }
}

/* Chunk chk's D[64 keys, NC columns] on the f16 path: eight k16 steps over the two K-atoms of the
 * keys (kbuf) and of q (atoms qrows x 128 B apart), one commit group; the first step overwrites
 * acc. */
template <int NC>
static __device__ __forceinline__ void wt_chunk_mma_f16(float (&acc)[NC / 2], uint32_t kbuf, uint32_t q_addr, int qrows,
                                                        int chk) {
  ptx_wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; kk++) {
    const uint32_t off = (uint32_t)(kk & 3) * 32, atom = (uint32_t)(kk >> 2);
    const uint64_t da = ptx_wgmma_desc_sw128(kbuf + atom * WT_F16_ATOM + off, 16, 1024);
    const uint64_t db =
        ptx_wgmma_desc_sw128(q_addr + atom * (uint32_t)qrows * WT_ROW + (uint32_t)chk * NC * WT_ROW + off, 16, 1024);
    ptx_wgmma_k16_f16<NC>(acc, da, db, kk > 0);
  }
  ptx_wgmma_commit();
}

/* Does any token of the group see one of the 64 keys from x0? (warpgroup-uniform) */
static __device__ __forceinline__ bool wt_any_visible(const sc_group *grp, int nt, int x0) {
  bool any = false;
  for (int ti = 0; ti < nt; ti++) {
    const int L = grp->len[ti], bt = grp->begin[ti];
    any |= L > 0 && x0 < bt + L && x0 + WT_WG_KEYS > bt;
  }
  return any;
}

/* Where a tile's scores go (the template parameter OUT of the functions below):
 *   WT_OUT_SCORES  p.scores[t, x - begin]: the scorer's own output.
 *   WT_OUT_KEYS    the decode fused indexer (indexer/fused_topk.cuh): position i of token ti at
 *                  keys[ti * stride + i - pos0] (shared memory) as its score key, counted into token
 *                  ti's histogram of the key's top 11 bits, hist[ti * TK_BINS + (key >> 21)].
 *   WT_OUT_SAMPLE  the fused prefill indexer's sample pass (indexer/prefill_select.cu): the CTAs
 *                  score only tiles whose index is a multiple of DSA_PREFILL_SAMPLE_STRIDE; key x of
 *                  token t goes to p.scores[t, ((x >> SHIFT) - (begin >> SHIFT)) * 64 + x % 64].
 *   WT_OUT_FILTER  its filtered pass: token ti's composite (key, position) kept when at least the
 *                  token's threshold — a token with threshold 0 keeps every key at its position
 *                  (cand[t][x - begin]); the others' scores are compared as floats with the
 *                  threshold's (NaN never kept: with the rows' other keys it is below any threshold
 *                  but NaN's own, and a list short of k is rescored), staged a tile at a time in
 *                  shared memory (wt_stage) and appended to cand[t] past a reservation (wt_filter_*). */
enum wt_out { WT_OUT_SCORES = 0, WT_OUT_KEYS = 1, WT_OUT_SAMPLE = 2, WT_OUT_FILTER = 3 };

/* WT_OUT_FILTER: one warpgroup's scores of one tile for the tokens of its group, before the kept ones
 * are appended: every key's score (row r of the tile at key[ti][r]) and, per warp, which of its
 * lanes kept one (its half of the ballot: lane l of warp w holds row 16 w + l / 4 + 8 (l & 1)). */
typedef struct {
  uint32_t key[SC_MAX_T][WT_WG_KEYS]; /* scores (float bits) */
  uint32_t wmask[SC_MAX_T][4];        /* kept lanes a warp */
  int pre[SC_MAX_T];                  /* exclusive sum of the tokens' kept counts */
  unsigned base[SC_MAX_T];            /* where the tokens' keys go in their lists */
  int total, x0;                      /* keys kept; the tile's first key coordinate */
  int pad[2];
} wt_stage;

typedef struct {
  /* WT_OUT_KEYS */
  uint32_t *keys;
  uint32_t *hist;
  int stride, pos0;
  /* WT_OUT_FILTER */
  uint32_t tau_s;                /* shared address of the group's thresholds, [T] x {float score, u32
                                    position}: a score above it, or equal at a position at or below it,
                                    is kept (the composite threshold as floats); NaN: a token that
                                    keeps every key (dense), or none of the group */
  int dense;                     /* some token of the group keeps every key */
  unsigned long long *cand;      /* launch-token t's list at cand + t * cap */
  int cap;
  uint32_t *count;               /* [launch tokens]: keys appended to each list (reservations) */
  wt_stage *stages;              /* this warpgroup's two staging buffers */
  uint32_t stage_s;              /* shared address of the one the current tile fills (stages[cur]) */
  int cur, pend;                 /* pend: stages[cur ^ 1] holds a tile not yet appended */
  unsigned pend_base;            /* thread j < T of the warpgroup: token j's reservation for it */
  int bar;                       /* the warpgroup's named barrier */
} wt_out_ctx;

/* One chunk's epilogue, for one thread: its NC / 2 accumulators D[r0 | r1, columns 8j + 2c (+1)]
 * (column n = (token n / HP, head n % HP)) become per-token scores of keys r0 and r1 — relu, weight,
 * head sum — then the quad's four lanes (c = 0..3) sum their partials by a transposing butterfly:
 * after it, lane c holds the scores (token 2i + (c >> 1), key c & 1 ? r1 : r0), i < NC / HP / 2, so
 * the 2 x NC / HP sums cost NC / HP x 3 / 2 shuffles (not 2 x NC / HP x 2) and every lane stores.
 * No branch per token: every token of the chunk is computed, only the stores are predicated, so the
 * compiler interleaves the tokens' independent sums (the branchy form ran at ~0.17 IPC a warp).
 * FAST (non-negative q and key scales): relu(acc x qs x ks) x w = relu(acc) x (w x qs) x ks, ks
 * applied once after the sum. */
template <int HP, int NC, bool FAST, int OUT>
static __device__ __forceinline__ void wt_chunk_epilogue(const dsa_scores_params &p, const sc_group *grp,
                                                         const float (&acc)[NC / 2], const float *wq_smem,
                                                         const float *w_smem, const float *qsc_smem, int chk, int nt,
                                                         int t0, int x0, float ks0, float ks1, int ok0, int ok1,
                                                         int r0, int r1, int lane, const wt_out_ctx &ko) {
  constexpr int TPC = NC / HP; /* tokens in the chunk */
  constexpr int V = 2 * TPC;   /* partial sums a thread holds: (token, key row) */
  const int c = lane & 3;
  float v[V];
#pragma unroll
  for (int tl = 0; tl < TPC; tl++) {
    float a0 = 0.f, a1 = 0.f, b0 = 0.f, b1 = 0.f;
#pragma unroll
    for (int jj = 0; jj < HP / 8; jj++) {
      const int j = tl * (HP / 8) + jj;
      const int n = chk * NC + 8 * j + 2 * c;
      if (FAST) {
        const float2 wv = *(const float2 *)(wq_smem + n);
        a0 = fmaf(wv.x, fmaxf(acc[4 * j], 0.f), a0);
        a1 = fmaf(wv.y, fmaxf(acc[4 * j + 1], 0.f), a1);
        b0 = fmaf(wv.x, fmaxf(acc[4 * j + 2], 0.f), b0);
        b1 = fmaf(wv.y, fmaxf(acc[4 * j + 3], 0.f), b1);
      } else {
        const float2 wv = *(const float2 *)(w_smem + n);
        const float2 sv = *(const float2 *)(qsc_smem + n);
        a0 = fmaf(wv.x, fmaxf(acc[4 * j] * sv.x * ks0, 0.f), a0);
        a1 = fmaf(wv.y, fmaxf(acc[4 * j + 1] * sv.y * ks0, 0.f), a1);
        b0 = fmaf(wv.x, fmaxf(acc[4 * j + 2] * sv.x * ks1, 0.f), b0);
        b1 = fmaf(wv.y, fmaxf(acc[4 * j + 3] * sv.y * ks1, 0.f), b1);
      }
    }
    v[2 * tl] = a0 + a1;     /* key r0 */
    v[2 * tl + 1] = b0 + b1; /* key r1 */
  }
  const bool odd = c & 1, hi2 = c & 2;
  float out[V / 4 > 0 ? V / 4 : 1];
  if constexpr (V >= 4) {
    float w[V / 2]; /* xor 1: lane keeps index 2i + (c & 1), sums it with its neighbour's */
#pragma unroll
    for (int i = 0; i < V / 2; i++) {
      const float keep = odd ? v[2 * i + 1] : v[2 * i], send = odd ? v[2 * i] : v[2 * i + 1];
      w[i] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    }
#pragma unroll
    for (int i = 0; i < V / 4; i++) { /* xor 2: keeps index 4i + c */
      const float keep = hi2 ? w[2 * i + 1] : w[2 * i], send = hi2 ? w[2 * i] : w[2 * i + 1];
      out[i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
    }
  } else { /* one token: lane keeps its key row (c & 1), summed over the quad; lanes c < 2 store */
    const float keep = odd ? v[1] : v[0], send = odd ? v[0] : v[1];
    const float w0 = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    out[0] = w0 + __shfl_xor_sync(0xffffffffu, w0, 2);
  }
  const int r = odd ? r1 : r0;
  const float ks = odd ? ks1 : ks0;
  const bool ok = odd ? ok1 : ok0;
  const int x = x0 + r;
  if constexpr (OUT == WT_OUT_FILTER) {
    /* two tokens a step (the lanes with c < 2 hold one, c >= 2 the other): every lane stores its score
     * to the stage (row r of token ti) and takes part in the ballot, whatever its token; lanes 0 and 2
     * store their half's kept lanes. Shared accesses by address (the stage's pointer is in ko: as a
     * pointer the compiler made them generic loads and stores). */
    static_assert(V >= 4, "the filtered pass holds two tokens a step");
    const int wi = r0 >> 4;
    const unsigned half = hi2 ? 0xccccccccu : 0x33333333u;
#pragma unroll
    for (int i = 0; i < V / 4; i++) {
      const int ti = chk * TPC + 2 * i + (hi2 ? 1 : 0); /* < T <= SC_MAX_T */
      const bool live = ti < nt;
      const int L = live ? grp->len[ti] : 0, bt = live ? grp->begin[ti] : 0;
      const bool vis = x >= bt && x < bt + L;
      const float sc = ok ? (FAST ? out[i] * ks : out[i]) : -INFINITY;
      const uint2 th = ptx_ld_shared_v2(ko.tau_s + 8 * ti);
      const float tf = __uint_as_float(th.x);
      if (ko.dense && vis && tf != tf) ko.cand[(size_t)(t0 + ti) * ko.cap + (x - bt)] = make_comp(score_key(sc), x - bt);
      ptx_st_shared_u32(ko.stage_s + (ti * WT_WG_KEYS + r) * 4, __float_as_uint(sc));
      const bool keep = vis && (sc > tf || (sc == tf && (unsigned)(x - bt) <= th.y));
      const unsigned mh = __ballot_sync(0xffffffffu, keep) & half;
      if (lane == (hi2 ? 2 : 0)) ptx_st_shared_u32(ko.stage_s + (unsigned)offsetof(wt_stage, wmask) + (ti * 4 + wi) * 4, mh);
    }
  } else {
#pragma unroll
    for (int i = 0; i < (V >= 4 ? V / 4 : 1); i++) {
      const int ti = chk * TPC + (V >= 4 ? 2 * i + (hi2 ? 1 : 0) : 0);
      if (V < 4 && hi2) break;
      if (ti >= nt) break;
      const int L = grp->len[ti], bt = grp->begin[ti];
      const float sc = FAST ? out[i] * ks : out[i];
      if (x >= bt && x < bt + L) {
        if constexpr (OUT == WT_OUT_KEYS) {
          const uint32_t key = score_key(ok ? sc : -INFINITY);
          ko.keys[ti * ko.stride + (x - bt - ko.pos0)] = key;
          atomicAdd(&ko.hist[ti * TK_BINS + (key >> 21)], 1u);
        } else if constexpr (OUT == WT_OUT_SAMPLE) {
          const int j = (((x >> DSA_PREFILL_SAMPLE_SHIFT) - (bt >> DSA_PREFILL_SAMPLE_SHIFT)) << 6) + (x & 63);
          p.scores[(long long)(t0 + ti) * p.scores_stride + j] = ok ? sc : -INFINITY;
        } else {
          p.scores[(long long)(t0 + ti) * p.scores_stride + (x - bt)] = ok ? sc : -INFINITY;
        }
      }
    }
  }
}

/* The chunk epilogue with FAST chosen at run time (once a chunk: both versions are unrolled). */
template <int HP, int NC, int OUT>
static __device__ __forceinline__ void wt_chunk_epilogue_pick(bool fast, const dsa_scores_params &p, const sc_group *grp,
                                                              const float (&acc)[NC / 2], const float *wq_smem,
                                                              const float *w_smem, const float *qsc_smem, int chk,
                                                              int nt, int t0, int x0, float ks0, float ks1, int ok0,
                                                              int ok1, int r0, int r1, int lane, const wt_out_ctx &ko) {
  if (fast)
    wt_chunk_epilogue<HP, NC, true, OUT>(p, grp, acc, wq_smem, w_smem, qsc_smem, chk, nt, t0, x0, ks0, ks1, ok0, ok1,
                                         r0, r1, lane, ko);
  else
    wt_chunk_epilogue<HP, NC, false, OUT>(p, grp, acc, wq_smem, w_smem, qsc_smem, chk, nt, t0, x0, ks0, ks1, ok0,
                                          ok1, r0, r1, lane, ko);
}

/* ---- WT_OUT_FILTER: a staged tile appended to the tokens' lists ----
 * At a tile's end (wt_filter_end_tile) warp 0 of the warpgroup sums each token's staged count, and
 * lane j < nt reserves token j's place in its list with one atomic, whose result it needs only when
 * that tile is appended: during the warpgroup's next tile, after the wgmma of its second chunk are
 * issued (wt_filter_flush, also once after the warpgroup's last tile), so the atomic's round trip
 * passes under a chunk of work; meanwhile the next tile fills the other buffer. A list's count may
 * pass its capacity: what does not fit is dropped, and the select step rescores that token. */
static __device__ __forceinline__ void wt_filter_flush(wt_out_ctx &ko, const sc_group *grp, int t0, int nt, int tw) {
  if (!ko.pend) return;
  wt_stage *st = &ko.stages[ko.cur ^ 1];
  if (tw < SC_MAX_T) st->base[tw] = ko.pend_base;
  ptx_bar_sync(ko.bar, 128);
  const int total = st->total, x0 = st->x0;
  for (int e = tw; e < total; e += 128) {
    int j = 0; /* the last token whose keys start at or before e (the starts do not decrease) */
    for (int jj = 1; jj < nt; jj++) j += st->pre[jj] <= e;
    const int ej = e - st->pre[j];
    const uint4 wm = *(const uint4 *)st->wmask[j];
    const int c0 = __popc(wm.x), c1 = c0 + __popc(wm.y), c2 = c1 + __popc(wm.z);
    const int w = (ej >= c0) + (ej >= c1) + (ej >= c2);
    const unsigned mw = w == 0 ? wm.x : w == 1 ? wm.y : w == 2 ? wm.z : wm.w;
    const int l = (int)__fns(mw, 0, ej - (w == 0 ? 0 : w == 1 ? c0 : w == 2 ? c1 : c2) + 1); /* its lane */
    const int row = 16 * w + (l >> 2) + 8 * (l & 1);
    const unsigned idx = st->base[j] + (unsigned)ej;
    if (idx < (unsigned)ko.cap)
      ko.cand[(size_t)(t0 + j) * ko.cap + idx] =
          make_comp(score_key(__uint_as_float(st->key[j][row])), x0 + row - grp->begin[j]);
  }
  ko.pend = 0;
}

static __device__ __forceinline__ void wt_filter_end_tile(wt_out_ctx &ko, int t0, int nt, int x0, int tw) {
  ptx_bar_sync(ko.bar, 128); /* every warp's keys and masks of the tile staged */
  wt_stage *st = &ko.stages[ko.cur];
  if (tw < 32) {
    const int j = tw;
    int n = 0;
    if (j < nt) {
      const uint4 wm = *(const uint4 *)st->wmask[j];
      n = __popc(wm.x) + __popc(wm.y) + __popc(wm.z) + __popc(wm.w);
    }
    int incl = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (j >= o) incl += y;
    }
    if (j < SC_MAX_T) st->pre[j] = incl - n;
    if (j == 31) st->total = incl;
    if (j == 0) st->x0 = x0;
    ko.pend_base = n > 0 ? atomicAdd(ko.count + t0 + j, (unsigned)n) : 0u;
  }
  ko.pend = 1;
  ko.cur ^= 1;
  ko.stage_s = ptx_smem_u32(&ko.stages[ko.cur]);
}

/* One warpgroup's scores of the 64-key tile in stage `st` (key coordinates x0 ..): for each chunk of
 * NC of the group's (token, head) columns, D[64, NC] by four e4m3 wgmma, then the chunk's epilogue
 * (wt_chunk_epilogue); -inf for keys outside the cache; stores the keys each token sees. wi = warp
 * within the warpgroup. WT_OUT_FILTER: the previous tile's keys appended after the second chunk's
 * wgmma are issued, this tile's reserved at its end. */
template <int HP, int NC, int OUT = WT_OUT_SCORES>
static __device__ __forceinline__ void wt_tile_scores(const dsa_scores_params &p, const sc_group *grp,
                                                      const unsigned char *st, uint32_t q_addr, const float *wq_smem,
                                                      const float *w_smem, const float *qsc_smem, int chunks, int nt,
                                                      int t0, int x0, bool qscale_nonneg, int wi, int lane,
                                                      wt_out_ctx &ko) {
  static_assert(NC >= HP && NC % HP == 0 && NC <= 256, "a chunk holds whole tokens");
  const int rq = lane >> 2;
  const int r0 = 16 * wi + rq, r1 = r0 + 8; /* this thread's two keys of the 64 */
  const uint32_t a_addr = ptx_smem_u32(st);
  const float ks0 = ((const float *)(st + WT_WG_ROWS_BYTES))[r0];
  const float ks1 = ((const float *)(st + WT_WG_ROWS_BYTES))[r1];
  const int ok0 = ((const int *)(st + WT_WG_ROWS_BYTES + WT_WG_KEYS * 4))[r0];
  const int ok1 = ((const int *)(st + WT_WG_ROWS_BYTES + WT_WG_KEYS * 4))[r1];
  const bool fast = qscale_nonneg && __all_sync(0xffffffffu, ks0 >= 0.f && ks1 >= 0.f);

  /* Descriptors built once: a start address a multiple of 16 bytes further is the descriptor plus
   * (bytes >> 4) in its low 14-bit field (shared addresses < 2^18, no carry out). */
  const uint64_t da0 = ptx_wgmma_desc_sw128(a_addr, 16, 1024);
  const uint64_t db0 = ptx_wgmma_desc_sw128(q_addr, 16, 1024);
  for (int chk = 0; chk < chunks; chk++) {
    float acc[NC / 2];
#pragma unroll
    for (int i = 0; i < NC / 2; i++) acc[i] = 0.f;
    ptx_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
      const uint64_t da = da0 + (uint64_t)((32 * ks) >> 4);
      const uint64_t db = db0 + (uint64_t)((chk * NC * WT_ROW + 32 * ks) >> 4);
      ptx_wgmma_k32_e4m3<NC>(acc, da, db, ks > 0);
    }
    ptx_wgmma_commit();
    if constexpr (OUT == WT_OUT_FILTER)
      if (chk == (chunks > 1 ? 1 : 0)) wt_filter_flush(ko, grp, t0, nt, 32 * wi + lane);
    ptx_wgmma_wait<0>();
    ptx_reg_fence(acc);
    wt_chunk_epilogue_pick<HP, NC, OUT>(fast, p, grp, acc, wq_smem, w_smem, qsc_smem, chk, nt, t0, x0, ks0, ks1, ok0,
                                        ok1, r0, r1, lane, ko);
  }
  if constexpr (OUT == WT_OUT_FILTER) wt_filter_end_tile(ko, t0, nt, x0, 32 * wi + lane);
}

/* One warpgroup's scores of a 64-key tile on the f16 path, its keys already in kbuf (f16) and its
 * k-scales / validity flags read from the stage beforehand (ks0, ks1, ok0, ok1: the stage may be
 * refilled by now); the rest as wt_tile_scores (WT_OUT_SCORES or WT_OUT_KEYS). */
template <int HP, int NC, int OUT = WT_OUT_SCORES>
static __device__ __forceinline__ void wt_tile_scores_f16(const dsa_scores_params &p, const sc_group *grp,
                                                          uint32_t kbuf, uint32_t q_addr, int qrows,
                                                          const float *wq_smem, const float *w_smem,
                                                          const float *qsc_smem, int chunks, int nt, int t0, int x0,
                                                          float ks0, float ks1, int ok0, int ok1, bool fast, int wi,
                                                          int lane, const wt_out_ctx &ko) {
  static_assert(NC >= HP && NC % HP == 0 && NC <= 256, "a chunk holds whole tokens");
  static_assert(OUT == WT_OUT_SCORES || OUT == WT_OUT_KEYS, "the f16 path stores scores or keeps keys");
  const int rq = lane >> 2;
  const int r0 = 16 * wi + rq, r1 = r0 + 8;
  for (int chk = 0; chk < chunks; chk++) {
    float acc[NC / 2];
    wt_chunk_mma_f16<NC>(acc, kbuf, q_addr, qrows, chk);
    ptx_wgmma_wait<0>();
    ptx_reg_fence(acc);
    wt_chunk_epilogue_pick<HP, NC, OUT>(fast, p, grp, acc, wq_smem, w_smem, qsc_smem, chk, nt, t0, x0, ks0, ks1, ok0,
                                        ok1, r0, r1, lane, ko);
  }
}
