"""What each fxroof command does: parse-free functions over the library, one per command.
Each calls the library and renders; no analysis here. ``run(args)`` dispatches."""
from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import os
import sys
import textwrap
from typing import Optional

import torch
from tqdm import tqdm

from fxroof import chip_params, op_classes, plots, prediction, render, roofline, validate
from fxroof.analysis import analyze
from fxroof.chips import get_chip, load_chips, parse_chip, user_chips_dir
from fxroof.device import check_device
from fxroof.errors import FxroofError, MissingPeakError
from fxroof.files import check_writable
from fxroof.keys import BACKWARD, FORWARD, OPTIMIZER
from fxroof.measure import check_target, datasheet_chip, default_path, save, versus_datasheet
from fxroof.model_probes import CALIBRATION_MODELS
from fxroof.models import MODEL_SOURCES, build_model, model_names, parse_input
from fxroof.models.hf import parse_overrides
from fxroof.pipeline import CUDNN_PLAN_BUILD_S, HOST_BAND
from fxroof.probes import measure_calibrated
from fxroof.roofline_points import plot_roofline
from fxroof.study import DEFAULT_MODELS, StudyConfig, run_study
from fxroof.target import Target
from fxroof.units import seconds, si

PREDICT_NOTE = textwrap.fill(
    "'total' is the time model's expectation (the roof, where 'time model' says ideal) and "
    "p10..p90 its band, from validation on "
    "GPUs it was not fitted on (a host cost's: the spread of hosts measured, "
    f"{HOST_BAND[0]}..{HOST_BAND[1]}x). 'roof': max(FLOPs / peak, bytes / bandwidth) per "
    "node, summed, a bound no real step reaches. 'waits for host': the share of the step "
    "the GPU sits idle while the host issues ops, which fewer launches would save and a "
    "faster GPU would not; 'page faults': the share of a CPU step spent faulting in pages "
    "glibc's malloc gave back (--allocator caching keeps them). FLOP/byte: total FLOPs / "
    "total bytes.", 96)
PARTS_NOTE = textwrap.fill(
    "Where each predicted step goes, shares of its total: 'roof' as above; 'below roof': "
    "the kernels at the rates fitted on measured kernels (NeuSight's public GPU sweeps, or "
    "`fxroof chips measure`'s) beyond their roof, for efficiency and tile waves (below "
    "0 where they beat it: Winograd's fewer multiplies, a CPU's caches); "
    "'launch-bound kernels': ATen kernels whose grid, not their bytes, sets their time at "
    "the GPU's SM clock (batch and layer norms, pooling, depthwise convolutions, strided "
    "elementwise loops, NCHW interpolations) beyond that; 'uncounted work': kernels and "
    "passes no node's bytes count (cuDNN's NCHW<->NHWC transposes, a convolution's bias "
    "kernels, ATen's copies, a layer norm's weight-gradient kernel, a CPU's layout "
    "reorders, im2col copies and page faults); "
    "'per-op fixed costs': the host's issue time the GPU waits for and its floor per "
    "kernel, a CPU op's dispatch. README, 'How it works', item 6, gives each rule and its "
    "evidence.", 96)
ROOF_ONLY_NOTE = textwrap.fill(
    "Chips with no calibrated time model (no kernel measurements to fit one on): their ideal "
    "roof, a lower bound no real step reaches. Compare them with each other, not with the "
    "calibrated times above.", 96)
_GROUP_TITLES = {"layer_type": "layer type", "module": "module", "op": "ATen op",
                 "phase": "phase"}


def _analyze(args, chip=None, device=None):
    """The step the arguments describe; ``chip``/``device`` override the target they name."""
    shapes, inputs = _input_shapes(args.input_shape or [], args.dtype)
    return analyze(args.model, *inputs, backward=args.backward, mode=args.mode, dtype=args.dtype,
                   input_shapes=shapes, batch=args.batch, seq_len=args.seq_len,
                   past=args.past,
                   hf_config=parse_overrides(args.hf_config),
                   compiled=getattr(args, "compiled", False),
                   freeze=getattr(args, "freeze", False), device=device or args.device,
                   chip=chip or _target_chip(args), loss=args.loss, optimizer=args.optimizer,
                   optimizer_impl=args.optimizer_impl, amp=args.amp,
                   memory_format=args.memory_format, allocator=args.allocator,
                   reparameterize=args.reparam)


def _input_shapes(texts: list[str], dtype) -> tuple:
    """(input_shapes, inputs) for analyze: float shapes as they are; where any --input-shape
    names a dtype (8,128:int64 for token ids), meta tensors of every input instead."""
    parsed = [parse_input(text) for text in texts]
    if not any(given for _, given in parsed):
        return [shape for shape, _ in parsed] or None, ()
    inputs = []
    for shape, given in parsed:
        given = given or getattr(torch, dtype or "float32")
        shape = validate.shape(shape, itemsize=given.itemsize)
        inputs.append(torch.empty(shape, dtype=given, device="meta"))
    return None, tuple(inputs)


def _target_chip(args):
    """The chip a single --chip names: its compute capability sets the CUDA target's rules."""
    chip = getattr(args, "chip", None)
    if isinstance(chip, list):
        chip = chip[0] if len(chip) == 1 else None
    chips_file = getattr(args, "chips_file", None)
    # a chips file is read even where no --chip picks from it: a missing or broken file the
    # user named is an error, not an option silently ignored
    chips = load_chips(chips_file) if chip or chips_file else None
    return get_chip(chip, chips) if chip else None


def _check_outputs(args, **methods) -> list:
    """[(path, AnnotatedGraph method)] for the output options given; refuses an existing
    file, or one path named twice, before any work is done, not after it."""
    # `is not None`: an empty path the shell passed (--json "$UNSET") is an error, not an
    # output silently skipped
    outputs = [(getattr(args, option), method, option) for option, method in methods.items()
               if getattr(args, option) is not None]
    files = [os.path.realpath(path) for path, _, _ in outputs if path]
    twice = sorted({path for path, _, _ in outputs
                    if path and files.count(os.path.realpath(path)) > 1})
    if twice:
        raise FxroofError(f"'{twice[0]}' is one file named by two output options (perhaps "
                          "spelled two ways); each output needs its own path.")
    for path, _, option in outputs:  # --csv names a .csv, --trace a (Chrome) .json
        check_writable(path, args.force, ".json" if option == "trace" else "." + option)
    return [(path, method) for path, method, _ in outputs]


def _write_outputs(g, outputs: list, force: bool) -> None:
    for path, method in outputs:
        getattr(g, method)(path, overwrite=force)
        print(f"wrote {path}")


def _print_header(g, detail: str, targets: int = 1) -> None:
    m = g.model
    step = "".join(f", {label} {value}" for label, value in (
        ("autocast", m.amp), ("loss", m.loss), ("optimizer", m.optimizer),
        ("reparameterized", m.reparameterized is not None
         and f"({m.reparameterized} submodules fused)")) if value)
    where = f"{m.device} target" if targets == 1 else \
        f"{targets} targets (each GPU: CUDA's program for its compute capability)"
    if m.allocator != "glibc":  # the default, said only where it was changed
        where += f" ({m.allocator} host allocator: no page faults)"
    if roofline.cudnn_searched() and m.device != "cpu":  # also said only where changed
        where += " (cuDNN engine search on)"
    print(f"{m.name}: inputs {_shapes_line(m.inputs)}, "
          f"{m.dtype}, {where}, {m.mode} mode{step}, {detail}")
    print()


# A header lists at most this many runs of equal input shapes before it counts each shape once
SHAPE_RUNS = 8


def _shapes_line(inputs: list[dict]) -> str:
    """The inputs' shapes, a run of three or more equal ones once with its count (a decode
    step's KV cache is two tensors a layer: '(1, 1), 64 x (1, 32, 4096, 128)'); where that
    leaves more than SHAPE_RUNS runs (a cache whose layers alternate full and sliding-
    window ones), each shape once with its count, in order of first appearance."""
    shapes = [tuple(i["shape"]) for i in inputs]
    runs = [(shape, len(list(run))) for shape, run in itertools.groupby(shapes)]
    if len(runs) > SHAPE_RUNS:
        runs = list(collections.Counter(shapes).items())  # first appearance order kept
    return ", ".join(f"{n} x {shape}" if n > 2 else ", ".join([str(shape)] * n)
                     for shape, n in runs)


def _phases(g) -> list[str]:
    return [FORWARD] + ([BACKWARD] if g.model.backward else []) + (
        [OPTIMIZER] if g.capture.optimizer is not None else [])


def _compiled_count(records: list[dict]) -> str:
    """The header's count of a compiled view: its kernels, and the eager ops that run
    between Dynamo's regions where there are any."""
    kernels = sum(op_classes.compiled_kernel(r) for r in records)
    eager = len(records) - kernels
    return f"; compiled view: {kernels} Inductor kernels" + (
        f" and {eager} eager ops between regions" if eager else "")


def run_annotate(args) -> int:
    outputs = _check_outputs(args, json="to_json", csv="to_csv", graphml="to_graphml")
    g = _analyze(args)
    m = g.model
    _print_header(g, f"{m.parameters:,} parameters"
                  + (", forward + backward" if m.backward else ", forward only")
                  + (_compiled_count(g.records()) if m.view == "compiled" else ""))
    print(f"Top {args.top or 'all'} {'kernels' if m.view == 'compiled' else 'nodes'} by "
          f"{args.sort}:")
    print(g.table(top=args.top or None, sort=args.sort, macs=args.macs))
    for phase in (_phases(g) if args.by != "phase" else [None]):
        rows = g.breakdown(args.by, phase=phase, depth=args.depth)
        print()
        print(f"By {_GROUP_TITLES[args.by]}" + (f" ({phase})" if phase else "") + ":")
        print(render.breakdown_table(rows, _GROUP_TITLES[args.by], macs=args.macs))
    print()
    print(g.summary(macs=args.macs))
    _write_outputs(g, outputs, args.force)
    return 0


def run_profile(args) -> int:
    check_device(args.device)  # before tracing: fail fast on a missing GPU
    chip = _chip(args) if args.chip else None
    outputs = _check_outputs(args, trace="to_trace", json="to_json", csv="to_csv")
    g = _analyze(args)
    with tqdm(total=args.warmup + args.repeats, desc="timing", unit="run",
              disable=not sys.stderr.isatty()) as bar:
        report = g.time(device=args.device, repeats=args.repeats, warmup=args.warmup,
                        progress=lambda done, total: bar.update(done - bar.n))
    if chip is not None:
        g.roofline(chip)
    _print_header(g, f"timed on {report.device}" + (
        "" if chip is None else f", roofs of {chip.name}" + (
            "" if measured_here(chip, report.device) else " (a what-if: another machine)")))
    print(f"Top {args.top or 'all'} nodes by time:")
    print(g.table(top=args.top or None, sort="time_s"))
    for phase in _phases(g):
        print()
        print(f"By layer type ({phase}):")
        print(render.breakdown_table(g.breakdown("layer_type", phase=phase, sort="time_s"),
                                     "layer type"))
    print()
    print(g.summary())
    print(render.timing_lines(report.as_dict()))
    if chip is not None:
        rows = prediction.where_to_look(g.records(), chip, top=10)
        print()
        if not measured_here(chip, report.device):
            print(what_if_note(chip, report.device, args.model))
        print(f"Where to look on {chip.name} (time above the roof, largest first):")
        print(render.where_table(rows))
    _write_outputs(g, outputs, args.force)
    return 0


def measured_here(chip, device: str) -> bool:
    """Whether the chip's roofs were measured on a device of the kind that was timed (the
    chip `fxroof chips measure` saved): only then is "% of roof" this machine's own gap."""
    kind = "gpu" if str(device).startswith("cuda") else "cpu"
    return chip.cls == kind and chip.op_overhead_s is not None


def what_if_note(chip, device: str, model: str) -> str:
    return textwrap.fill(
        f"What-if: these times were measured on {device}, and {chip.name}'s roofs are "
        "another machine's ceiling, so '% of roof' is how this machine's times compare with "
        f"that chip's roofs, not how well {chip.name} would run the model. For this "
        "machine's own roofs run `fxroof chips measure` and pass --chip this-"
        f"{'gpu' if str(device).startswith('cuda') else 'cpu'}; for a prediction on "
        f"{chip.name}: `fxroof predict {model} --chip {chip.id}`.", 96)


def _chip(args):
    return get_chip(args.chip, load_chips(args.chips_file))


def run_predict(args) -> int:
    chips = load_chips(args.chips_file)
    selected = [get_chip(c, chips) for c in args.chip] if args.chip else list(chips.values())
    graphs = _graphs_per_target(args, selected)
    first = next(iter(graphs.values()))
    _print_header(first, f"peak memory {si(first.memory.peak_bytes, 'B')}",
                  targets=sum(not isinstance(g, FxroofError) for g in graphs.values()))
    rows, skipped = [], []
    for chip in selected:
        try:
            g = graphs[_target_of(args, chip)]
            if isinstance(g, FxroofError):
                raise g
            p = prediction.predict(g.records(), chip, args.roof)
        except FxroofError as e:
            if len(selected) == 1:
                raise
            skipped.append((chip, e))
            continue
        rows.append({"chip": chip, "prediction": p,
                     "fits": chip.capacity is None or g.memory.peak_bytes <= chip.capacity})
    if skipped:
        print("\n".join(_skipped_lines(skipped)) + "\n")
    if not rows:
        raise FxroofError("None of the chips could price this step (each one's reason is "
                          "above): choose chips that list its dtype (`fxroof chips list`), or "
                          "change --dtype or --amp.")
    rows.sort(key=lambda r: r["prediction"]["overall"]["predicted_s"])
    calibrated = [r for r in rows if r["prediction"]["overall"]["model"] == "calibrated"]
    roof_only = [r for r in rows if r not in calibrated]
    if calibrated and roof_only:
        # A roof has no launch cost and no efficiency below 100%: ranked among calibrated
        # times it would put a laptop GPU above an H100 at batch 1.
        print(render.prediction_table(calibrated))
        print(f"\n{ROOF_ONLY_NOTE}")
        print(render.prediction_table(roof_only))
    else:
        print(render.prediction_table(rows))
    print(f"\n{PREDICT_NOTE}")
    if calibrated:
        print(f"\n{render.time_parts_table(calibrated)}\n{PARTS_NOTE}")
    # an hf: model's integer inputs are its token ids; another model's may be anything
    # (a recommender's categorical features), so its rate is not given in tokens
    tokens = _step_tokens(first.model.inputs) if str(args.model).startswith("hf:") else None
    if tokens:
        print(f"\n{render.token_rate_table(rows, tokens)}\n{_tokens_note(args, tokens)}")
    builds = max((sum(r["plan_build"] for r in g.records()) for g in graphs.values()
                  if not isinstance(g, FxroofError)), default=0)
    if builds:
        print(f"\n{_plan_build_note(builds)}")
    return 0


def _plan_build_note(builds: int) -> str:
    """Why a decode step on Hopper or Blackwell pays a host cost no kernel shows."""
    return textwrap.fill(
        f"On a Hopper or Blackwell GPU, PyTorch runs this step's attention with cuDNN, whose "
        f"plans it caches per exact key length: an eager decode loop, its cache one token "
        f"longer each step, builds {builds} plan(s) a step on the host "
        f"({seconds(CUDNN_PLAN_BUILD_S)} each, measured on an H200 VM; priced above). A "
        f"static KV cache with torch.compile keeps the shapes fixed; "
        f"torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) around generation "
        f"picks a backend with no plans.", 96)


def _step_tokens(inputs: list[dict]) -> Optional[int]:
    """The tokens a step takes: batch x length of its 2-D integer inputs (a language model's
    token ids, and its labels beside them for a loss); None for a step with none, or with
    sequences of different shapes (an encoder-decoder's: which to count is the reader's)."""
    shapes = {tuple(i["shape"]) for i in inputs if len(i["shape"]) == 2
              and i["dtype"] == "int64"}
    return math.prod(shapes.pop()) if len(shapes) == 1 else None


def _tokens_note(args, tokens: int) -> str:
    """What token_rate_table's rates count, for the step ``args`` describe."""
    what = (f"This decode step makes {tokens:,} token(s): {args.seq_len or 1} new token(s) "
            f"for each of {args.batch or 1} sequence(s), after {args.past:,} cached"
            if getattr(args, "past", None) else
            f"This step takes {tokens:,} tokens (its token ids, batch x length)")
    return textwrap.fill(
        f"{what}. 'tokens/s': those over the step's predicted time, p10..p90 over its band's "
        f"edges; 'at the roof': over the roof time, a rate no step reaches.", 96)


def _skipped_lines(skipped: list) -> list[str]:
    """One line per (chip, error) skipped for its own reason; chips that lack the same peak
    (every TPU for an fp32 step) in one paragraph, the advice said once."""
    lines, missing = [], {}
    for chip, e in skipped:
        if isinstance(e, MissingPeakError):
            missing.setdefault(e.needed, []).append(e)
        else:
            lines.append(f"skipped {chip.id}: {e}")
    for needed, errors in missing.items():
        if len(errors) == 1:
            lines.append(f"skipped {errors[0].chip_id}: {errors[0]}")
            continue
        listed = "; ".join(f"{e.chip_id} ({', '.join(e.listed)})" for e in errors)
        lines.append(textwrap.fill(
            f"skipped {len(errors)} chips that list no {needed}: {listed}. To price them, "
            "analyse the model in a dtype they list (--dtype, or --amp for mixed "
            "precision).", 96))
    return lines


def _pricing_chip(args, chip):
    """The chip whose target ``chip`` is priced on: itself, unless --device names one target
    for all chips (then a single --chip's capability, else CUDA's default)."""
    if args.device is None:
        return chip
    return chip if len(args.chip or ()) == 1 else None


def _target_of(args, chip) -> tuple:
    """(device, compute capability) of the program a chip is priced on: the --device asked
    for, else the chip's own -- a GPU runs CUDA's kernels for its compute capability
    (attention backends, autocast policy, bf16 support; an AMD GPU ROCm's, which PyTorch
    dispatches as 'cuda'), any other chip the CPU's."""
    target = Target.of(args.device, _pricing_chip(args, chip))
    return target.device, target.capability


def _graphs_per_target(args, chips: list) -> dict:
    """{target: AnnotatedGraph} for the chips' targets (_target_of), each analysed once, the
    CPU's first. A later target that cannot be recorded (bf16 autocast on a GPU older than
    Ampere) is kept as its error, for its chips to be skipped with it; the first one's error
    is the command's."""
    graphs: dict = {}
    for chip in sorted(chips, key=lambda c: _target_of(args, c)[0] == "cuda"):
        target = _target_of(args, chip)
        if target in graphs:
            continue
        try:
            cuda_chip = _pricing_chip(args, chip) if target[0] == "cuda" else None
            graphs[target] = _analyze(args, cuda_chip, target[0])
        except FxroofError as e:
            if not graphs:
                raise
            graphs[target] = e
    return graphs


def run_chips_list(args) -> int:
    chips = [c for c in load_chips(args.chips_file).values()
             if args.cls is None or c.cls == args.cls]
    if args.json:
        print(json.dumps([c.as_record() for c in chips], indent=1))
    else:
        print(render.chips_table(chips, wide=args.wide))
    return 0


def run_chips_show(args) -> int:
    chip = get_chip(args.id, load_chips(args.chips_file))
    print(render.chip_details(chip, chip_params.time_model_source(chip),
                              chip_params.multiprocessor_facts(chip)))
    return 0


def run_chips_measure(args) -> int:
    default = default_path("this-gpu" if "cuda" in args.device else "this-cpu")
    target = args.out if args.out is not None else default  # '' is an error, not the default
    check_target(target, args.force)  # refuse before measuring, not after
    entry = measure_calibrated(args.device, quick=not args.full,
                               progress=lambda message: print(f"measuring {message}",
                                                              file=sys.stderr),
                               compiled=args.full,
                               models=CALIBRATION_MODELS if args.full else ())
    path = save(entry, target, force=args.force)
    chip = parse_chip(entry, path)
    print(render.chips_table([chip]))
    known = datasheet_chip(chip.name, load_chips())
    if known is not None:
        print(f"\nmeasured vs datasheet ({known.name}; the matrix peaks of GEMMs PyTorch "
              "dispatches, so fp32 without TF32 is compared with the fp32 figure):")
        print(render.versus_table(versus_datasheet(chip, known)))
    found = os.path.dirname(os.path.abspath(path)) == os.path.abspath(user_chips_dir())
    # a chip saved outside the folder every command reads is found only when named
    print(f"saved {path}: use --chip {chip.id}"
          + ("" if found else f" --chips-file {path}"))
    return 0


def run_chips_plot(args) -> int:
    for path in plots.plot_chips_by_class(list(load_chips(args.chips_file).values()), args.out,
                                          args.dtype, overwrite=args.force):
        print(f"wrote {path}")
    return 0


def run_roofline(args) -> int:
    chips = load_chips(args.chips_file)
    plot_roofline(args.models, [get_chip(c, chips) for c in args.chip], args.out, by=args.by,
                  batches=args.batch, backward=args.backward, dtype=args.dtype,
                  overwrite=args.force, device=args.device, amp=args.amp,
                  reparameterize=args.reparam, compiled=args.compiled, freeze=args.freeze)
    print(f"wrote {args.out}")
    return 0


def run_study_command(args) -> int:
    if not args.report_only and args.models:
        for model in args.models:  # an unknown name fails now, not after an hour of sweep
            build_model(model)
    config = StudyConfig(models=args.models or list(DEFAULT_MODELS), batches=args.batch or [],
                         devices=args.device, train_batches=args.train_batch or [],
                         warmup=args.warmup, repeats=args.repeats, rounds=args.rounds,
                         compiled=args.compiled,
                         freeze=args.freeze, fresh_process=not args.in_process,
                         allocator=args.allocator, cudnn_benchmark=args.cudnn_benchmark)
    paths = run_study(config, args.out, force=args.force, report_only=args.report_only)
    print(f"wrote {paths['html']} and {paths['md']}")
    return 0


# well-known names shown first for the large sources (the alphabet starts with rarities)
MODEL_EXAMPLES = {"hf": ["gpt2", "bert", "llama", "mistral", "qwen2", "t5", "vit", "whisper"],
                  "timm": ["resnet50", "convnext_tiny", "vit_base_patch16_224",
                           "efficientnet_b0", "maxvit_tiny_tf_224", "regnety_040"]}


def run_models(args) -> int:
    if args.source:
        names = model_names(args.source)
        if not names:
            raise FxroofError(f"No {args.source} models: {MODEL_SOURCES[args.source][1]}")
        prefix = "" if args.source == "torchvision" else f"{args.source}:"
        print("\n".join(prefix + name for name in names))
        return 0
    for source, (form, where) in MODEL_SOURCES.items():
        names = model_names(source)
        print(f"{form}: {len(names)} models, {where}" if names else f"{form}: {where}: not "
              "installed")
        if names:
            shown = names if source == "torchvision" else [
                n for n in MODEL_EXAMPLES[source] if n in names] + ["..."]
            print(textwrap.fill("  ".join(shown), 92, initial_indent="  ",
                                subsequent_indent="  "))
            if source != "torchvision":
                print(f"  (all of them: fxroof models --source {source})")
    print("package.module:callable or path/to/file.py:callable: your own function or class "
          "returning an nn.Module,\n  with one --input-shape per input (8,3,224,224; "
          "8,128:int64 for token ids)")
    return 0


COMMANDS = {"annotate": run_annotate, "profile": run_profile, "predict": run_predict,
            "chips list": run_chips_list, "chips show": run_chips_show,
            "chips measure": run_chips_measure,
            "chips plot": run_chips_plot, "roofline": run_roofline,
            "study": run_study_command, "models": run_models}


# Lists where an item named twice counts once (a chip priced or drawn twice, a model
# studied twice); not --input-shape, where two inputs may have one shape
_NAMED_ONCE = ("chip", "chips_file", "models", "batch", "train_batch", "device")


def run(args: argparse.Namespace) -> int:
    name = args.command + (f" {args.action}" if getattr(args, "action", None) else "")
    for option in _NAMED_ONCE:
        if isinstance(getattr(args, option, None), list):
            setattr(args, option, list(dict.fromkeys(getattr(args, option))))
    if getattr(args, "cudnn_benchmark", False):
        # the whole command's: the predictions read it (roofline.cudnn_searched), and a
        # CUDA timing pass runs its convolutions with it
        with roofline.cudnn_search():
            return COMMANDS[name](args)
    return COMMANDS[name](args)
