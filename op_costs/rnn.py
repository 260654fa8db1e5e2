"""Recurrent layers as the fused kernels that run them: oneDNN's ``mkldnn_rnn_layer`` (nn.LSTM
on CPU, one layer and direction per call) and cuDNN's ``_cudnn_rnn`` (the whole stack).

For a layer with input size I, hidden size H and G gates (LSTM 4, GRU 3, RNN 1) over R = T*B
rows (time steps x batch; a packed sequence's rows, whatever the layout):

* MACs: the input and recurrent projections, R * G*H * (I + H) -- read off the weights, so
  w_ih (G*H, I) and w_hh (G*H, H) give R * (w_ih.numel + w_hh.numel)
* FLOPs: 2 * MACs + R * G*H (adding the two projections) + 2 * R * G*H with biases (b_ih and
  b_hh) + R * H * cell, the cell's elementwise work per hidden unit:
  - LSTM 18: sigmoid for i, f, o (3 x 4), tanh g (1), c = f*c + i*g (3), tanh c (1), o*tanh c (1)
  - GRU 15: sigmoid for r, z (2 x 4), n = tanh(x_n + r * h_n) (3), (1 - z)*n + z*h (4)
  - RNN_TANH / RNN_RELU 1: the activation
* backward: grad_input, the recurrent gradient and grad_weight each repeat the forward's
  products: 2 * MACs more MACs (the forward's, twice over), and the cell's backward per unit:
  - LSTM 22: do, dtanh_c (2); dc = dc' + dtanh_c * (1 - tanh_c^2) (4); di, dg, df, dc_prev (4);
    sigmoid' x 3 (9); tanh' (3)
  - GRU 16: dn, dz (4); dh_prev direct (1); tanh' (3); dr, dh_n (2); sigmoid' x 2 (6)
  - RNN_TANH 3 (g * (1 - h^2)), RNN_RELU 1
  plus the bias gradient: a sum of the gate gradients over R rows, R * G*H.
"""
from __future__ import annotations

from op_costs.registry import MATRIX, Cost, TensorMeta, register

aten = __import__("torch").ops.aten

RNN_RELU, RNN_TANH, LSTM, GRU = 0, 1, 2, 3  # cuDNN's mode numbers, which ATen passes on
CELL_FORWARD = {LSTM: 18, GRU: 15, RNN_TANH: 1, RNN_RELU: 1}
CELL_BACKWARD = {LSTM: 22, GRU: 16, RNN_TANH: 3, RNN_RELU: 1}


def layer_cost(rows: int, w_ih: TensorMeta, w_hh: TensorMeta, mode: int, has_biases: bool,
               backward: bool) -> Cost:
    gates_hidden, hidden = w_hh.shape[0], w_hh.shape[-1]
    macs = rows * (w_ih.numel + w_hh.numel)
    if not backward:
        elementwise = rows * gates_hidden * (1 + 2 * has_biases) \
            + rows * hidden * CELL_FORWARD[mode]
        return Cost(flops=2 * macs + elementwise, macs=macs)
    elementwise = rows * hidden * CELL_BACKWARD[mode] + (rows * gates_hidden if has_biases else 0)
    return Cost(flops=4 * macs + elementwise, macs=2 * macs)


def _rows(x: TensorMeta, w_ih: TensorMeta) -> int:
    return x.numel // w_ih.shape[-1]


@register(aten.mkldnn_rnn_layer, op_class=MATRIX)
def mkldnn_rnn_layer(x, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes, mode, hidden_size,
                     num_layers, has_biases, *_, out, **__):
    return layer_cost(_rows(x, w_ih), w_ih, w_hh, mode, has_biases, backward=False)


@register(aten.mkldnn_rnn_layer_backward, op_class=MATRIX)
def mkldnn_rnn_layer_backward(x, w_ih, w_hh, b_ih, b_hh, hx, cx, output, hy, cy, grad_output,
                              grad_hy, grad_cy, reverse, mode, hidden_size, num_layers,
                              has_biases, *_, out, **__):
    return layer_cost(_rows(x, w_ih), w_ih, w_hh, mode, has_biases, backward=True)


def _stack_cost(x, weights, mode, has_biases: bool, backward: bool) -> Cost:
    """cuDNN's weight list holds, per layer and direction, w_ih, w_hh[, b_ih, b_hh]."""
    per_layer = 4 if has_biases else 2
    rows = x.numel // x.shape[-1]
    parts = [layer_cost(rows, weights[i], weights[i + 1], mode, has_biases, backward)
             for i in range(0, len(weights), per_layer)]
    return Cost(flops=sum(p.flops for p in parts), macs=sum(p.macs for p in parts))


def _has_biases(weights, num_layers, bidirectional) -> bool:
    return len(weights) == 4 * num_layers * (2 if bidirectional else 1)


@register(aten._cudnn_rnn, op_class=MATRIX)
def cudnn_rnn(x, weights, weight_stride0, weight_buf, hx, cx, mode, hidden_size, proj_size,
              num_layers, batch_first, dropout, train, bidirectional, *_, out, **__):
    return _stack_cost(x, weights, mode, _has_biases(weights, num_layers, bidirectional), False)


@register(aten.miopen_rnn, op_class=MATRIX)
def miopen_rnn(x, weights, weight_stride0, hx, cx, mode, hidden_size, num_layers, batch_first,
               dropout, train, bidirectional, *_, out, **__):
    return _stack_cost(x, weights, mode, _has_biases(weights, num_layers, bidirectional), False)


@register(aten._cudnn_rnn_backward, op_class=MATRIX)
def cudnn_rnn_backward(x, weights, weight_stride0, weight_buf, hx, cx, output, grad_output,
                       grad_hy, grad_cy, mode, hidden_size, proj_size, num_layers, batch_first,
                       dropout, train, bidirectional, *_, out, **__):
    return _stack_cost(x, weights, mode, _has_biases(weights, num_layers, bidirectional), True)


@register(aten.miopen_rnn_backward, op_class=MATRIX)
def miopen_rnn_backward(x, weights, weight_stride0, weight_buf, hx, cx, output, grad_output,
                        grad_hy, grad_cy, mode, hidden_size, num_layers, batch_first, dropout,
                        train, bidirectional, *_, out, **__):
    return _stack_cost(x, weights, mode, _has_biases(weights, num_layers, bidirectional), True)


@register(aten._thnn_fused_lstm_cell, op_class=MATRIX)
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None, *, out,
                    **_):
    """The cell after the projections (which are their own mm ops): gates add (4H), biases,
    and the LSTM cell's 18 per hidden unit."""
    rows_gates = input_gates.numel
    biases = (input_bias is not None) + (hidden_bias is not None)
    return Cost(flops=rows_gates * (1 + biases) + cx.numel * CELL_FORWARD[LSTM])


@register(aten._thnn_fused_lstm_cell_backward_impl, op_class=MATRIX)
def fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias, *, out, **_):
    hidden = cx.numel
    return Cost(flops=hidden * CELL_BACKWARD[LSTM] + (4 * hidden if has_bias else 0))


@register(aten._thnn_fused_gru_cell, op_class=MATRIX)
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None, *, out,
                   **_):
    biases = (input_bias is not None) + (hidden_bias is not None)
    return Cost(flops=input_gates.numel * (1 + biases) + hx.numel * CELL_FORWARD[GRU])


@register(aten._thnn_fused_gru_cell_backward, op_class=MATRIX)
def fused_gru_cell_backward(grad_hy, workspace, has_bias, *, out, **_):
    hidden = grad_hy.numel
    return Cost(flops=hidden * CELL_BACKWARD[GRU] + (3 * hidden if has_bias else 0))
