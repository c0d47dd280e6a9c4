/*
 * trace_mla_v1.cu — where the time of a one-token decode goes in the v1 attention kernel and its
 * combine (sparse_mla/v1_mma.cu built with DSA_V1_TRACE): thread 0 of every CTA stores %globaltimer
 * at the phase boundaries of the first chunk (entry, griddep, index + Q issued, Q in registers,
 * chunk landed, unpacked, S, softmax, PV done, partials stored) and of the combine (entry, griddep
 * released, done). The pair runs as a CUDA graph, hot L2, as dsa-bench times it; printed: ns since
 * the earliest CTA entry, min / median / max over CTAs, and the graph replay time (median of 50).
 * Usage: dsa-trace-mla-v1   (on the GPU machine; ~5 s)
 */
#define DSA_V1_TRACE 1
#include "v1_mma.cu"

#include <algorithm>
#include <vector>

#include "mla_dev_inputs.h"

static void stats(const char *name, std::vector<long long> v) {
  std::sort(v.begin(), v.end());
  printf("  %-22s %7lld %7lld %7lld\n", name, v.front(), v[v.size() / 2], v.back());
}

static void trace(int H, int splits, int mt) {
  const int64_t S = 1 << 16;
  const int topk = 2048, nblk = topk / 64, T = 1;
  uint64_t seed = 1;
  std::vector<uint8_t> kv((size_t)S * 656);
  mla_dev_kv(kv.data(), S, 1, &seed);
  std::vector<uint16_t> q((size_t)T * H * 576);
  mla_dev_q(q.data(), q.size(), &seed);
  std::vector<int32_t> idx((size_t)T * topk);
  mla_dev_indices(idx.data(), idx.size(), S, &seed);
  void *dkv, *dq, *didx, *dout, *dws;
  float *dlse;
  const size_t rows = (size_t)T * H;
  CK(cudaMalloc(&dkv, kv.size()));
  CK(cudaMalloc(&dq, q.size() * 2));
  CK(cudaMalloc(&didx, idx.size() * 4));
  CK(cudaMalloc(&dout, rows * 512 * 2));
  CK(cudaMalloc(&dlse, rows * 4));
  CK(cudaMalloc(&dws, (size_t)splits * rows * (512 * 4 + 8)));
  CK(cudaMemcpy(dkv, kv.data(), kv.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(didx, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));

  const dsa_sparse_mla_args a = mla_dev_args(dq, T, H, dkv, DSA_KV_FP8_PACKED, S, didx, topk, dout, dlse);
  dsa_mla_plan pl;
  memset(&pl, 0, sizeof pl);
  pl.kernel = DSA_MLA_KERNEL_MMA;
  pl.mt = mt;
  pl.groups = (H + 16 * pl.mt - 1) / (16 * pl.mt);
  pl.num_blocks = nblk;
  pl.splits = splits;
  pl.blocks_per_split = nblk / splits;

  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  CK((cudaError_t)dsa_sparse_mla_v1_launch(&a, &pl, dws, st));
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 70; ++i) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float x;
    CK(cudaEventElapsedTime(&x, e0, e1));
    if (i >= 20) ms.push_back(x);
  }
  std::sort(ms.begin(), ms.end());
  const int ctas = pl.groups * splits * T;
  std::vector<unsigned long long> tr((size_t)ctas * 16), ct(rows * 4);
  CK(cudaMemcpyFromSymbol(tr.data(), g_v1_trace, tr.size() * 8));
  CK(cudaMemcpyFromSymbol(ct.data(), g_v1_ctrace, ct.size() * 8));
  unsigned long long t0 = ~0ull;
  for (int c = 0; c < ctas; ++c) t0 = std::min(t0, tr[c * 16]);
  printf("== 1 token x %d heads, FP8, v1 MT=%d, %d CTAs (%d splits x %d groups) + combine %zu CTAs; graph "
         "replay median %.2f us (event-timed, ungated)\n",
         H, pl.mt, ctas, splits, pl.groups, rows, 1000.0 * ms[ms.size() / 2]);
  printf("  phase (ns since first entry)   min     med     max\n");
  const char *names[10] = {"entry", "griddep released", "index + Q issued", "Q in registers", "chunk landed",
                           "unpacked", "S done", "softmax done", "PV done", "partials stored"};
  for (int k = 0; k < 10; ++k) {
    std::vector<long long> v;
    for (int c = 0; c < ctas; ++c) v.push_back((long long)(tr[c * 16 + k] - t0));
    stats(names[k], v);
  }
  const char *cn[3] = {"combine entry", "combine griddep", "combine done"};
  for (int k = 0; k < 3; ++k) {
    std::vector<long long> v;
    for (size_t r = 0; r < rows; ++r) v.push_back((long long)(ct[r * 4 + k] - t0));
    stats(cn[k], v);
  }
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaFree(dkv));
  CK(cudaFree(dq));
  CK(cudaFree(didx));
  CK(cudaFree(dout));
  CK(cudaFree(dlse));
  CK(cudaFree(dws));
}

/* The unpack's e4m3 -> bf16 (byte permutes + a bf16x2 multiply by 2^120) against the cvt path, for
 * every pair of e4m3 codes; NaN codes excluded (the permute path makes them finite). */
__global__ void e4m3_check_kernel(unsigned *bad) {
  const uint32_t pair = blockIdx.x * blockDim.x + threadIdx.x; /* 0 .. 65535 */
  const uint32_t four = pair | (pair << 16);
  const uint32_t got = ptx_mul_bf16x2(e4m3x2_to_bf16x2_pow2m120(four, 0x9180u), 0x7b807b80u);
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)pair, __NV_E4M3);
  const float2 f = __half22float2(*(const __half2 *)&h);
  const uint32_t want = ptx_f32x2_to_bf16x2(f.x, f.y);
  const bool nan = (pair & 0x7f) == 0x7f || ((pair >> 8) & 0x7f) == 0x7f;
  if (!nan && got != want) atomicAdd(bad, 1u);
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("dsa-trace-mla-v1: no CUDA device\n");
    return 77;
  }
  unsigned *dbad, bad = 0;
  CK(cudaMalloc(&dbad, 4));
  CK(cudaMemset(dbad, 0, 4));
  e4m3_check_kernel<<<256, 256>>>(dbad);
  CK(cudaMemcpy(&bad, dbad, 4, cudaMemcpyDeviceToHost));
  printf("e4m3 -> bf16 by permutes: %u of 65536 code pairs differ from cvt (NaN codes excluded)\n", bad);
  trace(16, 32, 1);
  trace(64, 32, 1);
  trace(64, 32, 2);
  trace(64, 32, 4);
  trace(128, 32, 2);
  trace(128, 16, 1);
  trace(128, 32, 4);
  return 0;
}
