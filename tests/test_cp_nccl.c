/*
 * test_cp_nccl.c — dsa_cp_decode on W = 2, 4 and 8 GPUs through NCCL (each W the host has; one host
 * thread a rank, one communicator from ncclCommInitAll a W; DSA_CP_WORLDS="2,4" picks some) against
 * the same step on one GPU (dsa_indexer_decode + dsa_sparse_mla over
 * the whole context): every rank's top-k positions and lens identical to the one GPU's; every
 * rank's out within DESIGN.md §5's attention tolerance of the one GPU's (both bf16, so the bound is
 * the tolerance, 1e-2), lse within 1e-3 x max(1, |lse|); the ranks' outputs identical to each
 * other. Cases: decode (round robin and blocks, MTP, lengths below / at / above topk, equal
 * scores) and prefill (dsa_cp_prefill against dsa_indexer_prefill: causal tokens, chunks).
 * Exit 77 (skipped, with the reason) with fewer than 2 sm_90 GPUs.
 *
 * `test_cp_nccl --host` needs no GPU: dsa_cp's argument checks (the workspace queries, dsa_cp_decode
 * and dsa_cp_prefill with NULL args, a NULL bytes, bad shards, sizes out of range, an attention
 * argument the library rejects, a workspace too small or misaligned, a NULL communicator) return
 * the right status, and dsa_last_error() names dsa_cp and the bad argument with its value.
 * Last line: "N passed, M failed".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_problem.h"
#include "dsa_cp.h"

static int g_pass, g_fail;

static void check(int ok, const char *name, const char *detail) {
  if (ok) {
    g_pass++;
    printf("ok   %s\n", name);
  } else {
    g_fail++;
    printf("FAIL %s: %s\n", name, detail);
  }
}

/* ---------------------------------------------------------------------------------------------- */
/* --host: argument errors (no GPU, no communicator: every case fails before either is touched)    */

/* The call returned `want` and dsa_last_error() holds "dsa_cp" and every one of `needles`. */
static void expect_error(const char *name, dsa_status got, dsa_status want, const char *needle1, const char *needle2) {
  const char *msg = dsa_last_error();
  const char *const needles[3] = {"dsa_cp", needle1, needle2};
  int ok = got == want;
  for (int i = 0; i < 3 && ok; i++) ok = !needles[i] || strstr(msg, needles[i]) != NULL;
  if (ok) {
    g_pass++;
    printf("ok   %s  (%s)\n", name, msg);
  } else {
    g_fail++;
    printf("FAIL %s: %s, want %s; message \"%s\" must name dsa_cp%s%s%s%s\n", name, dsa_status_string(got),
           dsa_status_string(want), msg, needle1 ? ", " : "", needle1 ? needle1 : "", needle2 ? ", " : "",
           needle2 ? needle2 : "");
  }
}

/* Leaves a message in dsa_last_error() that is not dsa_cp's, so that each check sees the call's own. */
static void stale_error(void) { (void)dsa_topk_workspace_size(NULL, NULL); }

/* `call` (after stale_error) returns `want` with a message naming dsa_cp and the needles. */
#define EXPECT(name, call, want, needle1, needle2)              \
  do {                                                          \
    stale_error();                                              \
    const dsa_status st_ = (call);                              \
    expect_error((name), st_, (want), (needle1), (needle2));    \
  } while (0)

static void expect_ok(const char *name, dsa_status got, size_t bytes) {
  char detail[512];
  snprintf(detail, sizeof detail, "%s (%s), %zu bytes", dsa_status_string(got), dsa_last_error(), bytes);
  check(got == DSA_OK && bytes > 0, name, detail);
}

/* Fake device pointers, 256-byte aligned, never dereferenced: the checks only look at them. */
#define FAKE(i) ((void *)(uintptr_t)((uint64_t)(i) << 20))

/* A valid decode step of rank 0 of 2 (2 requests, 32 index heads, topk 512, 16 attention heads). */
static dsa_cp_decode_args valid_decode(void) {
  dsa_cp_decode_args a;
  memset(&a, 0, sizeof a);
  a.shard = (dsa_shard){2, 0, DSA_SHARD_ROUND_ROBIN, 0};
  a.query = (dsa_indexer_query){.q = FAKE(1), .q_dtype = DSA_DTYPE_BF16, .weights = FAKE(2),
                                .weights_dtype = DSA_DTYPE_F32, .weights_stride = 32, .num_heads = 32,
                                .head_dim = DSA_INDEX_HEAD_DIM, .softmax_scale = 0.015625f};
  a.index_cache = (dsa_index_k_cache){FAKE(3), 64, 64};
  a.seq_lens = FAKE(4);
  a.block_table = FAKE(5);
  a.block_table_stride = 32;
  a.max_blocks_per_req = 32;
  a.num_reqs = 2;
  a.q_len_per_req = 1;
  a.max_seq_len = 4096;
  a.topk = 512;
  a.q_attn = FAKE(6);
  a.num_heads = 16;
  a.kv_cache = FAKE(7);
  a.kv_format = DSA_KV_FP8_PACKED;
  a.kv_num_slots = 64 * 64;
  a.softmax_scale = 0.0625f;
  a.out = FAKE(8);
  return a;
}

/* A valid prefill step of rank 1 of 2 (100 tokens over 4000 workspace rows, 2000 of them local). */
static dsa_cp_prefill_args valid_prefill(void) {
  dsa_cp_prefill_args a;
  memset(&a, 0, sizeof a);
  a.shard = (dsa_shard){2, 1, DSA_SHARD_ROUND_ROBIN, 0};
  a.query = valid_decode().query;
  a.index_cache = (dsa_index_k_cache){FAKE(3), 64, 64};
  a.kv_workspace_slots = FAKE(4);
  a.num_local_rows = 2000;
  a.num_workspace_rows = 4000;
  a.row_starts = FAKE(5);
  a.row_ends = FAKE(9);
  a.num_tokens = 100;
  a.topk = 512;
  a.q_attn = FAKE(6);
  a.num_heads = 16;
  a.kv_cache = FAKE(7);
  a.kv_format = DSA_KV_FP8_PACKED;
  a.kv_num_slots = 64 * 64;
  a.softmax_scale = 0.0625f;
  a.out = FAKE(8);
  return a;
}

typedef struct {
  const char *name;
  dsa_status want;
  const char *needle1, *needle2;
  dsa_shard shard;    /* used when world_size != -1 */
  int field, value;   /* which size to set (see bad_decode / bad_prefill) and to what */
} bad_case;

enum { F_NONE, F_TOPK, F_NUM_REQS, F_Q_LEN, F_MAX_SEQ_LEN, F_PAGE_SIZE, F_BT_STRIDE, F_NUM_HEADS, F_NUM_TOKENS,
       F_WS_ROWS, F_LOCAL_ROWS, F_MAX_ROWS };
#define SHARD_OK {-1, 0, DSA_SHARD_ROUND_ROBIN, 0}

/* bad shards: both steps */
static const bad_case k_bad_shards[] = {
    {"world_size 0", DSA_ERR_INVALID_VALUE, "shard", "world_size 0", {0, 0, DSA_SHARD_ROUND_ROBIN, 0}, F_NONE, 0},
    {"world_size 9 (> DSA_MAX_CP_RANKS)", DSA_ERR_INVALID_VALUE, "shard", "world_size 9",
     {9, 0, DSA_SHARD_ROUND_ROBIN, 0}, F_NONE, 0},
    {"rank 2 of world_size 2", DSA_ERR_INVALID_VALUE, "shard", "rank 2", {2, 2, DSA_SHARD_ROUND_ROBIN, 0}, F_NONE, 0},
    {"rank -1", DSA_ERR_INVALID_VALUE, "shard", "rank -1", {2, -1, DSA_SHARD_ROUND_ROBIN, 0}, F_NONE, 0},
    {"layout 7", DSA_ERR_INVALID_VALUE, "shard", "layout 7", {2, 0, (dsa_shard_layout)7, 0}, F_NONE, 0},
    {"blocks of 0 positions", DSA_ERR_INVALID_VALUE, "shard", "block 0", {2, 0, DSA_SHARD_BLOCKS, 0}, F_NONE, 0},
    {"topk 0", DSA_ERR_INVALID_VALUE, "topk = 0", NULL, SHARD_OK, F_TOPK, 0},
    {"topk 2049 (> DSA_MAX_TOPK)", DSA_ERR_INVALID_VALUE, "topk = 2049", NULL, SHARD_OK, F_TOPK, 2049},
    {"attention num_heads 0 (the library's check, inside dsa_cp's message)", DSA_ERR_INVALID_VALUE,
     "dsa_sparse_mla_workspace_size", "num_heads = 0", SHARD_OK, F_NUM_HEADS, 0},
};
static const bad_case k_bad_decode[] = {
    {"num_reqs -1", DSA_ERR_INVALID_VALUE, "num_reqs -1", NULL, SHARD_OK, F_NUM_REQS, -1},
    {"q_len_per_req 0", DSA_ERR_INVALID_VALUE, "q_len_per_req 0", NULL, SHARD_OK, F_Q_LEN, 0},
    {"q_len_per_req 9 (> DSA_MAX_Q_LEN_PER_REQ)", DSA_ERR_INVALID_VALUE, "q_len_per_req 9", NULL, SHARD_OK, F_Q_LEN, 9},
    {"max_seq_len 0", DSA_ERR_INVALID_VALUE, "max_seq_len = 0", NULL, SHARD_OK, F_MAX_SEQ_LEN, 0},
    {"index_cache.page_size 0", DSA_ERR_INVALID_VALUE, "page_size 0", NULL, SHARD_OK, F_PAGE_SIZE, 0},
    {"block_table_stride 31 < max_blocks_per_req 32", DSA_ERR_INVALID_VALUE, "block_table_stride 31", NULL, SHARD_OK,
     F_BT_STRIDE, 31},
};
static const bad_case k_bad_prefill[] = {
    {"num_tokens -1", DSA_ERR_INVALID_VALUE, "num_tokens = -1", NULL, SHARD_OK, F_NUM_TOKENS, -1},
    {"num_workspace_rows -1", DSA_ERR_INVALID_VALUE, "num_workspace_rows -1", NULL, SHARD_OK, F_WS_ROWS, -1},
    {"num_local_rows -5", DSA_ERR_INVALID_VALUE, "num_local_rows -5", NULL, SHARD_OK, F_LOCAL_ROWS, -5},
    {"max_rows -1", DSA_ERR_INVALID_VALUE, "max_rows -1", NULL, SHARD_OK, F_MAX_ROWS, -1},
};

static dsa_cp_decode_args bad_decode(const bad_case *c) {
  dsa_cp_decode_args a = valid_decode();
  if (c->shard.world_size != -1) a.shard = c->shard;
  switch (c->field) {
    case F_TOPK: a.topk = c->value; break;
    case F_NUM_REQS: a.num_reqs = c->value; break;
    case F_Q_LEN: a.q_len_per_req = c->value; break;
    case F_MAX_SEQ_LEN: a.max_seq_len = c->value; break;
    case F_PAGE_SIZE: a.index_cache.page_size = c->value; break;
    case F_BT_STRIDE: a.block_table_stride = c->value; break;
    case F_NUM_HEADS: a.num_heads = c->value; break;
    default: break;
  }
  return a;
}

static dsa_cp_prefill_args bad_prefill(const bad_case *c) {
  dsa_cp_prefill_args a = valid_prefill();
  if (c->shard.world_size != -1) a.shard = c->shard;
  switch (c->field) {
    case F_TOPK: a.topk = c->value; break;
    case F_NUM_HEADS: a.num_heads = c->value; break;
    case F_NUM_TOKENS: a.num_tokens = c->value; break;
    case F_WS_ROWS: a.num_workspace_rows = c->value; break;
    case F_LOCAL_ROWS: a.num_local_rows = c->value; break;
    case F_MAX_ROWS: a.max_rows = c->value; break;
    default: break;
  }
  return a;
}

static int host_errors(void) {
  char name[256];
  size_t bytes = 0;
  /* the valid steps pass: each case below fails for its own argument */
  dsa_cp_decode_args d = valid_decode();
  size_t dbytes = 0, pbytes = 0;
  const dsa_status sd = dsa_cp_decode_workspace_size(&d, &dbytes);
  expect_ok("decode: valid args, workspace size", sd, dbytes);
  dsa_cp_prefill_args p = valid_prefill();
  const dsa_status sp = dsa_cp_prefill_workspace_size(&p, &pbytes);
  expect_ok("prefill: valid args, workspace size", sp, pbytes);

  EXPECT("decode workspace size: args NULL", dsa_cp_decode_workspace_size(NULL, &bytes), DSA_ERR_NULL_POINTER,
         "args is NULL", NULL);
  EXPECT("decode workspace size: bytes NULL", dsa_cp_decode_workspace_size(&d, NULL), DSA_ERR_NULL_POINTER,
         "bytes is NULL", NULL);
  EXPECT("prefill workspace size: args NULL", dsa_cp_prefill_workspace_size(NULL, &bytes), DSA_ERR_NULL_POINTER,
         "args is NULL", NULL);
  EXPECT("prefill workspace size: bytes NULL", dsa_cp_prefill_workspace_size(&p, NULL), DSA_ERR_NULL_POINTER,
         "bytes is NULL", NULL);
  EXPECT("dsa_cp_decode: args NULL", dsa_cp_decode(NULL, NULL, FAKE(10), dbytes, 0), DSA_ERR_NULL_POINTER,
         "args is NULL", NULL);
  EXPECT("dsa_cp_prefill: args NULL", dsa_cp_prefill(NULL, NULL, FAKE(10), pbytes, 0), DSA_ERR_NULL_POINTER,
         "args is NULL", NULL);

  for (int i = 0; i < (int)(sizeof k_bad_shards / sizeof k_bad_shards[0]); i++) {
    const bad_case *c = &k_bad_shards[i];
    d = bad_decode(c);
    p = bad_prefill(c);
    snprintf(name, sizeof name, "decode workspace size: %s", c->name);
    EXPECT(name, dsa_cp_decode_workspace_size(&d, &bytes), c->want, c->needle1, c->needle2);
    snprintf(name, sizeof name, "dsa_cp_decode: %s", c->name);
    EXPECT(name, dsa_cp_decode(&d, NULL, FAKE(10), dbytes, 0), c->want, c->needle1, c->needle2);
    snprintf(name, sizeof name, "prefill workspace size: %s", c->name);
    EXPECT(name, dsa_cp_prefill_workspace_size(&p, &bytes), c->want, c->needle1, c->needle2);
  }
  for (int i = 0; i < (int)(sizeof k_bad_decode / sizeof k_bad_decode[0]); i++) {
    const bad_case *c = &k_bad_decode[i];
    d = bad_decode(c);
    snprintf(name, sizeof name, "decode workspace size: %s", c->name);
    EXPECT(name, dsa_cp_decode_workspace_size(&d, &bytes), c->want, c->needle1, c->needle2);
    snprintf(name, sizeof name, "dsa_cp_decode: %s", c->name);
    EXPECT(name, dsa_cp_decode(&d, NULL, FAKE(10), dbytes, 0), c->want, c->needle1, c->needle2);
  }
  for (int i = 0; i < (int)(sizeof k_bad_prefill / sizeof k_bad_prefill[0]); i++) {
    const bad_case *c = &k_bad_prefill[i];
    p = bad_prefill(c);
    snprintf(name, sizeof name, "prefill workspace size: %s", c->name);
    EXPECT(name, dsa_cp_prefill_workspace_size(&p, &bytes), c->want, c->needle1, c->needle2);
    snprintf(name, sizeof name, "dsa_cp_prefill: %s", c->name);
    EXPECT(name, dsa_cp_prefill(&p, NULL, FAKE(10), pbytes, 0), c->want, c->needle1, c->needle2);
  }

  /* the workspace (checked before the communicator) */
  d = valid_decode();
  EXPECT("dsa_cp_decode: NULL workspace", dsa_cp_decode(&d, NULL, NULL, 0, 0), DSA_ERR_WORKSPACE_TOO_SMALL,
         "workspace", "need");
  EXPECT("dsa_cp_decode: workspace one byte short", dsa_cp_decode(&d, NULL, FAKE(10), dbytes - 1, 0),
         DSA_ERR_WORKSPACE_TOO_SMALL, "workspace", "need");
  EXPECT("dsa_cp_decode: workspace not 256-byte aligned",
         dsa_cp_decode(&d, NULL, (char *)FAKE(10) + 16, dbytes + 256, 0), DSA_ERR_WORKSPACE_TOO_SMALL,
         "workspace", "256-byte aligned");
  p = valid_prefill();
  EXPECT("dsa_cp_prefill: workspace one byte short", dsa_cp_prefill(&p, NULL, FAKE(10), pbytes - 1, 0),
         DSA_ERR_WORKSPACE_TOO_SMALL, "workspace", "need");
  /* a NULL communicator: NCCL's own check, reported through dsa_cp */
  EXPECT("dsa_cp_decode: NULL communicator", dsa_cp_decode(&d, NULL, FAKE(10), dbytes, 0), DSA_ERR_CUDA,
         "ncclCommCount", NULL);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* W GPUs                                                                                          */

typedef struct {
  const char *name;
  dsa_shard_layout layout;
  int num_reqs, q_len, prefill_tokens;
  int32_t lens[8];
  int index_heads, heads, topk, q_fp8, ties;
} nccl_case;

static const nccl_case k_cases[] = {
    {"round robin, 1 request x 300000, fp8 q", DSA_SHARD_ROUND_ROBIN, 1, 1, 0, {300000}, 32, 16, 2048, 1, 0},
    {"round robin, MTP 2, 3 requests (70000, 2049, 2048), 64 heads", DSA_SHARD_ROUND_ROBIN, 3, 2, 0,
     {70000, 2049, 2048}, 32, 64, 2048, 1, 0},
    {"blocks, 4 requests (100000, 5000, 1, 0), bf16 q", DSA_SHARD_BLOCKS, 4, 1, 0, {100000, 5000, 1, 0}, 32, 16, 2048,
     0, 0},
    {"round robin, 2 requests of equal scores (9000, 3000), topk 512", DSA_SHARD_ROUND_ROBIN, 2, 1, 0, {9000, 3000},
     32, 16, 512, 1, 1},
    {"round robin, MTP 8, 2 requests (5000, 2052): tokens around topk", DSA_SHARD_ROUND_ROBIN, 2, 8, 0, {5000, 2052},
     32, 16, 2048, 1, 0},
    {"blocks, MTP 3, 2 requests (60000, 7), 64 index heads", DSA_SHARD_BLOCKS, 2, 3, 0, {60000, 7}, 64, 16, 2048, 1, 0},
    {"prefill round robin, 300 tokens at the end of 150000 rows (two chunks of local rows)", DSA_SHARD_ROUND_ROBIN, 1,
     1, 300, {150000}, 32, 16, 2048, 1, 0},
    {"prefill blocks, 70 tokens at the end of 3000 rows (L around topk), bf16 q, 64 heads", DSA_SHARD_BLOCKS, 1, 1, 70,
     {3000}, 32, 64, 2048, 0, 0},
};

static void run_case(const nccl_case *c, int W, ncclComm_t *comms) {
  const cp_spec sp = {c->num_reqs,    c->q_len, c->prefill_tokens, c->lens, c->index_heads,
                      c->heads,       c->topk,  c->q_fp8,          c->ties, 7001};
  const int T = c->prefill_tokens > 0 ? c->prefill_tokens : c->num_reqs * c->q_len, K = c->topk, H = c->heads;
  const size_t no = (size_t)T * H * 512;
  char name[256], detail[256];
  /* one GPU */
  int32_t *pos1 = malloc((size_t)T * K * 4), *len1 = malloc((size_t)T * 4);
  uint16_t *out1 = malloc(no * 2);
  float *lse1 = malloc((size_t)T * H * 4);
  cp_data d;
  void *d_out;
  float *d_lse;
  int ok = cp_build(&sp, NULL, 0, &d) == 0 && cudaMalloc(&d_out, no * 2 + 16) == cudaSuccess &&
           cudaMalloc((void **)&d_lse, (size_t)T * H * 4 + 16) == cudaSuccess &&
           cp_one_gpu(&sp, &d, 0, 0, 0, NULL, pos1, len1, d_out, d_lse) == 0 &&
           cudaMemcpy(out1, d_out, no * 2, cudaMemcpyDeviceToHost) == cudaSuccess &&
           cudaMemcpy(lse1, d_lse, (size_t)T * H * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
  snprintf(name, sizeof name, "%s: one GPU", c->name);
  check(ok, name, "build or run failed (stderr)");
  cudaSetDevice(0);
  cudaFree(d_out);
  cudaFree(d_lse);
  cp_free(&d);
  if (!ok) return;
  /* W ranks */
  cp_run run;
  memset(&run, 0, sizeof run);
  run.sp = &sp;
  run.world_size = W;
  run.layout = c->layout;
  int maxL = 1;
  for (int r = 0; r < c->num_reqs; r++) maxL = c->lens[r] > maxL ? c->lens[r] : maxL;
  run.block = (maxL + W - 1) / W;
  run.iters = 0;
  run.comms = comms;
  for (int r = 0; r < W; r++) {
    run.positions[r] = malloc((size_t)T * K * 4);
    run.lens[r] = malloc((size_t)T * 4);
    run.out[r] = malloc(no * 2);
    run.lse[r] = malloc((size_t)T * H * 4);
  }
  ok = cp_run_ranks(&run) == 0;
  snprintf(name, sizeof name, "%s: %d ranks ran", c->name, W);
  check(ok, name, "a rank failed (stderr)");
  if (ok) {
    for (int r = 0; r < W; r++) {
      int bad = -1;
      for (int t = 0; t < T && bad < 0; t++) {
        if (run.lens[r][t] != len1[t]) bad = t;
        for (int i = 0; i < K && bad < 0; i++)
          if (run.positions[r][(size_t)t * K + i] != pos1[(size_t)t * K + i]) bad = t;
      }
      snprintf(name, sizeof name, "%s, W %d: rank %d top-k = one GPU's (%d tokens)", c->name, W, r, T);
      snprintf(detail, sizeof detail, "token %d differs (lens %d vs %d)", bad, bad >= 0 ? run.lens[r][bad] : 0,
               bad >= 0 ? len1[bad] : 0);
      check(bad < 0, name, detail);
      const double worst = cp_worst_rel_l2_bf16(run.out[r], out1, T, (size_t)H * 512);
      double worst_lse = 0;
      for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
          const double x = run.lse[r][t * H + h], y = lse1[t * H + h];
          if (isinf(y) || isinf(x)) {
            if (x != y) worst_lse = INFINITY;
          } else {
            worst_lse = fmax(worst_lse, fabs(x - y) / fmax(1, fabs(y)));
          }
        }
      }
      snprintf(name, sizeof name, "%s, W %d: rank %d attention = one GPU's (rel L2 %.2e, lse %.2e)", c->name, W, r,
               worst, worst_lse);
      check(worst <= 1e-2 && worst_lse <= 1e-3, name, "beyond 1e-2 / 1e-3");
      if (r > 0) {
        const int same = !memcmp(run.out[r], run.out[0], no * 2) && !memcmp(run.lse[r], run.lse[0], (size_t)T * H * 4);
        snprintf(name, sizeof name, "%s, W %d: rank %d out and lse bitwise rank 0's", c->name, W, r);
        check(same, name, "the ranks disagree");
      }
    }
  }
  for (int r = 0; r < W; r++) {
    free(run.positions[r]);
    free(run.lens[r]);
    free(run.out[r]);
    free(run.lse[r]);
  }
  free(pos1);
  free(len1);
  free(out1);
  free(lse1);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--host") == 0) return host_errors();
  if (argc > 1) {
    fprintf(stderr, "usage: test_cp_nccl [--host]\n");
    return 2;
  }
  setenv("NCCL_NVLS_ENABLE", "0", 1); /* NVLink multicast stays off on shared hosts (DESIGN.md §9) */
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  int sm90 = 0;
  for (int i = 0; i < n; i++) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess && p.major == 9 && p.minor == 0) sm90++;
  }
  if (sm90 < 2) {
    printf("SKIP test_cp_nccl: needs 2 sm_90 GPUs, found %d (of %d CUDA devices)\n", sm90, n);
    return 77;
  }
  /* the world sizes: DSA_CP_WORLDS (comma separated), else 2, 4, 8 — each only where the host has
   * that many sm_90 GPUs (assumed to be devices 0..W-1) */
  int worlds[8], nw = 0;
  const char *env = getenv("DSA_CP_WORLDS");
  if (env && *env) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *t = strtok(buf, ","); t && nw < 8; t = strtok(NULL, ",")) worlds[nw++] = atoi(t);
  } else {
    worlds[nw++] = 2;
    worlds[nw++] = 4;
    worlds[nw++] = 8;
  }
  for (int wi = 0; wi < nw; wi++) {
    const int W = worlds[wi];
    if (W < 2 || W > DSA_MAX_CP_RANKS) {
      printf("FAIL DSA_CP_WORLDS: %d is not in 2..%d\n", W, DSA_MAX_CP_RANKS);
      g_fail++;
      continue;
    }
    if (W > sm90) {
      printf("skip W = %d: %d sm_90 GPUs here\n", W, sm90);
      continue;
    }
    int devs[DSA_MAX_CP_RANKS];
    ncclComm_t comms[DSA_MAX_CP_RANKS];
    for (int i = 0; i < W; i++) devs[i] = i;
    ncclResult_t nr = ncclCommInitAll(comms, W, devs);
    if (nr != ncclSuccess) {
      printf("FAIL ncclCommInitAll(%d): %s\n", W, ncclGetErrorString(nr));
      g_fail++;
      continue;
    }
    printf("== W = %d\n", W);
    for (int i = 0; i < (int)(sizeof k_cases / sizeof k_cases[0]); i++) run_case(&k_cases[i], W, comms);
    for (int i = 0; i < W; i++) ncclCommDestroy(comms[i]);
  }
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
