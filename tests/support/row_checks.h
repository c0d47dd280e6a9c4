/*
 * row_checks.h — the checks of one output row against the float64 reference that several GPU test
 * programs apply (DESIGN.md §5): a scores row (tolerance and the part past L) and an indexer top-k
 * row (the eps-band criterion, lens, the -1 tail, duplicates, visible positions); cmp_i32 for
 * sorting selections. dsa-bench --check uses the same checks (dsa_support).
 */
#ifndef DSA_ROW_CHECKS_H
#define DSA_ROW_CHECKS_H

#include <stddef.h>
#include <stdint.h>

/* Acceptance (DESIGN.md §5), for the tests and dsa-bench --check. */
#define TOL_SCORE_BF16 1e-5 /* bf16 q: float32 accumulation */
#define TOL_SCORE_FP8 2e-3  /* fp8 q: Hopper FP8 MMA does not accumulate in full float32 */
#define TOL_ATTN_OUT 1e-2   /* relative L2 per token, bf16 output */
#define TOL_ATTN_LSE 1e-3   /* times max(1, |ref|) */

/* What an output holds before a run (the GPU tests poison every output with POISON_BYTE). */
#define POISON_BYTE 0x7F /* float32 0x7F7F7F7F = 3.39e38, bf16 0x7F7F = 3.39e38 */
#define POISON_F32_BITS 0x7F7F7F7Fu
#define POISON_I32 (-7)

/* The part of a scores row past L: -inf in [L, W) (DESIGN §3: the call covers W = max_len
 * columns), the poison in [W, row_cap) (the stride's padding is never written). Returns 0 or fills why. */
int check_score_tail(const float *gpu, int L, int64_t W, int64_t row_cap, char *why, size_t wn);

/* One row of GPU scores against the float64 reference: ratio = max err / (tol * max |ref|).
 * Positions the reference scores -inf (outside the cache) must be -inf; the tail as
 * check_score_tail. Returns 0 or fills why. */
int check_score_row(const double *ref, const float *gpu, int L, int64_t W, int64_t row_cap, double tol,
                    double *ratio, char *why, size_t wn);

/* One token's indexer top-k output. */
typedef struct {
  int L;                     /* visible positions */
  const double *score;       /* reference scores [L]; -inf where the position is outside the cache */
  const int64_t *out_val;    /* [L]: what position i is reported as; -1 = it can only come back as -1 */
  const unsigned char *bad;  /* [L]: position outside the cache (reported as -1, or as out_val) */
  int topk;
  double tol;
  const int32_t *got;        /* [topk] */
  int has_len;
  int32_t got_len;
} topk_row;

/* DESIGN.md §5 top-k criterion for one token. Returns 0 or fills why; *worst = max over selected
 * entries of (kth - score) / eps (how far into the eps band the worst pick lies). */
int check_topk_row(const topk_row *r, char *why, size_t wn, double *worst);

/* qsort order of int32 values, ascending */
int cmp_i32(const void *a, const void *b);

#endif
