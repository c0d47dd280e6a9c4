/*
 * rows.cuh — device-side visibility rules shared by the kernels (DESIGN.md §3, §4). Scoring and
 * top-k: for launch-token t, its visible length L(t), where its positions start in key coordinates,
 * and what position i reports as output; every lookup is bounds-checked against the capacities in
 * dsa_rows, so no content of seq_lens / block_table / row ranges / slot lists can cause an
 * out-of-bounds access. Attention: which entries of an index row are used.
 */
#pragma once
#include "dsa_kernels.h"

/* v / P and v % P for v >= 0: a shift and a mask when P is a power of two (the usual 64), since
 * integer division is a long instruction sequence on the GPU. */
static __device__ __forceinline__ int div_page(int v, int P, int *rem) {
  if ((P & (P - 1)) == 0) {
    *rem = v & (P - 1);
    return v >> (__ffs(P) - 1);
  }
  const int q = v / P;
  *rem = v - q * P;
  return q;
}

/* Visible length of launch-token t (relative to rows.token_begin). */
static __device__ __forceinline__ int rows_len(const dsa_rows &r, int t) {
  const int ta = r.token_begin + t;
  long long L;
  if (r.mode == DSA_ROWS_DECODE) {
    const int n = r.q_len_per_req;
    const int req = ta / n, j = ta % n;
    L = (long long)r.seq_lens[req] - (n - 1) + j;
    const long long cap = (long long)r.max_blocks * r.page_size;
    if (L > cap) L = cap;
  } else if (r.mode == DSA_ROWS_PREFILL) {
    long long b = r.row_starts[ta], e = r.row_ends[ta];
    if (b < 0) b = 0;
    if (b > r.num_ws_rows) b = r.num_ws_rows;
    if (e > r.num_ws_rows) e = r.num_ws_rows;
    L = e - b;
  } else {
    L = r.row_lens ? (long long)r.row_lens[ta] : (long long)r.max_len;
  }
  if (L < 0) L = 0;
  if (L > r.max_len) L = r.max_len;
  return (int)L;
}

/* First key coordinate of launch-token t: the workspace row of position 0 (prefill), else 0. */
static __device__ __forceinline__ int rows_begin(const dsa_rows &r, int t) {
  if (r.mode != DSA_ROWS_PREFILL) return 0;
  long long b = r.row_starts[r.token_begin + t];
  if (b < 0) b = 0;
  if (b > r.num_ws_rows) b = r.num_ws_rows;
  return (int)b;
}

/* Index-K slot of key coordinate x seen by launch-token t, or -1 if its page / slot lies outside
 * the cache. Callers pass x < rows_begin + rows_len; the range is checked here anyway (one compare)
 * so that a length re-read after an aliasing output changed it can never index past the block
 * table row or the workspace. */
/* rows_key_slot in two halves, for callers that issue the lookup's load early and use it later:
 * rows_key_raw does the one global load (block-table entry / workspace slot; -1 when x is out of
 * range), rows_key_slot_from_raw the checks. rows_key_slot(r, t, x) ==
 * rows_key_slot_from_raw(r, x, rows_key_raw(r, t, x)). */
static __device__ __forceinline__ long long rows_key_raw(const dsa_rows &r, int t, int x) {
  if (x < 0) return -1;
  if (r.mode == DSA_ROWS_DECODE) {
    const int req = (r.token_begin + t) / r.q_len_per_req;
    int in_page;
    const int col = div_page(x, r.page_size, &in_page);
    if (col >= r.max_blocks) return -1;
    return r.block_table[(long long)req * r.block_table_stride + col];
  }
  if (r.mode == DSA_ROWS_PREFILL) {
    if (x >= r.num_ws_rows) return -1;
    return r.ws_slots[x];
  }
  return x;
}
static __device__ __forceinline__ long long rows_key_slot_from_raw(const dsa_rows &r, int x, long long raw) {
  if (r.mode == DSA_ROWS_DECODE) {
    if (raw < 0 || raw >= r.num_pages) return -1;
    int in_page;
    (void)div_page(x, r.page_size, &in_page);
    return raw * r.page_size + in_page;
  }
  if (r.mode == DSA_ROWS_PREFILL) {
    if (raw < 0 || raw >= r.num_pages * (long long)r.page_size) return -1;
    return raw;
  }
  return raw;
}
static __device__ __forceinline__ long long rows_key_slot(const dsa_rows &r, int t, int x) {
  return rows_key_slot_from_raw(r, x, rows_key_raw(r, t, x));
}

/* What position i of launch-token t reports in the top-k output. */
static __device__ __forceinline__ int rows_output(const dsa_rows &r, int t, int i) {
  if (r.mode == DSA_ROWS_DECODE) return (int)rows_key_slot(r, t, i);
  if (r.mode == DSA_ROWS_PREFILL) {
    const int w = rows_begin(r, t) + i; /* both <= DSA_MAX_ROW_LEN: no overflow */
    if (w >= r.num_ws_rows) return -1;
    return r.output_global_slots ? (int)rows_key_slot(r, t, w) : w;
  }
  return i;
}

/* Attention (both kernel versions): the KV slot of entry e of an index row, or -1 when the entry is
 * skipped — e at or past the row's end (topk, lens), or an index outside [0, num_slots). */
/* Attention: the natural-log lse of a row from its running max m (log2 domain) and sum l; -inf when
 * the row had no valid entry (l = 0). */
static __device__ __forceinline__ float mla_lse(float m, float l) {
  return l > 0.f ? (m + log2f(l)) * MLA_LN2 : -INFINITY;
}
static __device__ __forceinline__ int mla_entry_slot(const int32_t *idx_row, int e, int end, int64_t num_slots) {
  if (e >= end) return -1;
  const int idx = __ldg(idx_row + e);
  return (idx >= 0 && (int64_t)idx < num_slots) ? idx : -1;
}
/* The same in two halves, for a loop that loads its entries one iteration ahead: the raw entry (-1
 * past `end`) now, the range check where it is used, so the thread does not stall on the load. */
static __device__ __forceinline__ int mla_entry_raw(const int32_t *idx_row, int e, int end) {
  return e < end ? __ldg(idx_row + e) : -1;
}
/* One compare: a negative idx is >= 2^31 as unsigned, and num_slots <= 2^31 (mla_slots_cap). */
static __device__ __forceinline__ int mla_slot_checked(int idx, int64_t num_slots) {
  return (int64_t)(uint32_t)idx < num_slots ? idx : -1;
}
/* num_slots as a kernel using mla_slot_checked takes it: no int32 index reaches 2^31, so the cap
 * changes no result. */
static inline int64_t mla_slots_cap(int64_t num_slots) {
  return num_slots < ((int64_t)1 << 31) ? num_slots : ((int64_t)1 << 31);
}
