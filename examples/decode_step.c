/*
 * decode_step.c — one DSA decode step for a batch, as an engine would call it: indexer top-k over
 * the paged FP8 index-K cache, then sparse MLA attention over the selected slots. All pointers are
 * device buffers the engine already owns; the workspace is sized once and reused every step.
 * Built with the library so that the README's example keeps compiling.
 */
#include <stdio.h>

#include "dsa.h"

dsa_status decode_step(const void *q_index /* [B*n, 32, 128] fp8 */, const float *q_scale, const float *weights,
                       const uint8_t *index_k_cache, int64_t num_pages, const int32_t *seq_lens,
                       const int32_t *block_table, int max_blocks, int num_reqs, int n,
                       const void *q_attn /* [B*n, 16, 576] bf16 */, const void *kv_cache /* packed fp8 */,
                       int32_t *topk_idx, int32_t *topk_lens, void *out, void *workspace, size_t workspace_bytes,
                       cudaStream_t stream) {
  dsa_indexer_decode_args ix = {0};
  ix.query.q = q_index;
  ix.query.q_dtype = DSA_DTYPE_FP8_E4M3;
  ix.query.q_scale = q_scale;
  ix.query.weights = weights;
  ix.query.weights_dtype = DSA_DTYPE_F32;
  ix.query.weights_stride = 32;
  ix.query.num_heads = 32;
  ix.query.head_dim = 128;
  ix.query.softmax_scale = 0.015625f; /* 128^-0.5 * 32^-0.5 */
  ix.cache.data = index_k_cache;
  ix.cache.num_pages = num_pages;
  ix.cache.page_size = 64;
  ix.seq_lens = seq_lens;
  ix.block_table = block_table;
  ix.block_table_stride = max_blocks;
  ix.max_blocks_per_req = max_blocks;
  ix.num_reqs = num_reqs;
  ix.q_len_per_req = n;
  ix.topk = 2048;
  ix.topk_indices = topk_idx; /* global slots, -1 past topk_lens */
  ix.topk_lens = topk_lens;

  dsa_sparse_mla_args at = {0};
  at.q = q_attn;
  at.num_tokens = num_reqs * n;
  at.num_heads = 16;
  at.kv_cache = kv_cache;
  at.kv_format = DSA_KV_FP8_PACKED;
  at.num_slots = num_pages * 64;
  at.indices = topk_idx;
  at.indices_stride = 2048;
  at.topk = 2048;
  at.lens = topk_lens;
  at.softmax_scale = 0.0625f; /* (192 + 64)^-0.5 */
  at.out = out;

  /* One workspace serves both calls (they run one after the other on the stream). */
  size_t need_ix = 0, need_at = 0;
  dsa_status st = dsa_indexer_decode_workspace_size(&ix, &need_ix);
  if (st == DSA_OK) st = dsa_sparse_mla_workspace_size(&at, &need_at);
  if (st == DSA_OK && (need_ix > workspace_bytes || need_at > workspace_bytes)) st = DSA_ERR_WORKSPACE_TOO_SMALL;
  if (st == DSA_OK) st = dsa_indexer_decode(&ix, workspace, workspace_bytes, stream);
  if (st == DSA_OK) st = dsa_sparse_mla(&at, workspace, workspace_bytes, stream);
  if (st != DSA_OK) fprintf(stderr, "dsa: %s: %s\n", dsa_status_string(st), dsa_last_error());
  return st;
}
