"""The dtype cases the seed documents were written about (NUMERICS.md §1 table), through the torch
ops on the CPU: output dtype per output mode, gradient dtype per leaf, values within budget of an
fp64 reference, autocast-promoted fp32 activations at an LLM layer size, and fp16 with bf16 as a
clear Python error naming both tensors."""

import pytest

torch = pytest.importorskip("torch")

import lyco  # noqa: E402
from budget import check  # noqa: E402

BF, HF, F32 = torch.bfloat16, torch.float16, torch.float32


def _run(x_dt, ad_dt, y0_dt, mode, O=64, I=96, r=8, N=24):
    x = torch.randn(N, I).to(x_dt).requires_grad_()
    d = (torch.randn(r, I) * 0.2).to(ad_dt).requires_grad_()
    u = (torch.randn(O, r) * 0.2).to(ad_dt).requires_grad_()
    y0 = torch.randn(N, O).to(y0_dt).requires_grad_() if y0_dt else None
    y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.linear(O, I), y0=y0, alpha=r,
                    output_mode=mode)
    y.float().square().sum().backward()
    return x, d, u, y0, y


# (x, adapter, y0, mode) -> output dtype, NUMERICS.md §1 table
CASES = [
    (BF, BF, BF, "promote", BF), (HF, HF, HF, "promote", HF), (F32, F32, F32, "promote", F32),
    (BF, F32, BF, "promote", F32), (BF, F32, BF, "base", BF),
    (HF, F32, HF, "promote", F32), (HF, F32, HF, "base", HF),
    (F32, BF, BF, "promote", F32), (F32, BF, BF, "base", BF), (F32, BF, None, "base", F32),
    (F32, HF, HF, "promote", F32), (F32, HF, HF, "base", HF),
]


@pytest.mark.parametrize("x_dt,ad_dt,y0_dt,mode,out_dt", CASES)
def test_policy_table(seed, x_dt, ad_dt, y0_dt, mode, out_dt):
    x, d, u, y0, y = _run(x_dt, ad_dt, y0_dt, mode)
    assert y.dtype == out_dt
    assert x.grad.dtype == x_dt and d.grad.dtype == ad_dt and u.grad.dtype == ad_dt
    if y0 is not None:
        assert y0.grad.dtype == y0_dt
    # values: the fp64 reference of the operands as given, rounded at the compute dtype's
    # intermediate; a 16-bit output gets its own element rounding, an fp32 output the
    # compute dtype's rounding of the operands (budget in compute-dtype ulps)
    compute = next((t for t in (x_dt, ad_dt, y0_dt) if t in (BF, HF)), F32)
    xd, dd, ud = (t.detach().to(compute).double() for t in (x, d, u))
    ref = xd @ dd.T @ ud.T
    if y0 is not None:
        ref = ref + y0.detach().double()
    h = xd @ dd.T
    chain = 0.0 if compute == F32 else (0.5 * h.abs().max().item() * 2.0 ** (-7 if compute == BF else -10)
                                        * ud.abs().sum(1).max().item())
    check("y", y.to(compute) if y.dtype == F32 and compute != F32 else y, ref, k=96, extra=chain)


def test_master_adapter_over_bf16_base_module(seed):
    """An fp32 LoRA over a bf16 Linear: y0 from the bf16 layer, fp32 adapter grads, bf16 dx."""
    base = torch.nn.Linear(128, 64).to(BF)
    d = (torch.randn(8, 128) * 0.1).requires_grad_()
    u = (torch.randn(64, 8) * 0.1).requires_grad_()
    x = torch.randn(4, 16, 128, dtype=BF, requires_grad=True)
    for mode, out in (("promote", F32), ("base", BF)):
        y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.layer_of(base), y0=base(x),
                        output_mode=mode)
        assert y.dtype == out
        y.sum().backward()
        assert d.grad.dtype == F32 and u.grad.dtype == F32 and x.grad.dtype == BF
        d.grad = u.grad = x.grad = None


def test_autocast_promoted_fp32_activation_llm_size(seed):
    """fp32 activations (an fp32 norm, torch.square under autocast) into a bf16 4096×4096 layer:
    no dtype error, no resource failure, the policy's output dtype, bf16 adapter grads."""
    O = I = 4096
    base = torch.nn.Linear(I, O, bias=False).to(BF)
    d = (torch.randn(16, I) * 0.01).to(BF).requires_grad_()
    u = (torch.randn(O, 16) * 0.01).to(BF).requires_grad_()
    h = torch.randn(2, 8, I, requires_grad=True)
    with torch.autocast("cpu", dtype=BF):
        x = torch.nn.functional.layer_norm(torch.square(h), (I,))  # fp32 under autocast
        assert x.dtype == F32
        y0 = base(x)
        assert y0.dtype == BF
        y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.layer_of(base), y0=y0)
        yb = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.layer_of(base), y0=y0,
                         output_mode="base")
    assert y.dtype == F32 and yb.dtype == BF
    (y.sum() + yb.float().sum()).backward()
    assert d.grad.dtype == BF and u.grad.dtype == BF and h.grad.dtype == F32
    assert torch.isfinite(h.grad).all()


def test_fp32_activation_into_fp16_weights(seed):
    x, d, u, y0, y = _run(F32, HF, HF, "promote")
    assert y.dtype == F32 and x.grad.dtype == F32 and d.grad.dtype == HF


@pytest.mark.parametrize("x_dt,ad_dt", [(HF, BF), (BF, HF)])
def test_fp16_with_bf16_is_a_clear_error(x_dt, ad_dt):
    x = torch.randn(4, 32).to(x_dt)
    d, u = torch.randn(2, 32).to(ad_dt), torch.randn(8, 2).to(ad_dt)
    with pytest.raises(lyco.LycoDtypeError) as e:
        lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.linear(8, 32))
    msg = str(e.value)
    names = {HF: "fp16", BF: "bf16"}
    assert f"x is {names[x_dt]}" in msg and f"lora_down is {names[ad_dt]}" in msg, msg
    assert isinstance(e.value, TypeError)
    with pytest.raises(lyco.LycoDtypeError, match="fp16 and bf16"):
        lyco.merge({"lora_down": torch.randn(2, 32).to(HF), "lora_up": torch.randn(8, 2).to(BF)},
                   lyco.linear(8, 32))
