"""Eager inference latency, as the study measures it: in this process (``run_latency``) or,
as the study does by default, in a fresh Python process per (model, batch)
(``measure_latency``).

Why a process of its own: on a CPU, how fast a model runs depends on what the process ran
before it. glibc's allocator raises its mmap and trim thresholds as large blocks are freed
(mallopt(3)), so a process that has already run bigger models keeps more freed pages and
faults fewer new ones in: mobilenet_v2 at batch 8 took 0.124 s after other models and
0.198 s alone, the kernel's page-fault time being most of the gap (benchmarks/README.md,
"Page faults, replayed"). A user times their model in their own script; the time model's
page-fault pass (fxroof.page_faults) replays exactly that -- one process running the step
again and again -- so the measurement it is checked against must be taken the same way.

The child builds the model by name with random weights (as the parent would), runs
``run_latency`` and prints its result as one JSON line.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import torch
from torch.utils import _pytree as pytree

from fxroof.device import (Stopwatch, caching_allocator_env, check_device, host_allocator,
                           random_like, repeat)
from fxroof.errors import FxroofError
from fxroof.models import build_model, default_inputs
from fxroof.target import CACHING, GLIBC
from fxroof.timers import summarize

FRESH, SHARED = "fresh", "shared"  # the process a latency was measured in


def real_inputs(inputs, dev):
    """Real (random) tensors of the example inputs' shapes and dtypes on the device."""
    return pytree.tree_map_only(torch.Tensor, lambda t: random_like(t.shape, t.dtype, dev),
                                inputs)


def run_latency(module: torch.nn.Module, inputs, device: str, warmup: int, repeats: int) -> dict:
    """``inputs``: the model's example (args, kwargs), tensors used for shape and dtype."""
    dev = check_device(device)
    module = module.to(dev).eval()
    args, kwargs = real_inputs(inputs, dev)
    watch = Stopwatch(dev)
    with torch.inference_mode():
        samples = repeat(lambda: watch.time(lambda: module(*args, **kwargs)), warmup, repeats)
    summary = summarize(samples)
    return {"median_s": summary.median_s, "q1_s": summary.q1_s, "q3_s": summary.q3_s,
            "samples_s": samples, "warmup": warmup}


def in_fresh_process(entry: str, request: dict, what: str, allocator: str = GLIBC) -> dict:
    """Run ``python -m entry request`` and return the one JSON line it prints last, marked as
    measured in a fresh process; ``{"error": ...}`` naming ``what`` (what the child measures)
    if it failed. ``allocator``: CACHING runs the child with tcmalloc preloaded; GLIBC with
    the environment this process has."""
    # the child imports what this process can (a user's package.module:callable model)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    if allocator == CACHING:
        env = caching_allocator_env(env)
    # cuDNN's engine search, as this process has it (a study's or a command's setting)
    request = {**request, "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}
    proc = subprocess.run([sys.executable, "-m", entry, json.dumps(request)],
                          capture_output=True, text=True, env=env)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == -signal.SIGKILL:  # what Linux's OOM killer sends, without a word
        return {"error": f"the process measuring {what} was killed (SIGKILL), most often by "
                         "the kernel's OOM killer: the step needs more memory than was free. "
                         "Try a smaller batch."}
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"the process measuring {what} failed (exit status "
                         f"{proc.returncode}): {last}"}
    result = json.loads(lines[-1])
    return result if "error" in result else {**result, "process": FRESH}


def measure_latency(model: str, batch: int, device: str, warmup: int, repeats: int,
                    allocator: str = GLIBC) -> dict:
    """run_latency's result, from a new interpreter (running ``allocator``); ``{"error": ...}``
    if it failed."""
    # -m of a module outside fxroof.study: the child imports torch, torchvision and this,
    # not the study's report and plotting stack (about 11 s a child -> 7 s on 2 cores)
    return in_fresh_process("fxroof.latency", {"model": model, "batch": batch, "device": device,
                                               "warmup": warmup, "repeats": repeats},
                            f"the latency of {model} at batch {batch}", allocator)


def error_record(e: Exception) -> dict:
    """A failed measurement as the study records it: fxroof's own message whole; anything
    else (OOM, a kernel's refusal, a model's own ValueError) by type and first line."""
    if isinstance(e, FxroofError):
        return {"error": str(e)}
    detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return {"error": f"{type(e).__name__}: {detail}"}


def _child(request: dict) -> dict:
    try:
        module = build_model(request["model"], device="cpu")
        inputs = default_inputs(request["model"], module, request["batch"], None)
        return run_latency(module, inputs, request["device"], request["warmup"],
                           request["repeats"])
    except Exception as e:  # recorded, as in the study's own process
        return error_record(e)


def child_main(child) -> None:
    """A fresh process's entry point: ``child``'s result for the request in argv, printed as
    one JSON line; a measurement with the malloc this process ran (fxroof.device.
    host_allocator: what it was taken under, whatever the parent asked for)."""
    request = json.loads(sys.argv[1])
    torch.backends.cudnn.benchmark = request.get("cudnn_benchmark", False)
    result = child(request)
    if "error" not in result:
        result = {**result, "host_allocator": host_allocator()}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    child_main(_child)
