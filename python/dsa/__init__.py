"""dsa — DeepSeek Sparse Attention on NVIDIA Hopper, from Python.

One function per operation of the C library (include/dsa.h), keyword arguments named as there:

    indexer_decode, indexer_prefill          indexer scores + top-k (what attention consumes)
    indexer_decode_scores, indexer_prefill_scores   the raw scores, for engines with their own top-k
    topk                                     top-k over float32 rows
    sparse_mla                               sparse MLA attention (decode and prefill)
    index_k_store, mla_kv_store              the cache writers
    *_workspace_size                         scratch bytes a call needs (to preallocate for graphs)
    cp_candidates, topk_merge,               context parallelism's single-GPU pieces (the caller
    cp_local_indices, lse_combine            gathers between ranks, e.g. torch.distributed)

Arrays are CUDA arrays of any framework: PyTorch tensors, or objects with __cuda_array_interface__
(CuPy) or __dlpack__ (JAX). Calls run asynchronously on the current stream of the inputs'
framework (PyTorch's ``torch.cuda.current_stream()``; pass ``stream=`` to choose), allocate outputs
and workspaces through that framework (PyTorch's caching allocator: no cudaMalloc per call), and
can be captured in CUDA graphs. Importing dsa needs neither PyTorch nor a GPU.

Errors: argument mismatches (dtype, shape, device, layout) raise DsaArgumentError (a ValueError)
naming the argument; a failing C call raises DsaError with its status and message.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple

from . import _fast, _lib
from ._tensors import (DsaArgumentError, View, current_stream, describe, dtype_name, empty, stream_handle,
                       torch_keep_for_stream, view)

__all__ = [
    "DsaError",
    "DsaArgumentError",
    "version",
    "indexer_decode",
    "indexer_decode_workspace_size",
    "indexer_decode_scores",
    "indexer_prefill",
    "indexer_prefill_workspace_size",
    "indexer_prefill_scores",
    "topk",
    "topk_workspace_size",
    "sparse_mla",
    "sparse_mla_workspace_size",
    "index_k_store",
    "mla_kv_store",
    "cp_candidates",
    "topk_merge",
    "cp_local_indices",
    "lse_combine",
    "INDEX_HEAD_DIM",
    "MLA_QK_DIM",
    "MLA_V_DIM",
    "MLA_FP8_SLOT_BYTES",
    "MAX_TOPK",
]

INDEX_HEAD_DIM = _lib.INDEX_HEAD_DIM
MLA_QK_DIM = _lib.MLA_QK_DIM
MLA_V_DIM = _lib.MLA_V_DIM
MLA_FP8_SLOT_BYTES = _lib.MLA_FP8_SLOT_BYTES
MAX_TOPK = _lib.MAX_TOPK
_INDEX_ROW_BYTES = INDEX_HEAD_DIM + 4  # one index-K slot in its page: 128 FP8 bytes + one float scale

_STATUS_NAMES = {
    0: "DSA_OK",
    1: "DSA_ERR_NULL_POINTER",
    2: "DSA_ERR_INVALID_VALUE",
    3: "DSA_ERR_UNSUPPORTED",
    4: "DSA_ERR_MISALIGNED",
    5: "DSA_ERR_WORKSPACE_TOO_SMALL",
    6: "DSA_ERR_CUDA",
    7: "DSA_ERR_NO_DEVICE",
}


class DsaError(RuntimeError):
    """A dsa C call failed: ``status`` (int, dsa.h's dsa_status), ``status_name``, ``message``."""

    def __init__(self, status: int, message: str):
        self.status = int(status)
        self.status_name = _STATUS_NAMES.get(self.status, f"status {status}")
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


def version() -> str:
    """The C library's version, "MAJOR.MINOR.PATCH" (loads libdsa)."""
    return _lib.lib().dsa_version().decode()


# ---- helpers ----------------------------------------------------------------------------------------


def _arg(fn: str, name: str, x: Any, dtypes: Tuple[str, ...], shape: Tuple[Optional[int], ...],
         layout: str = "contiguous") -> View:
    """A View of x, checked: dtype in dtypes, len(shape) dims with the given sizes (None = any),
    layout "contiguous" or "rows" (last dim contiguous, rows at any stride >= the row length)."""
    v = view(x, fn, name)
    if v.dtype not in dtypes or len(v.shape) != len(shape) or any(
        n is not None and n != m for n, m in zip(shape, v.shape)
    ):
        want = " or ".join(dtype_name(d) for d in dtypes)
        dims = "[" + ", ".join("*" if n is None else str(n) for n in shape) + "]"
        raise DsaArgumentError(f"{fn}: {name} must be {want} {dims}, got {describe(v)}")
    if layout == "contiguous" and not v.is_contiguous():
        raise DsaArgumentError(f"{fn}: {name} must be contiguous, got strides {list(v.strides)}")
    if layout == "rows":
        inner_ok = v.is_contiguous() or (len(v.shape) >= 2 and v.strides[-1] == 1 and
                                         View(0, v.shape[1:], v.strides[1:], v.dtype, "", None).is_contiguous() and
                                         v.strides[0] >= max(1, _prod(v.shape[1:])))
        if not inner_ok:
            raise DsaArgumentError(f"{fn}: {name} rows must be contiguous (any row stride), got strides {list(v.strides)}")
    return v


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


def _row_stride(v: View) -> int:
    """Elements between rows of a view that passed _arg's "rows" (or "contiguous") check: at least
    the row length, so no caller needs to clamp it."""
    return int(v.strides[0]) if len(v.shape) >= 1 and v.shape[0] > 1 else _prod(v.shape[1:])


def _same_device(fn: str, views: dict) -> Optional[int]:
    dev = None
    for v in views.values():
        if v is not None and v.device is not None:
            if dev is None:
                dev = v.device
            elif v.device != dev:
                devs = {name: v.device for name, v in views.items() if v is not None and v.device is not None}
                raise DsaArgumentError(f"{fn}: arrays are on different devices: {devs}")
    return dev


def _stream(stream: Any, views: list, device: Optional[int]) -> int:
    if stream is None:
        return current_stream([v for v in views if v is not None], device)
    return stream_handle(stream)


def _raise(status: int) -> None:
    if status != _lib.DSA_OK:
        raise DsaError(status, _lib.lib().dsa_last_error().decode(errors="replace"))


_fast._fail = _raise


def _ws_bytes(query: str, args: ctypes.Structure) -> int:
    n = ctypes.c_size_t(0)
    _raise(getattr(_lib.lib(), query)(ctypes.byref(args), ctypes.byref(n)))
    return int(n.value)


def _workspace(fn: str, need: int, workspace: Any, like: View) -> Tuple[int, int, Any]:
    """(pointer, bytes, keep-alive) of the caller's workspace, or of one allocated by the framework."""
    if workspace is None:
        if need == 0:
            return 0, 0, None
        buf = empty(like, (need,), "u8", fn, "workspace")
        v = view(buf, fn, "workspace")
        return v.ptr, need, buf
    v = view(workspace, fn, "workspace")
    if not v.is_contiguous():
        raise DsaArgumentError(f"{fn}: workspace must be contiguous")
    return v.ptr, v.nbytes_span, workspace


def _out(fn: str, name: str, x: Any, like: View, shape: tuple, dtype: str, layout: str = "contiguous"):
    """(array, view) of an output: the caller's (checked) or a new one."""
    if x is None:
        x = empty(like, shape, dtype, fn, name)
    v = _arg(fn, name, x, (dtype,), shape, layout)
    return x, v


def _ptr(v: Optional[View]) -> Optional[int]:
    return None if v is None else (v.ptr or None)


def _scores_out(fn: str, scores: Any, like: View, T: int, max_len: int) -> Tuple[Any, View, int]:
    """(array, view, row stride) of a scores-only call's output: float32 [T, >= max_len]."""
    scores, sv = _out(fn, "scores", scores, like, (T, max_len) if scores is None else (T, None), "f32", "rows")
    if sv.shape[1] < max_len:
        raise DsaArgumentError(f"{fn}: scores must have at least {max_len} columns, got {describe(sv)}")
    return scores, sv, _row_stride(sv)


def _run_with_workspace(call: str, query: str, a: ctypes.Structure, workspace: Any, views: dict, fn: str,
                        like: View, stream: Any, device: Optional[int]) -> int:
    """Sizes the workspace for `a`, takes the caller's or allocates one, and runs the C call;
    returns the size."""
    need = _ws_bytes(query, a)
    wp, wb, keep = _workspace(fn, need, workspace, like)
    s = _stream(stream, list(views.values()), device)
    _raise(getattr(_lib.lib(), call)(ctypes.byref(a), wp or None, wb, s or None))
    if workspace is None and keep is not None and stream is not None and like.framework == "torch":
        torch_keep_for_stream(keep, s)  # allocated on the current stream, used on another
    return need


def _index_k_cache(fn: str, x: Any, page_size: int) -> Tuple[View, int]:
    """The paged FP8 index-K cache as bytes: any contiguous uint8 (or float8) array whose first dim
    is the page count (or 1-D): page_size * 132 bytes a page."""
    v = view(x, fn, "index_k_cache")
    if v.dtype not in ("u8", "fp8") or not v.is_contiguous() or len(v.shape) == 0:
        raise DsaArgumentError(f"{fn}: index_k_cache must be a contiguous uint8 array of pages "
                               f"({page_size} x {_INDEX_ROW_BYTES} bytes each), got {describe(v)}")
    page_bytes = page_size * _INDEX_ROW_BYTES
    total = _prod(v.shape)
    if total % page_bytes:
        raise DsaArgumentError(f"{fn}: index_k_cache holds {total} bytes, not a whole number of "
                               f"{page_bytes}-byte pages (page_size = {page_size})")
    pages = total // page_bytes
    if len(v.shape) >= 2 and v.shape[0] != pages:
        raise DsaArgumentError(f"{fn}: index_k_cache's first dimension ({v.shape[0]}) must be its page count ({pages})")
    return v, pages


def _query(fn: str, q: Any, weights: Any, q_scale: Any, softmax_scale: float, tokens: Optional[int]):
    qv = _arg(fn, "q", q, ("bf16", "fp8", "u8"), (tokens, None, INDEX_HEAD_DIM))
    T, H = qv.shape[0], qv.shape[1]
    wv = _arg(fn, "weights", weights, ("f32", "bf16"), (T, H), "rows")
    fp8 = qv.dtype in ("fp8", "u8")
    sv = None
    if fp8:
        if q_scale is None:
            raise DsaArgumentError(f"{fn}: q_scale is required with FP8 q (float32 [{T}, {H}])")
        sv = _arg(fn, "q_scale", q_scale, ("f32",), (T, H))
    elif q_scale is not None:
        raise DsaArgumentError(f"{fn}: q_scale is only for FP8 q (q is bfloat16)")
    qs = _lib.IndexerQuery()
    qs.q = qv.ptr or None
    qs.q_dtype = _lib.DSA_DTYPE_FP8_E4M3 if fp8 else _lib.DSA_DTYPE_BF16
    qs.q_scale = _ptr(sv)
    qs.weights = wv.ptr or None
    qs.weights_dtype = _lib.DSA_DTYPE_F32 if wv.dtype == "f32" else _lib.DSA_DTYPE_BF16
    qs.weights_stride = _row_stride(wv)
    qs.num_heads = H
    qs.head_dim = INDEX_HEAD_DIM
    qs.softmax_scale = float(softmax_scale)
    return qs, {"q": qv, "weights": wv, "q_scale": sv}


# ---- indexer: decode ----------------------------------------------------------------------------


def _decode_args(fn, q, weights, index_k_cache, seq_lens, block_table, topk, softmax_scale, q_scale, page_size,
                 q_len_per_req, max_seq_len):
    sl = _arg(fn, "seq_lens", seq_lens, ("i32",), (None,))
    R = sl.shape[0]
    bt = _arg(fn, "block_table", block_table, ("i32",), (R, None), "rows")
    qs, views = _query(fn, q, weights, q_scale, softmax_scale, R * q_len_per_req)
    cv, pages = _index_k_cache(fn, index_k_cache, page_size)
    a = _lib.IndexerDecodeArgs()
    a.query = qs
    a.cache.data = cv.ptr or None
    a.cache.num_pages = pages
    a.cache.page_size = page_size
    a.seq_lens = _ptr(sl)
    a.block_table = _ptr(bt)
    a.block_table_stride = _row_stride(bt)
    a.max_blocks_per_req = bt.shape[1]
    a.num_reqs = R
    a.q_len_per_req = q_len_per_req
    a.max_seq_len = max_seq_len
    a.topk = topk
    views.update({"index_k_cache": cv, "seq_lens": sl, "block_table": bt})
    return a, views


def indexer_decode_workspace_size(q: Any, weights: Any, index_k_cache: Any, seq_lens: Any, block_table: Any, *,
                                  topk: int, softmax_scale: float, q_scale: Any = None, page_size: int = 64,
                                  q_len_per_req: int = 1, max_seq_len: int = 0, workspace_limit: int = 0) -> int:
    """Workspace bytes indexer_decode needs for these arguments (0 when nothing is scored)."""
    fn = "dsa.indexer_decode_workspace_size"
    a, _ = _decode_args(fn, q, weights, index_k_cache, seq_lens, block_table, topk, softmax_scale, q_scale,
                        page_size, q_len_per_req, max_seq_len)
    a.workspace_limit = workspace_limit
    return _ws_bytes("dsa_indexer_decode_workspace_size", a)


# Each call's fast-path layout (dsa/_fast.py): its tensor arguments' struct fields, its results.
_INDEXER_DECODE = _fast.Site("dsa_indexer_decode",
                             ("query.q", "query.weights", "cache.data", "seq_lens", "block_table", "query.q_scale",
                              "topk_indices", "topk_lens", _fast.WORKSPACE), results=(6, 7))


def indexer_decode(q: Any, weights: Any, index_k_cache: Any, seq_lens: Any, block_table: Any, *, topk: int,
                   softmax_scale: float, q_scale: Any = None, page_size: int = 64, q_len_per_req: int = 1,
                   max_seq_len: int = 0, topk_indices: Any = None, topk_lens: Any = None, workspace: Any = None,
                   workspace_limit: int = 0, stream: Any = None) -> Tuple[Any, Any]:
    """Decode indexer: scores every visible position of each token and keeps the top-k.

    q [T, H, 128] bf16 (or FP8 e4m3 / uint8 with q_scale float32 [T, H]); weights [T, H] float32 or
    bf16 (rows may be strided); index_k_cache the paged FP8 cache (page_size * 132 bytes a page);
    seq_lens int32 [R]; block_table int32 [R, max_blocks] (rows may be strided); T = R * q_len_per_req
    (token t = r * n + j sees L = seq_lens[r] - (n - 1) + j positions). Returns (topk_indices int32
    [T, topk]: global slots, -1 past lens; topk_lens int32 [T] = min(topk, L)). workspace_limit
    (bytes, 0 = none) caps the workspace at some cost in speed (dsa.h).
    """
    tensors = (q, weights, index_k_cache, seq_lens, block_table, q_scale, topk_indices, topk_lens, workspace)
    scalars = (topk, softmax_scale, page_size, q_len_per_req, max_seq_len, workspace_limit)
    r = _fast.call(_INDEXER_DECODE, tensors, scalars, stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r
    fn = "dsa.indexer_decode"
    a, views = _decode_args(fn, q, weights, index_k_cache, seq_lens, block_table, topk, softmax_scale, q_scale,
                            page_size, q_len_per_req, max_seq_len)
    a.workspace_limit = workspace_limit
    T = views["q"].shape[0]
    dev = _same_device(fn, views)
    topk_indices, iv = _out(fn, "topk_indices", topk_indices, views["q"], (T, topk), "i32")
    topk_lens, lv = _out(fn, "topk_lens", topk_lens, views["q"], (T,), "i32")
    a.topk_indices = _ptr(iv)
    a.topk_lens = _ptr(lv)
    need = _run_with_workspace("dsa_indexer_decode", "dsa_indexer_decode_workspace_size", a, workspace, views, fn,
                               views["q"], stream, dev)
    _fast.remember(_INDEXER_DECODE, tensors, scalars, a, views["q"], {6: ((T, topk), "i32"), 7: ((T,), "i32")}, need)
    return topk_indices, topk_lens


_INDEXER_DECODE_SCORES = _fast.Site("dsa_indexer_decode_scores",
                                    ("decode.query.q", "decode.query.weights", "decode.cache.data", "decode.seq_lens",
                                     "decode.block_table", "decode.query.q_scale", "scores"), results=(6,))


def indexer_decode_scores(q: Any, weights: Any, index_k_cache: Any, seq_lens: Any, block_table: Any, *,
                          softmax_scale: float, q_scale: Any = None, page_size: int = 64, q_len_per_req: int = 1,
                          max_seq_len: int = 0, topk: int = MAX_TOPK, skip_short_rows: bool = False,
                          scores: Any = None, stream: Any = None) -> Any:
    """Decode indexer scores alone: float32 [T, max_len] (max_len = max_seq_len, or the block
    table's capacity); row t holds the scores of positions [0, L(t)) and -inf in [L(t), max_len).
    With skip_short_rows, tokens with L <= topk are not scored (their -inf tail still is written)."""
    tensors = (q, weights, index_k_cache, seq_lens, block_table, q_scale, scores)
    scalars = (softmax_scale, page_size, q_len_per_req, max_seq_len, topk, bool(skip_short_rows))
    r = _fast.call(_INDEXER_DECODE_SCORES, tensors, scalars, stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r[0]
    fn = "dsa.indexer_decode_scores"
    a, views = _decode_args(fn, q, weights, index_k_cache, seq_lens, block_table, topk, softmax_scale, q_scale,
                            page_size, q_len_per_req, max_seq_len)
    T = views["q"].shape[0]
    cap = a.max_blocks_per_req * page_size
    max_len = max_seq_len if 0 < max_seq_len < cap else cap
    dev = _same_device(fn, views)
    scores, sv, stride = _scores_out(fn, scores, views["q"], T, max_len)
    sa = _lib.IndexerDecodeScoresArgs()
    sa.decode = a
    sa.scores = _ptr(sv)
    sa.scores_stride = stride
    sa.skip_short_rows = int(bool(skip_short_rows))
    s = _stream(stream, list(views.values()), dev)
    _raise(_lib.lib().dsa_indexer_decode_scores(ctypes.byref(sa), s or None))
    _fast.remember(_INDEXER_DECODE_SCORES, tensors, scalars, sa, views["q"], {6: ((T, max_len), "f32")})
    return scores


# ---- indexer: prefill ---------------------------------------------------------------------------


def _prefill_args(fn, q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, topk, softmax_scale,
                  q_scale, page_size, max_rows, output_global_slots):
    ws = _arg(fn, "kv_workspace_slots", kv_workspace_slots, ("i64",), (None,))
    rs = _arg(fn, "row_starts", row_starts, ("i32",), (None,))
    T = rs.shape[0]
    re = _arg(fn, "row_ends", row_ends, ("i32",), (T,))
    qs, views = _query(fn, q, weights, q_scale, softmax_scale, T)
    cv, pages = _index_k_cache(fn, index_k_cache, page_size)
    a = _lib.IndexerPrefillArgs()
    a.query = qs
    a.cache.data = cv.ptr or None
    a.cache.num_pages = pages
    a.cache.page_size = page_size
    a.kv_workspace_slots = _ptr(ws)
    a.num_workspace_rows = ws.shape[0]
    a.row_starts = _ptr(rs)
    a.row_ends = _ptr(re)
    a.num_tokens = T
    a.max_rows = max_rows
    a.topk = topk
    a.output_global_slots = int(bool(output_global_slots))
    views.update({"index_k_cache": cv, "kv_workspace_slots": ws, "row_starts": rs, "row_ends": re})
    return a, views


def indexer_prefill_workspace_size(q: Any, weights: Any, index_k_cache: Any, kv_workspace_slots: Any,
                                   row_starts: Any, row_ends: Any, *, topk: int, softmax_scale: float,
                                   q_scale: Any = None, page_size: int = 64, max_rows: int = 0,
                                   workspace_limit: int = 0) -> int:
    """Workspace bytes indexer_prefill needs for these arguments."""
    fn = "dsa.indexer_prefill_workspace_size"
    a, _ = _prefill_args(fn, q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, topk,
                         softmax_scale, q_scale, page_size, max_rows, False)
    a.workspace_limit = workspace_limit
    return _ws_bytes("dsa_indexer_prefill_workspace_size", a)


_INDEXER_PREFILL = _fast.Site("dsa_indexer_prefill",
                              ("query.q", "query.weights", "cache.data", "kv_workspace_slots", "row_starts",
                               "row_ends", "query.q_scale", "topk_indices", "topk_lens", _fast.WORKSPACE), results=(7, 8))


def indexer_prefill(q: Any, weights: Any, index_k_cache: Any, kv_workspace_slots: Any, row_starts: Any,
                    row_ends: Any, *, topk: int, softmax_scale: float, q_scale: Any = None, page_size: int = 64,
                    max_rows: int = 0, output_global_slots: bool = False, topk_indices: Any = None,
                    topk_lens: Any = None, workspace: Any = None, workspace_limit: int = 0,
                    stream: Any = None) -> Tuple[Any, Any]:
    """Prefill indexer: token t sees workspace rows [row_starts[t], row_ends[t]); row w is global
    index-K slot kv_workspace_slots[w] (int64 [W]). q, weights, q_scale as indexer_decode.
    Returns (topk_indices int32 [T, topk]: workspace rows, or global slots with
    output_global_slots=True — what sparse_mla consumes; -1 past lens; topk_lens int32 [T]).
    workspace_limit as indexer_decode."""
    tensors = (q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, q_scale, topk_indices, topk_lens,
               workspace)
    scalars = (topk, softmax_scale, page_size, max_rows, bool(output_global_slots), workspace_limit)
    r = _fast.call(_INDEXER_PREFILL, tensors, scalars, stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r
    fn = "dsa.indexer_prefill"
    a, views = _prefill_args(fn, q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, topk,
                             softmax_scale, q_scale, page_size, max_rows, output_global_slots)
    a.workspace_limit = workspace_limit
    T = a.num_tokens
    dev = _same_device(fn, views)
    topk_indices, iv = _out(fn, "topk_indices", topk_indices, views["q"], (T, topk), "i32")
    topk_lens, lv = _out(fn, "topk_lens", topk_lens, views["q"], (T,), "i32")
    a.topk_indices = _ptr(iv)
    a.topk_lens = _ptr(lv)
    need = _run_with_workspace("dsa_indexer_prefill", "dsa_indexer_prefill_workspace_size", a, workspace, views, fn,
                               views["q"], stream, dev)
    _fast.remember(_INDEXER_PREFILL, tensors, scalars, a, views["q"], {7: ((T, topk), "i32"), 8: ((T,), "i32")},
                   need)
    return topk_indices, topk_lens


_INDEXER_PREFILL_SCORES = _fast.Site("dsa_indexer_prefill_scores",
                                     ("prefill.query.q", "prefill.query.weights", "prefill.cache.data",
                                      "prefill.kv_workspace_slots", "prefill.row_starts", "prefill.row_ends",
                                      "prefill.query.q_scale", "scores"), results=(7,))


def indexer_prefill_scores(q: Any, weights: Any, index_k_cache: Any, kv_workspace_slots: Any, row_starts: Any,
                           row_ends: Any, *, softmax_scale: float, q_scale: Any = None, page_size: int = 64,
                           max_rows: int = 0, topk: int = MAX_TOPK, skip_short_rows: bool = False,
                           scores: Any = None, stream: Any = None) -> Any:
    """Prefill indexer scores alone: float32 [T, max_len] (max_len = max_rows, or W), row t column i
    = the score of workspace row row_starts[t] + i for its visible rows, -inf past them up to
    max_rows (or the workspace's rows)."""
    tensors = (q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, q_scale, scores)
    scalars = (softmax_scale, page_size, max_rows, topk, bool(skip_short_rows))
    r = _fast.call(_INDEXER_PREFILL_SCORES, tensors, scalars, stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r[0]
    fn = "dsa.indexer_prefill_scores"
    a, views = _prefill_args(fn, q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, topk,
                             softmax_scale, q_scale, page_size, max_rows, False)
    T, W = a.num_tokens, a.num_workspace_rows
    max_len = max_rows if 0 < max_rows < W else W
    dev = _same_device(fn, views)
    scores, sv, stride = _scores_out(fn, scores, views["q"], T, max_len)
    sa = _lib.IndexerPrefillScoresArgs()
    sa.prefill = a
    sa.scores = _ptr(sv)
    sa.scores_stride = stride
    sa.skip_short_rows = int(bool(skip_short_rows))
    s = _stream(stream, list(views.values()), dev)
    _raise(_lib.lib().dsa_indexer_prefill_scores(ctypes.byref(sa), s or None))
    _fast.remember(_INDEXER_PREFILL_SCORES, tensors, scalars, sa, views["q"], {7: ((T, max_len), "f32")})
    return scores


# ---- top-k ----------------------------------------------------------------------------------------


def _topk_args(fn, scores, topk, row_lens, max_len):
    sv = _arg(fn, "scores", scores, ("f32",), (None, None), "rows")
    R = sv.shape[0]
    lv = None if row_lens is None else _arg(fn, "row_lens", row_lens, ("i32",), (R,))
    a = _lib.TopkArgs()
    a.scores = _ptr(sv)
    a.max_len = sv.shape[1] if max_len is None else int(max_len)
    if a.max_len > sv.shape[1]:
        raise DsaArgumentError(f"{fn}: max_len = {a.max_len} exceeds the {sv.shape[1]} columns of scores")
    a.scores_stride = _row_stride(sv)
    a.num_rows = R
    a.row_lens = _ptr(lv)
    a.topk = topk
    return a, {"scores": sv, "row_lens": lv}


def topk_workspace_size(scores: Any, *, topk: int, row_lens: Any = None, max_len: Optional[int] = None) -> int:
    """Workspace bytes topk needs for these arguments."""
    a, _ = _topk_args("dsa.topk_workspace_size", scores, topk, row_lens, max_len)
    return _ws_bytes("dsa_topk_workspace_size", a)


_TOPK = _fast.Site("dsa_topk", ("scores", "row_lens", "indices", "lens", _fast.WORKSPACE), results=(2, 3))


def topk(scores: Any, *, topk: int, row_lens: Any = None, max_len: Optional[int] = None, indices: Any = None,
         lens: Any = None, workspace: Any = None, stream: Any = None) -> Tuple[Any, Any]:
    """Top-k of float32 rows: scores [R, >= max_len] (rows may be strided), row r has
    L = clamp(row_lens[r], 0, max_len) entries (max_len = the column count by default). Ties go to
    the lower position, NaN ranks lowest. Returns (indices int32 [R, topk], -1 past lens;
    lens int32 [R] = min(topk, L))."""
    tensors, scalars = (scores, row_lens, indices, lens, workspace), (topk, max_len)
    r = _fast.call(_TOPK, tensors, scalars, stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r
    fn = "dsa.topk"
    a, views = _topk_args(fn, scores, topk, row_lens, max_len)
    R = a.num_rows
    dev = _same_device(fn, views)
    indices, iv = _out(fn, "indices", indices, views["scores"], (R, topk), "i32")
    lens, lv = _out(fn, "lens", lens, views["scores"], (R,), "i32")
    a.indices = _ptr(iv)
    a.lens = _ptr(lv)
    need = _run_with_workspace("dsa_topk", "dsa_topk_workspace_size", a, workspace, views, fn, views["scores"],
                               stream, dev)
    _fast.remember(_TOPK, tensors, scalars, a, views["scores"], {2: ((R, topk), "i32"), 3: ((R,), "i32")}, need)
    return indices, lens


# ---- sparse MLA attention -------------------------------------------------------------------------


def _kv_cache(fn: str, x: Any) -> Tuple[View, int, int, int]:
    """(view, kv_format, num_slots, kv_stride): uint8 [..., 656] packed FP8 rows (leading dims are
    slots, contiguous) or bfloat16 [..., >= 576] rows (last dim contiguous, rows at any stride)."""
    v = view(x, fn, "kv_cache")
    if v.dtype in ("u8", "fp8"):
        if v.shape[-1:] != (MLA_FP8_SLOT_BYTES,) or not v.is_contiguous():
            raise DsaArgumentError(f"{fn}: kv_cache as packed FP8 must be contiguous uint8 [..., {MLA_FP8_SLOT_BYTES}], "
                                   f"got {describe(v)}")
        return v, _lib.DSA_KV_FP8_PACKED, _prod(v.shape[:-1]), 0
    if v.dtype == "bf16":
        if len(v.shape) < 2 or v.shape[-1] < MLA_QK_DIM or v.strides[-1] != 1:
            raise DsaArgumentError(f"{fn}: kv_cache as bf16 must be [..., >= {MLA_QK_DIM}] with contiguous rows, "
                                   f"got {describe(v)}")
        # leading dims flatten into slots only when they step by whole rows
        stride = v.strides[-2]
        for d in range(len(v.shape) - 2):
            if v.strides[d] != stride * _prod(v.shape[d + 1:-1]):
                raise DsaArgumentError(f"{fn}: kv_cache's leading dimensions must flatten to one slot dimension")
        return v, _lib.DSA_KV_BF16, _prod(v.shape[:-1]), max(stride, v.shape[-1])
    raise DsaArgumentError(f"{fn}: kv_cache must be uint8 (packed FP8, {MLA_FP8_SLOT_BYTES} B a slot) or bfloat16, "
                           f"got {describe(v)}")


def _mla_args(fn, q, kv_cache, indices, softmax_scale, lens, topk):
    qv = _arg(fn, "q", q, ("bf16",), (None, None, MLA_QK_DIM))
    T, H = qv.shape[0], qv.shape[1]
    cv, fmt, slots, stride = _kv_cache(fn, kv_cache)
    iv = _arg(fn, "indices", indices, ("i32",), (T, None), "rows")
    k = iv.shape[1] if topk is None else int(topk)
    if k > iv.shape[1]:
        raise DsaArgumentError(f"{fn}: topk = {k} exceeds the {iv.shape[1]} columns of indices")
    lv = None if lens is None else _arg(fn, "lens", lens, ("i32",), (T,))
    a = _lib.SparseMlaArgs()
    a.q = _ptr(qv)
    a.num_tokens = T
    a.num_heads = H
    a.kv_cache = _ptr(cv)
    a.kv_format = fmt
    a.num_slots = slots
    a.kv_stride = stride
    a.indices = _ptr(iv)
    a.indices_stride = _row_stride(iv)
    a.topk = k
    a.lens = _ptr(lv)
    a.softmax_scale = float(softmax_scale)
    return a, {"q": qv, "kv_cache": cv, "indices": iv, "lens": lv}


def sparse_mla_workspace_size(q: Any, kv_cache: Any, indices: Any, *, softmax_scale: float, lens: Any = None,
                              topk: Optional[int] = None) -> int:
    """Workspace bytes sparse_mla needs for these arguments (holds on every sm_90 device)."""
    a, _ = _mla_args("dsa.sparse_mla_workspace_size", q, kv_cache, indices, softmax_scale, lens, topk)
    return _ws_bytes("dsa_sparse_mla_workspace_size", a)


_SPARSE_MLA = _fast.Site("dsa_sparse_mla", ("q", "kv_cache", "indices", "lens", "out", "lse", _fast.WORKSPACE),
                         results=(4, 5))


def sparse_mla(q: Any, kv_cache: Any, indices: Any, *, softmax_scale: float, lens: Any = None,
               topk: Optional[int] = None, out: Any = None, lse: Any = None, return_lse: bool = False,
               workspace: Any = None, stream: Any = None) -> Any:
    """Sparse MLA attention: for token t, head h, over the entries i < topk of indices[t] with
    0 <= idx < num_slots (and i < lens[t] when given): out = softmax(scale * q.k) v, v = k[:512].

    q bf16 [T, H, 576]; kv_cache packed FP8 uint8 [num_slots, 656] or bf16 [num_slots, >= 576]
    (leading dims, e.g. [pages, 64, ...], flatten into slots); indices int32 [T, >= topk] global
    slots. Returns out bf16 [T, H, 512], or (out, lse float32 [T, H]) with return_lse / lse=.
    A token with no valid entry gets out = 0, lse = -inf."""
    want_lse = return_lse or lse is not None
    tensors, scalars = (q, kv_cache, indices, lens, out, lse, workspace), (softmax_scale, topk, want_lse)
    r = _fast.call(_SPARSE_MLA, tensors, scalars, stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r if want_lse else r[0]
    fn = "dsa.sparse_mla"
    a, views = _mla_args(fn, q, kv_cache, indices, softmax_scale, lens, topk)
    T, H = a.num_tokens, a.num_heads
    dev = _same_device(fn, views)
    out, ov = _out(fn, "out", out, views["q"], (T, H, MLA_V_DIM), "bf16")
    lsv = None
    if want_lse:
        lse, lsv = _out(fn, "lse", lse, views["q"], (T, H), "f32")
    a.out = _ptr(ov)
    a.lse = _ptr(lsv)
    need = _run_with_workspace("dsa_sparse_mla", "dsa_sparse_mla_workspace_size", a, workspace, views, fn, views["q"],
                               stream, dev)
    _fast.remember(_SPARSE_MLA, tensors, scalars, a, views["q"],
                   {4: ((T, H, MLA_V_DIM), "bf16"), 5: ((T, H), "f32")} if want_lse else {4: ((T, H, MLA_V_DIM), "bf16")},
                   need)
    return (out, lse) if want_lse else out


# ---- cache writers --------------------------------------------------------------------------------


_INDEX_K_STORE = _fast.Site("dsa_index_k_store", ("k", "slot_mapping", "cache"))
_MLA_KV_STORE = _fast.Site("dsa_mla_kv_store", ("kv", "slot_mapping", "cache"))


def index_k_store(k: Any, slot_mapping: Any, index_k_cache: Any, *, page_size: int = 64, stream: Any = None) -> None:
    """Writes k bf16 [T, 128] (rows may be strided) into the paged FP8 index-K cache at
    slot_mapping int64 [T] (negative slots are padding): one float32 scale per row, amax / 448."""
    tensors, scalars = (k, slot_mapping, index_k_cache), (page_size,)
    if _fast.call(_INDEX_K_STORE, tensors, scalars, stream) is not None:  # a signature seen before (dsa/_fast.py)
        return None
    fn = "dsa.index_k_store"
    kv = _arg(fn, "k", k, ("bf16",), (None, INDEX_HEAD_DIM), "rows")
    T = kv.shape[0]
    sm = _arg(fn, "slot_mapping", slot_mapping, ("i64",), (T,))
    cv, pages = _index_k_cache(fn, index_k_cache, page_size)
    views = {"k": kv, "slot_mapping": sm, "index_k_cache": cv}
    dev = _same_device(fn, views)
    a = _lib.IndexKStoreArgs()
    a.k = _ptr(kv)
    a.k_stride = _row_stride(kv)
    a.slot_mapping = _ptr(sm)
    a.num_tokens = T
    a.cache = _ptr(cv)
    a.num_pages = pages
    a.page_size = page_size
    s = _stream(stream, list(views.values()), dev)
    _raise(_lib.lib().dsa_index_k_store(ctypes.byref(a), s or None))
    _fast.remember(_INDEX_K_STORE, tensors, scalars, a, kv)


def mla_kv_store(kv: Any, slot_mapping: Any, kv_cache: Any, *, stream: Any = None) -> None:
    """Writes kv bf16 [T, 576] (rows may be strided) into the MLA KV cache at slot_mapping int64
    [T] (negative slots are padding): packed FP8 (uint8 [..., 656]: per-128 scale amax / 448, rope
    kept bf16) or a plain bf16 copy (bf16 [..., >= 576])."""
    tensors = (kv, slot_mapping, kv_cache)
    if _fast.call(_MLA_KV_STORE, tensors, (), stream) is not None:  # a signature seen before (dsa/_fast.py)
        return None
    fn = "dsa.mla_kv_store"
    kvv = _arg(fn, "kv", kv, ("bf16",), (None, MLA_QK_DIM), "rows")
    T = kvv.shape[0]
    sm = _arg(fn, "slot_mapping", slot_mapping, ("i64",), (T,))
    cv, fmt, slots, stride = _kv_cache(fn, kv_cache)
    views = {"kv": kvv, "slot_mapping": sm, "kv_cache": cv}
    dev = _same_device(fn, views)
    a = _lib.MlaKvStoreArgs()
    a.kv = _ptr(kvv)
    a.kv_stride = _row_stride(kvv)
    a.slot_mapping = _ptr(sm)
    a.num_tokens = T
    a.cache = _ptr(cv)
    a.kv_format = fmt
    a.num_slots = slots
    a.cache_stride = stride if fmt == _lib.DSA_KV_BF16 else 0
    s = _stream(stream, list(views.values()), dev)
    _raise(_lib.lib().dsa_mla_kv_store(ctypes.byref(a), s or None))
    _fast.remember(_MLA_KV_STORE, tensors, (), a, kvv)


# ---- context parallelism (single-GPU pieces; the exchanges are the caller's) --------------------


def _shard(fn: str, world_size: int, rank: int, layout: str, block: int) -> "_lib.Shard":
    if layout not in ("round_robin", "blocks"):
        raise DsaArgumentError(f"{fn}: layout must be 'round_robin' or 'blocks', got {layout!r}")
    s = _lib.Shard()
    s.world_size = world_size
    s.rank = rank
    s.layout = _lib.DSA_SHARD_ROUND_ROBIN if layout == "round_robin" else _lib.DSA_SHARD_BLOCKS
    s.block = block
    return s


_CP_CANDIDATES = _fast.Site("dsa_cp_candidates",
                            ("scores", "local_indices", "row_offsets", "cand_scores", "cand_ids"), results=(3, 4))
_TOPK_MERGE = _fast.Site("dsa_topk_merge", ("cand_scores", "cand_ids", "indices", "lens"), results=(2, 3))
_CP_LOCAL_INDICES = _fast.Site("dsa_cp_local_indices",
                               ("indices", "block_table", "workspace_slots", "out_slots", "out_lens"), results=(3, 4))
_LSE_COMBINE = _fast.Site("dsa_lse_combine", ("outs", "lses", "out", "lse"), results=(2, 3))


def cp_candidates(scores: Any, local_indices: Any, *, world_size: int, rank: int, layout: str = "round_robin",
                  block: int = 0, max_len: Optional[int] = None, row_offsets: Any = None, cand_scores: Any = None,
                  cand_ids: Any = None, stream: Any = None) -> Tuple[Any, Any]:
    """A rank's local top-k as (score, global position) candidates: scores float32 [R, >= max_len]
    (its local rows, rows may be strided), local_indices int32 [R, k] (from topk over them),
    row_offsets int32 [R] or None (prefill: each row's first local row). Round robin: local
    position p of rank r is global p * world_size + r; blocks: r * block + p. Returns (cand_scores
    float32 [R, k], cand_ids int32 [R, k]; -inf and -1 where there is no candidate)."""
    tensors = (scores, local_indices, row_offsets, cand_scores, cand_ids)
    scalars = (world_size, rank, layout, block, max_len)
    r = _fast.call(_CP_CANDIDATES, tensors, scalars, stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r
    fn = "dsa.cp_candidates"
    shard = _shard(fn, world_size, rank, layout, block)
    sv = _arg(fn, "scores", scores, ("f32",), (None, None), "rows")
    R = sv.shape[0]
    iv = _arg(fn, "local_indices", local_indices, ("i32",), (R, None))
    k = iv.shape[1]
    ov = None if row_offsets is None else _arg(fn, "row_offsets", row_offsets, ("i32",), (R,))
    views = {"scores": sv, "local_indices": iv, "row_offsets": ov}
    dev = _same_device(fn, views)
    cand_scores, csv = _out(fn, "cand_scores", cand_scores, sv, (R, k), "f32")
    cand_ids, civ = _out(fn, "cand_ids", cand_ids, sv, (R, k), "i32")
    a = _lib.CpCandidatesArgs()
    a.shard = shard
    a.scores = _ptr(sv)
    a.scores_stride = _row_stride(sv)
    a.max_len = sv.shape[1] if max_len is None else int(max_len)
    if a.max_len > sv.shape[1]:
        raise DsaArgumentError(f"{fn}: max_len = {a.max_len} exceeds the {sv.shape[1]} columns of scores")
    a.local_indices = _ptr(iv)
    a.row_offsets = _ptr(ov)
    a.num_rows = R
    a.topk = k
    a.cand_scores = _ptr(csv)
    a.cand_ids = _ptr(civ)
    s = _stream(stream, list(views.values()), dev)
    _raise(_lib.lib().dsa_cp_candidates(ctypes.byref(a), s or None))
    _fast.remember(_CP_CANDIDATES, tensors, scalars, a, sv, {3: ((R, k), "f32"), 4: ((R, k), "i32")})
    return cand_scores, cand_ids


def topk_merge(cand_scores: Any, cand_ids: Any, *, topk: int, indices: Any = None, lens: Any = None,
               stream: Any = None) -> Tuple[Any, Any]:
    """The exact top-k of W candidate lists a row: cand_scores float32 / cand_ids int32
    [W, R, k_in] (what an all-gather of the ranks' [R, k_in] lists gives; id -1 = none). Returns
    (indices int32 [R, topk]: the ids of the largest scores — NaN lowest, equal scores to the lower
    id — in ascending order, -1 after lens; lens int32 [R]), whatever the order of the lists."""
    tensors, scalars = (cand_scores, cand_ids, indices, lens), (topk,)
    r = _fast.call(_TOPK_MERGE, tensors, scalars, stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r
    fn = "dsa.topk_merge"
    sv = _arg(fn, "cand_scores", cand_scores, ("f32",), (None, None, None))
    W, R, k_in = sv.shape
    iv = _arg(fn, "cand_ids", cand_ids, ("i32",), (W, R, k_in))
    views = {"cand_scores": sv, "cand_ids": iv}
    dev = _same_device(fn, views)
    indices, ov = _out(fn, "indices", indices, sv, (R, topk), "i32")
    lens, lv = _out(fn, "lens", lens, sv, (R,), "i32")
    a = _lib.TopkMergeArgs(_ptr(sv), _ptr(iv), W, R, k_in, topk, _ptr(ov), _ptr(lv))
    s = _stream(stream, list(views.values()), dev)
    _raise(_lib.lib().dsa_topk_merge(ctypes.byref(a), s or None))
    _fast.remember(_TOPK_MERGE, tensors, scalars, a, sv, {2: ((R, topk), "i32"), 3: ((R,), "i32")})
    return indices, lens


def cp_local_indices(indices: Any, *, world_size: int, rank: int, layout: str = "round_robin", block: int = 0,
                     block_table: Any = None, page_size: int = 64, num_pages: int = 0, q_len_per_req: int = 1,
                     workspace_slots: Any = None, compact: bool = False, out_slots: Any = None, out_lens: Any = None,
                     stream: Any = None):
    """The rows of a global selection (global positions int32 [T, k], -1 = none) that this rank
    owns, as its cache slots: decode through its block_table int32 [T / q_len_per_req, *] (pages
    outside [0, num_pages) give -1), prefill through workspace_slots int64 [rows] (its local rows).
    Returns out_slots int32 [T, k] (-1 where another rank owns the row); with compact=True,
    (out_slots, out_lens int32 [T]): the owned ones first, in order, and their count."""
    tensors = (indices, block_table, workspace_slots, out_slots, out_lens)
    scalars = (world_size, rank, layout, block, page_size, num_pages, q_len_per_req, bool(compact))
    r = _fast.call(_CP_LOCAL_INDICES, tensors, scalars, stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r if compact else r[0]
    fn = "dsa.cp_local_indices"
    iv = _arg(fn, "indices", indices, ("i32",), (None, None))
    T, k = iv.shape
    a = _lib.CpLocalIndicesArgs()
    a.shard = _shard(fn, world_size, rank, layout, block)
    views = {"indices": iv}
    if workspace_slots is not None:
        wv = _arg(fn, "workspace_slots", workspace_slots, ("i64",), (None,))
        views["workspace_slots"] = wv
        a.workspace_slots = _ptr(wv)
        a.num_workspace_rows = wv.shape[0]
    else:
        if block_table is None:
            raise DsaArgumentError(f"{fn}: give block_table (decode) or workspace_slots (prefill)")
        bv = _arg(fn, "block_table", block_table, ("i32",), (None, None), "rows")
        views["block_table"] = bv
        a.block_table = _ptr(bv)
        a.block_table_stride = _row_stride(bv)
        a.max_blocks_per_req = bv.shape[1]
        a.q_len_per_req = q_len_per_req
        a.page_size = page_size
        a.num_pages = num_pages
    dev = _same_device(fn, views)
    out_slots, sv = _out(fn, "out_slots", out_slots, iv, (T, k), "i32")
    lv = None
    if compact:
        out_lens, lv = _out(fn, "out_lens", out_lens, iv, (T,), "i32")
    a.indices = _ptr(iv)
    a.num_tokens = T
    a.topk = k
    a.out_slots = _ptr(sv)
    a.out_lens = _ptr(lv)
    s = _stream(stream, list(views.values()), dev)
    _raise(_lib.lib().dsa_cp_local_indices(ctypes.byref(a), s or None))
    _fast.remember(_CP_LOCAL_INDICES, tensors, scalars, a, iv,
                   {3: ((T, k), "i32"), 4: ((T,), "i32")} if compact else {3: ((T, k), "i32")},
                   skip=((1,) if workspace_slots is not None else ()) + (() if compact else (4,)))
    return (out_slots, out_lens) if compact else out_slots


def lse_combine(outs: Any, lses: Any, *, out: Any = None, lse: Any = None, stream: Any = None) -> Tuple[Any, Any]:
    """Merges W partial attention results: outs bf16 or float32 [W, T, H, 512], lses float32
    [W, T, H] (natural log, -inf = that rank had no rows). Returns (out bf16 [T, H, 512],
    lse float32 [T, H]): lse = log sum_w exp(lse_w), out = sum_w exp(lse_w - lse) out_w; a token
    and head with no part gets 0 and -inf."""
    tensors = (outs, lses, out, lse)
    r = _fast.call(_LSE_COMBINE, tensors, (), stream)
    if r is not None:  # a signature seen before (dsa/_fast.py)
        return r
    fn = "dsa.lse_combine"
    ov = _arg(fn, "outs", outs, ("bf16", "f32"), (None, None, None, MLA_V_DIM))
    W, T, H, _ = ov.shape
    lv = _arg(fn, "lses", lses, ("f32",), (W, T, H))
    views = {"outs": ov, "lses": lv}
    dev = _same_device(fn, views)
    out, outv = _out(fn, "out", out, ov, (T, H, MLA_V_DIM), "bf16")
    lse, lsev = _out(fn, "lse", lse, ov, (T, H), "f32")
    a = _lib.LseCombineArgs(_ptr(ov), _lib.DSA_DTYPE_F32 if ov.dtype == "f32" else _lib.DSA_DTYPE_BF16, _ptr(lv), W,
                            T, H, _ptr(outv), _ptr(lsev))
    s = _stream(stream, list(views.values()), dev)
    _raise(_lib.lib().dsa_lse_combine(ctypes.byref(a), s or None))
    _fast.remember(_LSE_COMBINE, tensors, (), a, ov, {2: ((T, H, MLA_V_DIM), "bf16"), 3: ((T, H), "f32")})
    return out, lse
