"""Figures render: files exist, are non-empty images of the expected size."""

import matplotlib.image as mpimg
import pytest

import fxroof
from fxroof.cli import main


def image_size(path):
    height, width = mpimg.imread(path).shape[:2]
    return width, height


def test_chips_plot_all_and_per_class(tmp_path, capsys):
    out = tmp_path / "chips.png"
    assert main(["chips", "plot", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000 and (tmp_path / "chips-gpu.png").exists()
    width, height = image_size(str(out))
    assert width > 800 and height > 500


def test_model_points_from_names_and_from_saved_json(tmp_path, capsys):
    saved = tmp_path / "r18.json"
    fxroof.analyze("resnet18", batch=2).to_json(str(saved))
    out = tmp_path / "r.png"
    assert main(["roofline", "mobilenet_v3_small", str(saved), "--batch", "1", "4",
                 "--chip", "t4", "--chip", "a100_sxm_80gb", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_layer_type_bubbles_svg(tmp_path, capsys):
    out = tmp_path / "lt.svg"
    assert main(["roofline", "resnet18", "--by", "layer_type", "--chip", "h100_sxm",
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("<?xml") and "Conv2d" in text


@pytest.mark.parametrize("argv,fragment", [
    (["roofline", "resnet18", "--chip", "h100_sxm", "--out", "/no/such/dir/r.png"],
     "does not exist"),
    (["roofline", "resnet18", "--chip", "h100x"], "Did you mean h100_sxm"),
    (["roofline", "resnet18", "resnet34", "--by", "layer_type", "--chip", "t4"],
     "one model"),
    (["roofline", "missing.json", "--chip", "t4"], "No such file"),
])
def test_plot_errors(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


def test_existing_figure_is_kept(tmp_path, capsys):
    out = tmp_path / "keep.png"
    out.write_bytes(b"mine")
    assert main(["chips", "plot", "--out", str(out)]) == 2
    assert out.read_bytes() == b"mine"
