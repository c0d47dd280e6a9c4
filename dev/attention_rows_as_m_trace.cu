/*
 * dev/attention_rows_as_m_trace.cu — where one CTA of the rows_as_m attention kernel spends its
 * time, by phase. The library's file is compiled into this one (src/attention/rows_as_m.cu); the
 * traced kernel below is a copy of its kernel body — the phases called in the same order — with
 * thread 0 of each warpgroup of CTA 0 storing clock64() at the phase boundaries: entry, griddep
 * released, the role done (the producer's last chunk published / the consumer's last PV), O staged,
 * the cluster barrier, the merge, exit. Keep the copy in step with the library's kernel when its
 * orchestration changes. (A per-chunk version of this trace lived in the kernel itself before the
 * kernels carried no trace hooks; git history has it.) Prints SM cycles since kernel entry for a
 * few shapes, packed FP8 KV, random data (no check: the tests do that).
 * Usage: dsa-dev-attention-rows-as-m-trace   (on the GPU machine; ~5 s)
 */
#include "attention/rows_as_m.cu"

#include <vector>

#include "mla_dev_inputs.h"

#define RM_TRACE_WG 4 /* warpgroups a CTA at most (32 heads: two consumers and the producer) */
#define RM_TRACE_N 8
__device__ long long g_trace[RM_TRACE_WG][RM_TRACE_N];
#define TRACE(i)                                                                             \
  do {                                                                                       \
    if (blockIdx.x == 0 && (threadIdx.x & 127) == 0) g_trace[threadIdx.x >> 7][i] = clock64(); \
  } while (0)

/* rm_attention_kernel, stamped. */
template <int HN, bool FP8>
__global__ void __launch_bounds__(rm_cfg<HN, FP8>::THREADS, 1) rm_traced_kernel(const rm_params p) {
  typedef rm_cfg<HN, FP8> C;
  constexpr int NA = C::NACC;
  extern __shared__ __align__(1024) uint8_t smem[];
  const rm_smem m = rm_smem_of<HN, FP8>(smem);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  int64_t cta = blockIdx.x;
  const int split = (int)(cta % p.splits);
  cta /= p.splits;
  const int group = (int)(cta % p.num_groups);
  const int64_t t = p.token_offset + cta / p.num_groups;
  const int head0 = group * HN;
  TRACE(0);
  if (tid == 0) rm_init_barriers<HN, FP8>(m);
  __syncthreads();
  ptx_griddep_wait();
  TRACE(1);
  int begin, end;
  const int nchunks = rm_range(p, t, split, &begin, &end);
  const int32_t *idx_row = p.io.indices + t * p.io.indices_stride;
  float m_run[C::NCOL], l_run[C::NCOL];
  float o[8][NA];
  float smax_run[4] = {0.f, 0.f, 0.f, 0.f};
  if (warp >= 4 * C::CWG) {
    const int w = warp - 4 * C::CWG;
    for (int i = tid - 128 * C::CWG; i < nchunks * RM_ROWS; i += 128)
      m.slot_s[i] = mla_entry_slot(idx_row, begin + i, end, p.io.num_slots);
    ptx_bar_sync(C::BAR_PRODUCER, 128);
    if (C::STAGED) rm_produce_fp8_staged<HN, FP8>(p, m, nchunks, w, lane);
    else if (FP8) rm_produce_fp8<HN, FP8>(p, m, nchunks, w, lane);
    else rm_produce_bf16(p, m, nchunks, w, lane);
  } else {
    rm_consume<HN, FP8>(p, m, t, head0, nchunks, warp, lane, m_run, l_run, o, smax_run);
  }
  TRACE(2);
  ptx_griddep_launch_dependents();
  if (p.splits == 1) { /* out stored from the accumulators: the phases after it are empty */
    if (warp < 4 * C::CWG) rm_store_unsplit<HN, FP8>(p, m, t, head0, warp, lane, m_run, l_run, o, smax_run);
    TRACE(3);
    TRACE(4);
    TRACE(5);
    TRACE(6);
    return;
  }
  __syncthreads();
  if (warp < 4 * C::CWG) rm_stage_partials<HN, FP8>(m, warp, lane, m_run, l_run, o, smax_run);
  TRACE(3);
  ptx_cluster_sync();
  TRACE(4);
  rm_merge_splits<HN, FP8>(p, m, t, head0, tid);
  TRACE(5);
  ptx_cluster_sync();
  TRACE(6);
}

template <int HN>
static void traced_launch(const rm_params &prm, unsigned ctas, cudaStream_t st) {
  static dsa_smem_cache cache;
  CK(dsa_launch_smem_cluster(rm_traced_kernel<HN, true>, &cache, dim3(ctas), rm_cfg<HN, true>::THREADS,
                             rm_cfg<HN, true>::SMEM_BYTES, st, true, (unsigned)prm.splits, prm));
}

static void trace(int T, int H, int splits, const char *name) {
  const int64_t S = 1 << 17;
  const int topk = 2048, nblk = topk / 64;
  mla_dev_problem pb = mla_dev_problem_fp8(T, H, S, topk, 1);
  const dsa_sparse_mla_args a = pb.a;
  dsa_attention_plan pl;
  memset(&pl, 0, sizeof pl);
  pl.kernel = DSA_ATTN_ROWS_AS_M;
  pl.mt = H <= 16 ? 1 : 2; /* 16 or 32 heads a CTA */
  pl.groups = (H + 16 * pl.mt - 1) / (16 * pl.mt);
  pl.splits = splits;
  pl.num_blocks = nblk;
  pl.blocks_per_split = nblk / splits;
  const rm_params prm = rm_params_of(&a, &pl);
  const unsigned ctas = (unsigned)(T * prm.num_groups * splits);
  for (int i = 0; i < 4; ++i) { /* the last one is read */
    if (H <= 16) traced_launch<16>(prm, ctas, 0);
    else traced_launch<32>(prm, ctas, 0);
    CK(cudaDeviceSynchronize());
  }
  long long tr[RM_TRACE_WG][RM_TRACE_N];
  CK(cudaMemcpyFromSymbol(tr, g_trace, sizeof tr));
  const int wgs = (H <= 16 ? 1 : 2) + 1;
  printf("== %s: %d tokens x %d heads, cluster of %d, %d chunks a CTA (CTA 0, SM cycles since entry)\n", name, T, H,
         splits, nblk / splits);
  const char *names[6] = {"griddep", "role done", "O staged", "cluster barrier", "merged", "exit"};
  for (int w = 0; w < wgs; ++w) {
    printf("  %-11s", w == wgs - 1 ? "producer" : w == 0 ? "consumer 0" : "consumer 1");
    for (int k = 1; k <= 6; ++k) printf("  %s %7lld", names[k - 1], tr[w][k] - tr[w][0]);
    printf("\n");
  }
  mla_dev_problem_free(&pb);
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("dsa-dev-attention-rows-as-m-trace: no CUDA device\n");
    return 77;
  }
  trace(1, 16, 8, "decode 1 x 16 heads");
  trace(64, 16, 2, "decode 64 x 16 heads");
  trace(64, 16, 1, "decode 64 x 16 heads, unsplit (O staged = out stored)");
  trace(64, 32, 1, "decode 64 x 32 heads, unsplit (O staged = out stored)");
  return 0;
}
