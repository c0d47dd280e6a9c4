"""generate() on a long prompt with a transformers GLM-5-shaped model (tiny, random weights), with and
without dsa (dsa.hf.patch): prefill time, decode tokens/s and peak GPU memory of each.

    python examples/hf_generate.py [--prompt 32768] [--new 64] [--layers 4] [--kv fp8|bf16] [--no-hf]

The model has GLM-5's attention shapes (kv_lora 512, rope 64, 32 index heads x 128, topk 2048; 16
attention heads, GLM-5 at TP4) and a small hidden size and vocabulary. transformers' own path
forms the indexer's scores densely ([B, S, heads, T] in float32: 128 GiB at a 32k prompt), so
--no-hf skips it where it cannot run; dsa's path keeps 1.3 KB a token a layer (FP8).
"""

import argparse
import time

import torch
import transformers

import dsa.hf


def tiny_glm(layers: int) -> transformers.GlmMoeDsaConfig:
    types = ["full" if i % 2 == 0 else "shared" for i in range(layers)]
    return transformers.GlmMoeDsaConfig(
        vocab_size=4096, hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
        num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=16, n_routed_experts=8,
        n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
        kv_lora_rank=512, q_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=192, v_head_dim=256,
        index_topk=2048, index_head_dim=128, index_n_heads=32, indexer_types=types,
        max_position_embeddings=1 << 20, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def run(model, ids, new_tokens):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    model.generate(input_ids=ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    out = model.generate(input_ids=ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    prefill = t1 - t0
    decode_s = max((t2 - t1) - prefill, 1e-9)  # the second call prefills again, then decodes
    peak = (torch.cuda.max_memory_allocated() - base) / 2**30
    return out, prefill, (new_tokens - 1) / decode_s, peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=32768)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kv", choices=["fp8", "bf16"], default="fp8")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' own path")
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = tiny_glm(a.layers)
    cfg._attn_implementation = "sdpa"
    model = transformers.AutoModelForCausalLM.from_config(cfg).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(3, cfg.vocab_size, (1, a.prompt), device="cuda")
    rows = []
    with torch.no_grad():
        if not a.no_hf:
            try:
                _, p, tps, mem = run(model, ids, a.new)
                rows.append(("transformers", p, tps, mem))
            except torch.OutOfMemoryError:
                rows.append(("transformers", float("nan"), float("nan"), float("inf")))
                torch.cuda.empty_cache()
        dsa.hf.patch(model, kv_format=a.kv)
        _, p, tps, mem = run(model, ids, a.new)
        rows.append((f"dsa ({a.kv} KV)", p, tps, mem))
    print(f"GLM-5-shaped tiny model, {a.layers} layers, prompt {a.prompt} tokens, {a.new} new tokens, "
          f"{torch.cuda.get_device_name()}")
    print(f"{'path':<18} {'prefill s':>10} {'decode tok/s':>13} {'peak GiB':>9}")
    for name, p, tps, mem in rows:
        print(f"{name:<18} {p:>10.3f} {tps:>13.1f} {mem:>9.2f}")


if __name__ == "__main__":
    main()
