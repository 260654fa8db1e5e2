"""Recording for a target: the CUDA dispatch choices (fxroof.target's rules) applied while a
step runs on fake CPU tensors, and autocast as the target runs it.

``TargetDispatch`` is a TorchFunctionMode: it sees the calls a model makes
(``F.scaled_dot_product_attention``, ``F.dropout``, ``torch.lstm``...) above autograd, where
PyTorch's own CUDA dispatch decides, and calls the op CUDA would run instead, so autograd
records that op and its backward.

Autocast: on the CPU target it is ``torch.autocast("cpu")`` itself. On a CUDA target it is
CUDA's autocast policy -- which ops run in fp16/bf16, which in fp32, which promote -- run at
autocast's own place in the dispatcher: kernels registered on the AutocastCPU key for the
duration of the step (``torch.library``), one per op of CUDA's lists (AT_FORALL_* in
aten/src/ATen/autocast_mode.h; tests check the list against the ops that carry an AutocastCUDA
kernel in this build), and a pass-through for the ops only the CPU list has.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import warnings

import torch
import torch._meta_registrations as meta_registrations
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from fxroof.errors import UsageError
from fxroof.target import (CUDNN, EFFICIENT, FLASH, AttentionCall, Target, cudnn_rnn,
                           fused_dropout, sdpa_backend)

aten = torch.ops.aten
# The recurrent functions nn.LSTM, nn.GRU and nn.RNN call, with cuDNN's mode for each
# (cudnnRNNMode_t, which ATen passes on: op_costs.rnn)
RNN_MODES = {"rnn_relu": ("RNN_RELU", 0), "rnn_tanh": ("RNN_TANH", 1), "lstm": ("LSTM", 2),
             "gru": ("GRU", 3)}


class TargetDispatch(TorchFunctionMode):
    """Calls the op the CUDA target dispatches to, where that depends on the device."""

    def __init__(self, target: Target):
        super().__init__()
        self.target = target
        self.sdpa_choices: list[str] = []  # the backend of each attention call, in order

    def __enter__(self):
        # _cudnn_rnn_backward has a CUDA kernel only: give fake tensors its shapes while the
        # step is recorded, so a training RNN's backward is cuDNN's one call too
        self._library = torch.library.Library("aten", "IMPL")
        self._library.impl("_cudnn_rnn_backward", _cudnn_rnn_backward_shapes, "Meta")
        # F.multi_head_attention_forward (nn.MultiheadAttention) is itself a torch function:
        # this mode sees it, and is off while its body runs, so the attention it calls
        # through the module's global would miss the CUDA choice and record the CPU's flash
        # kernel (which no GPU has: the timing pass failed on one). The global is swapped
        # for the CUDA choice while the step is recorded.
        self._sdpa = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = self._attention
        return super().__enter__()

    def __exit__(self, *exc):
        F.scaled_dot_product_attention = self._sdpa
        self._library._destroy()
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "scaled_dot_product_attention":
            return self._attention(*args, **kwargs)
        if name == "dropout" and func in (F.dropout, torch.dropout):
            return self._dropout(func, args, kwargs)
        if name in RNN_MODES and func is getattr(torch, name) and len(args) == 9:
            return self._rnn(name, func, args, kwargs)
        return func(*args, **kwargs)

    # ---- scaled_dot_product_attention ---------------------------------------------------
    def _attention(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   enable_gqa=False):
        # CUDA's policy on the CPU tensors of a capture (cuda_autocast), or CUDA's own autocast
        # on the fake CUDA tensors of a compiled view's lowering (fxroof.gpu_lowering)
        device = next((d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)), None)
        if device is not None:
            # scaled_dot_product_attention is on CUDA's lower-precision list: autocast casts
            # q, k, v (and a float mask) before CUDA chooses a backend, so it chooses on
            # those; then it runs the op with autocast excluded (autocast_mode.h's
            # WrapFunction_), so that the math backend's products run in the fp32 it casts
            # its operands up to (attention.cpp: "Keep query, key, value in high precision")
            lower = torch.get_autocast_dtype(device)
            q, k, v, attn_mask = (t.to(lower) if _eligible(t) and t.dtype != lower else t
                                  for t in (q, k, v, attn_mask))
            with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST[device]):
                return self._attention_backend(q, k, v, attn_mask, dropout_p, is_causal,
                                               scale, enable_gqa)
        return self._attention_backend(q, k, v, attn_mask, dropout_p, is_causal, scale,
                                       enable_gqa)

    def _attention_backend(self, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
        """The backend CUDA's select_sdp_backend picks for these operands, called."""
        call = AttentionCall(
            tuple(q.shape), tuple(k.shape), tuple(v.shape), q.dtype, attn_mask is not None,
            attn_mask.dim() if attn_mask is not None else 0, dropout_p, is_causal,
            torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)), enable_gqa,
            all(t.stride(-1) == 1 or t.shape[-1] == 1 for t in (q, k, v)))
        backend = sdpa_backend(call, self.target.capability)
        self.sdpa_choices.append(backend)
        if backend == FLASH:  # attention.cpp pads the head dim to a multiple of 8
            return aten._scaled_dot_product_flash_attention(
                q, k, v, dropout_p, is_causal, scale=scale)[0]
        if backend == CUDNN:
            return aten._scaled_dot_product_cudnn_attention(
                q, k, v, attn_mask, call.requires_grad, dropout_p, is_causal, False,
                scale=scale)[0]
        if backend == EFFICIENT:
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                # convert_boolean_attn_mask: True keeps, False is -inf
                attn_mask = torch.where(attn_mask.logical_not(), -float("inf"), 0.0).to(q.dtype)
            return aten._scaled_dot_product_efficient_attention(
                q, k, v, attn_mask, call.requires_grad, dropout_p, is_causal, scale=scale)[0]
        return aten._scaled_dot_product_attention_math(
            q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]

    # ---- dropout and RNNs ---------------------------------------------------------------
    def _dropout(self, func, args, kwargs):
        bound = dict(zip(("input", "p", "training", "inplace"), args), **kwargs)
        x, p = bound["input"], bound.get("p", 0.5)
        train = bound.get("training", bound.get("train", True))
        if not bound.get("inplace") and fused_dropout(self.target, p, train, x.numel()):
            return torch.native_dropout(x, p, train)[0]
        return func(*args, **kwargs)

    def _rnn(self, name, func, args, kwargs):
        """torch.lstm/gru/rnn_tanh/rnn_relu(input, hx, params, has_biases, num_layers,
        dropout, train, bidirectional, batch_first) -> cuDNN's one call over the whole stack
        (RNN.cpp: each checks cudnn_is_acceptable, then its cudnn stub, _cudnn_impl)."""
        x, hx, params, has_biases, layers, dropout, train, bidirectional, batch_first = args
        mode, mode_number = RNN_MODES[name]
        if (not isinstance(hx, (tuple, list)) and name == "lstm") or \
                not cudnn_rnn(self.target, mode, x.dtype):
            return func(*args, **kwargs)
        h0, c0 = (hx if name == "lstm" else (hx, None))
        per_layer = 4 if has_biases else 2
        hidden = h0.shape[-1]
        params = list(params)
        if torch.is_autocast_enabled("cpu") and _eligible(params[0]) and \
                params[0].dtype != torch.float16:  # the CUDA policy (cuda_autocast) runs
            x, params, h0, c0, weight_buf = _half_rnn_operands(x, params, h0, c0)
        else:
            # cuDNN reads the weights through one flat buffer (nn.RNNBase.flatten_parameters
            # keeps them as views into it on CUDA): made once, outside the step, so unrecorded
            with torch._C.DisableTorchFunction():
                weight_buf = torch.empty(sum(p.numel() for p in params), dtype=x.dtype)
        out = aten._cudnn_rnn(
            x, params, per_layer, weight_buf, h0, c0,
            mode_number, hidden, 0, layers, batch_first, dropout, train,
            bidirectional, [], None)
        return (out[0], out[1], out[2]) if name == "lstm" else (out[0], out[1])


def _half_rnn_operands(x, params, h0, c0):
    """What CUDA's autocast kernel for cuDNN's RNN hands it (_cudnn_rnn_cast_reflatten,
    aten/src/ATen/cudnn/AutocastRNN.cpp): input and states cast to fp16 -- fp16 whatever
    autocast's dtype, bf16 included -- and, each call, a new zero-filled fp16 flat buffer
    with every weight copied into its part of it (copy_weights_to_flat_buf_views). Each part
    is a tensor of its own over the buffer's storage (get_parameters: empty, then set_), not
    an autograd view: the copies carry the weights' gradients back in a training step, and
    the buffer itself never requires grad (_cudnn_rnn takes none through weight_buf)."""
    half = torch.float16
    with _autocast_internal():  # one C++ kernel's work, all of it
        weight_buf = torch.zeros(sum(p.numel() for p in params), dtype=half)
        weights = [torch.empty(p.shape, dtype=half).copy_(p) for p in params]
    cast = (lambda t: _cast(t, half) if _eligible(t) and t.dtype != half else t)
    return cast(x), weights, cast(h0), cast(c0) if c0 is not None else None, weight_buf


def _cudnn_rnn_backward_shapes(x, weight, weight_stride0, weight_buf, hx, cx, *args):
    """(grad_input, grad_hx, grad_cx, grad_weight) as RNN.cpp's cuDNN kernel returns them:
    the shapes of input, hx, cx and each weight (an empty grad_cx for a GRU)."""
    grad_cx = cx.new_empty(cx.shape) if cx is not None else x.new_empty(0)
    return (x.new_empty(x.shape), hx.new_empty(hx.shape), grad_cx,
            [w.new_empty(w.shape) for w in weight])


# ---- autocast ---------------------------------------------------------------------------------
def cpu_autocast(dtype: torch.dtype):
    """torch.autocast on the CPU target, or a clear error where this torch's CPU autocast
    does not run ``dtype`` (it disables itself with a warning there)."""
    with torch.autocast("cpu", dtype=dtype, enabled=False):
        pass
    context = torch.autocast("cpu", dtype=dtype)
    if not getattr(context, "_enabled", True):
        raise UsageError(f"CPU autocast does not run {dtype} in torch {torch.__version__} (it "
                         "disables itself): use --amp bf16 on the CPU target, or --device cuda.")
    return context


# CUDA's autocast lists (aten/src/ATen/autocast_mode.h: AT_FORALL_LOWER_PRECISION_FP,
# AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE; autocast_mode.cpp adds
# cudnn_convolution[_transpose] to the first and norm's fp32_append_dtype overloads).
CUDA_LOWER_PRECISION = """
    _convolution.deprecated _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d
    conv_transpose2d.input conv_transpose3d.input convolution prelu addmm addmv addr matmul
    einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot
    _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell
    _scaled_dot_product_flash_attention scaled_dot_product_attention cudnn_convolution
    cudnn_convolution_transpose""".split()
CUDA_FP32 = """
    acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan
    pow.Tensor_Scalar pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm
    group_norm frobenius_norm.dim nuclear_norm nuclear_norm.dim cosine_similarity
    poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div
    l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss
    soft_margin_loss triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits
    dist pdist cdist renorm logsumexp upsample_nearest1d _upsample_nearest_exact1d
    upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d _upsample_nearest_exact3d
    upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa upsample_trilinear3d
    upsample_bicubic2d _upsample_bicubic2d_aa
    rms_norm linalg_matrix_sqrth""".split()  # the last two: newer than that header's copy;
# torch 2.14's AutocastCUDA kernels return fp32 for them on fp16 input (tested)
CUDA_FP32_SET_OPT_DTYPE = """
    prod prod.dim_int prod.dim_Dimname softmax.int softmax.Dimname log_softmax.int
    log_softmax.Dimname cumprod cumprod.dimname cumsum cumsum.dimname linalg_vector_norm
    linalg_matrix_norm linalg_matrix_norm.str_ord sum sum.dim_IntList
    sum.dim_DimnameList""".split()
CUDA_FP32_APPEND_DTYPE = {"norm.Scalar": "ScalarOpt_dtype",
                          "norm.ScalarOpt_dim": "ScalarOpt_dim_dtype",
                          "norm.names_ScalarOpt_dim": "names_ScalarOpt_dim_dtype"}
CUDA_PROMOTE = """addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot
    scatter_add""".split()


def cuda_policy() -> dict[str, str]:
    """{overload name ('conv2d' is conv2d.default): CUDA's cast policy}. The named-tensor
    (Dimname) overloads are left out: Python cannot call them."""
    policy = {}
    for names, kind in ((CUDA_LOWER_PRECISION, "lower_precision_fp"), (CUDA_FP32, "fp32"),
                        (CUDA_FP32_SET_OPT_DTYPE, "fp32_set_opt_dtype"),
                        (list(CUDA_FP32_APPEND_DTYPE), "fp32_append_dtype"),
                        (CUDA_PROMOTE, "promote")):
        for name in names:
            if "imname" not in name and not name.startswith("norm.names") and \
                    _overload(name) is not None:  # an older torch lacks the newest ops
                policy[name if "." in name else f"{name}.default"] = kind
    # this torch's own list where it has one (every build registers AutocastCUDA kernels,
    # CPU-only wheels too): torch 2.11 casts no rms_norm, 2.14 runs it in fp32
    registered = _ops_with_kernel("AutocastCUDA")
    return {name: kind for name, kind in policy.items() if not registered or name in registered}


def _overload(name: str):
    """The OpOverload, or None for the named-tensor (Dimname) overloads Python cannot call."""
    packet, _, overload = name.partition(".")
    try:
        return getattr(getattr(aten, packet), overload)
    except AttributeError:
        return None


def _eligible(x) -> bool:
    """autocast's is_eligible: a defined floating tensor that is not fp64."""
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64


_inside_autocast = threading.local()


@contextlib.contextmanager
def _autocast_internal():
    """Marks the ops dispatched inside as autocast's own (autocast_internal)."""
    before = getattr(_inside_autocast, "active", False)
    _inside_autocast.active = True
    try:
        yield
    finally:
        _inside_autocast.active = before


def autocast_internal() -> bool:
    """Whether the op being dispatched is one CUDA's autocast issues inside another op's
    kernel -- a cast of its operands, from C++ -- not one the model's Python calls: the
    host spends a fraction of an op on it (pipeline.AUTOCAST_HOST_SHARE)."""
    return getattr(_inside_autocast, "active", False)


class _Casts:
    """cached_cast: casts an eligible tensor, and casts each weight (a leaf that requires
    grad) once per autocast region."""

    def __init__(self):
        self.cache: dict[int, tuple] = {}

    def cast(self, x, dtype):
        if not _eligible(x) or x.dtype == dtype:
            return x
        if x.is_leaf and x.requires_grad:
            hit = self.cache.get(id(x))
            if hit is None or hit[0] is not x or hit[1].dtype != dtype:
                hit = self.cache[id(x)] = (x, _cast(x, dtype))
            return hit[1]
        return _cast(x, dtype)


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    with _autocast_internal():
        return x.to(dtype)


_NO_AUTOCAST = {"cpu": torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU),
                "cuda": torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)}


def _policy_kernel(op, policy: str, lower: torch.dtype, casts: _Casts):
    dtype_index = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"),
                       None)

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST["cpu"]):
            if policy == "fp32_set_opt_dtype":
                given = kwargs.get("dtype", args[dtype_index] if dtype_index is not None
                                   and dtype_index < len(args) else None)
                if _eligible(args[0]) and given is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
                return op(*args, **kwargs)
            if policy == "fp32_append_dtype":
                target = torch.float32 if _eligible(args[0]) else args[0].dtype
                packet, _, overload = op.name().removeprefix("aten::").partition(".")
                return getattr(aten.norm, CUDA_FP32_APPEND_DTYPE[f"{packet}.{overload}"])(
                    *args, **kwargs, dtype=target)
            to = {"lower_precision_fp": lower, "fp32": torch.float32}.get(policy) or (
                torch.float32 if any(_eligible(x) and x.dtype == torch.float32
                                     for x in pytree.tree_leaves((args, kwargs))) else lower)
            args, kwargs = pytree.tree_map_only(
                torch.Tensor, functools.partial(casts.cast, dtype=to), (args, kwargs))
            return op(*args, **kwargs)

    return kernel


def _passthrough(op):
    """An op of CPU's lists only: CUDA's autocast falls through it. A composite (nll_loss_nd,
    cross_entropy_loss) runs its decomposition with autocast still on, so the ops inside meet
    CUDA's policy as they would on CUDA; any other runs as it is."""
    composite = torch._C._dispatch_has_kernel_for_dispatch_key(op.name(),
                                                                "CompositeImplicitAutograd")

    def kernel(*args, **kwargs):
        if composite:
            return op.decompose(*args, **kwargs)
        with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST["cpu"]):
            return op(*args, **kwargs)
    return kernel


def cpu_autocast_ops() -> set[str]:
    """The overloads carrying an AutocastCPU kernel in this build (CPU's own lists)."""
    return _ops_with_kernel("AutocastCPU")


@functools.lru_cache(maxsize=None)
def _ops_with_kernel(key: str) -> frozenset:
    names = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        if qualified.startswith("aten::") and \
                torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key):
            name = qualified.removeprefix("aten::")
            names.add(name if "." in name else f"{name}.default")
    return frozenset(names)


@contextlib.contextmanager
def cuda_autocast(lower: torch.dtype):
    """CUDA's autocast policy, in ``lower`` precision, on the CPU tensors fxroof records: the
    AutocastCPU kernels are replaced for the duration of the block."""
    library = torch.library.Library("aten", "IMPL")
    casts = _Casts()
    policy = cuda_policy()
    try:
        with _quiet_overrides():
            for name, kind in policy.items():
                library.impl(name.removesuffix(".default"),
                             _policy_kernel(_overload(name), kind, lower, casts), "AutocastCPU")
            for name in cpu_autocast_ops() - set(policy):
                library.impl(name.removesuffix(".default"), _passthrough(_overload(name)),
                             "AutocastCPU")
        with torch.autocast("cpu", dtype=lower):
            yield
    finally:
        library._destroy()


_KERNEL_SHAPES: list = []  # the library holding them, once registered


@contextlib.contextmanager
def kernel_shapes():
    """Shape functions, while a step is recorded, where torch's own refuses what every
    target's kernel runs. _grouped_mm (torch.nn.functional.grouped_mm: transformers' grouped
    mixture-of-experts products) has a meta kernel that takes bf16 and fp16 only, while the
    CPU kernel and CUDA's (GroupedBlas.cpp: its CUTLASS fast path for bf16, a loop of
    products over the groups otherwise) take fp32 too -- so a mixture-of-experts model in
    fp32, or under autocast, whose experts' fp32 weights set the product's dtype, could not
    be traced at all. Registered once for the process, not per step: a Meta kernel replaced
    and restored around a step stayed in use under fake tensors afterwards (torch 2.14), so
    it is registered openly, and it differs from torch's only where torch's refused. A
    torch whose shape function for it has another form keeps its own."""
    if not _KERNEL_SHAPES and all(hasattr(meta_registrations, name) for name in (
            "meta_grouped_mm", "_create_grouped_mm_output_tensor")):
        library = torch.library.Library("aten", "IMPL")
        with _quiet_overrides():
            library.impl("_grouped_mm", _grouped_mm_shapes, "Meta")
        _KERNEL_SHAPES.append(library)
    yield


def _grouped_mm_shapes(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch's meta kernel for bf16 and fp16; for the other floating dtypes its output, made
    as it makes it (_create_grouped_mm_output_tensor), after the checks the kernels make."""
    if mat_a.dtype in (torch.bfloat16, torch.float16):
        return meta_registrations.meta_grouped_mm(mat_a, mat_b, offs, bias, out_dtype)
    torch._check(mat_a.is_floating_point() and mat_b.dtype == mat_a.dtype,
                 lambda: f"_grouped_mm takes two floating operands of one dtype, got "
                         f"{mat_a.dtype} and {mat_b.dtype}")
    torch._check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3),
                 lambda: "_grouped_mm's operands are 2-D or 3-D")
    torch._check((offs is not None) == (mat_a.dim() == 2 or mat_b.dim() == 2),
                 lambda: "_grouped_mm takes offsets exactly when an operand is 2-D")
    return meta_registrations._create_grouped_mm_output_tensor(
        mat_a, mat_b, offs, out_dtype or mat_a.dtype)


@contextlib.contextmanager
def _quiet_overrides():
    """Replacing a registered kernel warns once per op; the replacement is the point."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Oo]verrid.*")
        yield

