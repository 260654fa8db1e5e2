"""AnnotatedGraph: the canonical artefact. Forward and backward ATen fx graphs whose nodes carry
what each pass wrote into ``node.meta`` (keys.py: capture's ORIGIN and SHAPES, the cost pass's
COST, the timing pass's TIME, the roofline pass's ROOF), plus the model description and the
memory report.

The graph is plain data: its views (``records``, ``totals``, ``breakdown``, ``coverage``) only
read node.meta and recompute nothing. Its other methods are one-line conveniences over the
passes and renderers, which take an AnnotatedGraph and never import this module.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch
import torch.fx as fx
from tqdm.auto import tqdm

from fxroof import export, op_classes, prediction, render, rollups, timing, trace
from fxroof.capture import Capture
from fxroof.cost_pass import is_costed
from fxroof.device import check_device
from fxroof.errors import FxroofError, UsageError
from fxroof.keys import (ACCUMULATES, AUTOCAST_INTERNAL, BACKWARD, COST, FAULTS, FORWARD,
                         KERNEL, OPTIMIZER, ORIGIN, PHASES, PLAN_BUILD, ROOF, SAVED_TRAFFIC,
                         SHAPES, TIME, UNPRICED)
from fxroof.memory import MemoryReport
from fxroof.models import build_model, reparameterized
from fxroof.units import dtype_name
from fxroof.validate import nonnegative_int, positive_int
from op_costs import DEFAULT_RULE, TensorMeta


@dataclass
class Source:
    """What the timing pass needs to run the step for real."""

    module: object          # the nn.Module analysed (its weights may be on the meta device)
    spec: Optional[str]     # the model spec it was built from, if any
    input_spec: object      # pytree spec of (args, kwargs)
    input_leaves: list      # per leaf: (is_tensor, value for non-tensor leaves)
    hf_config: Optional[dict] = None  # hf: overrides, so a rebuilt model has the same shape
    reparameterize: bool = False      # ... and fused for inference as the analysed one was

    def rebuilt(self) -> torch.nn.Module:
        """The named model again, with random weights on the CPU, as it was analysed."""
        module = build_model(self.spec, device="cpu", hf_config=self.hf_config)
        return reparameterized(module)[0] if self.reparameterize else module


@dataclass
class ModelInfo:
    name: str
    batch: Optional[int]
    inputs: list            # [{"shape": [...], "dtype": "float32"}]
    dtype: str
    mode: str               # "train" | "eval"
    backward: bool
    parameters: int         # parameter count (elements)
    device: str = "cpu"
    allocator: str = "glibc"  # the host allocator whose page faults were replayed (fxroof.target)
    view: str = "eager"     # "eager": ATen ops as dispatched; "compiled": Inductor's kernels
    frozen: bool = False    # compiled view: with Inductor's freezing (constant weights)
    amp: Optional[str] = None        # autocast's lower precision: "fp16" | "bf16"
    loss: Optional[str] = None       # the loss the backward differentiates
    optimizer: Optional[str] = None  # "adamw (foreach)": its update is the optimizer phase
    eager_flops: Optional[int] = None  # compiled view: the eager step's FLOPs (what ran outside
                                       # Dynamo's regions, eagerly, is the difference)
    reparameterized: Optional[int] = None  # fused for inference: how many submodules were

    def as_dict(self) -> dict:
        return asdict(self)


def _output_shape(node: fx.Node):
    """(shape, dtype) of a node's first output; the dtype of its first tensor output where
    the first is None -- a convolution backward that computes no input gradient (a
    network's first layer) still runs in its weight gradient's dtype."""
    shapes = node.meta.get(SHAPES)
    outputs = [shapes] if isinstance(shapes, TensorMeta) else list(shapes or ())
    tensors = [o for o in outputs if isinstance(o, TensorMeta)]
    dtype = dtype_name(tensors[0].dtype) if tensors else None
    first = outputs[0] if outputs else None
    return (list(first.shape) if isinstance(first, TensorMeta) else []), dtype


def _layout(node: fx.Node) -> Optional[str]:
    """The layout (TensorMeta.layout) of a node's first output: what a convolution's cost
    on a CPU depends on (fxroof.calibration's conv_cl class)."""
    shapes = node.meta.get(SHAPES)
    first = shapes if isinstance(shapes, TensorMeta) else (shapes[0] if shapes else None)
    return first.layout if isinstance(first, TensorMeta) else None


def node_record(node: fx.Node) -> dict:
    """The flat record of one ATen node (the JSON schema's node record), from its meta."""
    origin, cost = node.meta[ORIGIN], node.meta[COST]
    shape, dtype = _output_shape(node)
    moved = cost.bytes_read + cost.bytes_written
    timed = getattr(node.meta.get(TIME), "median_s", None)
    saved_read, saved_written = node.meta.get(SAVED_TRAFFIC, (0, 0))
    record = {
        "name": node.name, "phase": origin.phase, "target": str(node.target),
        "op": node.target.overloadpacket.__name__, "layer_type": origin.layer_type,
        "module": origin.module, "forward_node": origin.forward_node,
        "accumulates": node.meta.get(ACCUMULATES, False),
        "autocast_internal": node.meta.get(AUTOCAST_INTERNAL, False),
        "plan_build": node.meta.get(PLAN_BUILD, False),
        "shape": shape, "dtype": dtype, "layout": _layout(node),
        "flops": cost.flops, "macs": cost.macs,
        "bytes_read": cost.bytes_read, "bytes_written": cost.bytes_written, "bytes": moved,
        "intensity": cost.flops / moved if moved else None,
        "op_class": cost.op_class, "rule": cost.rule,
        "faulted_bytes": node.meta.get(FAULTS),
        "saved_bytes_read": saved_read, "saved_bytes_written": saved_written,
        "time_s": timed,
        "achieved_flops_per_s": cost.flops / timed if timed else None,
        "achieved_bytes_per_s": moved / timed if timed else None,
    }
    if KERNEL in node.meta:  # compiled view: the ATen nodes the kernel holds
        record["fused_nodes"] = list(node.meta[KERNEL])
        record["unpriced_nodes"] = list(node.meta.get(UNPRICED, ()))
    if ROOF in node.meta:
        record.update(prediction.fields(*node.meta[ROOF], timed))
    return record


def _check_phase(phase: Optional[str]) -> None:
    if phase not in (None, *PHASES):
        raise UsageError(f"phase must be None, 'forward', 'backward' or 'optimizer', not "
                         f"{phase!r}.")


@dataclass
class AnnotatedGraph:
    capture: Capture
    model: ModelInfo
    memory: MemoryReport
    source: Optional[Source] = None
    timing: Optional[timing.TimingReport] = None  # set by the timing pass
    chip: object = None                           # the Chip the roofline pass placed it on
    _records: tuple = field(default=(None, None), repr=False, compare=False)

    # ---- graphs ---------------------------------------------------------------------------
    @property
    def forward(self) -> fx.Graph:
        return self.capture.forward

    @property
    def backward(self) -> Optional[fx.Graph]:
        return self.capture.backward

    @property
    def input_spec(self):
        return self.source.input_spec

    @property
    def input_leaves(self):
        return self.source.input_leaves

    def graph_module(self, phase: str = FORWARD) -> fx.GraphModule:
        """One phase's graph ('forward', 'backward' or 'optimizer') as a GraphModule."""
        if phase is None:
            raise UsageError("graph_module takes one phase: 'forward', 'backward' or "
                             "'optimizer'.")
        _check_phase(phase)
        graph = getattr(self.capture, phase)
        if graph is None:
            how = "optimizer='sgd', 'adam' or 'adamw'" if phase == "optimizer" \
                else "backward=True"
            raise UsageError(f"This analysis has no {phase} graph: analyze with {how}.")
        return fx.GraphModule(torch.nn.Module(), graph)

    def nodes(self, phase: Optional[str] = None) -> list[fx.Node]:
        _check_phase(phase)
        return [n for g in self.capture.graphs() for n in g.nodes
                if is_costed(n) and (phase is None or n.meta[ORIGIN].phase == phase)]

    # ---- views: plain data read from node.meta --------------------------------------------
    def records(self, phase: Optional[str] = None) -> list[dict]:
        """One flat dict per ATen node, in schedule order (the JSON schema's node record).
        Built once per state of the passes (timed, placed on a chip) and shared."""
        state = (id(self.timing), id(self.chip))
        if self._records[0] != state:
            self._records = (state, [node_record(n) for n in self.nodes()])
        every = self._records[1]
        _check_phase(phase)
        return list(every) if phase is None else [r for r in every if r["phase"] == phase]

    def totals(self) -> dict:
        records = self.records()
        result = {FORWARD: rollups.total(r for r in records if r["phase"] == FORWARD)}
        if self.backward is not None:
            result[BACKWARD] = rollups.total(r for r in records if r["phase"] == BACKWARD)
        if self.capture.optimizer is not None:
            result[OPTIMIZER] = rollups.total(r for r in records if r["phase"] == OPTIMIZER)
        result["overall"] = rollups.total(records)
        return result

    def breakdown(self, by: str = "layer_type", phase: Optional[str] = None,
                  depth: Optional[int] = None, sort: str = "flops") -> list[dict]:
        return rollups.breakdown(self.records(phase), by, depth, sort)

    def coverage(self) -> dict:
        """Nodes, those fully costed, and the ops priced by the bytes-only default rule -- in
        a compiled view, also the ATen nodes inside a kernel that had no rule."""
        records = self.records()
        missing = Counter(r["target"] for r in records if r["rule"] == DEFAULT_RULE)
        missing.update(t for r in records for t in r.get("unpriced_nodes", ()))
        partial = sum(r["rule"] == DEFAULT_RULE or bool(r.get("unpriced_nodes"))
                      for r in records)
        return {"nodes": len(records), "costed_nodes": len(records) - partial,
                "default_rule_ops": dict(missing)}

    # ---- conveniences over the passes and renderers ---------------------------------------
    def roofline(self, chip, roof: str = "calibrated") -> dict:
        """Place every node on ``chip``'s roofs (a Chip or a chip id): records gain
        attainable_flops_per_s, bound, predicted_s with its band (low_s, high_s), ideal_s
        and, once timed, fraction_of_roof. ``roof``: "calibrated" (the fitted time model
        where the chip has one) or "ideal" (the roof itself). Returns the predicted time per
        phase (fxroof.prediction.place)."""
        return prediction.place(self, chip, roof)

    def time(self, device: str = "cpu", repeats: int = 10, warmup: int = 2, progress=True,
             eager_first: bool = False):
        """Run the step on real tensors and time every node; see fxroof.timing. ``progress``:
        True shows a progress bar of the runs (on a terminal or in a notebook), a callable
        gets (runs done, runs in all), False shows nothing. ``eager_first``: time the plain
        eager step before the nodes (timing.time_graphs)."""
        repeats, warmup = positive_int(repeats, "repeats"), nonnegative_int(warmup, "warmup")
        check_device(device)  # before the progress bar and the model build, not inside them
        if self.source is None:
            raise UsageError("This graph was not made by fxroof.analyze (it came from the "
                             "torch.compile backend, fxroof.record or a file): there is no model "
                             "to run. Time the model with fxroof.analyze(...).time().")
        module = self.source.module
        if any(t.is_meta for t in list(module.parameters()) + list(module.buffers())):
            if self.source.spec is None:
                raise FxroofError(
                    "The model's weights are on the meta device (shapes without data), so it "
                    "cannot run: timing needs real tensors. Build the model on the CPU (or "
                    "load its weights) and analyse that, or pass a model name, which fxroof "
                    "builds with random weights for timing.")
            module = self.source.rebuilt()  # real weights, random init
        if progress is not True:
            return timing.time_graphs(self, module, device, warmup, repeats, progress or None,
                                      eager_first)
        with tqdm(total=warmup + repeats, desc=f"timing {self.model.name}", unit="run",
                  leave=False) as bar:
            return timing.time_graphs(self, module, device, warmup, repeats,
                                      lambda done, total: bar.update(done - bar.n), eager_first)

    def table(self, top: Optional[int] = 20, sort: str = "flops", phase: Optional[str] = None,
              macs: bool = False) -> str:
        records = self.records(phase)
        rollups.check_sort(sort, records[0] if records else rollups.SORTABLE)
        top = None if top is None else nonnegative_int(top, "top")
        records = sorted(records, key=lambda r: -(r.get(sort) or 0))
        return render.node_table(records[:top] if top else records, macs=macs)

    def layout_copy_bytes(self) -> int:
        """Bytes of the compiled view's layout copies: kernels that compute nothing and only
        lay a tensor out anew (0 in an eager graph, whose nodes are ATen ops)."""
        return sum(r["bytes"] for r in self.records()
                   if r["op"] == "copy" and op_classes.compiled_kernel(r)) \
            if self.model.view == "compiled" else 0

    def summary(self, macs: bool = False) -> str:
        if self.model.view == "compiled":  # kernels; memory is the eager analysis's
            kernels = [n for n, r in zip(self.nodes(), self.records())
                       if op_classes.compiled_kernel(r)]
            eager = [r for r in self.records() if not op_classes.compiled_kernel(r)]
            fused = sum(len(n.meta[KERNEL]) for n in kernels)
            convolves = any(op_classes.op_class_of(r) in op_classes.CONV_CLASSES
                            for r in self.records())
            counted = "Inductor kernels" + (" and eager ops" if eager else "")
            lines = [render.totals_lines(self.totals(), macs, counted),
                     render.memory_lines(self.memory.as_dict()) + " (eager)",
                     f" compiled: {fused} ATen nodes of the lowered graph in "
                     f"{len(kernels)} kernels; bytes are each kernel's buffers",
                     render.between_regions_line(eager, self.model.eager_flops),
                     render.layout_copies_line(self.layout_copy_bytes(),
                                               self.totals()["overall"]["bytes"],
                                               convolves and not self.model.frozen,
                                               self.model.device),
                     render.outside_regions_line(self.totals()["overall"]["flops"],
                                                 self.model.eager_flops)]
            return "\n".join(line for line in lines if line)
        return "\n".join([render.totals_lines(self.totals(), macs),
                          render.memory_lines(self.memory.as_dict()),
                          render.coverage_line(self.coverage())])

    def to_dict(self) -> dict:
        return export.to_dict(self)

    def to_json(self, path: str, overwrite: bool = False) -> None:
        export.write_json(self, path, overwrite)

    def to_csv(self, path: str, overwrite: bool = False) -> None:
        export.write_csv(self, path, overwrite)

    def to_trace(self, path: str, overwrite: bool = False) -> None:
        trace.write_trace(self, path, overwrite)

    def to_networkx(self):
        return export.to_networkx(self)

    def to_graphml(self, path: str, overwrite: bool = False) -> None:
        export.write_graphml(self, path, overwrite)
