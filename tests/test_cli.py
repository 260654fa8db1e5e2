"""The CLI end to end, and every bad input: a clear one-paragraph error and the exit status
that says which kind: 1 a failure, 2 a usage error (argparse's convention), 130 Ctrl-C."""
import json
import os
import subprocess
import sys

import pytest
import torch

import fxroof
from fxroof.cli import main
from fxroof.device import host_allocator

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


def test_a_caching_allocator_is_said_in_the_header_and_the_json(capsys, tmp_path):
    js = str(tmp_path / "n.json")
    code, out, err = run(capsys, "annotate", "tests.fixtures.user_models:small_net",
                         "--input-shape", "2,3,16,16", "--allocator", "caching", "--json", js)
    assert code == 0, err
    assert "cpu target (caching host allocator: no page faults)" in out.splitlines()[0]
    data = json.load(open(js))
    assert data["model"]["allocator"] == "caching"
    assert {n["faulted_bytes"] for n in data["nodes"] if "faulted_bytes" in n} == {0}


@pytest.mark.parametrize("chip, shorter", [("rtx_4090", True), ("a100_sxm_80gb", False)])
def test_cudnn_benchmark_is_said_and_prices_fewer_transposes_then_is_put_back(capsys, chip,
                                                                              shorter):
    """An NVIDIA GPU's NCHW 16-bit convolutions pay cuDNN's NHWC transposes; with
    --cudnn-benchmark a GeForce board's only their operands' (roofline.
    searched_result_layout), a datacenter board's both: the header says so and the GeForce
    step is shorter. The flag is the command's only."""
    def forward_ms(out):
        # the prediction table's row (the parts table's below it repeats the chip)
        row = next(line for line in out.splitlines() if line.startswith("NVIDIA"))
        value, unit = row.split()[4:6]
        return float(value) * {"ms": 1.0, "us": 1e-3, "s": 1e3}[unit]

    argv = ("predict", "resnet18", "--batch", "256", "--amp", "fp16", "--chip", chip)
    assert torch.backends.cudnn.benchmark is False
    code, plain, err = run(capsys, *argv)
    assert code == 0, err
    code, searched, err = run(capsys, *argv, "--cudnn-benchmark")
    assert code == 0, err
    assert "(cuDNN engine search on)" in searched.splitlines()[0]
    assert "search" not in plain.splitlines()[0]
    # the notes name the parts of the step's time, the launch-geometry bounds too
    words = " ".join(plain.split())
    assert "launch-bound kernels" in words and "SM clock" in words
    assert "NCHW<->NHWC transposes" in words
    assert (forward_ms(searched) < forward_ms(plain)) == shorter
    if not shorter:
        assert forward_ms(searched) == forward_ms(plain)
    assert torch.backends.cudnn.benchmark is False


def test_macs_switch(capsys):
    code, out, _ = run(capsys, "annotate", "resnet18", "--macs", "--top", "1")
    assert code == 0 and "GMAC" in out and "1.81 GMAC" in out
    # the share column is the MAC share: layers without MACs (BatchNorm, ReLU) have 0.0, not
    # their FLOP share (BatchNorm2d's was 0.3)
    table = out.split("By layer type (forward):")[1].strip().split("\n\n")[0].splitlines()[2:]
    shares = {line.split()[0]: float(line.split()[4]) for line in table}
    assert shares["BatchNorm2d"] == shares["ReLU"] == 0.0
    assert shares["Conv2d"] == 100.0  # 1.81 GMAC of 1.81 GMAC + 0.5 MMAC in the Linear


def test_a_model_named_by_its_file(capsys, tmp_path, monkeypatch):
    """path/to/file.py:callable imports the file (its folder first on sys.path, so its own
    imports of neighbouring files work), from any working directory."""
    (tmp_path / "blocks.py").write_text(
        "import torch\nclass Head(torch.nn.Linear):\n    pass\n")
    (tmp_path / "net.py").write_text(
        "from blocks import Head\ndef make():\n    return Head(8, 4)\n")
    monkeypatch.chdir(tmp_path.parent)
    code, out, _ = run(capsys, "annotate", f"{tmp_path.name}/net.py:make",
                       "--input-shape", "2,8")
    # Linear(8, 4) on 2 rows: 2 * 2 * 8 * 4 FLOP of products and sums, 2 * 4 of bias adds
    assert code == 0 and "forward: 136 FLOP" in out


def test_a_refusal_from_the_system_is_one_paragraph(capsys, monkeypatch):
    """A full disk or a permission the system denies mid-run is the machine's answer, not a
    bug: one paragraph naming the path and what to do, no traceback."""
    from fxroof import commands

    def full_disk(args):
        raise OSError(28, "No space left on device", "out.json")

    monkeypatch.setattr(commands, "run", full_disk)
    code, _, err = run(capsys, "annotate", "resnet18")
    assert code == 1 and "Traceback" not in err
    assert err.strip() == err.strip().splitlines()[0]
    assert "'out.json'" in err and "No space left on device" in err and "atomically" in err


def test_a_folder_that_takes_no_new_file_names_the_users_path(capsys, tmp_path, monkeypatch):
    """/proc passes os.access yet refuses the temporary file an atomic write starts with: the
    error names the file the user asked for, not fxroof's temporary one, and leaves the
    existing file as it was."""
    import tempfile

    def refused(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory")

    target = tmp_path / "version.csv"
    target.write_text("theirs")
    monkeypatch.setattr(tempfile, "mkstemp", refused)
    code, _, err = run(capsys, "annotate", "tests.fixtures.user_models:small_net",
                       "--input-shape", "1,3,8,8", "--csv", str(target), "--force")
    message = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err
    assert f"Cannot write '{target}'" in message and ".partial" not in message
    assert target.read_text() == "theirs"


def test_integer_and_mask_inputs_take_a_dtype(capsys, tmp_path):
    """--input-shape 4,16:int64 gives token ids, 4,16:bool a mask; the costs are the closed
    form of embed -> mask multiply -> sum over 16 tokens -> Linear(8, 3) at batch 4."""
    out_json = tmp_path / "bag.json"
    code, _, err = run(capsys, "annotate", "tests.fixtures.user_models:TokenBag",
                       "--input-shape", "4,16:int64", "--input-shape", "4,16:bool",
                       "--json", str(out_json))
    assert code == 0, err
    data = json.loads(out_json.read_text())
    assert data["model"]["inputs"] == [{"shape": [4, 16], "dtype": "int64"},
                                       {"shape": [4, 16], "dtype": "bool"}]
    multiply, token_sum, head = 4 * 16 * 8, 4 * 15 * 8, 2 * 4 * 8 * 3 + 4 * 3
    assert data["totals"]["forward"]["flops"] == multiply + token_sum + head
    assert data["memory"]["input_bytes"] == 4 * 16 * 8 + 4 * 16 * 1


def test_refuses_to_overwrite_before_doing_work(capsys, tmp_path):
    path = tmp_path / "keep.json"
    path.write_text("mine")
    code, _, err = run(capsys, "annotate", "--json", str(path))
    assert code == 1 and "already exists" in err and "--force" in err
    assert path.read_text() == "mine"


FAILED, USAGE = 1, 2
BAD = [
    (["annotate", "resnet5O"], FAILED, ["Unknown model 'resnet5O'", "resnet50", "hf:"]),
    (["annotate", ""], USAGE, ["The model name is empty", "`fxroof models`"]),
    (["predict", " ", "--chip", "t4"], USAGE, ["The model name is empty"]),
    (["annotate", "no_such_pkg.models:net"], FAILED, ["Cannot import 'no_such_pkg.models'"]),
    (["annotate", "tests.fixtures.user_models:missing"], FAILED, ["has no attribute 'missing'"]),
    (["annotate", "tests/fixtures/no_such_file.py:Net"], FAILED,
     ["names the file 'tests/fixtures/no_such_file.py', which does not exist"]),
    (["annotate", "tests/fixtures/user_models.py:missing"], FAILED,
     ["has no attribute 'missing'"]),
    (["annotate", "tests.fixtures.user_models:broken"], FAILED, ["out of coffee"]),
    (["annotate", "tests.fixtures.user_models:not_a_module"], FAILED,
     ["not a torch.nn.Module"]),
    (["annotate", "resnet18", "--input-shape", "1,3,224"], FAILED,
     ["layer `conv1` (Conv2d)", "input shape"]),
    (["annotate", "tests.fixtures.user_models:small_net", "--input-shape", "2,5,16,16"], FAILED,
     ["layer `0` (Conv2d)", "(2, 5, 16, 16)"]),
    # the library's message ends in a full stop: one sentence end, not two
    (["annotate", "tests.fixtures.user_models:bn_head", "--input-shape", "2,5,4,4"], FAILED,
     ["layer `2` (Linear)", "[2, 5] X [3, 4]. If the input shape"]),
    (["annotate", "tests.fixtures.user_models:DataDependent", "--input-shape", "2,4"], FAILED,
     ["cannot be traced", "user_models.py:", "y.sum() > 0", "--mode eval",
      "fxroof.backend()"]),
    (["annotate", "resnet18", "--dtype", "int8"], USAGE,
     ["argument --dtype", "'int8' is not a dtype"]),
    (["annotate", "resnet18", "--input-shape", "1,x,2"], USAGE, ["Cannot read the input shape"]),
    (["annotate", "resnet18", "--input-shape", "1,16:int7"], USAGE,
     ["'int7' is not an input dtype", "int64"]),
    (["annotate", "tests.fixtures.user_models:TokenBag", "--input-shape", "4,16"], FAILED,
     ["missing 1 required positional argument: 'mask'", "repeat --input-shape"]),
    (["annotate", "tests.fixtures.user_models:TokenBag", "--input-shape", "4,16",
      "--input-shape", "4,16"], FAILED,
     ["failed in layer `embed` (Embedding)", "integer inputs take a dtype (8,128:int64)"]),
    (["annotate", "resnet18", "--batch", "0"], USAGE, ["argument --batch", "not a positive"]),
    (["annotate", "resnet18", "--seq-len", "64"], USAGE, ["--seq-len", "hf: text model"]),
    (["annotate", "resnet18", "--hf-config", "n_layer=2"], USAGE, ["not an hf: model"]),
    (["annotate", "--top", "-5"], USAGE, ["argument --top", "below 0"]),
    (["annotate", "--depth", "0"], USAGE, ["argument --depth"]),
    (["predict", "resnet18", "--allocator", "jemalloc"], USAGE,
     ["argument --allocator", "'jemalloc'", "'glibc', 'caching'"]),
    (["profile", "--device", "tpu"], USAGE, ["argument --device", "'tpu' is not a device"]),
    (["chips"], USAGE, ["choose an action", "list, show, plot or measure"]),
    (["chips", "list", "--class", "dsp"], USAGE, ["argument --class", "invalid choice"]),
    ([], USAGE, ["required", "<command>"]),
    (["study", "--models", "resnet5O", "--out", "never-created"], FAILED,
     ["Unknown model 'resnet5O'", "resnet50"]),
    (["study", "--batch", "0", "--out", "never-created"], USAGE,
     ["argument --batch", "not a positive"]),
]

if host_allocator() == "glibc":  # under tcmalloc this would start a real study
    BAD.append((["study", "--allocator", "caching", "--in-process", "--models",
                 "tests.fixtures.user_models:small_net", "--out", "never-created"], USAGE,
                ["--allocator caching with --in-process", "LD_PRELOAD=libtcmalloc"]))
if not torch.cuda.is_available():  # on a GPU machine this would start a real study
    BAD.append((["study", "--device", "cuda", "--out", "never-created"], FAILED, ["CUDA"]))


@pytest.mark.parametrize("argv,status,fragments", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_input_is_one_clear_paragraph(capsys, argv, status, fragments):
    code, out, err = run(capsys, *argv)
    assert code == status
    assert "Traceback" not in err
    message = err.strip().splitlines()[-1]  # argparse prints its usage lines first
    assert message.startswith("fxroof") and "error: " in message
    if not message.startswith("fxroof: "):
        assert err.startswith("usage: fxroof")
    for fragment in fragments:
        assert fragment in message
    assert ".." not in message.replace("...", "")
    assert not os.path.exists("never-created")


def test_exit_statuses_of_a_failure_and_an_interrupt(capsys, monkeypatch):
    from fxroof import commands

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(commands.COMMANDS, "models", interrupted)
    code, _, err = run(capsys, "models")
    assert code == 130 and err == "fxroof: interrupted\n"


def test_version_and_help_answer_without_torch():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "fxroof", "--version"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == f"fxroof {fxroof.__version__}"
    assert " torch\n" not in proc.stderr  # -X importtime lists every module imported


def test_a_closed_pipe_is_not_a_traceback():
    """`fxroof models --source torchvision | head -1`: the reader goes away; no
    BrokenPipeError traceback."""
    proc = subprocess.run(f"{sys.executable} -m fxroof models --source torchvision | head -1",
                          shell=True, cwd=ROOT, capture_output=True, text=True)
    assert proc.stdout.strip() == "alexnet"
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_library_raises_fxroof_error_for_non_module():
    with pytest.raises(fxroof.FxroofError, match="not a torch.nn.Module"):
        fxroof.analyze(lambda x: x, torch.randn(2))


def test_console_script_runs_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "fxroof", "annotate", "vgg1"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "vgg11" in proc.stderr and "Traceback" not in proc.stderr


def test_help_reads_like_a_tool():
    proc = subprocess.run([sys.executable, "-m", "fxroof", "annotate", "--help"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0
    assert "--backward" in proc.stdout and "default: resnet18" in proc.stdout


def test_chips_list_fits_100_columns_and_wide_and_show_give_the_rest(capsys):
    code, out, _ = run(capsys, "chips", "list")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 100
    assert "NVIDIA T4" not in out and "t4 " in out  # names are in --wide and show
    code, wide, _ = run(capsys, "chips", "list", "--wide")
    assert code == 0 and "NVIDIA T4" in wide and "fp64_matrix" in wide
    code, shown, _ = run(capsys, "chips", "show", "t4")
    assert code == 0
    # T4: 8.14 TFLOP/s fp32 over 320 GB/s: ridge 8.14e12 / 320e9 = 25.4 FLOP/byte
    assert "fp32: 8.14 TFLOP/s (vector engine; ridge at 25.4 FLOP/byte)" in shown
    assert "sources:" in shown and "https://" in shown
    code, _, err = run(capsys, "chips", "show", "h100")
    # the name it begins comes first, ahead of mi100, which difflib finds closer
    assert code == 1 and "Did you mean h100_sxm, " in err and "mi100" in err


def test_chips_show_says_where_its_time_model_comes_from(capsys):
    """The fitted chip names its own sweep, a 72 W board the 75 W family, a TPU none (the
    roof alone prices it): what a user needs to know before trusting a predicted time."""
    shown = {chip: run(capsys, "chips", "show", chip)[1] for chip in ("t4", "l4", "tpu_v4")}
    import yaml
    from fxroof.calibration import CALIBRATION_FILE
    with open(CALIBRATION_FILE) as f:
        t4_gemm = yaml.safe_load(f)["chips"]["t4"]["classes"]["gemm"]
    assert f"time model: calibrated; GEMMs at {t4_gemm['compute']:.2f} of the peak" in shown["t4"]
    assert "parameters of: T4, 18887 kernels" in shown["t4"]
    assert "75 W or less (T4, P4)" in shown["l4"] and "(NeuSight kernel sweeps)" in shown["l4"]
    assert "time model" not in shown["tpu_v4"]


def test_chips_show_says_which_sms_and_clock_the_time_model_reads(capsys):
    """An A100: 108 SMs (the calibration's) and 1.41 GHz, which its datasheet line states
    ("6912 CUDA cores x 1.41 GHz"), derived from the FP32 peak; the P4 its stated 1.114
    GHz; a GeForce RTX 4090 its entry's 128 SMs (16384 CUDA cores / 128 an Ada SM) at
    82.6 TFLOP/s / (128 x 128 x 2) = 2.52 GHz; a CPU, whose SMs fxroof does not know, no
    such line."""
    shown = {chip: run(capsys, "chips", "show", chip)[1]
             for chip in ("a100_sxm_80gb", "p4", "rtx_4090", "epyc_9654")}
    assert "multiprocessors: 108 SMs (the shipped calibration's), SM clock 1.41 GHz (its " \
           "FP32 peak" in shown["a100_sxm_80gb"]
    assert "SM clock 1.11 GHz (the chip entry's)" in shown["p4"]
    assert "multiprocessors: 128 SMs" in shown["rtx_4090"] and "2.52 GHz" in shown["rtx_4090"]
    assert "multiprocessors:" not in shown["epyc_9654"]


def test_chips_without_an_action_prints_its_actions(capsys):
    code, out, err = run(capsys, "chips")
    assert code == 2 and out == ""
    assert "usage: fxroof chips" in err and all(a in err for a in ("list", "show", "plot",
                                                                   "measure"))


def test_models_lists_every_source(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0
    assert "NAME: 80 models" in out and "resnet50" in out
    assert "hf:<model_type>:" in out and "gpt2" in out
    assert "timm:<name>:" in out and "convnext_tiny" in out
    assert "package.module:callable" in out and "path/to/file.py:callable" in out
    assert "8,128:int64" in out  # how a model of token ids is given its inputs
    code, out, _ = run(capsys, "models", "--source", "timm")
    assert code == 0 and "timm:convnext_tiny" in out.splitlines()


@pytest.mark.parametrize("typo,suggested", [("gpt", "hf:gpt2"),
                                            ("convnext_tny", "convnext_tiny"),
                                            ("vit_base_patch16_22", "timm:vit_base_patch16_224")])
def test_an_unknown_name_suggests_close_names_from_every_source(capsys, typo, suggested):
    code, _, err = run(capsys, "annotate", typo)
    assert code == 1 and "Did you mean" in err
    assert suggested in err.split("Did you mean")[1].split("?")[0]


def test_an_unknown_name_far_from_every_model_gets_no_guess(capsys):
    code, _, err = run(capsys, "annotate", "nosuchmodel")
    assert code == 1 and "Unknown model 'nosuchmodel'" in err
    assert "Did you mean" not in err


def test_the_allocator_choices_are_the_targets():
    """The command line spells the allocators out (it parses before importing torch); they
    must stay fxroof.target's."""
    from fxroof.cli import ALLOCATOR_CHOICES
    from fxroof.target import ALLOCATORS

    assert ALLOCATOR_CHOICES == ALLOCATORS


def test_a_chip_or_model_named_twice_counts_once(capsys, tmp_path):
    """`predict --chip t4 --chip t4` printed the T4's row twice, and a roofline drew its roof
    twice; two inputs of one shape stay two inputs."""
    assert main(["predict", "resnet18", "--chip", "t4", "--chip", "t4"]) == 0
    # once in the prediction table, once in the table of its step's parts
    assert capsys.readouterr().out.count("NVIDIA T4 ") == 2
    module = tmp_path / "two.py"
    module.write_text("import torch\nclass Two(torch.nn.Module):\n"
                      "    def forward(self, a, b):\n        return a + b\n")
    assert main(["annotate", f"{module}:Two", "--input-shape", "2,3", "--input-shape",
                 "2,3"]) == 0
    assert "inputs (2, 3), (2, 3)," in capsys.readouterr().out


def test_a_model_spec_is_built_without_its_weights_where_its_constructor_allows(capsys,
                                                                                tmp_path):
    """A user's model named on the command line is analysed as a named one is: a 160 GB
    Linear costs nothing to build (it had been allocated for real), and a constructor that
    computes with real tensors is still built, for real."""
    models = tmp_path / "huge.py"
    models.write_text(
        "import torch\n"
        "class Huge(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(200_000, 200_000, bias=False)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
        "class Reads(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, int(torch.ones(1).sum().item()) + 1)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n")
    assert main(["annotate", f"{models}:Huge", "--input-shape", "1,200000"]) == 0
    assert "parameters 160 GB" in capsys.readouterr().out  # 4 x 200,000^2 bytes
    assert main(["annotate", f"{models}:Reads", "--input-shape", "3,4"]) == 0
    assert "output shape" in capsys.readouterr().out


def test_a_model_too_large_to_build_for_real_points_to_the_analysis(tmp_path, monkeypatch):
    from fxroof.models import user

    spec = tmp_path / "big.py"
    spec.write_text("def make():\n    raise RuntimeError(\"DefaultCPUAllocator: can't allocate "
                    "memory: you tried to allocate 160000000000 bytes.\")\n")
    with pytest.raises(fxroof.FxroofError, match="weights need more memory than is free"):
        user.build(f"{spec}:make", device="cpu")


def test_an_unknown_option_names_the_command_and_the_option_meant(capsys):
    """argparse alone answers `fxroof: error: unrecognized arguments` under the top-level
    usage; the command's own usage and a fix are what a newcomer needs."""
    code, out, err = run(capsys, "predict", "resnet18", "--batch-size", "8")
    assert code == 2 and out == ""
    assert "usage: fxroof predict" in err
    assert "fxroof predict: usage error: it does not take --batch-size 8" in err
    assert "--batch-size is --batch here." in err and "`fxroof predict --help`" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command, given, meant", [
    (["annotate", "resnet18"], ["--img-size", "160"], "--img-size is --input-shape here."),
    (["predict", "resnet18"], ["--gpu", "t4"], "--gpu is --chip or --device here."),
    (["annotate", "resnet18"], ["--fp16"], "--fp16 is --amp fp16 or --dtype float16 here."),
    (["roofline", "resnet18", "--chip", "t4"], ["--output", "r.png"], "--output is --out here."),
])
def test_an_option_other_tools_spell_otherwise_is_named_as_fxroof_spells_it(
        capsys, command, given, meant):
    """timm's --img-size, Hugging Face's --fp16, a --gpu for the hardware: difflib's closest
    spelling was --optimizer for --img-size and --amp for --gpu. A synonym is offered only
    where the command takes it (`chips list` takes no --chip)."""
    code, out, err = run(capsys, *command, *given)
    assert code == 2 and out == ""
    assert f"it does not take {' '.join(given)}. {meant}" in err
    assert "Did you mean" not in err
    code, _, err = run(capsys, "chips", "list", "--gpu")
    assert code == 2 and " here." not in err


def test_the_model_given_as_an_option_is_told_it_is_positional(capsys):
    code, out, err = run(capsys, "annotate", "--model", "resnet18")
    assert code == 2 and out == ""
    assert "it does not take --model" in err
    assert "The model is the first argument, not an option: `fxroof annotate resnet50`" in err


def test_an_unknown_option_of_an_action_names_the_action(capsys):
    code, _, err = run(capsys, "chips", "list", "--foo")
    assert code == 2
    assert "usage: fxroof chips list" in err
    assert "fxroof chips list: usage error: it does not take --foo." in err
    assert "Did you mean" not in err  # nothing close to --foo


def test_an_option_is_never_read_as_the_abbreviation_of_another(capsys, tmp_path):
    """argparse's prefix matching read `chips plot --chip t4` as `--chips-file t4` (then
    "cannot read the chip file 't4'"), and `--batc 8` as `--batch 8`: a typo must be named,
    not guessed at. An option another command takes names those commands rather than the
    closest spelling here (--chips-file)."""
    out_png = tmp_path / "chips.png"
    code, out, err = run(capsys, "chips", "plot", "--chip", "t4", "--out", str(out_png))
    assert code == 2 and out == "" and not out_png.exists()
    assert "it does not take --chip t4" in err
    assert ("--chip is an option of `fxroof annotate`, `fxroof profile`, `fxroof predict`, "
            "`fxroof roofline`.") in err
    assert "chip file" not in err and "Did you mean" not in err
    code, _, err = run(capsys, "annotate", "resnet18", "--batc", "8")
    assert code == 2
    assert "it does not take --batc 8. Did you mean --batch?" in err


def test_a_command_of_several_models_is_told_they_are_positional_too(capsys):
    code, _, err = run(capsys, "roofline", "--chip", "h100_sxm", "--model", "resnet18")
    assert code == 2
    assert "The model is the first argument, not an option" in err
    assert "Did you mean --help" not in err
