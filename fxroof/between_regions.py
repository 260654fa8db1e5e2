"""The eager step's ops that run between Dynamo's regions, for the compiled view.

What Dynamo cannot trace runs eagerly at a graph break: an ``nn.LSTM`` (timm's Sequencer),
a function under ``torch._dynamo.disable``, and, where the break is inside a call Dynamo was
inlining, everything that call runs. Those ops are in no region and Inductor never sees
them, yet they run on every step, as the eager program's ATen ops. A module none of whose
code any region traced (``covered``: fxroof.compiled reads the module of every node of
every region, per call) runs eagerly; its nodes of the eager analysis -- costed, on the same
target, with their module paths -- join the view where they run, between the kernels of the
modules before and after them, and are priced as the eager ops they are.
"""
from __future__ import annotations

import torch.fx as fx

from fxroof.cost_pass import is_costed
from fxroof.keys import KERNEL, ORIGIN, ROOF, TIME
from fxroof.region_modules import Coverage


def eager_nodes(eager_graph: fx.Graph, covered: Coverage) -> list[fx.Node]:
    """The costed nodes of one phase of the eager step whose module no region traced."""
    return [n for n in eager_graph.nodes if is_costed(n)
            and not covered.holds(n.meta[ORIGIN].module)]


def interleave(view: fx.Graph, eager_graph: fx.Graph, outside: list[fx.Node]) -> list[fx.Node]:
    """Copy the ``outside`` nodes of one phase of the eager step into that phase of the view,
    each before the first kernel of a module that runs after it in the eager step (the
    kernels of a module no eager node names keep their place); returns the copies."""
    order = {n: i for i, n in enumerate(eager_graph.nodes)}
    first_of_module: dict[str, int] = {}
    for node in eager_graph.nodes:
        if is_costed(node):
            first_of_module.setdefault(node.meta[ORIGIN].module, order[node])
    kernels = [n for n in view.nodes if is_costed(n)]
    pending, copies, reached = sorted(outside, key=order.get), [], -1
    for kernel in kernels:
        reached = max(reached, first_of_module.get(kernel.meta[ORIGIN].module, -1))
        while pending and order[pending[0]] < reached:
            copies.append(_copy_before(kernel, pending.pop(0)))
    end = next(n for n in view.nodes if n.op == "output")
    copies += [_copy_before(end, node) for node in pending]
    return copies


def _copy_before(anchor: fx.Node, node: fx.Node) -> fx.Node:
    """``node`` of the eager step as a node of the view, before ``anchor``: its op, and what
    capture and the analysis passes wrote of it (not its timing or roof); it holds itself."""
    with anchor.graph.inserting_before(anchor):
        copy = anchor.graph.create_node("call_function", node.target, (), {},
                                        name=f"eager_{node.name}")
    copy.meta.update({key: value for key, value in node.meta.items()
                      if key.startswith("fxroof.") and key not in (TIME, ROOF)})
    copy.meta[KERNEL] = [node.name]
    return copy
