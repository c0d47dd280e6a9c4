/*
 * report.c — what a run reports: a row's floors (DESIGN.md §7), its progress line, the tables
 * (printed last: the device tool keeps the tail of the output) and the JSON file of --json.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

const char *const TABLE_NAMES[] = {"decode", "prefill", "serve-decode", "serve-attention", "attention"};

/* A row of table t, nothing measured yet. */
void row_init(row_result *r, table_kind t) {
  memset(r, 0, sizeof *r);
  r->table = t;
  r->ms_scores = r->ms_indexer = r->ms_topk = r->ms_attn = r->ms_total = -1.0;
  strcpy(r->timing, "---");
  r->replicas = 1;
  r->check = -1;
}

/* The stages' floors (--help: floors); context_keys: index-K rows the scores read (0: none scored). */
void set_floors(const bench *b, row_result *r, int64_t context_keys) {
  double q_peak = b->o.q_fp8 ? FP8_FLOP_S : BF16_FLOP_S;
  if (r->scored > 0) {
    r->floor_scores = fmax((double)context_keys * IDX_ROW_BYTES / BW_BYTES_S,
                           2.0 * (double)r->scored * b->o.index_heads * IDX_DIM / q_peak);
    r->floor_topk = (double)r->scored * 4.0 / BW_BYTES_S;
  }
  r->floor_attn = fmax((double)r->selected * (double)b->kv_slot_bytes / BW_BYTES_S,
                       2.0 * (double)r->selected * r->heads * (QK_DIM + V_DIM) / BF16_FLOP_S);
}

/* One line a row as it finishes. */
void print_progress(const row_result *r) {
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
         "%d %s; indexer = the scores + top-k call (decode: one fused kernel), top-k = indexer - scores-only\n",
         title, b->dev_name, o->index_heads, IDX_DIM, o->q_fp8 ? "fp8" : "bf16", o->topk, PAGE,
         o->heads, o->kv_fp8 ? "fp8" : "bf16", o->iters, o->gate ? "gated replays" : "replays");
  if (o->cold) printf("cold: replays rotate over input replicas >= 2 x L2 apart (256 MB flush where too few fit)\n");
}

/* The rows of table tbl (decode, prefill, serve decode): per-stage times, floors, the reference. */
void print_stage_table(const bench *b, const char *title, const row_result *rows, int n, table_kind tbl) {
  int any = 0;
  for (int i = 0; i < n; i++) any |= rows[i].table == tbl;
  if (!any) return;
  print_config(b, title);
  printf("%6s %4s %10s %9s %10s %9s %9s %9s %6s %6s %6s %6s %7s %6s %4s %5s\n", "S", "B", "cand",
         "scores_ms", "indexer_ms", "topk_ms", "attn_ms", "total_ms", "%sc", "%tk", "%at", "%tot", "gluon", "x",
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
    printf("%6s %4d %10lld %9.4f %10.4f %9.4f %9.4f %9.4f %6s %6s %6s %6s %7s %6s %4s %5s\n",
           size_label(r->S, sl, sizeof sl), r->batch, (long long)r->candidates, r->ms_scores, r->ms_indexer,
           r->ms_topk, r->ms_attn, r->ms_total, fmt_pct(p1, sizeof p1, r->floor_scores, r->ms_scores),
           fmt_pct(p2, sizeof p2, r->floor_topk, r->ms_topk),
           fmt_pct(p3, sizeof p3, r->floor_attn, r->ms_attn),
           fmt_pct(p4, sizeof p4, r->floor_scores + r->floor_topk + r->floor_attn, r->ms_total), gl,
           ra, tm, check_word(r));
  }
}

/* serve's attention rows: SERVE_ATTN_BATCH requests x SERVE_ATTN_HEADS heads, TFLOP/s. */
void print_serve_attn_table(const bench *b, const row_result *rows, int n) {
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

/* attn's rows, by shape. */
void print_attn_only_table(const bench *b, const row_result *rows, int n) {
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

/* --json: device, date, options, limits and every row (all columns). */
void write_json(const bench *b, const row_result *rows, int n, const char *path) {
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
             "\"gate\": %s, \"cold\": %s, \"slot_order\": %s, \"table_pool\": %s, \"chunk_context\": %lld, \"seed\": %llu, \"device\": %d, "
             "\"index_softmax_scale\": %.9g, \"attn_softmax_scale\": %.9g, \"sizes\": [",
          o->mode == MODE_GLM ? "glm" : o->mode == MODE_SERVE ? "serve" : "attn", o->q_fp8 ? "fp8" : "bf16",
          o->kv_fp8 ? "fp8" : "bf16",
          o->heads, o->index_heads, IDX_DIM, o->topk, PAGE, o->batch, o->mtp, o->prefill_tokens, o->ws_limit_mib, o->iters, o->warmup,
          o->check ? "true" : "false", o->gate ? "true" : "false", o->cold ? "true" : "false",
          o->slot_order ? "true" : "false", o->table_pool ? "true" : "false", (long long)o->chunk_ctx, (unsigned long long)o->seed,
          o->device, 1.0 / sqrt((double)IDX_DIM * o->index_heads), (double)ATTN_SCALE);
  for (int i = 0; i < o->nsizes; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)o->sizes[i]);
  fprintf(f, "], \"batches\": [");
  for (int i = 0; i < o->nbatches; i++) fprintf(f, "%s%d", i ? ", " : "", o->batches[i]);
  fprintf(f, "], \"chunk_tokens\": [");
  for (int i = 0; i < o->nchunk_tokens; i++) fprintf(f, "%s%d", i ? ", " : "", o->chunk_tokens[i]);
  fprintf(f, "], \"chunk_shares_pct\": [");
  for (int i = 0; i < o->nchunk_shares; i++) fprintf(f, "%s%d", i ? ", " : "", o->chunk_shares[i]);
  fprintf(f, "], \"shape_filter\": ");
  json_str(f, o->shape ? o->shape : "");
  /* the kernel override, e.g. DSA_KERNEL=attention:heads_as_m,scores:mma; "" = the choice tables' */
  fprintf(f, ", \"DSA_KERNEL\": ");
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

