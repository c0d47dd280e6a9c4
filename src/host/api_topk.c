/*
 * host/api_topk.c — the plain top-k call (dsa.h "Top-k"): dsa_topk over float rows, in launches of
 * at most DSA_TOPK_ROWS_PER_LAUNCH rows, each on the kernel the top-k choice table picks.
 */
#include "dsa.h"

#include <string.h>

#include "host/check.h"
#include "host/choose.h"
#include "kernels.h"

static dsa_status check_plain_topk(const char *fn, const dsa_topk_args *a, int need_data) {
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_topk(fn, a->topk));
  if (a->num_rows < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_rows = %d < 0", fn, a->num_rows);
  if (a->max_len < 0 || a->max_len > DSA_MAX_ROW_LEN)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: max_len = %d (must be 0..DSA_MAX_ROW_LEN = %d)", fn, a->max_len,
                    DSA_MAX_ROW_LEN);
  if (a->scores_stride < a->max_len)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: scores_stride = %lld < max_len = %d", fn,
                    (long long)a->scores_stride, a->max_len);
  if (!need_data || a->num_rows == 0) return DSA_OK;
  if (a->max_len > 0) NEED_PTR(a->scores, "scores");
  NEED_ALIGNED(a->scores, 4, "scores");
  NEED_ALIGNED(a->row_lens, 4, "row_lens");
  CHECK(check_extent(fn, "scores", a->scores, a->num_rows, a->scores_stride, a->max_len, 4));
  if (a->row_lens) CHECK(check_array(fn, "row_lens", a->row_lens, a->num_rows, 4));
  return check_topk_outputs(fn, a->indices, "indices", a->lens, "lens", a->num_rows, a->topk);
}

dsa_status dsa_topk_workspace_size(const dsa_topk_args *a, size_t *bytes) {
  const char *fn = "dsa_topk_workspace_size";
  if (!bytes) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_plain_topk(fn, a, 0));
  *bytes = dsa_topk_ws_layout(dsa_plan_topk_rows(a->num_rows)).total;
  return DSA_OK;
}

dsa_status dsa_topk(const dsa_topk_args *a, void *ws, size_t ws_bytes, cudaStream_t stream) {
  const char *fn = "dsa_topk";
  CHECK(check_plain_topk(fn, a, 1));
  if (a->num_rows == 0) return DSA_OK;
  const int per = dsa_plan_topk_rows(a->num_rows);
  CHECK(check_workspace(fn, ws, ws_bytes, dsa_topk_ws_layout(per).total));
  CHECK(dsa_choose_ready(fn));
  int sms = 0;
  CHECK(dsa_need_device(fn, &sms));
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
    dsa_choose_topk(&tp);
    CHECK(dsa_cuda_status(fn, dsa_topk_launch(&tp, ws, stream)));
  }
  return DSA_OK;
}
