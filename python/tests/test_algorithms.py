"""Every algorithm through the torch ops on the CPU: bypass and merge, forward and backward, with
the fused cpu backend (auto) against the library's fp64 oracle (backend "ref") on the same fp32
inputs; this checks the binding's plumbing (slots, hyper-parameters, gradient routing) for each
algorithm, the numerics being the C tests' business."""

import pytest

torch = pytest.importorskip("torch")

import lyco  # noqa: E402

O, I, R, N = 16, 24, 4, 6


def _t(*shape, scale=0.3):
    return (torch.randn(*shape) * scale).requires_grad_()


def _cases():
    return {
        "locon": ({"lora_down": _t(R, I), "lora_up": _t(O, R)}, {"alpha": 2.0}),
        "loha": ({"hada_w1_a": _t(O, R), "hada_w1_b": _t(R, I), "hada_w2_a": _t(O, R),
                  "hada_w2_b": _t(R, I)}, {"alpha": 2.0}),
        "lokr": ({"lokr_w1": _t(4, 4), "lokr_w2": _t(4, 6)}, {}),
        "diag_oft": ({"oft_blocks": _t(4, 4, 4, scale=0.1)}, {}),
        "boft": ({"oft_blocks": _t(2, 8, 2, 2, scale=0.1)}, {}),
        "ia3": ({"ia3_weight": _t(O)}, {}),
        "glora": ({"glora_a1": _t(I, R), "glora_a2": _t(R, I), "glora_b1": _t(O, R),
                   "glora_b2": _t(R, I)}, {"alpha": 2.0}),
        "dylora": ({"lora_down": _t(R, I), "lora_up": _t(O, R)},
                   {"alpha": 2.0, "dylora_block_size": 1, "dylora_active_blocks": 3}),
        "full": ({"diff": _t(O, I)}, {}),
    }


NEEDS_Y0 = {"diag_oft", "boft", "ia3"}
NEEDS_W = {"glora"}


def _grads(out, leaves):
    g = torch.randn_like(out)
    return torch.autograd.grad(out, leaves, g, allow_unused=True), g


@pytest.mark.parametrize("algo", list(_cases()))
def test_bypass_cpu_vs_oracle(seed, algo):
    tensors, hyper = _cases()[algo]
    x = _t(N, I, scale=1.0)
    W = torch.randn(O, I) * 0.2
    y0 = (x.detach() @ W.T).requires_grad_() if algo in NEEDS_Y0 else None
    w = W if algo in NEEDS_W else None
    leaves = [x] + list(tensors.values()) + ([y0] if y0 is not None else [])
    res = []
    for backend in ("auto", "ref"):
        torch.manual_seed(seed)
        y = lyco.bypass(x, tensors, lyco.linear(O, I), algo=algo, y0=y0, weight=w,
                        backend=backend, **hyper)
        g = torch.randn_like(y)
        res.append((y.detach(), torch.autograd.grad(y, leaves, g, allow_unused=True)))
    (y_a, g_a), (y_r, g_r) = res
    tol = dict(rtol=1e-4, atol=1e-5 * max(1.0, y_r.abs().max().item()))
    torch.testing.assert_close(y_a, y_r, **tol)
    for name, a, r in zip(["x"] + list(tensors) + ["y0"], g_a, g_r):
        assert (a is None) == (r is None), name
        if r is not None:
            torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5 * max(1.0, r.abs().max().item()),
                                       msg=lambda m: f"{algo} grad {name}: {m}")


@pytest.mark.parametrize("algo", list(_cases()))
def test_merge_cpu_vs_oracle(seed, algo):
    tensors, hyper = _cases()[algo]
    W = torch.randn(O, I) * 0.2
    mode = "weight" if algo in ("diag_oft", "boft", "ia3", "glora") else "delta"
    leaves = list(tensors.values())
    res = []
    for backend in ("auto", "ref"):
        torch.manual_seed(seed)
        out = lyco.merge(tensors, lyco.linear(O, I), algo=algo, weight=W, mode=mode,
                         backend=backend, **hyper)
        g = torch.randn_like(out)
        res.append((out.detach(), torch.autograd.grad(out, leaves, g)))
    (o_a, g_a), (o_r, g_r) = res
    torch.testing.assert_close(o_a, o_r, rtol=1e-4, atol=1e-5 * max(1.0, o_r.abs().max().item()))
    for name, a, r in zip(tensors, g_a, g_r):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5 * max(1.0, r.abs().max().item()),
                                   msg=lambda m: f"{algo} grad {name}: {m}")


Y0_VARIANTS = [(a, {}) for a in _cases()] + [("ia3", {"ia3_on_input": 1})]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("algo,extra", Y0_VARIANTS, ids=[a + ("-in" if e else "") for a, e in Y0_VARIANTS])
def test_y0_gradient_without_copy(seed, algo, extra, dtype, monkeypatch):
    """The backward returns dy itself as y0's gradient where ops._dy0_is_dy allows it (additive
    bypasses): bit for bit what the op writes as dy0 when asked (the shortcut switched off)."""
    from lyco import ops
    tensors, hyper = _cases()[algo]
    if extra:  # IA3 on the input: one scale per input channel
        tensors = {"ia3_weight": _t(I)}
    tensors = {k: v.detach().to(dtype).requires_grad_() for k, v in tensors.items()}
    x = torch.randn(N, I).to(dtype).requires_grad_()
    W = (torch.randn(O, I) * 0.2).to(dtype)
    y0 = (x.detach() @ W.T).requires_grad_()
    w = W if algo in NEEDS_W or extra else None
    y = lyco.bypass(x, tensors, lyco.linear(O, I), algo=algo, y0=y0, weight=w, **hyper, **extra)
    g = torch.randn_like(y)
    (fast,) = torch.autograd.grad(y, [y0], g, retain_graph=True)
    monkeypatch.setattr(ops, "_dy0_is_dy", lambda *a: False)
    (slow,) = torch.autograd.grad(y, [y0], g)
    assert fast.dtype == slow.dtype == y0.dtype
    assert torch.equal(fast, slow), f"{algo}: y0's gradient differs from the op's dy0"
    shortcut = algo not in ("diag_oft", "boft") and (algo != "ia3" or bool(extra))
    assert (fast.data_ptr() == g.data_ptr()) == shortcut, "the shortcut was (not) taken"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_norm_y0_gradient_without_copy(seed, dtype, monkeypatch):
    """Norm's bypass adds to y0 too: its y0 gradient is dy itself, bit for bit the op's dy0."""
    from lyco import ops
    C = 12
    x = torch.randn(5, C).to(dtype).requires_grad_()
    wn, bn = torch.randn(C).to(dtype).requires_grad_(), torch.randn(C).to(dtype).requires_grad_()
    y0 = torch.randn(5, C).to(dtype).requires_grad_()
    y = lyco.bypass(x, {"w_norm": wn, "b_norm": bn}, lyco.norm(C, "layer", 0, 1e-5), algo="norm", y0=y0)
    g = torch.randn_like(y)
    (fast,) = torch.autograd.grad(y, [y0], g, retain_graph=True)
    monkeypatch.setattr(ops, "_dy0_is_dy", lambda *a: False)
    (slow,) = torch.autograd.grad(y, [y0], g)
    assert torch.equal(fast, slow) and fast.data_ptr() == g.data_ptr()


def test_norm_bypass_and_merge(seed):
    C = 12
    x = _t(5, C, scale=1.0)
    wn, bn = _t(C), _t(C)
    lay = lyco.norm(C, "layer", 0, 1e-5)
    gamma, beta = torch.randn(C), torch.randn(C)
    res = []
    for backend in ("auto", "ref"):
        torch.manual_seed(seed)
        y0 = torch.nn.functional.layer_norm(x, (C,), gamma, beta)
        y = lyco.bypass(x, {"w_norm": wn, "b_norm": bn}, lay, algo="norm", y0=y0, backend=backend)
        out, ob = lyco.merge({"w_norm": wn, "b_norm": bn}, lay, algo="norm", weight=gamma,
                             bias=beta, mode="weight", backend=backend)
        s = y.square().sum() + out.square().sum() + ob.square().sum()
        res.append((y.detach(), out.detach(), ob.detach(), torch.autograd.grad(s, [x, wn, bn])))
    for a, r in zip(res[0][:3] + tuple(res[0][3]), res[1][:3] + tuple(res[1][3])):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5 * max(1.0, r.abs().max().item()))


def test_call_site_backend_and_env(seed, monkeypatch):
    """backend= picks the path per call; 'auto' after an explicit choice goes back to
    LYCO_BACKEND (the process-wide choice), not to the previous call's backend."""
    from lyco import _capi as C
    x, d, u = torch.randn(6, I), torch.randn(R, I), torch.randn(O, R)
    run = lambda b: (lyco.bypass(x, {"lora_down": d, "lora_up": u}, lyco.linear(O, I), backend=b),  # noqa: E731
                     C.context().last_path()[0])[1]
    assert run("ref") == "ref"
    assert run("auto") == "fused"
    monkeypatch.setenv("LYCO_BACKEND", "eager")
    assert run("ref") == "ref"
    assert run("auto") == "eager"
    monkeypatch.delenv("LYCO_BACKEND")
    assert run("auto") == "fused"
