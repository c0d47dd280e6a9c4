/*
 * config.h — compile-time constants shared by the host layer (host/: checks, planning, the kernel
 * choice) and the kernels. Plain C; included from both sides of the seam (kernels.h) so that a
 * workspace the host sizes is exactly the workspace a kernel carves, and a shape the choice table
 * routes to a kernel is one that kernel takes. Data layouts: common/layout.h.
 */
#ifndef DSA_CONFIG_H
#define DSA_CONFIG_H

#include <stdint.h>

/* ---- indexer chunking (host/plan.c) ---- */
/* Score scratch of the fastest plan: as many tokens' rows as fit in this many float32 (256 MiB), at
 * least one request's (a request's tokens are never split across launches). A caller's
 * workspace_limit below that plan's total takes the capped plan instead (long rows whose scores do
 * not all fit are scored a chunk at a time and resolved once a group: topk/chain.cu). */
#define DSA_SCORE_CAP_ELEMS ((int64_t)64 * 1024 * 1024)
/* Top-k scratch is per row (~144 KiB), so rows per launch (and per deferred group) are capped. */
#define DSA_TOPK_ROWS_PER_LAUNCH 256
/* A deferred group is halved while its chunks would hold fewer tokens than this (the scorer's
 * token groups are 8-16 wide). */
#define DSA_DEFERRED_MIN_CHUNK 8
/* Scores-only launches: grid.y bound (65535 token groups), a multiple of every q_len_per_req 1..8. */
#define DSA_SCORE_TOKENS_PER_LAUNCH 32760

/* ---- top-k (topk/) ---- */
#define TK_BINS 2048            /* first-digit histogram: the top 11 bits of the score key */
#define TK_CHUNK 8192           /* positions per histogram / filter CTA (the chain) */
#define TK_CAND_CAP 32768       /* candidates kept per row (positions, in the workspace: the chain) */
#define TK_HDR (TK_BINS + 8)    /* uint32 per row: histogram + the row's counters (the chain) */
/* The registers kernel: one CTA of 1,024 threads a row holds at most this many keys. */
#define DSA_TOPK_REGISTERS_MAX_LEN 16384
/* The slices kernel: a row of one CTA keeps up to DSA_TOPK_ONE_CTA_MAX_LEN positions in shared
 * memory; a cluster of up to DSA_TOPK_MAX_CLUSTER CTAs takes slices of up to DSA_TOPK_SLICE_MAX.
 * Longer rows run the chain, whose resolve can be deferred (host/plan.c). */
#define DSA_TOPK_ONE_CTA_MAX_LEN 40960
#define DSA_TOPK_SLICE_MAX 16384
#define DSA_TOPK_MAX_CLUSTER 8

/* ---- the fused indexer (indexer/fused_topk.cuh): scores and top-k in one decode kernel ---- */
/* A request's row spans at most this many CTAs (two an SM on 132 SMs); a launch needing more runs
 * the separate scorer and top-k. */
#define DSA_FUSED_MAX_CTAS 264
/* The first digit's threshold bin is resolved from its elements gathered in the workspace when it
 * holds at most this many (else by two more digit passes over the keys). */
#define DSA_FUSED_CAND 4096
/* Its control block in the indexer workspace: a 32-byte barrier counter per request (zeroed by the
 * launcher before each launch), then per token three digit histograms, a candidate count (+ pad),
 * each CTA's (above, equal) counts and the candidates (64-bit) — O(histograms + candidates),
 * whatever the row's length. */
#define DSA_FUSED_BAR_BYTES 32
#define DSA_FUSED_TOKEN_WORDS (3 * TK_BINS + 4 + 2 * DSA_FUSED_MAX_CTAS + 2 * DSA_FUSED_CAND)
#define DSA_FUSED_CTL_BYTES(tokens, groups) \
  ((((size_t)(groups) * DSA_FUSED_BAR_BYTES + 255) & ~(size_t)255) + (size_t)(tokens) * DSA_FUSED_TOKEN_WORDS * 4)

/* ---- the fused prefill indexer (indexer/prefill_select.cu): scores never stored whole ---- */
/* One 64-key tile in DSA_PREFILL_SAMPLE_STRIDE (a power of two) is scored first; the k-th largest of
 * those scores bounds the k-th of the row from below, so the full scoring keeps only keys at or above
 * it: about stride x topk candidates a token, whatever the row's length. */
#define DSA_PREFILL_SAMPLE_STRIDE 16
#define DSA_PREFILL_SAMPLE_SHIFT 10 /* log2(64 x DSA_PREFILL_SAMPLE_STRIDE): key coordinate -> sample tile */
/* What a token keeps (host/plan.c, dsa_plan_prefill_fused): 1.5 x stride x topk candidates, and at
 * least enough that a longer row always has topk scores in its sample; rows no longer than that keep
 * every key (no sample). A token with more candidates (an adversarial order of scores) is resolved
 * exactly by a slow rescoring pass. The default plan's workspace (tokens a launch chosen to fit; at
 * least one token): */
#define DSA_PREFILL_FUSED_BUDGET ((size_t)64 << 20)
#define DSA_PREFILL_FUSED_MAX_CHUNK 32752 /* tokens a launch at most: a multiple of 16 within DSA_SCORE_TOKENS_PER_LAUNCH */

/* ---- sparse MLA attention (attention/) ---- */
#define MLA_BLOCK_N 64          /* index entries per chunk (and per split block) */
/* The split plan shapes work for at most this many SMs (every sm_90 part has <= 132); the
 * workspace size query assumes it, so a workspace sized once fits every sm_90 device. */
#define DSA_PLAN_MAX_SMS 132
/* The slots an attention kernel addresses: indices are int32, so num_slots past 2^31 changes nothing
 * (mla_slots_cap); the seesaw's converted rows (host/plan.c) count as many. */
#define DSA_ATTN_SLOTS_CAP ((int64_t)1 << 31)

/* ---- context parallelism's merge (cp/) ---- */
/* The runs kernel (cp/merge_runs.cu) gives a CTA this many of a row's candidates (a cluster of up to
 * 8 CTAs a row) and takes rows of at most this many lists (its placing searches every other list). */
#define DSA_MERGE_RUNS_SLICE 2048
#define DSA_MERGE_RUNS_MAX_LISTS 8
/* Its threads a CTA (256 or 512; the slice split evenly among them, 8 or 4 candidates a thread). 512:
 * one token at W = 8 15.7 us against 20.0 with 256 (the path a warp runs is shorter; 2026-12-05,
 * before the placing's search was shortened); 256 was faster only at thousands of rows, where select
 * is chosen anyway but at two lists (4096 rows x 2 lists 431 against 542 us then). A dev build may
 * set the other (-DDSA_MERGE_RUNS_THREADS=256). */
#ifndef DSA_MERGE_RUNS_THREADS
#define DSA_MERGE_RUNS_THREADS 512
#endif

#endif /* DSA_CONFIG_H */
