/*
 * host/api_indexer.c — the indexer calls (dsa.h "Indexer"): dsa_indexer_decode / _prefill (scores +
 * top-k), their *_scores (raw scores) and *_workspace_size. Each checks its arguments, plans
 * (host/plan.c), and runs its chunk loop: the scorer and the top-k kernel of each launch come from
 * the stages' choice tables (host/choose.c). A failed check launches nothing.
 */
#include "dsa.h"

#include <string.h>

#include "host/check.h"
#include "host/choose.h"
#include "kernels.h"

/* Decode: sizes and pointers; *max_len = the clamp on L. */
static dsa_status check_decode(const char *fn, const dsa_indexer_decode_args *a, int need_data,
                               int need_outputs, int *max_len) {
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_reqs < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_reqs = %d < 0", fn, a->num_reqs);
  if (a->q_len_per_req < 1 || a->q_len_per_req > DSA_MAX_Q_LEN_PER_REQ)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: q_len_per_req = %d (must be 1..%d)", fn, a->q_len_per_req,
                    DSA_MAX_Q_LEN_PER_REQ);
  if ((int64_t)a->num_reqs * a->q_len_per_req > INT32_MAX)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_reqs = %d x q_len_per_req = %d overflows int", fn, a->num_reqs,
                    a->q_len_per_req);
  const int64_t tokens = (int64_t)a->num_reqs * a->q_len_per_req;
  CHECK(check_query(fn, &a->query, need_data, tokens));
  CHECK(check_cache(fn, &a->cache, need_data && tokens > 0));
  CHECK(check_topk(fn, a->topk));
  if (a->max_blocks_per_req < 1)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: max_blocks_per_req = %d (must be >= 1)", fn, a->max_blocks_per_req);
  if (a->block_table_stride < a->max_blocks_per_req)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: block_table_stride = %lld < max_blocks_per_req = %d", fn,
                    (long long)a->block_table_stride, a->max_blocks_per_req);
  if (a->max_seq_len < 0 || a->max_seq_len > DSA_MAX_ROW_LEN)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: max_seq_len = %d (must be 0..DSA_MAX_ROW_LEN = %d)", fn,
                    a->max_seq_len, DSA_MAX_ROW_LEN);
  const int64_t cap = (int64_t)a->max_blocks_per_req * a->cache.page_size;
  const int64_t len = a->max_seq_len > 0 && a->max_seq_len < cap ? a->max_seq_len : cap;
  if (len > DSA_MAX_ROW_LEN)
    return dsa_fail(DSA_ERR_INVALID_VALUE,
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
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_tokens < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  CHECK(check_query(fn, &a->query, need_data, a->num_tokens));
  CHECK(check_cache(fn, &a->cache, need_data && a->num_tokens > 0));
  CHECK(check_topk(fn, a->topk));
  if (a->num_workspace_rows < 0 || a->num_workspace_rows > DSA_MAX_ROW_LEN)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_workspace_rows = %lld (must be 0..DSA_MAX_ROW_LEN = %d)", fn,
                    (long long)a->num_workspace_rows, DSA_MAX_ROW_LEN);
  if (a->max_rows < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: max_rows = %d < 0", fn, a->max_rows);
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
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: scores_stride = %lld < max length %d", fn, (long long)stride, max_len);
  if (tokens == 0) return DSA_OK;
  NEED_PTR(scores, "scores");
  NEED_ALIGNED(scores, 4, "scores");
  return check_extent(fn, "scores", scores, tokens, stride, max_len, 4);
}

/* ---------------------------------------------------------------------------------------------- */
/* Indexer: the chunk loops                                                                       */

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

/* Scoring of tokens [t0, t0 + n) of an indexer call into rows of `stride` floats from `scores`, its
 * kernel chosen (host/choose.c). skip_len: rows with L <= skip_len are not scored (-1: every row). */
static dsa_scores_params scores_params(const dsa_indexer_query *q, const dsa_index_k_cache *c, dsa_rows rows,
                                       int t0, int n, int sms, int skip_len, float *scores, int64_t stride) {
  dsa_scores_params sp;
  memset(&sp, 0, sizeof sp);
  sp.q = *q;
  sp.cache = *c;
  sp.rows = rows;
  sp.rows.token_begin = t0;
  sp.num_sms = sms;
  sp.num_tokens = n;
  sp.skip_len = skip_len;
  sp.scores = scores;
  sp.scores_stride = stride;
  dsa_choose_scores(&sp);
  return sp;
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
                              int32_t *lens, const dsa_indexer_plan *plan, void *ws, size_t ws_bytes,
                              cudaStream_t stream) {
  CHECK(check_workspace(fn, ws, ws_bytes, plan->total));
  CHECK(dsa_choose_ready(fn));
  int sms = 0;
  CHECK(dsa_need_device(fn, &sms));
  float *scores = (float *)ws;
  void *topk_ws = (char *)ws + plan->score_bytes;
  for (int64_t g0 = 0; g0 < num_tokens; g0 += plan->group) {
    const int gn = (int)(num_tokens - g0 < plan->group ? num_tokens - g0 : plan->group);
    for (int64_t t0 = g0; t0 < g0 + gn; t0 += plan->chunk) {
      const int n = (int)(g0 + gn - t0 < plan->chunk ? g0 + gn - t0 : plan->chunk);
      if (max_len > topk) {
        dsa_scores_params sp = scores_params(q, c, rows, (int)t0, n, sms, topk, scores, plan->stride);
        /* decode: scores and top-k in one kernel where it takes the launch (the scores region of
         * the workspace holds its control block instead), else the two kernels */
        const int groups = rows.mode == DSA_ROWS_DECODE ? n / rows.q_len_per_req : n;
        if (!plan->deferred && dsa_choose_indexer(&sp) == DSA_INDEXER_FUSED &&
            plan->score_bytes >= DSA_FUSED_CTL_BYTES(n, groups)) {
          dsa_fused_topk ft;
          ft.topk = topk;
          ft.out = out + (size_t)t0 * topk;
          ft.out_lens = lens ? lens + t0 : NULL;
          ft.ctl = scores;
          const int err = dsa_indexer_fused_launch(&sp, &ft, stream);
          if (err != DSA_FUSED_DECLINED) {
            CHECK(dsa_cuda_status(fn, err));
            continue;
          }
        }
        CHECK(dsa_cuda_status(fn, dsa_scores_launch(&sp, stream)));
      }
      dsa_topk_params tp = topk_rows(rows, (int)t0, n, topk, out, lens, sms);
      tp.scores = scores;
      tp.scores_stride = plan->stride;
      if (plan->deferred) { /* the chain's kernels, the group's resolve deferred */
        tp.kernel = DSA_TOPK_CHAIN;
        CHECK(dsa_cuda_status(fn, dsa_topk_chunk_launch(&tp, topk_ws, plan->group, (int)(t0 - g0), stream)));
      } else {
        dsa_choose_topk(&tp);
        CHECK(dsa_cuda_status(fn, dsa_topk_launch(&tp, topk_ws, stream)));
      }
    }
    if (plan->deferred) { /* the group's rows from their composites (no scores read) */
      dsa_topk_params tp = topk_rows(rows, (int)g0, gn, topk, out, lens, sms);
      tp.kernel = DSA_TOPK_CHAIN;
      CHECK(dsa_cuda_status(fn, dsa_topk_final_launch(&tp, topk_ws, plan->group, stream)));
    }
  }
  return DSA_OK;
}

/* Prefill on the fused indexer (indexer/prefill_select.cu) where the choice table takes it: a chunk
 * of plan->chunk tokens a launch, each launch's state in the workspace dsa_plan_prefill_fused lays
 * out (the same region every chunk: the launches of one stream follow each other). */
static int prefill_fused(const dsa_indexer_prefill_args *a, dsa_rows rows, int max_len) {
  if (a->num_tokens <= 0 || max_len <= a->topk) return 0;
  dsa_scores_params sp = scores_params(&a->query, &a->cache, rows, 0, a->num_tokens, 0, a->topk, NULL, 0);
  const size_t separate = dsa_plan_indexer(a->num_tokens, max_len, a->topk, 1, 0, 0).total;
  return dsa_choose_prefill_indexer(&sp, separate, a->workspace_limit) == DSA_INDEXER_FUSED;
}

static dsa_status run_prefill_fused(const char *fn, const dsa_indexer_prefill_args *a, dsa_rows rows,
                                    const dsa_prefill_fused_plan *plan, void *ws, size_t ws_bytes,
                                    cudaStream_t stream) {
  CHECK(check_workspace(fn, ws, ws_bytes, plan->total));
  int sms = 0;
  CHECK(dsa_need_device(fn, &sms));
  char *w = (char *)ws;
  for (int64_t t0 = 0; t0 < a->num_tokens; t0 += plan->chunk) {
    const int n = (int)(a->num_tokens - t0 < plan->chunk ? a->num_tokens - t0 : plan->chunk);
    dsa_scores_params sp = scores_params(&a->query, &a->cache, rows, (int)t0, n, sms, a->topk, NULL, 0);
    dsa_prefill_select sel;
    memset(&sel, 0, sizeof sel);
    sel.topk = a->topk;
    sel.out = a->topk_indices + (size_t)t0 * a->topk;
    sel.out_lens = a->topk_lens ? a->topk_lens + t0 : NULL;
    sel.tau = (unsigned long long *)(w + plan->tau_off);
    sel.count = (uint32_t *)(w + plan->count_off);
    sel.cand = (unsigned long long *)(w + plan->cand_off);
    sel.cap = plan->cap;
    sel.sample = plan->sample_len > 0 ? (float *)(w + plan->sample_off) : NULL;
    sel.sample_len = plan->sample_len;
    CHECK(dsa_cuda_status(fn, dsa_indexer_prefill_fused_launch(&sp, &sel, stream)));
  }
  return DSA_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Indexer: public entry points                                                                   */

dsa_status dsa_indexer_decode_workspace_size(const dsa_indexer_decode_args *a, size_t *bytes) {
  const char *fn = "dsa_indexer_decode_workspace_size";
  int max_len = 0;
  if (!bytes) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_decode(fn, a, 0, 0, &max_len));
  const int tokens = a->num_reqs * a->q_len_per_req;
  *bytes = tokens ? dsa_plan_indexer(tokens, max_len, a->topk, a->q_len_per_req, 1, a->workspace_limit).total : 0;
  return DSA_OK;
}

dsa_status dsa_indexer_decode(const dsa_indexer_decode_args *a, void *ws, size_t ws_bytes,
                              cudaStream_t stream) {
  const char *fn = "dsa_indexer_decode";
  int max_len = 0;
  CHECK(check_decode(fn, a, 1, 1, &max_len));
  const int tokens = a->num_reqs * a->q_len_per_req;
  if (tokens == 0) return DSA_OK;
  const dsa_indexer_plan plan = dsa_plan_indexer(tokens, max_len, a->topk, a->q_len_per_req, 1, a->workspace_limit);
  dsa_rows rows;
  rows_from_decode(&rows, a, max_len);
  return run_indexer(fn, &a->query, &a->cache, rows, tokens, a->topk, max_len, a->topk_indices,
                     a->topk_lens, &plan, ws, ws_bytes, stream);
}

dsa_status dsa_indexer_prefill_workspace_size(const dsa_indexer_prefill_args *a, size_t *bytes) {
  const char *fn = "dsa_indexer_prefill_workspace_size";
  int max_len = 0;
  if (!bytes) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
  CHECK(check_prefill(fn, a, 0, 0, &max_len));
  dsa_rows rows;
  rows_from_prefill(&rows, a, max_len);
  *bytes = !a->num_tokens ? 0
           : prefill_fused(a, rows, max_len)
               ? dsa_plan_prefill_fused(a->num_tokens, max_len, a->topk, a->workspace_limit).total
               : dsa_plan_indexer(a->num_tokens, max_len, a->topk, 1, 0, a->workspace_limit).total;
  return DSA_OK;
}

dsa_status dsa_indexer_prefill(const dsa_indexer_prefill_args *a, void *ws, size_t ws_bytes,
                               cudaStream_t stream) {
  const char *fn = "dsa_indexer_prefill";
  int max_len = 0;
  CHECK(check_prefill(fn, a, 1, 1, &max_len));
  if (a->num_tokens == 0) return DSA_OK;
  dsa_rows rows;
  rows_from_prefill(&rows, a, max_len);
  if (prefill_fused(a, rows, max_len)) {
    CHECK(dsa_choose_ready(fn));
    const dsa_prefill_fused_plan plan = dsa_plan_prefill_fused(a->num_tokens, max_len, a->topk, a->workspace_limit);
    return run_prefill_fused(fn, a, rows, &plan, ws, ws_bytes, stream);
  }
  const dsa_indexer_plan plan = dsa_plan_indexer(a->num_tokens, max_len, a->topk, 1, 0, a->workspace_limit);
  return run_indexer(fn, &a->query, &a->cache, rows, a->num_tokens, a->topk, max_len, a->topk_indices,
                     a->topk_lens, &plan, ws, ws_bytes, stream);
}

/* Scores alone into the caller's buffer, in launches of at most DSA_SCORE_TOKENS_PER_LAUNCH. */
static dsa_status run_scores(const char *fn, const dsa_indexer_query *q, const dsa_index_k_cache *c,
                             dsa_rows rows, int num_tokens, int multiple, int skip_len, float *scores,
                             int64_t stride, cudaStream_t stream) {
  CHECK(dsa_choose_ready(fn));
  int sms = 0;
  CHECK(dsa_need_device(fn, &sms));
  const int per = DSA_SCORE_TOKENS_PER_LAUNCH - DSA_SCORE_TOKENS_PER_LAUNCH % multiple;
  for (int64_t t0 = 0; t0 < num_tokens; t0 += per) {
    const int n = (int)(num_tokens - t0 < per ? num_tokens - t0 : per);
    dsa_scores_params sp = scores_params(q, c, rows, (int)t0, n, sms, skip_len, scores + t0 * stride, stride);
    sp.fill_tail = 1; /* DESIGN §3: columns past L hold -inf */
    CHECK(dsa_cuda_status(fn, dsa_scores_launch(&sp, stream)));
  }
  return DSA_OK;
}

dsa_status dsa_indexer_decode_scores(const dsa_indexer_decode_scores_args *a, cudaStream_t stream) {
  const char *fn = "dsa_indexer_decode_scores";
  int max_len = 0;
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
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
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  CHECK(check_prefill(fn, &a->prefill, 1, 0, &max_len));
  CHECK(check_scores_out(fn, a->scores, a->scores_stride, a->prefill.num_tokens, max_len));
  if (a->prefill.num_tokens == 0) return DSA_OK;
  dsa_rows rows;
  rows_from_prefill(&rows, &a->prefill, max_len);
  return run_scores(fn, &a->prefill.query, &a->prefill.cache, rows, a->prefill.num_tokens, 1,
                    a->skip_short_rows ? a->prefill.topk : -1, a->scores, a->scores_stride, stream);
}
