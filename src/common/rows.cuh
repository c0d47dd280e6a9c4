/*
 * rows.cuh — device-side visibility rules shared by the kernels (DESIGN.md §3, §4). Scoring and
 * top-k: for launch-token t, its visible length L(t), where its positions start in key coordinates,
 * and what position i reports as output; every lookup is bounds-checked against the capacities in
 * dsa_rows, so no content of seq_lens / block_table / row ranges / slot lists can cause an
 * out-of-bounds access.
 */
#pragma once
#include "kernels.h"

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
