"""benchmarks/bench_public_gpu.py: its summary by hand, and one training point analysed as
the reference ran it."""
import pytest
import torch

from benchmarks import bench_public_gpu as bench
from fxroof import chip_params
from fxroof.chips import get_chip


def _point(measured, pipelined, low, high):
    return {"measured_s": measured, "pipelined_s": pipelined, "summed_s": measured,
            "ideal_s": measured / 2, "low_s": low, "high_s": high}


def test_summary_by_hand():
    points = [_point(1.0, 1.1, 0.9, 1.3),    # error 0.1, inside the band
              _point(2.0, 1.5, 1.2, 1.8),    # error 0.25, measured above the band
              _point(4.0, 4.4, 3.0, 5.0),    # error 0.1, inside
              _point(8.0, 9.6, 7.0, 9.0)]    # error 0.2, inside
    s = bench.summary(points)
    assert s["pipelined"]["median_error"] == pytest.approx(0.15)   # (0.1 + 0.2) / 2
    assert s["pipelined"]["worst_error"] == pytest.approx(0.25)
    assert s["pipelined"]["spearman_rho"] == pytest.approx(1.0)    # same order
    assert s["summed"]["median_error"] == 0 and s["ideal"]["median_error"] == 0.5
    assert s["inside_band"] == pytest.approx(0.75)


def test_an_inference_point_is_measured_at_its_tables_throughput():
    """A DeepLearningExamples inference step is batch / the README's "Throughput Avg" (its
    "Latency Avg" holds the warm-up's slow iterations), the average latency kept beside it:
    ResNet-50 FP32 on the T4 at batch 8, 363 img/s and 22.41 ms (resnet50v1.5/README.md)."""
    (found,) = bench._inference_points([("resnet50", "t4", None, None, 8, 22.41e-3)])
    assert found["measured_s"] == pytest.approx(8 / 363)
    assert found["latency_avg_s"] == pytest.approx(22.41e-3)
    assert bench.steady_step_s("resnet50", "v100_sxm2", None, 256) == pytest.approx(256 / 1261)
    latency_tables = {("resnet50", *key): t for key, t in bench.RESNET50_LATENCY_MS.items()}
    latency_tables |= {("efficientnet_b0", chip, None): t
                       for chip, t in bench.EFFICIENTNET_B0_LATENCY_MS.items()}
    latency_tables |= {("efficientnet_b0", chip, "fp16"): t
                       for chip, t in bench.EFFICIENTNET_B0_AMP_LATENCY_MS.items()}
    latency_tables |= bench.RESNEXT_LATENCY_MS
    assert set(bench.DLE_THROUGHPUT) == set(latency_tables)
    for key, latencies in latency_tables.items():
        assert tuple(latencies) == bench.DLE_BATCHES
        # from batch 64 on, every table's steady step is below its average latency
        assert all(bench.steady_step_s(*key, batch) < latencies[batch] / 1e3
                   for batch in (64, 128, 256)), key


def test_a_training_point_is_the_reference_step():
    # Lambda's RTX 4090 mixed-precision run: batch 448 at 1301 images/s, NCHW
    ((reference, chip, amp, layout, batch, rate),) = [
        p for p in bench.RESNET50_TRAINING if p[:3] == ("Lambda", "rtx_4090", "fp16")]
    found = bench._point(reference, chip, amp, layout, batch, batch / rate, train=True)
    assert found["measured_s"] == pytest.approx(448 / 1301)
    assert found["task"] == "train" and found["layout"] == "nchw"
    assert found["low_s"] <= found["pipelined_s"] <= found["high_s"]
    # a step with a backward and an optimizer takes more than the forward at that batch
    forward = bench._point(reference, chip, amp, layout, batch, 1.0, train=False)
    assert found["pipelined_s"] > 2 * forward["pipelined_s"]
    # NCHW tensor-core convolutions pay their NHWC transposes: channels-last is faster
    channels_last = bench._point(reference, chip, amp, "channels_last", batch, 1.0, train=True)
    assert channels_last["pipelined_s"] < found["pipelined_s"]


def test_a_bert_point_runs_as_the_reference_did():
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    with bench._tf32_matmuls():
        assert torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cuda.matmul.allow_tf32 == before   # restored
    # Lambda's RTX 3090 --fp16 run: batch 96 at 172 sequences/s, apex O2 (a half model)
    half = bench._bert_point("rtx_3090", "fp16", 96, 172)
    assert half["measured_s"] == pytest.approx(96 / 172)
    assert half["model"] == "bert_base_squad" and half["task"] == "train"
    assert half["low_s"] <= half["pipelined_s"] <= half["high_s"]
    # FP32 at half the batch moves more bytes per sequence and runs on the TF32 roof, not
    # the half-precision one: slower per sequence
    fp32 = bench._bert_point("rtx_3090", None, 48, 85)
    assert fp32["pipelined_s"] / 48 > half["pipelined_s"] / 96
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_a_largest_gemm_point_is_the_kernel_alone():
    # mag-/gpu_benchmark's H100 SXM: a 6144 x 17920 x 2816 bf16 product at 792.1 TFLOP/s
    ((chip, shape, tflops),) = [p for p in bench.LARGEST_BF16_GEMM if p[0] == "h100_sxm"]
    found = bench.gemm_point(chip, shape, tflops)
    assert found["measured_s"] == pytest.approx(2 * 6144 * 17920 * 2816 / 792.1e12)
    # the kernel alone (no host cost), never faster than the bf16 roof
    assert found["ideal_s"] == pytest.approx(2 * 6144 * 17920 * 2816 / 989.4e12, rel=1e-3)
    assert found["ideal_s"] <= found["pipelined_s"]
    assert found["low_s"] <= found["pipelined_s"] <= found["high_s"]
    # a lone kernel has no host cost to sum or pipeline: its summary has no "summed" model
    s = bench.summary([found], models=("pipelined", "ideal"))
    assert set(s) == {"pipelined", "ideal", "inside_band"} and "summed_s" not in found


def test_an_l4_square_product_runs_on_the_roof_of_its_dtype():
    # zzc0721/torch-performance-test-data #120: an FP32 8192^3 torch.mm at 10.66 TFLOP/s
    n, tflops = 8192, bench.L4_SQUARE_MM[torch.float32][8192]
    fp32 = bench.gemm_point("l4", (n, n, n), tflops, torch.float32)
    assert fp32["measured_s"] == pytest.approx(2 * n ** 3 / 10.66e12)
    # true FP32 (TF32 is off by default): the vector roof, 30.3 TFLOP/s
    assert fp32["ideal_s"] == pytest.approx(2 * n ** 3 / 30.3e12, rel=1e-3)
    half = bench.gemm_point("l4", (n, n, n), bench.L4_SQUARE_MM[torch.float16][n],
                            torch.float16)
    assert half["ideal_s"] == pytest.approx(2 * n ** 3 / 121e12, rel=0.01)
    # a 72 W board takes the low-power family: well below its roof, on either engine
    assert fp32["pipelined_s"] > 2 * fp32["ideal_s"] and half["pipelined_s"] > 2 * half["ideal_s"]


def test_a_copy_point_is_the_benchmarks_bytes_at_its_bandwidth():
    # chsasank/device-benchmarks: a T4 copying 2^26.5 fp32 elements at 240 GB/s, read and
    # written: 8 bytes an element
    n = int(2 ** 26.5)
    found = bench.copy_point("t4", 240)
    assert found["measured_s"] == pytest.approx(8 * n / 240e9)
    assert found["ideal_s"] == pytest.approx(8 * n / 320e9)  # the T4's 320 GB/s
    assert found["ideal_s"] < found["low_s"] <= found["pipelined_s"] <= found["high_s"]
    # the op alone: its fixed cost and the bytes at the T4's streaming rate, so no faster
    # than the bytes at that rate
    streaming = chip_params.params(get_chip("t4"), "copy").memory
    assert found["pipelined_s"] >= 8 * n / (320e9 * streaming)


def test_the_resnext_points_are_the_readme_networks():
    """DeepLearningExamples' resnext101-32x4d config (Bottleneck, cardinality 32, layers
    [3, 4, 23, 3], widths [128, 256, 512, 1024], expansion 2) is the timm network the points
    analyse; SE-ResNeXt adds a squeeze-excitation block with reduction 16."""
    timm = pytest.importorskip("timm")
    models = {model for model, _, _ in bench.RESNEXT_LATENCY_MS} | \
        {row[0] for row in bench.RESNEXT_TRAINING}
    assert models == {"timm:resnext101_32x4d", "timm:seresnext101_32x4d"}
    for name in ("resnext101_32x4d", "seresnext101_32x4d"):
        net = timm.create_model(name)
        stages = [net.layer1, net.layer2, net.layer3, net.layer4]
        assert [len(stage) for stage in stages] == [3, 4, 23, 3]
        for stage, width in zip(stages, (128, 256, 512, 1024)):
            block = stage[0]
            assert (block.conv2.groups, block.conv2.out_channels) == (32, width)
            assert block.conv3.out_channels == 2 * width          # expansion 2
        se = net.layer1[0].se if name.startswith("se") else None
        assert (se is not None) == name.startswith("se")
        if se is not None:                                      # 256 channels / 16
            assert se.fc1.out_channels == 256 // 16


def test_a_decode_point_prices_the_weights_stream_within_the_measured_step():
    """gpt-fast's issue 27: a Llama-2-7B decoding at about 65 tokens/s on an RTX 4090. The
    point's products are its 225 one-row projections (32 layers of q, k, v, o, gate, up and
    down, and the LM head); their roof is their BF16 weights over the 4090's 1008 GB/s, and
    fxroof's kernel time for them lies between that roof and the measured step."""
    ((reference, chip, model, config, tokens_per_s),) = [
        p for p in bench.DECODE_STEPS if p[1] == "rtx_4090"]
    found = bench.decode_point(reference, chip, model, config, tokens_per_s)
    assert found["measured_s"] == pytest.approx(1 / 65.0)
    weights = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 4096 * 32000
    # each product's input and output rows
    rows = 32 * (4 * (4096 + 4096) + 2 * (4096 + 11008) + (11008 + 4096)) + 4096 + 32000
    assert found["ideal_s"] == pytest.approx(2 * (weights + rows) / 1008e9, rel=1e-6)
    assert found["ideal_s"] < found["products_s"] <= found["measured_s"]
    assert found["low_s"] <= found["products_s"] <= found["high_s"]
