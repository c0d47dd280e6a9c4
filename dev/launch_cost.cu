/*
 * dev/launch_cost.cu — the host time of each CUDA runtime call a dsa call makes (development aid;
 * dev/README.md records what it printed). dev/host_call_cost.py shows libdsa's own host code is
 * well under a microsecond a call, so a call's host cost is its runtime calls: this measures them
 * one kind at a time, on an empty kernel, so that the binding's floor can be split by cause
 * (issue 23: indexer_decode's C call, one cooperative launch and one memset, took 14.2 µs on the
 * H100 machine's host, where the whole of sparse_mla's Python call, two launches, took 7.5).
 *   launch      cudaLaunchKernelEx of an empty kernel, 132 CTAs x 128 threads, with P bytes of
 *               parameters (16, 1 KiB, 2 KiB)
 *   attrs       the same with programmatic stream serialization, a cluster of 2, cooperative
 *   memset      cudaMemsetAsync of 4 KiB, alone and before a plain or a cooperative launch
 *   pairs       two launches; cudaGetDevice (every launch with more than 48 KB asks it)
 *   tensor map  cuTensorMapEncodeTiled of the decode indexer's key map (the driver's encoder)
 * Each row: µs a call, the median of 7 batches of 2,000 calls (the stream synchronized between
 * batches so the launch queue never fills).
 * Usage: dsa-dev-launch-cost   (on the GPU machine; a few seconds)
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/launch.cuh"

template <int BYTES>
struct params_t {
  unsigned char b[BYTES];
};

template <int BYTES>
__global__ void k_empty(params_t<BYTES> p) {
  if (p.b[0] == 1 && threadIdx.x == 1000) printf("never\n");
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

enum { BATCH = 2000, BATCHES = 7 };

/* µs a call of fn(i), the median batch */
template <typename F>
static double time_calls(cudaStream_t s, F fn) {
  for (int i = 0; i < 200; ++i) fn(i);
  CK(cudaStreamSynchronize(s));
  double per[BATCHES];
  for (int b = 0; b < BATCHES; ++b) {
    const double t0 = now_us();
    for (int i = 0; i < BATCH; ++i) fn(i);
    per[b] = (now_us() - t0) / BATCH;
    CK(cudaStreamSynchronize(s));
  }
  qsort(per, BATCHES, sizeof per[0], cmp_double);
  return per[BATCHES / 2];
}

/* through the library's own launcher (common/launch.cuh), as its calls launch */
template <int BYTES>
static cudaError_t launch(cudaStream_t s, int coop, int programmatic, int cluster) {
  params_t<BYTES> p;
  memset(&p, 0, sizeof p);
  return dsa_launch_attrs(k_empty<BYTES>, dim3(132), dim3(128), 0, s, programmatic != 0, cluster ? 2u : 0u, coop != 0,
                          p);
}

/* the first error of a row's two calls (made in either order: that does not change their host time) */
static cudaError_t both(cudaError_t a, cudaError_t b) { return a != cudaSuccess ? a : b; }

int main(void) {
  cudaStream_t s;
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *buf = nullptr;
  CK(cudaMalloc(&buf, 1 << 20));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s: host µs a call (median of %d batches of %d)\n", prop.name, BATCHES, BATCH);

  struct row {
    const char *name;
    double us;
  } rows[32];
  int nr = 0;
#define ROW(name, expr) rows[nr++] = row{name, time_calls(s, [&](int i) { (void)i; CK(expr); })}
  ROW("launch, 16 B of parameters", (launch<16>(s, 0, 0, 0)));
  ROW("launch, 1 KiB", (launch<1024>(s, 0, 0, 0)));
  ROW("launch, 2 KiB", (launch<2048>(s, 0, 0, 0)));
  ROW("launch, 16 B, programmatic", (launch<16>(s, 0, 1, 0)));
  ROW("launch, 16 B, cluster of 2", (launch<16>(s, 0, 0, 1)));
  ROW("launch, 16 B, cooperative", (launch<16>(s, 1, 0, 0)));
  ROW("launch, 1 KiB, cooperative", (launch<1024>(s, 1, 0, 0)));
  ROW("cudaMemsetAsync 4 KiB", cudaMemsetAsync(buf, 0, 4096, s));
  ROW("cudaMemsetAsync 4 KiB + launch 1 KiB", both(cudaMemsetAsync(buf, 0, 4096, s), launch<1024>(s, 0, 0, 0)));
  ROW("cudaMemsetAsync 4 KiB + cooperative 1 KiB", both(cudaMemsetAsync(buf, 0, 4096, s), launch<1024>(s, 1, 0, 0)));
  ROW("launch 1 KiB + launch 1 KiB", both(launch<1024>(s, 0, 0, 0), launch<1024>(s, 0, 0, 0)));
  {
    int dev = 0;
    ROW("cudaGetDevice", cudaGetDevice(&dev));
  }

  /* the decode indexer's key map: (128 B, 64 rows, pages), 128-byte swizzle */
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  if (q == cudaDriverEntryPointSuccess && fn) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    CUtensorMap map;
    const cuuint64_t dims[3] = {128, 64, 64};
    const cuuint64_t strides[2] = {128, 64 * 132};
    const cuuint32_t box[3] = {128, 64, 1}, elem[3] = {1, 1, 1};
    ROW("cuTensorMapEncodeTiled",
        encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, buf, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
                CUDA_SUCCESS
            ? cudaSuccess
            : cudaErrorUnknown);
  }
  for (int i = 0; i < nr; ++i) printf("  %-44s %7.2f\n", rows[i].name, rows[i].us);
  CK(cudaFree(buf));
  CK(cudaStreamDestroy(s));
  return 0;
}
