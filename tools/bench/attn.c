/*
 * attn.c — `dsa-bench attn`: sparse MLA attention alone, at the shapes that decide serving cost
 * (or, with --batches, decode rows of those batches x --heads heads). TFLOP/s as FlashMLA counts
 * them: 2 x tokens x heads x topk x (576 + 512).
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "rng.h"
#include "row_checks.h" /* cmp_i32 */

/* attn: sparse MLA alone. Decode rows: `reqs` requests of one token, each over its own
 * ATTN_DECODE_S-token context; prefill rows: `tokens` tokens at the end of a `ctx`-token context
 * (token t sees ctx - tokens + 1 + t positions; ctx 0: ATTN_PREFILL_S). A context is made of
 * consecutive requests' block-table rows, each the pool's context a request (max(ATTN_DECODE_S,
 * ATTN_PREFILL_S)), so the chunked row (GLM's 4096-token chunk at 16 heads, at the end of 128k) needs
 * no pool of 128k a request. Each token selects topk distinct random visible positions (Floyd's
 * sampling), mapped to slots through the block table: every entry valid, lens = topk. Random
 * selections share few rows between tokens (at 128k two tokens' 2048 share 1.6 % on average); a real
 * indexer's neighbouring tokens share more, so the chunked row is the no-sharing case. The shared
 * chunked row models that sharing: each token keeps every entry of the previous token's selection
 * with probability `share` and draws the rest at random (distinct, among the positions it sees) —
 * a model with one parameter, not a measured indexer. */
typedef struct {
  const char *name;
  int prefill, reqs, tokens, heads;
  int64_t ctx;
  double share; /* prefill: the chance a token keeps each entry of the previous token's selection */
} attn_shape;
static const attn_shape ATTN_SHAPES[] = {
    {"decode 1 x 16h", 0, 1, 1, 16, 0, 0},          {"decode 1 x 64h", 0, 1, 1, 64, 0, 0},
    {"decode 1 x 128h", 0, 1, 1, 128, 0, 0},        {"decode 64 x 16h", 0, 64, 64, 16, 0, 0},
    {"decode 64 x 64h", 0, 64, 64, 64, 0, 0},       {"decode 256 x 64h", 0, 256, 256, 64, 0, 0},
    {"decode 128 x 128h", 0, 128, 128, 128, 0, 0},  {"prefill 64 x 16h", 1, 1, 64, 16, 0, 0},
    {"prefill 64 x 64h", 1, 1, 64, 64, 0, 0},       {"prefill 64 x 128h", 1, 1, 64, 128, 0, 0},
    {"prefill 4096 x 128h", 1, 1, 4096, 128, 0, 0}, {"chunked 4096 x 16h", 1, 1, 4096, 16, 131072, 0},
    {"chunked 4096 x 16h, 90% shared", 1, 1, 4096, 16, 131072, 0.9},
    {"chunked 4096 x 8h", 1, 1, 4096, 8, 131072, 0},  /* GLM-5 at TP8: 8 heads a GPU */
    {"chunked 4096 x 8h, 90% shared", 1, 1, 4096, 8, 131072, 0.9},
};
#define ATTN_CHUNK_CTX_MAX 131072 /* the largest ctx above (the Floyd marks) */

static int64_t attn_ctx(const attn_shape *sh) {
  return sh->prefill ? (sh->ctx ? sh->ctx : ATTN_PREFILL_S) : ATTN_DECODE_S;
}
/* Pool rows (requests) one context spans: 1 for decode and the 16k prefill rows. */
static int attn_ctx_rows(const bench *b, const attn_shape *sh) {
  return sh->prefill ? (int)ceil_div(attn_ctx(sh), b->ppr * PAGE) : 1;
}
#define ATTN_NSHAPES ((int)(sizeof ATTN_SHAPES / sizeof ATTN_SHAPES[0]))

/* Replica j (--cold): requests j x reqs + t (decode) or the context of rows j x attn_ctx_rows ..
 * (prefill), written to d_topk / d_lens (j = 0) or the replica's top-k (h_topk / h_lens keep
 * replica 0's for --check). */
static void make_attn_indices(bench *b, const attn_shape *sh, dsa_rng *r, int j) {
  const int k = b->o.topk;
  int32_t *keep_topk = NULL, *keep_lens = NULL;
  if (j > 0) { /* h_topk / h_lens hold replica 0's: build this replica's in scratch, then restore */
    keep_topk = xmalloc(sizeof(int32_t) * (size_t)sh->tokens * k);
    keep_lens = xmalloc(sizeof(int32_t) * (size_t)sh->tokens);
    memcpy(keep_topk, b->h_topk, sizeof(int32_t) * (size_t)sh->tokens * k);
    memcpy(keep_lens, b->h_lens, sizeof(int32_t) * (size_t)sh->tokens);
  }
  const int64_t ctx = attn_ctx(sh), row_len = b->ppr * PAGE;
  const int first_row = j * attn_ctx_rows(b, sh); /* prefill: the context's first pool row */
  int32_t *prev = sh->share > 0 ? xmalloc(sizeof(int32_t) * (size_t)k) : NULL; /* the previous token's positions */
  int n_prev = 0;
  for (int t = 0; t < sh->tokens; t++) {
    const int req = sh->prefill ? first_row : j * sh->reqs + t;
    const int64_t L = sh->prefill ? ctx - sh->tokens + 1 + t : ctx;
    const int n = (int)imin64(k, L);
    int32_t *row = b->h_topk + (size_t)t * k, *pos = b->ref_topk; /* ref_topk: [topk] scratch */
    int kept = 0;
    if (prev && 2 * (int64_t)n <= L) { /* the previous token's entries kept (all visible here), the rest drawn */
      for (int e = 0; e < n_prev && kept < n; e++)
        if (dsa_rng_unit(r) < sh->share) {
          b->mark[prev[e]] = 1;
          pos[kept++] = prev[e];
        }
      for (int e = kept; e < n; e++) { /* rejection: at most half the positions are marked */
        int64_t p;
        do p = (int64_t)dsa_rng_below(r, (uint64_t)L); while (b->mark[p]);
        b->mark[p] = 1;
        pos[e] = (int32_t)p;
      }
    } else {
      for (int64_t i = L - n, e = 0; i < L; i++, e++) { /* Floyd: n distinct positions of [0, L) */
        int64_t p = (int64_t)dsa_rng_below(r, (uint64_t)(i + 1));
        if (b->mark[p]) p = i;
        b->mark[p] = 1;
        pos[e] = (int32_t)p;
      }
    }
    if (prev) {
      memcpy(prev, pos, sizeof(int32_t) * (size_t)n);
      n_prev = n;
    }
    for (int e = 0; e < n; e++) {
      b->mark[pos[e]] = 0;
      const int64_t rq = req + pos[e] / row_len, pr = pos[e] % row_len; /* pool row, position in it */
      if (rq >= b->n_req) die("attn: %s needs pool row %lld of %d", sh->name, (long long)rq, b->n_req);
      row[e] = b->h_block_table[rq * b->ppr + pr / PAGE] * PAGE + (int32_t)(pr % PAGE);
    }
    if (b->o.slot_order) qsort(row, (size_t)n, sizeof *row, cmp_i32);
    for (int e = n; e < k; e++) row[e] = -1;
    b->h_lens[t] = n;
  }
  free(prev);
  int32_t *dt = j > 0 ? cold_topk(b, j, sh->tokens) : b->d_topk, *dl = j > 0 ? cold_lens(b, j, sh->tokens) : b->d_lens;
  CK(cudaMemcpy(dt, b->h_topk, sizeof(int32_t) * (size_t)sh->tokens * k, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dl, b->h_lens, sizeof(int32_t) * (size_t)sh->tokens, cudaMemcpyHostToDevice));
  if (j > 0) {
    memcpy(b->h_topk, keep_topk, sizeof(int32_t) * (size_t)sh->tokens * k);
    memcpy(b->h_lens, keep_lens, sizeof(int32_t) * (size_t)sh->tokens);
    free(keep_topk);
    free(keep_lens);
  }
}

/* One shape: its indices drawn from rng stream 100 + stream_id of --seed (the shape's place in the
 * list), one checked run, then the timing over its --cold replicas. */
static void run_attn_row(bench *b, row_result *row, const attn_shape *sh, int stream_id) {
  const options *o = &b->o;
  const int T = sh->tokens, H = sh->heads;
  row_init(row, TBL_ATTN);
  row->shape = sh->name;
  row->batch = sh->reqs;
  row->q_len = sh->prefill ? T : 1;
  row->tokens = T;
  row->heads = H;
  row->S = attn_ctx(sh);
  dsa_rng r = dsa_rng_make(o->seed, 100 + (uint64_t)stream_id);
  make_attn_indices(b, sh, &r, 0);
  for (int t = 0; t < T; t++) row->selected += b->h_lens[t];
  dsa_sparse_mla_args m = attn_args(b, T, H, 0);
  stage at0 = attn_stage(b, &m);
  /* Outputs poisoned, indices kept (poison_and_run would poison those too), one run, checked. */
  CK(cudaMemsetAsync(b->d_out, 0xFF, (size_t)T * H * V_DIM * 2, b->stream));
  CK(cudaMemsetAsync(b->d_lse, 0xFF, sizeof(float) * (size_t)T * H, b->stream));
  stage_run(&at0, b->stream);
  CK(cudaStreamSynchronize(b->stream));
  CK(cudaGetLastError());
  /* --cold: replicas 1..K-1 select from other requests' contexts (their own indices, q copies) */
  const int need = cold_need(b, (double)row->selected * (double)b->kv_slot_bytes);
  const int per_replica = sh->prefill ? attn_ctx_rows(b, sh) : sh->reqs;
  const int K = (int)imin64(imin64(need, COLD_MAX_REPLICAS), imax64(1, b->n_req / per_replica));
  cold_queries(b, K, T, H);
  dsa_sparse_mla_args *mr = xmalloc(sizeof *mr * (size_t)K);
  stage *at = xmalloc(sizeof *at * (size_t)K);
  for (int j = 0; j < K; j++) {
    mr[j] = m;
    if (j > 0) {
      make_attn_indices(b, sh, &r, j);
      mr[j].q = cold_qa(b, j, T, H);
      mr[j].indices = cold_topk(b, j, T);
      mr[j].lens = cold_lens(b, j, T);
    }
    at[j] = (stage){ST_ATTN, &mr[j], at0.ws, at0.ws_bytes};
  }
  check_and_time_attention(b, row, at, K, need, T, H);
  free(mr);
  free(at);
}

/* The fixed table, or (--batches given) decode rows of those batches x --heads heads; --shape
 * keeps the shapes whose name contains it. Then the table. */
int attn_main(bench *b, row_result **rows_out) {
  const options *o = &b->o;
  int nrows = 0;
  const attn_shape *shapes = ATTN_SHAPES;
  int nshapes = ATTN_NSHAPES;
  static attn_shape custom[MAX_SHARES * MAX_BATCHES];
  static char custom_names[MAX_SHARES * MAX_BATCHES][48];
  if (o->nchunk_tokens > 0) { /* chunk rows: each token count at each share of the previous token's selection */
    const int ns = o->nchunk_shares;
    for (int i = 0; i < ns * o->nchunk_tokens; i++) {
      const int pct = o->chunk_shares[i % ns];
      char at[24] = "", sh[24] = "";
      if (o->chunk_ctx != ATTN_CHUNK_CTX_MAX) snprintf(at, sizeof at, " at %lldk", (long long)(o->chunk_ctx / 1024));
      if (pct > 0) snprintf(sh, sizeof sh, ", %d%% shared", pct);
      snprintf(custom_names[i], sizeof custom_names[i], "chunked %d x %dh%s%s", o->chunk_tokens[i / ns], o->heads, at,
               sh);
      custom[i] = (attn_shape){custom_names[i], 1, 1, o->chunk_tokens[i / ns], o->heads, o->chunk_ctx, pct / 100.0};
    }
    shapes = custom;
    nshapes = ns * o->nchunk_tokens;
  } else if (o->batches_given) {
    for (int i = 0; i < o->nbatches; i++) {
      snprintf(custom_names[i], sizeof custom_names[i], "decode %d x %dh", o->batches[i], o->heads);
      custom[i].name = custom_names[i];
      custom[i].prefill = 0;
      custom[i].reqs = custom[i].tokens = o->batches[i];
      custom[i].heads = o->heads;
    }
    shapes = custom;
    nshapes = o->nbatches;
  }
  int max_T = 0, max_H = 0, max_R = 1;
  for (int i = 0; i < nshapes; i++) { /* the pool holds what the rows run need (--shape: only theirs,
                                         unless --table-pool) */
    if (o->shape && !o->table_pool && !strstr(shapes[i].name, o->shape)) continue;
    max_T = shapes[i].tokens > max_T ? shapes[i].tokens : max_T;
    max_H = shapes[i].heads > max_H ? shapes[i].heads : max_H;
    max_R = shapes[i].reqs > max_R ? shapes[i].reqs : max_R;
    /* a prefill context spans ceil(ctx / a pool row's positions) rows: the chunk's 128k, 8 (without
     * this, --shape chunked read the block table past its end and ran on whatever slots lay there) */
    const int64_t row_positions = imax64(ATTN_DECODE_S, ATTN_PREFILL_S); /* setup's max_S below */
    const int64_t ctx_rows = shapes[i].prefill ? ceil_div(attn_ctx(&shapes[i]), row_positions) : 1;
    max_R = ctx_rows > max_R ? (int)ctx_rows : max_R;
  }
  row_result *rows = *rows_out = xmalloc(sizeof(row_result) * (size_t)nshapes);
  printf("dsa-bench attn on %s (dsa %s)\n", b->dev_name, dsa_version());
  setup(b, max_R, imax64(ATTN_DECODE_S, ATTN_PREFILL_S), max_T, max_H, 0);
  free(b->mark); /* Floyd's marks over the longest context (a chunked row spans several pool rows) */
  b->mark = xmalloc(ATTN_CHUNK_CTX_MAX);
  memset(b->mark, 0, ATTN_CHUNK_CTX_MAX);
  for (int i = 0; i < nshapes; i++) {
    if (o->shape && !strstr(shapes[i].name, o->shape)) continue;
    run_attn_row(b, &rows[nrows], &shapes[i], i);
    print_progress(&rows[nrows++]);
  }

  print_attn_only_table(b, rows, nrows);
  return nrows;
}
