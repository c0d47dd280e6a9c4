"""Arrays that exist only as descriptions, for dsa's Python package on a machine without a GPU
(test_cpu.py, dev/host_call_cost.py): Fake speaks __cuda_array_interface__, FakeTorch looks like a
torch.Tensor. Never dereferenced; each takes a new, 4 GiB-aligned pointer from one counter."""

from dsa import _tensors


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
