/*
 * indexer_scores/launch.cu — picks the scoring kernel:
 *   v1 (v1_mma.cu)        mma.sync f16, keys converted from e4m3 in registers; bf16 q and FP8 q
 *   v2 (v2_fp8_wgmma.cu)  FP8 q only: e4m3 x e4m3 wgmma straight on the cache bytes
 *   v3 (v3_fp8_ws.cu)     v2's tiles, warp-specialised (a producer warpgroup, three consumer
 *                         warpgroups, mbarriers), one CTA an SM; FP8 q on e4m3 wgmma, bf16 q on f16
 *                         wgmma with keys converted exactly; v3t: the same with decode pages moved by
 *                         TMA (one tensor copy a 64-key page)
 * Prefill runs on v3 (H200, 64 tokens: FP8 q 0.72 ms at 1M against v1's 1.96, 0.114 at 128k against
 * 0.34; bf16 q 1.29 / 0.250 against 1.96 / 0.341); FP8-q decode on v3t where the cache has 64-key
 * pages (1 token: 6.9 / 10.9 / 45.2 us at 8k / 128k / 1M against v1's 8.0 / 14.7 / 61.5; B = 256 x 8k
 * 86 against 107), v1 otherwise and for bf16-q decode (docs/PERF.md). DSA_INDEXER_KERNEL=v1 / v2 / v3
 * / v3t forces one (dsa.c sets params.kernel; v2 and v3t's TMA only with FP8 q).
 */
#include <cuda_runtime.h>

#include "dsa_kernels.h"

extern "C" int dsa_indexer_scores_launch(const dsa_scores_params *p, cudaStream_t stream) {
  const bool fp8_q = p->q.q_dtype == DSA_DTYPE_FP8_E4M3;
  if (fp8_q && p->kernel == 2) return dsa_indexer_scores_v2_launch(p, stream);
  if (p->kernel == 3) return dsa_indexer_scores_v3_launch(p, stream); /* bf16 q: its f16 path */
  if (p->kernel == 5) return dsa_indexer_scores_v3t_launch(p, stream);
  if (p->kernel == 0 && p->rows.mode == DSA_ROWS_PREFILL) return dsa_indexer_scores_v3_launch(p, stream);
  if (p->kernel == 0 && fp8_q) return dsa_indexer_scores_v3t_launch(p, stream); /* v1 where no tensor map */
  return dsa_indexer_scores_v1_launch(p, stream);
}
