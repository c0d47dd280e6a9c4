/*
 * mbar_ring.cuh — the ring of NS shared-memory stages every warp-specialised kernel here runs
 * between its producer and its consumers, guarded by two mbarriers a stage (PTX ISA §9.7.12.15):
 *   full[s]   completes when stage s holds its data (the producer's arrivals, and for TMA / bulk
 *             copies their transaction count);
 *   empty[s]  completes when the stage's consumers are done with it (their arrivals).
 * Use i = 0, 1, 2, ... of the ring is stage i % NS in round i / NS. A wait names the parity of the
 * phase it waits for, and a parity only tells the current phase from the one before: whoever waits
 * for round r of a stage must itself have seen round r - 1 of it through (the kernels keep a stage's
 * producer and consumers fixed for that reason).
 */
#pragma once
#include <stdint.h>

#include "common/ptx/sync.cuh"

/* The shared-window addresses of full[0] and empty[0]; stage s's barriers are 8 bytes a stage on. */
typedef struct {
  uint32_t full, empty;
} mbar_ring;

__device__ __forceinline__ uint32_t ring_full(const mbar_ring &r, int s) { return r.full + 8 * s; }
__device__ __forceinline__ uint32_t ring_empty(const mbar_ring &r, int s) { return r.empty + 8 * s; }

/* One thread, before anyone uses the ring: full[s] waits for full_count arrivals, empty[s] for
 * empty_count. */
__device__ __forceinline__ void ring_init(const mbar_ring &r, int stages, int full_count, int empty_count) {
  for (int s = 0; s < stages; ++s) {
    ptx_mbar_init(ring_full(r, s), full_count);
    ptx_mbar_init(ring_empty(r, s), empty_count);
  }
}

/* Stage and round of use i (shifts and masks when NS is a power of two). */
template <int NS>
__device__ __forceinline__ int ring_stage(int i) {
  if constexpr ((NS & (NS - 1)) == 0) return i & (NS - 1);
  else return i % NS;
}
template <int NS>
__device__ __forceinline__ int ring_round(int i) {
  if constexpr (NS == 1) return i;
  else if constexpr (NS == 2) return i >> 1;
  else if constexpr (NS == 4) return i >> 2;
  else return i / NS;
}

/* Producer: blocks until use i's stage is free (its use i - NS was released); uses < NS pass. */
template <int NS>
__device__ __forceinline__ void ring_wait_empty(const mbar_ring &r, int i) {
  if (i >= NS) ptx_mbar_wait(ring_empty(r, ring_stage<NS>(i)), (uint32_t)((ring_round<NS>(i) - 1) & 1));
}
/* Producer, without blocking: is use i's stage free? */
template <int NS>
__device__ __forceinline__ bool ring_test_empty(const mbar_ring &r, int i) {
  return i < NS || ptx_mbar_test(ring_empty(r, ring_stage<NS>(i)), (uint32_t)((ring_round<NS>(i) - 1) & 1));
}
/* Consumer: blocks until use i's stage holds its data. */
template <int NS>
__device__ __forceinline__ void ring_wait_full(const mbar_ring &r, int i) {
  ptx_mbar_wait(ring_full(r, ring_stage<NS>(i)), (uint32_t)(ring_round<NS>(i) & 1));
}
