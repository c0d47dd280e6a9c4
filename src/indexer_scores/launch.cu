/*
 * indexer_scores/launch.cu — picks the scoring kernel:
 *   v1 (v1_mma.cu)        mma.sync f16, keys converted from e4m3 in registers; bf16 q and FP8 q
 *   v2 (v2_fp8_wgmma.cu)  FP8 q only: e4m3 x e4m3 wgmma straight on the cache bytes
 *   v3 (v3_fp8_ws.cu)     v2's tiles, warp-specialised (a producer warpgroup, three consumer
 *                         warpgroups, mbarriers), one CTA an SM; FP8 q on e4m3 wgmma, bf16 q on f16
 *                         wgmma with keys converted exactly
 * Prefill runs on v3 (H200, 64 tokens: FP8 q 0.75 ms at 1M against v1's 1.96, 0.116 at 128k against
 * 0.34; bf16 q 1.29 / 0.250 against 1.96 / 0.341); decode stays on v1 (v3's one CTA an SM, 16 tokens'
 * columns wide, loses where a group is one to eight tokens; docs/PERF.md). DSA_INDEXER_KERNEL=v1 /
 * v2 / v3 forces one (dsa.c sets params.kernel; v2 only with FP8 q).
 */
#include <cuda_runtime.h>

#include "dsa_kernels.h"

extern "C" int dsa_indexer_scores_launch(const dsa_scores_params *p, cudaStream_t stream) {
  const bool fp8_q = p->q.q_dtype == DSA_DTYPE_FP8_E4M3;
  if (fp8_q && p->kernel == 2) return dsa_indexer_scores_v2_launch(p, stream);
  if (p->kernel == 3) return dsa_indexer_scores_v3_launch(p, stream); /* bf16 q: its f16 path */
  if (p->kernel == 5) return dsa_indexer_scores_v3t_launch(p, stream);
  if (p->kernel == 0 && p->rows.mode == DSA_ROWS_PREFILL) return dsa_indexer_scores_v3_launch(p, stream);
  return dsa_indexer_scores_v1_launch(p, stream);
}
