"""timm models by name (the optional extra, installed with the test extras): they annotate
forward+backward with no default-rule op, and where timm and torchvision build the same
architecture, fxroof counts the same MACs for both -- two independent implementations."""
import pytest

import fxroof
from fxroof.capture import BACKWARD, FORWARD

pytest.importorskip("timm", reason="timm is an optional extra: pip install 'fxroof[timm]'")


@pytest.mark.parametrize("timm_name, torchvision_name", [
    ("resnet50", "resnet50"),
    ("vit_base_patch16_224", "vit_b_16"),
    ("convnext_tiny", "convnext_tiny"),
])
def test_same_architecture_same_macs_as_torchvision(timm_name, torchvision_name):
    ours = fxroof.analyze(f"timm:{timm_name}", batch=1)
    theirs = fxroof.analyze(torchvision_name, batch=1)
    assert ours.model.inputs == theirs.model.inputs
    assert ours.totals()[FORWARD]["macs"] == theirs.totals()[FORWARD]["macs"]


@pytest.mark.parametrize("name", ["swin_tiny_patch4_window7_224", "efficientnet_b0",
                                  "hrnet_w18_small", "crossvit_tiny_240", "levit_128"])
def test_families_annotate_with_every_op_costed(name):
    g = fxroof.analyze(f"timm:{name}", batch=2, backward=True)
    if name == "crossvit_tiny_240":  # its configured input size, not the 224 default
        assert g.model.inputs[0]["shape"] == [2, 3, 240, 240]
    assert g.coverage()["default_rule_ops"] == {}
    assert all(r["forward_node"] for r in g.records(BACKWARD))
    totals = g.totals()
    assert totals[BACKWARD]["flops"] > 1.5 * totals[FORWARD]["flops"]


def test_unknown_timm_model_suggests_names():
    with pytest.raises(fxroof.FxroofError, match="Did you mean.*resnet50"):
        fxroof.analyze("timm:resnet5O")
