"""The CLI end to end, and every bad input: a clear one-paragraph error, exit status 2."""
import json
import os
import subprocess
import sys

import pytest
import torch

import fxroof
from fxroof.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_annotate_default_model_prints_table_breakdown_totals_coverage(capsys):
    code, out, err = run(capsys, "annotate", "--top", "5")
    assert code == 0, err
    assert "resnet18" in out and "Conv2d" in out
    assert "By layer type (forward)" in out
    assert "GFLOP" in out and "coverage:" in out


def test_annotate_backward_with_exports(capsys, tmp_path):
    js, cs, gm = (str(tmp_path / f) for f in ("n.json", "n.csv", "n.graphml"))
    code, out, err = run(capsys, "annotate", "tests.fixtures.user_models:small_net",
                         "--input-shape", "2,3,16,16", "--backward", "--json", js, "--csv", cs,
                         "--graphml", gm, "--by", "module", "--depth", "1")
    assert code == 0, err
    assert "By module (backward)" in out
    data = json.load(open(js))
    assert data["model"]["inputs"][0]["shape"] == [2, 3, 16, 16]
    assert os.path.getsize(cs) > 0 and os.path.getsize(gm) > 0


def test_macs_switch(capsys):
    code, out, _ = run(capsys, "annotate", "resnet18", "--macs", "--top", "1")
    assert code == 0 and "GMAC" in out and "1.81 GMAC" in out


def test_refuses_to_overwrite_before_doing_work(capsys, tmp_path):
    path = tmp_path / "keep.json"
    path.write_text("mine")
    code, _, err = run(capsys, "annotate", "--json", str(path))
    assert code == 2 and "already exists" in err and "--force" in err
    assert path.read_text() == "mine"


BAD = [
    (["annotate", "resnet5O"], ["Unknown model 'resnet5O'", "resnet50"]),
    (["annotate", "no_such_pkg.models:net"], ["Cannot import 'no_such_pkg.models'"]),
    (["annotate", "tests.fixtures.user_models:missing"], ["has no attribute 'missing'"]),
    (["annotate", "tests.fixtures.user_models:broken"], ["out of coffee"]),
    (["annotate", "tests.fixtures.user_models:not_a_module"], ["not a torch.nn.Module"]),
    (["annotate", "resnet18", "--input-shape", "1,3,224"], ["layer `conv1` (Conv2d)", "input shape"]),
    (["annotate", "tests.fixtures.user_models:small_net", "--input-shape", "2,5,16,16"],
     ["layer `0` (Conv2d)", "(2, 5, 16, 16)"]),
    (["annotate", "tests.fixtures.user_models:DataDependent", "--input-shape", "2,4"],
     ["cannot be traced", "user_models.py:", "y.sum() > 0", "--mode eval",
      "fxroof.backend()"]),
    (["annotate", "resnet18", "--dtype", "int8"], ["Unsupported dtype 'int8'"]),
    (["annotate", "resnet18", "--input-shape", "1,x,2"], ["Cannot read the input shape"]),
    (["annotate", "resnet18", "--batch", "0"], ["--batch must be a positive"]),
    (["study", "--models", "resnet5O", "--out", "never-created"],
     ["Unknown model 'resnet5O'", "resnet50"]),
    (["study", "--batch", "0", "--out", "never-created"], ["--batch takes positive integers"]),
]

if not torch.cuda.is_available():  # on a GPU machine this would start a real study
    BAD.append((["study", "--device", "cuda", "--out", "never-created"], ["CUDA"]))


@pytest.mark.parametrize("argv,fragments", BAD, ids=[" ".join(a[1:]) for a, _ in BAD])
def test_bad_input_is_one_clear_paragraph(capsys, argv, fragments):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback" not in err
    assert err.startswith("fxroof: error: ") and err.count("\n") == 1  # one paragraph
    for fragment in fragments:
        assert fragment in err


def test_library_raises_fxroof_error_for_non_module():
    with pytest.raises(fxroof.FxroofError, match="not a torch.nn.Module"):
        fxroof.analyze(lambda x: x, torch.randn(2))


def test_console_script_runs_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "fxroof", "annotate", "vgg1"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "vgg11" in proc.stderr and "Traceback" not in proc.stderr


def test_help_reads_like_a_tool():
    proc = subprocess.run([sys.executable, "-m", "fxroof", "annotate", "--help"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0
    assert "--backward" in proc.stdout and "default: resnet18" in proc.stdout
