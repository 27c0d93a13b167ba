"""Upstream's merge of a LyCORIS file into a plain safetensors checkpoint, the way upstream's own
tooling does it (the throughput comparison of docs/merge.md): load the whole checkpoint
(safetensors.torch.load_file), rebuild a module tree of Linear / LayerNorm / Conv modules with
those weights, create_lycoris_from_weights(...) and merge_to(m) (lycoris-lora 4.x, which is what
tools/merge.py calls through lycoris.utils.merge), then save_file the merged state dict.

Usage: python tests/merge/upstream_merge.py BASE ADAPTER MULT OUT
"""
import os
import sys

os.environ.setdefault("LYCORIS_KERNEL_BACKEND", "torch")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from lycoris import create_lycoris_from_weights  # noqa: E402


def module_tree(sd):
    root = nn.Module()
    for k, v in sd.items():
        if not k.endswith(".weight"):
            continue
        path = k[: -len(".weight")].split(".")
        parent = root
        for p in path[:-1]:
            if not hasattr(parent, p):
                parent.add_module(p, nn.Module())
            parent = getattr(parent, p)
        if v.ndim == 2:
            mod = nn.Linear(v.shape[1], v.shape[0], bias=False, device="meta")
        elif v.ndim == 1:
            mod = nn.LayerNorm(v.shape[0], elementwise_affine=True, bias=False, device="meta")
        else:
            mod = nn.Conv2d(v.shape[1], v.shape[0], tuple(v.shape[2:]), bias=False, device="meta")
        mod.weight = nn.Parameter(v, requires_grad=False)
        parent.add_module(path[-1], mod)
    return root


def main():
    base, adapter, mult, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    sd = load_file(base)
    root = module_tree(sd)
    net, _ = create_lycoris_from_weights(mult, adapter, root)
    net.merge_to(mult)
    save_file({k: v.contiguous() for k, v in sd.items()}, out, {"format": "pt"})


if __name__ == "__main__":
    main()
