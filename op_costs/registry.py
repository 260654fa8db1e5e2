"""The cost-rule registry: ATen overload packet -> small pure function of tensor metadata.

A rule is called as ``rule(*args, out=out, **kwargs)`` with the op's own arguments, in which
every tensor has been replaced by a :class:`TensorMeta` (shape, stride, dtype) and ``out`` is the
op's output in the same form (a TensorMeta, or a tuple of them for multi-output ops). It returns a
:class:`Cost`. Leaving ``bytes_read``/``bytes_written`` as ``None`` selects the standard traffic
model (see :func:`standard_bytes`); rules override it only where the op touches a different
amount of memory than its operands' sizes (gathers, scatters, copies, backward ops that ignore an
operand).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Optional

import torch
from torch.utils import _pytree as pytree

DEFAULT_RULE = "default"

# Which engine an op runs on; the roofline picks the matching peak (matrix vs vector).
MATRIX, VECTOR, MEMORY, VIEW = "matrix", "vector", "memory", "view"


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """What a cost rule may know about a tensor: no data, only its geometry and dtype.

    (Deliberately not a tuple: rules tell a single output from a tuple of outputs with
    isinstance, and pytree must treat it as a leaf.)
    """

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, t: torch.Tensor) -> "TensorMeta":
        return cls(tuple(t.shape), tuple(t.stride()), t.dtype)

    @classmethod
    def contiguous(cls, shape, dtype: torch.dtype = torch.float32) -> "TensorMeta":
        """Metadata of a dense row-major tensor of this shape."""
        stride, step = [], 1
        for n in reversed(shape):
            stride.insert(0, step)
            step *= n
        return cls(tuple(shape), tuple(stride), dtype)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def distinct_elements(self) -> int:
        """Elements that occupy their own memory: a broadcast (stride-0) dim counts once."""
        if self.numel == 0:
            return 0
        return math.prod(n for n, s in zip(self.shape, self.stride, strict=True) if s != 0)

    @property
    def nbytes(self) -> int:
        """Bytes a kernel must touch to read or write this tensor once."""
        return self.distinct_elements * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        """Whether the tensor is dense and row-major (torch's is_contiguous: a size-1
        dimension's stride is never used)."""
        expected = 1
        for size, stride in reversed(tuple(zip(self.shape, self.stride))):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def layout(self) -> Optional[str]:
        """"contiguous" or "channels_last" for a 4-d tensor laid out so (a size-1
        dimension's stride is never used; one that is both reads as contiguous), else
        None: the layouts a convolution's kernels depend on."""
        if len(self.shape) != 4:
            return None
        for name, order in (("contiguous", (0, 1, 2, 3)), ("channels_last", (0, 2, 3, 1))):
            expected, step = [0] * 4, 1
            for dim in reversed(order):
                expected[dim], step = step, step * self.shape[dim]
            if all(size == 1 or stride == want
                   for size, stride, want in zip(self.shape, self.stride, expected)):
                return name
        return None


@dataclass(frozen=True)
class Cost:
    """Analytical cost of one ATen call. FLOPs count 1 multiply-add as 2 FLOPs.

    ``macs`` counts only the multiply-accumulates of matrix-class work (convolution, matmul,
    attention), the convention behind torchvision's ``_ops`` metadata.
    """

    flops: int = 0
    macs: int = 0
    bytes_read: Optional[int] = None
    bytes_written: Optional[int] = None
    # the kernel this call runs where one rule covers several ("batch stats": a batch norm
    # computing its statistics): the estimate's rule is then "name[variant]", which a time
    # model may price as a class of its own; a tuple of variants names each in turn,
    # "name[a][b]" (a 1x1 convolution that a CPU runs with ATen's own kernel)
    variant: Optional[str | tuple] = None


class Rule(NamedTuple):
    name: str
    fn: Callable[..., Cost]
    op_class: str


class _AnyView:
    """Registry key of the rule every view op falls to (an op whose schema returns an alias of
    its input): no op is named this, so no ATen name can collide with it."""

    def __repr__(self):
        return "<any view op>"


ANY_VIEW = _AnyView()

RULES: dict[Any, Rule] = {}
SEEN_BELOW_AUTOGRAD: set = set()  # composite-only ops the sweep shows reaching the recorder

# Dispatch keys that make an op reach a recorder sitting below autograd. An op whose only
# kernel is CompositeImplicitAutograd (linear, matmul, conv2d, reshape, softmax.int, ...) is
# decomposed before any dispatch mode sees it: a rule for it would never run.
_REACHING_KEYS = ("CPU", "CUDA", "Meta", "CompositeExplicitAutograd",
                  "CompositeExplicitAutogradNonFunctional", "AutogradCPU", "AutogradCUDA")


def _has_kernel(op, key: str) -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)
    except RuntimeError:
        return False


def reaches_dispatch(packet) -> bool:
    """Whether any overload of ``packet`` has a kernel that lets it reach a TorchDispatchMode
    below autograd. (A composite-only op can still be called from below the autograd keys --
    see ``seen_below_autograd`` -- so this is the rule, with proven exceptions.)"""
    for name in packet.overloads():
        op = getattr(packet, name)
        if not _has_kernel(op, "CompositeImplicitAutograd") or any(
                _has_kernel(op, key) for key in _REACHING_KEYS):
            return True
    return False


def aten_op(name: str):
    """``torch.ops.aten.<name>``, or an error naming it: a rule for an op this torch build does
    not have is a typo or a stale rule, never something to skip silently."""
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        raise ValueError(f"aten.{name} does not exist in torch {torch.__version__}: "
                         "fix or remove the rule registered for it")
    return packet


def newer_aten_ops(since: str, *names: str) -> tuple:
    """The packets of ``names``, ops added to ATen after the oldest torch fxroof supports:
    absent from a torch older than ``since`` (their rules then have nothing to price, and
    are left out), an error like ``aten_op``'s from ``since`` on."""
    have = tuple(getattr(torch.ops.aten, name) for name in names
                 if hasattr(torch.ops.aten, name))
    if len(have) < len(names) and _release(torch.__version__) >= _release(since):
        return tuple(aten_op(name) for name in names)  # raises for the missing one
    return have


def _release(version: str) -> tuple[int, ...]:
    """(2, 14) of '2.14.1+cpu'."""
    return tuple(int(part) for part in version.split("+")[0].split(".")[:2])


def register(*packets, op_class: str = VECTOR, name: Optional[str] = None,
             seen_below_autograd: bool = False):
    """Decorator: register ``fn`` as the cost rule of every ATen overload packet given.

    ``seen_below_autograd``: the op is CompositeImplicitAutograd-only, yet the OpInfo sweep
    records it (a backward formula calls it below the autograd keys, where the Python mode
    sees it before its decomposition runs); the rule is then live, not dead.
    """

    def wrap(fn):
        for packet in packets:
            if packet is not ANY_VIEW:
                if not isinstance(packet, torch._ops.OpOverloadPacket):
                    raise TypeError(f"rules are registered per ATen overload packet "
                                    f"(torch.ops.aten.mm), not {packet!r}")
                if not seen_below_autograd and not reaches_dispatch(packet):
                    raise ValueError(f"{packet} is decomposed above autograd "
                                     "(CompositeImplicitAutograd only): its rule would never "
                                     "run; register its decomposition's ops instead")
            if packet in RULES:
                raise ValueError(f"two cost rules for {packet}")
            RULES[packet] = Rule(name or fn.__name__, fn, op_class)
            if seen_below_autograd:
                SEEN_BELOW_AUTOGRAD.add(packet)
        _lookup_cache.clear()  # a rule added after a lookup must be seen by the next one
        return fn

    return wrap


# Rules of ops another library registers (transformers' custom ops), by qualified name
# ("transformers::grouped_mm_fallback"): such an op exists once its library is imported,
# which fxroof never does for the user, so it is found by name when a graph holds it.
NAMED_RULES: dict[str, Rule] = {}


def register_named(*qualified_names: str, op_class: str = VECTOR):
    """Decorator: register ``fn`` as the cost rule of the ops named ``namespace::op``."""

    def wrap(fn):
        for qualified in qualified_names:
            if qualified in NAMED_RULES:
                raise ValueError(f"two cost rules for {qualified}")
            NAMED_RULES[qualified] = Rule(fn.__name__, fn, op_class)
        _lookup_cache.clear()
        return fn

    return wrap


def _inplace_base(packet):
    """``aten.relu_`` -> ``aten.relu``: an in-place op costs what its functional form costs."""
    name = packet.__name__
    if name.endswith("_") and not name.endswith("__"):
        return getattr(torch.ops.aten, name[:-1], None)
    return None


_lookup_cache: dict[Any, Optional[Rule]] = {}


def _tagged_rule(op) -> Optional[Rule]:
    """Ops PyTorch tags as pointwise / reductions / view copies share their family's rule."""
    tags = getattr(op, "tags", ())
    return next((rule for tag, rule in _TAG_RULES if tag in tags), None)


_TAG_RULES: list = []  # (torch.Tag, Rule), in registration order


def register_tag(tag, name: str, op_class: str = VECTOR):
    """Decorator: ``fn`` is the rule of every op carrying ``tag`` (``torch.Tag.pointwise``,
    ``torch.Tag.reduction``, ``torch.Tag.view_copy``) that has no rule of its own."""

    def wrap(fn):
        _TAG_RULES.append((tag, Rule(name, fn, op_class)))
        _lookup_cache.clear()
        return fn

    return wrap


def rule_for(op) -> Optional[Rule]:
    """The rule for an OpOverload: its packet's, else its functional form's, else the view
    rule for view ops, else its tagged family's (pointwise, reduction, view copy), else None."""
    try:
        return _lookup_cache[op]
    except KeyError:
        pass
    packet = getattr(op, "overloadpacket", op)
    rule = RULES.get(packet) or NAMED_RULES.get(getattr(packet, "_qualified_op_name", None))
    if rule is None:
        base = _inplace_base(packet)
        rule = RULES.get(base) if base is not None else None
    if rule is None and getattr(op, "is_view", False):
        rule = RULES.get(ANY_VIEW)
    if rule is None:
        rule = _tagged_rule(op)
    _lookup_cache[op] = rule
    return rule


def override_rule(op, overrides) -> Optional[Rule]:
    r"""A per-analysis rule from ``overrides`` (keyed by OpOverload or overload packet; values
    are rule functions or :class:`Rule`\ s), as FlopCounterMode's ``custom_mapping``."""
    if not overrides:
        return None
    fn = overrides.get(op, overrides.get(getattr(op, "overloadpacket", None)))
    if fn is None or isinstance(fn, Rule):
        return fn
    base = rule_for(op)
    return Rule(f"custom[{getattr(fn, '__name__', 'rule')}]", fn,
                base.op_class if base is not None else VECTOR)


def first_output(out) -> TensorMeta:
    """The primary output of an op: ``out`` itself, or the first of a multi-output op."""
    return out if isinstance(out, TensorMeta) else out[0]


def tensors_in(tree) -> list[TensorMeta]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, TensorMeta)]


def total_bytes(metas: Iterable[Optional[TensorMeta]]) -> int:
    return sum(m.nbytes for m in metas if m is not None)


def standard_bytes(args, kwargs, out) -> tuple[int, int]:
    """The unfused eager traffic model: every tensor operand read once, every output written
    once, each at its distinct size (a broadcast operand is read at its real size)."""
    return total_bytes(tensors_in((args, kwargs))), total_bytes(tensors_in(out))


class Estimate(NamedTuple):
    flops: int
    macs: int
    bytes_read: int
    bytes_written: int
    rule: str
    op_class: str


def estimate(op, args, kwargs, out, overrides=None) -> Estimate:
    """Cost of one call of ``op``; ops with no rule get the bytes-only default (never 0 bytes).
    ``overrides`` maps ops to rules that replace the registry's for this call."""
    # ATen's ``out=`` is the destination buffer: it *is* the op's output, which the rule gets
    # as ``out`` already, so it is neither passed twice nor read as an operand.
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    rule = override_rule(op, overrides) or rule_for(op)
    if rule is None:
        read, written = standard_bytes(args, kwargs, out)
        return Estimate(0, 0, read, written, DEFAULT_RULE, MEMORY)
    if all(m.numel == 0 for m in tensors_in((args, kwargs, out))):
        # every operand empty (a 0 x 0 solve, an empty batch): no work and no traffic, and
        # rules need not guard their divisions by an empty dimension
        return Estimate(0, 0, 0, 0, rule.name, rule.op_class)
    cost = rule.fn(*args, out=out, **kwargs)
    if not isinstance(cost, Cost):  # a per-analysis rule's mistake, named by the cost pass
        raise TypeError(f"the rule {rule.name} returned {type(cost).__name__}, not op_costs.Cost")
    if cost.bytes_read is None or cost.bytes_written is None:
        read, written = standard_bytes(args, kwargs, out)
        read = read if cost.bytes_read is None else cost.bytes_read
        written = written if cost.bytes_written is None else cost.bytes_written
    else:
        read, written = cost.bytes_read, cost.bytes_written
    variants = cost.variant if isinstance(cost.variant, tuple) else (cost.variant,)
    name = rule.name + "".join(f"[{v}]" for v in variants if v)
    return Estimate(int(cost.flops), int(cost.macs), int(read), int(written), name, rule.op_class)
