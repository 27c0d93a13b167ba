"""lyco for PyTorch: the C library's fused LyCORIS-adapter kernels as torch custom ops
(lyco::bypass_fwd/bwd, lyco::merge_fwd/bwd) with autograd and fake implementations, over a ctypes
binding of liblyco (no compile step). `import lyco.lycoris` routes LyCORIS 4.x modules through
them (docs/python.md). Without torch, only the ctypes layer (lyco._capi) is available."""

from ._capi import SLOTS, LycoDtypeError, LycoError, LycoShapeError, lib  # noqa: F401

try:
    import torch  # noqa: F401
except ImportError:  # the ctypes layer works without torch
    torch = None
if torch is not None:
    from .ops import (bypass, conv, fallback_log, layer_of, linear, make_spec,  # noqa: F401
                      merge, norm)


def version():
    """The C library's version string."""
    return lib().lyco_version().decode()
