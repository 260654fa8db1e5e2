"""fxroof: where the time goes in a PyTorch model, and why.

>>> g = fxroof.analyze(torchvision.models.resnet50(), torch.randn(64, 3, 224, 224), backward=True)
>>> print(g.table(top=20)); print(g.breakdown("layer_type")); g.to_json("r50.json")
>>> g.roofline("h100_sxm"); fxroof.plot_roofline([g, "vit_b_16"], ["t4", "h100_sxm"], "r.png")

The public names load on first use (PEP 562): ``import fxroof`` does not import torch, so the
command line answers --help at once and a Ctrl-C during torch's import is handled cleanly.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from fxroof.errors import FxroofError, UsageError
from fxroof.version import __version__

if TYPE_CHECKING:  # what static tools and IDEs see
    from fxroof.analysis import analyze
    from fxroof.compile_backend import Backend, backend
    from fxroof.graph import AnnotatedGraph, ModelInfo
    from fxroof.recording import fake, fake_model, record
    from fxroof.roofline_points import plot_roofline

_PUBLIC = {"analyze": "fxroof.analysis", "AnnotatedGraph": "fxroof.graph",
           "ModelInfo": "fxroof.graph", "backend": "fxroof.compile_backend",
           "Backend": "fxroof.compile_backend", "plot_roofline": "fxroof.roofline_points",
           "record": "fxroof.recording", "fake": "fxroof.recording",
           "fake_model": "fxroof.recording"}

__all__ = [*_PUBLIC, "FxroofError", "UsageError", "__version__"]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'fxroof' has no attribute '{name}'")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
