"""Eager vs compiled on this CPU: what the compiled view predicts, and what torch.compile does.

    python benchmarks/bench_compiled.py [--models ...] [--batch 1 8] [--repeats 10] [--freeze]
                                        [--processes 3] [--in-process] [--chip this-cpu]
                                        [--allocator glibc|caching]
                                        [--json r.json] [--measured r0.json [r1.json ...]]

For every (model, batch): the eager analysis and the compiled view (fxroof.compiled) give the
bytes each moves and a predicted time on the measured chip (calibrated time model); the model
is then run for real, eager and through torch.compile (Inductor's C++ backend, after its
compile and a warm-up), and the medians compared. Each (model, batch) is measured in
--processes fresh interpreters per view, each timing eager or compiled calls only (unless
--in-process; 2026-11-25: before, one process interleaved the two, and under glibc each
eager call's freed memory made the next compiled call fault its buffers in again), and
each latency is the median over them:
on this shared machine one process's median differs from the next one's by up to 1.9x
(regnet_y_400mf b8 compiled: 51-97 ms in five processes on an idle machine), more than
the differences between models the ranking has to resolve. Reported per batch: compiled / eager bytes, the predicted and the
measured speed-up (eager / compiled time), and Spearman rho between the two over the models
(issue 17's goal: rho >= 0.9, compiled bytes <= eager bytes).
--freeze compiles both the view and the measured model with Inductor's freezing
(torch._inductor.config.freezing = True, its CPU inference recipe).
--allocator caching runs the measured processes with tcmalloc (LD_PRELOAD; Debian's
libtcmalloc-minimal4), which keeps freed pages, and predicts both views with
``allocator="caching"`` (no page faults): the same comparison without glibc's page faults,
whose count and cost vary from call to call on this machine.
The chip is this machine's (`fxroof chips measure --full`, run first if --chip names none
saved or one without the torch.compile probes).
Measure on an idle machine: every model is compiled for real (about 20 s each on 2 cores).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
from scipy.stats import spearmanr
from torch._inductor import config as inductor_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import script_main  # noqa: E402

import fxroof  # noqa: E402
from fxroof.chips import load_chips  # noqa: E402
from fxroof.device import caching_allocator_env  # noqa: E402
from fxroof.files import atomic, check_writable  # noqa: E402
from fxroof.measure import save  # noqa: E402
from fxroof.model_probes import CALIBRATION_MODELS  # noqa: E402
from fxroof.models import build_model, default_input_shape  # noqa: E402
from fxroof.probes import measure_calibrated  # noqa: E402
from fxroof.prediction import predict  # noqa: E402
from fxroof.study import DEFAULT_MODELS  # noqa: E402


VIEWS = ("eager", "compiled")


def median_latency(fn, x, repeats: int) -> float:
    """Median seconds per call of ``fn`` after two warm-up calls (for a compiled model, the
    first is the compile itself)."""
    times = []
    with torch.no_grad():
        fn(x)
        fn(x)
        for _ in range(repeats):
            start = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(model: str, batch: int, repeats: int, freeze: bool = False,
            views: tuple = VIEWS) -> dict:
    """Measured seconds per call of each of ``views`` ("eager", "compiled"; frozen: with
    Inductor's freezing, which applies when the compile runs, at the first call, under
    no_grad), one view's calls after the other's, never interleaved: under glibc's malloc an
    eager call gives its tens of MB back to the kernel, and a compiled call after it faults
    its buffers in again (mobilenet_v3_large b8: 18 MB and 23.5 ms a call, against none and
    19.8 ms in a loop of its own) -- a program no user runs."""
    module = build_model(model, device="cpu").eval()
    x = torch.randn(default_input_shape(model, module, batch))
    measured = {}
    for view in views:
        torch._dynamo.reset()
        with inductor_config.patch(freezing=freeze):
            measured[view] = median_latency(module if view == "eager" else
                                            torch.compile(module), x, repeats)
    torch._dynamo.reset()
    return measured


def measure_fresh(model: str, batch: int, repeats: int, freeze: bool = False,
                  views: tuple = VIEWS) -> dict:
    """``measure`` in a new interpreter (multiprocessing's spawn), as the study measures its
    latencies (fxroof.latency): on a CPU a process that ran other models first faults fewer
    pages in, and the time model prices a process that runs this one model only."""
    # an executor shuts its worker down cleanly (a Pool's exit terminates it mid-teardown,
    # leaking the semaphores of Inductor's compile workers)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure, model, batch, repeats, freeze, views).result()


def measure_processes(model: str, batch: int, repeats: int, processes: int,
                      freeze: bool = False) -> dict:
    """{"eager": s, "compiled": s, "runs": n}: the median of each latency over ``processes``
    fresh interpreters per view, each timing one view only (as a user's process runs one),
    eager's and compiled's alternating so that a neighbour's load on this shared machine
    falls on both alike."""
    runs = [measure_fresh(model, batch, repeats, freeze, (view,))
            for _ in range(processes) for view in VIEWS]
    return {view: statistics.median(r[view] for r in runs if view in r) for view in VIEWS} | \
        {"runs": processes}


def preload_tcmalloc() -> str:
    """Make the fresh interpreters this process spawns run with tcmalloc (they inherit the
    environment; this process keeps glibc's malloc); what they preload."""
    os.environ.update(caching_allocator_env(dict(os.environ)))
    return os.environ["LD_PRELOAD"]


def row(model: str, batch: int, chip, repeats: int, measured=None, freeze=False,
        fresh=True, processes=3, allocator="glibc") -> dict:
    """One (model, batch): bytes and predicted times of both views, and the measured ones
    (``measured``: {"eager": s, "compiled": s[, "runs": n]} of earlier runs, to predict
    again only)."""
    eager = fxroof.analyze(model, batch=batch, allocator=allocator)
    compiled = fxroof.analyze(model, batch=batch, compiled=True, freeze=freeze,
                              allocator=allocator)
    if measured is None:
        measured = (measure_processes(model, batch, repeats, processes, freeze) if fresh
                    else measure(model, batch, repeats, freeze))
    eager_s, compiled_s = measured["eager"], measured["compiled"]
    runs = measured.get("runs", 1)
    predicted = {view: predict(g.records(), chip)["overall"]["predicted_s"]
                 for view, g in (("eager", eager), ("compiled", compiled))}
    bytes_ = {view: g.totals()["overall"]["bytes"]
              for view, g in (("eager", eager), ("compiled", compiled))}
    copies = compiled.layout_copy_bytes()
    return {"model": model, "batch": batch, "frozen": freeze, "fresh_process": fresh,
            "allocator": allocator,
            "eager_bytes": bytes_["eager"],
            "compiled_bytes": bytes_["compiled"], "layout_copy_bytes": copies,
            "kernels": len(compiled.records()), "aten_nodes": len(eager.records()),
            "predicted_eager_s": predicted["eager"], "predicted_compiled_s": predicted["compiled"],
            "measured_eager_s": eager_s, "measured_compiled_s": compiled_s,
            "measured_runs": runs,
            "predicted_speedup": predicted["eager"] / predicted["compiled"],
            "measured_speedup": eager_s / compiled_s}


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for batch in sorted({r["batch"] for r in rows}):
        mine = [r for r in rows if r["batch"] == batch]
        rho = spearmanr([r["predicted_speedup"] for r in mine],
                        [r["measured_speedup"] for r in mine]).statistic if len(mine) > 2 \
            else float("nan")
        fewer = sum(r["compiled_bytes"] <= r["eager_bytes"] for r in mine)
        lines.append(f"batch {batch}: {len(mine)} models, Spearman rho (predicted vs measured "
                     f"speed-up) {rho:.2f}; compiled bytes <= eager for {fewer} of {len(mine)}")
    return lines


def _chip(chip_id: str):
    chips = load_chips()
    if chip_id not in chips or "fused" not in chips[chip_id].calibration:
        print(f"measuring this machine as {chip_id} (fxroof chips measure --full: the "
              "compiled view's kernels need its torch.compile probes)", file=sys.stderr)
        save(measure_calibrated("cpu", quick=False, compiled=True, models=CALIBRATION_MODELS),
             force=True)
        chips = load_chips()
    return chips[chip_id]


def _earlier_runs(paths: list[str], freeze: bool, allocator: str = "glibc") -> dict:
    """{(model, batch): {"eager": s, "compiled": s, "runs": n}}: the median of each
    latency over the earlier runs' --json files that measured that (model, batch). Runs on
    different days of this shared machine differ by up to 1.6x for one model (alexnet b8
    eager: 83, 131 and 87 ms in runs 8-10), so the ranking is checked against a median."""
    found: dict = {}
    for path in paths:
        for key, latencies in _earlier(path, freeze, allocator).items():
            found.setdefault(key, []).append(latencies)
    return {key: {"eager": statistics.median(m["eager"] for m in runs),
                  "compiled": statistics.median(m["compiled"] for m in runs),
                  "runs": len(runs)}
            for key, runs in found.items()}


def _earlier(path: str, freeze: bool, allocator: str = "glibc") -> dict:
    """{(model, batch): {"eager": s, "compiled": s}} of an earlier run's --json, measured
    frozen or not, and with the allocator, this run asks for."""
    try:
        with open(path) as f:
            rows = json.load(f)["rows"]
        earlier = {(r["model"], r["batch"]): {"eager": r["measured_eager_s"],
                                              "compiled": r["measured_compiled_s"]}
                   for r in rows}
        frozen = {bool(r.get("frozen", False)) for r in rows}
        allocators = {r.get("allocator", "glibc") for r in rows}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--measured {path}: not a bench_compiled --json ({e}). Pass the "
                         "file an earlier `bench_compiled.py --json` wrote.") from None
    if frozen and frozen != {freeze}:
        raise SystemExit(f"--measured {path} was measured {'with' if not freeze else 'without'}"
                         f" freezing; predict it again {'with' if not freeze else 'without'} "
                         "--freeze.")
    if allocators and allocators != {allocator}:
        raise SystemExit(f"--measured {path} was measured with the {', '.join(allocators)} "
                         f"allocator; predict it again with --allocator "
                         f"{next(iter(allocators))}.")
    return earlier


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--freeze", action="store_true",
                   help="compile with Inductor's freezing, the view and the measured model")
    p.add_argument("--processes", type=int, default=3,
                   help="fresh interpreters each (model, batch) is measured in; each latency is "
                        "the median over them")
    p.add_argument("--in-process", action="store_true",
                   help="measure every model in this process, one after another, not each "
                        "(model, batch) in a fresh one")
    p.add_argument("--chip", default="this-cpu")
    p.add_argument("--allocator", choices=["glibc", "caching"], default="glibc",
                   help="caching: measure with tcmalloc preloaded and predict without page "
                        "faults (fresh processes only)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--measured", metavar="PATH", nargs="+",
                   help="earlier runs' --json files: predict again (another chip measurement, "
                        "a changed time model) against their measured latencies (with several "
                        "files, the median of each latency), running nothing")
    args = p.parse_args()
    if args.processes < 1:
        p.error(f"--processes {args.processes}: measure in at least 1 process")
    if args.allocator == "caching" and args.in_process:
        p.error("--allocator caching measures in fresh processes (an allocator is chosen "
                "when a process starts): drop --in-process")
    if args.json:
        check_writable(args.json, overwrite=True)
    if args.allocator == "caching" and not args.measured:
        print(f"measuring with LD_PRELOAD={preload_tcmalloc()}", flush=True)
    earlier = _earlier_runs(args.measured, args.freeze, args.allocator) if args.measured else {}
    chip, rows = _chip(args.chip), []
    for model in args.models:
        for batch in args.batch:
            if args.measured and (model, batch) not in earlier:
                print(f"{model} b{batch}: not in {' '.join(args.measured)}, skipped",
                      file=sys.stderr)
                continue
            r = row(model, batch, chip, args.repeats, earlier.get((model, batch)), args.freeze,
                    fresh=not args.in_process, processes=args.processes,
                    allocator=args.allocator)
            rows.append(r)
            print(f"{model} b{batch}: bytes compiled/eager "
                  f"{r['compiled_bytes'] / r['eager_bytes']:.2f}, speed-up predicted "
                  f"{r['predicted_speedup']:.2f} measured {r['measured_speedup']:.2f}",
                  flush=True)
    for line in summary(rows):
        print(line)
    if args.json:
        with atomic(args.json) as f:
            json.dump({"rows": rows, "summary": summary(rows)}, f, indent=1)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
