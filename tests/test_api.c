/*
 * test_api.c — host API checks that need no GPU: every call rejects bad arguments with the right
 * status and a message naming the argument, before anything is launched (the pointers here are
 * fake and never dereferenced, so a launch would crash: a pass proves nothing was launched);
 * workspace queries answer on any machine and stay bounded.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dsa.h"

static int g_pass, g_fail;

static void expect(const char *name, dsa_status got, dsa_status want, const char *needle) {
  const char *msg = dsa_last_error();
  int good = got == want;
  if (good && want != DSA_OK && (!msg[0] || (needle && !strstr(msg, needle)))) good = 0;
  if (good) {
    g_pass++;
  } else {
    g_fail++;
    printf("FAIL %s: got %d (%s), want %d (%s); message: \"%s\" (should mention \"%s\")\n", name, (int)got,
           dsa_status_string(got), (int)want, dsa_status_string(want), msg, needle ? needle : "");
  }
}

#define FAKE(addr) ((void *)(uintptr_t)(addr))

static dsa_indexer_query good_query(void) {
  dsa_indexer_query q;
  memset(&q, 0, sizeof q);
  q.q = FAKE(0x10000);
  q.q_dtype = DSA_DTYPE_BF16;
  q.weights = FAKE(0x20000);
  q.weights_dtype = DSA_DTYPE_F32;
  q.weights_stride = 32;
  q.num_heads = 32;
  q.head_dim = 128;
  q.softmax_scale = 0.0156f;
  return q;
}

static dsa_indexer_decode_args good_decode(void) {
  dsa_indexer_decode_args a;
  memset(&a, 0, sizeof a);
  a.query = good_query();
  a.cache.data = FAKE(0x30000);
  a.cache.num_pages = 1000;
  a.cache.page_size = 64;
  a.seq_lens = FAKE(0x40000);
  a.block_table = FAKE(0x50000);
  a.block_table_stride = 64;
  a.max_blocks_per_req = 64;
  a.num_reqs = 4;
  a.q_len_per_req = 1;
  a.topk = 2048;
  a.topk_indices = FAKE(0x60000);
  return a;
}

static dsa_indexer_prefill_args good_prefill(void) {
  dsa_indexer_prefill_args a;
  memset(&a, 0, sizeof a);
  a.query = good_query();
  a.cache.data = FAKE(0x30000);
  a.cache.num_pages = 1000;
  a.cache.page_size = 64;
  a.kv_workspace_slots = FAKE(0x40000);
  a.num_workspace_rows = 5000;
  a.row_starts = FAKE(0x50000);
  a.row_ends = FAKE(0x58000);
  a.num_tokens = 64;
  a.topk = 2048;
  a.topk_indices = FAKE(0x60000);
  return a;
}

static dsa_sparse_mla_args good_mla(void) {
  dsa_sparse_mla_args a;
  memset(&a, 0, sizeof a);
  a.q = FAKE(0x10000);
  a.num_tokens = 2;
  a.num_heads = 16;
  a.kv_cache = FAKE(0x20000);
  a.kv_format = DSA_KV_FP8_PACKED;
  a.num_slots = 100000;
  a.indices = FAKE(0x30000);
  a.indices_stride = 2048;
  a.topk = 2048;
  a.softmax_scale = 0.0625f;
  a.out = FAKE(0x40000);
  return a;
}

static dsa_topk_args good_topk(void) {
  dsa_topk_args a;
  memset(&a, 0, sizeof a);
  a.scores = FAKE(0x10000);
  a.scores_stride = 1000;
  a.num_rows = 3;
  a.max_len = 1000;
  a.topk = 10;
  a.indices = FAKE(0x20000);
  return a;
}

static void test_decode(void) {
  size_t bytes = 0;
  dsa_indexer_decode_args a = good_decode();
  expect("decode ws query ok", dsa_indexer_decode_workspace_size(&a, &bytes), DSA_OK, NULL);
  if (bytes == 0) { g_fail++; printf("FAIL decode ws query: 0 bytes for a scoring shape\n"); } else g_pass++;

  expect("decode null args", dsa_indexer_decode(NULL, FAKE(0x1000), 1 << 20, 0), DSA_ERR_NULL_POINTER, "args");
  expect("decode ws null bytes", dsa_indexer_decode_workspace_size(&a, NULL), DSA_ERR_NULL_POINTER, "bytes");
#define DECODE_CASE(name, field_stmt, want, needle)                                     \
  do {                                                                                  \
    dsa_indexer_decode_args b = good_decode();                                          \
    field_stmt;                                                                         \
    expect(name, dsa_indexer_decode(&b, FAKE(0x100000), (size_t)1 << 40, 0), want, needle); \
  } while (0)
  DECODE_CASE("decode q null", b.query.q = NULL, DSA_ERR_NULL_POINTER, "query.q");
  DECODE_CASE("decode weights null", b.query.weights = NULL, DSA_ERR_NULL_POINTER, "query.weights");
  DECODE_CASE("decode fp8 q without scale", b.query.q_dtype = DSA_DTYPE_FP8_E4M3, DSA_ERR_NULL_POINTER, "q_scale");
  DECODE_CASE("decode head_dim 64", b.query.head_dim = 64, DSA_ERR_UNSUPPORTED, "head_dim");
  DECODE_CASE("decode heads 0", b.query.num_heads = 0, DSA_ERR_INVALID_VALUE, "num_heads");
  DECODE_CASE("decode heads 65", (b.query.num_heads = 65, b.query.weights_stride = 65), DSA_ERR_INVALID_VALUE,
              "num_heads");
  DECODE_CASE("decode q dtype f32", b.query.q_dtype = DSA_DTYPE_F32, DSA_ERR_UNSUPPORTED, "q_dtype");
  DECODE_CASE("decode weights dtype fp8", b.query.weights_dtype = DSA_DTYPE_FP8_E4M3, DSA_ERR_UNSUPPORTED,
              "weights_dtype");
  DECODE_CASE("decode weights stride", b.query.weights_stride = 16, DSA_ERR_INVALID_VALUE, "weights_stride");
  DECODE_CASE("decode scale nan", b.query.softmax_scale = NAN, DSA_ERR_INVALID_VALUE, "softmax_scale");
  DECODE_CASE("decode q misaligned", b.query.q = FAKE(0x10002), DSA_ERR_MISALIGNED, "query.q");
  DECODE_CASE("decode weights misaligned", b.query.weights = FAKE(0x20002), DSA_ERR_MISALIGNED, "weights");
  DECODE_CASE("decode cache null", b.cache.data = NULL, DSA_ERR_NULL_POINTER, "cache.data");
  DECODE_CASE("decode cache misaligned", b.cache.data = FAKE(0x30008), DSA_ERR_MISALIGNED, "cache.data");
  DECODE_CASE("decode page size 0", b.cache.page_size = 0, DSA_ERR_UNSUPPORTED, "page_size");
  DECODE_CASE("decode page size 63", b.cache.page_size = 63, DSA_ERR_UNSUPPORTED, "page_size");
  DECODE_CASE("decode pages < 0", b.cache.num_pages = -1, DSA_ERR_INVALID_VALUE, "num_pages");
  DECODE_CASE("decode pages overflow", b.cache.num_pages = (int64_t)1 << 30, DSA_ERR_INVALID_VALUE, "slots");
  DECODE_CASE("decode topk 0", b.topk = 0, DSA_ERR_INVALID_VALUE, "topk");
  DECODE_CASE("decode topk 2049", b.topk = 2049, DSA_ERR_INVALID_VALUE, "topk");
  DECODE_CASE("decode reqs < 0", b.num_reqs = -1, DSA_ERR_INVALID_VALUE, "num_reqs");
  DECODE_CASE("decode n 0", b.q_len_per_req = 0, DSA_ERR_INVALID_VALUE, "q_len_per_req");
  DECODE_CASE("decode n 9", b.q_len_per_req = 9, DSA_ERR_INVALID_VALUE, "q_len_per_req");
  DECODE_CASE("decode blocks 0", b.max_blocks_per_req = 0, DSA_ERR_INVALID_VALUE, "max_blocks_per_req");
  DECODE_CASE("decode bt stride", b.block_table_stride = 10, DSA_ERR_INVALID_VALUE, "block_table_stride");
  DECODE_CASE("decode seq_lens null", b.seq_lens = NULL, DSA_ERR_NULL_POINTER, "seq_lens");
  DECODE_CASE("decode block_table null", b.block_table = NULL, DSA_ERR_NULL_POINTER, "block_table");
  DECODE_CASE("decode out null", b.topk_indices = NULL, DSA_ERR_NULL_POINTER, "topk_indices");
  DECODE_CASE("decode max_seq_len < 0", b.max_seq_len = -5, DSA_ERR_INVALID_VALUE, "max_seq_len");
  DECODE_CASE("decode cap overflow", (b.max_blocks_per_req = 1 << 26, b.block_table_stride = 1 << 26),
              DSA_ERR_INVALID_VALUE, "max_blocks_per_req");
  {
    dsa_indexer_decode_args b = good_decode();
    expect("decode workspace too small", dsa_indexer_decode(&b, FAKE(0x100000), 16, 0),
           DSA_ERR_WORKSPACE_TOO_SMALL, "workspace");
    expect("decode workspace null", dsa_indexer_decode(&b, NULL, (size_t)1 << 40, 0), DSA_ERR_NULL_POINTER,
           "workspace");
    expect("decode workspace misaligned", dsa_indexer_decode(&b, FAKE(0x100010), (size_t)1 << 40, 0),
           DSA_ERR_MISALIGNED, "workspace");
  }
  /* Zero requests: nothing to do, valid, and nothing launched. */
  {
    dsa_indexer_decode_args b = good_decode();
    b.num_reqs = 0;
    expect("decode zero reqs", dsa_indexer_decode(&b, NULL, 0, 0), DSA_OK, NULL);
  }
  /* Workspace is bounded: a batch of 4096 requests with a 1M-token block table. */
  {
    dsa_indexer_decode_args b = good_decode();
    b.num_reqs = 4096;
    b.max_blocks_per_req = 16384;
    b.block_table_stride = 16384;
    b.cache.num_pages = 20000;
    expect("decode ws big", dsa_indexer_decode_workspace_size(&b, &bytes), DSA_OK, NULL);
    if (bytes > ((size_t)1 << 30)) {
      g_fail++;
      printf("FAIL decode workspace unbounded: %zu bytes\n", bytes);
    } else {
      g_pass++;
    }
    /* With every L <= topk no scores are needed at all. */
    b.max_blocks_per_req = 32;
    size_t small = 0;
    expect("decode ws short", dsa_indexer_decode_workspace_size(&b, &small), DSA_OK, NULL);
    if (small >= bytes) { g_fail++; printf("FAIL short-context workspace not smaller\n"); } else g_pass++;
  }
  /* Scores-only entry point. */
  {
    dsa_indexer_decode_scores_args s;
    memset(&s, 0, sizeof s);
    s.decode = good_decode();
    s.scores = FAKE(0x700000);
    s.scores_stride = 100;
    expect("decode scores stride", dsa_indexer_decode_scores(&s, 0), DSA_ERR_INVALID_VALUE, "scores_stride");
    s.scores = NULL;
    s.scores_stride = 4096;
    expect("decode scores null", dsa_indexer_decode_scores(&s, 0), DSA_ERR_NULL_POINTER, "scores");
    expect("decode scores args null", dsa_indexer_decode_scores(NULL, 0), DSA_ERR_NULL_POINTER, "args");
  }
}

static void test_prefill(void) {
  size_t bytes = 0;
  dsa_indexer_prefill_args a = good_prefill();
  expect("prefill ws ok", dsa_indexer_prefill_workspace_size(&a, &bytes), DSA_OK, NULL);
#define PREFILL_CASE(name, field_stmt, want, needle)                                      \
  do {                                                                                    \
    dsa_indexer_prefill_args b = good_prefill();                                          \
    field_stmt;                                                                           \
    expect(name, dsa_indexer_prefill(&b, FAKE(0x100000), (size_t)1 << 40, 0), want, needle); \
  } while (0)
  PREFILL_CASE("prefill tokens < 0", b.num_tokens = -1, DSA_ERR_INVALID_VALUE, "num_tokens");
  PREFILL_CASE("prefill rows < 0", b.num_workspace_rows = -1, DSA_ERR_INVALID_VALUE, "num_workspace_rows");
  PREFILL_CASE("prefill rows huge", b.num_workspace_rows = (int64_t)1 << 32, DSA_ERR_INVALID_VALUE,
               "num_workspace_rows");
  PREFILL_CASE("prefill max_rows < 0", b.max_rows = -1, DSA_ERR_INVALID_VALUE, "max_rows");
  PREFILL_CASE("prefill starts null", b.row_starts = NULL, DSA_ERR_NULL_POINTER, "row_starts");
  PREFILL_CASE("prefill ends null", b.row_ends = NULL, DSA_ERR_NULL_POINTER, "row_ends");
  PREFILL_CASE("prefill slots null", b.kv_workspace_slots = NULL, DSA_ERR_NULL_POINTER, "kv_workspace_slots");
  PREFILL_CASE("prefill out null", b.topk_indices = NULL, DSA_ERR_NULL_POINTER, "topk_indices");
  PREFILL_CASE("prefill topk", b.topk = -3, DSA_ERR_INVALID_VALUE, "topk");
  PREFILL_CASE("prefill q null", b.query.q = NULL, DSA_ERR_NULL_POINTER, "query.q");
  PREFILL_CASE("prefill cache page", b.cache.page_size = 2048, DSA_ERR_UNSUPPORTED, "page_size");
  expect("prefill null args", dsa_indexer_prefill(NULL, NULL, 0, 0), DSA_ERR_NULL_POINTER, "args");
  /* Bounded workspace even for 100k tokens x 1M rows. */
  a.num_tokens = 100000;
  a.num_workspace_rows = 1 << 20;
  expect("prefill ws big", dsa_indexer_prefill_workspace_size(&a, &bytes), DSA_OK, NULL);
  if (bytes > ((size_t)1 << 30)) {
    g_fail++;
    printf("FAIL prefill workspace unbounded: %zu\n", bytes);
  } else {
    g_pass++;
  }
}

static void test_topk(void) {
  dsa_topk_args a = good_topk();
  size_t bytes = 0;
  expect("topk ws ok", dsa_topk_workspace_size(&a, &bytes), DSA_OK, NULL);
  dsa_topk_args b = a;
  b.scores_stride = 999;
  expect("topk stride", dsa_topk(&b, FAKE(0x100000), bytes, 0), DSA_ERR_INVALID_VALUE, "scores_stride");
  b = a;
  b.indices = NULL;
  expect("topk out null", dsa_topk(&b, FAKE(0x100000), bytes, 0), DSA_ERR_NULL_POINTER, "indices");
  b = a;
  b.topk = 4096;
  expect("topk 4096", dsa_topk(&b, FAKE(0x100000), bytes, 0), DSA_ERR_INVALID_VALUE, "topk");
  b = a;
  b.max_len = -1;
  expect("topk max_len", dsa_topk(&b, FAKE(0x100000), bytes, 0), DSA_ERR_INVALID_VALUE, "max_len");
  b = a;
  b.scores = FAKE(0x10002);
  expect("topk misaligned", dsa_topk(&b, FAKE(0x100000), bytes, 0), DSA_ERR_MISALIGNED, "scores");
  expect("topk ws small", dsa_topk(&a, FAKE(0x100000), bytes - 1, 0), DSA_ERR_WORKSPACE_TOO_SMALL, "workspace");
  b = a;
  b.num_rows = 0;
  expect("topk zero rows", dsa_topk(&b, NULL, 0, 0), DSA_OK, NULL);
}

static void test_mla(void) {
  size_t bytes = 0;
  dsa_sparse_mla_args a = good_mla();
  expect("mla ws ok", dsa_sparse_mla_workspace_size(&a, &bytes), DSA_OK, NULL);
#define MLA_CASE(name, field_stmt, want, needle)                                         \
  do {                                                                                   \
    dsa_sparse_mla_args b = good_mla();                                                  \
    field_stmt;                                                                          \
    expect(name, dsa_sparse_mla(&b, FAKE(0x100000), (size_t)1 << 40, 0), want, needle); \
  } while (0)
  MLA_CASE("mla heads 0", b.num_heads = 0, DSA_ERR_INVALID_VALUE, "num_heads");
  MLA_CASE("mla heads 129", b.num_heads = 129, DSA_ERR_INVALID_VALUE, "num_heads");
  MLA_CASE("mla tokens < 0", b.num_tokens = -2, DSA_ERR_INVALID_VALUE, "num_tokens");
  MLA_CASE("mla topk 0", b.topk = 0, DSA_ERR_INVALID_VALUE, "topk");
  MLA_CASE("mla idx stride", b.indices_stride = 100, DSA_ERR_INVALID_VALUE, "indices_stride");
  MLA_CASE("mla format", b.kv_format = (dsa_kv_format)7, DSA_ERR_UNSUPPORTED, "kv_format");
  MLA_CASE("mla bf16 stride", (b.kv_format = DSA_KV_BF16, b.kv_stride = 500), DSA_ERR_INVALID_VALUE, "kv_stride");
  MLA_CASE("mla bf16 stride odd", (b.kv_format = DSA_KV_BF16, b.kv_stride = 580), DSA_ERR_INVALID_VALUE,
           "kv_stride");
  MLA_CASE("mla slots < 0", b.num_slots = -1, DSA_ERR_INVALID_VALUE, "num_slots");
  MLA_CASE("mla scale inf", b.softmax_scale = INFINITY, DSA_ERR_INVALID_VALUE, "softmax_scale");
  MLA_CASE("mla q null", b.q = NULL, DSA_ERR_NULL_POINTER, "q");
  MLA_CASE("mla kv null", b.kv_cache = NULL, DSA_ERR_NULL_POINTER, "kv_cache");
  MLA_CASE("mla indices null", b.indices = NULL, DSA_ERR_NULL_POINTER, "indices");
  MLA_CASE("mla out null", b.out = NULL, DSA_ERR_NULL_POINTER, "out");
  MLA_CASE("mla q misaligned", b.q = FAKE(0x10008), DSA_ERR_MISALIGNED, "q");
  MLA_CASE("mla out misaligned", b.out = FAKE(0x40004), DSA_ERR_MISALIGNED, "out");
  if (bytes > 0) {
    dsa_sparse_mla_args b = good_mla();
    expect("mla ws small", dsa_sparse_mla(&b, FAKE(0x100000), bytes - 1, 0), DSA_ERR_WORKSPACE_TOO_SMALL,
           "workspace");
  }
  /* Bounded: 1M tokens x 128 heads still asks for a bounded scratch. */
  a.num_tokens = 1 << 20;
  a.num_heads = 128;
  expect("mla ws big", dsa_sparse_mla_workspace_size(&a, &bytes), DSA_OK, NULL);
  if (bytes > ((size_t)1 << 30)) {
    g_fail++;
    printf("FAIL mla workspace unbounded: %zu\n", bytes);
  } else {
    g_pass++;
  }
}

static void test_stores(void) {
  dsa_index_k_store_args k;
  memset(&k, 0, sizeof k);
  k.k = FAKE(0x10000);
  k.k_stride = 128;
  k.slot_mapping = FAKE(0x20000);
  k.num_tokens = 4;
  k.cache = FAKE(0x30000);
  k.num_pages = 10;
  k.page_size = 64;
  dsa_index_k_store_args kb = k;
  kb.k = NULL;
  expect("kstore k null", dsa_index_k_store(&kb, 0), DSA_ERR_NULL_POINTER, "k");
  kb = k;
  kb.k_stride = 100;
  expect("kstore stride", dsa_index_k_store(&kb, 0), DSA_ERR_INVALID_VALUE, "k_stride");
  kb = k;
  kb.cache = NULL;
  expect("kstore cache null", dsa_index_k_store(&kb, 0), DSA_ERR_NULL_POINTER, "cache");
  kb = k;
  kb.slot_mapping = FAKE(0x20004);
  expect("kstore slots misaligned", dsa_index_k_store(&kb, 0), DSA_ERR_MISALIGNED, "slot_mapping");
  kb = k;
  kb.num_tokens = -1;
  expect("kstore tokens", dsa_index_k_store(&kb, 0), DSA_ERR_INVALID_VALUE, "num_tokens");
  expect("kstore null args", dsa_index_k_store(NULL, 0), DSA_ERR_NULL_POINTER, "args");

  dsa_mla_kv_store_args m;
  memset(&m, 0, sizeof m);
  m.kv = FAKE(0x10000);
  m.kv_stride = 576;
  m.slot_mapping = FAKE(0x20000);
  m.num_tokens = 4;
  m.cache = FAKE(0x30000);
  m.kv_format = DSA_KV_FP8_PACKED;
  m.num_slots = 100;
  dsa_mla_kv_store_args mb = m;
  mb.kv_format = (dsa_kv_format)3;
  expect("kvstore format", dsa_mla_kv_store(&mb, 0), DSA_ERR_UNSUPPORTED, "kv_format");
  mb = m;
  mb.kv_stride = 512;
  expect("kvstore stride", dsa_mla_kv_store(&mb, 0), DSA_ERR_INVALID_VALUE, "kv_stride");
  mb = m;
  mb.kv_format = DSA_KV_BF16;
  mb.cache_stride = 100;
  expect("kvstore cache stride", dsa_mla_kv_store(&mb, 0), DSA_ERR_INVALID_VALUE, "cache_stride");
  mb = m;
  mb.slot_mapping = NULL;
  expect("kvstore slots null", dsa_mla_kv_store(&mb, 0), DSA_ERR_NULL_POINTER, "slot_mapping");
  mb = m;
  mb.num_slots = -4;
  expect("kvstore slots < 0", dsa_mla_kv_store(&mb, 0), DSA_ERR_INVALID_VALUE, "num_slots");
}

/* Pointers one byte off: rejected as misaligned, naming the argument (they were accepted, and the
 * kernels faulted with a misaligned address, killing the caller's context). */
static void test_alignment(void) {
#define ODD(p) ((void *)((uintptr_t)(p) + 1))
  DECODE_CASE("decode seq_lens misaligned", b.seq_lens = ODD(b.seq_lens), DSA_ERR_MISALIGNED, "seq_lens");
  DECODE_CASE("decode block_table misaligned", b.block_table = ODD(b.block_table), DSA_ERR_MISALIGNED, "block_table");
  DECODE_CASE("decode topk_indices misaligned", b.topk_indices = ODD(b.topk_indices), DSA_ERR_MISALIGNED,
              "topk_indices");
  DECODE_CASE("decode topk_lens misaligned", b.topk_lens = FAKE(0x70002), DSA_ERR_MISALIGNED, "topk_lens");
  DECODE_CASE("decode q_scale misaligned", (b.query.q_dtype = DSA_DTYPE_FP8_E4M3, b.query.q_scale = FAKE(0x11001)),
              DSA_ERR_MISALIGNED, "q_scale");
  PREFILL_CASE("prefill slots misaligned (8 B)", b.kv_workspace_slots = FAKE(0x40004), DSA_ERR_MISALIGNED,
               "kv_workspace_slots");
  PREFILL_CASE("prefill row_starts misaligned", b.row_starts = ODD(b.row_starts), DSA_ERR_MISALIGNED, "row_starts");
  PREFILL_CASE("prefill row_ends misaligned", b.row_ends = ODD(b.row_ends), DSA_ERR_MISALIGNED, "row_ends");
  PREFILL_CASE("prefill topk_indices misaligned", b.topk_indices = ODD(b.topk_indices), DSA_ERR_MISALIGNED,
               "topk_indices");
  PREFILL_CASE("prefill topk_lens misaligned", b.topk_lens = FAKE(0x70003), DSA_ERR_MISALIGNED, "topk_lens");
  {
    const dsa_topk_args a = good_topk();
    dsa_topk_args b = a;
    b.indices = ODD(a.indices);
    expect("topk indices misaligned", dsa_topk(&b, FAKE(0x100000), (size_t)1 << 40, 0), DSA_ERR_MISALIGNED, "indices");
    b = a;
    b.lens = FAKE(0x30002);
    expect("topk lens misaligned", dsa_topk(&b, FAKE(0x100000), (size_t)1 << 40, 0), DSA_ERR_MISALIGNED, "lens");
    b = a;
    b.row_lens = FAKE(0x40001);
    expect("topk row_lens misaligned", dsa_topk(&b, FAKE(0x100000), (size_t)1 << 40, 0), DSA_ERR_MISALIGNED,
           "row_lens");
  }
  MLA_CASE("mla lens misaligned", b.lens = FAKE(0x50002), DSA_ERR_MISALIGNED, "lens");
  MLA_CASE("mla lse misaligned", b.lse = FAKE(0x60001), DSA_ERR_MISALIGNED, "lse");
  MLA_CASE("mla indices misaligned", b.indices = ODD(b.indices), DSA_ERR_MISALIGNED, "indices");
#undef ODD
}

/* Extents that overflow int64 (or wrap the address space) are rejected, naming the argument: the
 * checks multiplied without guarding, and num_pages * page_size wrapped into an accepted value. */
static void test_overflow(void) {
  const int64_t huge = INT64_MAX / 2;
  DECODE_CASE("decode num_pages x page_size wraps", b.cache.num_pages = huge, DSA_ERR_INVALID_VALUE, "num_pages");
  DECODE_CASE("decode num_pages INT64_MAX", b.cache.num_pages = INT64_MAX, DSA_ERR_INVALID_VALUE, "num_pages");
  DECODE_CASE("decode weights_stride overflow", b.query.weights_stride = huge, DSA_ERR_INVALID_VALUE, "weights");
  DECODE_CASE("decode block_table_stride overflow", b.block_table_stride = huge, DSA_ERR_INVALID_VALUE,
              "block_table");
  DECODE_CASE("decode block_table wraps the address space",
              (b.block_table = FAKE(UINTPTR_MAX - 4095), b.block_table_stride = 1 << 20), DSA_ERR_INVALID_VALUE,
              "block_table");
  PREFILL_CASE("prefill weights_stride overflow", b.query.weights_stride = huge, DSA_ERR_INVALID_VALUE, "weights");
  {
    dsa_indexer_decode_scores_args sc;
    memset(&sc, 0, sizeof sc);
    sc.decode = good_decode();
    sc.scores = FAKE(0x700000);
    sc.scores_stride = huge;
    expect("decode scores_stride overflow", dsa_indexer_decode_scores(&sc, 0), DSA_ERR_INVALID_VALUE, "scores");
    dsa_indexer_prefill_scores_args ps;
    memset(&ps, 0, sizeof ps);
    ps.prefill = good_prefill();
    ps.scores = FAKE(0x700000);
    ps.scores_stride = huge;
    expect("prefill scores_stride overflow", dsa_indexer_prefill_scores(&ps, 0), DSA_ERR_INVALID_VALUE, "scores");
  }
  {
    dsa_topk_args a = good_topk();
    a.scores_stride = huge;
    expect("topk scores_stride overflow", dsa_topk(&a, FAKE(0x100000), (size_t)1 << 40, 0), DSA_ERR_INVALID_VALUE,
           "scores");
  }
  MLA_CASE("mla indices_stride overflow", b.indices_stride = huge, DSA_ERR_INVALID_VALUE, "indices");
  MLA_CASE("mla kv_stride overflow", (b.kv_format = DSA_KV_BF16, b.kv_stride = huge & ~(int64_t)7),
           DSA_ERR_INVALID_VALUE, "kv_cache");
  MLA_CASE("mla num_slots x 656 overflow", b.num_slots = huge, DSA_ERR_INVALID_VALUE, "kv_cache");
  {
    dsa_index_k_store_args k;
    memset(&k, 0, sizeof k);
    k.k = FAKE(0x10000);
    k.k_stride = huge & ~(int64_t)7;
    k.slot_mapping = FAKE(0x20000);
    k.num_tokens = 4;
    k.cache = FAKE(0x30000);
    k.num_pages = 10;
    k.page_size = 64;
    expect("kstore k_stride overflow", dsa_index_k_store(&k, 0), DSA_ERR_INVALID_VALUE, "k");
    k.k_stride = 128;
    k.num_pages = huge;
    expect("kstore num_pages x page_size wraps", dsa_index_k_store(&k, 0), DSA_ERR_INVALID_VALUE, "num_pages");
    dsa_mla_kv_store_args m;
    memset(&m, 0, sizeof m);
    m.kv = FAKE(0x10000);
    m.kv_stride = huge & ~(int64_t)7;
    m.slot_mapping = FAKE(0x20000);
    m.num_tokens = 4;
    m.cache = FAKE(0x30000);
    m.kv_format = DSA_KV_BF16;
    m.cache_stride = 576;
    m.num_slots = 100;
    expect("kvstore kv_stride overflow", dsa_mla_kv_store(&m, 0), DSA_ERR_INVALID_VALUE, "kv");
    m.kv_stride = 576;
    m.cache_stride = huge & ~(int64_t)7;
    expect("kvstore cache_stride overflow", dsa_mla_kv_store(&m, 0), DSA_ERR_INVALID_VALUE, "cache");
  }
}

/* Sizes the header allowed but the launch arithmetic could not take: now stated limits, rejected
 * with a clear status (they came back as a raw CUDA "invalid argument"). */
static void test_limits(void) {
  dsa_topk_args a;
  memset(&a, 0, sizeof a);
  a.scores = FAKE(0x10000);
  a.scores_stride = INT32_MAX;
  a.num_rows = 1;
  a.max_len = INT32_MAX;
  a.topk = 10;
  a.indices = FAKE(0x20000);
  expect("topk max_len INT_MAX", dsa_topk(&a, FAKE(0x100000), (size_t)1 << 40, 0), DSA_ERR_INVALID_VALUE,
         "DSA_MAX_ROW_LEN");
  size_t bytes = 0;
  expect("topk ws max_len INT_MAX", dsa_topk_workspace_size(&a, &bytes), DSA_ERR_INVALID_VALUE, "max_len");
  PREFILL_CASE("prefill workspace rows INT32_MAX", b.num_workspace_rows = INT32_MAX, DSA_ERR_INVALID_VALUE,
               "DSA_MAX_ROW_LEN");
  DECODE_CASE("decode max_seq_len > DSA_MAX_ROW_LEN", b.max_seq_len = DSA_MAX_ROW_LEN + 1, DSA_ERR_INVALID_VALUE,
              "max_seq_len");
  DECODE_CASE("decode block table wider than DSA_MAX_ROW_LEN", (b.max_blocks_per_req = (1 << 24) + 1,
              b.block_table_stride = (1 << 24) + 1), DSA_ERR_INVALID_VALUE, "max_seq_len");
  /* ... unless max_seq_len bounds L: then a wide block table is fine (workspace query: no device). */
  dsa_indexer_decode_args d = good_decode();
  d.max_blocks_per_req = (1 << 24) + 1;
  d.block_table_stride = (1 << 24) + 1;
  d.max_seq_len = 1 << 20;
  expect("decode wide block table with max_seq_len", dsa_indexer_decode_workspace_size(&d, &bytes), DSA_OK, NULL);
  DECODE_CASE("decode page size 2 (not a multiple of 4)", b.cache.page_size = 2, DSA_ERR_UNSUPPORTED, "page_size");
}

/* dsa_last_error keeps the last failure's message when a later call succeeds (it was cleared). */
static void test_last_error(void) {
  dsa_indexer_decode_args b = good_decode();
  b.topk = 0;
  size_t bytes = 0;
  dsa_status st = dsa_indexer_decode_workspace_size(&b, &bytes);
  char before[512];
  snprintf(before, sizeof before, "%s", dsa_last_error());
  b.topk = 2048;
  dsa_status st2 = dsa_indexer_decode_workspace_size(&b, &bytes);
  const int good = st == DSA_ERR_INVALID_VALUE && st2 == DSA_OK && before[0] && strcmp(before, dsa_last_error()) == 0;
  if (good) {
    g_pass++;
  } else {
    g_fail++;
    printf("FAIL last error kept after a successful call: \"%s\" -> \"%s\"\n", before, dsa_last_error());
  }
}

/* Context parallelism's pieces: every bad argument named, nothing launched. */
static void test_cp(void) {
  const dsa_shard rr = {2, 1, DSA_SHARD_ROUND_ROBIN, 0};
  dsa_cp_candidates_args c;
  memset(&c, 0, sizeof c);
  c.shard = rr;
  c.scores = FAKE(0x10000);
  c.scores_stride = 1000;
  c.max_len = 1000;
  c.local_indices = FAKE(0x20000);
  c.num_rows = 4;
  c.topk = 2048;
  c.cand_scores = FAKE(0x30000);
  c.cand_ids = FAKE(0x40000);
  dsa_cp_candidates_args cb = c;
  cb.shard.world_size = 9;
  expect("cp candidates W 9", dsa_cp_candidates(&cb, 0), DSA_ERR_INVALID_VALUE, "world_size");
  cb = c;
  cb.shard.rank = 2;
  expect("cp candidates rank 2 of 2", dsa_cp_candidates(&cb, 0), DSA_ERR_INVALID_VALUE, "rank");
  cb = c;
  cb.shard.layout = (dsa_shard_layout)7;
  expect("cp candidates layout", dsa_cp_candidates(&cb, 0), DSA_ERR_INVALID_VALUE, "layout");
  cb = c;
  cb.shard.layout = DSA_SHARD_BLOCKS;
  cb.shard.block = 0;
  expect("cp candidates block 0", dsa_cp_candidates(&cb, 0), DSA_ERR_INVALID_VALUE, "block");
  cb.shard.block = 999;
  expect("cp candidates max_len past the block", dsa_cp_candidates(&cb, 0), DSA_ERR_INVALID_VALUE, "block");
  cb = c;
  cb.shard.world_size = 8;
  cb.shard.rank = 7;
  cb.max_len = DSA_MAX_ROW_LEN;
  cb.scores_stride = DSA_MAX_ROW_LEN;
  expect("cp candidates global position past 2^31", dsa_cp_candidates(&cb, 0), DSA_ERR_INVALID_VALUE, "global position");
  cb = c;
  cb.scores_stride = 10;
  expect("cp candidates stride", dsa_cp_candidates(&cb, 0), DSA_ERR_INVALID_VALUE, "scores_stride");
  cb = c;
  cb.cand_ids = NULL;
  expect("cp candidates ids null", dsa_cp_candidates(&cb, 0), DSA_ERR_NULL_POINTER, "cand_ids");
  cb = c;
  cb.local_indices = FAKE(0x20002);
  expect("cp candidates misaligned", dsa_cp_candidates(&cb, 0), DSA_ERR_MISALIGNED, "local_indices");
  cb = c;
  cb.num_rows = 0;
  expect("cp candidates zero rows", dsa_cp_candidates(&cb, 0), DSA_OK, NULL);

  dsa_topk_merge_args m = {FAKE(0x10000), FAKE(0x20000), 8, 4, 2048, 2048, FAKE(0x30000), FAKE(0x40000)};
  dsa_topk_merge_args mb = m;
  mb.k_in = 2049;
  expect("merge too many candidates", dsa_topk_merge(&mb, 0), DSA_ERR_INVALID_VALUE, "k_in");
  mb = m;
  mb.num_lists = 0;
  expect("merge no lists", dsa_topk_merge(&mb, 0), DSA_ERR_INVALID_VALUE, "num_lists");
  mb = m;
  mb.topk = 0;
  expect("merge topk 0", dsa_topk_merge(&mb, 0), DSA_ERR_INVALID_VALUE, "topk");
  mb = m;
  mb.indices = NULL;
  expect("merge indices null", dsa_topk_merge(&mb, 0), DSA_ERR_NULL_POINTER, "indices");
  mb = m;
  mb.cand_scores = FAKE(0x10001);
  expect("merge misaligned", dsa_topk_merge(&mb, 0), DSA_ERR_MISALIGNED, "cand_scores");
  mb = m;
  mb.num_rows = -1;
  expect("merge rows < 0", dsa_topk_merge(&mb, 0), DSA_ERR_INVALID_VALUE, "num_rows");
  mb.num_rows = 0;
  expect("merge zero rows", dsa_topk_merge(&mb, 0), DSA_OK, NULL);

  dsa_cp_local_indices_args l;
  memset(&l, 0, sizeof l);
  l.shard = rr;
  l.indices = FAKE(0x10000);
  l.num_tokens = 4;
  l.topk = 2048;
  l.block_table = FAKE(0x20000);
  l.block_table_stride = 100;
  l.max_blocks_per_req = 100;
  l.q_len_per_req = 2;
  l.page_size = 64;
  l.num_pages = 1000;
  l.out_slots = FAKE(0x30000);
  dsa_cp_local_indices_args lb = l;
  lb.num_tokens = 5;
  expect("local indices tokens not a multiple of q_len", dsa_cp_local_indices(&lb, 0), DSA_ERR_INVALID_VALUE,
         "q_len_per_req");
  lb = l;
  lb.block_table_stride = 99;
  expect("local indices stride", dsa_cp_local_indices(&lb, 0), DSA_ERR_INVALID_VALUE, "block_table_stride");
  lb = l;
  lb.block_table = NULL;
  expect("local indices block table null", dsa_cp_local_indices(&lb, 0), DSA_ERR_NULL_POINTER, "block_table");
  lb = l;
  lb.workspace_slots = FAKE(0x50004);
  lb.num_workspace_rows = 100;
  expect("local indices workspace slots misaligned", dsa_cp_local_indices(&lb, 0), DSA_ERR_MISALIGNED,
         "workspace_slots");
  lb.num_workspace_rows = -1;
  expect("local indices workspace rows", dsa_cp_local_indices(&lb, 0), DSA_ERR_INVALID_VALUE, "num_workspace_rows");
  lb = l;
  lb.out_slots = NULL;
  expect("local indices out null", dsa_cp_local_indices(&lb, 0), DSA_ERR_NULL_POINTER, "out_slots");
  lb = l;
  lb.out_lens = FAKE(0x60002);
  expect("local indices out_lens misaligned", dsa_cp_local_indices(&lb, 0), DSA_ERR_MISALIGNED, "out_lens");

  dsa_lse_combine_args e = {FAKE(0x10000), DSA_DTYPE_BF16, FAKE(0x20000), 2, 4, 16, FAKE(0x30000), FAKE(0x40000)};
  dsa_lse_combine_args eb = e;
  eb.num_parts = 9;
  expect("combine 9 parts", dsa_lse_combine(&eb, 0), DSA_ERR_INVALID_VALUE, "num_parts");
  eb = e;
  eb.num_heads = 129;
  expect("combine 129 heads", dsa_lse_combine(&eb, 0), DSA_ERR_INVALID_VALUE, "num_heads");
  eb = e;
  eb.parts_dtype = DSA_DTYPE_FP8_E4M3;
  expect("combine fp8 parts", dsa_lse_combine(&eb, 0), DSA_ERR_UNSUPPORTED, "parts_dtype");
  eb = e;
  eb.outs = FAKE(0x10008);
  expect("combine outs misaligned", dsa_lse_combine(&eb, 0), DSA_ERR_MISALIGNED, "outs");
  eb = e;
  eb.lses = NULL;
  expect("combine lses null", dsa_lse_combine(&eb, 0), DSA_ERR_NULL_POINTER, "lses");
  eb = e;
  eb.num_tokens = 0;
  expect("combine zero tokens", dsa_lse_combine(&eb, 0), DSA_OK, NULL);
}

static void test_misc(void) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", DSA_VERSION_MAJOR, DSA_VERSION_MINOR, DSA_VERSION_PATCH);
  if (strcmp(dsa_version(), want) != 0) { g_fail++; printf("FAIL version %s, header says %s\n", dsa_version(), want); } else g_pass++;
  for (int s = 0; s <= 7; s++)
    if (!dsa_status_string((dsa_status)s)[0]) { g_fail++; printf("FAIL status string %d\n", s); }
  g_pass++;
}

int main(void) {
  test_decode();
  test_prefill();
  test_topk();
  test_mla();
  test_stores();
  test_alignment();
  test_overflow();
  test_limits();
  test_last_error();
  test_cp();
  test_misc();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
