/*
 * torch_op.c — the kernels of torch.ops.dsa.* in C, through PyTorch's stable C ABI.
 *
 * dsa/ops.py defines each operator and, where this file can serve it, registers op_kernel as its
 * CUDA kernel instead of a Python function. PyTorch's dispatcher calls the kernel with the call's
 * arguments as a stack of StableIValues: a tensor an owned AtenTensorHandle, an optional a null or an
 * owned box holding the value, an int or float its bits. The kernel lays the arguments out as the
 * operator's public call does (a site of fastcall.c: its tensors and scalars) and compares them
 * with the site's plans in C:
 *   - a plan with their signature: its struct with each tensor's pointer written, the outputs
 *     allocated by PyTorch's caching allocator (aoti_torch_empty_strided; the workspace in the first
 *     output's storage, after it: one block for both), the library called on PyTorch's current
 *     stream. No Python runs.
 *   - none: the operator's checked twin (dsa::_checked_NAME, dsa/ops.py: a Python kernel running
 *     dsa's checked path, which remembers the plan) through the dispatcher, on the same stack.
 * A torch.ops call then costs about what a C++ operator costs, not a round trip into Python.
 *
 * The same shim serves dsa's own Python calls (fastcall.c): it allocates their outputs, and it reads
 * plain torch.Tensor arguments in C (fc_torch_borrowed_sig) once torch_borrow_setup has shown where
 * the object keeps its at::Tensor.
 *
 * No PyTorch header is needed to build: the shim functions used are declared here and looked up at
 * run time in the libtorch Python loaded (dlopen RTLD_NOLOAD). Registration is torch_library_impl's,
 * versioned (PyTorch >= 2.10), with the conversions of 2.10.0, so a later PyTorch converts as 2.10
 * did (the stable ABI's promise). test_ops.py ran on PyTorch 2.10 and 2.11; dsa/_fast.py (torch_abi)
 * uses this file from 2.10 on, where every shim function is found.
 *
 * Failures reach Python as RuntimeError carrying dsa's message (the checked path's DsaError or
 * DsaArgumentError text). C cannot throw; the kernel calls libstdc++'s std::__throw_runtime_error,
 * which the dispatcher turns into the Python exception (this file is compiled with -fexceptions so
 * the exception unwinds through its frames). The exception's Python class does not cross the C ABI.
 */
#define _GNU_SOURCE
#include "fastcall.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define FC_MAX_OPS 64     /* operators served: one trampoline each */
#define FC_MAX_OP_ARGS 16 /* schema arguments of an operator */

typedef uint64_t stable_ivalue;
typedef void *aten_tensor; /* AtenTensorHandle: an owned at::Tensor */
typedef int32_t aoti_error;

/* ---- the shim, found at run time --------------------------------------------------------------- */

static struct {
  aoti_error (*library_init_impl)(const char *ns, const char *key, const char *file, uint32_t line, void **lib);
  aoti_error (*library_impl)(void *lib, const char *name, void (*fn)(stable_ivalue *, uint64_t, uint64_t),
                             uint64_t extension_build_version);
  aoti_error (*call_dispatcher)(const char *op, const char *overload, stable_ivalue *stack, uint64_t version);
  aoti_error (*get_dim)(aten_tensor, int64_t *);
  aoti_error (*get_sizes)(aten_tensor, int64_t **);
  aoti_error (*get_strides)(aten_tensor, int64_t **);
  aoti_error (*get_dtype)(aten_tensor, int32_t *);
  aoti_error (*get_device_type)(aten_tensor, int32_t *);
  aoti_error (*get_device_index)(aten_tensor, int32_t *);
  aoti_error (*get_data_ptr)(aten_tensor, void **);
  aoti_error (*empty_strided)(int64_t ndim, const int64_t *sizes, const int64_t *strides, int32_t dtype,
                              int32_t device_type, int32_t device_index, aten_tensor *out);
  aoti_error (*delete_tensor)(aten_tensor);
  aoti_error (*reinterpret)(aten_tensor self, int64_t ndim, const int64_t *sizes, const int64_t *strides,
                            int64_t storage_offset, aten_tensor *out); /* NULL: each workspace its own block */
  /* a tensor of any dtype, shape and strides over self's storage from byte offset on (inductor's
   * _alloc_from_pool: not a view); NULL: a call's outputs take a block each */
  aoti_error (*alloc_from_pool)(aten_tensor self, int64_t offset_bytes, int32_t dtype, int64_t ndim,
                                const int64_t *sizes, const int64_t *strides, aten_tensor *out);
  /* THPVariable_Wrap(at::TensorBase &&): the Python object of a tensor, taking it from the handle
   * (libtorch_python); NULL, or not proved by wrap_proved: PyTorch's steal call, from Python */
  PyObject *(*wrap)(aten_tensor);
  int wrap_ok;
  aoti_error (*current_cuda_stream)(int32_t device_index, void **stream); /* NULL: a CPU-only PyTorch */
  void (*operator_delete)(void *);                                         /* ::operator delete(void *) */
  void (*throw_runtime_error)(const char *);                               /* std::__throw_runtime_error */
  int32_t dtype[FC_DT_COUNT];                                              /* PyTorch's code of each FC_DT_* */
  int32_t device_cpu, device_cuda;
  int ready;
} T;

#define TORCH_2_10_0 (((uint64_t)2 << 56) | ((uint64_t)10 << 48)) /* the conversions this file speaks */

static void *lookup(void *lib, const char *name, int *missing) {
  void *f = lib ? dlsym(lib, name) : NULL;
  if (!f) *missing = 1;
  return f;
}

/* torch_setup(libtorch_cpu, libtorch_cuda or None): whether PyTorch's stable ABI is there to use. */
PyObject *fc_torch_setup(PyObject *self, PyObject *args) {
  (void)self;
  const char *cpu_path, *cuda_path;
  if (!PyArg_ParseTuple(args, "sz", &cpu_path, &cuda_path)) return NULL;
  if (T.ready) Py_RETURN_TRUE;
  void *cpu = dlopen(cpu_path, RTLD_NOW | RTLD_NOLOAD), *cxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD);
  void *cuda = cuda_path ? dlopen(cuda_path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  int missing = 0;
  *(void **)&T.library_init_impl = lookup(cpu, "aoti_torch_library_init_impl", &missing);
  *(void **)&T.library_impl = lookup(cpu, "torch_library_impl", &missing);
  *(void **)&T.call_dispatcher = lookup(cpu, "torch_call_dispatcher", &missing);
  *(void **)&T.get_dim = lookup(cpu, "aoti_torch_get_dim", &missing);
  *(void **)&T.get_sizes = lookup(cpu, "aoti_torch_get_sizes", &missing);
  *(void **)&T.get_strides = lookup(cpu, "aoti_torch_get_strides", &missing);
  *(void **)&T.get_dtype = lookup(cpu, "aoti_torch_get_dtype", &missing);
  *(void **)&T.get_device_type = lookup(cpu, "aoti_torch_get_device_type", &missing);
  *(void **)&T.get_device_index = lookup(cpu, "aoti_torch_get_device_index", &missing);
  *(void **)&T.get_data_ptr = lookup(cpu, "aoti_torch_get_data_ptr", &missing);
  *(void **)&T.empty_strided = lookup(cpu, "aoti_torch_empty_strided", &missing);
  *(void **)&T.delete_tensor = lookup(cpu, "aoti_torch_delete_tensor_object", &missing);
  int optional = 0; /* without it a workspace takes a block of its own */
  *(void **)&T.reinterpret = lookup(cpu, "aoti_torch__reinterpret_tensor", &optional);
  *(void **)&T.alloc_from_pool = lookup(cpu, "aoti_torch__alloc_from_pool", &optional);
  void *py = dlopen("libtorch_python.so", RTLD_NOW | RTLD_NOLOAD);
  *(void **)&T.wrap = lookup(py, "_Z16THPVariable_WrapON2at10TensorBaseE", &optional);
  *(void **)&T.operator_delete = lookup(cxx, "_ZdlPv", &missing);
  *(void **)&T.throw_runtime_error = lookup(cxx, "_ZSt21__throw_runtime_errorPKc", &missing);
  static const char *const dtype_fn[FC_DT_COUNT] = {
      "aoti_torch_dtype_bfloat16", "aoti_torch_dtype_float16", "aoti_torch_dtype_float32",
      "aoti_torch_dtype_int32",    "aoti_torch_dtype_int64",   "aoti_torch_dtype_uint8",
      "aoti_torch_dtype_int8",     "aoti_torch_dtype_float8_e4m3fn"};
  int32_t (*code)(void);
  for (int d = 0; d < FC_DT_COUNT; d++) {
    *(void **)&code = lookup(cpu, dtype_fn[d], &missing);
    T.dtype[d] = code ? code() : -1;
  }
  *(void **)&code = lookup(cpu, "aoti_torch_device_type_cpu", &missing);
  T.device_cpu = code ? code() : -1;
  *(void **)&code = lookup(cpu, "aoti_torch_device_type_cuda", &missing);
  T.device_cuda = code ? code() : -1;
  if (cuda_path) /* a CUDA build of PyTorch: its kernels need the current stream */
    *(void **)&T.current_cuda_stream = lookup(cuda, "aoti_torch_get_current_cuda_stream", &missing);
  /* the handles stay open: the libraries are Python's for the life of the process */
  if (missing) Py_RETURN_FALSE;
  T.ready = 1;
  Py_RETURN_TRUE;
}

int fc_torch_ready(void) { return T.ready; }

/* Plan p's allocation i, on the plan's device, with room for `extra` more bytes in its storage after
 * its own (its shape, contiguous strides and dtype calloc[i]'s): 0 with *data its first byte and *end
 * the first byte after it, or -1 (*h NULL). */
static int new_handle(const fc_plan *p, int i, size_t extra, aten_tensor *h, void **data, char **end) {
  const fc_csig *a = &p->calloc[i];
  const int32_t type = p->c_on_cpu ? T.device_cpu : T.device_cuda, index = p->c_on_cpu ? -1 : (int32_t)p->c_device;
  const int64_t eb = fc_dtype_bytes[a->dtype];
  int64_t numel = 1; /* contiguous: the elements it covers */
  for (int d = 0; d < a->ndim; d++) numel *= a->size[d];
  aten_tensor base = NULL;
  *h = NULL;
  if (!extra) {
    if (T.empty_strided(a->ndim, a->size, a->stride, T.dtype[a->dtype], type, index, h) || !*h ||
        T.get_data_ptr(*h, data))
      goto fail;
  } else { /* one block: a flat tensor of numel + the extra bytes' elements, viewed as the output */
    const int64_t n = numel + (int64_t)((extra + (size_t)eb - 1) / (size_t)eb), one = 1;
    if (T.empty_strided(1, &n, &one, T.dtype[a->dtype], type, index, &base) || !base || T.get_data_ptr(base, data) ||
        T.reinterpret(base, a->ndim, a->size, a->stride, 0, h) || !*h)
      goto fail;
    T.delete_tensor(base); /* the view keeps the storage */
  }
  *end = (char *)*data + numel * eb;
  return 0;
fail:
  if (*h) T.delete_tensor(*h);
  if (base) T.delete_tensor(base);
  *h = NULL;
  return -1;
}

/* Plan p's allocations which[0 .. k): h[j] each one's handle, ptr[j] its data. Where the plan
 * allocates a workspace of at most WS_SHARED_MAX bytes beside an output, the workspace has no handle
 * (h[j] NULL): it lies in the first such output's storage after the output (256-byte aligned, as
 * dsa.h asks), so the caching allocator is asked once for both, where calls are short (hence their
 * workspaces small) and host time counts. The output then keeps those bytes while it lives, so a
 * larger workspace (a long call, whose host time is noise) takes a block of its own, freed after the
 * call. *ws_in is the holding output's j, else -1. 0, or -1 with nothing made. */
#define WS_ALIGN 256
#define WS_SHARED_MAX (2u << 20) /* sparse_mla at 1 token x 16 heads: 1 MiB; topk of one 8k row: 144 KiB */
static int new_handles(const fc_plan *p, const int *which, int k, aten_tensor *h, void **ptr, int *ws_in) {
  int ws = -1, host = -1;
  for (int j = 0; j < k; j++) {
    h[j] = NULL;
    if (p->offset[which[j]] == FC_WORKSPACE)
      ws = j;
    else if (host < 0)
      host = j;
  }
  if (ws < 0 || !T.reinterpret || p->ws_need > WS_SHARED_MAX) host = -1;
  *ws_in = host;
  for (int j = 0; j < k; j++) {
    if (j == ws && host >= 0) continue;
    char *end;
    if (new_handle(p, which[j], j == host ? WS_ALIGN + p->ws_need : 0, &h[j], &ptr[j], &end)) {
      for (int m = 0; m < j; m++)
        if (h[m]) T.delete_tensor(h[m]);
      return -1;
    }
    if (j == host) ptr[ws] = (void *)(((uintptr_t)end + WS_ALIGN - 1) & ~(uintptr_t)(WS_ALIGN - 1));
  }
  return 0;
}

/* The bytes allocation a of plan p spans (its strides' extent); the workspace's: what the call needs. */
static size_t alloc_bytes(const fc_plan *p, int i) {
  if (p->offset[i] == FC_WORKSPACE) return p->ws_need;
  const fc_csig *a = &p->calloc[i];
  int64_t last = 0; /* the farthest element from the first */
  for (int d = 0; d < a->ndim; d++) {
    if (a->size[d] == 0) return 0;
    last += (a->size[d] - 1) * a->stride[d];
  }
  return (size_t)(last + 1) * (size_t)fc_dtype_bytes[a->dtype];
}

/* Plan p's allocations which[0 .. k) as one block of the caching allocator (dsa's own calls, where
 * each allocation costs microseconds of host time and the call's outputs are small), each at a
 * WS_ALIGN boundary in the call's order: an output a tensor of its own shape and dtype over the
 * block's storage (_alloc_from_pool: a tensor of its own, not a view), the workspace a pointer into
 * it (no handle). Where the whole is over WS_SHARED_MAX, or PyTorch lacks a function it takes,
 * it makes nothing and answers 1 (the caller allocates apart); else 0, or -1 (nothing made). *ws_in:
 * the j of an output holding the workspace (-1: none). torch.ops.dsa keeps its outputs apart:
 * torch.library forbids an operator's outputs to alias each other. */
static int one_block(const fc_plan *p, const int *which, int k, aten_tensor *h, void **ptr, int *ws_in) {
  size_t at[FC_MAX_ARGS], total = 0;
  if (k < 2 || !T.alloc_from_pool) return 1;
  for (int j = 0; j < k; j++) {
    at[j] = total;
    total += (alloc_bytes(p, which[j]) + WS_ALIGN - 1) & ~(size_t)(WS_ALIGN - 1);
  }
  if (total > WS_SHARED_MAX) return 1;
  total += WS_ALIGN; /* room to align the first (CUDA's blocks are aligned; the CPU's to 64 bytes) */
  const int32_t type = p->c_on_cpu ? T.device_cpu : T.device_cuda, index = p->c_on_cpu ? -1 : (int32_t)p->c_device;
  const int64_t n = (int64_t)total, one = 1;
  aten_tensor block = NULL;
  char *data;
  *ws_in = -1;
  for (int j = 0; j < k; j++) h[j] = NULL;
  if (T.empty_strided(1, &n, &one, T.dtype[FC_DT_U8], type, index, &block) || !block ||
      T.get_data_ptr(block, (void **)&data))
    goto fail;
  const size_t pad = (size_t)(-(uintptr_t)data & (WS_ALIGN - 1));
  for (int j = 0; j < k; j++) {
    at[j] += pad;
    ptr[j] = data + at[j];
    if (p->offset[which[j]] == FC_WORKSPACE) continue;
    const fc_csig *a = &p->calloc[which[j]];
    if (T.alloc_from_pool(block, (int64_t)at[j], T.dtype[a->dtype], a->ndim, a->size, a->stride, &h[j]) || !h[j])
      goto fail;
    if (*ws_in < 0) *ws_in = j;
  }
  T.delete_tensor(block); /* the outputs keep the storage */
  return 0;
fail:
  for (int j = 0; j < k; j++)
    if (h[j]) T.delete_tensor(h[j]), h[j] = NULL;
  if (block) T.delete_tensor(block);
  return -1;
}

int fc_torch_new_tensors(const fc_plan *p, const int *which, int k, PyObject *steal, PyObject **out, void **ptr,
                         int *ws_in) {
  aten_tensor h[FC_MAX_ARGS];
  int pos[FC_MAX_ARGS], n = 0, taken = 0, status = -1; /* pos: the j of each handle handed over */
  int r = one_block(p, which, k, h, ptr, ws_in);
  if (r > 0) r = new_handles(p, which, k, h, ptr, ws_in);
  if (r) {
    PyErr_Format(PyExc_RuntimeError, "dsa: an output could not be allocated");
    return -1;
  }
  if (T.wrap_ok) { /* each handle's tensor to its Python object in C */
    for (int j = 0; j < k; j++) {
      out[j] = Py_None;
      if (!h[j]) {
        Py_INCREF(Py_None); /* a workspace in another's storage */
        continue;
      }
      out[j] = T.wrap(h[j]); /* takes the tensor: the handle is left empty */
      T.delete_tensor(h[j]);
      h[j] = NULL;
      if (!out[j]) { /* PyTorch set the exception */
        for (int m = 0; m < j; m++) Py_DECREF(out[m]);
        for (int m = j + 1; m < k; m++)
          if (h[m]) T.delete_tensor(h[m]);
        return -1;
      }
    }
    return 0;
  }
  for (int j = 0; j < k; j++)
    if (h[j]) pos[n++] = j;
  PyObject *list = PyList_New(n), *got = NULL;
  if (!list) goto done;
  for (int m = 0; m < n; m++) {
    PyObject *cap = PyCapsule_New(h[pos[m]], NULL, NULL); /* owns nothing: the handles are ours till taken */
    if (!cap) goto done;
    PyList_SetItem(list, m, cap); /* steals the new reference */
  }
  /* steal([handles]) -> [tensors]: takes the handles (and deletes them) */
  if (!(got = PyObject_CallFunctionObjArgs(steal, list, NULL))) goto done;
  taken = 1;
  if (!PyList_Check(got) || PyList_Size(got) != n) {
    PyErr_SetString(PyExc_RuntimeError, "dsa: PyTorch's handle-to-tensor call answered unexpectedly");
    goto done;
  }
  for (int j = 0; j < k; j++) out[j] = Py_None; /* a workspace in another's storage */
  for (int m = 0; m < n; m++) out[pos[m]] = PyList_GetItem(got, m);
  for (int j = 0; j < k; j++) Py_INCREF(out[j]);
  status = 0;
done:
  for (int j = 0; !taken && j < k; j++)
    if (h[j]) T.delete_tensor(h[j]);
  Py_XDECREF(got);
  Py_XDECREF(list);
  return status;
}

/* ---- torch.Tensor objects read in C (the dsa.* fast path) ---------------------------------------- */

/* Since PyTorch 2.10 a torch.Tensor object (THPVariable) holds its at::Tensor, which is an
 * AtenTensorHandle's referent, right after the object header; 2.9 held a c10::MaybeOwned there.
 * torch_borrow_setup checks this on probe tensors before it is used, by comparing those bytes with
 * the at::Tensor of a handle PyTorch makes for the same tensor: no memory outside the object is
 * read until they agree. */
#define FC_CDATA_OFFSET sizeof(PyObject)
static PyObject *g_tensor_type; /* torch.Tensor, once checked */

/* Tensor t's C signature and data pointer: 1, or 0 where it has none. */
static int tensor_sig(aten_tensor t, fc_csig *s, void **ptr) {
  int64_t dim, *sizes, *strides;
  int32_t dtype, dtype_index = -1, devtype, devindex;
  if (T.get_dim(t, &dim) || T.get_sizes(t, &sizes) || T.get_strides(t, &strides) || T.get_dtype(t, &dtype) ||
      T.get_device_type(t, &devtype) || T.get_device_index(t, &devindex) || T.get_data_ptr(t, ptr) ||
      dim > FC_MAX_DIMS)
    return 0;
  for (int d = 0; d < FC_DT_COUNT; d++)
    if (T.dtype[d] == dtype) dtype_index = d;
  if (dtype_index < 0) return 0;
  s->ndim = (int)dim;
  s->dtype = dtype_index;
  s->device = devtype == T.device_cuda ? devindex : devtype == T.device_cpu ? -1 : -2;
  memcpy(s->size, sizes, (size_t)dim * sizeof(int64_t));
  memcpy(s->stride, strides, (size_t)dim * sizeof(int64_t));
  return 1;
}

/* Whether T.wrap makes a handle's tensor into its torch.Tensor object, as PyTorch's steal call does
 * (with g_tensor_type proved): a new CPU tensor wrapped is an object of that type holding the same
 * TensorImpl, and the handle no longer holds it. */
static int wrap_proved(void) {
  const int64_t n = 4, one = 1;
  aten_tensor h = NULL;
  if (!T.wrap || !g_tensor_type ||
      T.empty_strided(1, &n, &one, T.dtype[FC_DT_F32], T.device_cpu, -1, &h) || !h)
    return 0;
  void *impl;
  memcpy(&impl, h, sizeof impl); /* at::Tensor's one word: its TensorImpl */
  PyObject *x = T.wrap(h);
  void *left;
  memcpy(&left, h, sizeof left);
  T.delete_tensor(h);
  const int ok = x && (PyObject *)Py_TYPE(x) == g_tensor_type && left != impl &&
                 !memcmp((char *)x + FC_CDATA_OFFSET, &impl, sizeof impl);
  Py_XDECREF(x);
  PyErr_Clear();
  return ok;
}

int fc_torch_borrowed_sig(PyObject *x, fc_csig *s, void **ptr) {
  if (!g_tensor_type || (PyObject *)Py_TYPE(x) != g_tensor_type) return 0;
  return tensor_sig((aten_tensor)((char *)x + FC_CDATA_OFFSET), s, ptr);
}

/* torch_borrow_setup(torch.Tensor, probes, unsafe_alloc_void_ptrs_from_tensors) -> bool: whether
 * fc_torch_borrowed_sig may read torch.Tensor objects in C. probes: a tuple of at least two
 * torch.Tensor objects; unsafe_alloc: PyTorch's call making a handle of each (an at::Tensor copy).
 * torch_borrow_setup(None, (), None) turns it off. */
PyObject *fc_torch_borrow_setup(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *type, *probes, *alloc;
  if (!PyArg_ParseTuple(args, "OO!O", &type, &PyTuple_Type, &probes, &alloc)) return NULL;
  if (type == Py_None) { /* off (tests compare both ways) */
    Py_CLEAR(g_tensor_type);
    T.wrap_ok = 0;
    Py_RETURN_FALSE;
  }
  if (!T.ready) Py_RETURN_FALSE;
  const Py_ssize_t n = PyTuple_Size(probes);
  PyObject *caps = PyObject_CallFunctionObjArgs(alloc, probes, NULL);
  int ok = caps && PyList_Check(caps) && PyList_Size(caps) == n && n >= 2;
  for (Py_ssize_t i = 0; caps && PyList_Check(caps) && i < PyList_Size(caps); i++) {
    PyObject *x = i < n ? PyTuple_GetItem(probes, i) : NULL;
    void *h = PyCapsule_GetPointer(PyList_GetItem(caps, i), NULL);
    if (!h) {
      ok = 0;
      continue;
    }
    /* the handle is a new at::Tensor of the same TensorImpl: the same pointer as the object's */
    if (!x || (PyObject *)Py_TYPE(x) != type || memcmp(h, (char *)x + FC_CDATA_OFFSET, sizeof(void *)) != 0) ok = 0;
    T.delete_tensor(h);
  }
  Py_XDECREF(caps);
  PyErr_Clear();
  if (ok) {
    Py_INCREF(type);
    Py_XDECREF(g_tensor_type);
    g_tensor_type = type;
  } else {
    Py_CLEAR(g_tensor_type); /* probes that prove nothing turn it off */
  }
  T.wrap_ok = ok && wrap_proved();
  return PyBool_FromLong(ok);
}

/* ---- operators --------------------------------------------------------------------------------- */

/* Schema argument kinds (dsa/ops.py: _KINDS): upper case is the optional form. */
#define K_TENSOR 't'
#define K_FLOAT 'f'
#define K_INT 'i' /* int, SymInt and bool: all reach the kernel as an int64_t */

typedef struct {
  int site;                               /* its public call's plans (fastcall.c) */
  int nargs;
  char kind[FC_MAX_OP_ARGS];              /* per schema argument */
  int ntensors;                           /* the site's tensor arguments */
  int tensor_arg[FC_MAX_ARGS];            /* per site tensor: its schema argument, or -1 (None) */
  int nscalars;
  int scalar_arg[FC_MAX_SCALARS];         /* per site scalar: its schema argument, or -1: scalar_const */
  fc_scalar scalar_const[FC_MAX_SCALARS];
  char name[96], checked[96];             /* "dsa::sparse_mla", its checked twin */
} fc_op;

static fc_op g_ops[FC_MAX_OPS];
static int g_nops;
static _Thread_local int t_in_checked;            /* a kernel of this thread is running its checked twin */
static _Thread_local PyObject *t_checked_failure; /* the checked twin's message (str), for that kernel */

static void op_kernel(int k, stable_ivalue *stack, uint64_t nargs, uint64_t nret);

#define TRAMPOLINE(k) \
  static void op_kernel_##k(stable_ivalue *s, uint64_t a, uint64_t r) { op_kernel(k, s, a, r); }
TRAMPOLINE(0) TRAMPOLINE(1) TRAMPOLINE(2) TRAMPOLINE(3) TRAMPOLINE(4) TRAMPOLINE(5) TRAMPOLINE(6)
TRAMPOLINE(7) TRAMPOLINE(8) TRAMPOLINE(9) TRAMPOLINE(10) TRAMPOLINE(11) TRAMPOLINE(12) TRAMPOLINE(13)
TRAMPOLINE(14) TRAMPOLINE(15) TRAMPOLINE(16) TRAMPOLINE(17) TRAMPOLINE(18) TRAMPOLINE(19) TRAMPOLINE(20)
TRAMPOLINE(21) TRAMPOLINE(22) TRAMPOLINE(23) TRAMPOLINE(24) TRAMPOLINE(25) TRAMPOLINE(26) TRAMPOLINE(27)
TRAMPOLINE(28) TRAMPOLINE(29) TRAMPOLINE(30) TRAMPOLINE(31) TRAMPOLINE(32) TRAMPOLINE(33) TRAMPOLINE(34)
TRAMPOLINE(35) TRAMPOLINE(36) TRAMPOLINE(37) TRAMPOLINE(38) TRAMPOLINE(39) TRAMPOLINE(40) TRAMPOLINE(41)
TRAMPOLINE(42) TRAMPOLINE(43) TRAMPOLINE(44) TRAMPOLINE(45) TRAMPOLINE(46) TRAMPOLINE(47) TRAMPOLINE(48)
TRAMPOLINE(49) TRAMPOLINE(50) TRAMPOLINE(51) TRAMPOLINE(52) TRAMPOLINE(53) TRAMPOLINE(54) TRAMPOLINE(55)
TRAMPOLINE(56) TRAMPOLINE(57) TRAMPOLINE(58) TRAMPOLINE(59) TRAMPOLINE(60) TRAMPOLINE(61) TRAMPOLINE(62)
TRAMPOLINE(63)
static void (*const g_trampoline[FC_MAX_OPS])(stable_ivalue *, uint64_t, uint64_t) = {
    op_kernel_0, op_kernel_1, op_kernel_2, op_kernel_3, op_kernel_4, op_kernel_5, op_kernel_6, op_kernel_7,
    op_kernel_8, op_kernel_9, op_kernel_10, op_kernel_11, op_kernel_12, op_kernel_13, op_kernel_14,
    op_kernel_15, op_kernel_16, op_kernel_17, op_kernel_18, op_kernel_19, op_kernel_20, op_kernel_21,
    op_kernel_22, op_kernel_23, op_kernel_24, op_kernel_25, op_kernel_26, op_kernel_27, op_kernel_28,
    op_kernel_29, op_kernel_30, op_kernel_31, op_kernel_32, op_kernel_33, op_kernel_34, op_kernel_35,
    op_kernel_36, op_kernel_37, op_kernel_38, op_kernel_39, op_kernel_40, op_kernel_41, op_kernel_42,
    op_kernel_43, op_kernel_44, op_kernel_45, op_kernel_46, op_kernel_47, op_kernel_48, op_kernel_49,
    op_kernel_50, op_kernel_51, op_kernel_52, op_kernel_53, op_kernel_54, op_kernel_55, op_kernel_56,
    op_kernel_57, op_kernel_58, op_kernel_59, op_kernel_60, op_kernel_61, op_kernel_62, op_kernel_63};

/* (namespace, dispatch key) -> the torch::Library it was registered through (kept for the process) */
static struct {
  char ns[32], key[32];
  void *lib;
} g_libs[8];
static int g_nlibs;

/* torch_register(namespace, dispatch_key, name, site, kinds, tensor_args, scalar_args, checked):
 * registers the C kernel of namespace::name for dispatch_key. kinds: a str, one letter per schema
 * argument ('t' tensor, 'f' float, 'i' int or bool; upper case: optional); tensor_args: per site
 * tensor the schema argument it is, or None; scalar_args: per site scalar ('arg', i) or ('const',
 * value); checked: the twin operator running the checked path. */
PyObject *fc_torch_register(PyObject *self, PyObject *args) {
  (void)self;
  const char *ns, *key, *name, *kinds, *checked;
  int site;
  PyObject *tensor_args, *scalar_args;
  if (!PyArg_ParseTuple(args, "sssisO!O!s", &ns, &key, &name, &site, &kinds, &PyTuple_Type, &tensor_args,
                        &PyTuple_Type, &scalar_args, &checked))
    return NULL;
  if (!T.ready) return PyErr_Format(PyExc_RuntimeError, "dsa._fastcall: torch_setup has not succeeded");
  if (g_nops == FC_MAX_OPS)
    return PyErr_Format(PyExc_RuntimeError, "dsa._fastcall: more than %d operators", FC_MAX_OPS);
  fc_op *op = &g_ops[g_nops];
  memset(op, 0, sizeof *op);
  op->site = site;
  op->nargs = (int)strlen(kinds);
  op->ntensors = (int)PyTuple_Size(tensor_args);
  op->nscalars = (int)PyTuple_Size(scalar_args);
  if (site < 0 || site >= FC_MAX_SITES || op->nargs > FC_MAX_OP_ARGS || op->ntensors > FC_MAX_ARGS ||
      op->nscalars > FC_MAX_SCALARS ||
      snprintf(op->name, sizeof op->name, "%s::%s", ns, name) >= (int)sizeof op->name ||
      snprintf(op->checked, sizeof op->checked, "%s", checked) >= (int)sizeof op->checked ||
      strlen(ns) >= sizeof g_libs[0].ns || strlen(key) >= sizeof g_libs[0].key)
    return PyErr_Format(PyExc_ValueError, "dsa._fastcall.torch_register: %s: out of the module's limits", name);
  for (int a = 0; a < op->nargs; a++) {
    char c = kinds[a], l = (char)(c | 0x20);
    if (l != K_TENSOR && l != K_FLOAT && l != K_INT)
      return PyErr_Format(PyExc_ValueError, "dsa._fastcall.torch_register: %s: argument kind '%c'", name, c);
    op->kind[a] = c;
  }
  for (int i = 0; i < op->ntensors; i++) {
    PyObject *v = PyTuple_GetItem(tensor_args, i);
    long a = v == Py_None ? -1 : PyLong_AsLong(v);
    if (a == -1 && PyErr_Occurred()) return NULL;
    if (a >= op->nargs || (a >= 0 && (op->kind[a] | 0x20) != K_TENSOR))
      return PyErr_Format(PyExc_ValueError, "dsa._fastcall.torch_register: %s: tensor %d is no tensor argument",
                          name, i);
    op->tensor_arg[i] = (int)a;
  }
  for (int j = 0; j < op->nscalars; j++) {
    PyObject *v = PyTuple_GetItem(scalar_args, j), *what, *value;
    if (!PyTuple_Check(v) || PyTuple_Size(v) != 2 || !PyUnicode_Check(what = PyTuple_GetItem(v, 0)))
      return PyErr_Format(PyExc_ValueError,
                          "dsa._fastcall.torch_register: %s: scalar %d is ('arg', i) or ('const', v)", name, j);
    value = PyTuple_GetItem(v, 1);
    if (PyUnicode_CompareWithASCIIString(what, "arg") == 0) {
      long a = PyLong_AsLong(value);
      if (a == -1 && PyErr_Occurred()) return NULL;
      if (a < 0 || a >= op->nargs || (op->kind[a] | 0x20) == K_TENSOR)
        return PyErr_Format(PyExc_ValueError, "dsa._fastcall.torch_register: %s: scalar %d is no scalar argument",
                            name, j);
      op->scalar_arg[j] = (int)a;
    } else {
      op->scalar_arg[j] = -1;
      if (fc_scalar_from_python(value, &op->scalar_const[j])) return NULL;
    }
  }
  void *lib = NULL;
  for (int l = 0; l < g_nlibs && !lib; l++)
    if (!strcmp(g_libs[l].ns, ns) && !strcmp(g_libs[l].key, key)) lib = g_libs[l].lib;
  if (!lib) {
    if (g_nlibs == (int)(sizeof g_libs / sizeof g_libs[0]))
      return PyErr_Format(PyExc_RuntimeError, "dsa._fastcall: too many (namespace, dispatch key) pairs");
    if (T.library_init_impl(ns, key, __FILE__, __LINE__, &lib) || !lib)
      return PyErr_Format(PyExc_RuntimeError, "dsa._fastcall: torch.library %s / %s not made", ns, key);
    snprintf(g_libs[g_nlibs].ns, sizeof g_libs[0].ns, "%s", ns);
    snprintf(g_libs[g_nlibs].key, sizeof g_libs[0].key, "%s", key);
    g_libs[g_nlibs++].lib = lib;
  }
  if (T.library_impl(lib, name, g_trampoline[g_nops], TORCH_2_10_0))
    return PyErr_Format(PyExc_RuntimeError, "dsa._fastcall: %s: the kernel was not registered", op->name);
  g_nops++;
  Py_RETURN_NONE;
}

/* torch_checked_failed(message) -> bool: called by a checked twin that caught the checked path's
 * exception. True: a C kernel of this thread called the twin and takes the message (the twin returns
 * placeholders rather than raise into the dispatcher, which would only log it); False: the twin was
 * called some other way, and raises. */
PyObject *fc_torch_checked_failed(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *msg;
  if (!PyArg_ParseTuple(args, "U", &msg)) return NULL;
  if (!t_in_checked) Py_RETURN_FALSE;
  PyObject *old = t_checked_failure;
  Py_INCREF(msg);
  t_checked_failure = msg;
  Py_XDECREF(old);
  Py_RETURN_TRUE;
}

/* ---- a call -------------------------------------------------------------------------------------- */

typedef struct { /* one call's arguments, read off the stack */
  aten_tensor tensor[FC_MAX_OP_ARGS];     /* NULL: not a tensor, or None */
  stable_ivalue *box[FC_MAX_OP_ARGS];     /* an optional's box, to free */
  fc_scalar scalar[FC_MAX_OP_ARGS];
  fc_csig sig[FC_MAX_ARGS];               /* per site tensor */
  void *ptr[FC_MAX_ARGS];
} op_call;

/* The arguments' signatures in C; 0 when one has no C form (the checked path then judges it). */
static int read_args(const fc_op *op, stable_ivalue *stack, op_call *c) {
  for (int a = 0; a < op->nargs; a++) {
    stable_ivalue v = stack[a];
    char kind = op->kind[a];
    if (kind >= 'A' && kind <= 'Z') { /* optional: null, or a box */
      c->box[a] = (stable_ivalue *)(uintptr_t)v;
      if (!c->box[a]) {
        c->scalar[a].kind = FC_NONE;
        continue;
      }
      v = *c->box[a];
      kind = (char)(kind | 0x20);
    }
    if (kind == K_TENSOR) {
      c->tensor[a] = (aten_tensor)(uintptr_t)v;
    } else if (kind == K_FLOAT) {
      c->scalar[a].kind = FC_FLOAT;
      memcpy(&c->scalar[a].f, &v, sizeof(double));
    } else {
      c->scalar[a].kind = FC_INT;
      c->scalar[a].i = (int64_t)v;
    }
  }
  for (int i = 0; i < op->ntensors; i++) {
    fc_csig *s = &c->sig[i];
    aten_tensor t = op->tensor_arg[i] < 0 ? NULL : c->tensor[op->tensor_arg[i]];
    s->ndim = -1;
    c->ptr[i] = NULL;
    if (!t) continue;
    if (!tensor_sig(t, s, &c->ptr[i])) return 0;
  }
  return 1;
}

static int same_scalar(const fc_scalar *a, const fc_scalar *b) { /* as Python's == on None, int, float */
  if (a->kind == FC_OTHER || b->kind == FC_OTHER) return 0; /* no C value to compare */
  if (a->kind == FC_NONE || b->kind == FC_NONE) return a->kind == b->kind;
  if (a->kind == FC_INT && b->kind == FC_INT) return a->i == b->i;
  double x = a->kind == FC_INT ? (double)a->i : a->f, y = b->kind == FC_INT ? (double)b->i : b->f;
  return x == y && (a->kind == FC_FLOAT || (int64_t)x == a->i) && (b->kind == FC_FLOAT || (int64_t)y == b->i);
}

static int matches(const fc_op *op, const fc_plan *p, const op_call *c) {
  if (!p->c_ok || p->n != op->ntensors || p->nscalars != op->nscalars) return 0;
  for (int j = 0; j < op->nscalars; j++) {
    const fc_scalar *s = op->scalar_arg[j] < 0 ? &op->scalar_const[j] : &c->scalar[op->scalar_arg[j]];
    if (!same_scalar(s, &p->cscalar[j])) return 0;
  }
  for (int i = 0; i < op->ntensors; i++)
    if (!fc_same_sig(&c->sig[i], &p->csig[i])) return 0;
  return 1;
}

/* The site's plan for these arguments, its reference taken (most recently used first), or NULL. */
static fc_plan *find_plan(const fc_op *op, const op_call *c) {
  PyGILState_STATE g = PyGILState_Ensure();
  fc_site *st = &fc_sites[op->site];
  fc_plan *found = NULL;
  for (int k = 0; k < st->count && !found; k++) {
    fc_plan *p = st->plan[k];
    if (!matches(op, p, c)) continue;
    p->refs++;
    memmove(&st->plan[1], &st->plan[0], (size_t)k * sizeof st->plan[0]);
    st->plan[0] = p;
    found = p;
  }
  PyGILState_Release(g);
  return found;
}

static void release_plan(fc_plan *p) {
  PyGILState_STATE g = PyGILState_Ensure();
  fc_plan_release(p);
  PyGILState_Release(g);
}

/* Frees what the kernel owns of the stack's arguments. */
static void free_args(const fc_op *op, op_call *c) {
  for (int a = 0; a < op->nargs; a++) {
    if (c->tensor[a]) T.delete_tensor(c->tensor[a]);
    if (c->box[a]) T.operator_delete(c->box[a]);
  }
}

static _Thread_local char t_message[1024];

/* Raises RuntimeError(message) in the caller's Python through the dispatcher. */
static void fail(const char *message) {
  T.throw_runtime_error(message);
}

/* The text of the Python exception set now (cleared), into t_message. */
static void python_error_text(const char *op) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject *s = value ? PyObject_Str(value) : NULL;
  PyObject *b = s ? PyUnicode_AsEncodedString(s, "utf-8", "replace") : NULL;
  snprintf(t_message, sizeof t_message, "%s: %s", op, b ? PyBytes_AsString(b) : "failed");
  Py_XDECREF(b);
  Py_XDECREF(s);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
}

/* The call through plan p, its nret results (the outputs it made) left on the stack: nret 0 for an
 * operator whose outputs are all given (NAME_out); 0, or -1 with t_message set (everything the call
 * made freed). */
static int run(const fc_op *op, const fc_plan *p, op_call *c, stable_ivalue *stack, uint64_t nret) {
  _Alignas(16) unsigned char args[FC_MAX_STRUCT];
  memcpy(args, p->args, p->args_bytes);
  aten_tensor made[FC_MAX_ARGS] = {0};
  void *ws = NULL;
  size_t ws_bytes = 0;
  int status = 0;
  /* the tensors match the plan's signature, so the plan's device is theirs */
  int which[FC_MAX_ARGS], k = 0, ws_in;
  aten_tensor h[FC_MAX_ARGS];
  void *ptr[FC_MAX_ARGS];
  for (int i = 0; i < p->n; i++)
    if (c->sig[i].ndim < 0 && p->calloc[i].ndim >= 0) which[k++] = i;
  if (k && new_handles(p, which, k, h, ptr, &ws_in)) {
    snprintf(t_message, sizeof t_message, "%s: an output could not be allocated", op->name);
    return -1;
  }
  for (int i = 0, j = 0; i < p->n; i++) {
    const int is_made = j < k && which[j] == i;
    if (is_made) made[i] = h[j]; /* NULL: the workspace, in another output's storage */
    fc_plan_put(p, i, is_made ? ptr[j++] : c->ptr[i], is_made, args, &ws, &ws_bytes);
  }
  void *stream = NULL;
  if (!p->c_on_cpu && (!T.current_cuda_stream || T.current_cuda_stream((int32_t)p->c_device, &stream))) {
    snprintf(t_message, sizeof t_message, "%s: no current CUDA stream", op->name);
    status = -1;
    goto done;
  }
  status = fc_plan_call(p, args, ws, ws_bytes, stream);
  if (status != 0) { /* the library's message, as DsaError has it */
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = fc_fail_callback ? PyObject_CallFunction(fc_fail_callback, "i", status) : NULL;
    Py_XDECREF(r);
    if (PyErr_Occurred())
      python_error_text(op->name);
    else
      snprintf(t_message, sizeof t_message, "%s: the C call failed with status %d", op->name, status);
    PyGILState_Release(g);
    goto done;
  }
  if (nret == 0) goto done; /* outputs given: nothing to return */
  if (nret != (uint64_t)p->nresults) {
    snprintf(t_message, sizeof t_message, "%s: %d results, its plan has %d", op->name, (int)nret, p->nresults);
    status = -1;
    goto done;
  }
  for (int j = 0; j < p->nresults; j++) /* the results are outputs made here */
    if (!made[p->results[j]]) {
      snprintf(t_message, sizeof t_message, "%s: result %d was not allocated by its plan", op->name, j);
      status = -1;
      goto done;
    }
  for (int j = 0; j < p->nresults; j++) {
    stack[j] = (stable_ivalue)(uintptr_t)made[p->results[j]];
    made[p->results[j]] = NULL;
  }
done:
  for (int i = 0; i < p->n; i++)
    if (made[i]) T.delete_tensor(made[i]);
  return status == 0 ? 0 : -1;
}

/* The call through the checked twin, which takes the stack (and what it owns) and leaves the
 * results on it; 0, or -1 with t_message set. */
static int run_checked(const fc_op *op, stable_ivalue *stack, uint64_t nret) {
  const int outer = t_in_checked; /* the twin's Python may call another operator (a kernel within) */
  t_in_checked = 1;
  aoti_error e = T.call_dispatcher(op->checked, "", stack, TORCH_2_10_0);
  t_in_checked = outer;
  if (e) {
    snprintf(t_message, sizeof t_message, "%s: the checked path failed (PyTorch logged why)", op->name);
    return -1;
  }
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *msg = t_checked_failure;
  t_checked_failure = NULL;
  if (msg) {
    PyObject *b = PyUnicode_AsEncodedString(msg, "utf-8", "replace");
    snprintf(t_message, sizeof t_message, "%s", b ? PyBytes_AsString(b) : "dsa: the checked path failed");
    Py_XDECREF(b);
    Py_DECREF(msg);
    PyErr_Clear();
  }
  PyGILState_Release(g);
  if (!msg) return 0;
  for (uint64_t j = 0; j < nret; j++) /* the twin's placeholders */
    if (stack[j]) T.delete_tensor((aten_tensor)(uintptr_t)stack[j]);
  return -1;
}

static void op_kernel(int k, stable_ivalue *stack, uint64_t nargs, uint64_t nret) {
  const fc_op *op = &g_ops[k];
  op_call c;
  memset(&c, 0, sizeof c);
  if (nargs != (uint64_t)op->nargs) {
    snprintf(t_message, sizeof t_message, "%s: called with %d arguments, registered with %d", op->name, (int)nargs,
             op->nargs);
    fail(t_message);
  }
  fc_plan *p = read_args(op, stack, &c) ? find_plan(op, &c) : NULL;
  if (!p) {
    if (run_checked(op, stack, nret)) fail(t_message);
    return;
  }
  int r = run(op, p, &c, stack, nret);
  release_plan(p);
  free_args(op, &c);
  if (r) fail(t_message);
}
