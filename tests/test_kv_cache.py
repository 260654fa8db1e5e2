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
    window = torch.zeros(1, 2, 7, 64)  # a sliding-window layer's last 7 of 16 tokens
    cache = kv_cache._rebuilt([keys, values, window, window], ((None, 16), (8, 16)))
    assert isinstance(cache, DynamicCache)
    leaves, spec = pytree.tree_flatten({"cache": cache})
    assert leaves[0] is keys and leaves[1] is values  # the tensors themselves, not copies
    rebuilt = pytree.tree_unflatten(leaves, spec)["cache"]
    assert rebuilt is not cache and [layer.get_seq_length() for layer in rebuilt.layers] == \
        [16, 16]  # both layers have seen 16 tokens; the second keeps 7
    assert rebuilt.layers[1].keys is window and rebuilt.layers[1].sliding_window == 8


def _attention_keys(records) -> list:
    """Keys each attention node scores a query row against: its FLOPs over query rows x
    (2 x 64 for q.k, 1 scale, 5 softmax, 2 x 64 for p.v, 1 mask) -- transformers masks a
    sliding-window layer's scores."""
    return [r["flops"] // (4 * (2 * 64 + 1 + 5 + 2 * 64 + 1)) for r in records
            if "attention" in r["op"]]


def test_a_sliding_window_layer_caches_its_window_alone():
    """Mistral's layers attend over the last 8 positions: transformers' cache keeps the last 7
    tokens, so a step after 16 scores 7 + 1 keys a layer; after 4, all 4 + 1."""
    windowed = {**SMALL, "sliding_window": 8}
    g = fxroof.analyze("hf:mistral", hf_config=windowed, past=16, dtype=torch.bfloat16)
    assert [tuple(i["shape"]) for i in g.model.inputs][1:] == [(1, 2, 7, 64)] * 4
    assert g.memory.input_bytes == 4 * 2 * 7 * 64 * 2 + 8
    assert _attention_keys(g.records()) == [8, 8]
    short = fxroof.analyze("hf:mistral", hf_config=windowed, past=4, dtype=torch.bfloat16)
    assert [tuple(i["shape"]) for i in short.model.inputs][1:] == [(1, 2, 4, 64)] * 4


def test_full_and_sliding_window_layers_each_cache_their_own():
    """Qwen2 with sliding windows from its second layer on (max_window_layers 1): the first
    layer caches all 16 tokens and scores 17 keys (no mask, 4 heads x 1 row), the second 7
    and 8 under its window's mask."""
    mixed = {**SMALL, "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}
    g = fxroof.analyze("hf:qwen2", hf_config=mixed, past=16, dtype=torch.bfloat16)
    assert [tuple(i["shape"]) for i in g.model.inputs][1:] == \
        [(1, 2, 16, 64)] * 2 + [(1, 2, 7, 64)] * 2
    full, windowed = [r["flops"] for r in g.records() if "attention" in r["op"]]
    assert full == 4 * 17 * (2 * 64 + 1 + 5 + 2 * 64)
    assert windowed == 4 * 8 * (2 * 64 + 1 + 5 + 2 * 64 + 1)


def test_a_cache_of_states_fxroof_does_not_build_is_refused_by_name():
    hybrid = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
              "attn_layer_period": 2, "attn_layer_offset": 1}
    with pytest.raises(UsageError, match="LinearAttentionLayer.*without --past"):
        fxroof.analyze("hf:jamba", hf_config=hybrid, past=8)


def test_the_command_line_names_the_cache_once(capsys):
    config = [arg for key, value in SMALL.items() for arg in ("--hf-config", f"{key}={value}")]
    assert main(["annotate", "hf:llama", *config, "--past", "16", "--dtype", "bfloat16"]) == 0
    assert capsys.readouterr().out.startswith(
        "hf:llama: inputs (1, 1), 4 x (1, 2, 16, 64), bfloat16")


def test_a_cache_of_alternating_layers_is_named_by_shape():
    from fxroof.commands import _shapes_line

    token = [{"shape": [1, 1]}]
    alternating = [{"shape": [1, 8, window, 64]} for _ in range(18)
                   for window in (127, 127, 512, 512)]
    assert _shapes_line(token + alternating) == \
        "(1, 1), 36 x (1, 8, 127, 64), 36 x (1, 8, 512, 64)"
    # a few inputs keep their order, repeats and all
    assert _shapes_line([{"shape": [1, 128]}, {"shape": [1, 3, 224, 224]},
                         {"shape": [1, 128]}]) == "(1, 128), (1, 3, 224, 224), (1, 128)"


def test_a_decode_steps_rate_is_its_tokens_over_its_time():
    from types import SimpleNamespace

    from fxroof import render

    step = {"predicted_s": 0.04, "low_s": 0.02, "high_s": 0.08, "ideal_s": 0.004,
            "model": "calibrated"}
    row = {"chip": SimpleNamespace(name="a GPU"), "prediction": {"overall": step}}
    line = render.token_rate_table([row], tokens=16).splitlines()[-1].split()
    # 16 tokens in 40 ms: 400 a second; the band's slow edge (80 ms) the fewer, 200; the roof
    # (4 ms) 4,000
    assert line == ["a", "GPU", "40", "ms", "400", "200..800", "4,000"]


def test_a_steps_tokens_are_its_token_ids():
    from fxroof.commands import _step_tokens

    ids = {"shape": [4, 512], "dtype": "int64"}
    assert _step_tokens([ids]) == 2048
    assert _step_tokens([ids, dict(ids)]) == 2048  # a causal LM's labels beside its ids
    assert _step_tokens([{"shape": [4, 3, 224, 224], "dtype": "float32"}]) is None
    # an encoder-decoder's two sequences of different lengths: not one count
    assert _step_tokens([ids, {"shape": [4, 128], "dtype": "int64"}]) is None


def test_predict_gives_a_decode_steps_tokens_per_second(capsys):
    config = [arg for key, value in SMALL.items() for arg in ("--hf-config", f"{key}={value}")]
    assert main(["predict", "hf:llama", *config, "--past", "16", "--batch", "4",
                 "--chip", "h100_sxm"]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "makes 4 token(s): 1 new token(s) for each of 4" in out
    # a step without a cache counts its token ids: batch 2 x 128 (the default length)
    assert main(["predict", "hf:llama", *config, "--batch", "2", "--chip", "h100_sxm"]) == 0
    assert "This step takes 256 tokens" in capsys.readouterr().out
    assert main(["predict", "resnet18", "--chip", "h100_sxm"]) == 0
    assert "tokens/s" not in capsys.readouterr().out


def test_a_models_own_integer_inputs_are_not_counted_as_tokens(tmp_path, capsys):
    """A recommender's 26 categorical features a sample are integers too: only an hf:
    model's are known to be token ids."""
    path = tmp_path / "net.py"
    path.write_text("import torch\n"
                    "def net():\n"
                    "    return torch.nn.Sequential(torch.nn.Embedding(1000, 64),\n"
                    "                               torch.nn.Flatten(), torch.nn.Linear(1664, 1))\n")
    assert main(["predict", f"{path}:net", "--input-shape", "8,26:int64",
                 "--chip", "h100_sxm"]) == 0
    assert "tokens/s" not in capsys.readouterr().out
