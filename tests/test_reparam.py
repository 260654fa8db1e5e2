"""Reparameterized analysis (--reparam): a model fused for inference as it is deployed.

Expected FLOPs are closed forms of the toy blocks' convolutions (2 x N x C_out x H x W x
C_in x k^2, an add one FLOP an element); expected parameter counts are the fused weights'
sizes, or the count timm publishes beside its benchmark of the fused model.
"""
import pytest
import torch
from torch import nn

from fxroof import analyze
from fxroof.cli import main
from fxroof.errors import FxroofError, UsageError
from fxroof.models import reparameterized

N, C, H, W = 2, 8, 16, 16


class RepBlock(nn.Module):
    """RepVGG's training form: a 3x3 and a 1x1 branch summed; reparameterize() merges the
    1x1 kernel into the 3x3 one's centre, one convolution in place of both."""

    def __init__(self):
        super().__init__()
        self.conv3 = nn.Conv2d(C, C, 3, padding=1, bias=False)
        self.conv1 = nn.Conv2d(C, C, 1, bias=False)
        self.deployed = None

    def forward(self, x):
        if self.deployed is not None:
            return self.deployed(x)
        return self.conv3(x) + self.conv1(x)

    def reparameterize(self):
        fused = nn.Conv2d(C, C, 3, padding=1, bias=False)
        with torch.no_grad():
            fused.weight.copy_(self.conv3.weight + nn.functional.pad(self.conv1.weight,
                                                                      [1, 1, 1, 1]))
        self.deployed = fused
        del self.conv3, self.conv1


class ConvBN(nn.Sequential):
    """LeViT's Conv2d_BN: fuse() returns one convolution with the batch norm folded in."""

    def __init__(self):
        super().__init__(nn.Conv2d(C, C, 1, bias=False), nn.BatchNorm2d(C))

    def fuse(self):
        conv, bn = self
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        fused = nn.Conv2d(C, C, 1)
        with torch.no_grad():
            fused.weight.copy_(conv.weight * scale[:, None, None, None])
            fused.bias.copy_(bn.bias - bn.running_mean * scale)
        return fused


def _flops(g) -> int:
    return sum(r["flops"] for r in g.records())


def test_branches_merged_leave_one_convolution_of_the_closed_form():
    model = nn.Sequential(RepBlock())
    x = torch.randn(N, C, H, W)
    conv3, conv1, add = 2 * N * C * H * W * C * 9, 2 * N * C * H * W * C, N * C * H * W
    assert _flops(analyze(model, x)) == conv3 + conv1 + add
    fused = analyze(model, x, reparameterize=True)
    assert _flops(fused) == conv3
    assert fused.model.reparameterized == 1
    assert fused.model.parameters == C * C * 9
    # the model given is as it was: both branches, and its mode
    assert hasattr(model[0], "conv1") and model[0].deployed is None and model.training


def test_fuse_replaces_the_module_and_its_batch_norm_goes():
    model = nn.Sequential(ConvBN(), nn.ReLU())
    g = analyze(model, torch.randn(N, C, H, W), reparameterize=True)
    ops = {r["op"] for r in g.records()}
    assert not any("batch_norm" in op for op in ops), ops
    assert g.model.parameters == C * C + C  # the 1x1 kernel and its bias
    assert isinstance(model[0], ConvBN)


def test_the_fused_result_computes_what_the_branches_did():
    model = nn.Sequential(RepBlock(), ConvBN()).eval()
    x = torch.randn(N, C, H, W)
    fused, count = reparameterized(model)
    assert count == 2
    torch.testing.assert_close(fused(x), model(x), rtol=1e-4, atol=1e-4)


def test_a_model_with_nothing_to_fuse_is_analysed_as_built():
    model = nn.Sequential(nn.Conv2d(C, C, 3), nn.ReLU())
    x = torch.randn(N, C, H, W)
    g = analyze(model, x, reparameterize=True)
    assert g.model.reparameterized == 0
    assert _flops(g) == _flops(analyze(model, x))


@pytest.mark.parametrize("step", [{"backward": True}, {"mode": "train"}])
def test_a_training_step_is_refused(step):
    with pytest.raises(UsageError, match="inference"):
        analyze(nn.Sequential(RepBlock()), torch.randn(N, C, H, W), reparameterize=True,
                **step)


def test_a_fusing_method_that_fails_is_one_paragraph():
    class Broken(RepBlock):
        def reparameterize(self):
            raise ValueError("no running statistics")

    with pytest.raises(FxroofError, match=r"Broken\.reparameterize\(\).*no running"):
        analyze(nn.Sequential(Broken()), torch.randn(N, C, H, W), reparameterize=True)


def test_a_named_model_is_fused_on_the_meta_device_and_rebuilt_fused_for_timing(capsys):
    pytest.importorskip("timm", reason="timm is an optional extra: pip install 'fxroof[timm]'")
    # timm's RTX 4090 inference results list mobileone_s0 at 2.08 M parameters and 0.28
    # GMACs at 224 x 224 (results/benchmark-infer-amp-nchw-pt291-cu128-4090.csv): the fused
    # model's, where the model as built has 5.29 M
    assert main(["annotate", "timm:mobileone_s0", "--reparam", "--top", "0"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "reparameterized (43 submodules fused), 2,078,504 parameters" in header
    g = analyze("timm:mobileone_s0", reparameterize=True)
    assert _flops(g) == pytest.approx(2 * 0.28e9, rel=0.01)
    rebuilt = g.source.rebuilt()
    assert sum(p.numel() for p in rebuilt.parameters()) == 2_078_504
    assert not any(p.is_meta for p in rebuilt.parameters())


def test_the_command_line_refuses_reparam_with_backward(capsys):
    assert main(["annotate", "resnet18", "--reparam", "--backward"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fxroof: usage error: Reparameterizing") and "Traceback" not in err


def test_a_roofline_of_named_models_can_place_them_fused(tmp_path, capsys):
    """`fxroof roofline --reparam` analyses its named models as `annotate --reparam` does:
    mobileone_s0 at timm's published 0.28 GMACs fused, where built it does 3x as much; with
    --backward it is refused in one paragraph, and no figure is written."""
    pytest.importorskip("timm", reason="timm is an optional extra: pip install 'fxroof[timm]'")
    from fxroof.roofline_points import load_sources

    (fused,) = load_sources(["timm:mobileone_s0"], [1], False, None, reparameterize=True)
    (built,) = load_sources(["timm:mobileone_s0"], [1], False, None)
    assert sum(r["flops"] for r in fused["records"]) == pytest.approx(2 * 0.28e9, rel=0.01)
    assert sum(r["flops"] for r in built["records"]) > 3 * 2 * 0.28e9
    figure = tmp_path / "r.png"
    assert main(["roofline", "timm:mobileone_s0", "--reparam", "--chip", "t4",
                 "--out", str(figure)]) == 0
    assert figure.stat().st_size > 0
    refused = tmp_path / "refused.png"
    assert main(["roofline", "timm:mobileone_s0", "--reparam", "--backward", "--chip", "t4",
                 "--out", str(refused)]) == 2
    assert "Reparameterizing" in capsys.readouterr().err and not refused.exists()
