/*
 * dev/attention_mma_split_trace.cu — where the time of a one-token decode goes in the mma_split
 * attention kernel and its combine. The library's file is compiled into this one
 * (src/attention/mma_split.cu: its phases, its combine); the traced kernel below is a copy of its
 * kernel body — the phases called in the same order — with thread 0 of every CTA storing
 * %globaltimer at the phase boundaries of the first chunk (entry, griddep, index + Q issued, Q in
 * registers, chunk landed, unpacked, S, softmax, PV done, partials stored), and the combine around
 * ms_combine_row (entry, griddep released, done). Keep the copy in step with the library's kernel
 * when its orchestration changes.
 * The pair runs as a CUDA graph, hot L2, as dsa-bench times it; printed: ns since the earliest CTA
 * entry, min / median / max over CTAs, and the graph replay time (median of 50).
 * Usage: dsa-dev-attention-mma-split-trace   (on the GPU machine; ~5 s)
 */
#include "attention/mma_split.cu"

#include <algorithm>
#include <vector>

#include "mla_dev_inputs.h"

__device__ unsigned long long g_trace[4096 * 16]; /* attention CTA x 16 stamps */
__device__ unsigned long long g_ctrace[1024 * 4]; /* combine CTA x 4 stamps */
#define STAMP(arr, ctas, per, i)                                  \
  do {                                                            \
    if (threadIdx.x == 0 && blockIdx.x < (ctas)) {                \
      unsigned long long t_;                                      \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));      \
      arr[blockIdx.x * (per) + (i)] = t_;                         \
    }                                                             \
  } while (0)
#define TRACE(i) STAMP(g_trace, 4096, 16, i)
#define CTRACE(i) STAMP(g_ctrace, 1024, 4, i)

/* ms_attention_kernel, stamped (the same phases, in the same order). */
template <int MT, bool FP8>
__global__ void __launch_bounds__(MS_THREADS, 1) ms_traced_kernel(const ms_params p) {
  typedef ms_cfg<MT, FP8> C;
  extern __shared__ __align__(128) uint8_t smem[];
  ms_smem m;
  m.smem = smem;
  m.stage = smem + C::STAGE_OFF;
  m.sbuf = (float *)(smem + C::SBUF_OFF);
  m.p_s = smem + C::P_OFF;
  m.idx_s = (int *)(smem + C::IDX_OFF);
  m.alpha_s = (float *)(smem + C::STAT_OFF);
  m.row_m_s = m.alpha_s + C::HG;
  m.row_l_s = m.row_m_s + C::HG;
  m.kscale_s = (float *)(smem + C::SCALE_OFF);
  m.vscale_s = (uint32_t *)(m.kscale_s + 4 * MLA_BLOCK_N);
  m.q_u32 = ptx_smem_u32(smem + C::Q_OFF);
  m.tile_u32 = ptx_smem_u32(smem + C::TILE_OFF);
  m.stage_u32 = ptx_smem_u32(m.stage);
  m.p_u32 = ptx_smem_u32(m.p_s);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, qd = lane & 3;
  int64_t cta = blockIdx.x;
  const int group = (int)(cta % p.num_groups);
  cta /= p.num_groups;
  const int split = (int)(cta % p.splits);
  const int64_t t = p.token_offset + cta / p.splits;
  const int head0 = group * C::HG;
  TRACE(0);
  ptx_griddep_wait();
  TRACE(1);
  const int blk0 = split * p.blocks_per_split;
  const int blk1 = min(p.num_blocks, blk0 + p.blocks_per_split);
  const int begin = blk0 * MLA_BLOCK_N;
  int end = min(p.topk, blk1 * MLA_BLOCK_N);
  if (p.io.lens) end = min(end, max(__ldg(p.io.lens + t), 0));
  const int nchunks = end > begin ? (end - begin + MLA_BLOCK_N - 1) / MLA_BLOCK_N : 0;
  const int32_t *idx_row = p.io.indices + t * p.io.indices_stride;
  int slot0 = -1, slot1 = -1;
  if (tid < MLA_BLOCK_N) {
    slot0 = mla_entry_slot(idx_row, begin + tid, end, p.io.num_slots);
    slot1 = mla_entry_slot(idx_row, begin + MLA_BLOCK_N + tid, end, p.io.num_slots);
  }
  ms_load_q<MT, FP8>(p, m, t, head0, tid);
  ptx_cp_async_commit();
  if (tid < MLA_BLOCK_N) {
    m.idx_s[tid] = slot0;
    m.idx_s[MLA_BLOCK_N + tid] = slot1;
  }
  __syncthreads();
  TRACE(2);
  if (nchunks > 0) ms_gather<MT, FP8>(p, m, 0, tid);
  ptx_cp_async_commit();
  uint32_t qfrag[C::Q_REGS ? C::KSTEPS : 1][4];
  if (C::Q_REGS) {
    ptx_cp_async_wait<1>();
    __syncthreads();
    const int s_mi = warp % MT, s_kq = warp / (2 * MT);
    const int r = s_mi * 16 + (lane & 15);
#pragma unroll
    for (int s = 0; s < C::KSTEPS; ++s)
      ptx_ldmatrix_x4(qfrag[C::Q_REGS ? s : 0], m.q_u32 + tile_off(r, 2 * (s_kq * C::KSTEPS + s) + (lane >> 4)));
  }
  TRACE(3);
  const int sm_row = tid / C::ROW_THREADS, sm_part = tid % C::ROW_THREADS;
  float m_run = MS_NEG_INF, l_run = 0.f;
  float oacc[MT][8][4];
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k) oacc[mi][nt][k] = 0.f;
  for (int c = 0; c < nchunks; ++c) {
    ptx_cp_async_wait<0>();
    __syncthreads();
    if (c == 0) TRACE(4);
    if (FP8) {
      ms_unpack_fp8<MT, FP8>(m, tid);
      __syncthreads();
      if (c == 0) TRACE(5);
    }
    if (c + 1 < nchunks) ms_gather<MT, FP8>(p, m, c + 1, tid);
    ptx_cp_async_commit();
    int next_slot = -1;
    if (tid < MLA_BLOCK_N) next_slot = mla_entry_slot(idx_row, begin + (c + 2) * MLA_BLOCK_N + tid, end, p.io.num_slots);
    const uint32_t kv_u32 = m.tile_u32 + (FP8 ? 0 : (c & 1) * C::TILE_BYTES);
    ms_qk<MT, FP8>(m, kv_u32, qfrag, warp, lane, g, qd);
    __syncthreads();
    if (c == 0) TRACE(6);
    ms_softmax<MT, FP8>(p, m, c, sm_row, sm_part, m_run, l_run);
    __syncthreads();
    if (c == 0) TRACE(7);
    ms_pv<MT, FP8>(m, kv_u32, oacc, warp, lane, g, qd);
    if (tid < MLA_BLOCK_N) m.idx_s[((c + 2) % 3) * MLA_BLOCK_N + tid] = next_slot;
  }
  TRACE(8);
  ptx_griddep_launch_dependents();
  ptx_cp_async_wait<0>();
  ms_finish<MT, FP8>(p, m, oacc, t, head0, split, nchunks, sm_row, sm_part, m_run, l_run, tid, warp, g, qd);
  TRACE(9);
}

/* The combine, stamped at its entry, after griddepcontrol.wait and at its end. */
__global__ void __launch_bounds__(MS_COMBINE_THREADS) ms_traced_combine_kernel(const float *o_part,
                                                                               const float2 *ml_part, int splits,
                                                                               int64_t rows, __nv_bfloat16 *out,
                                                                               float *lse) {
  CTRACE(0);
  ptx_griddep_wait();
  CTRACE(1);
  ms_combine_row(o_part, ml_part, splits, rows, out, lse);
  CTRACE(2);
}

/* The library launcher's parameters for a split plan, traced kernels launched in their place. */
template <int MT>
static cudaError_t traced_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl, void *ws,
                                 cudaStream_t st) {
  const ms_params prm = ms_params_of(a, pl, ws); /* the library's (splits > 1 here: the partials in ws) */
  const size_t rows = (size_t)a->num_tokens * a->num_heads;
  static dsa_smem_cache cache;
  cudaError_t err = dsa_launch_smem(ms_traced_kernel<MT, true>, &cache, dim3((unsigned)(a->num_tokens * pl->groups * pl->splits)),
                                    MS_THREADS, ms_cfg<MT, true>::SMEM_BYTES, st, true, prm);
  if (err != cudaSuccess) return err;
  return dsa_launch(ms_traced_combine_kernel, dim3((unsigned)rows), MS_COMBINE_THREADS, 0, st, true,
                    (const float *)prm.o_part, (const float2 *)prm.ml_part, pl->splits, (int64_t)rows, prm.io.out,
                    a->lse);
}

static void trace(int H, int splits, int mt) {
  const int64_t S = 1 << 16;
  const int topk = 2048, nblk = topk / 64, T = 1;
  mla_dev_problem pb = mla_dev_problem_fp8(T, H, S, topk, 1);
  const dsa_sparse_mla_args a = pb.a;
  const size_t rows = (size_t)T * H;
  void *dws;
  CK(cudaMalloc(&dws, (size_t)splits * rows * (512 * 4 + 8)));
  dsa_attention_plan pl;
  memset(&pl, 0, sizeof pl);
  pl.kernel = DSA_ATTN_MMA_SPLIT;
  pl.mt = mt;
  pl.groups = (H + 16 * pl.mt - 1) / (16 * pl.mt);
  pl.num_blocks = nblk;
  pl.splits = splits;
  pl.blocks_per_split = nblk / splits;

  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t gr;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  CK(mt == 1 ? traced_launch<1>(&a, &pl, dws, st) : mt == 2 ? traced_launch<2>(&a, &pl, dws, st) : traced_launch<4>(&a, &pl, dws, st));
  CK(cudaStreamEndCapture(st, &gr));
  CK(cudaGraphInstantiate(&ge, gr, 0));
  const float replay_us = mla_dev_replay_us(ge, st, 20, 50);
  const int ctas = pl.groups * splits * T;
  std::vector<unsigned long long> tr((size_t)ctas * 16), ct(rows * 4);
  CK(cudaMemcpyFromSymbol(tr.data(), g_trace, tr.size() * 8));
  CK(cudaMemcpyFromSymbol(ct.data(), g_ctrace, ct.size() * 8));
  unsigned long long t0 = ~0ull;
  for (int c = 0; c < ctas; ++c) t0 = std::min(t0, tr[c * 16]);
  printf("== 1 token x %d heads, FP8, mma_split MT=%d, %d CTAs (%d splits x %d groups) + combine %zu CTAs; graph "
         "replay median %.2f us (event-timed, ungated)\n",
         H, pl.mt, ctas, splits, pl.groups, rows, replay_us);
  printf("  %-30s %8s %8s %8s\n", "phase (ns since first entry)", "min", "med", "max");
  const char *names[10] = {"entry", "griddep released", "index + Q issued", "Q in registers", "chunk landed",
                           "unpacked", "S done", "softmax done", "PV done", "partials stored"};
  for (int k = 0; k < 10; ++k) {
    std::vector<long long> v;
    for (int c = 0; c < ctas; ++c) v.push_back((long long)(tr[c * 16 + k] - t0));
    mla_dev_print_spread(names[k], v.data(), ctas);
  }
  const char *cn[3] = {"combine entry", "combine griddep", "combine done"};
  for (int k = 0; k < 3; ++k) {
    std::vector<long long> v;
    for (size_t i = 0; i < rows; ++i) v.push_back((long long)(ct[i * 4 + k] - t0));
    mla_dev_print_spread(cn[k], v.data(), (int)rows);
  }
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(gr));
  mla_dev_problem_free(&pb);
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
    printf("dsa-dev-attention-mma-split-trace: no CUDA device\n");
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
