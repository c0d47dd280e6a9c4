/*
 * dsa.h — DeepSeek Sparse Attention (DSA) on NVIDIA Hopper: the public C API.
 *
 * The pipeline, per layer, per decode step or prefill chunk:
 *   1. indexer scores  score[t, s] = softmax_scale * sum_h w[t,h] * relu(q[t,h,:] . k[s,:])
 *                      (k from the paged FP8 index-K cache; ReLU per head)
 *   2. top-k           the min(topk, L) visible positions with the largest scores
 *   3. sparse MLA      softmax attention of H heads over the selected latent KV rows
 * plus the cache writers that fill the two caches.
 *
 * Conventions for every device call:
 *   - All pointers in an args struct are device pointers unless a field says otherwise.
 *   - Calls are asynchronous on the caller's stream, allocate nothing, never synchronise the host,
 *     and can be captured in a CUDA graph. Same inputs give the same output bits.
 *   - Arguments are checked on the host before anything is launched; a failed check returns a
 *     status and dsa_last_error() names the argument and its value. Nothing is launched then.
 *   - Device code never reads or writes outside the buffers whose capacities are passed in, whatever
 *     the contents of lengths, block tables, slot lists or index lists.
 *   - Calls that need scratch memory take a caller-owned workspace (256-byte aligned); its size is
 *     asked for in advance with the matching *_workspace_size function (same args struct; no device
 *     needed) and does not grow with the number of tokens: long inputs run in chunks. The bounds
 *     are stated at each call.
 *   - Every pointer must be aligned to its element type (int32/float 4 bytes, int64 8, bf16 2) or
 *     to what its field says; every strided extent ((rows - 1) * stride + row length) must fit the
 *     address space. Violations return DSA_ERR_MISALIGNED / DSA_ERR_INVALID_VALUE.
 *   - Concurrency: calls may come from several host threads and streams at once, but a workspace
 *     belongs to one call at a time: calls that may run concurrently (different streams) need
 *     different workspaces. Outputs must not overlap inputs or each other (an output that aliases an
 *     input gives unspecified values — never an out-of-bounds access, a hang or a fault). Inputs may
 *     overlap each other freely (e.g. q and weights as views of one projection output).
 *   - A call never reports an error the caller left pending in the CUDA runtime as its own, and does
 *     not clear it — except the first call of each kernel on a device, which raises the kernel's
 *     shared-memory limit with cudaFuncSetAttribute, a runtime call that clears a pending error.
 *   - Kernels are built for sm_90a only (H100, H200, H800, H20, GH200); on another device a call
 *     returns DSA_ERR_NO_DEVICE and launches nothing.
 *
 * Layouts (the project's design contract, docs/DESIGN.md, has the full text):
 *   Index-K cache, paged, FP8: page p is page_size * (head_dim + 4 * head_dim/128) bytes: first the
 *     page_size FP8-e4m3 rows of head_dim bytes, then page_size x (head_dim/128) float32 scales.
 *     Slot s lives in page s / page_size, row s % page_size.
 *   MLA KV cache: dense bf16 [num_slots, 576] (row stride >= 576 elements), or packed FP8, 656 bytes a
 *     slot: 512 e4m3 latent values, 4 float32 scales (one per 128 values), 64 bf16 rope values.
 *   Attention q [tokens, H, 576] bf16 (512 latent, 64 rope); out [tokens, H, 512] bf16.
 */
#ifndef DSA_H
#define DSA_H

#include <stddef.h>
#include <stdint.h>

/* The CUDA runtime's own definition, repeated so that this header needs no CUDA include. */
typedef struct CUstream_st *cudaStream_t;

/* The shared library exports only the functions marked DSA_API (everything else is built with
 * hidden visibility). */
#if defined(__GNUC__) || defined(__clang__)
#define DSA_API __attribute__((visibility("default")))
#else
#define DSA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define DSA_VERSION_MAJOR 0
#define DSA_VERSION_MINOR 2
#define DSA_VERSION_PATCH 0

/* Fixed model dimensions this library supports. */
#define DSA_INDEX_HEAD_DIM 128   /* D_I */
#define DSA_MAX_INDEX_HEADS 64   /* H_I */
#define DSA_MAX_TOPK 2048
#define DSA_MAX_Q_LEN_PER_REQ 8
#define DSA_MLA_QK_DIM 576       /* 512 latent + 64 rope */
#define DSA_MLA_V_DIM 512
#define DSA_MLA_FP8_SLOT_BYTES 656
#define DSA_MAX_ATTN_HEADS 128
/* The most positions one token can see (decode L, prefill workspace rows, plain top-k row length):
 * 2^30, far beyond any model's context, and small enough that every position index and tile
 * boundary stays inside int32 arithmetic on the device. */
#define DSA_MAX_ROW_LEN (1 << 30)

typedef enum {
  DSA_OK = 0,
  DSA_ERR_NULL_POINTER = 1,     /* a required pointer is NULL */
  DSA_ERR_INVALID_VALUE = 2,    /* a size, count or scale is out of range or inconsistent */
  DSA_ERR_UNSUPPORTED = 3,      /* a valid value this build does not implement (dtype, head dim) */
  DSA_ERR_MISALIGNED = 4,       /* a pointer or stride is not aligned as the data type needs */
  DSA_ERR_WORKSPACE_TOO_SMALL = 5,
  DSA_ERR_CUDA = 6,             /* the CUDA runtime reported an error (launch, attribute, device) */
  DSA_ERR_NO_DEVICE = 7         /* no usable sm_90 device for the current thread */
} dsa_status;

typedef enum {
  DSA_DTYPE_BF16 = 0,
  DSA_DTYPE_FP8_E4M3 = 1,
  DSA_DTYPE_F32 = 2
} dsa_dtype;

typedef enum {
  DSA_KV_BF16 = 0,        /* dense bf16 rows of 576 elements (row stride kv_stride elements) */
  DSA_KV_FP8_PACKED = 1   /* 656-byte rows: 512 e4m3, 4 float32 scales, 64 bf16 rope */
} dsa_kv_format;

/* Version as "MAJOR.MINOR.PATCH". */
DSA_API const char *dsa_version(void);
/* A fixed English name for a status. */
DSA_API const char *dsa_status_string(dsa_status status);
/* The message of the last failed call on this thread ("" if none yet): which argument, which
 * value. A successful call leaves it unchanged, so it stays readable after later calls succeed;
 * check the status a call returns, not this string, to learn whether that call failed. */
DSA_API const char *dsa_last_error(void);

/* ------------------------------------------------------------------------------------------------
 * Indexer query side, shared by decode and prefill.
 *   q        [num_tokens, num_heads, 128]: bf16, or FP8-e4m3 with q_scale [num_tokens, num_heads]
 *            float32 (q = fp8 * q_scale). Token rows are contiguous.
 *   weights  [num_tokens, num_heads] float32 or bf16, token row t at weights + t * weights_stride
 *            elements (a view into a fused projection output is fine).
 *   score[t, s] = softmax_scale * sum_h weights[t,h] * relu(q[t,h,:] . k[s,:]).
 */
typedef struct {
  const void *q;                /* 8-B aligned (bf16) / 4-B aligned (fp8) */
  dsa_dtype q_dtype;            /* DSA_DTYPE_BF16 or DSA_DTYPE_FP8_E4M3 */
  const float *q_scale;         /* [num_tokens, num_heads], FP8 q only (NULL for bf16); 4-B aligned */
  const void *weights;
  dsa_dtype weights_dtype;      /* DSA_DTYPE_F32 or DSA_DTYPE_BF16 */
  int64_t weights_stride;       /* elements between token rows, >= num_heads */
  int num_heads;                /* 1..64 */
  int head_dim;                 /* must be 128 */
  float softmax_scale;
} dsa_indexer_query;

/* The paged FP8 index-K cache. */
typedef struct {
  const uint8_t *data;          /* num_pages * page_size * (head_dim + 4*head_dim/128) bytes, 16-B aligned */
  int64_t num_pages;            /* num_pages * page_size <= INT32_MAX (slots are reported as int32) */
  int page_size;                /* tokens per page: a multiple of 4 in 4..1024 (64 in the reference
                                   models; multiple of 4 keeps every 128-byte key row 16-B aligned) */
} dsa_index_k_cache;

/* ------------------------------------------------------------------------------------------------
 * Decode: indexer scores + top-k.
 * num_reqs requests with q_len_per_req = n query tokens each (token t = r*n + j, num_tokens = r*n).
 * Token t sees positions [0, L), L = max(0, seq_lens[r] - (n-1) + j), clamped to what its block-table
 * row addresses (max_blocks_per_req * page_size) and to max_seq_len when given; that clamp must be
 * <= DSA_MAX_ROW_LEN (pass max_seq_len when the block table is wider). Position i is global slot
 * block_table[r * block_table_stride + i / page_size] * page_size + i % page_size.
 * Output: topk_indices[t, 0..topk) = global slots of the selected positions (order unspecified but
 * deterministic), -1 past lens[t] = min(topk, L). A position whose page id is outside
 * [0, num_pages) scores -inf and is reported as -1 if selected.
 * Workspace: scores of as many tokens as fit in 256 MiB (at least one request's) and ~144 KiB of
 * top-k scratch a token for at most 256 tokens at a time: the fastest plan, up to ~292 MiB (the
 * scores region at least ~58 KiB a token: where decode runs scores and top-k as one fused kernel,
 * that is all it uses — per token three 2048-bin histograms, per-CTA counts, <= 4096 candidates).
 * workspace_limit > 0 asks for at most that many bytes: the fastest plan is kept when it fits;
 * otherwise rows longer than 40,960 are scored a chunk of tokens at a time and their top-k resolved
 * once a group (slower: on the H200, 64 requests x 1M with a 64 MiB limit: top-k 0.54 ms against
 * 0.26 without). The limit is exceeded only where one request's tokens alone need more:
 * q_len_per_req * (max_len * 4 bytes + ~144 KiB), max_len = the clamp on L above (8 MTP tokens at
 * 1M: 33 MiB, fits; one token at 16M positions: 64.1 MiB). Nothing is scored (and no score scratch
 * is needed) when every L <= topk. The workspace-size call takes the same args (limit included).
 */
typedef struct {
  dsa_indexer_query query;
  dsa_index_k_cache cache;
  const int32_t *seq_lens;       /* [num_reqs], 4-B aligned (all int32 / float arrays: 4-B) */
  const int32_t *block_table;    /* [num_reqs, block_table_stride] */
  int64_t block_table_stride;    /* elements, >= max_blocks_per_req */
  int max_blocks_per_req;        /* columns of the block table the kernels may read, >= 1 */
  int num_reqs;                  /* >= 0 */
  int q_len_per_req;             /* 1..8 */
  int max_seq_len;               /* host-known bound on L, <= DSA_MAX_ROW_LEN; 0 = max_blocks_per_req * page_size */
  int topk;                      /* 1..2048 */
  int32_t *topk_indices;         /* [num_reqs * q_len_per_req, topk] */
  int32_t *topk_lens;            /* [num_tokens] or NULL */
  size_t workspace_limit;        /* bytes; 0 = the fastest plan (see Workspace above) */
} dsa_indexer_decode_args;

DSA_API dsa_status dsa_indexer_decode_workspace_size(const dsa_indexer_decode_args *args, size_t *bytes);
DSA_API dsa_status dsa_indexer_decode(const dsa_indexer_decode_args *args, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream);

/* Decode scores alone (the first stage of dsa_indexer_decode, for engines that run their own
 * top-k, and for timing): scores[t * scores_stride + i] for i < L(t); positions L(t) <= i < max_len
 * hold -inf (max_len = max_seq_len when given, else max_blocks_per_req * page_size); nothing at or
 * past max_len is written. Tokens with L <= topk are not scored when skip_short_rows is non-zero
 * (their positions below L are not written; the -inf past L still is). */
typedef struct {
  dsa_indexer_decode_args decode; /* topk_indices / topk_lens unused */
  float *scores;
  int64_t scores_stride;          /* >= max_seq_len (or max_blocks_per_req * page_size) */
  int skip_short_rows;
} dsa_indexer_decode_scores_args;
DSA_API dsa_status dsa_indexer_decode_scores(const dsa_indexer_decode_scores_args *args,
                                     cudaStream_t stream);

/* ------------------------------------------------------------------------------------------------
 * Prefill: indexer scores + top-k over a workspace of gathered rows.
 * Workspace row w is global index-K slot kv_workspace_slots[w]. Token t sees rows
 * [row_starts[t], row_ends[t]) (clamped to [0, num_workspace_rows) and to max_rows rows).
 * Output per token: positions as absolute workspace rows (output_global_slots = 0, the reference
 * contract) or as global slots (output_global_slots = 1: what attention consumes); -1 past lens.
 * A row whose slot is outside the cache scores -inf and, as a global slot, is reported as -1.
 * Workspace: as decode, a token at a time (one token's rows: max_len * 4 bytes + ~144 KiB). 4096
 * tokens against 1M rows: 265 MiB by default; 62 MiB with workspace_limit = 64 MiB (groups of 128
 * tokens scored 11 at a time), at the cost decode states.
 * FP8 q with rows over topk may run the fused prefill indexer instead (by default under a
 * workspace_limit below the plan above, at rows of 1M or more; DSA_KERNEL=indexer:fused anywhere):
 * per token 12 bytes + cap * 8 bytes of candidates + (max_len > cap ? S * 4 bytes of sample : 0),
 *   cap = max_len rounded up to 64 when max_len <= C, else C = max(24 * topk, 16 * (topk rounded up
 *         to 64 + 128)), rounded up to 64 (49,152 at topk 2048);
 *   S   = 64 * (ceil(max_len / 1024) + 2);
 * for chunks of as many tokens as fit 64 MiB (or workspace_limit; at least one), multiples of 16
 * below the call's token count: 4096 tokens x 1M rows at topk 2048 in 60 MiB (96-token chunks of
 * 640 KiB a token), x 128k in 58.6 MiB. A token whose candidates overflow (an adversarial order of
 * scores) is rescored exactly with one CTA: slow, not wrong.
 */
typedef struct {
  dsa_indexer_query query;
  dsa_index_k_cache cache;
  const int64_t *kv_workspace_slots; /* [num_workspace_rows], 8-B aligned */
  int64_t num_workspace_rows;        /* 0..DSA_MAX_ROW_LEN */
  const int32_t *row_starts;         /* [num_tokens] */
  const int32_t *row_ends;           /* [num_tokens] */
  int num_tokens;                    /* >= 0 */
  int max_rows;                      /* host-known bound on row_ends - row_starts; 0 = num_workspace_rows */
  int topk;                          /* 1..2048 */
  int output_global_slots;
  int32_t *topk_indices;             /* [num_tokens, topk] */
  int32_t *topk_lens;                /* [num_tokens] or NULL */
  size_t workspace_limit;            /* bytes; 0 = the fastest plan (as decode) */
} dsa_indexer_prefill_args;

DSA_API dsa_status dsa_indexer_prefill_workspace_size(const dsa_indexer_prefill_args *args, size_t *bytes);
DSA_API dsa_status dsa_indexer_prefill(const dsa_indexer_prefill_args *args, void *workspace,
                               size_t workspace_bytes, cudaStream_t stream);

/* Prefill scores alone: scores[t * scores_stride + (w - row_starts[t])] for visible rows w; the
 * positions from the token's visible length up to max_rows (or num_workspace_rows) hold -inf. */
typedef struct {
  dsa_indexer_prefill_args prefill; /* topk_indices / topk_lens / output_global_slots unused */
  float *scores;
  int64_t scores_stride;            /* >= max_rows (or num_workspace_rows) */
  int skip_short_rows;
} dsa_indexer_prefill_scores_args;
DSA_API dsa_status dsa_indexer_prefill_scores(const dsa_indexer_prefill_scores_args *args,
                                      cudaStream_t stream);

/* ------------------------------------------------------------------------------------------------
 * Plain top-k over float32 rows: for row r, the min(topk, L_r) largest of scores[r*stride + i],
 * i < L_r = clamp(row_lens[r], 0, max_len) (every row has length max_len when row_lens is NULL).
 * Ties go to the lower position; NaN ranks below every number. indices[r, :] = positions
 * (order unspecified, deterministic), -1 past lens[r].
 * Workspace: ~144 KiB per row for at most 256 rows at a time (~36 MiB).
 */
typedef struct {
  const float *scores;
  int64_t scores_stride;   /* elements, >= max_len */
  int num_rows;            /* >= 0 */
  const int32_t *row_lens; /* [num_rows] or NULL */
  int max_len;             /* 0..DSA_MAX_ROW_LEN, host bound on every row's length */
  int topk;                /* 1..2048 */
  int32_t *indices;        /* [num_rows, topk] */
  int32_t *lens;           /* [num_rows] or NULL */
} dsa_topk_args;

DSA_API dsa_status dsa_topk_workspace_size(const dsa_topk_args *args, size_t *bytes);
DSA_API dsa_status dsa_topk(const dsa_topk_args *args, void *workspace, size_t workspace_bytes,
                    cudaStream_t stream);

/* ------------------------------------------------------------------------------------------------
 * Sparse MLA attention (decode with any number of tokens per request, and prefill: one call).
 * For token t and head h: over entries i < topk of indices[t] that are valid (idx >= 0,
 * idx < num_slots, and i < lens[t] when lens is given):
 *   s_i = softmax_scale * q[t,h,:] . k_i   (576 dims),  p_i = exp(s_i - m)
 *   out[t,h,:] = sum p_i v_i / sum p_i     (v = first 512 dims of k),  lse = m + ln(sum p_i)
 * A token with no valid entry gets out = 0 and lse = -inf.
 * Workspace: split partials for small batches (fewer tokens x head groups than SMs) where mma_split or
 * rows_as_m runs: at most 2 x 132 CTAs x 16..64 heads x 2 KiB, ~35 MiB; 0 for heads_as_m and large
 * batches, except token groups (8 and 16 heads, tokens x heads >= 8192, or
 * DSA_KERNEL=attention:token_groups): the unions of neighbouring tokens' lists, (64 / H) x topk x 5 B
 * a group of 64 / H tokens, at most 64 MiB — given less than the query reports there, the call runs a
 * kernel that needs none instead (unless forced: then DSA_ERR_WORKSPACE_TOO_SMALL); the seesaw (chosen,
 * or forced by DSA_KERNEL=attention:seesaw) with packed FP8 KV: the converted rows, below. Packed FP8
 * KV read many times over — tokens x topk x ceil(heads / 64) >= 32 x num_slots, as in a
 * prefill over its own context passed as the cache (the request's rows gathered, indices as their rows),
 * and the rows at most 256 MiB — where the table picks heads_as_m, token groups or the seesaw: every slot
 * converted once into the workspace's start as the f16 rows the FP8 kernels make in shared memory (the
 * same bits, so the same results), num_slots x 1152 B rounded up to 256, + num_slots x 4 B, the whole
 * rounded up to 256, before the rest; then the kernels copy rows as over bf16 KV (4096 tokens x 128
 * heads 13 % faster, GLM's 4096-token chunk 10-13 %). Given less than the query reports there, the call
 * runs unconverted (heads_as_m in the seesaw's place). Over a cache whose rows all would exceed 256 MiB
 * (an engine's pool, up to 2^27 slots), the seesaw converts only the rows the call selects, for calls of
 * tokens x topk x ceil(heads / 64) >= 2^23 (or forced): 229,376 rows and their factors (265,158,656 B),
 * a bitmap of the slots (4 B a 32 slots, rounded up to 256), its words with their rows (8 B a 32 slots,
 * rounded up to 256), the blocks' prefixes (4 B a 32,768 slots, rounded up to 256), 256 B, each row's slot
 * (917,504 B), and the rewritten entries of a round of at most 2^24 (min(tokens, 2^24 / topk) x topk x
 * 4 B, rounded up to 256); a call naming more slots than those rows runs unconverted (decided on the
 * device). Token groups at 8 and 16 heads do the same over packed FP8 in such a cache from 2^23 entries
 * (or forced), their unions after those bytes.
 * The size query needs no device and holds for every sm_90 part.
 * Three kernels compute this (same contract, results within the tolerances, each deterministic):
 * mma_split (mma.sync, a token's list split over CTAs and combined), rows_as_m (wgmma, KV rows as M,
 * splits merged inside a thread-block cluster, no workspace) and heads_as_m (wgmma, 64 heads as M,
 * CTAs of one token and 64 heads, split over a cluster below a wave, no workspace; packed FP8 rows
 * are computed in f16 after per-row power-of-two scaling, so a 128-value group more than 2^14 times
 * smaller than its row's largest loses relative precision); the library picks the one measured
 * faster for the shape (docs/PERF.md). The environment variable DSA_KERNEL=attention:mma_split (or
 * rows_as_m, heads_as_m) forces one, for comparisons and bisecting (README.md); attention:seesaw
 * forces heads_as_m's CTAs with the chunks in pairs, one a consumer warpgroup (FlashMLA's prefill
 * schedule: a few % faster than heads_as_m at prefill, slower at decode batches; chosen in heads_as_m's
 * place where tokens x topk x ceil(heads / 64) >= 8 x num_slots with bf16 KV, 16 x num_slots with
 * packed FP8 and its rows within 256 MiB; with packed FP8 KV it first converts every one of the
 * num_slots slots into the workspace as heads_as_m's f16 rows — the same values — so the workspace
 * query then asks num_slots x 1152 B, rounded up to 256, + num_slots x 4 B: sensible only for a cache
 * of about the rows the call reads, e.g. one prefill context). Token groups (the library's choice at 8 and 16
 * heads from 8192 / heads tokens, e.g. a prefill chunk; attention:token_groups forces them at 8, 16
 * and 32 heads, heads_as_m at other head counts) run heads_as_m over groups of 64 / H consecutive
 * tokens, a CTA over the union of their index lists sorted by slot, so a row neighbouring tokens share
 * is read and multiplied once (over packed FP8 rows converted first, with the seesaw's consumers).
 */
typedef struct {
  const void *q;            /* [num_tokens, num_heads, 576] bf16, contiguous, 16-B aligned */
  int num_tokens;           /* >= 0 */
  int num_heads;            /* 1..128 */
  const void *kv_cache;     /* 16-B aligned */
  dsa_kv_format kv_format;
  int64_t num_slots;        /* rows in the KV cache */
  int64_t kv_stride;        /* bf16: elements between rows (>= 576, multiple of 8); FP8: ignored (656 B) */
  const int32_t *indices;   /* [num_tokens, indices_stride] global slots */
  int64_t indices_stride;   /* elements, >= topk */
  int topk;                 /* 1..2048 */
  const int32_t *lens;      /* [num_tokens] or NULL */
  float softmax_scale;
  void *out;                /* [num_tokens, num_heads, 512] bf16 */
  float *lse;               /* [num_tokens, num_heads] or NULL */
} dsa_sparse_mla_args;

DSA_API dsa_status dsa_sparse_mla_workspace_size(const dsa_sparse_mla_args *args, size_t *bytes);
DSA_API dsa_status dsa_sparse_mla(const dsa_sparse_mla_args *args, void *workspace, size_t workspace_bytes,
                          cudaStream_t stream);

/* ------------------------------------------------------------------------------------------------
 * Cache writers. Negative slots are padding and are skipped; slots past the cache are skipped too.
 */
/* Index-K store: k bf16 [num_tokens, 128] (row stride k_stride elements) -> FP8 rows with one
 * float32 scale per row: scale = max(amax, DSA_FP8_AMAX_FLOOR) / 448, fp8 = rn_sat(k / scale). */
#define DSA_FP8_AMAX_FLOOR 1e-4f
typedef struct {
  const void *k;                 /* bf16 */
  int64_t k_stride;              /* elements, >= 128 */
  const int64_t *slot_mapping;   /* [num_tokens] */
  int num_tokens;
  uint8_t *cache;                /* the paged index-K cache (dsa_index_k_cache layout) */
  int64_t num_pages;
  int page_size;
} dsa_index_k_store_args;
DSA_API dsa_status dsa_index_k_store(const dsa_index_k_store_args *args, cudaStream_t stream);

/* MLA KV store: kv bf16 [num_tokens, 576] -> packed FP8 rows (scale = amax/448 per 128 latent
 * values, rope copied as bf16) or a plain bf16 copy. */
typedef struct {
  const void *kv;                /* bf16 */
  int64_t kv_stride;             /* elements, >= 576 */
  const int64_t *slot_mapping;   /* [num_tokens] */
  int num_tokens;
  void *cache;
  dsa_kv_format kv_format;
  int64_t num_slots;
  int64_t cache_stride;          /* bf16: elements between rows (>= 576); FP8: ignored */
} dsa_mla_kv_store_args;
DSA_API dsa_status dsa_mla_kv_store(const dsa_mla_kv_store_args *args, cudaStream_t stream);

/* ------------------------------------------------------------------------------------------------
 * Context parallelism (several GPUs, DESIGN.md §9): the single-GPU pieces of one step split over W
 * ranks. The collectives are the caller's (NCCL: dsa_cp.h runs a whole step); nothing here talks
 * to another GPU. A row of positions (decode: a request's context; prefill: workspace rows) is
 * sharded: rank r of W holds the positions g with owner(g) = r, in increasing order, as its own
 * local row (its caches, block table or workspace slots):
 *   DSA_SHARD_ROUND_ROBIN  owner(g) = g % W, local position g / W  (vLLM's decode context parallelism)
 *   DSA_SHARD_BLOCKS       owner(g) = g / block, local position g % block
 * One step: each rank scores its local row (dsa_indexer_*_scores) and takes its local top-k
 * (dsa_topk, k per rank — not k / W, or the merge is not exact); dsa_cp_candidates turns that into
 * (score, global position) pairs; the caller all-gathers the W lists; dsa_topk_merge gives the exact
 * global top-k (the single-GPU set: ties to the lower position, NaN lowest); dsa_cp_local_indices
 * keeps the selected rows this rank owns as its cache slots for dsa_sparse_mla; the caller gathers
 * the W partial (out, lse); dsa_lse_combine merges them:
 *   lse = log sum_r exp(lse_r),  out = sum_r exp(lse_r - lse) out_r  (lse_r = -inf: no rows, no share).
 */
#define DSA_MAX_CP_RANKS 8
typedef enum {
  DSA_SHARD_ROUND_ROBIN = 0,
  DSA_SHARD_BLOCKS = 1
} dsa_shard_layout;

typedef struct {
  int world_size;          /* W, 1..DSA_MAX_CP_RANKS */
  int rank;                /* 0..W-1 */
  dsa_shard_layout layout;
  int64_t block;           /* DSA_SHARD_BLOCKS: positions a rank holds (>= 1); else unused */
} dsa_shard;

/* Row t's local top-k positions p = local_indices[t * topk + i] (from dsa_topk over the rank's
 * scores) become cand_scores[t * topk + i] = scores[t * scores_stride + p] and cand_ids[...] = the
 * global position of local position row_offsets[t] + p (row_offsets NULL: p; prefill: the token's
 * first local row); an entry with p < 0 or p >= max_len (or a global position past 2^31 - 1) gets
 * id -1 and score -inf. */
typedef struct {
  dsa_shard shard;
  const float *scores;            /* [num_rows, scores_stride] the rank's local scores */
  int64_t scores_stride;          /* >= max_len */
  int max_len;                    /* 0..DSA_MAX_ROW_LEN: local positions a row may hold */
  const int32_t *local_indices;   /* [num_rows, topk] */
  const int32_t *row_offsets;     /* [num_rows] (>= 0) or NULL */
  int num_rows;                   /* >= 0 */
  int topk;                       /* 1..DSA_MAX_TOPK */
  float *cand_scores;             /* [num_rows, topk] */
  int32_t *cand_ids;              /* [num_rows, topk] */
} dsa_cp_candidates_args;
DSA_API dsa_status dsa_cp_candidates(const dsa_cp_candidates_args *args, cudaStream_t stream);

/* The exact top-k of W candidate lists a row: list w of row t is cand_scores / cand_ids
 * [(w * num_rows + t) * k_in, +k_in) (what an all-gather of the ranks' [num_rows, k_in] lists
 * gives); id < 0 = no candidate. indices[t, 0..lens[t]) = the ids of the min(topk, valid) largest
 * scores (NaN lowest; equal scores: the lower id first), in ascending id order; -1 after. The result
 * does not depend on the order of the lists; ids must be distinct within a row (each position has
 * one owner). num_lists * k_in <= DSA_MAX_MERGE_CANDIDATES. */
#define DSA_MAX_MERGE_CANDIDATES 16384
typedef struct {
  const float *cand_scores;       /* [num_lists, num_rows, k_in] */
  const int32_t *cand_ids;        /* [num_lists, num_rows, k_in] */
  int num_lists;                  /* W >= 1 */
  int num_rows;                   /* >= 0 */
  int k_in;                       /* >= 1 */
  int topk;                       /* 1..DSA_MAX_TOPK */
  int32_t *indices;               /* [num_rows, topk] */
  int32_t *lens;                  /* [num_rows] or NULL */
} dsa_topk_merge_args;
DSA_API dsa_status dsa_topk_merge(const dsa_topk_merge_args *args, cudaStream_t stream);

/* A global selection (global positions, -1 = none) kept where this rank owns it: out_slots[t, i] =
 * the rank's cache slot of global position indices[t, i] when owner = shard.rank, else -1; with
 * out_lens, compacted instead: the owned entries first (in the selection's order), -1 after
 * out_lens[t] of them — attention then reads only those (dsa_sparse_mla's lens).
 * Local position p maps as the indexer maps positions: decode (workspace_slots NULL) through the
 * block table — block_table[(t / q_len_per_req) * block_table_stride + p / page_size] * page_size
 * + p % page_size, -1 where p passes max_blocks_per_req * page_size or the page id is outside
 * [0, num_pages); prefill — workspace_slots[p], -1 where p >= num_workspace_rows. */
typedef struct {
  dsa_shard shard;
  const int32_t *indices;         /* [num_tokens, topk] global positions */
  int num_tokens;                 /* >= 0 */
  int topk;                       /* 1..DSA_MAX_TOPK */
  const int32_t *block_table;     /* decode: [num_tokens / q_len_per_req, block_table_stride] */
  int64_t block_table_stride;
  int max_blocks_per_req;
  int q_len_per_req;              /* 1..DSA_MAX_Q_LEN_PER_REQ */
  int page_size;
  int64_t num_pages;
  const int64_t *workspace_slots; /* prefill: [num_workspace_rows]; non-NULL selects prefill */
  int64_t num_workspace_rows;
  int32_t *out_slots;             /* [num_tokens, topk] */
  int32_t *out_lens;              /* [num_tokens] or NULL (not compacted) */
} dsa_cp_local_indices_args;
DSA_API dsa_status dsa_cp_local_indices(const dsa_cp_local_indices_args *args, cudaStream_t stream);

/* Merge W partial attention results: part w of token t, head h is outs[((w * num_tokens + t) *
 * num_heads + h) * 512 ...] (bf16 or float32 as parts_dtype) with lses[(w * num_tokens + t) *
 * num_heads + h] (natural log, -inf = no rows; a part whose lse is not finite — NaN, +-inf — is
 * left out and its out never read). out (bf16) and lse (or NULL) as dsa_sparse_mla gives them; a
 * token and head with no part gets out = 0 and lse = -inf. */
typedef struct {
  const void *outs;               /* [num_parts, num_tokens, num_heads, 512], 16-B aligned */
  dsa_dtype parts_dtype;          /* DSA_DTYPE_BF16 or DSA_DTYPE_F32 */
  const float *lses;              /* [num_parts, num_tokens, num_heads] */
  int num_parts;                  /* 1..DSA_MAX_CP_RANKS */
  int num_tokens;                 /* >= 0 */
  int num_heads;                  /* 1..DSA_MAX_ATTN_HEADS */
  void *out;                      /* [num_tokens, num_heads, 512] bf16, 16-B aligned */
  float *lse;                     /* [num_tokens, num_heads] or NULL */
} dsa_lse_combine_args;
DSA_API dsa_status dsa_lse_combine(const dsa_lse_combine_args *args, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* DSA_H */
