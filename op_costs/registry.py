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


class Rule(NamedTuple):
    name: str
    fn: Callable[..., Cost]
    op_class: str


RULES: dict[Any, Rule] = {}


def register(*packets, op_class: str = VECTOR, name: Optional[str] = None):
    """Decorator: register ``fn`` as the cost rule of every ATen overload packet given."""

    def wrap(fn):
        for packet in packets:
            if packet in RULES:
                raise ValueError(f"two cost rules for {packet}")
            RULES[packet] = Rule(name or fn.__name__, fn, op_class)
        return fn

    return wrap


def _inplace_base(packet):
    """``aten.relu_`` -> ``aten.relu``: an in-place op costs what its functional form costs."""
    name = packet.__name__
    if name.endswith("_") and not name.endswith("__"):
        return getattr(torch.ops.aten, name[:-1], None)
    return None


_lookup_cache: dict[Any, Optional[Rule]] = {}


def rule_for(op) -> Optional[Rule]:
    """The rule for an OpOverload: its packet's, else its functional form's, else None."""
    try:
        return _lookup_cache[op]
    except KeyError:
        pass
    packet = getattr(op, "overloadpacket", op)
    rule = RULES.get(packet)
    if rule is None:
        base = _inplace_base(packet)
        rule = RULES.get(base) if base is not None else None
    if rule is None and getattr(op, "is_view", False):
        rule = RULES.get("view")
    _lookup_cache[op] = rule
    return rule


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


def estimate(op, args, kwargs, out) -> Estimate:
    """Cost of one call of ``op``; ops with no rule get the bytes-only default (never 0 bytes)."""
    rule = rule_for(op)
    if rule is None:
        read, written = standard_bytes(args, kwargs, out)
        return Estimate(0, 0, read, written, DEFAULT_RULE, MEMORY)
    cost = rule.fn(*args, out=out, **kwargs)
    if cost.bytes_read is None or cost.bytes_written is None:
        read, written = standard_bytes(args, kwargs, out)
        read = read if cost.bytes_read is None else cost.bytes_read
        written = written if cost.bytes_written is None else cost.bytes_written
    else:
        read, written = cost.bytes_read, cost.bytes_written
    return Estimate(int(cost.flops), int(cost.macs), int(read), int(written), rule.name, rule.op_class)
