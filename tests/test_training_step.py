"""A whole training step (#15): the loss, the optimizer phase, autocast, the CUDA target's
dispatch rules and channels-last. Expected values are closed forms derived here, never read
back from fxroof."""
from __future__ import annotations

import collections
import contextlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import fxroof
from fxroof.errors import FxroofError, UsageError
from fxroof.target import (CUDNN, EFFICIENT, FLASH, MATH, AttentionCall, Target, can_use_cudnn,
                           sdpa_backend)
from fxroof.target_dispatch import _ops_with_kernel, cuda_autocast, cuda_policy

IN, HIDDEN, OUT, BATCH = 8, 16, 4, 2
# parameters of the MLP below: two weights and two biases
N = IN * HIDDEN + HIDDEN + HIDDEN * OUT + OUT
TENSORS = 4
F32 = 4  # bytes


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def step(optimizer, impl, **kw):
    return fxroof.analyze(mlp(), torch.randn(BATCH, IN), loss="cross_entropy",
                          optimizer=optimizer, optimizer_impl=impl, **kw)


# ---- the optimizer phase, in closed form per parameter element -----------------------------
# FLOPs per element, by fxroof's pointwise conventions (one per +, *, sqrt; a scaled add
# a + s*b is one, as aten.add with alpha): SGD momentum: buf*mu, buf + g, p - lr*buf = 3.
# Adam: lerp 3, v*b2 1, addcmul 3, sqrt 1, /bc2 1, +eps 1, addcdiv 3 = 13; AdamW adds
# p*(1 - lr*wd) = 1. Plus one add per step counter (one per parameter tensor).
FLOPS_PER_ELEMENT = {"sgd": 3, "adam": 13, "adamw": 14}
STEP_COUNTERS = {"sgd": 0, "adam": TENSORS, "adamw": TENSORS}


@pytest.mark.parametrize("impl", ["for-loop", "foreach", "fused"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_optimizer_flops_per_parameter_element(optimizer, impl):
    g = step(optimizer, impl)
    expected = FLOPS_PER_ELEMENT[optimizer] * N + STEP_COUNTERS[optimizer]
    assert g.totals()["optimizer"]["flops"] == expected
    assert g.coverage()["default_rule_ops"] == {}


def test_fused_adamw_bytes_read_p_g_m_v_and_write_p_m_v():
    g = step("adamw", "fused")
    fused = [r for r in g.records("optimizer") if r["op"] == "_fused_adamw_"]
    assert len(fused) == 1
    assert fused[0]["bytes_read"] == 4 * N * F32
    assert fused[0]["bytes_written"] == 3 * N * F32


def test_foreach_adamw_bytes_per_element():
    """mul_ p (r4 w4), lerp_ m,g (r8 w4), mul_ v (r4 w4), addcmul_ v,g,g (r12 w4), sqrt v
    (r4 w4), div_ (r4 w4), add_ (r4 w4), addcdiv_ p,m,s (r12 w4): 84 bytes per element; the
    step counters' add_ reads each 4-byte counter and the shared 4-byte 1, writes each."""
    g = step("adamw", "foreach")
    assert g.totals()["optimizer"]["bytes"] == 84 * N + (2 * TENSORS * F32 + F32)


def test_sgd_foreach_is_three_launches_and_for_loop_three_per_tensor():
    assert len(step("sgd", "foreach").records("optimizer")) == 3
    assert len(step("sgd", "for-loop").records("optimizer")) == 3 * TENSORS


def test_for_loop_updates_belong_to_their_modules_foreach_to_the_optimizer():
    loop = step("adam", "for-loop").records("optimizer")
    assert {r["module"] for r in loop} == {"0", "2"}
    assert {r["layer_type"] for r in loop} == {"Linear"}
    foreach = step("adam", "foreach").records("optimizer")
    assert {(r["module"], r["layer_type"]) for r in foreach} == {("", "Adam")}


def test_optimizer_state_in_the_memory_report():
    """Adam keeps exp_avg and exp_avg_sq per element and a 4-byte step counter per tensor;
    SGD with momentum one buffer."""
    assert step("adam", "foreach").memory.optimizer_state_bytes == 2 * N * F32 + TENSORS * F32
    assert step("sgd", "foreach").memory.optimizer_state_bytes == N * F32


def test_the_optimizer_phase_is_in_every_view():
    g = step("adamw", "foreach")
    assert set(g.totals()) == {"forward", "backward", "optimizer", "overall"}
    assert {r["phase"] for r in g.to_dict()["nodes"]} == {"forward", "backward", "optimizer"}
    assert len(g.breakdown("phase")) == 3
    assert g.model.optimizer == "adamw (foreach)"
    with pytest.raises(UsageError, match="optimizer"):
        g.records("nope")


def test_the_user_model_is_not_touched_by_the_optimizer():
    model = mlp()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    fxroof.analyze(model, torch.randn(BATCH, IN), loss="cross_entropy", optimizer="sgd")
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) and p.grad is None


# ---- the loss ---------------------------------------------------------------------------------
def test_cross_entropy_loss_phase_in_closed_form():
    """log_softmax over (B, C) and nll_loss: the loss layer holds exactly those two forward
    ops and their two backward ops; the backward seed is loss.backward()'s ones_like."""
    g = fxroof.analyze(mlp(), torch.randn(BATCH, IN), loss="cross_entropy")
    loss = [(r["op"], r["phase"]) for r in g.records() if r["module"] == "loss"]
    assert sorted(loss) == sorted([("_log_softmax", "forward"), ("nll_loss_forward", "forward"),
                                   ("nll_loss_backward", "backward"),
                                   ("_log_softmax_backward_data", "backward")])
    assert {r["layer_type"] for r in g.records() if r["module"] == "loss"} == \
        {"CrossEntropyLoss"}
    assert g.model.backward and g.model.loss == "cross_entropy"
    assert not any(n.op == "placeholder" and "tangent" in n.name for n in g.backward.nodes)


def test_a_callable_loss_and_bad_losses():
    g = fxroof.analyze(mlp(), torch.randn(BATCH, IN), loss=lambda out: out.square().mean())
    ops = collections.Counter(r["op"] for r in g.records("forward") if r["module"] == "loss")
    assert ops["pow"] + ops["mul"] >= 1 and ops["mean"] == 1
    with pytest.raises(UsageError, match="Unknown loss"):
        fxroof.analyze(mlp(), torch.randn(BATCH, IN), loss="hinge")
    with pytest.raises(FxroofError, match="class logits"):
        fxroof.analyze(nn.Flatten(0), torch.randn(BATCH, requires_grad=True),
                       loss="cross_entropy")
    with pytest.raises(FxroofError, match="not a floating scalar"):
        fxroof.analyze(mlp(), torch.randn(BATCH, IN), loss=lambda out: out)
    with pytest.raises(UsageError, match="Unknown optimizer"):
        fxroof.analyze(mlp(), torch.randn(BATCH, IN), optimizer="lion")


# ---- autocast -----------------------------------------------------------------------------
def _dtypes(g, op):
    return {r["dtype"] for r in g.records("forward") if r["op"] == op}


def test_cuda_autocast_policy_on_a_small_model():
    """CUDA autocast fp16 on Linear -> ReLU -> Linear -> cross-entropy: the two addmm run in
    fp16 after casting x, both weights and both biases (5 casts), relu stays fp16.
    cross_entropy_loss calls log_softmax with an explicit dtype (the input's, fp16), which
    fp32_set_opt_dtype leaves alone, and nll_loss (fp32 policy) casts the log-probabilities
    up: a sixth cast, to fp32. Parameters stay fp32."""
    g = fxroof.analyze(mlp(), torch.randn(BATCH, IN), device="cuda", amp="fp16",
                       loss="cross_entropy")
    assert _dtypes(g, "addmm") == {"float16"} and _dtypes(g, "relu") == {"float16"}
    casts = [r["dtype"] for r in g.records("forward") if r["op"] == "_to_copy"]
    assert sorted(casts) == ["float16"] * 5 + ["float32"]
    assert _dtypes(g, "_log_softmax") == {"float16"}
    assert {r["dtype"] for r in g.records("forward") if r["op"] == "nll_loss_forward"} == \
        {"float32"}
    # softmax with no dtype given runs in fp32 under the same policy
    soft = fxroof.analyze(nn.Sequential(nn.Linear(IN, OUT), nn.Softmax(-1)),
                          torch.randn(BATCH, IN), device="cuda", amp="fp16")
    assert _dtypes(soft, "_softmax") == {"float32"}
    assert g.model.dtype == "float32" and g.model.amp == "fp16"


def test_the_casts_cuda_autocast_makes_are_marked_and_the_models_own_are_not():
    """autocast_internal marks the casts autocast makes inside an op's kernel (C++: a
    fraction of a Python op's host cost, pipeline.AUTOCAST_HOST_SHARE), not a cast the
    model's forward calls itself, nor any op of a step without autocast."""
    class Casting(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(IN, OUT)

        def forward(self, x):
            return self.fc(x).to(torch.float32) * 2  # the model's own cast, to fp32

    g = fxroof.analyze(Casting(), torch.randn(BATCH, IN), device="cuda", amp="fp16")
    casts = [(r["dtype"], r["autocast_internal"]) for r in g.records() if r["op"] == "_to_copy"]
    # autocast's: x, the weight and the bias to fp16; the model's: the product back to fp32
    assert sorted(casts) == [("float16", True)] * 3 + [("float32", False)]
    assert not [r for r in g.records() if r["autocast_internal"] and r["op"] != "_to_copy"]
    plain = fxroof.analyze(Casting(), torch.randn(BATCH, IN), device="cuda")
    assert not any(r["autocast_internal"] for r in plain.records())


def test_our_cuda_policy_lists_the_ops_cuda_autocast_registers():
    """Every op with an AutocastCUDA kernel in this torch build has a policy here, bar the
    banned binary_cross_entropy, cuDNN's RNN (TargetDispatch._rnn casts as its kernel does)
    and the named-tensor overloads Python cannot call (torch 2.11 lists them, 2.14 does
    not)."""
    registered = {name for name in _ops_with_kernel("AutocastCUDA")
                  if "imname" not in name and not name.startswith("norm.names")}
    assert registered - set(cuda_policy()) <= {"binary_cross_entropy.default",
                                               "_cudnn_rnn.default"}
    assert set(cuda_policy()) <= registered


def test_cpu_autocast_is_torchs_own():
    g = fxroof.analyze(mlp(), torch.randn(BATCH, IN), amp="bf16")
    assert _dtypes(g, "addmm") == {"bfloat16"}


def test_amp_errors():
    with pytest.raises(UsageError, match="compute capability 8.0"):
        fxroof.analyze(mlp(), torch.randn(BATCH, IN), chip="t4", amp="bf16")
    with pytest.raises(UsageError, match="Unknown --amp"):
        fxroof.analyze(mlp(), torch.randn(BATCH, IN), amp="fp8")


# ---- the CUDA target's dispatch rules ------------------------------------------------------
def call(shape=(2, 8, 128, 64), dtype=torch.float16, **kw):
    k = kw.pop("k_shape", shape)
    return AttentionCall(tuple(shape), tuple(k), tuple(k), dtype, **kw)


# (case, capability, expected backend): from select_sdp_backend's constraints (sdp_utils.cpp)
SDPA_CASES = [
    ("fp16 on A100", (8, 0), call(), FLASH),
    ("bf16 on A100", (8, 0), call(dtype=torch.bfloat16), FLASH),
    ("fp32 on A100: flash needs half precision", (8, 0), call(dtype=torch.float32), EFFICIENT),
    ("fp16 on T4: flash needs sm80", (7, 5), call(), EFFICIENT),
    ("bf16 on T4: no kernel takes it", (7, 5), call(dtype=torch.bfloat16), MATH),
    ("a float mask rules out flash", (8, 0), call(has_mask=True, mask_dim=4), EFFICIENT),
    ("head dim 72 on A100 is flash", (8, 0), call(shape=(2, 8, 128, 72)), FLASH),
    ("head dim 288 > 256: not flash", (8, 0), call(shape=(2, 8, 128, 288)), EFFICIENT),
    ("head dim 6 unaligned: math", (8, 0), call(shape=(2, 8, 128, 6), has_mask=True,
                                                mask_dim=4), MATH),
    ("causal, seq q != seq k: not flash", (8, 0),
     call(is_causal=True, k_shape=(2, 8, 256, 64)), EFFICIENT),
    ("training head dim 200 on sm86: not flash", (8, 6),
     call(shape=(2, 8, 128, 200), requires_grad=True), EFFICIENT),
    ("H100 prefers cuDNN", (9, 0), call(), CUDNN),
    ("H100 fp32 falls to efficient", (9, 0), call(dtype=torch.float32), EFFICIENT),
    ("H100 dropout 0.1 (not k/16) skips cuDNN", (9, 0), call(dropout_p=0.1), FLASH),
    ("GQA without enable_gqa: math", (8, 0), call(k_shape=(2, 2, 128, 64)), MATH),
    ("GQA with enable_gqa: flash", (8, 0), call(k_shape=(2, 2, 128, 64), enable_gqa=True),
     FLASH),
    ("sm100 prefers cuDNN", (10, 0), call(), CUDNN),
    ("sm120 consumer Blackwell: flash", (12, 0), call(), FLASH),
]


@pytest.mark.parametrize("case,capability,c,expected", SDPA_CASES,
                         ids=[case for case, *_ in SDPA_CASES])
def test_sdpa_backend_rule(case, capability, c, expected):
    assert sdpa_backend(c, capability) == expected


def test_cudnn_head_dim_limits():
    assert can_use_cudnn(call(shape=(2, 8, 128, 256)), (9, 0))
    assert not can_use_cudnn(call(shape=(2, 8, 128, 256)), (8, 0))  # 128 below sm90
    # training at head dim 256 on sm90: cuDNN's backward takes 256/256
    assert can_use_cudnn(call(shape=(2, 8, 128, 256), requires_grad=True), (9, 0))
    assert not can_use_cudnn(call(shape=(2, 8, 128, 160), requires_grad=True), (9, 0))
    assert not can_use_cudnn(call(k_shape=(2, 8, 1, 64)), (9, 0))  # key length 1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.drop, self.head = nn.Linear(64, 192), nn.Dropout(0.1), nn.Linear(64, 10)

    def forward(self, x, mask=None):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 32).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.head(self.drop(o.transpose(1, 2).reshape(b, s, 64)).mean(1))


def _ops(g):
    return collections.Counter(r["op"] for r in g.records())


@pytest.mark.parametrize("chip,amp,kernel", [
    ("a100_sxm_40gb", "bf16", "_scaled_dot_product_flash_attention"),
    ("h100_sxm", "bf16", "_scaled_dot_product_cudnn_attention"),
    ("t4", "fp16", "_scaled_dot_product_efficient_attention"),
])
def test_cuda_target_records_the_chosen_attention_kernel_and_fused_dropout(chip, amp, kernel):
    g = fxroof.analyze(Block(), torch.randn(2, 16, 64), chip=chip, amp=amp, loss="cross_entropy")
    ops = _ops(g)
    assert g.model.device == "cuda"
    assert ops[kernel] == 1 and ops[kernel + "_backward"] == 1
    assert ops["native_dropout"] == 1 and ops["bernoulli_"] == 0
    assert not any(op.startswith("_scaled_dot_product_attention_math") or op == "bmm"
                   for op in ops)
    assert g.coverage()["default_rule_ops"] == {}


class SelfAttention(nn.Module):
    """nn.MultiheadAttention, whose attention F.multi_head_attention_forward calls from
    inside a torch function (vit_b_16's encoder layers)."""

    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


@pytest.mark.parametrize("chip,amp,kernel", [
    ("a100_sxm_40gb", "bf16", "_scaled_dot_product_flash_attention"),
    ("h100_sxm", "bf16", "_scaled_dot_product_cudnn_attention"),
    ("h100_sxm", None, "_scaled_dot_product_efficient_attention"),
])
def test_multihead_attention_on_cuda_records_the_chosen_kernel(chip, amp, kernel):
    """Before, the CPU's flash kernel was recorded for a CUDA target, which no GPU has: the
    timing pass failed on an H200 at vit_b_16's first attention."""
    sdpa = F.scaled_dot_product_attention
    g = fxroof.analyze(SelfAttention(), torch.randn(2, 16, 64), chip=chip, amp=amp,
                       loss="cross_entropy")
    attention = [r["op"] for r in g.records() if "attention" in r["op"]]
    assert attention == [kernel, kernel + "_backward"]
    assert F.scaled_dot_product_attention is sdpa  # put back once the step is recorded
    cpu = fxroof.analyze(SelfAttention(), torch.randn(2, 16, 64), loss="cross_entropy")
    assert [r["op"] for r in cpu.records() if "attention" in r["op"]] == [
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward"]


def test_cpu_target_keeps_the_cpu_program():
    ops = _ops(fxroof.analyze(Block(), torch.randn(2, 16, 64), loss="cross_entropy"))
    assert ops["_scaled_dot_product_flash_attention_for_cpu"] == 1 and ops["bernoulli_"] == 1


def test_masked_attention_on_cuda_is_one_fused_kernel():
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    g = fxroof.analyze(Block(), torch.randn(2, 16, 64), mask, device="cuda", amp="fp16",
                       loss="cross_entropy")
    assert _ops(g)["_scaled_dot_product_efficient_attention"] == 1
    assert "_softmax" not in _ops(g)


def test_the_math_attention_under_cuda_autocast_computes_in_float32():
    """5-D q, k, v (NesT's blocks of tokens) leave every fused backend to the math one.
    CUDA's autocast casts q, k, v to fp16 and then runs the op with autocast excluded, so
    the math backend's own upcast holds (attention.cpp: q, k, v to fp32 unless
    allowFP16BF16ReductionMathSDP): both products and the softmax in fp32, the result cast
    back -- they had been recorded in fp16, each product cast down again by the policy."""
    class Nested(nn.Module):
        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q)

    g = fxroof.analyze(Nested(), torch.randn(2, 3, 4, 16, 8), device="cuda", amp="fp16")
    kinds = [(r["op"], r["dtype"]) for r in g.records()
             if r["op"] in ("bmm", "_safe_softmax", "_to_copy")]
    assert kinds == [("_to_copy", "float16")] * 3 + [("_to_copy", "float32")] * 3 + [
        ("bmm", "float32"), ("_safe_softmax", "float32"), ("_to_copy", "float16"),
        ("bmm", "float32"), ("_to_copy", "float16")]


def test_lstm_inference_on_cuda_is_one_cudnn_call_for_the_stack():
    lstm = nn.LSTM(8, 16, num_layers=2)
    ops = _ops(fxroof.analyze(lstm, torch.randn(5, 3, 8), device="cuda"))
    assert ops["_cudnn_rnn"] == 1 and ops["mkldnn_rnn_layer"] == 0
    assert _ops(fxroof.analyze(lstm, torch.randn(5, 3, 8)))["mkldnn_rnn_layer"] == 2


@pytest.mark.parametrize("nonlinearity,cell", [("tanh", 3), ("relu", 1)])
def test_a_plain_rnn_on_cuda_is_cudnns_call_too(nonlinearity, cell):
    """nn.RNN calls torch.rnn_tanh / rnn_relu, which on CUDA go to cuDNN as LSTM and GRU do
    (RNN.cpp's rnn_tanh_cudnn / rnn_relu_cudnn), not the CPU's per-step addmm and tanh. Over
    R = 5 x 3 rows, I = 8, H = 16, two layers with biases: forward 2 x R x H x (I_l + H)
    MACs' FLOPs + R x H x 3 (the two projections' sum and biases) + R x H (the activation);
    backward 4 x the MACs + R x H x cell (tanh' 3, relu' 1) + R x H (the bias gradient)."""
    rnn, x = nn.RNN(8, 16, num_layers=2, nonlinearity=nonlinearity), torch.randn(5, 3, 8)
    rows, hidden = 5 * 3, 16
    g = fxroof.analyze(rnn, x, device="cuda", loss=lambda out: out[0].sum())
    ops = _ops(g)
    assert ops["_cudnn_rnn"] == 1 and ops["_cudnn_rnn_backward"] == 1
    assert ops["addmm"] == 0 and ops["tanh"] == 0
    (forward,) = [r for r in g.records("forward") if r["op"] == "_cudnn_rnn"]
    assert forward["flops"] == sum(2 * rows * hidden * (inputs + hidden) + rows * hidden * 4
                                   for inputs in (8, 16))
    (backward,) = [r for r in g.records("backward") if r["op"] == "_cudnn_rnn_backward"]
    assert backward["flops"] == sum(4 * rows * hidden * (inputs + hidden)
                                    + rows * hidden * (cell + 1) for inputs in (8, 16))
    assert _ops(fxroof.analyze(rnn, x))["_cudnn_rnn"] == 0  # the CPU keeps its own


@pytest.mark.parametrize("cls,gates,cell", [(nn.LSTM, 4, 22), (nn.GRU, 3, 16)])
def test_rnn_training_on_cuda_is_one_cudnn_call_each_way(cls, gates, cell):
    """Backward of a 2-layer RNN over R = T*B rows, I = 8, H = 16: per layer, grad_input,
    the recurrent gradient and grad_weight repeat the forward's R*G*H*(I_l + H) MACs twice
    (4 FLOP per MAC), plus the cell's backward per hidden unit (LSTM 22, GRU 16) and the
    bias gradient R*G*H."""
    rnn = cls(8, 16, num_layers=2)
    g = fxroof.analyze(rnn, torch.randn(5, 3, 8), device="cuda", loss=lambda out: out[0].sum())
    backward = [r for r in g.records("backward") if "rnn" in r["op"]]
    assert [r["op"] for r in backward] == ["_cudnn_rnn_backward"]
    rows, hidden = 5 * 3, 16
    expected = sum(4 * rows * gates * hidden * (inputs + hidden) + rows * hidden * cell
                   + rows * gates * hidden for inputs in (8, 16))
    assert backward[0]["flops"] == expected
    assert backward[0]["forward_node"] is not None
    assert all(p.grad is None for p in rnn.parameters())


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_cuda_autocast_runs_cudnns_rnn_in_fp16_copying_its_weights_each_call(amp):
    """CUDA's autocast kernel for _cudnn_rnn (aten/src/ATen/cudnn/AutocastRNN.cpp) casts the
    input and states to fp16 -- fp16 under bf16 autocast too -- and, every call, fills a
    new fp16 flat buffer and copies each fp32 weight into it. LSTM(8, 16, 2 layers): weights
    8x64 + 16x64 + 2x64 (layer 0), 16x64 + 16x64 + 2x64 (layer 1) = 3,840 elements; each
    copy reads 4 and writes 2 bytes an element; the products are the fp32 step's."""
    lstm, x = nn.LSTM(8, 16, num_layers=2), torch.randn(5, 3, 8)
    plain = fxroof.analyze(lstm, x, device="cuda", chip="a100_sxm_80gb")
    g = fxroof.analyze(lstm, x, device="cuda", chip="a100_sxm_80gb", amp=amp)
    (rnn32,) = [r for r in plain.records("forward") if r["op"] == "_cudnn_rnn"]
    (rnn,) = [r for r in g.records("forward") if r["op"] == "_cudnn_rnn"]
    assert rnn32["dtype"] == "float32" and rnn["dtype"] == "float16"
    assert rnn["flops"] == rnn32["flops"] and 2 * rnn["bytes"] == rnn32["bytes"]
    weights = 3840
    copies = [r for r in g.records("forward") if r["op"] == "copy_"]
    assert len(copies) == 8 and sum(r["bytes"] for r in copies) == weights * (4 + 2)
    assert [r["bytes"] for r in g.records("forward") if r["op"] == "zeros"
            and r["dtype"] == "float16"] == [weights * 2]
    casts = [r["bytes"] for r in g.records("forward") if r["op"] == "_to_copy"]
    assert casts == [5 * 3 * 8 * 6, 2 * 3 * 16 * 6, 2 * 3 * 16 * 6]  # x, h0, c0
    assert not [r for r in plain.records("forward") if r["op"] in ("copy_", "_to_copy")]


def test_a_training_lstm_under_cuda_autocast_casts_each_weights_gradient_back_to_fp32():
    lstm = nn.LSTM(8, 16, num_layers=2)
    g = fxroof.analyze(lstm, torch.randn(5, 3, 8), device="cuda", amp="fp16",
                       loss=lambda out: out[0].float().sum())
    backward = g.records("backward")
    assert [r["dtype"] for r in backward if r["op"] == "_cudnn_rnn_backward"] == ["float16"]
    to_fp32 = [r for r in backward if r["op"] == "_to_copy" and r["dtype"] == "float32"]
    assert len(to_fp32) == 8 and sum(r["bytes"] for r in to_fp32) == 3840 * (2 + 4)
    assert all(p.grad is None for p in lstm.parameters())


@pytest.mark.parametrize("a_shape,b_shape,offsets", [
    ((10, 16), (3, 16, 8), [2, 7, 10]),      # tokens by expert x each expert's weight
    ((3, 10, 16), (16, 8), [3, 5, 8]),       # 3-d x 2-d
    ((8, 16), (16, 8), [4, 9, 16]),          # a ragged reduction
    ((3, 10, 16), (3, 16, 8), None)])        # batched
def test_grouped_products_in_float32_take_the_kernels_shapes(a_shape, b_shape, offsets):
    """Under fxroof's shape functions a fp32 _grouped_mm on fake tensors comes out as the
    CPU kernel's real result does (torch's own shape function refuses fp32), and a bf16 one
    as torch's shape function makes it."""
    from fxroof.target_dispatch import kernel_shapes
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    if len(a_shape) == 2 and len(b_shape) == 2:  # the offsets split the reduction
        a, b = torch.randn(a_shape[1], a_shape[0]).t(), torch.randn(b_shape)
    offs = torch.tensor(offsets, dtype=torch.int32) if offsets else None
    real = F.grouped_mm(a, b, offs=offs)
    with kernel_shapes(), FakeTensorMode() as mode:
        fakes = [mode.from_tensor(t) if t is not None else None for t in (a, b, offs)]
        fake = F.grouped_mm(fakes[0], fakes[1], offs=fakes[2])
        if offs is None:  # torch's bf16 shape function checks 16-byte strides: 3-d x 3-d
            half = F.grouped_mm(fakes[0].bfloat16(), fakes[1].bfloat16())
            assert half.shape == real.shape and half.dtype == torch.bfloat16
    assert fake.shape == real.shape and fake.dtype == real.dtype == torch.float32


def test_a_gpu_chip_implies_the_cuda_target_and_its_capability():
    assert Target.of(None, fxroof.chips.get_chip("h100_sxm")) == Target("cuda", (9, 0),
                                                                         "h100_sxm")
    assert Target.of("cpu", fxroof.chips.get_chip("h100_sxm")).device == "cpu"
    assert Target.of("cuda").capability == (8, 0)
    # an AMD GPU has no compute capability: PyTorch's ROCm build runs it as 'cuda'
    assert Target.of(None, fxroof.chips.get_chip("mi300x")) == Target("cuda", (8, 0),
                                                                        "mi300x")
    assert Target.of(None, fxroof.chips.get_chip("xeon_w9_3495x")).device == "cpu"


def test_channels_last_inputs_and_weights():
    conv = nn.Conv2d(3, 8, 3)
    g = fxroof.analyze(conv, torch.randn(2, 3, 16, 16), memory_format="channels_last")
    x = next(n for n in g.forward.nodes if n.op == "placeholder" and "input" in n.name)
    assert x.meta["val"].is_contiguous(memory_format=torch.channels_last)
    out = next(n for n in g.forward.nodes if n.op == "call_function")
    assert out.meta["val"].is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(UsageError, match="memory_format"):
        fxroof.analyze(conv, torch.randn(2, 3, 16, 16), memory_format="nhwc")


class _OpDtypes(TorchDispatchMode):
    """(op, output dtype) of every op dispatched below autograd."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        if isinstance(first, torch.Tensor) and func.namespace == "aten":
            self.seen.append((func.overloadpacket.__name__, first.dtype))
        return out


class Mixed(nn.Module):
    """Ops from each list of CUDA's policy: linear (fp16), layer_norm / exp / softplus (fp32),
    softmax without a dtype (fp32_set_opt_dtype), addcmul (promote), cross-entropy."""

    def __init__(self):
        super().__init__()
        self.fc, self.ln = nn.Linear(IN, HIDDEN), nn.LayerNorm(HIDDEN)

    def forward(self, x):
        h = self.fc(x)
        y = torch.addcmul(self.ln(h), h.exp(), F.softplus(h)).softmax(-1)
        return F.cross_entropy(y, torch.zeros(x.shape[0], dtype=torch.long, device=x.device))


def test_cuda_autocast_emulation_matches_the_real_autocastcuda_kernels():
    """Ground truth: torch's own AutocastCUDA kernels run on fake CUDA tensors (the forward
    needs no GPU; only autograd's engine does). The emulation on CPU tensors must dispatch
    the same ops in the same dtypes."""
    model = Mixed()

    def run(device, autocast):
        with FakeTensorMode(allow_non_fake_inputs=True):
            state = {n: torch.empty(p.shape, device=device, requires_grad=True)
                     for n, p in model.named_parameters()}
            x = torch.empty(BATCH, IN, device=device)
            with autocast(), _OpDtypes() as log:
                torch.func.functional_call(model, state, (x,))
        return log.seen

    @contextlib.contextmanager
    def real_cuda_autocast():
        torch._C.set_autocast_enabled("cuda", True)
        torch._C.set_autocast_dtype("cuda", torch.float16)
        torch._C.autocast_increment_nesting()
        try:
            yield
        finally:
            torch._C.autocast_decrement_nesting()
            torch._C.set_autocast_enabled("cuda", False)
            torch._C.clear_autocast_cache()

    truth = run("cuda", real_cuda_autocast)
    assert ("addmm", torch.float16) in truth and ("_softmax", torch.float32) in truth
    assert run("cpu", lambda: cuda_autocast(torch.float16)) == truth


# ---- the target on the roofline and in the study ----------------------------------------
def test_roofline_sources_and_study_costs_are_the_targets_program(tmp_path):
    from fxroof.roofline_points import load_sources
    from fxroof.study.sweep import run_cost
    (source,) = load_sources(["squeezenet1_0"], [1], False, None, device="cuda", amp="bf16")
    assert source["dtype"] == "bfloat16"  # the figure draws the roof autocast's matmuls use
    assert {r["dtype"] for r in source["records"] if r["op"] == "convolution"} == {"bfloat16"}
    on_cuda, on_cpu = run_cost("squeezenet1_0", 1, "cuda"), run_cost("squeezenet1_0", 1, "cpu")
    ops_of = lambda result: {r["op"] for r in result["train"]["records"]}  # noqa: E731
    # training dropout: one fused kernel on CUDA, CPU's bernoulli mask and multiply on the CPU
    assert "native_dropout" in ops_of(on_cuda) and "native_dropout" not in ops_of(on_cpu)
    out = tmp_path / "r.png"
    fxroof.plot_roofline(["squeezenet1_0"], ["h100_sxm"], str(out), device="cuda", amp="bf16")
    assert out.stat().st_size > 0


def test_autocast_casts_attention_inputs_before_cuda_chooses_a_backend():
    """q, k, v in fp32 (as rotary embeddings leave them): CUDA's autocast casts them to the
    lower precision first (sdpa is on its lower-precision list), so flash, not the
    fp32-only-capable memory-efficient kernel, runs; three casts precede it."""
    class Attend(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    q = torch.randn(1, 2, 16, 64)
    g = fxroof.analyze(Attend(), q, q.clone(), q.clone(), device="cuda", amp="bf16")
    ops = [(r["op"], r["dtype"]) for r in g.records()]
    assert ops == [("_to_copy", "bfloat16")] * 3 + [
        ("_scaled_dot_product_flash_attention", "bfloat16")]


def test_an_unpadded_causal_lm_runs_the_kernel_the_real_step_runs():
    """hf: Llama on its own token ids: transformers sees no padding and no packing on real
    data and calls SDPA with is_causal and no mask, so CUDA runs flash (sm80) or cuDNN
    (sm90) attention, in bf16 under autocast, and no mask is built."""
    config = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
              "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000}
    for chip, kernel in (("a100_sxm_40gb", "_scaled_dot_product_flash_attention"),
                         ("h100_sxm", "_scaled_dot_product_cudnn_attention")):
        g = fxroof.analyze("hf:llama", hf_config=config, seq_len=64, chip=chip, amp="bf16",
                           loss="lm")
        attention = [(r["op"], r["dtype"]) for r in g.records("forward")
                     if "attention" in r["op"]]
        assert attention == [(kernel, "bfloat16")] * 2
        assert not any(r["op"] in ("tril", "triu", "where", "masked_fill")
                       for r in g.records("forward"))
