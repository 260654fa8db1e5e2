"""benchmarks/bench_predict.py's rounds: each point's measured time is the median of the
study's measurement and the rounds measured after it, kept in the study folder."""
import json

import pytest

from benchmarks import bench_predict as bench
from fxroof.errors import FxroofError
from fxroof.study import StudyConfig


def _points():
    return [{"phase": "inference", "model": "a", "batch": 1, "measured_s": 0.030},
            {"phase": "training", "model": "b", "batch": 1, "measured_s": 0.100}]


def _config(repeats=5):
    return StudyConfig(models=["a", "b"], batches=[1], train_batches=[1], repeats=repeats,
                       warmup=3, allocator="caching")


def _fake_measurements(monkeypatch, times):
    """measured_again hands out ``times`` in order and records which points it was asked."""
    asked = []

    def again(point, config):
        asked.append((point["phase"], point["model"]))
        return times.pop(0)
    monkeypatch.setattr(bench, "measured_again", again)
    return asked


def test_a_slow_first_measurement_no_longer_decides_the_point(tmp_path, monkeypatch):
    """The study timed model a in a slow spell (30 ms); two later rounds give 10 and 11 ms:
    the median of 30, 10, 11 is 11 ms. The rounds go over every point in turn (a, b, a, b),
    so a point's measurements are a whole round apart."""
    asked = _fake_measurements(monkeypatch, [0.010, 0.090, 0.011, 0.110])
    found = _points()
    bench.in_rounds(found, _config(), str(tmp_path), rounds=3, measure_more=True)
    assert asked == [("inference", "a"), ("training", "b")] * 2
    assert found[0]["measured_s"] == 0.011 and found[0]["measured_rounds_s"] == [0.030, 0.010,
                                                                                 0.011]
    assert found[1]["measured_s"] == 0.100  # median of 100, 90, 110 ms


def test_the_rounds_are_kept_and_reused_without_measuring(tmp_path, monkeypatch):
    _fake_measurements(monkeypatch, [0.010, 0.090, 0.011, 0.110])
    bench.in_rounds(_points(), _config(), str(tmp_path), rounds=3, measure_more=True)
    saved = json.loads((tmp_path / bench.ROUNDS_FILE).read_text())
    assert saved["points"]["inference a 1"] == [0.010, 0.011]
    # --report-only: nothing measured, the same medians priced
    asked = _fake_measurements(monkeypatch, [])
    again = _points()
    bench.in_rounds(again, _config(), str(tmp_path), rounds=3, measure_more=False)
    assert asked == [] and again[0]["measured_s"] == 0.011
    # one round: the study's measurement alone
    alone = _points()
    bench.in_rounds(alone, _config(), str(tmp_path), rounds=1, measure_more=True)
    assert alone[0]["measured_s"] == 0.030


def test_rounds_measured_another_way_are_measured_again(tmp_path, monkeypatch):
    _fake_measurements(monkeypatch, [0.010, 0.090, 0.011, 0.110])
    bench.in_rounds(_points(), _config(repeats=5), str(tmp_path), rounds=3, measure_more=True)
    asked = _fake_measurements(monkeypatch, [0.020, 0.095, 0.021, 0.105])
    found = _points()
    bench.in_rounds(found, _config(repeats=9), str(tmp_path), rounds=3, measure_more=True)
    assert len(asked) == 4 and found[0]["measured_s"] == 0.021


def test_a_failed_round_is_left_out_of_the_median(tmp_path, monkeypatch):
    _fake_measurements(monkeypatch, [None, 0.090, 0.012, None])
    found = _points()
    bench.in_rounds(found, _config(), str(tmp_path), rounds=3, measure_more=True)
    assert found[0]["measured_rounds_s"] == [0.030, 0.012]
    assert found[0]["measured_s"] == pytest.approx(0.021)
    assert found[1]["measured_s"] == pytest.approx(0.095)


def test_an_unreadable_rounds_file_is_named(tmp_path):
    (tmp_path / bench.ROUNDS_FILE).write_text("{not json")
    with pytest.raises(FxroofError, match="Delete it to measure them again"):
        bench.in_rounds(_points(), _config(), str(tmp_path), rounds=3, measure_more=False)


def test_rounds_below_one_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--out", "x", "--rounds", "0"])
    assert e.value.code == 2 and "--rounds 0" in capsys.readouterr().err
