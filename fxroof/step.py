"""The rest of a training step around the model: its loss, and its optimizer's update.

A measured training step is ``loss(model(x), y).backward(); optimizer.step();
optimizer.zero_grad()``. fxroof records the loss in the forward phase (as a layer of its own,
module path ``loss``), its backward with the model's, and the optimizer's update ops as a
third phase, ``optimizer``. ``zero_grad()`` sets gradients to None by default
(``set_to_none=True`` since torch 2.0): it dispatches no ATen op, so it adds no node; the
first backward of the next step then hands its gradients over without a copy.

The optimizer is built the way users build it: SGD with momentum 0.9, Adam and AdamW with
torch.optim's defaults (AdamW's weight decay 0.01). Its implementation is torch.optim's
default on the target -- a for-loop over parameters on the CPU, the multi-tensor ``foreach``
kernels on CUDA (``torch.optim.optimizer._default_to_fused_or_foreach``) -- unless
``foreach``/``fused`` is asked for. The optimizer's first step only creates its state
(momentum, exp_avg, exp_avg_sq), so fxroof runs it unrecorded and records the second, a
steady-state step.
"""
from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from fxroof.capture import InputKind
from fxroof.errors import FxroofError, UsageError
from fxroof.target import Target, check_amp
from fxroof.target_dispatch import (TargetDispatch, cpu_autocast, cuda_autocast,
                                     kernel_shapes)

LOSSES = ("auto", "cross_entropy", "lm")
OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}
IMPLEMENTATIONS = ("default", "for-loop", "foreach", "fused")
SGD_MOMENTUM = 0.9
LEARNING_RATE = 1e-3


@dataclass(frozen=True)
class Loss:
    """How the step turns the model's output into the scalar it differentiates."""

    name: str                       # "cross_entropy" | "lm" | the callable's name
    fn: Optional[Callable] = None   # (output, target) -> scalar; None: the model's own loss
    layer_type: str = "loss"


@dataclass(frozen=True)
class OptimizerSpec:
    name: str             # "sgd" | "adam" | "adamw"
    implementation: str   # "for-loop" | "foreach" | "fused"

    @property
    def class_name(self) -> str:
        return OPTIMIZERS[self.name]

    def build(self, params: list) -> torch.optim.Optimizer:
        kind = {"foreach": {"foreach": True}, "fused": {"fused": True},
                "for-loop": {"foreach": False}}[self.implementation]
        cls = getattr(torch.optim, self.class_name)
        extra = {"momentum": SGD_MOMENTUM} if self.name == "sgd" else {}
        return cls(params, lr=LEARNING_RATE, **extra, **kind)


def parse_loss(loss: Union[None, str, Callable], spec: Optional[str]) -> Optional[Loss]:
    """None, a Loss for 'auto' / 'cross_entropy' / 'lm' / 'package.module:function', or a
    callable ``fn(output) -> scalar``."""
    if loss is None or loss is False:
        return None
    if callable(loss):
        return Loss(getattr(loss, "__name__", "loss"), lambda out, _target: loss(out), "loss")
    if not isinstance(loss, str):
        raise UsageError(f"loss must be 'auto', 'cross_entropy', 'lm', "
                         f"'package.module:function' or a callable, not {loss!r:.60}.")
    if loss == "auto":
        loss = "lm" if (spec or "").startswith("hf:") else "cross_entropy"
    if loss == "cross_entropy":
        return Loss("cross_entropy", _cross_entropy, "CrossEntropyLoss")
    if loss == "lm":
        if not (spec or "").startswith("hf:"):
            raise UsageError("--loss lm is the language-model loss a transformers model "
                             "computes from its labels: it needs an hf: model. Use "
                             "--loss cross_entropy for a classifier, or give a function.")
        return Loss("lm", None, "ForCausalLMLoss")
    if ":" in loss:
        fn = _import_callable(loss)
        return Loss(loss, lambda out, _target: fn(out), "loss")
    raise UsageError(f"Unknown loss '{loss}': use auto, cross_entropy, lm, or "
                     "package.module:function (a function of the model's output returning a "
                     "scalar tensor).")


def _import_callable(text: str) -> Callable:
    module_name, _, attr = text.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"Cannot load the loss '{text}': {e}. Give it as "
                         "package.module:function, importable from here.") from None
    if not callable(fn):
        raise UsageError(f"The loss '{text}' is not a function.")
    return fn


def parse_optimizer(optimizer: Optional[str], implementation: Optional[str],
                    device: str) -> Optional[OptimizerSpec]:
    if optimizer is None:
        if implementation not in (None, "default"):
            raise UsageError(f"--{implementation} chooses the optimizer's kernels: give "
                             "--optimizer sgd, adam or adamw with it.")
        return None
    name = str(optimizer).lower()
    if name not in OPTIMIZERS:
        raise UsageError(f"Unknown optimizer '{optimizer}': use one of "
                         f"{', '.join(OPTIMIZERS)}.")
    implementation = implementation or "default"
    if implementation not in IMPLEMENTATIONS:
        raise UsageError(f"Unknown optimizer implementation '{implementation}': use one of "
                         f"{', '.join(IMPLEMENTATIONS)}.")
    if implementation == "default":  # torch.optim's own choice on the target's tensors
        implementation = "for-loop" if device == "cpu" else "foreach"
    return OptimizerSpec(name, implementation)


# ---- the loss -----------------------------------------------------------------------------
def logits_of(output) -> Optional[torch.Tensor]:
    """The model's logits: the output tensor, or a transformers output's ``logits``."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


def target_for(loss: Loss, output) -> Optional[torch.Tensor]:
    """A fake target of the shape the loss needs: class indices for cross-entropy (all
    zeros, a valid class), None for a model that computes its own loss."""
    if loss.name != "cross_entropy":
        return None
    logits = logits_of(output)
    if logits is None or not logits.is_floating_point() or logits.dim() < 2:
        raise FxroofError(_not_logits(output))
    shape = (logits.shape[0],) + tuple(logits.shape[2:])  # (N, C, d1...) -> (N, d1...)
    return torch.zeros(shape, dtype=torch.long, device=logits.device)


def _cross_entropy(output, target) -> torch.Tensor:
    return F.cross_entropy(logits_of(output), target)


def _not_logits(output) -> str:
    shapes = [tuple(t.shape) for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]
    return (f"--loss cross_entropy needs the model's output to be class logits of shape "
            f"(batch, classes, ...), and this model returns {shapes or 'no tensor'}. Give "
            "the loss as a function of the output (API loss=fn, CLI --loss "
            "package.module:function), or analyse without --loss.")


def scalar_loss(loss: Loss, output, target) -> torch.Tensor:
    value = getattr(output, "loss", None) if loss.fn is None else loss.fn(output, target)
    if not isinstance(value, torch.Tensor) or value.numel() != 1 \
            or not value.is_floating_point():
        got = "no loss" if value is None else (
            f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
            else type(value).__name__)
        raise FxroofError(f"The loss '{loss.name}' gave {got}, not a floating scalar: a "
                          "training step differentiates one number. Reduce it (e.g. .mean()) "
                          "or choose another --loss.")
    return value


# ---- the whole step -----------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingStep:
    """What the recorded step runs around the model: on which target, under which autocast,
    with which loss and optimizer."""

    target: Target
    loss: Optional[Loss] = None
    optimizer: Optional[OptimizerSpec] = None
    amp: Optional[torch.dtype] = None

    @classmethod
    def of(cls, loss, optimizer, optimizer_impl, amp, spec, target: Target) -> "TrainingStep":
        return cls(target, parse_loss(loss, spec),
                   parse_optimizer(optimizer, optimizer_impl, target.device),
                   check_amp(target, amp))

    @property
    def needs_backward(self) -> bool:
        return self.loss is not None or self.optimizer is not None

    def model_kwargs(self, kwargs: Optional[dict]) -> Optional[dict]:
        """A transformers model computes its LM loss when given labels: the token ids."""
        if self.loss is None or self.loss.name != "lm":
            return kwargs
        kwargs = dict(kwargs or {})
        if "input_ids" not in kwargs:
            raise UsageError("--loss lm needs token ids (input_ids) to use as labels; this "
                             "model takes none. Use --loss cross_entropy or a function.")
        kwargs.setdefault("labels", kwargs["input_ids"])
        return kwargs

    def describe(self) -> tuple:
        """(amp, loss, optimizer) as ModelInfo records them."""
        amp = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(self.amp)
        optimizer = (f"{self.optimizer.name} ({self.optimizer.implementation})"
                     if self.optimizer else None)
        return amp, self.loss.name if self.loss else None, optimizer

    @contextlib.contextmanager
    def dispatch(self):
        """The target's dispatch choices, and the kernels' own shape functions where torch's
        refuse what they run (target_dispatch.kernel_shapes), active while the step is
        recorded."""
        with kernel_shapes(), (TargetDispatch(self.target) if self.target.is_cuda
                               else contextlib.nullcontext()):
            yield

    def autocast(self):
        """Autocast around forward and loss, as mixed-precision training runs it."""
        if self.amp is None:
            return contextlib.nullcontext()
        if self.target.is_cuda:
            return cuda_autocast(self.amp)
        return cpu_autocast(self.amp)

    def loss_of(self, output, recorder, scope) -> Optional[torch.Tensor]:
        """The scalar loss of the output (recorded as the layer ``loss``), or None."""
        if self.loss is None:
            return None
        if self.loss.fn is None:  # the model computed it from its labels
            return scalar_loss(self.loss, output, None)
        recorder.paused = True  # the target is an input of the step, not an op in it
        target = target_for(self.loss, output)
        recorder.paused = False
        if target is not None:
            recorder.placeholder(target, "target", InputKind("target", "loss"))
        with scope.region("loss", self.loss.layer_type):
            try:
                return scalar_loss(self.loss, output, target)
            except FxroofError:
                raise
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # the user's function: name it, not the model
                raise FxroofError(
                    f"The loss '{self.loss.name}' failed on the model's output: "
                    f"{type(e).__name__}: "
                    f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                    ". A loss function takes the model's output and returns a scalar "
                    "tensor; fix it, or choose --loss cross_entropy.") from None
