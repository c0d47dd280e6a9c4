"""One DSA decode layer step as an inference engine runs it, captured in a CUDA graph and timed.

Per step and request: write the new token's index-K row (FP8, paged) and its MLA latent row (packed
FP8) into the caches, run the indexer (scores + top-k over every visible position, FP8 q with a
per-head scale), then sparse MLA attention over the selected slots. GLM-5 shapes by default:
32 x 128 indexer, topk 2048, page 64, 16 attention heads (TP4), packed FP8 KV.

    python examples/decode_layer.py --batch 64 --context 32768

Needs PyTorch and an H100/H200; the dsa package from `pip install .` (or PYTHONPATH=python with a
built ./build/libdsa.so).
"""

import argparse
import math
import time

import torch

import dsa

P = 64  # tokens per KV page


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64, help="requests decoded together")
    ap.add_argument("--context", type=int, default=32768, help="tokens already in each request's cache")
    ap.add_argument("--heads", type=int, default=16, help="attention heads on this GPU")
    ap.add_argument("--index-heads", type=int, default=32)
    ap.add_argument("--topk", type=int, default=2048)
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args()
    dev = torch.device("cuda")
    B, S, H, HI, K = args.batch, args.context, args.heads, args.index_heads, args.topk
    g = torch.Generator(device=dev).manual_seed(0)

    # ---- caches: pages handed out in random order, as an allocator would after a while ----
    pages_per_req = (S + 1 + P - 1) // P
    num_pages = B * pages_per_req
    block_table = torch.randperm(num_pages, device=dev, generator=g).to(torch.int32).view(B, pages_per_req)
    index_k_cache = torch.empty(num_pages, P * (128 + 4), dtype=torch.uint8, device=dev)
    kv_cache = torch.empty(num_pages, P, 656, dtype=torch.uint8, device=dev)
    # Prefill what is already there (chunks keep the bf16 staging small).
    all_slots = (block_table.long()[:, :, None] * P + torch.arange(P, device=dev)).view(B, -1)[:, :S].reshape(-1)
    for c in range(0, all_slots.numel(), 1 << 20):
        slots = all_slots[c:c + (1 << 20)]
        n = slots.numel()
        dsa.index_k_store(torch.randn(n, 128, device=dev, generator=g).to(torch.bfloat16), slots, index_k_cache)
        dsa.mla_kv_store(torch.randn(n, 576, device=dev, generator=g).to(torch.bfloat16), slots, kv_cache)
    seq_lens = torch.full((B,), S + 1, dtype=torch.int32, device=dev)  # the new token included
    new_slot = block_table[:, S // P].long() * P + S % P

    # ---- this step's activations (an engine's projections would write these in place) ----
    k_index = torch.randn(B, 128, device=dev, generator=g).to(torch.bfloat16)
    kv_latent = torch.randn(B, 576, device=dev, generator=g).to(torch.bfloat16)
    q_index = (torch.randn(B, HI, 128, device=dev, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    q_scale = torch.rand(B, HI, device=dev, generator=g) * 0.01
    weights = torch.randn(B, HI, device=dev, generator=g)
    q_attn = torch.randn(B, H, 576, device=dev, generator=g).to(torch.bfloat16)

    # Workspaces sized once, outside the graph.
    ws_index = torch.empty(dsa.indexer_decode_workspace_size(
        q_index, weights, index_k_cache, seq_lens, block_table, topk=K, softmax_scale=HI ** -0.5 / 128 ** 0.5,
        q_scale=q_scale), dtype=torch.uint8, device=dev)
    topk_indices = torch.empty(B, K, dtype=torch.int32, device=dev)
    topk_lens = torch.empty(B, dtype=torch.int32, device=dev)
    out = torch.empty(B, H, 512, dtype=torch.bfloat16, device=dev)
    ws_attn = torch.empty(max(1, dsa.sparse_mla_workspace_size(q_attn, kv_cache, topk_indices,
                                                               softmax_scale=1.0)), dtype=torch.uint8, device=dev)

    def step() -> None:
        dsa.index_k_store(k_index, new_slot, index_k_cache)
        dsa.mla_kv_store(kv_latent, new_slot, kv_cache)
        dsa.indexer_decode(q_index, weights, index_k_cache, seq_lens, block_table, topk=K,
                           softmax_scale=HI ** -0.5 / 128 ** 0.5, q_scale=q_scale,
                           topk_indices=topk_indices, topk_lens=topk_lens, workspace=ws_index)
        dsa.sparse_mla(q_attn, kv_cache, topk_indices, lens=topk_lens, softmax_scale=(192 + 64) ** -0.5,
                       out=out, workspace=ws_attn)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    def timed(fn, iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(iters):
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            ts.append(start.elapsed_time(stop) * 1e3)
        ts.sort()
        return ts[len(ts) // 2]

    eager_us = timed(step, args.iters)
    graph_us = timed(graph.replay, args.iters)
    torch.cuda.synchronize()
    assert int(topk_lens.min()) == min(K, S + 1) and not torch.isnan(out.float()).any()
    print(f"dsa {dsa.version()} on {torch.cuda.get_device_name()}: decode layer step, batch {B} x context {S}, "
          f"{HI} index heads, topk {K}, {H} attention heads, FP8 caches")
    print(f"  eager  {eager_us:8.1f} us / step   (median of {args.iters})")
    print(f"  graph  {graph_us:8.1f} us / step   ({graph_us / B:.2f} us per request)")


if __name__ == "__main__":
    main()
