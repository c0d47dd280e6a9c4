/*
 * dsa_ref.c — the CPU reference of every dsa operation (see include/dsa_ref.h and DESIGN.md).
 *
 * Plain C11, host pointers only, float64 accumulation everywhere. This file is the definition the
 * GPU kernels are tested against, so it favours obviously-correct code over speed, except where a
 * benchmark-sized input (1M candidate rows) would make a naive algorithm unusable (top-k). The
 * indexer and attention calls run their tokens on the machine's cores (ref_for_tokens): each token
 * is computed alone, so the results are one thread's, bit for bit.
 */
#include "dsa_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------- */
/* Small helpers                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

static void *xmalloc(size_t bytes) {
  /* malloc(0) may return NULL legitimately; always ask for at least one byte. */
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "dsa_ref: out of memory (%zu bytes)\n", bytes);
    abort();
  }
  return p;
}

/* ---- tokens on several threads ----------------------------------------------------------------
 * fn(ctx, t) for every t in [0, n): each thread takes the next token from a shared counter, and fn
 * computes token t from the call's inputs alone into token t's outputs, with scratch of its own —
 * so which thread runs a token, or in which order, cannot change a bit. Threads: the online cores,
 * at most REF_MAX_THREADS and n; DSA_REF_THREADS=k sets k (1: the calling thread alone). A thread
 * that cannot be started leaves its tokens to the others. */
#define REF_MAX_THREADS 64
typedef void (*ref_token_fn)(const void *ctx, int t);
typedef struct {
  int n;
  atomic_int next;
  ref_token_fn fn;
  const void *ctx;
} ref_tokens;

static void *ref_tokens_run(void *p) {
  ref_tokens *w = p;
  for (int t; (t = atomic_fetch_add(&w->next, 1)) < w->n;) w->fn(w->ctx, t);
  return NULL;
}

static int ref_threads(int n) {
  const char *env = getenv("DSA_REF_THREADS");
  long k = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
  if (k < 1) k = 1;
  if (k > REF_MAX_THREADS) k = REF_MAX_THREADS;
  return (int)(k < n ? k : (n > 0 ? n : 1));
}

static void ref_for_tokens(int n, ref_token_fn fn, const void *ctx) {
  ref_tokens w = {.n = n, .fn = fn, .ctx = ctx};
  atomic_init(&w.next, 0);
  pthread_t tid[REF_MAX_THREADS];
  int started = 0;
  for (int k = ref_threads(n); started + 1 < k; started++)
    if (pthread_create(&tid[started], NULL, ref_tokens_run, &w) != 0) break;
  ref_tokens_run(&w);
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
}

static float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

/* Unaligned-safe loads from byte buffers (the packed layouts do not promise alignment to the
 * reference, and memcpy keeps strict aliasing happy). */
static float load_f32(const uint8_t *p) {
  float f;
  memcpy(&f, p, sizeof f);
  return f;
}

static uint16_t load_u16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* ---------------------------------------------------------------------------------------------- */
/* Storage-type conversions                                                                        */
/* ---------------------------------------------------------------------------------------------- */

float dsa_bf16_to_float(uint16_t x) { return bits_to_float((uint32_t)x << 16); }

uint16_t dsa_float_to_bf16(float x) {
  uint32_t u = float_to_bits(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
    /* NaN: truncation could clear every mantissa bit left (turning it into inf); force a quiet
     * bit so it stays NaN. */
    return (uint16_t)((u >> 16) | 0x0040u);
  }
  /* Round to nearest even on the 16 dropped bits; a carry into the exponent is correct rounding
   * (up to inf for the largest finite values). */
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float dsa_fp8_e4m3_to_float(uint8_t x) {
  uint32_t sign = (uint32_t)(x >> 7) << 31;
  uint32_t e = (x >> 3) & 0xFu;
  uint32_t m = x & 0x7u;
  if (e == 0xFu && m == 0x7u) return bits_to_float(sign | 0x7FC00000u); /* the only NaN codes */
  if (e == 0) {
    /* Subnormal: m * 2^-9, exact in float. */
    float v = (float)m * (1.0f / 512.0f);
    return sign ? -v : v;
  }
  /* Normal: rebias 7 -> 127 and move the 3 mantissa bits to the top of float's 23. */
  return bits_to_float(sign | ((e - 7u + 127u) << 23) | (m << 20));
}

uint8_t dsa_float_to_fp8_e4m3(float x) {
  if (isnan(x)) return 0x7F;
  uint8_t sign = signbit(x) ? 0x80 : 0x00;
  double a = fabs((double)x);
  if (a >= 448.0) return (uint8_t)(sign | 0x7E); /* saturate, infinities included */
  if (a < 0.015625) {
    /* Below the smallest normal 2^-6: subnormal grid of 2^-9. nearbyint rounds half to even in
     * the default rounding mode; q == 8 is exactly code 0x08, the smallest normal. */
    double q = nearbyint(a * 512.0);
    return (uint8_t)(sign | (uint8_t)q);
  }
  int ex;
  (void)frexp(a, &ex);       /* a = f * 2^ex, f in [0.5, 1): unbiased exponent is ex - 1 */
  int e = ex - 1;            /* -6 .. 8 */
  double q = nearbyint(ldexp(a, 3 - e)); /* 8 .. 16: implicit bit plus 3 mantissa bits */
  if (q >= 16.0) {
    q = 8.0;
    e += 1;
  }
  /* e <= 8 with q <= 14 at e == 8 because a < 448 rounds to at most 448 (464 would tie to even
   * 448 too), so the code never reaches 0x7F. */
  return (uint8_t)(sign | (uint8_t)((e + 7) << 3) | (uint8_t)(q - 8.0));
}

/* ---------------------------------------------------------------------------------------------- */
/* Visibility                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

int dsa_ref_decode_len(const dsa_indexer_decode_args *args, int t) {
  int n = args->q_len_per_req;
  int r = t / n;
  int j = t % n;
  int64_t len = (int64_t)args->seq_lens[r] - (n - 1) + j;
  int64_t cap = (int64_t)args->max_blocks_per_req * args->cache.page_size;
  if (args->max_seq_len > 0 && args->max_seq_len < cap) cap = args->max_seq_len;
  return (int)clamp64(len, 0, cap);
}

int dsa_ref_prefill_range(const dsa_indexer_prefill_args *args, int t, int64_t *begin) {
  int64_t w = args->num_workspace_rows;
  int64_t b = clamp64(args->row_starts[t], 0, w);
  int64_t e = clamp64(args->row_ends[t], b, w);
  int64_t cap = args->max_rows > 0 ? args->max_rows : w;
  int64_t len = e - b < cap ? e - b : cap;
  if (begin) *begin = b;
  return (int)len;
}

/* Global slot of decode position i of request r, or -1 when its page id is outside the cache. */
static int64_t decode_slot(const dsa_indexer_decode_args *a, int r, int i) {
  int p = a->cache.page_size;
  int64_t page = a->block_table[(int64_t)r * a->block_table_stride + i / p];
  if (page < 0 || page >= a->cache.num_pages) return -1;
  return page * p + i % p;
}

/* ---------------------------------------------------------------------------------------------- */
/* Index-K cache and indexer scores                                                                */
/* ---------------------------------------------------------------------------------------------- */

int dsa_ref_index_k_row(const dsa_index_k_cache *cache, int head_dim, int64_t slot, double *out) {
  int64_t p = cache->page_size;
  if (slot < 0 || slot >= cache->num_pages * p) return 0;
  int64_t groups = head_dim / 128;
  int64_t page = slot / p, row = slot % p;
  const uint8_t *base = cache->data + page * p * (head_dim + 4 * groups);
  const uint8_t *fp8 = base + row * head_dim;
  const uint8_t *scales = base + p * head_dim + row * groups * 4;
  for (int d = 0; d < head_dim; d++)
    out[d] = (double)dsa_fp8_e4m3_to_float(fp8[d]) * (double)load_f32(scales + (d / 128) * 4);
  return 1;
}

/* Token t's query heads and weights dequantised once, so scoring many keys does not redo it. */
typedef struct {
  int heads, dim;
  double scale;
  double *q; /* [heads, dim] */
  double *w; /* [heads] */
} prepared_query;

static void prepare_query(const dsa_indexer_query *q, int t, prepared_query *pq) {
  int h_n = q->num_heads, d_n = q->head_dim;
  pq->heads = h_n;
  pq->dim = d_n;
  pq->scale = (double)q->softmax_scale;
  for (int h = 0; h < h_n; h++) {
    int64_t row = ((int64_t)t * h_n + h) * d_n;
    double qs = 1.0;
    if (q->q_dtype == DSA_DTYPE_FP8_E4M3) qs = (double)q->q_scale[(int64_t)t * h_n + h];
    for (int d = 0; d < d_n; d++) {
      double v;
      if (q->q_dtype == DSA_DTYPE_FP8_E4M3)
        v = (double)dsa_fp8_e4m3_to_float(((const uint8_t *)q->q)[row + d]) * qs;
      else
        v = (double)dsa_bf16_to_float(((const uint16_t *)q->q)[row + d]);
      pq->q[(int64_t)h * d_n + d] = v;
    }
    int64_t wi = (int64_t)t * q->weights_stride + h;
    pq->w[h] = q->weights_dtype == DSA_DTYPE_BF16
                   ? (double)dsa_bf16_to_float(((const uint16_t *)q->weights)[wi])
                   : (double)((const float *)q->weights)[wi];
  }
}

static double score_prepared(const prepared_query *pq, const double *k) {
  double total = 0.0;
  for (int h = 0; h < pq->heads; h++) {
    const double *qh = pq->q + (int64_t)h * pq->dim;
    /* Four partial sums: the order is irrelevant at float64 precision and it runs faster. */
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int d = 0;
    for (; d + 4 <= pq->dim; d += 4) {
      s0 += qh[d] * k[d];
      s1 += qh[d + 1] * k[d + 1];
      s2 += qh[d + 2] * k[d + 2];
      s3 += qh[d + 3] * k[d + 3];
    }
    for (; d < pq->dim; d++) s0 += qh[d] * k[d];
    double dot = (s0 + s1) + (s2 + s3);
    if (dot > 0.0) total += pq->w[h] * dot; /* ReLU per head */
  }
  return pq->scale * total;
}

static void prepared_alloc(const dsa_indexer_query *q, prepared_query *pq) {
  pq->q = xmalloc(sizeof(double) * (size_t)q->num_heads * (size_t)q->head_dim);
  pq->w = xmalloc(sizeof(double) * (size_t)q->num_heads);
}

static void prepared_free(prepared_query *pq) {
  free(pq->q);
  free(pq->w);
}

double dsa_ref_index_score(const dsa_indexer_query *q, int t, const double *k) {
  prepared_query pq;
  prepared_alloc(q, &pq);
  prepare_query(q, t, &pq);
  double s = score_prepared(&pq, k);
  prepared_free(&pq);
  return s;
}

/* Score of one slot for a prepared token: -inf when the slot is outside the cache. */
static double score_slot(const prepared_query *pq, const dsa_index_k_cache *cache, int64_t slot,
                         double *kbuf) {
  if (!dsa_ref_index_k_row(cache, pq->dim, slot, kbuf)) return -INFINITY;
  return score_prepared(pq, kbuf);
}

/* Decode scores of token t (L values) into out[0..L). */
static void decode_token_scores(const dsa_indexer_decode_args *a, int t, int len,
                                prepared_query *pq, double *kbuf, double *out) {
  int r = t / a->q_len_per_req;
  prepare_query(&a->query, t, pq);
  for (int i = 0; i < len; i++) out[i] = score_slot(pq, &a->cache, decode_slot(a, r, i), kbuf);
}

/* Prefill scores of token t over its len rows starting at begin into out[0..len). */
static void prefill_token_scores(const dsa_indexer_prefill_args *a, int t, int64_t begin, int len,
                                 prepared_query *pq, double *kbuf, double *out) {
  prepare_query(&a->query, t, pq);
  for (int i = 0; i < len; i++)
    out[i] = score_slot(pq, &a->cache, a->kv_workspace_slots[begin + i], kbuf);
}

static int decode_num_tokens(const dsa_indexer_decode_args *a) {
  return a->num_reqs * a->q_len_per_req;
}

/* A token's scratch: its prepared query, one key row and (row_len >= 0) its scores as float64. */
typedef struct {
  prepared_query pq;
  double *kbuf, *row;
} token_scratch;

static void token_scratch_new(const dsa_indexer_query *q, int row_len, token_scratch *ts) {
  prepared_alloc(q, &ts->pq);
  ts->kbuf = xmalloc(sizeof(double) * (size_t)q->head_dim);
  ts->row = row_len >= 0 ? xmalloc(sizeof(double) * (size_t)row_len) : NULL;
}

static void token_scratch_free(token_scratch *ts) {
  free(ts->row);
  free(ts->kbuf);
  prepared_free(&ts->pq);
}

/* The scores calls' arguments as their tokens read them: decode or prefill (the other NULL), float64
 * rows of `stride` doubles (out) or the float32 rows of the scores-only calls (scores). */
typedef struct {
  const dsa_indexer_decode_args *decode;
  const dsa_indexer_prefill_args *prefill;
  double *out;
  int64_t stride;
  float *scores;
  int64_t scores_stride;
} scores_job;

static void scores_token(const void *ctx, int t) {
  const scores_job *j = ctx;
  int64_t begin = 0;
  const int len = j->decode ? dsa_ref_decode_len(j->decode, t) : dsa_ref_prefill_range(j->prefill, t, &begin);
  token_scratch ts;
  token_scratch_new(j->decode ? &j->decode->query : &j->prefill->query, j->out ? -1 : len, &ts);
  double *row = j->out ? j->out + (int64_t)t * j->stride : ts.row;
  if (j->decode) decode_token_scores(j->decode, t, len, &ts.pq, ts.kbuf, row);
  else prefill_token_scores(j->prefill, t, begin, len, &ts.pq, ts.kbuf, row);
  if (!j->out)
    for (int i = 0; i < len; i++) j->scores[(int64_t)t * j->scores_stride + i] = (float)row[i];
  token_scratch_free(&ts);
}

void dsa_ref_indexer_decode_scores_f64(const dsa_indexer_decode_args *args, double *out,
                                       int64_t stride) {
  const scores_job j = {.decode = args, .out = out, .stride = stride};
  ref_for_tokens(decode_num_tokens(args), scores_token, &j);
}

void dsa_ref_indexer_prefill_scores_f64(const dsa_indexer_prefill_args *args, double *out,
                                        int64_t stride) {
  const scores_job j = {.prefill = args, .out = out, .stride = stride};
  ref_for_tokens(args->num_tokens, scores_token, &j);
}

void dsa_ref_indexer_decode_scores(const dsa_indexer_decode_scores_args *args) {
  const scores_job j = {.decode = &args->decode, .scores = args->scores, .scores_stride = args->scores_stride};
  ref_for_tokens(decode_num_tokens(&args->decode), scores_token, &j);
}

void dsa_ref_indexer_prefill_scores(const dsa_indexer_prefill_scores_args *args) {
  const scores_job j = {.prefill = &args->prefill, .scores = args->scores, .scores_stride = args->scores_stride};
  ref_for_tokens(args->prefill.num_tokens, scores_token, &j);
}

/* ---------------------------------------------------------------------------------------------- */
/* Top-k                                                                                           */
/* ---------------------------------------------------------------------------------------------- */

/* A candidate's rank key: an unsigned integer whose order is the score's order, with every NaN
 * at 0 (below -inf) and -0 folded onto +0 (they are equal scores, so position decides). */
typedef struct {
  uint64_t key;
  int32_t pos;
} candidate;

static uint64_t rank_key(double x) {
  if (isnan(x)) return 0;
  if (x == 0.0) x = 0.0;
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  /* Negative: flip all bits (larger magnitude -> smaller key); positive: set the sign bit. The
   * all-ones pattern is a NaN, so no number maps to 0. */
  return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}

/* a ranks before b: larger score, then lower position. */
static int ranks_before(const candidate *a, const candidate *b) {
  return a->key > b->key || (a->key == b->key && a->pos < b->pos);
}

static int cmp_rank(const void *pa, const void *pb) {
  const candidate *a = pa, *b = pb;
  if (ranks_before(a, b)) return -1;
  if (ranks_before(b, a)) return 1;
  return 0;
}

/* Heap with the worst-ranked kept candidate at the root. */
static void heap_sift_down(candidate *h, int n, int i) {
  for (;;) {
    int worst = i, l = 2 * i + 1, r = l + 1;
    if (l < n && ranks_before(&h[worst], &h[l])) worst = l;
    if (r < n && ranks_before(&h[worst], &h[r])) worst = r;
    if (worst == i) return;
    candidate tmp = h[i];
    h[i] = h[worst];
    h[worst] = tmp;
    i = worst;
  }
}

/* Top-k of n scores given as float64 (row_f64) or float32 (row_f32), positions in rank order.
 * A bounded heap of topk candidates: O(n log k) worst case, and on typical data almost every
 * candidate is rejected by one comparison with the root, so 1M rows take milliseconds. */
static int topk_select(const double *row_f64, const float *row_f32, int n, int topk,
                       int32_t *out) {
  if (n <= 0 || topk <= 0) return 0;
  int k = n < topk ? n : topk;
  candidate *heap = xmalloc(sizeof(candidate) * (size_t)k);
  for (int i = 0; i < n; i++) {
    candidate c;
    c.key = rank_key(row_f64 ? row_f64[i] : (double)row_f32[i]);
    c.pos = i;
    if (i < k) {
      heap[i] = c;
      if (i == k - 1)
        for (int j = k / 2 - 1; j >= 0; j--) heap_sift_down(heap, k, j);
    } else if (c.key > heap[0].key) {
      /* Positions arrive in increasing order, so an equal key never ranks before the root. */
      heap[0] = c;
      heap_sift_down(heap, k, 0);
    }
  }
  qsort(heap, (size_t)k, sizeof(candidate), cmp_rank);
  for (int i = 0; i < k; i++) out[i] = heap[i].pos;
  free(heap);
  return k;
}

int dsa_ref_topk_row_f64(const double *row, int n, int topk, int32_t *out) {
  return topk_select(row, NULL, n, topk, out);
}

void dsa_ref_topk(const dsa_topk_args *args) {
  for (int r = 0; r < args->num_rows; r++) {
    int len = args->max_len;
    if (args->row_lens) len = (int)clamp64(args->row_lens[r], 0, args->max_len);
    int32_t *dst = args->indices + (int64_t)r * args->topk;
    int cnt = topk_select(NULL, args->scores + (int64_t)r * args->scores_stride, len, args->topk,
                          dst);
    for (int i = cnt; i < args->topk; i++) dst[i] = -1;
    if (args->lens) args->lens[r] = cnt;
  }
}

static void indexer_decode_token(const void *ctx, int t) {
  const dsa_indexer_decode_args *args = ctx;
  const int r = t / args->q_len_per_req;
  const int len = dsa_ref_decode_len(args, t);
  int32_t *dst = args->topk_indices + (int64_t)t * args->topk;
  token_scratch ts;
  token_scratch_new(&args->query, len, &ts);
  decode_token_scores(args, t, len, &ts.pq, ts.kbuf, ts.row);
  const int cnt = dsa_ref_topk_row_f64(ts.row, len, args->topk, dst);
  for (int i = 0; i < cnt; i++) dst[i] = (int32_t)decode_slot(args, r, dst[i]); /* -1 if bad page */
  for (int i = cnt; i < args->topk; i++) dst[i] = -1;
  if (args->topk_lens) args->topk_lens[t] = cnt;
  token_scratch_free(&ts);
}

void dsa_ref_indexer_decode(const dsa_indexer_decode_args *args) {
  ref_for_tokens(decode_num_tokens(args), indexer_decode_token, args);
}

static void indexer_prefill_token(const void *ctx, int t) {
  const dsa_indexer_prefill_args *args = ctx;
  const int64_t capacity = args->cache.num_pages * args->cache.page_size;
  int64_t begin;
  const int len = dsa_ref_prefill_range(args, t, &begin);
  int32_t *dst = args->topk_indices + (int64_t)t * args->topk;
  token_scratch ts;
  token_scratch_new(&args->query, len, &ts);
  prefill_token_scores(args, t, begin, len, &ts.pq, ts.kbuf, ts.row);
  const int cnt = dsa_ref_topk_row_f64(ts.row, len, args->topk, dst);
  for (int i = 0; i < cnt; i++) {
    const int64_t w = begin + dst[i];
    if (args->output_global_slots) {
      const int64_t slot = args->kv_workspace_slots[w];
      dst[i] = (slot >= 0 && slot < capacity) ? (int32_t)slot : -1;
    } else {
      dst[i] = (int32_t)w;
    }
  }
  for (int i = cnt; i < args->topk; i++) dst[i] = -1;
  if (args->topk_lens) args->topk_lens[t] = cnt;
  token_scratch_free(&ts);
}

void dsa_ref_indexer_prefill(const dsa_indexer_prefill_args *args) {
  ref_for_tokens(args->num_tokens, indexer_prefill_token, args);
}

/* ---------------------------------------------------------------------------------------------- */
/* Sparse MLA attention                                                                            */
/* ---------------------------------------------------------------------------------------------- */

/* KV row of slot s dequantised: k[0..576); v is k[0..512). */
static void mla_kv_row(const dsa_sparse_mla_args *a, int64_t s, double *k) {
  if (a->kv_format == DSA_KV_FP8_PACKED) {
    const uint8_t *row = (const uint8_t *)a->kv_cache + s * DSA_MLA_FP8_SLOT_BYTES;
    for (int d = 0; d < DSA_MLA_V_DIM; d++)
      k[d] = (double)dsa_fp8_e4m3_to_float(row[d]) * (double)load_f32(row + 512 + (d / 128) * 4);
    for (int d = 0; d < DSA_MLA_QK_DIM - DSA_MLA_V_DIM; d++)
      k[DSA_MLA_V_DIM + d] = (double)dsa_bf16_to_float(load_u16(row + 528 + 2 * d));
  } else {
    const uint16_t *row = (const uint16_t *)a->kv_cache + s * a->kv_stride;
    for (int d = 0; d < DSA_MLA_QK_DIM; d++) k[d] = (double)dsa_bf16_to_float(row[d]);
  }
}

typedef struct {
  const dsa_sparse_mla_args *args;
  float *out_f32;
} mla_job;

/* Token t: its valid entries in index-list order (duplicates count twice), the scaled scores of
 * every head against them, the softmax and the weighted sum of the value rows. */
static void sparse_mla_token(const void *ctx, int t) {
  enum { QK = DSA_MLA_QK_DIM, V = DSA_MLA_V_DIM };
  const mla_job *j = ctx;
  const dsa_sparse_mla_args *args = j->args;
  const int heads = args->num_heads, topk = args->topk;
  double *q = xmalloc(sizeof(double) * (size_t)heads * QK);
  double *s = xmalloc(sizeof(double) * (size_t)heads * (size_t)topk); /* [heads, valid entries] */
  double *acc = xmalloc(sizeof(double) * (size_t)heads * V);
  double *sums = xmalloc(sizeof(double) * (size_t)heads);
  double *k = xmalloc(sizeof(double) * QK);
  int64_t *slots = xmalloc(sizeof(int64_t) * (size_t)topk);
  const uint16_t *qbits = args->q;
  uint16_t *out = args->out;

  const int32_t *idx = args->indices + (int64_t)t * args->indices_stride;
  int lim = topk;
  if (args->lens) lim = (int)clamp64(args->lens[t], 0, topk);
  int nv = 0;
  for (int i = 0; i < lim; i++)
    if (idx[i] >= 0 && idx[i] < args->num_slots) slots[nv++] = idx[i];

  for (int64_t e = 0; e < (int64_t)heads * QK; e++)
    q[e] = (double)dsa_bf16_to_float(qbits[(int64_t)t * heads * QK + e]);
  for (int64_t e = 0; e < (int64_t)heads * V; e++) acc[e] = 0.0;

  /* Pass 1: scaled scores of every head against every valid row. */
  for (int i = 0; i < nv; i++) {
    mla_kv_row(args, slots[i], k);
    for (int h = 0; h < heads; h++) {
      double dot = 0.0;
      for (int d = 0; d < QK; d++) dot += q[(int64_t)h * QK + d] * k[d];
      s[(int64_t)h * nv + i] = (double)args->softmax_scale * dot;
    }
  }
  /* Max per head, then the scores turn into p = exp(s - m) in place. */
  for (int h = 0; h < heads; h++) {
    double m = -INFINITY, sum = 0.0;
    for (int i = 0; i < nv; i++) m = fmax(m, s[(int64_t)h * nv + i]);
    for (int i = 0; i < nv; i++) {
      double p = exp(s[(int64_t)h * nv + i] - m);
      s[(int64_t)h * nv + i] = p;
      sum += p;
    }
    sums[h] = sum;
    if (args->lse) args->lse[(int64_t)t * heads + h] = nv ? (float)(m + log(sum)) : -INFINITY;
  }
  /* Pass 2: weighted sum of the value rows. */
  for (int i = 0; i < nv; i++) {
    mla_kv_row(args, slots[i], k);
    for (int h = 0; h < heads; h++) {
      double p = s[(int64_t)h * nv + i];
      double *ah = acc + (int64_t)h * V;
      for (int d = 0; d < V; d++) ah[d] += p * k[d];
    }
  }
  for (int h = 0; h < heads; h++) {
    int64_t o = ((int64_t)t * heads + h) * V;
    for (int d = 0; d < V; d++) {
      double v = nv ? acc[(int64_t)h * V + d] / sums[h] : 0.0;
      if (out) out[o + d] = dsa_float_to_bf16((float)v);
      if (j->out_f32) j->out_f32[o + d] = (float)v;
    }
  }
  free(slots);
  free(k);
  free(sums);
  free(acc);
  free(s);
  free(q);
}

void dsa_ref_sparse_mla(const dsa_sparse_mla_args *args, float *out_f32) {
  const mla_job j = {args, out_f32};
  ref_for_tokens(args->num_tokens, sparse_mla_token, &j);
}

/* ---------------------------------------------------------------------------------------------- */
/* Cache writers                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

/* FP8-quantise n bf16 values with one scale = max(amax, floor) / 448 (float32 arithmetic, as the
 * kernels do it, so that stored scales match bit for bit). Returns the scale. */
static float quantize_group(const uint16_t *x, int n, uint8_t *dst) {
  float amax = 0.0f;
  for (int d = 0; d < n; d++) amax = fmaxf(amax, fabsf(dsa_bf16_to_float(x[d])));
  float scale = fmaxf(amax, DSA_FP8_AMAX_FLOOR) / 448.0f;
  for (int d = 0; d < n; d++) {
    float v = dsa_bf16_to_float(x[d]) / scale;
    dst[d] = dsa_float_to_fp8_e4m3(v);
  }
  return scale;
}

void dsa_ref_index_k_store(const dsa_index_k_store_args *args) {
  enum { D = DSA_INDEX_HEAD_DIM, G = DSA_INDEX_HEAD_DIM / 128 };
  int64_t p = args->page_size;
  int64_t capacity = args->num_pages * p;
  for (int t = 0; t < args->num_tokens; t++) {
    int64_t slot = args->slot_mapping[t];
    if (slot < 0 || slot >= capacity) continue;
    const uint16_t *k = (const uint16_t *)args->k + (int64_t)t * args->k_stride;
    uint8_t *base = args->cache + (slot / p) * p * (D + 4 * G);
    int64_t row = slot % p;
    for (int g = 0; g < G; g++) {
      float scale = quantize_group(k + g * 128, 128, base + row * D + g * 128);
      memcpy(base + p * D + (row * G + g) * 4, &scale, sizeof scale);
    }
  }
}

void dsa_ref_mla_kv_store(const dsa_mla_kv_store_args *args) {
  for (int t = 0; t < args->num_tokens; t++) {
    int64_t slot = args->slot_mapping[t];
    if (slot < 0 || slot >= args->num_slots) continue;
    const uint16_t *kv = (const uint16_t *)args->kv + (int64_t)t * args->kv_stride;
    if (args->kv_format == DSA_KV_FP8_PACKED) {
      uint8_t *row = (uint8_t *)args->cache + slot * DSA_MLA_FP8_SLOT_BYTES;
      for (int g = 0; g < DSA_MLA_V_DIM / 128; g++) {
        float scale = quantize_group(kv + g * 128, 128, row + g * 128);
        memcpy(row + 512 + g * 4, &scale, sizeof scale);
      }
      memcpy(row + 528, kv + DSA_MLA_V_DIM, sizeof(uint16_t) * (DSA_MLA_QK_DIM - DSA_MLA_V_DIM));
    } else {
      uint16_t *row = (uint16_t *)args->cache + slot * args->cache_stride;
      memcpy(row, kv, sizeof(uint16_t) * DSA_MLA_QK_DIM);
    }
  }
}

/* ---------------------------------------------------------------------------------------------- */
/* Context parallelism                                                                             */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
  float s;
  int32_t id;
} ref_cand;

/* rank order: larger score first, NaN last, equal scores (-0 = +0) by the lower id */
static int ref_cand_cmp(const void *pa, const void *pb) {
  const ref_cand *a = pa, *b = pb;
  const int na = isnan(a->s), nb = isnan(b->s);
  if (na != nb) return na - nb;
  if (!na && a->s != b->s) return a->s > b->s ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

static int ref_i32_cmp(const void *pa, const void *pb) {
  const int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
  return (a > b) - (a < b);
}

void dsa_ref_topk_merge(const dsa_topk_merge_args *a) {
  const int n = a->num_lists * a->k_in;
  ref_cand *c = xmalloc((size_t)n * sizeof *c);
  int32_t *ids = xmalloc((size_t)a->topk * sizeof *ids);
  for (int t = 0; t < a->num_rows; t++) {
    int valid = 0;
    for (int w = 0; w < a->num_lists; w++)
      for (int j = 0; j < a->k_in; j++) {
        const size_t at = ((size_t)w * a->num_rows + t) * a->k_in + j;
        if (a->cand_ids[at] < 0) continue;
        c[valid].s = a->cand_scores[at];
        c[valid].id = a->cand_ids[at];
        valid++;
      }
    qsort(c, (size_t)valid, sizeof *c, ref_cand_cmp);
    const int k = valid < a->topk ? valid : a->topk;
    for (int i = 0; i < k; i++) ids[i] = c[i].id;
    qsort(ids, (size_t)k, sizeof *ids, ref_i32_cmp);
    for (int i = 0; i < a->topk; i++) a->indices[(size_t)t * a->topk + i] = i < k ? ids[i] : -1;
    if (a->lens) a->lens[t] = k;
  }
  free(c);
  free(ids);
}

void dsa_ref_lse_combine(const dsa_lse_combine_args *a, float *out_f32, float *lse) {
  const size_t rows = (size_t)a->num_tokens * a->num_heads;
  for (size_t r = 0; r < rows; r++) {
    double m = -INFINITY;
    for (int w = 0; w < a->num_parts; w++) {
      const double l = a->lses[w * rows + r];
      if (isfinite(l) && l > m) m = l;
    }
    double acc[DSA_MLA_V_DIM] = {0};
    double total = -INFINITY;
    if (isfinite(m)) {
      double sum = 0;
      for (int w = 0; w < a->num_parts; w++) {
        const double l = a->lses[w * rows + r];
        if (isfinite(l)) sum += exp(l - m);
      }
      for (int w = 0; w < a->num_parts; w++) {
        const double l = a->lses[w * rows + r];
        if (!isfinite(l)) continue;
        const double scale = exp(l - m) / sum;
        for (int d = 0; d < DSA_MLA_V_DIM; d++) {
          const size_t at = (w * rows + r) * DSA_MLA_V_DIM + d;
          const double v = a->parts_dtype == DSA_DTYPE_F32 ? ((const float *)a->outs)[at]
                                                           : dsa_bf16_to_float(((const uint16_t *)a->outs)[at]);
          acc[d] += scale * v;
        }
      }
      total = m + log(sum);
    }
    for (int d = 0; d < DSA_MLA_V_DIM; d++) out_f32[r * DSA_MLA_V_DIM + d] = (float)acc[d];
    lse[r] = (float)total;
  }
}
