"""Stand-ins for dsa's Python package on a machine without a GPU (test_cpu.py, test_ops.py,
dev/host_call_cost.py). Fake speaks __cuda_array_interface__ and FakeTorch looks like a torch.Tensor:
arrays that exist only as descriptions, never dereferenced, each with a new 4 GiB-aligned pointer
from one counter. CRecorder stands for libdsa: C functions that record what they are passed.
torch_cpu_view and op_schema run torch.ops.dsa's C kernels on CPU tensors."""

import ctypes

from dsa import _lib, _tensors


class Fake:
    """A device array that exists only as a description (never dereferenced)."""

    _next = 1 << 32

    def __init__(self, shape, typestr, strides=None, ptr=None):
        if ptr is None:
            ptr = Fake._next
            Fake._next += 1 << 32
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, False),
            "strides": strides,
            "version": 3,
        }


F32, I32, I64, U8 = "<f4", "<i4", "<i8", "|u1"


class _FakeDevice:
    def __init__(self, kind, index=0):
        self.type, self.index = kind, index

    def __str__(self):
        return f"{self.type}:{self.index}"


class FakeTorch:
    """Looks like a torch.Tensor to dsa (module 'torch': data_ptr, dtype, stride, device, is_cuda,
    get_device, is_contiguous): lets bf16 arguments be faked without PyTorch. Never dereferenced."""

    def __init__(self, shape, dtype="bfloat16", strides=None, device="cuda", index=0):
        self.shape = tuple(shape)
        self.dtype = f"torch.{dtype}"
        if strides is None:
            strides, acc = [], 1
            for n in reversed(self.shape):
                strides.append(acc)
                acc *= n
            strides = tuple(reversed(strides))
        self._strides = tuple(strides)
        self._ptr = Fake._next
        Fake._next += 1 << 32
        self.device = _FakeDevice(device, index)

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def get_device(self):
        return self.device.index if self.is_cuda else -1

    def is_contiguous(self):  # torch's rule (strides of size-1 dims do not matter), as dsa's View has it
        return _tensors.View(0, self.shape, self._strides, "bf16", "", None).is_contiguous()

    def record_stream(self, stream):  # what the caching allocator is told (_fake_torch_module's streams)
        self.recorded = getattr(self, "recorded", ()) + (stream,)


FakeTorch.__module__ = "torch"


class CRecorder:
    """libdsa's calls replaced by C-callable functions made with ctypes (CFUNCTYPE thunks, which
    dsa._fastcall calls as it calls the library's), with the library's argument types: each keeps the
    last call's struct bytes, workspace and stream; the workspace queries answer `ws_bytes` (4096); a
    call fails with `status` when it is set."""

    def __init__(self):
        self.fns = {}
        self.calls = 0
        self.last_call = None
        self.status = 0
        self.ws_bytes = 4096

    def __getattr__(self, name):
        if name.startswith("__") or name in ("fns", "calls", "last_call", "status", "ws_bytes"):
            raise AttributeError(name)
        if name not in self.fns:
            if name in _lib._CALLS:
                atype, takes_ws = _lib._CALLS[name]
                extra = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p) if takes_ws else (ctypes.c_void_p,)
                proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(atype), *extra)

                def record(args, *rest, size=ctypes.sizeof(atype), takes_ws=takes_ws):
                    ws, wb, st = rest if takes_ws else (None, 0, rest[0])
                    self.last_call = (ctypes.string_at(ctypes.addressof(args.contents), size), ws, wb, st)
                    self.calls += 1
                    return self.status

                f = proto(record)
            elif name in _lib._WS_QUERIES:
                proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_lib._WS_QUERIES[name]),
                                         ctypes.POINTER(ctypes.c_size_t))

                def query(args, out):
                    out[0] = self.ws_bytes
                    return 0

                f = proto(query)
            elif name == "dsa_last_error":
                f = lambda: b"recorded failure"  # noqa: E731
            else:
                raise AttributeError(name)
            self.fns[name] = f
        return self.fns[name]

    def last(self):
        return (self.calls,) + self.last_call


# ---- torch.ops.dsa's C kernels on CPU tensors (test_ops.py, dev/host_call_cost.py) ----


def torch_cpu_view(x):
    """dsa's View of a CPU torch tensor as device 0's: put in place of _tensors._torch_view, dsa's
    checked path takes CPU tensors (the operators' C kernels registered for CPU run on them)."""
    return _tensors.View(x.data_ptr(), tuple(x.shape), x.stride(), _tensors._TORCH_DTYPES[str(x.dtype)], "torch", 0,
                         x, x, x.is_contiguous())


def op_schema(name):
    """torch.ops.dsa.NAME's schema from its "(" on: the operator defined again in another namespace."""
    import torch

    schema = str(getattr(torch.ops.dsa, name).default._schema)
    return schema[schema.index("("):]
