"""What the study measures on real models besides eager inference (fxroof.latency): the
training step and torch.compile's latency -- in this process (``run_train``,
``run_compiled``) or, as the study does by default, in a fresh Python process per (model,
batch) (``measure``).

A fresh process for the same reason as the inference latency: on a CPU, how fast a step runs
depends on what the process ran before it (glibc's allocator keeps more freed pages once
larger models have run: fxroof.latency), and the time model's page-fault pass replays a
process that runs this model's step only. The child builds the model by name with random
weights, runs the task and prints its result as one JSON line. It imports fxroof's analysis
(the training graph, the compiled view), not the study's report and plotting stack.
"""
from __future__ import annotations

import torch

from fxroof.analysis import analyze
from fxroof.device import Stopwatch, repeat
from fxroof.latency import child_main, error_record, in_fresh_process, real_inputs
from fxroof.models import build_model, default_inputs
from fxroof.target import GLIBC
from fxroof.timers import summarize

TRAIN, COMPILED = "train", "compiled"


def run_train(module: torch.nn.Module, model: str, inputs, device: str, warmup: int,
              repeats: int) -> dict:
    """The timing pass over the training graph (every forward and backward node) and the
    eager forward/backward step beside it -- timed first, so that in a fresh process it is
    the step a user's own loop runs (after the node runs, a CPU step faults no pages in)."""
    args, kwargs = inputs
    g = analyze(module, *args, kwargs=kwargs, backward=True, name=model)
    timing = g.time(device, repeats=repeats, warmup=warmup, progress=False,  # the sweep's bar
                    eager_first=True)
    return {"timing": timing.as_dict(),
            "layer_types": {p: g.breakdown("layer_type", phase=p, sort="time_s")
                            for p in ("forward", "backward")}}


def run_compiled(module: torch.nn.Module, model: str, batch: int, inputs, warmup: int,
                 repeats: int, allocator: str = GLIBC, freeze: bool = False) -> dict:
    """The compiled view's kernels (their records: page faults as ``allocator`` takes them)
    and totals, and torch.compile's measured latency on the CPU (after its compile, not
    timed); ``freeze``: both with Inductor's freezing, which applies when the compile runs,
    at the first call."""
    from torch._inductor import config as inductor_config  # 2 s: only when compiling
    view = analyze(model, batch=batch, compiled=True, freeze=freeze, allocator=allocator)
    args, kwargs = real_inputs(inputs, torch.device("cpu"))
    torch._dynamo.reset()
    compiled = torch.compile(module.eval())
    watch = Stopwatch(torch.device("cpu"))
    with inductor_config.patch(freezing=freeze), torch.inference_mode():
        compiled(*args, **kwargs)  # the compile itself
        samples = repeat(lambda: watch.time(lambda: compiled(*args, **kwargs)), warmup,
                         repeats)
    torch._dynamo.reset()
    return {"totals": view.totals()["forward"], "kernels": len(view.records()),
            "records": view.records(), "median_s": summarize(samples).median_s,
            "frozen": freeze}


def measure(task: str, model: str, batch: int, device: str, warmup: int, repeats: int,
            allocator: str = GLIBC, freeze: bool = False) -> dict:
    """``task``'s result (TRAIN or COMPILED, ``freeze``: frozen) from a new interpreter
    running ``allocator``; ``{"error": ...}`` if it failed."""
    return in_fresh_process("fxroof.measured", {"task": task, "model": model, "batch": batch,
                                                "device": device, "warmup": warmup,
                                                "repeats": repeats, "allocator": allocator,
                                                "freeze": freeze},
                            f"the {task} step of {model} at batch {batch}", allocator)


def _child(request: dict) -> dict:
    try:
        module = build_model(request["model"], device="cpu")
        inputs = default_inputs(request["model"], module, request["batch"], None)
        if request["task"] == TRAIN:
            return run_train(module, request["model"], inputs, request["device"],
                             request["warmup"], request["repeats"])
        return run_compiled(module, request["model"], request["batch"], inputs,
                            request["warmup"], request["repeats"], request["allocator"],
                            request["freeze"])
    except Exception as e:  # recorded, as in the study's own process
        return error_record(e)


if __name__ == "__main__":
    child_main(_child)
