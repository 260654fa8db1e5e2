"""benchmarks/conv_kernels.py: which kernels a convolution runs, and the kept record that
sets op_classes.NCHW_GEMM_POSITIONS."""
import json
import os

import pytest

from benchmarks import conv_kernels
from fxroof import op_classes
from fxroof.errors import FxroofError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEPT = os.path.join(ROOT, "benchmarks", "measured", "conv-layouts")


def test_the_layout_share_is_the_transposes_time_over_the_kernels():
    kernels = [{"name": "void cudnn::engines_precompiled::nchwToNhwcKernel<float>", "us": 30.0},
               {"name": "sm90_xmma_fprop_implicit_gemm_tf32", "us": 60.0},
               {"name": "void cudnn::engines_precompiled::nhwcToNchwKernel<float>", "us": 10.0}]
    assert conv_kernels.layout_share(kernels) == pytest.approx(0.4)
    assert conv_kernels.layout_share(kernels[1:2]) == 0.0
    assert conv_kernels.layout_share([]) == 0.0


def test_record_then_summary_on_a_cpu(tmp_path, capsys):
    """On a CPU the script records ATen's top-level ops (no kernels): a file summary reads."""
    out = tmp_path / "k.json"
    assert conv_kernels.main(["record", "--device", "cpu", "--out", str(out), "--batch", "1",
                              "--shapes", "pw7_up", "--dtypes", "fp32", "--layouts", "nchw",
                              "--search", "off", "--warmup", "1"]) == 0
    found = json.loads(out.read_text())
    (run,) = found["runs"]
    assert (run["shape"], run["batch"], run["dtype"], run["searched"]) == \
        ("pw7_up", 1, "fp32", False)
    assert run["forward"] and run["backward"]
    assert conv_kernels.main(["summary", str(out)]) == 0
    assert "pw7_up b1 fp32" in capsys.readouterr().out


def test_record_refuses_an_unknown_shape_and_an_existing_file(tmp_path):
    with pytest.raises(FxroofError, match="Unknown shape.*pw3"):
        conv_kernels.main(["record", "--device", "cpu", "--out", str(tmp_path / "k.json"),
                           "--shapes", "pw3"])
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    with pytest.raises(FxroofError):
        conv_kernels.main(["record", "--device", "cpu", "--out", str(kept)])
    assert kept.read_text() == "{}"
    with pytest.raises(FxroofError, match="not a conv_kernels file"):
        conv_kernels.main(["summary", str(kept)])
    kept.write_text(json.dumps({"benchmark": "conv_kernels", "runs": [{"shape": "c3_7"}]}))
    with pytest.raises(FxroofError, match="run 0 lacks dtype"):
        conv_kernels.main(["summary", str(kept)])
    run = {"shape": "c3_7", "dtype": "fp32", "layout": "nchw", "searched": True,
           "forward": [{"name": "k", "us": "fast"}], "backward": []}
    kept.write_text(json.dumps({"benchmark": "conv_kernels", "runs": [run]}))
    with pytest.raises(FxroofError, match="forward kernels are not named times"):
        conv_kernels.main(["summary", str(kept)])


@pytest.mark.parametrize("board", ["h200", "h100"])
def test_the_kept_kernels_put_the_gemm_threshold_at_28_x_28(board):
    """Read off the kept records, not the code: on both boards every forward 1x1 convolution
    of stride 1 at 28 x 28 or more ran no layout change (and all but 3 of 48 backwards),
    against at most 2 in 3 at 14 x 14 and at most 1 in 3 at 7 x 7 -- the threshold
    op_classes states."""
    with open(os.path.join(KEPT, f"{board}-conv-kernels-pointwise.json")) as f:
        found = json.load(f)
    gemm, total = {}, {}
    for run in found["runs"]:
        cin, cout, size, kernel, stride, groups = found["shapes"][run["shape"]]
        assert (kernel, stride, groups, run["layout"]) == (1, 1, 1, "nchw")
        for phase in ("forward", "backward"):
            key = (size, phase)
            total[key] = total.get(key, 0) + 1
            gemm[key] = gemm.get(key, 0) + (conv_kernels.layout_share(run[phase]) == 0)
    assert op_classes.NCHW_GEMM_POSITIONS == 28 * 28
    for size in (28, 56):
        assert gemm[size, "forward"] == total[size, "forward"] == 24
        assert gemm[size, "backward"] >= 22
    assert gemm[14, "forward"] / total[14, "forward"] <= 2 / 3
    assert gemm[7, "forward"] / total[7, "forward"] <= 1 / 3
