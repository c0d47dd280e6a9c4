/*
 * cp/merge_load.cuh — a thread's candidates of a merge row, for the merge kernels that hold them in
 * registers (merge_runs.cu, merge_tree.cu), and the digit schedule of their radix passes.
 */
#pragma once
#include <stdint.h>

#include "kernels.h"

/* Candidates [f0, f0 + ITEMS) of the row's flat order (list w = f / k_in, entry f % k_in): scores
 * and ids, id -1 (score 0) past n; a negative id stays as given (no candidate). Every load is issued
 * before any is used. */
template <int ITEMS>
static __device__ __forceinline__ void merge_load(const dsa_topk_merge_args &a, int row, int f0, int n,
                                                  float (&s)[ITEMS], int (&id)[ITEMS]) {
  static_assert(ITEMS % 4 == 0, "a thread's candidates are 16-byte loads where aligned");
  const bool vec = a.k_in % ITEMS == 0 && (((uintptr_t)a.cand_scores | (uintptr_t)a.cand_ids) & 15) == 0;
  if (vec) { /* the thread's candidates lie in one list, 16-byte aligned */
    if (f0 < n) {
      const int w = f0 / a.k_in, j = f0 - w * a.k_in;
      const int64_t at = ((int64_t)w * a.num_rows + row) * a.k_in + j;
#pragma unroll
      for (int h = 0; h < ITEMS / 4; ++h) {
        const float4 sv = ((const float4 *)(a.cand_scores + at))[h];
        const int4 iv = ((const int4 *)(a.cand_ids + at))[h];
        s[4 * h] = sv.x, s[4 * h + 1] = sv.y, s[4 * h + 2] = sv.z, s[4 * h + 3] = sv.w;
        id[4 * h] = iv.x, id[4 * h + 1] = iv.y, id[4 * h + 2] = iv.z, id[4 * h + 3] = iv.w;
      }
    } else {
#pragma unroll
      for (int u = 0; u < ITEMS; ++u) s[u] = 0.f, id[u] = -1;
    }
  } else {
    int w = f0 / a.k_in, j = f0 - w * a.k_in;
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      s[u] = 0.f;
      id[u] = -1;
      if (f0 + u < n) {
        const int64_t at = ((int64_t)w * a.num_rows + row) * a.k_in + j;
        s[u] = a.cand_scores[at];
        id[u] = a.cand_ids[at];
      }
      if (++j == a.k_in) j = 0, ++w;
    }
  }
}

/* The radix passes' digits over a row's offset composites ((key - the row's smallest key) << 32 |
 * ~id): the first is the key offset's bits [32 + sh, 32 + sh + 11), sh =
 * merge_first_shift(span) so that span >> sh < 2048 (the offsets' range in 11 bits); each later one
 * the next min(11, shift) bits below those found. Given the bits found so far, [shift, 64) (64:
 * none yet), the next digit's width and lowest bit (*nsh: the new shift once its bin is found). */
static __device__ __forceinline__ int merge_first_shift(uint32_t span) { return max(0, (32 - __clz((int)span)) - 11); }
static __device__ __forceinline__ void merge_next_digit(int shift, int sh, int *width, int *nsh) {
  *width = shift == 64 ? 11 : min(11, shift);
  *nsh = shift == 64 ? 32 + sh : shift - *width;
}
