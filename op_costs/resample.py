"""Interpolation (``upsample_*``, i.e. F.interpolate), forward and backward.

Each output element is a weighted sum of a fixed number of input taps per channel:
nearest 1, linear 2, bilinear 4, trilinear 8, bicubic 16 (4 x 4).

* forward:  taps multiplies + (taps - 1) adds = (2 * taps - 1) FLOPs per output element;
            nearest copies, 0 FLOPs. The tap weights depend only on the output coordinate and
            are shared by every (batch, channel) plane: not counted.
* backward: every grad_output element is scaled by each tap's weight and added into grad_input:
            2 * taps FLOPs per grad_output element (nearest: 1 add). grad_input is zero-filled
            and written once.
Bytes follow the standard model: read the input (grad_output) once, write the output once.
"""
from __future__ import annotations

from op_costs.registry import MEMORY, VECTOR, Cost, register

aten = __import__("torch").ops.aten

TAPS = {
    1: [aten.upsample_nearest1d, aten.upsample_nearest2d, aten.upsample_nearest3d,
        aten._upsample_nearest_exact1d, aten._upsample_nearest_exact2d,
        aten._upsample_nearest_exact3d],
    2: [aten.upsample_linear1d],
    4: [aten.upsample_bilinear2d],
    8: [aten.upsample_trilinear3d],
    16: [aten.upsample_bicubic2d],
}


def _forward(taps: int):
    def interpolate(x, *args, out, **kwargs):
        return Cost(flops=(2 * taps - 1) * out.numel if taps > 1 else 0)
    return interpolate


def _backward(taps: int):
    def interpolate_backward(grad_out, *args, out, **kwargs):
        return Cost(flops=(2 * taps if taps > 1 else 1) * grad_out.numel)
    return interpolate_backward


def _backward_packet(packet):
    return getattr(aten, packet.__name__ + "_backward")


for _taps, _packets in TAPS.items():
    register(*_packets, op_class=MEMORY if _taps == 1 else VECTOR,
             name="interpolate")(_forward(_taps))
    register(*map(_backward_packet, _packets), op_class=VECTOR,
             name="interpolate_backward")(_backward(_taps))
