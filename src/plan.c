/*
 * plan.c — host-only planning (no CUDA): how a call's work is split into CTAs and how much
 * scratch that needs. Shared by the real launchers and by the CI stubs (tests/stub_kernels.c),
 * so the workspace a caller is told to allocate is the one the kernels carve.
 */
#include <stdint.h>

#include "dsa_kernels.h"

static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

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

/* ---- sparse MLA ---- */

/* (token, head group) units of a call (an empty call plans as one token): one CTA each per split. */
static int64_t mla_units(const dsa_sparse_mla_args *a, int groups) {
  return (int64_t)(a->num_tokens > 0 ? a->num_tokens : 1) * groups;
}

/* Waves of units x s CTAs, `wave` CTAs at a time. */
static int64_t mla_waves(int64_t units, int s, int64_t wave) { return (units * s + wave - 1) / wave; }

/* The cost v1 and v2 pick their splits by: waves x (chunks a split + 1), + 1 for the merge. */
static int64_t mla_split_cost(int64_t units, int s, int bps, int64_t wave) {
  return mla_waves(units, s, wave) * (bps + 1) + (s > 1 ? 1 : 0);
}

/* A plan of `kernel` at 16 mt heads a CTA (v1 / v2: mt 1, 2 or 4; v3: 4), every chunk in one split. */
static dsa_mla_plan mla_plan_unsplit(const dsa_sparse_mla_args *a, int kernel, int mt) {
  dsa_mla_plan pl;
  pl.kernel = kernel;
  pl.mt = mt;
  pl.groups = (a->num_heads + 16 * mt - 1) / (16 * mt);
  pl.num_blocks = (a->topk + MLA_BLOCK_N - 1) / MLA_BLOCK_N;
  pl.splits = 1;
  pl.blocks_per_split = pl.num_blocks;
  return pl;
}

/* v2 and v3 split a (token, head group)'s chunks over a cluster of s = 1, 2, 4 or 8 CTAs (no
 * workspace): the cheapest s by `cost` while each is a real split. */
typedef int64_t (*mla_cluster_cost)(int64_t units, int s, int bps, int num_sms);
static void mla_pick_cluster_split(dsa_mla_plan *pl, int64_t units, int num_sms, mla_cluster_cost cost_of) {
  int64_t best_cost = INT64_MAX;
  for (int s = 1; s <= 8; s *= 2) {
    const int bps = (pl->num_blocks + s - 1) / s;
    if (s > 1 && (pl->num_blocks + bps - 1) / bps != s) break; /* fewer real splits than s */
    const int64_t cost = cost_of(units, s, bps, num_sms);
    if (cost < best_cost) {
      best_cost = cost;
      pl->splits = s;
      pl->blocks_per_split = bps;
    }
  }
}

/* v2: waves x (chunks per split + 1) (+1 for the merge), as v1. */
static int64_t mla_cost_sm90(int64_t units, int s, int bps, int num_sms) {
  return mla_split_cost(units, s, bps, num_sms);
}

/* v3: waves x (chunks per split + 1 for the merge, about a chunk's time); clusters of 4 and 8 fill
 * a wave less well (MLA_CLUSTER_WAVE_NUM / DEN of the SMs). */
static int64_t mla_cost_v3(int64_t units, int s, int bps, int num_sms) {
  const int64_t wave = s <= 2 ? num_sms : (int64_t)num_sms * MLA_CLUSTER_WAVE_NUM / MLA_CLUSTER_WAVE_DEN;
  return mla_waves(units, s, wave > 0 ? wave : 1) * (bps + (s > 1 ? 1 : 0));
}

/* v2: HN = 16 or 32 heads per CTA; splits form a cluster of 1, 2, 4 or 8 CTAs. */
static dsa_mla_plan mla_plan_sm90(const dsa_sparse_mla_args *a, int num_sms) {
  dsa_mla_plan pl = mla_plan_unsplit(a, DSA_MLA_KERNEL_SM90, a->num_heads <= 16 ? 1 : 2);
  if (num_sms < 1) num_sms = 1;
  mla_pick_cluster_split(&pl, mla_units(a, pl.groups), num_sms, mla_cost_sm90);
  return pl;
}

/* v3: CTAs of (token, 64 heads); below a wave the chunks of a (token, group) are split over a cluster
 * of 2, 4 or 8 CTAs merged through distributed shared memory. */
static dsa_mla_plan mla_plan_v3(const dsa_sparse_mla_args *a, int num_sms) {
  dsa_mla_plan pl = mla_plan_unsplit(a, DSA_MLA_KERNEL_V3, 4);
  if (num_sms < 1) num_sms = 1;
  mla_pick_cluster_split(&pl, mla_units(a, pl.groups), num_sms, mla_cost_v3);
  return pl;
}

int dsa_mla_choose_kernel(const dsa_sparse_mla_args *a, int num_sms) {
  if (num_sms < 1) num_sms = 1;
  /* v3 from MLA_V3_MIN_UNITS (token, 64-head) units; below 33 heads its 64-head tile is mostly
   * padding and v2 measured faster */
  const int64_t units_v3 = (int64_t)a->num_tokens * ((a->num_heads + 63) / 64);
  if (a->num_heads >= MLA_V3_MIN_HEADS && units_v3 >= MLA_V3_MIN_UNITS) return DSA_MLA_KERNEL_V3;
  const int64_t groups = (a->num_heads + 31) / 32;
  if (a->kv_format == DSA_KV_FP8_PACKED && a->num_heads <= 64 && a->num_tokens >= 32 &&
      (int64_t)a->num_tokens * groups <= 2 * (int64_t)num_sms)
    return DSA_MLA_KERNEL_SM90;
  return DSA_MLA_KERNEL_MMA;
}

/* v1: heads per CTA (16 mt) up to 64 with FP8 KV, 32 with bf16 KV (two bf16 tiles + 64 Q rows exceed
 * 227 KB). Splits: only while the grid is under one wave (one resident CTA per SM: every configuration
 * uses > 114 KB of shared memory) and at most 2 CTAs per SM in all (bounds the workspace); among
 * those, the fewest waves x (blocks per split + 1) (+1 for the combine). */
static dsa_mla_plan mla_plan_v1(const dsa_sparse_mla_args *a, int num_sms, int mt) {
  dsa_mla_plan pl = mla_plan_unsplit(a, DSA_MLA_KERNEL_MMA, mt);
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

/* Largest v1 head tile (m-tiles of 16) for a call: 4 with FP8 KV, 2 with bf16, never wider than the
 * heads need. */
static int mla_v1_max_mt(const dsa_sparse_mla_args *a) {
  const int cap = a->kv_format == DSA_KV_FP8_PACKED ? 4 : 2;
  int mt = 1;
  while (mt < cap && 16 * mt < a->num_heads) mt *= 2;
  return mt;
}

/* Relative time of one 64-entry chunk at mt m-tiles (mt = 1: 2), from the one-token traces
 * (tools/trace_mla_v1.cu, docs/PERF.md): a CTA of 64 heads takes about twice a CTA of 16. */
static int64_t mla_v1_chunk_weight(int mt) { return mt == 1 ? 2 : mt == 2 ? 3 : 4; }

dsa_mla_plan dsa_mla_make_plan(const dsa_sparse_mla_args *a, int num_sms, int kernel) {
  if (kernel == DSA_MLA_KERNEL_SM90) return mla_plan_sm90(a, num_sms);
  if (kernel == DSA_MLA_KERNEL_V3) return mla_plan_v3(a, num_sms);
  if (num_sms < 1) num_sms = 1;
  if (num_sms > DSA_PLAN_MAX_SMS) num_sms = DSA_PLAN_MAX_SMS;
  const int max_mt = mla_v1_max_mt(a);
  dsa_mla_plan best = mla_plan_v1(a, num_sms, max_mt);
  if (best.splits == 1) return best; /* a wave or more of CTAs at the widest tile: no split */
  /* Under a wave (a few tokens): narrower head tiles give more, shorter CTAs. Cost in half-chunks of
   * a 16-head CTA: waves x (blocks per split x chunk weight + 2) + 1 for the combine. */
  int64_t best_cost = INT64_MAX;
  for (int mt = max_mt; mt >= 1; mt /= 2) {
    const dsa_mla_plan pl = mla_plan_v1(a, num_sms, mt);
    const int64_t cost = mla_waves(mla_units(a, pl.groups), pl.splits, num_sms) *
                             (pl.blocks_per_split * mla_v1_chunk_weight(mt) + 2) +
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
         (MLA_OUT_DIM * sizeof(float) + 2 * sizeof(float));
}

size_t dsa_mla_plan_workspace(const dsa_sparse_mla_args *a, const dsa_mla_plan *pl) {
  if (a->num_tokens <= 0 || pl->splits <= 1 || pl->kernel != DSA_MLA_KERNEL_MMA) return 0;
  return mla_split_bytes(a, pl->splits);
}

/* Any plan for s <= DSA_PLAN_MAX_SMS SMs splits only when units < s, and then into at most
 * 2 s / units (and num_blocks) pieces, units counted at the widest head tile (the fewest): that many
 * splits is an upper bound for every device and tile. */
size_t dsa_mla_workspace_bound(const dsa_sparse_mla_args *a) {
  if (a->num_tokens <= 0) return 0;
  const dsa_mla_plan pl = mla_plan_v1(a, DSA_PLAN_MAX_SMS, mla_v1_max_mt(a)); /* v2, v3 need none */
  const int64_t units = (int64_t)a->num_tokens * pl.groups;
  if (units >= DSA_PLAN_MAX_SMS) return 0;
  int64_t splits = 2 * DSA_PLAN_MAX_SMS / units;
  if (splits > pl.num_blocks) splits = pl.num_blocks;
  return splits > 1 ? mla_split_bytes(a, splits) : 0;
}
