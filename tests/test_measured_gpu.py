"""A GPU measured with `fxroof chips measure --device cuda`: its probes fitted as NeuSight's
kernel sweeps are (tiles over its multiprocessors, a fixed cost that overlaps the kernel,
memory at the rate of kernels far larger than its L2), and its multiprocessors kept in the
chip entry for prediction. No GPU is needed: the fits run on rows made from known
parameters, the probes are costed on the meta device."""
import math

import numpy as np
import pytest
import torch

import fxroof
from fxroof import calibration as cal, probes
from fxroof.chips import parse_chip
from fxroof.device import GpuShape
from fxroof.errors import FxroofError
from fxroof.time_model import node_time

PEAK, BANDWIDTH = 1e13, 1e12          # FLOP/s, bytes/s
GPU = GpuShape(units=8, l2_bytes=4e6)  # 8 SMs, a 4 MB L2


def _chip(**extra):
    return parse_chip({"id": "gpu-x", "name": "a GPU", "class": "gpu", "vendor": "",
                       "peaks": {"fp32": {"value": PEAK, "unit": "matrix"}},
                       "bandwidth": {"value": BANDWIDTH}, **extra}, "(test)")


def _elementwise_rows():
    """Vector ops timed as t0 = 20 us of which half precedes the kernel, the kernel moving
    bytes at 0.8 of the bandwidth: 1 KB to 2 GB, six of them past 8x the L2 (32 MB)."""
    nbytes = np.concatenate([10 ** np.linspace(3, 7, 30), [5e8, 1e9, 2e9] * 2])
    kernel = nbytes / (0.8 * BANDWIDTH)
    seconds = 10e-6 + np.maximum(10e-6, kernel)  # t0 s + max(t0 (1 - s), kernel), by hand
    return [cal.Row(b / 8, b, 0.0, s, math.inf) for b, s in zip(nbytes, seconds)]


def _gemm_rows(rng):
    """GEMMs on 8 SMs with a 64-wide tile at 0.8 of a 128-wide one's rate, the compute
    fraction 0.7, t0 8 us (utilization has its own hand-worked tests)."""
    m, n, k = (np.round(10 ** rng.uniform(1.5, 3.6, 120)) for _ in range(3))
    flops, nbytes = 2 * m * n * k, 4 * (m * k + k * n + m * n)
    used = cal.utilization(1, m, n, k, GPU.units, 0.8)
    seconds = 8e-6 + np.maximum(flops / (PEAK * 0.7 * used), nbytes / (0.6 * BANDWIDTH))
    return [cal.Row(f, b, 0.0, s, kk, dims=(1.0, mm, nn, kk))
            for f, b, s, mm, nn, kk in zip(flops, nbytes, seconds, m, n, k)]


def test_a_gpu_fit_holds_the_streaming_rate_and_finds_the_overlap():
    entry = probes.fit_classes({"elementwise": _elementwise_rows()}, _chip(), 0.0, "synthetic",
                               gpu=GPU)["elementwise"]
    # the median of the six large rows' bytes/s: 0.8 less the 10 us before each kernel
    # (2.5 ms for 2 GB: 0.4%, 1.25 ms for 1 GB: 0.8%)
    assert entry["memory"] == pytest.approx(0.8 * 1.25e-3 / (1.25e-3 + 10e-6), rel=1e-3)
    assert entry["t0"] == pytest.approx(20e-6, rel=0.05)
    assert entry["serial"] == pytest.approx(0.5, rel=0.05)
    assert 0.95 <= entry["band"][0] <= entry["band"][1] <= 1.05


def test_without_a_streaming_probe_the_rate_and_the_overlap_trade_so_neither_is_known():
    """Why the GPU sweep adds probes past 8x the L2: below it, the rows whose kernel outlasts
    the overlapped 10 us take t0 s + B / (W m), and (s, m) = (0.5, 0.8) and (0.625, 1.0)
    give the same times (10 MB: 10 + 12.5 = 12.5 + 10 = 22.5 us), so the data cannot say
    which; the rate is left free there (streaming_fraction has nothing to read) and the fit
    reproduces the rows with whichever pair it lands on."""
    rows = [r for r in _elementwise_rows() if r.bytes < 8 * GPU.l2_bytes]
    assert cal.streaming_fraction([r.bytes for r in rows], [r.seconds for r in rows],
                                  BANDWIDTH, GPU.l2_bytes, 1) is None
    nbytes = np.array([r.bytes for r in rows])
    other = 12.5e-6 + np.maximum(7.5e-6, nbytes / BANDWIDTH)
    assert np.allclose(other, [r.seconds for r in rows], rtol=1e-9)
    entry = probes.fit_classes({"elementwise": rows}, _chip(), 0.0, "synthetic",
                               gpu=GPU)["elementwise"]
    assert 0.99 <= entry["band"][0] <= entry["band"][1] <= 1.01


def test_a_gpu_gemm_fit_finds_its_tiles_and_a_cpu_fit_has_none():
    rows = {"gemm": _gemm_rows(np.random.default_rng(3))}
    gpu = probes.fit_classes(rows, _chip(), 0.0, "synthetic", gpu=GPU)["gemm"]
    assert gpu["compute"] == pytest.approx(0.7, rel=0.03)
    assert gpu["small_tile"] == pytest.approx(0.8, rel=0.03)
    assert "serial" not in gpu  # a GEMM's fixed cost is fitted as before the kernel
    cpu = probes.fit_classes(rows, _chip(), 0.0, "synthetic")["gemm"]
    assert cpu["small_tile"] == 1.0


def test_a_gpu_convolution_takes_the_elementwise_streaming_rate_and_fits_its_rise_with_k():
    """Convolutions on cuDNN's tiles whose rate rises as k / (k + 80), compute fraction 0.7,
    t0 8 us: the fit finds k_half and holds memory at the elementwise class's rate."""
    rng = np.random.default_rng(4)
    m, n, k = (np.round(10 ** rng.uniform(a, b, 150)) for a, b in ((2.5, 4.5), (1, 2.7),
                                                                   (1.2, 3.5)))
    flops, nbytes = 2 * m * n * k, 4 * (m * k / 9 + k * n + m * n)
    used = cal.utilization(1, m, n, k, GPU.units, 0.8, 80.0, cal.CONV_TILING)
    seconds = 8e-6 + flops / (PEAK * 0.7 * used)
    conv = [cal.Row(f, b, 0.0, s, kk, dims=(1.0, mm, nn, kk))
            for f, b, s, mm, nn, kk in zip(flops, nbytes, seconds, m, n, k)]
    entries = probes.fit_classes({"conv": conv, "elementwise": _elementwise_rows()}, _chip(),
                                 0.0, "synthetic", gpu=GPU)
    assert entries["conv"]["memory"] == entries["elementwise"]["memory"]
    assert entries["conv"]["k_half"] == pytest.approx(80.0, rel=0.05)
    assert entries["conv"]["compute"] == pytest.approx(0.7, rel=0.03)


@pytest.mark.parametrize("l2_bytes", [4e6, 50e6])
def test_the_streaming_probes_move_past_8x_the_l2_by_fxroofs_own_costs(l2_bytes):
    found = probes.streaming_probes(l2_bytes)
    assert {c for c, *_ in found} == {"elementwise", "norm", "softmax", "pool", "copy"}
    for op_class, label, make, shape in found:
        module = make()
        row = probes._cost(module, shape, op_class, 1.0)  # costed on the meta device
        assert row.bytes >= cal.STREAMING_L2_MULTIPLE * l2_bytes, label
        assert row.bytes <= 30 * l2_bytes, label  # and not far past: a GPU's memory is finite


def test_the_gpu_convolution_probes_fill_a_gpu_by_fxroofs_own_costs():
    """PROBES' batch-1 convolutions are launch-bound on a GPU (20-40 us on an H200), which
    left a measured GPU's convolution rate unknown; these last over 100 us each at an H100's
    TF32 peak (the roof fp32 convolutions run at), or stream over 8x a 50 MB L2."""
    h100 = fxroof.chips.get_chip("h100_sxm")
    found = probes.GPU_CONV_PROBES
    assert {c for c, *_ in found} == {"conv", "conv_cl"}
    assert len([p for p in found if p[0] == "conv"]) == len([p for p in found
                                                            if p[0] == "conv_cl"])
    for op_class, label, make, shape in found:
        conv = make()
        batch, _, size, _ = shape
        out = (size + 2 * conv.padding[0] - conv.kernel_size[0]) // conv.stride[0] + 1
        # by hand: 2 FLOP per multiply-add, each output point reads C_in / groups x k x k
        flops = 2 * batch * conv.out_channels * out * out * (
            conv.in_channels // conv.groups) * conv.kernel_size[0] ** 2
        row = probes._cost(conv, shape, op_class, 1.0)
        assert row.flops == flops, label
        if "depthwise" not in label:
            assert flops / h100.peaks["tf32"] > 100e-6, label
        else:  # input and output, fp32, by hand
            moved = 4 * batch * (conv.in_channels * size ** 2 + conv.out_channels * out ** 2)
            assert moved > cal.STREAMING_L2_MULTIPLE * 50e6, label
        assert row.bytes < 2e9, label  # fits beside the rest on a 16 GB card


def test_only_the_gpu_convolution_probes_pin_the_convolution_rate():
    """Convolutions timed from known parameters on an H100-like GPU (132 SMs): t0 20 us,
    compute 0.6 of the peak, tiles at 0.8 of a full one's rate, rising as k / (k + 80).
    PROBES' batch-1 shapes alone are fitted exactly by another set (all launch-bound or
    small), so they cannot tell the rate; with GPU_CONV_PROBES the fit recovers it."""
    gpu = GpuShape(units=132, l2_bytes=50e6)
    peak, bandwidth = 400e12, 4e12
    chip = parse_chip({"id": "gpu-x", "name": "a GPU", "class": "gpu", "vendor": "",
                       "peaks": {"fp32": {"value": peak, "unit": "matrix"}},
                       "bandwidth": {"value": bandwidth}}, "(test)")
    streaming = [cal.Row(b / 8, b, 0.0, 10e-6 + max(10e-6, b / (0.85 * bandwidth)), math.inf)
                 for b in np.concatenate([10 ** np.linspace(3, 7, 30), [5e8, 1e9, 2e9] * 2])]

    def fitted(probe_list):
        rows = []
        for op_class, label, make, shape in probe_list:
            if op_class == "conv":
                row = probes._cost(make(), shape, op_class, 1.0)
                used = float(cal.utilization(*row.dims, gpu.units, 0.8, 80.0,
                                             cal.CONV_TILING))
                rows.append(row._replace(seconds=20e-6 + max(
                    row.flops / (peak * 0.6 * used), row.bytes / (0.85 * bandwidth))))
        return probes.fit_classes({"conv": rows, "elementwise": streaming}, chip, 0.0,
                                  "synthetic", gpu=gpu)["conv"]

    alone = fitted(probes.PROBES)
    assert abs(alone["compute"] / 0.6 - 1) > 0.1  # another set fits those rows as well
    full = fitted(probes.PROBES + probes.GPU_CONV_PROBES)
    assert full["compute"] == pytest.approx(0.6, rel=0.02)
    assert full["k_half"] == pytest.approx(80.0, rel=0.05)
    assert full["small_tile"] == pytest.approx(0.8, rel=0.02)


def test_a_gpu_sweep_runs_the_gpu_probes_and_a_cpu_sweep_does_not(monkeypatch):
    ran = []
    tiny = [("conv", "gpu conv", lambda: torch.nn.Conv2d(2, 2, 1), (1, 2, 4, 4))]
    monkeypatch.setattr(probes, "PROBES", [])
    monkeypatch.setattr(probes, "GPU_CONV_PROBES", tiny)
    monkeypatch.setattr(probes, "streaming_probes", lambda l2: [])
    for gpu in (GPU, None):
        monkeypatch.setattr(probes, "gpu_shape", lambda device, gpu=gpu: gpu)
        ran.append(probes.sweep(torch.device("cpu"), progress=lambda m: None))
    assert [len(rows.get("conv", [])) for rows in ran] == [1, 0]


def test_a_gpu_probe_keeps_the_fastest_of_many_runs_even_when_quick(monkeypatch):
    counts = []
    tiny = [("elementwise", "relu", lambda: torch.nn.ReLU(), (8,))]
    monkeypatch.setattr(probes, "PROBES", tiny)
    monkeypatch.setattr(probes, "GPU_CONV_PROBES", [])
    monkeypatch.setattr(probes, "streaming_probes", lambda l2: [])
    monkeypatch.setattr(probes, "repeat",
                        lambda fn, warmup, repeats: counts.append(repeats) or [fn()])
    for gpu in (GPU, None):
        monkeypatch.setattr(probes, "gpu_shape", lambda device, gpu=gpu: gpu)
        probes.sweep(torch.device("cpu"), quick=True)
    assert counts == [probes.GPU_REPEATS, 3] and probes.GPU_REPEATS >= 10


def test_a_measured_gpu_keeps_its_multiprocessors_and_its_gemms_are_tiled_over_them():
    """A 640 x 128 output is five 128-wide tiles: on 4 SMs two waves, 5/8 of the work issued
    useful (64-wide tiles made too slow to compete), so its compute time is 8/5 of the
    untiled one's."""
    params = {"t0": 1e-6, "compute": 0.5, "memory": 1.0, "small_tile": 0.01,
              "band": [1, 1]}
    tiled = _chip(multiprocessors={"value": 4, "source": "test"},
                  calibration={"gemm": params})
    untiled = _chip(calibration={"gemm": params})
    assert tiled.multiprocessors == 4 and untiled.multiprocessors is None
    graph = fxroof.analyze(torch.nn.Linear(4096, 128, bias=False), torch.empty(640, 4096),
                           device="cuda", chip=tiled)
    record = next(r for r in graph.records() if r["op_class"] == "matrix")
    flops = 2 * 640 * 4096 * 128
    assert record["flops"] == flops
    assert node_time(record, untiled).predicted_s == pytest.approx(
        1e-6 + flops / (PEAK * 0.5))
    assert node_time(record, tiled).predicted_s == pytest.approx(
        1e-6 + flops / (PEAK * 0.5 * 5 / 8))


@pytest.mark.parametrize("value", [0, -3, 1.5, "many", True, 10 ** 6])
def test_multiprocessors_must_be_a_whole_number(value):
    with pytest.raises(FxroofError, match="multiprocessors"):
        _chip(multiprocessors={"value": value})


def test_a_matrix_vector_product_on_a_gpu_is_one_pass_over_its_weights():
    """A batch-1 Linear(9216, 4096) in FP32 on the A100 80GB (alexnet's first classifier
    layer): cuBLAS runs it as a GEMV, so it is priced at its bytes over the bandwidth times
    the chip's streaming rate (its elementwise class's memory fraction: a GEMV streams the
    matrix as a copy does), plus the fixed cost -- not as a 128-row tile with one useful row
    (622 us before, against 74 us for its 151 MB at the spec bandwidth), nor at the GEMM
    class's memory fraction (1.0 on this chip, fitted on tiled products)."""
    from fxroof.chips import get_chip
    from fxroof.chip_params import calibration

    chip = get_chip("a100_sxm_80gb")
    graph = fxroof.analyze(torch.nn.Linear(9216, 4096, bias=False), torch.empty(1, 9216),
                           device="cuda", chip=chip)
    record = next(r for r in graph.records() if r["op_class"] == "matrix")
    weights = 9216 * 4096 * 4
    assert weights <= record["bytes"] <= weights * 1.01
    gemm = calibration().params("a100_sxm_80gb", "gpu", "gemm")
    streaming = calibration().params("a100_sxm_80gb", "gpu", "elementwise").memory
    assert (gemm.memory, streaming) == (1.0, 0.8611)
    compute = 2 * 9216 * 4096 / (chip.peaks["fp32"] * gemm.compute)
    memory = record["bytes"] / (chip.bandwidth * streaming)
    assert memory > compute
    assert node_time(record, chip).predicted_s == pytest.approx(gemm.t0 + memory)


def test_a_gpu_calibration_fits_its_probes_alone(monkeypatch):
    """On a GPU the calibration runs' nodes, timed by events around their kernels without
    the host's fixed cost the probes hold, are not mixed into the fit; the probes are fitted
    the GPU's way (here made from known parameters: an overlapped fixed cost, found)."""
    from fxroof.model_probes import Run

    runs_timed = []
    monkeypatch.setattr(probes, "gpu_shape", lambda device: GPU)
    monkeypatch.setattr(probes, "probe_rows",
                        lambda *a, **k: {"elementwise": _elementwise_rows()})
    monkeypatch.setattr(probes, "model_rows",
                        lambda device, models, **k: runs_timed.extend(models) or {})
    monkeypatch.setattr(probes, "fresh_rate", lambda *a: 0.0)
    monkeypatch.setattr(probes, "pointwise_layout_rate", lambda *a: 0.0)
    compiled = []
    from fxroof import compiled_probes  # calibrate imports it where compiled probes are asked

    monkeypatch.setattr(compiled_probes, "calibrate_generated",
                        lambda *a: compiled.append(a) or {})
    said = []
    entries = probes.calibrate("cpu", _chip(), models=[Run("resnet18", 1)],
                               progress=said.append, compiled=True)
    assert runs_timed == [] and any("calibration models skipped" in line for line in said)
    # the compiled probes time a CPU's generated kernels: on an H200, lowering them for
    # the GPU failed, and a GPU prices its Triton kernels with its elementwise class
    assert compiled == [] and any("compiled probes skipped" in line for line in said)
    assert entries["elementwise"]["serial"] == pytest.approx(0.5, rel=0.05)
    assert "nodes of" not in entries["elementwise"]["source"]


@pytest.mark.parametrize("shape, vendor, capability, clock", [
    (GpuShape(132, 50e6, "NVIDIA", (9, 0), 1.98e9), "NVIDIA", (9, 0), 1.98e9),
    (GpuShape(304, 256e6, "AMD"), "AMD", None, None),  # ROCm: no CUDA compute capability
])
def test_a_measured_gpu_records_its_vendor_and_compute_capability(monkeypatch, shape, vendor,
                                                                  capability, clock):
    """What the launch-geometry bounds read of a chip (fxroof.launch_geometry): a measured
    GPU's entry names its vendor and, under CUDA, its compute capability and SM clock,
    beside its SMs, and loads back with them (the device's measurements stubbed: no GPU
    needed)."""
    from fxroof import measure
    from fxroof.timers import summarize
    monkeypatch.setattr(measure, "check_device", lambda device: torch.device("cuda"))
    monkeypatch.setattr(measure, "gpu_shape", lambda dev: shape)
    monkeypatch.setattr(measure, "measure_peaks", lambda dev, quick, say: {
        "fp32": {"value": PEAK, "unit": "matrix", "derivation": "stub"}})
    monkeypatch.setattr(measure, "copy_bandwidth", lambda dev, nbytes, runs: (BANDWIDTH,
                                                                        summarize([1.0, 1.0])))
    monkeypatch.setattr(measure, "op_overhead", lambda dev, runs: 5e-6)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev: "a GPU")
    chip = parse_chip(measure.measure("cuda"), "(test)")
    assert (chip.vendor, chip.compute_capability, chip.multiprocessors, chip.clock) == \
        (vendor, capability, shape.units, clock)
