/*
 * dsa_ref.h — the CPU reference of every dsa operation (float64 accumulation), plus host-side
 * conversions for the storage types. Same argument structs as dsa.h, but every pointer is a HOST
 * pointer. Workspace and stream arguments do not exist here. The reference does not validate
 * arguments (dsa.h's calls do): give it what the device call would accept.
 *
 * The reference is the definition the tests and the benchmark check the GPU kernels against:
 *   - FP8-e4m3 and bf16 are decoded exactly; q.k is accumulated in double.
 *   - Top-k ranks by (score descending, position ascending); NaN ranks below every number
 *     (-inf included). Output entries are in that rank order.
 *   - Attention follows dsa.h exactly (skipped entries, out = 0 and lse = -inf for a token with
 *     nothing valid).
 * The indexer and attention calls run their tokens on up to all the machine's cores (each token
 * computed alone: the result is one thread's bit for bit); DSA_REF_THREADS=n sets the count.
 */
#ifndef DSA_REF_H
#define DSA_REF_H

#include "dsa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Storage-type conversions (exact decode; encode rounds to nearest even, FP8 saturates to +-448). */
float dsa_bf16_to_float(uint16_t x);
uint16_t dsa_float_to_bf16(float x);
float dsa_fp8_e4m3_to_float(uint8_t x);
uint8_t dsa_float_to_fp8_e4m3(float x);

/* Visible length of decode token t (dsa.h's rule, including the block-table clamp and max_seq_len). */
int dsa_ref_decode_len(const dsa_indexer_decode_args *args, int t);
/* Visible row range of prefill token t after clamping: [*begin, *begin + return value). */
int dsa_ref_prefill_range(const dsa_indexer_prefill_args *args, int t, int64_t *begin);

/* Index-K of global slot s dequantised to float64 (head_dim values). Returns 0 when the slot is
 * outside the cache (out untouched). */
int dsa_ref_index_k_row(const dsa_index_k_cache *cache, int head_dim, int64_t slot, double *out);

/* score for token t against one dequantised key (float64). */
double dsa_ref_index_score(const dsa_indexer_query *q, int t, const double *k);

/* Scores as dsa_indexer_*_scores would write them (float32 rows; only visible positions written,
 * and all of them: skip_short_rows is ignored). */
void dsa_ref_indexer_decode_scores(const dsa_indexer_decode_scores_args *args);
void dsa_ref_indexer_prefill_scores(const dsa_indexer_prefill_scores_args *args);
/* The same scores in float64: out[t * stride + i]. */
void dsa_ref_indexer_decode_scores_f64(const dsa_indexer_decode_args *args, double *out,
                                       int64_t stride);
void dsa_ref_indexer_prefill_scores_f64(const dsa_indexer_prefill_args *args, double *out,
                                        int64_t stride);

/* Scores + top-k, outputs as dsa.h describes. */
void dsa_ref_indexer_decode(const dsa_indexer_decode_args *args);
void dsa_ref_indexer_prefill(const dsa_indexer_prefill_args *args);

/* Plain top-k over float32 rows. */
void dsa_ref_topk(const dsa_topk_args *args);
/* Top-k of one float64 row: writes min(topk, n) positions in rank order to out, returns that count. */
int dsa_ref_topk_row_f64(const double *row, int n, int topk, int32_t *out);

/* Sparse MLA attention. out_f32 (optional, [tokens, H, 512]) receives the unrounded output;
 * args->out (bf16) and args->lse are written when non-NULL. */
void dsa_ref_sparse_mla(const dsa_sparse_mla_args *args, float *out_f32);

/* Cache writers. */
void dsa_ref_index_k_store(const dsa_index_k_store_args *args);

/* Context parallelism. dsa_topk_merge exactly (indices in ascending id order, -1 after lens). */
void dsa_ref_topk_merge(const dsa_topk_merge_args *args);
/* dsa_lse_combine in float64: out_f32 [tokens, heads, 512] before the output's bf16 rounding and
 * lse [tokens, heads] (both host arrays; args->out and args->lse are not written). */
void dsa_ref_lse_combine(const dsa_lse_combine_args *args, float *out_f32, float *lse);
void dsa_ref_mla_kv_store(const dsa_mla_kv_store_args *args);

#ifdef __cplusplus
}
#endif
#endif /* DSA_REF_H */
