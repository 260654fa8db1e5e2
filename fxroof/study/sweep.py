"""The study's sweep: for every (device, model, batch) compute and cache three results.

* ``cost``:    fxroof.analyze on fake tensors -- the inference (eval, forward) graph and the
               training (forward+backward) graph: totals, memory, layer-type breakdowns and the
               node records the roofline predictions are made from (no real compute).
* ``latency``: eager inference, the way a user measures it: eval mode, inference_mode, warm-up
               runs, then repeats, each synchronised on CUDA; the median and quartiles.
* ``train``:   the timing pass over the training graph (every forward and backward node timed)
               and the eager forward/backward step beside it; at the ``train_batches`` only.
* ``compiled``: with ``compiled=True``, on the CPU: the compiled view (fxroof.compiled: the
               kernels Inductor schedules, their bytes) and the measured latency of
               ``torch.compile(model)`` (after its compile and warm-up), beside the eager one;
               with ``freeze=True`` both with Inductor's freezing, its CPU inference recipe.

The three that run the real model (latency, train, compiled) each run in a fresh Python
process (fxroof.latency, fxroof.measured), unless ``fresh_process=False``.

``allocator``: the host allocator of the processes measured, and the one whose page faults
the costs replay (fxroof.target): glibc's malloc, a plain ``python``, or ``caching``, which
the study gets by preloading tcmalloc into each fresh process. Each measurement records the
allocator its process really ran, and one taken under another is measured again.

Before the sweep each device's roofs are measured once (``fxroof chips measure``, quick) and
saved in the study folder, so predictions use the machine at hand, not only datasheets;
with the caching allocator, in a fresh process that runs it, as the time model's rates
are fitted on the probes' timed runs.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch
from tqdm import tqdm

from fxroof import op_classes
from fxroof.analysis import analyze
from fxroof.chips import read_file
from fxroof.device import caching_allocator_env, host_allocator
from fxroof.errors import FxroofError, UsageError
from fxroof.latency import FRESH, SHARED, error_record, measure_latency, run_latency
from fxroof.measured import COMPILED, TRAIN, measure, run_compiled, run_train
from fxroof.measure import save
from fxroof.models import build_model, default_inputs
from fxroof.probes import measure_calibrated, measure_calibrated_in_fresh_process
from fxroof.study.cache import Cache
from fxroof.target import ALLOCATOR_OF_HOST, ALLOCATORS, CACHING, GLIBC

COST, LATENCY = "cost", "latency"  # and fxroof.measured's TRAIN and COMPILED

# One model per family of the hand-made study, at its native input size.
DEFAULT_MODELS = ["alexnet", "vgg16", "resnet18", "resnet50", "googlenet", "inception_v3",
                  "squeezenet1_0", "mobilenet_v2", "mobilenet_v3_large", "shufflenet_v2_x1_0",
                  "mnasnet1_0", "efficientnet_b0", "regnet_y_400mf", "densenet121",
                  "convnext_tiny", "vit_b_16", "swin_t"]
# On this kind of 2-core CPU the default study takes about a quarter of an hour (measured in
# benchmarks/README.md); a GPU runs the study's own batch sizes.
DEFAULT_BATCHES = {"cpu": [1, 8, 32, 64], "cuda": [1, 64, 256]}
# What a cached result keeps of each node record: what the tables group by and what the
# time model reads (op_classes.RECORD_FIELDS). Cached records are versioned: results cached
# with fewer fields (before version 2; before 3, without the replayed page faults) or other
# values (before 4, a training step's faults replayed without the first backward's pin; before
# 5, depthwise convolutions not named so in their rule; before 6, a wide depthwise kernel's
# weight gradient not named so; before 7, a compiled view's transposing kernels not named
# so; before 8, a 1x1 convolution not named pointwise; before 9, without the saved
# activations' traffic) are computed again rather than predicted wrong.
RECORD_KEYS = ("phase", "layer_type") + op_classes.RECORD_FIELDS
RECORDS_VERSION = 9


@dataclass
class StudyConfig:
    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    batches: list[int] = field(default_factory=list)        # empty: DEFAULT_BATCHES per device
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    train_batches: list[int] = field(default_factory=list)  # empty: the smallest batch
    warmup: int = 1
    repeats: int = 5
    compiled: bool = False  # also the compiled view and torch.compile's latency (CPU)
    freeze: bool = False    # the compiled ones with Inductor's freezing
    fresh_process: bool = True  # each measurement in a new Python process (fxroof.measured)
    # each eager latency and training step measured this many times, in rounds over all the
    # points after the study's first pass; the median round counts (measured_result)
    rounds: int = 1
    allocator: str = GLIBC  # the measured processes' host allocator (fxroof.target.ALLOCATORS)
    # cuDNN's engine search (torch.backends.cudnn.benchmark) where the study measures and
    # predicts: a GPU's timed steps run with it, and the costs price its kernels
    cudnn_benchmark: bool = False
    # filled by resolved(): the batch sizes each device actually runs, so a study folder
    # keeps meaning what it meant when it was made, whatever later defaults become
    batches_by_device: dict = field(default_factory=dict)
    train_batches_by_device: dict = field(default_factory=dict)

    def __post_init__(self):
        # a model, batch or device named twice would be measured, tabled and counted in the
        # findings' medians twice: each is kept once, in the order first named
        for name in ("models", "batches", "devices", "train_batches"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)) and \
                    all(isinstance(v, (str, int)) for v in value):
                setattr(self, name, list(dict.fromkeys(value)))
        if not isinstance(self.rounds, int) or self.rounds < 1:
            raise UsageError(f"rounds={self.rounds!r}: a study measures each point in 1 or "
                             "more rounds (1: once).")

    def batches_for(self, device: str) -> list[int]:
        return self.batches_by_device.get(device) or self.batches or \
            DEFAULT_BATCHES["cuda" if device.startswith("cuda") else "cpu"]

    def train_batches_for(self, device: str) -> list[int]:
        return self.train_batches_by_device.get(device) or self.train_batches or \
            self.batches_for(device)[:1]

    def check_train_batches(self, device: str) -> None:
        """Refuse training batches the sweep would never reach: it times the training step
        only at batches it also runs inference at (their cost task holds the training
        graph), so another one would be skipped in silence."""
        batches = self.batches_for(device)
        missing = [b for b in self.train_batches if b not in batches]
        if missing:
            raise UsageError(
                f"--train-batch {' '.join(map(str, missing))}: the study times training only "
                f"at batches it also runs on {device} ({' '.join(map(str, batches))}). Add "
                f"{'it' if len(missing) == 1 else 'them'} to --batch, or choose training "
                "batches among those.")

    def check_allocator(self) -> None:
        """Refuse an allocator the study cannot measure under: an unknown one, or the caching
        allocator where tcmalloc is not installed (fresh processes preload it) or, with
        ``fresh_process=False``, where this process does not run it already."""
        if self.allocator not in ALLOCATORS:
            raise UsageError(f"Unknown allocator {self.allocator!r}: the study measures under "
                             f"{' or '.join(ALLOCATORS)}.")
        if self.allocator != CACHING:
            return
        if self.fresh_process:
            caching_allocator_env({})  # the clear error where tcmalloc is missing
        elif ALLOCATOR_OF_HOST.get(host_allocator()) != CACHING:
            raise UsageError(
                "--allocator caching with --in-process measures in this process, which runs "
                f"{host_allocator()}'s malloc, not a caching allocator. Drop --in-process (each "
                "measurement then runs in a fresh process with tcmalloc preloaded), or start "
                "this one with LD_PRELOAD=libtcmalloc_minimal.so.4.")

    def check_freeze(self) -> None:
        """Freezing is a way of compiling: without the compiled section there is nothing to
        freeze, and the flag would be ignored in silence."""
        if self.freeze and not self.compiled:
            raise UsageError("--freeze compiles the study's compiled section with Inductor's "
                             "freezing: add --compiled (eager vs compiled on the CPU), or "
                             "drop --freeze.")

    def resolved(self) -> "StudyConfig":
        return StudyConfig(**{**asdict(self),
                              "batches_by_device": {d: self.batches_for(d) for d in self.devices},
                              "train_batches_by_device": {d: self.train_batches_for(d)
                                                          for d in self.devices}})

    def as_dict(self) -> dict:
        return asdict(self)


def tasks(config: StudyConfig) -> list[tuple[str, str, int, str]]:
    """(device, model, batch, phase), model-major so each model is built once per device."""
    out = []
    for device in config.devices:
        for model in config.models:
            for batch in config.batches_for(device):
                out.append((device, model, batch, COST))
                out.append((device, model, batch, LATENCY))
                if batch in config.train_batches_for(device):
                    out.append((device, model, batch, TRAIN))
                if config.compiled and device == "cpu":
                    out.append((device, model, batch, COMPILED))
    # Later rounds go over every point in turn, after the whole first pass: a point's
    # measurements lie a round apart, so one slow spell of a shared machine (or one slow
    # process: a CPU model's latency moves 1.03-1.8x between them) decides none of them.
    for round_ in range(2, config.rounds + 1):
        out.extend((device, model, batch, round_phase(phase, round_))
                   for device, model, batch, phase in list(out) if phase in (LATENCY, TRAIN))
    return out


def round_phase(phase: str, round_: int) -> str:
    """The cache name of ``phase``'s measurement in round ``round_`` (the first: ``phase``)."""
    return phase if round_ == 1 else f"{phase}.{round_}"


def base_phase(phase: str) -> str:
    return phase.split(".")[0]


def measured_seconds(phase: str, result: dict) -> float:
    """A measurement's seconds: a latency's median, a training step's eager forward +
    backward."""
    if phase == LATENCY:
        return result["median_s"]
    eager = result["timing"]["eager_s"]
    return eager["forward"] + eager["backward"]


def measured_result(cache: Cache, rounds: int, device: str, model: str, batch: int,
                    phase: str) -> Optional[dict]:
    """The measurement (LATENCY or TRAIN) of the point's median round (the lower of two)
    among the first ``rounds`` measured without error, with their seconds, fastest first,
    under "rounds_s"; the first round's result (an error, or None) where none succeeded."""
    first = cache.get(device, model, batch, phase)
    found = [r for r in (cache.get(device, model, batch, round_phase(phase, k))
                         for k in range(1, rounds + 1)) if r is not None and "error" not in r]
    if not found:
        return first
    seconds = sorted(measured_seconds(phase, r) for r in found)
    median = sorted(found, key=lambda r: measured_seconds(phase, r))[(len(found) - 1) // 2]
    return median if rounds == 1 else {**median, "rounds_s": seconds}


def _compact(records: list[dict]) -> list[dict]:
    return [{k: r.get(k) for k in RECORD_KEYS} for r in records]


def outdated(phase: str, result: dict, config: "StudyConfig") -> bool:
    """A cached cost or compiled result whose node records predate RECORDS_VERSION, a
    compiled result frozen where the study does not freeze or the other way round (those
    from before freezing was recorded: not frozen), a result costed or measured under
    another host allocator than the study asks for (those from before the allocator was
    recorded: glibc's), or a measurement (latency, training step, compiled latency) taken in
    another kind of process than the study asks for (results from before the fresh
    processes were measured in the study's own)."""
    phase = base_phase(phase)
    if "error" in result:
        return False
    if phase in (COST, COMPILED) and result.get("records_version") != RECORDS_VERSION:
        return True
    if phase == COMPILED and result.get("frozen", False) != config.freeze:
        return True
    ran = result.get("allocator", GLIBC) if phase == COST else \
        ALLOCATOR_OF_HOST.get(result.get("host_allocator", "glibc"))
    if ran != config.allocator:
        return True
    return phase != COST and \
        result.get("process", SHARED) != (FRESH if config.fresh_process else SHARED)


def run_cost(model: str, batch: int, device: str = "cpu", allocator: str = GLIBC) -> dict:
    """The costs of the program ``device`` runs (a CUDA device: the CUDA target's), its page
    faults as ``allocator`` takes them."""
    target = "cuda" if device.startswith("cuda") else "cpu"
    infer = analyze(model, batch=batch, device=target, allocator=allocator)
    try:  # a training step can fail where inference does not (BatchNorm at batch 1)
        train = analyze(model, batch=batch, backward=True, device=target, allocator=allocator)
        training = {"totals": train.totals(), "memory": train.memory.as_dict(),
                    "layer_types": {p: train.breakdown("layer_type", phase=p)
                                    for p in ("forward", "backward")},
                    "records": _compact(train.records())}
    except FxroofError as e:
        training = {"error": str(e)}
    return {
        "records_version": RECORDS_VERSION,
        "allocator": allocator,
        "parameters": infer.model.parameters,
        "input_shape": infer.model.inputs[0]["shape"],
        "inference": {"totals": infer.totals()["forward"], "memory": infer.memory.as_dict(),
                      "layer_types": infer.breakdown("layer_type"),
                      "records": _compact(infer.records())},
        "train": training,
    }


class Sweep:
    """Runs the missing tasks of a study, caching each result as soon as it exists."""

    def __init__(self, config: StudyConfig, cache: Cache, force: bool = False,
                 progress: bool = True):
        self.config = config
        self.cache = cache
        self.force = force
        self.progress = progress
        self._module: Optional[tuple[str, torch.nn.Module]] = None

    def pending(self) -> list[tuple[str, str, int, str]]:
        todo = tasks(self.config)
        if self.force:
            return todo
        return [t for t in todo if (found := self.cache.get(*t)) is None
                or outdated(t[3], found, self.config)]

    def _real_module(self, model: str) -> torch.nn.Module:
        """The model with real (random) weights on the CPU, built once per model."""
        if self._module is None or self._module[0] != model:
            self._module = (model, build_model(model, device="cpu"))
        return self._module[1]

    def run_task(self, device: str, model: str, batch: int, phase: str) -> dict:
        try:
            if phase == COST:
                return run_cost(model, batch, device, self.config.allocator)
            result = self._measure(device, model, batch, phase)
            if phase == COMPILED and "error" not in result:
                result = {**result, "records": _compact(result["records"]),
                          "records_version": RECORDS_VERSION}
            return result
        except Exception as e:  # one failing task is recorded and the sweep goes on
            return error_record(e)
        finally:
            if device.startswith("cuda") and torch.cuda.is_available():
                torch.cuda.empty_cache()

    def _measure(self, device: str, model: str, batch: int, phase: str) -> dict:
        """A task that runs the real model: in a fresh process, or in this one."""
        phase = base_phase(phase)  # a later round measures as the first does
        warmup, repeats, allocator = self.config.warmup, self.config.repeats, \
            self.config.allocator
        if self.config.fresh_process:
            if phase == LATENCY:
                return measure_latency(model, batch, device, warmup, repeats, allocator)
            return measure(phase, model, batch, device, warmup, repeats, allocator,
                           self.config.freeze)
        module = self._real_module(model)
        inputs = default_inputs(model, module, batch, None)
        if phase == LATENCY:
            result = run_latency(module, inputs, device, warmup, repeats)
        elif phase == COMPILED:
            result = run_compiled(module, model, batch, inputs, warmup, repeats, allocator,
                                  self.config.freeze)
        else:
            result = run_train(module, model, inputs, device, warmup, repeats)
        return {**result, "process": SHARED, "host_allocator": host_allocator()}

    def run(self) -> int:
        """Run every pending task; returns how many ran. One failing task is recorded (its
        error is the cached result) and the sweep goes on."""
        todo = self.pending()
        bar = tqdm(todo, unit="task", disable=not self.progress, dynamic_ncols=True)
        for device, model, batch, phase in bar:
            bar.set_description(f"{model} b{batch} {device} {phase}")
            self.cache.put(device, model, batch, phase,
                           self.run_task(device, model, batch, phase))
        self._module = None
        return len(todo)


def measure_roofs(config: StudyConfig, cache: Cache, force: bool, progress: bool,
                  allow_measure: bool = True) -> dict:
    """Each device's measured roofs, measured once per study (quick mode) and reused."""
    chips = {}
    for device in config.devices:
        path = cache.chip_path(device)
        if not allow_measure and not os.path.exists(path):
            raise FxroofError(f"The study has no measured roofs for {device} ('{path}' is "
                              "missing): run the study without --report-only first.")
        if force or not os.path.exists(path):
            say = (lambda message: print(f"measuring {device}: {message}", flush=True)) \
                if progress else None
            save(_measured_roofs(device, config.allocator, say), path, force=True)
        chips[device] = read_file(path)[0]
    return chips


def _measured_roofs(device: str, allocator: str, say) -> dict:
    """A quick calibrated chip entry of ``device``, measured in this process, or in a fresh
    one running the caching allocator where the study measures under it and this process
    does not run it (its rates are fitted on timed probes, which faults would slow)."""
    if allocator == CACHING and ALLOCATOR_OF_HOST.get(host_allocator()) != CACHING:
        if say:
            say("in a fresh process with tcmalloc preloaded")
        return measure_calibrated_in_fresh_process(device, allocator)
    return measure_calibrated(device, quick=True, progress=say)
