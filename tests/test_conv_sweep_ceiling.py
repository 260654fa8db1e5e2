"""benchmarks/conv_sweep_ceiling.py: its measures of how predictable a sweep is, each checked
on synthetic times whose answer is known in closed form."""
import numpy as np
import pytest

from benchmarks import conv_sweep_ceiling as ceiling


def test_mape_is_the_mean_relative_error_in_percent():
    assert ceiling.mape([1.1, 0.8], [1.0, 1.0]) == pytest.approx(15.0)


def test_a_time_that_is_a_power_law_in_the_shape_is_smooth():
    rng = np.random.default_rng(0)
    m, n, k = (rng.uniform(10, 1000, 300) for _ in range(3))
    seconds = 1e-9 * m ** 1.1 * n ** 0.9 * k  # log-linear: the quadratic holds it exactly
    assert ceiling.smooth_fit_mape(m, n, k, seconds) < 1e-6
    jagged = seconds * np.where(rng.random(300) < 0.5, 1.0, 2.0)  # half the rows 2x
    assert ceiling.smooth_fit_mape(m, n, k, jagged) > 20.0


def test_times_proportional_to_flops_are_priced_exactly_by_their_neighbours():
    rng = np.random.default_rng(1)
    shapes = rng.integers(1, 64, size=(200, 4)).astype(float)
    flops = shapes.prod(axis=1) * 18.0
    assert ceiling.nearest_shapes_mape(shapes, flops, flops / 1e13) < 1e-9
    doubled = flops / 1e13 * np.where(np.arange(200) % 2 == 0, 1.0, 2.0)
    assert ceiling.nearest_shapes_mape(shapes, flops, doubled) > 10.0


def test_another_gpus_time_scaled_by_the_median_ratio():
    times = {"a": {(1,): 1.0, (2,): 2.0, (3,): 4.0},
             "b": {(1,): 3.0, (2,): 6.0, (3,): 12.0, (4,): 1.0}}  # b = 3 a where both timed
    predicted, measured = ceiling.scaled_copy(times, "a", "b")
    assert predicted == pytest.approx(measured)
    times["c"] = {(1,): 1.0, (2,): 1.0, (3,): 1.0}
    best, pooled = ceiling.copy_mapes(times, "a")
    assert best == pytest.approx(0.0)
    # from c alone: c's times times their median ratio to a's (2) price a's at 2, 2, 2;
    # pooled with b's exact ones geometrically: sqrt(2 x 1), sqrt(2 x 2), sqrt(2 x 4)
    assert pooled == pytest.approx(ceiling.mape(np.sqrt([2.0, 4.0, 8.0]), [1.0, 2.0, 4.0]))


def test_residual_correlations_are_pearsons_over_the_shared_shapes():
    residuals = {"a": {1: 0.1, 2: 0.2, 3: 0.3}, "b": {1: 1.0, 2: 2.0, 3: 3.0, 9: 5.0},
                 "c": {1: 0.3, 2: 0.2, 3: 0.1}}
    assert ceiling.residual_correlations(residuals) == pytest.approx([1.0, -1.0, -1.0])


def _run(script: str, *args):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, f"benchmarks/{script}", *args], cwd=root,
                          capture_output=True, text=True, timeout=300)


def test_a_folder_that_is_not_the_sweeps_is_named_not_a_traceback(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _run("conv_sweep_ceiling.py", "--data", str(empty))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "has no gpus.csv, gemm.csv, conv2d.csv" in proc.stderr
    # every file there, but gpus.csv without the columns the README lists: named, and the
    # calibration file is not written
    for name in ("gpus.csv", "gemm.csv", "conv2d.csv", "elementwise.csv", "layernorm.csv",
                 "softmax.csv"):
        (tmp_path / name).write_text("gpu,latency_s\nT4,1e-5\n")
    out = tmp_path / "c.yaml"
    proc = _run("calibrate_gpu_kernels.py", "--data", str(tmp_path), "--out", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "does not read as NeuSight's sweeps (KeyError" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
