"""ctypes binding of libdsa (include/dsa.h): the args structs, the status codes, and the loader.

The structs mirror dsa.h field by field; the test suite checks every size and offset against the C
compiler's (tests/support/abi_dump.c). The library is loaded on first use, so ``import dsa`` works
on any machine. The wheel's libdsa links the CUDA runtime statically and needs only the driver; a
libdsa built with the shared runtime (DSA_LIBRARY pointing at a C build) needs libcudart.so.13,
found through its RPATH, a copy already loaded by the process (PyTorch's), or the
``nvidia-cuda-runtime`` wheel.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import sys
import threading
from ctypes import POINTER, c_char_p, c_float, c_int, c_int64, c_size_t, c_void_p

# ---- status codes and enums (dsa.h) --------------------------------------------------------------

DSA_OK = 0
DSA_ERR_NULL_POINTER = 1
DSA_ERR_INVALID_VALUE = 2
DSA_ERR_UNSUPPORTED = 3
DSA_ERR_MISALIGNED = 4
DSA_ERR_WORKSPACE_TOO_SMALL = 5
DSA_ERR_CUDA = 6
DSA_ERR_NO_DEVICE = 7

DSA_DTYPE_BF16 = 0
DSA_DTYPE_FP8_E4M3 = 1
DSA_DTYPE_F32 = 2

DSA_KV_BF16 = 0
DSA_KV_FP8_PACKED = 1

INDEX_HEAD_DIM = 128
MAX_INDEX_HEADS = 64
MAX_TOPK = 2048
MLA_QK_DIM = 576
MLA_V_DIM = 512
MLA_FP8_SLOT_BYTES = 656
MAX_ROW_LEN = 1 << 30


# ---- args structs ---------------------------------------------------------------------------------


class IndexerQuery(ctypes.Structure):
    _fields_ = [
        ("q", c_void_p),
        ("q_dtype", c_int),
        ("q_scale", c_void_p),
        ("weights", c_void_p),
        ("weights_dtype", c_int),
        ("weights_stride", c_int64),
        ("num_heads", c_int),
        ("head_dim", c_int),
        ("softmax_scale", c_float),
    ]


class IndexKCache(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("num_pages", c_int64), ("page_size", c_int)]


class IndexerDecodeArgs(ctypes.Structure):
    _fields_ = [
        ("query", IndexerQuery),
        ("cache", IndexKCache),
        ("seq_lens", c_void_p),
        ("block_table", c_void_p),
        ("block_table_stride", c_int64),
        ("max_blocks_per_req", c_int),
        ("num_reqs", c_int),
        ("q_len_per_req", c_int),
        ("max_seq_len", c_int),
        ("topk", c_int),
        ("topk_indices", c_void_p),
        ("topk_lens", c_void_p),
        ("workspace_limit", c_size_t),
    ]


class IndexerDecodeScoresArgs(ctypes.Structure):
    _fields_ = [
        ("decode", IndexerDecodeArgs),
        ("scores", c_void_p),
        ("scores_stride", c_int64),
        ("skip_short_rows", c_int),
    ]


class IndexerPrefillArgs(ctypes.Structure):
    _fields_ = [
        ("query", IndexerQuery),
        ("cache", IndexKCache),
        ("kv_workspace_slots", c_void_p),
        ("num_workspace_rows", c_int64),
        ("row_starts", c_void_p),
        ("row_ends", c_void_p),
        ("num_tokens", c_int),
        ("max_rows", c_int),
        ("topk", c_int),
        ("output_global_slots", c_int),
        ("topk_indices", c_void_p),
        ("topk_lens", c_void_p),
        ("workspace_limit", c_size_t),
    ]


class IndexerPrefillScoresArgs(ctypes.Structure):
    _fields_ = [
        ("prefill", IndexerPrefillArgs),
        ("scores", c_void_p),
        ("scores_stride", c_int64),
        ("skip_short_rows", c_int),
    ]


class TopkArgs(ctypes.Structure):
    _fields_ = [
        ("scores", c_void_p),
        ("scores_stride", c_int64),
        ("num_rows", c_int),
        ("row_lens", c_void_p),
        ("max_len", c_int),
        ("topk", c_int),
        ("indices", c_void_p),
        ("lens", c_void_p),
    ]


class SparseMlaArgs(ctypes.Structure):
    _fields_ = [
        ("q", c_void_p),
        ("num_tokens", c_int),
        ("num_heads", c_int),
        ("kv_cache", c_void_p),
        ("kv_format", c_int),
        ("num_slots", c_int64),
        ("kv_stride", c_int64),
        ("indices", c_void_p),
        ("indices_stride", c_int64),
        ("topk", c_int),
        ("lens", c_void_p),
        ("softmax_scale", c_float),
        ("out", c_void_p),
        ("lse", c_void_p),
    ]


class IndexKStoreArgs(ctypes.Structure):
    _fields_ = [
        ("k", c_void_p),
        ("k_stride", c_int64),
        ("slot_mapping", c_void_p),
        ("num_tokens", c_int),
        ("cache", c_void_p),
        ("num_pages", c_int64),
        ("page_size", c_int),
    ]


class MlaKvStoreArgs(ctypes.Structure):
    _fields_ = [
        ("kv", c_void_p),
        ("kv_stride", c_int64),
        ("slot_mapping", c_void_p),
        ("num_tokens", c_int),
        ("cache", c_void_p),
        ("kv_format", c_int),
        ("num_slots", c_int64),
        ("cache_stride", c_int64),
    ]


class Shard(ctypes.Structure):
    _fields_ = [("world_size", c_int), ("rank", c_int), ("layout", c_int), ("block", c_int64)]


class CpCandidatesArgs(ctypes.Structure):
    _fields_ = [
        ("shard", Shard),
        ("scores", c_void_p),
        ("scores_stride", c_int64),
        ("max_len", c_int),
        ("local_indices", c_void_p),
        ("row_offsets", c_void_p),
        ("num_rows", c_int),
        ("topk", c_int),
        ("cand_scores", c_void_p),
        ("cand_ids", c_void_p),
    ]


class TopkMergeArgs(ctypes.Structure):
    _fields_ = [
        ("cand_scores", c_void_p),
        ("cand_ids", c_void_p),
        ("num_lists", c_int),
        ("num_rows", c_int),
        ("k_in", c_int),
        ("topk", c_int),
        ("indices", c_void_p),
        ("lens", c_void_p),
    ]


class CpLocalIndicesArgs(ctypes.Structure):
    _fields_ = [
        ("shard", Shard),
        ("indices", c_void_p),
        ("num_tokens", c_int),
        ("topk", c_int),
        ("block_table", c_void_p),
        ("block_table_stride", c_int64),
        ("max_blocks_per_req", c_int),
        ("q_len_per_req", c_int),
        ("page_size", c_int),
        ("num_pages", c_int64),
        ("workspace_slots", c_void_p),
        ("num_workspace_rows", c_int64),
        ("out_slots", c_void_p),
        ("out_lens", c_void_p),
    ]


class LseCombineArgs(ctypes.Structure):
    _fields_ = [
        ("outs", c_void_p),
        ("parts_dtype", c_int),
        ("lses", c_void_p),
        ("num_parts", c_int),
        ("num_tokens", c_int),
        ("num_heads", c_int),
        ("out", c_void_p),
        ("lse", c_void_p),
    ]


DSA_SHARD_ROUND_ROBIN = 0
DSA_SHARD_BLOCKS = 1

# The C struct names, for the ABI check.
C_NAMES = {
    "dsa_indexer_query": IndexerQuery,
    "dsa_index_k_cache": IndexKCache,
    "dsa_indexer_decode_args": IndexerDecodeArgs,
    "dsa_indexer_decode_scores_args": IndexerDecodeScoresArgs,
    "dsa_indexer_prefill_args": IndexerPrefillArgs,
    "dsa_indexer_prefill_scores_args": IndexerPrefillScoresArgs,
    "dsa_topk_args": TopkArgs,
    "dsa_sparse_mla_args": SparseMlaArgs,
    "dsa_index_k_store_args": IndexKStoreArgs,
    "dsa_mla_kv_store_args": MlaKvStoreArgs,
    "dsa_shard": Shard,
    "dsa_cp_candidates_args": CpCandidatesArgs,
    "dsa_topk_merge_args": TopkMergeArgs,
    "dsa_cp_local_indices_args": CpLocalIndicesArgs,
    "dsa_lse_combine_args": LseCombineArgs,
}

# name -> (args type, takes a workspace)
_CALLS = {
    "dsa_indexer_decode": (IndexerDecodeArgs, True),
    "dsa_indexer_prefill": (IndexerPrefillArgs, True),
    "dsa_topk": (TopkArgs, True),
    "dsa_sparse_mla": (SparseMlaArgs, True),
    "dsa_indexer_decode_scores": (IndexerDecodeScoresArgs, False),
    "dsa_indexer_prefill_scores": (IndexerPrefillScoresArgs, False),
    "dsa_index_k_store": (IndexKStoreArgs, False),
    "dsa_mla_kv_store": (MlaKvStoreArgs, False),
    "dsa_cp_candidates": (CpCandidatesArgs, False),
    "dsa_topk_merge": (TopkMergeArgs, False),
    "dsa_cp_local_indices": (CpLocalIndicesArgs, False),
    "dsa_lse_combine": (LseCombineArgs, False),
}
_WS_QUERIES = {
    "dsa_indexer_decode_workspace_size": IndexerDecodeArgs,
    "dsa_indexer_prefill_workspace_size": IndexerPrefillArgs,
    "dsa_topk_workspace_size": TopkArgs,
    "dsa_sparse_mla_workspace_size": SparseMlaArgs,
}

# ---- loading --------------------------------------------------------------------------------------

_lock = threading.Lock()
_handle: ctypes.CDLL | None = None


def _candidates() -> list[pathlib.Path]:
    env = os.environ.get("DSA_LIBRARY")
    if env:
        return [pathlib.Path(env)]
    here = pathlib.Path(__file__).resolve().parent
    out = [here / "libdsa.so"]  # installed wheel
    for build in ("build", "build-dev"):  # a source checkout: python/dsa -> <repo>/build
        out.append(here.parent.parent / build / "libdsa.so")
    return out


def _preload_cudart() -> None:
    """Loads libcudart.so.13 from the nvidia-cuda-runtime wheel, when one is installed."""
    try:
        import nvidia.cuda_runtime as cr  # type: ignore[import-not-found]
    except ImportError:
        return
    for base in list(getattr(cr, "__path__", [])):
        for lib in sorted(pathlib.Path(base, "lib").glob("libcudart.so*")):
            try:
                ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                pass


def _declare(lib: ctypes.CDLL) -> None:
    for name in ("dsa_version", "dsa_last_error"):
        getattr(lib, name).restype = c_char_p
        getattr(lib, name).argtypes = []
    lib.dsa_status_string.restype = c_char_p
    lib.dsa_status_string.argtypes = [c_int]
    for name, (atype, takes_ws) in _CALLS.items():
        f = getattr(lib, name)
        f.restype = c_int
        f.argtypes = [POINTER(atype), c_void_p, c_size_t, c_void_p] if takes_ws else [POINTER(atype), c_void_p]
    for name, atype in _WS_QUERIES.items():
        f = getattr(lib, name)
        f.restype = c_int
        f.argtypes = [POINTER(atype), POINTER(c_size_t)]


def lib() -> ctypes.CDLL:
    """The loaded libdsa (loaded once, on first use)."""
    global _handle
    if _handle is not None:
        return _handle
    with _lock:
        if _handle is not None:
            return _handle
        tried = []
        for path in _candidates():
            if not path.exists():
                tried.append(f"{path} (absent)")
                continue
            for attempt in range(2):
                try:
                    h = ctypes.CDLL(str(path))
                    _declare(h)
                    _handle = h
                    return h
                except OSError as e:
                    if attempt == 0 and "cudart" in str(e):
                        _preload_cudart()
                        continue
                    tried.append(f"{path} ({e})")
                    break
        raise OSError(
            "dsa: cannot load libdsa.so; tried: " + "; ".join(tried)
            + ". Install the package (pip install .) or set DSA_LIBRARY to a built libdsa.so."
        )


def platform_ok() -> bool:
    return sys.platform.startswith("linux")
