"""A decode step on a GPU: the projections and attention that stream, and cuDNN's plan builds.

Expected values are closed forms over the shipped parameters (read from calibration.yaml) and
the chips' datasheet bandwidths, or the measurements kept in benchmarks/measured/decode/.
"""
import json
import os

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

import fxroof
from fxroof import calibration as cal
from fxroof import chips, prediction, time_model
from fxroof.cli import main
from fxroof.pipeline import CUDNN_PLAN_BUILD_S
from fxroof.plan_builds import mark_plan_builds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "benchmarks", "measured", "decode", "h200-decode-probe.json")
H200_BANDWIDTH = 4.8e12  # B/s, the datasheet's
TINY_LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
              "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256}


def _shipped(section: str, op_class: str) -> dict:
    """A class's shipped parameters: of a chip fitted on its own, or of a family."""
    shipped = yaml.safe_load(open(cal.CALIBRATION_FILE))
    if section in shipped["families"]:
        return shipped["families"][section][op_class]
    return shipped["chips"][section]["classes"][op_class]


def _product(rows: int, features_in: int, features_out: int, dtype, chip_id="h200_sxm"):
    chip = chips.get_chip(chip_id)
    records = fxroof.analyze(nn.Linear(features_in, features_out, bias=False),
                             torch.empty(rows, features_in), dtype=dtype, device="cuda",
                             chip=chip).records()
    (node,) = [r for r in records if r["op"] == "mm"]
    return chip, node


def test_a_few_row_16bit_product_streams_its_weights_like_a_matrix_vector_one():
    """8 rows of a Llama-2-7B MLP projection (BF16, 4096 -> 11008): one tile tall, so priced
    at the streaming rate (the family's elementwise 0.7776 of the H200's 4.8 TB/s), as the
    H200 ran it: 25.2 us, the same as one row's."""
    streaming, gemm = _shipped("gpu", "elementwise")["memory"], \
        _shipped("h100_sxm", "gemm")["memory"]
    assert (streaming, gemm) == (0.7776, 0.3874)  # the H200 takes the H100's sets
    chip, node = _product(8, 4096, 11008, torch.bfloat16)
    moved = 2 * (8 * 4096 + 4096 * 11008 + 8 * 11008)
    assert node["bytes"] == moved
    kernel = time_model.node_time(node, chip).kernel_s
    assert kernel == pytest.approx(moved / (H200_BANDWIDTH * streaming))  # 24.2 us
    measured = [p["seconds"] for p in json.load(open(PROBE))["products"]
                if (p["m"], p["k"], p["n"], p["dtype"]) == (8, 4096, 11008, "torch.bfloat16")]
    assert measured == [pytest.approx(25.2e-6, abs=0.1e-6)]
    assert 0.9 < kernel / measured[0] < 1.1  # at the GEMM fraction: 1.93x


def test_a_two_tile_tall_or_fp32_product_keeps_the_gemm_class_fraction():
    """256 rows (two tiles tall: VGG-16's BF16 classifier at batch 256, 1.30-1.54x long at
    the fraction and 0.65-0.77x at the streaming rate on the H100) and an FP32 product of 8
    rows (CUDA cores, what the fraction was fitted on) keep the GEMM class's memory fraction."""
    gemm = _shipped("h100_sxm", "gemm")["memory"]
    chip, node = _product(8, 4096, 11008, torch.float32)
    # at least its bytes at the fraction (here its FP32 multiply-adds take longer still)
    assert time_model.node_time(node, chip).kernel_s >= \
        node["bytes"] / (H200_BANDWIDTH * gemm) * (1 - 1e-9)
    chip, node = _product(256, 25088, 4096, torch.bfloat16, "h100_sxm")
    memory_s = node["bytes"] / (3.35e12 * gemm)
    assert time_model.node_time(node, chip).kernel_s == pytest.approx(memory_s)


class _Attention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def _attention(chip_id: str, past: int, batch: int = 1):
    chip = chips.get_chip(chip_id)
    shapes = [(batch, 32, 1, 128), (batch, 32, past, 128), (batch, 32, past, 128)]
    records = fxroof.analyze(_Attention(), *[torch.empty(s, dtype=torch.bfloat16)
                                            for s in shapes], device="cuda",
                             chip=chip).records()
    (node,) = [r for r in records if "attention" in r["op"]]
    return chip, node


def test_cudnn_decode_attention_streams_its_kv_cache():
    """One query over 16,384 cached tokens (32 heads of 128, BF16): cuDNN's kernel on an
    H200 reads K and V, 268 MB, priced at the streaming rate; the H200 ran it in 67.0 us
    (4.0 TB/s), where the GEMM fraction put it at 144 us."""
    streaming = _shipped("gpu", "elementwise")["memory"]
    chip, node = _attention("h200_sxm", 16384)
    assert node["op"] == "_scaled_dot_product_cudnn_attention"
    kv = 2 * 32 * 16384 * 128 * 2
    q_and_out = 2 * 32 * 128 * 2
    assert kv + q_and_out <= node["bytes"] <= kv + q_and_out + 1024  # and the row statistics
    kernel = time_model.node_time(node, chip).kernel_s
    assert kernel == pytest.approx(node["bytes"] / (H200_BANDWIDTH * streaming))  # 71.9 us
    measured = [p["seconds"] for p in json.load(open(PROBE))["attention"]
                if (p["batch"], p["kv_heads"], p["past"], p["masked"]) == (1, 32, 16384, False)]
    assert 0.9 < kernel / measured[0] < 1.2


class _MaskedAttention(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_flash_decode_attention_streams_but_memory_efficient_keeps_the_fraction():
    """An RTX 4090 runs flash attention (no cuDNN preference before Hopper), whose split-KV
    kernels stream a long cache (the H200's: 2.7-3.9 TB/s over 134 MB-1 GB): priced at the
    GeForce family's streaming rate (0.9026 of 1008 GB/s), not its GEMM class's 0.535. With a
    mask it runs memory-efficient attention, a block per batch and head (0.48-0.50 TB/s on the
    H200 at batch 1): that keeps the GEMM class's fraction."""
    streaming = _shipped("gpu_geforce", "elementwise")["memory"]
    gemm = _shipped("gpu_geforce", "gemm")["memory"]
    assert (streaming, gemm) == (pytest.approx(0.9026, abs=1e-4), pytest.approx(0.535, abs=1e-3))
    chip, node = _attention("rtx_4090", 16384)
    assert node["op"] == "_scaled_dot_product_flash_attention"
    assert time_model.node_time(node, chip).kernel_s == pytest.approx(
        node["bytes"] / (chip.bandwidth * streaming))  # 295 us; 498 at the fraction
    shapes = [(1, 32, 1, 128), (1, 32, 16384, 128), (1, 32, 16384, 128)]
    records = fxroof.analyze(_MaskedAttention(), *[torch.empty(s, dtype=torch.bfloat16)
                                                  for s in shapes],
                             torch.ones(1, 1, 1, 16384, dtype=torch.bool), device="cuda",
                             chip=chip).records()
    (masked,) = [r for r in records if "attention" in r["op"]]
    assert masked["op"] == "_scaled_dot_product_efficient_attention"
    assert time_model.node_time(masked, chip).kernel_s >= \
        masked["bytes"] / (chip.bandwidth * gemm) * (1 - 1e-9)


class _Calls(nn.Module):
    """Four attention calls of a decode step at a cache of 64 and one new token: two layers
    alike (one plan), a sliding window's (16 keys: its length does not grow) and one of other
    heads (a plan of its own)."""

    def forward(self, q, k, v, q8, k8, v8):
        out = F.scaled_dot_product_attention(q, k, v)
        out = out + F.scaled_dot_product_attention(q, k, v)
        out = out + F.scaled_dot_product_attention(q, k[:, :, :16], v[:, :, :16])
        return out, F.scaled_dot_product_attention(q8, k8, v8)


def test_each_distinct_growing_attention_call_builds_one_plan_a_step():
    def qkv(heads):
        return [torch.empty(1, heads, 1, 64, dtype=torch.bfloat16)] + \
            [torch.empty(1, heads, 65, 64, dtype=torch.bfloat16)] * 2
    g = fxroof.analyze(_Calls(), *qkv(4), *qkv(8), device="cuda", chip="h100_sxm")
    calls = [n for n in g.forward.nodes if "cudnn_attention" in str(n.target)]
    assert len(calls) == 4
    assert mark_plan_builds(g.forward, past=64) == 2
    assert [bool(n.meta.get("fxroof.plan_build")) for n in calls] == [True, False, False, True]
    assert mark_plan_builds(g.forward, past=100) == 0  # keys of 65: not past + 1


def _decode(chip_id: str, past=64, **config):
    return fxroof.analyze("hf:llama", hf_config=dict(TINY_LLAMA, **config), past=past,
                          dtype=torch.bfloat16, device="cuda", chip=chip_id)


def test_a_decode_step_on_hopper_builds_one_plan_and_pays_it_on_the_host():
    records = _decode("h100_sxm").records()
    built = [r for r in records if r["plan_build"]]
    assert len(built) == 1 and built[0]["op"] == "_scaled_dot_product_cudnn_attention"
    assert sum("cudnn_attention" in r["op"] for r in records) == 3  # one per layer
    h100 = chips.get_chip("h100_sxm")
    unbuilt = dict(built[0], plan_build=False)
    with_build, without = time_model.node_time(built[0], h100), time_model.node_time(unbuilt, h100)
    assert with_build.host_s - without.host_s == pytest.approx(CUDNN_PLAN_BUILD_S)
    assert with_build.predicted_s - without.predicted_s == pytest.approx(CUDNN_PLAN_BUILD_S)
    assert with_build.kernel_s == without.kernel_s
    # the step is host-bound: the build adds itself to the step whole
    stepped = prediction.predict(records, h100)["overall"]["predicted_s"]
    plain = prediction.predict([dict(r, plan_build=False) for r in records],
                             h100)["overall"]["predicted_s"]
    assert stepped - plain == pytest.approx(CUDNN_PLAN_BUILD_S, rel=1e-6)


def test_no_plan_builds_before_hopper_outside_decode_or_in_a_full_sliding_window():
    assert not any(r["plan_build"] for r in _decode("a100_sxm_80gb").records())  # flash
    prefill = fxroof.analyze("hf:llama", hf_config=TINY_LLAMA, seq_len=16,
                             dtype=torch.bfloat16, device="cuda", chip="h100_sxm")
    assert not any(r["plan_build"] for r in prefill.records())  # one shape, built once
    mistral = fxroof.analyze("hf:mistral", hf_config=dict(TINY_LLAMA, sliding_window=16),
                             past=64, dtype=torch.bfloat16, device="cuda", chip="h100_sxm")
    assert not any(r["plan_build"] for r in mistral.records())  # every layer's keys: 16


def test_predict_names_the_plan_builds_and_what_avoids_them(capsys):
    config = [f"--hf-config={k}={v}" for k, v in TINY_LLAMA.items()]
    assert main(["predict", "hf:llama", *config, "--past", "64", "--dtype", "bfloat16",
                 "--chip", "h100_sxm"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "builds 1 plan(s) a step" in out and "SDPBackend.FLASH_ATTENTION" in out
    assert main(["predict", "hf:llama", *config, "--past", "64", "--dtype", "bfloat16",
                 "--chip", "a100_sxm_80gb"]) == 0
    assert "plan(s)" not in capsys.readouterr().out


def test_the_kept_h200_decode_measurements_within_their_errors():
    """benchmarks/bench_decode.py's groups over the H200's probe: the products and the
    unmasked attention of at least 60 MB (below it a kernel's fixed latency, 4-7 us, dominates), and
    an independent step -- Llama-2-7B's batch-1 decode after 4,013 tokens, host-bound, the
    plan build included (its constant came from the 1B-shaped probe) -- inside its band."""
    import sys
    sys.path.insert(0, ROOT)
    from benchmarks import bench_decode

    probe = json.load(open(PROBE))
    h200 = chips.get_chip("h200_sxm")
    large = [bench_decode.product_point(p, h200) for p in probe["products"]
             if p["weight_bytes"] >= 60e6]
    # unmasked: a boolean mask's conversion kernels (+7.5-7.8 us) are not recorded
    large += [bench_decode.attention_point(p, h200) for p in probe["attention"]
              if p["kv_bytes"] >= 60e6 and not p["masked"]]
    assert len(large) == 28  # 21 products (BF16 and FP32) and 7 attention calls
    ratios = sorted(p["predicted_s"] / p["seconds"] for p in large)
    assert 0.9 < ratios[len(ratios) // 2] < 1.1
    assert 0.75 < ratios[0] and ratios[-1] < 1.3  # 0.80 (FP32, 64 MB) to 1.28 (256 rows)
    (step,) = [s for s in probe["steps"] if (s["model"], s["kind"], s["batch"],
                                             s.get("past")) == ("Llama-2-7B", "decode", 1, 4013)]
    point = bench_decode.step_point(step, h200)
    assert point["low_s"] <= step["wall_s"] <= point["high_s"]
    assert 0.85 < point["predicted_s"] / step["wall_s"] < 1.25  # 1.09; 0.55 before the build


def test_the_decode_probe_runs_and_writes_what_bench_decode_reads(tmp_path):
    """decode_probe.py at its tiny CPU sizes (SMALL=1): the script a lent GPU runs, kept
    runnable; its JSON has the groups bench_decode.py prices, each point measured."""
    import subprocess
    import sys
    env = dict(os.environ, SMALL="1", OUT=str(tmp_path))
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "decode_probe.py"),
                           "products", "attention"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    probe = json.load(open(tmp_path / "decode_probe.json"))
    assert probe["small"] is True
    assert len(probe["products"]) == 23 and len(probe["attention"]) == 11
    assert all(p["seconds"] > 0 for p in probe["products"] + probe["attention"])
