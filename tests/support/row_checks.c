/*
 * row_checks.c — see row_checks.h.
 */
#include "row_checks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static int min_int(int a, int b) { return a < b ? a : b; }

/* The part of a scores row past L: -inf in [L, W) (DESIGN §3: the call covers W = max_len
 * columns), the poison in [W, row_cap) (the stride's padding is never written). */
int check_score_tail(const float *gpu, int L, int64_t W, int64_t row_cap, char *why, size_t wn) {
  for (int64_t i = L; i < W; i++)
    if (!(isinf(gpu[i]) && gpu[i] < 0)) {
      snprintf(why, wn, "position %lld in [L = %d, max_len = %lld) holds %.9g (must be -inf)", (long long)i, L,
               (long long)W, (double)gpu[i]);
      return 1;
    }
  for (int64_t i = W > L ? W : L; i < row_cap; i++)
    if (bits_of(gpu[i]) != POISON_F32_BITS) {
      snprintf(why, wn, "position %lld at or past max_len = %lld was written (%.9g)", (long long)i, (long long)W,
               (double)gpu[i]);
      return 1;
    }
  return 0;
}

/* One row of GPU scores against the float64 reference: ratio = max err / (tol * max |ref|).
 * Positions the reference scores -inf (outside the cache) must be -inf; the tail as
 * check_score_tail. Returns 0 or fills why. */
int check_score_row(const double *ref, const float *gpu, int L, int64_t W, int64_t row_cap, double tol,
                    double *ratio, char *why, size_t wn) {
  double maxabs = 0.0, maxerr = 0.0;
  int at = -1;
  for (int i = 0; i < L; i++)
    if (isfinite(ref[i]) && fabs(ref[i]) > maxabs) maxabs = fabs(ref[i]);
  for (int i = 0; i < L; i++) {
    if (!isfinite(ref[i])) {
      if (!(isinf(gpu[i]) && gpu[i] < 0)) {
        snprintf(why, wn, "position %d lies outside the cache (reference -inf) but the GPU score is %.9g", i,
                 (double)gpu[i]);
        return 1;
      }
      continue;
    }
    if (!isfinite(gpu[i])) {
      snprintf(why, wn, "position %d: GPU score %g is not finite (reference %.10g)", i, (double)gpu[i], ref[i]);
      return 1;
    }
    double e = fabs((double)gpu[i] - ref[i]);
    if (e > maxerr) {
      maxerr = e;
      at = i;
    }
  }
  *ratio = maxabs > 0 ? maxerr / (tol * maxabs) : (maxerr > 0 ? INFINITY : 0.0);
  if (*ratio > 1.0) {
    snprintf(why, wn,
             "max |gpu - ref| = %.3g > tol %.0e * max|ref| %.5g (position %d: gpu %.9g, ref %.10g)", maxerr,
             tol, maxabs, at, (double)gpu[at], ref[at]);
    return 1;
  }
  return check_score_tail(gpu, L, W, row_cap, why, wn);
}

typedef struct {
  int64_t v;
  int32_t pos;
} val_pos;

static int cmp_val_pos(const void *a, const void *b) {
  const val_pos *x = a, *y = b;
  return (x->v > y->v) - (x->v < y->v);
}

static int cmp_double_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* DESIGN.md §5 top-k criterion for one token. Returns 0 or fills why; *worst = max over selected
 * entries of (kth - score) / eps (how far into the eps band the worst pick lies). */
int check_topk_row(const topk_row *r, char *why, size_t wn, double *worst) {
  const int L = r->L, K = min_int(r->L, r->topk);
  int rc = 1;
  val_pos *map = NULL;
  unsigned char *seen = NULL;
  double *sorted = NULL;
  if (r->has_len && r->got_len != K) {
    snprintf(why, wn, "lens = %d, expected min(topk %d, L %d) = %d", r->got_len, r->topk, L, K);
    return 1;
  }
  for (int j = K; j < r->topk; j++)
    if (r->got[j] != -1) {
      snprintf(why, wn, "entry %d (past the %d valid ones) is %d, not -1", j, K, r->got[j]);
      return 1;
    }
  if (K == 0) return 0;
  map = malloc((size_t)L * sizeof *map);
  seen = calloc((size_t)L, 1);
  if (!map || !seen) {
    snprintf(why, wn, "out of host memory");
    goto out;
  }
  int nmap = 0, nbad = 0;
  for (int i = 0; i < L; i++) {
    if (r->bad[i]) nbad++;
    if (r->out_val[i] >= 0) {
      map[nmap].v = r->out_val[i];
      map[nmap].pos = i;
      nmap++;
    }
  }
  qsort(map, (size_t)nmap, sizeof *map, cmp_val_pos);
  int nminus1 = 0, nbad_sel = 0, nsel = 0;
  for (int j = 0; j < K; j++) {
    int32_t v = r->got[j];
    if (v == -1) {
      nminus1++;
      continue;
    }
    val_pos key = {v, 0};
    const val_pos *hit = v >= 0 ? bsearch(&key, map, (size_t)nmap, sizeof *map, cmp_val_pos) : NULL;
    if (!hit) {
      snprintf(why, wn, "entry %d = %d is not a visible position of this token (poison is %d)", j, v, POISON_I32);
      goto out;
    }
    if (seen[hit->pos]) {
      snprintf(why, wn, "entry %d = %d duplicates an earlier entry (position %d)", j, v, hit->pos);
      goto out;
    }
    seen[hit->pos] = 1;
    nsel++;
    if (r->bad[hit->pos]) nbad_sel++;
  }
  if (nminus1 + nbad_sel > nbad) {
    snprintf(why, wn, "%d valid entries are -1 (or rows outside the cache) but only %d visible positions lie "
             "outside the cache", nminus1 + nbad_sel, nbad);
    goto out;
  }
  if (L <= r->topk) {
    for (int i = 0; i < L; i++)
      if (!r->bad[i] && !seen[i]) {
        snprintf(why, wn, "L = %d <= topk = %d but visible position %d (reported as %lld) is not selected", L,
                 r->topk, i, (long long)r->out_val[i]);
        goto out;
      }
    rc = 0;
    goto out;
  }
  sorted = malloc((size_t)L * sizeof *sorted);
  if (!sorted) {
    snprintf(why, wn, "out of host memory");
    goto out;
  }
  memcpy(sorted, r->score, (size_t)L * sizeof *sorted);
  qsort(sorted, (size_t)L, sizeof *sorted, cmp_double_desc);
  const double kth = sorted[K - 1];
  double maxabs = 0.0;
  for (int i = 0; i < L; i++)
    if (isfinite(r->score[i]) && fabs(r->score[i]) > maxabs) maxabs = fabs(r->score[i]);
  const double eps = r->tol * maxabs;
  if (nminus1 > 0 && kth > -INFINITY) {
    snprintf(why, wn, "%d valid entries are -1 (positions outside the cache, score -inf) while the k-th score "
             "%.10g is finite", nminus1, kth);
    goto out;
  }
  for (int i = 0; i < L; i++) {
    if (!seen[i]) continue;
    if (r->score[i] < kth - eps) {
      snprintf(why, wn, "selected position %d (reported as %lld) has score %.10g < k-th %.10g - eps %.3g", i,
               (long long)r->out_val[i], r->score[i], kth, eps);
      goto out;
    }
    if (r->score[i] < kth && eps > 0 && (kth - r->score[i]) / eps > *worst) *worst = (kth - r->score[i]) / eps;
  }
  for (int i = 0; i < L; i++)
    if (!seen[i] && r->score[i] > kth + eps) {
      snprintf(why, wn, "position %d (score %.10g) exceeds the k-th score %.10g by more than eps %.3g but is "
               "not selected", i, r->score[i], kth, eps);
      goto out;
    }
  rc = 0;
out:
  free(sorted);
  free(seen);
  free(map);
  return rc;
}
