/*
 * attention/dispatch.cu — runs an attention plan (host/plan.c) on the kernel the attention choice
 * table (host/choose.c) named:
 *   mma_split   (mma_split.cu)  mma.sync, split partials in the workspace + a combine kernel
 *   rows_as_m   (rows_as_m.cu)  wgmma, KV rows as M; the splits of a token form a cluster (no workspace)
 *   heads_as_m  (heads_as_m.cu) wgmma, 64 heads as M, warp-specialised; CTAs of (token, 64 heads),
 *                               split over a cluster below a wave (no workspace)
 *   seesaw      (heads_as_m.cu) the same CTAs and splits, the chunks in pairs, a consumer warpgroup each
 *   token_groups (heads_as_m.cu, token_groups.cu) 64 / H neighbouring tokens a CTA over the union of
 *               their index lists (built first into the workspace), unsplit
 * Where the device cannot form a plan's cluster ("cluster misconfiguration", e.g. a partitioned GPU
 * with small GPCs; never seen on a whole H200, so these paths are untested): heads_as_m runs the same
 * plan unsplit, rows_as_m the call on mma_split, whose workspace is the one the caller sized.
 */
#include <cuda_runtime.h>

#include "host/status.h"
#include "kernels.h"

extern "C" int dsa_attention_launch(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl, void *workspace,
                                    cudaStream_t stream) {
  if (a->num_tokens <= 0) return 0;
  if (pl->kernel == DSA_ATTN_TOKEN_GROUPS) return dsa_attention_token_groups_launch(a, pl, workspace, stream);
  if (pl->kernel == DSA_ATTN_HEADS_AS_M || pl->kernel == DSA_ATTN_SEESAW) {
    const int err = dsa_attention_heads_as_m_launch(a, pl, workspace, stream);
    if (err != (int)cudaErrorInvalidClusterSize || pl->splits == 1) return err;
    dsa_attention_plan whole = *pl; /* each CTA takes all its chunks */
    whole.splits = 1;
    whole.blocks_per_split = whole.num_blocks;
    return dsa_attention_heads_as_m_launch(a, &whole, workspace, stream);
  }
  if (pl->kernel == DSA_ATTN_ROWS_AS_M) {
    const int err = dsa_attention_rows_as_m_launch(a, pl, stream);
    if (err != (int)cudaErrorInvalidClusterSize) return err;
    dsa_device_info info;
    const int qerr = dsa_device_query(&info);
    if (qerr != 0) return qerr;
    const dsa_attention_plan split = dsa_plan_attention(a, &info, DSA_ATTN_MMA_SPLIT, 0);
    return dsa_attention_mma_split_launch(a, &split, workspace, stream);
  }
  return dsa_attention_mma_split_launch(a, pl, workspace, stream);
}
