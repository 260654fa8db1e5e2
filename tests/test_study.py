"""fxroof study: one small real study (two models, two batches, CPU) checked end to end, then
resume, refusal to overwrite, failures recorded, report-only, and the tables' statistics."""
import csv
import json
import os
from pathlib import Path

import pytest
from scipy.stats import spearmanr

from fxroof.errors import FxroofError
from fxroof.study import StudyConfig, run_study
from fxroof.study import sweep as sweep_module
from fxroof.study import report
from fxroof.study.cache import Cache, read_manifest
from fxroof.study.sweep import COMPILED, COST, LATENCY, TRAIN, Sweep, tasks
from fxroof.study import figures
from fxroof.study.tables import collect, correlation_columns, rho, spearman
from fxroof.latency import FRESH


def csv_rows(path) -> list[dict]:
    return list(csv.DictReader(Path(path).read_text().splitlines()))

MODELS = ["squeezenet1_0", "mobilenet_v3_small", "shufflenet_v2_x0_5"]  # 6 points: a rank
# correlation over all batches (fewer than 5 points are not correlated, MIN_SPEARMAN_POINTS)


def small_config(**changes) -> StudyConfig:
    """Latencies in the test's own process, which the sweep tests monkeypatch; the fresh
    processes are tested on their own (test_a_latency_is_measured_in_a_fresh_process)."""
    return StudyConfig(**{"models": MODELS, "batches": [1, 2], "warmup": 0, "repeats": 2,
                          "fresh_process": False, **changes})


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("study") / "out")
    paths = run_study(small_config(), root, progress=False)
    return root, paths


def test_report_has_every_section_figure_and_data(study):
    root, paths = study
    markdown = Path(paths["md"]).read_text()
    html = Path(paths["html"]).read_text()
    for section in ["Findings", "1. Chips", "2. Model compute and memory", "3. Latency",
                    "4. Achieved performance", "5. Training"]:
        assert f"## {section}" in markdown and f"<h2>{section}</h2>" in html
    images = [line.split("](")[1].rstrip(")") for line in markdown.splitlines()
              if line.startswith("![")]
    for name in ["chips.png", "chips-cpu.png", "models-cost.png", "models-roofline-cpu-b1.png",
                 "latency-vs-flops.png", "latency-vs-parameters.png", "throughput-vs-batch.png",
                 "spearman.png", "achieved-roofline-cpu-b2.png", "training-fw-bw.png",
                 "layers-squeezenet1_0-b1-cpu.png"]:
        assert f"figures/{name}" in images
    for image in images:
        path = os.path.join(root, image)
        assert os.path.getsize(path) > 10_000, image
        assert f'src="{image}"' in html
    rows = csv_rows(os.path.join(root, "data", "models.csv"))
    assert sorted((r["model"], r["batch"]) for r in rows) == sorted(
        (m, b) for m in MODELS for b in ("1", "2"))
    assert all(float(r["latency_s"]) > 0 and float(r["predicted_s"]) > 0 for r in rows)
    # the study checks its own predictions: error per row, and a finding that sums it up
    for r in rows:
        assert float(r["prediction_error"]) == pytest.approx(
            float(r["predicted_s"]) / float(r["latency_s"]) - 1)
    assert "calibrated time model) is off by a median" in markdown
    with open(os.path.join(root, "data", "spearman.json")) as f:
        assert set(json.load(f)) == {"all", "batch 1", "batch 2"}


def test_results_are_consistent_with_the_cost_pass(study):
    import fxroof

    root, _ = study
    cached = Cache(root).get("cpu", "squeezenet1_0", 2, COST)
    g = fxroof.analyze("squeezenet1_0", batch=2)
    assert cached["inference"]["totals"]["flops"] == g.totals()["forward"]["flops"]
    train = Cache(root).get("cpu", "squeezenet1_0", 1, TRAIN)
    assert train["timing"]["eager_s"]["backward"] > 0
    assert Cache(root).get("cpu", "squeezenet1_0", 2, TRAIN) is None  # trains at batch 1 only


def test_findings_state_numbers_from_the_data(study):
    root, paths = study
    markdown = Path(paths["md"]).read_text()
    findings = markdown.split("## Findings")[1].split("## 1.")[0]
    train = csv_rows(os.path.join(root, "data", "training.csv"))
    low = min(train, key=lambda r: float(r["flops_ratio"]))
    assert f"{float(low['flops_ratio']):.2f} ({low['model']})" in findings
    assert "Spearman rho with fxroof's predicted latency" in findings
    assert "memory-bound" in findings


def test_an_interrupted_study_resumes_where_it_stopped(study, monkeypatch):
    root, _ = study
    cache = Cache(root)
    missing = cache.path("cpu", "mobilenet_v3_small", 2, LATENCY)
    os.remove(missing)
    kept = cache.path("cpu", "squeezenet1_0", 1, TRAIN)
    before = os.path.getmtime(kept)
    ran = []
    original = Sweep.run_task
    monkeypatch.setattr(Sweep, "run_task",
                        lambda self, *task: ran.append(task) or original(self, *task))
    run_study(small_config(), root, progress=False)
    assert ran == [("cpu", "mobilenet_v3_small", 2, LATENCY)]
    assert os.path.exists(missing) and os.path.getmtime(kept) == before


def test_report_only_runs_nothing(study, monkeypatch):
    root, paths = study
    os.remove(paths["html"])
    monkeypatch.setattr(Sweep, "run_task", lambda *a: pytest.fail("report-only ran a task"))
    run_study(StudyConfig(models=["ignored"]), root, report_only=True, progress=False)
    assert os.path.exists(paths["html"])


def test_a_different_study_is_not_overwritten(study, tmp_path):
    root, _ = study
    with pytest.raises(FxroofError, match="different study.*batches"):
        run_study(small_config(batches=[1, 4]), root, progress=False)
    stranger = tmp_path / "photos"
    stranger.mkdir()
    (stranger / "holiday.jpg").write_text("not a study")
    with pytest.raises(FxroofError, match="not an fxroof study folder"):
        run_study(small_config(), str(stranger), progress=False)
    assert (stranger / "holiday.jpg").read_text() == "not a study"
    with pytest.raises(FxroofError, match="is a file, not a folder"):
        run_study(small_config(), str(stranger / "holiday.jpg"), progress=False)
    with pytest.raises(FxroofError, match="holds no study"):
        run_study(small_config(), str(tmp_path / "nothing"), report_only=True, progress=False)


def test_one_failure_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    real = sweep_module.run_latency

    def fail_for_mobilenet(module, inputs, *args):
        (image,), _ = inputs
        if image.shape[0] == 2 and type(module).__name__ == "MobileNetV3":
            raise RuntimeError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return real(module, inputs, *args)

    monkeypatch.setattr(sweep_module, "run_latency", fail_for_mobilenet)
    config = small_config(models=MODELS[:2], batches=[1, 2], train_batches=[1], repeats=1)
    paths = run_study(config, str(tmp_path / "s"), progress=False)
    markdown = Path(paths["md"]).read_text()
    assert "## Failures" in markdown and "out of memory" in markdown
    failures = json.loads((tmp_path / "s" / "data" / "failures.json").read_text())
    assert [(f["model"], f["batch"], f["phase"]) for f in failures] == [
        ("mobilenet_v3_small", 2, LATENCY)]
    rows = csv_rows(tmp_path / "s" / "data" / "models.csv")
    assert len(rows) == 4  # the failed model keeps its cost row, without a latency


def test_tasks_are_model_major_and_train_only_at_train_batches():
    order = tasks(small_config(train_batches=[2]))
    assert order[:3] == [("cpu", MODELS[0], 1, COST), ("cpu", MODELS[0], 1, LATENCY),
                         ("cpu", MODELS[0], 2, COST)]
    assert [t for t in order if t[3] == TRAIN] == [("cpu", m, 2, TRAIN) for m in MODELS]
    assert StudyConfig().batches_for("cuda:0") == [1, 64, 256]


def test_spearman_matches_scipy_on_the_study_tables(study, monkeypatch, tmp_path):
    root, _ = study
    config = small_config()
    cache = Cache(root)
    from fxroof.study.sweep import measure_roofs

    tables = collect(config, cache, measure_roofs(config, cache, False, False))
    columns = correlation_columns(tables)
    keys = sorted(columns["FLOPs"])
    result = spearman(tables)
    expected = spearmanr([columns["latency (cpu)"][k] for k in keys],
                         [columns["parameters"][k] for k in keys]).statistic
    assert rho(result, "latency (cpu)", "parameters") == pytest.approx(expected)
    assert result["n"] == 6
    # 3 points per batch: too few to rank (MIN_SPEARMAN_POINTS), no matrix, and the figure
    # says which panels it left out
    assert spearman(tables, batch=1)["n"] == 3 and spearman(tables, batch=1)["rho"] is None
    saved = {}
    monkeypatch.setattr(figures.plots, "save", lambda fig, path, overwrite: saved.update(
        fig=fig))
    figures.correlation_matrices(tables, str(tmp_path))
    notes = [t.get_text() for t in saved["fig"].texts]
    assert len(notes) == 1 and "batch 1 (n = 3), batch 2 (n = 3)" in notes[0]
    assert [ax.get_title() for ax in saved["fig"].axes if ax.axison] == [
        "all batch sizes (n = 6)"]


def test_a_training_step_that_fails_keeps_the_inference_results(tmp_path):
    config = StudyConfig(models=["tests.fixtures.user_models:bn_head"], batches=[1, 2],
                         train_batches=[1, 2], warmup=0, repeats=1, fresh_process=False)
    paths = run_study(config, str(tmp_path / "s"), progress=False)
    failures = json.loads((tmp_path / "s" / "data" / "failures.json").read_text())
    assert [(f["batch"], f["phase"]) for f in failures] == [(1, "cost (training step)")]
    assert "Expected more than 1 value per channel" in failures[0]["error"]
    rows = csv_rows(tmp_path / "s" / "data" / "models.csv")
    assert sorted(r["batch"] for r in rows) == ["1", "2"]
    assert all(float(r["latency_s"]) > 0 for r in rows)
    train = csv_rows(tmp_path / "s" / "data" / "training.csv")
    assert [r["batch"] for r in train] == ["2"]
    assert "## Failures" in Path(paths["md"]).read_text()


def test_the_folder_remembers_its_batch_sizes(study, monkeypatch):
    """Defaults may change between versions; a study folder keeps the batches it was made with."""
    root, _ = study
    manifest = json.loads(Path(os.path.join(root, "study.json")).read_text())
    assert manifest["batches_by_device"] == {"cpu": [1, 2]}
    monkeypatch.setitem(sweep_module.DEFAULT_BATCHES, "cpu", [3])
    assert StudyConfig(**manifest).batches_for("cpu") == [1, 2]


def test_a_compiled_study_sets_eager_beside_torch_compile(tmp_path):
    """--compiled: each model's compiled view and torch.compile's measured latency, in a
    section of their own with their data."""
    config = StudyConfig(models=["squeezenet1_0"], batches=[1], warmup=0, repeats=2,
                         compiled=True, fresh_process=False)
    paths = run_study(config, str(tmp_path / "s"), progress=False)
    markdown = Path(paths["md"]).read_text()
    assert "## 6. Eager vs compiled (torch.compile, CPU)" in markdown
    assert "figures/compiled-speedup.png" in markdown
    (row,) = csv_rows(tmp_path / "s" / "data" / "compiled.csv")
    eager = csv_rows(tmp_path / "s" / "data" / "models.csv")[0]
    assert row["eager_bytes"] == eager["bytes"]
    assert float(row["compiled_latency_s"]) > 0 and int(row["kernels"]) > 0
    assert float(row["measured_speedup"]) == pytest.approx(
        float(eager["latency_s"]) / float(row["compiled_latency_s"]))
    assert float(row["predicted_speedup"]) == pytest.approx(
        float(row["predicted_eager_s"]) / float(row["predicted_compiled_s"]))


def test_a_frozen_compiled_study_freezes_the_view_and_the_measured_model(tmp_path,
                                                                         monkeypatch):
    """--compiled --freeze: the compiled view and torch.compile's latency both with
    Inductor's freezing (its freeze pass runs once more than for the view alone: for the
    measured model), said so in the report. Frozen, the fixture's convolution (its batch
    norm folded in) runs as oneDNN's prepacked convolution; unfrozen, as ATen's."""
    import torch._inductor.freezing as freezing

    from fxroof import analyze

    model = "tests.fixtures.user_models:conv_bn_net"
    calls = []
    real_freeze = freezing.freeze
    monkeypatch.setattr(freezing, "freeze", lambda *a, **k: calls.append(1) or
                        real_freeze(*a, **k))
    analyze(model, batch=2, compiled=True, freeze=True)
    for_the_view = len(calls)
    config = StudyConfig(models=[model], batches=[2], warmup=0, repeats=2, compiled=True,
                         freeze=True, fresh_process=False)
    paths = run_study(config, str(tmp_path / "s"), progress=False)
    assert for_the_view >= 1 and len(calls) == 2 * for_the_view + 1
    assert "Both are frozen (--freeze: Inductor's freezing" in Path(paths["md"]).read_text()
    frozen = Cache(str(tmp_path / "s")).get("cpu", model, 2, COMPILED)
    assert frozen["frozen"] is True and frozen["median_s"] > 0
    from fxroof.measured import measure

    unfrozen = measure(COMPILED, model, 2, "cpu", 0, 1)  # and in a fresh process
    assert unfrozen["frozen"] is False and unfrozen["process"] == FRESH
    ops = lambda result: {str(r["op"]) for r in result["records"]}  # noqa: E731
    assert "convolution" in ops(unfrozen) and "_convolution_pointwise" not in ops(unfrozen)
    assert "_convolution_pointwise" in ops(frozen) and "convolution" not in ops(frozen)


def test_freezing_without_the_compiled_section_is_refused(tmp_path):
    from fxroof.errors import UsageError

    root = tmp_path / "out"
    with pytest.raises(UsageError, match="--freeze compiles the study's compiled section.*"
                                         "add --compiled"):
        run_study(small_config(freeze=True), str(root), progress=False)
    assert not root.exists()


def test_a_compiled_result_frozen_otherwise_than_the_study_asks_is_taken_again():
    """Frozen and unfrozen compiled steps are different programs (weights prepacked once or
    converted every call); a result from before the field was recorded was not frozen."""
    from fxroof.study.sweep import RECORDS_VERSION, outdated

    fresh = {"median_s": 0.1, "process": "fresh", "records_version": RECORDS_VERSION}
    plain, frozen = StudyConfig(compiled=True), StudyConfig(compiled=True, freeze=True)
    assert not outdated(COMPILED, fresh, plain) and outdated(COMPILED, fresh, frozen)
    assert not outdated(COMPILED, {**fresh, "frozen": True}, frozen)
    assert outdated(COMPILED, {**fresh, "frozen": True}, plain)
    assert not outdated(LATENCY, {"median_s": 0.1, "process": "fresh"}, frozen)


def test_cached_records_predict_what_the_analysis_predicts(study):
    """The study predicts from its cached node records: they keep everything the time model
    reads -- a depthwise convolution's reduction length (its shape), page faults of outputs
    of 32 MiB and more (bytes written), the NCHW reorders (layout), a training batch norm's
    class (its rule) -- so a chip calibrated with all of those predicts the same seconds
    from the cache as from the analysis itself."""
    from fxroof import analyze
    from fxroof.chips import parse_chip
    from fxroof.prediction import predict

    params = {"t0": 1e-5, "compute": 0.5, "memory": 0.5, "band": [1, 1], "k_half": 40.0,
              "fresh_rate": 2e9, "layout_rate": 1e10}
    chip = parse_chip({"id": "cpu-x", "name": "a CPU", "class": "cpu", "vendor": "",
                       "peaks": {"fp32": {"value": 1e11, "unit": "matrix"}},
                       "bandwidth": {"value": 1e10},
                       "calibration": {c: {**params, "t0": t0} for c, t0 in
                                       (("conv", 1e-5), ("norm", 2e-5),
                                        ("norm_train", 7e-5), ("elementwise", 3e-6))}},
                      "(test)")
    root, _ = study
    cached = Cache(root).get("cpu", "mobilenet_v3_small", 2, COST)
    assert cached["records_version"] == sweep_module.RECORDS_VERSION
    analysed = analyze("mobilenet_v3_small", batch=2)
    assert predict(cached["inference"]["records"], chip)["overall"]["predicted_s"] == \
        pytest.approx(predict(analysed.records(), chip)["overall"]["predicted_s"])
    # 64 x 96 x 112 x 112 fp32 outputs (308 MB) and a depthwise convolution: what the cache
    # dropped before it kept these fields predicted this 1.87x short
    big = analyze("mobilenet_v2", batch=64, backward=True)
    full = predict(big.records(), chip)["overall"]["predicted_s"]
    kept = predict(sweep_module._compact(big.records()), chip)["overall"]["predicted_s"]
    assert kept == pytest.approx(full)


def test_a_result_cached_with_fewer_record_fields_is_computed_again(study):
    root, _ = study
    cache = Cache(root)
    task = ("cpu", "squeezenet1_0", 1, COST)
    current = cache.get(*task)
    sweep = Sweep(small_config(), cache, progress=False)
    assert task not in sweep.pending()
    old = {k: v for k, v in current.items() if k != "records_version"}
    cache.put(*task, old)
    try:
        assert task in sweep.pending()
        cache.put(*task, {"error": "a failure is kept as it is"})
        assert task not in sweep.pending()
    finally:
        cache.put(*task, current)


def test_cudnn_search_is_the_whole_studys_setting(study):
    """--cudnn-benchmark is recorded in the folder (a study made without it is not resumed
    with it: its GPU timings and prices would mix), and the report says it was on."""
    root, _ = study
    assert read_manifest(root)["cudnn_benchmark"] is False
    with pytest.raises(FxroofError, match="different study.*cudnn_benchmark"):
        run_study(small_config(cudnn_benchmark=True), root, progress=False)
    assert "engine search on" in report._processes(StudyConfig(cudnn_benchmark=True))
    assert "engine search" not in report._processes(StudyConfig())


def test_a_fresh_process_measures_with_the_cudnn_search_of_the_one_that_asked(tmp_path,
                                                                               monkeypatch):
    """A child sets torch.backends.cudnn.benchmark as its parent had it when it asked (a
    study's --cudnn-benchmark reaches every process that times a GPU)."""
    from fxroof.latency import in_fresh_process
    from fxroof.roofline import cudnn_search

    (tmp_path / "search_probe.py").write_text(
        "import torch\nfrom fxroof.latency import child_main\n"
        "child_main(lambda request: {'searched': torch.backends.cudnn.benchmark})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with cudnn_search(True):
        assert in_fresh_process("search_probe", {}, "a probe")["searched"] is True
    with cudnn_search(False):
        assert in_fresh_process("search_probe", {}, "a probe")["searched"] is False


def test_a_model_batch_or_device_named_twice_is_studied_once():
    """`--models resnet18 resnet18` had measured it twice and counted it twice in the
    findings' medians."""
    from fxroof.study.sweep import StudyConfig, tasks

    config = StudyConfig(models=["resnet18", "vit_b_16", "resnet18"], batches=[8, 1, 8],
                         devices=["cpu", "cpu"], train_batches=[1, 1])
    assert (config.models, config.batches, config.devices, config.train_batches) == \
        (["resnet18", "vit_b_16"], [8, 1], ["cpu"], [1])
    assert len(tasks(config)) == len(set(tasks(config))) == 2 * 2 * 2 + 2  # + training at 1


def test_a_fresh_process_killed_by_the_kernel_is_said_to_have_run_out_of_memory(
        tmp_path, monkeypatch):
    """SIGKILL, what Linux's OOM killer sends, leaves no output and no traceback to quote."""
    from fxroof.latency import in_fresh_process

    (tmp_path / "killed_probe.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    error = in_fresh_process("killed_probe", {}, "a probe")["error"]
    assert "measuring a probe was killed (SIGKILL)" in error and "OOM killer" in error


def test_a_latency_is_measured_in_a_fresh_process():
    """The child process builds the model by name -- here one only importable through this
    process's sys.path -- and sends run_latency's result back; a failure comes back as the
    sweep's error record, not an exception."""
    from fxroof.latency import measure_latency

    from fxroof.device import host_allocator

    result = measure_latency("tests.fixtures.user_models:small_net", 1, "cpu", 0, 3)
    assert result["process"] == FRESH and len(result["samples_s"]) == 3
    assert result["host_allocator"] == host_allocator()  # the child's own report
    assert 0 < result["q1_s"] <= result["median_s"] <= result["q3_s"]
    failed = measure_latency("tests.fixtures.user_models:broken", 1, "cpu", 0, 1)
    assert set(failed) == {"error"} and "out of coffee" in failed["error"]


def test_a_training_step_and_a_compiled_latency_are_measured_in_fresh_processes():
    """The training task (every node timed, then the eager step) and the compiled task (the
    compiled view, then torch.compile's latency) run in a child, like the latency: its result
    comes back whole, marked fresh, and a failure as the sweep's error record."""
    from fxroof.measured import measure

    model = "tests.fixtures.user_models:small_net"
    train = measure(TRAIN, model, 2, "cpu", 0, 2)
    assert train["process"] == FRESH and train["timing"]["repeats"] == 2
    assert set(train["timing"]["eager_s"]) == {"forward", "backward"}
    assert all(t > 0 for t in train["timing"]["interpreted_s"].values())
    assert {row["key"] for row in train["layer_types"]["backward"]} >= {"Conv2d", "Linear"}
    compiled = measure(COMPILED, model, 1, "cpu", 0, 2)
    assert compiled["process"] == FRESH and compiled["median_s"] > 0
    assert compiled["kernels"] == len(compiled["records"]) > 0
    failed = measure(TRAIN, "tests.fixtures.user_models:broken", 1, "cpu", 0, 1)
    assert set(failed) == {"error"} and "out of coffee" in failed["error"]
    died = measure(TRAIN, "tests.fixtures.user_models:dies", 1, "cpu", 0, 1)
    assert died["error"].startswith("the process measuring the train step of "
                                    "tests.fixtures.user_models:dies at batch 1 failed "
                                    "(exit status 7)")


@pytest.mark.parametrize("phase", [LATENCY, TRAIN, COMPILED])
def test_a_measurement_from_the_studys_own_process_is_taken_again_in_a_fresh_one(phase):
    from fxroof.study.sweep import RECORDS_VERSION, outdated

    records = {"records_version": RECORDS_VERSION} if phase == COMPILED else {}
    shared = {"median_s": 0.1, "process": "shared", **records}
    fresh = {"median_s": 0.1, "process": "fresh", **records}
    assert outdated(phase, shared, StudyConfig())
    assert outdated(phase, {"median_s": 0.1, **records}, StudyConfig())  # from before
    assert not outdated(phase, shared, StudyConfig(fresh_process=False))
    assert not outdated(phase, fresh, StudyConfig())
    assert not outdated(phase, {"error": "out of memory"}, StudyConfig())
    if phase == COMPILED:  # records from before RECORDS_VERSION are read again too
        assert outdated(phase, {**fresh, "records_version": RECORDS_VERSION - 1}, StudyConfig())


# --- the host allocator the study measures under (--allocator) ---

@pytest.mark.parametrize("phase", [LATENCY, TRAIN, COMPILED])
def test_a_measurement_taken_under_another_allocator_is_taken_again(phase):
    """A measurement records the malloc its process ran (host_allocator); the study takes it
    again where that is not the allocator it asks for. jemalloc, which returns pages, is
    neither glibc nor caching; a result from before the field was glibc's."""
    from fxroof.study.sweep import RECORDS_VERSION, outdated

    records = {"records_version": RECORDS_VERSION} if phase == COMPILED else {}
    fresh = {"median_s": 0.1, "process": "fresh", **records}
    glibc, caching = StudyConfig(), StudyConfig(allocator="caching")
    tcmalloc = {**fresh, "host_allocator": "tcmalloc"}
    assert not outdated(phase, tcmalloc, caching) and outdated(phase, tcmalloc, glibc)
    assert not outdated(phase, fresh, glibc) and outdated(phase, fresh, caching)
    jemalloc = {**fresh, "host_allocator": "jemalloc"}
    assert outdated(phase, jemalloc, glibc) and outdated(phase, jemalloc, caching)


def test_costs_replayed_for_another_allocator_are_computed_again():
    from fxroof.study.sweep import RECORDS_VERSION, outdated

    cost = {"records_version": RECORDS_VERSION, "inference": {}}
    assert not outdated(COST, cost, StudyConfig()) and outdated(COST, cost,
                                                              StudyConfig(allocator="caching"))
    cached = {**cost, "allocator": "caching"}
    assert not outdated(COST, cached, StudyConfig(allocator="caching"))
    assert outdated(COST, cached, StudyConfig())


def test_the_caching_allocator_is_refused_where_the_study_cannot_measure_under_it(
        tmp_path, monkeypatch):
    """Before any work: without tcmalloc installed (fresh processes preload it), or in
    process (--in-process) when this process runs glibc's malloc. Nothing is written."""
    import ctypes.util

    from fxroof.errors import UsageError

    monkeypatch.setattr(sweep_module, "host_allocator", lambda: "glibc")
    root = tmp_path / "out"
    with pytest.raises(UsageError, match="--in-process measures in this process, which runs "
                                         "glibc's malloc.*LD_PRELOAD"):
        run_study(small_config(allocator="caching"), str(root), progress=False)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pytest.raises(UsageError, match="no libtcmalloc is installed.*libtcmalloc-minimal4"):
        run_study(small_config(allocator="caching", fresh_process=True), str(root),
                  progress=False)
    with pytest.raises(UsageError, match="Unknown allocator 'jemalloc'"):
        run_study(small_config(allocator="jemalloc"), str(root), progress=False)
    assert not root.exists()


def test_a_fresh_process_preloads_tcmalloc_for_the_caching_allocator(monkeypatch):
    """The child's environment: tcmalloc first in LD_PRELOAD, what the parent preloads kept
    after it; with glibc the parent's environment as it is. The child's own report of its
    malloc comes back with its result."""
    import ctypes.util
    import subprocess

    from fxroof import latency

    seen = []

    def fake_run(argv, capture_output, text, env):
        seen.append(env.get("LD_PRELOAD"))
        return subprocess.CompletedProcess(argv, 0, '{"median_s": 0.5, "host_allocator": '
                                                    '"tcmalloc"}\n', "")

    monkeypatch.setattr(latency.subprocess, "run", fake_run)
    monkeypatch.setattr(ctypes.util, "find_library",
                        lambda name: "libtcmalloc_minimal.so.4" if name == "tcmalloc_minimal"
                        else None)
    monkeypatch.setenv("LD_PRELOAD", "/opt/libmine.so")
    result = latency.measure_latency("resnet18", 1, "cpu", 0, 1, allocator="caching")
    assert result == {"median_s": 0.5, "host_allocator": "tcmalloc", "process": FRESH}
    latency.measure_latency("resnet18", 1, "cpu", 0, 1)
    assert seen == ["libtcmalloc_minimal.so.4:/opt/libmine.so", "/opt/libmine.so"]


def test_the_studys_roofs_are_measured_where_its_allocator_runs(monkeypatch):
    """With the caching allocator the quick chip is measured in a fresh process that runs it
    (its rates are fitted on timed probes), unless this process runs tcmalloc already; with
    glibc, here."""
    calls = []
    monkeypatch.setattr(sweep_module, "measure_calibrated",
                        lambda device, quick, progress: calls.append(("here", device)) or {})
    monkeypatch.setattr(sweep_module, "measure_calibrated_in_fresh_process",
                        lambda device, allocator: calls.append((allocator, device)) or {})
    monkeypatch.setattr(sweep_module, "host_allocator", lambda: "glibc")
    sweep_module._measured_roofs("cpu", "caching", None)
    sweep_module._measured_roofs("cpu", "glibc", None)
    monkeypatch.setattr(sweep_module, "host_allocator", lambda: "tcmalloc")
    sweep_module._measured_roofs("cpu", "caching", None)
    assert calls == [("caching", "cpu"), ("here", "cpu"), ("here", "cpu")]


def test_a_chip_measured_in_a_fresh_process_is_a_chip():
    """The child's quick calibrated chip comes back whole through JSON, without the fresh
    process's own marks, and says which malloc it was measured under."""
    from fxroof.chips import parse_chip
    from fxroof.device import host_allocator
    from fxroof.probes import measure_calibrated_in_fresh_process

    entry = measure_calibrated_in_fresh_process("cpu", "glibc")
    assert "process" not in entry and "host_allocator" not in entry
    chip = parse_chip(entry, "(fresh)")
    assert chip.bandwidth > 0 and chip.calibration
    assert entry["sources"][0].endswith(f"host allocator {host_allocator()}")


def test_a_study_folder_from_before_the_allocator_setting_resumes(study, monkeypatch):
    """A folder whose study.json predates --allocator was a glibc study: it resumes with
    nothing run again, and the report says how it was measured."""
    root, paths = study
    manifest = os.path.join(root, "study.json")
    settings = json.load(open(manifest))
    del settings["allocator"]
    json.dump(settings, open(manifest, "w"))
    monkeypatch.setattr(Sweep, "run_task", lambda *a: pytest.fail("resumed a task"))
    run_study(small_config(), root, progress=False)
    assert "in the study's own process, under glibc's malloc" in open(paths["md"]).read()
    with pytest.raises(FxroofError, match="differs in: allocator"):
        monkeypatch.setattr(sweep_module, "host_allocator", lambda: "tcmalloc")
        run_study(small_config(allocator="caching"), root, progress=False)
