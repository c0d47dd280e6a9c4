/*
 * glm.c — `dsa-bench glm`: the reference tables of DESIGN.md §6 at the GLM shapes. A decode row is
 * B requests x --mtp tokens over an S-token context each (serve.c's decode rows too); a prefill
 * row is --prefill-tokens query tokens at the end of request 0's S-token context. Each row times
 * three stages: scores alone, the indexer (scores + top-k), attention over the indexer's top-k.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* The reference numbers of DESIGN.md §6 (tokenspeed's Triton and Gluon kernels on the MI355), ms;
 * totals = scores + top-k + attention. */
typedef struct {
  int64_t s;
  double dec_triton, dec_gluon, pre_triton, pre_gluon;
} ref_point;
static const ref_point REF_TABLE[] = {
    {512, 0.368, 0.223, 1.467, 0.228},     {1024, 0.402, 0.225, 1.499, 0.225},
    {2048, 0.456, 0.221, 1.552, 0.225},    {8192, 0.511, 0.267, 2.001, 0.291},
    {16384, 0.585, 0.303, 2.109, 0.347},   {32768, 0.737, 0.401, 2.311, 0.520},
    {65536, 0.675, 0.399, 2.383, 0.615},   {90000, 0.711, 0.407, 2.476, 0.700},
    {131072, 0.753, 0.411, 2.664, 0.844},  {262144, 0.877, 0.432, 3.430, 1.482},
    {524288, 1.105, 0.442, 4.670, 2.654},  {1048576, 1.650, 0.473, 7.139, 5.048},
};
#define REF_POINTS ((int)(sizeof REF_TABLE / sizeof REF_TABLE[0]))

static const ref_point *find_ref(int64_t S) {
  for (int i = 0; i < REF_POINTS; i++)
    if (REF_TABLE[i].s == S) return &REF_TABLE[i];
  return NULL;
}

/* Every request's context S tokens long (the first B uploaded). */
void upload_seq_lens(bench *b, int B, int64_t S) {
  for (int r = 0; r < b->n_req; r++) b->h_seq_lens[r] = (int32_t)S;
  CK(cudaMemcpy(b->d_seq_lens, b->h_seq_lens, sizeof(int32_t) * (size_t)B, cudaMemcpyHostToDevice));
}

/* sc, ix, at: K replicas each; need_*: the replicas each stage would need (--cold). */
static void time_three(bench *b, row_result *row, const stage *sc, const stage *ix, const stage *at, int K,
                       int need_sc, int need_at) {
  row->replicas = K;
  row->flushed = (need_sc > K) + (need_sc > K) + (need_at > K);
  row->ms_scores = time_stage(b, sc, K, need_sc > K, &row->timing[0], &row->gate_timeouts);
  row->ms_indexer = time_stage(b, ix, K, need_sc > K, &row->timing[1], &row->gate_timeouts);
  row->ms_attn = time_stage(b, at, K, need_at > K, &row->timing[2], &row->gate_timeouts);
  row->ms_topk = row->ms_indexer - row->ms_scores;
  row->ms_total = row->ms_indexer + row->ms_attn;
}

/* --cold: the attention stage of replicas 0..K-1 — replica j > 0 reads its own q copy and the top-k
 * its indexer replica writes (cold_topk / cold_lens). *mr_out: the args the stages point to (the
 * caller frees both arrays after timing). */
static stage *attn_replicas(bench *b, const dsa_sparse_mla_args *m, const stage *at0, int K, int T, int H,
                            dsa_sparse_mla_args **mr_out) {
  dsa_sparse_mla_args *mr = xmalloc(sizeof *mr * (size_t)K);
  stage *at = xmalloc(sizeof *at * (size_t)K);
  for (int j = 0; j < K; j++) {
    mr[j] = *m;
    if (j > 0) {
      mr[j].q = cold_qa(b, j, T, H);
      mr[j].indices = cold_topk(b, j, T);
      mr[j].lens = cold_lens(b, j, T);
    }
    at[j] = (stage){ST_ATTN, &mr[j], at0->ws, at0->ws_bytes};
  }
  *mr_out = mr;
  return at;
}

/* After replica 0's run (and --check): each other replica's top-k once, for its attention to read,
 * then the three stages timed over the K replicas. */
static void time_replicas(bench *b, row_result *row, const stage *sc, const stage *ix, const stage *at, int K,
                          int need_sc, int need_at) {
  for (int j = 1; j < K; j++) stage_run(&ix[j], b->stream);
  time_three(b, row, sc, ix, at, K, need_sc, need_at);
}

/* A decode row of table tbl (decode or serve decode): B requests x --mtp tokens, context S each. */
void run_decode_row(bench *b, row_result *row, table_kind tbl, int B, int64_t S) {
  const options *o = &b->o;
  int n = o->mtp, T = B * n, H = o->heads;
  row_init(row, tbl);
  row->batch = B;
  row->q_len = n;
  row->tokens = T;
  row->heads = H;
  row->S = S;
  for (int j = 0; j < n; j++) {
    int64_t L = imax64(0, S - (n - 1) + j);
    row->candidates += B * L;
    if (L > o->topk) row->scored += B * L;
    row->selected += B * imin64(L, o->topk);
  }
  upload_seq_lens(b, B, S);

  dsa_indexer_decode_args a = decode_args(b, B, S, 0);
  dsa_indexer_decode_scores_args sa;
  memset(&sa, 0, sizeof sa);
  sa.decode = a;
  sa.scores = b->d_scores;
  sa.scores_stride = S;
  sa.skip_short_rows = 1;
  dsa_sparse_mla_args m = attn_args(b, T, H, 0);
  size_t ws_i = 0;
  DSA_CK(dsa_indexer_decode_workspace_size(&a, &ws_i));
  row->indexer_ws = (int64_t)ws_i;
  ensure_ws(&b->d_ws_idx, &b->ws_idx_cap, ws_i);
  stage at0 = attn_stage(b, &m);
  /* --cold: replicas 1..K-1 read other pages of the pool, their own q copies, their own top-k */
  const int need_sc = cold_need(b, (double)row->scored * IDX_ROW_BYTES);
  const int need_at = cold_need(b, (double)row->selected * (double)b->kv_slot_bytes);
  const int64_t nb = ceil_div(S, PAGE);
  const int K = cold_block_tables(b, B, nb, need_sc > need_at ? need_sc : need_at);
  cold_queries(b, K, T, H);
  dsa_indexer_decode_args *ar = xmalloc(sizeof *ar * (size_t)K);
  dsa_indexer_decode_scores_args *sar = xmalloc(sizeof *sar * (size_t)K);
  stage *sc = xmalloc(sizeof *sc * (size_t)K), *ix = xmalloc(sizeof *ix * (size_t)K);
  for (int j = 0; j < K; j++) {
    ar[j] = a;
    sar[j] = sa;
    if (j > 0) {
      ar[j].block_table = b->d_bt_rot + (size_t)(j - 1) * B * nb;
      ar[j].block_table_stride = nb;
      ar[j].query.q = cold_qi(b, j, T);
      ar[j].topk_indices = cold_topk(b, j, T);
      ar[j].topk_lens = cold_lens(b, j, T);
      sar[j].decode = ar[j];
    }
    sc[j] = (stage){ST_DEC_SCORES, &sar[j], NULL, 0};
    ix[j] = (stage){ST_DEC_INDEXER, &ar[j], b->d_ws_idx, ws_i};
  }
  dsa_sparse_mla_args *mr;
  stage *at = attn_replicas(b, &m, &at0, K, T, H, &mr);
  const stage *all[] = {&sc[0], &ix[0], &at[0]};
  poison_and_run(b, T, H, (size_t)T * (size_t)S, all, 3);
  if (o->check) check_decode(b, row, B, S, tbl == TBL_SERVE_DECODE, 1);
  time_replicas(b, row, sc, ix, at, K, need_sc, need_at);
  free(ar);
  free(sar);
  free(mr);
  free(sc);
  free(ix);
  free(at);
  set_floors(b, row, row->scored > 0 ? (int64_t)B * S : 0);
  const ref_point *rp = find_ref(S);
  if (tbl == TBL_DECODE && rp) {
    row->gluon_ms = rp->dec_gluon;
    row->triton_ms = rp->dec_triton;
  }
}

/* A prefill row: --prefill-tokens tokens at the end of request 0's S-token context. */
static void run_prefill_row(bench *b, row_result *row, int64_t S) {
  const options *o = &b->o;
  int T = o->prefill_tokens, H = o->heads;
  row_init(row, TBL_PREFILL);
  row->batch = 1;
  row->q_len = T;
  row->tokens = T;
  row->heads = H;
  row->S = S;
  for (int j = 0; j < T; j++) {
    int64_t L = S - (T - 1) + j;
    b->h_row_starts[j] = 0;
    b->h_row_ends[j] = (int32_t)L;
    row->candidates += L;
    if (L > o->topk) row->scored += L;
    row->selected += imin64(L, o->topk);
  }
  CK(cudaMemcpy(b->d_row_starts, b->h_row_starts, sizeof(int32_t) * T, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b->d_row_ends, b->h_row_ends, sizeof(int32_t) * T, cudaMemcpyHostToDevice));

  dsa_indexer_prefill_args a = prefill_args(b, S, 0);
  dsa_indexer_prefill_scores_args sa;
  memset(&sa, 0, sizeof sa);
  sa.prefill = a;
  sa.scores = b->d_scores;
  sa.scores_stride = S;
  sa.skip_short_rows = 1;
  dsa_sparse_mla_args m = attn_args(b, T, H, 0);
  size_t ws_i = 0;
  DSA_CK(dsa_indexer_prefill_workspace_size(&a, &ws_i));
  row->indexer_ws = (int64_t)ws_i;
  ensure_ws(&b->d_ws_idx, &b->ws_idx_cap, ws_i);
  stage at0 = attn_stage(b, &m);
  /* --cold: replicas 1..K-1 gather request 0's context from other pages of the pool */
  const int need_sc = cold_need(b, (double)S * IDX_ROW_BYTES); /* the tokens share their keys */
  const int need_at = cold_need(b, (double)row->selected * (double)b->kv_slot_bytes);
  const int64_t nb = ceil_div(S, PAGE);
  const int K = cold_block_tables(b, 1, nb, need_sc > need_at ? need_sc : need_at);
  cold_queries(b, K, T, H);
  if (K > 1) {
    const size_t n = (size_t)(K - 1) * (size_t)S;
    free(b->h_ws_rot);
    b->h_ws_rot = xmalloc(n * sizeof(int64_t));
    for (int j = 1; j < K; j++)
      for (int64_t i = 0; i < S; i++)
        b->h_ws_rot[(size_t)(j - 1) * S + i] = (int64_t)b->h_bt_rot[(size_t)(j - 1) * nb + i / PAGE] * PAGE + i % PAGE;
    ensure_ws((void **)&b->d_ws_rot, &b->ws_rot_cap, n * sizeof(int64_t));
    CK(cudaMemcpy(b->d_ws_rot, b->h_ws_rot, n * sizeof(int64_t), cudaMemcpyHostToDevice));
  }
  dsa_indexer_prefill_args *ar = xmalloc(sizeof *ar * (size_t)K);
  dsa_indexer_prefill_scores_args *sar = xmalloc(sizeof *sar * (size_t)K);
  stage *sc = xmalloc(sizeof *sc * (size_t)K), *ix = xmalloc(sizeof *ix * (size_t)K);
  for (int j = 0; j < K; j++) {
    ar[j] = a;
    sar[j] = sa;
    if (j > 0) {
      ar[j].kv_workspace_slots = b->d_ws_rot + (size_t)(j - 1) * S;
      ar[j].query.q = cold_qi(b, j, T);
      ar[j].topk_indices = cold_topk(b, j, T);
      ar[j].topk_lens = cold_lens(b, j, T);
      sar[j].prefill = ar[j];
    }
    sc[j] = (stage){ST_PRE_SCORES, &sar[j], NULL, 0};
    ix[j] = (stage){ST_PRE_INDEXER, &ar[j], b->d_ws_idx, ws_i};
  }
  dsa_sparse_mla_args *mr;
  stage *at = attn_replicas(b, &m, &at0, K, T, H, &mr);
  const stage *all[] = {&sc[0], &ix[0], &at[0]};
  poison_and_run(b, T, H, (size_t)T * (size_t)S, all, 3);
  if (o->check) check_prefill(b, row, S);
  time_replicas(b, row, sc, ix, at, K, need_sc, need_at);
  free(ar);
  free(sar);
  free(mr);
  free(sc);
  free(ix);
  free(at);
  set_floors(b, row, row->scored > 0 ? S : 0);
  const ref_point *rp = o->prefill_tokens == PREFILL_TOKENS ? find_ref(S) : NULL; /* the reference's shape */
  if (rp) {
    row->gluon_ms = rp->pre_gluon;
    row->triton_ms = rp->pre_triton;
  }
}

/* The decode rows, then the prefill rows, at every --sizes S; then their tables. */
int glm_main(bench *b, row_result **rows_out) {
  const options *o = &b->o;
  const int64_t max_S = max_size(o);
  int nrows = 0;
  int dec_T = o->do_decode ? o->batch * o->mtp : 0;
  int max_T = (int)imax64(dec_T, o->do_prefill ? o->prefill_tokens : 0);
  size_t scores = (size_t)imax64((int64_t)dec_T * max_S, o->do_prefill ? (int64_t)o->prefill_tokens * max_S : 0);
  row_result *rows = *rows_out = xmalloc(sizeof(row_result) * (size_t)(2 * o->nsizes));
  printf("dsa-bench glm on %s (dsa %s)\n", b->dev_name, dsa_version());
  setup(b, o->do_decode ? o->batch : 1, max_S, max_T, o->heads, scores);
  if (o->do_decode)
    for (int i = 0; i < o->nsizes; i++) {
      run_decode_row(b, &rows[nrows], TBL_DECODE, o->batch, o->sizes[i]);
      print_progress(&rows[nrows++]);
    }
  if (o->do_prefill)
    for (int i = 0; i < o->nsizes; i++) {
      if (o->sizes[i] < o->prefill_tokens) {
        printf("prefill S=%lld skipped: shorter than the %d query tokens\n",
               (long long)o->sizes[i], o->prefill_tokens);
        continue;
      }
      run_prefill_row(b, &rows[nrows], o->sizes[i]);
      print_progress(&rows[nrows++]);
    }

  char cfg[64];
  snprintf(cfg, sizeof cfg, "decode %d req x %d token", o->batch, o->mtp);
  print_stage_table(b, cfg, rows, nrows, TBL_DECODE);
  snprintf(cfg, sizeof cfg, "prefill %d tokens at the end of S", o->prefill_tokens);
  print_stage_table(b, cfg, rows, nrows, TBL_PREFILL);
  return nrows;
}
