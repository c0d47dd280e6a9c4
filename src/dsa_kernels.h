/*
 * dsa_kernels.h — the internal seam between the host API layer (dsa.c: validation, workspace
 * carving, dispatch) and the per-stage CUDA files. Every launcher here receives arguments that
 * dsa.c has already validated, launches on the given stream, and returns a cudaError_t as int
 * (0 = cudaSuccess). No launcher allocates or synchronises.
 */
#ifndef DSA_KERNELS_H
#define DSA_KERNELS_H

#include "dsa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sparse_mla.cu ---- */
/* Scratch bytes the attention call needs for these sizes (host-only arithmetic, no device query;
 * bounded independently of num_tokens). */
size_t dsa_sparse_mla_workspace_impl(const dsa_sparse_mla_args *a);
int dsa_sparse_mla_launch(const dsa_sparse_mla_args *a, void *workspace, cudaStream_t stream);

/* ---- cache_store.cu ---- */
int dsa_index_k_store_launch(const dsa_index_k_store_args *a, cudaStream_t stream);
int dsa_mla_kv_store_launch(const dsa_mla_kv_store_args *a, cudaStream_t stream);


/* ---- shared by indexer_scores.cu and topk.cu: which positions a score row covers ---- */
typedef enum {
  DSA_ROWS_PLAIN = 0,    /* row t has row_lens[t] (or max_len) positions; output = position */
  DSA_ROWS_DECODE = 1,   /* position i of token t -> block-table slot; L from seq_lens */
  DSA_ROWS_PREFILL = 2   /* position i of token t -> workspace row row_starts[t] + i */
} dsa_rows_mode;

/* Everything needed to know, for token t of a launch, its visible length L(t) and what position i
 * maps to. Token indices inside kernels are relative to token_begin (chunked launches). */
typedef struct {
  dsa_rows_mode mode;
  int token_begin;
  int max_len;                   /* clamp on every L (host bound; = scores row capacity) */
  /* plain */
  const int32_t *row_lens;       /* may be NULL: every row has max_len */
  /* decode */
  const int32_t *seq_lens;
  const int32_t *block_table;
  int64_t block_table_stride;
  int max_blocks;
  int q_len_per_req;
  /* prefill */
  const int64_t *ws_slots;
  int64_t num_ws_rows;
  const int32_t *row_starts;
  const int32_t *row_ends;
  int output_global_slots;
  /* the index-K cache's capacity, for slot validity */
  int64_t num_pages;
  int page_size;
} dsa_rows;

/* ---- indexer_scores.cu ---- */
typedef struct {
  dsa_indexer_query q;
  dsa_index_k_cache cache;
  dsa_rows rows;
  int num_tokens;          /* tokens in this launch: token_begin .. token_begin + num_tokens */
  int skip_len;            /* tokens with L <= skip_len are not scored (-1: score all) */
  float *scores;           /* row of launch-token i at scores + i * scores_stride */
  int64_t scores_stride;
} dsa_scores_params;
int dsa_indexer_scores_launch(const dsa_scores_params *p, cudaStream_t stream);

/* ---- topk.cu ---- */
typedef struct {
  const float *scores;     /* row of launch-token i at scores + i * scores_stride */
  int64_t scores_stride;
  dsa_rows rows;
  int num_tokens;
  int topk;
  int32_t *out;            /* row of launch-token i at out + i * topk */
  int32_t *out_lens;       /* may be NULL; indexed like out */
} dsa_topk_params;
/* Scratch for num_rows rows at once (bounded per row). */
size_t dsa_topk_workspace_impl(int num_rows, int topk);
int dsa_topk_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* DSA_KERNELS_H */
