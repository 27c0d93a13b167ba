"""The C ABI of liblyco through ctypes: library lookup, the struct mirrors of include/lyco.h
(checked against the library's own lyco_abi_layout report), status -> Python exceptions, and
DLTensor views of array-like objects. Needs no torch: numpy arrays and raw pointers work too."""

import ctypes
import os
import pathlib
import threading

SLOTS = (
    "lora_down", "lora_up", "lora_mid", "hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b",
    "hada_t1", "hada_t2", "lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a",
    "lokr_w2_b", "lokr_t2", "oft_blocks", "rescale", "ia3_weight", "glora_a1", "glora_a2",
    "glora_b1", "glora_b2", "dora_scale", "diff", "diff_b", "w_norm", "b_norm", "scalar",
    "rank_mask", "rank_mask_b", "module_mask",
)
SLOT = {name: i for i, name in enumerate(SLOTS)}
MASK_SLOTS = frozenset(("rank_mask", "rank_mask_b", "module_mask"))
ALGOS = ("none", "locon", "loha", "lokr", "diag_oft", "boft", "ia3", "glora", "dylora", "full", "norm")
STATUS = (
    "LYCO_OK", "LYCO_ERR_NULL", "LYCO_ERR_INVALID", "LYCO_ERR_SHAPE", "LYCO_ERR_DTYPE",
    "LYCO_ERR_DEVICE", "LYCO_ERR_ALIAS", "LYCO_ERR_UNSUPPORTED", "LYCO_ERR_NOMEM",
    "LYCO_ERR_BACKEND", "LYCO_ERR_IO", "LYCO_ERR_FORMAT", "LYCO_ERR_NUMERIC",
)
DTYPES = ("fp16", "bf16", "fp32")  # lyco_dtype values 0, 1, 2
KDLCPU, KDLCUDA = 1, 2
KDLFLOAT, KDLBFLOAT = 2, 4
PATHS = ("none", "ref", "eager", "fused")
BACKENDS = ("auto", "ref", "eager", "cpu", "cuda")
DIRECTIONS = ("merge_fwd", "merge_bwd", "bypass_fwd", "bypass_bwd")
MERGE_MODES = ("weight", "delta", "unmerge")
FLAG_UPSTREAM_MERGE_SCALE = 1
FLAG_RS_LORA = 2
BYPASS_DELTA_ONLY = 1
NSLOT = len(SLOTS)


class LycoError(RuntimeError):
    """A lyco call failed; .status is the C status name, the message is lyco_last_error()."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.detail = message


class LycoDtypeError(LycoError, TypeError):
    """LYCO_ERR_DTYPE: e.g. fp16 with bf16 in one call; the message names both tensors."""


class LycoShapeError(LycoError, ValueError):
    """LYCO_ERR_SHAPE / LYCO_ERR_INVALID: a shape or value the call cannot take."""


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
        ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
    ]


class Path(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("backend", ctypes.c_int), ("why", ctypes.c_char * 160),
                ("fallbacks", ctypes.c_uint64)]


I64x3 = ctypes.c_int64 * 3


class Layer(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int), ("out_features", ctypes.c_int64), ("in_features", ctypes.c_int64),
        ("conv_dims", ctypes.c_int32), ("kernel", I64x3), ("stride", I64x3), ("padding", I64x3),
        ("dilation", I64x3), ("groups", ctypes.c_int64), ("norm_kind", ctypes.c_int),
        ("norm_groups", ctypes.c_int64), ("norm_eps", ctypes.c_double),
    ]


class Adapter(ctypes.Structure):
    _fields_ = [
        ("algo", ctypes.c_int), ("layer", Layer), ("tensor", ctypes.POINTER(DLTensor) * NSLOT),
        ("alpha", ctypes.c_double), ("scale", ctypes.c_double), ("multiplier", ctypes.c_double),
        ("constraint", ctypes.c_double), ("wd_on_out", ctypes.c_int32),
        ("ia3_on_input", ctypes.c_int32), ("dylora_block_size", ctypes.c_int32),
        ("dylora_active_blocks", ctypes.c_int32), ("flags", ctypes.c_uint32),
    ]


class Grads(ctypes.Structure):
    _fields_ = [("grad", ctypes.POINTER(DLTensor) * NSLOT)]


class MergeArgs(ctypes.Structure):
    _fields_ = [("weight", ctypes.POINTER(DLTensor)), ("bias", ctypes.POINTER(DLTensor)),
                ("mode", ctypes.c_int)]


class BypassArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.POINTER(DLTensor)), ("y0", ctypes.POINTER(DLTensor)),
                ("weight", ctypes.POINTER(DLTensor)), ("flags", ctypes.c_uint32)]


class Dtypes(ctypes.Structure):
    _fields_ = [("compute", ctypes.c_int), ("output", ctypes.c_int)]


# every mirrored struct, by its C name, for the layout check
STRUCTS = {
    "DLDevice": DLDevice, "DLDataType": DLDataType, "DLTensor": DLTensor, "lyco_path": Path,
    "lyco_layer": Layer, "lyco_adapter": Adapter, "lyco_grads": Grads,
    "lyco_merge_args": MergeArgs, "lyco_bypass_args": BypassArgs, "lyco_dtypes": Dtypes,
}


def layout_mismatches(lib):
    """Every difference between the ctypes mirrors and the library's lyco_abi_layout report, as
    strings 'name: python X, C Y' (empty when they agree)."""
    bad = []
    names = []
    i = 0
    while True:
        n = lib.lyco_abi_layout_name(i)
        if n is None:
            break
        names.append(n.decode())
        i += 1
    counts = {"LYCO_SLOT_COUNT": NSLOT, "LYCO_ALGO_COUNT": len(ALGOS),
              "LYCO_STATUS_COUNT": len(STATUS), "enum": ctypes.sizeof(ctypes.c_int)}
    for name in names:
        c_value = lib.lyco_abi_layout(name.encode())
        if name in counts:
            mine = counts[name]
        elif "." in name:
            struct, field = name.split(".")
            mine = getattr(STRUCTS[struct], field).offset if struct in STRUCTS else None
        else:
            mine = ctypes.sizeof(STRUCTS[name]) if name in STRUCTS else None
        if mine != c_value:
            bad.append(f"{name}: python {mine}, C {c_value}")
    missing = set(STRUCTS) - set(names)
    bad += [f"{name}: not reported by the library" for name in sorted(missing)]
    return bad


def _candidates():
    env = os.environ.get("LYCO_LIBRARY")
    if env:
        return [env]
    root = pathlib.Path(__file__).resolve().parents[2]
    return [str(root / "build" / "liblyco.so"), "liblyco.so"]


_lib = None
_lib_lock = threading.Lock()


def _declare(lib):
    c, p = ctypes, ctypes.POINTER
    sig = {
        "lyco_status_name": (c.c_char_p, [c.c_int]),
        "lyco_last_error": (c.c_char_p, []),
        "lyco_ctx_create": (c.c_int, [p(c.c_void_p)]),
        "lyco_ctx_destroy": (None, [c.c_void_p]),
        "lyco_ctx_set_backend_name": (c.c_int, [c.c_void_p, c.c_char_p]),
        "lyco_ctx_set_output_mode_name": (c.c_int, [c.c_void_p, c.c_char_p]),
        "lyco_ctx_set_fp32_mode_name": (c.c_int, [c.c_void_p, c.c_char_p]),
        "lyco_ctx_set_stream": (c.c_int, [c.c_void_p, c.c_void_p]),
        "lyco_ctx_last_path": (c.c_int, [c.c_void_p, p(Path)]),
        "lyco_adapter_init": (None, [p(Adapter), c.c_int]),
        "lyco_layer_linear": (None, [p(Layer), c.c_int64, c.c_int64]),
        "lyco_layer_conv": (c.c_int, [p(Layer), c.c_int32, c.c_int64, c.c_int64, p(c.c_int64),
                                      p(c.c_int64), p(c.c_int64), p(c.c_int64), c.c_int64]),
        "lyco_layer_norm": (None, [p(Layer), c.c_int, c.c_int64, c.c_int64, c.c_double]),
        "lyco_algo_from_name": (c.c_int, [c.c_char_p, p(c.c_int)]),
        "lyco_merge_fwd": (c.c_int, [c.c_void_p, p(DLTensor), p(DLTensor), p(Adapter), p(MergeArgs)]),
        "lyco_merge_bwd": (c.c_int, [c.c_void_p, p(Grads), p(Adapter), p(MergeArgs), p(DLTensor),
                                     p(DLTensor)]),
        "lyco_bypass_fwd": (c.c_int, [c.c_void_p, p(DLTensor), p(Adapter), p(BypassArgs)]),
        "lyco_bypass_bwd": (c.c_int, [c.c_void_p, p(Grads), p(DLTensor), p(DLTensor), p(Adapter),
                                      p(BypassArgs), p(DLTensor)]),
        "lyco_resolve_dtypes": (c.c_int, [c.c_void_p, p(Adapter), p(DLTensor), p(DLTensor),
                                          p(DLTensor), p(Dtypes)]),
        "lyco_abi_layout": (c.c_int64, [c.c_char_p]),
        "lyco_abi_layout_name": (c.c_char_p, [c.c_int]),
        "lyco_version": (c.c_char_p, []),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def lib():
    """The loaded liblyco (env LYCO_LIBRARY, else <repo>/build/liblyco.so, else the system
    loader), with its struct layout checked against these mirrors."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        for cand in _candidates():
            if os.sep in cand and not os.path.exists(cand):
                tried.append(f"{cand} (no such file)")
                continue
            try:
                handle = ctypes.CDLL(cand)
            except OSError as e:
                tried.append(f"{cand} ({e})")
                continue
            try:
                _declare(handle)
            except AttributeError as e:
                tried.append(f"{cand} (not a lyco library of this version: {e})")
                continue
            bad = layout_mismatches(handle)
            if bad:
                raise ImportError(f"lyco: {cand} has a struct layout this binding does not mirror: "
                                  + "; ".join(bad))
            _lib = handle
            return _lib
        raise ImportError("lyco: could not load liblyco; tried " + ", ".join(tried)
                          + ". Build it (make build, or cmake --build <dir> --target lyco_shared) "
                          "or set LYCO_LIBRARY to the path of liblyco.so")


def check(status):
    """Raise the LycoError subclass that fits a non-zero lyco_status."""
    if status == 0:
        return
    L = lib()
    name = L.lyco_status_name(status).decode()
    msg = (L.lyco_last_error() or b"").decode(errors="replace")
    cls = {"LYCO_ERR_DTYPE": LycoDtypeError, "LYCO_ERR_SHAPE": LycoShapeError,
           "LYCO_ERR_INVALID": LycoShapeError}.get(name, LycoError)
    raise cls(name, msg)


class Context:
    """One lyco_ctx (backend, output mode, fp32 mode, stream); not shared between threads."""

    def __init__(self):
        h = ctypes.c_void_p()
        check(lib().lyco_ctx_create(ctypes.byref(h)))
        self.handle = h
        self._state = None
        self._path = None

    def configure(self, backend="auto", output_mode="promote", fp32_mode="fp32", stream=None):
        """Set the context for one call (cheap when nothing changed since the last call)."""
        state = (backend, os.environ.get("LYCO_BACKEND"), output_mode, fp32_mode, stream)
        if state == self._state:
            return
        L = lib()
        # "auto" at a call site defers to LYCO_BACKEND (the process-wide choice), as at creation
        name = backend if backend != "auto" else os.environ.get("LYCO_BACKEND", "auto")
        check(L.lyco_ctx_set_backend_name(self.handle, name.encode()))
        check(L.lyco_ctx_set_output_mode_name(self.handle, output_mode.encode()))
        check(L.lyco_ctx_set_fp32_mode_name(self.handle, fp32_mode.encode()))
        check(L.lyco_ctx_set_stream(self.handle, ctypes.c_void_p(stream or 0)))
        self._state = state

    def last_path(self):
        p = Path()
        check(lib().lyco_ctx_last_path(self.handle, ctypes.byref(p)))
        return PATHS[p.kind], BACKENDS[p.backend], p.why.decode(errors="replace"), p.fallbacks

    def last_path_kind(self):
        """PATHS[kind] of the last call alone (one reused struct, nothing decoded: the per-call check)."""
        p = self._path
        if p is None:
            p = self._path = Path()
            self._path_ref = ctypes.byref(p)
        check(_lib.lyco_ctx_last_path(self.handle, self._path_ref))
        return PATHS[p.kind]

    def __del__(self):
        try:
            if _lib is not None and self.handle:
                _lib.lyco_ctx_destroy(self.handle)
        except Exception:
            pass


_tls = threading.local()


def context():
    """This thread's context."""
    ctx = getattr(_tls, "ctx", None)
    if ctx is None:
        ctx = _tls.ctx = Context()
    return ctx


class View:
    """A DLTensor over (pointer, dtype name, shape, strides, device); keeps its arrays alive."""

    def __init__(self, data, dtype, shape, strides, device_type=KDLCPU, device_id=0):
        n = len(shape)
        self.shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self.strides = (ctypes.c_int64 * max(n, 1))(*strides)
        code, bits = {"fp16": (KDLFLOAT, 16), "bf16": (KDLBFLOAT, 16), "fp32": (KDLFLOAT, 32),
                      "fp64": (KDLFLOAT, 64)}[dtype]
        self.t = DLTensor(ctypes.c_void_p(data), DLDevice(device_type, device_id), n,
                          DLDataType(code, bits, 1), self.shape, self.strides, 0)

    def ptr(self):
        return ctypes.pointer(self.t)


def numpy_view(a, dtype=None):
    """A View of a numpy array (fp16/fp32; a uint16 array is read as bf16 when dtype='bf16')."""
    name = dtype or {"float16": "fp16", "float32": "fp32", "float64": "fp64"}[a.dtype.name]
    item = a.dtype.itemsize
    return View(a.ctypes.data, name, a.shape, [s // item for s in a.strides])
