/*
 * dsa_cp.h — one DSA decode or prefill step over the W GPUs of a context-parallel group, through NCCL on the
 * caller's communicator and stream (DESIGN.md §9). Optional: libdsa_cp is built only where NCCL is
 * found, and links libdsa. Every rank calls dsa_cp_decode with its own shard (dsa.h "Context
 * parallelism": round robin or blocks) — its index-K and KV caches and block table hold the
 * positions it owns, addressed by local position — and the same query; every rank gets the whole
 * result.
 *
 * The step, on `stream`:
 *   1. local indexer   each token's local row (the owned positions below its L; an MTP token is a
 *                      row of its own), scores (dsa_indexer_decode_scores), local top-k (dsa_topk),
 *                      candidates (dsa_cp_candidates): topk (score, global position) pairs a token;
 *   2. exchange        ncclAllGather of the candidates (W x tokens x topk x 8 bytes);
 *   3. merge           dsa_topk_merge (exactly the one-GPU top-k), dsa_cp_local_indices;
 *   4. attention       dsa_sparse_mla over the selected rows this rank owns: partial out and lse;
 *   5. exchange        ncclAllGather of the partials (W x tokens x heads x (1 KiB + 4 bytes));
 *   6. combine         dsa_lse_combine.
 * stage_events (optional): 7 events, recorded before stage 1 and after each stage (profiling).
 *
 * The step's own arguments (shard against the communicator, sizes, required pointers) and the
 * attention call's are checked before anything is launched; the indexer calls check theirs when
 * stage 1 reaches them. A failure returns its status with the message in dsa_last_error() (the
 * failing library call's own message inside it), as every dsa call. A rank that returns an error before its first all-gather leaves the others
 * waiting in theirs (every rank should pass the same shapes); after any failure, abort the
 * communicator (ncclCommAbort) as NCCL's docs say.
 */
#ifndef DSA_CP_H
#define DSA_CP_H

#include <nccl.h>

#include "dsa.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSA_CP_STAGES 6

typedef struct {
  dsa_shard shard;               /* world_size = the communicator's size, rank = its rank */
  /* indexer (as dsa_indexer_decode_args, but the lengths are global and the cache the rank's) */
  dsa_indexer_query query;       /* all num_reqs * q_len_per_req tokens, the same on every rank */
  dsa_index_k_cache index_cache; /* the rank's: its owned positions */
  const int32_t *seq_lens;       /* [num_reqs] global lengths L (token j of n sees L - (n-1) + j) */
  const int32_t *block_table;    /* [num_reqs, block_table_stride]: local position p -> page
                                    block_table[r * stride + p / page_size] of both caches */
  int64_t block_table_stride;
  int max_blocks_per_req;
  int num_reqs;
  int q_len_per_req;             /* 1..DSA_MAX_Q_LEN_PER_REQ */
  int max_seq_len;               /* host bound on every global L, 1..DSA_MAX_ROW_LEN */
  int topk;                      /* 1..DSA_MAX_TOPK */
  /* attention */
  const void *q_attn;            /* [num_tokens, num_heads, 576] bf16, the same on every rank */
  int num_heads;                 /* 1..DSA_MAX_ATTN_HEADS */
  const void *kv_cache;          /* the rank's, slots page * page_size + offset as index_cache */
  dsa_kv_format kv_format;
  int64_t kv_num_slots;
  int64_t kv_stride;             /* bf16 KV: elements between rows */
  float softmax_scale;
  /* outputs, every rank */
  void *out;                     /* [num_tokens, num_heads, 512] bf16 */
  float *lse;                    /* [num_tokens, num_heads] or NULL */
  int32_t *topk_positions;       /* [num_tokens, topk] global positions, ascending, -1 after lens; or NULL */
  int32_t *topk_lens;            /* [num_tokens] or NULL */
  cudaEvent_t *stage_events;     /* NULL or DSA_CP_STAGES + 1 events */
} dsa_cp_decode_args;

DSA_API dsa_status dsa_cp_decode_workspace_size(const dsa_cp_decode_args *args, size_t *bytes);
DSA_API dsa_status dsa_cp_decode(const dsa_cp_decode_args *args, ncclComm_t comm, void *workspace,
                                 size_t workspace_bytes, cudaStream_t stream);

/* Prefill: token t sees the global workspace rows [row_starts[t], row_ends[t]) (clamped as
 * dsa_indexer_prefill clamps them: to [0, num_workspace_rows) and to max_rows rows); the rank holds
 * the rows it owns as its local workspace (kv_workspace_slots: local row -> its cache slot). Stage 1
 * runs a chunk of tokens at a time (scores of at most 256 MiB); the rest as decode. The output
 * positions are global workspace rows. */
typedef struct {
  dsa_shard shard;
  dsa_indexer_query query;           /* all num_tokens tokens, the same on every rank */
  dsa_index_k_cache index_cache;     /* the rank's */
  const int64_t *kv_workspace_slots; /* [num_local_rows]: the rank's rows (its owned global rows in order) */
  int64_t num_local_rows;
  int64_t num_workspace_rows;        /* global rows, 0..DSA_MAX_ROW_LEN */
  const int32_t *row_starts;         /* [num_tokens] global rows */
  const int32_t *row_ends;           /* [num_tokens] */
  int num_tokens;
  int max_rows;                      /* host bound on row_ends - row_starts; 0 = num_workspace_rows */
  int topk;
  const void *q_attn;                /* [num_tokens, num_heads, 576] bf16 */
  int num_heads;
  const void *kv_cache;              /* the rank's */
  dsa_kv_format kv_format;
  int64_t kv_num_slots;
  int64_t kv_stride;
  float softmax_scale;
  void *out;                         /* [num_tokens, num_heads, 512] bf16 */
  float *lse;                        /* or NULL */
  int32_t *topk_positions;           /* [num_tokens, topk] global rows, ascending; or NULL */
  int32_t *topk_lens;                /* or NULL */
  cudaEvent_t *stage_events;         /* NULL or DSA_CP_STAGES + 1 events */
} dsa_cp_prefill_args;

DSA_API dsa_status dsa_cp_prefill_workspace_size(const dsa_cp_prefill_args *args, size_t *bytes);
DSA_API dsa_status dsa_cp_prefill(const dsa_cp_prefill_args *args, ncclComm_t comm, void *workspace,
                                  size_t workspace_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* DSA_CP_H */
