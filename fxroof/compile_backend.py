"""fxroof as a torch.compile backend: annotate the ATen graphs a real compile pipeline produces.

    collector = fxroof.backend(model=model, on_graph=lambda gm, phase, region: ...)
    compiled = torch.compile(model, backend=collector)
    compiled(x).sum().backward()
    print(collector.annotated().summary())

Dynamo hands the backend one FX graph per region between graph breaks, once, and calls what
the backend returns on every run of that region: a block's forward that a graph break made a
frame runs once per block. The backend records each call (``runs``), and ``annotated()``
rolls up one step's calls, each named as the model names its modules when given the model
(``fxroof.region_modules``). For each region, AOTAutograd traces the joint
forward+backward and partitions it; fxroof reads both ATen graphs (the backward compiled at
once rather than at the first backward call), annotates them with the same cost pass
``analyze`` uses, and hands the region's Dynamo graph on unchanged to the backend named by
``then`` (``torch.compile``'s default, inductor, unless told otherwise; ``None`` runs the AOT
graphs eagerly). The annotation is a compile-time side job: it never changes what runs.

Where the two capture paths differ: AOTAutograd graphs are functionalised (``add_`` becomes
``add``, batch norm's running-stat update becomes ``_native_batch_norm_legit_functional``
outputs) and the partitioner may recompute cheap forward ops in the backward, so FLOPs agree
with ``analyze`` for matrix work while pointwise op counts can differ slightly.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch
import torch.fx as fx
from functorch.compile import make_boxed_func
from torch._functorch import config as functorch_config
from torch._functorch.aot_autograd import aot_module_simplified
try:
    from torch.fx.experimental.symbolic_shapes import optimization_hint
except ImportError:  # torch < 2.14 names it hint_int
    from torch.fx.experimental.symbolic_shapes import hint_int as optimization_hint
from torch.utils import _pytree as pytree

from fxroof.capture import Capture, InputKind, Origin
from fxroof.cost_pass import annotate_costs, is_costed
from fxroof.errors import FxroofError
from fxroof.graph import AnnotatedGraph, ModelInfo
from fxroof.keys import BACKWARD, FORWARD, FRAME_LOCAL, INPUT, ORIGIN, SHAPES
from fxroof.memory import memory_report
from fxroof.region_modules import (call_prefixes, class_name, in_model, note_frame_locals,
                                   placeholder_sources, stack_places, tensor_names)
from fxroof.scope import op_family
from fxroof.suggest import did_you_mean
from fxroof.units import dtype_name
from op_costs import TensorMeta

OnGraph = Callable[[fx.GraphModule, str, int], None]


def _concrete(t: torch.Tensor) -> TensorMeta:
    """TensorMeta of a possibly dynamic-shape fake tensor, at the sizes it was traced with."""
    return TensorMeta(tuple(optimization_hint(s) for s in t.shape),
                      tuple(optimization_hint(s) for s in t.stride()), t.dtype)


def _shapes_of(value):
    """meta[SHAPES] for a node's fake value: tensors as TensorMeta, symbolic ints as the size
    they were traced with (cost rules are functions of concrete shapes)."""
    value = pytree.tree_map_only(torch.SymInt, optimization_hint, value)
    return pytree.tree_map_only(torch.Tensor, _concrete, value)


def module_scope(stack: Optional[dict], op) -> tuple[str, str]:
    """(module path, layer type) from an nn_module_stack: the innermost module, as in scope.py
    (region_modules.stack_places names it)."""
    if not stack:
        return "", op_family(op)
    return stack_places(stack)[-1][1], class_name(list(stack.values())[-1][1])


def annotate_region(fw: fx.Graph, bw: Optional[fx.Graph], is_param: list[bool]) -> Capture:
    """Give AOTAutograd's graphs the metadata fxroof's capture writes, then cost them."""
    for graph in (fw, bw) if bw is not None else (fw,):
        for node in graph.nodes:
            if "val" in node.meta:
                node.meta[SHAPES] = _shapes_of(node.meta["val"])
    first_by_seq: dict[int, fx.Node] = {}
    primal = 0
    for node in fw.nodes:
        if node.op == "placeholder":
            kind = "parameter" if primal < len(is_param) and is_param[primal] else "input"
            node.meta[INPUT] = InputKind(kind, str(primal))
            primal += 1
        elif node.op == "call_function":
            path, layer = module_scope(node.meta.get("nn_module_stack"), node.target)
            node.meta[ORIGIN] = Origin(FORWARD, path, layer, None)
            if is_costed(node) and "seq_nr" in node.meta:
                first_by_seq.setdefault(node.meta["seq_nr"], node)
    saved = []
    if bw is not None:
        for node in bw.nodes:
            if node.op == "placeholder":
                tangent = node.name.startswith("tangents")
                node.meta[INPUT] = InputKind("tangent" if tangent else "saved", node.name)
                if not tangent:
                    saved.append(node.name)
            elif node.op == "call_function":
                forward = first_by_seq.get(node.meta.get("seq_nr"))
                if forward is None:
                    node.meta[ORIGIN] = Origin(BACKWARD, "", op_family(node.target), None)
                else:
                    of = forward.meta[ORIGIN]
                    node.meta[ORIGIN] = Origin(BACKWARD, of.module, of.layer_type, forward.name)
    capture = Capture(fw, bw, saved)
    for graph in capture.graphs():
        annotate_costs(graph)
    return capture


class RegionRun(NamedTuple):
    """One call of a compiled region: which region (in compile order), and where the frame
    locals it names modules from sit in the model for this call (fxroof.region_modules;
    empty where the backend was not given the model)."""
    region: int
    prefixes: dict


# Calls a backend keeps on record: a training loop run under the backend calls its regions
# on every step, and the record, which only one step is read from, must not grow with it.
RUN_RECORD_LIMIT = 100_000


def one_step(runs: list[RegionRun]) -> list[RegionRun]:
    """The calls of one step: where the record is one step's calls repeated whole (a loop of
    identical steps), the first step's; else every call recorded."""
    for period in range(1, len(runs) + 1):
        if len(runs) % period == 0 and runs == runs[:period] * (len(runs) // period):
            return runs[:period]
    return runs


def _shortest_repeat(runs: list[RegionRun]) -> list[RegionRun]:
    """``runs`` less the repeats of its shortest repeating unit: the unit (one step), then
    the calls of the step under way; ``runs`` itself where no shorter unit repeats."""
    for period in range(1, len(runs)):
        if all(runs[i] == runs[i - period] for i in range(period, len(runs))):
            return runs[:period] + runs[:len(runs) % period]
    return runs


def _copy_into(graph: fx.Graph, phase_graph: fx.Graph, prefixes: dict,
               renamed: dict[str, str]) -> tuple[list, dict[str, str]]:
    """Copy one call's phase graph into the merged ``graph``: its modules named as the model
    names them for the call, backward nodes' forward_node following ``renamed`` (the call's
    forward names in the merged graph). Returns the copy's outputs and its renames."""
    val_map: dict[fx.Node, fx.Node] = {}
    out = graph.graph_copy(phase_graph, val_map)
    for new in val_map.values():
        origin = new.meta.get(ORIGIN)
        if origin is None:
            continue
        module = in_model(origin.module, new.meta.get(FRAME_LOCAL), prefixes)
        forward_node = renamed[origin.forward_node] if origin.forward_node is not None \
            else None
        new.meta[ORIGIN] = origin._replace(module=module, forward_node=forward_node)
    return ([a for a in pytree.tree_leaves(out) if isinstance(a, fx.Node)],
            {old.name: new.name for old, new in val_map.items()})


def _merge(captures: list[Capture], runs: list[RegionRun]) -> Capture:
    """One forward and one backward graph holding every call's nodes: forwards in call
    order, backwards in reverse (as autograd runs them). Node names that collide are
    renamed, and backward nodes' forward_node follows them."""
    merged = {FORWARD: fx.Graph(), BACKWARD: fx.Graph()}
    outputs = {FORWARD: [], BACKWARD: []}
    saved: list[str] = []
    renames = []  # per call: its forward node names in the merged graph
    for run in runs:
        capture = captures[run.region]
        out, renamed = _copy_into(merged[FORWARD], capture.forward, run.prefixes, {})
        outputs[FORWARD] += out
        renames.append(renamed)
        saved.extend(renamed.get(name, name) for name in capture.saved)
    for run, renamed in reversed(list(zip(runs, renames))):
        backward = captures[run.region].backward
        if backward is not None:
            outputs[BACKWARD] += _copy_into(merged[BACKWARD], backward, run.prefixes,
                                            renamed)[0]
    for phase, graph in merged.items():
        graph.output(tuple(outputs[phase]))
    has_backward = any(captures[run.region].backward is not None for run in runs)
    return Capture(merged[FORWARD], merged[BACKWARD] if has_backward else None, saved)


def _counting(compiled: Callable, record: Callable) -> Callable:
    """``compiled``, recording the inputs of each call first. Dynamo calls what a backend
    returns with the inputs as arguments, whatever its ``_boxed_call`` says (AOTAutograd's
    wrapper copies that attribute off the boxed function it wraps)."""
    def called(*args, **kwargs):
        record(args)
        return compiled(*args, **kwargs)
    return called


def _resolve(then):
    """The backend to hand graphs to, checked now rather than at the first compile, where
    Dynamo would wrap the complaint in its own traceback."""
    if then is None or (callable(then) and not isinstance(then, str)):
        return then
    if isinstance(then, str):
        known = torch._dynamo.list_backends(exclude_tags=())
        if then in known:
            return torch._dynamo.lookup_backend(then)
        hint = did_you_mean(then, known)
        raise FxroofError(f"Unknown torch.compile backend '{then}' for then=.{hint} Known: "
                          f"{', '.join(torch._dynamo.list_backends())}; or pass a callable, "
                          "or None to run the "
                          "annotated AOT graphs as they are.")
    raise FxroofError(f"then= takes a backend name, a callable or None, not a "
                      f"{type(then).__name__}.")


class Backend:
    """A torch.compile backend that annotates every region's ATen graphs; see the module doc.

    on_graph(gm, phase, region) is called with each annotated ATen GraphModule as soon as it
    exists (phase "forward" or "backward"; region counts Dynamo graphs from 0): its nodes carry
    ``meta[fxroof.cost_pass.COST]`` and ``meta[fxroof.capture.ORIGIN]``.

    ``regions`` holds each compiled region once; ``runs`` each call of one (a region
    compiled from a block's forward that a graph break cut runs once per block), steps
    that repeat the first taken out once RUN_RECORD_LIMIT calls are on record.
    ``annotated`` rolls up one step's calls. Given the ``model``, each call's modules are
    named as the model names them (``blocks.1.fc``, not the frame's ``fc``).
    """

    def __init__(self, on_graph: Optional[OnGraph] = None, then="inductor",
                 name: str = "compiled", model: Optional[torch.nn.Module] = None):
        if on_graph is not None and not callable(on_graph):
            raise FxroofError(f"on_graph must be a callable (gm, phase, region), not a "
                              f"{type(on_graph).__name__}.")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise FxroofError(f"model= takes the torch.nn.Module being compiled (to name "
                              f"modules as it does), not a {type(model).__name__}.")
        self.on_graph = on_graph
        self.then = _resolve(then)
        self.name = name
        self.model = model
        self.regions: list[Capture] = []
        self.runs: list[RegionRun] = []
        self._names: Optional[dict] = None  # id of each of the model's tensors -> its names
        self._parameters: dict[int, int] = {}  # id -> elements, each parameter counted once
        self._first_input: Optional[torch.Tensor] = None

    def __call__(self, gm: fx.GraphModule, example_inputs):
        region = len(self.regions)
        is_param = [isinstance(x, torch.nn.Parameter) for x in example_inputs]
        for x in example_inputs:
            if isinstance(x, torch.nn.Parameter):
                self._parameters[id(x)] = x.numel()
            elif isinstance(x, torch.Tensor) and self._first_input is None:
                self._first_input = x
        graphs: dict[str, fx.GraphModule] = {}

        def keep(phase):
            def compiler(module: fx.GraphModule, _inputs):
                graphs[phase] = module
                return make_boxed_func(module.forward)
            return compiler

        with functorch_config.patch(force_non_lazy_backward_lowering=True):
            compiled = aot_module_simplified(gm, example_inputs, fw_compiler=keep(FORWARD),
                                             bw_compiler=keep(BACKWARD))
        forward, backward = graphs[FORWARD], graphs.get(BACKWARD)
        self.regions.append(annotate_region(forward.graph, backward and backward.graph,
                                             is_param))
        note_frame_locals(forward.graph, backward and backward.graph)
        if self.on_graph is not None:
            self.on_graph(forward, FORWARD, region)
            if backward is not None:
                self.on_graph(backward, BACKWARD, region)
        run = compiled if self.then is None else self.then(gm, example_inputs)
        return _counting(run, self._recorder(region, placeholder_sources(gm)))

    def _recorder(self, region: int, sources: list) -> Callable:
        """What records a call of ``region``: where its frame locals sit in the model, read
        off the tensors the call is given (Dynamo's ``sources`` for them, read now: it drops
        them once the backend returns)."""
        if self.model is not None and self._names is None:
            # torch.compile's wrapper names its model's tensors "_orig_mod.<name>"
            self._names = tensor_names(getattr(self.model, "_orig_mod", self.model))

        names = self._names or {}
        # a call's prefixes by the ids of the model's tensors it is given: a layer's are the
        # same tensors on every step, so each call is placed once, not parsed again
        placed: dict[tuple, dict] = {}

        def record(inputs):
            if len(self.runs) >= RUN_RECORD_LIMIT:
                kept = _shortest_repeat(self.runs)
                if len(kept) == len(self.runs):
                    return  # no step repeats in the record: its first calls stand for it
                self.runs[:] = kept
            key = tuple(id(value) for value in inputs if id(value) in names)
            if key not in placed:
                placed[key] = call_prefixes(sources, inputs, names) if names else {}
            self.runs.append(RegionRun(region, placed[key]))
        return record

    def annotated(self) -> AnnotatedGraph:
        """One step of the compiled model -- every call of a region it made, rolled up into
        one AnnotatedGraph (no timing source: time the model with
        fxroof.analyze(...).time() instead). Where the calls recorded repeat one step's
        whole (the model called several times alike), that step's; else every call."""
        if not self.regions:
            raise ValueError("nothing has been compiled yet: call the compiled model first")
        runs = one_step(self.runs) or [RegionRun(i, {}) for i in range(len(self.regions))]
        capture = _merge(self.regions, runs)
        x = self._first_input
        info = ModelInfo(
            name=self.name,
            batch=optimization_hint(x.shape[0]) if x is not None and x.dim() else None,
            inputs=[{"shape": list(_concrete(x).shape), "dtype": dtype_name(x.dtype)}]
            if x is not None else [],
            dtype=dtype_name(next((n.meta[SHAPES].dtype for n in capture.forward.nodes
                                   if n.op == "placeholder"
                                   and isinstance(n.meta.get(SHAPES), TensorMeta)),
                                  torch.float32)),
            mode="train" if capture.backward is not None else "eval",
            backward=capture.backward is not None,
            parameters=sum(self._parameters.values()),
        )
        return AnnotatedGraph(capture, info, memory_report(capture))


def backend(on_graph: Optional[OnGraph] = None, then="inductor", name: str = "compiled",
            model: Optional[torch.nn.Module] = None) -> Backend:
    """A torch.compile backend that annotates each graph Dynamo produces (forward and backward,
    one region per graph break) and passes it on to ``then`` (a backend name or callable; None
    runs the AOT graphs as they are). Collect the results with ``.annotated()`` or
    ``on_graph``; give it the ``model`` compiled to name each call's modules as it does."""
    return Backend(on_graph, then, name, model)
