/*
 * host/choose.c — the kernel choice tables, one function a stage, and the DSA_KERNEL override
 * (host/choose.h). The only place the library reads the environment. Each row of a table carries the
 * H200 measurement that put it there (docs/PERF.md has the runs); the kernels' own files say how
 * they work. A dispatch file may still leave its table's kernel where the device refuses it (a
 * cluster it cannot form, a tensor map the driver does not make): attention/dispatch.cu,
 * topk/dispatch.cu, indexer/dispatch.cu say what runs then.
 */
#include "host/choose.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/plan.h"
#include "host/status.h"

/* ---- the override ---------------------------------------------------------------------------- */

typedef struct {
  int indexer, scores, topk, attention, merge; /* a dsa_*_kernel, 0 = the table's choice */
  char error[256];             /* non-empty: DSA_KERNEL did not parse */
} kernel_override;

typedef struct {
  const char *name;
  int kernel;
} kernel_name;
static const kernel_name k_indexer_names[] = {
    {"fused", DSA_INDEXER_FUSED}, {"separate", DSA_INDEXER_SEPARATE}, {NULL, 0}};
static const kernel_name k_scores_names[] = {
    {"mma", DSA_SCORES_MMA}, {"wgmma", DSA_SCORES_WGMMA}, {"wgmma_tma", DSA_SCORES_WGMMA_TMA}, {NULL, 0}};
static const kernel_name k_topk_names[] = {
    {"registers", DSA_TOPK_REGISTERS}, {"slices", DSA_TOPK_SLICES}, {"chain", DSA_TOPK_CHAIN}, {NULL, 0}};
static const kernel_name k_attention_names[] = {
    {"mma_split", DSA_ATTN_MMA_SPLIT}, {"rows_as_m", DSA_ATTN_ROWS_AS_M}, {"heads_as_m", DSA_ATTN_HEADS_AS_M},
    {"seesaw", DSA_ATTN_SEESAW}, {"token_groups", DSA_ATTN_TOKEN_GROUPS}, {NULL, 0}};
static const kernel_name k_merge_names[] = {
    {"select", DSA_MERGE_SELECT}, {"runs", DSA_MERGE_RUNS}, {"tree", DSA_MERGE_TREE}, {NULL, 0}};

static void list_names(const kernel_name *names, char *out, size_t n) {
  out[0] = 0;
  for (const kernel_name *k = names; k->name; ++k)
    snprintf(out + strlen(out), n - strlen(out), "%s%s", k == names ? "" : " | ", k->name);
}

/* "stage:kernel[,stage:kernel...]", spaces around the parts ignored. */
static void parse_override(const char *spec, kernel_override *o) {
  memset(o, 0, sizeof *o);
  if (!spec) return;
  char buf[256];
  if (strlen(spec) >= sizeof buf) {
    snprintf(o->error, sizeof o->error, "DSA_KERNEL is %zu characters long (at most %zu)", strlen(spec),
             sizeof buf - 1);
    return;
  }
  strcpy(buf, spec);
  for (char *part = strtok(buf, ","); part; part = strtok(NULL, ",")) {
    while (*part == ' ') ++part;
    size_t len = strlen(part);
    while (len > 0 && part[len - 1] == ' ') part[--len] = 0;
    if (len == 0) continue;
    char *colon = strchr(part, ':');
    const char *stage = part, *kernel = colon ? colon + 1 : "";
    if (colon) *colon = 0;
    const kernel_name *names = NULL;
    int *slot = NULL;
    if (strcmp(stage, "indexer") == 0) names = k_indexer_names, slot = &o->indexer;
    else if (strcmp(stage, "scores") == 0) names = k_scores_names, slot = &o->scores;
    else if (strcmp(stage, "topk") == 0) names = k_topk_names, slot = &o->topk;
    else if (strcmp(stage, "attention") == 0) names = k_attention_names, slot = &o->attention;
    else if (strcmp(stage, "merge") == 0) names = k_merge_names, slot = &o->merge;
    if (!names) {
      snprintf(o->error, sizeof o->error, "DSA_KERNEL=\"%s\": unknown stage \"%s\" (indexer, scores, topk, attention or merge)", spec,
               stage);
      return;
    }
    for (const kernel_name *k = names; k->name; ++k)
      if (strcmp(kernel, k->name) == 0) *slot = k->kernel;
    if (*slot == 0) {
      char list[96];
      list_names(names, list, sizeof list);
      snprintf(o->error, sizeof o->error, "DSA_KERNEL=\"%s\": %s has no kernel \"%s\" (%s)", spec, stage, kernel, list);
      return;
    }
  }
}

/* Parsed once, on first use, whichever thread gets there first (the others wait: microseconds). */
static kernel_override g_override;
static _Atomic int g_override_state; /* 0 not parsed, 1 parsing, 2 ready */

static const kernel_override *override_get(void) {
  if (atomic_load_explicit(&g_override_state, memory_order_acquire) == 2) return &g_override;
  int expected = 0;
  if (atomic_compare_exchange_strong(&g_override_state, &expected, 1)) {
    parse_override(getenv("DSA_KERNEL"), &g_override);
    atomic_store_explicit(&g_override_state, 2, memory_order_release);
  } else {
    while (atomic_load_explicit(&g_override_state, memory_order_acquire) != 2) {
    }
  }
  return &g_override;
}

void dsa_choose_override(const char *spec) {
  parse_override(spec, &g_override);
  atomic_store_explicit(&g_override_state, 2, memory_order_release);
}

dsa_status dsa_choose_ready(const char *fn) {
  const kernel_override *o = override_get();
  return o->error[0] ? dsa_fail(DSA_ERR_INVALID_VALUE, "%s: %s", fn, o->error) : DSA_OK;
}

/* ---- stage 1: indexer scores ----------------------------------------------------------------- */

void dsa_choose_scores(dsa_scores_params *p) {
  const int forced = override_get()->scores;
  const int fp8_q = p->q.q_dtype == DSA_DTYPE_FP8_E4M3;
  const int decode = p->rows.mode == DSA_ROWS_DECODE;
  /* TMA moves a 64-key page with one tensor copy: FP8 q (e4m3 wgmma straight on the page), decode,
   * page size 64, a page count the tensor map takes */
  const int tma = fp8_q && decode && p->cache.page_size == 64 && p->cache.num_pages > 0 &&
                  p->cache.num_pages < 0x7fffffffLL;
  /* wgmma's bf16-q (f16) path stages q as 256-byte rows: a decode group of more than 256 (token,
   * head) rows (q_len_per_req 5..8 at 64 heads) does not fit beside its ring */
  const int hp = p->q.num_heads <= 32 ? 32 : 64;
  const int wgmma = fp8_q || !decode || p->rows.q_len_per_req * hp <= 256;
  p->fallback = DSA_SCORES_MMA;
  if (forced == DSA_SCORES_MMA) {
    p->kernel = DSA_SCORES_MMA;
  } else if (forced == DSA_SCORES_WGMMA || forced == DSA_SCORES_WGMMA_TMA) {
    p->kernel = forced == DSA_SCORES_WGMMA_TMA && tma ? DSA_SCORES_WGMMA_TMA : wgmma ? DSA_SCORES_WGMMA : DSA_SCORES_MMA;
    p->fallback = DSA_SCORES_WGMMA; /* forced TMA without a tensor map: the same kernel, cp.async */
  } else if (!decode) {
    /* prefill: wgmma. 64 tokens at 1M / 128k: FP8 q 0.72 / 0.114 ms against mma's 1.96 / 0.34;
     * bf16 q (f16 wgmma, keys converted exactly) 1.29 / 0.250 against 1.96 / 0.341 */
    p->kernel = DSA_SCORES_WGMMA;
  } else if (tma) {
    /* FP8-q decode, 64-key pages: wgmma with TMA pages. 1 token at 8k / 128k / 1M 6.8 / 10.0 / 43.4
     * us against mma's 8.0 / 14.7 / 61.5; B = 256 x 8k 86.6 against 107.1; MTP 4 at 128k 16.1
     * against 46.5 (if the driver gives no tensor map: mma, as for other page sizes) */
    p->kernel = DSA_SCORES_WGMMA_TMA;
  } else {
    /* bf16-q decode and other page sizes: mma (f16 mma.sync, keys converted in registers) */
    p->kernel = DSA_SCORES_MMA;
  }
}

/* ---- stages 1 + 2: one fused kernel or two ---------------------------------------------------- */

#define FUSED_MIN_LEN_1 2048 /* one token a request: rows longer than this */
#define FUSED_MIN_LEN_2 8192 /* two */

int dsa_choose_indexer(const dsa_scores_params *p) {
  const int forced = override_get()->indexer;
  if (p->rows.mode == DSA_ROWS_PREFILL) /* dsa_choose_prefill_indexer */
    return DSA_INDEXER_SEPARATE;
  /* the fused kernel is the wgmma scorer's (decode rows, their keys in shared memory) */
  const int can = p->rows.mode == DSA_ROWS_DECODE &&
                  (p->kernel == DSA_SCORES_WGMMA_TMA || p->kernel == DSA_SCORES_WGMMA);
  if (!can || forced == DSA_INDEXER_SEPARATE) return DSA_INDEXER_SEPARATE;
  if (forced == DSA_INDEXER_FUSED) return DSA_INDEXER_FUSED;
  /* FP8-q decode on TMA pages (H200, hot, us, fused against separate; docs/PERF.md):
   * - one token, up to 8 requests, rows over 2k: 1 request at 3k / 8k / 128k / 1M 14.4 / 14.7 /
   *   20.3 / 56.5 against 16.2 / 17.2 / 32.8 / 81.0; 4 requests at 8k / 128k 16.8 / 37.8 against
   *   18.0 / 53.0; 8 requests 17.6 / 57.5 against 19.0 / 71.5. At 64 requests it is level (8k 38.4
   *   both, 32k 109.4 against 109.1): separate there.
   * - two tokens (MTP 2), up to 4 requests, rows over 8k: 128k / 1M 26.4 / 71.1 against 40.5 /
   *   85.0; it lost at 4k / 8k (20.2 / 20.7 against 17.7 / 18.6).
   * - more tokens: separate (MTP 4 at 128k 43.3 against 40.4: a CTA runs its tokens' selects one
   *   after another). */
  const int reqs = p->rows.q_len_per_req > 0 ? p->num_tokens / p->rows.q_len_per_req : p->num_tokens;
  if (p->kernel != DSA_SCORES_WGMMA_TMA) return DSA_INDEXER_SEPARATE;
  if (p->rows.q_len_per_req == 1)
    return p->rows.max_len > FUSED_MIN_LEN_1 && reqs <= 8 ? DSA_INDEXER_FUSED : DSA_INDEXER_SEPARATE;
  if (p->rows.q_len_per_req == 2)
    return p->rows.max_len > FUSED_MIN_LEN_2 && reqs <= 4 ? DSA_INDEXER_FUSED : DSA_INDEXER_SEPARATE;
  return DSA_INDEXER_SEPARATE;
}

/* The fused prefill indexer (sample, thresholds, filtered scores, select: indexer/prefill_select.cu)
 * runs on the FP8-q wgmma scorer, for rows longer than topk (shorter ones select everything, nothing
 * scored). Its workspace is O(topk + L / 16) a token, not O(L) (4096 tokens at 1M: 60 MiB), but it is
 * slower than the two kernels with their fastest plan (H200, hot, ms, fused / separate; docs/PERF.md):
 * 64 tokens at 8k 0.048 / 0.037, 128k 0.252 / 0.170, 1M 1.123 / 0.978 (265 MiB); 4096 at 128k 17.4 /
 * 9.15 (164 MiB). So without a workspace_limit the separate kernels run. Under a limit their fastest
 * plan does not fit, the separate path takes its capped plans: there the fused indexer wins at 1M
 * (64 tokens, 64 MiB: 1.123 / 1.258) and loses at 128k (4096 tokens: 17.5 / 11.6), so it runs for rows
 * of FUSED_PREFILL_MIN_LEN or more (between the two, not measured: separate). Forced, it runs wherever
 * it can. */
#define FUSED_PREFILL_MIN_LEN (1 << 20)

int dsa_choose_prefill_indexer(const dsa_scores_params *p, size_t separate_bytes, size_t budget) {
  const int forced = override_get()->indexer;
  const int can = p->rows.mode == DSA_ROWS_PREFILL && p->kernel == DSA_SCORES_WGMMA &&
                  p->q.q_dtype == DSA_DTYPE_FP8_E4M3 && p->rows.max_len > p->skip_len;
  if (!can || forced == DSA_INDEXER_SEPARATE) return DSA_INDEXER_SEPARATE;
  if (forced == DSA_INDEXER_FUSED) return DSA_INDEXER_FUSED;
  return budget > 0 && separate_bytes > budget && p->rows.max_len >= FUSED_PREFILL_MIN_LEN ? DSA_INDEXER_FUSED
                                                                                           : DSA_INDEXER_SEPARATE;
}

/* ---- stage 2: top-k -------------------------------------------------------------------------- */

void dsa_choose_topk(dsa_topk_params *p) {
  const int forced = override_get()->topk;
  const int rows = p->num_tokens, max_len = p->rows.max_len;
  const int sms = p->num_sms > 0 ? p->num_sms : 132;
  p->cluster = 1;
  /* no score to read (every row selects all it sees): slices, one CTA a row */
  if (max_len <= p->topk) {
    p->kernel = DSA_TOPK_SLICES;
    return;
  }
  if (forced == DSA_TOPK_CHAIN) {
    p->kernel = DSA_TOPK_CHAIN;
    return;
  }
  /* rows up to 16,384, at most one an SM: registers (one 1,024-thread CTA a row). Decode 8k 10.9
   * us against 12.9 on slices, serving 64 x 8k 13.0 against 19.3; past a wave it loses (256 x 8k
   * 25.0 against 21.4) */
  if (max_len <= DSA_TOPK_REGISTERS_MAX_LEN && forced != DSA_TOPK_SLICES &&
      (rows <= sms || forced == DSA_TOPK_REGISTERS)) {
    p->kernel = DSA_TOPK_REGISTERS;
    return;
  }
  /* few long rows (rows x C <= SMs): slices, a cluster of C CTAs a row, C the fewest powers of two
   * giving slices of <= 16,384 (up to 8). Clusters in waves lose (prefill 64 x 128k: 57 us at one
   * wave, 128 at two; the chain 58) */
  int C = 1;
  while (C < DSA_TOPK_MAX_CLUSTER && (max_len + C - 1) / C > DSA_TOPK_SLICE_MAX) C *= 2;
  if ((max_len + C - 1) / C <= DSA_TOPK_SLICE_MAX && (int64_t)rows * C <= (int64_t)sms) {
    p->kernel = DSA_TOPK_SLICES;
    p->cluster = C;
    return;
  }
  /* rows up to 40,960 (a row in one CTA's shared memory), however many: slices, one CTA a row */
  if (max_len <= DSA_TOPK_ONE_CTA_MAX_LEN) {
    p->kernel = DSA_TOPK_SLICES;
    return;
  }
  /* many long rows: the chain (memset, histogram, filter, resolve; scores read twice) */
  p->kernel = DSA_TOPK_CHAIN;
}

/* ---- stage 3: sparse MLA attention ----------------------------------------------------------- */

/* heads_as_m (64 heads a CTA, split over a cluster below a wave) runs for more than 32 heads once
 * tokens x ceil(heads / 64) reaches 6 units on packed FP8 KV, 8 on bf16; fewer lose to mma_split (FP8
 * 64 heads, H100 2026-12-05, heads_as_m / mma_split: 4 tokens 26.5 / 25.9 us, 6 26.8 / 30.7, 8 26.9 /
 * 34.5); below 33 heads its 64-head tile is mostly padding.
 * seesaw (heads_as_m's CTAs with the chunks in pairs, one a consumer warpgroup, FlashMLA's prefill
 * schedule; packed FP8 KV converted first): in heads_as_m's place over rows read many times (below). */
/* Packed FP8 KV read many times over (prefill: every token of a chunk reads the same context): heads_as_m,
 * token groups and the seesaw first convert every cache slot once into the workspace as the f16 rows their FP8
 * producer would make (hm_convert_rows_kernel: the same bits, so the same results), and their producer
 * then only copies rows, as over bf16 KV. Chosen where the call's entries (tokens x topk x head groups)
 * are at least CONVERT_MIN_READS times the slots and the rows take at most DSA_CONVERT_WORKSPACE_CAP;
 * given less workspace the call runs unconverted. H100, 2026-12-06, unconverted -> converted, us
 * (docs/bench/attn-converted-h100-2026-12-06/): prefill 4096 x 128 heads over its 16k context (512 reads
 * a slot) 5,650 -> 4,885; GLM's 4096-token chunk over 128k (64) 2,930 -> 2,550 distinct, 1,190 -> 1,066
 * 90 % shared, at 8 heads 2,870 -> 2,520 / 990 -> 943; but prefill 64 x 128 heads over 16k (16 a slot)
 * 91.9 -> 94.8, converted with the factors by cp.async (a form as fast as this one at 4096 x 128): hence
 * 32. Decode batches over a pool read each slot well under once: never. */
#define CONVERT_MIN_READS 32

/* The seesaw in place of heads_as_m where each cache slot is read at least SEESAW_MIN_READS times (bf16
 * KV) or SEESAW_MIN_READS_FP8 (packed FP8, converted first, the rows within DSA_CONVERT_WORKSPACE_CAP):
 * prefills over their own context. H100, 2026-12-06 (docs/bench/attn-seesaw-arrivals-h100-2026-12-06/,
 * trials/), heads_as_m / seesaw, us, prefill over a 16k context with the reads a slot in brackets:
 * 4096 x 128 heads (512) FP8 converted 4,879 / 4,601, bf16 4,635 / 4,462 (heads_as_m the day's earlier
 * record); 64 x 128 (16) bf16 76.6 / 74.5, FP8 91.5 / 88.2; 64 x 64 (8, split over clusters) bf16
 * 44.4 / 43.0, FP8 51.8 / 55.8 (converting all 16k slots not repaid). Decode batches, each request over
 * its own 8k (under one read a slot), lose: bf16 64 x 64 67.4 / 68.8, 256 x 64 227.9 / 232.2, 128 x 128
 * 156.3 / 160.3. Given a workspace short of FP8's rows: heads_as_m. */
#define SEESAW_MIN_READS 8
#define SEESAW_MIN_READS_FP8 16
/* Packed FP8 over a cache too large to convert whole (an engine's pool): the seesaw on the rows the call
 * selects, converted first (convert_rows 2, dsa_select_layout; heads_as_m unconverted where the call names
 * more than DSA_SELECT_ROWS slots), for calls of at least SELECT_MIN_READS entries (tokens x topk x head
 * groups: a prefill of 4096 tokens x 128 heads has 16M, of 2048 x 128 or 4096 x 64 8M; decode batches of
 * fewer than 2048 requests x 128 heads have fewer). H100, 2026-12-06, prefill 4096 x 128 heads over the
 * bench's 4M-slot pool, heads_as_m unconverted / this: 5,755 / 4,897 and 5,793 / 4,983 us (over its own
 * 16k context, every slot converted: 4,566; docs/bench/attn-seesaw-selected-rows-h100-2026-12-06/); with the
 * selection's passes reworked (docs/bench/attn-token-groups-selected-rows-h100-2026-12-06/, main / this, two
 * runs) 4,849 / 4,731 and 4,858 / 4,742.
 * Token groups over packed FP8 in such a pool, from the same count: the GLM chunk (4096 tokens, 8.4M entries)
 * over the bench's 4M-slot pool, H100, main (unconverted) / the rows selected, us, two runs: 16 heads
 * distinct 3,025 / 2,549 and 3,005 / 2,534, 90 % shared 1,144 / 1,167 and 1,147 / 1,170; 8 heads distinct
 * 2,866 / 2,383 and 2,853 / 2,351, shared 846 / 927 and 834 / 928. With remap by one 8-byte load a word
 * (docs/bench/attn-select-words-rows-h100-2026-12-06/) the selection costs ≈ 0.235 ms whatever the share
 * (ncu: mark 91, convert 89, remap 41 us for the chunk): 16 heads distinct 2,493 / 2,495, shared 1,144 /
 * 1,143; 8 heads 2,337 / 2,333, 902 / 899. It saves in proportion to the unions' rows, so it loses where
 * neighbouring tokens share most of their rows (about 90 % shared at 16 heads, 80 % at 8, by those
 * points); chosen for both, the distinct rows the bar's case. */
#define SELECT_MIN_READS ((int64_t)1 << 23)
#define HEADS_AS_M_MIN_HEADS 33
#define HEADS_AS_M_MIN_UNITS 8     /* bf16 KV */
#define HEADS_AS_M_MIN_UNITS_FP8 6 /* packed FP8 KV */
/* At <= 32 heads the wgmma kernels pass mma_split from 16-20 tokens, their splits planned on the
 * clusters of any size 1-8 the device keeps resident (dsa_device_info.cluster_ctas): heads_as_m on
 * bf16 KV and at 17 to 32 heads (its 64-row tile at least a quarter full), rows_as_m on packed FP8 at
 * <= 16 heads (its bf16 path is chosen nowhere: the chunk numbers that said so, 4,481 us against
 * heads_as_m's 2,096, came from the broken pool below, and it was not measured again). H100
 * 2026-12-05, decode over 8k, topk 2048, us, every row --check ok
 * (docs/bench/attn-merge-h100-2026-12-05/):
 *   FP8 16 heads, mma_split / rows_as_m, tokens 16 / 20 / 24 / 32 / 36 / 40:
 *     25.8 / 27.0   34.4 / 30.1   39.9 / 32.8   49.6 / 41.4   62.8 / 42.2   63.2 / 54.6
 *   FP8 8 heads, tokens 16 / 20 / 32: 24.5 / 26.4   32.3 / 29.4   46.9 / 40.9
 *   FP8 32 heads, mma_split / heads_as_m, tokens 12 / 16 / 20: 27.0 / 27.6   34.5 / 32.9   45.5 / 35.7
 *   bf16 16 heads, mma_split / heads_as_m, tokens 16 / 20 / 24: 23.4 / 26.7   33.1 / 30.7   38.6 / 35.2
 *     (final/, when heads_as_m's merge read the 48 padding heads' staging too; merging the real heads
 *     and Q staged conflict-free took heads_as_m at 20 / 24 tokens from 27.8 / 30.5 to 23.6 / 27.1 on
 *     the H200, attn-q-staging-h200-2026-12-05; 16 tokens not re-measured)
 *   bf16 32 heads, tokens 8 / 12 / 16: 19.5 / 22.9   24.0 / 24.2   33.0 / 29.7
 *   (the GLM chunk numbers once here, 2,937 / 2,053 and 3,001 / 2,119, came from a broken bench pool:
 *   void, docs/PERF.md "Token groups")
 * Before the splits took any cluster size (rows_as_m 2 ways at 32-33 tokens: 53.7 us) the FP8 rule
 * at <= 16 heads needed 34 tokens or four splits a token in one wave of clusters of 4. */
#define WIDE_HEADS 17                  /* 17 to 32 heads: heads_as_m's tile at least a quarter full */
#define BF16_WIDE_HEADS_AS_M_TOKENS 16 /* bf16 KV at 17 to 32 heads */
#define FP8_WIDE_HEADS_AS_M_TOKENS 16  /* packed FP8 KV at 17 to 32 heads */
#define HEADS_AS_M_TOKENS 20           /* bf16 KV at <= 16 heads */
#define ROWS_AS_M_TOKENS 20            /* packed FP8 KV at <= 16 heads */

/* token groups (heads_as_m over groups of 64 / H neighbouring tokens, each CTA over the union of their
 * index lists sorted by slot) at 8 and 16 heads from a wave of groups (tokens x heads >= 128 x 64: 512
 * tokens at 16 heads, 1024 at 8; they are unsplit, a CTA a group), where the call's workspace holds the
 * unions (else the kernel below: the call never fails for want of it). GLM chunks at the end of a 128k
 * context, H100 2026-12-06, us, every row --check ok (docs/bench/attn-chunk-h100-2026-12-06/; token
 * groups / the kernel below: rows_as_m FP8, heads_as_m bf16; distinct selections, then 90 % of each
 * token's kept from the previous token's):
 *   FP8 16 heads    256: 368 / 195, 147 / 182     512: 372 / 392, 161 / 364     1024: 731 / 811, 306 / 758
 *                  2048: 1,474 / 1,577, 615 / 1,501     4096: 2,951 / 3,104, 1,183 / 2,922
 *   bf16 16 heads   256: 266 / 168, 117 / 124     512: 279 / 325, 128 / 246     1024: 546 / 647, 248 / 496
 *                  2048: 1,146 / 1,288, 484 / 1,019     4096: 2,311 / 2,606, 946 / 2,012
 *   FP8 8 heads    1024: 716 / 773, 266 / 717     2048: 1,427 / 1,539, 514 / 1,460
 *   bf16 8 heads   1024: 556 / 631, 225 / 471     2048: 1,130 / 1,268, 429 / 927
 * Even with distinct rows their CTAs' sweep in slot order keeps L2 hits at 75 % (rows_as_m 31 %, ncu,
 * 4096 tokens). Where no rows are shared and each token reads its own context — decode batches, each
 * request over its own 8k (attn-token-groups-crossover-h100-2026-12-06/, before the union's sort took
 * only the slots' bits) — they took 1.04-1.11x the time of the kernels below at 512 requests x 16 heads
 * and 1024 x 8 (FP8 16 heads at 1024: 800 / 834 after it), up to 1.23x at 2048. At 32 heads (groups of
 * two) only decode batches were measured, 1.1-1.23x at 1024-2048: heads_as_m there.
 * Since rows_as_m's 16-head FP8 CTAs take their rows through a staging buffer (H100, 2026-12-06,
 * docs/bench/attn-rows-as-m-staged-h100-2026-12-06/), the FP8 4096 x 16-head chunk is 2,589 / 2,503 on
 * rows_as_m against 2,975 / 1,214 on token groups: 15 % slower with distinct rows, 2.1x faster with
 * shared ones. Kept for chunks, whose neighbouring tokens share rows; FP8 decode batches of 512 and more
 * requests over their own contexts probably lose more than the figures above now (not re-measured). */
#define TOKEN_GROUPS_MIN_ROWS (128 * 64) /* tokens x heads: 128 groups of 64 (token, head) rows */

/* Each cache slot read at least min_reads times by the call (tokens x topk x head groups), and packed
 * FP8 rows small enough to convert first (below). */
static int attention_rows_read(const dsa_sparse_mla_args *a, int min_reads) {
  const int64_t slots = a->num_slots < DSA_ATTN_SLOTS_CAP ? a->num_slots : DSA_ATTN_SLOTS_CAP;
  const int64_t reads = (int64_t)a->num_tokens * a->topk * ((a->num_heads + 63) / 64);
  return slots > 0 && reads >= min_reads * slots &&
         (a->kv_format != DSA_KV_FP8_PACKED || dsa_plan_attention_rows_bytes(a) <= DSA_CONVERT_WORKSPACE_CAP);
}

/* Packed FP8 rows too many to convert whole, but few enough slots for the selection's bitmap. */
static int attention_select_rows(const dsa_sparse_mla_args *a) {
  return a->kv_format == DSA_KV_FP8_PACKED && dsa_plan_attention_rows_bytes(a) > DSA_CONVERT_WORKSPACE_CAP &&
         a->num_slots <= DSA_SELECT_MAX_SLOTS;
}
/* ... and a call with entries enough (tokens x topk x head groups) for the selection to pay. */
static int attention_select_pays(const dsa_sparse_mla_args *a) {
  return attention_select_rows(a) &&
         (int64_t)a->num_tokens * a->topk * ((a->num_heads + 63) / 64) >= SELECT_MIN_READS;
}

int dsa_choose_attention(const dsa_sparse_mla_args *a, int token_groups) {
  const int forced = override_get()->attention;
  if (forced) return forced;
  if (token_groups && (a->num_heads == 8 || a->num_heads == 16) &&
      (int64_t)a->num_tokens * a->num_heads >= TOKEN_GROUPS_MIN_ROWS)
    return DSA_ATTN_TOKEN_GROUPS;
  const int bf16 = a->kv_format == DSA_KV_BF16;
  /* heads_as_m: decode 128 x 128 heads FP8 221.6 us (mma_split 514), 256 x 64 233.6; prefill
   * 4096 x 128 heads 6.34 ms (mma_split 15.5) */
  const int64_t units = (int64_t)a->num_tokens * ((a->num_heads + 63) / 64);
  if (a->num_heads >= HEADS_AS_M_MIN_HEADS && units >= (bf16 ? HEADS_AS_M_MIN_UNITS : HEADS_AS_M_MIN_UNITS_FP8))
    return token_groups && (attention_rows_read(a, bf16 ? SEESAW_MIN_READS : SEESAW_MIN_READS_FP8) ||
                            attention_select_pays(a))
               ? DSA_ATTN_SEESAW
               : DSA_ATTN_HEADS_AS_M;
  const int64_t t = a->num_tokens;
  if (a->num_heads >= WIDE_HEADS) /* 17 to 32 heads (more have fewer than 6 tokens here: mma_split) */
    return t >= (bf16 ? BF16_WIDE_HEADS_AS_M_TOKENS : FP8_WIDE_HEADS_AS_M_TOKENS) ? DSA_ATTN_HEADS_AS_M
                                                                                  : DSA_ATTN_MMA_SPLIT;
  if (bf16) return t >= HEADS_AS_M_TOKENS ? DSA_ATTN_HEADS_AS_M : DSA_ATTN_MMA_SPLIT;
  /* rows_as_m: also GLM's 4096-token chunk at 16 heads (128k), FP8, 3.06 ms against mma_split's 4.26
   * (heads_as_m 3.16, H200) */
  if (t >= ROWS_AS_M_TOKENS) return DSA_ATTN_ROWS_AS_M;
  /* mma_split: one token and small batches (decode 1 token x 16 / 64 / 128 heads 11.4 / 13.6 /
   * 17.2 us, the index list split over CTAs and combined) */
  return DSA_ATTN_MMA_SPLIT;
}

/* Packed FP8 rows converted first: the seesaw always, heads_as_m and token groups over rows read
 * CONVERT_MIN_READS times a slot or more (above). */
int dsa_choose_attention_convert(const dsa_sparse_mla_args *a, int kernel) {
  if (a->kv_format != DSA_KV_FP8_PACKED) return 0;
  /* the seesaw's consumers hold the registers a converting producer needs: over a cache too large to convert
   * whole, the rows the call selects (2) */
  if (kernel == DSA_ATTN_SEESAW) return attention_select_rows(a) ? 2 : 1;
  if (kernel != DSA_ATTN_HEADS_AS_M && kernel != DSA_ATTN_TOKEN_GROUPS) return 0;
  /* token groups over an engine's pool: the rows the call selects (2), from SELECT_MIN_READS entries as the
   * seesaw's, or always where DSA_KERNEL forces token groups (as it does the seesaw: so the tests reach it);
   * at 8 and 16 heads, where they are chosen and tested (32, forced only, runs unconverted) */
  if (kernel == DSA_ATTN_TOKEN_GROUPS && (a->num_heads == 8 || a->num_heads == 16) &&
      (attention_select_pays(a) || (override_get()->attention == DSA_ATTN_TOKEN_GROUPS && attention_select_rows(a))))
    return 2;
  return attention_rows_read(a, CONVERT_MIN_READS);
}

/* ---- context parallelism: the merge of the ranks' candidate lists (dsa_topk_merge) ------------ */

/* tree (one 1,024-thread CTA a row, the candidates in registers, the runs merged pairwise) takes any
 * lists and wins nearly everywhere; runs (a cluster of C = ceil(n / 2048) CTAs a row, at most
 * DSA_MERGE_RUNS_MAX_LISTS lists) only where a row holds seven slices or more (tree's one SM then runs
 * the longer path) and all the rows' clusters fit one wave; select (one CTA a row, 8-bit passes over
 * composites, the ids bitonic-sorted) only where forced. Measured (dsa-bench merge --check, H100,
 * 2026-12-05, us, graph replays; tree / runs / select; docs/bench/merge-tree-h100-2026-12-05.json):
 *   1 token       W = 2 / 4 / 8:  13.8 / 16.6 / 20.4   15.5 / 17.2 / 25.3   18.8 / 17.3 / 32.1
 *   64 tokens     W = 2 / 4 / 8:  14.1 / 17.2 / 21.7   15.7 / 31.1 / 25.4   21.1 / 48.8 / 32.3
 *   4096 tokens   W = 2 / 4 / 8:  348 / 501 / 607      408 / 1102 / 755     530 / 2244 / 1029
 * The same on the H200 (merge-tree-h200-2026-12-05.json), which confirms each choice:
 *   1 token       W = 2 / 4 / 8:  13.6 / 14.4 / 20.2   15.1 / 15.1 / 25.0   18.5 / 15.3 / 31.8
 *   64 tokens     W = 2 / 4 / 8:  13.8 / 15.0 / 21.5   15.4 / 28.1 / 25.2   20.9 / 44.7 / 32.1
 *   4096 tokens   W = 2 / 4 / 8:  348 / 464 / 604      406 / 1024 / 748     527 / 2067 / 1017
 * ncu, one token x 8 lists (H100): tree 2,470 instructions a warp at 0.6 issued a scheduler-cycle
 * (issue-bound on its one SM), runs 7,700 a CTA-warp over 8 SMs at 0.3 (latency-bound). */
#define MERGE_RUNS_WAVE 132 /* the H100's and H200's SMs */
#define MERGE_RUNS_MIN_SLICES 7 /* W = 8 at one token: runs 17.3 us, tree 18.8; W = 4: tree ahead */
int dsa_choose_merge(const dsa_topk_merge_args *a) {
  const int forced = override_get()->merge;
  const int64_t c = ((int64_t)a->num_lists * a->k_in + DSA_MERGE_RUNS_SLICE - 1) / DSA_MERGE_RUNS_SLICE;
  const int64_t ctas = (int64_t)a->num_rows * c;
  const int runs_can = a->num_lists <= DSA_MERGE_RUNS_MAX_LISTS && ctas <= 0x7fffffff;
  if (forced == DSA_MERGE_SELECT) return DSA_MERGE_SELECT;
  if (forced == DSA_MERGE_TREE || !runs_can) return DSA_MERGE_TREE;
  if (forced == DSA_MERGE_RUNS || (c >= MERGE_RUNS_MIN_SLICES && ctas <= MERGE_RUNS_WAVE))
    return DSA_MERGE_RUNS;
  return DSA_MERGE_TREE;
}
