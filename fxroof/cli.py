"""The fxroof command line: the parser and the exit statuses. The commands themselves live in
commands.py, imported only once the arguments parse, so ``--help`` and ``--version`` answer at
once and a Ctrl-C during torch's import ends as cleanly as one during a run.

Exit statuses: 0 done, 1 failed (a clear message on stderr), 2 usage error (argparse's
convention), 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import signal
import sys
from typing import Optional

from fxroof import interrupts
from fxroof.chips import CLASSES, DTYPES as PEAK_DTYPES, forget_warnings
from fxroof.defaults import DEFAULT_MODEL, DEFAULT_SEQ_LEN
from fxroof.errors import FxroofError, UsageError
from fxroof.rollups import GROUPINGS
from fxroof.units import FLOAT_DTYPES
from fxroof.validate import (device_arg, dtype_arg, nonnegative_int_arg, positive_int_arg)
from fxroof.version import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEVICES = "cpu, cuda or cuda:N"
# fxroof.target.ALLOCATORS, spelled here: the command line parses before importing torch
ALLOCATOR_CHOICES = ("glibc", "caching")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: X)" on every option that has a default worth printing (not
    None, not a switch's False)."""

    def _get_help_string(self, action):
        if action.default in (None, False) or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def _parser(sub, name: str, help: str, description: Optional[str] = None):
    # no abbreviations: `chips plot --chip t4` must not be read as --chips-file t4
    p = sub.add_parser(name, help=help, description=description or help,
                       formatter_class=_HelpFormatter, allow_abbrev=False)
    # what an unknown option's error needs, read once the command's options are all added
    p.set_defaults(usage_text=p.format_usage, prog=p.prog,
                   option_names=lambda: [s for a in p._actions for s in a.option_strings])
    return p


def _model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help="a torchvision model name (`fxroof models`), hf:<model_type> (e.g. "
                        "hf:gpt2), timm:<name>, or package.module:callable (or "
                        "path/to/file.py:callable) returning an nn.Module")
    p.add_argument("--batch", type=positive_int_arg,
                   help="batch size of the default input (default: 1; with --input-shape, "
                        "the shapes' first dimension)")
    p.add_argument("--input-shape", action="append", metavar="N,C,H,W",
                   help="shape of one input, batch first; repeat for several inputs, in "
                        "forward's order; a dtype after a colon for integer or mask inputs "
                        "(8,128:int64; default float) (default: the model's native "
                        "(batch, 3, S, S))")
    p.add_argument("--dtype", type=dtype_arg, metavar="{" + ",".join(FLOAT_DTYPES) + "}",
                   help="run the whole model in this dtype (default: the model's own)")
    p.add_argument("--mode", choices=["train", "eval"],
                   help="module mode (default: train with --backward, else eval)")
    p.add_argument("--backward", action="store_true",
                   help="also trace autograd's backward (training step, no optimizer)")
    _reparam_argument(p)
    p.add_argument("--seq-len", type=positive_int_arg,
                   help=f"tokens per sequence of hf: text models (default: {DEFAULT_SEQ_LEN}), "
                   "samples of waveform ones (default: 16000, one second at 16 kHz)")
    p.add_argument("--past", type=positive_int_arg, metavar="TOKENS",
                   help="a decode step of an hf: causal LM: its KV cache holds this many "
                        "tokens per layer (a sliding-window layer, its last window - 1), and "
                        "--seq-len counts the new tokens (default 1)")
    p.add_argument("--hf-config", action="append", metavar="KEY=VALUE",
                   help="override a field of an hf: model's config (repeatable)")
    _step_arguments(p)


def _reparam_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reparam", action="store_true",
                   help="inference only: the model as deployed, each submodule that can "
                        "fuse itself fused first (fuse(), reparameterize(), "
                        "switch_to_deploy(): RepVGG's and MobileOne's branches, LeViT's "
                        "convolution + batch norm), as timm's reparameterize_model and its "
                        "benchmarks do")


def _step_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--amp", choices=["fp16", "bf16"],
                   help="run forward and loss under autocast in this precision (the target's "
                        "own cast policy); parameters stay fp32")
    p.add_argument("--loss", nargs="?", const="auto", metavar="LOSS",
                   help="differentiate a loss: auto (the default when given alone), "
                        "cross_entropy (classifiers, random integer targets), lm (hf: causal "
                        "models), or package.module:function of the output; implies --backward")
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw"],
                   help="add the optimizer's update as a third phase, 'optimizer'; implies "
                        "--backward")
    kind = p.add_mutually_exclusive_group()
    for flag in ("for-loop", "foreach", "fused"):
        kind.add_argument(f"--{flag}", dest="optimizer_impl", action="store_const", const=flag,
                          help=f"the optimizer's {flag} kernels (default: torch.optim's "
                               "default on the target)")
    p.add_argument("--memory-format", choices=["contiguous", "channels_last"],
                   help="layout of 4-D inputs and parameters (default: contiguous)")
    p.add_argument("--allocator", choices=ALLOCATOR_CHOICES, default="glibc",
                   help="the CPU process's host allocator, whose page faults are priced: "
                        "glibc (default: a plain python process; freed pages go back to the "
                        "kernel and fault in again) or caching (tcmalloc through LD_PRELOAD, "
                        "or glibc with MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ set "
                        "high: nothing faults once warm)")
    _cudnn_argument(p)


def _cudnn_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="cuDNN searches its engines per convolution shape, as "
                        "torch.backends.cudnn.benchmark = True does (timm's, NVIDIA's and "
                        "torchvision's scripts set it): on a GeForce board an NCHW "
                        "tensor-core convolution then transposes its operands only, not its "
                        "result; profile and study time a GPU with it on")


def _target_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", type=device_arg, metavar="DEVICE",
                   help="the target the step is recorded for: cpu, or cuda (recorded without "
                        "a GPU: CUDA's attention, dropout, RNN and optimizer kernels and its "
                        "autocast policy; default: cpu, or cuda for a single GPU --chip)")


def _compiled_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compiled", action="store_true",
                   help="the compiled view: the kernels torch.compile's Inductor would run "
                        "(fused kernels and extern GEMM/convolution calls), each with the ATen "
                        "nodes it holds, its FLOPs and the bytes of its buffers; for the CPU "
                        "or, without a GPU, the CUDA target")
    p.add_argument("--freeze", action="store_true",
                   help="with --compiled, inference only: compile with Inductor's freezing "
                        "(torch._inductor.config.freezing = True), its CPU inference recipe: "
                        "weights constant, batch norms folded, oneDNN weights prepacked once "
                        "instead of converted on every call")


def _top_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=nonnegative_int_arg, default=20,
                   help="rows in the node table (0 for all)")


def _repeat_arguments(p: argparse.ArgumentParser, repeats: int, warmup: int) -> None:
    p.add_argument("--repeats", type=positive_int_arg, default=repeats, help="timed runs")
    p.add_argument("--warmup", type=nonnegative_int_arg, default=warmup,
                   help="untimed warm-up runs")


def _chip_arguments(p: argparse.ArgumentParser, what: str, repeatable: bool = False) -> None:
    p.add_argument("--chip", action="append" if repeatable else "store", help=what)
    _chips_file_argument(p)


def _chips_file_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chips-file", action="append", metavar="YAML",
                   help="extra chip definitions, added to chips.yaml (repeatable)")


def _output_arguments(p: argparse.ArgumentParser, *extra: tuple[str, str]) -> None:
    for option, what in (("--json", "the annotated graph as JSON"),
                         ("--csv", "the node records as CSV"), *extra):
        p.add_argument(option, metavar="PATH", help=f"write {what}")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")


def _annotate_arguments(p: argparse.ArgumentParser) -> None:
    _model_arguments(p)
    _target_argument(p)
    p.add_argument("--chip", help="the GPU whose compute capability the CUDA target's "
                                  "dispatch rules read (implies --device cuda)")
    _top_argument(p)
    p.add_argument("--sort", choices=["flops", "bytes", "intensity"], default="flops",
                   help="node table order")
    p.add_argument("--by", choices=GROUPINGS, default="layer_type", help="breakdown grouping")
    p.add_argument("--depth", type=positive_int_arg,
                   help="module path depth for --by module (default: the full path)")
    p.add_argument("--macs", action="store_true",
                   help="report multiply-accumulates of matrix ops instead of FLOPs "
                        "(torchvision's _ops convention)")
    _compiled_argument(p)
    _output_arguments(p, ("--graphml", "the annotated graph as GraphML"))


def _profile_arguments(p: argparse.ArgumentParser) -> None:
    _model_arguments(p)
    p.add_argument("--device", type=device_arg, default="cpu", metavar="DEVICE",
                   help=DEVICES)
    _repeat_arguments(p, repeats=10, warmup=2)
    _top_argument(p)
    _chip_arguments(p, "compare each node with its roof on this chip (`fxroof chips list`)")
    _output_arguments(p, ("--trace", "a Chrome/Perfetto trace (JSON)"))


def _predict_arguments(p: argparse.ArgumentParser) -> None:
    _model_arguments(p)
    _target_argument(p)
    _chip_arguments(p, "only these chips (repeatable)", repeatable=True)
    _compiled_argument(p)
    p.add_argument("--roof", choices=["calibrated", "ideal"], default="calibrated",
                   help="time model: the calibrated one (fitted per chip and op class, with a "
                        "band) or the ideal roofline")


def _chips_arguments(p: argparse.ArgumentParser) -> None:
    # no action: `fxroof chips` prints this command's help (its actions), not argparse's
    # one-line "required" error
    actions = p.add_subparsers(dest="action", metavar="<action>")
    q = _parser(actions, "list", "table (or --json) of the chips")
    q.add_argument("--class", dest="cls", choices=CLASSES, help="only chips of this class")
    q.add_argument("--json", action="store_true", help="machine-readable records")
    q.add_argument("--wide", action="store_true",
                   help="every peak as the chip lists it, and the chip names (wider than 100 "
                        "columns)")
    _chips_file_argument(q)
    q = _parser(actions, "show", "everything about one chip: peaks, engines, memory, sources")
    q.add_argument("id", help="chip id (`fxroof chips list`)")
    _chips_file_argument(q)
    q = _parser(actions, "plot", "all chips on one log-log roofline, plus one per class")
    q.add_argument("--out", default="chips.png",
                   help="figure path, .png or .svg (per-class figures beside it)")
    q.add_argument("--dtype", default="fp32", choices=PEAK_DTYPES, help="which peak to draw")
    q.add_argument("--force", action="store_true", help="overwrite existing figures")
    _chips_file_argument(q)
    q = _parser(actions, "measure", "measure this machine's roofs, save as a chip",
                "Measure GEMM FLOP/s per dtype and copy bandwidth of the local device and save "
                "them as a user chip.")
    q.add_argument("--device", type=device_arg, default="cpu", metavar="DEVICE", help=DEVICES)
    q.add_argument("--full", action="store_true",
                   help="larger problems, more repeats, and on a CPU the kernels "
                        "torch.compile generates (compiles about 40 probes; minutes) for "
                        "`--compiled` predictions (default: quick, under 30 s on CPU)")
    q.add_argument("--out", metavar="YAML", help="where to save (default: the user chip "
                                                  "folder, ~/.config/fxroof/chips)")
    q.add_argument("--force", action="store_true", help="overwrite an existing chip file")
    p.set_defaults(help_text=p.format_help, action_names=list(actions.choices))


def _roofline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("models", nargs="+", help="model names, package.module:callable, or .json")
    p.add_argument("--batch", type=positive_int_arg, nargs="+", default=[1], help="batch sizes")
    p.add_argument("--backward", action="store_true", help="training step (forward+backward)")
    p.add_argument("--dtype", type=dtype_arg, metavar="{" + ",".join(FLOAT_DTYPES) + "}",
                   help="model dtype (default: the model's own)")
    p.add_argument("--chip", action="append", required=True, help="chip id (repeatable)")
    _target_argument(p)
    p.add_argument("--amp", choices=["fp16", "bf16"],
                   help="analyse named models under the target's autocast in this precision")
    _reparam_argument(p)
    _cudnn_argument(p)
    _compiled_argument(p)
    p.add_argument("--by", choices=["model", "layer_type", "node"], default="model",
                   help="points per model, per layer type or per node of one model")
    p.add_argument("--out", default="roofline.png", help="figure path (.png, .svg, ...)")
    p.add_argument("--force", action="store_true", help="overwrite an existing figure")
    _chips_file_argument(p)


def _study_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="study", help="study folder")
    p.add_argument("--models", nargs="+",
                   help="model names or specs (default: 17 torchvision models, one per family)")
    p.add_argument("--batch", type=positive_int_arg, nargs="+",
                   help="batch sizes (default: 1 8 32 64 on CPU, 1 64 256 on CUDA)")
    p.add_argument("--train-batch", type=positive_int_arg, nargs="+",
                   help="batch sizes of the timed training step (default: the smallest batch)")
    p.add_argument("--device", type=device_arg, nargs="+", default=["cpu"], metavar="DEVICE",
                   help=DEVICES)
    _repeat_arguments(p, repeats=5, warmup=1)
    p.add_argument("--rounds", type=positive_int_arg, default=1,
                   help="measure each latency and training step this many times, in rounds "
                        "over all the models after the first pass, and keep the median: on "
                        "a busy or shared machine one slow spell then decides no model's "
                        "time (default 1; 3 on a noisy machine). Raising it resumes a study")
    p.add_argument("--compiled", action="store_true",
                   help="also eager vs compiled on the CPU: each model's compiled view "
                        "(Inductor's kernels) and torch.compile's measured latency (compiles "
                        "every model: about 20 s each on 2 cores)")
    p.add_argument("--freeze", action="store_true",
                   help="with --compiled: compile with Inductor's freezing, its CPU inference "
                        "recipe (weights constant, batch norms folded, oneDNN weights prepacked "
                        "once), the compiled view and the measured torch.compile alike")
    p.add_argument("--in-process", action="store_true",
                   help="measure each eager latency, training step and compiled latency in "
                        "the study's own process, not a fresh one per model and batch (faster "
                        "by a few seconds each; on a CPU the time then depends on the models "
                        "run before it)")
    p.add_argument("--allocator", choices=ALLOCATOR_CHOICES, default="glibc",
                   help="the host allocator of the processes measured, whose page faults the "
                        "costs price: glibc (default: a plain python process) or caching "
                        "(each fresh process runs tcmalloc, preloaded; it must be installed: "
                        "libtcmalloc-minimal4 on Debian)")
    _cudnn_argument(p)
    p.add_argument("--report-only", action="store_true",
                   help="redraw the report from the cached results; run nothing")
    p.add_argument("--force", action="store_true",
                   help="recompute every result, replacing a different study in --out")


def _models_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", choices=["torchvision", "hf", "timm"],
                   help="list every name of one source, one per line")


# name, one-line help, description, the function adding its arguments
COMMANDS = [
    ("annotate", "cost-annotate a model's ATen graph (FLOPs, bytes)",
     "Trace a model to ATen forward (and backward) graphs on fake tensors and annotate every "
     "node with FLOPs and bytes.", _annotate_arguments),
    ("profile", "time every ATen node on a device (CPU or CUDA)",
     "Annotate a model, then run its forward (and backward) graph node by node on real "
     "tensors and time every node.", _profile_arguments),
    ("predict", "predicted step time of a model on every chip",
     "Roofline-predicted time (forward, backward, total), bound and memory fit of one step "
     "on each chip, fastest first; for an hf: language model, also tokens per second.",
     _predict_arguments),
    ("chips", "the chip database: list, show, plot, measure",
     "List the chips fxroof knows, show one, draw their rooflines, or measure this machine's.",
     _chips_arguments),
    ("roofline", "models, layer types or nodes as points on rooflines",
     "Place models (x batch sizes) or one model's layer types on the rooflines of the chosen "
     "chips. Models are names, specs or JSON files saved by annotate/profile.",
     _roofline_arguments),
    ("study", "the whole performance study: chips, costs, latency, rooflines, training; one "
              "report",
     "Run the performance study over a model set, batch sizes and devices, caching every "
     "result (an interrupted run resumes), and write report.md / report.html with every "
     "figure and its data under --out.", _study_arguments),
    ("models", "the model names fxroof knows: torchvision, hf:, timm:, your own",
     "List the sources fxroof builds models from -- torchvision classification models by "
     "name, Hugging Face transformers as hf:<model_type>, timm as timm:<name>, your own as "
     "package.module:callable or path/to/file.py:callable -- with their names.",
     _models_arguments),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fxroof", description="Where the time goes in a PyTorch model, and why.",
        formatter_class=_HelpFormatter, allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"fxroof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    for name, help, description, add_arguments in COMMANDS:
        add_arguments(_parser(sub, name, help, description))
    return parser


def _quiet_stdout() -> None:
    """The reader of our stdout went away (`fxroof annotate | head -1`): point stdout at
    /dev/null so Python's exit-time flush does not raise BrokenPipeError again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (a test's capture, a redirect)."""

    fxroof_cli = True

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _warnings_to_stderr() -> None:
    """fxroof's own warnings (a chips file's lints, a damaged cache file) as
    `fxroof: warning: ...` lines; other libraries' loggers are left as they are."""
    logger = logging.getLogger("fxroof")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("fxroof: warning: %(message)s"))
        logger.addHandler(handler)


def main(argv: Optional[list[str]] = None) -> int:
    _warnings_to_stderr()
    forget_warnings()
    try:
        try:
            args, unknown = build_parser().parse_known_args(argv)
            if unknown:
                print(_unknown_arguments(args, unknown), file=sys.stderr)
                return EXIT_USAGE
        except SystemExit as e:  # argparse has printed usage and the error, or --help
            return e.code if isinstance(e.code, int) else EXIT_USAGE
        if getattr(args, "action", True) is None:  # a command that needs an action got none
            print(args.help_text(), file=sys.stderr)
            names = args.action_names
            print(f"fxroof {args.command}: error: choose an action ({', '.join(names[:-1])} "
                  f"or {names[-1]}).", file=sys.stderr)
            return EXIT_USAGE
        # remembered from before the import: a Ctrl-C held back while torch loads arrives as
        # the guard lifts, where a weakref callback or __del__ of the import's garbage may
        # swallow it -- remembered, it still ends the command as one
        with interrupts.remembered():
            with _ctrl_c_held():
                from fxroof import commands  # deferred: torch loads here, inside the guard
            interrupts.check()
            code = commands.run(args)
            interrupts.check()  # a Ctrl-C swallowed on the way still ends the command as one
        return code
    except UsageError as e:
        print(f"fxroof: usage error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except FxroofError as e:
        print(f"fxroof: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("fxroof: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_FAILED
    except OSError as e:  # the machine refused (disk full, permissions), not a bug of fxroof's
        where = f" ('{e.filename}')" if e.filename else ""
        print(f"fxroof: error: the system refused an operation{where}: "
              f"{e.strerror or e}. Free space or choose paths you can write to, then run "
              "again; fxroof writes its files atomically, so none was left half-written.",
              file=sys.stderr)
        return EXIT_FAILED


def _unknown_arguments(args: argparse.Namespace, unknown: list[str]) -> str:
    """The command's own usage and what it did not take, with the option meant where one is
    close (argparse alone names neither the command nor a fix: "fxroof: error:
    unrecognized arguments")."""
    prog, options = args.prog, args.option_names()
    hints = []
    for word in unknown:
        name = word.split("=", 1)[0]
        if name in ("--model", "--models") and {"model", "models"} & set(vars(args)):
            hints.append(f"the model is the first argument, not an option: "
                         f"`{prog} resnet50`")
        elif synonym := _synonym(name, options):
            hints.append(synonym)
        elif name.startswith("-") and _commands_taking(name):  # meant for another command
            hints.append(f"{name} is an option of " + ", ".join(
                f"`{command}`" for command in _commands_taking(name)))
        elif name.startswith("-"):  # --help is never the option meant
            close = difflib.get_close_matches(name, [o for o in options if o != "--help"],
                                              n=1, cutoff=0.6)
            if close:
                hints.append(f"did you mean {close[0]}?")
    text = (f"{prog}: usage error: it does not take {' '.join(unknown)}. "
            + "".join(h[0].upper() + h[1:] + ("" if h.endswith("?") else ".") + " "
                      for h in hints)
            + f"`{prog} --help` lists what it takes.")
    return args.usage_text() + text


# Options as other tools spell them (timm's benchmark.py --img-size, Hugging Face's
# --fp16, fvcore's --input-res, a --gpu for the hardware), each with what fxroof calls
# them, in order of preference: difflib offers --optimizer for --img-size and --amp for --gpu.
OPTION_SYNONYMS = {
    "--batch-size": ("--batch",), "--bs": ("--batch",),
    "--img-size": ("--input-shape",), "--image-size": ("--input-shape",),
    "--input-size": ("--input-shape",), "--input-res": ("--input-shape",),
    "--resolution": ("--input-shape",), "--max-length": ("--seq-len",),
    "--gpu": ("--chip", "--device"), "--hardware": ("--chip",), "--target": ("--chip",),
    "--precision": ("--amp", "--dtype"), "--mixed-precision": ("--amp",),
    "--fp16": ("--amp fp16", "--dtype float16"), "--bf16": ("--amp bf16", "--dtype bfloat16"),
    "--half": ("--dtype float16",), "--output": ("--out", "--json"), "-o": ("--out", "--json"),
}


def _synonym(name: str, options: list[str]) -> str:
    """``name`` as this command spells it ("--img-size is --input-shape here"), or ""
    where fxroof has no synonym for it or this command takes none of them."""
    taken = [meant for meant in OPTION_SYNONYMS.get(name, ())
             if meant.split()[0] in options]
    return f"{name} is {' or '.join(taken)} here" if taken else ""


def _commands_taking(option: str) -> list[str]:
    """The commands (`fxroof predict`, `fxroof chips list`) that take ``option``: a user who
    gives `chips plot --chip t4` meant another command, not the closest spelling here."""
    found = []

    def walk(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for command in action.choices.values():
                    if option in command._option_string_actions:
                        found.append(command.prog)
                    walk(command)
    walk(build_parser())
    return found


@contextlib.contextmanager
def _ctrl_c_held():
    """Hold Ctrl-C back while torch's extension modules initialise: a KeyboardInterrupt
    raised inside their C++ start-up ends the process through std::terminate (SIGABRT,
    "terminate called after throwing ... KeyboardInterrupt"), past every handler. A Ctrl-C
    that came meanwhile is delivered once the import is done, and handled as any other."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX (Windows): no mask to hold it
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def entry() -> None:
    """The console script (and ``python -m fxroof``): ``main``, then exit with its status.
    After Ctrl-C the process ends at once with 130: once a KeyboardInterrupt has gone
    through torch's import, the interpreter's own shutdown may end the process by SIGINT
    instead of with the status main returned (seen under load), and there is nothing left
    to clean up -- every output is written atomically."""
    code = main()
    if code == EXIT_INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
