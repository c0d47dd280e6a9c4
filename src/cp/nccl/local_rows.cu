/*
 * cp/nccl/local_rows.cu — dsa_cp's kernels of its own (local_rows.h): which local rows each token sees.
 * Decode: token t = r * n + j sees the global positions below L_j = clamp(seq_lens[r] - (n - 1) + j,
 * 0, max_seq_len); of those, the rank owns local_lens[t] (its first ones, in order). The scorer
 * keeps a request's n tokens together (one read of each key for all of them) with the request's
 * length req_lens[r] = owned(L_{n-1}) + n - 1: its rule (length - (n - 1) + j) then gives token j
 * owned(L_{n-1}) + j >= local_lens[t] positions, and the top-k reads only local_lens[t] of them.
 * Prefill: a token's global rows map to one contiguous range of local rows.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/launch.cuh"
#include "common/shard.h"
#include "cp/nccl/local_rows.h"
#include "dsa.h"

__global__ void cp_local_rows_kernel(const dsa_shard s, const int32_t *seq_lens, int n, int max_seq_len, int T,
                                     int32_t *local_lens, int32_t *req_lens) {
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < T; t += gridDim.x * blockDim.x) {
    const int r = t / n, j = t % n;
    const int64_t L = (int64_t)seq_lens[r], Lj = L - (n - 1) + j;
    local_lens[t] = (int32_t)shard_owned_below(&s, Lj < 0 ? 0 : Lj > max_seq_len ? max_seq_len : Lj);
    if (j == 0) req_lens[r] = (int32_t)(shard_owned_below(&s, L < 0 ? 0 : L > max_seq_len ? max_seq_len : L) + (n - 1));
  }
}

extern "C" int dsa_cp_local_rows_launch(const dsa_shard *s, const int32_t *seq_lens, int num_tokens, int n,
                                        int max_seq_len, int32_t *local_lens, int32_t *req_lens, cudaStream_t stream) {
  const int blocks = (num_tokens + 255) / 256;
  return (int)dsa_launch(cp_local_rows_kernel, dim3((unsigned)(blocks < 1024 ? blocks : 1024)), 256, 0, stream, false,
                         *s, seq_lens, n, max_seq_len, num_tokens, local_lens, req_lens);
}

/* Prefill: token t's global rows [b, b + len) (dsa_indexer_prefill's clamp) are, on this rank, the
 * local rows [starts[t], ends[t]); lens[t] = ends[t] - starts[t]. */
__global__ void cp_local_ranges_kernel(const dsa_shard s, const int32_t *row_starts, const int32_t *row_ends, int T,
                                       int64_t num_ws_rows, int64_t max_rows, int32_t *starts, int32_t *ends,
                                       int32_t *lens) {
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < T; t += gridDim.x * blockDim.x) {
    int64_t b = row_starts[t], e = row_ends[t];
    b = b < 0 ? 0 : b > num_ws_rows ? num_ws_rows : b;
    e = e < b ? b : e > num_ws_rows ? num_ws_rows : e;
    if (e - b > max_rows) e = b + max_rows;
    const int64_t lb = shard_owned_below(&s, b), le = shard_owned_below(&s, e);
    starts[t] = (int32_t)lb;
    ends[t] = (int32_t)le;
    lens[t] = (int32_t)(le - lb);
  }
}

extern "C" int dsa_cp_local_ranges_launch(const dsa_shard *s, const int32_t *row_starts, const int32_t *row_ends,
                                          int num_tokens, int64_t num_ws_rows, int64_t max_rows, int32_t *starts,
                                          int32_t *ends, int32_t *lens, cudaStream_t stream) {
  const int blocks = (num_tokens + 255) / 256;
  return (int)dsa_launch(cp_local_ranges_kernel, dim3((unsigned)(blocks < 1024 ? blocks : 1024)), 256, 0, stream, false,
                         *s, row_starts, row_ends, num_tokens, num_ws_rows, max_rows, starts, ends, lens);
}
