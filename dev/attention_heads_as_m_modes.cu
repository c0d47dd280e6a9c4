/*
 * mla_v3_modes.cu — where the v3 attention kernel (sparse_mla/v3_sm90.cu) spends its time, by
 * leaving work out: built with DSA_V3_MODES, the kernel can skip its row loads (mode 1: the producer
 * only publishes; FP8 still converts zeros) or its MMAs and softmax (mode 2: the consumers only
 * release tiles). Times each mode for a few shapes (events around 20 back-to-back launches, hot L2,
 * every index entry valid, random data; no check: the tests do that).
 * Then the phase stamps of CTA 0 (V3_STAMP in the kernel) of one more full launch: mean SM cycles
 * per chunk of each phase over chunks 4..27.
 * Usage: dsa-mla-v3-modes   (on the GPU machine; ~10 s)
 */
#define DSA_V3_MODES 1
#include "v3_sm90.cu"

#include "mla_dev_inputs.h"

static void run(int fp8, int T, int H) {
  const int64_t S = 20000;
  const int topk = 2048;
  uint64_t seed = 7;
  const size_t row = fp8 ? 656 : 1152, kv_bytes = (size_t)S * row;
  uint8_t *kv = (uint8_t *)malloc(kv_bytes);
  mla_dev_kv(kv, S, fp8, &seed);
  int32_t *idx = (int32_t *)malloc(4 * (size_t)T * topk);
  mla_dev_indices(idx, (size_t)T * topk, S, &seed);
  void *dkv, *dq, *didx, *dout;
  CK(cudaMalloc(&dkv, kv_bytes));
  CK(cudaMalloc(&dq, 2 * (size_t)T * H * 576));
  CK(cudaMalloc(&didx, 4 * (size_t)T * topk));
  CK(cudaMalloc(&dout, 2 * (size_t)T * H * 512));
  CK(cudaMemcpy(dkv, kv, kv_bytes, cudaMemcpyHostToDevice));
  CK(cudaMemset(dq, 0x3C, 2 * (size_t)T * H * 576)); /* bf16 0x3C3C ~ 0.0115 */
  CK(cudaMemcpy(didx, idx, 4 * (size_t)T * topk, cudaMemcpyHostToDevice));
  const dsa_sparse_mla_args a =
      mla_dev_args(dq, T, H, dkv, fp8 ? DSA_KV_FP8_PACKED : DSA_KV_BF16, S, didx, topk, dout, NULL);
  dsa_mla_plan pl; /* what plan.c makes for v3 (not linked here: the kernel is this file's own build) */
  memset(&pl, 0, sizeof pl);
  pl.kernel = DSA_MLA_KERNEL_V3;
  pl.mt = 4;
  pl.groups = (H + 63) / 64;
  pl.num_blocks = pl.blocks_per_split = topk / 64;
  pl.splits = 1;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  static const struct {
    int mode;
    const char *name;
  } modes[] = {{0, "full kernel"}, {1, "no row loads"}, {2, "no MMA / softmax"}};
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; ++m) {
    g_v3_mode = modes[m].mode;
    for (int i = 0; i < 3; ++i) CK(dsa_sparse_mla_v3_launch(&a, &pl, 0));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 20; ++i) CK(dsa_sparse_mla_v3_launch(&a, &pl, 0));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double us = 1000.0 * ms / 20, flop = 2.0 * T * H * (double)topk * (576 + 512);
    printf("v3 %-4s %5d tokens x %3d heads  %-19s %9.1f us  %6.1f TFLOP/s\n", fp8 ? "fp8" : "bf16", T, H, modes[m].name,
           us, flop / us * 1e-6);
    if (modes[m].mode == 2) continue;
    /* phase stamps of CTA 0 (the last launch's) */
    CK(cudaDeviceSynchronize());
    unsigned tr[32][12];
    CK(cudaMemcpyFromSymbol(tr, g_v3_trace, sizeof tr));
    double d[12] = {0};
    const int c0 = 4, c1 = 28;
    for (int c = c0; c < c1; ++c) {
      d[0] += (double)(int)(tr[c][0] - tr[c - 1][5]); /* wg0: waiting for the tile */
      d[1] += (double)(int)(tr[c][1] - tr[c][0]);     /* QK */
      d[2] += (double)(int)(tr[c][2] - tr[c][1]);     /* softmax */
      d[3] += (double)(int)(tr[c][3] - tr[c][2]);     /* waiting for warpgroup 1 to free P */
      d[4] += (double)(int)(tr[c][4] - tr[c][3]);     /* P to shared memory */
      d[5] += (double)(int)(tr[c][5] - tr[c][4]);     /* PV (own half) */
      d[6] += (double)(int)(tr[c][7] - tr[c][6]);     /* wg1: waiting for P */
      d[7] += (double)(int)(tr[c][8] - tr[c][7]);     /* wg1: PV */
      d[8] += (double)(int)(tr[c][10] - tr[c][9]);    /* producer: tile free -> published */
      d[9] += (double)(int)(tr[c][5] - tr[c - 1][5]); /* wg0: one chunk */
      if (fp8) {
        d[10] += (double)(int)(tr[c][11] - tr[c][9]); /* producer: convert (and load the next rows) */
        d[11] += (double)(int)(tr[c][10] - tr[c][11]); /* producer: wait for the rope, scale it */
      }
    }
    for (int i = 0; i < 12; ++i) d[i] /= (c1 - c0);
    printf("      CTA 0 cycles/chunk %.0f | wg0 wait tile %.0f, QK %.0f, softmax %.0f, wait P free %.0f, P store %.0f, "
           "PV %.0f | wg1 wait P %.0f, PV %.0f | producer %.0f",
           d[9], d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8]);
    if (fp8) printf(" (convert %.0f, rope %.0f)", d[10], d[11]);
    printf("\n");
  }
  CK(cudaFree(dkv));
  CK(cudaFree(dq));
  CK(cudaFree(didx));
  CK(cudaFree(dout));
  free(kv);
  free(idx);
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("dsa-mla-v3-modes: no CUDA device\n");
    return 0;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int fp8 = 1; fp8 >= 0; --fp8) {
    run(fp8, 128, 128);
    run(fp8, 4096, 128);
  }
  return 0;
}
