"""Golden test vectors for lyco, produced by UPSTREAM's own code (lycoris-lora 4.x).

For every case below this script builds a small base layer and one upstream
adapter module (``lycoris.modules.*``), overwrites every adapter parameter with
seeded random, non-zero values, and records what upstream computes:

  merge_fwd            W'' from upstream's merge API, called exactly as
                       ``merge_to`` calls it: ``module.get_merged_weight(m, W.shape, device)``
  merge_fwd_b          the merged bias, where the merge API returns one (full, norm)
  merge_bwd.<slot>     d/d(param) of  sum(W'' * G) [+ sum(b'' * Gb)]
  merge_y              y of upstream's merge-mode ("rebuild") forward, i.e.
                       module.forward(x) with bypass_mode=False (delta form y0 + op(x, W''-W))
  bypass_fwd           y of module.forward(x) with bypass_mode=True (where it works)
  bypass_bwd.<slot>    d/d(param) of sum(y * gy);  bypass_bwd.x likewise for the input

Inputs stored with them: W, b (base weight / bias), x, y0 = base(x), G, gy (and
Gb for algorithms whose merge returns a bias).  Adapter parameters are stored
under lyco's slot names (lora_down, hada_w1_a, ...), in the shapes upstream's
state dict uses.  One safetensors file per case and dtype is written to
tests/data/golden/<algo>_<variant>_<dtype>.safetensors; the metadata records
the geometry, alpha/scale/multiplier, versions and notes (see README.md).

Everything runs on CPU through upstream's eager torch reference bodies
(LYCORIS_KERNEL_BACKEND=torch, single thread, deterministic algorithms), and all
random values come from per-case seeded generators, so reruns are
byte-identical.  bf16 files use the same fp32 random values rounded to bf16;
the base layer and the module are cast with .to(torch.bfloat16).

Usage:  .venv-golden/bin/python tests/golden/make_golden.py [--out DIR] [--only SUBSTR]
"""

import argparse
import json
import os
import struct
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path

os.environ["LYCORIS_KERNEL_BACKEND"] = "torch"  # upstream's eager reference bodies

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from importlib.metadata import version as pkg_version  # noqa: E402
from lycoris.modules import (  # noqa: E402
    ButterflyOFTModule,
    DiagOFTModule,
    DyLoraModule,
    FullModule,
    GLoRAModule,
    IA3Module,
    LoConModule,
    LohaModule,
    LokrModule,
    NormModule,
)

REPO = Path(__file__).resolve().parents[2]
SEED = 20251004
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

# Geometry shared by all cases (kept tiny so every file stays well under 64 KiB).
LIN = dict(O=12, I=10, tokens=5)
CONV = dict(O=8, I=6, k=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1),
            batch=2, hw=(5, 5))
NORM_C = 12

# upstream parameter name -> lyco slot name
SLOT = {
    "lora_down.weight": "lora_down", "lora_up.weight": "lora_up",
    "lora_mid.weight": "lora_mid",
    "weight": "ia3_weight",  # IA3 only (Full/DyLoRA are mapped in their cases)
    "a1.weight": "glora_a1", "a2.weight": "glora_a2",
    "b1.weight": "glora_b1", "b2.weight": "glora_b2",
}


@dataclass
class Case:
    algo: str                 # lyco algo name (metadata "algo")
    variant: str              # file-name variant
    cls: type                 # upstream module class
    layer: str                # "linear" | "conv2d" | "layernorm"
    kwargs: dict = field(default_factory=dict)  # upstream constructor kwargs
    multiplier: float = 1.0
    notes: list = field(default_factory=list)
    merge_kwargs: dict = field(default_factory=dict)  # extra get_merged_weight kwargs
    bypass: bool = True       # try the bypass path at all
    merge_y: bool = True      # record the merge-mode forward output

    @property
    def name(self):
        return f"{self.algo}_{self.variant}"


N8_1 = "upstream merge API applies s^2 and drops the scalar (ALGORITHMS.md sec. 8 #1): " \
       "merge_fwd = W + m*s^2*dW, while merge_y and bypass_fwd use s once"

CASES = [
    # ---------------- LoCon ----------------
    Case("locon", "linear", LoConModule, "linear", dict(lora_dim=4, alpha=2.0)),
    Case("locon", "linear_m07", LoConModule, "linear", dict(lora_dim=4, alpha=1.3),
         multiplier=0.7, notes=["alpha != rank and multiplier 0.7"]),
    Case("locon", "conv2d", LoConModule, "conv2d", dict(lora_dim=4, alpha=2.0)),
    Case("locon", "conv2d_tucker", LoConModule, "conv2d",
         dict(lora_dim=4, alpha=2.0, use_tucker=True)),
    Case("locon", "linear_dora_out", LoConModule, "linear",
         dict(lora_dim=4, alpha=2.0, weight_decompose=True, wd_on_out=True),
         notes=["DoRA is not applied in bypass (ALGORITHMS.md sec. 1.4 / sec. 8 #13): "
                "bypass_fwd is plain LoCon bypass, dora_scale gets no bypass gradient"]),
    Case("locon", "linear_dora_in", LoConModule, "linear",
         dict(lora_dim=4, alpha=2.0, weight_decompose=True, wd_on_out=False),
         notes=["DoRA is not applied in bypass (ALGORITHMS.md sec. 1.4 / sec. 8 #13): "
                "bypass_fwd is plain LoCon bypass, dora_scale gets no bypass gradient"]),
    # ---------------- LoHa ----------------
    Case("loha", "linear", LohaModule, "linear", dict(lora_dim=4, alpha=1.3),
         notes=[N8_1, "LoHa rounds s to the parameter dtype (rnd_P(s)) inside dW"]),
    Case("loha", "conv2d", LohaModule, "conv2d", dict(lora_dim=4, alpha=2.0),
         notes=[N8_1, "hada_w*_b stored 2-D (r, I*K)"]),
    Case("loha", "conv2d_tucker", LohaModule, "conv2d",
         dict(lora_dim=4, alpha=2.0, use_tucker=True),
         notes=[N8_1, "Tucker: hada_w*_a are r x O, hada_w*_b r x I; 4.1.3's custom "
                "Tucker backward is correct (sec. 8 #3 fixed)"]),
    # ---------------- LoKr ----------------
    Case("lokr", "linear_w2decomp", LokrModule, "linear", dict(lora_dim=2, alpha=1.0),
         notes=[N8_1, "W1 full 3x2, W2 = w2_a (4x2) @ w2_b (2x5); bypass includes s "
                "(sec. 8 #2 fixed)"]),
    Case("lokr", "linear_full", LokrModule, "linear", dict(lora_dim=4, alpha=2.0),
         notes=["both factors full: alpha ignored, s = 1 (so the s^2 merge defect is "
                "invisible here)"]),
    Case("lokr", "conv2d_w2decomp", LokrModule, "conv2d", dict(lora_dim=1, alpha=0.5),
         notes=[N8_1, "W1 full 2x2, W2 = w2_a (4x1) @ w2_b (1x27) -> 4x3x3x3; the module "
                "conv bypass with decomposed W2 works in 4.1.3 (crashed in 3.x)"]),
    Case("lokr", "conv2d_tucker", LokrModule, "conv2d",
         dict(lora_dim=1, alpha=0.5, use_tucker=True),
         notes=[N8_1, "W2 Tucker: lokr_t2 1x1x3x3, lokr_w2_a 1x4 (r x b), lokr_w2_b 1x3"]),
    # ---------------- OFT family ----------------
    Case("diag_oft", "linear", DiagOFTModule, "linear", dict(lora_dim=4, constraint=0),
         notes=["block size 3, 4 blocks; bypass rotates y0 including the bias "
                "(bypass_fwd != merge when bias != 0, sec. 8 #5)"]),
    Case("diag_oft", "linear_rescaled", DiagOFTModule, "linear",
         dict(lora_dim=4, constraint=0, rescaled=True),
         notes=["rescaled merge works in 4.1.3 (sec. 8 #6 fixed at multiplier 1); "
                "bypass rotates the bias"]),
    Case("diag_oft", "linear_constraint", DiagOFTModule, "linear",
         dict(lora_dim=4, constraint=0.01),
         notes=["constraint*O = 0.12 < ||Q||_F, so the norm clamp is active"]),
    Case("boft", "linear", ButterflyOFTModule, "linear", dict(lora_dim=6, constraint=0),
         notes=["b = 6, nb = 2, boft_m = 2 stages; module bypass works in 4.1.3 "
                "(sec. 8 #7 fixed); bypass rotates the bias"]),
    Case("boft", "linear_rescaled", ButterflyOFTModule, "linear",
         dict(lora_dim=6, constraint=0, rescaled=True),
         notes=["b = 6, nb = 2, boft_m = 2 stages; bypass rotates the bias"]),
    # ---------------- IA3 ----------------
    Case("ia3", "linear_out", IA3Module, "linear", dict(train_on_input=False),
         notes=["output mode: bypass scales y0 including the bias (bypass != merge)"]),
    Case("ia3", "linear_in", IA3Module, "linear", dict(train_on_input=True)),
    # ---------------- GLoRA ----------------
    Case("glora", "linear", GLoRAModule, "linear", dict(lora_dim=4, alpha=2.0),
         notes=["bypass uses s once (sec. 8 #4 fixed)"]),
    # ---------------- DyLoRA ----------------
    Case("dylora", "linear", DyLoraModule, "linear",
         dict(lora_dim=4, alpha=2.0, block_size=2), merge_kwargs=dict(rank=2),
         merge_y=False,
         notes=["merge_fwd from get_merged_weight(rank=2): b = ceil(2/2) = 1, blocks 0..1 "
                "used (off-by-one), scale alpha/(b+1) = alpha/2; block 0 is detached so "
                "its rows/cols of merge_bwd.lora_up / lora_down are zero (no gradient); "
                "lora_up/lora_down stored as upstream saves them (blocks concatenated); "
                "merge_y omitted (forward draws a random rank); upstream bypass draws a "
                "random block even in eval, crashes unless all blocks are drawn and never "
                "applies alpha/(t+1) (sec. 8 #10)"]),
    # ---------------- Full ----------------
    Case("full", "linear", FullModule, "linear", {}, bypass=False,
         notes=["module used in is_diff mode (as make_module loads a file); "
                "merge_fwd_b = b + m*diff_b; Full has no bypass"]),
    # ---------------- Norm ----------------
    Case("norm", "layernorm", NormModule, "layernorm", {}, bypass=False,
         notes=["LayerNorm(12); W/b are the base gamma/beta; merge_fwd/merge_fwd_b are "
                "gamma''/beta''; merge_y is NormModule.forward = y0 + LN(x)*dgamma + dbeta; "
                "Norm has no bypass mode"]),
]


# ----------------------------------------------------------------------------------
ST_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float64: "F64"}


def save_canonical(tensors: dict, path: Path, metadata: dict):
    """Write a safetensors file with a canonical header.

    safetensors' own writer serialises ``__metadata__`` from a hash map, so its
    key order (and the file bytes) change from run to run.  This writer emits the
    same format with sorted keys: 8-byte little-endian header length, ASCII JSON
    header padded with spaces to a multiple of 8, then the raw little-endian
    tensor data, ordered like upstream's writer (larger dtypes first, then name)
    so every tensor stays aligned to its element size.
    """
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, offset = [], 0
    for name in order:
        t = tensors[name].detach().contiguous().cpu()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for blob in blobs:
            f.write(blob)


def gen(case: Case) -> torch.Generator:
    """A per-case generator, so adding a case never changes another case's data."""
    return torch.Generator().manual_seed(SEED ^ zlib.crc32(case.name.encode()))


def randn(g, shape, std=1.0):
    return torch.randn(*shape, generator=g, dtype=torch.float32) * std


def build_base(case: Case, g):
    """Base layer with random fp32 weight and bias, plus a random input x."""
    if case.layer == "linear":
        base = nn.Linear(LIN["I"], LIN["O"], bias=True)
        x = randn(g, (LIN["tokens"], LIN["I"]))
    elif case.layer == "conv2d":
        base = nn.Conv2d(CONV["I"], CONV["O"], CONV["k"], stride=CONV["stride"],
                         padding=CONV["padding"], dilation=CONV["dilation"], bias=True)
        x = randn(g, (CONV["batch"], CONV["I"], *CONV["hw"]))
    elif case.layer == "layernorm":
        base = nn.LayerNorm(NORM_C)
        x = randn(g, (LIN["tokens"], NORM_C))
    else:
        raise ValueError(case.layer)
    with torch.no_grad():
        std = 1.0 if case.layer == "layernorm" else 0.3
        base.weight.copy_(randn(g, base.weight.shape, std)
                          + (1.0 if case.layer == "layernorm" else 0.0))
        base.bias.copy_(randn(g, base.bias.shape, 0.3))
    base.requires_grad_(False)
    return base, x


def param_std(case: Case, pname: str) -> float:
    """Magnitude of the random values that replace upstream's (often zero) init."""
    if pname == "oft_blocks":
        return 0.1
    if case.algo == "loha" and pname.endswith("_a"):
        return 0.3
    if case.algo == "full":
        return 0.1
    return 0.3


def randomise_params(case: Case, module: nn.Module, g):
    """Overwrite every adapter parameter with seeded random values (fp32)."""
    with torch.no_grad():
        for pname, p in module.named_parameters():
            if pname == "dora_scale":  # keep upstream's ||W|| init, perturbed by ~10 %
                p.mul_(1.0 + randn(g, p.shape, 0.1))
            elif pname == "rescale":
                p.copy_(1.0 + randn(g, p.shape, 0.1))
            else:
                p.copy_(randn(g, p.shape, param_std(case, pname)))


def slot_params(case: Case, module: nn.Module):
    """lyco slot name -> list of upstream parameters (concatenated when > 1)."""
    if case.algo == "dylora":
        return {"lora_up": (list(module.up_list), 1), "lora_down": (list(module.down_list), 0)}
    if case.algo == "full":
        out = {"diff": ([module.weight], 0)}
        if module.bias is not None:
            out["diff_b"] = ([module.bias], 0)
        return out
    return {SLOT.get(n, n): ([p], 0) for n, p in module.named_parameters()}


def slot_value(params, dim):
    ts = [p.detach() for p in params]
    return ts[0].clone() if len(ts) == 1 else torch.cat(ts, dim=dim)


def slot_grad(params, grads, dim):
    """Gradient for one slot; None where no part of it received a gradient."""
    if all(gr is None for gr in grads):
        return None
    parts = [torch.zeros_like(p) if gr is None else gr for p, gr in zip(params, grads)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=dim)


def flat_params(slots):
    names, params, dims = [], [], []
    for slot, (ps, dim) in slots.items():
        names.append(slot)
        params.append(ps)
        dims.append(dim)
    return names, params, dims


def grads_by_slot(outputs, grad_outputs, slots, extra_inputs=()):
    """autograd.grad of sum(out * grad_out) over all slot params (+ extra inputs)."""
    names, params, dims = flat_params(slots)
    flat = [p for ps in params for p in ps]
    gr = torch.autograd.grad(outputs, flat + list(extra_inputs), grad_outputs,
                             allow_unused=True)
    res, i = {}, 0
    for name, ps, dim in zip(names, params, dims):
        g = slot_grad(ps, gr[i:i + len(ps)], dim)
        i += len(ps)
        if g is not None:
            res[name] = g
    return res, gr[len(flat):]


def upstream_api(case: Case) -> str:
    cls = case.cls.__name__
    extra = "".join(f", {k}={v}" for k, v in case.merge_kwargs.items())
    return f"{cls}.get_merged_weight(multiplier, W.shape, device{extra}) (as merge_to calls it)"


def fmt(v) -> str:
    return format(float(v), ".17g")


def scale_of(module) -> str:
    s = getattr(module, "scale", None)
    return "" if s is None or isinstance(s, torch.Tensor) else fmt(s)


# ----------------------------------------------------------------------------------
def run_case(case: Case, dtype_name: str, out_dir: Path):
    """Build one case in one dtype, run upstream's merge/forward/bypass, write the file."""
    dtype = DTYPES[dtype_name]
    g = gen(case)
    torch.manual_seed(SEED)  # upstream's own init (overwritten below) uses the global RNG
    random.seed(SEED)
    notes = list(case.notes)

    base, x = build_base(case, g)
    base = base.to(dtype)
    module = case.cls("lyco_golden", base, multiplier=case.multiplier,
                      bypass_mode=False, **case.kwargs)
    randomise_params(case, module, g)
    module = module.to(dtype).eval()
    x = x.to(dtype)
    slots = slot_params(case, module)
    tensors = {}
    for slot, (ps, dim) in slots.items():
        tensors[slot] = slot_value(ps, dim)

    W = base.weight.detach().clone()
    b = base.bias.detach().clone()
    G = randn(g, W.shape).to(dtype)
    with torch.no_grad():
        y0 = base(x)
    gy = randn(g, y0.shape).to(dtype)
    tensors.update(W=W, b=b, x=x, y0=y0, G=G, gy=gy)

    # ---- merge API ------------------------------------------------------------
    try:
        merged, merged_b = module.get_merged_weight(
            case.multiplier, W.shape, W.device, **case.merge_kwargs)
        outs, gouts = [merged], [G]
        tensors["merge_fwd"] = merged.detach().clone()
        if merged_b is not None:
            Gb = randn(g, merged_b.shape).to(merged_b.dtype)
            tensors["Gb"] = Gb
            tensors["merge_fwd_b"] = merged_b.detach().clone()
            outs.append(merged_b)
            gouts.append(Gb)
        grads, _ = grads_by_slot(outs, gouts, slots)
        for slot, gr in grads.items():
            tensors[f"merge_bwd.{slot}"] = gr
        missing = [s for s in slots if s not in grads]
        if missing:
            notes.append(f"merge: no gradient reaches {missing}")
    except Exception as e:  # record, never hide
        notes.append(f"merge path crashed upstream: {type(e).__name__}: {e}")

    # ---- merge-mode (rebuild) forward -------------------------------------------
    if case.merge_y:
        try:
            module.bypass_mode = False
            with torch.no_grad():
                tensors["merge_y"] = module(x).detach().clone()
        except Exception as e:
            notes.append(f"merge-mode forward crashed upstream: {type(e).__name__}: {e}")

    # ---- bypass -------------------------------------------------------------------
    if case.bypass:
        try:
            module.bypass_mode = True
            xg = x.clone().requires_grad_(True)
            y = module(xg)
            if y.shape != y0.shape:
                raise RuntimeError(f"bypass output shape {tuple(y.shape)} != {tuple(y0.shape)}")
            grads, (gx,) = grads_by_slot([y], [gy.to(y.dtype)], slots, extra_inputs=[xg])
            tensors["bypass_fwd"] = y.detach().clone()
            for slot, gr in grads.items():
                tensors[f"bypass_bwd.{slot}"] = gr
            tensors["bypass_bwd.x"] = gx
            missing = [s for s in slots if s not in grads]
            if missing:
                notes.append(f"bypass: no gradient reaches {missing}")
            if y.dtype != dtype:
                notes.append(f"bypass_fwd is {str(y.dtype).replace('torch.', '')} "
                             f"(upstream's bypass returns that dtype)")
        except Exception as e:
            notes.append(f"bypass path crashed upstream: {type(e).__name__}: {e}")
        finally:
            module.bypass_mode = False

    for k in ("merge_fwd", "merge_fwd_b", "merge_y"):
        if k in tensors and tensors[k].dtype != dtype:
            notes.append(f"{k} is {str(tensors[k].dtype).replace('torch.', '')} "
                         f"(upstream returns that dtype)")

    # ---- metadata -----------------------------------------------------------------
    conv = case.layer == "conv2d"
    kw = case.kwargs
    if case.layer == "linear":
        O, I = LIN["O"], LIN["I"]
    elif conv:
        O, I = CONV["O"], CONV["I"]
    else:
        O = I = NORM_C
    alpha = kw.get("alpha")
    alpha_s = fmt(alpha) if case.algo in ("locon", "loha", "lokr", "glora", "dylora") else ""
    scale_s = scale_of(module)
    if case.algo == "lokr" and module.use_w1 and module.use_w2:
        alpha_s = fmt(kw["lora_dim"])  # upstream replaces alpha by the rank (s = 1)
        notes.append(f"alpha {alpha:g} was passed; upstream stores alpha = rank")
    if case.algo == "dylora":  # the merge used alpha / (number of active blocks)
        nblk = -(-case.merge_kwargs["rank"] // kw["block_size"]) + 1
        scale_s = fmt(alpha / nblk)
    meta = {
        "algo": case.algo,
        "variant": case.variant,
        "layer": case.layer,
        "O": str(O),
        "I": str(I),
        "rank": str(kw["lora_dim"]) if "lora_dim" in kw else "",
        "kernel": ",".join(map(str, CONV["k"])) if conv else "",
        "stride": ",".join(map(str, CONV["stride"])) if conv else "",
        "padding": ",".join(map(str, CONV["padding"])) if conv else "",
        "dilation": ",".join(map(str, CONV["dilation"])) if conv else "",
        "alpha": alpha_s,
        "multiplier": fmt(case.multiplier),
        "scale": scale_s,
        "constraint": fmt(kw["constraint"]) if "constraint" in kw else "",
        "rescaled": "1" if kw.get("rescaled") else "0",
        "dora": "1" if kw.get("weight_decompose") else "0",
        "wd_on_out": ("1" if kw.get("wd_on_out", True) else "0")
        if kw.get("weight_decompose") else "",
        "on_input": ("1" if kw.get("train_on_input") else "0") if case.algo == "ia3" else "",
        "tucker": "1" if getattr(module, "tucker", False) else "0",
        "dtype": dtype_name,
        "lycoris_version": pkg_version("lycoris-lora"),
        "torch_version": torch.__version__,
        "upstream_api": upstream_api(case),
        "notes": "; ".join(notes),
    }
    if case.algo == "lokr":
        meta["lokr_shapes"] = ", ".join(f"{n}={tuple(p.shape)}"
                                        for n, p in module.named_parameters())
    path = out_dir / f"{case.name}_{dtype_name}.safetensors"
    save_canonical(tensors, path, meta)
    return path, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "tests" / "data" / "golden"))
    ap.add_argument("--only", default="", help="only cases whose name contains this")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        if args.only and args.only not in case.name:
            continue
        for dtype_name in DTYPES:
            path, notes = run_case(case, dtype_name, out_dir)
            size = path.stat().st_size
            assert size < 64 * 1024, f"{path} is {size} bytes"
            crashed = [n for n in notes if "crashed upstream" in n]
            print(f"{path.name:48s} {size:6d} B" + (f"  [{'; '.join(crashed)}]" if crashed else ""))


if __name__ == "__main__":
    main()
