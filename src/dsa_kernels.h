/*
 * dsa_kernels.h — the internal seam between the host API layer (dsa.c: validation, workspace
 * carving, dispatch) and the per-stage CUDA files. Every launcher here receives arguments that
 * dsa.c has already validated (pointers aligned, extents that do not overflow, lengths within
 * DSA_MAX_ROW_LEN, per-launch counts within the DSA_*_PER_LAUNCH caps of config.h), launches on
 * the given stream, and returns the launch's own cudaError_t as int (0 = cudaSuccess): never an
 * error the caller left pending. No launcher allocates or synchronises.
 *
 * The seam is also where the CI build cuts: tests/stub_kernels.c implements every function here
 * without CUDA, checks these preconditions and records the launches, so that the chunk loops of
 * dsa.c run (and are fuzzed) on a machine without a GPU.
 */
#ifndef DSA_KERNELS_H
#define DSA_KERNELS_H

#include "config.h"
#include "dsa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device.c: the CUDA runtime facts the host layer needs ---- */
typedef struct {
  int ordinal;      /* the current device */
  int num_sms;      /* its multiprocessor count */
  int cc_major, cc_minor;
} dsa_device_info;
/* The current device's facts (cached per device after the first query). Returns a cudaError_t. */
int dsa_device_query(dsa_device_info *info);
/* 1 when a CUDA error means "no usable device" (none, driver too old, no kernel image). */
int dsa_cuda_error_is_no_device(int err);
const char *dsa_cuda_error_string(int err);

/* ---- plan.c: host-only planning shared by the real launchers and the stubs ---- */
/* Sparse MLA: one CTA per (token, head group of 16*mt heads, split of the index list). */
typedef enum {
  DSA_MLA_KERNEL_MMA = 0,   /* v1, sparse_mla/v1_mma.cu: mma.sync, split partials + combine kernel */
  DSA_MLA_KERNEL_SM90 = 1,  /* v2, sparse_mla/v2_sm90.cu: wgmma, rows as M, splits merged in a cluster */
  DSA_MLA_KERNEL_V3 = 2     /* v3, sparse_mla/v3_sm90.cu: wgmma, 64 heads as M, splits merged in a cluster */
} dsa_mla_kernel;
typedef struct {
  int kernel;           /* dsa_mla_kernel */
  int mt;               /* heads per CTA / 16: v1 1, 2 or 4; v2 1 or 2; v3 4 */
  int groups;           /* head groups per token */
  int num_blocks;       /* MLA_BLOCK_N-entry blocks of topk */
  int splits;           /* CTAs per (token, group); v1: > 1 needs the workspace and a combine;
                           v2 and v3: the cluster size (<= 8), no workspace */
  int blocks_per_split;
} dsa_mla_plan;
/* The version measured faster for a shape on the H200 (docs/PERF.md, 2026-11-30): v3 for > 32 heads
 * once tokens x ceil(heads / 64) >= MLA_V3_MIN_UNITS (8); else v2 for packed FP8 KV, <= 64 heads,
 * >= 32 tokens and at most two waves of v2 CTAs; v1 elsewhere. */
int dsa_mla_choose_kernel(const dsa_sparse_mla_args *a, int num_sms);
/* kernel: which version to plan for. */
dsa_mla_plan dsa_mla_make_plan(const dsa_sparse_mla_args *a, int num_sms, int kernel);
/* Scratch bytes a plan needs: the split partials (0 for one split). */
size_t dsa_mla_plan_workspace(const dsa_sparse_mla_args *a, const dsa_mla_plan *pl);
/* What dsa_sparse_mla_workspace_size reports: the most any plan for <= DSA_PLAN_MAX_SMS SMs
 * needs, so it is known without a device and holds on every sm_90 part. */
size_t dsa_mla_workspace_bound(const dsa_sparse_mla_args *a);

/* Top-k scratch for num_rows rows at once (bounded per row), and where its parts start. */
typedef struct {
  size_t hist_off;   /* [rows][TK_HDR] uint32 */
  size_t above_off;  /* [rows][DSA_MAX_TOPK] int32 */
  size_t cand_off;   /* [rows][TK_CAND_CAP] int32 */
  size_t total;
} dsa_topk_layout;
dsa_topk_layout dsa_topk_ws_layout(int num_rows);

/* ---- sparse_mla/: launch.cu runs a plan on its kernel (v2 -> v1 when no cluster can be formed) ---- */
int dsa_sparse_mla_launch(const dsa_sparse_mla_args *a, const dsa_mla_plan *plan, void *workspace,
                          cudaStream_t stream);
int dsa_sparse_mla_v1_launch(const dsa_sparse_mla_args *a, const dsa_mla_plan *plan, void *workspace,
                             cudaStream_t stream);
int dsa_sparse_mla_v2_launch(const dsa_sparse_mla_args *a, const dsa_mla_plan *plan, cudaStream_t stream);
int dsa_sparse_mla_v3_launch(const dsa_sparse_mla_args *a, const dsa_mla_plan *plan, cudaStream_t stream);

/* ---- cache_store.cu ---- */
int dsa_index_k_store_launch(const dsa_index_k_store_args *a, cudaStream_t stream);
int dsa_mla_kv_store_launch(const dsa_mla_kv_store_args *a, cudaStream_t stream);


/* ---- shared by indexer_scores/ and topk.cu: which positions a score row covers ---- */
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

/* ---- indexer_scores/ (launch.cu dispatches: v1_mma.cu, v2_fp8_wgmma.cu) ---- */
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
  int kernel;              /* 0: the library's choice (v3 for prefill, v3t for FP8-q decode, else
                              v1); 1: v1 (mma.sync); 2: v2 (FP8 wgmma, FP8 q only); 3: v3 (wgmma,
                              warp-specialised: e4m3 for FP8 q, f16 for bf16 q); 5: v3 with decode
                              pages by TMA (v3t) (DSA_INDEXER_KERNEL) */
} dsa_scores_params;
int dsa_indexer_scores_launch(const dsa_scores_params *p, cudaStream_t stream);
int dsa_indexer_scores_v1_launch(const dsa_scores_params *p, cudaStream_t stream);
int dsa_indexer_scores_v2_launch(const dsa_scores_params *p, cudaStream_t stream);
int dsa_indexer_scores_v3_launch(const dsa_scores_params *p, cudaStream_t stream);
int dsa_indexer_scores_v3t_launch(const dsa_scores_params *p, cudaStream_t stream);

/* ---- topk.cu ---- */
typedef struct {
  const float *scores;     /* row of launch-token i at scores + i * scores_stride */
  int64_t scores_stride;
  dsa_rows rows;
  int num_tokens;
  int topk;
  int32_t *out;            /* row of launch-token i at out + i * topk */
  int32_t *out_lens;       /* may be NULL; indexed like out */
  int num_sms;             /* of the current device: few long rows go to one cluster each */
  int allow_cluster;       /* 0: never the cluster path (DSA_TOPK_CLUSTER=0, tests of the chain);
                              N >= 1: clusters while rows x C <= N x SMs (DSA_TOPK_CLUSTER=N, default 1) */
  int allow_small;         /* 1: rows up to 16,384 on the one-CTA register kernel (default; 0 with
                              DSA_TOPK_SMALL=0: the slices kernel, for tests and comparisons) */
} dsa_topk_params;
/* workspace: dsa_topk_ws_layout(num_tokens).total bytes. */
int dsa_topk_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream);
/* Deferred resolve for long rows (> DSA_TOPK_ONE_CTA_MAX_LEN) scored a chunk at a time: a group of
 * ws_rows tokens shares one top-k workspace (dsa_topk_ws_layout(ws_rows)); each chunk's p (its
 * scores, rows.token_begin, out, num_tokens) goes to dsa_topk_chunk_launch with its first row's
 * place in the group (row0); then the group's p (no scores read) to dsa_topk_final_launch. */
int dsa_topk_chunk_launch(const dsa_topk_params *p, void *workspace, int ws_rows, int row0, cudaStream_t stream);
int dsa_topk_final_launch(const dsa_topk_params *p, void *workspace, int ws_rows, cudaStream_t stream);

/* ---- cp.cu: context parallelism's single-GPU pieces (arguments as validated by dsa.c) ---- */
int dsa_cp_candidates_launch(const dsa_cp_candidates_args *a, cudaStream_t stream);
/* num_rows >= 1; shared memory num_lists * k_in * 8 bytes (<= 128 KiB) + 9 KiB */
int dsa_topk_merge_launch(const dsa_topk_merge_args *a, cudaStream_t stream);
int dsa_cp_local_indices_launch(const dsa_cp_local_indices_args *a, cudaStream_t stream);
int dsa_lse_combine_launch(const dsa_lse_combine_args *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* DSA_KERNELS_H */
