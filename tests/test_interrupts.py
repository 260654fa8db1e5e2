"""A Ctrl-C that lands where Python swallows it still stops a command (fxroof.interrupts)."""
from __future__ import annotations

import os
import signal
import sys
import weakref

import pytest

from fxroof import interrupts
from fxroof.files import atomic

# the swallowed KeyboardInterrupt is what pytest reports as "unraisable": the point here
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(autouse=True)
def python_handles_ctrl_c():
    """Python installs its KeyboardInterrupt handler only where SIGINT is not ignored when it
    starts, and a suite started in the background of a non-interactive shell inherits SIG_IGN
    (these tests then failed on their premise): put the handler in place, and back after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class _Thing:
    pass


def _ctrl_c_inside_a_weakref_callback() -> None:
    """SIGINT to this process while a weakref callback runs: the KeyboardInterrupt is raised
    in the callback, where the interpreter prints "Exception ignored" and carries on -- what
    happens to a Ctrl-C that lands while fake tensors are collected."""
    thing = _Thing()
    ref = weakref.ref(thing, lambda _: os.kill(os.getpid(), signal.SIGINT))
    del thing  # the callback runs now, and the signal's handler inside it
    assert ref() is None


def test_python_loses_a_ctrl_c_raised_in_a_weakref_callback():
    """The premise: with Python's own handler the interrupt is gone once the callback
    returns."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    _ctrl_c_inside_a_weakref_callback()  # no KeyboardInterrupt comes out


def test_a_swallowed_ctrl_c_is_raised_again_by_check_and_not_reported(monkeypatch):
    """Inside ``remembered`` the interrupt comes out at the next check, and the traceback
    the interpreter would print for the swallowed one (sys.unraisablehook) is left out;
    another unraisable error still reaches the hook that was there."""
    reported = []

    def hook(unraisable):
        reported.append(unraisable.exc_type)
    monkeypatch.setattr(sys, "unraisablehook", hook)
    with interrupts.remembered():
        _ctrl_c_inside_a_weakref_callback()
        thing = _Thing()
        weakref.finalize(thing, lambda: 1 / 0)
        del thing
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert reported == [ZeroDivisionError]
    interrupts.check()  # outside, nothing is remembered: a library's caller is left alone
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    assert sys.unraisablehook is hook


def test_after_a_swallowed_ctrl_c_no_file_is_put_in_place(tmp_path):
    path = tmp_path / "out.json"
    with interrupts.remembered():
        _ctrl_c_inside_a_weakref_callback()
        with pytest.raises(KeyboardInterrupt):
            with atomic(str(path)) as f:
                f.write("{}")
    assert os.listdir(tmp_path) == []  # neither the file nor its partial


def test_check_does_nothing_without_a_ctrl_c(tmp_path):
    with interrupts.remembered():
        interrupts.check()
        with atomic(str(tmp_path / "out.json")) as f:
            f.write("{}")
    assert (tmp_path / "out.json").read_text() == "{}"


def test_a_benchmark_script_interrupted_while_it_imports_torch_says_so_in_one_line(tmp_path):
    """Ctrl-C once a benchmark script has begun loading torch's libraries lands before
    script_main takes over: one line, status 130, no traceback, nothing written. A test
    importing the package keeps its own handler."""
    import subprocess
    import time

    import benchmarks

    assert signal.getsignal(signal.SIGINT) is not benchmarks._interrupted_while_loading
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    profile = os.path.join(root, "benchmarks", "measured",
                           "h100-profile-convnext_tiny-b256-bf16.json")
    out = tmp_path / "out.json"
    run = subprocess.Popen(
        [sys.executable, os.path.join(root, "benchmarks", "fit_launch_geometry.py"), profile,
         "--chip", "h100_sxm", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    maps = f"/proc/{run.pid}/maps"  # torch's libraries mapped: fxroof is being imported
    deadline = time.monotonic() + 60
    while run.poll() is None and time.monotonic() < deadline:
        with open(maps) as f:
            if "libtorch" in f.read():
                break
        time.sleep(0.005)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130
    assert "Traceback" not in err
    assert err.strip() == "fit_launch_geometry.py: interrupted: nothing written"
    assert not out.exists() and list(tmp_path.iterdir()) == []
