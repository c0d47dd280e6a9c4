/*
 * dsa_cp.c — dsa_cp.h: one decode step over a context-parallel group. Library calls for every
 * computation (dsa.h), NCCL for the two exchanges, one kernel of its own (cp_rows.cu: each token's
 * local row). Workspace, in order (each part 256-byte aligned):
 *   local_lens [T] i32 | bt [T, maxb] i32 (MTP only) | scores [T, stride] f32 | top-k scratch |
 *   local top-k [T, k] i32 | candidates: scores [W, T, k] f32, ids [W, T, k] i32 |
 *   merged [T, k] i32 (when topk_positions is NULL) | lens [T] i32 (when topk_lens is NULL) |
 *   slots [T, k] i32 | attention scratch | partial out [W, T, H, 512] bf16 | partial lse [W, T, H] f32
 */
#include "dsa_cp.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int dsa_cp_local_rows_launch(const dsa_shard *s, const int32_t *seq_lens, int num_tokens, int n, int max_seq_len,
                             const int32_t *bt, int64_t bt_stride, int maxb, int32_t *local_lens, int32_t *bt_out,
                             cudaStream_t stream);

static dsa_status fail(dsa_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "dsa_cp: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return st;
}

/* a library call's failure: its message, then the status */
#define LIB(call)                                                                   \
  do {                                                                              \
    dsa_status st_ = (call);                                                        \
    if (st_ != DSA_OK) return fail(st_, "%s: %s", #call, dsa_last_error());         \
  } while (0)
#define NCCL(call)                                                                  \
  do {                                                                              \
    ncclResult_t r_ = (call);                                                       \
    if (r_ != ncclSuccess) return fail(DSA_ERR_CUDA, "%s: %s", #call, ncclGetErrorString(r_)); \
  } while (0)

static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

static int64_t owned_below(const dsa_shard *s, int64_t L) {
  if (L <= 0) return 0;
  if (s->layout == DSA_SHARD_ROUND_ROBIN) return L > s->rank ? (L - s->rank + s->world_size - 1) / s->world_size : 0;
  const int64_t lo = (int64_t)s->rank * s->block, hi = lo + s->block;
  return L <= lo ? 0 : (L < hi ? L : hi) - lo;
}

/* The step's sub-calls and workspace, from the args (ws = NULL: sizes only). */
typedef struct {
  int T, W, local_max;
  int32_t *lens, *bt, *local_idx, *cand_i, *merged, *mlen, *slots;
  float *scores, *cand_s, *plse;
  void *topk_ws, *mla_ws, *parts;
  size_t topk_ws_bytes, mla_ws_bytes, total;
  dsa_indexer_decode_scores_args sa;
  dsa_topk_args ta;
  dsa_cp_candidates_args ca;
  dsa_topk_merge_args ma;
  dsa_cp_local_indices_args la;
  dsa_sparse_mla_args aa;
  dsa_lse_combine_args ea;
} cp_plan;

static void *carve(unsigned char *base, size_t *off, size_t bytes) {
  void *p = base ? base + *off : NULL;
  *off += round256(bytes);
  return p;
}

static dsa_status plan(const dsa_cp_decode_args *a, void *ws, cp_plan *p) {
  if (!a) return fail(DSA_ERR_NULL_POINTER, "args is NULL");
  const dsa_shard *s = &a->shard;
  if (s->world_size < 1 || s->world_size > DSA_MAX_CP_RANKS || s->rank < 0 || s->rank >= s->world_size ||
      (s->layout != DSA_SHARD_ROUND_ROBIN && s->layout != DSA_SHARD_BLOCKS) ||
      (s->layout == DSA_SHARD_BLOCKS && s->block < 1))
    return fail(DSA_ERR_INVALID_VALUE, "shard: world_size %d, rank %d, layout %d, block %lld", s->world_size,
                s->rank, (int)s->layout, (long long)s->block);
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
  const int n = a->q_len_per_req, T = a->num_reqs * n, W = s->world_size, K = a->topk, H = a->num_heads;
  const int maxb = a->max_blocks_per_req, page = a->index_cache.page_size;
  int64_t lm = owned_below(s, a->max_seq_len);
  if (lm > (int64_t)maxb * page) lm = (int64_t)maxb * page;
  p->T = T;
  p->W = W;
  p->local_max = (int)lm;
  const int64_t stride = ((lm + 3) & ~(int64_t)3) + (lm == 0 ? 4 : 0);
  unsigned char *b = ws;
  size_t off = 0;
  p->lens = carve(b, &off, (size_t)T * 4);
  p->bt = n > 1 ? carve(b, &off, (size_t)T * maxb * 4) : NULL;
  p->scores = carve(b, &off, (size_t)T * stride * 4);

  /* 1. local indexer: every MTP token a request of its own (n > 1: the copied block table) */
  dsa_indexer_decode_scores_args *sa = &p->sa;
  sa->decode.query = a->query;
  sa->decode.cache = a->index_cache;
  sa->decode.seq_lens = p->lens;
  sa->decode.block_table = n > 1 ? p->bt : a->block_table;
  sa->decode.block_table_stride = n > 1 ? maxb : a->block_table_stride;
  sa->decode.max_blocks_per_req = maxb;
  sa->decode.num_reqs = T;
  sa->decode.q_len_per_req = 1;
  sa->decode.max_seq_len = lm > 0 ? (int)lm : 1;
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
  p->cand_s = carve(b, &off, (size_t)W * T * K * 4);
  p->cand_i = carve(b, &off, (size_t)W * T * K * 4);
  dsa_cp_candidates_args *ca = &p->ca;
  ca->shard = *s;
  ca->scores = p->scores;
  ca->scores_stride = stride;
  ca->max_len = (int)lm;
  ca->local_indices = p->local_idx;
  ca->num_rows = T;
  ca->topk = K;
  ca->cand_scores = p->cand_s ? p->cand_s + (size_t)s->rank * T * K : NULL;
  ca->cand_ids = p->cand_i ? p->cand_i + (size_t)s->rank * T * K : NULL;

  /* 3. merge and this rank's rows */
  p->merged = a->topk_positions ? a->topk_positions : carve(b, &off, (size_t)T * K * 4);
  p->mlen = a->topk_lens ? a->topk_lens : carve(b, &off, (size_t)T * 4);
  p->slots = carve(b, &off, (size_t)T * K * 4);
  p->ma = (dsa_topk_merge_args){p->cand_s, p->cand_i, W, T, K, K, p->merged, p->mlen};
  dsa_cp_local_indices_args *la = &p->la;
  la->shard = *s;
  la->indices = p->merged;
  la->num_tokens = T;
  la->topk = K;
  la->block_table = sa->decode.block_table;
  la->block_table_stride = sa->decode.block_table_stride;
  la->max_blocks_per_req = maxb;
  la->q_len_per_req = 1;
  la->page_size = page;
  la->num_pages = a->index_cache.num_pages;
  la->out_slots = p->slots;

  /* 4. attention over the owned rows */
  dsa_sparse_mla_args *aa = &p->aa;
  aa->q = a->q_attn;
  aa->num_tokens = T;
  aa->num_heads = H;
  aa->kv_cache = a->kv_cache;
  aa->kv_format = a->kv_format;
  aa->num_slots = a->kv_num_slots;
  aa->kv_stride = a->kv_stride;
  aa->indices = p->slots;
  aa->indices_stride = K;
  aa->topk = K;
  aa->lens = p->mlen;
  aa->softmax_scale = a->softmax_scale;
  LIB(dsa_sparse_mla_workspace_size(aa, &p->mla_ws_bytes));
  p->mla_ws = carve(b, &off, p->mla_ws_bytes);
  const size_t rows = (size_t)T * (H > 0 ? H : 1);
  p->parts = carve(b, &off, (size_t)W * rows * DSA_MLA_V_DIM * 2);
  p->plse = carve(b, &off, (size_t)W * rows * 4);
  aa->out = p->parts ? (unsigned char *)p->parts + (size_t)s->rank * rows * DSA_MLA_V_DIM * 2 : NULL;
  aa->lse = p->plse ? p->plse + (size_t)s->rank * rows : NULL;

  /* 6. combine */
  p->ea = (dsa_lse_combine_args){p->parts, DSA_DTYPE_BF16, p->plse, W, T, H, a->out, a->lse};
  p->total = off;
  return DSA_OK;
}

dsa_status dsa_cp_decode_workspace_size(const dsa_cp_decode_args *a, size_t *bytes) {
  if (!bytes) return fail(DSA_ERR_NULL_POINTER, "bytes is NULL");
  cp_plan p;
  dsa_status st = plan(a, NULL, &p);
  if (st != DSA_OK) return st;
  *bytes = p.total;
  return DSA_OK;
}

static dsa_status record(const dsa_cp_decode_args *a, int i, cudaStream_t stream) {
  if (a->stage_events && cudaEventRecord(a->stage_events[i], stream) != cudaSuccess)
    return fail(DSA_ERR_CUDA, "cudaEventRecord(stage_events[%d]) failed", i);
  return DSA_OK;
}

dsa_status dsa_cp_decode(const dsa_cp_decode_args *a, ncclComm_t comm, void *ws, size_t ws_bytes,
                         cudaStream_t stream) {
  cp_plan p;
  dsa_status st = plan(a, NULL, &p);
  if (st != DSA_OK) return st;
  if (ws_bytes < p.total || (p.total && !ws) || ((uintptr_t)ws & 255))
    return fail(DSA_ERR_WORKSPACE_TOO_SMALL, "workspace %p of %zu bytes (need %zu, 256-byte aligned)", ws, ws_bytes,
                p.total);
  int count = 0, rank = -1;
  NCCL(ncclCommCount(comm, &count));
  NCCL(ncclCommUserRank(comm, &rank));
  if (count != a->shard.world_size || rank != a->shard.rank)
    return fail(DSA_ERR_INVALID_VALUE, "the communicator is rank %d of %d, the shard says %d of %d", rank, count,
                a->shard.rank, a->shard.world_size);
  if (p.T == 0) return DSA_OK; /* every rank sees the same num_reqs: none exchanges */
  if (!a->query.q || !a->query.weights || !a->index_cache.data || !a->seq_lens || !a->block_table || !a->q_attn ||
      !a->kv_cache || !a->out)
    return fail(DSA_ERR_NULL_POINTER, "a required pointer is NULL (q, weights, index_cache.data, seq_lens, "
                                      "block_table, q_attn, kv_cache, out)");
  /* the attention call's arguments are checked before any collective (its own checks run again) */
  {
    size_t b = 0;
    LIB(dsa_sparse_mla_workspace_size(&p.aa, &b));
  }
  plan(a, ws, &p);
  const int T = p.T, K = a->topk, W = p.W, r = a->shard.rank;
  const size_t rows = (size_t)T * a->num_heads;

  /* 1. local indexer */
  st = record(a, 0, stream);
  if (st != DSA_OK) return st;
  const int rc = dsa_cp_local_rows_launch(&a->shard, a->seq_lens, T, a->q_len_per_req, a->max_seq_len, a->block_table,
                                          a->block_table_stride, a->max_blocks_per_req, p.lens, p.bt, stream);
  if (rc) return fail(DSA_ERR_CUDA, "local rows: CUDA error %d (%s)", rc, cudaGetErrorString((cudaError_t)rc));
  if (p.local_max > 0) {
    LIB(dsa_indexer_decode_scores(&p.sa, stream));
    LIB(dsa_topk(&p.ta, p.topk_ws, p.topk_ws_bytes, stream));
  }
  LIB(dsa_cp_candidates(&p.ca, stream)); /* max_len 0: every id -1 */
  if ((st = record(a, 1, stream)) != DSA_OK) return st;

  /* 2. exchange the candidates */
  NCCL(ncclGroupStart());
  NCCL(ncclAllGather(p.cand_s + (size_t)r * T * K, p.cand_s, (size_t)T * K, ncclFloat32, comm, stream));
  NCCL(ncclAllGather(p.cand_i + (size_t)r * T * K, p.cand_i, (size_t)T * K, ncclInt32, comm, stream));
  NCCL(ncclGroupEnd());
  if ((st = record(a, 2, stream)) != DSA_OK) return st;

  /* 3. merge; this rank's rows of the selection */
  LIB(dsa_topk_merge(&p.ma, stream));
  LIB(dsa_cp_local_indices(&p.la, stream));
  if ((st = record(a, 3, stream)) != DSA_OK) return st;

  /* 4. attention over them */
  LIB(dsa_sparse_mla(&p.aa, p.mla_ws, p.mla_ws_bytes, stream));
  if ((st = record(a, 4, stream)) != DSA_OK) return st;

  /* 5. exchange the partials (bf16 out as bytes) */
  NCCL(ncclGroupStart());
  NCCL(ncclAllGather((unsigned char *)p.parts + (size_t)r * rows * DSA_MLA_V_DIM * 2, p.parts,
                     rows * DSA_MLA_V_DIM * 2, ncclUint8, comm, stream));
  NCCL(ncclAllGather(p.plse + (size_t)r * rows, p.plse, rows, ncclFloat32, comm, stream));
  NCCL(ncclGroupEnd());
  if ((st = record(a, 5, stream)) != DSA_OK) return st;

  /* 6. combine */
  LIB(dsa_lse_combine(&p.ea, stream));
  (void)W;
  return record(a, 6, stream);
}
