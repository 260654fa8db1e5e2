"""Reductions and softmax.

A reduction of n input elements counts one FLOP per input element per pass over the data
(n - m adds for m outputs, rounded up to n: the difference is one per output). Extra work per
output (the division of a mean, the sqrt of a norm) is added per output element.

* sum, prod, amax, amin, max, min, argmax, argmin, any, all, cumsum: 1 per input
* mean: 1 per input + 1 per output (divide)
* var / std / var_mean / std_mean: 4 per input (sum for the mean; sub, square, add)
  + 1 per output (divide) [+ 1 sqrt for std]
* linalg_vector_norm / norm: 2 per input (|x|^p via a mul, add) + 1 per output (root)
* logsumexp: 4 per input (max, sub, exp, add) + 2 per output (log, add max back)
* softmax / log_softmax: 5 per element (max, sub, exp, sum, div-or-log)
* softmax backward: y * (g - sum(g * y)): 4 per element
* log_softmax backward: g - exp(y) * sum(g): 4 per element
"""
from __future__ import annotations

from op_costs.registry import VECTOR, Cost, first_output, register

aten = __import__("torch").ops.aten


def reduction(per_input: int, per_output: int = 0):
    def rule(x, *args, out, **kwargs):
        return Cost(flops=per_input * x.numel + per_output * first_output(out).numel)

    return rule


_REDUCTIONS = [  # (FLOPs per input element, per output element, ops)
    (1, 0, "sum prod amax amin max min argmax argmin any all cumsum cumprod nansum aminmax"),
    (1, 1, "mean nanmean"),
    (4, 1, "var var_mean"),
    (4, 2, "std std_mean"),
    (2, 1, "linalg_vector_norm norm"),
    (4, 2, "logsumexp"),
]
for per_input, per_output, names in _REDUCTIONS:
    for name in names.split():
        register(getattr(aten, name), op_class=VECTOR, name=f"reduction[{name}]")(
            reduction(per_input, per_output))

SOFTMAX = 5
SOFTMAX_BACKWARD = 4


@register(aten._softmax, aten._log_softmax, aten._safe_softmax, aten.softmax, aten.log_softmax,
          op_class=VECTOR)
def softmax(x, *args, out, **_):
    return Cost(flops=SOFTMAX * x.numel)


@register(aten._softmax_backward_data, aten._log_softmax_backward_data, op_class=VECTOR)
def softmax_backward(grad, y, *args, out, **_):
    return Cost(flops=SOFTMAX_BACKWARD * grad.numel)
