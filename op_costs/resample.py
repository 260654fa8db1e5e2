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

import math

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


# ---- grid_sample: interpolation at arbitrary (learned) coordinates ---------------------------
GRID_TAPS = {2: {0: 4, 1: 1, 2: 16}, 3: {0: 8, 1: 1}}  # rank -> interpolation mode -> taps


def _grid_points_and_taps(grid, interpolation_mode):
    rank = grid.shape[-1]
    return grid.numel // rank, rank, GRID_TAPS[rank].get(interpolation_mode, 1)


@register(aten.grid_sampler_2d, aten.grid_sampler_3d, op_class=VECTOR)
def grid_sampler(x, grid, interpolation_mode, padding_mode, align_corners, *, out, **_):
    """Per grid point: unnormalise each coordinate (mul, add) and one weight per tap; per
    output element: the taps' weighted sum, 2 * taps - 1 (nearest: a copy, 0)."""
    points, rank, taps = _grid_points_and_taps(grid, interpolation_mode)
    per_output = 2 * taps - 1 if taps > 1 else 0
    return Cost(flops=out.numel * per_output + points * (2 * rank + taps))


@register(aten.grid_sampler_2d_backward, aten.grid_sampler_3d_backward, op_class=VECTOR)
def grid_sampler_backward(grad, x, grid, interpolation_mode, padding_mode, align_corners,
                          output_mask, *, out, **_):
    """grad_input: each grad element scaled into its taps (2 * taps); grad_grid: per grad
    element and coordinate, the taps' weight derivatives times value times grad (2 * taps)."""
    points, rank, taps = _grid_points_and_taps(grid, interpolation_mode)
    want_input, want_grid = output_mask
    return Cost(flops=grad.numel * 2 * taps * (int(want_input) + rank * int(want_grid)))


# ---- affine_grid: the sampling grid of an affine map (spatial transformers) -----------------
def _base_grid_bytes(points: int, rank: int, itemsize: int) -> int:
    """The homogeneous base grid (x, y[, z], 1) per point, written then read by the bmm."""
    return points * (rank + 1) * itemsize


@register(aten.affine_grid_generator, op_class=VECTOR)
def affine_grid(theta, size, align_corners, *, out, **_):
    """ATen builds the base grid of (rank + 1)-vectors and bmm's it with theta's (rank, rank
    + 1) rows: each output coordinate a dot product of length rank + 1, 2 (rank + 1) FLOPs.
    (Its backward decomposes above autograd into ops costed on their own.)"""
    rank = out.shape[-1]
    base = _base_grid_bytes(out.numel // rank, rank, out.itemsize)
    return Cost(flops=2 * (rank + 1) * out.numel, bytes_read=theta.nbytes + base,
                bytes_written=out.nbytes + base)


def _aa_taps(n_in: int, n_out: int, width: int) -> int:
    """Antialiased interpolation: the filter (triangle, width 2; cubic, width 4) widens with
    the downscale factor (ATen's UpSampleKernel: support = width / 2 x scale)."""
    return width * max(math.ceil(n_in / n_out), 1)


def _aa_forward(width: int):
    def interpolate_antialiased(x, output_size, *args, out, **_):
        """Separable: a horizontal pass to (H_in, W_out), then a vertical pass to (H_out,
        W_out), each 2 * taps - 1 per element it writes."""
        (h_in, w_in), (h_out, w_out) = x.shape[-2:], out.shape[-2:]
        planes = out.numel // (h_out * w_out)
        horizontal = planes * h_in * w_out * (2 * _aa_taps(w_in, w_out, width) - 1)
        vertical = out.numel * (2 * _aa_taps(h_in, h_out, width) - 1)
        return Cost(flops=horizontal + vertical)
    return interpolate_antialiased


def _aa_backward(width: int):
    def interpolate_antialiased_backward(grad, output_size, input_size, *args, out, **_):
        """Both passes reversed: each element scattered into its taps (2 * taps)."""
        (h_out, w_out), (h_in, w_in) = grad.shape[-2:], out.shape[-2:]
        planes = grad.numel // (h_out * w_out)
        return Cost(flops=grad.numel * 2 * _aa_taps(h_in, h_out, width)
                    + planes * h_in * w_out * 2 * _aa_taps(w_in, w_out, width))
    return interpolate_antialiased_backward


# filter widths: the triangle of bilinear, the cubic of bicubic
ANTIALIASED = {2: aten._upsample_bilinear2d_aa, 4: aten._upsample_bicubic2d_aa}
for _width, _packet in ANTIALIASED.items():
    register(_packet, op_class=VECTOR, name="interpolate[antialiased]")(_aa_forward(_width))
    register(_backward_packet(_packet), op_class=VECTOR,
             name="interpolate_backward[antialiased]")(_aa_backward(_width))
