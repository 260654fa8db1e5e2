"""Hugging Face transformers models built from a config -- never from downloaded weights.

``hf:<model_type>`` builds the config class's defaults (``hf:gpt2`` is GPT-2 small,
``hf:llama`` is Llama-2-7B-shaped), with ``key=value`` overrides, or ``hf:path/config.json``
reads a local config. The model is built on the meta device; causal LMs get their LM head.
transformers is an optional extra: ``pip install fxroof[hf]``.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import torch

from fxroof.errors import FxroofError, UsageError
from fxroof.suggest import did_you_mean


def _transformers():
    try:
        import transformers
    except ImportError:
        raise FxroofError("hf: models need the transformers package, an optional extra: "
                          "pip install 'fxroof[hf]' (or pip install transformers).") from None
    return transformers


def parse_overrides(items: Optional[list[str]]) -> dict:
    overrides = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"Cannot read --hf-config '{item}': write key=value, e.g. "
                              "num_hidden_layers=4.")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return overrides


def build(target: str, device: str = "meta", overrides: Optional[dict] = None) -> torch.nn.Module:
    """The model of ``target`` (a model type, or a local config.json) built from its config."""
    transformers = _transformers()
    overrides = dict(overrides or {})
    try:
        if target.endswith(".json"):
            if not os.path.exists(target):
                raise FxroofError(f"No such config file '{target}'.")
            with open(target) as f:
                settings = json.load(f)
            model_type = settings.pop("model_type", None)
            if not model_type:
                raise FxroofError(f"'{target}' has no 'model_type': it is not a transformers "
                                  "config.json.")
            config = transformers.AutoConfig.for_model(model_type, **{**settings, **overrides})
        else:
            config = transformers.AutoConfig.for_model(target, **overrides)
    except ValueError:
        known = list(transformers.CONFIG_MAPPING.keys())
        hint = did_you_mean(target, known, n=5)
        raise FxroofError(f"transformers does not know the model type '{target}'.{hint} Use a "
                          f"model type such as gpt2, bert, llama, t5 or vit ({len(known)} are "
                          "known to the installed transformers).") from None
    with torch.device(device):  # meta: shapes only; "cpu": random weights for the timing pass
        try:
            return transformers.AutoModelForCausalLM.from_config(config)
        except ValueError:  # not a decoder: the bare model (encoders, encoder-decoders, ViT)
            return transformers.AutoModel.from_config(config)


def example_inputs(model, batch: int, seq_len: int) -> dict:
    """Keyword inputs for one step: token ids and an attention mask (plus decoder ids for
    encoder-decoders), or pixel values for vision models. Meta tensors: shapes only."""
    config = model.config
    if getattr(model, "main_input_name", "input_ids") == "pixel_values":
        size = getattr(config, "image_size", 224)  # ResNetConfig has none: ImageNet's 224
        height, width = size if isinstance(size, (list, tuple)) else (size, size)
        return {"pixel_values": torch.empty(batch, config.num_channels, height, width,
                                            device="meta")}
    ids = torch.zeros(batch, seq_len, dtype=torch.long, device="meta")
    inputs = {"input_ids": ids, "attention_mask": torch.ones(batch, seq_len, dtype=torch.long,
                                                             device="meta")}
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = ids
    if getattr(config, "use_cache", False):
        inputs["use_cache"] = False  # a training step, no KV cache
    return inputs
