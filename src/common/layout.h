/*
 * layout.h — the data layouts of DESIGN.md §3 as constants, once for the host layer (checks,
 * workspace sizes) and every kernel (plain C, included from both sides).
 *
 * MLA KV cache, one slot (kv_lora_rank 512 + rope 64 = 576 dims; v = the first 512):
 *   dense bf16   [576] bf16, rows kv_stride elements apart
 *   packed FP8   656 bytes: [0, 512) e4m3 latent | [512, 528) four float32 scales, one per 128
 *                latent values | [528, 656) 64 bf16 rope values
 * Index-K cache, one page of P slots: P FP8-e4m3 rows of 128 bytes, then P float32 scales
 *   (slot row r: fp8 at r * 128, scale at P * 128 + 4 r): 132 bytes a slot.
 */
#ifndef DSA_LAYOUT_H
#define DSA_LAYOUT_H

#include "dsa.h"

/* ---- MLA KV rows and the attention query / output ---- */
#define MLA_QK_DIM DSA_MLA_QK_DIM                 /* 576: q . k dims */
#define MLA_V_DIM DSA_MLA_V_DIM                   /* 512: v = the latent dims, out's width */
#define MLA_ROPE_DIM (MLA_QK_DIM - MLA_V_DIM)     /* 64 */
#define MLA_FP8_GROUP 128                         /* latent values a float32 scale covers */
#define MLA_FP8_SLOT_BYTES DSA_MLA_FP8_SLOT_BYTES /* 656 */
#define MLA_FP8_SCALE_OFF MLA_V_DIM               /* 512: the four scales */
#define MLA_FP8_ROPE_OFF (MLA_FP8_SCALE_OFF + 4 * (MLA_V_DIM / MLA_FP8_GROUP)) /* 528: the bf16 rope */
#define MLA_BF16_ROW_BYTES (MLA_QK_DIM * 2)       /* 1152: a dense bf16 row */

/* ---- index-K cache ---- */
#define IDXK_DIM DSA_INDEX_HEAD_DIM               /* 128: e4m3 bytes a key */
#define IDXK_SLOT_BYTES (IDXK_DIM + 4 * (IDXK_DIM / 128)) /* 132: a key and its float32 scale */

#endif /* DSA_LAYOUT_H */
