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


@pytest.mark.parametrize("backward", [False, True])
def test_llama_compiled_is_its_kernels_alone_named_as_the_model_does(backward):
    """transformers 5 wraps llama's forward (Dynamo names the model ``L['args'][0]``) and
    keeps apply_rotary_pos_emb, a module-like Func, in a global: one Dynamo region holds the
    whole model, so the compiled view holds no eager op besides its kernels; its products
    have the eager step's FLOPs, each under the module the model names."""
    b, t, h, inter, heads, kv, layers, vocab = 2, 16, 64, 128, 4, 2, 2, 100
    d = h // heads
    g = fxroof.analyze("hf:llama", seq_len=t, batch=b, compiled=True, backward=backward,
                       hf_config={"num_hidden_layers": layers, "hidden_size": h,
                                  "intermediate_size": inter, "num_attention_heads": heads,
                                  "num_key_value_heads": kv, "vocab_size": vocab})
    records = g.records("forward")
    assert not [r for r in records if r["name"].startswith("eager_")]
    products = [r for r in records if r["op"] in ("mm", "addmm", "bmm")]
    per_layer = h * h + 2 * h * kv * d + h * h + 3 * h * inter  # q, k, v, o, gate/up/down
    assert sum(r["macs"] for r in products) == b * t * (layers * per_layer + h * vocab)
    assert {r["module"] for r in products} >= {"lm_head", "model.layers.1.mlp.down_proj",
                                               "model.layers.0.self_attn.q_proj"}
    assert {r["module"] for r in records if r["layer_type"] == "Func"} == \
        {"model.layers.0.self_attn.<Func>", "model.layers.1.self_attn.<Func>"}


def test_transformers_grouped_products_have_closed_forms():
    """transformers' custom grouped product (its experts under torch.compile): S rows of K
    by E experts' K x N weights, S x K x N multiply-adds; its backward, the input and the
    weight gradients, as many each."""
    import torch
    from transformers.integrations import moe  # noqa: F401  (registers the ops)
    from op_costs import NAMED_RULES, TensorMeta, estimate

    s, k, n, e = 64, 32, 48, 4
    x, w, offs = TensorMeta.contiguous((s, k)), TensorMeta.contiguous((e, k, n)), \
        TensorMeta.contiguous((e,), torch.int64)
    y = TensorMeta.contiguous((s, n))
    forward = estimate(torch.ops.transformers.grouped_mm_fallback.default, (x, w, offs), {}, y)
    assert (forward.macs, forward.flops) == (s * k * n, 2 * s * k * n)
    backward = estimate(torch.ops.transformers.grouped_mm_fallback_backward.default,
                        (x, w, offs, y), {}, (x, w))
    assert (backward.macs, backward.flops) == (2 * s * k * n, 4 * s * k * n)
    assert set(NAMED_RULES) == {"transformers::grouped_mm_fallback",
                                "transformers::grouped_mm_fallback_backward"}


def test_mixtral_compiled_prices_its_experts():
    """Under torch.compile, mixtral's fp32 experts run transformers' custom grouped product,
    not torch._grouped_mm: the view's products have the eager step's MACs."""
    overrides = {**TINY, "num_key_value_heads": 2, "vocab_size": 100, "num_local_experts": 4}
    products = lambda g: sum(r["macs"] for r in g.records("forward")  # noqa: E731
                             if "mm" in r["op"])
    eager = fxroof.analyze("hf:mixtral", hf_config=overrides, seq_len=16, batch=2)
    compiled = fxroof.analyze("hf:mixtral", hf_config=overrides, seq_len=16, batch=2,
                              compiled=True)
    assert compiled.coverage()["default_rule_ops"] == {}
    assert products(compiled) == products(eager) > 0


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


def _shapes(g):
    return [tuple(i["shape"]) for i in g.model.inputs]


def _conv_lengths(length, kernels, strides):
    """Output lengths of a stack of unpadded 1-D convolutions: (L - k) // s + 1 each."""
    lengths = []
    for k, s in zip(kernels, strides):
        length = (length - k) // s + 1
        lengths.append(length)
    return lengths


@pytest.mark.parametrize("samples", [None, 3200])
def test_a_waveform_model_gets_a_waveform_of_seq_len_samples(samples):
    """wav2vec2 takes input_values: one second at 16 kHz by default, --seq-len samples else.
    Its feature encoder's seven convolutions shorten it as their kernels and strides say
    (16,000 samples -> 49 frames); its positional convolution is weight-normed."""
    # a training step with LayerDrop and SpecAugment's masks off: both draw random numbers
    # that decide shapes, which fake tensors cannot trace
    g = fxroof.analyze("hf:wav2vec2", seq_len=samples, hf_config={
        "num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_conv_pos_embeddings": 16, "layerdrop": 0.0,
        "mask_time_prob": 0.0}, backward=True)
    assert _shapes(g) == [(1, samples or 16_000)]
    kernels, strides = (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)
    expected = _conv_lengths(samples or 16_000, kernels, strides)
    extractor = [r for r in g.records("forward") if r["op"] == "convolution"
                 and r["module"].startswith("feature_extractor")]
    assert [r["shape"][-1] for r in extractor] == expected
    assert (samples, expected[-1]) in ((None, 49), (3200, 9))
    assert g.coverage()["default_rule_ops"] == {}


def test_whisper_is_its_encoder_and_decoder_on_log_mel_frames():
    """hf:whisper was WhisperForCausalLM, its decoder alone, fed token ids: the encoder (two
    convolutions over the log-mel frames, then its layers) was never analysed. The encoder
    takes exactly 2 x max_source_positions frames; its second convolution halves them."""
    g = fxroof.analyze("hf:whisper", seq_len=16, hf_config={
        "d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
        "max_source_positions": 100})
    assert _shapes(g) == [(1, 80, 200), (1, 16)]
    convs = [r for r in g.records() if r["op"] == "convolution"]
    assert [r["shape"] for r in convs] == [[1, 64, 200], [1, 64, 100]]
    modules = {r["module"].split(".layers")[0] for r in g.records() if ".layers." in r["module"]}
    assert modules == {"encoder", "decoder"}


def test_an_encoder_decoder_is_not_its_causal_lm_decoder():
    g = fxroof.analyze("hf:bart", seq_len=8, hf_config={
        "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
        "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
        "vocab_size": 100})
    modules = {r["module"].split(".layers")[0] for r in g.records() if ".layers." in r["module"]}
    assert modules == {"encoder", "decoder"}


def test_clip_gets_text_of_its_own_length_and_an_image():
    g = fxroof.analyze("hf:clip", hf_config={"projection_dim": 16})
    text, image = (77, 224)  # CLIP's text positions and image size, transformers' defaults
    assert _shapes(g) == [(1, text), (1, 3, image, image)]


def test_a_model_of_another_input_is_told_to_build_its_inputs():
    with pytest.raises(fxroof.FxroofError, match="Speech2TextModel takes 'input_features'"):
        fxroof.analyze("hf:speech_to_text")


def test_xlnet_has_no_position_limit():
    """XLNet's max_position_embeddings is -1 (relative positions): --seq-len 32 was refused
    as longer than -1 positions."""
    g = fxroof.analyze("hf:xlnet", seq_len=32, hf_config={"n_layer": 1, "d_model": 32,
                                                          "n_head": 2, "d_inner": 64})
    assert _shapes(g) == [(1, 32)]


MIXTRAL = {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64,
           "num_local_experts": 4, "num_experts_per_tok": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 100}


def test_mixture_of_experts_products_are_counted():
    """transformers' experts run as torch._grouped_mm, which had no rule (0 FLOPs: most of a
    Mixtral's work). Each token meets top_k experts, each a gate and up projection (h to 2 x
    inter) and a down one (inter to h): tokens x top_k x 3 h inter MACs, whichever experts
    the router picks; the backward's grouped products are twice that."""
    import torch

    tokens, h, inter, top_k = 8, 32, 64, 2
    g = fxroof.analyze("hf:mixtral", seq_len=tokens, hf_config=MIXTRAL, dtype=torch.bfloat16,
                       backward=True)
    experts = [r for r in g.records() if r["op"] == "_grouped_mm"]
    forward = sum(r["macs"] for r in experts if r["phase"] == "forward")
    backward = sum(r["macs"] for r in experts if r["phase"] == "backward")
    assert forward == tokens * top_k * 3 * h * inter
    assert backward == 2 * forward
    assert g.coverage()["default_rule_ops"] == {}


@pytest.mark.parametrize("options", [{}, {"amp": "bf16", "chip": "h100_sxm"}])
def test_mixture_of_experts_trace_in_float32_and_under_autocast(options):
    """torch's shape function for _grouped_mm takes bf16 and fp16 only; the CPU kernel and
    CUDA's take fp32 too, and under autocast the experts' fp32 weights make the product fp32
    (transformers casts the tokens to the weights' dtype). fxroof traces both, with the same
    tokens x top_k x 3 h inter MACs as in bf16."""
    tokens, h, inter, top_k = 8, 32, 64, 2
    g = fxroof.analyze("hf:mixtral", seq_len=tokens, hf_config=MIXTRAL, **options)
    experts = [r for r in g.records() if r["op"] == "_grouped_mm"]
    assert {r["dtype"] for r in experts} == {"float32"}
    assert sum(r["macs"] for r in experts) == tokens * top_k * 3 * h * inter


def test_inputs_follow_what_the_forward_takes():
    """SAM's image size is its vision config's (1024, not the 224 fallback); DETR is an
    encoder-decoder whose decoder reads learned queries, not token ids."""
    from fxroof.models import build_model
    from fxroof.models.hf import example_inputs

    sam = example_inputs(build_model("hf:sam"), 1, None)
    assert {k: tuple(v.shape) for k, v in sam.items()} == {"pixel_values": (1, 3, 1024, 1024)}
    detr = example_inputs(build_model("hf:detr"), 2, None)
    assert {k: tuple(v.shape) for k, v in detr.items()} == {"pixel_values": (2, 3, 224, 224)}


def test_a_vision_language_model_is_analysed_on_its_text():
    """Gemma 3 places its image among the text's tokens, at positions fake tensors cannot
    read: it gets token ids alone (its text path), where CLIP, a dual encoder, gets both."""
    from fxroof.models import build_model
    from fxroof.models.hf import example_inputs

    gemma = example_inputs(build_model("hf:gemma3"), 1, 16)
    assert {k: tuple(v.shape) for k, v in gemma.items() if hasattr(v, "shape")} == {
        "input_ids": (1, 16)}


def test_whisper_tokens_are_limited_by_its_decoder_positions():
    """Whisper keeps its 448 decoder positions under max_target_positions: 1,000 tokens were
    analysed (a fake tensor's lookup is not bounds-checked) where the real model fails."""
    with pytest.raises(fxroof.FxroofError, match="1000 is longer than this model's 448 "
                                                 r"positions \(max_target_positions\)"):
        fxroof.analyze("hf:whisper", seq_len=1000)
