/*
 * cp_problem.h — one decode problem for context parallelism, built on the GPU for the whole context
 * (one GPU) or for one rank's shard, so that the shards hold bit-identical rows of the one-GPU
 * caches: every bf16 row (index-K and KV of request r's global position g; q, weights, q_attn) is a
 * hash of (seed, what, indices) (dsa_rng_hash4, rng.h), written into the caches by the library's own
 * writers (dsa_index_k_store, dsa_mla_kv_store). Shared by test_cp_nccl (2 GPUs through NCCL) and
 * `dsa-bench cp`; built only with dsa_cp (NCCL). Every CUDA and dsa call is checked with check.h's
 * CK / DSA_CK: a failure goes to its handler (by default: the call and its error on stderr, exit 1;
 * a handler installed instead must not return), so the int results below are 0 when they come back.
 */
#ifndef DSA_CP_PROBLEM_H
#define DSA_CP_PROBLEM_H

#include <stdint.h>

#include "dsa.h"
#include "dsa_cp.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CP_PAGE 64

typedef struct {
  int num_reqs, q_len;        /* decode: num_reqs requests x q_len tokens */
  int prefill_tokens;         /* > 0: prefill instead — num_reqs = 1, its seq_lens[0] rows are the
                                 workspace, token j of N sees the first S - N + 1 + j */
  const int32_t *seq_lens;    /* host [num_reqs] global lengths */
  int index_heads, heads, topk;
  int q_fp8;                  /* FP8 indexer q with a per-head scale (else bf16) */
  int ties;                   /* every index-K row of a request identical: all scores equal */
  uint64_t seed;
} cp_spec;

/* What one device holds: the whole context (shard.world_size = 1) or one rank's shard. Device
 * pointers unless marked. */
typedef struct {
  int device;
  dsa_shard shard;
  int64_t num_pages;          /* of both caches (slot = page * CP_PAGE + offset) */
  int maxb;                   /* block-table columns */
  int32_t *h_bt;              /* host [num_reqs, maxb] */
  int32_t *bt, *seq_lens;     /* [num_reqs, maxb], [num_reqs] (global lengths) */
  uint8_t *index_k;           /* FP8 index-K pages */
  void *kv;                   /* packed FP8 KV slots */
  void *q;                    /* [T, index_heads, 128] bf16 or e4m3 */
  float *q_scale;             /* [T, index_heads] (FP8 q) or NULL */
  float *weights;             /* [T, index_heads] */
  void *q_attn;               /* [T, heads, 576] bf16 */
  float index_scale, attn_scale;
  /* prefill: the rows this device holds (local row p = local position p) and the tokens' global ranges */
  int64_t *ws_slots;          /* [num_rows] */
  int64_t num_rows;
  int32_t *row_starts, *row_ends; /* [T] */
} cp_data;

/* Builds on `device` (made current) the caches of the positions shard `s` owns (NULL: all of
 * them), pages in a random order (a dsa_rng stream of the seed and the rank). 0 on success. */
int cp_build(const cp_spec *sp, const dsa_shard *s, int device, cp_data *d);
void cp_free(cp_data *d);

/* The one-GPU step on d (the whole context): dsa_indexer_decode (prefill: dsa_indexer_prefill) +
 * dsa_sparse_mla, `iters` times (graph: replays of one captured step)
 * (median ms of both into *ms when iters > 0); then h_positions [T, topk] = the selected global
 * positions (ascending, -1 after h_lens), out / lse (device) as the attention wrote them. */
int cp_one_gpu(const cp_spec *sp, cp_data *d, cudaStream_t stream, int iters, int graph, double *ms, int32_t *h_positions,
               int32_t *h_lens, void *out, float *lse);

/* The dsa_cp step's args for rank data d (outputs and stage events left to the caller). */
dsa_cp_decode_args cp_decode_args(const cp_spec *sp, const cp_data *d);
dsa_cp_prefill_args cp_prefill_args(const cp_spec *sp, const cp_data *d);

/* The largest per-token relative L2 distance of out from ref (bf16 [tokens, per_token]): 0 for a
 * token where both are zero, infinity where ref is zero and out is not. */
double cp_worst_rel_l2_bf16(const uint16_t *out, const uint16_t *ref, int tokens, size_t per_token);

/* W ranks on devices 0..W-1 (comms from ncclCommInitAll), one host thread each: every rank builds
 * its shard, runs dsa_cp_decode 3 + iters times (stage events on each), and copies its outputs of
 * the last run to the host arrays given per rank ([T, topk], [T], [T, heads, 512] bf16, [T, heads]).
 * Timings: medians over the iters on rank 0, and the slowest rank's median total. 0 on success. */
typedef struct {
  const cp_spec *sp;
  int world_size;
  dsa_shard_layout layout;
  int64_t block;                 /* DSA_SHARD_BLOCKS */
  int iters;
  int graph;                     /* 1: after the warm-ups each rank captures one step (NCCL included) in
                                    a CUDA graph and replays it; only the total is timed then */
  ncclComm_t *comms;
  int32_t *positions[DSA_MAX_CP_RANKS], *lens[DSA_MAX_CP_RANKS];
  uint16_t *out[DSA_MAX_CP_RANKS];
  float *lse[DSA_MAX_CP_RANKS];
  double stage_ms[DSA_CP_STAGES];  /* rank 0 */
  double total_ms, total_ms_slowest;
  int64_t workspace_bytes;        /* rank 0's */
} cp_run;
int cp_run_ranks(cp_run *run);

#ifdef __cplusplus
}
#endif
#endif
