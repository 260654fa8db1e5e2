"""Which kernels a GPU runs for one convolution, by layout, precision and cuDNN's search.

    python benchmarks/conv_kernels.py record --out kernels.json [--device cuda]
                                      [--batch 64 ...] [--shapes NAME ... | --pointwise]
                                      [--dtypes fp32 bf16] [--layouts nchw channels_last]
                                      [--search off on] [--force]
    python benchmarks/conv_kernels.py summary kernels.json
    python benchmarks/conv_kernels.py transposes kernels.json [...] [--multiprocessors N]

The time model prices an NCHW convolution on tensor cores (TF32, BF16, FP16) with the NHWC
transposes cuDNN runs around its kernel (fxroof.hidden_bytes.transpose_bytes). Whole-node
times cannot say which convolutions pay them; kernel names can: cuDNN's layout changes are
kernels of their own (``nchwToNhwcKernel``, ``nhwcToNchwKernel``).

``record`` (the measurement wants CUDA; cpu only checks the script: it records ATen's ops,
not kernels) runs each of ResNet-50's, ResNeXt's and VGG-16's convolution kinds (SHAPES: stem, 1x1
up and down, strided 1x1, 3x3, grouped 3x3, at 224x224 to 7x7) in fp32 (cuDNN's TF32, on by
default) and bf16 (or fp16), NCHW and channels-last, with torch.backends.cudnn.benchmark off and on,
forward and backward (input and weight gradients), and keeps every device kernel of one
call under torch.profiler -- name and time (us) -- after ``--warmup`` calls (the search, if
on, runs in them; the gradients are cleared before the profiled backward, so it holds no
accumulation). ``--pointwise`` takes instead every 1x1 convolution of ResNet-50's
bottlenecks at 56x56 to 7x7 (POINTWISE_SWEEP), where cuDNN's choice of kernel depends on
the size. ``summary`` prints per convolution the kernels' total time and the share of it
that went to layout changes. ``transposes`` fits the time an element of those layout
changes (fxroof.launch_geometry.TRANSPOSE_ELEMENT_S) over files that record them.
"""
from __future__ import annotations

import itertools
import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import (  # noqa: E402
    device_kernels, read_recorded, record_and_summary_parser, script_main)
from fxroof.device import check_device  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import check_writable, write_json  # noqa: E402
from fxroof.roofline import cudnn_search  # noqa: E402
from fxroof.validate import positive_int_arg  # noqa: E402
from op_costs.conv import NARROWEST_TENSOR_CORE_CHANNELS  # noqa: E402

# name: (input channels, output channels, input size, kernel, stride, groups), padding k // 2
SHAPES = {
    "stem7x7": (3, 64, 224, 7, 2, 1),
    "stem3x3": (3, 64, 224, 3, 1, 1),     # VGG-16's
    "c3_224": (64, 64, 224, 3, 1, 1),     # VGG-16's first stages
    "c3_112": (128, 128, 112, 3, 1, 1),
    "pw56_up": (64, 256, 56, 1, 1, 1),
    "pw56_down": (256, 64, 56, 1, 1, 1),
    "pw56_s2": (256, 512, 56, 1, 2, 1),
    "pw7_up": (512, 2048, 7, 1, 1, 1),
    "pw7_down": (2048, 512, 7, 1, 1, 1),
    "c3_56": (64, 64, 56, 3, 1, 1),
    "c3_14": (256, 256, 14, 3, 1, 1),
    "c3_7": (512, 512, 7, 3, 1, 1),
    "g3_56": (128, 128, 56, 3, 1, 32),
    "g3_7": (1024, 1024, 7, 3, 1, 32),
}
# 1x1 convolutions at every size, with the channels of ResNet-50's bottlenecks (in, out)
POINTWISE_SWEEP = {f"pw{size}_{cin}to{cout}": (cin, cout, size, 1, 1, 1)
                   for size in (7, 14, 28, 56)
                   for cin, cout in ((64, 256), (256, 64), (256, 1024), (1024, 256),
                                     (512, 2048), (2048, 512))}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
LAYOUTS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}
LAYOUT_KERNELS = ("nchwtonhwc", "nhwctonchw")  # cuDNN's transposes, lower-cased


def record_one(shape: tuple, batch: int, dtype, layout, dev: torch.device, warmup: int,
               input_gradient: bool = True) -> dict:
    cin, cout, size, k, stride, groups = shape
    x = torch.randn(batch, cin, size, size, device=dev, dtype=dtype)
    w = torch.randn(cout, cin // groups, k, k, device=dev, dtype=dtype) * 0.01
    x, w = (t.contiguous(memory_format=layout) for t in (x, w))
    x.requires_grad_(input_gradient)  # a network's first layer computes no input gradient
    w.requires_grad_()

    def forward():
        return F.conv2d(x, w, stride=stride, padding=k // 2, groups=groups)
    grad = torch.randn_like(forward())
    for _ in range(warmup):
        forward().backward(grad)
    forward_kernels = device_kernels(forward, dev)
    y = forward()
    x.grad = w.grad = None  # a fresh gradient, as a training step's: no accumulating add
    backward_kernels = device_kernels(lambda: y.backward(grad), dev)
    return {"forward": forward_kernels, "backward": backward_kernels}


def record(args) -> int:
    dev = check_device(args.device)
    check_writable(args.out, overwrite=args.force)
    shapes = POINTWISE_SWEEP if args.pointwise else SHAPES
    names = list(shapes) if args.pointwise or not args.shapes else args.shapes
    unknown = [s for s in names if s not in shapes]
    if unknown:
        raise FxroofError(f"Unknown shape(s) {', '.join(unknown)}: choose from "
                          f"{', '.join(shapes)}.")
    runs = []
    for batch, name, dtype, layout, search in itertools.product(
            args.batch, names, args.dtypes, args.layouts, args.search):
        with cudnn_search(search == "on"):
            found = record_one(shapes[name], batch, DTYPES[dtype], LAYOUTS[layout],
                               dev, args.warmup, not args.no_input_gradient)
        runs.append({"shape": name, "batch": batch, "dtype": dtype, "layout": layout,
                     "searched": search == "on",
                     "input_gradient": not args.no_input_gradient, **found})
        print(f"{name} b{batch} {dtype} {layout} search={search}: "
              f"{sum(k['us'] for k in found['forward']):.1f} / "
              f"{sum(k['us'] for k in found['backward']):.1f} us", file=sys.stderr, flush=True)
    write_json(args.out, {"benchmark": "conv_kernels", "device": str(dev),
                          "device_name": torch.cuda.get_device_name(dev)
                          if dev.type == "cuda" else "cpu",
                          "torch": torch.__version__,
                          "cudnn": torch.backends.cudnn.version(),
                          "multiprocessors": torch.cuda.get_device_properties(dev)
                          .multi_processor_count if dev.type == "cuda" else None,
                          "shapes": {n: shapes[n] for n in names}, "runs": runs},
               overwrite=args.force)
    return 0


def layout_share(kernels: list[dict]) -> float:
    """The share of the kernels' time that went to cuDNN's layout changes."""
    total = sum(k["us"] for k in kernels)
    moved = sum(k["us"] for k in kernels if any(t in k["name"].lower() for t in LAYOUT_KERNELS))
    return moved / total if total else 0.0


RUN_FIELDS = ("shape", "dtype", "layout", "searched", "forward", "backward")


def _check_runs(runs: list) -> None:
    for i, run in enumerate(runs):
        lacking = [k for k in RUN_FIELDS if k not in run]
        if lacking:
            raise ValueError(f"run {i} lacks {', '.join(lacking)}")
        for phase in ("forward", "backward"):
            if not all(isinstance(k, dict) and isinstance(k.get("name"), str)
                       and isinstance(k.get("us"), (int, float)) for k in run[phase]):
                raise ValueError(f"run {i}'s {phase} kernels are not named times")


def read_kernels(path: str) -> dict:
    """The runs a `record` file holds, or a clear error naming what is wrong with it."""
    found = read_recorded(path, "conv_kernels", "conv_kernels.py record --out",
                          "a conv_kernels file", _check_runs)
    return {"device_name": "?", "torch": "?", "cudnn": "?", **found}


def summary(args) -> int:
    found = read_kernels(args.file)
    print(f"{found['device_name']}, torch {found['torch']}, cuDNN {found['cudnn']}: "
          "kernels' us (share in layout changes) and the main kernel")
    for run in found["runs"]:
        cells = []
        for phase in ("forward", "backward"):
            kernels = run[phase]
            main = max(kernels, key=lambda k: k["us"])["name"][:60] if kernels else "-"
            cells.append(f"{phase} {sum(k['us'] for k in kernels):8.1f} "
                         f"({layout_share(kernels):4.0%}) {main}")
        print(f"{run['shape']:>14} b{run.get('batch', found.get('batch'))} {run['dtype']} "
              f"{run['layout']:>13} "
              f"{'searched' if run['searched'] else 'default ':8} | " + " | ".join(cells))
    return 0


def _output_size(size: int, k: int, stride: int) -> int:
    return (size + 2 * (k // 2) - k) // stride + 1


def transpose_times(found: dict, min_elements: float) -> list[dict]:
    """Each forward NCHW convolution's input and output transposes of ``min_elements`` or
    more, a narrow one's (a stem's) left out: {"dtype", "tensor", "elements", "us"}. The
    largest ``nchwToNhwc`` kernel of a forward is its input's (the weights' is another,
    smaller for every such size), its ``nhwcToNchw`` its output's; a forward with no
    ``nhwcToNchw`` writes NCHW itself."""
    times = []
    for run in found["runs"]:
        if run["layout"] != "nchw" or run["shape"] not in found["shapes"]:
            continue
        cin, cout, size, k, stride, _ = found["shapes"][run["shape"]]
        if cin < NARROWEST_TENSOR_CORE_CHANNELS:
            continue  # a stem: off the tensor cores, priced with no transposes (op_costs.conv)
        batch = run.get("batch", found.get("batch"))
        out = _output_size(size, k, stride)
        for tensor, kernel, elements in (("input", "nchwtonhwc", batch * cin * size * size),
                                         ("output", "nhwctonchw", batch * cout * out * out)):
            kernels = [k for k in run["forward"] if kernel in k["name"].lower()]
            if kernels and elements >= min_elements:
                times.append({"dtype": run["dtype"], "tensor": tensor, "elements": elements,
                              "us": max(k["us"] for k in kernels)})
    return times


def _transposes_of(path: str, args) -> tuple:
    """(the record, its GPU's SMs, its transposes' times) of one file, or a clear error."""
    found = read_kernels(path)
    units = found.get("multiprocessors") or args.multiprocessors
    if not units:
        raise FxroofError(f"'{path}' does not record its GPU's SMs: give --multiprocessors.")
    try:
        return found, units, transpose_times(found, args.min_elements)
    except (KeyError, ValueError, TypeError) as e:
        raise FxroofError(f"'{path}' does not give its convolutions' shapes (6 numbers each) "
                          f"and its runs' batches ({type(e).__name__}: {e}): give the JSON "
                          "file that `conv_kernels.py record --out` wrote.") from None


def transposes(args) -> int:
    """Per file and dtype, an SM's time per element of cuDNN's transposes; the 16-bit ones'
    median over every file is launch_geometry.TRANSPOSE_ELEMENT_S's fit."""
    import numpy as np

    from fxroof.launch_geometry import TRANSPOSE_ELEMENT_S

    files = {path: _transposes_of(path, args) for path in args.files}  # all read, then output
    pooled: dict = {}  # GPU name: its 16-bit kernels' ns
    print("ns an element per SM of cuDNN's NCHW <-> NHWC kernels (forward convolutions' "
          f"tensors of {args.min_elements:.3g} elements or more): median (p10-p90), bytes/s")
    for path, (found, units, times) in files.items():
        for dtype in DTYPES:
            ns = [t["us"] * 1e3 * units / t["elements"] for t in times if t["dtype"] == dtype]
            if not ns:
                continue
            if dtype != "fp32":
                pooled.setdefault(found["device_name"], []).extend(ns)
            moved = [2 * t["elements"] * DTYPES[dtype].itemsize / (t["us"] * 1e-6)
                     for t in times if t["dtype"] == dtype]
            p10, p50, p90 = np.percentile(ns, [10, 50, 90])
            print(f"{os.path.basename(path):>38} {dtype}: {len(ns):3d} kernels  {p50:.3f} "
                  f"({p10:.3f}-{p90:.3f}) ns  {np.median(moved) / 1e12:.2f} TB/s")
    every = [ns for kernels in pooled.values() for ns in kernels]
    if not every:
        print(f"No 16-bit NCHW forward's transposes of {args.min_elements:.3g} elements or more "
              "in these files: nothing to fit (record with --layouts nchw --dtypes bf16).")
    else:
        print(f"16-bit, every file: {np.median(every):.3f} ns an element per SM "
              f"(launch_geometry.TRANSPOSE_ELEMENT_S: {TRANSPOSE_ELEMENT_S * 1e9:.3f})")
    for gpu, kernels in pooled.items():  # each GPU left out: the others' fit on its kernels
        others = [ns for other, k in pooled.items() if other != gpu for ns in k]
        if others:
            ratios = np.array(kernels) / np.median(others)
            print(f"{gpu} left out: the others' fit {np.median(others):.3f} ns; its kernels "
                  f"measured / fitted {np.median(ratios):.2f} "
                  f"({np.percentile(ratios, 10):.2f}-{np.percentile(ratios, 90):.2f})")
    return 0


def main(argv=None) -> int:
    parser, sub, r = record_and_summary_parser(__doc__, "profile each convolution's kernels",
                                               "print a recorded file's kernels")
    r.add_argument("--batch", type=positive_int_arg, nargs="+", default=[64])
    which = r.add_mutually_exclusive_group()
    which.add_argument("--shapes", nargs="+", help=f"of {', '.join(SHAPES)} (default: all)")
    which.add_argument("--pointwise", action="store_true",
                       help="every 1x1 convolution of POINTWISE_SWEEP instead")
    r.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["fp32", "bf16"])
    r.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=list(LAYOUTS))
    r.add_argument("--search", nargs="+", choices=("off", "on"), default=["off", "on"],
                   help="cuDNN's engine search (torch.backends.cudnn.benchmark)")
    r.add_argument("--no-input-gradient", action="store_true",
                   help="backwards of the weight gradient alone, as a network's first layer's")
    r.add_argument("--warmup", type=positive_int_arg, default=3)
    t = sub.add_parser("transposes", help="fit cuDNN's transposes' time an element")
    t.add_argument("files", nargs="+")
    t.add_argument("--multiprocessors", type=positive_int_arg,
                   help="the GPU's SMs, for a file that does not record them")
    t.add_argument("--min-elements", type=float, default=1e7,
                   help="leave out smaller tensors, whose launch is much of their time")
    args = parser.parse_args(argv)
    return {"record": record, "summary": summary, "transposes": transposes}[args.command](args)


if __name__ == "__main__":
    script_main(main, __file__)
