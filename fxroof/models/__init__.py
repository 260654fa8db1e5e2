"""Turning what the user names into an nn.Module and example inputs.

A spec is a torchvision classification model name (``resnet50``), ``hf:<model_type>``,
``timm:<name>``, or ``package.module:callable`` (or ``path/to/file.py:callable``)
returning an nn.Module. Models are built on the meta device when their constructor allows
it (no weight memory, no init time: a 70B-shaped model builds in seconds); constructors
that need real data (RegNet computes its widths with tensors) are built on the CPU.

A new model source is one module here with a ``build(name, device, config)`` function and a
line in ``SOURCES``.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Optional

import torch
from torch import nn

from fxroof.defaults import DEFAULT_IMAGE_SIZE, DEFAULT_MODEL
from fxroof.errors import FxroofError, UsageError
from fxroof.models import hf, timm_zoo, user, vision
from fxroof.models.base import construct, ensure_module, reparameterized
from fxroof.suggest import did_you_mean
from fxroof.validate import shape as checked_shape

__all__ = ["DEFAULT_MODEL", "MODEL_SOURCES", "build_model", "capture_context", "model_names",
           "construct", "default_input_shape",
           "default_inputs", "ensure_module", "parse_input", "parse_shape", "reparameterized",
           "torchvision_names"]

# prefix -> build(name after the prefix, device, config overrides)
SOURCES: dict[str, Callable[[str, str, Optional[dict]], nn.Module]] = {
    "hf:": hf.build,
    "timm:": lambda name, device, config: timm_zoo.build(name, device),
}
torchvision_names = vision.names

# source -> (how to name its models, where it comes from)
MODEL_SOURCES = {
    "torchvision": ("NAME", "torchvision's classification models, at their native input "
                            "size"),
    "hf": ("hf:<model_type>", "Hugging Face transformers, built from the config class's "
                              "defaults (pip install 'fxroof[hf]')"),
    "timm": ("timm:<name>", "timm's architectures, untrained (pip install 'fxroof[timm]')"),
}


def model_names(source: str) -> list[str]:
    """The names a source can build now ([] when its package is not installed)."""
    return {"torchvision": vision.names, "hf": hf.names, "timm": timm_zoo.names}[source]()


def build_model(spec: str, device: str = "meta", hf_config: Optional[dict] = None) -> nn.Module:
    """Build the model a spec names. ``device="meta"`` skips weight allocation where possible."""
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(f"The model name is empty ({spec!r}): name a model, e.g. resnet18, "
                         "hf:gpt2, timm:convnext_tiny or package.module:callable (`fxroof "
                         "models` lists them), or leave it out for the default model.")
    prefix = next((p for p in SOURCES if spec.startswith(p)), None)
    if hf_config and prefix != "hf:":
        raise UsageError(f"--hf-config (hf_config) sets fields of a Hugging Face config, but "
                         f"'{spec}' is not an hf: model; drop it, or name an hf: model.")
    if prefix is not None:
        return SOURCES[prefix](spec[len(prefix):], device, hf_config)
    if ":" in spec:
        return user.build(spec, device)
    if spec.endswith(".py"):
        raise user.callable_missing(spec)
    if spec not in vision.names():
        for prefix, source in (("hf:", hf), ("timm:", timm_zoo)):
            if source.knows(spec):
                raise FxroofError(f"Unknown model '{spec}': torchvision has no model of that "
                                  f"name. Did you mean {prefix}{spec}? (`fxroof models` lists "
                                  "the name forms fxroof takes.)")
        known, shown = _every_name()
        # 0.7: among 2,000-odd names a looser cutoff guesses at random ("nosuchmodel" scored
        # 0.63 against hf:neucodec); slips of a letter or two score 0.85 and more
        raise vision.unknown(spec, did_you_mean(spec, known, n=5, cutoff=0.7, shown=shown))
    return vision.build(spec, device)


def _every_name() -> tuple[list[str], dict]:
    """(bare names of every source, bare name -> how to write it): torchvision's as they
    are, then hf: model types and timm: architectures where torchvision has no such name."""
    shown = {name: name for name in vision.names()}
    for prefix, source in (("hf:", hf), ("timm:", timm_zoo)):
        for name in source.names():
            shown.setdefault(name, prefix + name)
    return list(shown), shown


def default_inputs(spec: str, model: nn.Module, batch: int, seq_len: Optional[int],
                   past: Optional[int] = None):
    """(args, kwargs) of meta tensors for a named model: images at the native resolution, or
    a transformers model's token ids / pixel values (with ``past`` tokens' KV cache)."""
    if spec.startswith("hf:"):
        return (), hf.example_inputs(model, batch, seq_len, past)
    if past is not None:
        raise UsageError(f"--past (past) is a decode step's KV cache, which an hf: causal LM "
                         f"takes; '{spec or type(model).__name__}' is not one. Drop it, or "
                         "analyse a decoder such as hf:llama.")
    if seq_len is not None:
        name = spec or type(model).__name__
        raise UsageError(f"--seq-len (seq_len) sets the tokens of an hf: text model; '{name}' "
                         "takes images. Drop it, or give the inputs' shapes (--input-shape).")
    # a batch too large for any tensor (1e14 images) is a typo to name, not torch's overflow
    images = checked_shape(default_input_shape(spec, model, batch),
                           f"the input of batch {batch}")
    return (torch.empty(images, device="meta"),), {}


def capture_context(spec: Optional[str], kwargs: Optional[dict]):
    """What a named model needs around its recorded run to take its real-data path."""
    if spec and spec.startswith("hf:"):
        return hf.real_data_masks(kwargs)
    return contextlib.nullcontext()


def default_input_shape(spec: str, model: nn.Module, batch: int) -> tuple[int, ...]:
    """(batch, 3, S, S) at the model's native resolution: the input size its pretrained
    config names (timm models carry one), its ``image_size`` attribute (ViT requires exactly
    that), its torchvision weights' crop size, else 224."""
    configured = (getattr(model, "pretrained_cfg", None) or {}).get("input_size")
    if configured:
        return (batch, *configured)
    size = getattr(model, "image_size", None)
    if size is None and spec and ":" not in spec:
        size = vision.crop_size(spec)
    size = int(size or DEFAULT_IMAGE_SIZE)
    return (batch, 3, size, size)


# The dtypes an --input-shape may name after a colon: integer inputs (token ids, indices)
# cannot be float, and a mask may be bool.
INPUT_DTYPES = {"int64": torch.int64, "long": torch.int64, "int32": torch.int32,
                "int": torch.int32, "bool": torch.bool, "float32": torch.float32,
                "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def parse_shape(text: str) -> tuple[int, ...]:
    return parse_input(text)[0]


def parse_input(text: str) -> tuple[tuple[int, ...], Optional[torch.dtype]]:
    """(shape, dtype or None) of an --input-shape: "8,3,224,224", "8x3x224x224", or with a
    dtype, "8,128:int64" for token ids."""
    dims, _, dtype_name = text.partition(":")
    try:
        shape = tuple(int(p) for p in dims.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise UsageError(
            f"Cannot read the input shape '{text}': give positive integers separated by commas, "
            "batch first, e.g. --input-shape 8,3,224,224 (or 8,128:int64 for token ids).")
    if dtype_name and dtype_name not in INPUT_DTYPES:
        raise UsageError(f"Cannot read the input shape '{text}': '{dtype_name}' is not an input "
                         f"dtype fxroof knows; use one of {', '.join(INPUT_DTYPES)}.")
    return shape, INPUT_DTYPES.get(dtype_name)
