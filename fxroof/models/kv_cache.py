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

Every layer is cached whole, as a full-attention layer (transformers' DynamicCache with no
config): a sliding-window layer (Mistral's, Gemma's) would keep only its window, so past a
window's length such a model's attention is priced over more keys than it reads.
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
    """A DynamicCache of ``past`` tokens for each of ``model``'s layers: meta tensors of
    (batch, key/value heads, past, head size), in the model's dtype."""
    from transformers import DynamicCache

    register()
    config = model.config.get_text_config()
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_size = getattr(config, "head_dim", None) or config.hidden_size // heads
    dtype = next((p.dtype for p in model.parameters()), torch.float32)
    shape = (batch, kv_heads, past, head_size)
    layers = [tuple(torch.empty(shape, dtype=dtype, device="meta") for _ in "kv")
              for _ in range(config.num_hidden_layers)]
    return _rebuilt(DynamicCache, [t for pair in layers for t in pair])


def register() -> None:
    """Make DynamicCache a pytree node (once; where transformers or the user registered it
    already, theirs stands)."""
    from transformers import DynamicCache

    if DynamicCache in pytree.SUPPORTED_NODES:
        return
    pytree.register_pytree_node(
        DynamicCache, _flatten, lambda leaves, _: _rebuilt(DynamicCache, leaves),
        serialized_type_name="transformers.DynamicCache")


def _flatten(cache) -> tuple[list, None]:
    keys = [layer.keys for layer in cache.layers]
    values = [layer.values for layer in cache.layers]
    return [t for pair in zip(keys, values) for t in pair], None


def _rebuilt(cache_class, leaves: list):
    """A cache whose layers hold ``leaves`` (keys, values, keys, ...) themselves: each layer
    is made by transformers' update with none of the tokens, then given the tensors."""
    cache = cache_class()
    for index in range(len(leaves) // 2):
        keys, values = leaves[2 * index], leaves[2 * index + 1]
        cache.update(keys[..., :0, :], values[..., :0, :], index)
        layer = getattr(cache, "layers", [None] * (index + 1))[index]  # a layered cache
        if layer is None or not hasattr(layer, "keys"):
            raise FxroofError(_UNKNOWN_CACHE)
        layer.keys, layer.values = keys, values
        if layer.get_seq_length() != keys.shape[-2]:
            raise FxroofError(_UNKNOWN_CACHE)
    return cache


_UNKNOWN_CACHE = ("This transformers version keeps a DynamicCache's tensors in a way fxroof "
                  "does not know, so a decode step's KV cache (--past) cannot be built. Analyse "
                  "the step without --past, or upgrade transformers (pip install -U "
                  "transformers).")
