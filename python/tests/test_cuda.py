"""The binding on a CUDA device (skipped without one; NOT yet run: written in a session without
GPU time): the NUMERICS.md dtype table on device tensors, the current stream handed to lyco (a
side stream's work is ordered on that stream), CUDA-graph capture and replay of a forward and
backward, and the autocast-promoted fp32 activation into a bf16 4096² layer."""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import lyco  # noqa: E402
from test_dtypes import CASES  # noqa: E402

BF, F32 = torch.bfloat16, torch.float32
DEV = torch.device("cuda")


def _lora(O, I, r, dtype):
    d = (torch.randn(r, I, device=DEV) * 0.1).to(dtype).requires_grad_()
    u = (torch.randn(O, r, device=DEV) * 0.1).to(dtype).requires_grad_()
    return d, u


@pytest.mark.parametrize("x_dt,ad_dt,y0_dt,mode,out_dt", CASES)
def test_policy_table_cuda(seed, x_dt, ad_dt, y0_dt, mode, out_dt):
    O, I, r, N = 64, 96, 8, 24
    x = torch.randn(N, I, device=DEV).to(x_dt).requires_grad_()
    d, u = _lora(O, I, r, ad_dt)
    y0 = torch.randn(N, O, device=DEV).to(y0_dt) if y0_dt else None
    y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.linear(O, I), y0=y0,
                    output_mode=mode)
    assert y.dtype == out_dt and y.device.type == "cuda"
    y.float().sum().backward()
    assert x.grad.dtype == x_dt and d.grad.dtype == ad_dt
    ref = lyco.bypass(x.cpu(), {"lora_down": d.cpu(), "lora_up": u.cpu()}, lyco.linear(O, I),
                      y0=y0.cpu() if y0 is not None else None, output_mode=mode)
    torch.testing.assert_close(y.cpu().float(), ref.float(), rtol=2e-2, atol=2e-2)


def test_side_stream_and_graph_capture(seed):
    O, I, r = 256, 512, 16
    x = torch.randn(64, I, device=DEV, dtype=BF, requires_grad=True)
    d, u = _lora(O, I, r, F32)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up on a side stream, as graph capture requires
            y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.linear(O, I))
            y.sum().backward()
    torch.cuda.current_stream().wait_stream(s)
    expect = y.detach().clone()
    g = torch.cuda.CUDAGraph()
    d.grad = u.grad = x.grad = None
    with torch.cuda.graph(g):
        y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.linear(O, I))
        y.sum().backward()
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, expect)
    assert d.grad.dtype == F32 and x.grad.dtype == BF


def test_autocast_fp32_activation_bf16_llm_layer_cuda(seed):
    O = I = 4096
    base = torch.nn.Linear(I, O, bias=False, device=DEV, dtype=BF)
    d, u = _lora(O, I, 16, BF)
    h = torch.randn(4, 256, I, device=DEV, requires_grad=True)
    with torch.autocast("cuda", dtype=BF):
        x = torch.nn.functional.layer_norm(torch.square(h), (I,))
        y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.layer_of(base), y0=base(x))
    assert x.dtype == F32 and y.dtype == F32
    y.sum().backward()
    assert d.grad.dtype == BF and h.grad.dtype == F32 and torch.isfinite(h.grad).all()
