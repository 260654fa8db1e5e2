"""analyze() must leave the user's module exactly as it found it.

``torch.func.functional_call`` swaps fake parameters in and back out, but its bookkeeping can
restore the wrong object (a submodule registered under two names, ``self.b = self.a``, came
back holding FakeTensors: the user's weights were gone), and a model's forward may itself
change module state (lazy modules materialise, hooks remove themselves, flags flip).
:func:`preserved` snapshots every submodule's attribute dicts -- parameters, buffers,
submodules, hooks, flags, its class -- by reference (no tensor is copied, so a 70B model costs
what a small one does) and puts them back, whatever happened in between.
"""
from __future__ import annotations

import contextlib
import logging

import torch
from torch import nn

from fxroof.errors import FxroofError


def refuse_uninitialized(module: nn.Module) -> None:
    """Lazy modules materialise their parameters in place on the first forward: on fake
    tensors that would turn the user's own Parameter objects into fakes."""
    lazy = [name for name, p in module.named_parameters(remove_duplicate=False)
            if isinstance(p, nn.parameter.UninitializedParameter)]
    lazy += [name for name, b in module.named_buffers(remove_duplicate=False)
             if isinstance(b, nn.parameter.UninitializedBuffer)]
    if lazy:
        raise FxroofError(
            f"The model has uninitialised lazy parameters ({', '.join(lazy[:3])}"
            f"{', ...' if len(lazy) > 3 else ''}): their shapes are only known after one real "
            "forward. Run the model once on a real example input (or build it with the "
            "non-lazy layers), then analyse it.")


class _Snapshot:
    """One module's state, held by reference."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.cls = module.__class__
        self.attrs = dict(module.__dict__)
        # dict-valued attributes (parameters, buffers, submodules, hook tables) are restored
        # in place, so references the user holds to those dicts stay valid
        self.dicts = {k: dict(v) for k, v in self.attrs.items() if isinstance(v, dict)}
        self.requires_grad = [(p, p.requires_grad)
                              for p in module._parameters.values() if p is not None]

    def restore(self) -> None:
        m = self.module
        if m.__class__ is not self.cls:
            m.__class__ = self.cls
        for key in [k for k in m.__dict__ if k not in self.attrs]:
            del m.__dict__[key]
        for key, value in self.attrs.items():
            if m.__dict__.get(key) is not value:
                m.__dict__[key] = value
            if key in self.dicts and not _same_items(value, self.dicts[key]):
                value.clear()
                value.update(self.dicts[key])
        for p, flag in self.requires_grad:
            if p.requires_grad != flag:
                p.requires_grad_(flag)


def _same_items(current: dict, saved: dict) -> bool:
    """Identity, not ==: tensors compare elementwise."""
    return current.keys() == saved.keys() and all(current[k] is v for k, v in saved.items())


@contextlib.contextmanager
def preserved(module: nn.Module):
    """Restore every submodule of ``module`` (and the module) on exit, even on error."""
    snapshots = [_Snapshot(m) for m in module.modules()]
    try:
        yield module
    finally:
        with torch.no_grad():
            for snapshot in snapshots:
                snapshot.restore()


def set_mode(module: nn.Module, train: bool) -> None:
    """``module.train(train)``, or one paragraph where the module refuses a mode change:
    torch.export's ``ExportedProgram.module()`` raises NotImplementedError, its graph fixed
    in the mode it was exported in (and its layers flattened into one graph, so a capture
    of it would lose every module path and layer type as well)."""
    try:
        module.train(train)
    except NotImplementedError as e:
        raise FxroofError(
            f"The model ({type(module).__name__}) refuses train() and eval() "
            f"({type(e).__name__}), as torch.export's ExportedProgram.module() does: its "
            "graph keeps the mode it was exported in. fxroof sets the mode it analyses (train "
            "for a training step, eval otherwise): pass the nn.Module the program was exported "
            "from.") from None


# Loggers that print a traceback for a failure fxroof expects and reports in one paragraph
# (a meta kernel refusing an input shape, say): silenced while the step is captured.
NOISY_LOGGERS = ("torch._subclasses.fake_tensor",)


@contextlib.contextmanager
def silenced(*names: str):
    """Disable these loggers for the duration, then restore each as it was."""
    loggers = [logging.getLogger(name) for name in names or NOISY_LOGGERS]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, was in zip(loggers, before, strict=True):
            logger.disabled = was
