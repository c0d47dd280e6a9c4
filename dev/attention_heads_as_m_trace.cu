/*
 * dev/attention_heads_as_m_trace.cu — what a wave of heads_as_m CTAs spends besides its chunks. The
 * plans cost a wave about 6 chunk times (src/host/plan.c, fitted on an H100: one wave of 8 tokens x 64
 * heads FP8, 4 chunks a CTA, 29.2 us, of which ~18 the wave's own); this says where those go. The
 * library's file is compiled into this one (src/attention/heads_as_m.cu); the traced kernel below is a
 * copy of its kernel body for packed FP8 KV (no seesaw) — the roles called in the same order — with
 * thread 0 of each warpgroup storing %globaltimer (ns, comparable across SMs) at its boundaries:
 *   warpgroup 0 (QK, softmax, PV of dims 0-255): entry, griddep released, Q staged, its last chunk
 *     done, the first cluster barrier passed, the merge done, exit;
 *   warpgroup 1 (PV of dims 256-511): its last chunk done;
 *   warpgroup 2 (the producer): its last chunk published.
 * Keep the copy in step with the library's kernel when its orchestration changes. The kernel runs as
 * a CUDA graph, hot L2, as dsa-bench times it; printed per shape: ns since the earliest CTA entry,
 * min / median / max over CTAs, and the graph replay time (median of 50): what lies outside the
 * kernel's span is launch and completion.
 * Usage: dsa-dev-attention-heads-as-m-trace   (on the GPU machine; ~5 s)
 */
#include "attention/heads_as_m.cu"

#include <algorithm>
#include <vector>

#include "mla_dev_inputs.h"

#define HT_MAX_CTAS 1024
#define HT_STAMPS 10
__device__ unsigned long long g_trace[HT_MAX_CTAS * HT_STAMPS];
/* stamp k by thread 0 of the calling warpgroup */
#define TRACE(k)                                                                      \
  do {                                                                                \
    if ((threadIdx.x & 127) == 0 && blockIdx.x < HT_MAX_CTAS) {                       \
      unsigned long long t_;                                                          \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                          \
      g_trace[blockIdx.x * HT_STAMPS + (k)] = t_;                                     \
    }                                                                                 \
  } while (0)
enum { T_ENTRY, T_GRIDDEP, T_Q, T_QK_DONE, T_PV_DONE, T_PRODUCED, T_CLUSTER, T_MERGED, T_EXIT, T_COUNT };
static_assert(T_COUNT <= HT_STAMPS, "stamps");

/* hm_attention_kernel<FP8 = true, SEESAW = false>, stamped. */
__global__ void __launch_bounds__(HM_THREADS, 1) ht_traced_kernel(const hm_params p) {
  constexpr bool FP8 = true;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint32_t s_u32;
  uint8_t *smem = hm_smem_base(smem_raw, s_u32);
  const uint32_t tile_u32 = s_u32 + HM_TILE_OFF;
  int *valid_s = (int *)(smem + HM_VALID_OFF);
  float *colf_s = (float *)(smem + HM_COLF_OFF), *qexp_s = (float *)(smem + HM_QEXP_OFF);
  const mbar_ring ring = hm_ring_of(s_u32);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (tid == 0) TRACE(T_ENTRY);
  const int split = (int)(blockIdx.x % p.splits);

  if (tid == 0) ring_init(ring, 2, 128, 256);
  __syncthreads();
  ptx_griddep_wait();
  if (tid == 0) TRACE(T_GRIDDEP);
  const hm_unit u = hm_unit_of(p, blockIdx.x / p.splits, split);

  if (warp >= 8) {
    const int w = warp - 8;
    ptx_setmaxnreg_dec<HM_REG_PRODUCER(true)>();
    hm_produce_fp8(p, u.idx_row, u.end, u.n, 0, tile_u32, ring, valid_s, colf_s, w, lane);
    TRACE(T_PRODUCED);
    if (p.splits > 1) hm_merge_cluster<FP8>(p, s_u32, smem, u.t, u.head0, false, tid);
    return;
  }

  const int cw = warp >> 2;
  hm_load_q<FP8>(p, smem, qexp_s, u.t, u.head0, warp, lane);
  ptx_fence_proxy_async_smem();
  ptx_bar_sync(HM_BAR_Q_LOADED, 256);
  if (tid == 0) TRACE(T_Q);
  const hm_ctx x = hm_ctx_of(s_u32, smem, u, p.splits, 0, true);
  if (cw == 0) {
    ptx_setmaxnreg_inc<HM_REG_QK(FP8)>();
    hm_consume_qk<FP8, 0>(p, x, warp & 3, lane);
    TRACE(T_QK_DONE);
    if (p.splits > 1) { /* hm_merge_cluster, stamped between its barriers */
      ptx_cluster_sync();
      TRACE(T_CLUSTER);
      hm_merge_any<FP8>(p, s_u32, smem, u.t, u.head0, tid);
      TRACE(T_MERGED);
      ptx_cluster_sync();
    }
    TRACE(T_EXIT);
  } else {
    if (HM_REG_PV(FP8) > 168) ptx_setmaxnreg_inc<(HM_REG_PV(FP8) > 168 ? HM_REG_PV(FP8) : 168)>();
    hm_consume_pv<FP8, 0>(p, x, warp & 3, lane);
    TRACE(T_PV_DONE);
    if (p.splits > 1) hm_merge_cluster<FP8>(p, s_u32, smem, u.t, u.head0, true, tid);
  }
}

/* T tokens x H heads, packed FP8 KV, topk 2048 random distinct slots of S, split `splits` ways. */
static void trace(int T, int H, int splits) {
  const int64_t S = 1 << 17;
  const int topk = 2048;
  mla_dev_problem pb = mla_dev_problem_fp8(T, H, S, topk, 7);
  const dsa_sparse_mla_args a = pb.a;
  dsa_attention_plan pl;
  memset(&pl, 0, sizeof pl);
  pl.kernel = DSA_ATTN_HEADS_AS_M;
  pl.mt = 4;
  pl.groups = (H + 63) / 64;
  pl.num_blocks = topk / 64;
  pl.splits = splits;
  pl.blocks_per_split = (pl.num_blocks + splits - 1) / splits;
  const hm_params prm = hm_params_of(&a, &pl);
  const int ctas = T * pl.groups * splits;
  if (ctas > HT_MAX_CTAS) {
    printf("== %d tokens x %d heads, %d splits: %d CTAs, more than the trace keeps\n", T, H, splits, ctas);
    return;
  }
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  static dsa_smem_cache cache;
  cudaGraph_t gr;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  CK(dsa_launch_smem_cluster(ht_traced_kernel, &cache, dim3((unsigned)ctas), HM_THREADS, HM_SMEM, st, true,
                             splits > 1 ? (unsigned)splits : 0u, prm));
  CK(cudaStreamEndCapture(st, &gr));
  CK(cudaGraphInstantiate(&ge, gr, 0));
  const float replay_us = mla_dev_replay_us(ge, st, 20, 50);
  std::vector<unsigned long long> tr((size_t)ctas * HT_STAMPS);
  CK(cudaMemcpyFromSymbol(tr.data(), g_trace, tr.size() * 8));
  unsigned long long t0 = ~0ull, t1 = 0;
  for (int c = 0; c < ctas; ++c) {
    t0 = std::min(t0, tr[(size_t)c * HT_STAMPS + T_ENTRY]);
    t1 = std::max(t1, tr[(size_t)c * HT_STAMPS + T_EXIT]);
  }
  printf("== %d tokens x %d heads, FP8, heads_as_m, %d CTAs (%d splits, %d chunks a CTA); graph replay median "
         "%.2f us, the CTAs' span (first entry to last exit) %.2f us\n",
         T, H, ctas, splits, pl.blocks_per_split, replay_us, (t1 - t0) / 1000.0);
  printf("  %-30s %8s %8s %8s\n", "stamp (ns since first entry)", "min", "med", "max");
  static const char *const names[T_COUNT] = {"entry",           "griddep released", "Q staged",
                                             "QK warpgroup done", "PV warpgroup done", "producer done",
                                             "cluster barrier",  "merged",           "exit"};
  for (int k = 0; k < T_COUNT; ++k) {
    if ((k == T_CLUSTER || k == T_MERGED) && splits == 1) continue;
    std::vector<long long> v;
    for (int c = 0; c < ctas; ++c) v.push_back((long long)(tr[(size_t)c * HT_STAMPS + k] - t0));
    mla_dev_print_spread(names[k], v.data(), ctas);
  }
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(gr));
  CK(cudaStreamDestroy(st));
  mla_dev_problem_free(&pb);
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("dsa-dev-attention-heads-as-m-trace: no CUDA device\n");
    return 77;
  }
  /* one wave at 4 / 8 / 16 / 32 chunks a CTA (the fit's points), two waves, 128 heads */
  trace(8, 64, 8);
  trace(16, 64, 4);
  trace(32, 64, 2);
  trace(64, 64, 1);
  trace(32, 64, 8);
  trace(1, 128, 8);
  trace(128, 128, 1);
  return 0;
}
