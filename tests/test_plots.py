"""Figures render: files exist, are non-empty images of the expected size."""

import matplotlib.image as mpimg
import pytest
import torch

import fxroof
from fxroof.cli import main


def image_size(path):
    height, width = mpimg.imread(path).shape[:2]
    return width, height


def test_chips_plot_all_and_per_class(tmp_path, capsys):
    out = tmp_path / "chips.png"
    assert main(["chips", "plot", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000 and (tmp_path / "chips-gpu.png").exists()
    width, height = image_size(str(out))
    assert width > 800 and height > 500


def test_model_points_from_names_and_from_saved_json(tmp_path, capsys):
    saved = tmp_path / "r18.json"
    fxroof.analyze("resnet18", batch=2).to_json(str(saved))
    out = tmp_path / "r.png"
    assert main(["roofline", "mobilenet_v3_small", str(saved), "--batch", "1", "4",
                 "--chip", "t4", "--chip", "a100_sxm_80gb", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_layer_type_bubbles_svg(tmp_path, capsys):
    out = tmp_path / "lt.svg"
    assert main(["roofline", "resnet18", "--by", "layer_type", "--chip", "h100_sxm",
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("<?xml") and "Conv2d" in text


def test_the_compiled_view_is_placed_as_inductors_kernels(tmp_path, capsys):
    """`fxroof roofline --compiled`: the points are the compiled view's kernels, fewer than
    the eager step's nodes (the batch norm and ReLU fuse), and the figure says its
    intensities divide by the fused kernels' bytes."""
    from fxroof.roofline_points import load_sources

    spec = "tests.fixtures.user_models:conv_bn_net"
    eager, compiled = (load_sources([spec], [2], False, None, device="cpu", compiled=view)[0]
                       for view in (False, True))
    assert (eager["view"], compiled["view"]) == ("eager", "compiled")
    assert len(compiled["records"]) < len(eager["records"])
    out = tmp_path / "k.svg"
    assert main(["roofline", spec, "--compiled", "--by", "node", "--device", "cpu",
                 "--chip", "t4", "--out", str(out)]) == 0
    assert "Inductor's kernels: fused traffic" in out.read_text()


def test_an_untimed_parts_bubble_is_its_share_of_the_expected_time_not_the_roof_time():
    """A 9x9 channels-last fp16 depthwise convolution and a 1x1 one widening its 64 channels
    to 512 on an RTX 4090: both memory-bound on the roof, where the 1x1 one, writing 8x the
    bytes, takes the longer; but the depthwise one is expected to run at a hundredth of the
    FP32 peak, so its bubble is the larger. Each bubble is 20 + 2000 x its share of the
    summed expected device time."""
    from fxroof.prediction import device_seconds
    from fxroof.roofline import node_roof
    from fxroof.roofline_points import points
    from fxroof.time_model import node_time

    model = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 9, padding=4, groups=64, bias=False),
                                torch.nn.Conv2d(64, 512, 1, bias=False))
    g = fxroof.analyze(model, torch.empty(64, 64, 16, 16), device="cuda", chip="rtx_4090",
                       amp="fp16", memory_format="channels_last")
    chip = fxroof.chips.get_chip("rtx_4090")
    source = {"name": "m", "batch": 64, "records": g.records(), "dtype": "fp16",
              "view": "eager"}
    found, sizes, title = points([source], [chip], "node")
    assert "share of expected time" in title
    by_name = {p["label"]: size for p, size in zip(found, sizes)}
    convs = [r for r in g.records() if r["op"] == "convolution"]
    depthwise, pointwise = sorted(convs, key=lambda r: "depthwise" not in r["rule"])
    assert node_roof(depthwise, chip).predicted_s < node_roof(pointwise, chip).predicted_s
    assert by_name[depthwise["name"]] > by_name[pointwise["name"]]
    expected = {p["label"]: device_seconds(node_time(r, chip))
                for p in found for r in g.records() if r["name"] == p["label"]}
    total = sum(expected.values())
    for name, size in by_name.items():
        assert size == pytest.approx(20 + 2000 * expected[name] / total)


@pytest.mark.parametrize("argv,fragment", [
    (["roofline", "resnet18", "--chip", "h100_sxm", "--out", "/no/such/dir/r.png"],
     "does not exist"),
    (["roofline", "resnet18", "--chip", "h100x"], "Did you mean h100_sxm"),
    (["roofline", "resnet18", "resnet34", "--by", "layer_type", "--chip", "t4"],
     "one model"),
    (["roofline", "missing.json", "--chip", "t4"], "No such file"),
])
def test_plot_errors(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    assert fragment in capsys.readouterr().err


def test_existing_figure_is_kept(tmp_path, capsys):
    out = tmp_path / "keep.png"
    out.write_bytes(b"mine")
    assert main(["chips", "plot", "--out", str(out)]) == 1
    assert out.read_bytes() == b"mine"


def test_point_labels_stay_inside_the_axes_once_the_figure_is_laid_out(monkeypatch):
    """Labels are placed in pixels; laying the figure out after placing them (the legend
    outside shrinks the axes) pushed a label near the left edge out over the tick labels."""
    from matplotlib import pyplot as plt

    from fxroof import plots
    from fxroof.chips import load_chips

    kept = {}
    monkeypatch.setattr(plots, "save", lambda fig, path, overwrite: kept.update(fig=fig))
    # the positions `fxroof roofline resnet50 mobilenet_v3_large vit_b_16 --batch 1 64 256
    # --chip t4 --chip this-cpu` gave when the bug showed
    seen = [("mobilenet_v3_large", 1, 3.4, 1.07e12), ("mobilenet_v3_large", 64, 4.1, 1.25e12),
            ("mobilenet_v3_large", 256, 4.1, 1.25e12), ("resnet50", 1, 19, 4.5e12),
            ("resnet50", 64, 25, 4.7e12), ("resnet50", 256, 25, 4.7e12),
            ("vit_b_16", 1, 60, 7.5e12), ("vit_b_16", 64, 145, 7.5e12),
            ("vit_b_16", 256, 148, 7.5e12)]
    points = [{"label": f"{model} b{batch} ({chip})", "intensity": x,
               "flops_per_s": y / scale, "group": f"batch {batch}"}
              for chip, scale in (("t4", 1), ("this-cpu", 40)) for model, batch, x, y in seen]
    plots.plot_points(points, [load_chips()["t4"]], "unused.png", title="labels")
    fig = kept["fig"]
    fig.tight_layout()  # what save() does before writing
    fig.canvas.draw()
    ax = fig.axes[0]
    box = ax.get_window_extent()
    labels = [t for t in ax.texts if "(t4)" in t.get_text() or "(this-cpu)" in t.get_text()]
    # batch 64 and 256 of each model sit on one spot (vit_b_16's 145 and 148 FLOP/byte are
    # a pixel apart): one label each, "model b64, b256 (chip)"
    assert len(labels) == len(points) - 6
    assert sorted(t.get_text() for t in labels if "b64" in t.get_text()) == sorted(
        f"{model} b64, b256 ({chip})" for model in ("mobilenet_v3_large", "resnet50", "vit_b_16")
        for chip in ("t4", "this-cpu"))
    for text in labels:
        extent = text.get_window_extent()
        assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, text.get_text()
    plt.close(fig)


@pytest.mark.parametrize("labels,joined", [
    (["resnet50 b64 (t4)", "resnet50 b256 (t4)"], "resnet50 b64, b256 (t4)"),
    (["a b1", "a b2", "a b2"], "a b1, b2"),
    (["conv", "relu"], "conv, relu"),
    (["x (t4)", "x (h100)"], "x (t4), (h100)"),
    # four names are shown; a fifth makes it three and a count
    ([f"bn_{i} (a100)" for i in range(4)], "bn_0, bn_1, bn_2, bn_3 (a100)"),
    ([f"bn_{i} (a100)" for i in range(40)], "bn_0, bn_1, bn_2, +37 more (a100)"),
])
def test_join_labels_keeps_shared_words_once(labels, joined):
    from fxroof.plots import join_labels

    assert join_labels(labels) == joined


@pytest.mark.parametrize("label,short", [
    ("sdpa, sdpa_1, sdpa_2, +9 more", "sdpa, +11 more"),
    ("bn_0, bn_1, bn_2, +37 more (a100)", "bn_0, +39 more (a100)"),
    ("bn_0, bn_1, bn_2, bn_3 (a100)", "bn_0, bn_1, bn_2, bn_3 (a100)"),  # no count: as is
    ("conv", "conv"),
])
def test_a_label_too_wide_for_its_point_keeps_its_first_name_and_a_count(label, short):
    from fxroof.plots import shortened_label

    assert shortened_label(label) == short


def test_a_long_label_at_the_right_edge_stays_inside_the_axes(monkeypatch):
    """vit_b_16's attention nodes sit at the right end of a node roofline, and their merged
    label ("scaled_dot_product_efficient_attention, ..._1, ..._2, +9 more") fitted on
    neither side: it ran out of the axes and the figure grew to hold it. It is cut to its
    first name and a count where the whole finds no room."""
    from matplotlib import pyplot as plt

    from fxroof import plots
    from fxroof.chips import load_chips

    kept = {}
    monkeypatch.setattr(plots, "save", lambda fig, path, overwrite: kept.update(fig=fig))
    names = [f"scaled_dot_product_efficient_attention_{i}" for i in range(12)]
    points = [{"label": plots.join_labels(names), "intensity": 75.0, "flops_per_s": 6.6e13,
               "group": "MultiheadAttention"},
              {"label": "add, add_1, +22 more", "intensity": 0.08, "flops_per_s": 2.7e11,
               "group": "add"}]
    plots.plot_points(points, [load_chips()["h100_sxm"]], "unused.png", title="labels")
    fig = kept["fig"]
    fig.tight_layout()
    fig.canvas.draw()
    ax = fig.axes[0]
    box = ax.get_window_extent()
    (attention,) = [t for t in ax.texts if "scaled_dot" in t.get_text()]
    assert attention.get_text() == "scaled_dot_product_efficient_attention_0, +11 more"
    extent = attention.get_window_extent()
    assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1
    plt.close(fig)


def test_plot_roofline_api_takes_graphs_json_and_names(tmp_path, monkeypatch):
    """fxroof.plot_roofline is the CLI's `roofline` for Python users: graphs (timed ones at
    their achieved FLOP/s, once), saved JSON and model names, chips by id or object."""
    from fxroof import plots
    from fxroof.chips import load_chips

    timed = fxroof.analyze("resnet18", batch=2)
    timed.time(repeats=1, warmup=0)
    saved = tmp_path / "m.json"
    fxroof.analyze("mobilenet_v3_small", batch=1).to_json(str(saved))
    drawn = {}
    real = plots.plot_points

    def spy(points, chips, path, *args, **kwargs):
        drawn.update(points=points, chips=chips)
        return real(points, chips, path, *args, **kwargs)

    monkeypatch.setattr(plots, "plot_points", spy)
    out = tmp_path / "r.png"
    t4 = load_chips()["t4"]
    assert fxroof.plot_roofline([timed, str(saved), "squeezenet1_0"], [t4, "l4"], str(out),
                                batches=[1, 4]) == str(out)
    assert out.stat().st_size > 10_000
    labels = sorted(p["label"] for p in drawn["points"])
    assert labels == sorted(["resnet18 b2 (measured)", "mobilenet_v3_small b1 (t4)",
                             "mobilenet_v3_small b1 (l4)"] +
                            [f"squeezenet1_0 b{b} ({c})" for b in (1, 4) for c in ("t4", "l4")])
    achieved = next(p for p in drawn["points"] if p["label"].endswith("(measured)"))
    flops = sum(r["flops"] for r in timed.records())
    seconds = sum(r["time_s"] or 0 for r in timed.records())
    assert achieved["flops_per_s"] == pytest.approx(flops / seconds)
    with pytest.raises(fxroof.FxroofError, match="AnnotatedGraph"):
        fxroof.plot_roofline([42], ["t4"], str(tmp_path / "x.png"))
    with pytest.raises(fxroof.FxroofError, match="choose 'model'"):
        fxroof.plot_roofline([timed], ["t4"], str(tmp_path / "x.png"), by="layers")
    with pytest.raises(fxroof.FxroofError):  # the figure already exists
        fxroof.plot_roofline([timed], ["t4"], str(out))
    with pytest.raises(fxroof.FxroofError, match="batch must be a positive integer, not 0"):
        fxroof.plot_roofline(["resnet18"], ["t4"], str(tmp_path / "b0.png"), batches=[0])
    assert not (tmp_path / "b0.png").exists()
    # a chip given alone is that chip, not its letters ("Unknown chip 'n'" before)
    with pytest.raises(fxroof.FxroofError, match="Unknown chip 'nope'"):
        fxroof.plot_roofline([timed], "nope", str(tmp_path / "x.png"))
    with pytest.raises(fxroof.FxroofError, match="not int 5"):
        fxroof.plot_roofline([timed], [5], str(tmp_path / "x.png"))
    alone = tmp_path / "alone.png"
    assert fxroof.plot_roofline(timed, "t4", str(alone)) == str(alone) and alone.stat().st_size


@pytest.mark.parametrize("batch", [0, -2, 1.5])
def test_analyze_refuses_a_batch_that_is_not_a_positive_integer(batch):
    with pytest.raises(fxroof.FxroofError, match="positive integer"):
        fxroof.analyze("resnet18", batch=batch)


def _visible_tick_labels(ax, axis):
    ax.figure.canvas.draw()
    low, high = sorted(axis.get_view_interval())
    return [t.get_text() for t, loc in zip(axis.get_ticklabels(), axis.get_ticklocs())
            if low <= loc <= high and t.get_text()]


def test_a_log_axis_spanning_less_than_a_decade_carries_numbers():
    """The study's latency axes once showed one number (100 ms) over 20-300 ms."""
    from matplotlib.ticker import EngFormatter

    from fxroof import plots

    fig, ax = plots.new_axes("t", xlabel="FLOPs", ylabel="latency (s)")
    ax.scatter([1e8, 3e10], [0.02, 0.3])
    ax.yaxis.set_major_formatter(EngFormatter(unit="s", sep=" "))
    plots.label_log_axes(ax)
    labels = _visible_tick_labels(ax, ax.yaxis)
    assert len(labels) >= 3 and all(label.endswith("s") for label in labels), labels
    assert "100 ms" in labels and "50 ms" in labels
    # an axis spanning more decades keeps its decade ticks (x: 1e8..3e10 plus margins)
    assert len(_visible_tick_labels(ax, ax.xaxis)) <= 4


def test_chips_plot_names_the_chips_it_cannot_draw(monkeypatch):
    """At fp32 the ASICs (TPUs publish bf16/int8 only) were missing without a word."""
    from fxroof import plots
    from fxroof.chips import load_chips

    kept = {}
    monkeypatch.setattr(plots, "save", lambda fig, path, overwrite: kept.update(fig=fig))
    chips = list(load_chips().values())
    plots.plot_chips(chips, "unused.png", "fp32")
    ax = kept["fig"].axes[0]
    note = ax.get_title(loc="left")
    assert note.startswith("Not drawn, no published fp32 peak") and "TPU v4" in note
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    # grouped by class, one heading each, and the TF32 roofs share one entry
    assert [t for t in texts if t.startswith("$\\bf")] == [
        "$\\bf{GPUs}$", "$\\bf{SoCs}$", "$\\bf{CPUs}$", "$\\bf{FPGAs}$"]
    assert sum("TF32" in t for t in texts) == 1
    drawn = [c for c in chips if any(k.startswith("fp32") for k in c.peaks)]
    assert sum("[fp32" in t for t in texts) == len(drawn)
