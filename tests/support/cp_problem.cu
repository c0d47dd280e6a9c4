/*
 * cp_problem.cu — see cp_problem.h.
 */
#include "cp_problem.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "check.h"
#include "common/shard.h"
#include "rng.h"

/* uniform in (-1, 1) */
__device__ __forceinline__ float cp_unit(uint64_t h) { return (float)((int64_t)(h >> 11) - (1ll << 52)) * 0x1p-52f; }

/* Rows [p0, p0 + cnt) of request r's local row (global g of shard s): bf16 values of (r, g, d) and
 * their slots through the block-table row. what: 1 index-K (128), 2 KV (576). */
__global__ void cp_gen_rows(uint64_t seed, int what, int ties, int r, dsa_shard s, int64_t p0, int64_t cnt, int dims,
                            const int32_t *bt_row, __nv_bfloat16 *rows, int64_t *slots) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < cnt * dims; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t p = p0 + i / dims;
    const int d = (int)(i % dims);
    const int64_t g = shard_global(&s, p);
    const uint64_t key = ((uint64_t)r << 40) | (uint64_t)(ties && what == 1 ? 0 : g);
    rows[i] = __float2bfloat16(cp_unit(dsa_rng_hash4(seed, what, key, (uint64_t)d)));
    if (d == 0) slots[i / dims] = (int64_t)bt_row[p / CP_PAGE] * CP_PAGE + p % CP_PAGE;
  }
}

/* The query side: what 3 q (bf16 or e4m3), 4 q_scale, 5 weights, 6 q_attn. */
__global__ void cp_gen_query(uint64_t seed, int64_t nq, int64_t nh, int64_t na, int q_fp8, void *q, float *q_scale,
                             float *w, __nv_bfloat16 *qa) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nq; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = cp_unit(dsa_rng_hash4(seed, 3, (uint64_t)i, 0));
    if (q_fp8) ((__nv_fp8_e4m3 *)q)[i] = __nv_fp8_e4m3(v * 400.f);
    else ((__nv_bfloat16 *)q)[i] = __float2bfloat16(v);
  }
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nh; i += (int64_t)gridDim.x * blockDim.x) {
    if (q_scale) q_scale[i] = (0.5f + 0.5f * fabsf(cp_unit(dsa_rng_hash4(seed, 4, (uint64_t)i, 0)))) / 400.f;
    w[i] = cp_unit(dsa_rng_hash4(seed, 5, (uint64_t)i, 0));
  }
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < na; i += (int64_t)gridDim.x * blockDim.x)
    qa[i] = __float2bfloat16(cp_unit(dsa_rng_hash4(seed, 6, (uint64_t)i, 0)));
}

extern "C" int cp_build(const cp_spec *sp, const dsa_shard *s, int device, cp_data *d) {
  memset(d, 0, sizeof *d);
  d->device = device;
  d->shard = s ? *s : dsa_shard{1, 0, DSA_SHARD_ROUND_ROBIN, 0};
  CK(cudaSetDevice(device));
  const int R = sp->num_reqs, T = sp->prefill_tokens > 0 ? sp->prefill_tokens : R * sp->q_len, H = sp->index_heads;
  std::vector<int64_t> rows(R);
  int64_t maxrows = 1;
  for (int r = 0; r < R; r++) {
    rows[r] = shard_owned_below(&d->shard, sp->seq_lens[r]);
    maxrows = std::max(maxrows, rows[r]);
  }
  d->maxb = (int)((maxrows + CP_PAGE - 1) / CP_PAGE);
  d->num_pages = (int64_t)R * d->maxb;
  /* pages in a random order (a fixed stream per rank) */
  std::vector<int32_t> perm(d->num_pages);
  for (int64_t i = 0; i < d->num_pages; i++) perm[i] = (int32_t)i;
  dsa_rng x = dsa_rng_from_state(sp->seed * 2654435761u + (uint64_t)d->shard.rank * 97 + 12345);
  for (int64_t i = d->num_pages - 1; i > 0; i--) std::swap(perm[i], perm[dsa_rng_below(&x, (uint64_t)(i + 1))]);
  d->h_bt = (int32_t *)malloc((size_t)d->num_pages * 4);
  memcpy(d->h_bt, perm.data(), (size_t)d->num_pages * 4);
  const int64_t slots = d->num_pages * CP_PAGE;
  CK(cudaMalloc(&d->bt, (size_t)d->num_pages * 4));
  CK(cudaMemcpy(d->bt, d->h_bt, (size_t)d->num_pages * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&d->seq_lens, (size_t)R * 4));
  CK(cudaMemcpy(d->seq_lens, sp->seq_lens, (size_t)R * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&d->index_k, (size_t)slots * (DSA_INDEX_HEAD_DIM + 4)));
  CK(cudaMalloc(&d->kv, (size_t)slots * DSA_MLA_FP8_SLOT_BYTES));
  CK(cudaMemset(d->index_k, 0, (size_t)slots * (DSA_INDEX_HEAD_DIM + 4)));
  CK(cudaMemset(d->kv, 0, (size_t)slots * DSA_MLA_FP8_SLOT_BYTES));
  /* rows a chunk at a time through the library's writers */
  const int64_t CH = 1 << 19;
  __nv_bfloat16 *buf;
  int64_t *map;
  CK(cudaMalloc(&buf, (size_t)CH * DSA_MLA_QK_DIM * 2));
  CK(cudaMalloc(&map, (size_t)CH * 8));
  for (int r = 0; r < R; r++)
    for (int64_t p0 = 0; p0 < rows[r]; p0 += CH) {
      const int64_t cnt = std::min(CH, rows[r] - p0);
      const int32_t *bt_row = d->bt + (int64_t)r * d->maxb;
      cp_gen_rows<<<2048, 256>>>(sp->seed, 1, sp->ties, r, d->shard, p0, cnt, DSA_INDEX_HEAD_DIM, bt_row, buf, map);
      dsa_index_k_store_args ka = {buf, DSA_INDEX_HEAD_DIM, map, (int)cnt, d->index_k, d->num_pages, CP_PAGE};
      DSA_CK(dsa_index_k_store(&ka, 0));
      cp_gen_rows<<<2048, 256>>>(sp->seed, 2, 0, r, d->shard, p0, cnt, DSA_MLA_QK_DIM, bt_row, buf, map);
      dsa_mla_kv_store_args va = {buf, DSA_MLA_QK_DIM, map, (int)cnt, d->kv, DSA_KV_FP8_PACKED, slots, 0};
      DSA_CK(dsa_mla_kv_store(&va, 0));
    }
  CK(cudaDeviceSynchronize());
  CK(cudaFree(buf));
  CK(cudaFree(map));
  const int64_t nq = (int64_t)T * H * DSA_INDEX_HEAD_DIM, nh = (int64_t)T * H,
                na = (int64_t)T * sp->heads * DSA_MLA_QK_DIM;
  CK(cudaMalloc(&d->q, (size_t)nq * (sp->q_fp8 ? 1 : 2) + 16));
  if (sp->q_fp8) CK(cudaMalloc(&d->q_scale, (size_t)nh * 4 + 16));
  CK(cudaMalloc(&d->weights, (size_t)nh * 4 + 16));
  CK(cudaMalloc(&d->q_attn, (size_t)na * 2 + 16));
  cp_gen_query<<<1024, 256>>>(sp->seed, nq, nh, na, sp->q_fp8, d->q, d->q_scale, d->weights, (__nv_bfloat16 *)d->q_attn);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  if (sp->prefill_tokens > 0) { /* local rows = the owned positions of request 0, in order */
    d->num_rows = rows[0];
    std::vector<int64_t> ws((size_t)std::max<int64_t>(d->num_rows, 1));
    for (int64_t p = 0; p < d->num_rows; p++) ws[p] = (int64_t)d->h_bt[p / CP_PAGE] * CP_PAGE + p % CP_PAGE;
    std::vector<int32_t> st(T), en(T);
    const int64_t S = sp->seq_lens[0];
    for (int t = 0; t < T; t++) {
      st[t] = 0;
      en[t] = (int32_t)(S - T + 1 + t);
    }
    CK(cudaMalloc(&d->ws_slots, ws.size() * 8));
    CK(cudaMemcpy(d->ws_slots, ws.data(), ws.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d->row_starts, (size_t)T * 4));
    CK(cudaMalloc(&d->row_ends, (size_t)T * 4));
    CK(cudaMemcpy(d->row_starts, st.data(), (size_t)T * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d->row_ends, en.data(), (size_t)T * 4, cudaMemcpyHostToDevice));
  }
  d->index_scale = 1.0f / sqrtf(128.0f * H);
  d->attn_scale = 1.0f / sqrtf(192.0f + 64.0f);
  return 0;
}

extern "C" void cp_free(cp_data *d) {
  cudaSetDevice(d->device);
  cudaFree(d->bt);
  cudaFree(d->seq_lens);
  cudaFree(d->index_k);
  cudaFree(d->kv);
  cudaFree(d->q);
  cudaFree(d->q_scale);
  cudaFree(d->weights);
  cudaFree(d->q_attn);
  cudaFree(d->ws_slots);
  cudaFree(d->row_starts);
  cudaFree(d->row_ends);
  free(d->h_bt);
  memset(d, 0, sizeof *d);
}

static dsa_indexer_query query_of(const cp_spec *sp, const cp_data *d) {
  dsa_indexer_query q;
  memset(&q, 0, sizeof q);
  q.q = d->q;
  q.q_dtype = sp->q_fp8 ? DSA_DTYPE_FP8_E4M3 : DSA_DTYPE_BF16;
  q.q_scale = d->q_scale;
  q.weights = d->weights;
  q.weights_dtype = DSA_DTYPE_F32;
  q.weights_stride = sp->index_heads;
  q.num_heads = sp->index_heads;
  q.head_dim = DSA_INDEX_HEAD_DIM;
  q.softmax_scale = d->index_scale;
  return q;
}

static int max_len_of(const cp_spec *sp) {
  int m = 1;
  for (int r = 0; r < sp->num_reqs; r++) m = std::max(m, sp->seq_lens[r]);
  return m;
}

extern "C" dsa_cp_decode_args cp_decode_args(const cp_spec *sp, const cp_data *d) {
  dsa_cp_decode_args a;
  memset(&a, 0, sizeof a);
  a.shard = d->shard;
  a.query = query_of(sp, d);
  a.index_cache = dsa_index_k_cache{d->index_k, d->num_pages, CP_PAGE};
  a.seq_lens = d->seq_lens;
  a.block_table = d->bt;
  a.block_table_stride = d->maxb;
  a.max_blocks_per_req = d->maxb;
  a.num_reqs = sp->num_reqs;
  a.q_len_per_req = sp->q_len;
  a.max_seq_len = max_len_of(sp);
  a.topk = sp->topk;
  a.q_attn = d->q_attn;
  a.num_heads = sp->heads;
  a.kv_cache = d->kv;
  a.kv_format = DSA_KV_FP8_PACKED;
  a.kv_num_slots = d->num_pages * CP_PAGE;
  a.softmax_scale = d->attn_scale;
  return a;
}

extern "C" dsa_cp_prefill_args cp_prefill_args(const cp_spec *sp, const cp_data *d) {
  dsa_cp_prefill_args a;
  memset(&a, 0, sizeof a);
  a.shard = d->shard;
  a.query = query_of(sp, d);
  a.index_cache = dsa_index_k_cache{d->index_k, d->num_pages, CP_PAGE};
  a.kv_workspace_slots = d->ws_slots;
  a.num_local_rows = d->num_rows;
  a.num_workspace_rows = sp->seq_lens[0];
  a.row_starts = d->row_starts;
  a.row_ends = d->row_ends;
  a.num_tokens = sp->prefill_tokens;
  a.max_rows = sp->seq_lens[0];
  a.topk = sp->topk;
  a.q_attn = d->q_attn;
  a.num_heads = sp->heads;
  a.kv_cache = d->kv;
  a.kv_format = DSA_KV_FP8_PACKED;
  a.kv_num_slots = d->num_pages * CP_PAGE;
  a.softmax_scale = d->attn_scale;
  return a;
}

extern "C" int cp_one_gpu(const cp_spec *sp, cp_data *d, cudaStream_t stream, int iters, int graph, double *ms,
                          int32_t *h_positions, int32_t *h_lens, void *out, float *lse) {
  CK(cudaSetDevice(d->device));
  const int T = sp->prefill_tokens > 0 ? sp->prefill_tokens : sp->num_reqs * sp->q_len, K = sp->topk;
  dsa_indexer_prefill_args pa;
  memset(&pa, 0, sizeof pa);
  pa.query = query_of(sp, d);
  pa.cache = dsa_index_k_cache{d->index_k, d->num_pages, CP_PAGE};
  pa.kv_workspace_slots = d->ws_slots;
  pa.num_workspace_rows = d->num_rows;
  pa.row_starts = d->row_starts;
  pa.row_ends = d->row_ends;
  pa.num_tokens = T;
  pa.max_rows = (int)d->num_rows;
  pa.topk = K;
  pa.output_global_slots = 1;
  dsa_indexer_decode_args ia;
  memset(&ia, 0, sizeof ia);
  ia.query = query_of(sp, d);
  ia.cache = dsa_index_k_cache{d->index_k, d->num_pages, CP_PAGE};
  ia.seq_lens = d->seq_lens;
  ia.block_table = d->bt;
  ia.block_table_stride = d->maxb;
  ia.max_blocks_per_req = d->maxb;
  ia.num_reqs = sp->num_reqs;
  ia.q_len_per_req = sp->q_len;
  ia.max_seq_len = max_len_of(sp);
  ia.topk = K;
  int32_t *idx, *lens;
  CK(cudaMalloc(&idx, (size_t)T * K * 4));
  CK(cudaMalloc(&lens, (size_t)T * 4));
  ia.topk_indices = idx;
  ia.topk_lens = lens;
  pa.topk_indices = idx;
  pa.topk_lens = lens;
  const int prefill = sp->prefill_tokens > 0;
  dsa_sparse_mla_args aa;
  memset(&aa, 0, sizeof aa);
  aa.q = d->q_attn;
  aa.num_tokens = T;
  aa.num_heads = sp->heads;
  aa.kv_cache = d->kv;
  aa.kv_format = DSA_KV_FP8_PACKED;
  aa.num_slots = d->num_pages * CP_PAGE;
  aa.indices = idx;
  aa.indices_stride = K;
  aa.topk = K;
  aa.lens = lens;
  aa.softmax_scale = d->attn_scale;
  aa.out = out;
  aa.lse = lse;
  size_t wi = 0, wa = 0;
  if (prefill) DSA_CK(dsa_indexer_prefill_workspace_size(&pa, &wi));
  else DSA_CK(dsa_indexer_decode_workspace_size(&ia, &wi));
  DSA_CK(dsa_sparse_mla_workspace_size(&aa, &wa));
  void *ws;
  CK(cudaMalloc(&ws, std::max(wi, wa) + 256));
  std::vector<float> t;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  cudaStream_t own = NULL;
  if (graph) { /* a graph is captured on a stream of its own (not the legacy default stream) */
    CK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
    stream = own;
  }
  cudaGraphExec_t exec = NULL;
  for (int it = -3; it < std::max(iters, 0) || it < 1; it++) {
    if (it == 0 && graph) { /* after the warm-ups: capture one step, replay it from here on */
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      const dsa_status s1 = prefill ? dsa_indexer_prefill(&pa, ws, wi, stream) : dsa_indexer_decode(&ia, ws, wi, stream);
      const dsa_status s2 = dsa_sparse_mla(&aa, ws, wa, stream);
      CK(cudaStreamEndCapture(stream, &g));
      DSA_CK(s1 != DSA_OK ? s1 : s2);
      CK(cudaGraphInstantiate(&exec, g, 0));
      CK(cudaGraphDestroy(g));
    }
    CK(cudaEventRecord(e0, stream));
    if (exec) {
      CK(cudaGraphLaunch(exec, stream));
    } else {
      if (prefill) DSA_CK(dsa_indexer_prefill(&pa, ws, wi, stream));
      else DSA_CK(dsa_indexer_decode(&ia, ws, wi, stream));
      DSA_CK(dsa_sparse_mla(&aa, ws, wa, stream));
    }
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float f = 0;
    CK(cudaEventElapsedTime(&f, e0, e1));
    if (it >= 0) t.push_back(f);
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (own) cudaStreamDestroy(own);
  if (ms && iters > 0) {
    std::sort(t.begin(), t.end());
    *ms = t[t.size() / 2];
  }
  /* slots -> global positions (the cache's pages: request r's column j holds positions j * 64 ...) */
  std::vector<int32_t> slot_h((size_t)T * K);
  CK(cudaMemcpy(slot_h.data(), idx, (size_t)T * K * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h_lens, lens, (size_t)T * 4, cudaMemcpyDeviceToHost));
  std::vector<int32_t> page_pos((size_t)d->num_pages, -1);
  for (int r = 0; r < sp->num_reqs; r++)
    for (int j = 0; j < d->maxb; j++) page_pos[d->h_bt[(size_t)r * d->maxb + j]] = j * CP_PAGE;
  for (int tk = 0; tk < T; tk++) {
    int32_t *o = h_positions + (size_t)tk * K;
    const int L = h_lens[tk];
    for (int i = 0; i < L; i++) {
      const int32_t s = slot_h[(size_t)tk * K + i];
      o[i] = s >= 0 && s < d->num_pages * CP_PAGE ? page_pos[s / CP_PAGE] + s % CP_PAGE : -2;
    }
    std::sort(o, o + L);
    for (int i = L; i < K; i++) o[i] = -1;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(ws);
  cudaFree(idx);
  cudaFree(lens);
  return 0;
}

#include <pthread.h>

typedef struct {
  cp_run *run;
  int rank;
  int rc;
  double stage_ms[DSA_CP_STAGES], total_ms;
} cp_thread;

static int rank_body(cp_thread *th) {
  cp_run *run = th->run;
  const cp_spec *sp = run->sp;
  const int r = th->rank, T = sp->prefill_tokens > 0 ? sp->prefill_tokens : sp->num_reqs * sp->q_len, K = sp->topk,
            H = sp->heads;
  dsa_shard s = {run->world_size, r, run->layout, run->block};
  cp_data d;
  if (cp_build(sp, &s, r, &d)) return 1;
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int prefill = sp->prefill_tokens > 0;
  dsa_cp_decode_args a = cp_decode_args(sp, &d);
  dsa_cp_prefill_args pa = cp_prefill_args(sp, &d);
  int32_t *pos, *lens;
  float *lse;
  void *out;
  CK(cudaMalloc(&pos, (size_t)T * K * 4 + 16));
  CK(cudaMalloc(&lens, (size_t)T * 4 + 16));
  CK(cudaMalloc(&out, (size_t)T * H * DSA_MLA_V_DIM * 2 + 16));
  CK(cudaMalloc(&lse, (size_t)T * H * 4 + 16));
  a.topk_positions = pos;
  a.topk_lens = lens;
  a.out = out;
  a.lse = lse;
  cudaEvent_t ev[DSA_CP_STAGES + 1];
  for (int i = 0; i <= DSA_CP_STAGES; i++) CK(cudaEventCreate(&ev[i]));
  a.stage_events = ev;
  pa.topk_positions = pos;
  pa.topk_lens = lens;
  pa.out = out;
  pa.lse = lse;
  pa.stage_events = ev;
  size_t wsb = 0;
  if (prefill) DSA_CK(dsa_cp_prefill_workspace_size(&pa, &wsb));
  else DSA_CK(dsa_cp_decode_workspace_size(&a, &wsb));
  if (r == 0) run->workspace_bytes = (int64_t)wsb;
  void *ws;
  CK(cudaMalloc(&ws, wsb + 256));
  std::vector<std::vector<float>> st(DSA_CP_STAGES + 1);
  cudaGraphExec_t exec = NULL;
  for (int it = -3; it < run->iters || it < 1; it++) {
    if (it == 0 && run->graph) { /* after the warm-ups: one step captured (NCCL's kernels with it) */
      a.stage_events = pa.stage_events = NULL;
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      const dsa_status s1 = prefill ? dsa_cp_prefill(&pa, run->comms[r], ws, wsb, stream)
                                    : dsa_cp_decode(&a, run->comms[r], ws, wsb, stream);
      CK(cudaStreamEndCapture(stream, &g));
      DSA_CK(s1);
      CK(cudaGraphInstantiate(&exec, g, 0));
      CK(cudaGraphDestroy(g));
    }
    if (exec) { /* only the total: events around the replay */
      CK(cudaEventRecord(ev[0], stream));
      CK(cudaGraphLaunch(exec, stream));
      CK(cudaEventRecord(ev[DSA_CP_STAGES], stream));
    } else if (prefill) {
      DSA_CK(dsa_cp_prefill(&pa, run->comms[r], ws, wsb, stream));
    } else {
      DSA_CK(dsa_cp_decode(&a, run->comms[r], ws, wsb, stream));
    }
    CK(cudaEventSynchronize(ev[DSA_CP_STAGES]));
    if (it < 0) continue;
    if (exec) {
      float f = 0;
      CK(cudaEventElapsedTime(&f, ev[0], ev[DSA_CP_STAGES]));
      st[DSA_CP_STAGES].push_back(f);
      continue;
    }
    for (int i = 0; i < DSA_CP_STAGES; i++) {
      float f = 0;
      CK(cudaEventElapsedTime(&f, ev[i], ev[i + 1]));
      st[i].push_back(f);
    }
    float f = 0;
    CK(cudaEventElapsedTime(&f, ev[0], ev[DSA_CP_STAGES]));
    st[DSA_CP_STAGES].push_back(f);
  }
  for (int i = 0; i <= DSA_CP_STAGES; i++) {
    std::sort(st[i].begin(), st[i].end());
    const double m = st[i].empty() ? 0 : st[i][st[i].size() / 2];
    if (i < DSA_CP_STAGES) th->stage_ms[i] = m;
    else th->total_ms = m;
  }
  if (run->positions[r]) CK(cudaMemcpy(run->positions[r], pos, (size_t)T * K * 4, cudaMemcpyDeviceToHost));
  if (run->lens[r]) CK(cudaMemcpy(run->lens[r], lens, (size_t)T * 4, cudaMemcpyDeviceToHost));
  if (run->out[r]) CK(cudaMemcpy(run->out[r], out, (size_t)T * H * DSA_MLA_V_DIM * 2, cudaMemcpyDeviceToHost));
  if (run->lse[r]) CK(cudaMemcpy(run->lse[r], lse, (size_t)T * H * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i <= DSA_CP_STAGES; i++) cudaEventDestroy(ev[i]);
  if (exec) cudaGraphExecDestroy(exec);
  cudaFree(ws);
  cudaFree(pos);
  cudaFree(lens);
  cudaFree(out);
  cudaFree(lse);
  cudaStreamDestroy(stream);
  cp_free(&d);
  return 0;
}

static void *rank_main(void *p) {
  cp_thread *th = (cp_thread *)p;
  th->rc = rank_body(th);
  return NULL;
}

extern "C" int cp_run_ranks(cp_run *run) {
  cp_thread th[DSA_MAX_CP_RANKS];
  pthread_t tid[DSA_MAX_CP_RANKS];
  for (int r = 0; r < run->world_size; r++) {
    th[r] = cp_thread{run, r, 0, {0}, 0};
    pthread_create(&tid[r], NULL, rank_main, &th[r]);
  }
  int rc = 0;
  run->total_ms_slowest = 0;
  for (int r = 0; r < run->world_size; r++) {
    pthread_join(tid[r], NULL);
    rc |= th[r].rc;
    run->total_ms_slowest = std::max(run->total_ms_slowest, th[r].total_ms);
  }
  memcpy(run->stage_ms, th[0].stage_ms, sizeof run->stage_ms);
  run->total_ms = th[0].total_ms;
  return rc;
}

static double bf16_value(uint16_t x) {
  const uint32_t u = (uint32_t)x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

extern "C" double cp_worst_rel_l2_bf16(const uint16_t *out, const uint16_t *ref, int tokens, size_t per_token) {
  double worst = 0;
  for (int t = 0; t < tokens; t++) {
    double num = 0, den = 0;
    for (size_t i = 0; i < per_token; i++) {
      const double x = bf16_value(out[(size_t)t * per_token + i]), y = bf16_value(ref[(size_t)t * per_token + i]);
      num += (x - y) * (x - y);
      den += y * y;
    }
    worst = std::max(worst, den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0));
  }
  return worst;
}
