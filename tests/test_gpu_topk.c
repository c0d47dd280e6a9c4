/*
 * test_gpu_topk.c — plain top-k (dsa_topk) on the GPU against the CPU reference's selection
 * (dsa_ref_topk_row_f64): exact, the selected set is the reference's (score descending, position
 * ascending, NaN below everything): the comparison of float32 values is exact on the GPU too; lens
 * exact, -1 tail exact, no duplicates. Rows of every kind (score_rows.h): random, negative, all
 * equal, few values, NaN / -inf, mostly or all NaN, one crowded radix bin; lengths 0 to 300,000.
 * The kernel is the choice table's (registers for rows up to 16,384, slices, the chain for many
 * long rows); DSA_KERNEL=topk:chain or topk:slices forces one (cmake/dsa_tests.cmake runs both).
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
#include <stdlib.h>
#include <string.h>

#include "dsa.h"
#include "dsa_ref.h"
#include "gpu_harness.h"
#include "row_checks.h"
#include "score_rows.h"

/* ============================================================================================== */
/* Plain top-k                                                                                    */
/* ============================================================================================== */

typedef struct {
  const char *name;
  int num_rows, max_len, topk, stride_extra;
  int lens_null, out_lens_null;
  int len[16], kind[16];  /* per row (rows past 16, or rand_rows: random length and kind) */
  int rand_rows;
  uint64_t seed;
} topk_case;

static void topk_case_run(const void *arg) {
  const topk_case *c = arg;
  rng_seed(c->seed);
  const int R = c->num_rows, topk = c->topk;
  const int64_t stride = (int64_t)c->max_len + c->stride_extra;
  int32_t *lens_in = hmalloc((size_t)imax(R, 1) * 4);
  int *kind = hmalloc((size_t)imax(R, 1) * sizeof *kind);
  for (int r = 0; r < R; r++) {
    if (c->rand_rows || r >= 16) {
      double u = rng_unit();
      lens_in[r] = u < 0.1 ? 0 : u < 0.2 ? topk : u < 0.3 ? topk + 1 : (int32_t)rng_below(c->max_len + 1);
      kind[r] = (int)rng_below(R_NUM_KINDS);
    } else {
      lens_in[r] = c->len[r];
      kind[r] = c->kind[r];
    }
  }
  /* Scores; positions at and past each row's length hold +inf: they must never be picked. */
  const size_t ns = (size_t)imax(R, 1) * (size_t)stride;
  float *sh = hmalloc(ns * 4);
  int *L = hmalloc((size_t)imax(R, 1) * sizeof *L);
  for (int r = 0; r < R; r++) {
    L[r] = c->lens_null ? c->max_len : imin(imax(lens_in[r], 0), c->max_len);
    fill_score_row(sh + (int64_t)r * stride, L[r], kind[r]);
    for (int64_t i = L[r]; i < stride; i++) sh[(int64_t)r * stride + i] = INFINITY;
  }

  chk_begin("%s", c->name);
  dsa_topk_args a;
  memset(&a, 0, sizeof a);
  a.scores = dput(sh, ns * 4);
  a.scores_stride = stride;
  a.num_rows = R;
  a.row_lens = c->lens_null ? NULL : dput(lens_in, (size_t)imax(R, 1) * 4);
  a.max_len = c->max_len;
  a.topk = topk;
  const size_t ni = (size_t)imax(R, 1) * topk;
  int32_t *idx_d = dalloc(ni * 4), *len_d = dalloc((size_t)imax(R, 1) * 4);
  dfill_i32(idx_d, ni, POISON_I32);
  dfill_i32(len_d, (size_t)imax(R, 1), POISON_I32);
  a.indices = idx_d;
  a.lens = c->out_lens_null ? NULL : len_d;
  size_t wsb = 0;
  DSA_Q(dsa_topk_workspace_size(&a, &wsb));
  void *ws = workspace(wsb);
  DSA(dsa_topk(&a, ws, wsb, g_stream));
  int32_t *idx_h = hmalloc(ni * 4), *len_h = hmalloc((size_t)imax(R, 1) * 4);
  dget(idx_h, idx_d, ni * 4);
  dget(len_h, len_d, (size_t)imax(R, 1) * 4);

  double *drow = hmalloc((size_t)imax(c->max_len, 1) * sizeof *drow);
  int32_t *expect = hmalloc((size_t)topk * 4), *got = hmalloc((size_t)topk * 4);
  long long total_sel = 0;
  for (int r = 0; r < R; r++) {
    const int32_t *g = idx_h + (int64_t)r * topk;
    for (int i = 0; i < L[r]; i++) drow[i] = (double)sh[(int64_t)r * stride + i];
    const int K = dsa_ref_topk_row_f64(drow, L[r], topk, expect);
    if (K != imin(L[r], topk)) abort_case("reference returned %d entries for row %d (L=%d)", K, r, L[r]);
    total_sel += K;
    const char *kn = k_row_kind_name[kind[r]];
    if (c->out_lens_null) {
      if (len_h[r] != POISON_I32) chk_fail("row %d: lens is NULL but the lens buffer was written", r);
    } else if (len_h[r] != K) {
      chk_fail("row %d (%s, L=%d): lens = %d, expected %d", r, kn, L[r], len_h[r], K);
      continue;
    }
    int bad = 0;
    for (int j = K; j < topk && !bad; j++)
      if (g[j] != -1) {
        chk_fail("row %d (%s, L=%d): entry %d past the %d valid ones is %d, not -1", r, kn, L[r], j, K, g[j]);
        bad = 1;
      }
    if (bad) continue;
    memcpy(got, g, (size_t)K * 4);
    qsort(got, (size_t)K, 4, cmp_i32);
    qsort(expect, (size_t)K, 4, cmp_i32);
    for (int j = 0; j < K; j++) {
      if (got[j] < 0 || got[j] >= L[r]) {
        chk_fail("row %d (%s, L=%d): entry %d is outside the row", r, kn, L[r], got[j]);
        break;
      }
      if (j > 0 && got[j] == got[j - 1]) {
        chk_fail("row %d (%s, L=%d): position %d selected twice", r, kn, L[r], got[j]);
        break;
      }
      if (got[j] != expect[j]) {
        /* Name the first position that the one picked and the other did not. */
        int missing = -1, extra = -1;
        for (int x = 0, y = 0; x < K || y < K;) {
          if (y >= K || (x < K && expect[x] < got[y])) { missing = expect[x]; break; }
          if (x >= K || got[y] < expect[x]) { extra = got[y]; break; }
          x++;
          y++;
        }
        const float *row = sh + (int64_t)r * stride;
        if (missing >= 0)
          chk_fail("row %d (%s, L=%d): position %d (score %.9g) should be selected (ties go to the lower "
                   "position, NaN ranks last) but is not", r, kn, L[r], missing, (double)row[missing]);
        else
          chk_fail("row %d (%s, L=%d): position %d (score %.9g) is selected but ranks below the top %d", r, kn,
                   L[r], extra, (double)row[extra], K);
        break;
      }
    }
  }
  chk_metric("rows=%d max_len=%d stride=%lld topk=%d, %lld selections exact, ws=%zu B", R, c->max_len,
             (long long)stride, topk, total_sel, wsb);
  chk_end();
}

/* ============================================================================================== */
/* The cases                                                                                      */
/* ============================================================================================== */

static const topk_case k_topk_cases[] = {
    {.name = "topk 2048: lengths 0/50/2048/2049/70000, NaN, -inf, ties, all-equal, clamped lengths", .num_rows = 12,
     .max_len = 70000, .topk = 2048, .stride_extra = 13,
     .len = {0, 50, 2048, 2049, 70000, 9000, 5000, 6000, 3000, -5, 100000, 2500},
     .kind = {R_RANDOM, R_RANDOM, R_RANDOM, R_NEG, R_RANDOM, R_EQUAL, R_FEW, R_NAN_INF, R_MOSTLY_NAN, R_RANDOM,
              R_RANDOM, R_ALL_NAN},
     .seed = 301},
    {.name = "topk 512: row_lens NULL, lens NULL", .num_rows = 6, .max_len = 3000, .topk = 512, .lens_null = 1,
     .out_lens_null = 1, .kind = {R_RANDOM, R_EQUAL, R_FEW, R_NAN_INF, R_NEG, R_MOSTLY_NAN}, .seed = 302},
    {.name = "topk 100: ties and NaN", .num_rows = 8, .max_len = 1000, .topk = 100, .stride_extra = 8,
     .len = {1000, 100, 99, 101, 1000, 1000, 1000, 500},
     .kind = {R_FEW, R_EQUAL, R_FEW, R_FEW, R_NAN_INF, R_MOSTLY_NAN, R_ALL_NAN, R_EQUAL}, .seed = 303},
    {.name = "topk 2048: long rows (300000, 250001 of few values)", .num_rows = 2, .max_len = 300000, .topk = 2048,
     .len = {300000, 250001}, .kind = {R_RANDOM, R_FEW}, .seed = 304},
    {.name = "topk 2048: one crowded radix bin (20000 and 100000 rows in [1, 1.125))", .num_rows = 2,
     .max_len = 100000, .topk = 2048, .len = {20000, 100000}, .kind = {R_NARROW, R_NARROW}, .seed = 306},
    {.name = "topk 2048: crowded bin, multi-CTA path (max_len 300000: 20000, 200000, 150000 in [1, 1.125))",
     .num_rows = 3, .max_len = 300000, .topk = 2048, .len = {20000, 200000, 150000},
     .kind = {R_NARROW, R_NARROW, R_RANDOM}, .seed = 307},
    {.name = "topk 37: 300 rows, random lengths and kinds", .num_rows = 300, .max_len = 1500, .topk = 37,
     .stride_extra = 1, .rand_rows = 1, .seed = 305},
    /* the slices kernel's shapes: clusters of 2 and 4 CTAs (rows x C <= SMs), and many rows of up to
     * 40,960 one CTA each (C = 2 would need more CTAs than SMs) */
    {.name = "topk 2048: cluster of 2 (max_len 20000: 20000, 16385, 2049 of narrow / equal)", .num_rows = 3,
     .max_len = 20000, .topk = 2048, .stride_extra = 3, .len = {20000, 16385, 2049},
     .kind = {R_RANDOM, R_NARROW, R_EQUAL}, .seed = 308},
    {.name = "topk 2048: cluster of 4 (max_len 40000: 40000, 30001, 12345 of few values / NaN, inf)",
     .num_rows = 3, .max_len = 40000, .topk = 2048, .len = {40000, 30001, 12345}, .kind = {R_RANDOM, R_FEW, R_NAN_INF},
     .seed = 309},
    {.name = "topk 2048: 140 rows of up to 40960, one CTA each", .num_rows = 140, .max_len = 40960, .topk = 2048,
     .stride_extra = 5, .rand_rows = 1, .seed = 310},
    /* the one-CTA register kernel (rows <= 16,384): 16 keys a thread (max_len 16384, odd stride: rows
     * start unaligned, scalar loads), every kind, lengths around topk and the thread boundaries */
    {.name = "topk 2048: small-row kernel, 16 keys a thread (max_len 16384, odd stride)", .num_rows = 12,
     .max_len = 16384, .topk = 2048, .stride_extra = 7,
     .len = {16384, 2049, 2048, 0, 16383, 9000, 8193, 12000, 4097, 16384, 3000, 10000},
     .kind = {R_RANDOM, R_RANDOM, R_RANDOM, R_RANDOM, R_EQUAL, R_FEW, R_NAN_INF, R_MOSTLY_NAN, R_NARROW, R_NEG,
              R_ALL_NAN, R_RANDOM},
     .seed = 311},
    {.name = "topk 1024: small-row kernel, 8 keys a thread, aligned rows (max_len 8192), 200 rows", .num_rows = 200,
     .max_len = 8192, .topk = 1024, .rand_rows = 1, .seed = 312},
};

int main(void) {
  const int init = harness_init("test_gpu_topk");
  if (init) return init;
  const double t0 = now_s();
  int alive = 1;
  for (int i = 0; alive && i < COUNT(k_topk_cases); i++)
    alive = harness_run_case(k_topk_cases[i].name, topk_case_run, &k_topk_cases[i]);
  fprintf(stderr, "  [total %.1f s]\n", now_s() - t0);
  return harness_finish();
}
