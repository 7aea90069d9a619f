"""CPython entry points into the cpu target's kernels: a launch costs what a call of a
built-in function costs, not what ctypes costs.

Through ctypes, a launch of a small kernel costs 1.5-2 us of host time alone (the data
pointers fetched in Python, an int64 array built, ctypes converting its argument), and
2-8 us inside a real step, where its code is cold; a step of a small model launches
dozens. Inductor's kernels are called through CPython bindings at 0.1-0.6 us.

`entries()` is a pair of built-in functions from one small library, `ENTRY_SOURCE`,
compiled once per machine and Python (the disk cache, sealed as every library is):

    launch(function, flags, *arguments) -> int
        `function`: the address of a kernel's `<name>_packed` (PREAMBLE's call_packed);
        `arguments`: tensors (their data pointers) and ints (the syms), in the kernel's
        parameter order; flags: FLAG_ERRORS (the kernel takes an error cell, appended
        last: its code is returned, 0 when nothing went wrong), FLAG_RELEASE (the GIL is
        released while the kernel runs, as ctypes released it: for kernels large enough
        that another Python thread's time matters).
    chain(fs_chain, table, *buffers) -> int
        PREAMBLE's `fs_chain` of a library: the kernels of `table` (build.chain) in order;
        returns the chain's error cell.

Each argument is checked: an int, or a `torch.Tensor` (whose data pointer torch's own
C function gives, the one Inductor's bindings use, `_torchinductor_pyobject_tensor_data_ptr`;
where a torch does not have it, its `data_ptr()` method is called). Anything else
raises TypeError, never a crash. The kernels' libraries themselves do not include
Python.h (it would add 0.2 s to every compile): only this one does.

None (and the ctypes path, as fast as before) when this library cannot be built: no
Python headers, no compiler (logged once), or FUSIONSTITCH_PYENTRY=0.
"""
from __future__ import annotations

import ctypes
import logging
import sysconfig
import threading
from pathlib import Path

import torch

from ...config import env_flag_default

log = logging.getLogger("fusionstitch.codegen")

FLAG_ERRORS = 1
FLAG_RELEASE = 2

# arguments of one launch, at most (a kernel's buffers and syms and its error cell)
MAX_ARGS = 1024

ENTRY_SOURCE = r"""
// fusionstitch: CPython entry points into the cpu target's kernels (targets/cpp/pyentry.py)
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cstdint>
#include <exception>
#include <memory>

namespace {

constexpr Py_ssize_t MAX_ARGS = FS_MAX_ARGS;
void* (*tensor_data)(PyObject*) = nullptr;   // torch's, when it has one
PyTypeObject* tensor_type = nullptr;          // torch.Tensor

// torch without a C function for it: the tensor's data_ptr() method
void* data_ptr_method(PyObject* o) {
    PyObject* v = PyObject_CallMethod(o, "data_ptr", nullptr);
    if (v == nullptr) return nullptr;
    void* p = PyLong_AsVoidPtr(v);
    Py_DECREF(v);
    return p;
}

// `o` as one int64 of a kernel's arguments: an int (a sym) or a tensor's data pointer
bool value(PyObject* o, int64_t* out) {
    if (PyLong_CheckExact(o)) {
        const long long v = PyLong_AsLongLong(o);
        if (v == -1 && PyErr_Occurred()) return false;
        *out = static_cast<int64_t>(v);
        return true;
    }
    if (!PyObject_TypeCheck(o, tensor_type)) {
        PyErr_Format(PyExc_TypeError, "fusionstitch kernel launch: an argument is a %s, "
                     "not a tensor or an int", Py_TYPE(o)->tp_name);
        return false;
    }
    try {
        void* p = tensor_data(o);
        if (p == nullptr && PyErr_Occurred()) return false;
        *out = reinterpret_cast<int64_t>(p);
        return true;
    } catch (const std::exception& e) {
        PyErr_Format(PyExc_RuntimeError, "fusionstitch kernel launch: %s", e.what());
    } catch (...) {
        PyErr_SetString(PyExc_RuntimeError, "fusionstitch kernel launch: no data pointer");
    }
    return false;
}

bool address(PyObject* o, int64_t* out, const char* what) {
    if (!PyLong_CheckExact(o)) {
        PyErr_Format(PyExc_TypeError, "fusionstitch kernel launch: %s must be an int", what);
        return false;
    }
    *out = static_cast<int64_t>(PyLong_AsLongLong(o));
    return !(*out == -1 && PyErr_Occurred());
}

// launch(function, flags, *arguments) -> the error cell's code (0: none)
PyObject* launch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs - 2 + 1 > MAX_ARGS) {
        PyErr_Format(PyExc_TypeError, "fusionstitch kernel launch: %zd arguments", nargs);
        return nullptr;
    }
    int64_t f = 0, flags = 0;
    if (!address(args[0], &f, "the function") || !address(args[1], &flags, "flags"))
        return nullptr;
    int64_t a[MAX_ARGS];
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 2; i < nargs; ++i)
        if (!value(args[i], &a[n++])) return nullptr;
    int64_t err = 0;
    if (flags & FS_FLAG_ERRORS) a[n++] = reinterpret_cast<int64_t>(&err);
    auto fn = reinterpret_cast<void (*)(const int64_t*)>(f);
    if (flags & FS_FLAG_RELEASE) {
        Py_BEGIN_ALLOW_THREADS
        fn(a);
        Py_END_ALLOW_THREADS
    } else {
        fn(a);
    }
    return PyLong_FromLongLong(err);
}

// chain(fs_chain, table, *buffers) -> the chain's error cell (p[0])
PyObject* chain(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs < 2) {
        PyErr_Format(PyExc_TypeError, "fusionstitch kernel chain: %zd arguments", nargs);
        return nullptr;
    }
    int64_t f = 0, table = 0;
    if (!address(args[0], &f, "the chain function") || !address(args[1], &table, "the table"))
        return nullptr;
    const Py_ssize_t n = nargs - 1;      // p[0] the error cell, then the pointers
    int64_t small[256];
    std::unique_ptr<int64_t[]> big;
    int64_t* p = small;
    if (n > 256) {
        big.reset(new int64_t[n]);
        p = big.get();
    }
    p[0] = 0;
    for (Py_ssize_t i = 2; i < nargs; ++i)
        if (!value(args[i], &p[i - 1])) return nullptr;
    reinterpret_cast<void (*)(const int64_t*, int64_t*)>(f)(
        reinterpret_cast<const int64_t*>(table), p);
    return PyLong_FromLongLong(p[0]);
}

PyMethodDef methods[] = {
    {"launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(launch)),
     METH_FASTCALL, "launch(function, flags, *arguments) -> error code"},
    {"chain", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(chain)),
     METH_FASTCALL, "chain(fs_chain, table, *buffers) -> error code"},
};

}  // namespace

// (launch, chain) as built-in functions; `data`: torch's C function from a tensor object
// to its data pointer, or 0 for the data_ptr() method; `type`: torch.Tensor
extern "C" PyObject* fs_entry_functions(void* data, PyObject* type) {
    tensor_data = data != nullptr ? reinterpret_cast<void* (*)(PyObject*)>(data)
                                  : data_ptr_method;
    tensor_type = reinterpret_cast<PyTypeObject*>(type);
    Py_INCREF(type);
    PyObject* a = PyCFunction_New(&methods[0], nullptr);
    PyObject* b = a == nullptr ? nullptr : PyCFunction_New(&methods[1], nullptr);
    if (b == nullptr) {
        Py_XDECREF(a);
        return nullptr;
    }
    return Py_BuildValue("(NN)", a, b);
}
""".replace("FS_MAX_ARGS", str(MAX_ARGS)).replace("FS_FLAG_ERRORS", str(FLAG_ERRORS)) \
    .replace("FS_FLAG_RELEASE", str(FLAG_RELEASE))

_LOCK = threading.Lock()
_ENTRIES: list = []          # [] not tried yet, [None] unavailable, [(launch, chain)]


def enabled() -> bool:
    """FUSIONSTITCH_PYENTRY=0 launches through ctypes (the A/B of the entry points)."""
    return env_flag_default("FUSIONSTITCH_PYENTRY", True)


def _torch_data_ptr() -> int | None:
    """The address of torch's C function from a tensor object to its data pointer."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    address = getattr(guards, "_torchinductor_pyobject_tensor_data_ptr", None)
    return address if isinstance(address, int) and address else None


def entries() -> tuple | None:
    """(launch, chain), built or loaded once per process; None where unavailable."""
    if not enabled():
        return None
    if _ENTRIES:
        return _ENTRIES[0]
    with _LOCK:
        if not _ENTRIES:
            _ENTRIES.append(_load())
    return _ENTRIES[0]


def warm() -> None:
    """Build or load the entries in a thread of their own, when not done yet: the cpu
    target calls this before it compiles a graph's kernels, so that the first build (0.5
    s, most of it Python.h's headers) runs beside that g++ instead of after it."""
    if _ENTRIES or not enabled():
        return
    threading.Thread(target=entries, name="fusionstitch-pyentry", daemon=True).start()


def _load() -> tuple | None:
    from .build import KernelBuildError, load_library
    include = sysconfig.get_paths().get("include") or ""
    if not include or not (Path(include) / "Python.h").exists():
        log.info("fusionstitch: no Python.h under %r: kernels launch through ctypes",
                 include)
        return None
    try:
        lib = load_library(0, ENTRY_SOURCE, (), include=include, loader=ctypes.PyDLL)
        make = lib.fs_entry_functions
        make.argtypes = [ctypes.c_void_p, ctypes.py_object]
        make.restype = ctypes.py_object
        launch, chain = make(_torch_data_ptr(), torch.Tensor)
    except (KernelBuildError, OSError, AttributeError, TypeError) as e:
        log.info("fusionstitch: the CPython entry points could not be built (%s): kernels "
                 "launch through ctypes", e)
        return None
    return launch, chain


def reset() -> None:
    """Forget the entry points (tests: the next `entries()` loads them again)."""
    with _LOCK:
        _ENTRIES.clear()
