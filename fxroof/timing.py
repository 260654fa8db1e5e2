"""The timing pass: run the captured forward graph, then the backward graph, on real tensors
and time every ATen node. Writes ``node.meta[TIME]`` (a :class:`~fxroof.timers.Summary`) and
returns a :class:`TimingReport`.

The forward graph runs with the model's own parameters (moved to the device), copies of its
buffers (the model's running stats are never touched) and random inputs of the recorded shapes;
the backward graph runs with the tensors the forward saved and a random gradient for each
differentiable output -- exactly the ops of an eager training step, one by one. Both run
under no_grad: the backward is explicit in the graph.

Each graph runs as generated straight-line code with a timer around each node
(TimedProgram); the timers' own cost is measured by timing nodes that do nothing
(``overhead_s``) and is subtracted from CPU timings; on CUDA, events measure device time, which
host overhead does not inflate unless the GPU starves. Beside the per-node sum, the plain eager
step (model forward, then autograd backward, synchronised) is timed on the same inputs (after
the nodes, or before them: ``eager_first``).
"""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import asdict, dataclass
from typing import Optional

import torch
import torch.fx as fx
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils import _pytree as pytree

from fxroof.cost_pass import is_costed
from fxroof.device import (Stopwatch, available_bytes, check_device, out_of_memory,
                           random_like, repeat)
from fxroof.errors import FxroofError
from fxroof.guard import preserved, set_mode
from fxroof.keys import BACKWARD, FORWARD, INPUT, ORIGIN, SHAPES, TIME
from fxroof.timers import CpuTimer, CudaTimer, summarize
from fxroof.units import DTYPE_ALIASES, si
from fxroof.validate import nonnegative_int, positive_int


@dataclass
class TimingReport:
    device: str
    warmup: int
    repeats: int
    overhead_s: float                 # measured cost of timing one node, seconds
    interpreted_s: dict               # phase -> sum of node medians, seconds
    eager_s: dict                     # phase -> median eager time, seconds

    def ratio(self, phase: str) -> Optional[float]:
        eager = self.eager_s.get(phase)
        return self.interpreted_s[phase] / eager if eager else None

    def as_dict(self) -> dict:
        out = asdict(self)
        out["ratio"] = {p: self.ratio(p) for p in self.interpreted_s}
        return out


class TimedProgram:
    """A graph compiled to straight-line Python (fx's code generation, as a GraphModule
    runs it) with the timer's ``start`` and ``stop`` right around each timed node's call.

    Not an fx.Interpreter: between two nodes an interpreter fetches arguments from its
    environment, enters a context manager and stores results -- 4-34 us of Python per
    node that landed inside the timed regions and that timing an empty node does not
    measure (mobilenet_v3_small at batch 1 on a 2-core EPYC: its forward's 192 nodes summed
    to 17.9-19.4 ms interpreted, 14.8-15.4 ms compiled, its GraphModule called untimed
    14.1-15.6 ms and the eager model 15.3-16.0 ms; a convolution 34 us apart). What the
    program runs between two timers is what the generated forward runs: a local variable's
    load per argument. A node's inputs are released after its ``stop`` (they are passed to
    it), so freeing what it consumed is not timed, as an interpreter did not time it.

    ``device``: where the graph runs. A node that names a device (a ``_to_copy`` of the
    backward of an autocast cast, which autograd records as "back to the input's device")
    names the one the graph was captured on -- the fake tensors' CPU, even for a CUDA
    target -- so it is run on ``device`` instead, or an `--amp` training step's gradients
    would be copied to the host (and the next CUDA kernel refuse them)."""

    def __init__(self, graph: fx.Graph, timed=is_costed, device: Optional[torch.device] = None):
        self.nodes: list[fx.Node] = []
        program = fx.Graph()
        clock = program.placeholder("clock")
        env: dict = {}
        for n in graph.nodes:
            timed_here = n.op == "call_function" and timed(n)
            if timed_here:
                program.call_function(_start, (clock, len(self.nodes)))
                self.nodes.append(n)
            env[n] = copy = program.node_copy(n, env.__getitem__)
            if device is not None and n.op == "call_function" and "device" in copy.kwargs:
                copy.kwargs = {**copy.kwargs, "device": device}
            if timed_here:
                program.call_function(_stop, (clock, len(self.nodes) - 1,
                                              *copy.all_input_nodes))
        self.module = fx.GraphModule(torch.nn.Module(), program)

    def run(self, timer, *inputs):
        clock = _Clock(timer, self.nodes)
        try:
            return self.module(clock, *inputs)
        except Exception as e:
            failed = clock.running()
            if failed is None or out_of_memory(e):
                raise
            raise FxroofError(_node_failed(failed, e)) from None


class _Clock:
    """The timer as a TimedProgram calls it: by node index, keeping the node it started
    last until it stops, so the node a failure came from can be named."""

    __slots__ = ("timer", "nodes", "current")

    def __init__(self, timer, nodes: list):
        self.timer, self.nodes, self.current = timer, nodes, None

    def start(self, index: int) -> None:
        self.current = index
        self.timer.start(self.nodes[index])

    def stop(self, index: int) -> None:
        self.timer.stop(self.nodes[index])
        self.current = None

    def running(self) -> Optional[fx.Node]:
        return None if self.current is None else self.nodes[self.current]


def _start(clock: _Clock, index: int) -> None:
    clock.start(index)


def _stop(clock: _Clock, index: int, *inputs) -> None:
    """``inputs``: the node's own, so the generated code frees them after this call."""
    clock.stop(index)


def _node_failed(n: fx.Node, e: Exception) -> str:
    origin = n.meta.get(ORIGIN)
    where = f" in `{origin.module or '(root)'}` ({origin.layer_type})" if origin else ""
    return (f"Node `{n.name}` ({n.target}){where} failed on the device: "
            f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}. "
            "The graph was captured on fake tensors; an op that fails for real usually needs a "
            "device or dtype it does not support here -- try --device cpu or the default dtype.")


def laid_out(tensor: torch.Tensor, meta) -> torch.Tensor:
    """``tensor`` channels-last where the graph recorded it so (a `--memory-format
    channels_last` analysis): the timed run must take the analysed program's kernels, and an
    NCHW convolution is not the channels-last one."""
    channels_last = tensor.dim() == 4 and torch.empty_strided(
        meta.shape, meta.stride, device="meta").is_contiguous(memory_format=torch.channels_last)
    if channels_last and not tensor.is_contiguous(memory_format=torch.channels_last):
        return tensor.contiguous(memory_format=torch.channels_last)
    return tensor


def _random_like(meta, device) -> torch.Tensor:
    return laid_out(random_like(meta.shape, meta.dtype, device), meta)


def model_state(graph: fx.Graph, module: torch.nn.Module, device) -> dict:
    """Parameters and (copies of) buffers on the device, in the dtype the graph recorded.
    Copies of buffers: the running stats of the user's model are never updated."""
    own = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    state = {}
    for n in graph.nodes:
        kind = n.meta.get(INPUT)
        if n.op == "placeholder" and kind.kind in ("parameter", "buffer"):
            tensor = own[kind.label].detach()
            state[kind.label] = laid_out(tensor.to(device=device, dtype=n.meta[SHAPES].dtype,
                                                   copy=kind.kind == "buffer"), n.meta[SHAPES])
    return state


def forward_inputs(graph: fx.Graph, state: dict, device) -> list:
    values = []
    for n in graph.nodes:
        if n.op == "placeholder":
            kind = n.meta[INPUT]
            values.append(state[kind.label] if kind.kind in ("parameter", "buffer") else
                          _random_like(n.meta[SHAPES], device))
    return values


def backward_inputs(graph: fx.Graph, saved: dict, device) -> list:
    values = []
    for n in graph.nodes:
        if n.op != "placeholder":
            continue
        kind = n.meta[INPUT]
        values.append(saved[kind.label] if kind.kind == "saved" else
                      _random_like(n.meta[SHAPES], device))
    return values


def _nothing(x):
    return x


def measure_overhead(timer, device, nodes: int = 500, rounds: int = 5) -> float:
    """Median time a timed node whose op does nothing takes: a call from the generated code
    and the timer's own start and stop -- what timing adds to every node."""
    graph = fx.Graph()
    value = graph.placeholder("x")
    for _ in range(nodes):
        value = graph.call_function(_nothing, (value,))
    graph.output(value)
    program = TimedProgram(graph, timed=lambda n: True)
    x = torch.zeros(1, device=device)
    samples = []
    for _ in range(rounds):
        program.run(timer, x)
        samples.extend(timer.collect().values())
    return statistics.median(samples)


def time_graphs(graph, module: torch.nn.Module, device: str = "cpu", warmup: int = 2,
                repeats: int = 10, progress=None, eager_first: bool = False) -> TimingReport:
    """Time every node of an AnnotatedGraph's graphs; see the module docstring.
    ``eager_first``: time the eager step before the nodes, not after. On a CPU the order
    matters: each run leaves glibc's allocator in a state the next inherits (a fresh
    process's eager training step of mobilenet_v2 b1 faulted 37 MB of pages a step before
    the node runs, none after them), so the study, which wants the step a user's own loop
    runs, times it first."""
    repeats, warmup = positive_int(repeats, "repeats"), nonnegative_int(warmup, "warmup")
    dev = check_device(device)
    _check_it_fits(graph, dev)
    timer = CudaTimer() if dev.type == "cuda" else CpuTimer()
    forward = TimedProgram(graph.forward, device=dev)
    backward = TimedProgram(graph.backward, device=dev) if graph.backward else None
    saved_names = graph.capture.saved

    def step() -> dict:
        inputs = forward_inputs(graph.forward, state, dev)
        outputs = forward.run(timer, *inputs)
        if backward is not None:
            saved_values = outputs[len(outputs) - len(saved_names):]
            saved = dict(zip(saved_names, saved_values, strict=True))
            backward.run(timer, *backward_inputs(graph.backward, saved, dev))
        return timer.collect()  # one synchronisation per iteration on CUDA

    try:
        state = model_state(graph.forward, module, dev)
        if eager_first:
            eager = eager_step(graph, module, state, dev, warmup, repeats)
        with torch.no_grad():
            runs = repeat(step, warmup, repeats, progress)
        overhead = measure_overhead(timer, dev)
        if not eager_first:
            eager = eager_step(graph, module, state, dev, warmup, repeats)
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
        if out_of_memory(e):
            raise FxroofError(_oom_message(graph, device)) from None
        raise
    samples: dict = {}
    for times in runs:
        for node, seconds in times.items():
            samples.setdefault(node, []).append(seconds)

    subtract = overhead if dev.type == "cpu" else 0.0
    totals = {FORWARD: 0.0}
    if backward is not None:
        totals[BACKWARD] = 0.0
    for node, values in samples.items():
        adjusted = [max(v - subtract, 0.0) for v in values]
        summary = summarize(adjusted)
        node.meta[TIME] = summary
        totals[node.meta[ORIGIN].phase] += summary.median_s
    graph.timing = TimingReport(str(dev), warmup, repeats, overhead, totals, eager)
    return graph.timing


def eager_step(graph, module, state: dict, dev, warmup: int, repeats: int) -> dict:
    """Median time of the plain eager step: model forward, then autograd backward."""
    own = dict(module.named_parameters())
    backward = graph.model.backward
    params = {n: t.detach().requires_grad_(backward and own[n].requires_grad)
              for n, t in state.items() if n in own}
    buffers = {n: t.clone() for n, t in state.items() if n not in own}
    tensors = iter(_random_like(n.meta[SHAPES], dev) for n in graph.forward.nodes
                   if n.op == "placeholder" and n.meta[INPUT].kind == "input")
    leaves = [next(tensors) if is_tensor else value for is_tensor, value in graph.input_leaves]
    args, kwargs = pytree.tree_unflatten(leaves, graph.input_spec)
    watch = Stopwatch(dev)
    # the recorded forward holds autocast's casts and lower-precision kernels, so the step
    # it is compared with runs under the same autocast (on an H200 vit_b_16's bf16 nodes
    # summed to 0.66x of the eager step, which had run in fp32)
    amp = graph.model.amp
    autocast = (torch.autocast(dev.type, dtype=getattr(torch, DTYPE_ALIASES[amp])) if amp
                else contextlib.nullcontext())

    def step() -> tuple[float, float]:
        with torch.set_grad_enabled(backward):
            watch.start()
            with autocast:
                out = module(*args, **kwargs)
            forward_s = watch.lap()
            if backward:
                outs = [o for o in pytree.tree_leaves(out)
                        if isinstance(o, torch.Tensor) and o.requires_grad]
                wrt = [p for p in params.values() if p.requires_grad]
                torch.autograd.grad(outs, wrt, [torch.randn_like(o) for o in outs],
                                    allow_unused=True)
            return forward_s, watch.lap()

    # the module runs on the step's tensors, swapped in once for all the runs (and back
    # after, as the user's train/eval flags): torch.func.functional_call swaps them on every
    # call, which cost a small model's step more than its ops (mobilenet_v2 b1 on a 2-core
    # EPYC: 36.5 ms a call against 31.9 plain, 32.1 swapped once)
    with preserved(module), _reparametrize_module(module, {**params, **buffers},
                                                  tie_weights=True):
        set_mode(module, graph.model.mode == "train")
        laps = repeat(step, warmup, repeats)
    result = {FORWARD: statistics.median(f for f, _ in laps)}
    if backward:
        result[BACKWARD] = statistics.median(b for _, b in laps)
    return result


def _check_it_fits(graph, dev: torch.device) -> None:
    """Refuse a step whose estimated peak exceeds the memory free, before it allocates: past
    it, Linux's OOM killer ends the process (SIGKILL: no message, nothing to catch)."""
    free = available_bytes(dev)
    if free is not None and graph.memory.peak_bytes > free:
        raise FxroofError(_oom_message(graph, str(dev), free))


def _oom_message(graph, device: str, free: Optional[int] = None) -> str:
    there = f", and {si(free, 'B')} is free" if free is not None else ""
    return (f"Out of memory on {device} timing {graph.model.name} at batch {graph.model.batch}: "
            f"the cost pass estimates a peak of {si(graph.memory.peak_bytes, 'B')} for this step "
            f"(parameters {si(graph.memory.parameter_bytes, 'B')}, saved for backward "
            f"{si(graph.memory.saved_for_backward_bytes, 'B')}){there}. Use a smaller --batch, "
            "or analyse costs only with `fxroof annotate`, which needs no device memory.")
