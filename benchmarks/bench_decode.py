"""LLM decode on a GPU: fxroof's predictions against what benchmarks/decode_probe.py measured.

    python benchmarks/bench_decode.py benchmarks/measured/decode/h200-decode-probe.json \
        --chip h200_sxm [--json out.json] [--force]

The probe (run on the GPU, torch and transformers only) timed, in BF16:
* matrix products of one to 256 rows over LLM weights (8-470 MB), kernel time by CUDA graph
  replay over distinct weights (no operand read from L2): fxroof's kernel time of the
  product's node (its device part, the host's overlapped);
* scaled_dot_product_attention at one query over KV caches of 1k-32k tokens (the backend
  PyTorch picks: cuDNN's on Hopper), likewise: fxroof's kernel time of the attention node;
* eager transformers Llama steps, random weights -- prefill and decode after a cache of
  about 4,000 or 16,000 tokens: the kernels' summed device time (torch.profiler) against
  fxroof's summed kernel times, and the wall time of a step against fxroof's predicted
  step and its band.
Each line prints measured, predicted and their ratio (predicted / measured); the summary
gives the median absolute error and the ratios' range per group.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import parsed_chip_arguments, script_main  # noqa: E402
from benchmarks.decode_probe import MODELS  # noqa: E402
from fxroof import analyze  # noqa: E402
from fxroof.errors import FxroofError  # noqa: E402
from fxroof.files import write_json  # noqa: E402
from fxroof.prediction import device_seconds, predict  # noqa: E402
from fxroof.time_model import node_time  # noqa: E402

DTYPES = {"torch.bfloat16": torch.bfloat16, "torch.float32": torch.float32}
ATTENTION_OPS = ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_efficient_attention")


class _Attention(torch.nn.Module):
    def __init__(self, gqa: bool):
        super().__init__()
        self.gqa = gqa

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.gqa)


def product_point(p: dict, chip) -> dict:
    dtype = DTYPES[p["dtype"]]
    layer = torch.nn.Linear(p["k"], p["n"], bias=False).to(dtype)
    graph = analyze(layer, torch.empty(p["m"], p["k"], dtype=dtype), device="cuda", chip=chip)
    (record,) = [r for r in graph.records() if r["op"] == "mm"]
    return dict(p, predicted_s=node_time(record, chip).kernel_s)


def attention_point(p: dict, chip) -> dict:
    b, kv, past, d = p["batch"], p["kv_heads"], p["past"], p["head_dim"]
    inputs = [torch.empty(b, p["heads"], 1, d, dtype=torch.bfloat16),
              torch.empty(b, kv, past, d, dtype=torch.bfloat16),
              torch.empty(b, kv, past, d, dtype=torch.bfloat16)]
    if p["masked"]:
        inputs.append(torch.ones(b, 1, 1, past, dtype=torch.bool))
    records = analyze(_Attention(kv != p["heads"]), *inputs, device="cuda",
                      chip=chip).records()
    nodes = [r for r in records if r["op"] in ATTENTION_OPS]
    if len(nodes) != 1:
        raise FxroofError(f"expected one fused attention node, found {len(nodes)}")
    # the whole call, as the probe timed it: a boolean mask's conversion kernels too
    return dict(p, op=nodes[0]["op"], nodes=len(records),
                predicted_s=sum(device_seconds(node_time(r, chip)) for r in records))


def step_point(s: dict, chip) -> dict:
    config = dict(MODELS[s["model"]], max_position_embeddings=40000)
    common = dict(hf_config=config, batch=s["batch"], dtype=torch.bfloat16, device="cuda",
                  chip=chip)
    if s["kind"] == "decode":
        graph = analyze("hf:llama", past=s["past"], **common)
    else:
        graph = analyze("hf:llama", seq_len=s["seq"], **common)
    records = graph.records()
    overall = predict(records, chip)["overall"]
    kernels = sum(device_seconds(node_time(r, chip)) for r in records)
    return {key: s[key] for key in ("model", "kind", "batch", "wall_s", "kernel_busy_s")} | {
        "tokens": s.get("past", s.get("seq")), "predicted_s": overall["predicted_s"],
        "low_s": overall["low_s"], "high_s": overall["high_s"], "predicted_kernels_s": kernels}


def summary(points: list[dict], predicted: str, measured: str) -> dict:
    ratios = [p[predicted] / p[measured] for p in points]
    return {"points": len(points),
            "median_abs_error": round(statistics.median(abs(r - 1) for r in ratios), 3),
            "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3)}


def _product_line(p: dict) -> str:
    return (f"linear {p['m']:4d}x{p['k']:5d}x{p['n']:6d} {p['dtype'][6:]:8s} measured "
            f"{p['seconds'] * 1e6:7.1f} us  predicted {p['predicted_s'] * 1e6:7.1f} us  "
            f"x{p['predicted_s'] / p['seconds']:.2f}")


def _attention_line(p: dict) -> str:
    return (f"sdpa b{p['batch']} kv heads {p['kv_heads']:2d} past {p['past']:5d} mask "
            f"{p['masked']!s:5s} measured {p['seconds'] * 1e6:6.1f} us  predicted "
            f"{p['predicted_s'] * 1e6:6.1f} us  x{p['predicted_s'] / p['seconds']:.2f}  "
            f"({p['op']})")


def _step_line(s: dict) -> str:
    return (f"{s['model']:12s} {s['kind']:7s} b{s['batch']:<2d} {s['tokens']:5d} tokens: "
            f"kernels {s['kernel_busy_s'] * 1e3:6.2f} ms, predicted "
            f"{s['predicted_kernels_s'] * 1e3:6.2f} (x"
            f"{s['predicted_kernels_s'] / s['kernel_busy_s']:.2f}); step "
            f"{s['wall_s'] * 1e3:6.2f} ms, predicted {s['predicted_s'] * 1e3:6.2f} "
            f"({s['low_s'] * 1e3:.1f}..{s['high_s'] * 1e3:.1f}, "
            f"x{s['predicted_s'] / s['wall_s']:.2f})")


def report(probe: dict, chip) -> dict:
    """Every point of one probe file priced on ``chip``, printed as it goes, and each
    group's summary."""
    groups = {}
    for name, point, line in (("products", product_point, _product_line),
                              ("attention", attention_point, _attention_line),
                              ("steps", step_point, _step_line)):
        groups[name] = [point(p, chip) for p in probe[name]]
        print("\n".join(line(p) for p in groups[name]))
    steps = groups["steps"]
    result = {"products": summary(groups["products"], "predicted_s", "seconds"),
              "attention": summary(groups["attention"], "predicted_s", "seconds"),
              "step_kernels": summary(steps, "predicted_kernels_s", "kernel_busy_s"),
              "steps": summary(steps, "predicted_s", "wall_s"),
              "steps_inside_band": sum(s["low_s"] <= s["wall_s"] <= s["high_s"]
                                       for s in steps)}
    for group, entry in result.items():
        print(f"{group}: {entry}")
    return dict(result, points=groups)


def main(argv=None) -> int:
    args, chip = parsed_chip_arguments(__doc__, "measured", "decode_probe.py's JSON file",
                                       argv)
    result = {"chip": chip.id}
    for path in args.measured:
        try:
            with open(path) as f:
                probe = json.load(f)
        except (OSError, ValueError) as e:
            raise FxroofError(f"cannot read {path}: {e}") from None
        if not isinstance(probe, dict) or not {"products", "attention", "steps"} <= set(probe):
            raise FxroofError(f"{path} is not a decode_probe.py result (it lacks 'products', "
                              f"'attention' or 'steps'): pass the JSON that script wrote.")
        result[os.path.basename(path)] = report(probe, chip)
    if args.json:
        write_json(args.json, result, overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
