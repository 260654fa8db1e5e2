"""The README runs as written: every shell command of its ```sh blocks, in order, in one working
folder (later commands read what earlier ones wrote), and every ```python block, each in a
fresh namespace, so no block leans on names another defined.

A command marked `[long: ...]` in its comment (the full study), or `[gpu]` on a machine
without CUDA, is parsed by fxroof's own parser instead of run: its options must exist and
hold valid values. The quick start's install lines run their fxroof part; the test command
must be exactly what .ci/run runs.
"""
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest
import torch

from fxroof.cli import build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)


def readme_blocks(language: str) -> list[str]:
    text = open(os.path.join(ROOT, "README.md")).read()
    return [textwrap.dedent(body) for _, lang, body in FENCE.findall(text) if lang == language]


def shell_commands() -> list[str]:
    lines = [line.strip() for block in readme_blocks("sh") for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_readme_has_the_blocks_this_test_runs():
    commands = shell_commands()
    assert len(commands) >= 20 and len(readme_blocks("python")) >= 3
    assert commands[:2] == ['pip install -c constraints.txt . && fxroof annotate',
                            'pip install -c constraints.txt ".[test]" && python -m pytest']


def test_the_quick_start_test_command_is_what_ci_runs():
    ci = open(os.path.join(ROOT, ".ci", "run")).read().strip().splitlines()[-1]
    assert ci == shell_commands()[1]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


def _skip_reason(comment: str):
    if "[long" in comment:
        return "long"
    if "[gpu]" in comment and not torch.cuda.is_available():
        return "gpu"
    return None


@pytest.mark.parametrize("line", shell_commands()[2:] + [shell_commands()[0]])
def test_readme_shell_command(line, workdir, monkeypatch, capsys):
    command, _, comment = line.partition("  #")
    if command.startswith("pip install"):  # the install is this suite's own; run the rest
        command = command.split("&&", 1)[1]
    argv = shlex.split(command)
    assert argv[0] == "fxroof", f"the README's shell blocks hold fxroof commands: {line}"
    if _skip_reason(comment):
        build_parser().parse_args(argv[1:])  # exits 2 on an option that does not exist
        return
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("FXROOF_CHIPS_DIR", str(workdir / "chips"))  # chips measure saves here
    code = main(argv[1:])
    out, err = capsys.readouterr()
    assert code == 0, f"`{line}` exited {code}: {err}"
    assert out.strip() or "wrote" in err, f"`{line}` printed nothing"


@pytest.mark.parametrize("index", range(len(readme_blocks("python"))))
def test_readme_python_block(index, tmp_path, monkeypatch):
    code = readme_blocks("python")[index]
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, f"README.md python block {index + 1}", "exec"), {"__name__": "readme"})
    assert printed.getvalue().strip(), "the block printed nothing"
    if "no_bias_add" in code:  # the output its comment states, derived there by hand
        assert "('aten.addmm.default', 128, 'custom[no_bias_add]')" in printed.getvalue()


def test_the_console_script_runs_a_readme_command(tmp_path):
    """The commands above run through fxroof.cli.main in this process; the installed
    console script is the same function behind `entry()`, checked here once."""
    proc = subprocess.run([sys.executable, "-m", "fxroof", "chips", "show", "t4"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "NVIDIA T4" in proc.stdout
