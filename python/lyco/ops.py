"""lyco's four directions as torch custom ops (torch.library): lyco::bypass_fwd, lyco::bypass_bwd,
lyco::merge_fwd, lyco::merge_bwd, each with a fake (meta) implementation and, for the forwards,
an autograd formula that calls the matching backward op. One op per direction serves every
algorithm: the non-tensor part of an adapter (algorithm, layer geometry, hyper-parameters, which
slots the tensor list fills, output/fp32 mode) travels as one JSON string `spec`, the tensors as a
list, so torch.compile traces each layer as a call with constant arguments (no graph break, no
recompiling of the op per layer). Output dtypes come from the library's policy
(lyco_resolve_dtypes, NUMERICS.md §1); gradients are allocated in each leaf's own dtype."""

import ctypes
import functools
import json
import math
import threading
import warnings
from typing import List, Optional

import torch

from . import _capi as C

_TORCH_DTYPE = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_FROM_LYCO = (torch.float16, torch.bfloat16, torch.float32)


# ------------------------------------------------------------------------------------------------
# layer geometry and the spec string
# ------------------------------------------------------------------------------------------------
def linear(out_features, in_features):
    """Geometry of an O×I Linear layer."""
    return {"kind": "linear", "out": int(out_features), "in": int(in_features)}


def _triple(v, dims, name, default):
    if v is None:
        v = default
    v = (v,) * dims if isinstance(v, int) else tuple(int(e) for e in v)
    if len(v) != dims:
        raise ValueError(f"conv {name} is {v}; expected {dims} values (one per spatial dim)")
    return v


def conv(out_channels, in_channels, kernel, stride=1, padding=0, dilation=1, groups=1):
    """Geometry of a Conv1d/2d/3d layer (in_channels = I, not I/groups)."""
    kernel = (kernel,) if isinstance(kernel, int) else tuple(int(k) for k in kernel)
    dims = len(kernel)
    if not 1 <= dims <= 3:
        raise ValueError(f"conv kernel is {kernel}; expected 1 to 3 spatial dims")
    if isinstance(padding, str):
        raise ValueError(f"conv padding is {padding!r}; expected integers (string padding modes "
                         "are not supported)")
    return {"kind": "conv", "out": int(out_channels), "in": int(in_channels), "kernel": kernel,
            "stride": _triple(stride, dims, "stride", 1),
            "padding": _triple(padding, dims, "padding", 0),
            "dilation": _triple(dilation, dims, "dilation", 1), "groups": int(groups)}


def norm(channels, kind="layer", groups=0, eps=1e-5):
    """Geometry of a LayerNorm (over the last dim) or GroupNorm layer."""
    if kind not in ("layer", "group"):
        raise ValueError(f"norm kind is {kind!r}; expected 'layer' or 'group'")
    return {"kind": "norm", "norm_kind": kind, "out": int(channels), "in": int(channels),
            "groups": int(groups), "eps": float(eps)}


def layer_of(module):
    """The geometry of a torch Linear, Conv1d/2d/3d, LayerNorm or GroupNorm module."""
    nn = torch.nn
    if isinstance(module, nn.Linear):
        return linear(module.out_features, module.in_features)
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        return conv(module.out_channels, module.in_channels, module.kernel_size, module.stride,
                    module.padding, module.dilation, module.groups)
    if isinstance(module, nn.LayerNorm):
        return norm(module.normalized_shape[-1], "layer", 0, module.eps)
    if isinstance(module, nn.GroupNorm):
        return norm(module.num_channels, "group", module.num_groups, module.eps)
    raise TypeError(f"module is {type(module).__name__}; expected Linear, Conv1d/2d/3d, "
                    "LayerNorm or GroupNorm")


HYPER = {"alpha": None, "scale": None, "multiplier": 1.0, "constraint": 0.0, "wd_on_out": -1,
         "ia3_on_input": 0, "dylora_block_size": 1, "dylora_active_blocks": 0, "flags": 0}
OPTIONS = {"output_mode": "promote", "fp32_mode": "fp32", "backend": "auto", "merge_mode": "delta",
           "bypass_flags": 0}


def _spec_key(algo, layer, slots, kw):
    """A type-exact key of make_spec's arguments (2 and 2.0 give different JSON, so the types are
    part of it); hashing it raises TypeError for an unhashable value (then nothing is cached)."""
    lk = tuple((k, type(v), tuple(map(type, v)) if type(v) is tuple else None, v)
               for k, v in layer.items())
    return (type(algo), algo, tuple(slots), lk, tuple((k, type(v), v) for k, v in kw.items()))


_spec_cache = {}


@torch.compiler.assume_constant_result
def make_spec(algo, layer, slots, **kw):
    """The JSON spec string of an adapter call (see the module docstring). Under torch.compile it
    runs at trace time and its string enters the graph as a constant. Cached per argument set
    (arguments that raise are not cached and raise again)."""
    try:
        key = _spec_key(algo, layer, slots, kw)
        spec = _spec_cache.get(key)
    except (TypeError, AttributeError):  # an unhashable value, a layer that is no dict: uncached
        return _make_spec(algo, layer, slots, kw)
    if spec is None:
        spec = _make_spec(algo, layer, slots, kw)
        if len(_spec_cache) >= 4096:
            _spec_cache.clear()
        _spec_cache[key] = spec
    return spec


def _make_spec(algo, layer, slots, kw):
    for k in kw:
        if k not in HYPER and k not in OPTIONS:
            raise TypeError(f"unknown adapter option {k!r}; expected one of "
                            + ", ".join(list(HYPER) + list(OPTIONS)))
    for s in slots:
        if s not in C.SLOT:
            raise ValueError(f"tensor slot {s!r} is unknown; expected one of {', '.join(C.SLOTS)}")
    algo = {"lora": "locon", "oft": "diag_oft", "diag-oft": "diag_oft"}.get(algo, algo)
    if algo not in C.ALGOS[1:]:
        raise ValueError(f"algo is {algo!r}; expected one of {', '.join(C.ALGOS[1:])}")
    d = {"algo": algo, "layer": layer, "slots": list(slots)}
    for k, v in {**HYPER, **OPTIONS}.items():
        d[k] = kw.get(k, v)
    if d["output_mode"] not in ("promote", "base"):
        raise ValueError(f"output_mode is {d['output_mode']!r}; expected 'promote' or 'base'")
    if d["merge_mode"] not in C.MERGE_MODES:
        raise ValueError(f"merge_mode is {d['merge_mode']!r}; expected one of {C.MERGE_MODES}")
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def parse_spec(spec):
    return json.loads(spec)


# ------------------------------------------------------------------------------------------------
# torch tensors -> C structs
# ------------------------------------------------------------------------------------------------
def _view(t, name, meta=False):
    if t.dtype not in _TORCH_DTYPE:
        raise TypeError(f"{name} is {t.dtype}; expected torch.float16, torch.bfloat16 or "
                        "torch.float32")
    if t.device.type == "cuda":
        dev, idx = C.KDLCUDA, t.device.index or 0
    elif t.device.type in ("cpu", "meta"):
        dev, idx = C.KDLCPU, 0
    else:
        raise ValueError(f"{name} is on {t.device}; expected a cpu or cuda tensor")
    return C.View(0 if meta else t.data_ptr(), _TORCH_DTYPE[t.dtype], tuple(t.shape),
                  tuple(t.stride()), dev, idx)


def _ptr(v):
    return v.ptr() if v is not None else None


def _layer(L, layer):
    lay = C.Layer()
    if layer["kind"] == "linear":
        L.lyco_layer_linear(ctypes.byref(lay), layer["out"], layer["in"])
    elif layer["kind"] == "conv":
        dims = len(layer["kernel"])
        arr = lambda v: (ctypes.c_int64 * dims)(*v)  # noqa: E731
        C.check(L.lyco_layer_conv(ctypes.byref(lay), dims, layer["out"], layer["in"],
                                  arr(layer["kernel"]), arr(layer["stride"]),
                                  arr(layer["padding"]), arr(layer["dilation"]), layer["groups"]))
    else:
        L.lyco_layer_norm(ctypes.byref(lay), 0 if layer["norm_kind"] == "layer" else 1,
                          layer["out"], layer["groups"], layer["eps"])
    return lay


@functools.lru_cache(maxsize=4096)
def _adapter_template(spec):
    """The lyco_adapter of a spec without its tensors (algorithm, layer, hyper-parameters), built
    once per spec string; _adapter copies it. Treat as read-only."""
    d = parse_spec(spec)
    L = C.lib()
    a = C.Adapter()
    L.lyco_adapter_init(ctypes.byref(a), C.ALGOS.index(d["algo"]))
    a.layer = _layer(L, d["layer"])
    nan = float("nan")
    a.alpha = nan if d["alpha"] is None else float(d["alpha"])
    a.scale = nan if d["scale"] is None else float(d["scale"])
    a.multiplier = float(d["multiplier"])
    a.constraint = float(d["constraint"])
    a.wd_on_out = int(d["wd_on_out"])
    a.ia3_on_input = int(d["ia3_on_input"])
    a.dylora_block_size = int(d["dylora_block_size"])
    a.dylora_active_blocks = int(d["dylora_active_blocks"])
    a.flags = int(d["flags"])
    return a


def _adapter(spec, tensors, meta=False):
    d = parse_spec(spec)
    if len(tensors) != len(d["slots"]):
        raise ValueError(f"tensors has {len(tensors)} entries; the spec names {len(d['slots'])} "
                         f"slots ({', '.join(d['slots'])})")
    a = C.Adapter.from_buffer_copy(_adapter_template(spec))
    views = []
    for name, t in zip(d["slots"], tensors):
        v = _view(t, name, meta)
        views.append(v)
        a.tensor[C.SLOT[name]] = v.ptr()
    return a, views


def _context(d, device):
    ctx = C.context()
    stream = None
    if device.type == "cuda":
        stream = torch.cuda.current_stream(device).cuda_stream
    ctx.configure(d["backend"], d["output_mode"], d["fp32_mode"], stream)
    return ctx


_reported = set()
_report_lock = threading.Lock()
fallback_log = []  # (algo, direction, why) of every distinct fallback seen, in order


def _note_path(ctx, d, direction):
    if ctx.last_path_kind() != "eager":  # the common case: one C call, nothing decoded
        return
    kind, backend, why, _ = ctx.last_path()
    if kind == "eager" and why:
        key = (d["algo"], direction, why)
        with _report_lock:
            if key in _reported:
                return
            _reported.add(key)
            fallback_log.append(key)
        warnings.warn(f"lyco: {d['algo']} {direction} ran the eager twin on {backend}: {why}",
                      RuntimeWarning, stacklevel=4)


_dtype_cache = {}  # (spec, operand dtypes and devices) -> output dtype


def resolve_dtype(spec, tensors, base=None, x=None, y0=None):
    """The output dtype the policy gives this call (raises LycoDtypeError for fp16 with bf16).
    Cached per spec and operand dtypes (lyco_resolve_dtypes reads only those and the spec's output
    mode; the devices are in the key for _view's device check); a call that raises is not cached,
    so it raises again."""
    key = (spec, *[None if t is None else (t.dtype, t.device) for t in (base, x, y0, *tensors)])
    dtype = _dtype_cache.get(key)
    if dtype is None:
        dtype = _resolve_dtype(spec, tensors, base, x, y0)
        if len(_dtype_cache) >= 4096:
            _dtype_cache.clear()
        _dtype_cache[key] = dtype
    return dtype


def _resolve_dtype(spec, tensors, base, x, y0):
    d = parse_spec(spec)
    a, views = _adapter(spec, tensors, meta=True)
    vb = _view(base, "W", True) if base is not None else None
    vx = _view(x, "x", True) if x is not None else None
    vy = _view(y0, "y0", True) if y0 is not None else None
    out = C.Dtypes()
    ctx = C.context()
    ctx.configure(d["backend"], d["output_mode"], d["fp32_mode"], ctx._state[-1] if ctx._state else None)
    C.check(C.lib().lyco_resolve_dtypes(ctx.handle, ctypes.byref(a), _ptr(vb), _ptr(vx), _ptr(vy),
                                       ctypes.byref(out)))
    return _FROM_LYCO[out.output]


def _bypass_out_shape(d, x, y0):
    if y0 is not None:
        return tuple(y0.shape)
    lay = d["layer"]
    if lay["kind"] == "linear":
        return tuple(x.shape[:-1]) + (lay["out"],)
    if lay["kind"] == "norm":
        return tuple(x.shape)
    dims = len(lay["kernel"])
    spatial = []
    for i in range(dims):
        n = x.shape[2 + i]
        k, s, p, dl = lay["kernel"][i], lay["stride"][i], lay["padding"][i], lay["dilation"][i]
        spatial.append((n + 2 * p - dl * (k - 1) - 1) // s + 1)
    return (x.shape[0], lay["out"], *spatial)


def _merge_out_shape(d, weight):
    if weight is not None:
        return tuple(weight.shape)
    lay = d["layer"]
    if lay["kind"] == "linear":
        return (lay["out"], lay["in"])
    if lay["kind"] == "norm":
        return (lay["out"],)
    return (lay["out"], lay["in"] // lay["groups"], *lay["kernel"])


def _has_bias_out(d, bias):
    return any(s in d["slots"] for s in ("diff_b", "b_norm")) and (
        d["merge_mode"] == "delta" or bias is not None)


def _empty(like):
    return torch.empty((0,), dtype=torch.float32, device=like.device)


# ------------------------------------------------------------------------------------------------
# per-signature call frames: the C structs of a call built once, then only the pointers change
# ------------------------------------------------------------------------------------------------
_tls_frames = threading.local()
_MAX_FRAMES = 1024  # per thread; the cache is emptied when full


def _sig(t):
    """What a call's C structs depend on, per operand (the data pointer excepted)."""
    return None if t is None else (t.dtype, t.shape, t.stride(), t.device)


class _Frame:
    """The lyco_adapter, DLTensors and args struct of one call signature (direction, spec, every
    operand's dtype, shape, strides and device), built by the checked path on the first call of
    that signature in a thread and reused: a later call allocates its outputs, stores the data
    pointers into the DLTensors and calls C. The library reads these structs only during a call
    (it keeps no pointer to them), so reusing them after it returns is safe."""

    __slots__ = ("d", "dtype", "device", "shapes", "views", "call", "keep")

    def bind(self, tensors):
        """Store the data pointer of each tensor (aligned with self.views; None: absent)."""
        for v, t in zip(self.views, tensors):
            if v is not None:
                v.t.data = t.data_ptr()


def _frame(key, build):
    frames = getattr(_tls_frames, "d", None)
    if frames is None:
        frames = _tls_frames.d = {}
    fr = frames.get(key)
    if fr is None:
        fr = build()
        if len(frames) >= _MAX_FRAMES:
            frames.clear()
        frames[key] = fr
    return fr


def _call(fr, tensors, direction):
    """One call through a frame: bind this call's data pointers, configure the thread's context
    for the frame's spec and device (stream), call C, report a fallback once."""
    fr.bind(tensors)
    ctx = _context(fr.d, fr.device)
    C.check(fr.call(ctx.handle))
    _note_path(ctx, fr.d, direction)


def _new_frame(d, dtype, device, shapes, views, call, keep):
    fr = _Frame()
    fr.d, fr.dtype, fr.device, fr.shapes, fr.views, fr.call, fr.keep = (
        d, dtype, device, shapes, views, call, keep)
    return fr


# ------------------------------------------------------------------------------------------------
# bypass
# ------------------------------------------------------------------------------------------------
@torch.library.custom_op("lyco::bypass_fwd", mutates_args=())
def bypass_fwd(spec: str, x: torch.Tensor, y0: Optional[torch.Tensor],
               weight: Optional[torch.Tensor], tensors: List[torch.Tensor]) -> torch.Tensor:
    return _bypass_fwd_impl(spec, x, y0, weight, tensors)


def _bypass_fwd_impl(spec, x, y0, weight, tensors):
    fr = _frame(("bypass_fwd", spec, _sig(x), _sig(y0), _sig(weight), *map(_sig, tensors)),
                lambda: _bypass_fwd_frame(spec, x, y0, weight, tensors))
    y = torch.empty(fr.shapes, dtype=fr.dtype, device=fr.device)
    _call(fr, (x, y0, weight, y, *tensors), "bypass_fwd")
    return y


def _bypass_fwd_frame(spec, x, y0, weight, tensors):
    d = parse_spec(spec)
    dtype = resolve_dtype(spec, tensors, weight, x, y0)
    y = torch.empty(_bypass_out_shape(d, x, y0), dtype=dtype, device=x.device)
    a, views = _adapter(spec, tensors)
    vx, vy = _view(x, "x"), _view(y, "y")
    v0 = _view(y0, "y0") if y0 is not None else None
    vw = _view(weight, "weight") if weight is not None else None
    args = C.BypassArgs(vx.ptr(), _ptr(v0), _ptr(vw), int(d["bypass_flags"]))
    fn, py, pa, pargs = C.lib().lyco_bypass_fwd, vy.ptr(), ctypes.byref(a), ctypes.byref(args)
    return _new_frame(d, dtype, x.device, tuple(y.shape), [vx, v0, vw, vy, *views],
                      lambda h: fn(h, py, pa, pargs), (a, args))


@bypass_fwd.register_fake
def _(spec, x, y0, weight, tensors):
    d = parse_spec(spec)
    dtype = resolve_dtype(spec, tensors, weight, x, y0)
    return x.new_empty(_bypass_out_shape(d, x, y0), dtype=dtype)


@torch.library.custom_op("lyco::bypass_bwd", mutates_args=())
def bypass_bwd(spec: str, x: torch.Tensor, y0: Optional[torch.Tensor],
               weight: Optional[torch.Tensor], tensors: List[torch.Tensor], dy: torch.Tensor,
               need: List[bool]) -> List[torch.Tensor]:
    """[dx, dy0, grad of each slot]; an entry not needed is an empty tensor."""
    return _bypass_bwd_impl(spec, x, y0, weight, tensors, dy, need)


def _bypass_bwd_impl(spec, x, y0, weight, tensors, dy, need):
    d = parse_spec(spec)
    outs = _bypass_bwd_alloc(d, x, y0, tensors, need)
    fr = _frame(("bypass_bwd", spec, _sig(x), _sig(y0), _sig(weight), _sig(dy), tuple(need),
                 *map(_sig, tensors)),
                lambda: _bypass_bwd_frame(spec, x, y0, weight, tensors, dy, need, outs))
    _call(fr, (x, y0, weight, dy, *tensors, *outs), "bypass_bwd")
    return outs


def _bypass_bwd_frame(spec, x, y0, weight, tensors, dy, need, outs):
    d = parse_spec(spec)
    a, views = _adapter(spec, tensors)
    g = C.Grads()
    gviews = [None] * len(tensors)
    for i, (name, t) in enumerate(zip(d["slots"], outs[2:])):
        if need[2 + i]:
            v = gviews[i] = _view(t, "grad " + name)
            g.grad[C.SLOT[name]] = v.ptr()
    vdx = _view(outs[0], "dx") if need[0] else None
    vdy0 = _view(outs[1], "dy0") if need[1] else None
    vx, vdy = _view(x, "x"), _view(dy, "dy")
    v0 = _view(y0, "y0") if y0 is not None else None
    vw = _view(weight, "weight") if weight is not None else None
    args = C.BypassArgs(vx.ptr(), _ptr(v0), _ptr(vw), int(d["bypass_flags"]))
    fn, pg, pdx, pdy0 = C.lib().lyco_bypass_bwd, ctypes.byref(g), _ptr(vdx), _ptr(vdy0)
    pa, pargs, pdy = ctypes.byref(a), ctypes.byref(args), vdy.ptr()
    return _new_frame(d, None, x.device, None, [vx, v0, vw, vdy, *views, vdx, vdy0, *gviews],
                      lambda h: fn(h, pg, pdx, pdy0, pa, pargs, pdy), (a, args, g))


def _bypass_bwd_alloc(d, x, y0, tensors, need):
    outs = [torch.empty_like(x, memory_format=torch.contiguous_format) if need[0] else _empty(x),
            torch.empty_like(y0, memory_format=torch.contiguous_format)
            if (need[1] and y0 is not None) else _empty(x)]
    for i, t in enumerate(tensors):
        outs.append(torch.empty_like(t, memory_format=torch.contiguous_format)
                    if need[2 + i] else _empty(x))
    return outs


@bypass_bwd.register_fake
def _(spec, x, y0, weight, tensors, dy, need):
    return _bypass_bwd_alloc(parse_spec(spec), x, y0, tensors, need)


def _trainable(d, i, t):
    return d["slots"][i] not in C.MASK_SLOTS


def _bypass_setup(ctx, inputs, output):
    spec, x, y0, weight, tensors = inputs
    ctx.spec = spec
    ctx.has_y0 = y0 is not None
    ctx.has_w = weight is not None
    ctx.n = len(tensors)
    ctx.save_for_backward(x, y0, weight, *tensors)


def _needs(ctx, index, n=None):
    """needs_input_grad of one input (a list input gives a list or one bool, by torch version)."""
    v = ctx.needs_input_grad[index]
    if n is None:
        return bool(v)
    if isinstance(v, (list, tuple)):
        return [bool(e) for e in v]
    return [bool(v)] * n


# Bypasses with y = y0 + Δ(x): ∂L/∂y0 = RN_compute(dy) (the oracle's and every backend's dy0).
_Y0_ADDS = ("locon", "loha", "lokr", "glora", "dylora", "full", "norm")


def _dy0_is_dy(d, dy, y0, operands):
    """True when the gradient of y0 is dy itself, bit for bit: an additive bypass (not Δ alone), y0
    in dy's dtype, and dy exact in the compute dtype (16-bit dy: the compute dtype is dy's or fp32;
    fp32 dy: every operand fp32). The backward then returns dy for y0 without a copy, as PyTorch's
    own add does, and the kernel does not write a dy0."""
    additive = d["algo"] in _Y0_ADDS or (d["algo"] == "ia3" and d["ia3_on_input"])
    if not additive or d["bypass_flags"] & C.BYPASS_DELTA_ONLY or y0.dtype != dy.dtype:
        return False
    return dy.dtype != torch.float32 or all(t.dtype == torch.float32 for t in operands if t is not None)


def _bypass_grads(ctx, dy, needs, bwd):
    """(dx, dy0, [grad of each slot]) of a bypass; needs = (x, y0, weight, [each slot]) as
    needs_input_grad says; bwd runs the backward (the op, or its implementation)."""
    x, y0, weight, *tensors = ctx.saved_tensors
    d = parse_spec(ctx.spec)
    need_x, need_y0, need_w, slot_need = needs
    if ctx.has_w and need_w:
        raise NotImplementedError(
            f"lyco: bypass of {d['algo']} reads the base weight but gives it no gradient; "
            "freeze it (requires_grad_(False)) or compute the base layer's gradient yourself")
    need = [bool(need_x), ctx.has_y0 and bool(need_y0)]
    need += [bool(slot_need[i]) and _trainable(d, i, t) for i, t in enumerate(tensors)]
    dy0 = None
    if need[1] and _dy0_is_dy(d, dy, y0, (x, weight if ctx.has_w else None, *tensors)):
        need[1], dy0 = False, dy
    if not any(need):
        return None, dy0, [None] * ctx.n
    outs = bwd(ctx.spec, x, y0 if ctx.has_y0 else None, weight if ctx.has_w else None,
               tensors, dy, need)
    pick = [o if n else None for o, n in zip(outs, need)]
    return pick[0], dy0 if dy0 is not None else pick[1], pick[2:]


def _bypass_backward(ctx, dy):
    needs = (_needs(ctx, 1), _needs(ctx, 2), _needs(ctx, 3), _needs(ctx, 4, ctx.n))
    dx, dy0, grads = _bypass_grads(ctx, dy, needs, bypass_bwd)
    return None, dx, dy0, None, grads


bypass_fwd.register_autograd(_bypass_backward, setup_context=_bypass_setup)


class _Bypass(torch.autograd.Function):
    """lyco.bypass outside torch.compile: the same implementation and backward as the
    lyco::bypass_fwd op and its autograd formula, without torch.library's per-call dispatch
    (its wrappers and the pytree flattening of the list arguments cost ~0.2 ms of host time per
    call on the H200 machine, several times the C call: docs/python.md, bench/binding_overhead.py).
    Under torch.compile the op path is traced instead (one graph node per layer)."""

    @staticmethod
    def forward(ctx, spec, x, y0, weight, *tensors):
        y = _bypass_fwd_impl(spec, x, y0, weight, list(tensors))
        _bypass_setup(ctx, (spec, x, y0, weight, tensors), y)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        ni = ctx.needs_input_grad
        dx, dy0, grads = _bypass_grads(ctx, dy, (ni[1], ni[2], ni[3], ni[4:]), _bypass_bwd_impl)
        return (None, dx, dy0, None, *grads)


# ------------------------------------------------------------------------------------------------
# merge
# ------------------------------------------------------------------------------------------------
def _merge_fwd_alloc(spec, weight, bias, tensors):
    d = parse_spec(spec)
    dtype = resolve_dtype(spec, tensors, weight)
    dev = (weight if weight is not None else tensors[0]).device
    out = torch.empty(_merge_out_shape(d, weight), dtype=dtype, device=dev)
    ob = (torch.empty((d["layer"]["out"],), dtype=dtype, device=dev)
          if _has_bias_out(d, bias) else torch.empty((0,), dtype=dtype, device=dev))
    return [out, ob]


@torch.library.custom_op("lyco::merge_fwd", mutates_args=())
def merge_fwd(spec: str, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
              tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """[W'' (or ΔW, or the unmerged W), b'' for Full/Norm (else an empty tensor)]."""
    return _merge_fwd_impl(spec, weight, bias, tensors)


def _merge_fwd_impl(spec, weight, bias, tensors):
    fr = _frame(("merge_fwd", spec, _sig(weight), _sig(bias), *map(_sig, tensors)),
                lambda: _merge_fwd_frame(spec, weight, bias, tensors))
    out = torch.empty(fr.shapes[0], dtype=fr.dtype, device=fr.device)
    ob = torch.empty(fr.shapes[1], dtype=fr.dtype, device=fr.device)
    _call(fr, (weight, bias, out, ob, *tensors), "merge_fwd")
    return [out, ob]


def _merge_fwd_frame(spec, weight, bias, tensors):
    d = parse_spec(spec)
    out, ob = _merge_fwd_alloc(spec, weight, bias, tensors)
    a, views = _adapter(spec, tensors)
    vo = _view(out, "out")
    vob = _view(ob, "out_bias") if ob.numel() else None
    vw = _view(weight, "weight") if weight is not None else None
    vb = _view(bias, "bias") if bias is not None else None
    args = C.MergeArgs(_ptr(vw), _ptr(vb), C.MERGE_MODES.index(d["merge_mode"]))
    fn, po, pob = C.lib().lyco_merge_fwd, vo.ptr(), _ptr(vob)
    pa, pargs = ctypes.byref(a), ctypes.byref(args)
    return _new_frame(d, out.dtype, out.device, (tuple(out.shape), tuple(ob.shape)),
                      [vw, vb, vo, vob, *views], lambda h: fn(h, po, pob, pa, pargs), (a, args))


@merge_fwd.register_fake
def _(spec, weight, bias, tensors):
    return _merge_fwd_alloc(spec, weight, bias, tensors)


def _merge_bwd_alloc(tensors, need):
    return [torch.empty_like(t, memory_format=torch.contiguous_format) if n else _empty(t)
            for t, n in zip(tensors, need)]


@torch.library.custom_op("lyco::merge_bwd", mutates_args=())
def merge_bwd(spec: str, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
              tensors: List[torch.Tensor], d_out: torch.Tensor, d_out_bias: Optional[torch.Tensor],
              need: List[bool]) -> List[torch.Tensor]:
    """The gradient of each slot (an empty tensor where not needed)."""
    return _merge_bwd_impl(spec, weight, bias, tensors, d_out, d_out_bias, need)


def _merge_bwd_impl(spec, weight, bias, tensors, d_out, d_out_bias, need):
    outs = _merge_bwd_alloc(tensors, need)
    fr = _frame(("merge_bwd", spec, _sig(weight), _sig(bias), _sig(d_out), _sig(d_out_bias),
                 tuple(need), *map(_sig, tensors)),
                lambda: _merge_bwd_frame(spec, weight, bias, tensors, d_out, d_out_bias, need, outs))
    _call(fr, (weight, bias, d_out, d_out_bias, *tensors, *outs), "merge_bwd")
    return outs


def _merge_bwd_frame(spec, weight, bias, tensors, d_out, d_out_bias, need, outs):
    d = parse_spec(spec)
    a, views = _adapter(spec, tensors)
    g = C.Grads()
    gviews = [None] * len(tensors)
    for i, (name, t, n) in enumerate(zip(d["slots"], outs, need)):
        if n:
            v = gviews[i] = _view(t, "grad " + name)
            g.grad[C.SLOT[name]] = v.ptr()
    vw = _view(weight, "weight") if weight is not None else None
    vb = _view(bias, "bias") if bias is not None else None
    vd = _view(d_out, "d_out")
    vdb = _view(d_out_bias, "d_out_bias") if d_out_bias is not None else None
    args = C.MergeArgs(_ptr(vw), _ptr(vb), C.MERGE_MODES.index(d["merge_mode"]))
    fn, pg, pa, pargs = C.lib().lyco_merge_bwd, ctypes.byref(g), ctypes.byref(a), ctypes.byref(args)
    pd, pdb = vd.ptr(), _ptr(vdb)
    return _new_frame(d, None, d_out.device, None, [vw, vb, vd, vdb, *views, *gviews],
                      lambda h: fn(h, pg, pa, pargs, pd, pdb), (a, args, g))


@merge_bwd.register_fake
def _(spec, weight, bias, tensors, d_out, d_out_bias, need):
    return _merge_bwd_alloc(tensors, need)


def _merge_setup(ctx, inputs, output):
    spec, weight, bias, tensors = inputs
    ctx.spec = spec
    ctx.has_w, ctx.has_b = weight is not None, bias is not None
    ctx.n = len(tensors)
    ctx.out_shape = tuple(output[0].shape)
    ctx.out_dtype = output[0].dtype
    ctx.has_ob = output[1].numel() > 0
    ctx.save_for_backward(weight, bias, *tensors)


# W'' is W ± m·ΔW for these: ∂L/∂W = ±∂L/∂W'' (and likewise for a Full/Norm bias)
_ADDITIVE = ("locon", "loha", "lokr", "dylora", "full")


def _base_grad(d, name, g, dtype):
    """∂L/∂W (or ∂L/∂b) of a merge whose base tensor is trainable."""
    mode = d["merge_mode"]
    if mode == "delta":
        return None
    if d["algo"] not in _ADDITIVE:
        raise NotImplementedError(
            f"lyco: merge of {d['algo']} in mode {mode!r} has no gradient for the base {name}; "
            f"freeze it (requires_grad_(False)) or use an additive algorithm ({', '.join(_ADDITIVE)})")
    if g is None:
        return None
    return (g if mode == "weight" else -g).to(dtype)


def _merge_grads(ctx, d_out, d_ob, needs, bwd):
    """(∂L/∂W, ∂L/∂b, [grad of each slot]) of a merge; needs = (weight, bias, [each slot]) as
    needs_input_grad says; bwd runs the backward (the op, or its implementation)."""
    weight, bias, *tensors = ctx.saved_tensors
    d = parse_spec(ctx.spec)
    need_w, need_b, slot_need = needs
    need = [bool(slot_need[i]) and _trainable(d, i, t) for i, t in enumerate(tensors)]
    if not ctx.has_ob:
        d_ob = None
    gw = _base_grad(d, "weight", d_out, weight.dtype) if need_w else None
    gb = _base_grad(d, "bias", d_ob, bias.dtype) if ctx.has_b and need_b else None
    if not any(need):
        return gw, gb, [None] * ctx.n
    dev = tensors[0].device
    if d_out is None:
        d_out = torch.zeros(ctx.out_shape, dtype=ctx.out_dtype, device=dev)
    outs = bwd(ctx.spec, weight if ctx.has_w else None, bias if ctx.has_b else None,
               tensors, d_out, d_ob, need)
    return gw, gb, [o if n else None for o, n in zip(outs, need)]


def _merge_backward(ctx, grads):
    needs = (_needs(ctx, 1), _needs(ctx, 2), _needs(ctx, 3, ctx.n))
    gw, gb, slot_grads = _merge_grads(ctx, grads[0], grads[1], needs, merge_bwd)
    return None, gw, gb, slot_grads


merge_fwd.register_autograd(_merge_backward, setup_context=_merge_setup)


class _Merge(torch.autograd.Function):
    """lyco.merge outside torch.compile (see _Bypass): [W'', b''] from the op's implementation,
    the op's backward formula on its implementation."""

    @staticmethod
    def forward(ctx, spec, weight, bias, *tensors):
        out, ob = _merge_fwd_impl(spec, weight, bias, list(tensors))
        _merge_setup(ctx, (spec, weight, bias, tensors), (out, ob))
        if ob.numel() == 0:
            ctx.mark_non_differentiable(ob)
        return out, ob

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_ob):
        ni = ctx.needs_input_grad
        gw, gb, grads = _merge_grads(ctx, d_out, d_ob, (ni[1], ni[2], ni[3:]), _merge_bwd_impl)
        return (None, gw, gb, *grads)


def _compiling():
    return torch.compiler.is_compiling()


# ------------------------------------------------------------------------------------------------
# the user-facing calls
# ------------------------------------------------------------------------------------------------
def _split(tensors):
    if not isinstance(tensors, dict) or not tensors:
        raise TypeError(f"tensors is {type(tensors).__name__}; expected a non-empty dict of slot "
                        "name -> tensor (e.g. {'lora_down': d, 'lora_up': u})")
    items = [(k, v) for k, v in tensors.items() if v is not None]
    for k, v in items:
        if not isinstance(v, torch.Tensor):
            raise TypeError(f"tensors[{k!r}] is {type(v).__name__}; expected a torch.Tensor")
    return [k for k, _ in items], [v for _, v in items]


def bypass(x, tensors, layer, algo="locon", y0=None, weight=None, **options):
    """y = y0 + Δ(x) (or Δ alone without y0): the adapter applied to the layer input x without
    building ΔW. tensors: slot name -> tensor (lyco.SLOTS); layer: lyco.linear/conv/norm(...)
    or lyco.layer_of(module); options: alpha, scale, multiplier, output_mode ('promote'|'base'),
    and the other hyper-parameters of lyco_adapter. Differentiable in x, y0 and every factor."""
    slots, ts = _split(tensors)
    spec = make_spec(algo, layer, slots, **options)
    if _compiling():
        return bypass_fwd(spec, x, y0, weight, ts)
    return _Bypass.apply(spec, x, y0, weight, *ts)


def merge(tensors, layer, algo="locon", weight=None, bias=None, mode="delta", **options):
    """ΔW (mode 'delta'), W'' = W + m·ΔW ('weight') or W − m·ΔW ('unmerge'); for Full/Norm with
    a bias slot, returns (W-side, bias-side). Differentiable in every adapter factor."""
    slots, ts = _split(tensors)
    spec = make_spec(algo, layer, slots, merge_mode=mode, **options)
    if _compiling():
        out, ob = merge_fwd(spec, weight, bias, ts)
    else:
        out, ob = _Merge.apply(spec, weight, bias, *ts)
    with_bias = any(s in slots for s in ("diff_b", "b_norm")) and (mode == "delta" or bias is not None)
    return (out, ob) if with_bias else out
