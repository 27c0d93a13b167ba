"""LoRA/LoCon through the torch custom ops on the CPU: bypass and merge, forward and backward,
Linear and Conv2d, against an fp64 torch reference within the NUMERICS.md budgets; the ops pass
torch.library.opcheck (fake impl, autograd registration); inputs are never modified."""

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import lyco  # noqa: E402
from budget import check  # noqa: E402

DT = [torch.float32, torch.bfloat16, torch.float16]


def _linear_ref(x, d, u, s):
    return (x.double() @ d.double().T @ u.double().T) * s


@pytest.mark.parametrize("dtype", DT)
def test_linear_bypass_fwd_bwd(seed, dtype):
    O, I, r, N = 48, 96, 8, 40
    x = torch.randn(4, N // 4, I).to(dtype).requires_grad_()
    d = (torch.randn(r, I) * 0.3).to(dtype).requires_grad_()
    u = (torch.randn(O, r) * 0.3).to(dtype).requires_grad_()
    y0 = torch.randn(4, N // 4, O).to(dtype).requires_grad_()
    keep = [t.detach().clone() for t in (x, d, u, y0)]
    y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.linear(O, I), y0=y0, alpha=4.0)
    s = 4.0 / r
    h = (x.double() @ d.double().T)
    # the policy rounds h to the compute dtype before the second product (NUMERICS.md §1.6)
    chain = 0.0 if dtype == torch.float32 else (
        0.5 * h.abs().max().item() * 2.0 ** -(7 if dtype == torch.bfloat16 else 10)
        * s * u.double().abs().sum(1).max().item())
    check("y", y, y0.double() + _linear_ref(x, d, u, s), k=I, extra=chain)
    dy = torch.randn_like(y)
    y.backward(dy)
    xd, dd, ud, dy64 = x.double(), d.double(), u.double(), dy.double()
    g_h = dy64.reshape(-1, O) @ ud * s
    chain_dx = 0.0 if dtype == torch.float32 else (
        0.5 * g_h.abs().max().item() * 2.0 ** -(7 if dtype == torch.bfloat16 else 10)
        * dd.abs().sum(0).max().item())
    check("dx", x.grad, (g_h @ dd).reshape(x.shape), k=O + r, extra=chain_dx)
    check("d down", d.grad, g_h.T @ xd.reshape(-1, I), k=N, c=8)
    check("d up", u.grad, dy64.reshape(-1, O).T @ (xd.reshape(-1, I) @ dd.T) * s, k=N, c=8)
    assert torch.equal(y0.grad, dy)
    for t, k in zip((x, d, u, y0), keep):
        assert torch.equal(t.detach(), k), "an input was modified"
    for t in (x, d, u, y0):
        assert t.grad.dtype == dtype


def test_linear_strided_inputs(seed):
    O, I, r = 32, 64, 4
    x = torch.randn(64, 10).T  # non-contiguous (10, 64)
    d = torch.randn(64, r).T  # non-contiguous (r, 64)
    u = torch.randn(O, 2 * r)[:, ::2]  # stride-2 columns
    y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.linear(O, I))
    check("y", y, _linear_ref(x, d, u, 1.0), k=I)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv2d_bypass_and_merge(seed, dtype):
    O, I, r, k = 16, 8, 4, 3
    conv = torch.nn.Conv2d(I, O, k, stride=2, padding=1)
    x = torch.randn(2, I, 9, 9).to(dtype).requires_grad_()
    d = (torch.randn(r, I, k, k) * 0.3).to(dtype).requires_grad_()
    u = (torch.randn(O, r, 1, 1) * 0.3).to(dtype).requires_grad_()
    lay = lyco.layer_of(conv)
    y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lay, alpha=2.0)
    s = 2.0 / r
    ref = F.conv2d(F.conv2d(x.double(), d.double(), stride=2, padding=1), u.double()) * s
    h = F.conv2d(x.double(), d.double(), stride=2, padding=1)
    chain = 0.0 if dtype == torch.float32 else (
        0.5 * h.abs().max().item() * 2.0 ** -7 * s * u.double().abs().sum(1).max().item())
    check("conv y", y, ref, k=I * k * k, extra=chain)
    dw = lyco.merge({"lora_down": d, "lora_up": u}, lay, alpha=2.0)
    check("conv ΔW", dw, (u.double().flatten(1) @ d.double().flatten(1)).reshape(O, I, k, k) * s,
          k=r)
    g = torch.randn_like(dw)
    dw.backward(g)
    gd = (u.double().flatten(1).T @ g.double().flatten(1)).reshape(d.shape) * s
    check("merge d down", d.grad, gd, k=O, c=4)


@pytest.mark.parametrize("mode", ["delta", "weight", "unmerge"])
def test_linear_merge_modes(seed, mode):
    O, I, r = 24, 40, 6
    W = torch.randn(O, I)
    d = torch.randn(r, I, requires_grad=True)
    u = torch.randn(O, r, requires_grad=True)
    out = lyco.merge({"lora_down": d, "lora_up": u}, lyco.linear(O, I), weight=W, mode=mode,
                     alpha=3.0, multiplier=0.5)
    delta = (u.double() @ d.double()) * (3.0 / r) * 0.5
    ref = {"delta": delta, "weight": W.double() + delta, "unmerge": W.double() - delta}[mode]
    check(mode, out, ref, k=r)


def test_opcheck_bypass_and_merge(seed):
    O, I, r = 16, 24, 4
    x = torch.randn(5, I, requires_grad=True)
    d = torch.randn(r, I, requires_grad=True)
    u = torch.randn(O, r, requires_grad=True)
    spec = lyco.make_spec("locon", lyco.linear(O, I), ["lora_down", "lora_up"], alpha=2.0)
    torch.library.opcheck(torch.ops.lyco.bypass_fwd, (spec, x, None, None, [d, u]))
    y0 = torch.randn(5, O, requires_grad=True)
    torch.library.opcheck(torch.ops.lyco.bypass_fwd, (spec, x, y0, None, [d, u]))
    mspec = lyco.make_spec("locon", lyco.linear(O, I), ["lora_down", "lora_up"], alpha=2.0)
    torch.library.opcheck(torch.ops.lyco.merge_fwd, (mspec, None, None, [d, u]))


def test_bad_arguments_are_named():
    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match="algo is 'lorra'"):
        lyco.bypass(x, {"lora_down": torch.randn(2, 8), "lora_up": torch.randn(4, 2)},
                    lyco.linear(4, 8), algo="lorra")
    with pytest.raises(ValueError, match="slot 'lora_dwn'"):
        lyco.bypass(x, {"lora_dwn": torch.randn(2, 8)}, lyco.linear(4, 8))
    with pytest.raises(TypeError, match="lora_down is torch.float64"):
        lyco.bypass(x, {"lora_down": torch.randn(2, 8).double(), "lora_up": torch.randn(4, 2)},
                    lyco.linear(4, 8))
    with pytest.raises(lyco.LycoShapeError, match="lora_down"):
        lyco.bypass(x, {"lora_down": torch.randn(2, 9), "lora_up": torch.randn(4, 2)},
                    lyco.linear(4, 8))
