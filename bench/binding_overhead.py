#!/usr/bin/env python3
"""binding_overhead.py — the per-call host cost of lyco's Python binding, layer by layer.

With tiny tensors (default a LoRA on an 8×8 Linear, rank 2: the kernel itself is negligible) it
times N back-to-back calls of each way into the same C entry point and prints µs per call:

  ctypes      lyco_merge_fwd / lyco_bypass_fwd through ctypes with every DLTensor, the adapter
              and the args struct built once beforehand (the floor of any Python caller)
  impl        the binding's implementation function alone, called as a plain Python function
              (CustomOpDef._init_fn: output allocation, DLTensor views, the C call, the path check)
  op.default  torch.ops.lyco.<op>.default(...): + the dispatcher and torch.library's wrappers
  custom_op   the CustomOpDef object lyco.ops.<op> as the peer bench's lyco arm calls it
              (spec string built once)
  public      lyco.merge(...) / lyco.bypass(...): + the spec build and the tensor dict split
  public+grad the same with the adapter factors requiring grad (the autograd wrapper records
              the node: what a training step's forward pays)
  fwd+bwd     public+grad, then .backward(g) with a prebuilt g (the backward op through the
              autograd formula; the gradients accumulate into .grad)

and the differences between consecutive layers. `--profile` adds a cProfile of the custom_op
calls (top functions by own time; `--profile-way fwd+bwd` profiles another way). Works on the
CPU and, with --device cuda, on a GPU (the calls
are asynchronous there: the figure is the host time per call with the queue kept busy; one
synchronize at the end of every timed loop is included, amortised over N).

  PYTHONPATH=python LYCO_LIBRARY=build/liblyco.so python3 bench/binding_overhead.py [--device cpu|cuda]
        [--n 20000] [--size 8] [--rank 2] [--dtype fp32|bf16|fp16] [--repeats 5] [--profile]
        [--profile-way custom_op|fwd+bwd|...]

Each figure is the median over --repeats loops of N calls (the minimum beside it).
"""
import argparse
import ctypes
import statistics
import sys
import time

import torch

import lyco
from lyco import _capi as C
from lyco import ops


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--n", type=int, default=20000, help="calls per timed loop")
    ap.add_argument("--repeats", type=int, default=5, help="timed loops per way (median, min)")
    ap.add_argument("--size", type=int, default=8, help="O = I of the Linear layer")
    ap.add_argument("--rank", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=4, help="rows of x for the bypass")
    ap.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    ap.add_argument("--profile", action="store_true", help="cProfile the custom_op calls")
    ap.add_argument("--profile-way", default="custom_op",
                    help="which way --profile profiles (e.g. fwd+bwd: the backward then runs on the "
                         "calling thread, autograd multithreading off, so that cProfile sees it)")
    return ap.parse_args(argv)


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def time_loop(fn, n, repeats, dev):
    """Median and min seconds per call over `repeats` loops of n calls."""
    fn()
    sync(dev)
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync(dev)
        per.append((time.perf_counter() - t0) / n)
    return statistics.median(per), min(per)


def raw_ctypes_call(direction, spec, tensors, out, x=None):
    """A closure calling the C entry point with every struct prebuilt (no allocation per call),
    and what must outlive it (the structs and the tensors whose memory they point at)."""
    a, keep = ops._adapter(spec, tensors)
    vo = ops._view(out, "out")
    L, ctx = C.lib(), ops._context(ops.parse_spec(spec), out.device)
    h, pa, po = ctx.handle, ctypes.byref(a), vo.ptr()
    if direction == "merge":
        args = C.MergeArgs(None, None, C.MERGE_MODES.index("delta"))
        pargs, fn = ctypes.byref(args), L.lyco_merge_fwd
        return lambda: fn(h, po, None, pa, pargs), (a, keep, vo, args, out, tensors)
    vx = ops._view(x, "x")
    args = C.BypassArgs(vx.ptr(), None, None, 0)
    pargs, fn = ctypes.byref(args), L.lyco_bypass_fwd
    return lambda: fn(h, po, pa, pargs), (a, keep, vo, vx, args, out, x, tensors)


def ways(direction, dev, dt, size, rank, tokens):
    g = torch.Generator(device="cpu").manual_seed(1)
    down = (torch.rand(rank, size, generator=g) - 0.5).to(dev, dt)
    up = (torch.rand(size, rank, generator=g) - 0.5).to(dev, dt)
    x = (torch.rand(tokens, size, generator=g) - 0.5).to(dev, dt)
    layer = lyco.linear(size, size)
    tensors = {"lora_down": down, "lora_up": up}
    down_g, up_g = down.clone().requires_grad_(True), up.clone().requires_grad_(True)
    grad_tensors = {"lora_down": down_g, "lora_up": up_g}
    slots, ts = list(tensors), [down, up]
    if direction == "merge":
        spec = lyco.make_spec("locon", layer, slots, alpha=float(rank), merge_mode="delta")
        out = torch.empty(size, size, dtype=dt, device=dev)
        gout = torch.ones_like(out)
        raw, keep = raw_ctypes_call("merge", spec, ts, out)
        op = torch.ops.lyco.merge_fwd.default
        impl = ops.merge_fwd._init_fn
        return [("ctypes", raw),
                ("impl", lambda: impl(spec, None, None, ts)),
                ("op.default", lambda: op(spec, None, None, ts)),
                ("custom_op", lambda: ops.merge_fwd(spec, None, None, ts)),
                ("public", lambda: lyco.merge(tensors, layer, alpha=float(rank))),
                ("public+grad", lambda: lyco.merge(grad_tensors, layer, alpha=float(rank))),
                ("fwd+bwd", lambda: lyco.merge(grad_tensors, layer, alpha=float(rank)).backward(gout))], keep
    spec = lyco.make_spec("locon", layer, slots, alpha=float(rank))
    out = torch.empty(tokens, size, dtype=dt, device=dev)
    gout = torch.ones_like(out)
    raw, keep = raw_ctypes_call("bypass", spec, ts, out, x)
    op = torch.ops.lyco.bypass_fwd.default
    impl = ops.bypass_fwd._init_fn
    return [("ctypes", raw),
            ("impl", lambda: impl(spec, x, None, None, ts)),
            ("op.default", lambda: op(spec, x, None, None, ts)),
            ("custom_op", lambda: ops.bypass_fwd(spec, x, None, None, ts)),
            ("public", lambda: lyco.bypass(x, tensors, layer, alpha=float(rank))),
            ("public+grad", lambda: lyco.bypass(x, grad_tensors, layer, alpha=float(rank))),
            ("fwd+bwd", lambda: lyco.bypass(x, grad_tensors, layer, alpha=float(rank)).backward(gout))], keep


def main(argv):
    args = parse(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("binding_overhead: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    print("lyco binding overhead: %s, torch %s, lyco %s, %s, Linear %dx%d rank %d (bypass: %d tokens), "
          "%d calls per loop, median (min) of %d loops" % (
              args.device if args.device == "cpu" else torch.cuda.get_device_name(0), torch.__version__,
              lyco.version(), args.dtype, args.size, args.size, args.rank, args.tokens, args.n, args.repeats))
    for direction in ("merge", "bypass"):
        table, keep = ways(direction, args.device, dt, args.size, args.rank, args.tokens)
        print("\n%s forward (LoRA):" % direction)
        prev = None
        for name, fn in table:
            med, mn = time_loop(fn, args.n, args.repeats, args.device)
            step = "" if prev is None else "   +%.2f µs over the line above" % ((med - prev) * 1e6)
            print("  %-12s %8.2f µs (%.2f)%s" % (name, med * 1e6, mn * 1e6, step))
            prev = med
        if args.profile:
            import cProfile
            import pstats
            fn = dict(table)[args.profile_way]
            pr = cProfile.Profile()
            with torch.autograd.set_multithreading_enabled(False):
                pr.enable()
                for _ in range(min(args.n, 5000)):
                    fn()
                pr.disable()
            print("  cProfile of %d %s calls (own time, top 25):" % (min(args.n, 5000), args.profile_way))
            st = pstats.Stats(pr, stream=sys.stdout)
            st.sort_stats("tottime").print_stats(25)
        del keep
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
