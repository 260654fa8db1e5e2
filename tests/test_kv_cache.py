"""A decode step of an hf: causal LM (``past``, --past): its KV cache as inputs, what the model
does with it recorded, the step runnable on real tensors."""
import pytest
import torch
import torch.utils._pytree as pytree

import fxroof
from fxroof.cli import main
from fxroof.errors import UsageError

pytest.importorskip("transformers")

# 2 layers of 4 query heads over 2 key/value heads of 64 (hidden 256)
SMALL = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
CACHE = (1, 2, 16, 64)  # (batch, key/value heads, past tokens, head size), one per k and v


def _decode(**kwargs):
    return fxroof.analyze("hf:llama", hf_config=SMALL, past=16, dtype=torch.bfloat16, **kwargs)


def test_a_decode_step_takes_its_cache_as_inputs_in_the_analysis_dtype():
    g = _decode()
    shapes = [(tuple(i["shape"]), i["dtype"]) for i in g.model.inputs]
    assert shapes == [((1, 1), "int64")] + [(CACHE, "bfloat16")] * 4  # k and v, 2 layers
    # the cache is resident input memory: 4 tensors of 2,048 BF16 elements, and one token id
    assert g.memory.input_bytes == 4 * 2 * 16 * 64 * 2 + 8


def test_the_step_appends_to_the_cache_and_attends_over_every_cached_token():
    records = _decode().records()
    # DynamicCache concatenates each layer's new key and value onto the cached 16 tokens:
    # it reads 16 + 1 tokens and writes 17, 128 bytes a token (2 heads x 64, BF16)
    appended = [r for r in records if r["op"] == "cat" and r["shape"] == [1, 2, 17, 64]]
    assert len(appended) == 4
    assert all(r["bytes"] == (16 + 1 + 17) * 2 * 64 * 2 for r in appended)
    # one query row of 4 heads against 17 keys: 68 score pairs of q.k (2 x 64), scale (1),
    # softmax (5) and p.v (2 x 64) -- no mask: a single new token sees every cached one
    (attention, _) = [r for r in records if "attention" in r["op"]]
    assert attention["flops"] == 4 * 1 * 17 * (2 * 64 + 1 + 5 + 2 * 64)


def test_new_tokens_after_the_cache_attend_under_a_mask():
    """Four new tokens (a chunk of prefill or a speculative draft) after 16 cached: 4 x 20
    score pairs a head, under the explicit causal mask transformers builds (+1 a pair)."""
    records = fxroof.analyze("hf:llama", hf_config=SMALL, past=16, seq_len=4,
                             dtype=torch.bfloat16).records()
    attention = [r for r in records if "attention" in r["op"]]
    assert [r["flops"] for r in attention] == [4 * 4 * 20 * (2 * 64 + 1 + 5 + 2 * 64 + 1)] * 2


def test_a_gpu_decode_step_runs_flash_attention():
    records = _decode(device="cuda").records()
    assert [r["op"] for r in records if "attention" in r["op"]] == \
        ["_scaled_dot_product_flash_attention"] * 2


def test_a_decode_step_runs_on_real_tensors():
    """The timing pass rebuilds the cache from real tensors of the recorded shapes: the nodes
    and the eager step both run."""
    g = fxroof.analyze("hf:llama", hf_config=SMALL, past=16)
    report = g.time(repeats=1, warmup=0, progress=False)
    assert report.interpreted_s["forward"] > 0 and report.eager_s["forward"] > 0


def test_past_belongs_to_a_named_causal_lm_alone():
    for model, extra in (("resnet18", {}), ("hf:t5", {"hf_config": {"num_layers": 1}}),
                         ("hf:vit", {"hf_config": {"num_hidden_layers": 1}})):
        with pytest.raises(UsageError, match="decode step's KV cache"):
            fxroof.analyze(model, past=8, **extra)
    with pytest.raises(UsageError, match="would be ignored"):
        fxroof.analyze("hf:llama", hf_config=SMALL, past=8,
                       kwargs={"input_ids": torch.zeros(1, 1, dtype=torch.long)})
    with pytest.raises(UsageError, match="past"):
        fxroof.analyze("hf:llama", hf_config=SMALL, past=0)
    # Llama's config holds 2048 positions by default
    with pytest.raises(UsageError, match="cache at most 2047 tokens"):
        fxroof.analyze("hf:llama", hf_config=SMALL, past=2048)


def test_the_cache_is_a_pytree_of_its_tensors():
    from transformers import DynamicCache

    from fxroof.models import kv_cache

    kv_cache.register()
    keys, values = torch.zeros(CACHE), torch.ones(CACHE)
    cache = kv_cache._rebuilt(DynamicCache, [keys, values])
    leaves, spec = pytree.tree_flatten({"cache": cache})
    assert leaves[0] is keys and leaves[1] is values  # the tensors themselves, not copies
    rebuilt = pytree.tree_unflatten(leaves, spec)["cache"]
    assert rebuilt is not cache and rebuilt.get_seq_length() == 16


def test_the_command_line_names_the_cache_once(capsys):
    config = [arg for key, value in SMALL.items() for arg in ("--hf-config", f"{key}={value}")]
    assert main(["annotate", "hf:llama", *config, "--past", "16", "--dtype", "bfloat16"]) == 0
    assert capsys.readouterr().out.startswith(
        "hf:llama: inputs (1, 1), 4 x (1, 2, 16, 64), bfloat16")
