/*
 * dev/sm90_microbench.cu — the H200 facts the attention kernels' design turns on, measured
 * directly (development aid; dev/README.md records what it printed). One CTA per SM, SM clock64 cycles:
 *   wgmma   m64nNk16 f16 throughput, N = 16 .. 256, both operands from shared memory in the
 *           no-swizzle core-matrix layout rows_as_m uses (K-major A and B; and A MN-major, as its
 *           PV), and with 128-byte swizzled K-major operands: multiply-adds per cycle per SM.
 *           (Question: is rows_as_m's N = 16 bound by shared-memory reads of the A tile, and does
 *           the no-swizzle layout cost anything by itself?)
 *   cvt     e4m3x2 -> f16x2 conversions per cycle per SM (cvt.rn.f16x2.e4m3x2), against the
 *           4-instruction integer unpack (exact, with the 2^8 factor folded into the scale).
 *   cluster barrier.cluster arrive+wait round trip in a cluster of 2 / 8; a DSMEM load round trip.
 * Usage: dsa-dev-sm90-microbench   (on the GPU machine; a few seconds)
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "common/ptx/convert.cuh"
#include "common/ptx/copy.cuh"
#include "common/ptx/sync.cuh"
#include "common/ptx/wgmma.cuh"

/* ---- wgmma m64nNk16 f16, fp32 accumulate, generic N through a switch on compile-time N ---- */
template <int N>
struct acc_t {
  float d[N / 2];
};

/* 128-byte swizzle K-major descriptor: SBO = 1024 (8 rows x 128 B), LBO unused. */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) { return ptx_wgmma_desc_sw128(addr, 16, 1024); }

template <int N, int TA>
__device__ __forceinline__ void wgmma_n(float (&d)[N / 2], uint64_t da, uint64_t db) {
  if constexpr (N == 16) {
    ptx_wgmma_m64n16k16_f16<TA, 0>(d, da, db, 1);
  } else if constexpr (N == 32) {
    ptx_wgmma_m64n32k16_f16<TA, 0>(d, da, db, 1);
  } else if constexpr (N == 64) {
    ptx_wgmma_m64n64k16_f16<TA, 0>(d, da, db, 1);
  }
}

/* mode 0: no swizzle, A and B K-major (rows_as_m's QK: 36 k-steps over a 64 x 576 A and an N x 576 B);
 * 1: no swizzle, A MN-major (rows_as_m's PV: A = 512 dims x 64 rows of the same tile, B = N x 64);
 * 2: 128-byte swizzle, K-major (as mode 0); 3: heads_as_m's QK, A = Q K-major without swizzle (64 x 576),
 * B = the tile K-major with the 128-byte swizzle (N rows x 576); 4: the same with Q MN-major without
 * swizzle (8 dims x 8 heads core matrices, [d / 8][h / 8], LBO 1024, SBO 128). 36 wgmma an iteration in
 * every mode. */
template <int N, int MODE>
__global__ void __launch_bounds__(128, 1) k_wgmma(int iters, long long *cycles, float *sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  for (int i = threadIdx.x; i < (64 + 64) * 576 * 2 / 16; i += 128) ((uint4 *)smem)[i] = make_uint4(0, 0, 0, 0);
  ptx_fence_proxy_async_smem();
  __syncthreads();
  const uint32_t a = ptx_smem_u32(smem), b = a + 64 * 576 * 2;
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    ptx_wgmma_fence();
#pragma unroll
    for (int k = 0; k < 36; ++k) {
      uint64_t da, db;
      if (MODE == 3 || MODE == 4) {
        da = MODE == 3 ? ptx_wgmma_desc(a + k * 256, 128, 9216) : ptx_wgmma_desc(a + k * 2048, 1024, 128);
        db = desc_sw128(b + (k >> 2) * N * 128 + (k & 3) * 32);
      } else if (MODE == 2) {
        /* swizzled: a k16 step is 32 B inside the 128-B atom row; 4 steps per atom column */
        da = desc_sw128(a + (k >> 2) * 64 * 128 + (k & 3) * 32);
        db = desc_sw128(b + (k >> 2) * N * 128 + (k & 3) * 32);
      } else if (MODE == 1) {
        const int mt = k & 7, ks = (k >> 3) & 3; /* m-tile of 64 dims, k-step of 16 rows */
        da = ptx_wgmma_desc(a + mt * 1024 + ks * 2 * 9216, 9216, 128);
        db = ptx_wgmma_desc(b + ks * 256, 128, 1024);
      } else {
        da = ptx_wgmma_desc(a + k * 256, 128, 9216);
        db = ptx_wgmma_desc(b + k * 256, 128, 9216);
      }
      wgmma_n<N, MODE == 1 || MODE == 4 ? 1 : 0>(d, da, db);
    }
    ptx_wgmma_commit();
    ptx_wgmma_wait<0>();
    ptx_reg_fence(d);
  }
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) s += d[i];
  if (s == 12345.f) sink[threadIdx.x] = s;
}

/* ---- conversions: 8 independent chains a thread ---- */
__global__ void __launch_bounds__(256) k_cvt(int iters, int mode, long long *cycles, uint32_t *sink) {
  uint32_t v[8], acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[i] = 0x38303830u + threadIdx.x * 7u + i;
    acc[i] = 0;
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t lo, hi;
      if (mode == 0) {
        lo = ptx_e4m3x2_to_f16x2((uint16_t)(v[i] & 0xffffu));
        hi = ptx_e4m3x2_to_f16x2((uint16_t)(v[i] >> 16));
      } else {
        /* bytes b0..b3 -> f16 bits (b & 0x80) << 8 | (b & 0x7f) << 7 (value / 2^8, exact) */
        const uint32_t x0 = __byte_perm(v[i], 0, 0x1404), x1 = __byte_perm(v[i], 0, 0x3424);
        lo = (x0 & 0x80008000u) | ((x0 >> 1) & 0x3F803F80u);
        hi = (x1 & 0x80008000u) | ((x1 >> 1) & 0x3F803F80u);
      }
      acc[i] ^= lo ^ hi;
      v[i] += 0x01010101u;
    }
  }
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  uint32_t s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s ^= acc[i];
  if (s == 0x12345678u) sink[threadIdx.x] = s;
}

/* ---- cluster barrier and DSMEM round trips ---- */
__global__ void __launch_bounds__(128) k_cluster(int iters, long long *cycles) {
  __shared__ float cell[32];
  if (threadIdx.x < 32) cell[threadIdx.x] = (float)threadIdx.x;
  ptx_cluster_sync();
  const uint32_t rank = ptx_cluster_ctarank();
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) ptx_cluster_sync();
  long long t1 = clock64();
  /* DSMEM: a dependent chain of loads from the next CTA's cell */
  const uint32_t peer = ptx_mapa(ptx_smem_u32(cell), rank ^ 1u);
  float x = 0.f;
  long long t2 = clock64();
  for (int it = 0; it < iters; ++it) {
    const float2 v = ptx_ld_cluster_f32x2(peer + (((int)x) & 7) * 8);
    x += v.x * 0.f;
  }
  long long t3 = clock64();
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    cycles[0] = (t1 - t0) / iters;
    cycles[1] = (t3 - t2) / iters;
  }
  if (x == 1.f) cycles[2] = 1;
  ptx_cluster_sync();
}

template <int N, int MODE>
static int run_wgmma(int sms, long long *d_cyc, float *d_sink, long long *h) {
  const int smem = (64 + 64) * 576 * 2;
  CK(cudaFuncSetAttribute(k_wgmma<N, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const char *names[5] = {"no swizzle, K-major A and B (rows_as_m QK)", "no swizzle, MN-major A (rows_as_m PV)",
                          "128-B swizzle, K-major", "A K-major, B 128-B swizzle (heads_as_m QK)",
                          "A MN-major, B 128-B swizzle"};
  {
    const int mode = MODE;
    const int iters = 200;
    k_wgmma<N, MODE><<<sms, 128, smem>>>(iters, d_cyc, d_sink);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d_cyc, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
    long long mx = 0;
    for (int i = 0; i < sms; ++i) mx = h[i] > mx ? h[i] : mx;
    const double fma = (double)iters * 36 * 64 * N * 16;
    printf("wgmma m64n%-3dk16 f16 %-44s %7.1f cycles each, %6.0f FMA/cycle/SM\n", N, names[mode],
           (double)mx / (iters * 36.0), fma / mx);
  }
  return 0;
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("dsa-sm90-microbench: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  printf("%s, %d SMs\n", prop.name, sms);
  long long *d_cyc, h[256];
  float *d_sink;
  uint32_t *d_usink;
  CK(cudaMalloc(&d_cyc, sizeof(long long) * 256));
  CK(cudaMalloc(&d_sink, sizeof(float) * 256));
  CK(cudaMalloc(&d_usink, sizeof(uint32_t) * 256));
  if (run_wgmma<16, 0>(sms, d_cyc, d_sink, h) || run_wgmma<16, 1>(sms, d_cyc, d_sink, h) ||
      run_wgmma<16, 2>(sms, d_cyc, d_sink, h) || run_wgmma<32, 0>(sms, d_cyc, d_sink, h) ||
      run_wgmma<32, 1>(sms, d_cyc, d_sink, h) || run_wgmma<32, 2>(sms, d_cyc, d_sink, h) ||
      run_wgmma<64, 0>(sms, d_cyc, d_sink, h) || run_wgmma<64, 1>(sms, d_cyc, d_sink, h) ||
      run_wgmma<64, 2>(sms, d_cyc, d_sink, h) || run_wgmma<64, 3>(sms, d_cyc, d_sink, h) ||
      run_wgmma<64, 4>(sms, d_cyc, d_sink, h) || run_wgmma<64, 3>(sms, d_cyc, d_sink, h) ||
      run_wgmma<64, 4>(sms, d_cyc, d_sink, h))
    return 1;
  for (int mode = 0; mode < 2; ++mode) {
    const int iters = 4096, blocks = sms * 4;
    k_cvt<<<blocks, 256>>>(iters, mode, d_cyc, d_usink);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d_cyc, sizeof(long long), cudaMemcpyDeviceToHost));
    /* 4 CTAs of 256 threads share an SM: values per cycle per SM = 4 * 256 * iters * 8 * 4 / cycles */
    printf("e4m3 -> f16 %-34s %6.1f values/cycle/SM\n", mode ? "integer unpack (PRMT, LOP3, SHF)" : "cvt.rn.f16x2.e4m3x2",
           4.0 * 256 * iters * 8 * 4 / (double)h[0]);
  }
  for (int cs = 2; cs <= 8; cs *= 4) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3(cs);
    cfg.blockDim = dim3(128);
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cs;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, k_cluster, 1000, d_cyc));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d_cyc, sizeof(long long) * 2, cudaMemcpyDeviceToHost));
    printf("cluster of %d: barrier.cluster arrive+wait %lld cycles; DSMEM load round trip %lld cycles\n", cs, h[0],
           h[1]);
  }
  return 0;
}
