"""ATen's NCHW linear and cubic interpolation kernels: a thread per output position, each
looping over every (image, channel) plane (fxroof.launch_geometry.interpolation_loop_s)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import fxroof
from fxroof import hidden_kernels, launch_geometry, op_classes, prediction, time_model
from fxroof.chips import load_chips


class Upsample(torch.nn.Module):
    def __init__(self, mode: str = "bilinear"):
        super().__init__()
        self.mode = mode

    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode=self.mode)


def _node(graph, op):
    (found,) = [r for r in graph.records() if r["op"] == op]
    return found


def test_the_loop_bound_by_hand():
    """(1024, 1024, 7, 7) -> 14 x 14 on an RTX 4090 (128 SMs of compute capability 8.9,
    1,536 resident threads: one 1,024-thread block an SM; 2.52 GHz): 196 positions are one
    block of 7 warps, 7 x 27 = 189 cycles under the 279-cycle trip, so 1024 x 1024 planes of
    279 cycles. At (16, 16, 1024, 1024) on 132 Hopper SMs holding two blocks each: 1,024
    blocks in ceil(1024 / 264) = 4 waves of 64 warps an SM, 64 x 27 = 1,728 cycles a plane."""
    assert launch_geometry.INTERPOLATION_WARP_CYCLES == 27
    assert launch_geometry.INTERPOLATION_TRIP_CYCLES == 279
    ada = 82.6e12 / (2 * 128 * 128)
    small = launch_geometry.interpolation_loop_s((1024, 1024, 14, 14), 128, (8, 9), ada)
    assert small == pytest.approx(1024 * 1024 * 279 / ada)
    hopper = 66.9e12 / (2 * 128 * 132)
    full = launch_geometry.interpolation_loop_s((16, 16, 1024, 1024), 132, (9, 0), hopper)
    assert full == pytest.approx(4 * 16 * 16 * 64 * 27 / hopper)
    assert launch_geometry.interpolation_loop_s((2, 3, 4, 4), None, (9, 0)) is None
    assert launch_geometry.interpolation_loop_s((2, 3, 4, 4), 132, (1, 0)) is None


@pytest.mark.parametrize("mode,op", [("bilinear", "upsample_bilinear2d"),
                                     ("bicubic", "upsample_bicubic2d")])
def test_an_nchw_interpolation_on_a_gpu_takes_its_loop_bound(mode, op):
    """End to end: the node is the loop kind, and on the 4090 it takes the bound, over 100x the
    time its 1 GB would stream in -- and nothing changes on a CPU."""
    graph = fxroof.analyze(Upsample(mode), torch.empty(1024, 1024, 7, 7), device="cuda")
    node = _node(graph, op)
    assert op_classes.launch_kind(node) == "interpolation_loop"
    chip = load_chips()["rtx_4090"]
    bound = 1024 * 1024 * 279 / (82.6e12 / (2 * 128 * 128))
    assert hidden_kernels.launch_bound_s(node, chip) == pytest.approx(bound)
    assert prediction.device_seconds(time_model.node_time(node, chip)) == pytest.approx(bound)
    assert bound > 100 * node["bytes"] / chip.bandwidth
    assert hidden_kernels.launch_bound_s(node, load_chips()["epyc_9654"]) == 0


def test_other_interpolations_take_their_bytes():
    """The nearest mode and the bilinear backward put a thread on every element, and a
    channels-last bilinear input of 16 channels or more takes its NHWC kernel: none of them
    is the loop kind."""
    x = torch.empty(8, 32, 7, 7)
    nearest = fxroof.analyze(Upsample("nearest"), x, device="cuda")
    assert op_classes.launch_kind(_node(nearest, "upsample_nearest2d")) is None
    trained = fxroof.analyze(Upsample(), x.requires_grad_(), device="cuda",
                             loss=lambda out: out.sum())
    backward = _node(trained, "upsample_bilinear2d_backward")
    assert op_classes.launch_kind(backward) is None
    last = fxroof.analyze(Upsample(), torch.empty(8, 32, 7, 7), device="cuda",
                          memory_format="channels_last")
    assert op_classes.launch_kind(_node(last, "upsample_bilinear2d")) is None
    assert math.prod(_node(last, "upsample_bilinear2d")["shape"]) == 8 * 32 * 14 * 14
