"""Measured roofs of the local device: GEMM FLOP/s per dtype and copy bandwidth.

* compute: ``torch.mm`` of n x n matrices (2 n^3 FLOP each), n large enough to run at the
  engine's steady rate (quick mode uses smaller n and fewer repeats); median over repeats.
* bandwidth: ``dst.copy_(src)`` of a buffer far beyond the last-level cache (counting the
  bytes read and the bytes written); median over repeats.
* per-op overhead: the time of one eager ATen op on a one-element tensor (dispatch plus, on
  CUDA, a kernel launch), from a run of 1000 such ops. The roofline of a measured chip adds it
  to every node that launches work: a floor on what each op costs before any FLOP or byte,
  which matters for small models at batch 1.
CUDA timings use events around each run and synchronise before reading them; CPU timings use
a monotonic clock. The result is saved as a user chip (YAML in the user chip folder), which
`--chip <id>` then finds like a shipped one.
"""
from __future__ import annotations

import datetime
import os
import platform
import re
import statistics
import time
from typing import Callable, Optional

import torch
import yaml

from fxroof.errors import FxroofError

USER_CHIPS_DIR = os.environ.get("FXROOF_CHIPS_DIR",
                                os.path.join(os.path.expanduser("~"), ".config", "fxroof", "chips"))
DTYPE_KEYS = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
              torch.float64: "fp64"}


def _timed(fn: Callable[[], None], device: torch.device, repeats: int) -> float:
    fn()  # warm-up: allocation, kernel selection, thread pool start
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def gemm_flops(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    return 2 * n ** 3 / _timed(lambda: torch.mm(a, b, out=out), device, repeats)


def op_overhead(device: torch.device, repeats: int, ops: int = 1000) -> float:
    """Seconds per eager op on a one-element tensor: dispatch (and kernel launch) cost."""
    x = torch.ones(1, device=device)
    out = torch.empty_like(x)

    def run():
        for _ in range(ops):
            torch.add(x, x, out=out)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    run()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) / ops)
    return statistics.median(samples)


def copy_bandwidth(device: torch.device, nbytes: int, repeats: int) -> float:
    src = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / _timed(lambda: dst.copy_(src), device, repeats)


def measure(device: str = "cpu", quick: bool = True,
            progress: Optional[Callable[[str], None]] = None) -> dict:
    """A chip entry (chips.yaml format) with this device's measured roofs."""
    from fxroof.timing import check_device

    dev = check_device(device)
    say = progress or (lambda message: None)
    gpu = dev.type == "cuda"
    # big enough to run at the steady rate on a CPU (1024^2 fp32 reaches about half of it)
    sizes = {torch.float32: 2048 if quick else 4096, torch.float64: 1024 if quick else 2048,
             torch.bfloat16: 1024 if quick else 2048}
    if gpu:
        sizes = {dtype: 8192 for dtype in (torch.float32, torch.bfloat16, torch.float16,
                                           torch.float64)}
    repeats = 5 if quick else 10
    peaks = {}
    for dtype, n in sizes.items():
        say(f"GEMM {DTYPE_KEYS[dtype]} {n}x{n}")
        try:
            value = gemm_flops(dev, dtype, n, repeats)
        except RuntimeError as e:  # dtype unsupported by this device's GEMM
            say(f"  skipped: {str(e).splitlines()[0]}")
            continue
        peaks[DTYPE_KEYS[dtype]] = {
            # measured with a GEMM: whatever engine torch.mm uses (on CPUs with AMX, bf16 runs
            # on the matrix unit), so it is the roof of matrix-class work
            "value": float(f"{value:.4g}"), "unit": "matrix",
            "derivation": f"measured: torch.mm {n}x{n} {DTYPE_KEYS[dtype]}, 2n^3 FLOP, median "
                          f"of {repeats} after a warm-up"}
    nbytes = (256 if quick else 1024) * 2 ** 20 if not gpu else 2 ** 31
    say(f"copy {nbytes // 2 ** 20} MiB")
    bandwidth = copy_bandwidth(dev, nbytes, repeats)
    say("per-op overhead")
    overhead = op_overhead(dev, repeats)
    name = (torch.cuda.get_device_name(dev) if gpu else
            (platform.processor() or platform.machine()) + f" ({os.cpu_count()} threads)")
    return {
        "id": "this-gpu" if gpu else "this-cpu",
        "name": f"{name} (measured)",
        "class": "gpu" if gpu else "cpu",
        "vendor": "",
        "peaks": peaks,
        "bandwidth": {"value": float(f"{bandwidth:.4g}"),
                      "derivation": f"measured: copy_ of {nbytes // 2 ** 20} MiB fp32 "
                                    "(bytes read + written), median"},
        "op_overhead": {"value": float(f"{overhead:.3g}"),
                        "derivation": "measured: median seconds per torch.add on a "
                                      "one-element tensor, over runs of 1000"},
        "sources": [f"fxroof chips measure --device {device}"
                    f"{' --full' if not quick else ''} on {datetime.date.today().isoformat()}, "
                    f"torch {torch.__version__}, {torch.get_num_threads()} threads"],
    }


def datasheet_chip(device_name: str, chips: dict):
    """The database chip a measured device is, from the name the driver reports
    ("NVIDIA A100-SXM4-80GB" -> a100_sxm_80gb, "Tesla T4" -> t4), or None."""
    name = device_name.lower().replace("-", " ").replace("_", " ")
    matches = []
    for chip in chips.values():
        if "pcie" in name and "sxm" in chip.id:  # same model name, another board and clock
            continue
        model = re.match(r"(rtx_\d+|[a-z]+\d+[a-z]*)", chip.id)
        if model and re.search(rf"\b{model.group().replace('_', ' ')}\b", name):
            matches.append(chip)
    # several capacities of one model (A100 40/80 GB): the one whose size the name states
    sized = [c for c in matches if (m := re.search(r"(\d+)gb", c.id)) and
             re.search(rf"\b{m.group(1)}\s?gb", name)]
    return (sized or matches or [None])[0]


def versus_datasheet(measured, datasheet) -> list[dict]:
    """Rows {what, measured, datasheet, fraction} for the roofs both list (FLOP/s, bytes/s)."""
    rows = [{"what": f"{dtype} peak (FLOP/s)", "measured": value,
             "datasheet": datasheet.peaks[dtype]}
            for dtype, value in measured.peaks.items() if dtype in datasheet.peaks]
    rows.append({"what": "bandwidth (B/s)", "measured": measured.bandwidth,
                 "datasheet": datasheet.bandwidth})
    for row in rows:
        row["fraction"] = row["measured"] / row["datasheet"]
    return rows


def default_path(chip_id: str) -> str:
    return os.path.join(USER_CHIPS_DIR, f"{chip_id}.yaml")


def check_target(path: str, force: bool) -> None:
    if os.path.exists(path) and not force:
        raise FxroofError(f"'{path}' already holds a chip and fxroof does not overwrite it "
                          "unless asked: pass --force, or --out another path.")


def save(entry: dict, path: Optional[str] = None, force: bool = False) -> str:
    path = path or default_path(entry["id"])
    check_target(path, force)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump({"schema_version": 1, "chips": [entry]}, f, sort_keys=False)
    return path
