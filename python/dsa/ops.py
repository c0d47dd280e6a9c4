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
zeros unless compact. The workspace-size queries are host functions on shapes and stay in ``dsa``.
Registered with torch.library.Library (define + impl, fakes by register_fake), not custom_op, for a
lower host cost a call. Needs PyTorch >= 2.4; ``import dsa`` alone does not import PyTorch.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

import dsa

__all__: list = []  # the operators live in torch.ops.dsa

_I32 = torch.int32
_F32 = torch.float32


_LIB = torch.library.Library("dsa", "FRAGMENT")
_infer_schema = getattr(torch.library, "infer_schema", None)
if _infer_schema is None:  # PyTorch 2.4
    from torch._library.infer_schema import infer_schema as _infer_schema


class _Op:
    """An operator of torch.ops.dsa: its function (the CUDA kernel) and how to give it a fake."""

    def __init__(self, name: str, fn) -> None:
        self.name, self.fn = name, fn

    def __call__(self, *args, **kwargs):  # dsa.ops.NAME(...) is torch.ops.dsa.NAME(...)
        return getattr(torch.ops.dsa, self.name)(*args, **kwargs)

    def register_fake(self, fake):
        torch.library.register_fake(f"dsa::{self.name}", fake, lib=_LIB)
        return fake


def _op(name: str, mutates: Tuple[str, ...] = ()):
    """Registers fn as dsa::name straight on the dispatcher, as vLLM's direct_register_custom_op does:
    the schema inferred from its annotations (mutates: the arguments it writes), fn the CUDA kernel.
    An eager call then costs one dispatch into fn: torch.ops.dsa.sparse_mla 5.2x a torch.add, against
    10.7x through torch.library.custom_op (dev/python_overhead.py, H200 machine, 2026-12-05)."""

    def wrap(fn) -> _Op:
        _LIB.define(name + _infer_schema(fn, mutates_args=mutates))
        _LIB.impl(name, fn, "CUDA")
        return _Op(name, fn)

    return wrap


def _decode_max_len(block_table: torch.Tensor, page_size: int, max_seq_len: int) -> int:
    cap = block_table.shape[1] * page_size
    return max_seq_len if 0 < max_seq_len < cap else cap


def _prefill_max_len(kv_workspace_slots: torch.Tensor, max_rows: int) -> int:
    w = kv_workspace_slots.shape[0]
    return max_rows if 0 < max_rows < w else w


# ---- cache writers ------------------------------------------------------------------------------


@_op("index_k_store", ("index_k_cache",))
def index_k_store(k: torch.Tensor, slot_mapping: torch.Tensor, index_k_cache: torch.Tensor,
                  page_size: int = 64) -> None:
    dsa.index_k_store(k, slot_mapping, index_k_cache, page_size=page_size)


@index_k_store.register_fake
def _(k, slot_mapping, index_k_cache, page_size=64):
    return None


@_op("mla_kv_store", ("kv_cache",))
def mla_kv_store(kv: torch.Tensor, slot_mapping: torch.Tensor, kv_cache: torch.Tensor) -> None:
    dsa.mla_kv_store(kv, slot_mapping, kv_cache)


@mla_kv_store.register_fake
def _(kv, slot_mapping, kv_cache):
    return None


# ---- indexer ----------------------------------------------------------------------------------------


@_op("indexer_decode")
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


@_op("indexer_decode_scores")
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


@_op("indexer_prefill")
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


@_op("indexer_prefill_scores")
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


@_op("topk")
def topk(scores: torch.Tensor, topk: int, row_lens: Optional[torch.Tensor] = None,
         max_len: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    return dsa.topk(scores, topk=topk, row_lens=row_lens, max_len=max_len)


@topk.register_fake
def _(scores, topk, row_lens=None, max_len=None):
    R = scores.shape[0]
    return scores.new_empty((R, topk), dtype=_I32), scores.new_empty((R,), dtype=_I32)


@_op("sparse_mla")
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


@_op("topk_merge")
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


@_op("lse_combine")
def lse_combine(outs: torch.Tensor, lses: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    return dsa.lse_combine(outs, lses)


@lse_combine.register_fake
def _(outs, lses):
    T, H = outs.shape[1], outs.shape[2]
    return outs.new_empty((T, H, dsa.MLA_V_DIM), dtype=torch.bfloat16), outs.new_empty((T, H), dtype=_F32)
