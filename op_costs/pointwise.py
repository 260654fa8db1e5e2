"""Elementwise ops: FLOPs = weight * output elements; broadcasting does not reduce the work.

A weight counts the arithmetic in the op's defining formula: +, -, *, /, compare/select, and
each transcendental (exp, log, tanh, erf, sqrt, rsqrt, sin, ...) as 1. The formula behind every
weight that is not 1 is written next to it. In-place variants (``relu_``) share their
functional form's rule.
"""
from __future__ import annotations

from op_costs.registry import VECTOR, Cost, first_output, register

aten = __import__("torch").ops.aten

# weight 1: one arithmetic op, compare, select or transcendental per element
_ONE = """
    add sub rsub mul div neg abs relu exp exp2 expm1 log log2 log10 log1p sqrt rsqrt
    reciprocal sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh erf erfc erfinv
    floor ceil round trunc frac sign sgn pow float_power maximum minimum fmax fmin
    clamp_min clamp_max remainder fmod atan2 hypot copysign
    eq ne lt le gt ge logical_not logical_and logical_or logical_xor
    bitwise_not bitwise_and bitwise_or bitwise_xor isnan isinf
    where masked_fill threshold threshold_backward square
    """

WEIGHTS = {name: 1 for name in _ONE.split()}
WEIGHTS.update({
    "clamp": 2,             # max(min(x, hi), lo)
    "hardtanh": 2,          # clamp to [lo, hi]
    "leaky_relu": 2,        # x > 0 ? x : a*x  (compare, mul)
    "elu": 4,               # x > 0 ? x : a*(exp(x) - 1)
    "celu": 5,              # elu with x/a inside the exp
    "selu": 5,              # scale * elu
    "sigmoid": 4,           # 1 / (1 + exp(-x))
    "logit": 3,             # log(x / (1 - x))
    "silu": 5,              # x * sigmoid(x)
    "hardsigmoid": 4,       # min(max(x + 3, 0), 6) / 6
    "hardswish": 5,         # x * hardsigmoid(x)
    "softplus": 3,          # log(1 + exp(x))  (beta = 1)
    "mish": 5,              # x * tanh(softplus(x))
    "addcmul": 3,           # self + v * t1 * t2
    "addcdiv": 3,           # self + v * t1 / t2
    "lerp": 3,              # self + w * (end - self)
    "_prelu_kernel": 2,     # x > 0 ? x : w*x
    "xlogy": 2,             # x * log(y)
    # backward of activations, dL/dx from dL/dy = g
    "hardtanh_backward": 2,       # g * (lo < x < hi)
    "leaky_relu_backward": 2,     # x > 0 ? g : a*g
    "elu_backward": 3,            # g * (x > 0 ? 1 : y + a)
    "sigmoid_backward": 3,        # g * y * (1 - y)
    "tanh_backward": 3,           # g * (1 - y*y)
    "logit_backward": 4,          # g / (x * (1 - x))
    "silu_backward": 9,           # g * s * (1 + x * (1 - s)), s = sigmoid(x) recomputed (4)
    "hardsigmoid_backward": 2,    # g / 6 inside (-3, 3)
    "hardswish_backward": 4,      # g * (x < -3 ? 0 : x <= 3 ? (2x + 3)/6 : 1)
    "softplus_backward": 5,       # g * sigmoid(x)
    "mish_backward": 12,          # g * (tanh(sp) + x * sigmoid(x) * (1 - tanh(sp)^2))
    "_prelu_kernel_backward": 3,  # dx = select(g, w*g); dw = x*g
    "native_dropout_backward": 2, # g * mask * scale
    "bernoulli": 1,               # uniform sample compared with p
})
GELU_ERF = 5            # 0.5 * x * (1 + erf(x / sqrt 2))
GELU_TANH = 9           # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
GELU_ERF_BACKWARD = 11  # g * (Phi(x) [4] + x * phi(x) [exp(-x^2/2)/sqrt(2 pi): 4, mul 1] + add)
GELU_TANH_BACKWARD = 18  # g * d/dx of the tanh form: re-evaluate it (9), sech^2 and chain (9)
DROPOUT = 3             # sample compare, mask multiply, 1/(1-p) scale


def _register_weights():
    for name, weight in WEIGHTS.items():
        packet = getattr(aten, name, None)
        if packet is None:
            continue

        def rule(*args, out, _weight=weight, **kwargs):
            return Cost(flops=_weight * first_output(out).numel)

        register(packet, op_class=VECTOR, name=f"pointwise[{name}]")(rule)


_register_weights()


@register(aten.gelu, op_class=VECTOR)
def gelu(x, *, out, approximate="none", **_):
    return Cost(flops=(GELU_TANH if approximate == "tanh" else GELU_ERF) * out.numel)


@register(aten.gelu_backward, op_class=VECTOR)
def gelu_backward(grad, x, *, out, approximate="none", **_):
    weight = GELU_TANH_BACKWARD if approximate == "tanh" else GELU_ERF_BACKWARD
    return Cost(flops=weight * out.numel)


@register(aten.native_dropout, op_class=VECTOR)
def native_dropout(x, p, train, *, out, **_):
    # In eval mode the op is an identity copy; in training it samples and masks.
    return Cost(flops=DROPOUT * x.numel if train else 0)
