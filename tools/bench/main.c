/*
 * main.c — dsa-bench: timing tables of the dsa library at the reference shapes (DESIGN.md §6), with
 * the floors of DESIGN.md §7 and, on request, a check of every row against the CPU reference (§5).
 *
 *   dsa-bench glm [options]     decode and prefill tables at the GLM shapes, S = 512 ... 1M
 *   dsa-bench serve [options]   decode at serving batches, and attention TFLOP/s at b128 x h128
 *   dsa-bench attn [options]    sparse MLA attention alone at the shapes that decide serving cost
 *   dsa-bench cp [options]      one step over several GPUs through NCCL (cp.c)
 *   dsa-bench merge [options]   context parallelism's merge alone, simulated ranks (merge.c)
 *
 * How a row is measured:
 *   1. inputs: one pool of random data (index-K pages, MLA KV slots) sized for the largest row,
 *      pages of every request in random order; a smaller row uses a prefix of each context
 *      (setup.c);
 *   2. outputs are poisoned, then the three calls run once (scores alone, indexer, attention);
 *   3. --check: those outputs are compared with the float64 CPU reference (check.c);
 *   4. each stage (scores alone; indexer = scores + top-k; attention) is captured once into a CUDA
 *      graph on a non-blocking stream, replayed as warm-up, then every timed replay is bracketed
 *      by its own pair of CUDA events; the median is reported. Same buffers every replay (hot L2).
 *      While the replays of a batch are queued the stream is held by a host function ("gate"), so
 *      they then run back to back on the GPU and the host's launch rate never shows up in a
 *      measurement (timing.c).
 * This file: the usage text, the arguments, the dispatch to a mode, and the run's end.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

void die(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "dsa-bench: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

/* check.h's CK / DSA_CK report here: "dsa-bench: file:line: call: message", exit 1. */
static void ck_die(const char *file, int line, const char *call, const char *message) {
  die("%s:%d: %s: %s", file, line, call, message);
}

static void usage(FILE *f) {
  fprintf(f,
"usage: dsa-bench glm|serve|attn [options]   (dsa-bench cp --help: several GPUs, dsa_cp;\n"
"       dsa-bench merge --help: the context-parallel merge alone, simulated ranks)\n"
"\n"
"  glm    the reference tables of DESIGN.md §6 at the GLM shapes: decode (1 request x 1 query\n"
"         token) and prefill (64 query tokens at the end of an S-token context), S = 512 ... 1M.\n"
"         Indexer 32 heads x 128, FP8 index-K paged 64, topk 2048, weights float32;\n"
"         attention 16 heads, packed FP8 KV, scale (192+64)^-0.5. Pages in random order.\n"
"  serve  serving shapes: decode at batch 64/128/256 x context 8k/32k/64k (same columns), then the\n"
"         attention stage alone at batch 128 x 128 heads over that batch's top-k (TFLOP/s).\n"
"  attn   sparse MLA attention alone at the shapes that decide serving cost: decode 1 token x\n"
"         16/64/128 heads, 64 x 16/64, 256 x 64, 128 x 128 (each request its own 8k context), and\n"
"         prefill 64 x 16/64/128, 4096 x 128 tokens at the end of one 16k context, GLM's chunk of\n"
"         4096 x 16 (and x 8, TP8) at the end of 128k; topk distinct random visible positions per\n"
"         token (all valid; the chunk also with 90%% of each token's kept from the previous\n"
"         token's), KV format from --kv. TFLOP/s as FlashMLA counts them: 2 x tokens x heads x\n"
"         topk x (576 + 512).\n"
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
"  --chunk-tokens LIST    attn: instead of the fixed table, GLM chunk rows of these token counts x\n"
"                         --heads heads at the end of a 128k context, each with distinct random\n"
"                         selections and with 90%% of each token's kept from the previous token's\n"
"  --chunk-shares LIST    attn --chunk-tokens: the shares of each token's selection kept from the\n"
"                         previous token's, in %% (0..99, default 0,90), a row each: where token\n"
"                         groups and rows_as_m cross as neighbouring tokens share more\n"
"  --chunk-context N      attn --chunk-tokens: the context the chunks end at, 4k..128k (default\n"
"                         128k; e.g. 32k, whose FP8 cache fits in L2)\n"
"  --only decode|prefill  glm: one table only\n"
"  --shape TEXT           attn: only the shapes whose name contains TEXT (e.g. \"128 x 128h\");\n"
"                         the pool then holds only their contexts\n"
"  --table-pool           attn --shape: the pool as large as the whole table's (4M slots), so a\n"
"                         row's cache is what it is in the table (an engine's pool)\n"
"  --iters N              timed replays per stage, median reported (default 100; DESIGN asks >= 50)\n"
"  --warmup N             untimed replays per stage before timing (default 20)\n"
"  --check                before timing a row, compare its outputs with the float64 CPU reference\n"
"                         (DESIGN.md §5): scores, top-k (eps criterion), attention (on the GPU's own\n"
"                         top-k). Decode: every token (serve: requests 0, B/2, B-1); prefill: tokens\n"
"                         0, 31, 63. Exit status 1 when any check fails\n"
"  --json FILE            write every row (all columns), device, date and options as JSON\n"
"  --seed N               random seed (default 1)\n"
"  --device N             CUDA device (default 0)\n"
"  --slot-order           attn: each token's index list sorted by slot before the call (the kernels\n"
"                         then read the cache in slot order; the reference reads the same lists)\n"
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

int parse_int(const char *s, long lo, long hi, const char *opt) {
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

/* A comma-separated list split in place: arg copied into buf (size BENCH_LIST_CHARS), tok[] pointing at
 * its entries (room for BENCH_LIST_CHARS / 2: all a list that fits buf can have); returns the count,
 * dying on an over-long, over-full (more than cap) or empty list. */
#define BENCH_LIST_CHARS 1024
static int split_list(const char *arg, const char *opt, char *buf, char **tok, int cap) {
  if (strlen(arg) >= BENCH_LIST_CHARS) die("%s: list too long", opt);
  strcpy(buf, arg);
  int n = 0;
  for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
    if (n == cap) die("%s: more than %d entries", opt, cap);
    tok[n++] = t;
  }
  if (n == 0) die("%s: empty list", opt);
  return n;
}

int parse_int_list(const char *arg, const char *opt, int *out, int cap, long lo, long hi) {
  char buf[BENCH_LIST_CHARS], *tok[BENCH_LIST_CHARS / 2];
  const int n = split_list(arg, opt, buf, tok, cap);
  for (int i = 0; i < n; i++) out[i] = parse_int(tok[i], lo, hi, opt);
  return n;
}

/* Comma-separated sizes into out[]; returns the count. */
static int parse_size_list(const char *arg, const char *opt, int64_t *out, int cap) {
  char buf[BENCH_LIST_CHARS], *tok[BENCH_LIST_CHARS / 2];
  const int n = split_list(arg, opt, buf, tok, cap);
  for (int i = 0; i < n; i++) out[i] = parse_size(tok[i]);
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
  o->chunk_ctx = 131072;
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
    } else if (!strcmp(a, "--slot-order")) {
      o->slot_order = 1;
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
      o->nsizes = parse_size_list(v, a, o->sizes, MAX_SIZES);
    } else if (!strcmp(a, "--batches")) {
      NEED_VALUE();
      o->nbatches = parse_int_list(v, a, o->batches, MAX_BATCHES, 1, 4096);
      o->batches_given = 1;
    } else if (!strcmp(a, "--chunk-tokens")) {
      NEED_VALUE();
      o->nchunk_tokens = parse_int_list(v, a, o->chunk_tokens, MAX_BATCHES, 1, 65536);
    } else if (!strcmp(a, "--chunk-shares")) {
      NEED_VALUE();
      o->nchunk_shares = parse_int_list(v, a, o->chunk_shares, MAX_SHARES, 0, 99);
    } else if (!strcmp(a, "--chunk-context")) {
      NEED_VALUE();
      int64_t ctx[1];
      if (parse_size_list(v, a, ctx, 1) != 1 || ctx[0] < 4096 || ctx[0] > 131072)
        die("--chunk-context: '%s' is not one context of 4k..128k", v);
      o->chunk_ctx = ctx[0];
    } else if (!strcmp(a, "--table-pool")) {
      o->table_pool = 1;
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
  if (o->nchunk_shares == 0) {
    o->chunk_shares[0] = 0;
    o->chunk_shares[1] = 90;
    o->nchunk_shares = 2;
  }
  for (int i = 0; i < o->nchunk_tokens; i++)
    if (o->chunk_tokens[i] > o->chunk_ctx)
      die("--chunk-tokens: %d tokens do not fit a %lld-token context (--chunk-context)", o->chunk_tokens[i],
          (long long)o->chunk_ctx);
  if (o->nbatches == 0) {
    o->batches[0] = 64;
    o->batches[1] = 128;
    o->batches[2] = 256;
    o->nbatches = 3;
  }
}

int main(int argc, char **argv) {
  dsa_ck_set_handler(ck_die);
  if (argc > 1 && !strcmp(argv[1], "cp")) {
#ifdef DSA_HAVE_CP
    return cp_main(argc - 1, argv + 1);
#else
    fprintf(stderr, "dsa-bench cp: this build has no dsa_cp (NCCL was not found when it was configured)\n");
    return 2;
#endif
  }
  if (argc > 1 && !strcmp(argv[1], "merge")) return merge_main(argc - 1, argv + 1);
  static bench b; /* large; zero-initialised */
  parse_args(argc, argv, &b.o);
  const options *o = &b.o;
  require_sm90(o->device, b.dev_name, sizeof b.dev_name);

  row_result *rows = NULL;
  const int nrows = o->mode == MODE_GLM ? glm_main(&b, &rows) : o->mode == MODE_ATTN ? attn_main(&b, &rows)
                                                                                     : serve_main(&b, &rows);
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
