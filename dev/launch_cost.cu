/*
 * dev/launch_cost.cu — the host time of each CUDA runtime call a dsa call makes (development aid;
 * dev/README.md records what it printed). dev/host_call_cost.py shows libdsa's own host code is
 * well under a microsecond a call, so a call's host cost is its runtime calls: this measures them
 * one kind at a time, on an empty kernel, so that the binding's floor can be split by cause
 * (issue 23: indexer_decode's call, one memset and one cooperative launch, costs ≈ 4 µs more host
 * time than those two rows add up to, H100 2026-12-05).
 *   launch      cudaLaunchKernelEx of an empty kernel, 132 CTAs x 128 threads, with P bytes of
 *               parameters (16, 1 KiB, 2 KiB)
 *   attrs       the same with programmatic stream serialization, a cluster of 2, cooperative
 *   memset      cudaMemsetAsync of 4 KiB, alone and before a plain or a cooperative launch
 *   pairs       two launches; cudaGetDevice (every launch with more than 48 KB asks it)
 *   indexer     the library's cooperative path (dsa_launch_smem_cooperative) at the fused decode
 *               indexer's shape, 132 CTAs x 512 threads x 200 KiB, alone and after a memset
 *   tensor map  cuTensorMapEncodeTiled of the decode indexer's key map (the driver's encoder)
 * Each row: µs a call, the median of 7 batches of 2,000 calls (the stream synchronized between
 * batches; the kernels are shorter than their launches, so the launch queue never fills).
 * Then the launch queue: bursts of n = 25 .. 1,600 launches of a 14 µs kernel (one CTA spinning on
 * the global timer) onto an idle stream, plain and memset + cooperative, and of a 14 µs kernel at the
 * indexer's shape (132 x 512 threads x 200 KiB, every CTA spinning) after a memset, launched
 * cooperatively and plainly: the host µs a call stays at
 * the launch's cost while n fits the queue, then tends to 14 (dev/python_overhead.py times bursts of
 * 200: this says whether 200 fits).
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

/* the fused decode indexer's launch shape without its work: 512 threads, most of the shared memory */
__global__ void k_empty_smem(params_t<1024> p) {
  extern __shared__ unsigned char smem[];
  if (p.b[0] == 1 && threadIdx.x == 1000) printf("never %d\n", smem[0]);
}

/* a kernel of about `ns` nanoseconds (one CTA spinning on the global timer), for the launch queue */
__global__ void k_spin(params_t<1024> p, unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < ns);
  if (p.b[0] == 1) printf("never\n");
}

/* the same at the fused decode indexer's shape: every CTA of 512 threads with most of the shared memory spins */
__global__ void k_spin_smem(params_t<1024> p, unsigned long long ns) {
  extern __shared__ unsigned char smem[];
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < ns);
  if (p.b[0] == 1 && threadIdx.x == 1000) printf("never %d\n", smem[0]);
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

/* µs a call of n calls onto an idle stream (the median of BATCHES bursts): where n passes the launch
 * queue's depth for a kernel longer than its launch, the host waits and the rate becomes the GPU's */
template <typename F>
static double time_burst(cudaStream_t s, int n, F fn) {
  for (int i = 0; i < 20; ++i) fn(i);
  double per[BATCHES];
  for (int b = 0; b < BATCHES; ++b) {
    CK(cudaStreamSynchronize(s));
    const double t0 = now_us();
    for (int i = 0; i < n; ++i) fn(i);
    per[b] = (now_us() - t0) / n;
  }
  CK(cudaStreamSynchronize(s));
  qsort(per, BATCHES, sizeof per[0], cmp_double);
  return per[BATCHES / 2];
}

/* µs a call of fn(i), the median of BATCHES batches of BATCH */
template <typename F>
static double time_calls(cudaStream_t s, F fn) {
  return time_burst(s, BATCH, fn);
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
  /* the indexer's cooperative launch path (limit set once, occupancy asked once, residency checked),
   * 132 CTAs x 512 threads x 200 KiB, a memset before it as indexer_decode makes */
  static dsa_smem_cache coop_cache;
  params_t<1024> p1k;
  memset(&p1k, 0, sizeof p1k);
  bool resident = false;
  const size_t big = 200 * 1024;
  ROW("cooperative 1 KiB, 132 x 512 threads, 200 KiB",
      dsa_launch_smem_cooperative(k_empty_smem, &coop_cache, dim3(132), dim3(512), big, s, prop.multiProcessorCount,
                                  &resident, p1k));
  if (!resident) fprintf(stderr, "the 200 KiB grid was not resident: that row launched nothing\n");
  ROW("cudaMemsetAsync 4 KiB + that cooperative",
      both(cudaMemsetAsync(buf, 0, 4096, s),
           dsa_launch_smem_cooperative(k_empty_smem, &coop_cache, dim3(132), dim3(512), big, s,
                                       prop.multiProcessorCount, &resident, p1k)));

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

  /* the launch queue: bursts of n launches of a 14 us kernel (the decode indexer's at 8k) onto an
   * idle stream. Host-bound while n fits the queue (≈ the launch's own µs), then ≈ 14 µs a call. */
  const unsigned long long spin_ns = 14000;
  static const int ns[] = {25, 50, 100, 200, 400, 800, 1600};
  printf("bursts of a 14 us kernel, host µs a call (median of %d bursts):\n  %-44s", BATCHES, "n");
  for (int n : ns) printf(" %6d", n);
  printf("\n  %-44s", "launch 1 KiB");
  for (int n : ns)
    printf(" %6.2f", time_burst(s, n, [&](int) {
             CK(dsa_launch_attrs(k_spin, dim3(1), dim3(32), 0, s, false, 0u, false, p1k, spin_ns));
           }));
  printf("\n  %-44s", "cudaMemsetAsync 4 KiB + cooperative 1 KiB");
  for (int n : ns)
    printf(" %6.2f", time_burst(s, n, [&](int) {
             CK(cudaMemsetAsync(buf, 0, 4096, s));
             CK(dsa_launch_attrs(k_spin, dim3(1), dim3(32), 0, s, false, 0u, true, p1k, spin_ns));
           }));
  /* at the indexer's shape: whether a cooperative grid of the whole GPU waits on the host for the one
   * before it (against the same grid launched plainly) */
  static dsa_smem_cache spin_cache;
  printf("\n  %-44s", "memset + cooperative 132 x 512, 200 KiB");
  for (int n : ns)
    printf(" %6.2f", time_burst(s, n, [&](int) {
             bool res = false;
             CK(cudaMemsetAsync(buf, 0, 4096, s));
             CK(dsa_launch_smem_cooperative(k_spin_smem, &spin_cache, dim3(132), dim3(512), big, s,
                                            prop.multiProcessorCount, &res, p1k, spin_ns));
           }));
  printf("\n  %-44s", "memset + plain 132 x 512, 200 KiB");
  for (int n : ns)
    printf(" %6.2f", time_burst(s, n, [&](int) {
             CK(cudaMemsetAsync(buf, 0, 4096, s));
             CK(dsa_launch_smem(k_spin_smem, &spin_cache, dim3(132), dim3(512), big, s, false, p1k, spin_ns));
           }));
  printf("\n");
  CK(cudaFree(buf));
  CK(cudaStreamDestroy(s));
  return 0;
}
