"""fxroof's GPU predictions against public whole-model measurements it was never fitted on.

    python benchmarks/bench_public_gpu.py [--json r.json [--force]]

Two references, both running NVIDIA DeepLearningExamples' ResNet50 v1.5 for PyTorch
(torchvision's resnet50 is v1.5; github.com/NVIDIA/DeepLearningExamples,
PyTorch/Classification/ConvNets):
* DeepLearningExamples' own README (resnet50v1.5/README.md), pytorch-21.03 NGC container:
  - "Inference performance results": throughput and average latency per batch on a DGX-1
    V100 16GB (fxroof chip v100_sxm2) and a T4, FP32 and mixed precision; the steady step is
    batch / throughput (DLE_THROUGHPUT says why), the average latency reported beside it;
  - "Training performance results", 1 GPU: images/s on a DGX-1 V100 16GB (FP32, batch 112;
    mixed precision, batch 256) and a DGX A100 80GB (TF32 and mixed precision, batch 256).
  The batches are those of its configs.yml for the DGX1V and DGXA100 platforms, which also
  run mixed precision channels-last ("memory_format: nhwc"), so fxroof analyses those
  points channels-last. The loop has a DALI input pipeline, label smoothing and mixup.
  Its ResNeXt101-32x4d and SE-ResNeXt101-32x4d READMEs (same container): the same
  inference tables and 1-GPU training on an A100 80GB and a V100 16GB, analysed as timm's
  resnext101_32x4d and seresnext101_32x4d (skipped where timm is not installed).
  And its EfficientNet-B0 README (efficientnet/README.md, same container): inference on
  the A100 80GB (TF32) and the V100 16GB (FP32), NCHW, and in mixed precision, channels-last
  (its configs.yml), batches 1-256.
* Lambda's GPU benchmarks (github.com/lambdal/deeplearning-benchmark, pytorch/
  pytorch-train-throughput-fp32.csv and -fp16.csv, 1 GPU, images/s, batches from
  pytorch-train-bs-fp32.csv and -fp16.csv, or for the H100 SXM5 from
  scripts/config_v1/config_pytorch_80GB.sh): the same training script with synthetic data
  ("--data-backend synthetic"), NCHW (no memory-format flag), mixed precision by "--amp";
  FP32 on Ampere and later runs its convolutions in TF32 (PyTorch's cuDNN default).
  Lambda also trains BERT-base on SQuAD with DeepLearningExamples' BERT (LanguageModeling/
  BERT, run_squad.sh: 384-token sequences; sequences/s, batches from the same files): its
  modeling.py computes attention unfused (matmul, softmax, dropout, matmul), so fxroof
  analyses transformers' BertForQuestionAnswering with its eager attention and AdamW; for
  FP32, with TF32 matmuls, as the NGC containers it runs in enable them
  (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1: docs.monai.io, "Precision and Accelerating"); for
  --fp16, as a half model: the run_squad.py read (commit 0663b67) initialises apex amp at
  opt_level "O2" (fp16 weights and activations, softmax included, FP32 master weights).
  Skipped where transformers (an optional extra) is not installed.
* Largest matrix products: the "maximum achievable matmul FLOPS" of mag-/gpu_benchmark's
  README (github.com/mag-/gpu_benchmark, "Stats": Stas Bekman's mamf-finder, torch.mm in
  bf16, its default, at the fastest shape found) on the RTX 4090, L4, L40S, A100 SXM and
  H100 SXM, against fxroof's kernel time for that product (the node's time less its host
  cost): a check of the tensor-core GEMM rate alone, reported apart from the steps.
* Square products held for a while: zzc0721/torch-performance-test-data (test.py: torch.mm
  of two n x n tensors, 6 warm-up calls then 30 timed back to back, n = 1024 ... 10240;
  TFLOP/s = 2 n^3 x 30 / elapsed). Its issue #120 lists every size on an L4 (torch 2.9,
  FP32, FP16, BF16), from which the three largest are taken: a 72 W board sustaining its
  products, where mamf-finder's fastest shape is a best case. FP32 there is true FP32 (torch
  leaves TF32 matmuls off by default).
* LLM decode steps, batch 1 (each token reads every weight once): gpt-fast's README
  (github.com/meta-pytorch/gpt-fast, "Benchmarks": an A100 80GB power-limited to 330 W,
  torch.compile with CUDA graphs, a 5-token prompt; tokens/s of Llama-2-7B and
  Llama-3.1-8B in BF16) and its issue 27 (a Llama-2-7B at about 65 tokens/s on an RTX 4090,
  which the maintainer's reply puts near the board's bandwidth). A compiled step fuses what
  eager runs as hundreds of elementwise kernels, which fxroof prices only for the CPU, so the
  step is checked against the part fxroof can price for it: the kernel time of its matrix-
  vector products (HF's LlamaForCausalLM at one token; the weights' stream, which no faster
  program avoids). That part must not exceed the measured step; how close it comes says how
  much of the step is that stream. Reported apart from the steps.
* Copies: chsasank/device-benchmarks' README lists the bandwidth its benchmark.py measured
  copying 0.38 GB of fp32 (``a.copy_(b)``, timed with the launch and a synchronize) on a
  T4, A10, V100 32GB, RTX 3090 and RTX 4090: a check of the streaming rate a chip takes
  (its elementwise class's memory fraction: NeuSight's own fits for the T4 and V100, the
  families' for the rest), against fxroof's time for that op alone. Reported apart.
Both ran with cuDNN's engine search on (DeepLearningExamples' ConvNets/main.py sets
``cudnn.benchmark = True``), so the points are analysed with it on
(fxroof.roofline.cudnn_searched).
Training points are fxroof's step with cross-entropy (for BERT, over the start and end
logits) and SGD with momentum (BERT: AdamW), the measured step time batch / throughput.
The timings are of those loops (cuDNN autotuning on), not of fxroof's step, so read the
errors as an outside check, not as a target.

For each point: fxroof's calibrated prediction (the shipped GPU parameters, the eager step
pipelined, fxroof.pipeline), the plain sum of the nodes' isolated times that the pipeline
replaced, and the ideal roof.
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys

import torch
from scipy.stats import spearmanr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import parsed_output_arguments, script_main  # noqa: E402
from fxroof import analyze  # noqa: E402
from fxroof.chips import get_chip  # noqa: E402
from fxroof.files import write_json  # noqa: E402
from fxroof.op_classes import op_class_of  # noqa: E402
from fxroof.prediction import predict  # noqa: E402
from fxroof.roofline import cudnn_search  # noqa: E402
from fxroof.time_model import node_time  # noqa: E402

SOURCE = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md,"
          " inference throughput avg and 1-GPU training throughput (pytorch-21.03 NGC container);"
          " Lambda's deeplearning-benchmark, pytorch/pytorch-train-throughput-fp32.csv and"
          " -fp16.csv, resnet50, 1 GPU")
# (chip, autocast precision or None for FP32) -> {batch: measured average latency, ms}
RESNET50_LATENCY_MS = {
    ("v100_sxm2", None): {1: 10.37, 2: 10.24, 4: 10.46, 8: 11.5, 16: 16.07, 32: 29.37,
                          64: 55.4, 128: 109.26, 256: 214.48},
    ("v100_sxm2", "fp16"): {1: 12.78, 2: 13.01, 4: 13.41, 8: 13.65, 16: 14.0, 32: 15.84,
                            64: 23.18, 128: 43.55, 256: 84.14},
    ("t4", None): {1: 10.7, 2: 11.26, 4: 12.73, 8: 22.41, 16: 39.77, 32: 77.62, 64: 152.73,
                   128: 309.26, 256: 635.98},
    ("t4", "fp16"): {1: 12.96, 2: 13.18, 4: 12.99, 8: 12.82, 16: 15.8, 32: 29.54, 64: 57.41,
                     128: 114.24, 256: 225.95},
}
# EfficientNet-B0 (DeepLearningExamples' efficientnet/README.md, same container), FP32 on the
# V100 and TF32 on the A100, NCHW: {chip: {batch: measured average latency, ms}}. Its
# EfficientNet-B0 is the paper's network, as torchvision's efficientnet_b0 is.
EFFICIENTNET_B0_LATENCY_MS = {
    "a100_sxm_80gb": {1: 9.33, 2: 9.39, 4: 9.68, 8: 9.85, 16: 10.27, 32: 11.46, 64: 19.58,
                      128: 31.03, 256: 60.71},
    "v100_sxm2": {1: 13.15, 2: 13.17, 4: 13.25, 8: 13.42, 16: 13.78, 32: 16.46, 64: 25.14,
                  128: 48.03, 256: 94.86},
}
# ... and its mixed precision rows (added 2026-11-28, session 70, never fitted on), which run
# channels-last: configs.yml, efficientnet-b0, DGXA100 and DGX1V-16G, AMP: "memory_format:
# nhwc" (TF32 and FP32 take the default, NCHW). Kept out of latency_steps, which the host's
# band was fitted on (fit_host_band.py).
EFFICIENTNET_B0_AMP_LATENCY_MS = {
    "a100_sxm_80gb": {1: 11.21, 2: 11.01, 4: 11.45, 8: 11.78, 16: 11.89, 32: 13.03, 64: 12.71,
                      128: 18.78, 256: 39.05},
    "v100_sxm2": {1: 17.19, 2: 17.96, 4: 17.9, 8: 17.38, 16: 18.23, 32: 19.29, 64: 20.34,
                  128: 26.11, 256: 49.36},
}
# The same tables' "Throughput Avg" column, images/s at batches 1, 2, 4, ... 256: the steady
# step is batch / throughput. Each table's "Latency Avg" is a mean over the run's iterations
# (100 with --prof 100; EfficientNet's scripts run a pass over the validation set), warm-up
# included, and cuDNN's engine search (cudnn.benchmark) times every candidate kernel on the
# first call of each shape: at batch 64 and up the average lies above the table's own 95th
# percentile (ResNet-50 FP32 on the V100 at 256: 214.48 ms average, 202.51 ms p95, 256 /
# 1261 img/s = 203.0 ms; EfficientNet-B0 on the A100: 60.71, 49.44, 49.7 ms), which only a
# few far slower iterations can do. The throughput, a mean of per-iteration rates, barely
# moves for them, so it is what fxroof's steady step is compared with; the average latency
# is kept beside it. (Rounded to 2-4 figures: up to 2.5% at batch 1.)
DLE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DLE_THROUGHPUT = {
    ("resnet50", "v100_sxm2", None): (96, 196, 386, 709, 1023, 1127, 1200, 1229, 1261),
    ("resnet50", "v100_sxm2", "fp16"): (78, 154, 300, 595, 1178, 2146, 2984, 3249, 3382),
    ("resnet50", "t4", None): (98, 186, 325, 363, 409, 420, 428, 426, 415),
    ("resnet50", "t4", "fp16"): (79, 156, 317, 652, 1050, 1128, 1165, 1190, 1198),
    ("efficientnet_b0", "a100_sxm_80gb", None): (130, 262, 503, 1004, 1880, 3401, 4656, 5001,
                                                 5154),
    ("efficientnet_b0", "v100_sxm2", None): (83, 167, 332, 657, 1289, 2140, 2743, 2908, 2968),
    ("efficientnet_b0", "a100_sxm_80gb", "fp16"): (105, 214, 412, 803, 1584, 2915, 6315, 9311,
                                                   10239),
    ("efficientnet_b0", "v100_sxm2", "fp16"): (62, 119, 238, 495, 945, 1784, 3480, 5759, 6176),
    ("timm:resnext101_32x4d", "v100_sxm2", None): (55, 105, 170, 336, 397, 452, 500, 527, 533),
    ("timm:resnext101_32x4d", "v100_sxm2", "fp16"): (43, 84, 164, 333, 640, 1195, 1595, 1699,
                                                     1746),
    ("timm:resnext101_32x4d", "t4", None): (56, 109, 151, 164, 172, 180, 178, 172, 161),
    ("timm:resnext101_32x4d", "t4", "fp16"): (44, 87, 178, 371, 553, 578, 591, 597, 598),
    ("timm:seresnext101_32x4d", "v100_sxm2", None): (40, 80, 127, 250, 363, 423, 472, 501,
                                                     508),
    ("timm:seresnext101_32x4d", "v100_sxm2", "fp16"): (29, 58, 117, 232, 459, 871, 1416, 1533,
                                                       1576),
    ("timm:seresnext101_32x4d", "t4", None): (40, 75, 136, 155, 164, 173, 171, 165, 158),
    ("timm:seresnext101_32x4d", "t4", "fp16"): (31, 61, 123, 262, 482, 512, 527, 525, 527),
}
# ResNeXt101-32x4d and SE-ResNeXt101-32x4d (DeepLearningExamples' resnext101-32x4d/ and
# se-resnext101-32x4d/README.md, the same container; added 2026-11-27, session 62, never
# fitted on): inference latency on the V100 16GB and the T4, FP32 NCHW and mixed precision
# channels-last (configs.yml: memory_format nhwc for AMP). Their networks are timm's
# resnext101_32x4d and seresnext101_32x4d: the README's config -- Bottleneck, cardinality
# 32, layers [3, 4, 23, 3], widths [128, 256, 512, 1024], expansion 2 -- is timm's ResNet at
# cardinality 32, base width 4; SE-ResNeXt adds a squeeze-excitation block (reduction 16)
# before each residual add. Skipped where timm (an optional extra) is not installed.
# {(timm model, chip, autocast precision or None): {batch: measured average latency, ms}}
RESNEXT_LATENCY_MS = {
    ("timm:resnext101_32x4d", "v100_sxm2", None): {
        1: 17.95, 2: 19.2, 4: 23.65, 8: 24.05, 16: 40.77, 32: 72.12, 64: 130.9, 128: 249.57,
        256: 496.76},
    ("timm:resnext101_32x4d", "v100_sxm2", "fp16"): {
        1: 23.08, 2: 23.65, 4: 24.38, 8: 24.18, 16: 25.4, 32: 27.72, 64: 41.89, 128: 79.45,
        256: 154.68},
    ("timm:resnext101_32x4d", "t4", None): {
        1: 18.18, 2: 18.77, 4: 26.89, 8: 48.99, 16: 93.51, 32: 178.83, 64: 361.95,
        128: 756.93, 256: 1615.79},
    ("timm:resnext101_32x4d", "t4", "fp16"): {
        1: 23.0, 2: 23.14, 4: 22.8, 8: 21.98, 16: 29.47, 32: 56.56, 64: 110.82, 128: 220.44,
        256: 439.3},
    ("timm:seresnext101_32x4d", "v100_sxm2", None): {
        1: 24.92, 2: 24.89, 4: 31.58, 8: 32.29, 16: 44.5, 32: 76.86, 64: 138.36, 128: 262.64,
        256: 519.84},
    ("timm:seresnext101_32x4d", "v100_sxm2", "fp16"): {
        1: 33.83, 2: 34.35, 4: 34.33, 8: 34.66, 16: 35.23, 32: 37.62, 64: 46.95, 128: 87.49,
        256: 170.79},
    ("timm:seresnext101_32x4d", "t4", None): {
        1: 25.12, 2: 26.82, 4: 29.79, 8: 51.74, 16: 97.99, 32: 186.31, 64: 378.1,
        128: 785.83, 256: 1641.96},
    ("timm:seresnext101_32x4d", "t4", "fp16"): {
        1: 32.51, 2: 32.76, 4: 32.98, 8: 31.01, 16: 33.76, 32: 63.68, 64: 123.57,
        128: 248.97, 256: 496.23},
}
# ... and their 1-GPU training throughput (the same READMEs; batches from configs.yml, DGXA100
# and DGX1V): (model, chip, autocast precision or None, memory format, batch, images/s)
RESNEXT_TRAINING = [
    ("timm:resnext101_32x4d", "a100_sxm_80gb", None, None, 128, 456),
    ("timm:resnext101_32x4d", "a100_sxm_80gb", "fp16", "channels_last", 128, 1211),
    ("timm:resnext101_32x4d", "v100_sxm2", None, None, 64, 147),
    ("timm:resnext101_32x4d", "v100_sxm2", "fp16", "channels_last", 128, 587),
    ("timm:seresnext101_32x4d", "a100_sxm_80gb", None, None, 128, 395),
    ("timm:seresnext101_32x4d", "a100_sxm_80gb", "fp16", "channels_last", 128, 855),
    ("timm:seresnext101_32x4d", "v100_sxm2", None, None, 64, 132),
    ("timm:seresnext101_32x4d", "v100_sxm2", "fp16", "channels_last", 112, 443),
]
# 1-GPU training: (reference, chip, autocast precision or None, memory format, batch,
# measured images/s)
RESNET50_TRAINING = [
    ("DeepLearningExamples", "v100_sxm2", None, None, 112, 367),
    ("DeepLearningExamples", "v100_sxm2", "fp16", "channels_last", 256, 1200),
    ("DeepLearningExamples", "a100_sxm_80gb", None, None, 256, 938),
    ("DeepLearningExamples", "a100_sxm_80gb", "fp16", "channels_last", 256, 2470),
    ("Lambda", "v100_sxm2", None, None, 128, 369),
    ("Lambda", "v100_sxm2", "fp16", None, 256, 833),
    ("Lambda", "rtx_3090", None, None, 224, 513),
    ("Lambda", "rtx_3090", "fp16", None, 448, 905),
    ("Lambda", "rtx_4090", None, None, 224, 721),
    ("Lambda", "rtx_4090", "fp16", None, 448, 1301),
    ("Lambda", "a100_sxm_80gb", None, None, 640, 1066),
    ("Lambda", "a100_sxm_80gb", "fp16", None, 1280, 1582),
    ("Lambda", "h100_sxm", None, None, 640, 1753),
    ("Lambda", "h100_sxm", "fp16", None, 1280, 2616),
    # added 2026-11-27 (session 62), the rest of Lambda's 1-GPU rows with a batch in its
    # pytorch-train-bs-*.csv: "LambdaCloud A100 40GB PCIe", "A100 80GB PCIe", "H100 80GB PCIe
    # Gen5", "RTX A6000", "RTX 6000 Ada" (the batch file's "Ada A6000") and "Quadro RTX 8000"
    ("Lambda", "a100_pcie_40gb", None, None, 360, 882),
    ("Lambda", "a100_pcie_40gb", "fp16", None, 720, 1396),
    ("Lambda", "a100_pcie_80gb", None, None, 640, 1014),
    ("Lambda", "a100_pcie_80gb", "fp16", None, 1280, 1527),
    ("Lambda", "h100_pcie", None, None, 640, 1197),
    ("Lambda", "h100_pcie", "fp16", None, 1280, 1866),
    ("Lambda", "rtx_a6000", None, None, 496, 514),
    ("Lambda", "rtx_a6000", "fp16", None, 928, 916),
    ("Lambda", "rtx_6000_ada", None, None, 496, 647),
    ("Lambda", "rtx_6000_ada", "fp16", None, 928, 1146),
    ("Lambda", "quadro_rtx_8000", None, None, 496, 274),
    ("Lambda", "quadro_rtx_8000", "fp16", None, 928, 651),
]


# Lambda, bert_base_squad, 1 GPU: (chip, autocast precision or None, batch, sequences/s)
BERT_BASE_SQUAD_TRAINING = [
    ("v100_sxm2", None, 24, 42), ("v100_sxm2", "fp16", 48, 189),
    ("rtx_3090", None, 48, 85), ("rtx_3090", "fp16", 96, 172),
    ("rtx_4090", None, 48, 137), ("rtx_4090", "fp16", 96, 297),
    ("a100_sxm_80gb", None, 172, 239), ("a100_sxm_80gb", "fp16", 320, 443),
    ("h100_sxm", None, 172, 408), ("h100_sxm", "fp16", 320, 812),
    # added 2026-11-27 (session 62), as the ResNet-50 rows above
    ("a100_pcie_40gb", None, 80, 179), ("a100_pcie_40gb", "fp16", 160, 368),
    ("a100_pcie_80gb", None, 172, 224), ("a100_pcie_80gb", "fp16", 320, 415),
    ("h100_pcie", None, 172, 292), ("h100_pcie", "fp16", 320, 567),
    ("rtx_a6000", None, 96, 101), ("rtx_a6000", "fp16", 192, 198),
    ("rtx_6000_ada", None, 96, 136), ("rtx_6000_ada", "fp16", 192, 255),
    ("quadro_rtx_8000", None, 96, 41), ("quadro_rtx_8000", "fp16", 192, 146),
]
SQUAD_TOKENS = 384
# mag-/gpu_benchmark: (chip, (m, n, k) of the fastest bf16 product found, measured TFLOP/s).
# "A100 SXM" names no memory size: the 80 GB chip's fit is used.
LARGEST_BF16_GEMM = [
    ("rtx_4090", (15360, 6784, 8192), 178.5), ("l4", (1024, 6016, 1792), 91.4),
    ("l40s", (4416, 3776, 3072), 252.0), ("a100_sxm_80gb", (6912, 16384, 2048), 267.9),
    ("h100_sxm", (6144, 17920, 2816), 792.1),
]

# zzc0721/torch-performance-test-data issue #120, NVIDIA L4: dtype -> {n: TFLOP/s}
L4_SQUARE_MM = {
    torch.float32: {4096: 12.53, 8192: 10.66, 10240: 11.11},
    torch.float16: {4096: 53.02, 8192: 53.80, 10240: 52.47},
    torch.bfloat16: {4096: 54.91, 8192: 59.40, 10240: 56.90},
}


# (reference, chip, model, LlamaConfig fields, tokens/s measured at batch 1)
LLAMA_2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000}
LLAMA_3_1_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}
DECODE_STEPS = [
    ("gpt-fast README", "a100_sxm_80gb", "Llama-2-7B", LLAMA_2_7B, 104.9),
    ("gpt-fast README", "a100_sxm_80gb", "Llama-3.1-8B", LLAMA_3_1_8B, 93.89),
    ("gpt-fast issue 27", "rtx_4090", "Llama-2-7B", LLAMA_2_7B, 65.0),
]


def decode_point(reference: str, chip_id: str, model: str, config: dict,
                 tokens_per_s: float) -> dict:
    """One decode step's point: the measured step (1 / tokens/s) and fxroof's kernel time for
    the step's matrix-vector products (BF16, one token, batch 1), with the band and the
    roof (their bytes at the spec bandwidth)."""
    chip = get_chip(chip_id)
    graph = analyze("hf:llama", hf_config=config, seq_len=1, batch=1, dtype=torch.bfloat16,
                    device="cuda", chip=chip)
    products = [node_time(r, chip) for r in graph.records() if op_class_of(r) == "gemv"]
    kernel = sum(t.kernel_s for t in products)
    band = [sum(t.kernel_s * getattr(t, edge) / t.predicted_s for t in products)
            for edge in ("low_s", "high_s")]
    return {"reference": reference, "chip": chip_id, "model": model,
            "measured_s": 1.0 / tokens_per_s, "products_s": kernel,
            "low_s": band[0], "high_s": band[1],
            "ideal_s": sum(t.ideal_s for t in products)}


class _MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def gemm_point(chip_id: str, shape: tuple, tflops: float, dtype=torch.bfloat16) -> dict:
    """One product's point: measured and predicted kernel seconds of an m x k by k x n
    product (2 m n k FLOP), the prediction's band, and the roof's time."""
    m, n, k = shape
    chip = get_chip(chip_id)
    inputs = (torch.empty(m, k, dtype=dtype), torch.empty(k, n, dtype=dtype))
    (record,) = [r for r in analyze(_MatMul(), *inputs, device="cuda", chip=chip).records()
                 if r["op_class"] == "matrix"]
    timed = node_time(record, chip)
    kernel = timed.kernel_s
    low, high = timed.low_s / timed.predicted_s, timed.high_s / timed.predicted_s
    return {"chip": chip_id, "shape": list(shape), "measured_s": 2 * m * n * k / tflops / 1e12,
            "pipelined_s": kernel, "low_s": kernel * low, "high_s": kernel * high,
            "ideal_s": timed.ideal_s}


# chsasank/device-benchmarks README ("Matrix Multiplication FLOPS and BW", its "Memory
# Bandwidth (GB/s)" column): benchmark.py times `a.copy_(b)` of 2^26.5 fp32 elements (0.38 GB
# a tensor) by time.time() around the call and a synchronize, after a warm-up copy, and
# reports 2 x bytes / elapsed, the mean of 10 trials, at that largest size. Left out: "A100
# 80GB" (PCIe or SXM not said: 1935 or 2039 GB/s), "2070S" (831 GB/s, above the board's
# 448: not its memory), "4090 (WSL2)" (the same board under another OS) and boards with no
# chip here. (chip, GB/s)
COPY_GBPS = [("t4", 240), ("a10", 469), ("v100_pcie_32gb", 766), ("rtx_3090", 831),
             ("rtx_4090", 912)]
COPY_ELEMENTS = int(2 ** 26.5)


class _Copy(torch.nn.Module):
    def forward(self, a, b):
        return a.copy_(b)


def copy_point(chip_id: str, gbps: float, elements: int = COPY_ELEMENTS) -> dict:
    """One copy's point: measured seconds of an fp32 copy of ``elements`` (read and written:
    8 bytes an element) at ``gbps``, and fxroof's time for that op alone (its fixed cost,
    as the benchmark's timer holds the launch and the synchronize), band and roof."""
    chip = get_chip(chip_id)
    inputs = (torch.empty(elements), torch.empty(elements))
    (record,) = [r for r in analyze(_Copy(), *inputs, device="cuda", chip=chip).records()
                 if r["bytes"]]
    timed = node_time(record, chip)
    return {"chip": chip_id, "elements": elements,
            "measured_s": 2 * elements * 4 / (gbps * 1e9), "pipelined_s": timed.predicted_s,
            "low_s": timed.low_s, "high_s": timed.high_s, "ideal_s": timed.ideal_s}


def _qa_loss(output):
    """run_squad's loss: cross-entropy over the start and over the end logits."""
    start, end = output.start_logits, output.end_logits
    target = torch.zeros(start.shape[0], dtype=torch.long, device=start.device)
    return torch.nn.functional.cross_entropy(start, target) + \
        torch.nn.functional.cross_entropy(end, target)


@contextlib.contextmanager
def _tf32_matmuls():
    """FP32 matmuls on TF32 tensor cores, as in an NGC container, for the duration."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _bert_point(chip_id: str, amp, batch: int, sequences_per_s: float) -> dict:
    import transformers

    config = transformers.BertConfig()  # bert-base-uncased's shape
    config._attn_implementation = "eager"
    with torch.device("meta"):
        model = transformers.BertForQuestionAnswering(config)
    tokens = torch.zeros(batch, SQUAD_TOKENS, dtype=torch.long)
    inputs = {"input_ids": tokens, "token_type_ids": tokens,
              "attention_mask": torch.ones_like(tokens)}
    chip = get_chip(chip_id)
    # apex O2: the whole model in half precision, not autocast's per-op choice
    dtype = torch.float16 if amp == "fp16" else None
    with _tf32_matmuls():
        records = analyze(model, kwargs=inputs, device="cuda", chip=chip, dtype=dtype,
                          loss=_qa_loss, optimizer="adamw").records()
        return _summarised("Lambda", "bert_base_squad", chip, amp, None, batch,
                           batch / sequences_per_s, "train", records)


def _summarised(reference: str, model: str, chip, amp, memory_format, batch: int,
                measured_s: float, task: str, records: list) -> dict:
    p = predict(records, chip)["overall" if task == "train" else "forward"]
    return {"reference": reference, "model": model, "chip": chip.id,
            "precision": amp or "fp32", "layout": memory_format or "nchw", "batch": batch,
            "task": task, "measured_s": measured_s,
            "pipelined_s": p["predicted_s"], "low_s": p["low_s"], "high_s": p["high_s"],
            "summed_s": sum(node_time(r, chip).predicted_s for r in records),
            "ideal_s": p["ideal_s"]}


def _point(reference: str, chip_id: str, amp, memory_format, batch: int, measured_s: float,
           train: bool, model: str = "resnet50") -> dict:
    chip = get_chip(chip_id)
    step = {"loss": "cross_entropy", "optimizer": "sgd"} if train else {}
    with cudnn_search():
        records = analyze(model, batch=batch, device="cuda", chip=chip, amp=amp,
                          memory_format=memory_format, **step).records()
        return _summarised(reference, model, chip, amp, memory_format, batch, measured_s,
                           "train" if train else "inference", records)


def latency_steps() -> list[tuple]:
    """DeepLearningExamples' inference latencies as (model, chip id, autocast precision or
    None, memory format, batch, measured s): it runs mixed precision channels-last (its
    configs.yml), FP32 NCHW."""
    steps = [("resnet50", chip_id, amp, "channels_last" if amp else None, batch, ms / 1e3)
             for (chip_id, amp), latencies in RESNET50_LATENCY_MS.items()
             for batch, ms in latencies.items()]
    return steps + [("efficientnet_b0", chip_id, None, None, batch, ms / 1e3)
                    for chip_id, latencies in EFFICIENTNET_B0_LATENCY_MS.items()
                    for batch, ms in latencies.items()]


def steady_step_s(model: str, chip_id: str, amp, batch: int) -> float:
    """A DeepLearningExamples inference step's steady time: batch / the table's throughput
    (DLE_THROUGHPUT)."""
    return batch / DLE_THROUGHPUT[model, chip_id, amp][DLE_BATCHES.index(batch)]


def _inference_points(steps) -> list[dict]:
    """DeepLearningExamples' inference points for (model, chip id, autocast precision or None,
    memory format, batch, average latency s) rows: measured at the steady step
    (steady_step_s), the average latency kept beside it."""
    return [{**_point("DeepLearningExamples", chip_id, amp, memory_format, batch,
                      steady_step_s(model, chip_id, amp, batch), train=False, model=model),
             "latency_avg_s": seconds}
            for model, chip_id, amp, memory_format, batch, seconds in steps]


def points() -> list[dict]:
    found = _inference_points(latency_steps())
    found += [_point(reference, chip_id, amp, layout, batch, batch / images_per_s, train=True)
              for reference, chip_id, amp, layout, batch, images_per_s in RESNET50_TRAINING]
    try:
        import transformers  # noqa: F401 -- an optional extra
    except ImportError:
        print("transformers is not installed: the BERT points are left out", file=sys.stderr)
        return found
    return found + [_bert_point(*point) for point in BERT_BASE_SQUAD_TRAINING]


def efficientnet_amp_points() -> list[dict]:
    """DeepLearningExamples' EfficientNet-B0 mixed precision inference points (channels-last,
    EFFICIENTNET_B0_AMP_LATENCY_MS)."""
    return _inference_points(("efficientnet_b0", chip_id, "fp16", "channels_last", batch,
                              ms / 1e3)
                             for chip_id, latencies in EFFICIENTNET_B0_AMP_LATENCY_MS.items()
                             for batch, ms in latencies.items())


def resnext_points() -> list[dict]:
    """DeepLearningExamples' ResNeXt101-32x4d and SE-ResNeXt101-32x4d points (timm's
    networks); none where timm is not installed. Kept out of latency_steps, which
    fit_host_band.py fitted the host's band on."""
    try:
        import timm  # noqa: F401 -- an optional extra
    except ImportError:
        print("timm is not installed: the ResNeXt points are left out", file=sys.stderr)
        return []
    found = _inference_points(
        (model, chip_id, amp, "channels_last" if amp else None, batch, ms / 1e3)
        for (model, chip_id, amp), latencies in RESNEXT_LATENCY_MS.items()
        for batch, ms in latencies.items())
    return found + [_point("DeepLearningExamples", chip_id, amp, layout, batch,
                           batch / images_per_s, train=True, model=model)
                    for model, chip_id, amp, layout, batch, images_per_s in RESNEXT_TRAINING]


STEP_MODELS = ("pipelined", "summed", "ideal")


def summary(found: list[dict], models: tuple = STEP_MODELS) -> dict:
    """Per time model (a step's; a lone kernel has no summed-versus-pipelined): the median,
    p90 and worst |predicted / measured - 1| and the rank correlation, and the share of
    points whose measurement lies inside the calibrated band."""
    result = {}
    for model in models:
        errors = sorted(abs(p[f"{model}_s"] / p["measured_s"] - 1) for p in found)
        rho = spearmanr([p[f"{model}_s"] for p in found], [p["measured_s"] for p in found])[0]
        result[model] = {"median_error": round(statistics.median(errors), 3),
                         "p90_error": round(errors[int(0.9 * (len(errors) - 1))], 3),
                         "worst_error": round(errors[-1], 3),
                         "spearman_rho": round(float(rho), 3)}
    result["inside_band"] = round(sum(p["low_s"] <= p["measured_s"] <= p["high_s"]
                                      for p in found) / len(found), 3)
    return result


def main(argv=None) -> int:
    args = parsed_output_arguments(__doc__, argv)
    found = points() + efficientnet_amp_points() + resnext_points()
    for p in found:
        print(f"{p['model'].removeprefix('timm:')[:8]:8s} {p['task']:9s} {p['chip']:13s} {p['precision']:5s} "
              f"{p['layout']:13s} b{p['batch']:<4d} measured "
              f"{p['measured_s'] * 1e3:7.2f} ms"
              f"  pipelined x{p['pipelined_s'] / p['measured_s']:.2f}"
              f"  summed x{p['summed_s'] / p['measured_s']:.2f}"
              f"  ideal x{p['ideal_s'] / p['measured_s']:.2f}", file=sys.stderr)
    result = {"benchmark": "public_gpu", "reference": SOURCE, "points": len(found),
              **summary(found),
              **{task: summary([p for p in found if p["task"] == task])
                 for task in ("inference", "train")},
              "inference against the average latency": summary(
                  [{**p, "measured_s": p["latency_avg_s"]} for p in found
                   if "latency_avg_s" in p]),
              **{f"{model} {task}": summary([p for p in found
                                             if (p["model"], p["task"]) == (model, task)])
                 for model, task in sorted({(p["model"], p["task"]) for p in found})}}
    gemms = [gemm_point(*point) for point in LARGEST_BF16_GEMM]
    for p in gemms:
        print(f"largest bf16 GEMM {p['chip']:13s} {'x'.join(map(str, p['shape'])):18s} measured "
              f"{p['measured_s'] * 1e3:7.2f} ms"
              f"  predicted x{p['pipelined_s'] / p['measured_s']:.2f}"
              f"  roof x{p['ideal_s'] / p['measured_s']:.2f}", file=sys.stderr)
    result["largest_bf16_gemm"] = summary(gemms, models=("pipelined", "ideal"))
    squares = [gemm_point("l4", (n, n, n), tflops, dtype)
               for dtype, sizes in L4_SQUARE_MM.items() for n, tflops in sizes.items()]
    for p, dtype in zip(squares, [d for d, sizes in L4_SQUARE_MM.items() for _ in sizes]):
        print(f"L4 square mm {str(dtype)[6:]:9s} n={p['shape'][0]:<6d} measured "
              f"{p['measured_s'] * 1e3:7.2f} ms"
              f"  predicted x{p['pipelined_s'] / p['measured_s']:.2f}"
              f"  roof x{p['ideal_s'] / p['measured_s']:.2f}", file=sys.stderr)
    result["l4_square_mm"] = summary(squares, models=("pipelined", "ideal"))
    decodes = [decode_point(*step) for step in DECODE_STEPS]
    for p in decodes:
        print(f"decode {p['model']:12s} {p['chip']:13s} measured {p['measured_s'] * 1e3:6.2f} ms"
              f"  matrix-vector products x{p['products_s'] / p['measured_s']:.2f}"
              f"  their roof x{p['ideal_s'] / p['measured_s']:.2f}", file=sys.stderr)
    result["decode_products_share"] = {
        "median": round(statistics.median(p["products_s"] / p["measured_s"] for p in decodes),
                        3),
        "largest": round(max(p["products_s"] / p["measured_s"] for p in decodes), 3),
        "within_step": all(p["products_s"] <= p["measured_s"] for p in decodes)}
    copies = [copy_point(*point) for point in COPY_GBPS]
    for p in copies:
        print(f"copy of 0.38 GB {p['chip']:15s} measured {p['measured_s'] * 1e3:6.3f} ms"
              f"  predicted x{p['pipelined_s'] / p['measured_s']:.3f}"
              f"  roof x{p['ideal_s'] / p['measured_s']:.3f}", file=sys.stderr)
    result["copy_bandwidth"] = summary(copies, models=("pipelined", "ideal"))
    print(json.dumps(result, indent=1))
    if args.json:
        write_json(args.json, {"summary": result, "points": found, "largest_bf16_gemm": gemms,
                               "l4_square_mm": squares, "decode": decodes,
                               "copy_bandwidth": copies},
                   overwrite=args.force)
    return 0


if __name__ == "__main__":
    script_main(main, __file__)
