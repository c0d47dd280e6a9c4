/*
 * attention/token_groups.cu — the union of neighbouring tokens' index lists, for heads_as_m's token
 * groups (DSA_ATTN_TOKEN_GROUPS, heads_as_m.cu).
 *
 * At H <= 32 heads (H divides 64) a group is G = 64 / H consecutive tokens t0 .. t0 + G - 1, whose
 * (token, head) rows are 64 consecutive rows of q, out and lse: heads_as_m runs the group as one
 * token of 64 heads over the union of the G tokens' entries, a row of M seeing only the columns of
 * its own token. Where neighbours select the same rows (a prefill chunk's tokens share most of
 * them), each shared row is gathered, converted and multiplied once a group instead of once a token.
 *
 * Per group (one CTA of TG_THREADS threads), over its G x topk entries (token j's entry i is valid
 * when i < lens[t0 + j], 0 <= idx < num_slots and t0 + j < T — the kernels' rule, attention.cuh):
 *   sort     the valid entries by slot, stably (CUB block radix sort; entries in token order, so a
 *            slot's entries come token by token, each token's in list order); invalid ones last
 *   rows     a slot that token j lists c_j times makes max_j c_j union rows: row k of the slot carries
 *            token j when c_j > k — so every entry is one softmax term of its token, repeats too
 *   out      slots[r] and masks[r] (bit j: token j sees row r) for r < n_rows, then n_rows and the
 *            group's rows of q (64, or (T - t0) x H for a last, partial group).
 * The union's order is the slots' ascending order: the same input, the same bits.
 * Where the cache has at most TG_BITMAP_SLOTS slots (a chunk over its own context), a group first tries
 * without the sort (tg_union_bitmap): a bit a slot in shared memory marks the valid entries' slots,
 * a scan of the words' popcounts gives each marked slot its row, and each entry ORs its token into its
 * row's mask — the same rows, masks and order as the sort's where no token lists a slot twice; a
 * repeat (a token's bit already set) sends the group to the sort. Over caches of up to TG_BITMAP2_SLOTS
 * slots (an engine's pool of 4M) the same in two levels (tg_union_bitmap2): a bit for each word of 32
 * slots an entry touches, the touched words kept compact.
 * Workspace of a launch of `groups` groups: dsa_tg_layout (host/plan.h).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "common/launch.cuh"
#include "kernels.h"

#define TG_THREADS 512
#define TG_RADIX_BITS 5 /* a pass's digit: 5 bits keep the sort's storage within the sorted keys' (16 heads) */
#define TG_BITMAP_WORDS 8192 /* the bitmap path's slots: 32 a word, 262,144 (a 256k context) */
#define TG_BITMAP_SLOTS ((int64_t)TG_BITMAP_WORDS * 32)
#define TG_BITMAP_WORDS_A_THREAD (TG_BITMAP_WORDS / TG_THREADS)
/* Caches of up to TG_BITMAP2_SLOTS slots (an engine's pool: 4M slots): two levels, a bit a word of 32
 * slots (TG_L1_WORDS words of those bits), the words any entry touches kept compact in rank order */
#define TG_L1_WORDS 4096
#define TG_BITMAP2_SLOTS ((int64_t)TG_L1_WORDS * 32 * 32)
#define TG_L1_WORDS_A_THREAD (TG_L1_WORDS / TG_THREADS)

template <int ITEMS>
struct tg_smem {
  typedef cub::BlockRadixSort<uint32_t, TG_THREADS, ITEMS, uint8_t, TG_RADIX_BITS> sort_t;
  typedef cub::BlockScan<int, TG_THREADS> scan_t;
  union {
    typename sort_t::TempStorage sort;
    struct {
      uint32_t key[TG_THREADS * ITEMS]; /* sorted slots; then the union rows' token masks */
      uint8_t tok[TG_THREADS * ITEMS];  /* sorted tokens (j) */
    } sorted;
    struct {
      uint32_t bits[TG_BITMAP_WORDS]; /* bit s % 32 of word s / 32: a valid entry lists slot s */
      uint32_t first[TG_BITMAP_WORDS]; /* the union row of each word's first marked slot */
    } bm;
    struct {
      uint32_t l1[TG_L1_WORDS];           /* bit w % 32 of l1[w / 32]: an entry lists a slot of word w */
      uint32_t l1_first[TG_L1_WORDS];     /* the compact index of each l1 word's first touched word */
      uint32_t bits[TG_THREADS * ITEMS];  /* the touched words' slot bits, compact (at most an entry each) */
    } bm2;
  } u;
  int run_rows[TG_THREADS * ITEMS];     /* rows of each run (one slot); then their first row (bitmap path:
                                           the rows' token masks) */
  int slot[TG_THREADS * ITEMS];         /* union rows' slots */
  typename scan_t::TempStorage scan;
};

static_assert(sizeof(tg_smem<32>) <= 227 * 1024, "the union's shared memory, at 8 heads");

struct tg_max_op {
  __device__ __forceinline__ int operator()(int a, int b) const { return a > b ? a : b; }
};

/* The group's two counts: its union rows, and its rows of q (64, or fewer for a last, partial group). */
__device__ __forceinline__ void tg_store_counts(int32_t *out_counts, int n_rows, int64_t num_tokens, int64_t t0,
                                                int heads) {
  out_counts[0] = n_rows;
  const int64_t q_rows = (num_tokens - t0) * heads;
  out_counts[1] = (int)(q_rows < 64 ? q_rows : 64);
}

/* The union without the sort, for caches of at most TG_BITMAP_SLOTS slots: false (every thread alike)
 * where a token lists a slot twice, which only the sort's rows express; else the group's outputs are
 * written and n_rows is the union's rows. key / tok: the thread's entries (key `invalid` for one to skip). */
template <int ITEMS>
__device__ __forceinline__ bool tg_union_bitmap(tg_smem<ITEMS> &sm, const uint32_t (&key)[ITEMS],
                                                const uint8_t (&tok)[ITEMS], uint32_t invalid, int64_t num_slots,
                                                int32_t *out_slots, uint8_t *out_masks, int *repeat_s,
                                                int &n_rows) {
  typedef typename tg_smem<ITEMS>::scan_t scan_t;
  const int tid = threadIdx.x, words = (int)((num_slots + 31) / 32);
  for (int w = tid; w < words; w += TG_THREADS) sm.u.bm.bits[w] = 0u;
  if (tid == 0) *repeat_s = 0;
  __syncthreads();
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
    if (key[k] != invalid) atomicOr(&sm.u.bm.bits[key[k] >> 5], 1u << (key[k] & 31));
  __syncthreads();
  /* thread tid's words [tid W, tid W + W): their marked slots' first row, by a scan of the counts */
  const int w0 = tid * TG_BITMAP_WORDS_A_THREAD;
  int mine = 0;
#pragma unroll
  for (int i = 0; i < TG_BITMAP_WORDS_A_THREAD; ++i) mine += w0 + i < words ? __popc(sm.u.bm.bits[w0 + i]) : 0;
  int first;
  scan_t(sm.scan).ExclusiveSum(mine, first, n_rows);
#pragma unroll
  for (int i = 0; i < TG_BITMAP_WORDS_A_THREAD; ++i)
    if (w0 + i < words) {
      sm.u.bm.first[w0 + i] = (uint32_t)first;
      first += __popc(sm.u.bm.bits[w0 + i]);
    }
  int *mask = sm.run_rows; /* cap entries: n_rows <= cap */
  for (int r = tid; r < n_rows; r += TG_THREADS) mask[r] = 0;
  __syncthreads();
  /* each entry's token into its row's mask; a token's bit already there: a repeat */
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
    if (key[k] != invalid) {
      const uint32_t w = key[k] >> 5, below = sm.u.bm.bits[w] & ((1u << (key[k] & 31)) - 1u);
      const int row = (int)sm.u.bm.first[w] + __popc(below);
      if (atomicOr(&mask[row], 1 << tok[k]) & (1 << tok[k])) atomicOr(repeat_s, 1);
    }
  __syncthreads();
  if (*repeat_s) return false;
  /* rows in the slots' order: thread tid's words, their marked bits ascending, staged, then stored
   * coalesced */
#pragma unroll 1
  for (int i = 0; i < TG_BITMAP_WORDS_A_THREAD; ++i) {
    if (w0 + i >= words) break;
    uint32_t v = sm.u.bm.bits[w0 + i];
    int r = (int)sm.u.bm.first[w0 + i];
    for (; v; v &= v - 1u) sm.slot[r++] = (w0 + i) * 32 + __ffs(v) - 1;
  }
  __syncthreads();
  for (int r = tid; r < n_rows; r += TG_THREADS) {
    out_slots[r] = sm.slot[r];
    out_masks[r] = (uint8_t)mask[r];
  }
  return true;
}

/* The same for caches of up to TG_BITMAP2_SLOTS slots, in two levels: a bit for each word of 32 slots
 * that an entry touches, a scan of those bits' popcounts giving each touched word its compact index, the
 * entries' slot bits ORed into the compact words, a scan of theirs giving each slot its row. The same
 * rows, masks and order as tg_union_bitmap (and the sort, where no token repeats a slot). The compact
 * words' first rows are kept in sm.slot, the masks in sm.run_rows; the rows go out from each thread's
 * level-1 words, in order. */
template <int ITEMS>
__device__ __forceinline__ bool tg_union_bitmap2(tg_smem<ITEMS> &sm, const uint32_t (&key)[ITEMS],
                                                 const uint8_t (&tok)[ITEMS], uint32_t invalid, int32_t *out_slots,
                                                 uint8_t *out_masks, int *repeat_s, int &n_rows) {
  typedef typename tg_smem<ITEMS>::scan_t scan_t;
  const int tid = threadIdx.x;
  uint32_t *l1 = sm.u.bm2.l1, *l1_first = sm.u.bm2.l1_first, *bits = sm.u.bm2.bits;
  int *first = sm.slot, *mask = sm.run_rows; /* [compact word]: its first row; [row]: its token mask */
#pragma unroll
  for (int i = 0; i < TG_L1_WORDS_A_THREAD; ++i) l1[tid * TG_L1_WORDS_A_THREAD + i] = 0u;
  if (tid == 0) *repeat_s = 0;
  __syncthreads();
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
    if (key[k] != invalid) atomicOr(&l1[key[k] >> 10], 1u << ((key[k] >> 5) & 31));
  __syncthreads();
  /* thread tid's level-1 words: the compact index of their touched words, by a scan of the counts */
  const int w0 = tid * TG_L1_WORDS_A_THREAD;
  int mine = 0, cw, n_words;
#pragma unroll
  for (int i = 0; i < TG_L1_WORDS_A_THREAD; ++i) mine += __popc(l1[w0 + i]);
  scan_t(sm.scan).ExclusiveSum(mine, cw, n_words); /* n_words <= the valid entries <= TG_THREADS x ITEMS */
#pragma unroll
  for (int i = 0; i < TG_L1_WORDS_A_THREAD; ++i) {
    l1_first[w0 + i] = (uint32_t)cw;
    cw += __popc(l1[w0 + i]);
  }
  for (int c = tid; c < n_words; c += TG_THREADS) bits[c] = 0u;
  __syncthreads();
  /* the entries' slot bits into their compact words (the word's index kept for the rows) */
  int word_of[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    word_of[k] = 0;
    if (key[k] != invalid) {
      const uint32_t w = key[k] >> 5, lw = w >> 5;
      word_of[k] = (int)l1_first[lw] + __popc(l1[lw] & ((1u << (w & 31)) - 1u));
      atomicOr(&bits[word_of[k]], 1u << (key[k] & 31));
    }
  }
  __syncthreads();
  /* thread tid's compact words [tid ITEMS, tid ITEMS + ITEMS): their first rows */
  int rows = 0, r0;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) rows += tid * ITEMS + i < n_words ? __popc(bits[tid * ITEMS + i]) : 0;
  __syncthreads(); /* the scan's storage is reused */
  scan_t(sm.scan).ExclusiveSum(rows, r0, n_rows);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
    if (tid * ITEMS + i < n_words) {
      first[tid * ITEMS + i] = r0;
      r0 += __popc(bits[tid * ITEMS + i]);
    }
  for (int r = tid; r < n_rows; r += TG_THREADS) mask[r] = 0;
  __syncthreads();
  /* each entry's token into its row's mask; a token's bit already there: a repeat */
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
    if (key[k] != invalid) {
      const int row = first[word_of[k]] + __popc(bits[word_of[k]] & ((1u << (key[k] & 31)) - 1u));
      if (atomicOr(&mask[row], 1 << tok[k]) & (1 << tok[k])) atomicOr(repeat_s, 1);
    }
  __syncthreads();
  if (*repeat_s) return false;
  /* rows in the slots' order: thread tid's level-1 words, their touched words, their slots ascending */
#pragma unroll 1
  for (int i = 0; i < TG_L1_WORDS_A_THREAD; ++i) {
    int c = (int)l1_first[w0 + i];
    for (uint32_t v = l1[w0 + i]; v; v &= v - 1u, ++c) {
      const int w = (w0 + i) * 32 + __ffs(v) - 1;
      int r = first[c];
      for (uint32_t b = bits[c]; b; b &= b - 1u, ++r) {
        out_slots[r] = w * 32 + __ffs(b) - 1;
        out_masks[r] = (uint8_t)mask[r];
      }
    }
  }
  return true;
}

template <int ITEMS>
__global__ void __launch_bounds__(TG_THREADS, 1)
    tg_union_kernel(const int32_t *indices, int64_t indices_stride, const int32_t *lens, int64_t num_tokens,
                    int64_t num_slots, int key_bits, int topk, int heads, int64_t group0, dsa_tg_layout lay,
                    uint8_t *ws, const int *gate) {
  /* the selected rows' gated launches (heads_as_m.cu, hm_select_rows): only where *gate != 0 */
  if (gate && *(volatile const int *)gate == 0) return;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  tg_smem<ITEMS> &sm = *reinterpret_cast<tg_smem<ITEMS> *>(smem_raw);
  typedef typename tg_smem<ITEMS>::sort_t sort_t;
  typedef typename tg_smem<ITEMS>::scan_t scan_t;
  const int G = 64 / heads, cap = G * topk, tid = threadIdx.x;
  /* the sort key of an invalid entry: after every slot (num_slots <= 2^key_bits - 1); the sort looks
   * at key_bits bits only */
  const uint32_t invalid = key_bits >= 32 ? 0xFFFFFFFFu : (1u << key_bits) - 1u;
  const int64_t g = group0 + blockIdx.x, t0 = g * G;
  int32_t *out_slots = (int32_t *)(ws + lay.slots_off) + (int64_t)blockIdx.x * lay.cap;
  uint8_t *out_masks = ws + lay.masks_off + (int64_t)blockIdx.x * lay.cap;
  int32_t *out_counts = (int32_t *)(ws + lay.counts_off) + 2 * (int64_t)blockIdx.x;

  /* ---- the entries, blocked: thread tid holds entries [tid * ITEMS, tid * ITEMS + ITEMS) ---- */
  uint32_t key[ITEMS];
  uint8_t tok[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int e = tid * ITEMS + k, j = e / topk, i = e - j * topk;
    const int64_t t = t0 + j;
    key[k] = invalid;
    tok[k] = (uint8_t)j;
    if (e < cap && t < num_tokens) {
      const int end = lens ? min(topk, max(__ldg(lens + t), 0)) : topk;
      if (i < end) {
        const int idx = __ldg(indices + t * indices_stride + i);
        if (idx >= 0 && (int64_t)idx < num_slots) key[k] = (uint32_t)idx;
      }
    }
  }
  if (num_slots <= TG_BITMAP2_SLOTS) {
    __shared__ int repeat_s;
    int n_rows;
    const bool done = num_slots <= TG_BITMAP_SLOTS
                          ? tg_union_bitmap<ITEMS>(sm, key, tok, invalid, num_slots, out_slots, out_masks, &repeat_s,
                                                   n_rows)
                          : tg_union_bitmap2<ITEMS>(sm, key, tok, invalid, out_slots, out_masks, &repeat_s, n_rows);
    if (done) {
      if (tid == 0) tg_store_counts(out_counts, n_rows, num_tokens, t0, heads);
      return;
    }
    __syncthreads(); /* every read of the bitmap done: the sort may take its storage */
  }
  sort_t(sm.u.sort).Sort(key, tok, 0, key_bits); /* stable: a slot's entries stay in token order */
  __syncthreads();
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    sm.u.sorted.key[tid * ITEMS + k] = key[k];
    sm.u.sorted.tok[tid * ITEMS + k] = tok[k];
  }
  __syncthreads();

  /* ---- each entry's occurrence within its (slot, token) pair, and its run (slot) ---- */
  int pair_start[ITEMS], new_run[ITEMS], run_id[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int e = tid * ITEMS + k;
    const bool valid = key[k] != invalid;
    const bool first_of_run = valid && (e == 0 || sm.u.sorted.key[e - 1] != key[k]);
    const bool first_of_pair = valid && (first_of_run || sm.u.sorted.tok[e - 1] != tok[k]);
    pair_start[k] = first_of_pair ? e : 0;
    new_run[k] = first_of_run ? 1 : 0;
  }
  scan_t(sm.scan).InclusiveScan(pair_start, pair_start, tg_max_op());
  __syncthreads();
  int runs; /* every thread gets the aggregate */
  scan_t(sm.scan).InclusiveSum(new_run, run_id, runs); /* run_id - 1: the entry's run */
  __syncthreads();
  for (int r = tid; r < runs; r += TG_THREADS) sm.run_rows[r] = 0;
  __syncthreads();
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
    if (key[k] != invalid) atomicMax(&sm.run_rows[run_id[k] - 1], tid * ITEMS + k - pair_start[k] + 1);
  __syncthreads();

  /* ---- each run's first union row: an exclusive sum over the runs ---- */
  int rows[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) rows[k] = tid * ITEMS + k < runs ? sm.run_rows[tid * ITEMS + k] : 0;
  __syncthreads();
  int n_rows;
  scan_t(sm.scan).ExclusiveSum(rows, rows, n_rows);
  __syncthreads();
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
    if (tid * ITEMS + k < runs) sm.run_rows[tid * ITEMS + k] = rows[k];
  /* the sorted keys are in registers now: their space holds the rows' masks */
  uint32_t *mask = sm.u.sorted.key;
  for (int r = tid; r < n_rows; r += TG_THREADS) mask[r] = 0;
  __syncthreads();

  /* ---- rows: slot (written once a row, by its run's first entry) and token mask ---- */
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    if (key[k] == invalid) continue;
    const int e = tid * ITEMS + k, base = sm.run_rows[run_id[k] - 1];
    atomicOr(&mask[base + e - pair_start[k]], 1u << tok[k]);
    if (new_run[k]) {
      const int run_end = run_id[k] < runs ? sm.run_rows[run_id[k]] : n_rows; /* the next run's first row */
      for (int r = base; r < run_end; ++r) sm.slot[r] = (int)key[k];
    }
  }
  __syncthreads();
  for (int r = tid; r < n_rows; r += TG_THREADS) {
    out_slots[r] = sm.slot[r];
    out_masks[r] = (uint8_t)mask[r];
  }
  if (tid == 0) tg_store_counts(out_counts, n_rows, num_tokens, t0, heads);
}

template <int ITEMS>
static cudaError_t tg_union_launch_items(const dsa_sparse_mla_args *a, int64_t group0, int64_t groups,
                                         const dsa_tg_layout *lay, uint8_t *ws, const int *gate, cudaStream_t stream) {
  static dsa_smem_cache cache;
  const int64_t slots = a->num_slots < DSA_ATTN_SLOTS_CAP ? a->num_slots : DSA_ATTN_SLOTS_CAP;
  int key_bits = 1; /* the fewest bits that hold every slot below the invalid key 2^bits - 1 */
  while (key_bits < 32 && ((int64_t)1 << key_bits) - 1 < slots) ++key_bits;
  return dsa_launch_smem(tg_union_kernel<ITEMS>, &cache, dim3((unsigned)groups), TG_THREADS, sizeof(tg_smem<ITEMS>),
                         stream, false, a->indices, a->indices_stride, a->lens, (int64_t)a->num_tokens, slots, key_bits,
                         a->topk, a->num_heads, group0, *lay, ws, gate);
}

extern "C" int dsa_attention_tg_union_launch(const dsa_sparse_mla_args *a, int64_t group0, int64_t groups,
                                             const dsa_tg_layout *lay, void *ws, const int *gate,
                                             cudaStream_t stream) {
  const int cap = (64 / a->num_heads) * a->topk;
  uint8_t *w = (uint8_t *)ws;
  cudaError_t err;
  if (cap <= TG_THREADS * 8) err = tg_union_launch_items<8>(a, group0, groups, lay, w, gate, stream);
  else if (cap <= TG_THREADS * 16) err = tg_union_launch_items<16>(a, group0, groups, lay, w, gate, stream);
  else err = tg_union_launch_items<32>(a, group0, groups, lay, w, gate, stream);
  return (int)err;
}
