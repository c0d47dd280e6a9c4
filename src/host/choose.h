/*
 * host/choose.h — which kernel runs a launch: one choice table per stage (host/choose.c), each the
 * shape -> kernel rule in one function with the H200 measurement behind every row, and the one
 * override, DSA_KERNEL, read from the environment once per process:
 *
 *   DSA_KERNEL=scores:mma,topk:chain,attention:heads_as_m    (any subset of the stages, any order)
 *     indexer    fused | separate      (decode: scores and top-k in one kernel, prefill: the sampled
 *                                      fused indexer; or the two below)
 *     scores     mma | wgmma | wgmma_tma
 *     topk       registers | slices | chain
 *     attention  mma_split | rows_as_m | heads_as_m | seesaw
 *     merge      select | runs         (context parallelism's dsa_topk_merge)
 *
 * A forced kernel runs wherever it can take the shape; elsewhere the stage's table decides as if
 * nothing were forced (the table says where). A malformed value fails every call that launches a
 * stage's kernel with DSA_ERR_INVALID_VALUE naming it (dsa_choose_ready); nothing runs on a guess.
 */
#ifndef DSA_CHOOSE_H
#define DSA_CHOOSE_H

#include "dsa.h"
#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* DSA_OK when the override (if any) parsed; else its message for call fn. */
dsa_status dsa_choose_ready(const char *fn);

/* Stage 1, indexer scores: p->kernel (and p->fallback) for a scoring launch (q, cache, rows set). */
void dsa_choose_scores(dsa_scores_params *p);
/* Stages 1 + 2 of a decode launch: DSA_INDEXER_FUSED (dsa_indexer_fused_launch on p's scorer) or
 * DSA_INDEXER_SEPARATE, for a scoring launch already chosen by dsa_choose_scores. */
int dsa_choose_indexer(const dsa_scores_params *p);
/* Stages 1 + 2 of a prefill call (p: its scoring over all its tokens, chosen by dsa_choose_scores,
 * skip_len = topk): DSA_INDEXER_FUSED (dsa_indexer_prefill_fused_launch) or DSA_INDEXER_SEPARATE,
 * given the separate plan's fastest workspace and the caller's workspace_limit (0: none). */
int dsa_choose_prefill_indexer(const dsa_scores_params *p, size_t separate_bytes, size_t budget);
/* Stage 2, top-k: p->kernel and p->cluster for a launch's rows (rows, num_tokens, topk, num_sms set). */
void dsa_choose_topk(dsa_topk_params *p);
/* Stage 3, attention: the kernel (dsa_attention_kernel) for a call (the same on every device: the
 * plans fit the split to the device); token_groups = 0: the choice where the workspace cannot hold
 * token groups' unions or the seesaw's converted rows (a kernel that needs none, unless DSA_KERNEL
 * forces one). */
int dsa_choose_attention(const dsa_sparse_mla_args *a, int token_groups);
/* Stage 3 with packed FP8 KV: 1 where `kernel`'s call converts the cache's rows into the workspace first
 * (heads_as_m and token groups when the rows are read many times over, the seesaw always), given the
 * workspace (dsa_plan_attention_workspace_bound). */
int dsa_choose_attention_convert(const dsa_sparse_mla_args *a, int kernel);

/* Context parallelism's merge (dsa_topk_merge): a dsa_merge_kernel for checked args a. */
int dsa_choose_merge(const dsa_topk_merge_args *a);

/* Tests and dsa-bench merge: parse spec as if it were DSA_KERNEL (NULL: none) and use it from now on
 * in this process. */
void dsa_choose_override(const char *spec);

#ifdef __cplusplus
}
#endif
#endif /* DSA_CHOOSE_H */
