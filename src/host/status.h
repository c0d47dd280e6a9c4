/*
 * host/status.h — the library's error state and the CUDA facts behind a status (host/status.c,
 * host/device.c): every failing call records its message here for dsa_last_error().
 */
#ifndef DSA_STATUS_H
#define DSA_STATUS_H

#include "dsa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records a failure's message (printf format) for dsa_last_error() on this thread and returns st.
 * Exported (DSA_API) for libdsa_cp, which reports through the same error state; not part of dsa.h. */
DSA_API dsa_status dsa_fail(dsa_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A launcher's (or the device query's) CUDA error as a status (DSA_ERR_NO_DEVICE when it means no
 * usable device), with its message. */
dsa_status dsa_cuda_status(const char *fn, int err);
/* ---- host/device.c: the only host file that calls the CUDA runtime ---- */
typedef struct {
  int ordinal;      /* the current device */
  int num_sms;      /* its multiprocessor count */
  int cc_major, cc_minor;
  int cluster_ctas[9]; /* dsa_device_clusters (0 until asked): [s], s = 1..8, CTAs resident at once in
                          clusters of s CTAs of one an SM (every cluster kernel here takes over 114 KB of
                          shared memory): a cluster's CTAs share a GPC, so where a GPC's SMs do not
                          divide by s some stay idle (an H100 SXM, s = 2..8: 132, 117, 120, 110,
                          102, 105, 120 — 15 clusters of 8); [0] as [1]: the SMs */
} dsa_device_info;
/* The current device's facts but its clusters (cached per device after the first query). Returns a
 * cudaError_t. */
int dsa_device_query(dsa_device_info *info);
/* info->cluster_ctas for the device info names (asked through the probe once per device). */
void dsa_device_clusters(dsa_device_info *info);
/* The current device must be an sm_90 part (the only kernels this build holds): its facts in *d, its
 * clusters' residency too (the attention plans). */
dsa_status dsa_need_device_info(const char *fn, dsa_device_info *d);
/* The same, for a call that needs only its SM count. */
dsa_status dsa_need_device(const char *fn, int *sms);
/* common/cluster_probe.cu: *clusters = clusters of `cluster_size` CTAs of one an SM the current device
 * keeps resident at once (cudaOccupancyMaxActiveClusters). Returns a cudaError_t, or
 * DSA_PROBE_ERROR_PENDING without asking when the caller left an error pending in the runtime (the
 * probe's cudaFuncSetAttribute would clear it). */
#define DSA_PROBE_ERROR_PENDING (-1)
int dsa_cluster_probe(int cluster_size, int *clusters);
/* 1 when a CUDA error means "no usable device" (none, driver too old, no kernel image). */
int dsa_cuda_error_is_no_device(int err);
const char *dsa_cuda_error_string(int err);

#ifdef __cplusplus
}
#endif
#endif /* DSA_STATUS_H */
