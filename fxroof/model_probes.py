"""Calibrating the time model inside whole models: the timing pass's per-node times.

An isolated probe runs one op again and again on the same tensors, so its weights and input
stay in the cache and its output buffer is reused: it finds the rates of an op with the
machine to itself. Inside a model an op reads weights no op before it touched this step and
writes where the previous layer's tensors were; on a 2-core CPU, the nodes of the study's
models took 1.3-2x what the probe-fitted parameters predicted (fxroof's timing pass against
`fxroof chips measure`'s quick calibration, benchmarks/README.md). So a full measurement
also times a few built-in models node by node with the same timing pass `fxroof profile`
uses (fxroof.timing), and each op class is fitted on probes and model nodes together.

What a model node is timed as: its time in a full forward (and backward) run of the graph's
generated code, overhead of the timer taken off, median over the repeats.
"""
from __future__ import annotations

from typing import Callable, Iterable, NamedTuple, Optional

from fxroof import calibration as cal, op_classes
from fxroof.analysis import analyze
from fxroof.device import layout_block
from fxroof.errors import FxroofError

class Run(NamedTuple):
    """One calibration run: a built-in model at a batch size, with its backward or not, in a
    memory format (None: contiguous)."""

    model: str
    batch: int
    backward: bool = False
    memory_format: Optional[str] = None

    def __str__(self) -> str:
        return (f"{self.model} b{self.batch}" + (" with backward" if self.backward else "")
                + (f" {self.memory_format}" if self.memory_format else ""))


# Small zoo models whose nodes span every CPU class -- dense, 1x1, depthwise and grouped
# convolutions, batch norm, pooling, concatenation and channel shuffles -- at batch sizes 1
# and 8; one at 32, where activations stream from memory into freshly mapped buffers and an
# NCHW convolution's layout reorders are large; a transformer (GEMMs, layer norm, softmax,
# attention); four with their backward (the conv_bwd* and norm_train classes: dense and
# depthwise convolution backward, training batch norm; at 1 and 8; mnasnet0_5 for its 5x5
# depthwise backward, which oneDNN runs another way, conv_bwd_dw_wide); and three channels-last
# (the conv_cl class: the layout torch.compile gives a CPU convolution), one of them
# mobilenet_v2 at batch 8, whose depthwise convolutions stream maps of 10-40 MB: without
# them no channels-last row left the cache, the class's memory rate fitted 0.15 of the
# bandwidth, and depthwise models' compiled steps at batch 8 were priced 1.3-1.4x long
# (benchmarks/README.md, compiled view run 9). Adding
# mobilenet_v2 b32, vit_b_16 b1 and resnet18 b8 with backward took `chips measure --full`
# from 54 s to 77 s on a 2-core CPU and moved its chips' median error on the 11 study
# models none of them is (benchmarks/README.md) from 35% to 24% at b32 and from 34% to 28%
# for training at b8, b1 and b8 inference unchanged within 1-2 points. And two NCHW
# depthwise models in inference at batch 1 (mobilenet_v2, mnasnet0_5): the study's depthwise
# models at b1 were priced 1.2-1.6x long on an AMD CPU, whose nodes of that kind the fit had
# only from training steps' forwards and channels-last runs; fitted with them, on two rounds
# each timed with its eager latencies at one machine state, those models came 0.04-0.13
# closer and rho at b1 rose 0.897 -> 0.904 and 0.949 -> 0.956 (benchmarks/README.md, run 15).
CALIBRATION_MODELS = (Run("resnet18", 1, True), Run("mobilenet_v2", 1, True),
                      Run("resnet18", 8, True), Run("mobilenet_v2", 8),
                      Run("mobilenet_v2", 32), Run("vit_b_16", 1),
                      Run("squeezenet1_0", 1), Run("shufflenet_v2_x1_0", 8),
                      Run("densenet121", 1), Run("resnet18", 8, memory_format="channels_last"),
                      Run("mobilenet_v2", 1, memory_format="channels_last"),
                      Run("mobilenet_v2", 8, memory_format="channels_last"),
                      Run("mnasnet0_5", 8, True), Run("mobilenet_v2", 1), Run("mnasnet0_5", 1))


def timed_records(run: Run, device: str = "cpu", repeats: int = 5) -> list[dict]:
    """The timed node records of one run (those that launch work)."""
    graph = analyze(run.model, batch=run.batch, backward=run.backward,
                    memory_format=run.memory_format)
    graph.time(device, repeats=repeats, warmup=1, progress=False)
    return [r for r in graph.records()
            if r["time_s"] is not None and op_classes.op_class_of(r) is not None]


def class_rows(records: Iterable[dict], block: int = 0) -> dict:
    """{op class: [calibration.Row, ...]} of timed node records, each in the class that
    prices it on a CPU (op_classes.op_class_on: a convolution run with ATen's kernels is
    conv_native), but for allocations of nothing (op_classes.empty_allocation), which the
    time model prices at 0: a batch norm's reserve, timed from Python by the timing pass,
    would teach the copy class the cold dispatch of a call that eager makes inside the
    batch norm. ``block``: the channels a block of the device's convolution layout
    (device.layout_block), for the rows' uneven reorders."""
    rows: dict = {}
    for r in records:
        if op_classes.empty_allocation(r):
            continue
        rows.setdefault(op_classes.op_class_on(r, "cpu"), []).append(
            cal.row_of(r, max(r["time_s"], 1e-7), block))
    return rows


def model_rows(device: str, models: Iterable[Run] = CALIBRATION_MODELS, repeats: int = 5,
               progress: Optional[Callable[[str], None]] = None) -> dict:
    """class_rows of every node of the calibration runs, timed on ``device``; a run that
    cannot run is skipped, with its reason."""
    say = progress or (lambda message: None)
    rows: dict = {}
    for run in models:
        say(f"model {run}, node by node")
        try:
            records = timed_records(run, device, repeats)
        except FxroofError as e:  # e.g. Inception's training batch norm at batch 1
            say(f"  skipped {run}: {str(e).splitlines()[0][:200]}")
            continue
        for op_class, found in class_rows(records, layout_block(device)).items():
            rows.setdefault(op_class, []).extend(found)
    return rows
