"""fxroof's forward MACs against the counts timm publishes beside its benchmark times.

    python benchmarks/bench_timm_gmacs.py [--json r.json [--force]]

timm's benchmark.py counts each model's multiply-accumulates at batch 1 with fvcore
(``infer_gmacs``: fvcore's per-op handlers over a jit trace -- convolutions, linear layers,
matrix products, attention, norms, pooling; an op it has no handler for counts zero). The
models here are a spread of timm's zoo (CNNs, ViTs and their hybrids, MLP mixers, an LSTM
mixer, reparameterized nets) with the count and image size of
benchmark-infer-amp-nchw-pt291-cu128-4090.csv, the file bench_public_timm.py takes its
RTX 4090 times from. fxroof's side is half the FLOPs of its matrix-class nodes
(convolutions, products, attention, recurrent layers), each from a closed form in op_costs/,
of the model analysed reparameterized at batch 1 as that run was; and half the FLOPs of all
its nodes, since fvcore also counts norms and pooling (about one per element) where a MAC
count would not. A count agrees where timm's lies between the two, give or take 2% and
timm's rounding.

This is a cross-check, not a reference: where the two differ, the op and its closed form
say which is right (benchmarks/README.md, "FLOP counts against timm's"). Skipped where timm
(an optional extra) is not installed.
"""
from __future__ import annotations

import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import (parsed_output_arguments, report, script_main,  # noqa: E402
                        timm_missing)
from fxroof import analyze  # noqa: E402

SOURCE = ("timm (huggingface/pytorch-image-models) results/benchmark-infer-amp-nchw-pt291-"
          "cu128-4090.csv, columns infer_img_size and infer_gmacs")
# (model, image size, infer_gmacs: GMAC per image)
TIMM_GMACS = [
    ("efficientvit_m0", 224, 0.08), ("shvit_s1", 224, 0.24), ("levit_128s", 224, 0.3),
    ("vit_small_patch32_224", 224, 1.15), ("regnetx_002", 224, 0.2), ("resnet18", 224, 1.82),
    ("mixer_s32_224", 224, 1.0), ("repvgg_a0", 224, 1.36), ("mobileone_s0", 224, 0.28),
    ("gernet_s", 224, 0.75), ("cs3darknet_s", 256, 0.72), ("convnext_atto", 224, 0.55),
    ("hardcorenas_a", 224, 0.23), ("mobilevit_xxs", 256, 0.42), ("dla46_c", 224, 0.58),
    ("pvt_v2_b0", 224, 0.57), ("xcit_nano_12_p16_224", 224, 0.56),
    ("crossvit_tiny_240", 240, 1.57), ("pit_ti_224", 224, 0.7),
    ("efficientnet_lite0", 224, 0.4), ("rexnet_100", 224, 0.41),
    ("hrnet_w18_small", 224, 1.61), ("skresnet18", 224, 1.82), ("dla34", 224, 3.07),
    ("mixnet_s", 224, 0.25), ("ghostnetv2_100", 224, 0.18), ("fastvit_t8", 256, 0.69),
    ("edgenext_x_small", 256, 0.54), ("selecsls42", 224, 2.94), ("nf_regnet_b0", 192, 0.37),
    ("seresnet18", 224, 1.82), ("inception_next_atto", 224, 0.5), ("hgnetv2_b0", 224, 0.33),
    ("mobilenetv4_conv_medium", 224, 0.84), ("efficientvit_b0", 224, 0.1),
    ("visformer_tiny", 224, 1.27), ("tf_efficientnetv2_b0", 224, 0.73),
    ("mnasnet_100", 224, 0.33), ("regnety_008", 224, 0.81), ("vgg13_bn", 224, 11.33),
    ("repvgg_b3", 224, 26.21), ("nf_resnet101", 224, 8.01), ("halonet50ts", 256, 5.3),
    ("hiera_small_224", 224, 6.42), ("maxvit_tiny_rw_224", 224, 5.11),
    ("mvitv2_tiny", 224, 4.7), ("gcvit_tiny", 224, 4.79),
    ("eva02_base_patch16_clip_224", 224, 17.62), ("lambda_resnet50ts", 256, 5.07),
    ("volo_d2_224", 224, 14.34), ("convit_small", 224, 5.76),
    ("efficientformerv2_s0", 224, 0.41), ("botnet50ts_256", 256, 5.54),
    ("convmixer_1024_20_ks9_p14", 224, 5.55), ("dla169", 224, 11.6), ("hrnet_w30", 224, 8.15),
    ("coat_tiny", 224, 4.35), ("swin_small_patch4_window7_224", 224, 8.77),
    ("vit_base_patch16_224", 224, 17.58), ("densenet121", 224, 2.87),
    ("inception_v3", 299, 5.73), ("caformer_s18", 224, 4.13), ("poolformer_s36", 224, 5.0),
    ("sequencer2d_m", 224, 6.55), ("tnt_s_patch16_224", 224, 5.25),
    ("cait_xxs36_224", 224, 3.77), ("xcit_tiny_12_p8_224", 224, 4.81),
    ("twins_pcpvt_large", 224, 9.84), ("mambaout_femto", 224, 1.16),
    ("focalnet_small_srf", 224, 8.62), ("efficientvit_l2", 224, 6.97),
    ("coatnet_0_rw_224", 224, 4.43), ("fastvit_sa24", 256, 3.77), ("swiftformer_xs", 224, 0.61),
    ("starnet_s1", 224, 0.42), ("resmlp_24_224", 224, 5.96), ("gmixer_24_224", 224, 5.28),
    ("gmlp_s16_224", 224, 4.42), ("mixer_b16_224", 224, 12.62), ("pit_b_224", 224, 12.42),
    ("beit_base_patch16_224", 224, 17.58), ("efficientnet_b0", 224, 0.4),
    ("levit_128", 224, 0.41), ("resnet50", 160, 2.1), ("convnext_base", 224, 15.38),
    ("ese_vovnet99b", 224, 16.51), ("inception_v4", 299, 12.28),
    ("resnest50d_4s2x40d", 224, 4.4), ("nfnet_f0", 256, 12.62), ("dpn92", 224, 6.54),
    ("efficientnet_b3", 288, 1.63), ("tresnet_l", 224, 10.9), ("cspdarknet53", 256, 6.57),
    ("regnetz_040", 256, 4.06), ("vit_base_patch16_rope_224", 224, 17.58),
    ("davit_small", 224, 8.8), ("pvt_v2_b2", 224, 4.05), ("res2net50_26w_4s", 224, 4.28),
    ("mobilevitv2_150", 256, 4.09), ("efficientformer_l3", 224, 3.93),
    ("nextvit_small", 224, 5.8),
]
# timm rounds its counts to 0.01 GMAC: a model of 0.08 GMAC is known to +-6% only
ROUNDING_GMAC = 0.005


def macs(model: str, size: int) -> tuple[dict, float]:
    """({op: GMAC} of a model's matrix-class nodes, GMAC of all its nodes) at batch 1: half
    their FLOPs."""
    records = analyze(f"timm:{model}", input_shapes=[(1, 3, size, size)],
                      reparameterize=True).records()
    by_op: dict = {}
    for r in records:
        if r["op_class"] == "matrix":
            by_op[r["op"]] = by_op.get(r["op"], 0.0) + r["flops"] / 2e9
    return by_op, sum(r["flops"] for r in records) / 2e9


def point(model: str, size: int, timm_gmacs: float) -> dict:
    by_op, every_node = macs(model, size)
    ours = sum(by_op.values())
    low, high = ours * 0.98 - ROUNDING_GMAC, every_node * 1.02 + ROUNDING_GMAC
    return {"model": model, "image_size": size, "timm_gmacs": timm_gmacs,
            "fxroof_gmacs": round(ours, 4), "fxroof_all_nodes_gmacs": round(every_node, 4),
            "ratio": round(ours / timm_gmacs, 4), "agrees": low <= timm_gmacs <= high,
            # where they do not, which ops hold fxroof's count
            "largest_ops": {op: round(v, 4) for op, v in
                            sorted(by_op.items(), key=lambda kv: -kv[1])[:3]}}


def main(argv=None) -> int:
    args = parsed_output_arguments(__doc__, argv)
    if timm_missing("bench_timm_gmacs"):
        return 0
    found = [point(*row) for row in TIMM_GMACS]
    for p in found:
        mark = "" if p["agrees"] else "  <- differs"
        print(f"{p['model']:32s} {p['image_size']:4d}px timm {p['timm_gmacs']:7.2f} GMAC  "
              f"fxroof {p['fxroof_gmacs']:8.3f} GMAC x{p['ratio']:.3f} (all nodes "
              f"{p['fxroof_all_nodes_gmacs']:.3f}){mark}", file=sys.stderr)
    errors = [abs(p["ratio"] - 1) for p in found]
    result = {"benchmark": "timm_gmacs", "reference": SOURCE, "models": len(found),
              "median_abs_difference": round(statistics.median(errors), 4),
              "within_2_percent": sum(e <= 0.02 for e in errors),
              "agreeing": sum(p["agrees"] for p in found),
              "differing": [{k: p[k] for k in ("model", "timm_gmacs", "fxroof_gmacs",
                                               "largest_ops")}
                            for p in found if not p["agrees"]]}
    report(result, args, found)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
