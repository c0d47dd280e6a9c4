/*
 * dsa-bench — timing tables of the dsa library at the reference shapes (DESIGN.md §6), with the
 * floors of DESIGN.md §7 and, on request, a check of every row against the CPU reference (§5).
 *
 *   dsa-bench glm [options]     decode and prefill tables at the GLM shapes, S = 512 ... 1M
 *   dsa-bench serve [options]   decode at serving batches, and attention TFLOP/s at b128 x h128
 *
 * How a row is measured:
 *   1. inputs: one pool of random data (index-K pages, MLA KV slots) sized for the largest row,
 *      pages of every request in random order; a smaller row uses a prefix of each context;
 *   2. outputs are poisoned, then the three calls run once (scores alone, indexer, attention);
 *   3. --check: those outputs are compared with the float64 CPU reference;
 *   4. each stage (scores alone; indexer = scores + top-k; attention) is captured once into a CUDA
 *      graph on a non-blocking stream, replayed as warm-up, then every timed replay is bracketed
 *      by its own pair of CUDA events; the median is reported. Same buffers every replay (hot L2).
 *      While the replays of a batch are queued the stream is held by a host function ("gate"), so
 *      they then run back to back on the GPU and the host's launch rate never shows up in a
 *      measurement.
 */
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsa.h"
#include "dsa_ref.h"

/* ---------------------------------------------------------------------------------------------- */
/* Shapes and limits                                                                               */
/* ---------------------------------------------------------------------------------------------- */

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
#define MAX_S (1 << 30)
#define COLD_FLUSH_BYTES ((size_t)256 << 20) /* > 4 x the 60 MB L2 */
#define ATTN_DECODE_S 8192     /* attn: each decode request's context */
#define ATTN_PREFILL_S 16384   /* attn: the prefill tokens' context */

/* tokenspeed PR #627 (MI355), ms: totals = scores + top-k + attention. DESIGN.md §6. */
typedef struct {
  int64_t s;
  double dec_triton, dec_gluon, pre_triton, pre_gluon;
} ref_point;
static const ref_point REF_TABLE[] = {
    {512, 0.368, 0.223, 1.467, 0.228},     {1024, 0.402, 0.225, 1.499, 0.225},
    {2048, 0.456, 0.221, 1.552, 0.225},    {8192, 0.511, 0.267, 2.001, 0.291},
    {16384, 0.585, 0.303, 2.109, 0.347},   {32768, 0.737, 0.401, 2.311, 0.520},
    {65536, 0.675, 0.399, 2.383, 0.615},   {90000, 0.711, 0.407, 2.476, 0.700},
    {131072, 0.753, 0.411, 2.664, 0.844},  {262144, 0.877, 0.432, 3.430, 1.482},
    {524288, 1.105, 0.442, 4.670, 2.654},  {1048576, 1.650, 0.473, 7.139, 5.048},
};
#define REF_POINTS ((int)(sizeof REF_TABLE / sizeof REF_TABLE[0]))

/* ---------------------------------------------------------------------------------------------- */
/* Errors and small helpers                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static void die(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "dsa-bench: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t ck_e_ = (call);                                                                    \
    if (ck_e_ != cudaSuccess)                                                                      \
      die("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(ck_e_));                  \
  } while (0)

#define DSA_CK(call)                                                                               \
  do {                                                                                             \
    dsa_status dk_s_ = (call);                                                                     \
    if (dk_s_ != DSA_OK)                                                                           \
      die("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, dsa_status_string(dk_s_),                \
          dsa_last_error());                                                                       \
  } while (0)

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) die("out of host memory (%zu bytes)", bytes);
  return p;
}

static void *dmalloc(size_t bytes) {
  void *p = NULL;
  CK(cudaMalloc(&p, bytes ? bytes : 16));
  return p;
}

static double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t imax64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* "1M", "64k", "512" for a context length; 90,000 is the reference table's "90k". */
static const char *size_label(int64_t s, char *buf, size_t n) {
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

/* ---------------------------------------------------------------------------------------------- */
/* Random data: xorshift64*                                                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
  uint64_t s;
} rng;

static rng rng_make(uint64_t seed, uint64_t stream) {
  /* splitmix64 of (seed, stream) so that every buffer gets an independent, non-zero state. */
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  rng r = {z ? z : 1};
  return r;
}

static uint64_t rng_next(rng *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static float rng_unif(rng *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }

/* Random valid FP8-e4m3 codes: every code but the two NaNs (0x7F, 0xFF become +-448). */
static void fill_fp8(uint8_t *dst, size_t n, rng *r) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng_next(r);
    memcpy(dst + i, &x, 8);
  }
  if (i < n) {
    uint64_t x = rng_next(r);
    memcpy(dst + i, &x, n - i);
  }
  for (i = 0; i < n; i++)
    if ((dst[i] & 0x7F) == 0x7F) dst[i] ^= 1;
}

/* Random bf16: random sign and mantissa, binary exponent in [emin, emin + erange). */
static uint16_t rand_bf16(rng *r, int emin, int erange) {
  uint64_t x = rng_next(r);
  uint16_t sign = (uint16_t)((x & 1) << 15);
  uint16_t mant = (uint16_t)((x >> 1) & 0x7F);
  uint16_t e = (uint16_t)(127 + emin + (int)((x >> 8) % (uint64_t)erange));
  return (uint16_t)(sign | (uint16_t)(e << 7) | mant);
}

static void fill_bf16(uint16_t *dst, size_t n, rng *r, int emin, int erange) {
  for (size_t i = 0; i < n; i++) dst[i] = rand_bf16(r, emin, erange);
}

/* Positive scale in [lo, hi). */
static void fill_scales(float *dst, size_t n, rng *r, float lo, float hi) {
  for (size_t i = 0; i < n; i++) dst[i] = lo + (hi - lo) * rng_unif(r);
}

/* The caches are generated on the GPU (tools/bench_gen.cu: the same distributions as the host
 * generators above, hashed from --seed). */
int bench_gen_index_k(void *dst, int64_t pages, uint64_t seed);
int bench_gen_kv(void *dst, int64_t slots, int fp8, uint64_t seed);

/* ---------------------------------------------------------------------------------------------- */
/* Options                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

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
} options;

static void usage(FILE *f) {
  fprintf(f,
"usage: dsa-bench glm|serve|attn [options]   (dsa-bench cp --help: several GPUs, dsa_cp)\n"
"\n"
"  glm    the reference tables of DESIGN.md §6 at the GLM shapes: decode (1 request x 1 query\n"
"         token) and prefill (64 query tokens at the end of an S-token context), S = 512 ... 1M.\n"
"         Indexer 32 heads x 128, FP8 index-K paged 64, topk 2048, weights float32;\n"
"         attention 16 heads, packed FP8 KV, scale (192+64)^-0.5. Pages in random order.\n"
"  serve  serving shapes: decode at batch 64/128/256 x context 8k/32k/64k (same columns), then the\n"
"         attention stage alone at batch 128 x 128 heads over that batch's top-k (TFLOP/s).\n"
"  attn   sparse MLA attention alone at the shapes that decide serving cost: decode 1 token x\n"
"         16/64/128 heads, 64 x 16/64, 256 x 64, 128 x 128 (each request its own 8k context), and\n"
"         prefill 64 x 16/64/128, 4096 x 128 tokens at the end of one 16k context; topk distinct\n"
"         random visible positions per token (all valid), KV format from --kv. TFLOP/s as\n"
"         FlashMLA counts them: 2 x tokens x heads x topk x (576 + 512).\n"
"\n"
"options:\n"
"  --q-dtype fp8|bf16     indexer query: FP8-e4m3 with a positive float32 q_scale (default) or bf16\n"
"  --kv fp8|bf16          MLA KV cache: packed FP8, 656 B a slot (default), or dense bf16 rows\n"
"  --heads N              attention heads, 1..128 (default 16)\n"
"  --index-heads N        indexer heads, 1..64 (default 32); indexer scale = 128^-0.5 * N^-0.5\n"
"  --topk K               1..2048 (default 2048)\n"
"  --batch B              glm decode: requests, each with its own S-token context (default 1)\n"
"  --mtp N                query tokens per request in decode, 1..8 (default 1); token j of n\n"
"                         sees S-(n-1)+j positions\n"
"  --prefill-tokens N     glm prefill: N query tokens at the end of the context (default 64, the\n"
"                         reference's; token j sees S-(N-1)+j rows), e.g. 4096 for a chunked-prefill\n"
"                         step; the Gluon / Triton columns only at 64\n"
"  --ws-limit-mib N       the indexer calls' workspace_limit in MiB (default 0: none, the fastest\n"
"                         plan; e.g. 64 for the capped plan of dsa.h)\n"
"  --sizes LIST           context lengths S, comma separated; k = 1024, M = 1048576\n"
"                         glm default 512,1k,2k,8k,16k,32k,64k,90000,128k,256k,512k,1M (the\n"
"                         reference table's 90k row is 90,000 tokens);\n"
"                         serve default 8k,32k,64k\n"
"  --batches LIST         serve: decode batch sizes (default 64,128,256); attn: instead of the\n"
"                         fixed table, decode rows of these batches x --heads heads (each request\n"
"                         its own 8k context), e.g. to find where two attention kernels cross\n"
"  --only decode|prefill  glm: one table only\n"
"  --shape TEXT           attn: only the shapes whose name contains TEXT (e.g. \"128 x 128h\")\n"
"  --iters N              timed replays per stage, median reported (default 100; DESIGN asks >= 50)\n"
"  --warmup N             untimed replays per stage before timing (default 20)\n"
"  --check                before timing a row, compare its outputs with the float64 CPU reference\n"
"                         (DESIGN.md §5): scores, top-k (eps criterion), attention (on the GPU's own\n"
"                         top-k). Decode: every token (serve: requests 0, B/2, B-1); prefill: tokens\n"
"                         0, 31, 63. Exit status 1 when any check fails\n"
"  --json FILE            write every row (all columns), device, date and options as JSON\n"
"  --seed N               random seed (default 1)\n"
"  --device N             CUDA device (default 0)\n"
"  --cold                 replays rotate over K replicas of the row's inputs (other pages of the\n"
"                         pool, copies of q, their own top-k), K = ceil(2 x L2 / bytes a replay\n"
"                         reads), as a model's 61 layers would pass between two uses; where fewer\n"
"                         fit (at most 128, pool pages), a 256 MB buffer is written before every\n"
"                         replay instead (outside the timed events)\n"
"  --no-gate              queue timed replays without holding the stream first (then a stage shorter\n"
"                         than the host's launch time measures the host)\n"
"  -h, --help             this text\n"
"\n"
"columns (ms = median over --iters replays of one CUDA graph each, hot L2):\n"
"  S        context length; B requests (decode)\n"
"  cand     candidate rows = sum over query tokens of the visible length L (decode B*S for one\n"
"           token; prefill 64*S - 2016)\n"
"  scores   dsa_indexer_{decode,prefill}_scores alone (skip_short_rows = 1; rows with L <= topk\n"
"           are not scored, so the call is near empty there: its time is reported as measured)\n"
"  top-k    indexer - scores, where indexer = dsa_indexer_{decode,prefill} (scores + top-k)\n"
"  attn     dsa_sparse_mla over that row's top-k output (indices = topk_indices, lens = topk_lens)\n"
"  total    indexer + attn\n"
"  %%sc %%tk %%at %%tot   floor / measured * 100 for the stage (\"-\": no floor: nothing to score)\n"
"  gluon    reference Gluon total (MI355, DESIGN.md §6), x = ours / gluon (1 request, 1 token,\n"
"           topk 2048, 32 indexer heads only)\n"
"  t        timing per stage (scores, indexer, attn): g = graph replays, p = plain launches\n"
"           (graph capture failed), * = a gate timed out (host gaps may be included)\n"
"  check    ok / FAIL / - (not checked)\n"
"\n"
"floors (DESIGN.md §7: 4.27e12 B/s copy bandwidth, 790e12 bf16 FLOP/s, FP8 2x):\n"
"  scores = max(index-K bytes of the context (132 B a key, read once) / BW,\n"
"               2 * scored candidates * index_heads * 128 / (790e12 bf16 q | 1580e12 fp8 q))\n"
"  top-k  = scored candidates * 4 B / BW       (scored: candidates of tokens with L > topk)\n"
"  attn   = max(selected * (656 | 1152) B / BW, 2 * selected * heads * (576 + 512) / 790e12)\n"
"           selected = sum over tokens of min(topk, L) (= tokens * topk at long contexts)\n"
"  total  = the sum of the three\n"
"\n"
"exit status: 0 ok, 1 error or failed check, 2 no sm_90 GPU.\n");
}

static int parse_int(const char *s, long lo, long hi, const char *opt) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!s[0] || *end || v < lo || v > hi) die("%s: '%s' is not an integer in [%ld, %ld]", opt, s, lo, hi);
  return (int)v;
}

static int64_t parse_size(const char *tok) {
  char *end = NULL;
  long long v = strtoll(tok, &end, 10);
  if (end == tok) die("--sizes: '%s' is not a size", tok);
  if (*end == 'k' || *end == 'K') {
    v *= 1024;
    end++;
  } else if (*end == 'm' || *end == 'M') {
    v *= 1048576;
    end++;
  }
  if (*end || v < 1 || v > MAX_S) die("--sizes: '%s' is not a size in [1, %d]", tok, MAX_S);
  return (int64_t)v;
}

/* Comma-separated list into out[]; returns the count. */
static int parse_list(const char *arg, const char *opt, int64_t *out, int cap, int is_size) {
  char buf[1024];
  if (strlen(arg) >= sizeof buf) die("%s: list too long", opt);
  strcpy(buf, arg);
  int n = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (n == cap) die("%s: more than %d entries", opt, cap);
    out[n++] = is_size ? parse_size(tok) : parse_int(tok, 1, 4096, opt);
  }
  if (n == 0) die("%s: empty list", opt);
  return n;
}

static void parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->q_fp8 = 1;
  o->kv_fp8 = 1;
  o->index_heads = 32;
  o->heads = 16;
  o->topk = 2048;
  o->batch = 1;
  o->mtp = 1;
  o->prefill_tokens = PREFILL_TOKENS;
  o->iters = 100;
  o->warmup = 20;
  o->gate = 1;
  o->do_decode = o->do_prefill = 1;
  o->seed = 1;
  int have_mode = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                                                               \
  do {                                                                                             \
    if (!v) die("%s needs a value (see --help)", a);                                               \
    i++;                                                                                           \
  } while (0)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "glm") && !have_mode) {
      o->mode = MODE_GLM;
      have_mode = 1;
    } else if (!strcmp(a, "serve") && !have_mode) {
      o->mode = MODE_SERVE;
      have_mode = 1;
    } else if (!strcmp(a, "attn") && !have_mode) {
      o->mode = MODE_ATTN;
      have_mode = 1;
    } else if (!strcmp(a, "--cold")) {
      o->cold = 1;
    } else if (!strcmp(a, "--q-dtype")) {
      NEED_VALUE();
      if (!strcmp(v, "fp8")) o->q_fp8 = 1;
      else if (!strcmp(v, "bf16")) o->q_fp8 = 0;
      else die("--q-dtype: '%s' is not fp8 or bf16", v);
    } else if (!strcmp(a, "--kv")) {
      NEED_VALUE();
      if (!strcmp(v, "fp8")) o->kv_fp8 = 1;
      else if (!strcmp(v, "bf16")) o->kv_fp8 = 0;
      else die("--kv: '%s' is not fp8 or bf16", v);
    } else if (!strcmp(a, "--heads")) {
      NEED_VALUE();
      o->heads = parse_int(v, 1, DSA_MAX_ATTN_HEADS, a);
    } else if (!strcmp(a, "--index-heads")) {
      NEED_VALUE();
      o->index_heads = parse_int(v, 1, DSA_MAX_INDEX_HEADS, a);
    } else if (!strcmp(a, "--topk")) {
      NEED_VALUE();
      o->topk = parse_int(v, 1, DSA_MAX_TOPK, a);
    } else if (!strcmp(a, "--batch")) {
      NEED_VALUE();
      o->batch = parse_int(v, 1, 4096, a);
    } else if (!strcmp(a, "--mtp")) {
      NEED_VALUE();
      o->mtp = parse_int(v, 1, DSA_MAX_Q_LEN_PER_REQ, a);
    } else if (!strcmp(a, "--prefill-tokens")) {
      NEED_VALUE();
      o->prefill_tokens = parse_int(v, 1, 65536, a);
    } else if (!strcmp(a, "--ws-limit-mib")) {
      NEED_VALUE();
      o->ws_limit_mib = parse_int(v, 0, 1 << 20, a);
    } else if (!strcmp(a, "--sizes")) {
      NEED_VALUE();
      o->nsizes = parse_list(v, a, o->sizes, MAX_SIZES, 1);
    } else if (!strcmp(a, "--batches")) {
      NEED_VALUE();
      int64_t tmp[MAX_BATCHES];
      o->nbatches = parse_list(v, a, tmp, MAX_BATCHES, 0);
      o->batches_given = 1;
      for (int k = 0; k < o->nbatches; k++) o->batches[k] = (int)tmp[k];
    } else if (!strcmp(a, "--shape")) {
      NEED_VALUE();
      o->shape = v;
    } else if (!strcmp(a, "--only")) {
      NEED_VALUE();
      if (!strcmp(v, "decode")) o->do_prefill = 0;
      else if (!strcmp(v, "prefill")) o->do_decode = 0;
      else die("--only: '%s' is not decode or prefill", v);
    } else if (!strcmp(a, "--iters")) {
      NEED_VALUE();
      o->iters = parse_int(v, 1, 100000, a);
    } else if (!strcmp(a, "--warmup")) {
      NEED_VALUE();
      o->warmup = parse_int(v, 0, 100000, a);
    } else if (!strcmp(a, "--check")) {
      o->check = 1;
    } else if (!strcmp(a, "--json")) {
      NEED_VALUE();
      o->json = v;
    } else if (!strcmp(a, "--seed")) {
      NEED_VALUE();
      o->seed = (uint64_t)parse_int(v, 0, 2147483647, a);
    } else if (!strcmp(a, "--device")) {
      NEED_VALUE();
      o->device = parse_int(v, 0, 1023, a);
    } else if (!strcmp(a, "--no-gate")) {
      o->gate = 0;
    } else {
      fprintf(stderr, "dsa-bench: unknown argument '%s'\n\n", a);
      usage(stderr);
      exit(1);
    }
#undef NEED_VALUE
  }
  if (!have_mode) {
    usage(stderr);
    exit(1);
  }
  if (o->nsizes == 0) {
    static const int64_t glm_sizes[] = {512,   1024,   2048,   8192,   16384,  32768,
                                        65536, 90000, 131072, 262144, 524288, 1048576};
    static const int64_t serve_sizes[] = {8192, 32768, 65536};
    const int64_t *src = o->mode == MODE_GLM ? glm_sizes : serve_sizes;
    o->nsizes = o->mode == MODE_GLM ? 12 : 3;
    memcpy(o->sizes, src, sizeof(int64_t) * (size_t)o->nsizes);
  }
  if (o->nbatches == 0) {
    o->batches[0] = 64;
    o->batches[1] = 128;
    o->batches[2] = 256;
    o->nbatches = 3;
  }
}

/* Exit 2 unless the chosen device is an sm_90 GPU. */
static void require_sm90(int device, char *name, size_t name_len) {
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

/* ---------------------------------------------------------------------------------------------- */
/* The benchmark state: one pool of inputs sized for the largest row                              */
/* ---------------------------------------------------------------------------------------------- */

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
  int32_t *page_pos;        /* [num_pages]: block index of a page in the checked request, or -1 */
  uint8_t *mark;            /* [max_S] */
  int32_t *ref_topk;        /* [topk] */
  float *h_score_row;       /* [max_S] */
} bench;

static void ensure_ws(void **p, size_t *cap, size_t need) {
  if (need <= *cap && *p) return;
  if (*p) CK(cudaFree(*p));
  *p = dmalloc(need);
  *cap = need;
}

/* ---- --cold: replays rotate over replicas of the row's inputs ---- */
#define COLD_MAX_REPLICAS 128

/* Replicas a stage needs so that a replica's inputs come back only after >= 2 x L2 of the others'
 * (as the 61 layers of a model would pass in between): ceil(2 L2 / the bytes one replay reads).
 * Uncapped: a stage whose need exceeds the replicas that fit (COLD_MAX_REPLICAS, pool pages) is
 * timed with the 256 MB write before each replay instead. */
static int cold_need(const bench *b, double replay_bytes) {
  if (!b->o.cold) return 1;
  const double k = ceil(2.0 * (double)b->l2_bytes / (replay_bytes > 4096.0 ? replay_bytes : 4096.0));
  return k < 1.0 ? 1 : k > 1e6 ? 1000000 : (int)k;
}

/* Block tables of replicas 1..K-1, B requests of nb pages each (layout [K-1][B][nb]): pages of the
 * pool that replica 0 (requests 0..B-1, columns 0..nb-1 of the ordinary block table) does not use,
 * in the pool's permutation order. Returns how many replicas fit (<= K, >= 1). */
static int cold_block_tables(bench *b, int B, int64_t nb, int K) {
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
static void cold_queries(bench *b, int K, int T, int H) {
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
static void *cold_qi(const bench *b, int j, int T) {
  return (uint8_t *)b->d_qi_rot + (size_t)(j - 1) * T * b->o.index_heads * IDX_DIM * b->q_elem_bytes;
}
static uint16_t *cold_qa(const bench *b, int j, int T, int H) { return b->d_qa_rot + (size_t)(j - 1) * T * H * QK_DIM; }
static int32_t *cold_topk(const bench *b, int j, int T) { return b->d_topk_rot + (size_t)(j - 1) * T * b->o.topk; }
static int32_t *cold_lens(const bench *b, int j, int T) { return b->d_lens_rot + (size_t)(j - 1) * T; }

static void setup(bench *b, int n_req, int64_t max_S, int max_tokens, int max_heads,
                  size_t scores_elems) {
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
  CK((cudaError_t)bench_gen_index_k(b->d_index_k, b->num_pages, o->seed));
  CK((cudaError_t)bench_gen_kv(b->d_kv, b->num_slots, o->kv_fp8, o->seed));
  if (o->check) { /* the references read host copies */
    CK(cudaMemcpy(b->h_index_k, b->d_index_k, (size_t)b->num_pages * IDX_PAGE_BYTES, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b->h_kv, b->d_kv, (size_t)b->num_slots * b->kv_slot_bytes, cudaMemcpyDeviceToHost));
  }
  rng r;

  /* Block table: a random permutation of all pages; request q owns row q. */
  r = rng_make(o->seed, 3);
  b->h_block_table = xmalloc(sizeof(int32_t) * (size_t)b->num_pages);
  for (int64_t i = 0; i < b->num_pages; i++) b->h_block_table[i] = (int32_t)i;
  for (int64_t i = b->num_pages - 1; i > 0; i--) {
    int64_t j = (int64_t)(rng_next(&r) % (uint64_t)(i + 1));
    int32_t t = b->h_block_table[i];
    b->h_block_table[i] = b->h_block_table[j];
    b->h_block_table[j] = t;
  }
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
  r = rng_make(o->seed, 4);
  b->h_q_idx = xmalloc(n_qidx * b->q_elem_bytes);
  if (o->q_fp8)
    fill_fp8(b->h_q_idx, n_qidx, &r);
  else
    fill_bf16((uint16_t *)(void *)b->h_q_idx, n_qidx, &r, -7, 9);
  b->h_q_scale = xmalloc(sizeof(float) * (size_t)max_tokens * ih);
  fill_scales(b->h_q_scale, (size_t)max_tokens * ih, &r, 0.01f, 0.1f);
  b->h_weights = xmalloc(sizeof(float) * (size_t)max_tokens * ih);
  for (size_t i = 0; i < (size_t)max_tokens * ih; i++) {
    float w = 2.0f * rng_unif(&r) - 1.0f;
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
  r = rng_make(o->seed, 5);
  b->h_q_attn = xmalloc(n_qattn * 2);
  fill_bf16(b->h_q_attn, n_qattn, &r, -6, 7);
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
  b->page_pos = xmalloc(sizeof(int32_t) * (size_t)b->num_pages);
  for (int64_t i = 0; i < b->num_pages; i++) b->page_pos[i] = -1;
  b->mark = xmalloc((size_t)max_S);
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

static void teardown(bench *b) {
  void *dev[] = {b->d_index_k, b->d_kv,     b->d_block_table, b->d_seq_lens, b->d_row_starts,
                 b->d_row_ends, b->d_ws_slots, b->d_q_idx,   b->d_q_scale,  b->d_weights,
                 b->d_q_attn,  b->d_scores, b->d_topk,       b->d_lens,     b->d_out,
                 b->d_lse,     b->d_ws_idx, b->d_ws_attn,     b->d_flush};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
    if (dev[i]) CK(cudaFree(dev[i]));
  void *host[] = {b->h_index_k, b->h_kv,     b->h_block_table, b->h_seq_lens, b->h_row_starts,
                  b->h_row_ends, b->h_ws_slots, b->h_q_idx,   b->h_q_scale,  b->h_weights,
                  b->h_q_attn,  b->h_topk,   b->h_lens,       b->page_pos,   b->mark,
                  b->ref_topk,  b->h_score_row};
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
  for (int i = 0; i < 2 * TIME_CHUNK; i++) CK(cudaEventDestroy(b->ev[i]));
  CK(cudaStreamDestroy(b->stream));
}

/* ---------------------------------------------------------------------------------------------- */
/* Argument structs (device pointers, or host pointers for the reference)                         */
/* ---------------------------------------------------------------------------------------------- */

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
static dsa_indexer_query query_from_token(const bench *b, dsa_indexer_query q, int t) {
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

static dsa_indexer_decode_args decode_args(const bench *b, int B, int64_t S, int host) {
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

static dsa_indexer_prefill_args prefill_args(const bench *b, int64_t S, int host) {
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

static dsa_sparse_mla_args attn_args(const bench *b, int T, int H, int host) {
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

/* ---------------------------------------------------------------------------------------------- */
/* Stages and their timing                                                                         */
/* ---------------------------------------------------------------------------------------------- */

typedef enum { ST_DEC_SCORES, ST_DEC_INDEXER, ST_PRE_SCORES, ST_PRE_INDEXER, ST_ATTN } stage_kind;

typedef struct {
  stage_kind kind;
  const void *args;
  void *ws;
  size_t ws_bytes;
} stage;

/* The attention stage over args m (which must outlive it): its workspace sized and held in the pool. */
static stage attn_stage(bench *b, const dsa_sparse_mla_args *m) {
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
  }
  return "?";
}

static void stage_run(const stage *s, cudaStream_t st) {
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
static double time_stage(bench *b, const stage *s, int K, int flush, char *mode, int *gate_timeouts) {
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

/* ---------------------------------------------------------------------------------------------- */
/* Rows                                                                                            */
/* ---------------------------------------------------------------------------------------------- */

typedef enum { TBL_DECODE, TBL_PREFILL, TBL_SERVE_DECODE, TBL_SERVE_ATTN, TBL_ATTN } table_kind;
static const char *TABLE_NAMES[] = {"decode", "prefill", "serve-decode", "serve-attention", "attention"};

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

static void row_init(row_result *r, table_kind t) {
  memset(r, 0, sizeof *r);
  r->table = t;
  r->ms_scores = r->ms_indexer = r->ms_topk = r->ms_attn = r->ms_total = -1.0;
  strcpy(r->timing, "---");
  r->replicas = 1;
  r->check = -1;
}

static void set_floors(const bench *b, row_result *r, int64_t context_keys) {
  double q_peak = b->o.q_fp8 ? FP8_FLOP_S : BF16_FLOP_S;
  if (r->scored > 0) {
    r->floor_scores = fmax((double)context_keys * IDX_ROW_BYTES / BW_BYTES_S,
                           2.0 * (double)r->scored * b->o.index_heads * IDX_DIM / q_peak);
    r->floor_topk = (double)r->scored * 4.0 / BW_BYTES_S;
  }
  r->floor_attn = fmax((double)r->selected * (double)b->kv_slot_bytes / BW_BYTES_S,
                       2.0 * (double)r->selected * r->heads * (QK_DIM + V_DIM) / BF16_FLOP_S);
}

static const ref_point *find_ref(int64_t S) {
  for (int i = 0; i < REF_POINTS; i++)
    if (REF_TABLE[i].s == S) return &REF_TABLE[i];
  return NULL;
}

/* Poison the outputs, then run the given stages once, in order, and wait. */
static void poison_and_run(bench *b, int T, int H, size_t score_elems, const stage *const *stages,
                           int n) {
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

/* ---------------------------------------------------------------------------------------------- */
/* Checks against the CPU reference (DESIGN.md §5)                                                */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
  int fails;
  char msg[320];
} check_state;

static void check_fail(check_state *c, const char *fmt, ...) {
  if (c->fails++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
  }
}

static double score_tol(const bench *b) { return b->o.q_fp8 ? 2e-3 : 1e-5; }

/* max |gpu - ref| <= tol * max |ref| over the row. */
static void check_scores(check_state *c, int t, const float *gpu, const double *ref, int L, double tol) {
  double maxref = 0.0, maxdiff = 0.0;
  int worst = 0;
  for (int i = 0; i < L; i++) maxref = fmax(maxref, fabs(ref[i]));
  for (int i = 0; i < L; i++) {
    double d = fabs((double)gpu[i] - ref[i]);
    if (!(d <= maxdiff)) { /* NaN (unwritten) counts as worst */
      maxdiff = isnan(d) ? INFINITY : d;
      worst = i;
    }
  }
  if (!(maxdiff <= tol * maxref))
    check_fail(c, "token %d scores: |gpu-ref| = %.3g at %d (gpu %.6g, ref %.6g) > %.1e * max|ref| %.4g",
               t, maxdiff, worst, (double)gpu[worst], ref[worst], tol, maxref);
}

/* Top-k of one token. idx holds global slots; page_pos maps a slot's page to its block index in
 * the context, so position = page_pos[slot / PAGE] * PAGE + slot % PAGE, taken relative to begin.
 * ref (L reference scores) may be NULL when L <= topk (every position must be selected). */
static void check_topk(bench *b, check_state *c, int t, const double *ref, int64_t begin, int L,
                       const int32_t *idx, int32_t len, double tol) {
  int topk = b->o.topk;
  int k = L < topk ? L : topk;
  if (len != k) {
    check_fail(c, "token %d: lens = %d, expected %d", t, len, k);
    return;
  }
  memset(b->mark, 0, (size_t)L);
  for (int i = 0; i < topk; i++) {
    int32_t s = idx[i];
    if (i >= k) {
      if (s != -1) {
        check_fail(c, "token %d: entry %d past lens = %d is %d, expected -1", t, i, k, s);
        return;
      }
      continue;
    }
    int64_t pos = -1;
    if (s >= 0 && s < b->num_slots && b->page_pos[s / PAGE] >= 0)
      pos = (int64_t)b->page_pos[s / PAGE] * PAGE + s % PAGE - begin;
    if (pos < 0 || pos >= L) {
      check_fail(c, "token %d: entry %d = slot %d is not one of its %d visible positions", t, i, s, L);
      return;
    }
    if (b->mark[pos]) {
      check_fail(c, "token %d: slot %d selected twice", t, s);
      return;
    }
    b->mark[pos] = 1;
  }
  if (L <= topk) return; /* k = L distinct visible positions: all of them */
  int n = dsa_ref_topk_row_f64(ref, L, topk, b->ref_topk);
  double kth = ref[b->ref_topk[n - 1]];
  double maxref = 0.0;
  for (int i = 0; i < L; i++) maxref = fmax(maxref, fabs(ref[i]));
  double eps = tol * maxref;
  for (int i = 0; i < L; i++) {
    if (b->mark[i] && ref[i] < kth - eps) {
      check_fail(c, "token %d: position %d selected with score %.6g < k-th %.6g - eps %.3g", t, i,
                 ref[i], kth, eps);
      return;
    }
    if (!b->mark[i] && ref[i] > kth + eps) {
      check_fail(c, "token %d: position %d (score %.6g > k-th %.6g + eps %.3g) not selected", t, i,
                 ref[i], kth, eps);
      return;
    }
  }
}

/* Attention of tokens [t0, t0 + nt) on the GPU's own top-k (h_topk / h_lens already copied). */
static void check_attention(bench *b, check_state *c, int t0, int nt, int H) {
  dsa_sparse_mla_args ra = attn_args(b, nt, H, 1);
  size_t n_out = (size_t)nt * H * V_DIM;
  ra.q = b->h_q_attn + (size_t)t0 * H * QK_DIM;
  ra.indices = b->h_topk + (size_t)t0 * b->o.topk;
  ra.lens = b->h_lens + t0;
  float *ref_out = xmalloc(sizeof(float) * n_out);
  float *ref_lse = xmalloc(sizeof(float) * (size_t)nt * H);
  uint16_t *gpu_out = xmalloc(2 * n_out);
  float *gpu_lse = xmalloc(sizeof(float) * (size_t)nt * H);
  ra.lse = ref_lse;
  dsa_ref_sparse_mla(&ra, ref_out);
  CK(cudaMemcpy(gpu_out, b->d_out + (size_t)t0 * H * V_DIM, 2 * n_out, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(gpu_lse, b->d_lse + (size_t)t0 * H, sizeof(float) * (size_t)nt * H,
                cudaMemcpyDeviceToHost));
  for (int t = 0; t < nt; t++) {
    double num = 0.0, den = 0.0;
    for (size_t i = (size_t)t * H * V_DIM; i < (size_t)(t + 1) * H * V_DIM; i++) {
      double g = dsa_bf16_to_float(gpu_out[i]), r = ref_out[i];
      num += (g - r) * (g - r);
      den += r * r;
    }
    double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    if (!(rel <= 1e-2)) {
      check_fail(c, "token %d attention: ||out-ref||/||ref|| = %.3g > 1e-2", t0 + t, rel);
      break;
    }
    for (int h = 0; h < H; h++) {
      double g = gpu_lse[t * H + h], r = ref_lse[t * H + h];
      int ok = isinf(r) ? (g == r) : fabs(g - r) <= 1e-3 * fmax(1.0, fabs(r));
      if (!ok) {
        check_fail(c, "token %d head %d: lse %.7g, ref %.7g", t0 + t, h, g, r);
        break;
      }
    }
  }
  free(ref_out);
  free(ref_lse);
  free(gpu_out);
  free(gpu_lse);
}

static void copy_topk_back(bench *b, int T) {
  CK(cudaMemcpy(b->h_topk, b->d_topk, sizeof(int32_t) * (size_t)T * b->o.topk,
                cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b->h_lens, b->d_lens, sizeof(int32_t) * (size_t)T, cudaMemcpyDeviceToHost));
}

/* page_pos for the first `blocks` pages of block-table row r (set = 1) or back to -1 (set = 0). */
static void map_pages(bench *b, int r, int64_t blocks, int set) {
  const int32_t *bt = b->h_block_table + (size_t)r * b->ppr;
  for (int64_t j = 0; j < blocks; j++) b->page_pos[bt[j]] = set ? (int32_t)j : -1;
}

/* GPU scores of token t, positions [0, L), from a row of stride S. */
static const float *gpu_scores_row(bench *b, int t, int64_t S, int L) {
  CK(cudaMemcpy(b->h_score_row, b->d_scores + (size_t)t * S, sizeof(float) * (size_t)L,
                cudaMemcpyDeviceToHost));
  return b->h_score_row;
}

static void finish_check(row_result *row, const check_state *c, double t0) {
  row->check = c->fails;
  row->check_s = now_s() - t0;
  snprintf(row->check_msg, sizeof row->check_msg, "%s", c->fails ? c->msg : "ok");
}

/* Decode: requests (all, or a sample), every token: scores, top-k, attention. */
static void check_decode(bench *b, row_result *row, int B, int64_t S, int sample, int check_attn) {
  double t0 = now_s();
  check_state c = {0, ""};
  int n = b->o.mtp, H = row->heads;
  copy_topk_back(b, B * n);
  int reqs[3] = {0, B / 2, B - 1};
  int nreq = sample ? 3 : B;
  double *ref = xmalloc(sizeof(double) * (size_t)n * (size_t)S);
  for (int qi = 0; qi < nreq && !c.fails; qi++) {
    int r = sample ? reqs[qi] : qi;
    if (sample && qi > 0 && r == reqs[qi - 1]) continue;
    dsa_indexer_decode_args ha = decode_args(b, B, S, 1);
    ha.query = query_from_token(b, ha.query, r * n);
    ha.seq_lens += r;
    ha.block_table += (size_t)r * b->ppr;
    ha.num_reqs = 1;
    int scored = 0;
    for (int j = 0; j < n; j++) scored |= dsa_ref_decode_len(&ha, j) > b->o.topk;
    if (scored) dsa_ref_indexer_decode_scores_f64(&ha, ref, S);
    map_pages(b, r, ceil_div(S, PAGE), 1);
    for (int j = 0; j < n; j++) {
      int t = r * n + j, L = dsa_ref_decode_len(&ha, j);
      const double *rrow = ref + (size_t)j * S;
      if (L > b->o.topk) check_scores(&c, t, gpu_scores_row(b, t, S, L), rrow, L, score_tol(b));
      check_topk(b, &c, t, L > b->o.topk ? rrow : NULL, 0, L, b->h_topk + (size_t)t * b->o.topk,
                 b->h_lens[t], score_tol(b));
    }
    map_pages(b, r, ceil_div(S, PAGE), 0);
    if (check_attn && !c.fails) check_attention(b, &c, r * n, n, H);
  }
  free(ref);
  finish_check(row, &c, t0);
}

/* Prefill: tokens 0, 31, 63 alone (1-token views of the host arguments). */
static void check_prefill(bench *b, row_result *row, int64_t S) {
  double t0 = now_s();
  check_state c = {0, ""};
  const int T = b->o.prefill_tokens;
  const int toks[3] = {0, T / 2 > 0 ? T / 2 - 1 : 0, T - 1};
  copy_topk_back(b, T);
  double *ref = xmalloc(sizeof(double) * (size_t)S);
  map_pages(b, 0, ceil_div(S, PAGE), 1);
  for (int k = 0; k < 3 && !c.fails; k++) {
    int t = toks[k];
    dsa_indexer_prefill_args ha = prefill_args(b, S, 1);
    ha.query = query_from_token(b, ha.query, t);
    ha.row_starts += t;
    ha.row_ends += t;
    ha.num_tokens = 1;
    int64_t begin = 0;
    int L = dsa_ref_prefill_range(&ha, 0, &begin);
    if (L > b->o.topk) {
      dsa_ref_indexer_prefill_scores_f64(&ha, ref, S);
      /* The GPU writes row w at scores[t * stride + (w - row_starts[t])]. */
      int64_t off = begin - b->h_row_starts[t];
      CK(cudaMemcpy(b->h_score_row, b->d_scores + (size_t)t * S + off, sizeof(float) * (size_t)L,
                    cudaMemcpyDeviceToHost));
      check_scores(&c, t, b->h_score_row, ref, L, score_tol(b));
    }
    check_topk(b, &c, t, L > b->o.topk ? ref : NULL, begin, L, b->h_topk + (size_t)t * b->o.topk,
               b->h_lens[t], score_tol(b));
    if (!c.fails) check_attention(b, &c, t, 1, row->heads);
  }
  map_pages(b, 0, ceil_div(S, PAGE), 0);
  free(ref);
  finish_check(row, &c, t0);
}

/* ---------------------------------------------------------------------------------------------- */
/* Row runners                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

static void upload_seq_lens(bench *b, int B, int64_t S) {
  for (int r = 0; r < b->n_req; r++) b->h_seq_lens[r] = (int32_t)S;
  CK(cudaMemcpy(b->d_seq_lens, b->h_seq_lens, sizeof(int32_t) * (size_t)B, cudaMemcpyHostToDevice));
}

/* sc, ix, at: K replicas each; need_*: the replicas each stage would need (--cold). */
static void time_three(bench *b, row_result *row, const stage *sc, const stage *ix, const stage *at, int K,
                       int need_sc, int need_at) {
  row->replicas = K;
  row->flushed = (need_sc > K) + (need_sc > K) + (need_at > K);
  row->ms_scores = time_stage(b, sc, K, need_sc > K, &row->timing[0], &row->gate_timeouts);
  row->ms_indexer = time_stage(b, ix, K, need_sc > K, &row->timing[1], &row->gate_timeouts);
  row->ms_attn = time_stage(b, at, K, need_at > K, &row->timing[2], &row->gate_timeouts);
  row->ms_topk = row->ms_indexer - row->ms_scores;
  row->ms_total = row->ms_indexer + row->ms_attn;
}

/* --cold: the attention stage of replicas 0..K-1 — replica j > 0 reads its own q copy and the top-k
 * its indexer replica writes (cold_topk / cold_lens). *mr_out: the args the stages point to (the
 * caller frees both arrays after timing). */
static stage *attn_replicas(bench *b, const dsa_sparse_mla_args *m, const stage *at0, int K, int T, int H,
                            dsa_sparse_mla_args **mr_out) {
  dsa_sparse_mla_args *mr = xmalloc(sizeof *mr * (size_t)K);
  stage *at = xmalloc(sizeof *at * (size_t)K);
  for (int j = 0; j < K; j++) {
    mr[j] = *m;
    if (j > 0) {
      mr[j].q = cold_qa(b, j, T, H);
      mr[j].indices = cold_topk(b, j, T);
      mr[j].lens = cold_lens(b, j, T);
    }
    at[j] = (stage){ST_ATTN, &mr[j], at0->ws, at0->ws_bytes};
  }
  *mr_out = mr;
  return at;
}

/* After replica 0's run (and --check): each other replica's top-k once, for its attention to read,
 * then the three stages timed over the K replicas. */
static void time_replicas(bench *b, row_result *row, const stage *sc, const stage *ix, const stage *at, int K,
                          int need_sc, int need_at) {
  for (int j = 1; j < K; j++) stage_run(&ix[j], b->stream);
  time_three(b, row, sc, ix, at, K, need_sc, need_at);
}

static void run_decode_row(bench *b, row_result *row, table_kind tbl, int B, int64_t S) {
  const options *o = &b->o;
  int n = o->mtp, T = B * n, H = o->heads;
  row_init(row, tbl);
  row->batch = B;
  row->q_len = n;
  row->tokens = T;
  row->heads = H;
  row->S = S;
  for (int j = 0; j < n; j++) {
    int64_t L = imax64(0, S - (n - 1) + j);
    row->candidates += B * L;
    if (L > o->topk) row->scored += B * L;
    row->selected += B * imin64(L, o->topk);
  }
  upload_seq_lens(b, B, S);

  dsa_indexer_decode_args a = decode_args(b, B, S, 0);
  dsa_indexer_decode_scores_args sa;
  memset(&sa, 0, sizeof sa);
  sa.decode = a;
  sa.scores = b->d_scores;
  sa.scores_stride = S;
  sa.skip_short_rows = 1;
  dsa_sparse_mla_args m = attn_args(b, T, H, 0);
  size_t ws_i = 0;
  DSA_CK(dsa_indexer_decode_workspace_size(&a, &ws_i));
  row->indexer_ws = (int64_t)ws_i;
  ensure_ws(&b->d_ws_idx, &b->ws_idx_cap, ws_i);
  stage at0 = attn_stage(b, &m);
  /* --cold: replicas 1..K-1 read other pages of the pool, their own q copies, their own top-k */
  const int need_sc = cold_need(b, (double)row->scored * IDX_ROW_BYTES);
  const int need_at = cold_need(b, (double)row->selected * (double)b->kv_slot_bytes);
  const int64_t nb = ceil_div(S, PAGE);
  const int K = cold_block_tables(b, B, nb, need_sc > need_at ? need_sc : need_at);
  cold_queries(b, K, T, H);
  dsa_indexer_decode_args *ar = xmalloc(sizeof *ar * (size_t)K);
  dsa_indexer_decode_scores_args *sar = xmalloc(sizeof *sar * (size_t)K);
  stage *sc = xmalloc(sizeof *sc * (size_t)K), *ix = xmalloc(sizeof *ix * (size_t)K);
  for (int j = 0; j < K; j++) {
    ar[j] = a;
    sar[j] = sa;
    if (j > 0) {
      ar[j].block_table = b->d_bt_rot + (size_t)(j - 1) * B * nb;
      ar[j].block_table_stride = nb;
      ar[j].query.q = cold_qi(b, j, T);
      ar[j].topk_indices = cold_topk(b, j, T);
      ar[j].topk_lens = cold_lens(b, j, T);
      sar[j].decode = ar[j];
    }
    sc[j] = (stage){ST_DEC_SCORES, &sar[j], NULL, 0};
    ix[j] = (stage){ST_DEC_INDEXER, &ar[j], b->d_ws_idx, ws_i};
  }
  dsa_sparse_mla_args *mr;
  stage *at = attn_replicas(b, &m, &at0, K, T, H, &mr);
  const stage *all[] = {&sc[0], &ix[0], &at[0]};
  poison_and_run(b, T, H, (size_t)T * (size_t)S, all, 3);
  if (o->check) check_decode(b, row, B, S, tbl == TBL_SERVE_DECODE, 1);
  time_replicas(b, row, sc, ix, at, K, need_sc, need_at);
  free(ar);
  free(sar);
  free(mr);
  free(sc);
  free(ix);
  free(at);
  set_floors(b, row, row->scored > 0 ? (int64_t)B * S : 0);
  const ref_point *rp = find_ref(S);
  if (tbl == TBL_DECODE && rp) {
    row->gluon_ms = rp->dec_gluon;
    row->triton_ms = rp->dec_triton;
  }
}

static void run_prefill_row(bench *b, row_result *row, int64_t S) {
  const options *o = &b->o;
  int T = o->prefill_tokens, H = o->heads;
  row_init(row, TBL_PREFILL);
  row->batch = 1;
  row->q_len = T;
  row->tokens = T;
  row->heads = H;
  row->S = S;
  for (int j = 0; j < T; j++) {
    int64_t L = S - (T - 1) + j;
    b->h_row_starts[j] = 0;
    b->h_row_ends[j] = (int32_t)L;
    row->candidates += L;
    if (L > o->topk) row->scored += L;
    row->selected += imin64(L, o->topk);
  }
  CK(cudaMemcpy(b->d_row_starts, b->h_row_starts, sizeof(int32_t) * T, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b->d_row_ends, b->h_row_ends, sizeof(int32_t) * T, cudaMemcpyHostToDevice));

  dsa_indexer_prefill_args a = prefill_args(b, S, 0);
  dsa_indexer_prefill_scores_args sa;
  memset(&sa, 0, sizeof sa);
  sa.prefill = a;
  sa.scores = b->d_scores;
  sa.scores_stride = S;
  sa.skip_short_rows = 1;
  dsa_sparse_mla_args m = attn_args(b, T, H, 0);
  size_t ws_i = 0;
  DSA_CK(dsa_indexer_prefill_workspace_size(&a, &ws_i));
  row->indexer_ws = (int64_t)ws_i;
  ensure_ws(&b->d_ws_idx, &b->ws_idx_cap, ws_i);
  stage at0 = attn_stage(b, &m);
  /* --cold: replicas 1..K-1 gather request 0's context from other pages of the pool */
  const int need_sc = cold_need(b, (double)S * IDX_ROW_BYTES); /* the tokens share their keys */
  const int need_at = cold_need(b, (double)row->selected * (double)b->kv_slot_bytes);
  const int64_t nb = ceil_div(S, PAGE);
  const int K = cold_block_tables(b, 1, nb, need_sc > need_at ? need_sc : need_at);
  cold_queries(b, K, T, H);
  if (K > 1) {
    const size_t n = (size_t)(K - 1) * (size_t)S;
    free(b->h_ws_rot);
    b->h_ws_rot = xmalloc(n * sizeof(int64_t));
    for (int j = 1; j < K; j++)
      for (int64_t i = 0; i < S; i++)
        b->h_ws_rot[(size_t)(j - 1) * S + i] = (int64_t)b->h_bt_rot[(size_t)(j - 1) * nb + i / PAGE] * PAGE + i % PAGE;
    ensure_ws((void **)&b->d_ws_rot, &b->ws_rot_cap, n * sizeof(int64_t));
    CK(cudaMemcpy(b->d_ws_rot, b->h_ws_rot, n * sizeof(int64_t), cudaMemcpyHostToDevice));
  }
  dsa_indexer_prefill_args *ar = xmalloc(sizeof *ar * (size_t)K);
  dsa_indexer_prefill_scores_args *sar = xmalloc(sizeof *sar * (size_t)K);
  stage *sc = xmalloc(sizeof *sc * (size_t)K), *ix = xmalloc(sizeof *ix * (size_t)K);
  for (int j = 0; j < K; j++) {
    ar[j] = a;
    sar[j] = sa;
    if (j > 0) {
      ar[j].kv_workspace_slots = b->d_ws_rot + (size_t)(j - 1) * S;
      ar[j].query.q = cold_qi(b, j, T);
      ar[j].topk_indices = cold_topk(b, j, T);
      ar[j].topk_lens = cold_lens(b, j, T);
      sar[j].prefill = ar[j];
    }
    sc[j] = (stage){ST_PRE_SCORES, &sar[j], NULL, 0};
    ix[j] = (stage){ST_PRE_INDEXER, &ar[j], b->d_ws_idx, ws_i};
  }
  dsa_sparse_mla_args *mr;
  stage *at = attn_replicas(b, &m, &at0, K, T, H, &mr);
  const stage *all[] = {&sc[0], &ix[0], &at[0]};
  poison_and_run(b, T, H, (size_t)T * (size_t)S, all, 3);
  if (o->check) check_prefill(b, row, S);
  time_replicas(b, row, sc, ix, at, K, need_sc, need_at);
  free(ar);
  free(sar);
  free(mr);
  free(sc);
  free(ix);
  free(at);
  set_floors(b, row, row->scored > 0 ? S : 0);
  const ref_point *rp = o->prefill_tokens == PREFILL_TOKENS ? find_ref(S) : NULL; /* the reference's shape */
  if (rp) {
    row->gluon_ms = rp->pre_gluon;
    row->triton_ms = rp->pre_triton;
  }
}

/* An attention-only row after one run: --check of tokens 0, T/2, T-1 against the reference (on the
 * indices in h_topk / h_lens), then the timing (K replicas; need: what --cold would want), the floor
 * and TFLOP/s. */
static void check_and_time_attention(bench *b, row_result *row, const stage *at, int K, int need, int T, int H) {
  if (b->o.check) {
    double t0 = now_s();
    check_state c = {0, ""};
    const int toks[3] = {0, T / 2, T - 1};
    for (int k = 0; k < 3 && !c.fails; k++) check_attention(b, &c, toks[k], 1, H);
    finish_check(row, &c, t0);
  }
  row->replicas = K;
  row->flushed = need > K;
  row->ms_attn = time_stage(b, at, K, need > K, &row->timing[2], &row->gate_timeouts);
  row->ms_total = row->ms_attn;
  set_floors(b, row, 0);
  row->tflops = 2.0 * (double)row->selected * H * (QK_DIM + V_DIM) / (row->ms_attn * 1e-3) / 1e12;
}

/* Serve: attention alone at SERVE_ATTN_BATCH requests x SERVE_ATTN_HEADS heads, over the top-k of
 * a decode step at context S (the indexer runs once, untimed, to produce it). */
static void run_serve_attn_row(bench *b, row_result *row, int64_t S) {
  const options *o = &b->o;
  int B = SERVE_ATTN_BATCH, n = o->mtp, T = B * n, H = SERVE_ATTN_HEADS;
  row_init(row, TBL_SERVE_ATTN);
  row->batch = B;
  row->q_len = n;
  row->tokens = T;
  row->heads = H;
  row->S = S;
  for (int j = 0; j < n; j++) {
    int64_t L = imax64(0, S - (n - 1) + j);
    row->candidates += B * L;
    row->selected += B * imin64(L, o->topk);
  }
  upload_seq_lens(b, B, S);
  dsa_indexer_decode_args a = decode_args(b, B, S, 0);
  dsa_sparse_mla_args m = attn_args(b, T, H, 0);
  size_t ws_i = 0;
  DSA_CK(dsa_indexer_decode_workspace_size(&a, &ws_i));
  row->indexer_ws = (int64_t)ws_i;
  ensure_ws(&b->d_ws_idx, &b->ws_idx_cap, ws_i);
  stage ix = {ST_DEC_INDEXER, &a, b->d_ws_idx, ws_i};
  stage at0 = attn_stage(b, &m);
  const stage *all[] = {&ix, &at0};
  poison_and_run(b, T, H, 0, all, 2);
  if (o->check) copy_topk_back(b, T);
  /* --cold: replicas 1..K-1: the indexer once on other pages of the pool, for their own top-k */
  const int need = cold_need(b, (double)row->selected * (double)b->kv_slot_bytes);
  const int64_t nb = ceil_div(S, PAGE);
  const int K = cold_block_tables(b, B, nb, need);
  cold_queries(b, K, T, H);
  dsa_sparse_mla_args *mr = xmalloc(sizeof *mr * (size_t)K);
  stage *at = xmalloc(sizeof *at * (size_t)K);
  for (int j = 0; j < K; j++) {
    mr[j] = m;
    if (j > 0) {
      dsa_indexer_decode_args aj = a;
      aj.block_table = b->d_bt_rot + (size_t)(j - 1) * B * nb;
      aj.block_table_stride = nb;
      aj.query.q = cold_qi(b, j, T);
      aj.topk_indices = cold_topk(b, j, T);
      aj.topk_lens = cold_lens(b, j, T);
      const stage ixj = {ST_DEC_INDEXER, &aj, b->d_ws_idx, ws_i};
      stage_run(&ixj, b->stream);
      mr[j].q = cold_qa(b, j, T, H);
      mr[j].indices = aj.topk_indices;
      mr[j].lens = aj.topk_lens;
    }
    at[j] = (stage){ST_ATTN, &mr[j], at0.ws, at0.ws_bytes};
  }
  CK(cudaStreamSynchronize(b->stream));
  check_and_time_attention(b, row, at, K, need, T, H);
  free(mr);
  free(at);
}

/* attn: sparse MLA alone. Decode rows: `reqs` requests of one token, each over its own
 * ATTN_DECODE_S-token context; prefill rows: `tokens` tokens at the end of request 0's
 * ATTN_PREFILL_S-token context (token t sees ATTN_PREFILL_S - tokens + 1 + t positions). Each token
 * selects topk distinct random visible positions (Floyd's sampling), mapped to slots through the
 * request's block-table row: every entry valid, lens = topk. */
typedef struct {
  const char *name;
  int prefill, reqs, tokens, heads;
} attn_shape;
static const attn_shape ATTN_SHAPES[] = {
    {"decode 1 x 16h", 0, 1, 1, 16},        {"decode 1 x 64h", 0, 1, 1, 64},
    {"decode 1 x 128h", 0, 1, 1, 128},      {"decode 64 x 16h", 0, 64, 64, 16},
    {"decode 64 x 64h", 0, 64, 64, 64},     {"decode 256 x 64h", 0, 256, 256, 64},
    {"decode 128 x 128h", 0, 128, 128, 128}, {"prefill 64 x 16h", 1, 1, 64, 16},
    {"prefill 64 x 64h", 1, 1, 64, 64},     {"prefill 64 x 128h", 1, 1, 64, 128},
    {"prefill 4096 x 128h", 1, 1, 4096, 128},
};
#define ATTN_NSHAPES ((int)(sizeof ATTN_SHAPES / sizeof ATTN_SHAPES[0]))

/* Replica j (--cold): requests j x reqs + t (decode) or j (prefill), written to d_topk / d_lens
 * (j = 0) or the replica's top-k (h_topk / h_lens keep replica 0's for --check). */
static void make_attn_indices(bench *b, const attn_shape *sh, rng *r, int j) {
  const int k = b->o.topk;
  int32_t *keep_topk = NULL, *keep_lens = NULL;
  if (j > 0) { /* h_topk / h_lens hold replica 0's: build this replica's in scratch, then restore */
    keep_topk = xmalloc(sizeof(int32_t) * (size_t)sh->tokens * k);
    keep_lens = xmalloc(sizeof(int32_t) * (size_t)sh->tokens);
    memcpy(keep_topk, b->h_topk, sizeof(int32_t) * (size_t)sh->tokens * k);
    memcpy(keep_lens, b->h_lens, sizeof(int32_t) * (size_t)sh->tokens);
  }
  for (int t = 0; t < sh->tokens; t++) {
    const int req = sh->prefill ? j : j * sh->reqs + t;
    const int64_t L = sh->prefill ? ATTN_PREFILL_S - sh->tokens + 1 + t : ATTN_DECODE_S;
    const int n = (int)imin64(k, L);
    int32_t *row = b->h_topk + (size_t)t * k, *pos = b->ref_topk; /* ref_topk: [topk] scratch */
    for (int64_t i = L - n, j = 0; i < L; i++, j++) { /* Floyd: n distinct positions of [0, L) */
      int64_t p = (int64_t)(rng_next(r) % (uint64_t)(i + 1));
      if (b->mark[p]) p = i;
      b->mark[p] = 1;
      pos[j] = (int32_t)p;
    }
    for (int j = 0; j < n; j++) {
      b->mark[pos[j]] = 0;
      row[j] = b->h_block_table[(int64_t)req * b->ppr + pos[j] / PAGE] * PAGE + pos[j] % PAGE;
    }
    for (int j = n; j < k; j++) row[j] = -1;
    b->h_lens[t] = n;
  }
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

static void run_attn_row(bench *b, row_result *row, const attn_shape *sh, int stream_id) {
  const options *o = &b->o;
  const int T = sh->tokens, H = sh->heads;
  row_init(row, TBL_ATTN);
  row->shape = sh->name;
  row->batch = sh->reqs;
  row->q_len = sh->prefill ? T : 1;
  row->tokens = T;
  row->heads = H;
  row->S = sh->prefill ? ATTN_PREFILL_S : ATTN_DECODE_S;
  rng r = rng_make(o->seed, 100 + (uint64_t)stream_id);
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
  const int per_replica = sh->prefill ? 1 : sh->reqs;
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

static void print_progress(const row_result *r) {
  char sl[32];
  if (r->table == TBL_ATTN)
    printf("%-20s", r->shape);
  else
    printf("%-15s S=%-5s B=%-3d", TABLE_NAMES[r->table], size_label(r->S, sl, sizeof sl), r->batch);
  if (r->ms_scores >= 0)
    printf(" scores %.4f  indexer %.4f", r->ms_scores, r->ms_indexer);
  printf("  attn %.4f ms [%s]", r->ms_attn, r->timing);
  if (r->gate_timeouts) printf(" (%d gate timeout(s))", r->gate_timeouts);
  if (r->replicas > 1 || r->flushed) printf("  cold: %d replica(s)%s", r->replicas, r->flushed ? ", flush" : "");
  if (r->check >= 0)
    printf("  check %s (cpu reference %.1f s)", r->check ? "FAILED" : "ok", r->check_s);
  printf("\n");
  if (r->check > 0) printf("  check failure: %s\n", r->check_msg);
  fflush(stdout);
}

/* ---------------------------------------------------------------------------------------------- */
/* Output                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

static const char *fmt_pct(char *buf, size_t n, double floor_s, double ms) {
  if (floor_s <= 0.0 || ms <= 0.0)
    snprintf(buf, n, "-");
  else
    snprintf(buf, n, "%.1f", floor_s / (ms * 1e-3) * 100.0);
  return buf;
}

static const char *check_word(const row_result *r) {
  return r->check < 0 ? "-" : r->check ? "FAIL" : "ok";
}

static void print_config(const bench *b, const char *title) {
  const options *o = &b->o;
  printf("\n== %s | %s | indexer %dx%d q-%s topk %d page %d | attention %d heads kv-%s | median of "
         "%d %s; top-k = indexer - scores\n",
         title, b->dev_name, o->index_heads, IDX_DIM, o->q_fp8 ? "fp8" : "bf16", o->topk, PAGE,
         o->heads, o->kv_fp8 ? "fp8" : "bf16", o->iters, o->gate ? "gated replays" : "replays");
  if (o->cold) printf("cold: replays rotate over input replicas >= 2 x L2 apart (256 MB flush where too few fit)\n");
}

static void print_stage_table(const bench *b, const char *title, const row_result *rows, int n,
                              table_kind tbl) {
  int any = 0;
  for (int i = 0; i < n; i++) any |= rows[i].table == tbl;
  if (!any) return;
  print_config(b, title);
  printf("%6s %4s %10s %9s %9s %9s %9s %6s %6s %6s %6s %7s %6s %4s %5s\n", "S", "B", "cand",
         "scores_ms", "topk_ms", "attn_ms", "total_ms", "%sc", "%tk", "%at", "%tot", "gluon", "x",
         "t", "check");
  for (int i = 0; i < n; i++) {
    const row_result *r = &rows[i];
    if (r->table != tbl) continue;
    char sl[32], p1[16], p2[16], p3[16], p4[16], gl[16], ra[16], tm[8];
    if (r->gluon_ms > 0 && b->o.topk == 2048 && b->o.index_heads == 32 &&
        (tbl == TBL_PREFILL || (r->batch == 1 && r->q_len == 1))) {
      snprintf(gl, sizeof gl, "%.3f", r->gluon_ms);
      snprintf(ra, sizeof ra, "%.2f", r->ms_total / r->gluon_ms);
    } else {
      strcpy(gl, "-");
      strcpy(ra, "-");
    }
    snprintf(tm, sizeof tm, "%s%s", r->timing, r->gate_timeouts ? "*" : "");
    printf("%6s %4d %10lld %9.4f %9.4f %9.4f %9.4f %6s %6s %6s %6s %7s %6s %4s %5s\n",
           size_label(r->S, sl, sizeof sl), r->batch, (long long)r->candidates, r->ms_scores,
           r->ms_topk, r->ms_attn, r->ms_total, fmt_pct(p1, sizeof p1, r->floor_scores, r->ms_scores),
           fmt_pct(p2, sizeof p2, r->floor_topk, r->ms_topk),
           fmt_pct(p3, sizeof p3, r->floor_attn, r->ms_attn),
           fmt_pct(p4, sizeof p4, r->floor_scores + r->floor_topk + r->floor_attn, r->ms_total), gl,
           ra, tm, check_word(r));
  }
}

static void print_attn_table(const bench *b, const row_result *rows, int n) {
  int any = 0;
  for (int i = 0; i < n; i++) any |= rows[i].table == TBL_SERVE_ATTN;
  if (!any) return;
  printf("\n== serve attention alone | %s | %d requests x %d token(s), %d heads, topk %d, KV %s | "
         "median of %d\n",
         b->dev_name, SERVE_ATTN_BATCH, b->o.mtp, SERVE_ATTN_HEADS, b->o.topk,
         b->o.kv_fp8 ? "fp8" : "bf16", b->o.iters);
  printf("%6s %6s %5s %9s %8s %9s %6s %4s %5s\n", "S", "tokens", "heads", "attn_ms", "TFLOP/s",
         "%bf16pk", "%at", "t", "check");
  for (int i = 0; i < n; i++) {
    const row_result *r = &rows[i];
    if (r->table != TBL_SERVE_ATTN) continue;
    char sl[32], p3[16], tm[8];
    snprintf(tm, sizeof tm, "%s%s", r->timing, r->gate_timeouts ? "*" : "");
    printf("%6s %6d %5d %9.4f %8.1f %9.1f %6s %4s %5s\n", size_label(r->S, sl, sizeof sl), r->tokens,
           r->heads, r->ms_attn, r->tflops, r->tflops * 1e12 / BF16_FLOP_S * 100.0,
           fmt_pct(p3, sizeof p3, r->floor_attn, r->ms_attn), tm, check_word(r));
  }
}

static void print_attn_only_table(const bench *b, const row_result *rows, int n) {
  printf("\n== sparse MLA attention alone | %s | topk %d, KV %s | median of %d %s, %s L2\n", b->dev_name,
         b->o.topk, b->o.kv_fp8 ? "packed fp8 (656 B)" : "bf16 (1152 B)", b->o.iters,
         b->o.gate ? "gated replays" : "replays", b->o.cold ? "cold (rotating input replicas)" : "hot");
  printf("%-20s %6s %5s %10s %8s %8s %6s %4s %5s\n", "shape", "tokens", "heads", "attn_us", "TFLOP/s", "%bf16pk",
         "%floor", "t", "check");
  for (int i = 0; i < n; i++) {
    const row_result *r = &rows[i];
    if (r->table != TBL_ATTN) continue;
    char p3[16], tm[8];
    snprintf(tm, sizeof tm, "%s%s", r->timing, r->gate_timeouts ? "*" : "");
    printf("%-20s %6d %5d %10.1f %8.1f %8.1f %6s %4s %5s\n", r->shape, r->tokens, r->heads, r->ms_attn * 1e3,
           r->tflops, r->tflops * 1e12 / BF16_FLOP_S * 100.0, fmt_pct(p3, sizeof p3, r->floor_attn, r->ms_attn), tm,
           check_word(r));
  }
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", (unsigned)(unsigned char)*s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

/* A number, or null when not valid. */
static void json_num(FILE *f, double v, int valid) {
  if (valid && isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fprintf(f, "null");
}

static void json_pct(FILE *f, double floor_s, double ms) {
  json_num(f, floor_s > 0 && ms > 0 ? floor_s / (ms * 1e-3) * 100.0 : 0, floor_s > 0 && ms > 0);
}

static void write_json(const bench *b, const row_result *rows, int n, const char *path) {
  const options *o = &b->o;
  FILE *f = fopen(path, "w");
  if (!f) die("--json: cannot open '%s' for writing", path);
  char date[64];
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  int rt = 0, drv = 0;
  CK(cudaRuntimeGetVersion(&rt));
  CK(cudaDriverGetVersion(&drv));
  fprintf(f, "{\n  \"tool\": \"dsa-bench\",\n  \"dsa_version\": ");
  json_str(f, dsa_version());
  fprintf(f, ",\n  \"device\": ");
  json_str(f, b->dev_name);
  fprintf(f, ",\n  \"cuda_runtime\": %d,\n  \"cuda_driver\": %d,\n  \"date\": \"%s\",\n", rt, drv,
          date);
  fprintf(f, "  \"options\": {\"mode\": \"%s\", \"q_dtype\": \"%s\", \"kv\": \"%s\", \"heads\": %d, "
             "\"index_heads\": %d, \"index_head_dim\": %d, \"topk\": %d, \"page_size\": %d, "
             "\"batch\": %d, \"mtp\": %d, \"prefill_tokens\": %d, \"ws_limit_mib\": %d, \"iters\": %d, \"warmup\": %d, \"check\": %s, "
             "\"gate\": %s, \"cold\": %s, \"seed\": %llu, \"device\": %d, "
             "\"index_softmax_scale\": %.9g, \"attn_softmax_scale\": %.9g, \"sizes\": [",
          o->mode == MODE_GLM ? "glm" : o->mode == MODE_SERVE ? "serve" : "attn", o->q_fp8 ? "fp8" : "bf16",
          o->kv_fp8 ? "fp8" : "bf16",
          o->heads, o->index_heads, IDX_DIM, o->topk, PAGE, o->batch, o->mtp, o->prefill_tokens, o->ws_limit_mib, o->iters, o->warmup,
          o->check ? "true" : "false", o->gate ? "true" : "false", o->cold ? "true" : "false",
          (unsigned long long)o->seed,
          o->device, 1.0 / sqrt((double)IDX_DIM * o->index_heads), (double)ATTN_SCALE);
  for (int i = 0; i < o->nsizes; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)o->sizes[i]);
  fprintf(f, "], \"batches\": [");
  for (int i = 0; i < o->nbatches; i++) fprintf(f, "%s%d", i ? ", " : "", o->batches[i]);
  fprintf(f, "], \"shape_filter\": ");
  json_str(f, o->shape ? o->shape : "");
  fprintf(f, ", \"DSA_KERNEL\": "); /* the kernel override, "" = the choice tables' */
  json_str(f, getenv("DSA_KERNEL") ? getenv("DSA_KERNEL") : "");
  fprintf(f, "},\n  \"limits\": {\"bandwidth_B_per_s\": %.4g, \"bf16_flop_per_s\": %.4g, "
             "\"fp8_flop_per_s\": %.4g},\n  \"rows\": [\n",
          BW_BYTES_S, BF16_FLOP_S, FP8_FLOP_S);
  for (int i = 0; i < n; i++) {
    const row_result *r = &rows[i];
    fprintf(f, "    {\"table\": \"%s\", \"shape\": ", TABLE_NAMES[r->table]);
    json_str(f, r->shape ? r->shape : "");
    fprintf(f, ", \"S\": %lld, \"batch\": %d, \"q_len\": %d, \"tokens\": %d, "
               "\"heads\": %d, \"candidates\": %lld, \"scored_candidates\": %lld, "
               "\"selected\": %lld, \"indexer_workspace_bytes\": %lld",
            (long long)r->S, r->batch, r->q_len, r->tokens, r->heads,
            (long long)r->candidates, (long long)r->scored, (long long)r->selected, (long long)r->indexer_ws);
    fprintf(f, ", \"scores_ms\": ");
    json_num(f, r->ms_scores, r->ms_scores >= 0);
    fprintf(f, ", \"indexer_ms\": ");
    json_num(f, r->ms_indexer, r->ms_indexer >= 0);
    fprintf(f, ", \"topk_ms\": ");
    json_num(f, r->ms_topk, r->ms_indexer >= 0);
    fprintf(f, ", \"attn_ms\": ");
    json_num(f, r->ms_attn, r->ms_attn >= 0);
    fprintf(f, ", \"total_ms\": ");
    json_num(f, r->ms_total, r->ms_total >= 0);
    fprintf(f, ", \"floor_scores_ms\": %.6g, \"floor_topk_ms\": %.6g, \"floor_attn_ms\": %.6g",
            r->floor_scores * 1e3, r->floor_topk * 1e3, r->floor_attn * 1e3);
    fprintf(f, ", \"pct_floor_scores\": ");
    json_pct(f, r->floor_scores, r->ms_scores);
    fprintf(f, ", \"pct_floor_topk\": ");
    json_pct(f, r->floor_topk, r->ms_topk);
    fprintf(f, ", \"pct_floor_attn\": ");
    json_pct(f, r->floor_attn, r->ms_attn);
    fprintf(f, ", \"pct_floor_total\": ");
    json_pct(f, r->floor_scores + r->floor_topk + r->floor_attn, r->ms_total);
    fprintf(f, ", \"gluon_ms\": ");
    json_num(f, r->gluon_ms, r->gluon_ms > 0);
    fprintf(f, ", \"triton_ms\": ");
    json_num(f, r->triton_ms, r->triton_ms > 0);
    fprintf(f, ", \"ours_over_gluon\": ");
    json_num(f, r->gluon_ms > 0 ? r->ms_total / r->gluon_ms : 0, r->gluon_ms > 0);
    fprintf(f, ", \"attn_tflops\": ");
    json_num(f, r->tflops, r->table == TBL_SERVE_ATTN || r->table == TBL_ATTN);
    fprintf(f, ", \"cold_replicas\": %d, \"cold_flushed_stages\": %d", r->replicas, r->flushed);
    fprintf(f, ", \"timing\": \"%s\", \"gate_timeouts\": %d, \"check\": \"%s\", \"check_s\": ",
            r->timing, r->gate_timeouts, r->check < 0 ? "not run" : r->check ? "fail" : "ok");
    json_num(f, r->check_s, r->check >= 0);
    fprintf(f, ", \"check_message\": ");
    json_str(f, r->check > 0 ? r->check_msg : "");
    fprintf(f, "}%s\n", i + 1 < n ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  if (fclose(f) != 0) die("--json: error writing '%s'", path);
}

/* ---------------------------------------------------------------------------------------------- */
/* main                                                                                            */
/* ---------------------------------------------------------------------------------------------- */

#ifdef DSA_HAVE_CP
int cp_bench_main(int argc, char **argv); /* cp_bench.c */
#endif

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "cp")) {
#ifdef DSA_HAVE_CP
    return cp_bench_main(argc - 1, argv + 1);
#else
    fprintf(stderr, "dsa-bench cp: this build has no dsa_cp (NCCL was not found when it was configured)\n");
    return 2;
#endif
  }
  static bench b; /* large; zero-initialised */
  parse_args(argc, argv, &b.o);
  const options *o = &b.o;
  require_sm90(o->device, b.dev_name, sizeof b.dev_name);

  int64_t max_S = 0;
  for (int i = 0; i < o->nsizes; i++) max_S = imax64(max_S, o->sizes[i]);
  int nrows = 0;
  row_result *rows = NULL;

  if (o->mode == MODE_GLM) {
    int dec_T = o->do_decode ? o->batch * o->mtp : 0;
    int max_T = (int)imax64(dec_T, o->do_prefill ? o->prefill_tokens : 0);
    size_t scores = (size_t)imax64((int64_t)dec_T * max_S, o->do_prefill ? (int64_t)o->prefill_tokens * max_S : 0);
    rows = xmalloc(sizeof(row_result) * (size_t)(2 * o->nsizes));
    printf("dsa-bench glm on %s (dsa %s)\n", b.dev_name, dsa_version());
    setup(&b, o->do_decode ? o->batch : 1, max_S, max_T, o->heads, scores);
    if (o->do_decode)
      for (int i = 0; i < o->nsizes; i++) {
        run_decode_row(&b, &rows[nrows], TBL_DECODE, o->batch, o->sizes[i]);
        print_progress(&rows[nrows++]);
      }
    if (o->do_prefill)
      for (int i = 0; i < o->nsizes; i++) {
        if (o->sizes[i] < o->prefill_tokens) {
          printf("prefill S=%lld skipped: shorter than the %d query tokens\n",
                 (long long)o->sizes[i], o->prefill_tokens);
          continue;
        }
        run_prefill_row(&b, &rows[nrows], o->sizes[i]);
        print_progress(&rows[nrows++]);
      }
  } else if (o->mode == MODE_ATTN) {
    /* the fixed table, or (--batches given) decode rows of those batches x --heads heads */
    const attn_shape *shapes = ATTN_SHAPES;
    int nshapes = ATTN_NSHAPES;
    static attn_shape custom[MAX_BATCHES];
    static char custom_names[MAX_BATCHES][48];
    if (o->batches_given) {
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
    for (int i = 0; i < nshapes; i++) {
      max_T = shapes[i].tokens > max_T ? shapes[i].tokens : max_T;
      max_H = shapes[i].heads > max_H ? shapes[i].heads : max_H;
      max_R = shapes[i].reqs > max_R ? shapes[i].reqs : max_R;
    }
    rows = xmalloc(sizeof(row_result) * (size_t)nshapes);
    printf("dsa-bench attn on %s (dsa %s)\n", b.dev_name, dsa_version());
    setup(&b, max_R, imax64(ATTN_DECODE_S, ATTN_PREFILL_S), max_T, max_H, 0);
    for (int i = 0; i < nshapes; i++) {
      if (o->shape && !strstr(shapes[i].name, o->shape)) continue;
      run_attn_row(&b, &rows[nrows], &shapes[i], i);
      print_progress(&rows[nrows++]);
    }
  } else {
    int max_B = SERVE_ATTN_BATCH;
    for (int i = 0; i < o->nbatches; i++) max_B = o->batches[i] > max_B ? o->batches[i] : max_B;
    int max_T = max_B * o->mtp;
    int heads = o->heads > SERVE_ATTN_HEADS ? o->heads : SERVE_ATTN_HEADS;
    size_t scores = 0;
    for (int i = 0; i < o->nbatches; i++)
      scores = (size_t)imax64((int64_t)scores, (int64_t)o->batches[i] * o->mtp * max_S);
    rows = xmalloc(sizeof(row_result) * (size_t)(o->nbatches * o->nsizes + o->nsizes));
    printf("dsa-bench serve on %s (dsa %s)\n", b.dev_name, dsa_version());
    setup(&b, max_B, max_S, max_T, heads, scores);
    for (int bi = 0; bi < o->nbatches; bi++)
      for (int i = 0; i < o->nsizes; i++) {
        run_decode_row(&b, &rows[nrows], TBL_SERVE_DECODE, o->batches[bi], o->sizes[i]);
        print_progress(&rows[nrows++]);
      }
    for (int i = 0; i < o->nsizes; i++) {
      run_serve_attn_row(&b, &rows[nrows], o->sizes[i]);
      print_progress(&rows[nrows++]);
    }
  }

  /* Tables last: the device tool keeps the tail of the output. */
  char cfg[64];
  if (o->mode == MODE_ATTN) {
    print_attn_only_table(&b, rows, nrows);
  } else if (o->mode == MODE_GLM) {
    snprintf(cfg, sizeof cfg, "decode %d req x %d token", o->batch, o->mtp);
    print_stage_table(&b, cfg, rows, nrows, TBL_DECODE);
    snprintf(cfg, sizeof cfg, "prefill %d tokens at the end of S", o->prefill_tokens);
    print_stage_table(&b, cfg, rows, nrows, TBL_PREFILL);
  } else {
    snprintf(cfg, sizeof cfg, "serve decode B req x %d token", o->mtp);
    print_stage_table(&b, cfg, rows, nrows, TBL_SERVE_DECODE);
    print_attn_table(&b, rows, nrows);
  }
  printf("%%sc/%%tk/%%at/%%tot = floor/measured*100; floors: BW 4.27e12 B/s, bf16 790e12 FLOP/s, "
         "fp8 2x (see --help); t: g graph, p plain, * gate timeout\n");

  int failed = 0;
  for (int i = 0; i < nrows; i++) failed += rows[i].check > 0;
  if (o->json) {
    write_json(&b, rows, nrows, o->json);
    printf("wrote %s\n", o->json);
  }
  fflush(stdout);
  teardown(&b);
  free(rows);
  if (failed) {
    fprintf(stderr, "dsa-bench: %d row(s) failed the check\n", failed);
    return 1;
  }
  return 0;
}
