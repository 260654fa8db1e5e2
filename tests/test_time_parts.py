"""Where a predicted step goes (prediction.TIME_PARTS), against hand-worked cases."""
import pytest
import torch

import fxroof
from fxroof import op_classes, prediction, render, time_model
from fxroof.chips import parse_chip
from fxroof.cli import main

# A layer norm's class: fixed cost 20 us, 0.8 of the bandwidth, 0.5 of the peak
NORM = {"t0": 2e-5, "compute": 0.5, "memory": 0.8, "band": [1, 1]}


def _chip(cls: str, calibration=None):
    """A 132-SM NVIDIA part (or a CPU) of 10 TFLOP/s and 3 TB/s."""
    spec = {"id": "g", "name": "a chip", "class": cls, "vendor": "NVIDIA",
            "multiprocessors": {"value": 132, "source": "(test)"},
            "peaks": {"fp32": {"value": 1e13, "unit": "vector"}},
            "bandwidth": {"value": 3e12}}
    if calibration is not None:
        spec["calibration"] = calibration
    return parse_chip(spec, "(test)")


def _layer_norm():
    """ConvNeXt's first-stage layer norm at batch 8 (96 channels a row), on a CUDA target."""
    x = torch.empty(8, 56, 56, 96)
    (record,) = [r for r in fxroof.analyze(torch.nn.LayerNorm(96), x, device="cuda").records()
                 if op_classes.op_class_of(r) == "norm"]
    return record


def test_a_launch_bound_layer_norm_splits_into_roof_fitted_rate_and_launch_bound():
    """On a GPU of 132 SMs the layer norm's block per row holds it to rows x (148 ns + 96 x
    0.40 ns) / 132 (fxroof.launch_geometry), longer than its bytes at 0.8 of 3 TB/s: its
    time is the roof (bytes / 3 TB/s), what the fitted rate adds, then the launch bound's
    excess, worked by hand; alone in a step the host's 20 us issue comes first."""
    record = _layer_norm()
    roof = record["bytes"] / 3e12
    streamed = record["bytes"] / (0.8 * 3e12)
    bound = 8 * 56 * 56 * (148e-9 + 96 * 0.40e-9) / 132
    assert record["flops"] / 1e13 < roof < streamed < bound
    time = time_model.node_time(record, _chip("gpu", {"norm": NORM}))
    assert prediction.node_parts(time) == pytest.approx((roof, streamed - roof,
                                                       bound - streamed, 0.0))
    parts = prediction.predict([record], _chip("gpu", {"norm": NORM}))["overall"]["parts"]
    assert list(parts) == list(prediction.TIME_PARTS)
    assert parts["fixed_cost_s"] == pytest.approx(2e-5)
    assert sum(parts.values()) == pytest.approx(2e-5 + bound)


def test_a_cpu_step_pays_each_ops_fixed_cost_in_full():
    """On a CPU (no launch geometry, no overlap) the same node takes its fixed cost and its
    streamed bytes in turn: two of them, 2 x 20 us of fixed cost and nothing launch-bound."""
    record = _layer_norm()
    streamed = record["bytes"] / (0.8 * 3e12)
    result = prediction.predict([record, dict(record)], _chip("cpu", {"norm": NORM}))
    parts = result["overall"]["parts"]
    assert parts["fixed_cost_s"] == pytest.approx(2 * 2e-5)
    assert parts["launch_bound_s"] == 0.0
    assert parts["extra_work_s"] == pytest.approx(0.0, abs=1e-12)
    assert parts["roof_s"] + parts["fitted_rates_s"] == pytest.approx(2 * streamed)
    assert sum(parts.values()) == pytest.approx(result["overall"]["predicted_s"])


def test_the_ideal_roof_puts_the_whole_step_on_the_roof():
    """--roof ideal (or a chip no time model covers): no part but the roof."""
    record = _layer_norm()
    parts = prediction.predict([record], _chip("gpu"), "ideal")["overall"]["parts"]
    assert parts["roof_s"] == pytest.approx(record["bytes"] / 3e12)
    assert [parts[p] for p in prediction.TIME_PARTS[1:]] == [0.0] * 4


def test_every_phase_of_a_shipped_gpus_step_sums_its_parts():
    """resnet18's training step on the H100 (pipelined on the host, cuDNN's TF32 transposes,
    launch-bound batch norms): each phase's parts add up to its predicted time, and each
    part the H100 prices is there."""
    graph = fxroof.analyze("resnet18", batch=8, backward=True, device="cuda")
    result = prediction.predict(graph.records(), fxroof.chips.get_chip("h100_sxm"))
    for phase in ("forward", "backward", "overall"):
        parts = result[phase]["parts"]
        assert sum(parts.values()) == pytest.approx(result[phase]["predicted_s"])
    assert all(v > 0 for v in result["overall"]["parts"].values())


def test_predict_prints_each_chips_parts_as_shares_of_its_step(capsys):
    assert set(render.PART_HEADERS) == set(prediction.TIME_PARTS)
    assert main(["predict", "resnet18", "--device", "cuda", "--chip", "h100_sxm",
                 "--chip", "t4"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "launch-bound kernels" in line)
    assert "below roof" in header and "per-op fixed costs" in header
    rows = [line for line in out.splitlines() if line.startswith("NVIDIA")][-2:]
    for row in rows:  # the five shares of each step, rounded: 100% give or take
        shares = [int(cell[:-1]) for cell in row.split() if cell.endswith("%")][-5:]
        assert len(shares) == 5 and abs(sum(shares) - 100) <= 3
