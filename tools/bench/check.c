/*
 * check.c — --check: a row's outputs (from the one run before timing) against the float64 CPU
 * reference (dsa_ref.h), by DESIGN.md §5's criteria, through the GPU tests' row checks
 * (tests/support/row_checks.h): scores within tol x the row's largest |ref|; top-k: lens =
 * min(topk, L), -1 after it, distinct visible positions, none selected whose score is below the
 * k-th's - eps and none left out above the k-th's + eps; attention on the GPU's own top-k: relative
 * L2 <= TOL_ATTN_OUT a token, lse within TOL_ATTN_LSE (relative above 1). A row keeps its first
 * failure.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dsa_ref.h"
#include "row_checks.h"

typedef struct {
  int fails;
  char msg[320];
} check_state;

static void check_fail(check_state *c, const char *fmt, ...) {
  if (c->fails++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
  }
}

static double score_tol(const bench *b) { return b->o.q_fp8 ? TOL_SCORE_FP8 : TOL_SCORE_BF16; }

/* Scores of token t, positions [0, L), against the reference (row_checks.h). */
static void check_scores(check_state *c, int t, const float *gpu, const double *ref, int L, double tol) {
  double ratio = 0.0;
  char why[256];
  if (check_score_row(ref, gpu, L, L, L, tol, &ratio, why, sizeof why)) check_fail(c, "token %d scores: %s", t, why);
}

/* Top-k of one token (row_checks.h's criterion). idx holds global slots; the token's positions
 * [begin, begin + L) live in block-table row r, so position p is slot bt[p / PAGE] * PAGE + p % PAGE.
 * ref (L reference scores) may be NULL when L <= topk (every position must be selected). */
static void check_topk(bench *b, check_state *c, int t, int r, const double *ref, int64_t begin, int L,
                       const int32_t *idx, int32_t len, double tol) {
  const int32_t *bt = b->h_block_table + (size_t)r * b->ppr;
  for (int i = 0; i < L; i++) {
    const int64_t p = begin + i;
    b->slot_of_pos[i] = (int64_t)bt[p / PAGE] * PAGE + p % PAGE;
  }
  topk_row row = {.L = L, .score = ref, .out_val = b->slot_of_pos, .bad = b->no_bad_pos, .topk = b->o.topk,
                  .tol = tol, .got = idx, .has_len = 1, .got_len = len};
  double worst = 0.0;
  char why[256];
  if (check_topk_row(&row, why, sizeof why, &worst)) check_fail(c, "token %d top-k: %s", t, why);
}

/* Attention of tokens [t0, t0 + nt) on the GPU's own top-k (h_topk / h_lens already copied). */
static void check_attention(bench *b, check_state *c, int t0, int nt, int H) {
  dsa_sparse_mla_args ra = attn_args(b, nt, H, 1);
  size_t n_out = (size_t)nt * H * V_DIM;
  ra.q = b->h_q_attn + (size_t)t0 * H * QK_DIM;
  ra.indices = b->h_topk + (size_t)t0 * b->o.topk;
  ra.lens = b->h_lens + t0;
  float *ref_out = xmalloc(sizeof(float) * n_out);
  float *ref_lse = xmalloc(sizeof(float) * (size_t)nt * H);
  uint16_t *gpu_out = xmalloc(2 * n_out);
  float *gpu_lse = xmalloc(sizeof(float) * (size_t)nt * H);
  ra.lse = ref_lse;
  dsa_ref_sparse_mla(&ra, ref_out);
  CK(cudaMemcpy(gpu_out, b->d_out + (size_t)t0 * H * V_DIM, 2 * n_out, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(gpu_lse, b->d_lse + (size_t)t0 * H, sizeof(float) * (size_t)nt * H,
                cudaMemcpyDeviceToHost));
  for (int t = 0; t < nt; t++) {
    double num = 0.0, den = 0.0;
    for (size_t i = (size_t)t * H * V_DIM; i < (size_t)(t + 1) * H * V_DIM; i++) {
      double g = dsa_bf16_to_float(gpu_out[i]), r = ref_out[i];
      num += (g - r) * (g - r);
      den += r * r;
    }
    double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    if (!(rel <= TOL_ATTN_OUT)) {
      check_fail(c, "token %d attention: ||out-ref||/||ref|| = %.3g > %.0e", t0 + t, rel, TOL_ATTN_OUT);
      break;
    }
    for (int h = 0; h < H; h++) {
      double g = gpu_lse[t * H + h], r = ref_lse[t * H + h];
      int ok = isinf(r) ? (g == r) : fabs(g - r) <= TOL_ATTN_LSE * fmax(1.0, fabs(r));
      if (!ok) {
        check_fail(c, "token %d head %d: lse %.7g, ref %.7g", t0 + t, h, g, r);
        break;
      }
    }
  }
  free(ref_out);
  free(ref_lse);
  free(gpu_out);
  free(gpu_lse);
}

void copy_topk_back(bench *b, int T) {
  CK(cudaMemcpy(b->h_topk, b->d_topk, sizeof(int32_t) * (size_t)T * b->o.topk,
                cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b->h_lens, b->d_lens, sizeof(int32_t) * (size_t)T, cudaMemcpyDeviceToHost));
}

/* GPU scores of token t, positions [0, L), from a row of stride S. */
static const float *gpu_scores_row(bench *b, int t, int64_t S, int L) {
  CK(cudaMemcpy(b->h_score_row, b->d_scores + (size_t)t * S, sizeof(float) * (size_t)L,
                cudaMemcpyDeviceToHost));
  return b->h_score_row;
}

static void finish_check(row_result *row, const check_state *c, double t0) {
  row->check = c->fails;
  row->check_s = now_s() - t0;
  snprintf(row->check_msg, sizeof row->check_msg, "%s", c->fails ? c->msg : "ok");
}

/* Decode: requests (all, or a sample), every token: scores, top-k, attention. */
void check_decode(bench *b, row_result *row, int B, int64_t S, int sample, int check_attn) {
  double t0 = now_s();
  check_state c = {0, ""};
  int n = b->o.mtp, H = row->heads;
  copy_topk_back(b, B * n);
  int reqs[3] = {0, B / 2, B - 1};
  int nreq = sample ? 3 : B;
  double *ref = xmalloc(sizeof(double) * (size_t)n * (size_t)S);
  for (int qi = 0; qi < nreq && !c.fails; qi++) {
    int r = sample ? reqs[qi] : qi;
    if (sample && qi > 0 && r == reqs[qi - 1]) continue;
    dsa_indexer_decode_args ha = decode_args(b, B, S, 1);
    ha.query = query_from_token(b, ha.query, r * n);
    ha.seq_lens += r;
    ha.block_table += (size_t)r * b->ppr;
    ha.num_reqs = 1;
    int scored = 0;
    for (int j = 0; j < n; j++) scored |= dsa_ref_decode_len(&ha, j) > b->o.topk;
    if (scored) dsa_ref_indexer_decode_scores_f64(&ha, ref, S);
    for (int j = 0; j < n; j++) {
      int t = r * n + j, L = dsa_ref_decode_len(&ha, j);
      const double *rrow = ref + (size_t)j * S;
      if (L > b->o.topk) check_scores(&c, t, gpu_scores_row(b, t, S, L), rrow, L, score_tol(b));
      check_topk(b, &c, t, r, L > b->o.topk ? rrow : NULL, 0, L, b->h_topk + (size_t)t * b->o.topk,
                 b->h_lens[t], score_tol(b));
    }
    if (check_attn && !c.fails) check_attention(b, &c, r * n, n, H);
  }
  free(ref);
  finish_check(row, &c, t0);
}

/* Prefill: tokens 0, 31, 63 alone (1-token views of the host arguments). */
void check_prefill(bench *b, row_result *row, int64_t S) {
  double t0 = now_s();
  check_state c = {0, ""};
  const int T = b->o.prefill_tokens;
  const int toks[3] = {0, T / 2 > 0 ? T / 2 - 1 : 0, T - 1};
  copy_topk_back(b, T);
  double *ref = xmalloc(sizeof(double) * (size_t)S);
  for (int k = 0; k < 3 && !c.fails; k++) {
    int t = toks[k];
    dsa_indexer_prefill_args ha = prefill_args(b, S, 1);
    ha.query = query_from_token(b, ha.query, t);
    ha.row_starts += t;
    ha.row_ends += t;
    ha.num_tokens = 1;
    int64_t begin = 0;
    int L = dsa_ref_prefill_range(&ha, 0, &begin);
    if (L > b->o.topk) {
      dsa_ref_indexer_prefill_scores_f64(&ha, ref, S);
      /* The GPU writes row w at scores[t * stride + (w - row_starts[t])]. */
      int64_t off = begin - b->h_row_starts[t];
      CK(cudaMemcpy(b->h_score_row, b->d_scores + (size_t)t * S + off, sizeof(float) * (size_t)L,
                    cudaMemcpyDeviceToHost));
      check_scores(&c, t, b->h_score_row, ref, L, score_tol(b));
    }
    check_topk(b, &c, t, 0, L > b->o.topk ? ref : NULL, begin, L, b->h_topk + (size_t)t * b->o.topk,
               b->h_lens[t], score_tol(b));
    if (!c.fails) check_attention(b, &c, t, 1, row->heads);
  }
  free(ref);
  finish_check(row, &c, t0);
}

/* Attention-only rows: tokens 0, T/2, T-1, each alone, on the indices in h_topk / h_lens. */
void check_attention_tokens(bench *b, row_result *row, int T, int H) {
  double t0 = now_s();
  check_state c = {0, ""};
  const int toks[3] = {0, T / 2, T - 1};
  for (int k = 0; k < 3 && !c.fails; k++) check_attention(b, &c, toks[k], 1, H);
  finish_check(row, &c, t0);
}
