"""Writes the throughput test's inputs (docs/merge.md "Throughput"): a transformer-shaped fp16
checkpoint of N layers (hidden H, MLP 4H: q/k/v/o H×H, fc1 4H×H, fc2 H×4H, two LayerNorms per
layer), streamed tensor by tensor so memory stays small, and a LoRA (rank R, alpha R/2, fp16,
LyCORIS prefix lycoris_) on q/k/v/o of every layer. Default N=24, H=2048: 2.42 GB (2.25 GiB).

Usage: python tests/merge/make_big.py OUTDIR [--layers N] [--hidden H] [--rank R]
Needs numpy only. Seeded: reruns write the same bytes.
"""
import argparse
import json
import os
import struct

import numpy as np


def tensors(layers, h):
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            yield p + f"self_attn.{n}.weight", (h, h)
        yield p + "mlp.fc1.weight", (4 * h, h)
        yield p + "mlp.fc2.weight", (h, 4 * h)
        yield p + "input_layernorm.weight", (h,)
        yield p + "post_attention_layernorm.weight", (h,)


def write(path, items, gen):
    """items: list of (name, shape, dtype_str, np dtype); data from gen(name, shape)."""
    header, off = {}, 0
    items = sorted(items, key=lambda t: t[0])   # one dtype: the reference order is by name
    for name, shape, dt, npdt in items:
        n = int(np.prod(shape)) * np.dtype(npdt).itemsize
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - (len(hb) + 8) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, dt, npdt in items:
            f.write(gen(name, shape).astype(npdt).tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--rank", type=int, default=16)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(20261129)
    base = [(n, s, "F16", np.float16) for n, s in tensors(a.layers, a.hidden)]
    write(os.path.join(a.out, "big_base.safetensors"), base,
          lambda n, s: rng.standard_normal(s, dtype=np.float32) * 0.02)
    lora = []
    for n, s in tensors(a.layers, a.hidden):
        if "self_attn" not in n:
            continue
        m = "lycoris_" + n[: -len(".weight")].replace(".", "_")
        lora += [(m + ".lora_down.weight", (a.rank, s[1]), "F16", np.float16),
                 (m + ".lora_up.weight", (s[0], a.rank), "F16", np.float16),
                 (m + ".alpha", (), "F16", np.float16)]

    def lora_gen(n, s):
        if n.endswith(".alpha"):
            return np.array(a.rank / 2, dtype=np.float32)
        return rng.standard_normal(s, dtype=np.float32) * 0.05

    write(os.path.join(a.out, "big_lora.safetensors"), lora, lora_gen)


if __name__ == "__main__":
    main()
