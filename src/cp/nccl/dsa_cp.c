/*
 * cp/nccl/dsa_cp.c — dsa_cp.h: one decode or prefill step over a context-parallel group. Library
 * calls for every computation (dsa.h), NCCL for the two exchanges, local_rows.cu for each token's
 * local rows. Failures report through the library's error state (dsa_last_error), as every dsa call.
 * Workspace, in order (each part 256-byte aligned):
 *   stage 1 (decode): local lens [T] | request lens [R] | scores [T, stride]
 *   stage 1 (prefill): local starts, ends, lens [T] each | scores [chunk, stride]
 *   | top-k scratch | local top-k [T or chunk, k] | candidates: scores [W, T, k] f32, ids [W, T, k] |
 *   merged [T, k] (when topk_positions is NULL) | lens [T] (when topk_lens is NULL) | own slots [T, k],
 *   their count [T] |
 *   attention scratch | partial out [W, T, H, 512] bf16 | partial lse [W, T, H] f32
 */
#include "dsa_cp.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/shard.h"
#include "cp/nccl/local_rows.h"
#include "host/status.h"

/* From this many tokens on, each rank's share of the selection is compacted before attention. */
#define CP_COMPACT_MIN_TOKENS 64
/* Prefill scores of one chunk stay within this (stage 1 runs chunk after chunk). */
#define CP_SCORE_BYTES ((size_t)256 << 20)

/* The failure's message for dsa_last_error() (formatted here first: a library call's message, an
 * argument of fmt, lives where dsa_fail writes). */
static dsa_status fail(dsa_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dsa_status fail(dsa_status st, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dsa_fail(st, "dsa_cp: %s", msg);
}

/* a library call's failure: its message, then the status */
#define LIB(call)                                                           \
  do {                                                                      \
    dsa_status st_ = (call);                                                \
    if (st_ != DSA_OK) return fail(st_, "%s: %s", #call, dsa_last_error()); \
  } while (0)
#define NCCL(call)                                                                             \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    if (r_ != ncclSuccess) return fail(DSA_ERR_CUDA, "%s: %s", #call, ncclGetErrorString(r_)); \
  } while (0)
#define OK(call)                        \
  do {                                  \
    dsa_status s_ = (call);             \
    if (s_ != DSA_OK) return s_;        \
  } while (0)

static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

static void *carve(unsigned char *base, size_t *off, size_t bytes) {
  void *p = base ? base + *off : NULL;
  *off += round256(bytes);
  return p;
}

static dsa_status check_shard(const dsa_shard *s) {
  if (s->world_size < 1 || s->world_size > DSA_MAX_CP_RANKS || s->rank < 0 || s->rank >= s->world_size ||
      (s->layout != DSA_SHARD_ROUND_ROBIN && s->layout != DSA_SHARD_BLOCKS) ||
      (s->layout == DSA_SHARD_BLOCKS && s->block < 1))
    return fail(DSA_ERR_INVALID_VALUE, "shard: world_size %d, rank %d, layout %d, block %lld", s->world_size,
                s->rank, (int)s->layout, (long long)s->block);
  return DSA_OK;
}

/* ---- stages 2-6, shared by decode and prefill ---- */

typedef struct {
  int T, K, W, rank, H;
  float *cand_s;
  int32_t *cand_i, *merged, *mlen, *slots, *slot_lens;
  void *mla_ws, *parts;
  float *plse;
  size_t mla_ws_bytes;
  dsa_topk_merge_args ma;
  dsa_cp_local_indices_args la; /* its mapping (block table or workspace slots) set by the step */
  dsa_sparse_mla_args aa;
  dsa_lse_combine_args ea;
} cp_tail;

typedef struct {
  const void *q_attn;
  int num_heads;
  const void *kv_cache;
  dsa_kv_format kv_format;
  int64_t kv_num_slots, kv_stride;
  float softmax_scale;
  void *out;
  float *lse;
  int32_t *topk_positions, *topk_lens;
} cp_attn_io;

/* Carves the candidates (before: the step's stage-1 parts) and everything after them. */
static dsa_status plan_tail(cp_tail *tl, const dsa_shard *s, int T, int K, const cp_attn_io *io, unsigned char *b,
                            size_t *off) {
  tl->T = T;
  tl->K = K;
  tl->W = s->world_size;
  tl->rank = s->rank;
  tl->H = io->num_heads;
  const int W = s->world_size;
  tl->cand_s = carve(b, off, (size_t)W * T * K * 4);
  tl->cand_i = carve(b, off, (size_t)W * T * K * 4);
  tl->merged = io->topk_positions ? io->topk_positions : carve(b, off, (size_t)T * K * 4);
  tl->mlen = io->topk_lens ? io->topk_lens : carve(b, off, (size_t)T * 4);
  tl->slots = carve(b, off, (size_t)T * K * 4);
  tl->slot_lens = carve(b, off, (size_t)T * 4);
  tl->ma = (dsa_topk_merge_args){tl->cand_s, tl->cand_i, W, T, K, K, tl->merged, tl->mlen};
  memset(&tl->la, 0, sizeof tl->la);
  tl->la.shard = *s;
  tl->la.indices = tl->merged;
  tl->la.num_tokens = T;
  tl->la.topk = K;
  tl->la.out_slots = tl->slots;
  /* Many tokens: compacted, attention reads only this rank's rows (prefill 4096 x 1M: 4.2 -> 2.2 ms).
   * Few: one-token attention is latency-bound either way and the compaction kernel cost more than it
   * saved (decode merge stage 25.5 -> 31 us on the H200, 2026-11-30). */
  const int compact = T >= CP_COMPACT_MIN_TOKENS;
  tl->la.out_lens = compact ? tl->slot_lens : NULL;
  dsa_sparse_mla_args *aa = &tl->aa;
  memset(aa, 0, sizeof *aa);
  aa->q = io->q_attn;
  aa->num_tokens = T;
  aa->num_heads = io->num_heads;
  aa->kv_cache = io->kv_cache;
  aa->kv_format = io->kv_format;
  aa->num_slots = io->kv_num_slots;
  aa->kv_stride = io->kv_stride;
  aa->indices = tl->slots;
  aa->indices_stride = K;
  aa->topk = K;
  aa->lens = compact ? tl->slot_lens : tl->mlen;
  aa->softmax_scale = io->softmax_scale;
  LIB(dsa_sparse_mla_workspace_size(aa, &tl->mla_ws_bytes));
  tl->mla_ws = carve(b, off, tl->mla_ws_bytes);
  const size_t rows = (size_t)T * io->num_heads;
  tl->parts = carve(b, off, (size_t)W * rows * DSA_MLA_V_DIM * 2);
  tl->plse = carve(b, off, (size_t)W * rows * 4);
  aa->out = tl->parts ? (unsigned char *)tl->parts + (size_t)s->rank * rows * DSA_MLA_V_DIM * 2 : NULL;
  aa->lse = tl->plse ? tl->plse + (size_t)s->rank * rows : NULL;
  tl->ea = (dsa_lse_combine_args){tl->parts, DSA_DTYPE_BF16, tl->plse, W, T, io->num_heads, io->out, io->lse};
  return DSA_OK;
}

static dsa_status record(cudaEvent_t *ev, int i, cudaStream_t stream) {
  if (ev && cudaEventRecord(ev[i], stream) != cudaSuccess)
    return fail(DSA_ERR_CUDA, "cudaEventRecord(stage_events[%d]) failed", i);
  return DSA_OK;
}

/* Checks the communicator against the shard and the pointers every step needs. */
static dsa_status check_group(const dsa_shard *s, ncclComm_t comm, const cp_attn_io *io) {
  int count = 0, rank = -1;
  NCCL(ncclCommCount(comm, &count));
  NCCL(ncclCommUserRank(comm, &rank));
  if (count != s->world_size || rank != s->rank)
    return fail(DSA_ERR_INVALID_VALUE, "the communicator is rank %d of %d, the shard says %d of %d", rank, count,
                s->rank, s->world_size);
  if (!io->q_attn || !io->kv_cache || !io->out)
    return fail(DSA_ERR_NULL_POINTER, "q_attn, kv_cache or out is NULL");
  return DSA_OK;
}

static dsa_status run_tail(const cp_tail *tl, ncclComm_t comm, cudaEvent_t *ev, cudaStream_t stream) {
  const size_t n = (size_t)tl->T * tl->K, rows = (size_t)tl->T * tl->H;
  /* 2. exchange the candidates */
  NCCL(ncclGroupStart());
  NCCL(ncclAllGather(tl->cand_s + tl->rank * n, tl->cand_s, n, ncclFloat32, comm, stream));
  NCCL(ncclAllGather(tl->cand_i + tl->rank * n, tl->cand_i, n, ncclInt32, comm, stream));
  NCCL(ncclGroupEnd());
  OK(record(ev, 2, stream));
  /* 3. merge; this rank's rows of the selection */
  LIB(dsa_topk_merge(&tl->ma, stream));
  LIB(dsa_cp_local_indices(&tl->la, stream));
  OK(record(ev, 3, stream));
  /* 4. attention over them */
  LIB(dsa_sparse_mla(&tl->aa, tl->mla_ws, tl->mla_ws_bytes, stream));
  OK(record(ev, 4, stream));
  /* 5. exchange the partials (bf16 out as bytes) */
  NCCL(ncclGroupStart());
  NCCL(ncclAllGather((unsigned char *)tl->parts + tl->rank * rows * DSA_MLA_V_DIM * 2, tl->parts,
                     rows * DSA_MLA_V_DIM * 2, ncclUint8, comm, stream));
  NCCL(ncclAllGather(tl->plse + tl->rank * rows, tl->plse, rows, ncclFloat32, comm, stream));
  NCCL(ncclGroupEnd());
  OK(record(ev, 5, stream));
  /* 6. combine */
  LIB(dsa_lse_combine(&tl->ea, stream));
  return record(ev, 6, stream);
}

/* ---- decode ---- */

typedef struct {
  int T, local_max;
  int32_t *lens, *req_lens, *local_idx;
  float *scores;
  void *topk_ws;
  size_t topk_ws_bytes, total;
  dsa_indexer_decode_scores_args sa;
  dsa_topk_args ta;
  dsa_cp_candidates_args ca;
  cp_tail tl;
} cp_decode_plan;

static cp_attn_io io_of_decode(const dsa_cp_decode_args *a) {
  return (cp_attn_io){a->q_attn, a->num_heads, a->kv_cache, a->kv_format, a->kv_num_slots, a->kv_stride,
                      a->softmax_scale, a->out, a->lse, a->topk_positions, a->topk_lens};
}

static dsa_status plan_decode(const dsa_cp_decode_args *a, void *ws, cp_decode_plan *p) {
  if (!a) return fail(DSA_ERR_NULL_POINTER, "args is NULL");
  const dsa_shard *s = &a->shard;
  OK(check_shard(s));
  if (a->num_reqs < 0 || a->q_len_per_req < 1 || a->q_len_per_req > DSA_MAX_Q_LEN_PER_REQ ||
      (int64_t)a->num_reqs * a->q_len_per_req > INT32_MAX)
    return fail(DSA_ERR_INVALID_VALUE, "num_reqs %d, q_len_per_req %d", a->num_reqs, a->q_len_per_req);
  if (a->max_seq_len < 1 || a->max_seq_len > DSA_MAX_ROW_LEN)
    return fail(DSA_ERR_INVALID_VALUE, "max_seq_len = %d (must be 1..%d)", a->max_seq_len, DSA_MAX_ROW_LEN);
  if (a->topk < 1 || a->topk > DSA_MAX_TOPK || (int64_t)s->world_size * a->topk > DSA_MAX_MERGE_CANDIDATES)
    return fail(DSA_ERR_INVALID_VALUE, "topk = %d with %d ranks", a->topk, s->world_size);
  if (a->index_cache.page_size < 1 || a->max_blocks_per_req < 1 || a->block_table_stride < a->max_blocks_per_req)
    return fail(DSA_ERR_INVALID_VALUE, "page_size %d, max_blocks_per_req %d, block_table_stride %lld",
                a->index_cache.page_size, a->max_blocks_per_req, (long long)a->block_table_stride);
  memset(p, 0, sizeof *p);
  const int n = a->q_len_per_req, T = a->num_reqs * n, K = a->topk;
  const int maxb = a->max_blocks_per_req, page = a->index_cache.page_size;
  int64_t lm = shard_owned_below(s, a->max_seq_len);
  if (lm > (int64_t)maxb * page) lm = (int64_t)maxb * page;
  int64_t scored = lm + n - 1; /* the scorer's rows: a request's n tokens together (local_rows.cu) */
  if (scored > (int64_t)maxb * page) scored = (int64_t)maxb * page;
  p->T = T;
  p->local_max = (int)lm;
  const int64_t stride = scored > 4 ? (scored + 3) & ~(int64_t)3 : 4;
  unsigned char *b = ws;
  size_t off = 0;
  p->lens = carve(b, &off, (size_t)T * 4);
  p->req_lens = carve(b, &off, (size_t)a->num_reqs * 4);
  p->scores = carve(b, &off, (size_t)T * stride * 4);

  /* 1. local indexer */
  dsa_indexer_decode_scores_args *sa = &p->sa;
  sa->decode.query = a->query;
  sa->decode.cache = a->index_cache;
  sa->decode.seq_lens = p->req_lens;
  sa->decode.block_table = a->block_table;
  sa->decode.block_table_stride = a->block_table_stride;
  sa->decode.max_blocks_per_req = maxb;
  sa->decode.num_reqs = a->num_reqs;
  sa->decode.q_len_per_req = n;
  sa->decode.max_seq_len = (int)scored;
  sa->decode.topk = K;
  sa->scores = p->scores;
  sa->scores_stride = stride;
  dsa_topk_args *ta = &p->ta;
  ta->scores = p->scores;
  ta->scores_stride = stride;
  ta->num_rows = T;
  ta->row_lens = p->lens;
  ta->max_len = (int)lm;
  ta->topk = K;
  LIB(dsa_topk_workspace_size(ta, &p->topk_ws_bytes));
  p->topk_ws = carve(b, &off, p->topk_ws_bytes);
  p->local_idx = carve(b, &off, (size_t)T * K * 4);
  ta->indices = p->local_idx;
  const cp_attn_io io = io_of_decode(a);
  OK(plan_tail(&p->tl, s, T, K, &io, b, &off));
  dsa_cp_candidates_args *ca = &p->ca;
  ca->shard = *s;
  ca->scores = p->scores;
  ca->scores_stride = stride;
  ca->max_len = (int)lm;
  ca->local_indices = p->local_idx;
  ca->num_rows = T;
  ca->topk = K;
  ca->cand_scores = p->tl.cand_s ? p->tl.cand_s + (size_t)s->rank * T * K : NULL;
  ca->cand_ids = p->tl.cand_i ? p->tl.cand_i + (size_t)s->rank * T * K : NULL;
  dsa_cp_local_indices_args *la = &p->tl.la;
  la->block_table = a->block_table;
  la->block_table_stride = a->block_table_stride;
  la->max_blocks_per_req = maxb;
  la->q_len_per_req = n;
  la->page_size = page;
  la->num_pages = a->index_cache.num_pages;
  p->total = off;
  return DSA_OK;
}

dsa_status dsa_cp_decode_workspace_size(const dsa_cp_decode_args *a, size_t *bytes) {
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "bytes is NULL");
  cp_decode_plan p;
  OK(plan_decode(a, NULL, &p));
  *bytes = p.total;
  return DSA_OK;
}

static dsa_status check_ws(void *ws, size_t ws_bytes, size_t need) {
  if (ws_bytes < need || (need && !ws) || ((uintptr_t)ws & 255))
    return fail(DSA_ERR_WORKSPACE_TOO_SMALL, "workspace %p of %zu bytes (need %zu, 256-byte aligned)", ws, ws_bytes,
                need);
  return DSA_OK;
}

dsa_status dsa_cp_decode(const dsa_cp_decode_args *a, ncclComm_t comm, void *ws, size_t ws_bytes,
                         cudaStream_t stream) {
  cp_decode_plan p;
  OK(plan_decode(a, ws, &p)); /* its pointers are used only once the workspace passed its check */
  OK(check_ws(ws, ws_bytes, p.total));
  const cp_attn_io io = io_of_decode(a);
  OK(check_group(&a->shard, comm, &io));
  if (p.T == 0) return DSA_OK; /* every rank sees the same num_reqs: none exchanges */
  if (!a->query.q || !a->query.weights || !a->index_cache.data || !a->seq_lens || !a->block_table)
    return fail(DSA_ERR_NULL_POINTER, "q, weights, index_cache.data, seq_lens or block_table is NULL");
  /* 1. local indexer */
  OK(record(a->stage_events, 0, stream));
  const int rc = dsa_cp_local_rows_launch(&a->shard, a->seq_lens, p.T, a->q_len_per_req, a->max_seq_len, p.lens,
                                          p.req_lens, stream);
  if (rc) return fail(DSA_ERR_CUDA, "local rows: CUDA error %d (%s)", rc, cudaGetErrorString((cudaError_t)rc));
  if (p.local_max > 0) {
    LIB(dsa_indexer_decode_scores(&p.sa, stream));
    LIB(dsa_topk(&p.ta, p.topk_ws, p.topk_ws_bytes, stream));
  }
  LIB(dsa_cp_candidates(&p.ca, stream)); /* max_len 0: every id -1 */
  OK(record(a->stage_events, 1, stream));
  return run_tail(&p.tl, comm, a->stage_events, stream);
}

/* ---- prefill ---- */

typedef struct {
  int T, chunk, local_max;
  int64_t stride;
  int32_t *starts, *ends, *lens, *local_idx;
  float *scores;
  void *topk_ws;
  size_t topk_ws_bytes, total;
  cp_tail tl;
} cp_prefill_plan;

static cp_attn_io io_of_prefill(const dsa_cp_prefill_args *a) {
  return (cp_attn_io){a->q_attn, a->num_heads, a->kv_cache, a->kv_format, a->kv_num_slots, a->kv_stride,
                      a->softmax_scale, a->out, a->lse, a->topk_positions, a->topk_lens};
}

static dsa_topk_args prefill_topk_args(const cp_prefill_plan *p, int rows, int K) {
  dsa_topk_args ta;
  memset(&ta, 0, sizeof ta);
  ta.scores = p->scores;
  ta.scores_stride = p->stride;
  ta.num_rows = rows;
  ta.row_lens = p->lens;
  ta.max_len = p->local_max;
  ta.topk = K;
  ta.indices = p->local_idx;
  return ta;
}

static dsa_status plan_prefill(const dsa_cp_prefill_args *a, void *ws, cp_prefill_plan *p) {
  if (!a) return fail(DSA_ERR_NULL_POINTER, "args is NULL");
  const dsa_shard *s = &a->shard;
  OK(check_shard(s));
  if (a->num_tokens < 0) return fail(DSA_ERR_INVALID_VALUE, "num_tokens = %d < 0", a->num_tokens);
  if (a->num_workspace_rows < 0 || a->num_workspace_rows > DSA_MAX_ROW_LEN || a->num_local_rows < 0 ||
      a->num_local_rows > DSA_MAX_ROW_LEN || a->max_rows < 0)
    return fail(DSA_ERR_INVALID_VALUE, "num_workspace_rows %lld, num_local_rows %lld, max_rows %d",
                (long long)a->num_workspace_rows, (long long)a->num_local_rows, a->max_rows);
  if (a->topk < 1 || a->topk > DSA_MAX_TOPK || (int64_t)s->world_size * a->topk > DSA_MAX_MERGE_CANDIDATES)
    return fail(DSA_ERR_INVALID_VALUE, "topk = %d with %d ranks", a->topk, s->world_size);
  memset(p, 0, sizeof *p);
  const int T = a->num_tokens, K = a->topk;
  const int64_t max_rows = a->max_rows > 0 && a->max_rows < a->num_workspace_rows ? a->max_rows : a->num_workspace_rows;
  /* a token's local rows: at most the owned rows of any max_rows-long window */
  int64_t lm = s->layout == DSA_SHARD_ROUND_ROBIN ? (max_rows + s->world_size - 1) / s->world_size
                                                  : (max_rows < s->block ? max_rows : s->block);
  if (lm > a->num_local_rows) lm = a->num_local_rows;
  p->T = T;
  p->local_max = (int)lm;
  p->stride = lm > 0 ? (lm + 3) & ~(int64_t)3 : 4;
  int64_t chunk = (int64_t)(CP_SCORE_BYTES / ((size_t)p->stride * 4));
  if (chunk > 256) chunk = 256; /* dsa_topk's rows a launch */
  if (chunk > T) chunk = T;
  if (chunk < 1) chunk = 1;
  p->chunk = (int)chunk;
  unsigned char *b = ws;
  size_t off = 0;
  p->starts = carve(b, &off, (size_t)T * 4);
  p->ends = carve(b, &off, (size_t)T * 4);
  p->lens = carve(b, &off, (size_t)T * 4);
  p->scores = carve(b, &off, (size_t)chunk * p->stride * 4);
  const dsa_topk_args ta = prefill_topk_args(p, (int)chunk, K);
  LIB(dsa_topk_workspace_size(&ta, &p->topk_ws_bytes));
  p->topk_ws = carve(b, &off, p->topk_ws_bytes);
  p->local_idx = carve(b, &off, (size_t)chunk * K * 4);
  const cp_attn_io io = io_of_prefill(a);
  OK(plan_tail(&p->tl, s, T, K, &io, b, &off));
  p->tl.la.workspace_slots = a->kv_workspace_slots;
  p->tl.la.num_workspace_rows = a->num_local_rows;
  p->total = off;
  return DSA_OK;
}

dsa_status dsa_cp_prefill_workspace_size(const dsa_cp_prefill_args *a, size_t *bytes) {
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "bytes is NULL");
  cp_prefill_plan p;
  OK(plan_prefill(a, NULL, &p));
  *bytes = p.total;
  return DSA_OK;
}

/* the query of tokens [t0, ...) */
static dsa_indexer_query query_from(const dsa_indexer_query *q, int t0) {
  dsa_indexer_query r = *q;
  const size_t qe = q->q_dtype == DSA_DTYPE_FP8_E4M3 ? 1 : 2, we = q->weights_dtype == DSA_DTYPE_BF16 ? 2 : 4;
  r.q = (const unsigned char *)q->q + (size_t)t0 * q->num_heads * q->head_dim * qe;
  if (q->q_scale) r.q_scale = q->q_scale + (size_t)t0 * q->num_heads;
  r.weights = (const unsigned char *)q->weights + (size_t)t0 * q->weights_stride * we;
  return r;
}

dsa_status dsa_cp_prefill(const dsa_cp_prefill_args *a, ncclComm_t comm, void *ws, size_t ws_bytes,
                          cudaStream_t stream) {
  cp_prefill_plan p;
  OK(plan_prefill(a, ws, &p)); /* its pointers are used only once the workspace passed its check */
  OK(check_ws(ws, ws_bytes, p.total));
  const cp_attn_io io = io_of_prefill(a);
  OK(check_group(&a->shard, comm, &io));
  if (p.T == 0) return DSA_OK;
  if (!a->query.q || !a->query.weights || !a->index_cache.data || !a->row_starts || !a->row_ends ||
      (a->num_local_rows > 0 && !a->kv_workspace_slots))
    return fail(DSA_ERR_NULL_POINTER, "q, weights, index_cache.data, row_starts, row_ends or kv_workspace_slots is NULL");
  const int T = p.T, K = a->topk, r = a->shard.rank;
  const int64_t max_rows = a->max_rows > 0 && a->max_rows < a->num_workspace_rows ? a->max_rows : a->num_workspace_rows;
  /* 1. local indexer, a chunk of tokens at a time */
  OK(record(a->stage_events, 0, stream));
  const int rc = dsa_cp_local_ranges_launch(&a->shard, a->row_starts, a->row_ends, T, a->num_workspace_rows, max_rows,
                                            p.starts, p.ends, p.lens, stream);
  if (rc) return fail(DSA_ERR_CUDA, "local ranges: CUDA error %d (%s)", rc, cudaGetErrorString((cudaError_t)rc));
  for (int t0 = 0; t0 < T; t0 += p.chunk) {
    const int c = T - t0 < p.chunk ? T - t0 : p.chunk;
    if (p.local_max > 0) {
      dsa_indexer_prefill_scores_args sa;
      memset(&sa, 0, sizeof sa);
      sa.prefill.query = query_from(&a->query, t0);
      sa.prefill.cache = a->index_cache;
      sa.prefill.kv_workspace_slots = a->kv_workspace_slots;
      sa.prefill.num_workspace_rows = a->num_local_rows;
      sa.prefill.row_starts = p.starts + t0;
      sa.prefill.row_ends = p.ends + t0;
      sa.prefill.num_tokens = c;
      sa.prefill.max_rows = p.local_max;
      sa.prefill.topk = K;
      sa.scores = p.scores;
      sa.scores_stride = p.stride;
      LIB(dsa_indexer_prefill_scores(&sa, stream));
      dsa_topk_args ta = prefill_topk_args(&p, c, K);
      ta.row_lens = p.lens + t0;
      LIB(dsa_topk(&ta, p.topk_ws, p.topk_ws_bytes, stream));
    }
    dsa_cp_candidates_args ca;
    memset(&ca, 0, sizeof ca);
    ca.shard = a->shard;
    ca.scores = p.scores;
    ca.scores_stride = p.stride;
    ca.max_len = p.local_max;
    ca.local_indices = p.local_idx;
    ca.row_offsets = p.starts + t0;
    ca.num_rows = c;
    ca.topk = K;
    ca.cand_scores = p.tl.cand_s + ((size_t)r * T + t0) * K;
    ca.cand_ids = p.tl.cand_i + ((size_t)r * T + t0) * K;
    LIB(dsa_cp_candidates(&ca, stream));
  }
  OK(record(a->stage_events, 1, stream));
  return run_tail(&p.tl, comm, a->stage_events, stream);
}
