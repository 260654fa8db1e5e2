"""The interactive roofline pages, loaded in a real browser (headless Chromium): the page
runs without console errors, draws one marker per point, hovering a point shows its costs, the
menus filter by phase and layer type, and a screenshot is not blank.

Chromium comes from the system's packages (Debian: `apt-get install chromium`; `.ci/run`
installs it). Without it these tests skip, saying so.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import fxroof
from fxroof.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Chromium from the system packages (apt-get install chromium)")
# flags for a closed network: without the background-networking ones Chromium keeps trying
# Google's hosts; --no-sandbox because CI runs as root
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--virtual-time-budget=20000"]

# Run after the page loads: hover the first point of the first points trace, then apply each
# menu button by its own arguments, and record what the page then shows in the DOM.
PROBE = """<script>
window.addEventListener('load', () => {
  const gd = document.querySelector('.plotly-graph-div');
  const record = {points: document.querySelectorAll('.point').length, menus: {}};
  const first = gd.data.findIndex(d => d.meta && d.meta.role === 'points');
  Plotly.Fx.hover(gd, [{curveNumber: first, pointNumber: 0}]);
  record.hover = document.querySelector('.hoverlayer').textContent;
  const menus = gd.layout.updatemenus || [];
  let chain = Promise.resolve();
  menus.forEach(menu => menu.buttons.forEach(button => {
    chain = chain.then(() => Plotly.restyle(gd, ...button.args)).then(() => {
      record.menus[button.label] = document.querySelectorAll('.point').length;
    });
  }));
  chain.then(() => { document.body.setAttribute('data-probe', JSON.stringify(record)); });
});
</script>"""


def load(page: str, tmp_path) -> tuple[dict, list[str]]:
    """(what PROBE recorded, the console messages) for a page, in headless Chromium."""
    probed = Path(page).with_name("probed.html")  # beside the page: relative scripts load
    probed.write_text(open(page).read().replace("</body>", PROBE + "</body>"))
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                           "--enable-logging=stderr", "--v=0", "--dump-dom",
                           probed.as_uri()], capture_output=True, text=True, timeout=120)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    found = re.search(r"data-probe=\"([^\"]*)\"", proc.stdout)
    assert found, f"the page never finished loading; console: {console}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")), console


@needs_chromium
def test_node_roofline_page_hovers_and_filters(tmp_path, capsys):
    page = str(tmp_path / "nodes.html")
    assert main(["roofline", "resnet18", "--by", "node", "--backward", "--chip", "h100_sxm",
                 "--out", page]) == 0
    record, console = load(page, tmp_path)
    assert console == []  # no errors, no warnings
    records = fxroof.analyze("resnet18", backward=True).records()
    placed = [r for r in records if r["flops"] and r["bytes"]]  # views and copies: no point
    assert record["points"] == len(placed)
    # hover: the node's name, layer, module, phase, costs with units, time and % of roof
    hover = record["hover"]
    for text in ("layer ", "module ", "phase ", "FLOP", "B moved", "FLOP/byte", "% of roof",
                 "roof time on h100_sxm"):
        assert text in hover, (text, hover)
    menus = record["menus"]
    assert menus["all phases"] == len(placed)
    assert menus["forward"] == sum(r["phase"] == "forward" for r in placed)
    assert menus["backward"] == sum(r["phase"] == "backward" for r in placed)
    assert menus["Conv2d"] == sum(r["layer_type"] == "Conv2d" for r in placed)


@needs_chromium
def test_model_roofline_page_and_its_screenshot(tmp_path, capsys):
    page = str(tmp_path / "models.html")
    assert main(["roofline", "resnet18", "mobilenet_v3_small", "--batch", "1", "8",
                 "--chip", "t4", "--chip", "h100_sxm", "--out", page]) == 0
    record, console = load(page, tmp_path)
    assert console == []
    assert record["points"] == 2 * 2 * 2  # models x batches x chips
    assert "mobilenet_v3_small" in record["hover"] or "resnet18" in record["hover"]
    assert record["menus"]["batch 8"] == 4
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile2'}",
                    "--window-size=1200,800", f"--screenshot={shot}", f"file://{page}"],
                   capture_output=True, timeout=120)
    import matplotlib.image as mpimg

    pixels = mpimg.imread(str(shot))
    assert pixels.shape[:2] == (800, 1200)
    assert len({tuple(p) for p in pixels[::8, ::8].reshape(-1, pixels.shape[2])}) > 20


@needs_chromium
def test_study_report_draws_its_interactive_rooflines(tmp_path):
    from fxroof.study import StudyConfig, run_study

    config = StudyConfig(models=["squeezenet1_0", "mobilenet_v3_small"], batches=[1],
                         warmup=0, repeats=1, fresh_process=False)  # the page, not the timing
    paths = run_study(config, str(tmp_path / "s"), progress=False)
    assert os.path.exists(tmp_path / "s" / "plotly.min.js")  # loads offline, beside it
    record, console = load(paths["html"], tmp_path)
    assert console == []
    assert record["points"] == 2 * 2  # each model at its attainable and achieved FLOP/s
    assert "% of roof" in record["hover"]


def test_an_html_roofline_path_is_checked_before_any_work(tmp_path, capsys):
    kept = tmp_path / "r.html"
    kept.write_text("mine")
    assert main(["roofline", "resnet18", "--chip", "t4", "--out", str(kept)]) == 1
    assert "already exists" in capsys.readouterr().err and kept.read_text() == "mine"
