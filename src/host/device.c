/*
 * device.c — the CUDA runtime facts the host layer needs: the current device's SM count and compute
 * capability, and for the attention plans how many CTAs clusters of 2 to 8 keep resident (each cached
 * per device, the clusters asked only once a call needs them: cudaGetDevice is cheap, attribute and
 * occupancy queries less so), and how to name a CUDA error. The only file
 * of the host layer that calls the CUDA runtime (the cluster count asks through a probe kernel,
 * common/cluster_probe.cu).
 */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <string.h>

#include "host/status.h"

#define DSA_MAX_DEVICES 64

/* Per device: 0 = not asked yet, else (cc_major << 24 | cc_minor << 16 | num_sms) + 1. Atomics,
 * since calls may come from several host threads; a race only repeats the same query. */
static _Atomic int g_facts[DSA_MAX_DEVICES];
/* Per device: the CTAs clusters of s = 2..8 keep resident ([s]), valid once ready is 1 (written before
 * it, read after it). */
static _Atomic int g_cluster_ctas[DSA_MAX_DEVICES][9];
static _Atomic int g_cluster_ready[DSA_MAX_DEVICES];

/* CTAs clusters of s = 2..8 keep resident on a device of `sms` SMs, into ctas[s]: asked of the occupancy
 * calculator through the probe (sm_90 only: the probe's one image); where it cannot answer, a wave of
 * clusters of more than 2 is taken as half the SMs (the bound measured before the query: 128 CTAs in
 * clusters of 4 or 8 took two waves' time, 64 one). Returns 0 when an error was pending in the runtime
 * (not asked: the answer is not kept, and asked again at the next query). */
static int cluster_ctas(int sms, int sm90, int ctas[9]) {
  int keep = 1;
  ctas[0] = ctas[1] = sms;
  for (int s = 2; s <= 8; ++s) {
    int clusters = 0;
    const int err = sm90 ? dsa_cluster_probe(s, &clusters) : 1;
    if (err == DSA_PROBE_ERROR_PENDING) keep = 0;
    long long c = err == 0 && clusters > 0 ? (long long)clusters * s : s == 2 ? sms : sms / 2;
    if (c > sms) c = sms;
    if (c < s) c = s;
    ctas[s] = (int)c;
  }
  return keep;
}

int dsa_device_query(dsa_device_info *info) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return (int)err;
  info->ordinal = dev;
  int packed = dev >= 0 && dev < DSA_MAX_DEVICES ? atomic_load_explicit(&g_facts[dev], memory_order_relaxed) : 0;
  if (packed == 0) {
    int sms = 0, major = 0, minor = 0;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess)
      return (int)err;
    if (sms > 0xffff) sms = 0xffff;
    packed = ((major & 0xff) << 24 | (minor & 0xff) << 16 | sms) + 1;
    if (dev >= 0 && dev < DSA_MAX_DEVICES) atomic_store_explicit(&g_facts[dev], packed, memory_order_relaxed);
  }
  packed -= 1;
  info->cc_major = (packed >> 24) & 0xff;
  info->cc_minor = (packed >> 16) & 0xff;
  info->num_sms = packed & 0xffff;
  memset(info->cluster_ctas, 0, sizeof info->cluster_ctas); /* dsa_device_clusters, where a call needs them */
  return 0;
}

void dsa_device_clusters(dsa_device_info *info) {
  const int dev = info->ordinal, slot = dev >= 0 && dev < DSA_MAX_DEVICES;
  if (slot && atomic_load_explicit(&g_cluster_ready[dev], memory_order_acquire)) {
    for (int s = 0; s <= 8; ++s) info->cluster_ctas[s] = atomic_load_explicit(&g_cluster_ctas[dev][s], memory_order_relaxed);
  } else {
    const int keep = cluster_ctas(info->num_sms, info->cc_major == 9 && info->cc_minor == 0, info->cluster_ctas);
    if (keep && slot) { /* a race stores the same answer twice */
      for (int s = 0; s <= 8; ++s) atomic_store_explicit(&g_cluster_ctas[dev][s], info->cluster_ctas[s], memory_order_relaxed);
      atomic_store_explicit(&g_cluster_ready[dev], 1, memory_order_release);
    }
  }
}

int dsa_cuda_error_is_no_device(int err) {
  return err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
         err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDevice ||
         err == cudaErrorStubLibrary;
}

const char *dsa_cuda_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
