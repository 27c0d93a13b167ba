"""Numeric checks of the upstream defects listed in ALGORITHMS.md §8 against the
installed lycoris-lora (4.x).  Each check runs upstream's own module code on
small random float64 tensors (CPU, eager torch bodies) and prints one line:

    <§8 item>  FIXED | REMAINS | CHANGED   <evidence: a relative error or the exception>

"rel(a, b)" below is max|a - b| / max|b|; values around 1e-16 mean "equal",
values of order 1 mean "different".

Usage:  .venv-golden/bin/python tests/golden/check_upstream.py
"""

import os
import random

os.environ["LYCORIS_KERNEL_BACKEND"] = "torch"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from lycoris.functional import factorization, power2factorization  # noqa: E402
from lycoris.functional.loha import make_weight_tucker  # noqa: E402
from lycoris.modules import (  # noqa: E402
    ButterflyOFTModule,
    DiagOFTModule,
    DyLoraModule,
    FullModule,
    IA3Module,
    GLoRAModule,
    LoConModule,
    LohaModule,
    LokrModule,
    NormModule,
    get_module,
    make_module,
)
from lycoris.wrapper import network_module_dict  # noqa: E402

torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
RESULTS = []


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def report(item, status, evidence):
    RESULTS.append((item, status, evidence))
    print(f"{item:10s} {status:8s} {evidence}")


def randomise(module, std=0.3):
    with torch.no_grad():
        for n, p in module.named_parameters():
            if n == "rescale":
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif n == "dora_scale":
                p.mul_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.1 if n == "oft_blocks" else std))
    return module


def linear(O=12, I=10, bias=True):
    lin = nn.Linear(I, O, bias=bias)
    lin.requires_grad_(False)
    return lin


def crash(fn):
    try:
        fn()
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"


x = torch.randn(5, 10)

# ---------------------------------------------------------------------------- #1
for cls, name in ((LohaModule, "LoHa"), (LokrModule, "LoKr")):
    base = linear()
    kw = dict(lora_dim=2, alpha=1.3) if cls is LokrModule else dict(lora_dim=4, alpha=1.3)
    m = randomise(cls("t", base, multiplier=1.0, use_scalar=True, **kw)).eval()
    with torch.no_grad():
        m.scalar.fill_(0.5)
        s = m.scale
        dw0 = m.get_weight(base.weight.shape) / s      # upstream core without s
        merged = m.get_merged_weight(1.0, base.weight.shape)[0] - base.weight
        y = m(x) - base(x)                              # training forward (rebuild mode)
    ev = (f"s={s:.4g}, sigma=0.5: merge-W vs s^2*dW0 rel={rel(merged, s * s * dw0):.1e}, "
          f"vs s*sigma*dW0 rel={rel(merged, s * 0.5 * dw0):.2f}; forward vs x(s*sigma*dW0)^T "
          f"rel={rel(y, x @ (s * 0.5 * dw0).T):.1e}")
    ok = rel(merged, s * 0.5 * dw0) < 1e-12
    report(f"#1 {name}", "FIXED" if ok else "REMAINS", ev)

# ---------------------------------------------------------------------------- #2
base = linear()
m = randomise(LokrModule("t", base, lora_dim=2, alpha=1.3)).eval()
with torch.no_grad():
    dw = m.get_weight(base.weight.shape)               # includes s
    m.bypass_mode = True
    yb = m(x) - base(x)
report("#2 LoKr", "FIXED" if rel(yb, x @ dw.T) < 1e-12 else "REMAINS",
       f"linear bypass vs x(s*dW0)^T rel={rel(yb, x @ dw.T):.1e} (s={m.scale:.4g})")
conv = nn.Conv2d(6, 8, 3, padding=1).requires_grad_(False)
xc = torch.randn(2, 6, 5, 5)
for tucker in (False, True):
    m = randomise(LokrModule("t", conv, lora_dim=1, alpha=0.5, use_tucker=tucker)).eval()
    with torch.no_grad():
        ym = m(xc)
        m.bypass_mode = True
        err = crash(lambda: m(xc))
        yb = None if err else m(xc)
    ev = err or f"bypass vs rebuild rel={rel(yb - conv(xc), ym - conv(xc)):.1e}"
    report("#2 LoKr", "FIXED" if (not err and rel(yb, ym) < 1e-12) else "REMAINS",
           f"conv decomposed W2{' Tucker' if tucker else ''}: {ev}")

# ---------------------------------------------------------------------------- #3
t1, t2 = torch.randn(4, 4, 3, 3), torch.randn(4, 4, 3, 3)
w1d, w2d, w1u, w2u = torch.randn(4, 6), torch.randn(4, 6), torch.randn(4, 8), torch.randn(4, 8)
ps = [t.clone().requires_grad_() for t in (t1, w1d, w1u, t2, w2d, w2u)]
gout = torch.randn(8, 6, 3, 3)
custom = torch.autograd.grad(make_weight_tucker(*ps, torch.tensor(0.7)), ps, gout)
qs = [t.clone().requires_grad_() for t in (t1, w1d, w1u, t2, w2d, w2u)]
ref_w = (torch.einsum("ijhw,jr,ip->prhw", qs[0], qs[1], qs[2])
         * torch.einsum("ijhw,jr,ip->prhw", qs[3], qs[4], qs[5]) * 0.7)
ref = torch.autograd.grad(ref_w, qs, gout)
errs = [rel(a, b) for a, b in zip(custom, ref)]
report("#3 LoHa", "FIXED" if max(errs) < 1e-12 else "REMAINS",
       "HadaWeightTucker grads vs fp64 autograd rel (t1,w1d,w1u,t2,w2d,w2u) = "
       + ", ".join(f"{e:.0e}" for e in errs))

# ---------------------------------------------------------------------------- #4
base = linear()
m = randomise(GLoRAModule("t", base, lora_dim=4, alpha=1.3, use_scalar=True)).eval()
with torch.no_grad():
    m.scalar.fill_(0.5)
    ym = m(x)
    m.bypass_mode = True
    yb = m(x)
report("#4 GLoRA", "FIXED" if rel(yb, ym) < 1e-12 else "REMAINS",
       f"s={m.scale:.4g}, sigma=0.5: bypass vs rebuild forward rel={rel(yb, ym):.1e}")

# ---------------------------------------------------------------------------- #5/#6
# OFT/BOFT still crash on fp64 parameters (the Cayley inverse is forced to fp32,
# §7), so these checks run in fp32 and "equal" means rel < 1e-5.
err = crash(lambda: DiagOFTModule("t", linear(), lora_dim=4)(x))
report("§7 OFT", "REMAINS" if err else "FIXED", f"fp64 Diag-OFT forward: {err or 'runs'}")
torch.set_default_dtype(torch.float32)
x = x.float()
for bias in (False, True):
    base = linear(O=12, bias=bias)
    if bias:
        with torch.no_grad():
            base.bias.copy_(torch.randn(12))
    m = randomise(DiagOFTModule("t", base, lora_dim=4)).eval()
    with torch.no_grad():
        ym = m(x)
        m.bypass_mode = True
        yb = m(x)
    report("#5 OFT", "REMAINS" if bias else "info",
           f"bias={'yes' if bias else 'no '}: bypass vs rebuild rel={rel(yb, ym):.1e}"
           + (" (bypass rotates the bias)" if bias else ""))
base = linear(O=12, bias=False)
m = randomise(DiagOFTModule("t", base, lora_dim=4, rescaled=True)).eval()
err = crash(lambda: m.bypass_forward_diff(x))
report("#5 OFT", "FIXED" if err is None else "REMAINS",
       f"module bypass_forward_diff: {err or 'runs'}")
with torch.no_grad():
    R = m.get_r()                                      # (nb, bs, bs)
    rho = m.rescale.view(-1)
    Wb = base.weight.view(4, 3, 10)
    ref_merge = rho[:, None] * torch.einsum("knm,kni->kmi", R, Wb).reshape(12, 10)
    merged = m.get_merged_weight(1.0, base.weight.shape)[0]
    yb = m.bypass_forward(x)
    err_diff = crash(lambda: m.get_diff_weight(1.0))
report("#6 OFT", "FIXED" if rel(merged, ref_merge) < 1e-5 else "REMAINS",
       f"rescaled merge (m=1) vs rho*(R^T W) rel={rel(merged, ref_merge):.1e}; "
       f"get_diff_weight(1): {err_diff or 'runs'}")
report("#5 OFT", "FIXED" if rel(yb, x @ ref_merge.T) < 1e-5 else "REMAINS",
       f"rescaled bypass (m=1, no bias) vs x(rho*R^T W)^T rel={rel(yb, x @ ref_merge.T):.1e}")
m.multiplier = 0.7
with torch.no_grad():
    M = 0.7 * R + 0.3 * torch.eye(3)
    ref07 = rho[:, None] * torch.einsum("knm,kni->kmi", M, Wb).reshape(12, 10)
    merged07 = m.get_merged_weight(0.7, base.weight.shape)[0]
    err_b07 = crash(lambda: m.bypass_forward(x, 0.7))
    err_d07 = crash(lambda: m.get_diff_weight(0.7))
    m_plain = DiagOFTModule("t", base, lora_dim=4)
    m_plain.oft_blocks.copy_(m.oft_blocks)
    err_p07 = crash(lambda: m_plain.bypass_forward(x, 0.7))
report("#5 OFT", "REMAINS" if err_b07 else "FIXED",
       f"module bypass at multiplier 0.7: rescaled: {err_b07 or 'runs'}; "
       f"not rescaled: {err_p07 or 'runs'}")
report("#6 OFT", "REMAINS" if err_d07 else "FIXED",
       f"rescaled merge m=0.7 vs rho*(M^T W) rel={rel(merged07, ref07):.1e}; "
       f"get_diff_weight(0.7): {err_d07 or 'runs'}")

# ---------------------------------------------------------------------------- #7
base = linear(O=12, bias=False)
m = randomise(ButterflyOFTModule("t", base, lora_dim=6, rescaled=True)).eval()
with torch.no_grad():
    ym = m(x)
    m.bypass_mode = True
    err = crash(lambda: m(x))
    yb = None if err else m(x)
report("#7 BOFT", "FIXED" if (not err and rel(yb, ym) < 1e-5) else "REMAINS",
       err or f"module bypass vs rebuild (no bias) rel={rel(yb, ym):.1e}")

torch.set_default_dtype(torch.float64)
x = x.double()

# ---------------------------------------------------------------------------- #8
report("#8 IA3", "FIXED" if "ia3" in network_module_dict else "REMAINS",
       f"'ia3' in wrapper.network_module_dict: {'ia3' in network_module_dict}")
base = linear()
m = randomise(IA3Module("t", base, train_on_input=True)).eval()
sd = {f"t.{k}": v for k, v in m.state_dict().items()}
cls, params = get_module(sd, "t")
err = crash(lambda: make_module(cls, params, "t", base))
if err is None:
    mm = make_module(cls, params, "t", base)
    ev = f"reload runs; on_input read back: train_input={mm.train_input} (saved 1)"
    status = "FIXED" if mm.train_input else "REMAINS"
else:
    ev, status = f"reload (make_module) crashes: {err}", "REMAINS"
report("#8 IA3", status, ev)
m = randomise(IA3Module("t", base)).eval()
with torch.no_grad():
    ym = m(x)
    m.bypass_mode = True
    yb = m(x)
    f = 1 + m.weight
report("#8 IA3", "REMAINS" if rel(yb, base(x) * f) < 1e-12 else "CHANGED",
       f"out-mode bypass == y0*(1+w) (bias scaled) rel={rel(yb, base(x) * f):.1e}; "
       f"vs rebuild rel={rel(yb, ym):.1e}")

# ---------------------------------------------------------------------------- #9
base = linear()
W0, b0 = base.weight.clone(), base.bias.clone()
m = FullModule("t", base, multiplier=0.7)
m.apply_to()
with torch.no_grad():
    m.weight.add_(0.1 * torch.randn_like(m.weight))
    m.bias.add_(0.1 * torch.randn_like(m.bias))
err = crash(lambda: m(x))
with torch.no_grad():
    d, db = m.weight - W0, m.bias - b0
    ref = F.linear(x, W0 + 0.7 * d, b0 + 0.7 * db)
    ev = err or f"forward after apply_to runs; y vs op(x, W+m*diff, b+m*diff_b) rel={rel(m(x), ref):.1e}"
    dw, _ = m.get_diff_weight(0.7)
report("#9 Full", "FIXED" if err is None else "REMAINS", ev)
report("#9 Full", "FIXED" if rel(dw, 0.7 * d) < 1e-12 else "REMAINS",
       f"non-diff get_diff_weight(0.7) vs 0.7*diff rel={rel(dw, 0.7 * d):.1e} (m^2 would be 0.3)")
base = linear()
sd = {"t.diff": 0.1 * torch.randn(12, 10), "t.diff_b": 0.1 * torch.randn(12)}
cls, params = get_module(sd, "t")
mm = make_module(cls, params, "t", base)
err = crash(lambda: mm.get_merged_weight(0.7))
if err is None:
    w2, b2 = mm.get_merged_weight(0.7)
    ev = (f"merge with diff_b runs; rel W={rel(w2, base.weight + 0.7 * sd['t.diff']):.1e}, "
          f"b={rel(b2, base.bias + 0.7 * sd['t.diff_b']):.1e}")
report("#9 Full", "FIXED" if err is None else "REMAINS", err or ev)
m = FullModule("t", linear(), rank_dropout=0.5)
m.apply_to()
m.train()
err = crash(lambda: m(x))
report("#9 Full", "FIXED" if err is None else "REMAINS",
       f"rank_dropout in training: {err or 'runs'}")

# ---------------------------------------------------------------------------- others
base = linear()
m = randomise(DyLoraModule("t", base, lora_dim=4, alpha=2.0, block_size=2))
outcomes = []
for seed in range(8):  # the block index is drawn with Python's random module
    random.seed(seed)
    err = crash(lambda: m.bypass_forward_diff(x))
    if err:
        outcomes.append("crash")
        continue
    random.seed(seed)
    with torch.no_grad():
        d = m.bypass_forward_diff(x)
    up = torch.cat(list(m.up_list), 1)
    down = torch.cat(list(m.down_list), 0)
    outcomes.append(f"unscaled rel={rel(d, x @ down.T @ up.T):.0e}")
report("#10 DyLoRA", "REMAINS",
       "bypass over 8 random draws: " + ", ".join(sorted(set(outcomes)))
       + " (works only when all blocks are drawn, and alpha/(t+1) is never applied)")
dil = nn.Conv2d(6, 8, 3, padding=2, dilation=2).requires_grad_(False)
m = randomise(LoConModule("t", dil, lora_dim=4, bypass_mode=True))
err = crash(lambda: m(xc))
report("#11 LoCon", "REMAINS" if err else "FIXED", f"bypass with dilation 2: {err or 'runs'}")
grp = nn.Conv2d(6, 8, 3, padding=1, groups=2).requires_grad_(False)
for cls, kw in ((LoConModule, {}), (LohaModule, {}), (LokrModule, {})):
    m = randomise(cls("t", grp, lora_dim=2, alpha=2, **kw)).eval()  # s = 1 (no s^2 issue)
    err = crash(lambda: m(xc))
    if err is None:
        with torch.no_grad():
            dw = m.get_merged_weight(1.0, grp.weight.shape)[0] - grp.weight
            e = rel(m(xc) - grp(xc), F.conv2d(xc, dw, padding=1, groups=2))
        err = f"runs, dW {tuple(dw.shape)}, y - y0 vs conv(x, dW, groups=2) rel={e:.0e}"
    report("#12 groups", "FIXED" if err.startswith("runs") else "REMAINS",
           f"{cls.__name__} rebuild forward on groups=2 conv: {err}")
m = randomise(LoConModule("t", linear(), lora_dim=4, weight_decompose=True, bypass_mode=True))
with torch.no_grad():
    yb = m(x)
    m.bypass_mode = False
    ym = m(x)
report("#13 DoRA", "REMAINS" if rel(yb, ym) > 1e-6 else "FIXED",
       f"DoRA module in bypass: bypass vs rebuild rel={rel(yb, ym):.2f} (DoRA ignored in bypass)")
for what, mod, drop in (
    ("missing alpha", LoConModule("t", linear(), lora_dim=4), "alpha"),
    ("wd_on_out=False file", LoConModule("t", linear(), lora_dim=4, weight_decompose=True,
                                         wd_on_out=False), None),
    ("LoKr Tucker file", LokrModule("t", conv, lora_dim=1, use_tucker=True), None),
):
    sd = {f"t.{k}": v for k, v in randomise(mod).state_dict().items() if k != drop}
    cls, params = get_module(sd, "t")
    tgt = conv if "Tucker" in what else linear()
    err = crash(lambda: make_module(cls, params, "t", tgt))
    report("#14 reload", "REMAINS" if err else "FIXED", f"{what}: {err or 'loads'}")
ln = nn.LayerNorm(12, bias=False)
err = crash(lambda: NormModule("t", ln)(torch.randn(5, 12)))
report("#18 Norm", "REMAINS" if err else "FIXED", f"LayerNorm(bias=False): {err or 'runs'}")
fac = {n: factorization(n, -1) for n in (128, 360, 3072)}
p2 = {n: power2factorization(n, 16) for n in (48, 320, 768)}
report("§1.9", "info", f"factorization(n,-1) {fac}; power2factorization(n,16) {p2}")

# ---------------------------------------------------------------------------- rounding
# Bit-level sequences in bf16 (§1.3 / §2.x of ALGORITHMS.md describe 3.2.0's order).
torch.set_default_dtype(torch.float32)
bf = torch.bfloat16
xb = torch.randn(5, 40).to(bf)


def bf16_module(cls, **kw):
    base = linear(O=48, I=40).to(bf)
    return base, randomise(cls("t", base, multiplier=0.7, bypass_mode=True, **kw)).to(bf).eval()


base, m = bf16_module(LoConModule, lora_dim=4, alpha=1.3)
with torch.no_grad():
    u = (xb @ m.lora_down.weight.T) @ m.lora_up.weight.T
    y = m(xb) - base(xb)
    y_spec = base(xb) + (u * m.scale) * 0.7            # spec: ((u*sigma)*s)*m
    y_4x = base(xb) + u * (m.scale * 0.7)              # one multiply by f32(s*m)
report("rnd LoCon", "CHANGED" if torch.equal(m(xb), y_4x) and not torch.equal(m(xb), y_spec)
       else "same", f"bf16 bypass = rnd(u*f32(s*m))*sigma (one rounding), not ((u*sigma)*s)*m: "
       f"matches 4.x order {torch.equal(m(xb), y_4x)}, spec order {torch.equal(m(xb), y_spec)}")

base, m = bf16_module(LohaModule, lora_dim=4, alpha=1.3)
with torch.no_grad():
    p = (m.hada_w1_a @ m.hada_w1_b) * (m.hada_w2_a @ m.hada_w2_b)
    g_p = torch.tensor(m.scale, dtype=bf)              # spec: gamma = rnd_P(s), then *sigma, *m
    e_spec = ((p * g_p) * m.scalar) * 0.7
    e_4x = p * torch.tensor(m.scale * 0.7, dtype=bf)   # 4.x linear bypass: gamma = rnd_A(s*m)
    yb = m(xb)
report("rnd LoHa", "CHANGED" if torch.equal(yb, base(xb) + xb @ e_4x.T)
       and not torch.equal(yb, base(xb) + xb @ e_spec.T) else "same",
       f"bf16 linear bypass uses gamma = rnd_A(s*m) in one multiply: matches 4.x order "
       f"{torch.equal(yb, base(xb) + xb @ e_4x.T)}, spec order {torch.equal(yb, base(xb) + xb @ e_spec.T)}")

base, m = bf16_module(LokrModule, lora_dim=2, alpha=1.3)
with torch.no_grad():
    c, d = m.lokr_w1.shape[1], m.lokr_w2_b.shape[1]
    H = (xb.view(5, c, d) @ m.lokr_w2_b.T) @ m.lokr_w2_a.T   # (N, c, b), grouped W2
    Y = (H.transpose(-1, -2) @ m.lokr_w1.T).transpose(-1, -2).reshape(5, -1)  # (N, a*b)
    yb = m(xb) - base(xb)
    spec = ((Y * 0.7) * m.scalar) * m.scale
    v4 = (Y * (m.scale * 0.7)) * m.scalar
report("rnd LoKr", "CHANGED" if torch.equal(m(xb), base(xb) + v4) else "same",
       f"bf16 linear bypass = rnd(Y*f32(s*m))*sigma: matches 4.x order "
       f"{torch.equal(m(xb), base(xb) + v4)}, spec order {torch.equal(m(xb), base(xb) + spec)}")

base = linear(bias=False)
m = randomise(DiagOFTModule("t", base, lora_dim=4)).eval()
with torch.no_grad():
    R = m.get_r()
    Wb = base.weight.view(4, 3, 10)
    direct = torch.einsum("knm,kni->kmi", R, Wb).reshape(12, 10)
    via_delta = torch.einsum("knm,kni->kmi", R - torch.eye(3), Wb).reshape(12, 10) + base.weight
    merged = m.get_merged_weight(1.0)[0]
report("rnd OFT", "CHANGED" if torch.equal(merged, via_delta) and not torch.equal(merged, direct)
       else "same", f"fp32 merge at m=1 = W + (R-I)^T W (delta form): matches delta form "
       f"{torch.equal(merged, via_delta)}, direct R^T W {torch.equal(merged, direct)}")
