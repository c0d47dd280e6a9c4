/*
 * stub_kernels.h — a CPU-only stand-in for the launchers of src/kernels.h, linked instead of the
 * CUDA files into the host-layer test builds (test_host, fuzz_api_stub). Each stub checks what its
 * launcher relies on (the seam's preconditions: alignment, ranges, per-launch caps, workspace
 * bounds, contiguous coverage of the call's tokens), counts the launch and returns success, so the
 * chunk loops of src/host run on a machine without a GPU. A violated precondition is recorded and
 * the launch fails (cudaErrorLaunchFailure), which also ends any loop that would not.
 */
#ifndef DSA_STUB_KERNELS_H
#define DSA_STUB_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define DSA_STUB_LAUNCH_FAILURE 719 /* cudaErrorLaunchFailure */
#define DSA_STUB_NO_DEVICE 100      /* cudaErrorNoDevice */

typedef struct {
  /* Set by the test (kept across calls). */
  int num_sms;              /* what the device query reports (1..) */
  int cluster_ctas[9];      /* and the CTAs clusters of s = 2..8 keep resident, [s] (0: num_sms for clusters
                               of 2, half of it for larger ones, device.c's answer where the probe cannot ask) */
  int device_error;         /* non-zero: the device query fails with this CUDA error */
  int cc_major, cc_minor;   /* reported compute capability (9.0 by default) */
  int64_t launch_budget;    /* launches allowed per call; the next one fails (0 = unlimited) */
  int fused_decline;        /* the fused indexer declines every launch (the host then runs two kernels) */
  /* Set by dsa_stub_begin_call for each call. */
  const void *ws;           /* the call's workspace range */
  size_t ws_bytes;
  /* Recorded during the call. */
  int64_t launches;
  int64_t fused_launches;   /* fused indexer launches (each covers scores and top-k) */
  int budget_spent;         /* a launch failed because the budget was spent */
  int64_t scores_next;      /* token_begin the next scores launch must have */
  int64_t topk_next;        /* token_begin the next top-k launch must have (final, for deferred) */
  int64_t chunk_next;       /* token_begin the next deferred chunk top-k launch must have */
  int64_t scores_tokens;    /* tokens covered by scores launches */
  int64_t topk_tokens;      /* rows covered by top-k launches */
  int64_t store_tokens;
  int64_t mla_tokens;
  int mla_splits;           /* the plan of the last attention launch */
  int mla_mt;               /* its head tile: m-tiles of 16 heads per CTA */
  size_t mla_need;          /* its workspace need */
  int mla_kernel;           /* its kernel: a dsa_attention_kernel (kernels.h) */
  int mla_ctas;             /* its persistent grid (heads_as_m unsplit), 0: a CTA per unit */
  int mla_convert;          /* its packed FP8 rows converted into the workspace first */
  int scores_kernel;        /* the last scores launch's dsa_scores_kernel */
  int topk_kernel;          /* the last plain (non-deferred) top-k launch's dsa_topk_kernel */
  int topk_cluster;         /* and its CTAs a row */
  int merge_kernel;         /* the last merge launch's dsa_merge_kernel */
  int violations;
  char first_violation[512];
} dsa_stub_state;

extern dsa_stub_state g_dsa_stub;

/* Defaults: 132 SMs, sm_90, no budget. */
void dsa_stub_init(void);
/* Clears the per-call records; ws / ws_bytes = the workspace the call is given (may be NULL / 0). */
void dsa_stub_begin_call(const void *ws, size_t ws_bytes);

#endif
