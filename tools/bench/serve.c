/*
 * serve.c — `dsa-bench serve`: serving shapes. Decode rows (glm.c's) at every --batches B x --sizes
 * S, then the attention stage alone at SERVE_ATTN_BATCH requests x SERVE_ATTN_HEADS heads over the
 * top-k of a decode step at each S, in TFLOP/s.
 */
#include <stdlib.h>

#include "bench.h"

/* Serve: attention alone at SERVE_ATTN_BATCH requests x SERVE_ATTN_HEADS heads, over the top-k of
 * a decode step at context S (the indexer runs once, untimed, to produce it). */
static void run_serve_attn_row(bench *b, row_result *row, int64_t S) {
  const options *o = &b->o;
  int B = SERVE_ATTN_BATCH, n = o->mtp, T = B * n, H = SERVE_ATTN_HEADS;
  row_init(row, TBL_SERVE_ATTN);
  row->batch = B;
  row->q_len = n;
  row->tokens = T;
  row->heads = H;
  row->S = S;
  for (int j = 0; j < n; j++) {
    int64_t L = imax64(0, S - (n - 1) + j);
    row->candidates += B * L;
    row->selected += B * imin64(L, o->topk);
  }
  upload_seq_lens(b, B, S);
  dsa_indexer_decode_args a = decode_args(b, B, S, 0);
  dsa_sparse_mla_args m = attn_args(b, T, H, 0);
  size_t ws_i = 0;
  DSA_CK(dsa_indexer_decode_workspace_size(&a, &ws_i));
  row->indexer_ws = (int64_t)ws_i;
  ensure_ws(&b->d_ws_idx, &b->ws_idx_cap, ws_i);
  stage ix = {ST_DEC_INDEXER, &a, b->d_ws_idx, ws_i};
  stage at0 = attn_stage(b, &m);
  const stage *all[] = {&ix, &at0};
  poison_and_run(b, T, H, 0, all, 2);
  if (o->check) copy_topk_back(b, T);
  /* --cold: replicas 1..K-1: the indexer once on other pages of the pool, for their own top-k */
  const int need = cold_need(b, (double)row->selected * (double)b->kv_slot_bytes);
  const int64_t nb = ceil_div(S, PAGE);
  const int K = cold_block_tables(b, B, nb, need);
  cold_queries(b, K, T, H);
  dsa_sparse_mla_args *mr = xmalloc(sizeof *mr * (size_t)K);
  stage *at = xmalloc(sizeof *at * (size_t)K);
  for (int j = 0; j < K; j++) {
    mr[j] = m;
    if (j > 0) {
      dsa_indexer_decode_args aj = a;
      aj.block_table = b->d_bt_rot + (size_t)(j - 1) * B * nb;
      aj.block_table_stride = nb;
      aj.query.q = cold_qi(b, j, T);
      aj.topk_indices = cold_topk(b, j, T);
      aj.topk_lens = cold_lens(b, j, T);
      const stage ixj = {ST_DEC_INDEXER, &aj, b->d_ws_idx, ws_i};
      stage_run(&ixj, b->stream);
      mr[j].q = cold_qa(b, j, T, H);
      mr[j].indices = aj.topk_indices;
      mr[j].lens = aj.topk_lens;
    }
    at[j] = (stage){ST_ATTN, &mr[j], at0.ws, at0.ws_bytes};
  }
  CK(cudaStreamSynchronize(b->stream));
  check_and_time_attention(b, row, at, K, need, T, H);
  free(mr);
  free(at);
}

/* The decode rows of every batch x size, then the attention rows; then their tables. */
int serve_main(bench *b, row_result **rows_out) {
  const options *o = &b->o;
  const int64_t max_S = max_size(o);
  int nrows = 0;
  int max_B = SERVE_ATTN_BATCH;
  for (int i = 0; i < o->nbatches; i++) max_B = o->batches[i] > max_B ? o->batches[i] : max_B;
  int max_T = max_B * o->mtp;
  int heads = o->heads > SERVE_ATTN_HEADS ? o->heads : SERVE_ATTN_HEADS;
  size_t scores = 0;
  for (int i = 0; i < o->nbatches; i++)
    scores = (size_t)imax64((int64_t)scores, (int64_t)o->batches[i] * o->mtp * max_S);
  row_result *rows = *rows_out = xmalloc(sizeof(row_result) * (size_t)(o->nbatches * o->nsizes + o->nsizes));
  printf("dsa-bench serve on %s (dsa %s)\n", b->dev_name, dsa_version());
  setup(b, max_B, max_S, max_T, heads, scores);
  for (int bi = 0; bi < o->nbatches; bi++)
    for (int i = 0; i < o->nsizes; i++) {
      run_decode_row(b, &rows[nrows], TBL_SERVE_DECODE, o->batches[bi], o->sizes[i]);
      print_progress(&rows[nrows++]);
    }
  for (int i = 0; i < o->nsizes; i++) {
    run_serve_attn_row(b, &rows[nrows], o->sizes[i]);
    print_progress(&rows[nrows++]);
  }

  char cfg[64];
  snprintf(cfg, sizeof cfg, "serve decode B req x %d token", o->mtp);
  print_stage_table(b, cfg, rows, nrows, TBL_SERVE_DECODE);
  print_serve_attn_table(b, rows, nrows);
  return nrows;
}
