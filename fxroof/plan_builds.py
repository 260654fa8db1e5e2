"""The attention calls whose cuDNN plan an eager decode loop builds again every step.

PyTorch runs cuDNN's attention (on Hopper and Blackwell, fxroof.target.prefers_cudnn) from a
plan cache keyed on the call's exact sizes and strides -- batch, heads, query and key
lengths, head dims, dtype, mask, causality (MHAParams in
aten/src/ATen/native/cudnn/MHA.cpp) -- and a miss builds the plan on the host before the
kernel launches. A decode loop over transformers' DynamicCache grows every full-attention
layer's key length by the step's new tokens, so each step misses once per distinct call
(the layers of one step share it: the rest hit). TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1 does not
help there: it applies only to BSHD-contiguous keys and values, and the cache concatenates
BHSD ones. A sliding-window layer whose cache is full keeps its length, and its plan.

The pass marks the first node of each such distinct call in a decode step's forward graph
(``meta[PLAN_BUILD]``); the time model (fxroof.roofline) adds the build to its host cost.
"""
from __future__ import annotations

import torch
from torch import fx

from fxroof.keys import PLAN_BUILD, SHAPES

aten = torch.ops.aten
CUDNN_ATTENTION = (aten._scaled_dot_product_cudnn_attention.default,
                   aten._cudnn_attention_forward.default)


def _plan_key(node: fx.Node) -> tuple:
    """What the plan cache keys a call on: its tensors' geometry and its other arguments."""
    def described(arg):
        if isinstance(arg, fx.Node):
            meta = arg.meta.get(SHAPES)
            return (tuple(meta.shape), tuple(meta.stride), str(meta.dtype)) \
                if hasattr(meta, "shape") else arg.name
        return repr(arg)
    return (str(node.target), tuple(described(a) for a in node.args),
            tuple(sorted((k, described(v)) for k, v in node.kwargs.items())))


def _key_length_grows(node: fx.Node, past: int) -> bool:
    """Whether the call's keys are the whole cache and the step's new tokens (past + the
    query's length): the length the next step adds to."""
    query, key = (a.meta.get(SHAPES) if isinstance(a, fx.Node) else None
                  for a in node.args[:2])
    if not hasattr(query, "shape") or not hasattr(key, "shape"):
        return False
    return key.shape[-2] == past + query.shape[-2]


def mark_plan_builds(graph: fx.Graph, past: int) -> int:
    """Mark the cuDNN attention calls of a decode step (a KV cache of ``past`` tokens) that
    build a plan each step; returns how many."""
    seen = set()
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in CUDNN_ATTENTION \
                or not _key_length_grows(node, past):
            continue
        key = _plan_key(node)
        if key not in seen:
            seen.add(key)
            node.meta[PLAN_BUILD] = True
    return len(seen)
