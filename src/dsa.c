/*
 * dsa.c — the host API layer: validates every argument, sizes and carves workspaces, splits long
 * inputs into bounded chunks, and dispatches to the per-stage launchers of dsa_kernels.h.
 * Nothing here touches device memory or synchronises; a failed check launches nothing.
 *
 * Order in every call: arguments (sizes, enums, pointers, alignment, extents), workspace, then —
 * only when there is work — the device (an sm_90 device must be current), then the launches.
 * Chunk loops count in int64, so no count up to INT_MAX can wrap them.
 */
#include "dsa.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsa_kernels.h"

#define DSA_STR2(x) #x
#define DSA_STR(x) DSA_STR2(x)

static _Thread_local char g_msg[512];

static dsa_status fail(dsa_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_msg, sizeof g_msg, fmt, ap);
  va_end(ap);
  return st;
}

const char *dsa_version(void) {
  return DSA_STR(DSA_VERSION_MAJOR) "." DSA_STR(DSA_VERSION_MINOR) "." DSA_STR(DSA_VERSION_PATCH);
}

const char *dsa_last_error(void) { return g_msg; }

const char *dsa_status_string(dsa_status s) {
  switch (s) {
    case DSA_OK: return "ok";
    case DSA_ERR_NULL_POINTER: return "null pointer";
    case DSA_ERR_INVALID_VALUE: return "invalid value";
    case DSA_ERR_UNSUPPORTED: return "unsupported";
    case DSA_ERR_MISALIGNED: return "misaligned";
    case DSA_ERR_WORKSPACE_TOO_SMALL: return "workspace too small";
    case DSA_ERR_CUDA: return "CUDA error";
    case DSA_ERR_NO_DEVICE: return "no device";
  }
  return "unknown status";
}

static int misaligned(const void *p, size_t a) { return ((uintptr_t)p % a) != 0; }
static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

#define CHECK(expr) do { dsa_status st_ = (expr); if (st_ != DSA_OK) return st_; } while (0)
#define NEED_PTR(p, name) do { if (!(p)) return fail(DSA_ERR_NULL_POINTER, "%s: %s is NULL", fn, name); } while (0)
#define NEED_ALIGNED(p, a, name)                                                                  \
  do {                                                                                            \
    if ((p) && misaligned((p), (a)))                                                              \
      return fail(DSA_ERR_MISALIGNED, "%s: %s = %p must be %d-byte aligned", fn, name,            \
                  (const void *)(p), (int)(a));                                                   \
  } while (0)

/* A launcher's (or the device query's) CUDA error as a status. */
static dsa_status cuda_status(const char *fn, int err) {
  if (err == 0) return DSA_OK;
  if (dsa_cuda_error_is_no_device(err))
    return fail(DSA_ERR_NO_DEVICE, "%s: no usable sm_90a device: CUDA error %d (%s)", fn, err,
                dsa_cuda_error_string(err));
  return fail(DSA_ERR_CUDA, "%s: CUDA error %d (%s)", fn, err, dsa_cuda_error_string(err));
}

/* The current device must be an sm_90 part (the only kernels this build holds); *sms = its SM count. */
static dsa_status need_device(const char *fn, int *sms) {
  dsa_device_info d;
  memset(&d, 0, sizeof d);
  CHECK(cuda_status(fn, dsa_device_query(&d)));
  if (d.cc_major != 9 || d.cc_minor != 0)
    return fail(DSA_ERR_NO_DEVICE, "%s: device %d is sm_%d%d; this build's kernels need sm_90a (H100/H200)", fn,
                d.ordinal, d.cc_major, d.cc_minor);
  *sms = d.num_sms;
  return DSA_OK;
}

/* The caller's workspace against what this call needs: big enough, present, 256-byte aligned. */
static dsa_status check_workspace(const char *fn, const void *ws, size_t ws_bytes, size_t need) {
  if (need > ws_bytes)
    return fail(DSA_ERR_WORKSPACE_TOO_SMALL, "%s: workspace_bytes = %zu < %zu needed", fn, ws_bytes, need);
  if (need > 0 && !ws) return fail(DSA_ERR_NULL_POINTER, "%s: workspace is NULL", fn);
  if (need > 0 && misaligned(ws, 256))
    return fail(DSA_ERR_MISALIGNED, "%s: workspace = %p must be 256-byte aligned", fn, ws);
  return DSA_OK;
}

/* A strided view at p: `rows` rows of `row_len` elements of `elem` bytes, `stride` elements apart.
 * Its extent, ((rows - 1) * stride + row_len) * elem bytes, must fit int64 and must not wrap the
 * address space from p: otherwise the device's index arithmetic would overflow. */
static dsa_status check_extent(const char *fn, const char *name, const void *p, int64_t rows, int64_t stride,
                               int64_t row_len, int64_t elem) {
  if (rows <= 0) return DSA_OK;
  if (row_len < 0) row_len = 0; /* nothing read, but row pointers are still formed: bound them too */
  if (stride < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: %s has a negative stride %lld", fn, name, (long long)stride);
  const int64_t max_elems = INT64_MAX / elem;
  if (row_len > max_elems || (rows > 1 && stride > (max_elems - row_len) / (rows - 1)))
    return fail(DSA_ERR_INVALID_VALUE, "%s: %s spans %lld rows x stride %lld: more than 2^63 bytes", fn, name,
                (long long)rows, (long long)stride);
  const uint64_t bytes = (uint64_t)((rows - 1) * stride + row_len) * (uint64_t)elem;
  if ((uintptr_t)p > UINTPTR_MAX - bytes)
    return fail(DSA_ERR_INVALID_VALUE, "%s: %s = %p plus its %llu bytes wraps the address space", fn, name, p,
                (unsigned long long)bytes);
  return DSA_OK;
}

/* A dense array of n elements. */
static dsa_status check_array(const char *fn, const char *name, const void *p, int64_t n, int64_t elem) {
  return check_extent(fn, name, p, 1, n, n, elem);
}

/* ---------------------------------------------------------------------------------------------- */
/* Validation pieces                                                                              */

/* The query side for num_tokens tokens. */
static dsa_status check_query(const char *fn, const dsa_indexer_query *q, int need_data, int64_t num_tokens) {
  if (q->head_dim != DSA_INDEX_HEAD_DIM)
    return fail(DSA_ERR_UNSUPPORTED, "%s: query.head_dim = %d (only %d is supported)", fn, q->head_dim,
                DSA_INDEX_HEAD_DIM);
  if (q->num_heads < 1 || q->num_heads > DSA_MAX_INDEX_HEADS)
    return fail(DSA_ERR_INVALID_VALUE, "%s: query.num_heads = %d (must be 1..%d)", fn, q->num_heads,
                DSA_MAX_INDEX_HEADS);
  if (q->q_dtype != DSA_DTYPE_BF16 && q->q_dtype != DSA_DTYPE_FP8_E4M3)
    return fail(DSA_ERR_UNSUPPORTED, "%s: query.q_dtype = %d (bf16 or fp8 e4m3)", fn, (int)q->q_dtype);
  if (q->weights_dtype != DSA_DTYPE_F32 && q->weights_dtype != DSA_DTYPE_BF16)
    return fail(DSA_ERR_UNSUPPORTED, "%s: query.weights_dtype = %d (float32 or bf16)", fn,
                (int)q->weights_dtype);
  if (q->weights_stride < q->num_heads)
    return fail(DSA_ERR_INVALID_VALUE, "%s: query.weights_stride = %lld < num_heads = %d", fn,
                (long long)q->weights_stride, q->num_heads);
  if (!isfinite(q->softmax_scale))
    return fail(DSA_ERR_INVALID_VALUE, "%s: query.softmax_scale is not finite", fn);
  if (!need_data || num_tokens == 0) return DSA_OK;
  NEED_PTR(q->q, "query.q");
  NEED_PTR(q->weights, "query.weights");
  if (q->q_dtype == DSA_DTYPE_FP8_E4M3) NEED_PTR(q->q_scale, "query.q_scale (required for fp8 q)");
  const int bf16 = q->q_dtype == DSA_DTYPE_BF16;
  const int w_elem = q->weights_dtype == DSA_DTYPE_F32 ? 4 : 2;
  NEED_ALIGNED(q->q, bf16 ? 8 : 4, "query.q");
  NEED_ALIGNED(q->q_scale, 4, "query.q_scale");
  NEED_ALIGNED(q->weights, w_elem, "query.weights");
  const int64_t rows = num_tokens * q->num_heads;
  CHECK(check_array(fn, "query.q", q->q, rows * DSA_INDEX_HEAD_DIM, bf16 ? 2 : 1));
  if (q->q_scale) CHECK(check_array(fn, "query.q_scale", q->q_scale, rows, 4));
  CHECK(check_extent(fn, "query.weights", q->weights, num_tokens, q->weights_stride, q->num_heads, w_elem));
  return DSA_OK;
}

static dsa_status check_cache(const char *fn, const dsa_index_k_cache *c, int need_data) {
  if (c->page_size < 4 || c->page_size > 1024 || c->page_size % 4)
    return fail(DSA_ERR_UNSUPPORTED, "%s: cache.page_size = %d (must be a multiple of 4 in 4..1024)", fn,
                c->page_size);
  if (c->num_pages < 0)
    return fail(DSA_ERR_INVALID_VALUE, "%s: cache.num_pages = %lld < 0", fn, (long long)c->num_pages);
  if (c->num_pages > INT32_MAX / c->page_size) /* divided, not multiplied: no overflow */
    return fail(DSA_ERR_INVALID_VALUE,
                "%s: cache.num_pages = %lld x page_size %d exceeds 2^31-1 slots (slots are reported as int32)",
                fn, (long long)c->num_pages, c->page_size);
  if (!need_data) return DSA_OK;
  NEED_PTR(c->data, "cache.data");
  NEED_ALIGNED(c->data, 16, "cache.data");
  const int64_t row_bytes = DSA_INDEX_HEAD_DIM + 4 * (DSA_INDEX_HEAD_DIM / 128);
  return check_array(fn, "cache.data", c->data, c->num_pages * c->page_size, row_bytes);
}

static dsa_status check_topk(const char *fn, int topk) {
  if (topk < 1 || topk > DSA_MAX_TOPK)
    return fail(DSA_ERR_INVALID_VALUE, "%s: topk = %d (must be 1..%d)", fn, topk, DSA_MAX_TOPK);
  return DSA_OK;
}

/* Top-k outputs of num_tokens rows. */
static dsa_status check_topk_outputs(const char *fn, int32_t *indices, const char *indices_name, int32_t *lens,
                                     const char *lens_name, int64_t num_tokens, int topk) {
  if (num_tokens == 0) return DSA_OK;
  NEED_PTR(indices, indices_name);
  NEED_ALIGNED(indices, 4, indices_name);
  NEED_ALIGNED(lens, 4, lens_name);
  CHECK(check_array(fn, indices_name, indices, num_tokens * topk, 4));
  if (lens) CHECK(check_array(fn, lens_name, lens, num_tokens, 4));
  return DSA_OK;
}

/* Decode: sizes and pointers; *max_len = the clamp on L. */
static dsa_status check_decode(const char *fn, const dsa_indexer_decode_args *a, int need_data,
                               int need_outputs, int *max_len) {
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_reqs < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_reqs = %d < 0", fn, a->num_reqs);
  if (a->q_len_per_req < 1 || a->q_len_per_req > DSA_MAX_Q_LEN_PER_REQ)
    return fail(DSA_ERR_INVALID_VALUE, "%s: q_len_per_req = %d (must be 1..%d)", fn, a->q_len_per_req,
                DSA_MAX_Q_LEN_PER_REQ);
  if ((int64_t)a->num_reqs * a->q_len_per_req > INT32_MAX)
    return fail(DSA_ERR_INVALID_VALUE, "%s: num_reqs = %d x q_len_per_req = %d overflows int", fn, a->num_reqs,
                a->q_len_per_req);
  const int64_t tokens = (int64_t)a->num_reqs * a->q_len_per_req;
  CHECK(check_query(fn, &a->query, need_data, tokens));
  CHECK(check_cache(fn, &a->cache, need_data && tokens > 0));
  CHECK(check_topk(fn, a->topk));
  if (a->max_blocks_per_req < 1)
    return fail(DSA_ERR_INVALID_VALUE, "%s: max_blocks_per_req = %d (must be >= 1)", fn, a->max_blocks_per_req);
  if (a->block_table_stride < a->max_blocks_per_req)
    return fail(DSA_ERR_INVALID_VALUE, "%s: block_table_stride = %lld < max_blocks_per_req = %d", fn,
                (long long)a->block_table_stride, a->max_blocks_per_req);
  if (a->max_seq_len < 0 || a->max_seq_len > DSA_MAX_ROW_LEN)
    return fail(DSA_ERR_INVALID_VALUE, "%s: max_seq_len = %d (must be 0..DSA_MAX_ROW_LEN = %d)", fn,
                a->max_seq_len, DSA_MAX_ROW_LEN);
  const int64_t cap = (int64_t)a->max_blocks_per_req * a->cache.page_size;
  const int64_t len = a->max_seq_len > 0 && a->max_seq_len < cap ? a->max_seq_len : cap;
  if (len > DSA_MAX_ROW_LEN)
    return fail(DSA_ERR_INVALID_VALUE,
                "%s: max_blocks_per_req = %d x page_size = %d = %lld positions exceeds DSA_MAX_ROW_LEN = %d "
                "(pass max_seq_len to bound L)",
                fn, a->max_blocks_per_req, a->cache.page_size, (long long)cap, DSA_MAX_ROW_LEN);
  *max_len = (int)len;
  if (need_data && tokens > 0) {
    NEED_PTR(a->seq_lens, "seq_lens");
    NEED_PTR(a->block_table, "block_table");
    NEED_ALIGNED(a->seq_lens, 4, "seq_lens");
    NEED_ALIGNED(a->block_table, 4, "block_table");
    CHECK(check_array(fn, "seq_lens", a->seq_lens, a->num_reqs, 4));
    CHECK(check_extent(fn, "block_table", a->block_table, a->num_reqs, a->block_table_stride,
                       a->max_blocks_per_req, 4));
  }
  if (need_outputs)
    CHECK(check_topk_outputs(fn, a->topk_indices, "topk_indices", a->topk_lens, "topk_lens", tokens, a->topk));
  return DSA_OK;
}

static dsa_status check_prefill(const char *fn, const dsa_indexer_prefill_args *a, int need_data,
                                int need_outputs, int *max_len) {
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_tokens < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  CHECK(check_query(fn, &a->query, need_data, a->num_tokens));
  CHECK(check_cache(fn, &a->cache, need_data && a->num_tokens > 0));
  CHECK(check_topk(fn, a->topk));
  if (a->num_workspace_rows < 0 || a->num_workspace_rows > DSA_MAX_ROW_LEN)
    return fail(DSA_ERR_INVALID_VALUE, "%s: num_workspace_rows = %lld (must be 0..DSA_MAX_ROW_LEN = %d)", fn,
                (long long)a->num_workspace_rows, DSA_MAX_ROW_LEN);
  if (a->max_rows < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: max_rows = %d < 0", fn, a->max_rows);
  *max_len = (int)((a->max_rows > 0 && a->max_rows < a->num_workspace_rows) ? a->max_rows
                                                                              : a->num_workspace_rows);
  if (need_data && a->num_tokens > 0) {
    NEED_PTR(a->row_starts, "row_starts");
    NEED_PTR(a->row_ends, "row_ends");
    NEED_ALIGNED(a->row_starts, 4, "row_starts");
    NEED_ALIGNED(a->row_ends, 4, "row_ends");
    CHECK(check_array(fn, "row_starts", a->row_starts, a->num_tokens, 4));
    CHECK(check_array(fn, "row_ends", a->row_ends, a->num_tokens, 4));
    if (a->num_workspace_rows > 0) {
      NEED_PTR(a->kv_workspace_slots, "kv_workspace_slots");
      NEED_ALIGNED(a->kv_workspace_slots, 8, "kv_workspace_slots");
      CHECK(check_array(fn, "kv_workspace_slots", a->kv_workspace_slots, a->num_workspace_rows, 8));
    }
  }
  if (need_outputs)
    CHECK(check_topk_outputs(fn, a->topk_indices, "topk_indices", a->topk_lens, "topk_lens", a->num_tokens,
                             a->topk));
  return DSA_OK;
}

/* A scores-only call's output: tokens rows of max_len floats, scores_stride apart. */
static dsa_status check_scores_out(const char *fn, const float *scores, int64_t stride, int64_t tokens,
                                   int max_len) {
  if (stride < max_len)
    return fail(DSA_ERR_INVALID_VALUE, "%s: scores_stride = %lld < max length %d", fn, (long long)stride, max_len);
  if (tokens == 0) return DSA_OK;
  NEED_PTR(scores, "scores");
  NEED_ALIGNED(scores, 4, "scores");
  return check_extent(fn, "scores", scores, tokens, stride, max_len, 4);
}

/* ---------------------------------------------------------------------------------------------- */
/* Indexer: chunk planning                                                                        */

typedef struct {
  int64_t stride;     /* score row stride (elements) */
  int chunk;          /* tokens per scoring launch */
  int group;          /* deferred: tokens per top-k group (resolved once, from composites); else = chunk */
  int deferred;       /* 1: long rows whose scores do not all fit — chunks of a group share the top-k
                         scratch, which is resolved once a group (topk.cu, dsa_topk_chunk_launch) */
  size_t score_bytes; /* scratch for one chunk's scores (0 when nothing is scored) */
  size_t total;       /* workspace bytes */
} indexer_plan;

/* The most tokens (a multiple of `multiple`, at most `limit`) whose `row_bytes` each fit `budget`
 * bytes beside `fixed` bytes, rounded to 256 bytes as the layouts are; 0 when not even one
 * request's do. */
static int64_t tokens_fitting(size_t budget, size_t fixed, int64_t row_bytes, int64_t limit, int multiple) {
  int64_t n = fixed >= budget ? 0 : (int64_t)((budget - fixed) / (size_t)row_bytes);
  if (n > limit) n = limit;
  n -= n % multiple;
  while (n > 0 && fixed + round256((size_t)row_bytes * (size_t)n) > budget) n -= multiple;
  return n;
}

/* The fastest plan: chunks of as many tokens as DSA_SCORE_CAP_ELEMS scores hold (at least one
 * request's, at most DSA_TOPK_ROWS_PER_LAUNCH), each chunk's top-k resolved on its own. */
static indexer_plan plan_fastest(int num_tokens, int max_len, int topk, int multiple) {
  indexer_plan p;
  memset(&p, 0, sizeof p);
  p.stride = ((int64_t)max_len + 3) & ~(int64_t)3;
  if (p.stride < 4) p.stride = 4;
  int64_t chunk = DSA_SCORE_CAP_ELEMS / p.stride;
  if (chunk > DSA_TOPK_ROWS_PER_LAUNCH) chunk = DSA_TOPK_ROWS_PER_LAUNCH;
  if (chunk > num_tokens) chunk = num_tokens;
  chunk -= chunk % multiple;
  if (chunk < multiple) chunk = multiple;
  p.chunk = p.group = (int)chunk;
  p.score_bytes = max_len > topk ? round256((size_t)p.stride * (size_t)chunk * 4) : 0;
  p.total = p.score_bytes + dsa_topk_ws_layout(p.chunk).total;
  return p;
}

/* Tokens per launch within a caller's workspace_limit `cap` (dsa.h; 0 = none): the fastest plan
 * when it fits. Else rows the top-k reads once (<= DSA_TOPK_ONE_CTA_MAX_LEN) or all tokens' scores
 * fitting: chunks of as many tokens as fit with their top-k scratch. Longer rows whose scores do not all fit: the deferred resolve — a group of
 * up to DSA_TOPK_ROWS_PER_LAUNCH tokens keeps its top-k scratch while its scores pass a chunk at
 * a time (the chain's resolve, a fixed ~80 us a launch on the H200, once a group instead of once a
 * chunk); the group halves while its chunks would hold fewer than DSA_DEFERRED_MIN_CHUNK tokens (or
 * than fit beside the smallest group, for rows so long that fewer do).
 * `multiple`: one request's MTP tokens stay together. */
static indexer_plan plan_indexer(int num_tokens, int max_len, int topk, int multiple, size_t cap) {
  indexer_plan p = plan_fastest(num_tokens, max_len, topk, multiple);
  if (cap == 0 || p.total <= cap) return p;
  const int64_t stride = p.stride; /* the score rows' stride: the same in every plan */
  memset(&p, 0, sizeof p);
  p.stride = stride;
  const int scored = max_len > topk;
  const int64_t row_bytes = scored ? p.stride * 4 : 0;
  const size_t per_token_topk = dsa_topk_ws_layout(1).total;
  int64_t limit = num_tokens < DSA_TOPK_ROWS_PER_LAUNCH ? num_tokens : DSA_TOPK_ROWS_PER_LAUNCH;
  limit -= limit % multiple;
  if (limit < multiple) limit = multiple;
  /* plain chunks: scores and top-k scratch of every token of the chunk */
  int64_t chunk = tokens_fitting(cap, 0, row_bytes + (int64_t)per_token_topk, limit, multiple);
  if (chunk < multiple) chunk = multiple; /* one request's rows alone pass the cap */
  while (chunk > multiple && (scored ? round256((size_t)row_bytes * (size_t)chunk) : 0) +
                                     dsa_topk_ws_layout((int)chunk).total > cap)
    chunk -= multiple; /* the layouts' rounding */
  if (scored && max_len > DSA_TOPK_ONE_CTA_MAX_LEN && chunk < limit) {
    /* deferred: the group's top-k scratch is fixed, its scores come a chunk at a time */
    /* rows so long that few tokens fit at all (4M: 3) lower the bar to what fits beside the
     * smallest group */
    int64_t target = tokens_fitting(cap, dsa_topk_ws_layout(multiple).total, row_bytes, limit, multiple);
    if (target > DSA_DEFERRED_MIN_CHUNK) target = DSA_DEFERRED_MIN_CHUNK;
    if (target < multiple) target = multiple;
    int64_t group = limit, c = 0;
    for (;;) {
      c = tokens_fitting(cap, dsa_topk_ws_layout((int)group).total, row_bytes, group, multiple);
      if (c >= target || (c > 0 && c == group)) break;
      int64_t half = group / 2;
      half -= half % multiple;
      if (half < multiple || half == group) break;
      group = half;
    }
    if (c < multiple) c = multiple; /* one request's rows alone pass the cap */
    if (c < group) {
      p.deferred = 1;
      p.group = (int)group;
      p.chunk = (int)c;
      p.score_bytes = round256((size_t)row_bytes * (size_t)c);
      p.total = p.score_bytes + dsa_topk_ws_layout(p.group).total;
      return p;
    }
    chunk = group; /* the whole group fits: plain */
  }
  p.chunk = p.group = (int)chunk;
  p.score_bytes = scored ? round256((size_t)row_bytes * (size_t)chunk) : 0;
  p.total = p.score_bytes + dsa_topk_ws_layout(p.chunk).total;
  return p;
}

static void rows_from_decode(dsa_rows *r, const dsa_indexer_decode_args *a, int max_len) {
  memset(r, 0, sizeof *r);
  r->mode = DSA_ROWS_DECODE;
  r->max_len = max_len;
  r->seq_lens = a->seq_lens;
  r->block_table = a->block_table;
  r->block_table_stride = a->block_table_stride;
  r->max_blocks = a->max_blocks_per_req;
  r->q_len_per_req = a->q_len_per_req;
  r->num_pages = a->cache.num_pages;
  r->page_size = a->cache.page_size;
}

static void rows_from_prefill(dsa_rows *r, const dsa_indexer_prefill_args *a, int max_len) {
  memset(r, 0, sizeof *r);
  r->mode = DSA_ROWS_PREFILL;
  r->max_len = max_len;
  r->ws_slots = a->kv_workspace_slots;
  r->num_ws_rows = a->num_workspace_rows;
  r->row_starts = a->row_starts;
  r->row_ends = a->row_ends;
  r->output_global_slots = a->output_global_slots != 0;
  r->num_pages = a->cache.num_pages;
  r->page_size = a->cache.page_size;
}

/* DSA_INDEXER_KERNEL=v1 / v2 / v3 / v3t forces a scorer (v2, v3t's TMA: FP8 q only) instead of the
 * default (v3 for prefill, v3t for FP8-q decode, v1 otherwise: indexer_scores/launch.cu); comparisons
 * and tests. */
static int indexer_kernel_forced(void) {
  const char *e = getenv("DSA_INDEXER_KERNEL");
  if (e && strcmp(e, "v1") == 0) return 1;
  if (e && strcmp(e, "v2") == 0) return 2;
  if (e && strcmp(e, "v3") == 0) return 3;
  if (e && strcmp(e, "v3t") == 0) return 5;
  return 0;
}

/* DSA_TOPK_CLUSTER=0 keeps few long rows off the one-cluster-a-row top-k (tests of the other paths). */
static int topk_cluster_allowed(void) {
  const char *e = getenv("DSA_TOPK_CLUSTER");
  if (!e) return 1;
  const int n = atoi(e); /* 0: off; N: clusters for up to N x SMs CTAs (default 1; a tuning knob) */
  return n < 0 ? 0 : n > 64 ? 64 : n;
}

/* DSA_TOPK_SMALL=0 sends rows up to 16,384 to the slices kernel instead of the one-CTA register
 * kernel (tests of both, comparisons). */
static int topk_small_allowed(void) {
  const char *e = getenv("DSA_TOPK_SMALL");
  return !(e && strcmp(e, "0") == 0);
}

/* Top-k of tokens [t0, t0 + n) of an indexer call: their rows, outputs and lengths (no scores). */
static dsa_topk_params topk_rows(dsa_rows rows, int t0, int n, int topk, int32_t *out, int32_t *lens, int sms) {
  dsa_topk_params tp;
  memset(&tp, 0, sizeof tp);
  rows.token_begin = t0;
  tp.rows = rows;
  tp.num_tokens = n;
  tp.topk = topk;
  tp.out = out + (size_t)t0 * topk;
  tp.out_lens = lens ? lens + t0 : NULL;
  tp.num_sms = sms;
  return tp;
}

/* Scores + top-k over num_tokens tokens in chunks of plan.chunk; deferred plans resolve each group of
 * plan.group tokens once, after its chunks. */
static dsa_status run_indexer(const char *fn, const dsa_indexer_query *q, const dsa_index_k_cache *c,
                              dsa_rows rows, int num_tokens, int topk, int max_len, int32_t *out,
                              int32_t *lens, const indexer_plan *plan, void *ws, size_t ws_bytes,
                              cudaStream_t stream) {
  CHECK(check_workspace(fn, ws, ws_bytes, plan->total));
  int sms = 0;
  CHECK(need_device(fn, &sms));
  float *scores = (float *)ws;
  void *topk_ws = (char *)ws + plan->score_bytes;
  for (int64_t g0 = 0; g0 < num_tokens; g0 += plan->group) {
    const int gn = (int)(num_tokens - g0 < plan->group ? num_tokens - g0 : plan->group);
    for (int64_t t0 = g0; t0 < g0 + gn; t0 += plan->chunk) {
      const int n = (int)(g0 + gn - t0 < plan->chunk ? g0 + gn - t0 : plan->chunk);
      rows.token_begin = (int)t0;
      if (max_len > topk) {
        dsa_scores_params sp;
        memset(&sp, 0, sizeof sp);
        sp.q = *q;
        sp.cache = *c;
        sp.rows = rows;
        sp.num_sms = sms;
        sp.num_tokens = n;
        sp.skip_len = topk;
        sp.kernel = indexer_kernel_forced();
        sp.scores = scores;
        sp.scores_stride = plan->stride;
        CHECK(cuda_status(fn, dsa_indexer_scores_launch(&sp, stream)));
      }
      dsa_topk_params tp = topk_rows(rows, (int)t0, n, topk, out, lens, sms);
      tp.scores = scores;
      tp.scores_stride = plan->stride;
      tp.allow_cluster = topk_cluster_allowed();
      tp.allow_small = topk_small_allowed();
      if (plan->deferred)
        CHECK(cuda_status(fn, dsa_topk_chunk_launch(&tp, topk_ws, plan->group, (int)(t0 - g0), stream)));
      else
        CHECK(cuda_status(fn, dsa_topk_launch(&tp, topk_ws, stream)));
    }
    if (plan->deferred) { /* the group's rows from their composites (no scores read) */
      const dsa_topk_params tp = topk_rows(rows, (int)g0, gn, topk, out, lens, sms);
      CHECK(cuda_status(fn, dsa_topk_final_launch(&tp, topk_ws, plan->group, stream)));
    }
  }
  return DSA_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Indexer: public entry points                                                                   */

dsa_status dsa_indexer_decode_workspace_size(const dsa_indexer_decode_args *a, size_t *bytes) {
  const char *fn = "dsa_indexer_decode_workspace_size";
  int max_len = 0;
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_decode(fn, a, 0, 0, &max_len));
  const int tokens = a->num_reqs * a->q_len_per_req;
  *bytes = tokens ? plan_indexer(tokens, max_len, a->topk, a->q_len_per_req, a->workspace_limit).total : 0;
  return DSA_OK;
}

dsa_status dsa_indexer_decode(const dsa_indexer_decode_args *a, void *ws, size_t ws_bytes,
                              cudaStream_t stream) {
  const char *fn = "dsa_indexer_decode";
  int max_len = 0;
  CHECK(check_decode(fn, a, 1, 1, &max_len));
  const int tokens = a->num_reqs * a->q_len_per_req;
  if (tokens == 0) return DSA_OK;
  const indexer_plan plan = plan_indexer(tokens, max_len, a->topk, a->q_len_per_req, a->workspace_limit);
  dsa_rows rows;
  rows_from_decode(&rows, a, max_len);
  return run_indexer(fn, &a->query, &a->cache, rows, tokens, a->topk, max_len, a->topk_indices,
                     a->topk_lens, &plan, ws, ws_bytes, stream);
}

dsa_status dsa_indexer_prefill_workspace_size(const dsa_indexer_prefill_args *a, size_t *bytes) {
  const char *fn = "dsa_indexer_prefill_workspace_size";
  int max_len = 0;
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_prefill(fn, a, 0, 0, &max_len));
  *bytes = a->num_tokens ? plan_indexer(a->num_tokens, max_len, a->topk, 1, a->workspace_limit).total : 0;
  return DSA_OK;
}

dsa_status dsa_indexer_prefill(const dsa_indexer_prefill_args *a, void *ws, size_t ws_bytes,
                               cudaStream_t stream) {
  const char *fn = "dsa_indexer_prefill";
  int max_len = 0;
  CHECK(check_prefill(fn, a, 1, 1, &max_len));
  if (a->num_tokens == 0) return DSA_OK;
  const indexer_plan plan = plan_indexer(a->num_tokens, max_len, a->topk, 1, a->workspace_limit);
  dsa_rows rows;
  rows_from_prefill(&rows, a, max_len);
  return run_indexer(fn, &a->query, &a->cache, rows, a->num_tokens, a->topk, max_len, a->topk_indices,
                     a->topk_lens, &plan, ws, ws_bytes, stream);
}

/* Scores alone into the caller's buffer, in launches of at most DSA_SCORE_TOKENS_PER_LAUNCH. */
static dsa_status run_scores(const char *fn, const dsa_indexer_query *q, const dsa_index_k_cache *c,
                             dsa_rows rows, int num_tokens, int multiple, int skip_len, float *scores,
                             int64_t stride, cudaStream_t stream) {
  int sms = 0;
  CHECK(need_device(fn, &sms));
  const int per = DSA_SCORE_TOKENS_PER_LAUNCH - DSA_SCORE_TOKENS_PER_LAUNCH % multiple;
  for (int64_t t0 = 0; t0 < num_tokens; t0 += per) {
    dsa_scores_params sp;
    memset(&sp, 0, sizeof sp);
    sp.q = *q;
    sp.cache = *c;
    sp.rows = rows;
    sp.rows.token_begin = (int)t0;
    sp.num_sms = sms;
    sp.num_tokens = (int)(num_tokens - t0 < per ? num_tokens - t0 : per);
    sp.skip_len = skip_len;
    sp.kernel = indexer_kernel_forced();
    sp.scores = scores + t0 * stride;
    sp.scores_stride = stride;
    sp.fill_tail = 1; /* DESIGN §3: columns past L hold -inf */
    CHECK(cuda_status(fn, dsa_indexer_scores_launch(&sp, stream)));
  }
  return DSA_OK;
}

dsa_status dsa_indexer_decode_scores(const dsa_indexer_decode_scores_args *a, cudaStream_t stream) {
  const char *fn = "dsa_indexer_decode_scores";
  int max_len = 0;
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_decode(fn, &a->decode, 1, 0, &max_len));
  const int tokens = a->decode.num_reqs * a->decode.q_len_per_req;
  CHECK(check_scores_out(fn, a->scores, a->scores_stride, tokens, max_len));
  if (tokens == 0) return DSA_OK;
  dsa_rows rows;
  rows_from_decode(&rows, &a->decode, max_len);
  return run_scores(fn, &a->decode.query, &a->decode.cache, rows, tokens, a->decode.q_len_per_req,
                    a->skip_short_rows ? a->decode.topk : -1, a->scores, a->scores_stride, stream);
}

dsa_status dsa_indexer_prefill_scores(const dsa_indexer_prefill_scores_args *a, cudaStream_t stream) {
  const char *fn = "dsa_indexer_prefill_scores";
  int max_len = 0;
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_prefill(fn, &a->prefill, 1, 0, &max_len));
  CHECK(check_scores_out(fn, a->scores, a->scores_stride, a->prefill.num_tokens, max_len));
  if (a->prefill.num_tokens == 0) return DSA_OK;
  dsa_rows rows;
  rows_from_prefill(&rows, &a->prefill, max_len);
  return run_scores(fn, &a->prefill.query, &a->prefill.cache, rows, a->prefill.num_tokens, 1,
                    a->skip_short_rows ? a->prefill.topk : -1, a->scores, a->scores_stride, stream);
}

/* ---------------------------------------------------------------------------------------------- */
/* Plain top-k                                                                                    */

static dsa_status check_plain_topk(const char *fn, const dsa_topk_args *a, int need_data) {
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_topk(fn, a->topk));
  if (a->num_rows < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_rows = %d < 0", fn, a->num_rows);
  if (a->max_len < 0 || a->max_len > DSA_MAX_ROW_LEN)
    return fail(DSA_ERR_INVALID_VALUE, "%s: max_len = %d (must be 0..DSA_MAX_ROW_LEN = %d)", fn, a->max_len,
                DSA_MAX_ROW_LEN);
  if (a->scores_stride < a->max_len)
    return fail(DSA_ERR_INVALID_VALUE, "%s: scores_stride = %lld < max_len = %d", fn,
                (long long)a->scores_stride, a->max_len);
  if (!need_data || a->num_rows == 0) return DSA_OK;
  if (a->max_len > 0) NEED_PTR(a->scores, "scores");
  NEED_ALIGNED(a->scores, 4, "scores");
  NEED_ALIGNED(a->row_lens, 4, "row_lens");
  CHECK(check_extent(fn, "scores", a->scores, a->num_rows, a->scores_stride, a->max_len, 4));
  if (a->row_lens) CHECK(check_array(fn, "row_lens", a->row_lens, a->num_rows, 4));
  return check_topk_outputs(fn, a->indices, "indices", a->lens, "lens", a->num_rows, a->topk);
}

static int plain_rows_per_launch(const dsa_topk_args *a) {
  return a->num_rows < DSA_TOPK_ROWS_PER_LAUNCH ? a->num_rows : DSA_TOPK_ROWS_PER_LAUNCH;
}

dsa_status dsa_topk_workspace_size(const dsa_topk_args *a, size_t *bytes) {
  const char *fn = "dsa_topk_workspace_size";
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_plain_topk(fn, a, 0));
  *bytes = dsa_topk_ws_layout(plain_rows_per_launch(a)).total;
  return DSA_OK;
}

dsa_status dsa_topk(const dsa_topk_args *a, void *ws, size_t ws_bytes, cudaStream_t stream) {
  const char *fn = "dsa_topk";
  CHECK(check_plain_topk(fn, a, 1));
  if (a->num_rows == 0) return DSA_OK;
  const int per = plain_rows_per_launch(a);
  CHECK(check_workspace(fn, ws, ws_bytes, dsa_topk_ws_layout(per).total));
  int sms = 0;
  CHECK(need_device(fn, &sms));
  for (int64_t r0 = 0; r0 < a->num_rows; r0 += per) {
    dsa_topk_params tp;
    memset(&tp, 0, sizeof tp);
    tp.rows.mode = DSA_ROWS_PLAIN;
    tp.rows.max_len = a->max_len;
    tp.rows.row_lens = a->row_lens;
    tp.rows.token_begin = (int)r0;
    tp.scores = a->scores ? a->scores + r0 * a->scores_stride : NULL;
    tp.scores_stride = a->scores_stride;
    tp.num_tokens = (int)(a->num_rows - r0 < per ? a->num_rows - r0 : per);
    tp.topk = a->topk;
    tp.out = a->indices + r0 * a->topk;
    tp.out_lens = a->lens ? a->lens + r0 : NULL;
    tp.num_sms = sms;
    tp.allow_cluster = topk_cluster_allowed();
    tp.allow_small = topk_small_allowed();
    CHECK(cuda_status(fn, dsa_topk_launch(&tp, ws, stream)));
  }
  return DSA_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Sparse MLA attention                                                                           */

static dsa_status check_mla(const char *fn, const dsa_sparse_mla_args *a, int need_data) {
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_tokens < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->num_heads < 1 || a->num_heads > DSA_MAX_ATTN_HEADS)
    return fail(DSA_ERR_INVALID_VALUE, "%s: num_heads = %d (must be 1..%d)", fn, a->num_heads,
                DSA_MAX_ATTN_HEADS);
  CHECK(check_topk(fn, a->topk));
  if (a->indices_stride < a->topk)
    return fail(DSA_ERR_INVALID_VALUE, "%s: indices_stride = %lld < topk = %d", fn,
                (long long)a->indices_stride, a->topk);
  if (a->kv_format != DSA_KV_BF16 && a->kv_format != DSA_KV_FP8_PACKED)
    return fail(DSA_ERR_UNSUPPORTED, "%s: kv_format = %d (bf16 or packed fp8)", fn, (int)a->kv_format);
  if (a->num_slots < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_slots = %lld < 0", fn, (long long)a->num_slots);
  if (a->kv_format == DSA_KV_BF16 && (a->kv_stride < DSA_MLA_QK_DIM || a->kv_stride % 8))
    return fail(DSA_ERR_INVALID_VALUE, "%s: kv_stride = %lld (bf16 rows need >= 576, a multiple of 8)", fn,
                (long long)a->kv_stride);
  if (!isfinite(a->softmax_scale)) return fail(DSA_ERR_INVALID_VALUE, "%s: softmax_scale is not finite", fn);
  if (!need_data || a->num_tokens == 0) return DSA_OK;
  NEED_PTR(a->q, "q");
  NEED_PTR(a->kv_cache, "kv_cache");
  NEED_PTR(a->indices, "indices");
  NEED_PTR(a->out, "out");
  NEED_ALIGNED(a->q, 16, "q");
  NEED_ALIGNED(a->kv_cache, 16, "kv_cache");
  NEED_ALIGNED(a->out, 16, "out");
  NEED_ALIGNED(a->indices, 4, "indices");
  NEED_ALIGNED(a->lens, 4, "lens");
  NEED_ALIGNED(a->lse, 4, "lse");
  const int64_t rows = (int64_t)a->num_tokens * a->num_heads;
  CHECK(check_array(fn, "q", a->q, rows * DSA_MLA_QK_DIM, 2));
  if (a->kv_format == DSA_KV_BF16)
    CHECK(check_extent(fn, "kv_cache", a->kv_cache, a->num_slots, a->kv_stride, DSA_MLA_QK_DIM, 2));
  else
    CHECK(check_array(fn, "kv_cache", a->kv_cache, a->num_slots, DSA_MLA_FP8_SLOT_BYTES));
  CHECK(check_extent(fn, "indices", a->indices, a->num_tokens, a->indices_stride, a->topk, 4));
  if (a->lens) CHECK(check_array(fn, "lens", a->lens, a->num_tokens, 4));
  CHECK(check_array(fn, "out", a->out, rows * DSA_MLA_V_DIM, 2));
  if (a->lse) CHECK(check_array(fn, "lse", a->lse, rows, 4));
  return DSA_OK;
}

/* Which attention kernel: DSA_MLA_KERNEL=v1, v2 or v3 forces one (comparisons, tests, bisecting);
 * otherwise the one measured faster for the shape (dsa_mla_choose_kernel, plan.c). */
static int mla_kernel_choice(const dsa_sparse_mla_args *a, int sms) {
  const char *e = getenv("DSA_MLA_KERNEL");
  if (e && strcmp(e, "v1") == 0) return DSA_MLA_KERNEL_MMA;
  if (e && strcmp(e, "v2") == 0) return DSA_MLA_KERNEL_SM90;
  if (e && strcmp(e, "v3") == 0) return DSA_MLA_KERNEL_V3;
  return dsa_mla_choose_kernel(a, sms);
}

dsa_status dsa_sparse_mla_workspace_size(const dsa_sparse_mla_args *a, size_t *bytes) {
  const char *fn = "dsa_sparse_mla_workspace_size";
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_mla(fn, a, 0));
  *bytes = dsa_mla_workspace_bound(a);
  return DSA_OK;
}

dsa_status dsa_sparse_mla(const dsa_sparse_mla_args *a, void *ws, size_t ws_bytes, cudaStream_t stream) {
  const char *fn = "dsa_sparse_mla";
  CHECK(check_mla(fn, a, 1));
  if (a->num_tokens == 0) return DSA_OK;
  /* Checked against the size the query reports (every device's plan fits it). */
  CHECK(check_workspace(fn, ws, ws_bytes, dsa_mla_workspace_bound(a)));
  int sms = 0;
  CHECK(need_device(fn, &sms));
  const dsa_mla_plan plan = dsa_mla_make_plan(a, sms, mla_kernel_choice(a, sms));
  return cuda_status(fn, dsa_sparse_mla_launch(a, &plan, ws, stream));
}

/* ---------------------------------------------------------------------------------------------- */
/* Cache writers                                                                                  */

dsa_status dsa_index_k_store(const dsa_index_k_store_args *a, cudaStream_t stream) {
  const char *fn = "dsa_index_k_store";
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_tokens < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->k_stride < DSA_INDEX_HEAD_DIM)
    return fail(DSA_ERR_INVALID_VALUE, "%s: k_stride = %lld < %d", fn, (long long)a->k_stride, DSA_INDEX_HEAD_DIM);
  dsa_index_k_cache c = {a->cache, a->num_pages, a->page_size};
  CHECK(check_cache(fn, &c, a->num_tokens > 0));
  if (a->num_tokens == 0) return DSA_OK;
  NEED_PTR(a->k, "k");
  NEED_PTR(a->slot_mapping, "slot_mapping");
  if (misaligned(a->k, 16) || a->k_stride % 8)
    return fail(DSA_ERR_MISALIGNED, "%s: k = %p and k_stride = %lld must give 16-byte aligned rows", fn, a->k,
                (long long)a->k_stride);
  NEED_ALIGNED(a->slot_mapping, 8, "slot_mapping");
  CHECK(check_extent(fn, "k", a->k, a->num_tokens, a->k_stride, DSA_INDEX_HEAD_DIM, 2));
  CHECK(check_array(fn, "slot_mapping", a->slot_mapping, a->num_tokens, 8));
  int sms = 0;
  CHECK(need_device(fn, &sms));
  return cuda_status(fn, dsa_index_k_store_launch(a, stream));
}

dsa_status dsa_mla_kv_store(const dsa_mla_kv_store_args *a, cudaStream_t stream) {
  const char *fn = "dsa_mla_kv_store";
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_tokens < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->kv_stride < DSA_MLA_QK_DIM)
    return fail(DSA_ERR_INVALID_VALUE, "%s: kv_stride = %lld < %d", fn, (long long)a->kv_stride, DSA_MLA_QK_DIM);
  if (a->kv_format != DSA_KV_BF16 && a->kv_format != DSA_KV_FP8_PACKED)
    return fail(DSA_ERR_UNSUPPORTED, "%s: kv_format = %d (bf16 or packed fp8)", fn, (int)a->kv_format);
  if (a->num_slots < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_slots = %lld < 0", fn, (long long)a->num_slots);
  if (a->kv_format == DSA_KV_BF16 && (a->cache_stride < DSA_MLA_QK_DIM || a->cache_stride % 8))
    return fail(DSA_ERR_INVALID_VALUE, "%s: cache_stride = %lld (bf16 rows need >= 576, a multiple of 8)", fn,
                (long long)a->cache_stride);
  if (a->num_tokens == 0) return DSA_OK;
  NEED_PTR(a->kv, "kv");
  NEED_PTR(a->slot_mapping, "slot_mapping");
  NEED_PTR(a->cache, "cache");
  if (misaligned(a->kv, 16) || a->kv_stride % 8)
    return fail(DSA_ERR_MISALIGNED, "%s: kv = %p and kv_stride = %lld must give 16-byte aligned rows", fn, a->kv,
                (long long)a->kv_stride);
  NEED_ALIGNED(a->cache, 16, "cache");
  NEED_ALIGNED(a->slot_mapping, 8, "slot_mapping");
  CHECK(check_extent(fn, "kv", a->kv, a->num_tokens, a->kv_stride, DSA_MLA_QK_DIM, 2));
  CHECK(check_array(fn, "slot_mapping", a->slot_mapping, a->num_tokens, 8));
  if (a->kv_format == DSA_KV_BF16)
    CHECK(check_extent(fn, "cache", a->cache, a->num_slots, a->cache_stride, DSA_MLA_QK_DIM, 2));
  else
    CHECK(check_array(fn, "cache", a->cache, a->num_slots, DSA_MLA_FP8_SLOT_BYTES));
  int sms = 0;
  CHECK(need_device(fn, &sms));
  return cuda_status(fn, dsa_mla_kv_store_launch(a, stream));
}

/* ---------------------------------------------------------------------------------------------- */
/* Context parallelism (single-GPU pieces)                                                        */

static dsa_status check_shard(const char *fn, const dsa_shard *s) {
  if (s->world_size < 1 || s->world_size > DSA_MAX_CP_RANKS)
    return fail(DSA_ERR_INVALID_VALUE, "%s: shard.world_size = %d (must be 1..%d)", fn, s->world_size,
                DSA_MAX_CP_RANKS);
  if (s->rank < 0 || s->rank >= s->world_size)
    return fail(DSA_ERR_INVALID_VALUE, "%s: shard.rank = %d (must be 0..%d)", fn, s->rank, s->world_size - 1);
  if (s->layout != DSA_SHARD_ROUND_ROBIN && s->layout != DSA_SHARD_BLOCKS)
    return fail(DSA_ERR_INVALID_VALUE, "%s: shard.layout = %d (DSA_SHARD_ROUND_ROBIN or DSA_SHARD_BLOCKS)", fn,
                (int)s->layout);
  if (s->layout == DSA_SHARD_BLOCKS && (s->block < 1 || s->block > DSA_MAX_ROW_LEN))
    return fail(DSA_ERR_INVALID_VALUE, "%s: shard.block = %lld (must be 1..%d)", fn, (long long)s->block,
                DSA_MAX_ROW_LEN);
  return DSA_OK;
}

dsa_status dsa_cp_candidates(const dsa_cp_candidates_args *a, cudaStream_t stream) {
  const char *fn = "dsa_cp_candidates";
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_shard(fn, &a->shard));
  CHECK(check_topk(fn, a->topk));
  if (a->num_rows < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_rows = %d < 0", fn, a->num_rows);
  if (a->max_len < 0 || a->max_len > DSA_MAX_ROW_LEN)
    return fail(DSA_ERR_INVALID_VALUE, "%s: max_len = %d (must be 0..%d)", fn, a->max_len, DSA_MAX_ROW_LEN);
  if (a->scores_stride < a->max_len)
    return fail(DSA_ERR_INVALID_VALUE, "%s: scores_stride = %lld < max_len = %d", fn, (long long)a->scores_stride,
                a->max_len);
  /* global positions are int32: the largest local position must map below 2^31 (with row_offsets,
   * the kernel's int32 ids are the caller's bound: dsa.h) */
  const dsa_shard *s = &a->shard;
  if (a->max_len > 0 && !a->row_offsets) {
    const int64_t last = s->layout == DSA_SHARD_ROUND_ROBIN
                             ? (int64_t)(a->max_len - 1) * s->world_size + s->rank
                             : (int64_t)s->rank * s->block + a->max_len - 1;
    if (last > INT32_MAX)
      return fail(DSA_ERR_INVALID_VALUE, "%s: local position %d maps to global position %lld (> 2^31 - 1)", fn,
                  a->max_len - 1, (long long)last);
    if (s->layout == DSA_SHARD_BLOCKS && a->max_len > s->block)
      return fail(DSA_ERR_INVALID_VALUE, "%s: max_len = %d > shard.block = %lld (positions past a rank's block)", fn,
                  a->max_len, (long long)s->block);
  }
  if (a->num_rows == 0) return DSA_OK;
  if (a->max_len > 0) NEED_PTR(a->scores, "scores");
  NEED_PTR(a->local_indices, "local_indices");
  NEED_PTR(a->cand_scores, "cand_scores");
  NEED_PTR(a->cand_ids, "cand_ids");
  NEED_ALIGNED(a->scores, 4, "scores");
  NEED_ALIGNED(a->local_indices, 4, "local_indices");
  NEED_ALIGNED(a->cand_scores, 4, "cand_scores");
  NEED_ALIGNED(a->cand_ids, 4, "cand_ids");
  NEED_ALIGNED(a->row_offsets, 4, "row_offsets");
  if (a->row_offsets) CHECK(check_array(fn, "row_offsets", a->row_offsets, a->num_rows, 4));
  CHECK(check_extent(fn, "scores", a->scores, a->num_rows, a->scores_stride, a->max_len, 4));
  const int64_t n = (int64_t)a->num_rows * a->topk;
  CHECK(check_array(fn, "local_indices", a->local_indices, n, 4));
  CHECK(check_array(fn, "cand_scores", a->cand_scores, n, 4));
  CHECK(check_array(fn, "cand_ids", a->cand_ids, n, 4));
  int sms = 0;
  CHECK(need_device(fn, &sms));
  return cuda_status(fn, dsa_cp_candidates_launch(a, stream));
}

dsa_status dsa_topk_merge(const dsa_topk_merge_args *a, cudaStream_t stream) {
  const char *fn = "dsa_topk_merge";
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_topk(fn, a->topk));
  if (a->num_lists < 1 || a->k_in < 1 || (int64_t)a->num_lists * a->k_in > DSA_MAX_MERGE_CANDIDATES)
    return fail(DSA_ERR_INVALID_VALUE, "%s: num_lists = %d, k_in = %d (both >= 1, product <= %d)", fn, a->num_lists,
                a->k_in, DSA_MAX_MERGE_CANDIDATES);
  if (a->num_rows < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_rows = %d < 0", fn, a->num_rows);
  if (a->num_rows == 0) return DSA_OK;
  NEED_PTR(a->cand_scores, "cand_scores");
  NEED_PTR(a->cand_ids, "cand_ids");
  NEED_ALIGNED(a->cand_scores, 4, "cand_scores");
  NEED_ALIGNED(a->cand_ids, 4, "cand_ids");
  const int64_t n = (int64_t)a->num_lists * a->num_rows * a->k_in;
  CHECK(check_array(fn, "cand_scores", a->cand_scores, n, 4));
  CHECK(check_array(fn, "cand_ids", a->cand_ids, n, 4));
  CHECK(check_topk_outputs(fn, a->indices, "indices", a->lens, "lens", a->num_rows, a->topk));
  int sms = 0;
  CHECK(need_device(fn, &sms));
  return cuda_status(fn, dsa_topk_merge_launch(a, stream));
}

dsa_status dsa_cp_local_indices(const dsa_cp_local_indices_args *a, cudaStream_t stream) {
  const char *fn = "dsa_cp_local_indices";
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_shard(fn, &a->shard));
  CHECK(check_topk(fn, a->topk));
  if (a->num_tokens < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->workspace_slots) {
    if (a->num_workspace_rows < 0 || a->num_workspace_rows > DSA_MAX_ROW_LEN)
      return fail(DSA_ERR_INVALID_VALUE, "%s: num_workspace_rows = %lld (must be 0..%d)", fn,
                  (long long)a->num_workspace_rows, DSA_MAX_ROW_LEN);
  } else {
    if (a->q_len_per_req < 1 || a->q_len_per_req > DSA_MAX_Q_LEN_PER_REQ)
      return fail(DSA_ERR_INVALID_VALUE, "%s: q_len_per_req = %d (must be 1..%d)", fn, a->q_len_per_req,
                  DSA_MAX_Q_LEN_PER_REQ);
    if (a->num_tokens % a->q_len_per_req)
      return fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d is not a multiple of q_len_per_req = %d", fn,
                  a->num_tokens, a->q_len_per_req);
    if (a->page_size < 1 || a->num_pages < 0 || a->max_blocks_per_req < 1 ||
        a->block_table_stride < a->max_blocks_per_req)
      return fail(DSA_ERR_INVALID_VALUE,
                  "%s: page_size = %d, num_pages = %lld, max_blocks_per_req = %d, block_table_stride = %lld (need "
                  "page_size >= 1, num_pages >= 0, 1 <= max_blocks_per_req <= stride)",
                  fn, a->page_size, (long long)a->num_pages, a->max_blocks_per_req, (long long)a->block_table_stride);
  }
  if (a->num_tokens == 0) return DSA_OK;
  NEED_PTR(a->indices, "indices");
  NEED_PTR(a->out_slots, "out_slots");
  NEED_ALIGNED(a->indices, 4, "indices");
  NEED_ALIGNED(a->out_slots, 4, "out_slots");
  NEED_ALIGNED(a->out_lens, 4, "out_lens");
  const int64_t n = (int64_t)a->num_tokens * a->topk;
  CHECK(check_array(fn, "indices", a->indices, n, 4));
  CHECK(check_array(fn, "out_slots", a->out_slots, n, 4));
  if (a->out_lens) CHECK(check_array(fn, "out_lens", a->out_lens, a->num_tokens, 4));
  if (a->workspace_slots) {
    NEED_ALIGNED(a->workspace_slots, 8, "workspace_slots");
    CHECK(check_array(fn, "workspace_slots", a->workspace_slots, a->num_workspace_rows, 8));
  } else {
    NEED_PTR(a->block_table, "block_table");
    NEED_ALIGNED(a->block_table, 4, "block_table");
    CHECK(check_extent(fn, "block_table", a->block_table, a->num_tokens / a->q_len_per_req, a->block_table_stride,
                       a->max_blocks_per_req, 4));
  }
  int sms = 0;
  CHECK(need_device(fn, &sms));
  return cuda_status(fn, dsa_cp_local_indices_launch(a, stream));
}

dsa_status dsa_lse_combine(const dsa_lse_combine_args *a, cudaStream_t stream) {
  const char *fn = "dsa_lse_combine";
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_parts < 1 || a->num_parts > DSA_MAX_CP_RANKS)
    return fail(DSA_ERR_INVALID_VALUE, "%s: num_parts = %d (must be 1..%d)", fn, a->num_parts, DSA_MAX_CP_RANKS);
  if (a->num_heads < 1 || a->num_heads > DSA_MAX_ATTN_HEADS)
    return fail(DSA_ERR_INVALID_VALUE, "%s: num_heads = %d (must be 1..%d)", fn, a->num_heads, DSA_MAX_ATTN_HEADS);
  if (a->num_tokens < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->parts_dtype != DSA_DTYPE_BF16 && a->parts_dtype != DSA_DTYPE_F32)
    return fail(DSA_ERR_UNSUPPORTED, "%s: parts_dtype = %d (DSA_DTYPE_BF16 or DSA_DTYPE_F32)", fn,
                (int)a->parts_dtype);
  if (a->num_tokens == 0) return DSA_OK;
  NEED_PTR(a->outs, "outs");
  NEED_PTR(a->lses, "lses");
  NEED_PTR(a->out, "out");
  NEED_ALIGNED(a->outs, 16, "outs");
  NEED_ALIGNED(a->lses, 4, "lses");
  NEED_ALIGNED(a->out, 16, "out");
  NEED_ALIGNED(a->lse, 4, "lse");
  const int64_t rows = (int64_t)a->num_tokens * a->num_heads;
  CHECK(check_array(fn, "outs", a->outs, rows * a->num_parts * DSA_MLA_V_DIM,
                    a->parts_dtype == DSA_DTYPE_F32 ? 4 : 2));
  CHECK(check_array(fn, "lses", a->lses, rows * a->num_parts, 4));
  CHECK(check_array(fn, "out", a->out, rows * DSA_MLA_V_DIM, 2));
  if (a->lse) CHECK(check_array(fn, "lse", a->lse, rows, 4));
  int sms = 0;
  CHECK(need_device(fn, &sms));
  return cuda_status(fn, dsa_lse_combine_launch(a, stream));
}
