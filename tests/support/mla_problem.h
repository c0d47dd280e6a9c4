/*
 * mla_problem.h — sparse MLA attention's test problem (test_gpu_attention, test_gpu_api): a KV cache
 * (bf16 rows, FP8 rows quantised by the reference writer, or random FP8 bytes), q, and indices with
 * -1, out-of-range, extreme and repeated entries (lens optional), with host-pointer (reference) and
 * device-pointer args. The build seeds the harness's g_rng with the case's seed.
 */
#ifndef DSA_MLA_PROBLEM_H
#define DSA_MLA_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#include "dsa.h"

typedef struct {
  const char *name;
  int H, T, topk, idx_extra;
  dsa_kv_format fmt;
  int kv_stride;          /* bf16 only */
  int fp8_random_bytes;   /* fp8: random valid bytes instead of quantised random rows */
  int lens_given, lse_null, all_invalid_token;
  int few_entries;        /* lens 1..3 for every token: the lse rests on one or two scores */
  double lse_tol;         /* 0: TOL_ATTN_LSE; else a looser bound, with its reason at the case */
  double q_amp;
  int num_slots;
  int check_determinism;
  double share;           /* each entry of token t > 0 (within lens) is token t - 1's with this
                             probability, as neighbouring prefill tokens share rows (token groups) */
  int converted;          /* packed FP8 read many times over: the library converts the rows into the
                             workspace first (dsa.h); the test also runs it with the workspace less those
                             rows (unconverted) and requires the same bits (not where the converted
                             rows run the seesaw's consumers, which then give way to heads_as_m's: other
                             sums) */
  int distinct;           /* no token lists a valid slot twice (within lens): token groups' unions then
                             take their path without the sort where the cache is small */
  int seesaw;             /* the library's choice runs the seesaw's consumers: the seesaw in heads_as_m's
                             place (rows read >= 8 times a slot, bf16; >= 16, FP8), or token groups over
                             converted rows (also where DSA_KERNEL forces token groups) */
  uint64_t seed;
} mla_case;

typedef struct {
  const mla_case *c;
  int T, H, topk;
  int64_t istride;
  int32_t *idx_h, *lens_h;
  int *nvalid;            /* valid entries per token */
  size_t kv_bytes;
  void *kv_h, *q_h;
  dsa_sparse_mla_args ha, da; /* out / lse filled in by the caller */
} mla_prob;

/* Seeds g_rng with c->seed and builds the problem. */
void mla_build(const mla_case *c, mla_prob *p);
/* Runs dsa_sparse_mla (outputs poisoned first) and copies out / lse back. */
void mla_run(const mla_prob *p, void *ws, size_t wsb, int ws_byte, void *out_d, float *lse_d, uint16_t *out_h,
             float *lse_h);

#endif
