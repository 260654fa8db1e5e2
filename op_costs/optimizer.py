"""Optimizer kernels: the multi-tensor ``_foreach_*`` ops and the fused ``_fused_*`` steps.

A foreach op applies one pointwise op to every tensor of its lists in one launch: its FLOPs
are the pointwise weight (op_costs.pointwise.WEIGHTS) times the elements of its first list,
and it reads every tensor operand once and writes its outputs -- for the in-place forms
(``_foreach_add_``), the first list, which the op returns nothing for.

The fused steps (``_fused_sgd_``, ``_fused_adam_``, ``_fused_adamw_``) update parameters,
gradients' state and parameters in one pass per element; their per-element arithmetic, read
from the kernels' math (aten/src/ATen/native/cuda/fused_adam_utils.cuh ``_adam_math``,
FusedSgdKernel.cu), is written next to each constant. Per-tensor scalars (bias corrections,
step sizes) are O(tensors), not O(elements), and are not counted.
"""
from __future__ import annotations

import torch

from op_costs.pointwise import WEIGHTS
from op_costs.registry import VECTOR, Cost, TensorMeta, register, tensors_in, total_bytes

aten = torch.ops.aten

# pointwise ops whose foreach forms optimizers, clipping and EMA use; each shares its weight
_FOREACH = """add sub mul div neg abs exp log sqrt rsqrt reciprocal sign pow maximum minimum
    clamp_min clamp_max addcmul addcdiv lerp sigmoid tanh""".split()
FOREACH_NORM = 2          # |x|^p accumulated: one multiply-add per element (p = 2)
# The fused kernels count as their foreach decomposition does, under op_costs.pointwise's
# conventions (a scaled add a + s*b counts 1, as aten.add with alpha does), so the same
# update costs the same FLOPs for-loop, foreach or fused.
ADAM = 13                 # m = lerp(m, g, 1-b1) [3]; v = b2 v [1] + (1-b2) g g [3];
                          # s = sqrt(v) [1] / sqrt(bc2) [1] + eps [1]; p -= step m / s [3]
ADAM_WEIGHT_DECAY = 1     # Adam: g + wd p (a scaled add); AdamW: p * (1 - lr wd)
SGD_MOMENTUM = 3          # buf = mu buf [1] + (1 - dampening) g [1]; p -= lr buf [1]
SGD_PLAIN = 1             # p -= lr g
SGD_NESTEROV = 1          # g = g + mu buf, on top of the momentum update
SGD_WEIGHT_DECAY = 1      # g + wd p

def _list_numel(tensors) -> int:
    return sum(t.numel for t in tensors if isinstance(t, TensorMeta))


def _foreach_rule(weight: int):
    def rule(self, *args, out=None, **kwargs):
        read = total_bytes(tensors_in((self, args, kwargs)))
        written = total_bytes(tensors_in(out)) if out else total_bytes(tensors_in(self))
        return Cost(flops=weight * _list_numel(self), bytes_read=read, bytes_written=written)
    return rule


def _register_foreach():
    for name in _FOREACH:
        packet = getattr(aten, f"_foreach_{name}", None)
        if packet is not None:
            register(packet, op_class=VECTOR, name=f"foreach[{name}]")(
                _foreach_rule(WEIGHTS[name]))


_register_foreach()


@register(aten._foreach_norm, op_class=VECTOR)
def foreach_norm(self, ord=2, dtype=None, *, out=None, **_):
    return Cost(flops=FOREACH_NORM * _list_numel(self))


@register(aten._foreach_copy, op_class=VECTOR)
def foreach_copy(self, src, non_blocking=False, *, out=None, **_):
    return Cost(flops=0, bytes_read=total_bytes(tensors_in(src)),
                bytes_written=total_bytes(tensors_in(self)))


@register(aten._foreach_zero, op_class=VECTOR)
def foreach_zero(self, *, out=None, **_):
    """zero_grad(set_to_none=False): writes every gradient, reads nothing."""
    return Cost(flops=0, bytes_read=0, bytes_written=total_bytes(tensors_in(self)))


def _adam(weight_decay: float, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
          amsgrad: bool) -> Cost:
    n = _list_numel(params)
    flops = (ADAM + (ADAM_WEIGHT_DECAY if weight_decay else 0) + (1 if amsgrad else 0)) * n
    state = [params, exp_avgs, exp_avg_sqs] + ([max_exp_avg_sqs] if amsgrad else [])
    read = total_bytes(tensors_in([grads] + state))
    return Cost(flops=flops, bytes_read=read, bytes_written=total_bytes(tensors_in(state)))


@register(aten._fused_adam, aten._fused_adamw, op_class=VECTOR)
def fused_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *,
               lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None,
               found_inf=None, out=None, **_):
    """Reads p, g, m, v (and v_max with amsgrad); writes p, m, v (v_max)."""
    return _adam(weight_decay, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, amsgrad)


@register(aten._fused_sgd, op_class=VECTOR)
def fused_sgd(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
              nesterov, maximize, is_first_step, grad_scale=None, found_inf=None, out=None,
              **_):
    """Reads p, g (and the momentum buffer); writes p (and the buffer)."""
    n = _list_numel(params)
    flops = (SGD_WEIGHT_DECAY if weight_decay else 0) + (
        SGD_MOMENTUM + (SGD_NESTEROV if nesterov else 0) if momentum else SGD_PLAIN)
    state = [params] + ([momentum_buffer_list] if momentum else [])
    return Cost(flops=flops * n, bytes_read=total_bytes(tensors_in([grads] + state)),
                bytes_written=total_bytes(tensors_in(state)))
