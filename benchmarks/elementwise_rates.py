"""How fast a GPU runs ATen's contiguous elementwise kernels, by operand count, dtype and size.

    python benchmarks/elementwise_rates.py record --out rates.json [--device cuda]
                                            [--dtypes fp32 bf16 fp16] [--log2-sizes 20 ...]
                                            [--force]
    python benchmarks/elementwise_rates.py summary rates.json

The elementwise class prices a contiguous kernel by its bytes at a fraction of the DRAM
bandwidth. A kept H200 profile (resnet50, batch 256, bf16) had its in-place ReLUs moving
3.06 TB/s where its residual adds moved 4.32 -- as if a kernel reading one tensor had a
ceiling of its own (Little's law: only so many loads in flight). Timed alone, it has none:
on the H200 and the H100 a kernel reading one, two or three tensors moved 0.86-0.93 of the
datasheet bandwidth at 2^26 elements and more, and the profile taken again ran its ReLUs at
3.7-4.2 TB/s (benchmarks/README.md, "GPU: cuDNN's transposes and a convolution's bias").

``record`` (the measurement wants CUDA; cpu only checks the script) times each op of OPS --
nothing but writes, one operand read, two, three; in place and not -- over contiguous
tensors of 2^k elements, each under a CUDA graph of many launches (the time is the
kernels', not the host's launches), and keeps the device kernel's name (its template names
the vector width) from one profiled call; then ATen's eval-mode batch norm and a
convolution's bias add (the broadcast add ATen runs after cuDNN's kernel) over ResNet-50's
and VGG-16's activation shapes, NCHW and channels-last. ``summary`` prints per op and dtype
the time and the bytes moved and read per second at each size.
"""
from __future__ import annotations

import itertools
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import (  # noqa: E402
    device_kernels, read_recorded, record_and_summary_parser, script_main)
from fxroof.device import check_device  # noqa: E402
from fxroof.files import check_writable, write_json  # noqa: E402
from fxroof.validate import positive_int_arg  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# name: (tensors read, tensors written, the call on the operands a, b, c and the output o)
OPS = {
    "fill_": (0, 1, lambda a, b, c, o: a.fill_(1.0)),
    "copy_": (1, 1, lambda a, b, c, o: o.copy_(a)),
    "relu_": (1, 1, lambda a, b, c, o: torch.relu_(a)),
    "relu": (1, 1, lambda a, b, c, o: torch.relu(a)),
    "mul_scalar": (1, 1, lambda a, b, c, o: a * 0.5),
    "sigmoid": (1, 1, lambda a, b, c, o: torch.sigmoid(a)),
    "add_": (2, 1, lambda a, b, c, o: a.add_(b)),
    "add": (2, 1, lambda a, b, c, o: a + b),
    "threshold_backward": (2, 1, lambda a, b, c, o:
                           torch.ops.aten.threshold_backward(a, b, 0.0)),
    "addcmul": (3, 1, lambda a, b, c, o: torch.addcmul(a, b, c)),
}
# ResNet-50's batch-norm inputs and VGG-16's first convolutions' outputs at batch 256:
# (channels, height = width)
NORM_SHAPES = ((64, 224), (128, 112), (64, 112), (256, 56), (128, 28), (512, 28), (1024, 14),
               (2048, 7))
LAYOUTS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}


def _kernel_names(call, dev: torch.device) -> list[str]:
    return [k["name"] for k in device_kernels(call, dev)]


def seconds_per_call(call, dev: torch.device, repeats: int, trials: int = 3) -> float:
    """The median over ``trials`` of one call's time, each trial ``repeats`` calls: on a GPU
    replayed from one CUDA graph between two events, so the host's launches are not in it."""
    if dev.type != "cuda":
        times = []
        for _ in range(trials):
            start = time.perf_counter()
            for _ in range(repeats):
                call()
            times.append((time.perf_counter() - start) / repeats)
        return statistics.median(times)
    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up off the capture: lazy initialisation, allocator
            call()
    torch.cuda.current_stream(dev).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            call()
    graph.replay()
    times = []
    for _ in range(trials):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / repeats)
    del graph
    return statistics.median(times)


def _repeats(elements: int) -> int:
    """Enough calls a graph that a small kernel's graph overhead is spread thin, few enough
    that the largest take a fraction of a second."""
    return max(5, min(200, (1 << 30) // max(elements, 1) // 4))


def record_elementwise(dev, dtypes, log2_sizes, repeats_scale: float) -> list[dict]:
    runs = []
    for dtype_name, op_name in itertools.product(dtypes, OPS):
        reads, writes, op = OPS[op_name]
        dtype = DTYPES[dtype_name]
        for k in log2_sizes:
            n = 1 << k
            a, b = (torch.randn(n, device=dev, dtype=dtype) for _ in range(2))
            c, o = torch.randn(n, device=dev, dtype=dtype), torch.empty(n, device=dev,
                                                                         dtype=dtype)
            b = b.abs() + 0.5 if op_name == "threshold_backward" else b
            repeats = max(1, int(_repeats(n) * repeats_scale))
            seconds = seconds_per_call(lambda: op(a, b, c, o), dev, repeats)
            moved = (reads + writes) * n * a.element_size()
            runs.append({"kind": "elementwise", "op": op_name, "dtype": dtype_name,
                         "elements": n, "reads": reads, "writes": writes,
                         "bytes": moved, "seconds": seconds, "repeats": repeats})
            print(f"{op_name:>18} {dtype_name} 2^{k}: {seconds * 1e6:9.2f} us "
                  f"{moved / seconds / 1e9:8.1f} GB/s", file=sys.stderr, flush=True)
            del a, b, c, o
        middle = 1 << log2_sizes[len(log2_sizes) // 2]
        a, b, c, o = (torch.rand(middle, device=dev, dtype=dtype) + 0.5 for _ in range(4))
        runs[-1]["kernels"] = _kernel_names(lambda: op(a, b, c, o), dev)
        del a, b, c, o
    return runs


def record_per_channel(dev, dtypes, batch: int, repeats_scale: float) -> list[dict]:
    """An eval batch norm, and a convolution's bias add as ATen runs it after cuDNN's kernel
    (``output.add_(bias.reshape(1, C, 1, 1))``, Convolution.cpp), over each NORM_SHAPES
    tensor, NCHW and channels-last: each reads and writes the tensor once."""
    runs = []
    for dtype_name, layout, (channels, size) in itertools.product(dtypes, LAYOUTS, NORM_SHAPES):
        dtype = DTYPES[dtype_name]
        x = torch.randn(batch, channels, size, size, device=dev, dtype=dtype)
        x = x.contiguous(memory_format=LAYOUTS[layout])
        mean, var, weight, bias = (torch.rand(channels, device=dev, dtype=dtype) + 0.5
                                   for _ in range(4))
        calls = {"batch_norm_eval": lambda: F.batch_norm(x, mean, var, weight, bias,
                                                         training=False),
                 "bias_add": lambda: x.add_(bias.reshape(1, channels, 1, 1))}
        for kind, call in calls.items():
            repeats = max(1, int(_repeats(x.numel()) * repeats_scale))
            seconds = seconds_per_call(call, dev, repeats)
            runs.append({"kind": kind, "dtype": dtype_name, "layout": layout,
                         "shape": list(x.shape), "elements": x.numel(),
                         "bytes": 2 * x.numel() * x.element_size(), "seconds": seconds,
                         "repeats": repeats, "kernels": _kernel_names(call, dev)})
            print(f"{kind} {dtype_name} {layout} {tuple(x.shape)}: {seconds * 1e6:9.2f} us",
                  file=sys.stderr, flush=True)
        del x
    return runs


def record(args) -> int:
    dev = check_device(args.device)
    check_writable(args.out, overwrite=args.force)
    scale = 1.0 if dev.type == "cuda" else 0.02  # a CPU only checks the script
    runs = record_elementwise(dev, args.dtypes, sorted(args.log2_sizes), scale)
    runs += record_per_channel(dev, args.dtypes, args.norm_batch, scale)
    properties = torch.cuda.get_device_properties(dev) if dev.type == "cuda" else None
    write_json(args.out, {
        "benchmark": "elementwise_rates", "device": str(dev),
        "device_name": properties.name if properties else "cpu",
        "multiprocessors": properties.multi_processor_count if properties else None,
        "torch": torch.__version__, "runs": runs}, overwrite=args.force)
    return 0


RUN_FIELDS = ("kind", "dtype", "elements", "bytes", "seconds")


def _check_runs(runs: list) -> None:
    for i, run in enumerate(runs):
        lacking = [k for k in RUN_FIELDS if k not in run]
        if lacking:
            raise ValueError(f"run {i} lacks {', '.join(lacking)}")
        for field in ("seconds", "elements", "bytes"):
            value = run[field]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"run {i}'s {field} is not a positive number")


def summary(args) -> int:
    found = read_recorded(args.file, "elementwise_rates", "elementwise_rates.py record --out",
                          "an elementwise_rates file", _check_runs)
    print(f"{found.get('device_name', '?')}, torch {found.get('torch', '?')}: "
          "us, bytes moved per s (GB/s), bytes read per s (GB/s)")
    for run in found["runs"]:
        name = run.get("op") or f"{run['kind']} {run.get('layout', '?')} {run.get('shape')}"
        read = run["bytes"] * run.get("reads", 1) / (run.get("reads", 1) + run.get("writes", 1))
        print(f"{name:>40} {run['dtype']} {run['elements']:>11}: {run['seconds'] * 1e6:10.2f} us "
              f"{run['bytes'] / run['seconds'] / 1e9:8.1f} {read / run['seconds'] / 1e9:8.1f}")
    return 0


def main(argv=None) -> int:
    parser, _, r = record_and_summary_parser(
        __doc__, "time each elementwise op, batch norm and bias add",
        "print a recorded file's rates")
    r.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    r.add_argument("--log2-sizes", type=int, nargs="+", default=[16, 18, 20, 22, 24, 26, 28],
                   choices=range(4, 31), metavar="K", help="tensors of 2^K elements")
    r.add_argument("--norm-batch", type=positive_int_arg, default=256,
                   help="batch of the batch norms and bias adds")
    args = parser.parse_args(argv)
    return record(args) if args.command == "record" else summary(args)


if __name__ == "__main__":
    script_main(main, __file__)
