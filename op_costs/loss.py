"""Loss functions that run as their own ATen kernels, forward and backward.

N is the number of loss terms (elements of ``self`` for elementwise losses, samples for
NLL); ``reduction`` adds N - 1 adds for "sum" and N (the adds and one divide) for "mean",
nothing for "none" -- ATen's enum: 0 none, 1 mean, 2 sum.

* mse: sub, square per term: 2N;  backward g * 2 * (x - y): 3N
* huber / smooth_l1: d = x - y, |d|, compare, then 0.5 d^2 (/ beta) or |d| - 0.5 delta with
  its scale: 5N;  backward: d, compare, g * d or g * sign(d) (scaled): 4N
* soft_margin: log(1 + exp(-y x)): mul, neg, exp, log1p: 4N;  backward
  -y * sigmoid(-y x) * g: 2 + 4 + 2 = 8N
* binary_cross_entropy: -(y log x + (1 - y) log(1 - x)): 2 logs, 2 rsubs, 2 muls, add, neg:
  8N (+ N with weight);  backward g * (x - y) / max(x (1 - x), eps): sub, rsub, mul, clamp,
  div, mul: 6N (+ N with weight)
* binary_cross_entropy_with_logits, stable form (1 - y) x + max(-x, 0) + log(exp(-m) +
  exp(-x - m)): rsub, mul, max, neg-add-exp x2, add, log, add: 9N (+ 2N to make
  1 + (pos_weight - 1) y and N to apply it; + N with weight)
* nll_loss (and 2d): pick -x[target] (times its class weight) per sample: N, plus the
  reduction; reads only the picked entries;  backward: zero-fill grad_input, write -g * w at
  each target: N FLOPs
* multi_margin (C classes per sample): max(0, margin - x[y] + x[i]) [^2]: sub, add, max
  [, square], sum: 4 per logit (5 for p = 2) + a divide by C per sample;  backward 3 per logit
* multilabel_margin: every (target, non-target) pair of a sample's C classes: 1 - (x[j] -
  x[i]) and a max: 3 C^2 per sample + a divide by C;  backward likewise 3 C^2
"""
from __future__ import annotations

from op_costs.registry import VECTOR, Cost, register

aten = __import__("torch").ops.aten

NONE, MEAN, SUM = 0, 1, 2


def reduce_flops(terms: int, reduction: int) -> int:
    return {NONE: 0, MEAN: terms, SUM: max(terms - 1, 0)}[reduction]


def elementwise_loss(per_term: int):
    def rule(x, target, reduction=MEAN, *args, out, **kwargs):
        return Cost(flops=per_term * x.numel + reduce_flops(x.numel, reduction))
    return rule


def elementwise_loss_backward(per_term: int):
    def rule(grad, x, *args, out, **kwargs):
        return Cost(flops=per_term * x.numel)
    return rule


for _packet, _forward, _backward_packet, _backward in [
    (aten.mse_loss, 2, aten.mse_loss_backward, 3),
    (aten.huber_loss, 5, aten.huber_loss_backward, 4),
    (aten.smooth_l1_loss, 5, aten.smooth_l1_loss_backward, 4),
    (aten.soft_margin_loss, 4, aten.soft_margin_loss_backward, 8),
]:
    name = _packet.__name__
    register(_packet, op_class=VECTOR, name=f"loss[{name}]")(elementwise_loss(_forward))
    register(_backward_packet, op_class=VECTOR, name=f"loss[{name}_backward]")(
        elementwise_loss_backward(_backward))


@register(aten.binary_cross_entropy, op_class=VECTOR)
def binary_cross_entropy(x, target, weight=None, reduction=MEAN, *, out, **_):
    return Cost(flops=(8 + (weight is not None)) * x.numel + reduce_flops(x.numel, reduction))


@register(aten.binary_cross_entropy_backward, op_class=VECTOR)
def binary_cross_entropy_backward(grad, x, target, weight=None, reduction=MEAN, *, out, **_):
    return Cost(flops=(6 + (weight is not None)) * x.numel)


@register(aten.binary_cross_entropy_with_logits, op_class=VECTOR)
def binary_cross_entropy_with_logits(x, target, weight=None, pos_weight=None, reduction=MEAN,
                                     *, out, **_):
    per_term = 9 + (3 if pos_weight is not None else 0) + (weight is not None)
    return Cost(flops=per_term * x.numel + reduce_flops(x.numel, reduction))


def _nll_picked_bytes(x, target, weight) -> int:
    picked = target.numel
    return target.nbytes + picked * x.itemsize + (picked * weight.itemsize
                                                  if weight is not None else 0)


@register(aten.nll_loss_forward, aten.nll_loss2d_forward, op_class=VECTOR)
def nll_loss(x, target, weight, reduction, ignore_index, *, out, **_):
    terms = target.numel
    return Cost(flops=terms + reduce_flops(terms, reduction),
                bytes_read=_nll_picked_bytes(x, target, weight))


@register(aten.nll_loss_backward, aten.nll_loss2d_backward, op_class=VECTOR)
def nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight, *, out,
                      **_):
    return Cost(flops=target.numel,
                bytes_read=grad.nbytes + target.nbytes
                + (target.numel * weight.itemsize if weight is not None else 0))


@register(aten.multi_margin_loss, op_class=VECTOR)
def multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=MEAN, *, out, **_):
    samples = target.numel
    per_logit = 5 if p == 2 else 4
    return Cost(flops=per_logit * x.numel + samples + reduce_flops(samples, reduction))


@register(aten.multi_margin_loss_backward, op_class=VECTOR)
def multi_margin_loss_backward(grad, x, *args, out, **_):
    return Cost(flops=3 * x.numel)


def _pairs(x) -> int:
    classes = x.shape[-1] if x.shape else 1
    return (x.numel // max(classes, 1)) * classes * classes


@register(aten.multilabel_margin_loss_forward, op_class=VECTOR)
def multilabel_margin_loss(x, target, reduction, *, out, **_):
    samples = x.numel // (x.shape[-1] if x.shape else 1)
    return Cost(flops=3 * _pairs(x) + samples + reduce_flops(samples, reduction))


@register(aten.multilabel_margin_loss_backward, op_class=VECTOR)
def multilabel_margin_loss_backward(grad, x, target, reduction, is_target, *, out, **_):
    return Cost(flops=3 * _pairs(x))
