"""torch.ops.dsa's host part a call on the CPU-only machine, against torch.ops.aten.add.Tensor and torch.add
(CPU tensors, the library's C functions a no-op): as registered (V=plain) and with an AutogradCPU fallthrough
(V=ft). Run from the repository root after a build (the log beside this file):

    V=plain NOOP=build/dev-cudart-noop/libcudart.so.13 LD_LIBRARY_PATH=build/dev-cudart-noop \
        DSA_LIBRARY=build/libdsa.so DSA_FASTCALL=build/_fastcall.abi3.so PYTHONPATH=python:python/tests \
        python3 docs/bench/host-call-cost-cpu-2026-12-06/torch_ops_variants.py
"""
import sys, os, time, ctypes
sys.argv=[sys.argv[0]]
sys.path.insert(0, "dev")
import host_call_cost as H
import torch
import dsa, dsa.ops as ops
from dsa import _fast, _tensors, _lib
from fake_arrays import torch_cpu_view, op_schema

rt = ctypes.CDLL(os.environ["NOOP"])
noop4 = ctypes.cast(rt.dsa_noop_call, ctypes.c_void_p).value
class NoopLib:
    def __getattr__(self, name):
        if name in _lib._WS_QUERIES:
            proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_lib._WS_QUERIES[name]), ctypes.POINTER(ctypes.c_size_t))
            return proto(lambda args, out: out.__setitem__(0, 4096) or 0)
        atype, takes_ws = _lib._CALLS[name]
        extra = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p) if takes_ws else (ctypes.c_void_p,)
        return ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(atype), *extra)(noop4)
_lib.lib = NoopLib
_tensors._torch_view = torch_cpu_view
torch._C._cuda_getCurrentRawStream = lambda index: 0
_fast._raw_stream, _fast._configured = None, False
S,P,K,H_=8192,64,2048,16
PAGES=S//P
q = torch.empty(1, H_, 576, dtype=torch.bfloat16)
kv = torch.empty(PAGES, P, 656, dtype=torch.uint8)
idx, lens = torch.empty(1, K, dtype=torch.int32), torch.empty(1, dtype=torch.int32)
sc = torch.empty(1, S)
kvr, slot = torch.empty(1, 576, dtype=torch.bfloat16), torch.empty(1, dtype=torch.int64)
a,b=torch.randn(16),torch.randn(16)
variant=os.environ.get("V","plain")
lib = torch.library.Library("dsa_x", "DEF")
for name in ("sparse_mla", "topk", "mla_kv_store"):
    schema = op_schema(name)
    lib.define(name + schema)
    assert ops.register_c_kernel(lib, "dsa_x", "CPU", getattr(ops, name), schema)
    if variant=="ft":
        lib.impl(name, torch.library.fallthrough_kernel, "AutogradCPU")
o=torch.ops.dsa_x
rows = {"sparse_mla": lambda: o.sparse_mla.default(q,kv,idx, 0.1, lens),
        "topk": lambda: o.topk.default(sc, K),
        "mla_kv_store": lambda: o.mla_kv_store.default(kvr,slot,kv),
        "aten.add.Tensor": lambda: torch.ops.aten.add.Tensor(a,b),
        "torch.add": lambda: torch.add(a,b)}
print(op_schema("sparse_mla"))
for n,c in rows.items():
    _fast.clear(); c()
    print(f"{variant} {n:20s} {H.best_us(c, 50000):.2f}")
