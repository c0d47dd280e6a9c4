"""torch.ops.dsa (dsa/ops.py): the operators' schemas (what each writes), their fake implementations'
shapes and dtypes, and a decode layer step traced through them with fake CUDA tensors — no GPU
needed. With a GPU: the step under torch.compile(fullgraph=True) against the eager calls, and the
compiled step captured in a CUDA graph. Skipped where PyTorch is not installed."""

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    pytest.skip("PyTorch >= 2.4 is needed for torch.library.custom_op", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import dsa  # noqa: E402
import dsa.ops  # noqa: E402,F401  (registers torch.ops.dsa)

OPS = {
    # name: the arguments it writes
    "index_k_store": {"index_k_cache"},
    "mla_kv_store": {"kv_cache"},
    "indexer_decode": set(),
    "indexer_decode_scores": set(),
    "indexer_prefill": set(),
    "indexer_prefill_scores": set(),
    "topk": set(),
    "sparse_mla": set(),
    "cp_candidates": set(),
    "topk_merge": set(),
    "cp_local_indices": set(),
    "lse_combine": set(),
}

P, HI, K, H = 64, 32, 2048, 16  # page size, index heads, topk, attention heads (GLM-5, TP4)


def test_every_public_call_is_an_operator_and_declares_what_it_writes():
    for name, writes in OPS.items():
        schema = getattr(torch.ops.dsa, name).default._schema
        written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        assert written == writes, (name, str(schema))
    calls = {n for n in dsa.__all__ if n[0].islower() and not n.endswith("_workspace_size") and n != "version"}
    assert calls == set(OPS), calls ^ set(OPS)


def _decode_inputs(B, S, device="cuda"):
    """Empty tensors of one decode step's inputs (GLM-5 shapes), in _step's argument order."""
    pages_per_req = (S + P - 1) // P
    pages = B * pages_per_req
    d = device
    return dict(
        k_index=torch.empty(B, 128, dtype=torch.bfloat16, device=d),
        kv_latent=torch.empty(B, 576, dtype=torch.bfloat16, device=d),
        new_slot=torch.empty(B, dtype=torch.int64, device=d),
        index_k_cache=torch.empty(pages, P * 132, dtype=torch.uint8, device=d),
        kv_cache=torch.empty(pages, P, 656, dtype=torch.uint8, device=d),
        q_index=torch.empty(B, HI, 128, dtype=torch.float8_e4m3fn, device=d),
        q_scale=torch.empty(B, HI, dtype=torch.float32, device=d),
        weights=torch.empty(B, HI, dtype=torch.float32, device=d),
        seq_lens=torch.empty(B, dtype=torch.int32, device=d),
        block_table=torch.empty(B, pages_per_req, dtype=torch.int32, device=d),
        q_attn=torch.empty(B, H, 576, dtype=torch.bfloat16, device=d),
    )


def _step(x):
    """One decode layer step as an engine runs it: both cache writes, the indexer, attention."""
    torch.ops.dsa.index_k_store(x["k_index"], x["new_slot"], x["index_k_cache"], P)
    torch.ops.dsa.mla_kv_store(x["kv_latent"], x["new_slot"], x["kv_cache"])
    idx, lens = torch.ops.dsa.indexer_decode(x["q_index"], x["weights"], x["index_k_cache"], x["seq_lens"],
                                             x["block_table"], K, HI ** -0.5 / 128 ** 0.5, x["q_scale"])
    out, lse = torch.ops.dsa.sparse_mla(x["q_attn"], x["kv_cache"], idx, (192 + 64) ** -0.5, lens)
    return out, lse, idx, lens


def test_fake_shapes_and_dtypes():
    with FakeTensorMode():
        x = _decode_inputs(3, 1000)
        out, lse, idx, lens = _step(x)
        assert (idx.shape, idx.dtype, lens.shape, lens.dtype) == ((3, K), torch.int32, (3,), torch.int32)
        assert (out.shape, out.dtype, lse.shape, lse.dtype) == ((3, H, 512), torch.bfloat16, (3, H), torch.float32)
        assert out.device.type == "cuda"
        sc = torch.ops.dsa.indexer_decode_scores(x["q_index"], x["weights"], x["index_k_cache"], x["seq_lens"],
                                                 x["block_table"], 0.1, x["q_scale"], P, 1, 700)
        assert (sc.shape, sc.dtype) == ((3, 700), torch.float32)  # max_seq_len under the table's capacity
        sc = torch.ops.dsa.indexer_decode_scores(x["q_index"], x["weights"], x["index_k_cache"], x["seq_lens"],
                                                 x["block_table"], 0.1, x["q_scale"])
        assert sc.shape == (3, 16 * P)  # the table's capacity
        T, W = 5, 4000
        ws = torch.empty(W, dtype=torch.int64, device="cuda")
        rs = torch.empty(T, dtype=torch.int32, device="cuda")
        q = torch.empty(T, HI, 128, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(T, HI, dtype=torch.float32, device="cuda")
        i, n = torch.ops.dsa.indexer_prefill(q, w, x["index_k_cache"], ws, rs, rs, 512, 0.1)
        assert (i.shape, n.shape) == ((T, 512), (T,))
        assert torch.ops.dsa.indexer_prefill_scores(q, w, x["index_k_cache"], ws, rs, rs, 0.1).shape == (T, W)
        assert torch.ops.dsa.indexer_prefill_scores(q, w, x["index_k_cache"], ws, rs, rs, 0.1, None, P, 300).shape == (
            T, 300)
        scores = torch.empty(7, 9000, dtype=torch.float32, device="cuda")
        i, n = torch.ops.dsa.topk(scores, 100)
        assert (i.shape, i.dtype, n.shape) == ((7, 100), torch.int32, (7,))
        li = torch.empty(7, 100, dtype=torch.int32, device="cuda")
        cs, ci = torch.ops.dsa.cp_candidates(scores, li, 4, 1)
        assert (cs.shape, cs.dtype, ci.shape, ci.dtype) == ((7, 100), torch.float32, (7, 100), torch.int32)
        i, n = torch.ops.dsa.topk_merge(cs.expand(4, 7, 100), ci.expand(4, 7, 100), 64)
        assert (i.shape, n.shape) == ((7, 64), (7,))
        s, n = torch.ops.dsa.cp_local_indices(li, 4, 1, "round_robin", 0, x["block_table"])
        assert (s.shape, s.dtype, n.shape) == ((7, 100), torch.int32, (7,))
        o, l_ = torch.ops.dsa.lse_combine(torch.empty(4, 3, H, 512, device="cuda"), torch.empty(4, 3, H, device="cuda"))
        assert (o.shape, o.dtype, l_.shape) == ((3, H, 512), torch.bfloat16, (3, H))


def test_decode_step_traces_into_one_graph():
    """The step traced with fake CUDA tensors: one graph holding the four operators in order, the
    caches' writes kept (nothing dropped as dead code)."""
    with FakeTensorMode():
        x = _decode_inputs(2, 300)
        names = list(x)
        g = make_fx(lambda *a: _step(dict(zip(names, a))))(*x.values())
    called = [str(n.target) for n in g.graph.nodes if n.op == "call_function"]
    dsa_calls = [c for c in called if c.startswith("dsa.")]
    assert dsa_calls == ["dsa.index_k_store.default", "dsa.mla_kv_store.default", "dsa.indexer_decode.default",
                         "dsa.sparse_mla.default"], called


def test_decode_step_exports_with_no_graph_break():
    """Dynamo over the step (torch.export: the whole function or an error, as fullgraph=True), on
    CPU tensors: the operators' fake implementations trace it, nothing runs."""
    x = _decode_inputs(2, 300, device="cpu")

    class Step(torch.nn.Module):
        def forward(self, *a):
            return _step(dict(zip(x, a)))[:2]

    ep = torch.export.export(Step(), tuple(x.values()))
    called = [str(n.target) for n in ep.graph.nodes if n.op == "call_function" and str(n.target).startswith("dsa.")]
    assert called == ["dsa.index_k_store.default", "dsa.mla_kv_store.default", "dsa.indexer_decode.default",
                      "dsa.sparse_mla.default"], called


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                               reason="needs an sm_90 GPU")


def _real_decode_inputs(B, S, g):
    d = torch.device("cuda")
    pages_per_req = (S + 1 + P - 1) // P
    pages = B * pages_per_req
    block_table = torch.randperm(pages, device=d, generator=g).to(torch.int32).view(B, pages_per_req)
    x = dict(
        index_k_cache=torch.zeros(pages, P * 132, dtype=torch.uint8, device=d),
        kv_cache=torch.zeros(pages, P, 656, dtype=torch.uint8, device=d),
        block_table=block_table,
        seq_lens=torch.full((B,), S + 1, dtype=torch.int32, device=d),
        new_slot=block_table[:, S // P].long() * P + S % P,
        k_index=torch.randn(B, 128, device=d, generator=g).to(torch.bfloat16),
        kv_latent=torch.randn(B, 576, device=d, generator=g).to(torch.bfloat16),
        q_index=(torch.randn(B, HI, 128, device=d, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn),
        q_scale=torch.rand(B, HI, device=d, generator=g) * 0.01,
        weights=torch.randn(B, HI, device=d, generator=g),
        q_attn=torch.randn(B, H, 576, device=d, generator=g).to(torch.bfloat16),
    )
    slots = (block_table.long()[:, :, None] * P + torch.arange(P, device=d)).view(B, -1)[:, :S].reshape(-1)
    dsa.index_k_store(torch.randn(slots.numel(), 128, device=d, generator=g).to(torch.bfloat16), slots,
                      x["index_k_cache"])
    dsa.mla_kv_store(torch.randn(slots.numel(), 576, device=d, generator=g).to(torch.bfloat16), slots, x["kv_cache"])
    return x


@needs_gpu
def test_compiled_decode_step_matches_eager_and_replays_in_a_cuda_graph():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = _real_decode_inputs(4, 5000, g)
    x_eager = {k: v.clone() for k, v in x.items()}
    ref = _step(x_eager)
    torch._dynamo.reset()
    step_c = torch.compile(_step, fullgraph=True)
    got = step_c(x)
    for a, b in zip(got, ref):
        assert torch.equal(a, b)  # deterministic kernels, the same inputs: bit for bit
    assert torch.equal(x["kv_cache"], x_eager["kv_cache"]) and torch.equal(x["index_k_cache"], x_eager["index_k_cache"])
    # the compiled step in a CUDA graph: captured once, replayed, the same answer
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step_c(x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step_c(x)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(outs, ref):
        assert torch.equal(a, b)
