"""What every model source shares: building on the meta device when the constructor allows it,
and refusing what is not an nn.Module."""
from __future__ import annotations

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
