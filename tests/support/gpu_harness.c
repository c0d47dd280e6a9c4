/*
 * gpu_harness.c — see gpu_harness.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpu_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

#include "dsa_ref.h"
#include "inputs.h"

cudaStream_t g_stream;

/* ============================================================================================== */
/* Reporting: one line per check; a CUDA or API failure aborts the running case (longjmp)          */
/* ============================================================================================== */

static int g_passed, g_failed;
static const char *g_case_name = "";
static jmp_buf g_abort_jmp;
static int g_in_case;     /* g_abort_jmp is set: a failure can leave the case */
static int g_cuda_broken; /* a CUDA call failed: the context may be unusable */

static struct {
  int open, nfail;
  char name[256];
  char why[1024];
  char metric[512];
} g_chk;

void chk_begin(const char *fmt, ...) {
  memset(&g_chk, 0, sizeof g_chk);
  g_chk.open = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_chk.name, sizeof g_chk.name, fmt, ap);
  va_end(ap);
}

/* Records a failure of the open check; the first message is kept, later ones are counted. */
void chk_fail(const char *fmt, ...) {
  if (g_chk.nfail++ > 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_chk.why, sizeof g_chk.why, fmt, ap);
  va_end(ap);
}

void chk_metric(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_chk.metric, sizeof g_chk.metric, fmt, ap);
  va_end(ap);
}

void chk_end(void) {
  if (!g_chk.open) return;
  g_chk.open = 0;
  if (g_chk.nfail) {
    printf("FAIL %s: %s", g_chk.name, g_chk.why);
    if (g_chk.nfail > 1) printf(" (+%d more)", g_chk.nfail - 1);
    printf("\n");
    g_failed++;
  } else {
    printf("ok   %s  (%s)\n", g_chk.name, g_chk.metric[0] ? g_chk.metric : "-");
    g_passed++;
  }
  fflush(stdout);
}

/* Fails the open check (or the case) with the message and leaves the case. */
_Noreturn void abort_case(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!g_in_case) { /* outside a case there is nothing to leave: as check.h's default */
    fprintf(stderr, "%s\n", msg);
    exit(1);
  }
  if (!g_chk.open) chk_begin("%s", g_case_name);
  chk_fail("%s", msg);
  chk_end();
  longjmp(g_abort_jmp, 1);
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ============================================================================================== */
/* Per-case memory: every host and device allocation is freed when the case ends                   */
/* ============================================================================================== */

typedef struct {
  void *p;
  size_t bytes;
} dev_buf;

static dev_buf *g_dev;
static size_t g_ndev, g_capdev;
static void **g_host;
static size_t g_nhost, g_caphost;

void *hmalloc(size_t bytes) {
  if (g_nhost == g_caphost) {
    size_t cap = g_caphost ? 2 * g_caphost : 256;
    void **n = realloc(g_host, cap * sizeof *n);
    if (!n) abort_case("out of host memory");
    g_host = n;
    g_caphost = cap;
  }
  void *p = malloc(bytes ? bytes : 1);
  if (!p) abort_case("out of host memory (%zu bytes)", bytes);
  g_host[g_nhost++] = p;
  return p;
}

void free_case_memory(void) {
  for (size_t i = 0; i < g_nhost; i++) free(g_host[i]);
  g_nhost = 0;
  for (size_t i = 0; i < g_ndev; i++) (void)cudaFree(g_dev[i].p);
  g_ndev = 0;
  if (!g_cuda_broken) (void)cudaGetLastError();
}

/* Device buffer of `bytes` bytes followed by a guard of GUARD_BYTES (checked after every call). */
void *dalloc(size_t bytes) {
  if (g_ndev == g_capdev) {
    size_t cap = g_capdev ? 2 * g_capdev : 64;
    dev_buf *n = realloc(g_dev, cap * sizeof *n);
    if (!n) abort_case("out of host memory");
    g_dev = n;
    g_capdev = cap;
  }
  void *p = NULL;
  CK(cudaMalloc(&p, bytes + GUARD_BYTES));
  g_dev[g_ndev].p = p;
  g_dev[g_ndev].bytes = bytes;
  g_ndev++;
  CK(cudaMemsetAsync((char *)p + bytes, GUARD_BYTE, GUARD_BYTES, g_stream));
  CK(cudaStreamSynchronize(g_stream));
  return p;
}

/* Device copy of a host buffer. */
void *dput(const void *h, size_t bytes) {
  void *d = dalloc(bytes);
  if (bytes) CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, g_stream));
  CK(cudaStreamSynchronize(g_stream));
  return d;
}

void dget(void *h, const void *d, size_t bytes) {
  if (bytes) CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, g_stream));
  CK(cudaStreamSynchronize(g_stream));
}

void dset(void *d, int byte, size_t bytes) {
  if (bytes) CK(cudaMemsetAsync(d, byte, bytes, g_stream));
  CK(cudaStreamSynchronize(g_stream));
}

void dfill_i32(int32_t *d, size_t n, int32_t v) {
  int32_t *h = hmalloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = v;
  if (n) CK(cudaMemcpyAsync(d, h, n * sizeof *h, cudaMemcpyHostToDevice, g_stream));
  CK(cudaStreamSynchronize(g_stream));
}

void check_guards(const char *after) {
  unsigned char g[GUARD_BYTES];
  for (size_t i = 0; i < g_ndev; i++) {
    CK(cudaMemcpy(g, (const char *)g_dev[i].p + g_dev[i].bytes, GUARD_BYTES, cudaMemcpyDeviceToHost));
    for (int j = 0; j < GUARD_BYTES; j++)
      if (g[j] != GUARD_BYTE)
        abort_case("%s wrote past the end of a %zu-byte device buffer (guard byte %d is 0x%02x)", after,
                   g_dev[i].bytes, j, g[j]);
  }
}

void sync_check(const char *after) {
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaGetLastError());
  check_guards(after);
}

/* A dsa call that must return DSA_OK, without a stream synchronisation (workspace queries): a
 * failure is reported through check.h (the handler below), its status noted for the message. */
static dsa_status g_failed_status = DSA_OK; /* set by dsa_ok just before it reports */

void dsa_ok(dsa_status s, const char *what, const char *file, int line) {
  if (s == DSA_OK) return;
  g_failed_status = s;
  dsa_ck_failed(file, line, what, dsa_last_error());
}

/* A dsa call must return DSA_OK; then the stream is synchronised and checked. */
void dsa_check(dsa_status s, const char *what, const char *file, int line) {
  dsa_ok(s, what, file, line);
  sync_check(what);
}

/* check.h's handler while the harness runs: a failed dsa call (DSA, DSA_Q) or CUDA call (CK) fails
 * the open check (or the case) and leaves the case; after a CUDA failure the context is checked
 * before the next case. */
static void case_ck_handler(const char *file, int line, const char *call, const char *message) {
  const dsa_status st = g_failed_status;
  g_failed_status = DSA_OK;
  if (st != DSA_OK) abort_case("%s returned %s: %s", call, dsa_status_string(st), message);
  g_cuda_broken = 1;
  abort_case("CUDA error (%s) from %s (%s:%d)", message, call, file, line);
}

/* Workspace of exactly the queried size (at least 16 bytes allocated), filled with garbage. */
void *workspace(size_t bytes) {
  void *w = dalloc(bytes ? bytes : 16);
  dset(w, WS_BYTE_FIRST, bytes);
  return w;
}

/* ============================================================================================== */
/* Random inputs: one dsa_rng stream (rng.h), seeded per case; the distributions are inputs.h's     */
/* ============================================================================================== */

dsa_rng g_rng = {88172645463325252ull};

uint64_t rng_u64(void) { return dsa_rng_next(&g_rng); }

void rng_seed(uint64_t s) {
  g_rng = dsa_rng_from_state((s + 1) * 0x9E3779B97F4A7C15ull); /* 0 becomes 1 */
  for (int i = 0; i < 8; i++) (void)dsa_rng_next(&g_rng);
}

double rng_unit(void) { return dsa_rng_unit(&g_rng); }
double rng_uniform(double lo, double hi) { return dsa_input_uniform(&g_rng, lo, hi); }
int64_t rng_below(int64_t n) { return n <= 0 ? 0 : (int64_t)dsa_rng_below(&g_rng, (uint64_t)n); }
double rng_nonzero(double amp) { return dsa_input_nonzero(&g_rng, amp); }
double rng_log_uniform(double lo, double hi) { return dsa_input_log_uniform(&g_rng, lo, hi); }

uint16_t to_bf16(double x) { return dsa_float_to_bf16((float)x); }
float from_bf16(uint16_t x) { return dsa_bf16_to_float(x); }

void fill_bf16(uint16_t *h, size_t n, double amp) { dsa_input_bf16_amp(&g_rng, h, n, amp); }
uint8_t rng_fp8_quantised(void) { return dsa_input_fp8_quantised(&g_rng); }
uint8_t rng_fp8_byte(void) { return dsa_input_fp8_nonzero(&g_rng); }
void fill_random_bytes(uint8_t *h, size_t n) { dsa_input_bytes(&g_rng, h, n); }

int32_t *perm_i32(int64_t n) {
  int32_t *p = hmalloc((size_t)(n ? n : 1) * sizeof *p);
  dsa_input_perm(&g_rng, p, n);
  return p;
}

/* ============================================================================================== */
/* Program                                                                                        */
/* ============================================================================================== */

int harness_failed(void) { return g_failed; }

int harness_init(const char *program) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) {
    printf("SKIP %s: no sm_90 GPU on this machine (cudaGetDeviceCount: %s)\n", program, cudaGetErrorString(e));
    return 77;
  }
  if (ndev == 0) {
    printf("SKIP %s: no sm_90 GPU on this machine (no CUDA device)\n", program);
    return 77;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess) {
    printf("SKIP %s: no sm_90 GPU on this machine (cannot query device 0)\n", program);
    return 77;
  }
  if (major != 9) {
    printf("SKIP %s: no sm_90 GPU on this machine (device 0 is sm_%d%d)\n", program, major, minor);
    return 77;
  }
  if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) != cudaSuccess) {
    printf("FAIL setup: cannot create a stream on device 0\n0 passed, 1 failed\n");
    return 1;
  }
  dsa_ck_set_handler(case_ck_handler);
  printf("%s: dsa %s, device 0 sm_%d%d\n", program, dsa_version(), major, minor);
  return 0;
}

int harness_run_case(const char *name, void (*fn)(const void *), const void *arg) {
  /* DSA_TEST_ONLY=text runs only the cases whose name contains text (sanitizer runs, bisecting) */
  const char *only = getenv("DSA_TEST_ONLY");
  if (only && *only && !strstr(name, only)) return 1;
  g_case_name = name;
  const double t0 = now_s();
  g_in_case = 1;
  if (setjmp(g_abort_jmp) == 0) fn(arg);
  g_in_case = 0;
  chk_end();
  free_case_memory();
  fprintf(stderr, "  [%s: %.2f s]\n", name, now_s() - t0);
  if (g_cuda_broken) {
    /* A sticky error (illegal address, ...) leaves the context unusable. */
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      printf("FAIL remaining cases: the CUDA context is unusable after %s (%s)\n", name, cudaGetErrorString(e));
      g_failed++;
      return 0;
    }
    g_cuda_broken = 0;
  }
  return 1;
}

int harness_finish(void) {
  dsa_ck_set_handler(NULL);
  (void)cudaStreamDestroy(g_stream);
  free(g_dev);
  free(g_host);
  g_dev = NULL;
  g_host = NULL;
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
