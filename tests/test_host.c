/*
 * test_host.c — the host layer's chunk loops and device handling, run on the CPU: linked with the
 * stub launchers (tests/support/stub_kernels.c), which check every launch's preconditions and
 * record the launches. Regression tests for the bad-input hardening issue:
 *   - counts near INT_MAX: every chunk loop returns and covers every token once (the loops
 *     counted in int and wrapped: dsa_indexer_prefill_scores with num_tokens = INT_MAX never
 *     returned);
 *   - the attention split plan follows the current device's SM count (it was a compile-time 132);
 *   - each stage's kernel choice table (host/choose.c) and the DSA_KERNEL override, its parse
 *     errors included;
 *   - no device, a non-sm_90 device and a failing launch come back as clear statuses.
 * A watchdog fails the run if a call does not return within 60 s.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsa.h"
#include "host/choose.h"
#include "kernels.h"
#include "stub_kernels.h"

static int g_pass, g_fail;

#define FAKE(addr) ((void *)(uintptr_t)(addr))

static void check(int ok, const char *name, const char *fmt_detail, long long a, long long b) {
  if (ok) {
    g_pass++;
    printf("ok   %s\n", name);
  } else {
    g_fail++;
    printf("FAIL %s: ", name);
    printf(fmt_detail, a, b);
    printf(" (status message: \"%s\"; stub: \"%s\")\n", dsa_last_error(), g_dsa_stub.first_violation);
  }
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL test_host: a call did not return within 60 s (hang)\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(1);
}

static dsa_indexer_query query(void) {
  dsa_indexer_query q;
  memset(&q, 0, sizeof q);
  q.q = FAKE(0x100000000ull);
  q.q_dtype = DSA_DTYPE_BF16;
  q.weights = FAKE(0x200000000ull);
  q.weights_dtype = DSA_DTYPE_F32;
  q.weights_stride = 32;
  q.num_heads = 32;
  q.head_dim = 128;
  q.softmax_scale = 0.0625f;
  return q;
}

static dsa_index_k_cache cache(void) {
  dsa_index_k_cache c = {FAKE(0x300000000ull), 1000, 64};
  return c;
}

static dsa_index_k_store_args kstore(int num_tokens) {
  dsa_index_k_store_args ks;
  memset(&ks, 0, sizeof ks);
  ks.k = FAKE(0x100000000ull);
  ks.k_stride = 128;
  ks.slot_mapping = FAKE(0x200000000ull);
  ks.num_tokens = num_tokens;
  ks.cache = FAKE(0x300000000ull);
  ks.num_pages = 10;
  ks.page_size = 64;
  return ks;
}

/* Counts near INT_MAX: the chunk loops end, and cover every token exactly once. */
static void test_int_max_loops(void) {
  g_dsa_stub.launch_budget = 0; /* unlimited: the loops must end on their own */

  dsa_indexer_prefill_scores_args ps;
  memset(&ps, 0, sizeof ps);
  ps.prefill.query = query();
  ps.prefill.cache = cache();
  ps.prefill.kv_workspace_slots = FAKE(0x400000000ull);
  ps.prefill.num_workspace_rows = 100;
  ps.prefill.row_starts = FAKE(0x500000000ull);
  ps.prefill.row_ends = FAKE(0x600000000ull);
  ps.prefill.num_tokens = INT32_MAX;
  ps.prefill.topk = 2048;
  ps.scores = FAKE(0x700000000ull);
  ps.scores_stride = 100;
  dsa_stub_begin_call(NULL, 0);
  dsa_status st = dsa_indexer_prefill_scores(&ps, 0);
  check(st == DSA_OK && g_dsa_stub.violations == 0, "prefill scores, INT_MAX tokens: returns DSA_OK",
        "status %lld, violations %lld", st, g_dsa_stub.violations);
  check(g_dsa_stub.scores_tokens == INT32_MAX, "prefill scores, INT_MAX tokens: every token scored once",
        "covered %lld of %lld", g_dsa_stub.scores_tokens, INT32_MAX);

  dsa_indexer_decode_scores_args ds;
  memset(&ds, 0, sizeof ds);
  ds.decode.query = query();
  ds.decode.cache = cache();
  ds.decode.seq_lens = FAKE(0x400000000ull);
  ds.decode.block_table = FAKE(0x500000000ull);
  ds.decode.block_table_stride = 4;
  ds.decode.max_blocks_per_req = 4;
  ds.decode.q_len_per_req = 7;
  ds.decode.num_reqs = INT32_MAX / 7;
  ds.decode.topk = 64;
  ds.scores = FAKE(0x800000000ull);
  ds.scores_stride = 256;
  dsa_stub_begin_call(NULL, 0);
  st = dsa_indexer_decode_scores(&ds, 0);
  check(st == DSA_OK && g_dsa_stub.scores_tokens == (int64_t)(INT32_MAX / 7) * 7,
        "decode scores, n = 7, INT_MAX / 7 requests: returns, every token once", "status %lld, covered %lld", st,
        g_dsa_stub.scores_tokens);

  dsa_topk_args tk;
  memset(&tk, 0, sizeof tk);
  tk.scores = FAKE(0x100000000ull);
  tk.scores_stride = 16;
  tk.num_rows = INT32_MAX;
  tk.max_len = 16;
  tk.topk = 8;
  tk.indices = FAKE(0x200000000ull);
  size_t ws_bytes = 0;
  dsa_topk_workspace_size(&tk, &ws_bytes);
  dsa_stub_begin_call(FAKE(0x100000000000ull), ws_bytes);
  st = dsa_topk(&tk, FAKE(0x100000000000ull), ws_bytes, 0);
  check(st == DSA_OK && g_dsa_stub.topk_tokens == INT32_MAX, "dsa_topk, INT_MAX rows: returns, every row once",
        "status %lld, covered %lld", st, g_dsa_stub.topk_tokens);

  dsa_indexer_decode_args d;
  memset(&d, 0, sizeof d);
  d = ds.decode;
  d.q_len_per_req = 1;
  d.num_reqs = INT32_MAX;
  d.max_blocks_per_req = 64; /* 4096 positions > topk: scores + top-k per chunk */
  d.block_table_stride = 64;
  d.topk = 2048;
  d.topk_indices = FAKE(0xa00000000ull);
  dsa_indexer_decode_workspace_size(&d, &ws_bytes);
  dsa_stub_begin_call(FAKE(0xb00000000ull), ws_bytes);
  st = dsa_indexer_decode(&d, FAKE(0xb00000000ull), ws_bytes, 0);
  check(st == DSA_OK && g_dsa_stub.topk_tokens == INT32_MAX && g_dsa_stub.scores_tokens == INT32_MAX,
        "indexer decode, INT_MAX requests: returns, every token scored and selected once", "status %lld, covered %lld",
        st, g_dsa_stub.topk_tokens);

  const dsa_index_k_store_args ks = kstore(INT32_MAX);
  dsa_stub_begin_call(NULL, 0);
  st = dsa_index_k_store(&ks, 0);
  check(st == DSA_OK && g_dsa_stub.store_tokens == INT32_MAX, "index-K store, INT_MAX tokens: accepted, one launch",
        "status %lld, tokens %lld", st, g_dsa_stub.store_tokens);
}

/* The indexer's workspace: the fastest plan without a limit (<= 256 MiB of scores + 256 tokens' top-k
 * scratch, dsa.h) and within workspace_limit = 64 MiB at the shapes that need the most — 4096
 * prefill tokens against 1M rows (265 MiB unlimited), 64 decode requests at 1M, MTP 8 at 1M,
 * one-CTA rows — and a call within either covers every token once (the stub launchers check each
 * launch's order, rows and workspace bounds, deferred chunks and finals too). */
static void indexer_workspace_cap(size_t limit);
static void test_indexer_workspace_cap(void) {
  for (int lim = 0; lim < 2; ++lim)
    indexer_workspace_cap(lim ? (size_t)64 << 20 : 0);
}

/* A prefill call of `tokens` tokens against `rows` workspace rows (max_rows = rows when given), topk
 * 2048, on fake pointers. */
static dsa_indexer_prefill_args prefill_call(int tokens, int rows, int max_rows, int fp8, size_t limit) {
  dsa_indexer_prefill_args a;
  memset(&a, 0, sizeof a);
  a.query = query();
  if (fp8) {
    a.query.q_dtype = DSA_DTYPE_FP8_E4M3;
    a.query.q_scale = FAKE(0x900000000ull);
  }
  a.cache = cache();
  a.kv_workspace_slots = FAKE(0x400000000ull);
  a.num_workspace_rows = rows;
  a.max_rows = max_rows;
  a.row_starts = FAKE(0x500000000ull);
  a.row_ends = FAKE(0x600000000ull);
  a.num_tokens = tokens;
  a.topk = 2048;
  a.topk_indices = FAKE(0x700000000ull);
  a.workspace_limit = limit;
  return a;
}

static void indexer_workspace_cap(size_t limit) {
  const size_t cap = limit ? limit : (size_t)(256 + 40) << 20; /* scores + 256 tokens' ~144 KiB */
  g_dsa_stub.launch_budget = 0;
  const int prefill_rows[] = {1 << 20, 131072, 40960, 40961};
  for (int i = 0; i < 4; ++i) {
    dsa_indexer_prefill_args a = prefill_call(4096, prefill_rows[i] + 4096, prefill_rows[i], 0, limit);
    size_t bytes = 0;
    dsa_status st = dsa_indexer_prefill_workspace_size(&a, &bytes);
    check(st == DSA_OK && bytes <= cap,
          limit ? "prefill 4096 tokens, 64 MiB limit: workspace within it" : "prefill 4096 tokens: workspace <= 296 MiB",
          "rows %lld: %lld bytes", prefill_rows[i], (long long)bytes);
    dsa_stub_begin_call(FAKE(0x100000000000ull), bytes);
    st = dsa_indexer_prefill(&a, FAKE(0x100000000000ull), bytes, 0);
    check(st == DSA_OK && g_dsa_stub.violations == 0, "prefill 4096 tokens: launches within the workspace",
          "rows %lld: status %lld", prefill_rows[i], st);
    check(g_dsa_stub.topk_tokens == 4096 && g_dsa_stub.scores_tokens == 4096,
          "prefill 4096 tokens: every token scored and selected once", "selected %lld, scored %lld",
          g_dsa_stub.topk_tokens, g_dsa_stub.scores_tokens);
  }
  /* FP8 q, forced onto the fused prefill indexer: within 64 MiB by default (DSA_PREFILL_FUSED_BUDGET)
   * and within the limit, rows long (sampled) or not; by the table: fused only under a limit its
   * separate plan passes, at 1M */
  const int fused_rows[] = {1 << 20, 131072, 40000, 3000};
  for (int i = 0; i < 4; ++i) {
    const dsa_indexer_prefill_args a = prefill_call(4096, fused_rows[i] + 4096, fused_rows[i], 1, limit);
    for (int forced = 0; forced < 2; ++forced) {
      dsa_choose_override(forced ? "indexer:fused" : NULL);
      size_t bytes = 0;
      dsa_status st = dsa_indexer_prefill_workspace_size(&a, &bytes);
      check(st == DSA_OK && bytes <= (forced ? (size_t)64 << 20 : cap),
            forced ? (limit ? "fused prefill 4096 tokens, 64 MiB limit: workspace within it"
                            : "fused prefill 4096 tokens: default workspace <= 64 MiB")
                   : (limit ? "FP8 prefill 4096 tokens, 64 MiB limit: workspace within it"
                            : "FP8 prefill 4096 tokens: workspace <= 296 MiB"),
            "rows %lld: %lld bytes", fused_rows[i], (long long)bytes);
      dsa_stub_begin_call(FAKE(0x100000000000ull), bytes);
      st = dsa_indexer_prefill(&a, FAKE(0x100000000000ull), bytes, 0);
      const int want_fused = forced || (limit && fused_rows[i] >= (1 << 20));
      check(st == DSA_OK && g_dsa_stub.violations == 0 &&
                (want_fused ? g_dsa_stub.fused_launches == g_dsa_stub.launches : g_dsa_stub.fused_launches == 0) &&
                g_dsa_stub.topk_tokens == 4096 && g_dsa_stub.scores_tokens == 4096,
            forced ? "fused prefill 4096 tokens: every token scored and selected once within the workspace"
                   : "FP8 prefill 4096 tokens: fused only under a limit at 1M; every token scored and selected once",
            "rows %lld: status / selected %lld", fused_rows[i], st ? -(long long)st : g_dsa_stub.topk_tokens);
    }
    dsa_choose_override(NULL);
  }
  /* a small limit: chunks of fewer tokens (one at least), each within it */
  {
    /* 3 MiB: below the separate plan's 148 MiB, at 1M: fused */
    const dsa_indexer_prefill_args a = prefill_call(37, 1 << 20, 0, 1, (size_t)3 << 20);
    size_t bytes = 0;
    dsa_status st = dsa_indexer_prefill_workspace_size(&a, &bytes);
    dsa_stub_begin_call(FAKE(0x100000000000ull), bytes);
    st = st ? st : dsa_indexer_prefill(&a, FAKE(0x100000000000ull), bytes, 0);
    check(st == DSA_OK && bytes <= a.workspace_limit && g_dsa_stub.violations == 0 && g_dsa_stub.launches > 1 &&
              g_dsa_stub.topk_tokens == 37,
          "fused prefill 37 tokens at 1M, 3 MiB limit: chunks within it", "%lld bytes, %lld launches",
          (long long)bytes, g_dsa_stub.launches);
  }
  const int mtp[] = {1, 8, 3};
  for (int i = 0; i < 3; ++i) {
    dsa_indexer_decode_args d;
    memset(&d, 0, sizeof d);
    d.query = query();
    d.cache = cache();
    d.seq_lens = FAKE(0x400000000ull);
    d.block_table = FAKE(0x500000000ull);
    d.block_table_stride = 16384;
    d.max_blocks_per_req = 16384; /* 1M positions */
    d.q_len_per_req = mtp[i];
    d.num_reqs = 64;
    d.topk = 2048;
    d.topk_indices = FAKE(0xa00000000ull);
    d.workspace_limit = limit;
    size_t bytes = 0;
    dsa_status st = dsa_indexer_decode_workspace_size(&d, &bytes);
    check(st == DSA_OK && bytes <= cap,
          limit ? "decode 64 requests at 1M, 64 MiB limit: workspace within it" : "decode 64 requests at 1M: workspace <= 296 MiB",
          "MTP %lld: %lld bytes", mtp[i], (long long)bytes);
    dsa_stub_begin_call(FAKE(0xb00000000ull), bytes);
    st = dsa_indexer_decode(&d, FAKE(0xb00000000ull), bytes, 0);
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.topk_tokens == 64 * mtp[i],
          "decode 64 requests at 1M: every token selected once within the workspace", "MTP %lld: selected %lld",
          mtp[i], g_dsa_stub.topk_tokens);
  }
}

/* A valid attention call on fake device pointers (the stub launchers never touch them). */
static dsa_sparse_mla_args mla_args(int tokens, int heads, dsa_kv_format fmt) {
  dsa_sparse_mla_args a;
  memset(&a, 0, sizeof a);
  a.q = FAKE(0x100000000ull);
  a.num_tokens = tokens;
  a.num_heads = heads;
  a.kv_cache = FAKE(0x200000000ull);
  a.kv_format = fmt;
  a.num_slots = 1 << 20;
  a.kv_stride = 576;
  a.indices = FAKE(0x300000000ull);
  a.indices_stride = 2048;
  a.topk = 2048;
  a.softmax_scale = 0.0625f;
  a.out = FAKE(0x400000000ull);
  return a;
}

/* dsa_sparse_mla through the stub launchers on `sms` SMs with the workspace its query reports
 * (returned in *bound); the plan it launched is in g_dsa_stub. */
static dsa_status mla_call(const dsa_sparse_mla_args *a, int sms, size_t *bound) {
  *bound = 0;
  dsa_sparse_mla_workspace_size(a, bound);
  g_dsa_stub.num_sms = sms;
  dsa_stub_begin_call(FAKE(0x100000000000ull), *bound);
  return dsa_sparse_mla(a, FAKE(0x100000000000ull), *bound, 0);
}

/* The workspace of the seesaw over the packed FP8 rows a call selects (host/plan.h's dsa_select_layout,
 * written out): 229,376 rows of 1152 B and their factors, the bitmap of the slots (4 B a word of 32 slots),
 * its words with their rows (8 B a word), the blocks' prefixes (4 B a 1024 words), 256 B of control, each
 * row's slot (4 B a row), the entries rewritten (4 B each); each part 256-byte aligned. */
static size_t select_bytes(int64_t slots, int tokens, int topk) {
  const size_t words = (size_t)((slots + 31) / 32), blocks = (words + 1023) / 1024;
  const size_t a256 = 255;
  return 229376u * 1152u + 229376u * 4u + ((words * 4 + a256) & ~a256) + ((words * 8 + a256) & ~a256) +
         ((blocks * 4 + a256) & ~a256) + 256 + 229376u * 4u + (((size_t)tokens * topk * 4 + a256) & ~a256);
}

/* The attention split plan is made for the current device's SM count. */
static void test_sm_count(void) {
  /* mma_split with 1 token, rows_as_m with 64 tokens x 16 heads (each forced through DSA_KERNEL) */
  for (int kernel = 1; kernel >= 0; kernel--) {
    dsa_choose_override(kernel == 1 ? "attention:mma_split" : "attention:rows_as_m");
    const dsa_sparse_mla_args a = mla_args(kernel == 1 ? 1 : 64, 16, DSA_KV_FP8_PACKED);
    int splits[3];
    const int sms[3] = {132, 78, 16};
    for (int i = 0; i < 3; i++) {
      size_t bound;
      const dsa_status st = mla_call(&a, sms[i], &bound);
      splits[i] = g_dsa_stub.mla_splits;
      char name[128];
      snprintf(name, sizeof name, "attention plan (%s) on %d SMs fits the queried workspace",
               kernel == 1 ? "mma_split" : "rows_as_m", sms[i]);
      check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.mla_need <= bound, name,
            "status %lld, need %lld", st, (long long)g_dsa_stub.mla_need);
    }
    if (kernel == 1)
      /* 1 token x 16 heads, 32 blocks: one wave of 32 splits on 132 SMs; on 16 SMs, 16 splits of 2
       * blocks (one wave) beat 32 splits (two waves). */
      check(splits[0] == 32 && splits[2] == 16, "mma_split attention splits follow the SM count (132 -> 32, 16 -> 16)",
            "got %lld and %lld", splits[0], splits[2]);
    else
      /* 64 tokens x 16 heads: clusters of 2 fill 132 SMs in one wave; on 16 SMs no split pays */
      check(splits[0] == 2 && splits[2] == 1, "rows_as_m attention splits follow the SM count (132 -> 2, 16 -> 1)",
            "got %lld and %lld", splits[0], splits[2]);
  }
  dsa_choose_override(NULL);
  g_dsa_stub.num_sms = 132;
}

/* Which attention kernel a call runs: the per-shape choice (token_groups at 8 and 16 heads once tokens x
 * heads >= 8192; heads_as_m for > 32 heads once tokens x ceil(heads / 64) >= 6 on packed FP8 KV, 8 on
 * bf16; at 17 to 32 heads from 16 tokens; at <= 16 heads on bf16 from 20; rows_as_m for packed FP8 at
 * <= 16 heads from 20 tokens; else mma_split), DSA_KERNEL overriding it; rows_as_m and heads_as_m plans
 * take no workspace (rows_as_m even when it splits). The device is an H100 SXM's: 132 SMs, clusters of
 * 4 and 8 keeping 120 CTAs (c4 overrides the 4s: the choice does not depend on it). Kernels by their dsa_attention_kernel:
 * 1 mma_split, 2 rows_as_m, 3 heads_as_m, 4 seesaw (bf16 4096 x 128 heads over the 1M slots: 16 reads a
 * slot; FP8 4096 x 64 heads there: 8M entries, the rows it selects converted; test_mla_convert_choice has
 * the rules), 5 token_groups. */
static void test_mla_kernel_choice(void) {
  static const struct {
    int tokens, heads, fp8, sms, want, c4;
  } cases[] = {
      {64, 16, 1, 132, 2},  {32, 64, 1, 132, 3},  {5, 64, 1, 132, 1},   {6, 64, 1, 132, 3},
      {7, 64, 1, 132, 3},   {8, 64, 1, 132, 3},   {64, 64, 1, 132, 3},  {64, 64, 0, 132, 3},
      {1, 16, 1, 132, 1},   {19, 16, 1, 132, 1},  {20, 16, 1, 132, 2},  {23, 16, 1, 132, 2},
      {32, 16, 1, 132, 2},  {2, 128, 1, 132, 1},  {3, 128, 1, 132, 3},  {4, 128, 1, 132, 3},
      {30, 128, 1, 132, 3}, {256, 64, 1, 132, 3}, {4096, 128, 0, 132, 4}, {264, 32, 1, 132, 3},
      {265, 32, 1, 132, 3}, {1000, 32, 0, 132, 3}, {64, 16, 0, 132, 3}, {64, 16, 1, 16, 2},
      {8, 64, 1, 16, 3},    {1, 128, 0, 132, 1},  {7, 64, 0, 132, 1},   {8, 64, 0, 132, 3},
      {3, 128, 0, 132, 1},  {4, 128, 0, 132, 3},  {4096, 16, 1, 132, 5}, {4096, 8, 1, 132, 5},
      {4096, 16, 0, 132, 5}, {19, 16, 0, 132, 1}, {20, 16, 0, 132, 3},  {19, 8, 0, 132, 1},
      {4096, 8, 0, 132, 5}, {15, 32, 0, 132, 1},  {16, 32, 0, 132, 3},  {16, 17, 0, 132, 3},
      {16, 16, 0, 132, 1},  {1, 32, 0, 132, 1},   {24, 16, 1, 132, 2},  {30, 16, 1, 132, 2},
      {33, 16, 1, 132, 2},  {34, 16, 1, 132, 2},  {39, 16, 1, 132, 2},  {30, 8, 1, 132, 2},
      {32, 8, 1, 132, 2},   {19, 8, 1, 132, 1},   {15, 32, 1, 132, 1},  {16, 32, 1, 132, 3},
      {19, 32, 1, 132, 3},  {16, 17, 1, 132, 3},  {512, 32, 1, 132, 3}, {40, 1, 1, 132, 2},
      {24, 1, 1, 132, 2},   {32, 16, 1, 132, 2, 128}, {24, 16, 1, 132, 2, 66}, {20, 16, 1, 132, 2, 30},
      /* token groups at 16 heads from 512 tokens, at 8 from 1024 (src/host/choose.c says why) */
      {511, 16, 1, 132, 2}, {512, 16, 1, 132, 5}, {511, 16, 0, 132, 3}, {512, 16, 0, 132, 5},
      {1023, 8, 1, 132, 2}, {1024, 8, 1, 132, 5}, {1023, 8, 0, 132, 3}, {1024, 8, 0, 132, 5},
      {4095, 16, 1, 132, 5}, {2048, 16, 1, 132, 5}, {5000, 16, 0, 132, 5}, {1000, 32, 1, 132, 3},
      {8192, 8, 1, 132, 5}, {65536, 16, 1, 132, 5}, {4096, 32, 1, 132, 3}, {4096, 32, 0, 132, 3},
      {4096, 12, 1, 132, 2}, {4096, 64, 1, 132, 4}, {4096, 4, 0, 132, 3}, {2048, 1, 1, 132, 2},
  };
  dsa_choose_override(NULL);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const dsa_sparse_mla_args a =
        mla_args(cases[i].tokens, cases[i].heads, cases[i].fp8 ? DSA_KV_FP8_PACKED : DSA_KV_BF16);
    const int c4 = cases[i].c4 ? cases[i].c4 : 120;
    g_dsa_stub.cluster_ctas[2] = cases[i].sms;
    g_dsa_stub.cluster_ctas[4] = c4 < cases[i].sms ? c4 : cases[i].sms;
    g_dsa_stub.cluster_ctas[8] = 120 < cases[i].sms ? 120 : cases[i].sms;
    size_t bound;
    const dsa_status st = mla_call(&a, cases[i].sms, &bound);
    char name[200];
    static const char *const kname[6] = {"?", "mma_split", "rows_as_m", "heads_as_m", "seesaw", "token_groups"};
    snprintf(name, sizeof name,
             "attention kernel for %d tokens x %d heads, %s KV, %d SMs, clusters of 4 keeping %d CTAs: %s",
             cases[i].tokens, cases[i].heads, cases[i].fp8 ? "FP8" : "bf16", cases[i].sms, g_dsa_stub.cluster_ctas[4],
             kname[cases[i].want]);
    const int got = g_dsa_stub.mla_kernel;
    check(st == DSA_OK && g_dsa_stub.violations == 0 && got == cases[i].want, name, "status %lld, got kernel %lld",
          st, got);
  }
  memset(g_dsa_stub.cluster_ctas, 0, sizeof g_dsa_stub.cluster_ctas);
  /* token groups chosen by the table need their unions in the workspace: given less than the query
   * reports, the call runs the kernel the table picks without them (which needs none) and succeeds;
   * forced by DSA_KERNEL, too small a workspace is an error — except that forced over packed FP8 in a pool
   * they first convert the rows the call selects, and a byte short of those they run unconverted */
  static const struct {
    int tokens, heads, fp8, fallback;
  } fb[] = {{4096, 16, 1, DSA_ATTN_ROWS_AS_M}, {512, 16, 0, DSA_ATTN_HEADS_AS_M}, {1024, 8, 1, DSA_ATTN_ROWS_AS_M}};
  for (size_t i = 0; i < sizeof fb / sizeof fb[0]; i++) {
    const dsa_sparse_mla_args b = mla_args(fb[i].tokens, fb[i].heads, fb[i].fp8 ? DSA_KV_FP8_PACKED : DSA_KV_BF16);
    for (int forced = 0; forced <= 1; forced++) {
      dsa_choose_override(forced ? "attention:token_groups" : NULL);
      size_t bound = 0;
      dsa_sparse_mla_workspace_size(&b, &bound);
      const size_t given[3] = {0, bound - 1, bound};
      for (int k = 0; k < 3; k++) {
        g_dsa_stub.num_sms = 132;
        dsa_stub_begin_call(FAKE(0x100000000000ull), given[k]);
        const dsa_status st = dsa_sparse_mla(&b, given[k] ? FAKE(0x100000000000ull) : NULL, given[k], 0);
        /* FP8 over this pool selecting rows (forced, or from 2^23 entries): a byte short, unconverted */
        const int sel = fb[i].fp8 && (forced || (int64_t)fb[i].tokens * b.topk >= (1 << 23));
        const int want_tg = k == 2 || (k == 1 && sel);
        char name[200];
        snprintf(name, sizeof name, "%d tokens x %d heads, %s KV, token groups %s, %s workspace (%zu of %zu bytes): %s",
                 fb[i].tokens, fb[i].heads, fb[i].fp8 ? "FP8" : "bf16", forced ? "forced" : "chosen",
                 k == 0 ? "no" : k == 1 ? "too small a" : "the queried", given[k], bound,
                 want_tg ? "token groups" : forced ? "DSA_ERR_WORKSPACE_TOO_SMALL" : "the fallback");
        const int ok = want_tg ? st == DSA_OK && g_dsa_stub.mla_kernel == DSA_ATTN_TOKEN_GROUPS &&
                                     g_dsa_stub.mla_convert == (k == 2 && sel ? 2 : 0)
                       : forced ? st == DSA_ERR_WORKSPACE_TOO_SMALL
                                : st == DSA_OK && g_dsa_stub.mla_kernel == fb[i].fallback && g_dsa_stub.mla_need == 0;
        check(ok && g_dsa_stub.violations == 0 && bound > 0, name, "status %lld, kernel %lld", st,
              g_dsa_stub.mla_kernel);
      }
    }
  }
  dsa_choose_override(NULL);
  /* overrides, and no workspace for a split rows_as_m or heads_as_m plan (1 token x 16 heads:
   * clusters of 8) */
  const dsa_sparse_mla_args a = mla_args(1, 16, DSA_KV_FP8_PACKED);
  static const char *const specs[3] = {"attention:mma_split", "attention:rows_as_m", "attention:heads_as_m"};
  static const char *const names[3] = {
      "DSA_KERNEL=attention:mma_split forces mma_split (split partials in the workspace)",
      "DSA_KERNEL=attention:rows_as_m forces rows_as_m (a cluster of splits, no workspace)",
      "DSA_KERNEL=attention:heads_as_m forces heads_as_m (a cluster of splits, no workspace)"};
  for (int v = 1; v <= 3; v++) {
    dsa_choose_override(specs[v - 1]);
    size_t bound;
    const dsa_status st = mla_call(&a, 132, &bound);
    const int got = g_dsa_stub.mla_kernel;
    check(st == DSA_OK && got == v && (v == 1 || g_dsa_stub.mla_splits == 8) && (v == 1) == (g_dsa_stub.mla_need > 0),
          names[v - 1], "got kernel %lld, splits %lld", got, g_dsa_stub.mla_splits);
  }
  /* seesaw: heads_as_m's plan (CTAs of 64 heads, a cluster of splits below a wave); no workspace for
   * bf16 KV; for packed FP8 the rows converted first, over these 1M slots (1.2 GB of rows) only the ones
   * the call selects (select_bytes) — the size query reports them too */
  static const struct {
    int tokens, heads, fp8, splits;
  } ss[] = {{64, 128, 0, 1}, {1, 16, 0, 8}, {8, 64, 0, 8}, {64, 128, 1, 1}, {1, 16, 1, 8}};
  dsa_choose_override("attention:seesaw");
  for (size_t i = 0; i < sizeof ss / sizeof ss[0]; i++) {
    const dsa_sparse_mla_args b = mla_args(ss[i].tokens, ss[i].heads, ss[i].fp8 ? DSA_KV_FP8_PACKED : DSA_KV_BF16);
    size_t bound;
    const dsa_status st = mla_call(&b, 132, &bound);
    const size_t want_ws = ss[i].fp8 ? select_bytes(b.num_slots, b.num_tokens, b.topk) : 0;
    char name[200];
    snprintf(name, sizeof name, "DSA_KERNEL=attention:seesaw, %d tokens x %d heads, %s KV: seesaw, %d splits, %zu "
             "bytes of workspace", ss[i].tokens, ss[i].heads, ss[i].fp8 ? "FP8" : "bf16", ss[i].splits, want_ws);
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.mla_kernel == DSA_ATTN_SEESAW &&
              g_dsa_stub.mla_splits == ss[i].splits && g_dsa_stub.mla_need == want_ws &&
              (ss[i].fp8 ? bound == want_ws : bound >= want_ws),
          name, "kernel %lld, workspace %lld", g_dsa_stub.mla_kernel, (long long)g_dsa_stub.mla_need);
  }
  /* token groups: at 8, 16 and 32 heads 64 / H tokens a group, each group's union (G x topk slots of
   * 4 B, masks of 1 B, 2 counts; parts 256-byte aligned) in the workspace, at most 64 MiB a launch (more
   * groups: several launches), over packed FP8 in these 1M slots after the rows the call selects
   * (select_bytes; not at 32 heads); other head counts run heads_as_m's plan, with no workspace */
  static const struct {
    int tokens, heads, fp8, kernel;
    long long groups_a_launch;
    size_t ws;
  } tg[] = {{4096, 16, 1, DSA_ATTN_TOKEN_GROUPS, 1024, 33554432u + 8388608u + 8192u},
            {5, 16, 0, DSA_ATTN_TOKEN_GROUPS, 2, 65536u + 16384u + 256u},
            {7, 32, 1, DSA_ATTN_TOKEN_GROUPS, 4, 65536u + 16384u + 256u},
            {2048, 8, 0, DSA_ATTN_TOKEN_GROUPS, 256, 16777216u + 4194304u + 2048u},
            {30000, 8, 0, DSA_ATTN_TOKEN_GROUPS, 819, 53673984u + 13418496u + 6656u},
            {64, 128, 1, DSA_ATTN_HEADS_AS_M, 0, 0},
            {8, 64, 0, DSA_ATTN_HEADS_AS_M, 0, 0},
            {40, 12, 1, DSA_ATTN_HEADS_AS_M, 0, 0}};
  dsa_choose_override("attention:token_groups");
  for (size_t i = 0; i < sizeof tg / sizeof tg[0]; i++) {
    const dsa_sparse_mla_args b = mla_args(tg[i].tokens, tg[i].heads, tg[i].fp8 ? DSA_KV_FP8_PACKED : DSA_KV_BF16);
    size_t bound;
    const dsa_status st = mla_call(&b, 132, &bound);
    char name[200];
    snprintf(name, sizeof name, "DSA_KERNEL=attention:token_groups, %d tokens x %d heads, %s KV: kernel %d, %lld "
             "groups a launch, %zu bytes of workspace", tg[i].tokens, tg[i].heads, tg[i].fp8 ? "FP8" : "bf16",
             tg[i].kernel, tg[i].groups_a_launch, tg[i].ws);
    const dsa_attention_plan pl = dsa_plan_attention(&b, &(dsa_device_info){.num_sms = 132}, DSA_ATTN_TOKEN_GROUPS, 0);
    const int selected = tg[i].fp8 && tg[i].kernel == DSA_ATTN_TOKEN_GROUPS && tg[i].heads != 32;
    const size_t ws = tg[i].ws + (selected ? select_bytes(b.num_slots, b.num_tokens, b.topk) : 0);
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.mla_kernel == tg[i].kernel &&
              g_dsa_stub.mla_convert == (selected ? 2 : 0) && g_dsa_stub.mla_need == ws && (ws ? bound == ws : 1) &&
              pl.kernel == tg[i].kernel &&
              (tg[i].kernel != DSA_ATTN_TOKEN_GROUPS || (pl.tg_groups == tg[i].groups_a_launch &&
                                                         pl.token_group * tg[i].heads == 64 && tg[i].ws <= 64u << 20)),
          name, "kernel %lld, workspace %lld", g_dsa_stub.mla_kernel, (long long)g_dsa_stub.mla_need);
  }
  /* mma_split's head tile: under a wave of CTAs, narrower tiles when more, shorter CTAs still fit a wave
   * (a 64-head CTA takes about twice a 16-head one); the workspace bound holds for every tile */
  static const struct {
    int tokens, heads, fp8, sms, mt, splits;
  } v1s[] = {{1, 16, 1, 132, 1, 32}, {1, 64, 1, 132, 1, 32}, {1, 128, 1, 132, 2, 32}, {2, 64, 1, 132, 2, 32},
             {4, 64, 1, 132, 4, 32}, {1, 128, 0, 132, 2, 32}, {1, 64, 1, 16, 4, 16}, {300, 64, 1, 132, 4, 1}};
  dsa_choose_override("attention:mma_split");
  for (size_t i = 0; i < sizeof v1s / sizeof v1s[0]; i++) {
    const dsa_sparse_mla_args b =
        mla_args(v1s[i].tokens, v1s[i].heads, v1s[i].fp8 ? DSA_KV_FP8_PACKED : DSA_KV_BF16);
    size_t bound;
    const dsa_status st = mla_call(&b, v1s[i].sms, &bound);
    char name[160];
    snprintf(name, sizeof name, "mma_split plan for %d tokens x %d heads, %s KV, %d SMs: %d heads a CTA, %d splits",
             v1s[i].tokens, v1s[i].heads, v1s[i].fp8 ? "FP8" : "bf16", v1s[i].sms, 16 * v1s[i].mt, v1s[i].splits);
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.mla_mt == v1s[i].mt &&
              g_dsa_stub.mla_splits == v1s[i].splits,
          name, "mt %lld, splits %lld", st == DSA_OK ? g_dsa_stub.mla_mt : -st, g_dsa_stub.mla_splits);
  }
  /* heads_as_m's splits: only below a wave of (token, 64-head) CTAs, fewest waves x (chunks per split + 1);
   * unsplit (bf16 KV), a persistent grid of at most the SMs (ctas) */
  static const struct {
    int tokens, heads, sms, splits, ctas;
  } v3s[] = {{64, 64, 132, 2, 0},   {64, 128, 132, 1, 128}, {128, 128, 132, 1, 132}, {30, 128, 132, 2, 0},
             {8, 64, 132, 8, 0},    {16, 64, 132, 4, 0},    {32, 64, 132, 2, 0},     {8, 64, 16, 2, 0},
             {1, 128, 132, 8, 0},   {4096, 128, 132, 1, 132}, {4096, 128, 16, 1, 16}, {300, 32, 132, 2, 0}};
  dsa_choose_override("attention:heads_as_m");
  for (size_t i = 0; i < sizeof v3s / sizeof v3s[0]; i++) {
    const dsa_sparse_mla_args b = mla_args(v3s[i].tokens, v3s[i].heads, DSA_KV_BF16);
    size_t bound;
    const dsa_status st = mla_call(&b, v3s[i].sms, &bound);
    char name[160];
    snprintf(name, sizeof name, "heads_as_m splits for %d tokens x %d heads on %d SMs: %d, grid of %d CTAs looping",
             v3s[i].tokens, v3s[i].heads, v3s[i].sms, v3s[i].splits, v3s[i].ctas);
    check(st == DSA_OK && g_dsa_stub.mla_splits == v3s[i].splits && g_dsa_stub.mla_ctas == v3s[i].ctas &&
              g_dsa_stub.mla_need == 0,
          name, "splits %lld, ctas %lld (or a workspace)", g_dsa_stub.mla_splits, g_dsa_stub.mla_ctas);
  }
  { /* FP8 KV: a CTA a unit (its producer-bound chunks hide what the persistent grid saves) */
    const dsa_sparse_mla_args b = mla_args(4096, 128, DSA_KV_FP8_PACKED);
    size_t bound;
    const dsa_status st = mla_call(&b, 132, &bound);
    check(st == DSA_OK && g_dsa_stub.mla_splits == 1 && g_dsa_stub.mla_ctas == 0,
          "heads_as_m over FP8 KV, 4096 tokens x 128 heads: unsplit, a CTA a unit", "splits %lld, ctas %lld",
          g_dsa_stub.mla_splits, g_dsa_stub.mla_ctas);
  }
  /* Clusters resident at once (dsa_device_info.cluster_ctas, the probe's answer): an H100 SXM keeps 132
   * CTAs in clusters of 2 and 120 in clusters of 4 or 8; the splits measured best there (FP8 KV,
   * 2026-12-05: rows_as_m 48 x 16 heads ran 79.9 us in clusters of 8, 55.5 in clusters of 2;
   * heads_as_m 24 x 64 heads 58.1 in two waves of clusters of 8, 41.2 in one of clusters of 4, and
   * 32 x 64 heads 67.9 in clusters of 2, 85.6 in three waves of clusters of 8). Where clusters of 4
   * keep only half the SMs (the stub's default), 24 x 64 heads goes 2 ways. */
  static const struct {
    int kernel, tokens, heads, c4, c8, splits;
  } vcs[] = {{DSA_ATTN_ROWS_AS_M, 48, 16, 120, 120, 2},  {DSA_ATTN_ROWS_AS_M, 40, 16, 120, 120, 2},
             {DSA_ATTN_ROWS_AS_M, 72, 16, 120, 120, 4},  {DSA_ATTN_ROWS_AS_M, 96, 16, 120, 120, 1},
             {DSA_ATTN_ROWS_AS_M, 1, 16, 120, 120, 8},   {DSA_ATTN_HEADS_AS_M, 12, 64, 120, 120, 8},
             {DSA_ATTN_HEADS_AS_M, 24, 64, 120, 120, 4}, {DSA_ATTN_HEADS_AS_M, 32, 64, 120, 120, 2},
             {DSA_ATTN_HEADS_AS_M, 6, 128, 120, 120, 8}, {DSA_ATTN_HEADS_AS_M, 10, 128, 120, 120, 4},
             {DSA_ATTN_HEADS_AS_M, 16, 128, 120, 120, 2}, {DSA_ATTN_HEADS_AS_M, 24, 64, 66, 66, 2}};
  for (size_t i = 0; i < sizeof vcs / sizeof vcs[0]; i++) {
    const int rows = vcs[i].kernel == DSA_ATTN_ROWS_AS_M;
    dsa_choose_override(rows ? "attention:rows_as_m" : "attention:heads_as_m");
    g_dsa_stub.cluster_ctas[2] = 132;
    g_dsa_stub.cluster_ctas[4] = vcs[i].c4;
    g_dsa_stub.cluster_ctas[8] = vcs[i].c8;
    const dsa_sparse_mla_args b = mla_args(vcs[i].tokens, vcs[i].heads, DSA_KV_FP8_PACKED);
    size_t bound;
    const dsa_status st = mla_call(&b, 132, &bound);
    char name[200];
    snprintf(name, sizeof name, "%s splits for %d tokens x %d heads, clusters of 4 / 8 keeping %d / %d CTAs: %d",
             rows ? "rows_as_m" : "heads_as_m", vcs[i].tokens, vcs[i].heads, vcs[i].c4, vcs[i].c8, vcs[i].splits);
    check(st == DSA_OK && g_dsa_stub.mla_kernel == vcs[i].kernel && g_dsa_stub.mla_splits == vcs[i].splits &&
              g_dsa_stub.mla_need == 0,
          name, "kernel %lld, splits %lld", g_dsa_stub.mla_kernel, g_dsa_stub.mla_splits);
  }
  /* rows_as_m and heads_as_m merge a cluster of any size: with every size resident (an example device:
   * 132 / 129 / 120 / 130 / 126 / 126 / 120 CTAs in clusters of 2..8), 32 tokens x 16 heads split 3
   * ways (96 CTAs, 11 chunks each, one wave) where 4 would take two waves; heads_as_m at 24 x 64 heads
   * 5 ways (120 CTAs of 7 chunks), at 40 x 64 3 ways (120 of 11) */
  static const int example[9] = {0, 0, 132, 129, 120, 130, 126, 126, 120};
  memcpy(g_dsa_stub.cluster_ctas, example, sizeof example);
  static const struct {
    int kernel, tokens, heads, splits;
  } vas[] = {{DSA_ATTN_ROWS_AS_M, 32, 16, 3}, {DSA_ATTN_ROWS_AS_M, 20, 16, 6}, {DSA_ATTN_ROWS_AS_M, 64, 16, 2},
             {DSA_ATTN_HEADS_AS_M, 24, 64, 5}, {DSA_ATTN_HEADS_AS_M, 40, 64, 3}};
  for (size_t i = 0; i < sizeof vas / sizeof vas[0]; i++) {
    const int rows = vas[i].kernel == DSA_ATTN_ROWS_AS_M;
    dsa_choose_override(rows ? "attention:rows_as_m" : "attention:heads_as_m");
    const dsa_sparse_mla_args b = mla_args(vas[i].tokens, vas[i].heads, DSA_KV_FP8_PACKED);
    size_t bound;
    const dsa_status st = mla_call(&b, 132, &bound);
    char name[200];
    snprintf(name, sizeof name, "%s splits for %d tokens x %d heads, every cluster size resident: %d",
             rows ? "rows_as_m" : "heads_as_m", vas[i].tokens, vas[i].heads, vas[i].splits);
    check(st == DSA_OK && g_dsa_stub.mla_kernel == vas[i].kernel && g_dsa_stub.mla_splits == vas[i].splits &&
              g_dsa_stub.mla_need == 0,
          name, "kernel %lld, splits %lld", g_dsa_stub.mla_kernel, g_dsa_stub.mla_splits);
  }
  memset(g_dsa_stub.cluster_ctas, 0, sizeof g_dsa_stub.cluster_ctas);
  dsa_choose_override(NULL);
  g_dsa_stub.num_sms = 132;
}

/* One indexer decode call through the stubs (fake pointers): n tokens a request, `reqs` requests,
 * a context of max_blocks pages of page_size, q bf16 or FP8, `heads` index heads. */
static dsa_status decode_call(int reqs, int n, int max_blocks, int page_size, int fp8_q, int heads) {
  dsa_indexer_decode_args d;
  memset(&d, 0, sizeof d);
  d.query = query();
  d.query.num_heads = heads;
  d.query.weights_stride = heads;
  if (fp8_q) {
    d.query.q_dtype = DSA_DTYPE_FP8_E4M3;
    d.query.q_scale = FAKE(0x900000000ull);
  }
  d.cache = cache();
  d.cache.page_size = page_size;
  d.seq_lens = FAKE(0x400000000ull);
  d.block_table = FAKE(0x500000000ull);
  d.block_table_stride = max_blocks;
  d.max_blocks_per_req = max_blocks;
  d.q_len_per_req = n;
  d.num_reqs = reqs;
  d.topk = 2048;
  d.topk_indices = FAKE(0xa00000000ull);
  size_t bytes = 0;
  dsa_indexer_decode_workspace_size(&d, &bytes);
  dsa_stub_begin_call(FAKE(0xb00000000ull), bytes);
  return dsa_indexer_decode(&d, FAKE(0xb00000000ull), bytes, 0);
}

/* Packed FP8 KV converted first (host/choose.c): heads_as_m, token groups and the seesaw where the
 * entries are at least 32 x the slots and the rows take at most 256 MiB; over more slots (up to 2^27),
 * for calls of at least 2^23 entries (tokens x topk x head groups), the seesaw and token groups on the rows
 * the call selects (select_bytes); the size query reports the rows
 * (num_slots x 1152 B rounded up to 256, + num_slots x 4 B, the whole rounded up to 256) before the rest,
 * and a call given less runs unconverted: heads_as_m in place of the seesaw, token groups unconverted
 * (then, short of their unions too, the kernel the table picks without them). Never bf16 KV, rows_as_m,
 * or decode batches over a pool. The seesaw in place of heads_as_m where each slot is read at least 8
 * times (bf16) or 16 (FP8, converted whatever the reads). */
static void test_mla_convert_choice(void) {
  static const struct {
    int tokens, heads, fp8;
    int64_t slots;
    int kernel, convert;
  } cv[] = {{4096, 128, 1, 16384, DSA_ATTN_SEESAW, 1},         /* 16.8 M entries, 512 a slot */
            {4096, 128, 0, 16384, DSA_ATTN_SEESAW, 0},         /* bf16 */
            {130, 128, 1, 8192, DSA_ATTN_SEESAW, 1},           /* 260 units */
            {64, 128, 1, 16384, DSA_ATTN_SEESAW, 1},           /* 16 a slot: the seesaw, converted */
            {64, 128, 1, 8192, DSA_ATTN_SEESAW, 1},            /* 32 a slot */
            {64, 64, 1, 16384, DSA_ATTN_HEADS_AS_M, 0},        /* 8 a slot, FP8: unconverted heads_as_m */
            {64, 64, 0, 16384, DSA_ATTN_SEESAW, 0},            /* 8 a slot, bf16: the seesaw (splits) */
            {64, 128, 0, 16384, DSA_ATTN_SEESAW, 0},           /* bf16, 16 a slot */
            {32, 64, 0, 16384, DSA_ATTN_HEADS_AS_M, 0},        /* bf16, 4 a slot */
            {128, 128, 0, 1 << 20, DSA_ATTN_HEADS_AS_M, 0},    /* a bf16 decode batch over a pool */
            {4096, 128, 1, 300000, DSA_ATTN_SEESAW, 2},        /* the rows 347 MB: those selected */
            {4096, 128, 1, 1 << 20, DSA_ATTN_SEESAW, 2},       /* a prefill over a pool: 16.8 M entries */
            {4096, 64, 1, 1 << 22, DSA_ATTN_SEESAW, 2},        /* 8.4 M entries, a 4M pool */
            {2048, 64, 1, 1 << 20, DSA_ATTN_HEADS_AS_M, 0},    /* 4.2 M entries: unconverted */
            {4096, 128, 1, ((int64_t)1 << 27) + 1, DSA_ATTN_HEADS_AS_M, 0}, /* a bitmap past 16 MiB */
            {4096, 16, 1, 131072, DSA_ATTN_TOKEN_GROUPS, 1},   /* GLM's chunk over its 128k context */
            {4096, 16, 1, 1 << 20, DSA_ATTN_TOKEN_GROUPS, 2},  /* over a pool: 8.4 M entries, those selected */
            {4096, 8, 1, 1 << 22, DSA_ATTN_TOKEN_GROUPS, 2},   /* 8 heads, a 4M pool */
            {2048, 16, 1, 1 << 20, DSA_ATTN_TOKEN_GROUPS, 0},  /* 4.2 M entries: unconverted */
            {4096, 16, 0, 1 << 20, DSA_ATTN_TOKEN_GROUPS, 0},  /* bf16 over a pool */
            {128, 128, 1, 1 << 20, DSA_ATTN_HEADS_AS_M, 0},    /* a decode batch over a pool */
            {64, 16, 1, 2048, DSA_ATTN_ROWS_AS_M, 0}};         /* rows_as_m converts nothing */
  dsa_choose_override(NULL);
  for (size_t i = 0; i < sizeof cv / sizeof cv[0]; i++) {
    dsa_sparse_mla_args b = mla_args(cv[i].tokens, cv[i].heads, cv[i].fp8 ? DSA_KV_FP8_PACKED : DSA_KV_BF16);
    b.num_slots = cv[i].slots;
    const size_t rows = cv[i].convert == 2 ? select_bytes(cv[i].slots, cv[i].tokens, b.topk)
                        : ((((size_t)cv[i].slots * 1152 + 255) & ~(size_t)255) + (size_t)cv[i].slots * 4 + 255) &
                              ~(size_t)255;
    size_t bound;
    dsa_status st = mla_call(&b, 132, &bound);
    char name[200];
    snprintf(name, sizeof name, "%d tokens x %d heads, %s KV over %lld slots: kernel %d, %s", cv[i].tokens,
             cv[i].heads, cv[i].fp8 ? "FP8" : "bf16", (long long)cv[i].slots, cv[i].kernel,
             cv[i].convert == 2 ? "the rows it selects converted first (the query reports them)"
             : cv[i].convert    ? "rows converted first (the query reports them)"
                                : "nothing converted");
    const size_t need = g_dsa_stub.mla_need;
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.mla_kernel == cv[i].kernel &&
              g_dsa_stub.mla_convert == cv[i].convert,
          name, "kernel %lld, converted %lld", g_dsa_stub.mla_kernel, g_dsa_stub.mla_convert);
    check(!cv[i].convert || (need >= rows && need <= bound &&
                             (cv[i].convert != 2 || cv[i].kernel != DSA_ATTN_SEESAW || need == rows)),
          "... and its workspace: the rows (token groups: then their unions), within the query's",
          "needs %lld of %lld bytes", (long long)need, (long long)bound);
    if (!cv[i].convert) continue;
    /* a byte short: the same kernel unconverted (heads_as_m for the seesaw), in the rest */
    const int short_kernel = cv[i].kernel == DSA_ATTN_SEESAW ? DSA_ATTN_HEADS_AS_M : cv[i].kernel;
    dsa_stub_begin_call(FAKE(0x100000000000ull), bound - 1);
    st = dsa_sparse_mla(&b, FAKE(0x100000000000ull), bound - 1, 0);
    snprintf(name, sizeof name, "%d tokens x %d heads, FP8 KV over %lld slots, the workspace a byte short of the "
             "query's: kernel %d unconverted in %zu bytes", cv[i].tokens, cv[i].heads, (long long)cv[i].slots,
             short_kernel, bound - rows);
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.mla_kernel == short_kernel &&
              g_dsa_stub.mla_convert == 0 && g_dsa_stub.mla_need <= bound - rows,
          name, "kernel %lld, workspace %lld", g_dsa_stub.mla_kernel, (long long)g_dsa_stub.mla_need);
    if (cv[i].kernel != DSA_ATTN_TOKEN_GROUPS) continue;
    /* short of the unions too: rows_as_m (FP8, 16 heads), no workspace */
    const size_t less = bound - rows - 1;
    dsa_stub_begin_call(FAKE(0x100000000000ull), less);
    st = dsa_sparse_mla(&b, FAKE(0x100000000000ull), less, 0);
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.mla_kernel == DSA_ATTN_ROWS_AS_M &&
              g_dsa_stub.mla_convert == 0 && g_dsa_stub.mla_need == 0,
          "the GLM chunk short of the rows and the unions: rows_as_m, unconverted, no workspace",
          "kernel %lld, workspace %lld", g_dsa_stub.mla_kernel, (long long)g_dsa_stub.mla_need);
  }
}

/* The indexer's tables: fused or separate (the first table below), then for separate launches the
 * scorer (mma / wgmma / wgmma_tma) and the top-k kernel (registers / slices with its cluster /
 * chain) each launch gets, by default and under DSA_KERNEL (these cases run with indexer:separate
 * added to the spec). */
static void test_indexer_kernel_choice(void) {
  static const struct {
    const char *spec;
    int reqs, n, blocks, page, fp8, heads, decline, fused, scorer;
  } fused_cases[] = {
      /* FP8-q decode on 64-key pages (wgmma_tma): fused for <= 8 requests of one token past 2k
       * rows (1M, 8k, 3k; 8 x 8k) and <= 4 requests of two tokens past 8k (2 x MTP 2 at 128k);
       * 16 or 64 requests, MTP 2 at 8k, MTP 4: separate; forced: fused */
      {NULL, 1, 1, 16384, 64, 1, 32, 0, 1, DSA_SCORES_WGMMA_TMA},
      {NULL, 2, 2, 2048, 64, 1, 64, 0, 1, DSA_SCORES_WGMMA_TMA},
      {NULL, 1, 1, 128, 64, 1, 32, 0, 1, DSA_SCORES_WGMMA_TMA},
      {NULL, 1, 1, 48, 64, 1, 32, 0, 1, DSA_SCORES_WGMMA_TMA},
      {NULL, 8, 1, 128, 64, 1, 32, 0, 1, DSA_SCORES_WGMMA_TMA},
      {NULL, 16, 1, 128, 64, 1, 32, 0, 0, DSA_SCORES_WGMMA_TMA},
      {NULL, 1, 2, 128, 64, 1, 32, 0, 0, DSA_SCORES_WGMMA_TMA},
      {NULL, 64, 1, 2048, 64, 1, 32, 0, 0, DSA_SCORES_WGMMA_TMA},
      {NULL, 1, 4, 2048, 64, 1, 32, 0, 0, DSA_SCORES_WGMMA_TMA},
      {"indexer:fused", 64, 4, 2048, 64, 1, 64, 0, 1, DSA_SCORES_WGMMA_TMA},
      {"indexer:fused", 1, 1, 128, 64, 1, 32, 0, 1, DSA_SCORES_WGMMA_TMA},
      /* the kernel declines (grid not resident, scores not in shared memory): the two kernels */
      {NULL, 1, 1, 2048, 64, 1, 32, 1, 0, DSA_SCORES_WGMMA_TMA},
      /* bf16 q (mma) and 32-key pages: separate; forced on wgmma: fused */
      {NULL, 1, 1, 128, 64, 0, 32, 0, 0, DSA_SCORES_MMA},
      {"indexer:fused", 1, 1, 128, 64, 0, 32, 0, 0, DSA_SCORES_MMA},
      {"indexer:fused,scores:wgmma", 1, 1, 128, 64, 0, 32, 0, 1, DSA_SCORES_WGMMA},
      {"indexer:fused,scores:wgmma", 1, 2, 256, 32, 1, 64, 0, 1, DSA_SCORES_WGMMA},
      {"indexer:separate", 1, 1, 128, 64, 1, 32, 0, 0, DSA_SCORES_WGMMA_TMA},
  };
  for (size_t i = 0; i < sizeof fused_cases / sizeof fused_cases[0]; i++) {
    dsa_choose_override(fused_cases[i].spec);
    g_dsa_stub.fused_decline = fused_cases[i].decline;
    const dsa_status st = decode_call(fused_cases[i].reqs, fused_cases[i].n, fused_cases[i].blocks,
                                      fused_cases[i].page, fused_cases[i].fp8, fused_cases[i].heads);
    g_dsa_stub.fused_decline = 0;
    char name[200];
    snprintf(name, sizeof name, "indexer %s, %s: %d x %d tokens, %d pages of %d, %s q%s -> scorer %d",
             fused_cases[i].fused ? "fused" : "separate", fused_cases[i].spec ? fused_cases[i].spec : "default",
             fused_cases[i].reqs, fused_cases[i].n, fused_cases[i].blocks, fused_cases[i].page,
             fused_cases[i].fp8 ? "FP8" : "bf16", fused_cases[i].decline ? ", declined" : "", fused_cases[i].scorer);
    const int fused = g_dsa_stub.fused_launches > 0;
    /* every launch fused, or none (then one scores and one top-k launch a chunk) */
    const int all = fused ? g_dsa_stub.fused_launches == g_dsa_stub.launches : g_dsa_stub.launches % 2 == 0;
    check(st == DSA_OK && g_dsa_stub.violations == 0 && fused == fused_cases[i].fused && all &&
              g_dsa_stub.scores_kernel == fused_cases[i].scorer &&
              g_dsa_stub.scores_tokens == (int64_t)fused_cases[i].reqs * fused_cases[i].n &&
              g_dsa_stub.topk_tokens == (int64_t)fused_cases[i].reqs * fused_cases[i].n,
          name, "status %lld, fused launches %lld", st, g_dsa_stub.fused_launches);
  }

  static const struct {
    const char *spec;
    int reqs, n, blocks, page, fp8, heads, scorer, topk, cluster;
  } cases[] = {
      /* FP8-q decode on 64-key pages: wgmma_tma; one 8k row: registers */
      {NULL, 1, 1, 128, 64, 1, 32, DSA_SCORES_WGMMA_TMA, DSA_TOPK_REGISTERS, 1},
      /* bf16 q, or pages of 32: mma */
      {NULL, 1, 1, 128, 64, 0, 32, DSA_SCORES_MMA, DSA_TOPK_REGISTERS, 1},
      {NULL, 1, 1, 256, 32, 1, 32, DSA_SCORES_MMA, DSA_TOPK_REGISTERS, 1},
      /* more rows of <= 16,384 than SMs: slices, one CTA a row */
      {NULL, 200, 1, 128, 64, 1, 32, DSA_SCORES_WGMMA_TMA, DSA_TOPK_SLICES, 1},
      /* few rows of 128k: a cluster of 8 a row; 1M: the chain (no cluster of slices of 16k fits) */
      {NULL, 4, 1, 2048, 64, 1, 32, DSA_SCORES_WGMMA_TMA, DSA_TOPK_SLICES, 8},
      {NULL, 1, 1, 16384, 64, 1, 32, DSA_SCORES_WGMMA_TMA, DSA_TOPK_CHAIN, 1},
      /* many rows of 128k: the chain; 40k rows, many: slices, one CTA a row */
      {NULL, 100, 1, 2048, 64, 1, 32, DSA_SCORES_WGMMA_TMA, DSA_TOPK_CHAIN, 1},
      {NULL, 100, 1, 640, 64, 1, 32, DSA_SCORES_WGMMA_TMA, DSA_TOPK_SLICES, 1},
      /* overrides */
      {"scores:mma", 1, 1, 128, 64, 1, 32, DSA_SCORES_MMA, DSA_TOPK_REGISTERS, 1},
      {"scores:wgmma", 1, 1, 128, 64, 1, 32, DSA_SCORES_WGMMA, DSA_TOPK_REGISTERS, 1},
      {"scores:wgmma", 1, 1, 128, 64, 0, 32, DSA_SCORES_WGMMA, DSA_TOPK_REGISTERS, 1},
      /* wgmma's bf16-q path holds <= 256 (token, head) rows a group: MTP 8 x 64 heads goes to mma */
      {"scores:wgmma", 1, 8, 128, 64, 0, 64, DSA_SCORES_MMA, DSA_TOPK_REGISTERS, 1},
      {"scores:wgmma_tma", 1, 1, 256, 32, 1, 32, DSA_SCORES_WGMMA, DSA_TOPK_REGISTERS, 1},
      {"topk:chain", 1, 1, 128, 64, 1, 32, DSA_SCORES_WGMMA_TMA, DSA_TOPK_CHAIN, 1},
      {"topk:slices", 1, 1, 128, 64, 1, 32, DSA_SCORES_WGMMA_TMA, DSA_TOPK_SLICES, 1},
      {"topk:registers", 200, 1, 128, 64, 1, 32, DSA_SCORES_WGMMA_TMA, DSA_TOPK_REGISTERS, 1},
      {" topk:registers , scores:mma ", 4, 1, 2048, 64, 1, 32, DSA_SCORES_MMA, DSA_TOPK_SLICES, 8},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char spec[128];
    snprintf(spec, sizeof spec, "indexer:separate%s%s", cases[i].spec ? "," : "", cases[i].spec ? cases[i].spec : "");
    dsa_choose_override(spec);
    const dsa_status st =
        decode_call(cases[i].reqs, cases[i].n, cases[i].blocks, cases[i].page, cases[i].fp8, cases[i].heads);
    char name[200];
    snprintf(name, sizeof name,
             "indexer kernels, %s: %d x %d tokens, %d pages of %d, %s q, %d heads -> scorer %d, top-k %d (%d a row)",
             cases[i].spec ? cases[i].spec : "default", cases[i].reqs, cases[i].n, cases[i].blocks, cases[i].page,
             cases[i].fp8 ? "FP8" : "bf16", cases[i].heads, cases[i].scorer, cases[i].topk, cases[i].cluster);
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.scores_kernel == cases[i].scorer &&
              g_dsa_stub.topk_kernel == cases[i].topk && g_dsa_stub.topk_cluster == cases[i].cluster,
          name, "status %lld, scorer %lld", st, g_dsa_stub.scores_kernel);
  }
  /* prefill: wgmma for both q types; the separate workspace fits 64 MiB: the scorer and slices in
   * clusters of 2, also for FP8 q; forced, FP8 q runs the fused prefill indexer (no top-k launch) */
  for (int mode = 0; mode < 3; ++mode) {
    const int fp8 = mode > 0;
    dsa_choose_override(mode == 1 ? "indexer:fused" : NULL);
    const dsa_indexer_prefill_args a = prefill_call(64, 20000, 0, fp8, 0);
    size_t bytes = 0;
    dsa_indexer_prefill_workspace_size(&a, &bytes);
    dsa_stub_begin_call(FAKE(0x100000000000ull), bytes);
    const dsa_status st = dsa_indexer_prefill(&a, FAKE(0x100000000000ull), bytes, 0);
    const int fused = mode == 1;
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.scores_kernel == DSA_SCORES_WGMMA &&
              (fused ? g_dsa_stub.fused_launches == 1 && g_dsa_stub.launches == 1 && g_dsa_stub.topk_tokens == 64
                     : g_dsa_stub.fused_launches == 0 && g_dsa_stub.topk_kernel == DSA_TOPK_SLICES &&
                           g_dsa_stub.topk_cluster == 2),
          mode == 0   ? "prefill 64 tokens x 20k rows, bf16 q: wgmma, slices in clusters of 2"
          : mode == 1 ? "prefill 64 tokens x 20k rows, FP8 q, indexer:fused: the fused prefill indexer on wgmma"
                      : "prefill 64 tokens x 20k rows, FP8 q: wgmma, slices in clusters of 2",
          "status %lld, fused launches %lld", st, g_dsa_stub.fused_launches);
  }
  dsa_choose_override(NULL);
}

/* Context parallelism's merge: runs where a row holds seven slices of 2048 candidates or more and all
 * rows' clusters fit 132 SMs, tree elsewhere (and past DSA_MERGE_RUNS_MAX_LISTS lists); DSA_KERNEL=
 * merge:runs forces runs where it can take the lists (tree past them), merge:select select, merge:tree
 * tree; a malformed merge value fails the call with nothing launched. */
static dsa_status merge_call(int lists, int rows, int k_in) {
  dsa_topk_merge_args m;
  memset(&m, 0, sizeof m);
  m.cand_scores = FAKE(0x100000000000ull);
  m.cand_ids = FAKE(0x110000000000ull);
  m.num_lists = lists;
  m.num_rows = rows;
  m.k_in = k_in;
  m.topk = 2048;
  m.indices = FAKE(0x120000000000ull);
  m.lens = FAKE(0x130000000000ull);
  dsa_stub_begin_call(NULL, 0);
  g_dsa_stub.merge_kernel = 0;
  return dsa_topk_merge(&m, 0);
}

static void test_merge_kernel_choice(void) {
  static const struct {
    const char *spec;
    int lists, rows, k_in, want;
  } cases[] = {
      {NULL, 2, 1, 2048, DSA_MERGE_TREE},          {NULL, 8, 1, 2048, DSA_MERGE_RUNS},
      {NULL, 7, 1, 2048, DSA_MERGE_RUNS},          {NULL, 6, 1, 2048, DSA_MERGE_TREE},
      {NULL, 8, 16, 2048, DSA_MERGE_RUNS},         {NULL, 8, 17, 2048, DSA_MERGE_TREE},
      {NULL, 8, 64, 2048, DSA_MERGE_TREE},         {NULL, 4, 64, 2048, DSA_MERGE_TREE},
      {NULL, 2, 4096, 2048, DSA_MERGE_TREE},       {NULL, 3, 4096, 1365, DSA_MERGE_TREE},
      {NULL, 9, 1, 1000, DSA_MERGE_TREE},          {"merge:select", 2, 1, 2048, DSA_MERGE_SELECT},
      {"merge:runs", 8, 1, 2048, DSA_MERGE_RUNS},  {"merge:runs", 2, 4096, 2048, DSA_MERGE_RUNS},
      {"merge:runs", 3, 5, 700, DSA_MERGE_RUNS},   {"merge:runs", 9, 1, 1000, DSA_MERGE_TREE},
      {"merge:runs", 16, 1, 1024, DSA_MERGE_TREE}, {"merge:select", 8, 1, 2048, DSA_MERGE_SELECT},
      {"merge:tree", 8, 1, 2048, DSA_MERGE_TREE},  {"merge:tree", 100, 3, 3, DSA_MERGE_TREE},
      {"merge:tree", 2, 4096, 2048, DSA_MERGE_TREE},
  };
  static const char *const kname[4] = {"?", "select", "runs", "tree"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dsa_choose_override(cases[i].spec);
    const dsa_status st = merge_call(cases[i].lists, cases[i].rows, cases[i].k_in);
    char name[160];
    snprintf(name, sizeof name, "merge kernel for %d lists x %d of %d rows, DSA_KERNEL=%s: %s", cases[i].lists,
             cases[i].k_in, cases[i].rows, cases[i].spec ? cases[i].spec : "(none)", kname[cases[i].want]);
    check(st == DSA_OK && g_dsa_stub.violations == 0 && g_dsa_stub.merge_kernel == cases[i].want, name,
          "status %lld, got kernel %lld", st, g_dsa_stub.merge_kernel);
  }
  dsa_choose_override("merge:sort");
  const dsa_status st = merge_call(2, 1, 2048);
  check(st == DSA_ERR_INVALID_VALUE && strstr(dsa_last_error(), "select | runs | tree") && g_dsa_stub.launches == 0,
        "DSA_KERNEL=\"merge:sort\": the merge fails with a message listing its kernels, nothing launched",
        "status %lld, launches %lld", st, g_dsa_stub.launches);
  dsa_choose_override(NULL);
}

/* A malformed DSA_KERNEL: every call that would launch a stage's kernel fails with
 * DSA_ERR_INVALID_VALUE naming the value; nothing is launched; a call with no work is unaffected. */
static void test_override_errors(void) {
  static const char *const bad[] = {"attention:v3", "atention:heads_as_m", "scores", "topk:chain,scores:v1",
                                    "scores:mma:x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dsa_choose_override(bad[i]);
    const dsa_sparse_mla_args a = mla_args(1, 16, DSA_KV_FP8_PACKED);
    size_t bound;
    dsa_status st = mla_call(&a, 132, &bound);
    char name[160];
    snprintf(name, sizeof name, "DSA_KERNEL=\"%s\": attention fails with a message naming it", bad[i]);
    check(st == DSA_ERR_INVALID_VALUE && strstr(dsa_last_error(), "DSA_KERNEL") && g_dsa_stub.launches == 0, name,
          "status %lld, launches %lld", st, g_dsa_stub.launches);
    st = decode_call(1, 1, 128, 64, 1, 32);
    snprintf(name, sizeof name, "DSA_KERNEL=\"%s\": the indexer fails too, nothing launched", bad[i]);
    check(st == DSA_ERR_INVALID_VALUE && g_dsa_stub.launches == 0, name, "status %lld, launches %lld", st,
          g_dsa_stub.launches);
  }
  dsa_choose_override("");
  const dsa_sparse_mla_args a = mla_args(1, 16, DSA_KV_FP8_PACKED);
  size_t bound;
  const dsa_status st = mla_call(&a, 132, &bound);
  check(st == DSA_OK && g_dsa_stub.mla_kernel == DSA_ATTN_MMA_SPLIT, "DSA_KERNEL=\"\": the tables' choice",
        "status %lld, kernel %lld", st, g_dsa_stub.mla_kernel);
  dsa_choose_override(NULL);
}

/* No device / a non-sm_90 device / a launch failure: clear statuses, messages naming the call. */
static void test_device_errors(void) {
  const dsa_index_k_store_args ks = kstore(5);

  g_dsa_stub.device_error = DSA_STUB_NO_DEVICE;
  dsa_stub_begin_call(NULL, 0);
  dsa_status st = dsa_index_k_store(&ks, 0);
  check(st == DSA_ERR_NO_DEVICE && strstr(dsa_last_error(), "dsa_index_k_store") && g_dsa_stub.launches == 0,
        "no device: DSA_ERR_NO_DEVICE, nothing launched", "status %lld, launches %lld", st, g_dsa_stub.launches);
  g_dsa_stub.device_error = 0;

  g_dsa_stub.cc_major = 8;
  dsa_stub_begin_call(NULL, 0);
  st = dsa_index_k_store(&ks, 0);
  check(st == DSA_ERR_NO_DEVICE && strstr(dsa_last_error(), "sm_80") && g_dsa_stub.launches == 0,
        "an sm_80 device: DSA_ERR_NO_DEVICE naming it", "status %lld, launches %lld", st, g_dsa_stub.launches);
  g_dsa_stub.cc_major = 9;

  /* A launch that fails mid-loop ends the call with DSA_ERR_CUDA and the runtime's text. */
  dsa_topk_args tk;
  memset(&tk, 0, sizeof tk);
  tk.scores = FAKE(0x100000000ull);
  tk.scores_stride = 16;
  tk.num_rows = 1000;
  tk.max_len = 16;
  tk.topk = 8;
  tk.indices = FAKE(0x200000000ull);
  size_t ws_bytes = 0;
  dsa_topk_workspace_size(&tk, &ws_bytes);
  g_dsa_stub.launch_budget = 2;
  dsa_stub_begin_call(FAKE(0x100000000000ull), ws_bytes);
  st = dsa_topk(&tk, FAKE(0x100000000000ull), ws_bytes, 0);
  check(st == DSA_ERR_CUDA && g_dsa_stub.launches == 2 && strstr(dsa_last_error(), "stub launch failure"),
        "a launch failing mid-loop: DSA_ERR_CUDA after 2 launches", "status %lld, launches %lld", st,
        g_dsa_stub.launches);
  g_dsa_stub.launch_budget = 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGALRM, on_alarm);
  alarm(60);
  dsa_stub_init();
  test_int_max_loops();
  test_indexer_workspace_cap();
  test_sm_count();
  test_mla_kernel_choice();
  test_mla_convert_choice();
  test_indexer_kernel_choice();
  test_override_errors();
  test_merge_kernel_choice();
  test_device_errors();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
