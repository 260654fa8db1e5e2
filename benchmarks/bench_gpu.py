"""Whole-model step times on a GPU, measured, against fxroof's predicted time on that chip.

    python benchmarks/bench_gpu.py measure --out gpu.json [--models ...] [--batch 1 64 256]
                                   [--train-batch 64] [--precision fp32 bf16] [--force]
    python benchmarks/bench_gpu.py compare gpu.json [gpu2.json ...] --chip h100_sxm
                                   [--chips-file F.yaml] [--json r.json] [--force]

``measure`` (needs CUDA) times what a user's script times, in one process per run:
* inference: ``model(x)`` in eval mode under ``torch.inference_mode()``;
* training: ``F.cross_entropy(model(x), y).backward(); opt.step(); opt.zero_grad()`` in train
  mode, SGD with momentum 0.9 in torch.optim's default implementation for CUDA tensors
  (foreach) -- the step ``fxroof predict --loss cross_entropy --optimizer sgd`` records;
* fp32 (PyTorch's defaults: TF32 for cuDNN convolutions, full fp32 for matmuls) and bf16
  autocast (``--amp bf16``: forward and loss under autocast, parameters fp32).
Each step is timed on the wall clock with the device synchronised at both ends (as
``fxroof.device.Stopwatch`` does), ``--warmup`` untimed steps first; the median is kept.
``torch.backends.cudnn.benchmark`` stays at its default (off), as in a user's first script,
unless ``--cudnn-benchmark`` (as timm's and NVIDIA's scripts run); the file records which,
and ``compare`` predicts with what it records.

``compare`` (no GPU needed: analysis runs on fake tensors for the CUDA target) predicts each
measured run on ``--chip`` with the ideal roofline and the calibrated time model and reports,
per (precision, phase): median and worst |predicted / measured - 1| and Spearman rho per
batch, and how often the measured time falls inside the predicted band. Issue 16's goal for
whole-model GPU step times: median error within 10%, rank correlation >= 0.98.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import script_main  # noqa: E402
from fxroof.device import Stopwatch, check_device  # noqa: E402
from fxroof.files import check_writable, write_json  # noqa: E402
from fxroof.models import build_model, default_inputs  # noqa: E402
from fxroof.roofline import cudnn_search  # noqa: E402
from fxroof.study import DEFAULT_MODELS  # noqa: E402
from fxroof.validate import nonnegative_int_arg, positive_int_arg  # noqa: E402

PRECISIONS = ("fp32", "bf16")
SGD = {"lr": 1e-3, "momentum": 0.9}  # fxroof.step's SGD


def _logits(output) -> torch.Tensor:
    """The class logits (googlenet and inception_v3 return aux logits beside them in train
    mode; the loss, like fxroof.step's, reads the first)."""
    return output if isinstance(output, torch.Tensor) else output[0]


def _median_step(step, dev: torch.device, warmup: int, repeats: int) -> dict:
    for _ in range(warmup):
        step()
    watch = Stopwatch(dev)  # the device synchronised at both ends
    samples = [watch.time(step) for _ in range(repeats)]
    return {"median_s": statistics.median(samples), "min_s": min(samples),
            "max_s": max(samples)}


def _autocast(dev: torch.device, precision: str):
    return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def time_inference(module, x, precision: str, warmup: int, repeats: int) -> dict:
    module.eval()

    def step():
        with torch.inference_mode(), _autocast(x.device, precision):
            module(x)
    return _median_step(step, x.device, warmup, repeats)


def time_training(module, x, precision: str, warmup: int, repeats: int) -> dict:
    module.train()
    opt = torch.optim.SGD(module.parameters(), **SGD)
    y = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)  # fxroof.step's target

    def step():
        with _autocast(x.device, precision):
            loss = F.cross_entropy(_logits(module(x)), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    try:
        return _median_step(step, x.device, warmup, repeats)
    finally:
        module.zero_grad(set_to_none=True)
        del opt


def measure_model(name: str, dev: torch.device, args) -> list[dict]:
    module = build_model(name, device="cpu").to(dev)
    runs = [(phase, precision, batch) for precision in args.precision
            for phase, batches in (("inference", args.batch), ("training", args.train_batch))
            for batch in batches]
    found = []
    for phase, precision, batch in runs:
        (meta,), _ = default_inputs(name, module, batch, None)
        x = torch.randn(meta.shape, device=dev)
        timer = time_inference if phase == "inference" else time_training
        row = {"model": name, "phase": phase, "precision": precision, "batch": batch}
        try:
            row.update(timer(module, x, precision, args.warmup, args.repeats))
        except torch.OutOfMemoryError as e:
            row["error"] = f"out of memory: {str(e).splitlines()[0]}"
        found.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        del x
        _release(dev)
    del module
    _release(dev)
    return found


def _release(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def environment(dev: torch.device) -> dict:
    found = {"device": str(dev), "torch": torch.__version__,
             "host_cpu": platform.processor() or platform.machine(), "host_cpus": os.cpu_count()}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        found.update(gpu=props.name, multiprocessors=props.multi_processor_count,
                     cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                     cudnn_benchmark=torch.backends.cudnn.benchmark,
                     cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
                     matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32)
    return found


def measure(args) -> int:
    dev = check_device(args.device)  # a clear error where CUDA is not available
    check_writable(args.out, overwrite=args.force)  # before minutes of measuring
    start = time.perf_counter()
    with cudnn_search(args.cudnn_benchmark):
        rows = [row for name in args.models for row in measure_model(name, dev, args)]
        found = environment(dev)
    result = {"benchmark": "gpu_step_times", "environment": found,
              "warmup": args.warmup, "repeats": args.repeats,
              "wall_s": round(time.perf_counter() - start, 1), "runs": rows}
    write_json(args.out, result, overwrite=args.force)
    print(f"{len(rows)} runs in {result['wall_s']} s -> {args.out}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    m = actions.add_parser("measure", help="time the models on this machine's GPU")
    m.add_argument("--out", required=True, help="JSON file of the measured runs")
    m.add_argument("--device", default="cuda",
                   help="where to time (cpu only checks the script: the comparison is "
                        "for GPUs)")
    m.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    m.add_argument("--batch", type=positive_int_arg, nargs="+", default=[1, 64, 256])
    m.add_argument("--train-batch", type=positive_int_arg, nargs="+", default=[64])
    m.add_argument("--precision", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    m.add_argument("--warmup", type=nonnegative_int_arg, default=5)
    m.add_argument("--repeats", type=positive_int_arg, default=20)
    m.add_argument("--cudnn-benchmark", action="store_true",
                   help="time with cuDNN's engine search on (torch.backends.cudnn.benchmark)")
    c = actions.add_parser("compare", help="predict the measured runs and report the error")
    c.add_argument("measured", nargs="+",
                   help="JSON files from `measure` (several of one GPU are pooled: each "
                        "run's median over them)")
    c.add_argument("--chip", required=True, help="chip id to predict on")
    c.add_argument("--chips-file", action="append", help="extra chip definitions (YAML)")
    c.add_argument("--json", help="also write every point and the summary here")
    for p in (m, c):
        p.add_argument("--force", action="store_true", help="overwrite an existing output")
    args = parser.parse_args(argv)
    if args.action == "measure":
        return measure(args)
    from benchmarks.gpu_compare import compare  # analysis only; no GPU
    return compare(args)


if __name__ == "__main__":
    script_main(main, __file__)
