/*
 * launch.cu — runs an attention plan (plan.c) on the kernel version it names:
 *   v1 (v1_mma.cu)   mma.sync, split partials in the workspace + a combine kernel
 *   v2 (v2_sm90.cu)  wgmma, KV rows as M; the splits of a token form a cluster (no workspace)
 *   v3 (v3_sm90.cu)  wgmma, 64 heads as M; CTAs of (token, 64 heads), split over a cluster below a
 *                    wave (no workspace)
 */
#include <cuda_runtime.h>

#include "dsa_kernels.h"

extern "C" int dsa_sparse_mla_launch(const dsa_sparse_mla_args *a, const dsa_mla_plan *pl, void *workspace,
                                     cudaStream_t stream) {
  if (a->num_tokens <= 0) return 0;
  if (pl->kernel == DSA_MLA_KERNEL_V3) {
    const int err = dsa_sparse_mla_v3_launch(a, pl, stream);
    if (err != (int)cudaErrorInvalidClusterSize || pl->splits == 1) return err;
    dsa_mla_plan whole = *pl; /* no cluster (as below; untested path): each CTA takes all its chunks */
    whole.splits = 1;
    whole.blocks_per_split = whole.num_blocks;
    return dsa_sparse_mla_v3_launch(a, &whole, stream);
  }
  if (pl->kernel == DSA_MLA_KERNEL_SM90) {
    const int err = dsa_sparse_mla_v2_launch(a, pl, stream);
    /* A cluster the device cannot form ("cluster misconfiguration", e.g. a partitioned GPU with
     * small GPCs; not seen on a whole H200, so this path is untested): the same call on v1,
     * whose workspace is the one the caller sized. */
    if (err != (int)cudaErrorInvalidClusterSize) return err;
    dsa_device_info info;
    const int qerr = dsa_device_query(&info);
    if (qerr != 0) return qerr;
    const dsa_mla_plan v1 = dsa_mla_make_plan(a, info.num_sms, DSA_MLA_KERNEL_MMA);
    return dsa_sparse_mla_v1_launch(a, &v1, workspace, stream);
  }
  return dsa_sparse_mla_v1_launch(a, pl, workspace, stream);
}
