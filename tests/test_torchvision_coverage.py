"""No op reached by any torchvision classification model, forward or backward, may fall to
the default (bytes-only) rule. Every model runs at batch 2 on fake tensors (batch 1 is not a
valid training batch for models with BatchNorm on 1x1 maps, e.g. Inception's aux head)."""
import pytest

import fxroof
from fxroof.models import torchvision_names


@pytest.mark.parametrize("name", torchvision_names())
def test_no_default_rule_forward_and_backward(name):
    g = fxroof.analyze(name, batch=2, backward=True)
    assert g.coverage()["default_rule_ops"] == {}
    totals = g.totals()
    assert totals["forward"]["flops"] > 0 and totals["backward"]["flops"] > 0
    assert all(r["forward_node"] for r in g.records("backward")), "unattributed backward op"
