"""Capture: graphs, attribution, fake execution, and leaving the user's model untouched."""
import gc
import resource
import weakref

import torch
from torch import nn
import torchvision

import fxroof
from fxroof import capture
from fxroof.capture import INPUT


def test_module_path_layer_type_and_backward_attribution():
    g = fxroof.analyze(torchvision.models.resnet18(), torch.randn(2, 3, 64, 64), backward=True)
    fwd = {r["name"]: r for r in g.records("forward")}
    conv = [r for r in fwd.values() if r["module"] == "layer3.1.conv2"]
    assert [r["layer_type"] for r in conv] == ["Conv2d"]
    # the residual add lives in BasicBlock's own forward: typed by its op
    assert any(r["module"] == "layer1.0" and r["layer_type"] == "add" for r in fwd.values())
    for r in g.records("backward"):
        assert r["forward_node"] in fwd, r["name"]
        assert fwd[r["forward_node"]]["module"] == r["module"]
    back = [r for r in g.records("backward") if r["forward_node"] == conv[0]["name"]]
    assert [r["op"] for r in back] == ["convolution_backward"]


def test_phases_split_into_two_graphs_with_saved_tensors():
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    g = fxroof.analyze(model, torch.randn(4, 8), backward=True)
    assert {r["phase"] for r in g.records()} == {"forward", "backward"}
    kinds = [n.meta[INPUT].kind for n in g.backward.nodes if n.op == "placeholder"]
    assert "tangent" in kinds and "saved" in kinds
    assert g.capture.saved  # tanh's output, the linear inputs, the weights
    # the graphs are runnable fx graphs: the backward graph computes real gradients
    params = dict(model.named_parameters())
    x = torch.randn(4, 8)
    fwd = g.graph_module("forward")
    inputs = [params.get(n.meta[INPUT].label, x) if n.meta[INPUT].kind != "input" else x
              for n in g.forward.nodes if n.op == "placeholder"]
    with torch.no_grad():
        outs = fwd(*inputs)
    assert torch.allclose(outs[0], model(x), atol=1e-6)


def test_batch_256_costs_nothing_real():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    g = fxroof.analyze("resnet50", batch=256, backward=True)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    # a real step at batch 256 needs > 20 GB of activations; fake tensors need none
    assert g.memory.peak_bytes > 20e9
    assert grown_mb < 1500


def test_a_batch_that_agrees_with_the_inputs_is_the_inputs_batch():
    """batch sizes the default input; given inputs keep theirs, and a batch equal to it is
    no contradiction."""
    assert fxroof.analyze(torch.nn.Linear(3, 3), torch.ones(5, 3), batch=5).model.batch == 5
    assert fxroof.analyze(torch.nn.Linear(3, 3), torch.ones(5, 3)).model.batch == 5
    assert fxroof.analyze("resnet18", input_shapes=[(2, 3, 32, 32)]).model.batch == 2
    assert fxroof.analyze("resnet18", batch=3).model.batch == 3


def test_a_torch_device_names_the_target_as_its_string_does():
    """A PyTorch user passes torch.device("cuda"): it was refused where "cuda" was taken."""
    model, x = nn.Linear(8, 8), torch.ones(4, 8)
    for name, device in (("cpu", torch.device("cpu")), ("cuda:1", torch.device("cuda", 1))):
        by_name = fxroof.analyze(model, x, device=name, backward=True)
        by_device = fxroof.analyze(model, x, device=device, backward=True)
        assert by_device.model.device == by_name.model.device == name.split(":")[0]
        assert by_device.totals() == by_name.totals()
    with fxroof.fake():
        model, x = nn.Linear(8, 8), torch.ones(4, 8)
    with fxroof.record(torch.device("cuda")) as rec:
        model(x).sum().backward()
    assert rec.graph.model.device == "cuda"


def test_user_model_is_not_modified():
    model = torchvision.models.resnet18()
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fxroof.analyze(model, torch.randn(2, 3, 64, 64), backward=True)
    assert not model.training and all(not m.training for m in model.modules())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # BN stats untouched
    assert all(p.grad is None for p in model.parameters())


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(5, 3)

    def forward(self, x, y, *, scale=1.0, mask=None):
        out = self.a(x) + self.b(y) * scale
        return {"logits": out if mask is None else out * mask, "aux": self.a(x).sum()}


def test_multiple_inputs_kwargs_and_dict_outputs():
    g = fxroof.analyze(TwoInputs(), torch.randn(2, 4), torch.randn(2, 5),
                       kwargs={"scale": 2.0, "mask": torch.ones(2, 3)}, backward=True)
    assert [i["shape"] for i in g.model.inputs] == [[2, 4], [2, 5], [2, 3]]
    tangents = [n for n in g.backward.nodes if n.op == "placeholder"
                and n.meta[INPUT].kind == "tangent"]
    assert len(tangents) == 2
    assert g.totals()["forward"]["macs"] == 2 * 2 * 4 * 3 + 2 * 5 * 3


def test_dtype_option_changes_bytes_not_flops():
    x = torch.randn(2, 3, 64, 64)
    f32 = fxroof.analyze("resnet18", x)
    bf16 = fxroof.analyze("resnet18", x, dtype="bfloat16")
    assert bf16.model.dtype == "bfloat16"
    assert f32.totals()["forward"]["flops"] == bf16.totals()["forward"]["flops"]

    def float_bytes(g):  # integer tensors (max-pool indices, counters) keep their size
        return sum(r["bytes"] for r in g.records() if r["dtype"] in ("float32", "bfloat16")
                   and r["op"] != "max_pool2d_with_indices")
    assert float_bytes(f32) == 2 * float_bytes(bf16)


def test_train_mode_models_with_auxiliary_outputs():
    g = fxroof.analyze("googlenet", batch=2, backward=True)  # train mode returns aux logits
    assert len([n for n in g.backward.nodes if n.op == "placeholder"
                and n.meta[INPUT].kind == "tangent"]) == 3


def test_memory_closed_form_for_an_mlp():
    b, d = 16, 32
    model = nn.Sequential(nn.Linear(d, d, bias=False), nn.ReLU(), nn.Linear(d, d, bias=False))
    g = fxroof.analyze(model, torch.randn(b, d), backward=True)
    m = g.memory
    assert m.parameter_bytes == 2 * d * d * 4
    assert m.input_bytes == b * d * 4
    assert m.gradient_bytes == 2 * d * d * 4
    # forward allocates the first matmul's output, the relu output and the model output
    assert m.activation_bytes == 3 * b * d * 4
    # backward reads the relu output (for threshold_backward and the 2nd weight gradient)
    assert m.saved_for_backward_bytes == b * d * 4
    assert m.peak_bytes >= m.parameter_bytes + m.input_bytes + m.gradient_bytes


def test_saved_traffic_closed_form_for_an_mlp():
    """The relu output is the one saved activation (b x d fp32): the relu writes it, and
    two backward nodes read it -- threshold_backward and the second weight gradient's mm
    (through a transposing view) -- b x d x 4 bytes each. The input x is saved too, but it
    is the step's input, not an activation the step writes."""
    b, d = 16, 32
    model = nn.Sequential(nn.Linear(d, d, bias=False), nn.ReLU(), nn.Linear(d, d, bias=False))
    g = fxroof.analyze(model, torch.randn(b, d), backward=True)
    written = {r["op"]: r["saved_bytes_written"] for r in g.records("forward")
               if r["saved_bytes_written"]}
    assert written == {"relu": b * d * 4}
    readers = sorted(r["op"] for r in g.records("backward") if r["saved_bytes_read"])
    assert readers == ["mm", "threshold_backward"]
    assert sum(r["saved_bytes_read"] for r in g.records("backward")) == 2 * b * d * 4
    assert not any(r["saved_bytes_read"] for r in g.records("forward"))
    # inference saves nothing
    eval_records = fxroof.analyze(model, torch.randn(b, d)).records()
    assert not any(r["saved_bytes_read"] or r["saved_bytes_written"] for r in eval_records)


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


# An op no cost rule knows (every ATen op reached by PyTorch's own op tests has one).
_lib = torch.library.Library("fxroof_capture", "DEF")
_lib.define("opaque(Tensor x) -> Tensor")
_lib.impl("opaque", lambda x: x * 2, "CompositeExplicitAutograd")


class Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        if y.shape[-1] > 4:  # control flow on shapes is fine: shapes are known
            y = Square.apply(y)
        return torch.ops.fxroof_capture.opaque(y.detach()), y.mean()  # opaque has no rule


def test_custom_function_attribution_and_an_op_without_a_rule():
    g = fxroof.analyze(Custom(), torch.randn(2, 8), backward=True)
    fwd = {r["name"]: r for r in g.records("forward")}
    square = [r for r in fwd.values() if r["op"] == "mul"]
    assert len(square) == 1
    backward_of_square = [r for r in g.records("backward")
                          if r["forward_node"] == square[0]["name"]]
    assert [r["op"] for r in backward_of_square] == ["mul", "mul"]  # 2 * x * grad
    coverage = g.coverage()
    assert coverage["default_rule_ops"] == {"fxroof_capture.opaque.default": 1}
    opaque = [r for r in g.records() if r["rule"] == "default"]
    assert all(r["flops"] == 0 and r["bytes"] > 0 for r in opaque)  # never silently zero


class _DenseBlock(nn.Module):
    """A stem, then ``layers`` convolutions each reading every feature map before it (cat),
    and the block's output the cat of them all, as DenseNet's blocks."""

    def __init__(self, layers: int, growth: int = 2):
        super().__init__()
        self.stem = nn.Conv2d(3, growth, 1)
        self.convs = nn.ModuleList(nn.Conv2d(growth * (i + 1), growth, 1)
                                   for i in range(layers))

    def forward(self, x):
        features = [self.stem(x)]
        for conv in self.convs:
            features.append(conv(torch.cat(features, 1)))
        return torch.cat(features, 1)


def test_the_engines_gradient_sums_are_marked_and_nothing_else():
    """A tensor read by c ops gets c gradients, which the autograd engine adds up c - 1 times
    between backward functions. In a dense block of n layers the stem's output is read by
    the n layers and the last cat (n sums), layer j's output by the n - j layers after it
    and the last cat (n - j sums): n (n + 1) / 2 in all. Only those are ``accumulates``,
    on a CPU target and on a GPU one (whose backward the engine runs on a thread of its own)."""
    for n, device in ((1, "cpu"), (3, "cpu"), (5, "cpu"), (5, "cuda")):
        g = fxroof.analyze(_DenseBlock(n), torch.randn(2, 3, 4, 4), backward=True,
                           device=device)
        summed = [r for r in g.records("backward") if r["accumulates"]]
        assert len(summed) == n * (n + 1) // 2
        assert {r["target"] for r in summed} == {"aten.add.Tensor"}
        assert not any(r["accumulates"] for r in g.records("forward"))
        assert sum(r["op"] == "add" for r in g.records("backward")) == len(summed)


def test_gradient_sums_after_a_views_backward_and_a_formulas_own_add():
    """q and k, two selects of one projection, send it two gradients through their views'
    backward nodes: one engine sum. atan2's backward formula computes q^2 + k^2 itself: an
    add that is the formula's, not the engine's."""
    class SelectPair(nn.Module):
        def __init__(self):
            super().__init__()
            self.project = nn.Linear(4, 8)

        def forward(self, x):
            qk = self.project(x).unflatten(-1, (2, 4))
            return torch.atan2(qk[:, 0], qk[:, 1])

    g = fxroof.analyze(SelectPair(), torch.randn(3, 4), backward=True)
    backward = g.records("backward")
    adds = [r for r in backward if r["op"] == "add"]
    summed = [r for r in backward if r["accumulates"]]
    assert len(summed) == 1 and summed[0]["shape"] == [3, 2, 4]
    assert len(adds) == 2  # the formula's add is there, and not marked


def test_a_dropped_analysis_leaves_its_recorder_to_the_collector(monkeypatch):
    """The backward nodes' hooks hold no reference to the recorder, which keeps the
    forward's tensors and so their nodes alive: a cycle through C++ autograd nodes would
    keep every capture of a study's process (dozens of models) in memory."""
    recorders = []
    record = capture.GraphRecorder.__init__

    def init(self, *args, **kwargs):
        record(self, *args, **kwargs)
        recorders.append(weakref.ref(self))
    monkeypatch.setattr(capture.GraphRecorder, "__init__", init)
    g = fxroof.analyze(_DenseBlock(3), torch.randn(2, 3, 4, 4), backward=True)
    assert recorders and any(r["accumulates"] for r in g.records("backward"))
    del g
    gc.collect()
    assert [r() for r in recorders] == [None] * len(recorders)
