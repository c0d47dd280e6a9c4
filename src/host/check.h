/*
 * host/check.h — argument checks shared by the calls (host/check.c) and the macros every call's
 * checks are written with. A check records its message (dsa_fail: the call, the argument, its value)
 * and returns the status; DSA_OK lets the call go on. Nothing here touches device memory.
 */
#ifndef DSA_CHECK_H
#define DSA_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "dsa.h"
#include "host/status.h"

static inline int misaligned(const void *p, size_t a) { return ((uintptr_t)p % a) != 0; }

/* The macros assume `const char *fn` (the call's name) in scope. */
#define CHECK(expr) do { dsa_status st_ = (expr); if (st_ != DSA_OK) return st_; } while (0)
#define NEED_PTR(p, name) do { if (!(p)) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: %s is NULL", fn, name); } while (0)
#define NEED_ALIGNED(p, a, name)                                                                  \
  do {                                                                                            \
    if ((p) && misaligned((p), (a)))                                                              \
      return dsa_fail(DSA_ERR_MISALIGNED, "%s: %s = %p must be %d-byte aligned", fn, name,        \
                      (const void *)(p), (int)(a));                                               \
  } while (0)

/* The caller's workspace against what this call needs: big enough, present, 256-byte aligned. */
dsa_status check_workspace(const char *fn, const void *ws, size_t ws_bytes, size_t need);
/* A strided view at p: `rows` rows of `row_len` elements of `elem` bytes, `stride` elements apart.
 * Its extent must fit int64 and must not wrap the address space from p. */
dsa_status check_extent(const char *fn, const char *name, const void *p, int64_t rows, int64_t stride, int64_t row_len,
                        int64_t elem);
/* A dense array of n elements. */
dsa_status check_array(const char *fn, const char *name, const void *p, int64_t n, int64_t elem);
/* The indexer's query side for num_tokens tokens (need_data: its pointers too). */
dsa_status check_query(const char *fn, const dsa_indexer_query *q, int need_data, int64_t num_tokens);
/* The index-K cache (need_data: its pointer and extent too). */
dsa_status check_cache(const char *fn, const dsa_index_k_cache *c, int need_data);
dsa_status check_topk(const char *fn, int topk);
/* Top-k outputs of num_tokens rows. */
dsa_status check_topk_outputs(const char *fn, int32_t *indices, const char *indices_name, int32_t *lens,
                              const char *lens_name, int64_t num_tokens, int topk);

#endif /* DSA_CHECK_H */
