"""The compiled view: the kernels torch.compile's Inductor would run, as a second annotated
graph -- one node per kernel, holding the ATen nodes it fuses.

How it is read (checked with torch 2.14.1; Inductor's scheduler is internal API):
1. Dynamo splits the model into regions (one per graph break) with a backend that only
   collects each region's graph and example inputs and runs it eagerly, once.
2. Each region goes through Inductor's own ``compile_fx`` (AOTAutograd, decompositions,
   lowering, fusion), with the backward lowered at once in training. Two hooks read what
   Inductor decided: ``GraphLowering.run`` keeps the post-grad ATen graph it lowers, which
   fxroof annotates with its cost pass like any graph (compile_backend's region annotation);
   ``Scheduler._codegen`` keeps every scheduled kernel -- its origin ATen nodes, the bytes it
   reads and writes as Inductor's scheduler counts them (its input and output buffers) --
   and then generates nothing: no C++ or Triton is compiled, nothing runs.
3. Kernels become nodes. A fused kernel's FLOPs are the sum of its ATen nodes' FLOPs (each
   ATen node counted once, in the first kernel that computes it: recomputation of inlined
   pointwise work is not counted); its bytes are its buffers'. An extern kernel (a GEMM or a
   convolution from a library, a fallback op) costs what its ATen op costs in the eager graph.
   The kernel's module and layer type are those of its costliest ATen node.

What is not modelled: CUDA graphs, autotuning choices (Triton GEMM templates vs cuBLAS), the
C++/Triton code itself. Memory (peak, activations) is the eager analysis's.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
import torch.fx as fx
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config
from torch._inductor import graph as inductor_graph
from torch._inductor import scheduler as inductor_scheduler
from torch._inductor.compile_fx import compile_fx

from fxroof.capture import Capture, Origin
from fxroof.compile_backend import annotate_region
from fxroof.cost_pass import is_costed
from fxroof.errors import FxroofError
from fxroof.graph import AnnotatedGraph, ModelInfo
from fxroof.kernel import Kernel
from fxroof.keys import BACKWARD, COST, FORWARD, KERNEL, ORIGIN, SHAPES
from fxroof.scope import op_family
from op_costs import Estimate, TensorMeta


class _Probe:
    """What Inductor lowered and scheduled: per lowering (a region's forward, then its
    backward), the post-grad graph and its kernels."""

    def __init__(self):
        self.lowered: list[tuple[str, fx.GraphModule]] = []
        self.kernels: list[list[dict]] = []

    @contextlib.contextmanager
    def attached(self):
        run, codegen = inductor_graph.GraphLowering.run, inductor_scheduler.Scheduler._codegen
        probe = self

        def recording_run(lowering, *args):
            probe.lowered.append((_phase(lowering), lowering.module))
            return run(lowering, *args)

        def recording_codegen(scheduler, *args, **kwargs):  # record, generate nothing
            probe.kernels.append([_kernel_record(n) for n in scheduler.nodes])

        inductor_graph.GraphLowering.run = recording_run
        inductor_scheduler.Scheduler._codegen = recording_codegen
        try:
            # torch.compile's defaults otherwise: no freezing (with it, Inductor's CPU pattern
            # matcher swaps ATen ops for oneDNN/MKL calls that have no ATen cost rule)
            with inductor_config.patch(fx_graph_cache=False, autotune_local_cache=False), \
                    functorch_config.patch(force_non_lazy_backward_lowering=True):
                yield self
        finally:
            inductor_graph.GraphLowering.run = run
            inductor_scheduler.Scheduler._codegen = codegen


def _phase(lowering) -> str:
    return BACKWARD if getattr(lowering, "is_backward", False) else FORWARD


def _kernel_record(node) -> dict:
    """A scheduled kernel as plain data: kind, origin ATen node names (in Inductor's order),
    the extern op if any, and the bytes of the buffers it reads and writes."""
    extern = node.is_extern()
    ir = node.node
    return {"extern": extern,
            "op": getattr(ir, "op_overload", None) if extern else None,
            "stride": _stride(ir) if extern else None,
            "origins": sorted({o.name for n in node.get_nodes() if n.node is not None
                               for o in n.node.get_origins()}),
            "bytes_read": int(node.get_read_write_buffers_sizes_impl(True, False)),
            "bytes_written": int(node.get_read_write_buffers_sizes_impl(False, True))}


def _stride(ir) -> Optional[tuple]:
    """The output strides Inductor chose for an extern kernel (with layout optimisation on,
    a CPU convolution runs channels-last), or None where they are not plain integers."""
    try:
        return tuple(int(s) for s in ir.get_layout().stride)
    except Exception:  # no fixed layout (multi-output, symbolic strides)
        return None


def _regions(module: torch.nn.Module, args, kwargs, train: bool) -> list:
    """Dynamo's regions of the model: (graph module, example inputs) per graph break."""
    regions = []

    def collect(gm, example_inputs):
        regions.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    with torch.set_grad_enabled(train):
        torch.compile(module, backend=collect)(*args, **kwargs)
    torch._dynamo.reset()
    return regions


def schedule(module: torch.nn.Module, args, kwargs, train: bool) -> list[dict]:
    """Lower and schedule every region with Inductor: per region, {phase: (post-grad graph
    module, kernels)}, forward first."""
    regions, probe = [], _Probe()
    with probe.attached(), torch.set_grad_enabled(train):
        for gm, example_inputs in _regions(module, args, kwargs, train):
            start = len(probe.lowered)
            compile_fx(gm, example_inputs)
            regions.append({phase: (lowered, kernels) for (phase, lowered), kernels in zip(
                probe.lowered[start:], probe.kernels[start:], strict=True)})
    return regions


def _owner(nodes: list[fx.Node]) -> fx.Node:
    """The ATen node a kernel is attributed to: its costliest, else its last."""
    return max(nodes, key=lambda n: (n.meta[COST].flops, n.meta[COST].bytes_read
                                     + n.meta[COST].bytes_written))


def _assign(kernels: list[dict], by_name: dict) -> list[list[fx.Node]]:
    """The ATen nodes each kernel computes, each node in exactly one kernel, so the view's
    FLOPs are the eager graph's. An extern kernel holds the op it runs; a generated kernel
    holds the not-yet-held nodes among its origins that it can compute -- at least as many
    bytes touched as the node writes (Inductor also lists a conv's origins on the weight
    copy feeding it); what is left goes to the first kernel listing it."""
    owned: list[list[fx.Node]] = [[] for _ in kernels]
    claimed: set = set()

    def take(i, node):
        owned[i].append(node)
        claimed.add(node.name)

    def free(kernel):
        return [by_name[o] for o in kernel["origins"] if o in by_name and o not in claimed
                and by_name[o].meta[COST].op_class != "view"]

    for i, kernel in enumerate(kernels):
        if kernel["extern"]:
            mine = [n for n in free(kernel) if n.target == kernel["op"]] or \
                [n for n in free(kernel) if n.meta[COST].op_class == "matrix"]
            if mine:
                take(i, _owner(mine))
    for i, kernel in enumerate(kernels):
        touched = kernel["bytes_read"] + kernel["bytes_written"]
        if not kernel["extern"]:
            for node in free(kernel):
                if node.meta[COST].op_class != "matrix" and \
                        node.meta[COST].bytes_written <= touched:
                    take(i, node)
    for i, kernel in enumerate(kernels):
        for node in free(kernel):
            take(i, node)
    return owned


def _kernel_node(graph: fx.Graph, kernel: dict, mine: list[fx.Node], members: list[fx.Node],
                 index: int) -> Optional[fx.Node]:
    """One kernel as a node of the compiled view; None for one that computes nothing and
    moves nothing."""
    moved = kernel["bytes_read"] + kernel["bytes_written"]
    if not mine and not moved:
        return None
    owner = _owner(mine or members) if (mine or members) else None
    if kernel["extern"] and mine:
        name, cost = owner.target.overloadpacket.__name__, owner.meta[COST]
        estimate = Estimate(cost.flops, cost.macs, cost.bytes_read, cost.bytes_written,
                            f"inductor extern[{cost.rule}]", cost.op_class)
    else:
        families = list(dict.fromkeys(op_family(n.target) for n in mine))
        name = ("fused_" + "_".join(families[:4]) + ("_etc" if len(families) > 4 else "")
                if mine else "copy")  # a layout change: moves bytes, computes nothing
        flops = sum(n.meta[COST].flops for n in mine)
        estimate = Estimate(flops, sum(n.meta[COST].macs for n in mine), kernel["bytes_read"],
                            kernel["bytes_written"], "inductor " + ("extern" if kernel["extern"]
                                                                    else "generated"),
                            "vector" if flops else "memory")
    node = graph.create_node("call_function", Kernel(name, extern=kernel["extern"]), (), {},
                             name=f"k{index}_{name}"[:60])
    origin = owner.meta[ORIGIN] if owner is not None else Origin(FORWARD, "", "copy", None)
    node.meta[ORIGIN] = Origin(origin.phase, origin.module, origin.layer_type, None)
    node.meta[SHAPES] = owner.meta[SHAPES] if owner is not None else ()
    shapes, stride = node.meta[SHAPES], kernel["stride"]
    if kernel["extern"] and isinstance(shapes, TensorMeta) and stride \
            and len(stride) == len(shapes.shape):
        node.meta[SHAPES] = TensorMeta(shapes.shape, stride, shapes.dtype)  # as Inductor lays it out
    node.meta[COST] = estimate
    node.meta[KERNEL] = [n.name for n in mine]
    return node


def add_kernels(graph: fx.Graph, lowered: fx.GraphModule, kernels: list[dict]) -> None:
    """The compiled view of one lowered graph: a node per kernel, in schedule order."""
    by_name = {n.name: n for n in lowered.graph.nodes if is_costed(n)}
    for kernel, mine in zip(kernels, _assign(kernels, by_name), strict=True):
        members = [by_name[o] for o in kernel["origins"] if o in by_name]
        _kernel_node(graph, kernel, mine, members, len(graph.nodes))


def compiled_view(eager: AnnotatedGraph, module: torch.nn.Module, args, kwargs) -> AnnotatedGraph:
    """The compiled view of an analysis: kernels as nodes, with the eager one's model info
    (``model.view`` = "compiled") and memory report."""
    try:
        regions = schedule(module, args, kwargs, eager.model.backward)
    except FxroofError:
        raise
    except Exception as e:  # Dynamo or Inductor refused the model
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise FxroofError(f"torch.compile could not lower this model for the compiled view "
                          f"({type(e).__name__}: {first}). The eager analysis (without "
                          "--compiled / compiled=True) still works.") from None
    phases = {FORWARD: fx.Graph(), BACKWARD: fx.Graph()}
    for region in regions:
        forward, backward = region.get(FORWARD), region.get(BACKWARD)
        # the region annotation also links backward nodes to the forward nodes they
        # differentiate (autograd sequence numbers)
        annotate_region(forward[0].graph, backward[0].graph if backward else None, [])
        for phase, (lowered, kernels) in region.items():
            add_kernels(phases[phase], lowered, kernels)
    for graph in phases.values():
        graph.output(())
    capture = Capture(phases[FORWARD], phases[BACKWARD] if eager.model.backward else None)
    info = ModelInfo(**{**eager.model.as_dict(), "view": "compiled"})
    return AnnotatedGraph(capture, info, eager.memory, None)

