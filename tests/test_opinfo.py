"""A fast, fixed subset of the OpInfo sweep (benchmarks/bench_opinfo.py runs all of op_db):
PyTorch's own sample inputs through analyze, forward and backward. Every sample is analysed or
refused with a clear FxroofError -- never a raw exception -- and no ATen op reached falls to
the default rule."""
import pytest

from benchmarks.bench_opinfo import float32_ops, sweep_op

SUBSET = ["add", "mul", "mm", "bmm", "addbmm", "addr", "nn.functional.conv2d",
          "nn.functional.embedding_bag", "nn.functional.grid_sample",
          "nn.functional.mse_loss", "nn.functional.nll_loss", "nn.functional.cross_entropy",
          "nn.functional.binary_cross_entropy", "nn.functional.huber_loss",
          "sort", "topk", "cumsum", "mean", "var", "logsumexp", "special.i0e",
          "linalg.solve", "linalg.svd", "fft.rfft", "nn.functional.glu", "unsafe_split",
          "nn.functional.scaled_dot_product_attention", "take", "searchsorted"]


@pytest.mark.parametrize("opinfo", float32_ops(SUBSET), ids=lambda op: op.full_name)
def test_opinfo_samples_analyse_with_rules(opinfo):
    outcome = sweep_op(opinfo, max_samples=3)
    assert not outcome.raw_errors, outcome.raw_errors
    assert outcome.analysed > 0, outcome.clear_errors
    assert not outcome.default, dict(outcome.default)


def test_the_subset_names_real_ops():
    assert len(float32_ops(SUBSET)) >= len(SUBSET)
