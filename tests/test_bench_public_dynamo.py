"""benchmarks/bench_public_dynamo.py: its table names timm models and chips that the eager
table has too, and a point is the compiled view of timm's step against the eager one."""
import pytest
import torch

from benchmarks import bench_public_dynamo as bench
from benchmarks.bench_public_timm import INFERENCE_MS, ZOO_SAMPLE_4090
from fxroof.chips import load_chips

timm = pytest.importorskip("timm", reason="timm is an optional extra: pip install 'fxroof[timm]'")


def test_every_compiled_row_has_an_eager_row_on_the_same_board():
    chips = load_chips()
    for chip, rows in bench.COMPILED_MS.items():
        assert "GeForce" in chips[chip].name
        eager = {m for m, *_ in INFERENCE_MS[chip]}
        for model, size, batch, ms in rows:
            assert timm.is_model(model) and model in eager, model
            assert batch in (512, 1024) and ms > 0
    # rows as the file lists them: resnet50 at 224, 1024 images a step in 127.355 ms
    assert ("resnet50", 224, 1024, 127.355) in bench.COMPILED_MS["rtx_4090"]


def test_the_zoo_rows_are_the_eager_zoo_sample_at_its_image_sizes():
    """One compiled row per model of bench_public_timm's zoo sample, at the image size of its
    eager row, and no model twice."""
    compiled = [(m, size) for m, size, _, _ in bench.ZOO_COMPILED_MS_4090]
    assert sorted(compiled) == sorted((m, size) for m, size, _, _ in ZOO_SAMPLE_4090)
    assert len(set(compiled)) == len(compiled) == 90
    assert all(batch in (512, 768, 1024) and ms > 0
               for _, _, batch, ms in bench.ZOO_COMPILED_MS_4090)
    # as the file lists them: maxvit_tiny_rw_224 ran 512 images a step in 160.308 ms
    assert ("maxvit_tiny_rw_224", 224, 512, 160.308) in bench.ZOO_COMPILED_MS_4090


def test_a_zoo_point_takes_its_eager_step_from_the_zoo_sample_per_image():
    """A zoo point's measured eager step is the zoo sample's row, taken per image to the
    compiled run's batch (here 256 images of an eager row of 1024 in 100 ms), and the point is
    marked as the zoo's."""
    p = bench.point("rtx_4090", "repvgg_a0", 224, 256, 9.0, eager=(1024, 100.0))
    assert p["task"] == "zoo"
    assert p["measured_eager_s"] == pytest.approx(0.1 * 256 / 1024)
    assert p["measured_speedup"] == pytest.approx(0.025 / 0.009)


def test_a_point_prices_the_compiled_step_and_the_eager_one_at_its_batch():
    """resnet18 at batch 64 on the RTX 4090: the eager measurement (74.577 ms for 1024 images)
    is taken per image to the point's batch; the compiled view is predicted faster than the
    eager step, and cuDNN's search is put back after."""
    p = bench.point("rtx_4090", "resnet18", 224, 64, 3.0)
    assert p["measured_eager_s"] == pytest.approx(74.577e-3 * 64 / 1024)
    assert p["measured_speedup"] == pytest.approx(p["measured_eager_s"] / 3.0e-3)
    assert p["predicted_speedup"] == pytest.approx(p["predicted_eager_s"] / p["pipelined_s"])
    assert p["predicted_speedup"] > 1.0
    assert p["low_s"] <= p["pipelined_s"] <= p["high_s"]
    assert torch.backends.cudnn.benchmark is False


def test_the_speedup_summary_is_the_median_and_worst_relative_error():
    found = [{"predicted_speedup": 1.1, "measured_speedup": 1.0},
             {"predicted_speedup": 1.5, "measured_speedup": 2.0},
             {"predicted_speedup": 2.0, "measured_speedup": 2.0}]
    assert bench.speedup_summary(found) == {"median_error": 0.1, "worst_error": 0.25}
