/*
 * kernels.h — the seam between the host layer (host/: checks, planning, the kernel choice, the
 * chunk loops) and the stages' CUDA files. Every launcher here receives arguments the host layer
 * has already checked (pointers aligned, extents that do not overflow, lengths within
 * DSA_MAX_ROW_LEN, per-launch counts within the caps of config.h) and a kernel the stage's choice
 * table (host/choose.c) picked for the shape; it launches on the given stream and returns the
 * launch's own cudaError_t as int (0 = cudaSuccess), never an error the caller left pending. No
 * launcher allocates or synchronises.
 *
 * The seam is also where the CI build cuts: tests/support/stub_kernels.c implements every launcher
 * here without CUDA, checks these preconditions and records the launches, so that the host layer's
 * loops run (and are fuzzed) on a machine without a GPU.
 */
#ifndef DSA_KERNELS_H
#define DSA_KERNELS_H

#include "config.h"
#include "dsa.h"
#include "host/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the kernels each stage's choice table picks from (host/choose.c; DSA_KERNEL names them) ---- */
typedef enum {
  DSA_INDEXER_SEPARATE = 1, /* the scorer (dsa_scores_kernel) writes scores, then the top-k kernel */
  DSA_INDEXER_FUSED = 2     /* decode: scores and top-k in one kernel (indexer/scores_wgmma.cu); prefill:
                               sampled threshold, filtered scores, exact select (indexer/prefill_select.cu) */
} dsa_indexer_kernel;
typedef enum {
  DSA_SCORES_MMA = 1,       /* indexer/scores_mma.cu: mma.sync, keys as M, cp.async per warp */
  DSA_SCORES_WGMMA = 2,     /* indexer/scores_wgmma.cu: warp-specialised wgmma, keys by cp.async */
  DSA_SCORES_WGMMA_TMA = 3  /* the same kernel, decode pages by one TMA tensor copy each */
} dsa_scores_kernel;
typedef enum {
  DSA_TOPK_REGISTERS = 1,   /* topk/registers.cu: one 1,024-thread CTA a row, keys in registers */
  DSA_TOPK_SLICES = 2,      /* topk/slices.cu: a row in shared memory, one CTA or a cluster a row */
  DSA_TOPK_CHAIN = 3        /* topk/chain.cu: histogram, filter, resolve over a workspace */
} dsa_topk_kernel;
typedef enum {
  DSA_ATTN_MMA_SPLIT = 1,   /* attention/mma_split.cu: mma.sync, split partials + combine kernel */
  DSA_ATTN_ROWS_AS_M = 2,   /* attention/rows_as_m.cu: wgmma, KV rows as M, splits merged in a cluster */
  DSA_ATTN_HEADS_AS_M = 3,  /* attention/heads_as_m.cu: wgmma, 64 heads as M, warp-specialised */
  DSA_ATTN_SEESAW = 4,      /* attention/heads_as_m.cu with the seesaw consumers: two warpgroups alternate
                               chunks' QK and softmax, each its O half */
  DSA_ATTN_TOKEN_GROUPS = 5 /* attention/heads_as_m.cu over token groups: at H <= 32 heads, 64 / H
                               neighbouring tokens as one CTA's 64 rows over the union of their index
                               lists (attention/token_groups.cu) */
} dsa_attention_kernel;

typedef enum {
  DSA_MERGE_SELECT = 1,     /* cp/pieces.cu: one 1,024-thread CTA a row, radix select, the ids sorted */
  DSA_MERGE_RUNS = 2,       /* cp/merge_runs.cu: a cluster a row, the lists' ascending runs merged */
  DSA_MERGE_TREE = 3        /* cp/merge_tree.cu: one CTA a row, the runs merged pairwise */
} dsa_merge_kernel;

/* ---- shared by indexer/ and topk/: which positions a score row covers ---- */
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
  int max_len;                   /* clamp on every L (host bound <= DSA_MAX_ROW_LEN; = scores row capacity) */
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

/* ---- indexer/: scores of one launch's tokens ---- */
typedef struct {
  dsa_indexer_query q;
  dsa_index_k_cache cache;
  dsa_rows rows;
  int num_sms;             /* of the current device: sizes the grid */
  int num_tokens;          /* tokens in this launch: token_begin .. token_begin + num_tokens */
  int skip_len;            /* tokens with L <= skip_len are not scored (-1: score all) */
  float *scores;           /* row of launch-token i at scores + i * scores_stride */
  int64_t scores_stride;
  int fill_tail;           /* 1: positions [L, rows.max_len) of every row get -inf (the scores-only
                              calls); 0: only [0, L) is written (the indexer's own workspace) */
  dsa_scores_kernel kernel;   /* the choice table's (dsa_choose_scores) */
  dsa_scores_kernel fallback; /* WGMMA_TMA only: the scorer when the driver gives no tensor map */
} dsa_scores_params;
int dsa_scores_launch(const dsa_scores_params *p, cudaStream_t stream);

/* ---- indexer/: scores and exact top-k of one decode launch in one kernel ---- */
typedef struct {
  int topk;
  int32_t *out;            /* row of launch-token i at out + i * topk */
  int32_t *out_lens;       /* may be NULL; indexed like out */
  void *ctl;               /* DSA_FUSED_CTL_BYTES(num_tokens, requests) bytes of workspace, 256-B aligned */
} dsa_fused_topk;
/* p as for dsa_scores_launch (decode; p->scores unused; p->skip_len = topk), f the top-k's outputs.
 * Returns DSA_FUSED_DECLINED, launching nothing, where the shape does not fit the fused kernel (its
 * CTAs not all resident at once, a row's scores not in shared memory, no wgmma scorer for it): the
 * caller then runs the separate scorer and top-k. */
#define DSA_FUSED_DECLINED (-2)
int dsa_indexer_fused_launch(const dsa_scores_params *p, const dsa_fused_topk *f, cudaStream_t stream);

/* ---- indexer/: the fused prefill indexer (prefill_select.cu), one launch's tokens ---- */
typedef struct {
  int topk;
  int32_t *out;              /* row of launch-token i at out + i * topk */
  int32_t *out_lens;         /* may be NULL; indexed like out */
  unsigned long long *tau;   /* [num_tokens] (workspace) */
  uint32_t *count;           /* [num_tokens] (workspace) */
  unsigned long long *cand;  /* [num_tokens][cap] (workspace) */
  int cap;                   /* dsa_prefill_fused_plan.cap */
  float *sample;             /* [num_tokens][sample_len] (workspace); NULL when sample_len is 0 */
  int64_t sample_len;
} dsa_prefill_select;
/* p as for dsa_scores_launch (prefill, FP8 q, the wgmma scorer, skip_len = topk, no fill_tail; p->scores
 * unused), s the launch's outputs and state (dsa_plan_prefill_fused's layout): the sample scores, the
 * thresholds, the filtered scoring and the exact select, in four launches. */
int dsa_indexer_prefill_fused_launch(const dsa_scores_params *p, const dsa_prefill_select *s, cudaStream_t stream);

/* ---- topk/ ---- */
typedef struct {
  const float *scores;     /* row of launch-token i at scores + i * scores_stride */
  int64_t scores_stride;
  dsa_rows rows;
  int num_tokens;
  int topk;
  int32_t *out;            /* row of launch-token i at out + i * topk */
  int32_t *out_lens;       /* may be NULL; indexed like out */
  int num_sms;             /* of the current device */
  dsa_topk_kernel kernel;  /* the choice table's (dsa_choose_topk) */
  int cluster;             /* SLICES: CTAs a row, one cluster (1, 2, 4 or 8) */
} dsa_topk_params;
/* workspace: dsa_topk_ws_layout(num_tokens).total bytes (the chain's; the others need none). */
int dsa_topk_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream);
/* Deferred resolve for long rows (> DSA_TOPK_ONE_CTA_MAX_LEN) scored a chunk at a time, on the
 * chain's kernels: a group of ws_rows tokens shares one top-k workspace (dsa_topk_ws_layout(ws_rows));
 * each chunk's p (its scores, rows.token_begin, out, num_tokens) goes to dsa_topk_chunk_launch with
 * its first row's place in the group (row0); then the group's p (no scores read) to
 * dsa_topk_final_launch. */
int dsa_topk_chunk_launch(const dsa_topk_params *p, void *workspace, int ws_rows, int row0, cudaStream_t stream);
int dsa_topk_final_launch(const dsa_topk_params *p, void *workspace, int ws_rows, cudaStream_t stream);

/* ---- attention/: runs a plan (host/plan.c) on the kernel it names ---- */
int dsa_attention_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *plan, void *workspace,
                         cudaStream_t stream);

/* ---- cache/store.cu ---- */
int dsa_index_k_store_launch(const dsa_index_k_store_args *a, cudaStream_t stream);
int dsa_mla_kv_store_launch(const dsa_mla_kv_store_args *a, cudaStream_t stream);

/* ---- cp/: context parallelism's single-GPU pieces (arguments as checked by host/api_cp.c) ---- */
int dsa_cp_candidates_launch(const dsa_cp_candidates_args *a, cudaStream_t stream);
/* num_rows >= 1; kernel: a dsa_merge_kernel (DSA_MERGE_RUNS: num_lists <= DSA_MERGE_RUNS_MAX_LISTS,
 * num_rows x ceil(num_lists x k_in / DSA_MERGE_RUNS_SLICE) <= 2^31 - 1) */
int dsa_topk_merge_launch(const dsa_topk_merge_args *a, int kernel, cudaStream_t stream);
int dsa_cp_local_indices_launch(const dsa_cp_local_indices_args *a, cudaStream_t stream);
int dsa_lse_combine_launch(const dsa_lse_combine_args *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

/* ---- within a stage: the dispatch files' kernel launchers (not part of the seam the stubs
 * implement) ---- */
#ifdef __cplusplus
extern "C" {
#endif
int dsa_scores_mma_launch(const dsa_scores_params *p, cudaStream_t stream);
int dsa_scores_wgmma_launch(const dsa_scores_params *p, cudaStream_t stream);
/* WGMMA_TMA: returns DSA_SCORES_NO_TENSOR_MAP (and launches nothing) where the driver gives no
 * tensor map, so that the dispatch runs p->fallback. */
#define DSA_SCORES_NO_TENSOR_MAP (-1)
int dsa_scores_wgmma_tma_launch(const dsa_scores_params *p, cudaStream_t stream);
/* The fused prefill indexer's two scoring passes on the FP8 wgmma scorer (scores_wgmma.cu): the
 * sample tiles' scores into s->sample, then every key at or above its token's threshold into the
 * token's candidate list (prefill_select.cu runs them). */
int dsa_scores_wgmma_sample_launch(const dsa_scores_params *p, const dsa_prefill_select *s, cudaStream_t stream);
int dsa_scores_wgmma_filter_launch(const dsa_scores_params *p, const dsa_prefill_select *s, cudaStream_t stream);
int dsa_topk_registers_launch(const dsa_topk_params *p, cudaStream_t stream);
int dsa_topk_slices_launch(const dsa_topk_params *p, int cluster, cudaStream_t stream);
int dsa_topk_chain_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream);
int dsa_attention_mma_split_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *plan, void *workspace,
                                   cudaStream_t stream);
int dsa_attention_rows_as_m_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *plan, cudaStream_t stream);
/* workspace: the plan's converted rows (convert_rows), else unused */
int dsa_attention_heads_as_m_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *plan, void *workspace,
                                    cudaStream_t stream);
/* token groups (heads_as_m.cu): the unions (token_groups.cu) and the attention, a launch of each per
 * plan->tg_groups groups */
int dsa_attention_token_groups_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *plan, void *workspace,
                                      cudaStream_t stream);
/* gate: NULL, or a device word the launch runs only where it is nonzero (the selected rows' gated launches) */
int dsa_attention_tg_union_launch(const dsa_sparse_mla_args *a, int64_t group0, int64_t groups,
                                  const dsa_tg_layout *lay, void *workspace, const int *gate, cudaStream_t stream);
int dsa_topk_merge_runs_launch(const dsa_topk_merge_args *a, cudaStream_t stream);
int dsa_topk_merge_tree_launch(const dsa_topk_merge_args *a, cudaStream_t stream);
#ifdef __cplusplus
}
#endif
#endif /* DSA_KERNELS_H */
