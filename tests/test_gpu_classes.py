"""benchmarks/gpu_classes.py: a GPU profile's per-class measured and predicted kernel times,
checked on a CPU profile (whose nodes' times are its kernels') and hand-made files."""
import json

import pytest
import torch
from torch import nn

import fxroof
from benchmarks import gpu_classes
from fxroof import op_classes, time_model
from fxroof.chips import load_chips
from fxroof.errors import FxroofError


def test_the_classes_add_up_to_the_timed_kernel_nodes(tmp_path, capsys):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 14 * 14, 10))
    g = fxroof.analyze(model, torch.randn(2, 3, 16, 16), backward=True)
    g.time(repeats=2, warmup=1, progress=False)
    path, out = str(tmp_path / "prof.json"), tmp_path / "classes.json"
    g.to_json(path)
    assert gpu_classes.main([path, "--chip", "t4", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["classes"]
    t4 = load_chips()["t4"]
    kernels = [r for r in g.records() if op_classes.op_class_of(r) is not None]
    for phase in ("forward", "backward"):
        mine = [r for r in kernels if r["phase"] == phase]
        found = [row for row in rows if row["phase"] == phase]
        assert sum(row["nodes"] for row in found) == len(mine)
        assert sum(row["measured_s"] for row in found) == pytest.approx(
            sum(r["time_s"] for r in mine))
        # the device's part alone: the node's time less the host's fixed cost it overlaps,
        # each kernel lasting at least 3 us (the README's floor)
        expected = 0.0
        for r in mine:
            t = time_model.node_time(r, t4)
            expected += max(t.kernel_s, 3e-6) if t.host_s else t.predicted_s
            assert t.kernel_s < t.predicted_s or not t.host_s
        assert sum(row["kernel_s"] for row in found) == pytest.approx(expected)
    assert {row["op_class"] for row in rows} >= {"conv", "norm_train", "elementwise"}
    assert "conv" in capsys.readouterr().out


def test_a_host_bound_gpu_profile_is_refused_and_a_bad_file_named(tmp_path):
    starved = tmp_path / "starved.json"
    starved.write_text(json.dumps({"model": {"name": "m", "batch": 1}, "nodes": [],
                                   "timing": {"device": "cuda", "ratio": {"forward": 3.3}}}))
    with pytest.raises(FxroofError, match="3.3x the eager step"):
        gpu_classes.read_profile(str(starved))
    cpu = tmp_path / "cpu.json"  # a CPU's ratio is no starvation: read as it is
    cpu.write_text(json.dumps({"model": {"name": "m", "batch": 1}, "nodes": [],
                               "timing": {"device": "cpu", "ratio": {"forward": 3.3}}}))
    assert gpu_classes.read_profile(str(cpu))["nodes"] == []
    broken = tmp_path / "broken.json"  # an annotated graph's nodes, never timed
    broken.write_text(json.dumps({"model": {"name": "m", "batch": 1}, "nodes": [{"op": "mm"}],
                                  "timing": {"device": "cuda", "ratio": {}}}))
    with pytest.raises(FxroofError, match="node 0 lacks"):
        gpu_classes.read_profile(str(broken))
    (tmp_path / "text.json").write_text("not json")
    with pytest.raises(FxroofError, match="Cannot read"):
        gpu_classes.read_profile(str(tmp_path / "text.json"))
