"""fxroof.record: the annotated graph of the user's own step, as they already write it.

FlopCounterMode users wrap their code in ``with FlopCounterMode() as fc:``; fxroof's
equivalent wraps forward, a custom loss, ``loss.backward()`` and ``optimizer.step()``::

    with fxroof.fake():                       # models and inputs built here are fake tensors
        model = torchvision.models.resnet50()
        x, y = torch.randn(64, 3, 224, 224), torch.randint(0, 1000, (64,))
    opt = torch.optim.AdamW(model.parameters())
    with fxroof.record(device="cuda", amp="bf16") as rec:
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    print(rec.graph.table())

Everything runs on fake tensors (``fake()`` builds them; ``fake_model()`` converts a model
built with real or meta weights), so a 70B model costs what a small one does and the user's
real weights are never touched. Which phase an op belongs to follows what is running: ops
inside ``backward()``/``autograd.grad()`` are the backward, ops inside ``optimizer.step()``
(global step hooks) and ops reading gradients after the backward (clipping, an unscale) are
the optimizer phase, everything else is the forward. ``amp=`` runs autocast around the forward
only, as torch's AMP recipe places it (backward and step run outside autocast): on a CUDA
target ``torch.autocast("cuda")`` cannot run without a GPU, so ``amp=`` stands in for it.

Like ``analyze``, the optimizer's phase is one steady-state step: an optimizer's first step
(which only creates its state) runs unrecorded just before the recorded one, and on a CUDA
target an optimizer left at torch.optim's default runs its foreach kernels, as it would there.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Optional

import torch
from torch import nn
from torch._subclasses import fake_tensor
from torch.optim import optimizer as optim_hooks
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from fxroof.analysis import UNTRACEABLE, untraceable_message
from fxroof.capture import GraphRecorder, InputKind
from fxroof.cost_pass import annotate_costs, check_rules
from fxroof.errors import FxroofError, UsageError
from fxroof.graph import AnnotatedGraph, ModelInfo
from fxroof.guard import refuse_uninitialized
from fxroof.keys import BACKWARD, FORWARD, INPUT, OPTIMIZER
from fxroof.memory import memory_report
from fxroof.models import build_model, ensure_module
from fxroof.scope import ModuleScope
from fxroof.step import TrainingStep
from fxroof.target import Target, check_amp
from fxroof.units import dtype_name
from fxroof import chips, validate

_shared_mode: Optional[fake_tensor.FakeTensorMode] = None


def fake_mode() -> fake_tensor.FakeTensorMode:
    """The one FakeTensorMode that ``fake()``, ``fake_model()`` and ``record()`` share:
    fake tensors of different modes cannot meet in one op."""
    global _shared_mode
    if _shared_mode is None:
        _shared_mode = fake_tensor.FakeTensorMode(allow_non_fake_inputs=True)
    return _shared_mode


@contextlib.contextmanager
def fake():
    """Every tensor made inside is a fake one (shape, dtype, strides; no data): build the
    model and its inputs here, as cheaply for 70B parameters as for 7M."""
    with fake_mode():
        yield


def fake_model(model, hf_config: Optional[dict] = None) -> nn.Module:
    """A copy of ``model`` (an nn.Module with real or meta weights, or a model name as
    ``analyze`` takes it) whose parameters and buffers are fake; the original is untouched.
    Tied weights stay tied."""
    module = build_model(model, hf_config=hf_config) if isinstance(model, str) \
        else ensure_module(model)
    refuse_uninitialized(module)
    memo: dict = {}
    with fake_mode():
        for t in (*module.parameters(), *module.buffers()):
            if id(t) not in memo:
                fake_t = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
                memo[id(t)] = (nn.Parameter(fake_t, t.requires_grad)
                               if isinstance(t, nn.Parameter) else fake_t)
    return copy.deepcopy(module, memo)


class record:  # noqa: N801 (used like FlopCounterMode: ``with fxroof.record() as rec``)
    """Record the step run inside the block; ``rec.graph`` is its AnnotatedGraph.

    device: the target, 'cpu' or 'cuda' (recorded without a GPU; fxroof.target); chip: a
    Chip or id giving its compute capability (a GPU chip implies 'cuda'); amp: 'fp16' or
    'bf16', autocast around the forward; rules: cost-rule overrides as ``analyze`` takes.
    """

    def __init__(self, device: Optional[str] = None, *, amp: Optional[str] = None, chip=None,
                 name: str = "recorded step", rules: Optional[dict] = None):
        if device is not None:
            device = validate.device(device)  # the same names analyze() takes
        check_rules(rules)
        chip = chips.get_chip(chip) if isinstance(chip, str) else chip
        target = Target.of(device, chip)
        self.step = TrainingStep(target, amp=check_amp(target, amp))
        self.name, self.rules = name, rules
        self._graph: Optional[AnnotatedGraph] = None
        self._stack: Optional[contextlib.ExitStack] = None

    @property
    def graph(self) -> AnnotatedGraph:
        if self._graph is None:
            raise UsageError("rec.graph is ready when the `with fxroof.record() as rec:` "
                             "block has finished without an error.")
        return self._graph

    def __enter__(self) -> "record":
        self.scope = ModuleScope()  # modules are named as they first run
        self.recorder = StepRecorder(self.scope, self.step.target)
        stack = contextlib.ExitStack()
        for context in (fake_mode(), self.scope, self.recorder, self.step.dispatch(),
                        _Phases(self.recorder), _optimizer_hooks(self.recorder),
                        self.step.autocast()):
            stack.enter_context(context)
        self._stack = stack
        return self

    def __exit__(self, kind, error, tb) -> bool:
        self._stack.close()
        if isinstance(error, UNTRACEABLE):
            raise FxroofError(untraceable_message(error, self.scope)) from None
        if error is not None:
            return False
        capture = self.recorder.finish_step()
        if not any(n.op == "call_function" for g in capture.graphs() for n in g.nodes):
            raise FxroofError("The `with fxroof.record()` block ran no operation on a tensor: "
                              "there is nothing to analyse. Put the step itself inside it -- "
                              "the model's forward, the loss, backward() and the optimizer's "
                              "step.")
        for graph in capture.graphs():
            annotate_costs(graph, self.rules)
        self._graph = AnnotatedGraph(capture, self._model_info(capture), memory_report(capture))
        return False

    def _model_info(self, capture) -> ModelInfo:
        inputs = [n.meta["val"] for n in capture.forward.nodes
                  if n.op == "placeholder" and n.meta[INPUT].kind == "input"]
        params = {id(p): p for root in self.scope.roots for p in root.parameters()}
        training = any(root.training for root in self.scope.roots) if self.scope.roots \
            else capture.backward is not None
        amp, _, _ = self.step.describe()
        return ModelInfo(
            name=self.name,
            batch=inputs[0].shape[0] if inputs and inputs[0].dim() else None,
            inputs=[{"shape": list(x.shape), "dtype": dtype_name(x.dtype)} for x in inputs],
            dtype=dtype_name(next((p.dtype for p in params.values()), torch.float32)),
            mode="train" if training else "eval",
            backward=capture.backward is not None,
            parameters=sum(p.numel() for p in params.values()),
            device=self.step.target.device,
            amp=amp,
            loss="your code" if capture.backward is not None else None,
            optimizer=", ".join(self.recorder.optimizers) or None,
        )


class StepRecorder(GraphRecorder):
    """A GraphRecorder whose phase follows the user's code (see the module docstring)."""

    def __init__(self, scope: ModuleScope, target: Target):
        super().__init__(scope)
        self.target = target
        self.stepped = False
        self.optimizers: list[str] = []      # "adamw (foreach)", one per recorded step
        self.autograd_grads: list = []       # what torch.autograd.grad returned
        self._inputs = 0
        self._backward_ran = False

    # ---- tensors from outside the block ---------------------------------------------------
    def outside_tensor(self, tensor: torch.Tensor):
        kind, fqn = self.scope.tensor_names.get(id(tensor), (None, ""))
        if isinstance(tensor, nn.Parameter) or kind is not None or tensor.is_meta:
            _require_fake(tensor, kind or "parameter")
        if kind is None and isinstance(tensor, nn.Parameter):
            kind, fqn = "parameter", f"parameter_{len(self.scope.tensor_names)}"
            self.scope.tensor_names[id(tensor)] = (kind, fqn)
        if kind is not None:
            prefix = "p" if kind == "parameter" else "b"
            return self.placeholder(tensor, f"{prefix}_{fqn}", InputKind(kind, fqn), FORWARD)
        if self.phase != FORWARD:
            return super().outside_tensor(tensor)
        self._inputs += 1
        return self.placeholder(tensor, f"input_{self._inputs - 1}",
                                InputKind("input", str(self._inputs - 1)), FORWARD)

    # ---- phases ---------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "prim":  # device queries, from C++ that cannot take an error
            return super().__torch_dispatch__(func, types, args, kwargs)
        if self.phase == BACKWARD and func in _GRAD_CLONE and _accumulating_gradient():
            return self._stolen_gradient(func, args, kwargs or {})
        if self.phase != FORWARD or self.paused or not self._backward_ran:
            return super().__torch_dispatch__(func, types, args, kwargs)
        later = self._later_phase_read(args, kwargs)
        if later == OPTIMIZER and self.scope.current is not None:
            raise FxroofError(_second_step())
        if later is None:
            return super().__torch_dispatch__(func, types, args, kwargs)
        self.begin_update()  # work on the gradients outside the engine: clipping, unscaling
        self.phase = OPTIMIZER
        try:
            return super().__torch_dispatch__(func, types, args, kwargs)
        finally:
            self.phase = FORWARD

    def _stolen_gradient(self, func, args, kwargs):
        """AccumulateGrad hands a parameter its first gradient without a copy when nothing
        else holds that tensor; the recorder's own references make it clone instead
        (new_empty_strided + copy_). The clone is the recorder's, not the step's: the
        gradient is the tensor it copies."""
        out = func(*args, **kwargs)
        if func is torch.ops.aten.copy_.default:
            self._remember(out, self._node_for(args[1]))
        return out

    def _later_phase_read(self, args, kwargs) -> Optional[str]:
        phases = set()
        for t in pytree.tree_leaves((args, kwargs)):
            node = self._producer.get(id(t)) if isinstance(t, torch.Tensor) else None
            if node is not None and node.graph is not self.graphs[FORWARD]:
                phases.add(OPTIMIZER if node.graph is self.graphs[OPTIMIZER] else BACKWARD)
        return OPTIMIZER if OPTIMIZER in phases else next(iter(phases), None)

    def enter_backward(self) -> None:
        if self._backward_closed:
            raise FxroofError(_second_step())
        self.resolve_grad_fns()
        self.phase, self._backward_ran = BACKWARD, True

    def exit_backward(self) -> None:
        self.phase = FORWARD

    def begin_update(self) -> None:
        """The gradients are final: the backward graph returns them, and the optimizer phase
        knows each gradient's parameter."""
        params = self._parameters()
        if not self._backward_closed and self._backward_ran:
            grads = [p.grad for p in params.values() if p.grad is not None]
            self.close_backward(grads + [g for g in self.autograd_grads if g is not None])
        for fqn, p in params.items():
            self.parameter_of[id(p)] = fqn
            if p.grad is not None:
                self.parameter_of[id(p.grad)] = fqn

    def _parameters(self) -> dict:
        """{fqn: parameter} of every module that ran (the first name of a tied weight)."""
        found: dict = {}
        for root in self.scope.roots:
            for p in root.parameters():
                kind, fqn = self.scope.tensor_names.get(id(p), (None, None))
                if kind == "parameter":
                    found.setdefault(fqn, p)
        return found

    def start_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.begin_update()
        for p in _parameters_with_grad(optimizer):
            fqn = self.parameter_of.get(id(p), f"parameter_{len(self.parameter_of)}")
            for t in (p, p.grad, *optimizer.state.get(p, {}).values()):
                if isinstance(t, torch.Tensor):
                    self.parameter_of[id(t)] = fqn
        self.phase, self.optimizer_name = OPTIMIZER, type(optimizer).__name__
        self.optimizers.append(f"{type(optimizer).__name__.lower()} "
                               f"({_implementation(optimizer)})")

    def end_step(self) -> None:
        self.phase, self.optimizer_name, self.stepped = FORWARD, "", True

    def finish_step(self):
        """The Capture: the forward returns what nothing in it consumed (the loss, say)."""
        if self._backward_ran and not self._backward_closed:
            self.begin_update()
        self.phase = FORWARD
        forward = self.graphs[FORWARD]
        unused = [n.meta["val"] for n in forward.nodes if n.op == "call_function"
                  and not n.users and isinstance(n.meta["val"], torch.Tensor)]
        return self.finish(unused, [] if self._backward_ran else None)


_GRAD_CLONE = (torch.ops.aten.new_empty_strided.default, torch.ops.aten.copy_.default)


def _accumulating_gradient() -> bool:
    node = torch._C._current_autograd_node()
    return node is not None and node.name().endswith("AccumulateGrad")


def _parameters_with_grad(optimizer) -> list:
    return [p for group in optimizer.param_groups for p in group["params"]
            if p.grad is not None]


def _implementation(optimizer) -> str:
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    if group.get("fused"):
        return "fused"
    return "foreach" if group.get("foreach") else "for-loop"


class _Phases(TorchFunctionMode):
    """The backward phase is what runs inside backward() / autograd.grad(), outside
    autocast (the AMP recipe's ``scaler.scale(loss).backward()`` sits outside it)."""

    _CALLS = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)

    def __init__(self, recorder: StepRecorder):
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in self._CALLS:
            return func(*args, **kwargs)
        self.recorder.enter_backward()
        try:
            with torch.autocast("cpu", enabled=False):
                out = func(*args, **kwargs)
        finally:
            self.recorder.exit_backward()
        if func is torch.autograd.grad:
            self.recorder.autograd_grads.extend(pytree.tree_leaves(out))
        return out


@contextlib.contextmanager
def _optimizer_hooks(recorder: StepRecorder):
    """Every optimizer's step is the optimizer phase: one steady-state step, run outside
    autocast, with torch.optim's default kernels for the target."""
    running: dict = {}

    def before(optimizer, args, kwargs):
        if running:
            return  # the unrecorded first step below
        running["restore"] = _target_default_kernels(optimizer, recorder.target)
        if any(not optimizer.state.get(p) for p in _parameters_with_grad(optimizer)):
            recorder.paused, running["warmup"] = True, True  # creates the state
            try:
                optimizer.step()
            finally:
                recorder.paused = False
                del running["warmup"]
        recorder.start_step(optimizer)
        running["autocast"] = torch.autocast("cpu", enabled=False)
        running["autocast"].__enter__()

    def after(optimizer, args, kwargs):
        if "warmup" in running or "autocast" not in running:
            return
        running.pop("autocast").__exit__(None, None, None)
        running.pop("restore")()
        recorder.end_step()

    handles = (optim_hooks.register_optimizer_step_pre_hook(before),
               optim_hooks.register_optimizer_step_post_hook(after))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        if "autocast" in running:  # a step that raised
            running.pop("autocast").__exit__(None, None, None)
            running.pop("restore")()


def _target_default_kernels(optimizer, target: Target):
    """On a CUDA target an optimizer at torch.optim's default runs foreach kernels
    (_default_to_fused_or_foreach); the fake tensors are CPU ones, so say so for the step.
    Returns the function that restores the user's setting."""
    changed = []
    if target.is_cuda:
        for group in optimizer.param_groups:
            if group.get("foreach") is None and not group.get("fused") and "foreach" in group:
                group["foreach"] = True
                changed.append(group)

    def restore():
        for group in changed:
            group["foreach"] = None
    return restore


def _require_fake(tensor: torch.Tensor, kind: str) -> None:
    if isinstance(tensor, fake_tensor.FakeTensor):
        return
    where, why = (("on the meta device", "meta tensors cannot meet fake ones")
                  if tensor.is_meta else
                  ("a real tensor", "autograd would write fake gradients into your model"))
    raise FxroofError(
        f"fxroof.record runs on fake tensors, and a {kind} of shape {tuple(tensor.shape)} is "
        f"{where}: {why}. "
        "Build the model inside `with fxroof.fake():`, or record a fake copy: "
        "`model = fxroof.fake_model(model)`.")


def _second_step() -> str:
    return ("fxroof.record holds one training step (forward, backward, optimizer step), and "
            "this code runs a second one: a forward reading updated weights, or a backward "
            "after the gradients were used. Record one step per `with fxroof.record()` block "
            "(gradient accumulation, several forward/backward before one step, is fine).")
