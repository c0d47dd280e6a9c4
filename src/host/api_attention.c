/*
 * host/api_attention.c — dsa_sparse_mla and its workspace size: checks, the kernel from the attention
 * choice table (host/choose.c), its plan (host/plan.c), one dispatch (attention/dispatch.cu).
 */
#include "dsa.h"

#include <math.h>

#include "host/check.h"
#include "host/choose.h"
#include "host/plan.h"
#include "kernels.h"

static dsa_status check_mla(const char *fn, const dsa_sparse_mla_args *a, int need_data) {
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_tokens < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->num_heads < 1 || a->num_heads > DSA_MAX_ATTN_HEADS)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_heads = %d (must be 1..%d)", fn, a->num_heads,
                    DSA_MAX_ATTN_HEADS);
  CHECK(check_topk(fn, a->topk));
  if (a->indices_stride < a->topk)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: indices_stride = %lld < topk = %d", fn,
                    (long long)a->indices_stride, a->topk);
  if (a->kv_format != DSA_KV_BF16 && a->kv_format != DSA_KV_FP8_PACKED)
    return dsa_fail(DSA_ERR_UNSUPPORTED, "%s: kv_format = %d (bf16 or packed fp8)", fn, (int)a->kv_format);
  if (a->num_slots < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_slots = %lld < 0", fn, (long long)a->num_slots);
  if (a->kv_format == DSA_KV_BF16 && (a->kv_stride < DSA_MLA_QK_DIM || a->kv_stride % 8))
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: kv_stride = %lld (bf16 rows need >= 576, a multiple of 8)", fn,
                    (long long)a->kv_stride);
  if (!isfinite(a->softmax_scale)) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: softmax_scale is not finite", fn);
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

dsa_status dsa_sparse_mla_workspace_size(const dsa_sparse_mla_args *a, size_t *bytes) {
  const char *fn = "dsa_sparse_mla_workspace_size";
  if (!bytes) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_mla(fn, a, 0));
  const int kernel = dsa_choose_attention(a, 1);
  *bytes = dsa_plan_attention_workspace_bound(a, kernel, dsa_choose_attention_convert(a, kernel));
  return DSA_OK;
}

/* The kernel and whether packed FP8 rows are converted first, for a workspace of ws_bytes: the table's
 * choice with the most workspace (what the size query reports), else without the conversion, else without
 * token groups or the seesaw (which over packed FP8 must convert) — heads_as_m with, then without, a
 * conversion — each needing less; *need: the choice's bound. */
static int mla_choose_fitting(const dsa_sparse_mla_args *a, size_t ws_bytes, int *convert, size_t *need) {
  int kernel = dsa_choose_attention(a, 1);
  for (int pass = 0; pass < 2; ++pass) {
    *convert = dsa_choose_attention_convert(a, kernel);
    *need = dsa_plan_attention_workspace_bound(a, kernel, *convert);
    if (ws_bytes < *need && *convert && kernel != DSA_ATTN_SEESAW) {
      *convert = 0;
      *need = dsa_plan_attention_workspace_bound(a, kernel, 0);
    }
    if (ws_bytes >= *need || (kernel != DSA_ATTN_TOKEN_GROUPS && kernel != DSA_ATTN_SEESAW)) break;
    kernel = dsa_choose_attention(a, 0); /* the same when DSA_KERNEL forces them */
  }
  return kernel;
}

dsa_status dsa_sparse_mla(const dsa_sparse_mla_args *a, void *ws, size_t ws_bytes, cudaStream_t stream) {
  const char *fn = "dsa_sparse_mla";
  CHECK(check_mla(fn, a, 1));
  if (a->num_tokens == 0) return DSA_OK;
  /* Checked against the size the query reports (every device's plan fits it); packed FP8 rows converted
   * first, then token groups, where the workspace cannot hold the rows or the unions, give way to the
   * choice without them (which needs none at their sizes). */
  int convert;
  size_t need;
  const int kernel = mla_choose_fitting(a, ws_bytes, &convert, &need);
  CHECK(check_workspace(fn, ws, ws_bytes, need));
  CHECK(dsa_choose_ready(fn));
  dsa_device_info dev;
  CHECK(dsa_need_device_info(fn, &dev));
  const dsa_attention_plan plan = dsa_plan_attention(a, &dev, kernel, convert);
  return dsa_cuda_status(fn, dsa_attention_launch(a, &plan, ws, stream));
}
