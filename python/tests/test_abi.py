"""Tests that need no torch: the ctypes mirrors match the C structs (lyco_abi_layout), the
DLTensor dtype mapping, library lookup errors, and the policy's error messages through the ABI."""

import ctypes
import os
import pathlib
import subprocess
import sys

import pytest

from lyco import _capi as C

try:
    import numpy as np
except ImportError:
    np = None
needs_numpy = pytest.mark.skipif(np is None, reason="numpy is not installed")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_struct_layout_matches_library():
    assert C.layout_mismatches(C.lib()) == []


def test_layout_report_knows_every_mirrored_struct():
    L = C.lib()
    for name, struct in C.STRUCTS.items():
        assert L.lyco_abi_layout(name.encode()) == ctypes.sizeof(struct), name
    assert L.lyco_abi_layout(b"no_such_struct") == -1


def test_dtype_mapping():
    for name, code, bits in (("fp16", 2, 16), ("bf16", 4, 16), ("fp32", 2, 32)):
        v = C.View(0, name, (3, 4), (4, 1))
        assert (v.t.dtype.code, v.t.dtype.bits, v.t.dtype.lanes) == (code, bits, 1)
        assert v.t.ndim == 2 and list(v.t.shape[:2]) == [3, 4] and list(v.t.strides[:2]) == [4, 1]


def test_missing_library_names_what_was_tried(tmp_path):
    bogus = tmp_path / "nope" / "liblyco.so"
    code = "import lyco._capi as C; C.lib()"
    env = dict(os.environ, LYCO_LIBRARY=str(bogus), PYTHONPATH=str(ROOT / "python"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert str(bogus) in r.stderr and "LYCO_LIBRARY" in r.stderr, r.stderr


def _adapter_with(down, up):
    L = C.lib()
    a = C.Adapter()
    L.lyco_adapter_init(ctypes.byref(a), C.ALGOS.index("locon"))
    L.lyco_layer_linear(ctypes.byref(a.layer), up.t.shape[0], down.t.shape[1])
    a.tensor[C.SLOT["lora_down"]] = down.ptr()
    a.tensor[C.SLOT["lora_up"]] = up.ptr()
    return a


def test_fp16_with_bf16_error_names_both_tensors():
    x = C.View(0, "bf16", (8, 64), (64, 1))
    down, up = C.View(0, "fp16", (4, 64), (64, 1)), C.View(0, "fp16", (32, 4), (4, 1))
    a = _adapter_with(down, up)
    out = C.Dtypes()
    st = C.lib().lyco_resolve_dtypes(C.context().handle, ctypes.byref(a), None, x.ptr(), None,
                                     ctypes.byref(out))
    with pytest.raises(C.LycoDtypeError) as e:
        C.check(st)
    msg = str(e.value)
    assert "LYCO_ERR_DTYPE" in msg and "x is bf16" in msg and "lora_down is fp16" in msg, msg


@needs_numpy
def test_bypass_fwd_on_numpy_arrays(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 64), dtype=np.float32)
    d = rng.standard_normal((4, 64), dtype=np.float32)
    u = rng.standard_normal((32, 4), dtype=np.float32)
    y = np.full((8, 32), np.nan, dtype=np.float32)
    vx, vd, vu, vy = (C.numpy_view(t) for t in (x, d, u, y))
    a = _adapter_with(vd, vu)
    a.alpha = 2.0
    args = C.BypassArgs(vx.ptr(), None, None, 0)
    C.check(C.lib().lyco_bypass_fwd(C.context().handle, vy.ptr(), ctypes.byref(a),
                                    ctypes.byref(args)))
    ref = (x.astype(np.float64) @ d.T.astype(np.float64) @ u.T.astype(np.float64)) * 0.5
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


@needs_numpy
def test_shape_error_names_the_argument():
    x, y = np.ones((8, 65), np.float32), np.zeros((8, 32), np.float32)
    d, u = np.ones((4, 64), np.float32), np.ones((32, 4), np.float32)
    vx, vy, vd, vu = (C.numpy_view(t) for t in (x, y, d, u))
    a = _adapter_with(vd, vu)
    args = C.BypassArgs(vx.ptr(), None, None, 0)
    st = C.lib().lyco_bypass_fwd(C.context().handle, vy.ptr(), ctypes.byref(a), ctypes.byref(args))
    with pytest.raises(C.LycoShapeError) as e:
        C.check(st)
    assert "x" in e.value.detail and "65" in e.value.detail, e.value.detail
    assert (x == 1).all(), "input modified"
