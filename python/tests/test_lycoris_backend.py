"""lyco as LyCORIS 4.x's kernel backend: a small model with Conv2d and Linear layers wrapped by
create_lycoris for every algorithm, 20 optimizer steps with lyco on and off from the same start;
the losses and the final gradients agree within fp32 budgets. On the CPU, and on the GPU when
there is one (the same model moved to cuda; TF32 off in cuDNN and cuBLAS so the off run is fp32
too). Modules lyco declines run LyCORIS's own path and are reported once. The same with
torch.compile on (CPU and GPU)."""

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lycoris")

import lyco.lycoris as LL  # noqa: E402
from lycoris import LycorisNetwork, create_lycoris  # noqa: E402

ALGOS = ["lora", "locon", "loha", "lokr", "diag-oft", "boft", "ia3", "glora", "dylora", "full"]
ROUTED = {"lora", "locon", "loha", "lokr", "diag-oft", "boft", "ia3", "glora"}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.fc1 = torch.nn.Linear(8 * 16, 32)
        self.fc2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        h = torch.relu(self.conv(x)).flatten(1)
        return self.fc2(torch.relu(self.fc1(h)))


def _build(algo, seed, device="cpu"):
    torch.manual_seed(seed)
    model = Net()
    for p in model.parameters():
        p.requires_grad_(False)
    LycorisNetwork.apply_preset({"target_module": ["Linear", "Conv2d"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = create_lycoris(model, 1.0, linear_dim=4, linear_alpha=2, algo=algo)
    net.apply_to()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # non-zero factors everywhere, so no gradient is trivially zero
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    model.to(device)
    net.to(device)
    return model, net


def _train(model, net, on, steps, seed, compile_=False, device="cpu"):
    (LL.enable if on else LL.disable)()
    try:
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        fwd = torch.compile(model, fullgraph=compile_ == "fullgraph") if compile_ else model
        g = torch.Generator().manual_seed(seed + 2)
        losses = []
        for _ in range(steps):
            x = torch.randn(8, 4, 4, 4, generator=g).to(device)
            t = torch.randint(0, 16, (8,), generator=g).to(device)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(fwd(x), t)
            loss.backward()
            grads = [p.grad.clone() for p in net.parameters()]
            opt.step()
            losses.append(loss.item())
        return losses, grads
    finally:
        LL.disable()


def _compare(algo, seed, compile_, device="cpu"):
    model, net = _build(algo, seed, device)
    model_b, net_b = _build(algo, seed, device)
    off, g_off = _train(model, net, False, 20, seed, device=device)
    on, g_on = _train(model_b, net_b, True, 20, seed, compile_, device)
    for i, (a, b) in enumerate(zip(off, on)):
        assert abs(a - b) <= 1e-5 * (1 + i) * max(1.0, abs(a)), f"{algo} step {i}: {a} vs {b}"
    for a, b in zip(g_off, g_on):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5 * max(1.0, a.abs().max().item()))
    return net_b


@pytest.fixture
def fp32_matmuls():
    """TF32 off for the test's duration (cuDNN convolutions default to TF32 on the GPU)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algo", ALGOS)
def test_train_on_vs_off(seed, algo, device, fp32_matmuls):
    net = _compare(algo, seed, False, device)
    rep = LL.report(net)
    assert rep, "no LyCORIS modules were created"
    if algo in ROUTED:
        assert set(rep.values()) == {"lyco"}, rep
    else:
        assert all(v != "lyco" for v in rep.values())
        assert any(cls for cls, _ in LL.fallbacks), "the fallback was not reported"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algo", ALGOS)
def test_train_on_vs_off_compiled(seed, algo, device, fp32_matmuls):
    torch._dynamo.reset()
    # modules lyco takes must trace without a graph break; declined ones run LyCORIS's own code
    _compare(algo, seed, "fullgraph" if algo in ROUTED else True, device)


def test_fallback_reported_once(seed):
    model, net = _build("dylora", seed)
    LL.enable()
    try:
        LL._reported.clear()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(3):
                model(torch.randn(2, 4, 4, 4))
        msgs = [str(x.message) for x in w if "LyCORIS's own path" in str(x.message)]
        assert len(msgs) == 1 and "DyLora" in msgs[0], msgs
    finally:
        LL.disable()


VARIANTS = [
    ("lora", {"use_tucker": True, "use_scalar": True}),
    ("loha", {"use_tucker": True, "use_scalar": True}),
    ("lokr", {"decompose_both": True, "factor": 4}),
    ("lokr", {"use_tucker": True, "factor": 2}),
    ("diag-oft", {"rescaled": True, "constraint": 1e-4}),
    ("boft", {"rescaled": True}),
    ("lora", {"module_dropout": 0.5}),
    ("glora", {"use_scalar": True}),
    ("ia3", {}),
]
DORA = [{"dora_wd": True},                                          # output axis
        {"dora_wd": True, "wd_on_output": False, "use_scalar": True},  # input axis, σs
        {"dora_wd": True, "use_tucker": True}]                          # Tucker (the Conv2d module)


@pytest.mark.parametrize("algo,kw", VARIANTS, ids=[f"{a}-{'-'.join(k)}" for a, k in VARIANTS])
@pytest.mark.parametrize("multiplier", [1.0, 0.7])
def test_variants_on_vs_off(seed, algo, kw, multiplier):
    """Tucker, trainable scalar, LoKr factorisations, OFT rescale/constraint, module dropout and
    a multiplier ≠ 1: one forward+backward with lyco on and off from the same start and RNG."""
    _variant_on_vs_off(seed, algo, kw, multiplier, "cpu")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", DORA, ids=["out", "in-scalar", "tucker"])
@pytest.mark.parametrize("multiplier", [1.0, 0.7])
@pytest.mark.parametrize("algo", ["locon", "loha", "lokr"])
def test_dora_on_vs_off(seed, algo, kw, multiplier, device, fp32_matmuls):
    """LoCon, LoHa and LoKr with DoRA (dora_wd) on both axes and with Tucker, Linear and Conv2d
    modules: lyco's fused bypass against LyCORIS's merge-form forward."""
    _variant_on_vs_off(seed, algo, kw, multiplier, device)


def _variant_on_vs_off(seed, algo, kw, multiplier, device):
    outs = []
    for on in (False, True):
        torch.manual_seed(seed)
        model = Net()
        for p in model.parameters():
            p.requires_grad_(False)
        LycorisNetwork.apply_preset({"target_module": ["Linear", "Conv2d"]})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net = create_lycoris(model, multiplier, linear_dim=2, linear_alpha=1, algo=algo, **kw)
        net.apply_to()
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for p in net.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
        model.to(device)
        net.to(device)
        (LL.enable if on else LL.disable)()
        try:
            if on:
                rep = LL.report(net)
                assert set(rep.values()) == {"lyco"}, rep
            torch.manual_seed(seed + 3)  # the same module-dropout draws
            x = torch.randn(4, 4, 4, 4, generator=g).to(device)
            y = model(x)
            if y.requires_grad:  # module dropout may have dropped every adapter
                y.square().sum().backward()
        finally:
            LL.disable()
        outs.append((y.detach(), [p.grad for p in net.parameters()]))
    (y_off, g_off), (y_on, g_on) = outs
    torch.testing.assert_close(y_on, y_off, rtol=1e-5, atol=1e-5 * max(1.0, y_off.abs().max().item()))
    for a, b in zip(g_off, g_on):
        assert (a is None) == (b is None), "a module was dropped on one side only"
        if a is not None:
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5 * max(1.0, a.abs().max().item()))
