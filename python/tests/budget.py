"""The NUMERICS.md §2.7 budgets as one assertion: |y − r| ≤ 0.5·ulp_T(r) + c·ulp_T(rms r)
(+ c·sqrt(K)·ulp_32(rms r) for fp32 outputs, + an explicit term for intermediates the policy
rounds), with r the fp64 reference."""

import math

import torch

P = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24}
EMIN = {torch.float16: -14, torch.bfloat16: -126, torch.float32: -126}


def ulp(v, dtype):
    """ulp_T of each |v| (a float64 tensor), NUMERICS.md §2.2."""
    a = v.abs().clamp_min(1e-300)
    e = torch.floor(torch.log2(a)).clamp_min(EMIN[dtype])
    return torch.pow(2.0, e - P[dtype] + 1)


def check(name, y, ref, k=1, c=2.0, extra=0.0):
    """Assert y (any dtype) is within budget of the fp64 reference ref."""
    assert y.shape == ref.shape, f"{name}: shape {tuple(y.shape)}, expected {tuple(ref.shape)}"
    dt = y.dtype
    y64 = y.detach().double().cpu()
    r = ref.detach().double().cpu()
    assert torch.isfinite(y64).all(), f"{name}: non-finite values"
    rms = r.pow(2).mean().sqrt().item() if r.numel() else 0.0
    if rms == 0.0:
        assert (y64 == 0).all(), f"{name}: expected exact zeros"
        return
    u_rms = ulp(torch.tensor(rms, dtype=torch.float64), dt).item()
    tol = 0.5 * ulp(r, dt) + c * u_rms + extra
    if dt == torch.float32:
        tol = tol + c * math.sqrt(k) * u_rms
    err = (y64 - r).abs()
    worst = (err / tol).max().item()
    assert worst <= 1.0, (f"{name} ({dt}): worst error {err.max().item():.3g} is {worst:.2f}× "
                          f"the budget (rms {rms:.3g}, K {k})")
