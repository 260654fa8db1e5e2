"""benchmarks/bench_timm_gmacs.py: its table names real timm models, and a count agrees only
where timm's lies between fxroof's matrix MACs and its all-node count."""
import pytest

from benchmarks import bench_timm_gmacs as bench

timm = pytest.importorskip("timm", reason="timm is an optional extra: pip install 'fxroof[timm]'")


def test_the_table_names_timm_models_once_each():
    names = [model for model, _, _ in bench.TIMM_GMACS]
    assert len(names) == len(set(names)) == 101
    assert all(timm.is_model(name) for name in names)


def test_a_point_counts_the_matrix_nodes_and_agrees_within_the_band():
    # ResNet-18 at 224, layer by layer: the 7x7 stem, 64 x 3 x 49 x 112^2; four 64-channel
    # 3x3 convolutions at 56^2; in each later stage, from c channels to 2c on an s x s
    # map, a strided 3x3 (2c x c x 9 x s^2), three more at 2c (3 x 4c^2 x 9 x s^2) and a
    # 1x1 shortcut (2c x c x s^2) -- the same for (c, s) = (64, 28), (128, 14), (256, 7);
    # the classifier 512 x 1000
    stage = (2 + 12) * 64 * 64 * 9 * 28 ** 2
    shortcut = 2 * 64 * 64 * 28 ** 2
    closed_form = 64 * 3 * 49 * 112 ** 2 + 4 * 64 * 64 * 9 * 56 ** 2 + 3 * (stage + shortcut) \
        + 512 * 1000
    found = bench.point("resnet18", 224, closed_form / 1e9)
    # the convolutions' and classifier's bias adds are FLOPs too: within 0.5%
    assert found["fxroof_gmacs"] == pytest.approx(closed_form / 1e9, rel=5e-3)
    assert found["agrees"]
    assert found["fxroof_all_nodes_gmacs"] > found["fxroof_gmacs"]
    assert not bench.point("resnet18", 224, 1.2 * closed_form / 1e9)["agrees"]
    assert not bench.point("resnet18", 224, 0.8 * closed_form / 1e9)["agrees"]
