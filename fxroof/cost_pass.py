"""The cost pass: one typed record per ATen node, ``node.meta[COST]``, from op_costs' rules.

It does not re-execute anything: capture already recorded every node's output geometry
(``meta[SHAPES]``), which is all a cost rule may look at.
"""
from __future__ import annotations

import torch
import torch.fx as fx

import op_costs
from fxroof import interrupts
from fxroof.errors import FxroofError
from fxroof.kernel import Kernel
from fxroof.keys import COST, SHAPES  # noqa: F401 (COST re-exported)
NodeCost = op_costs.Estimate  # flops, macs, bytes_read, bytes_written, rule, op_class


def is_costed(node: fx.Node) -> bool:
    """An ATen op node, or a kernel node of a compiled view: a node with a cost."""
    return node.op == "call_function" and isinstance(node.target, (torch._ops.OpOverload,
                                                                   Kernel))


def _shapes(arg):
    return arg.meta.get(SHAPES) if isinstance(arg, fx.Node) else arg


def annotate_costs(graph: fx.Graph, rules=None) -> None:
    """``rules``: per-analysis overrides, {ATen op or overload packet: rule function}."""
    for node in graph.nodes:
        interrupts.check()  # a Ctrl-C that tracing swallowed stops the analysis here
        if is_costed(node):
            args, kwargs = fx.node.map_arg((node.args, node.kwargs), _shapes)
            node.meta[COST] = _estimate(node, args, kwargs, rules)


def _estimate(node: fx.Node, args, kwargs, rules) -> NodeCost:
    """The node's cost; a rule the user gave that raises, or returns something other than a
    Cost, is named with the node it failed on (the registry's own rules are tested: their
    failure is fxroof's bug, and shows as one)."""
    try:
        return op_costs.estimate(node.target, args, kwargs, node.meta[SHAPES], rules)
    except Exception as e:
        if op_costs.override_rule(node.target, rules) is None:
            raise
        raise FxroofError(
            f"The cost rule given for {node.target} (rules=) failed on node {node.name}: "
            f"{type(e).__name__}: {str(e).rstrip('.')}. A rule takes the op's arguments "
            "(op_costs.TensorMeta where the op takes tensors) and out=, and returns "
            "op_costs.Cost(flops=..., macs=..., bytes_read=..., bytes_written=...).") from None


def check_rules(rules) -> None:
    if rules is None:
        return
    if not isinstance(rules, dict):
        raise FxroofError(f"rules must be a dict {{ATen op: rule function}}, not "
                          f"{type(rules).__name__}.")
    for op, fn in rules.items():
        if not isinstance(op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            raise FxroofError(
                f"rules: {op!r} is not an ATen op. Key each rule by an op such as "
                "torch.ops.aten.mm (every overload) or torch.ops.aten.mm.default.")
        if not callable(fn):
            raise FxroofError(f"rules: the rule for {op} is {fn!r}, not a function returning "
                              "op_costs.Cost.")
