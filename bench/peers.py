#!/usr/bin/env python3
"""peers.py — lyco side by side with its peers (BENCH.md §2-§6), one run, one machine.

Arms of every row (same function, same inputs, same output dtype):
  lyco     lyco's kernels through the Python binding's public calls lyco.merge / lyco.bypass, as a
           training script makes them (outside torch.compile: autograd.Functions over the kernels;
           the spec string cached per argument set; the torch custom ops lyco::merge_fwd /
           lyco::bypass_fwd are what torch.compile traces); the LyCORIS module switch
           (lyco.lycoris) would add a module's Python on top.
  eager    PyTorch eager running LyCORIS 4.x's own functional code (lycoris.functional.<algo>
           with backend="torch", the reference body; IA3: lycoris.modules.ia3._ia3_scale), composed
           as the LyCORIS module composes it (merge: W + ΔW, OFT/BOFT: (W + ΔW) in fp32 then cast;
           bypass: y0 + Δ(x)); a result whose dtype differs from lyco's output dtype (OFT/BOFT
           build in fp32) is cast to it, so every arm returns the same tensor type.
  compile  torch.compile of the eager arm's function (default mode, dynamic=False),
           torch._dynamo.reset() before every row.
  lycoris  LyCORIS 4.x's own fused kernels (lycoris.kernels.autograd.*, backend="triton", the
           base add folded into the kernel where the peer offers it). GPU only. Called directly,
           not through the functional dispatcher, so a shape the peer's kernel does not take
           raises (the error text goes into the row) instead of silently running eager.
Directions: f = forward (autograd on, as in training), fb = forward + backward (gradients of every
adapter tensor, and of the activation input: x for LoRA/LoHa/LoKr, y0 for OFT/BOFT/IA3).

Timing (BENCH.md §3): warm-up first (its wall time = the in-process first call: JIT, compile,
autotune); then `--reps` repeats, the arms interleaved in an order rotated every repeat, each
sample preceded by a write of a `--flush-mb` buffer (L2 flushed). GPU: device time from CUDA events
around a CUDA-graph replay when the arm captures, else around the eager call (host syncs inside,
e.g. an eager matrix inverse, are then included): the `timing` column says which. CPU:
time.perf_counter. Median and min of the repeats; wall time per call (host overhead included,
back-to-back calls) beside it. Floor = max(min_bytes / copy bandwidth, flops / matmul rate),
both ceilings measured first in the same run; fb floor = f floor + backward floor.
Accuracy: RMS-normalised max ULP (NUMERICS.md §2.2) of each arm's output (and, fb, of each
gradient) against an fp64 oracle: the eager arm's upstream code evaluated in float64 on the same
rounded inputs (two documented substitutions: the Cayley inverse in fp64 instead of upstream's
hard-coded .float(), and DoRA's ε taken from the row dtype as upstream takes it from dtype(d)).
Before timing, lyco's and eager's results must agree within the dtype budget (src/check's
lyco_check_budget, simplified); a row that does not is printed as MISMATCH and marked.

  peers.py [--device cuda|cpu] [--quick|--full] [--dtype bf16|fp16|fp32] [--out DIR]
           [--only lora_merge,ia3_bypass,...] [--arms lyco,eager,compile,lycoris]
  peers.py --plot results.json [--out DIR]       plots later (needs matplotlib; DIR defaults to the
                                                 JSON's folder, ./peers-plots when that is read-only)
  peers.py --first-call-only [--only ...] [--arms ...] [--merge-into results.json] [--out DIR]
                                                 the fresh-process first-call table alone: DIR/first_call.json
                                                 and .md; --merge-into: that results.json with its first_call
                                                 section replaced, as DIR/results.json + a regenerated table.md
  peers.py --first-call-only --first-call-from first_call.json --merge-into results.json [--out DIR]
                                                 merge an earlier first_call.json, measuring nothing
Output: DIR/table.md, DIR/results.json, DIR/*.png (when matplotlib imports).
"""
import argparse
import datetime
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARMS = ("lyco", "eager", "compile", "lycoris")
MODES = ("f", "fb")
FAMILIES = ("lora_merge", "lora_bypass", "loha_merge", "loha_bypass", "lokr_merge", "lokr_bypass",
            "oft_merge", "oft_bypass", "boft_merge", "boft_bypass", "dora_merge", "ia3_bypass")
ALPHA = 16.0  # alpha of the additive families: s = alpha / r (a power of two for r in 4..128)
PREC = {"bf16": (8, -126), "fp16": (11, -14), "fp32": (24, -126)}  # p, emin (NUMERICS.md §2.1)
torch = None  # imported in main() / the child, after the cache directories are set


def log(msg, t0=[time.time()]):  # noqa: B006 (the start time of the process)
    print("[%6.1f s] %s" % (time.time() - t0[0], msg), flush=True)


def short_err(e):
    s = str(e).strip().splitlines()
    return "%s: %s" % (type(e).__name__, (s[0] if s else "")[:300])


# ------------------------------------------------------------------------------------------------
# shape sets
# ------------------------------------------------------------------------------------------------
def case(fam, O, I, r=0, T=0, block=0, factor=0):
    return {"fam": fam, "O": O, "I": I, "r": r, "T": T, "block": block, "factor": factor}


def quick_cases():
    """One small shape per family (smoke tests; fast on a CPU)."""
    return [case("lora_merge", 512, 512, r=8), case("lora_bypass", 512, 512, r=8, T=256),
            case("loha_merge", 512, 512, r=8), case("loha_bypass", 512, 512, r=8, T=256),
            case("lokr_merge", 512, 512, r=8, factor=16),
            case("lokr_bypass", 512, 512, r=8, T=256, factor=16),
            case("oft_merge", 512, 512, block=16), case("oft_bypass", 512, 512, T=256, block=16),
            case("boft_merge", 512, 512, block=8), case("boft_bypass", 512, 512, T=256, block=8),
            case("dora_merge", 512, 512, r=8), case("ia3_bypass", 512, 512, T=256)]


def default_cases():
    """BENCH.md §6's families at its shapes, trimmed to one row per family and direction (plus
    LoRA at rank 128, last) so that every arm, compile and autotune included, and the first-call
    table fit ~6 minutes on an H200 (an estimate: --time-limit guards it): merge 4096², bypass
    8192 tokens × 4096², rank 32, LoKr factor 16, OFT block 32, BOFT block 16 with every
    butterfly stage."""
    # cheap warm-ups first: OFT/BOFT (the peer autotunes for up to a minute per new shape, BENCH.md
    # §6) last, so a run that reaches its time limit loses those (named in the notes) and the extras
    return [case("lora_merge", 4096, 4096, r=32), case("lora_bypass", 4096, 4096, r=32, T=8192),
            case("dora_merge", 4096, 4096, r=32), case("ia3_bypass", 4096, 4096, T=8192),
            case("lokr_merge", 4096, 4096, r=32, factor=16),
            case("lokr_bypass", 4096, 4096, r=32, T=8192, factor=16),
            case("loha_merge", 4096, 4096, r=32), case("loha_bypass", 4096, 4096, r=32, T=8192),
            case("oft_merge", 4096, 4096, block=32), case("oft_bypass", 4096, 4096, T=8192, block=32),
            case("boft_merge", 4096, 4096, block=16),
            case("boft_bypass", 4096, 4096, T=8192, block=16),
            # extras, last so that the time limit drops them first
            case("lora_merge", 11008, 4096, r=128), case("lora_bypass", 3072, 3072, r=128, T=16384)]


def full_cases():
    """The BENCH.md §4 sweep on Linear layers (the §6 subsets for the slow OFT/BOFT/IA3)."""
    lin = [(640, 640), (1280, 1280), (5120, 1280), (1280, 5120), (3072, 3072), (12288, 3072),
           (4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)]
    ranks = (8, 32, 128)
    out = []
    for O, I in lin:
        for r in ranks:
            out += [case("lora_merge", O, I, r=r), case("loha_merge", O, I, r=r),
                    case("dora_merge", O, I, r=r), case("lokr_merge", O, I, r=r, factor=16)]
    for T in (1024, 4096, 16384):
        for O, I in ((1280, 1280), (3072, 3072), (4096, 4096), (11008, 4096)):
            for r in ranks:
                out += [case("lora_bypass", O, I, r=r, T=T), case("loha_bypass", O, I, r=r, T=T),
                        case("lokr_bypass", O, I, r=r, T=T, factor=16)]
    for O in (3072, 4096):
        for b in (16, 32):
            out += [case("oft_merge", O, O, block=b), case("oft_bypass", O, O, T=8192, block=b)]
    for b in (8, 16):
        out += [case("boft_merge", 4096, 4096, block=b),
                case("boft_bypass", 4096, 4096, T=8192, block=b)]
    out += [case("ia3_bypass", 4096, 4096, T=8192), case("ia3_bypass", 3072, 3072, T=16384)]
    return out


def first_call_cases(quick=False):
    """A shape the main run does not use, per family (one direction each); --quick: small ones."""
    if quick:
        return [case("lora_bypass", 384, 384, r=4, T=128), case("loha_bypass", 384, 384, r=4, T=128),
                case("lokr_bypass", 384, 384, r=4, T=128, factor=8),
                case("oft_bypass", 384, 384, T=128, block=8),
                case("boft_bypass", 256, 256, T=128, block=8), case("dora_merge", 384, 384, r=4),
                case("ia3_bypass", 384, 384, T=128)]
    return [case("lora_bypass", 2048, 2048, r=16, T=4096), case("loha_bypass", 2048, 2048, r=16, T=4096),
            case("lokr_bypass", 2048, 2048, r=16, T=4096, factor=16),
            case("oft_bypass", 2048, 2048, T=4096, block=16),
            case("boft_bypass", 2048, 2048, T=4096, block=16), case("dora_merge", 2048, 2048, r=16),
            case("ia3_bypass", 2048, 2048, T=4096)]


def case_name(c):
    s = "%dx%d" % (c["O"], c["I"])
    if c["T"]:
        s = "T%d %s" % (c["T"], s)
    if c["r"]:
        s += " r%d" % c["r"]
    if c["factor"]:
        s += " f%d" % c["factor"]
    if c["block"]:
        s += " b%d" % c["block"]
    return s


# ------------------------------------------------------------------------------------------------
# the problems: tensors, the four arms, the floor of one row
# ------------------------------------------------------------------------------------------------
def lokr_factors(O, I, factor):
    from lycoris.functional.general import factorization
    a, b = factorization(O, factor)  # O = a·b, w1 a×c, w2 b×d (LyCORIS's own split)
    c, d = factorization(I, factor)
    return a, b, c, d


def boft_stages(O, block):
    nb = O // block
    return sum(int(ch) for ch in "{:b}".format(nb - 1)) + 1  # LyCORIS's full number of stages


class Problem:
    """One row's tensors and the callables of each arm. `leaves` are the tensors differentiated
    (adapter tensors, then the activation input for bypass); `base` the others."""

    def __init__(self, c, dev, dt, seed):
        self.c, self.dev, self.dt = c, dev, dt
        self.fam, self.dir = c["fam"].split("_")
        O, I, T, r = c["O"], c["I"], c["T"], c["r"]
        g = torch.Generator(device=dev).manual_seed(seed)

        def rnd(*shape, scale=1.0, shift=0.0):
            return ((torch.rand(*shape, generator=g, device=dev) * 2 - 1) * scale + shift).to(dt)

        ad = {}  # adapter tensors by lyco slot name
        if self.fam in ("lora", "dora"):
            ad["lora_down"] = rnd(r, I, scale=I ** -0.5)
            ad["lora_up"] = rnd(O, r, scale=r ** -0.5)
            if self.fam == "dora":
                ad["dora_scale"] = rnd(O, 1, scale=0.5, shift=1.5)
        elif self.fam == "loha":
            for k in ("1", "2"):
                ad["hada_w%s_a" % k] = rnd(O, r, scale=0.3)
                ad["hada_w%s_b" % k] = rnd(r, I, scale=0.3)
        elif self.fam == "lokr":
            a, b, cc, d = lokr_factors(O, I, c["factor"])
            self.kron = (a, b, cc, d)
            ad["lokr_w1"] = rnd(a, cc, scale=cc ** -0.5)
            ad["lokr_w2_a"] = rnd(b, r, scale=r ** -0.5)
            ad["lokr_w2_b"] = rnd(r, d, scale=d ** -0.5)
        elif self.fam == "oft":
            bs = c["block"]
            ad["oft_blocks"] = rnd(O // bs, bs, bs, scale=0.05)
        elif self.fam == "boft":
            bs = c["block"]
            if O % bs or (O // bs) & (O // bs - 1):
                raise ValueError("BOFT needs O = block × 2^k; %d = %d × %s" % (O, bs, O / bs))
            self.stages = boft_stages(O, bs)
            ad["oft_blocks"] = rnd(self.stages, O // bs, bs, bs, scale=0.05)
        elif self.fam == "ia3":
            ad["ia3_weight"] = rnd(O, scale=0.5)
        self.ad = ad
        self.base = {}
        if self.dir == "merge":
            self.base["W"] = rnd(O, I, scale=0.05)
        else:
            self.base["x"] = rnd(T, I)
            self.base["y0"] = rnd(T, O)
        self.act = None if self.dir == "merge" else ("y0" if self.fam in ("oft", "boft", "ia3") else "x")
        self.scale = ALPHA / r if r else 1.0
        if self.fam == "loha":  # LohaModule builds torch.tensor(scale, dtype=w1_b.dtype) per call
            self.base["gamma"] = torch.tensor(self.scale, dtype=dt, device=dev)
        self.out_shape = (O, I) if self.dir == "merge" else (T, O)
        self.dy = rnd(*self.out_shape)

    # the tensors of one arm: fresh leaves (requires_grad) sharing the same values
    def tensors(self, dtype=None):
        conv = (lambda t: t.to(dtype)) if dtype is not None else (lambda t: t)
        t = {k: conv(v).detach().clone().requires_grad_(True) for k, v in self.ad.items()}
        for k, v in self.base.items():
            t[k] = conv(v).detach().clone().requires_grad_(k == self.act)
        return t

    def leaf_names(self):
        return list(self.ad) + ([self.act] if self.act else [])

    # ---- arm (a): lyco ----
    def lyco_fn(self):
        import lyco
        c = self.c
        layer = lyco.linear(c["O"], c["I"])
        algo = {"lora": "locon", "dora": "locon", "oft": "diag_oft"}.get(self.fam, self.fam)
        slots = list(self.ad)
        opts = {}
        if self.fam in ("lora", "loha", "lokr", "dora"):
            opts["scale"] = self.scale
        # the public calls a training script makes (outside torch.compile they run through the
        # binding's autograd.Functions; the spec string is cached per argument set)
        if self.dir == "merge":
            return lambda t: lyco.merge({s: t[s] for s in slots}, layer, algo=algo, weight=t["W"], mode="weight", **opts)
        return lambda t: lyco.bypass(t["x"], {s: t[s] for s in slots}, layer, algo=algo, y0=t["y0"], **opts)

    # ---- arm (b): upstream LyCORIS functional code, eager ----
    def eager_fn(self):
        """fn(t, out_dtype): the function as LyCORIS 4.x's module composes it from its functional
        code (backend="torch": the reference body), result cast to out_dtype when it differs."""
        import lycoris.functional.boft as Fb
        import lycoris.functional.diag_oft as Fo
        import lycoris.functional.general as Fg
        import lycoris.functional.locon as Fl
        import lycoris.functional.loha as Fh
        import lycoris.functional.lokr as Fk
        from lycoris.modules.ia3 import _ia3_scale
        fam, merge, s = self.fam, self.dir == "merge", self.scale

        def fin(y, out_dtype):
            return y if y.dtype == out_dtype else y.to(out_dtype)

        if fam == "lora":
            if merge:
                return lambda t, o: fin(t["W"] + Fl.diff_weight(
                    t["lora_down"], t["lora_up"], None, gamma=s, backend="torch"), o)
            return lambda t, o: fin(t["y0"] + Fl.bypass_forward_diff(
                t["x"], t["y0"], t["lora_down"], t["lora_up"], None, gamma=s, backend="torch"), o)
        if fam == "dora":
            def dora(t, o):
                dw = Fl.diff_weight(t["lora_down"], t["lora_up"], None, gamma=s, backend="torch")
                return fin(Fg.weight_decompose(t["W"] + dw, t["dora_scale"], 1, True, backend="torch"), o)
            return dora
        if fam == "loha":
            def hada(t):  # the module passes gamma as a tensor of the factors' dtype (made per row)
                return (t["hada_w1_b"], t["hada_w1_a"], t["hada_w2_b"], t["hada_w2_a"]), t["gamma"]
            if merge:
                def loha_m(t, o):
                    w, gam = hada(t)
                    return fin(t["W"] + Fh.diff_weight(*w, None, None, gamma=gam, backend="torch"), o)
                return loha_m

            def loha_b(t, o):
                w, gam = hada(t)
                return fin(t["y0"] + Fh.bypass_forward_diff(t["x"], t["y0"], *w, None, None, gamma=gam,
                                                            backend="torch"), o)
            return loha_b
        if fam == "lokr":
            def kw(t):
                return (t["lokr_w1"], None, None, None, t["lokr_w2_a"], t["lokr_w2_b"], None)
            if merge:  # diff_weight's scale = gamma / rank
                return lambda t, o: fin(t["W"] + Fk.diff_weight(*kw(t), gamma=ALPHA, backend="torch"), o)
            return lambda t, o: fin(t["y0"] + Fk.bypass_forward_diff(
                t["x"], t["y0"], *kw(t), gamma=ALPHA, backend="torch"), o)
        if fam == "oft":
            if merge:
                def oft_m(t, o):
                    d = Fo.diff_weight(t["W"], t["oft_blocks"], None, constraint=0.0, backend="torch")
                    return fin((d + t["W"].to(d.dtype)).to(t["oft_blocks"].dtype), o)
                return oft_m
            return lambda t, o: fin(t["y0"] + Fo.bypass_forward_diff(
                t["x"], t["y0"], t["oft_blocks"], None, constraint=0.0, backend="torch"), o)
        if fam == "boft":
            if merge:
                def boft_m(t, o):
                    d = Fb.diff_weight(t["W"], t["oft_blocks"], None, constraint=0.0, scale=1,
                                       backend="torch")
                    return fin((d + t["W"].to(d.dtype)).to(t["oft_blocks"].dtype), o)
                return boft_m
            return lambda t, o: fin(t["y0"] + Fb.bypass_forward_diff(
                t["y0"], t["oft_blocks"], None, constraint=0.0, scale=1, backend="torch"), o)
        if fam == "ia3":
            return lambda t, o: fin(_ia3_scale(t["y0"], t["ia3_weight"], 1.0, False), o)
        raise ValueError(fam)

    # ---- arm (d): LyCORIS 4.x's own fused kernels ----
    def peer_fn(self, backend="triton"):
        from lycoris.kernels import autograd as K
        fam, merge, s = self.fam, self.dir == "merge", self.scale
        if fam == "lora":
            if merge:
                return lambda t: K.locon_diff_weight(t["lora_down"], t["lora_up"], None, s,
                                                     backend=backend, base=t["W"])
            return lambda t: K.locon_bypass_diff(t["x"], t["lora_down"], t["lora_up"], s,
                                                 backend=backend, base=t["y0"])
        if fam == "dora":
            def dora(t):
                dw = K.locon_diff_weight(t["lora_down"], t["lora_up"], None, s, backend=backend)
                return K.apply_dora(t["W"], t["dora_scale"], 1.0, True, backend=backend, delta=dw)
            return dora
        if fam == "loha":
            def w(t):
                return t["hada_w1_b"], t["hada_w1_a"], t["hada_w2_b"], t["hada_w2_a"]
            if merge:
                return lambda t: K.loha_diff_weight(*w(t), None, None, s, backend=backend, base=t["W"])
            return lambda t: K.loha_bypass_diff(t["x"], *w(t), s, backend=backend, base=t["y0"])
        if fam == "lokr":
            def kw(t):
                return (t["lokr_w1"], None, None, None, t["lokr_w2_a"], t["lokr_w2_b"], None)
            if merge:
                return lambda t: K.lokr_kron_weight(*kw(t), scale=s, backend=backend, base=t["W"])
            return lambda t: K.lokr_kron_bypass(t["x"], *kw(t), scale=s, backend=backend, base=t["y0"])
        if fam == "oft":
            if merge:
                return lambda t: K.diag_oft_diff_weight(t["W"], t["oft_blocks"], None, None,
                                                        backend=backend, diff=False)
            return lambda t: K.diag_oft_bypass_diff(t["y0"], t["oft_blocks"], None, None, False,
                                                    backend=backend, diff=False)
        if fam == "boft":
            if merge:  # the peer's merge returns ΔW only; the module adds W (as the eager arm)
                return lambda t: (K.boft_diff_weight(t["W"], t["oft_blocks"], None, None, 1,
                                                     backend=backend) + t["W"])
            return lambda t: K.boft_bypass_diff(t["y0"], t["oft_blocks"], None, None, 1, False,
                                                backend=backend, diff=False)
        if fam == "ia3":
            return lambda t: K.ia3_bypass(t["y0"], t["ia3_weight"], -1, 1.0, False, backend=backend)
        raise ValueError(fam)

    # ---- the floor's bytes and flops (BENCH.md §2) ----
    def floor_terms(self, out_elsize):
        """(bytes_f, flops_f, bytes_b, flops_b): every input read once and every output written
        once; flops = the useful multiply-adds × 2 (elementwise work not counted)."""
        c, fam = self.c, self.fam
        O, I, T, r = c["O"], c["I"], c["T"], c["r"]
        nb = {k: v.numel() * v.element_size() for k, v in {**self.ad, **self.base}.items() if k != "gamma"}
        adapter = sum(nb[k] for k in self.ad)
        out = O * (I if self.dir == "merge" else T) * out_elsize
        if self.dir == "merge":
            bf = nb["W"] + adapter + out  # reads W and the adapter, writes W''
            bb = out + adapter + (nb["W"] if fam in ("oft", "boft", "dora") else 0) + adapter
        else:
            act = nb[self.act]
            bf = act + (nb["y0"] if self.act == "x" else 0) + adapter + out
            bb = out + act + adapter + act + adapter  # reads dy, the input, the adapter; writes grads
        cay = lambda n, b: 4.0 * n * b ** 3  # noqa: E731 (inverse + product per block)
        if fam in ("lora", "dora"):
            ff, fb = (2.0 * O * I * r, 4.0 * O * I * r) if self.dir == "merge" else \
                (2.0 * T * r * (O + I), 4.0 * T * r * (O + I))
        elif fam == "loha":
            ff, fb = (4.0 * O * I * r, 8.0 * O * I * r) if self.dir == "merge" else \
                (4.0 * O * I * r + 2.0 * T * O * I, 12.0 * O * I * r + 4.0 * T * O * I)
        elif fam == "lokr":
            a, b, cc, d = self.kron
            if self.dir == "merge":
                ff, fb = 2.0 * b * d * r + 2.0 * O * I, 4.0 * b * d * r + 4.0 * O * I
            else:
                ff = 2.0 * T * cc * r * (d + b) + 2.0 * T * a * cc * b
                fb = 2 * ff
        elif fam == "oft":
            bs = c["block"]
            n = O * (I if self.dir == "merge" else T)
            ff = 2.0 * n * bs + cay(O // bs, bs)
            fb = (2.0 if self.dir == "merge" else 4.0) * n * bs + cay(O // bs, bs)
        elif fam == "boft":
            bs, M = c["block"], self.stages
            n = O * (I if self.dir == "merge" else T)
            ff = 2.0 * M * n * bs + cay(M * O // bs, bs)
            fb = 4.0 * M * n * bs + cay(M * O // bs, bs)
        else:  # ia3
            ff, fb = 2.0 * T * O, 4.0 * T * O
        return float(bf), ff, float(bb), fb


# ------------------------------------------------------------------------------------------------
# accuracy
# ------------------------------------------------------------------------------------------------
def ulp_of(x, dtname):
    """ulp_T(x) = 2^(max(floor(log2|x|), emin) - p + 1) (NUMERICS.md §2.2), elementwise, fp64."""
    p, emin = PREC[dtname]
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** (emin - p))))
    return torch.pow(2.0, torch.clamp(e, min=emin) - p + 1)


def rms_ulp(y, ref, per_row=False):
    """max |y - r| / ulp_T(rms(r)), T = y's dtype; per output row when the rows' scales differ."""
    dtname = DTNAME[y.dtype]
    r = ref.double()
    d = (y.double() - r).abs()
    if per_row and r.dim() == 2:
        rms = r.square().mean(dim=1, keepdim=True).sqrt()
    else:
        rms = r.square().mean().sqrt().reshape(1)
    return float((d / ulp_of(rms, dtname)).max())


def budgets(dtname, K, n):
    """(fused, eager) budgets in ULP of the RMS: lyco_check_budget's terms for a row whose compute
    dtype is its output dtype (src/check/check.c), without the per-case extras."""
    if dtname != "fp32":
        acc = 0.5
        return 1.0 + acc + 4.0, 2.0 + acc + 48.0 * 0.5
    tail = math.log2(n) / 12.0 if n > 4096 else 1.0
    # lyco_check_budget's 8 + 2·ρ·sqrt(K)·tail at ρ = 1 (ρ ≥ 1 is the RMS over its binade's floor)
    acc = 8.0 + 2.0 * math.sqrt(K) * tail + 16.0
    return 1.0 + acc + 4.0, 2.0 + acc + 48.0 * 0.5 * math.sqrt(K)


def row_scaled(p, t):
    """An O×n tensor (n > 1) whose rows carry DoRA's per-row magnitudes: scored per row."""
    return t.dim() == 2 and t.shape[0] == p.c["O"] and t.shape[1] > 1


def reduction_length(p):
    c = p.c
    if p.fam in ("oft", "boft"):
        return c["block"] * (p.stages if p.fam == "boft" else 1)
    if p.fam == "ia3":
        return 1
    if p.fam == "loha" and p.dir == "bypass":
        return c["I"]
    if p.dir == "bypass":
        return max(c["I"], c["r"])
    return max(c["r"], 1)


# ------------------------------------------------------------------------------------------------
# measurement
# ------------------------------------------------------------------------------------------------
DTNAME = {}


class Device:
    """Synchronisation, flush, timers and memory of the device a run uses."""

    def __init__(self, kind, flush_mb):
        self.kind = kind
        self.cuda = kind == "cuda"
        self.flush_buf = torch.empty(int(flush_mb) << 20 >> 2, dtype=torch.float32, device=kind)
        self.n_flush = 0

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def flush(self):
        self.n_flush += 1
        self.flush_buf.fill_(float(self.n_flush & 1023))

    def peak_extra(self, fn):
        """Peak memory above what was allocated before fn (bytes), GPU only."""
        if not self.cuda:
            return None
        self.sync()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        r = fn()
        self.sync()
        del r
        return torch.cuda.max_memory_allocated() - base


def make_runner(dev, fn, capture):
    """(callable, method): a CUDA graph replay of fn when capture is asked and works, else fn."""
    if not (dev.cuda and capture):
        return fn, ("events" if dev.cuda else "wall")
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        dev.sync()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        dev.sync()
        graph.replay()
        dev.sync()
        return graph.replay, "graph"
    except Exception as e:  # noqa: BLE001 (not capturable: a host sync or an allocation inside)
        try:
            dev.sync()
        except Exception:  # noqa: BLE001
            pass
        return fn, "events (no graph: %s)" % short_err(e)[:120]


def kernel_time_sum(dev, fn, n=5):
    """Device time of fn's kernels alone (seconds per call, the profiler's sum, flush kernels
    subtracted): the time of an arm whose call synchronises the host, without the gaps."""
    try:
        from torch.profiler import ProfilerActivity, profile

        def total(work):
            dev.sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(n):
                    work()
                dev.sync()
            return sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
                       for e in prof.key_averages()) * 1e-6

        def flushed():
            dev.flush()
            fn()
        return max(0.0, total(flushed) - total(dev.flush)) / n
    except Exception as e:  # noqa: BLE001 (the profiler is optional evidence, never fatal)
        log("kernel-time sum failed: " + short_err(e))
        return None


def sample_all(dev, runners, reps):
    """Interleaved samples (seconds) of every (arm, mode) runner, order rotated per repeat."""
    keys = list(runners)
    times = {k: [] for k in keys}
    for rep in range(reps):
        order = keys[rep % len(keys):] + keys[:rep % len(keys)]
        if dev.cuda:
            evs = []
            for k in order:
                dev.flush()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                runners[k]()
                e1.record()
                evs.append((k, e0, e1))
            dev.sync()
            for k, e0, e1 in evs:
                times[k].append(e0.elapsed_time(e1) * 1e-3)
        else:
            for k in order:
                dev.flush()
                t0 = time.perf_counter()
                runners[k]()
                times[k].append(time.perf_counter() - t0)
    return times


def wall_per_call(dev, fn, n):
    dev.sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    dev.sync()
    return (time.perf_counter() - t0) / n


def measure_ceilings(dev, dtname, quick):
    """Copy bandwidth (bytes read + written per second) and the matmul rate in the row dtype."""
    dt = DTYPE[dtname]
    res = {}
    if dev.cuda:
        n = (1 << 28) if not quick else (1 << 26)  # 1 GiB of fp32 each way (quick: 256 MiB)
        src = torch.empty(n, dtype=torch.float32, device="cuda").fill_(1.0)
        dst = torch.empty_like(src)
        best = math.inf
        for _ in range(10):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            dst.copy_(src)
            e1.record()
            dev.sync()
            best = min(best, e0.elapsed_time(e1) * 1e-3)
        res["copy_Bps"] = 2 * n * 4 / best
        del src, dst
        m = 8192
        a = torch.randn(m, m, device="cuda").to(dt)
        b = torch.randn(m, m, device="cuda").to(dt)
        torch.mm(a, b)
        best = math.inf
        for _ in range(10):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.mm(a, b)
            e1.record()
            dev.sync()
            best = min(best, e0.elapsed_time(e1) * 1e-3)
        res["mm_flops"] = 2.0 * m ** 3 / best
        res["how"] = "copy: 1 GiB device-to-device copy_ (read+write), best of 10; mm: %d³ torch.mm in %s, best of 10" % (m, dtname)
    else:
        n = 1 << 25  # 128 MiB per fp32 array: a STREAM-style triad a = b + s·c
        a, b, c = (torch.rand(n) for _ in range(3))
        best = math.inf
        for _ in range(5):
            t0 = time.perf_counter()
            torch.add(b, c, alpha=3.0, out=a)
            best = min(best, time.perf_counter() - t0)
        res["copy_Bps"] = 3 * n * 4 / best
        del a, b, c
        m = 1024
        rates = {}
        for name in sorted({dtname, "fp32"}):  # the best GEMM the CPU offers (16-bit may be emulated)
            a, b = torch.rand(m, m).to(DTYPE[name]), torch.rand(m, m).to(DTYPE[name])
            torch.mm(a, b)
            best = math.inf
            for _ in range(5):
                t0 = time.perf_counter()
                torch.mm(a, b)
                best = min(best, time.perf_counter() - t0)
            rates[name] = 2.0 * m ** 3 / best
        res["mm_flops"] = max(rates.values())
        res["how"] = "triad over 3×128 MiB (%d threads), best of 5; mm: %d³ torch.mm, best of 5, the faster of %s" % (
            torch.get_num_threads(), m, ", ".join("%s %.0f GFLOP/s" % (k, v / 1e9) for k, v in rates.items()))
    return res


def oracle(p, fn):
    """The eager arm's upstream code in float64 on the row's rounded inputs: (out, {leaf: grad})."""
    t = p.tensors(torch.float64)
    with fp64_oracle_patches(DTNAME[p.dt]):
        out = fn(t, torch.float64)
        names = p.leaf_names()
        grads = torch.autograd.grad(out, [t[k] for k in names], p.dy.double())
    return out.detach(), dict(zip(names, grads))


class fp64_oracle_patches:
    """Two substitutions that let upstream's code run in float64 (module docstring): the Cayley
    inverse without its hard-coded .float(), and DoRA's ε of the row dtype."""

    def __init__(self, dtname):
        self.eps = torch.finfo(DTYPE[dtname]).eps

    def __enter__(self):
        import lycoris.functional.boft as Fb
        import lycoris.functional.diag_oft as Fo
        import lycoris.functional.general as Fg
        self.saved = (Fo.get_r, Fb.get_r, Fg.torch)

        def get_r64(blocks, I=None, constraint=0):
            I = torch.eye(blocks.shape[-1], device=blocks.device, dtype=blocks.dtype) if I is None \
                else I.to(blocks.dtype)
            q = blocks - blocks.transpose(-1, -2)
            if constraint is not None and constraint > 0:
                qn = torch.norm(q) + 1e-8
                if qn > constraint:
                    q = q * constraint / qn
            return (I + q) @ torch.linalg.inv(I - q)

        eps = self.eps

        class _Torch:  # torch as general.py sees it, with finfo(float64).eps = the row dtype's
            def __getattr__(self, name):
                if name == "finfo":
                    return lambda d: type("F", (), {"eps": eps})() if d == torch.float64 else torch.finfo(d)
                return getattr(torch, name)

        Fo.get_r = Fb.get_r = get_r64
        Fg.torch = _Torch()
        return self

    def __exit__(self, *a):
        import lycoris.functional.boft as Fb
        import lycoris.functional.diag_oft as Fo
        import lycoris.functional.general as Fg
        Fo.get_r, Fb.get_r, Fg.torch = self.saved
        return False


def run_arm_once(p, call, mode):
    """One call of an arm on fresh leaves: (out, {leaf: grad} or None)."""
    t = p.tensors()
    out = call(t)
    if mode == "f":
        return out.detach(), None
    names = p.leaf_names()
    grads = torch.autograd.grad(out, [t[k] for k in names], p.dy)
    return out.detach(), dict(zip(names, grads))


def accuracy(p, out, grads, ref_out, ref_grads):
    per_row = p.fam == "dora"
    acc = {"out": rms_ulp(out, ref_out, per_row)}
    for k, g in (grads or {}).items():
        acc["d_" + k] = rms_ulp(g, ref_grads[k], per_row and row_scaled(p, g))
    return acc


def bench_row(i, n, c, args, dev, ceil):
    """Measure one row: every arm's warm-up, accuracy, memory and interleaved timing."""
    tag = "row %d/%d %s %s" % (i + 1, n, c["fam"], case_name(c))
    row = {"case": c, "name": "%s %s" % (c["fam"], case_name(c)), "arms": {}, "notes": []}
    p = Problem(c, args.device, DTYPE[args.dtype], args.seed + i)
    eager, calls, errors = make_calls(p, args, dev, row)
    results = warm_up(p, calls, errors, row, dev, tag)
    for arm, e in errors.items():
        row["arms"].setdefault(arm, {})["error"] = e
    if eager is not None:
        score(p, eager, results, row, tag)
    del results
    runners, keep = make_runners(p, calls, args, dev, row, tag)
    log("%s: timing %d runners × %d repeats" % (tag, len(runners), args.reps))
    times = sample_all(dev, runners, args.reps) if runners else {}
    finish_row(p, row, times, ceil)
    del runners, keep, calls, p
    if dev.cuda:
        torch.cuda.empty_cache()
    return row


def make_calls(p, args, dev, row):
    """(eager fn, {arm: call(tensors) -> output}, {arm: why it does not run})."""
    calls, errors = {}, {}
    try:
        eager = p.eager_fn()
    except Exception as e:  # noqa: BLE001
        row["notes"].append("eager arm unavailable: " + short_err(e))
        eager = None
    out_dt = p.dt
    for arm in args.arms:
        try:
            if arm == "lyco":
                calls[arm] = p.lyco_fn()
            elif arm == "eager" and eager is not None:
                calls[arm] = lambda t, f=eager: f(t, out_dt)
            elif arm == "compile" and eager is not None:
                torch._dynamo.reset()
                calls[arm] = torch.compile(lambda t, f=eager: f(t, out_dt), dynamic=False)
            elif arm == "lycoris":
                if not dev.cuda:
                    errors[arm] = "skipped: no GPU (LyCORIS's fused kernels are Triton on CUDA)"
                    continue
                calls[arm] = p.peer_fn("triton")
        except Exception as e:  # noqa: BLE001
            errors[arm] = short_err(e)
    return eager, calls, errors


def warm_up(p, calls, errors, row, dev, tag):
    """The first in-process call of every arm (compile / JIT / autotune), timed; its fb results
    ({arm: (out, grads)}) are scored. An arm that raises leaves `calls` with its error."""
    results = {}
    for arm, call in list(calls.items()):
        log("%s: %s warm-up" % (tag, arm))
        try:
            t0 = time.perf_counter()
            results[arm] = run_arm_once(p, call, "fb")
            dev.sync()
            first = time.perf_counter() - t0
            path_bwd = lyco_last_path() if arm == "lyco" else None
            run_arm_once(p, call, "f")
            row["arms"].setdefault(arm, {})["first_call_in_process_s"] = first
            if arm == "lyco":  # which path lyco took (fused, or its eager twin and why)
                fwd = lyco_last_path()
                row["lyco_path"] = fwd if fwd == path_bwd else "fwd %s; bwd %s" % (fwd, path_bwd)
        except Exception as e:  # noqa: BLE001
            errors[arm] = short_err(e)
            calls.pop(arm)
            results.pop(arm, None)
            log("%s: %s FAILED: %s" % (tag, arm, errors[arm]))
    return results


def score(p, eager, results, row, tag):
    """ULP of every arm against the fp64 oracle, and the lyco/eager agreement check."""
    try:
        ref_out, ref_grads = oracle(p, eager)
        for arm, (out, grads) in results.items():
            row["arms"][arm]["ulp"] = accuracy(p, out, grads, ref_out, ref_grads)
        row["agree"] = agreement(p, results, ref_out, ref_grads)
    except Exception as e:  # noqa: BLE001
        row["notes"].append("oracle failed: " + short_err(e))
    if row.get("agree") and not row["agree"]["ok"]:
        row["mismatch"] = True
        print("MISMATCH %s: %s" % (tag, row["agree"]["why"]), flush=True)


def make_runners(p, calls, args, dev, row, tag):
    """Per arm and direction: peak memory, wall per call, and the runner the timing loop calls
    (a graph replay or the call itself). Returns (runners, the tensors they hold)."""
    runners, keep = {}, []
    for arm, call in calls.items():
        t = p.tensors()
        keep.append(t)
        leaves = [t[k] for k in p.leaf_names()]
        fns = {"f": (lambda call=call, t=t: call(t)),
               "fb": (lambda call=call, t=t, leaves=leaves: torch.autograd.grad(call(t), leaves, p.dy))}
        # eager/compiled OFT and BOFT invert a matrix through a host-synchronising op
        capture = args.graphs and not (arm in ("eager", "compile") and p.fam in ("oft", "boft"))
        a = row["arms"][arm]
        for mode, fn in fns.items():
            try:
                b = dev.peak_extra(fn)
                a["peak_extra_MiB_" + mode] = None if b is None else b / 2 ** 20
                a["wall_s_" + mode] = wall_per_call(dev, fn, args.wall_calls)
                runner, how = make_runner(dev, fn, capture)
                if not capture and dev.cuda:
                    how = "events (host-synchronising op: no graph)"
                a["timing_" + mode] = how
                runners[(arm, mode)] = runner
                if dev.cuda and not how.startswith("graph"):  # host gaps are inside the event time
                    a["kernel_sum_s_" + mode] = kernel_time_sum(dev, fn)
            except Exception as e:  # noqa: BLE001
                a["error_" + mode] = short_err(e)
                log("%s: %s %s FAILED: %s" % (tag, arm, mode, a["error_" + mode]))
    return runners, keep


def finish_row(p, row, times, ceil):
    """Floor, median/min, time/floor and lyco's speed-up over each peer."""
    out_el = torch.empty((), dtype=p.dt).element_size()
    bf, ff, bb, fb = p.floor_terms(out_el)
    floor_f = max(bf / ceil["copy_Bps"], ff / ceil["mm_flops"])
    floor_b = max(bb / ceil["copy_Bps"], fb / ceil["mm_flops"])
    row["floor"] = {"f_s": floor_f, "fb_s": floor_f + floor_b, "bytes_f": bf, "flops_f": ff,
                    "bytes_b": bb, "flops_b": fb,
                    "bound_f": "memory" if bf / ceil["copy_Bps"] >= ff / ceil["mm_flops"] else "matmul"}
    for (arm, mode), ts in times.items():
        a = row["arms"][arm]
        a["med_s_" + mode] = statistics.median(ts)
        a["min_s_" + mode] = min(ts)
        a["over_floor_" + mode] = a["med_s_" + mode] / row["floor"][mode + "_s"]
        if mode == "fb":
            a["fb_over_f_floor"] = a["med_s_fb"] / floor_f
    ly = row["arms"].get("lyco", {})
    for arm in ARMS[1:]:
        a = row["arms"].get(arm, {})
        for mode in MODES:
            if ("med_s_" + mode) in ly and ("med_s_" + mode) in a:
                a["lyco_speedup_" + mode] = a["med_s_" + mode] / ly["med_s_" + mode]


def lyco_last_path():
    from lyco import _capi as C
    kind, backend, why, _ = C.context().last_path()
    return kind + (" (%s)" % why if why else "") + " on " + backend


def agreement(p, results, ref_out, ref_grads):
    """lyco vs eager: |y_lyco − y_eager| in ULP of the oracle's RMS, within fused + eager budget."""
    if "lyco" not in results or "eager" not in results:
        return None
    n = ref_out.numel()
    fused_b, eager_b = budgets(DTNAME[p.dt], reduction_length(p), n)
    bound = fused_b + eager_b
    (lo, lg), (eo, eg) = results["lyco"], results["eager"]
    worst, why = 0.0, []
    pairs = [("out", lo, eo, ref_out)] + [("d_" + k, lg[k], eg[k], ref_grads[k]) for k in lg]
    for name, a, b, r in pairs:
        if a.shape != b.shape or a.dtype != b.dtype:
            why.append("%s: lyco %s %s vs eager %s %s" % (name, tuple(a.shape), a.dtype, tuple(b.shape), b.dtype))
            continue
        per_row = p.fam == "dora" and row_scaled(p, a)
        d = _diff_ulp(a, b, r, per_row)
        bound_k = bound if name == "out" else 2 * bound  # a gradient chains two reductions
        worst = max(worst, d / bound_k)
        if d > bound_k:
            why.append("%s differs by %.1f ULP (bound %.1f)" % (name, d, bound_k))
    return {"ok": not why, "worst_fraction_of_bound": worst, "bound_ulp_out": bound,
            "why": "; ".join(why)}


def _diff_ulp(a, b, r, per_row):
    dtname = DTNAME[a.dtype]
    r = r.double()
    rms = r.square().mean(dim=1, keepdim=True).sqrt() if per_row else r.square().mean().sqrt().reshape(1)
    return float(((a.double() - b.double()).abs() / ulp_of(rms, dtname)).max())


# ------------------------------------------------------------------------------------------------
# first call in a fresh process
# ------------------------------------------------------------------------------------------------
def first_call_child(args):
    """Child mode: import, then the first forward+backward of a new shape with one arm; prints one
    JSON line. The caches (Triton, inductor, LyCORIS's tuning table) are fresh directories."""
    global torch
    t0 = time.perf_counter()
    import torch as _t
    torch = _t
    init_dtypes()
    import lycoris  # noqa: F401
    if args.arms[0] == "lyco":
        import lyco  # noqa: F401
    if args.device == "cuda":
        torch.cuda.init()
        torch.zeros(1, device="cuda")
    t_import = time.perf_counter() - t0
    c = [x for x in first_call_cases(args.quick) if x["fam"] == args.only[0]][0]
    p = Problem(c, args.device, DTYPE[args.dtype], args.seed)
    arm = args.arms[0]
    if arm == "lyco":
        call = p.lyco_fn()
    elif arm == "eager":
        f = p.eager_fn()
        call = lambda t: f(t, p.dt)  # noqa: E731
    elif arm == "compile":
        f = p.eager_fn()
        call = torch.compile(lambda t: f(t, p.dt), dynamic=False)
    else:
        call = p.peer_fn("triton")
    if args.device == "cuda":
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    try:
        run_arm_once(p, call, "fb")
    except Exception as e:  # noqa: BLE001 (one line for the parent's table)
        print("FIRSTCALL-ERROR " + short_err(e), flush=True)
        return 1
    if args.device == "cuda":
        torch.cuda.synchronize()
    t_first = time.perf_counter() - t1
    t2 = time.perf_counter()
    run_arm_once(p, call, "fb")
    if args.device == "cuda":
        torch.cuda.synchronize()
    t_second = time.perf_counter() - t2
    print("FIRSTCALL " + json.dumps({"import_s": t_import, "first_s": t_first, "second_s": t_second,
                                     "case": case_name(c)}), flush=True)
    return 0


def first_call_table(args, on_result=None):
    """Each family × arm in a fresh process (fresh caches), `--first-call-jobs` at a time.
    on_result(section) is called after every process that ends (the section so far, "complete"
    false), so a caller can save partial results of a run that is stopped."""
    arms = [a for a in args.arms if not (a == "lycoris" and args.device != "cuda")]
    algos = {o.split("_")[0] for o in args.only}  # one first-call case per algorithm of --only
    fams = [c["fam"] for c in first_call_cases(args.quick) if not args.only or c["fam"].split("_")[0] in algos]
    order = {"lycoris": 0, "compile": 1, "lyco": 2, "eager": 3}  # the slow cold starts first
    jobs = sorted(((f, a) for f in fams for a in arms), key=lambda j: order[j[1]])
    res = {}
    running = []
    tmp_root = tempfile.mkdtemp(prefix="peers-firstcall-")
    env0 = dict(os.environ)

    def start(f, a):
        d = os.path.join(tmp_root, "%s-%s" % (f, a))
        os.makedirs(d)
        env = dict(env0, TRITON_CACHE_DIR=d + "/triton", TORCHINDUCTOR_CACHE_DIR=d + "/inductor",
                   LYCORIS_KERNEL_CACHE_DIR=d + "/lycoris")
        cmd = [sys.executable, os.path.abspath(__file__), "--first-call-child", "--device", args.device,
               "--dtype", args.dtype, "--only", f, "--arms", a, "--seed", str(args.seed)] + \
            (["--quick"] if args.quick else [])
        log("first call: start %s %s" % (f, a))
        with open(os.path.join(d, "output.txt"), "w") as sink:  # a file, not a pipe: never blocks the child
            return subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT), time.time()

    def section(complete):
        sec = {"jobs_at_once": args.first_call_jobs, "timeout_s": args.first_call_timeout,
               "cases": {c["fam"]: case_name(c) for c in first_call_cases(args.quick)},
               "results": {f: {a: res[f][a] for a in ARMS if a in res[f]} for f in fams if f in res}}
        if getattr(args, "first_call_only", False):  # a separate run (--first-call-only): say so
            sec["complete"] = complete
        return sec

    def output(f, a):
        with open(os.path.join(tmp_root, "%s-%s" % (f, a), "output.txt"), errors="replace") as fh:
            return fh.read()

    try:
        while jobs or running:
            if args.deadline and time.time() > args.deadline - 5:  # the run's own limit: stop cleanly
                for f, a in jobs:
                    res.setdefault(f, {})[a] = {"error": "not run: --time-limit reached"}
                jobs = []
                for f, a, proc, t in running:
                    proc.kill()
                    proc.wait()
                    res.setdefault(f, {})[a] = {"error": "killed at --time-limit after %.0f s" % (time.time() - t)}
                running = []
                log("first call: --time-limit reached, the rest not run")
                break
            while jobs and len(running) < args.first_call_jobs:
                f, a = jobs.pop(0)
                proc, t = start(f, a)
                running.append((f, a, proc, t))
            time.sleep(0.2)
            for item in list(running):
                f, a, proc, t = item
                timed_out = time.time() - t > args.first_call_timeout
                if proc.poll() is None and not timed_out:
                    continue
                running.remove(item)
                if timed_out and proc.poll() is None:
                    proc.kill()
                    proc.wait()
                    res.setdefault(f, {})[a] = {"error": "timed out after %d s" % args.first_call_timeout}
                    log("first call: %s %s TIMED OUT" % (f, a))
                    if on_result:
                        on_result(section(False))
                    continue
                out = output(f, a)
                line = [ln for ln in out.splitlines() if ln.startswith("FIRSTCALL ")]
                if proc.returncode == 0 and line:
                    res.setdefault(f, {})[a] = json.loads(line[-1][len("FIRSTCALL "):])
                    log("first call: %s %s import %.1f s, first fwd+bwd %.2f s" % (
                        f, a, res[f][a]["import_s"], res[f][a]["first_s"]))
                else:
                    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
                    why = [ln[len("FIRSTCALL-ERROR "):] for ln in lines if ln.startswith("FIRSTCALL-ERROR ")] \
                        or lines[-1:] or ["(no output)"]
                    res.setdefault(f, {})[a] = {"error": "exit %s: %s" % (proc.returncode, why[-1][:300])}
                    log("first call: %s %s FAILED: %s" % (f, a, res[f][a]["error"]))
                if on_result:
                    on_result(section(False))
    finally:  # never leave a child behind (the run killed, an exception)
        for item in running:
            if item[2].poll() is None:
                item[2].kill()
    return section(True)


# ------------------------------------------------------------------------------------------------
# output: header, table, summary, plots
# ------------------------------------------------------------------------------------------------
def environment(args):
    env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "torch": torch.__version__, "python": platform.python_version(),
           "dtype": args.dtype, "device_kind": args.device}
    for mod in ("triton",):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            env[mod] = "absent"
    try:
        from importlib.metadata import version
        env["lycoris"] = version("lycoris-lora")
    except Exception:  # noqa: BLE001
        env["lycoris"] = "absent"
    try:
        import lyco
        env["lyco_library"] = lyco.version()
    except Exception as e:  # noqa: BLE001
        env["lyco_library"] = "absent (%s)" % short_err(e)
    commit = os.environ.get("LYCO_GIT_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, timeout=10).stdout.strip() or "?"
        except Exception:  # noqa: BLE001
            commit = "?"
    env["lyco_commit"] = commit
    if args.device == "cuda":
        env["device"] = torch.cuda.get_device_name(0)
        env["bf16_reduced_precision_reduction"] = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        env["cuda"] = torch.version.cuda
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except Exception:  # noqa: BLE001
            env["driver"] = "?"
    else:
        model = platform.processor() or "cpu"
        try:
            with open("/proc/cpuinfo") as f:
                model = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
        except Exception:  # noqa: BLE001
            pass
        env["device"] = "%s (%d threads)" % (model, torch.get_num_threads())
        env["driver"] = "n/a (CPU)"
    return env


def fmt_t(s):
    if s is None:
        return "—"
    return "%.1f µs" % (s * 1e6) if s < 1e-3 else "%.2f ms" % (s * 1e3) if s < 1 else "%.2f s" % s


def fmt_rate(flops):
    return "%.1f TFLOP/s" % (flops / 1e12) if flops >= 1e12 else "%.1f GFLOP/s" % (flops / 1e9)


def fmt(v, spec="%.2f"):
    return "—" if v is None else spec % v


def geomean(vals):
    vals = [v for v in vals if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def summary(rows, arms):
    """Per family and direction: geomean of time/floor per arm and of lyco's speed-up per peer."""
    out = {}
    for fam in FAMILIES:
        rs = [r for r in rows if r["case"]["fam"] == fam]
        if not rs:
            continue
        s = {"rows": len(rs)}
        for arm in arms:
            for mode in MODES:
                s["%s_over_floor_%s" % (arm, mode)] = geomean(
                    [r["arms"].get(arm, {}).get("over_floor_" + mode) for r in rs])
            s["%s_fb_over_f_floor" % arm] = geomean([r["arms"].get(arm, {}).get("fb_over_f_floor") for r in rs])
            if arm != "lyco":
                for mode in MODES:
                    s["lyco_speedup_vs_%s_%s" % (arm, mode)] = geomean(
                        [r["arms"].get(arm, {}).get("lyco_speedup_" + mode) for r in rs])
        out[fam] = s
    return out


def table_head(L, hdr):
    """A markdown table's header line and its separator."""
    L.append(hdr)
    L.append("|" + "---|" * (hdr.count("|") - 1))


def f_fb(x, key, spec="%.2f", form=None):
    """'f, fb' cell of x[key_f], x[key_fb] (form: a formatter of one value, default fmt with spec)."""
    form = form or (lambda v: fmt(v, spec))
    return "%s, %s" % (form(x.get(key + "_f")), form(x.get(key + "_fb")))


def write_table(doc, path):
    env, rows, arms = doc["env"], doc["rows"], doc["arms"]
    L = []
    L.append("# lyco vs peers — %s, %s%s" % (env["device"], env["date"], "" if doc.get("complete") else
                                            " (INCOMPLETE: the run stopped before its end)"))
    L.append("")
    L.append("device %s · driver %s · CUDA %s · torch %s · triton %s · lycoris-lora %s · lyco commit %s "
             "(library %s) · dtype %s · python %s" % (
                 env["device"], env.get("driver", "?"), env.get("cuda", "n/a"), env["torch"], env["triton"],
                 env["lycoris"], env["lyco_commit"], env["lyco_library"], env["dtype"], env["python"]))
    c = doc["ceilings"]
    L.append("")
    L.append("Ceilings (same run): copy %.1f GB/s, matmul %s (%s). Floor = max(min_bytes / copy, "
             "flops / matmul); fb floor = f floor + backward floor. Times: median of %d interleaved repeats "
             "(min beside), %s. f = forward with autograd on; fb = forward + backward." % (
                 c["copy_Bps"] / 1e9, fmt_rate(c["mm_flops"]), c["how"], doc["reps"],
                 "device time (CUDA events; graph replay where the `timing` column says graph, else around the "
                 "eager call, with [kernels …] = the profiler's kernel-time sum beside it), L2 flushed by "
                 "a %d MB write before every sample" % doc["flush_mb"] if env["device_kind"] == "cuda" else
                 "perf_counter wall time, a %d MB buffer written before every sample" % doc["flush_mb"]))
    L.append("")
    L.append("Arms: " + "; ".join("**%s** = %s" % (a, ARM_DOC[a]) for a in arms))
    L.append("")
    L.append("## Time")
    L.append("")
    hdr = "| row | floor f / fb | " + " | ".join("%s f (min) | %s fb (min)" % (a, a) for a in arms) + " | lyco path |"
    table_head(L, hdr)
    for r in rows:
        cells = ["%s%s" % (r["name"], " **MISMATCH**" if r.get("mismatch") else ""),
                 "%s / %s" % (fmt_t(r.get("floor", {}).get("f_s")), fmt_t(r.get("floor", {}).get("fb_s")))]
        for a in arms:
            x = r["arms"].get(a, {})
            for m in MODES:
                if "med_s_" + m in x:
                    k = x.get("kernel_sum_s_" + m)
                    cells.append("%s (%s)%s" % (fmt_t(x["med_s_" + m]), fmt_t(x["min_s_" + m]),
                                                " [kernels %s]" % fmt_t(k) if k else ""))
                else:
                    err = x.get("error") or x.get("error_" + m)
                    cells.append("—" if not err else (err if err.startswith("skipped") else "error: " + err)[:120]
                                 .replace("|", "/"))
        cells.append(r.get("lyco_path", "—"))
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append("## time / floor, lyco's speed-up (peer time / lyco time), wall per call")
    L.append("")
    hdr = "| row | " + " | ".join("%s t/floor f, fb" % a for a in arms) + " | " + \
        " | ".join("lyco vs %s f, fb" % a for a in arms if a != "lyco") + " | " + \
        " | ".join("%s wall f, fb" % a for a in arms) + " |"
    table_head(L, hdr)
    for r in rows:
        cells = [r["name"]]
        for a in arms:
            x = r["arms"].get(a, {})
            cells.append(f_fb(x, "over_floor", "%.1f×"))
        for a in arms:
            if a != "lyco":
                x = r["arms"].get(a, {})
                cells.append(f_fb(x, "lyco_speedup", "%.2f×"))
        for a in arms:
            x = r["arms"].get(a, {})
            cells.append(f_fb(x, "wall_s", form=fmt_t))
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append("## Accuracy (RMS-normalised max ULP vs the fp64 oracle; fb: worst gradient) and memory")
    L.append("")
    hdr = "| row | " + " | ".join("%s ULP out / grads" % a for a in arms) + " | lyco≈eager | " + \
        " | ".join("%s peak MiB f, fb" % a for a in arms) + " | timing (per arm, fb) | first call in-process |"
    table_head(L, hdr)
    for r in rows:
        cells = [r["name"]]
        for a in arms:
            u = r["arms"].get(a, {}).get("ulp")
            if u:
                gr = [v for k, v in u.items() if k != "out"]
                cells.append("%.2f / %s" % (u["out"], fmt(max(gr) if gr else None)))
            else:
                cells.append("—")
        ag = r.get("agree")
        cells.append("—" if not ag else ("ok (%.2f of bound)" % ag["worst_fraction_of_bound"]) if ag["ok"]
                     else "**MISMATCH**: " + ag["why"][:160])
        for a in arms:
            x = r["arms"].get(a, {})
            cells.append(f_fb(x, "peak_extra_MiB", "%.0f"))
        cells.append("; ".join("%s: %s" % (a, r["arms"].get(a, {}).get("timing_fb", "—")[:60]) for a in arms))
        cells.append(", ".join("%s %.2f s" % (a, r["arms"][a]["first_call_in_process_s"]) for a in arms
                               if "first_call_in_process_s" in r["arms"].get(a, {})))
        L.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    if doc.get("first_call"):
        L.append("")
        first_call_lines(doc["first_call"], L)
    L.append("")
    L.append("## Summary (geometric means per family and direction)")
    L.append("")
    hdr = "| family | rows | " + " | ".join("%s t/floor f, fb (fb/f-floor)" % a for a in arms) + " | " + \
        " | ".join("lyco vs %s f, fb" % a for a in arms if a != "lyco") + " |"
    table_head(L, hdr)
    for fam, s in doc["summary"].items():
        cells = [fam, str(s["rows"])]
        for a in arms:
            cells.append("%s, %s (%s)" % (fmt(s.get("%s_over_floor_f" % a), "%.1f×"),
                                          fmt(s.get("%s_over_floor_fb" % a), "%.1f×"),
                                          fmt(s.get("%s_fb_over_f_floor" % a), "%.1f×")))
        for a in arms:
            if a != "lyco":
                cells.append(f_fb(s, "lyco_speedup_vs_%s" % a, "%.2f×"))
        L.append("| " + " | ".join(cells) + " |")
    notes = [(r["name"], n) for r in rows for n in r.get("notes", [])]
    if notes or doc.get("notes"):
        L.append("")
        L.append("## Notes")
        L.append("")
        for n in doc.get("notes", []):
            L.append("- " + n)
        for name, n in notes:
            L.append("- %s: %s" % (name, n))
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def first_call_lines(fc, L):
    """The first-call table (a results.json's "first_call" section) as markdown lines, appended to L.
    A section measured by a separate --first-call-only run (fc["run"]) says when, where and how."""
    L.append("## First call in a fresh process (import, then the first forward+backward of a new shape; "
             "fresh Triton / inductor / LyCORIS tuning caches; %d processes at a time)" % fc["jobs_at_once"])
    L.append("")
    run = fc.get("run")
    if run:
        L.append("Measured by a separate `--first-call-only` run%s: %s, %s, torch %s, lyco commit %s, "
                 "dtype %s, %d s limit per process; argv `%s`." % (
                     "" if fc.get("complete", True) else " (INCOMPLETE: saved before that run ended)",
                     run["device"], run["date"], run["torch"], run["lyco_commit"], run["dtype"],
                     fc["timeout_s"], " ".join(run["argv"])))
        L.append("")
    fc_arms = sorted({a for v in fc["results"].values() for a in v}, key=ARMS.index)
    L.append("| family | shape | " + " | ".join("%s import + first (second)" % a for a in fc_arms) + " |")
    L.append("|---|---|" + "---|" * len(fc_arms))
    for fam, v in fc["results"].items():
        cells = [fam, fc["cases"].get(fam, "")]
        for a in fc_arms:
            x = v.get(a)
            cells.append("—" if not x else ("error: " + x["error"][:100]).replace("|", "/") if "error" in x else
                         "%.1f + %.2f s (%s)" % (x["import_s"], x["first_s"], fmt_t(x["second_s"])))
        L.append("| " + " | ".join(cells) + " |")
    return L


ARM_DOC = {
    "lyco": "lyco's kernels via the public lyco.merge / lyco.bypass (autograd.Functions over the kernels outside torch.compile; spec cached)",
    "eager": "PyTorch eager running LyCORIS 4.x's functional code (backend=\"torch\")",
    "compile": "torch.compile of the eager arm (default mode, dynamic=False, dynamo reset per row)",
    "lycoris": "LyCORIS 4.x's own fused Triton kernels (lycoris.kernels.autograd, backend=\"triton\")",
}


def plot(doc, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print("plots: matplotlib not importable (%s); run `bench/peers.py --plot results.json` where it is" % e)
        return []
    rows, arms, env = doc["rows"], measured_arms(doc), doc["env"]
    title = "%s, %s, lyco %s, %s" % (env["device"], env["dtype"], env["lyco_commit"], env["date"])
    names = [r["name"] + (" (MISMATCH)" if r.get("mismatch") else "") for r in rows]
    written = []
    colors = {"lyco": "tab:blue", "eager": "tab:orange", "compile": "tab:green", "lycoris": "tab:red"}

    def bars(ax, series, ylabel, log_=True, line=None):
        w = 0.8 / max(1, len(series))
        for j, (label, vals) in enumerate(series):
            xs = [i + j * w for i in range(len(rows))]
            ax.bar(xs, [v if v else 0 for v in vals], width=w, label=label,
                   color=colors.get(label.split()[-1], None))
        ax.set_xticks([i + 0.4 - w / 2 for i in range(len(rows))])
        ax.set_xticklabels(names, rotation=70, ha="right", fontsize=7)
        if log_:
            ax.set_yscale("log")
        if line is not None:
            ax.axhline(line, color="black", linewidth=0.8, linestyle="--")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)

    def save(fig, fname):
        fig.suptitle(title, fontsize=8)
        fig.tight_layout()
        p = os.path.join(outdir, fname)
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    peers = [a for a in arms if a != "lyco"]
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.6 * len(rows) + 4), 9), squeeze=False)
    for ax, m in zip(axes[:, 0], MODES):
        bars(ax, [("vs " + a, [r["arms"].get(a, {}).get("lyco_speedup_" + m) for r in rows]) for a in peers],
             "lyco speed-up (%s)" % m, line=1.0)
    save(fig, "speedup.png")
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.6 * len(rows) + 4), 9), squeeze=False)
    for ax, m in zip(axes[:, 0], MODES):
        bars(ax, [(a, [r["arms"].get(a, {}).get("over_floor_" + m) for r in rows]) for a in arms],
             "time / floor (%s)" % m, line=1.0)
    save(fig, "time_over_floor.png")
    if any(r["arms"].get(a, {}).get("peak_extra_MiB_fb") for r in rows for a in arms):
        fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(rows) + 4), 5))
        bars(ax, [(a, [r["arms"].get(a, {}).get("peak_extra_MiB_fb") for r in rows]) for a in arms],
             "peak extra memory, fb (MiB)")
        save(fig, "peak_memory.png")
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.6 * len(rows) + 4), 9), squeeze=False)
    for ax, key in zip(axes[:, 0], ("out", "grads")):
        def u(r, a):
            x = r["arms"].get(a, {}).get("ulp")
            if not x:
                return None
            g = [v for k, v in x.items() if k != "out"]
            return x["out"] if key == "out" else (max(g) if g else None)
        bars(ax, [(a, [u(r, a) for r in rows]) for a in arms], "RMS-normalised max ULP (%s)" % key)
    save(fig, "ulp.png")
    print("plots: " + ", ".join(written))
    return written


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------
DTYPE = {}


def init_dtypes():
    DTYPE.update({"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32})
    DTNAME.update({torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"})


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="one small shape per family (smoke test)")
    g.add_argument("--full", action="store_true", help="the BENCH.md §4 sweep (long)")
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    ap.add_argument("--only", type=lambda s: [x for x in s.split(",") if x], default=[],
                    help="families, e.g. lora_merge,ia3_bypass (default: all)")
    ap.add_argument("--arms", type=lambda s: [x for x in s.split(",") if x], default=list(ARMS))
    ap.add_argument("--out", default=None, help="default docs/bench/<date>-<device>/")
    ap.add_argument("--reps", type=int, default=None, help="timed repeats per arm (GPU 30, CPU 5)")
    ap.add_argument("--wall-calls", type=int, default=None, help="calls averaged for the wall time (GPU 10, CPU 2)")
    ap.add_argument("--flush-mb", type=int, default=None, help="buffer written before each sample (GPU 256, CPU 64)")
    ap.add_argument("--no-graphs", dest="graphs", action="store_false", help="CUDA events around eager calls only")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--no-first-call", dest="first_call", action="store_false")
    ap.add_argument("--first-call-jobs", type=int, default=max(1, min(6, (os.cpu_count() or 2) // 2)),
                    help="fresh processes at a time (default: half the cores, at most 6)")
    ap.add_argument("--first-call-timeout", type=int, default=120, help="seconds per fresh process (default 120)")
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="start no new row after this many minutes of rows (default: no such limit)")
    ap.add_argument("--time-limit", type=float, default=None, metavar="S",
                    help="the whole run's wall-clock limit (default 360 for the default rows, none for --quick "
                         "and --full): no row starts later than 100 s before it (the first-call table's share), "
                         "no first-call process after it; the rows and processes left out are named")
    ap.add_argument("--cache-dir", default=None,
                    help="Triton / inductor / LyCORIS tuning caches of the main run (default: a fresh temporary "
                         "folder; give one to reuse a previous run's JIT and tuning)")
    ap.add_argument("--plot", metavar="RESULTS_JSON", help="only draw the plots of a results.json")
    ap.add_argument("--first-call-only", action="store_true",
                    help="run only the first-call table (families of --only, arms of --arms); writes "
                         "OUT/first_call.json and OUT/first_call.md")
    ap.add_argument("--merge-into", metavar="RESULTS_JSON",
                    help="with --first-call-only: replace that results.json's first_call section by this run's "
                         "and write the merged OUT/results.json and OUT/table.md (regenerated; the other "
                         "sections unchanged). OUT defaults to the JSON's folder (./peers-first-call when "
                         "that is read-only)")
    ap.add_argument("--first-call-from", metavar="FIRST_CALL_JSON",
                    help="with --first-call-only --merge-into: measure nothing, merge the first_call.json of an "
                         "earlier --first-call-only run")
    ap.add_argument("--first-call-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for a in args.arms:
        if a not in ARMS:
            ap.error("unknown arm %r; expected some of %s" % (a, ",".join(ARMS)))
    for f in args.only:
        if f not in FAMILIES:
            ap.error("unknown family %r; expected some of %s" % (f, ",".join(FAMILIES)))
    if (args.merge_into or args.first_call_from) and not args.first_call_only:
        ap.error("--merge-into and --first-call-from go with --first-call-only")
    if args.first_call_from and not args.merge_into:
        ap.error("--first-call-from needs --merge-into (the results.json to merge it into)")
    if args.first_call_only and not args.first_call:
        ap.error("--first-call-only and --no-first-call contradict each other")
    return args


def main(argv):
    global torch
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup (first-call children)
    t_parse = time.time()
    args.deadline = t_parse + args.time_limit if args.time_limit else None
    if args.plot:
        with open(args.plot) as f:
            doc = json.load(f)
        out = args.out or os.path.dirname(os.path.abspath(args.plot))
        if not os.access(out, os.W_OK):  # e.g. results fetched read-only from the GPU machine
            out = os.path.abspath("peers-plots")
        os.makedirs(out, exist_ok=True)
        return 0 if plot(doc, out) else 1
    if args.first_call_child:
        return first_call_child(args)
    if args.first_call_from:
        with open(args.first_call_from) as f:
            fc = json.load(f)
        out = merge_out_dir(args)
        merge_first_call(args.merge_into, fc, out)
        log("merged %s into %s/results.json and table.md" % (args.first_call_from, out))
        return 0
    cache = args.cache_dir or tempfile.mkdtemp(prefix="peers-cache-")  # by default an empty start
    for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "LYCORIS_KERNEL_CACHE_DIR"):
        os.environ.setdefault(k, os.path.join(cache, k.split("_")[0].lower()))
    import torch as _t
    torch = _t
    init_dtypes()
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        print("peers: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    gpu = args.device == "cuda"
    args.reps = args.reps or (30 if gpu else 5)
    args.wall_calls = args.wall_calls or (10 if gpu else 2)
    args.flush_mb = args.flush_mb or (256 if gpu else 64)
    if args.first_call_only:
        return first_call_only(args, argv)
    if args.time_limit is None and not (args.full or args.quick):
        args.time_limit = 360.0
        args.deadline = t_parse + args.time_limit
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        import lycoris  # noqa: F401
    except Exception as e:  # noqa: BLE001
        print("peers: lycoris-lora is not importable (%s): the eager/compile/lycoris arms need it" % short_err(e),
              file=sys.stderr)
        return 2
    notes = []
    if "lycoris" in args.arms and not gpu:
        notes.append("arm lycoris skipped: no GPU (LyCORIS 4.x's fused kernels are Triton kernels on CUDA)")
        print("peers: " + notes[-1], flush=True)
    cases = quick_cases() if args.quick else full_cases() if args.full else default_cases()
    if args.only:
        cases = [c for c in cases if c["fam"] in args.only]
    env = environment(args)
    if args.out is None:
        dev_tag = "".join(ch if ch.isalnum() else "-" for ch in env["device"].split(" (")[0]).strip("-")[:40]
        args.out = os.path.join(REPO, "docs", "bench", "%s-%s" % (datetime.date.today().isoformat(), dev_tag))
    os.makedirs(args.out, exist_ok=True)
    log("peers: %s, %s, %d rows, arms %s, out %s" % (env["device"], args.dtype, len(cases), ",".join(args.arms), args.out))
    dev = Device(args.device, args.flush_mb)
    ceil = measure_ceilings(dev, args.dtype, args.quick)
    log("ceilings: copy %.1f GB/s, matmul %s" % (ceil["copy_Bps"] / 1e9, fmt_rate(ceil["mm_flops"])))
    t_start = time.time()
    rows = []
    doc = {"env": env, "ceilings": ceil, "arms": args.arms, "reps": args.reps, "flush_mb": args.flush_mb,
           "rows": rows, "first_call": None, "summary": {}, "notes": notes, "argv": argv, "complete": False}
    for i, c in enumerate(cases):
        if args.max_minutes and time.time() - t_start > 60 * args.max_minutes:
            notes.append("rows %d-%d not run: --max-minutes %.1f reached" % (i + 1, len(cases), args.max_minutes))
            log(notes[-1])
            break
        if args.deadline and time.time() > args.deadline - (100 if args.first_call else 20):
            notes.append("rows %d-%d not run: --time-limit %.0f s nearly reached" % (i + 1, len(cases), args.time_limit))
            log(notes[-1])
            break
        try:
            rows.append(bench_row(i, len(cases), c, args, dev, ceil))
        except Exception as e:  # noqa: BLE001 (one row's failure never aborts the run)
            rows.append({"case": c, "name": "%s %s" % (c["fam"], case_name(c)), "arms": {},
                         "notes": ["row failed: " + short_err(e)]})
            log("row %d/%d FAILED: %s" % (i + 1, len(cases), short_err(e)))
        r = rows[-1]
        log("row %d/%d %s done: " % (i + 1, len(cases), r["name"]) + ", ".join(
            "%s %s/%s" % (a, fmt_t(r["arms"][a].get("med_s_f")), fmt_t(r["arms"][a].get("med_s_fb")))
            for a in args.arms if a in r["arms"]) + (" MISMATCH" if r.get("mismatch") else ""))
        save(doc, args)  # after every row: a run killed later keeps what it measured
    if args.first_call:
        log("first calls in fresh processes (%d at a time, %d s timeout each)" % (args.first_call_jobs,
                                                                               args.first_call_timeout))
        doc["first_call"] = first_call_table(args)
    doc["complete"] = True
    save(doc, args)
    plot(doc, args.out)
    print_summary(doc)
    log("wrote %s/table.md and results.json" % args.out)
    return 1 if any(r.get("mismatch") for r in rows) else 0


def merge_out_dir(args):
    """--out, else the folder of --merge-into when writable, else ./peers-first-call."""
    out = args.out or os.path.dirname(os.path.abspath(args.merge_into))
    if not os.access(out if os.path.isdir(out) else os.path.dirname(os.path.abspath(out)), os.W_OK):
        out = os.path.abspath("peers-first-call")  # e.g. results fetched read-only from the GPU machine
    os.makedirs(out, exist_ok=True)
    return out


def merge_first_call(results_json, fc, out):
    """Replace the first_call section of results_json by fc; write OUT/results.json (serialised as
    save() does, so every other section stays byte-identical) and OUT/table.md regenerated from it."""
    with open(results_json) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or "rows" not in doc or "first_call" not in doc:
        raise ValueError("%s is not a peers.py results.json (no rows / first_call keys)" % results_json)
    doc["first_call"] = fc
    text = json.dumps(doc, indent=1)
    with open(os.path.join(out, "results.json"), "w") as f:
        f.write(text)
    write_table(doc, os.path.join(out, "table.md"))
    return doc


def first_call_only(args, argv):
    """--first-call-only: the fresh-process first-call table alone, saved after every process to
    OUT/first_call.json and OUT/first_call.md (and, with --merge-into, merged as merge_first_call)."""
    env = environment(args)
    if args.merge_into:
        with open(args.merge_into) as f:
            old = json.load(f)
        if old.get("env", {}).get("dtype", args.dtype) != args.dtype:
            print("peers: %s was measured in %s; this run's --dtype is %s" % (
                args.merge_into, old["env"]["dtype"], args.dtype), file=sys.stderr)
            return 2
        out = merge_out_dir(args)
    else:
        dev_tag = "".join(ch if ch.isalnum() else "-" for ch in env["device"].split(" (")[0]).strip("-")[:40]
        out = args.out or os.path.join(REPO, "docs", "bench", "%s-%s" % (datetime.date.today().isoformat(), dev_tag))
        os.makedirs(out, exist_ok=True)
    run = {k: env.get(k) for k in ("date", "device", "torch", "triton", "lycoris", "lyco_commit", "dtype")}
    run["argv"] = argv
    log("first calls only: %s, arms %s, families %s, out %s (%d at a time, %d s timeout each)" % (
        env["device"], ",".join(args.arms), ",".join(args.only) or "all", out, args.first_call_jobs,
        args.first_call_timeout))

    def write(sec):
        sec["run"] = run
        with open(os.path.join(out, "first_call.json"), "w") as f:
            json.dump(sec, f, indent=1)
        with open(os.path.join(out, "first_call.md"), "w") as f:
            f.write("\n".join(first_call_lines(sec, [])) + "\n")
        if args.merge_into:
            merge_first_call(args.merge_into, sec, out)

    write(first_call_table(args, on_result=write))
    log("wrote %s/first_call.json and first_call.md%s" % (
        out, " and the merged results.json and table.md" if args.merge_into else ""))
    return 0


def save(doc, args):
    doc["summary"] = summary(doc["rows"], args.arms)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    write_table(doc, os.path.join(args.out, "table.md"))


def measured_arms(doc):
    return [a for a in doc["arms"] if any("med_s_f" in r["arms"].get(a, {}) or "med_s_fb" in r["arms"].get(a, {})
                                          for r in doc["rows"])]


def print_summary(doc):
    arms = measured_arms(doc)
    print("\nsummary (geomean per family and direction; t/floor f, fb; lyco speed-up f, fb):")
    for fam, s in doc["summary"].items():
        parts = ["%s %s, %s" % (a, fmt(s.get("%s_over_floor_f" % a), "%.1f×"), fmt(s.get("%s_over_floor_fb" % a), "%.1f×"))
                 for a in arms]
        parts += ["vs %s %s, %s" % (a, fmt(s.get("lyco_speedup_vs_%s_f" % a), "%.2f×"),
                                    fmt(s.get("lyco_speedup_vs_%s_fb" % a), "%.2f×")) for a in arms if a != "lyco"]
        print("  %-12s %s" % (fam, " | ".join(parts)))
    bad = [r["name"] for r in doc["rows"] if r.get("mismatch")]
    if bad:
        print("MISMATCH rows (lyco and eager disagree beyond the dtype budget): " + ", ".join(bad))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
