/*
 * cudart_noop_bench.c — the rest of the no-op libcudart.so.13 (cudart_noop.c): what dsa-bench imports
 * besides libdsa's calls, so that the bench's host side runs on a machine with no GPU. Device memory is
 * host memory (cudaMalloc is calloc, cudaMemcpy / cudaMemset copy and set), so the bench's inputs,
 * pools and block tables are built and copied as on a GPU and an address sanitizer sees every access
 * to them (dsa.bench_host_asan: a bench built with -fsanitize=address over this runtime); kernels,
 * graphs and events do nothing, and every timing reads 1 us. One device, "cudart_noop", sm_90, 132
 * SMs. Kept apart from cudart_noop.c because it needs the runtime's own types (cudaDeviceProp).
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

static char g_object; /* what every stream, event, graph and executable graph handle points at */

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
  (void)device;
  memset(p, 0, sizeof *p);
  strcpy(p->name, "cudart_noop");
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->l2CacheSize = 50 << 20;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->totalGlobalMem = (size_t)80 << 30;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  (void)device;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  *free_bytes = (size_t)64 << 30;
  *total = (size_t)80 << 30;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
  *p = calloc(1, bytes ? bytes : 1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  (void)kind;
  memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  *s = (cudaStream_t)&g_object;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  (void)s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  (void)s;
  return cudaSuccess;
}
/* The bench's gate (a host function holding the stream until the replays are queued) never runs: the
 * queue is empty. */
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data) {
  (void)s, (void)fn, (void)data;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = (cudaEvent_t)&g_object;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  (void)e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  (void)e, (void)s;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  (void)e;
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  (void)a, (void)b;
  *ms = 1e-3f;
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  (void)s, (void)mode;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  (void)s;
  *g = (cudaGraph_t)&g_object;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags) {
  (void)g, (void)flags;
  *x = (cudaGraphExec_t)&g_object;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
  (void)x, (void)s;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  (void)g;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
  (void)x;
  return cudaSuccess;
}
