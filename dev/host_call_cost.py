"""What dsa's calls cost on the host apart from the CUDA runtime, and which runtime calls each makes
— on a machine without a GPU (issue 23: the floor under the Python binding).

Runs libdsa (built with the shared CUDA runtime) over dev/cudart_noop.c, a libcudart.so.13 that does
nothing and counts. For each public call at the shapes of dev/python_overhead.py (decode, 8k): the
C function's own host time (checks, plan, kernel choice; less a no-op C function called the same
way through ctypes), and the runtime calls of its second call (launches, memsets, occupancy
queries, function attributes set). With PyTorch importable, also the fast path's Python part per
call (dsa/_fast.py, each implementation) on real CPU tensors, the C function replaced by the no-op:
what a call costs before its C function. From the build directory's parent:

    LD_LIBRARY_PATH=build/dev-cudart-noop DSA_LIBRARY=build/libdsa.so \\
        DSA_FASTCALL=build/_fastcall.abi3.so PYTHONPATH=python python3 dev/host_call_cost.py

With --check (CTest's dsa.host_runtime_calls): no timing; exits 1 unless every repeated call makes
no occupancy query and sets no function attribute (what is asked once per kernel stays asked once)
and at most two launches and memsets in all.
"""

import ctypes
import os
import pathlib
import subprocess
import sys
import time

import dsa
from dsa import _fast, _lib

N = 100000
S, P, K, HI, H = 8192, 64, 2048, 32, 16  # 8k context, 64-key pages, topk, index heads, heads
PAGES = S // P


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python" / "tests"))
from fake_arrays import FakeTorch, op_schema, torch_cpu_view  # noqa: E402  (the tests' stand-ins)


def t(shape, dtype="bfloat16"):
    return FakeTorch(shape, dtype)


CALLS = {
    "sparse_mla, 1 x 16 heads, FP8": lambda: dsa.sparse_mla(
        t((1, H, 576)), t((PAGES, P, 656), "uint8"), t((1, K), "int32"), lens=t((1,), "int32"), softmax_scale=0.1,
        out=t((1, H, 512)), workspace=t((1 << 24,), "uint8"), stream=0),
    "indexer_decode, 8k": lambda: dsa.indexer_decode(
        t((1, HI, 128), "float8_e4m3fn"), t((1, HI), "float32"), t((PAGES, P * 132), "uint8"), t((1,), "int32"),
        t((1, PAGES), "int32"), topk=K, softmax_scale=0.1, q_scale=t((1, HI), "float32"),
        topk_indices=t((1, K), "int32"), topk_lens=t((1,), "int32"), workspace=t((1 << 24,), "uint8"), stream=0),
    "indexer_prefill, 1 x 8k": lambda: dsa.indexer_prefill(
        t((1, HI, 128), "float8_e4m3fn"), t((1, HI), "float32"), t((PAGES, P * 132), "uint8"), t((S,), "int64"),
        t((1,), "int32"), t((1,), "int32"), topk=K, softmax_scale=0.1, q_scale=t((1, HI), "float32"),
        topk_indices=t((1, K), "int32"), topk_lens=t((1,), "int32"), workspace=t((1 << 24,), "uint8"), stream=0),
    "topk, 1 x 8k": lambda: dsa.topk(t((1, S), "float32"), topk=K, indices=t((1, K), "int32"),
                                     lens=t((1,), "int32"), workspace=t((1 << 24,), "uint8"), stream=0),
    "mla_kv_store": lambda: dsa.mla_kv_store(t((1, 576)), t((1,), "int64"), t((PAGES, P, 656), "uint8"), stream=0),
    "index_k_store": lambda: dsa.index_k_store(t((1, 128)), t((1,), "int64"), t((PAGES, P * 132), "uint8"), stream=0),
}
COUNTERS = ("launches", "memsets", "occupancy queries", "attributes set")


def best_us(fn, n=N):
    for _ in range(n // 100):
        fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def python_part(noop_path):
    """The fast path's Python part per call on real CPU tensors, the C function a no-op (a process of
    its own: PyTorch cannot load over the no-op runtime)."""
    try:
        import torch
    except ImportError:
        print("(no PyTorch: the fast path's Python part is not timed)")
        return

    rt = ctypes.CDLL(noop_path)  # by path: the no-op C function alone
    noop4 = ctypes.cast(rt.dsa_noop_call, ctypes.c_void_p).value

    class NoopLib:  # the library's functions, each the no-op with the library's argument types
        def __getattr__(self, name):
            if name in _lib._WS_QUERIES:  # the checked path's workspace queries (torch.ops): 4096 bytes
                proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_lib._WS_QUERIES[name]),
                                         ctypes.POINTER(ctypes.c_size_t))
                return proto(lambda args, out: out.__setitem__(0, 4096) or 0)
            atype, takes_ws = _lib._CALLS[name]
            extra = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p) if takes_ws else (ctypes.c_void_p,)
            return ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(atype), *extra)(noop4)

    class Like:  # what remember needs of the checked path's View
        framework, device = "torch", -1

        def __init__(self, obj):
            self.obj = obj

    real_lib, _lib.lib = _lib.lib, NoopLib
    q = torch.empty(1, H, 576, dtype=torch.bfloat16)
    kv = torch.empty(PAGES, P, 656, dtype=torch.uint8)
    idx, lens = torch.empty(1, K, dtype=torch.int32), torch.empty(1, dtype=torch.int32)
    out = torch.empty(1, H, 512, dtype=torch.bfloat16)
    sc = torch.empty(1, S)
    kvr, slot = torch.empty(1, 576, dtype=torch.bfloat16), torch.empty(1, dtype=torch.int64)
    a, b = torch.randn(16), torch.randn(16)
    rows = {
        "sparse_mla, outputs given": (dsa._SPARSE_MLA, (q, kv, idx, lens, out, None, None), (0.1, None, False),
                                      _lib.SparseMlaArgs, {},
                                      lambda: dsa.sparse_mla(q, kv, idx, lens=lens, softmax_scale=0.1, out=out,
                                                             stream=0)),
        "sparse_mla, out allocated": (dsa._SPARSE_MLA, (q, kv, idx, lens, None, None, None), (0.1, None, False),
                                      _lib.SparseMlaArgs, {4: ((1, H, 512), "bf16")},
                                      lambda: dsa.sparse_mla(q, kv, idx, lens=lens, softmax_scale=0.1, stream=0)),
        "topk, outputs given": (dsa._TOPK, (sc, None, idx, lens, None), (K, None), _lib.TopkArgs, {},
                                lambda: dsa.topk(sc, topk=K, indices=idx, lens=lens, stream=0)),
        "mla_kv_store": (dsa._MLA_KV_STORE, (kvr, slot, kv), (), _lib.MlaKvStoreArgs, {},
                         lambda: dsa.mla_kv_store(kvr, slot, kv, stream=0)),
    }
    # the extension reading tensors in C (PyTorch >= 2.10), the extension asking their Python attributes,
    # the Python implementation
    impls = [("python", None, None)]
    if _fast._ext is not None:
        _fast._configure()
        impls[:0] = ([("fastcall", _fast._ext, True), ("fc-attrs", _fast._ext, False)] if _fast.torch_abi()
                     else [("fastcall", _fast._ext, None)])
    base = best_us(lambda: torch.add(a, b), N // 2)
    print(f"\nfast path, Python part a call (real CPU tensors, C a no-op; torch.add on 16 CPU floats {base:.2f} us):")
    ext = _fast._ext
    for impl, mod, in_c in impls:
        _fast._ext = mod
        if in_c is not None:
            assert _fast.borrow_setup(torch, in_c) == in_c
        for name, (site, tensors, scalars, atype, allocs, call) in rows.items():
            _fast.clear()
            _fast.remember(site, tensors, scalars, atype(), Like(tensors[0]), allocs)
            assert call() is not None or site is dsa._MLA_KV_STORE
            print(f"  {impl:9s} {name:28s} {best_us(call, N // 2):6.2f} us")
    _fast._ext = ext
    if ext is not None and _fast.torch_abi():
        _fast.borrow_setup(torch)
    _fast.clear()
    torch_ops_part(torch, (q, kv, idx, lens), sc, (kvr, slot, kv), base)
    _lib.lib = real_lib


def torch_ops_part(torch, mla, scores, store, base):
    """torch.ops.dsa's host cost a call (outputs allocated, as the operators do), C a no-op: each
    operator registered for CPU tensors in a namespace of this script's, with its C kernel
    (python/ext/torch_op.c) and with its Python function as the kernel (what PyTorch < 2.10 or
    DSA_TORCH_OPS=python gets)."""
    import dsa.ops as ops
    from dsa import _tensors

    if not ops._C_KERNELS:
        print("(no C kernels for torch.ops here: dsa._fastcall not built, or PyTorch < 2.10)")
        return
    _tensors._torch_view = torch_cpu_view  # CPU tensors as device 0's
    torch._C._cuda_getCurrentRawStream = lambda index: 0
    _fast._raw_stream, _fast._configured = None, False  # the extension asks the stream of this getter
    libs = {"c": torch.library.Library("dsa_cost_c", "DEF"), "py": torch.library.Library("dsa_cost_py", "DEF")}
    for name in ("sparse_mla", "topk", "mla_kv_store"):
        schema = op_schema(name)
        for lib in libs.values():
            lib.define(name + schema)
        assert ops.register_c_kernel(libs["c"], "dsa_cost_c", "CPU", getattr(ops, name), schema)
        libs["py"].impl(name, getattr(ops, name).fn, "CPU")
    a, b = torch.randn(16), torch.randn(16)
    entry = best_us(lambda: torch.ops.aten.add.Tensor(a, b), N // 2)  # any operator's entry through torch.ops
    print(f"\ntorch.ops.dsa, host part a call (CPU tensors, C a no-op, outputs allocated; torch.add {base:.2f} us, "
          f"torch.ops.aten.add.Tensor {entry:.2f}):")
    for ns in ("dsa_cost_c", "dsa_cost_py"):
        o = getattr(torch.ops, ns)
        rows = {"sparse_mla": lambda: o.sparse_mla.default(*mla[:3], 0.1, mla[3]),
                "topk": lambda: o.topk.default(scores, K),
                "mla_kv_store": lambda: o.mla_kv_store.default(*store)}
        for name, call in rows.items():
            _fast.clear()
            call()  # the checked path, leaving the plan
            kernel = "C kernel" if ns == "dsa_cost_c" else "Python kernel"
            print(f"  {kernel:13s} {name:24s} {best_us(call, N // 2):6.2f} us")


def main(check=False):
    rt = ctypes.CDLL("libcudart.so.13")
    if not hasattr(rt, "dsa_noop_counts"):
        sys.exit("host_call_cost: libcudart.so.13 is not dev/cudart_noop.c's: put build/dev-cudart-noop first on "
                 "LD_LIBRARY_PATH (and DSA_LIBRARY at a libdsa built with the shared runtime)")
    counts = (ctypes.c_long * 5)()
    rt.dsa_noop_call.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    print(f"dsa {dsa.version()} over a no-op CUDA runtime: each call's own host time (less a no-op C call through "
          f"ctypes), and the runtime calls of a repeated call")
    ext, _fast._ext = _fast._ext, None  # plans readable from Python
    bad = []
    for name, make in CALLS.items():
        _fast.clear()
        make()
        (p,) = _fast._plans.values()
        a = p.fn.argtypes[0]._type_.from_buffer_copy(p.args)
        noop = ctypes.CFUNCTYPE(ctypes.c_int, *p.fn.argtypes)(ctypes.cast(rt.dsa_noop_call, ctypes.c_void_p).value)
        args = (ctypes.byref(a), 1 << 40, 1 << 24, None) if len(p.fn.argtypes) == 4 else (ctypes.byref(a), None)
        assert p.fn(*args) == 0, dsa._lib.lib().dsa_last_error()
        rt.dsa_noop_counts(counts)
        before = list(counts)
        p.fn(*args)
        rt.dsa_noop_counts(counts)
        made = ", ".join(f"{c - b} {what}" for what, b, c in zip(COUNTERS, before, counts) if c - b)
        d = [c - b for b, c in zip(before, counts)]
        if d[2] or d[3] or d[0] + d[1] > 2:
            bad.append(f"{name}: {made}")
        own = 0.0 if check else best_us(lambda: p.fn(*args)) - best_us(lambda: noop(*args))
        print(f"  {name:32s} {own:6.3f} us   {made}")
    _fast._ext = ext
    _fast.clear()
    if check:
        for b in bad:
            print("host_call_cost --check: a repeated call's runtime calls:", b)
        sys.exit(1 if bad else 0)
    noop_path = next(str(d / "libcudart.so.13") for d in map(pathlib.Path, os.environ["LD_LIBRARY_PATH"].split(":"))
                     if (d / "libcudart.so.13").exists())
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    sys.stdout.flush()
    subprocess.run([sys.executable, __file__, "--python", noop_path], env=env, check=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--python"]:
        python_part(sys.argv[2])
    else:
        main(check=sys.argv[1:2] == ["--check"])
