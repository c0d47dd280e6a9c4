/*
 * gpu_harness.h — what the GPU test programs (test_gpu_indexer, test_gpu_topk, test_gpu_attention,
 * test_gpu_cache, test_gpu_api, test_gpu_garbage, test_gpu_cp) share: one line per check
 * ("ok   name  (metrics)" / "FAIL name: why"), cases that end on the first CUDA or API failure
 * (longjmp) and free everything they allocated, device buffers followed by guard bytes checked after
 * every call, and random inputs (one global dsa_rng stream, rng.h, drawn through inputs.h; never zero).
 *
 * Conventions: every output is poisoned before a run (POISON_*), every workspace filled with
 * garbage (WS_BYTE_*); after a call the stream is synchronised, the last error checked and every
 * guard verified. Calls are checked through check.h: CK(call) for a CUDA call, DSA(call) / DSA_Q(call)
 * (below) for a dsa call; from harness_init on, check.h's handler is the harness's, which fails the
 * running case and leaves it (a CUDA failure also has the context checked before the next case; a
 * bare DSA_CK counts as one).
 */
#ifndef DSA_GPU_HARNESS_H
#define DSA_GPU_HARNESS_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "dsa.h"
#include "rng.h"
#include "row_checks.h"

/* Acceptance tolerances (TOL_*) and the poison values (POISON_*): row_checks.h. */
#define WS_BYTE_FIRST 0xFF
#define WS_BYTE_RERUN 0x5A
#define GUARD_BYTES 256
#define GUARD_BYTE 0xA5

#define BF16_NAN 0x7FC0u
#define D_I DSA_INDEX_HEAD_DIM
#define IK_ROW_BYTES (D_I + 4 * (D_I / 128)) /* bytes one index-K slot takes in its page */

extern cudaStream_t g_stream;

/* ---- reporting ---- */
void chk_begin(const char *fmt, ...);
void chk_fail(const char *fmt, ...);   /* the first message is kept, later ones counted */
void chk_metric(const char *fmt, ...);
void chk_end(void);
_Noreturn void abort_case(const char *fmt, ...); /* fails the open check (or the case), leaves the case */
double now_s(void);

/* ---- per-case memory (freed when the case ends) ---- */
void *hmalloc(size_t bytes);
void free_case_memory(void);                      /* frees every buffer of the case so far */
void *dalloc(size_t bytes);                       /* + GUARD_BYTES of guard */
void *dput(const void *h, size_t bytes);          /* device copy of a host buffer */
void dget(void *h, const void *d, size_t bytes);
void dset(void *d, int byte, size_t bytes);
void dfill_i32(int32_t *d, size_t n, int32_t v);
void check_guards(const char *after);
void sync_check(const char *after);               /* synchronise, last error, guards */
/* A dsa call that must return DSA_OK (else the failure goes through check.h's dsa_ck_failed, with
 * the status and dsa_last_error()); DSA then synchronises and checks (sync_check), DSA_Q does not
 * (workspace queries). */
void dsa_check(dsa_status s, const char *what, const char *file, int line);
#define DSA(call) dsa_check((call), #call, __FILE__, __LINE__)
void dsa_ok(dsa_status s, const char *what, const char *file, int line);
#define DSA_Q(call) dsa_ok((call), #call, __FILE__, __LINE__)
void *workspace(size_t bytes);                    /* the queried size, filled with garbage */

/* ---- random inputs: g_rng, seeded per case by rng_seed; the helpers draw from it through inputs.h ---- */
extern dsa_rng g_rng;
uint64_t rng_u64(void);
void rng_seed(uint64_t s);                        /* state (s + 1) * 0x9E3779B97F4A7C15 (1 if 0), 8 draws */
double rng_unit(void);
double rng_uniform(double lo, double hi);
int64_t rng_below(int64_t n);
double rng_nonzero(double amp);                   /* uniform in (-amp, amp), |x| >= amp / 1000 */
double rng_log_uniform(double lo, double hi);
uint16_t to_bf16(double x);
float from_bf16(uint16_t x);
void fill_bf16(uint16_t *h, size_t n, double amp);
uint8_t rng_fp8_quantised(void);                  /* a non-zero, non-NaN e4m3 code of a uniform value */
uint8_t rng_fp8_byte(void);                       /* any non-zero, non-NaN e4m3 byte */
void fill_random_bytes(uint8_t *h, size_t n);
int32_t *perm_i32(int64_t n);

static inline float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- program ---- */
/* 0: an sm_90 device is current, g_stream created and check.h's handler the harness's; 77: no such
 * GPU (SKIP printed); 1: setup failed. */
int harness_init(const char *program);
/* Runs one case; a failure inside it ends only that case. Returns 0 when the CUDA context is
 * unusable afterwards (the remaining cases cannot run). */
int harness_run_case(const char *name, void (*fn)(const void *), const void *arg);
/* Prints "N passed, M failed", frees the harness; the process exit status. */
int harness_finish(void);
int harness_failed(void);

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif
