/*
 * fuzz_api.c — a seeded fuzzer of every public call of dsa.h, built with AddressSanitizer and
 * UndefinedBehaviorSanitizer (see cmake/dsa_tests.cmake) in two variants:
 *
 *   fuzz_api_stub  linked with tests/support/stub_kernels.c instead of the CUDA launchers: calls
 *                  that pass validation run the host layer's chunk loops (src/host) on the CPU, and
 *                  the stubs check every launch's preconditions (alignment, ranges, caps, workspace
 *                  bounds, contiguous coverage). A valid call must return DSA_OK (or, once its launch
 *                  budget is spent, DSA_ERR_CUDA).
 *   fuzz_api_real  linked with the real library, CUDA devices hidden (CUDA_VISIBLE_DEVICES=""): a
 *                  valid call with work must return DSA_ERR_NO_DEVICE, one without work DSA_OK.
 *
 * Each call is drawn valid by construction (sizes, dtypes, strides, fake but aligned pointers whose
 * extents fit the address space, a workspace of the queried size); 60 % of calls then get one to
 * three fields overwritten from edge sets (0, 1, -1, INT_MAX, INT64_MAX, powers of two around the
 * limits, odd alignments, NULL, out-of-range enums, NaN/inf). Asserted for every call: it returns
 * (a watchdog aborts after 10 s without progress), the status is in range, an error's message
 * names the call, no stub precondition is violated, and no valid call is rejected.
 *
 * Pointers are fake and never dereferenced: the stubs never touch memory, and the real build
 * reaches no launch without a device. Usage: fuzz_api_{stub,real} [calls] [seed]
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "dsa.h"
#include "rng.h"
#ifdef FUZZ_STUB
#include "stub_kernels.h"
#endif

/* ---- random numbers: one dsa_rng stream (rng.h) made from the seed ---- */

static dsa_rng g_rng;
static uint64_t rnd(void) { return dsa_rng_next(&g_rng); }
static int64_t below(int64_t n) { return n <= 0 ? 0 : (int64_t)(rnd() % (uint64_t)n); }
static int chance(int percent) { return below(100) < percent; }
#define PICK(...) pick_i64((const int64_t[]){__VA_ARGS__}, sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
static int64_t pick_i64(const int64_t *v, size_t n) { return v[below((int64_t)n)]; }

/* A fake device pointer aligned to 256 bytes. Each pointer of a call gets its own 2^58-byte region
 * (a valid call's extents stay under 2^58), so the buffers of a valid call never overlap, as the
 * API requires of real ones; regions 1..40 keep every extent below 2^64. */
static int g_region;
static void *fake_ptr(void) {
  g_region = g_region % 40 + 1;
  return (void *)(uintptr_t)(((uint64_t)g_region << 58) + (uint64_t)below((int64_t)1 << 32) * 256);
}

/* ---- field tables: the mutable fields of each args struct ---- */

typedef enum { F_INT, F_I64, F_PTR, F_FLOAT, F_ENUM } ftype;
typedef struct {
  const char *name;
  size_t off;
  ftype type;
} field;

#define FD(T, m, ty) {#m, offsetof(T, m), ty}
#define QUERY_FIELDS(T, pre)                                                                          \
  FD(T, pre query.q, F_PTR), FD(T, pre query.q_dtype, F_ENUM), FD(T, pre query.q_scale, F_PTR),       \
      FD(T, pre query.weights, F_PTR), FD(T, pre query.weights_dtype, F_ENUM),                        \
      FD(T, pre query.weights_stride, F_I64), FD(T, pre query.num_heads, F_INT),                      \
      FD(T, pre query.head_dim, F_INT), FD(T, pre query.softmax_scale, F_FLOAT),                      \
      FD(T, pre cache.data, F_PTR), FD(T, pre cache.num_pages, F_I64), FD(T, pre cache.page_size, F_INT), \
      FD(T, pre topk, F_INT)
#define DECODE_FIELDS(T, pre)                                                                         \
  QUERY_FIELDS(T, pre), FD(T, pre seq_lens, F_PTR), FD(T, pre block_table, F_PTR),                    \
      FD(T, pre block_table_stride, F_I64), FD(T, pre max_blocks_per_req, F_INT),                     \
      FD(T, pre num_reqs, F_INT), FD(T, pre q_len_per_req, F_INT), FD(T, pre max_seq_len, F_INT),     \
      FD(T, pre topk_indices, F_PTR), FD(T, pre topk_lens, F_PTR)
#define PREFILL_FIELDS(T, pre)                                                                        \
  QUERY_FIELDS(T, pre), FD(T, pre kv_workspace_slots, F_PTR), FD(T, pre num_workspace_rows, F_I64),   \
      FD(T, pre row_starts, F_PTR), FD(T, pre row_ends, F_PTR), FD(T, pre num_tokens, F_INT),         \
      FD(T, pre max_rows, F_INT), FD(T, pre output_global_slots, F_INT),                              \
      FD(T, pre topk_indices, F_PTR), FD(T, pre topk_lens, F_PTR)

static const field k_decode_fields[] = {DECODE_FIELDS(dsa_indexer_decode_args, )};
static const field k_decode_scores_fields[] = {DECODE_FIELDS(dsa_indexer_decode_scores_args, decode.),
                                               FD(dsa_indexer_decode_scores_args, scores, F_PTR),
                                               FD(dsa_indexer_decode_scores_args, scores_stride, F_I64),
                                               FD(dsa_indexer_decode_scores_args, skip_short_rows, F_INT)};
static const field k_prefill_fields[] = {PREFILL_FIELDS(dsa_indexer_prefill_args, )};
static const field k_prefill_scores_fields[] = {PREFILL_FIELDS(dsa_indexer_prefill_scores_args, prefill.),
                                                FD(dsa_indexer_prefill_scores_args, scores, F_PTR),
                                                FD(dsa_indexer_prefill_scores_args, scores_stride, F_I64),
                                                FD(dsa_indexer_prefill_scores_args, skip_short_rows, F_INT)};
static const field k_topk_fields[] = {
    FD(dsa_topk_args, scores, F_PTR),   FD(dsa_topk_args, scores_stride, F_I64), FD(dsa_topk_args, num_rows, F_INT),
    FD(dsa_topk_args, row_lens, F_PTR), FD(dsa_topk_args, max_len, F_INT),       FD(dsa_topk_args, topk, F_INT),
    FD(dsa_topk_args, indices, F_PTR),  FD(dsa_topk_args, lens, F_PTR)};
static const field k_mla_fields[] = {
    FD(dsa_sparse_mla_args, q, F_PTR),          FD(dsa_sparse_mla_args, num_tokens, F_INT),
    FD(dsa_sparse_mla_args, num_heads, F_INT),  FD(dsa_sparse_mla_args, kv_cache, F_PTR),
    FD(dsa_sparse_mla_args, kv_format, F_ENUM), FD(dsa_sparse_mla_args, num_slots, F_I64),
    FD(dsa_sparse_mla_args, kv_stride, F_I64),  FD(dsa_sparse_mla_args, indices, F_PTR),
    FD(dsa_sparse_mla_args, indices_stride, F_I64), FD(dsa_sparse_mla_args, topk, F_INT),
    FD(dsa_sparse_mla_args, lens, F_PTR),       FD(dsa_sparse_mla_args, softmax_scale, F_FLOAT),
    FD(dsa_sparse_mla_args, out, F_PTR),        FD(dsa_sparse_mla_args, lse, F_PTR)};
static const field k_kstore_fields[] = {
    FD(dsa_index_k_store_args, k, F_PTR),         FD(dsa_index_k_store_args, k_stride, F_I64),
    FD(dsa_index_k_store_args, slot_mapping, F_PTR), FD(dsa_index_k_store_args, num_tokens, F_INT),
    FD(dsa_index_k_store_args, cache, F_PTR),     FD(dsa_index_k_store_args, num_pages, F_I64),
    FD(dsa_index_k_store_args, page_size, F_INT)};
static const field k_kvstore_fields[] = {
    FD(dsa_mla_kv_store_args, kv, F_PTR),           FD(dsa_mla_kv_store_args, kv_stride, F_I64),
    FD(dsa_mla_kv_store_args, slot_mapping, F_PTR), FD(dsa_mla_kv_store_args, num_tokens, F_INT),
    FD(dsa_mla_kv_store_args, cache, F_PTR),        FD(dsa_mla_kv_store_args, kv_format, F_ENUM),
    FD(dsa_mla_kv_store_args, num_slots, F_I64),    FD(dsa_mla_kv_store_args, cache_stride, F_I64)};

/* ---- mutations from edge sets ---- */

static const int64_t k_edge_int[] = {0,     1,     -1,      2,       3,         4,         7,          8,
                                     9,     63,    64,      65,      127,       128,       129,        1023,
                                     1024,  1025,  2047,    2048,    2049,      4096,      12288,      12289,
                                     32760, 32761, 65535,   65536,   1 << 20,   1 << 30,   (1 << 30) + 1, INT32_MAX,
                                     INT32_MAX - 1, INT32_MIN, -2, -4096};
static const int64_t k_edge_i64[] = {0, 1, -1, 4, 8, 64, 128, 575, 576, 577, 584, 2048, (int64_t)1 << 30,
                                     ((int64_t)1 << 30) + 1, INT32_MAX, (int64_t)INT32_MAX + 1, (int64_t)1 << 32,
                                     (int64_t)1 << 40, (int64_t)1 << 55, (int64_t)1 << 62, INT64_MAX, INT64_MAX - 1,
                                     INT64_MIN, -2};

static void mutate(void *args, const field *f) {
  char *p = (char *)args + f->off;
  switch (f->type) {
    case F_INT: {
      int v = chance(85) ? (int)k_edge_int[below(sizeof k_edge_int / sizeof k_edge_int[0])] : (int)rnd();
      memcpy(p, &v, sizeof v);
      break;
    }
    case F_ENUM: {
      int v = (int)PICK(-1, 0, 1, 2, 3, 7, 99, INT32_MAX, INT32_MIN);
      memcpy(p, &v, sizeof v);
      break;
    }
    case F_I64: {
      int64_t v = chance(85) ? k_edge_i64[below(sizeof k_edge_i64 / sizeof k_edge_i64[0])] : (int64_t)rnd();
      memcpy(p, &v, sizeof v);
      break;
    }
    case F_PTR: {
      uintptr_t cur;
      memcpy(&cur, p, sizeof cur);
      const int64_t k = below(8);
      uintptr_t v = k == 0 ? 0
                  : k == 1 ? cur + 1
                  : k == 2 ? cur + 2
                  : k == 3 ? cur + 4
                  : k == 4 ? cur + 8
                  : k == 5 ? UINTPTR_MAX - 15
                  : k == 6 ? (uintptr_t)fake_ptr() + 16 * (uintptr_t)below(16)
                           : (uintptr_t)16;
      memcpy(p, &v, sizeof v);
      break;
    }
    case F_FLOAT: {
      const float vals[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e38f, 1e-45f, -1.0f};
      float v = vals[below(8)];
      memcpy(p, &v, sizeof v);
      break;
    }
  }
}

static void describe(const void *args, const field *fs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char *p = (const char *)args + fs[i].off;
    switch (fs[i].type) {
      case F_INT:
      case F_ENUM: {
        int v;
        memcpy(&v, p, sizeof v);
        fprintf(stderr, "    %-28s %d\n", fs[i].name, v);
        break;
      }
      case F_I64: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        fprintf(stderr, "    %-28s %lld\n", fs[i].name, (long long)v);
        break;
      }
      case F_PTR: {
        void *v;
        memcpy(&v, p, sizeof v);
        fprintf(stderr, "    %-28s %p\n", fs[i].name, v);
        break;
      }
      case F_FLOAT: {
        float v;
        memcpy(&v, p, sizeof v);
        fprintf(stderr, "    %-28s %g\n", fs[i].name, (double)v);
        break;
      }
    }
  }
}

/* ---- valid draws ---- */

static dsa_indexer_query draw_query(void) {
  dsa_indexer_query q;
  memset(&q, 0, sizeof q);
  q.num_heads = (int)PICK(1, 32, 64, 1 + below(64));
  q.head_dim = DSA_INDEX_HEAD_DIM;
  q.q_dtype = chance(50) ? DSA_DTYPE_BF16 : DSA_DTYPE_FP8_E4M3;
  q.q = fake_ptr();
  q.q_scale = q.q_dtype == DSA_DTYPE_FP8_E4M3 || chance(20) ? fake_ptr() : NULL;
  q.weights_dtype = chance(50) ? DSA_DTYPE_F32 : DSA_DTYPE_BF16;
  q.weights = fake_ptr();
  q.weights_stride = q.num_heads + PICK(0, 0, 1, below(64), (int64_t)1 << 16);
  q.softmax_scale = (float)PICK(0, 1, 2, -1) * 0.0625f;
  return q;
}

static dsa_index_k_cache draw_cache(void) {
  dsa_index_k_cache c;
  c.page_size = (int)PICK(4, 64, 64, 1024, 4 * (1 + below(256)));
  c.num_pages = PICK(0, 1, 1 + below(100000), INT32_MAX / c.page_size);
  c.data = fake_ptr();
  return c;
}

static int draw_topk(void) { return (int)PICK(1, 512, 1024, 2048, 1 + below(DSA_MAX_TOPK)); }

static dsa_indexer_decode_args draw_decode(void) {
  dsa_indexer_decode_args a;
  memset(&a, 0, sizeof a);
  a.query = draw_query();
  a.cache = draw_cache();
  a.q_len_per_req = 1 + (int)below(DSA_MAX_Q_LEN_PER_REQ);
  a.num_reqs = (int)PICK(0, 1, 1 + below(64), 1 + below(5000), INT32_MAX / a.q_len_per_req);
  const int max_blocks_cap = DSA_MAX_ROW_LEN / a.cache.page_size;
  a.max_blocks_per_req = (int)PICK(1, 1 + below(64), 1 + below(16384), max_blocks_cap);
  if (a.max_blocks_per_req > max_blocks_cap) a.max_blocks_per_req = max_blocks_cap;
  a.block_table_stride = a.max_blocks_per_req + PICK(0, 0, below(100));
  const int64_t cap = (int64_t)a.max_blocks_per_req * a.cache.page_size;
  a.max_seq_len = (int)PICK(0, 0, 1 + below(cap), below(DSA_MAX_ROW_LEN + 1));
  a.topk = draw_topk();
  a.seq_lens = fake_ptr();
  a.block_table = fake_ptr();
  a.topk_indices = fake_ptr();
  a.topk_lens = chance(70) ? fake_ptr() : NULL;
  return a;
}

static dsa_indexer_prefill_args draw_prefill(void) {
  dsa_indexer_prefill_args a;
  memset(&a, 0, sizeof a);
  a.query = draw_query();
  a.cache = draw_cache();
  a.num_workspace_rows = PICK(0, 1, 1 + below(100000), 1 + below(DSA_MAX_ROW_LEN), DSA_MAX_ROW_LEN);
  a.num_tokens = (int)PICK(0, 1, 1 + below(64), 1 + below(20000), INT32_MAX);
  a.max_rows = (int)PICK(0, 0, 1 + below(a.num_workspace_rows + 1), INT32_MAX);
  a.topk = draw_topk();
  a.output_global_slots = (int)below(2);
  a.kv_workspace_slots = a.num_workspace_rows > 0 || chance(50) ? fake_ptr() : NULL;
  a.row_starts = fake_ptr();
  a.row_ends = fake_ptr();
  a.topk_indices = fake_ptr();
  a.topk_lens = chance(70) ? fake_ptr() : NULL;
  return a;
}

static int64_t decode_max_len(const dsa_indexer_decode_args *a) {
  const int64_t cap = (int64_t)a->max_blocks_per_req * a->cache.page_size;
  return a->max_seq_len > 0 && a->max_seq_len < cap ? a->max_seq_len : cap;
}
static int64_t prefill_max_len(const dsa_indexer_prefill_args *a) {
  return a->max_rows > 0 && a->max_rows < a->num_workspace_rows ? a->max_rows : a->num_workspace_rows;
}

static dsa_topk_args draw_plain_topk(void) {
  dsa_topk_args a;
  memset(&a, 0, sizeof a);
  a.max_len = (int)PICK(0, 1, 2048, 12288, 12289, 1 + below(1 << 20), DSA_MAX_ROW_LEN);
  a.scores_stride = a.max_len + PICK(0, 0, 1, below(1000));
  a.num_rows = (int)PICK(0, 1, 1 + below(300), 1 + below(100000), INT32_MAX);
  if ((int64_t)a.num_rows * a.scores_stride > ((int64_t)1 << 58)) a.num_rows = 1 + (int)below(300);
  a.topk = draw_topk();
  a.scores = a.max_len > 0 || chance(50) ? fake_ptr() : NULL;
  a.row_lens = chance(50) ? fake_ptr() : NULL;
  a.indices = fake_ptr();
  a.lens = chance(50) ? fake_ptr() : NULL;
  return a;
}

static dsa_sparse_mla_args draw_mla(void) {
  dsa_sparse_mla_args a;
  memset(&a, 0, sizeof a);
  a.q = fake_ptr();
  a.num_tokens = (int)PICK(0, 1, 2, 1 + below(200), 1 + below(100000), INT32_MAX / 128);
  a.num_heads = (int)PICK(1, 8, 16, 64, 128, 1 + below(DSA_MAX_ATTN_HEADS));
  if ((int64_t)a.num_tokens * a.num_heads > INT32_MAX / 2) a.num_heads = 1 + (int)below(16);
  a.kv_cache = fake_ptr();
  a.kv_format = chance(50) ? DSA_KV_FP8_PACKED : DSA_KV_BF16;
  a.num_slots = PICK(0, 1, 1 + below(1 << 20), INT32_MAX, (int64_t)1 << 40);
  a.kv_stride = a.kv_format == DSA_KV_BF16 ? DSA_MLA_QK_DIM + 8 * PICK(0, 0, 1, below(100)) : (int64_t)below(3);
  a.topk = draw_topk();
  a.indices_stride = a.topk + PICK(0, 0, below(100));
  a.indices = fake_ptr();
  a.lens = chance(50) ? fake_ptr() : NULL;
  a.lse = chance(50) ? fake_ptr() : NULL;
  a.out = fake_ptr();
  a.softmax_scale = (float)PICK(0, 1, -1) * 0.0625f;
  return a;
}

static dsa_index_k_store_args draw_kstore(void) {
  dsa_index_k_store_args a;
  memset(&a, 0, sizeof a);
  const dsa_index_k_cache c = draw_cache();
  a.cache = (uint8_t *)c.data;
  a.num_pages = c.num_pages;
  a.page_size = c.page_size;
  a.num_tokens = (int)PICK(0, 1, 1 + below(1000), INT32_MAX);
  a.k_stride = DSA_INDEX_HEAD_DIM + 8 * PICK(0, 0, below(100));
  a.k = fake_ptr();
  a.slot_mapping = fake_ptr();
  return a;
}

static dsa_mla_kv_store_args draw_kvstore(void) {
  dsa_mla_kv_store_args a;
  memset(&a, 0, sizeof a);
  a.kv_format = chance(50) ? DSA_KV_FP8_PACKED : DSA_KV_BF16;
  a.num_slots = PICK(0, 1, 1 + below(1 << 20), INT32_MAX);
  a.cache_stride = a.kv_format == DSA_KV_BF16 ? DSA_MLA_QK_DIM + 8 * PICK(0, 0, below(100)) : (int64_t)below(3);
  a.num_tokens = (int)PICK(0, 1, 1 + below(1000), INT32_MAX);
  a.kv_stride = DSA_MLA_QK_DIM + 8 * PICK(0, 0, below(100));
  a.kv = fake_ptr();
  a.slot_mapping = fake_ptr();
  a.cache = fake_ptr();
  return a;
}

/* ---- one call ---- */

enum {
  C_DECODE, C_DECODE_WS, C_DECODE_SCORES, C_PREFILL, C_PREFILL_WS, C_PREFILL_SCORES,
  C_TOPK, C_TOPK_WS, C_MLA, C_MLA_WS, C_KSTORE, C_KVSTORE, C_COUNT
};
static const char *const k_call_fn[C_COUNT] = {
    "dsa_indexer_decode", "dsa_indexer_decode_workspace_size", "dsa_indexer_decode_scores",
    "dsa_indexer_prefill", "dsa_indexer_prefill_workspace_size", "dsa_indexer_prefill_scores",
    "dsa_topk", "dsa_topk_workspace_size", "dsa_sparse_mla", "dsa_sparse_mla_workspace_size",
    "dsa_index_k_store", "dsa_mla_kv_store"};

typedef union {
  dsa_indexer_decode_args decode;
  dsa_indexer_decode_scores_args decode_scores;
  dsa_indexer_prefill_args prefill;
  dsa_indexer_prefill_scores_args prefill_scores;
  dsa_topk_args topk;
  dsa_sparse_mla_args mla;
  dsa_index_k_store_args kstore;
  dsa_mla_kv_store_args kvstore;
} any_args;

typedef struct {
  int kind;
  any_args a;
  const field *fields;
  size_t nfields;
  int mutated;
  int null_args;        /* the args pointer itself is NULL */
  int null_bytes;       /* the workspace query's out-pointer is NULL */
  void *ws;
  size_t ws_bytes;
  int64_t work;         /* tokens / rows the call covers (0: nothing to launch) */
  int64_t scored;       /* tokens a scores-only call must cover */
} call;

static int64_t g_calls, g_failures, g_valid, g_accepted_mutants;
static volatile sig_atomic_t g_progress;
static uint64_t g_seed;
static int64_t g_iter;

static void fail_call(const call *c, dsa_status st, const char *why) {
  g_failures++;
  if (g_failures > 20) return;
  fprintf(stderr, "FAIL seed %llu call %lld: %s (%s) -> %d %s: %s\n  message: \"%s\"\n", (unsigned long long)g_seed,
          (long long)g_iter, k_call_fn[c->kind], c->mutated ? "mutated" : "valid", (int)st, dsa_status_string(st),
          why, dsa_last_error());
#ifdef FUZZ_STUB
  if (g_dsa_stub.violations) fprintf(stderr, "  stub: %s\n", g_dsa_stub.first_violation);
#endif
  fprintf(stderr, "  workspace %p, %zu bytes; args:\n", c->ws, c->ws_bytes);
  describe(&c->a, c->fields, c->nfields);
}

/* A workspace for a call: the queried size (+ a little), or a bad one when mutated. */
static void give_workspace(call *c, dsa_status qst, size_t need) {
  c->ws = need || chance(50) ? fake_ptr() : NULL;
  c->ws_bytes = need + (size_t)PICK(0, 0, below(4096));
  if (qst != DSA_OK) c->ws_bytes = (size_t)PICK(0, 16, (int64_t)1 << 30);
  if (c->mutated && chance(15)) {
    const int64_t k = below(3);
    if (k == 0) c->ws = NULL;
    else if (k == 1) c->ws = (char *)c->ws + 16;
    else c->ws_bytes = need ? need - 1 : 0;
    c->mutated = 1;
  }
}

static void draw_call(call *c) {
  memset(c, 0, sizeof *c);
  g_region = 0;
  c->kind = (int)below(C_COUNT);
  switch (c->kind) {
    case C_DECODE:
    case C_DECODE_WS:
      c->a.decode = draw_decode();
      c->fields = k_decode_fields;
      c->nfields = sizeof k_decode_fields / sizeof k_decode_fields[0];
      c->work = (int64_t)c->a.decode.num_reqs * c->a.decode.q_len_per_req;
      break;
    case C_DECODE_SCORES:
      c->a.decode_scores.decode = draw_decode();
      c->a.decode_scores.scores = (float *)fake_ptr();
      c->a.decode_scores.scores_stride = decode_max_len(&c->a.decode_scores.decode) + PICK(0, 0, below(100));
      if ((int64_t)c->a.decode_scores.decode.num_reqs * c->a.decode_scores.decode.q_len_per_req *
              c->a.decode_scores.scores_stride > ((int64_t)1 << 58)) /* keep the scores' extent in the address space */
        c->a.decode_scores.decode.num_reqs = 1 + (int)below(64);
      c->a.decode_scores.skip_short_rows = (int)below(2);
      c->fields = k_decode_scores_fields;
      c->nfields = sizeof k_decode_scores_fields / sizeof k_decode_scores_fields[0];
      c->work = (int64_t)c->a.decode_scores.decode.num_reqs * c->a.decode_scores.decode.q_len_per_req;
      c->scored = c->work;
      break;
    case C_PREFILL:
    case C_PREFILL_WS:
      c->a.prefill = draw_prefill();
      c->fields = k_prefill_fields;
      c->nfields = sizeof k_prefill_fields / sizeof k_prefill_fields[0];
      c->work = c->a.prefill.num_tokens;
      break;
    case C_PREFILL_SCORES:
      c->a.prefill_scores.prefill = draw_prefill();
      c->a.prefill_scores.scores = (float *)fake_ptr();
      c->a.prefill_scores.scores_stride = prefill_max_len(&c->a.prefill_scores.prefill) + PICK(0, 0, below(100));
      if ((int64_t)c->a.prefill_scores.prefill.num_tokens * c->a.prefill_scores.scores_stride > ((int64_t)1 << 58))
        c->a.prefill_scores.prefill.num_tokens = 1 + (int)below(64);
      c->a.prefill_scores.skip_short_rows = (int)below(2);
      c->fields = k_prefill_scores_fields;
      c->nfields = sizeof k_prefill_scores_fields / sizeof k_prefill_scores_fields[0];
      c->work = c->a.prefill_scores.prefill.num_tokens;
      c->scored = c->work;
      break;
    case C_TOPK:
    case C_TOPK_WS:
      c->a.topk = draw_plain_topk();
      c->fields = k_topk_fields;
      c->nfields = sizeof k_topk_fields / sizeof k_topk_fields[0];
      c->work = c->a.topk.num_rows;
      break;
    case C_MLA:
    case C_MLA_WS:
      c->a.mla = draw_mla();
      c->fields = k_mla_fields;
      c->nfields = sizeof k_mla_fields / sizeof k_mla_fields[0];
      c->work = c->a.mla.num_tokens;
      break;
    case C_KSTORE:
      c->a.kstore = draw_kstore();
      c->fields = k_kstore_fields;
      c->nfields = sizeof k_kstore_fields / sizeof k_kstore_fields[0];
      c->work = c->a.kstore.num_tokens;
      break;
    case C_KVSTORE:
      c->a.kvstore = draw_kvstore();
      c->fields = k_kvstore_fields;
      c->nfields = sizeof k_kvstore_fields / sizeof k_kvstore_fields[0];
      c->work = c->a.kvstore.num_tokens;
      break;
  }
  if (chance(60)) {
    c->mutated = 1;
    const int n = 1 + (int)below(3);
    for (int i = 0; i < n; i++) mutate(&c->a, &c->fields[below((int64_t)c->nfields)]);
    if (chance(2)) c->null_args = 1;
    if (chance(2)) c->null_bytes = 1;
  }
}

/* Runs a call; returns its status. */
static dsa_status run_call(call *c) {
  size_t need = 0;
  dsa_status qst = DSA_OK;
  /* Calls that take a workspace get one of the size the query reports for the same args. */
  switch (c->kind) {
    case C_DECODE: qst = dsa_indexer_decode_workspace_size(&c->a.decode, &need); break;
    case C_PREFILL: qst = dsa_indexer_prefill_workspace_size(&c->a.prefill, &need); break;
    case C_TOPK: qst = dsa_topk_workspace_size(&c->a.topk, &need); break;
    case C_MLA: qst = dsa_sparse_mla_workspace_size(&c->a.mla, &need); break;
    default: break;
  }
  if (!c->mutated && qst != DSA_OK) fail_call(c, qst, "the workspace query rejected valid args");
  if (c->kind == C_DECODE || c->kind == C_PREFILL || c->kind == C_TOPK || c->kind == C_MLA) give_workspace(c, qst, need);
#ifdef FUZZ_STUB
  dsa_stub_begin_call(c->ws, c->ws_bytes);
#endif
  size_t bytes = 0;
  size_t *bp = c->null_bytes ? NULL : &bytes;
  const int na = c->null_args;
  dsa_status st = DSA_OK;
  cudaStream_t s = (cudaStream_t)0;
  switch (c->kind) {
    case C_DECODE: st = dsa_indexer_decode(na ? NULL : &c->a.decode, c->ws, c->ws_bytes, s); break;
    case C_DECODE_WS: st = dsa_indexer_decode_workspace_size(na ? NULL : &c->a.decode, bp); break;
    case C_DECODE_SCORES: st = dsa_indexer_decode_scores(na ? NULL : &c->a.decode_scores, s); break;
    case C_PREFILL: st = dsa_indexer_prefill(na ? NULL : &c->a.prefill, c->ws, c->ws_bytes, s); break;
    case C_PREFILL_WS: st = dsa_indexer_prefill_workspace_size(na ? NULL : &c->a.prefill, bp); break;
    case C_PREFILL_SCORES: st = dsa_indexer_prefill_scores(na ? NULL : &c->a.prefill_scores, s); break;
    case C_TOPK: st = dsa_topk(na ? NULL : &c->a.topk, c->ws, c->ws_bytes, s); break;
    case C_TOPK_WS: st = dsa_topk_workspace_size(na ? NULL : &c->a.topk, bp); break;
    case C_MLA: st = dsa_sparse_mla(na ? NULL : &c->a.mla, c->ws, c->ws_bytes, s); break;
    case C_MLA_WS: st = dsa_sparse_mla_workspace_size(na ? NULL : &c->a.mla, bp); break;
    case C_KSTORE: st = dsa_index_k_store(na ? NULL : &c->a.kstore, s); break;
    case C_KVSTORE: st = dsa_mla_kv_store(na ? NULL : &c->a.kvstore, s); break;
  }
  g_calls++;
  g_progress++;

  /* Every call: a status in range; an error names the call in its message. */
  if ((int)st < DSA_OK || (int)st > DSA_ERR_NO_DEVICE) {
    fail_call(c, st, "status out of range");
    return st;
  }
  if (st != DSA_OK) {
    const char *msg = dsa_last_error();
    const size_t n = strlen(k_call_fn[c->kind]);
    if (strncmp(msg, k_call_fn[c->kind], n) != 0 || msg[n] != ':' || !msg[n + 1])
      fail_call(c, st, "the message does not name the call");
  }
  const int is_ws_query = c->kind == C_DECODE_WS || c->kind == C_PREFILL_WS || c->kind == C_TOPK_WS || c->kind == C_MLA_WS;
  if (is_ws_query && st == DSA_OK && bytes > ((size_t)1 << 36)) fail_call(c, st, "workspace query above 64 GiB");
#ifdef FUZZ_STUB
  if (g_dsa_stub.violations) fail_call(c, st, "a launch precondition was violated");
  if (st == DSA_ERR_CUDA && !g_dsa_stub.budget_spent) fail_call(c, st, "a CUDA error the stubs did not raise");
  if (!c->mutated) {
    if (st != DSA_OK && !(st == DSA_ERR_CUDA && g_dsa_stub.budget_spent)) fail_call(c, st, "a valid call was rejected");
    if (st == DSA_OK && !is_ws_query) {
      const int64_t covered = c->kind == C_MLA ? g_dsa_stub.mla_tokens
                            : c->kind == C_KSTORE || c->kind == C_KVSTORE ? g_dsa_stub.store_tokens
                            : c->scored ? g_dsa_stub.scores_tokens
                                        : g_dsa_stub.topk_tokens;
      if (covered != c->work) fail_call(c, st, "the launches did not cover every token exactly once");
    }
  } else if (st == DSA_OK) {
    g_accepted_mutants++;
  }
#else
  if (st == DSA_ERR_CUDA) fail_call(c, st, "a CUDA error although no device is visible");
  if (!c->mutated) {
    const dsa_status want = is_ws_query || c->work == 0 ? DSA_OK : DSA_ERR_NO_DEVICE;
    if (st != want) fail_call(c, st, want == DSA_OK ? "a valid call was rejected" : "a valid call did not report the missing device");
  } else if (st == DSA_OK || st == DSA_ERR_NO_DEVICE) {
    g_accepted_mutants++;
  }
#endif
  if (!c->mutated) g_valid++;
  return st;
}

/* Watchdog: no call finished for 10 s -> a hang. */
static volatile sig_atomic_t g_seen;
static int g_quiet_ticks;
static void on_alarm(int sig) {
  (void)sig;
  if (g_seen == g_progress) {
    if (++g_quiet_ticks >= 5) {
      static const char msg[] = "FAIL fuzz_api: a call has not returned for 10 s (hang); rerun with the printed seed\n";
      (void)!write(2, msg, sizeof msg - 1);
      _exit(1);
    }
  } else {
    g_quiet_ticks = 0;
  }
  g_seen = g_progress;
}

int main(int argc, char **argv) {
#ifndef FUZZ_STUB
  /* No device may be used: a valid call must stop at the device check, never launch with the fake
   * pointers. Set before the CUDA runtime initialises (it reads the variable once). */
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
#else
  dsa_stub_init();
  g_dsa_stub.launch_budget = 64; /* huge valid calls stop after 64 launches with DSA_ERR_CUDA */
#endif
  const int64_t calls = argc > 1 ? atoll(argv[1]) : 1000000;
  g_seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 20261130;
  g_rng = dsa_rng_make(g_seed, 0);
  /* sigaction, not signal(): under _POSIX_C_SOURCE glibc's signal() resets the handler after the
   * first tick, and the next one killed a run longer than 4 s */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{2, 0}, {2, 0}};
  setitimer(ITIMER_REAL, &it, NULL);

  call c;
  for (g_iter = 0; g_iter < calls; g_iter++) {
#ifdef FUZZ_STUB
    g_dsa_stub.num_sms = (int)PICK(132, 132, 114, 78, 1 + below(200));
#endif
    draw_call(&c);
    run_call(&c);
  }
  printf("%s: %lld calls (seed %llu): %lld valid by construction, %lld mutated of which %lld accepted; %lld failures\n",
#ifdef FUZZ_STUB
         "fuzz_api_stub",
#else
         "fuzz_api_real",
#endif
         (long long)g_calls, (unsigned long long)g_seed, (long long)g_valid, (long long)(g_calls - g_valid),
         (long long)g_accepted_mutants, (long long)g_failures);
  return g_failures ? 1 : 0;
}
