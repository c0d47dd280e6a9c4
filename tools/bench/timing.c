/*
 * timing.c — stages and their timing: a stage is one library call with its arguments and
 * workspace; time_stage captures it (or its --cold replicas) into CUDA graphs, replays them as
 * warm-up, then times every replay with its own pair of events, TIME_CHUNK replays at a time held
 * behind a gate (a host function that keeps the stream waiting until the batch is queued), and
 * returns the median. Plain launches where capture fails.
 */
#include <stdlib.h>

#include "bench.h"

/* The attention stage over args m (which must outlive it): its workspace sized and held in the pool. */
stage attn_stage(bench *b, const dsa_sparse_mla_args *m) {
  size_t ws = 0;
  DSA_CK(dsa_sparse_mla_workspace_size(m, &ws));
  ensure_ws(&b->d_ws_attn, &b->ws_attn_cap, ws);
  const stage s = {ST_ATTN, m, b->d_ws_attn, ws};
  return s;
}

static dsa_status stage_call(const stage *s, cudaStream_t st) {
  switch (s->kind) {
  case ST_DEC_SCORES: return dsa_indexer_decode_scores(s->args, st);
  case ST_DEC_INDEXER: return dsa_indexer_decode(s->args, s->ws, s->ws_bytes, st);
  case ST_PRE_SCORES: return dsa_indexer_prefill_scores(s->args, st);
  case ST_PRE_INDEXER: return dsa_indexer_prefill(s->args, s->ws, s->ws_bytes, st);
  case ST_ATTN: return dsa_sparse_mla(s->args, s->ws, s->ws_bytes, st);
  case ST_MERGE: return dsa_topk_merge(s->args, st);
  }
  return DSA_ERR_INVALID_VALUE;
}

static const char *stage_name(stage_kind k) {
  switch (k) {
  case ST_DEC_SCORES: return "dsa_indexer_decode_scores";
  case ST_DEC_INDEXER: return "dsa_indexer_decode";
  case ST_PRE_SCORES: return "dsa_indexer_prefill_scores";
  case ST_PRE_INDEXER: return "dsa_indexer_prefill";
  case ST_ATTN: return "dsa_sparse_mla";
  case ST_MERGE: return "dsa_topk_merge";
  }
  return "?";
}

void stage_run(const stage *s, cudaStream_t st) {
  dsa_status ds = stage_call(s, st);
  if (ds != DSA_OK)
    die("%s: %s: %s", stage_name(s->kind), dsa_status_string(ds), dsa_last_error());
}

/* Host function queued ahead of a batch of timed replays: holds the stream until the host has
 * queued the whole batch (or GATE_TIMEOUT_S passes). It makes no CUDA call. */
static void CUDART_CB gate_wait(void *p) {
  stream_gate *g = (stream_gate *)p;
  double t0 = now_s();
  while (!atomic_load_explicit(&g->open, memory_order_acquire)) {
    if (now_s() - t0 > GATE_TIMEOUT_S) {
      atomic_store(&g->timed_out, 1);
      return;
    }
  }
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median time (ms) of one call of the stage: graph replays, or plain launches if capture fails.
 * s: K replicas of the stage (--cold: the replays rotate over them; K = 1 otherwise); flush: write
 * the 256 MB buffer before each replay (--cold where too few replicas fit). *mode becomes 'g' or
 * 'p'; *gate_timeouts counts batches whose gate opened by timeout. */
double time_stage(bench *b, const stage *s, int K, int flush, char *mode, int *gate_timeouts) {
  const options *o = &b->o;
  cudaStream_t st = b->stream;
  cudaGraph_t *graph = xmalloc(sizeof(cudaGraph_t) * (size_t)K);
  cudaGraphExec_t *exec = xmalloc(sizeof(cudaGraphExec_t) * (size_t)K);
  char why[320] = "";
  int ok = 1;
  for (int j = 0; j < K; j++) {
    graph[j] = NULL;
    exec[j] = NULL;
  }
  for (int j = 0; j < K && ok; j++) {
    cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
      snprintf(why, sizeof why, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
      ok = 0;
      break;
    }
    dsa_status ds = stage_call(&s[j], st);
    if (ds != DSA_OK) snprintf(why, sizeof why, "%s: %s", dsa_status_string(ds), dsa_last_error());
    cudaError_t e2 = cudaStreamEndCapture(st, &graph[j]);
    if (ds != DSA_OK && ds != DSA_ERR_CUDA) die("%s under capture: %s", stage_name(s[j].kind), why);
    if (ds == DSA_OK && e2 != cudaSuccess) snprintf(why, sizeof why, "cudaStreamEndCapture: %s", cudaGetErrorString(e2));
    if (ds == DSA_OK && e2 == cudaSuccess) {
      e = cudaGraphInstantiate(&exec[j], graph[j], 0);
      if (e != cudaSuccess) {
        snprintf(why, sizeof why, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
        exec[j] = NULL;
      }
    }
    if (!exec[j]) ok = 0;
  }
  if (!ok) {
    (void)cudaGetLastError(); /* capture errors are not sticky; clear the last-error slot */
    printf("  note: %s: CUDA graph capture failed (%s); timing plain launches\n", stage_name(s[0].kind), why);
  }
  *mode = ok ? 'g' : 'p';
  int rep_i = 0;
#define RUN_REPLICA()                                   \
  do {                                                  \
    if (ok)                                             \
      CK(cudaGraphLaunch(exec[rep_i], st));             \
    else                                                \
      stage_run(&s[rep_i], st);                         \
    rep_i = rep_i + 1 == K ? 0 : rep_i + 1;             \
  } while (0)

  for (int i = 0; i < o->warmup || i < K; i++) RUN_REPLICA();
  CK(cudaStreamSynchronize(st));

  float *ms = xmalloc(sizeof(float) * (size_t)o->iters);
  for (int done = 0; done < o->iters;) {
    int k = (int)imin64(TIME_CHUNK, o->iters - done);
    if (o->gate) {
      atomic_store(&b->gate.open, 0);
      atomic_store(&b->gate.timed_out, 0);
      CK(cudaLaunchHostFunc(st, gate_wait, &b->gate));
    }
    for (int i = 0; i < k; i++) {
      if (flush) CK(cudaMemsetAsync(b->d_flush, i & 0xFF, COLD_FLUSH_BYTES, st));
      CK(cudaEventRecord(b->ev[2 * i], st));
      RUN_REPLICA();
      CK(cudaEventRecord(b->ev[2 * i + 1], st));
    }
    if (o->gate) atomic_store_explicit(&b->gate.open, 1, memory_order_release);
    CK(cudaStreamSynchronize(st));
    if (o->gate && atomic_load(&b->gate.timed_out)) (*gate_timeouts)++;
    for (int i = 0; i < k; i++) CK(cudaEventElapsedTime(&ms[done + i], b->ev[2 * i], b->ev[2 * i + 1]));
    done += k;
  }
#undef RUN_REPLICA
  qsort(ms, (size_t)o->iters, sizeof(float), cmp_float);
  double med = o->iters % 2 ? ms[o->iters / 2] : 0.5 * (ms[o->iters / 2 - 1] + ms[o->iters / 2]);
  free(ms);
  for (int j = 0; j < K; j++) {
    if (exec[j]) CK(cudaGraphExecDestroy(exec[j]));
    if (graph[j]) CK(cudaGraphDestroy(graph[j]));
  }
  free(exec);
  free(graph);
  return med;
}

/* Poison the outputs, then run the given stages once, in order, and wait. */
void poison_and_run(bench *b, int T, int H, size_t score_elems, const stage *const *stages, int n) {
  cudaStream_t st = b->stream;
  if (score_elems) CK(cudaMemsetAsync(b->d_scores, 0xFF, score_elems * sizeof(float), st));
  CK(cudaMemsetAsync(b->d_topk, 0x55, sizeof(int32_t) * (size_t)T * b->o.topk, st));
  CK(cudaMemsetAsync(b->d_lens, 0x55, sizeof(int32_t) * (size_t)T, st));
  CK(cudaMemsetAsync(b->d_out, 0xFF, (size_t)T * H * V_DIM * 2, st));
  CK(cudaMemsetAsync(b->d_lse, 0xFF, sizeof(float) * (size_t)T * H, st));
  for (int i = 0; i < n; i++) stage_run(stages[i], st);
  CK(cudaStreamSynchronize(st));
  CK(cudaGetLastError());
}

/* An attention-only row after one run: --check of tokens 0, T/2, T-1 against the reference (on the
 * indices in h_topk / h_lens), then the timing (K replicas; need: what --cold would want), the floor
 * and TFLOP/s. */
void check_and_time_attention(bench *b, row_result *row, const stage *at, int K, int need, int T, int H) {
  if (b->o.check) check_attention_tokens(b, row, T, H);
  row->replicas = K;
  row->flushed = need > K;
  row->ms_attn = time_stage(b, at, K, need > K, &row->timing[2], &row->gate_timeouts);
  row->ms_total = row->ms_attn;
  set_floors(b, row, 0);
  row->tflops = 2.0 * (double)row->selected * H * (QK_DIM + V_DIM) / (row->ms_attn * 1e-3) / 1e12;
}

