/*
 * host/plan.c — all of the library's planning (host/plan.h), no CUDA: the indexer's tokens per launch
 * and workspace, the top-k scratch layout, the attention split plans.
 */
#include <stdint.h>
#include <string.h>

#include "common/layout.h"
#include "host/choose.h"
#include "kernels.h"

static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

/* ---- indexer ---- */

/* The most tokens (a multiple of `multiple`, at most `limit`) whose `row_bytes` each fit `budget`
 * bytes beside `fixed` bytes, rounded to 256 bytes as the layouts are; 0 when not even one
 * request's do. */
static int64_t tokens_fitting(size_t budget, size_t fixed, int64_t row_bytes, int64_t limit, int multiple) {
  int64_t n = fixed >= budget ? 0 : (int64_t)((budget - fixed) / (size_t)row_bytes);
  if (n > limit) n = limit;
  n -= n % multiple;
  while (n > 0 && fixed + round256((size_t)row_bytes * (size_t)n) > budget) n -= multiple;
  return n;
}

/* The fastest plan: chunks of as many tokens as DSA_SCORE_CAP_ELEMS scores hold (at least one
 * request's, at most DSA_TOPK_ROWS_PER_LAUNCH), each chunk's top-k resolved on its own. */
static dsa_indexer_plan plan_fastest(int num_tokens, int max_len, int topk, int multiple, int decode) {
  dsa_indexer_plan p;
  memset(&p, 0, sizeof p);
  p.stride = ((int64_t)max_len + 3) & ~(int64_t)3;
  if (p.stride < 4) p.stride = 4;
  int64_t chunk = DSA_SCORE_CAP_ELEMS / p.stride;
  if (chunk > DSA_TOPK_ROWS_PER_LAUNCH) chunk = DSA_TOPK_ROWS_PER_LAUNCH;
  if (chunk > num_tokens) chunk = num_tokens;
  chunk -= chunk % multiple;
  if (chunk < multiple) chunk = multiple;
  p.chunk = p.group = (int)chunk;
  p.score_bytes = max_len > topk ? round256((size_t)p.stride * (size_t)chunk * 4) : 0;
  /* decode: the fused indexer's control block lives where the scores would (chunk tokens at most) */
  if (decode && max_len > topk && p.score_bytes < DSA_FUSED_CTL_BYTES(chunk, chunk))
    p.score_bytes = round256(DSA_FUSED_CTL_BYTES(chunk, chunk));
  p.total = p.score_bytes + dsa_topk_ws_layout(p.chunk).total;
  return p;
}

/* Tokens per launch within a caller's workspace_limit `cap` (dsa.h; 0 = none): the fastest plan
 * when it fits. Else rows the top-k reads once (<= DSA_TOPK_ONE_CTA_MAX_LEN) or all tokens' scores
 * fitting: chunks of as many tokens as fit with their top-k scratch. Longer rows whose scores do
 * not all fit: the deferred resolve — a group of
 * up to DSA_TOPK_ROWS_PER_LAUNCH tokens keeps its top-k scratch while its scores pass a chunk at
 * a time (the chain's resolve, a fixed ~80 us a launch on the H200, once a group instead of once a
 * chunk); the group halves while its chunks would hold fewer than DSA_DEFERRED_MIN_CHUNK tokens (or
 * than fit beside the smallest group, for rows so long that fewer do).
 * `multiple`: one request's MTP tokens stay together. */
dsa_indexer_plan dsa_plan_indexer(int num_tokens, int max_len, int topk, int multiple, int decode, size_t cap) {
  dsa_indexer_plan p = plan_fastest(num_tokens, max_len, topk, multiple, decode);
  if (cap == 0 || p.total <= cap) return p;
  const int64_t stride = p.stride; /* the score rows' stride: the same in every plan */
  memset(&p, 0, sizeof p);
  p.stride = stride;
  const int scored = max_len > topk;
  const int64_t row_bytes = scored ? p.stride * 4 : 0;
  const size_t per_token_topk = dsa_topk_ws_layout(1).total;
  int64_t limit = num_tokens < DSA_TOPK_ROWS_PER_LAUNCH ? num_tokens : DSA_TOPK_ROWS_PER_LAUNCH;
  limit -= limit % multiple;
  if (limit < multiple) limit = multiple;
  /* plain chunks: scores and top-k scratch of every token of the chunk */
  int64_t chunk = tokens_fitting(cap, 0, row_bytes + (int64_t)per_token_topk, limit, multiple);
  if (chunk < multiple) chunk = multiple; /* one request's rows alone pass the cap */
  while (chunk > multiple && (scored ? round256((size_t)row_bytes * (size_t)chunk) : 0) +
                                     dsa_topk_ws_layout((int)chunk).total > cap)
    chunk -= multiple; /* the layouts' rounding */
  if (scored && max_len > DSA_TOPK_ONE_CTA_MAX_LEN && chunk < limit) {
    /* deferred: the group's top-k scratch is fixed, its scores come a chunk at a time */
    /* rows so long that few tokens fit at all (4M: 3) lower the bar to what fits beside the
     * smallest group */
    int64_t target = tokens_fitting(cap, dsa_topk_ws_layout(multiple).total, row_bytes, limit, multiple);
    if (target > DSA_DEFERRED_MIN_CHUNK) target = DSA_DEFERRED_MIN_CHUNK;
    if (target < multiple) target = multiple;
    int64_t group = limit, c = 0;
    for (;;) {
      c = tokens_fitting(cap, dsa_topk_ws_layout((int)group).total, row_bytes, group, multiple);
      if (c >= target || (c > 0 && c == group)) break;
      int64_t half = group / 2;
      half -= half % multiple;
      if (half < multiple || half == group) break;
      group = half;
    }
    if (c < multiple) c = multiple; /* one request's rows alone pass the cap */
    if (c < group) {
      p.deferred = 1;
      p.group = (int)group;
      p.chunk = (int)c;
      p.score_bytes = round256((size_t)row_bytes * (size_t)c);
      p.total = p.score_bytes + dsa_topk_ws_layout(p.group).total;
      return p;
    }
    chunk = group; /* the whole group fits: plain */
  }
  p.chunk = p.group = (int)chunk;
  p.score_bytes = scored ? round256((size_t)row_bytes * (size_t)chunk) : 0;
  p.total = p.score_bytes + dsa_topk_ws_layout(p.chunk).total;
  return p;
}

/* ---- the fused prefill indexer ---- */

int dsa_prefill_cand_cap(int topk) {
  const int64_t s = DSA_PREFILL_SAMPLE_STRIDE, k64 = ((int64_t)topk + 63) & ~(int64_t)63;
  int64_t cap = 3 * s * topk / 2;
  if (cap < s * (k64 + 128)) cap = s * (k64 + 128);
  return (int)((cap + 63) & ~(int64_t)63);
}

int64_t dsa_prefill_sample_len(int max_len) {
  return (int64_t)64 * ((((int64_t)max_len + 64 * DSA_PREFILL_SAMPLE_STRIDE - 1) >> DSA_PREFILL_SAMPLE_SHIFT) + 2);
}

/* The layout of n tokens' state; total = its bytes. */
static void prefill_fused_layout(dsa_prefill_fused_plan *p, int64_t n) {
  p->tau_off = 0;
  p->count_off = round256((size_t)n * 8);
  p->cand_off = p->count_off + round256((size_t)n * 4);
  p->sample_off = p->cand_off + (size_t)n * (size_t)p->cap * 8;
  p->total = p->sample_off + (size_t)n * (size_t)p->sample_len * 4;
}

dsa_prefill_fused_plan dsa_plan_prefill_fused(int num_tokens, int max_len, int topk, size_t workspace_limit) {
  dsa_prefill_fused_plan p;
  memset(&p, 0, sizeof p);
  const int long_cap = dsa_prefill_cand_cap(topk);
  if (max_len <= long_cap) {
    p.cap = (max_len + 63) & ~63; /* every key of every row: no sample */
  } else {
    p.cap = long_cap;
    p.sample_len = dsa_prefill_sample_len(max_len);
  }
  const size_t budget = workspace_limit ? workspace_limit : DSA_PREFILL_FUSED_BUDGET;
  /* per token, and what the 256-byte rounding of the two small arrays can add */
  const size_t per = 8 + 4 + (size_t)p.cap * 8 + (size_t)p.sample_len * 4, slack = 512;
  int64_t n = budget > slack ? (int64_t)((budget - slack) / per) : 0;
  if (n > DSA_PREFILL_FUSED_MAX_CHUNK) n = DSA_PREFILL_FUSED_MAX_CHUNK;
  if (n > num_tokens) n = num_tokens;
  if (n >= 16 && n < num_tokens) n -= n % 16; /* whole token groups of the scorer */
  if (n < 1) n = 1;                             /* one token alone may pass the limit */
  p.chunk = (int)n;
  prefill_fused_layout(&p, n);
  return p;
}

/* ---- top-k ---- */

dsa_topk_layout dsa_topk_ws_layout(int num_rows) {
  dsa_topk_layout l = {0, 0, 0, 0};
  if (num_rows <= 0) return l;
  const size_t rows = (size_t)num_rows;
  l.hist_off = 0;
  l.above_off = round256(rows * TK_HDR * 4);
  l.cand_off = l.above_off + round256(rows * DSA_MAX_TOPK * 4);
  l.total = l.cand_off + rows * TK_CAND_CAP * 4;
  return l;
}

int dsa_plan_topk_rows(int num_rows) {
  return num_rows < DSA_TOPK_ROWS_PER_LAUNCH ? num_rows : DSA_TOPK_ROWS_PER_LAUNCH;
}

/* ---- sparse MLA attention ---- */

/* (token, head group) units of a call (an empty call plans as one token): one CTA each per split. */
static int64_t mla_units(const dsa_sparse_mla_args *a, int groups) {
  return (int64_t)(a->num_tokens > 0 ? a->num_tokens : 1) * groups;
}

/* Waves of units x s CTAs, `wave` CTAs at a time. */
static int64_t mla_waves(int64_t units, int s, int64_t wave) { return (units * s + wave - 1) / wave; }

/* The cost mma_split picks its splits by: waves x (chunks a split + 1), + 1 for the combine. */
static int64_t mla_split_cost(int64_t units, int s, int bps, int64_t wave) {
  return mla_waves(units, s, wave) * (bps + 1) + (s > 1 ? 1 : 0);
}

/* A plan of `kernel` at 16 mt heads a CTA (mma_split / rows_as_m: mt 1, 2 or 4; heads_as_m: 4), every chunk in one split. */
static dsa_attention_plan mla_plan_unsplit(const dsa_sparse_mla_args *a, int kernel, int mt) {
  dsa_attention_plan pl;
  pl.kernel = kernel;
  pl.mt = mt;
  pl.groups = (a->num_heads + 16 * mt - 1) / (16 * mt);
  pl.num_blocks = (a->topk + MLA_BLOCK_N - 1) / MLA_BLOCK_N;
  pl.splits = 1;
  pl.blocks_per_split = pl.num_blocks;
  pl.convert_rows = 0;
  pl.ctas = 0;
  pl.token_group = 0;
  pl.tg_groups = 0;
  return pl;
}

/* Token groups run at heads dividing 64, at most 32 (groups of 2 to 64 tokens); masks of a byte hold
 * at most 8 tokens, so 8 to 32 heads. */
static int mla_token_group(const dsa_sparse_mla_args *a) {
  const int h = a->num_heads;
  return (h == 8 || h == 16 || h == 32) ? 64 / h : 0;
}

/* Groups a launch: all of the call's where their unions fit DSA_TG_WORKSPACE_CAP, else as many as do. */
static int64_t mla_tg_groups(const dsa_sparse_mla_args *a) {
  const int G = mla_token_group(a);
  const int64_t all = ((int64_t)a->num_tokens + G - 1) / G;
  const dsa_tg_layout one = dsa_tg_layout_of(a, 1);
  const size_t per = (size_t)one.cap * 5 + 8;
  int64_t fit = (int64_t)((DSA_TG_WORKSPACE_CAP - 3 * 256) / per);
  if (fit < 1) fit = 1;
  return all < fit ? all : fit;
}

/* CTAs a wave of clusters of s holds on the device (dsa_device_info.cluster_ctas: a cluster's CTAs share
 * a GPC, so clusters of 4 and 8 leave SMs idle); a caller's info without them: the SMs. */
static int64_t mla_cluster_wave(const dsa_device_info *dev, int s) {
  const int64_t sms = dev->num_sms > 0 ? dev->num_sms : 1;
  const int64_t w = s >= 1 && s <= 8 ? dev->cluster_ctas[s] : 0;
  return w >= s && w <= sms ? w : sms;
}

/* rows_as_m and heads_as_m split a (token, head group)'s chunks over a cluster of s = 1 to 8 CTAs (no
 * workspace; their merges give each rank a share of the 512 dims, however many): the cheapest s by
 * `cost` (wave: CTAs of clusters of s resident at once; the smaller s on a tie) among real splits. */
typedef int64_t (*mla_cluster_cost)(int64_t units, int s, int bps, int64_t wave);
static void mla_pick_cluster_split(dsa_attention_plan *pl, int64_t units, const dsa_device_info *dev,
                                   mla_cluster_cost cost_of) {
  int64_t best_cost = INT64_MAX;
  for (int s = 1; s <= 8; ++s) {
    const int bps = (pl->num_blocks + s - 1) / s;
    if (s > 1 && (pl->num_blocks + bps - 1) / bps != s) continue; /* fewer real splits than s */
    const int64_t cost = cost_of(units, s, bps, mla_cluster_wave(dev, s));
    if (cost < best_cost) {
      best_cost = cost;
      pl->splits = s;
      pl->blocks_per_split = bps;
    }
  }
}

/* What a wave of rows_as_m or heads_as_m CTAs costs besides its chunks, in chunk times: the CTAs' setup
 * (Q staged, the ring's first fill), the cluster's merge and the epilogue. heads_as_m, fitted on the
 * graph replays of dev/attention_heads_as_m_trace (FP8 KV, 64 heads, topk 2048, splits forced; one wave
 * of 4 / 8 / 16 / 32 chunks a CTA, three waves of 4 in clusters of 8), 2026-12-05, after Q's loads went
 * in flight together and the merge's peer loads in batches: H100 26.4 / 37.1 / 58.2 / 99.9 and 79.0 us,
 * 2.6 us a chunk and 15.8 a wave, 6 chunks; H200 25.9 / 35.2 / 56.8 / 101.0 and 74.1, 2.7 and 13.4,
 * 5 chunks (before: H100 ~18 us a wave, of which Q's staging ~7.5 and the merge 6-10). rows_as_m
 * (H100, 16 heads, split by the token count): one wave of 16 chunks 56 us, three and five waves of 4
 * 62.5 and 102.8: about 2.9 us a chunk and 9 a wave, 3 chunks. */
#define MLA_WAVE_CHUNKS_ROWS_AS_M 3
#define MLA_WAVE_CHUNKS_HEADS_AS_M 6

/* rows_as_m: waves x (chunks per split + a wave's own cost), + 1 for the merge. */
static int64_t mla_cost_rows_as_m(int64_t units, int s, int bps, int64_t wave) {
  return mla_waves(units, s, wave) * (bps + MLA_WAVE_CHUNKS_ROWS_AS_M) + (s > 1 ? 1 : 0);
}

/* heads_as_m: waves x (chunks per split + a wave's own cost, its merge included). Unsplit on bf16 KV the
 * grid is persistent (pl.ctas), a CTA's units in rounds; a round beyond the first cost about what a wave
 * did (H100, FP8, 64 heads, 132 / 264 / 396 tokens: 112.5 / 212.8 / 314.1 us against 110.9 / 214.2 /
 * 317.3 a CTA a unit, 2026-12-05), so the same formula. */
static int64_t mla_cost_heads_as_m(int64_t units, int s, int bps, int64_t wave) {
  return mla_waves(units, s, wave) * (bps + MLA_WAVE_CHUNKS_HEADS_AS_M);
}

/* rows_as_m: HN = 16 or 32 heads per CTA; splits form a cluster of 1 to 8 CTAs. */
static dsa_attention_plan mla_plan_rows_as_m(const dsa_sparse_mla_args *a, const dsa_device_info *dev) {
  dsa_attention_plan pl = mla_plan_unsplit(a, DSA_ATTN_ROWS_AS_M, a->num_heads <= 16 ? 1 : 2);
  mla_pick_cluster_split(&pl, mla_units(a, pl.groups), dev, mla_cost_rows_as_m);
  return pl;
}

/* heads_as_m: CTAs of (token, 64 heads); below a wave the chunks of a (token, group) are split over a cluster
 * of 2 to 8 CTAs merged through distributed shared memory. */
static dsa_attention_plan mla_plan_heads_as_m(const dsa_sparse_mla_args *a, const dsa_device_info *dev, int convert) {
  dsa_attention_plan pl = mla_plan_unsplit(a, DSA_ATTN_HEADS_AS_M, 4);
  const int64_t units = mla_units(a, pl.groups);
  mla_pick_cluster_split(&pl, units, dev, mla_cost_heads_as_m);
  /* Unsplit on bf16 KV: a persistent grid of at most the SMs, each CTA looping over units (its producer
   * fills the next unit's tiles while the consumers finish the last): H100, 2026-12-05, against a CTA a
   * unit, 128 x 128 heads 166.2 -> 158.9 us, 256 x 64 241.5 -> 235.3, 4096 x 128 4,796 -> 4,731
   * (docs/bench/attn-persistent-bf16-h100-2026-12-05/). FP8 KV's producer-bound chunks hide the change
   * (128 x 128 202.8 -> 202.3) and its static order lost to the hardware's (200 x 32 heads 189.4 ->
   * 196.5), so a CTA a unit there; FP8 rows converted first are copied as bf16 ones are, persistent too.
   * convert: packed FP8 rows converted into the workspace first (the producer copies them). */
  pl.convert_rows = convert;
  if (pl.splits == 1 && (a->kv_format != DSA_KV_FP8_PACKED || convert)) {
    const int64_t sms = dev->num_sms > 0 ? dev->num_sms : 1;
    pl.ctas = (int)(units < sms ? units : sms);
  }
  return pl;
}

/* mma_split: heads per CTA (16 mt) up to 64 with FP8 KV, 32 with bf16 KV (two bf16 tiles + 64 Q rows exceed
 * 227 KB). Splits: only while the grid is under one wave (one resident CTA per SM: every configuration
 * uses > 114 KB of shared memory) and at most 2 CTAs per SM in all (bounds the workspace); among
 * those, the fewest waves x (blocks per split + 1) (+1 for the combine). */
static dsa_attention_plan mla_plan_mma_split(const dsa_sparse_mla_args *a, int num_sms, int mt) {
  dsa_attention_plan pl = mla_plan_unsplit(a, DSA_ATTN_MMA_SPLIT, mt);
  const int64_t units = mla_units(a, pl.groups);
  const int64_t slots = num_sms;
  if (units >= slots) return pl;
  int64_t best_cost = INT64_MAX;
  for (int s = 1; s <= pl.num_blocks; ++s) {
    const int bps = (pl.num_blocks + s - 1) / s;
    if ((pl.num_blocks + bps - 1) / bps != s) continue; /* same plan as a smaller s */
    if (s > 1 && units * s > 2 * slots) continue;
    const int64_t cost = mla_split_cost(units, s, bps, slots);
    if (cost < best_cost) {
      best_cost = cost;
      pl.splits = s;
      pl.blocks_per_split = bps;
    }
  }
  return pl;
}

/* Largest mma_split head tile (m-tiles of 16) for a call: 4 with FP8 KV, 2 with bf16, never wider than the
 * heads need. */
static int mla_mma_split_max_mt(const dsa_sparse_mla_args *a) {
  const int cap = a->kv_format == DSA_KV_FP8_PACKED ? 4 : 2;
  int mt = 1;
  while (mt < cap && 16 * mt < a->num_heads) mt *= 2;
  return mt;
}

/* Relative time of one 64-entry chunk at mt m-tiles (mt = 1: 2), from the one-token traces
 * (dev/attention_mma_split_trace.cu, docs/PERF.md): a CTA of 64 heads takes about twice a CTA of 16. */
static int64_t mla_mma_split_chunk_weight(int mt) { return mt == 1 ? 2 : mt == 2 ? 3 : 4; }

/* What a kernel's plan converts first (its convert_rows), asked `convert`: only packed FP8 rows; the seesaw
 * always, every slot (1) or the ones the call selects (2); token groups as asked (1 or 2); heads_as_m (and
 * token groups at other head counts, which run its plan) every slot where asked; nothing else. */
static int mla_plan_convert(const dsa_sparse_mla_args *a, int kernel, int convert) {
  if (a->kv_format != DSA_KV_FP8_PACKED) return 0;
  if (kernel == DSA_ATTN_SEESAW) return convert == 2 ? 2 : 1;
  if (kernel == DSA_ATTN_TOKEN_GROUPS && mla_token_group(a)) return convert;
  return (kernel == DSA_ATTN_HEADS_AS_M || kernel == DSA_ATTN_TOKEN_GROUPS) && convert;
}

dsa_attention_plan dsa_plan_attention(const dsa_sparse_mla_args *a, const dsa_device_info *dev, int kernel,
                                      int convert) {
  if (kernel == DSA_ATTN_ROWS_AS_M) return mla_plan_rows_as_m(a, dev);
  if (kernel == DSA_ATTN_HEADS_AS_M) return mla_plan_heads_as_m(a, dev, mla_plan_convert(a, kernel, convert));
  if (kernel == DSA_ATTN_TOKEN_GROUPS) { /* 64 / H tokens a CTA, unsplit; other head counts: heads_as_m */
    if (!mla_token_group(a)) return mla_plan_heads_as_m(a, dev, mla_plan_convert(a, kernel, convert));
    dsa_attention_plan pl = mla_plan_unsplit(a, DSA_ATTN_TOKEN_GROUPS, 4);
    pl.token_group = mla_token_group(a);
    pl.tg_groups = mla_tg_groups(a);
    pl.convert_rows = mla_plan_convert(a, kernel, convert); /* every slot (1) or the ones the call selects (2) */
    return pl;
  }
  if (kernel == DSA_ATTN_SEESAW) { /* heads_as_m's CTAs and splits, its seesaw consumers */
    dsa_attention_plan pl = mla_plan_heads_as_m(a, dev, mla_plan_convert(a, kernel, convert));
    pl.kernel = DSA_ATTN_SEESAW;
    pl.ctas = 0; /* its consumers take one unit a CTA */
    return pl;
  }
  int num_sms = dev->num_sms;
  if (num_sms < 1) num_sms = 1;
  if (num_sms > DSA_PLAN_MAX_SMS) num_sms = DSA_PLAN_MAX_SMS;
  const int max_mt = mla_mma_split_max_mt(a);
  dsa_attention_plan best = mla_plan_mma_split(a, num_sms, max_mt);
  if (best.splits == 1) return best; /* a wave or more of CTAs at the widest tile: no split */
  /* Under a wave (a few tokens): narrower head tiles give more, shorter CTAs. Cost in half-chunks of
   * a 16-head CTA: waves x (blocks per split x chunk weight + 2) + 1 for the combine. */
  int64_t best_cost = INT64_MAX;
  for (int mt = max_mt; mt >= 1; mt /= 2) {
    const dsa_attention_plan pl = mla_plan_mma_split(a, num_sms, mt);
    const int64_t cost = mla_waves(mla_units(a, pl.groups), pl.splits, num_sms) *
                             (pl.blocks_per_split * mla_mma_split_chunk_weight(mt) + 2) +
                         (pl.splits > 1 ? 1 : 0);
    if (cost < best_cost) {
      best_cost = cost;
      best = pl;
    }
  }
  return best;
}

/* o_part [splits, T, H, 512] fp32, then ml_part [splits, T, H] float2. */
static size_t mla_split_bytes(const dsa_sparse_mla_args *a, int64_t splits) {
  return (size_t)splits * (size_t)a->num_tokens * (size_t)a->num_heads *
         (MLA_V_DIM * sizeof(float) + 2 * sizeof(float));
}

size_t dsa_plan_attention_workspace(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl) {
  if (a->num_tokens <= 0) return 0;
  const size_t rows = dsa_plan_attention_converted_bytes(a, pl);
  if (pl->kernel == DSA_ATTN_TOKEN_GROUPS) return rows + dsa_tg_layout_of(a, pl->tg_groups).total;
  if (pl->splits <= 1 || pl->kernel != DSA_ATTN_MMA_SPLIT) return rows;
  return rows + mla_split_bytes(a, pl->splits);
}

/* Any plan for s <= DSA_PLAN_MAX_SMS SMs splits only when units < s, and then into at most
 * 2 s / units (and num_blocks) pieces, units counted at the widest head tile (the fewest): that many
 * splits is an upper bound for every device and tile — for mma_split, and rows_as_m, which runs the call
 * on mma_split where the device refuses its cluster. heads_as_m and the seesaw merge their splits in the
 * cluster (refused, they run unsplit): only the converted rows. */
size_t dsa_plan_attention_workspace_bound(const dsa_sparse_mla_args *a, int kernel, int convert) {
  if (a->num_tokens <= 0) return 0;
  /* packed FP8 rows converted first, as the kernel's plan converts them; the cluster kernels need nothing
   * else */
  const size_t rows = dsa_plan_converted_bytes(a, mla_plan_convert(a, kernel, convert));
  /* token groups: their unions (their plan takes nothing from the device) */
  if (kernel == DSA_ATTN_TOKEN_GROUPS && mla_token_group(a))
    return rows + dsa_tg_layout_of(a, mla_tg_groups(a)).total;
  if (kernel == DSA_ATTN_SEESAW || kernel == DSA_ATTN_HEADS_AS_M) return rows;
  const dsa_attention_plan pl = mla_plan_mma_split(a, DSA_PLAN_MAX_SMS, mla_mma_split_max_mt(a));
  const int64_t units = (int64_t)a->num_tokens * pl.groups;
  if (units >= DSA_PLAN_MAX_SMS) return rows;
  int64_t splits = 2 * DSA_PLAN_MAX_SMS / units;
  if (splits > pl.num_blocks) splits = pl.num_blocks;
  return rows + (splits > 1 ? mla_split_bytes(a, splits) : 0);
}
