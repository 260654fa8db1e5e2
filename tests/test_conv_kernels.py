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


def test_the_kept_kernels_give_the_transposes_time_an_element():
    """launch_geometry.TRANSPOSE_ELEMENT_S is the median, over the kept records of both
    boards (132 SMs each), of an SM's time per element of cuDNN's 16-bit layout kernels --
    recomputed here from the kernels' times and the tensors' sizes. The fp32 ones run
    slower an element (they stream bytes), so the 16-bit rate is the bound, not the rate."""
    import numpy as np

    from fxroof.launch_geometry import TRANSPOSE_ELEMENT_S
    sixteen, fp32 = [], []
    for name in sorted(os.listdir(KEPT)):
        if "conv-kernels" not in name:
            continue
        found = conv_kernels.read_kernels(os.path.join(KEPT, name))
        for t in conv_kernels.transpose_times(found, 1e7):
            (fp32 if t["dtype"] == "fp32" else sixteen).append(t["us"] * 1e-6 * 132
                                                                / t["elements"])
    assert len(sixteen) >= 100
    assert np.median(sixteen) == pytest.approx(TRANSPOSE_ELEMENT_S, rel=0.01)
    assert np.median(fp32) > 1.1 * np.median(sixteen)


def test_transpose_times_reads_a_forwards_input_and_output_kernels(tmp_path, capsys):
    """By hand: a 3x3 convolution of 2 x 8 x 4 x 4 in, 2 x 8 x 4 x 4 out (256 elements each),
    its input transposed in 2.56 us (and a weight one, smaller), its output in 5.12 us: 10
    and 20 ns an element, x 4 SMs = 40 and 80 ns an element per SM. A channels-last run and
    a 3-channel stem's (priced with no transposes) are left out."""
    run = {"shape": "tiny", "batch": 2, "dtype": "bf16", "layout": "nchw", "searched": False,
           "forward": [{"name": "nchwToNhwcKernel<bf16>", "us": 2.56},
                       {"name": "nchwToNhwcKernel<bf16>", "us": 1.0},
                       {"name": "sm90_xmma_fprop", "us": 9.0},
                       {"name": "nhwcToNchwKernel<bf16>", "us": 5.12}], "backward": []}
    found = {"benchmark": "conv_kernels",
             "shapes": {"tiny": [8, 8, 4, 3, 1, 1], "stem": [3, 8, 4, 3, 1, 1]},
             "runs": [run, {**run, "layout": "channels_last"}, {**run, "shape": "stem"}]}
    assert conv_kernels.transpose_times(found, 1) == [
        {"dtype": "bf16", "tensor": "input", "elements": 256, "us": 2.56},
        {"dtype": "bf16", "tensor": "output", "elements": 256, "us": 5.12}]
    assert conv_kernels.transpose_times(found, 257) == []
    path = tmp_path / "k.json"
    path.write_text(json.dumps(found))
    with pytest.raises(FxroofError, match="does not record its GPU's SMs"):
        conv_kernels.main(["transposes", str(path), "--min-elements", "1"])
    # a record without its shapes, or a run without its batch, is named, not a traceback
    for broken in ({**found, "shapes": None}, {**found, "runs": [{**run, "batch": None}]},
                   {**found, "shapes": {"tiny": [8, 8]}}):
        path.write_text(json.dumps(broken))
        with pytest.raises(FxroofError, match="shapes .6 numbers each. and its runs' batches"):
            conv_kernels.main(["transposes", str(path), "--multiprocessors", "4"])
    path.write_text(json.dumps(found))
    assert conv_kernels.main(["transposes", str(path), "--min-elements", "1",
                              "--multiprocessors", "4"]) == 0
    assert "bf16:   2 kernels  60.000 (44.000-76.000) ns" in capsys.readouterr().out
