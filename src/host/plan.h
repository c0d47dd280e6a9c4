/*
 * host/plan.h — all of the library's planning, host-only and without CUDA (host/plan.c): how a
 * call's work is cut into launches and CTAs, and how much workspace that takes. Shared by the real
 * launchers and the CI stubs (tests/support/stub_kernels.c), so the workspace a caller is told to
 * allocate is the one the kernels carve.
 */
#ifndef DSA_PLAN_H
#define DSA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dsa.h"
#include "host/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- indexer (scores + top-k): tokens per launch and the workspace ---- */
typedef struct {
  int64_t stride;     /* score row stride (elements) */
  int chunk;          /* tokens per scoring launch */
  int group;          /* deferred: tokens per top-k group (resolved once, from composites); else = chunk */
  int deferred;       /* 1: long rows whose scores do not all fit — chunks of a group share the top-k
                         scratch, which is resolved once a group (topk/chain.cu, dsa_topk_chunk_launch) */
  size_t score_bytes; /* scratch for one chunk's scores (0 when nothing is scored); decode's fastest
                         plan: at least the fused indexer's control block (DSA_FUSED_CTL_BYTES) */
  size_t total;       /* workspace bytes */
} dsa_indexer_plan;
/* num_tokens >= 1 tokens of visible length <= max_len, `multiple` tokens a request (MTP; never split
 * across launches), decode (1) or prefill (0), within the caller's workspace_limit (0 = none: the
 * fastest plan). */
dsa_indexer_plan dsa_plan_indexer(int num_tokens, int max_len, int topk, int multiple, int decode,
                                  size_t workspace_limit);

/* ---- the fused prefill indexer (indexer/prefill_select.cu): tokens per launch and one launch's
 * workspace. Per token: the threshold (8 B), the candidate count (4 B), `cap` candidates (8 B
 * each) and, where rows are longer than cap, the sample row (sample_len floats). ---- */
typedef struct {
  int chunk;            /* tokens a launch */
  int cap;              /* candidates a token keeps (rows up to cap long keep every key) */
  int64_t sample_len;   /* floats of a token's sample row; 0: no row is longer than cap */
  size_t tau_off, count_off, cand_off, sample_off; /* [chunk] u64 | [chunk] u32 | [chunk][cap] u64 | [chunk][sample_len] f32 */
  size_t total;         /* workspace bytes */
} dsa_prefill_fused_plan;
/* Candidates a token keeps once its row needs a sample (DSA_PREFILL_SAMPLE_STRIDE): 1.5 x stride x
 * topk, at least stride x (topk rounded up to 64, + 128), a multiple of 64. */
int dsa_prefill_cand_cap(int topk);
/* A token's sample row for rows up to max_len: 64 floats a sample tile, from the one holding the row's
 * first key (two of slack: the first and last may be partly outside the row). */
int64_t dsa_prefill_sample_len(int max_len);
/* num_tokens >= 1 tokens of visible length <= max_len (> topk) in launches whose workspace fits
 * workspace_limit (0: DSA_PREFILL_FUSED_BUDGET), at least one token a launch. */
dsa_prefill_fused_plan dsa_plan_prefill_fused(int num_tokens, int max_len, int topk, size_t workspace_limit);

/* ---- top-k: scratch for num_rows rows at once (bounded per row), and where its parts start ---- */
typedef struct {
  size_t hist_off;   /* [rows][TK_HDR] uint32 */
  size_t above_off;  /* [rows][DSA_MAX_TOPK] int32 */
  size_t cand_off;   /* [rows][TK_CAND_CAP] int32 */
  size_t total;
} dsa_topk_layout;
dsa_topk_layout dsa_topk_ws_layout(int num_rows);
/* Rows a plain dsa_topk launch takes. */
int dsa_plan_topk_rows(int num_rows);

/* ---- sparse MLA attention: one CTA per (token, head group of 16*mt heads, split of the index list) ---- */
typedef struct {
  int kernel;           /* dsa_attention_kernel (kernels.h) */
  int mt;               /* heads per CTA / 16: mma_split 1, 2 or 4; rows_as_m 1 or 2; heads_as_m 4 */
  int groups;           /* head groups per token */
  int num_blocks;       /* MLA_BLOCK_N-entry blocks of topk */
  int splits;           /* CTAs per (token, group); mma_split: > 1 needs the workspace and a combine;
                           rows_as_m and heads_as_m: the cluster size (<= 8), no workspace */
  int blocks_per_split;
  int convert_rows;     /* packed FP8 KV (heads_as_m, token groups, the seesaw): 1, every cache slot converted
                           once into the workspace's start as the f16 tile rows heads_as_m's FP8 producer
                           makes (dsa_plan_attention_converted_bytes), then copied as bf16 rows are; 2 (the
                           seesaw and token groups over a pool), only the slots the call names
                           (dsa_select_layout) */
  int ctas;             /* heads_as_m unsplit: a persistent grid of this many CTAs, each looping over
                           units (token, group); 0: a CTA per unit and split */
  int token_group;      /* token groups: tokens a group (64 / heads); 0 otherwise */
  int64_t tg_groups;    /* token groups: groups a launch (the workspace holds that many unions) */
} dsa_attention_plan;

/* Token groups' workspace for a launch of `groups` groups: per group, cap = token_group x topk union
 * slots (int32) and token masks (uint8), and two int32 counts (the union's rows, the group's rows of
 * q); each part 256-byte aligned. */
typedef struct {
  int64_t cap;    /* union rows a group can have */
  int64_t groups; /* groups a launch */
  size_t slots_off, masks_off, counts_off, total;
} dsa_tg_layout;
/* A launch's layout for a call (heads dividing 64, <= 32) and groups a launch. */
static inline dsa_tg_layout dsa_tg_layout_of(const dsa_sparse_mla_args *a, int64_t groups) {
  dsa_tg_layout l;
  l.cap = (int64_t)(64 / a->num_heads) * a->topk;
  l.groups = groups;
  l.slots_off = 0;
  l.masks_off = ((size_t)groups * (size_t)l.cap * 4 + 255) & ~(size_t)255;
  l.counts_off = l.masks_off + (((size_t)groups * (size_t)l.cap + 255) & ~(size_t)255);
  l.total = l.counts_off + (((size_t)groups * 8 + 255) & ~(size_t)255);
  return l;
}
/* Token groups: most workspace a launch takes (DSA_TG_WORKSPACE_CAP bytes, or less where all the
 * call's groups fit), and so the groups a launch. */
#define DSA_TG_WORKSPACE_CAP ((size_t)64 << 20)
/* The plan of `kernel` (dsa_attention_kernel) for a call on the device `dev` describes (its SMs, and for
 * rows_as_m and heads_as_m the CTAs its clusters keep resident); convert: packed FP8 rows converted
 * first (dsa_choose_attention_convert; heads_as_m and token groups only, the seesaw always). */
dsa_attention_plan dsa_plan_attention(const dsa_sparse_mla_args *a, const dsa_device_info *dev, int kernel,
                                      int convert);
/* The converted rows of packed FP8 KV: num_slots rows of 576 16-bit values, then num_slots float factors
 * 2^K (the 256-byte aligned start of the factors: DSA_CONVERTED_COLF_OFF), at the workspace's start. */
#define DSA_CONVERTED_ROW_BYTES (DSA_MLA_QK_DIM * 2)
#define DSA_CONVERTED_COLF_OFF(num_slots) ((((size_t)(num_slots) * DSA_CONVERTED_ROW_BYTES) + 255) & ~(size_t)255)
/* Converting packed FP8 rows first is chosen only where those rows and factors take at most this much
 * (about 232k slots: a prefill context of up to ~200k tokens passed as the cache). */
#define DSA_CONVERT_WORKSPACE_CAP ((size_t)256 << 20)
/* The converted rows' bytes for a call (256-byte multiple): all of num_slots (capped at
 * DSA_ATTN_SLOTS_CAP as the kernels count them). */
static inline size_t dsa_plan_attention_rows_bytes(const dsa_sparse_mla_args *a) {
  const int64_t slots = a->num_slots < DSA_ATTN_SLOTS_CAP ? a->num_slots : DSA_ATTN_SLOTS_CAP;
  return (DSA_CONVERTED_COLF_OFF(slots) + (size_t)slots * sizeof(float) + 255) & ~(size_t)255;
}
/* Packed FP8 rows selected, then converted (convert_rows = 2: the seesaw and token groups over a cache whose
 * rows all would exceed DSA_CONVERT_WORKSPACE_CAP, an engine's pool): the slots the call's valid entries name are
 * marked in a bitmap and counted (a prefix of the words' popcounts, within blocks of 1024 words and over
 * the blocks); where they are at most DSA_SELECT_ROWS, slot s becomes row (its rank among the marked
 * slots), converted as above, and the entries are rewritten to those rows (int32 [tokens, topk]); else
 * the call runs unconverted. Layout at the workspace's start, each part 256-byte aligned: the
 * rows and their factors (as DSA_CONVERTED_COLF_OFF(DSA_SELECT_ROWS) says), the bitmap (4 B a word of 32
 * slots), the words again with their rows (8 B each: the 32 slots' marks, then the row of the word's first
 * marked slot), the blocks' prefixes, control words (the count, whether it fits, whether not), each row's
 * slot (int32 [DSA_SELECT_ROWS]), a round's entries. */
#define DSA_SELECT_ROWS ((int64_t)224 * 1024) /* 229,376: rows and factors within DSA_CONVERT_WORKSPACE_CAP */
#define DSA_SELECT_MAX_SLOTS ((int64_t)1 << 27) /* a bitmap of 16 MiB, 4096 blocks of words */
#define DSA_SELECT_BLOCK_WORDS 1024
/* Calls of more entries are run in rounds of at most this many (tokens x topk): each round selects,
 * converts and runs its own tokens, its rewritten entries at most 64 MiB. */
#define DSA_SELECT_ROUND_ENTRIES ((int64_t)1 << 24)
static inline int64_t dsa_select_round_tokens(const dsa_sparse_mla_args *a) {
  const int64_t t = DSA_SELECT_ROUND_ENTRIES / (a->topk > 0 ? a->topk : 1);
  return t > 0 ? t : 1;
}
typedef struct {
  int64_t words, blocks; /* bitmap words (32 slots), blocks of DSA_SELECT_BLOCK_WORDS words */
  size_t bits_off, words_off, bprefix_off, ctl_off, row_slots_off, idx_off, total;
} dsa_select_layout;
static inline size_t dsa_align256(size_t n) { return (n + 255) & ~(size_t)255; }
static inline dsa_select_layout dsa_select_layout_of(const dsa_sparse_mla_args *a) {
  dsa_select_layout l;
  const int64_t slots = a->num_slots < DSA_ATTN_SLOTS_CAP ? a->num_slots : DSA_ATTN_SLOTS_CAP;
  l.words = (slots + 31) / 32;
  l.blocks = (l.words + DSA_SELECT_BLOCK_WORDS - 1) / DSA_SELECT_BLOCK_WORDS;
  l.bits_off = dsa_align256(DSA_CONVERTED_COLF_OFF(DSA_SELECT_ROWS) + (size_t)DSA_SELECT_ROWS * sizeof(float));
  l.words_off = l.bits_off + dsa_align256((size_t)l.words * 4);
  l.bprefix_off = l.words_off + dsa_align256((size_t)l.words * 8);
  l.ctl_off = l.bprefix_off + dsa_align256((size_t)l.blocks * 4);
  l.row_slots_off = l.ctl_off + 256;
  l.idx_off = l.row_slots_off + dsa_align256((size_t)DSA_SELECT_ROWS * 4);
  const int64_t round = dsa_select_round_tokens(a), tokens = a->num_tokens < round ? a->num_tokens : round;
  l.total = l.idx_off + dsa_align256((size_t)(tokens > 0 ? tokens : 0) * (size_t)a->topk * 4);
  return l;
}
/* The bytes packed FP8 rows converted as `convert` says (a plan's convert_rows) take at the workspace's
 * start: dsa_plan_attention_rows_bytes (1), the selection's layout (2), or 0 where nothing is converted. */
static inline size_t dsa_plan_converted_bytes(const dsa_sparse_mla_args *a, int convert) {
  if (!convert || a->num_tokens <= 0) return 0;
  return convert == 2 ? dsa_select_layout_of(a).total : dsa_plan_attention_rows_bytes(a);
}
/* The same for a plan. */
static inline size_t dsa_plan_attention_converted_bytes(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl) {
  return dsa_plan_converted_bytes(a, pl->convert_rows);
}
/* Scratch bytes a plan needs: the converted rows, then the split partials (0 for one split) or token
 * groups' unions. */
size_t dsa_plan_attention_workspace(const dsa_sparse_mla_args *a, const dsa_attention_plan *pl);
/* The most any plan of `kernel` (a dsa_attention_kernel, converting as `convert` says) for <=
 * DSA_PLAN_MAX_SMS SMs needs, so it is known without a device and holds on every sm_90 part;
 * dsa_sparse_mla_workspace_size reports it for the choice with the most workspace (host/api_attention.c). */
size_t dsa_plan_attention_workspace_bound(const dsa_sparse_mla_args *a, int kernel, int convert);

#ifdef __cplusplus
}
#endif
#endif /* DSA_PLAN_H */
