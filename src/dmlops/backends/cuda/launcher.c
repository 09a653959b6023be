/* dmlops' launcher of kept kernel launches (see launch.py, FastLaunch).

   Triton's own launcher converts every argument of the kernel from Python at each call (a Python object per
   parameter, and a driver query per tensor). A kept launch has its parameters' bytes already: this launcher copies
   them, puts the call's addresses into the slots named in the config, and calls cuLaunchKernel. It is compiled
   through Triton's build of launchers, with the CUDA headers Triton ships. */

#include "cuda.h"
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_SLOTS 64
#define MAX_REPLACED 16

/* The head of a config (bytes packed by launch.py), followed by slot_count 8-byte parameter slots: each kernel
   parameter's value in the low bytes of its slot (little-endian), then Triton's two scratch pointers. */
typedef struct {
  uint64_t function;
  uint32_t grid[3];
  uint32_t threads;
  uint32_t shared_memory;
  uint32_t slot_count;
  uint32_t replaced_count;
  uint32_t replaced[MAX_REPLACED];
  uint32_t device; /* its ordinal: whose primary context a thread without one takes */
} Head;

/* launch(config, stream, *addresses): the kernel launched on the stream, with the addresses in the replaced slots. */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 2 || !PyBytes_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "launch(config: bytes, stream: int, *addresses: int)");
    return NULL;
  }
  Head head;
  Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
  const char *config = PyBytes_AS_STRING(args[0]);
  if (size < (Py_ssize_t)sizeof(Head)) {
    PyErr_SetString(PyExc_ValueError, "launch: config too short");
    return NULL;
  }
  memcpy(&head, config, sizeof(Head));
  if (head.slot_count > MAX_SLOTS || head.replaced_count > MAX_REPLACED ||
      size != (Py_ssize_t)(sizeof(Head) + 8 * head.slot_count) || nargs != 2 + (Py_ssize_t)head.replaced_count) {
    PyErr_SetString(PyExc_ValueError, "launch: config and arguments disagree");
    return NULL;
  }
  uint64_t slots[MAX_SLOTS];
  void *params[MAX_SLOTS];
  memcpy(slots, config + sizeof(Head), 8 * head.slot_count);
  uint64_t stream = PyLong_AsUnsignedLongLong(args[1]);
  for (uint32_t i = 0; i < head.replaced_count; ++i) {
    if (head.replaced[i] >= head.slot_count) {
      PyErr_SetString(PyExc_ValueError, "launch: a replaced slot past the parameters");
      return NULL;
    }
    slots[head.replaced[i]] = PyLong_AsUnsignedLongLong(args[2 + i]);
  }
  if (PyErr_Occurred())
    return NULL;
  for (uint32_t i = 0; i < head.slot_count; ++i)
    params[i] = &slots[i];
  CUresult result;
  Py_BEGIN_ALLOW_THREADS;
  CUcontext context = NULL;
  result = cuCtxGetCurrent(&context);
  if (result == CUDA_SUCCESS && context == NULL) { /* a thread that has not used CUDA yet */
    CUdevice device;
    result = cuDeviceGet(&device, (int)head.device);
    if (result == CUDA_SUCCESS)
      result = cuDevicePrimaryCtxRetain(&context, device);
    if (result == CUDA_SUCCESS)
      result = cuCtxSetCurrent(context);
  }
  if (result == CUDA_SUCCESS)
    result = cuLaunchKernel((CUfunction)head.function, head.grid[0], head.grid[1], head.grid[2], head.threads, 1, 1,
                          head.shared_memory, (CUstream)stream, params, NULL);
  Py_END_ALLOW_THREADS;
  if (result != CUDA_SUCCESS) {
    const char *message = NULL;
    cuGetErrorString(result, &message);
    PyErr_Format(PyExc_RuntimeError, "dmlops launch: CUDA error %d (%s)", (int)result, message ? message : "?");
    return NULL;
  }
  Py_RETURN_NONE;
}

/* zero(stream, address, bytes): the memory zeroed on the stream (what a replayed launch adds into). */
static PyObject *zero(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "zero(stream: int, address: int, bytes: int)");
    return NULL;
  }
  uint64_t stream = PyLong_AsUnsignedLongLong(args[0]);
  uint64_t address = PyLong_AsUnsignedLongLong(args[1]);
  uint64_t bytes = PyLong_AsUnsignedLongLong(args[2]);
  if (PyErr_Occurred())
    return NULL;
  CUresult result;
  Py_BEGIN_ALLOW_THREADS;
  result = cuMemsetD8Async((CUdeviceptr)address, 0, (size_t)bytes, (CUstream)stream);
  Py_END_ALLOW_THREADS;
  if (result != CUDA_SUCCESS) {
    const char *message = NULL;
    cuGetErrorString(result, &message);
    PyErr_Format(PyExc_RuntimeError, "dmlops zero: CUDA error %d (%s)", (int)result, message ? message : "?");
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch(config, stream, *addresses)"},
    {"zero", (PyCFunction)(void (*)(void))zero, METH_FASTCALL, "zero(stream, address, bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dmlops_launcher", NULL, -1, methods};

PyMODINIT_FUNC PyInit_dmlops_launcher(void) { return PyModule_Create(&module); }
