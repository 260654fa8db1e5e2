"""fxroof's compiled view of a CUDA target against timm's published torch.compile step times
on two GeForce boards, and the speed-up over eager it predicts against the one measured.

    python benchmarks/bench_public_dynamo.py [--json r.json [--force]]

The reference: timm's benchmark results (github.com/huggingface/pytorch-image-models,
results/), written by its benchmark.py with ``--torchcompile`` (``torch.compile(model,
backend="inductor")``, the default mode: no max-autotune, no CUDA graphs), AMP (FP16
autocast), NCHW inputs, ``torch.backends.cudnn.benchmark = True``, eval mode under
``torch.no_grad()``, each step timed from the host with the device synchronised after it:
benchmark-infer-amp-nchw-pt291-cu128-4090-dynamo.csv (PyTorch 2.9.1, an RTX 4090) and
benchmark-infer-amp-nchw-pt291-cu130-5090-dynamo.csv (PyTorch 2.9.1, an RTX 5090), batch
1024 (efficientnet_b3 at 288 ran 512 a step). The eager step times beside them are
bench_public_timm's (the same PyTorch, boards and batch, without torch.compile). A wider
sample (task "zoo"): the 90 models of bench_public_timm's ZOO_SAMPLE_4090 -- ViTs, hybrids,
MLPs, reparameterized nets, NFNets, HRNets, ... -- from the same RTX 4090 dynamo file, at
its image size and batch, analysed reparameterized as the eager zoo points are.

Each point is ``analyze(..., compiled=True)`` on the CUDA target of the board's chip:
Inductor's CUDA lowering read without a GPU (fxroof.gpu_lowering), its kernels priced by the
calibrated time model. The eager and compiled steps of one model on one board share the GPU's
rates, so their ratio -- the speed-up torch.compile buys -- checks what the compiled view
changes (fusion, layouts, no cuDNN transposes) with those rates cancelling. Nothing was
fitted on these files. Skipped where timm (an optional extra) is not installed.
"""
from __future__ import annotations

import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import (parsed_output_arguments, report, script_main,  # noqa: E402
                        timm_missing)
from benchmarks.bench_public_gpu import summary  # noqa: E402
from benchmarks.bench_public_timm import (INFERENCE_BATCH, INFERENCE_MS,  # noqa: E402
                                          ZOO_SAMPLE_4090)
from fxroof import analyze  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.prediction import predict  # noqa: E402
from fxroof.roofline import cudnn_search  # noqa: E402

SOURCE = ("timm (huggingface/pytorch-image-models) results/: benchmark-infer-amp-nchw-pt291-"
          "cu128-4090-dynamo.csv, benchmark-infer-amp-nchw-pt291-cu130-5090-dynamo.csv; eager: "
          "benchmark-infer-amp-nchw-pt291-cu128-4090.csv, "
          "benchmark-infer-amp-nchw-pt291-cu130-5090.csv")
# (model, image size, batch, infer_step_time ms) under torch.compile: the models of
# bench_public_timm's eager tables for the same two boards
COMPILED_MS = {
    "rtx_4090": [
        ("resnet18", 224, 1024, 41.035), ("resnet34", 224, 1024, 69.789),
        ("resnet50", 224, 1024, 127.355), ("resnet101", 224, 1024, 202.773),
        ("resnet152", 224, 1024, 289.071), ("efficientnet_b0", 224, 1024, 94.916),
        ("efficientnet_b3", 288, 512, 156.477), ("mobilenetv2_100", 224, 1024, 62.827),
        ("mobilenetv3_large_100", 224, 1024, 49.401), ("convnext_tiny", 224, 1024, 152.852),
        ("convnext_small", 224, 1024, 257.428), ("convnext_base", 224, 1024, 380.834),
        ("vit_tiny_patch16_224", 224, 1024, 43.182),
        ("vit_small_patch16_224", 224, 1024, 102.905),
        ("vit_base_patch16_224", 224, 1024, 303.329),
        ("swin_tiny_patch4_window7_224", 224, 1024, 203.947),
        ("densenet121", 224, 1024, 164.886), ("inception_v3", 299, 1024, 153.664),
        ("resnext50_32x4d", 224, 1024, 152.307), ("resnext101_32x8d", 224, 1024, 394.97),
        ("wide_resnet50_2", 224, 1024, 218.581), ("vgg16", 224, 1024, 265.786)],
    "rtx_5090": [
        ("resnet18", 224, 1024, 28.719), ("resnet34", 224, 1024, 49.901),
        ("resnet50", 224, 1024, 82.556), ("resnet101", 224, 1024, 135.023),
        ("efficientnet_b0", 224, 1024, 56.135), ("efficientnet_b3", 288, 512, 94.562),
        ("mobilenetv2_100", 224, 1024, 37.096), ("mobilenetv3_large_100", 224, 1024, 29.473),
        ("convnext_tiny", 224, 1024, 107.486), ("convnext_small", 224, 1024, 183.651),
        ("vit_tiny_patch16_224", 224, 1024, 30.834),
        ("vit_small_patch16_224", 224, 1024, 76.163),
        ("vit_base_patch16_224", 224, 1024, 233.832),
        ("swin_tiny_patch4_window7_224", 224, 1024, 139.627),
        ("densenet121", 224, 1024, 100.582), ("inception_v3", 299, 1024, 109.028),
        ("resnext50_32x4d", 224, 1024, 100.383), ("wide_resnet50_2", 224, 1024, 155.019),
        ("vgg11", 224, 1024, 101.97), ("vgg16", 224, 1024, 191.085)],
}
# (model, image size, batch, infer_step_time ms) under torch.compile, from the same RTX 4090
# file: ZOO_SAMPLE_4090's models at the image sizes of its eager rows (the batch is the
# compiled run's; a few ran at 512 or 768). ConvMixer's compiled step is slower than its eager
# one (976 against 520 ms); EfficientFormerV2-S0's 11x faster (56 against 628 ms).
ZOO_COMPILED_MS_4090 = [
    ("efficientvit_m0", 224, 1024, 8.388), ("mobilenetv3_small_050", 224, 1024, 12.694),
    ("lcnet_050", 224, 1024, 14.617), ("shvit_s1", 224, 1024, 13.197),
    ("regnetx_002", 224, 1024, 22.092), ("levit_128s", 224, 1024, 19.169),
    ("vit_small_patch32_224", 224, 1024, 30.838), ("ghostnet_050", 224, 1024, 23.555),
    ("mixer_s32_224", 224, 1024, 36.256), ("repvgg_a0", 224, 1024, 30.501),
    ("mobileone_s0", 224, 1024, 36.839), ("regnetx_004", 224, 1024, 29.663),
    ("gernet_s", 224, 1024, 34.075), ("cs3darknet_s", 256, 1024, 37.54),
    ("convnext_atto", 224, 1024, 39.729), ("hardcorenas_a", 224, 1024, 51.134),
    ("mobilevit_xxs", 256, 1024, 62.634), ("dla46_c", 224, 1024, 50.232),
    ("pvt_v2_b0", 224, 1024, 61.408), ("xcit_nano_12_p16_224", 224, 1024, 46.439),
    ("crossvit_tiny_240", 240, 1024, 68.072), ("pit_ti_224", 224, 1024, 32.286),
    ("efficientnet_lite0", 224, 1024, 63.543), ("rexnet_100", 224, 1024, 82.179),
    ("hrnet_w18_small", 224, 1024, 60.319), ("skresnet18", 224, 1024, 59.556),
    ("dla34", 224, 1024, 78.106), ("mixnet_s", 224, 1024, 100.455),
    ("ghostnetv2_100", 224, 1024, 71.583), ("fastvit_t8", 256, 1024, 90.04),
    ("edgenext_x_small", 256, 1024, 66.704), ("selecsls42", 224, 1024, 79.615),
    ("nf_regnet_b0", 192, 1024, 36.85), ("seresnet18", 224, 1024, 45.609),
    ("inception_next_atto", 224, 1024, 45.12), ("hgnetv2_b0", 224, 1024, 29.864),
    ("mobilenetv4_conv_medium", 224, 1024, 54.857), ("efficientvit_b0", 224, 1024, 29.696),
    ("visformer_tiny", 224, 1024, 90.563), ("tf_efficientnetv2_b0", 224, 1024, 69.471),
    ("mnasnet_100", 224, 1024, 52.05), ("regnety_008", 224, 1024, 57.724),
    ("vgg13_bn", 224, 1024, 215.507), ("repvgg_b3", 224, 1024, 349.254),
    ("nf_resnet101", 224, 1024, 223.346), ("halonet50ts", 256, 1024, 218.94),
    ("tf_efficientnetv2_s", 300, 1024, 332.218), ("hiera_small_224", 224, 1024, 275.932),
    ("maxvit_tiny_rw_224", 224, 512, 160.308), ("res2net50_26w_8s", 224, 1024, 287.031),
    ("legacy_xception", 299, 768, 241.274), ("pvt_v2_b3", 224, 1024, 309.374),
    ("swinv2_cr_tiny_224", 224, 1024, 217.061), ("mambaout_tiny", 288, 1024, 303.67),
    ("efficientvit_b3", 224, 1024, 282.96), ("mvitv2_tiny", 224, 1024, 231.613),
    ("convnextv2_tiny", 224, 1024, 163.724), ("coatnet_rmlp_1_rw_224", 224, 1024, 298.938),
    ("regnetz_040", 256, 1024, 352.773), ("resnest50d_4s2x40d", 224, 1024, 300.413),
    ("nfnet_l0", 288, 1024, 212.797), ("regnetx_120", 224, 1024, 372.848),
    ("dpn92", 224, 1024, 340.622), ("vgg19", 224, 1024, 318.532),
    ("poolformer_s36", 224, 1024, 301.965), ("focalnet_small_srf", 224, 1024, 319.097),
    ("crossvit_base_240", 240, 1024, 405.075), ("convit_small", 224, 1024, 279.43),
    ("convmixer_1024_20_ks9_p14", 224, 1024, 976.451), ("botnet50ts_256", 256, 1024, 236.173),
    ("nfnet_f0", 256, 1024, 336.931), ("inception_v4", 299, 1024, 289.514),
    ("dla169", 224, 1024, 299.355), ("gcvit_tiny", 224, 1024, 322.854),
    ("caformer_s18", 224, 1024, 163.688), ("vit_small_patch8_224", 224, 1024, 467.034),
    ("tresnet_xl", 224, 1024, 440.277), ("sequencer2d_m", 224, 1024, 386.952),
    ("densenet161", 224, 768, 257.884), ("tnt_s_patch16_224", 224, 1024, 300.041),
    ("hrnet_w30", 224, 1024, 315.296), ("eva02_base_patch16_clip_224", 224, 1024, 330.163),
    ("swin_small_patch4_window7_224", 224, 1024, 327.922),
    ("xcit_tiny_12_p8_224", 224, 1024, 262.781), ("cait_xxs36_224", 224, 1024, 362.139),
    ("efficientformerv2_s0", 224, 1024, 56.072), ("twins_svt_base", 224, 1024, 400.364),
    ("volo_d2_224", 224, 1024, 486.714), ("nest_tiny", 224, 1024, 388.706),
    ("lambda_resnet50ts", 256, 1024, 325.226)
]


def _forward_s(model: str, size: int, batch: int, chip, compiled: bool,
               reparameterize: bool = False) -> tuple:
    """(expected, p10, p90, ideal) seconds of one eval step, as timm's benchmark ran it."""
    with cudnn_search():
        records = analyze(f"timm:{model}", input_shapes=[(batch, 3, size, size)],
                          device="cuda", chip=chip, amp="fp16", compiled=compiled,
                          reparameterize=reparameterize).records()
        p = predict(records, chip)["forward"]
    return p["predicted_s"], p["low_s"], p["high_s"], p["ideal_s"]


def point(chip_id: str, model: str, size: int, batch: int, ms: float,
          eager: tuple = None) -> dict:
    """One published compiled step against the compiled view's prediction, and the predicted
    eager step at the same batch for the speed-up. ``eager``: the measured eager step (batch,
    ms) where it is not bench_public_timm's INFERENCE_MS row (batch 1024) -- a zoo model's,
    whose points are analysed reparameterized; scaled per image where the compiled run took
    another batch."""
    chip = get_chip(chip_id)
    zoo = eager is not None
    compiled_s, low_s, high_s, ideal_s = _forward_s(model, size, batch, chip, True, zoo)
    eager_s = _forward_s(model, size, batch, chip, False, zoo)[0]
    eager_batch, eager_ms = eager or (
        INFERENCE_BATCH, dict((m, t) for m, _, t in INFERENCE_MS[chip_id])[model])
    measured_eager_s = eager_ms / 1e3 * batch / eager_batch
    return {"chip": chip_id, "model": model, "image_size": size, "batch": batch,
            "task": "zoo" if zoo else "inference",
            "measured_s": ms / 1e3, "pipelined_s": compiled_s, "low_s": low_s,
            "high_s": high_s, "ideal_s": ideal_s, "predicted_eager_s": eager_s,
            "measured_eager_s": measured_eager_s,
            "measured_speedup": measured_eager_s / (ms / 1e3),
            "predicted_speedup": eager_s / compiled_s}


def speedup_summary(found: list[dict]) -> dict:
    errors = [abs(p["predicted_speedup"] / p["measured_speedup"] - 1) for p in found]
    return {"median_error": round(statistics.median(errors), 3),
            "worst_error": round(max(errors), 3)}


def main(argv=None) -> int:
    args = parsed_output_arguments(__doc__, argv)
    if timm_missing("bench_public_dynamo"):
        return 0
    found = [point(chip, *row) for chip, rows in COMPILED_MS.items() for row in rows]
    eager_zoo = {(m, size): (batch, ms) for m, size, batch, ms in ZOO_SAMPLE_4090}
    found += [point("rtx_4090", m, size, batch, ms, eager_zoo[m, size])
              for m, size, batch, ms in ZOO_COMPILED_MS_4090]
    for p in found:
        print(f"{p['chip']:9s} {p['model']:29s} b{p['batch']:<5d} compiled measured "
              f"{p['measured_s'] * 1e3:7.1f} ms"
              f"  predicted x{p['pipelined_s'] / p['measured_s']:.2f}"
              f"  speed-up over eager measured {p['measured_speedup']:.2f}"
              f" predicted {p['predicted_speedup']:.2f}", file=sys.stderr)
    result = {"benchmark": "public_dynamo", "reference": SOURCE, "points": len(found),
              **summary(found, ("pipelined", "ideal")), "speedup": speedup_summary(found),
              **{chip: {**summary([p for p in found if p["chip"] == chip],
                                  ("pipelined", "ideal")),
                        "speedup": speedup_summary([p for p in found if p["chip"] == chip])}
                 for chip in COMPILED_MS},
              **{task: {**summary([p for p in found if p["task"] == task],
                                  ("pipelined", "ideal")),
                        "speedup": speedup_summary([p for p in found if p["task"] == task])}
                 for task in ("inference", "zoo")}}
    report(result, args, found)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
