import csv
import json

import networkx as nx
import pytest
import torch
from torch import nn

import fxroof


@pytest.fixture(scope="module")
def graph():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 5))
    return fxroof.analyze(model, torch.randn(2, 3, 8, 8), backward=True, name="tiny")


def test_json_schema(graph, tmp_path):
    path = tmp_path / "g.json"
    graph.to_json(str(path))
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1
    assert data["model"]["name"] == "tiny" and data["model"]["batch"] == 2
    assert data["model"]["parameters"] == sum(p.numel() for p in graph_params())
    for record in data["nodes"]:
        assert {"name", "phase", "target", "layer_type", "module", "flops", "bytes_read",
                "bytes_written", "rule"} <= set(record)
        assert record["phase"] in ("forward", "backward")
        assert record["target"].startswith("aten.")
    for phase in ("forward", "backward", "overall"):
        nodes = [r for r in data["nodes"] if phase == "overall" or r["phase"] == phase]
        for key in ("flops", "macs", "bytes_read", "bytes_written"):
            assert data["totals"][phase][key] == sum(r[key] for r in nodes)


def graph_params():
    return list(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                              nn.Linear(4 * 6 * 6, 5)).parameters())


def test_breakdowns_sum_exactly_to_totals(graph):
    total = graph.totals()["overall"]
    for by in ("layer_type", "module", "op", "phase"):
        rows = graph.breakdown(by)
        assert sum(r["flops"] for r in rows) == total["flops"]
        assert sum(r["bytes"] for r in rows) == total["bytes"]
        assert abs(sum(r["flops_share"] for r in rows) - 1) < 1e-9
    layer_types = {r["key"] for r in graph.breakdown("layer_type")}
    assert {"Conv2d", "BatchNorm2d", "ReLU", "Linear"} <= layer_types


def test_module_breakdown_depth():
    g = fxroof.analyze("resnet18", batch=1)
    keys = {r["key"] for r in g.breakdown("module", depth=1)}
    assert "layer1" in keys and "layer1.0" not in keys
    keys2 = {r["key"] for r in g.breakdown("module", depth=2)}
    assert "layer1.0" in keys2


def test_csv_and_graphml(graph, tmp_path):
    graph.to_csv(str(tmp_path / "g.csv"))
    rows = list(csv.DictReader(open(tmp_path / "g.csv")))
    assert len(rows) == len(graph.records())
    graph.to_graphml(str(tmp_path / "g.graphml"))
    g = nx.read_graphml(str(tmp_path / "g.graphml"))
    assert g.number_of_nodes() == len(graph.records())
    # saved activations join the phases: some backward node has a forward predecessor
    assert any(u.startswith("forward:") and v.startswith("backward:") for u, v in g.edges)


def test_existing_file_is_not_overwritten(graph, tmp_path):
    path = tmp_path / "mine.json"
    path.write_text("precious")
    with pytest.raises(fxroof.FxroofError, match="already exists"):
        graph.to_json(str(path))
    assert path.read_text() == "precious"
    graph.to_json(str(path), overwrite=True)
    assert json.loads(path.read_text())["schema_version"] == 1


def test_missing_folder_is_a_clear_error(graph, tmp_path):
    with pytest.raises(fxroof.FxroofError, match="does not exist"):
        graph.to_csv(str(tmp_path / "nope" / "g.csv"))


def test_table_and_summary_name_units(graph):
    table = graph.table(top=3)
    assert "FLOP" in table and len(table.splitlines()) == 5
    summary = graph.summary()
    assert "FLOP" in summary and "B moved" in summary and "coverage" in summary
