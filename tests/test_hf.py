"""Hugging Face models from configs (no weights): coverage, closed forms, errors."""
import pytest

import fxroof

TINY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4}


@pytest.mark.parametrize("model_type,overrides", [
    ("gpt2", {"n_layer": 2, "n_embd": 64, "n_head": 4}),
    ("bert", TINY),
    ("t5", {"num_layers": 2, "d_model": 64, "d_ff": 128, "num_heads": 4, "d_kv": 16}),
    ("vit", {**TINY, "image_size": 32, "patch_size": 8}),
    ("llama", {**TINY, "num_key_value_heads": 2, "vocab_size": 100}),
])
def test_families_annotate_forward_backward_without_default_rules(model_type, overrides):
    g = fxroof.analyze(f"hf:{model_type}", hf_config=overrides, seq_len=16, batch=2,
                       backward=True)
    assert g.coverage()["default_rule_ops"] == {}
    assert all(r["forward_node"] for r in g.records("backward"))
    assert g.totals()["backward"]["flops"] > g.totals()["forward"]["flops"] > 0


def test_llama_projection_macs_closed_form():
    b, t, h, inter, heads, kv, layers, vocab = 2, 16, 64, 128, 4, 2, 2, 100
    d = h // heads
    g = fxroof.analyze("hf:llama", seq_len=t, batch=b, hf_config={
        "num_hidden_layers": layers, "hidden_size": h, "intermediate_size": inter,
        "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab})
    records = g.records("forward")
    matmul = sum(r["macs"] for r in records if "attention" not in r["op"])
    per_layer = h * h + 2 * h * kv * d + h * h + 3 * h * inter  # q, k, v, o, gate/up/down
    assert matmul == b * t * (layers * per_layer + h * vocab)   # + the LM head


def test_unknown_model_type_and_bad_override():
    with pytest.raises(fxroof.FxroofError, match="model type .lama.. Did you mean llama"):
        fxroof.analyze("hf:lama")
    from fxroof.models.hf import parse_overrides

    with pytest.raises(fxroof.FxroofError, match="key=value"):
        parse_overrides(["num_hidden_layers"])
    assert parse_overrides(["num_hidden_layers=4", "hidden_act=gelu"]) == {
        "num_hidden_layers": 4, "hidden_act": "gelu"}


def test_counts_and_sizes_are_checked_but_token_ids_are_not():
    """A layer count below 1 is refused, under its own name or its alias (GPT-2 maps
    num_hidden_layers to n_layer); a token id may be 0 or a -1 sentinel."""
    for bad in ({"n_layer": 0}, {"num_hidden_layers": -1}, {"n_head": 0}):
        with pytest.raises(fxroof.FxroofError, match="at least 1"):
            fxroof.analyze("hf:gpt2", hf_config=bad, seq_len=8)
    g = fxroof.analyze("hf:gpt2", hf_config={"n_layer": 1, "bos_token_id": 0,
                                             "eos_token_id": -1}, seq_len=8)
    assert g.totals()["forward"]["flops"] > 0


def test_local_config_json(tmp_path, capsys):
    import json

    from fxroof.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2}))
    assert main(["annotate", f"hf:{path}", "--seq-len", "8", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "inputs (1, 8)," in out and "FLOP" in out  # token ids; no all-ones mask


def test_timing_an_hf_model_rebuilds_it_with_its_overrides():
    """The cost pass builds on the meta device; the timing pass must rebuild the same shape
    (the overrides included) with real weights."""
    tiny = {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64, "n_positions": 16}
    g = fxroof.analyze("hf:gpt2", hf_config=tiny, seq_len=8, batch=2)
    report = g.time(repeats=1, warmup=0)
    assert report.interpreted_s["forward"] > 0
    assert all(r["time_s"] is not None for r in g.records())
    assert g.model.parameters == sum(p.numel() for p in g.source.module.parameters())
