/*
 * bench.h — what the files of dsa-bench share: the shapes and limits, the options, the benchmark
 * state (one pool of inputs sized for the largest row), the stages a row times, a row's results,
 * and the functions each file offers the others.
 *
 *   main.c    usage, argument parsing, mode dispatch, the run's end (footer, JSON, exit status)
 *   setup.c   small helpers, the sm_90 check, the pool (buffers, caches, block table, queries),
 *             the --cold replicas, the pool seen as the calls' argument structs
 *   timing.c  stages (one library call each), the gate, graph / plain timing, medians
 *   check.c   --check: a row's outputs against the float64 CPU reference (DESIGN.md §5)
 *   report.c  floors, progress lines, tables, JSON
 *   glm.c     `dsa-bench glm`: the decode and prefill rows (decode rows serve `serve` too)
 *   serve.c   `dsa-bench serve`: decode at serving batches, attention at 128 x 128 heads
 *   attn.c    `dsa-bench attn`: sparse MLA attention alone
 *   cp.c      `dsa-bench cp`: one step over several GPUs through NCCL (built where NCCL is)
 *   merge.c   `dsa-bench merge`: context parallelism's merge alone, simulated ranks on one GPU
 *
 * Random inputs come from tests/support: rng.h and inputs.h on the host, inputs_gpu.h for the
 * caches (generated on the GPU); every CUDA and dsa call is checked by check.h's CK / DSA_CK.
 */
#ifndef DSA_BENCH_H
#define DSA_BENCH_H

#include <cuda_runtime_api.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "dsa.h"

/* ---- Shapes and limits ---- */

#define PAGE 64                                            /* tokens per KV page */
#define IDX_DIM DSA_INDEX_HEAD_DIM                         /* 128 */
#define IDX_ROW_BYTES (IDX_DIM + 4 * (IDX_DIM / 128))      /* 132: FP8 row + one float32 scale */
#define IDX_PAGE_BYTES ((size_t)PAGE * IDX_ROW_BYTES)      /* 8448 */
#define QK_DIM DSA_MLA_QK_DIM                              /* 576 */
#define V_DIM DSA_MLA_V_DIM                                /* 512 */
#define KV_FP8_BYTES DSA_MLA_FP8_SLOT_BYTES                /* 656 */
#define KV_BF16_BYTES (QK_DIM * 2)                         /* 1152 */
#define ATTN_SCALE 0.0625f                                 /* (192 + 64)^-0.5 */

/* DESIGN.md §7, measured on the H200. */
#define BW_BYTES_S 4.27e12
#define BF16_FLOP_S 790e12
#define FP8_FLOP_S 1580e12

#define PREFILL_TOKENS 64
#define SERVE_ATTN_BATCH 128
#define SERVE_ATTN_HEADS 128
#define TIME_CHUNK 32          /* timed replays queued behind one gate */
#define GATE_TIMEOUT_S 5.0     /* a gate opens by itself after this (never a deadlock) */
#define MAX_SIZES 64
#define MAX_BATCHES 16
#define MAX_SHARES 8
#define MAX_S (1 << 30)
#define COLD_FLUSH_BYTES ((size_t)256 << 20) /* > 4 x the 60 MB L2 */
#define COLD_MAX_REPLICAS 128
#define ATTN_DECODE_S 8192     /* attn: each decode request's context */
#define ATTN_PREFILL_S 16384   /* attn: the prefill tokens' context */

/* ---- Options ---- */

typedef enum { MODE_GLM, MODE_SERVE, MODE_ATTN } bench_mode;

typedef struct {
  bench_mode mode;
  int q_fp8, kv_fp8;
  int index_heads, heads, topk;
  int batch, mtp;
  int prefill_tokens; /* glm prefill: query tokens at the end of the context (default 64) */
  int ws_limit_mib;   /* indexer workspace_limit in MiB (0: none, the fastest plan) */
  int iters, warmup;
  int check, gate, device, cold;
  int do_decode, do_prefill;
  int64_t sizes[MAX_SIZES];
  int nsizes;
  int batches[MAX_BATCHES];
  int nbatches;
  uint64_t seed;
  const char *json;
  const char *shape; /* attn: only the shapes whose name contains this */
  int batches_given; /* --batches on the command line (attn: decode rows of those batches instead) */
  int chunk_tokens[MAX_BATCHES]; /* attn --chunk-tokens: chunk rows of these token counts instead */
  int nchunk_tokens;
  int64_t chunk_ctx; /* attn --chunk-context: the context those chunk rows end at (default 128k) */
  int chunk_shares[MAX_SHARES]; /* attn --chunk-shares: % of each token's selection kept from the previous */
  int nchunk_shares;            /* token's, a chunk row each (default 0 and 90) */
  int slot_order; /* attn --slot-order: each token's index list sorted by slot (the kernels read it so) */
  int table_pool; /* attn --table-pool: the pool sized for the whole table even with --shape */
} options;

/* ---- The benchmark state: one pool of inputs sized for the largest row ---- */

typedef struct {
  atomic_int open;
  atomic_int timed_out;
} stream_gate;

typedef struct {
  options o;
  char dev_name[256];
  cudaStream_t stream;
  cudaEvent_t ev[2 * TIME_CHUNK];
  stream_gate gate;

  /* pool geometry */
  int n_req;                /* requests with their own context */
  int64_t ppr;              /* pages per request = block-table row width */
  int64_t num_pages, num_slots;
  size_t kv_slot_bytes;
  int64_t max_S;
  int max_tokens, max_heads;
  size_t q_elem_bytes;      /* indexer q: 1 (fp8) or 2 (bf16) */
  size_t scores_elems;

  /* device */
  uint8_t *d_index_k;
  void *d_kv;
  int32_t *d_block_table, *d_seq_lens, *d_row_starts, *d_row_ends;
  int64_t *d_ws_slots;
  void *d_q_idx;
  float *d_q_scale, *d_weights;
  uint16_t *d_q_attn;
  float *d_scores;
  int32_t *d_topk, *d_lens;
  uint16_t *d_out;
  float *d_lse;
  void *d_ws_idx, *d_ws_attn;
  size_t ws_idx_cap, ws_attn_cap;
  void *d_flush;            /* --cold: written before a timed replay when replicas cannot rotate */
  /* --cold: replicas 1..rot-1 of the current row's inputs (replica 0 is the ordinary one): other
   * pages of the pool (block tables, prefill slots), copies of q, their own top-k outputs */
  size_t l2_bytes;
  int32_t *d_bt_rot;
  int64_t *d_ws_rot;
  void *d_qi_rot;
  uint16_t *d_qa_rot;
  int32_t *d_topk_rot, *d_lens_rot;
  size_t bt_rot_cap, ws_rot_cap, qi_rot_cap, qa_rot_cap, topk_rot_cap, lens_rot_cap;
  int32_t *h_bt_rot;        /* host staging of the replica block tables */
  int64_t *h_ws_rot;

  /* host (inputs kept for --check; outputs copied back by the checks) */
  uint8_t *h_index_k, *h_kv;
  int32_t *h_block_table, *h_seq_lens, *h_row_starts, *h_row_ends;
  int64_t *h_ws_slots;
  uint8_t *h_q_idx;
  float *h_q_scale, *h_weights;
  uint16_t *h_q_attn;
  int32_t *h_topk, *h_lens;
  int64_t *slot_of_pos;     /* [max_S]: --check, the slot of each position of the checked token */
  uint8_t *no_bad_pos;      /* [max_S] zeros: every position of the pool lies in the cache */
  uint8_t *mark;            /* [max_S] */
  int32_t *ref_topk;        /* [topk] */
  float *h_score_row;       /* [max_S] */
} bench;

/* ---- Stages: one library call each, with its arguments and workspace ---- */

typedef enum { ST_DEC_SCORES, ST_DEC_INDEXER, ST_PRE_SCORES, ST_PRE_INDEXER, ST_ATTN, ST_MERGE } stage_kind;

typedef struct {
  stage_kind kind;
  const void *args;
  void *ws;
  size_t ws_bytes;
} stage;

/* ---- Rows ---- */

typedef enum { TBL_DECODE, TBL_PREFILL, TBL_SERVE_DECODE, TBL_SERVE_ATTN, TBL_ATTN } table_kind;
extern const char *const TABLE_NAMES[];

typedef struct {
  table_kind table;
  const char *shape;       /* attn rows: the shape's name */
  int batch, q_len, tokens, heads;
  int64_t S, candidates, scored, selected;
  int64_t indexer_ws;      /* bytes of workspace the indexer call asked for (0: no indexer) */
  double ms_scores, ms_indexer, ms_topk, ms_attn, ms_total; /* < 0: not measured */
  char timing[4];          /* scores, indexer, attention: 'g', 'p' or '-' */
  int gate_timeouts;
  int replicas;            /* --cold: input replicas the replays rotated over (1: none) */
  int flushed;             /* --cold: stages that needed more replicas than fit (256 MB flush instead) */
  double floor_scores, floor_topk, floor_attn; /* seconds; 0 = no floor */
  double gluon_ms, triton_ms;                  /* 0 = no reference point */
  double tflops;                               /* attention rows */
  int check;               /* -1 not run, 0 ok, > 0 failures */
  double check_s;
  char check_msg[320];
} row_result;

/* ---- main.c ---- */
/* "dsa-bench: " and the message on stderr (stdout flushed first), then exit(1). */
void die(const char *fmt, ...);
/* An integer in [lo, hi], or die naming the option; a comma-separated list of them into out[]
 * (at most cap), returning the count. */
int parse_int(const char *s, long lo, long hi, const char *opt);
int parse_int_list(const char *arg, const char *opt, int *out, int cap, long lo, long hi);

/* ---- setup.c ---- */
void *xmalloc(size_t bytes);
void *dmalloc(size_t bytes);
double now_s(void);
int64_t imin64(int64_t a, int64_t b);
int64_t imax64(int64_t a, int64_t b);
int64_t ceil_div(int64_t a, int64_t b);
/* "1M", "64k", "512" for a context length; 90,000 is the reference table's "90k". */
const char *size_label(int64_t s, char *buf, size_t n);
/* The largest of --sizes. */
int64_t max_size(const options *o);

/* Exit 2 unless the chosen device is an sm_90 GPU; its name into name. */
void require_sm90(int device, char *name, size_t name_len);
/* The pool: n_req requests of max_S tokens, queries for max_tokens tokens x max_heads heads,
 * scores_elems floats of scores. */
void setup(bench *b, int n_req, int64_t max_S, int max_tokens, int max_heads, size_t scores_elems);
void teardown(bench *b);
/* A device buffer of at least need bytes in *p (grown, never shrunk). */
void ensure_ws(void **p, size_t *cap, size_t need);

/* --cold: replays rotate over replicas of the row's inputs. */
int cold_need(const bench *b, double replay_bytes);
int cold_block_tables(bench *b, int B, int64_t nb, int K);
void cold_queries(bench *b, int K, int T, int H);
void *cold_qi(const bench *b, int j, int T);
uint16_t *cold_qa(const bench *b, int j, int T, int H);
int32_t *cold_topk(const bench *b, int j, int T);
int32_t *cold_lens(const bench *b, int j, int T);

/* The pool as the calls' argument structs (host = 1: host pointers, for the reference). */
dsa_indexer_query query_from_token(const bench *b, dsa_indexer_query q, int t);
dsa_indexer_decode_args decode_args(const bench *b, int B, int64_t S, int host);
dsa_indexer_prefill_args prefill_args(const bench *b, int64_t S, int host);
dsa_sparse_mla_args attn_args(const bench *b, int T, int H, int host);

/* ---- timing.c ---- */
/* The attention stage over m (which must outlive it), its workspace held in the pool. */
stage attn_stage(bench *b, const dsa_sparse_mla_args *m);
/* One call of the stage on st; dies on failure. */
void stage_run(const stage *s, cudaStream_t st);
/* Median ms of one call over K replicas (flush: the 256 MB write before each replay); *mode 'g'
 * (graph replays) or 'p' (plain launches); *gate_timeouts counts gates that opened by timeout. */
double time_stage(bench *b, const stage *s, int K, int flush, char *mode, int *gate_timeouts);
/* Outputs poisoned, then the stages once, in order, and wait. */
void poison_and_run(bench *b, int T, int H, size_t score_elems, const stage *const *stages, int n);
/* An attention-only row after its one run: --check, timing, floor, TFLOP/s. */
void check_and_time_attention(bench *b, row_result *row, const stage *at, int K, int need, int T, int H);

/* ---- check.c: each fills row->check, check_s, check_msg ---- */
/* The first T tokens' top-k and lens into h_topk / h_lens. */
void copy_topk_back(bench *b, int T);
/* Decode: every request (sample: requests 0, B/2, B-1), every token: scores, top-k, attention. */
void check_decode(bench *b, row_result *row, int B, int64_t S, int sample, int check_attn);
/* Prefill: tokens 0, T/2-1, T-1 alone. */
void check_prefill(bench *b, row_result *row, int64_t S);
/* Attention alone: tokens 0, T/2, T-1 on the indices in h_topk / h_lens. */
void check_attention_tokens(bench *b, row_result *row, int T, int H);

/* ---- report.c ---- */
void row_init(row_result *r, table_kind t);
void set_floors(const bench *b, row_result *r, int64_t context_keys);
void print_progress(const row_result *r);
void print_stage_table(const bench *b, const char *title, const row_result *rows, int n, table_kind tbl);
void print_serve_attn_table(const bench *b, const row_result *rows, int n);
void print_attn_only_table(const bench *b, const row_result *rows, int n);
void write_json(const bench *b, const row_result *rows, int n, const char *path);

/* ---- the modes: each sets up the pool, runs and prints its rows, then its tables; returns the
 * row count, the rows in *rows (the caller frees them) ---- */
int glm_main(bench *b, row_result **rows);
int serve_main(bench *b, row_result **rows);
int attn_main(bench *b, row_result **rows);
/* glm.c, used by serve.c too */
void upload_seq_lens(bench *b, int B, int64_t S);
void run_decode_row(bench *b, row_result *row, table_kind tbl, int B, int64_t S);
/* cp.c (built with DSA_HAVE_CP): argv[0] is "cp" */
int cp_main(int argc, char **argv);
/* ---- merge.c ---- */
int merge_main(int argc, char **argv);

#endif /* DSA_BENCH_H */
