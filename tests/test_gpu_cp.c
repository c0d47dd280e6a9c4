/*
 * test_gpu_cp.c — context parallelism's single-GPU pieces on one GPU (dsa.h "Context parallelism"):
 *   - dsa_topk_merge against the CPU reference (ties, NaN, -inf, -1 entries, W = 1..8, 13, 16, 64,
 *     65 and 100 lists, rows with fewer valid candidates than topk, none at all; lists in random id
 *     order and, as dsa_cp makes them, in ascending id order), and the same output for the lists in
 *     another order (cmake/dsa_tests.cmake runs the program again with DSA_KERNEL=merge:runs, :select
 *     and :tree);
 *   - dsa_lse_combine against the CPU reference (bf16 and float32 parts, ranks without rows, rows
 *     without any part);
 *   - simulated ranks: one decode problem sharded over W ranks (round robin and blocks; each rank its
 *     own index-K and KV caches, written by the library's cache writers from the same bf16 rows),
 *     each rank's scores -> dsa_topk -> dsa_cp_candidates, the lists merged: exactly the top-k
 *     positions of the single-GPU dsa_indexer_decode; then each rank's attention over the rows it
 *     owns (dsa_cp_local_indices) and dsa_lse_combine against the float64 reference of attention
 *     over the single-GPU selection (DESIGN.md §5 tolerances).
 * Exit 77 (skipped) without an sm_90 GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsa_ref.h"
#include "gpu_harness.h"

/* ---------------------------------------------------------------------------------------------- */
/* dsa_topk_merge                                                                                  */

typedef struct {
  const char *name;
  int W, rows, k_in, topk;
  int kinds; /* 0 random; 1 also ties / NaN / -inf / -1 entries; 2 few values (many ties); 3 a narrow
                band [1, 1 + 2^-12) (the radix select's low digits) */
  uint64_t seed;
  int ascending; /* each list's valid ids in ascending order (-1 entries left where they fall) */
} merge_case;

static int cmp_id_score(const void *x, const void *y) {
  const int32_t a = ((const int32_t *)x)[0], b = ((const int32_t *)y)[0];
  return (a > b) - (a < b);
}

/* List [at, at + k): its valid (id, score) pairs reordered by ascending id into the valid slots. */
static void sort_list(int32_t *id, float *sc, size_t k) {
  int32_t *pairs = hmalloc(k * 8); /* (id, score bits) */
  size_t nv = 0;
  for (size_t j = 0; j < k; j++)
    if (id[j] >= 0) {
      pairs[2 * nv] = id[j];
      memcpy(&pairs[2 * nv + 1], &sc[j], 4);
      nv++;
    }
  qsort(pairs, nv, 8, cmp_id_score);
  for (size_t j = 0, v = 0; j < k; j++)
    if (id[j] >= 0) {
      id[j] = pairs[2 * v];
      memcpy(&sc[j], &pairs[2 * v + 1], 4);
      v++;
    }
}

static void merge_case_run(const void *arg) {
  const merge_case *c = arg;
  rng_seed(c->seed);
  const size_t n = (size_t)c->W * c->rows * c->k_in;
  float *sc = hmalloc(n * 4);
  int32_t *id = hmalloc(n * 4);
  /* ids: distinct within a row (a position has one owner): a permutation of [0, W * k_in * 3) */
  const int64_t span = (int64_t)c->W * c->k_in * 3;
  for (int t = 0; t < c->rows; t++) {
    int32_t *perm = perm_i32(span);
    const int empty_row = c->kinds == 1 && t % 7 == 3; /* no candidate at all */
    const int sparse_row = c->kinds == 1 && t % 5 == 1; /* fewer valid than topk */
    for (int w = 0; w < c->W; w++)
      for (int j = 0; j < c->k_in; j++) {
        const size_t at = ((size_t)w * c->rows + t) * c->k_in + j;
        id[at] = perm[w * c->k_in + j];
        double v = rng_uniform(-4, 4);
        if (c->kinds == 2) v = (double)rng_below(4);
        if (c->kinds == 3) v = 1.0 + rng_unit() / 4096;
        float f = (float)v;
        if (c->kinds == 1) {
          const int64_t u = rng_below(40);
          if (u == 0) f = NAN;
          else if (u == 1) f = -INFINITY;
          else if (u == 2) f = INFINITY;
          else if (u < 8) f = 1.5f; /* ties */
          else if (u == 8) f = -0.f;
          else if (u == 9) f = 0.f;
        }
        sc[at] = f;
        if (empty_row || (sparse_row && rng_below(4) != 0) || (c->kinds == 1 && rng_below(16) == 0)) id[at] = -1;
      }
    if (c->ascending)
      for (int w = 0; w < c->W; w++) {
        const size_t at = ((size_t)w * c->rows + t) * c->k_in;
        sort_list(id + at, sc + at, (size_t)c->k_in);
      }
  }
  dsa_topk_merge_args a;
  memset(&a, 0, sizeof a);
  a.num_lists = c->W;
  a.num_rows = c->rows;
  a.k_in = c->k_in;
  a.topk = c->topk;
  a.cand_scores = sc;
  a.cand_ids = id;
  int32_t *ref_idx = hmalloc((size_t)c->rows * c->topk * 4), *ref_len = hmalloc((size_t)c->rows * 4);
  a.indices = ref_idx;
  a.lens = ref_len;
  dsa_ref_topk_merge(&a);

  const size_t no = (size_t)c->rows * c->topk;
  int32_t *d_idx = dalloc(no * 4), *d_len = dalloc((size_t)c->rows * 4);
  int32_t *h_idx = hmalloc(no * 4), *h_len = hmalloc((size_t)c->rows * 4);
  for (int order = 0; order < 2; order++) {
    /* order 1: the lists reversed (another rank order) — the same output */
    float *sc2 = hmalloc(n * 4);
    int32_t *id2 = hmalloc(n * 4);
    const size_t per = (size_t)c->rows * c->k_in;
    for (int w = 0; w < c->W; w++) {
      const int src = order ? c->W - 1 - w : w;
      memcpy(sc2 + w * per, sc + src * per, per * 4);
      memcpy(id2 + w * per, id + src * per, per * 4);
    }
    dsa_topk_merge_args g = a;
    g.cand_scores = dput(sc2, n * 4);
    g.cand_ids = dput(id2, n * 4);
    g.indices = d_idx;
    g.lens = d_len;
    dfill_i32(d_idx, no, POISON_I32);
    dfill_i32(d_len, (size_t)c->rows, POISON_I32);
    chk_begin("%s: merge%s", c->name, order ? ", lists reversed" : "");
    DSA(dsa_topk_merge(&g, g_stream));
    dget(h_idx, d_idx, no * 4);
    dget(h_len, d_len, (size_t)c->rows * 4);
    int bad = 0;
    for (int t = 0; t < c->rows && !bad; t++) {
      if (h_len[t] != ref_len[t]) {
        chk_fail("row %d: lens %d, reference %d", t, h_len[t], ref_len[t]);
        bad = 1;
      }
      for (int i = 0; i < c->topk && !bad; i++)
        if (h_idx[(size_t)t * c->topk + i] != ref_idx[(size_t)t * c->topk + i]) {
          chk_fail("row %d entry %d: id %d, reference %d", t, i, h_idx[(size_t)t * c->topk + i],
                   ref_idx[(size_t)t * c->topk + i]);
          bad = 1;
        }
    }
    chk_metric("rows=%d lists=%d k_in=%d topk=%d: ids and lens equal the reference", c->rows, c->W, c->k_in, c->topk);
    chk_end();
  }
}

static const merge_case k_merge[] = {
    {"merge W2 k_in 2048 topk 2048 random", 2, 6, 2048, 2048, 0, 11, 0},
    {"merge W8 k_in 2048 topk 2048 ties/NaN/inf/-1/empty rows", 8, 9, 2048, 2048, 1, 12, 0},
    {"merge W3 k_in 700 topk 512 ties/NaN/inf/-1/empty rows", 3, 11, 700, 512, 1, 13, 0},
    {"merge W4 k_in 1024 topk 2048 four values (ties)", 4, 5, 1024, 2048, 2, 14, 0},
    {"merge W1 k_in 100 topk 37", 1, 40, 100, 37, 1, 15, 0},
    {"merge W5 k_in 1 topk 3", 5, 64, 1, 3, 1, 16, 0},
    {"merge W2 k_in 2048 topk 1 four values", 2, 3, 2048, 1, 2, 17, 0},
    {"merge W2 k_in 2048 topk 2048 narrow band", 2, 4, 2048, 2048, 3, 18, 0},
    {"merge W6 k_in 1500 topk 700 narrow band", 6, 3, 1500, 700, 3, 19, 0},
    /* lists in ascending id order (dsa_cp's): the runs kernel places them without a sort */
    {"merge W8 k_in 2048 topk 2048 ascending lists", 8, 5, 2048, 2048, 0, 21, 1},
    {"merge W2 k_in 2048 topk 2048 ascending lists", 2, 6, 2048, 2048, 0, 22, 1},
    {"merge W4 k_in 2048 topk 2048 ascending, ties/NaN/inf/-1/empty rows", 4, 9, 2048, 2048, 1, 23, 1},
    {"merge W3 k_in 700 topk 512 ascending, ties/NaN/inf/-1/empty rows", 3, 11, 700, 512, 1, 24, 1},
    {"merge W5 k_in 1000 topk 2048 ascending, four values (ties)", 5, 4, 1000, 2048, 2, 25, 1},
    {"merge W6 k_in 1500 topk 700 ascending, narrow band", 6, 3, 1500, 700, 3, 26, 1},
    {"merge W7 k_in 3 topk 5 ascending", 7, 64, 3, 5, 1, 27, 1},
    {"merge W1 k_in 100 topk 37 ascending", 1, 40, 100, 37, 1, 28, 1},
    {"merge W8 k_in 2048 topk 1 ascending", 8, 3, 2048, 1, 0, 29, 1},
    /* more lists than runs takes (the choice leaves them to tree); tree merges up to 64 runs, sorts beyond */
    {"merge W16 k_in 1024 topk 2048 ascending, ties/NaN/inf/-1/empty rows", 16, 9, 1024, 2048, 1, 30, 1},
    {"merge W64 k_in 200 topk 2048 ascending", 64, 3, 200, 2048, 0, 31, 1},
    {"merge W65 k_in 100 topk 300 ascending", 65, 3, 100, 300, 0, 32, 1},
    {"merge W100 k_in 3 topk 50 four values (ties)", 100, 4, 3, 50, 2, 33, 0},
    {"merge W13 k_in 17 topk 97 ascending, narrow band", 13, 5, 17, 97, 3, 34, 1},
};

/* ---------------------------------------------------------------------------------------------- */
/* dsa_lse_combine                                                                                 */

typedef struct {
  const char *name;
  int W, T, H;
  dsa_dtype dt;
  uint64_t seed;
} combine_case;

static void combine_case_run(const void *arg) {
  const combine_case *c = arg;
  rng_seed(c->seed);
  const size_t rows = (size_t)c->T * c->H, nv = rows * c->W * DSA_MLA_V_DIM;
  const size_t esz = c->dt == DSA_DTYPE_F32 ? 4 : 2;
  unsigned char *outs = hmalloc(nv * esz);
  float *lses = hmalloc(rows * c->W * 4);
  for (size_t i = 0; i < nv; i++) {
    const double v = rng_nonzero(2.0);
    if (esz == 4) ((float *)outs)[i] = (float)v;
    else ((uint16_t *)outs)[i] = to_bf16(v);
  }
  for (int w = 0; w < c->W; w++)
    for (size_t r = 0; r < rows; r++) {
      float l = (float)rng_uniform(-30, 30);
      if ((r + w) % 5 == 2) l = -INFINITY; /* this rank owned none of the token's rows */
      if (r % 11 == 4) l = -INFINITY;      /* no rank did: out 0, lse -inf */
      if (w == 0 && r % 13 == 6) l = NAN;  /* treated as no rows */
      lses[w * rows + r] = l;
      if (!isfinite(l)) /* an empty rank's out is never read: garbage */
        for (int d = 0; d < DSA_MLA_V_DIM; d++) {
          const size_t at = (w * rows + r) * DSA_MLA_V_DIM + d;
          if (esz == 4) ((float *)outs)[at] = NAN;
          else ((uint16_t *)outs)[at] = BF16_NAN;
        }
    }
  dsa_lse_combine_args a;
  memset(&a, 0, sizeof a);
  a.outs = outs;
  a.parts_dtype = c->dt;
  a.lses = lses;
  a.num_parts = c->W;
  a.num_tokens = c->T;
  a.num_heads = c->H;
  float *ref = hmalloc(rows * DSA_MLA_V_DIM * 4), *ref_lse = hmalloc(rows * 4);
  dsa_ref_lse_combine(&a, ref, ref_lse);

  dsa_lse_combine_args g = a;
  g.outs = dput(outs, nv * esz);
  g.lses = dput(lses, rows * c->W * 4);
  g.out = dalloc(rows * DSA_MLA_V_DIM * 2);
  g.lse = dalloc(rows * 4);
  dset(g.out, POISON_BYTE, rows * DSA_MLA_V_DIM * 2);
  dset(g.lse, POISON_BYTE, rows * 4);
  chk_begin("%s", c->name);
  DSA(dsa_lse_combine(&g, g_stream));
  uint16_t *o = hmalloc(rows * DSA_MLA_V_DIM * 2);
  float *l = hmalloc(rows * 4);
  dget(o, g.out, rows * DSA_MLA_V_DIM * 2);
  dget(l, g.lse, rows * 4);
  double worst = 0, worst_lse = 0;
  for (size_t r = 0; r < rows; r++) {
    double num = 0, den = 0;
    for (int d = 0; d < DSA_MLA_V_DIM; d++) {
      const double x = from_bf16(o[r * DSA_MLA_V_DIM + d]), y = ref[r * DSA_MLA_V_DIM + d];
      num += (x - y) * (x - y);
      den += y * y;
    }
    if (isinf(ref_lse[r])) {
      if (!(isinf(l[r]) && l[r] < 0) || num != 0) {
        chk_fail("row %zu: no part, but lse %g and |out| %g (want -inf, 0)", r, l[r], sqrt(num));
        break;
      }
      continue;
    }
    const double rel = sqrt(num / (den > 0 ? den : 1)), le = fabs(l[r] - ref_lse[r]) / fmax(1, fabs(ref_lse[r]));
    if (rel > worst) worst = rel;
    if (le > worst_lse) worst_lse = le;
  }
  /* a weighted mean of bf16 parts rounded once to bf16: 2^-8 relative at most */
  if (worst > 4e-3) chk_fail("out: relative L2 %.3g > 4e-3", worst);
  if (worst_lse > 1e-5) chk_fail("lse: error %.3g > 1e-5 x max(1, |ref|)", worst_lse);
  chk_metric("W=%d T=%d H=%d: max rel L2 %.2e, max lse err %.2e", c->W, c->T, c->H, worst, worst_lse);
  chk_end();
}

static const combine_case k_combine[] = {
    {"lse combine W2 T5 H16 bf16 parts", 2, 5, 16, DSA_DTYPE_BF16, 21},
    {"lse combine W8 T3 H128 f32 parts", 8, 3, 128, DSA_DTYPE_F32, 22},
    {"lse combine W1 T7 H8 bf16 parts", 1, 7, 8, DSA_DTYPE_BF16, 23},
    {"lse combine W3 T40 H64 f32 parts", 3, 40, 64, DSA_DTYPE_F32, 24},
};

/* ---------------------------------------------------------------------------------------------- */
/* Simulated ranks: one decode step over W shards of one problem                                  */

#define PAGE 64
#define MAX_REQ 8

typedef struct {
  const char *name;
  int W;
  dsa_shard_layout layout;
  int R, n;          /* requests, MTP tokens a request */
  int lens[MAX_REQ]; /* seq_lens */
  int H_I, q_fp8, topk, heads;
  int ties;          /* every index-K row identical: all scores equal */
  uint64_t seed;
} sim_case;

/* positions g < L that rank s owns */
static int64_t owned_below(const dsa_shard *s, int64_t L) {
  if (L <= 0) return 0;
  if (s->layout == DSA_SHARD_ROUND_ROBIN) return L > s->rank ? (L - s->rank + s->world_size - 1) / s->world_size : 0;
  const int64_t lo = (int64_t)s->rank * s->block, hi = lo + s->block;
  return L <= lo ? 0 : (L < hi ? L : hi) - lo;
}

/* The caches of a set of rows: slots of request b's position p = page_of[b][p / PAGE] * PAGE + p % PAGE,
 * written from the bf16 rows k_src / kv_src of global (b, g) by the library's writers. */
typedef struct {
  int64_t num_pages;
  int maxb;
  int32_t *bt;      /* host [R, maxb] */
  uint8_t *d_ik;    /* index-K cache */
  void *d_kv;       /* packed FP8 KV */
  uint8_t *h_kv;    /* host copy of the KV cache (reference) */
} shard_caches;

/* rows[b] positions of request b; pos_to_global(b, p) gives the global position; the bf16 source
 * rows are indexed by global (b, g): k_src[(b * maxL + g) * 128], kv_src[... * 576]. */
static void build_caches(shard_caches *sc, int R, const int64_t *rows, const dsa_shard *s, int maxL,
                         const uint16_t *k_src, const uint16_t *kv_src, int shuffle) {
  sc->maxb = 1;
  for (int b = 0; b < R; b++) sc->maxb = imax(sc->maxb, (int)ceil_div(rows[b], PAGE));
  sc->num_pages = (int64_t)R * sc->maxb + 1;
  int32_t *perm = shuffle ? perm_i32(sc->num_pages) : NULL;
  sc->bt = hmalloc((size_t)R * sc->maxb * 4);
  for (int b = 0; b < R; b++)
    for (int j = 0; j < sc->maxb; j++) {
      const int64_t pg = (int64_t)b * sc->maxb + j;
      sc->bt[b * sc->maxb + j] = (int32_t)(perm ? perm[pg] : pg);
    }
  const int64_t slots = sc->num_pages * PAGE;
  uint16_t *k = hmalloc((size_t)slots * D_I * 2), *kv = hmalloc((size_t)slots * DSA_MLA_QK_DIM * 2);
  int64_t *map = hmalloc((size_t)slots * 8);
  int64_t n = 0;
  for (int b = 0; b < R; b++)
    for (int64_t p = 0; p < rows[b]; p++) {
      const int64_t g = s ? (s->layout == DSA_SHARD_ROUND_ROBIN ? p * s->world_size + s->rank
                                                                : (int64_t)s->rank * s->block + p)
                          : p;
      memcpy(k + n * D_I, k_src + ((size_t)b * maxL + g) * D_I, D_I * 2);
      memcpy(kv + n * DSA_MLA_QK_DIM, kv_src + ((size_t)b * maxL + g) * DSA_MLA_QK_DIM, DSA_MLA_QK_DIM * 2);
      map[n++] = (int64_t)sc->bt[b * sc->maxb + p / PAGE] * PAGE + p % PAGE;
    }
  const size_t ik_bytes = (size_t)slots * IK_ROW_BYTES, kv_bytes = (size_t)slots * DSA_MLA_FP8_SLOT_BYTES;
  sc->d_ik = dalloc(ik_bytes);
  sc->d_kv = dalloc(kv_bytes);
  dset(sc->d_ik, 0, ik_bytes);
  dset(sc->d_kv, 0, kv_bytes);
  if (n > 0) {
    dsa_index_k_store_args ka = {dput(k, (size_t)n * D_I * 2), D_I, dput(map, (size_t)n * 8), (int)n, sc->d_ik,
                                 sc->num_pages, PAGE};
    DSA(dsa_index_k_store(&ka, g_stream));
    dsa_mla_kv_store_args va = {dput(kv, (size_t)n * DSA_MLA_QK_DIM * 2), DSA_MLA_QK_DIM, ka.slot_mapping, (int)n,
                                sc->d_kv, DSA_KV_FP8_PACKED, slots, 0};
    DSA(dsa_mla_kv_store(&va, g_stream));
  }
  sc->h_kv = hmalloc(kv_bytes);
  dget(sc->h_kv, sc->d_kv, kv_bytes);
}

static void sim_case_run(const void *arg) {
  const sim_case *c = arg;
  rng_seed(c->seed);
  const int R = c->R, n = c->n, T = R * n, H = c->H_I, K = c->topk, W = c->W;
  int maxL = 1;
  for (int b = 0; b < R; b++) maxL = imax(maxL, c->lens[b]);
  /* the global rows (bf16): index-K and KV of request b's position g */
  uint16_t *k_src = hmalloc((size_t)R * maxL * D_I * 2), *kv_src = hmalloc((size_t)R * maxL * DSA_MLA_QK_DIM * 2);
  fill_bf16(kv_src, (size_t)R * maxL * DSA_MLA_QK_DIM, 1.0);
  if (c->ties) {
    uint16_t row[D_I];
    fill_bf16(row, D_I, 1.0);
    for (size_t i = 0; i < (size_t)R * maxL; i++) memcpy(k_src + i * D_I, row, sizeof row);
  } else {
    fill_bf16(k_src, (size_t)R * maxL * D_I, 1.0);
  }
  /* the query: q, its FP8 scale, weights */
  const size_t nq = (size_t)T * H * D_I;
  void *q_h;
  float *qs_h = NULL;
  if (c->q_fp8) {
    uint8_t *q8 = hmalloc(nq);
    for (size_t i = 0; i < nq; i++) q8[i] = rng_fp8_quantised();
    qs_h = hmalloc((size_t)T * H * 4);
    for (int i = 0; i < T * H; i++) qs_h[i] = (float)rng_log_uniform(0.01, 0.1);
    q_h = q8;
  } else {
    uint16_t *qb = hmalloc(nq * 2);
    fill_bf16(qb, nq, 1.0);
    q_h = qb;
  }
  float *w_h = hmalloc((size_t)T * H * 4);
  for (int i = 0; i < T * H; i++) w_h[i] = (float)rng_nonzero(1.0);
  dsa_indexer_query qd;
  memset(&qd, 0, sizeof qd);
  qd.q = dput(q_h, nq * (c->q_fp8 ? 1 : 2));
  qd.q_dtype = c->q_fp8 ? DSA_DTYPE_FP8_E4M3 : DSA_DTYPE_BF16;
  qd.q_scale = c->q_fp8 ? dput(qs_h, (size_t)T * H * 4) : NULL;
  qd.weights = dput(w_h, (size_t)T * H * 4);
  qd.weights_dtype = DSA_DTYPE_F32;
  qd.weights_stride = H;
  qd.num_heads = H;
  qd.head_dim = D_I;
  qd.softmax_scale = (float)(1.0 / sqrt(128.0 * H));

  /* ---- one GPU ---- */
  int64_t rows_g[MAX_REQ];
  for (int b = 0; b < R; b++) rows_g[b] = c->lens[b];
  shard_caches gc;
  build_caches(&gc, R, rows_g, NULL, maxL, k_src, kv_src, 1);
  int32_t *seq_h = hmalloc((size_t)R * 4);
  for (int b = 0; b < R; b++) seq_h[b] = c->lens[b];
  dsa_indexer_decode_args da;
  memset(&da, 0, sizeof da);
  da.query = qd;
  da.cache = (dsa_index_k_cache){gc.d_ik, gc.num_pages, PAGE};
  da.seq_lens = dput(seq_h, (size_t)R * 4);
  da.block_table = dput(gc.bt, (size_t)R * gc.maxb * 4);
  da.block_table_stride = gc.maxb;
  da.max_blocks_per_req = gc.maxb;
  da.num_reqs = R;
  da.q_len_per_req = n;
  da.topk = K;
  int32_t *one_idx = dalloc((size_t)T * K * 4), *one_len = dalloc((size_t)T * 4);
  da.topk_indices = one_idx;
  da.topk_lens = one_len;
  size_t wsb = 0;
  DSA_Q(dsa_indexer_decode_workspace_size(&da, &wsb));
  DSA(dsa_indexer_decode(&da, workspace(wsb), wsb, g_stream));
  int32_t *one_h = hmalloc((size_t)T * K * 4), *one_len_h = hmalloc((size_t)T * 4);
  dget(one_h, one_idx, (size_t)T * K * 4);
  dget(one_len_h, one_len, (size_t)T * 4);
  /* slot -> position of the one-GPU cache */
  const int64_t gslots = gc.num_pages * PAGE;
  int32_t *pos_of = hmalloc((size_t)gslots * 4);
  for (int64_t i = 0; i < gslots; i++) pos_of[i] = -1;
  for (int b = 0; b < R; b++)
    for (int j = 0; j < gc.maxb; j++)
      for (int o = 0; o < PAGE; o++) pos_of[(int64_t)gc.bt[b * gc.maxb + j] * PAGE + o] = j * PAGE + o;

  /* ---- W simulated ranks ---- */
  const size_t nk = (size_t)T * K;
  float *cand_s = dalloc((size_t)W * nk * 4);
  int32_t *cand_i = dalloc((size_t)W * nk * 4);
  uint16_t *parts = dalloc((size_t)W * T * c->heads * DSA_MLA_V_DIM * 2);
  float *plse = dalloc((size_t)W * T * c->heads * 4);
  int32_t *merged = dalloc(nk * 4), *mlen = dalloc((size_t)T * 4);
  dsa_shard shards[DSA_MAX_CP_RANKS];
  shard_caches rc[DSA_MAX_CP_RANKS];
  int32_t *rbt[DSA_MAX_CP_RANKS]; /* each rank's block table, one row a token (MTP tokens see different rows) */
  for (int r = 0; r < W; r++) {
    dsa_shard s = {W, r, c->layout, c->layout == DSA_SHARD_BLOCKS ? ceil_div(maxL, W) : 0};
    shards[r] = s;
    int64_t rows_r[MAX_REQ];
    for (int b = 0; b < R; b++) rows_r[b] = owned_below(&s, c->lens[b]);
    build_caches(&rc[r], R, rows_r, &s, maxL, k_src, kv_src, 1);
    /* the local view: token t = b * n + j sees the owned positions below L_j, a request of its own */
    int32_t *lens_r = hmalloc((size_t)T * 4);
    rbt[r] = hmalloc((size_t)T * rc[r].maxb * 4);
    int maxl = 0;
    for (int t = 0; t < T; t++) {
      const int b = t / n, j = t % n;
      const int64_t Lj = c->lens[b] - (n - 1) + j;
      lens_r[t] = (int32_t)owned_below(&s, Lj);
      maxl = imax(maxl, lens_r[t]);
      memcpy(rbt[r] + (size_t)t * rc[r].maxb, rc[r].bt + (size_t)b * rc[r].maxb, (size_t)rc[r].maxb * 4);
    }
    dsa_indexer_decode_scores_args sa;
    memset(&sa, 0, sizeof sa);
    sa.decode.query = qd;
    sa.decode.cache = (dsa_index_k_cache){rc[r].d_ik, rc[r].num_pages, PAGE};
    sa.decode.seq_lens = dput(lens_r, (size_t)T * 4);
    sa.decode.block_table = dput(rbt[r], (size_t)T * rc[r].maxb * 4);
    sa.decode.block_table_stride = rc[r].maxb;
    sa.decode.max_blocks_per_req = rc[r].maxb;
    sa.decode.num_reqs = T;
    sa.decode.q_len_per_req = 1;
    sa.decode.max_seq_len = imax(maxl, 1);
    sa.decode.topk = K;
    const int64_t stride = imax(maxl, 1) + 4;
    sa.scores = dalloc((size_t)T * stride * 4);
    sa.scores_stride = stride;
    DSA(dsa_indexer_decode_scores(&sa, g_stream));
    dsa_topk_args ta;
    memset(&ta, 0, sizeof ta);
    ta.scores = sa.scores;
    ta.scores_stride = stride;
    ta.num_rows = T;
    ta.row_lens = sa.decode.seq_lens;
    ta.max_len = maxl;
    ta.topk = K;
    ta.indices = dalloc(nk * 4);
    size_t twsb = 0;
    DSA_Q(dsa_topk_workspace_size(&ta, &twsb));
    DSA(dsa_topk(&ta, workspace(twsb), twsb, g_stream));
    dsa_cp_candidates_args ca;
    memset(&ca, 0, sizeof ca);
    ca.shard = s;
    ca.scores = sa.scores;
    ca.scores_stride = stride;
    ca.max_len = maxl;
    ca.local_indices = ta.indices;
    ca.num_rows = T;
    ca.topk = K;
    ca.cand_scores = cand_s + r * nk;
    ca.cand_ids = cand_i + r * nk;
    DSA(dsa_cp_candidates(&ca, g_stream));
  }
  dsa_topk_merge_args ma = {cand_s, cand_i, W, T, K, K, merged, mlen};
  DSA(dsa_topk_merge(&ma, g_stream));
  int32_t *m_h = hmalloc(nk * 4), *mlen_h = hmalloc((size_t)T * 4);
  dget(m_h, merged, nk * 4);
  dget(mlen_h, mlen, (size_t)T * 4);

  chk_begin("%s: merged top-k = one GPU's", c->name);
  int32_t *a = hmalloc((size_t)K * 4);
  for (int t = 0; t < T; t++) {
    if (mlen_h[t] != one_len_h[t]) {
      chk_fail("token %d: lens %d, one GPU %d", t, mlen_h[t], one_len_h[t]);
      break;
    }
    const int L = one_len_h[t];
    for (int i = 0; i < L; i++) {
      const int32_t s = one_h[(size_t)t * K + i];
      a[i] = s >= 0 && s < gslots ? pos_of[s] : -2;
    }
    /* ascending, as the merge writes them (insertion sort: L <= 2048) */
    for (int i = 1; i < L; i++)
      for (int j = i; j > 0 && a[j - 1] > a[j]; j--) {
        const int32_t x = a[j];
        a[j] = a[j - 1];
        a[j - 1] = x;
      }
    int bad = -1;
    for (int i = 0; i < K && bad < 0; i++)
      if (m_h[(size_t)t * K + i] != (i < L ? a[i] : -1)) bad = i;
    if (bad >= 0) {
      chk_fail("token %d entry %d: merged position %d, one GPU %d", t, bad, m_h[(size_t)t * K + bad],
               bad < L ? a[bad] : -1);
      break;
    }
  }
  chk_metric("W=%d %s, %d tokens, topk %d: sets and lens identical", W,
             c->layout == DSA_SHARD_ROUND_ROBIN ? "round robin" : "blocks", T, K);
  chk_end();

  /* ---- attention: each rank over the rows it owns, then the LSE merge ---- */
  const float att_scale = (float)(1.0 / sqrt(192.0 + 64.0));
  const size_t nqa = (size_t)T * c->heads * DSA_MLA_QK_DIM;
  uint16_t *qa = hmalloc(nqa * 2);
  fill_bf16(qa, nqa, 1.0);
  void *d_qa = dput(qa, nqa * 2);
  for (int r = 0; r < W; r++) {
    dsa_cp_local_indices_args la;
    memset(&la, 0, sizeof la);
    la.shard = shards[r];
    la.indices = merged;
    la.num_tokens = T;
    la.topk = K;
    la.block_table = dput(rbt[r], (size_t)T * rc[r].maxb * 4);
    la.block_table_stride = rc[r].maxb;
    la.max_blocks_per_req = rc[r].maxb;
    la.q_len_per_req = 1;
    la.page_size = PAGE;
    la.num_pages = rc[r].num_pages;
    la.out_slots = dalloc(nk * 4);
    DSA(dsa_cp_local_indices(&la, g_stream));
    /* compacted: the same owned slots first, in order, their count in out_lens */
    dsa_cp_local_indices_args lc = la;
    lc.out_slots = dalloc(nk * 4);
    lc.out_lens = dalloc((size_t)T * 4);
    DSA(dsa_cp_local_indices(&lc, g_stream));
    {
      int32_t *full = hmalloc(nk * 4), *comp = hmalloc(nk * 4), *cl = hmalloc((size_t)T * 4);
      dget(full, la.out_slots, nk * 4);
      dget(comp, lc.out_slots, nk * 4);
      dget(cl, lc.out_lens, (size_t)T * 4);
      chk_begin("%s: rank %d, compacted local indices = the owned entries in order", c->name, r);
      int owned = 0;
      for (int t = 0; t < T; t++) {
        int j = 0;
        for (int i = 0; i < K; i++)
          if (full[(size_t)t * K + i] >= 0 && (j >= K || comp[(size_t)t * K + j++] != full[(size_t)t * K + i])) {
            chk_fail("token %d: owned entry %d differs", t, i);
            t = T;
            break;
          }
        if (t >= T) break;
        if (cl[t] != j) chk_fail("token %d: out_lens %d, owned %d", t, cl[t], j);
        for (int i = j; i < K; i++)
          if (comp[(size_t)t * K + i] != -1) {
            chk_fail("token %d: entry %d past out_lens is %d", t, i, comp[(size_t)t * K + i]);
            break;
          }
        owned += j;
      }
      chk_metric("%d tokens, %d owned entries", T, owned);
      chk_end();
    }
    if (r % 2) { /* odd ranks attend over the compacted list */
      la.out_slots = lc.out_slots;
      la.out_lens = lc.out_lens;
    }
    dsa_sparse_mla_args aa;
    memset(&aa, 0, sizeof aa);
    aa.q = d_qa;
    aa.num_tokens = T;
    aa.num_heads = c->heads;
    aa.kv_cache = rc[r].d_kv;
    aa.kv_format = DSA_KV_FP8_PACKED;
    aa.num_slots = rc[r].num_pages * PAGE;
    aa.indices = la.out_slots;
    aa.indices_stride = K;
    aa.topk = K;
    aa.lens = la.out_lens;
    aa.softmax_scale = att_scale;
    aa.out = parts + (size_t)r * T * c->heads * DSA_MLA_V_DIM;
    aa.lse = plse + (size_t)r * T * c->heads;
    size_t awsb = 0;
    DSA_Q(dsa_sparse_mla_workspace_size(&aa, &awsb));
    DSA(dsa_sparse_mla(&aa, workspace(awsb), awsb, g_stream));
  }
  const size_t no = (size_t)T * c->heads * DSA_MLA_V_DIM;
  dsa_lse_combine_args ca = {parts, DSA_DTYPE_BF16, plse, W, T, c->heads, dalloc(no * 2), dalloc((size_t)T * c->heads * 4)};
  DSA(dsa_lse_combine(&ca, g_stream));
  uint16_t *out_h = hmalloc(no * 2);
  float *lse_h = hmalloc((size_t)T * c->heads * 4);
  dget(out_h, ca.out, no * 2);
  dget(lse_h, ca.lse, (size_t)T * c->heads * 4);
  /* reference: attention over the one-GPU selection in the one-GPU cache */
  dsa_sparse_mla_args ra;
  memset(&ra, 0, sizeof ra);
  ra.q = qa;
  ra.num_tokens = T;
  ra.num_heads = c->heads;
  ra.kv_cache = gc.h_kv;
  ra.kv_format = DSA_KV_FP8_PACKED;
  ra.num_slots = gslots;
  ra.indices = one_h;
  ra.indices_stride = K;
  ra.topk = K;
  ra.lens = one_len_h;
  ra.softmax_scale = att_scale;
  float *ref_lse = hmalloc((size_t)T * c->heads * 4), *ref_out = hmalloc(no * 4);
  ra.lse = ref_lse;
  dsa_ref_sparse_mla(&ra, ref_out);
  chk_begin("%s: attention over the shards, LSE-merged = reference", c->name);
  double worst = 0, worst_lse = 0;
  int empty = 0;
  for (int t = 0; t < T; t++) {
    double num = 0, den = 0;
    for (size_t i = 0; i < (size_t)c->heads * DSA_MLA_V_DIM; i++) {
      const double x = from_bf16(out_h[(size_t)t * c->heads * DSA_MLA_V_DIM + i]);
      const double y = ref_out[(size_t)t * c->heads * DSA_MLA_V_DIM + i];
      num += (x - y) * (x - y);
      den += y * y;
    }
    for (int h = 0; h < c->heads; h++) {
      const double x = lse_h[t * c->heads + h], y = ref_lse[t * c->heads + h];
      if (isinf(y)) {
        if (!(isinf(x) && x < 0)) chk_fail("token %d head %d: lse %g, reference -inf", t, h, x);
        continue;
      }
      worst_lse = fmax(worst_lse, fabs(x - y) / fmax(1, fabs(y)));
    }
    if (den == 0) {
      empty++;
      if (num != 0) chk_fail("token %d: nothing selected but |out| = %g", t, sqrt(num));
      continue;
    }
    worst = fmax(worst, sqrt(num / den));
  }
  if (worst > TOL_ATTN_OUT) chk_fail("out: relative L2 %.3g > %g", worst, TOL_ATTN_OUT);
  if (worst_lse > TOL_ATTN_LSE) chk_fail("lse: error %.3g > %g", worst_lse, TOL_ATTN_LSE);
  chk_metric("heads %d: max rel L2 %.2e, max lse err %.2e, %d token(s) with nothing selected", c->heads, worst,
             worst_lse, empty);
  chk_end();
}

static const sim_case k_sim[] = {
    {"sim W2 round robin, 1 request 70000, fp8 q", 2, DSA_SHARD_ROUND_ROBIN, 1, 1, {70000}, 32, 1, 2048, 16, 0, 31},
    {"sim W2 blocks, 3 requests (5000, 2048, 0), fp8 q", 2, DSA_SHARD_BLOCKS, 3, 1, {5000, 2048, 0}, 32, 1, 2048, 16,
     0, 32},
    {"sim W3 round robin, 4 requests around topk (2047, 2049, 3000, 1), bf16 q", 3, DSA_SHARD_ROUND_ROBIN, 4, 1,
     {2047, 2049, 3000, 1}, 32, 0, 2048, 64, 0, 33},
    {"sim W4 round robin, MTP 2, 2 requests (40000, 9000), 64 index heads", 4, DSA_SHARD_ROUND_ROBIN, 2, 2,
     {40000, 9000}, 64, 1, 2048, 16, 0, 34},
    {"sim W2 round robin, all scores equal (ties to the lower position)", 2, DSA_SHARD_ROUND_ROBIN, 2, 1, {9000, 3000},
     32, 1, 2048, 16, 1, 35},
    {"sim W8 blocks, 2 requests (100000, 20000), topk 512", 8, DSA_SHARD_BLOCKS, 2, 1, {100000, 20000}, 32, 1, 512,
     128, 0, 36},
};

int main(void) {
  const int init = harness_init("test_gpu_cp");
  if (init) return init;
  int alive = 1;
  for (int i = 0; alive && i < COUNT(k_merge); i++) alive = harness_run_case(k_merge[i].name, merge_case_run, &k_merge[i]);
  for (int i = 0; alive && i < COUNT(k_combine); i++)
    alive = harness_run_case(k_combine[i].name, combine_case_run, &k_combine[i]);
  for (int i = 0; alive && i < COUNT(k_sim); i++) alive = harness_run_case(k_sim[i].name, sim_case_run, &k_sim[i]);
  return harness_finish();
}
