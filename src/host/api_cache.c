/*
 * host/api_cache.c — the cache writers (dsa.h "Cache writers"): dsa_index_k_store, dsa_mla_kv_store.
 */
#include "dsa.h"

#include "host/check.h"
#include "kernels.h"

dsa_status dsa_index_k_store(const dsa_index_k_store_args *a, cudaStream_t stream) {
  const char *fn = "dsa_index_k_store";
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_tokens < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->k_stride < DSA_INDEX_HEAD_DIM)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: k_stride = %lld < %d", fn, (long long)a->k_stride, DSA_INDEX_HEAD_DIM);
  dsa_index_k_cache c = {a->cache, a->num_pages, a->page_size};
  CHECK(check_cache(fn, &c, a->num_tokens > 0));
  if (a->num_tokens == 0) return DSA_OK;
  NEED_PTR(a->k, "k");
  NEED_PTR(a->slot_mapping, "slot_mapping");
  if (misaligned(a->k, 16) || a->k_stride % 8)
    return dsa_fail(DSA_ERR_MISALIGNED, "%s: k = %p and k_stride = %lld must give 16-byte aligned rows", fn, a->k,
                    (long long)a->k_stride);
  NEED_ALIGNED(a->slot_mapping, 8, "slot_mapping");
  CHECK(check_extent(fn, "k", a->k, a->num_tokens, a->k_stride, DSA_INDEX_HEAD_DIM, 2));
  CHECK(check_array(fn, "slot_mapping", a->slot_mapping, a->num_tokens, 8));
  int sms = 0;
  CHECK(dsa_need_device(fn, &sms));
  return dsa_cuda_status(fn, dsa_index_k_store_launch(a, stream));
}

dsa_status dsa_mla_kv_store(const dsa_mla_kv_store_args *a, cudaStream_t stream) {
  const char *fn = "dsa_mla_kv_store";
  if (!a) return dsa_fail(DSA_ERR_NULL_POINTER, "%s: args is NULL", fn);
  if (a->num_tokens < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_tokens = %d < 0", fn, a->num_tokens);
  if (a->kv_stride < DSA_MLA_QK_DIM)
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: kv_stride = %lld < %d", fn, (long long)a->kv_stride, DSA_MLA_QK_DIM);
  if (a->kv_format != DSA_KV_BF16 && a->kv_format != DSA_KV_FP8_PACKED)
    return dsa_fail(DSA_ERR_UNSUPPORTED, "%s: kv_format = %d (bf16 or packed fp8)", fn, (int)a->kv_format);
  if (a->num_slots < 0) return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: num_slots = %lld < 0", fn, (long long)a->num_slots);
  if (a->kv_format == DSA_KV_BF16 && (a->cache_stride < DSA_MLA_QK_DIM || a->cache_stride % 8))
    return dsa_fail(DSA_ERR_INVALID_VALUE, "%s: cache_stride = %lld (bf16 rows need >= 576, a multiple of 8)", fn,
                    (long long)a->cache_stride);
  if (a->num_tokens == 0) return DSA_OK;
  NEED_PTR(a->kv, "kv");
  NEED_PTR(a->slot_mapping, "slot_mapping");
  NEED_PTR(a->cache, "cache");
  if (misaligned(a->kv, 16) || a->kv_stride % 8)
    return dsa_fail(DSA_ERR_MISALIGNED, "%s: kv = %p and kv_stride = %lld must give 16-byte aligned rows", fn, a->kv,
                    (long long)a->kv_stride);
  NEED_ALIGNED(a->cache, 16, "cache");
  NEED_ALIGNED(a->slot_mapping, 8, "slot_mapping");
  CHECK(check_extent(fn, "kv", a->kv, a->num_tokens, a->kv_stride, DSA_MLA_QK_DIM, 2));
  CHECK(check_array(fn, "slot_mapping", a->slot_mapping, a->num_tokens, 8));
  if (a->kv_format == DSA_KV_BF16)
    CHECK(check_extent(fn, "cache", a->cache, a->num_slots, a->cache_stride, DSA_MLA_QK_DIM, 2));
  else
    CHECK(check_array(fn, "cache", a->cache, a->num_slots, DSA_MLA_FP8_SLOT_BYTES));
  int sms = 0;
  CHECK(dsa_need_device(fn, &sms));
  return dsa_cuda_status(fn, dsa_mla_kv_store_launch(a, stream));
}
