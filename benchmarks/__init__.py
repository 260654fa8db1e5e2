"""Benchmark scripts (run as `python benchmarks/<script>.py`); ``script_main`` is their one
way to end: the exit status main returns, a clear error as one line, Ctrl-C as 130."""
from __future__ import annotations

import os
import signal
import sys
from typing import Callable


def _interrupted_while_loading(signum, frame) -> None:
    """A Ctrl-C before script_main takes over: the script is still importing (torch takes a
    second or two) and has written nothing. It ends there, at once -- a KeyboardInterrupt
    raised inside torch's start-up would print a traceback, or abort in its C++ code."""
    name = os.path.basename(getattr(sys.modules["__main__"], "__file__", "") or "benchmarks")
    print(f"{name}: interrupted: nothing written", file=sys.stderr, flush=True)
    os._exit(130)


# Only when a script of this folder is the program: a test importing it keeps its handler
if os.path.dirname(os.path.abspath(getattr(sys.modules["__main__"], "__file__", "") or "")) \
        == os.path.dirname(os.path.abspath(__file__)):
    signal.signal(signal.SIGINT, _interrupted_while_loading)

from fxroof import interrupts  # noqa: E402 -- torch loads here, after the handler
from fxroof.errors import FxroofError  # noqa: E402


def script_main(main: Callable[[], int], path: str) -> None:
    """Run a script's ``main`` and exit. Outputs are written last and atomically, so an
    error or an interrupt leaves nothing half-written."""
    name = os.path.basename(path)
    try:
        with interrupts.remembered():
            code = main()
            interrupts.check()  # a Ctrl-C swallowed on the way (fxroof.interrupts)
    except FxroofError as e:
        code = f"{name}: error: {e}"
    except KeyboardInterrupt:
        print(f"{name}: interrupted: nothing written", file=sys.stderr)
        code = 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ending: a Ctrl-C now changes nothing
    sys.exit(code)


def chip_and_output_arguments(parser) -> None:
    """The options of a script that predicts on a chip and may write its result as JSON."""
    parser.add_argument("--chip", required=True, help="chip id to predict on")
    parser.add_argument("--chips-file", action="append", help="extra chip definitions (YAML)")
    output_arguments(parser)


def parsed_chip_arguments(doc: str, inputs: str, what: str, argv=None) -> tuple:
    """(args, chip) of a script that reads files named by its positional ``inputs`` (help
    ``what``), predicts on ``--chip`` and may write its result as JSON; its description the
    docstring's first paragraph."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument(inputs, nargs="+", help=what)
    chip_and_output_arguments(parser)
    args = parser.parse_args(argv)
    return args, checked_chip(args)


def record_and_summary_parser(doc: str, record_help: str, summary_help: str) -> tuple:
    """The parser of a script that records on a device and summarises what it recorded:
    ``record --out FILE [--device D] [--force]`` and ``summary FILE``, the command in
    ``args.command``; returns (parser, its subcommands, record's parser) for the script's
    own options and subcommands."""
    import argparse
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser("record", help=record_help)
    record.add_argument("--out", required=True, help="JSON file of what is recorded")
    record.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default: cuda)")
    record.add_argument("--force", action="store_true", help="overwrite an existing --out")
    commands.add_parser("summary", help=summary_help).add_argument("file")
    return parser, commands, record


def output_arguments(parser) -> None:
    """The options of a script that may write its result as JSON."""
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --json")


def parsed_output_arguments(doc: str, argv=None, inputs: tuple = ()):
    """A script's parsed ``--json``/``--force`` (its description the docstring's first
    paragraph), and where ``inputs`` is (name, help) any number of files it reads, once
    ``--json`` is known to be writable: refused before the work, not after."""
    import argparse

    from fxroof.files import check_writable

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if inputs:
        parser.add_argument(inputs[0], nargs="*", help=inputs[1])
    output_arguments(parser)
    args = parser.parse_args(argv)
    if args.json:
        check_writable(args.json, overwrite=args.force)
    return args


def report(summary: dict, args, points: list) -> None:
    """Print a script's summary as JSON and, where ``--json`` asks, write it with its points
    ({"summary", "points"}; atomically, an existing file only with ``--force``)."""
    import json

    from fxroof.files import write_json

    print(json.dumps(summary, indent=1))
    if args.json:
        write_json(args.json, {"summary": summary, "points": points}, overwrite=args.force)


def timm_missing(script: str) -> bool:
    """Whether timm (an optional extra) is absent, saying so for ``script``: a script that
    compares against timm's models then has nothing to compare, and ends without error."""
    try:
        import timm  # noqa: F401
    except ImportError:
        print(f"{script}: timm is not installed (pip install 'fxroof[timm]'): nothing to "
              "compare", file=sys.stderr)
        return True
    return False


def checked_chip(args):
    """The chip ``--chip`` names (with ``--chips-file``'s), once ``--json`` is known to be
    writable: a script refuses a path it may not write before its work, not after."""
    from fxroof.chips import get_chip, load_chips
    from fxroof.files import check_writable

    if args.json:
        check_writable(args.json, overwrite=args.force)
    return get_chip(args.chip, load_chips(args.chips_file))


def rho_per_batch(points: list[dict], predicted: str, measured: str) -> dict:
    """{batch: Spearman rho between points[predicted] and points[measured]} over the points
    of each batch size, where a batch has at least 4 (with fewer, even a perfect order means
    little)."""
    from scipy.stats import spearmanr

    rho = {}
    for batch in sorted({p["batch"] for p in points}):
        at = [p for p in points if p["batch"] == batch]
        if len(at) >= 4:
            rho[batch] = round(float(spearmanr([p[predicted] for p in at],
                                               [p[measured] for p in at])[0]), 3)
    return rho


def read_recorded(path: str, benchmark: str, writer: str, what: str,
                  check: Callable[[list], None] = lambda runs: None,
                  max_chars: int = 64 << 20) -> dict:
    """A JSON file a script of this folder wrote -- its "benchmark" field ``benchmark`` and
    a list of "runs", each passing ``check`` (a ValueError names the one that does not) -- or
    a clear error naming the file, what is wrong with it and ``writer``, the command that
    writes such a file; ``what`` says what the file should have been."""
    import json

    from fxroof.files import read_text
    try:
        found = json.loads(read_text(path, max_chars, f"a {benchmark} file"))
        if isinstance(found, dict) and found.get("benchmark") == benchmark \
                and isinstance(found.get("runs"), list):
            check(found["runs"])
            return found
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, KeyError, TypeError) as e:
        raise FxroofError(f"Cannot read '{path}' ({e}): give the JSON file that "
                          f"`{writer}` wrote.") from None
    raise FxroofError(f"'{path}' is not {what}: give the JSON file that `{writer}` wrote.")


def device_kernels(call, dev) -> list[dict]:
    """The device kernels one ``call`` runs under torch.profiler -- name and time (us), in
    start order -- or, on a CPU, its top-level ATen ops."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        call()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    wanted = torch.autograd.DeviceType.CUDA if dev.type == "cuda" else torch.autograd.DeviceType.CPU
    found = sorted((e for e in prof.events() if e.device_type == wanted
                    and (dev.type == "cuda" or e.cpu_parent is None)),
                   key=lambda e: e.time_range.start)
    return [{"name": e.name, "us": e.time_range.end - e.time_range.start} for e in found]
