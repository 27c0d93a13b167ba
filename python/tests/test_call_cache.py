"""The binding's per-call caches (lyco/ops.py: call frames per signature, spec strings, adapter
templates, output dtypes) change no result: a second call of one signature with other data
gives what a fresh process would (compared with a call whose signature is new, and with the
plain torch formula), a changed stride or dtype builds a new frame, errors raise on every call,
and make_spec keeps 2 and 2.0 apart. Needs torch."""

import pytest

torch = pytest.importorskip("torch", reason="the call caches belong to the torch ops")
lyco = pytest.importorskip("lyco")
from lyco import ops  # noqa: E402


def _lora(O, I, r, dtype=torch.float32):
    return torch.randn(r, I, dtype=dtype) / I ** 0.5, torch.randn(O, r, dtype=dtype) / r ** 0.5


def test_same_signature_other_data(seed):
    layer = lyco.linear(12, 10)
    for _ in range(3):  # the first call builds the frame, the others reuse it
        d, u = _lora(12, 10, 3)
        x = torch.randn(5, 10)
        dw = lyco.merge({"lora_down": d, "lora_up": u}, layer, alpha=3.0)
        torch.testing.assert_close(dw, u @ d, rtol=1e-5, atol=1e-5)
        y = lyco.bypass(x, {"lora_down": d, "lora_up": u}, layer, alpha=3.0)
        torch.testing.assert_close(y, x @ (u @ d).T, rtol=1e-5, atol=1e-5)


def test_new_strides_and_dtypes_get_their_own_frame(seed):
    layer = lyco.linear(8, 6)
    d, u = _lora(8, 6, 2)
    x = torch.randn(6, 4).T  # transposed: other strides than a contiguous (4, 6)
    ref = x @ (u @ d).T
    for xx in (x.contiguous(), x, x.contiguous()):
        torch.testing.assert_close(lyco.bypass(xx, {"lora_down": d, "lora_up": u}, layer, alpha=2.0),
                                   ref, rtol=1e-5, atol=1e-5)
    y16 = lyco.bypass(x.to(torch.bfloat16), {"lora_down": d.bfloat16(), "lora_up": u.bfloat16()},
                      layer, alpha=2.0)
    assert y16.dtype == torch.bfloat16
    torch.testing.assert_close(y16.float(), ref, rtol=3e-2, atol=3e-2)


def test_errors_raise_every_time():
    layer = lyco.linear(8, 6)
    d, u = _lora(8, 6, 2)
    for _ in range(2):
        with pytest.raises(lyco.LycoDtypeError):
            lyco.merge({"lora_down": d.half(), "lora_up": u.bfloat16()}, layer)
        with pytest.raises(TypeError):
            lyco.merge({"lora_down": d.double(), "lora_up": u.double()}, layer)
        with pytest.raises(TypeError):
            lyco.merge({"lora_down": d, "lora_up": u}, layer, alhpa=1.0)


def test_make_spec_cache_is_type_exact():
    layer = lyco.linear(8, 6)
    a = lyco.make_spec("locon", layer, ["lora_down", "lora_up"], alpha=2)
    b = lyco.make_spec("locon", layer, ["lora_down", "lora_up"], alpha=2.0)
    assert a != b and '"alpha":2,' in a and '"alpha":2.0,' in b
    assert lyco.make_spec("locon", layer, ["lora_down", "lora_up"], alpha=2) == a
    # an equal layer dict (another object) hits the same entry; the cache equals the uncached build
    assert lyco.make_spec("locon", dict(layer), ["lora_down", "lora_up"], alpha=2) == a
    assert ops._make_spec("locon", layer, ["lora_down", "lora_up"], {"alpha": 2}) == a
    # an unhashable layer value is not cached but still gives its spec
    odd = dict(layer, note=[1])
    assert lyco.make_spec("locon", odd, ["lora_down"], alpha=2) == \
        ops._make_spec("locon", odd, ["lora_down"], {"alpha": 2})
