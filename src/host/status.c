/*
 * host/status.c — the error state (host/status.h): the thread's last failure message, status names,
 * the version string, and a CUDA error or the current device as a status.
 */
#include "host/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DSA_STR2(x) #x
#define DSA_STR(x) DSA_STR2(x)

static _Thread_local char g_msg[512];

dsa_status dsa_fail(dsa_status st, const char *fmt, ...) {
                    va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_msg, sizeof g_msg, fmt, ap);
  va_end(ap);
  return st;
}

const char *dsa_version(void) {
  return DSA_STR(DSA_VERSION_MAJOR) "." DSA_STR(DSA_VERSION_MINOR) "." DSA_STR(DSA_VERSION_PATCH);
}

const char *dsa_last_error(void) { return g_msg; }

const char *dsa_status_string(dsa_status s) {
  switch (s) {
    case DSA_OK: return "ok";
    case DSA_ERR_NULL_POINTER: return "null pointer";
    case DSA_ERR_INVALID_VALUE: return "invalid value";
    case DSA_ERR_UNSUPPORTED: return "unsupported";
    case DSA_ERR_MISALIGNED: return "misaligned";
    case DSA_ERR_WORKSPACE_TOO_SMALL: return "workspace too small";
    case DSA_ERR_CUDA: return "CUDA error";
    case DSA_ERR_NO_DEVICE: return "no device";
  }
  return "unknown status";
}

dsa_status dsa_cuda_status(const char *fn, int err) {
  if (err == 0) return DSA_OK;
  if (dsa_cuda_error_is_no_device(err))
    return dsa_fail(DSA_ERR_NO_DEVICE, "%s: no usable sm_90a device: CUDA error %d (%s)", fn, err,
                    dsa_cuda_error_string(err));
  return dsa_fail(DSA_ERR_CUDA, "%s: CUDA error %d (%s)", fn, err, dsa_cuda_error_string(err));
}

/* The device query, and the device an sm_90 part. */
static dsa_status need_sm90(const char *fn, dsa_device_info *d) {
  memset(d, 0, sizeof *d);
  const dsa_status st = dsa_cuda_status(fn, dsa_device_query(d));
  if (st != DSA_OK) return st;
  if (d->cc_major != 9 || d->cc_minor != 0)
    return dsa_fail(DSA_ERR_NO_DEVICE, "%s: device %d is sm_%d%d; this build's kernels need sm_90a (H100/H200)", fn,
                    d->ordinal, d->cc_major, d->cc_minor);
  return DSA_OK;
}

dsa_status dsa_need_device_info(const char *fn, dsa_device_info *d) {
  const dsa_status st = need_sm90(fn, d);
  if (st == DSA_OK) dsa_device_clusters(d);
  return st;
}

dsa_status dsa_need_device(const char *fn, int *sms) {
  dsa_device_info d;
  const dsa_status st = need_sm90(fn, &d);
  if (st != DSA_OK) return st;
  *sms = d.num_sms;
  return DSA_OK;
}
