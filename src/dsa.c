/*
 * dsa.c — the host API layer: validates every argument, sizes and carves workspaces, splits long
 * inputs into bounded chunks, and dispatches to the per-stage launchers of dsa_kernels.h.
 * Nothing here touches device memory or synchronises; a failed check launches nothing.
 */
#include "dsa.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dsa_kernels.h"

/* Score scratch per launch is capped at this many float32 elements (256 MiB); longer inputs run
 * as several chunks of tokens. Top-k scratch is per row (~140 KiB), so rows per launch are capped. */
#define DSA_SCORE_CAP_ELEMS ((int64_t)64 * 1024 * 1024)
#define DSA_TOPK_ROWS_PER_LAUNCH 256
#define DSA_SCORE_TOKENS_PER_LAUNCH 32760 /* grid.y bound, a multiple of 1..8 */

static _Thread_local char g_msg[512];

static dsa_status fail(dsa_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_msg, sizeof g_msg, fmt, ap);
  va_end(ap);
  return st;
}

static dsa_status ok(void) {
  g_msg[0] = 0;
  return DSA_OK;
}

const char *dsa_version(void) { return "0.1.0"; }

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

static dsa_status cuda_status(const char *fn, int err) {
  if (err == 0) return ok();
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || err == cudaErrorNoKernelImageForDevice)
    return fail(DSA_ERR_NO_DEVICE, "%s: no usable sm_90a device: CUDA error %d (%s)", fn, err,
                cudaGetErrorString((cudaError_t)err));
  return fail(DSA_ERR_CUDA, "%s: CUDA error %d (%s)", fn, err, cudaGetErrorString((cudaError_t)err));
}

/* The caller's workspace against what this call needs: big enough, present, 256-byte aligned. */
static dsa_status check_workspace(const char *fn, const void *ws, size_t ws_bytes, size_t need) {
  if (need > ws_bytes)
    return fail(DSA_ERR_WORKSPACE_TOO_SMALL, "%s: workspace_bytes = %zu < %zu needed", fn, ws_bytes, need);
  if (need > 0 && !ws) return fail(DSA_ERR_NULL_POINTER, "%s: workspace is NULL", fn);
  if (need > 0 && misaligned(ws, 256))
    return fail(DSA_ERR_MISALIGNED, "%s: workspace = %p must be 256-byte aligned", fn, ws);
  return ok();
}

/* ---------------------------------------------------------------------------------------------- */
/* Validation pieces                                                                              */

static dsa_status check_query(const char *fn, const dsa_indexer_query *q, int need_data) {
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
  if (!need_data) return ok();
  NEED_PTR(q->q, "query.q");
  NEED_PTR(q->weights, "query.weights");
  if (q->q_dtype == DSA_DTYPE_FP8_E4M3) NEED_PTR(q->q_scale, "query.q_scale (required for fp8 q)");
  if (misaligned(q->q, q->q_dtype == DSA_DTYPE_BF16 ? 8 : 4))
    return fail(DSA_ERR_MISALIGNED, "%s: query.q = %p must be %d-byte aligned", fn, q->q,
                q->q_dtype == DSA_DTYPE_BF16 ? 8 : 4);
  if (q->q_scale && misaligned(q->q_scale, 4))
    return fail(DSA_ERR_MISALIGNED, "%s: query.q_scale = %p must be 4-byte aligned", fn, (const void *)q->q_scale);
  if (misaligned(q->weights, q->weights_dtype == DSA_DTYPE_F32 ? 4 : 2))
    return fail(DSA_ERR_MISALIGNED, "%s: query.weights = %p is not aligned to its element size", fn,
                q->weights);
  return ok();
}

static dsa_status check_cache(const char *fn, const dsa_index_k_cache *c, int need_data) {
  if (c->page_size < 4 || c->page_size > 1024 || c->page_size % 4)
    return fail(DSA_ERR_UNSUPPORTED, "%s: cache.page_size = %d (must be a multiple of 4 in 4..1024)", fn,
                c->page_size);
  if (c->num_pages < 0)
    return fail(DSA_ERR_INVALID_VALUE, "%s: cache.num_pages = %lld < 0", fn, (long long)c->num_pages);
  if (c->num_pages * (int64_t)c->page_size > INT32_MAX)
    return fail(DSA_ERR_INVALID_VALUE, "%s: cache holds %lld slots (slots are reported as int32)", fn,
                (long long)(c->num_pages * (int64_t)c->page_size));
  if (!need_data) return ok();
  NEED_PTR(c->data, "cache.data");
  if (misaligned(c->data, 16))
    return fail(DSA_ERR_MISALIGNED, "%s: cache.data = %p must be 16-byte aligned", fn, (const void *)c->data);
  return ok();
}

static dsa_status check_topk(const char *fn, int topk) {
  if (topk < 1 || topk > DSA_MAX_TOPK)
    return fail(DSA_ERR_INVALID_VALUE, "%s: topk = %d (must be 1..%d)", fn, topk, DSA_MAX_TOPK);
  return ok();
}

/* Decode: sizes and pointers; max_len = the clamp on L. */
static dsa_status check_decode(const char *fn, const dsa_indexer_decode_args *a, int need_data,
                               int need_outputs, int *max_len) {
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_query(fn, &a->query, need_data));
  CHECK(check_cache(fn, &a->cache, need_data));
  CHECK(check_topk(fn, a->topk));
  if (a->num_reqs < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_reqs = %d < 0", fn, a->num_reqs);
  if (a->q_len_per_req < 1 || a->q_len_per_req > DSA_MAX_Q_LEN_PER_REQ)
    return fail(DSA_ERR_INVALID_VALUE, "%s: q_len_per_req = %d (must be 1..%d)", fn, a->q_len_per_req,
                DSA_MAX_Q_LEN_PER_REQ);
  if ((int64_t)a->num_reqs * a->q_len_per_req > INT32_MAX)
    return fail(DSA_ERR_INVALID_VALUE, "%s: num_reqs * q_len_per_req overflows int", fn);
  if (a->max_blocks_per_req < 1)
    return fail(DSA_ERR_INVALID_VALUE, "%s: max_blocks_per_req = %d (must be >= 1)", fn, a->max_blocks_per_req);
  if (a->block_table_stride < a->max_blocks_per_req)
    return fail(DSA_ERR_INVALID_VALUE, "%s: block_table_stride = %lld < max_blocks_per_req = %d", fn,
                (long long)a->block_table_stride, a->max_blocks_per_req);
  const int64_t cap = (int64_t)a->max_blocks_per_req * a->cache.page_size;
  if (cap > INT32_MAX)
    return fail(DSA_ERR_INVALID_VALUE, "%s: max_blocks_per_req * page_size = %lld exceeds int32", fn,
                (long long)cap);
  if (a->max_seq_len < 0)
    return fail(DSA_ERR_INVALID_VALUE, "%s: max_seq_len = %d < 0", fn, a->max_seq_len);
  *max_len = (int)((a->max_seq_len > 0 && a->max_seq_len < cap) ? a->max_seq_len : cap);
  if (need_data && a->num_reqs > 0) {
    NEED_PTR(a->seq_lens, "seq_lens");
    NEED_PTR(a->block_table, "block_table");
  }
  if (need_outputs && a->num_reqs > 0) NEED_PTR(a->topk_indices, "topk_indices");
  return ok();
}

static dsa_status check_prefill(const char *fn, const dsa_indexer_prefill_args *a, int need_data,
                                int need_outputs, int *max_len) {
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_query(fn, &a->query, need_data));
  CHECK(check_cache(fn, &a->cache, need_data));
  CHECK(check_topk(fn, a->topk));
  if (a->num_tokens < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->num_workspace_rows < 0 || a->num_workspace_rows > INT32_MAX)
    return fail(DSA_ERR_INVALID_VALUE, "%s: num_workspace_rows = %lld (must be 0..2^31-1)", fn,
                (long long)a->num_workspace_rows);
  if (a->max_rows < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: max_rows = %d < 0", fn, a->max_rows);
  *max_len = (int)((a->max_rows > 0 && a->max_rows < a->num_workspace_rows) ? a->max_rows
                                                                              : a->num_workspace_rows);
  if (need_data && a->num_tokens > 0) {
    NEED_PTR(a->row_starts, "row_starts");
    NEED_PTR(a->row_ends, "row_ends");
    if (a->num_workspace_rows > 0) NEED_PTR(a->kv_workspace_slots, "kv_workspace_slots");
  }
  if (need_outputs && a->num_tokens > 0) NEED_PTR(a->topk_indices, "topk_indices");
  return ok();
}

/* ---------------------------------------------------------------------------------------------- */
/* Indexer: chunk planning                                                                        */

typedef struct {
  int64_t stride;     /* score row stride (elements) */
  int chunk;          /* tokens per launch */
  size_t score_bytes; /* scratch for one chunk's scores (0 when nothing is scored) */
  size_t total;       /* workspace bytes */
} indexer_plan;

static indexer_plan plan_indexer(int num_tokens, int max_len, int topk, int multiple) {
  indexer_plan p;
  p.stride = ((int64_t)max_len + 3) & ~(int64_t)3;
  if (p.stride < 4) p.stride = 4;
  int64_t chunk = DSA_SCORE_CAP_ELEMS / p.stride;
  if (chunk > DSA_TOPK_ROWS_PER_LAUNCH) chunk = DSA_TOPK_ROWS_PER_LAUNCH;
  if (chunk > num_tokens) chunk = num_tokens;
  chunk -= chunk % multiple;
  if (chunk < multiple) chunk = multiple;
  p.chunk = (int)chunk;
  p.score_bytes = max_len > topk ? round256((size_t)p.stride * (size_t)chunk * 4) : 0;
  p.total = p.score_bytes + dsa_topk_workspace_impl(p.chunk, topk);
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

/* Scores + top-k over num_tokens tokens in chunks of plan.chunk. */
static dsa_status run_indexer(const char *fn, const dsa_indexer_query *q, const dsa_index_k_cache *c,
                              dsa_rows rows, int num_tokens, int topk, int max_len, int32_t *out,
                              int32_t *lens, const indexer_plan *plan, void *ws, size_t ws_bytes,
                              cudaStream_t stream) {
  CHECK(check_workspace(fn, ws, ws_bytes, plan->total));
  float *scores = (float *)ws;
  void *topk_ws = (char *)ws + plan->score_bytes;
  for (int t0 = 0; t0 < num_tokens; t0 += plan->chunk) {
    const int n = num_tokens - t0 < plan->chunk ? num_tokens - t0 : plan->chunk;
    rows.token_begin = t0;
    if (max_len > topk) {
      dsa_scores_params sp;
      memset(&sp, 0, sizeof sp);
      sp.q = *q;
      sp.cache = *c;
      sp.rows = rows;
      sp.num_tokens = n;
      sp.skip_len = topk;
      sp.scores = scores;
      sp.scores_stride = plan->stride;
      int err = dsa_indexer_scores_launch(&sp, stream);
      if (err) return cuda_status(fn, err);
    }
    dsa_topk_params tp;
    memset(&tp, 0, sizeof tp);
    tp.scores = scores;
    tp.scores_stride = plan->stride;
    tp.rows = rows;
    tp.num_tokens = n;
    tp.topk = topk;
    tp.out = out + (size_t)t0 * topk;
    tp.out_lens = lens ? lens + t0 : NULL;
    int err = dsa_topk_launch(&tp, topk_ws, stream);
    if (err) return cuda_status(fn, err);
  }
  return ok();
}

/* ---------------------------------------------------------------------------------------------- */
/* Indexer: public entry points                                                                   */

dsa_status dsa_indexer_decode_workspace_size(const dsa_indexer_decode_args *a, size_t *bytes) {
  const char *fn = "dsa_indexer_decode_workspace_size";
  int max_len = 0;
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_decode(fn, a, 0, 0, &max_len));
  const int tokens = a->num_reqs * a->q_len_per_req;
  *bytes = tokens ? plan_indexer(tokens, max_len, a->topk, a->q_len_per_req).total : 0;
  return ok();
}

dsa_status dsa_indexer_decode(const dsa_indexer_decode_args *a, void *ws, size_t ws_bytes,
                              cudaStream_t stream) {
  const char *fn = "dsa_indexer_decode";
  int max_len = 0;
  CHECK(check_decode(fn, a, 1, 1, &max_len));
  const int tokens = a->num_reqs * a->q_len_per_req;
  if (tokens == 0) return ok();
  const indexer_plan plan = plan_indexer(tokens, max_len, a->topk, a->q_len_per_req);
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
  *bytes = a->num_tokens ? plan_indexer(a->num_tokens, max_len, a->topk, 1).total : 0;
  return ok();
}

dsa_status dsa_indexer_prefill(const dsa_indexer_prefill_args *a, void *ws, size_t ws_bytes,
                               cudaStream_t stream) {
  const char *fn = "dsa_indexer_prefill";
  int max_len = 0;
  CHECK(check_prefill(fn, a, 1, 1, &max_len));
  if (a->num_tokens == 0) return ok();
  const indexer_plan plan = plan_indexer(a->num_tokens, max_len, a->topk, 1);
  dsa_rows rows;
  rows_from_prefill(&rows, a, max_len);
  return run_indexer(fn, &a->query, &a->cache, rows, a->num_tokens, a->topk, max_len, a->topk_indices,
                     a->topk_lens, &plan, ws, ws_bytes, stream);
}

/* Scores alone into the caller's buffer, in launches of at most DSA_SCORE_TOKENS_PER_LAUNCH. */
static dsa_status run_scores(const char *fn, const dsa_indexer_query *q, const dsa_index_k_cache *c,
                             dsa_rows rows, int num_tokens, int multiple, int skip_len, float *scores,
                             int64_t stride, cudaStream_t stream) {
  const int per = DSA_SCORE_TOKENS_PER_LAUNCH - DSA_SCORE_TOKENS_PER_LAUNCH % multiple;
  for (int t0 = 0; t0 < num_tokens; t0 += per) {
    dsa_scores_params sp;
    memset(&sp, 0, sizeof sp);
    sp.q = *q;
    sp.cache = *c;
    sp.rows = rows;
    sp.rows.token_begin = t0;
    sp.num_tokens = num_tokens - t0 < per ? num_tokens - t0 : per;
    sp.skip_len = skip_len;
    sp.scores = scores + (size_t)t0 * stride;
    sp.scores_stride = stride;
    int err = dsa_indexer_scores_launch(&sp, stream);
    if (err) return cuda_status(fn, err);
  }
  return ok();
}

dsa_status dsa_indexer_decode_scores(const dsa_indexer_decode_scores_args *a, cudaStream_t stream) {
  const char *fn = "dsa_indexer_decode_scores";
  int max_len = 0;
  if (!a) return fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_decode(fn, &a->decode, 1, 0, &max_len));
  const int tokens = a->decode.num_reqs * a->decode.q_len_per_req;
  if (tokens == 0) return ok();
  NEED_PTR(a->scores, "scores");
  if (a->scores_stride < max_len)
    return fail(DSA_ERR_INVALID_VALUE, "%s: scores_stride = %lld < max length %d", fn,
                (long long)a->scores_stride, max_len);
  if (misaligned(a->scores, 4)) return fail(DSA_ERR_MISALIGNED, "%s: scores must be 4-byte aligned", fn);
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
  if (a->prefill.num_tokens == 0) return ok();
  NEED_PTR(a->scores, "scores");
  if (a->scores_stride < max_len)
    return fail(DSA_ERR_INVALID_VALUE, "%s: scores_stride = %lld < max length %d", fn,
                (long long)a->scores_stride, max_len);
  if (misaligned(a->scores, 4)) return fail(DSA_ERR_MISALIGNED, "%s: scores must be 4-byte aligned", fn);
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
  if (a->max_len < 0) return fail(DSA_ERR_INVALID_VALUE, "%s: max_len = %d < 0", fn, a->max_len);
  if (a->scores_stride < a->max_len)
    return fail(DSA_ERR_INVALID_VALUE, "%s: scores_stride = %lld < max_len = %d", fn,
                (long long)a->scores_stride, a->max_len);
  if (need_data && a->num_rows > 0) {
    if (a->max_len > 0) NEED_PTR(a->scores, "scores");
    NEED_PTR(a->indices, "indices");
    if (a->scores && misaligned(a->scores, 4))
      return fail(DSA_ERR_MISALIGNED, "%s: scores must be 4-byte aligned", fn);
  }
  return ok();
}

static int plain_rows_per_launch(const dsa_topk_args *a) {
  return a->num_rows < DSA_TOPK_ROWS_PER_LAUNCH ? a->num_rows : DSA_TOPK_ROWS_PER_LAUNCH;
}

dsa_status dsa_topk_workspace_size(const dsa_topk_args *a, size_t *bytes) {
  const char *fn = "dsa_topk_workspace_size";
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_plain_topk(fn, a, 0));
  *bytes = dsa_topk_workspace_impl(plain_rows_per_launch(a), a->topk);
  return ok();
}

dsa_status dsa_topk(const dsa_topk_args *a, void *ws, size_t ws_bytes, cudaStream_t stream) {
  const char *fn = "dsa_topk";
  CHECK(check_plain_topk(fn, a, 1));
  if (a->num_rows == 0) return ok();
  const int per = plain_rows_per_launch(a);
  CHECK(check_workspace(fn, ws, ws_bytes, dsa_topk_workspace_impl(per, a->topk)));
  for (int r0 = 0; r0 < a->num_rows; r0 += per) {
    dsa_topk_params tp;
    memset(&tp, 0, sizeof tp);
    tp.rows.mode = DSA_ROWS_PLAIN;
    tp.rows.max_len = a->max_len;
    tp.rows.row_lens = a->row_lens;
    tp.rows.token_begin = r0;
    tp.scores = a->scores + (size_t)r0 * a->scores_stride;
    tp.scores_stride = a->scores_stride;
    tp.num_tokens = a->num_rows - r0 < per ? a->num_rows - r0 : per;
    tp.topk = a->topk;
    tp.out = a->indices + (size_t)r0 * a->topk;
    tp.out_lens = a->lens ? a->lens + r0 : NULL;
    int err = dsa_topk_launch(&tp, ws, stream);
    if (err) return cuda_status(fn, err);
  }
  return ok();
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
  if (!need_data || a->num_tokens == 0) return ok();
  NEED_PTR(a->q, "q");
  NEED_PTR(a->kv_cache, "kv_cache");
  NEED_PTR(a->indices, "indices");
  NEED_PTR(a->out, "out");
  if (misaligned(a->q, 16)) return fail(DSA_ERR_MISALIGNED, "%s: q = %p must be 16-byte aligned", fn, a->q);
  if (misaligned(a->kv_cache, 16))
    return fail(DSA_ERR_MISALIGNED, "%s: kv_cache = %p must be 16-byte aligned", fn, a->kv_cache);
  if (misaligned(a->out, 16)) return fail(DSA_ERR_MISALIGNED, "%s: out = %p must be 16-byte aligned", fn, a->out);
  if (misaligned(a->indices, 4)) return fail(DSA_ERR_MISALIGNED, "%s: indices must be 4-byte aligned", fn);
  return ok();
}

dsa_status dsa_sparse_mla_workspace_size(const dsa_sparse_mla_args *a, size_t *bytes) {
  const char *fn = "dsa_sparse_mla_workspace_size";
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_mla(fn, a, 0));
  *bytes = a->num_tokens ? dsa_sparse_mla_workspace_impl(a) : 0;
  return ok();
}

dsa_status dsa_sparse_mla(const dsa_sparse_mla_args *a, void *ws, size_t ws_bytes, cudaStream_t stream) {
  const char *fn = "dsa_sparse_mla";
  CHECK(check_mla(fn, a, 1));
  if (a->num_tokens == 0) return ok();
  CHECK(check_workspace(fn, ws, ws_bytes, dsa_sparse_mla_workspace_impl(a)));
  return cuda_status(fn, dsa_sparse_mla_launch(a, ws, stream));
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
  if (a->num_tokens == 0) return ok();
  NEED_PTR(a->k, "k");
  NEED_PTR(a->slot_mapping, "slot_mapping");
  if (misaligned(a->k, 16) || a->k_stride % 8)
    return fail(DSA_ERR_MISALIGNED, "%s: k = %p and k_stride = %lld must give 16-byte aligned rows", fn, a->k,
                (long long)a->k_stride);
  if (misaligned(a->slot_mapping, 8)) return fail(DSA_ERR_MISALIGNED, "%s: slot_mapping must be 8-byte aligned", fn);
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
  if (a->num_tokens == 0) return ok();
  NEED_PTR(a->kv, "kv");
  NEED_PTR(a->slot_mapping, "slot_mapping");
  NEED_PTR(a->cache, "cache");
  if (misaligned(a->kv, 16) || a->kv_stride % 8)
    return fail(DSA_ERR_MISALIGNED, "%s: kv = %p and kv_stride = %lld must give 16-byte aligned rows", fn, a->kv,
                (long long)a->kv_stride);
  if (misaligned(a->cache, 16)) return fail(DSA_ERR_MISALIGNED, "%s: cache must be 16-byte aligned", fn);
  if (misaligned(a->slot_mapping, 8)) return fail(DSA_ERR_MISALIGNED, "%s: slot_mapping must be 8-byte aligned", fn);
  return cuda_status(fn, dsa_mla_kv_store_launch(a, stream));
}
