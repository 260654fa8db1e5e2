"""The compiled view: the kernels torch.compile's Inductor would run, as a second annotated
graph -- one node per kernel, holding the ATen nodes it fuses.

How it is read (checked with torch 2.14.1; Inductor's scheduler is internal API):
1. Dynamo splits the model into regions (one per graph break) with a backend that only
   collects each region's graph and example inputs and records each call of it (a region
   called once per layer runs its kernels once per layer); the step runs once, eagerly,
   or -- for a CUDA target -- with each region's stand-in returning zeros of its outputs'
   shapes.
2. Each region goes through Inductor's own ``compile_fx`` (AOTAutograd, decompositions,
   lowering, fusion), once, with the backward lowered at once in training; for a CUDA
   target, with the device's questions answered from the chip (fxroof.gpu_lowering) and
   under the target's autocast (``Lowering``). Two hooks read what
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

Frozen (``freeze=True``, inference only): Inductor compiles with
``torch._inductor.config.freezing = True``, as its CPU inference recipe advises. Weights become
constants: batch norms are folded into the convolutions before them, every weight is
reordered once into oneDNN's blocked layout at compile time (not converted per call), and
Inductor's CPU pattern matcher swaps each convolution or linear layer and the activation or
residual add after it for one prepacked oneDNN/MKL call (``mkldnn._convolution_pointwise``,
``mkl._mkl_linear``, ...). Such a call replaces its ATen nodes in the lowered graph, so it is
priced by its own cost rule (op_costs.onednn) on the arguments Inductor passes it -- read
off the kernel's IR, its constant weights included, which the scheduler's buffer count
leaves out -- and attributed to the module of the convolution or linear layer it fuses.

Page faults: each kernel's ``faulted_bytes`` come from Inductor's memory plan (buffers fused
away, written in place, reused at the same size; fxroof.inductor_memory) replayed through the
model of glibc's arena that an eager step's faults use.

What is not modelled: CUDA graphs, autotuning choices (Triton GEMM templates vs cuBLAS), the
C++/Triton code itself. Memory (peak, activations) is the eager analysis's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
from typing import Any, NamedTuple, Optional

import torch
import torch.fx as fx
from torch._dynamo import config as dynamo_config
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config
from torch._inductor import graph as inductor_graph
from torch._inductor import scheduler as inductor_scheduler
from torch._inductor.compile_fx import compile_fx, compile_fx_inner
from torch._inductor.dependencies import MemoryDep, extract_read_writes
from torch.fx.experimental.symbolic_shapes import optimization_hint
from torch.utils import _pytree as pytree

from fxroof import between_regions, gpu_lowering, hidden_bytes, region_modules
from fxroof.op_classes import (EXTERN_RULE, GENERATED_RULE, TRANSPOSING_VARIANT,
                               UNVECTORISED_VARIANT)
from fxroof.capture import Capture, Origin
from fxroof.compile_backend import annotate_region, module_scope
from fxroof.cost_pass import is_costed
from fxroof.errors import FxroofError
from fxroof.graph import AnnotatedGraph, ModelInfo, node_record
from fxroof.inductor_memory import kernel_buffers, owned_faults, plan_events
from fxroof.kernel import Kernel
from fxroof.keys import (BACKWARD, COST, FAULTS, FORWARD, FRAME_LOCAL, KERNEL, ORIGIN,
                         SHAPES, UNPRICED)
from fxroof.scope import op_family
from fxroof.target import CACHING, GLIBC, Target
from fxroof.target_dispatch import TargetDispatch, cuda_autocast
import op_costs
import op_costs.inductor_prims  # noqa: F401  (the rules of the prims Inductor emits)
from op_costs import DEFAULT_RULE, MATRIX, Estimate, TensorMeta


AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class _Probe:
    """What Inductor lowered and scheduled: per lowering (a region's forward, then its
    backward), the post-grad graph and its kernels."""

    def __init__(self):
        self.lowered: list[tuple[str, fx.GraphModule]] = []
        self.kernels: list[list[dict]] = []

    @contextlib.contextmanager
    def attached(self, freeze: bool = False):
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
            # torch.compile's defaults otherwise, freezing included unless asked for
            with inductor_config.patch(fx_graph_cache=False, autotune_local_cache=False,
                                       freezing=freeze), \
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
            "call": _ir_call(ir) if extern else None,
            "origins": sorted({o.name for n in node.get_nodes() if n.node is not None
                               for o in n.node.get_origins()}),
            "bytes_read": int(node.get_read_write_buffers_sizes_impl(True, False)),
            "bytes_written": int(node.get_read_write_buffers_sizes_impl(False, True)),
            "gathers": not extern and any(_gathered(dep) for dep in node.read_writes.reads),
            "transposes": not extern and _transposes(node),
            "buffers": kernel_buffers(node)}


def _gathered(dep) -> bool:
    """Whether a kernel's read can be loaded as a vector along none of its loop variables:
    no variable steps its index by one element (a stride-2 window over a map whose
    innermost dimension it strides -- a pool over NCHW -- rather than over channels-last
    channels). Inductor's C++ backend vectorises a kernel along one loop variable and stops
    vectorising it when such loads are more than 12% of its operations
    (codegen/cpp.py, select_tiling), which a pool's nine window loads are: the kernel runs
    scalar code (op_classes.UNVECTORISED_VARIANT). A read a variable steps by one
    (a transpose: the channels of a channels-last map) is loaded in tiles and vectorised."""
    if not isinstance(dep, MemoryDep):
        return False
    variables = [v for v, size in zip(dep.var_names, dep.size) if size != 1]
    index = dep.index
    if not index.free_symbols & set(variables):
        return False  # a broadcast read: the same elements every iteration
    at_zero = {v: 0 for v in variables}
    base = index.subs(at_zero)
    return all(index.subs({**at_zero, v: 1}) - base != 1 for v in variables)


def _steps(dep: MemoryDep) -> dict:
    """{loop variable: elements the dep's index moves when that variable steps by one}."""
    variables = [v for v, size in zip(dep.var_names, dep.size) if size != 1]
    at_zero = {v: 0 for v in variables}
    base = dep.index.subs(at_zero)
    return {v: dep.index.subs({**at_zero, v: 1}) - base for v in variables}


def _transposes(node) -> bool:
    """Whether a generated kernel reads a tensor across a transpose: along the loop variable
    that steps its output by one element, some input is strided, yet that input is
    contiguous along another of the output's variables (an NCHW input copied channels-last,
    a convolution weight converted to channels-last on every call, a permute made
    contiguous). Inductor's C++ backend runs such a kernel in 2-D tiles it transposes in
    registers, with scalar loops where a side is shorter than a tile (3 input channels, a
    3x3 kernel's 9 taps); on this project's CPU those kernels moved 11-50 GB/s against 28-84
    for plain copies of the same bytes (calibration's "transpose" class). A read that steps
    by one along a reduction variable (a row sum) is no transpose, nor is a broadcast read
    (step 0). The deps are taken per scheduled node, unnormalised, so that reads and writes
    name the same loop variables."""
    for sub in node.get_nodes():
        body, sizes = getattr(sub, "_body", None), getattr(sub, "_sizes", None)
        if body is None or sizes is None:
            continue
        try:
            deps = extract_read_writes(body, *sizes)
        except Exception:  # an IR this reading does not know: no claim
            continue
        for write in (d for d in deps.writes if isinstance(d, MemoryDep)):
            written = _steps(write)
            for unit in (v for v, step in written.items() if step == 1):
                for read in (d for d in deps.reads if isinstance(d, MemoryDep)):
                    steps = _steps(read)
                    if steps.get(unit, 0) not in (0, 1) and any(
                            step == 1 and v != unit and v in written
                            for v, step in steps.items()):
                        return True
    return False


def _stride(ir) -> Optional[tuple]:
    """The output strides Inductor chose for an extern kernel (with layout optimisation on,
    a CPU convolution runs channels-last), or None where they are not plain integers."""
    try:
        return tuple(int(s) for s in ir.get_layout().stride)
    except Exception:  # no fixed layout (multi-output, symbolic strides)
        return None


def _ir_meta(buffer) -> TensorMeta:
    if type(buffer).__name__ == "ConstantBuffer":
        # a frozen weight prepacked into oneDNN's blocked layout shows strides (1, 0, 0, 0):
        # the layout is opaque, yet every element is stored and read
        return TensorMeta.contiguous(tuple(int(n) for n in buffer.get_size()),
                                     buffer.get_dtype())
    return TensorMeta(tuple(int(n) for n in buffer.get_size()),
                      tuple(int(n) for n in buffer.get_stride()), buffer.get_dtype())


def _ir_call(ir) -> Optional[tuple]:
    """(arguments, keyword arguments, output) of an extern kernel as a cost rule takes them,
    read off its IR: Inductor keeps a call's tensors in ``inputs`` and the rest in
    ``constant_args``, in its schema's order (a missing bias is a leading None among the
    constants; mkldnn_ir.py), or by name in ``kwargs`` (a CUDA convolution's stride,
    padding, groups), and an in-place call's output is its first input. None where the IR
    does not read so (symbolic sizes, a tensor passed by name)."""
    try:
        if getattr(ir, "op_overload", None) is None:
            return None
        kwargs = dict(getattr(ir, "kwargs", None) or {})
        if not all(_plain(v) for v in kwargs.values()):
            return None
        args = tuple(_ir_meta(i) for i in ir.inputs) + tuple(ir.constant_args)
        outputs = getattr(ir, "outputs", None)
        if outputs:
            out = _ir_meta(outputs[0])
        elif type(ir.layout).__name__ == "NoneLayout":
            out = args[0]
        else:
            out = _ir_meta(ir)
        return args, kwargs, out
    except Exception:  # internal API: any shape it does not have means "not readable"
        return None


def _plain(value) -> bool:
    """Whether a keyword argument is a constant (a number, a flag, a tuple of them, None)."""
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


@dataclasses.dataclass(frozen=True)
class Lowering:
    """What Inductor lowers for: the CPU (``gpu`` None) or a CUDA chip's facts, under the
    target's autocast (``amp``: "fp16" | "bf16") or none."""
    gpu: Optional[gpu_lowering.DeviceFacts] = None
    amp: Optional[str] = None
    target: Optional[Target] = None

    @classmethod
    def of(cls, target: Optional[Target] = None, chip=None,
           amp: Optional[str] = None) -> "Lowering":
        if target is None or not target.is_cuda:
            return cls(None, amp, target)
        gpu_lowering.require_triton()
        return cls(gpu_lowering.DeviceFacts.of(target.capability, chip), amp, target)

    @contextlib.contextmanager
    def active(self):
        """Inductor's device questions answered for a CUDA target, and the target's autocast
        around the lowering (AOTAutograd traces the casts it makes into the graph)."""
        with contextlib.ExitStack() as stack:
            if self.gpu is not None:
                stack.enter_context(gpu_lowering.answering(self.gpu))
                # the attention backend CUDA would pick for the operands, as in the capture:
                # with no device to ask, the fake tensors' own choice is the math backend
                stack.enter_context(TargetDispatch(self.target))
            if self.amp and self.gpu is not None:
                stack.enter_context(gpu_lowering.cuda_autocast(AMP_DTYPES[self.amp]))
            elif self.amp:
                stack.enter_context(torch.autocast("cpu", AMP_DTYPES[self.amp]))
            yield

    def compile(self, gm: fx.GraphModule, example_inputs: list, train: bool) -> None:
        """Lower one Dynamo region (its kernels are recorded by _Probe, nothing is built)."""
        if self.gpu is None or not train:
            if self.gpu is not None:
                gm, example_inputs = gpu_lowering.to_cuda(gm, example_inputs)
            with self.active():
                compile_fx(gm, example_inputs)
            return
        # A training step on CUDA tensors cannot be traced without a GPU (autograd's engine
        # asks the device for its streams). The joint graph is traced on the CPU under the
        # CUDA policies fxroof's capture records with (CUDA's attention backend, CUDA's
        # autocast on CPU tensors), and each partitioned graph moves to CUDA just before
        # Inductor lowers it -- its fusion, layouts and kernels are CUDA's
        with TargetDispatch(self.target), (cuda_autocast(AMP_DTYPES[self.amp]) if self.amp
                                           else contextlib.nullcontext()):
            compile_fx(gm, example_inputs, inner_compile=self._lowered_on_cuda)

    def _lowered_on_cuda(self, gm: fx.GraphModule, example_inputs: list, **kwargs):
        inputs = gpu_lowering.partitioned_on_cuda(gm, example_inputs)
        with gpu_lowering.answering(self.gpu):
            return compile_fx_inner(gm, inputs, **kwargs)


def _outputs_unrun(gm: fx.GraphModule):
    """A stand-in for a region's code that returns zeros of its outputs' shapes, dtypes and
    strides (Dynamo's example values) without computing them: what the model's Python after
    a graph break needs to go on to the next region."""
    output = next(n for n in gm.graph.nodes if n.op == "output")

    def blank(value):
        example = value.meta.get("example_value") if isinstance(value, fx.Node) else value
        if not isinstance(example, torch.Tensor):
            return example
        # a size Dynamo made symbolic (an RNN's sequence length) at the value it was traced at
        return torch.empty_strided(tuple(map(optimization_hint, example.shape)),
                                   tuple(map(optimization_hint, example.stride())),
                                   dtype=example.dtype, device="cpu").zero_()

    def run(*args, **kwargs):
        return pytree.tree_map(blank, output.args[0])
    return run


# Dynamo compiles a frame once per distinct set of input shapes, here each with static
# shapes (automatic dynamic shapes off: a graph made dynamic on its second shape would be
# lowered once, at its first shape's sizes, for calls of every shape), and as often as the
# model asks (torch's default stops recompiling a frame after 8 and runs it eagerly)
_RECOMPILE_LIMIT = 4096


class RegionCall(NamedTuple):
    """One call of a Dynamo region: its graph (the same for every call of one region), its
    example inputs, where the frame locals it names modules from sit in the model, and the
    model's modules it runs code of (fxroof.region_modules)."""
    graph: Any
    example_inputs: list
    prefixes: dict
    modules: region_modules.Coverage


def _regions(module: torch.nn.Module, args, kwargs, train: bool, run: bool = True) -> list:
    """Dynamo's regions of the model, one RegionCall per call in the order the step makes
    them, the same graph module for every call of one compiled region --
    a block broken by a graph break is compiled once and called once per layer, and each
    call runs its kernels. Each region's graph runs on the inputs of its calls (``run``), or
    returns zeros of its outputs' shapes in place of computing them (a CUDA target's model
    found on the CPU: at a GPU's batch and in a GPU's dtype, running it here would take
    minutes for nothing)."""
    calls, names = [], region_modules.tensor_names(module)

    def collect(gm, example_inputs):
        compiled = gm.forward if run else _outputs_unrun(gm)
        sources = region_modules.placeholder_sources(gm)
        traced = region_modules.traced_modules(gm)

        def called(*inputs, **kw):
            prefixes = region_modules.call_prefixes(sources, inputs, names)
            calls.append(RegionCall(gm, example_inputs, prefixes,
                                    region_modules.covered(traced, prefixes)))
            return compiled(*inputs, **kw)
        return called

    torch._dynamo.reset()
    with torch.set_grad_enabled(train), dynamo_config.patch(
            automatic_dynamic_shapes=False, recompile_limit=_RECOMPILE_LIMIT,
            accumulated_recompile_limit=_RECOMPILE_LIMIT):
        torch.compile(module, backend=collect)(*args, **kwargs)
    torch._dynamo.reset()
    return calls


def schedule(module: torch.nn.Module, args, kwargs, train: bool,
             freeze: bool = False, lowering: Lowering = Lowering()) -> list[RegionCall]:
    """Lower and schedule every region with Inductor, once each: per call of a region, in
    the order the step makes them, its RegionCall with ``graph`` replaced by {phase:
    (post-grad graph module, kernels)}, forward first (a region called twice has the same
    dict twice)."""
    regions, probe, lowered = [], _Probe(), {}
    with probe.attached(freeze), torch.set_grad_enabled(train):
        for call in _regions(module, args, kwargs, train, run=lowering.gpu is None):
            gm = call.graph
            if id(gm) not in lowered:
                start = len(probe.lowered)
                lowering.compile(gm, call.example_inputs, train)
                lowered[id(gm)] = {phase: (graph, kernels) for (phase, graph), kernels in zip(
                    probe.lowered[start:], probe.kernels[start:], strict=True)}
            regions.append(call._replace(graph=lowered[id(gm)]))
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


def _matched(node: fx.Node) -> list[fx.Node]:
    """The nodes a pattern-matched lowering stands for: with freezing, Inductor's CPU pattern
    matcher replaces a convolution and the activation after it by one node whose target is a
    ``functools.partial`` over the ``Match``; the matched nodes keep their module stacks."""
    target = node.target
    if isinstance(target, functools.partial) and target.args and \
            hasattr(target.args[0], "nodes"):
        return [n for n in target.args[0].nodes if n.op == "call_function"]
    return [node]


def _fused_origin(origins: list[str], lowered: dict) -> tuple[Origin, Optional[str]]:
    """Where a kernel priced from its IR belongs, and the frame local its module is named
    from: the module of the first matrix op (the convolution or linear layer a oneDNN call
    fuses) among its origins' nodes, else of the first of them."""
    nodes = [m for o in origins if o in lowered for m in _matched(lowered[o])]
    if not nodes:
        return Origin(FORWARD, "", "copy", None), None
    rules = [op_costs.rule_for(n.target) if isinstance(n.target, torch._ops.OpOverload)
             else None for n in nodes]
    first = next((n for n, r in zip(nodes, rules) if r is not None and r.op_class == MATRIX),
                 nodes[0])
    path, layer = module_scope(first.meta.get("nn_module_stack"), first.target)
    return Origin(FORWARD, path, layer, None), first.meta.get(FRAME_LOCAL)


def _kernel_node(graph: fx.Graph, kernel: dict, mine: list[fx.Node], members: list[fx.Node],
                 index: int, lowered: dict) -> Optional[fx.Node]:
    """One kernel as a node of the compiled view; None for one that computes nothing and
    moves nothing."""
    moved = kernel["bytes_read"] + kernel["bytes_written"]
    if kernel["extern"] and not mine and (cost := _call_cost(kernel)) is not None:
        return _priced_extern(graph, kernel, cost, index, lowered)
    if not mine and not moved:
        return None
    owner = _owner(mine or members) if (mine or members) else None
    if kernel["extern"] and mine:
        name, cost = owner.target.overloadpacket.__name__, owner.meta[COST]
        estimate = Estimate(cost.flops, cost.macs, cost.bytes_read, cost.bytes_written,
                            f"{EXTERN_RULE}[{_laid_out_rule(owner, kernel)}]", cost.op_class)
    else:
        families = list(dict.fromkeys(op_family(n.target) for n in mine))
        name = ("fused_" + "_".join(families[:4]) + ("_etc" if len(families) > 4 else "")
                if mine else "copy")  # a layout change: moves bytes, computes nothing
        flops = sum(n.meta[COST].flops for n in mine)
        estimate = Estimate(flops, sum(n.meta[COST].macs for n in mine), kernel["bytes_read"],
                            kernel["bytes_written"], _kernel_rule(kernel),
                            "vector" if flops else "memory")
    node = graph.create_node("call_function", Kernel(name, extern=kernel["extern"]), (), {},
                             name=f"k{index}_{name}"[:60])
    # a layout copy belongs to the convolution it feeds (with freezing, a matched one)
    origin, local = (owner.meta[ORIGIN], owner.meta.get(FRAME_LOCAL)) if owner is not None \
        else _fused_origin(kernel["origins"], lowered)
    node.meta[ORIGIN] = Origin(origin.phase, origin.module, origin.layer_type, None)
    node.meta[FRAME_LOCAL] = local
    node.meta[SHAPES] = owner.meta[SHAPES] if owner is not None else ()
    shapes, stride = node.meta[SHAPES], kernel["stride"]
    if kernel["extern"] and isinstance(shapes, TensorMeta) and stride \
            and len(stride) == len(shapes.shape):
        # as Inductor lays it out
        node.meta[SHAPES] = TensorMeta(shapes.shape, stride, shapes.dtype)
    node.meta[COST] = estimate
    node.meta[KERNEL] = [n.name for n in mine]
    # an ATen node with no cost rule adds no FLOPs to its kernel: say so in the coverage
    node.meta[UNPRICED] = [str(n.target) for n in mine if n.meta[COST].rule == DEFAULT_RULE]
    return node


def _laid_out_rule(owner: fx.Node, kernel: dict) -> str:
    """The rule that names the library kernel an extern convolution runs, applied to the
    call as Inductor lays it out: the layout can change the kernel (an fp16 depthwise
    convolution that eager PyTorch runs NCHW with ATen's own kernel is channels-last,
    cuDNN's, under Inductor's layout optimisation). The counts stay the eager node's: on
    CUDA, Inductor adds a convolution's bias in a kernel of its own, whose FLOPs no ATen
    node holds. Any other node keeps its eager rule (the IR of a convolution's backward
    does not list its arguments in the schema's order)."""
    laid_out = _call_cost(kernel) if owner.target == kernel["op"] \
        == torch.ops.aten.convolution.default else None
    return (laid_out or owner.meta[COST]).rule


def _call_cost(kernel: dict) -> Optional[Estimate]:
    """The cost rule of an extern kernel's op on the call read off its IR; None where the
    IR did not read, or read as arguments the op's rule does not take (Inductor's IR is an
    internal API: a version may lay a call out otherwise)."""
    if kernel["call"] is None:
        return None
    args, kwargs, out = kernel["call"]
    try:
        return op_costs.estimate(kernel["op"], args, kwargs, out)
    except TypeError:
        return None


def _kernel_rule(kernel: dict) -> str:
    if kernel["extern"]:
        return EXTERN_RULE
    if kernel.get("gathers"):
        return GENERATED_RULE + UNVECTORISED_VARIANT
    return GENERATED_RULE + (TRANSPOSING_VARIANT if kernel.get("transposes") else "")


def _priced_extern(graph: fx.Graph, kernel: dict, cost: Estimate, index: int,
                   lowered: dict) -> fx.Node:
    """An extern kernel none of whose origins is a costed ATen node of its op (a prepacked
    oneDNN call standing for a matched convolution and activation), at ``cost``: its op's
    cost rule on the arguments read off its IR."""
    op = kernel["op"]
    out = kernel["call"][-1]
    name = op.overloadpacket.__name__
    node = graph.create_node("call_function", Kernel(name, extern=True), (), {},
                             name=f"k{index}_{name}"[:60])
    node.meta[ORIGIN], node.meta[FRAME_LOCAL] = _fused_origin(kernel["origins"], lowered)
    node.meta[SHAPES] = out
    node.meta[COST] = Estimate(cost.flops, cost.macs, cost.bytes_read, cost.bytes_written,
                               f"{EXTERN_RULE}[{cost.rule}]", cost.op_class)
    node.meta[KERNEL] = [m.name for o in kernel["origins"] if o in lowered
                         for m in _matched(lowered[o])]
    return node


def _constant_shapes(lowered: fx.GraphModule) -> None:
    """meta[SHAPES] of the lowered graph's constants (frozen weights, get_attr nodes with no
    fake value), so the oneDNN calls that read them are priced with their weights."""
    for node in lowered.graph.nodes:
        if node.op == "get_attr" and "val" not in node.meta:
            value = getattr(lowered, node.target, None)
            if isinstance(value, torch.Tensor):
                node.meta[SHAPES] = TensorMeta.of(value)


def add_kernels(graph: fx.Graph, lowered: fx.GraphModule, kernels: list[dict],
                prefixes: Optional[dict] = None) -> list:
    """The compiled view of one lowered graph: a node per kernel, in schedule order, its
    module named as the model names it for the call ``prefixes`` describes
    (fxroof.region_modules). Returns (node or None, kernel) per kernel."""
    by_name = {n.name: n for n in lowered.graph.nodes if is_costed(n)}
    calls = {n.name: n for n in lowered.graph.nodes if n.op == "call_function"}
    added = []
    for kernel, mine in zip(kernels, _assign(kernels, by_name), strict=True):
        members = [by_name[o] for o in kernel["origins"] if o in by_name]
        node = _kernel_node(graph, kernel, mine, members, len(graph.nodes), calls)
        if node is not None and prefixes:
            origin = node.meta[ORIGIN]
            node.meta[ORIGIN] = origin._replace(module=region_modules.in_model(
                origin.module, node.meta[FRAME_LOCAL], prefixes))
        added.append((node, kernel))
    return added


def annotate_kernel_faults(lowerings: list[tuple[str, list]], allocator: str = GLIBC) -> None:
    """Write to ``node.meta[FAULTS]`` the bytes each kernel's allocations fault in per step:
    Inductor's memory plan through glibc's arena (fxroof.inductor_memory), or 0 with a
    caching allocator, which keeps freed pages (fxroof.target). ``lowerings``: (phase,
    add_kernels' pairs) in the order they run."""
    if allocator == CACHING:
        for _, added in lowerings:
            for node, _ in added:
                if node is not None:
                    node.meta[FAULTS] = 0
        return
    plans, pin_before = [], None
    for index, (phase, added) in enumerate(lowerings):
        if phase == BACKWARD and pin_before is None:
            pin_before = index
        plans.append([(node, kernel["buffers"], _scratch(node)) for node, kernel in added])
    faulted = owned_faults(plan_events(plans, pin_before))
    for _, added in lowerings:
        for node, _ in added:
            if node is not None:
                node.meta[FAULTS] = faulted.get(node, 0)


def _scratch(node) -> list[int]:
    """Buffers a library kernel allocates inside its call (hidden_bytes.scratch_buffers)."""
    return hidden_bytes.scratch_buffers(node_record(node)) if node is not None else []


def _annotate(regions: list[RegionCall]) -> None:
    """Cost each region's lowered graphs once (a region called again was annotated at its
    first call), linking backward nodes to the forward nodes they differentiate (autograd
    sequence numbers) and noting the frame local each node's module is named from."""
    annotated = set()
    for call in regions:
        region = call.graph
        if id(region) in annotated:
            continue
        annotated.add(id(region))
        forward, backward = region.get(FORWARD), region.get(BACKWARD)
        for lowered, _ in region.values():
            _constant_shapes(lowered)
        annotate_region(forward[0].graph, backward[0].graph if backward else None, [])
        region_modules.note_frame_locals(forward[0].graph,
                                         backward[0].graph if backward else None)


def _phase_graphs(regions: list[RegionCall], allocator: str) -> dict[str, fx.Graph]:
    """{phase: the view's graph}, kernels in the order they run: every region's forward in
    call order, then their backwards in reverse; each kernel's page faults annotated."""
    _annotate(regions)
    phases = {FORWARD: fx.Graph(), BACKWARD: fx.Graph()}
    lowerings = []
    for call in regions:
        lowered, kernels = call.graph[FORWARD]
        lowerings.append((FORWARD, add_kernels(phases[FORWARD], lowered, kernels,
                                               call.prefixes)))
    for call in reversed(regions):
        if BACKWARD in call.graph:
            lowered, kernels = call.graph[BACKWARD]
            lowerings.append((BACKWARD, add_kernels(phases[BACKWARD], lowered, kernels,
                                                    call.prefixes)))
    annotate_kernel_faults(lowerings, allocator)
    for graph in phases.values():
        graph.output(())
    return phases


def compiled_view(eager: AnnotatedGraph, module: torch.nn.Module, args, kwargs,
                  freeze: bool = False, lowering: Lowering = Lowering()) -> AnnotatedGraph:
    """The compiled view of an analysis: kernels as nodes, with the eager one's model info
    (``model.view`` = "compiled", ``model.frozen``) and memory report. ``freeze``: compiled
    with Inductor's freezing (inference only)."""
    try:
        regions = schedule(module, args, kwargs, eager.model.backward, freeze, lowering)
    except FxroofError:
        raise
    except Exception as e:  # Dynamo or Inductor refused the model
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise FxroofError(f"torch.compile could not lower this model for the compiled view "
                          f"({type(e).__name__}: {first}). The eager analysis (without "
                          "--compiled / compiled=True) still works.") from None
    phases = _phase_graphs(regions, eager.model.allocator)
    # what no region traced runs eagerly between them, as the eager step's ops (all of it
    # where Dynamo compiled nothing: a bare nn.LSTM)
    traced = functools.reduce(operator.or_, (call.modules for call in regions),
                              region_modules.Coverage(frozenset(), frozenset()))
    for phase, graph in phases.items():
        eager_graph = eager.capture.forward if phase == FORWARD else eager.capture.backward
        if eager_graph is not None:
            between_regions.interleave(graph, eager_graph,
                                       between_regions.eager_nodes(eager_graph, traced))
    capture = Capture(phases[FORWARD], phases[BACKWARD] if eager.model.backward else None)
    info = ModelInfo(**{**eager.model.as_dict(), "view": "compiled", "frozen": freeze,
                        "eager_flops": eager.totals()["overall"]["flops"]})
    return AnnotatedGraph(capture, info, eager.memory, None)

