"""The compiled view (fxroof.compiled): Inductor's kernels as nodes, checked on programs whose
fusion and traffic can be written down by hand."""
import re

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import fxroof
from fxroof import compiled
from fxroof.cli import main
from fxroof.errors import UsageError


class Chain(nn.Module):
    def forward(self, x):
        return (x * 2 + 1).relu().sum()


def test_a_pointwise_chain_and_its_reduction_are_one_kernel_reading_x_once():
    n = 1000 * 100
    g = fxroof.analyze(Chain(), torch.randn(1000, 100), compiled=True)
    assert g.model.view == "compiled"
    (kernel,) = g.records()
    # one pass over x (n fp32 values), one fp32 result written
    assert (kernel["bytes_read"], kernel["bytes_written"]) == (4 * n, 4)
    # mul, add, relu: one FLOP per element each; sum: n - 1 adds
    assert kernel["flops"] == 3 * n + (n - 1)
    assert sorted(kernel["fused_nodes"]) == ["add", "mul", "relu", "sum_1"]
    # eager: mul, add and relu each read n values and write n, then sum reads n and writes
    # one: 4n reads and 3n + 1 writes, 7x the compiled kernel's traffic
    eager = fxroof.analyze(Chain(), torch.randn(1000, 100)).totals()["overall"]
    assert eager["bytes"] == 4 * (4 * n + 3 * n) + 4


def test_an_aten_node_with_no_rule_inside_a_kernel_shows_in_the_coverage(monkeypatch):
    """A fused kernel's FLOPs are its ATen nodes'; one priced by the bytes-only default rule
    adds none, so the view's coverage names it rather than counting the kernel costed."""
    import op_costs

    estimate = op_costs.estimate

    def no_rule_for_relu(op, *args, **kwargs):
        found = estimate(op, *args, **kwargs)
        if op == torch.ops.aten.relu.default:
            return found._replace(flops=0, macs=0, rule=op_costs.DEFAULT_RULE)
        return found

    monkeypatch.setattr(op_costs, "estimate", no_rule_for_relu)
    g = fxroof.analyze(Chain(), torch.randn(10, 10), compiled=True)
    (kernel,) = g.records()
    assert kernel["unpriced_nodes"] == ["aten.relu.default"]
    assert kernel["flops"] == 2 * 100 + 99  # mul and add, the sum's 99 adds: no relu
    assert g.coverage() == {"nodes": 1, "costed_nodes": 0,
                            "default_rule_ops": {"aten.relu.default": 1}}
    monkeypatch.undo()
    assert fxroof.analyze(Chain(), torch.randn(10, 10), compiled=True).coverage() == {
        "nodes": 1, "costed_nodes": 1, "default_rule_ops": {}}


class ConvBnRelu(nn.Sequential):
    def __init__(self):
        super().__init__(nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                         nn.ReLU())


def test_conv_bn_relu_in_eval_is_an_extern_convolution_and_one_fused_epilogue():
    batch, c_in, c_out, size = 2, 8, 16, 12
    g = fxroof.analyze(ConvBnRelu().eval(), torch.randn(batch, c_in, size, size), compiled=True)
    records = g.records()
    (conv,) = [r for r in records if r["op"] == "convolution"]
    assert conv["target"].startswith("inductor.extern")
    # 2 FLOP per MAC, c_in * 3 * 3 MACs per output element, padding keeps 12 x 12
    out = batch * c_out * size * size
    assert conv["flops"] == 2 * c_in * 9 * out and conv["module"] == "0"
    (epilogue,) = [r for r in records if "relu" in r["fused_nodes"]]
    # batch norm's normalisation and the ReLU in one kernel: the conv output read once, four
    # per-channel vectors (mean, var, weight, bias) read, the result written once
    assert epilogue["bytes_written"] == 4 * out
    assert 4 * out <= epilogue["bytes_read"] <= 4 * out + 4 * 4 * c_out
    assert epilogue["layer_type"] == "BatchNorm2d"  # its costliest node's


def test_a_windowed_pool_is_one_kernel_reading_its_input_once():
    """A 3x3 stride-2 max pool (padding 1) over a channels-last map, as the fused class's
    probes run it: one generated kernel, the input read once and the pooled map written once
    (no indices in inference), nine compares counted per output."""
    batch, channels, size = 2, 16, 20
    x = torch.randn(batch, channels, size, size).to(memory_format=torch.channels_last)
    with torch.no_grad():
        (kernel,) = fxroof.analyze(nn.MaxPool2d(3, 2, 1), x, compiled=True).records()
    out = batch * channels * (size // 2) ** 2     # (20 + 2 - 3) // 2 + 1 = 10
    assert (kernel["bytes_read"], kernel["bytes_written"]) == (4 * x.numel(), 4 * out)
    assert kernel["flops"] == 9 * out


def test_a_pool_inductor_cannot_vectorise_is_named_so():
    """Over NCHW, a stride-2 pool's window loads step by 2 along the map's innermost
    dimension and by a whole row or plane along the others: no loop variable reads them
    contiguously, so Inductor's C++ runs the kernel scalar. Over channels-last, the channels
    are contiguous; a ReLU that transposes channels-last to NCHW reads the channels
    contiguously too (Inductor tiles the transpose). Only the first is unvectorised."""
    x = torch.randn(2, 16, 20, 20)
    cl = x.to(memory_format=torch.channels_last)

    def rules(module, x):
        with torch.no_grad():
            return [r["rule"] for r in fxroof.analyze(module, x, compiled=True).records()]

    assert rules(nn.MaxPool2d(3, 2, 1), x) == ["inductor generated[unvectorised]"]
    assert rules(nn.MaxPool2d(3, 2, 1), cl) == ["inductor generated"]
    assert rules(Transposed(), cl) == ["inductor generated[transposing]"]
    assert rules(Chain(), torch.randn(100, 10)) == ["inductor generated"]


class Transposed(nn.Module):
    def forward(self, x):
        return x.relu().contiguous()


class ChannelsLast(nn.Module):
    def forward(self, x):
        return x.contiguous(memory_format=torch.channels_last)


class Permuted(nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 1).contiguous()


class RowSum(nn.Module):
    def forward(self, x):
        return x.sum(-1)


class Bias(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))

    def forward(self, x):
        return x + self.bias


def test_a_copy_across_a_transpose_is_named_so():
    """Along the loop variable that steps the output by one element, a transposing kernel
    reads its input strided while the input is contiguous along another output variable:
    an NCHW image made channels-last (3 channels innermost in the output, 16 x 16 apart in
    the input), a 3x3 convolution weight made channels-last, a (C, positions) map
    transposed, a channels-last map made NCHW. A pointwise chain and its sum, a row sum
    (its read contiguous along the reduction), a per-channel bias (a broadcast read) and a
    channels-last ReLU are not. Each copy reads its input once and writes it once."""
    def kernels(module, x):
        with torch.no_grad():
            return fxroof.analyze(module, x, compiled=True).records()

    transposing = "inductor generated[transposing]"
    for module, x in [(ChannelsLast(), torch.randn(1, 3, 16, 16)),
                      (ChannelsLast(), torch.randn(8, 8, 3, 3)),
                      (Permuted(), torch.randn(2, 8, 32))]:
        (kernel,) = kernels(module, x)
        assert kernel["rule"] == transposing
        assert (kernel["bytes_read"], kernel["bytes_written"]) == (4 * x.numel(),) * 2
        assert kernel["flops"] == 0
    cl = torch.randn(2, 8, 4, 4).to(memory_format=torch.channels_last)
    for module, x in [(Chain(), torch.randn(100, 10)), (RowSum(), torch.randn(16, 32)),
                      (Bias(8), torch.randn(2, 8, 4, 4)), (nn.ReLU(), cl)]:
        assert [k["rule"] for k in kernels(module, x)] == ["inductor generated"]


def test_a_convolution_is_laid_out_as_inductor_runs_it():
    """Inductor's layout optimisation runs a CPU convolution channels-last: the view's
    record says so (and the time model prices it as one), the eager record keeps the
    model's own layout, which the user chooses with the input's memory format."""
    x = torch.randn(2, 8, 12, 12)
    (conv,) = [r for r in fxroof.analyze(ConvBnRelu().eval(), x, compiled=True).records()
               if r["op"] == "convolution"]
    assert conv["layout"] == "channels_last"
    eager = {fmt: [r["layout"] for r in fxroof.analyze(
        ConvBnRelu().eval(), x.to(memory_format=fmt)).records() if r["op"] == "convolution"]
        for fmt in (torch.contiguous_format, torch.channels_last)}
    assert eager == {torch.contiguous_format: ["contiguous"],
                     torch.channels_last: ["channels_last"]}


def test_a_channels_last_analysis_is_lowered_channels_last():
    """Inductor lays its kernels out from its inputs' strides. Given NCHW, it copies the
    input map and the weights to channels-last before the convolution (each copy reads and
    writes its tensor); analysed channels-last (inputs and weights), it copies nothing."""
    x = torch.randn(2, 8, 12, 12)
    ops = {fmt: [(r["op"], r["bytes"]) for r in fxroof.analyze(
        ConvBnRelu().eval(), x, compiled=True, memory_format=fmt).records()]
        for fmt in ("contiguous", "channels_last")}
    map_bytes, weight_bytes = 4 * 2 * 8 * 12 * 12, 4 * 16 * 8 * 3 * 3
    assert sorted(b for op, b in ops["contiguous"] if op == "copy") == \
        sorted([2 * map_bytes, 2 * weight_bytes])
    assert [op for op, _ in ops["channels_last"]] == \
        [op for op, _ in ops["contiguous"] if op != "copy"]


class Attention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def test_attention_is_one_extern_kernel_with_the_eager_ops_flops():
    b, h, length, d = 1, 2, 64, 32
    q = torch.randn(b, h, length, d)
    g = fxroof.analyze(Attention(), q, q, q, compiled=True)
    attention = [r for r in g.records() if "attention" in r["op"]]
    assert len(attention) == 1 and attention[0]["target"].startswith("inductor.extern")
    # Q K^T and P V: 2 * (b h L L d) MACs = 4 b h L^2 d FLOPs, plus the softmax's work
    assert attention[0]["flops"] >= 4 * b * h * length * length * d


class Breaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        y = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(y).sigmoid()


def test_a_graph_break_gives_two_regions_and_both_are_in_the_view():
    model, x = Breaky().eval(), torch.randn(4, 16)
    regions = compiled.schedule(model, (x,), {}, train=False)
    assert len(regions) == 2
    g = fxroof.analyze(model, x, compiled=True)
    # each Linear: 2 * 4 * 16 * 16 FLOPs of matmul and 4 * 16 bias adds; relu 1 and sigmoid 4
    # FLOPs per element (op_costs/pointwise.py)
    linear = 2 * 4 * 16 * 16 + 4 * 16
    assert g.totals()["overall"]["flops"] == 2 * linear + 64 + 4 * 64
    assert [r["module"] for r in g.records() if r["op"] == "addmm"] == ["a", "b"]


@pytest.mark.parametrize("backward", [False, True])
def test_a_region_compiled_once_and_called_per_layer_names_each_layers_modules(backward):
    """A graph break inside a block makes each half of the block a frame of its own, which
    Dynamo names from the block (``L['self'].fc``) and compiles once for both blocks; the
    head, called from a resume function, it names from a stack slot (``L['___stack0']``).
    The view names every product as the model does, per call: blocks.0.fc, blocks.1.fc, ...
    and the residual add of each block's own forward as the eager capture does: blocks.0."""
    from tests.fixtures.user_models import HalvedStack

    x = torch.randn(4, 16)
    g = fxroof.analyze(HalvedStack(), x, compiled=True, backward=backward)
    products = [r["module"] for r in g.records() if r["op"] == "addmm" and
                r["phase"] == "forward"]
    assert products == ["inp", "blocks.0.fc", "blocks.0.fc2", "blocks.1.fc", "blocks.1.fc2",
                        "head"]
    adds = [r["module"] for r in g.records("forward") if r["op"].startswith("fused_add")]
    assert adds == ["blocks.0", "blocks.1"]
    if backward:
        gradients = {r["module"] for r in g.records() if r["phase"] == "backward"
                     and r["op"] in ("mm", "addmm")}
        assert {"blocks.0.fc", "blocks.1.fc2", "head"} <= gradients


def test_training_has_forward_and_backward_kernels_linked_to_their_modules():
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    g = fxroof.analyze(model, torch.randn(16, 32), backward=True, compiled=True)
    eager = fxroof.analyze(model, torch.randn(16, 32), backward=True)
    assert g.records("forward") and g.records("backward")
    # the matmuls run as extern kernels in both phases: the FLOPs of the matrix work agree
    matrix = lambda graph: sum(r["flops"] for r in graph.records()  # noqa: E731
                               if r["op"] in ("mm", "addmm"))
    assert matrix(g) == matrix(eager)
    assert {r["module"] for r in g.records("backward") if r["op"] == "mm"} == {"0", "2"}


def test_the_view_rolls_up_and_exports_like_an_eager_graph(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["annotate", "tests.fixtures.user_models:small_net", "--input-shape",
                 "2,3,16,16", "--compiled", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "compiled view:" in printed and "Inductor kernels" in printed
    data = fxroof.export.read_json(str(out))
    assert data["model"]["view"] == "compiled"
    assert all(n["target"].startswith("inductor.") for n in data["nodes"])
    assert sum(n["flops"] for n in data["nodes"]) == data["totals"]["overall"]["flops"]


def test_the_summary_says_what_layout_copies_add_and_what_freezing_saves():
    """small_net on (2, 3, 16, 16), unfrozen: Inductor copies the NCHW input to channels-last
    (read and written: 2 x 6,144 B), the 8 x 3 x 3 x 3 weight likewise on every call
    (2 x 864 B) and the pooled (2, 8) result (2 x 64 B): 14,144 B. Frozen, the weight is
    converted once at compile time; its copy is gone and so is the hint to freeze."""
    from tests.fixtures.user_models import small_net

    x = torch.randn(2, 3, 16, 16)
    view = fxroof.analyze(small_net(), x, compiled=True)
    assert view.layout_copy_bytes() == 2 * (6144 + 864 + 64)
    assert fxroof.analyze(small_net(), x).layout_copy_bytes() == 0  # eager: ATen ops only
    unfrozen = view.summary()
    assert "copies: 14.1 kB of the" in unfrozen
    assert "--freeze converts the weights once" in unfrozen
    frozen = fxroof.analyze(small_net(), x, compiled=True, freeze=True).summary()
    assert "copies: 1" in frozen and "copies: 14.1 kB" not in frozen
    assert "--freeze" not in frozen
    chain = fxroof.analyze(Chain(), torch.randn(100), compiled=True).summary()
    assert "copies:" not in chain  # nothing laid out anew, no line


# ---- frozen (torch._inductor.config.freezing): prepacked oneDNN / MKL calls ---------------

def test_frozen_conv_bn_relu_is_one_prepacked_call_with_the_norm_folded_in():
    batch, c_in, c_out, size = 2, 8, 16, 12
    x = torch.randn(batch, c_in, size, size)
    g = fxroof.analyze(ConvBnRelu().eval(), x, compiled=True, freeze=True)
    assert g.model.frozen and g.model.view == "compiled"
    records = g.records()
    (conv,) = [r for r in records if r["op_class"] == "matrix"]
    assert conv["op"] == "_convolution_pointwise" and conv["layout"] == "channels_last"
    assert (conv["module"], conv["layer_type"]) == ("0", "Conv2d")
    # the batch norm became the convolution's bias: per output element 2 * c_in * 9 FLOPs of
    # MACs, one bias add and one ReLU; no kernel is left for the norm
    out = batch * c_out * size * size
    assert conv["flops"] == 2 * c_in * 9 * out + out + out
    assert not [r for r in records if r["layer_type"] == "BatchNorm2d"]
    # it reads x, the weights (c_out x c_in x 3 x 3) and the folded bias, and writes once
    assert conv["bytes_read"] == 4 * (batch * c_in * size * size + c_out * c_in * 9 + c_out)
    assert conv["bytes_written"] == 4 * out
    # unfrozen, the weights are converted to channels-last on every call: a copy of
    # c_out * c_in * 9 floats read and written that the frozen view does not have
    unfrozen = fxroof.analyze(ConvBnRelu().eval(), x, compiled=True)
    weight_copies = lambda view: [r for r in view.records() if r["op"] == "copy"  # noqa: E731
                                  and r["bytes_read"] == 4 * c_out * c_in * 9]
    assert weight_copies(unfrozen) and not weight_copies(g)


class Residual(nn.Module):
    def __init__(self, channels=16):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return (self.conv(x) + x).relu()


def test_a_frozen_residual_add_and_relu_ride_in_the_convolution_call():
    batch, c, size = 2, 16, 12
    g = fxroof.analyze(Residual().eval(), torch.randn(batch, c, size, size), compiled=True,
                       freeze=True)
    (conv,) = [r for r in g.records() if r["op_class"] == "matrix"]
    out = batch * c * size * size
    # MACs, bias, the add of x and the relu: 2 * c * 9 + 3 FLOPs per output element
    assert conv["flops"] == (2 * c * 9 + 3) * out
    # x is read twice (convolved, then added), with the weights and the bias
    assert conv["bytes_read"] == 4 * (2 * out + c * c * 9 + c)
    assert conv["module"] == "conv"
    # no other kernel computes anything: the rest are layout copies
    assert g.totals()["overall"]["flops"] == conv["flops"]


def test_a_frozen_linear_layer_runs_mkl_with_its_weight_read_once():
    batch, k, n = 4, 64, 32
    g = fxroof.analyze(nn.Linear(k, n).eval(), torch.randn(batch, k), compiled=True,
                       freeze=True)
    (linear,) = [r for r in g.records() if r["op_class"] == "matrix"]
    assert linear["op"] == "_mkl_linear" and linear["layer_type"] == "Linear"
    assert linear["flops"] == 2 * batch * k * n
    # x and the original weight, not also MKL's packed copy of it
    assert linear["bytes_read"] == 4 * (batch * k + n * k)
    assert linear["bytes_written"] == 4 * batch * n


def test_freezing_is_refused_without_the_compiled_view_or_for_training():
    model, x = ConvBnRelu(), torch.randn(2, 8, 12, 12)
    with pytest.raises(UsageError, match="compiled=True"):
        fxroof.analyze(model.eval(), x, freeze=True)
    with pytest.raises(UsageError, match="inference"):
        fxroof.analyze(model, x, compiled=True, freeze=True, backward=True)
    with pytest.raises(UsageError, match="inference"):
        fxroof.analyze(model, x, compiled=True, freeze=True, mode="train")


def test_freeze_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "f.json"
    assert main(["annotate", "tests.fixtures.user_models:small_net", "--input-shape",
                 "2,3,16,16", "--compiled", "--freeze", "--json", str(out)]) == 0
    data = fxroof.export.read_json(str(out))
    assert data["model"]["frozen"] is True
    assert any(n["target"] == "inductor.extern._convolution_pointwise" for n in data["nodes"])
    assert main(["annotate", "tests.fixtures.user_models:small_net", "--input-shape",
                 "2,3,16,16", "--freeze"]) == 2
    err = capsys.readouterr().err
    assert "--compiled" in err and "Traceback" not in err


class BrokenBlock(nn.Module):
    """A block whose forward Dynamo breaks in two: it is compiled once per break and called
    once per layer."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        x = self.fc(x).relu()
        torch._dynamo.graph_break()
        return x * 2


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_region_called_once_per_layer_runs_its_kernels_every_call(device):
    """Three identical blocks with a graph break each: Dynamo compiles each half once and
    calls it three times. The view holds every call's kernels, so its FLOPs are the eager
    step's: 3 x (2 x 8 x 32 x 32 for the product, 8 x 32 for the bias, relu and doubling)."""
    model = nn.Sequential(BrokenBlock(), BrokenBlock(), BrokenBlock()).eval()
    x = torch.randn(8, 32)
    g = fxroof.analyze(model, x, compiled=True, device=device)
    flops = 3 * (2 * 8 * 32 * 32 + 3 * 8 * 32)
    assert g.totals()["overall"]["flops"] == flops == fxroof.analyze(model, x).totals()[
        "overall"]["flops"]
    # one product a call (on CUDA Inductor splits the bias off into the ReLU's kernel)
    assert sum(r["op_class"] == "matrix" for r in g.records()) == 3
    assert "outside:" not in g.summary()


@pytest.mark.parametrize("backward", [False, True])
def test_modules_no_region_traced_run_in_the_view_as_their_eager_ops(backward):
    """Dynamo's regions trace the input layer, and the mean and head; the blocks run
    eagerly between them. The view holds the blocks' nodes of the eager step, each once, in
    the order they run -- after the input layer's kernel and before the head's (in the
    backward, the reverse) -- with their eager rules (the LSTM's oneDNN kernel), so its
    FLOPs are the eager step's phase by phase."""
    from tests.fixtures.user_models import Recurrent

    x = torch.randn(4, 8, 16)
    model = Recurrent()
    eager = fxroof.analyze(model, x, backward=backward)
    g = fxroof.analyze(model, x, compiled=True, backward=backward)
    for phase, totals in eager.totals().items():
        assert g.totals()[phase]["flops"] == totals["flops"]
    ran_eagerly = [r for r in g.records() if "inductor" not in r["rule"]]
    assert {r["module"].split(".")[0] for r in ran_eagerly} == {"blocks"}
    assert sum(r["op"] == "mkldnn_rnn_layer" for r in ran_eagerly) == 2
    order = [r["module"].split(".")[0] for r in g.records("forward") if r["flops"]]
    assert order[0] == "inp" and order[-1] == "head" and "blocks" in order
    if backward:
        order = [r["module"].split(".")[0] for r in g.records("backward") if r["flops"]]
        assert order[0] == "head" and order[-1] == "inp"
        assert sum(r["op"] == "mkldnn_rnn_layer_backward" for r in ran_eagerly) == 2
    assert "eager between regions: " in g.summary() and "outside:" not in g.summary()


class EagerHalf(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    @torch._dynamo.disable
    def eager_product(self, x):
        return x @ x.T

    def forward(self, x):
        return self.eager_product(self.fc(x))


def test_what_runs_eagerly_between_regions_is_named_in_the_summary():
    """A method Dynamo is told not to trace runs eagerly, outside every region: the view
    holds the linear layer's 2 x 16 x 64 x 64 FLOPs and not the 2 x 16 x 64 x 16 of the
    product, and its summary says how much of the eager step that leaves out."""
    g = fxroof.analyze(EagerHalf(), torch.randn(16, 64), compiled=True)
    linear, product = 2 * 16 * 64 * 64 + 16 * 64, 2 * 16 * 64 * 16
    assert g.totals()["overall"]["flops"] == linear
    assert g.model.eager_flops == linear + product
    assert "outside: 32.8 kFLOP of the eager step's 165 kFLOP run eagerly" in g.summary()


def test_the_header_counts_kernels_and_the_eager_ops_between_regions_apart(capsys):
    from tests.fixtures.user_models import Recurrent

    blocks = [r for r in fxroof.analyze(Recurrent(), torch.randn(4, 8, 16)).records()
              if r["module"].startswith("blocks")]
    assert main(["annotate", "tests.fixtures.user_models:Recurrent", "--input-shape",
                 "4,8,16", "--compiled", "--top", "3"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert re.search(rf"compiled view: \d+ Inductor kernels and {len(blocks)} eager ops "
                     "between regions", header)


def test_a_model_dynamo_compiles_nothing_of_is_its_eager_step():
    """torch.compile of a bare nn.LSTM traces no region (torch.nn's own frames are not
    compiled, the LSTM is not traced): the view is the eager step, node for node."""
    lstm, x = nn.LSTM(16, 16, batch_first=True), torch.randn(4, 8, 16)
    eager = fxroof.analyze(lstm, x)
    g = fxroof.analyze(lstm, x, compiled=True)
    assert [r["op"] for r in g.records()] == [r["op"] for r in eager.records()]
    assert g.totals()["overall"]["flops"] == eager.totals()["overall"]["flops"] > 0
    assert not any(r["rule"].startswith("inductor") for r in g.records())


def test_an_extern_call_its_rule_does_not_take_is_left_to_the_eager_nodes_cost():
    """Inductor's IR is an internal API: a call read off it with an argument both by position
    and by name does not bind, and gives no cost (the eager node's stands), where the same
    call read as the schema lays it out is priced by the convolution's rule."""
    from op_costs import TensorMeta

    x = TensorMeta((2, 8, 6, 6), (288, 1, 48, 8), torch.float16)  # channels-last
    w = TensorMeta((8, 1, 3, 3), (9, 9, 3, 1), torch.float16)
    out = TensorMeta((2, 8, 4, 4), (128, 1, 32, 8), torch.float16)
    named = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "transposed": False,
             "output_padding": (0, 0), "groups": 8}
    op = torch.ops.aten.convolution.default
    good = {"op": op, "call": ((x, w), {"bias": None, **named}, out)}
    twice = {"op": op, "call": ((x, w, None), {"bias": None, **named}, out)}
    assert compiled._call_cost(good).flops == 2 * 9 * 2 * 8 * 4 * 4
    assert compiled._call_cost(twice) is None
    assert compiled._call_cost({"op": op, "call": None}) is None
