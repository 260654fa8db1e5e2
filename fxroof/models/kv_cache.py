"""A decode step's KV cache for hf: causal LMs: ``past`` tokens' keys and values per layer.

A decode step runs one new token (or a few) against the keys and values cached from the
tokens before it. transformers holds them in a Cache object (DynamicCache), which torch's
pytree does not know: fake-tensor conversion, the recorded step's inputs and the timing
pass's real inputs would not see its tensors, and the cache would be neither priced as
memory nor converted to the analysis's dtype. So DynamicCache is registered here as a
pytree node -- leaves: each layer's keys, then its values -- rebuilt around the very leaf
tensors (before the step is recorded), so the recorded step starts from them. What the model
then does with the cache is recorded as it runs: DynamicCache concatenates each layer's new
keys and values onto the cached ones, reading and writing the whole cache every token.

The layers are those transformers builds from the model's config (DynamicCache(config=...)):
a full-attention layer caches every past token; a sliding-window or chunked one (Mistral's,
Gemma's, gpt-oss's 128-token windows) only the last window - 1 of them, as its
DynamicSlidingWindowLayer keeps -- while it counts all ``past`` as seen, so positions and
masks are those of the real step. A layer of any other kind (a state-space or linear-
attention layer's fixed-size states, a layer sharing another's cache) is refused by name.
"""
from __future__ import annotations

import inspect

import torch
import torch.utils._pytree as pytree

from fxroof.errors import FxroofError, UsageError


# The keyword a causal LM's forward takes its cache by: transformers 5.x names it ``cache``,
# earlier versions ``past_key_values``
CACHE_KEYWORDS = ("cache", "past_key_values")


def cache_keyword(model) -> str:
    """The keyword ``model``'s forward takes a KV cache by, once it is known to take one."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    taken = inspect.signature(model.forward).parameters
    keyword = next((k for k in CACHE_KEYWORDS if k in taken), None)
    config = model.config
    if keyword is None or getattr(config, "is_encoder_decoder", False) or \
            type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise UsageError(
            f"--past (past) is a decode step's KV cache, which a decoder-only causal LM "
            f"takes; {type(model).__name__} ({config.model_type}) is not one. Analyse a "
            f"decoder such as hf:llama, hf:gpt2 or hf:qwen2 with --past, or this model "
            f"without it.")
    return keyword


def past_cache(model, batch: int, past: int):
    """A DynamicCache of ``past`` tokens for ``model``'s layers (sliding-window layers: the
    last window - 1 of them): meta tensors of (batch, key/value heads, tokens, head size), in
    the model's dtype."""
    register()
    config = model.config.get_text_config()
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_size = getattr(config, "head_dim", None) or config.hidden_size // heads
    dtype = next((p.dtype for p in model.parameters()), torch.float32)
    layers = layer_windows(model)
    leaves = [torch.empty((batch, kv_heads, past if window is None else min(past, window - 1),
                           head_size), dtype=dtype, device="meta")
              for window in layers for _ in "kv"]
    return _rebuilt(leaves, tuple((window, past) for window in layers))


def layer_windows(model) -> list:
    """Per layer of ``model``'s cache, the sliding window (tokens) of a sliding-window or
    chunked layer, None for a full-attention one -- read off the cache transformers builds
    for its config; a layer of another kind is refused."""
    from transformers import DynamicCache

    try:
        layers = DynamicCache(config=model.config).layers
    except TypeError:  # a transformers before per-layer caches: every layer a full one
        return [None] * model.config.get_text_config().num_hidden_layers
    other = sorted({type(layer).__name__ for layer in layers if _window(layer) is False})
    if other:
        raise UsageError(
            f"--past builds the KV cache of attention layers (full and sliding-window); "
            f"{type(model).__name__} also has {', '.join(other)} layers, whose states "
            f"(a state-space or linear-attention layer's, or another layer's shared cache) "
            f"fxroof does not build. Analyse it without --past: its prefill step (--seq-len "
            f"N) runs without a cache.")
    return [_window(layer) for layer in layers]


def _window(layer):
    """A cache layer's sliding window, None for a full-attention layer, False for another
    kind."""
    from transformers import cache_utils

    # (getattr: a transformers older than these classes makes every layer a full one)
    sliding = getattr(cache_utils, "DynamicSlidingWindowLayer", ())  # a DynamicLayer subclass
    if isinstance(layer, sliding):
        return int(layer.sliding_window)
    return None if type(layer) is getattr(cache_utils, "DynamicLayer", type(layer)) else False


def register() -> None:
    """Make DynamicCache a pytree node (once; where transformers or the user registered it
    already, theirs stands)."""
    from transformers import DynamicCache

    if DynamicCache in pytree.SUPPORTED_NODES:
        return
    pytree.register_pytree_node(
        DynamicCache, _flatten, _rebuilt, serialized_type_name="transformers.DynamicCache")


def _flatten(cache) -> tuple[list, tuple]:
    """Leaves: each layer's keys, then its values; context: each layer's (sliding window or
    None, tokens it has seen)."""
    leaves = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    return leaves, tuple((_window(layer) or None, layer.get_seq_length())
                         for layer in cache.layers)


def _rebuilt(leaves: list, layers: tuple):
    """A cache whose layers hold ``leaves`` (keys, values, keys, ...) themselves, each layer
    of the kind ``layers`` names ((window or None, tokens seen) each): made by transformers'
    update with none of the tokens, then given the tensors."""
    from transformers import DynamicCache, cache_utils

    cache = DynamicCache()
    for index, (window, seen) in enumerate(layers):
        keys, values = leaves[2 * index], leaves[2 * index + 1]
        if window is None:
            cache.update(keys[..., :0, :], values[..., :0, :], index)
            layer = getattr(cache, "layers", [None] * (index + 1))[index]  # a layered cache
        else:
            layer = cache_utils.DynamicSlidingWindowLayer(sliding_window=window)
            layer.update(keys[..., :0, :], values[..., :0, :])
            cache.layers.append(layer)
        if layer is None or not hasattr(layer, "keys"):
            raise FxroofError(_UNKNOWN_CACHE)
        layer.keys, layer.values = keys, values
        if window is not None:
            layer.cumulative_length = seen  # every token seen, the last window - 1 kept
        if layer.get_seq_length() != seen:
            raise FxroofError(_UNKNOWN_CACHE)
    return cache


_UNKNOWN_CACHE = ("This transformers version keeps a DynamicCache's tensors in a way fxroof "
                  "does not know, so a decode step's KV cache (--past) cannot be built. Analyse "
                  "the step without --past, or upgrade transformers (pip install -U "
                  "transformers).")
