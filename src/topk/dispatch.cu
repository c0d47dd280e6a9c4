/*
 * topk/dispatch.cu — runs a top-k launch on the kernel the top-k choice table (host/choose.c) named:
 *   registers  (registers.cu)  one 1,024-thread CTA a row, keys in registers (rows <= 16,384)
 *   slices     (slices.cu)     a row in shared memory, one CTA a row or a cluster of p->cluster CTAs
 *   chain      (chain.cu)      histogram, filter, resolve over the workspace (any row)
 * Where the device cannot form a cluster of slices (e.g. a partitioned GPU; never seen on a whole
 * H200, so untested): one CTA a row when the row fits one CTA's shared memory, else the chain.
 */
#include <cuda_runtime.h>

#include "kernels.h"

extern "C" int dsa_topk_launch(const dsa_topk_params *p, void *workspace, cudaStream_t stream) {
  if (p->num_tokens <= 0) return 0;
  if (p->kernel == DSA_TOPK_REGISTERS) return dsa_topk_registers_launch(p, stream);
  if (p->kernel == DSA_TOPK_SLICES) {
    const int err = dsa_topk_slices_launch(p, p->cluster, stream);
    if (err != (int)cudaErrorInvalidClusterSize || p->cluster == 1) return err;
    (void)cudaGetLastError(); /* the launch's own error, not one the caller left pending */
    if (p->rows.max_len <= DSA_TOPK_ONE_CTA_MAX_LEN) return dsa_topk_slices_launch(p, 1, stream);
  }
  return dsa_topk_chain_launch(p, workspace, stream);
}
