/* dmlops' launcher of kept kernel launches (see launch.py, KeptLaunch).

   Triton's own launcher converts every argument of the kernel from Python at each call (a Python object per
   parameter, and a driver query per tensor; a tensor descriptor's TMA tensor map made through Python). A kept
   launch has its parameters' bytes already: this launcher copies them, puts the call's addresses into the slots
   named in the config, encodes the tensor maps over their addresses, and calls cuLaunchKernel. It is compiled
   through Triton's build of launchers, with the CUDA headers Triton ships. */

#include "cuda.h"
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_SLOTS 64
#define MAX_REPLACED 16
#define MAX_TMA 4

/* The head of a config (bytes packed by launch.py), followed by slot_count 8-byte slots: each kernel parameter's
   value in the low bytes of its slot (little-endian), then Triton's two scratch pointers (parameter_count slots in
   all), then the global addresses of the tensor maps; then tma_count Tma records. */
typedef struct {
  uint64_t function;
  uint32_t grid[3];
  uint32_t threads;
  uint32_t shared_memory;
  uint32_t slot_count;
  uint32_t parameter_count;
  uint32_t tma_count;
  uint32_t replaced_count;
  uint32_t replaced[MAX_REPLACED];
  uint32_t device; /* its ordinal: whose primary context a thread without one takes */
} Head;

/* A TMA tensor map passed by value as a parameter, encoded at each launch over the address in its slot, as
   Triton's launcher encodes a host tensor descriptor's (dims and box innermost first, strides in bytes). */
typedef struct {
  uint32_t parameter;
  uint32_t address_slot;
  uint32_t data_type;
  uint32_t rank;
  uint32_t swizzle;
  uint32_t nan_fill;
  uint64_t dims[5];
  uint64_t strides[4];
  uint32_t box[5];
  uint32_t pad;
} Tma;

/* Raises the CUDA error as a RuntimeError naming the call that met it; returns NULL for the caller to return. */
static PyObject *cuda_error(const char *call, CUresult result) {
  const char *message = NULL;
  cuGetErrorString(result, &message);
  PyErr_Format(PyExc_RuntimeError, "dmlops %s: CUDA error %d (%s)", call, (int)result, message ? message : "?");
  return NULL;
}

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
  if (head.slot_count > MAX_SLOTS || head.parameter_count > head.slot_count || head.tma_count > MAX_TMA ||
      head.replaced_count > MAX_REPLACED ||
      size != (Py_ssize_t)(sizeof(Head) + 8 * head.slot_count + sizeof(Tma) * head.tma_count) ||
      nargs != 2 + (Py_ssize_t)head.replaced_count) {
    PyErr_SetString(PyExc_ValueError, "launch: config and arguments disagree");
    return NULL;
  }
  uint64_t slots[MAX_SLOTS];
  void *params[MAX_SLOTS];
  CUtensorMap maps[MAX_TMA];
  Tma tmas[MAX_TMA];
  memcpy(slots, config + sizeof(Head), 8 * head.slot_count);
  memcpy(tmas, config + sizeof(Head) + 8 * head.slot_count, sizeof(Tma) * head.tma_count);
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
  for (uint32_t i = 0; i < head.parameter_count; ++i)
    params[i] = &slots[i];
  for (uint32_t i = 0; i < head.tma_count; ++i)
    if (tmas[i].parameter >= head.parameter_count || tmas[i].address_slot >= head.slot_count || tmas[i].rank < 1 ||
        tmas[i].rank > 5) {
      PyErr_SetString(PyExc_ValueError, "launch: a tensor map out of place");
      return NULL;
    }
  CUresult result = CUDA_SUCCESS;
  Py_BEGIN_ALLOW_THREADS;
  static const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  for (uint32_t i = 0; i < head.tma_count && result == CUDA_SUCCESS; ++i) {
    const Tma *tma = &tmas[i];
    result = cuTensorMapEncodeTiled(&maps[i], (CUtensorMapDataType)tma->data_type, tma->rank,
                                    (void *)slots[tma->address_slot], tma->dims, tma->strides, tma->box,
                                    element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    (CUtensorMapSwizzle)tma->swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                    tma->nan_fill ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                                                  : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    params[tma->parameter] = &maps[i];
  }
  CUcontext context = NULL;
  if (result == CUDA_SUCCESS)
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
  if (result != CUDA_SUCCESS)
    return cuda_error("launch", result);
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
  if (result != CUDA_SUCCESS)
    return cuda_error("zero", result);
  Py_RETURN_NONE;
}

/* here(device, stream): whether launches kept for the device's stream may run there now: the calling thread's
   context is the device's and the stream is not capturing a graph (one call for two of torch's queries). */
static PyObject *here(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "here(device: int, stream: int)");
    return NULL;
  }
  long device = PyLong_AsLong(args[0]);
  uint64_t stream = PyLong_AsUnsignedLongLong(args[1]);
  if (PyErr_Occurred())
    return NULL;
  CUdevice wanted, current;
  CUstreamCaptureStatus status;
  if (cuDeviceGet(&wanted, (int)device) != CUDA_SUCCESS || cuCtxGetDevice(&current) != CUDA_SUCCESS ||
      current != wanted ||
      cuStreamIsCapturing((CUstream)stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE)
    Py_RETURN_FALSE;
  Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch(config, stream, *addresses)"},
    {"zero", (PyCFunction)(void (*)(void))zero, METH_FASTCALL, "zero(stream, address, bytes)"},
    {"here", (PyCFunction)(void (*)(void))here, METH_FASTCALL, "here(device, stream)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dmlops_launcher", NULL, -1, methods};

PyMODINIT_FUNC PyInit_dmlops_launcher(void) { return PyModule_Create(&module); }
