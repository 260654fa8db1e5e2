"""Measured roofs of this machine: a quick CPU measurement saved as a user chip."""
import pytest

import fxroof
from fxroof import chips as chips_module
from fxroof import measure as measure_module
from fxroof.chips import lint, load_chips, parse_chip


@pytest.fixture
def chip_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(measure_module, "USER_CHIPS_DIR", str(tmp_path))
    return tmp_path


def test_quick_cpu_measurement_is_a_valid_linted_chip(chip_dir, capsys):
    from fxroof.cli import main

    assert main(["chips", "measure"]) == 0
    out = capsys.readouterr().out
    assert "this-cpu" in out and "use --chip this-cpu" in out
    saved = chip_dir / "this-cpu.yaml"
    assert saved.exists()
    chip = load_chips()["this-cpu"]  # found in the user chip folder, no --chips-file needed
    assert chip.cls == "cpu" and chip.peaks["fp32"] > 1e9
    assert lint(chip) == []
    assert "fxroof chips measure" in chip.sources[0] and "(measured)" in chip.name
    # a second run refuses to overwrite, before measuring
    assert main(["chips", "measure"]) == 2
    assert "--force" in capsys.readouterr().err


def test_predict_and_profile_on_the_measured_chip(chip_dir, capsys):
    from fxroof.cli import main

    entry = measure_module.measure("cpu", quick=True)
    measure_module.save(entry)
    assert main(["predict", "tests.fixtures.user_models:small_net", "--input-shape", "2,3,16,16",
                 "--chip", "this-cpu"]) == 0
    assert "(measured)" in capsys.readouterr().out
    g = fxroof.analyze("resnet18", batch=2)
    g.time(repeats=2, warmup=1)
    from fxroof import roofline

    rows = roofline.where_to_look(g.records(), load_chips()["this-cpu"], top=3)
    assert rows and all(r["fraction_of_roof"] is not None for r in rows)


def test_saved_entry_round_trips_through_the_loader(chip_dir):
    entry = {"id": "this-cpu", "name": "box", "class": "cpu", "peaks":
             {"fp32": {"value": 1e11, "unit": "matrix", "derivation": "measured"}},
             "bandwidth": {"value": 2e10, "derivation": "measured"}, "sources": ["test"]}
    path = measure_module.save(entry)
    assert parse_chip(entry, path).peaks == {"fp32": 1e11}
    assert chips_module.read_file(path)[0].bandwidth == 2e10
    with pytest.raises(fxroof.FxroofError, match="does not overwrite"):
        measure_module.save(entry)
