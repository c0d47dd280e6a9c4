/*
 * test_gpu_indexer.c — the lightning indexer on the GPU (dsa_indexer_decode, dsa_indexer_prefill and
 * their _scores calls) against the float64 CPU reference (include/dsa_ref.h), with the acceptance
 * rules of DESIGN.md §5:
 *   scores  max |gpu - ref| <= tol * max |ref| over each row (tol 1e-5 bf16 q, 2e-3 fp8 q);
 *           positions outside the cache must be -inf; positions past L must not be written.
 *   top-k   eps = tol * max |score| of the row (float64 reference scores): every position whose
 *           score exceeds the k-th score by more than eps is selected, every selected one is
 *           >= k-th - eps; lens exact; -1 tail exact; no duplicates; entries map to visible
 *           positions; L <= topk selects exactly every visible position.
 * The scorer and the top-k kernel are the choice tables' (src/host/choose.c); DSA_KERNEL=scores:mma,
 * scores:wgmma, scores:wgmma_tma, topk:chain or topk:slices forces one (cmake/dsa_tests.cmake runs each).
 *
 * Conventions of gpu_harness.h: fresh random inputs (a fixed seed per case, no zero values), every
 * output poisoned before every run, every workspace filled with garbage (another on re-runs), a
 * 256-byte guard after every device buffer, and after every call a synchronised stream, its last
 * error and every guard checked.
 *
 * Output: one line per check, "ok   name  (metrics)" or "FAIL name: why", then "N passed, M failed".
 * Exit status 0 only if nothing failed; 77 (ctest: skipped) without an sm_90 GPU. DSA_TEST_ONLY=text
 * runs only the cases whose name contains text.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dsa.h"
#include "dsa_ref.h"
#include "gpu_harness.h"
#include "indexer_problem.h"
#include "row_checks.h"

/* ============================================================================================== */
/* Indexer decode                                                                                 */
/* ============================================================================================== */

/* GPU decode scores (skip_short_rows 0, then 1) against the reference. */
static void decode_check_scores(const decode_prob *p, const double *ref, int64_t Ls) {
  const decode_case *c = p->c;
  chk_begin("%s: scores", c->name);
  const int64_t cap = p->da.max_seq_len > 0 ? p->da.max_seq_len : (int64_t)p->maxb * p->P;
  const int64_t stride = cap + 5;
  /* the columns the call covers: max_seq_len when given and below the block-table row's capacity */
  const int64_t blk_cap = (int64_t)p->da.max_blocks_per_req * p->P;
  const int64_t W = p->da.max_seq_len > 0 && p->da.max_seq_len < blk_cap ? p->da.max_seq_len : blk_cap;
  const size_t n = (size_t)imax(p->T, 1) * (size_t)stride;
  float *sd = dalloc(n * sizeof(float)), *sh = hmalloc(n * sizeof(float));
  dsa_indexer_decode_scores_args sa;
  memset(&sa, 0, sizeof sa);
  sa.decode = p->da;
  sa.scores = sd;
  sa.scores_stride = stride;
  double worst = 0.0;
  for (int skip = 0; skip <= 1; skip++) {
    dset(sd, POISON_BYTE, n * sizeof(float));
    sa.skip_short_rows = skip;
    DSA(dsa_indexer_decode_scores(&sa, g_stream));
    dget(sh, sd, n * sizeof(float));
    for (int t = 0; t < p->T; t++) {
      char why[600];
      if (skip && p->L[t] <= c->topk) { /* not scored: [0, L) unspecified, the tail as always */
        if (check_score_tail(sh + (int64_t)t * stride, p->L[t], W, stride, why, sizeof why))
          chk_fail("skip_short_rows=1 token %d (L=%d, not scored): %s", t, p->L[t], why);
        continue;
      }
      double ratio = 0.0;
      if (check_score_row(ref + (int64_t)t * Ls, sh + (int64_t)t * stride, p->L[t], W, stride, p->tol, &ratio, why,
                          sizeof why))
        chk_fail("skip_short_rows=%d token %d (L=%d): %s", skip, t, p->L[t], why);
      if (ratio > worst) worst = ratio;
    }
  }
  chk_metric("tokens=%d maxL=%d tol=%.0e max err/(tol*max|ref|)=%.3f", p->T, p->maxL, p->tol, worst);
  chk_end();
}

static void decode_case_run(const void *arg) {
  const decode_case *c = arg;
  decode_prob p;
  decode_build(c, &p);
  int64_t Ls;
  const double *ref = decode_ref_scores(&p, &Ls);
  if (c->check_scores) decode_check_scores(&p, ref, Ls);

  chk_begin("%s: topk", c->name);
  size_t wsb = 0;
  DSA_Q(dsa_indexer_decode_workspace_size(&p.da, &wsb));
  void *ws = workspace(wsb);
  const size_t ni = (size_t)imax(p.T, 1) * c->topk;
  int32_t *idx_d = dalloc(ni * 4), *len_d = dalloc((size_t)imax(p.T, 1) * 4);
  int32_t *idx_h = hmalloc(ni * 4), *len_h = hmalloc((size_t)imax(p.T, 1) * 4);
  decode_run_topk(&p, ws, wsb, WS_BYTE_FIRST, idx_d, len_d, idx_h, len_h);

  int64_t *out_val = hmalloc((size_t)imax(p.maxL, 1) * sizeof *out_val);
  unsigned char *bad = hmalloc((size_t)imax(p.maxL, 1));
  double worst = 0.0;
  for (int t = 0; t < p.T; t++) {
    for (int i = 0; i < p.L[t]; i++) {
      out_val[i] = decode_slot_of(&p, t, i);
      bad[i] = out_val[i] < 0;
    }
    topk_row row = {p.L[t], ref + (int64_t)t * Ls, out_val, bad, c->topk, p.tol, idx_h + (int64_t)t * c->topk,
                    !c->lens_null, len_h[t]};
    char why[600];
    if (check_topk_row(&row, why, sizeof why, &worst))
      chk_fail("token %d (request %d, seq_len %d, L=%d): %s", t, t / p.n, p.seq_h[t / p.n], p.L[t], why);
  }
  chk_metric("tokens=%d maxL=%d topk=%d ws=%zu B, worst pick %.2f eps into the band", p.T, p.maxL, c->topk, wsb,
             worst);
  chk_end();

  if (c->check_determinism) {
    chk_begin("%s: determinism (second run, different workspace garbage)", c->name);
    int32_t *idx2 = hmalloc(ni * 4), *len2 = hmalloc((size_t)imax(p.T, 1) * 4);
    decode_run_topk(&p, ws, wsb, WS_BYTE_RERUN, idx_d, len_d, idx2, len2);
    for (size_t i = 0; i < (size_t)p.T * c->topk; i++)
      if (idx2[i] != idx_h[i]) {
        chk_fail("topk_indices[%zu] = %d on the second run, %d on the first", i, idx2[i], idx_h[i]);
        break;
      }
    if (memcmp(len2, len_h, (size_t)p.T * 4)) chk_fail("topk_lens differ between two runs");
    chk_metric("%zu indices identical", (size_t)p.T * c->topk);
    chk_end();
  }
}

/* ============================================================================================== */
/* Indexer prefill                                                                                */
/* ============================================================================================== */

static void prefill_case_run(const void *arg) {
  const prefill_case *c = arg;
  prefill_prob p;
  prefill_build(c, &p);
  const int T = p.T;

  const int64_t Ls = imax(p.maxlen, 1);
  double *ref = hmalloc((size_t)imax(T, 1) * (size_t)Ls * sizeof *ref);
  for (size_t i = 0; i < (size_t)imax(T, 1) * (size_t)Ls; i++) ref[i] = NAN;
  dsa_ref_indexer_prefill_scores_f64(&p.ha, ref, Ls);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < p.len[t]; i++) {
      double *s = ref + (int64_t)t * Ls + i;
      if (prefill_row_bad(&p, p.begin[t] + i)) *s = -INFINITY;
      else if (!isfinite(*s)) abort_case("reference wrote no finite score for token %d row %d", t, p.begin[t] + i);
    }

  /* Scores alone. scores[t * stride + (w - row_starts[t])]: checked for tokens whose row_starts is
   * not negative (where the clamp moves the start, the layout is not pinned down by dsa.h). */
  {
    chk_begin("%s: scores", c->name);
    const int64_t stride = (p.da.max_rows > 0 ? p.da.max_rows : p.W) + 3;
    const int64_t W = p.da.max_rows > 0 && p.da.max_rows < p.W ? p.da.max_rows : p.W; /* columns covered */
    const size_t n = (size_t)imax(T, 1) * (size_t)stride;
    float *sd = dalloc(n * 4), *sh = hmalloc(n * 4);
    dsa_indexer_prefill_scores_args sa;
    memset(&sa, 0, sizeof sa);
    sa.prefill = p.da;
    sa.scores = sd;
    sa.scores_stride = stride;
    double worst = 0.0;
    int skipped = 0;
    for (int skip = 0; skip <= 1; skip++) {
      dset(sd, POISON_BYTE, n * 4);
      sa.skip_short_rows = skip;
      DSA(dsa_indexer_prefill_scores(&sa, g_stream));
      dget(sh, sd, n * 4);
      for (int t = 0; t < T; t++) {
        if (p.starts[t] < 0) {
          skipped += !skip;
          continue;
        }
        char why[600];
        if (skip && p.len[t] <= c->topk) {
          if (check_score_tail(sh + (int64_t)t * stride, p.len[t], W, stride, why, sizeof why))
            chk_fail("skip_short_rows=1 token %d (rows [%d, %d), not scored): %s", t, p.begin[t],
                     p.begin[t] + p.len[t], why);
          continue;
        }
        double ratio = 0.0;
        if (check_score_row(ref + (int64_t)t * Ls, sh + (int64_t)t * stride, p.len[t], W, stride, p.tol, &ratio, why,
                            sizeof why))
          chk_fail("skip_short_rows=%d token %d (rows [%d, %d)): %s", skip, t, p.begin[t], p.begin[t] + p.len[t],
                   why);
        if (ratio > worst) worst = ratio;
      }
    }
    chk_metric("tokens=%d (%d with negative row_starts not compared) max rows=%d tol=%.0e max err/(tol*max|ref|)=%.3f",
               T, skipped, p.maxlen, p.tol, worst);
    chk_end();
  }

  /* Top-k, reported as workspace rows and as global slots. */
  size_t wsb = 0;
  dsa_indexer_prefill_args a = p.da;
  DSA_Q(dsa_indexer_prefill_workspace_size(&a, &wsb));
  void *ws = workspace(wsb);
  const size_t ni = (size_t)imax(T, 1) * c->topk;
  int32_t *idx_d = dalloc(ni * 4), *len_d = dalloc((size_t)imax(T, 1) * 4);
  int32_t *idx_h = hmalloc(ni * 4), *len_h = hmalloc((size_t)imax(T, 1) * 4);
  int64_t *out_val = hmalloc((size_t)Ls * sizeof *out_val);
  unsigned char *bad = hmalloc((size_t)Ls);
  for (int global = 0; global <= 1; global++) {
    chk_begin("%s: topk, output_global_slots=%d", c->name, global);
    dset(ws, global ? WS_BYTE_RERUN : WS_BYTE_FIRST, wsb);
    dfill_i32(idx_d, ni, POISON_I32);
    dfill_i32(len_d, (size_t)imax(T, 1), POISON_I32);
    a.output_global_slots = global;
    a.topk_indices = idx_d;
    a.topk_lens = len_d;
    DSA(dsa_indexer_prefill(&a, ws, wsb, g_stream));
    dget(idx_h, idx_d, ni * 4);
    dget(len_h, len_d, (size_t)imax(T, 1) * 4);
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
      for (int i = 0; i < p.len[t]; i++) {
        const int64_t w = p.begin[t] + i;
        bad[i] = (unsigned char)prefill_row_bad(&p, w);
        /* Workspace-row mode: a row outside the cache may come back as its row or as -1 (dsa.h only
         * says "as a global slot, is reported as -1"). */
        out_val[i] = global ? (bad[i] ? -1 : p.slots_h[w]) : w;
      }
      topk_row row = {p.len[t], ref + (int64_t)t * Ls, out_val, bad, c->topk, p.tol, idx_h + (int64_t)t * c->topk,
                      1, len_h[t]};
      char why[600];
      if (check_topk_row(&row, why, sizeof why, &worst))
        chk_fail("token %d (row_starts %d, row_ends %d, L=%d): %s", t, p.starts[t], p.ends[t], p.len[t], why);
    }
    chk_metric("tokens=%d max rows=%d topk=%d ws=%zu B, worst pick %.2f eps into the band", T, p.maxlen, c->topk,
               wsb, worst);
    chk_end();
  }

  if (c->check_determinism) { /* the last run (global slots) again, over other workspace garbage */
    chk_begin("%s: determinism (second run, different workspace garbage)", c->name);
    int32_t *idx2 = hmalloc(ni * 4), *len2 = hmalloc((size_t)imax(T, 1) * 4);
    dset(ws, WS_BYTE_FIRST, wsb);
    dfill_i32(idx_d, ni, POISON_I32);
    dfill_i32(len_d, (size_t)imax(T, 1), POISON_I32);
    DSA(dsa_indexer_prefill(&a, ws, wsb, g_stream));
    dget(idx2, idx_d, ni * 4);
    dget(len2, len_d, (size_t)imax(T, 1) * 4);
    for (size_t i = 0; i < ni; i++)
      if (idx2[i] != idx_h[i]) {
        chk_fail("topk_indices[%zu] = %d on the second run, %d on the first", i, idx2[i], idx_h[i]);
        break;
      }
    if (memcmp(len2, len_h, (size_t)T * 4)) chk_fail("topk_lens differ between two runs");
    chk_metric("%zu indices identical", ni);
    chk_end();
  }
}

/* ============================================================================================== */
/* The cases                                                                                      */
/* ============================================================================================== */

static const decode_case k_decode_cases[] = {
    {.name = "indexer decode H32 bf16-q f32-w topk2048 n1 mixed lengths", .H = 32, .topk = 2048, .n = 1,
     .page_size = 64, .nreq = 8, .seq_lens = {0, 100, 2047, 2048, 2049, 5000, 20000, 70000}, .bt_extra = 2,
     .check_scores = 1, .seed = 101},
    {.name = "indexer decode H64 fp8-q bf16-w(stride 72) topk2048 n3 (MTP)", .H = 64, .q_fp8 = 1, .w_bf16 = 1,
     .w_extra = 8, .topk = 2048, .n = 3, .page_size = 64, .nreq = 5, .seq_lens = {2, 2050, 2051, 9000, 30000},
     .check_scores = 1, .check_determinism = 1, .seed = 102},
    {.name = "indexer decode H8 bf16-q bf16-w topk512 n8 exact max_seq_len, lens NULL", .H = 8, .w_bf16 = 1,
     .topk = 512, .n = 8, .page_size = 64, .nreq = 5, .seq_lens = {515, 519, 600, 4000, 12000}, .bt_extra = 3,
     .exact_max_seq_len = 1, .lens_null = 1, .check_scores = 1, .seed = 103},
    {.name = "indexer decode H32 fp8-q f32-w(stride 36) topk100 bad page ids + clamped seq_lens", .H = 32, .q_fp8 = 1,
     .w_extra = 4, .topk = 100, .n = 1, .page_size = 64, .nreq = 7, .seq_lens = {150, 70, 3000, 50000, 0, 101, 100},
     .max_blocks = 60, .bt_extra = 1, .bad_pages = 1, .check_scores = 1, .seed = 104},
    {.name = "indexer decode H32 bf16-q f32-w topk2048 n1 exact ties", .H = 32, .topk = 2048, .n = 1, .page_size = 64,
     .nreq = 4, .seq_lens = {5000, 3000, 2048, 9000}, .ties = {2, 1, 1, 2}, .check_scores = 1, .seed = 105},
    {.name = "indexer decode H32 bf16-q bf16-w topk512 n1 batch of 24 random lengths", .H = 32, .w_bf16 = 1,
     .topk = 512, .n = 1, .page_size = 64, .nreq = 24, .rand_len_max = 6000, .seed = 106},
    {.name = "indexer decode H64 bf16-q f32-w topk1024 n2", .H = 64, .topk = 1024, .n = 2, .page_size = 64,
     .nreq = 3, .seq_lens = {1025, 1500, 40000}, .check_scores = 1, .seed = 107},
    /* MTP 8 at 64 heads (the widest decode group: 512 q rows), lengths around topk: request 0's
     * tokens see 2041..2048 positions (all selected, nothing scored), request 1's 2042..2049 (its
     * last token one above topk), request 2's 2049..2056, request 4's 0..7. */
    {.name = "indexer decode H64 fp8-q f32-w topk2048 n8 (MTP 8), L around topk", .H = 64, .q_fp8 = 1,
     .topk = 2048, .n = 8, .page_size = 64, .nreq = 5, .seq_lens = {2048, 2049, 2056, 20000, 7},
     .check_scores = 1, .check_determinism = 1, .seed = 109},
    {.name = "indexer decode H64 bf16-q bf16-w topk2048 n8 (MTP 8)", .H = 64, .w_bf16 = 1, .topk = 2048, .n = 8,
     .page_size = 64, .nreq = 3, .seq_lens = {9000, 2055, 33000}, .check_scores = 1, .seed = 110},
    /* The fused indexer (FP8 q, 64-key pages): every key identical (b1 holds the whole row: digit
     * passes, equal keys taken lowest position first across CTAs), four distinct keys, random rows
     * (b1 gathered), a row just above topk, 1M-class rows over every CTA; then MTP 4 the same. */
    {.name = "indexer decode H32 fp8-q f32-w topk2048 n1 fused: ties, distinct values, long rows", .H = 32,
     .q_fp8 = 1, .topk = 2048, .n = 1, .page_size = 64, .nreq = 6,
     .seq_lens = {70000, 140000, 5000, 2049, 300000, 4100}, .ties = {1, 2, 0, 1, 0, 2}, .bad_pages = 1,
     .check_determinism = 1, .seed = 111},
    {.name = "indexer decode H32 fp8-q bf16-w topk2048 n4 (MTP 4) fused: ties and random", .H = 32, .q_fp8 = 1,
     .w_bf16 = 1, .topk = 2048, .n = 4, .page_size = 64, .nreq = 3, .seq_lens = {100000, 2050, 66000},
     .ties = {2, 0, 1}, .check_determinism = 1, .seed = 112},
    /* Rows longer than the one-CTA top-k limit (128k): the histogram / filter / resolve chain. */
    {.name = "indexer decode H32 fp8-q f32-w topk2048 n1 long rows (multi-CTA top-k)", .H = 32, .q_fp8 = 1,
     .topk = 2048, .n = 1, .page_size = 64, .nreq = 3, .seq_lens = {140000, 3000, 135000}, .bad_pages = 1,
     .check_scores = 1, .seed = 108},
    /* Deferred resolve (workspace capped at 4 MiB: a group of 12 requests scored 8 + 4 at a time):
     * every key identical (L = 70000: the threshold bin overflows the composites, resolved in its
     * chunk), four distinct keys (17,500 a value: overflows too), random rows around topk and L = 0. */
    {.name = "indexer decode H32 fp8-q f32-w topk2048 n1 deferred resolve (4 MiB workspace), ties", .H = 32,
     .q_fp8 = 1, .topk = 2048, .n = 1, .page_size = 64, .nreq = 12,
     .seq_lens = {70000, 69000, 2049, 0, 45000, 70000, 2048, 60000, 41000, 100, 66000, 50000},
     .ties = {1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1}, .bad_pages = 1, .ws_cap_mib = 4, .check_determinism = 1,
     .seed = 109},
    {.name = "indexer decode H64 bf16-q f32-w topk1024 n2 (MTP) deferred resolve (4 MiB workspace)", .H = 64,
     .topk = 1024, .n = 2, .page_size = 64, .nreq = 7, .seq_lens = {50000, 43000, 1025, 48000, 20000, 50000, 44000},
     .ws_cap_mib = 4, .seed = 110},
};

static const prefill_case k_prefill_cases[] = {
    {.name = "indexer prefill H32 fp8-q f32-w topk2048 long rows (multi-CTA top-k)", .H = 32, .q_fp8 = 1,
     .topk = 2048, .W = 140000, .n_causal = 2, .causal_end = 140000, .n_extra = 1, .xs = {5000}, .xe = {139000},
     .n_bad = 2, .bad_rows = {7000, 100000}, .seed = 204},
    {.name = "indexer prefill H32 bf16-q f32-w topk2048", .H = 32, .topk = 2048, .W = 41000, .n_causal = 4,
     .causal_end = 41000, .n_extra = 10,
     .xs = {1000, 5000, 7000, 300, 900, 40500, 20000, -30, 100, 41000},
     .xe = {1500, 7048, 9049, 300, 100, 41600, 26000, 70, 2100, 41010},
     .n_bad = 3, .bad_rows = {1200, 20500, 30000}, .seed = 201},
    {.name = "indexer prefill H64 fp8-q bf16-w(stride 72) topk512", .H = 64, .q_fp8 = 1, .w_bf16 = 1, .w_extra = 8,
     .topk = 512, .W = 12000, .n_causal = 6, .causal_end = 12000, .n_extra = 5,
     .xs = {100, 50, 3000, 11990, 0}, .xe = {612, 60, 3513, 12500, 0},
     .n_bad = 3, .bad_rows = {55, 5000, 11995}, .seed = 202},
    /* Several of the FP8 scorer's 16-token groups (40 causal tokens + extras), and 64 heads with bf16 q. */
    {.name = "indexer prefill H32 fp8-q f32-w topk2048 40 causal tokens (three token groups)", .H = 32, .q_fp8 = 1,
     .topk = 2048, .W = 30000, .n_causal = 40, .causal_end = 30000, .n_extra = 3, .xs = {0, 2000, 29000},
     .xe = {2049, 2000, 30000}, .n_bad = 2, .bad_rows = {10, 25000}, .seed = 205},
    {.name = "indexer prefill H64 bf16-q f32-w topk2048 12 causal tokens", .H = 64, .topk = 2048, .W = 20000,
     .n_causal = 12, .causal_end = 20000, .n_extra = 2, .xs = {100, 19000}, .xe = {2149, 20000}, .n_bad = 1,
     .bad_rows = {4000}, .seed = 206},
    /* Deferred resolve (workspace capped at 6 MiB: two groups of 19 tokens, each scored 17 + 2 at a
     * time), across the scorer's 16-token groups. */
    {.name = "indexer prefill H32 fp8-q f32-w topk2048 38 tokens, deferred resolve (6 MiB workspace)", .H = 32,
     .q_fp8 = 1, .topk = 2048, .W = 50000, .n_causal = 36, .causal_end = 50000, .n_extra = 2, .xs = {0, 100},
     .xe = {2049, 45000}, .n_bad = 2, .bad_rows = {30, 42000}, .ws_cap_mib = 6, .seed = 207},
    {.name = "indexer prefill H8 bf16-q bf16-w topk100 chunk of 64 tokens, exact max_rows", .H = 8, .w_bf16 = 1,
     .topk = 100, .W = 1600, .n_causal = 64, .causal_end = 1500, .n_extra = 2, .xs = {10, 1550},
     .xe = {110, 1650}, .n_bad = 2, .bad_rows = {20, 700}, .exact_max_rows = 1, .seed = 203},
    /* The fused prefill indexer (FP8 q; the cases above with FP8 q run it too: rows up to its
     * candidate capacity keep every key, longer ones — 140k, 50k — are sampled). Every key identical
     * (the sample's k-th by position: equal scores kept lowest position first across CTAs and
     * lists), four distinct keys, sample tiles near zero (the threshold passes about half of a 140k
     * row, the list overflows: the select step rescores those tokens exactly), 64 index heads with
     * lengths just above topk and around the 1,024-key sample tiles. */
    {.name = "indexer prefill H32 fp8-q f32-w topk2048 fused: every key identical, long rows", .H = 32, .q_fp8 = 1,
     .topk = 2048, .W = 140000, .n_causal = 3, .causal_end = 140000, .n_extra = 2, .xs = {1000, 7},
     .xe = {61000, 2056}, .n_bad = 2, .bad_rows = {50, 99999}, .keys = 1, .check_determinism = 1, .seed = 208},
    {.name = "indexer prefill H32 fp8-q bf16-w topk2048 fused: four distinct keys", .H = 32, .q_fp8 = 1, .w_bf16 = 1,
     .topk = 2048, .W = 60000, .n_causal = 17, .causal_end = 60000, .n_extra = 1, .xs = {3000}, .xe = {59000},
     .keys = 2, .check_determinism = 1, .seed = 209},
    {.name = "indexer prefill H32 fp8-q f32-w topk2048 fused: sample tiles near zero (list overflow, rescored)",
     .H = 32, .q_fp8 = 1, .topk = 2048, .W = 140000, .n_causal = 2, .causal_end = 140000, .n_extra = 2,
     .xs = {0, 500}, .xe = {40000, 3000}, .n_bad = 1, .bad_rows = {77777}, .keys = 3, .check_determinism = 1,
     .seed = 210},
    {.name = "indexer prefill H64 fp8-q f32-w topk2048 fused: lengths around topk and sample tiles", .H = 64,
     .q_fp8 = 1, .topk = 2048, .W = 70000, .n_causal = 9, .causal_end = 70000, .n_extra = 9,
     .xs = {0, 0, 0, 1023, 1024, 5, 50001, 64, 0}, .xe = {2049, 2048, 2047, 52224, 52225, 49157, 70000, 49216, 49153},
     .n_bad = 2, .bad_rows = {1024, 51200}, .check_determinism = 1, .seed = 211},
    /* small rows sampled (topk 100 keeps 4,096 candidates: rows past that are sampled), for racecheck */
    {.name = "indexer prefill H32 fp8-q f32-w topk100 fused: small sampled rows", .H = 32, .q_fp8 = 1, .topk = 100,
     .W = 12000, .n_causal = 20, .causal_end = 12000, .n_extra = 2, .xs = {0, 6000}, .xe = {4097, 6101}, .n_bad = 1,
     .bad_rows = {5000}, .check_determinism = 1, .seed = 213},
    /* fused with a 3 MiB workspace: chunks of 13 tokens (~227 KiB each) cross the scorer's 16-token groups */
    {.name = "indexer prefill H32 fp8-q f32-w topk1024 fused: 3 MiB workspace, chunks across token groups", .H = 32,
     .q_fp8 = 1, .topk = 1024, .W = 120000, .n_causal = 20, .causal_end = 120000, .n_extra = 1, .xs = {90000},
     .xe = {92000}, .ws_cap_mib = 3, .check_determinism = 1, .seed = 212},
};

int main(void) {
  const int init = harness_init("test_gpu_indexer");
  if (init) return init;
  const double t0 = now_s();
  int alive = 1;
  for (int i = 0; alive && i < COUNT(k_decode_cases); i++)
    alive = harness_run_case(k_decode_cases[i].name, decode_case_run, &k_decode_cases[i]);
  for (int i = 0; alive && i < COUNT(k_prefill_cases); i++)
    alive = harness_run_case(k_prefill_cases[i].name, prefill_case_run, &k_prefill_cases[i]);
  fprintf(stderr, "  [total %.1f s]\n", now_s() - t0);
  return harness_finish();
}
