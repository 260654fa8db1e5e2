"""benchmarks/bench_gpu.py: the GPU step-time check's logic, run on the CPU (its measuring
loop with --device cpu, its comparison on fake tensors), and its summary by hand."""
import json
import os
import subprocess
import sys

import pytest

from benchmarks import bench_gpu, fit_host_band, fit_training_host
from benchmarks.gpu_compare import summary
from fxroof.errors import FxroofError
from fxroof.time_model import NodeTime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "bench_gpu.py")


def point(model, batch, measured, calibrated, ideal, low, high):
    return {"model": model, "phase": "inference", "precision": "fp32", "batch": batch,
            "median_s": measured, "calibrated_s": calibrated, "ideal_s": ideal,
            "low_s": low, "high_s": high}


def test_summary_by_hand():
    points = [point("a", 1, 1.0, 1.1, 0.5, 0.9, 1.3),   # error 0.1, inside the band
              point("b", 1, 2.0, 1.5, 1.0, 1.2, 1.8),   # error 0.25, measured above the band
              point("c", 1, 4.0, 4.4, 2.0, 3.0, 5.0),   # error 0.1, inside
              point("d", 1, 8.0, 9.6, 4.0, 7.0, 9.0)]   # error 0.2, inside
    s = summary(points)["fp32 inference"]
    assert s["runs"] == 4
    assert s["calibrated"]["median_error"] == pytest.approx(0.15)   # (0.1 + 0.2) / 2
    assert s["calibrated"]["worst_error"] == pytest.approx(0.25)
    assert s["calibrated"]["worst"] == "b b1"
    assert s["calibrated"]["spearman_rho"] == {1: 1.0}              # same order
    assert s["ideal"]["median_ratio"] == pytest.approx(0.5)
    assert s["inside_band"] == pytest.approx(0.75)


def test_measure_times_with_cudnn_search_when_asked_and_puts_it_back(tmp_path, monkeypatch):
    import torch

    seen = []
    monkeypatch.setattr(bench_gpu, "measure_model",
                        lambda *a: seen.append(torch.backends.cudnn.benchmark) or [])
    for flag in ([], ["--cudnn-benchmark"]):
        assert bench_gpu.main(["measure", "--device", "cpu", "--out", str(tmp_path / "m.json"),
                               "--models", "squeezenet1_1", "--force", *flag]) == 0
    assert seen == [False, True]
    assert torch.backends.cudnn.benchmark is False  # the process's setting, as it was


def test_measure_on_the_cpu_then_compare(tmp_path, capsys):
    measured, compared = tmp_path / "m.json", tmp_path / "c.json"
    assert bench_gpu.main(["measure", "--device", "cpu", "--out", str(measured), "--models",
                           "squeezenet1_1", "--batch", "1", "--train-batch", "2",
                           "--precision", "fp32", "--warmup", "0", "--repeats", "1"]) == 0
    runs = json.loads(measured.read_text())["runs"]
    assert [(r["phase"], r["batch"]) for r in runs] == [("inference", 1), ("training", 2)]
    assert all(r["median_s"] > 0 for r in runs)
    with pytest.raises(FxroofError, match="--force"):  # refused before measuring
        bench_gpu.main(["measure", "--device", "cpu", "--out", str(measured)])
    assert bench_gpu.main(["compare", str(measured), "--chip", "t4", "--json",
                           str(compared)]) == 0
    points = json.loads(compared.read_text())["points"]
    # the training step adds the loss and the optimizer to the forward: more nodes, longer
    assert points[1]["nodes"] > 2 * points[0]["nodes"]
    assert points[1]["calibrated_s"] > points[0]["calibrated_s"]
    assert all(p["low_s"] <= p["calibrated_s"] <= p["high_s"] for p in points)
    with pytest.raises(FxroofError, match="measure --out"):
        bench_gpu.main(["compare", str(tmp_path), "--chip", "t4"])


def _measured_file(path, gpu, times):
    runs = [{"model": m, "phase": "inference", "precision": "fp32", "batch": 1, "median_s": t}
            for m, t in times.items()]
    path.write_text(json.dumps({"benchmark": "gpu_step_times", "environment": {"gpu": gpu},
                                "runs": runs}))
    return str(path)


def test_runs_of_one_gpu_pool_to_the_median_of_their_medians(tmp_path):
    from benchmarks.gpu_compare import pooled

    files = [{"runs": [{"model": "a", "phase": "inference", "precision": "fp32", "batch": 1,
                        "median_s": t}, *extra]}
             for t, extra in ((1.0, []), (3.0, [{"model": "b", "phase": "inference",
                                                 "precision": "fp32", "batch": 1,
                                                 "error": "out of memory"}]), (1.5, []))]
    (a,) = pooled(files)  # b was never timed
    assert (a["model"], a["median_s"], a["measurements"]) == ("a", 1.5, 3)
    assert a["spread"] == pytest.approx(3.0)


def test_compare_names_a_run_it_cannot_read(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"benchmark": "gpu_step_times", "environment": {},
                                "runs": [{"model": "a", "phase": "inference",
                                          "precision": "fp32", "batch": 1}]}))
    with pytest.raises(FxroofError, match="run 0 lacks median_s"):
        bench_gpu.main(["compare", str(path), "--chip", "t4"])


def test_compare_refuses_to_pool_two_gpus(tmp_path):
    one = _measured_file(tmp_path / "1.json", "NVIDIA H200", {"squeezenet1_1": 1e-3})
    other = _measured_file(tmp_path / "2.json", "NVIDIA A100", {"squeezenet1_1": 2e-3})
    with pytest.raises(FxroofError, match="2 GPUs"):
        bench_gpu.main(["compare", one, other, "--chip", "t4"])


def test_compare_of_two_runs_reports_how_far_they_disagree(tmp_path, capsys):
    one = _measured_file(tmp_path / "1.json", "T4", {"squeezenet1_1": 1e-3})
    two = _measured_file(tmp_path / "2.json", "T4", {"squeezenet1_1": 1.5e-3})
    assert bench_gpu.main(["compare", one, two, "--chip", "t4"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["files"] == 2
    assert result["fp32 inference"]["measured_spread_median"] == pytest.approx(1.5)


def test_the_script_ends_with_one_line_not_a_traceback(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, "compare", str(tmp_path), "--chip", "t4"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("bench_gpu.py: error: Cannot read")


@pytest.mark.parametrize("option", [["--batch", "0"], ["--train-batch", "-1"],
                                    ["--repeats", "0"], ["--warmup", "x"]])
def test_measure_refuses_a_batch_or_count_it_cannot_time(tmp_path, capsys, option):
    with pytest.raises(SystemExit) as stop:  # argparse: one line, before any measuring
        bench_gpu.main(["measure", "--device", "cpu", "--out", str(tmp_path / "m.json"),
                        *option])
    assert stop.value.code == 2 and option[0] in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()


def _step(host_s: float, kernel_s: float, nodes: int) -> dict:
    """A training step's node times by phase: ``nodes`` alike in each phase."""
    node = NodeTime(host_s + kernel_s, host_s + kernel_s, host_s + kernel_s, host_s + kernel_s,
                    "calibrated", host_s, 0.0, kernel_s)
    return {phase: [node] * nodes for phase in ("forward", "backward")}


def test_the_training_host_factor_fit_recovers_a_known_factor():
    """Steps 'measured' as their own prediction with the host costs x1.5 -- host-bound ones
    (30 us per op against 5 us kernels) and one device-bound model, which says nothing of
    the host -- fit 1.5, and 1.5 again leaving each host-bound model out."""
    runs = [{"model": m, "phases": _step(30e-6, 5e-6, n)} for m, n in
            (("a", 50), ("b", 120), ("c", 200))]
    runs.append({"model": "gpu-bound", "phases": _step(30e-6, 1e-3, 80)})
    for run in runs:
        run["measured_s"] = fit_training_host.step_s(run["phases"], 1.5)
    # by hand: 2 phases x (n x 1.5 x 30 us + 5 us) for a host-bound model
    assert runs[0]["measured_s"] == pytest.approx(2 * (50 * 45e-6 + 5e-6))
    result = fit_training_host.fit(runs)
    assert result["factor"] == 1.5 and result["runs"] == 4
    assert all(result["leave_one_model_out"][m] == 1.5 for m in "abc")
    assert result["median_error"]["left-out fit"] == pytest.approx(0.0, abs=1e-9)
    assert result["median_error"]["factor 1"] > 0.2  # host-bound steps 1/1.5 of measured


def test_the_host_band_weighs_each_host_software_as_one():
    """fit_host_band.band by hand: host A's ten points 0.5..0.95 and host B's two points 2.0
    and 3.0 each weigh one, so B's two are half the mass: p10 is A's second point (0.55; the
    first holds 0.05), p90 B's second (3.0: 2.0 reaches 0.75)."""
    a = [0.5 + 0.05 * i for i in range(10)]
    sources = {"A": a, "B": [3.0, 2.0]}
    assert fit_host_band.band(sources) == pytest.approx((0.55, 3.0))
    assert fit_host_band.band({"A": a}) == pytest.approx((0.5, 0.9))
    # leaving B out, its points lie outside what A alone gives
    result = fit_host_band.summary(sources)
    assert result["sources"]["B"]["inside_left_out_band"] == 0.0
    assert result["sources"]["A"]["points"] == 10
    assert result["sources"]["A"]["median"] == pytest.approx(0.725)


def test_a_host_bound_point_is_one_the_device_waits_half_of():
    """fit_host_band.host_bound keeps measured / predicted of the steps whose device waits
    for the host at least HOST_BOUND_SHARE of the predicted step, and the share of one
    host-bound T4 step is its host wait over its time: ten tiny adds take 10 t0 + a kernel,
    of which the device runs ten kernels (3 us each, its floor) and waits the rest."""
    assert fit_host_band.HOST_BOUND_SHARE == 0.5
    assert fit_host_band.host_bound([(0.9, 1.4), (0.49, 2.0), (0.5, 0.7)]) == [1.4, 0.7]
    from fxroof import calibration as cal
    from fxroof.chips import load_chips
    t4 = load_chips()["t4"]
    p = cal.load().params("t4", "gpu", "elementwise")
    add = {"op": "add", "op_class": "vector", "dtype": "float32", "flops": 256,
           "bytes": 3072, "phase": "forward", "shape": [256]}
    share, ratio = fit_host_band.host_share_and_ratio([add] * 10, t4, 1e-3, "forward")
    step = 10 * p.t0 + 3e-6  # the kernel is the device's 3 us floor
    assert share == pytest.approx((step - 10 * 3e-6) / step)
    assert ratio == pytest.approx(1e-3 / step)


def test_the_host_band_predicts_a_measured_file_on_the_chip_its_gpu_is(tmp_path):
    """A `measure` file from a T4 is predicted on the t4 chip (the driver's name found in
    chips.yaml); one from a GPU fxroof does not list is refused, naming it."""
    from benchmarks.gpu_compare import analysed
    from fxroof.chips import load_chips
    from fxroof.prediction import predict

    path = _measured_file(tmp_path / "t4.json", "Tesla T4", {"squeezenet1_1": 1e-3})
    name, ((share, ratio),) = fit_host_band.measured_source([path])
    t4 = load_chips()["t4"]
    run = {"model": "squeezenet1_1", "phase": "inference", "precision": "fp32", "batch": 1}
    step = predict(analysed(run, t4), t4)["overall"]
    assert ratio == pytest.approx(1e-3 / step["predicted_s"])
    assert share == pytest.approx(step["host_wait_s"] / step["predicted_s"])
    h100 = load_chips()["h100_sxm"]  # the chip the script used to fall back to
    assert ratio != pytest.approx(1e-3 / predict(analysed(run, h100), h100)["overall"][
        "predicted_s"], rel=0.01)
    unknown = _measured_file(tmp_path / "x.json", "Imaginary GPU 9000", {"squeezenet1_1": 1e-3})
    with pytest.raises(FxroofError, match="Imaginary GPU 9000"):
        fit_host_band.measured_source([unknown])


def test_the_training_host_factor_fit_needs_training_runs(tmp_path):
    path = _measured_file(tmp_path / "m.json", "T4", {"squeezenet1_1": 1e-3})
    with pytest.raises(FxroofError, match="no training runs"):
        fit_training_host.main([path, "--chip", "t4"])


def test_the_launch_geometry_fit_recovers_planted_constants():
    """fit_launch_geometry.py on nodes timed by known constants (not the shipped ones): an
    eval batch norm's round trip 0.7 us (planes of 56 x 56, latency-bound) and a block
    0.1 us (planes of 7 x 7, issue-bound), a pooling 2 ns an element per SM -- each
    recovered from the records fxroof writes for those layers on a 132-SM Hopper chip."""
    import math

    import torch

    import fxroof
    from benchmarks import fit_launch_geometry as fit
    from fxroof.chips import load_chips
    from fxroof.launch_geometry import transform_geometry

    chip = load_chips()["h100_sxm"]

    def records(module, shape):
        x = torch.empty(shape)
        return [r for r in fxroof.analyze(module, x, device="cuda", dtype="bfloat16").records()
                if fit.kind_of({**r, "time_s": 1.0})]

    nodes = []
    for shape in ((256, 64, 56, 56), (256, 256, 56, 56), (256, 512, 7, 7), (256, 2048, 7, 7)):
        (r,) = records(torch.nn.BatchNorm2d(shape[1]), shape)
        trips, blocks = transform_geometry(r["shape"], 132, (9, 0))
        nodes.append(("bn", {**r, "time_s": max(trips * 0.7e-6, blocks * 0.1e-6)}))
    found = fit.gather([{"name": "bn", "nodes": [r for _, r in nodes]}], chip)
    fitted = fit.fit_transform(found["bn_eval"], chip)
    assert fitted["ITERATION_LATENCY_S"] == pytest.approx(0.7e-6)
    assert fitted["BLOCK_ISSUE_S"] == pytest.approx(0.1e-6)
    (pool,) = records(torch.nn.MaxPool2d(3, 2, 1), (64, 64, 56, 56))
    pool = {**pool, "time_s": math.prod(pool["shape"]) * 2e-9 / 132}
    found = fit.gather([{"name": "pool", "nodes": [pool]}], chip)
    assert fit.fit_pool(found["pool"], chip)["POOL_OUTPUT_S"] == pytest.approx(2e-9)


def test_the_depthwise_fits_recover_planted_constants():
    """fit_launch_geometry.py on NCHW depthwise convolutions (3x3 and 5x5, and their
    backwards) timed by known constants: 1 ns an output and 0.05 ns a multiply-add per SM
    forward, 2.5 ns an input-gradient element and 0.2 ns a multiply-add backward -- each
    recovered from the records fxroof writes on a 132-SM Hopper chip. One kernel size alone
    cannot tell the forward's two apart, and the fit says so."""
    import math

    import torch

    import fxroof
    from benchmarks import fit_launch_geometry as fit
    from fxroof.chips import load_chips

    chip = load_chips()["h100_sxm"]

    def timed(kernel):
        conv = torch.nn.Conv2d(96, 96, kernel, padding=kernel // 2, groups=96, bias=False)
        x = torch.empty(64, 96, 28, 28, requires_grad=True)
        for r in fxroof.analyze(conv, x, device="cuda", backward=True).records():
            n = math.prod(r.get("shape") or [0])
            if fit.kind_of({**r, "time_s": 1.0}) == "dw_conv":
                yield {**r, "time_s": (n * 1e-9 + r["macs"] * 0.05e-9) / 132}
            elif fit.kind_of({**r, "time_s": 1.0}) == "dw_conv_backward":
                yield {**r, "time_s": (n * 2.5e-9 + r["macs"] * 0.2e-9) / 132}

    found = fit.gather([{"name": "dw", "nodes": [*timed(3), *timed(5)]}], chip)
    assert len(found["dw_conv"]) == len(found["dw_conv_backward"]) == 2
    assert fit.fit_depthwise(found["dw_conv"], chip) == \
        {"DEPTHWISE_OUTPUT_S": pytest.approx(1e-9), "DEPTHWISE_TAP_S": pytest.approx(0.05e-9)}
    assert fit.fit_depthwise_backward(found["dw_conv_backward"], chip) == \
        {"DEPTHWISE_INPUT_GRAD_S": pytest.approx(2.5e-9),
         "DEPTHWISE_WEIGHT_GRAD_S": pytest.approx(0.2e-9)}
    assert set(fit.fit_depthwise(found["dw_conv"][:1], chip).values()) == {None}


def test_the_row_reduction_fit_recovers_planted_constants_at_any_clock():
    """fit_launch_geometry.py on means over H x W (rows of 49 and 196 elements) timed by
    known constants, 30 ns a row and 0.05 ns a byte per SM at the H100's clock: recovered on
    the H100, and on an A100 (1.41 GHz against 1.98) from times 1.40x as long -- the fit
    takes a clocked kind's times to the reference clock first. One row width alone cannot
    tell the two apart, and the fit says so."""
    import math

    import torch

    import fxroof
    from benchmarks import fit_launch_geometry as fit
    from fxroof import launch_geometry
    from fxroof.chips import load_chips

    class Pool(torch.nn.Module):
        def forward(self, x):
            return x.mean((2, 3), keepdim=True)

    def timed(side, slower):
        g = fxroof.analyze(Pool(), torch.empty(64, 480, side, side), device="cuda")
        (r,) = [r for r in g.records() if fit.kind_of({**r, "time_s": 1.0})]
        rows = math.prod(r["shape"])
        return {**r, "time_s": (rows * 30e-9 + r["bytes_read"] * 0.05e-9) / 132 * slower}

    for chip_id, units in (("h100_sxm", 132), ("a100_sxm_80gb", 108)):
        chip = load_chips()[chip_id]
        slower = launch_geometry.REFERENCE_CLOCK_HZ / (19.5e12 / (2 * 64 * 108)) \
            if chip_id.startswith("a100") else 1.0
        nodes = [{**n, "time_s": n["time_s"] * 132 / units} for n in
                 (timed(7, slower), timed(14, slower))]
        found = fit.gather([{"name": "efficientnet_b0", "nodes": nodes}], chip)
        assert fit.fit_row_reduction(found["row_reduction"], chip) == \
            {"REDUCTION_ROW_S": pytest.approx(30e-9), "REDUCTION_BYTE_S": pytest.approx(0.05e-9)}
        assert set(fit.fit_row_reduction(found["row_reduction"][:1], chip).values()) == {None}


@pytest.mark.parametrize("chip", ["mi300x", "epyc_9654"])
def test_the_launch_geometry_fit_refuses_a_chip_without_sms_or_capability(chip):
    """The MI300X lists no compute units nor a CUDA compute capability, a CPU neither: a
    clear error before any profile is read."""
    from benchmarks import fit_launch_geometry
    with pytest.raises(FxroofError, match="not an NVIDIA GPU whose SMs"):
        fit_launch_geometry.main(["no-such-profile.json", "--chip", chip])


def test_the_launch_geometry_fit_names_a_profile_whose_model_it_cannot_trace(tmp_path):
    """A kept profile is traced again to name its loops (with_todays_rules): a model name
    fxroof cannot build is an error naming the file and the model, and --json writes
    nothing."""
    from benchmarks import fit_launch_geometry
    kept = os.path.join(ROOT, "benchmarks", "measured", "h200-profile-efficientnet_b0-b256.json")
    with open(kept) as f:
        profile = json.load(f)
    profile["model"]["name"] = "no_such_model"
    path = tmp_path / "renamed.json"
    path.write_text(json.dumps(profile))
    out = tmp_path / "fit.json"
    with pytest.raises(FxroofError, match=r"'.*renamed.json': tracing the model .*"
                                          r"'no_such_model'"):
        fit_launch_geometry.main([str(path), "--chip", "h200_sxm", "--json", str(out)])
    assert not out.exists()


def test_host_ops_tells_the_ops_python_called_from_the_casts_autocast_issued():
    """host_ops.host_costs on a planted step (us): conv2d 0-30 holding a cast (3-13, inside
    aten::to) and a launch, relu 40-50, a view 52-53; unprofiled, the step took 50. The
    profiler's cost: (53 - 50) / 6 events = 0.5 an event. The cast: 10 - 0.5 = 9.5. The
    ops (the view is none): conv2d 30 - 4 x 0.5 - 9.5 = 18.5 and relu 9.5, median 14, plus
    the median gap between top-level ops (10 and 2) 6: 20. Two ops over 50 us: 25 each."""
    from benchmarks import host_ops
    events = [{"name": "aten::conv2d", "start_us": 0, "end_us": 30, "parent": None},
              {"name": "aten::to", "start_us": 2, "end_us": 14, "parent": 0},
              {"name": "aten::_to_copy", "start_us": 3, "end_us": 13, "parent": 1},
              {"name": "aten::relu", "start_us": 40, "end_us": 50, "parent": None},
              {"name": "aten::view", "start_us": 52, "end_us": 53, "parent": None},
              {"name": "cudaLaunchKernel", "start_us": 20, "end_us": 25, "parent": 0}]
    assert host_ops.host_costs(events, 50e-6) == {
        "ops": 2, "casts": 1, "overhead_us": pytest.approx(0.5), "op_us": pytest.approx(20),
        "cast_us": pytest.approx(9.5), "wall_per_op_us": pytest.approx(25)}


def test_host_ops_records_a_cpu_step_and_summarises_it(tmp_path, capsys):
    """`record` on the CPU (the script's check; the measurement wants CUDA) writes every CPU
    event of a profiled step, and `summary` reads that file back."""
    from benchmarks import host_ops
    out = str(tmp_path / "host.json")
    assert host_ops.main(["record", "--out", out, "--device", "cpu", "--models", "resnet18",
                          "--precision", "fp32", "--warmup", "1", "--steps", "1"]) == 0
    (run,) = json.load(open(out))["runs"]
    assert run["model"] == "resnet18" and run["batch"] == 1 and run["wall_s"] > 0
    names = [e["name"] for e in run["events"]]
    assert names.count("aten::conv2d") == 20 and names.count("aten::linear") == 1
    assert host_ops.main(["summary", out]) == 0
    assert "resnet18 fp32 b1 | " in capsys.readouterr().out
    with pytest.raises(FxroofError, match="exists"):
        host_ops.main(["record", "--out", out, "--device", "cpu", "--models", "resnet18"])


@pytest.mark.parametrize("text, says", [
    ("{}", "is not a file of recorded host events"),
    ("not json", "Cannot read"),
    ('{"benchmark": "host_ops", "runs": [{"model": "m"}]}', "lacks precision"),
    ('{"benchmark": "host_ops", "runs": [{"model": "m", "precision": "fp32", "batch": 1, '
     '"wall_s": 1, "events": [{"name": "a", "start_us": 0, "end_us": 1, "parent": 0}]}]}',
     "event 0 is not a named span")])
def test_host_ops_summary_names_what_is_wrong_with_a_file(tmp_path, text, says):
    """A file `record` did not write is refused in one sentence naming what is wrong."""
    from benchmarks import host_ops
    path = tmp_path / "host.json"
    path.write_text(text)
    with pytest.raises(FxroofError, match=says):
        host_ops.main(["summary", str(path)])
    with pytest.raises(FxroofError, match="No such file"):
        host_ops.main(["summary", str(tmp_path / "missing.json")])
