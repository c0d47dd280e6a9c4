/*
 * fastcall.c — dsa._fastcall: the fast path of dsa's Python calls (dsa/_fast.py) in C.
 *
 * A public call whose tensor arguments and scalars have the signature of an earlier call that passed
 * the checked path (each tensor's type, shape, strides, dtype and device; the scalars equal) reuses
 * that call's plan: its C argument struct, copied, with each tensor's data_ptr() written at the
 * field's offset; the outputs (and workspace) the caller did not give allocated with torch.empty;
 * the stream; the library's C function called directly with the GIL released. Plans are made in
 * Python (dsa/_fast.py: remember) and kept here, a few a call site, the most recently used first.
 *
 * What this saves over the Python implementation of the same plans: the signature tuple built and
 * hashed a call, ctypes' struct copy and argument conversion, and the interpreter between them.
 * From PyTorch 2.10 (torch_op.c) also PyTorch's Python answers: a plain torch.Tensor's shape,
 * strides, dtype, device and data pointer are read in C through the at::Tensor the object holds
 * (fc_torch_borrowed_sig; other tensors, or a plan without a C form, ask shape, stride(), dtype,
 * get_device() and data_ptr()), and the outputs are made by PyTorch's C++ allocator and handed to
 * Python in one call. CPU-only machine, C a no-op: sparse_mla 0.7 us a call with its outputs given,
 * 2.8 asking the attributes in Python, 6.2 in the Python implementation (dev/host_call_cost.py).
 *
 * Python's limited API (3.9): one build serves every CPython from 3.9 on (the wheel's abi3 tag).
 * Every plan and callback is used with the GIL held; the C call alone runs without it. A call that
 * runs Python code (a tensor's getters, torch.empty, the stream getters) may let another thread
 * remember or clear plans meanwhile: a plan in use is reference counted, and a scan of a site's
 * plans gives up (the checked path then runs) when the plans changed under it.
 */
#include "fastcall.h"

#include <string.h>

fc_site fc_sites[FC_MAX_SITES];
static unsigned long g_generation; /* counts changes to any site's plans */
/* Callbacks (dsa/_fast.py: _configure): current_stream(device_index) -> int, stream_handle(stream)
 * -> int, keep_for_stream(tensor, handle), fail(status) raises, torch.empty. */
static PyObject *g_current_stream, *g_stream_handle, *g_keep_for_stream, *g_empty;
/* torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs where torch_op.c can allocate (else None):
 * outputs made in C++ (about 1.3 us less than torch.empty's Python call each, CPU-only machine) */
static PyObject *g_steal;
PyObject *fc_fail_callback;
static PyObject *s_shape, *s_stride, *s_dtype, *s_get_device, *s_data_ptr; /* interned names */

/* ---- plans ------------------------------------------------------------------------------------ */

static void plan_free(fc_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) {
    Py_XDECREF(p->type[i]);
    Py_XDECREF(p->shape[i]);
    Py_XDECREF(p->stride[i]);
    Py_XDECREF(p->dtype[i]);
    Py_XDECREF(p->alloc_args[i]);
    Py_XDECREF(p->alloc_kwargs[i]);
  }
  Py_XDECREF(p->scalars);
  Py_XDECREF(p->device_index);
  PyMem_Free(p);
}

void fc_plan_release(fc_plan *p) {
  if (p && --p->refs == 0) plan_free(p);
}

static int site_index(PyObject *o) {
  long s = PyLong_AsLong(o);
  if (s == -1 && PyErr_Occurred()) return -1;
  if (s < 0 || s >= FC_MAX_SITES) {
    PyErr_SetString(PyExc_ValueError, "dsa._fastcall: site index out of range");
    return -1;
  }
  return (int)s;
}

static int as_size(PyObject *tuple, Py_ssize_t i, size_t *out) {
  PyObject *o = PyTuple_GetItem(tuple, i);
  if (!o) return -1;
  size_t v = PyLong_AsSize_t(o);
  if (v == (size_t)-1 && PyErr_Occurred()) return -1;
  *out = v;
  return 0;
}

const char *const fc_dtype_names[FC_DT_COUNT] = {"torch.bfloat16", "torch.float16", "torch.float32",
                                                   "torch.int32",    "torch.int64",   "torch.uint8",
                                                   "torch.int8",     "torch.float8_e4m3fn"};
const int fc_dtype_bytes[FC_DT_COUNT] = {2, 2, 4, 4, 8, 1, 1, 1};

int fc_scalar_from_python(PyObject *v, fc_scalar *s) {
  if (v == Py_None) {
    s->kind = FC_NONE;
  } else if (PyFloat_Check(v)) {
    s->kind = FC_FLOAT;
    s->f = PyFloat_AsDouble(v);
  } else if (PyLong_Check(v)) { /* bool too */
    s->kind = FC_INT;
    if ((s->i = PyLong_AsLongLong(v)) == -1 && PyErr_Occurred()) return -1;
  } else if (PyUnicode_Check(v)) {
    s->kind = FC_OTHER;
  } else {
    PyErr_SetString(PyExc_TypeError, "dsa._fastcall: a scalar with a C form is None, an int, a float or a str");
    return -1;
  }
  return 0;
}

/* FC_DT_* of a torch dtype, or -1. */
static int dtype_code(PyObject *dtype) {
  PyObject *s = dtype ? PyObject_Str(dtype) : NULL;
  int code = -1;
  for (int d = 0; s && d < FC_DT_COUNT && code < 0; d++)
    if (PyUnicode_CompareWithASCIIString(s, fc_dtype_names[d]) == 0) code = d;
  Py_XDECREF(s);
  return code;
}

/* A tuple of ints into out[FC_MAX_DIMS]: how many, or -1. */
static int int64s(PyObject *t, int64_t *out) {
  if (!t || !PyTuple_Check(t) || PyTuple_Size(t) > FC_MAX_DIMS) return -1;
  int n = (int)PyTuple_Size(t);
  for (int i = 0; i < n; i++) {
    out[i] = PyLong_AsLongLong(PyTuple_GetItem(t, i));
    if (out[i] == -1 && PyErr_Occurred()) return -1;
  }
  return n;
}

/* The plan's signature in C (fastcall.h: fc_csig), for torch_op.c. Leaves c_ok 0 where a part has no
 * C form; never fails. */
static void plan_c_form(fc_plan *p) {
  p->c_ok = 0;
  for (int i = 0; i < p->n; i++) {
    fc_csig *c = &p->csig[i];
    c->ndim = -1;
    p->calloc[i].ndim = -1;
    if (p->type[i]) {
      if ((c->ndim = int64s(p->shape[i], c->size)) < 0 || int64s(p->stride[i], c->stride) != c->ndim ||
          (c->dtype = dtype_code(p->dtype[i])) < 0)
        goto out;
      c->device = p->device[i];
    }
    if (p->alloc_args[i]) {
      fc_csig *a = &p->calloc[i];
      PyObject *dtype = PyDict_GetItemString(p->alloc_kwargs[i], "dtype"); /* borrowed */
      if ((a->ndim = int64s(PyTuple_GetItem(p->alloc_args[i], 0), a->size)) < 0 || (a->dtype = dtype_code(dtype)) < 0)
        goto out;
      for (int d = a->ndim - 1; d >= 0; d--) a->stride[d] = d == a->ndim - 1 ? 1 : a->stride[d + 1] * a->size[d + 1];
    }
  }
  Py_ssize_t ns = PyTuple_Size(p->scalars);
  if (ns > FC_MAX_SCALARS) goto out;
  p->nscalars = (int)ns;
  for (int j = 0; j < p->nscalars; j++)
    if (fc_scalar_from_python(PyTuple_GetItem(p->scalars, j), &p->cscalar[j])) goto out;
  if ((p->c_device = PyLong_AsLong(p->device_index)) == -1 && PyErr_Occurred()) goto out;
  p->c_on_cpu = 0;
  for (int i = 0; i < p->n; i++)
    if (p->csig[i].ndim >= 0) {
      p->c_on_cpu = p->csig[i].device == -1;
      break;
    }
  p->c_ok = 1;
out:
  PyErr_Clear();
}

/* remember(site, (signature, scalars, offsets, allocs, results, args_bytes, fn, takes_workspace,
 *                 ws_given_bytes, ws_need, device_index)); signature: per argument None or
 * (type, shape, stride, dtype, device); allocs: per argument None or ((shape,), {dtype, device}). */
static PyObject *fc_remember(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *site_o, *t;
  if (!PyArg_ParseTuple(args, "OO!", &site_o, &PyTuple_Type, &t)) return NULL;
  int site = site_index(site_o);
  if (site < 0) return NULL;
  if (PyTuple_Size(t) != 11) return PyErr_Format(PyExc_ValueError, "dsa._fastcall.remember: a plan has 11 parts");
  PyObject *sig = PyTuple_GetItem(t, 0), *scalars = PyTuple_GetItem(t, 1), *offsets = PyTuple_GetItem(t, 2),
           *allocs = PyTuple_GetItem(t, 3), *results = PyTuple_GetItem(t, 4), *bytes = PyTuple_GetItem(t, 5);
  if (!PyTuple_Check(sig) || !PyTuple_Check(scalars) || !PyTuple_Check(offsets) || !PyTuple_Check(allocs) ||
      !PyTuple_Check(results) || !PyBytes_Check(bytes))
    return PyErr_Format(PyExc_TypeError, "dsa._fastcall.remember: malformed plan");
  Py_ssize_t n = PyTuple_Size(sig), nr = PyTuple_Size(results), nb = PyBytes_Size(bytes);
  if (n > FC_MAX_ARGS || PyTuple_Size(offsets) != n || PyTuple_Size(allocs) != n || nr > n || nb > FC_MAX_STRUCT)
    Py_RETURN_FALSE; /* not a plan this module can hold: the Python implementation serves it */
  fc_plan *p = (fc_plan *)PyMem_Calloc(1, sizeof(fc_plan));
  if (!p) return PyErr_NoMemory();
  p->n = (int)n;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *s = PyTuple_GetItem(sig, i);
    if (s != Py_None) {
      long dev;
      if (!PyTuple_Check(s) || PyTuple_Size(s) != 5 ||
          ((dev = PyLong_AsLong(PyTuple_GetItem(s, 4))) == -1 && PyErr_Occurred()))
        goto malformed;
      p->type[i] = PyTuple_GetItem(s, 0);
      p->shape[i] = PyTuple_GetItem(s, 1);
      p->stride[i] = PyTuple_GetItem(s, 2);
      p->dtype[i] = PyTuple_GetItem(s, 3);
      Py_INCREF(p->type[i]);
      Py_INCREF(p->shape[i]);
      Py_INCREF(p->stride[i]);
      Py_INCREF(p->dtype[i]);
      p->device[i] = dev;
    }
    long off = PyLong_AsLong(PyTuple_GetItem(offsets, i));
    if ((off == -1 && PyErr_Occurred()) || off < FC_WORKSPACE || off > (long)(nb - (Py_ssize_t)sizeof(void *)))
      goto malformed;
    p->offset[i] = off;
    PyObject *a = PyTuple_GetItem(allocs, i);
    if (a != Py_None) {
      if (!PyTuple_Check(a) || PyTuple_Size(a) != 2 || !PyTuple_Check(PyTuple_GetItem(a, 0)) ||
          !PyDict_Check(PyTuple_GetItem(a, 1)))
        goto malformed;
      p->alloc_args[i] = PyTuple_GetItem(a, 0);
      p->alloc_kwargs[i] = PyTuple_GetItem(a, 1);
      Py_INCREF(p->alloc_args[i]);
      Py_INCREF(p->alloc_kwargs[i]);
    }
  }
  p->nresults = (int)nr;
  for (Py_ssize_t j = 0; j < nr; j++) {
    long r = PyLong_AsLong(PyTuple_GetItem(results, j));
    if (r < 0 || r >= n) goto malformed;
    p->results[j] = (int)r;
  }
  p->scalars = scalars;
  Py_INCREF(scalars);
  p->args_bytes = (size_t)nb;
  memcpy(p->args, PyBytes_AsString(bytes), (size_t)nb);
  p->fn = PyLong_AsVoidPtr(PyTuple_GetItem(t, 6));
  p->takes_workspace = PyObject_IsTrue(PyTuple_GetItem(t, 7));
  if ((!p->fn && PyErr_Occurred()) || p->takes_workspace < 0 || as_size(t, 8, &p->ws_given_bytes) ||
      as_size(t, 9, &p->ws_need))
    goto fail;
  if (!p->fn) goto malformed;
  p->device_index = PyTuple_GetItem(t, 10);
  Py_INCREF(p->device_index);

  plan_c_form(p);

  fc_site *st = &fc_sites[site];
  if (st->count == FC_PLANS_PER_SITE) fc_plan_release(st->plan[--st->count]);
  memmove(&st->plan[1], &st->plan[0], (size_t)st->count * sizeof st->plan[0]);
  p->refs = 1;
  st->plan[0] = p;
  st->count++;
  g_generation++;
  Py_RETURN_TRUE;
malformed:
  if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "dsa._fastcall.remember: malformed plan");
fail:
  plan_free(p);
  return NULL;
}

static PyObject *fc_clear(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  for (int s = 0; s < FC_MAX_SITES; s++) {
    for (int i = 0; i < fc_sites[s].count; i++) fc_plan_release(fc_sites[s].plan[i]);
    fc_sites[s].count = 0;
  }
  g_generation++;
  Py_RETURN_NONE;
}

static PyObject *fc_count(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  long n = 0;
  for (int s = 0; s < FC_MAX_SITES; s++) n += fc_sites[s].count;
  return PyLong_FromLong(n);
}

static PyObject *fc_configure(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *cur, *handle, *keep, *fail, *empty, *steal;
  if (!PyArg_ParseTuple(args, "OOOOOO", &cur, &handle, &keep, &fail, &empty, &steal)) return NULL;
  PyObject **slot[6] = {&g_current_stream, &g_stream_handle, &g_keep_for_stream, &fc_fail_callback, &g_empty, &g_steal};
  PyObject *value[6] = {cur, handle, keep, fail, empty, steal};
  for (int i = 0; i < 6; i++) {
    PyObject *old = *slot[i];
    Py_INCREF(value[i]);
    *slot[i] = value[i];
    Py_XDECREF(old);
  }
  Py_RETURN_NONE;
}

/* ---- a call ----------------------------------------------------------------------------------- */

/* One call's tensor attributes, fetched when a plan first asks for them: read in C where the
 * tensor allows (torch_op.c: fc_torch_borrowed_sig), else its Python attributes. */
typedef struct {
  signed char c_state[FC_MAX_ARGS]; /* 1: csig and ptr read in C; -1: not readable so; 0: not asked */
  fc_csig csig[FC_MAX_ARGS];
  void *ptr[FC_MAX_ARGS];
  PyObject *shape[FC_MAX_ARGS], *stride[FC_MAX_ARGS], *dtype[FC_MAX_ARGS];
  long device[FC_MAX_ARGS];
  unsigned char have_device[FC_MAX_ARGS];
} fc_attrs;

static void attrs_release(fc_attrs *a, int n) {
  for (int i = 0; i < n; i++) {
    Py_XDECREF(a->shape[i]);
    Py_XDECREF(a->stride[i]);
    Py_XDECREF(a->dtype[i]);
  }
}

/* 1 when v (fetched into *slot on first use) equals want, 0 when not, -1 on an error. */
static int same(PyObject *x, PyObject *name, int method, PyObject **slot, PyObject *want) {
  if (!*slot) {
    *slot = method ? PyObject_CallMethodObjArgs(x, name, NULL) : PyObject_GetAttr(x, name);
    if (!*slot) return -1;
  }
  return *slot == want ? 1 : PyObject_RichCompareBool(*slot, want, Py_EQ);
}

/* Whether the call's arguments have plan p's signature. An attribute that cannot be read counts as a
 * mismatch (the checked path then runs and names the argument). */
static int matches(const fc_plan *p, PyObject *tensors, PyObject *scalars, fc_attrs *a) {
  int r = p->scalars == scalars ? 1 : PyObject_RichCompareBool(p->scalars, scalars, Py_EQ);
  if (r != 1) goto out;
  for (int i = 0; i < p->n; i++) {
    PyObject *x = PyTuple_GetItem(tensors, i);
    if (x == Py_None || !p->type[i]) {
      if (x != Py_None || p->type[i]) return 0;
      continue;
    }
    if ((PyObject *)Py_TYPE(x) != p->type[i]) return 0;
    if (p->c_ok) { /* no Python: the plan's C form against the tensor's, read in C */
      if (!a->c_state[i]) a->c_state[i] = fc_torch_borrowed_sig(x, &a->csig[i], &a->ptr[i]) ? 1 : -1;
      if (a->c_state[i] == 1) {
        if (!fc_same_sig(&a->csig[i], &p->csig[i])) return 0;
        continue;
      }
    }
    if ((r = same(x, s_shape, 0, &a->shape[i], p->shape[i])) != 1) goto out;
    if ((r = same(x, s_stride, 1, &a->stride[i], p->stride[i])) != 1) goto out;
    if ((r = same(x, s_dtype, 0, &a->dtype[i], p->dtype[i])) != 1) goto out;
    if (!a->have_device[i]) {
      PyObject *d = PyObject_CallMethodObjArgs(x, s_get_device, NULL);
      if (!d) goto error;
      a->device[i] = PyLong_AsLong(d);
      Py_DECREF(d);
      if (a->device[i] == -1 && PyErr_Occurred()) goto error;
      a->have_device[i] = 1;
    }
    if (a->device[i] != p->device[i]) return 0;
  }
  return 1;
out:
  if (r >= 0) return 0;
error:
  PyErr_Clear();
  return 0;
}

static void *data_ptr(PyObject *x) {
  PyObject *v = PyObject_CallMethodObjArgs(x, s_data_ptr, NULL);
  if (!v) return NULL;
  void *ptr = PyLong_AsVoidPtr(v);
  Py_DECREF(v);
  return ptr;
}

/* The call through plan p: the struct, the allocations, the stream, the C function; the results.
 * a: the tensors' attributes as matches() left them (pointers read in C where it read them). */
static PyObject *run(const fc_plan *p, PyObject *tensors, PyObject *stream, const fc_attrs *a) {
  _Alignas(16) unsigned char args[FC_MAX_STRUCT];
  memcpy(args, p->args, p->args_bytes);
  PyObject *got[FC_MAX_ARGS] = {0}; /* new references */
  PyObject *workspace_made = NULL, *handle = NULL, *result = NULL;
  void *ws = NULL;
  size_t ws_bytes = 0;
  /* the outputs to make: in C++ (PyTorch >= 2.10), all in one call, else each by torch.empty */
  const int in_cxx = g_steal && g_steal != Py_None && p->c_ok && fc_torch_ready();
  int which[FC_MAX_ARGS], k = 0;
  PyObject *made_cxx[FC_MAX_ARGS];
  void *made_ptr[FC_MAX_ARGS];
  for (int i = 0; in_cxx && i < p->n; i++)
    if (PyTuple_GetItem(tensors, i) == Py_None && p->alloc_args[i]) which[k++] = i;
  int ws_in = -1; /* the made output whose storage holds the made workspace */
  if (k && fc_torch_new_tensors(p, which, k, g_steal, made_cxx, made_ptr, &ws_in)) return NULL;
  for (int i = 0, j = 0; i < p->n; i++) {
    PyObject *x = PyTuple_GetItem(tensors, i);
    void *ptr = NULL;
    int made = 0, have_ptr = 0;
    if (j < k && which[j] == i) {
      x = made_cxx[j];
      ptr = made_ptr[j++];
      made = have_ptr = 1;
    } else if (x == Py_None && p->alloc_args[i]) {
      if (!g_empty || g_empty == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, "dsa._fastcall: no torch.empty to allocate with");
        goto done;
      }
      if (!(x = PyObject_Call(g_empty, p->alloc_args[i], p->alloc_kwargs[i]))) goto done;
      made = 1;
    } else {
      Py_INCREF(x);
      if (a->c_state[i] == 1) ptr = a->ptr[i], have_ptr = 1;
    }
    got[i] = x;
    if (p->offset[i] == FC_SKIP) continue;
    if (x != Py_None && !have_ptr && !(ptr = data_ptr(x)) && PyErr_Occurred()) goto done;
    fc_plan_put(p, i, ptr, made, args, &ws, &ws_bytes);
    if (made && p->offset[i] == FC_WORKSPACE) workspace_made = x == Py_None && ws_in >= 0 ? made_cxx[ws_in] : x;
  }
  if (PyLong_CheckExact(stream)) { /* a handle */
    handle = stream;
    Py_INCREF(handle);
  } else {
    handle = stream == Py_None ? PyObject_CallFunctionObjArgs(g_current_stream, p->device_index, NULL)
                               : PyObject_CallFunctionObjArgs(g_stream_handle, stream, NULL);
    if (!handle) goto done;
  }
  void *s = PyLong_AsVoidPtr(handle);
  if (!s && PyErr_Occurred()) goto done;
  int status;
  Py_BEGIN_ALLOW_THREADS /* p stays: the call holds a reference */
  status = fc_plan_call(p, args, ws, ws_bytes, s);
  Py_END_ALLOW_THREADS
  if (status != 0) {
    PyObject *r = PyObject_CallFunction(fc_fail_callback, "i", status);
    if (r) { /* fail() raises; should it return, the call still failed */
      Py_DECREF(r);
      PyErr_Format(PyExc_RuntimeError, "dsa: C call failed with status %d", status);
    }
    goto done;
  }
  if (workspace_made && stream != Py_None) { /* allocated on the current stream, used on another */
    PyObject *r = PyObject_CallFunctionObjArgs(g_keep_for_stream, workspace_made, handle, NULL);
    if (!r) goto done;
    Py_DECREF(r);
  }
  if (!(result = PyTuple_New(p->nresults))) goto done;
  for (int j = 0; j < p->nresults; j++) {
    PyObject *x = got[p->results[j]];
    Py_INCREF(x);
    PyTuple_SetItem(result, j, x); /* steals */
  }
done:
  for (int i = 0; i < p->n; i++) Py_XDECREF(got[i]);
  for (int j = 0; j < k; j++) /* made but not reached by the loop (it stopped early) */
    if (!got[which[j]]) Py_DECREF(made_cxx[j]);
  Py_XDECREF(handle);
  return result;
}

/* call(site, tensors, scalars, stream): the results (a tuple), or None when no plan of the site has
 * these arguments' signature. */
static PyObject *fc_call(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *site_o, *tensors, *scalars, *stream;
  if (!PyArg_ParseTuple(args, "OO!O!O", &site_o, &PyTuple_Type, &tensors, &PyTuple_Type, &scalars, &stream))
    return NULL;
  int site = site_index(site_o);
  if (site < 0) return NULL;
  fc_site *st = &fc_sites[site];
  if (st->count == 0) Py_RETURN_NONE;
  Py_ssize_t n = PyTuple_Size(tensors);
  if (n > FC_MAX_ARGS) Py_RETURN_NONE;
  fc_attrs a;
  memset(a.c_state, 0, sizeof a.c_state);
  memset(a.shape, 0, sizeof a.shape);
  memset(a.stride, 0, sizeof a.stride);
  memset(a.dtype, 0, sizeof a.dtype);
  memset(a.have_device, 0, sizeof a.have_device);
  const unsigned long generation = g_generation;
  for (int k = 0; k < st->count; k++) {
    fc_plan *p = st->plan[k];
    if (p->n != n) continue;
    p->refs++;
    int same_plan = matches(p, tensors, scalars, &a);
    if (g_generation != generation) { /* the plans changed under the scan (another thread) */
      fc_plan_release(p);
      break;
    }
    if (!same_plan) {
      fc_plan_release(p);
      continue;
    }
    if (k > 0) { /* most recently used first */
      memmove(&st->plan[1], &st->plan[0], (size_t)k * sizeof st->plan[0]);
      st->plan[0] = p;
    }
    attrs_release(&a, (int)n);
    PyObject *result = run(p, tensors, stream, &a);
    fc_plan_release(p);
    return result;
  }
  attrs_release(&a, (int)n);
  Py_RETURN_NONE;
}

static PyMethodDef fc_methods[] = {
    {"call", fc_call, METH_VARARGS, "call(site, tensors, scalars, stream) -> results, or None without a plan"},
    {"remember", fc_remember, METH_VARARGS, "remember(site, plan) -> whether it is kept"},
    {"configure", fc_configure, METH_VARARGS,
     "configure(current_stream, stream_handle, keep_for_stream, fail, torch_empty, steal or None)"},
    {"clear", fc_clear, METH_NOARGS, "forgets every plan"},
    {"count", fc_count, METH_NOARGS, "plans kept"},
    {"torch_setup", fc_torch_setup, METH_VARARGS,
     "torch_setup(libtorch_cpu_path, libtorch_cuda_path or None) -> whether PyTorch's stable C ABI is usable"},
    {"torch_borrow_setup", fc_torch_borrow_setup, METH_VARARGS,
     "torch_borrow_setup(torch.Tensor, probes, unsafe_alloc_void_ptrs_from_tensors) -> whether tensors are read in C"},
    {"torch_register", fc_torch_register, METH_VARARGS,
     "torch_register(namespace, dispatch_key, name, site, kinds, tensor_args, scalar_args, checked) -> None"},
    {"torch_checked_failed", fc_torch_checked_failed, METH_VARARGS,
     "torch_checked_failed(message): the checked operator's failure, for the kernel that called it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fc_module = {PyModuleDef_HEAD_INIT, "dsa._fastcall",
                                       "The fast path of dsa's Python calls in C (dsa/_fast.py).", -1, fc_methods,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastcall(void) {
  if (!(s_shape = PyUnicode_InternFromString("shape")) || !(s_stride = PyUnicode_InternFromString("stride")) ||
      !(s_dtype = PyUnicode_InternFromString("dtype")) || !(s_get_device = PyUnicode_InternFromString("get_device")) ||
      !(s_data_ptr = PyUnicode_InternFromString("data_ptr")))
    return NULL;
  return PyModule_Create(&fc_module);
}
