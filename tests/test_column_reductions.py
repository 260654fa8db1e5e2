"""A sum or mean over the outer dimensions (a bias gradient) on a GPU: the rule names it, ATen's
reduce kernel's split of its rows across blocks worked by hand, the seconds of combining them
added to the class's time, and the fit of launch_geometry's PARTIAL_TRIP_S and
GLOBAL_REDUCE_FIXED_S (planted constants recovered; the shipped ones re-derived)."""
import math
import os

import pytest
import torch

import fxroof
from fxroof import launch_geometry, op_classes, prediction, time_model
from fxroof.chips import load_chips

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Reduce(torch.nn.Module):
    def __init__(self, op, dims, keepdim=True):
        super().__init__()
        self.op, self.dims, self.keepdim = op, dims, keepdim

    def forward(self, x):
        return getattr(x, self.op)(self.dims, keepdim=self.keepdim)


def record(op, dims, x, keepdim=True):
    graph = fxroof.analyze(Reduce(op, dims, keepdim), x, device="cuda")
    (found,) = [r for r in graph.records() if r["op"] == op]
    return found


def test_the_rule_names_a_reduction_over_the_outer_dimensions():
    """TensorIterator reduces "not on the fastest striding dimension" when a kept dimension
    strides less than every reduced one (Reduce.cuh, setReduceConfig)."""
    nchw, rows = torch.empty(8, 16, 5, 5), torch.empty(300, 64)
    channels_last = nchw.to(memory_format=torch.channels_last)
    assert record("sum", 0, rows)["rule"] == "reduction[sum][columns]"  # a Linear's bias
    assert record("sum", (0, 2, 3), channels_last)["rule"] == "reduction[sum][columns]"
    assert record("mean", (2, 3), channels_last)["rule"] == "reduction[mean][columns]"
    # an NCHW bias gradient reduces W, stride 1, first; a pool's mean the innermost rows
    assert record("sum", (0, 2, 3), nchw)["rule"] == "reduction[sum]"
    assert record("mean", (2, 3), nchw)["rule"] == "reduction[mean]"
    assert record("sum", 1, rows)["rule"] == "reduction[sum]"
    assert record("amax", 0, rows)["rule"] == "reduction[amax]"  # only sum and mean named


def test_rows_and_columns_come_from_the_flops_and_the_outputs():
    bias = record("sum", 0, torch.empty(300, 64))
    assert op_classes.column_reduction(bias) == (300, 64)
    half = record("mean", 0, torch.empty(300, 64, dtype=torch.bfloat16), keepdim=False)
    assert op_classes.column_reduction(half) == (300, 64)
    assert op_classes.column_reduction(record("sum", 1, torch.empty(300, 64))) is None
    # a channels-last pool is no longer a row reduction (it runs the column configuration)
    pool = record("mean", (2, 3), torch.empty(8, 16, 5, 5).to(
        memory_format=torch.channels_last))
    assert not op_classes.row_reduction(pool) and op_classes.launch_kind(pool) is None


def test_the_split_of_rows_across_blocks_by_hand():
    """ConvNeXt-T's 192-channel bias gradient at batch 64: 50176 rows of 192 outputs on an
    H200 (132 SMs, 2048 resident threads). Outputs in vectors of 4: 48 across; a block 32
    wide (a warp) and 128 / 32 = 4 high; a thread would sum 50176 / 4 = 12544 rows (256 or
    more), the grid is ceil(48 / 32) = 2 blocks wide against 132 x 2048 / 128 = 2112, so the
    rows are split max(min(2112 / 2, 12544 / 16), 12544 / 256) = 784 ways, and the block
    that combines them makes 784 / 4 = 196 round trips: 196 x 0.36 us + 6.4 us."""
    assert launch_geometry.column_reduction_blocks(50176, 192, 132, 2048) == (784, 4)
    assert launch_geometry.global_reduce_s(50176, 192, 132, (9, 0)) == \
        pytest.approx(196 * 0.36e-6 + 6.4e-6)
    # a classifier's bias at batch 64: 64 / 4 = 16 rows a thread, no split, nothing to add
    assert launch_geometry.column_reduction_blocks(64, 1000, 132, 2048) == (1, 0)
    assert launch_geometry.global_reduce_s(64, 1000, 132, (9, 0)) == 0
    # unknown resident limits or SMs: nothing to add
    assert launch_geometry.global_reduce_s(50176, 192, 132, (1, 0)) == 0
    assert launch_geometry.global_reduce_s(50176, 192, None, (9, 0)) == 0


def test_the_combining_is_added_to_the_class_time_on_an_nvidia_gpu_only():
    bias = record("sum", (0, 2, 3), torch.empty(64, 192, 28, 28).to(
        memory_format=torch.channels_last))
    assert op_classes.column_reduction(bias) == (64 * 28 * 28, 192)
    plain = {**bias, "rule": "reduction[sum]"}
    h200 = load_chips()["h200_sxm"]
    added = launch_geometry.global_reduce_s(64 * 28 * 28, 192, 132, (9, 0))
    assert added == pytest.approx(196 * 0.36e-6 + 6.4e-6)
    assert prediction.device_seconds(time_model.node_time(bias, h200)) == pytest.approx(
        prediction.device_seconds(time_model.node_time(plain, h200)) + added)
    for other in ("epyc_9654", "mi300x"):
        chip = load_chips()[other]
        assert time_model.node_time(bias, chip).predicted_s == \
            time_model.node_time(plain, chip).predicted_s


def test_the_global_reduce_fit_recovers_planted_constants():
    """Nodes timed as their class's seconds + trips x 0.5 us + 3 us, the trips worked by
    hand as in the test above (50176 x 192: 784 / 4; 200704 x 96: 1056 / 8; 3136 x 768:
    ceil(49 / 4); 12544 x 1536: 176 / 4), one shape repeated: recovered; one trip count
    alone cannot tell the two apart, and a model outside COLUMN_FIT_MODELS is left out."""
    from benchmarks import fit_launch_geometry as fit

    chip = load_chips()["h200_sxm"]
    nodes = []
    for rows, columns, trips in ((50176, 192, 196), (200704, 96, 132), (3136, 768, 13),
                                 (12544, 1536, 44)):
        r = record("sum", 0, torch.empty(rows, columns))
        assert fit.combining_trips(r, chip) == trips
        seconds = fit.class_seconds(r, chip) + trips * 0.5e-6 + 3e-6
        nodes += [{**r, "time_s": seconds}] * (3 if columns == 96 else 1)
    wrong = {**nodes[0], "time_s": nodes[0]["time_s"] * 9}
    found = fit.gather([{"name": "convnext_tiny", "nodes": nodes},
                        {"name": "resnet50", "nodes": [wrong]}], chip)[fit.GLOBAL_REDUCE]
    assert fit.fit_global_reduce(found, chip) == {
        "PARTIAL_TRIP_S": pytest.approx(0.5e-6), "GLOBAL_REDUCE_FIXED_S": pytest.approx(3e-6)}
    assert set(fit.fit_global_reduce(found[:1], chip).values()) == {None}


def test_the_shipped_global_reduce_constants_are_the_fit_of_the_kept_profiles():
    """PARTIAL_TRIP_S and GLOBAL_REDUCE_FIXED_S are fit_launch_geometry.py's least squares over
    the kept H200 ConvNeXt-T training profile's bias gradients (8 shapes), to two
    significant digits; the profile predates the variant, so the fit traces it again."""
    from benchmarks import fit_launch_geometry as fit
    from benchmarks.gpu_classes import read_profile

    chip = load_chips()["h200_sxm"]
    path = os.path.join(ROOT, "benchmarks", "measured", "h200-profile-convnext_tiny-b64-train.json")
    found = fit.gather([fit.with_todays_rules(read_profile(path))], chip)[fit.GLOBAL_REDUCE]
    shapes = {op_classes.column_reduction(r) for _, r in found if fit.combining_trips(r, chip)}
    assert len(shapes) == 8
    for name, value in fit.fit_global_reduce(found, chip).items():
        assert float(f"{value:.2g}") == getattr(launch_geometry, name), name
    assert math.isclose(launch_geometry.PARTIAL_TRIP_S, 0.36e-6)
