"""Where the modules of a Dynamo region sit in the model, call by call.

Dynamo names a region's modules from the frame it compiles: ``L['self'].layer1[0].conv1``
from the model's own forward, but ``L['self'].norm`` from a block's forward that a graph
break made a frame of its own, and ``L['___stack0']`` from a resume function that holds the
module on its stack. Such a region is compiled once and called once per layer, each call
given that layer's weights: the parameters and buffers of a call say where each frame local
it names modules from sits in the model (``self`` is ``blocks.3`` for the fourth call).
"""
from __future__ import annotations

import functools
import itertools
import re
from typing import NamedTuple, Optional

import torch
import torch.fx as fx

from fxroof.keys import BACKWARD, FRAME_LOCAL, ORIGIN
from fxroof.scope import unregistered_path


# A frame local and the subscripts that pick a module out of it: ``L['self']``, or
# ``L['args'][0]`` where the frame is a decorator's wrapper(*args, **kwargs) around a
# forward (transformers 5 wraps its models' forwards so), whose self is its first argument.
_FRAME_LOCAL = r"L\['([^']*)'\]((?:\[[^\]]*\])*)"


def module_path(dynamo_name: str) -> str:
    """Dynamo's source name of a module (``L['self'].layer1[0].conv1``, or
    ``getattr(L['self'].blocks, '3')``) as a module path (``layer1.0.conv1``)."""
    name = dynamo_name
    while (m := re.search(r"getattr\((.*), '([^']+)'\)", name)):
        name = name[:m.start()] + f"{m.group(1)}.{m.group(2)}" + name[m.end():]
    name = re.sub(r"_modules\['([^']+)'\]", r"\1", name)
    name = re.sub(r"^" + _FRAME_LOCAL + r"\.?", "", name)
    return re.sub(r"\[['\"]?([^\]'\"]+)['\"]?\]", r".\1", name).strip(".")


def frame_local(source: str) -> Optional[str]:
    """The frame local a Dynamo source name starts from, with the subscripts that pick a
    module out of it (``L['self'].blocks[0]``: self; ``L['args'][0].model``: args[0])."""
    found = re.search(_FRAME_LOCAL, source)
    return found.group(1) + found.group(2) if found else None


def tensor_names(module: torch.nn.Module) -> dict[int, list[str]]:
    """id of each parameter and buffer -> its names in the model (tied weights have several)."""
    names: dict[int, list[str]] = {}
    for name, tensor in itertools.chain(module.named_parameters(remove_duplicate=False),
                                        module.named_buffers(remove_duplicate=False)):
        names.setdefault(id(tensor), []).append(name)
    return names


def _attribute_path(source: str) -> str:
    """``L['s']._modules['norm']._parameters['weight']`` -> ``norm.weight``."""
    return ".".join(part for part in module_path(source).split(".")
                    if part not in ("_parameters", "_buffers"))


@functools.lru_cache(maxsize=4096)
def _local_and_path(source: str) -> tuple[Optional[str], str]:
    """(frame local, attribute path) of a tensor's source, parsed once: a backend given the
    model reads them on every call of every region."""
    return frame_local(source), _attribute_path(source)


def placeholder_sources(gm: fx.GraphModule) -> list[Optional[str]]:
    """The source each input of a region's graph comes from (``L['s']._modules['fc']
    ._parameters['weight']``), None where Dynamo does not say; read when the region is
    compiled (Dynamo drops it from the graph once its backend has returned)."""
    return [getattr(getattr(n.meta.get("grapharg"), "source", None), "name", None)
            for n in gm.graph.nodes if n.op == "placeholder"]


def call_prefixes(sources: list[Optional[str]], inputs,
                  names: dict[int, list[str]]) -> dict[str, str]:
    """{frame local: its module path in the model} for one call of a region, read off the
    parameters and buffers the call is given (Dynamo lifts them to graph inputs, each
    from its source): the path every one of the local's tensors agrees on (a tied weight
    has two names, its neighbours one); a local none of them names, or that they do not
    agree on, is left out."""
    candidates: dict[str, set[str]] = {}
    for source, value in zip(sources, inputs):
        if id(value) not in names or not isinstance(source, str):
            continue
        local, relative = _local_and_path(source)
        if local is None:
            continue
        places = {name[:len(name) - len(relative)].rstrip(".") for name in names[id(value)]
                  if name == relative or name.endswith("." + relative)}
        candidates[local] = candidates[local] & places if local in candidates else places
    return {local: places.pop() for local, places in candidates.items() if len(places) == 1}


def stack_places(stack: Optional[dict]) -> list[tuple[Optional[str], str]]:
    """(frame local, module path) of each module of a node's nn_module_stack, outermost
    first. A module a frame local reaches is named by its source (module_path). One Dynamo
    reached otherwise -- transformers 5 keeps module-like functions in globals, as llama's
    apply_rotary_pos_emb, called from a layer's forward -- is named as the eager capture
    names a module that is not its caller's child (scope.unregistered_path), and
    shares its caller's local."""
    places: list[tuple[Optional[str], str]] = []
    for entry in (stack or {}).values():
        source, cls = entry[0], entry[1]
        local = frame_local(source)
        if local is None:
            caller_local, caller = places[-1] if places else (None, "")
            places.append((caller_local, unregistered_path(caller, class_name(cls))))
        else:
            places.append((local, module_path(source)))
    return places


def class_name(cls) -> str:
    """The name of a module class as an nn_module_stack holds it (a class, or its path)."""
    return getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1])


def traced_modules(gm: fx.GraphModule) -> set[tuple[Optional[str], str]]:
    """(frame local, module path) of every module a region's graph traced code of, at any
    depth of its nodes' module stacks (read when the region is compiled, as
    placeholder_sources)."""
    return {place for node in gm.graph.nodes
            for place in stack_places(node.meta.get("nn_module_stack"))}


def _registered(module: str) -> str:
    """A module path up to its first module that is not its caller's child (``a.<Func>``
    for the eager capture's ``a.<Func>.<Func>``): Dynamo names that one, not what it runs."""
    parts = module.split(".")
    cut = next((i for i, part in enumerate(parts) if part.startswith("<")), len(parts) - 1)
    return ".".join(parts[:cut + 1])


class Coverage(NamedTuple):
    """The model's modules that regions run code of: ``paths`` as the model names them,
    ``tails`` the ends of paths a region names from a frame local no call placed (its
    weights not lifted to inputs, as under freezing: ``norm`` for ``blocks.0.norm``)."""
    paths: frozenset
    tails: frozenset

    def holds(self, module: str) -> bool:
        module = _registered(module)
        if module in self.paths:
            return True
        parts = module.split(".")
        return any(".".join(parts[i:]) in self.tails for i in range(len(parts)))

    def __or__(self, other: "Coverage") -> "Coverage":
        return Coverage(self.paths | other.paths, self.tails | other.tails)


def covered(traced: set[tuple[Optional[str], str]], prefixes: dict[str, str]) -> Coverage:
    """The modules one call of a region runs code of: those it traced (traced_modules'
    places), those whose frames it was compiled from (a block's own forward), and the
    model's own forward -- the root counts as covered by any region, so an op of the root's
    own forward that runs between regions is left to the view's "outside:" line, never
    counted twice."""
    paths, tails = {"", *prefixes.values()}, set()
    for local, relative in traced:
        if local is None or local in prefixes:
            paths.add(in_model(relative, local, prefixes))
        elif relative:
            tails.add(relative)
    return Coverage(frozenset(paths), frozenset(tails))


# The frame's own module: a node no module of the frame holds is code of the forward the
# frame was compiled from (a block's residual add after a graph break), and belongs to the
# module that forward's ``self`` is where the call placed it -- as the eager capture places
# an op of a container's own forward at the container.
FRAME_SELF = "self"
WRAPPED_SELF = "args[0]"  # the self of a forward a decorator wraps in wrapper(*args, ...)


def note_frame_locals(forward: fx.Graph, backward: Optional[fx.Graph]) -> None:
    """Write to ``node.meta[FRAME_LOCAL]`` the frame local each node's module is named from:
    a forward node's innermost module's (the frame's ``self`` where it has none), a
    backward node's the forward node's it differentiates (None where neither says)."""
    by_name = {}
    for node in forward.nodes:
        stack = node.meta.get("nn_module_stack")
        node.meta[FRAME_LOCAL] = stack_places(stack)[-1][0] if stack else FRAME_SELF
        by_name[node.name] = node
    for node in backward.nodes if backward is not None else ():
        origin = node.meta.get(ORIGIN)
        differentiated = by_name.get(origin.forward_node) if origin and origin.phase == BACKWARD \
            else None
        node.meta[FRAME_LOCAL] = differentiated.meta[FRAME_LOCAL] if differentiated else None


def in_model(module: str, local: Optional[str], prefixes: dict[str, str]) -> str:
    """A region node's module path as the model names it, for the call ``prefixes`` read;
    the region's own where the call does not say."""
    prefix = prefixes.get(local) if local is not None else None
    if prefix is None and local == FRAME_SELF:
        prefix = prefixes.get(WRAPPED_SELF)
    if not prefix:
        return module
    return f"{prefix}.{module}" if module else prefix
