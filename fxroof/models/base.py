"""What every model source shares: building on the meta device when the constructor allows it,
refusing what is not an nn.Module, and the model as deployed for inference (reparameterized)."""
from __future__ import annotations

import copy
import itertools
from typing import Callable

import torch
from torch import nn

from fxroof.errors import FxroofError


def construct(make: Callable[[], nn.Module], device: str) -> nn.Module:
    """``make()`` on the meta device when asked and its constructor allows it, else for real."""
    if device == "meta":
        try:
            with torch.device("meta"):
                return make()
        except Exception:  # the constructor computes with real tensors: build it for real
            pass
    return make()


def ensure_module(model, what: str = "the model") -> nn.Module:
    if isinstance(model, type) and issubclass(model, nn.Module):
        raise FxroofError(f"{what} is the class {model.__name__}, not a module built from it: "
                          f"pass an instance, e.g. {model.__name__}(...) with its arguments.")
    if isinstance(model, torch.jit.ScriptModule):
        # fxroof swaps fake tensors in for the weights (torch.func.functional_call), which a
        # compiled TorchScript module does not allow
        raise FxroofError(f"{what} is a TorchScript module ({type(model).__name__}), which "
                          "fxroof cannot trace: pass the nn.Module it was scripted from.")
    if not isinstance(model, nn.Module):
        raise FxroofError(
            f"{what} is a {type(model).__name__}, not a torch.nn.Module. fxroof analyses "
            "nn.Modules: pass the module itself (or a callable returning one), not its output, "
            "its state_dict or a function.")
    return model


# How a module fuses itself for inference, in the order timm's reparameterize_model tries
# them (timm/models/_manipulate.py): ``fuse()`` returns the fused module (LeViT's and
# EfficientViT's convolution + batch norm), ``reparameterize()`` and ``switch_to_deploy()``
# fuse it in place (RepVGG's, MobileOne's, FastViT's parallel branches merged into one
# convolution). timm's published inference benchmarks ran their models fused: their
# parameter counts are the fused models' (mobileone_s0 2.08 M, 5.29 M unfused).
FUSING_METHODS = ("fuse", "reparameterize", "switch_to_deploy")


def reparameterized(module: nn.Module) -> tuple[nn.Module, int]:
    """A copy of ``module`` in eval mode with every submodule that can fuse itself for
    inference fused (FUSING_METHODS), and how many were; ``module`` is left as it was. The
    fusing runs on the model's own device (meta for a named model: no real compute)."""
    fused = copy.deepcopy(module).eval()
    first = next(itertools.chain(fused.parameters(), fused.buffers()), None)
    with torch.device(first.device if first is not None else "cpu"):
        count = _fuse_children(fused)
    return fused, count


def _fuse_children(parent: nn.Module) -> int:
    count = 0
    for name, child in list(parent.named_children()):  # fuse() replaces children as it goes
        method = next((m for m in FUSING_METHODS if hasattr(child, m)), None)
        if method is not None:
            try:
                result = getattr(child, method)()
            except Exception as e:
                raise FxroofError(
                    f"Reparameterizing the model failed in {type(child).__name__}.{method}() "
                    f"({type(e).__name__}: {str(e)[:200]}). Analyse it without "
                    "reparameterizing (--reparam), or fuse it yourself and pass the fused "
                    "module.") from None
            if method == "fuse":
                setattr(parent, name, result)
            count += 1
        count += _fuse_children(getattr(parent, name))
    return count
