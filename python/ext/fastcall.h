/*
 * fastcall.h — what the two halves of dsa._fastcall share (internal).
 *
 * fastcall.c keeps the plans: per public call (a site), the most recent signatures that passed the
 * checked path, each with its C argument struct. It serves dsa's Python calls, matching a call's
 * tensors as Python objects. torch_op.c serves torch.ops.dsa.*: PyTorch's dispatcher calls it with
 * C handles of the same tensors, so each plan also keeps its signature in plain C (fc_csig), made
 * once when the plan is remembered.
 *
 * Every plan and site is read and changed with the GIL held.
 */
#ifndef DSA_FASTCALL_H
#define DSA_FASTCALL_H

#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FC_MAX_ARGS 12         /* tensor arguments of a call */
#define FC_MAX_SCALARS 12      /* scalars of a call */
#define FC_MAX_DIMS 6          /* dimensions of a tensor whose signature has a C form */
#define FC_MAX_STRUCT 512      /* bytes of a C argument struct (dsa.h's largest: 184) */
#define FC_MAX_SITES 64        /* public calls */
#define FC_PLANS_PER_SITE 16   /* signatures kept a call (prefill chunks of many sizes evict the oldest) */
#define FC_SKIP (-1)           /* offset: the argument's pointer is not written */
#define FC_WORKSPACE (-2)      /* offset: the argument is the workspace, passed beside the struct */

typedef int (*fc_fn_workspace)(const void *args, void *workspace, size_t workspace_bytes, void *stream);
typedef int (*fc_fn_plain)(const void *args, void *stream);

/* The dtypes dsa takes, by PyTorch's name (fc_dtype_names); torch_op.c maps them to PyTorch's codes. */
enum { FC_DT_BF16, FC_DT_F16, FC_DT_F32, FC_DT_I32, FC_DT_I64, FC_DT_U8, FC_DT_I8, FC_DT_F8E4M3, FC_DT_COUNT };
extern const char *const fc_dtype_names[FC_DT_COUNT];
extern const int fc_dtype_bytes[FC_DT_COUNT]; /* an element's bytes */

/* A scalar of a call: None, an int (bools are ints), a float or a str; compared as Python compares them. */
/* FC_OTHER: a scalar the plan keys by Python equality alone (a str: cp_candidates' layout); it has no C
 * value, so it matches no torch.ops call's scalar (torch_op.c), while the dsa.* fast path keeps its
 * C form (tensors read and outputs made in C). */
enum { FC_NONE, FC_INT, FC_FLOAT, FC_OTHER };
typedef struct {
  int kind;
  int64_t i;
  double f;
} fc_scalar;

/* A tensor argument's signature in C: ndim -1 for None. */
typedef struct {
  int ndim;
  int dtype;   /* FC_DT_* */
  long device; /* get_device(): the CUDA ordinal, -1 on the CPU */
  int64_t size[FC_MAX_DIMS], stride[FC_MAX_DIMS];
} fc_csig;

typedef struct {
  int refs;                               /* the site's list, and each call running it */
  int n;                                  /* tensor arguments */
  PyObject *type[FC_MAX_ARGS];            /* the argument's type; NULL: it was None */
  PyObject *shape[FC_MAX_ARGS];           /* its shape, strides, dtype (references held) */
  PyObject *stride[FC_MAX_ARGS];
  PyObject *dtype[FC_MAX_ARGS];
  long device[FC_MAX_ARGS];               /* get_device() */
  Py_ssize_t offset[FC_MAX_ARGS];         /* struct offset of its pointer, FC_SKIP or FC_WORKSPACE */
  PyObject *alloc_args[FC_MAX_ARGS];      /* torch.empty's (shape,) where the call allocates it, else NULL */
  PyObject *alloc_kwargs[FC_MAX_ARGS];    /* and its {dtype, device} */
  int nresults;
  int results[FC_MAX_ARGS];               /* the arguments returned, by position */
  PyObject *scalars;                      /* tuple */
  size_t args_bytes;
  _Alignas(16) unsigned char args[FC_MAX_STRUCT]; /* the struct as the checked path built it */
  void *fn;                               /* the library function */
  int takes_workspace;
  size_t ws_given_bytes;                  /* the bytes of a given workspace (its signature fixes them) */
  size_t ws_need;                         /* the bytes of one allocated here */
  PyObject *device_index;                 /* int, for the current-stream getter */
  /* The same signature in C, for torch_op.c; c_ok 0 where a part has no C form (more than
   * FC_MAX_DIMS dimensions, a dtype dsa does not take, a scalar that is not None, int, float or str). */
  int c_ok;
  fc_csig csig[FC_MAX_ARGS];
  int nscalars;
  fc_scalar cscalar[FC_MAX_SCALARS];
  fc_csig calloc[FC_MAX_ARGS];            /* what is allocated where the call allocates (ndim -1: nothing) */
  long c_device;                          /* the device it runs on (get_device() of its first input) */
  int c_on_cpu;                           /* its tensors are on the CPU (tests): its outputs too, no stream */
} fc_plan;

typedef struct {
  int count;
  fc_plan *plan[FC_PLANS_PER_SITE]; /* most recently used first */
} fc_site;

extern fc_site fc_sites[FC_MAX_SITES];
/* Callbacks given by dsa/_fast.py: fail(status) raises DsaError with the library's message. */
extern PyObject *fc_fail_callback;

void fc_plan_release(fc_plan *p);

/* Argument i's pointer where plan p puts it: its struct field (args, the plan's struct copied), or
 * beside it as the workspace (made here: the plan's needed size; else the given one's). */
static inline void fc_plan_put(const fc_plan *p, int i, void *ptr, int made, unsigned char *args, void **ws,
                               size_t *ws_bytes) {
  if (p->offset[i] == FC_WORKSPACE) {
    *ws = ptr;
    *ws_bytes = made ? p->ws_need : p->ws_given_bytes;
  } else if (p->offset[i] >= 0) {
    memcpy(args + p->offset[i], &ptr, sizeof ptr);
  }
}

/* Plan p's library function on the struct: its status. */
static inline int fc_plan_call(const fc_plan *p, const unsigned char *args, void *ws, size_t ws_bytes, void *stream) {
  return p->takes_workspace ? ((fc_fn_workspace)p->fn)(args, ws, ws_bytes, stream) : ((fc_fn_plain)p->fn)(args, stream);
}
/* A Python scalar's C form: 0, or -1 with an exception set (not None, an int or a float). */
int fc_scalar_from_python(PyObject *v, fc_scalar *s);

/* Whether two C signatures are the same (shape, strides, dtype, device; both None counts). */
static inline int fc_same_sig(const fc_csig *a, const fc_csig *b) {
  if (a->ndim != b->ndim) return 0;
  if (a->ndim < 0) return 1;
  return a->dtype == b->dtype && a->device == b->device && !memcmp(a->size, b->size, (size_t)a->ndim * sizeof(int64_t)) &&
         !memcmp(a->stride, b->stride, (size_t)a->ndim * sizeof(int64_t));
}

/* torch_op.c: plan p's allocations which[0 .. k) (calloc[i], on the plan's device) made by PyTorch's
 * C++ allocator and handed to Python by one steal([handles]) call (fastcall.c: the fast path's
 * outputs): out[j] a new reference, ptr[j] its data; 0, or -1 with an exception set and nothing made.
 * A workspace made beside an output lies in that output's storage: its out[j] is None, and *ws_in is
 * the j of the output holding it (else -1). */
int fc_torch_new_tensors(const fc_plan *p, const int *which, int k, PyObject *steal, PyObject **out, void **ptr,
                         int *ws_in);
int fc_torch_ready(void);
/* torch_op.c: a torch.Tensor's C signature and data pointer read in C through the at::Tensor the
 * object holds (torch_borrow_setup proved where); 0 where that is not possible (the object is not a
 * plain torch.Tensor, or has no C form): its Python attributes then answer. */
int fc_torch_borrowed_sig(PyObject *x, fc_csig *s, void **ptr);

/* torch_op.c: the module's functions for torch.ops.dsa (dsa/ops.py) */
PyObject *fc_torch_setup(PyObject *self, PyObject *args);
PyObject *fc_torch_borrow_setup(PyObject *self, PyObject *args);
PyObject *fc_torch_register(PyObject *self, PyObject *args);
PyObject *fc_torch_checked_failed(PyObject *self, PyObject *args);

#endif
