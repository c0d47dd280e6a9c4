"""dsa's calls as PyTorch custom operators: ``import dsa.ops`` registers ``torch.ops.dsa.*``.

Each operator runs the function of the same name in ``dsa`` (same argument names, the tensors'
current stream, outputs and workspaces from PyTorch's caching allocator) and has a fake (meta)
implementation giving its outputs' shapes and dtypes, with the tensors it writes declared as
mutated. So ``torch.compile(fullgraph=True)`` traces a model that calls them without a graph break,
and the compiled code can run under CUDA graphs (no call synchronises or allocates outside the
caching allocator).

    index_k_store(k, slot_mapping, index_k_cache!, page_size) -> ()
    mla_kv_store(kv, slot_mapping, kv_cache!) -> ()
    indexer_decode(q, weights, index_k_cache, seq_lens, block_table, topk, softmax_scale, q_scale,
                   page_size, q_len_per_req, max_seq_len, workspace_limit) -> (indices [T, topk], lens [T])
    indexer_decode_scores(..., skip_short_rows) -> scores f32 [T, max_len]
    indexer_prefill(q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, topk,
                    softmax_scale, q_scale, page_size, max_rows, output_global_slots, workspace_limit)
                    -> (indices [T, topk], lens [T])
    indexer_prefill_scores(..., skip_short_rows) -> scores f32 [T, max_len]
    topk(scores, topk, row_lens, max_len) -> (indices [R, topk], lens [R])
    sparse_mla(q, kv_cache, indices, softmax_scale, lens, topk) -> (out bf16 [T, H, 512], lse f32 [T, H])
    cp_candidates(scores, local_indices, world_size, rank, layout, block, max_len, row_offsets)
                  -> (cand_scores f32 [R, k], cand_ids i32 [R, k])
    topk_merge(cand_scores, cand_ids, topk) -> (indices [R, topk], lens [R])
    cp_local_indices(indices, world_size, rank, layout, block, block_table, page_size, num_pages,
                     q_len_per_req, workspace_slots, compact) -> (out_slots [T, k], out_lens [T])
    lse_combine(outs, lses) -> (out bf16 [T, H, 512], lse f32 [T, H])

(``!``: written in place.) sparse_mla always returns lse too; cp_local_indices' out_lens holds
zeros unless compact.

With outputs given, for the eight that return tensors and have C kernels (indexer_decode,
indexer_decode_scores, indexer_prefill, indexer_prefill_scores, topk, sparse_mla, topk_merge,
lse_combine): ``NAME_out(NAME's required arguments, its outputs!, NAME's optional arguments,
workspace! = None) -> ()``, e.g. ``sparse_mla_out(q, kv_cache, indices, softmax_scale, out!, lse!,
lens, topk, workspace!)``: nothing allocated (the workspace from the caching allocator only where
None) and nothing returned, so an engine's planned buffers stay its own in eager calls and in
compiled graphs (where each becomes an auto_functionalized node). The workspace-size queries are
host functions on shapes and stay in ``dsa``.
Registered with torch.library.Library (define + impl, fakes by register_fake), not custom_op, for a
lower host cost a call. Needs PyTorch >= 2.4; ``import dsa`` alone does not import PyTorch.

Kernels in C: with the wheel's extension (dsa._fastcall) and PyTorch >= 2.10, every operator whose
arguments are tensors and numbers gets a C kernel (python/ext/torch_op.c) through PyTorch's stable C
ABI in place of its Python function: the dispatcher hands it the call's tensors as C handles, and a
call whose signature the checked path has seen runs the library straight from C (outputs from
PyTorch's caching allocator, PyTorch's current stream) with no Python. A new signature goes to the
operator's checked twin, torch.ops.dsa._checked_NAME (the Python function, which remembers the
signature's plan). A failure then raises RuntimeError with dsa's message (the class does not cross the
C ABI). cp_candidates and cp_local_indices (a str argument) keep their Python kernels, as does every
operator where the extension is absent or DSA_TORCH_OPS=python.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

import torch

import dsa
from dsa import _fast

__all__: list = []  # the operators live in torch.ops.dsa

_I32 = torch.int32
_F32 = torch.float32


_LIB = torch.library.Library("dsa", "FRAGMENT")
_infer_schema = getattr(torch.library, "infer_schema", None)
if _infer_schema is None:  # PyTorch 2.4
    from torch._library.infer_schema import infer_schema as _infer_schema


class _Op:
    """An operator of torch.ops.dsa: its function (the CUDA kernel's Python form), how to give it a
    fake, and where its C kernel takes its public call's arguments from (None: it has none)."""

    def __init__(self, name: str, fn, c_layout: Optional["_C"]) -> None:
        self.name, self.fn, self.c_layout = name, fn, c_layout

    def __call__(self, *args, **kwargs):  # dsa.ops.NAME(...) is torch.ops.dsa.NAME(...)
        return getattr(torch.ops.dsa, self.name)(*args, **kwargs)

    def register_fake(self, fake):
        torch.library.register_fake(f"dsa::{self.name}", fake, lib=_LIB)
        return fake


class _C:
    """How an operator's C kernel lays its arguments out as its public call does (dsa/_fast.py: the
    site's tensors and scalars, in the order dsa/__init__.py builds them): for each, the operator's
    argument of that name, or None (a tensor the call allocates) or a constant (a scalar)."""

    def __init__(self, site: "_fast.Site", tensors: tuple, scalars: tuple = ()) -> None:
        self.site, self.tensors, self.scalars = site, tensors, scalars


# A schema argument's type -> its kind for torch_op.c ('t' tensor, 'f' float, 'i' int or bool; upper
# case: optional). Another type (str) leaves the operator without a C kernel.
_KINDS = {"Tensor": "t", "Optional[Tensor]": "T", "float": "f", "Optional[float]": "F", "int": "i",
          "Optional[int]": "I", "bool": "i", "Optional[bool]": "I"}


def _c_kernels_usable() -> bool:
    """Whether torch.ops.dsa's kernels can run in C: the extension on PyTorch's stable C ABI (PyTorch >=
    2.10, dsa/_fast.py: torch_abi), and not turned off by DSA_TORCH_OPS=python."""
    return os.environ.get("DSA_TORCH_OPS") != "python" and _fast.torch_abi()


_C_KERNELS = _c_kernels_usable()


def _checked_twin(fn, returns: int):
    """The Python kernel a C kernel calls for a signature it has no plan for: fn, its failure handed
    to the C kernel (which raises it) instead of raised into the dispatcher (which would only log
    it), with placeholders for the results. Called otherwise, it raises as fn does."""

    def checked(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001  (every failure goes back to the caller, as the C kernel raises it)
            if not _fast._ext.torch_checked_failed(f"{type(e).__name__}: {e}"):
                raise  # not called by its C kernel
            if returns == 0:
                return None
            empty = tuple(torch.empty(0) for _ in range(returns))
            return empty[0] if returns == 1 else empty

    return checked


def register_c_kernel(lib: torch.library.Library, ns: str, key: str, op: _Op, schema: str) -> bool:
    """Registers op's C kernel as ns::NAME's for dispatch key `key`, and its checked twin
    ns::_checked_NAME (defined here); False where op has none. ns::NAME must be defined with schema.
    (dsa registers CUDA kernels; test_ops.py and dev/host_call_cost.py the same for CPU tensors, in
    namespaces of their own.)"""
    lay = op.c_layout
    if lay is None:
        return False
    parsed = torch._C.parse_schema(f"{ns}::{op.name}{schema}")
    names = [a.name for a in parsed.arguments]
    kinds = [_KINDS.get(str(a.type)) for a in parsed.arguments]
    if None in kinds:
        return False
    assert not parsed.returns or all(lay.tensors[i] is None for i in lay.site.results), \
        f"{op.name}: a result is an argument"
    tensors = tuple(None if t is None else names.index(t) for t in lay.tensors)
    scalars = tuple(("arg", names.index(x)) if isinstance(x, str) else ("const", x) for x in lay.scalars)
    lib.define(f"_checked_{op.name}{schema}")
    lib.impl(f"_checked_{op.name}", _checked_twin(op.fn, len(parsed.returns)), key)
    _fast._ext.torch_register(ns, key, op.name, lay.site.index, "".join(kinds), tensors, scalars,
                              f"{ns}::_checked_{op.name}")
    return True


def _op(name: str, mutates: Tuple[str, ...] = (), c: Optional[_C] = None):
    """Registers fn as dsa::name straight on the dispatcher, as vLLM's direct_register_custom_op does:
    the schema inferred from its annotations (mutates: the arguments it writes); the CUDA kernel the C
    one where there is one (c: its layout; see above), else fn. An eager call through fn costs one
    dispatch into Python: torch.ops.dsa.sparse_mla 5.2x a torch.add, against 10.7x through
    torch.library.custom_op (dev/python_overhead.py, H200 machine, 2026-12-05)."""

    def wrap(fn) -> _Op:
        schema = _infer_schema(fn, mutates_args=mutates)
        _LIB.define(name + schema)
        op = _Op(name, fn, c)
        if not (_C_KERNELS and register_c_kernel(_LIB, "dsa", "CUDA", op, schema)):
            _LIB.impl(name, fn, "CUDA")
        return op

    return wrap


def _decode_max_len(block_table: torch.Tensor, page_size: int, max_seq_len: int) -> int:
    cap = block_table.shape[1] * page_size
    return max_seq_len if 0 < max_seq_len < cap else cap


def _prefill_max_len(kv_workspace_slots: torch.Tensor, max_rows: int) -> int:
    w = kv_workspace_slots.shape[0]
    return max_rows if 0 < max_rows < w else w


# ---- cache writers ------------------------------------------------------------------------------


@_op("index_k_store", ("index_k_cache",),
     _C(dsa._INDEX_K_STORE, ("k", "slot_mapping", "index_k_cache"), ("page_size",)))
def index_k_store(k: torch.Tensor, slot_mapping: torch.Tensor, index_k_cache: torch.Tensor,
                  page_size: int = 64) -> None:
    dsa.index_k_store(k, slot_mapping, index_k_cache, page_size=page_size)


@index_k_store.register_fake
def _(k, slot_mapping, index_k_cache, page_size=64):
    return None


@_op("mla_kv_store", ("kv_cache",), _C(dsa._MLA_KV_STORE, ("kv", "slot_mapping", "kv_cache")))
def mla_kv_store(kv: torch.Tensor, slot_mapping: torch.Tensor, kv_cache: torch.Tensor) -> None:
    dsa.mla_kv_store(kv, slot_mapping, kv_cache)


@mla_kv_store.register_fake
def _(kv, slot_mapping, kv_cache):
    return None


# ---- indexer ----------------------------------------------------------------------------------------


@_op("indexer_decode", c=_C(dsa._INDEXER_DECODE,
                            ("q", "weights", "index_k_cache", "seq_lens", "block_table", "q_scale", None, None, None),
                            ("topk", "softmax_scale", "page_size", "q_len_per_req", "max_seq_len", "workspace_limit")))
def indexer_decode(q: torch.Tensor, weights: torch.Tensor, index_k_cache: torch.Tensor, seq_lens: torch.Tensor,
                   block_table: torch.Tensor, topk: int, softmax_scale: float, q_scale: Optional[torch.Tensor] = None,
                   page_size: int = 64, q_len_per_req: int = 1, max_seq_len: int = 0,
                   workspace_limit: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    return dsa.indexer_decode(q, weights, index_k_cache, seq_lens, block_table, topk=topk,
                              softmax_scale=softmax_scale, q_scale=q_scale, page_size=page_size,
                              q_len_per_req=q_len_per_req, max_seq_len=max_seq_len, workspace_limit=workspace_limit)


@indexer_decode.register_fake
def _(q, weights, index_k_cache, seq_lens, block_table, topk, softmax_scale, q_scale=None, page_size=64,
      q_len_per_req=1, max_seq_len=0, workspace_limit=0):
    T = q.shape[0]
    return q.new_empty((T, topk), dtype=_I32), q.new_empty((T,), dtype=_I32)


@_op("indexer_decode_scores", c=_C(dsa._INDEXER_DECODE_SCORES,
                                   ("q", "weights", "index_k_cache", "seq_lens", "block_table", "q_scale", None),
                                   ("softmax_scale", "page_size", "q_len_per_req", "max_seq_len", "topk",
                                    "skip_short_rows")))
def indexer_decode_scores(q: torch.Tensor, weights: torch.Tensor, index_k_cache: torch.Tensor,
                          seq_lens: torch.Tensor, block_table: torch.Tensor, softmax_scale: float,
                          q_scale: Optional[torch.Tensor] = None, page_size: int = 64, q_len_per_req: int = 1,
                          max_seq_len: int = 0, topk: int = dsa.MAX_TOPK,
                          skip_short_rows: bool = False) -> torch.Tensor:
    return dsa.indexer_decode_scores(q, weights, index_k_cache, seq_lens, block_table, softmax_scale=softmax_scale,
                                     q_scale=q_scale, page_size=page_size, q_len_per_req=q_len_per_req,
                                     max_seq_len=max_seq_len, topk=topk, skip_short_rows=skip_short_rows)


@indexer_decode_scores.register_fake
def _(q, weights, index_k_cache, seq_lens, block_table, softmax_scale, q_scale=None, page_size=64, q_len_per_req=1,
      max_seq_len=0, topk=dsa.MAX_TOPK, skip_short_rows=False):
    return q.new_empty((q.shape[0], _decode_max_len(block_table, page_size, max_seq_len)), dtype=_F32)


@_op("indexer_prefill", c=_C(dsa._INDEXER_PREFILL,
                             ("q", "weights", "index_k_cache", "kv_workspace_slots", "row_starts", "row_ends",
                              "q_scale", None, None, None),
                             ("topk", "softmax_scale", "page_size", "max_rows", "output_global_slots",
                              "workspace_limit")))
def indexer_prefill(q: torch.Tensor, weights: torch.Tensor, index_k_cache: torch.Tensor,
                    kv_workspace_slots: torch.Tensor, row_starts: torch.Tensor, row_ends: torch.Tensor, topk: int,
                    softmax_scale: float, q_scale: Optional[torch.Tensor] = None, page_size: int = 64,
                    max_rows: int = 0, output_global_slots: bool = False,
                    workspace_limit: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    return dsa.indexer_prefill(q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, topk=topk,
                               softmax_scale=softmax_scale, q_scale=q_scale, page_size=page_size, max_rows=max_rows,
                               output_global_slots=output_global_slots, workspace_limit=workspace_limit)


@indexer_prefill.register_fake
def _(q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, topk, softmax_scale, q_scale=None,
      page_size=64, max_rows=0, output_global_slots=False, workspace_limit=0):
    T = row_starts.shape[0]
    return q.new_empty((T, topk), dtype=_I32), q.new_empty((T,), dtype=_I32)


@_op("indexer_prefill_scores", c=_C(dsa._INDEXER_PREFILL_SCORES,
                                    ("q", "weights", "index_k_cache", "kv_workspace_slots", "row_starts", "row_ends",
                                     "q_scale", None),
                                    ("softmax_scale", "page_size", "max_rows", "topk", "skip_short_rows")))
def indexer_prefill_scores(q: torch.Tensor, weights: torch.Tensor, index_k_cache: torch.Tensor,
                           kv_workspace_slots: torch.Tensor, row_starts: torch.Tensor, row_ends: torch.Tensor,
                           softmax_scale: float, q_scale: Optional[torch.Tensor] = None, page_size: int = 64,
                           max_rows: int = 0, topk: int = dsa.MAX_TOPK,
                           skip_short_rows: bool = False) -> torch.Tensor:
    return dsa.indexer_prefill_scores(q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends,
                                      softmax_scale=softmax_scale, q_scale=q_scale, page_size=page_size,
                                      max_rows=max_rows, topk=topk, skip_short_rows=skip_short_rows)


@indexer_prefill_scores.register_fake
def _(q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, softmax_scale, q_scale=None, page_size=64,
      max_rows=0, topk=dsa.MAX_TOPK, skip_short_rows=False):
    return q.new_empty((row_starts.shape[0], _prefill_max_len(kv_workspace_slots, max_rows)), dtype=_F32)


# ---- top-k and attention ----------------------------------------------------------------------


@_op("topk", c=_C(dsa._TOPK, ("scores", "row_lens", None, None, None), ("topk", "max_len")))
def topk(scores: torch.Tensor, topk: int, row_lens: Optional[torch.Tensor] = None,
         max_len: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    return dsa.topk(scores, topk=topk, row_lens=row_lens, max_len=max_len)


@topk.register_fake
def _(scores, topk, row_lens=None, max_len=None):
    R = scores.shape[0]
    return scores.new_empty((R, topk), dtype=_I32), scores.new_empty((R,), dtype=_I32)


@_op("sparse_mla", c=_C(dsa._SPARSE_MLA, ("q", "kv_cache", "indices", "lens", None, None, None),
                      ("softmax_scale", "topk", True)))
def sparse_mla(q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, softmax_scale: float,
               lens: Optional[torch.Tensor] = None, topk: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    return dsa.sparse_mla(q, kv_cache, indices, softmax_scale=softmax_scale, lens=lens, topk=topk, return_lse=True)


@sparse_mla.register_fake
def _(q, kv_cache, indices, softmax_scale, lens=None, topk=None):
    T, H = q.shape[0], q.shape[1]
    return q.new_empty((T, H, dsa.MLA_V_DIM), dtype=torch.bfloat16), q.new_empty((T, H), dtype=_F32)


# ---- context parallelism's single-GPU pieces ------------------------------------------------------


@_op("cp_candidates")
def cp_candidates(scores: torch.Tensor, local_indices: torch.Tensor, world_size: int, rank: int,
                  layout: str = "round_robin", block: int = 0, max_len: Optional[int] = None,
                  row_offsets: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    return dsa.cp_candidates(scores, local_indices, world_size=world_size, rank=rank, layout=layout, block=block,
                             max_len=max_len, row_offsets=row_offsets)


@cp_candidates.register_fake
def _(scores, local_indices, world_size, rank, layout="round_robin", block=0, max_len=None, row_offsets=None):
    R, k = local_indices.shape[0], local_indices.shape[1]
    return scores.new_empty((R, k), dtype=_F32), scores.new_empty((R, k), dtype=_I32)


@_op("topk_merge", c=_C(dsa._TOPK_MERGE, ("cand_scores", "cand_ids", None, None), ("topk",)))
def topk_merge(cand_scores: torch.Tensor, cand_ids: torch.Tensor, topk: int) -> Tuple[torch.Tensor, torch.Tensor]:
    return dsa.topk_merge(cand_scores, cand_ids, topk=topk)


@topk_merge.register_fake
def _(cand_scores, cand_ids, topk):
    R = cand_scores.shape[1]
    return cand_scores.new_empty((R, topk), dtype=_I32), cand_scores.new_empty((R,), dtype=_I32)


@_op("cp_local_indices")
def cp_local_indices(indices: torch.Tensor, world_size: int, rank: int, layout: str = "round_robin", block: int = 0,
                     block_table: Optional[torch.Tensor] = None, page_size: int = 64, num_pages: int = 0,
                     q_len_per_req: int = 1, workspace_slots: Optional[torch.Tensor] = None,
                     compact: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    got = dsa.cp_local_indices(indices, world_size=world_size, rank=rank, layout=layout, block=block,
                               block_table=block_table, page_size=page_size, num_pages=num_pages,
                               q_len_per_req=q_len_per_req, workspace_slots=workspace_slots, compact=compact)
    if compact:
        return got
    return got, torch.zeros((indices.shape[0],), dtype=_I32, device=indices.device)


@cp_local_indices.register_fake
def _(indices, world_size, rank, layout="round_robin", block=0, block_table=None, page_size=64, num_pages=0,
      q_len_per_req=1, workspace_slots=None, compact=False):
    T, k = indices.shape[0], indices.shape[1]
    return indices.new_empty((T, k), dtype=_I32), indices.new_empty((T,), dtype=_I32)


@_op("lse_combine", c=_C(dsa._LSE_COMBINE, ("outs", "lses", None, None)))
def lse_combine(outs: torch.Tensor, lses: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    return dsa.lse_combine(outs, lses)


@lse_combine.register_fake
def _(outs, lses):
    T, H = outs.shape[1], outs.shape[2]
    return outs.new_empty((T, H, dsa.MLA_V_DIM), dtype=torch.bfloat16), outs.new_empty((T, H), dtype=_F32)


# ---- the same with outputs given: NAME_out ----------------------------------------------------------
#
# Each operator that returns tensors, with its outputs (and its workspace, where it takes one) given
# and written in place (declared mutated), returning nothing: what an engine that plans its buffers
# calls, so that an eager call allocates nothing (the host cost of dsa's calls with outputs given)
# and a compiled graph keeps the engine's buffers. Arguments: NAME's required ones, then the outputs,
# then NAME's optional ones, then `workspace` (None: one from PyTorch's caching allocator, as NAME).
# sparse_mla_out always writes lse.


@_op("indexer_decode_out", ("topk_indices", "topk_lens", "workspace"),
     _C(dsa._INDEXER_DECODE, ("q", "weights", "index_k_cache", "seq_lens", "block_table", "q_scale", "topk_indices",
                              "topk_lens", "workspace"),
        ("topk", "softmax_scale", "page_size", "q_len_per_req", "max_seq_len", "workspace_limit")))
def indexer_decode_out(q: torch.Tensor, weights: torch.Tensor, index_k_cache: torch.Tensor, seq_lens: torch.Tensor,
                       block_table: torch.Tensor, topk: int, softmax_scale: float, topk_indices: torch.Tensor,
                       topk_lens: torch.Tensor, q_scale: Optional[torch.Tensor] = None, page_size: int = 64,
                       q_len_per_req: int = 1, max_seq_len: int = 0, workspace_limit: int = 0,
                       workspace: Optional[torch.Tensor] = None) -> None:
    dsa.indexer_decode(q, weights, index_k_cache, seq_lens, block_table, topk=topk, softmax_scale=softmax_scale,
                       q_scale=q_scale, page_size=page_size, q_len_per_req=q_len_per_req, max_seq_len=max_seq_len,
                       workspace_limit=workspace_limit, topk_indices=topk_indices, topk_lens=topk_lens,
                       workspace=workspace)


@_op("indexer_decode_scores_out", ("scores",),
     _C(dsa._INDEXER_DECODE_SCORES, ("q", "weights", "index_k_cache", "seq_lens", "block_table", "q_scale", "scores"),
        ("softmax_scale", "page_size", "q_len_per_req", "max_seq_len", "topk", "skip_short_rows")))
def indexer_decode_scores_out(q: torch.Tensor, weights: torch.Tensor, index_k_cache: torch.Tensor,
                              seq_lens: torch.Tensor, block_table: torch.Tensor, softmax_scale: float,
                              scores: torch.Tensor, q_scale: Optional[torch.Tensor] = None, page_size: int = 64,
                              q_len_per_req: int = 1, max_seq_len: int = 0, topk: int = dsa.MAX_TOPK,
                              skip_short_rows: bool = False) -> None:
    dsa.indexer_decode_scores(q, weights, index_k_cache, seq_lens, block_table, softmax_scale=softmax_scale,
                              q_scale=q_scale, page_size=page_size, q_len_per_req=q_len_per_req,
                              max_seq_len=max_seq_len, topk=topk, skip_short_rows=skip_short_rows, scores=scores)


@_op("indexer_prefill_out", ("topk_indices", "topk_lens", "workspace"),
     _C(dsa._INDEXER_PREFILL, ("q", "weights", "index_k_cache", "kv_workspace_slots", "row_starts", "row_ends",
                               "q_scale", "topk_indices", "topk_lens", "workspace"),
        ("topk", "softmax_scale", "page_size", "max_rows", "output_global_slots", "workspace_limit")))
def indexer_prefill_out(q: torch.Tensor, weights: torch.Tensor, index_k_cache: torch.Tensor,
                        kv_workspace_slots: torch.Tensor, row_starts: torch.Tensor, row_ends: torch.Tensor, topk: int,
                        softmax_scale: float, topk_indices: torch.Tensor, topk_lens: torch.Tensor,
                        q_scale: Optional[torch.Tensor] = None, page_size: int = 64, max_rows: int = 0,
                        output_global_slots: bool = False, workspace_limit: int = 0,
                        workspace: Optional[torch.Tensor] = None) -> None:
    dsa.indexer_prefill(q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends, topk=topk,
                        softmax_scale=softmax_scale, q_scale=q_scale, page_size=page_size, max_rows=max_rows,
                        output_global_slots=output_global_slots, workspace_limit=workspace_limit,
                        topk_indices=topk_indices, topk_lens=topk_lens, workspace=workspace)


@_op("indexer_prefill_scores_out", ("scores",),
     _C(dsa._INDEXER_PREFILL_SCORES, ("q", "weights", "index_k_cache", "kv_workspace_slots", "row_starts",
                                      "row_ends", "q_scale", "scores"),
        ("softmax_scale", "page_size", "max_rows", "topk", "skip_short_rows")))
def indexer_prefill_scores_out(q: torch.Tensor, weights: torch.Tensor, index_k_cache: torch.Tensor,
                               kv_workspace_slots: torch.Tensor, row_starts: torch.Tensor, row_ends: torch.Tensor,
                               softmax_scale: float, scores: torch.Tensor, q_scale: Optional[torch.Tensor] = None,
                               page_size: int = 64, max_rows: int = 0, topk: int = dsa.MAX_TOPK,
                               skip_short_rows: bool = False) -> None:
    dsa.indexer_prefill_scores(q, weights, index_k_cache, kv_workspace_slots, row_starts, row_ends,
                               softmax_scale=softmax_scale, q_scale=q_scale, page_size=page_size, max_rows=max_rows,
                               topk=topk, skip_short_rows=skip_short_rows, scores=scores)


@_op("topk_out", ("indices", "lens", "workspace"),
     _C(dsa._TOPK, ("scores", "row_lens", "indices", "lens", "workspace"), ("topk", "max_len")))
def topk_out(scores: torch.Tensor, topk: int, indices: torch.Tensor, lens: torch.Tensor,
             row_lens: Optional[torch.Tensor] = None, max_len: Optional[int] = None,
             workspace: Optional[torch.Tensor] = None) -> None:
    dsa.topk(scores, topk=topk, row_lens=row_lens, max_len=max_len, indices=indices, lens=lens, workspace=workspace)


@_op("sparse_mla_out", ("out", "lse", "workspace"),
     _C(dsa._SPARSE_MLA, ("q", "kv_cache", "indices", "lens", "out", "lse", "workspace"),
        ("softmax_scale", "topk", True)))
def sparse_mla_out(q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor, softmax_scale: float,
                   out: torch.Tensor, lse: torch.Tensor, lens: Optional[torch.Tensor] = None,
                   topk: Optional[int] = None, workspace: Optional[torch.Tensor] = None) -> None:
    dsa.sparse_mla(q, kv_cache, indices, softmax_scale=softmax_scale, lens=lens, topk=topk, out=out, lse=lse,
                   workspace=workspace)


@_op("topk_merge_out", ("indices", "lens"),
     _C(dsa._TOPK_MERGE, ("cand_scores", "cand_ids", "indices", "lens"), ("topk",)))
def topk_merge_out(cand_scores: torch.Tensor, cand_ids: torch.Tensor, topk: int, indices: torch.Tensor,
                   lens: torch.Tensor) -> None:
    dsa.topk_merge(cand_scores, cand_ids, topk=topk, indices=indices, lens=lens)


@_op("lse_combine_out", ("out", "lse"), _C(dsa._LSE_COMBINE, ("outs", "lses", "out", "lse")))
def lse_combine_out(outs: torch.Tensor, lses: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    dsa.lse_combine(outs, lses, out=out, lse=lse)


for _out_op in (indexer_decode_out, indexer_decode_scores_out, indexer_prefill_out, indexer_prefill_scores_out,
                topk_out, sparse_mla_out, topk_merge_out, lse_combine_out):
    _out_op.register_fake(lambda *args, **kwargs: None)
