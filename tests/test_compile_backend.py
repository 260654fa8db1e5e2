"""fxroof.backend inside torch.compile: the ATen graphs AOTAutograd makes get the same costs as
fxroof's own capture, graph breaks give one region each, and compilation passes through."""
import pytest
import torch
import torchvision
from torch import nn

import fxroof
from fxroof import compile_backend
from fxroof.capture import BACKWARD, FORWARD, ORIGIN
from fxroof.compile_backend import RegionRun, one_step
from fxroof.cost_pass import COST
from fxroof.region_modules import module_path
from tests.fixtures.user_models import HalvedStack


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Broken(nn.Module):
    """A conv block, a graph break, a linear head: two Dynamo regions."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, groups=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = self.bn(self.conv(x)).relu()
        torch._dynamo.graph_break()
        return self.fc(y.mean((2, 3)))


def flops_by_phase(g):
    totals = g.totals()
    return totals[FORWARD]["flops"], totals[BACKWARD]["flops"]


def test_resnet18_costs_match_analyze():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 64, 64)
    collector = fxroof.backend(then=None, name="resnet18")
    torch.compile(torchvision.models.resnet18(), backend=collector)(x).sum().backward()
    compiled = collector.annotated()
    eager = fxroof.analyze(torchvision.models.resnet18(), x, backward=True)

    assert flops_by_phase(compiled) == flops_by_phase(eager)
    assert compiled.coverage()["default_rule_ops"] == {}
    # gradient-accumulation adds (residuals) may land on another layer: compare the convs
    def conv_backward_flops(g):
        return sum(r["flops"] for r in g.records(BACKWARD) if r["op"] == "convolution_backward")
    assert conv_backward_flops(compiled) == conv_backward_flops(eager) > 0
    assert compiled.model.parameters == eager.model.parameters
    # every convolution_backward points at a forward convolution of the same module
    forward = {n.name: n for n in compiled.forward.nodes}
    backs = [n for n in compiled.nodes(BACKWARD) if "convolution_backward" in str(n.target)]
    assert len(backs) == 20
    for node in backs:
        origin = node.meta[ORIGIN]
        assert origin.layer_type == "Conv2d" and origin.module.startswith(("conv1", "layer"))
        assert forward[origin.forward_node].meta[ORIGIN].module == origin.module


def test_graph_break_gives_one_region_each_and_rolls_up():
    seen = []
    collector = fxroof.backend(on_graph=lambda gm, phase, region: seen.append(
        (phase, region, all(COST in n.meta for n in gm.graph.nodes
                            if n.op == "call_function" and n.target.__module__ != "_operator"))),
        then=None)
    x = torch.randn(2, 3, 16, 16)
    torch.compile(Broken(), backend=collector)(x).sum().backward()
    assert [s[:2] for s in seen] == [(FORWARD, 0), (BACKWARD, 0), (FORWARD, 1), (BACKWARD, 1)]
    assert all(s[2] for s in seen)
    assert len(collector.regions) == 2

    rolled = collector.annotated()
    eager = fxroof.analyze(Broken(), x, backward=True)
    assert flops_by_phase(rolled) == flops_by_phase(eager)
    layer = {r["key"]: r["flops"] for r in rolled.breakdown("layer_type")}
    # addmm (2BIO + BO for the bias), then dX and dW (2BIO each) and db (BO)
    # 3 products of 2x8 @ 8x4; the bias add (2*4) and its gradient, a sum of 2 rows into 4
    # outputs (1 add each)
    assert layer["Linear"] == 3 * (2 * 2 * 8 * 4) + 2 * 4 + (2 - 1) * 4
    # colliding names across regions were renamed, and backward nodes follow their forward
    forward = {n.name: n for n in rolled.forward.nodes}
    assert len(forward) == len(rolled.forward.nodes)  # both regions have a primals_1
    for node in rolled.nodes(BACKWARD):
        origin = node.meta[ORIGIN]
        if origin.forward_node is not None:
            assert forward[origin.forward_node].meta[ORIGIN].module == origin.module
    fc_back = [n.meta[ORIGIN] for n in rolled.nodes(BACKWARD) if n.meta[ORIGIN].module == "fc"]
    assert fc_back and all(forward[o.forward_node].meta[ORIGIN].module == "fc" for o in fc_back)


def test_named_backend_receives_the_dynamo_graph_and_results_are_unchanged():
    received = []

    def downstream(gm, example_inputs):
        received.append(gm)
        return gm.forward

    model = Broken().eval()
    x = torch.randn(2, 3, 16, 16)
    collector = fxroof.backend(then=downstream)
    with torch.no_grad():
        out = torch.compile(model, backend=collector)(x)
        torch.testing.assert_close(out, model(x))
    assert len(received) == 2 and all(isinstance(g, torch.fx.GraphModule) for g in received)
    g = collector.annotated()
    assert g.backward is None and g.model.mode == "eval"
    assert any(r["target"] == "aten._native_batch_norm_legit_no_training.default"
               for r in g.records())


def test_dynamic_shapes_are_costed_at_the_traced_sizes():
    lin = nn.Linear(16, 32)
    collector = fxroof.backend(then=None)
    compiled = torch.compile(lin, backend=collector, dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(5, 16))
    g = collector.annotated()
    assert g.totals()[FORWARD]["macs"] == 5 * 16 * 32


def test_nothing_compiled_yet_says_so():
    with pytest.raises(ValueError, match="nothing has been compiled"):
        fxroof.backend().annotated()


@pytest.mark.parametrize("dynamo, path", [
    ("L['self'].layer1[0].conv1", "layer1.0.conv1"),
    ("getattr(L['self'].blocks, '3').attn", "blocks.3.attn"),
    ("L['self']._modules['features']._modules['0']", "features.0"),
    ("L['mod']", ""),
])
def test_module_path_from_dynamo_source_names(dynamo, path):
    assert module_path(dynamo) == path


def test_default_passes_on_to_inductor():
    """The real pipeline: annotation on the side, inductor compiles what runs (about 20 s)."""
    lin = nn.Linear(8, 4)
    collector = fxroof.backend()
    x = torch.randn(3, 8)
    out = torch.compile(lin, backend=collector)(x)
    out.sum().backward()
    torch.testing.assert_close(out, lin(x))
    assert lin.weight.grad is not None
    # forward and dW only: the input does not require grad, so no dX
    assert collector.annotated().totals()["overall"]["macs"] == 2 * 3 * 8 * 4


def test_the_untraceable_fallback_works():
    """analyze() refuses a branch on a tensor value and points at the backend; the backend
    annotates what Dynamo compiles around the graph break."""
    from tests.fixtures.user_models import DataDependent

    with pytest.raises(fxroof.FxroofError, match="fxroof.backend"):
        fxroof.analyze(DataDependent(), torch.randn(2, 4), backward=True)
    collector = fxroof.backend(then=None)
    torch.compile(DataDependent(), backend=collector)(torch.randn(2, 4)).sum().backward()
    assert collector.regions  # the branch itself stays in Python
    g = collector.annotated()
    assert sum(r["macs"] for r in g.records(FORWARD) if r["layer_type"] == "Linear") == 2 * 4 * 4


@pytest.mark.parametrize("kwargs, fragment", [
    ({"then": "inductr"}, "Did you mean inductor"),
    ({"then": 3}, "not a int"),
    ({"on_graph": "print"}, "on_graph must be a callable"),
    ({"model": "resnet18"}, "model= takes the torch.nn.Module being compiled"),
])
def test_bad_arguments_fail_at_once_with_a_clear_message(kwargs, fragment):
    with pytest.raises(fxroof.FxroofError, match=fragment):
        fxroof.backend(**kwargs)


# batch 4: each 16 -> 16 Linear 2 * 4 * 16 * 16 FLOPs of products and 4 * 16 bias adds, the
# head 2 * 4 * 16 * 4 and 4 * 4
FORWARD_LINEAR_FLOPS = 5 * (2 * 4 * 16 * 16 + 4 * 16) + 2 * 4 * 16 * 4 + 4 * 4


@pytest.mark.parametrize("give_model", [False, True])
def test_a_region_called_once_per_block_counts_every_call(give_model):
    """Dynamo compiles each half of the block once and calls it for both blocks: the
    annotation holds every call, and, given the model, names each call's modules as the
    model does (the frame names them ``fc``; the head, called from a resume function,
    from a stack slot)."""
    model, x = HalvedStack(), torch.randn(4, 16)
    collector = fxroof.backend(then="eager", model=model if give_model else None)
    torch.compile(model, backend=collector)(x).sum().backward()
    assert len(collector.runs) > len(collector.regions)
    g = collector.annotated()
    linear = [r for r in g.records(FORWARD) if r["op"] == "addmm"]
    assert sum(r["flops"] for r in linear) == FORWARD_LINEAR_FLOPS
    if give_model:
        assert [r["module"] for r in linear] == ["inp", "blocks.0.fc", "blocks.0.fc2",
                                                 "blocks.1.fc", "blocks.1.fc2", "head"]
        # the residual add of each block's own forward belongs to the block
        assert [r["module"] for r in g.records(FORWARD) if r["op"] == "add"] == \
            ["blocks.0", "blocks.1"]
        # every gradient product is its module's, the last block's first (autograd's order)
        backward = [r["module"] for r in g.records(BACKWARD) if r["op"] == "mm"]
        assert backward[0] == "head" and backward.index("blocks.1.fc2") < \
            backward.index("blocks.0.fc2")
    assert flops_by_phase(g)[0] == pytest.approx(
        flops_by_phase(fxroof.analyze(HalvedStack(), x, backward=True))[0], rel=0.01)


def test_steps_called_alike_annotate_as_one():
    model, x = HalvedStack(), torch.randn(4, 16)
    # given torch.compile's wrapper of the model: the model's names, not the wrapper's
    collector = fxroof.backend(then="eager", model=torch.compile(model))
    compiled = torch.compile(model, backend=collector)
    compiled(x).sum().backward()
    once = flops_by_phase(collector.annotated())
    calls = len(collector.runs)
    for _ in range(2):
        compiled(x).sum().backward()
    assert len(collector.runs) == 3 * calls
    assert flops_by_phase(collector.annotated()) == once
    assert {r["module"] for r in collector.annotated().records()} >= {"blocks.1.fc", "head"}


def test_a_long_loop_keeps_one_step_on_record(monkeypatch):
    """A training loop under the backend: the record drops the repeats of its first step
    once it holds RUN_RECORD_LIMIT calls, and annotates the same step as after one."""
    monkeypatch.setattr(compile_backend, "RUN_RECORD_LIMIT", 15)  # two steps and a half
    model, x = HalvedStack(), torch.randn(4, 16)
    collector = fxroof.backend(then="eager", model=model)
    compiled = torch.compile(model, backend=collector)
    compiled(x).sum().backward()
    step = list(collector.runs)
    once = flops_by_phase(collector.annotated())
    for _ in range(6):
        compiled(x).sum().backward()
        assert len(collector.runs) <= 15
    assert collector.runs[:len(step)] == step
    assert flops_by_phase(collector.annotated()) == once


def test_one_step_is_the_shortest_run_of_calls_the_record_repeats_whole():
    a, b = RegionRun(0, {"self": "blocks.0"}), RegionRun(0, {"self": "blocks.1"})
    assert one_step([a, b, a, b]) == [a, b]
    assert one_step([a, a, a]) == [a]
    assert one_step([a, b, a]) == [a, b, a]  # not a whole repeat: every call
    assert one_step([]) == []
    assert compile_backend._shortest_repeat([a, b, a, b, a]) == [a, b, a]
    assert compile_backend._shortest_repeat([a, b, b]) == [a, b, b]  # nothing repeats
