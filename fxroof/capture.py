"""Capture: run one training (or inference) step on fake tensors and record every ATen op that
is dispatched -- the forward, then autograd's backward -- into two torch.fx graphs.

Why a dispatch-mode recorder rather than AOTAutograd or make_fx: both record the same ATen ops
(make_fx is itself a dispatch-mode tracer), but neither attaches the module path to a node
without Dynamo in front, and neither splits forward and backward without a partitioner pass.
Recording below autograd gives us, in one pass at the cost of FlopCounterMode:
* the module path and layer type of every forward op (from module hooks, see scope.py),
* the forward op each backward op differentiates: while the engine runs a backward node,
  ``torch._C._current_autograd_node()`` is that node, and its sequence number is the one
  autograd gave the forward op that created it,
* the eager op set exactly as a real step runs it (no decompositions, no functionalisation),
  including in-place ops and views.

Graph conventions (shared with make_fx/AOTAutograd graphs): ``call_function`` nodes target
``OpOverload``s, multi-output ops are followed by ``operator.getitem`` nodes, every node's
``meta["val"]`` is its fake output. fxroof adds, per node, ``meta[ORIGIN]`` (an :class:`Origin`)
and ``meta[SHAPES]`` (TensorMeta of the outputs at the time of the call), per backward node
``meta[ACCUMULATES]`` (True for the engine's own gradient sums), per node CUDA's autocast
issues inside another's kernel ``meta[AUTOCAST_INTERNAL]`` (True), per placeholder
``meta[INPUT]`` (an :class:`InputKind`). The forward graph returns the model's tensor outputs
followed by the tensors the backward graph reads (its "saved" placeholders, named like the
forward nodes they stand for); the backward graph takes those plus one tangent per
differentiable output and returns the gradients.
"""
from __future__ import annotations

import bisect
import collections
import functools
import operator
import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from op_costs import TensorMeta
from fxroof.errors import FxroofError
from fxroof.keys import (ACCUMULATES, AUTOCAST_INTERNAL, BACKWARD, FORWARD,  # noqa: F401
                         INPUT, OPTIMIZER, ORIGIN, SHAPES)  # (F401: some re-exported)
from fxroof.scope import ModuleScope, op_family
from fxroof.target_dispatch import autocast_internal

# Ops that only re-label a tensor: recording them would add nodes, not information. Autograd
# emits a detach for every tensor it saves for backward; eliding them keeps the graphs lean
# and makes the backward read the forward node itself.
_TRANSPARENT = {torch.ops.aten.detach.default, torch.ops.aten.alias.default,
                torch.ops.aten.lift_fresh.default}
# Products whose CPU and CUDA kernels refuse operands of different dtypes (an int64 input to a
# float Linear: "mat1 and mat2 must have the same dtype") but whose fake-tensor shape
# functions do not check: the step would fail when run, so its capture fails too.
_ONE_DTYPE = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default,
              torch.ops.aten.mv.default}


class Origin(NamedTuple):
    phase: str                    # FORWARD, BACKWARD or OPTIMIZER
    module: str                   # module path, "" for code in the root module
    layer_type: str               # module class, or the op family for module-less code
    forward_node: Optional[str]   # backward nodes: the forward node they differentiate


class InputKind(NamedTuple):
    # "parameter" | "buffer" | "input" | "target" (the loss's) | "tangent" | "saved" |
    # "constant"; the optimizer graph's "gradient" | "optimizer_state"
    kind: str
    label: str   # fully qualified name, input index, or the forward node's name


@dataclass
class Capture:
    forward: fx.Graph
    backward: Optional[fx.Graph]
    saved: list[str] = field(default_factory=list)  # forward nodes the backward reads
    optimizer: Optional[fx.Graph] = None  # the optimizer's step, reading params and gradients

    def graphs(self) -> list[fx.Graph]:
        return [g for g in (self.forward, self.backward, self.optimizer) if g is not None]


def _note_return(returned: dict, sequence_nr: int, grad_inputs, grad_outputs) -> None:
    """A backward node's post hook: its function has returned, on this engine thread."""
    returned[threading.get_ident()] = sequence_nr


def require_dense(t: torch.Tensor) -> None:
    """Cost rules need strides: sparse and nested tensors get a clear error, not a crash."""
    if t.layout == torch.strided and not t.is_nested:
        return
    kind = ("nested (jagged)" if t.is_nested
            else f"{str(t.layout).replace('torch.', '')} (sparse)")
    shape = "" if t.is_nested else f" of shape {tuple(t.shape)}"
    raise FxroofError(
        f"fxroof analyses dense (strided) tensors only, and this model uses a {kind} "
        f"tensor{shape}: cost rules need each tensor's strides, and fake-tensor tracing of "
        "these layouts is partial. Analyse the model on dense inputs of the same size (e.g. "
        "pad the nested batch, or call .to_dense()), or analyse the dense part on its own.")


def _meta_of(t: torch.Tensor) -> TensorMeta:
    require_dense(t)
    return TensorMeta.of(t)


def tensor_meta_tree(value):
    return pytree.tree_map_only(torch.Tensor, _meta_of, value)


def _check_one_dtype(func, args) -> None:
    dtypes = [a.dtype for a in args if isinstance(a, torch.Tensor)]
    if len(set(dtypes)) > 1:
        raise RuntimeError(f"{func.overloadpacket.__name__}: its operands must share one dtype "
                           f"(PyTorch's kernels refuse to mix them), but got "
                           f"{', '.join(str(d).removeprefix('torch.') for d in dtypes)}")


class GraphRecorder(TorchDispatchMode):
    """Records dispatched ATen ops into a forward and a backward fx.Graph."""

    def __init__(self, scope: ModuleScope):
        super().__init__()
        self.scope = scope
        self.graphs = {FORWARD: fx.Graph(), BACKWARD: fx.Graph(), OPTIMIZER: fx.Graph()}
        self.phase = FORWARD
        self.paused = False
        self._producer: dict[int, fx.Node] = {}   # id(tensor) -> node that produced it
        self._alive: list[Any] = []               # keeps recorded tensors (and their ids) alive
        self._last_placeholder: dict[str, Optional[fx.Node]] = dict.fromkeys(self.graphs)
        self._saved: dict[fx.Node, fx.Node] = {}  # forward node -> its backward placeholder
        self._by_sequence_nr: dict[int, fx.Node] = {}
        self._unresolved: list = []  # (forward node, sequence counter, output versions)
        self._sorted_sequence_nrs: Optional[list[int]] = None
        self._hooked: set[int] = set()  # backward nodes that say when their function returns
        # engine thread -> the sequence number of the last node whose function returned there
        # (a CUDA device's backward runs on a thread of its own, a CPU's on the caller's)
        self._returned: dict[int, int] = {}
        self._names = collections.Counter()
        # the optimizer phase: id(parameter, gradient or state tensor) -> the parameter's name
        self.parameter_of: dict[int, str] = {}
        self.optimizer_name = ""
        self._imported: dict = {}  # node of an earlier phase -> its optimizer placeholder
        self._backward_closed = False

    # ---- inputs -------------------------------------------------------------------------
    def placeholder(self, value, name: str, kind: InputKind, phase: str = FORWARD,
                    produces: bool = True) -> fx.Node:
        """``produces``: later reads of ``value`` go to this node (False for a later phase's
        copy of an earlier node's tensor: the earlier node stays its producer)."""
        graph = self.graphs[phase]
        last = self._last_placeholder[phase]
        with (graph.inserting_after(last) if last is not None else graph.inserting_before()):
            node = graph.placeholder(self._unique(name))
        node.meta["val"] = value
        node.meta[SHAPES] = tensor_meta_tree(value)
        node.meta[INPUT] = kind
        self._last_placeholder[phase] = node
        if produces and isinstance(value, torch.Tensor):
            self._remember(value, node)
        return node

    def _unique(self, base: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base)
        if not base[:1].isalpha():  # "0_weight" is no Python identifier
            base = "v" + base
        n = self._names[base]
        self._names[base] += 1
        return base if n == 0 else f"{base}_{n}"

    def _remember(self, tensor: torch.Tensor, node: fx.Node) -> None:
        self._producer[id(tensor)] = node
        self._alive.append(tensor)

    def _node_for(self, tensor: torch.Tensor) -> fx.Node:
        node = self._producer.get(id(tensor))
        if node is None and id(tensor) in self.parameter_of:  # the optimizer's state
            node = self.placeholder(tensor, "state", InputKind(
                "optimizer_state", self.parameter_of[id(tensor)]), OPTIMIZER)
        elif node is None:
            node = self.outside_tensor(tensor)
        if self.phase == BACKWARD and node.graph is self.graphs[FORWARD]:
            node = self._saved_placeholder(node)
        elif self.phase == OPTIMIZER and node.graph is not self.graphs[OPTIMIZER]:
            node = self._optimizer_input(node, tensor)
        return node

    def outside_tensor(self, tensor: torch.Tensor) -> fx.Node:
        """A tensor from outside the step (a plain tensor attribute, a closure constant)."""
        return self.placeholder(tensor, "constant", InputKind("constant", ""), self.phase)

    def _optimizer_input(self, node: fx.Node, tensor: torch.Tensor) -> fx.Node:
        """A parameter or gradient the optimizer reads, as a placeholder of its graph."""
        if node not in self._imported:
            kind = node.meta.get(INPUT)
            fqn = self.parameter_of.get(id(tensor), node.name)
            what = kind if kind is not None and kind.kind == "parameter" else \
                InputKind("gradient", fqn)
            self._imported[node] = self.placeholder(
                tensor, f"{'p' if what.kind == 'parameter' else 'grad'}_{fqn}", what, OPTIMIZER,
                produces=False)
        return self._imported[node]

    def _saved_placeholder(self, forward_node: fx.Node) -> fx.Node:
        if forward_node not in self._saved:
            self._saved[forward_node] = self.placeholder(
                forward_node.meta["val"], forward_node.name, InputKind("saved", forward_node.name),
                BACKWARD, produces=False)
        return self._saved[forward_node]

    # ---- recording ----------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "prim":  # fake tensors' device queries, even inside autograd
            return func(*args, **kwargs)  # kernels: too early to read a grad_fn, nothing to cost
        self.resolve_grad_fns()
        if func in _ONE_DTYPE:
            _check_one_dtype(func, args)
        out = func(*args, **kwargs)
        if self.paused:
            return out
        if func in _TRANSPARENT:
            self._remember(out, self._node_for(args[0]))
            return out
        if not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(out)) and \
                not func._schema.is_mutable:
            return out  # sizes, devices, scalars: nothing to cost
        node_args, node_kwargs = pytree.tree_map_only(torch.Tensor, self._node_for, (args, kwargs))
        graph = self.graphs[self.phase]
        node = graph.create_node("call_function", func, tuple(node_args), node_kwargs,
                                 name=self._unique(op_family(func)))
        node.meta["val"] = out
        node.meta[SHAPES] = tensor_meta_tree(out)
        node.meta[ORIGIN] = self._origin(func, node, args, kwargs)
        if self.phase == BACKWARD:
            node.meta[ACCUMULATES] = self._engine_accumulating()
        if autocast_internal():
            node.meta[AUTOCAST_INTERNAL] = True
        self._register_outputs(node, out)
        return out

    def _register_outputs(self, node: fx.Node, out) -> None:
        if isinstance(out, torch.Tensor):
            self._remember(out, node)
        elif isinstance(out, (tuple, list)):
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor):
                    item_node = node.graph.call_function(operator.getitem, (node, i))
                    item_node.meta["val"] = item
                    item_node.meta[SHAPES] = _meta_of(item)
                    item_node.meta[ORIGIN] = node.meta[ORIGIN]
                    self._remember(item, item_node)

    def resolve_grad_fns(self) -> None:
        """Map the grad_fn of each recently recorded forward op to its node.

        Autograd attaches an op's grad_fn to its outputs only after the op returns from this
        mode, so it is read here, at the next dispatch, and only from outputs that are not
        views and whose version is the one the op left them at (an in-place op's own bump
        lands after it returns): then no later in-place op has replaced it. A view's grad_fn is
        never read: autograd may rebuild it on access, and an in-place op on a view dispatches
        view replays while holding the view's lock, so a read from here can deadlock. Views
        use the global sequence counter read at the op's dispatch instead, which is exact
        unless the op's autograd kernel dispatched another differentiable op first (in-place
        ops that clone their input).
        """
        pending, self._unresolved = self._unresolved, []
        for node, counter, versions in pending:
            bump = 1 if node.target._schema.is_mutable else 0
            sequence_nr = counter
            outputs = [t for t in pytree.tree_leaves(node.meta["val"])
                       if isinstance(t, torch.Tensor)]
            for t, version in zip(outputs, versions, strict=True):
                if not t._is_view() and version <= t._version <= version + bump:
                    if t.grad_fn is not None:
                        sequence_nr = t.grad_fn._sequence_nr()
                        self._hook(t.grad_fn, sequence_nr)
                        break
            if sequence_nr is not None:
                self._by_sequence_nr.setdefault(sequence_nr, node)

    def _hook(self, grad_fn, sequence_nr: int) -> None:
        """Have ``grad_fn`` say when its function returns (a post hook, which the engine runs
        before it hands the gradients on): see _engine_accumulating."""
        if sequence_nr not in self._hooked:
            self._hooked.add(sequence_nr)
            # the hook holds the dict, not the recorder: the recorder keeps the forward's
            # tensors, and so their nodes and hooks, alive -- a cycle through C++ autograd
            # nodes that Python's collector cannot break
            grad_fn.register_hook(functools.partial(_note_return, self._returned, sequence_nr))

    def _engine_accumulating(self) -> bool:
        """Whether the backward op running now is the engine's, not a backward function's:
        once a node's function has returned, and while that node is still current, the engine
        adds each gradient it produced to the one another path already delivered to the same
        tensor (InputBuffer::add: a ResNet block's input, each of DenseNet's concatenated
        features). Issued from C++ with no autograd node of its own, such an add costs the
        host less than the ops around it (fxroof.pipeline). A node of a non-view output is
        hooked when the forward records it (resolve_grad_fns); a view's, whose grad_fn the
        forward never reads, from inside its own function, at its first op."""
        current = torch._C._current_autograd_node()
        if current is None or current.name().endswith("AccumulateGrad"):
            return False  # (a hook would change whether AccumulateGrad steals a gradient)
        sequence_nr = current._sequence_nr()
        if sequence_nr == self._returned.get(threading.get_ident()):
            return True
        self._hook(current, sequence_nr)  # a view's node, from inside its function
        return False

    def _forward_node_of(self, grad_fn) -> Optional[fx.Node]:
        """The forward node a backward autograd node differentiates: by its sequence number,
        else the latest forward op numbered before it (grad_fns are numbered in forward
        execution order, so this is the op that was running when it was created)."""
        if grad_fn is None:
            return None
        sequence_nr = grad_fn._sequence_nr()
        node = self._by_sequence_nr.get(sequence_nr)
        if node is None and self._by_sequence_nr:
            if self._sorted_sequence_nrs is None:
                self._sorted_sequence_nrs = sorted(self._by_sequence_nr)
            i = bisect.bisect_right(self._sorted_sequence_nrs, sequence_nr)
            node = self._by_sequence_nr[self._sorted_sequence_nrs[i - 1]] if i else None
        return node

    def _origin(self, func, node: fx.Node, args, kwargs) -> Origin:
        if self.phase == FORWARD:
            info = self.scope.current
            # Ops inside a custom autograd.Function's forward run with grad off, yet their
            # output gets the Function's grad_fn when apply() returns: queue them too, but
            # trust the counter only for ops that autograd itself numbered.
            if any(isinstance(x, torch.Tensor) and x.requires_grad
                   for x in pytree.tree_leaves((args, kwargs))):
                versions = [t._version for t in pytree.tree_leaves(node.meta["val"])
                            if isinstance(t, torch.Tensor)]
                counter = torch.autograd._get_sequence_nr() - 1 if torch.is_grad_enabled() \
                    else None
                self._unresolved.append((node, counter, versions))
            return Origin(FORWARD, info.path if info else "", self.scope.layer_type_of(func), None)
        if self.phase == OPTIMIZER:
            return self._optimizer_origin(func, args, kwargs, node.meta["val"])
        forward = self._forward_node_of(torch._C._current_autograd_node())
        if forward is None:  # engine bookkeeping (gradient accumulation, seeds)
            return Origin(BACKWARD, "", op_family(func), None)
        of = forward.meta[ORIGIN]
        return Origin(BACKWARD, of.module, of.layer_type, forward.name)

    def _optimizer_origin(self, func, args, kwargs, out) -> Origin:
        """An update op belongs to the module of the parameters it updates: a for-loop
        optimizer's op to one parameter's module, a foreach/fused op over many modules' lists
        to the optimizer itself (the root, layer type e.g. "AdamW"). Its outputs (a
        temporary such as Adam's denominator) belong to the same parameter."""
        names = {self.parameter_of[id(t)] for t in pytree.tree_leaves((args, kwargs))
                 if isinstance(t, torch.Tensor) and id(t) in self.parameter_of}
        modules = {name.rpartition(".")[0] for name in names}
        if len(names) == 1:
            self.parameter_of.update({id(t): next(iter(names)) for t in pytree.tree_leaves(out)
                                      if isinstance(t, torch.Tensor)})
        if len(modules) == 1:
            path = modules.pop()
            return Origin(OPTIMIZER, path, self.scope.class_of(path), None)
        return Origin(OPTIMIZER, "", self.optimizer_name or op_family(func), None)

    # ---- outputs ------------------------------------------------------------------------
    def close_backward(self, grads: list) -> None:
        """The backward graph returns the gradients; called before an optimizer reads them
        (a gradient may itself be a saved forward tensor)."""
        self.phase = BACKWARD
        self.graphs[BACKWARD].output(
            tuple(self._node_for(g) if g is not None else None for g in grads))
        self._backward_closed = True

    def finish(self, outputs: list[torch.Tensor], grads: Optional[list]) -> Capture:
        backward = None
        if grads is not None:
            if not self._backward_closed:
                self.close_backward(grads)
            backward = self.graphs[BACKWARD]
        optimizer = self.graphs[OPTIMIZER]
        if any(n.op == "call_function" for n in optimizer.nodes):
            optimizer.output(())
        else:
            optimizer = None
        forward = self.graphs[FORWARD]
        saved = list(self._saved)
        forward.output(tuple(self._producer_or_none(t) for t in outputs) + tuple(saved))
        return Capture(forward, backward, [n.name for n in saved], optimizer)

    def _producer_or_none(self, t) -> Optional[fx.Node]:
        return self._producer.get(id(t)) if isinstance(t, torch.Tensor) else None
