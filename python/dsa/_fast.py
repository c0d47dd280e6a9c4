"""Repeated calls with PyTorch tensors, at a fraction of the checked path's host cost.

A call's checks depend only on its arguments' signature — each tensor's shape, strides, dtype and
device, and the scalars — so the first call of a signature runs the checked path (dsa/__init__.py)
and leaves a plan here: its C argument struct, workspace size, output shapes and the C function.
A later call with the same signature copies the struct, rewrites every pointer field from its own
tensors, allocates what it must and calls C. The C library still checks what depends on the
pointers (alignment, workspace size) on every call. Only plain ``torch.Tensor`` arguments (and
None) take this path; anything else, or a signature not seen before, takes the checked one.
test_cpu.py checks, call by call, that the struct C receives is the same byte for byte either way.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional

from . import _lib
from ._tensors import _TORCH_ALLOC, stream_handle, torch_current_stream, torch_keep_for_stream

_MAX_PLANS = 1024  # signatures kept (prefill chunks of many sizes would otherwise grow it forever)
_plans: dict = {}


class Plan:
    __slots__ = ("args", "need", "ws_bytes", "device", "device_index", "outs", "call")

    def fresh(self) -> ctypes.Structure:
        return type(self.args).from_buffer_copy(self.args)


def key(tag: str, tensors: tuple, scalars: tuple) -> Optional[tuple]:
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
        return (tag, tuple(parts), scalars)
    except (AttributeError, TypeError, RuntimeError):  # not a tensor after all: the checked path says why
        return None


def get(k: Optional[tuple]) -> Optional[Plan]:
    return None if k is None else _plans.get(k)


def remember(k: Optional[tuple], args: ctypes.Structure, call: str, like: Any, outs: tuple = (), need: int = 0,
             workspace: Any = None) -> None:
    """Keeps the plan of a call that passed the checked path. like: the View of an input tensor
    (device); outs: (shape, dtype name) of each output the fast path may have to allocate."""
    if k is None or like.framework != "torch":
        return
    if len(_plans) >= _MAX_PLANS:
        _plans.clear()
    p = Plan()
    p.args = type(args).from_buffer_copy(args)
    p.need = need
    p.ws_bytes = 0
    if workspace is not None:
        from ._tensors import view

        p.ws_bytes = view(workspace, "", "workspace").nbytes_span
    p.device = getattr(like.obj, "device", None)
    p.device_index = like.device
    p.outs = outs
    p.call = getattr(_lib.lib(), call)
    _plans[k] = p


def clear() -> None:
    _plans.clear()


def empty(p: Plan, i: int) -> Any:
    """Output i of the plan, allocated as the checked path allocates it."""
    torch = sys.modules["torch"]
    shape, dtype = p.outs[i]
    return torch.empty(shape, dtype=getattr(torch, _TORCH_ALLOC[dtype]), device=p.device)


def ptr(x: Any) -> Optional[int]:
    return None if x is None else (x.data_ptr() or None)


_raw_stream: Any = None  # torch._C._cuda_getCurrentRawStream, looked up once (False: this PyTorch lacks it)


def stream_of(p: Plan, stream: Any) -> int:
    global _raw_stream
    if stream is not None:
        return stream_handle(stream)
    if _raw_stream is None and "torch" in sys.modules:
        _raw_stream = getattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream", False)
    if _raw_stream and p.device_index is not None:
        return _raw_stream(p.device_index)
    return torch_current_stream(p.device_index)


def run(p: Plan, a: ctypes.Structure, workspace: Any, stream: Any, fail) -> None:
    """The C call of a workspace-taking plan; fail(status) raises DsaError."""
    keep = None
    if workspace is None:
        if p.need:
            keep = sys.modules["torch"].empty((p.need,), dtype=sys.modules["torch"].uint8, device=p.device)
            wp, wb = keep.data_ptr(), p.need
        else:
            wp, wb = 0, 0
    else:
        wp, wb = workspace.data_ptr(), p.ws_bytes
    s = stream_of(p, stream)
    status = p.call(ctypes.byref(a), wp or None, wb, s or None)
    if status != _lib.DSA_OK:
        fail(status)
    if keep is not None and stream is not None:
        torch_keep_for_stream(keep, s)


def run_no_workspace(p: Plan, a: ctypes.Structure, stream: Any, fail) -> None:
    status = p.call(ctypes.byref(a), stream_of(p, stream) or None)
    if status != _lib.DSA_OK:
        fail(status)
