/*
 * test_gpu.c — GPU correctness tests of libdsa (include/dsa.h) against the float64 CPU reference
 * (include/dsa_ref.h), with the acceptance rules of DESIGN.md §5.
 *
 * Every case
 *   - draws fresh random inputs (xorshift64*, a fixed seed per case, no zero values),
 *   - poisons every output before every run (0x7F bytes for float32 / bf16 outputs, -7 for int32
 *     outputs) and fills every workspace with garbage (0xFF; 0x5A on re-runs): kernels may not
 *     rely on a zeroed workspace,
 *   - puts a 256-byte guard after every device buffer and checks all guards after every call,
 *   - after every call synchronises the stream and checks cudaGetLastError.
 *
 * Output: one line per check, "ok   name  (metrics)" or "FAIL name: why", then "N passed, M failed".
 * Exit status 0 only if nothing failed; 77 (ctest: skipped) without an sm_90 GPU.
 *
 * Acceptance (DESIGN.md §5):
 *   scores     max |gpu - ref| <= tol * max |ref| over each row (tol 1e-5 bf16 q, 2e-3 fp8 q);
 *              positions outside the cache must be -inf; positions past L must not be written.
 *   indexer    eps = tol * max |score| of the row (float64 reference scores): every position whose
 *   top-k      score exceeds the k-th score by more than eps is selected, every selected one is
 *              >= k-th - eps; lens exact; -1 tail exact; no duplicates; entries map to visible
 *              positions; L <= topk selects exactly every visible position.
 *   plain      exact: the selected set is the reference's (score descending, position ascending,
 *   top-k      NaN below everything): the comparison of float32 values is exact on the GPU too.
 *   attention  ||out - ref|| / ||ref|| <= 1e-2 per token, |lse - ref| <= 1e-3 * max(1, |ref|);
 *              a token with no valid entry: out exactly 0, lse exactly -inf.
 *   writers    the bytes of the cache equal the reference's bytes exactly (skipped slots untouched).
 */
#define _POSIX_C_SOURCE 200809L

#include <cuda_runtime_api.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsa.h"
#include "dsa_ref.h"
#include "gpu_harness.h"

/* ============================================================================================== */
/* Indexer inputs: query + weights, index-K cache                                                  */
/* ============================================================================================== */

typedef struct {
  int T, H, q_fp8, w_bf16;
  int64_t w_stride;
  void *q_h, *w_h;
  float *qs_h;
  void *q_d, *w_d;
  float *qs_d;
} iq_data;

/* q [T, H, 128] (bf16 uniform(-1, 1), or fp8 codes with q_scale uniform(0.5, 2) / 448); weights
 * [T, w_stride] uniform(-0.5, 1), the w_extra padding columns NaN (they must never be read). */
static void iq_make(iq_data *d, int T, int H, int q_fp8, int w_bf16, int w_extra) {
  memset(d, 0, sizeof *d);
  d->T = T;
  d->H = H;
  d->q_fp8 = q_fp8;
  d->w_bf16 = w_bf16;
  d->w_stride = H + w_extra;
  const size_t nq = (size_t)T * H * D_I, nw = (size_t)T * d->w_stride;
  if (q_fp8) {
    uint8_t *q = hmalloc(nq);
    for (size_t i = 0; i < nq; i++) q[i] = rng_fp8_quantised();
    float *qs = hmalloc((size_t)T * H * sizeof *qs);
    for (size_t i = 0; i < (size_t)T * H; i++) qs[i] = (float)(rng_uniform(0.5, 2.0) / 448.0);
    d->q_h = q;
    d->qs_h = qs;
    d->q_d = dput(q, nq);
    d->qs_d = dput(qs, (size_t)T * H * sizeof *qs);
  } else {
    uint16_t *q = hmalloc(nq * 2);
    fill_bf16(q, nq, 1.0);
    d->q_h = q;
    d->q_d = dput(q, nq * 2);
  }
  if (w_bf16) {
    uint16_t *w = hmalloc(nw * 2);
    for (size_t i = 0; i < nw; i++) {
      uint16_t b;
      do b = to_bf16(rng_uniform(-0.5, 1.0));
      while ((b & 0x7FFF) == 0);
      w[i] = (int64_t)(i % (size_t)d->w_stride) < H ? b : (uint16_t)BF16_NAN;
    }
    d->w_h = w;
    d->w_d = dput(w, nw * 2);
  } else {
    float *w = hmalloc(nw * sizeof *w);
    for (size_t i = 0; i < nw; i++) {
      double v;
      do v = rng_uniform(-0.5, 1.0);
      while (fabs(v) < 1e-3);
      w[i] = (int64_t)(i % (size_t)d->w_stride) < H ? (float)v : NAN;
    }
    d->w_h = w;
    d->w_d = dput(w, nw * sizeof *w);
  }
}

static dsa_indexer_query iq_query(const iq_data *d, int device) {
  dsa_indexer_query q;
  memset(&q, 0, sizeof q);
  q.q = device ? d->q_d : d->q_h;
  q.q_dtype = d->q_fp8 ? DSA_DTYPE_FP8_E4M3 : DSA_DTYPE_BF16;
  q.q_scale = d->q_fp8 ? (device ? d->qs_d : d->qs_h) : NULL;
  q.weights = device ? d->w_d : d->w_h;
  q.weights_dtype = d->w_bf16 ? DSA_DTYPE_BF16 : DSA_DTYPE_F32;
  q.weights_stride = d->w_stride;
  q.num_heads = d->H;
  q.head_dim = D_I;
  q.softmax_scale = (float)(1.0 / sqrt((double)D_I * d->H));
  return q;
}

typedef struct {
  int P;
  int64_t num_pages, num_slots;
  size_t bytes;
  uint16_t *rows; /* bf16 [num_slots, 128]: the keys before quantisation */
  uint8_t *h, *d;
} ik_data;

/* Random bf16 keys, each row with its own amplitude in [0.25, 4]. */
static void ik_gen_rows(ik_data *c, int P, int64_t num_pages) {
  memset(c, 0, sizeof *c);
  c->P = P;
  c->num_pages = num_pages;
  c->num_slots = num_pages * P;
  c->rows = hmalloc((size_t)c->num_slots * D_I * 2);
  for (int64_t s = 0; s < c->num_slots; s++) fill_bf16(c->rows + s * D_I, D_I, rng_log_uniform(0.25, 4.0));
}

/* Quantise every slot's row into the paged layout with the reference writer; upload. */
static void ik_store_upload(ik_data *c) {
  c->bytes = (size_t)c->num_pages * c->P * IK_ROW_BYTES;
  c->h = hmalloc(c->bytes);
  fill_random_bytes(c->h, c->bytes);
  int64_t *map = hmalloc((size_t)c->num_slots * sizeof *map);
  for (int64_t s = 0; s < c->num_slots; s++) map[s] = s;
  dsa_index_k_store_args a;
  memset(&a, 0, sizeof a);
  a.k = c->rows;
  a.k_stride = D_I;
  a.slot_mapping = map;
  a.num_tokens = (int)c->num_slots;
  a.cache = c->h;
  a.num_pages = c->num_pages;
  a.page_size = c->P;
  dsa_ref_index_k_store(&a);
  c->d = dput(c->h, c->bytes);
}

/* ============================================================================================== */
/* Indexer checks shared by decode and prefill                                                     */
/* ============================================================================================== */

/* The part of a scores row past L: -inf in [L, W) (DESIGN §3: the call covers W = max_len
 * columns), the poison in [W, row_cap) (the stride's padding is never written). */
static int check_score_tail(const float *gpu, int L, int64_t W, int64_t row_cap, char *why, size_t wn) {
  for (int64_t i = L; i < W; i++)
    if (!(isinf(gpu[i]) && gpu[i] < 0)) {
      snprintf(why, wn, "position %lld in [L = %d, max_len = %lld) holds %.9g (must be -inf)", (long long)i, L,
               (long long)W, (double)gpu[i]);
      return 1;
    }
  for (int64_t i = W > L ? W : L; i < row_cap; i++)
    if (bits_of_f32(gpu[i]) != POISON_F32_BITS) {
      snprintf(why, wn, "position %lld at or past max_len = %lld was written (%.9g)", (long long)i, (long long)W,
               (double)gpu[i]);
      return 1;
    }
  return 0;
}

/* One row of GPU scores against the float64 reference: ratio = max err / (tol * max |ref|).
 * Positions the reference scores -inf (outside the cache) must be -inf; the tail as
 * check_score_tail. Returns 0 or fills why. */
static int check_score_row(const double *ref, const float *gpu, int L, int64_t W, int64_t row_cap, double tol,
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

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* One token's indexer top-k output. */
typedef struct {
  int L;                     /* visible positions */
  const double *score;       /* reference scores [L]; -inf where the position is outside the cache */
  const int64_t *out_val;    /* [L]: what position i is reported as; -1 = it can only come back as -1 */
  const unsigned char *bad;  /* [L]: position outside the cache (reported as -1, or as out_val) */
  int topk;
  double tol;
  const int32_t *got;        /* [topk] */
  int has_len;
  int32_t got_len;
} topk_row;

/* DESIGN.md §5 top-k criterion for one token. Returns 0 or fills why; *worst = max over selected
 * entries of (kth - score) / eps (how far into the eps band the worst pick lies). */
static int check_topk_row(const topk_row *r, char *why, size_t wn, double *worst) {
  const int L = r->L, K = imin(r->L, r->topk);
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

/* ============================================================================================== */
/* Indexer decode                                                                                  */
/* ============================================================================================== */

typedef struct {
  const char *name;
  int H, q_fp8, w_bf16, w_extra;
  int topk, n, page_size;
  int nreq;
  int seq_lens[32];
  int rand_len_max;       /* > 0: lengths drawn in [0, rand_len_max] instead of seq_lens */
  int max_blocks;         /* 0: enough block-table columns for every request */
  int bt_extra;           /* block_table_stride - max_blocks_per_req (padding columns hold garbage) */
  int bad_pages;          /* page ids outside [0, num_pages) in the block table (see decode_build) */
  int ties[32];           /* per request: 0 random keys, 1 every key identical, 2 four distinct keys */
  int exact_max_seq_len;  /* pass max_seq_len = the largest L instead of 0 */
  int lens_null;          /* topk_lens = NULL */
  int check_scores, check_determinism;
  int ws_cap_mib;         /* > 0: workspace_limit in MiB (reaches the deferred resolve) */
  uint64_t seed;
} decode_case;


typedef struct {
  const decode_case *c;
  int R, n, T, P, maxb, maxL;
  int64_t bt_stride, num_pages;
  int32_t *seq_h, *bt_h;
  int *L;
  ik_data k;
  iq_data q;
  dsa_indexer_decode_args ha, da; /* host-pointer (reference) and device-pointer versions */
  double tol;
} decode_prob;

static void decode_build(const decode_case *c, decode_prob *p) {
  memset(p, 0, sizeof *p);
  rng_seed(c->seed);
  p->c = c;
  p->R = c->nreq;
  p->n = c->n;
  p->T = p->R * p->n;
  p->P = c->page_size;
  const int R = p->R, P = p->P;

  p->seq_h = hmalloc((size_t)imax(R, 1) * sizeof *p->seq_h);
  for (int r = 0; r < R; r++)
    p->seq_h[r] = c->rand_len_max > 0 ? (int32_t)rng_below(c->rand_len_max + 1) : c->seq_lens[r];

  /* Block table: every request owns distinct pages taken from a random permutation of the cache. */
  int maxb = c->max_blocks;
  if (maxb <= 0) {
    maxb = 1;
    for (int r = 0; r < R; r++) maxb = imax(maxb, (int)ceil_div(imax(p->seq_h[r], 0), P));
  }
  p->maxb = maxb;
  int *nb = hmalloc((size_t)imax(R, 1) * sizeof *nb);
  int64_t used = 0;
  for (int r = 0; r < R; r++) {
    nb[r] = imin((int)ceil_div(imax(p->seq_h[r], 0), P), maxb);
    used += nb[r];
  }
  p->num_pages = used + 3;
  const int32_t *perm = perm_i32(p->num_pages);
  p->bt_stride = maxb + c->bt_extra;
  p->bt_h = hmalloc((size_t)imax(R, 1) * (size_t)p->bt_stride * sizeof *p->bt_h);
  int64_t next = 0;
  for (int r = 0; r < R; r++)
    for (int64_t col = 0; col < p->bt_stride; col++) {
      int32_t v;
      if (col < nb[r]) v = perm[next++];
      else if (col < maxb) v = (int32_t)rng_below(p->num_pages); /* addressable, never visible */
      else v = (int32_t)(0x7FFFFF00 + (col & 0xFF));             /* past max_blocks: never read */
      p->bt_h[r * p->bt_stride + col] = v;
    }
  if (c->bad_pages) {
    /* request 0: page column 1 is -1; request 1: page column 0 is num_pages; every request with at
     * least 8 pages: three more columns with INT32_MAX, -1000000 and num_pages + 5. */
    if (R > 0 && nb[0] > 0) p->bt_h[0 * p->bt_stride + (nb[0] > 1 ? 1 : 0)] = -1;
    if (R > 1 && nb[1] > 0) p->bt_h[1 * p->bt_stride + 0] = (int32_t)p->num_pages;
    for (int r = 0; r < R; r++)
      if (nb[r] >= 8) {
        const int32_t vals[3] = {INT32_MAX, -1000000, (int32_t)p->num_pages + 5};
        for (int k = 0; k < 3; k++) p->bt_h[r * p->bt_stride + 2 + rng_below(nb[r] - 2)] = vals[k];
      }
  }

  /* Keys; tie requests copy one (or one of four) base rows into every slot of their pages. */
  ik_gen_rows(&p->k, P, p->num_pages);
  for (int r = 0; r < R; r++) {
    if (!c->ties[r]) continue;
    uint16_t base[4][D_I];
    for (int b = 0; b < 4; b++) fill_bf16(base[b], D_I, 1.0);
    for (int col = 0; col < nb[r]; col++) {
      int32_t page = p->bt_h[r * p->bt_stride + col];
      if (page < 0 || page >= p->num_pages) continue;
      for (int row = 0; row < P; row++) {
        int b = c->ties[r] == 1 ? 0 : (int)rng_below(4);
        memcpy(p->k.rows + ((int64_t)page * P + row) * D_I, base[b], sizeof base[b]);
      }
    }
  }
  ik_store_upload(&p->k);
  iq_make(&p->q, p->T, c->H, c->q_fp8, c->w_bf16, c->w_extra);

  /* Visible lengths (dsa.h's rule), cross-checked with the reference's. */
  p->L = hmalloc((size_t)imax(p->T, 1) * sizeof *p->L);
  p->maxL = 0;
  for (int t = 0; t < p->T; t++) {
    int r = t / p->n, j = t % p->n;
    int64_t L = (int64_t)p->seq_h[r] - (p->n - 1) + j;
    if (L < 0) L = 0;
    if (L > (int64_t)maxb * P) L = (int64_t)maxb * P;
    p->L[t] = (int)L;
    p->maxL = imax(p->maxL, p->L[t]);
  }

  dsa_indexer_decode_args a;
  memset(&a, 0, sizeof a);
  a.query = iq_query(&p->q, 0);
  a.cache.data = p->k.h;
  a.cache.num_pages = p->num_pages;
  a.cache.page_size = P;
  a.seq_lens = p->seq_h;
  a.block_table = p->bt_h;
  a.block_table_stride = p->bt_stride;
  a.max_blocks_per_req = maxb;
  a.num_reqs = R;
  a.q_len_per_req = p->n;
  a.max_seq_len = c->exact_max_seq_len ? p->maxL : 0;
  a.topk = c->topk;
  a.workspace_limit = (size_t)c->ws_cap_mib << 20;
  p->ha = a;
  p->da = a;
  p->da.query = iq_query(&p->q, 1);
  p->da.cache.data = p->k.d;
  p->da.seq_lens = dput(p->seq_h, (size_t)imax(R, 1) * sizeof *p->seq_h);
  p->da.block_table = dput(p->bt_h, (size_t)imax(R, 1) * (size_t)p->bt_stride * sizeof *p->bt_h);
  p->tol = c->q_fp8 ? TOL_SCORE_FP8 : TOL_SCORE_BF16;

  for (int t = 0; t < p->T; t++) {
    int rl = dsa_ref_decode_len(&p->ha, t);
    if (rl != p->L[t]) abort_case("dsa_ref_decode_len(token %d) = %d but dsa.h's rule gives %d", t, rl, p->L[t]);
  }
}

/* Global slot of position i of token t's request, or -1 when its page is outside the cache. */
static int64_t decode_slot_of(const decode_prob *p, int t, int i) {
  int32_t page = p->bt_h[(int64_t)(t / p->n) * p->bt_stride + i / p->P];
  if (page < 0 || page >= p->num_pages) return -1;
  return (int64_t)page * p->P + i % p->P;
}

/* float64 reference scores [T, Ls]; positions outside the cache set to -inf. */
static double *decode_ref_scores(const decode_prob *p, int64_t *Ls_out) {
  const int64_t Ls = imax(p->maxL, 1);
  double *ref = hmalloc((size_t)imax(p->T, 1) * (size_t)Ls * sizeof *ref);
  for (size_t i = 0; i < (size_t)imax(p->T, 1) * (size_t)Ls; i++) ref[i] = NAN;
  dsa_ref_indexer_decode_scores_f64(&p->ha, ref, Ls);
  for (int t = 0; t < p->T; t++)
    for (int i = 0; i < p->L[t]; i++) {
      double *s = ref + (int64_t)t * Ls + i;
      if (decode_slot_of(p, t, i) < 0) *s = -INFINITY;
      else if (!isfinite(*s)) abort_case("reference wrote no finite score for token %d position %d", t, i);
    }
  *Ls_out = Ls;
  return ref;
}

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

/* Runs dsa_indexer_decode into idx_h [T, topk] / len_h [T] (poisoned first). */
static void decode_run_topk(const decode_prob *p, void *ws, size_t wsb, int ws_byte, int32_t *idx_d, int32_t *len_d,
                            int32_t *idx_h, int32_t *len_h) {
  const size_t ni = (size_t)p->T * p->c->topk;
  dset(ws, ws_byte, wsb);
  dfill_i32(idx_d, ni, POISON_I32);
  dfill_i32(len_d, (size_t)p->T, POISON_I32);
  dsa_indexer_decode_args a = p->da;
  a.topk_indices = idx_d;
  a.topk_lens = p->c->lens_null ? NULL : len_d;
  DSA(dsa_indexer_decode(&a, ws, wsb, g_stream));
  dget(idx_h, idx_d, ni * sizeof *idx_h);
  dget(len_h, len_d, (size_t)p->T * sizeof *len_h);
  if (p->c->lens_null)
    for (int t = 0; t < p->T; t++)
      if (len_h[t] != POISON_I32) abort_case("topk_lens is NULL but the lens buffer was written (token %d)", t);
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
/* Indexer prefill                                                                                 */
/* ============================================================================================== */

typedef struct {
  const char *name;
  int H, q_fp8, w_bf16, w_extra, topk;
  int W;                  /* workspace rows */
  int n_causal;           /* tokens j < n_causal see [0, causal_end - n_causal + 1 + j) */
  int causal_end;
  int n_extra;            /* further tokens: [xs, xe) as given (empty, reversed, negative, past W) */
  int xs[16], xe[16];
  int n_bad;              /* rows whose slot is outside the cache: num_slots + 17, -1, 2^40 */
  int bad_rows[3];
  int exact_max_rows;     /* pass max_rows = the longest range instead of 0 */
  int ws_cap_mib;         /* > 0: workspace_limit in MiB (reaches the deferred resolve) */
  uint64_t seed;
} prefill_case;

typedef struct {
  const prefill_case *c;
  int T, W, maxlen;
  int32_t *starts, *ends;
  int64_t *slots_h;
  int *begin, *len;
  ik_data k;
  iq_data q;
  dsa_indexer_prefill_args ha, da;
  double tol;
} prefill_prob;

static void prefill_build(const prefill_case *c, prefill_prob *p) {
  memset(p, 0, sizeof *p);
  rng_seed(c->seed);
  p->c = c;
  p->T = c->n_causal + c->n_extra;
  p->W = c->W;
  const int T = p->T, W = p->W, P = 64;
  const int64_t num_pages = ceil_div((int64_t)W + W / 4 + 100, P);

  ik_gen_rows(&p->k, P, num_pages);
  ik_store_upload(&p->k);

  /* Workspace rows: a random permutation of the cache's slots; a few rows outside the cache. */
  const int32_t *perm = perm_i32(p->k.num_slots);
  p->slots_h = hmalloc((size_t)imax(W, 1) * sizeof *p->slots_h);
  for (int w = 0; w < W; w++) p->slots_h[w] = perm[w];
  const int64_t bad_vals[3] = {p->k.num_slots + 17, -1, (int64_t)1 << 40};
  for (int b = 0; b < c->n_bad; b++) p->slots_h[c->bad_rows[b]] = bad_vals[b];

  p->starts = hmalloc((size_t)imax(T, 1) * 4);
  p->ends = hmalloc((size_t)imax(T, 1) * 4);
  for (int j = 0; j < c->n_causal; j++) {
    p->starts[j] = 0;
    p->ends[j] = c->causal_end - c->n_causal + 1 + j;
  }
  for (int e = 0; e < c->n_extra; e++) {
    p->starts[c->n_causal + e] = c->xs[e];
    p->ends[c->n_causal + e] = c->xe[e];
  }

  /* Visible ranges (dsa.h's clamp), cross-checked with the reference's. */
  p->begin = hmalloc((size_t)imax(T, 1) * sizeof *p->begin);
  p->len = hmalloc((size_t)imax(T, 1) * sizeof *p->len);
  p->maxlen = 0;
  for (int t = 0; t < T; t++) {
    int b = imin(imax(p->starts[t], 0), W), e = imin(p->ends[t], W);
    p->begin[t] = b;
    p->len[t] = imax(e - b, 0);
    p->maxlen = imax(p->maxlen, p->len[t]);
  }
  iq_make(&p->q, T, c->H, c->q_fp8, c->w_bf16, c->w_extra);

  dsa_indexer_prefill_args a;
  memset(&a, 0, sizeof a);
  a.query = iq_query(&p->q, 0);
  a.cache.data = p->k.h;
  a.cache.num_pages = p->k.num_pages;
  a.cache.page_size = P;
  a.kv_workspace_slots = p->slots_h;
  a.num_workspace_rows = W;
  a.row_starts = p->starts;
  a.row_ends = p->ends;
  a.num_tokens = T;
  a.max_rows = c->exact_max_rows ? p->maxlen : 0;
  a.topk = c->topk;
  a.workspace_limit = (size_t)c->ws_cap_mib << 20;
  p->ha = a;
  p->da = a;
  p->da.query = iq_query(&p->q, 1);
  p->da.cache.data = p->k.d;
  p->da.kv_workspace_slots = dput(p->slots_h, (size_t)imax(W, 1) * sizeof *p->slots_h);
  p->da.row_starts = dput(p->starts, (size_t)imax(T, 1) * 4);
  p->da.row_ends = dput(p->ends, (size_t)imax(T, 1) * 4);
  p->tol = c->q_fp8 ? TOL_SCORE_FP8 : TOL_SCORE_BF16;

  for (int t = 0; t < T; t++) {
    int64_t b = 0;
    int l = dsa_ref_prefill_range(&p->ha, t, &b);
    if (l != p->len[t] || (l > 0 && b != p->begin[t]))
      abort_case("dsa_ref_prefill_range(token %d) = [%lld, +%d) but dsa.h's rule gives [%d, +%d)", t, (long long)b,
                 l, p->begin[t], p->len[t]);
  }
}

static int prefill_row_bad(const prefill_prob *p, int64_t w) {
  return p->slots_h[w] < 0 || p->slots_h[w] >= p->k.num_slots;
}

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
}

/* ============================================================================================== */
/* Plain top-k                                                                                     */
/* ============================================================================================== */

/* R_NARROW: every value in [1, 1.125) on a 2^-20 grid — one first-digit bin of the radix select holds
 * the whole row (exercises the candidate list in the workspace and the whole-row fallback), with ties. */
enum { R_RANDOM, R_NEG, R_EQUAL, R_FEW, R_NAN_INF, R_MOSTLY_NAN, R_ALL_NAN, R_NARROW, R_NUM_KINDS };
static const char *const k_row_kind_name[R_NUM_KINDS] = {"random", "negative", "all-equal", "few-values",
                                                         "NaN/-inf", "mostly-NaN", "all-NaN", "narrow"};

typedef struct {
  const char *name;
  int num_rows, max_len, topk, stride_extra;
  int lens_null, out_lens_null;
  int len[16], kind[16];  /* per row (rows past 16, or rand_rows: random length and kind) */
  int rand_rows;
  uint64_t seed;
} topk_case;

/* Any float32 of very different magnitudes and both signs, non-zero; rarely subnormal or +inf. */
static float rng_score(void) {
  double u = rng_unit();
  float mag;
  if (u < 0.005) mag = (float)rng_uniform(1e-44, 1e-39); /* subnormal */
  else if (u < 0.006) return INFINITY;
  else mag = (float)rng_log_uniform(1e-12, 1e12);
  if (mag == 0.0f) mag = 1e-40f;
  return rng_below(2) ? mag : -mag;
}

static float rng_nan(void) {
  /* NaNs of both signs and several payloads: all rank below -inf. */
  static const uint32_t nans[4] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu};
  return f32_of_bits(nans[rng_below(4)]);
}

static void fill_score_row(float *row, int n, int kind) {
  static const float few[5] = {-2.0f, -1.0f, 0.5f, 3.0f, 3.0f};
  for (int i = 0; i < n; i++) {
    float v = rng_score();
    switch (kind) {
      case R_NEG: v = -fabsf(v); break;
      case R_EQUAL: v = 0.75f; break;
      case R_FEW: v = few[rng_below(5)]; break;
      case R_NAN_INF: {
        double u = rng_unit();
        if (u < 0.1) v = rng_nan();
        else if (u < 0.2) v = -INFINITY;
        break;
      }
      case R_MOSTLY_NAN: {
        double u = rng_unit();
        if (u < 0.93) v = rng_nan();
        else if (u < 0.96) v = -INFINITY;
        break;
      }
      case R_ALL_NAN: v = rng_nan(); break;
      case R_NARROW: v = 1.0f + (float)rng_below(1 << 17) * (1.0f / (1 << 20)); break;
      default: break;
    }
    row[i] = v;
  }
}

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
/* Sparse MLA attention                                                                            */
/* ============================================================================================== */

typedef struct {
  const char *name;
  int H, T, topk, idx_extra;
  dsa_kv_format fmt;
  int kv_stride;          /* bf16 only */
  int fp8_random_bytes;   /* fp8: random valid bytes instead of quantised random rows */
  int lens_given, lse_null, all_invalid_token;
  int few_entries;        /* lens 1..3 for every token: the lse rests on one or two scores */
  double lse_tol;         /* 0: TOL_ATTN_LSE; else a looser bound, with its reason at the case */
  double q_amp;
  int num_slots;
  int check_determinism;
  uint64_t seed;
} mla_case;

typedef struct {
  const mla_case *c;
  int T, H, topk;
  int64_t istride;
  int32_t *idx_h, *lens_h;
  int *nvalid;            /* valid entries per token */
  size_t kv_bytes;
  void *kv_h, *q_h;
  dsa_sparse_mla_args ha, da; /* out / lse filled in by the caller */
} mla_prob;

static int32_t mla_random_index(int64_t num_slots, const int32_t *row, int i) {
  double u = rng_unit();
  if (u < 0.07) return -1;
  if (u < 0.09) return (int32_t)(num_slots + rng_below(1000));
  if (u < 0.10) return INT32_MAX;
  if (u < 0.11) return rng_below(2) ? INT32_MIN : -(int32_t)(2 + rng_below(1000000));
  if (u < 0.16 && i > 0) return row[rng_below(i)]; /* a duplicate: counts twice */
  return (int32_t)rng_below(num_slots);
}

static void mla_build(const mla_case *c, mla_prob *p) {
  memset(p, 0, sizeof *p);
  rng_seed(c->seed);
  p->c = c;
  p->T = c->T;
  p->H = c->H;
  p->topk = c->topk;
  const int T = c->T, H = c->H, topk = c->topk;
  const int64_t S = c->num_slots;

  /* KV cache */
  if (c->fmt == DSA_KV_BF16) {
    const size_t n = (size_t)S * c->kv_stride;
    uint16_t *kv = hmalloc(n * 2);
    for (int64_t s = 0; s < S; s++) {
      fill_bf16(kv + s * c->kv_stride, DSA_MLA_QK_DIM, 1.0);
      for (int d = DSA_MLA_QK_DIM; d < c->kv_stride; d++) kv[s * c->kv_stride + d] = BF16_NAN; /* never read */
    }
    p->kv_h = kv;
    p->kv_bytes = n * 2;
  } else {
    const size_t n = (size_t)S * DSA_MLA_FP8_SLOT_BYTES;
    uint8_t *kv = hmalloc(n);
    if (c->fp8_random_bytes) {
      for (int64_t s = 0; s < S; s++) {
        uint8_t *row = kv + s * DSA_MLA_FP8_SLOT_BYTES;
        for (int d = 0; d < DSA_MLA_V_DIM; d++) row[d] = rng_fp8_byte();
        for (int g = 0; g < 4; g++) {
          float sc = (float)(rng_uniform(0.5, 2.0) / 448.0);
          memcpy(row + 512 + 4 * g, &sc, 4);
        }
        uint16_t rope[64];
        fill_bf16(rope, 64, 1.0);
        memcpy(row + 528, rope, sizeof rope);
      }
    } else {
      /* Random bf16 rows (each 128-group with its own amplitude) quantised by the reference writer. */
      uint16_t *rows = hmalloc((size_t)S * DSA_MLA_QK_DIM * 2);
      for (int64_t s = 0; s < S; s++) {
        for (int g = 0; g < 4; g++) fill_bf16(rows + s * DSA_MLA_QK_DIM + 128 * g, 128, rng_log_uniform(0.1, 3.0));
        fill_bf16(rows + s * DSA_MLA_QK_DIM + 512, 64, 1.0);
      }
      int64_t *map = hmalloc((size_t)S * 8);
      for (int64_t s = 0; s < S; s++) map[s] = s;
      memset(kv, 0, n);
      dsa_mla_kv_store_args st;
      memset(&st, 0, sizeof st);
      st.kv = rows;
      st.kv_stride = DSA_MLA_QK_DIM;
      st.slot_mapping = map;
      st.num_tokens = (int)S;
      st.cache = kv;
      st.kv_format = DSA_KV_FP8_PACKED;
      st.num_slots = S;
      dsa_ref_mla_kv_store(&st);
    }
    p->kv_h = kv;
    p->kv_bytes = n;
  }

  /* q */
  const size_t nq = (size_t)T * H * DSA_MLA_QK_DIM;
  uint16_t *q = hmalloc(nq * 2);
  fill_bf16(q, nq, c->q_amp);
  p->q_h = q;

  /* indices and lens */
  p->istride = topk + c->idx_extra;
  p->idx_h = hmalloc((size_t)imax(T, 1) * (size_t)p->istride * 4);
  p->lens_h = hmalloc((size_t)imax(T, 1) * 4);
  const int invalid_tok = c->all_invalid_token ? (T > 1 ? T / 2 : 0) : -1;
  const int zero_len_tok = c->lens_given && T >= 3 ? 1 : -1;
  for (int t = 0; t < T; t++) {
    int32_t *row = p->idx_h + (int64_t)t * p->istride;
    int32_t lens = topk;
    if (c->lens_given && c->few_entries) {
      lens = 1 + t % 3;
    } else if (c->lens_given) {
      switch (t % 4) {
        case 0: lens = topk; break;
        case 1: lens = (int32_t)rng_below(topk + 1); break;
        case 2: lens = topk - 1; break;
        default: lens = 1 + (int32_t)rng_below(topk); break;
      }
      if (t == zero_len_tok) lens = 0;
    }
    p->lens_h[t] = lens;
    for (int i = 0; i < topk; i++) {
      if (t == invalid_tok) {
        static const int64_t inv[6] = {-1, 0, INT32_MIN, INT32_MAX, 7, -2};
        int64_t v = inv[i % 6];
        row[i] = (int32_t)(v == 0 ? S : v == 7 ? S + 7 : v);
      } else if (i >= lens) {
        row[i] = (int32_t)rng_below(S); /* valid slot past lens: must be ignored */
      } else {
        row[i] = mla_random_index(S, row, i);
      }
    }
    for (int64_t i = topk; i < p->istride; i++) row[i] = (int32_t)rng_below(S); /* stride padding */
  }
  p->nvalid = hmalloc((size_t)imax(T, 1) * sizeof *p->nvalid);
  for (int t = 0; t < T; t++) {
    const int lim = c->lens_given ? imin(imax(p->lens_h[t], 0), topk) : topk;
    int nv = 0;
    for (int i = 0; i < lim; i++) {
      int32_t v = p->idx_h[(int64_t)t * p->istride + i];
      nv += v >= 0 && v < S;
    }
    p->nvalid[t] = nv;
  }

  dsa_sparse_mla_args a;
  memset(&a, 0, sizeof a);
  a.q = q;
  a.num_tokens = T;
  a.num_heads = H;
  a.kv_cache = p->kv_h;
  a.kv_format = c->fmt;
  a.num_slots = S;
  a.kv_stride = c->fmt == DSA_KV_BF16 ? c->kv_stride : 0; /* "FP8: ignored" */
  a.indices = p->idx_h;
  a.indices_stride = p->istride;
  a.topk = topk;
  a.lens = c->lens_given ? p->lens_h : NULL;
  a.softmax_scale = (float)(1.0 / sqrt(192.0 + 64.0));
  p->ha = a;
  p->da = a;
  p->da.q = dput(q, nq * 2);
  p->da.kv_cache = dput(p->kv_h, p->kv_bytes);
  p->da.indices = dput(p->idx_h, (size_t)imax(T, 1) * (size_t)p->istride * 4);
  p->da.lens = c->lens_given ? dput(p->lens_h, (size_t)imax(T, 1) * 4) : NULL;
}

/* Runs dsa_sparse_mla (outputs poisoned first) and copies out / lse back. */
static void mla_run(const mla_prob *p, void *ws, size_t wsb, int ws_byte, void *out_d, float *lse_d, uint16_t *out_h,
                    float *lse_h) {
  const size_t no = (size_t)p->T * p->H * DSA_MLA_V_DIM, nl = (size_t)p->T * p->H;
  dset(ws, ws_byte, wsb);
  dset(out_d, POISON_BYTE, no * 2);
  if (lse_d) dset(lse_d, POISON_BYTE, nl * 4);
  dsa_sparse_mla_args a = p->da;
  a.out = out_d;
  a.lse = lse_d;
  DSA(dsa_sparse_mla(&a, ws, wsb, g_stream));
  dget(out_h, out_d, no * 2);
  if (lse_d) dget(lse_h, lse_d, nl * 4);
}

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
/* Cache writers                                                                                   */
/* ============================================================================================== */

typedef struct {
  const char *name;
  int index_k;            /* 1: dsa_index_k_store; 0: dsa_mla_kv_store */
  dsa_kv_format fmt;      /* MLA */
  int page_size, num_pages; /* index-K */
  int num_slots;          /* MLA */
  int cache_stride;       /* MLA bf16 */
  int tokens, src_stride;
  uint64_t seed;
} store_case;

/* Where a byte offset of the cache lies, for failure messages. */
static void describe_cache_byte(const store_case *c, size_t off, const uint8_t *gpu, const uint8_t *ref, char *s,
                                size_t n) {
  if (c->index_k) {
    const size_t page_bytes = (size_t)c->page_size * IK_ROW_BYTES, page = off / page_bytes, in = off % page_bytes;
    if (in < (size_t)c->page_size * D_I) {
      const size_t row = in / D_I, d = in % D_I;
      const int ulp = (gpu[off] & 0x80) == (ref[off] & 0x80) ? (int)(gpu[off] & 0x7F) - (int)(ref[off] & 0x7F) : 999;
      snprintf(s, n, "slot %zu fp8 value %zu: gpu 0x%02x (%g) ref 0x%02x (%g)%s%+d ulp", page * c->page_size + row, d,
               gpu[off], (double)dsa_fp8_e4m3_to_float(gpu[off]), ref[off], (double)dsa_fp8_e4m3_to_float(ref[off]),
               ulp == 999 ? ", sign differs " : ", ", ulp == 999 ? 0 : ulp);
    } else {
      const size_t row = (in - (size_t)c->page_size * D_I) / 4, base = off - (in - (size_t)c->page_size * D_I) % 4;
      float g, r;
      memcpy(&g, gpu + base, 4);
      memcpy(&r, ref + base, 4);
      snprintf(s, n, "slot %zu scale: gpu %.9g ref %.9g", page * c->page_size + row, (double)g, (double)r);
    }
  } else if (c->fmt == DSA_KV_FP8_PACKED) {
    const size_t slot = off / DSA_MLA_FP8_SLOT_BYTES, in = off % DSA_MLA_FP8_SLOT_BYTES;
    if (in < 512) {
      const int ulp = (gpu[off] & 0x80) == (ref[off] & 0x80) ? (int)(gpu[off] & 0x7F) - (int)(ref[off] & 0x7F) : 999;
      snprintf(s, n, "slot %zu fp8 latent %zu: gpu 0x%02x (%g) ref 0x%02x (%g)%s%+d ulp", slot, in, gpu[off],
               (double)dsa_fp8_e4m3_to_float(gpu[off]), ref[off], (double)dsa_fp8_e4m3_to_float(ref[off]),
               ulp == 999 ? ", sign differs " : ", ", ulp == 999 ? 0 : ulp);
    } else if (in < 528) {
      const size_t base = off - (in - 512) % 4;
      float g, r;
      memcpy(&g, gpu + base, 4);
      memcpy(&r, ref + base, 4);
      snprintf(s, n, "slot %zu scale %zu: gpu %.9g ref %.9g", slot, (in - 512) / 4, (double)g, (double)r);
    } else {
      snprintf(s, n, "slot %zu rope byte %zu: gpu 0x%02x ref 0x%02x", slot, in - 528, gpu[off], ref[off]);
    }
  } else {
    const size_t row_bytes = (size_t)c->cache_stride * 2;
    snprintf(s, n, "slot %zu element %zu%s: gpu byte 0x%02x ref 0x%02x", off / row_bytes, (off % row_bytes) / 2,
             (off % row_bytes) / 2 >= DSA_MLA_QK_DIM ? " (row padding: must be untouched)" : "", gpu[off], ref[off]);
  }
}

static void store_case_run(const void *arg) {
  const store_case *c = arg;
  rng_seed(c->seed);
  const int64_t cap = c->index_k ? (int64_t)c->num_pages * c->page_size : c->num_slots;
  const int width = c->index_k ? D_I : DSA_MLA_QK_DIM;
  const int N = c->tokens;

  /* Slot mapping: distinct slots from [6, cap) plus padding / out-of-range slots at random
   * places. 2^40 and 2^32 + 5 would land on slots 0 and 5 if truncated to 32 bits: those slots
   * are never written by a valid token, so such a write shows up as a byte difference. */
  const int64_t bad[7] = {-1, -7, INT64_MIN, cap, cap + 3, (int64_t)1 << 40, ((int64_t)1 << 32) + 5};
  int64_t *map = hmalloc((size_t)N * 8);
  const int32_t *perm = perm_i32(cap - 6);
  int nvalid = 0;
  for (int t = 0; t < N; t++) map[t] = t < 7 ? bad[t] : (int64_t)perm[nvalid++] + 6;
  for (int t = N - 1; t > 0; t--) {
    int64_t j = rng_below(t + 1), x = map[t];
    map[t] = map[j];
    map[j] = x;
  }

  /* Source rows: amplitudes from 1e-3 to 1e3 (per row; per 128-group for MLA); one row below the
   * amax floor, one with a large value; stride padding NaN. */
  uint16_t *src = hmalloc((size_t)N * c->src_stride * 2);
  for (int t = 0; t < N; t++) {
    uint16_t *row = src + (size_t)t * c->src_stride;
    const double row_amp = rng_log_uniform(1e-3, 1e3);
    for (int g = 0; g < width / 64; g++) {
      double amp = c->index_k ? row_amp : rng_log_uniform(1e-3, 1e3);
      if (t == 0) amp = 1e-6; /* amax below DSA_FP8_AMAX_FLOOR */
      fill_bf16(row + 64 * g, 64, amp);
    }
    if (t == 1) row[rng_below(width)] = to_bf16(30000.0);
    for (int d = width; d < c->src_stride; d++) row[d] = (uint16_t)BF16_NAN;
  }

  size_t cache_bytes;
  if (c->index_k) cache_bytes = (size_t)c->num_pages * c->page_size * IK_ROW_BYTES;
  else if (c->fmt == DSA_KV_FP8_PACKED) cache_bytes = (size_t)c->num_slots * DSA_MLA_FP8_SLOT_BYTES;
  else cache_bytes = (size_t)c->num_slots * c->cache_stride * 2;
  uint8_t *ref = hmalloc(cache_bytes), *gpu = hmalloc(cache_bytes);
  fill_random_bytes(ref, cache_bytes);
  uint8_t *cache_d = dput(ref, cache_bytes);
  void *src_d = dput(src, (size_t)N * c->src_stride * 2);
  int64_t *map_d = dput(map, (size_t)N * 8);

  chk_begin("%s", c->name);
  if (c->index_k) {
    dsa_index_k_store_args a;
    memset(&a, 0, sizeof a);
    a.k = src;
    a.k_stride = c->src_stride;
    a.slot_mapping = map;
    a.num_tokens = N;
    a.cache = ref;
    a.num_pages = c->num_pages;
    a.page_size = c->page_size;
    dsa_ref_index_k_store(&a);
    a.k = src_d;
    a.slot_mapping = map_d;
    a.cache = cache_d;
    DSA(dsa_index_k_store(&a, g_stream));
  } else {
    dsa_mla_kv_store_args a;
    memset(&a, 0, sizeof a);
    a.kv = src;
    a.kv_stride = c->src_stride;
    a.slot_mapping = map;
    a.num_tokens = N;
    a.cache = ref;
    a.kv_format = c->fmt;
    a.num_slots = c->num_slots;
    a.cache_stride = c->fmt == DSA_KV_BF16 ? c->cache_stride : 0; /* "FP8: ignored" */
    dsa_ref_mla_kv_store(&a);
    a.kv = src_d;
    a.slot_mapping = map_d;
    a.cache = cache_d;
    DSA(dsa_mla_kv_store(&a, g_stream));
  }
  dget(gpu, cache_d, cache_bytes);
  size_t ndiff = 0, first = 0;
  for (size_t i = 0; i < cache_bytes; i++)
    if (gpu[i] != ref[i]) {
      if (!ndiff) first = i;
      ndiff++;
    }
  if (ndiff) {
    char where[400];
    describe_cache_byte(c, first, gpu, ref, where, sizeof where);
    chk_fail("%zu of %zu cache bytes differ from the reference; first: %s", ndiff, cache_bytes, where);
  }
  chk_metric("%d rows (%d to valid slots, 7 skipped), %zu cache bytes identical", N, nvalid, cache_bytes);
  chk_end();
}

/* ============================================================================================== */
/* Sanity: workspace too small, empty batches; CUDA graph capture                                  */
/* ============================================================================================== */

static const decode_case k_small_decode = {
    .name = "small decode", .H = 32, .topk = 2048, .n = 1, .page_size = 64, .nreq = 2, .seq_lens = {3000, 100},
    .seed = 901};
static const prefill_case k_small_prefill = {
    .name = "small prefill", .H = 32, .topk = 512, .W = 2000, .n_causal = 3, .causal_end = 2000, .seed = 902};
static const mla_case k_small_mla = {
    .name = "small mla", .H = 16, .T = 4, .topk = 512, .fmt = DSA_KV_FP8_PACKED, .q_amp = 1.0, .num_slots = 2000,
    .seed = 903};

/* Reads a device output back and checks it still holds the poison. */
static int still_poisoned(const void *d, size_t bytes, int i32) {
  unsigned char *h = hmalloc(bytes);
  dget(h, d, bytes);
  for (size_t i = 0; i < bytes; i++) {
    const unsigned char want = i32 ? (unsigned char)(((uint32_t)POISON_I32 >> (8 * (i % 4))) & 0xFF) : POISON_BYTE;
    if (h[i] != want) return 0;
  }
  return 1;
}

static void expect_too_small(dsa_status st, const char *call) {
  if (st != DSA_ERR_WORKSPACE_TOO_SMALL)
    chk_fail("%s with one byte too few returned %s (%s), expected DSA_ERR_WORKSPACE_TOO_SMALL", call,
             dsa_status_string(st), dsa_last_error());
  else if (!dsa_last_error()[0])
    chk_fail("%s: DSA_ERR_WORKSPACE_TOO_SMALL but dsa_last_error() is empty", call);
  sync_check(call);
}

static void sanity_run(const void *arg) {
  (void)arg;
  /* decode */
  {
    chk_begin("sanity: dsa_indexer_decode with workspace one byte too small writes nothing");
    decode_prob p;
    decode_build(&k_small_decode, &p);
    size_t wsb = 0;
    DSA_Q(dsa_indexer_decode_workspace_size(&p.da, &wsb));
    if (wsb == 0) {
      chk_metric("workspace size is 0: nothing to shrink");
    } else {
      void *ws = workspace(wsb);
      const size_t ni = (size_t)p.T * k_small_decode.topk;
      int32_t *idx = dalloc(ni * 4), *lens = dalloc((size_t)p.T * 4);
      dfill_i32(idx, ni, POISON_I32);
      dfill_i32(lens, (size_t)p.T, POISON_I32);
      dsa_indexer_decode_args a = p.da;
      a.topk_indices = idx;
      a.topk_lens = lens;
      expect_too_small(dsa_indexer_decode(&a, ws, wsb - 1, g_stream), "dsa_indexer_decode");
      if (!still_poisoned(idx, ni * 4, 1) || !still_poisoned(lens, (size_t)p.T * 4, 1))
        chk_fail("outputs were written although the call failed");
      chk_metric("needed %zu B", wsb);
    }
    chk_end();
    free_case_memory();
  }
  /* prefill */
  {
    chk_begin("sanity: dsa_indexer_prefill with workspace one byte too small writes nothing");
    prefill_prob p;
    prefill_build(&k_small_prefill, &p);
    size_t wsb = 0;
    DSA_Q(dsa_indexer_prefill_workspace_size(&p.da, &wsb));
    if (wsb == 0) {
      chk_metric("workspace size is 0: nothing to shrink");
    } else {
      void *ws = workspace(wsb);
      const size_t ni = (size_t)p.T * k_small_prefill.topk;
      int32_t *idx = dalloc(ni * 4), *lens = dalloc((size_t)p.T * 4);
      dfill_i32(idx, ni, POISON_I32);
      dfill_i32(lens, (size_t)p.T, POISON_I32);
      dsa_indexer_prefill_args a = p.da;
      a.topk_indices = idx;
      a.topk_lens = lens;
      expect_too_small(dsa_indexer_prefill(&a, ws, wsb - 1, g_stream), "dsa_indexer_prefill");
      if (!still_poisoned(idx, ni * 4, 1) || !still_poisoned(lens, (size_t)p.T * 4, 1))
        chk_fail("outputs were written although the call failed");
      chk_metric("needed %zu B", wsb);
    }
    chk_end();
    free_case_memory();
  }
  /* plain top-k */
  {
    chk_begin("sanity: dsa_topk with workspace one byte too small writes nothing");
    rng_seed(904);
    const int R = 3, len = 5000, topk = 2048;
    float *sh = hmalloc((size_t)R * len * 4);
    fill_score_row(sh, R * len, R_RANDOM);
    dsa_topk_args a;
    memset(&a, 0, sizeof a);
    a.scores = dput(sh, (size_t)R * len * 4);
    a.scores_stride = len;
    a.num_rows = R;
    a.max_len = len;
    a.topk = topk;
    a.indices = dalloc((size_t)R * topk * 4);
    a.lens = dalloc((size_t)R * 4);
    dfill_i32(a.indices, (size_t)R * topk, POISON_I32);
    dfill_i32(a.lens, (size_t)R, POISON_I32);
    size_t wsb = 0;
    DSA_Q(dsa_topk_workspace_size(&a, &wsb));
    if (wsb == 0) {
      chk_metric("workspace size is 0: nothing to shrink");
    } else {
      void *ws = workspace(wsb);
      expect_too_small(dsa_topk(&a, ws, wsb - 1, g_stream), "dsa_topk");
      if (!still_poisoned(a.indices, (size_t)R * topk * 4, 1) || !still_poisoned(a.lens, (size_t)R * 4, 1))
        chk_fail("outputs were written although the call failed");
      chk_metric("needed %zu B", wsb);
    }
    chk_end();
    free_case_memory();
  }
  /* attention */
  {
    chk_begin("sanity: dsa_sparse_mla with workspace one byte too small writes nothing");
    mla_prob p;
    mla_build(&k_small_mla, &p);
    size_t wsb = 0;
    DSA_Q(dsa_sparse_mla_workspace_size(&p.da, &wsb));
    if (wsb == 0) {
      chk_metric("workspace size is 0: nothing to shrink");
    } else {
      void *ws = workspace(wsb);
      const size_t no = (size_t)p.T * p.H * DSA_MLA_V_DIM, nl = (size_t)p.T * p.H;
      dsa_sparse_mla_args a = p.da;
      a.out = dalloc(no * 2);
      a.lse = dalloc(nl * 4);
      dset(a.out, POISON_BYTE, no * 2);
      dset(a.lse, POISON_BYTE, nl * 4);
      expect_too_small(dsa_sparse_mla(&a, ws, wsb - 1, g_stream), "dsa_sparse_mla");
      if (!still_poisoned(a.out, no * 2, 0) || !still_poisoned(a.lse, nl * 4, 0))
        chk_fail("outputs were written although the call failed");
      chk_metric("needed %zu B", wsb);
    }
    chk_end();
    free_case_memory();
  }
  /* empty batches: DSA_OK, nothing written */
  {
    chk_begin("sanity: empty batches (0 requests / tokens / rows) return DSA_OK and write nothing");
    decode_prob dp;
    decode_build(&k_small_decode, &dp);
    int32_t *idx = dalloc(64 * 4), *lens = dalloc(64 * 4);
    dfill_i32(idx, 64, POISON_I32);
    dfill_i32(lens, 64, POISON_I32);
    size_t wsb = 0;
    void *ws = workspace(1 << 20);

    dsa_indexer_decode_args d = dp.da;
    d.num_reqs = 0;
    d.topk_indices = idx;
    d.topk_lens = lens;
    DSA_Q(dsa_indexer_decode_workspace_size(&d, &wsb));
    if (wsb > (1u << 20)) chk_fail("decode with 0 requests asks for %zu B of workspace", wsb);
    DSA(dsa_indexer_decode(&d, ws, wsb, g_stream));

    dsa_topk_args k;
    memset(&k, 0, sizeof k);
    float *sc = dalloc(64 * 4);
    k.scores = sc;
    k.scores_stride = 16;
    k.num_rows = 0;
    k.max_len = 16;
    k.topk = 8;
    k.indices = idx;
    k.lens = lens;
    DSA_Q(dsa_topk_workspace_size(&k, &wsb));
    if (wsb > (1u << 20)) chk_fail("top-k with 0 rows asks for %zu B of workspace", wsb);
    DSA(dsa_topk(&k, ws, wsb, g_stream));

    mla_prob mp;
    mla_build(&k_small_mla, &mp);
    dsa_sparse_mla_args m = mp.da;
    m.num_tokens = 0;
    void *out = dalloc(64);
    dset(out, POISON_BYTE, 64);
    m.out = out;
    m.lse = NULL;
    DSA_Q(dsa_sparse_mla_workspace_size(&m, &wsb));
    if (wsb > (1u << 20)) chk_fail("attention with 0 tokens asks for %zu B of workspace", wsb);
    DSA(dsa_sparse_mla(&m, ws, wsb, g_stream));

    if (!still_poisoned(idx, 64 * 4, 1) || !still_poisoned(lens, 64 * 4, 1) || !still_poisoned(out, 64, 0))
      chk_fail("an empty call wrote to its outputs");
    chk_metric("decode, top-k, attention");
    chk_end();
  }
}

static const decode_case k_graph_decode = {
    .name = "graph decode", .H = 32, .q_fp8 = 1, .topk = 2048, .n = 2, .page_size = 64, .nreq = 3,
    .seq_lens = {9000, 1500, 4100}, .seed = 911};
static const mla_case k_graph_mla = {
    .name = "graph mla", .H = 16, .T = 6, .topk = 2048, .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .q_amp = 1.0,
    .num_slots = 10000, .seed = 912};

/* dsa_indexer_decode + dsa_sparse_mla captured in one CUDA graph (global capture mode: a host
 * synchronisation or allocation inside a call breaks the capture); two replays must give the bits
 * of the direct calls. */
static void graph_run(const void *arg) {
  (void)arg;
  chk_begin("graph capture: dsa_indexer_decode + dsa_sparse_mla, replayed twice, bits equal direct calls");
  decode_prob dp;
  decode_build(&k_graph_decode, &dp);
  mla_prob mp;
  mla_build(&k_graph_mla, &mp);
  size_t wsd = 0, wsm = 0;
  DSA_Q(dsa_indexer_decode_workspace_size(&dp.da, &wsd));
  DSA_Q(dsa_sparse_mla_workspace_size(&mp.da, &wsm));
  void *ws_d = workspace(wsd), *ws_m = workspace(wsm);
  const size_t ni = (size_t)dp.T * k_graph_decode.topk;
  const size_t no = (size_t)mp.T * mp.H * DSA_MLA_V_DIM, nl = (size_t)mp.T * mp.H;
  int32_t *idx_d = dalloc(ni * 4), *len_d = dalloc((size_t)dp.T * 4);
  void *out_d = dalloc(no * 2);
  float *lse_d = dalloc(nl * 4);
  int32_t *idx_a = hmalloc(ni * 4), *len_a = hmalloc((size_t)dp.T * 4);
  uint16_t *out_a = hmalloc(no * 2);
  float *lse_a = hmalloc(nl * 4);
  decode_run_topk(&dp, ws_d, wsd, WS_BYTE_FIRST, idx_d, len_d, idx_a, len_a);
  mla_run(&mp, ws_m, wsm, WS_BYTE_FIRST, out_d, lse_d, out_a, lse_a);

  dsa_indexer_decode_args da = dp.da;
  da.topk_indices = idx_d;
  da.topk_lens = len_d;
  dsa_sparse_mla_args ma = mp.da;
  ma.out = out_d;
  ma.lse = lse_d;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CU(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
  const dsa_status s1 = dsa_indexer_decode(&da, ws_d, wsd, g_stream);
  const dsa_status s2 = dsa_sparse_mla(&ma, ws_m, wsm, g_stream);
  const cudaError_t ec = cudaStreamEndCapture(g_stream, &graph);
  if (s1 != DSA_OK || s2 != DSA_OK || ec != cudaSuccess) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    abort_case("capture failed: dsa_indexer_decode -> %s, dsa_sparse_mla -> %s (%s), cudaStreamEndCapture -> %s",
               dsa_status_string(s1), dsa_status_string(s2), dsa_last_error(), cudaGetErrorString(ec));
  }
  const cudaError_t ei = cudaGraphInstantiate(&exec, graph, 0);
  if (ei != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    CU(ei);
  }
  int32_t *idx_b = hmalloc(ni * 4), *len_b = hmalloc((size_t)dp.T * 4);
  uint16_t *out_b = hmalloc(no * 2);
  float *lse_b = hmalloc(nl * 4);
  for (int rep = 0; rep < 2; rep++) {
    dfill_i32(idx_d, ni, POISON_I32);
    dfill_i32(len_d, (size_t)dp.T, POISON_I32);
    dset(out_d, POISON_BYTE, no * 2);
    dset(lse_d, POISON_BYTE, nl * 4);
    dset(ws_d, rep ? WS_BYTE_RERUN : WS_BYTE_FIRST, wsd);
    dset(ws_m, rep ? WS_BYTE_RERUN : WS_BYTE_FIRST, wsm);
    const cudaError_t el = cudaGraphLaunch(exec, g_stream);
    if (el != cudaSuccess) {
      (void)cudaGraphExecDestroy(exec);
      (void)cudaGraphDestroy(graph);
      CU(el);
    }
    sync_check("cudaGraphLaunch");
    dget(idx_b, idx_d, ni * 4);
    dget(len_b, len_d, (size_t)dp.T * 4);
    dget(out_b, out_d, no * 2);
    dget(lse_b, lse_d, nl * 4);
    if (memcmp(idx_a, idx_b, ni * 4) || memcmp(len_a, len_b, (size_t)dp.T * 4))
      chk_fail("replay %d: decode top-k differs from the direct call", rep);
    if (memcmp(out_a, out_b, no * 2) || memcmp(lse_a, lse_b, nl * 4))
      chk_fail("replay %d: attention output differs from the direct call", rep);
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  chk_metric("decode %d tokens + attention %d tokens x %d heads", dp.T, mp.T, mp.H);
  chk_end();
}

/* ============================================================================================== */
/* The cases                                                                                       */
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
};

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
    /* v2 (wgmma) paths: one-token clusters of 8 splits, 16 / 32-head CTAs, many tokens without splits */
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
    /* v3 under the library's choice: two 64-head CTAs per token (96: the second one half padding),
     * lens and a token without valid entries; bf16 at batch */
    {.name = "sparse MLA H96 fp8 (stored) T70 topk2048, lens", .H = 96, .T = 70, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .all_invalid_token = 1, .q_amp = 1.0, .num_slots = 30000,
     .check_determinism = 1, .seed = 416},
    {.name = "sparse MLA H128 fp8 (random bytes) T40 topk1500, lens", .H = 128, .T = 40, .topk = 1500,
     .fmt = DSA_KV_FP8_PACKED, .fp8_random_bytes = 1, .lens_given = 1, .q_amp = 2.0, .num_slots = 20000,
     .seed = 417},
    /* Tokens of one to three entries, |q| up to 4: the lse is a score or two. With FP8 KV at 128 heads the
     * library runs v3 (24 tokens), whose tile holds e4m3 x scale rounded once to f16 (2^-12 a value), so a
     * score carries up to ~2^-12 |q . k| of error, which such a token sees in full: loosened to 3e-3
     * from DESIGN's 1e-3 (measured 1.2e-3 on the H200, 2026-11-30). An exact-per-group QK passes 1e-3
     * but cost 19-37 % of v3's FP8 speed (docs/PERF.md, issue 7). v1 (DSA_MLA_KERNEL=v1) is exact. */
    {.name = "sparse MLA H128 fp8 (stored) T24 topk2048, 1-3 entries a token", .H = 128, .T = 24, .topk = 2048,
     .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .few_entries = 1, .lse_tol = 3e-3, .q_amp = 4.0, .num_slots = 5000,
     .seed = 419},
    {.name = "sparse MLA H64 bf16 kv_stride 640, T80 topk2048", .H = 64, .T = 80, .topk = 2048, .fmt = DSA_KV_BF16,
     .kv_stride = 640, .q_amp = 1.0, .num_slots = 30000, .seed = 418},
};

static const store_case k_store_cases[] = {
    {.name = "index-K store: page 64, k_stride 128", .index_k = 1, .page_size = 64, .num_pages = 16, .tokens = 400,
     .src_stride = 128, .seed = 501},
    {.name = "index-K store: page 16, k_stride 192", .index_k = 1, .page_size = 16, .num_pages = 40, .tokens = 300,
     .src_stride = 192, .seed = 502},
    {.name = "MLA store: packed fp8, kv_stride 576", .fmt = DSA_KV_FP8_PACKED, .num_slots = 700, .tokens = 300,
     .src_stride = 576, .seed = 503},
    {.name = "MLA store: packed fp8, kv_stride 640", .fmt = DSA_KV_FP8_PACKED, .num_slots = 300, .tokens = 200,
     .src_stride = 640, .seed = 504},
    {.name = "MLA store: bf16, cache_stride 576", .fmt = DSA_KV_BF16, .num_slots = 500, .cache_stride = 576,
     .tokens = 300, .src_stride = 576, .seed = 505},
    {.name = "MLA store: bf16, kv_stride 640, cache_stride 640", .fmt = DSA_KV_BF16, .num_slots = 400,
     .cache_stride = 640, .tokens = 250, .src_stride = 640, .seed = 506},
};

int main(void) {
  const int init = harness_init("test_gpu");
  if (init) return init;
  const double t0 = now_s();
  int alive = 1;
  for (int i = 0; alive && i < COUNT(k_store_cases); i++)
    alive = harness_run_case(k_store_cases[i].name, store_case_run, &k_store_cases[i]);
  for (int i = 0; alive && i < COUNT(k_topk_cases); i++)
    alive = harness_run_case(k_topk_cases[i].name, topk_case_run, &k_topk_cases[i]);
  for (int i = 0; alive && i < COUNT(k_decode_cases); i++)
    alive = harness_run_case(k_decode_cases[i].name, decode_case_run, &k_decode_cases[i]);
  for (int i = 0; alive && i < COUNT(k_prefill_cases); i++)
    alive = harness_run_case(k_prefill_cases[i].name, prefill_case_run, &k_prefill_cases[i]);
  for (int i = 0; alive && i < COUNT(k_mla_cases); i++)
    alive = harness_run_case(k_mla_cases[i].name, mla_case_run, &k_mla_cases[i]);
  if (alive) alive = harness_run_case("sanity", sanity_run, NULL);
  if (alive) alive = harness_run_case("graph capture (indexer + MLA)", graph_run, NULL);
  fprintf(stderr, "  [total %.1f s]\n", now_s() - t0);
  return harness_finish();
}
