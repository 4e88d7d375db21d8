"""kiln's DLPack functions against NumPy and PyTorch, through ctypes.

    dlpack_numpy.py LIBKILN

kiln -> NumPy/PyTorch: kiln_tensor_to_dlpack wrapped in a tiny object with
__dlpack__/__dlpack_device__ (a "dltensor_versioned" capsule made with
PyCapsule_New; for consumers that predate DLPack 1.0 and ask for no
max_version, an unversioned DLManagedTensor that forwards to kiln's deleter),
then numpy.from_dlpack / torch.from_dlpack: same values, shared memory.
NumPy/PyTorch -> kiln: their "dltensor_versioned" capsule into
kiln_tensor_from_dlpack (renamed "used_dltensor_versioned" once kiln owns
it): same values, shared memory, and the refusals (strided, read-only,
int8) leave the capsule to its producer.

Runs with every interpreter at hand that imports numpy or torch (this one,
$KILN_PYTHON, /usr/bin/python3, python3 on PATH); exits 77 (skipped) when
none does.
"""
import ctypes
import os
import shutil
import subprocess
import sys

LIB = sys.argv[1]

if len(sys.argv) == 2:
    # The driver: run the checks under each distinct interpreter.
    ran, failed = 0, 0
    seen = set()  # by path: a virtual environment's python links to its base one
    for py in (sys.executable, os.environ.get("KILN_PYTHON"), "/usr/bin/python3", shutil.which("python3")):
        if not py or not os.path.exists(py) or os.path.abspath(py) in seen:
            continue
        seen.add(os.path.abspath(py))
        rc = subprocess.run([py, __file__, LIB, "--run"]).returncode
        if rc == 77:
            continue
        ran += 1
        failed += rc != 0
    if failed:
        sys.exit(1)
    if not ran:
        print("SKIP: no Python at hand imports numpy or torch")
        sys.exit(77)
    sys.exit(0)

try:
    import numpy as np
except ImportError:
    np = None
try:
    import torch
except ImportError:
    torch = None
if np is None and torch is None:
    print("SKIP (%s): neither numpy nor torch" % sys.executable)
    sys.exit(77)

print("== %s: numpy %s, torch %s" % (sys.executable, np and np.__version__, torch and torch.__version__))


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


VersionedDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                                     ("deleter", VersionedDeleter), ("flags", ctypes.c_uint64),
                                     ("dl_tensor", DLTensor)]


class DLManagedTensor(ctypes.Structure):
    pass


LegacyDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", LegacyDeleter)]

READ_ONLY = 1
OK, NOT_SUPPORTED = 0, 9

kiln = ctypes.CDLL(LIB)
kiln.kiln_last_error.restype = ctypes.c_char_p
kiln.kiln_context_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
kiln.kiln_tensor_from_host.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                       ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_int,
                                       ctypes.c_int, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)]
kiln.kiln_tensor_copy_to_host.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
kiln.kiln_tensor_copy_from_host.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
kiln.kiln_tensor_release.argtypes = [ctypes.c_void_p]
kiln.kiln_context_release.argtypes = [ctypes.c_void_p]
kiln.kiln_tensor_to_dlpack.argtypes = [ctypes.c_void_p, ctypes.c_uint64,
                                       ctypes.POINTER(ctypes.POINTER(DLManagedTensorVersioned))]
kiln.kiln_tensor_from_dlpack.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
kiln.kiln_tensor_dtype.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]

capi = ctypes.pythonapi
capi.PyCapsule_New.restype = ctypes.py_object
capi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
capi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
capi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
capi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
# The same function on a borrowed PyObject * (inside the capsule destructor).
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

checks = 0


def ok(what):
    global checks
    checks += 1
    print("ok: " + what)


def check(status, what):
    if status != OK:
        sys.exit("FAIL: %s: %s" % (what, kiln.kiln_last_error().decode()))


ctx = ctypes.c_void_p()
check(kiln.kiln_context_create(None, ctypes.byref(ctx)), "kiln_context_create")

KILN = {"float32": 0, "float16": 1, "float64": 3, "int32": 4, "int64": 5, "uint8": 6}
CPU = (0, -1)


def kiln_tensor(values, shape, dtype="float32"):
    buf = (ctypes.c_float * len(values))(*values) if dtype == "float32" else None
    dims = (ctypes.c_int64 * len(shape))(*shape)
    out = ctypes.c_void_p()
    check(kiln.kiln_tensor_from_host(ctx, buf, 4 * len(values), dims, len(shape), 0, 0, -1, ctypes.byref(out)),
          "kiln_tensor_from_host")
    return out


def kiln_floats(t, n):
    buf = (ctypes.c_float * n)()
    check(kiln.kiln_tensor_copy_to_host(t, buf, 4 * n), "kiln_tensor_copy_to_host")
    return list(buf)


# ---- kiln -> consumer -------------------------------------------------------------
# Capsule destructor: frees an export no consumer took (name unchanged).
_alive = {}  # legacy wrappers, by address, until their deleter runs


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    for name in (b"dltensor_versioned", b"dltensor"):
        if capi.PyCapsule_IsValid(capsule, name):
            address = _raw_get_pointer(capsule, name)
            if name == b"dltensor_versioned":
                m = ctypes.cast(address, ctypes.POINTER(DLManagedTensorVersioned))
                m.contents.deleter(m)
            else:
                _legacy_deleter(ctypes.cast(address, ctypes.POINTER(DLManagedTensor)))


@LegacyDeleter
def _legacy_deleter(legacy):
    address = ctypes.addressof(legacy.contents)
    versioned = _alive.pop(address)[1]
    versioned.contents.deleter(versioned)


class KilnExport:
    """A kiln tensor exported through DLPack, for numpy/torch.from_dlpack."""

    def __init__(self, tensor, flags=0):
        self.managed = ctypes.POINTER(DLManagedTensorVersioned)()
        check(kiln.kiln_tensor_to_dlpack(tensor, flags, ctypes.byref(self.managed)), "kiln_tensor_to_dlpack")
        self.versioned_used = None

    def __dlpack_device__(self):
        d = self.managed.contents.dl_tensor.device
        return (d.device_type, d.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        managed, self.managed = self.managed, None
        if managed is None:
            raise BufferError("already exported")
        if max_version is not None and max_version[0] >= 1:
            self.versioned_used = True
            return capi.PyCapsule_New(ctypes.cast(managed, ctypes.c_void_p), b"dltensor_versioned",
                                      ctypes.cast(_capsule_destructor, ctypes.c_void_p))
        # A consumer from before DLPack 1.0: an unversioned struct over the
        # same DLTensor whose deleter calls kiln's.
        self.versioned_used = False
        legacy = DLManagedTensor()
        legacy.dl_tensor = managed.contents.dl_tensor
        legacy.deleter = _legacy_deleter
        _alive[ctypes.addressof(legacy)] = (legacy, managed)
        return capi.PyCapsule_New(ctypes.addressof(legacy), b"dltensor",
                                  ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def export_checks(name, from_dlpack, as_list, set_first):
    t = kiln_tensor([1, 2, 3, 4, 5, 6], (2, 3))
    e = KilnExport(t)
    arr = from_dlpack(e)
    if as_list(arr) != [1, 2, 3, 4, 5, 6] or tuple(arr.shape) != (2, 3):
        sys.exit("FAIL: %s.from_dlpack(kiln) gave %s" % (name, arr))
    ok("%s.from_dlpack reads a kiln tensor (%s capsule)" % (name, "versioned" if e.versioned_used else "unversioned"))
    if set_first(arr, 42.0):
        if kiln_floats(t, 6)[0] != 42.0:
            sys.exit("FAIL: a write through %s did not reach kiln" % name)
        ok("%s writes show in kiln (zero copy)" % name)
    else:
        # Older NumPy makes every DLPack array read-only: check sharing the
        # other way round.
        values = (ctypes.c_float * 6)(42, 2, 3, 4, 5, 6)
        check(kiln.kiln_tensor_copy_from_host(t, values, 24), "kiln write")
        if as_list(arr)[0] != 42.0:
            sys.exit("FAIL: a write through kiln did not reach %s" % name)
        ok("kiln writes show in %s (zero copy; its array is read-only)" % name)
    kiln.kiln_tensor_release(t)  # the export keeps the memory
    if as_list(arr)[0] != 42.0:
        sys.exit("FAIL: the %s array lost its data when kiln released its handle" % name)
    ok("%s keeps the memory after kiln_tensor_release" % name)
    del arr


def import_checks(name, make, versioned_capsule, as_list, writeable_copy):
    if versioned_capsule(make([1.0, 2.0])) is None:
        print("skip: %s cannot export a versioned (DLPack 1.x) capsule" % name)
        return
    src = make([float(i) for i in range(12)]).reshape(3, 4)
    cap = versioned_capsule(src)
    ptr = capi.PyCapsule_GetPointer(cap, b"dltensor_versioned")
    t = ctypes.c_void_p()
    check(kiln.kiln_tensor_from_dlpack(ctx, ptr, ctypes.byref(t)), "kiln_tensor_from_dlpack(%s)" % name)
    capi.PyCapsule_SetName(cap, b"used_dltensor_versioned")  # kiln owns it now
    if kiln_floats(t, 12) != [float(i) for i in range(12)]:
        sys.exit("FAIL: kiln read %s from %s" % (kiln_floats(t, 12), name))
    ok("kiln_tensor_from_dlpack reads a %s array" % name)
    values = (ctypes.c_float * 12)(*([-1.0] * 12))
    check(kiln.kiln_tensor_copy_from_host(t, values, 48), "kiln write")
    if as_list(src)[:3] != [-1.0, -1.0, -1.0]:
        sys.exit("FAIL: a write through kiln did not reach the %s array" % name)
    ok("kiln writes show in %s (zero copy)" % name)
    kiln.kiln_tensor_release(t)  # calls the producer's deleter
    del cap

    # Refusals leave the capsule with its producer (its name unchanged).
    for what, arr in (("a transposed (strided) array", src.T), ("a read-only array", writeable_copy(src, False))):
        if arr is None:
            continue
        try:
            cap = versioned_capsule(arr)
        except Exception as ex:  # e.g. a producer that refuses read-only exports itself
            print("skip: %s cannot export %s: %s" % (name, what, ex))
            continue
        ptr = capi.PyCapsule_GetPointer(cap, b"dltensor_versioned")
        status = kiln.kiln_tensor_from_dlpack(ctx, ptr, ctypes.byref(t))
        if status != NOT_SUPPORTED or t.value is not None:
            sys.exit("FAIL: kiln took %s from %s (status %d)" % (what, name, status))
        ok("kiln refuses %s from %s: %s" % (what, name, kiln.kiln_last_error().decode()))
        del cap


if np is not None:
    export_checks("numpy", np.from_dlpack, lambda a: a.flatten().tolist(),
                  lambda a, v: a.flags.writeable and (a.__setitem__((0, 0), v) or True))

    def np_capsule(a):
        try:
            return a.__dlpack__(max_version=(1, 0))
        except TypeError:
            return None

    def np_readonly(a, writeable):
        c = a.copy()
        c.flags.writeable = writeable
        return c

    import_checks("numpy", lambda v: np.array(v, dtype=np.float32), np_capsule, lambda a: a.flatten().tolist(),
                  np_readonly)
    if np_capsule(np.zeros(1)) is not None:
        for dtype, code in (("float32", 0), ("float16", 1), ("float64", 3), ("int32", 4), ("int64", 5), ("uint8", 6)):
            cap = np_capsule(np.zeros((2, 2), dtype=dtype))
            t = ctypes.c_void_p()
            check(kiln.kiln_tensor_from_dlpack(ctx, capi.PyCapsule_GetPointer(cap, b"dltensor_versioned"),
                                               ctypes.byref(t)), "import %s" % dtype)
            capi.PyCapsule_SetName(cap, b"used_dltensor_versioned")
            got = ctypes.c_int()
            kiln.kiln_tensor_dtype(t, ctypes.byref(got))
            kiln.kiln_tensor_release(t)
            if got.value != code:
                sys.exit("FAIL: numpy %s became kiln dtype %d" % (dtype, got.value))
        ok("numpy float32/float16/float64/int32/int64/uint8 map to kiln's dtypes")
        cap = np_capsule(np.zeros(3, dtype=np.int8))
        t = ctypes.c_void_p()
        if kiln.kiln_tensor_from_dlpack(ctx, capi.PyCapsule_GetPointer(cap, b"dltensor_versioned"),
                                        ctypes.byref(t)) != NOT_SUPPORTED:
            sys.exit("FAIL: kiln took an int8 array")
        ok("kiln refuses int8: " + kiln.kiln_last_error().decode())
        # A read-only export reaches NumPy as a read-only array.
        t = kiln_tensor([1, 2], (2,))
        e = KilnExport(t, READ_ONLY)
        arr = np.from_dlpack(e)
        if e.versioned_used and arr.flags.writeable:
            sys.exit("FAIL: a DLPACK_FLAG_BITMASK_READ_ONLY export became a writeable numpy array")
        ok("a read-only export is read-only in numpy")
        kiln.kiln_tensor_release(t)
        del arr

if torch is not None:
    export_checks("torch", torch.from_dlpack, lambda a: a.flatten().tolist(), lambda a, v: a.view(-1).__setitem__(0, v) or True)

    def torch_capsule(a):
        try:
            return a.__dlpack__(max_version=(1, 0))
        except TypeError:
            return None

    import_checks("torch", lambda v: torch.tensor(v, dtype=torch.float32), torch_capsule,
                  lambda a: a.flatten().tolist(), lambda a, w: None)

kiln.kiln_context_release(ctx)
print("%d checks passed" % checks)
