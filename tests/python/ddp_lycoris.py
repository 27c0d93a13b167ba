#!/usr/bin/env python3
"""lyco under LyCORIS with PyTorch DDP, two processes (issue 8, part 2).

What it checks. A small model (a Conv2d and three Linear layers, frozen) is wrapped by LyCORIS
4.x (`create_lycoris` + `apply_to`) with lyco as its kernel backend (`lyco.lycoris.enable()`),
for each algorithm of --algo. Two worker processes (torch.multiprocessing.spawn; NCCL on cuda,
one GPU per rank, device = rank; gloo on cpu) train the adapter with DistributedDataParallel for
--steps SGD steps on a fixed synthetic data set, the global batch split in halves between the
ranks. A single-process run (same seeds, the whole global batch, same device type: cuda:0 or
cpu, in the parent process, eager) is the reference. The script then checks:

  routing   lyco.lycoris.report() says every LyCORIS module of the network runs on lyco (no
            module on LyCORIS's own path), in every process;
  lyco ran  every lyco op call (bypass_fwd/bwd) is recorded with the device of its tensors and
            the calling thread's current CUDA device: one forward and one backward call per
            module per step, all on the process's own device (cuda:rank / cpu); the path each
            call took (fused kernel or lyco's eager twin, per backend) is printed;
  devices   every parameter, gradient and buffer of a process is on its device (cuda:rank);
            (cuda) from each rank, torch.cuda.memory_allocated(d) and max_memory_allocated(d)
            are 0 for the other device d, and no CUDA primary context appeared on the other
            device during training (a context already there before training, e.g. made by
            NCCL, is printed as a note, since it cannot be lyco's);
  replicas  after the last step the adapter weights of rank 0 and rank 1 are bitwise equal;
  losses    for each step, the mean of the two ranks' losses equals the reference loss within
            the dtype's budget;
  weights   after the last step, every adapter tensor equals the reference's within the dtype's
            budget; and the reference run moved every adapter tensor (fp32; in bf16 at least
            half of them: pure-bf16 SGD drops an update below half an ulp);
  compiled  (--compile) each rank's model forward went through inductor as graph(s) holding
            every lyco call (graph breaks are printed; DDP's own forward breaks, not the model's).
Budgets (they cover the different summation order of a half batch + all-reduce against a whole
batch, carried through the steps; u = unit roundoff, fp32 2^-24, bf16 2^-8; ulp_T(v) = the
spacing of dtype T at |v|, 2^(floor(log2|v|) - 23) for fp32, - 7 for bf16):
  loss (computed in fp32 from the model's output):
           |mean_r L_r(s) - L_ref(s)| <= LOSS_K * u * (1 + s) * max(1, |L_ref(s)|)  (step s)
           LOSS_K = 16 for fp32 (1e-6 relative at step 0, 1.9e-5 at step 19),
                    0.25 for bf16 (9.8e-4 relative at step 0, 2e-2 at step 19);
  weights (each adapter tensor after the last step, in its training dtype):
           max|p - p_ref| <= PARAM_ULPS * ulp_T(max|p_ref|)
           PARAM_ULPS = 128 for fp32 (0.8e-5 to 1.5e-5 of max|p_ref|), 8 for bf16 (3.1% to 6.3%).
On cuda every process switches TF32 and cuBLAS's reduced-precision bf16 reductions off (the base
model's own matmuls and convolutions), so the budgets measure DDP and lyco, not those.
Measured on 2 CPU processes (gloo, seeds 1234, 7, 99): fp32 losses within 2e-7 relative (<= 0.2x
budget), weights within 1-2 ulp; bf16 losses within 1e-4 relative, weights within 3 bf16 ulp
(<= 0.375x budget).
With --compile the DDP model is wrapped in torch.compile (torch.compile(DDP(model)); lyco's ops
are torch custom ops with fake implementations) and compared with the same eager reference.
Exit status 0 only when every check passed; the last line says PASS or FAIL.

How to run (LYCO_LIBRARY and PYTHONPATH come from the environment; nothing is hard-coded; if
`import lyco` fails, <repo>/python is tried):
  LYCO_LIBRARY=build/liblyco.so PYTHONPATH=python python3 tests/python/ddp_lycoris.py --device cpu
  LYCO_LIBRARY=<cuda build>/liblyco.so PYTHONPATH=python:<lycoris site> \
      python3 tests/python/ddp_lycoris.py --device cuda [--compile] [--dtype bf16]
Options: --device cuda|cpu, --compile, --steps N (20), --dtype fp32|bf16, --algo a,b,...
(default lora,loha,lokr,diag-oft,boft,ia3,glora), --batch (16, global), --seed, --lr (0.2).
Every process sets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 (the machine's notes require them) before torch is imported."""

import os

ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
       "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(ENV)  # at import: the parent, and every spawned worker (it re-imports this file)
# inductor compiles in the rank's own process (no pool of compile workers, which would start on
# the default device), so the per-process device checks below see everything a rank does
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import datetime  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402  (importing torch does not touch CUDA)

WORLD = 2
ALGOS = ["lora", "loha", "lokr", "diag-oft", "boft", "ia3", "glora"]
ALGO_KW = {"lokr": {"factor": 4}}
U = {"fp32": 2.0 ** -24, "bf16": 2.0 ** -8}
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}
MANT = {"fp32": 23, "bf16": 7}
# budgets (see the docstring); the table prints each measured error as a fraction of its budget
LOSS_K = {"fp32": 16.0, "bf16": 0.25}
PARAM_ULPS = {"fp32": 128, "bf16": 8}


def ulp(v, dtype):
    """The spacing of dtype at |v| (v > 0, normal range)."""
    return 2.0 ** (math.floor(math.log2(v)) - MANT[dtype])


# ------------------------------------------------------------------------------------------------
# imports that must wait until the device is pinned (lyco loads liblyco.so, maybe a CUDA build)
# ------------------------------------------------------------------------------------------------
def _import_lyco():
    try:
        import lyco  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
        import lyco  # noqa: F401
    import lyco.lycoris as LL
    import lyco.ops as LO
    import lycoris
    logging.getLogger("LyCORIS").setLevel(logging.ERROR)
    # lyco's own fallback reports (a case ran lyco's eager twin) are counted by the recorder
    warnings.filterwarnings("ignore", message=r"lyco: .* ran the eager twin")
    return lyco, LL, LO, lycoris


class Recorder:
    """Wraps lyco.ops._context / _note_path: one row per lyco op call (direction, algo, device of
    the call's tensors, the calling thread's current CUDA device, path kind, backend)."""

    def __init__(self, LO):
        self.rows = []
        self._tls = threading.local()
        self._LO = LO
        self._orig = (LO._context, LO._note_path)
        rec = self

        def _context(d, device):
            cur = torch.cuda.current_device() if device.type == "cuda" else -1
            rec._tls.where = (str(device), cur)
            return rec._orig[0](d, device)

        def _note_path(ctx, d, direction):
            kind, backend, _why, _ = ctx.last_path()
            where = getattr(rec._tls, "where", ("?", -1))
            rec.rows.append((direction, d["algo"], where[0], where[1], kind, backend))
            return rec._orig[1](ctx, d, direction)

        LO._context, LO._note_path = _context, _note_path

    def clear(self):
        self.rows = []


# ------------------------------------------------------------------------------------------------
# the model, the data, one training run
# ------------------------------------------------------------------------------------------------
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.fc1 = torch.nn.Linear(8 * 16, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.fc3 = torch.nn.Linear(32, 16)

    def forward(self, x):
        h = torch.relu(self.conv(x)).flatten(1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(h)))))


class Trainee(torch.nn.Module):
    """The frozen base model and the LyCORIS network under one module, so that DDP sees the
    adapter parameters (apply_to() registers them on the network, not on the base model)."""

    def __init__(self, model, net):
        super().__init__()
        self.model = model
        self.lycoris = net

    def forward(self, x):
        return self.model(x)


def build(algo, cfg, device):
    from lycoris import LycorisNetwork, create_lycoris
    torch.manual_seed(cfg["seed"])
    model = Net()
    model.requires_grad_(False)
    LycorisNetwork.apply_preset({"target_module": ["Linear", "Conv2d"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = create_lycoris(model, 1.0, linear_dim=4, linear_alpha=2, algo=algo,
                             **ALGO_KW.get(algo, {}))
    net.apply_to()
    g = torch.Generator().manual_seed(cfg["seed"] + 1)
    with torch.no_grad():  # non-zero factors everywhere (LoRA's up starts at zero)
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    dt = DTYPE[cfg["dtype"]]
    model.to(device=device, dtype=dt)
    net.to(device=device, dtype=dt)
    return Trainee(model, net)


def dataset(cfg):
    g = torch.Generator().manual_seed(cfg["seed"] + 2)
    x = torch.randn(cfg["steps"], cfg["batch"], 4, 4, 4, generator=g)
    t = torch.randint(0, 16, (cfg["steps"], cfg["batch"]), generator=g)
    return x, t


def train(fwd, params, cfg, device, lo, hi):
    x_all, t_all = dataset(cfg)
    dt = DTYPE[cfg["dtype"]]
    opt = torch.optim.SGD(params, lr=cfg["lr"])
    losses = []
    for s in range(cfg["steps"]):
        x = x_all[s, lo:hi].to(device=device, dtype=dt)
        t = t_all[s, lo:hi].to(device=device)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(fwd(x).float(), t)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses).cpu().double()], opt


def adapter_state(trainee):
    return {n: p.detach().cpu().clone() for n, p in trainee.lycoris.named_parameters()}


def check_run(LL, rec, trainee, cfg, device, rank, opt):
    """The routing, lyco-ran and device checks of one process's run: [(name, ok, detail)]."""
    out = []
    rep = LL.report(trainee.lycoris)
    bad = collections.defaultdict(list)
    for k, v in rep.items():
        if v != "lyco":
            bad[v].append(k)
    out.append(("routing", bool(rep) and not bad,
                f"{len(rep)} modules, all on lyco" if rep and not bad else
                "no LyCORIS module" if not rep else
                f"{sum(map(len, bad.values()))}/{len(rep)} modules on LyCORIS's own path: "
                + "; ".join(f"{why} ({', '.join(ms)})" for why, ms in bad.items())))
    n = len(rep)
    cnt = collections.Counter(r[0] for r in rec.rows)
    want = n * cfg["steps"]
    ok = cnt["bypass_fwd"] == want and cnt["bypass_bwd"] == want
    out.append(("lyco ran", ok, f"bypass_fwd {cnt['bypass_fwd']}, bypass_bwd {cnt['bypass_bwd']}"
                f" calls (want {want} each); merge calls {cnt['merge_fwd'] + cnt['merge_bwd']}"))
    dev = str(device)
    wrong = [r for r in rec.rows if r[2] != dev or (device.type == "cuda" and r[3] != device.index)]
    out.append(("lyco device", not wrong and bool(rec.rows),
                "no lyco call was made" if not rec.rows else
                f"all {len(rec.rows)} calls on {dev}" + (f" (current device {device.index})"
                                                         if device.type == "cuda" else "")
                if not wrong else f"{len(wrong)} calls elsewhere, e.g. {wrong[:3]}"))
    tens = [(f"param {k}", v) for k, v in trainee.named_parameters()]
    tens += [(f"grad {k}", v.grad) for k, v in trainee.named_parameters() if v.grad is not None]
    tens += [(f"buffer {k}", v) for k, v in trainee.named_buffers()]
    tens += [(f"optimizer state {k}", v) for st in opt.state.values() for k, v in st.items()
             if isinstance(v, torch.Tensor) and v.dim() > 0]
    grads = sum(1 for _, p in trainee.lycoris.named_parameters() if p.grad is not None)
    nparams = sum(1 for _ in trainee.lycoris.parameters())
    elsewhere = [k for k, v in tens if v.device != device]
    out.append(("tensors on own device", not elsewhere and grads == nparams,
                f"{len(tens)} params/grads/buffers on {dev}, {grads}/{nparams} adapter grads"
                if not elsewhere and grads == nparams
                else f"{grads}/{nparams} adapter grads; elsewhere: {elsewhere[:4]}"))
    return out


def paths_summary(rec):
    c = collections.Counter(f"{r[0]}:{r[4]}/{r[5]}" for r in rec.rows)
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))


def _counting_backend(seen):
    """Inductor, counting the graphs it gets and the lyco op calls in them."""
    def backend(gm, inputs):
        from torch._inductor.compile_fx import compile_fx
        seen["graphs"] += 1
        seen["lyco"] += sum(1 for nd in gm.graph.nodes
                            if nd.op == "call_function" and "lyco" in str(nd.target))
        return compile_fx(gm, inputs)
    return backend


def primary_contexts():
    f = getattr(torch.cuda, "_primary_context_devices", None)
    if f is not None:
        return set(f())
    return {d for d in range(torch.cuda.device_count()) if torch._C._cuda_hasPrimaryContext(d)}


# ------------------------------------------------------------------------------------------------
# the workers
# ------------------------------------------------------------------------------------------------
def worker(rank, cfg, outdir):
    os.environ.update(ENV)
    cuda = cfg["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(rank)  # before anything touches CUDA
        ctx_start = primary_contexts()
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // WORLD))
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    kw = {"device_id": device} if cuda else {}
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(minutes=10), **kw)
    # warm the communicator up, so that contexts NCCL makes are there before training starts
    w = torch.ones(4, device=device)
    dist.all_reduce(w)
    if cuda:
        torch.cuda.synchronize(device)
        ctx_warm = primary_contexts()
    _lyco, LL, LO, _lycoris = _import_lyco()
    LL.enable()
    rec = Recorder(LO)
    half = cfg["batch"] // WORLD
    for algo in cfg["algos"]:
        t0 = time.time()
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        rec.clear()
        trainee = build(algo, cfg, device)
        ddp = DDP(trainee, device_ids=[rank] if cuda else None)
        seen = {"graphs": 0, "lyco": 0}
        fwd = torch.compile(ddp, backend=_counting_backend(seen)) if cfg["compile"] else ddp
        params = [p for p in trainee.parameters() if p.requires_grad]
        losses, opt = train(fwd, params, cfg, device, rank * half, (rank + 1) * half)
        if cuda:
            torch.cuda.synchronize(device)
        checks = check_run(LL, rec, trainee, cfg, device, rank, opt)
        if cfg["compile"]:
            from torch._dynamo.utils import counters
            breaks = sum(counters["graph_break"].values())
            n = len(LL.report(trainee.lycoris))
            checks.append(("compiled", seen["graphs"] >= 1 and seen["lyco"] >= n,
                           f"{seen['graphs']} graph(s) compiled by inductor holding {seen['lyco']} "
                           f"lyco op calls (want >= {n}); {breaks} graph break(s)"
                           + (" (" + "; ".join(sorted({r.split(chr(10))[0].strip()[:100]
                                                       for r in counters["graph_break"]})) + ")"
                              if breaks else "")))
        if cuda:
            others = [d for d in range(torch.cuda.device_count()) if d != rank]
            ctx_end = primary_contexts()  # before any query that might make a context
            mem = {d: (torch.cuda.memory_allocated(d), torch.cuda.max_memory_allocated(d))
                   for d in others}
            bad = {d: m for d, m in mem.items() if m != (0, 0)}
            checks.append(("no memory on other GPUs", not bad,
                           f"memory_allocated/max on {others} from rank {rank}: "
                           + ", ".join(f"cuda:{d} {m[0]}/{m[1]}" for d, m in mem.items())))
            new = sorted((ctx_end - ctx_warm) & set(others))
            pre = sorted(ctx_warm & set(others))
            checks.append(("no context on other GPUs", not new,
                           f"primary contexts at start {sorted(ctx_start)}, after NCCL warm-up "
                           f"{sorted(ctx_warm)}, after training {sorted(ctx_end)}"
                           + (f"; NOTE: context(s) on {pre} existed before training (not lyco's)"
                              if pre else "")))
        res = {"losses": losses, "params": adapter_state(trainee), "checks": checks,
               "paths": paths_summary(rec), "seconds": time.time() - t0}
        torch.save(res, os.path.join(outdir, f"{algo}.rank{rank}.pt"))
        if rank == 0:
            print(f"  [ddp] {algo}: {cfg['steps']} steps in {time.time() - t0:.1f} s", flush=True)
        del ddp, fwd, trainee, opt
    dist.barrier()
    dist.destroy_process_group()


def reference(cfg, algo, LL, rec):
    """The single-process run: the whole global batch, eager, on cuda:0 or cpu."""
    cuda = cfg["device"] == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    rec.clear()
    trainee = build(algo, cfg, device)
    start = adapter_state(trainee)
    params = [p for p in trainee.parameters() if p.requires_grad]
    losses, opt = train(trainee, params, cfg, device, 0, cfg["batch"])
    checks = check_run(LL, rec, trainee, cfg, device, 0, opt)
    end = adapter_state(trainee)
    still = [k for k in start if torch.equal(start[k], end[k])]
    moved = max(((end[k].double() - start[k].double()).abs().max().item()
                 / max(start[k].abs().max().item(), 1e-30)) for k in start)
    # pure bf16 SGD drops an update smaller than half an ulp of the weight, so in bf16 a few
    # tensors may legitimately stay put; most must move, and in fp32 every one
    ok = not still if cfg["dtype"] == "fp32" else 2 * len(still) <= len(start)
    checks.append(("training moved the adapter", ok,
                   f"{len(start) - len(still)}/{len(start)} tensors changed, largest change "
                   f"{moved:.2e} of max|p|" + (f"; unchanged: {still[:4]}" if still else "")))
    return {"losses": losses, "params": adapter_state(trainee), "checks": checks,
            "paths": paths_summary(rec)}


# ------------------------------------------------------------------------------------------------
# the comparison
# ------------------------------------------------------------------------------------------------
def compare(cfg, algo, ranks, ref):
    """[(name, ok, detail)] and a table row for one algorithm."""
    u, steps = U[cfg["dtype"]], cfg["steps"]
    out = []
    # replicas: DDP keeps the ranks' weights identical
    r0, r1 = ranks[0]["params"], ranks[1]["params"]
    diff = [k for k in ref["params"] if not torch.equal(r0[k], r1[k])]
    out.append(("replicas equal", not diff, "rank 0 and rank 1 adapter weights bitwise equal"
                if not diff else f"differ: {diff[:4]}"))
    # losses
    worst_l, worst_s, max_err = 0.0, 0, 0.0
    for s in range(steps):
        m = sum(r["losses"][s] for r in ranks) / len(ranks)
        r = ref["losses"][s]
        err = abs(m - r)
        budget = LOSS_K[cfg["dtype"]] * u * (1 + s) * max(1.0, abs(r))
        if err / budget > worst_l:
            worst_l, worst_s = err / budget, s
        max_err = max(max_err, err / max(1.0, abs(r)))
    out.append(("losses", worst_l <= 1.0,
                f"max rel err {max_err:.2e}; worst {worst_l:.3f}x budget (step {worst_s}); "
                f"loss {ref['losses'][0]:.4f} -> {ref['losses'][-1]:.4f}"))
    # weights
    worst_p, worst_k, max_rel, max_ulps = 0.0, "", 0.0, 0.0
    for k, pr in ref["params"].items():
        p = ranks[0]["params"][k].double()
        pr = pr.double()
        scale = pr.abs().max().item()
        err = (p - pr).abs().max().item()
        budget = PARAM_ULPS[cfg["dtype"]] * ulp(max(scale, 1e-30), cfg["dtype"])
        rel = err / max(scale, 1e-30)
        max_rel = max(max_rel, rel)
        max_ulps = max(max_ulps, err / ulp(max(scale, 1e-30), cfg["dtype"]))
        if err / budget > worst_p or not worst_k:
            worst_p, worst_k = err / budget, k
    out.append(("weights", worst_p <= 1.0,
                f"max err {max_rel:.2e} of max|p| ({max_ulps:.2f} ulp); worst {worst_p:.3f}x "
                f"budget ({worst_k})"))
    return out, (max_err, worst_l, max_rel, worst_p)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--algo", default=",".join(ALGOS))
    ap.add_argument("--batch", type=int, default=16, help="global batch (split across 2 ranks)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=0.2)
    a = ap.parse_args()
    algos = [s.strip() for s in a.algo.split(",") if s.strip()]
    cfg = {"device": a.device, "compile": a.compile, "steps": a.steps, "dtype": a.dtype,
           "algos": algos, "batch": a.batch, "seed": a.seed, "lr": a.lr}
    if a.batch % WORLD:
        ap.error(f"--batch {a.batch} does not split across {WORLD} ranks")
    print(f"ddp_lycoris: {WORLD} ranks, device {a.device}, dtype {a.dtype}, compile {a.compile}, "
          f"{a.steps} steps, global batch {a.batch}, algos {','.join(algos)}, seed {a.seed}")
    print(f"  torch {torch.__version__}; env " + " ".join(f"{k}={os.environ[k]}" for k in ENV)
          + f"; LYCO_LIBRARY={os.environ.get('LYCO_LIBRARY', '<unset>')}")
    if a.device == "cuda":
        # the parent touches CUDA only to count devices (no context is made) until the
        # workers have finished
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n < WORLD:
            print(f"FAIL: --device cuda needs {WORLD} GPUs, found {n}")
            return 1
        _cuda_numerics()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    outdir = tempfile.mkdtemp(prefix="ddp_lycoris.")
    failures = []
    try:
        t0 = time.time()
        import torch.multiprocessing as mp
        try:
            mp.spawn(_worker_entry, args=(cfg, outdir), nprocs=WORLD, join=True)
        except Exception as e:  # a worker raised: its traceback was printed by the worker
            print(f"FAIL: a DDP worker failed: {type(e).__name__}: {str(e).strip()[-2000:]}")
            return 1
        print(f"  [ddp] workers done in {time.time() - t0:.1f} s")
        if a.device == "cuda":
            torch.cuda.set_device(0)
        _lyco, LL, LO, lycoris = _import_lyco()
        try:
            import importlib.metadata as md
            lv = md.version("lycoris-lora")
        except Exception:
            lv = getattr(lycoris, "__version__", "?")
        print(f"  lyco {_lyco.version()} from {pathlib.Path(_lyco.__file__).parent}; lycoris-lora "
              f"{lv} from {pathlib.Path(lycoris.__file__).parent}")
        LL.enable()
        rec = Recorder(LO)
        rows = []
        for algo in algos:
            ranks = [torch.load(os.path.join(outdir, f"{algo}.rank{r}.pt"), weights_only=False)
                     for r in range(WORLD)]
            ref = reference(cfg, algo, LL, rec)
            checks = [(f"rank {r}: {n}", ok, d) for r, res in enumerate(ranks)
                      for n, ok, d in res["checks"]]
            checks += [(f"reference: {n}", ok, d) for n, ok, d in ref["checks"]]
            cmp_checks, nums = compare(cfg, algo, ranks, ref)
            checks += cmp_checks
            print(f"\n== {algo}")
            for n, ok, d in checks:
                print(f"  {'ok  ' if ok else 'FAIL'} {n}: {d}")
                if not ok:
                    failures.append(f"{algo}: {n}: {d}")
            for r, res in enumerate(ranks):
                print(f"  paths rank {r}: {res['paths']}")
            print(f"  paths reference: {ref['paths']}")
            rows.append((algo, nums, all(ok for _, ok, _ in checks)))
        u = U[a.dtype]
        print(f"\nbudgets ({a.dtype}, u = {u:.3g}): "
              f"loss <= {LOSS_K[a.dtype]:g}*u*(1+step)*max(1,|L|)"
              f" (= {LOSS_K[a.dtype] * u:.2e} rel. at step 0, {LOSS_K[a.dtype] * u * a.steps:.2e}"
              f" at step {a.steps - 1}); weights <= {PARAM_ULPS[a.dtype]} ulp_{a.dtype}(max|p_ref|)"
              f" per tensor")
        print(f"{'algo':<10} {'loss rel err':>13} {'x budget':>9} {'weight rel err':>15} "
              f"{'x budget':>9}  result")
        for algo, (le, lb, pe, pb), ok in rows:
            print(f"{algo:<10} {le:>13.2e} {lb:>9.3f} {pe:>15.2e} {pb:>9.3f}  "
                  f"{'PASS' if ok else 'FAIL'}")
    except Exception:
        traceback.print_exc()
        failures.append("exception in the parent (traceback above)")
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    what = (f"ddp_lycoris --device {a.device} --dtype {a.dtype}"
            f"{' --compile' if a.compile else ''} ({','.join(algos)}, {a.steps} steps)")
    if failures:
        print(f"\nFAIL: {what}: {len(failures)} check(s) failed:")
        for f in failures:
            print(f"  - {f}")
        return 1
    print(f"\nPASS: {what}: every check passed")
    return 0


def _cuda_numerics():
    """The base model's own ops (cuBLAS, cuDNN) at full precision in every process: no TF32 for
    fp32, no reduced-precision split-K reductions for bf16 (flags only; nothing touches CUDA)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False


def _worker_entry(rank, cfg, outdir):
    if cfg["device"] == "cuda":
        _cuda_numerics()
    try:
        worker(rank, cfg, outdir)
    except Exception:
        print(f"[rank {rank}] worker failed:\n{traceback.format_exc()}", flush=True)
        raise


if __name__ == "__main__":
    sys.exit(main())
