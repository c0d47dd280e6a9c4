"""Device arrays from any framework, as (pointer, shape, strides, dtype): PyTorch tensors directly,
then anything with ``__cuda_array_interface__`` (CuPy, Numba), then anything with ``__dlpack__``
(JAX and the rest). Nothing here imports a framework; outputs and workspaces are allocated through
the framework of the inputs (PyTorch's caching allocator for PyTorch tensors), never cudaMalloc.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

# dtype names used throughout: "bf16", "f32", "i32", "i64", "u8", "fp8" (e4m3fn)
_TORCH_DTYPES = {
    "torch.bfloat16": "bf16",
    "torch.float32": "f32",
    "torch.int32": "i32",
    "torch.int64": "i64",
    "torch.uint8": "u8",
    "torch.float8_e4m3fn": "fp8",
}
_CAI_DTYPES = {"<f4": "f32", "<i4": "i32", "<i8": "i64", "|u1": "u8", "<u1": "u8"}
_ITEMSIZE = {"bf16": 2, "f32": 4, "i32": 4, "i64": 8, "u8": 1, "fp8": 1}
_DTYPE_NAMES = {
    "bf16": "bfloat16",
    "f32": "float32",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "fp8": "float8_e4m3fn",
}


class DsaArgumentError(ValueError):
    """An argument with the wrong dtype, shape, device or layout (caught before the C call)."""


@dataclass
class View:
    """A device array: data pointer, shape, strides in elements, dtype name."""

    ptr: int
    shape: tuple
    strides: tuple
    dtype: str
    framework: str  # "torch", "cupy", "cai", "dlpack"
    device: Optional[int]  # CUDA ordinal when known
    obj: Any = field(repr=False, default=None)  # the array itself (allocation reference)
    keep: Any = field(repr=False, default=None)  # what must stay alive during the call
    contiguous: Optional[bool] = field(repr=False, default=None)  # known already (PyTorch's own answer)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype, 1)

    @property
    def nbytes_span(self) -> int:
        """Bytes from the first to one past the last element (0 for an empty array)."""
        if any(s == 0 for s in self.shape):
            return 0
        last = sum((n - 1) * st for n, st in zip(self.shape, self.strides))
        return (last + 1) * self.itemsize

    def is_contiguous(self) -> bool:
        if self.contiguous is not None:
            return self.contiguous
        expect = 1
        for n, st in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and st != expect:
                return False
            expect *= n
        return True


def dtype_name(d: str) -> str:
    return _DTYPE_NAMES.get(d, d)


_torch_dtype_of: dict = {}  # torch dtype object -> name, filled as dtypes are met (str(dtype) once each)


def _torch_view(x: Any) -> View:
    if not x.is_cuda:
        raise DsaArgumentError(f"is on device '{x.device}', not a CUDA device")
    d = x.dtype
    dt = _torch_dtype_of.get(d)
    if dt is None:
        dt = _TORCH_DTYPES.get(str(d))
        if dt is None:
            raise DsaArgumentError(f"has dtype {d}, which dsa does not take")
        _torch_dtype_of[d] = dt
    return View(x.data_ptr(), tuple(x.shape), x.stride(), dt, "torch", x.get_device(), x, x, x.is_contiguous())


def _cai_view(x: Any, cai: dict) -> View:
    ts = cai["typestr"]
    dt = _CAI_DTYPES.get(ts)
    if dt not in _ITEMSIZE:
        raise DsaArgumentError(f"has element type '{ts}', which dsa does not take through __cuda_array_interface__")
    shape = tuple(int(n) for n in cai["shape"])
    isz = _ITEMSIZE[dt]
    if cai.get("strides") is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        strides = tuple(reversed(strides))
    else:
        bs = tuple(int(s) for s in cai["strides"])
        if any(s % isz for s in bs):
            raise DsaArgumentError("has byte strides that are not a multiple of its element size")
        strides = tuple(s // isz for s in bs)
    fw = "cupy" if type(x).__module__.split(".")[0] == "cupy" else "cai"
    return View(int(cai["data"][0]), shape, strides, dt, fw, None, x, x)


# ---- DLPack (legacy "dltensor" capsules) ----


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DL_CUDA, _DL_CUDA_MANAGED = 2, 13
_DL_DTYPES = {(0, 32): "i32", (0, 64): "i64", (1, 8): "u8", (2, 32): "f32", (4, 16): "bf16", (10, 8): "fp8"}


def _dlpack_view(x: Any) -> View:
    capsule = x.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    ptr = get(capsule, b"dltensor")
    t = _DLTensor.from_address(ptr)  # DLManagedTensor starts with its DLTensor
    if t.device.device_type not in (_DL_CUDA, _DL_CUDA_MANAGED):
        raise DsaArgumentError(f"is not in CUDA memory (DLPack device type {t.device.device_type})")
    dt = _DL_DTYPES.get((t.dtype.code, t.dtype.bits))
    if dt is None or t.dtype.lanes != 1:
        raise DsaArgumentError(f"has DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits), which dsa does not take")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        strides = tuple(reversed(strides))
    return View(int(t.data or 0) + int(t.byte_offset), shape, strides, dt, "dlpack", int(t.device.device_id), x,
                (x, capsule))


def view(x: Any, fn: str, name: str) -> View:
    """A View of argument `name` of call `fn`, or DsaArgumentError naming both."""
    try:
        mod = type(x).__module__.split(".")[0]
        if mod == "torch" and hasattr(x, "data_ptr"):
            return _torch_view(x)
        cai = getattr(x, "__cuda_array_interface__", None)
        if cai is not None:
            return _cai_view(x, cai)
        if hasattr(x, "__dlpack__"):
            return _dlpack_view(x)
    except DsaArgumentError as e:
        raise DsaArgumentError(f"{fn}: {name} {e}") from None
    raise DsaArgumentError(
        f"{fn}: {name} must be a CUDA array (a PyTorch tensor, or an object with __cuda_array_interface__ "
        f"or __dlpack__), got {type(x).__name__}"
    )


def describe(v: View) -> str:
    return f"{dtype_name(v.dtype)} {list(v.shape)}"


def torch_current_stream(device: Optional[int]) -> int:
    """PyTorch's current stream on `device` (None: the current device), as a handle."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the handle, no Stream object made
    if raw is not None:
        return int(raw(torch.cuda.current_device() if device is None else device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def stream_handle(stream: Any) -> int:
    """A stream the caller passed: torch.cuda.Stream, cupy.cuda.Stream, or a handle."""
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        return int(stream.cuda_stream)
    if hasattr(stream, "ptr"):  # cupy.cuda.Stream
        return int(stream.ptr)
    return int(stream)


def torch_keep_for_stream(buf: Any, s: int) -> None:
    """A buffer PyTorch's caching allocator gave on the current stream but used on stream s: the
    allocator is told, so the block is not handed out again before that stream's work is done."""
    torch = sys.modules["torch"]
    buf.record_stream(torch.cuda.ExternalStream(s, device=buf.device))


def current_stream(views: Sequence[View], device: Optional[int]) -> int:
    """The stream the inputs' framework is working on: PyTorch's or CuPy's current stream, else 0."""
    fws = {v.framework for v in views}
    if "torch" in fws and "torch" in sys.modules:
        return torch_current_stream(device)
    if "cupy" in fws and "cupy" in sys.modules:
        return int(sys.modules["cupy"].cuda.get_current_stream().ptr)
    return 0


_TORCH_ALLOC = {"bf16": "bfloat16", "f32": "float32", "i32": "int32", "i64": "int64", "u8": "uint8"}
_CUPY_ALLOC = {"f32": "float32", "i32": "int32", "i64": "int64", "u8": "uint8"}


def empty(like: View, shape: tuple, dtype: str, fn: str, name: str) -> Any:
    """A new array of the inputs' framework, on their device."""
    if like.framework == "torch" and "torch" in sys.modules:
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=getattr(torch, _TORCH_ALLOC[dtype]), device=like.obj.device)
    if like.framework == "cupy" and "cupy" in sys.modules and dtype in _CUPY_ALLOC:
        return sys.modules["cupy"].empty(shape, dtype=_CUPY_ALLOC[dtype])
    raise DsaArgumentError(
        f"{fn}: cannot allocate {name} for {like.framework} arrays: pass {name}= (a CUDA array of "
        f"{dtype_name(dtype)} {list(shape)})"
    )
