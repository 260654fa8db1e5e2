"""No op reached by any torchvision classification model, forward or backward, may fall to
the default (bytes-only) rule. Each architecture runs one variant at batch 2 on fake tensors
(batch 1 is not a valid training batch for models with BatchNorm on 1x1 maps, e.g.
Inception's aux head): a family's variants differ in depth, width and resolution, not in the
ops they reach -- `python benchmarks/bench_coverage.py --sets torchvision` analyses all of
them and checks that ("families" in its summary: every one of the 23 true on 2026-11-28), in
4.6 minutes on this 2-core machine against the suite's one or so."""
import pytest

import fxroof
from benchmarks.bench_coverage import same_ops_per_family, torchvision_family
from fxroof.models import torchvision_names

# one variant per family, the smallest (any would do: they reach the same ops)
TRACED = ["alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s",
          "googlenet", "inception_v3", "maxvit_t", "mnasnet0_5", "mobilenet_v2",
          "mobilenet_v3_small", "regnet_x_400mf", "regnet_y_400mf", "resnet18",
          "resnext50_32x4d", "shufflenet_v2_x0_5", "squeezenet1_1", "swin_t", "swin_v2_t",
          "vgg11", "vgg11_bn", "vit_b_32", "wide_resnet50_2"]


def test_every_torchvision_family_has_a_variant_traced():
    """A family torchvision adds (or one this list loses) fails here, not in silence."""
    families = {torchvision_family(name) for name in torchvision_names()}
    assert {torchvision_family(name) for name in TRACED} == families
    assert len(families) == len(TRACED)  # one each


@pytest.mark.parametrize("name", TRACED)
def test_no_default_rule_forward_and_backward(name):
    g = fxroof.analyze(name, batch=2, backward=True)
    assert g.coverage()["default_rule_ops"] == {}
    totals = g.totals()
    assert totals["forward"]["flops"] > 0 and totals["backward"]["flops"] > 0
    assert all(r["forward_node"] for r in g.records("backward")), "unattributed backward op"


def test_families_are_named_by_their_prefix():
    assert [torchvision_family(n) for n in ("efficientnet_v2_l", "efficientnet_b7",
                                            "vgg19_bn", "vgg19", "wide_resnet101_2",
                                            "resnext101_64x4d", "resnet152", "swin_v2_b",
                                            "inception_v3")] == \
        ["efficientnet_v2", "efficientnet", "vgg_bn", "vgg", "wide_resnet", "resnext",
         "resnet", "swin_v2", "inception_v3"]
    rows = [{"model": "resnet18", "ops": ["a", "b"]}, {"model": "resnet50", "ops": ["a", "b"]},
            {"model": "vgg11", "ops": ["a"]}, {"model": "vgg13", "ops": ["a", "c"]}]
    assert same_ops_per_family(rows) == {"resnet": True, "vgg": False}
