/*
 * merge.c — `dsa-bench merge`: context parallelism's merge (dsa_topk_merge) alone on one GPU, over
 * simulated ranks: per token W lists of k_in = 2048 (score, global position) candidates, as W ranks
 * of a round-robin shard hand them over (rank r's positions g = local * W + r, ascending, as
 * dsa_cp_candidates keeps a rank's top-k; scores uniform in [0, 1)), merged to the exact top 2048.
 * Each kernel of the merge (DSA_KERNEL's merge: select, runs, tree) at each (W, tokens): CUDA-graph
 * replays, medians, hot L2 (timing.c); --check compares every row's output with the CPU reference
 * (dsa_ref_topk_merge) before it is timed.
 *
 *   dsa-bench merge [--lists 2,4,8] [--tokens 1,64,4096] [--kernels select,runs,tree] [--iters N]
 *                   [--check] [--json FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "dsa_ref.h"
#include "host/choose.h" /* dsa_choose_override: each kernel in one process */
#include "rng.h"

#define MERGE_K 2048
#define MERGE_MAX 16

/* W lists of K candidates for each of T tokens, [W, T, K] as the all-gather lays them out. */
static void make_lists(int W, int T, uint64_t seed, float *sc, int32_t *id) {
  for (int w = 0; w < W; w++)
    for (int t = 0; t < T; t++) {
      dsa_rng r = dsa_rng_make(seed, (uint64_t)w * 65536 + (uint64_t)t);
      const size_t at = ((size_t)w * T + t) * MERGE_K;
      for (int j = 0; j < MERGE_K; j++) {
        const int64_t local = 4 * (int64_t)j + (int64_t)(dsa_rng_next(&r) % 4); /* ascending, distinct */
        id[at + j] = (int32_t)(local * W + w);
        sc[at + j] = (float)dsa_rng_unit(&r);
      }
    }
}

int merge_main(int argc, char **argv) {
  int lists[MERGE_MAX] = {2, 4, 8}, tokens[MERGE_MAX] = {1, 64, 4096}, nl = 3, nt = 3, iters = 100, check = 0;
  const char *kernels = "select,runs,tree", *json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--lists") && v) nl = parse_int_list(argv[++i], a, lists, MERGE_MAX, 1, DSA_MAX_MERGE_CANDIDATES / MERGE_K);
    else if (!strcmp(a, "--tokens") && v) nt = parse_int_list(argv[++i], a, tokens, MERGE_MAX, 1, 65536);
    else if (!strcmp(a, "--kernels") && v) kernels = argv[++i];
    else if (!strcmp(a, "--iters") && v) iters = parse_int(argv[++i], 1, 100000, a);
    else if (!strcmp(a, "--check")) check = 1;
    else if (!strcmp(a, "--json") && v) json = argv[++i];
    else {
      fprintf(stderr, "usage: dsa-bench merge [--lists 2,4,8] [--tokens 1,64,4096] [--kernels select,runs,tree] "
                      "[--iters N] [--check] [--json FILE]\n");
      return 2;
    }
  }
  static bench b; /* what time_stage uses: options, stream, events, gate */
  b.o.iters = iters;
  b.o.warmup = 20;
  b.o.gate = 1;
  require_sm90(0, b.dev_name, sizeof b.dev_name);
  CK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  for (int i = 0; i < 2 * TIME_CHUNK; i++) CK(cudaEventCreate(&b.ev[i]));

  char names[128];
  snprintf(names, sizeof names, "%s", kernels);
  const char *kn[4];
  int nk = 0;
  for (char *t = strtok(names, ","); t && nk < 4; t = strtok(NULL, ",")) kn[nk++] = t;

  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) die("cannot write %s", json);
  char date[32];
  const time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  if (jf)
    fprintf(jf, "{\n  \"bench\": \"merge\",\n  \"device\": \"%s\",\n  \"date\": \"%s\",\n  \"options\": {\"k_in\": %d, "
                "\"topk\": %d, \"iters\": %d, \"check\": %s, \"timing\": \"graph replays, hot\"},\n  \"rows\": [",
            b.dev_name, date, MERGE_K, MERGE_K, iters, check ? "true" : "false");
  printf("dsa-bench merge on %s: W lists x %d candidates a token -> top %d, median of %d graph replays (hot)\n",
         b.dev_name, MERGE_K, MERGE_K, iters);
  printf("%8s %3s %7s %11s %10s %s\n", "kernel", "W", "tokens", "candidates", "us", "check");
  int failed = 0, first = 1;
  for (int li = 0; li < nl; li++)
    for (int ti = 0; ti < nt; ti++) {
      const int W = lists[li], T = tokens[ti];
      const size_t n = (size_t)W * T * MERGE_K, no = (size_t)T * MERGE_K;
      float *h_sc = xmalloc(n * 4);
      int32_t *h_id = xmalloc(n * 4), *h_out = xmalloc(no * 4), *h_len = xmalloc((size_t)T * 4);
      int32_t *ref_out = xmalloc(no * 4), *ref_len = xmalloc((size_t)T * 4);
      make_lists(W, T, 0x6d657267ull + (uint64_t)W, h_sc, h_id);
      float *d_sc = dmalloc(n * 4);
      int32_t *d_id = dmalloc(n * 4), *d_out = dmalloc(no * 4), *d_len = dmalloc((size_t)T * 4);
      CK(cudaMemcpy(d_sc, h_sc, n * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(d_id, h_id, n * 4, cudaMemcpyHostToDevice));
      dsa_topk_merge_args ma = {h_sc, h_id, W, T, MERGE_K, MERGE_K, ref_out, ref_len};
      if (check) dsa_ref_topk_merge(&ma);
      ma = (dsa_topk_merge_args){d_sc, d_id, W, T, MERGE_K, MERGE_K, d_out, d_len};
      for (int k = 0; k < nk; k++) {
        char spec[64];
        snprintf(spec, sizeof spec, "merge:%s", kn[k]);
        dsa_choose_override(spec);
        CK(cudaMemsetAsync(d_out, 0x55, no * 4, b.stream));
        CK(cudaMemsetAsync(d_len, 0x55, (size_t)T * 4, b.stream));
        const stage s = {ST_MERGE, &ma, NULL, 0};
        stage_run(&s, b.stream);
        CK(cudaStreamSynchronize(b.stream));
        const char *verdict = "-";
        if (check) {
          CK(cudaMemcpy(h_out, d_out, no * 4, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(h_len, d_len, (size_t)T * 4, cudaMemcpyDeviceToHost));
          verdict = memcmp(h_out, ref_out, no * 4) || memcmp(h_len, ref_len, (size_t)T * 4) ? "DIFFERS" : "ok";
          failed += verdict[0] == 'D';
        }
        char mode = 0;
        int gate_timeouts = 0;
        const double us = 1e3 * time_stage(&b, &s, 1, 0, &mode, &gate_timeouts);
        printf("%8s %3d %7d %11zu %10.2f %s%s\n", kn[k], W, T, (size_t)W * MERGE_K, us, verdict,
               mode == 'g' ? "" : " (plain launches)");
        if (jf) {
          fprintf(jf, "%s\n    {\"kernel\": \"%s\", \"lists\": %d, \"tokens\": %d, \"candidates\": %d, \"us\": %.3f, "
                      "\"timing\": \"%c\", \"check\": \"%s\"}",
                  first ? "" : ",", kn[k], W, T, W * MERGE_K, us, mode, verdict);
          first = 0;
        }
      }
      dsa_choose_override(NULL);
      CK(cudaFree(d_sc));
      CK(cudaFree(d_id));
      CK(cudaFree(d_out));
      CK(cudaFree(d_len));
      free(h_sc);
      free(h_id);
      free(h_out);
      free(h_len);
      free(ref_out);
      free(ref_len);
    }
  if (jf) {
    fprintf(jf, "\n  ]\n}\n");
    fclose(jf);
    printf("wrote %s\n", json);
  }
  CK(cudaStreamDestroy(b.stream));
  if (failed) fprintf(stderr, "dsa-bench merge: %d row(s) differ from the reference\n", failed);
  return failed ? 1 : 0;
}
