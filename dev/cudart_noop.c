/*
 * cudart_noop.c — a libcudart.so.13 that does nothing and counts: put first on LD_LIBRARY_PATH (with
 * DSA_LIBRARY pointing at a libdsa built against the shared runtime), it lets dev/host_call_cost.py
 * time what libdsa's calls cost on the host apart from the CUDA runtime, and count the runtime calls
 * each makes (launches, memsets, occupancy queries), on a machine with no GPU. It answers as one
 * device of 132 SMs, compute capability 9.0; every call succeeds except the driver entry point
 * lookup (so no TMA tensor map is made: those paths fall back as on a driver without the encoder).
 * Only the functions libdsa imports (nm -D --undefined-only libdsa.so) are here; dsa-bench's others
 * are in cudart_noop_bench.c (the same library).
 */
#include <stddef.h>

typedef struct {
  unsigned x, y, z;
} noop_dim3;

enum { NOOP_LAUNCH, NOOP_MEMSET, NOOP_OCCUPANCY, NOOP_SET_ATTRIBUTE, NOOP_GET_DEVICE, NOOP_COUNTERS };
static long g_count[NOOP_COUNTERS];
static char g_handle;

/* A C function of a library call's shape that does nothing: the ctypes cost host_call_cost.py
 * subtracts. */
int dsa_noop_call(const void *args, void *workspace, size_t workspace_bytes, void *stream) {
  (void)args, (void)workspace, (void)workspace_bytes, (void)stream;
  return 0;
}

/* The counters so far: launches, memsets, occupancy queries, function attributes set, device queries. */
void dsa_noop_counts(long out[NOOP_COUNTERS]) {
  for (int i = 0; i < NOOP_COUNTERS; i++) out[i] = g_count[i];
}

void **__cudaRegisterFatBinary(void *fatbin) {
  (void)fatbin;
  return (void **)&g_handle;
}
void __cudaRegisterFatBinaryEnd(void **h) { (void)h; }
void __cudaUnregisterFatBinary(void **h) { (void)h; }
void __cudaRegisterFunction(void **h, const char *host_fun, char *device_fun, const char *name, int limit, void *tid,
                            void *bid, void *block, void *grid, int *wsize) {
  (void)h, (void)host_fun, (void)device_fun, (void)name, (void)limit, (void)tid, (void)bid, (void)block, (void)grid,
      (void)wsize;
}
void __cudaRegisterVar(void **h, char *host_var, char *device_address, const char *name, int ext, size_t size,
                       int constant, int global) {
  (void)h, (void)host_var, (void)device_address, (void)name, (void)ext, (void)size, (void)constant, (void)global;
}
unsigned __cudaPushCallConfiguration(noop_dim3 grid, noop_dim3 block, size_t smem, void *stream) {
  (void)grid, (void)block, (void)smem, (void)stream;
  return 0;
}
int __cudaPopCallConfiguration(noop_dim3 *grid, noop_dim3 *block, size_t *smem, void *stream) {
  (void)grid, (void)block, (void)smem, (void)stream;
  return 0;
}
int __cudaLaunchKernel(const void *f, noop_dim3 grid, noop_dim3 block, void **args, size_t smem, void *stream) {
  (void)f, (void)grid, (void)block, (void)args, (void)smem, (void)stream;
  g_count[NOOP_LAUNCH]++;
  return 0;
}
int __cudaGetKernel(void **kernel, const void *f) {
  *kernel = (void *)f;
  return 0;
}
int cudaLaunchKernelExC(const void *config, const void *f, void **args) {
  (void)config, (void)f, (void)args;
  g_count[NOOP_LAUNCH]++;
  return 0;
}
int cudaMemsetAsync(void *p, int value, size_t bytes, void *stream) {
  (void)p, (void)value, (void)bytes, (void)stream;
  g_count[NOOP_MEMSET]++;
  return 0;
}
int cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *f, int threads, size_t smem,
                                                           unsigned flags) {
  (void)f, (void)threads, (void)smem, (void)flags;
  g_count[NOOP_OCCUPANCY]++;
  *n = 1;
  return 0;
}
/* clusters of s CTAs of one an SM (common/cluster_probe.cu): an H100 SXM's answer for 8, 132 SMs for the rest */
int cudaOccupancyMaxActiveClusters(int *n, const void *f, const void *config) {
  (void)f;
  const unsigned s = ((const noop_dim3 *)config)->x; /* cudaLaunchConfig_t starts with gridDim: one cluster */
  g_count[NOOP_OCCUPANCY]++;
  *n = s == 8 ? 15 : (int)(132 / (s ? s : 1));
  return 0;
}
int cudaFuncSetAttribute(const void *f, int attr, int value) {
  (void)f, (void)attr, (void)value;
  g_count[NOOP_SET_ATTRIBUTE]++;
  return 0;
}
int cudaGetDevice(int *device) {
  g_count[NOOP_GET_DEVICE]++;
  *device = 0;
  return 0;
}
int cudaDeviceGetAttribute(int *value, int attr, int device) {
  (void)device;
  *value = attr == 16 ? 132 : attr == 75 ? 9 : 0; /* multiprocessors, compute capability major; minor 0 */
  return 0;
}
int cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version, unsigned long long flags,
                                     int *status) {
  (void)symbol, (void)version, (void)flags;
  *fn = NULL;
  if (status) *status = 1; /* cudaDriverEntryPointSymbolNotFound */
  return 500;              /* cudaErrorSymbolNotFound */
}
const char *cudaGetErrorString(int err) {
  (void)err;
  return "cudart_noop";
}
int cudaGetLastError(void) { return 0; }
int cudaPeekAtLastError(void) { return 0; }
