"""Turning what the user names into an nn.Module and example input shapes.

A spec is a torchvision classification model name (``resnet50``), ``hf:<model_type>``,
``timm:<name>``, or ``package.module:callable`` returning an nn.Module. Models are built on the
meta device when their constructor allows it (no weight memory, no init time: a 70B-shaped
model builds in seconds); constructors that need real data (RegNet computes its widths with
tensors) are built on the CPU.
"""
from __future__ import annotations

import difflib
import importlib
import os
import sys
from typing import Callable, Optional

import torch
from torch import nn

from fxroof.errors import FxroofError

DEFAULT_MODEL = "resnet18"
_DEFAULT_IMAGE_SIZE = 224


def torchvision_names() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def build_model(spec: str, device: str = "meta", hf_config: Optional[dict] = None) -> nn.Module:
    """Build the model a spec names. ``device="meta"`` skips weight allocation where possible."""
    if spec.startswith("hf:"):
        from fxroof import hf

        return hf.build(spec, hf_config, device)
    if spec.startswith("timm:"):
        from fxroof import timm_models

        return timm_models.build(spec, device)
    if ":" in spec:
        return _build_callable(spec)
    import torchvision

    names = torchvision_names()
    if spec not in names:
        close = difflib.get_close_matches(spec, names, n=5, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise FxroofError(
            f"Unknown model '{spec}'.{hint} fxroof knows the {len(names)} torchvision "
            "classification models (run `fxroof models` to list them); for your own model pass "
            "'package.module:callable' where the callable returns an nn.Module.")
    return construct(lambda: torchvision.models.get_model(spec), device)


def construct(make: Callable[[], nn.Module], device: str) -> nn.Module:
    """``make()`` on the meta device when asked and its constructor allows it, else for real."""
    if device == "meta":
        try:
            with torch.device("meta"):
                return make()
        except Exception:  # the constructor computes with real tensors: build it for real
            pass
    return make()


def _build_callable(spec: str) -> nn.Module:
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


def ensure_module(model, what: str = "the model") -> nn.Module:
    if not isinstance(model, nn.Module):
        raise FxroofError(
            f"{what} is a {type(model).__name__}, not a torch.nn.Module. fxroof analyses "
            "nn.Modules: pass the module itself (or a callable returning one), not its output, "
            "its state_dict or a function.")
    return model


def default_inputs(spec: str, model: nn.Module, batch: int, seq_len: Optional[int]):
    """(args, kwargs) of meta tensors for a named model: images at the native resolution, or
    a transformers model's token ids / pixel values."""
    if spec.startswith("hf:"):
        from fxroof import hf

        return (), hf.example_inputs(model, batch, seq_len or 128)
    return (torch.empty(default_input_shape(spec, model, batch), device="meta"),), {}


def default_input_shape(spec: str, model: nn.Module, batch: int) -> tuple[int, ...]:
    """(batch, 3, S, S) at the model's native resolution: the input size its pretrained
    config names (timm models carry one), its ``image_size`` attribute (ViT requires exactly
    that), its torchvision weights' crop size, else 224."""
    configured = (getattr(model, "pretrained_cfg", None) or {}).get("input_size")
    if configured:
        return (batch, *configured)
    size = getattr(model, "image_size", None)
    if size is None and ":" not in spec:
        import torchvision

        try:
            transforms = torchvision.models.get_model_weights(spec).DEFAULT.transforms
            size = transforms.keywords.get("crop_size")
        except Exception:
            size = None
    return (batch, 3, int(size or _DEFAULT_IMAGE_SIZE), int(size or _DEFAULT_IMAGE_SIZE))


def parse_shape(text: str) -> tuple[int, ...]:
    try:  # "8,3,224,224" or "8x3x224x224"
        shape = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise FxroofError(
            f"Cannot read the input shape '{text}': give positive integers separated by commas, "
            "batch first, e.g. --input-shape 8,3,224,224.")
    return shape


DTYPES = {"float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
          "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float64": torch.float64, "double": torch.float64, "fp64": torch.float64}


def parse_dtype(dtype) -> Optional[torch.dtype]:
    if dtype is None or isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.lower() in DTYPES:
        return DTYPES[dtype.lower()]
    raise FxroofError(
        f"Unsupported dtype '{dtype}'. fxroof runs models in a floating-point dtype: "
        "float32, float16, bfloat16 or float64.")
