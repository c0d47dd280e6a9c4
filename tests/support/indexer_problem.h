/*
 * indexer_problem.h — the indexer's test problems (test_gpu_indexer, test_gpu_api): a query with its
 * weights and an index-K cache of random bf16 keys quantised by the reference writer, and a decode
 * (block table, lengths) or prefill (workspace rows, row ranges) problem built from a case, with
 * host-pointer (reference) and device-pointer args. Every build seeds the harness's g_rng with the
 * case's seed, so a case draws the same data in every program.
 */
#ifndef DSA_INDEXER_PROBLEM_H
#define DSA_INDEXER_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#include "dsa.h"

/* ============================================================================================== */
/* Query + weights, index-K cache                                                                 */
/* ============================================================================================== */

/* q [T, H, 128] (bf16 or FP8 with q_scale) and weights [T, w_stride]: host (_h) and device (_d) copies */
typedef struct {
  int T, H, q_fp8, w_bf16;
  int64_t w_stride;
  void *q_h, *w_h;
  float *qs_h;
  void *q_d, *w_d;
  float *qs_d;
} iq_data;

/* An index-K cache of num_pages pages of P slots: host (h) and device (d) bytes */
typedef struct {
  int P;
  int64_t num_pages, num_slots;
  size_t bytes;
  uint16_t *rows; /* bf16 [num_slots, 128]: the keys before quantisation */
  uint8_t *h, *d;
} ik_data;

/* ============================================================================================== */
/* Decode                                                                                         */
/* ============================================================================================== */

typedef struct {
  const char *name;
  int H, q_fp8, w_bf16, w_extra;
  int topk, n, page_size;
  int nreq;
  int seq_lens[32];
  int rand_len_max;       /* > 0: lengths drawn in [0, rand_len_max] instead of seq_lens */
  int max_blocks;         /* 0: enough block-table columns for every request */
  int bt_extra;           /* block_table_stride - max_blocks_per_req (padding columns hold garbage) */
  int bad_pages;          /* page ids outside [0, num_pages) in the block table (see decode_build) */
  int ties[32];           /* per request: 0 random keys, 1 every key identical, 2 four distinct keys */
  int exact_max_seq_len;  /* pass max_seq_len = the largest L instead of 0 */
  int lens_null;          /* topk_lens = NULL */
  int check_scores, check_determinism;
  int ws_cap_mib;         /* > 0: workspace_limit in MiB (reaches the deferred resolve) */
  uint64_t seed;
} decode_case;

typedef struct {
  const decode_case *c;
  int R, n, T, P, maxb, maxL;
  int64_t bt_stride, num_pages;
  int32_t *seq_h, *bt_h;
  int *L;
  ik_data k;
  iq_data q;
  dsa_indexer_decode_args ha, da; /* host-pointer (reference) and device-pointer versions */
  double tol;
} decode_prob;

/* Seeds g_rng with c->seed and builds the problem (abort_case when the reference's lengths differ
 * from dsa.h's rule). */
void decode_build(const decode_case *c, decode_prob *p);
/* Global slot of position i of token t's request, or -1 when its page is outside the cache. */
int64_t decode_slot_of(const decode_prob *p, int t, int i);
/* float64 reference scores [T, Ls]; positions outside the cache set to -inf. */
double *decode_ref_scores(const decode_prob *p, int64_t *Ls_out);
/* Runs dsa_indexer_decode into idx_h [T, topk] / len_h [T] (poisoned first). */
void decode_run_topk(const decode_prob *p, void *ws, size_t wsb, int ws_byte, int32_t *idx_d, int32_t *len_d,
                     int32_t *idx_h, int32_t *len_h);

/* ============================================================================================== */
/* Prefill                                                                                        */
/* ============================================================================================== */

typedef struct {
  const char *name;
  int H, q_fp8, w_bf16, w_extra, topk;
  int W;                  /* workspace rows */
  int n_causal;           /* tokens j < n_causal see [0, causal_end - n_causal + 1 + j) */
  int causal_end;
  int n_extra;            /* further tokens: [xs, xe) as given (empty, reversed, negative, past W) */
  int xs[16], xe[16];
  int n_bad;              /* rows whose slot is outside the cache: num_slots + 17, -1, 2^40 */
  int bad_rows[3];
  int exact_max_rows;     /* pass max_rows = the longest range instead of 0 */
  int ws_cap_mib;         /* > 0: workspace_limit in MiB (the deferred resolve; fused: smaller chunks) */
  int keys;               /* workspace rows' keys: 0 random; 1 every one identical; 2 one of four;
                             3 the fused indexer's sample tiles (rows w with w / 64 a multiple of
                             DSA_PREFILL_SAMPLE_STRIDE) near zero, so that its threshold passes
                             about half a long row (the select step's rescoring) */
  int check_determinism;
  uint64_t seed;
} prefill_case;

typedef struct {
  const prefill_case *c;
  int T, W, maxlen;
  int32_t *starts, *ends;
  int64_t *slots_h;
  int *begin, *len;
  ik_data k;
  iq_data q;
  dsa_indexer_prefill_args ha, da;
  double tol;
} prefill_prob;

/* Seeds g_rng with c->seed and builds the problem (abort_case when the reference's ranges differ
 * from dsa.h's clamp). */
void prefill_build(const prefill_case *c, prefill_prob *p);
/* Workspace row w's slot lies outside the cache. */
int prefill_row_bad(const prefill_prob *p, int64_t w);

#endif
