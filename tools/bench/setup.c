/*
 * setup.c — the benchmark's pool and what is built on it: small helpers, the sm_90 check, the
 * buffers (caches generated on the GPU by inputs_gpu.h, block table, queries from rng.h / inputs.h
 * streams of --seed, outputs, check scratch), the --cold replicas, and the pool seen as the calls'
 * argument structs (device pointers, or host pointers for the CPU reference).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "inputs.h"
#include "inputs_gpu.h"

/* ---- Small helpers ---- */

void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) die("out of host memory (%zu bytes)", bytes);
  return p;
}

void *dmalloc(size_t bytes) {
  void *p = NULL;
  CK(cudaMalloc(&p, bytes ? bytes : 16));
  return p;
}

double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }
int64_t imax64(int64_t a, int64_t b) { return a > b ? a : b; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* "1M", "64k", "512" for a context length; 90,000 is the reference table's "90k". */
const char *size_label(int64_t s, char *buf, size_t n) {
  if (s == 90000)
    snprintf(buf, n, "90k");
  else if (s % 1048576 == 0)
    snprintf(buf, n, "%lldM", (long long)(s / 1048576));
  else if (s % 1024 == 0)
    snprintf(buf, n, "%lldk", (long long)(s / 1024));
  else
    snprintf(buf, n, "%lld", (long long)s);
  return buf;
}

/* The largest of --sizes. */
int64_t max_size(const options *o) {
  int64_t m = 0;
  for (int i = 0; i < o->nsizes; i++) m = imax64(m, o->sizes[i]);
  return m;
}

/* ---- The device ---- */

void require_sm90(int device, char *name, size_t name_len) {
  char reason[512];
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    snprintf(reason, sizeof reason, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
  } else if (count == 0) {
    snprintf(reason, sizeof reason, "no CUDA device");
  } else if (device >= count) {
    snprintf(reason, sizeof reason, "--device %d but only %d device(s)", device, count);
  } else {
    struct cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) {
      snprintf(reason, sizeof reason, "cudaGetDeviceProperties: %s", cudaGetErrorString(e));
    } else if (p.major != 9 || p.minor != 0) {
      snprintf(reason, sizeof reason, "device %d is %s, sm_%d%d", device, p.name, p.major, p.minor);
    } else {
      e = cudaSetDevice(device);
      if (e == cudaSuccess) {
        snprintf(name, name_len, "%s", p.name);
        return;
      }
      snprintf(reason, sizeof reason, "cudaSetDevice: %s", cudaGetErrorString(e));
    }
  }
  fflush(stdout);
  fprintf(stderr, "dsa-bench: no sm_90 GPU found (%s); nothing to benchmark\n", reason);
  exit(2);
}

/* ---- The pool ---- */

void ensure_ws(void **p, size_t *cap, size_t need) {
  if (need <= *cap && *p) return;
  if (*p) CK(cudaFree(*p));
  *p = dmalloc(need);
  *cap = need;
}

/* ---- --cold: replays rotate over replicas of the row's inputs ---- */

/* Replicas a stage needs so that a replica's inputs come back only after >= 2 x L2 of the others'
 * (as the 61 layers of a model would pass in between): ceil(2 L2 / the bytes one replay reads).
 * Uncapped: a stage whose need exceeds the replicas that fit (COLD_MAX_REPLICAS, pool pages) is
 * timed with the 256 MB write before each replay instead. */
int cold_need(const bench *b, double replay_bytes) {
  if (!b->o.cold) return 1;
  const double k = ceil(2.0 * (double)b->l2_bytes / (replay_bytes > 4096.0 ? replay_bytes : 4096.0));
  return k < 1.0 ? 1 : k > 1e6 ? 1000000 : (int)k;
}

/* Block tables of replicas 1..K-1, B requests of nb pages each (layout [K-1][B][nb]): pages of the
 * pool that replica 0 (requests 0..B-1, columns 0..nb-1 of the ordinary block table) does not use,
 * in the pool's permutation order. Returns how many replicas fit (<= K, >= 1). */
int cold_block_tables(bench *b, int B, int64_t nb, int K) {
  const int64_t per = (int64_t)B * nb;
  if (K > COLD_MAX_REPLICAS) K = COLD_MAX_REPLICAS;
  if (K <= 1 || per <= 0 || B > b->n_req || nb > b->ppr) return 1;
  const int fit = (int)imin64(K, 1 + (b->num_pages - per) / per);
  if (fit <= 1) return 1;
  const size_t n = (size_t)(fit - 1) * (size_t)per;
  free(b->h_bt_rot);
  b->h_bt_rot = xmalloc(n * sizeof(int32_t));
  int64_t f = 0; /* flattened index into the ordinary block table (a permutation of all pages) */
  for (size_t e = 0; e < n; e++) {
    while (f / b->ppr < B && f % b->ppr < nb) f++; /* replica 0's own pages */
    b->h_bt_rot[e] = b->h_block_table[f++];
  }
  ensure_ws((void **)&b->d_bt_rot, &b->bt_rot_cap, n * sizeof(int32_t));
  CK(cudaMemcpy(b->d_bt_rot, b->h_bt_rot, n * sizeof(int32_t), cudaMemcpyHostToDevice));
  return fit;
}

/* Replicas 1..K-1 of the first T tokens' indexer q and attention q (copies of replica 0's, at
 * other addresses), and their top-k outputs / lens. */
void cold_queries(bench *b, int K, int T, int H) {
  if (K <= 1) return;
  const size_t qi = (size_t)T * b->o.index_heads * IDX_DIM * b->q_elem_bytes;
  const size_t qa = (size_t)T * H * QK_DIM * 2;
  ensure_ws(&b->d_qi_rot, &b->qi_rot_cap, qi * (size_t)(K - 1));
  ensure_ws((void **)&b->d_qa_rot, &b->qa_rot_cap, qa * (size_t)(K - 1));
  ensure_ws((void **)&b->d_topk_rot, &b->topk_rot_cap, sizeof(int32_t) * (size_t)(K - 1) * T * b->o.topk);
  ensure_ws((void **)&b->d_lens_rot, &b->lens_rot_cap, sizeof(int32_t) * (size_t)(K - 1) * T);
  for (int j = 1; j < K; j++) {
    CK(cudaMemcpy((uint8_t *)b->d_qi_rot + (size_t)(j - 1) * qi, b->d_q_idx, qi, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy((uint8_t *)b->d_qa_rot + (size_t)(j - 1) * qa, b->d_q_attn, qa, cudaMemcpyDeviceToDevice));
  }
}
void *cold_qi(const bench *b, int j, int T) {
  return (uint8_t *)b->d_qi_rot + (size_t)(j - 1) * T * b->o.index_heads * IDX_DIM * b->q_elem_bytes;
}
uint16_t *cold_qa(const bench *b, int j, int T, int H) { return b->d_qa_rot + (size_t)(j - 1) * T * H * QK_DIM; }
int32_t *cold_topk(const bench *b, int j, int T) { return b->d_topk_rot + (size_t)(j - 1) * T * b->o.topk; }
int32_t *cold_lens(const bench *b, int j, int T) { return b->d_lens_rot + (size_t)(j - 1) * T; }

void setup(bench *b, int n_req, int64_t max_S, int max_tokens, int max_heads, size_t scores_elems) {
  const options *o = &b->o;
  int ih = o->index_heads;
  b->n_req = n_req;
  b->max_S = max_S;
  b->ppr = ceil_div(max_S, PAGE);
  b->num_pages = (int64_t)n_req * b->ppr;
  b->num_slots = b->num_pages * PAGE;
  b->kv_slot_bytes = o->kv_fp8 ? KV_FP8_BYTES : KV_BF16_BYTES;
  b->max_tokens = max_tokens;
  b->max_heads = max_heads;
  b->q_elem_bytes = o->q_fp8 ? 1 : 2;
  b->scores_elems = scores_elems;

  size_t n_qidx = (size_t)max_tokens * ih * IDX_DIM;
  size_t n_qattn = (size_t)max_tokens * max_heads * QK_DIM;
  size_t need = (size_t)b->num_pages * IDX_PAGE_BYTES + (size_t)b->num_slots * b->kv_slot_bytes +
                scores_elems * 4 + (size_t)b->num_pages * 4 + (size_t)max_S * 8 +
                n_qidx * b->q_elem_bytes + n_qattn * 2 + (size_t)max_tokens * max_heads * (V_DIM * 2 + 4) +
                (size_t)max_tokens * o->topk * 4 + (256u << 20) /* workspaces, slack */;
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  if ((double)need > 0.95 * (double)free_b)
    die("needs about %.1f GB of device memory, %.1f GB free: use fewer or smaller --sizes, or a "
        "smaller batch",
        need / 1e9, free_b / 1e9);

  printf("pool: %d request(s) x %lld pages of %d = %lld slots; index-K %.1f MB, KV %.1f MB (%s); "
         "generating...\n",
         n_req, (long long)b->ppr, PAGE, (long long)b->num_slots,
         b->num_pages * (double)IDX_PAGE_BYTES / 1e6, b->num_slots * (double)b->kv_slot_bytes / 1e6,
         o->kv_fp8 ? "fp8 656 B" : "bf16 1152 B");
  fflush(stdout);
  double t0 = now_s();

  CK(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
  for (int i = 0; i < 2 * TIME_CHUNK; i++) CK(cudaEventCreate(&b->ev[i]));
  atomic_init(&b->gate.open, 1);
  atomic_init(&b->gate.timed_out, 0);

  /* Caches. */
  b->d_index_k = dmalloc((size_t)b->num_pages * IDX_PAGE_BYTES);
  b->d_kv = dmalloc((size_t)b->num_slots * b->kv_slot_bytes);
  if (o->check) {
    b->h_index_k = xmalloc((size_t)b->num_pages * IDX_PAGE_BYTES);
    b->h_kv = xmalloc((size_t)b->num_slots * b->kv_slot_bytes);
  }
  CK(dsa_input_gpu_index_k(b->d_index_k, b->num_pages, o->seed));
  CK(dsa_input_gpu_kv(b->d_kv, b->num_slots, o->kv_fp8, o->seed));
  if (o->check) { /* the references read host copies */
    CK(cudaMemcpy(b->h_index_k, b->d_index_k, (size_t)b->num_pages * IDX_PAGE_BYTES, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b->h_kv, b->d_kv, (size_t)b->num_slots * b->kv_slot_bytes, cudaMemcpyDeviceToHost));
  }
  dsa_rng r;

  /* Block table: a random permutation of all pages; request q owns row q. */
  r = dsa_rng_make(o->seed, 3);
  b->h_block_table = xmalloc(sizeof(int32_t) * (size_t)b->num_pages);
  dsa_input_perm(&r, b->h_block_table, b->num_pages);
  b->d_block_table = dmalloc(sizeof(int32_t) * (size_t)b->num_pages);
  CK(cudaMemcpy(b->d_block_table, b->h_block_table, sizeof(int32_t) * (size_t)b->num_pages,
                cudaMemcpyHostToDevice));

  /* Prefill workspace: request 0's context in position order. */
  b->h_ws_slots = xmalloc(sizeof(int64_t) * (size_t)max_S);
  for (int64_t i = 0; i < max_S; i++)
    b->h_ws_slots[i] = (int64_t)b->h_block_table[i / PAGE] * PAGE + i % PAGE;
  b->d_ws_slots = dmalloc(sizeof(int64_t) * (size_t)max_S);
  CK(cudaMemcpy(b->d_ws_slots, b->h_ws_slots, sizeof(int64_t) * (size_t)max_S,
                cudaMemcpyHostToDevice));

  b->h_seq_lens = xmalloc(sizeof(int32_t) * (size_t)n_req);
  b->d_seq_lens = dmalloc(sizeof(int32_t) * (size_t)n_req);
  b->h_row_starts = xmalloc(sizeof(int32_t) * (size_t)max_tokens);
  b->h_row_ends = xmalloc(sizeof(int32_t) * (size_t)max_tokens);
  b->d_row_starts = dmalloc(sizeof(int32_t) * (size_t)max_tokens);
  b->d_row_ends = dmalloc(sizeof(int32_t) * (size_t)max_tokens);

  /* Indexer query side. */
  r = dsa_rng_make(o->seed, 4);
  b->h_q_idx = xmalloc(n_qidx * b->q_elem_bytes);
  if (o->q_fp8)
    dsa_input_fp8_codes(&r, b->h_q_idx, n_qidx);
  else
    dsa_input_bf16_exp_fill(&r, (uint16_t *)(void *)b->h_q_idx, n_qidx, -7, 9);
  b->h_q_scale = xmalloc(sizeof(float) * (size_t)max_tokens * ih);
  dsa_input_scales(&r, b->h_q_scale, (size_t)max_tokens * ih, 0.01f, 0.1f);
  b->h_weights = xmalloc(sizeof(float) * (size_t)max_tokens * ih);
  for (size_t i = 0; i < (size_t)max_tokens * ih; i++) {
    float w = 2.0f * dsa_rng_unit_f32(&r) - 1.0f;
    b->h_weights[i] = w != 0.0f ? w : 0.5f;
  }
  b->d_q_idx = dmalloc(n_qidx * b->q_elem_bytes);
  b->d_q_scale = dmalloc(sizeof(float) * (size_t)max_tokens * ih);
  b->d_weights = dmalloc(sizeof(float) * (size_t)max_tokens * ih);
  CK(cudaMemcpy(b->d_q_idx, b->h_q_idx, n_qidx * b->q_elem_bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b->d_q_scale, b->h_q_scale, sizeof(float) * (size_t)max_tokens * ih,
                cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b->d_weights, b->h_weights, sizeof(float) * (size_t)max_tokens * ih,
                cudaMemcpyHostToDevice));

  /* Attention query. */
  r = dsa_rng_make(o->seed, 5);
  b->h_q_attn = xmalloc(n_qattn * 2);
  dsa_input_bf16_exp_fill(&r, b->h_q_attn, n_qattn, -6, 7);
  b->d_q_attn = dmalloc(n_qattn * 2);
  CK(cudaMemcpy(b->d_q_attn, b->h_q_attn, n_qattn * 2, cudaMemcpyHostToDevice));

  /* Outputs. */
  b->d_scores = dmalloc(scores_elems * sizeof(float));
  b->d_topk = dmalloc(sizeof(int32_t) * (size_t)max_tokens * o->topk);
  b->d_lens = dmalloc(sizeof(int32_t) * (size_t)max_tokens);
  b->d_out = dmalloc((size_t)max_tokens * max_heads * V_DIM * 2);
  b->d_lse = dmalloc(sizeof(float) * (size_t)max_tokens * max_heads);

  /* Check scratch. */
  b->h_topk = xmalloc(sizeof(int32_t) * (size_t)max_tokens * o->topk);
  b->h_lens = xmalloc(sizeof(int32_t) * (size_t)max_tokens);
  b->slot_of_pos = xmalloc(sizeof(int64_t) * (size_t)max_S);
  b->no_bad_pos = xmalloc((size_t)max_S);
  memset(b->no_bad_pos, 0, (size_t)max_S);
  b->mark = xmalloc((size_t)max_S);
  memset(b->mark, 0, (size_t)max_S); /* Floyd's sampling: a set mark means the position is taken */
  b->ref_topk = xmalloc(sizeof(int32_t) * (size_t)o->topk);
  b->h_score_row = xmalloc(sizeof(float) * (size_t)max_S);

  if (!o->check) {
    /* Only --check needs the host copies of the big inputs. */
    free(b->h_q_attn);
    b->h_q_attn = NULL;
  }
  if (o->cold) {
    b->d_flush = dmalloc(COLD_FLUSH_BYTES);
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, o->device));
    b->l2_bytes = l2 > 0 ? (size_t)l2 : (size_t)60 << 20;
  }
  CK(cudaDeviceSynchronize());
  printf("pool ready in %.1f s\n", now_s() - t0);
  fflush(stdout);
}

void teardown(bench *b) {
  void *dev[] = {b->d_index_k, b->d_kv,     b->d_block_table, b->d_seq_lens, b->d_row_starts,
                 b->d_row_ends, b->d_ws_slots, b->d_q_idx,   b->d_q_scale,  b->d_weights,
                 b->d_q_attn,  b->d_scores, b->d_topk,       b->d_lens,     b->d_out,
                 b->d_lse,     b->d_ws_idx, b->d_ws_attn,     b->d_flush};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
    if (dev[i]) CK(cudaFree(dev[i]));
  void *host[] = {b->h_index_k, b->h_kv,     b->h_block_table, b->h_seq_lens, b->h_row_starts,
                  b->h_row_ends, b->h_ws_slots, b->h_q_idx,   b->h_q_scale,  b->h_weights,
                  b->h_q_attn,  b->h_topk,   b->h_lens,       b->slot_of_pos, b->no_bad_pos, b->mark,
                  b->ref_topk,  b->h_score_row};
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
  for (int i = 0; i < 2 * TIME_CHUNK; i++) CK(cudaEventDestroy(b->ev[i]));
  CK(cudaStreamDestroy(b->stream));
}

/* ---- The pool as argument structs (device pointers, or host pointers for the reference) ---- */

static dsa_indexer_query make_query(const bench *b, int host) {
  dsa_indexer_query q;
  memset(&q, 0, sizeof q);
  int ih = b->o.index_heads;
  q.q = host ? (const void *)b->h_q_idx : b->d_q_idx;
  q.q_dtype = b->o.q_fp8 ? DSA_DTYPE_FP8_E4M3 : DSA_DTYPE_BF16;
  q.q_scale = b->o.q_fp8 ? (host ? b->h_q_scale : b->d_q_scale) : NULL;
  q.weights = host ? (const void *)b->h_weights : (const void *)b->d_weights;
  q.weights_dtype = DSA_DTYPE_F32;
  q.weights_stride = ih;
  q.num_heads = ih;
  q.head_dim = IDX_DIM;
  q.softmax_scale = (float)(1.0 / sqrt((double)IDX_DIM * ih));
  return q;
}

/* The same query seen from token t on (host pointers: for the reference on a subset of tokens). */
dsa_indexer_query query_from_token(const bench *b, dsa_indexer_query q, int t) {
  int ih = b->o.index_heads;
  q.q = (const uint8_t *)q.q + (size_t)t * ih * IDX_DIM * b->q_elem_bytes;
  if (q.q_scale) q.q_scale += (size_t)t * ih;
  q.weights = (const float *)q.weights + (size_t)t * q.weights_stride;
  return q;
}

static dsa_index_k_cache make_cache(const bench *b, int host) {
  dsa_index_k_cache c;
  c.data = host ? b->h_index_k : b->d_index_k;
  c.num_pages = b->num_pages;
  c.page_size = PAGE;
  return c;
}

dsa_indexer_decode_args decode_args(const bench *b, int B, int64_t S, int host) {
  dsa_indexer_decode_args a;
  memset(&a, 0, sizeof a);
  a.query = make_query(b, host);
  a.cache = make_cache(b, host);
  a.seq_lens = host ? b->h_seq_lens : b->d_seq_lens;
  a.block_table = host ? b->h_block_table : b->d_block_table;
  a.block_table_stride = b->ppr;
  a.max_blocks_per_req = (int)ceil_div(S, PAGE);
  a.num_reqs = B;
  a.q_len_per_req = b->o.mtp;
  a.max_seq_len = (int)S;
  a.topk = b->o.topk;
  a.topk_indices = host ? NULL : b->d_topk;
  a.topk_lens = host ? NULL : b->d_lens;
  a.workspace_limit = (size_t)b->o.ws_limit_mib << 20;
  return a;
}

dsa_indexer_prefill_args prefill_args(const bench *b, int64_t S, int host) {
  dsa_indexer_prefill_args a;
  memset(&a, 0, sizeof a);
  a.query = make_query(b, host);
  a.cache = make_cache(b, host);
  a.kv_workspace_slots = host ? b->h_ws_slots : b->d_ws_slots;
  a.num_workspace_rows = S;
  a.row_starts = host ? b->h_row_starts : b->d_row_starts;
  a.row_ends = host ? b->h_row_ends : b->d_row_ends;
  a.num_tokens = b->o.prefill_tokens;
  a.max_rows = (int)S;
  a.topk = b->o.topk;
  a.output_global_slots = 1;
  a.topk_indices = host ? NULL : b->d_topk;
  a.topk_lens = host ? NULL : b->d_lens;
  a.workspace_limit = (size_t)b->o.ws_limit_mib << 20;
  return a;
}

dsa_sparse_mla_args attn_args(const bench *b, int T, int H, int host) {
  dsa_sparse_mla_args a;
  memset(&a, 0, sizeof a);
  a.q = host ? (const void *)b->h_q_attn : (const void *)b->d_q_attn;
  a.num_tokens = T;
  a.num_heads = H;
  a.kv_cache = host ? (const void *)b->h_kv : b->d_kv;
  a.kv_format = b->o.kv_fp8 ? DSA_KV_FP8_PACKED : DSA_KV_BF16;
  a.num_slots = b->num_slots;
  a.kv_stride = b->o.kv_fp8 ? KV_FP8_BYTES : QK_DIM;
  a.indices = host ? b->h_topk : b->d_topk;
  a.indices_stride = b->o.topk;
  a.topk = b->o.topk;
  a.lens = host ? b->h_lens : b->d_lens;
  a.softmax_scale = ATTN_SCALE;
  a.out = host ? NULL : b->d_out;
  a.lse = host ? NULL : b->d_lse;
  return a;
}

