/*
 * config.h — compile-time constants shared by the host layer (dsa.c, plan.c: validation, chunking,
 * workspace sizes) and the kernels (*.cu). Plain C; included from both sides of the seam so that a
 * workspace the host sizes is exactly the workspace a kernel carves.
 */
#ifndef DSA_CONFIG_H
#define DSA_CONFIG_H

#include <stdint.h>

/* ---- indexer chunking (dsa.c) ---- */
/* Score scratch of the fastest plan: as many tokens' rows as fit in this many float32 (256 MiB), at
 * least one request's (a request's tokens are never split across launches). A caller's
 * workspace_limit below that plan's total takes the capped plan instead (dsa.c: long rows whose
 * scores do not all fit are scored a chunk at a time and resolved once a group, topk.cu). */
#define DSA_SCORE_CAP_ELEMS ((int64_t)64 * 1024 * 1024)
/* Top-k scratch is per row (~144 KiB), so rows per launch (and per deferred group) are capped. */
#define DSA_TOPK_ROWS_PER_LAUNCH 256
/* A deferred group is halved while its chunks would hold fewer tokens than this (the scorer's
 * token groups are 8-16 wide). */
#define DSA_DEFERRED_MIN_CHUNK 8
/* Scores-only launches: grid.y bound (65535 token groups), a multiple of every q_len_per_req 1..8. */
#define DSA_SCORE_TOKENS_PER_LAUNCH 32760

/* ---- top-k (topk.cu) ---- */
#define TK_BINS 2048            /* first-digit histogram: the top 11 bits of the score key */
#define TK_CHUNK 8192           /* positions per histogram / filter CTA */
#define TK_CAND_CAP 32768       /* candidates kept per row (positions, in the workspace) */
#define TK_HDR (TK_BINS + 8)    /* uint32 per row: histogram + the row's counters */
/* Rows up to this long get one top-k CTA each, reading the scores once (topk.cu's slices kernel);
 * longer rows run the chain, whose resolve can be deferred (dsa.c). */
#define DSA_TOPK_ONE_CTA_MAX_LEN 40960

/* ---- sparse MLA (sparse_mla/) ---- */
#define MLA_BLOCK_N 64          /* index entries per chunk (and per split block) */
#define MLA_OUT_DIM 512         /* = DSA_MLA_V_DIM */
/* The attention kernels run the softmax in the log2 domain: scores times log2(e), lse back times ln(2). */
#define MLA_LOG2E 1.4426950408889634f
#define MLA_LN2 0.6931471805599453f
/* v3 (64 heads a CTA, split over a cluster below a wave) runs for more than 32 heads once
 * tokens x ceil(heads / 64) >= MIN_UNITS: on the H200, 8 such units (a cluster of 8 each) beat
 * v1 at 64 heads (28 vs 32 us) and fewer lost to it (docs/PERF.md) */
#define MLA_V3_MIN_HEADS 33
#define MLA_V3_MIN_UNITS 8
/* Clusters of 4 or 8 big CTAs do not all fit at once: a wave of them holds about half the SMs
 * (measured: 128 CTAs in clusters of 8 or 4 took two waves' time, 64 one) */
#define MLA_CLUSTER_WAVE_NUM 1
#define MLA_CLUSTER_WAVE_DEN 2
/* The split plan shapes work for at most this many SMs (every sm_90 part has <= 132); the
 * workspace size query assumes it, so a workspace sized once fits every sm_90 device. */
#define DSA_PLAN_MAX_SMS 132

#endif /* DSA_CONFIG_H */
