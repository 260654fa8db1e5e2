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
* inference, a wider sample (task "zoo"): 90 more models of the same RTX 4090 file, at its
  image size and batch, analysed reparameterized as that run was (ZOO_SAMPLE_4090 says how
  they were picked and why);
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
computed softmax(q k^T) v op by op, so the 1.12 training points are analysed with timm's
fused attention off (``timm.layers.set_fused_attn(False)``, which its modules read when
built): the products and the softmax that ran. The points are an outside check of GeForce
boards (fxroof.calibration.GEFORCE_FAMILY), not a target.
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import parsed_output_arguments, script_main, timm_missing  # noqa: E402
from benchmarks.bench_public_gpu import summary  # noqa: E402
from fxroof import analyze  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.files import write_json  # noqa: E402
from fxroof.prediction import predict  # noqa: E402
from fxroof.roofline import cudnn_search  # noqa: E402
from fxroof.time_model import node_time  # noqa: E402

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
# A wider sample of the same RTX 4090 file (added 2026-11-30, session 86): 90 more models
# of timm's zoo -- the 42 fastest families' members from its first 250 rows and 48 from the
# 450-800 ms rows, every one absent from INFERENCE_MS and each family once or twice (ViTs,
# hybrids, MLPs, RepVGG-style and MobileOne-style reparameterized nets, NFNets, HRNets,
# DLAs, DPNs, Res2Nets, ...) -- at the file's image size and batch (a few ran at 512 or 768):
# (model, image size, batch, infer_step_time ms). The file's parameter counts are those of
# the fused models (mobileone_s0 2.08 M, repvgg_a0 8.31 M: 5.29 M and 9.11 M as built), so
# its inference ran reparameterized (timm's benchmark.py --reparam), and every inference
# point here is analysed so (analyze(reparameterize=True)).
ZOO_SAMPLE_4090 = [
    ("efficientvit_m0", 224, 1024, 13.144), ("mobilenetv3_small_050", 224, 1024, 15.019),
    ("lcnet_050", 224, 1024, 19.493), ("shvit_s1", 224, 1024, 21.288),
    ("regnetx_002", 224, 1024, 37.485), ("levit_128s", 224, 1024, 33.713),
    ("vit_small_patch32_224", 224, 1024, 35.201), ("ghostnet_050", 224, 1024, 36.42),
    ("mixer_s32_224", 224, 1024, 52.288), ("repvgg_a0", 224, 1024, 50.192),
    ("mobileone_s0", 224, 1024, 54.18), ("regnetx_004", 224, 1024, 55.679),
    ("gernet_s", 224, 1024, 56.956), ("cs3darknet_s", 256, 1024, 60.645),
    ("convnext_atto", 224, 1024, 79.93), ("hardcorenas_a", 224, 1024, 70.165),
    ("mobilevit_xxs", 256, 1024, 97.391), ("dla46_c", 224, 1024, 93.244),
    ("pvt_v2_b0", 224, 1024, 110.099), ("xcit_nano_12_p16_224", 224, 1024, 100.424),
    ("crossvit_tiny_240", 240, 1024, 96.904), ("pit_ti_224", 224, 1024, 45.434),
    ("efficientnet_lite0", 224, 1024, 100.007), ("rexnet_100", 224, 1024, 116.908),
    ("hrnet_w18_small", 224, 1024, 131.751), ("skresnet18", 224, 1024, 131.66),
    ("dla34", 224, 1024, 144.508), ("mixnet_s", 224, 1024, 143.731),
    ("ghostnetv2_100", 224, 1024, 134.228), ("fastvit_t8", 256, 1024, 126.578),
    ("edgenext_x_small", 256, 1024, 131.512), ("selecsls42", 224, 1024, 123.463),
    ("nf_regnet_b0", 192, 1024, 71.525), ("seresnet18", 224, 1024, 79.463),
    ("inception_next_atto", 224, 1024, 80.094), ("hgnetv2_b0", 224, 1024, 100.631),
    ("mobilenetv4_conv_medium", 224, 1024, 93.856), ("efficientvit_b0", 224, 1024, 45.297),
    ("visformer_tiny", 224, 1024, 110.36), ("tf_efficientnetv2_b0", 224, 1024, 97.807),
    ("mnasnet_100", 224, 1024, 81.741), ("regnety_008", 224, 1024, 102.559),
    ("vgg13_bn", 224, 1024, 443.565), ("repvgg_b3", 224, 1024, 443.914),
    ("nf_resnet101", 224, 1024, 444.451), ("halonet50ts", 256, 1024, 446.879),
    ("tf_efficientnetv2_s", 300, 1024, 447.367), ("hiera_small_224", 224, 1024, 449.85),
    ("maxvit_tiny_rw_224", 224, 1024, 450.369), ("res2net50_26w_8s", 224, 1024, 450.732),
    ("legacy_xception", 299, 768, 339.535), ("pvt_v2_b3", 224, 1024, 458.352),
    ("swinv2_cr_tiny_224", 224, 1024, 460.166), ("mambaout_tiny", 288, 1024, 460.739),
    ("efficientvit_b3", 224, 1024, 461.097), ("mvitv2_tiny", 224, 1024, 473.433),
    ("convnextv2_tiny", 224, 1024, 478.1), ("coatnet_rmlp_1_rw_224", 224, 1024, 480.24),
    ("regnetz_040", 256, 1024, 482.459), ("resnest50d_4s2x40d", 224, 1024, 486.455),
    ("nfnet_l0", 288, 1024, 491.098), ("regnetx_120", 224, 1024, 493.632),
    ("dpn92", 224, 1024, 500.376), ("vgg19", 224, 1024, 500.777),
    ("poolformer_s36", 224, 1024, 511.729), ("focalnet_small_srf", 224, 1024, 512.423),
    ("crossvit_base_240", 240, 1024, 514.175), ("convit_small", 224, 1024, 518.173),
    ("convmixer_1024_20_ks9_p14", 224, 1024, 520.468), ("botnet50ts_256", 256, 512, 262.694),
    ("nfnet_f0", 256, 1024, 527.435), ("inception_v4", 299, 1024, 529.845),
    ("dla169", 224, 1024, 536.721), ("gcvit_tiny", 224, 1024, 537.039),
    ("caformer_s18", 224, 1024, 540.427), ("vit_small_patch8_224", 224, 1024, 544.041),
    ("tresnet_xl", 224, 1024, 549.658), ("sequencer2d_m", 224, 1024, 561.573),
    ("densenet161", 224, 1024, 565.722), ("tnt_s_patch16_224", 224, 1024, 591.964),
    ("hrnet_w30", 224, 1024, 595.39), ("eva02_base_patch16_clip_224", 224, 1024, 597.095),
    ("swin_small_patch4_window7_224", 224, 1024, 599.457),
    ("xcit_tiny_12_p8_224", 224, 1024, 602.575), ("cait_xxs36_224", 224, 1024, 611.062),
    ("efficientformerv2_s0", 224, 1024, 627.791), ("twins_svt_base", 224, 1024, 665.863),
    ("volo_d2_224", 224, 1024, 781.325), ("nest_tiny", 224, 768, 551.933),
    ("lambda_resnet50ts", 256, 1024, 740.94)
]
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


@contextlib.contextmanager
def timm_fused_attention(enabled: bool):
    """timm's attention modules built inside use scaled_dot_product_attention or not (timm's
    own switch, read when a module is built); the switch is put back after."""
    from timm.layers import config
    before = config._USE_FUSED_ATTN  # 0 off, 1 on, 2 on where experimental too
    config.set_fused_attn(enabled)
    try:
        yield
    finally:
        config._USE_FUSED_ATTN = before


def point(chip_id: str, task: str, model: str, size: int, batch: int, ms: float) -> dict:
    """One published step against fxroof's pipelined prediction, its band, the plain sum of
    its nodes' times and the ideal roof (s). A training point's PyTorch (1.12) had no
    scaled_dot_product_attention, so its model is built with timm's unfused attention."""
    chip = get_chip(chip_id)
    step = {"loss": "cross_entropy", "optimizer": "sgd",
            "optimizer_impl": TRAINING_OPTIMIZER_IMPL} if task == "train" else {}
    with cudnn_search(), timm_fused_attention(not step):
        records = analyze(f"timm:{model}", input_shapes=[(batch, 3, size, size)],
                          device="cuda", chip=chip, amp="fp16", reparameterize=not step,
                          **step).records()
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
    found += [point(chip, "train", m, size, batch, ms)
              for chip, rows in TRAINING_MS.items() for m, size, batch, ms in rows]
    return found + [{**point("rtx_4090", "inference", m, size, batch, ms), "task": "zoo"}
                    for m, size, batch, ms in ZOO_SAMPLE_4090]


def main(argv=None) -> int:
    args = parsed_output_arguments(__doc__, argv)
    if timm_missing("bench_public_timm"):
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
