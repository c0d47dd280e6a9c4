/*
 * mla_problem.c — see mla_problem.h.
 */
#include "mla_problem.h"

#include <math.h>
#include <string.h>

#include "dsa_ref.h"
#include "gpu_harness.h"

static int32_t mla_random_index(int64_t num_slots, const int32_t *row, int i) {
  double u = rng_unit();
  if (u < 0.07) return -1;
  if (u < 0.09) return (int32_t)(num_slots + rng_below(1000));
  if (u < 0.10) return INT32_MAX;
  if (u < 0.11) return rng_below(2) ? INT32_MIN : -(int32_t)(2 + rng_below(1000000));
  if (u < 0.16 && i > 0) return row[rng_below(i)]; /* a duplicate: counts twice */
  return (int32_t)rng_below(num_slots);
}

void mla_build(const mla_case *c, mla_prob *p) {
  memset(p, 0, sizeof *p);
  rng_seed(c->seed);
  p->c = c;
  p->T = c->T;
  p->H = c->H;
  p->topk = c->topk;
  const int T = c->T, H = c->H, topk = c->topk;
  const int64_t S = c->num_slots;

  /* KV cache */
  if (c->fmt == DSA_KV_BF16) {
    /* a case's stride, not the library's check: a shorter one would write past the rows below */
    if (c->kv_stride < DSA_MLA_QK_DIM)
      abort_case("%s: bf16 KV needs kv_stride >= %d (has %d)", c->name, DSA_MLA_QK_DIM, c->kv_stride);
    const size_t n = (size_t)S * c->kv_stride;
    uint16_t *kv = hmalloc(n * 2);
    for (int64_t s = 0; s < S; s++) {
      fill_bf16(kv + s * c->kv_stride, DSA_MLA_QK_DIM, 1.0);
      for (int d = DSA_MLA_QK_DIM; d < c->kv_stride; d++) kv[s * c->kv_stride + d] = BF16_NAN; /* never read */
    }
    p->kv_h = kv;
    p->kv_bytes = n * 2;
  } else {
    const size_t n = (size_t)S * DSA_MLA_FP8_SLOT_BYTES;
    uint8_t *kv = hmalloc(n);
    if (c->fp8_random_bytes) {
      for (int64_t s = 0; s < S; s++) {
        uint8_t *row = kv + s * DSA_MLA_FP8_SLOT_BYTES;
        for (int d = 0; d < DSA_MLA_V_DIM; d++) row[d] = rng_fp8_byte();
        for (int g = 0; g < 4; g++) {
          float sc = (float)(rng_uniform(0.5, 2.0) / 448.0);
          memcpy(row + 512 + 4 * g, &sc, 4);
        }
        uint16_t rope[64];
        fill_bf16(rope, 64, 1.0);
        memcpy(row + 528, rope, sizeof rope);
      }
    } else {
      /* Random bf16 rows (each 128-group with its own amplitude) quantised by the reference writer. */
      uint16_t *rows = hmalloc((size_t)S * DSA_MLA_QK_DIM * 2);
      for (int64_t s = 0; s < S; s++) {
        for (int g = 0; g < 4; g++) fill_bf16(rows + s * DSA_MLA_QK_DIM + 128 * g, 128, rng_log_uniform(0.1, 3.0));
        fill_bf16(rows + s * DSA_MLA_QK_DIM + 512, 64, 1.0);
      }
      int64_t *map = hmalloc((size_t)S * 8);
      for (int64_t s = 0; s < S; s++) map[s] = s;
      memset(kv, 0, n);
      dsa_mla_kv_store_args st;
      memset(&st, 0, sizeof st);
      st.kv = rows;
      st.kv_stride = DSA_MLA_QK_DIM;
      st.slot_mapping = map;
      st.num_tokens = (int)S;
      st.cache = kv;
      st.kv_format = DSA_KV_FP8_PACKED;
      st.num_slots = S;
      dsa_ref_mla_kv_store(&st);
    }
    p->kv_h = kv;
    p->kv_bytes = n;
  }

  /* q */
  const size_t nq = (size_t)T * H * DSA_MLA_QK_DIM;
  uint16_t *q = hmalloc(nq * 2);
  fill_bf16(q, nq, c->q_amp);
  p->q_h = q;

  /* indices and lens */
  p->istride = topk + c->idx_extra;
  p->idx_h = hmalloc((size_t)imax(T, 1) * (size_t)p->istride * 4);
  p->lens_h = hmalloc((size_t)imax(T, 1) * 4);
  const int invalid_tok = c->all_invalid_token ? (T > 1 ? T / 2 : 0) : -1;
  if (c->distinct && topk > S) abort_case("%s: distinct entries need num_slots >= topk", c->name);
  int *mark = c->distinct ? hmalloc((size_t)imax((int)S, 1) * sizeof *mark) : NULL; /* t + 1: token t lists it */
  if (mark) memset(mark, 0, (size_t)imax((int)S, 1) * sizeof *mark);
  const int zero_len_tok = c->lens_given && T >= 3 ? 1 : -1;
  for (int t = 0; t < T; t++) {
    int32_t *row = p->idx_h + (int64_t)t * p->istride;
    int32_t lens = topk;
    if (c->lens_given && c->few_entries) {
      lens = 1 + t % 3;
    } else if (c->lens_given) {
      switch (t % 4) {
        case 0: lens = topk; break;
        case 1: lens = (int32_t)rng_below(topk + 1); break;
        case 2: lens = topk - 1; break;
        default: lens = 1 + (int32_t)rng_below(topk); break;
      }
      if (t == zero_len_tok) lens = 0;
    }
    p->lens_h[t] = lens;
    for (int i = 0; i < topk; i++) {
      if (t == invalid_tok) {
        static const int64_t inv[6] = {-1, 0, INT32_MIN, INT32_MAX, 7, -2};
        int64_t v = inv[i % 6];
        row[i] = (int32_t)(v == 0 ? S : v == 7 ? S + 7 : v);
      } else if (i >= lens) {
        row[i] = (int32_t)rng_below(S); /* valid slot past lens: must be ignored */
      } else if (c->share > 0 && t > 0 && t - 1 != invalid_tok && rng_unit() < c->share) {
        row[i] = row[i - p->istride]; /* the previous token's entry */
      } else {
        row[i] = mla_random_index(S, row, mark ? 0 : i); /* distinct: no duplicate drawn on purpose */
      }
      if (mark && i < lens && row[i] >= 0 && row[i] < S) { /* distinct: a valid slot at most once a token */
        while (mark[row[i]] == t + 1) row[i] = (int32_t)rng_below(S);
        mark[row[i]] = t + 1;
      }
    }
    for (int64_t i = topk; i < p->istride; i++) row[i] = (int32_t)rng_below(S); /* stride padding */
  }
  p->nvalid = hmalloc((size_t)imax(T, 1) * sizeof *p->nvalid);
  for (int t = 0; t < T; t++) {
    const int lim = c->lens_given ? imin(imax(p->lens_h[t], 0), topk) : topk;
    int nv = 0;
    for (int i = 0; i < lim; i++) {
      int32_t v = p->idx_h[(int64_t)t * p->istride + i];
      nv += v >= 0 && v < S;
    }
    p->nvalid[t] = nv;
  }

  dsa_sparse_mla_args a;
  memset(&a, 0, sizeof a);
  a.q = q;
  a.num_tokens = T;
  a.num_heads = H;
  a.kv_cache = p->kv_h;
  a.kv_format = c->fmt;
  a.num_slots = S;
  a.kv_stride = c->fmt == DSA_KV_BF16 ? c->kv_stride : 0; /* "FP8: ignored" */
  a.indices = p->idx_h;
  a.indices_stride = p->istride;
  a.topk = topk;
  a.lens = c->lens_given ? p->lens_h : NULL;
  a.softmax_scale = (float)(1.0 / sqrt(192.0 + 64.0));
  p->ha = a;
  p->da = a;
  p->da.q = dput(q, nq * 2);
  p->da.kv_cache = dput(p->kv_h, p->kv_bytes);
  p->da.indices = dput(p->idx_h, (size_t)imax(T, 1) * (size_t)p->istride * 4);
  p->da.lens = c->lens_given ? dput(p->lens_h, (size_t)imax(T, 1) * 4) : NULL;
}

void mla_run(const mla_prob *p, void *ws, size_t wsb, int ws_byte, void *out_d, float *lse_d, uint16_t *out_h,
             float *lse_h) {
  const size_t no = (size_t)p->T * p->H * DSA_MLA_V_DIM, nl = (size_t)p->T * p->H;
  dset(ws, ws_byte, wsb);
  dset(out_d, POISON_BYTE, no * 2);
  if (lse_d) dset(lse_d, POISON_BYTE, nl * 4);
  dsa_sparse_mla_args a = p->da;
  a.out = out_d;
  a.lse = lse_d;
  DSA(dsa_sparse_mla(&a, ws, wsb, g_stream));
  dget(out_h, out_d, no * 2);
  if (lse_d) dget(lse_h, lse_d, nl * 4);
}
