"""The fault corpus: bad input a new user gives, each a clear one-paragraph error.

Every command-line case asserts the exit status (1 a failure, 2 a usage error), that no
traceback reaches the user, that the message names the problem, and that nothing in the
working folder was created or changed. The API cases assert an FxroofError naming the
problem. benchmarks/README.md states the corpus size.
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import shlex
import signal
import stat
import subprocess
import sys
import time

import pytest
import torch

import fxroof
from fxroof.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAILED, USAGE = 1, 2
GOOD_CHIP = """chips:
  - id: mine
    name: Mine
    class: gpu
    peaks: {fp32: {value: 1e13, unit: vector}}
    bandwidth: 1e12
"""
ANNOTATION_NODE = {"name": "mm", "phase": "forward", "op": "mm", "op_class": "matrix",
                   "dtype": "float32", "layer_type": "Linear", "flops": 10, "bytes": 4}
# the "billion laughs": nine levels of nine aliases, 9^9 values once expanded
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]\n"
    for p, c in zip("abcdefgh", "bcdefghi")) + "chips: []\n"

# file name -> content written into the working folder before each case
FILES = {
    "peaks-list.yaml": GOOD_CHIP.replace("{fp32: {value: 1e13, unit: vector}}", "[1e13]"),
    "nan.yaml": GOOD_CHIP.replace("value: 1e13", "value: .nan"),
    "inf.yaml": GOOD_CHIP.replace("bandwidth: 1e12", "bandwidth: .inf"),
    "sparse-list.yaml": GOOD_CHIP + "    sparse: [1, 2]\n",
    "class.yaml": GOOD_CHIP.replace("class: gpu", "class: dsp"),
    "binary.yaml": bytes(range(256)) * 4,
    "bomb.yaml": BOMB,
    "no-chips.yaml": "hello: world\n",
    "twice.yaml": GOOD_CHIP + GOOD_CHIP.split("chips:\n")[1],  # two entries 'mine'
    "key-twice.yaml": GOOD_CHIP + "    bandwidth: 2e12\n",  # YAML keeps the last, silently
    "schema.yaml": "schema_version: 99\n" + GOOD_CHIP,
    "tdp.yaml": GOOD_CHIP + "    tdp: hot\n",
    "band.yaml": GOOD_CHIP + "    calibration: {gemm: {t0: 1e-5, compute: 0.5, memory: 0.5,"
                 " band: [1.2, 0.8]}}\n",
    "calibration.yaml": GOOD_CHIP + "    calibration: {gemm: {t0: 1e-5}}\n",
    "reorders.yaml": GOOD_CHIP + "    calibration: {conv: {t0: 1e-5, compute: 0.5, memory: 0.5,"
                     " band: [1, 1], layout_rate: -2.0e+10}}\n",
    "serial.yaml": GOOD_CHIP + "    calibration: {elementwise: {t0: 1e-5, compute: 0.5,"
                   " memory: 0.5, band: [1, 1], serial: 0}}\n",
    "multiprocessors.yaml": GOOD_CHIP + "    multiprocessors: {value: 1.5}\n",
    "calibration-class.yaml": GOOD_CHIP + "    calibration: {fft: {t0: 1e-5, compute: 0.5, "
                              "memory: 0.5, band: [0.9, 1.1]}}\n",
    "truncated.json": '{"schema_version": 1, "model": {"name": "x", "ba',
    "binary.json": bytes(range(256)) * 4,
    "list.json": "[1, 2, 3]",
    "other.json": json.dumps({"schema_version": 1, "model": {"name": "x"}, "nodes": []}),
    "old.json": json.dumps({"schema_version": 7, "nodes": []}),
    "nodes.json": json.dumps({"schema_version": 1,
                              "model": {"name": "x", "batch": 1, "dtype": "float32"},
                              "nodes": [{k: v for k, v in ANNOTATION_NODE.items()
                                         if k != "flops"}]}),
    # Python's json reads NaN; a count below 0 or a phase no step has is no annotation either
    "nan-bytes.json": json.dumps({"schema_version": 1,
                                  "model": {"name": "x", "batch": 1, "dtype": "float32"},
                                  "nodes": [{**ANNOTATION_NODE, "bytes": float("nan")}]}),
    "negative.json": json.dumps({"schema_version": 1,
                                 "model": {"name": "x", "batch": 1, "dtype": "float32"},
                                 "nodes": [{**ANNOTATION_NODE, "flops": -5}]}),
    "huge.json": json.dumps({"schema_version": 1,
                             "model": {"name": "x", "batch": 1, "dtype": "float32"},
                             "nodes": [{**ANNOTATION_NODE, "flops": 1e300, "bytes": 1e-300}]}),
    "op-class.json": json.dumps({"schema_version": 1,
                                 "model": {"name": "x", "batch": 1, "dtype": "float32"},
                                 "nodes": [{**ANNOTATION_NODE, "op_class": "quantum"}]}),
    "model-dtype.json": json.dumps({"schema_version": 1,
                                    "model": {"name": "x", "batch": 1, "dtype": "int4"},
                                    "nodes": [ANNOTATION_NODE]}),
    "sideways.json": json.dumps({"schema_version": 1,
                                 "model": {"name": "x", "batch": 1, "dtype": "float32"},
                                 "nodes": [{**ANNOTATION_NODE, "phase": "sideways"}]}),
    "config-truncated.json": '{"model_type": "gpt2", "n_layer": ',
    "config-nomodel.json": '{"n_layer": 2}',
    "exits.py": "import sys\nsys.exit(3)\n",  # a script whose argparse runs at import
    "exits_in_forward.py": ("import sys, torch\nclass M(torch.nn.Module):\n"
                            "    def forward(self, x):\n        sys.exit(4)\n"),
    # a forward that runs no tensor op: every count zero, and `predict` a KeyError traceback
    "constant.py": ("import torch\nclass M(torch.nn.Module):\n"
                    "    def forward(self, x):\n        return 3\n"),
    # a BaseException that is neither Exception nor SystemExit passed every handler
    "generator_exit.py": ("import torch\nclass M(torch.nn.Module):\n"
                          "    def forward(self, x):\n        raise GeneratorExit('closed')\n"),
    "exists.json": "mine",
    "folder/keep.txt": "mine",
}

CLI = [
    # the chips files a user gives
    ("chips list --chips-file peaks-list.yaml", FAILED,
     ["peaks-list.yaml", "'peaks'", "mapping"]),
    ("chips list --chips-file nan.yaml", FAILED, ["nan.yaml", "peaks.fp32.value", "finite"]),
    ("chips list --chips-file inf.yaml", FAILED, ["inf.yaml", "bandwidth", "finite"]),
    ("chips list --chips-file sparse-list.yaml", FAILED, ["'sparse'", "mapping"]),
    ("chips list --chips-file class.yaml", FAILED, ["'class'", "dsp"]),
    ("chips list --chips-file binary.yaml", FAILED, ["binary.yaml", "not a text file"]),
    ("chips list --chips-file bomb.yaml", FAILED, ["bomb.yaml", "aliases"]),
    ("chips list --chips-file no-chips.yaml", FAILED, ["'chips:' list"]),
    ("chips list --chips-file twice.yaml", FAILED, ["twice.yaml", "chip id 'mine'"]),
    ("chips list --chips-file key-twice.yaml", FAILED,
     ["key-twice.yaml at line 7", "'bandwidth' appears twice"]),
    ("chips list --chips-file schema.yaml", FAILED, ["schema_version is 99", "schema 1"]),
    # a tdp that is no number reached the family choice as a TypeError traceback
    ("predict squeezenet1_0 --chip mine --chips-file tdp.yaml", FAILED,
     ["field 'tdp' must be a positive finite number, not 'hot'"]),
    ("chips list --chips-file band.yaml", FAILED, ["band is [1.2, 0.8]", "p10 first"]),
    ("chips list --chips-file missing.yaml", FAILED, ["missing.yaml", "No such file"]),
    ("chips list --chips-file calibration.yaml", FAILED, ["calibration.gemm", "needs t0"]),
    # a calibration number out of its range is named, with the range, not dumped whole
    ("chips list --chips-file reorders.yaml", FAILED,
     ["calibration.conv", "layout_rate is -20000000000.0", "[0, inf)"]),
    # a fixed cost no part of which precedes the kernel is no fixed cost: (0, 1]
    ("chips list --chips-file serial.yaml", FAILED,
     ["calibration.elementwise", "serial is 0", "(0, 1]"]),
    # a GPU's tiles run in waves over whole multiprocessors
    ("predict squeezenet1_0 --chip mine --chips-file multiprocessors.yaml", FAILED,
     ["'multiprocessors'", "whole number", "1.5"]),
    ("chips list --chips-file calibration-class.yaml", FAILED, ["calibration.fft",
                                                                "not an op class"]),
    # a chip without the precision asked for: what it lists, and how to ask for another
    ("predict squeezenet1_0 --chip mi210 --amp bf16", FAILED,
     ["'mi210' has no bf16 peak", "fp16", "--amp"]),
    # annotation JSON given to roofline
    ("roofline truncated.json --chip t4", FAILED, ["truncated.json", "not valid JSON"]),
    ("roofline binary.json --chip t4", FAILED, ["binary.json", "not text"]),
    ("roofline list.json --chip t4", FAILED, ["list.json", "schema_version"]),
    ("roofline other.json --chip t4", FAILED, ["other.json", "'model'"]),
    ("roofline old.json --chip t4", FAILED, ["old.json", "7"]),
    ("roofline nodes.json --chip t4", FAILED, ["node 0 lacks flops"]),
    ("roofline nan-bytes.json --chip t4", FAILED, ["whole numbers from 0 to 1e+24", "nan"]),
    ("roofline negative.json --chip t4", FAILED, ["whole numbers from 0 to 1e+24", "-5"]),
    # an infinite intensity reached matplotlib's ticker as an OverflowError
    ("roofline huge.json --chip t4", FAILED, ["whole numbers from 0 to 1e+24", "1e+300"]),
    ("roofline op-class.json --chip t4", FAILED, ["op_class is 'quantum'"]),
    ("roofline model-dtype.json --chip t4", FAILED, ["model dtype is 'int4'"]),
    ("roofline sideways.json --chip t4", FAILED, ["phase is 'sideways'"]),
    # hf: configs
    ("annotate hf:config-truncated.json", FAILED, ["config-truncated.json", "complete"]),
    ("annotate hf:config-nomodel.json", FAILED, ["no 'model_type'"]),
    ("annotate hf:gpt2 --hf-config n_layers=2", USAGE, ["no field 'n_layers'", "n_layer"]),
    ("annotate hf:gpt2 --hf-config n_layer=two", USAGE, ["n_layer", "int"]),
    ("annotate hf:gpt2 --hf-config n_embd=65 --hf-config n_layer=1", FAILED,
     ["divisible", "--hf-config"]),
    ("annotate hf:gpt2 --hf-config novalue", USAGE, ["key=value"]),
    # transformers builds range(-1) layers, or an empty vocabulary, and says nothing
    ("annotate hf:gpt2 --hf-config n_layer=-1", USAGE, ["n_layer=-1", "at least 1"]),
    ("annotate hf:gpt2 --hf-config vocab_size=0", USAGE, ["vocab_size=0", "default 50257"]),
    ("annotate resnet18 --hf-config n_layer=2", USAGE, ["not an hf: model"]),
    ("annotate gpt2", FAILED, ["hf:gpt2"]),
    # files fxroof would write
    ("annotate --json folder", FAILED, ["'folder'", "is a folder", "'folder/out.json'"]),
    # the example names a file of the kind the option writes, not a .json for each
    ("annotate --csv folder", FAILED, ["is a folder", "'folder/out.csv'"]),
    ("roofline resnet18 --chip t4 --out folder", FAILED, ["is a folder", "'folder/out.png'"]),
    ("annotate --json no/such/dir/x.json", FAILED, ["does not exist"]),
    ("annotate --json exists.json", FAILED, ["already exists", "--force"]),
    ("annotate --json same.out --csv same.out", FAILED, ["named by two output options"]),
    # one file spelled two ways was written twice, the second output over the first
    ("annotate --json same.out --csv ./same.out", FAILED, ["named by two output options"]),
    # an empty path (a shell variable left unset) skipped the output without a word
    ("annotate --json ''", USAGE, ["path of the file to write is empty"]),
    ("annotate --csv ' '", USAGE, ["is blank"]),
    ("chips measure --out ''", FAILED, ["is empty", "Nothing was measured"]),
    ("study --out ''", USAGE, ["the study folder is empty"]),
    ("roofline resnet18 --chip t4 --out noext", FAILED, ["no extension"]),
    ("roofline resnet18 --chip t4 --out fig.xyz", FAILED, ["'.xyz'", ".png"]),
    ("chips plot --out chips.xyz", FAILED, ["'.xyz'"]),
    ("chips measure --out folder", FAILED, ["'folder' is a folder"]),
    # arguments
    ("annotate hf:gpt2 --seq-len 0", USAGE, ["--seq-len", "positive"]),
    ("annotate hf:gpt2 --seq-len -5", USAGE, ["--seq-len"]),
    ("annotate --top -5", USAGE, ["--top"]),
    ("annotate --depth -1", USAGE, ["--depth"]),
    ("annotate --batch x", USAGE, ["--batch", "not an integer"]),
    ("annotate --input-shape 100000000,100000000,100000,100000", USAGE,
     ["more than any tensor's storage"]),
    ("annotate --input-shape 1,-3,8,8", USAGE, ["Cannot read the input shape"]),
    # a named model's input of a batch no tensor can hold was torch's overflow, a traceback
    ("predict resnet18 --batch 99999999999999 --chip h100_sxm", USAGE,
     ["batch 99999999999999", "more than any tensor's storage"]),
    # a --batch the given shapes contradict was dropped without a word
    ("annotate --input-shape 1,3,224,224 --batch 4", USAGE,
     ["batch=4", "inputs of shape (1, 3, 224, 224), batch 1", "--input-shape 4,..."]),
    # the training step and its target (#15)
    ("annotate squeezenet1_0 --loss hinge", USAGE, ["Unknown loss 'hinge'"]),
    ("annotate squeezenet1_0 --loss lm", USAGE, ["needs an hf: model"]),
    ("annotate squeezenet1_0 --loss os.path:nothere", USAGE, ["Cannot load the loss"]),
    ("annotate squeezenet1_0 --loss os.path:join", FAILED, ["loss 'os.path:join' failed"]),
    ("annotate squeezenet1_0 --foreach", USAGE, ["--foreach", "--optimizer"]),
    ("annotate squeezenet1_0 --optimizer lion", USAGE, ["--optimizer", "lion"]),
    ("annotate squeezenet1_0 --amp fp8", USAGE, ["--amp", "fp8"]),
    ("annotate squeezenet1_0 --chip t4 --amp bf16", USAGE, ["compute capability 8.0", "7.5"]),
    ("annotate squeezenet1_0 --chip nope", FAILED, ["Unknown chip 'nope'"]),
    ("annotate squeezenet1_0 --memory-format nhwc", USAGE, ["--memory-format"]),
    # channels-last of a step with no 4-D tensor was the contiguous analysis, renamed
    ("annotate hf:gpt2 --hf-config n_layer=1 --memory-format channels_last", USAGE,
     ["lays out 4-D tensors", "GPT2LMHeadModel has none", "(1, 128)"]),
    ("annotate squeezenet1_0 --compiled --loss", USAGE, ["compiled view", "--loss"]),
    ("profile --repeats 0", USAGE, ["--repeats"]),
    ("profile --warmup -1", USAGE, ["--warmup"]),
    ("profile --device tpu", USAGE, ["--device", "tpu"]),
    # real tensors past the free memory: refused (it was a traceback, or the OOM killer)
    ("profile --batch 100000", FAILED, ["Out of memory", "batch 100000", "is free"]),
    # a chips file is read even without a --chip to pick from it (it was ignored)
    ("profile --chips-file no-chips.yaml", FAILED, ["no-chips.yaml", "'chips:' list"]),
    ("profile --chips-file missing.yaml", FAILED, ["missing.yaml", "No such file"]),
    ("chips plot --dtype fp33", USAGE, ["--dtype", "invalid choice"]),
    ("study --repeats 0 --out never", USAGE, ["--repeats"]),
    ("annotate exits.py:M", FAILED, ["called sys.exit(3)", 'if __name__ == "__main__":']),
    ("annotate exits_in_forward.py:M --input-shape 2,3", FAILED,
     ["failed in layer `(root)` (M): SystemExit: 4", "exits_in_forward.py:4"]),
    ("predict constant.py:M --input-shape 2,3 --chip t4", FAILED,
     ["ran no tensor operation on inputs of shape (2, 3)", "returned the int 3"]),
    ("annotate generator_exit.py:M --input-shape 2,3", FAILED,
     ["failed in layer `(root)` (M): GeneratorExit: closed", "generator_exit.py:4"]),
    # a Python file named without the callable in it was an unknown model name
    ("annotate exits_in_forward.py", FAILED, ["'exits_in_forward.py' is a Python file",
                                              "exits_in_forward.py:M", "It defines M."]),
    ("annotate nowhere/net.py", FAILED, ["'nowhere/net.py' names a Python file that does "
                                         "not exist"]),
    ("annotate exists.json:Model", FAILED, ["'exists.json', a path that is not a Python file"]),
    ("chips measure --out exists.json", FAILED, ["'exists.json' already exists", "--force"]),
    ("study --out exists.json", FAILED, ["is a file, not a folder"]),
    ("study --out exists.json/inside", FAILED, ["Cannot create the study folder",
                                                "Not a directory"]),
    ("study --report-only --out folder", FAILED, ["holds no study"]),
    # a training batch the sweep would never reach was skipped in silence
    ("study --models alexnet --batch 1 --train-batch 8 --out never", USAGE,
     ["--train-batch 8", "(1)", "--batch"]),
    # freezing without the compiled section would be ignored in silence
    ("study --models alexnet --freeze --out never", USAGE, ["--freeze", "add --compiled"]),
]


def _snapshot(folder) -> dict:
    found = {}
    for here, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(here, f)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = hashlib.sha256(handle.read()).hexdigest()
    return found


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for name, content in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FXROOF_CHIPS_DIR", str(tmp_path / "no-user-chips"))
    return tmp_path


@pytest.mark.parametrize("command,status,fragments", CLI, ids=[c for c, _, _ in CLI])
def test_cli_bad_input(workdir, capsys, command, status, fragments):
    before = _snapshot(workdir)
    code = main(shlex.split(command))
    out, err = capsys.readouterr()
    assert code == status, err
    assert "Traceback" not in err + out
    message = err.strip().splitlines()[-1]
    assert "error: " in message
    for fragment in fragments:
        assert fragment in message, message
    assert _snapshot(workdir) == before  # nothing created, changed or removed


def test_a_read_only_folder_is_refused_before_work(workdir, capsys, monkeypatch):
    locked = workdir / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere: the permission check still runs
        real = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: False if str(path) == str(locked)
                            else real(path, mode))
    try:
        assert main(["annotate", "--json", str(locked / "x.json")]) == FAILED
        assert "not writable" in capsys.readouterr().err
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("command,fragment", [
    ("chips list --chips-file zero.yaml", "more than 4,194,304 characters: too large for a "
                                          "chips file"),
    ("annotate hf:zero.json", "too large for a transformers config.json"),
    ("roofline zero.json --chip t4", "it is not a regular file"),
    ("annotate zero.py:M", "names 'zero.py', which is not a regular file"),
])
def test_a_file_without_end_is_refused_not_read_until_memory_runs_out(workdir, command,
                                                                      fragment):
    """A link to /dev/zero has no size to check: a chips file's size check passed, and the
    read took every byte of memory (MemoryError's traceback, or the OOM killer). Run in a
    process of its own with its address space capped, so a regression fails, not the run."""
    for name in ("zero.yaml", "zero.json", "zero.py"):
        os.symlink("/dev/zero", workdir / name)

    def capped():
        resource.setrlimit(resource.RLIMIT_AS, (8 * 2 ** 30, 8 * 2 ** 30))

    done = subprocess.run([sys.executable, "-m", "fxroof", *command.split()], cwd=workdir,
                          capture_output=True, text=True, timeout=300, preexec_fn=capped,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == FAILED, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert fragment in done.stderr.strip().splitlines()[-1]


def test_a_user_chip_folder_that_is_a_file_names_the_variable(workdir, capsys, monkeypatch):
    """No --out given: the path came from $FXROOF_CHIPS_DIR, which "choose another --out"
    alone did not name."""
    monkeypatch.setenv("FXROOF_CHIPS_DIR", str(workdir / "exists.json"))
    before = _snapshot(workdir)
    assert main(["chips", "measure"]) == FAILED
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Nothing was measured" in message and "set FXROOF_CHIPS_DIR" in message
    assert _snapshot(workdir) == before


def test_lints_of_a_user_chips_file_print_as_warnings(workdir, capsys):
    (workdir / "slip.yaml").write_text(GOOD_CHIP.replace("bandwidth: 1e12", "bandwidth: 3e9")
                                       + "    tdp_w: 70\n")
    assert main(["chips", "list", "--chips-file", "slip.yaml"]) == 0
    err = capsys.readouterr().err
    assert "fxroof: warning: slip.yaml: mine: bandwidth" in err and "GB vs TB" in err
    # a misspelled field would leave the chip without it (a 70 W board priced as a 300 W one)
    assert "unknown field 'tdp_w' is ignored. Did you mean tdp?" in err
    # predict loads the chips for its target and again to price them all: said once, and
    # again by the next command
    for _ in range(2):
        assert main(["predict", "squeezenet1_0", "--chip", "mine", "--chips-file",
                     "slip.yaml"]) == 0
        assert capsys.readouterr().err.count("unknown field 'tdp_w'") == 1


API = [
    ("negative input size", lambda: fxroof.analyze("resnet18", input_shapes=[(1, -3, 8, 8)]),
     "positive integers"),
    ("zero batch", lambda: fxroof.analyze("resnet18", batch=0), "batch must be a positive"),
    ("negative seq_len", lambda: fxroof.analyze("hf:gpt2", seq_len=-3), "seq_len"),
    ("unknown device", lambda: fxroof.analyze("resnet18", device="tpu"), "'tpu'"),
    ("kwargs not a dict", lambda: fxroof.analyze(torch.nn.Linear(2, 2), torch.ones(1, 2),
                                                 kwargs=[1, 2]), "kwargs must be a dict"),
    ("mode", lambda: fxroof.analyze("resnet18", mode="training"), "'train' or 'eval'"),
    ("dtype", lambda: fxroof.analyze("resnet18", dtype="int8"), "Unsupported dtype"),
    ("seq_len on an image model", lambda: fxroof.analyze("resnet18", seq_len=8), "--seq-len"),
    ("hf_config on torchvision", lambda: fxroof.analyze("resnet18", hf_config={"a": 1}),
     "not an hf: model"),
    ("a chip that is neither a Chip nor an id",
     lambda: fxroof.analyze(torch.nn.Linear(2, 2), torch.ones(1, 2)).roofline(5),
     "A chip is a Chip or a chip id"),
    ("a module class, not a module", lambda: fxroof.analyze(torch.nn.Linear, torch.ones(1, 2)),
     r"the class Linear, not a module built from it: pass an instance, e.g. Linear\(...\)"),
    ("a TorchScript module",
     lambda: fxroof.analyze(torch.jit.script(torch.nn.Linear(2, 2)), torch.ones(1, 2)),
     "TorchScript module .* pass the nn.Module it was scripted from"),
    # its train() raised NotImplementedError past every handler
    ("torch.export's module",
     lambda: fxroof.analyze(torch.export.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),))
                            .module(), torch.ones(1, 2)),
     r"refuses train\(\) and eval\(\) \(NotImplementedError\).* pass the nn.Module the "
     "program was exported from"),
    ("an empty model name", lambda: fxroof.analyze(""), "The model name is empty"),
    ("a batch the inputs contradict",
     lambda: fxroof.analyze(torch.nn.Linear(3, 3), torch.ones(5, 3), batch=2),
     r"batch=2 .* inputs of shape \(5, 3\), batch 5"),
    ("inputs and their shapes both",
     lambda: fxroof.analyze(torch.nn.Linear(4, 4), torch.ones(2, 4), input_shapes=[(3, 4)]),
     "inputs or their shapes .* not both"),
    # "no" is a true value: backward="no" failed inside the model as a TypeError of autograd's
    ("a flag that is not a bool",
     lambda: fxroof.analyze(torch.nn.Linear(2, 2), torch.ones(1, 2), backward="no"),
     "backward is True or False, not 'no'"),
    ("hf_config that is not a dict", lambda: fxroof.analyze("hf:gpt2", hf_config=[1]),
     "hf_config is a dict of config fields"),
    # the meta kernels of mm and addmm take an int64 input to a float Linear; the real ones not
    ("an integer input to a float Linear",
     lambda: fxroof.analyze(torch.nn.Linear(4, 4), torch.ones(2, 4, dtype=torch.long)),
     "addmm: its operands must share one dtype .* float32, int64, float32"),
    ("a user's cost rule that raises",
     lambda: fxroof.analyze(torch.nn.Linear(4, 4), torch.ones(2, 4),
                            rules={torch.ops.aten.addmm: lambda *a, **k: 1 / 0}),
     r"rule given for aten.addmm.default \(rules=\) failed on node addmm.*ZeroDivisionError"),
    ("a user's cost rule that returns no Cost",
     lambda: fxroof.analyze(torch.nn.Linear(4, 4), torch.ones(2, 4),
                            rules={torch.ops.aten.addmm: lambda *a, **k: 5}),
     "returned int, not op_costs.Cost"),
    ("channels-last with no 4-D tensor",
     lambda: fxroof.analyze(torch.nn.Linear(2, 2), torch.ones(1, 2),
                            memory_format="channels_last"),
     r"Linear has none among its parameters, buffers and inputs of shape \(1, 2\)"),
    ("a path passed as the input",
     lambda: fxroof.analyze(torch.nn.Linear(2, 2), "data/x.pt"),
     r"on inputs \(a str: 'data/x.pt'\) failed in layer `\(root\)` \(Linear\)"),
]


@pytest.mark.parametrize("what,call,fragment", API, ids=[a for a, _, _ in API])
def test_api_bad_input(what, call, fragment):
    with pytest.raises(fxroof.FxroofError, match=fragment):
        call()


@pytest.fixture(scope="module")
def small():
    return fxroof.analyze(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
                          torch.ones(2, 4), backward=True)


@pytest.mark.parametrize("call,fragment", [
    (lambda g: g.breakdown("bogus"), "Cannot group by 'bogus'"),
    (lambda g: g.breakdown(sort="flopz"), "Did you mean flops"),
    (lambda g: g.table(sort="bogus"), "Cannot sort by 'bogus'"),
    (lambda g: g.table(top=-5), "top must be"),
    (lambda g: g.records("backwards"), "phase must be"),
    (lambda g: g.breakdown("module", depth=0), "depth must be"),
    (lambda g: g.roofline("h10O"), "Did you mean h100_sxm"),
    (lambda g: g.time(repeats=0, progress=False), "repeats must be a positive integer"),
    (lambda g: g.time(warmup=-1, progress=False), "warmup must be an integer of at least 0"),
    (lambda g: g.graph_module("backwards"), "phase must be"),
    (lambda g: g.graph_module("optimizer"), "no optimizer graph: analyze with optimizer="),
    (lambda g: g.to_trace("never.json"), "this graph was not timed"),
])
def test_graph_methods_refuse_bad_arguments(small, call, fragment):
    with pytest.raises(fxroof.FxroofError, match=fragment):
        call(small)


def test_timing_on_an_unknown_device_refuses_before_drawing_a_progress_bar(small, capsys):
    with pytest.raises(fxroof.FxroofError, match="Unknown device 'tpu'"):
        small.time(device="tpu")  # progress=True: a bar would be drawn on stderr
    assert "timing" not in capsys.readouterr().err


@pytest.mark.parametrize("path,fragment", [(None, "not NoneType None"), (5, "not int 5"),
                                           ("", "is empty")])
def test_graph_writers_refuse_what_is_not_a_path(small, path, fragment):
    with pytest.raises(fxroof.UsageError, match=fragment):
        small.to_csv(path)
    with pytest.raises(fxroof.UsageError, match=fragment):
        fxroof.plot_roofline([small], ["t4"], path)


def test_an_overwrite_that_is_not_a_bool_leaves_the_file_alone(small, tmp_path):
    """overwrite="no" is a true value in Python: it replaced the user's file."""
    mine = tmp_path / "mine.json"
    mine.write_text("mine")
    with pytest.raises(fxroof.UsageError, match="overwrite is True or False, not 'no'"):
        small.to_json(str(mine), overwrite="no")
    assert mine.read_text() == "mine" and os.listdir(tmp_path) == ["mine.json"]


def test_graph_writers_refuse_a_folder_and_an_unknown_figure_format(small, tmp_path):
    with pytest.raises(fxroof.FxroofError, match="is a folder"):
        small.to_json(str(tmp_path))
    with pytest.raises(fxroof.FxroofError, match="'.xyz'"):
        fxroof.plot_roofline([small], ["t4"], str(tmp_path / "r.xyz"))
    assert os.listdir(tmp_path) == []


def test_a_pipe_is_refused_not_replaced_even_with_force(small, tmp_path):
    """An atomic write renames a new file over its path: over a FIFO (or, as root, over
    /dev/null: `--json /dev/null --force`) it replaced the pipe or device with a file."""
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    with pytest.raises(fxroof.FxroofError, match="is a pipe, not a regular file"):
        small.to_json(str(fifo), overwrite=True)
    with pytest.raises(fxroof.FxroofError, match="is a pipe, not a regular file"):
        fxroof.plot_roofline([small], ["t4"], str(fifo), overwrite=True)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.listdir(tmp_path) == ["fifo.png"]


def test_a_tilde_path_in_python_says_who_expands_it(small, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(fxroof.FxroofError, match="'~' is the shell's to expand.*expanduser"):
        small.to_json("~/g.json")
    assert os.listdir(tmp_path) == []


def test_a_symbolic_link_is_written_through_and_kept(small, tmp_path):
    """Renaming over a link made the user's link a plain file and left its target stale."""
    target, link = tmp_path / "results.json", tmp_path / "latest.json"
    target.write_text("old")
    link.symlink_to(target.name)
    small.to_json(str(link), overwrite=True)
    assert link.is_symlink() and os.readlink(link) == "results.json"
    assert json.loads(target.read_text())["nodes"]
    assert sorted(os.listdir(tmp_path)) == ["latest.json", "results.json"]


def test_timing_a_meta_device_module_is_a_clear_error():
    with torch.device("meta"):
        model = torch.nn.Linear(4, 4)
    g = fxroof.analyze(model, torch.empty(2, 4, device="meta"))
    with pytest.raises(fxroof.FxroofError, match="meta device"):
        g.time(repeats=1, warmup=0)


def test_complex_parameters_are_differentiated():
    model = torch.nn.Linear(4, 4, dtype=torch.complex64)
    g = fxroof.analyze(model, torch.ones(2, 4, dtype=torch.complex64), backward=True)
    assert g.totals()["backward"]["flops"] > 0


def test_an_interrupted_write_leaves_no_file(small, tmp_path, monkeypatch):
    """Ctrl-C while a JSON is written: neither a partial file nor a temporary one is left."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", interrupted)
    with pytest.raises(KeyboardInterrupt):
        small.to_json(str(tmp_path / "g.json"))
    assert os.listdir(tmp_path) == []


# 1 s: inside torch's import, where a Ctrl-C raised in its C++ start-up once aborted the
# process (SIGABRT, "terminate called after throwing ... KeyboardInterrupt"); 4 s: inside the
# capture of a step that takes about 12 s on this 2-core machine (resnet50's, 5 s, was over
# on a faster run before the signal came, and its file written)
@pytest.mark.parametrize("after_s", [1.0, 4.0])
def test_sigint_during_annotate_exits_130_and_writes_nothing(tmp_path, after_s):
    """A real Ctrl-C (SIGINT) while the CLI runs: status 130, no traceback, no file."""
    # SIGINT as a terminal delivers it: a shell's background job (a CI runner's, say)
    # inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored
    proc = subprocess.Popen([sys.executable, "-m", "fxroof", "annotate", "densenet201",
                             "--optimizer", "adam", "--json", str(tmp_path / "r.json")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(after_s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "fxroof: interrupted" in err
    assert os.listdir(tmp_path) == []


# ---- the study: failures recorded, damaged files, two runs on one folder ------------------
TINY_GPT2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 100,
             "n_positions": 64}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    from fxroof.study import StudyConfig, run_study

    folder = tmp_path_factory.mktemp("study")
    config_path = folder / "tiny-gpt2.json"
    config_path.write_text(json.dumps(TINY_GPT2))
    config = StudyConfig(models=["tests.fixtures.user_models:small_net",
                                 "tests.fixtures.user_models:RefusesValues",
                                 f"hf:{config_path}"],
                         batches=[1], warmup=0, repeats=1)
    out = str(folder / "out")
    run_study(config, out, progress=False)
    return config, out


def test_a_model_raising_valueerror_is_recorded_and_the_sweep_goes_on(study):
    _, out = study
    failures = json.load(open(os.path.join(out, "data", "failures.json")))
    failed = {(f["model"], f["phase"]) for f in failures}
    assert ("tests.fixtures.user_models:RefusesValues", "cost") in failed
    assert not any(model.startswith(("hf:", "tests.fixtures.user_models:small"))
                   for model, _ in failed), failures


def test_an_hf_model_is_timed_on_token_ids_not_an_image(study):
    from fxroof.study.cache import Cache

    config, out = study
    latency = Cache(out).get("cpu", config.models[2], 1, "latency")
    assert "error" not in latency and latency["median_s"] > 0


def test_a_damaged_cache_file_is_computed_again(study, caplog):
    from fxroof.study import run_study
    from fxroof.study.cache import Cache

    config, out = study
    path = Cache(out).path("cpu", config.models[0], 1, "latency")
    with open(path, "w") as f:
        f.write('{"median_s": 0.0')  # cut off mid-write by another tool
    run_study(config, out, progress=False)
    assert "damaged" in caplog.text
    assert json.load(open(path))["median_s"] > 0


def test_a_damaged_manifest_is_a_clear_error(study, tmp_path):
    import shutil

    from fxroof.study import run_study

    config, out = study
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    with open(os.path.join(copy, "study.json"), "w") as f:
        f.write("{not json")
    for report_only in (False, True):
        with pytest.raises(fxroof.FxroofError, match="damaged"):
            run_study(config, copy, progress=False, report_only=report_only)


def test_a_second_study_on_the_same_folder_is_refused(study):
    from fxroof.study import run_study
    from fxroof.study.cache import locked

    config, out = study
    with locked(out):  # as if another process were running the study
        with pytest.raises(fxroof.FxroofError, match="Another fxroof study is running"):
            run_study(config, out, progress=False)


def test_a_python_file_without_its_callable_lists_what_it_defines(tmp_path):
    from fxroof.models import user
    net = tmp_path / "net.py"
    net.write_text("from torch import nn\n\ndef _private():\n    pass\n\ndef make():\n"
                   "    return Net()\n\nclass Config:\n    pass\n\nclass Net(nn.Module):\n"
                   "    pass\n\nmodel = make()\n")
    message = str(user.callable_missing(str(net)))
    # the nn.Module subclass is the example and comes first; a private helper is not offered
    assert f"e.g. {net}:Net " in message
    assert "It defines Net, make, Config, model." in message
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    assert "does not parse as Python" in str(user.callable_missing(str(broken)))
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert "It defines no class or function" in str(user.callable_missing(str(empty)))
