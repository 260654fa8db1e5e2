"""Decode under each SDPA backend on a GPU: the advice `fxroof predict` prints, checked.

    OUT=folder python benchmarks/decode_backends_probe.py
    OUT=folder TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1 python benchmarks/decode_backends_probe.py

Needs torch and transformers only. Times flash and memory-efficient attention at one query
(as decode_probe.py times the default backend) and eager transformers decode steps under
sdpa_kernel(FLASH_ATTENTION) and (EFFICIENT_ATTENTION) beside the default; with the
environment variable set, only the default decode step (does PyTorch's opt-in avoid the
per-length cuDNN plans for transformers' cache? On the H200: no). The H200's results
(2026-11-28): benchmarks/measured/decode/h200-decode-backends.json and
h200-decode-avoid-recompile.json.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_probe as dp  # noqa: E402

RESULT = {"torch": torch.__version__, "env": os.environ.get("TORCH_CUDNN_SDPA_AVOID_RECOMPILE")}
BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def attention(which):
    points = []
    for batch, kv_heads, past in [(1, 32, 4096), (1, 32, 16384), (1, 32, 32768), (8, 32, 4096),
                                  (1, 8, 32768), (8, 8, 4096)]:
        past = past // 64 if dp.SMALL else past
        q = torch.randn(batch, 32, 1, 128, device=dp.DEV, dtype=dp.BF16)
        nbytes = 2 * batch * kv_heads * past * 128 * 2
        kvs = [(torch.randn(batch, kv_heads, past, 128, device=dp.DEV, dtype=dp.BF16),
                torch.randn(batch, kv_heads, past, 128, device=dp.DEV, dtype=dp.BF16))
               for _ in range(dp.copies_for(nbytes))]
        def run(q=q, kvs=kvs, gqa=kv_heads != 32):
            with sdpa_kernel(BACKENDS[which]):
                for k, v in kvs:
                    F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        try:
            s = dp.graph_seconds(run, len(kvs))
        except RuntimeError as e:
            points.append({"backend": which, "batch": batch, "kv_heads": kv_heads, "past": past,
                           "error": str(e)[:200]})
            print(which, batch, kv_heads, past, "error", str(e)[:100], flush=True)
            continue
        points.append({"backend": which, "batch": batch, "heads": 32, "kv_heads": kv_heads,
                       "past": past, "head_dim": 128, "masked": False, "seconds": s,
                       "kv_bytes": nbytes, "GBps": nbytes / s / 1e9,
                       "kernels": list(dp.kernel_names(lambda: run()))})
        print(which, batch, kv_heads, past, f"{s * 1e6:.1f} us {nbytes / s / 1e9:.0f} GB/s",
              points[-1]["kernels"][:2], flush=True)
        del kvs
    return points


@torch.no_grad()
def decode_under(which, name, batch=1, past=4000):
    model = dp.build(dp.MODELS[name])
    vocab = model.config.vocab_size
    past = 62 if dp.SMALL else past
    ids = torch.randint(0, vocab, (batch, past), device=dp.DEV)
    token = torch.randint(0, vocab, (batch, 1), device=dp.DEV)
    rows = []
    for backend in which:
        try:
            with sdpa_kernel(BACKENDS[backend]) if BACKENDS[backend] else torch.no_grad():
                cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
                step = lambda: model(input_ids=token, past_key_values=cache, use_cache=True)
                for _ in range(3):
                    step()
                summary = dp.step_summary(step, 20)
        except RuntimeError as e:
            rows.append({"model": name, "backend": backend, "error": str(e)[:300]})
            print(name, backend, "error", str(e)[:150], flush=True)
            continue
        rows.append(dict(model=name, kind="decode", batch=batch, past=past + 13, backend=backend,
                         **summary))
        print(name, backend, f"{summary['wall_s'] * 1e3:.2f} ms busy "
              f"{summary['kernel_busy_s'] * 1e3:.2f} ms", flush=True)
        del cache
    del model
    return rows


def main():
    out = os.environ.get("OUT", "/tmp/out")
    os.makedirs(out, exist_ok=True)
    if RESULT["env"]:
        RESULT["steps"] = decode_under(["default"], "Llama-3.2-1B")
    else:
        RESULT["attention"] = attention("flash") + attention("efficient")
        RESULT["steps"] = decode_under(["default", "flash", "efficient"], "Llama-3.2-1B") + \
            decode_under(["default", "flash"], "Llama-2-7B")
    name = "flash_probe_env.json" if RESULT["env"] else "flash_probe.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(RESULT, f, indent=1)


if __name__ == "__main__":
    main()
