/*
 * indexer/dispatch.cu — runs a scoring launch on the scorer the choice table (host/choose.c) named:
 *   mma        (scores_mma.cu)    mma.sync f16, keys as M, converted from e4m3 in registers
 *   wgmma      (scores_wgmma.cu)  warp-specialised wgmma (e4m3 for FP8 q, f16 for bf16 q), keys by
 *                                 cp.async into a twelve-stage mbarrier ring
 *   wgmma_tma  (scores_wgmma.cu)  the same, each 64-key decode page by one TMA tensor copy
 * Where the driver makes no tensor map for wgmma_tma, the table's fallback runs (mma by default,
 * wgmma when wgmma_tma was forced). Decode scores + top-k in one kernel (the fused indexer,
 * dsa_indexer_fused_launch in scores_wgmma.cu) is launched by host/api_indexer.c where
 * dsa_choose_indexer picks it; where it declines, this scorer and the top-k kernel run.
 */
#include <cuda_runtime.h>

#include "kernels.h"

extern "C" int dsa_scores_launch(const dsa_scores_params *p, cudaStream_t stream) {
  switch (p->kernel) {
    case DSA_SCORES_WGMMA_TMA: {
      const int err = dsa_scores_wgmma_tma_launch(p, stream);
      if (err != DSA_SCORES_NO_TENSOR_MAP) return err;
      return p->fallback == DSA_SCORES_WGMMA ? dsa_scores_wgmma_launch(p, stream) : dsa_scores_mma_launch(p, stream);
    }
    case DSA_SCORES_WGMMA:
      return dsa_scores_wgmma_launch(p, stream);
    default:
      return dsa_scores_mma_launch(p, stream);
  }
}
