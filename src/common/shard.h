/*
 * shard.h — where a position lives under a dsa_shard (dsa.h "Context parallelism"): its owner and
 * local position, a rank's global position of a local one, and how many of the positions below L
 * a rank owns. One definition for the host code (dsa_cp.c) and the kernels (cp.cu, cp_rows.cu).
 */
#ifndef DSA_SHARD_H
#define DSA_SHARD_H

#include <stdint.h>

#include "dsa.h"

#ifdef __CUDACC__
#define DSA_SHARD_FN static __host__ __device__ __forceinline__
#else
#define DSA_SHARD_FN static inline
#endif

/* the global position of rank s->rank's local position */
DSA_SHARD_FN int64_t shard_global(const dsa_shard *s, int64_t local) {
  return s->layout == DSA_SHARD_ROUND_ROBIN ? local * s->world_size + s->rank : (int64_t)s->rank * s->block + local;
}

/* the local position of global position g >= 0 on rank s->rank, -1 when another rank owns it */
DSA_SHARD_FN int64_t shard_local(const dsa_shard *s, int64_t g) {
  if (s->layout == DSA_SHARD_ROUND_ROBIN) return g % s->world_size == s->rank ? g / s->world_size : -1;
  return g / s->block == s->rank ? g % s->block : -1;
}

/* how many of the global positions [0, L) rank s->rank owns (its local row's length) */
DSA_SHARD_FN int64_t shard_owned_below(const dsa_shard *s, int64_t L) {
  if (L <= 0) return 0;
  if (s->layout == DSA_SHARD_ROUND_ROBIN) return L > s->rank ? (L - s->rank + s->world_size - 1) / s->world_size : 0;
  const int64_t lo = (int64_t)s->rank * s->block, hi = lo + s->block;
  return L <= lo ? 0 : (L < hi ? L : hi) - lo;
}

#endif
