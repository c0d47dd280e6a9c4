/*
 * cp/nccl/local_rows.h — dsa_cp's kernels of its own (local_rows.cu): which local rows each token of
 * a step sees on this rank.
 */
#ifndef DSA_CP_LOCAL_ROWS_H
#define DSA_CP_LOCAL_ROWS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "dsa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Decode: token t = r * n + j: local_lens[t] (the rank's positions below its global L) and, for
 * j = 0, req_lens[r] (what the scorer takes so that a request's n tokens stay together). */
int dsa_cp_local_rows_launch(const dsa_shard *s, const int32_t *seq_lens, int num_tokens, int n, int max_seq_len,
                             int32_t *local_lens, int32_t *req_lens, cudaStream_t stream);
/* Prefill: token t's global rows [row_starts, row_ends) (clamped) as one range of local rows. */
int dsa_cp_local_ranges_launch(const dsa_shard *s, const int32_t *row_starts, const int32_t *row_ends, int num_tokens,
                               int64_t num_ws_rows, int64_t max_rows, int32_t *starts, int32_t *ends, int32_t *lens,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* DSA_CP_LOCAL_ROWS_H */
