"""torch.ops.dsa (dsa/ops.py): the operators' schemas (what each writes), their fake implementations'
shapes and dtypes, and a decode layer step traced through them with fake CUDA tensors — no GPU
needed. With a GPU: the step under torch.compile(fullgraph=True) against the eager calls, and the
compiled step captured in a CUDA graph. Skipped where PyTorch is not installed."""

import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    pytest.skip("PyTorch >= 2.4 is needed for torch.library.custom_op", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import dsa  # noqa: E402
import dsa.ops  # noqa: E402,F401  (registers torch.ops.dsa)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # fake_arrays, whatever pytest's import mode

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

OPS_OUT = {
    # NAME_out: NAME with its outputs (and workspace) given, written in place; returns nothing
    "indexer_decode_out": {"topk_indices", "topk_lens", "workspace"},
    "indexer_decode_scores_out": {"scores"},
    "indexer_prefill_out": {"topk_indices", "topk_lens", "workspace"},
    "indexer_prefill_scores_out": {"scores"},
    "topk_out": {"indices", "lens", "workspace"},
    "sparse_mla_out": {"out", "lse", "workspace"},
    "topk_merge_out": {"indices", "lens"},
    "lse_combine_out": {"out", "lse"},
}

P, HI, K, H = 64, 32, 2048, 16  # page size, index heads, topk, attention heads (GLM-5, TP4)


def test_every_public_call_is_an_operator_and_declares_what_it_writes():
    for name, writes in OPS.items():
        schema = getattr(torch.ops.dsa, name).default._schema
        written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        assert written == writes, (name, str(schema))
    calls = {n for n in dsa.__all__ if n[0].islower() and not n.endswith("_workspace_size") and n != "version"}
    assert calls == set(OPS), calls ^ set(OPS)


def test_out_operators_take_their_operators_arguments_and_write_only_outputs():
    """NAME_out: NAME's arguments in NAME's order with the outputs after the required ones and an
    optional workspace last, those declared written, nothing returned; C kernels where NAME has one."""
    for name, writes in OPS_OUT.items():
        schema = getattr(torch.ops.dsa, name).default._schema
        written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        assert written == writes and not schema.returns, (name, str(schema))
        base = getattr(torch.ops.dsa, name[:-len("_out")]).default._schema
        args = [a.name for a in schema.arguments if a.name not in writes]
        assert args == [a.name for a in base.arguments], (name, str(schema))
        assert getattr(dsa.ops, name).c_layout is not None, name


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


def _step_out(x, o):
    """The same step with every output given (o: _decode_outputs'), as an engine that plans its
    buffers runs it."""
    torch.ops.dsa.index_k_store(x["k_index"], x["new_slot"], x["index_k_cache"], P)
    torch.ops.dsa.mla_kv_store(x["kv_latent"], x["new_slot"], x["kv_cache"])
    torch.ops.dsa.indexer_decode_out(x["q_index"], x["weights"], x["index_k_cache"], x["seq_lens"],
                                     x["block_table"], K, HI ** -0.5 / 128 ** 0.5, o["idx"], o["lens"], x["q_scale"])
    torch.ops.dsa.sparse_mla_out(x["q_attn"], x["kv_cache"], o["idx"], (192 + 64) ** -0.5, o["out"], o["lse"],
                                 o["lens"])


def _decode_outputs(x):
    B, d = x["q_attn"].shape[0], x["q_attn"].device
    return dict(idx=torch.empty(B, K, dtype=torch.int32, device=d), lens=torch.empty(B, dtype=torch.int32, device=d),
                out=torch.empty(B, H, 512, dtype=torch.bfloat16, device=d),
                lse=torch.empty(B, H, dtype=torch.float32, device=d))


def test_out_step_exports_functionalized():
    """The step with outputs given, exported (Dynamo, no graph break) and lowered to the functional
    IR: each call becomes an auto_functionalized node of its operator (its writes made explicit), in
    the step's order."""
    x = _decode_inputs(2, 300, device="cpu")
    o = _decode_outputs(x)

    class Step(torch.nn.Module):
        def forward(self, *a):
            xo = dict(zip(list(x) + list(o), a))
            _step_out(xo, xo)
            return xo["out"], xo["lse"]

    ep = torch.export.export(Step(), tuple(x.values()) + tuple(o.values())).run_decompositions({})
    nodes = [n for n in ep.graph.nodes if n.op == "call_function"]
    called = [str(n.args[0]) if "auto_functionalized" in str(n.target) else str(n.target) for n in nodes]
    called = [c for c in called if c.startswith("dsa.")]
    assert called == ["dsa.index_k_store.default", "dsa.mla_kv_store.default", "dsa.indexer_decode_out.default",
                      "dsa.sparse_mla_out.default"], called
    assert sum("auto_functionalized" in str(n.target) for n in nodes) == 4, [str(n.target) for n in nodes]


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


# ---- the operators' C kernels (python/ext/torch_op.c), on CPU tensors with libdsa recorded ----------

def _c_cases():
    """Each operator with a C kernel, with CPU tensors of one signature (new ones each call)."""
    bf, i32, i64, u8 = torch.bfloat16, torch.int32, torch.int64, torch.uint8
    e = torch.empty
    T, HQ = 3, 32
    return {
        "sparse_mla": lambda: ("sparse_mla", e(T, 16, 576, dtype=bf), e(100, 656, dtype=u8), e(T, 64, dtype=i32),
                               0.07, e(T, dtype=i32)),
        "sparse_mla, bf16 KV, topk": lambda: ("sparse_mla", e(T, 16, 576, dtype=bf), e(100, 640, dtype=bf),
                                              e(T, 64, dtype=i32), 0.07, None, 40),
        "sparse_mla, another scale": lambda: ("sparse_mla", e(T, 16, 576, dtype=bf), e(100, 656, dtype=u8),
                                              e(T, 64, dtype=i32), 0.05, e(T, dtype=i32)),
        "topk": lambda: ("topk", e(4, 100), 8, e(4, dtype=i32)),
        "topk, strided rows, max_len": lambda: ("topk", e(4, 128)[:, :100], 8, None, 90),
        "topk, strided rows": lambda: ("topk", e(4, 128)[:, :100], 8, e(4, dtype=i32)),
        "topk, k 16": lambda: ("topk", e(4, 100), 16, e(4, dtype=i32)),
        "index_k_store": lambda: ("index_k_store", e(T, 128, dtype=bf), e(T, dtype=i64), e(4, P * 132, dtype=u8), P),
        "mla_kv_store": lambda: ("mla_kv_store", e(T, 576, dtype=bf), e(T, dtype=i64), e(50, 656, dtype=u8)),
        "indexer_decode": lambda: ("indexer_decode", e(T, HQ, 128, dtype=torch.float8_e4m3fn), e(T, HQ),
                                   e(10, P * 132, dtype=u8), e(T, dtype=i32), e(T, 5, dtype=i32), 64, 0.1,
                                   e(T, HQ), P, 1, 0, 0),
        "indexer_decode_scores": lambda: ("indexer_decode_scores", e(T, HQ, 128, dtype=torch.float8_e4m3fn),
                                          e(T, HQ), e(10, P * 132, dtype=u8), e(T, dtype=i32), e(T, 5, dtype=i32),
                                          0.1, e(T, HQ), P, 1, 300, 2048, True),
        "indexer_prefill": lambda: ("indexer_prefill", e(T, HQ, 128, dtype=bf), e(T, HQ, dtype=bf),
                                    e(10, P * 132, dtype=u8), e(640, dtype=i64), e(T, dtype=i32), e(T, dtype=i32), 64,
                                    0.1, None, P, 0, True, 0),
        "indexer_prefill, float32 weights": lambda: ("indexer_prefill", e(T, HQ, 128, dtype=bf), e(T, HQ),
                                                     e(10, P * 132, dtype=u8), e(640, dtype=i64), e(T, dtype=i32),
                                                     e(T, dtype=i32), 64, 0.1, None, P, 0, True, 0),
        "indexer_prefill_scores": lambda: ("indexer_prefill_scores", e(T, HQ, 128, dtype=bf), e(T, HQ, dtype=bf),
                                           e(10, P * 132, dtype=u8), e(640, dtype=i64), e(T, dtype=i32),
                                           e(T, dtype=i32), 0.1, None, P, 600, 2048, False),
        "topk_merge": lambda: ("topk_merge", e(4, T, 64), e(4, T, 64, dtype=i32), 32),
        "lse_combine": lambda: ("lse_combine", e(2, T, 16, 512), e(2, T, 16)),
        # outputs (and workspaces) given: NAME_out
        "sparse_mla_out": lambda: ("sparse_mla_out", e(T, 16, 576, dtype=bf), e(100, 656, dtype=u8),
                                   e(T, 64, dtype=i32), 0.07, e(T, 16, 512, dtype=bf), e(T, 16), e(T, dtype=i32), None,
                                   e(4096, dtype=u8)),
        "sparse_mla_out, workspace allocated": lambda: ("sparse_mla_out", e(T, 16, 576, dtype=bf),
                                                        e(100, 640, dtype=bf), e(T, 64, dtype=i32), 0.07,
                                                        e(T, 16, 512, dtype=bf), e(T, 16), None, 40),
        "topk_out": lambda: ("topk_out", e(4, 100), 8, e(4, 8, dtype=i32), e(4, dtype=i32), e(4, dtype=i32), None,
                             e(4096, dtype=u8)),
        "indexer_decode_out": lambda: ("indexer_decode_out", e(T, HQ, 128, dtype=torch.float8_e4m3fn), e(T, HQ),
                                       e(10, P * 132, dtype=u8), e(T, dtype=i32), e(T, 5, dtype=i32), 64, 0.1,
                                       e(T, 64, dtype=i32), e(T, dtype=i32), e(T, HQ), P, 1, 0, 0, e(4096, dtype=u8)),
        "indexer_decode_scores_out": lambda: ("indexer_decode_scores_out", e(T, HQ, 128, dtype=torch.float8_e4m3fn),
                                              e(T, HQ), e(10, P * 132, dtype=u8), e(T, dtype=i32),
                                              e(T, 5, dtype=i32), 0.1, e(T, 300), e(T, HQ), P, 1, 300, 2048, True),
        "indexer_prefill_out": lambda: ("indexer_prefill_out", e(T, HQ, 128, dtype=bf), e(T, HQ, dtype=bf),
                                        e(10, P * 132, dtype=u8), e(640, dtype=i64), e(T, dtype=i32),
                                        e(T, dtype=i32), 64, 0.1, e(T, 64, dtype=i32), e(T, dtype=i32), None, P, 0,
                                        True, 0, e(4096, dtype=u8)),
        "indexer_prefill_scores_out": lambda: ("indexer_prefill_scores_out", e(T, HQ, 128, dtype=bf),
                                               e(T, HQ, dtype=bf), e(10, P * 132, dtype=u8), e(640, dtype=i64),
                                               e(T, dtype=i32), e(T, dtype=i32), 0.1, e(T, 600), None, P, 600, 2048,
                                               False),
        "topk_merge_out": lambda: ("topk_merge_out", e(4, T, 64), e(4, T, 64, dtype=i32), 32, e(T, 32, dtype=i32),
                                   e(T, dtype=i32)),
        "lse_combine_out": lambda: ("lse_combine_out", e(2, T, 16, 512), e(2, T, 16), e(T, 16, 512, dtype=bf),
                                    e(T, 16)),
    }


@pytest.fixture
def c_kernels_on_cpu(monkeypatch):
    """torch.ops.dsa_cpu_test.*: every operator's C kernel registered for CPU tensors (with its
    checked twin), libdsa replaced by the C recorder, and dsa's checked path taking CPU tensors as
    device 0's, on stream 0 (the C kernel's stream for CPU tensors)."""
    import dsa.ops as ops
    from dsa import _fast, _lib, _tensors

    if not ops._C_KERNELS:
        pytest.skip("no C kernels here (dsa._fastcall not built, or PyTorch < 2.10)")
    from fake_arrays import CRecorder, op_schema, torch_cpu_view  # noqa: E402

    rec = CRecorder()
    monkeypatch.setattr(_lib, "lib", lambda: rec)
    monkeypatch.setattr(_tensors, "_torch_view", torch_cpu_view)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    monkeypatch.setattr(_fast, "_raw_stream", None)
    _fast.clear()
    global _CPU_TEST_LIB
    if _CPU_TEST_LIB is None:  # once a process: an operator's kernel is registered once
        _CPU_TEST_LIB = torch.library.Library("dsa_cpu_test", "DEF")
        for name in {c()[0] for c in _c_cases().values()}:
            schema = op_schema(name)
            _CPU_TEST_LIB.define(name + schema)
            assert ops.register_c_kernel(_CPU_TEST_LIB, "dsa_cpu_test", "CPU", getattr(ops, name), schema)
    _fast._configured = False  # the extension is given this test's stream getter
    yield rec
    _fast.clear()
    _fast._configured = False


_CPU_TEST_LIB = None


def _masked(op_name, record, args, results):
    """A recorded call's struct with every tensor pointer zeroed, having checked that each is the
    pointer of the argument it stands for (0 for None) or of the returned output; and whether it
    got a workspace, the workspace's size, the stream."""
    import dsa.ops as ops
    from dsa import _fast, _lib

    lay = getattr(ops, op_name).c_layout
    names = [a.name for a in getattr(torch.ops.dsa, op_name).default._schema.arguments]
    atype = _lib._CALLS[lay.site.call][0]
    struct, ws, ws_bytes, stream = record
    b = bytearray(struct)
    outs = results if isinstance(results, tuple) else () if results is None else (results,)
    for i, field in enumerate(lay.site.fields):
        if field in (None, _fast.WORKSPACE):
            continue
        if lay.tensors[i] is None:
            want = outs[lay.site.results.index(i)].data_ptr() if i in lay.site.results else 0
        else:
            x = args[names.index(lay.tensors[i])]
            want = 0 if x is None else x.data_ptr()
        off = _fast._offset(atype, field)
        assert int.from_bytes(b[off:off + 8], "little") == want, f"{op_name}: {field}"
        b[off:off + 8] = bytes(8)
    return bytes(b), ws is not None, ws_bytes, stream


@pytest.mark.parametrize("via", ["torch.ops", "dsa"])
def test_c_kernels_call_c_as_the_checked_path_does(c_kernels_on_cpu, monkeypatch, via):
    """Each operator's first call of a signature runs its checked twin (dsa's checked path, which
    leaves a plan); a later call of it, with new tensors, runs the C kernel, which passes C the
    struct, workspace size and stream the checked path passed (each tensor's pointer its own; each
    new output's the returned tensor's), and returns outputs of the same shapes, strides, dtypes and
    device. Signatures that differ in a tensor or a scalar each get their own plan, and a plan serves
    only its own. via "dsa": the same through the operators' Python functions (dsa's public calls,
    their fast path in dsa._fastcall), whose outputs are then allocated in C++, not by torch.empty."""
    import random

    import dsa.ops as ops
    from dsa import _fast

    rec = c_kernels_on_cpu

    def call(name, args):
        return getattr(torch.ops.dsa_cpu_test, name)(*args) if via == "torch.ops" else getattr(ops, name).fn(*args)

    cases = _c_cases()
    checked = {}
    for case, make in cases.items():
        name, *args = make()
        before = rec.calls
        got = call(name, args)
        assert rec.calls == before + 1, case
        checked[case] = (_masked(name, rec.last_call, args, got), got)
    assert _fast.plan_count() == len(cases)
    empties = []  # torch.empty as the extension calls it, from here on: not at all
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: empties.append(a) or real_empty(*a, **k))
    steals = []  # PyTorch's handles-to-tensors call: not made either (the extension wraps in C)
    real_steal = torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs
    monkeypatch.setattr(torch._C._aoti, "alloc_tensors_by_stealing_from_void_ptrs",
                        lambda h: steals.append(len(h)) or real_steal(h))
    _fast._configured = False
    _fast._configure()
    order = list(cases) * 3
    random.Random(0).shuffle(order)
    blocks = set()
    for case in order:
        name, *args = cases[case]()
        want, got0 = checked[case]
        before = rec.calls
        got = call(name, args)
        assert rec.calls == before + 1, case
        assert _fast.plan_count() == len(cases), f"{case}: the C kernel did not find its plan"
        assert _masked(name, rec.last_call, args, got) == want, case
        outs = got if isinstance(got, tuple) else () if got is None else (got,)
        outs0 = got0 if isinstance(got0, tuple) else () if got0 is None else (got0,)
        assert [(o.shape, o.dtype, o.stride(), o.device) for o in outs] == \
            [(o.shape, o.dtype, o.stride(), o.device) for o in outs0], case
        if via == "dsa" and _one_block(case, rec.last_call, outs):
            blocks.add(case)
            continue
        _workspace_beside_an_output(case, rec.last_call, outs)
    if via == "dsa":  # every call making two or more allocations (of at most 2 MiB) made one
        assert blocks == {c for c in cases if "_out" not in c} - {"index_k_store", "mla_kv_store",
                                                                  "indexer_decode_scores", "indexer_prefill_scores"}, \
            sorted(blocks)
    assert not empties, f"torch.empty called {len(empties)} times"
    assert not steals, f"the Python handles-to-tensors call made {len(steals)} times"
    # no reference to an output kept in C++ (PyTorch would then keep its Python object alive too)
    import gc
    import weakref

    name, *args = cases["sparse_mla"]()
    refs = [weakref.ref(o) for o in call(name, args)]
    gc.collect()
    assert all(r() is None for r in refs), "an output outlives its last reference"


def _one_block(case, record, outs):
    """Whether dsa's own call made its outputs and workspace as one block (what it does where they
    come to at most 2 MiB and are two or more): then every output is a tensor of its own (no _base)
    over one storage, each at a 256-byte boundary, none overlapping another or the workspace, which
    lies in the same storage. False where the call made a single allocation or more than 2 MiB."""
    ws, ws_bytes = record[1], record[2]
    st = {o.untyped_storage().data_ptr() for o in outs}
    made = len(outs) + (ws is not None and any(_in_storage(o, ws) for o in outs))
    if len(st) != 1 or made < 2:
        return False
    spans = [(o.data_ptr(), o.data_ptr() + o.numel() * o.element_size()) for o in outs]
    if ws is not None:
        spans.append((ws, ws + ws_bytes))
    total = sum((b - a + 255) // 256 * 256 for a, b in spans)
    assert total <= 2 << 20, f"{case}: {total} bytes in one block"
    assert all(o._base is None for o in outs), f"{case}: an output is a view"
    assert all(a % 256 == 0 for a, _ in spans), f"{case}: {[hex(a) for a, _ in spans]}"
    assert all(_in_storage(o, a) or a == b for o in outs[:1] for a, b in spans), case
    spans.sort()
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)), f"{case}: overlapping {spans}"
    return True


def _in_storage(o, ptr):
    st = o.untyped_storage()
    return st.data_ptr() <= ptr < st.data_ptr() + st.nbytes()


def _workspace_beside_an_output(case, record, outs):
    """A workspace of at most 2 MiB the C kernel allocated with outputs lies in one output's storage,
    after the output's bytes (one allocation for both), 256-byte aligned, clear of every other output;
    a larger one (which the output would keep while it lives) in none."""
    ws, ws_bytes = record[1], record[2]
    if ws is None or not outs:
        return
    end = lambda o: o.data_ptr() + o.numel() * o.element_size()  # noqa: E731
    def storage(o):  # its storage's first byte and the byte after its last
        st = o.untyped_storage()
        return st.data_ptr(), st.data_ptr() + st.nbytes()

    hosts = [o for o in outs if o.storage_offset() == 0 and end(o) <= ws and ws + ws_bytes <= storage(o)[1]]
    if ws_bytes > 2 << 20:
        assert not any(storage(o)[0] <= ws < storage(o)[1] for o in outs), f"{case}: a large workspace in an output"
        return
    assert ws % 256 == 0, f"{case}: workspace at {ws:#x}"
    assert len(hosts) == 1, f"{case}: the workspace is not in an output's storage after it"
    assert all(end(o) <= ws or o.data_ptr() >= ws + ws_bytes for o in outs if o is not hosts[0]), case


@pytest.mark.parametrize("via", ["torch.ops", "dsa"])
def test_c_kernels_give_a_large_workspace_its_own_block(c_kernels_on_cpu, via):
    """A workspace above 2 MiB is not put in an output's storage (the output would keep it while it
    lives); one of 2 MiB is."""
    import dsa.ops as ops
    from dsa import _fast

    rec = c_kernels_on_cpu
    for ws_bytes in (2 << 20, (2 << 20) + 256):
        rec.ws_bytes = ws_bytes
        _fast.clear()
        for _ in range(2):  # the checked path, then the C kernel through its plan
            name, *args = _c_cases()["sparse_mla"]()
            got = getattr(torch.ops.dsa_cpu_test, name)(*args) if via == "torch.ops" else getattr(ops, name).fn(*args)
        assert rec.last_call[2] == ws_bytes
        _workspace_beside_an_output(f"workspace {ws_bytes}", rec.last_call, got)
        in_out = [o for o in got if o.untyped_storage().data_ptr() <= rec.last_call[1] <
                  o.untyped_storage().data_ptr() + o.untyped_storage().nbytes()]
        assert len(in_out) == (ws_bytes <= 2 << 20), ws_bytes


def test_one_block_edges(c_kernels_on_cpu):
    """dsa's own calls' one block: outputs of two dtypes (sparse_mla's bf16 out and float32 lse) each
    written without touching the other, and a call with no rows (empty outputs) still answered with
    outputs of the right shapes."""
    import dsa.ops as ops

    e, bf, i32, u8 = torch.empty, torch.bfloat16, torch.int32, torch.uint8
    for _ in range(2):  # the checked path, then the plan
        out, lse = ops.sparse_mla.fn(e(3, 16, 576, dtype=bf), e(100, 656, dtype=u8), e(3, 64, dtype=i32), 0.07,
                                     e(3, dtype=i32))
    assert out.untyped_storage().data_ptr() == lse.untyped_storage().data_ptr(), "not one block"
    out.fill_(7.0)
    lse.fill_(-3.0)
    assert bool((out == 7.0).all()) and bool((lse == -3.0).all())
    out.fill_(-1.0)
    assert bool((lse == -3.0).all())
    for _ in range(2):
        idx, lens = ops.topk.fn(e(0, 100), 8, e(0, dtype=i32))
    assert idx.shape == (0, 8) and lens.shape == (0,) and idx.dtype == lens.dtype == i32


def _no_python(*args, **kwargs):
    raise AssertionError("a tensor attribute asked in Python")


def _tensor_attributes_raise(m):
    """Within monkeypatch context m, every torch.Tensor attribute the fast path could ask in Python
    raises."""
    for attr in ("shape", "dtype"):
        m.setattr(torch.Tensor, attr, property(_no_python))
    for attr in ("stride", "get_device", "data_ptr", "size", "dim"):
        m.setattr(torch.Tensor, attr, _no_python)


def test_fast_path_reads_plain_tensors_in_c(c_kernels_on_cpu, monkeypatch):
    """From PyTorch 2.10 dsa's fast path reads each plain torch.Tensor argument in C (shape, strides,
    dtype, device and data pointer, through the at::Tensor the object holds): a planned call asks none
    of them in Python, and C gets the call the checked path gave it. With that turned off the
    attributes answer, to the same effect."""
    import dsa.ops as ops
    from dsa import _fast

    rec = c_kernels_on_cpu
    cases = _c_cases()
    want = {}
    for case, make in cases.items():  # the plans, by the checked path
        name, *args = make()
        got = getattr(ops, name).fn(*args)
        want[case] = _masked(name, rec.last_call, args, got)
    assert _fast.borrow_setup(torch), "the probes did not show the at::Tensor where PyTorch >= 2.10 keeps it"
    for on in (True, False):
        assert _fast.borrow_setup(torch, on) == on
        for case, make in cases.items():
            name, *args = make()
            before = rec.calls
            with monkeypatch.context() as m:
                if on:
                    _tensor_attributes_raise(m)
                got = getattr(ops, name).fn(*args)
            assert rec.calls == before + 1 and _fast.plan_count() == len(cases), (case, on)
            assert _masked(name, rec.last_call, args, got) == want[case], (case, on)
    assert _fast.borrow_setup(torch)
    # probes that are not plain torch.Tensor objects prove nothing: it stays off
    alloc = torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors
    assert not _fast._ext.torch_borrow_setup(torch.Tensor, (torch.nn.Parameter(torch.zeros(2)), torch.zeros(2)), alloc)
    assert not _fast._ext.torch_borrow_setup(torch.Tensor, (torch.zeros(2),), alloc)  # fewer than two
    assert _fast.borrow_setup(torch, False) is False
    assert _fast.borrow_setup(torch)


def test_fast_path_reads_cp_calls_in_c(c_kernels_on_cpu, monkeypatch):
    """The context-parallel calls key their plans by a str scalar (the layout): the fast path keeps
    their C form all the same, so a planned call reads its tensors in C and makes its outputs there
    (until 2026-12-05 the str sent these two calls through Python attributes and torch.empty). Their
    torch.ops have no C kernels: a str has no C value to match a dispatcher's arguments by."""
    import dsa
    from dsa import _fast

    rec = c_kernels_on_cpu
    e, i32 = torch.empty, torch.int32
    calls = {
        "cp_candidates": lambda: dsa.cp_candidates(e(3, 100), e(3, 8, dtype=i32), world_size=2, rank=1,
                                                   layout="blocks", block=50),
        "cp_local_indices": lambda: dsa.cp_local_indices(e(3, 8, dtype=i32), world_size=2, rank=0,
                                                         layout="round_robin", block_table=e(3, 4, dtype=i32),
                                                         page_size=64, num_pages=10, compact=True),
    }
    assert _fast.borrow_setup(torch)
    for name, call in calls.items():
        call()  # the checked path leaves the plan
        first = rec.last_call
        before = rec.calls
        with monkeypatch.context() as m:
            _tensor_attributes_raise(m)
            m.setattr(torch, "empty", _no_python)
            _fast._configured = False  # the extension is given the torch.empty above
            got = call()
        assert rec.calls == before + 1, name
        assert all(isinstance(x, torch.Tensor) and x.dtype in (torch.float32, torch.int32) for x in got), name
        assert len(rec.last_call[0]) == len(first[0]) and rec.last_call[3] == first[3], name
    _fast._configured = False


def test_c_kernels_raise_dsa_messages(c_kernels_on_cpu):
    """A failure raises RuntimeError with dsa's message: the checked path's (a bad argument) and the
    library's (a failed status on a planned call); the operator works again afterwards."""
    rec = c_kernels_on_cpu
    with pytest.raises(RuntimeError, match=r"DsaArgumentError: dsa\.topk: scores must be float32"):
        torch.ops.dsa_cpu_test.topk(torch.empty(4, 100, dtype=torch.int32), 8)
    scores = torch.empty(4, 100)
    torch.ops.dsa_cpu_test.topk(scores, 8)  # the plan
    rec.status = 3
    with pytest.raises(RuntimeError, match=r"dsa_cpu_test::topk: .*recorded failure"):
        torch.ops.dsa_cpu_test.topk(scores, 8)
    rec.status = 0
    i, n = torch.ops.dsa_cpu_test.topk(scores, 8)
    assert (i.shape, n.shape) == ((4, 8), (4,))
    with pytest.raises(dsa.DsaArgumentError, match=r"dsa\.topk: scores must be float32"):  # the twin, called as is
        torch.ops.dsa_cpu_test._checked_topk(torch.empty(4, 100, dtype=torch.int32), 8)
    with pytest.raises(RuntimeError, match=r"DsaArgumentError: dsa\.topk: scores must be float32"):  # nothing stale
        torch.ops.dsa_cpu_test.topk(torch.empty(4, 100, dtype=torch.int32), 8)
    i, n = torch.ops.dsa_cpu_test.topk(scores, 8)
    assert (i.shape, n.shape) == ((4, 8), (4,))


def test_c_kernels_under_threads_and_evictions(c_kernels_on_cpu):
    """Four threads calling operators of 40 topk signatures (more than a site keeps: plans evicted
    while others run) and sparse_mla's, while the plans are cleared now and then: every call returns
    outputs of its own signature's shapes, and nothing fails."""
    import random
    import threading

    from dsa import _fast

    sc = torch.empty(4, 100)
    q, kv, idx = torch.empty(3, 16, 576, dtype=torch.bfloat16), torch.empty(100, 656, dtype=torch.uint8), \
        torch.empty(3, 64, dtype=torch.int32)
    errors = []

    def work(seed):
        r = random.Random(seed)
        try:
            for _ in range(400):
                if r.random() < 0.7:
                    k = r.randint(1, 40)
                    i, n = torch.ops.dsa_cpu_test.topk(sc, k)
                    assert i.shape == (4, k) and n.shape == (4,), (k, i.shape)
                else:
                    o, lse = torch.ops.dsa_cpu_test.sparse_mla(q, kv, idx, r.choice((0.1, 0.2)), None, 64)
                    assert o.shape == (3, 16, 512) and lse.shape == (3, 16)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for _ in range(20):
        _fast.clear()
        threading.Event().wait(0.005)
    for t in threads:
        t.join()
    assert not errors, errors[:3]


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


@needs_gpu
def test_compiled_out_step_matches_the_allocating_step_and_replays_in_a_cuda_graph():
    """The step with outputs given (NAME_out), compiled with fullgraph=True: the allocating step's
    answer bit for bit, in the given buffers; then captured in a CUDA graph and replayed."""
    g = torch.Generator(device="cuda").manual_seed(2)
    x = _real_decode_inputs(4, 5000, g)
    x_ref = {k: v.clone() for k, v in x.items()}
    out, lse, idx, lens = _step(x_ref)
    o = _decode_outputs(x)
    for t in o.values():
        t.fill_(-7)
    torch._dynamo.reset()
    step_c = torch.compile(_step_out, fullgraph=True)
    step_c(x, o)
    torch.cuda.synchronize()
    for a, b in zip((o["out"], o["lse"], o["idx"], o["lens"]), (out, lse, idx, lens)):
        assert torch.equal(a, b)
    assert torch.equal(x["kv_cache"], x_ref["kv_cache"])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step_c(x, o)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step_c(x, o)
    for t in o.values():
        t.fill_(-7)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip((o["out"], o["lse"], o["idx"], o["lens"]), (out, lse, idx, lens)):
        assert torch.equal(a, b)


@needs_gpu
def test_operators_repeat_their_first_call_on_the_gpu():
    """The decode step's operators called again with the same signature (their C kernels' plans, where
    dsa has C kernels; else their Python functions): outputs and cache writes bit for bit those of the
    first call (which ran the checked path), and no signature planned twice (a planned call that
    missed its plan would plan it again)."""
    from dsa import _fast

    g = torch.Generator(device="cuda").manual_seed(1)
    x = _real_decode_inputs(3, 3000, g)
    xs = [{k: v.clone() for k, v in x.items()} for _ in range(3)]
    _fast.clear()
    first = _step(xs[0])
    plans = _fast.plan_count()
    for xr in xs[1:]:
        got = _step(xr)
        torch.cuda.synchronize()
        for a, b in zip(got, first):
            assert torch.equal(a, b)
        assert torch.equal(xr["kv_cache"], xs[0]["kv_cache"])
        assert torch.equal(xr["index_k_cache"], xs[0]["index_k_cache"])
    assert _fast.plan_count() == plans
