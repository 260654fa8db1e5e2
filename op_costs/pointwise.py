"""Elementwise ops: FLOPs = weight * output elements; broadcasting does not reduce the work.

A weight counts the arithmetic in the op's defining formula: +, -, *, /, compare/select, and
each transcendental (exp, log, tanh, erf, sqrt, rsqrt, sin, ...) as 1. The formula behind every
weight that is not 1 is written next to it. In-place variants (``relu_``) share their
functional form's rule.
"""
from __future__ import annotations

import torch

from op_costs.registry import (VECTOR, Cost, TensorMeta, aten_op, first_output, register,
                               register_tag, tensors_in)

aten = torch.ops.aten

# weight 1: one arithmetic op, compare, select or transcendental per element
_ONE = """
    add sub rsub mul div neg abs relu exp exp2 expm1 log log2 log10 log1p sqrt rsqrt
    reciprocal sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh erf erfc erfinv
    floor ceil round trunc frac sign sgn pow maximum minimum fmax fmin
    clamp_min clamp_max remainder fmod atan2 hypot copysign
    eq ne lt le gt ge logical_not logical_and logical_or logical_xor
    bitwise_not bitwise_and bitwise_or bitwise_xor isnan isinf
    where masked_fill threshold threshold_backward
    deg2rad rad2deg heaviside nan_to_num signbit isposinf isneginf
    """

WEIGHTS = {name: 1 for name in _ONE.split()}
WEIGHTS.update({
    "clamp": 2,             # max(min(x, hi), lo)
    "hardtanh": 2,          # clamp to [lo, hi]
    "leaky_relu": 2,        # x > 0 ? x : a*x  (compare, mul)
    "elu": 4,               # x > 0 ? x : a*(exp(x) - 1)
    "celu": 5,              # elu with x/a inside the exp
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
    "_prelu_kernel_backward": 3,  # dx = select(g, w*g); dw = x*g
    "native_dropout_backward": 2, # g * mask * scale
    "bernoulli": 1,               # uniform sample compared with p
    "logaddexp": 5,               # m + log1p(exp(-|a - b|)), m = max(a, b): max, sub, abs...
    "logaddexp2": 5,              # the same in base 2
    "sinc": 3,                    # sin(pi x) / (pi x)
    "floor_divide": 2,            # floor(a / b)
    "hardshrink": 2,              # |x| > l ? x : 0  (abs, compare-select)
    "softshrink": 3,              # x > l ? x - l : x < -l ? x + l : 0
    "hardshrink_backward": 2,     # |x| > l ? g : 0
    "softshrink_backward": 2,     # |x| > l ? g : 0
    "log_sigmoid_backward": 5,    # g * (1 - sigmoid(x))  (sigmoid 4, rsub-mul 1)
    "rrelu_with_noise": 3,        # sample a in [l, u], x >= 0 ? x : a*x
    "rrelu_with_noise_backward": 2,  # x >= 0 ? g : noise*g
    "polar": 4,                   # (r cos t, r sin t)
    "complex": 1,                 # interleave re, im
})
# Complex operands: one complex add is 2 real adds; a complex multiply (a+bi)(c+di) is 4 real
# multiplies + 2 adds; a division is that times conj(d) over |d|^2 (6 + 3) and 2 divides.
COMPLEX_WEIGHTS = {"add": 2, "sub": 2, "rsub": 2, "neg": 2, "mul": 6, "div": 11}
# Every other op PyTorch tags pointwise (special functions, bessel, gamma, ...): one function
# evaluation per output element, the convention for transcendentals above.
TAGGED_POINTWISE = 1
GELU_ERF = 5            # 0.5 * x * (1 + erf(x / sqrt 2))
GELU_TANH = 9           # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
GELU_ERF_BACKWARD = 11  # g * (Phi(x) [4] + x * phi(x) [exp(-x^2/2)/sqrt(2 pi): 4, mul 1] + add)
GELU_TANH_BACKWARD = 18  # g * d/dx of the tanh form: re-evaluate it (9), sech^2 and chain (9)
DROPOUT = 3             # sample compare, mask multiply, 1/(1-p) scale

# The loop a GPU runs an elementwise op with (ATen's CUDA TensorIterator, gpu_kernel_impl in
# aten/src/ATen/native/cuda/CUDALoops.cuh), which the rule names as its variant. Operands
# that all share the output's dense strides and dtype take the vectorised loop (no
# variant). Any other layout -- an operand broadcast (an SE block's scale, a layer scale, a
# bias) or strided unlike the output -- takes the legacy loop, which computes every
# operand's offset per element (STRIDED); operands of different dtypes are converted per
# element (CASTING: a bf16 activation times an fp32 parameter under autocast).
STRIDED, CASTING = "strided", "casting"


def _dense_strides(meta: TensorMeta) -> bool:
    """Whether a tensor's elements fill its memory without gaps or overlaps, in some order of
    its dimensions (size-1 dimensions, whose stride is never used, aside)."""
    expected = 1
    for size, stride in sorted((d for d in zip(meta.shape, meta.stride) if d[0] > 1),
                               key=lambda d: d[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _used_strides(meta: TensorMeta) -> tuple:
    return tuple(stride for size, stride in zip(meta.shape, meta.stride) if size > 1)


def loop_variant(args, out) -> str | None:
    """STRIDED, CASTING, both ("strided casting") or None (the vectorised loop) for an
    elementwise op of these operands. A 0-dim tensor counts as a scalar, which TensorIterator
    passes by value (a CPU scalar; a 0-dim CUDA tensor would be broadcast), and a bool
    operand (a mask, where's condition) is read as bool by the op's own functor."""
    result = first_output(out)
    operands = [t for t in tensors_in(args) if t.shape != ()]
    strided = not _dense_strides(result) or any(
        t.shape != result.shape or _used_strides(t) != _used_strides(result) for t in operands)
    casting = len({t.dtype for t in operands if t.dtype != torch.bool}) > 1
    found = [name for name, present in ((STRIDED, strided), (CASTING, casting)) if present]
    return " ".join(found) or None


def _register_weights():
    for name, weight in WEIGHTS.items():
        complex_weight = COMPLEX_WEIGHTS.get(name, weight)

        def rule(*args, out, _weight=weight, _complex=complex_weight, **kwargs):
            result = first_output(out)
            return Cost(flops=(_complex if result.dtype.is_complex else _weight) * result.numel,
                        variant=loop_variant(args + tuple(kwargs.values()), out))

        register(aten_op(name), op_class=VECTOR, name=f"pointwise[{name}]")(rule)


_register_weights()


@register(aten.gelu, op_class=VECTOR)
def gelu(x, *, out, approximate="none", **_):
    return Cost(flops=(GELU_TANH if approximate == "tanh" else GELU_ERF) * out.numel,
                variant=loop_variant((x,), out))


@register(aten.gelu_backward, op_class=VECTOR)
def gelu_backward(grad, x, *, out, approximate="none", **_):
    weight = GELU_TANH_BACKWARD if approximate == "tanh" else GELU_ERF_BACKWARD
    return Cost(flops=weight * out.numel, variant=loop_variant((grad, x), out))


@register(aten.native_dropout, op_class=VECTOR)
def native_dropout(x, p, train, *, out, **_):
    # In eval mode the op is an identity copy; in training it samples and masks.
    return Cost(flops=DROPOUT * x.numel if train else 0)


@register(aten.mish_backward, op_class=VECTOR, seen_below_autograd=True)
def mish_backward(grad, x, *, out, **_):
    """g * (tanh(sp) + x * sigmoid(x) * (1 - tanh(sp)^2)), sp = softplus(x): softplus 3,
    tanh 1, sigmoid 4, square-rsub 2, two multiplies, add, times g = 13."""
    return Cost(flops=13 * out.numel)


@register(aten.glu, op_class=VECTOR)
def glu(x, dim=-1, *, out, **_):
    """a * sigmoid(b) over the two halves: sigmoid 4 + mul 1 per output element."""
    return Cost(flops=5 * out.numel)


@register(aten.glu_backward, op_class=VECTOR)
def glu_backward(grad, x, dim=-1, *, out, **_):
    """s = sigmoid(b) (4); da = g*s (1); db = g*a*s*(1-s) (4): 9 per grad element."""
    return Cost(flops=9 * grad.numel)


@register(aten.log_sigmoid_forward, op_class=VECTOR)
def log_sigmoid(x, *, out, **_):
    """-softplus(-x) = min(x, 0) - log1p(exp(-|x|)): min, abs, neg-exp, log1p, sub = 5."""
    return Cost(flops=5 * x.numel)


@register_tag(torch.Tag.pointwise, "pointwise[tagged]")
def tagged_pointwise(*args, out, **kwargs):
    return Cost(flops=TAGGED_POINTWISE * first_output(out).numel,
                variant=loop_variant(args + tuple(kwargs.values()), out))


# Window functions (torch.hann_window and kin, an STFT's window): factories that evaluate a
# formula of the index n for each of the N points they write (ATen's TensorFactories.cpp),
# reading nothing.
WINDOWS = {
    "hamming_window": 4,   # alpha - beta cos(2 pi n / (N - 1)): scale n, cos, mul, add
    "hann_window": 4,      # hamming with alpha = beta = 0.5
    "blackman_window": 9,  # 0.42 - 0.5 cos(2 pi n/(N-1)) + 0.08 cos(4 pi n/(N-1)):
                           # scale n (1), twice each for the two terms (2 x (mul, cos, mul)),
                           # sub, add
    "bartlett_window": 2,  # 2n / (N - 1); the second half mirrored, 2 - x: 1 + 2 x 1/2
    "kaiser_window": 8,    # I0(beta sqrt(1 - ((n - a) / a)^2)) / I0(beta): sub, div, square,
                           # rsub, sqrt, mul, I0, mul by the precomputed 1 / I0(beta)
}


def _window(weight: int):
    def window(*args, out, **kwargs):
        return Cost(flops=weight * first_output(out).numel, bytes_read=0)
    return window


for _name, _weight in WINDOWS.items():
    register(aten_op(_name), op_class=VECTOR, name=f"window[{_name}]")(_window(_weight))
