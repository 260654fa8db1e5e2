"""analyze(): model + example inputs -> AnnotatedGraph. Capture, cost pass, memory pass.

Everything runs on fake tensors: parameters, buffers and inputs are replaced by FakeTensors of
the same shape and dtype (or the requested dtype), so no real compute or memory is spent and a
batch of 256 costs what a batch of 1 does. The user's module is not modified: parameters are
swapped in with ``torch.func.functional_call`` and its train/eval flags are restored.
"""
from __future__ import annotations

import copy
import os
import reprlib
import traceback
from typing import Optional, Sequence

import torch
from torch._subclasses import fake_tensor
from torch.utils import _pytree as pytree

from fxroof.capture import GraphRecorder, InputKind, require_dense
from fxroof.cost_pass import annotate_costs, check_rules
from fxroof.device import parse_dtype, random_like
from fxroof.errors import FxroofError, UsageError
from fxroof.graph import AnnotatedGraph, ModelInfo, Source
from fxroof.guard import preserved, refuse_uninitialized, set_mode, silenced
from fxroof.keys import BACKWARD, FORWARD, OPTIMIZER
from fxroof.memory import annotate_saved_traffic, memory_report
from fxroof.models import (build_model, capture_context, default_inputs, ensure_module,
                           reparameterized)
from fxroof.page_faults import annotate_faults
from fxroof.plan_builds import mark_plan_builds
from fxroof.scope import ModuleScope
from fxroof.step import TrainingStep
from fxroof.target import Target
from fxroof.units import dtype_name
from fxroof import chips, interrupts, validate

UNTRACEABLE = (fake_tensor.DataDependentOutputException,
                fake_tensor.DynamicOutputShapeException,
                fake_tensor.UnsupportedOperatorException)


def analyze(model, *inputs, backward: bool = False, mode: Optional[str] = None, dtype=None,
            kwargs: Optional[dict] = None, input_shapes: Optional[Sequence[Sequence[int]]] = None,
            batch: Optional[int] = None, name: Optional[str] = None, device: Optional[str] = None,
            seq_len: Optional[int] = None, hf_config: Optional[dict] = None, past=None,
            rules: Optional[dict] = None, compiled: bool = False, loss=None, optimizer=None,
            optimizer_impl: Optional[str] = None, amp: Optional[str] = None, chip=None,
            memory_format: Optional[str] = None, freeze: bool = False, allocator=None,
            reparameterize: bool = False) -> AnnotatedGraph:
    """Trace one step of ``model`` on fake tensors and annotate every ATen node with its cost.

    model: an nn.Module, a torchvision model name, 'hf:<model_type>' (a transformers model
        from its config, ``hf_config`` overrides, ``seq_len`` tokens -- new ones after a KV
        cache of ``past`` for a decode step), or 'package.module:callable'.
    inputs: example inputs (used for their shapes and dtypes only, batch first), or
        ``input_shapes`` (float inputs), or neither: a named model's native ``batch`` rows.
    backward: also record autograd's backward (a gradient flows from every differentiable
        output, as from a loss; no optimizer step).
    mode: "train" or "eval" (default: train with backward, eval without); dtype: of the
        parameters and floating inputs (e.g. torch.bfloat16).
    rules: cost rules in place of the registry's, keyed by ATen op or packet (FlopCounterMode's
        ``custom_mapping``), each called as op_costs' rules are, returning an op_costs.Cost.
    compiled: the compiled view, Inductor's kernels as nodes; freeze: with its freezing.
    device: 'cpu' or 'cuda' or a torch.device (recorded without a GPU: fxroof.target); ``chip``
        (a Chip or id) gives its compute capability (a GPU chip implies 'cuda'); ``allocator``,
        a CPU's host allocator, whose page faults are priced: 'glibc' (default) or 'caching'.
    loss: 'auto', 'cross_entropy', 'lm', 'package.module:function' or a callable of the
        output (fxroof.step); optimizer: 'sgd', 'adam' or 'adamw', a third phase
        ('optimizer_impl': 'for-loop', 'foreach' or 'fused'). Both imply backward.
    amp: 'fp16' or 'bf16' autocast (parameters stay fp32); memory_format: 'channels_last'.
    reparameterize: the model as deployed for inference, its fusable submodules fused
        (RepVGG's branches, conv + batch norm: fxroof.models.reparameterized); eval only.
    """
    device = _check_arguments(device, kwargs, seq_len, rules, past)
    spec = model if isinstance(model, str) else None
    target = Target.of(device, _chip(chip), allocator)
    training = TrainingStep.of(loss, optimizer, optimizer_impl, amp, spec, target)
    backward = backward or training.needs_backward
    mode = _checked_mode(mode, backward, compiled, freeze, reparameterize)
    module, fused_count = _module(model, spec, hf_config, reparameterize)
    dtype = parse_dtype(dtype)
    inputs, kwargs = _example_inputs(spec, module, inputs, kwargs, input_shapes, batch,
                                     seq_len, dtype, past)
    kwargs = training.model_kwargs(kwargs)
    _check_model(module, inputs, kwargs)
    fakes = _Fakes(dtype, "cpu", memory_format)
    params, buffers, fake_inputs = fakes.state_and_inputs(module, inputs, kwargs, backward)
    scope = ModuleScope(module)
    recorder = _recorder(scope, params, buffers, fake_inputs)
    # the user's module stays exactly as it was; a named model takes its real-data path
    with preserved(module), silenced(), capture_context(spec, kwargs):
        set_mode(module, mode == "train")
        capture = _recorded_step(module, params, buffers, fake_inputs, recorder, scope,
                                 fakes.mode, backward, training)
    _annotate(capture, rules, target, past)
    g = AnnotatedGraph(capture, _model_info(name or spec or type(module).__name__, fake_inputs,
                                            params, dtype, mode, backward, training, fused_count),
                       memory_report(capture),
                       _source(module, spec, fake_inputs, hf_config, reparameterize))
    return _compiled(g, module, spec, fake_inputs, mode, dtype, freeze,
                     memory_format, target, _chip(chip)) if compiled else g


def _module(model, spec: Optional[str], hf_config, reparameterize: bool):
    """The module to analyse and, reparameterized, how many of its submodules were fused
    (None where it was not asked)."""
    module = build_model(spec, hf_config=hf_config) if spec is not None else ensure_module(model)
    return reparameterized(module) if reparameterize else (module, None)


def _checked_mode(mode: Optional[str], backward: bool, compiled: bool, freeze: bool,
                  reparameterize: bool = False) -> str:
    """The step's mode, once freezing and reparameterizing (which need an inference step)
    are known to fit it."""
    for flag, value in (("backward", backward), ("compiled", compiled), ("freeze", freeze),
                        ("reparameterize", reparameterize)):
        if not isinstance(value, bool):  # "no" and "False" are true values in Python
            raise UsageError(f"{flag} is True or False, not {value!r:.40}.")
    mode = _mode(mode, backward)
    if freeze and not compiled:
        raise UsageError("Freezing applies to the compiled view: pass compiled=True "
                         "(--compiled) with freeze=True (--freeze).")
    if freeze and (backward or mode == "train"):
        raise UsageError("Freezing compiles an inference model: its weights become constants, "
                         "so there is no backward and batch norms use their running "
                         "statistics. Analyse the frozen view in eval mode without backward, "
                         "or the training step without freezing.")
    if reparameterize and (backward or mode == "train"):
        raise UsageError("Reparameterizing fuses a model for inference: its parallel branches "
                         "and batch norms become one convolution, which trains differently. "
                         "Analyse the fused model in eval mode without backward, or the "
                         "training step without reparameterizing.")
    return mode


def _annotate(capture, rules, target: Target, past: Optional[int] = None) -> None:
    """The passes that need no device: costs per node, then the step's page faults and its
    saved activations' traffic, and in a GPU's decode step the attention calls that build a
    cuDNN plan each step."""
    for graph in capture.graphs():
        annotate_costs(graph, rules)
    annotate_faults(capture, target)
    annotate_saved_traffic(capture)
    if past is not None and target.is_cuda:
        mark_plan_builds(capture.forward, past)


def _source(module, spec, fake_inputs, hf_config, reparameterize: bool) -> Source:
    leaves, input_spec = pytree.tree_flatten(fake_inputs)
    return Source(module, spec, input_spec,
                  [(isinstance(x, torch.Tensor), None if isinstance(x, torch.Tensor) else x)
                   for x in leaves], hf_config, reparameterize)


def _compiled(eager, module, spec, fake_inputs, mode, dtype, freeze: bool,
              memory_format: Optional[str] = None, target: Optional[Target] = None,
              chip=None) -> AnnotatedGraph:
    """The compiled view of an analysis, lowered from a copy of the model with real weights
    (Dynamo runs each region once to find it; Inductor's kernels are scheduled, not run),
    its inputs laid out as the analysed ones (Inductor lays its kernels out from its inputs'
    strides: a channels-last map is pooled along its channels, an NCHW one along its rows)
    and its weights channels-last where the analysis asked for that memory format. For a
    CUDA target the regions are found on the CPU without computing them and lowered for the
    chip (fxroof.gpu_lowering), under the target's autocast where ``amp`` asks for one."""
    step = [f"--{flag} ({value})" for flag, value in (("loss", eager.model.loss),
            ("optimizer", eager.model.optimizer)) if value]
    if step:
        raise UsageError(f"The compiled view lowers the model's own step, and {', '.join(step)} "
                         "adds what Inductor is not given here (a loss, an optimizer). "
                         "Analyse the compiled view without them, or the whole training step "
                         "without --compiled.")
    gpu = target is not None and target.is_cuda
    if gpu and freeze:
        raise UsageError("--freeze is Inductor's CPU inference recipe (weights prepacked for "
                         "oneDNN); the compiled view of a CUDA target lowers without it. Drop "
                         "--freeze, or analyse with device='cpu'.")
    if spec is not None or any(t.is_meta for t in (*module.parameters(), *module.buffers())):
        if spec is None:
            raise FxroofError("The model's weights are on the meta device, and the compiled "
                              "view needs real ones: torch.compile runs the model once to "
                              "find its graphs. Build the model on the CPU, or name it.")
        module = eager.source.rebuilt()  # random weights
    elif dtype is not None or validate.memory_format(memory_format):
        module = copy.deepcopy(module)  # the user's module keeps its dtype and layout
    if dtype is not None:
        module = module.to(dtype)
    if validate.memory_format(memory_format):
        module = module.to(memory_format=torch.channels_last)
    args, kwargs = pytree.tree_map_only(torch.Tensor, _real_like, fake_inputs)
    # deferred: the compiled view imports Inductor, about 2 s of every command's start
    from fxroof.compiled import Lowering, compiled_view
    lowering = Lowering.of(target, chip, eager.model.amp)
    with preserved(module), silenced():
        set_mode(module, mode == "train")
        return compiled_view(eager, module, args, kwargs, freeze, lowering)


def _real_like(t: torch.Tensor) -> torch.Tensor:
    """A real CPU tensor of a fake one's shape, dtype and strides, holding random_like's
    values."""
    real = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
    return real.copy_(random_like(t.shape, t.dtype, "cpu"))


class _Fakes:
    """Fake tensors like the user's: same shape and strides (or channels-last ones), on the
    capture device, floating ones in the requested dtype."""

    def __init__(self, dtype: Optional[torch.dtype], device: str,
                 memory_format: Optional[str] = None):
        self.dtype = dtype
        self.device = device
        self.memory_format = torch.channels_last if validate.memory_format(memory_format) \
            else None
        self.mode = fake_tensor.FakeTensorMode(allow_non_fake_inputs=True)

    def state_and_inputs(self, module, inputs, kwargs, backward: bool) -> tuple:
        """Fake parameters (requiring grad where the module's do, for a backward), buffers
        and inputs; an input the user marked requires_grad is differentiated, as autograd
        would."""
        params = {n: self.like(p, p.requires_grad and backward)
                  for n, p in module.named_parameters()}
        buffers = {n: self.like(b) for n, b in module.named_buffers()}
        fake_inputs = pytree.tree_map_only(
            torch.Tensor, lambda t: self.like(t, t.requires_grad and backward),
            (tuple(inputs), kwargs or {}))
        self._check_layout_applies(module, params, buffers, fake_inputs)
        return params, buffers, fake_inputs

    def _check_layout_applies(self, module, params, buffers, fake_inputs) -> None:
        """Channels-last lays out 4-D tensors only: asked for where the step is given none,
        it would change nothing, and the analysis would pass for a channels-last one."""
        if self.memory_format is None:
            return
        tensors = [*params.values(), *buffers.values(),
                   *(t for t in pytree.tree_leaves(fake_inputs) if isinstance(t, torch.Tensor))]
        if not any(t.dim() == 4 for t in tensors):
            raise UsageError(
                f"memory_format='channels_last' lays out 4-D tensors (N, C, H, W), and "
                f"{type(module).__name__} has none among its parameters, buffers and "
                f"{_describe_inputs(fake_inputs)}: the analysis would be the contiguous one "
                "under another name. Drop --memory-format, or give the model 4-D inputs.")

    def like(self, t: torch.Tensor, requires_grad: bool = False) -> torch.Tensor:
        target = self.dtype if (self.dtype is not None and t.is_floating_point()) else t.dtype
        with self.mode:
            if self.memory_format is not None and t.dim() == 4:
                fake = torch.empty(t.shape, dtype=target, device=self.device,
                                   memory_format=self.memory_format)
            else:
                fake = torch.empty_strided(t.shape, t.stride(), dtype=target,
                                           device=self.device)
        differentiable = fake.is_floating_point() or fake.is_complex()
        return fake.requires_grad_(requires_grad and differentiable)


def _example_inputs(spec, module, inputs, kwargs, input_shapes, batch, seq_len, dtype,
                    past=None):
    """(args, kwargs): the inputs given, meta tensors of ``input_shapes``, or the named
    model's native input at ``batch`` (a decode step's, after ``past`` cached tokens)."""
    if past is not None and (inputs or kwargs or input_shapes is not None):
        raise UsageError("past (--past) builds a named hf: model's decode inputs, its KV cache "
                         "included; with inputs given it would be ignored. Drop one of them.")
    if (inputs or kwargs) and input_shapes is not None:
        raise UsageError("Give the model's inputs or their shapes (input_shapes), not both: "
                         "input_shapes would be ignored.")
    if input_shapes is not None:
        dtype = dtype or torch.float32
        shapes = [validate.shape(s, itemsize=dtype.itemsize) for s in _sequence(input_shapes)]
        inputs = tuple(torch.empty(s, dtype=dtype, device="meta") for s in shapes)
    if not inputs and not kwargs:
        # a 0-row input "works" and means nothing
        batch = validate.positive_int(1 if batch is None else batch, "batch")
        inputs, default_kwargs = default_inputs(spec or "", module, batch, seq_len, past)
        return inputs, {**default_kwargs, **(kwargs or {})}
    _check_batch_agrees(batch, inputs, kwargs)
    return inputs, kwargs


def _check_batch_agrees(batch: Optional[int], inputs, kwargs) -> None:
    """``batch`` sizes the default input; with inputs given, their own leading dimension is
    the batch, and a ``batch`` that says otherwise would be dropped without a word."""
    first = next((t for t in pytree.tree_leaves((inputs, kwargs))
                  if isinstance(t, torch.Tensor) and t.dim()), None)
    if batch is None or first is None or first.shape[0] == batch:
        return
    raise UsageError(f"batch={batch!r} (--batch) sizes a named model's default input, but the "
                     f"inputs given carry their own batch: {_describe_inputs((inputs, kwargs))}, "
                     f"batch {first.shape[0]}. Give the batch once: as the first dimension of "
                     f"the input shapes (e.g. --input-shape {batch},...), or drop the inputs.")


def _sequence(input_shapes) -> list:
    if isinstance(input_shapes, (str, bytes)) or not hasattr(input_shapes, "__iter__") \
            or not input_shapes:
        raise UsageError(f"input_shapes must be a list of shapes, one per input, e.g. "
                         f"[(8, 3, 224, 224)], not {input_shapes!r:.60}.")
    return list(input_shapes)


def _recorder(scope, params, buffers, fake_inputs) -> GraphRecorder:
    """A recorder whose forward graph starts with one placeholder per parameter, buffer and
    tensor input."""
    recorder = GraphRecorder(scope)
    for fqn, p in params.items():
        recorder.placeholder(p, f"p_{fqn}", InputKind("parameter", fqn))
    for fqn, b in buffers.items():
        recorder.placeholder(b, f"b_{fqn}", InputKind("buffer", fqn))
    for i, x in enumerate(pytree.tree_leaves(fake_inputs)):
        if isinstance(x, torch.Tensor):
            recorder.placeholder(x, f"input_{i}", InputKind("input", str(i)))
    return recorder


def _model_info(name, fake_inputs, params, dtype, mode, backward, training,
                fused_count: Optional[int] = None) -> ModelInfo:
    shapes = [{"shape": list(x.shape), "dtype": dtype_name(x.dtype)}
              for x in pytree.tree_leaves(fake_inputs) if isinstance(x, torch.Tensor)]
    return ModelInfo(
        name=name,
        batch=shapes[0]["shape"][0] if shapes and shapes[0]["shape"] else None,
        inputs=shapes,
        dtype=dtype_name(dtype or next((p.dtype for p in params.values()), torch.float32)),
        mode=mode,
        backward=backward,
        parameters=sum(p.numel() for p in params.values()),
        device=training.target.device,
        allocator=training.target.allocator,
        **dict(zip(("amp", "loss", "optimizer"), training.describe())),
        reparameterized=fused_count,
    )


def _recorded_step(*step):
    """_run_step's capture, a Ctrl-C meanwhile ending the analysis once it is recorded: the
    dispatcher calls Python from C++ that cannot pass a KeyboardInterrupt on
    (fxroof.interrupts.deferred)."""
    with interrupts.deferred():
        capture = _run_step(*step)
    interrupts.check()
    return capture


def _run_step(module, params, buffers, inputs, recorder, scope, fake_mode, backward,
              training: TrainingStep):
    # fresh containers around the same tensors: a decode step's KV cache is a container the
    # model updates in place, and the inputs are read again after the step (their shapes,
    # the timing pass's input spec)
    args, kwargs = pytree.tree_unflatten(*pytree.tree_flatten(inputs))
    state = {**params, **buffers}
    try:
        with fake_mode, scope, recorder, training.dispatch():
            with torch.set_grad_enabled(backward), training.autocast():
                out = torch.func.functional_call(module, state, args, kwargs, strict=False)
                loss = training.loss_of(out, recorder, scope)
            outputs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
            outputs += [loss] if loss is not None and all(o is not loss for o in outputs) else []
            if not any(n.op == "call_function" for n in recorder.graphs[FORWARD].nodes):
                raise FxroofError(_nothing_computed(out, args, kwargs))
            if not backward:
                return recorder.finish(outputs, None)
            names, grads = _backward([loss] if loss is not None else outputs, params, inputs,
                                     recorder, seeded=loss is not None)
            if training.optimizer is not None:
                _optimizer_step(training.optimizer, params, names, grads, recorder)
            return recorder.finish(outputs, grads)
    except FxroofError:
        raise
    except UNTRACEABLE as e:
        raise FxroofError(untraceable_message(e, scope)) from None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # SystemExit (a forward calling sys.exit), GeneratorExit, ...
        raise FxroofError(rejected_message(e, scope, args, kwargs)) from None


def _backward(outputs, params, inputs, recorder, seeded: bool) -> tuple[list[str], list]:
    """Record autograd's backward from the differentiable outputs (a loss: its own seed, as
    loss.backward() makes it; else one tangent input per output). Returns the name of what
    each gradient is for (a parameter's name, or input_<i>) and the gradients."""
    recorder.resolve_grad_fns()
    recorder.phase = BACKWARD
    differentiable = [o for o in outputs if o.requires_grad]
    if not differentiable:
        raise FxroofError(_nothing_to_differentiate(params, inputs))
    tangents = None
    if not seeded:
        recorder.paused = True  # the seeds are inputs of the backward graph, not ops in it
        tangents = [torch.empty_like(o) for o in differentiable]
        recorder.paused = False
        for i, t in enumerate(tangents):
            recorder.placeholder(t, f"tangent_{i}", InputKind("tangent", str(i)), BACKWARD)
    wrt = {n: p for n, p in params.items() if p.requires_grad}
    leaves = [x for x in pytree.tree_leaves(inputs)
              if isinstance(x, torch.Tensor) and x.requires_grad]
    grads = torch.autograd.grad(differentiable, [*wrt.values(), *leaves], tangents,
                                allow_unused=True)
    return [*wrt, *(f"input_{i}" for i in range(len(leaves)))], list(grads)


def _optimizer_step(spec, params, names, grads, recorder) -> None:
    """Record one steady-state step of the optimizer over the parameters with gradients."""
    recorder.close_backward(grads)
    updated = {}
    for name, grad in zip(names, grads):
        if name in params and grad is not None:
            params[name].grad = grad
            updated[name] = params[name]
    optimizer = spec.build(list(updated.values()))
    recorder.paused = True  # the first step creates the state (momentum, exp_avg...)
    optimizer.step()
    recorder.paused = False
    for name, p in updated.items():
        tensors = [p, p.grad, *(t for t in optimizer.state[p].values()
                                if isinstance(t, torch.Tensor))]
        recorder.parameter_of.update({id(t): name for t in tensors})
    recorder.phase, recorder.optimizer_name = OPTIMIZER, spec.class_name
    optimizer.step()


def _mode(mode: Optional[str], backward: bool) -> str:
    mode = mode or ("train" if backward else "eval")
    if mode not in ("train", "eval"):
        raise UsageError(f"mode must be 'train' or 'eval', not '{mode}'.")
    return mode


def _check_model(module, inputs, kwargs) -> None:
    refuse_uninitialized(module)
    for t in _tensors_of(module, inputs, kwargs):
        require_dense(t)


def _tensors_of(module, inputs, kwargs) -> list:
    leaves = pytree.tree_leaves((tuple(inputs), kwargs or {}))
    return ([x for x in leaves if isinstance(x, torch.Tensor)]
            + list(module.parameters()) + list(module.buffers()))


def _chip(chip):
    if chip is None or isinstance(chip, chips.Chip):
        return chip
    return chips.get_chip(chip)


def _check_arguments(device, kwargs, seq_len, rules, past=None) -> Optional[str]:
    """The device's name (a torch.device given is named), once the arguments are checked."""
    if device is not None:
        device = validate.device(device)
    if kwargs is not None and not isinstance(kwargs, dict):
        raise UsageError(f"kwargs must be a dict of keyword inputs, not "
                         f"{type(kwargs).__name__}.")
    if seq_len is not None:
        validate.positive_int(seq_len, "seq_len")
    if past is not None:
        validate.positive_int(past, "past")
    check_rules(rules)
    return device


def _nothing_to_differentiate(params, inputs) -> str:
    if not params:
        why = ("the model has no parameters and no input requires grad. To see the backward "
               "with respect to an input, pass it with requires_grad=True")
    elif not any(p.requires_grad for p in params.values()):
        why = ("its parameters are all frozen (requires_grad=False) and no input requires "
               "grad. Unfreeze the parameters you want gradients for, or pass an input with "
               "requires_grad=True")
    else:
        why = ("its outputs do not depend on any parameter that requires grad (they are "
               "detached or computed from integer tensors). Check the model's forward")
    return (f"backward was requested but no output of the model requires grad: {why}; or "
            "analyse it without --backward.")


def _nothing_computed(out, args, kwargs) -> str:
    """A forward that ran no ATen op (it returned a constant, None or its input): every
    count would be zero and every time the host's alone, which is no analysis of a model."""
    returned = ("one of its inputs unchanged" if isinstance(out, torch.Tensor) else
                f"the {type(out).__name__} {reprlib.repr(out)}")
    return (f"The model ran no tensor operation on {_describe_inputs(args, kwargs)}: its "
            f"forward returned {returned}, so there is nothing to count or time. Check that "
            "forward returns the result of its layers (fxroof costs the ATen operations a "
            "forward runs on its inputs and parameters).")


def _where(scope) -> str:
    info = scope.current
    if info is None:
        return "the model's own forward"
    return f"layer `{info.path or '(root)'}` ({info.cls})"


def _user_frame(e: BaseException) -> Optional[str]:
    """file:line of the innermost frame outside torch and fxroof: the construct to look at."""
    skip = (os.path.dirname(torch.__file__), os.path.dirname(__file__))
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(skip) and "<" not in f.filename]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno} (`{(f.line or '').strip()}`)"


def untraceable_message(e: BaseException, scope) -> str:
    where = _user_frame(e)
    return (
        f"The model cannot be traced: {_where(scope)} runs `{getattr(e, 'func', e)}`, whose "
        "result depends on tensor values (a data-dependent shape or a Python value read from a "
        "tensor, e.g. `.item()`, `.tolist()`, `if tensor:` or `nonzero`)"
        + (f", at {where}" if where else "") + ". fxroof traces on fake tensors that carry "
        "shapes but no data. Rewrite that construct to depend on shapes only; or analyse the "
        "data-independent part on its own (a submodule, or a smaller example that avoids the "
        "branch); or try `--mode eval` if the construct only runs in training; or let Dynamo "
        "split the model at the construct: `torch.compile(model, backend=fxroof.backend())` "
        "annotates every region between graph breaks.")


def _describe_inputs(args, kwargs=None) -> str:
    """'inputs of shape (2, 3)'; a value that is not a tensor is named with its type, since
    passing one by mistake (a path, a list) is a common reason the model refused. Keyword
    tensors (an hf: model's input_ids) are named; other keyword values are options."""
    leaves = [a for a in pytree.tree_leaves(args) if a is not None]
    named = [f"{name} of shape {tuple(v.shape)}" for name, v in (kwargs or {}).items()
             if isinstance(v, torch.Tensor)]
    if not leaves and not named:
        return "no inputs"
    if all(isinstance(a, torch.Tensor) for a in leaves):
        shapes = ["of shape " + ", ".join(str(tuple(a.shape)) for a in leaves)] if leaves else []
        return "inputs " + ", ".join(shapes + named)
    return "inputs (" + ", ".join([
        f"a tensor of shape {tuple(a.shape)}" if isinstance(a, torch.Tensor)
        else f"a {type(a).__name__}: {reprlib.repr(a)}" for a in leaves] + named) + ")"


def rejected_message(e: BaseException, scope, args, kwargs=None) -> str:
    detail = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else ""
    where = _user_frame(e)
    return (
        f"Running the model on {_describe_inputs(args, kwargs)} failed in {_where(scope)}: "
        f"{type(e).__name__}" + (f": {detail}" if detail else "")
        + (f" (at {where})" if where else "") + ". If the input shape does not fit "
        "the model, pass the shape it expects (--input-shape, batch first, e.g. "
        "8,3,224,224); if the model takes several inputs, repeat --input-shape once per "
        "input, in forward's order; integer inputs take a dtype (8,128:int64).")
