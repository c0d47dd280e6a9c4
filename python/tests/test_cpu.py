"""The Python package without a GPU: import, version, the ctypes mirror of dsa.h, and every argument
error path. Arrays here are fake: objects with a __cuda_array_interface__ pointing nowhere; no call
below gets past validation, except the one run in a subprocess with every device hidden."""

import ctypes
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import dsa
from dsa import _lib

REPO = pathlib.Path(__file__).resolve().parents[2]


# the fake arrays (a sibling module: on sys.path whatever pytest's import mode)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fake_arrays import F32, I32, I64, U8, CRecorder, Fake, FakeTorch  # noqa: E402


def test_import_needs_no_torch():
    code = "import sys, dsa; assert 'torch' not in sys.modules, 'dsa imported torch'; print(dsa.__all__[0])"
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())


def test_version_matches_header():
    h = (REPO / "include" / "dsa.h").read_text()
    parts = [re.search(rf"#define DSA_VERSION_{k} (\d+)", h).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    assert dsa.version() == ".".join(parts)


def test_ctypes_structs_match_the_c_compiler():
    dump = os.environ.get("DSA_ABI_DUMP")
    if not dump:
        pytest.skip("DSA_ABI_DUMP is not set (CTest sets it to the built tests/support/abi_dump.c)")
    lines = subprocess.run([dump], check=True, capture_output=True, text=True).stdout.splitlines()
    checked = 0
    for rec in map(json.loads, lines):
        cls = _lib.C_NAMES[rec["struct"]]
        if "size" in rec:
            assert ctypes.sizeof(cls) == rec["size"], rec
        else:
            assert getattr(cls, rec["field"]).offset == rec["offset"], rec
        checked += 1
    assert checked > 70


# ---- argument errors caught in Python, naming the argument ----

def mla_args(**over):
    a = dict(
        q=Fake((2, 16, 576), "<u2"),  # not a dtype dsa takes through the interface: replaced below
        kv_cache=Fake((1000, 656), U8),
        indices=Fake((2, 2048), I32),
        softmax_scale=0.0625,
        out=Fake((2, 16, 512), "<u2"),
        workspace=Fake((1 << 20,), U8),
    )
    a.update(over)
    return a


def test_not_an_array():
    with pytest.raises(dsa.DsaArgumentError, match=r"dsa.topk: scores must be a CUDA array"):
        dsa.topk([1.0, 2.0], topk=1)


def test_dtype_unsupported_through_the_interface():
    # bf16 has no __cuda_array_interface__ type string: such arrays come through PyTorch or DLPack.
    with pytest.raises(dsa.DsaArgumentError, match=r"dsa.sparse_mla: q has element type '<u2'"):
        dsa.sparse_mla(**mla_args())


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(scores=Fake((4, 100), I32)), r"dsa.topk: scores must be float32 \[\*, \*\], got int32 \[4, 100\]"),
        (dict(scores=Fake((4, 100, 2), F32)), r"scores must be float32 \[\*, \*\], got float32 \[4, 100, 2\]"),
        (dict(scores=Fake((4, 100), F32), row_lens=Fake((3,), I32)), r"row_lens must be int32 \[4\], got int32 \[3\]"),
        (dict(scores=Fake((4, 100), F32), row_lens=Fake((4,), I64)), r"row_lens must be int32 \[4\]"),
        (dict(scores=Fake((4, 100), F32, strides=(4, 8))), r"scores rows must be contiguous"),
        (dict(scores=Fake((4, 100), F32), max_len=101), r"max_len = 101 exceeds the 100 columns"),
        (dict(scores=Fake((4, 100), F32), indices=Fake((4, 7), I32)), r"indices must be int32 \[4, 8\]"),
        (dict(scores=Fake((4, 100), F32), indices=Fake((4, 8), I32)), r"cannot allocate lens for cai arrays: pass lens="),
    ],
)
def test_topk_argument_errors(kwargs, needle):
    with pytest.raises(dsa.DsaArgumentError, match=needle):
        dsa.topk(topk=8, **kwargs)


def test_index_k_cache_shape_errors():
    q = Fake((1, 32, 128), U8)
    w = Fake((1, 32), F32)
    qs = Fake((1, 32), F32)
    common = dict(seq_lens=Fake((1,), I32), block_table=Fake((1, 8), I32), topk=64, softmax_scale=0.1, q_scale=qs)
    with pytest.raises(dsa.DsaArgumentError, match=r"index_k_cache holds 1000 bytes, not a whole number of 8448-byte pages"):
        dsa.indexer_decode(q, w, Fake((1000,), U8), **common)
    with pytest.raises(dsa.DsaArgumentError, match=r"index_k_cache's first dimension \(2\) must be its page count \(4\)"):
        dsa.indexer_decode(q, w, Fake((2, 2 * 8448), U8), **common)
    with pytest.raises(dsa.DsaArgumentError, match=r"q_scale is required with FP8 q"):
        dsa.indexer_decode(q, w, Fake((4, 8448), U8), **{**common, "q_scale": None})
    with pytest.raises(dsa.DsaArgumentError, match=r"dsa.indexer_decode: weights must be float32 or bfloat16 \[1, 32\]"):
        dsa.indexer_decode(q, Fake((1, 16), F32), Fake((4, 8448), U8), **common)
    with pytest.raises(dsa.DsaArgumentError, match=r"block_table must be int32 \[1, \*\]"):
        dsa.indexer_decode(q, w, Fake((4, 8448), U8), **{**common, "block_table": Fake((2, 8), I32)})
    with pytest.raises(dsa.DsaArgumentError, match=r"q must be bfloat16 or float8_e4m3fn or uint8 \[2, \*, 128\]"):
        dsa.indexer_decode(q, w, Fake((4, 8448), U8), **{**common, "q_len_per_req": 2})


def test_attention_and_store_errors():
    q = FakeTorch((2, 16, 576))
    idx = Fake((2, 64), I32)
    with pytest.raises(dsa.DsaArgumentError, match=r"q must be bfloat16 \[\*, \*, 576\], got uint8"):
        dsa.sparse_mla(Fake((2, 16, 576), U8), Fake((10, 656), U8), idx, softmax_scale=0.1)
    with pytest.raises(dsa.DsaArgumentError, match=r"q is on device 'cpu:0', not a CUDA device"):
        dsa.sparse_mla(FakeTorch((2, 16, 576), device="cpu"), Fake((10, 656), U8), idx, softmax_scale=0.1)
    with pytest.raises(dsa.DsaArgumentError, match=r"q must be contiguous"):
        dsa.sparse_mla(FakeTorch((2, 16, 576), strides=(16 * 600, 600, 1)), Fake((10, 656), U8), idx, softmax_scale=0.1)
    with pytest.raises(dsa.DsaArgumentError, match=r"kv_cache as packed FP8 must be contiguous uint8 \[..., 656\]"):
        dsa.sparse_mla(q, Fake((10, 650), U8), idx, softmax_scale=0.1)
    with pytest.raises(dsa.DsaArgumentError, match=r"kv_cache as bf16 must be \[..., >= 576\]"):
        dsa.sparse_mla(q, FakeTorch((10, 512)), idx, softmax_scale=0.1)
    with pytest.raises(dsa.DsaArgumentError, match=r"indices must be int32 \[2, \*\]"):
        dsa.sparse_mla(q, Fake((10, 656), U8), Fake((3, 64), I32), softmax_scale=0.1)
    with pytest.raises(dsa.DsaArgumentError, match=r"topk = 65 exceeds the 64 columns of indices"):
        dsa.sparse_mla(q, Fake((10, 656), U8), idx, softmax_scale=0.1, topk=65)
    with pytest.raises(dsa.DsaArgumentError, match=r"lse must be float32 \[2, 16\]"):
        dsa.sparse_mla(q, Fake((10, 656), U8), idx, softmax_scale=0.1, out=FakeTorch((2, 16, 512)), lse=Fake((2,), F32))
    with pytest.raises(dsa.DsaArgumentError, match=r"dsa.mla_kv_store: slot_mapping must be int64 \[2\]"):
        dsa.mla_kv_store(FakeTorch((2, 576)), Fake((2,), I32), Fake((10, 656), U8))
    with pytest.raises(dsa.DsaArgumentError, match=r"dsa.index_k_store: k must be bfloat16 \[\*, 128\]"):
        dsa.index_k_store(FakeTorch((2, 576)), Fake((2,), I64), Fake((1, 8448), U8))
    # A C-level check behind the Python ones: the attention's out must be 16-byte aligned.
    with pytest.raises(dsa.DsaError) as e:
        out = FakeTorch((2, 16, 512))
        out._ptr += 8
        # stream=0: with PyTorch imported (test_ops.py) a FakeTorch would ask it for the current stream
        dsa.sparse_mla(q, Fake((10, 656), U8), idx, softmax_scale=0.1, out=out, workspace=Fake((1 << 24,), U8),
                       stream=0)
    assert e.value.status == _lib.DSA_ERR_MISALIGNED and "out" in e.value.message


# ---- errors from the C library: status and message ----

def topk_call(**over):
    a = dict(scores=Fake((4, 100), F32), topk=8, indices=Fake((4, 8), I32), lens=Fake((4,), I32),
             workspace=Fake((1 << 24,), U8))
    a.update(over)
    return a


def test_c_invalid_value():
    with pytest.raises(dsa.DsaError) as e:
        dsa.topk(**topk_call(topk=0, indices=Fake((4, 0), I32)))
    assert e.value.status == _lib.DSA_ERR_INVALID_VALUE and e.value.status_name == "DSA_ERR_INVALID_VALUE"
    assert "dsa_topk" in e.value.message and "topk = 0" in e.value.message


def test_c_misaligned():
    bad = Fake((4,), I32, ptr=(1 << 40) + 2)
    with pytest.raises(dsa.DsaError, match=r"DSA_ERR_MISALIGNED: dsa_topk: lens = 0x[0-9a-f]+ must be 4-byte aligned"):
        dsa.topk(**topk_call(lens=bad))


def test_c_workspace_too_small():
    with pytest.raises(dsa.DsaError) as e:
        dsa.topk(**topk_call(workspace=Fake((1000,), U8)))
    assert e.value.status == _lib.DSA_ERR_WORKSPACE_TOO_SMALL and "workspace_bytes = 1000" in e.value.message


def test_workspace_size_queries():
    assert dsa.topk_workspace_size(Fake((4, 100), F32), topk=8) > 0
    q = Fake((3, 32, 128), U8)
    n = dsa.indexer_decode_workspace_size(q, Fake((3, 32), F32), Fake((10, 8448), U8), Fake((3,), I32),
                                          Fake((3, 40), I32), topk=2048, softmax_scale=0.1, q_scale=Fake((3, 32), F32))
    assert n > 0  # 40 pages x 64 > 2048: scores are needed


def test_valid_call_without_a_device():
    """A valid call on a machine where no device is visible reports DSA_ERR_NO_DEVICE (run in a
    subprocess with CUDA_VISIBLE_DEVICES="" so that it cannot launch even on a GPU machine)."""
    code = (
        "import dsa, sys\n"
        "sys.path.insert(0, %r)\n"
        "from test_cpu import Fake, topk_call\n"
        "try:\n"
        "    dsa.topk(**topk_call())\n"
        "except dsa.DsaError as e:\n"
        "    assert e.status == 7, e\n"
        "    print('no device:', e.message)\n"
        "else:\n"
        "    raise SystemExit('a valid call succeeded with no device visible')\n" % str(pathlib.Path(__file__).parent)
    )
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no device: dsa_topk" in r.stdout


# ---- context parallelism's pieces ----

def test_cp_argument_errors():
    with pytest.raises(dsa.DsaArgumentError, match=r"dsa.topk_merge: cand_ids must be int32 \[2, 3, 64\]"):
        dsa.topk_merge(Fake((2, 3, 64), F32), Fake((2, 3, 32), I32), topk=64)
    with pytest.raises(dsa.DsaArgumentError, match=r"dsa.lse_combine: lses must be float32 \[2, 3, 16\]"):
        dsa.lse_combine(Fake((2, 3, 16, 512), F32), Fake((2, 3, 8), F32))
    with pytest.raises(dsa.DsaArgumentError, match=r"layout must be 'round_robin' or 'blocks'"):
        dsa.cp_candidates(Fake((3, 100), F32), Fake((3, 64), I32), world_size=2, rank=0, layout="rr")
    with pytest.raises(dsa.DsaArgumentError, match=r"give block_table \(decode\) or workspace_slots \(prefill\)"):
        dsa.cp_local_indices(Fake((3, 64), I32), world_size=2, rank=1)


def test_cp_c_checks():
    with pytest.raises(dsa.DsaError, match=r"DSA_ERR_INVALID_VALUE: dsa_cp_candidates: shard.rank = 2"):
        dsa.cp_candidates(Fake((3, 100), F32), Fake((3, 64), I32), world_size=2, rank=2,
                          cand_scores=Fake((3, 64), F32), cand_ids=Fake((3, 64), I32))
    with pytest.raises(dsa.DsaError, match=r"dsa_topk_merge: num_lists = 9, k_in = 2048"):
        dsa.topk_merge(Fake((9, 3, 2048), F32), Fake((9, 3, 2048), I32), topk=2048, indices=Fake((3, 2048), I32),
                       lens=Fake((3,), I32))
    with pytest.raises(dsa.DsaError, match=r"dsa_lse_combine: num_parts = 9"):
        dsa.lse_combine(Fake((9, 3, 16, 512), F32), Fake((9, 3, 16), F32), out=FakeTorch((3, 16, 512)),
                        lse=Fake((3, 16), F32), stream=0)


# ---- the fast path for repeated calls with PyTorch tensors (dsa/_fast.py) ----

def _fast_cases(given=True):
    """Each public call that has a fast path, with FakeTorch arguments of one signature (new
    pointers each time it is called); outputs and workspace given, or (given=False) left to the
    call to allocate (through a stand-in torch module: _fake_torch_module) on the current stream."""
    def t(shape, dtype, strides=None):
        return FakeTorch(shape, dtype, strides)

    def o(shape, dtype, strides=None):
        return FakeTorch(shape, dtype, strides) if given else None

    s = 0 if given else None
    T, H, P = 3, 32, 64
    return {
        "topk": lambda: dsa.topk(t((4, 100), "float32"), topk=8, row_lens=t((4,), "int32"),
                                 indices=o((4, 8), "int32"), lens=o((4,), "int32"),
                                 workspace=o((8192,), "uint8"), stream=s),
        "topk, strided rows, max_len": lambda: dsa.topk(t((4, 100), "float32", (128, 1)), topk=8, max_len=90,
                                                        indices=o((4, 8), "int32"), lens=o((4,), "int32"),
                                                        workspace=o((8192,), "uint8"), stream=s),
        "sparse_mla, lse": lambda: dsa.sparse_mla(t((T, 16, 576), "bfloat16"), t((100, 656), "uint8"),
                                                  t((T, 64), "int32"), softmax_scale=0.07, lens=o((T,), "int32"),
                                                  out=o((T, 16, 512), "bfloat16"), lse=o((T, 16), "float32"),
                                                  workspace=o((8192,), "uint8"), stream=s),
        "sparse_mla, bf16 KV": lambda: dsa.sparse_mla(t((T, 16, 576), "bfloat16"), t((100, 640), "bfloat16"),
                                                      t((T, 64), "int32"), softmax_scale=0.07, topk=40,
                                                      out=o((T, 16, 512), "bfloat16"),
                                                      workspace=o((8192,), "uint8"), stream=s),
        "index_k_store": lambda: dsa.index_k_store(t((T, 128), "bfloat16"), t((T,), "int64"),
                                                   t((4, P * 132), "uint8"), page_size=P, stream=s),
        "mla_kv_store": lambda: dsa.mla_kv_store(t((T, 576), "bfloat16"), t((T,), "int64"), t((50, 656), "uint8"),
                                                 stream=s),
        "indexer_decode": lambda: dsa.indexer_decode(
            t((T, H, 128), "float8_e4m3fn"), t((T, H), "float32"), t((10, P * 132), "uint8"), t((T,), "int32"),
            t((T, 5), "int32"), topk=64, softmax_scale=0.1, q_scale=t((T, H), "float32"), page_size=P,
            topk_indices=o((T, 64), "int32"), topk_lens=o((T,), "int32"), workspace=o((8192,), "uint8"),
            stream=s),
        "indexer_prefill": lambda: dsa.indexer_prefill(
            t((T, H, 128), "bfloat16"), t((T, H), "bfloat16"), t((10, P * 132), "uint8"), t((640,), "int64"),
            t((T,), "int32"), t((T,), "int32"), topk=64, softmax_scale=0.1, page_size=P,
            output_global_slots=True, topk_indices=o((T, 64), "int32"), topk_lens=o((T,), "int32"),
            workspace=o((8192,), "uint8"), stream=s),
        "indexer_decode_scores": lambda: dsa.indexer_decode_scores(
            t((T, H, 128), "float8_e4m3fn"), t((T, H), "float32"), t((10, P * 132), "uint8"), t((T,), "int32"),
            t((T, 5), "int32"), softmax_scale=0.1, q_scale=t((T, H), "float32"), page_size=P, max_seq_len=300,
            skip_short_rows=True, scores=o((T, 300), "float32"), stream=s),
        "indexer_prefill_scores, strided scores": lambda: dsa.indexer_prefill_scores(
            t((T, H, 128), "bfloat16"), t((T, H), "bfloat16"), t((10, P * 132), "uint8"), t((640,), "int64"),
            t((T,), "int32"), t((T,), "int32"), softmax_scale=0.1, page_size=P, max_rows=600,
            scores=o((T, 600), "float32", (700, 1)), stream=s),
        "cp_candidates": lambda: dsa.cp_candidates(
            t((T, 500), "float32"), t((T, 64), "int32"), world_size=4, rank=1, layout="blocks", block=1000,
            max_len=400, row_offsets=t((T,), "int32"), cand_scores=o((T, 64), "float32"),
            cand_ids=o((T, 64), "int32"), stream=s),
        "topk_merge": lambda: dsa.topk_merge(t((4, T, 64), "float32"), t((4, T, 64), "int32"), topk=32,
                                             indices=o((T, 32), "int32"), lens=o((T,), "int32"), stream=s),
        "cp_local_indices, decode": lambda: dsa.cp_local_indices(
            t((T, 64), "int32"), world_size=2, rank=1, block_table=t((T, 5), "int32"), page_size=P, num_pages=10,
            out_slots=o((T, 64), "int32"), stream=s),
        "cp_local_indices, prefill, compact": lambda: dsa.cp_local_indices(
            t((T, 64), "int32"), world_size=2, rank=0, layout="blocks", block=300,
            workspace_slots=t((640,), "int64"), compact=True, out_slots=o((T, 64), "int32"),
            out_lens=o((T,), "int32"), stream=s),
        "lse_combine": lambda: dsa.lse_combine(t((2, T, 16, 512), "float32"), t((2, T, 16), "float32"),
                                               out=o((T, 16, 512), "bfloat16"), lse=o((T, 16), "float32"),
                                               stream=s),
    }


def _fake_torch_module():
    """Enough of a torch module for the calls to allocate FakeTorch outputs and ask for the current
    stream (0x5000) through it."""
    import types

    m = types.ModuleType("torch")
    m.Tensor = FakeTorch
    for name in ("bfloat16", "float32", "int32", "int64", "uint8"):
        setattr(m, name, name)
    m.made = []  # every tensor allocated through it

    def empty(shape, dtype, device):
        m.made.append(FakeTorch(shape, dtype, index=device.index))
        return m.made[-1]

    m.empty = empty
    m._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0x5000 + index)
    m.cuda = types.SimpleNamespace(current_device=lambda: 0, ExternalStream=lambda handle, device: ("stream", handle))
    return m


class _FakeStream:
    """A torch.cuda.Stream as dsa reads one: its handle."""

    cuda_stream = 0x7000


@pytest.fixture(params=["fastcall", "python"])
def c_recorder(request, monkeypatch):
    """The C recorder in place of libdsa, a stand-in torch module, and the fast path of one
    implementation: dsa._fastcall (skipped where it is not built) or dsa/_fast.py's Python."""
    from dsa import _fast

    if request.param == "fastcall" and _fast._ext is None:
        pytest.skip("dsa._fastcall is not built here (DSA_FASTCALL names a built one)")
    if request.param == "python":
        monkeypatch.setattr(_fast, "_ext", None)
    rec = CRecorder()
    monkeypatch.setattr(_lib, "lib", lambda: rec)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch_module())
    monkeypatch.setattr(_fast, "_raw_stream", None)
    _fast.clear()
    _fast._configured = False
    yield rec
    _fast.clear()
    _fast._configured = False  # the extension was given the stand-in's torch.empty: the next plan gives it again


@pytest.mark.parametrize("given", [True, False], ids=["given", "allocated"])
@pytest.mark.parametrize("case", sorted(_fast_cases()))
def test_fast_path_calls_c_as_the_checked_path_does(c_recorder, case, given):
    """As test_fast_path_passes_c_what_the_checked_path_does, through a C function (what the
    extension calls) and with outputs and workspace given or allocated: a plan left by the first
    call, then the struct bytes, workspace and stream C receives through it equal the checked
    path's for the same tensors, and the call returns what the checked path returns."""
    from dsa import _fast

    rec = c_recorder
    make = _fast_cases(given)[case]
    make()  # checked path, leaves the plan
    assert _fast.plan_count() == 1, "no plan was left"
    n0 = rec.last()[0]
    state = Fake._next
    got_fast = make()  # through the plan
    fast = rec.last()
    assert fast[0] == n0 + 1, "the plan did not call C"
    Fake._next = state  # the same pointers again (the allocations too: made in the same order)
    _fast.clear()
    got_slow = make()  # checked
    slow = rec.last()
    assert fast[1:] == slow[1:], "argument structs, workspace or stream differ"
    ptrs = lambda r: None if r is None else tuple(x.data_ptr() for x in r) if isinstance(r, tuple) else r.data_ptr()
    assert ptrs(got_fast) == ptrs(got_slow)
    if not given:
        assert fast[4] == 0x5000, "not the current stream"


def test_fast_path_on_a_stream_passed_records_its_workspace(c_recorder):
    """stream= a Stream object: the plan passes its handle to C, and the workspace it allocated (on
    the current stream) is recorded on that stream, as the checked path does."""
    from dsa import _fast

    rec = c_recorder
    call = lambda: dsa.topk(FakeTorch((4, 100), "float32"), topk=8, stream=_FakeStream())  # noqa: E731
    got = [call(), None]
    assert _fast.plan_count() == 1
    first = rec.last()
    got[1] = call()  # through the plan
    fast = rec.last()
    assert fast[0] == first[0] + 1 and fast[4] == first[4] == 0x7000
    assert fast[3] == first[3] == 4096  # the workspace bytes the query answered
    # the workspaces (not returned: found by the pointer C received), each recorded on the stream
    made = {x.data_ptr(): x for x in sys.modules["torch"].made}
    for ws in (first[2], fast[2]):
        assert getattr(made[ws], "recorded", None) == (("stream", 0x7000),)


def test_fast_path_tells_signatures_apart(c_recorder):
    """Calls that differ from a base call in one thing each — a stride, a dtype, a shape, a scalar, an
    optional argument given or not, the device, outputs given or allocated — each with a plan, then
    called in random order among all those plans: C receives, every time, what the checked path
    passes for the same tensors (so no plan serves a signature it was not made for)."""
    import random

    from dsa import _fast

    rec = c_recorder

    def topk(cols=100, extra=0, k=8, max_len=None, row_lens=False, dev=0, given=True):
        def make():
            t = lambda shape, dtype, strides=None: FakeTorch(shape, dtype, strides, index=dev)  # noqa: E731
            return dsa.topk(t((4, cols), "float32", (cols + extra, 1)), topk=k, max_len=max_len,
                            row_lens=t((4,), "int32") if row_lens else None,
                            indices=t((4, k), "int32") if given else None, lens=t((4,), "int32") if given else None,
                            workspace=t((8192,), "uint8") if given else None, stream=None)
        return make

    def mla(H=16, kv="fp8", k=None, want_lse=False, lens=False, dev=0, given=True):
        def make():
            t = lambda shape, dtype="bfloat16", strides=None: FakeTorch(shape, dtype, strides, index=dev)  # noqa: E731
            cache = {"fp8": lambda: t((100, 656), "uint8"), "bf16": lambda: t((100, 576)),
                     "bf16 strided": lambda: t((100, 576), "bfloat16", (640, 1))}[kv]()
            return dsa.sparse_mla(t((3, H, 576)), cache, t((3, 64), "int32"), softmax_scale=0.07, topk=k,
                                  lens=t((3,), "int32") if lens else None, out=t((3, H, 512)) if given else None,
                                  lse=t((3, H), "float32") if given and want_lse else None, return_lse=want_lse,
                                  workspace=t((8192,), "uint8") if given else None, stream=None)
        return make

    calls = [topk(), topk(extra=28), topk(cols=120), topk(k=16), topk(max_len=90), topk(row_lens=True), topk(dev=1),
             topk(given=False), mla(), mla(H=64), mla(kv="bf16"), mla(kv="bf16 strided"), mla(k=40),
             mla(want_lse=True), mla(lens=True), mla(dev=1), mla(given=False), mla(want_lse=True, given=False)]
    for make in calls:
        make()
    assert _fast.plan_count() == len(calls), "two of these calls shared a plan"
    rng = random.Random(20261205)
    seen = []  # (call, pointer and allocation state before it, what C got)
    for _ in range(200):
        make = rng.choice(calls)
        state, made = Fake._next, len(sys.modules["torch"].made)
        make()
        seen.append((make, state, made, rec.last()[1:]))
    assert _fast.plan_count() == len(calls), "a repeated signature made a new plan"
    for make, state, made, got in seen:  # each again through the checked path, with the same pointers
        _fast.clear()
        Fake._next = state
        del sys.modules["torch"].made[made:]
        make()
        assert rec.last()[1:] == got, "a plan passed C what the checked path does not"


def test_fast_path_failure_raises_dsa_error(c_recorder):
    """A C call that fails through the plan raises DsaError with its status and the library's
    message, as the checked path does."""
    rec = c_recorder
    make = _fast_cases()["sparse_mla, lse"]
    make()  # the plan
    rec.status = _lib.DSA_ERR_MISALIGNED
    with pytest.raises(dsa.DsaError, match="recorded failure") as e:
        make()
    assert e.value.status == _lib.DSA_ERR_MISALIGNED


def test_fast_path_is_keyed_by_signature(c_recorder):
    from dsa import _fast

    ws = FakeTorch((8192,), "uint8")
    for rows in (4, 5, 4):
        dsa.topk(FakeTorch((rows, 100), "float32"), topk=8, indices=FakeTorch((rows, 8), "int32"),
                 lens=FakeTorch((rows,), "int32"), workspace=ws, stream=0)
    assert _fast.plan_count() == 2
    # a signature the checked path rejects leaves no plan, and is rejected again
    for _ in range(2):
        with pytest.raises(dsa.DsaArgumentError):
            dsa.topk(FakeTorch((4, 100), "int32"), topk=8, indices=FakeTorch((4, 8), "int32"),
                     lens=FakeTorch((4,), "int32"), workspace=ws, stream=0)
    assert _fast.plan_count() == 2
    # a non-PyTorch argument takes the checked path (no plan)
    dsa.topk(Fake((4, 100), F32), topk=8, indices=Fake((4, 8), I32), lens=Fake((4,), I32),
             workspace=Fake((8192,), U8), stream=0)
    assert _fast.plan_count() == 2
