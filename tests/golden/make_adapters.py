"""Real adapter files for lyco's loader and merge tool, produced by UPSTREAM (lycoris-lora 4.x).

Two small base models are built in torch:

  sd  an SD-style key layout: a "unet" with diffusers module names (conv_in, time_embedding,
      down_blocks.0.resnets.0.conv1, down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q,
      downsamplers, mid_block, up_blocks ... upsamplers) and a CLIP-style text encoder
      (text_model.encoder.layers.0.self_attn.q_proj, mlp.fc1, layer_norm1). The base checkpoint is
      written in the single-file LDM layout (model.diffusion_model.input_blocks.1.0.in_layers.2...,
      cond_stage_model.transformer.text_model...), as SD1.5 checkpoints are, so lyco must map the
      kohya names (lora_unet_down_blocks_0_..., lora_te_...) onto it.
  tf  a plain transformer (patch_embed.proj conv, blocks.N.attn.qkv/proj, blocks.N.mlp.fc1/fc2,
      blocks.N.norm1), adapters with LyCORIS's generic prefix (lycoris_blocks_0_attn_qkv).

For every algorithm upstream can build (lora, lora+dora, lora+tucker, loha, loha+tucker, lokr,
lokr decompose_both, diag-oft, boft, glora, dylora, full, norm) an adapter is created with
upstream's own wrappers (create_lycoris), every parameter is overwritten with seeded random
non-zero values (upstream initialises some to zero, which would hide mistakes), alpha ≠ rank
(so upstream's LoHa/LoKr s² merge scale shows), and it is saved with upstream's save_weights.
Then UPSTREAM merges it into the base with its own merge code: for sd `lycoris.utils.merge`
(what tools/merge.py calls), for tf `create_lycoris_from_weights(...).merge_to(m)`; the tensors
that changed are stored as <model>_<case>.upstream.safetensors (in the base's key layout).
IA3 is absent: upstream's wrappers have no `ia3` algorithm (ALGORITHMS.md §8 #8).

Output (tests/data/adapters/): <model>_base.safetensors, <model>_<case>.safetensors (adapter),
<model>_<case>.upstream.safetensors, and manifest.json (cases, multipliers, whether upstream's
merge crashed, versions). Everything runs on CPU in fp32, single thread, seeded: reruns give the
same tensors (safetensors' own writer orders the header itself).

Usage:  .venv-golden/bin/python tests/golden/make_adapters.py [--out DIR]
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("LYCORIS_KERNEL_BACKEND", "torch")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import lycoris  # noqa: E402
from lycoris import create_lycoris, create_lycoris_from_weights  # noqa: E402
from lycoris.utils import merge as upstream_merge  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

C = 16  # channels / hidden size: keeps every file small


# ---------------------------------------------------------------------------------------------
# the two base models
# ---------------------------------------------------------------------------------------------
class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.to_q = nn.Linear(C, C, bias=False)
        self.to_k = nn.Linear(C, C, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(C, C)])


class TBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(C)
        self.attn1 = Attn()


class Transformer2D(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj_in = nn.Conv2d(C, C, 1)
        self.transformer_blocks = nn.ModuleList([TBlock()])


class Resnet(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.GroupNorm(4, C)
        self.conv1 = nn.Conv2d(C, C, 3, padding=1)
        self.time_emb_proj = nn.Linear(2 * C, C)
        self.conv2 = nn.Conv2d(C, C, 3, padding=1)


class Down(nn.Module):
    def __init__(self):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet()])
        self.attentions = nn.ModuleList([Transformer2D()])
        self.downsamplers = nn.ModuleList([nn.Module()])
        self.downsamplers[0].conv = nn.Conv2d(C, C, 3, stride=2, padding=1)


class Mid(nn.Module):
    def __init__(self):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet()])


class Up(nn.Module):
    def __init__(self, upsample):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet()])
        if upsample:
            self.upsamplers = nn.ModuleList([nn.Module()])
            self.upsamplers[0].conv = nn.Conv2d(C, C, 3, padding=1)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(4, C, 3, padding=1)
        self.time_embedding = nn.Module()
        self.time_embedding.linear_1 = nn.Linear(C, 2 * C)
        self.down_blocks = nn.ModuleList([Down()])
        self.mid_block = Mid()
        self.up_blocks = nn.ModuleList([Up(False), Up(True)])


class ClipLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(C, C)
        self.self_attn.v_proj = nn.Linear(C, C)
        self.layer_norm1 = nn.LayerNorm(C)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(C, 2 * C)


class TextEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.text_model = nn.Module()
        self.text_model.encoder = nn.Module()
        self.text_model.encoder.layers = nn.ModuleList([ClipLayer()])


class TfBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(C)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(C, 3 * C)
        self.attn.proj = nn.Linear(C, C)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(C, 2 * C)
        self.mlp.fc2 = nn.Linear(2 * C, C)


class Tf(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, C, 4, stride=4)
        self.blocks = nn.ModuleList([TfBlock(), TfBlock()])


# diffusers module path -> LDM path (ALGORITHMS.md §6), for the modules above only
RESNET = {"conv1": "in_layers.2", "conv2": "out_layers.3", "norm1": "in_layers.0", "norm2": "out_layers.0",
          "time_emb_proj": "emb_layers.1", "conv_shortcut": "skip_connection"}


def ldm_unet_name(p):
    parts = p.split(".")
    if parts[0] == "conv_in":
        return "input_blocks.0.0." + ".".join(parts[1:])
    if parts[0] == "time_embedding":
        n = int(parts[1].split("_")[1])
        return f"time_embed.{2 * n - 2}." + ".".join(parts[2:])
    if parts[0] == "down_blocks":
        i = int(parts[1])
        if parts[2] == "downsamplers":
            return f"input_blocks.{3 + 3 * i}.0.op." + ".".join(parts[5:])
        j = int(parts[3])
        if parts[2] == "resnets":
            return f"input_blocks.{1 + 3 * i + j}.0.{RESNET[parts[4]]}." + ".".join(parts[5:])
        return f"input_blocks.{1 + 3 * i + j}.1." + ".".join(parts[4:])
    if parts[0] == "mid_block":
        j = int(parts[2])
        return f"middle_block.{2 * j}.{RESNET[parts[3]]}." + ".".join(parts[4:])
    if parts[0] == "up_blocks":
        i = int(parts[1])
        if parts[2] == "upsamplers":
            return f"output_blocks.{2 + 3 * i}.2.conv." + ".".join(parts[5:])
        j = int(parts[3])
        return f"output_blocks.{3 * i + j}.0.{RESNET[parts[4]]}." + ".".join(parts[5:])
    raise KeyError(p)


def sd_state(unet, te):
    sd = {}
    for k, v in unet.state_dict().items():
        sd["model.diffusion_model." + ldm_unet_name(k)] = v.detach().clone().contiguous()
    for k, v in te.state_dict().items():
        sd["cond_stage_model.transformer." + k] = v.detach().clone().contiguous()
    return sd


def tf_state(model):
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------
CASES = {
    "lora": dict(algo="lora", linear_dim=4, linear_alpha=2, conv_dim=4, conv_alpha=2),
    "lora_dora": dict(algo="lora", linear_dim=4, linear_alpha=2, conv_dim=4, conv_alpha=2, dora_wd=True),
    "lora_tucker": dict(algo="lora", linear_dim=4, linear_alpha=2, conv_dim=4, conv_alpha=2, use_tucker=True),
    "loha": dict(algo="loha", linear_dim=4, linear_alpha=2, conv_dim=4, conv_alpha=2),
    "loha_tucker": dict(algo="loha", linear_dim=4, linear_alpha=2, conv_dim=4, conv_alpha=2, use_tucker=True),
    "lokr": dict(algo="lokr", linear_dim=2, linear_alpha=1, conv_dim=2, conv_alpha=1, factor=2),
    "lokr_both": dict(algo="lokr", linear_dim=2, linear_alpha=1, conv_dim=2, conv_alpha=1, factor=2, decompose_both=True),
    "diag_oft": dict(algo="diag-oft", linear_dim=8, conv_dim=8, constraint=0),
    "boft": dict(algo="boft", linear_dim=8, conv_dim=8),
    "glora": dict(algo="glora", linear_dim=4, linear_alpha=2, conv_dim=4, conv_alpha=2),
    "dylora": dict(algo="dylora", linear_dim=4, linear_alpha=2, conv_dim=4, conv_alpha=2, block_size=2),
    "full": dict(algo="full"),
    "norm": dict(algo="lora", linear_dim=4, linear_alpha=2, conv_dim=4, conv_alpha=2, train_norm=True),
}
MULT = {"lora": 0.75, "loha": 1.25}   # others: 1.0


def randomize(net, gen):
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "dora_scale" in name:
                p.mul_(1 + 0.05 * torch.randn(p.shape, generator=gen))
            elif "oft_blocks" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def save_adapter(net, path, rename=None):
    sd = {}
    for k, v in net.state_dict().items():
        if rename:
            k = rename(k)
        sd[k] = v.detach().clone().to("cpu").float().contiguous()
    save_file(sd, str(path), {"made_by": "tests/golden/make_adapters.py"})
    return sd


def changed(before, after):
    return {k: v for k, v in after.items() if not torch.equal(v, before[k])}


def build(model_kind, seed):
    torch.manual_seed(seed)
    if model_kind == "sd":
        unet, te = UNet(), TextEncoder()
        with torch.no_grad():
            for p in list(unet.parameters()) + list(te.parameters()):
                p.copy_(torch.randn(p.shape) * 0.3)
        return (unet, te)
    m = Tf()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
    return (m,)


def make_case(out, model_kind, case, kw, seed, adapter_seed):
    """seed: the base model's (one per model kind); adapter_seed: this case's adapter values."""
    mult = MULT.get(case, 1.0)
    gen = torch.Generator().manual_seed(adapter_seed)
    models = build(model_kind, seed)
    rec = {"model": model_kind, "case": case, "multiplier": mult, "kwargs": {k: v for k, v in kw.items()}}
    name = f"{model_kind}_{case}"
    if model_kind == "sd":
        unet, te = models
        base = sd_state(unet, te)
        n_u = create_lycoris(unet, 1.0, **kw)
        n_t = create_lycoris(te, 1.0, **kw)
        n_u.apply_to()
        n_t.apply_to()
        randomize(n_u, gen)
        randomize(n_t, gen)
        sd = save_adapter(n_u, out / f"{name}.tmp_u.safetensors", lambda k: k.replace("lycoris_", "lora_unet_", 1))
        sd.update(save_adapter(n_t, out / f"{name}.tmp_t.safetensors", lambda k: k.replace("lycoris_", "lora_te_", 1)))
        for f in (f"{name}.tmp_u.safetensors", f"{name}.tmp_t.safetensors"):
            (out / f).unlink()
        save_file(sd, str(out / f"{name}.safetensors"), {"made_by": "tests/golden/make_adapters.py"})
        del n_u, n_t
        unet, te = build(model_kind, seed)   # fresh, unwrapped copies with the same base weights
        try:
            upstream_merge([te], unet, {k: v.clone() for k, v in sd.items()}, scale=mult)
            merged = sd_state(unet, te)
            rec["upstream"] = "ok"
        except Exception as e:  # upstream defects (ALGORITHMS.md §8) are recorded, not hidden
            merged, rec["upstream"] = None, f"crashed: {type(e).__name__}: {e}"
    else:
        (m,) = models
        base = tf_state(m)
        net = create_lycoris(m, 1.0, **kw)
        net.apply_to()
        randomize(net, gen)
        sd = save_adapter(net, out / f"{name}.safetensors")
        del net
        (m,) = build(model_kind, seed)
        try:
            net, _ = create_lycoris_from_weights(mult, str(out / f"{name}.safetensors"), m)
            net.merge_to(mult)
            merged = tf_state(m)
            rec["upstream"] = "ok"
        except Exception as e:
            merged, rec["upstream"] = None, f"crashed: {type(e).__name__}: {e}"
    if not (out / f"{model_kind}_base.safetensors").exists():
        save_file(base, str(out / f"{model_kind}_base.safetensors"))
    if merged is not None:
        diff = changed(base, merged)
        rec["upstream_changed"] = sorted(diff)
        save_file(diff or {"none": torch.zeros(1)}, str(out / f"{name}.upstream.safetensors"))
    rec["adapter_keys"] = len(sd)
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data" / "adapters"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recs = []
    for mi, model_kind in enumerate(("sd", "tf")):
        for ci, (case, kw) in enumerate(CASES.items()):
            recs.append(make_case(out, model_kind, case, kw, 1234 + 100 * mi, 5678 + 100 * mi + ci))
            print(f"{model_kind}_{case}: upstream {recs[-1]['upstream']}", file=sys.stderr)
    manifest = {
        "generator": "tests/golden/make_adapters.py",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "lycoris-lora": getattr(lycoris, "__version__", None) or _dist_version("lycoris-lora"),
                     "safetensors": _dist_version("safetensors")},
        "cases": recs,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def _dist_version(name):
    from importlib.metadata import version
    return version(name)


if __name__ == "__main__":
    main()
