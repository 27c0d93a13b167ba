#!/usr/bin/env python3
"""bench_torch_cpu.py — the PyTorch-CPU peer arm of `lyco bench` (BENCH.md §5), and its plots.

  bench_torch_cpu.py --serve          driven by `lyco bench` over stdin/stdout, one JSON object per
                                      line each way (requests: hello, setup, time, free)
  bench_torch_cpu.py --plot JSON DIR  PNG plots of a `lyco bench --json` file (needs matplotlib)

What the peer computes: upstream LyCORIS's functional formulas (ALGORITHMS.md §2 and §4), written
here in plain torch eager ops on the row's shapes, in the row's dtypes, at the thread count lyco
asks for (torch.set_num_threads). Linear layers (LayerNorm for Norm); tensors O×I, x T×I, y0 T×O.
  - forward directions run under torch.no_grad() (no autograd bookkeeping: the cheapest peer);
  - backward directions: the forward runs once with autograd, the timed call is
    torch.autograd.grad(out, leaves, grad, retain_graph=True), i.e. the backward pass alone;
    leaves = the adapter tensors, plus x (dx) for additive bypass, y0 (dy0) for OFT/BOFT/IA3;
  - dtypes, as upstream: merge builds ΔW in the adapter dtype P, casts it to the base dtype B and
    adds W + m·ΔW in B (OFT/BOFT build W'' in fp32 and cast, DoRA works in dtype(d) = P); bypass
    casts the activations to P (what autocast to P does), computes in P, casts the delta to B and
    adds y0 in B. So for mixed rows the peer pays the casts that its one-dtype kernels need.
    DoRA in bypass, which upstream ignores, is written as PEFT applies it: ΔW built for the norms,
    x·Wᵀ again, y = y0 + (c − 1)⊙(x·Wᵀ) + c⊙(lora path).
Timing: a warm-up call opens every block and estimates a call; the block then runs
min(reps, budget_s / that estimate) calls, at least one, each preceded by a read-only sweep over
a buffer of 2×LLC (the same eviction lyco applies); times are wall-clock microseconds of the call
(time.perf_counter), returned raw to lyco, which takes the median. A warm-up call longer than
cap_s is itself the block's one sample and the reply says "slow" (lyco then asks for no more
blocks of that row): bf16 autograd on CPUs without native bf16 takes seconds per call.
Extra memory: the operands of one row (plus the autograd graph of a backward row).
"""
import json
import math
import sys
import time


def _torch():
    import torch  # noqa: F401 (imported lazily so --plot works without torch)
    return torch


DT = {}


def dtype(name):
    torch = _torch()
    if not DT:
        DT.update({"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16})
    return DT[name]


def eps_of(dt):
    return _torch().finfo(dt).eps


# ---------------------------------------------------------------- the formulas


def cayley(blocks):
    """R = (I + Q)(I − Q)^-1 per block, Q = B − Bᵀ, in fp32 (ALGORITHMS.md §2.4)."""
    torch = _torch()
    q = blocks.float()
    q = q - q.transpose(-1, -2)
    eye = torch.eye(q.shape[-1], dtype=torch.float32)
    return (eye + q) @ torch.linalg.inv(eye - q)


def boft_stage_rows(x, r, i, b):
    """One butterfly stage S_i = P_iᵀ blockdiag(R_i) P_i applied to the rows of x (O×N)."""
    O, N = x.shape
    h = (1 << i) * b // 2
    xb = x.reshape(O // (2 * h), 2, h, N).transpose(1, 2).reshape(O // b, b, N)
    y = r @ xb
    return y.reshape(O // (2 * h), h, 2, N).transpose(1, 2).reshape(O, N)


def boft_stage_cols(y0, r, i, b):
    """The same stage on the channel (last) axis of activations y0 (T×O)."""
    T, O = y0.shape
    h = (1 << i) * b // 2
    yb = y0.reshape(T, O // (2 * h), 2, h).transpose(2, 3).reshape(T, O // b, b)
    z = _torch().einsum("kij,tkj->tki", r, yb)
    return z.reshape(T, O // (2 * h), h, 2).transpose(2, 3).reshape(T, O)


class Row:
    """Tensors and the call of one (family, direction, shape, dtypes) row."""

    def __init__(self, s):
        torch = _torch()
        self.s = s
        fam, d = s["family"], s["dir"]
        O, I, T, r = s["O"], s["I"], s["T"], s["r"]
        P, B = dtype(s["adapter"]), dtype(s["base"])
        self.P, self.B = P, B
        self.merge = d.startswith("merge")
        self.bwd = d.endswith("bwd")
        g = torch.Generator().manual_seed(1234)

        def rnd(*shape, dt=P, scale=1.0, grad=False):
            t = ((torch.rand(*shape, generator=g) * 2 - 1) * scale).to(dt)
            return t.requires_grad_(grad and self.bwd)

        self.leaves = []

        def leaf(*shape, scale=1.0):
            t = rnd(*shape, scale=scale, grad=True)
            self.leaves.append(t)
            return t

        alpha, m = s.get("alpha", 16.0), 1.0
        if fam == "norm":
            I = O
        self.W = rnd(O, I, dt=B) if fam != "norm" else rnd(O, dt=B)
        if not self.merge:
            self.x = rnd(T, I, dt=B)
            self.y0 = rnd(T, O, dt=B)
        on_y0 = fam in ("diag_oft", "boft", "ia3")
        if not self.merge and self.bwd:
            t = self.y0 if on_y0 else self.x
            t.requires_grad_(True)
            self.leaves.append(t)
        W = self.W

        def to_p(x):
            return x.to(P)

        if fam in ("locon", "dora"):
            down, up, gam = leaf(r, I), leaf(O, r), alpha / r
            dsc = rnd(O, 1, scale=1.0).abs().add(1.0) if fam == "dora" else None
            if dsc is not None:
                dsc.requires_grad_(self.bwd)
                self.leaves.append(dsc)

            def merged():
                dw = (up * gam) @ down
                if dsc is None:
                    return W + dw.to(B) * m
                v = (W.to(P) + dw)
                n = v.norm(dim=1, keepdim=True) + eps_of(P)
                return (v * (dsc / n)).to(B)

            def bypass():
                lora = torch.nn.functional.linear(torch.nn.functional.linear(to_p(self.x), down), up) * gam
                if dsc is None:
                    return self.y0 + (lora * m).to(B)
                # DoRA in bypass as PEFT applies it (upstream LyCORIS ignores DoRA there): the norms
                # of W + ΔW from a built ΔW, x·Wᵀ again, y = y0 + (c − 1)⊙(x·Wᵀ) + c⊙Δ_lora
                v = W.to(P) + (up * gam) @ down
                c = m * (dsc.view(1, -1) / (v.norm(dim=1).view(1, -1) + eps_of(P)) - 1) + 1
                base = torch.nn.functional.linear(to_p(self.x), W.to(P))
                return self.y0 + ((c - 1) * base + c * lora).to(B)
        elif fam == "dylora":
            bs = s.get("dyl_bs", 4)
            nb = r // bs
            s_t = alpha / nb
            up_f, down_f = rnd(O, r - bs), rnd(r - bs, I)
            up_t, down_t = leaf(O, bs), leaf(bs, I)

            def stacks():
                return torch.cat([up_f, up_t], 1), torch.cat([down_f, down_t], 0)

            def merged():
                u, dn = stacks()
                return W + (u @ (dn * (s_t * m))).to(B)

            def bypass():
                u, dn = stacks()
                h = torch.nn.functional.linear(to_p(self.x), dn)
                return self.y0 + (torch.nn.functional.linear(h, u) * (s_t * m)).to(B)
        elif fam == "loha":
            w1a, w1b, w2a, w2b = leaf(O, r, scale=0.1), leaf(r, I), leaf(O, r, scale=0.1), leaf(r, I)
            gam = torch.tensor(alpha / r, dtype=P)

            def delta():
                return ((w1a @ w1b) * (w2a @ w2b)) * gam

            def merged():
                return W + delta().to(B) * m

            def bypass():
                return self.y0 + torch.nn.functional.linear(to_p(self.x), delta() * m).to(B)
        elif fam == "lokr":
            a, c = s["a"], s["c"]
            b, d_ = O // a, I // c
            w1 = leaf(a, c)
            lowrank = bool(s.get("w2_lowrank"))
            if lowrank:
                w2a, w2b = leaf(b, r), leaf(r, d_)
                sc = alpha / r
            else:
                w2 = leaf(b, d_)
                sc = 1.0

            def w2full():
                return w2a @ w2b if lowrank else w2

            def merged():
                return W + (torch.kron(w1, w2full()) * sc).to(B) * m

            def bypass():
                X = to_p(self.x).reshape(T, c, d_)
                H = (X @ w2b.t()) @ w2a.t() if lowrank else X @ w2.t()
                Y = torch.einsum("ap,tpb->tab", w1, H)
                return self.y0 + (Y.reshape(T, O) * (sc * m)).to(B)
        elif fam == "diag_oft":
            bs = r
            nb = O // bs
            blocks = leaf(nb, bs, bs, scale=0.3)

            def merged():
                R = cayley(blocks)
                w = torch.einsum("knm,kni->kmi", R, W.float().reshape(nb, bs, I)).reshape(O, I)
                return w.to(P).to(B)

            def bypass():
                R = cayley(blocks)
                y = torch.einsum("knm,tkn->tkm", R, self.y0.float().reshape(T, nb, bs)).reshape(T, O)
                return y.to(B)
        elif fam == "boft":
            b = r
            nb = O // b
            M = 1
            while (1 << (M - 1)) < nb:
                M += 1
            blocks = leaf(M, nb, b, b, scale=0.3)

            def merged():
                R = cayley(blocks)
                w = W.float()
                for i in range(M):
                    w = boft_stage_rows(w, R[i], i, b)
                return w.to(P).to(B)

            def bypass():
                R = cayley(blocks)
                y = self.y0.float()
                for i in range(M):
                    y = boft_stage_cols(y, R[i], i, b)
                return y.to(B)
        elif fam == "ia3":
            w = leaf(O)

            def merged():
                return (W * (1 + m * w)[:, None]).to(B)

            def bypass():
                return (self.y0 * (1 + m * w)).to(B)
        elif fam == "glora":
            sc = alpha / r
            a1, a2 = leaf(I, r, scale=I ** -0.5), leaf(r, I, scale=r ** -0.5)
            b1, b2 = leaf(O, r, scale=r ** -0.5), leaf(r, I, scale=I ** -0.5)

            def merged():
                dw = sc * (b1 @ b2 + (W.to(P) @ a1) @ a2)
                return W + (dw * m).to(B)

            def bypass():
                F = torch.nn.functional
                xp = to_p(self.x)
                ha = F.linear(F.linear(F.linear(xp, a2), a1) * (sc * m), W.to(P))
                hb = F.linear(F.linear(xp, b2), b1) * (sc * m)
                return self.y0 + (ha + hb).to(B)
        elif fam == "full":
            diff = leaf(O, I)

            def merged():
                return W + (diff * m).to(B)

            def bypass():
                return self.y0 + torch.nn.functional.linear(to_p(self.x), diff * m).to(B)
        elif fam == "norm":
            wn = leaf(O)

            def merged():
                return W + (m * wn).to(B)

            def bypass():
                return self.y0 + torch.nn.functional.layer_norm(to_p(self.x), (O,), wn * m, None, 1e-5).to(B)
        else:
            raise ValueError("unknown family %s" % fam)
        self.fn = merged if self.merge else bypass
        if self.bwd:
            out = self.fn()
            self.out = out
            self.grad = rnd(*out.shape, dt=out.dtype)
            self.call = lambda: torch.autograd.grad(self.out, self.leaves, self.grad, retain_graph=True)
        else:
            def fwd():
                with torch.no_grad():
                    return self.fn()
            self.call = fwd


# ---------------------------------------------------------------- the server


def serve():
    out = sys.stdout
    try:
        torch = _torch()
    except Exception as e:  # noqa: BLE001 (any import failure means: no peer)
        out.write(json.dumps({"error": "torch not importable: %s" % e}) + "\n")
        out.flush()
        return 0
    rows, flush = {}, None
    for line in sys.stdin:
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "hello":
                torch.set_num_threads(int(req.get("threads", torch.get_num_threads())))
                flush = torch.ones(int(req.get("flush_bytes", 64 << 20)) // 4)
                a, b = torch.rand(1024, 1024), torch.rand(1024, 1024)
                best = math.inf
                for _ in range(6):
                    t0 = time.perf_counter()
                    torch.mm(a, b)
                    best = min(best, time.perf_counter() - t0)
                rep = {"torch": torch.__version__, "threads": torch.get_num_threads(), "sgemm_flops": 2 * 1024 ** 3 / best}
            elif op == "setup":
                rows[req["id"]] = Row(req)
                rep = {"id": req["id"], "ok": True}
            elif op == "time":
                row = rows[req["id"]]
                torch.set_num_threads(int(req["threads"]))
                flush.sum()
                t0 = time.perf_counter()
                row.call()  # warm-up, and the estimate of one call
                one, us = time.perf_counter() - t0, []
                slow = one >= float(req.get("cap_s", 1e9))
                if slow:  # a call this long is its own sample: warm-up effects are far below its noise
                    us.append(1e6 * one)
                n = 0 if slow else max(1, min(int(req["reps"]), int(float(req.get("budget_s", 1e9)) / max(one, 1e-6))))
                for _ in range(n):
                    flush.sum()
                    t0 = time.perf_counter()
                    row.call()
                    us.append(1e6 * (time.perf_counter() - t0))
                rep = {"id": req["id"], "us": us, "slow": slow}
            elif op == "free":
                rows.pop(req["id"], None)
                rep = {"id": req["id"], "ok": True}
            else:
                rep = {"error": "unknown op %r" % op}
        except Exception as e:  # noqa: BLE001 (reported to lyco, which prints it in the row)
            rep = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")}
        out.write(json.dumps(rep) + "\n")
        out.flush()
    return 0


# ---------------------------------------------------------------- the plots


def plot(path, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print("plots: matplotlib not importable (%s)" % e)
        return 1
    with open(path) as f:
        doc = json.load(f)
    rows = [r for r in doc["rows"] if r.get("ran")]
    title = "%s, %d threads, commit %s, %s" % (doc.get("cpu", "?"), doc.get("threads", 0), doc.get("commit", "?"), doc.get("date", ""))
    dirs = ["merge_fwd", "merge_bwd", "bypass_fwd", "bypass_bwd"]
    written = []

    def bars(key, ylabel, fname, target):
        fig, axes = plt.subplots(len(dirs), 1, figsize=(12, 3.2 * len(dirs)), squeeze=False)
        for ax, d in zip(axes[:, 0], dirs):
            rs = [r for r in rows if r["dir"] == d and r[key] > 0]
            labels = ["%s\n%s" % (r["algo"], r["dtypes"].replace("adapter", "")) for r in rs]
            ax.bar(range(len(rs)), [r[key] for r in rs], color="tab:blue")
            ax.set_xticks(range(len(rs)))
            ax.set_xticklabels(labels, fontsize=6, rotation=90)
            ax.set_yscale("log")
            ax.set_ylabel(ylabel)
            ax.set_title(d, fontsize=9)
            t = target(d)
            ax.axhline(t, color="tab:red", linestyle="--", linewidth=1)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        p = "%s/%s" % (outdir, fname)
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    bars("time_over_floor", "time / floor", "time_over_floor.png", lambda d: 1.7 if d.startswith("merge") else 2.0)
    if any(r["speedup_vs_torch"] > 0 for r in rows):
        bars("speedup_vs_torch", "speed-up over torch eager", "speedup_vs_torch.png", lambda d: 3.0 if d.startswith("merge") else 1.5)
    fig, ax = plt.subplots(figsize=(6, 6))
    pts = [(r["ulp_eager"], r["ulp_fused"]) for r in rows if r["ulp_eager"] > 0 and r["ulp_fused"] >= 0]
    if pts:
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10)
        hi = max(max(p) for p in pts)
        ax.plot([1e-2, hi], [1e-2 + 1, hi + 1], color="tab:red", linestyle="--", linewidth=1, label="eager + 1")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ulp_max, eager twin")
        ax.set_ylabel("ulp_max, fused")
        ax.legend()
        ax.set_title(title, fontsize=7)
        p = "%s/ulp.png" % outdir
        fig.savefig(p, dpi=110)
        written.append(p)
    plt.close(fig)
    print("plots: " + ", ".join(written))
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "--serve":
        return serve()
    if len(argv) == 4 and argv[1] == "--plot":
        return plot(argv[2], argv[3])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
