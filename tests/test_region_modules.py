"""Where a Dynamo region's modules sit in the model (fxroof.region_modules), on sources
written as Dynamo writes them."""
import torch
from torch import nn

from fxroof.region_modules import (Coverage, call_prefixes, covered, frame_local, in_model,
                                   stack_places, tensor_names)


class Tied(nn.Module):
    """Two blocks, the second's projection tied to the first's."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        self.blocks[1].weight = self.blocks[0].weight
        self.head = nn.Linear(4, 2)


def test_a_frame_local_is_placed_by_the_weights_a_call_is_given():
    model = Tied()
    names = tensor_names(model)
    first, second = model.blocks
    # a block's frame (self: L['m']) and a resume function holding the head on its stack
    sources = ["L['m']._parameters['weight']", "L['m']._parameters['bias']", "L['x']",
               "L['___stack0']._parameters['weight']"]
    head = model.head.weight
    x = torch.randn(2, 4)
    assert call_prefixes(sources, [first.weight, first.bias, x, head], names) == \
        {"m": "blocks.0", "___stack0": "head"}
    # the tied weight has both names: the bias given beside it says which block is called,
    # and the tied weight alone says nothing
    assert call_prefixes(sources, [second.weight, second.bias, x, head], names) == \
        {"m": "blocks.1", "___stack0": "head"}
    assert call_prefixes(sources[:1], [second.weight], names) == {}
    assert call_prefixes(["L['x']"], [x], names) == {}


def test_module_paths_join_the_call_prefix_or_stay_as_the_region_names_them():
    assert frame_local("getattr(L['self'].blocks, '3').fc") == "self"
    assert frame_local("x") is None
    prefixes = {"self": "blocks.3", "root": ""}
    assert in_model("fc", "self", prefixes) == "blocks.3.fc"
    assert in_model("", "self", prefixes) == "blocks.3"
    assert in_model("fc", "root", prefixes) == "fc"
    assert in_model("fc", "other", prefixes) == "fc"
    assert in_model("fc", None, prefixes) == "fc"


def test_coverage_holds_traced_modules_their_frames_and_unplaced_tails():
    traced = {("self", "norm"), ("self", "fc"), ("frozen", "attn.proj")}
    c = covered(traced, {"self": "blocks.1"})
    assert c.paths == {"", "blocks.1", "blocks.1.norm", "blocks.1.fc"}
    assert c.tails == {"attn.proj"}
    assert c.holds("blocks.1.fc") and c.holds("blocks.1") and c.holds("")
    assert c.holds("blocks.7.attn.proj")  # a frame no call placed: any path ending so
    assert not c.holds("blocks.1.rnn") and not c.holds("blocks.0.fc")
    assert not c.holds("attn")
    both = c | Coverage(frozenset({"head"}), frozenset())
    assert both.holds("head") and both.holds("blocks.1.norm")


def test_a_stack_names_modules_from_frame_locals_and_others_as_the_eager_capture_does():
    """transformers 5 wraps a model's forward (self is the wrapper's args[0]) and keeps
    module-like functions in globals (llama's apply_rotary_pos_emb, class Func): Dynamo's
    stack names those from the global, the eager capture as ``<caller>.<Func>.<Func>``."""
    stack = {"a": ("L['args'][0].model", "LlamaModel"),
             "b": ("L['args'][0].model.layers[0].self_attn", "LlamaAttention"),
             "c": ("G['__import_transformers_dot_models'].apply_rotary_pos_emb", "Func")}
    assert stack_places(stack) == [("args[0]", "model"),
                                   ("args[0]", "model.layers.0.self_attn"),
                                   ("args[0]", "model.layers.0.self_attn.<Func>")]
    assert stack_places({"g": ("G['f']", "Func")}) == [(None, "<Func>")]
    c = covered(set(stack_places(stack)), {"args[0]": ""})
    assert c.holds("model.layers.0.self_attn.<Func>.<Func>")
    assert not c.holds("model.layers.1.self_attn.<Func>.<Func>")
