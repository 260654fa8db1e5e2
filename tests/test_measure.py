"""Measured roofs of this machine: a quick CPU measurement saved as a user chip."""
import math
import types

import pytest
import torch

import fxroof
from fxroof import chips as chips_module
from fxroof import files
from fxroof import measure as measure_module
from fxroof.chips import lint, load_chips, parse_chip


@pytest.fixture
def chip_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FXROOF_CHIPS_DIR", str(tmp_path))
    return tmp_path


def test_quick_cpu_measurement_is_a_valid_linted_chip(chip_dir, capsys):
    from fxroof.cli import main

    assert main(["chips", "measure"]) == 0
    out = capsys.readouterr().out
    assert "this-cpu" in out and "use --chip this-cpu" in out
    saved = chip_dir / "this-cpu.yaml"
    assert saved.exists()
    chip = load_chips()["this-cpu"]  # found in the user chip folder, no --chips-file needed
    assert chip.cls == "cpu" and chip.peaks["fp32"] > 1e9
    assert lint(chip) == []
    assert "fxroof chips measure" in chip.sources[0] and "(measured)" in chip.name
    assert chip.sources[0].endswith("host allocator glibc")  # what its fault rate is of
    # the calibrated time model of this device, one parameter set per op class, is used
    assert set(chip.calibration) == {"gemm", "gemv", "conv", "conv_cl", "conv_native",
                                     "elementwise", "math", "random", "pool", "pool_scatter",
                                     "copy", "norm", "softmax", "conv_bwd_dw",
                                     "conv_bwd_dw_wide", "conv_bwd_dw_wide_cl"}
    # each class's band, measured / predicted p10..p90 over its probes, lies about its fit:
    # around 1, but a fit held at a bound (a fraction at its cap) can leave the few probes of
    # a class a little to one side -- a measurement beside another process once did
    for name, params in chip.calibration.items():
        low, high = params.band
        assert 0 < low <= high and low <= 1.1 and high >= 0.9 and params.t0 > 0, \
            (name, params.band, params.t0)
    g = fxroof.analyze("tests.fixtures.user_models:small_net", input_shapes=[(2, 3, 16, 16)])
    assert g.roofline(chip)["forward"]["model"] == "calibrated"
    # a second run refuses to overwrite, before measuring
    assert main(["chips", "measure"]) == 1
    assert "--force" in capsys.readouterr().err


def test_a_chip_saved_outside_the_chip_folder_says_how_to_name_it(chip_dir, monkeypatch,
                                                                   capsys):
    from fxroof import commands
    from fxroof.cli import main

    entry = measure_module.measure("cpu", quick=True)  # the roofs only: what is saved here
    monkeypatch.setattr(commands, "measure_calibrated", lambda *a, **k: entry)
    elsewhere = chip_dir / "elsewhere" / "mine.yaml"  # a new folder, not the chip folder
    assert main(["chips", "measure", "--out", str(elsewhere)]) == 0
    assert f"use --chip this-cpu --chips-file {elsewhere}" in capsys.readouterr().out
    assert "this-cpu" in load_chips([str(elsewhere)])
    assert main(["chips", "measure", "--out", str(chip_dir / "this-cpu.yaml")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("use --chip this-cpu")  # found as is


@pytest.mark.parametrize("where", ["under_a_file", "refuses_files"])
def test_an_out_path_that_cannot_be_written_fails_before_measuring(tmp_path, monkeypatch,
                                                                    capsys, where):
    from fxroof import commands
    from fxroof.cli import main

    def measured(*args, **kwargs):
        raise AssertionError("measured before the output path was checked")

    monkeypatch.setattr(commands, "measure_calibrated", measured)
    if where == "under_a_file":
        (tmp_path / "notes.txt").write_text("mine")
        out, reason = tmp_path / "notes.txt" / "chips" / "x.yaml", "is a file, not a folder"
    else:  # /proc, a read-only mount: the folder exists, passes os.access, takes no file
        def refuse(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(files.tempfile, "mkstemp", refuse)
        out, reason = tmp_path / "x.yaml", "takes no new file (Permission denied)"
    assert main(["chips", "measure", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert reason in err and "Nothing was measured" in err and "Traceback" not in err
    assert (tmp_path / "notes.txt").read_text() == "mine" if where == "under_a_file" else True
    assert not out.exists()


def test_predict_and_profile_on_the_measured_chip(chip_dir, capsys):
    from fxroof.cli import main

    entry = measure_module.measure("cpu", quick=True)
    measure_module.save(entry)
    assert main(["predict", "tests.fixtures.user_models:small_net", "--input-shape", "2,3,16,16",
                 "--chip", "this-cpu"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("chip "))
    assert "(measured)" in out and "page faults" in header
    g = fxroof.analyze("resnet18", batch=2)
    g.time(repeats=2, warmup=1)
    from fxroof import prediction

    rows = prediction.where_to_look(g.records(), load_chips()["this-cpu"], top=3)
    assert rows and all(r["fraction_of_roof"] is not None for r in rows)


@pytest.mark.parametrize("mapped, allocator", [
    ("7f12a000-7f12c000 r-xp 00000000 08:01 5 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal"
     ".so.4.5.10\n", "tcmalloc"),
    ("7f12a000-7f12c000 r-xp 00000000 08:01 5 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n",
     "jemalloc"),
    ("7f12a000-7f12c000 r-xp 00000000 08:01 5 /usr/lib/x86_64-linux-gnu/libc.so.6\n", "glibc"),
    ("", "glibc"),  # no /proc: not Linux
])
def test_the_host_allocator_is_read_from_the_process_memory_map(mapped, allocator):
    from fxroof.device import host_allocator

    assert host_allocator(mapped) == allocator


def test_no_fault_rate_is_measured_under_an_allocator_fxroof_does_not_replay(monkeypatch):
    # under tcmalloc a new output's pages are the process's own: timing the two ReLUs would
    # measure cache effects, not glibc's faults, so the chip gets no fault rate at all
    from fxroof import probes

    monkeypatch.setattr(probes, "host_allocator", lambda: "tcmalloc")
    assert probes.fresh_rate(torch.device("cpu"), 1) == 0.0


def test_saved_entry_round_trips_through_the_loader(chip_dir):
    entry = {"id": "this-cpu", "name": "box", "class": "cpu", "peaks":
             {"fp32": {"value": 1e11, "unit": "matrix", "derivation": "measured"}},
             "bandwidth": {"value": 2e10, "derivation": "measured"}, "sources": ["test"]}
    path = measure_module.save(entry)
    assert parse_chip(entry, path).peaks == {"fp32": 1e11}
    assert chips_module.read_file(path)[0].bandwidth == 2e10
    with pytest.raises(fxroof.FxroofError, match="does not overwrite"):
        measure_module.save(entry)


@pytest.mark.parametrize("reported, chip_id", [
    ("NVIDIA A100-SXM4-80GB", "a100_sxm_80gb"), ("NVIDIA A100-SXM4-40GB", "a100_sxm_40gb"),
    ("NVIDIA H100 80GB HBM3", "h100_sxm"), ("Tesla T4", "t4"), ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA H100 PCIe", "h100_pcie"), ("x86_64 (2 threads)", None),
    ("NVIDIA RTX A6000", "rtx_a6000"), ("NVIDIA RTX 6000 Ada Generation", "rtx_6000_ada"),
    ("Quadro RTX 6000", None),  # Turing, not the Ada board of the same number
    ("Quadro RTX 8000", "quadro_rtx_8000"), ("NVIDIA A10", "a10"), ("NVIDIA A10G", None),
    ("NVIDIA GeForce RTX 3090", "rtx_3090"), ("NVIDIA GeForce RTX 4090", "rtx_4090"),
    ("Tesla P100-PCIE-16GB", "p100_pcie_16gb"), ("Tesla P4", "p4"), ("Tesla P40", None),
    ("AMD Instinct MI250X/MI250", "mi250x_gcd"),  # one device is one of its two dies
    ("AMD Instinct MI210", "mi210"), ("NVIDIA A100-PCIE-40GB", "a100_pcie_40gb"),
    ("NVIDIA A100 80GB PCIe", "a100_pcie_80gb"), ("Tesla V100-PCIE-32GB", "v100_pcie_32gb"),
    ("Tesla V100-SXM2-16GB", "v100_sxm2"),
])
def test_measured_device_finds_its_datasheet(reported, chip_id):
    from fxroof.measure import datasheet_chip

    found = datasheet_chip(f"{reported} (measured)", load_chips())
    assert (found.id if found else None) == chip_id


def test_versus_datasheet_compares_the_roofs_both_list():
    from fxroof.measure import versus_datasheet

    sheet = load_chips()["a100_sxm_80gb"]
    measured = parse_chip({"id": "this-gpu", "name": "A100 (measured)", "class": "gpu",
                           "peaks": {"fp32": {"value": 18.0e12, "unit": "matrix"},
                                     "bf16": {"value": 280e12, "unit": "matrix"},
                                     "fp8": {"value": 1e12, "unit": "matrix"}},
                           "bandwidth": 1.6e12}, "x")
    rows = {r["what"]: r for r in versus_datasheet(measured, sheet)}
    assert set(rows) == {"fp32 peak (FLOP/s)", "bf16 peak (FLOP/s)", "bandwidth (B/s)"}
    assert rows["bf16 peak (FLOP/s)"]["fraction"] == pytest.approx(280 / 312)
    assert rows["bandwidth (B/s)"]["fraction"] == pytest.approx(1.6e12 / 2039e9)


def test_profile_against_another_machines_roof_says_it_is_a_what_if(chip_dir, capsys):
    """`profile resnet18 --chip a100_sxm_80gb` printed 0% of roof on every row, CPU times
    against a GPU's roofs, without a word; this machine's measured chip needs no caveat."""
    from fxroof.cli import main

    measure_module.save(measure_module.measure("cpu", quick=True))
    small = ["tests.fixtures.user_models:small_net", "--input-shape", "2,3,16,16",
             "--repeats", "1", "--warmup", "0"]
    assert main(["profile", *small, "--chip", "a100_sxm_80gb"]) == 0
    out = capsys.readouterr().out
    assert "(a what-if: another machine)" in out.splitlines()[0]
    assert "What-if: these times were measured on cpu" in out
    assert "fxroof predict tests.fixtures.user_models:small_net --chip a100_sxm_80gb" in \
        " ".join(out.split())
    assert main(["profile", *small, "--chip", "this-cpu"]) == 0
    assert "what-if" not in capsys.readouterr().out.lower()


def test_a_peak_is_the_fastest_run_and_a_busy_machine_is_named(monkeypatch):
    """A roof is the best sustained rate: the fastest repeat, not the median (on a busy
    machine a median-based roof sat below what layers achieved); a wide spread warns."""
    from fxroof.timers import summarize

    runs = [0.010, 0.016, 0.018, 0.020, 0.021]  # median / fastest = 1.8: busy
    monkeypatch.setattr(measure_module, "_timed", lambda fn, device, repeats: summarize(runs))
    said = []
    peaks = measure_module.measure_peaks(measure_module.check_device("cpu"), quick=True,
                                         say=said.append)
    n = 2048  # quick fp32 GEMM size on a CPU
    assert peaks["fp32"]["value"] == pytest.approx(2 * n ** 3 / 0.010, rel=1e-3)
    assert "fastest of 5" in peaks["fp32"]["derivation"]
    assert any("looks busy" in line and "1.80x" in line for line in said)
    calm = [0.010, 0.0101, 0.0102, 0.0103, 0.0104]
    monkeypatch.setattr(measure_module, "_timed", lambda fn, device, repeats: summarize(calm))
    said.clear()
    measure_module.measure_peaks(measure_module.check_device("cpu"), quick=True, say=said.append)
    assert not any("busy" in line for line in said)


def test_a_cpus_fp32_roof_is_the_fastest_of_several_shapes_and_says_which(monkeypatch):
    """A BLAS's rate moves with the shape (108-127 GFLOP/s over eight on a 2-core EPYC), and a
    roof below what a model's products reach capped the gemm class's fit: a CPU's fp32 roof
    is the fastest of the square and CPU_FP32_SHAPES, each listed in the derivation; other
    dtypes, and a GPU, keep their square."""
    from fxroof.timers import summarize

    rates = {(2048, 2048, 2048): 100e9, (512, 1024, 1024): 125e9, (1536, 3072, 768): 110e9}
    timed = []

    def product(device, dtype, shape, repeats, tf32=False):
        timed.append((dtype, shape, repeats))
        rate = rates.get(shape, 50e9) if dtype == torch.float32 else 1e9
        return rate, summarize([2 * math.prod(shape) / rate] * repeats)

    monkeypatch.setattr(measure_module, "product_flops", product)
    peaks = measure_module.measure_peaks(measure_module.check_device("cpu"), quick=True,
                                         say=lambda message: None)
    fp32 = peaks["fp32"]
    assert fp32["value"] == pytest.approx(125e9)
    assert fp32["derivation"].startswith("measured: torch.mm 512x1024 @ 1024x1024 fp32")
    for listed in ("2048x2048 (100 GFLOP/s)", "512x1024 @ 1024x1024 (125 GFLOP/s)",
                   "1536x3072 @ 3072x768 (110 GFLOP/s)"):
        assert listed in fp32["derivation"]
    # (gemm_size grows the square from 512, timing each size once on the way)
    assert {shape for dtype, shape, runs in timed if dtype == torch.float32 and runs == 5} \
        == set(rates)
    assert peaks["fp64"]["derivation"].startswith("measured: torch.mm 512x512 fp64")  # slow
    assert "fastest of 5" in peaks["fp64"]["derivation"] and "GFLOP/s" not in \
        peaks["fp64"]["derivation"]


def test_a_dtype_its_engine_runs_slowly_is_measured_on_a_smaller_gemm(monkeypatch):
    """bf16 on a CPU without AVX512-BF16 or AMX runs about 1 GFLOP/s: its configured 2048^3
    GEMM took 20 s a repeat. A GEMM grows from 512, doubling, while the next size's 8x work
    stays within the budget; a fast engine still reaches its configured size."""
    from fxroof.timers import summarize

    rates = {torch.float32: 100e9, torch.float64: 50e9, torch.bfloat16: 1e9}  # FLOP/s
    sizes = []

    def gemm(device, dtype, n, repeats, tf32=False):
        sizes.append((dtype, n))
        seconds = 2 * n ** 3 / rates[dtype]
        return rates[dtype], summarize([seconds] * repeats)

    monkeypatch.setattr(measure_module, "gemm_flops", gemm)
    monkeypatch.setattr(measure_module, "product_flops",
                        lambda device, dtype, shape, repeats, tf32=False:
                        gemm(device, dtype, shape[0], repeats, tf32))
    said = []
    peaks = measure_module.measure_peaks(measure_module.check_device("cpu"), quick=False,
                                         say=said.append)
    # full: 2 s a GEMM. fp32 4096^3 at 100 GFLOP/s is 1.37 s; bf16 1024^3 at 1 GFLOP/s is
    # 2.15 s, so bf16 stops at 512 (0.27 s); fp64 2048^3 at 50 GFLOP/s is 0.34 s
    assert "torch.mm 4096x4096 fp32" in peaks["fp32"]["derivation"]
    assert "torch.mm 2048x2048 fp64" in peaks["fp64"]["derivation"]
    assert "torch.mm 512x512 bf16" in peaks["bf16"]["derivation"]
    assert "GEMM bf16 512x512 (a larger one would take over 2 s)" in said
    assert (torch.bfloat16, 2048) not in sizes and (torch.bfloat16, 1024) not in sizes
    sizes.clear()
    peaks = measure_module.measure_peaks(measure_module.check_device("cpu"), quick=True,
                                         say=said.append)
    # quick: 0.5 s. fp32 2048^3 is 0.17 s: its configured size
    assert "torch.mm 2048x2048 fp32" in peaks["fp32"]["derivation"]
    assert "torch.mm 512x512 bf16" in peaks["bf16"]["derivation"]


@pytest.mark.parametrize("capability,has_tf32", [((9, 0), True), ((8, 0), True),
                                                 ((7, 5), False)])
def test_a_gpu_from_ampere_on_measures_its_tf32_roof(monkeypatch, capability, has_tf32):
    """cuDNN runs fp32 convolutions in TF32 by default, and the roofline prices them at the
    chip's tf32 peak: a measured GPU without one priced them at the CUDA cores' fp32 rate
    (resnet50 b256 on an H200 at 3.5x its time). A T4 (sm75) has no TF32."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    sizes = measure_module._gemm_sizes(torch.device("cuda"), quick=True)
    assert ("tf32" in sizes) == has_tf32
    assert {"fp32", "bf16", "fp16", "fp64"} <= set(sizes)
    assert sizes["fp32"][0] == torch.float32 and sizes.get("tf32", sizes["fp32"])[0] == \
        torch.float32


def test_the_tf32_gemm_runs_with_tf32_allowed_and_puts_the_setting_back(monkeypatch):
    from fxroof.timers import summarize

    seen = []

    def timed(fn, device, repeats):
        seen.append(torch.backends.cuda.matmul.allow_tf32)
        return summarize([1.0])
    monkeypatch.setattr(measure_module, "_timed", timed)
    before = torch.backends.cuda.matmul.allow_tf32
    cpu = measure_module.check_device("cpu")
    measure_module.gemm_flops(cpu, torch.float32, 8, 1, tf32=True)
    measure_module.gemm_flops(cpu, torch.float32, 8, 1)
    assert seen == [True, False] and torch.backends.cuda.matmul.allow_tf32 == before


def test_longer_probe_chains_compile_to_more_kernels():
    """The per-kernel and per-call costs of compiled code are told apart by chains whose
    kernel counts differ: Inductor must not fuse a longer chain into as few kernels."""
    from fxroof import compiled_probes

    counts = [len(compiled_probes._kernels(compiled_probes._Chain(steps), (8, 8), False))
              for steps in compiled_probes.CHAINS]
    assert counts == sorted(set(counts)) and counts[0] >= 1


def test_the_generated_fits_recover_the_costs_their_timings_were_made_from(monkeypatch):
    """Timings made from known costs -- 20 us per compiled call, 3 us per kernel, fused
    kernels moving bytes at a quarter of 1e10 B/s and transposing copies at a tenth -- with
    kernels of known size: each class's fit finds the per-kernel cost and its own memory
    rate again and predicts every probe within 1%; the transposes keep the fused compute
    rate (they compute nothing to fit one on)."""
    from fxroof import compiled_probes as cp

    per_call, per_kernel, fused_rate, transpose_rate = 20e-6, 3e-6, 0.25 * 1e10, 0.1 * 1e10

    def kernels(module, shape, channels_last):
        if isinstance(module, cp._Chain):  # 3 kernels per step, too small to count bytes
            return [{"op": "fused", "op_class": "vector", "flops": 0, "bytes": 0,
                     "bytes_written": 0}] * (3 * module.steps)
        numel = int(torch.Size(shape).numel())
        if isinstance(module, cp._Relayout):
            return [{"op": "copy", "op_class": "memory", "flops": 0, "bytes": 8 * numel,
                     "bytes_written": 4 * numel, "rule": "inductor generated[transposing]"}]
        return [{"op": "fused", "op_class": "vector", "flops": 3 * numel, "bytes": 8 * numel,
                 "bytes_written": 4 * numel}]

    def seconds(module, x, watch, repeats):
        rate = transpose_rate if isinstance(module, cp._Relayout) else fused_rate
        found = kernels(module, tuple(x.shape), False)
        return per_call + sum(per_kernel + k["bytes"] / rate for k in found)

    monkeypatch.setattr(cp, "_kernels", kernels)
    monkeypatch.setattr(cp, "_seconds", seconds)
    entries = cp.calibrate_generated(torch.device("cpu"), peak=1e11, bandwidth=1e10,
                                     quick=True)
    assert set(entries) == {"fused", "transpose"}
    for entry in entries.values():
        assert entry["t0"] == pytest.approx(per_kernel, rel=1e-3)
        assert "20.0 us per compiled call" in entry["source"]
        assert 0.99 <= entry["band"][0] <= entry["band"][1] <= 1.01
        assert entry["vector_lanes"] == cp.vector_lanes(torch.device("cpu")) >= 1
    assert entries["transpose"]["compute"] == entries["fused"]["compute"]
    assert f"{len(cp.TRANSPOSES)} torch.compile" in entries["transpose"]["source"]


def test_the_fused_sweep_counts_an_unvectorised_kernels_flops_once_per_lane(monkeypatch):
    """The NCHW max pool probes' kernels run scalar: at the vector peak their FLOPs take as
    long as lanes x as many vectorised ones, which is how the sweep hands them to the fit."""
    from torch import nn

    from fxroof import compiled_probes as cp

    def kernels(module, shape, channels_last):
        scalar = isinstance(module, nn.MaxPool2d) and not channels_last
        return [{"op": "fused", "op_class": "vector", "flops": 100, "bytes": 8,
                 "bytes_written": 4,
                 "rule": "inductor generated" + ("[unvectorised]" if scalar else "")}]

    monkeypatch.setattr(cp, "_kernels", kernels)
    monkeypatch.setattr(cp, "_seconds", lambda *a: 1e-3)
    flops = cp.sweep(torch.device("cpu"), 1, lambda message: None, lanes=16)
    expected = [1600 if "NCHW" in label else 100 for label, *_ in cp.SIZED]
    assert list(flops[0]) == expected and expected.count(1600) == 2
    assert cp.vector_lanes(torch.device("cuda")) == 0  # Triton's kernels: not modelled so


def test_a_calibration_models_nodes_are_timed_rows_of_their_class():
    """Every timed node of resnet18 becomes a row of its class, convolutions with their
    reduction length: 3 x 7 x 7 = 147 for the stem, 64 x 3 x 3 = 576 in layer1, and the
    classifier at batch 1 a matrix-vector product over 512 features -- but for its 20 batch
    norms' reserves, allocations of nothing that the time model prices at 0."""
    from fxroof import model_probes

    records = model_probes.timed_records(model_probes.Run("resnet18", 1), repeats=1)
    rows = model_probes.class_rows(records)
    assert sum(len(r) for r in rows.values()) == len(records) - 20
    assert sum(1 for r in records if r["op"] == "empty" and r["shape"] == [0]) == 20
    conv_k = sorted({round(row[4]) for row in rows["conv"]})
    assert 147 in conv_k and 576 in conv_k and len(rows["conv"]) == 20
    assert [round(row[4]) for row in rows["gemv"]] == [512] and "gemm" not in rows
    assert "pool" in rows and all(row[3] > 0 for r in rows.values() for row in r)


def test_a_full_calibration_fits_probes_and_model_nodes_together(monkeypatch):
    """What `chips measure --full` hands to each class fit: its probes, forward and
    backward, and, appended, the nodes of the calibration models (timings stubbed: the data
    path, not the machine)."""
    from fxroof import model_probes, probes

    probe_rows = {"conv": [(1e8, 1e6, 0, 1e-3, 576.0)] * 3,
                  "elementwise": [(1e5, 1e6, 0, 1e-4, math.inf)] * 3}
    node_rows = {"conv": [(2e8, 2e6, 0, 3e-3, 9.0)] * 2, "pool": [(1e5, 1e6, 0, 5e-4, math.inf)]}
    backward_rows = {"conv_bwd_dw": [(2e7, 4e6, 0, 1e-3, 18.0)] * 2}
    pool_rows = {"pool_scatter": [(1e5, 5e6, 0, 4e-4, math.inf)] * 4}
    monkeypatch.setattr(probes, "sweep",
                        lambda *a, **k: {c: list(r) for c, r in probe_rows.items()})
    monkeypatch.setattr(probes, "backward_sweep",
                        lambda *a, **k: {c: list(r) for c, r in backward_rows.items()})
    monkeypatch.setattr(probes, "pool_backward_sweep",
                        lambda *a, **k: {c: list(r) for c, r in pool_rows.items()})
    monkeypatch.setattr(probes, "model_rows", lambda *a, **k: node_rows)
    monkeypatch.setattr(probes, "fresh_rate", lambda *a: 2e9)
    fitted = []
    monkeypatch.setattr(probes, "pointwise_layout_rate", lambda *a: 8e9)
    monkeypatch.setattr(probes, "uneven_layout_rate", lambda *a: 2e10)
    monkeypatch.setattr(probes, "layout_block", lambda device: 16)
    monkeypatch.setattr(probes, "fit_classes",
                        lambda rows, chip, fresh, source, layout, pointwise_layout, gpu,
                        uneven_layout, block: fitted.append(
                            (rows, fresh, source, layout, pointwise_layout, gpu,
                             uneven_layout, block)))
    chip = types.SimpleNamespace(bandwidth=3e10)
    probes.calibrate("cpu", chip, models=[model_probes.Run("resnet18", 1, True)])
    (rows, fresh, source, layout, pointwise_layout, gpu, uneven_layout, block), = fitted
    assert gpu is None  # a CPU: no tiles, no streaming probes
    assert {c: len(r) for c, r in rows.items()} == {"conv": 5, "elementwise": 3, "pool": 1,
                                                    "conv_bwd_dw": 2, "pool_scatter": 4}
    assert fresh == 2e9 and "resnet18 b1" in source
    assert layout == 3e10   # a CPU's reorders are priced as its measured copies
    assert pointwise_layout == 8e9  # ... but a 1x1 weight transpose at its own measured rate
    assert (uneven_layout, block) == (2e10, 16)  # ... and a result of uneven channels at its


def test_the_depthwise_backward_probes_time_both_gradients_of_each_kernel(monkeypatch):
    """Each backward probe is one convolution_backward computing the input and weight
    gradients, costed by the rules (closed form below) and timed on real tensors."""
    from fxroof import probes

    monkeypatch.setattr(probes, "BACKWARD_PROBES", [
        ("conv_bwd_dw", (2, 16, 12, 3, 2)), ("conv_bwd_dw_wide", (1, 16, 8, 5, 1)),
        ("conv_bwd_dw_wide_cl", (1, 16, 8, 7, 1))])
    said = []
    rows = probes.backward_sweep(torch.device("cpu"), quick=True, progress=said.append)
    assert {c: len(r) for c, r in rows.items()} == {
        "conv_bwd_dw": 1, "conv_bwd_dw_wide": 1, "conv_bwd_dw_wide_cl": 1}
    # 2 gradients x 2 FLOP a MAC x outputs x kernel area: stride 2 on 12 px leaves 6 x 6
    assert rows["conv_bwd_dw"][0].flops == 2 * 2 * (2 * 16 * 6 * 6) * 9
    assert rows["conv_bwd_dw_wide"][0].flops == 2 * 2 * (16 * 8 * 8) * 25
    assert rows["conv_bwd_dw_wide_cl"][0].flops == 2 * 2 * (16 * 8 * 8) * 49
    assert all(row.seconds > 0 for r in rows.values() for row in r)
    # an NCHW backward pays oneDNN's reorders; a channels-last one does not
    assert rows["conv_bwd_dw_wide"][0].layout > 0 == rows["conv_bwd_dw_wide_cl"][0].layout
    assert said[0] == "probe depthwise 3x3/2 backward 2x16x12px"
    # timed alone, again and again: the input a step would have saved is in the cache
    assert all(row.saved == 0 for r in rows.values() for row in r)


def test_the_pooling_backward_probes_time_each_poolings_own_backward(monkeypatch):
    """Each pooling backward probe is the pooling's backward node, costed by the rules
    (closed forms below) and timed on real tensors; the call computes what autograd does;
    a GPU runs none (its poolings are bounded by launch geometry)."""
    from fxroof import probes

    monkeypatch.setattr(probes, "POOL_BACKWARD_PROBES", [
        (lambda: torch.nn.MaxPool2d(3, 2, 1), (1, 8, 12, 12)),
        (lambda: torch.nn.AvgPool2d(2, 2), (2, 4, 8, 8))])
    said = []
    rows = probes.pool_backward_sweep(torch.device("cpu"), quick=True, progress=said.append)
    # a max pool's backward scatters (pool_scatter); an average pool's scans its windows
    (max_row,), (avg_row,) = rows["pool_scatter"], rows["pool"]
    assert len(rows) == 2 and said[0] == "probe MaxPool2d backward 1x8x12x12"
    # max: one add per output gradient (1 x 8 x 6 x 6 = 288) at its argmax, reading the
    # gradient (4 B) and the int64 index (8 B) and writing the input's gradient
    assert max_row.flops == 288 and max_row.bytes == 288 * 12 + 8 * 12 * 12 * 4
    # average 2x2/2: each of 2 x 4 x 4 x 4 = 128 output gradients spread over 4 inputs
    assert avg_row.flops == 128 * 4 and avg_row.bytes == 128 * 4 + 2 * 4 * 8 * 8 * 4
    assert max_row.seconds > 0 and avg_row.seconds > 0
    # the max pool's indices are saved in a step, but a probe reads them from the cache
    assert max_row.saved == 0 == avg_row.saved
    assert probes.pool_backward_sweep(torch.device("cuda")) == {}
    for pool in (torch.nn.MaxPool2d(3, 2, 1), torch.nn.AvgPool2d(3, 1, 1)):
        x = torch.randn(2, 3, 9, 9, requires_grad=True)
        torch.manual_seed(0)
        got = probes._pool_backward_call(pool, x.detach())()
        torch.manual_seed(0)  # the call's output gradient is its first random draw
        grad = torch.randn(pool(x).shape)
        assert torch.allclose(got, torch.autograd.grad(pool(x), x, grad)[0])


def test_the_bernoulli_probes_are_dropouts_draws_and_a_gpu_runs_none(monkeypatch):
    """A random-class probe's row is its bernoulli_ node alone (n draws: n FLOP, n fp32
    read and written in place), not the allocation before it; a GPU skips the class."""
    from fxroof import probes
    from fxroof.device import GpuShape

    row = probes._cost(probes._Dropout(), (4096,), "random", 1e-3)
    assert (row.flops, row.bytes) == (4096, 2 * 4 * 4096)
    monkeypatch.setattr(probes, "PROBES", [
        ("random", "bernoulli 64", lambda: probes._Dropout(), (64,)),
        ("elementwise", "relu 64", lambda: torch.nn.ReLU(), (64,))])
    assert set(probes.sweep(torch.device("cpu"))) == {"random", "elementwise"}
    monkeypatch.setattr(probes, "gpu_shape", lambda device: GpuShape(8, 4e6))
    monkeypatch.setattr(probes, "streaming_probes", lambda l2_bytes: [])
    monkeypatch.setattr(probes, "GPU_CONV_PROBES", [])
    assert set(probes.sweep(torch.device("cpu"))) == {"elementwise"}


def test_a_gemm_probes_weights_are_drawn_as_nn_linear_draws_them_without_a_bias():
    """Each of a block of rows is uniform in +-1/sqrt(k) (nn.Linear's own bound), the block
    repeated down the matrix: a product of the probe's shape, values that are not all one
    (a constant could run faster on a GPU) and no bias for the cost rules to add."""
    from fxroof import probes

    for k, n in ((768, 1000), (64, 3072)):
        layer = probes._linear(k, n)
        w = layer.weight.detach()
        assert layer.bias is None and w.shape == (n, k)
        assert w.abs().max() <= k ** -0.5 and w.std() > 0.5 * (k ** -0.5) / math.sqrt(3)
        rows = math.gcd(n, 64)  # 8 rows for 1000, 64 for 3072
        assert torch.equal(w[:rows], w[rows:2 * rows]) and not torch.equal(w[0], w[1])
        x = torch.randn(3, k)
        assert torch.allclose(layer(x), x @ w.T)


def test_the_outer_product_probes_are_gemms_that_write_their_output_and_reduce_nothing():
    """A classifier's weight gradient at batch 1, (m x 1) @ (1 x n): 2 m n FLOP (one multiply
    per output, counted as a multiply-add), m n outputs written and m + n inputs read, fp32;
    k = 1, so the row pins the gemm class's memory rate, not its packing."""
    from fxroof import probes

    outer = [(label, make, shape) for op_class, label, make, shape in probes.PROBES
             if label.startswith("outer")]
    assert len(outer) == 3 and {shape[0] for _, _, shape in outer} == {1}
    for label, make, shape in outer:
        module = make()
        m, n = module.grad.shape[0], shape[1]
        assert label == f"outer {m}x1x{n}"
        priced_as, row = probes._priced_row(module, shape, "gemm", 1e-3, "cpu")
        assert priced_as == "gemm" and row.dims == (1, m, n, 1) and row.k == 1
        assert row.flops == 2 * m * n
        assert row.bytes == 4 * (m * n + m + n)


def test_a_calibration_run_that_cannot_run_is_skipped_with_the_reason(monkeypatch):
    from fxroof import model_probes
    from fxroof.errors import FxroofError

    def timed(run, device, repeats):
        if run.backward:
            raise FxroofError("Expected more than 1 value per channel when training")
        return [{"op": "relu", "op_class": "vector", "rule": "relu", "flops": 10, "bytes": 80,
                 "bytes_written": 40, "time_s": 1e-6}]

    monkeypatch.setattr(model_probes, "timed_records", timed)
    said = []
    runs = [model_probes.Run("m", 1), model_probes.Run("m", 1, backward=True)]
    rows = model_probes.model_rows("cpu", runs, progress=said.append)
    assert rows == {"elementwise": [(10, 80, 0, 1e-6, math.inf, 0, 0, 0, None, 0, 0, 0)]}  # none
    assert any("skipped m b1 with backward: Expected more than 1" in s for s in said)


def test_only_a_cpu_prices_an_nchw_convolutions_layout_reorders():
    """oneDNN reorders NCHW operands on a CPU, at what its copies reach; cuDNN reads NCHW as
    it is, so a GPU's chip gets no reorder rate (and no reorder term)."""
    from fxroof import probes

    assert probes.layout_rate(torch.device("cpu"), 2e10) == 2e10
    assert probes.layout_rate(torch.device("cuda"), 2e10) == 0.0
