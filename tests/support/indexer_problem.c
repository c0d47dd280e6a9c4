/*
 * indexer_problem.c — see indexer_problem.h.
 */
#include "indexer_problem.h"

#include <math.h>
#include <string.h>

#include "dsa_ref.h"
#include "gpu_harness.h"

/* ============================================================================================== */
/* Query + weights, index-K cache                                                                 */
/* ============================================================================================== */

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
/* Decode                                                                                         */
/* ============================================================================================== */

void decode_build(const decode_case *c, decode_prob *p) {
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

int64_t decode_slot_of(const decode_prob *p, int t, int i) {
  int32_t page = p->bt_h[(int64_t)(t / p->n) * p->bt_stride + i / p->P];
  if (page < 0 || page >= p->num_pages) return -1;
  return (int64_t)page * p->P + i % p->P;
}

double *decode_ref_scores(const decode_prob *p, int64_t *Ls_out) {
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

void decode_run_topk(const decode_prob *p, void *ws, size_t wsb, int ws_byte, int32_t *idx_d, int32_t *len_d,
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

/* ============================================================================================== */
/* Prefill                                                                                        */
/* ============================================================================================== */

void prefill_build(const prefill_case *c, prefill_prob *p) {
  memset(p, 0, sizeof *p);
  rng_seed(c->seed);
  p->c = c;
  p->T = c->n_causal + c->n_extra;
  p->W = c->W;
  const int T = p->T, W = p->W, P = 64;
  const int64_t num_pages = ceil_div((int64_t)W + W / 4 + 100, P);

  ik_gen_rows(&p->k, P, num_pages);

  /* Workspace rows: a random permutation of the cache's slots; a few rows outside the cache. */
  const int32_t *perm = perm_i32(p->k.num_slots);
  p->slots_h = hmalloc((size_t)imax(W, 1) * sizeof *p->slots_h);
  for (int w = 0; w < W; w++) p->slots_h[w] = perm[w];
  const int64_t bad_vals[3] = {p->k.num_slots + 17, -1, (int64_t)1 << 40};
  for (int b = 0; b < c->n_bad; b++) p->slots_h[c->bad_rows[b]] = bad_vals[b];

  /* The rows' keys by c->keys (written into their slots before the cache is quantised) */
  if (c->keys) {
    uint16_t base[4][D_I];
    for (int b = 0; b < 4; b++) fill_bf16(base[b], D_I, 1.0);
    for (int w = 0; w < W; w++) {
      uint16_t *row = p->k.rows + (int64_t)perm[w] * D_I;
      if (c->keys == 1 || c->keys == 2) memcpy(row, base[c->keys == 1 ? 0 : (int)rng_below(4)], sizeof base[0]);
      else if ((w / 64) % 16 == 0) fill_bf16(row, D_I, 1e-3); /* DSA_PREFILL_SAMPLE_STRIDE */
    }
  }
  ik_store_upload(&p->k);

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

int prefill_row_bad(const prefill_prob *p, int64_t w) {
  return p->slots_h[w] < 0 || p->slots_h[w] >= p->k.num_slots;
}
