"""Coverage: how much of the model zoo fxroof annotates, forward+backward, and how many ops fall
to the default (bytes-only) rule.

Sets: every torchvision classification model (torchvision.models.list_models, not a hand-picked
list), a set of Hugging Face configs (2 layers each, so the set runs in seconds; the op set does
not depend on depth) and a set of timm models spanning its families. Targets (issue 6): 100% of
models annotate; 0 default-rule ops in the torchvision set. Prints one JSON line per model and
one per set.

    python benchmarks/bench_coverage.py [--sets torchvision hf timm] [--batch 2]

With ``--device cuda --amp bf16 --step`` (issue 15) each model is analysed as the whole
training step for the CUDA target: CUDA's dispatch choices, its autocast policy, a loss
(cross-entropy, or an hf: causal model's LM loss) and an AdamW update (foreach, CUDA's
default). Unattributed nodes are backward nodes with no forward node other than the loss's
seed (autograd's engine makes it outside any node), and nodes of any phase with neither a
module nor a layer type.
"""
import argparse
import json
import time
from collections import Counter

import os
import sys

from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import script_main  # noqa: E402

import fxroof  # noqa: E402
from fxroof.models import torchvision_names  # noqa: E402

HF_CONFIGS = ["gpt2", "bert", "roberta", "distilbert", "albert", "electra", "llama", "mistral",
              "qwen2", "gemma", "phi", "opt", "gpt_neox", "bart", "t5", "vit", "deit", "swin",
              "convnext", "resnet", "whisper", "clip", "wav2vec2"]
TIMM_MODELS = [
    "resnet50", "resnext50_32x4d", "convnext_tiny", "efficientnet_b0", "mobilenetv3_large_100",
    "regnety_016", "ghostnet_100", "rexnet_100", "hrnet_w18_small", "dla34", "dpn68",
    "nfnet_l0", "vit_base_patch16_224", "deit_tiny_patch16_224", "eva02_tiny_patch14_224",
    "swin_tiny_patch4_window7_224", "maxvit_tiny_tf_224", "coatnet_0_rw_224", "levit_128",
    "mixer_b16_224", "xcit_tiny_12_p16_224", "poolformer_s12", "convmixer_768_32",
    "cait_xxs24_224", "volo_d1_224", "crossvit_tiny_240", "twins_pcpvt_small", "pit_ti_224",
    "edgenext_small", "mobilevit_s", "fastvit_t8", "repvit_m1", "efficientvit_b0",
]
# torchvision's architectures, each named by the prefix its variants share (longest first,
# so efficientnet_v2_s is not an efficientnet): the variants differ in depth, width and
# resolution, not in the ops they reach -- which this script's torchvision set checks
# ("families" in its summary), so the test suite traces one variant of each
# (tests/test_torchvision_coverage.py) and this script all 80.
TORCHVISION_FAMILIES = ("efficientnet_v2", "efficientnet", "mobilenet_v3", "regnet_x",
                        "regnet_y", "swin_v2", "swin", "wide_resnet", "resnext", "resnet",
                        "convnext", "densenet", "mnasnet", "shufflenet_v2", "squeezenet",
                        "vit", "vgg")


def torchvision_family(name: str) -> str:
    """The architecture a torchvision model name is a variant of (vgg16_bn: vgg with batch
    norm, "vgg_bn"); a name no family prefix matches is its own."""
    prefix = next((p for p in TORCHVISION_FAMILIES if name.startswith(p)), name)
    return prefix + "_bn" if prefix != name and name.endswith("_bn") else prefix


def same_ops_per_family(rows: list[dict]) -> dict:
    """{family: True where every variant analysed reached the same ATen ops}."""
    ops = {}
    for r in rows:
        ops.setdefault(torchvision_family(r["model"]), set()).add(tuple(r["ops"]))
    return {family: len(sets) == 1 for family, sets in sorted(ops.items())}


HF_SHALLOW = {"num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "encoder_layers": 2,
              "decoder_layers": 2, "num_decoder_layers": 2}
# A speech encoder's LayerDrop and SpecAugment masks draw random numbers that decide shapes,
# which fake tensors cannot trace: off, as in its evaluation
HF_NO_DROP = {"layerdrop": 0.0, "mask_time_prob": 0.0}


def specs(name: str) -> list[tuple[str, dict]]:
    if name == "torchvision":
        return [(n, {}) for n in torchvision_names()]
    if name == "hf":
        return [(f"hf:{t}", {}) for t in HF_CONFIGS]
    return [(f"timm:{t}", {}) for t in TIMM_MODELS]


def hf_overrides(spec: str) -> dict:
    """Only the depth keys this config class has (others would become stray attributes)."""
    import transformers

    config = transformers.AutoConfig.for_model(spec[3:])
    keys = {k: v for k, v in {**HF_SHALLOW, **HF_NO_DROP}.items() if hasattr(config, k)}
    if spec[3:] in ("swin", "convnext", "resnet"):  # staged models: depth is per stage
        return {}
    return keys


def step_options(spec: str, device: str, amp, step: bool) -> dict:
    options = {"device": device, "amp": amp}
    if step:
        options.update(loss=_loss_of(spec), optimizer="adamw")
    return options


def _loss_of(spec: str):
    """Cross-entropy on a classifier's logits, an hf: causal model's LM loss, or the mean of
    the output where a model gives neither (an hf: encoder's hidden states)."""
    if not spec.startswith("hf:"):
        return "cross_entropy"
    import transformers

    config = transformers.AutoConfig.for_model(spec[3:])
    return "lm" if type(config) in transformers.MODEL_FOR_CAUSAL_LM_MAPPING \
        else _mean_of_output


def _mean_of_output(output):
    tensor = output if hasattr(output, "mean") else next(
        v for v in (output.values() if hasattr(output, "values") else output)
        if hasattr(v, "mean") and v.is_floating_point())
    return tensor.float().mean()


def run(spec: str, batch: int, options: dict) -> dict:
    start = time.perf_counter()
    try:
        extra = {"hf_config": hf_overrides(spec)} if spec.startswith("hf:") \
            else {}
        g = fxroof.analyze(spec, batch=batch, backward=True, **extra,
                           **step_options(spec, **options))
    except Exception as e:  # a failure is a finding, not a crash of the benchmark
        return {"model": spec, "ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    coverage = g.coverage()
    return {"model": spec, "ok": True, "seconds": round(time.perf_counter() - start, 2),
            "ops": sorted({r["target"] for r in g.records()}),
            "nodes": coverage["nodes"], "default_rule_nodes": sum(
                coverage["default_rule_ops"].values()),
            "default_rule_ops": coverage["default_rule_ops"],
            "unattributed": unattributed(g)}


def unattributed(g) -> int:
    seeds = 1 if g.model.loss else 0  # loss.backward()'s ones_like, made by the engine
    backward = sum(1 for r in g.records("backward") if r["forward_node"] is None)
    anonymous = sum(1 for r in g.records() if not r["module"] and not r["layer_type"])
    return max(backward - seeds, 0) + anonymous


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["torchvision", "hf", "timm"],
                        choices=["torchvision", "hf", "timm"])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="the target recorded (cuda needs no GPU)")
    parser.add_argument("--amp", choices=["fp16", "bf16"], help="autocast precision")
    parser.add_argument("--step", action="store_true",
                        help="the whole training step: loss and AdamW update")
    args = parser.parse_args()
    options = {"device": args.device, "amp": args.amp, "step": args.step}
    for name in args.sets:
        rows = []
        for spec, _ in tqdm(specs(name), desc=name, unit="model"):
            rows.append(run(spec, args.batch, options))
            print(json.dumps({"benchmark": "coverage", "set": name, **rows[-1]}), flush=True)
        ok = [r for r in rows if r["ok"]]
        ops = Counter()
        for r in ok:
            ops.update(r["default_rule_ops"])
        print(json.dumps({
            "benchmark": "coverage_set", "set": name, "models": len(rows),
            "annotated": len(ok), "annotated_pct": round(100 * len(ok) / len(rows), 1),
            "nodes": sum(r["nodes"] for r in ok),
            "default_rule_nodes": sum(r["default_rule_nodes"] for r in ok),
            "models_with_default_rule_ops": sum(1 for r in ok if r["default_rule_nodes"]),
            "default_rule_ops": dict(ops),
            "unattributed": sum(r["unattributed"] for r in ok),
            "seconds": round(sum(r.get("seconds", 0) for r in ok), 1),
            "failures": {r["model"]: r["error"] for r in rows if not r["ok"]},
            **({"families": same_ops_per_family(ok)} if name == "torchvision" else {})}),
            flush=True)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
