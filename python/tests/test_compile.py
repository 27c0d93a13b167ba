"""torch.compile over a model that calls lyco's ops: fullgraph (no graph breaks), one compile for
several layers of different shapes (no recompiling per layer), same values and gradients as eager."""

import pytest

torch = pytest.importorskip("torch")

import lyco  # noqa: E402


class LoRALinear(torch.nn.Module):
    def __init__(self, i, o, r):
        super().__init__()
        self.base = torch.nn.Linear(i, o)
        self.down = torch.nn.Parameter(torch.randn(r, i) * 0.1)
        self.up = torch.nn.Parameter(torch.randn(o, r) * 0.1)
        self.layer = lyco.layer_of(self.base)

    def forward(self, x):
        return lyco.bypass(x, {"lora_down": self.down, "lora_up": self.up}, self.layer,
                           y0=self.base(x), alpha=2.0)


class LoRAConv(torch.nn.Module):
    def __init__(self, i, o, r):
        super().__init__()
        self.base = torch.nn.Conv2d(i, o, 3, padding=1)
        self.down = torch.nn.Parameter(torch.randn(r, i, 3, 3) * 0.1)
        self.up = torch.nn.Parameter(torch.randn(o, r, 1, 1) * 0.1)
        self.layer = lyco.layer_of(self.base)

    def forward(self, x):
        # merge path for the conv: W + ΔW through lyco::merge_fwd, then the base conv
        w = lyco.merge({"lora_down": self.down, "lora_up": self.up}, self.layer,
                       weight=self.base.weight, mode="weight")
        return torch.nn.functional.conv2d(x, w, self.base.bias, padding=1)


def _model():
    return torch.nn.Sequential(LoRAConv(3, 8, 2), torch.nn.Flatten(), LoRALinear(8 * 36, 64, 4),
                               torch.nn.ReLU(), LoRALinear(64, 32, 8), torch.nn.ReLU(),
                               LoRALinear(32, 10, 2))


def test_compile_fullgraph_matches_eager(seed):
    torch._dynamo.reset()
    model = _model()
    x = torch.randn(4, 3, 6, 6)
    ref = model(x)
    ref.square().sum().backward()
    g_ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    counts = {"frames": 0}

    def backend(gm, inputs):
        counts["frames"] += 1
        from torch._inductor.compile_fx import compile_fx
        return compile_fx(gm, inputs)

    cmodel = torch.compile(model, fullgraph=True, backend=backend)
    out = cmodel(x)
    out.square().sum().backward()
    out2 = cmodel(x)  # a second call must not recompile
    assert counts["frames"] == 1
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out2, ref, rtol=1e-5, atol=1e-5)
    for p, g in zip(model.parameters(), g_ref):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)
