/* Prints the size of every public args struct and the offset of each field, as JSON lines
 * ("struct", "field", offset) — the Python package's ctypes mirror of dsa.h is checked against it. */
#include <stddef.h>
#include <stdio.h>

#include "dsa.h"

#define S(T) printf("{\"struct\": \"%s\", \"size\": %zu}\n", #T, sizeof(T))
#define F(T, m) printf("{\"struct\": \"%s\", \"field\": \"%s\", \"offset\": %zu}\n", #T, #m, offsetof(T, m))

int main(void) {
  S(dsa_indexer_query);
  F(dsa_indexer_query, q); F(dsa_indexer_query, q_dtype); F(dsa_indexer_query, q_scale);
  F(dsa_indexer_query, weights); F(dsa_indexer_query, weights_dtype); F(dsa_indexer_query, weights_stride);
  F(dsa_indexer_query, num_heads); F(dsa_indexer_query, head_dim); F(dsa_indexer_query, softmax_scale);
  S(dsa_index_k_cache);
  F(dsa_index_k_cache, data); F(dsa_index_k_cache, num_pages); F(dsa_index_k_cache, page_size);
  S(dsa_indexer_decode_args);
  F(dsa_indexer_decode_args, query); F(dsa_indexer_decode_args, cache); F(dsa_indexer_decode_args, seq_lens);
  F(dsa_indexer_decode_args, block_table); F(dsa_indexer_decode_args, block_table_stride);
  F(dsa_indexer_decode_args, max_blocks_per_req); F(dsa_indexer_decode_args, num_reqs);
  F(dsa_indexer_decode_args, q_len_per_req); F(dsa_indexer_decode_args, max_seq_len); F(dsa_indexer_decode_args, topk);
  F(dsa_indexer_decode_args, topk_indices); F(dsa_indexer_decode_args, topk_lens);
  F(dsa_indexer_decode_args, workspace_limit);
  S(dsa_indexer_decode_scores_args);
  F(dsa_indexer_decode_scores_args, decode); F(dsa_indexer_decode_scores_args, scores);
  F(dsa_indexer_decode_scores_args, scores_stride); F(dsa_indexer_decode_scores_args, skip_short_rows);
  S(dsa_indexer_prefill_args);
  F(dsa_indexer_prefill_args, query); F(dsa_indexer_prefill_args, cache); F(dsa_indexer_prefill_args, kv_workspace_slots);
  F(dsa_indexer_prefill_args, num_workspace_rows); F(dsa_indexer_prefill_args, row_starts); F(dsa_indexer_prefill_args, row_ends);
  F(dsa_indexer_prefill_args, num_tokens); F(dsa_indexer_prefill_args, max_rows); F(dsa_indexer_prefill_args, topk);
  F(dsa_indexer_prefill_args, output_global_slots); F(dsa_indexer_prefill_args, topk_indices); F(dsa_indexer_prefill_args, topk_lens);
  F(dsa_indexer_prefill_args, workspace_limit);
  S(dsa_indexer_prefill_scores_args);
  F(dsa_indexer_prefill_scores_args, prefill); F(dsa_indexer_prefill_scores_args, scores);
  F(dsa_indexer_prefill_scores_args, scores_stride); F(dsa_indexer_prefill_scores_args, skip_short_rows);
  S(dsa_topk_args);
  F(dsa_topk_args, scores); F(dsa_topk_args, scores_stride); F(dsa_topk_args, num_rows); F(dsa_topk_args, row_lens);
  F(dsa_topk_args, max_len); F(dsa_topk_args, topk); F(dsa_topk_args, indices); F(dsa_topk_args, lens);
  S(dsa_sparse_mla_args);
  F(dsa_sparse_mla_args, q); F(dsa_sparse_mla_args, num_tokens); F(dsa_sparse_mla_args, num_heads);
  F(dsa_sparse_mla_args, kv_cache); F(dsa_sparse_mla_args, kv_format); F(dsa_sparse_mla_args, num_slots);
  F(dsa_sparse_mla_args, kv_stride); F(dsa_sparse_mla_args, indices); F(dsa_sparse_mla_args, indices_stride);
  F(dsa_sparse_mla_args, topk); F(dsa_sparse_mla_args, lens); F(dsa_sparse_mla_args, softmax_scale);
  F(dsa_sparse_mla_args, out); F(dsa_sparse_mla_args, lse);
  S(dsa_index_k_store_args);
  F(dsa_index_k_store_args, k); F(dsa_index_k_store_args, k_stride); F(dsa_index_k_store_args, slot_mapping);
  F(dsa_index_k_store_args, num_tokens); F(dsa_index_k_store_args, cache); F(dsa_index_k_store_args, num_pages);
  F(dsa_index_k_store_args, page_size);
  S(dsa_mla_kv_store_args);
  F(dsa_mla_kv_store_args, kv); F(dsa_mla_kv_store_args, kv_stride); F(dsa_mla_kv_store_args, slot_mapping);
  F(dsa_mla_kv_store_args, num_tokens); F(dsa_mla_kv_store_args, cache); F(dsa_mla_kv_store_args, kv_format);
  F(dsa_mla_kv_store_args, num_slots); F(dsa_mla_kv_store_args, cache_stride);
  S(dsa_shard);
  F(dsa_shard, world_size); F(dsa_shard, rank); F(dsa_shard, layout); F(dsa_shard, block);
  S(dsa_cp_candidates_args);
  F(dsa_cp_candidates_args, shard); F(dsa_cp_candidates_args, scores); F(dsa_cp_candidates_args, scores_stride);
  F(dsa_cp_candidates_args, max_len); F(dsa_cp_candidates_args, local_indices); F(dsa_cp_candidates_args, row_offsets);
  F(dsa_cp_candidates_args, num_rows); F(dsa_cp_candidates_args, topk); F(dsa_cp_candidates_args, cand_scores);
  F(dsa_cp_candidates_args, cand_ids);
  S(dsa_topk_merge_args);
  F(dsa_topk_merge_args, cand_scores); F(dsa_topk_merge_args, cand_ids); F(dsa_topk_merge_args, num_lists);
  F(dsa_topk_merge_args, num_rows); F(dsa_topk_merge_args, k_in); F(dsa_topk_merge_args, topk);
  F(dsa_topk_merge_args, indices); F(dsa_topk_merge_args, lens);
  S(dsa_cp_local_indices_args);
  F(dsa_cp_local_indices_args, shard); F(dsa_cp_local_indices_args, indices); F(dsa_cp_local_indices_args, num_tokens);
  F(dsa_cp_local_indices_args, topk); F(dsa_cp_local_indices_args, block_table);
  F(dsa_cp_local_indices_args, block_table_stride); F(dsa_cp_local_indices_args, max_blocks_per_req);
  F(dsa_cp_local_indices_args, q_len_per_req); F(dsa_cp_local_indices_args, page_size);
  F(dsa_cp_local_indices_args, num_pages); F(dsa_cp_local_indices_args, workspace_slots);
  F(dsa_cp_local_indices_args, num_workspace_rows); F(dsa_cp_local_indices_args, out_slots);
  F(dsa_cp_local_indices_args, out_lens);
  S(dsa_lse_combine_args);
  F(dsa_lse_combine_args, outs); F(dsa_lse_combine_args, parts_dtype); F(dsa_lse_combine_args, lses);
  F(dsa_lse_combine_args, num_parts); F(dsa_lse_combine_args, num_tokens); F(dsa_lse_combine_args, num_heads);
  F(dsa_lse_combine_args, out); F(dsa_lse_combine_args, lse);
  return 0;
}
