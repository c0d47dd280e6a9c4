/*
 * test_ref.c — CPU tests of the float64 reference (src/ref/dsa_ref.c) against independent brute
 * force on tiny inputs: storage conversions, visibility rules, cache layouts, indexer scores,
 * top-k ranking rules, sparse MLA attention and the cache writers.
 *
 * Data come from the tests' one generator (tests/support/rng.h), a fixed seed per test, and are never
 * zero. The brute-force side here re-derives every layout offset and ranking rule from DESIGN.md on
 * its own; it only borrows the scalar bf16/FP8 conversions, which the first tests check exhaustively.
 *
 * Exit status 0 when every test passes; the last line printed is "N passed, M failed".
 */
#include "dsa_ref.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rng.h"

/* ---------------------------------------------------------------------------------------------- */
/* Test harness                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

static int g_errors;     /* failed checks in the current test */
static const char *g_test;

/* Records a failed check; prints the first few of each test so a broken rule stays readable. */
static int check(int ok, const char *fmt, ...) {
  if (ok) return 1;
  if (g_errors < 8) {
    va_list ap;
    va_start(ap, fmt);
    printf("  [%s] ", g_test);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
  }
  g_errors++;
  return 0;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

/* One dsa_rng stream (rng.h), its state set from the test's seed. */
static dsa_rng g_rng = {0x9E3779B97F4A7C15ull};
static void seed(uint64_t s) { g_rng = dsa_rng_from_state(s * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull); }
static uint64_t rnd_u64(void) { return dsa_rng_next(&g_rng); }
static double rnd_unit(void) { return dsa_rng_unit(&g_rng); }
static int rnd_int(int n) { return (int)dsa_rng_below(&g_rng, (uint64_t)n); }
/* Random sign, magnitude in [lo, hi]: never zero. */
static double rnd_nz(double lo, double hi) {
  double m = lo + (hi - lo) * rnd_unit();
  return (rnd_u64() & 1) ? -m : m;
}
static uint16_t rnd_bf16(double lo, double hi) { return dsa_float_to_bf16((float)rnd_nz(lo, hi)); }
/* A random finite, non-zero FP8 code (either sign). */
static uint8_t rnd_fp8_code(void) { return (uint8_t)((1 + rnd_int(126)) | (rnd_int(2) << 7)); }

static double bf(uint16_t x) { return (double)dsa_bf16_to_float(x); }
static double f8(uint8_t x) { return (double)dsa_fp8_e4m3_to_float(x); }
static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---------------------------------------------------------------------------------------------- */
/* Brute-force top-k: repeated argmax under DESIGN.md's rules, O(n * k)                            */
/* ---------------------------------------------------------------------------------------------- */

/* a (at position pa) ranks before b (at pb): numbers before NaN, larger first, then lower position. */
static int bf_before(double a, int pa, double b, int pb) {
  int na = isnan(a), nb = isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return pa < pb;
}

static int brute_topk(const double *s, int n, int k, int32_t *out) {
  char *taken = xcalloc((size_t)(n > 0 ? n : 1), 1);
  int cnt = n < k ? (n > 0 ? n : 0) : k;
  for (int r = 0; r < cnt; r++) {
    int best = -1;
    for (int i = 0; i < n; i++)
      if (!taken[i] && (best < 0 || bf_before(s[i], i, s[best], best))) best = i;
    taken[best] = 1;
    out[r] = best;
  }
  free(taken);
  return cnt;
}

/* ---------------------------------------------------------------------------------------------- */
/* Conversions                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

static void test_bf16_known(void) {
  check(dsa_float_to_bf16(1.0f) == 0x3F80, "1.0 -> %04x", dsa_float_to_bf16(1.0f));
  check(dsa_float_to_bf16(-2.0f) == 0xC000, "-2.0");
  check(dsa_bf16_to_float(0x3F80) == 1.0f, "0x3F80 -> 1");
  check(dsa_bf16_to_float(0xC0490000u >> 16) == -3.140625f, "0xC049 -> -3.140625");
  /* Ties to even: 1 + 2^-8 lies halfway between 0x3F80 and 0x3F81. */
  check(dsa_float_to_bf16(1.0f + 0x1p-8f) == 0x3F80, "tie down to even");
  check(dsa_float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82, "tie up to even");
  check(dsa_float_to_bf16(1.0f + 0x1p-8f + 0x1p-23f) == 0x3F81, "just above the tie");
  check(dsa_float_to_bf16(INFINITY) == 0x7F80, "inf");
  check(dsa_float_to_bf16(-INFINITY) == 0xFF80, "-inf");
  check(dsa_float_to_bf16(bitsf(0x7F7FFFFFu)) == 0x7F80, "FLT_MAX rounds to inf");
  check(dsa_float_to_bf16(-0.0f) == 0x8000, "-0");
  check(isnan(dsa_bf16_to_float(dsa_float_to_bf16(NAN))), "NaN stays NaN");
  check(isnan(dsa_bf16_to_float(dsa_float_to_bf16(bitsf(0x7F800001u)))), "low-bit NaN stays NaN");
  check(isnan(dsa_bf16_to_float(dsa_float_to_bf16(bitsf(0xFF800001u)))), "negative NaN stays NaN");
  check(isnan(dsa_bf16_to_float(0x7FC0)), "0x7FC0 is NaN");
}

static void test_bf16_roundtrip_all(void) {
  for (uint32_t c = 0; c < 65536; c++) {
    float f = dsa_bf16_to_float((uint16_t)c);
    check(fbits(f) == c << 16, "decode %04x is not the upper half", c);
    int is_nan = (c & 0x7F80) == 0x7F80 && (c & 0x7F) != 0;
    if (is_nan)
      check(isnan(f) && isnan(dsa_bf16_to_float(dsa_float_to_bf16(f))), "NaN %04x", c);
    else
      check(dsa_float_to_bf16(f) == c, "round trip %04x -> %04x", c, dsa_float_to_bf16(f));
  }
}

static void test_bf16_rne_brute(void) {
  seed(11);
  for (int it = 0; it < 200000; it++) {
    uint32_t u = (uint32_t)rnd_u64();
    if ((u & 0x7F800000u) == 0x7F800000u) continue;        /* inf / NaN: known-value test */
    if (((u >> 16) & 0x7FFF) == 0x7F7F) continue;          /* may round to inf: known-value test */
    if (it % 4 == 0) u = (u & 0xFFFF0000u) | 0x8000u;      /* force exact ties often */
    float x = bitsf(u);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dl = fabs((double)x - bf(lo)), dh = fabs((double)x - bf(hi));
    uint16_t want = dl < dh ? lo : (dh < dl ? hi : ((lo & 1) ? hi : lo));
    check(dsa_float_to_bf16(x) == want, "%08x -> %04x, want %04x", u, dsa_float_to_bf16(x), want);
  }
}

static void test_fp8_known(void) {
  static const struct {
    float x;
    uint8_t code;
  } cases[] = {
      {0.0f, 0x00},         {-0.0f, 0x80},          {1.0f, 0x38},           {-1.0f, 0xB8},
      {448.0f, 0x7E},       {-448.0f, 0xFE},        {1000.0f, 0x7E},        {-1e30f, 0xFE},
      {INFINITY, 0x7E},     {-INFINITY, 0xFE},      {464.0f, 0x7E},         {0x1p-9f, 0x01},
      {0x1p-10f, 0x00},     {3 * 0x1p-10f, 0x02},   {1.0625f, 0x38},        {1.1875f, 0x3A},
      {7.5f * 0x1p-9f, 0x08}, {0x1p-6f, 0x08},      {240.0f, 0x77},         {7 * 0x1p-9f, 0x07},
      {416.0f, 0x7D},       {432.0f, 0x7E},         {-0x1p-11f, 0x80},      {0.3f, 0x2A},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t got = dsa_float_to_fp8_e4m3(cases[i].x);
    check(got == cases[i].code, "encode %g -> %02x, want %02x", cases[i].x, got, cases[i].code);
  }
  check(dsa_fp8_e4m3_to_float(0x01) == 0x1p-9f, "0x01 -> 2^-9");
  check(dsa_fp8_e4m3_to_float(0x07) == 7 * 0x1p-9f, "0x07 -> 7*2^-9");
  check(dsa_fp8_e4m3_to_float(0x08) == 0x1p-6f, "0x08 -> 2^-6");
  check(dsa_fp8_e4m3_to_float(0x38) == 1.0f, "0x38 -> 1");
  check(dsa_fp8_e4m3_to_float(0x77) == 240.0f, "0x77 -> 240");
  check(dsa_fp8_e4m3_to_float(0x7E) == 448.0f, "0x7E -> 448");
  check(dsa_fp8_e4m3_to_float(0xFE) == -448.0f, "0xFE -> -448");
  check(dsa_fp8_e4m3_to_float(0x80) == 0.0f && signbit(dsa_fp8_e4m3_to_float(0x80)), "0x80 -> -0");
  check(isnan(dsa_fp8_e4m3_to_float(0x7F)), "0x7F is NaN");
  check(isnan(dsa_fp8_e4m3_to_float(0xFF)), "0xFF is NaN");
  check(dsa_float_to_fp8_e4m3(NAN) == 0x7F, "NaN -> 0x7F");
  check(dsa_float_to_fp8_e4m3(-NAN) == 0x7F, "-NaN -> 0x7F");
}

static void test_fp8_roundtrip_all(void) {
  for (int c = 0; c < 256; c++) {
    float f = dsa_fp8_e4m3_to_float((uint8_t)c);
    if ((c & 0x7F) == 0x7F) {
      check(isnan(f), "code %02x should be NaN", c);
      continue;
    }
    /* Independent decode: sign, exponent bias 7, subnormals at 2^-9 steps. */
    int e = (c >> 3) & 15, m = c & 7;
    double want = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m, -9);
    if (c & 0x80) want = -want;
    check((double)f == want && !!signbit(f) == !!(c & 0x80), "decode %02x = %g, want %g", c, f, want);
    check(dsa_float_to_fp8_e4m3(f) == c, "round trip %02x", c);
  }
}

/* Nearest FP8 code by scanning the whole positive grid; ties go to the even code. */
static uint8_t brute_fp8(float x) {
  if (isnan(x)) return 0x7F;
  double a = fabs((double)x);
  uint8_t best = 0;
  double bd = INFINITY;
  for (int c = 0; c <= 0x7E; c++) {
    double d = fabs(a - f8((uint8_t)c));
    if (d < bd || (d == bd && (c & 1) == 0)) {
      bd = d;
      best = (uint8_t)c;
    }
  }
  if (a > 448.0) best = 0x7E;
  return (uint8_t)(best | (signbit(x) ? 0x80 : 0));
}

static void test_fp8_rne_brute(void) {
  seed(12);
  for (int it = 0; it < 100000; it++) {
    float x = (float)(ldexp(1.0 + rnd_unit(), -14 + rnd_int(25)) * (rnd_int(2) ? -1 : 1));
    check(dsa_float_to_fp8_e4m3(x) == brute_fp8(x), "%a -> %02x, want %02x", x,
          dsa_float_to_fp8_e4m3(x), brute_fp8(x));
  }
  /* Every exact midpoint between neighbours (exact in float: 5 significant bits), and a hair on
   * either side of it. */
  for (int c = 0; c < 0x7E; c++) {
    float mid = (float)((f8((uint8_t)c) + f8((uint8_t)(c + 1))) / 2);
    float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, 1000.0f)};
    for (int i = 0; i < 3; i++)
      for (int s = 0; s < 2; s++) {
        float x = s ? -xs[i] : xs[i];
        check(dsa_float_to_fp8_e4m3(x) == brute_fp8(x), "midpoint %a -> %02x, want %02x", x,
              dsa_float_to_fp8_e4m3(x), brute_fp8(x));
      }
  }
}

/* ---------------------------------------------------------------------------------------------- */
/* Fixtures: indexer query, index-K cache                                                          */
/* ---------------------------------------------------------------------------------------------- */

enum { DI = 128 };

typedef struct {
  int T, H;
  void *q;
  float *q_scale;
  void *w;
  double *qd; /* [T, H, 128] decoded by the test */
  double *wd; /* [T, H] */
  dsa_indexer_query args;
} query_fx;

static void query_fx_init(query_fx *f, int T, int H, dsa_dtype qt, dsa_dtype wt, int64_t wstride,
                          uint64_t s) {
  seed(s);
  memset(f, 0, sizeof *f);
  f->T = T;
  f->H = H;
  size_t nq = (size_t)T * H * DI;
  f->qd = xcalloc(nq, sizeof(double));
  f->wd = xcalloc((size_t)T * H, sizeof(double));
  if (qt == DSA_DTYPE_BF16) {
    uint16_t *q = xcalloc(nq, 2);
    for (size_t i = 0; i < nq; i++) {
      q[i] = rnd_bf16(0.05, 1.0);
      f->qd[i] = bf(q[i]);
    }
    f->q = q;
  } else {
    uint8_t *q = xcalloc(nq, 1);
    f->q_scale = xcalloc((size_t)T * H, sizeof(float));
    for (int i = 0; i < T * H; i++) f->q_scale[i] = (float)(0.002 + 0.003 * rnd_unit());
    for (size_t i = 0; i < nq; i++) {
      q[i] = rnd_fp8_code();
      f->qd[i] = f8(q[i]) * (double)f->q_scale[i / DI];
    }
    f->q = q;
  }
  /* Weight rows are strided; the padding holds NaN so that reading it would poison the score. */
  size_t nw = (size_t)(T > 0 ? T : 1) * (size_t)wstride;
  if (wt == DSA_DTYPE_F32) {
    float *w = xcalloc(nw, sizeof(float));
    for (size_t i = 0; i < nw; i++) w[i] = NAN;
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++) {
        w[t * wstride + h] = (float)rnd_nz(0.1, 1.0);
        f->wd[t * H + h] = w[t * wstride + h];
      }
    f->w = w;
  } else {
    uint16_t *w = xcalloc(nw, 2);
    for (size_t i = 0; i < nw; i++) w[i] = 0x7FC0;
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++) {
        w[t * wstride + h] = rnd_bf16(0.1, 1.0);
        f->wd[t * H + h] = bf(w[t * wstride + h]);
      }
    f->w = w;
  }
  f->args.q = f->q;
  f->args.q_dtype = qt;
  f->args.q_scale = f->q_scale;
  f->args.weights = f->w;
  f->args.weights_dtype = wt;
  f->args.weights_stride = wstride;
  f->args.num_heads = H;
  f->args.head_dim = DI;
  f->args.softmax_scale = 0.0883883f;
}

static void query_fx_free(query_fx *f) {
  free(f->q);
  free(f->q_scale);
  free(f->w);
  free(f->qd);
  free(f->wd);
}

typedef struct {
  int64_t pages;
  int P;
  uint8_t *data;
  dsa_index_k_cache c;
} kcache_fx;

static void kcache_fx_init(kcache_fx *f, int64_t pages, int P, uint64_t s) {
  seed(s);
  f->pages = pages;
  f->P = P;
  size_t page_bytes = (size_t)P * (DI + 4);
  f->data = xcalloc((size_t)pages * page_bytes, 1);
  for (int64_t p = 0; p < pages; p++) {
    uint8_t *base = f->data + p * page_bytes;
    for (int i = 0; i < P * DI; i++) base[i] = rnd_fp8_code();
    for (int r = 0; r < P; r++) {
      float sc = (float)(0.01 + 0.04 * rnd_unit());
      memcpy(base + (size_t)P * DI + (size_t)r * 4, &sc, 4);
    }
  }
  f->c.data = f->data;
  f->c.num_pages = pages;
  f->c.page_size = P;
}

/* k[slot, d] straight from DESIGN.md §3 (head_dim 128 -> one scale per row). */
static double kc_val(const kcache_fx *f, int64_t slot, int d) {
  size_t page_bytes = (size_t)f->P * (DI + 4);
  size_t page = (size_t)(slot / f->P), row = (size_t)(slot % f->P);
  const uint8_t *base = f->data + page * page_bytes;
  float sc;
  memcpy(&sc, base + (size_t)f->P * DI + row * 4, 4);
  return f8(base[row * DI + (size_t)d]) * (double)sc;
}

/* Naive score: loops over heads and dims, ReLU per head, -inf for a slot outside the cache. */
static double naive_score(const query_fx *q, int t, const kcache_fx *k, int64_t slot) {
  if (slot < 0 || slot >= k->pages * k->P) return -INFINITY;
  double total = 0.0;
  for (int h = 0; h < q->H; h++) {
    double dot = 0.0;
    for (int d = 0; d < DI; d++) dot += q->qd[((size_t)t * q->H + h) * DI + d] * kc_val(k, slot, d);
    total += q->wd[t * q->H + h] * (dot > 0.0 ? dot : 0.0);
  }
  return (double)q->args.softmax_scale * total;
}

static int close_rel(double got, double want, double ref_mag, double tol) {
  if (isinf(want) || isinf(got)) return got == want;
  return fabs(got - want) <= tol * ref_mag;
}

/* ---------------------------------------------------------------------------------------------- */
/* Visibility                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static void test_decode_len(void) {
  int32_t seq[4] = {10, 1, 0, -5};
  int32_t bt[4 * 8] = {0};
  dsa_indexer_decode_args a;
  memset(&a, 0, sizeof a);
  a.seq_lens = seq;
  a.block_table = bt;
  a.block_table_stride = 8;
  a.max_blocks_per_req = 8;
  a.cache.page_size = 4; /* cap 32 */
  a.cache.num_pages = 8;
  a.num_reqs = 4;

  a.q_len_per_req = 1;
  check(dsa_ref_decode_len(&a, 0) == 10, "n=1 L=10");
  check(dsa_ref_decode_len(&a, 1) == 1, "n=1 L=1");
  check(dsa_ref_decode_len(&a, 2) == 0, "seq 0 -> L=0");
  check(dsa_ref_decode_len(&a, 3) == 0, "negative seq -> L=0");

  /* MTP n = 3: token t = r*3 + j sees seq - 2 + j. */
  a.q_len_per_req = 3;
  int want3[12] = {8, 9, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  for (int t = 0; t < 12; t++)
    check(dsa_ref_decode_len(&a, t) == want3[t], "n=3 t=%d L=%d want %d", t,
          dsa_ref_decode_len(&a, t), want3[t]);

  /* Clamp to what the block-table row addresses, then to max_seq_len. */
  seq[0] = 100;
  a.q_len_per_req = 2;
  a.max_blocks_per_req = 2; /* cap 8 */
  check(dsa_ref_decode_len(&a, 0) == 8 && dsa_ref_decode_len(&a, 1) == 8, "block-table clamp");
  a.max_seq_len = 5;
  check(dsa_ref_decode_len(&a, 0) == 5 && dsa_ref_decode_len(&a, 1) == 5, "max_seq_len clamp");
  a.max_seq_len = 50; /* larger than the block-table cap: the cap still wins */
  check(dsa_ref_decode_len(&a, 1) == 8, "cap below max_seq_len");
  seq[0] = 7;
  a.max_seq_len = 0;
  check(dsa_ref_decode_len(&a, 0) == 6 && dsa_ref_decode_len(&a, 1) == 7, "n=2 unclamped");

  /* Extremes: no int32 overflow in seq - (n-1) + j. */
  seq[0] = INT32_MAX;
  seq[1] = INT32_MIN;
  a.q_len_per_req = 8;
  a.max_blocks_per_req = 8;
  for (int j = 0; j < 8; j++) {
    check(dsa_ref_decode_len(&a, j) == 32, "INT32_MAX seq clamps to cap");
    check(dsa_ref_decode_len(&a, 8 + j) == 0, "INT32_MIN seq gives 0");
  }
}

static void test_prefill_range(void) {
  int32_t starts[7] = {0, -5, 20, 15, 3, 24, -100};
  int32_t ends[7] = {24, 10, 40, 10, 24, 30, -50};
  int64_t want_b[7] = {0, 0, 20, 15, 3, 24, 0};
  int want_len[7] = {24, 10, 4, 0, 21, 0, 0};
  dsa_indexer_prefill_args a;
  memset(&a, 0, sizeof a);
  a.row_starts = starts;
  a.row_ends = ends;
  a.num_workspace_rows = 24;
  a.num_tokens = 7;
  for (int t = 0; t < 7; t++) {
    int64_t b = -1;
    int len = dsa_ref_prefill_range(&a, t, &b);
    check(b == want_b[t] && len == want_len[t], "t=%d got [%lld,+%d) want [%lld,+%d)", t,
          (long long)b, len, (long long)want_b[t], want_len[t]);
  }
  a.max_rows = 7; /* caps the length, not the start */
  for (int t = 0; t < 7; t++) {
    int64_t b = -1;
    int len = dsa_ref_prefill_range(&a, t, &b);
    int wl = want_len[t] < 7 ? want_len[t] : 7;
    check(b == want_b[t] && len == wl, "max_rows t=%d got [%lld,+%d)", t, (long long)b, len);
  }
}

/* ---------------------------------------------------------------------------------------------- */
/* Index-K cache and scores                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static void test_index_k_row(void) {
  kcache_fx k;
  kcache_fx_init(&k, 3, 5, 21);
  double row[DI];
  for (int64_t s = 0; s < 15; s++) {
    check(dsa_ref_index_k_row(&k.c, DI, s, row) == 1, "slot %lld valid", (long long)s);
    for (int d = 0; d < DI; d++)
      check(row[d] == kc_val(&k, s, d), "slot %lld d %d: %g vs %g", (long long)s, d, row[d],
            kc_val(&k, s, d));
  }
  int64_t bad[4] = {-1, 15, 100, INT64_MIN};
  for (int i = 0; i < 4; i++) {
    for (int d = 0; d < DI; d++) row[d] = 12345.0;
    check(dsa_ref_index_k_row(&k.c, DI, bad[i], row) == 0, "slot %lld invalid", (long long)bad[i]);
    int untouched = 1;
    for (int d = 0; d < DI; d++) untouched &= row[d] == 12345.0;
    check(untouched, "out touched for invalid slot");
  }
  free(k.data);
}

static void test_index_score(void) {
  kcache_fx k;
  kcache_fx_init(&k, 2, 4, 31);
  dsa_dtype qts[2] = {DSA_DTYPE_BF16, DSA_DTYPE_FP8_E4M3};
  dsa_dtype wts[2] = {DSA_DTYPE_F32, DSA_DTYPE_BF16};
  int neg_heads = 0, pos_heads = 0;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      query_fx q;
      query_fx_init(&q, 3, 5, qts[a], wts[b], 5 + 3, 40 + a * 2 + b);
      for (int t = 0; t < 3; t++)
        for (int64_t s = 0; s < 8; s++) {
          double row[DI];
          dsa_ref_index_k_row(&k.c, DI, s, row);
          double got = dsa_ref_index_score(&q.args, t, row);
          /* Hand-computed: the triple loop of slot x head x dim, with its own magnitude bound. */
          double want = 0.0, mag = 0.0;
          for (int h = 0; h < 5; h++) {
            double dot = 0.0;
            for (int d = 0; d < DI; d++) dot += q.qd[((size_t)t * 5 + h) * DI + d] * kc_val(&k, s, d);
            if (dot > 0) {
              want += q.wd[t * 5 + h] * dot;
              pos_heads++;
            } else {
              neg_heads++;
            }
            mag += fabs(q.wd[t * 5 + h] * dot);
          }
          want *= (double)q.args.softmax_scale;
          mag *= fabs((double)q.args.softmax_scale);
          check(fabs(got - want) <= 1e-12 * mag, "q %d w %d t %d s %lld: %.17g vs %.17g", a, b, t,
                (long long)s, got, want);
        }
      query_fx_free(&q);
    }
  /* The data must exercise the per-head ReLU on both sides. */
  check(neg_heads > 0 && pos_heads > 0, "ReLU not exercised (%d neg, %d pos)", neg_heads, pos_heads);
  free(k.data);
}

/* Decode fixture: 3 requests x n = 3 tokens, page 4, 8 pages, 4 block-table columns (stride 6),
 * pages in shuffled order with invalid ids in places. */
typedef struct {
  query_fx q;
  kcache_fx k;
  int32_t seq[3];
  int32_t bt[3 * 6];
  dsa_indexer_decode_args a;
} decode_fx;

static void decode_fx_init(decode_fx *f, dsa_dtype qt, dsa_dtype wt) {
  enum { R = 3, N = 3, P = 4, PAGES = 8, MB = 4, STRIDE = 6 };
  query_fx_init(&f->q, R * N, 4, qt, wt, 4, 51);
  kcache_fx_init(&f->k, PAGES, P, 52);
  /* L: req 0 -> 7, 8, 9; req 1 -> clamped to 16; req 2 -> 0, 1, 2. */
  f->seq[0] = 9;
  f->seq[1] = 100;
  f->seq[2] = 2;
  static const int32_t bt[R * STRIDE] = {
      5, 2, 7, -1234, -1234, -1234, /* req 0: 3 pages used; col 3 is past L, never read */
      3, -1, 0, PAGES,  -1234, -1234, /* req 1: invalid ids -1 and num_pages */
      6, 1, 1 << 30, 4, -1234, -1234,
  };
  memcpy(f->bt, bt, sizeof bt);
  memset(&f->a, 0, sizeof f->a);
  f->a.query = f->q.args;
  f->a.cache = f->k.c;
  f->a.seq_lens = f->seq;
  f->a.block_table = f->bt;
  f->a.block_table_stride = STRIDE;
  f->a.max_blocks_per_req = MB;
  f->a.num_reqs = R;
  f->a.q_len_per_req = N;
}

static void decode_fx_free(decode_fx *f) {
  query_fx_free(&f->q);
  free(f->k.data);
}

/* Global slot of position i of request r computed from DESIGN.md, -1 for a bad page id. */
static int64_t fx_decode_slot(const decode_fx *f, int r, int i) {
  int P = f->k.P;
  int32_t page = f->bt[r * 6 + i / P];
  if (page < 0 || page >= f->k.pages) return -1;
  return (int64_t)page * P + i % P;
}

static const int k_decode_want_len[9] = {7, 8, 9, 16, 16, 16, 0, 1, 2};

static void test_decode_scores(void) {
  decode_fx f;
  decode_fx_init(&f, DSA_DTYPE_BF16, DSA_DTYPE_F32);
  enum { T = 9, STRIDE = 20 };
  double *d64 = xcalloc(T * STRIDE, sizeof(double));
  float *f32 = xcalloc(T * STRIDE, sizeof(float));
  for (int i = 0; i < T * STRIDE; i++) {
    d64[i] = 777.0;
    f32[i] = 777.0f;
  }
  dsa_ref_indexer_decode_scores_f64(&f.a, d64, STRIDE);
  dsa_indexer_decode_scores_args sa;
  memset(&sa, 0, sizeof sa);
  sa.decode = f.a;
  sa.scores = f32;
  sa.scores_stride = STRIDE;
  sa.skip_short_rows = 1; /* ignored by the reference */
  dsa_ref_indexer_decode_scores(&sa);
  int ninf = 0;
  for (int t = 0; t < T; t++) {
    int L = k_decode_want_len[t];
    check(dsa_ref_decode_len(&f.a, t) == L, "t=%d L", t);
    double mag = 0;
    for (int i = 0; i < L; i++) {
      double w = naive_score(&f.q, t, &f.k, fx_decode_slot(&f, t / 3, i));
      if (isfinite(w)) mag = fmax(mag, fabs(w));
    }
    for (int i = 0; i < STRIDE; i++) {
      double got = d64[t * STRIDE + i];
      if (i < L) {
        double w = naive_score(&f.q, t, &f.k, fx_decode_slot(&f, t / 3, i));
        ninf += isinf(w) != 0; /* glibc may return -1 for -inf */
        check(close_rel(got, w, mag, 1e-12), "t=%d i=%d %.17g vs %.17g", t, i, got, w);
        check(f32[t * STRIDE + i] == (float)got, "t=%d i=%d f32 is not (float)f64", t, i);
      } else {
        check(got == 777.0 && f32[t * STRIDE + i] == 777.0f, "t=%d i=%d written past L", t, i);
      }
    }
  }
  check(ninf > 0, "no invalid page exercised");
  free(d64);
  free(f32);
  decode_fx_free(&f);
}

/* Prefill fixture: 24 workspace rows over a 6-page (P = 4) cache, some slots invalid. */
typedef struct {
  query_fx q;
  kcache_fx k;
  int64_t slots[24];
  int32_t starts[6], ends[6];
  dsa_indexer_prefill_args a;
} prefill_fx;

static void prefill_fx_init(prefill_fx *f, dsa_dtype qt, dsa_dtype wt) {
  query_fx_init(&f->q, 6, 3, qt, wt, 7, 61);
  kcache_fx_init(&f->k, 6, 4, 62);
  seed(63);
  for (int w = 0; w < 24; w++) f->slots[w] = rnd_int(24);
  f->slots[2] = -1;
  f->slots[5] = 24; /* = capacity */
  f->slots[11] = -100;
  f->slots[17] = (int64_t)1 << 40;
  static const int32_t st[6] = {0, -5, 20, 15, 3, 6};
  static const int32_t en[6] = {24, 10, 40, 10, 24, 9};
  memcpy(f->starts, st, sizeof st);
  memcpy(f->ends, en, sizeof en);
  memset(&f->a, 0, sizeof f->a);
  f->a.query = f->q.args;
  f->a.cache = f->k.c;
  f->a.kv_workspace_slots = f->slots;
  f->a.num_workspace_rows = 24;
  f->a.row_starts = f->starts;
  f->a.row_ends = f->ends;
  f->a.num_tokens = 6;
}

static void prefill_fx_free(prefill_fx *f) {
  query_fx_free(&f->q);
  free(f->k.data);
}

static void test_prefill_scores(void) {
  prefill_fx f;
  prefill_fx_init(&f, DSA_DTYPE_FP8_E4M3, DSA_DTYPE_BF16);
  enum { T = 6, STRIDE = 26 };
  static const int want_b[T] = {0, 0, 20, 15, 3, 6}, want_len[T] = {24, 10, 4, 0, 21, 3};
  for (int mr = 0; mr < 2; mr++) {
    f.a.max_rows = mr ? 5 : 0;
    double *d64 = xcalloc(T * STRIDE, sizeof(double));
    float *f32 = xcalloc(T * STRIDE, sizeof(float));
    for (int i = 0; i < T * STRIDE; i++) {
      d64[i] = 777.0;
      f32[i] = 777.0f;
    }
    dsa_ref_indexer_prefill_scores_f64(&f.a, d64, STRIDE);
    dsa_indexer_prefill_scores_args sa;
    memset(&sa, 0, sizeof sa);
    sa.prefill = f.a;
    sa.scores = f32;
    sa.scores_stride = STRIDE;
    dsa_ref_indexer_prefill_scores(&sa);
    for (int t = 0; t < T; t++) {
      int L = mr && want_len[t] > 5 ? 5 : want_len[t];
      double mag = 0;
      for (int i = 0; i < L; i++) {
        double w = naive_score(&f.q, t, &f.k, f.slots[want_b[t] + i]);
        if (isfinite(w)) mag = fmax(mag, fabs(w));
      }
      for (int i = 0; i < STRIDE; i++) {
        double got = d64[t * STRIDE + i];
        if (i < L) {
          double w = naive_score(&f.q, t, &f.k, f.slots[want_b[t] + i]);
          check(close_rel(got, w, mag, 1e-12), "mr %d t=%d i=%d %.17g vs %.17g", mr, t, i, got, w);
          check(f32[t * STRIDE + i] == (float)got, "t=%d i=%d f32", t, i);
        } else {
          check(got == 777.0 && f32[t * STRIDE + i] == 777.0f, "t=%d i=%d written past L", t, i);
        }
      }
    }
    free(d64);
    free(f32);
  }
  prefill_fx_free(&f);
}

/* ---------------------------------------------------------------------------------------------- */
/* Top-k                                                                                           */
/* ---------------------------------------------------------------------------------------------- */

static void expect_row(const int32_t *got, const int32_t *want, int n, const char *what) {
  for (int i = 0; i < n; i++)
    if (!check(got[i] == want[i], "%s: entry %d = %d, want %d", what, i, got[i], want[i])) return;
}

static void test_topk_row_brute(void) {
  seed(71);
  static const double pool[8] = {-1.0, 0.0, -0.0, 0.5, 2.0, INFINITY, -INFINITY, NAN};
  int32_t got[80], want[80];
  for (int it = 0; it < 400; it++) {
    int n = rnd_int(60);
    int k = 1 + rnd_int(70);
    double row[60];
    int mode = it % 3;
    for (int i = 0; i < n; i++) {
      if (mode == 0) row[i] = rnd_nz(0.001, 10.0);        /* distinct values */
      else if (mode == 1) row[i] = pool[rnd_int(8)];      /* heavy ties, specials */
      else row[i] = (double)(rnd_int(5) - 2) + (rnd_int(4) == 0 ? NAN : 0.0);
    }
    for (int i = 0; i < 80; i++) got[i] = want[i] = -7;
    int c = dsa_ref_topk_row_f64(row, n, k, got);
    int wc = brute_topk(row, n, k, want);
    check(c == wc, "n=%d k=%d count %d want %d", n, k, c, wc);
    expect_row(got, want, wc, "rank order");
    check(got[wc] == -7, "wrote past the count");
  }
}

static void test_topk_rules(void) {
  int32_t out[16];
  /* Equal scores: lower positions win, in position order. */
  double eq[10] = {3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
  int32_t w_eq[4] = {0, 1, 2, 3};
  check(dsa_ref_topk_row_f64(eq, 10, 4, out) == 4, "ties count");
  expect_row(out, w_eq, 4, "ties");
  /* NaN ranks below -inf; -inf still ranks (by position). */
  double nanrow[5] = {NAN, -INFINITY, 1.0, NAN, -INFINITY};
  int32_t w_nan[5] = {2, 1, 4, 0, 3};
  check(dsa_ref_topk_row_f64(nanrow, 5, 5, out) == 5, "nan count");
  expect_row(out, w_nan, 5, "NaN below -inf");
  check(dsa_ref_topk_row_f64(nanrow, 5, 2, out) == 2 && out[0] == 2 && out[1] == 1, "NaN excluded");
  /* -0 and +0 are the same score. */
  double zeros[4] = {-0.0, 0.0, -0.0, -1.0};
  int32_t w_z[3] = {0, 1, 2};
  dsa_ref_topk_row_f64(zeros, 4, 3, out);
  expect_row(out, w_z, 3, "signed zeros tie");
  /* L < topk, L = topk, L = 0. */
  double small[3] = {1.0, 5.0, 2.0};
  int32_t w_small[3] = {1, 2, 0};
  check(dsa_ref_topk_row_f64(small, 3, 8, out) == 3, "L < topk count");
  expect_row(out, w_small, 3, "L < topk");
  check(dsa_ref_topk_row_f64(small, 3, 3, out) == 3, "L = topk count");
  expect_row(out, w_small, 3, "L = topk");
  check(dsa_ref_topk_row_f64(small, 0, 3, out) == 0, "L = 0");
  /* Descending and ascending inputs. */
  double asc[12], desc[12];
  for (int i = 0; i < 12; i++) {
    asc[i] = i * 0.5;
    desc[i] = -i * 0.5;
  }
  int32_t w_asc[4] = {11, 10, 9, 8}, w_desc[4] = {0, 1, 2, 3};
  dsa_ref_topk_row_f64(asc, 12, 4, out);
  expect_row(out, w_asc, 4, "ascending");
  dsa_ref_topk_row_f64(desc, 12, 4, out);
  expect_row(out, w_desc, 4, "descending");
}

static void test_topk_plain(void) {
  enum { ROWS = 6, MAXLEN = 12, STRIDE = 16, K = 8 };
  seed(81);
  float sc[ROWS * STRIDE];
  for (int i = 0; i < ROWS * STRIDE; i++) sc[i] = (float)rnd_nz(0.01, 4.0);
  for (int i = 0; i < ROWS; i++) /* padding past max_len is huge: reading it would change picks */
    for (int j = MAXLEN; j < STRIDE; j++) sc[i * STRIDE + j] = 1e30f;
  sc[0 * STRIDE + 3] = NAN;
  sc[0 * STRIDE + 4] = sc[0 * STRIDE + 1]; /* a tie */
  sc[5 * STRIDE + 2] = -INFINITY;
  int32_t row_lens[ROWS] = {5, 0, -3, 100, K, MAXLEN};
  for (int use_lens = 0; use_lens < 2; use_lens++) {
    int32_t idx[ROWS * K + 1], lens[ROWS];
    for (int i = 0; i < ROWS * K + 1; i++) idx[i] = -7;
    for (int i = 0; i < ROWS; i++) lens[i] = -7;
    dsa_topk_args a;
    memset(&a, 0, sizeof a);
    a.scores = sc;
    a.scores_stride = STRIDE;
    a.num_rows = ROWS;
    a.row_lens = use_lens ? row_lens : NULL;
    a.max_len = MAXLEN;
    a.topk = K;
    a.indices = idx;
    a.lens = lens;
    dsa_ref_topk(&a);
    for (int r = 0; r < ROWS; r++) {
      int L = MAXLEN;
      if (use_lens) L = row_lens[r] < 0 ? 0 : (row_lens[r] > MAXLEN ? MAXLEN : row_lens[r]);
      double row[MAXLEN];
      for (int i = 0; i < L; i++) row[i] = sc[r * STRIDE + i];
      int32_t want[K];
      int wc = brute_topk(row, L, K, want);
      check(lens[r] == wc, "row %d lens %d want %d", r, lens[r], wc);
      expect_row(idx + r * K, want, wc, "plain top-k");
      for (int i = wc; i < K; i++) check(idx[r * K + i] == -1, "row %d: -1 tail at %d", r, i);
    }
    check(idx[ROWS * K] == -7, "wrote past the output");
    a.lens = NULL; /* optional */
    dsa_ref_topk(&a);
  }
}

/* Full O(n) verification of a top-k answer: rank order within, nothing outside ranks higher. */
static int verify_topk_f32(const float *s, int n, int k, const int32_t *idx) {
  char *sel = xcalloc((size_t)n, 1);
  int ok = 1;
  for (int i = 0; i < k && ok; i++) {
    ok &= idx[i] >= 0 && idx[i] < n && !sel[idx[i]];
    if (ok) sel[idx[i]] = 1;
    if (ok && i > 0) ok &= bf_before(s[idx[i - 1]], idx[i - 1], s[idx[i]], idx[i]);
  }
  for (int i = 0; i < n && ok; i++)
    if (!sel[i]) ok &= !bf_before(s[i], i, s[idx[k - 1]], idx[k - 1]);
  free(sel);
  return ok;
}

static void test_topk_speed(void) {
  enum { N = 1 << 20, K = 2048 };
  float *s = xcalloc(N, sizeof(float));
  int32_t *idx = xcalloc(K, sizeof(int32_t));
  const char *names[3] = {"random", "ascending", "all equal"};
  seed(91);
  for (int kind = 0; kind < 3; kind++) {
    for (int i = 0; i < N; i++)
      s[i] = kind == 0 ? (float)rnd_nz(1e-3, 1e3) : kind == 1 ? (float)i : 1.5f;
    dsa_topk_args a;
    memset(&a, 0, sizeof a);
    a.scores = s;
    a.scores_stride = N;
    a.num_rows = 1;
    a.max_len = N;
    a.topk = K;
    a.indices = idx;
    clock_t c0 = clock();
    dsa_ref_topk(&a);
    double sec = (double)(clock() - c0) / CLOCKS_PER_SEC;
    printf("  top-%d of 1M (%s): %.1f ms\n", K, names[kind], sec * 1e3);
    check(sec < 1.0, "%s: %.3f s (must be well under a second)", names[kind], sec);
    check(verify_topk_f32(s, N, K, idx), "%s: wrong selection", names[kind]);
  }
  free(s);
  free(idx);
}

/* ---------------------------------------------------------------------------------------------- */
/* Indexer: scores + top-k                                                                         */
/* ---------------------------------------------------------------------------------------------- */

static void test_indexer_decode(void) {
  static const int topks[6] = {1, 3, 8, 9, 16, 20};
  for (int variant = 0; variant < 2; variant++) {
    decode_fx f;
    decode_fx_init(&f, variant ? DSA_DTYPE_FP8_E4M3 : DSA_DTYPE_BF16,
                   variant ? DSA_DTYPE_BF16 : DSA_DTYPE_F32);
    int neg_reported = 0;
    for (int ki = 0; ki < 6; ki++) {
      int K = topks[ki], T = 9;
      int32_t *idx = xcalloc((size_t)T * K + 1, sizeof(int32_t));
      int32_t lens[9];
      for (int i = 0; i < T * K + 1; i++) idx[i] = -7;
      f.a.topk = K;
      f.a.topk_indices = idx;
      f.a.topk_lens = lens;
      dsa_ref_indexer_decode(&f.a);
      for (int t = 0; t < T; t++) {
        int L = k_decode_want_len[t];
        double s[16];
        int32_t pos[20];
        for (int i = 0; i < L; i++) s[i] = naive_score(&f.q, t, &f.k, fx_decode_slot(&f, t / 3, i));
        int wc = brute_topk(s, L, K, pos);
        check(lens[t] == wc && wc == (K < L ? K : L), "K=%d t=%d lens %d want %d", K, t, lens[t], wc);
        for (int i = 0; i < wc; i++) {
          int64_t slot = fx_decode_slot(&f, t / 3, pos[i]);
          neg_reported += slot < 0;
          check(idx[t * K + i] == slot, "K=%d t=%d entry %d = %d want %lld", K, t, i,
                idx[t * K + i], (long long)slot);
        }
        for (int i = wc; i < K; i++) check(idx[t * K + i] == -1, "K=%d t=%d -1 tail", K, t);
      }
      check(idx[T * K] == -7, "wrote past the output");
      f.a.topk_lens = NULL; /* optional */
      dsa_ref_indexer_decode(&f.a);
      free(idx);
    }
    check(neg_reported > 0, "no invalid page was ever selected (fixture too weak)");
    decode_fx_free(&f);
  }
}

static void test_indexer_prefill(void) {
  static const int want_b[6] = {0, 0, 20, 15, 3, 6}, want_len[6] = {24, 10, 4, 0, 21, 3};
  static const int topks[4] = {1, 3, 10, 24};
  prefill_fx f;
  prefill_fx_init(&f, DSA_DTYPE_BF16, DSA_DTYPE_F32);
  int neg_reported = 0;
  for (int ki = 0; ki < 4; ki++)
    for (int g = 0; g < 2; g++) {
      int K = topks[ki], T = 6;
      int32_t *idx = xcalloc((size_t)T * K + 1, sizeof(int32_t));
      int32_t lens[6];
      for (int i = 0; i < T * K + 1; i++) idx[i] = -7;
      f.a.topk = K;
      f.a.topk_indices = idx;
      f.a.topk_lens = lens;
      f.a.output_global_slots = g;
      dsa_ref_indexer_prefill(&f.a);
      for (int t = 0; t < T; t++) {
        int L = want_len[t];
        double s[24];
        int32_t pos[24];
        for (int i = 0; i < L; i++) s[i] = naive_score(&f.q, t, &f.k, f.slots[want_b[t] + i]);
        int wc = brute_topk(s, L, K, pos);
        check(lens[t] == wc, "K=%d t=%d lens", K, t);
        for (int i = 0; i < wc; i++) {
          int64_t w = want_b[t] + pos[i];
          int64_t want = w;
          if (g) want = (f.slots[w] >= 0 && f.slots[w] < 24) ? f.slots[w] : -1;
          neg_reported += want < 0;
          check(idx[t * K + i] == want, "K=%d g=%d t=%d entry %d = %d want %lld", K, g, t, i,
                idx[t * K + i], (long long)want);
        }
        for (int i = wc; i < K; i++) check(idx[t * K + i] == -1, "K=%d t=%d -1 tail", K, t);
      }
      check(idx[T * K] == -7, "wrote past the output");
      free(idx);
    }
  check(neg_reported > 0, "no invalid slot was ever selected (fixture too weak)");
  prefill_fx_free(&f);
}

/* ---------------------------------------------------------------------------------------------- */
/* Sparse MLA attention                                                                            */
/* ---------------------------------------------------------------------------------------------- */

enum { QK = 576, VD = 512, T_ATT = 6, H_ATT = 3, K_ATT = 10, ISTRIDE = 13, SLOTS = 9 };

typedef struct {
  uint16_t q[T_ATT * H_ATT * QK];
  void *kv;
  int64_t kv_stride;
  double kd[SLOTS][QK]; /* decoded by the test from DESIGN.md's layout */
  int32_t idx[T_ATT * ISTRIDE];
  int32_t lens[T_ATT];
  dsa_sparse_mla_args a;
} attn_fx;

static void attn_fx_init(attn_fx *f, dsa_kv_format fmt, uint64_t s) {
  seed(s);
  for (int i = 0; i < T_ATT * H_ATT * QK; i++) f->q[i] = rnd_bf16(0.05, 1.0);
  if (fmt == DSA_KV_BF16) {
    f->kv_stride = 584;
    uint16_t *kv = xcalloc((size_t)SLOTS * 584, 2);
    for (int r = 0; r < SLOTS; r++)
      for (int d = 0; d < 584; d++) {
        kv[r * 584 + d] = d < QK ? rnd_bf16(0.05, 1.0) : 0x7FC0; /* NaN in the row padding */
        if (d < QK) f->kd[r][d] = bf(kv[r * 584 + d]);
      }
    f->kv = kv;
  } else {
    f->kv_stride = 0;
    uint8_t *kv = xcalloc((size_t)SLOTS * 656, 1);
    for (int r = 0; r < SLOTS; r++) {
      uint8_t *row = kv + r * 656;
      float sc[4];
      for (int g = 0; g < 4; g++) {
        sc[g] = (float)(0.001 + 0.002 * rnd_unit());
        memcpy(row + 512 + 4 * g, &sc[g], 4);
      }
      for (int d = 0; d < 512; d++) {
        row[d] = rnd_fp8_code();
        f->kd[r][d] = f8(row[d]) * (double)sc[d / 128];
      }
      for (int j = 0; j < 64; j++) {
        uint16_t b = rnd_bf16(0.05, 1.0);
        memcpy(row + 528 + 2 * j, &b, 2);
        f->kd[r][512 + j] = bf(b);
      }
    }
    f->kv = kv;
  }
  /* Index lists: t0 all valid with a duplicate; t1 mixed invalid (-1, num_slots, huge, negative);
   * t2 valid but lens = 3; t3 nothing valid; t4 valid but lens = 0; t5 lens > topk. The stride
   * padding holds valid slots: reading it would change the result. */
  static const int32_t lists[T_ATT][K_ATT] = {
      {0, 3, 5, 3, 8, 1, 2, 7, 6, 4},
      {-1, 2, SLOTS, 4, INT32_MAX, -7, 0, -1, 8, SLOTS + 1},
      {6, 1, 0, 7, 5, 3, 2, 8, 4, 1},
      {-1, -1, SLOTS, -2, INT32_MIN, SLOTS, -1, -1, -1, 100},
      {1, 2, 3, 4, 5, 6, 7, 8, 0, 1},
      {8, 7, 6, 5, 4, -1, 3, 2, 1, 0},
  };
  for (int t = 0; t < T_ATT; t++)
    for (int i = 0; i < ISTRIDE; i++) f->idx[t * ISTRIDE + i] = i < K_ATT ? lists[t][i] : 2;
  static const int32_t lens[T_ATT] = {K_ATT, K_ATT, 3, K_ATT, 0, K_ATT + 5};
  memcpy(f->lens, lens, sizeof lens);
  memset(&f->a, 0, sizeof f->a);
  f->a.q = f->q;
  f->a.num_tokens = T_ATT;
  f->a.num_heads = H_ATT;
  f->a.kv_cache = f->kv;
  f->a.kv_format = fmt;
  f->a.num_slots = SLOTS;
  f->a.kv_stride = f->kv_stride;
  f->a.indices = f->idx;
  f->a.indices_stride = ISTRIDE;
  f->a.topk = K_ATT;
  f->a.softmax_scale = 0.0625f;
}

/* Naive softmax attention of token t, head h; returns the number of entries used. */
static int naive_attn(const attn_fx *f, int t, int h, int use_lens, double *out, double *lse) {
  double s[K_ATT];
  int sl[K_ATT], n = 0;
  for (int i = 0; i < K_ATT; i++) {
    int32_t id = f->idx[t * ISTRIDE + i];
    if (id < 0 || id >= SLOTS || (use_lens && i >= f->lens[t])) continue;
    double dot = 0.0;
    for (int d = 0; d < QK; d++) dot += bf(f->q[(t * H_ATT + h) * QK + d]) * f->kd[id][d];
    s[n] = (double)f->a.softmax_scale * dot;
    sl[n++] = id;
  }
  for (int d = 0; d < VD; d++) out[d] = 0.0;
  if (n == 0) {
    *lse = -INFINITY;
    return 0;
  }
  double m = s[0], sum = 0.0;
  for (int i = 1; i < n; i++) m = s[i] > m ? s[i] : m;
  for (int i = 0; i < n; i++) {
    double p = exp(s[i] - m);
    sum += p;
    for (int d = 0; d < VD; d++) out[d] += p * f->kd[sl[i]][d];
  }
  for (int d = 0; d < VD; d++) out[d] /= sum;
  *lse = m + log(sum);
  return n;
}

static void run_attn_case(dsa_kv_format fmt, uint64_t s) {
  attn_fx *f = xcalloc(1, sizeof *f);
  attn_fx_init(f, fmt, s);
  size_t no = (size_t)T_ATT * H_ATT * VD;
  float *of = xcalloc(no, sizeof(float)), *of2 = xcalloc(no, sizeof(float));
  uint16_t *ob = xcalloc(no, 2);
  float lse[T_ATT * H_ATT];
  for (int use_lens = 0; use_lens < 2; use_lens++) {
    for (size_t i = 0; i < no; i++) {
      of[i] = NAN;
      ob[i] = 0x7FC0;
    }
    for (int i = 0; i < T_ATT * H_ATT; i++) lse[i] = NAN;
    f->a.lens = use_lens ? f->lens : NULL;
    f->a.out = ob;
    f->a.lse = lse;
    dsa_ref_sparse_mla(&f->a, of);
    int empty_seen = 0, multi_seen = 0;
    for (int t = 0; t < T_ATT; t++)
      for (int h = 0; h < H_ATT; h++) {
        double want[VD], wl;
        int n = naive_attn(f, t, h, use_lens, want, &wl);
        empty_seen += n == 0;
        multi_seen += n > 1;
        double mag = 0.0;
        for (int d = 0; d < VD; d++) mag = fmax(mag, fabs(want[d]));
        size_t o = ((size_t)t * H_ATT + h) * VD;
        for (int d = 0; d < VD; d++) {
          if (n == 0) {
            check(of[o + d] == 0.0f && ob[o + d] == 0, "t=%d h=%d empty: out not 0", t, h);
            continue;
          }
          check(fabs((double)of[o + d] - want[d]) <= 1e-6 * mag, "lens %d t=%d h=%d d=%d %g vs %g",
                use_lens, t, h, d, of[o + d], want[d]);
          check(ob[o + d] == dsa_float_to_bf16(of[o + d]), "t=%d h=%d d=%d bf16 out", t, h, d);
        }
        if (n == 0)
          check(isinf(lse[t * H_ATT + h]) && lse[t * H_ATT + h] < 0, "t=%d h=%d lse not -inf", t, h);
        else
          check(fabs((double)lse[t * H_ATT + h] - wl) <= 1e-6 * fmax(1.0, fabs(wl)),
                "t=%d h=%d lse %g vs %g", t, h, lse[t * H_ATT + h], wl);
      }
    check(empty_seen >= H_ATT * (use_lens ? 2 : 1), "empty tokens not exercised");
    check(multi_seen > 0, "no multi-entry softmax");
    /* Optional outputs: only out_f32, same numbers. */
    f->a.out = NULL;
    f->a.lse = NULL;
    dsa_ref_sparse_mla(&f->a, of2);
    check(memcmp(of, of2, no * sizeof(float)) == 0, "out_f32 differs without out/lse");
  }
  free(of);
  free(of2);
  free(ob);
  free(f->kv);
  free(f);
}

static void test_attn_bf16(void) { run_attn_case(DSA_KV_BF16, 101); }
static void test_attn_fp8(void) { run_attn_case(DSA_KV_FP8_PACKED, 102); }

/* The indexer and attention calls run their tokens on several threads (dsa_ref.c: ref_for_tokens):
 * with 1, 2 and 7 threads (DSA_REF_THREADS) every output is the same, bit for bit. */
static void test_threads(void) {
  static const char *const counts[3] = {"1", "2", "7"};
  enum { DT = 9, DK = 5, DSTRIDE = 20, PT = 6, PSTRIDE = 26 };
  attn_fx *af = xcalloc(1, sizeof *af);
  attn_fx_init(af, DSA_KV_FP8_PACKED, 103);
  af->a.lens = af->lens;
  decode_fx df;
  decode_fx_init(&df, DSA_DTYPE_FP8_E4M3, DSA_DTYPE_BF16);
  prefill_fx pf;
  prefill_fx_init(&pf, DSA_DTYPE_BF16, DSA_DTYPE_F32);
  const size_t no = (size_t)T_ATT * H_ATT * VD;
  float *of[3], *lse[3];
  uint16_t *ob[3];
  double *dscore[3], *pscore[3];
  int32_t *didx[3], *pidx[3], dlens[3][DT], plens[3][PT];
  for (int c = 0; c < 3; c++) {
    setenv("DSA_REF_THREADS", counts[c], 1);
    of[c] = xcalloc(no, sizeof(float));
    ob[c] = xcalloc(no, 2);
    lse[c] = xcalloc((size_t)T_ATT * H_ATT, sizeof(float));
    af->a.out = ob[c];
    af->a.lse = lse[c];
    dsa_ref_sparse_mla(&af->a, of[c]);
    dscore[c] = xcalloc((size_t)DT * DSTRIDE, sizeof(double));
    dsa_ref_indexer_decode_scores_f64(&df.a, dscore[c], DSTRIDE);
    didx[c] = xcalloc((size_t)DT * DK, sizeof(int32_t));
    df.a.topk = DK;
    df.a.topk_indices = didx[c];
    df.a.topk_lens = dlens[c];
    dsa_ref_indexer_decode(&df.a);
    pscore[c] = xcalloc((size_t)PT * PSTRIDE, sizeof(double));
    dsa_ref_indexer_prefill_scores_f64(&pf.a, pscore[c], PSTRIDE);
    pidx[c] = xcalloc((size_t)PT * DK, sizeof(int32_t));
    pf.a.topk = DK;
    pf.a.topk_indices = pidx[c];
    pf.a.topk_lens = plens[c];
    pf.a.output_global_slots = 1;
    dsa_ref_indexer_prefill(&pf.a);
  }
  unsetenv("DSA_REF_THREADS");
  for (int c = 1; c < 3; c++) {
    check(memcmp(of[0], of[c], no * sizeof(float)) == 0 && memcmp(ob[0], ob[c], no * 2) == 0 &&
              memcmp(lse[0], lse[c], (size_t)T_ATT * H_ATT * sizeof(float)) == 0,
          "sparse_mla with %s threads differs from one thread's", counts[c]);
    check(memcmp(dscore[0], dscore[c], (size_t)DT * DSTRIDE * sizeof(double)) == 0 &&
              memcmp(didx[0], didx[c], (size_t)DT * DK * sizeof(int32_t)) == 0 &&
              memcmp(dlens[0], dlens[c], sizeof dlens[0]) == 0,
          "indexer decode with %s threads differs from one thread's", counts[c]);
    check(memcmp(pscore[0], pscore[c], (size_t)PT * PSTRIDE * sizeof(double)) == 0 &&
              memcmp(pidx[0], pidx[c], (size_t)PT * DK * sizeof(int32_t)) == 0 &&
              memcmp(plens[0], plens[c], sizeof plens[0]) == 0,
          "indexer prefill with %s threads differs from one thread's", counts[c]);
  }
  for (int c = 0; c < 3; c++) {
    free(of[c]);
    free(ob[c]);
    free(lse[c]);
    free(dscore[c]);
    free(didx[c]);
    free(pscore[c]);
    free(pidx[c]);
  }
  prefill_fx_free(&pf);
  decode_fx_free(&df);
  free(af->kv);
  free(af);
}

/* ---------------------------------------------------------------------------------------------- */
/* Cache writers                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

/* The FP8 grid around |y| <= 448 is at most 2^-4 relative (normal) or 2^-10 absolute (subnormal);
 * the float division adds a few ulp. Bound for one dequantised value x' of x with this scale. */
static int fp8_close(double x, double xq, double scale) {
  return fabs(x - xq) <= fabs(x) * (0.0625 + 1e-6) + scale * (0x1p-10 + 1e-6);
}

static void test_index_k_store(void) {
  enum { T = 7, P = 4, PAGES = 3, KS = 136, PB = P * (DI + 4) };
  seed(111);
  uint16_t k[T * KS];
  for (int i = 0; i < T * KS; i++) k[i] = rnd_bf16(0.01, 3.0);
  for (int d = 0; d < DI; d++) k[4 * KS + d] = rnd_bf16(1e-7, 1e-6); /* amax below the floor */
  int64_t slots[T] = {3, -1, 9, 12, 0, 5, INT64_MIN};               /* 12 = capacity */
  /* One guard page past the cache's capacity catches writes for slots >= num_pages * P. */
  uint8_t cache[(PAGES + 1) * PB], orig[(PAGES + 1) * PB];
  for (int i = 0; i < (PAGES + 1) * PB; i++) cache[i] = orig[i] = (uint8_t)rnd_u64();
  char owned[(PAGES + 1) * PB];
  memset(owned, 0, sizeof owned);
  dsa_index_k_store_args a;
  memset(&a, 0, sizeof a);
  a.k = k;
  a.k_stride = KS;
  a.slot_mapping = slots;
  a.num_tokens = T;
  a.cache = cache;
  a.num_pages = PAGES;
  a.page_size = P;
  dsa_ref_index_k_store(&a);
  int stored = 0;
  for (int t = 0; t < T; t++) {
    int64_t s = slots[t];
    if (s < 0 || s >= P * PAGES) continue;
    stored++;
    size_t fp8_off = (size_t)(s / P) * PB + (size_t)(s % P) * DI;
    size_t sc_off = (size_t)(s / P) * PB + (size_t)P * DI + (size_t)(s % P) * 4;
    memset(owned + fp8_off, 1, DI);
    memset(owned + sc_off, 1, 4);
    float amax = 0.0f;
    for (int d = 0; d < DI; d++) amax = fmaxf(amax, fabsf(dsa_bf16_to_float(k[t * KS + d])));
    float want_sc = fmaxf(amax, DSA_FP8_AMAX_FLOOR) / 448.0f, sc;
    memcpy(&sc, cache + sc_off, 4);
    check(sc == want_sc, "t=%d scale %g want %g", t, sc, want_sc);
    int top = 0;
    for (int d = 0; d < DI; d++) {
      double x = bf(k[t * KS + d]), xq = f8(cache[fp8_off + d]) * (double)sc;
      check(fp8_close(x, xq, sc), "t=%d d=%d: %g stored as %g", t, d, x, xq);
      check(cache[fp8_off + d] == dsa_float_to_fp8_e4m3(dsa_bf16_to_float(k[t * KS + d]) / sc),
            "t=%d d=%d code", t, d);
      top |= (cache[fp8_off + d] & 0x7F) == 0x7E;
    }
    /* The amax element lands on +-448, unless the floor made the scale larger. */
    check(top == (amax >= DSA_FP8_AMAX_FLOOR), "t=%d: 448 code present = %d", t, top);
  }
  check(stored == 4, "stored %d rows", stored);
  int untouched = 1;
  for (int i = 0; i < (PAGES + 1) * PB; i++) untouched &= owned[i] || cache[i] == orig[i];
  check(untouched, "bytes of unwritten slots changed");
}

static void test_mla_kv_store_fp8(void) {
  enum { T = 5, KS = 600, NS = 7, B = 656 };
  seed(121);
  uint16_t kv[T * KS];
  for (int i = 0; i < T * KS; i++) kv[i] = rnd_bf16(0.01, 5.0);
  for (int d = 128; d < 256; d++) kv[3 * KS + d] = rnd_bf16(1e-7, 1e-6); /* one group under the floor */
  int64_t slots[T] = {2, -1, NS, 0, 6};
  uint8_t cache[(NS + 1) * B], orig[(NS + 1) * B]; /* + a guard row past num_slots */
  for (int i = 0; i < (NS + 1) * B; i++) cache[i] = orig[i] = (uint8_t)rnd_u64();
  dsa_mla_kv_store_args a;
  memset(&a, 0, sizeof a);
  a.kv = kv;
  a.kv_stride = KS;
  a.slot_mapping = slots;
  a.num_tokens = T;
  a.cache = cache;
  a.kv_format = DSA_KV_FP8_PACKED;
  a.num_slots = NS;
  dsa_ref_mla_kv_store(&a);
  char written[NS + 1] = {0};
  for (int t = 0; t < T; t++) {
    int64_t s = slots[t];
    if (s < 0 || s >= NS) continue;
    written[s] = 1;
    const uint8_t *row = cache + s * B;
    for (int g = 0; g < 4; g++) {
      float amax = 0.0f, sc;
      for (int d = 0; d < 128; d++) amax = fmaxf(amax, fabsf(dsa_bf16_to_float(kv[t * KS + g * 128 + d])));
      memcpy(&sc, row + 512 + 4 * g, 4);
      check(sc == fmaxf(amax, DSA_FP8_AMAX_FLOOR) / 448.0f, "t=%d g=%d scale %g", t, g, sc);
      for (int d = 0; d < 128; d++) {
        int e = g * 128 + d;
        double x = bf(kv[t * KS + e]), xq = f8(row[e]) * (double)sc;
        check(fp8_close(x, xq, sc), "t=%d e=%d: %g stored as %g", t, e, x, xq);
      }
    }
    for (int j = 0; j < 64; j++) {
      uint16_t r;
      memcpy(&r, row + 528 + 2 * j, 2);
      check(r == kv[t * KS + 512 + j], "t=%d rope %d not copied raw", t, j);
    }
  }
  for (int s = 0; s <= NS; s++)
    if (!written[s]) check(memcmp(cache + s * B, orig + s * B, B) == 0, "slot %d touched", s);
  check(written[0] && written[2] && written[6], "expected slots not written");

  /* Stored rows feed attention: the reference's dequantisation must agree with the writer's. */
  uint16_t q[QK];
  for (int d = 0; d < QK; d++) q[d] = rnd_bf16(0.05, 1.0);
  int32_t idx[3] = {2, 0, 6};
  float out[VD];
  dsa_sparse_mla_args m;
  memset(&m, 0, sizeof m);
  m.q = q;
  m.num_tokens = 1;
  m.num_heads = 1;
  m.kv_cache = cache;
  m.kv_format = DSA_KV_FP8_PACKED;
  m.num_slots = NS;
  m.indices = idx;
  m.indices_stride = 3;
  m.topk = 3;
  m.softmax_scale = 0.05f;
  dsa_ref_sparse_mla(&m, out);
  /* Same attention over the unquantised bf16 rows; FP8 error (~3% per value) averages down. */
  double s[3], mx = -INFINITY, sum = 0.0, num, err2 = 0.0, ref2 = 0.0;
  int tok[3] = {0, 3, 4};
  for (int i = 0; i < 3; i++) {
    double dot = 0.0;
    for (int d = 0; d < QK; d++) dot += bf(q[d]) * bf(kv[tok[i] * KS + d]);
    s[i] = 0.05 * dot;
    mx = fmax(mx, s[i]);
  }
  for (int i = 0; i < 3; i++) sum += exp(s[i] - mx);
  for (int d = 0; d < VD; d++) {
    num = 0.0;
    for (int i = 0; i < 3; i++) num += exp(s[i] - mx) * bf(kv[tok[i] * KS + d]);
    err2 += (out[d] - num / sum) * (out[d] - num / sum);
    ref2 += (num / sum) * (num / sum);
  }
  check(sqrt(err2 / ref2) < 0.1, "attention over stored FP8 rows: rel err %g", sqrt(err2 / ref2));
}

static void test_mla_kv_store_bf16(void) {
  enum { T = 4, KS = 580, NS = 6, CS = 600 };
  seed(131);
  uint16_t kv[T * KS];
  for (int i = 0; i < T * KS; i++) kv[i] = rnd_bf16(0.01, 5.0);
  int64_t slots[T] = {4, -3, 1, 6};
  uint16_t cache[(NS + 1) * CS], orig[(NS + 1) * CS]; /* + a guard row past num_slots */
  for (int i = 0; i < (NS + 1) * CS; i++) cache[i] = orig[i] = (uint16_t)rnd_u64();
  dsa_mla_kv_store_args a;
  memset(&a, 0, sizeof a);
  a.kv = kv;
  a.kv_stride = KS;
  a.slot_mapping = slots;
  a.num_tokens = T;
  a.cache = cache;
  a.kv_format = DSA_KV_BF16;
  a.num_slots = NS;
  a.cache_stride = CS;
  dsa_ref_mla_kv_store(&a);
  for (int s = 0; s <= NS; s++) {
    int src = s == 4 ? 0 : (s == 1 ? 2 : -1);
    for (int d = 0; d < CS; d++) {
      uint16_t want = (src >= 0 && d < QK) ? kv[src * KS + d] : orig[s * CS + d];
      if (!check(cache[s * CS + d] == want, "slot %d elem %d", s, d)) break;
    }
  }
}

/* ---------------------------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  void (*fn)(void);
} test_case;

/* ---------------------------------------------------------------------------------------------- */
/* Context parallelism                                                                             */
/* ---------------------------------------------------------------------------------------------- */

/* The merge of shards = the top-k of the whole row: a row of random / tied / special scores split
 * round robin over W lists (each list its shard's positions as ids, every one a candidate), merged,
 * against dsa_ref_topk_row_f64 over the row (its positions sorted ascending); a hand case too. */
static void test_topk_merge(void) {
  seed(301);
  static const double pool[6] = {-1.0, 0.5, 2.0, INFINITY, -INFINITY, NAN};
  for (int it = 0; it < 200; it++) {
    const int W = 1 + rnd_int(4), n = rnd_int(50), k = 1 + rnd_int(40), per = (n + W - 1) / W + 1;
    float row[50];
    for (int i = 0; i < n; i++) row[i] = it % 2 ? (float)pool[rnd_int(6)] : (float)rnd_nz(0.01, 5.0);
    float *cs = xcalloc((size_t)W * per, 4);
    int32_t *ci = xcalloc((size_t)W * per, 4);
    for (int w = 0; w < W; w++)
      for (int j = 0; j < per; j++) {
        const int g = j * W + w;
        ci[w * per + j] = g < n ? g : -1;
        cs[w * per + j] = g < n ? row[g] : 0.f;
      }
    int32_t got[40], lens = -7, want[40];
    dsa_topk_merge_args a = {cs, ci, W, 1, per, k, got, &lens};
    dsa_ref_topk_merge(&a);
    double rd[50];
    for (int i = 0; i < n; i++) rd[i] = row[i];
    const int c = dsa_ref_topk_row_f64(rd, n, k, want);
    for (int i = 1; i < c; i++) /* ascending, as the merge writes them */
      for (int j = i; j > 0 && want[j - 1] > want[j]; j--) {
        const int32_t x = want[j];
        want[j] = want[j - 1];
        want[j - 1] = x;
      }
    check(lens == c, "W=%d n=%d k=%d: lens %d, want %d", W, n, k, lens, c);
    expect_row(got, want, c, "merged ids");
    for (int i = c; i < k; i++) check(got[i] == -1, "entry %d past lens = %d", i, got[i]);
    free(cs);
    free(ci);
  }
  /* by hand: lists {7: 1.0, 2: 3.0, -1} and {4: 3.0, 9: NaN, 5: -inf}, top 3 -> ids 2, 4 (3.0, lower
   * id first), 7 (1.0), ascending: 2 4 7 */
  const float hs[6] = {1.0f, 3.0f, 9.0f, 3.0f, NAN, -INFINITY};
  const int32_t hi[6] = {7, 2, -1, 4, 9, 5};
  int32_t out[3], len = 0;
  dsa_topk_merge_args h = {hs, hi, 2, 1, 3, 3, out, &len};
  dsa_ref_topk_merge(&h);
  const int32_t w3[3] = {2, 4, 7};
  check(len == 3, "hand case lens %d", len);
  expect_row(out, w3, 3, "hand case");
}

/* LSE combine by hand: two parts with lse ln 1 and ln 3 (weights 1/4, 3/4), one empty (-inf) and
 * one NaN part left out; a row with no finite part gives 0 and -inf. */
static void test_lse_combine(void) {
  const int W = 4, D = DSA_MLA_V_DIM;
  float *outs = xcalloc((size_t)W * 2 * D, 4);
  /* [part][row]: part 0 row 0 ln 1, part 2 row 0 ln 3, part 1 nothing, part 3 NaN */
  const float lses[8] = {0.0f, -INFINITY, -INFINITY, -INFINITY, (float)log(3.0), -INFINITY, NAN, NAN};
  for (int d = 0; d < D; d++) {
    outs[(0 * 2 + 0) * D + d] = 4.0f;    /* part 0, row 0 */
    outs[(1 * 2 + 0) * D + d] = 1e30f;   /* part 1 has no rows: never read */
    outs[(1 * 2 + 1) * D + d] = 1e30f;
    outs[(2 * 2 + 0) * D + d] = -4.0f;   /* part 2, row 0 */
    outs[(3 * 2 + 0) * D + d] = NAN;     /* part 3: NaN lse, left out */
  }
  dsa_lse_combine_args a = {outs, DSA_DTYPE_F32, lses, W, 1, 2, NULL, NULL};
  float out[2 * DSA_MLA_V_DIM], lse[2];
  dsa_ref_lse_combine(&a, out, lse);
  check(fabs(lse[0] - log(4.0)) < 1e-6, "row 0 lse %g, want ln 4", lse[0]);
  check(fabs(out[0] - (0.25 * 4.0 + 0.75 * -4.0)) < 1e-6, "row 0 out %g, want -2", out[0]);
  check(isinf(lse[1]) && lse[1] < 0 && out[D] == 0.0f, "row 1 (no part): lse %g out %g, want -inf and 0", lse[1],
        out[D]);
  free(outs);
}

int main(void) {
  static const test_case tests[] = {
      {"bf16_known", test_bf16_known},
      {"bf16_roundtrip_all", test_bf16_roundtrip_all},
      {"bf16_rne_brute", test_bf16_rne_brute},
      {"fp8_known", test_fp8_known},
      {"fp8_roundtrip_all", test_fp8_roundtrip_all},
      {"fp8_rne_brute", test_fp8_rne_brute},
      {"decode_len", test_decode_len},
      {"prefill_range", test_prefill_range},
      {"index_k_row", test_index_k_row},
      {"index_score", test_index_score},
      {"decode_scores", test_decode_scores},
      {"prefill_scores", test_prefill_scores},
      {"topk_row_brute", test_topk_row_brute},
      {"topk_rules", test_topk_rules},
      {"topk_plain", test_topk_plain},
      {"topk_speed", test_topk_speed},
      {"indexer_decode", test_indexer_decode},
      {"indexer_prefill", test_indexer_prefill},
      {"attn_bf16", test_attn_bf16},
      {"attn_fp8", test_attn_fp8},
      {"threads", test_threads},
      {"index_k_store", test_index_k_store},
      {"mla_kv_store_fp8", test_mla_kv_store_fp8},
      {"mla_kv_store_bf16", test_mla_kv_store_bf16},
      {"topk_merge", test_topk_merge},
      {"lse_combine", test_lse_combine},
  };
  int passed = 0, failed = 0;
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    g_test = tests[i].name;
    g_errors = 0;
    tests[i].fn();
    if (g_errors) {
      printf("FAIL %s (%d failed checks)\n", tests[i].name, g_errors);
      failed++;
    } else {
      printf("ok   %s\n", tests[i].name);
      passed++;
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
