/*
 * host/api_cp.c — context parallelism's single-GPU pieces (dsa.h "Context parallelism"):
 * dsa_cp_candidates, dsa_topk_merge, dsa_cp_local_indices, dsa_lse_combine.
 */
#include "dsa.h"

#include "host/check.h"
#include "host/choose.h"
#include "kernels.h"

static dsa_status check_shard(const char *fn, const dsa_shard *s) {
  if (s->world_size < 1 || s->world_size > DSA_MAX_CP_RANKS)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: shard.world_size = %d (must be 1..%d)", fn, s->world_size,
                    DSA_MAX_CP_RANKS);
  if (s->rank < 0 || s->rank >= s->world_size)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: shard.rank = %d (must be 0..%d)", fn, s->rank, s->world_size - 1);
  if (s->layout != DSA_SHARD_ROUND_ROBIN && s->layout != DSA_SHARD_BLOCKS)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: shard.layout = %d (DSA_SHARD_ROUND_ROBIN or DSA_SHARD_BLOCKS)", fn,
                    (int)s->layout);
  if (s->layout == DSA_SHARD_BLOCKS && (s->block < 1 || s->block > DSA_MAX_ROW_LEN))
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: shard.block = %lld (must be 1..%d)", fn, (long long)s->block,
                    DSA_MAX_ROW_LEN);
  return DSA_OK;
}

dsa_status dsa_cp_candidates(const dsa_cp_candidates_args *a, cudaStream_t stream) {
  const char *fn = "dsa_cp_candidates";
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_shard(fn, &a->shard));
  CHECK(check_topk(fn, a->topk));
  if (a->num_rows < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_rows = %d < 0", fn, a->num_rows);
  if (a->max_len < 0 || a->max_len > DSA_MAX_ROW_LEN)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: max_len = %d (must be 0..%d)", fn, a->max_len, DSA_MAX_ROW_LEN);
  if (a->scores_stride < a->max_len)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: scores_stride = %lld < max_len = %d", fn, (long long)a->scores_stride,
                    a->max_len);
  /* global positions are int32: the largest local position must map below 2^31 (with row_offsets,
   * the kernel's int32 ids are the caller's bound: dsa.h) */
  const dsa_shard *s = &a->shard;
  if (a->max_len > 0 && !a->row_offsets) {
    const int64_t last = s->layout == DSA_SHARD_ROUND_ROBIN
                             ? (int64_t)(a->max_len - 1) * s->world_size + s->rank
                             : (int64_t)s->rank * s->block + a->max_len - 1;
    if (last > INT32_MAX)
      return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: local position %d maps to global position %lld (> 2^31 - 1)", fn,
                      a->max_len - 1, (long long)last);
    if (s->layout == DSA_SHARD_BLOCKS && a->max_len > s->block)
      return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: max_len = %d > shard.block = %lld (positions past a rank's block)", fn,
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
  CHECK(dsa_need_device(fn, &sms));
  return dsa_cuda_status(fn, dsa_cp_candidates_launch(a, stream));
}

dsa_status dsa_topk_merge(const dsa_topk_merge_args *a, cudaStream_t stream) {
  const char *fn = "dsa_topk_merge";
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_topk(fn, a->topk));
  if (a->num_lists < 1 || a->k_in < 1 || (int64_t)a->num_lists * a->k_in > DSA_MAX_MERGE_CANDIDATES)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_lists = %d, k_in = %d (both >= 1, product <= %d)", fn, a->num_lists,
                    a->k_in, DSA_MAX_MERGE_CANDIDATES);
  if (a->num_rows < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_rows = %d < 0", fn, a->num_rows);
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
  CHECK(dsa_need_device(fn, &sms));
  CHECK(dsa_choose_ready(fn));
  return dsa_cuda_status(fn, dsa_topk_merge_launch(a, dsa_choose_merge(a), stream));
}

dsa_status dsa_cp_local_indices(const dsa_cp_local_indices_args *a, cudaStream_t stream) {
  const char *fn = "dsa_cp_local_indices";
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_shard(fn, &a->shard));
  CHECK(check_topk(fn, a->topk));
  if (a->num_tokens < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->workspace_slots) {
    if (a->num_workspace_rows < 0 || a->num_workspace_rows > DSA_MAX_ROW_LEN)
      return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_workspace_rows = %lld (must be 0..%d)", fn,
                      (long long)a->num_workspace_rows, DSA_MAX_ROW_LEN);
  } else {
    if (a->q_len_per_req < 1 || a->q_len_per_req > DSA_MAX_Q_LEN_PER_REQ)
      return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: q_len_per_req = %d (must be 1..%d)", fn, a->q_len_per_req,
                      DSA_MAX_Q_LEN_PER_REQ);
    if (a->num_tokens % a->q_len_per_req)
      return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d is not a multiple of q_len_per_req = %d", fn,
                      a->num_tokens, a->q_len_per_req);
    if (a->page_size < 1 || a->num_pages < 0 || a->max_blocks_per_req < 1 ||
        a->block_table_stride < a->max_blocks_per_req)
      return dsa_fail(DSA_ERR_INVALID_VALUE,
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
  CHECK(dsa_need_device(fn, &sms));
  return dsa_cuda_status(fn, dsa_cp_local_indices_launch(a, stream));
}

dsa_status dsa_lse_combine(const dsa_lse_combine_args *a, cudaStream_t stream) {
  const char *fn = "dsa_lse_combine";
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_parts < 1 || a->num_parts > DSA_MAX_CP_RANKS)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_parts = %d (must be 1..%d)", fn, a->num_parts, DSA_MAX_CP_RANKS);
  if (a->num_heads < 1 || a->num_heads > DSA_MAX_ATTN_HEADS)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_heads = %d (must be 1..%d)", fn, a->num_heads, DSA_MAX_ATTN_HEADS);
  if (a->num_tokens < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->parts_dtype != DSA_DTYPE_BF16 && a->parts_dtype != DSA_DTYPE_F32)
    return dsa_fail(DSA_ERR_UNSUPPORTED, "%s: parts_dtype = %d (DSA_DTYPE_BF16 or DSA_DTYPE_F32)", fn,
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
  CHECK(dsa_need_device(fn, &sms));
  return dsa_cuda_status(fn, dsa_lse_combine_launch(a, stream));
}
