"""A study's rounds (`fxroof study --rounds`, bench_predict.py's default 3): every latency and
training step measured again, round after round over all the points, the median round kept."""
import pytest

from benchmarks import bench_predict as bench
from fxroof.errors import FxroofError
from fxroof.study import StudyConfig
from fxroof.study.cache import Cache, claim
from fxroof.study.sweep import COMPILED, COST, LATENCY, TRAIN, measured_result, outdated, \
    tasks
from fxroof.latency import FRESH, SHARED


def _latency(seconds, process=FRESH):
    return {"median_s": seconds, "process": process, "host_allocator": "glibc"}


def _train(forward, backward):
    return {"timing": {"eager_s": {"forward": forward, "backward": backward}},
            "process": FRESH, "host_allocator": "glibc"}


def test_later_rounds_go_over_every_point_after_the_first_pass():
    """Model a's rounds lie a whole pass apart: round 2 times a, then b (and a's training
    step), round 3 the same again; costs and compiled latencies are taken once."""
    config = StudyConfig(models=["a", "b"], batches=[1], train_batches=[1], rounds=3,
                         compiled=True).resolved()
    first = tasks(StudyConfig(models=["a", "b"], batches=[1], train_batches=[1],
                              compiled=True).resolved())
    every = tasks(config)
    assert every[:len(first)] == first
    again = [("cpu", "a", 1, "latency.{}"), ("cpu", "a", 1, "train.{}"),
             ("cpu", "b", 1, "latency.{}"), ("cpu", "b", 1, "train.{}")]
    assert every[len(first):] == [t[:3] + (t[3].format(r),) for r in (2, 3) for t in again]
    assert sum(t[3] in (COST, COMPILED) for t in every) == 4


def test_the_median_round_is_the_points_measurement(tmp_path):
    """A slow first measurement (30 ms), then 10 and 11 ms: the point's latency is 11 ms,
    and every round's seconds are kept, fastest first."""
    cache = Cache(str(tmp_path))
    for phase, seconds in ((LATENCY, 0.030), ("latency.2", 0.010), ("latency.3", 0.011)):
        cache.put("cpu", "a", 1, phase, _latency(seconds))
    found = measured_result(cache, 3, "cpu", "a", 1, LATENCY)
    assert found["median_s"] == 0.011 and found["rounds_s"] == [0.010, 0.011, 0.030]
    # one round asked: the first measurement, as it was, whatever else is cached
    assert measured_result(cache, 1, "cpu", "a", 1, LATENCY) == _latency(0.030)
    # two rounds: the lower of the two
    assert measured_result(cache, 2, "cpu", "a", 1, LATENCY)["median_s"] == 0.010


def test_a_training_step_is_ranked_by_its_forward_and_backward(tmp_path):
    cache = Cache(str(tmp_path))
    for phase, (f, b) in ((TRAIN, (0.02, 0.09)), ("train.2", (0.05, 0.02)),
                          ("train.3", (0.01, 0.03))):
        cache.put("cpu", "a", 1, phase, _train(f, b))
    found = measured_result(cache, 3, "cpu", "a", 1, TRAIN)
    assert found["timing"]["eager_s"] == {"forward": 0.05, "backward": 0.02}  # 70 ms
    assert found["rounds_s"] == pytest.approx([0.04, 0.07, 0.11])


def test_a_failed_round_is_left_out_and_all_failed_is_the_first_error(tmp_path):
    cache = Cache(str(tmp_path))
    cache.put("cpu", "a", 1, LATENCY, {"error": "boom"})
    cache.put("cpu", "a", 1, "latency.2", _latency(0.012))
    assert measured_result(cache, 3, "cpu", "a", 1, LATENCY)["median_s"] == 0.012
    cache.put("cpu", "a", 1, "latency.2", {"error": "again"})
    assert measured_result(cache, 3, "cpu", "a", 1, LATENCY) == {"error": "boom"}
    assert measured_result(cache, 3, "cpu", "b", 1, LATENCY) is None


def test_a_later_round_measured_the_other_way_is_taken_again():
    config = StudyConfig(rounds=3)  # fresh processes
    assert outdated("latency.2", _latency(0.01, SHARED), config)
    assert not outdated("latency.2", _latency(0.01, FRESH), config)


def test_more_rounds_resume_a_study_and_other_changes_do_not(tmp_path):
    folder = str(tmp_path / "s")
    defaults = StudyConfig().as_dict()
    claim(folder, StudyConfig(rounds=1).as_dict(), False, defaults, resumable=("rounds",))
    claim(folder, StudyConfig(rounds=3).as_dict(), False, defaults, resumable=("rounds",))
    with pytest.raises(FxroofError, match="differs in: repeats"):
        claim(folder, StudyConfig(rounds=3, repeats=9).as_dict(), False, defaults,
              resumable=("rounds",))


def test_the_report_says_how_many_rounds_it_measured_in():
    from fxroof.study.report import _processes

    assert "in 3 rounds over all the points" in _processes(StudyConfig(rounds=3))
    assert "round" not in _processes(StudyConfig())


def test_rounds_below_one_are_refused(capsys):
    with pytest.raises(FxroofError, match="1 or more rounds"):
        StudyConfig(rounds=0)
    with pytest.raises(SystemExit) as e:
        bench.main(["--out", "x", "--rounds", "0"])
    assert e.value.code == 2 and "--rounds: 0 is not a positive integer" in \
        capsys.readouterr().err
