/*
 * score_rows.h — rows of float32 scores for the plain top-k cases (test_gpu_topk, test_gpu_api):
 * the kinds of row and their generator, drawn from the harness's g_rng.
 */
#ifndef DSA_SCORE_ROWS_H
#define DSA_SCORE_ROWS_H

/* R_NARROW: every value in [1, 1.125) on a 2^-20 grid — one first-digit bin of the radix select holds
 * the whole row (exercises the candidate list in the workspace and the whole-row fallback), with ties. */
enum { R_RANDOM, R_NEG, R_EQUAL, R_FEW, R_NAN_INF, R_MOSTLY_NAN, R_ALL_NAN, R_NARROW, R_NUM_KINDS };
extern const char *const k_row_kind_name[R_NUM_KINDS];

/* n scores of the given kind (R_*) */
void fill_score_row(float *row, int n, int kind);

#endif
