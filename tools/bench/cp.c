/*
 * cp.c — `dsa-bench cp`: one decode step (indexer + top-k + attention) over W GPUs through
 * NCCL (dsa_cp.h) against the same step on one GPU, GLM shapes (32 x 128 index heads, FP8 q, topk
 * 2048, page 64; attention 16 heads, packed FP8 KV). Per row: the one-GPU time, the W-GPU time (rank
 * 0's median; the slowest rank's beside it) and its six stages (DSA_CP_STAGES), medians of --iters
 * plain launches after 3 warm-ups (no CUDA graph on either side unless --graph). --check compares
 * every rank's top-k with the one GPU's (identical) and its attention output (relative L2 <= 1e-2).
 *
 *   dsa-bench cp [--gpus W] [--sizes 128k,1M,4M] [--batches 1,8] [--mtp N] [--prefill N]
 *                [--layout rr|blocks] [--iters N] [--graph] [--check] [--json FILE]
 * --graph: both sides replay one captured step as a CUDA graph (NCCL's kernels captured with it on
 * every rank), as engines run decode; only totals are timed then (the stage columns read 0).
 * --prefill N: prefill rows instead (dsa_cp_prefill against dsa_indexer_prefill): N query tokens at
 * the end of an S-row context, token j seeing S - N + 1 + j rows.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cp_problem.h"
#include "dsa_cp.h"

#define MAXN 16

static int64_t parse_size(const char *s) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end && (*end == 'k' || *end == 'K')) v *= 1024;
  if (end && (*end == 'm' || *end == 'M')) v *= 1024 * 1024;
  return (int64_t)v;
}

static int parse_sizes(const char *arg, int64_t *out) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", arg);
  int n = 0;
  for (char *t = strtok(buf, ","); t && n < MAXN; t = strtok(NULL, ",")) out[n++] = parse_size(t);
  return n;
}

static const char *stage_names[DSA_CP_STAGES] = {"local", "xchg1", "merge", "attn", "xchg2", "comb"};

int cp_main(int argc, char **argv) {
  int W = 2, mtp = 1, iters = 20, check = 0, nsizes = 3, nbatches = 2, prefill = 0, graph = 0;
  int64_t sizes[MAXN] = {131072, 1 << 20, 4 << 20}, batches[MAXN] = {1, 8};
  dsa_shard_layout layout = DSA_SHARD_ROUND_ROBIN;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--gpus") && v) W = atoi(argv[++i]);
    else if (!strcmp(a, "--sizes") && v) nsizes = parse_sizes(argv[++i], sizes);
    else if (!strcmp(a, "--batches") && v) nbatches = parse_sizes(argv[++i], batches);
    else if (!strcmp(a, "--mtp") && v) mtp = atoi(argv[++i]);
    else if (!strcmp(a, "--prefill") && v) prefill = atoi(argv[++i]);
    else if (!strcmp(a, "--iters") && v) iters = atoi(argv[++i]);
    else if (!strcmp(a, "--layout") && v) layout = !strcmp(argv[++i], "blocks") ? DSA_SHARD_BLOCKS : DSA_SHARD_ROUND_ROBIN;
    else if (!strcmp(a, "--check")) check = 1;
    else if (!strcmp(a, "--graph")) graph = 1;
    else if (!strcmp(a, "--json") && v) json = argv[++i];
    else {
      fprintf(stderr, "usage: dsa-bench cp [--gpus W] [--sizes LIST] [--batches LIST] [--mtp N] "
                      "[--prefill N] [--layout rr|blocks] [--iters N] [--graph] [--check] [--json FILE]\n");
      return 2;
    }
  }
  if (!getenv("NCCL_NVLS_ENABLE")) setenv("NCCL_NVLS_ENABLE", "0", 1); /* NVLink multicast off (DESIGN.md §9) */
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < W || W < 2 || W > DSA_MAX_CP_RANKS || mtp < 1 ||
      mtp > DSA_MAX_Q_LEN_PER_REQ || iters < 1 || prefill < 0) {
    fprintf(stderr, "dsa-bench cp: --gpus %d needs that many GPUs (found %d), 2..%d; --mtp 1..%d; --iters >= 1\n", W,
            ndev, DSA_MAX_CP_RANKS, DSA_MAX_Q_LEN_PER_REQ);
    return 2;
  }
  int devs[DSA_MAX_CP_RANKS];
  for (int i = 0; i < W; i++) devs[i] = i;
  ncclComm_t comms[DSA_MAX_CP_RANKS];
  ncclResult_t nr = ncclCommInitAll(comms, W, devs);
  if (nr != ncclSuccess) {
    fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetErrorString(nr));
    return 1;
  }
  struct cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
    fprintf(stderr, "cannot write %s\n", json);
    return 1;
  }
  char date[32];
  const time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  if (jf)
    fprintf(jf, "{\n  \"bench\": \"cp\",\n  \"device\": \"%s\",\n  \"gpus\": %d,\n  \"nccl\": %d,\n  \"date\": \"%s\",\n"
                "  \"options\": {\"layout\": \"%s\", \"mtp\": %d, \"prefill_tokens\": %d, \"graph\": %s, \"iters\": %d, \"check\": %s, \"index_heads\": 32, "
                "\"heads\": 16, \"topk\": 2048, \"q\": \"fp8\", \"kv\": \"fp8\"},\n  \"rows\": [",
            prop.name, W, nccl_version, date, layout == DSA_SHARD_BLOCKS ? "blocks" : "round robin", mtp, prefill,
            graph ? "true" : "false", iters,
            check ? "true" : "false");
  printf("dsa-bench cp on %d x %s (NCCL %d, NCCL_NVLS_ENABLE=%s): %s, %s shards, MTP %d, median of %d %s\n", W,
         prop.name, nccl_version, getenv("NCCL_NVLS_ENABLE"), prefill ? "prefill" : "decode",
         layout == DSA_SHARD_BLOCKS ? "block" : "round-robin", mtp, iters, graph ? "graph replays" : "plain launches");
  if (prefill) nbatches = 1; /* one sequence */
  printf("%8s %3s %9s %9s %9s %6s |", "S", "B", "1gpu_ms", "cp_ms", "slowest", "ratio");
  for (int s = 0; s < DSA_CP_STAGES; s++) printf(" %7s", stage_names[s]);
  printf(" %8s %s\n", "ws_MiB", "check");
  int rc = 0, first = 1;
  for (int bi = 0; bi < nbatches; bi++)
    for (int si = 0; si < nsizes; si++) {
      const int B = prefill ? 1 : (int)batches[bi], T = prefill ? prefill : B * mtp, K = 2048, H = 16;
      int32_t lens[64];
      if (B > 64 || (prefill && sizes[si] < prefill)) continue;
      for (int r = 0; r < B; r++) lens[r] = (int32_t)sizes[si];
      const cp_spec sp = {B, prefill ? 1 : mtp, prefill, lens, 32, H, K, 1, 0, 4242};
      /* one GPU */
      int32_t *pos1 = malloc((size_t)T * K * 4), *len1 = malloc((size_t)T * 4);
      uint16_t *out1 = malloc((size_t)T * H * 512 * 2);
      double one_ms = 0;
      cp_data d;
      void *d_out = NULL;
      float *d_lse = NULL;
      int ok = cp_build(&sp, NULL, 0, &d) == 0 && cudaMalloc(&d_out, (size_t)T * H * 512 * 2 + 16) == cudaSuccess &&
               cudaMalloc((void **)&d_lse, (size_t)T * H * 4 + 16) == cudaSuccess &&
               cp_one_gpu(&sp, &d, 0, iters, graph, &one_ms, pos1, len1, d_out, d_lse) == 0 &&
               cudaMemcpy(out1, d_out, (size_t)T * H * 512 * 2, cudaMemcpyDeviceToHost) == cudaSuccess;
      cudaSetDevice(0);
      cudaFree(d_out);
      cudaFree(d_lse);
      cp_free(&d);
      /* W GPUs */
      cp_run run;
      memset(&run, 0, sizeof run);
      run.sp = &sp;
      run.world_size = W;
      run.layout = layout;
      run.block = (sizes[si] + W - 1) / W;
      run.iters = iters;
      run.graph = graph;
      run.comms = comms;
      for (int r = 0; r < W && check; r++) {
        run.positions[r] = malloc((size_t)T * K * 4);
        run.lens[r] = malloc((size_t)T * 4);
        run.out[r] = malloc((size_t)T * H * 512 * 2);
      }
      ok = ok && cp_run_ranks(&run) == 0;
      const char *verdict = ok ? (check ? "ok" : "-") : "FAILED";
      double worst = 0;
      if (ok && check) {
        for (int r = 0; r < W; r++) {
          if (memcmp(run.positions[r], pos1, (size_t)T * K * 4) || memcmp(run.lens[r], len1, (size_t)T * 4))
            verdict = "TOPK-DIFFERS";
          worst = fmax(worst, cp_worst_rel_l2_bf16(run.out[r], out1, T, (size_t)H * 512));
        }
        if (worst > 1e-2 && !strcmp(verdict, "ok")) verdict = "ATTN-DIFFERS";
      }
      if (strcmp(verdict, "ok") && strcmp(verdict, "-")) rc = 1;
      printf("%8lld %3d %9.4f %9.4f %9.4f %6.2f |", (long long)sizes[si], B, one_ms, run.total_ms,
             run.total_ms_slowest, one_ms > 0 ? run.total_ms / one_ms : 0);
      for (int s = 0; s < DSA_CP_STAGES; s++) printf(" %7.4f", run.stage_ms[s]);
      printf(" %8.1f %s", run.workspace_bytes / 1048576.0, verdict);
      if (check) printf(" (attn rel L2 %.1e)", worst);
      printf("\n");
      fflush(stdout);
      if (jf) {
        fprintf(jf, "%s\n    {\"S\": %lld, \"batch\": %d, \"mtp\": %d, \"one_gpu_ms\": %.5f, \"cp_ms\": %.5f, "
                    "\"cp_slowest_rank_ms\": %.5f, \"ratio\": %.4f, \"prefill_tokens\": %d, \"stages_ms\": {",
                first ? "" : ",", (long long)sizes[si], B, mtp, one_ms, run.total_ms, run.total_ms_slowest,
                one_ms > 0 ? run.total_ms / one_ms : 0, prefill);
        for (int s = 0; s < DSA_CP_STAGES; s++)
          fprintf(jf, "%s\"%s\": %.5f", s ? ", " : "", stage_names[s], run.stage_ms[s]);
        fprintf(jf, "}, \"workspace_bytes\": %lld, \"check\": \"%s\", \"attn_rel_l2\": %.3g}",
                (long long)run.workspace_bytes, verdict, worst);
        first = 0;
      }
      for (int r = 0; r < W; r++) {
        free(run.positions[r]);
        free(run.lens[r]);
        free(run.out[r]);
      }
      free(pos1);
      free(len1);
      free(out1);
    }
  if (jf) {
    fprintf(jf, "\n  ]\n}\n");
    fclose(jf);
  }
  for (int i = 0; i < W; i++) ncclCommDestroy(comms[i]);
  return rc;
}
