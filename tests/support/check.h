/*
 * check.h — the one check of a CUDA runtime or dsa call for the tests, the bench and the development
 * aids: CK(call) for cudaError_t, DSA_CK(call) for dsa_status. A failure goes to the current handler
 * with the call's text, file and line and the error's message: by default it is printed to stderr
 * and the program exits 1; the GPU test harness installs one that fails and ends the current case.
 */
#ifndef DSA_CHECK_CALLS_H
#define DSA_CHECK_CALLS_H

#include <cuda_runtime_api.h>

#include "dsa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*dsa_ck_handler)(const char *file, int line, const char *call, const char *message);
/* NULL restores the default (print, exit(1)). */
void dsa_ck_set_handler(dsa_ck_handler h);
/* Reports a failed call through the handler; returns only if the handler does. */
void dsa_ck_failed(const char *file, int line, const char *call, const char *message);

#ifdef __cplusplus
}
#endif

#define CK(call)                                                                   \
  do {                                                                             \
    const cudaError_t ck_e_ = (call);                                              \
    if (ck_e_ != cudaSuccess) dsa_ck_failed(__FILE__, __LINE__, #call, cudaGetErrorString(ck_e_)); \
  } while (0)
#define DSA_CK(call)                                                               \
  do {                                                                             \
    const dsa_status ck_s_ = (call);                                               \
    if (ck_s_ != DSA_OK) dsa_ck_failed(__FILE__, __LINE__, #call, dsa_last_error()); \
  } while (0)

#endif /* DSA_CHECK_CALLS_H */
