"""Where an eager transformers decode step's host time goes, on a GPU.

    OUT=folder python benchmarks/decode_host_probe.py

Needs torch and transformers only. For Llama-3.2-1B-shaped models of 2 and 16 layers (random
BF16 weights), a KV cache of 4,000 tokens: the wall time of a decode step and of the same
one-token forward without a cache, the device syncs a step makes
(torch.cuda.set_sync_debug_mode), cProfile's top functions and torch.profiler's top host ops
per step, and the host's bare per-op issue rate; JSON and text into $OUT. What it found on
the H200 (2026-11-28; benchmarks/measured/decode/h200-decode-host-probe.json and the two
h200-torchprof-decode-*.txt): cuDNN attention builds a plan for each new key length, ~37 ms
on the host (fxroof.pipeline.CUDNN_PLAN_BUILD_S). The 16-layer model ran second, over the
lengths the 2-layer one had built plans for, so its steps show the plans cached.
"""
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
import traceback
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import decode_probe as dp  # noqa: E402

OUT = dp.OUT
RESULT = {"torch": torch.__version__}


def walls(fn, steps=20):
    for _ in range(3):
        fn()
    out = []
    for _ in range(steps):
        dp.sync()
        t = time.perf_counter()
        fn()
        dp.sync()
        out.append(time.perf_counter() - t)
    return {"median_s": statistics.median(out), "min_s": min(out), "max_s": max(out)}


def syncs(fn):
    if dp.DEV != "cuda":
        return []
    seen = []
    old = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        stack = [f for f in traceback.format_stack()[:-2] if "site-packages" in f][-4:]
        seen.append({"message": str(message)[:200], "stack": stack})
    warnings.showwarning = show
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = old
    return seen


def text_profile(fn, name):
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    dp.sync()
    profiler.disable()
    buffer = io.StringIO()
    stats = pstats.Stats(profiler, stream=buffer)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(30)
    with open(os.path.join(OUT, f"cprofile_{name}.txt"), "w") as f:
        f.write(buffer.getvalue())
    if dp.DEV == "cuda":
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            dp.sync()
        with open(os.path.join(OUT, f"torchprof_{name}.txt"), "w") as f:
            f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))


@torch.no_grad()
def decode(layers: int):
    fields = dict(dp.LLAMA_3_2_1B, num_hidden_layers=layers)
    model = dp.build(fields)
    if dp.SMALL:
        fields["num_hidden_layers"] = layers
    vocab = model.config.vocab_size
    past = 62 if dp.SMALL else 4000
    ids = torch.randint(0, vocab, (1, past), device=dp.DEV)
    cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
    token = torch.randint(0, vocab, (1, 1), device=dp.DEV)

    def step():
        model(input_ids=token, past_key_values=cache, use_cache=True)

    def step_no_cache():
        model(input_ids=token, use_cache=False)
    row = {"layers": len(model.model.layers), "decode": walls(step),
           "no_cache": walls(step_no_cache), "syncs": syncs(step)}
    text_profile(step, f"decode_L{row['layers']}")
    text_profile(step_no_cache, f"nocache_L{row['layers']}")
    print(row["layers"], "layers: decode", row["decode"], "no cache", row["no_cache"],
          "syncs", len(row["syncs"]), flush=True)
    return row


def bare_ops():
    x = torch.zeros(1024, device=dp.DEV)
    w = torch.zeros(64, 64, device=dp.DEV)
    v = torch.zeros(1, 64, device=dp.DEV)
    out = {}
    for name, fn in [("add_", lambda: x.add_(1)), ("linear", lambda: F.linear(v, w)),
                     ("cat", lambda: torch.cat([x, x]))]:
        dp.sync()
        t = time.perf_counter()
        for _ in range(2000):
            fn()
        dp.sync()
        out[name] = (time.perf_counter() - t) / 2000
    print("bare ops (s per op):", out, flush=True)
    return out


def main():
    if dp.DEV == "cuda":
        import transformers
        RESULT["transformers"] = transformers.__version__
    RESULT["bare_ops"] = bare_ops()
    RESULT["models"] = [decode(2), decode(16)]
    RESULT["bare_ops_after"] = bare_ops()
    with open(os.path.join(OUT, "host_probe.json"), "w") as f:
        json.dump(RESULT, f, indent=1)


if __name__ == "__main__":
    main()
