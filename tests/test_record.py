"""fxroof.record / fake / fake_model (#15): the annotated graph of the user's own step code.
Expected values are closed forms derived here, or the same step recorded by analyze() -- a
separate path (functional_call and autograd.grad, not the user's backward() and step())."""
from __future__ import annotations

import collections

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import fxroof
from fxroof.errors import FxroofError, UsageError

IN, HIDDEN, OUT, BATCH = 8, 16, 4, 2
N = IN * HIDDEN + HIDDEN + HIDDEN * OUT + OUT  # parameter elements of the MLP
TENSORS = 4


def mlp():
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def fake_step_inputs():
    with fxroof.fake():
        model = mlp()
        x, y = torch.randn(BATCH, IN), torch.randint(0, OUT, (BATCH,))
    return model, x, y


def ops(g, phase):
    return collections.Counter(r["op"] for r in g.records(phase))


def test_an_sgd_step_in_closed_form():
    """SGD with momentum: 3 FLOP per parameter element (buf*mu, +g, p - lr*buf), one
    steady-state step although the block runs the optimizer's first."""
    model, x, y = fake_step_inputs()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    with fxroof.record() as rec:
        F.cross_entropy(model(x), y).backward()
        opt.step()
    g = rec.graph
    assert g.totals()["optimizer"]["flops"] == 3 * N
    assert "zeros_like" not in ops(g, "optimizer") and "clone" not in ops(g, "optimizer")
    # the for-loop updates belong to their parameter's module
    assert {r["module"] for r in g.records("optimizer")} == {"0", "2"}
    assert g.model.optimizer == "sgd (for-loop)" and g.model.backward
    assert g.memory.optimizer_state_bytes == N * 4  # one momentum buffer, fp32
    assert g.memory.gradient_bytes == N * 4
    assert g.coverage()["default_rule_ops"] == {}


def test_adamw_on_the_cuda_target_runs_torchs_default_foreach_kernels():
    """AdamW: 14 FLOP per element plus one per step counter; torch.optim's default on
    CUDA is foreach, and the user's optimizer keeps its own setting afterwards."""
    model, x, y = fake_step_inputs()
    opt = torch.optim.AdamW(model.parameters())
    with fxroof.record(device="cuda") as rec:
        F.cross_entropy(model(x), y).backward()
        opt.step()
    g = rec.graph
    assert g.totals()["optimizer"]["flops"] == 14 * N + TENSORS
    assert all(op.startswith("_foreach") for op in ops(g, "optimizer"))
    assert {r["layer_type"] for r in g.records("optimizer")} == {"AdamW"}
    assert opt.param_groups[0]["foreach"] is None
    assert g.model.device == "cuda" and g.model.optimizer == "adamw (foreach)"


def test_record_gives_the_program_analyze_gives():
    """resnet18, CUDA target, bf16 autocast, cross-entropy, AdamW: the user's code recorded
    by record() and the same step built by analyze() agree op for op, phase by phase."""
    with fxroof.fake():
        model = torchvision.models.resnet18()
        x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 1000, (2,))
    opt = torch.optim.AdamW(model.parameters())
    with fxroof.record(device="cuda", amp="bf16") as rec:
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    built = fxroof.analyze("resnet18", torch.randn(2, 3, 64, 64), device="cuda", amp="bf16",
                           loss="cross_entropy", optimizer="adamw")
    for phase in ("forward", "backward", "optimizer"):
        assert ops(rec.graph, phase) == ops(built, phase), phase
        for key in ("flops", "bytes"):
            assert rec.graph.totals()[phase][key] == built.totals()[phase][key], (phase, key)
    assert rec.graph.memory.optimizer_state_bytes == built.memory.optimizer_state_bytes
    convs = {r["module"] for r in rec.graph.records("backward")
             if r["op"] == "convolution_backward"}
    assert "layer4.1.conv2" in convs  # backward nodes keep the module they differentiate


def test_clipping_and_zeroing_the_gradients_are_the_optimizer_phase():
    model, x, y = fake_step_inputs()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with fxroof.record() as rec:
        F.cross_entropy(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=False)
    optimizer_ops = ops(rec.graph, "optimizer")
    assert optimizer_ops["_foreach_norm"] == 1 and optimizer_ops["_foreach_mul_"] == 1
    assert optimizer_ops["zero_"] == TENSORS
    assert "_foreach_norm" not in ops(rec.graph, "forward")


def test_gradient_accumulation_records_both_micro_batches():
    """Two forward/backward passes before one step: twice the forward and backward ops,
    plus one gradient accumulation (an add) per parameter in the second backward."""
    model, x, y = fake_step_inputs()
    with fxroof.record() as one:
        F.cross_entropy(model(x), y).backward()
    model, x, y = fake_step_inputs()
    with fxroof.record() as two:
        for _ in range(2):
            F.cross_entropy(model(x), y).backward()
    assert two.graph.totals()["forward"]["flops"] == 2 * one.graph.totals()["forward"]["flops"]
    extra = ops(two.graph, "backward") - ops(one.graph, "backward") - ops(one.graph, "backward")
    assert sum(extra.values()) == TENSORS and set(extra) <= {"add", "add_"}


def test_a_second_step_in_one_block_is_refused():
    model, x, y = fake_step_inputs()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(FxroofError, match="one training step"):
        with fxroof.record():
            for _ in range(2):
                F.cross_entropy(model(x), y).backward()
                opt.step()


def test_a_block_that_runs_nothing_says_so():
    """An empty graph had come back, its tables blank, for a block that never ran the model."""
    with pytest.raises(FxroofError, match="ran no operation on a tensor"):
        with fxroof.record():
            pass


def test_inference_and_autograd_grad():
    model, x, _ = fake_step_inputs()
    with torch.no_grad(), fxroof.record() as rec:
        model(x)
    assert rec.graph.backward is None and rec.graph.model.mode == "train"
    assert rec.graph.totals()["forward"]["flops"] > 0
    with fxroof.fake():
        xi = torch.randn(BATCH, IN, requires_grad=True)
    with fxroof.record() as rec:
        (gx,) = torch.autograd.grad(model(xi).sum(), xi)
    assert tuple(gx.shape) == (BATCH, IN) and rec.graph.backward is not None
    assert ops(rec.graph, "backward")["mm"] >= 1


def test_autocast_wraps_the_forward_only():
    """amp='fp16' on the CUDA target: the forward casts as the analyze() step does (5 fp16
    casts, one to fp32 for nll_loss), and backward() runs outside autocast."""
    model, x, y = fake_step_inputs()
    with fxroof.record(device="cuda", amp="fp16") as rec:
        F.cross_entropy(model(x), y).backward()
    casts = sorted(r["dtype"] for r in rec.graph.records("forward") if r["op"] == "_to_copy")
    assert casts == ["float16"] * 5 + ["float32"]
    built = fxroof.analyze(mlp(), torch.randn(BATCH, IN), device="cuda", amp="fp16",
                           loss="cross_entropy")
    assert ops(rec.graph, "backward") == ops(built, "backward")
    assert rec.graph.model.amp == "fp16" and rec.graph.model.dtype == "float32"


def test_real_weights_are_refused_and_left_alone():
    model = mlp()
    with fxroof.fake():
        x = torch.randn(BATCH, IN)
    with pytest.raises(FxroofError, match="fake_model"):
        with fxroof.record():
            model(x).sum().backward()
    assert all(p.grad is None for p in model.parameters())


def test_fake_model_copies_without_touching_the_original():
    real = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    real[1].weight = real[0].weight  # tied
    before = real[0].weight.detach().clone()
    fake = fxroof.fake_model(real)
    assert fake[1].weight is fake[0].weight
    assert isinstance(fake[0].weight, torch._subclasses.FakeTensor)
    assert isinstance(fake[0].weight, nn.Parameter) and fake[0].weight.requires_grad
    assert torch.equal(real[0].weight, before) and not isinstance(
        real[0].weight, torch._subclasses.FakeTensor)
    with torch.device("meta"):
        on_meta = torchvision.models.resnet18()
    named = fxroof.fake_model("resnet18")
    assert sum(p.numel() for p in fxroof.fake_model(on_meta).parameters()) == \
        sum(p.numel() for p in named.parameters()) == 11_689_512


def test_the_graph_waits_for_the_block_and_errors_pass_through():
    rec = fxroof.record()
    with pytest.raises(UsageError, match="block has finished"):
        rec.graph
    with pytest.raises(ZeroDivisionError):
        with rec:
            1 / 0
    with pytest.raises(UsageError, match="block has finished"):
        rec.graph
    with pytest.raises(UsageError, match="device"):
        fxroof.record("tpu")
    with pytest.raises(UsageError, match="amp"):
        fxroof.record(amp="fp8")


def test_a_data_dependent_step_gets_the_explanation():
    model, x, _ = fake_step_inputs()
    with pytest.raises(FxroofError, match="depends on tensor values"):
        with fxroof.record():
            if model(x).sum() > 0:
                pass


def test_a_loss_module_is_named_by_its_class():
    model, x, y = fake_step_inputs()
    criterion = nn.CrossEntropyLoss()
    with fxroof.record() as rec:
        criterion(model(x), y).backward()
    loss = {(r["module"], r["layer_type"]) for r in rec.graph.records("forward")
            if r["op"] in ("_log_softmax", "nll_loss_forward")}
    assert loss == {("CrossEntropyLoss", "CrossEntropyLoss")}
    assert {r["module"] for r in rec.graph.records("forward") if r["op"] == "addmm"} == \
        {"0", "2"}


def test_a_recorded_graph_cannot_be_timed_and_says_why():
    model, x, y = fake_step_inputs()
    with fxroof.record() as rec:
        model(x)
    with pytest.raises(UsageError, match="fxroof.record"):
        rec.graph.time()
