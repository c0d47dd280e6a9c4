/*
 * device.c — the CUDA runtime facts the host layer needs: the current device's SM count and
 * compute capability (cached per device: cudaGetDevice is cheap, attribute queries less so), and
 * how to name a CUDA error. The only file of the host layer that calls the CUDA runtime.
 */
#include <cuda_runtime_api.h>
#include <stdatomic.h>

#include "host/status.h"

#define DSA_MAX_DEVICES 64

/* Per device: 0 = not asked yet, else (cc_major << 24 | cc_minor << 16 | num_sms) + 1. Atomics,
 * since calls may come from several host threads; a race only repeats the same query. */
static _Atomic int g_facts[DSA_MAX_DEVICES];

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
  return 0;
}

int dsa_cuda_error_is_no_device(int err) {
  return err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
         err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDevice ||
         err == cudaErrorStubLibrary;
}

const char *dsa_cuda_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
