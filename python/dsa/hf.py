"""Hugging Face transformers models on dsa's kernels: ``dsa.hf.patch(model)``.

Takes over the attention of ``GlmMoeDsa`` (GLM-5) and ``DeepseekV32`` models from transformers
(5.17 and newer): each attention module's ``forward`` is replaced by one that

- writes the layer's latent row [kv_a_layernorm(c_kv) (512), RoPE'd k_rot (64)] into a paged MLA
  KV cache with ``dsa.mla_kv_store`` (packed FP8, 656 B a token, or bf16) and the indexer's key
  into a paged FP8 index-K cache with ``dsa.index_k_store``;
- selects each token's top-k with ``dsa.indexer_decode`` (one new token a row) or
  ``dsa.indexer_prefill`` (a prompt or a chunk), or, on GLM's IndexShare ("shared") layers, reuses
  the previous layer's selection;
- attends with ``dsa.sparse_mla`` on the absorbed query (q_nope . W_UK per head, then the RoPE
  part) and maps the latent output back through W_UV per head before ``o_proj``. W_UK / W_UV are
  taken from ``kv_b_proj`` once, at patch time.

The model's own ``past_key_values`` (a ``DynamicCache``) keeps counting tokens, so ``generate``,
position ids and masks work unchanged; each of its layers holds one byte a token instead of the
expanded per-head K/V, and dsa's caches live beside it (on the cache layer, as ``dsa_state``).
Without a cache (``use_cache=False``) a forward gets caches of its own for that call.

Batches: rows may be left-padded. Positions the attention mask hides are not stored; a row's
tokens sit at consecutive slots of the row's own pages (slot = row * capacity + the token's rank
among the row's visible positions), so the indexer and the attention see exactly the positions the
mask allows. The capacity grows by doubling (the caches are copied).

Not supported (raises or says so): training / gradients (inference only), beam search's cache
reordering, static or offloaded caches, masks other than causal + padding, ``output_attentions``
(``None`` is returned for the weights). The top-k indices a GLM layer returns (and passes to a
shared layer) are dsa's global slots, not positions.

Sizes dsa supports: kv_lora_rank 512, qk_rope_head_dim 64, index_head_dim 128, index_n_heads <= 64,
index_topk <= 2048, attention heads <= 128.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Optional

import torch

import dsa

__all__ = ["patch", "unpatch", "DsaKernels"]

_FAMILIES = {"GlmMoeDsaAttention": "glm", "DeepseekV32Attention": "deepseek_v32"}
_INDEX_ROW_BYTES = 132  # FP8 index key + its float32 scale


class DsaKernels:
    """The dsa calls dsa.hf makes, and the caches they write. Tests may give another implementation
    of the same methods (a float reference on the CPU) to check dsa.hf's bookkeeping apart from the
    kernels."""

    dtype = torch.bfloat16  # what q, the latent row and the index keys are handed over in

    def __init__(self, kv_format: str = "fp8", page_size: int = 64):
        if kv_format not in ("fp8", "bf16"):
            raise ValueError(f"dsa.hf: kv_format must be 'fp8' or 'bf16', not {kv_format!r}")
        if page_size % 4 or not 4 <= page_size <= 1024:
            raise ValueError(f"dsa.hf: page_size must be a multiple of 4 in 4..1024, not {page_size}")
        self.kv_format = kv_format
        self.page_size = page_size

    def new_kv_cache(self, slots: int, device) -> torch.Tensor:
        if self.kv_format == "fp8":
            return torch.zeros(slots, dsa.MLA_FP8_SLOT_BYTES, dtype=torch.uint8, device=device)
        return torch.zeros(slots, dsa.MLA_QK_DIM, dtype=torch.bfloat16, device=device)

    def new_index_cache(self, slots: int, device) -> torch.Tensor:
        return torch.zeros(slots // self.page_size, self.page_size * _INDEX_ROW_BYTES, dtype=torch.uint8,
                           device=device)

    def kv_store(self, kv, slots, cache) -> None:
        dsa.mla_kv_store(kv, slots, cache)

    def index_store(self, k, slots, cache) -> None:
        dsa.index_k_store(k, slots, cache, page_size=self.page_size)

    def indexer_decode(self, q, weights, cache, seq_lens, block_table, topk, softmax_scale):
        return dsa.indexer_decode(q, weights, cache, seq_lens, block_table, topk=topk, softmax_scale=softmax_scale,
                                  page_size=self.page_size)[0]

    def indexer_prefill(self, q, weights, cache, rows, row_starts, row_ends, topk, softmax_scale):
        return dsa.indexer_prefill(q, weights, cache, rows, row_starts, row_ends, topk=topk,
                                   softmax_scale=softmax_scale, page_size=self.page_size,
                                   output_global_slots=True)[0]

    def sparse_mla(self, q, kv_cache, indices, softmax_scale):
        return dsa.sparse_mla(q, kv_cache, indices, softmax_scale=softmax_scale)


class _State:
    """One layer's dsa caches for a batch: row b's tokens at slots [b cap, b cap + cap)."""

    def __init__(self, kernels: DsaKernels, batch: int, device, with_index: bool):
        self.kernels, self.batch, self.device, self.with_index = kernels, batch, device, with_index
        self.cap = 0
        self.kv = self.index = self.block_table = self.rows = self.row_base = None
        self.marker = None  # the cache layer's keys after this state's last step

    def reserve(self, tokens: int) -> None:
        if tokens <= self.cap:
            return
        page = self.kernels.page_size
        cap = max(page, self.cap)
        while cap < tokens:
            cap *= 2
        B, old = self.batch, self.cap
        kv = self.kernels.new_kv_cache(B * cap, self.device)
        index = self.kernels.new_index_cache(B * cap, self.device) if self.with_index else None
        if old:
            kv.view(B, cap, -1)[:, :old].copy_(self.kv.view(B, old, -1))
            if index is not None:
                index.view(B, cap // page, -1)[:, : old // page].copy_(self.index.view(B, old // page, -1))
        self.kv, self.index, self.cap = kv, index, cap
        pages = cap // page
        self.block_table = torch.arange(B * pages, dtype=torch.int32, device=self.device).view(B, pages)
        self.rows = torch.arange(B * cap, dtype=torch.int64, device=self.device)  # workspace row w = slot w
        self.row_base = torch.arange(B, dtype=torch.int64, device=self.device) * cap


class _Layer:
    """What dsa.hf keeps for one attention module: its family, the absorbed weights, the kernels."""

    def __init__(self, module, family: str, kernels: DsaKernels):
        cfg = module.config
        self.family, self.kernels = family, kernels
        self.nope, self.rope, self.v = module.qk_nope_head_dim, module.qk_rope_head_dim, module.v_head_dim
        self.heads, self.lora = module.num_heads, module.kv_lora_rank
        mod = sys.modules[type(module).__module__]
        self.rope_attn = mod.apply_rotary_pos_emb_interleave
        # GLM's indexer RoPE is interleaved; DeepSeek-V3.2's is the half-split one
        self.rope_index = mod.apply_rotary_pos_emb_interleave if family == "glm" else mod.apply_rotary_pos_emb
        w = module.kv_b_proj.weight.detach().view(self.heads, self.nope + self.v, self.lora)
        self.w_uk = w[:, : self.nope]  # [H, nope, 512], views of kv_b_proj's weight
        self.w_uv = w[:, self.nope :]  # [H, v, 512]
        self.topk = cfg.index_topk


def _check_sizes(module, family: str) -> None:
    cfg = module.config
    bad = []
    if module.kv_lora_rank != dsa.MLA_V_DIM:
        bad.append(f"kv_lora_rank {module.kv_lora_rank} (dsa: 512)")
    if module.qk_rope_head_dim != dsa.MLA_QK_DIM - dsa.MLA_V_DIM:
        bad.append(f"qk_rope_head_dim {module.qk_rope_head_dim} (dsa: 64)")
    if not 1 <= module.num_heads <= 128:
        bad.append(f"{module.num_heads} attention heads (dsa: 1..128)")
    if not 1 <= cfg.index_topk <= 2048:
        bad.append(f"index_topk {cfg.index_topk} (dsa: 1..2048)")
    ix = module.indexer
    if ix is not None:
        if ix.head_dim != dsa.INDEX_HEAD_DIM:
            bad.append(f"index_head_dim {ix.head_dim} (dsa: 128)")
        if not 1 <= ix.n_heads <= 64:
            bad.append(f"index_n_heads {ix.n_heads} (dsa: 1..64)")
    if bad:
        raise ValueError(f"dsa.hf.patch: layer {module.layer_idx} of a {family} model: " + ", ".join(bad))


def patch(model: Any, *, kv_format: str = "fp8", page_size: int = 64, kernels: Optional[DsaKernels] = None) -> Any:
    """Runs the attention of every GlmMoeDsa / DeepseekV32 attention module of `model` on dsa
    (see the module's docstring); returns `model`. kv_format "fp8" (packed, 656 B a token) or
    "bf16" for the latent cache. Inference only."""
    kernels = kernels or DsaKernels(kv_format, page_size)
    found = 0
    for module in model.modules():
        family = _FAMILIES.get(type(module).__name__)
        if family is None or hasattr(module, "_dsa"):
            continue
        _check_sizes(module, family)
        module._dsa = _Layer(module, family, kernels)
        module.forward = types.MethodType(_forward, module)
        found += 1
    if not found:
        raise ValueError("dsa.hf.patch: no GlmMoeDsaAttention or DeepseekV32Attention module in the model")
    return model


def unpatch(model: Any) -> Any:
    """Gives every patched attention module its transformers forward back."""
    for module in model.modules():
        layer = module.__dict__.pop("_dsa", None)
        if layer is not None:
            del module.forward  # the class's forward again
    return model


def _cache_step(module, past_key_values, batch: int, seq: int, device):
    """Counts this step's tokens in the model's cache (one-byte markers through its update, which
    also creates a DynamicCache's layers as it goes) and returns (tokens cached before, its layer for
    this module, or None without a cache). Only a DynamicCache's layers can follow dsa.hf: dsa's
    caches live beside them, and a cache reordered or cropped in between is refused."""
    if past_key_values is None:
        return 0, None
    from transformers.cache_utils import DynamicLayer

    idx = module.layer_idx
    layers = getattr(past_key_values, "layers", None)
    if layers is None or getattr(past_key_values, "offloading", False):
        raise ValueError(f"dsa.hf: only a DynamicCache (not offloaded) is supported, got {type(past_key_values).__name__}")
    prior = layers[idx] if idx < len(layers) else None
    st = getattr(prior, "dsa_state", None)
    if st is not None and prior.is_initialized and prior.keys is not st.marker:
        # reorder_cache (beam search), crop or reset changed the cache since dsa.hf's last step, and
        # dsa's caches cannot follow
        raise ValueError("dsa.hf: the cache was reordered, cropped or reset outside the model's forward "
                         "(beam search is not supported); start from a new cache")
    past = past_key_values.get_seq_length(idx)
    marker = torch.zeros(batch, 1, seq, 1, dtype=torch.uint8, device=device)
    past_key_values.update(marker, marker, idx)
    holder = past_key_values.layers[idx]
    if not isinstance(holder, DynamicLayer):
        raise ValueError(f"dsa.hf: only a DynamicCache is supported, got a {type(holder).__name__} layer")
    return past, holder


def _state(module, holder, batch: int, tokens: int, device) -> _State:
    st = getattr(holder, "dsa_state", None) if holder is not None else None
    if st is None or st.batch != batch or st.device != device:
        st = _State(module._dsa.kernels, batch, device, with_index=module.indexer is not None)
        if holder is not None:
            holder.dsa_state = st
    st.reserve(tokens)
    return st


def _visible(attention_mask, batch: int, seq: int, past: int, device):
    """(valid [B, S, T] bool: query s may see key position t) from the model's 4D mask (bool, or
    additive float with the dtype's minimum at hidden positions); causal when there is none."""
    total = past + seq
    if attention_mask is None:
        t = torch.arange(total, device=device)
        s = torch.arange(seq, device=device) + past
        return (t[None, :] <= s[:, None]).expand(batch, seq, total)
    m = attention_mask[:, 0]
    if m.dtype != torch.bool:
        m = m > torch.finfo(m.dtype).min / 2
    if m.shape[-1] != total or m.shape[-2] != seq:
        raise ValueError(f"dsa.hf: attention mask {tuple(attention_mask.shape)} for {seq} new and {past} cached "
                         "tokens (a static cache or a sliding window is not supported)")
    return m.expand(batch, seq, total)


@torch.no_grad()
def _forward(self, hidden_states: torch.Tensor, position_embeddings, attention_mask=None, past_key_values=None,
             position_ids=None, **kwargs):
    """The attention module's forward on dsa (dsa.hf.patch); same arguments and returns as the
    transformers forward it replaces."""
    L: _Layer = self._dsa
    if kwargs.get("output_attentions"):
        raise ValueError("dsa.hf: output_attentions is not supported (no attention matrix is formed)")
    B, S, _ = hidden_states.shape
    dev = hidden_states.device
    x = hidden_states
    cos, sin = position_embeddings

    # ---- queries, the latent row, RoPE (as transformers computes them) ----
    q_resid = self.q_a_layernorm(self.q_a_proj(x))
    q = self.q_b_proj(q_resid).view(B, S, L.heads, L.nope + L.rope)
    q_nope, q_rot = torch.split(q, [L.nope, L.rope], dim=-1)
    kv_pass, k_rot = torch.split(self.kv_a_proj_with_mqa(x), [L.lora, L.rope], dim=-1)
    kv_pass = self.kv_a_layernorm(kv_pass)
    q_rot, k_rot = L.rope_attn(q_rot.transpose(1, 2), k_rot.view(B, 1, S, L.rope), cos, sin)
    q_rot = q_rot.transpose(1, 2)  # [B, S, H, 64]
    latent = torch.cat([kv_pass, k_rot.view(B, S, L.rope)], dim=-1).to(L.kernels.dtype).reshape(B * S, -1)

    # ---- where the new tokens go; what each query sees ----
    past, holder = _cache_step(self, past_key_values, B, S, dev)
    valid = _visible(attention_mask, B, S, past, dev)  # [B, S, T]
    lens = valid.sum(-1, dtype=torch.int32)  # [B, S] positions each query sees
    last = valid[:, -1, :]  # the last query sees every stored position
    rank = last.cumsum(-1)[:, past:]  # [B, S] a new token's rank among its row's visible positions
    st = _state(self, holder, B, past + S, dev)
    if holder is not None:
        st.marker = holder.keys
    slots = torch.where(last[:, past:], st.row_base[:, None] + rank - 1, torch.full_like(rank, -1)).reshape(-1)
    L.kernels.kv_store(latent, slots, st.kv)

    # ---- the top-k: this layer's indexer, or the previous full layer's selection ----
    if self.indexer is not None:
        ix = self.indexer
        HI, D = ix.n_heads, ix.head_dim
        qi = ix.wq_b(q_resid).view(B, S, HI, D)
        qi_rot, qi_pass = torch.split(qi, [L.rope, D - L.rope], dim=-1)
        ki = ix.k_norm(ix.wk(x)).unsqueeze(2)  # [B, S, 1, D]
        ki_rot, ki_pass = torch.split(ki, [L.rope, D - L.rope], dim=-1)
        qi_rot, ki_rot = L.rope_index(qi_rot, ki_rot, cos, sin, unsqueeze_dim=2)
        qi = torch.cat([qi_rot, qi_pass], dim=-1).to(L.kernels.dtype).reshape(B * S, HI, D)
        ki = torch.cat([ki_rot, ki_pass], dim=-1).to(L.kernels.dtype).reshape(B * S, D)
        w = ix.weights_proj(x.to(ix.weights_proj.weight.dtype)).float() * (HI**-0.5)
        w = w.reshape(B * S, HI).contiguous()
        L.kernels.index_store(ki, slots, st.index)
        if S == 1:
            idx = L.kernels.indexer_decode(qi, w, st.index, lens[:, 0].contiguous(), st.block_table, L.topk,
                                           ix.softmax_scale)
        else:
            starts = st.row_base[:, None].expand(B, S).to(torch.int32)
            ends = starts + lens
            idx = L.kernels.indexer_prefill(qi, w, st.index, st.rows, starts.reshape(-1).contiguous(),
                                            ends.reshape(-1).contiguous(), L.topk, ix.softmax_scale)
    else:
        idx = kwargs.get("prev_topk_indices")
        if idx is None:
            raise ValueError("dsa.hf: a shared DSA layer needs the previous full layer's top-k (prev_topk_indices)")

    # ---- attention on the absorbed query; W_UV per head; o_proj ----
    q_lat = torch.einsum("bshn,hnc->bshc", q_nope, L.w_uk.to(q_nope.dtype))
    qa = torch.cat([q_lat, q_rot], dim=-1).to(L.kernels.dtype).reshape(B * S, L.heads, -1).contiguous()
    out = L.kernels.sparse_mla(qa, st.kv, idx, self.scaling)  # [B S, H, 512]
    o = torch.einsum("thc,hvc->thv", out.to(L.w_uv.dtype), L.w_uv).reshape(B, S, L.heads * L.v)
    o = self.o_proj(o.to(self.o_proj.weight.dtype))
    if L.family == "glm":
        return o, None, idx
    return o, None
