/*
 * ptx/sync.cuh — Hopper (sm_90a) synchronisation, as small inline-PTX helpers, each with the PTX ISA
 * section it comes from (PTX ISA 8.x numbering): shared-window addresses, grid dependency control,
 * named barriers, setmaxnreg, mbarriers, the async-proxy fence, thread-block clusters.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

/* Generic -> shared-window address (cvta, §9.7.9.16). */
__device__ __forceinline__ uint32_t ptx_smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- grid dependency control (§9.7.12.16 griddepcontrol) ---- */
__device__ __forceinline__ void ptx_griddep_wait(void) { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void ptx_griddep_launch_dependents(void) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

/* ---- named barriers (§9.7.12.1 bar.sync / bar.arrive): id 0 is __syncthreads ---- */
__device__ __forceinline__ void ptx_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* Signals barrier `id` without waiting (a producer's half of a bar.sync handshake). */
__device__ __forceinline__ void ptx_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* ---- per-warpgroup register budget (§9.7.17.1 setmaxnreg, sm_90a): the kernel needs a register
 * cap at entry (__launch_bounds__(threads, 1)) and each role in one branch ---- */
template <int N>
__device__ __forceinline__ void ptx_setmaxnreg_inc(void) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void ptx_setmaxnreg_dec(void) {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* ---- mbarrier (§9.7.12.15) ---- */
/* mbarrier.init (§9.7.12.15.9). */
__device__ __forceinline__ void ptx_mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* mbarrier.inval (§9.7.12.15.11): before the barrier's shared memory may hold anything else. */
__device__ __forceinline__ void ptx_mbar_inval(uint32_t bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/* mbarrier.arrive.expect_tx (PTX ISA, mbarrier.expect_tx / arrive): one arrival, and `bytes` more
 * of transaction count for the phase (the bulk / tensor copies that complete on it). */
__device__ __forceinline__ void ptx_mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
/* mbarrier.arrive with release semantics at CTA scope (§9.7.12.15.13). */
__device__ __forceinline__ void ptx_mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
/* Non-blocking: has the phase with parity `parity` completed? (mbarrier.test_wait.parity, §9.7.12.15.16) */
__device__ __forceinline__ bool ptx_mbar_test(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
/* Blocks until the phase with parity `parity` has completed (mbarrier.try_wait.parity, §9.7.12.15.16;
 * acquire at CTA scope). */
__device__ __forceinline__ void ptx_mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

/* Orders this thread's generic-proxy shared-memory writes before later async-proxy reads (wgmma
 * operands) (fence.proxy.async, §9.7.12.4 membar/fence). */
__device__ __forceinline__ void ptx_fence_proxy_async_smem(void) {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Makes this thread's mbarrier.init visible to the async proxy (bulk copies completing their
 * transactions on it) and to the cluster (fence.mbarrier_init, §9.7.12.4 membar/fence). */
__device__ __forceinline__ void ptx_fence_mbar_init(void) {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* ---- thread-block clusters (§9.7.12.2 barrier.cluster, §9.7.9.17 mapa, §9.7.9.8 ld) ---- */
__device__ __forceinline__ uint32_t ptx_cluster_ctarank(void) {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
/* CTAs in this CTA's cluster (1 for a launch without clusters). */
__device__ __forceinline__ uint32_t ptx_cluster_nctarank(void) {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}
/* All threads of all CTAs of the cluster; release/acquire orders shared-memory writes before the
 * barrier with reads after it, across the cluster. */
__device__ __forceinline__ void ptx_cluster_sync(void) {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* The address of the same shared-memory variable in CTA `rank` of the cluster. */
__device__ __forceinline__ uint32_t ptx_mapa(uint32_t smem_addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr), "r"(rank));
  return r;
}

/* ---- grid-scope counters (a barrier among some CTAs of a co-resident grid: indexer/fused_topk.cuh) ---- */
/* red.release.gpu.global.add.u32 (§9.7.12, parallel synchronization: red): one arrival on a counter in global memory. */
__device__ __forceinline__ void ptx_red_release_gpu_add(uint32_t *p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
/* ld.relaxed.gpu.global.u32 (§9.7.9.8 ld): the counter's current value, no ordering (a poll). */
__device__ __forceinline__ uint32_t ptx_ld_relaxed_gpu(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
/* ld.acquire.gpu.global.u32 (§9.7.9.8 ld): the counter's current value, later reads ordered after it. */
__device__ __forceinline__ uint32_t ptx_ld_acquire_gpu(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
