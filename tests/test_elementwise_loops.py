"""ATen's elementwise loops on a GPU: which loop a rule names (op_costs.pointwise's
loop_variant), the launch kind it becomes, its bound worked by hand, the roofline's use of
it, and the fit that gives launch_geometry's LOOP_* constants (planted constants recovered;
the shipped ones re-derived from the kept profiles)."""
import math
import os

import pytest
import torch

import fxroof
from fxroof import hidden_kernels, launch_geometry, op_classes, prediction, time_model
from fxroof.chips import load_chips, parse_chip
from op_costs import estimate
from op_costs.pointwise import loop_variant
from op_costs.registry import TensorMeta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
aten = torch.ops.aten


def meta(shape, dtype=torch.float32, stride=None):
    dense = TensorMeta.contiguous(shape, dtype)
    return TensorMeta(tuple(shape), tuple(stride) if stride else dense.stride, dtype)


def channels_last(n, c, h, w, dtype=torch.float32):
    return meta((n, c, h, w), dtype, (h * w * c, 1, w * c, c))


def test_the_loop_a_rule_names_follows_tensor_iterator():
    """TensorIterator's CUDA loop (CUDALoops.cuh, gpu_kernel_impl): the vectorised one when
    every operand shares the output's dense strides and dtype; the legacy one when one is
    broadcast or strided otherwise; a casting one when dtypes differ."""
    x, out = meta((8, 32, 7, 7)), meta((8, 32, 7, 7))
    assert loop_variant((x, x), out) is None
    assert loop_variant((x, meta((8, 32, 1, 1))), out) == "strided"  # an SE block's scale
    assert loop_variant((x, meta((32,))), meta((8, 32, 7, 7))) == "strided"  # a bias
    # the same layout, channels-last, is dense: the vectorised loop; mixed layouts are not
    cl = channels_last(8, 32, 7, 7)
    assert loop_variant((cl, cl), cl) is None
    assert loop_variant((cl, x), cl) == "strided"
    # under autocast: a bf16 activation and an fp32 one, same shape, then a layer scale
    half = meta((8, 32, 7, 7), torch.bfloat16)
    assert loop_variant((half, x), out) == "casting"
    assert loop_variant((half, meta((32, 1, 1))), out) == "strided casting"
    # a scalar (0-dim) and a bool mask are not operands the loop converts or broadcasts
    assert loop_variant((x, meta(())), out) is None
    assert loop_variant((meta((8, 32, 7, 7), torch.bool), x, x), out) is None
    # an output that is a gap-strided view (every other row written in place)
    gapped = meta((8, 32, 7, 7), stride=(2 * 32 * 49, 49, 7, 1))
    assert loop_variant((gapped, gapped), gapped) == "strided"
    # size-1 dimensions' strides are never used
    assert loop_variant((meta((8, 1, 7), stride=(7, 99, 1)),), meta((8, 1, 7))) is None


def test_the_rule_names_the_loop_on_real_calls():
    """Through the registry: the rule's name carries the variant, e.g. pointwise[mul][strided]."""
    def rule(op, *tensors):
        out = op(*tensors)
        return estimate(op, tuple(TensorMeta.of(t) for t in tensors), {},
                        TensorMeta.of(out)).rule

    x = torch.empty(4, 16, 5, 5)
    assert rule(aten.mul.Tensor, x, torch.empty(4, 16, 1, 1)) == "pointwise[mul][strided]"
    assert rule(aten.mul.Tensor, x, x) == "pointwise[mul]"
    assert rule(aten.add.Tensor, x, x.to(torch.bfloat16)) == "pointwise[add][casting]"
    assert rule(aten.gelu.default, x.transpose(0, 1)) == "gelu"  # its output keeps the layout
    assert rule(aten.gelu.default, x[:, ::2]) == "gelu[strided]"


def record(shape, rule, dtype="float32", layout=None, element=4):
    elements = math.prod(shape)
    return {"op": "mul", "op_class": "vector", "rule": rule, "dtype": dtype, "flops": elements,
            "bytes_read": 2 * elements * element, "bytes_written": elements * element,
            "bytes": 3 * elements * element, "shape": list(shape), "layout": layout,
            "faulted_bytes": None}


def test_a_loop_is_a_launch_kind_whatever_its_layout():
    for variant, kind in (("[strided]", "strided_loop"),
                          ("[strided casting]", "strided_casting_loop"),
                          ("[casting]", "casting_loop")):
        for layout in (None, "contiguous", "channels_last"):
            assert op_classes.launch_kind(record((8, 8), "pointwise[mul]" + variant,
                                                 layout=layout)) == kind
    assert op_classes.launch_kind(record((8, 8), "pointwise[mul]")) is None
    # a non-elementwise rule that happened to end so is not a loop
    conv = {**record((8, 8), "convolution[strided]"), "op": "convolution", "op_class": "matrix"}
    assert op_classes.launch_kind(conv) is None


def gpu_chip(cls="gpu"):
    elementwise = {"t0": 2e-5, "compute": 0.5, "memory": 0.8, "band": [1, 1]}
    return parse_chip({"id": "g", "name": "a chip", "class": cls, "vendor": "NVIDIA",
                       "multiprocessors": {"value": 132, "source": "(test)"},
                       "clock": {"value": 66.9e12 / (2 * 128 * 132)},
                       "peaks": {"fp32": {"value": 1e13, "unit": "vector"}},
                       "bandwidth": {"value": 3e12},
                       "calibration": {"elementwise": elementwise}}, "(test)")


def test_a_loop_bound_by_hand_and_its_price():
    """An SE block's scale, (256, 144, 28, 28) bf16 times (256, 144, 1, 1): 28.9M elements,
    115.6 MB moved (read 2 bytes, write 2 bytes each; the scale's few bytes aside). Per SM
    of 132: elements x 0.237 ns + bytes x 0.026 ns, which exceeds the 0.8 x 3 TB/s
    streaming time: the node takes the bound; on a CPU, the class's time."""
    assert launch_geometry.LOOP_ELEMENT_S == {"strided_loop": 0.237e-9,
                                              "strided_casting_loop": 0.408e-9,
                                              "casting_loop": 0.297e-9}
    assert launch_geometry.LOOP_BYTE_S == 0.026e-9
    shape = (256, 144, 28, 28)
    elements = 256 * 144 * 28 * 28
    scale = {**record(shape, "pointwise[mul][strided]", "bfloat16", element=2),
             "bytes_read": elements * 2 + 256 * 144 * 2, "bytes_written": elements * 2}
    scale["bytes"] = scale["bytes_read"] + scale["bytes_written"]
    by_hand = (elements * 0.237e-9 + scale["bytes"] * 0.026e-9) / 132
    assert by_hand == pytest.approx(7.47e-5, rel=1e-3)  # (6.850 + 3.008) ms / 132
    streamed = scale["bytes"] / (0.8 * 3e12)
    assert by_hand > 1.5 * streamed
    assert prediction.device_seconds(time_model.node_time(scale, gpu_chip())) == \
        pytest.approx(by_hand)
    assert hidden_kernels.launch_bound_s(scale, gpu_chip("cpu")) == 0
    vectorised = {**scale, "rule": "pointwise[mul]"}
    assert prediction.device_seconds(time_model.node_time(vectorised, gpu_chip())) == \
        pytest.approx(streamed)


def test_a_loop_on_a_slower_clock_takes_longer():
    """A CLOCKED_KINDS kernel: on an A100 (1.41 GHz from its 19.5 TFLOP/s over 108 SMs of 64
    lanes) the same per-SM cycles take 1.98 / 1.41 as long."""
    a100 = load_chips()["a100_sxm_80gb"]
    shape = (256, 240, 14, 14)
    node = record(shape, "pointwise[mul][strided casting]")
    clock = 19.5e12 / (2 * 64 * 108)
    hopper = 66.9e12 / (2 * 128 * 132)  # the H100's 66.9 TFLOP/s over 132 SMs of 128 lanes
    by_hand = (math.prod(shape) * 0.408e-9 + node["bytes"] * 0.026e-9) / 108 * hopper / clock
    assert hidden_kernels.launch_bound_s(node, a100) == pytest.approx(by_hand, rel=1e-6)


def test_the_loop_fit_recovers_planted_constants():
    """fit_launch_geometry.py on nodes of the three kinds, of varied bytes an element, timed
    by known constants per SM (0.3, 0.5 and 0.4 ns an element, 0.02 ns a byte): recovered;
    a model not among LOOP_FIT_MODELS and nodes under MIN_LOOP_ELEMENTS are left out."""
    from benchmarks import fit_launch_geometry as fit

    chip = load_chips()["h200_sxm"]
    planted = {"strided_loop": 0.3e-9, "strided_casting_loop": 0.5e-9, "casting_loop": 0.4e-9}
    nodes = []
    for kind, variant in (("strided_loop", "[strided]"), ("strided_casting_loop",
                                                           "[strided casting]"),
                          ("casting_loop", "[casting]")):
        for shape, element in (((64, 96, 56, 56), 2), ((64, 192, 28, 28), 4)):
            r = record(shape, "pointwise[mul]" + variant, element=element)
            seconds = (math.prod(shape) * planted[kind] + r["bytes"] * 0.02e-9) / 132
            nodes.append({**r, "time_s": seconds})
    wrong = {**nodes[0], "time_s": nodes[0]["time_s"] * 5}
    tiny = {**record((8, 8), "pointwise[mul][strided]"), "time_s": 1.0}
    found = fit.gather([{"name": "convnext_tiny", "nodes": nodes + [tiny]},
                        {"name": "resnet50", "nodes": [wrong]}], chip)
    fitted = fit.fit_elementwise_loops(found[fit.ELEMENTWISE_LOOP], chip)
    assert fitted["LOOP_ELEMENT_S"] == pytest.approx(planted)
    assert fitted["LOOP_BYTE_S"] == pytest.approx(0.02e-9)
    assert set(fit.fit_elementwise_loops(found[fit.ELEMENTWISE_LOOP][:1], chip).values()) \
        == {None}


def test_the_shipped_loop_constants_are_the_fit_of_the_kept_profiles():
    """LOOP_ELEMENT_S and LOOP_BYTE_S are fit_launch_geometry.py's least squares over the kept
    H100 and H200 profiles of LOOP_FIT_MODELS (both boards: 132 SMs at one clock), to three
    significant digits (two for the byte's); the kept profiles predate the loop variants,
    so the fit traces each model again (with_todays_rules)."""
    from benchmarks import fit_launch_geometry as fit
    from benchmarks.gpu_classes import read_profile

    measured = os.path.join(ROOT, "benchmarks", "measured")
    chip = load_chips()["h200_sxm"]
    profiles = [fit.with_todays_rules(read_profile(os.path.join(measured, name)))
                for name in sorted(os.listdir(measured))
                if "-profile-" in name
                and name.split("-profile-")[1].startswith(fit.LOOP_FIT_MODELS)]
    found = fit.gather(profiles, chip)[fit.ELEMENTWISE_LOOP]
    assert {m for m, _ in found} == set(fit.LOOP_FIT_MODELS)
    fitted = fit.fit_elementwise_loops(found, chip)
    for kind, value in fitted["LOOP_ELEMENT_S"].items():
        assert float(f"{value:.3g}") == launch_geometry.LOOP_ELEMENT_S[kind], kind
    assert float(f"{fitted['LOOP_BYTE_S']:.2g}") == launch_geometry.LOOP_BYTE_S


def test_an_analysed_se_block_prices_its_scale_as_a_loop():
    """End to end, on fake tensors for a GPU target: an SE block's x * scale is a strided
    loop, its squeeze's mean a row reduction, and an H200 prices the scale at its bound."""
    class SE(torch.nn.Module):
        def forward(self, x):
            return x * torch.sigmoid(x.mean((2, 3), keepdim=True))

    graph = fxroof.analyze(SE(), torch.empty(64, 96, 28, 28), device="cuda")
    (scale,) = [r for r in graph.records() if r["op"] == "mul"]
    assert scale["rule"] == "pointwise[mul][strided]"
    assert op_classes.launch_kind(scale) == "strided_loop"
    chip = load_chips()["h200_sxm"]
    bound = (64 * 96 * 28 * 28 * 0.237e-9 + scale["bytes"] * 0.026e-9) / 132
    assert hidden_kernels.launch_bound_s(scale, chip) == pytest.approx(bound)
