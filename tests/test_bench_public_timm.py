"""benchmarks/bench_public_timm.py: its tables name real timm models and chips, and a point
is analysed as timm's benchmark.py ran it (cuDNN's engine search on, FP16 autocast)."""
import pytest
import torch

from benchmarks import bench_public_timm as bench
from fxroof import analyze
from fxroof.chips import load_chips
from fxroof.prediction import predict

timm = pytest.importorskip("timm", reason="timm is an optional extra: pip install 'fxroof[timm]'")


def test_the_tables_name_timm_models_and_fxroof_chips():
    chips = load_chips()
    for table in (bench.INFERENCE_MS, bench.TRAINING_MS):
        for chip, rows in table.items():
            assert chip in chips and "GeForce" in chips[chip].name
            for model, *_ in rows:
                assert timm.is_model(model), model
    # step times are ms of one step: a batch of 1024 resnet50 images on a 4090 in 238 ms
    assert dict((m, ms) for m, _, ms in bench.INFERENCE_MS["rtx_4090"])["resnet50"] == 237.959


def test_an_inference_point_is_timms_step_with_cudnns_search():
    found = bench.point("rtx_4090", "inference", "resnet18", 224, 64, 10.0)
    assert found["measured_s"] == pytest.approx(0.010)
    assert found["low_s"] <= found["pipelined_s"] <= found["high_s"]
    assert torch.backends.cudnn.benchmark is False  # put back
    # without the search every NCHW FP16 convolution also transposes its result: slower
    chip = load_chips()["rtx_4090"]
    records = analyze("timm:resnet18", input_shapes=[(64, 3, 224, 224)], device="cuda",
                      chip=chip, amp="fp16").records()
    assert predict(records, chip)["forward"]["predicted_s"] > found["pipelined_s"]


def test_a_training_point_adds_the_backward_and_the_update():
    forward = bench.point("rtx_3090", "inference", "resnet18", 224, 64, 1.0)
    step = bench.point("rtx_3090", "train", "resnet18", 224, 64, 1.0)
    assert step["pipelined_s"] > 2 * forward["pipelined_s"]
    assert step["task"] == "train" and step["batch"] == 64


def test_a_layout_ratio_is_per_image_and_the_search_transposes_less():
    """resnet50 on the RTX 4090: 242.763 ms for 1024 NCHW images, 100.61 ms for 512
    channels-last ones -- 1.2064x per image; predicted NCHW pays transposes channels-last
    does not, fewer with cuDNN's search (its operands) than without (its results too)."""
    r = bench.layout_ratio("resnet50", 224, 242.763, 100.61)
    assert r["measured"] == pytest.approx((242.763 / 1024) / (100.61 / 512))
    assert 1.0 < r["searched"] < r["not_searched"]
    assert torch.backends.cudnn.benchmark is False


def test_the_zoo_sample_names_timm_models_none_of_the_first_table():
    first = {m for rows in bench.INFERENCE_MS.values() for m, *_ in rows}
    names = [m for m, *_ in bench.ZOO_SAMPLE_4090]
    assert len(names) == len(set(names)) == 90 and not first & set(names)
    assert all(timm.is_model(m) for m in names)
    # rows as the file lists them: mobileone_s0 at 224, batch 1024, 54.18 ms a step
    assert ("mobileone_s0", 224, 1024, 54.18) in bench.ZOO_SAMPLE_4090


def test_an_inference_point_is_analysed_fused_as_timms_file_ran():
    """mobileone_s0: timm's file lists 0.28 GMACs an image (its fused model's); as built,
    its training branches do 3.9x that. The point prices the fused step, the training
    point the model as built (timm's train benchmark does not fuse)."""
    fused = bench.point("rtx_4090", "inference", "mobileone_s0", 224, 8, 1.0)
    chip = load_chips()["rtx_4090"]
    built = analyze("timm:mobileone_s0", input_shapes=[(8, 3, 224, 224)], device="cuda",
                    chip=chip, amp="fp16").records()
    assert sum(r["flops"] for r in built) > 3 * 2 * 0.28e9 * 8
    assert fused["ideal_s"] < predict(built, chip)["forward"]["ideal_s"] / 2


def test_a_training_point_builds_timms_attention_unfused_as_pytorch_1_12_ran(monkeypatch):
    """PyTorch 1.12 (the training file's) had no scaled_dot_product_attention, so timm ran
    softmax(q k^T) v op by op: vit_tiny's 12 blocks are two bmm and a softmax over (batch,
    3 heads, 197, 197) each, where the installed timm builds one fused attention a block.
    timm's switch is put back after; a training point costs more than with the fused one."""
    from timm.layers import config
    before = config._USE_FUSED_ATTN
    ops = {}
    for fused in (True, False):
        with bench.timm_fused_attention(fused):
            records = analyze("timm:vit_tiny_patch16_224", input_shapes=[(2, 3, 224, 224)],
                              device="cuda", chip="rtx_3090", amp="fp16").records()
        ops[fused] = [r for r in records if "soft" in r["op"] or "attention" in r["op"]
                      or r["op"] == "bmm"]
    assert config._USE_FUSED_ATTN == before
    assert [r["op"] for r in ops[True]] == ["_scaled_dot_product_flash_attention"] * 12
    assert sorted({r["op"] for r in ops[False]}) == ["_softmax", "bmm"] and len(ops[False]) == 36
    assert all(r["shape"] == [2, 3, 197, 197] for r in ops[False] if r["op"] == "_softmax")
    unfused = bench.point("rtx_3090", "train", "vit_tiny_patch16_224", 224, 8, 1.0)
    switch = bench.timm_fused_attention
    monkeypatch.setattr(bench, "timm_fused_attention", lambda enabled: switch(True))
    fused = bench.point("rtx_3090", "train", "vit_tiny_patch16_224", 224, 8, 1.0)
    assert unfused["ideal_s"] > fused["ideal_s"] and config._USE_FUSED_ATTN == before
