"""The user's own models: ``package.module:callable`` returning an nn.Module."""
from __future__ import annotations

import importlib
import os
import sys

from torch import nn

from fxroof.errors import FxroofError
from fxroof.models.base import ensure_module


def build(spec: str) -> nn.Module:
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:  # like uvicorn/gunicorn: the user's project is importable
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise FxroofError(
            f"Cannot import '{module_name}' from the model spec '{spec}': "
            f"{type(e).__name__}: {e}. Check that the package is installed or on PYTHONPATH "
            "and that the spec has the form 'package.module:callable'.") from None
    target = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise FxroofError(
                f"'{module_name}' has no attribute '{attr}' (from the model spec '{spec}'). "
                "The part after ':' must name a callable that returns an nn.Module.")
    try:
        model = target() if callable(target) and not isinstance(target, nn.Module) else target
    except Exception as e:
        raise FxroofError(
            f"Calling '{spec}' to build the model failed: {type(e).__name__}: {e}. "
            "The callable must build the model with no arguments.") from None
    return ensure_module(model, spec)
