/*
 * trace_mla_v2.cu — where one CTA of the v2 attention kernel (sparse_mla/v2_sm90.cu) spends its time.
 * Builds that kernel with DSA_V2_TRACE = 0: thread 0 of each warpgroup of CTA 0 stores clock64()
 * at the phase boundaries (consumer: chunk landed, QK done, P^T stored, PV done; producer: buffer
 * free, halves stored, chunk published; then the cluster merge). Prints SM cycles since kernel
 * entry for a few shapes, packed FP8 KV, random data (no check: the tests do that).
 * Usage: dsa-trace-mla   (on the GPU machine; ~5 s)
 */
#define DSA_V2_TRACE 0
#include "v2_sm90.cu"

#include "mla_dev_inputs.h"

static void trace(int T, int H, int splits, const char *name) {
  const int64_t S = 1 << 17;
  const int topk = 2048, nblk = topk / 64;
  uint64_t seed = 1;
  uint8_t *kv = (uint8_t *)malloc((size_t)S * 656);
  mla_dev_kv(kv, S, 1, &seed);
  uint16_t *q = (uint16_t *)malloc((size_t)T * H * 576 * 2);
  mla_dev_q(q, (size_t)T * H * 576, &seed);
  int32_t *idx = (int32_t *)malloc((size_t)T * topk * 4);
  mla_dev_indices(idx, (size_t)T * topk, S, &seed);
  void *dkv, *dq, *didx, *dout;
  float *dlse;
  CK(cudaMalloc(&dkv, (size_t)S * 656));
  CK(cudaMalloc(&dq, (size_t)T * H * 576 * 2));
  CK(cudaMalloc(&didx, (size_t)T * topk * 4));
  CK(cudaMalloc(&dout, (size_t)T * H * 512 * 2));
  CK(cudaMalloc(&dlse, (size_t)T * H * 4));
  CK(cudaMemcpy(dkv, kv, (size_t)S * 656, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dq, q, (size_t)T * H * 576 * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(didx, idx, (size_t)T * topk * 4, cudaMemcpyHostToDevice));

  const dsa_sparse_mla_args a = mla_dev_args(dq, T, H, dkv, DSA_KV_FP8_PACKED, S, didx, topk, dout, dlse);
  dsa_mla_plan pl;
  pl.kernel = DSA_MLA_KERNEL_SM90;
  pl.mt = H <= 16 ? 1 : 2;
  pl.groups = (H + 16 * pl.mt - 1) / (16 * pl.mt);
  pl.num_blocks = nblk;
  pl.splits = splits;
  pl.blocks_per_split = nblk / splits;
  for (int i = 0; i < 3; ++i) CK((cudaError_t)dsa_sparse_mla_v2_launch(&a, &pl, 0));
  CK(cudaDeviceSynchronize());
  CK((cudaError_t)dsa_sparse_mla_v2_launch(&a, &pl, 0)); /* the traced one, alone */
  CK(cudaDeviceSynchronize());
  long long tr[512];
  CK(cudaMemcpyFromSymbol(tr, g_v2_trace, sizeof tr));
  const long long t0 = tr[0];
  printf("== %s: %d tokens x %d heads, cluster of %d, %d chunks a CTA (SM cycles since entry)\n", name, T, H, splits,
         nblk / splits);
  printf("  griddep %lld, producer slots ready %lld, consumer Q ready %lld\n", tr[1] - t0, tr[200] - t0, tr[2] - t0);
  const int n = nblk / splits;
  for (int c = 0; c < n; ++c) {
    if (c > 3 && c < n - 2) continue;
    printf("  chunk %2d  producer: free %7lld  half0 %7lld  half1 %7lld  published %7lld | consumer: landed %7lld  "
           "QK %7lld  P %7lld  PV %7lld\n",
           c, tr[211 + 3 * c] - t0, tr[400 + 2 * c] - t0, tr[401 + 2 * c] - t0, tr[212 + 3 * c] - t0,
           tr[10 + 4 * c] - t0, tr[11 + 4 * c] - t0, tr[12 + 4 * c] - t0, tr[13 + 4 * c] - t0);
  }
  printf("  all done %lld, cluster barrier %lld, merged %lld, exit barrier %lld\n", tr[3] - t0, tr[4] - t0,
         tr[5] - t0, tr[6] - t0);
  free(kv);
  free(q);
  free(idx);
  CK(cudaFree(dkv));
  CK(cudaFree(dq));
  CK(cudaFree(didx));
  CK(cudaFree(dout));
  CK(cudaFree(dlse));
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("dsa-trace-mla: no CUDA device\n");
    return 77;
  }
  trace(1, 16, 8, "decode 1 x 16 heads");
  trace(64, 16, 2, "decode 64 x 16 heads");
  trace(128, 128, 1, "decode 128 x 128 heads");
  return 0;
}
