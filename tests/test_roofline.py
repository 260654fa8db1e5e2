"""Chips database and roofline maths against hand-computed cases."""
import json

import pytest
import torch
import yaml

import fxroof
from fxroof import chip_params, chips as chips_module, prediction, roofline
from fxroof.chips import Chip, lint, load_chips, read_file
from fxroof.errors import FxroofError
from fxroof.pipeline import pipelined_s

# a toy chip: 100 GFLOP/s vector fp32, 800 GFLOP/s matrix fp16, 1 TFLOP/s tf32, 50 GB/s
TOY = Chip("toy", "Toy", "gpu", "x", {"fp32": 100e9, "fp16": 800e9, "tf32": 1e12},
           {"fp32": "vector", "fp16": "matrix", "tf32": "matrix"}, 50e9, capacity=1e9)


def record(flops, nbytes, op_class="vector", dtype="float32", op="add", phase="forward"):
    return {"flops": flops, "bytes": nbytes, "op_class": op_class, "dtype": dtype, "op": op,
            "phase": phase}


def test_memory_bound_node():
    roof = roofline.node_roof(record(1e9, 1e9), TOY)  # intensity 1 FLOP/B, ridge 2
    assert roof.bound == "memory"
    assert roof.predicted_s == pytest.approx(1e9 / 50e9)
    assert roof.attainable == pytest.approx(50e9 * 1.0)


def test_compute_bound_node_and_ridge():
    roof = roofline.node_roof(record(1e12, 1e9), TOY)  # intensity 1000 > ridge 2
    assert roof.bound == "compute" and roof.predicted_s == pytest.approx(10.0)
    assert roof.attainable == 100e9
    assert roofline.ridge_point(TOY, "fp32") == pytest.approx(2.0)


def test_matrix_ops_use_the_matrix_engine_and_tf32_follows_torch(monkeypatch):
    conv = record(1e12, 1e6, "matrix", op="convolution")
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert roofline.node_roof(conv, TOY).peak_key == "tf32"
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    assert roofline.node_roof(conv, TOY).peak_key == "fp32"
    half = record(1e12, 1e6, "matrix", dtype="float16", op="mm")
    assert roofline.node_roof(half, TOY).peak == 800e9
    # an fp16 elementwise op has no fp16 vector peak here: the fp32 vector peak applies
    assert roofline.node_roof(record(1e9, 1e3, dtype="float16"), TOY).peak == 100e9


def test_missing_dtype_names_what_the_chip_has():
    with pytest.raises(FxroofError, match="lists fp16, fp32, tf32"):
        roofline.node_roof(record(1, 1, "matrix", dtype="bfloat16", op="mm"), TOY)


def test_pipelined_step_by_hand():
    # host-bound: every kernel shorter than the host's issue time -> N h + the last kernel
    assert pipelined_s([(10e-6, 4e-6)] * 5) == pytest.approx(5 * 10e-6 + 4e-6)
    # device-bound: the first issue, then kernel after kernel
    assert pipelined_s([(10e-6, 1e-3)] * 5) == pytest.approx(10e-6 + 5e-3)
    # mixed: issued 10, done 10; issued 20 > 10, done 20 + 50 = 70; issued 30 < 70, done 75;
    # issued 40 < 75, done 80
    assert pipelined_s([(10, 0), (10, 50), (10, 5), (10, 5)]) == pytest.approx(80)
    # no host cost: the kernels back to back, as a CPU runs them
    assert pipelined_s([(0, 2), (0, 3)]) == 5


def test_predict_sums_nodes_per_phase():
    records = [record(1e9, 1e9), record(1e12, 1e9, phase="backward")]
    p = prediction.predict(records, TOY, roof="ideal")
    assert p["forward"]["predicted_s"] == pytest.approx(0.02)
    assert p["backward"]["predicted_s"] == pytest.approx(10.0)
    assert p["overall"]["predicted_s"] == pytest.approx(10.02)
    assert p["overall"]["intensity"] == pytest.approx((1e9 + 1e12) / 2e9)


def test_shipped_chips_load_and_pass_the_lints():
    chips = load_chips()
    assert {"t4", "a100_sxm_40gb", "a100_sxm_80gb", "h100_sxm"} <= set(chips)
    assert len(chips) >= 30
    assert {c.cls for c in chips.values()} == {"cpu", "gpu", "asic", "soc", "fpga"}
    assert sum(c.cls == "fpga" for c in chips.values()) >= 2
    # the named SoC families: a phone A-series part and a Snapdragon
    assert {"apple_a16", "snapdragon_x_elite"} <= set(chips)
    for chip in chips.values():
        assert lint(chip) == [], chip.id
        assert chip.sources, f"{chip.id} has no source"
        for dtype, sparse in chip.sparse.items():
            assert chip.peaks[dtype] < sparse  # dense roofs only
    # every field of every entry is one fxroof reads (a user's unknown field is warned of)
    shipped = yaml.safe_load(open(chips_module._shipped()))["chips"]
    assert [(e["id"], k) for e in shipped for k in e if k not in chips_module.FIELDS] == []


PLANTED = """
chips:
  - id: slip
    name: Slipped
    class: gpu
    peaks:
      fp32: {value: 20e12, unit: vector}
      tf32: {value: 10e12, unit: vector}
      bf16: {value: 624e12, unit: matrix}
    sparse: {bf16: 624e12}
    bandwidth: 2.0e15
"""


def test_lints_catch_planted_slips(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(PLANTED)
    (chip,) = read_file(str(path))
    problems = " | ".join(lint(chip))
    assert "bandwidth" in problems          # 2 PB/s: a TB/GB slip
    assert "sparse figure" in problems      # bf16 quoted at its sparse value
    assert "wrong way" in problems          # tf32 below fp32 on the same unit


def test_a_measured_gpu_whose_fp64_gemms_beat_fp32_is_not_a_slip(tmp_path):
    """`chips measure` on an H200: fp64 GEMMs on the tensor cores (60.7 TFLOP/s), fp32
    ones with TF32 off on the CUDA cores (51 TFLOP/s), both recorded as torch.mm's roof."""
    path = tmp_path / "this-gpu.yaml"
    text = ("chips:\n  - id: this-gpu\n    name: H200 (measured)\n    class: gpu\n"
            "    peaks:\n      fp32: {value: 51e12, unit: matrix}\n"
            "      fp64: {value: 60.7e12, unit: matrix}\n    bandwidth: 4.21e12\n")
    path.write_text(text + "    op_overhead: {value: 5.9e-6}\n")
    (measured,) = read_file(str(path))
    assert lint(measured) == []
    path.write_text(text)  # the same figures typed from a datasheet are a slip
    (typed,) = read_file(str(path))
    assert "wrong way" in " | ".join(lint(typed))


@pytest.mark.parametrize("text,fragment", [
    ("chips:\n  - id: x\n    name: X\n    class: tpu\n    peaks: {}\n    bandwidth: 1e12\n",
     "field 'class'"),
    ("chips:\n  - id: x\n    name: X\n    class: gpu\n    peaks: {fp32: {value: -1, unit: vector}}"
     "\n    bandwidth: 1e12\n", "peaks.fp32.value"),
    ("chips:\n  - id: x\n    name: X\n    class: gpu\n    peaks: {}\n", "'bandwidth' is missing"),
    ("chips: [\n", "line"),
])
def test_malformed_user_yaml_names_file_and_field(tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(FxroofError, match="bad.yaml") as e:
        read_file(str(path))
    assert fragment in str(e.value)


def test_user_chips_extend_without_editing_the_shipped_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("chips:\n  - id: mybox\n    name: My box\n    class: cpu\n    peaks:\n"
                    "      fp32: {value: 1e12, unit: vector}\n    bandwidth: 100e9\n")
    chips = load_chips([str(path)])
    assert "mybox" in chips and "h100_sxm" in chips


def test_chips_table_counts_integer_peaks_in_operations():
    from fxroof.render import chips_table

    wide = chips_table([load_chips()["jetson_agx_orin_64gb"]], wide=True).splitlines()[0]
    assert "fp32 (FLOP/s)" in wide and "int8 (OP/s)" in wide and "int8 (FLOP/s)" not in wide
    compact = chips_table([load_chips()["jetson_agx_orin_64gb"]])
    assert "dense FLOP/s (int8: OP/s)" in compact  # the compact table says it in its note


def test_cli_chips_json_and_predict(capsys):
    from fxroof.cli import main

    assert main(["chips", "list", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert all({"id", "name", "class", "peaks", "bandwidth"} <= set(r) for r in records)
    assert main(["predict", "resnet18", "--batch", "8", "--backward"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H100 SXM5 80GB" in out and "fits memory" in out
    # at batch 1 the H100 idles most of the step, waiting for the host to launch kernels
    assert main(["predict", "resnet18", "--chip", "h100_sxm"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("NVIDIA H100"))
    wait = next(cell for cell in row.split() if cell.endswith("%"))
    assert int(wait[:-1]) > 50
    assert main(["predict", "resnet18", "--chip", "h10O"]) == 1
    assert "Did you mean h100_sxm" in capsys.readouterr().err


def test_predict_groups_what_it_skips_and_keeps_roofs_apart_from_calibrated_times(capsys):
    from fxroof.cli import main

    assert main(["predict", "resnet18"]) == 0
    out = capsys.readouterr().out
    chips = load_chips()
    # every chip with no fp32 peak of any kind (TPUs, Gaudi, ...) is named in one paragraph,
    # the advice said once, not one paragraph per chip
    no_fp32 = [c.id for c in chips.values() if not {"fp32", "fp32_matrix"} & set(c.peaks)]
    assert len(no_fp32) >= 2
    assert out.count("To price them") == 1 and "skipped tpu_v4:" not in out
    words = " ".join(out.split())  # the paragraph is wrapped
    assert f"skipped {len(no_fp32)} chips that list no fp32 peak for matrix work" in words
    assert all(f"{c} (" in words for c in no_fp32)
    # a chip with only a roof is listed after the note, below every calibrated chip, however
    # much faster its roof is than a calibrated time
    note = out.index("Chips with no calibrated time model")
    calibrated = {c.name for c in chips.values() if chip_params.time_model_source(c)}
    rows: dict = {}  # each chip's first line: the parts table after both repeats them
    for i, line in enumerate(out.splitlines()):
        rows.setdefault(line.split("  ")[0], i)
    note_line = out[:note].count("\n")
    for name, line in rows.items():
        chip = next((c for c in chips.values() if c.name == name), None)
        if chip is not None:
            assert (line < note_line) == (name in calibrated), name


def test_predict_prices_each_gpu_on_the_cuda_program_for_its_capability(capsys):
    from fxroof.cli import main

    assert main(["predict", "hf:gpt2", "--hf-config", "n_layer=1", "--chip", "h100_sxm",
                 "--chip", "xeon_w9_3495x", "--chip", "t4", "--amp", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "2 targets" in out.splitlines()[0]  # the CPU's and the H100's; the T4's failed
    # the T4 has no bf16 autocast: skipped with the reason, the others priced
    assert "skipped t4: bf16 autocast needs" in out
    h100 = load_chips()["h100_sxm"]
    own = fxroof.analyze("hf:gpt2", hf_config={"n_layer": 1}, chip=h100, amp="bf16")
    assert own.model.device == "cuda"
    expected = prediction.predict(own.records(), h100)["overall"]["predicted_s"]
    row = next(line for line in out.splitlines() if line.startswith("NVIDIA H100"))
    assert row.split()[4:6] == fxroof.render.seconds(expected).split()
    # --device names one target for every chip: one analysis
    assert main(["predict", "resnet18", "--device", "cuda", "--chip", "t4", "--chip",
                 "h100_sxm"]) == 0
    assert ", cuda target," in capsys.readouterr().out.splitlines()[0]


def test_an_unmeasured_device_chip_says_how_to_measure_it(tmp_path, monkeypatch, capsys):
    from fxroof.cli import main

    monkeypatch.setenv("FXROOF_CHIPS_DIR", str(tmp_path))  # nothing measured here
    assert main(["predict", "resnet18", "--chip", "this-gpu"]) == 1
    err = capsys.readouterr().err
    assert "fxroof chips measure --device cuda" in err and "Traceback" not in err


def test_where_to_look_ranks_by_time_above_the_roof():
    g = fxroof.analyze("resnet18", batch=2, backward=True)
    g.time(repeats=2, warmup=1)
    chip = load_chips()["t4"]
    rows = prediction.where_to_look(g.records(), chip, top=5)
    assert len(rows) == 5
    gaps = [r["gap_s"] for r in rows]
    assert gaps == sorted(gaps, reverse=True)
    assert all(r["gap_s"] == pytest.approx(max(r["time_s"] - r["ideal_s"], 0)) for r in rows)


def test_graph_roofline_adds_roof_fields_to_records_and_json(tmp_path):
    g = fxroof.analyze("resnet18", batch=2)
    prediction = g.roofline("t4")
    records = g.records()
    assert all({"attainable_flops_per_s", "predicted_s", "bound"} <= set(r) for r in records)
    # the nodes' isolated times: the T4's host costs overlap its kernels (fxroof.pipeline)
    assert sum(r["predicted_s"] for r in records) > prediction["forward"]["predicted_s"]
    assert sum(r["ideal_s"] for r in records) == pytest.approx(
        prediction["forward"]["ideal_s"])
    assert all(r["fraction_of_roof"] is None for r in records)  # not timed yet
    g.time(repeats=1, warmup=0)
    assert all(r["fraction_of_roof"] is not None for r in g.records())
    g.to_json(str(tmp_path / "g.json"))
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["chip"]["id"] == "t4" and "fraction_of_roof" in data["nodes"][0]
    assert "% of roof" in g.table(top=3)


def test_matrix_only_accelerator_bounds_vector_work_by_memory():
    """A TPU-like chip lists only a bf16 matrix peak: bf16 elementwise work still gets a
    roof (that peak), so it is predicted by its bytes; fp32 work has no roof and says so."""
    tpu = Chip("tpu", "TPU", "asic", "x", {"bf16": 200e12}, {"bf16": "matrix"}, 1e12)
    add = record(1e6, 1e9, "vector", dtype="bfloat16")
    roof = roofline.node_roof(add, tpu)
    assert roof.peak_key == "bf16" and roof.bound == "memory"
    assert roof.predicted_s == pytest.approx(1e9 / 1e12)
    with pytest.raises(FxroofError, match="lists bf16"):
        roofline.node_roof(record(1e6, 1e9), tpu)


def test_on_chip_sram_bandwidth_is_judged_as_sram(tmp_path):
    text = """
chips:
  - id: wafer
    name: Wafer
    class: asic
    peaks: {fp16: {value: 1e15, unit: matrix}}
    bandwidth: {value: 2e16, memory: on-chip SRAM}
  - id: typo
    name: Typo
    class: asic
    peaks: {fp16: {value: 1e15, unit: matrix}}
    bandwidth: {value: 2e16, memory: HBM3}
"""
    path = tmp_path / "sram.yaml"
    path.write_text(text)
    wafer, typo = read_file(str(path))
    assert wafer.memory == "on-chip SRAM" and lint(wafer) == []
    assert "bandwidth" in " ".join(lint(typo))  # 20 PB/s of HBM is a unit slip


def test_measured_overhead_is_paid_once_per_launching_node():
    measured = Chip("m", "M", "cpu", "x", {"fp32": 100e9}, {"fp32": "vector"}, 50e9,
                    op_overhead_s=5e-6)
    add = record(1e3, 1e3)  # 10 ns of compute, 20 ns of memory
    assert roofline.node_roof(add, measured).predicted_s == pytest.approx(20e-9 + 5e-6)
    view = {**record(0, 0), "op_class": "view"}
    assert roofline.node_roof(view, measured).predicted_s == 0.0
    assert roofline.node_roof(add, TOY).predicted_s == pytest.approx(1e3 / 50e9)


def test_every_tensor_core_gpu_prices_mixed_precision():
    """Autocast fp16 runs matrix ops on the tensor cores, which NVIDIA GPUs have from compute
    capability 7.0 (Volta) on: each such shipped chip lists an fp16 roof, so `predict --amp
    fp16` does not stop at "no fp16 peak" (the L40S listed only FP32 and FP8)."""
    for chip in load_chips().values():
        cc = chip.compute_capability
        if chip.cls == "gpu" and chip.vendor == "NVIDIA" and cc and tuple(cc) >= (7, 0):
            peak, key = roofline.peak_for(chip, "matrix", "float16", "mm")
            assert key == "fp16" and chip.units["fp16"] == "matrix", chip.id
            assert peak > chip.peaks["fp32"], chip.id
