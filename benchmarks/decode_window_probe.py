"""Does a full sliding window keep its cuDNN plan? A decode step on a GPU, transformers only.

    OUT=folder python benchmarks/decode_window_probe.py

A Mistral-shaped model (8 layers of Mistral-7B's, window 1,024) against a Llama-shaped one,
random BF16 weights, decode after 4,000 tokens: the default backend and flash (which refuses
the window's mask: recorded as an error). On the H200 (2026-11-28; its first run, kept in
benchmarks/measured/decode/h200-sliding-window-probe.log, stopped at that refusal before the
Llama rows) the Mistral step took 7.06 ms, keys of 1,023 tokens every layer: no plan build,
as fxroof.plan_builds says of a full window.
"""
import json
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_probe as dp  # noqa: E402

def build(kind):
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM
    fields = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=8,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                  max_position_embeddings=40000, attn_implementation="sdpa")
    if dp.SMALL:
        fields.update(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1)
    if kind == "mistral":
        window = 16 if dp.SMALL else 1024
        cls, cfg = MistralForCausalLM, MistralConfig(sliding_window=window, **fields)
    else:
        cls, cfg = LlamaForCausalLM, LlamaConfig(**fields)
    torch.set_default_dtype(dp.BF16)
    with torch.device(dp.DEV):
        model = cls(cfg)
    torch.set_default_dtype(torch.float32)
    return model.eval()

@torch.no_grad()
def main():
    rows = []
    for kind in ("mistral", "llama"):
        model = build(kind)
        past = 62 if dp.SMALL else 4000
        ids = torch.randint(0, 32000 if not dp.SMALL else 100, (1, past), device=dp.DEV)
        token = ids[:, :1]
        for backend in ("default", "flash"):
            ctx = sdpa_kernel(SDPBackend.FLASH_ATTENTION) if backend == "flash" \
                else torch.no_grad()
            try:
                with ctx:
                    cache = model(input_ids=ids, use_cache=True,
                                  logits_to_keep=1).past_key_values
                    step = lambda: model(input_ids=token, past_key_values=cache,  # noqa: E731
                                         use_cache=True)
                    for _ in range(3):
                        step()
                    s = dp.step_summary(step, 20)
            except RuntimeError as e:
                rows.append({"model": kind, "backend": backend, "error": str(e)[:300]})
                continue
            lengths = sorted({layer.keys.shape[-2] for layer in cache.layers}) \
                if hasattr(cache, "layers") else None
            rows.append(dict(model=kind, backend=backend, key_lengths=lengths, **s))
            print(kind, backend, f"{s['wall_s'] * 1e3:.2f} ms (min {s['wall_min_s'] * 1e3:.2f})"
                  f" busy {s['kernel_busy_s'] * 1e3:.2f}", lengths, flush=True)
        del model
    out = os.environ.get("OUT", "/tmp/out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "window_probe.json"), "w") as f:
        json.dump({"torch": torch.__version__, "steps": rows}, f, indent=1)


if __name__ == "__main__":
    main()
