"""The rule registry is safe to extend: no stale lookups, no silent skips, no dead rules, a
per-analysis override, and PyTorch's own op tags for families without a rule of their own."""
import pytest
import torch
from torch import nn

import fxroof
import op_costs
from op_costs import Cost, TensorMeta, registry
from tests.conftest import T

aten = torch.ops.aten

_lib = torch.library.Library("fxroof_test", "DEF")
_lib.define("later(Tensor x) -> Tensor")
_lib.define("tagged_pointwise(Tensor x) -> Tensor", tags=(torch.Tag.pointwise,))
_lib.define("tagged_reduction(Tensor x) -> Tensor", tags=(torch.Tag.reduction,))
for _name in ("later", "tagged_pointwise"):
    _lib.impl(_name, lambda x: x.clone(), "CompositeExplicitAutograd")
_lib.impl("tagged_reduction", lambda x: x.sum(-1), "CompositeExplicitAutograd")


def test_a_rule_registered_after_a_lookup_is_used():
    op = torch.ops.fxroof_test.later.default
    assert op_costs.rule_for(op) is None  # looked up (and cached) before it exists
    try:
        op_costs.register(torch.ops.fxroof_test.later)(lambda x, *, out: Cost(flops=7))
        assert op_costs.estimate(op, (T(3),), {}, T(3)).flops == 7
    finally:
        del op_costs.RULES[torch.ops.fxroof_test.later]
        registry._lookup_cache.clear()


def test_tagged_ops_fall_to_their_family_rule():
    pointwise = op_costs.estimate(torch.ops.fxroof_test.tagged_pointwise.default, (T(4, 5),), {},
                                  T(4, 5))
    assert (pointwise.rule, pointwise.flops) == ("pointwise[tagged]", 20)
    reduced = op_costs.estimate(torch.ops.fxroof_test.tagged_reduction.default, (T(4, 5),), {},
                                T(4))
    assert (reduced.rule, reduced.flops) == ("reduction[tagged]", 4 * (5 - 1))


def test_a_name_that_is_no_aten_op_is_an_error():
    with pytest.raises(ValueError, match="does not exist"):
        registry.aten_op("mmm")


def test_a_rule_for_a_composite_op_is_refused():
    # aten.matmul decomposes above autograd: a recorder below it never sees it
    with pytest.raises(ValueError, match="never run"):
        op_costs.register(aten.matmul)(lambda *a, out, **k: Cost())
    assert aten.matmul not in op_costs.RULES


def test_views_use_a_sentinel_key_not_a_string():
    with pytest.raises(TypeError):
        op_costs.register("view")(lambda *a, out, **k: Cost())
    assert "view" not in op_costs.RULES
    assert op_costs.rule_for(aten.transpose.int).name == "view"


def test_no_registered_rule_is_dead():
    for packet in op_costs.RULES:
        if isinstance(packet, torch._ops.OpOverloadPacket) and \
                packet not in registry.SEEN_BELOW_AUTOGRAD:
            assert registry.reaches_dispatch(packet), packet


def test_ops_seen_below_autograd_are_really_recorded():
    """The exemption is earned: mish's backward formula reaches the recorder."""
    g = fxroof.analyze(nn.Mish(), torch.randn(4, 5, requires_grad=True), backward=True)
    assert "mish_backward" in {r["op"] for r in g.records()}
    assert registry.SEEN_BELOW_AUTOGRAD == {aten.mish_backward}


def test_per_analysis_override():
    def my_mm(a, b, *, out, **_):
        return Cost(flops=1, macs=1)

    model = nn.Linear(8, 4, bias=False)
    custom = fxroof.analyze(model, torch.randn(2, 8), rules={aten.mm: my_mm})
    mm = [r for r in custom.records() if r["op"] == "mm"]
    assert mm and all(r["flops"] == 1 and r["rule"] == "custom[my_mm]" for r in mm)
    assert mm[0]["op_class"] == "matrix"  # the registry's class is kept
    # the registry itself is untouched: the next analysis counts 2*2*8*4 again
    plain = fxroof.analyze(model, torch.randn(2, 8))
    assert sum(r["flops"] for r in plain.records() if r["op"] == "mm") == 2 * 2 * 8 * 4


@pytest.mark.parametrize("rules,match", [
    ([1, 2], "dict"),
    ({"mm": lambda *a, **k: Cost()}, "not an ATen op"),
    ({aten.mm: 3}, "not a function"),
])
def test_bad_overrides_are_clear_errors(rules, match):
    with pytest.raises(fxroof.FxroofError, match=match):
        fxroof.analyze(nn.Linear(2, 2), torch.randn(1, 2), rules=rules)


def test_out_variant_call_is_costed():
    class OutMM(nn.Module):
        def forward(self, x):
            y = torch.empty(4, 4)
            torch.mm(x, x, out=y)
            return y

    g = fxroof.analyze(OutMM(), torch.randn(4, 4))
    assert g.totals()["overall"]["flops"] == 2 * 4 * 4 * 4


def test_a_tensors_layout_is_read_off_its_strides():
    """(2, 3, 4, 5): contiguous strides (60, 20, 5, 1), channels-last ones (60, 1, 15, 3);
    one channel is both and reads as contiguous, as torch's suggest_memory_format does;
    a permuted one and a 3-d one are neither."""
    meta = TensorMeta.of
    x = torch.empty(2, 3, 4, 5)
    assert TensorMeta((2, 3, 4, 5), (60, 20, 5, 1), torch.float32).layout == "contiguous"
    assert TensorMeta((2, 3, 4, 5), (60, 1, 15, 3), torch.float32).layout == "channels_last"
    assert meta(x.to(memory_format=torch.channels_last)).layout == "channels_last"
    assert meta(torch.empty(2, 1, 4, 5).to(memory_format=torch.channels_last)).layout \
        == "contiguous"
    assert meta(x.permute(0, 1, 3, 2)).layout is None
    assert meta(torch.empty(2, 3, 4)).layout is None
