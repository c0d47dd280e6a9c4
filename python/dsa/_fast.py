"""Repeated calls with PyTorch tensors, at a fraction of the checked path's host cost.

A call's checks depend only on its arguments' signature — each tensor's type, shape, strides, dtype
and device, and the scalars — so the first call of a signature runs the checked path
(dsa/__init__.py) and leaves a plan: its C argument struct, where each tensor's pointer goes in it,
what to allocate when an output (or the workspace) is not given, and the C function. A later call
with the same signature copies the struct, writes every pointer from its own tensors, allocates
what it must and calls C. The C library still checks what depends on the pointers (alignment,
workspace size) on every call. Only plain ``torch.Tensor`` arguments (and None) take this path;
anything else, or a signature not seen before, takes the checked one.

Two implementations of the same plans: the extension module ``dsa._fastcall`` (python/ext/
fastcall.c: signatures compared and pointers written in C, the C function called without ctypes),
built into the wheel; and this module's Python, where the extension is absent (a source tree whose
Python had no headers to build it) or turned off (DSA_FASTCALL=0). test_cpu.py checks, call by call
and for both, that the struct C receives is the same byte for byte as the checked path's.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
from typing import Any, Optional

from . import _lib
from ._tensors import _TORCH_ALLOC, stream_handle, torch_current_stream, torch_keep_for_stream

WORKSPACE = "<workspace>"  # a Site field: the argument is the call's workspace (passed beside the struct)
_MAX_PLANS = 1024  # signatures kept by the Python implementation (prefill chunks of many sizes would grow it)
_plans: dict = {}
_sites: list = []
_fail: Any = None  # dsa._raise: raises DsaError for a failed status (set by dsa/__init__.py)


class Site:
    """One public call's layout: its C function, and for each tensor argument (in the order the call
    passes them) the struct field its pointer goes to ("a.b" for a nested struct, WORKSPACE, or None
    for none); results: the arguments the call returns (given or allocated), by position."""

    __slots__ = ("index", "call", "fields", "results")

    def __init__(self, call: str, fields: tuple, results: tuple = ()):
        self.call, self.fields, self.results = call, fields, results
        self.index = len(_sites)
        _sites.append(self)


class Plan:
    """The Python implementation's plan (the extension keeps its own copy of the same parts)."""

    __slots__ = ("site", "args", "offsets", "allocs", "ws_bytes", "need", "device_index", "fn", "ptr_words",
                 "alloc_list", "ws_pos")


def _offset(atype: type, path: str) -> int:
    off = 0
    for name in path.split("."):
        field = getattr(atype, name)
        off += field.offset
        atype = dict(atype._fields_)[name]
    return off


def key(site: Site, tensors: tuple, scalars: tuple) -> Optional[tuple]:
    """The signature of a call, or None when an argument is not a plain PyTorch tensor (or None)."""
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)
    parts = []
    try:
        for x in tensors:
            if x is None:
                parts.append(None)
            elif type(x) is tensor or (type(x).__module__ == "torch" and hasattr(x, "data_ptr")):
                # torch.Tensor itself (the first test: the common case's cost); subclasses such as
                # Parameter and fake or functional tensors are not of module "torch": the checked path
                parts.append((x.shape, x.stride(), x.dtype, x.get_device()))
            else:
                return None
    except (AttributeError, TypeError, RuntimeError):  # not a tensor after all: the checked path says why
        return None
    return (site.index, tuple(parts), scalars)


def call(site: Site, tensors: tuple, scalars: tuple, stream: Any) -> Optional[tuple]:
    """The call through its plan, returning the site's results; None when no plan has its signature."""
    if _ext is not None:
        r = _ext.call(site.index, tensors, scalars, stream)
        if r is not None:
            return r
    if not _plans:
        return None
    k = key(site, tensors, scalars)
    p = None if k is None else _plans.get(k)
    return None if p is None else _run(p, tensors, stream)


def remember(site: Site, tensors: tuple, scalars: tuple, args: ctypes.Structure, like: Any, allocs: Optional[dict] = None,
             need: int = 0, skip: tuple = ()) -> None:
    """Keeps the plan of a call that passed the checked path, made with `tensors` (the call's own
    arguments, None where an output was left to allocate). like: the View of an input tensor (its
    device); allocs: {position: (shape, dtype name)} of the outputs the call allocates when not
    given; need: the workspace bytes it allocates when none is given; skip: positions whose pointer
    the checked path did not write for these arguments."""
    if like.framework != "torch":
        return
    k = key(site, tensors, scalars)
    if k is None:
        return
    torch = sys.modules.get("torch")  # imported where anything is to be allocated (the checked path allocated it)
    p = Plan()
    p.site = site
    p.args = bytes(args)
    p.offsets = tuple(-1 if f is None or i in skip else -2 if f == WORKSPACE else _offset(type(args), f)
                      for i, f in enumerate(site.fields))
    device = getattr(like.obj, "device", None)
    p.allocs = [None] * len(tensors)
    for i, (shape, dtype) in (allocs or {}).items():
        if tensors[i] is None:
            p.allocs[i] = ((tuple(shape),), {"dtype": getattr(torch, _TORCH_ALLOC[dtype]), "device": device})
    p.ws_bytes, p.need = 0, need
    if WORKSPACE in site.fields:
        w = site.fields.index(WORKSPACE)
        if tensors[w] is not None:
            from ._tensors import view

            p.ws_bytes = view(tensors[w], "", "workspace").nbytes_span
        elif need:
            p.allocs[w] = (((need,),), {"dtype": torch.uint8, "device": device})
    p.allocs = tuple(p.allocs)
    p.device_index = like.device
    p.fn = getattr(_lib.lib(), site.call)
    if _ext is not None:
        _configure()
        sig = tuple(None if x is None else (type(x),) + s for x, s in zip(tensors, k[1]))
        if _ext.remember(site.index, (sig, scalars, p.offsets, p.allocs, site.results, p.args,
                                      ctypes.cast(p.fn, ctypes.c_void_p).value, WORKSPACE in site.fields, p.ws_bytes,
                                      need, p.device_index)):
            return
    # what _run walks: (position, 8-byte word) of each pointer field, (position, shape, kwargs) of each
    # allocation, the workspace's position
    assert all(off % 8 == 0 for off in p.offsets if off >= 0), "a pointer field off its 8-byte alignment"
    p.ptr_words = tuple((i, off // 8) for i, off in enumerate(p.offsets) if off >= 0)
    p.alloc_list = tuple((i, a[0][0], a[1]) for i, a in enumerate(p.allocs) if a is not None)
    p.ws_pos = site.fields.index(WORKSPACE) if WORKSPACE in site.fields else -1
    if len(_plans) >= _MAX_PLANS:
        _plans.clear()
    _plans[k] = p


def clear() -> None:
    _plans.clear()
    if _ext is not None:
        _ext.clear()


def plan_count() -> int:
    return len(_plans) + (_ext.count() if _ext is not None else 0)


_raw_stream: Any = None  # torch._C._cuda_getCurrentRawStream, looked up once (False: this PyTorch lacks it)


def raw_stream_getter() -> Any:
    """torch._C._cuda_getCurrentRawStream (device index -> handle), or False where PyTorch lacks it."""
    global _raw_stream
    if _raw_stream is None:
        _raw_stream = getattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream", False)
    return _raw_stream


def current_stream(device_index: int) -> int:
    raw = raw_stream_getter()
    return raw(device_index) if raw else torch_current_stream(device_index)


def _run(p: Plan, tensors: tuple, stream: Any) -> tuple:
    ws_new = None
    if p.alloc_list:
        tensors = list(tensors)
        empty = sys.modules["torch"].empty
        for i, shape, kw in p.alloc_list:
            tensors[i] = empty(shape, **kw)
        if p.ws_pos >= 0 and p.allocs[p.ws_pos] is not None:
            ws_new = tensors[p.ws_pos]
    a = bytearray(p.args)
    words = memoryview(a).cast("Q")  # every pointer field is 8-byte aligned (_offset's struct layouts)
    for i, w in p.ptr_words:
        x = tensors[i]
        words[w] = 0 if x is None else x.data_ptr()
    words.release()
    s = current_stream(p.device_index) if stream is None else stream_handle(stream)
    ref = _as_struct(p, a)
    if p.ws_pos >= 0:
        x = tensors[p.ws_pos]
        wp = 0 if x is None else x.data_ptr()
        status = p.fn(ref, wp or None, p.need if ws_new is not None else p.ws_bytes, s or None)
    else:
        status = p.fn(ref, s or None)
    if status != _lib.DSA_OK:
        _fail(status)
    if ws_new is not None and stream is not None:
        torch_keep_for_stream(ws_new, s)
    return tuple(tensors[i] for i in p.site.results)


def _as_struct(p: Plan, a: bytearray) -> Any:
    """The struct bytes as the C function's first argument."""
    return ctypes.byref(p.fn.argtypes[0]._type_.from_buffer(a))


# ---- the extension ---------------------------------------------------------------------------------


def _load_ext() -> Any:
    """dsa._fastcall where built (the wheel; DSA_FASTCALL names a built one for a source tree), else
    None. DSA_FASTCALL=0 turns it off."""
    where = os.environ.get("DSA_FASTCALL")
    if where == "0":
        return None
    if where:
        loader = importlib.machinery.ExtensionFileLoader("dsa._fastcall", where)
        spec = importlib.util.spec_from_file_location("dsa._fastcall", where, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod
    try:
        from . import _fastcall  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _fastcall


_ext = _load_ext()
_configured: Any = False  # torch.empty as last given to the extension (None: PyTorch was not imported then)
_torch_abi: Optional[bool] = None  # whether the extension reaches PyTorch's stable C ABI (None: not yet known)


def torch_abi() -> bool:
    """Whether the extension can use PyTorch's stable C ABI here: a real PyTorch >= 2.10 imported, its
    libraries found (python/ext/torch_op.c). Then torch.ops.dsa's kernels are C (dsa/ops.py) and the
    fast path's outputs are allocated in C++."""
    global _torch_abi
    if _torch_abi is None:
        torch = sys.modules.get("torch")
        if _ext is None or torch is None or not getattr(torch, "__file__", None):
            return False  # not known yet: PyTorch may be imported later (or is a test's stand-in)
        try:
            major, minor = (int(x) for x in torch.__version__.split(".")[:2])
        except (AttributeError, ValueError):
            major, minor = 0, 0
        _torch_abi = False
        if (major, minor) >= (2, 10):
            lib = os.path.join(os.path.dirname(torch.__file__), "lib")
            cuda = os.path.join(lib, "libtorch_cuda.so")
            _torch_abi = bool(_ext.torch_setup(os.path.join(lib, "libtorch_cpu.so"),
                                               cuda if os.path.exists(cuda) else None))
    return _torch_abi


def _configure() -> None:
    """Gives the extension what it calls back: the stream getters, record_stream, the error raiser,
    torch.empty (once PyTorch is imported), and where the stable C ABI serves, PyTorch's function that
    takes C++ tensors into Python (the extension then allocates outputs in C++)."""
    global _configured
    torch = sys.modules.get("torch")
    empty = getattr(torch, "empty", None)
    if _configured is False or (_configured is None and empty is not None):
        raw = empty is not None and raw_stream_getter()
        steal = None
        if empty is not None and torch_abi():  # takes a list of handles and deletes them (the singular form copies)
            aoti = getattr(getattr(torch, "_C", None), "_aoti", None)
            steal = getattr(aoti, "alloc_tensors_by_stealing_from_void_ptrs", None)
            borrow_setup(torch)
        _ext.configure(raw or current_stream, stream_handle, torch_keep_for_stream, lambda status: _fail(status), empty,
                       steal)
        _configured = empty


def borrow_setup(torch: Any, on: bool = True) -> bool:
    """Lets the extension read plain torch.Tensor arguments in C (their shape, strides, dtype, device
    and data pointer through the at::Tensor each holds: python/ext/torch_op.c, fc_torch_borrowed_sig)
    once probe tensors show where it lies; on=False turns that off. Whether it is on."""
    if not on:
        return bool(_ext.torch_borrow_setup(None, (), None))
    alloc = getattr(getattr(getattr(torch, "_C", None), "_aoti", None), "unsafe_alloc_void_ptrs_from_tensors", None)
    if alloc is None:
        return False
    probes = (torch.zeros(2, 3), torch.zeros(3, 2).t(), torch.zeros(5, dtype=torch.int64)[1:])
    return bool(_ext.torch_borrow_setup(torch.Tensor, probes, alloc))
