"""Decode-step measurements on one GPU, for fxroof's time model (benchmarks/bench_decode.py).

    OUT=folder python benchmarks/decode_probe.py [products] [attention] [model_steps]

Needs torch and transformers only (it runs where fxroof is not installed). Times, in BF16:
matrix-vector and few-row products over LLM-sized weights (kernel time by CUDA graph replay
over distinct weights, so no product reads an operand from a 60 MB L2), SDPA at one query over
long KV caches, and whole eager transformers Llama steps (random weights): decode after a
cache of P tokens, and prefill. Writes $OUT/decode_probe.json after each section. SMALL=1
runs tiny sizes on the CPU to check the script. The H200's run, 2026-11-28 (torch 2.11+cu130,
transformers 5.17): benchmarks/measured/decode/h200-decode-probe.json.
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SMALL = os.environ.get("SMALL") == "1"
DEV = "cpu" if SMALL else "cuda"
OUT = os.environ.get("OUT", "/tmp/out")
BF16 = torch.bfloat16
RESULT = {"torch": torch.__version__, "small": SMALL}


def save():
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "decode_probe.json")
    with open(path + ".tmp", "w") as f:
        json.dump(RESULT, f, indent=1)
    os.replace(path + ".tmp", path)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def graph_seconds(fn, calls: int, replays: int = 20) -> float:
    """Seconds of one call of fn, by replaying a CUDA graph of `calls` calls (no host cost)."""
    if DEV != "cuda":
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) / calls
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    sync()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        sync()
        times.append(start.elapsed_time(end) / 1e3 / replays / calls)
    del graph
    return statistics.median(times)


def copies_for(nbytes: int) -> int:
    """Distinct operands to cycle through so that the set is at least 6x a 60 MB L2."""
    return 2 if SMALL else max(4, -(-360_000_000 // nbytes))


def products():
    shapes = [(1, 4096, 4096), (1, 4096, 11008), (1, 11008, 4096), (1, 4096, 14336),
              (1, 14336, 4096), (1, 4096, 1024), (1, 4096, 32000), (1, 4096, 128256),
              (1, 8192, 28672), (1, 28672, 8192)]
    shapes += [(m, 4096, 11008) for m in (2, 4, 8, 16, 32, 64, 128, 256)]
    shapes += [(m, 11008, 4096) for m in (8, 64)]
    if SMALL:
        shapes = [(m, k // 64, n // 64) for m, k, n in shapes]
    points = []
    for dtype in (BF16, torch.float32):
        for m, k, n in (shapes if dtype == BF16 else shapes[:3]):
            size = k * n * (2 if dtype == BF16 else 4)
            ws = [torch.randn(n, k, device=DEV, dtype=dtype) for _ in range(copies_for(size))]
            x = torch.randn(m, k, device=DEV, dtype=dtype)

            def run(ws=ws, x=x):
                for w in ws:
                    F.linear(x, w)
            s = graph_seconds(run, len(ws))
            points.append({"m": m, "k": k, "n": n, "dtype": str(dtype), "seconds": s,
                           "weight_bytes": size, "GBps": size / s / 1e9})
            print(f"linear {m}x{k}x{n} {dtype}: {s * 1e6:.1f} us {size / s / 1e9:.0f} GB/s",
                  flush=True)
            del ws, x
    RESULT["products"] = points
    save()


def attention():
    points = []
    for batch, kv_heads, past, masked in [(1, 32, 1024, False), (1, 32, 4096, False),
                                          (1, 32, 16384, False), (1, 32, 32768, False),
                                          (1, 8, 4096, False), (1, 8, 32768, False),
                                          (8, 32, 4096, False), (8, 8, 4096, False),
                                          (8, 32, 16384, False), (1, 32, 4096, True),
                                          (8, 32, 4096, True)]:
        if SMALL:
            past //= 64
        q = torch.randn(batch, 32, 1, 128, device=DEV, dtype=BF16)
        nbytes = 2 * batch * kv_heads * past * 128 * 2
        kvs = [(torch.randn(batch, kv_heads, past, 128, device=DEV, dtype=BF16),
                torch.randn(batch, kv_heads, past, 128, device=DEV, dtype=BF16))
               for _ in range(copies_for(nbytes))]
        mask = torch.ones(batch, 1, 1, past, device=DEV, dtype=torch.bool) if masked else None

        def run(q=q, kvs=kvs, mask=mask, gqa=kv_heads != 32):
            for k, v in kvs:
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        s = graph_seconds(run, len(kvs))
        points.append({"batch": batch, "heads": 32, "kv_heads": kv_heads, "past": past,
                       "head_dim": 128, "masked": masked, "seconds": s, "kv_bytes": nbytes,
                       "GBps": nbytes / s / 1e9, "kernels": kernel_names(lambda: run())})
        print(f"sdpa b{batch} kv{kv_heads} past {past} mask {masked}: {s * 1e6:.1f} us "
              f"{nbytes / s / 1e9:.0f} GB/s {points[-1]['kernels']}", flush=True)
        del kvs
    RESULT["attention"] = points
    save()


def kernel_names(fn) -> dict:
    """Device kernels fn launches: name -> (count, total device seconds)."""
    if DEV != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync()
    names = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            name = event.name[:120]
            count, total = names.get(name, (0, 0.0))
            names[name] = (count + 1, total + event.time_range.elapsed_us() / 1e6)
    return names


LLAMA_2_7B = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, vocab_size=32000)
LLAMA_3_1_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, vocab_size=128256)
LLAMA_3_2_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                    tie_word_embeddings=True)
MODELS = {"Llama-2-7B": LLAMA_2_7B, "Llama-3.1-8B": LLAMA_3_1_8B, "Llama-3.2-1B": LLAMA_3_2_1B}


def build(fields: dict):
    from transformers import LlamaConfig, LlamaForCausalLM
    if SMALL:
        fields = dict(fields, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=fields[
                          "num_key_value_heads"] // 8, vocab_size=1000)
    config = LlamaConfig(max_position_embeddings=40000, attn_implementation="sdpa", **fields)
    torch.set_default_dtype(BF16)
    with torch.device(DEV):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    return model.eval()


def step_summary(fn, steps: int) -> dict:
    walls = []
    for _ in range(steps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        walls.append(time.perf_counter() - t)
    kernels = kernel_names(fn)
    busy = sum(total for _, total in kernels.values())
    launches = sum(count for count, _ in kernels.values())
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:25]
    return {"wall_s": statistics.median(walls), "wall_min_s": min(walls),
            "kernel_busy_s": busy, "kernels": launches, "top_kernels": top}


@torch.no_grad()
def model_steps():
    runs = []
    plan = [("Llama-2-7B", [(1, 4000), (8, 4000), (1, 16000)], [(1, 2048)]),
            ("Llama-3.1-8B", [(1, 4000), (8, 4000)], [(1, 2048)]),
            ("Llama-3.2-1B", [(1, 4000), (16, 4000)], [(4, 2048)])]
    for name, decodes, prefills in plan:
        model = build(MODELS[name])
        vocab = model.config.vocab_size
        for batch, seq in prefills:
            seq = seq // 64 if SMALL else seq
            ids = torch.randint(0, vocab, (batch, seq), device=DEV)
            summary = step_summary(lambda: model(input_ids=ids, use_cache=False), 5)
            runs.append(dict(model=name, kind="prefill", batch=batch, seq=seq, **summary))
            print(name, "prefill", batch, seq, f"{summary['wall_s'] * 1e3:.2f} ms "
                  f"busy {summary['kernel_busy_s'] * 1e3:.2f} ms", flush=True)
        for batch, past in decodes:
            past = past // 64 if SMALL else past
            ids = torch.randint(0, vocab, (batch, past), device=DEV)
            cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
            token = torch.randint(0, vocab, (batch, 1), device=DEV)
            for _ in range(3):  # warm: the cache grows by one token a step
                model(input_ids=token, past_key_values=cache, use_cache=True)
            summary = step_summary(
                lambda: model(input_ids=token, past_key_values=cache, use_cache=True), 20)
            runs.append(dict(model=name, kind="decode", batch=batch, past=past + 13,
                             **summary))
            print(name, "decode", batch, past, f"{summary['wall_s'] * 1e3:.2f} ms "
                  f"busy {summary['kernel_busy_s'] * 1e3:.2f} ms "
                  f"{summary['kernels']} kernels", flush=True)
            del cache
        RESULT["steps"] = runs
        save()
        del model
        if DEV == "cuda":
            torch.cuda.empty_cache()


def main():
    if DEV == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        RESULT["device"] = torch.cuda.get_device_name()
        import transformers
        RESULT["transformers"] = transformers.__version__
    for section in sys.argv[1:] or ["products", "attention", "model_steps"]:
        t = time.perf_counter()
        globals()[section]()
        print(f"== {section}: {time.perf_counter() - t:.1f} s", flush=True)


if __name__ == "__main__":
    main()
