"""lyco as a kernel backend of LyCORIS 4.x (lycoris-lora on PyPI).

Switch it on with `import lyco.lycoris` plus LYCORIS_KERNEL_BACKEND=lyco in the environment, or
with `lyco.lycoris.enable()`; an unchanged LyCORIS training script then runs its adapter modules'
forward (and so backward) on lyco's kernels, on the GPU and on the CPU (where LyCORIS itself has
no kernels). LyCORIS's dispatcher knows only its own backend names, so this module teaches its
`resolve_backend` that "lyco" means "LyCORIS's own auto choice" for whatever lyco leaves to it.

A module lyco takes runs as y = base(x) + lyco::bypass_fwd(x, factors): the same function as
LyCORIS's forward (merge-form or bypass-form), without building ΔW. A module lyco declines (an
algorithm or option this slice does not route yet; see DECLINES) runs LyCORIS's own forward, and
the reason is reported once per (module class, reason) as a RuntimeWarning and kept in
`fallbacks`; `report(model)` lists what each module will run."""

import os
import threading
import warnings

import torch

from . import ops

_enabled = None  # None: follow LYCORIS_KERNEL_BACKEND; True/False: enable()/disable()
_lock = threading.Lock()
_reported = set()
fallbacks = []  # (module class, reason), in the order first seen


def enabled():
    if _enabled is not None:
        return _enabled
    return os.environ.get("LYCORIS_KERNEL_BACKEND", "").lower() == "lyco"


def enable():
    """Route LyCORIS modules through lyco from now on (same as LYCORIS_KERNEL_BACKEND=lyco)."""
    global _enabled
    _enabled = True


def disable():
    """Back to LyCORIS's own kernels (LYCORIS_KERNEL_BACKEND is ignored until enable())."""
    global _enabled
    _enabled = False


def _report(cls, reason):
    key = (cls, reason)
    with _lock:
        if key in _reported:
            return
        _reported.add(key)
        fallbacks.append(key)
    warnings.warn(f"lyco: {cls} runs on LyCORIS's own path: {reason}", RuntimeWarning,
                  stacklevel=3)


def _org(m):
    org = getattr(m, "org_module", None)
    return org[0] if isinstance(org, (list, tuple)) else org


def _scalar(m, tensors):
    s = getattr(m, "scalar", None)
    if isinstance(s, torch.nn.Parameter):
        tensors["scalar"] = s.reshape(())
    elif isinstance(s, torch.Tensor) and not torch.compiler.is_compiling() and float(s) != 1.0:
        tensors["scalar"] = s.reshape(())


def _dropout_p(m):
    d = getattr(m, "dropout", 0)
    if isinstance(d, torch.nn.Module):
        return float(getattr(d, "p", 0.0))
    return float(d or 0.0)


def _dora_decline(m):
    """Why a module with DoRA (wd) stays on LyCORIS's path, or None: lyco fuses DoRA with LoCon,
    LoHa and LoKr (y = base(x) + op(x, W'' − W), LyCORIS's merge-form forward)."""
    if type(m).__name__ not in ("LoConModule", "LohaModule", "LokrModule"):
        return f"DoRA with {type(m).__name__} is not fused in lyco yet (LoCon, LoHa and LoKr are)"
    if getattr(m, "bypass_mode", False):
        return "DoRA in LyCORIS's bypass mode: LyCORIS ignores the decomposition there"
    return _frozen_base(m, "DoRA")


def _common_decline(m):
    if getattr(m, "wd", False):
        why = _dora_decline(m)
        if why:
            return why
    if m.training and (getattr(m, "rank_dropout", 0) or _dropout_p(m)):
        return "rank dropout / dropout masks are not routed to lyco in this slice"
    if getattr(m, "bypass_mode", False) is None:
        return "bypass_mode is undecided"
    org = _org(m)
    try:
        ops.layer_of(org)
    except (TypeError, ValueError) as e:
        return f"base layer: {e}"
    if isinstance(org, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)) and org.groups != 1:
        return "grouped convolution"
    return None


def _plan_locon(m):
    t = {"lora_down": m.lora_down.weight, "lora_up": m.lora_up.weight}
    if getattr(m, "tucker", False):
        t["lora_mid"] = m.lora_mid.weight
    _scalar(m, t)
    return _with_dora(m, "locon", t)  # DoRA: the axis from dora_scale's shape


def _with_dora(m, algo, t):
    """The plan of an additive module, with DoRA's scale when it has one (Δ then reads W)."""
    if getattr(m, "wd", False):
        t["dora_scale"] = m.dora_scale
        return algo, t, {"scale": float(m.scale)}, "weighted"
    return algo, t


def _plan_loha(m):
    t = {k: getattr(m, k) for k in ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b")}
    if getattr(m, "tucker", False):
        t["hada_t1"], t["hada_t2"] = m.hada_t1, m.hada_t2
    _scalar(m, t)
    return _with_dora(m, "loha", t)


def _plan_lokr(m):
    t = {}
    for k in ("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b", "lokr_t2"):
        v = getattr(m, k, None)
        if isinstance(v, torch.Tensor):
            t[k] = v
    _scalar(m, t)
    return _with_dora(m, "lokr", t)


def _plan_oft(algo):
    def plan_(m):
        if getattr(m, "bypass_mode", False):
            return f"{algo} in LyCORIS's bypass mode rotates the bias too; lyco follows its merge form"
        t = {"oft_blocks": m.oft_blocks}
        if getattr(m, "rescaled", False):
            t["rescale"] = m.rescale
        return algo, t, {"constraint": float(m.constraint)}, "rotate"
    return plan_


def _frozen_base(m, algo):
    if m._current_weight().requires_grad:
        return f"{algo} reads the base weight, which requires grad (lyco gives it no gradient)"
    return None


def _plan_ia3(m):
    on_input = bool(getattr(m, "train_input", False))  # the python bool, not the buffer
    if on_input and _frozen_base(m, "IA3 on input"):
        return _frozen_base(m, "IA3 on input")
    return "ia3", {"ia3_weight": m.weight}, {"ia3_on_input": int(on_input)}, (
        "weighted" if on_input else "rotate")


def _plan_glora(m):
    if _frozen_base(m, "GLoRA"):
        return _frozen_base(m, "GLoRA")
    t = {"glora_a1": m.a1.weight, "glora_a2": m.a2.weight, "glora_b1": m.b1.weight,
         "glora_b2": m.b2.weight}
    _scalar(m, t)
    return "glora", t, {"scale": float(m.scale)}, "weighted"


PLANS = {"LoConModule": _plan_locon, "IA3Module": _plan_ia3, "GLoRAModule": _plan_glora, "LohaModule": _plan_loha, "LokrModule": _plan_lokr,
         "DiagOFTModule": _plan_oft("diag_oft"), "ButterflyOFTModule": _plan_oft("boft")}
DECLINES = {
    "DyLoraModule": "DyLoRA (a rank block drawn per step) is not routed to lyco in this slice",
    "FullModule": "Full: LyCORIS runs the layer's own op on the trained weight; nothing to fuse",
}


def plan(m):
    """(algo, tensors) if lyco takes module m now, else the reason it does not (a string)."""
    cls = type(m).__name__
    if cls not in PLANS:
        return DECLINES.get(cls, f"{cls} is not an algorithm lyco routes")
    why = _common_decline(m)
    return why if why else PLANS[cls](m)


def report(model):
    """{module name: 'lyco' or the reason it runs on LyCORIS's own path} for every LyCORIS
    module in model (or in a LycorisNetwork)."""
    from lycoris.modules.base import LycorisBaseModule
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, LycorisBaseModule):
            p = plan(m)
            out[getattr(m, "lora_name", name)] = p if isinstance(p, str) else "lyco"
    return out


def _forward(orig):
    def forward(self, x, *args, **kwargs):
        if not enabled():
            return orig(self, x, *args, **kwargs)
        p = plan(self)
        if isinstance(p, str):
            if not torch.compiler.is_compiling():
                _report(type(self).__name__, p)
            return orig(self, x, *args, **kwargs)
        algo, tensors = p[0], p[1]
        options = p[2] if len(p) > 2 else {"scale": float(self.scale)}
        kind = p[3] if len(p) > 3 else "add"
        if self.module_dropout and self.training:  # same draw as LyCORIS's own forward
            if torch.rand(1) < self.module_dropout:
                return self.org_forward(x, *args, **kwargs)
        layer = ops.layer_of(_org(self))
        if kind in ("add", "weighted"):  # y = base(x) + Δ(x); "weighted": Δ reads W too
            y0 = self.org_forward(x, *args, **kwargs)
            w = self._current_weight().to(x.device) if kind == "weighted" else None
            return ops.bypass(x, tensors, layer, algo=algo, y0=y0, weight=w,
                              multiplier=float(self.multiplier), **options)
        # "rotate": the adapter acts on W·x (the bias stays outside, as in LyCORIS's merge form)
        w = self._current_weight().to(x.device)
        y0 = self.op(x, w, None, **self.kw_dict)
        y = ops.bypass(x, tensors, layer, algo=algo, y0=y0, multiplier=float(self.multiplier),
                       **options)
        b = self._current_bias()
        if b is None:
            return y
        b = b.to(device=y.device, dtype=y.dtype)
        return y + (b if y.dim() == 2 or self.op is torch.nn.functional.linear
                    else b.view(1, -1, *([1] * (y.dim() - 2))))
    forward.__wrapped__ = orig
    forward.__doc__ = orig.__doc__
    return forward


def _patch_dispatch():
    """Teach LyCORIS's resolve_backend the name 'lyco' (= its own auto choice for the rest)."""
    from lycoris.kernels import dispatch, ops as lops, select
    if getattr(dispatch.resolve_backend, "_lyco", False):
        return
    orig = dispatch.resolve_backend

    def resolve_backend(requested=None, device=None):
        req = (requested or os.environ.get("LYCORIS_KERNEL_BACKEND", "auto")).lower()
        return orig("auto" if req == "lyco" else requested, device)

    resolve_backend._lyco = True
    for mod in (dispatch, select, lops):
        if getattr(mod, "resolve_backend", None) is orig:
            mod.resolve_backend = resolve_backend
    choose = select.choose

    def choose_(tensors, supported=True, backend=None):
        if (backend or os.environ.get("LYCORIS_KERNEL_BACKEND", "")).lower() == "lyco":
            backend = "auto"
        return choose(tensors, supported, backend)

    select.choose = choose_
    import importlib
    for name in ("locon", "loha", "lokr", "diag_oft", "boft", "general"):
        f = importlib.import_module(f"lycoris.functional.{name}")
        if getattr(f, "choose", None) is choose:
            f.choose = choose_
    for name in ("glora", "dylora", "ia3"):
        f = importlib.import_module(f"lycoris.modules.{name}")
        if getattr(f, "choose", None) is choose:
            f.choose = choose_


def _install():
    import lycoris.modules as lm
    _patch_dispatch()
    for cls_name in list(PLANS) + list(DECLINES):
        cls = getattr(lm, cls_name, None)
        if cls is None:
            import lycoris.modules.locon  # noqa: F401
            cls = next((c for c in _all_module_classes() if c.__name__ == cls_name), None)
        if cls is None or getattr(cls.forward, "__wrapped__", None) is not None:
            continue
        cls.forward = _forward(cls.forward)


def _all_module_classes():
    from lycoris.modules.base import LycorisBaseModule
    seen, todo = [], [LycorisBaseModule]
    while todo:
        c = todo.pop()
        for s in c.__subclasses__():
            if s not in seen:
                seen.append(s)
                todo.append(s)
    return seen


_install()
