"""fxroof's GPU predictions against timm's published step times on GeForce boards, which
fxroof was never fitted on.

    python benchmarks/bench_public_timm.py [--json r.json [--force]]

The reference: timm's benchmark results (github.com/huggingface/pytorch-image-models,
results/), written by its benchmark.py: ``torch.backends.cudnn.benchmark = True``, AMP
(``torch.cuda.amp.autocast``: FP16), NCHW, a synthetic input of the model's test size,
cuDNN, each step timed from the host with the device synchronised after it.
* inference: ``model(x)`` in eval mode under ``torch.no_grad()``, batch 1024 --
  benchmark-infer-amp-nchw-pt291-cu128-4090.csv (PyTorch 2.9.1, an RTX 4090),
  benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv (PyTorch 2.4.0, an RTX 3090) and
  benchmark-infer-amp-nchw-pt291-cu130-5090.csv (PyTorch 2.9.1, an RTX 5090: a board no
  measurement behind fxroof's GeForce rates ran on, of an architecture none did);
* training: forward, ``nn.CrossEntropyLoss`` and backward under autocast, then the
  optimizer's step (timm's "sgd": momentum 0.9), batch as the file gives it --
  benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv (PyTorch 1.12, an RTX 3090), whose
  optimizer steps one parameter at a time (torch.optim's foreach default came with 2.0), so
  fxroof analyses its ``for-loop`` update.
* layouts: the per-image ratio of an NCHW step to its channels-last one on one GPU and
  one PyTorch -- benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv (batch 1024) against
  benchmark-infer-amp-nhwc-pt240-cu124-rtx4090.csv (batch 512) -- what cuDNN's layout
  transposes cost there, the GPU's rates cancelling; predicted with and without the search.
The models are timm's own (``timm:<name>``, the installed timm's code) at the image size the
file lists; the step time is ``infer_step_time`` / ``train_step_time`` (ms). Skipped where
timm (an optional extra) is not installed.

What the installed timm builds is not always what an older PyTorch ran: timm's attention
calls scaled_dot_product_attention (a fused kernel) where PyTorch 1.12 had none and timm
computed softmax(q k^T) v op by op, so the 1.12 training points of attention models are
analysed with fewer, cheaper kernels than ran. The points are an outside check of GeForce
boards (fxroof.calibration.GEFORCE_FAMILY), not a target.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import parsed_output_arguments, script_main  # noqa: E402
from benchmarks.bench_public_gpu import summary  # noqa: E402
from fxroof import analyze  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.files import write_json  # noqa: E402
from fxroof.roofline import cudnn_search, node_time, predict  # noqa: E402

SOURCE = ("timm (huggingface/pytorch-image-models) results/: benchmark-infer-amp-nchw-pt291-"
          "cu128-4090.csv, benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv, "
          "benchmark-infer-amp-nchw-pt291-cu130-5090.csv, "
          "benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv; layouts: benchmark-infer-amp-"
          "nchw-pt240-cu124-rtx4090.csv, benchmark-infer-amp-nhwc-pt240-cu124-rtx4090.csv")
INFERENCE_BATCH = 1024
# (model, image size, infer_step_time ms) at batch 1024
INFERENCE_MS = {
    "rtx_4090": [
        ("resnet18", 224, 74.577), ("resnet34", 224, 123.118), ("resnet50", 224, 237.959),
        ("resnet101", 224, 368.164), ("resnet152", 224, 517.969),
        ("efficientnet_b0", 224, 116.41), ("efficientnet_b3", 288, 365.419),
        ("mobilenetv2_100", 224, 94.728), ("mobilenetv3_large_100", 224, 70.179),
        ("convnext_tiny", 224, 212.65), ("convnext_small", 224, 343.934),
        ("convnext_base", 224, 487.206), ("vit_tiny_patch16_224", 224, 55.169),
        ("vit_small_patch16_224", 224, 124.63), ("vit_base_patch16_224", 224, 342.132),
        ("swin_tiny_patch4_window7_224", 224, 372.502), ("densenet121", 224, 282.008),
        ("inception_v3", 299, 281.586), ("resnext50_32x4d", 224, 293.094),
        ("resnext101_32x8d", 224, 714.369), ("wide_resnet50_2", 224, 364.957),
        ("vgg16", 224, 458.014)],
    "rtx_3090": [
        ("resnet18", 224, 110.57), ("resnet34", 224, 187.712), ("resnet50", 224, 318.095),
        ("resnet101", 224, 523.457), ("resnet152", 224, 745.522),
        ("efficientnet_b0", 224, 147.857), ("mobilenetv2_100", 224, 118.65),
        ("convnext_tiny", 224, 331.339), ("convnext_small", 224, 548.704),
        ("convnext_base", 224, 787.008), ("vit_tiny_patch16_224", 224, 100.072),
        ("vit_small_patch16_224", 224, 223.334), ("vit_base_patch16_224", 224, 651.945),
        ("swin_tiny_patch4_window7_224", 224, 513.466), ("densenet121", 224, 370.412),
        ("inception_v3", 299, 435.874), ("resnext50_32x4d", 224, 397.304),
        ("wide_resnet50_2", 224, 560.893), ("vgg11", 224, 354.59)],
    "rtx_5090": [
        ("resnet18", 224, 51.495), ("resnet34", 224, 83.871), ("resnet50", 224, 161.077),
        ("resnet101", 224, 246.689), ("efficientnet_b0", 224, 77.07),
        ("efficientnet_b3", 288, 241.71), ("mobilenetv2_100", 224, 61.17),
        ("mobilenetv3_large_100", 224, 46.453), ("convnext_tiny", 224, 172.338),
        ("convnext_small", 224, 276.694), ("vit_tiny_patch16_224", 224, 39.15),
        ("vit_small_patch16_224", 224, 93.302), ("vit_base_patch16_224", 224, 261.5),
        ("swin_tiny_patch4_window7_224", 224, 241.534), ("densenet121", 224, 190.686),
        ("inception_v3", 299, 203.156), ("resnext50_32x4d", 224, 212.375),
        ("wide_resnet50_2", 224, 267.875), ("vgg11", 224, 160.196), ("vgg16", 224, 299.577)],
}
# (model, image size, batch, train_step_time ms)
TRAINING_MS = {
    "rtx_3090": [
        ("resnet18", 224, 512, 184.877), ("resnet34", 224, 512, 314.992),
        ("resnet50", 224, 512, 618.983), ("resnext50_32x4d", 224, 384, 577.966),
        ("densenet121", 224, 256, 348.758), ("mobilenetv2_100", 224, 512, 278.633),
        ("mobilenetv3_large_100", 224, 512, 235.344), ("efficientnet_b0", 224, 384, 262.1),
        ("convnext_tiny", 224, 256, 313.859), ("vit_tiny_patch16_224", 224, 512, 222.408),
        ("vit_small_patch16_224", 224, 384, 363.872),
        ("swin_tiny_patch4_window7_224", 224, 256, 394.841), ("vgg11", 224, 512, 619.706)],
}
TRAINING_OPTIMIZER_IMPL = "for-loop"  # PyTorch 1.12's SGD (see above)
# One GPU, one PyTorch, both layouts: benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv (batch
# 1024) and benchmark-infer-amp-nhwc-pt240-cu124-rtx4090.csv (channels-last, batch 512):
# (model, image size, NCHW step ms, NHWC step ms). Their per-image ratio is what an NCHW
# model pays for cuDNN's layout transposes (the GPU's rates cancel): the check of
# hidden_bytes.transpose_bytes with and without cuDNN's search.
LAYOUT_BATCHES = (1024, 512)
LAYOUT_MS_4090 = [
    ("resnet50", 224, 242.763, 100.61), ("resnext50_32x4d", 224, 298.772, 121.328),
    ("inception_v3", 299, 279.511, 117.497), ("densenet121", 224, 283.247, 131.4),
    ("vgg11", 224, 233.545, 102.821), ("convnext_tiny", 224, 213.45, 105.672)]


def point(chip_id: str, task: str, model: str, size: int, batch: int, ms: float) -> dict:
    """One published step against fxroof's pipelined prediction, its band, the plain sum of
    its nodes' times and the ideal roof (s)."""
    chip = get_chip(chip_id)
    step = {"loss": "cross_entropy", "optimizer": "sgd",
            "optimizer_impl": TRAINING_OPTIMIZER_IMPL} if task == "train" else {}
    with cudnn_search():
        records = analyze(f"timm:{model}", input_shapes=[(batch, 3, size, size)],
                          device="cuda", chip=chip, amp="fp16", **step).records()
        p = predict(records, chip)["overall" if task == "train" else "forward"]
        summed = sum(node_time(r, chip).predicted_s for r in records)
    return {"chip": chip_id, "task": task, "model": model, "image_size": size, "batch": batch,
            "measured_s": ms / 1e3, "pipelined_s": p["predicted_s"], "low_s": p["low_s"],
            "high_s": p["high_s"], "summed_s": summed, "ideal_s": p["ideal_s"]}


def layout_ratio(model: str, size: int, nchw_ms: float, nhwc_ms: float) -> dict:
    """An NCHW step's time per image over its channels-last one's, measured and predicted
    on the RTX 4090 with cuDNN's search (the operands transposed) and without (the result
    too)."""
    chip = get_chip("rtx_4090")
    per_image = {}
    for layout, batch in zip((None, "channels_last"), LAYOUT_BATCHES):
        records = analyze(f"timm:{model}", input_shapes=[(batch, 3, size, size)],
                          device="cuda", chip=chip, amp="fp16",
                          memory_format=layout).records()
        for searched in (True, False):
            with cudnn_search(searched):
                per_image[layout, searched] = \
                    predict(records, chip)["forward"]["predicted_s"] / batch
    measured = (nchw_ms / LAYOUT_BATCHES[0]) / (nhwc_ms / LAYOUT_BATCHES[1])
    return {"model": model, "measured": measured,
            **{key: per_image[None, searched] / per_image["channels_last", searched]
               for key, searched in (("searched", True), ("not_searched", False))}}


def points() -> list[dict]:
    found = [point(chip, "inference", m, size, INFERENCE_BATCH, ms)
             for chip, rows in INFERENCE_MS.items() for m, size, ms in rows]
    return found + [point(chip, "train", m, size, batch, ms)
                    for chip, rows in TRAINING_MS.items() for m, size, batch, ms in rows]


def main(argv=None) -> int:
    args = parsed_output_arguments(__doc__, argv)
    try:
        import timm  # noqa: F401 -- an optional extra
    except ImportError:
        print("bench_public_timm: timm is not installed (pip install 'fxroof[timm]'): "
              "nothing to compare", file=sys.stderr)
        return 0
    found = points()
    for p in found:
        print(f"{p['chip']:9s} {p['task']:9s} {p['model']:29s} b{p['batch']:<5d} measured "
              f"{p['measured_s'] * 1e3:7.1f} ms"
              f"  pipelined x{p['pipelined_s'] / p['measured_s']:.2f}"
              f"  ideal x{p['ideal_s'] / p['measured_s']:.2f}", file=sys.stderr)
    result = {"benchmark": "public_timm", "reference": SOURCE, "points": len(found),
              **summary(found),
              **{f"{chip} {task}": summary([p for p in found
                                            if (p["chip"], p["task"]) == (chip, task)])
                 for chip, task in sorted({(p["chip"], p["task"]) for p in found})}}
    ratios = [layout_ratio(*row) for row in LAYOUT_MS_4090]
    for r in ratios:
        print(f"rtx_4090  NCHW / channels-last {r['model']:18s} measured {r['measured']:.3f}"
              f"  searched {r['searched']:.3f}  not searched {r['not_searched']:.3f}",
              file=sys.stderr)
    result["layout_ratio_4090"] = {
        f"{key}_median_error": round(statistics.median(
            abs(r[key] / r["measured"] - 1) for r in ratios), 3)
        for key in ("searched", "not_searched")}
    print(json.dumps(result, indent=1))
    if args.json:
        write_json(args.json, {"summary": result, "points": found, "layout_ratios": ratios},
                   overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
