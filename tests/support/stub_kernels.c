/*
 * stub_kernels.c — see stub_kernels.h. No CUDA: implements the seam's launchers (src/kernels.h) and
 * the device facts (src/host/status.h) with precondition checks. Pointers are never dereferenced
 * (the tests pass fake ones).
 */
#include "stub_kernels.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "host/choose.h"
#include "host/status.h"
#include "kernels.h"

dsa_stub_state g_dsa_stub;

void dsa_stub_init(void) {
  memset(&g_dsa_stub, 0, sizeof g_dsa_stub);
  g_dsa_stub.num_sms = 132;
  g_dsa_stub.cc_major = 9;
}

void dsa_stub_begin_call(const void *ws, size_t ws_bytes) {
  dsa_stub_state *s = &g_dsa_stub;
  s->ws = ws;
  s->ws_bytes = ws_bytes;
  s->launches = 0;
  s->fused_launches = 0;
  s->budget_spent = 0;
  s->scores_next = s->topk_next = s->chunk_next = 0;
  s->scores_tokens = s->topk_tokens = s->store_tokens = s->mla_tokens = 0;
  s->mla_splits = 0;
  s->mla_ctas = 0;
  s->mla_need = 0;
  s->scores_kernel = s->topk_kernel = s->topk_cluster = 0; /* a test reads what this call launched */
  s->violations = 0;
  s->first_violation[0] = 0;
}

static int violated(const char *fmt, ...) {
  dsa_stub_state *s = &g_dsa_stub;
  if (s->violations++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->first_violation, sizeof s->first_violation, fmt, ap);
    va_end(ap);
  }
  return DSA_STUB_LAUNCH_FAILURE;
}

#define REQUIRE(cond, ...) do { if (!(cond)) return violated(__VA_ARGS__); } while (0)

static int misaligned(const void *p, uintptr_t a) { return ((uintptr_t)p % a) != 0; }

/* Counts a launch against the budget. */
static int count_launch(void) {
  dsa_stub_state *s = &g_dsa_stub;
  if (s->launch_budget > 0 && s->launches >= s->launch_budget) {
    s->budget_spent = 1;
    return DSA_STUB_LAUNCH_FAILURE;
  }
  s->launches++;
  return 0;
}

/* [p, p + bytes) lies in the call's workspace, when p points into it at all. */
static int in_workspace(const void *p) {
  const dsa_stub_state *s = &g_dsa_stub;
  return s->ws && (uintptr_t)p >= (uintptr_t)s->ws && (uintptr_t)p < (uintptr_t)s->ws + s->ws_bytes;
}
static int fits_workspace(const void *p, uint64_t bytes) {
  const dsa_stub_state *s = &g_dsa_stub;
  const uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)s->ws);
  return off <= s->ws_bytes && bytes <= s->ws_bytes - off;
}

/* ---- device ---- */

int dsa_device_query(dsa_device_info *info) {
  if (g_dsa_stub.device_error) return g_dsa_stub.device_error;
  info->ordinal = 0;
  info->num_sms = g_dsa_stub.num_sms;
  info->cc_major = g_dsa_stub.cc_major;
  info->cc_minor = g_dsa_stub.cc_minor;
  return 0;
}

void dsa_device_clusters(dsa_device_info *info) {
  info->cluster_ctas[0] = info->cluster_ctas[1] = g_dsa_stub.num_sms;
  for (int s = 2; s <= 8; s++)
    info->cluster_ctas[s] = g_dsa_stub.cluster_ctas[s] > 0 ? g_dsa_stub.cluster_ctas[s]
                            : s == 2                     ? g_dsa_stub.num_sms
                                                         : g_dsa_stub.num_sms / 2;
}

int dsa_cuda_error_is_no_device(int err) { return err == DSA_STUB_NO_DEVICE; }

const char *dsa_cuda_error_string(int err) {
  if (err == DSA_STUB_LAUNCH_FAILURE) return "stub launch failure (budget spent or precondition violated)";
  if (err == DSA_STUB_NO_DEVICE) return "stub: no CUDA device";
  return "stub: CUDA error";
}

/* ---- shared pieces ---- */

static int check_cache(const dsa_index_k_cache *c) {
  REQUIRE(c->page_size >= 4 && c->page_size <= 1024 && c->page_size % 4 == 0, "cache page_size %d", c->page_size);
  REQUIRE(c->num_pages >= 0 && c->num_pages * (int64_t)c->page_size <= INT32_MAX, "cache num_pages %lld",
          (long long)c->num_pages);
  REQUIRE(c->data && !misaligned(c->data, 16), "cache data %p", (const void *)c->data);
  return 0;
}

static int check_rows(const dsa_rows *r, int num_tokens) {
  REQUIRE(r->max_len >= 0 && r->max_len <= DSA_MAX_ROW_LEN, "rows.max_len %d", r->max_len);
  REQUIRE(r->token_begin >= 0 && (int64_t)r->token_begin + num_tokens <= INT32_MAX, "rows.token_begin %d + %d",
          r->token_begin, num_tokens);
  if (r->mode == DSA_ROWS_DECODE) {
    REQUIRE(r->q_len_per_req >= 1 && r->q_len_per_req <= DSA_MAX_Q_LEN_PER_REQ, "q_len_per_req %d", r->q_len_per_req);
    REQUIRE(r->token_begin % r->q_len_per_req == 0 && num_tokens % r->q_len_per_req == 0,
            "decode launch splits a request: begin %d, tokens %d, n %d", r->token_begin, num_tokens,
            r->q_len_per_req);
    REQUIRE(r->seq_lens && !misaligned(r->seq_lens, 4), "seq_lens %p", (const void *)r->seq_lens);
    REQUIRE(r->block_table && !misaligned(r->block_table, 4), "block_table %p", (const void *)r->block_table);
    REQUIRE(r->max_blocks >= 1 && r->block_table_stride >= r->max_blocks, "block table %d / %lld", r->max_blocks,
            (long long)r->block_table_stride);
    REQUIRE(r->page_size >= 4 && r->num_pages * (int64_t)r->page_size <= INT32_MAX, "rows cache capacity");
  } else if (r->mode == DSA_ROWS_PREFILL) {
    REQUIRE(r->num_ws_rows >= 0 && r->num_ws_rows <= DSA_MAX_ROW_LEN, "num_ws_rows %lld", (long long)r->num_ws_rows);
    REQUIRE(r->max_len <= r->num_ws_rows, "prefill max_len %d > rows %lld", r->max_len, (long long)r->num_ws_rows);
    REQUIRE(r->row_starts && !misaligned(r->row_starts, 4), "row_starts %p", (const void *)r->row_starts);
    REQUIRE(r->row_ends && !misaligned(r->row_ends, 4), "row_ends %p", (const void *)r->row_ends);
    REQUIRE(r->num_ws_rows == 0 || (r->ws_slots && !misaligned(r->ws_slots, 8)), "kv_workspace_slots %p",
            (const void *)r->ws_slots);
  } else {
    REQUIRE(!misaligned(r->row_lens, 4), "row_lens %p", (const void *)r->row_lens);
  }
  return 0;
}

/* ---- launchers ---- */

/* What a scoring launch relies on, its output aside (also the fused indexers' scoring). */
static int check_scoring(const dsa_scores_params *p) {
  dsa_stub_state *s = &g_dsa_stub;
  int e;
  REQUIRE(p->num_tokens >= 1 && p->num_tokens <= DSA_SCORE_TOKENS_PER_LAUNCH, "scores num_tokens %d", p->num_tokens);
  if ((e = check_rows(&p->rows, p->num_tokens))) return e;
  REQUIRE(p->rows.token_begin == s->scores_next, "scores launch begins at token %d, expected %lld",
          p->rows.token_begin, (long long)s->scores_next);
  REQUIRE(p->num_sms >= 1, "scores num_sms %d", p->num_sms);
  /* the choice table's scorer takes the shape (host/choose.c) */
  REQUIRE(p->kernel == DSA_SCORES_MMA || p->kernel == DSA_SCORES_WGMMA || p->kernel == DSA_SCORES_WGMMA_TMA,
          "scores kernel %d", (int)p->kernel);
  REQUIRE(p->kernel != DSA_SCORES_WGMMA_TMA || (p->q.q_dtype == DSA_DTYPE_FP8_E4M3 && p->rows.mode == DSA_ROWS_DECODE &&
                                               p->cache.page_size == 64),
          "wgmma_tma for q dtype %d, rows mode %d, page size %d", (int)p->q.q_dtype, (int)p->rows.mode,
          p->cache.page_size);
  REQUIRE(p->kernel != DSA_SCORES_WGMMA || p->q.q_dtype == DSA_DTYPE_FP8_E4M3 || p->rows.mode != DSA_ROWS_DECODE ||
              p->rows.q_len_per_req * (p->q.num_heads <= 32 ? 32 : 64) <= 256,
          "wgmma's f16 path with %d decode tokens x %d heads a group", p->rows.q_len_per_req, p->q.num_heads);
  s->scores_kernel = (int)p->kernel;
  const dsa_indexer_query *q = &p->q;
  REQUIRE(q->num_heads >= 1 && q->num_heads <= DSA_MAX_INDEX_HEADS && q->head_dim == DSA_INDEX_HEAD_DIM,
          "query heads %d dim %d", q->num_heads, q->head_dim);
  REQUIRE(q->q && !misaligned(q->q, q->q_dtype == DSA_DTYPE_BF16 ? 8 : 4), "query.q %p", q->q);
  REQUIRE(q->q_dtype == DSA_DTYPE_BF16 || (q->q_scale && !misaligned(q->q_scale, 4)), "query.q_scale %p",
          (const void *)q->q_scale);
  REQUIRE(q->weights && !misaligned(q->weights, q->weights_dtype == DSA_DTYPE_F32 ? 4 : 2), "query.weights %p",
          q->weights);
  REQUIRE(q->weights_stride >= q->num_heads, "weights_stride %lld", (long long)q->weights_stride);
  return check_cache(&p->cache);
}

/* ... and where its scores go. */
static int check_scores(const dsa_scores_params *p) {
  int e;
  if ((e = check_scoring(p))) return e;
  REQUIRE(p->scores && !misaligned(p->scores, 4), "scores %p", (void *)p->scores);
  REQUIRE(p->scores_stride >= p->rows.max_len, "scores_stride %lld < max_len %d", (long long)p->scores_stride,
          p->rows.max_len);
  if (in_workspace(p->scores)) {
    const uint64_t bytes = ((uint64_t)(p->num_tokens - 1) * (uint64_t)p->scores_stride + (uint64_t)p->rows.max_len) * 4;
    REQUIRE(fits_workspace(p->scores, bytes), "scores scratch (%llu bytes) runs past the workspace",
            (unsigned long long)bytes);
  }
  return 0;
}

int dsa_scores_launch(const dsa_scores_params *p, cudaStream_t stream) {
  (void)stream;
  dsa_stub_state *s = &g_dsa_stub;
  int e;
  if ((e = check_scores(p))) return e;
  if ((e = count_launch())) return e;
  s->scores_next += p->num_tokens;
  s->scores_tokens += p->num_tokens;
  return 0;
}

/* A fused indexer launch covers its tokens for both stages. */
static void count_fused(const dsa_scores_params *p) {
  dsa_stub_state *s = &g_dsa_stub;
  s->fused_launches++;
  s->scores_kernel = (int)p->kernel;
  s->scores_next += p->num_tokens;
  s->scores_tokens += p->num_tokens;
  s->topk_next += p->num_tokens;
  s->chunk_next = s->topk_next;
  s->topk_tokens += p->num_tokens;
}

/* The fused indexer: a decode scoring launch on a wgmma scorer whose top-k runs in the same kernel;
 * its control block in the workspace; it covers the launch's tokens for both stages. */
int dsa_indexer_fused_launch(const dsa_scores_params *p, const dsa_fused_topk *f, cudaStream_t stream) {
  (void)stream;
  dsa_stub_state *s = &g_dsa_stub;
  int e;
  if (s->fused_decline) return DSA_FUSED_DECLINED;
  REQUIRE(p->rows.mode == DSA_ROWS_DECODE, "fused indexer for rows mode %d", (int)p->rows.mode);
  REQUIRE(p->kernel == DSA_SCORES_WGMMA || p->kernel == DSA_SCORES_WGMMA_TMA, "fused indexer on scorer %d",
          (int)p->kernel);
  REQUIRE(f->topk >= 1 && f->topk <= DSA_MAX_TOPK && p->skip_len == f->topk && !p->fill_tail,
          "fused indexer topk %d, skip_len %d, fill_tail %d", f->topk, p->skip_len, p->fill_tail);
  REQUIRE(p->num_tokens <= DSA_TOPK_ROWS_PER_LAUNCH, "fused indexer tokens %d", p->num_tokens);
  REQUIRE(p->rows.token_begin == s->topk_next, "fused launch begins at row %d, expected %lld", p->rows.token_begin,
          (long long)s->topk_next);
  if ((e = check_scores(p))) return e;
  const size_t ctl = DSA_FUSED_CTL_BYTES(p->num_tokens, p->num_tokens / p->rows.q_len_per_req);
  REQUIRE(f->ctl && !misaligned(f->ctl, 256) && in_workspace(f->ctl) && fits_workspace(f->ctl, ctl),
          "fused control block (%zu bytes) outside the workspace", ctl);
  REQUIRE(f->out && !misaligned(f->out, 4), "fused out %p", (void *)f->out);
  REQUIRE(!misaligned(f->out_lens, 4), "fused out_lens %p", (void *)f->out_lens);
  if ((e = count_launch())) return e;
  count_fused(p);
  return 0;
}

/* The fused prefill indexer: a prefill scoring launch on the FP8 wgmma scorer whose top-k runs in the
 * same call; its state (the plan's layout for the launch's tokens, a chunk at most) in the workspace;
 * it covers the launch's tokens for both stages. */
int dsa_indexer_prefill_fused_launch(const dsa_scores_params *p, const dsa_prefill_select *sel, cudaStream_t stream) {
  (void)stream;
  dsa_stub_state *s = &g_dsa_stub;
  int e;
  REQUIRE(p->rows.mode == DSA_ROWS_PREFILL && p->kernel == DSA_SCORES_WGMMA && p->q.q_dtype == DSA_DTYPE_FP8_E4M3,
          "fused prefill indexer for rows mode %d, scorer %d, q dtype %d", (int)p->rows.mode, (int)p->kernel,
          (int)p->q.q_dtype);
  REQUIRE(sel->topk >= 1 && sel->topk <= DSA_MAX_TOPK && p->skip_len == sel->topk && !p->fill_tail &&
              p->rows.max_len > sel->topk,
          "fused prefill topk %d, skip_len %d, fill_tail %d, max_len %d", sel->topk, p->skip_len, p->fill_tail,
          p->rows.max_len);
  REQUIRE(p->num_tokens <= DSA_PREFILL_FUSED_MAX_CHUNK, "fused prefill tokens %d", p->num_tokens);
  REQUIRE(p->rows.token_begin == s->topk_next, "fused prefill launch begins at row %d, expected %lld",
          p->rows.token_begin, (long long)s->topk_next);
  if ((e = check_scoring(p))) return e;
  /* the plan's state for this launch's tokens */
  const int long_cap = dsa_prefill_cand_cap(sel->topk);
  REQUIRE(sel->cap % 64 == 0 && sel->cap >= (p->rows.max_len < long_cap ? p->rows.max_len : long_cap) &&
              sel->cap <= long_cap,
          "fused prefill cap %d (max_len %d, topk %d)", sel->cap, p->rows.max_len, sel->topk);
  REQUIRE((sel->sample != NULL) == (p->rows.max_len > sel->cap) &&
              (!sel->sample || sel->sample_len == dsa_prefill_sample_len(p->rows.max_len)),
          "fused prefill sample %p of %lld for max_len %d, cap %d", (void *)sel->sample, (long long)sel->sample_len,
          p->rows.max_len, sel->cap);
  const uint64_t n = (uint64_t)p->num_tokens;
  REQUIRE(sel->tau && !misaligned(sel->tau, 8) && in_workspace(sel->tau) && fits_workspace(sel->tau, n * 8),
          "fused prefill thresholds outside the workspace");
  REQUIRE(sel->count && !misaligned(sel->count, 4) && in_workspace(sel->count) && fits_workspace(sel->count, n * 4),
          "fused prefill counts outside the workspace");
  REQUIRE(sel->cand && !misaligned(sel->cand, 16) && in_workspace(sel->cand) &&
              fits_workspace(sel->cand, n * (uint64_t)sel->cap * 8),
          "fused prefill candidates outside the workspace");
  REQUIRE(!sel->sample || (!misaligned(sel->sample, 16) && in_workspace(sel->sample) &&
                           fits_workspace(sel->sample, n * (uint64_t)sel->sample_len * 4)),
          "fused prefill samples outside the workspace");
  REQUIRE((uintptr_t)sel->tau + n * 8 <= (uintptr_t)sel->count &&
              (uintptr_t)sel->count + n * 4 <= (uintptr_t)sel->cand &&
              (!sel->sample || (uintptr_t)sel->cand + n * (uint64_t)sel->cap * 8 <= (uintptr_t)sel->sample),
          "fused prefill state regions overlap");
  REQUIRE(sel->out && !misaligned(sel->out, 4), "fused prefill out %p", (void *)sel->out);
  REQUIRE(!misaligned(sel->out_lens, 4), "fused prefill out_lens %p", (void *)sel->out_lens);
  if ((e = count_launch())) return e;
  count_fused(p);
  return 0;
}

int dsa_topk_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream) {
  (void)stream;
  dsa_stub_state *s = &g_dsa_stub;
  int e;
  REQUIRE(p->num_tokens >= 1 && p->num_tokens <= DSA_TOPK_ROWS_PER_LAUNCH, "top-k rows %d", p->num_tokens);
  REQUIRE(p->topk >= 1 && p->topk <= DSA_MAX_TOPK, "top-k k %d", p->topk);
  if ((e = check_rows(&p->rows, p->num_tokens))) return e;
  REQUIRE(p->rows.token_begin == s->topk_next, "top-k launch begins at row %d, expected %lld", p->rows.token_begin,
          (long long)s->topk_next);
  const size_t need = dsa_topk_ws_layout(p->num_tokens).total;
  REQUIRE(workspace && !misaligned(workspace, 256), "top-k workspace %p", workspace);
  REQUIRE(in_workspace(workspace) && fits_workspace(workspace, need), "top-k scratch (%zu bytes) outside the workspace",
          need);
  if (p->rows.max_len > p->topk) { /* scores are read */
    REQUIRE(p->scores && !misaligned(p->scores, 4), "top-k scores %p", (const void *)p->scores);
    REQUIRE(p->scores_stride >= p->rows.max_len, "top-k scores_stride %lld", (long long)p->scores_stride);
    if (in_workspace(p->scores)) {
      const uint64_t bytes = ((uint64_t)(p->num_tokens - 1) * (uint64_t)p->scores_stride + (uint64_t)p->rows.max_len) * 4;
      REQUIRE(fits_workspace(p->scores, bytes), "top-k reads scores past the workspace");
      REQUIRE((uintptr_t)p->scores + bytes <= (uintptr_t)workspace || (uintptr_t)workspace + need <= (uintptr_t)p->scores,
              "top-k scratch overlaps the scores it reads");
    }
  }
  REQUIRE(p->out && !misaligned(p->out, 4), "top-k out %p", (void *)p->out);
  REQUIRE(!misaligned(p->out_lens, 4), "top-k out_lens %p", (void *)p->out_lens);
  /* the choice table's kernel takes the rows (host/choose.c) */
  REQUIRE(p->kernel == DSA_TOPK_REGISTERS || p->kernel == DSA_TOPK_SLICES || p->kernel == DSA_TOPK_CHAIN,
          "top-k kernel %d", (int)p->kernel);
  REQUIRE(p->kernel != DSA_TOPK_REGISTERS || p->rows.max_len <= DSA_TOPK_REGISTERS_MAX_LEN,
          "registers top-k with max_len %d", p->rows.max_len);
  REQUIRE(p->kernel != DSA_TOPK_SLICES ||
              (p->cluster == 1 && (p->rows.max_len <= DSA_TOPK_ONE_CTA_MAX_LEN || p->rows.max_len <= p->topk)) ||
              ((p->cluster == 2 || p->cluster == 4 || p->cluster == 8) &&
               (p->rows.max_len + p->cluster - 1) / p->cluster <= DSA_TOPK_SLICE_MAX),
          "slices top-k: %d CTAs a row of max_len %d", p->cluster, p->rows.max_len);
  if ((e = count_launch())) return e;
  s->topk_kernel = (int)p->kernel;
  s->topk_cluster = p->cluster;
  s->topk_next += p->num_tokens;
  s->chunk_next = s->topk_next;
  s->topk_tokens += p->num_tokens;
  return 0;
}

/* Deferred resolve: chunks of a group advance chunk_next over the group's rows, each reading its own
 * scores beside (not over) the group's top-k scratch; the final launch covers the group once all
 * its chunks ran. */
int dsa_topk_chunk_launch(const dsa_topk_params *p, void *workspace, int ws_rows, int row0, cudaStream_t stream) {
  (void)stream;
  dsa_stub_state *s = &g_dsa_stub;
  int e;
  REQUIRE(ws_rows >= 1 && ws_rows <= DSA_TOPK_ROWS_PER_LAUNCH, "deferred group rows %d", ws_rows);
  REQUIRE(p->num_tokens >= 1 && row0 >= 0 && row0 + p->num_tokens <= ws_rows, "deferred chunk rows %d at %d of %d",
          p->num_tokens, row0, ws_rows);
  REQUIRE(p->rows.max_len > DSA_TOPK_ONE_CTA_MAX_LEN, "deferred chunk with max_len %d", p->rows.max_len);
  REQUIRE(p->kernel == DSA_TOPK_CHAIN, "deferred chunk on top-k kernel %d", (int)p->kernel);
  REQUIRE(p->topk >= 1 && p->topk <= DSA_MAX_TOPK, "top-k k %d", p->topk);
  if ((e = check_rows(&p->rows, p->num_tokens))) return e;
  REQUIRE(p->rows.token_begin == s->chunk_next, "deferred chunk begins at row %d, expected %lld", p->rows.token_begin,
          (long long)s->chunk_next);
  REQUIRE(p->rows.token_begin - row0 == s->topk_next, "deferred chunk's group begins at %d, expected %lld",
          p->rows.token_begin - row0, (long long)s->topk_next);
  const size_t need = dsa_topk_ws_layout(ws_rows).total;
  REQUIRE(workspace && !misaligned(workspace, 256), "top-k workspace %p", workspace);
  REQUIRE(in_workspace(workspace) && fits_workspace(workspace, need), "group top-k scratch (%zu bytes) outside the workspace",
          need);
  REQUIRE(p->scores && !misaligned(p->scores, 4) && p->scores_stride >= p->rows.max_len, "deferred chunk scores %p",
          (const void *)p->scores);
  if (in_workspace(p->scores)) {
    const uint64_t bytes = ((uint64_t)(p->num_tokens - 1) * (uint64_t)p->scores_stride + (uint64_t)p->rows.max_len) * 4;
    REQUIRE(fits_workspace(p->scores, bytes), "deferred chunk reads scores past the workspace");
    REQUIRE((uintptr_t)p->scores + bytes <= (uintptr_t)workspace || (uintptr_t)workspace + need <= (uintptr_t)p->scores,
            "group top-k scratch overlaps the chunk's scores");
  }
  REQUIRE(p->out && !misaligned(p->out, 4), "top-k out %p", (void *)p->out);
  if ((e = count_launch())) return e;
  s->chunk_next += p->num_tokens;
  return 0;
}

int dsa_topk_final_launch(const dsa_topk_params *p, void *workspace, int ws_rows, cudaStream_t stream) {
  (void)stream;
  dsa_stub_state *s = &g_dsa_stub;
  int e;
  REQUIRE(p->num_tokens >= 1 && p->num_tokens <= ws_rows && ws_rows <= DSA_TOPK_ROWS_PER_LAUNCH,
          "deferred final rows %d of %d", p->num_tokens, ws_rows);
  if ((e = check_rows(&p->rows, p->num_tokens))) return e;
  REQUIRE(p->rows.token_begin == s->topk_next, "deferred final begins at row %d, expected %lld", p->rows.token_begin,
          (long long)s->topk_next);
  REQUIRE(s->chunk_next == s->topk_next + p->num_tokens, "deferred final before its chunks (chunks reached %lld)",
          (long long)s->chunk_next);
  REQUIRE(workspace && in_workspace(workspace) && fits_workspace(workspace, dsa_topk_ws_layout(ws_rows).total),
          "group top-k scratch outside the workspace");
  REQUIRE(p->out && !misaligned(p->out, 4), "top-k out %p", (void *)p->out);
  REQUIRE(!misaligned(p->out_lens, 4), "top-k out_lens %p", (void *)p->out_lens);
  if ((e = count_launch())) return e;
  s->topk_next += p->num_tokens;
  s->topk_tokens += p->num_tokens;
  return 0;
}

int dsa_attention_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl, void *workspace,
                         cudaStream_t stream) {
  (void)stream;
  dsa_stub_state *s = &g_dsa_stub;
  REQUIRE(a->num_tokens >= 1 && a->num_heads >= 1 && a->num_heads <= DSA_MAX_ATTN_HEADS, "mla sizes %d x %d",
          a->num_tokens, a->num_heads);
  REQUIRE(a->topk >= 1 && a->topk <= DSA_MAX_TOPK && a->indices_stride >= a->topk, "mla topk %d stride %lld", a->topk,
          (long long)a->indices_stride);
  REQUIRE(a->q && !misaligned(a->q, 16) && a->kv_cache && !misaligned(a->kv_cache, 16) && a->out &&
              !misaligned(a->out, 16),
          "mla q / kv / out alignment");
  REQUIRE(a->indices && !misaligned(a->indices, 4) && !misaligned(a->lens, 4) && !misaligned(a->lse, 4),
          "mla indices / lens / lse alignment");
  REQUIRE(a->kv_format == DSA_KV_FP8_PACKED || (a->kv_stride >= DSA_MLA_QK_DIM && a->kv_stride % 8 == 0),
          "mla kv_stride %lld", (long long)a->kv_stride);
  REQUIRE(pl->kernel == DSA_ATTN_MMA_SPLIT || pl->kernel == DSA_ATTN_ROWS_AS_M || pl->kernel == DSA_ATTN_HEADS_AS_M ||
              pl->kernel == DSA_ATTN_SEESAW || pl->kernel == DSA_ATTN_TOKEN_GROUPS,
          "mla plan kernel %d", pl->kernel);
  /* token groups: 64 / H tokens a group, H dividing 64 (8 to 32), unsplit; a launch's unions within
   * the workspace cap, and the call's groups in launches of tg_groups */
  REQUIRE(pl->kernel != DSA_ATTN_TOKEN_GROUPS ||
              ((a->num_heads == 8 || a->num_heads == 16 || a->num_heads == 32) && pl->token_group * a->num_heads == 64 &&
               pl->splits == 1 && pl->ctas == 0 && pl->tg_groups >= 1 &&
               pl->tg_groups <= ((int64_t)a->num_tokens + pl->token_group - 1) / pl->token_group &&
               dsa_tg_layout_of(a, pl->tg_groups).total <= DSA_TG_WORKSPACE_CAP),
          "mla token groups plan: %d heads, groups of %d, %lld a launch", a->num_heads, pl->token_group,
          (long long)pl->tg_groups);
  REQUIRE(pl->kernel == DSA_ATTN_HEADS_AS_M || pl->kernel == DSA_ATTN_SEESAW || pl->kernel == DSA_ATTN_TOKEN_GROUPS
              ? pl->mt == 4
              : pl->mt == 1 || pl->mt == 2 || (pl->mt == 4 && pl->kernel == DSA_ATTN_MMA_SPLIT),
          "mla plan mt %d", pl->mt);
  REQUIRE(pl->kernel == DSA_ATTN_MMA_SPLIT || (pl->splits >= 1 && pl->splits <= 8),
          "mla rows_as_m / heads_as_m cluster of %d", pl->splits);
  REQUIRE((int64_t)pl->groups * 16 * pl->mt >= a->num_heads, "mla plan covers %d heads of %d", pl->groups * 16 * pl->mt,
          a->num_heads);
  REQUIRE(pl->splits >= 1 && pl->splits <= pl->num_blocks && pl->blocks_per_split * pl->splits >= pl->num_blocks,
          "mla plan splits %d x %d blocks of %d", pl->splits, pl->blocks_per_split, pl->num_blocks);
  REQUIRE(!pl->convert_rows || ((pl->kernel == DSA_ATTN_SEESAW || pl->kernel == DSA_ATTN_HEADS_AS_M ||
                                  pl->kernel == DSA_ATTN_TOKEN_GROUPS) &&
                                 a->kv_format == DSA_KV_FP8_PACKED),
          "mla converted rows for kernel %d", pl->kernel);
  REQUIRE(pl->kernel != DSA_ATTN_SEESAW || (pl->convert_rows != 0) == (a->kv_format == DSA_KV_FP8_PACKED),
          "mla seesaw converts exactly the packed FP8 rows");
  REQUIRE(pl->convert_rows != 2 ||
              ((pl->kernel == DSA_ATTN_SEESAW || (pl->kernel == DSA_ATTN_TOKEN_GROUPS && pl->token_group)) &&
               a->num_slots <= DSA_SELECT_MAX_SLOTS && dsa_plan_attention_rows_bytes(a) > DSA_CONVERT_WORKSPACE_CAP),
          "mla rows selected only by the seesaw and token groups, over a cache too large to convert whole "
          "(%lld slots)", (long long)a->num_slots);
  const size_t need = dsa_plan_attention_workspace(a, pl);
  const int chosen = dsa_choose_attention(a, 1);
  const size_t bound = dsa_plan_attention_workspace_bound(a, chosen, dsa_choose_attention_convert(a, chosen)); /* the size query's */
  REQUIRE(need <= bound, "mla plan needs %zu > the queried bound %zu", need, bound);
  if (need > 0)
    REQUIRE(workspace && !misaligned(workspace, 256) && in_workspace(workspace) && fits_workspace(workspace, need),
            "mla workspace (%zu bytes) outside the caller's", need);
  int e;
  if ((e = count_launch())) return e;
  s->mla_tokens += a->num_tokens;
  s->mla_splits = pl->splits;
  s->mla_mt = pl->mt;
  s->mla_need = need;
  s->mla_kernel = pl->kernel;
  s->mla_ctas = pl->ctas;
  s->mla_convert = pl->convert_rows;
  return 0;
}

int dsa_index_k_store_launch(const dsa_index_k_store_args *a, cudaStream_t stream) {
  (void)stream;
  REQUIRE(a->num_tokens >= 1, "k store tokens %d", a->num_tokens);
  REQUIRE(a->k && !misaligned(a->k, 16) && a->k_stride >= DSA_INDEX_HEAD_DIM && a->k_stride % 8 == 0, "k store k");
  REQUIRE(a->slot_mapping && !misaligned(a->slot_mapping, 8), "k store slot_mapping");
  dsa_index_k_cache c = {a->cache, a->num_pages, a->page_size};
  int e;
  if ((e = check_cache(&c))) return e;
  if ((e = count_launch())) return e;
  g_dsa_stub.store_tokens += a->num_tokens;
  return 0;
}

int dsa_mla_kv_store_launch(const dsa_mla_kv_store_args *a, cudaStream_t stream) {
  (void)stream;
  REQUIRE(a->num_tokens >= 1, "kv store tokens %d", a->num_tokens);
  REQUIRE(a->kv && !misaligned(a->kv, 16) && a->kv_stride >= DSA_MLA_QK_DIM && a->kv_stride % 8 == 0, "kv store kv");
  REQUIRE(a->slot_mapping && !misaligned(a->slot_mapping, 8), "kv store slot_mapping");
  REQUIRE(a->cache && !misaligned(a->cache, 16) && a->num_slots >= 0, "kv store cache");
  REQUIRE(a->kv_format == DSA_KV_FP8_PACKED || (a->kv_format == DSA_KV_BF16 && a->cache_stride >= DSA_MLA_QK_DIM &&
                                                 a->cache_stride % 8 == 0),
          "kv store format %d stride %lld", (int)a->kv_format, (long long)a->cache_stride);
  int e;
  if ((e = count_launch())) return e;
  g_dsa_stub.store_tokens += a->num_tokens;
  return 0;
}

/* ---- cp/ ---- */
int dsa_cp_candidates_launch(const dsa_cp_candidates_args *a, cudaStream_t stream) {
  (void)stream;
  REQUIRE(a->num_rows >= 1 && a->topk >= 1 && a->topk <= DSA_MAX_TOPK, "cp candidates rows %d topk %d", a->num_rows,
          a->topk);
  REQUIRE(a->shard.world_size >= 1 && a->shard.world_size <= DSA_MAX_CP_RANKS && a->shard.rank >= 0 &&
              a->shard.rank < a->shard.world_size,
          "cp candidates shard %d of %d", a->shard.rank, a->shard.world_size);
  REQUIRE(a->local_indices && a->cand_scores && a->cand_ids && (a->max_len == 0 || a->scores),
          "cp candidates pointers");
  return count_launch();
}

int dsa_topk_merge_launch(const dsa_topk_merge_args *a, int kernel, cudaStream_t stream) {
  (void)stream;
  REQUIRE(kernel == DSA_MERGE_SELECT || kernel == DSA_MERGE_TREE ||
              (kernel == DSA_MERGE_RUNS && a->num_lists <= DSA_MERGE_RUNS_MAX_LISTS &&
               (int64_t)a->num_rows * ((a->num_lists * a->k_in + DSA_MERGE_RUNS_SLICE - 1) / DSA_MERGE_RUNS_SLICE) <=
                   0x7fffffff),
          "merge kernel %d for %d lists x %d rows", kernel, a->num_lists, a->num_rows);
  g_dsa_stub.merge_kernel = kernel;
  REQUIRE(a->num_rows >= 1 && a->num_lists >= 1 && a->k_in >= 1 &&
              (int64_t)a->num_lists * a->k_in <= DSA_MAX_MERGE_CANDIDATES,
          "merge rows %d lists %d k_in %d", a->num_rows, a->num_lists, a->k_in);
  REQUIRE(a->cand_scores && a->cand_ids && a->indices && a->topk >= 1 && a->topk <= DSA_MAX_TOPK, "merge pointers");
  return count_launch();
}

int dsa_cp_local_indices_launch(const dsa_cp_local_indices_args *a, cudaStream_t stream) {
  (void)stream;
  REQUIRE(a->num_tokens >= 1 && a->indices && a->out_slots, "cp local indices tokens %d", a->num_tokens);
  REQUIRE(a->workspace_slots || (a->block_table && a->q_len_per_req >= 1 && a->num_tokens % a->q_len_per_req == 0 &&
                                 a->page_size >= 1 && a->block_table_stride >= a->max_blocks_per_req),
          "cp local indices mapping");
  return count_launch();
}

int dsa_lse_combine_launch(const dsa_lse_combine_args *a, cudaStream_t stream) {
  (void)stream;
  REQUIRE(a->num_tokens >= 1 && a->num_parts >= 1 && a->num_parts <= DSA_MAX_CP_RANKS && a->num_heads >= 1,
          "lse combine tokens %d parts %d heads %d", a->num_tokens, a->num_parts, a->num_heads);
  REQUIRE(a->outs && !misaligned(a->outs, 16) && a->out && !misaligned(a->out, 16) && a->lses, "lse combine pointers");
  return count_launch();
}
