"""Hugging Face transformers models built from a config -- never from downloaded weights.

``hf:<model_type>`` builds the config class's defaults (``hf:gpt2`` is GPT-2 small,
``hf:llama`` is Llama-2-7B-shaped), with ``key=value`` overrides, or ``hf:path/config.json``
reads a local config. The model is built on the meta device; causal LMs get their LM head.
transformers is an optional extra: ``pip install fxroof[hf]``.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import sys
from typing import Optional
from unittest import mock

import torch

from fxroof.defaults import DEFAULT_SEQ_LEN
from fxroof.errors import FxroofError, UsageError
from fxroof.files import read_text
from fxroof.models import kv_cache
from fxroof.suggest import did_you_mean

MAX_CONFIG_CHARS = 16 * 2 ** 20  # a config.json is a few kB; a tokenizer's vocabulary, MBs


def _transformers():
    try:
        import transformers
    except ImportError:
        raise FxroofError("hf: models need the transformers package, an optional extra: "
                          "pip install 'fxroof[hf]' (or pip install transformers).") from None
    return transformers


# Where a config keeps its token positions: most under max_position_embeddings (GPT-2's
# n_positions through its attribute_map), Whisper's decoder under max_target_positions.
# Fake tensors do not check an index against a table's size, so a longer sequence would be
# analysed where the real model fails.
POSITION_FIELDS = ("max_position_embeddings", "max_target_positions")


def _position_limit(config) -> tuple[Optional[str], Optional[int]]:
    """(the field, the count) of a config's token positions; (field, None) where it sets
    no limit, as XLNet's -1 (relative positions) does."""
    field, limit = next(((f, getattr(config, f)) for f in POSITION_FIELDS
                         if getattr(config, f, None) is not None), (None, None))
    return field, limit if isinstance(limit, int) and limit > 0 else None


def _sequence_length(config, seq_len: Optional[int]) -> int:
    field, limit = _position_limit(config)
    if seq_len is None:
        return min(DEFAULT_SEQ_LEN, limit) if isinstance(limit, int) else DEFAULT_SEQ_LEN
    if isinstance(limit, int) and seq_len > limit:
        raise UsageError(f"--seq-len {seq_len} is longer than this model's {limit} positions "
                         f"({field}): choose at most that many tokens.")
    return seq_len


def names() -> list[str]:
    """The model types the installed transformers can build from a config ([] without it)."""
    try:
        import transformers
    except ImportError:
        return []
    return sorted(transformers.CONFIG_MAPPING.keys())


def knows(model_type: str) -> bool:
    """Whether the installed transformers (if any) has this model type."""
    return model_type in names()


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
    """The model of ``target`` (a model type, or a local config.json) built from its config,
    with ``overrides`` checked against the config class's own fields."""
    transformers = _transformers()
    model_type, settings = _read_config(target) if target.endswith(".json") else (target, {})
    if model_type not in transformers.CONFIG_MAPPING:
        known = list(transformers.CONFIG_MAPPING.keys())
        raise FxroofError(f"transformers does not know the model type '{model_type}'."
                          f"{did_you_mean(model_type, known, n=5)} Use a model type such as "
                          f"gpt2, bert, llama, t5 or vit ({len(known)} are known to the "
                          "installed transformers).")
    if overrides is not None and not isinstance(overrides, dict):
        raise UsageError(f"hf_config is a dict of config fields, e.g. {{'num_hidden_layers': 2}}"
                         f", not {type(overrides).__name__} {overrides!r:.40}.")
    overrides = _checked(dict(overrides or {}), transformers.CONFIG_MAPPING[model_type](),
                         model_type)
    try:
        config = transformers.AutoConfig.for_model(model_type, **{**settings, **overrides})
        with torch.device(device):  # meta: shapes only; "cpu": random weights for timing
            # an encoder-decoder's causal-LM class (BartForCausalLM, WhisperForCausalLM) is
            # its decoder alone: such a model is the bare one, encoder and decoder, like T5
            if type(config) in transformers.MODEL_FOR_CAUSAL_LM_MAPPING and \
                    not getattr(config, "is_encoder_decoder", False):
                return transformers.AutoModelForCausalLM.from_config(config)
            # not a decoder: the bare model (encoders, encoder-decoders, ViT)
            return transformers.AutoModel.from_config(config)
    except Exception as e:  # transformers' own validation of the values
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FxroofError(f"transformers could not build a {model_type} model from this "
                          f"config: {type(e).__name__}: {detail.rstrip('.'):.300}. Check the "
                          "--hf-config values (or the config file) against each other.") from None


def _read_config(path: str) -> tuple[str, dict]:
    """(model_type, the other settings) of a transformers config.json."""
    try:
        settings = json.loads(read_text(path, MAX_CONFIG_CHARS, "a transformers config.json"))
    except FileNotFoundError:
        raise FxroofError(f"No such config file '{path}'.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FxroofError(f"Cannot read '{path}' as a transformers config.json: "
                          f"{type(e).__name__}: {e}. Is the file complete?") from None
    if not isinstance(settings, dict) or not settings.get("model_type"):
        raise FxroofError(f"'{path}' has no 'model_type': it is not a transformers "
                          "config.json.")
    settings = dict(settings)
    return str(settings.pop("model_type")), settings


def _checked(overrides: dict, defaults, model_type: str) -> dict:
    """Each override names a field of the config class and has that field's type (an int
    where the field is an int, ...); returns them converted (an int where a float is due)."""
    fields = set(defaults.to_dict()) | set(getattr(defaults, "attribute_map", {}))
    checked = {}
    for key, value in overrides.items():
        if key not in fields:
            raise UsageError(f"--hf-config: {model_type}'s config has no field '{key}'."
                             f"{did_you_mean(key, fields)} (It would be ignored.)")
        default = getattr(defaults, key, None)
        checked[key] = _in_range(key, _typed(key, value, default, model_type), default,
                                 getattr(defaults, "attribute_map", {}).get(key, key))
    return checked


# The fields that size the network: 0 of them builds a model with no layers, no heads or an
# empty vocabulary, which transformers accepts and which measures nothing.
SIZES = {"num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
         "intermediate_size", "vocab_size", "max_position_embeddings", "n_layer", "n_head",
         "n_embd", "n_positions"}


def _in_range(key: str, value, default, canonical: str):
    """A count or size is not negative (transformers builds range(-1) as no layers, without a
    word), and a field that sizes the network is at least 1. Token ids (``*_id``) are not
    counts: some configs use -1 for none."""
    if not isinstance(default, int) or isinstance(default, bool) or default < 0 \
            or canonical.endswith("_id"):
        return value
    least = 1 if key in SIZES or canonical in SIZES else 0
    if value < least:
        raise UsageError(f"--hf-config {key}={value}: '{key}' counts or sizes part of the "
                         f"model (default {default}) and must be at least {least}. "
                         "transformers builds such a config without a word, and the analysis "
                         "would describe a network that cannot exist.")
    return value


def _typed(key: str, value, default, model_type: str):
    if default is None or isinstance(value, type(default)) and \
            isinstance(value, bool) == isinstance(default, bool):
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise UsageError(f"--hf-config {key}={value!r}: {model_type}'s '{key}' is of type "
                     f"{type(default).__name__} (default {default!r}), not "
                     f"{type(value).__name__}.")


def example_inputs(model, batch: int, seq_len: Optional[int],
                   past: Optional[int] = None) -> dict:
    """Keyword inputs for one step, by the model's main input: token ids (plus pixel values
    for a text-image model such as CLIP), pixel values for vision models, a waveform for
    speech encoders (wav2vec2), Whisper's log-mel frames; decoder ids for encoder-decoders.
    Meta tensors: shapes only. ``seq_len``: tokens per sequence (default: DEFAULT_SEQ_LEN, or
    the model's maximum positions when it has fewer), or a waveform's samples. ``past``: a
    decode step -- a causal LM's KV cache of that many tokens (fxroof.models.kv_cache), and
    ``seq_len`` new tokens after them (default 1).

    No attention mask: an unpadded batch's mask is all ones, which transformers drops on real
    data (masking_utils' _ignore_causal_mask_sdpa: SDPA then runs is_causal, no mask, and can
    use flash attention) but must keep on fake tensors, where it cannot read the values. Left
    out, the recorded program is the one the real step runs."""
    if past is not None:
        return _decode_inputs(model, batch, seq_len or 1, past)
    config = model.config
    main = getattr(model, "main_input_name", "input_ids")
    if main == "pixel_values":
        inputs = {"pixel_values": _pixels(config, batch)}
        if _takes(model, "input_ids") and hasattr(config, "text_config"):  # BLIP-2
            inputs["input_ids"] = _token_ids(config, batch, seq_len)
    elif main == "input_values":  # a waveform (wav2vec2, HuBERT, WavLM): seq_len samples
        inputs = {"input_values": torch.empty(batch, seq_len or WAVEFORM_SAMPLES,
                                              device="meta")}
    elif main == "input_features" and _whisper_like(config):
        # log-mel frames: the encoder takes exactly 2 x its positions (its second
        # convolution halves them); seq_len counts the decoder's tokens
        frames = 2 * config.max_source_positions
        inputs = {"input_features": torch.empty(batch, config.num_mel_bins, frames,
                                                device="meta")}
    elif main == "input_ids":
        inputs = {"input_ids": _token_ids(config, batch, seq_len)}
        if _takes(model, "pixel_values") and hasattr(config, "vision_config") and \
                not _image_tokens(config):
            inputs["pixel_values"] = _pixels(config, batch)  # CLIP, SigLIP
    else:
        raise FxroofError(
            f"fxroof builds the inputs of hf: models that take token ids, images, waveforms "
            f"or Whisper's log-mel frames; {type(model).__name__} takes '{main}'. Analyse it "
            f"in Python with inputs you build: fxroof.analyze(model, {main}=...).")
    if getattr(config, "is_encoder_decoder", False) and _takes(model, "decoder_input_ids"):
        inputs["decoder_input_ids"] = _token_ids(config, batch, seq_len)  # not DETR's queries
    if getattr(config, "use_cache", False):
        inputs["use_cache"] = False  # a training step, no KV cache
    return inputs


def _decode_inputs(model, batch: int, new_tokens: int, past: int) -> dict:
    """A decode step's inputs: ``new_tokens`` token ids after a KV cache of ``past``."""
    keyword = kv_cache.cache_keyword(model)
    field, limit = _position_limit(model.config)
    if limit is not None and limit < past + new_tokens:
        raise UsageError(f"--past {past} with {new_tokens} new token(s) reaches position "
                         f"{past + new_tokens}, past this model's {limit} positions ({field}): "
                         f"cache at most {limit - new_tokens} tokens.")
    return {"input_ids": torch.zeros(batch, new_tokens, dtype=torch.long, device="meta"),
            keyword: kv_cache.past_cache(model, batch, past), "use_cache": True}


# One second of 16 kHz audio, the sampling rate of wav2vec2's and HuBERT's feature extractors
WAVEFORM_SAMPLES = 16_000


def _token_ids(config, batch: int, seq_len: Optional[int]) -> torch.Tensor:
    text = getattr(config, "text_config", None) or config  # CLIP's positions are its text's
    return torch.zeros(batch, _sequence_length(text, seq_len), dtype=torch.long,
                       device="meta")


def _pixels(config, batch: int) -> torch.Tensor:
    if not hasattr(config, "image_size") and hasattr(config, "vision_config"):
        config = config.vision_config  # a text-image model's (CLIP, BLIP-2), SAM's 1024
    size = getattr(config, "image_size", 224)  # ResNetConfig has none: ImageNet's 224
    height, width = size if isinstance(size, (list, tuple)) else (size, size)
    channels = getattr(config, "num_channels", 3)  # BLIP's vision config names none: RGB
    return torch.empty(batch, channels, height, width, device="meta")


def _image_tokens(config) -> bool:
    """Whether a text-image model places its image among the text's tokens (LLaVA, Gemma 3,
    Qwen2-VL): which positions are image tokens is data, which fake tensors cannot read, so
    such a model is analysed on its text alone, where a dual encoder (CLIP) takes both."""
    return any(getattr(config, key, None) is not None
               for key in ("image_token_id", "image_token_index"))


def _whisper_like(config) -> bool:
    return hasattr(config, "num_mel_bins") and hasattr(config, "max_source_positions")


def _takes(model, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


@contextlib.contextmanager
def real_data_masks(kwargs: Optional[dict]):
    """While an hf: model runs on fxroof's own token ids, make the mask choice transformers
    makes on them on real data. Without position_ids, positions are 0..L-1 in every row:
    masking_utils' find_packed_sequence_indices reads that from the values and finds no
    packed sequences, so an unpadded causal batch runs SDPA with is_causal and no mask (flash
    attention on CUDA). On fake tensors it cannot read values, assumes packing, and builds a
    full mask that sends CUDA to the memory-efficient kernel instead."""
    masking = sys.modules.get("transformers.masking_utils")
    if masking is None or not hasattr(masking, "find_packed_sequence_indices") or \
            "position_ids" in (kwargs or {}) or "attention_mask" in (kwargs or {}):
        yield
        return
    with mock.patch.object(masking, "find_packed_sequence_indices", lambda position_ids: None):
        yield
