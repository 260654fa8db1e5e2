"""The compiled view of a CUDA target (fxroof.compiled with fxroof.gpu_lowering): Inductor's
CUDA lowering read on a machine with no GPU, checked on programs whose kernels and traffic
can be written down by hand."""
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import fxroof
from fxroof import gpu_lowering
from fxroof.chips import get_chip
from fxroof.errors import FxroofError, UsageError


class ConvBnRelu(nn.Sequential):
    def __init__(self):
        super().__init__(nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                         nn.ReLU())


def test_conv_bn_relu_is_lowered_for_the_gpu_with_channels_last_convolutions():
    """Inductor's CUDA layout optimisation runs the convolution channels-last: the NCHW input
    and the weight are copied channels-last (each read and written once), the convolution
    is cuDNN's (extern), and the batch norm and ReLU are one generated kernel that reads
    the convolution's output and the four per-channel vectors and writes the NCHW result."""
    batch, c_in, c_out, size = 2, 8, 16, 12
    x = torch.randn(batch, c_in, size, size)
    g = fxroof.analyze(ConvBnRelu().eval(), x, compiled=True, device="cuda", chip="rtx_4090")
    assert (g.model.view, g.model.device) == ("compiled", "cuda")
    records = g.records()
    x_bytes, w_bytes, out_bytes = 4 * x.numel(), 4 * c_out * c_in * 9, 4 * batch * c_out * 144
    copies = sorted((r["bytes_read"], r["bytes_written"]) for r in records
                    if r["op"] == "copy")
    assert copies == [(w_bytes, w_bytes), (x_bytes, x_bytes)]
    (conv,) = [r for r in records if r["op"] == "convolution"]
    assert conv["layout"] == "channels_last" and conv["rule"] == "inductor extern[convolution]"
    assert (conv["bytes_read"], conv["bytes_written"]) == (x_bytes + w_bytes, out_bytes)
    assert conv["flops"] == 2 * c_in * 9 * batch * c_out * 144
    (epilogue,) = [r for r in records if "relu" in r["fused_nodes"]]
    assert (epilogue["bytes_read"], epilogue["bytes_written"]) == \
        (out_bytes + 4 * 4 * c_out, out_bytes)


def test_a_depthwise_convolution_inductor_lays_out_channels_last_is_named_cudnns():
    """An fp16 9 x 9 depthwise convolution over NCHW input: cuDNN's workload filter takes 1,
    3 and 5-wide filters only, so eager PyTorch runs ATen's own kernel ("[cuda native]");
    Inductor lays it out channels-last, which cuDNN takes whatever the filter, and the
    compiled view names the kernel so. Its counts stay the eager node's: 2 x the MACs
    (64 channels x 81 taps x 8 x 16 x 16 outputs) plus one add per output for the bias."""
    conv = nn.Conv2d(64, 64, 9, padding=4, groups=64)
    x = torch.randn(8, 64, 16, 16)
    views = [fxroof.analyze(conv, x, device="cuda", chip="rtx_4090", amp="fp16",
                            compiled=compiled) for compiled in (False, True)]
    (eager, kernel) = ([r for r in g.records() if r["op"] == "convolution"][0] for g in views)
    assert eager["rule"] == "convolution[depthwise][cuda native]"
    assert kernel["rule"] == "inductor extern[convolution[depthwise]]"
    assert kernel["layout"] == "channels_last"
    outputs = 8 * 64 * 16 * 16
    assert kernel["flops"] == eager["flops"] == 2 * 81 * outputs + outputs


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 32)

    def forward(self, x):
        return self.fc(x)


def test_autocast_casts_the_operands_and_runs_the_product_in_half_precision():
    """CUDA's FP16 autocast around the lowering: x (16 x 64), the weight (32 x 64) and the
    bias (32) each cast by a kernel of their own (fp32 read, fp16 written), the addmm
    reading the three in fp16 and writing its 16 x 32 result in fp16."""
    g = fxroof.analyze(Linear(), torch.randn(16, 64), compiled=True, device="cuda",
                       chip="rtx_4090", amp="fp16")
    records = g.records()
    casts = sorted((r["bytes_read"], r["bytes_written"]) for r in records
                   if r["op"] == "fused_convert_element_type")
    assert casts == [(4 * 32, 2 * 32), (4 * 16 * 64, 2 * 16 * 64), (4 * 32 * 64, 2 * 32 * 64)]
    (addmm,) = [r for r in records if r["op"] == "addmm"]
    assert addmm["dtype"] == "float16"
    assert (addmm["bytes_read"], addmm["bytes_written"]) == \
        (2 * (16 * 64 + 32 * 64 + 32), 2 * 16 * 32)
    assert addmm["flops"] == 2 * 16 * 64 * 32 + 16 * 32  # products and the bias add


class Attention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("chip, backend", [
    ("rtx_4090", "_scaled_dot_product_flash_attention"),       # sm89: flash takes fp16
    ("t4", "_scaled_dot_product_efficient_attention")])        # sm75: flash needs sm80
def test_attention_takes_the_backend_cuda_picks_on_the_target(chip, backend):
    q, k, v = (torch.randn(2, 4, 16, 64) for _ in range(3))
    g = fxroof.analyze(Attention(), q, k, v, compiled=True, device="cuda", chip=chip,
                       amp="fp16")
    (attention,) = [r for r in g.records() if r["op_class"] == "matrix"]
    assert attention["op"] == backend


def test_the_device_is_answered_from_the_chip_and_only_while_lowering():
    chip = get_chip("rtx_4090")
    facts = gpu_lowering.DeviceFacts.of(chip.compute_capability, chip)
    original = torch.cuda.get_device_properties
    with gpu_lowering.answering(facts):
        properties = torch.cuda.get_device_properties(0)
        assert properties.multi_processor_count == chip.multiprocessors == 128
        assert properties.max_threads_per_multi_processor == 1536  # sm89 (CUDA guide)
        assert torch.cuda.get_device_capability() == (8, 9)
    assert torch.cuda.get_device_properties is original
    from torch._inductor.runtime.hints import DeviceProperties
    assert DeviceProperties.create.cache_info().currsize == 0  # no chip's answers kept


def test_a_target_naming_no_chip_is_lowered_as_an_a100_would_be():
    facts = gpu_lowering.DeviceFacts.of((8, 0))
    assert (facts.major, facts.minor, facts.multi_processor_count) == (8, 0, 108)


counted = []


@torch.library.custom_op("fxroof_test::counted", mutates_args=())
def _counted(x: torch.Tensor) -> torch.Tensor:
    counted.append(x.shape)
    return x.clone()


@_counted.register_fake
def _(x):
    return torch.empty_like(x)


class Counting(nn.Module):
    def forward(self, x):
        return torch.ops.fxroof_test.counted(x.relu())


def test_the_regions_of_a_cuda_target_are_found_without_running_the_model():
    """Dynamo runs a CPU target's regions once to find them; a CUDA target's are found by
    shape alone (at a GPU's batch and dtype the CPU run would take minutes for nothing)."""
    x = torch.randn(4, 8)
    counted.clear()
    fxroof.analyze(Counting(), x, compiled=True)
    assert counted == [torch.Size([4, 8])]
    counted.clear()
    g = fxroof.analyze(Counting(), x, compiled=True, device="cuda")
    assert counted == [] and g.model.device == "cuda"


def test_freezing_on_a_cuda_target_is_refused_with_the_reason():
    with pytest.raises(UsageError, match="--freeze is Inductor's CPU"):
        fxroof.analyze(Linear().eval(), torch.randn(4, 64), compiled=True, device="cuda",
                       freeze=True)


def test_without_triton_the_answer_says_what_to_install(monkeypatch):
    monkeypatch.setattr(gpu_lowering, "has_triton_package", lambda: False)
    with pytest.raises(FxroofError, match="needs Triton.*pip install triton"):
        fxroof.analyze(Linear(), torch.randn(4, 64), compiled=True, device="cuda")


def test_the_summary_of_a_cuda_view_suggests_channels_last_weights_not_freezing():
    g = fxroof.analyze(ConvBnRelu().eval(), torch.randn(2, 8, 12, 12), compiled=True,
                       device="cuda")
    summary = g.summary()
    assert "--memory-format channels_last, are not" in summary
    assert "--freeze" not in summary


def test_a_compiled_step_is_predicted_faster_than_the_eager_one_it_fuses():
    """resnet18 at batch 64 on an RTX 4090, fp16: eager runs every batch norm, ReLU and
    residual add as a kernel of its own over NCHW maps cuDNN transposes; the compiled view
    has a kernel per epilogue over channels-last maps. Same chip, same rates: fewer bytes."""
    chip = get_chip("rtx_4090")
    eager = fxroof.analyze("resnet18", batch=64, device="cuda", chip=chip, amp="fp16")
    compiled = fxroof.analyze("resnet18", batch=64, device="cuda", chip=chip, amp="fp16",
                              compiled=True)
    assert compiled.totals()["overall"]["bytes"] < eager.totals()["overall"]["bytes"]
    assert compiled.totals()["overall"]["flops"] == pytest.approx(
        eager.totals()["overall"]["flops"], rel=0.01)
    assert len(compiled.records()) < len(eager.records())


def test_a_cpu_targets_compiled_view_takes_autocast_too():
    """--amp with --compiled on the CPU: the lowering runs under CPU autocast (bf16), so the
    product reads bf16 operands and writes a bf16 result."""
    g = fxroof.analyze(Linear(), torch.randn(16, 64), compiled=True, amp="bf16")
    (addmm,) = [r for r in g.records() if r["op"] == "addmm"]
    assert addmm["dtype"] == "bfloat16"
    assert (addmm["bytes_read"], addmm["bytes_written"]) == \
        (2 * (16 * 64 + 32 * 64 + 32), 2 * 16 * 32)


def test_a_training_step_is_lowered_for_the_gpu_with_its_backward():
    """A 64 -> 128 channel convolution (not small, not narrowing: Inductor's training layout
    heuristic keeps channels-last), its batch norm and ReLU, trained on a CUDA target. The
    joint graph is traced on the CPU under CUDA's policies and each partition lowered for
    CUDA: the forward convolution channels-last, and the backward one
    convolution_backward computing the weight gradient only (the input needs none) --
    reading the output gradient and the input, writing the weight's gradient."""
    batch, c_in, c_out, size = 2, 64, 128, 8
    layer = nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                          nn.BatchNorm2d(c_out), nn.ReLU())
    g = fxroof.analyze(layer, torch.randn(batch, c_in, size, size), compiled=True,
                       device="cuda", chip="rtx_4090", backward=True)
    records = g.records()
    macs = c_in * 9 * batch * c_out * size * size
    (forward,) = [r for r in records if r["op"] == "convolution"]
    assert forward["phase"] == "forward" and forward["layout"] == "channels_last"
    assert forward["flops"] == 2 * macs
    (backward,) = [r for r in records if r["op"] == "convolution_backward"]
    assert backward["phase"] == "backward" and backward["flops"] == 2 * macs
    x_bytes, out_bytes = 4 * batch * c_in * size * size, 4 * batch * c_out * size * size
    assert (backward["bytes_read"], backward["bytes_written"]) == \
        (out_bytes + x_bytes, 4 * c_out * c_in * 9)


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 16, 3, 4, 16).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("chip, backend", [("rtx_4090", "flash"), ("t4", "efficient")])
def test_attention_trains_through_the_backend_cuda_picks(chip, backend):
    g = fxroof.analyze(SelfAttention(), torch.randn(2, 16, 64), compiled=True,
                       device="cuda", chip=chip, amp="fp16", backward=True)
    matrix = [(r["phase"], r["op"]) for r in g.records() if r["op_class"] == "matrix"]
    assert ("forward", f"_scaled_dot_product_{backend}_attention") in matrix
    assert ("backward", f"_scaled_dot_product_{backend}_attention_backward") in matrix


def test_a_triton_launch_costs_the_host_a_share_of_an_eager_op_and_a_library_call_all():
    """On a GPU a generated kernel's host cost is GENERATED_KERNEL_HOST_SHARE of its class's
    t0 (a Triton launch from Inductor's wrapper against a Python-issued eager op); an
    extern kernel (cuBLAS here) goes through ATen's dispatcher and keeps the whole t0."""
    from fxroof.pipeline import GENERATED_KERNEL_HOST_SHARE
    from fxroof.chip_params import params as _params
    from fxroof.time_model import node_time

    chip = get_chip("rtx_4090")
    g = fxroof.analyze(Linear(), torch.randn(16, 64), compiled=True, device="cuda",
                       chip=chip, amp="fp16")
    records = g.records()
    cast = next(r for r in records if r["op"] == "fused_convert_element_type")
    (addmm,) = [r for r in records if r["op"] == "addmm"]
    assert node_time(cast, chip).host_s == pytest.approx(
        GENERATED_KERNEL_HOST_SHARE * _params(chip, "elementwise").t0)
    assert node_time(addmm, chip).host_s == pytest.approx(_params(chip, "gemm").t0)


def test_a_compiled_training_step_pays_no_autograd_engine_per_kernel(monkeypatch):
    """An eager training step's host costs carry the autograd engine's (every op records a
    backward node, every backward op runs through the engine); a compiled step is one
    autograd node around Inductor's kernels, so its prediction does not move with that
    factor while the eager one does."""
    from fxroof import prediction

    chip = get_chip("rtx_4090")
    step = dict(batch=1, device="cuda", chip=chip, backward=True)
    eager = fxroof.analyze("resnet18", **step).records()
    compiled = fxroof.analyze("resnet18", compiled=True, **step).records()
    before = [prediction.predict(r, chip)["overall"]["predicted_s"] for r in (eager, compiled)]
    monkeypatch.setattr(prediction, "AUTOGRAD_HOST_FACTOR", 3.0)
    after = [prediction.predict(r, chip)["overall"]["predicted_s"] for r in (eager, compiled)]
    assert after[0] > 1.5 * before[0]  # batch 1: host-bound, the factor shows
    assert after[1] == pytest.approx(before[1])


def test_a_figures_intensity_note_names_the_traffic_its_points_divide_by():
    from fxroof.roofline_points import traffic_note

    assert "Inductor's kernels: fused" in traffic_note([{"view": "compiled"}])
    assert "unfused eager" in traffic_note([{"view": "eager"}, {}])
    both = traffic_note([{"view": "eager"}, {"view": "compiled"}])
    assert "eager: unfused" in both and "compiled: Inductor's kernels" in both


def test_an_lstm_that_runs_between_regions_is_priced_as_cudnns_eager_kernel():
    """On a CUDA target the LSTM no region traces is in the view as the eager step records
    it, cuDNN's RNN kernel, and the predicted step pays for it: the view's prediction is
    more than its Inductor kernels' alone."""
    from fxroof.prediction import predict
    from tests.fixtures.user_models import Recurrent

    g = fxroof.analyze(Recurrent(), torch.randn(64, 32, 16), compiled=True, device="cuda",
                       chip="rtx_4090")
    records = g.records()
    assert sum(r["op"] == "_cudnn_rnn" for r in records) == 2
    kernels = [r for r in records if r["rule"].startswith("inductor")]
    chip = get_chip("rtx_4090")
    whole, compiled_only = (predict(rows, chip)["overall"]["predicted_s"]
                            for rows in (records, kernels))
    assert whole > compiled_only
