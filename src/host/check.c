/*
 * host/check.c — the argument checks several calls share (host/check.h): strided extents, the
 * workspace, the indexer's query and cache, top-k sizes and outputs. Each names the argument and its
 * value in the message it records (dsa_fail) and returns the status.
 */
#include "host/check.h"

#include <math.h>

#include "common/layout.h"

/* The caller's workspace against what this call needs: big enough, present, 256-byte aligned. */
dsa_status check_workspace(const char *fn, const void *ws, size_t ws_bytes, size_t need) {
  if (need > ws_bytes)
    return dsa_fail(DSA_ERR_WORKSPACE_TOO_SMALL, "%s: workspace_bytes = %zu < %zu needed", fn, ws_bytes, need);
  if (need > 0 && !ws) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: workspace is NULL", fn);
  if (need > 0 && misaligned(ws, 256))
    return dsa_fail(DSA_ERR_MISALIGNED, "%s: workspace = %p must be 256-byte aligned", fn, ws);
  return DSA_OK;
}

/* A strided view at p: `rows` rows of `row_len` elements of `elem` bytes, `stride` elements apart.
 * Its extent, ((rows - 1) * stride + row_len) * elem bytes, must fit int64 and must not wrap the
 * address space from p: otherwise the device's index arithmetic would overflow. */
dsa_status check_extent(const char *fn, const char *name, const void *p, int64_t rows, int64_t stride,
                               int64_t row_len, int64_t elem) {
  if (rows <= 0) return DSA_OK;
  if (row_len < 0) row_len = 0; /* nothing read, but row pointers are still formed: bound them too */
  if (stride < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: %s has a negative stride %lld", fn, name, (long long)stride);
  const int64_t max_elems = INT64_MAX / elem;
  if (row_len > max_elems || (rows > 1 && stride > (max_elems - row_len) / (rows - 1)))
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: %s spans %lld rows x stride %lld: more than 2^63 bytes", fn, name,
                    (long long)rows, (long long)stride);
  const uint64_t bytes = (uint64_t)((rows - 1) * stride + row_len) * (uint64_t)elem;
  if ((uintptr_t)p > UINTPTR_MAX - bytes)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: %s = %p plus its %llu bytes wraps the address space", fn, name, p,
                    (unsigned long long)bytes);
  return DSA_OK;
}

/* A dense array of n elements. */
dsa_status check_array(const char *fn, const char *name, const void *p, int64_t n, int64_t elem) {
  return check_extent(fn, name, p, 1, n, n, elem);
}

/* The query side for num_tokens tokens. */
dsa_status check_query(const char *fn, const dsa_indexer_query *q, int need_data, int64_t num_tokens) {
  if (q->head_dim != DSA_INDEX_HEAD_DIM)
    return dsa_fail(DSA_ERR_UNSUPPORTED, "%s: query.head_dim = %d (only %d is supported)", fn, q->head_dim,
                    DSA_INDEX_HEAD_DIM);
  if (q->num_heads < 1 || q->num_heads > DSA_MAX_INDEX_HEADS)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: query.num_heads = %d (must be 1..%d)", fn, q->num_heads,
                    DSA_MAX_INDEX_HEADS);
  if (q->q_dtype != DSA_DTYPE_BF16 && q->q_dtype != DSA_DTYPE_FP8_E4M3)
    return dsa_fail(DSA_ERR_UNSUPPORTED, "%s: query.q_dtype = %d (bf16 or fp8 e4m3)", fn, (int)q->q_dtype);
  if (q->weights_dtype != DSA_DTYPE_F32 && q->weights_dtype != DSA_DTYPE_BF16)
    return dsa_fail(DSA_ERR_UNSUPPORTED, "%s: query.weights_dtype = %d (float32 or bf16)", fn,
                    (int)q->weights_dtype);
  if (q->weights_stride < q->num_heads)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: query.weights_stride = %lld < num_heads = %d", fn,
                    (long long)q->weights_stride, q->num_heads);
  if (!isfinite(q->softmax_scale))
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: query.softmax_scale is not finite", fn);
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

dsa_status check_cache(const char *fn, const dsa_index_k_cache *c, int need_data) {
  if (c->page_size < 4 || c->page_size > 1024 || c->page_size % 4)
    return dsa_fail(DSA_ERR_UNSUPPORTED, "%s: cache.page_size = %d (must be a multiple of 4 in 4..1024)", fn,
                    c->page_size);
  if (c->num_pages < 0)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: cache.num_pages = %lld < 0", fn, (long long)c->num_pages);
  if (c->num_pages > INT32_MAX / c->page_size) /* divided, not multiplied: no overflow */
    return dsa_fail(DSA_ERR_INVALID_VALUE,
                    "%s: cache.num_pages = %lld x page_size %d exceeds 2^31-1 slots (slots are reported as int32)",
                    fn, (long long)c->num_pages, c->page_size);
  if (!need_data) return DSA_OK;
  NEED_PTR(c->data, "cache.data");
  NEED_ALIGNED(c->data, 16, "cache.data");
  return check_array(fn, "cache.data", c->data, c->num_pages * c->page_size, IDXK_SLOT_BYTES);
}

dsa_status check_topk(const char *fn, int topk) {
  if (topk < 1 || topk > DSA_MAX_TOPK)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: topk = %d (must be 1..%d)", fn, topk, DSA_MAX_TOPK);
  return DSA_OK;
}

/* Top-k outputs of num_tokens rows. */
dsa_status check_topk_outputs(const char *fn, int32_t *indices, const char *indices_name, int32_t *lens,
                                     const char *lens_name, int64_t num_tokens, int topk) {
  if (num_tokens == 0) return DSA_OK;
  NEED_PTR(indices, indices_name);
  NEED_ALIGNED(indices, 4, indices_name);
  NEED_ALIGNED(lens, 4, lens_name);
  CHECK(check_array(fn, indices_name, indices, num_tokens * topk, 4));
  if (lens) CHECK(check_array(fn, lens_name, lens, num_tokens, 4));
  return DSA_OK;
}
