#!/usr/bin/env python3
"""Writes the reference-implementation files of tests/data/safetensors-reference.

Each file is serialized by the reference safetensors implementation (the Python binding of the
Rust crate, `safetensors` 0.8.0 on PyPI: `pip install safetensors==0.8.0`), from fixed
pseudo-random bytes. test_safetensors (`--reference DIR`) opens every file with lyco's strict
reader and re-writes it with lyco's writer, which must reproduce it byte for byte (FORMATS.md
section 1.5: valid files written by the reference implementation; writer rules: the reference
order and padding). Usage: python3 make.py [DIR]   (default: this script's directory)
"""
import ctypes
import os
import random
import sys

import safetensors
from safetensors._safetensors_rust import TensorSpec, serialize

# reference dtype name -> bits per element
BITS = {"bool": 8, "uint8": 8, "int8": 8, "int16": 16, "uint16": 16, "float16": 16,
        "bfloat16": 16, "int32": 32, "uint32": 32, "float32": 32, "float64": 64, "int64": 64,
        "uint64": 64, "complex64": 64, "float8_e4m3fn": 8, "float8_e5m2": 8,
        "float8_e8m0fnu": 8, "float8_e4m3fnuz": 8, "float8_e5m2fnuz": 8,
        "float4_e2m1fn_x2": 8}  # two F4 values per byte; shapes here are storage shapes


def tensors(rng, specs):
    """{name: TensorSpec} over fresh random bytes; the buffers are returned to keep them alive."""
    keep, out = [], {}
    for name, dtype, shape in specs:
        n = 1
        for d in shape:
            n *= d
        nbytes = n * BITS[dtype] // 8
        buf = (ctypes.c_uint8 * max(nbytes, 1))(*[rng.randrange(256) for _ in range(nbytes)])
        keep.append(buf)
        out[name] = TensorSpec(dtype=dtype, shape=list(shape), data_ptr=ctypes.addressof(buf),
                               data_len=nbytes)
    return out, keep


CASES = {
    "ref_empty": ([], None),
    "ref_meta_only": ([], {"format": "pt"}),
    "ref_lora": ([("lora_unet_down.lora_down.weight", "float16", (4, 64)),
                  ("lora_unet_down.lora_up.weight", "float16", (64, 4)),
                  ("lora_unet_down.alpha", "float32", ()),
                  ("lora_te_x.lora_down.weight", "bfloat16", (2, 8)),
                  ("lora_te_x.alpha", "bfloat16", ())],
                 {"ss_network_dim": "4", "ss_network_alpha": "1.0"}),
    "ref_all_dtypes": ([(f"t.{d}", d, (3, 2)) for d in sorted(BITS)] +
                       [("empty.f32", "float32", (0, 5)), ("scalar.i64", "int64", ())],
                       {"format": "pt"}),
    "ref_names": ([("B", "float32", (1,)), ("a", "float32", (2,)), ("Z", "float32", (1,)),
                   ("_", "float32", (1,)), ("\u00e9t\u00e9", "float32", (1,)),
                   ("quote\"back\\slash", "float32", (1,)), ("tab\tnl\n", "float32", (1,)),
                   ("ctl\u0001", "float32", (1,)), ("emoji\U0001F600", "float32", (1,)),
                   ("10", "float32", (1,)), ("9", "float32", (1,))],
                  {"k\"\\": "v\t\n\u00fc", "z": "", "a": "1"}),
    "ref_padding": ([("x", "uint8", (5,)), ("yy", "int16", (3,))], None),
    # the binding doubles the last (storage) dim: the header says F4 [3, 4], 6 bytes
    "ref_f4": ([("q", "float4_e2m1fn_x2", (3, 2)), ("s", "float8_e8m0fnu", (3,))], None),
}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rng = random.Random(20261129)
    for name, (specs, meta) in CASES.items():
        tdict, keep = tensors(rng, specs)
        data = bytes(serialize(tdict, metadata=meta))
        with open(os.path.join(out_dir, name + ".safetensors"), "wb") as f:
            f.write(data)
        del keep
    print(f"wrote {len(CASES)} files with safetensors {safetensors.__version__} to {out_dir}")


if __name__ == "__main__":
    main()
