/*
 * test_gpu_cache.c — the cache writers (dsa_index_k_store, dsa_mla_kv_store) on the GPU against the
 * CPU reference writers: the bytes of the cache equal the reference's bytes exactly (slots not
 * mapped — padding, negative, past the cache, values that would alias a slot if truncated to 32
 * bits — untouched; row padding untouched). Index-K pages of 64 and 16; packed FP8 and bf16 MLA KV.
 *
 * Conventions of gpu_harness.h: fresh random inputs (a fixed seed per case, no zero values), every
 * output poisoned before every run, every workspace filled with garbage (another on re-runs), a
 * 256-byte guard after every device buffer, and after every call a synchronised stream, its last
 * error and every guard checked.
 *
 * Output: one line per check, "ok   name  (metrics)" or "FAIL name: why", then "N passed, M failed".
 * Exit status 0 only if nothing failed; 77 (ctest: skipped) without an sm_90 GPU. DSA_TEST_ONLY=text
 * runs only the cases whose name contains text.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dsa.h"
#include "dsa_ref.h"
#include "gpu_harness.h"

/* ============================================================================================== */
/* Cache writers                                                                                  */
/* ============================================================================================== */

typedef struct {
  const char *name;
  int index_k;            /* 1: dsa_index_k_store; 0: dsa_mla_kv_store */
  dsa_kv_format fmt;      /* MLA */
  int page_size, num_pages; /* index-K */
  int num_slots;          /* MLA */
  int cache_stride;       /* MLA bf16 */
  int tokens, src_stride;
  uint64_t seed;
} store_case;

/* Where a byte offset of the cache lies, for failure messages. */
static void describe_cache_byte(const store_case *c, size_t off, const uint8_t *gpu, const uint8_t *ref, char *s,
                                size_t n) {
  if (c->index_k) {
    const size_t page_bytes = (size_t)c->page_size * IK_ROW_BYTES, page = off / page_bytes, in = off % page_bytes;
    if (in < (size_t)c->page_size * D_I) {
      const size_t row = in / D_I, d = in % D_I;
      const int ulp = (gpu[off] & 0x80) == (ref[off] & 0x80) ? (int)(gpu[off] & 0x7F) - (int)(ref[off] & 0x7F) : 999;
      snprintf(s, n, "slot %zu fp8 value %zu: gpu 0x%02x (%g) ref 0x%02x (%g)%s%+d ulp", page * c->page_size + row, d,
               gpu[off], (double)dsa_fp8_e4m3_to_float(gpu[off]), ref[off], (double)dsa_fp8_e4m3_to_float(ref[off]),
               ulp == 999 ? ", sign differs " : ", ", ulp == 999 ? 0 : ulp);
    } else {
      const size_t row = (in - (size_t)c->page_size * D_I) / 4, base = off - (in - (size_t)c->page_size * D_I) % 4;
      float g, r;
      memcpy(&g, gpu + base, 4);
      memcpy(&r, ref + base, 4);
      snprintf(s, n, "slot %zu scale: gpu %.9g ref %.9g", page * c->page_size + row, (double)g, (double)r);
    }
  } else if (c->fmt == DSA_KV_FP8_PACKED) {
    const size_t slot = off / DSA_MLA_FP8_SLOT_BYTES, in = off % DSA_MLA_FP8_SLOT_BYTES;
    if (in < 512) {
      const int ulp = (gpu[off] & 0x80) == (ref[off] & 0x80) ? (int)(gpu[off] & 0x7F) - (int)(ref[off] & 0x7F) : 999;
      snprintf(s, n, "slot %zu fp8 latent %zu: gpu 0x%02x (%g) ref 0x%02x (%g)%s%+d ulp", slot, in, gpu[off],
               (double)dsa_fp8_e4m3_to_float(gpu[off]), ref[off], (double)dsa_fp8_e4m3_to_float(ref[off]),
               ulp == 999 ? ", sign differs " : ", ", ulp == 999 ? 0 : ulp);
    } else if (in < 528) {
      const size_t base = off - (in - 512) % 4;
      float g, r;
      memcpy(&g, gpu + base, 4);
      memcpy(&r, ref + base, 4);
      snprintf(s, n, "slot %zu scale %zu: gpu %.9g ref %.9g", slot, (in - 512) / 4, (double)g, (double)r);
    } else {
      snprintf(s, n, "slot %zu rope byte %zu: gpu 0x%02x ref 0x%02x", slot, in - 528, gpu[off], ref[off]);
    }
  } else {
    const size_t row_bytes = (size_t)c->cache_stride * 2;
    snprintf(s, n, "slot %zu element %zu%s: gpu byte 0x%02x ref 0x%02x", off / row_bytes, (off % row_bytes) / 2,
             (off % row_bytes) / 2 >= DSA_MLA_QK_DIM ? " (row padding: must be untouched)" : "", gpu[off], ref[off]);
  }
}

static void store_case_run(const void *arg) {
  const store_case *c = arg;
  rng_seed(c->seed);
  const int64_t cap = c->index_k ? (int64_t)c->num_pages * c->page_size : c->num_slots;
  const int width = c->index_k ? D_I : DSA_MLA_QK_DIM;
  const int N = c->tokens;

  /* Slot mapping: distinct slots from [6, cap) plus padding / out-of-range slots at random
   * places. 2^40 and 2^32 + 5 would land on slots 0 and 5 if truncated to 32 bits: those slots
   * are never written by a valid token, so such a write shows up as a byte difference. */
  const int64_t bad[7] = {-1, -7, INT64_MIN, cap, cap + 3, (int64_t)1 << 40, ((int64_t)1 << 32) + 5};
  int64_t *map = hmalloc((size_t)N * 8);
  const int32_t *perm = perm_i32(cap - 6);
  int nvalid = 0;
  for (int t = 0; t < N; t++) map[t] = t < 7 ? bad[t] : (int64_t)perm[nvalid++] + 6;
  for (int t = N - 1; t > 0; t--) {
    int64_t j = rng_below(t + 1), x = map[t];
    map[t] = map[j];
    map[j] = x;
  }

  /* Source rows: amplitudes from 1e-3 to 1e3 (per row; per 128-group for MLA); one row below the
   * amax floor, one with a large value; stride padding NaN. */
  uint16_t *src = hmalloc((size_t)N * c->src_stride * 2);
  for (int t = 0; t < N; t++) {
    uint16_t *row = src + (size_t)t * c->src_stride;
    const double row_amp = rng_log_uniform(1e-3, 1e3);
    for (int g = 0; g < width / 64; g++) {
      double amp = c->index_k ? row_amp : rng_log_uniform(1e-3, 1e3);
      if (t == 0) amp = 1e-6; /* amax below DSA_FP8_AMAX_FLOOR */
      fill_bf16(row + 64 * g, 64, amp);
    }
    if (t == 1) row[rng_below(width)] = to_bf16(30000.0);
    for (int d = width; d < c->src_stride; d++) row[d] = (uint16_t)BF16_NAN;
  }

  size_t cache_bytes;
  if (c->index_k) cache_bytes = (size_t)c->num_pages * c->page_size * IK_ROW_BYTES;
  else if (c->fmt == DSA_KV_FP8_PACKED) cache_bytes = (size_t)c->num_slots * DSA_MLA_FP8_SLOT_BYTES;
  else cache_bytes = (size_t)c->num_slots * c->cache_stride * 2;
  uint8_t *ref = hmalloc(cache_bytes), *gpu = hmalloc(cache_bytes);
  fill_random_bytes(ref, cache_bytes);
  uint8_t *cache_d = dput(ref, cache_bytes);
  void *src_d = dput(src, (size_t)N * c->src_stride * 2);
  int64_t *map_d = dput(map, (size_t)N * 8);

  chk_begin("%s", c->name);
  if (c->index_k) {
    dsa_index_k_store_args a;
    memset(&a, 0, sizeof a);
    a.k = src;
    a.k_stride = c->src_stride;
    a.slot_mapping = map;
    a.num_tokens = N;
    a.cache = ref;
    a.num_pages = c->num_pages;
    a.page_size = c->page_size;
    dsa_ref_index_k_store(&a);
    a.k = src_d;
    a.slot_mapping = map_d;
    a.cache = cache_d;
    DSA(dsa_index_k_store(&a, g_stream));
  } else {
    dsa_mla_kv_store_args a;
    memset(&a, 0, sizeof a);
    a.kv = src;
    a.kv_stride = c->src_stride;
    a.slot_mapping = map;
    a.num_tokens = N;
    a.cache = ref;
    a.kv_format = c->fmt;
    a.num_slots = c->num_slots;
    a.cache_stride = c->fmt == DSA_KV_BF16 ? c->cache_stride : 0; /* "FP8: ignored" */
    dsa_ref_mla_kv_store(&a);
    a.kv = src_d;
    a.slot_mapping = map_d;
    a.cache = cache_d;
    DSA(dsa_mla_kv_store(&a, g_stream));
  }
  dget(gpu, cache_d, cache_bytes);
  size_t ndiff = 0, first = 0;
  for (size_t i = 0; i < cache_bytes; i++)
    if (gpu[i] != ref[i]) {
      if (!ndiff) first = i;
      ndiff++;
    }
  if (ndiff) {
    char where[400];
    describe_cache_byte(c, first, gpu, ref, where, sizeof where);
    chk_fail("%zu of %zu cache bytes differ from the reference; first: %s", ndiff, cache_bytes, where);
  }
  chk_metric("%d rows (%d to valid slots, 7 skipped), %zu cache bytes identical", N, nvalid, cache_bytes);
  chk_end();
}

/* ============================================================================================== */
/* The cases                                                                                      */
/* ============================================================================================== */

static const store_case k_store_cases[] = {
    {.name = "index-K store: page 64, k_stride 128", .index_k = 1, .page_size = 64, .num_pages = 16, .tokens = 400,
     .src_stride = 128, .seed = 501},
    {.name = "index-K store: page 16, k_stride 192", .index_k = 1, .page_size = 16, .num_pages = 40, .tokens = 300,
     .src_stride = 192, .seed = 502},
    {.name = "MLA store: packed fp8, kv_stride 576", .fmt = DSA_KV_FP8_PACKED, .num_slots = 700, .tokens = 300,
     .src_stride = 576, .seed = 503},
    {.name = "MLA store: packed fp8, kv_stride 640", .fmt = DSA_KV_FP8_PACKED, .num_slots = 300, .tokens = 200,
     .src_stride = 640, .seed = 504},
    {.name = "MLA store: bf16, cache_stride 576", .fmt = DSA_KV_BF16, .num_slots = 500, .cache_stride = 576,
     .tokens = 300, .src_stride = 576, .seed = 505},
    {.name = "MLA store: bf16, kv_stride 640, cache_stride 640", .fmt = DSA_KV_BF16, .num_slots = 400,
     .cache_stride = 640, .tokens = 250, .src_stride = 640, .seed = 506},
};

int main(void) {
  const int init = harness_init("test_gpu_cache");
  if (init) return init;
  const double t0 = now_s();
  int alive = 1;
  for (int i = 0; alive && i < COUNT(k_store_cases); i++)
    alive = harness_run_case(k_store_cases[i].name, store_case_run, &k_store_cases[i]);
  fprintf(stderr, "  [total %.1f s]\n", now_s() - t0);
  return harness_finish();
}
