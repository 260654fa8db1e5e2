"""The fxroof command line. Each subcommand parses, calls the library, renders; no analysis here."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from fxroof.errors import FxroofError
from fxroof.rollups import GROUPINGS


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    from fxroof.models import DEFAULT_MODEL

    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help="torchvision model name or package.module:callable returning an "
                        f"nn.Module (default: {DEFAULT_MODEL})")
    p.add_argument("--batch", type=int, default=1,
                   help="batch size of the default image input (default: 1)")
    p.add_argument("--input-shape", action="append", metavar="N,C,H,W",
                   help="shape of one float input, batch first; repeat for several inputs "
                        "(default: the model's native (batch, 3, S, S))")
    p.add_argument("--dtype", default=None,
                   help="float32, float16, bfloat16 or float64 (default: the model's own)")
    p.add_argument("--mode", choices=["train", "eval"], default=None,
                   help="module mode (default: train with --backward, else eval)")
    p.add_argument("--backward", action="store_true",
                   help="also trace autograd's backward (training step, no optimizer)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per sequence for hf: text models (default: 128)")
    p.add_argument("--hf-config", action="append", metavar="KEY=VALUE",
                   help="override a field of an hf: model's config (repeatable)")


def _add_top_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=int, default=20,
                   help="rows in the node table (default: 20; 0 for all)")


def _add_chips_file_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chips-file", action="append", metavar="YAML",
                   help="extra chip definitions, added to chips.yaml (repeatable)")


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="PATH", help="write the annotated graph as JSON")
    p.add_argument("--csv", metavar="PATH", help="write the node records as CSV")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fxroof", description="Where the time goes in a PyTorch model, and why.")
    sub = parser.add_subparsers(dest="command", metavar="<command>")

    p = sub.add_parser("annotate", help="cost-annotate a model's ATen graph (FLOPs, bytes)",
                       description="Trace a model to ATen forward (and backward) graphs on fake "
                                   "tensors and annotate every node with FLOPs and bytes.")
    _add_model_arguments(p)
    _add_top_argument(p)
    p.add_argument("--sort", choices=["flops", "bytes", "intensity"], default="flops",
                   help="node table order (default: flops)")
    p.add_argument("--by", choices=GROUPINGS, default="layer_type",
                   help="breakdown grouping (default: layer_type)")
    p.add_argument("--depth", type=int, default=None,
                   help="module path depth for --by module (default: full path)")
    p.add_argument("--macs", action="store_true",
                   help="report multiply-accumulates of matrix ops instead of FLOPs "
                        "(torchvision's _ops convention)")
    p.add_argument("--graphml", metavar="PATH", help="write the annotated graph as GraphML")
    _add_output_arguments(p)
    p.set_defaults(run=run_annotate)

    p = sub.add_parser("profile", help="time every ATen node on a device (CPU or CUDA)",
                       description="Annotate a model, then run its forward (and backward) graph "
                                   "node by node on real tensors and time every node.")
    _add_model_arguments(p)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu)")
    p.add_argument("--repeats", type=int, default=10, help="timed runs (default: 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up runs (default: 2)")
    _add_top_argument(p)
    p.add_argument("--trace", metavar="PATH", help="write a Chrome/Perfetto trace (JSON)")
    p.add_argument("--chip", help="compare each node with its roof on this chip "
                                  "(see `fxroof chips list`)")
    _add_chips_file_argument(p)
    _add_output_arguments(p)
    p.set_defaults(run=run_profile)

    p = sub.add_parser("predict", help="predicted step time of a model on every chip",
                       description="Roofline-predicted time (forward, backward, total), bound "
                                   "and memory fit of one step on each chip, fastest first.")
    _add_model_arguments(p)
    p.add_argument("--chip", action="append", help="only these chips (repeatable)")
    _add_chips_file_argument(p)
    p.set_defaults(run=run_predict)

    p = sub.add_parser("chips", help="the chip database",
                       description="List the chips fxroof knows, with dense peaks per dtype and "
                                   "memory bandwidth.")
    chips_sub = p.add_subparsers(dest="chips_command", metavar="<action>")
    q = chips_sub.add_parser("list", help="table (or --json) of the chips")
    q.add_argument("--class", dest="cls", help="only chips of this class (cpu, gpu, ...)")
    q.add_argument("--json", action="store_true", help="machine-readable records")
    _add_chips_file_argument(q)
    q.set_defaults(run=run_chips_list)
    q = chips_sub.add_parser("plot", help="all chips on one log-log roofline, plus one per class")
    q.add_argument("--out", default="chips.png", help="figure path, .png or .svg (default: "
                                                      "chips.png; per-class plots beside it)")
    q.add_argument("--dtype", default="fp32", help="which peak to draw (default: fp32)")
    q.add_argument("--force", action="store_true", help="overwrite existing figures")
    _add_chips_file_argument(q)
    q.set_defaults(run=run_chips_plot)
    q = chips_sub.add_parser("measure", help="measure this machine's roofs, save as a chip",
                             description="Measure GEMM FLOP/s per dtype and copy bandwidth of "
                                         "the local device and save them as a user chip.")
    q.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu)")
    q.add_argument("--full", action="store_true",
                   help="larger problems and more repeats (default: quick, under 30 s on CPU)")
    q.add_argument("--out", metavar="YAML", help="where to save (default: the user chip "
                                                  "folder, ~/.config/fxroof/chips)")
    q.add_argument("--force", action="store_true", help="overwrite an existing chip file")
    q.set_defaults(run=run_chips_measure)

    p = sub.add_parser("roofline", help="models, layer types or nodes as points on rooflines",
                       description="Place models (x batch sizes) or one model's layer types on "
                                   "the rooflines of the chosen chips. Models are names, specs "
                                   "or JSON files saved by annotate/profile.")
    p.add_argument("models", nargs="+", help="model names, package.module:callable, or .json")
    p.add_argument("--batch", type=int, nargs="+", default=[1], help="batch sizes (default: 1)")
    p.add_argument("--backward", action="store_true", help="training step (forward+backward)")
    p.add_argument("--dtype", default=None, help="model dtype (default: the model's own)")
    p.add_argument("--chip", action="append", required=True, help="chip id (repeatable)")
    p.add_argument("--by", choices=["model", "layer_type", "node"], default="model",
                   help="points per model (default), per layer type or per node of one model")
    p.add_argument("--out", default="roofline.png", help="figure path (default: roofline.png)")
    p.add_argument("--force", action="store_true", help="overwrite an existing figure")
    _add_chips_file_argument(p)
    p.set_defaults(run=run_roofline)

    p = sub.add_parser("study", help="the whole performance study: chips, costs, latency, "
                                     "rooflines, training; one report",
                       description="Run the performance study over a model set, batch sizes "
                                   "and devices, caching every result (an interrupted run "
                                   "resumes), and write report.md / report.html with every "
                                   "figure and its data under --out.")
    p.add_argument("--out", default="study", help="study folder (default: study/)")
    p.add_argument("--models", nargs="+", default=None,
                   help="model names or specs (default: 17 torchvision models, one per family)")
    p.add_argument("--batch", type=int, nargs="+", default=None,
                   help="batch sizes (default: 1 8 32 64 on CPU, 1 64 256 on CUDA)")
    p.add_argument("--train-batch", type=int, nargs="+", default=None,
                   help="batch sizes of the timed training step (default: the smallest batch)")
    p.add_argument("--device", nargs="+", default=["cpu"], help="cpu and/or cuda (default: cpu)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs (default: 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up runs (default: 1)")
    p.add_argument("--report-only", action="store_true",
                   help="redraw the report from the cached results; run nothing")
    p.add_argument("--force", action="store_true",
                   help="recompute every result, replacing a different study in --out")
    p.set_defaults(run=run_study)

    p = sub.add_parser("models", help="list the model names fxroof knows",
                       description="List the torchvision classification models fxroof can build "
                                   "by name.")
    p.set_defaults(run=run_models)
    return parser


def _analyze(args):
    import fxroof
    from fxroof.models import parse_shape

    shapes = [parse_shape(s) for s in args.input_shape] if args.input_shape else None
    if args.batch < 1:
        raise FxroofError(f"--batch must be a positive integer, not {args.batch}.")
    from fxroof.hf import parse_overrides

    return fxroof.analyze(args.model, backward=args.backward, mode=args.mode, dtype=args.dtype,
                          input_shapes=shapes, batch=args.batch, seq_len=args.seq_len,
                          hf_config=parse_overrides(args.hf_config))


def _check_outputs(args, **methods) -> list:
    """[(path, AnnotatedGraph method)] for the output options given; refuses an existing
    file before any work is done, not after it."""
    from fxroof.export import check_writable

    outputs = [(getattr(args, option), method) for option, method in methods.items()
               if getattr(args, option)]
    for path, _ in outputs:
        check_writable(path, args.force)
    return outputs


def _write_outputs(g, outputs: list, force: bool) -> None:
    for path, method in outputs:
        getattr(g, method)(path, overwrite=force)
        print(f"wrote {path}")


def _print_header(g, detail: str) -> None:
    m = g.model
    print(f"{m.name}: inputs {', '.join(str(tuple(i['shape'])) for i in m.inputs)}, "
          f"{m.dtype}, {m.mode} mode, {detail}")
    print()


def run_annotate(args) -> int:
    from fxroof import render

    outputs = _check_outputs(args, json="to_json", csv="to_csv", graphml="to_graphml")
    g = _analyze(args)
    m = g.model
    _print_header(g, f"{m.parameters:,} parameters"
                  + (", forward + backward" if m.backward else ", forward only"))
    print(f"Top {args.top or 'all'} nodes by {args.sort}:")
    print(g.table(top=args.top or None, sort=args.sort, macs=args.macs))
    phases = ["forward", "backward"] if m.backward else ["forward"]
    title = {"layer_type": "layer type", "module": "module", "op": "ATen op", "phase": "phase"}
    for phase in (phases if args.by != "phase" else [None]):
        rows = g.breakdown(args.by, phase=phase, depth=args.depth)
        print()
        print(f"By {title[args.by]}" + (f" ({phase})" if phase else "") + ":")
        print(render.breakdown_table(rows, title[args.by], macs=args.macs))
    print()
    print(g.summary(macs=args.macs))
    _write_outputs(g, outputs, args.force)
    return 0


def run_profile(args) -> int:
    from tqdm import tqdm

    from fxroof import render
    from fxroof.timing import check_device

    check_device(args.device)  # before tracing: fail fast on a missing GPU
    chip = _chip(args) if args.chip else None
    outputs = _check_outputs(args, trace="to_trace", json="to_json", csv="to_csv")
    g = _analyze(args)
    with tqdm(total=args.warmup + args.repeats, desc="timing", unit="run",
              disable=not sys.stderr.isatty()) as bar:
        report = g.time(device=args.device, repeats=args.repeats, warmup=args.warmup,
                        progress=lambda done, total: bar.update(done - bar.n))
    m = g.model
    if chip is not None:
        g.roofline(chip)
    _print_header(g, f"timed on {report.device}" + (f", roofs of {chip.name}" if chip else ""))
    print(f"Top {args.top or 'all'} nodes by time:")
    print(g.table(top=args.top or None, sort="time_s"))
    for phase in (["forward", "backward"] if m.backward else ["forward"]):
        print()
        print(f"By layer type ({phase}):")
        print(render.breakdown_table(g.breakdown("layer_type", phase=phase, sort="time_s"),
                                     "layer type"))
    print()
    print(g.summary())
    print(render.timing_lines(report.as_dict()))
    if args.chip:
        from fxroof import roofline

        rows = roofline.where_to_look(g.records(), chip, top=10)
        print()
        print(f"Where to look on {chip.name} (time above the roof, largest first):")
        print(render.where_table(rows))
    _write_outputs(g, outputs, args.force)
    return 0


def _chip(args):
    from fxroof.chips import get_chip, load_chips

    return get_chip(args.chip, load_chips(args.chips_file))


def run_predict(args) -> int:
    from fxroof import render, roofline
    from fxroof.chips import get_chip, load_chips

    chips = load_chips(args.chips_file)
    selected = [get_chip(c, chips) for c in args.chip] if args.chip else list(chips.values())
    g = _analyze(args)
    _print_header(g, f"peak memory {render.si(g.memory.peak_bytes, 'B')}")
    rows = []
    for chip in selected:
        try:
            p = roofline.predict(g.records(), chip)
        except FxroofError as e:
            if args.chip:
                raise
            print(f"skipped {chip.id}: {e}")
            continue
        rows.append({"chip": chip, "prediction": p,
                     "fits": chip.capacity is None or g.memory.peak_bytes <= chip.capacity})
    rows.sort(key=lambda r: r["prediction"]["overall"]["predicted_s"])
    print(render.prediction_table(rows))
    print("Predicted time per node = max(FLOPs / peak, bytes / bandwidth), summed; "
          "model intensity = total FLOPs / total bytes.")
    return 0


def run_chips_list(args) -> int:
    import json

    from fxroof import render
    from fxroof.chips import load_chips

    chips = [c for c in load_chips(args.chips_file).values()
             if args.cls is None or c.cls == args.cls]
    if args.json:
        print(json.dumps([c.as_record() for c in chips], indent=1))
    else:
        print(render.chips_table(chips))
    return 0


def run_chips_measure(args) -> int:
    from fxroof import render
    from fxroof.chips import load_chips, parse_chip
    from fxroof.measure import (check_target, datasheet_chip, default_path, measure, save,
                                versus_datasheet)

    target = args.out or default_path("this-gpu" if "cuda" in args.device else "this-cpu")
    check_target(target, args.force)  # refuse before measuring, not after
    entry = measure(args.device, quick=not args.full,
                    progress=lambda message: print(f"measuring {message}", file=sys.stderr))
    path = save(entry, target, force=args.force)
    chip = parse_chip(entry, path)
    print(render.chips_table([chip]))
    known = datasheet_chip(chip.name, load_chips())
    if known is not None:
        print(f"\nmeasured vs datasheet ({known.name}; the matrix peaks of GEMMs PyTorch "
              "dispatches, so fp32 without TF32 is compared with the fp32 figure):")
        print(render.versus_table(versus_datasheet(chip, known)))
    print(f"saved {path}: use --chip {chip.id}")
    return 0


def run_chips_plot(args) -> int:
    from fxroof import plots
    from fxroof.chips import load_chips

    for path in plots.plot_chips_by_class(list(load_chips(args.chips_file).values()), args.out,
                                          args.dtype, overwrite=args.force):
        print(f"wrote {path}")
    return 0


def run_roofline(args) -> int:
    from fxroof.chips import get_chip, load_chips
    from fxroof.roofline_points import plot_roofline

    chips = load_chips(args.chips_file)
    plot_roofline(args.models, [get_chip(c, chips) for c in args.chip], args.out, by=args.by,
                  batches=args.batch, backward=args.backward, dtype=args.dtype,
                  overwrite=args.force)
    print(f"wrote {args.out}")
    return 0


def run_study(args) -> int:
    from fxroof.study import DEFAULT_MODELS, StudyConfig, run_study as study

    for option in ("batch", "train_batch"):
        if any(b < 1 for b in getattr(args, option) or []):
            raise FxroofError(f"--{option.replace('_', '-')} takes positive integers.")
    if args.repeats < 1 or args.warmup < 0:
        raise FxroofError("--repeats must be at least 1 and --warmup at least 0.")
    if not args.report_only and args.models:
        from fxroof.models import build_model

        for model in args.models:  # an unknown name fails now, not after an hour of sweep
            build_model(model)
    config = StudyConfig(models=args.models or list(DEFAULT_MODELS), batches=args.batch or [],
                         devices=args.device, train_batches=args.train_batch or [],
                         warmup=args.warmup, repeats=args.repeats)
    paths = study(config, args.out, force=args.force, report_only=args.report_only)
    print(f"wrote {paths['html']} and {paths['md']}")
    return 0


def run_models(args) -> int:
    from fxroof.models import torchvision_names

    print("\n".join(torchvision_names()))
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except FxroofError as e:
        print(f"fxroof: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fxroof: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
