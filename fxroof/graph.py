"""AnnotatedGraph: the canonical artefact. Forward and backward ATen fx graphs whose nodes carry
``meta[ORIGIN]`` (capture) and ``meta[COST]`` (cost pass), plus the model description and the
memory report. Everything downstream -- tables, rollups, exports -- reads from here.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Optional

import torch
import torch.fx as fx

from fxroof import export, render, rollups
from fxroof.capture import BACKWARD, FORWARD, ORIGIN, SHAPES, Capture
from fxroof.cost_pass import COST, is_costed
from fxroof.memory import MemoryReport
from op_costs import DEFAULT_RULE, TensorMeta

TIME = "fxroof.time"  # written by the timing pass: a record with a ``median_s`` field


@dataclass
class Source:
    """What the timing pass needs to run the step for real."""

    module: object          # the nn.Module analysed (its weights may be on the meta device)
    spec: Optional[str]     # the model spec it was built from, if any
    input_spec: object      # pytree spec of (args, kwargs)
    input_leaves: list      # per leaf: (is_tensor, value for non-tensor leaves)
    hf_config: Optional[dict] = None  # hf: overrides, so a rebuilt model has the same shape


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

    def as_dict(self) -> dict:
        return asdict(self)


def _output_shape(node: fx.Node):
    shapes = node.meta.get(SHAPES)
    first = shapes if isinstance(shapes, TensorMeta) else (shapes[0] if shapes else None)
    if isinstance(first, TensorMeta):
        return list(first.shape), str(first.dtype).replace("torch.", "")
    return [], None


class AnnotatedGraph:
    def __init__(self, capture: Capture, model: ModelInfo, memory: MemoryReport,
                 source: Optional[Source] = None):
        self.capture = capture
        self.model = model
        self.memory = memory
        self.source = source
        self.timing = None  # a TimingReport once time() has run
        self.chip = None    # a Chip once roofline() has run: records gain roof fields

    @property
    def input_spec(self):
        return self.source.input_spec

    @property
    def input_leaves(self):
        return self.source.input_leaves

    def roofline(self, chip) -> dict:
        """Place every node on ``chip``'s roofs (a Chip or a chip id): records gain
        attainable_flops_per_s, predicted_s, bound and, once timed, fraction_of_roof.
        Returns the predicted time per phase."""
        from fxroof import roofline
        from fxroof.chips import get_chip

        self.chip = get_chip(chip) if isinstance(chip, str) else chip
        return roofline.predict(self.records(), self.chip)

    def time(self, device: str = "cpu", repeats: int = 10, warmup: int = 2, progress=None):
        """Run the step on real tensors and time every node; see fxroof.timing."""
        from fxroof.models import build_model
        from fxroof.timing import time_graphs

        if self.source is None:
            raise ValueError("this graph was not made by fxroof.analyze: nothing to run")
        module = self.source.module
        if any(t.is_meta for t in list(module.parameters()) + list(module.buffers())):
            module = build_model(self.source.spec, device="cpu",  # real weights, random init
                                 hf_config=self.source.hf_config)
        self.timing = time_graphs(self, module, device, warmup, repeats, progress)
        return self.timing

    # ---- graphs ---------------------------------------------------------------------------
    @property
    def forward(self) -> fx.Graph:
        return self.capture.forward

    @property
    def backward(self) -> Optional[fx.Graph]:
        return self.capture.backward

    def graph_module(self, phase: str = FORWARD) -> fx.GraphModule:
        graph = self.forward if phase == FORWARD else self.backward
        if graph is None:
            raise ValueError("this analysis has no backward graph (analyze with backward=True)")
        return fx.GraphModule(torch.nn.Module(), graph)

    def nodes(self, phase: Optional[str] = None) -> list[fx.Node]:
        return [n for g in self.capture.graphs() for n in g.nodes
                if is_costed(n) and (phase is None or n.meta[ORIGIN].phase == phase)]

    # ---- plain data -----------------------------------------------------------------------
    def records(self, phase: Optional[str] = None) -> list[dict]:
        """One flat dict per ATen node, in schedule order (the JSON schema's node record)."""
        from fxroof.roofline import roof_fields

        out = []
        for node in self.nodes(phase):
            origin, cost = node.meta[ORIGIN], node.meta[COST]
            shape, dtype = _output_shape(node)
            moved = cost.bytes_read + cost.bytes_written
            timing = node.meta.get(TIME)
            out.append({
                "name": node.name,
                "phase": origin.phase,
                "target": str(node.target),
                "op": node.target.overloadpacket.__name__,
                "layer_type": origin.layer_type,
                "module": origin.module,
                "forward_node": origin.forward_node,
                "shape": shape,
                "dtype": dtype,
                "flops": cost.flops,
                "macs": cost.macs,
                "bytes_read": cost.bytes_read,
                "bytes_written": cost.bytes_written,
                "bytes": moved,
                "intensity": cost.flops / moved if moved else None,
                "op_class": cost.op_class,
                "rule": cost.rule,
                "time_s": getattr(timing, "median_s", None),
            "achieved_flops_per_s": cost.flops / timing.median_s
            if timing is not None and timing.median_s > 0 else None,
            "achieved_bytes_per_s": moved / timing.median_s
            if timing is not None and timing.median_s > 0 else None,
            })
            if self.chip is not None:
                out[-1].update(roof_fields(out[-1], self.chip))
        return out

    def totals(self) -> dict:
        records = self.records()
        result = {FORWARD: rollups.total(r for r in records if r["phase"] == FORWARD)}
        if self.backward is not None:
            result[BACKWARD] = rollups.total(r for r in records if r["phase"] == BACKWARD)
        result["overall"] = rollups.total(records)
        return result

    def breakdown(self, by: str = "layer_type", phase: Optional[str] = None,
                  depth: Optional[int] = None, sort: str = "flops") -> list[dict]:
        return rollups.breakdown(self.records(phase), by, depth, sort)

    def coverage(self) -> dict:
        records = self.records()
        missing = Counter(r["target"] for r in records if r["rule"] == DEFAULT_RULE)
        return {"nodes": len(records), "costed_nodes": len(records) - sum(missing.values()),
                "default_rule_ops": dict(missing)}

    # ---- renderers ------------------------------------------------------------------------
    def table(self, top: Optional[int] = 20, sort: str = "flops", phase: Optional[str] = None,
              macs: bool = False) -> str:
        records = sorted(self.records(phase), key=lambda r: -(r.get(sort) or 0))
        return render.node_table(records[:top] if top else records, macs=macs)

    def summary(self, macs: bool = False) -> str:
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
        from fxroof.trace import write_trace

        write_trace(self, path, overwrite)

    def to_networkx(self):
        return export.to_networkx(self)

    def to_graphml(self, path: str, overwrite: bool = False) -> None:
        export.write_graphml(self, path, overwrite)
