/*
 * test_gpu_api.c — what the API promises across the stages, on the GPU:
 *   sanity  a workspace one byte too small returns DSA_ERR_WORKSPACE_TOO_SMALL (with a message) and
 *           writes no output (dsa_indexer_decode, dsa_indexer_prefill, dsa_topk, dsa_sparse_mla);
 *           empty batches (0 requests / rows / tokens) return DSA_OK and write nothing;
 *   graphs  dsa_indexer_decode + dsa_sparse_mla captured in one CUDA graph (global capture mode:
 *           a host synchronisation or allocation inside a call breaks it), replayed twice: the
 *           bits of the direct calls.
 *
 * Conventions of gpu_harness.h: fresh random inputs (a fixed seed per case, no zero values), every
 * output poisoned before every run, every workspace filled with garbage (another on re-runs), a
 * 256-byte guard after every device buffer, and after every call a synchronised stream, its last
 * error and every guard checked.
 *
 * Output: one line per check, "ok   name  (metrics)" or "FAIL name: why", then "N passed, M failed".
 * Exit status 0 only if nothing failed; 77 (ctest: skipped) without an sm_90 GPU. DSA_TEST_ONLY=text
 * runs only the cases whose name contains text.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dsa.h"
#include "gpu_harness.h"
#include "indexer_problem.h"
#include "mla_problem.h"
#include "score_rows.h"

/* ============================================================================================== */
/* Sanity: workspace too small, empty batches                                                     */
/* ============================================================================================== */

static const decode_case k_small_decode = {
    .name = "small decode", .H = 32, .topk = 2048, .n = 1, .page_size = 64, .nreq = 2, .seq_lens = {3000, 100},
    .seed = 901};
static const prefill_case k_small_prefill = {
    .name = "small prefill", .H = 32, .topk = 512, .W = 2000, .n_causal = 3, .causal_end = 2000, .seed = 902};
static const mla_case k_small_mla = {
    .name = "small mla", .H = 16, .T = 4, .topk = 512, .fmt = DSA_KV_FP8_PACKED, .q_amp = 1.0, .num_slots = 2000,
    .seed = 903};

/* Reads a device output back and checks it still holds the poison. */
static int still_poisoned(const void *d, size_t bytes, int i32) {
  unsigned char *h = hmalloc(bytes);
  dget(h, d, bytes);
  for (size_t i = 0; i < bytes; i++) {
    const unsigned char want = i32 ? (unsigned char)(((uint32_t)POISON_I32 >> (8 * (i % 4))) & 0xFF) : POISON_BYTE;
    if (h[i] != want) return 0;
  }
  return 1;
}

static void expect_too_small(dsa_status st, const char *call) {
  if (st != DSA_ERR_WORKSPACE_TOO_SMALL)
    chk_fail("%s with one byte too few returned %s (%s), expected DSA_ERR_WORKSPACE_TOO_SMALL", call,
             dsa_status_string(st), dsa_last_error());
  else if (!dsa_last_error()[0])
    chk_fail("%s: DSA_ERR_WORKSPACE_TOO_SMALL but dsa_last_error() is empty", call);
  sync_check(call);
}

static void sanity_run(const void *arg) {
  (void)arg;
  /* decode */
  {
    chk_begin("sanity: dsa_indexer_decode with workspace one byte too small writes nothing");
    decode_prob p;
    decode_build(&k_small_decode, &p);
    size_t wsb = 0;
    DSA_Q(dsa_indexer_decode_workspace_size(&p.da, &wsb));
    if (wsb == 0) {
      chk_metric("workspace size is 0: nothing to shrink");
    } else {
      void *ws = workspace(wsb);
      const size_t ni = (size_t)p.T * k_small_decode.topk;
      int32_t *idx = dalloc(ni * 4), *lens = dalloc((size_t)p.T * 4);
      dfill_i32(idx, ni, POISON_I32);
      dfill_i32(lens, (size_t)p.T, POISON_I32);
      dsa_indexer_decode_args a = p.da;
      a.topk_indices = idx;
      a.topk_lens = lens;
      expect_too_small(dsa_indexer_decode(&a, ws, wsb - 1, g_stream), "dsa_indexer_decode");
      if (!still_poisoned(idx, ni * 4, 1) || !still_poisoned(lens, (size_t)p.T * 4, 1))
        chk_fail("outputs were written although the call failed");
      chk_metric("needed %zu B", wsb);
    }
    chk_end();
    free_case_memory();
  }
  /* prefill */
  {
    chk_begin("sanity: dsa_indexer_prefill with workspace one byte too small writes nothing");
    prefill_prob p;
    prefill_build(&k_small_prefill, &p);
    size_t wsb = 0;
    DSA_Q(dsa_indexer_prefill_workspace_size(&p.da, &wsb));
    if (wsb == 0) {
      chk_metric("workspace size is 0: nothing to shrink");
    } else {
      void *ws = workspace(wsb);
      const size_t ni = (size_t)p.T * k_small_prefill.topk;
      int32_t *idx = dalloc(ni * 4), *lens = dalloc((size_t)p.T * 4);
      dfill_i32(idx, ni, POISON_I32);
      dfill_i32(lens, (size_t)p.T, POISON_I32);
      dsa_indexer_prefill_args a = p.da;
      a.topk_indices = idx;
      a.topk_lens = lens;
      expect_too_small(dsa_indexer_prefill(&a, ws, wsb - 1, g_stream), "dsa_indexer_prefill");
      if (!still_poisoned(idx, ni * 4, 1) || !still_poisoned(lens, (size_t)p.T * 4, 1))
        chk_fail("outputs were written although the call failed");
      chk_metric("needed %zu B", wsb);
    }
    chk_end();
    free_case_memory();
  }
  /* plain top-k */
  {
    chk_begin("sanity: dsa_topk with workspace one byte too small writes nothing");
    rng_seed(904);
    const int R = 3, len = 5000, topk = 2048;
    float *sh = hmalloc((size_t)R * len * 4);
    fill_score_row(sh, R * len, R_RANDOM);
    dsa_topk_args a;
    memset(&a, 0, sizeof a);
    a.scores = dput(sh, (size_t)R * len * 4);
    a.scores_stride = len;
    a.num_rows = R;
    a.max_len = len;
    a.topk = topk;
    a.indices = dalloc((size_t)R * topk * 4);
    a.lens = dalloc((size_t)R * 4);
    dfill_i32(a.indices, (size_t)R * topk, POISON_I32);
    dfill_i32(a.lens, (size_t)R, POISON_I32);
    size_t wsb = 0;
    DSA_Q(dsa_topk_workspace_size(&a, &wsb));
    if (wsb == 0) {
      chk_metric("workspace size is 0: nothing to shrink");
    } else {
      void *ws = workspace(wsb);
      expect_too_small(dsa_topk(&a, ws, wsb - 1, g_stream), "dsa_topk");
      if (!still_poisoned(a.indices, (size_t)R * topk * 4, 1) || !still_poisoned(a.lens, (size_t)R * 4, 1))
        chk_fail("outputs were written although the call failed");
      chk_metric("needed %zu B", wsb);
    }
    chk_end();
    free_case_memory();
  }
  /* attention */
  {
    chk_begin("sanity: dsa_sparse_mla with workspace one byte too small writes nothing");
    mla_prob p;
    mla_build(&k_small_mla, &p);
    size_t wsb = 0;
    DSA_Q(dsa_sparse_mla_workspace_size(&p.da, &wsb));
    if (wsb == 0) {
      chk_metric("workspace size is 0: nothing to shrink");
    } else {
      void *ws = workspace(wsb);
      const size_t no = (size_t)p.T * p.H * DSA_MLA_V_DIM, nl = (size_t)p.T * p.H;
      dsa_sparse_mla_args a = p.da;
      a.out = dalloc(no * 2);
      a.lse = dalloc(nl * 4);
      dset(a.out, POISON_BYTE, no * 2);
      dset(a.lse, POISON_BYTE, nl * 4);
      expect_too_small(dsa_sparse_mla(&a, ws, wsb - 1, g_stream), "dsa_sparse_mla");
      if (!still_poisoned(a.out, no * 2, 0) || !still_poisoned(a.lse, nl * 4, 0))
        chk_fail("outputs were written although the call failed");
      chk_metric("needed %zu B", wsb);
    }
    chk_end();
    free_case_memory();
  }
  /* empty batches: DSA_OK, nothing written */
  {
    chk_begin("sanity: empty batches (0 requests / tokens / rows) return DSA_OK and write nothing");
    decode_prob dp;
    decode_build(&k_small_decode, &dp);
    int32_t *idx = dalloc(64 * 4), *lens = dalloc(64 * 4);
    dfill_i32(idx, 64, POISON_I32);
    dfill_i32(lens, 64, POISON_I32);
    size_t wsb = 0;
    void *ws = workspace(1 << 20);

    dsa_indexer_decode_args d = dp.da;
    d.num_reqs = 0;
    d.topk_indices = idx;
    d.topk_lens = lens;
    DSA_Q(dsa_indexer_decode_workspace_size(&d, &wsb));
    if (wsb > (1u << 20)) chk_fail("decode with 0 requests asks for %zu B of workspace", wsb);
    DSA(dsa_indexer_decode(&d, ws, wsb, g_stream));

    dsa_topk_args k;
    memset(&k, 0, sizeof k);
    float *sc = dalloc(64 * 4);
    k.scores = sc;
    k.scores_stride = 16;
    k.num_rows = 0;
    k.max_len = 16;
    k.topk = 8;
    k.indices = idx;
    k.lens = lens;
    DSA_Q(dsa_topk_workspace_size(&k, &wsb));
    if (wsb > (1u << 20)) chk_fail("top-k with 0 rows asks for %zu B of workspace", wsb);
    DSA(dsa_topk(&k, ws, wsb, g_stream));

    mla_prob mp;
    mla_build(&k_small_mla, &mp);
    dsa_sparse_mla_args m = mp.da;
    m.num_tokens = 0;
    void *out = dalloc(64);
    dset(out, POISON_BYTE, 64);
    m.out = out;
    m.lse = NULL;
    DSA_Q(dsa_sparse_mla_workspace_size(&m, &wsb));
    if (wsb > (1u << 20)) chk_fail("attention with 0 tokens asks for %zu B of workspace", wsb);
    DSA(dsa_sparse_mla(&m, ws, wsb, g_stream));

    if (!still_poisoned(idx, 64 * 4, 1) || !still_poisoned(lens, 64 * 4, 1) || !still_poisoned(out, 64, 0))
      chk_fail("an empty call wrote to its outputs");
    chk_metric("decode, top-k, attention");
    chk_end();
  }
}

/* ============================================================================================== */
/* CUDA graph capture                                                                             */
/* ============================================================================================== */

static const decode_case k_graph_decode = {
    .name = "graph decode", .H = 32, .q_fp8 = 1, .topk = 2048, .n = 2, .page_size = 64, .nreq = 3,
    .seq_lens = {9000, 1500, 4100}, .seed = 911};
static const mla_case k_graph_mla = {
    .name = "graph mla", .H = 16, .T = 6, .topk = 2048, .fmt = DSA_KV_FP8_PACKED, .lens_given = 1, .q_amp = 1.0,
    .num_slots = 10000, .seed = 912};
/* bf16 KV at 64 heads x 8 tokens: heads_as_m by the table, the seesaw consumers where forced */
static const mla_case k_graph_mla_bf16 = {
    .name = "graph mla bf16", .H = 64, .T = 8, .topk = 2048, .fmt = DSA_KV_BF16, .kv_stride = DSA_MLA_QK_DIM,
    .lens_given = 1, .q_amp = 1.0, .num_slots = 10000, .seed = 913};

/* dsa_indexer_decode + dsa_sparse_mla captured in one CUDA graph (global capture mode: a host
 * synchronisation or allocation inside a call breaks the capture); two replays must give the bits
 * of the direct calls. */
static void graph_run(const void *arg) {
  const mla_case *mc = arg;
  chk_begin("graph capture: dsa_indexer_decode + dsa_sparse_mla (%s KV, %d heads), replayed twice, bits equal direct "
            "calls", mc->fmt == DSA_KV_BF16 ? "bf16" : "FP8", mc->H);
  decode_prob dp;
  decode_build(&k_graph_decode, &dp);
  mla_prob mp;
  mla_build(mc, &mp);
  size_t wsd = 0, wsm = 0;
  DSA_Q(dsa_indexer_decode_workspace_size(&dp.da, &wsd));
  DSA_Q(dsa_sparse_mla_workspace_size(&mp.da, &wsm));
  void *ws_d = workspace(wsd), *ws_m = workspace(wsm);
  const size_t ni = (size_t)dp.T * k_graph_decode.topk;
  const size_t no = (size_t)mp.T * mp.H * DSA_MLA_V_DIM, nl = (size_t)mp.T * mp.H;
  int32_t *idx_d = dalloc(ni * 4), *len_d = dalloc((size_t)dp.T * 4);
  void *out_d = dalloc(no * 2);
  float *lse_d = dalloc(nl * 4);
  int32_t *idx_a = hmalloc(ni * 4), *len_a = hmalloc((size_t)dp.T * 4);
  uint16_t *out_a = hmalloc(no * 2);
  float *lse_a = hmalloc(nl * 4);
  decode_run_topk(&dp, ws_d, wsd, WS_BYTE_FIRST, idx_d, len_d, idx_a, len_a);
  mla_run(&mp, ws_m, wsm, WS_BYTE_FIRST, out_d, lse_d, out_a, lse_a);

  dsa_indexer_decode_args da = dp.da;
  da.topk_indices = idx_d;
  da.topk_lens = len_d;
  dsa_sparse_mla_args ma = mp.da;
  ma.out = out_d;
  ma.lse = lse_d;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
  const dsa_status s1 = dsa_indexer_decode(&da, ws_d, wsd, g_stream);
  const dsa_status s2 = dsa_sparse_mla(&ma, ws_m, wsm, g_stream);
  const cudaError_t ec = cudaStreamEndCapture(g_stream, &graph);
  if (s1 != DSA_OK || s2 != DSA_OK || ec != cudaSuccess) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    abort_case("capture failed: dsa_indexer_decode -> %s, dsa_sparse_mla -> %s (%s), cudaStreamEndCapture -> %s",
               dsa_status_string(s1), dsa_status_string(s2), dsa_last_error(), cudaGetErrorString(ec));
  }
  const cudaError_t ei = cudaGraphInstantiate(&exec, graph, 0);
  if (ei != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    CK(ei);
  }
  int32_t *idx_b = hmalloc(ni * 4), *len_b = hmalloc((size_t)dp.T * 4);
  uint16_t *out_b = hmalloc(no * 2);
  float *lse_b = hmalloc(nl * 4);
  for (int rep = 0; rep < 2; rep++) {
    dfill_i32(idx_d, ni, POISON_I32);
    dfill_i32(len_d, (size_t)dp.T, POISON_I32);
    dset(out_d, POISON_BYTE, no * 2);
    dset(lse_d, POISON_BYTE, nl * 4);
    dset(ws_d, rep ? WS_BYTE_RERUN : WS_BYTE_FIRST, wsd);
    dset(ws_m, rep ? WS_BYTE_RERUN : WS_BYTE_FIRST, wsm);
    const cudaError_t el = cudaGraphLaunch(exec, g_stream);
    if (el != cudaSuccess) {
      (void)cudaGraphExecDestroy(exec);
      (void)cudaGraphDestroy(graph);
      CK(el);
    }
    sync_check("cudaGraphLaunch");
    dget(idx_b, idx_d, ni * 4);
    dget(len_b, len_d, (size_t)dp.T * 4);
    dget(out_b, out_d, no * 2);
    dget(lse_b, lse_d, nl * 4);
    if (memcmp(idx_a, idx_b, ni * 4) || memcmp(len_a, len_b, (size_t)dp.T * 4))
      chk_fail("replay %d: decode top-k differs from the direct call", rep);
    if (memcmp(out_a, out_b, no * 2) || memcmp(lse_a, lse_b, nl * 4))
      chk_fail("replay %d: attention output differs from the direct call", rep);
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  chk_metric("decode %d tokens + attention %d tokens x %d heads", dp.T, mp.T, mp.H);
  chk_end();
}

int main(void) {
  const int init = harness_init("test_gpu_api");
  if (init) return init;
  const double t0 = now_s();
  int alive = 1;
  if (alive) alive = harness_run_case("sanity", sanity_run, NULL);
  if (alive) alive = harness_run_case("graph capture (indexer + MLA)", graph_run, &k_graph_mla);
  if (alive) alive = harness_run_case("graph capture (indexer + MLA, bf16 KV)", graph_run, &k_graph_mla_bf16);
  fprintf(stderr, "  [total %.1f s]\n", now_s() - t0);
  return harness_finish();
}
