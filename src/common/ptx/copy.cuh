/*
 * ptx/copy.cuh — Hopper (sm_90a) data movement, as small inline-PTX helpers with their PTX ISA
 * sections: global loads and L2 prefetches, cp.async (and its mbarrier arrive), the TMA tensor copy
 * and the bulk copy, ordered shared-memory accesses, loads from a peer CTA's shared memory.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include "common/ptx/sync.cuh"

/* ---- global loads ---- */
/* 16-byte read-only load that does not allocate in L1 (ld, §9.7.9.8: .global.nc.L1::no_allocate). */
__device__ __forceinline__ uint4 ptx_ld_nc_v4(const void *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/* Prefetch the line holding p into L2 (PTX ISA "Data Movement and Conversion Instructions: prefetch,
 * prefetchu": prefetch.global.L2): a per-thread address, no completion to wait for. */
__device__ __forceinline__ void ptx_prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(__cvta_generic_to_global(p)));
}

/* 16-byte async copy global -> shared; src_bytes = 0 writes zeros and reads nothing
 * (cp.async, §9.7.9.25.3.1). */
__device__ __forceinline__ void ptx_cp_async_16(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(src_bytes)
               : "memory");
}
/* 4-byte async copy global -> shared, through L1 (cp.async, §9.7.9.25.3.1: .ca is the only
 * cache mode for sizes below 16). */
__device__ __forceinline__ void ptx_cp_async_4(uint32_t dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(__cvta_generic_to_global(src)) : "memory");
}
/* The same with src_bytes = 4 or 0 (0: writes zeros, reads nothing). */
__device__ __forceinline__ void ptx_cp_async_4_zfill(uint32_t dst, const void *src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(__cvta_generic_to_global(src)),
               "r"(src_bytes)
               : "memory");
}
/* cp.async.commit_group / wait_group (§9.7.9.25.3.2, §9.7.9.25.3.3). */
__device__ __forceinline__ void ptx_cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ptx_cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* An arrive on an mbarrier, made when all of this thread's earlier cp.async copies have landed, not
 * counted in advance (cp.async.mbarrier.arrive.noinc, §9.7.9.25.3.4): the producer never waits for
 * its own copies. */
__device__ __forceinline__ void ptx_cp_async_mbar_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/* The same, counted: the barrier's pending count goes up now and down when this thread's earlier
 * cp.async copies have landed (cp.async.mbarrier.arrive, §9.7.9.25.3.4), so a phase waiting for the
 * thread's own arrival also waits for its copies. */
__device__ __forceinline__ void ptx_cp_async_mbar_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

/* ---- shared memory, in program order ---- */
/* 16-byte shared store kept in program order (st.shared, §9.7.9.10): callers order their stores to
 * spread one instruction over all banks. */
__device__ __forceinline__ void ptx_st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
/* 16-byte shared load kept in program order (ld.shared, §9.7.9.8). */
__device__ __forceinline__ uint4 ptx_ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

/* 4-byte shared store and 8-byte shared load by shared address (st.shared / ld.shared, §9.7.9.10 /
 * §9.7.9.8), for shared data reached through pointers the compiler cannot prove shared (held in a
 * struct), which it would otherwise access as generic memory. */
__device__ __forceinline__ void ptx_st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint2 ptx_ld_shared_v2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}

/* A 3-D tensor tile global -> shared by the TMA unit, completing `bar`'s transaction count (PTX ISA,
 * cp.async.bulk.tensor; tmap: the address of a __grid_constant__ CUtensorMap; out-of-bounds boxes
 * arrive zero-filled). */
__device__ __forceinline__ void ptx_tma_load_3d(uint32_t dst, const void *tmap, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
/* A contiguous bulk copy global -> shared (bytes a multiple of 16, both ends 16-byte aligned),
 * completing `bar`'s transaction count (PTX ISA, cp.async.bulk). */
__device__ __forceinline__ void ptx_bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar)
               : "memory");
}
/* Loads from a peer CTA's shared memory. Not volatile: they follow a cluster barrier and may be
 * issued together (each costs a round trip over the SM-to-SM network). */
__device__ __forceinline__ float4 ptx_ld_cluster_f32x4(uint32_t addr) {
  float4 v;
  asm("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t ptx_ld_cluster_u32(uint32_t addr) {
  uint32_t v;
  asm("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint4 ptx_ld_cluster_u32x4(uint32_t addr) {
  uint4 v;
  asm("ld.shared::cluster.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ float2 ptx_ld_cluster_f32x2(uint32_t addr) {
  float2 v;
  asm("ld.shared::cluster.v2.f32 {%0,%1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
/* A store into a peer CTA's shared memory (st, §9.7.9 data movement: st.shared::cluster), for the
 * peer to read after a cluster barrier (barrier.cluster.arrive.release / wait.acquire). */
__device__ __forceinline__ void ptx_st_cluster_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void ptx_st_cluster_u32x4(uint32_t addr, uint4 v) {
  asm volatile("st.shared::cluster.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
