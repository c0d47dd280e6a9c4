/*
 * indexer_scores/launch.cu — picks the scoring kernel:
 *   v1 (v1_mma.cu)        mma.sync f16, keys converted from e4m3 in registers; bf16 q and FP8 q
 *   v2 (v2_fp8_wgmma.cu)  FP8 q only: e4m3 x e4m3 wgmma straight on the cache bytes
 *   v3 (v3_fp8_ws.cu)     v2's tiles, warp-specialised (a producer warpgroup, three consumer
 *                         warpgroups, mbarriers), one CTA an SM; FP8 q on e4m3 wgmma, bf16 q (only
 *                         when forced, not yet measured) on f16 wgmma with keys converted exactly
 * FP8-q prefill runs on v3 (H200, 64 tokens: 0.74 ms at 1M against v1's 1.92, 0.116 at 128k against
 * 0.32); decode and bf16 q stay on v1 (v3's one CTA an SM, 16 tokens' columns wide, loses where a
 * group is one to eight tokens; docs/PERF.md). DSA_INDEXER_KERNEL=v1 / v2 / v3 forces one
 * (dsa.c sets params.kernel; v2 / v3 only with FP8 q).
 */
#include <cuda_runtime.h>

#include "dsa_kernels.h"

extern "C" int dsa_indexer_scores_launch(const dsa_scores_params *p, cudaStream_t stream) {
  const bool fp8_q = p->q.q_dtype == DSA_DTYPE_FP8_E4M3;
  if (fp8_q && p->kernel == 2) return dsa_indexer_scores_v2_launch(p, stream);
  if (p->kernel == 3) return dsa_indexer_scores_v3_launch(p, stream); /* bf16 q: its f16 path */
  if (fp8_q && p->kernel == 0 && p->rows.mode == DSA_ROWS_PREFILL) return dsa_indexer_scores_v3_launch(p, stream);
  return dsa_indexer_scores_v1_launch(p, stream);
}
