"""Measured roofs of the local device: GEMM FLOP/s per dtype and copy bandwidth.

* compute: ``torch.mm`` of n x n matrices (2 n^3 FLOP each), n large enough to run at the
  engine's steady rate (quick mode uses smaller n and fewer repeats); a CPU's fp32 roof is
  the fastest of that square and a few other shapes (CPU_FP32_SHAPES).
* bandwidth: ``dst.copy_(src)`` of a buffer far beyond the last-level cache (counting the
  bytes read and the bytes written).

A roof is a peak: the best sustained rate, so each is the fastest of its repeats, not their
median (on a shared machine the median measures the neighbours too). When the repeats of a
measurement spread widely (median over fastest above SPREAD_WARNING) the machine looked busy,
and the measurement says so.
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
from typing import Callable, Optional

import torch
import yaml

from fxroof.chips import MEASURED_IDS, user_chips_dir
from fxroof.device import Stopwatch, check_device, gpu_shape, host_allocator, repeat
from fxroof.errors import FxroofError
from fxroof.files import atomic, check_writable, make_folder
from fxroof.timers import Summary, summarize
from fxroof.units import dtype_name, peak_key

SPREAD_WARNING = 1.25  # median / fastest repeat above this: the machine looked busy


def _timed(fn: Callable[[], None], device: torch.device, repeats: int) -> Summary:
    """Seconds per call of ``fn`` over ``repeats`` runs after one warm-up (allocation,
    kernel selection, thread pool start)."""
    watch = Stopwatch(device)
    return summarize(repeat(lambda: watch.time(fn), warmup=1, repeats=repeats))


def busy(summary: Summary) -> bool:
    return summary.median_s > SPREAD_WARNING * summary.min_s


def gemm_flops(device: torch.device, dtype: torch.dtype, n: int, repeats: int,
               tf32: bool = False) -> tuple:
    """(best FLOP/s, Summary of seconds per GEMM) of an n x n product; ``tf32``: an fp32
    GEMM allowed TF32."""
    return product_flops(device, dtype, (n, n, n), repeats, tf32)


def product_flops(device: torch.device, dtype: torch.dtype, shape: tuple, repeats: int,
                  tf32: bool = False) -> tuple:
    """(best FLOP/s, Summary of seconds per GEMM) of (m x k) @ (k x n), ``shape`` (m, k, n):
    2 m k n FLOP."""
    m, k, n = shape
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    out = torch.empty(m, n, device=device, dtype=dtype)
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        times = _timed(lambda: torch.mm(a, b, out=out), device, repeats)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    return 2 * m * k * n / times.min_s, times


def op_overhead(device: torch.device, repeats: int, ops: int = 1000) -> float:
    """Seconds per eager op on a one-element tensor: dispatch (and kernel launch) cost; the
    median, since this is a typical cost added to every op, not a peak."""
    x = torch.ones(1, device=device)
    out = torch.empty_like(x)

    def run():
        for _ in range(ops):
            torch.add(x, x, out=out)

    return _timed(run, device, repeats).median_s / ops


def copy_bandwidth(device: torch.device, nbytes: int, repeats: int) -> tuple:
    """(best bytes/s counting bytes read and written, Summary of seconds per copy)."""
    src = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    times = _timed(lambda: dst.copy_(src), device, repeats)
    return 2 * src.numel() * 4 / times.min_s, times


TF32_CAPABILITY = (8, 0)  # Ampere's tensor cores are the first to run TF32


def _gemm_sizes(device: torch.device, quick: bool) -> dict:
    """{peak key: (dtype, n)} of the square GEMMs that measure each roof."""
    if device.type == "cuda":
        sizes = {peak_key(dtype_name(dtype)): (dtype, 8192) for dtype in (
            torch.float32, torch.bfloat16, torch.float16, torch.float64)}
        # cuDNN runs fp32 convolutions in TF32 by default (torch.backends.cudnn.allow_tf32),
        # so their roof is TF32's (fxroof.roofline.peak_for): without it a measured GPU
        # priced them at the CUDA cores' fp32 rate, resnet50 b256 at 3.5x its time (H200)
        if torch.cuda.get_device_capability(device) >= TF32_CAPABILITY:
            sizes["tf32"] = (torch.float32, 8192)
        return sizes
    # big enough to run at the steady rate on a CPU (1024^2 fp32 reaches about half of it)
    return {"fp32": (torch.float32, 2048 if quick else 4096),
            "fp64": (torch.float64, 1024 if quick else 2048),
            "bf16": (torch.bfloat16, 1024 if quick else 2048)}


def _spread_note(what: str, times: Summary, say: Callable[[str], None]) -> str:
    """The derivation's note on run-to-run spread; warns when the machine looked busy."""
    spread = times.median_s / times.min_s
    if busy(times):
        say(f"  warning: {what} repeats spread {spread:.2f}x (median / fastest): the machine "
            "looks busy; the fastest run is kept, but measure again on an idle machine")
    return f"fastest of {times.samples} after a warm-up (median / fastest {spread:.2f})"


# The longest one roof GEMM may take (s), quick or full: a dtype its engine runs slowly is
# measured on a smaller GEMM than _gemm_sizes names. bf16 on a CPU without AVX512-BF16 or AMX
# runs about 1 GFLOP/s (an AVX2 AMD EPYC, torch 2.14): a 2048^3 GEMM took 20 s a repeat, so
# `chips measure --full` spent 4 minutes on that one roof; an engine that slow is at its
# steady rate from a few hundred rows on, which is all the roof reads.
GEMM_BUDGET_S = {True: 0.5, False: 2.0}
GEMM_FIRST_N = 512  # the size a GEMM grows from, doubling, towards its configured size


def gemm_size(device: torch.device, dtype: torch.dtype, n: int, budget_s: float,
              tf32: bool = False) -> int:
    """n, or, where doubling a GEMM (8x its work) from GEMM_FIRST_N on would take one past
    ``budget_s``, the last size within it -- each size on the way timed once."""
    size = min(n, GEMM_FIRST_N)
    while size < n:
        _, times = gemm_flops(device, dtype, size, 1, tf32)
        if 8 * times.min_s > budget_s:
            break
        size = min(2 * size, n)
    return size


# A CPU BLAS's fp32 rate moves with the product's shape: on a 2-core AMD EPYC, 108-127
# GFLOP/s over eight shapes timed in one process (the 4096 square 119, (512 x 1024) x (1024 x
# 1024) the fastest). A roof from the square alone sat below what vit_b_16's 197 x 3072 x 768
# products reached (115% of it), and the gemm class's fitted fraction, capped at 1, priced
# the transformers' products 1.2x slow. So a CPU's fp32 roof is the fastest of the square and
# these (m, k, n) -- operands of 4-9 MB, cache-sized as most layers' weights are -- each timed
# as the square is (0.4 s more in quick mode).
CPU_FP32_SHAPES = ((512, 1024, 1024), (1536, 3072, 768))


def _shape_label(m: int, k: int, n: int) -> str:
    """'4096x4096' for a square product, '512x1024 @ 1024x1024' for another."""
    return f"{m}x{m}" if m == k == n else f"{m}x{k} @ {k}x{n}"


def measure_peaks(dev: torch.device, quick: bool, say: Callable[[str], None]) -> dict:
    repeats = 5 if quick else 10
    peaks = {}
    for key, (dtype, largest) in _gemm_sizes(dev, quick).items():
        try:
            n = gemm_size(dev, dtype, largest, GEMM_BUDGET_S[quick], tf32=key == "tf32")
            say(f"GEMM {key} {n}x{n}" + (f" (a larger one would take over "
                                           f"{GEMM_BUDGET_S[quick]:g} s)" if n < largest
                                           else ""))
            shapes = [(n, n, n)] + (list(CPU_FP32_SHAPES) if dev.type == "cpu" and
                                    key == "fp32" else [])
            rates = [(*product_flops(dev, dtype, shape, repeats, tf32=key == "tf32"), shape)
                     for shape in shapes]
        except RuntimeError as e:  # dtype unsupported by this device's GEMM
            say(f"GEMM {key} skipped: {str(e).splitlines()[0]}")
            continue
        value, times, (m, k, n) = max(rates, key=lambda rate: rate[0])
        others = "; the fastest of " + ", ".join(
            f"{_shape_label(*shape)} ({r / 1e9:.3g} GFLOP/s)" for r, _, shape in rates) \
            if len(rates) > 1 else ""
        peaks[key] = {
            # measured with a GEMM: whatever engine torch.mm uses (on CPUs with AMX, bf16 runs
            # on the matrix unit), so it is the roof of matrix-class work
            "value": float(f"{value:.4g}"), "unit": "matrix",
            "derivation": f"measured: torch.mm {_shape_label(m, k, n)} {key}"
                          f"{' (fp32 with matmul.allow_tf32)' if key == 'tf32' else ''}, "
                          f"2mkn FLOP{others}, "
                          + _spread_note(f"GEMM {key}", times, say)}
    return peaks


def measure(device: str = "cpu", quick: bool = True,
            progress: Optional[Callable[[str], None]] = None) -> dict:
    """A chip entry (chips.yaml format) with this device's measured roofs."""
    dev = check_device(device)
    say = progress or (lambda message: None)
    gpu = dev.type == "cuda"
    peaks = measure_peaks(dev, quick, say)
    nbytes = (256 if quick else 1024) * 2 ** 20 if not gpu else 2 ** 31
    say(f"copy {nbytes // 2 ** 20} MiB")
    bandwidth, times = copy_bandwidth(dev, nbytes, 5 if quick else 10)
    copy_note = _spread_note("copy", times, say)
    say("per-op overhead")
    overhead = op_overhead(dev, 5 if quick else 10)
    shape = gpu_shape(dev)
    name = (torch.cuda.get_device_name(dev) if gpu else
            (platform.processor() or platform.machine()) + f" ({os.cpu_count()} threads)")
    return {
        "id": MEASURED_IDS[dev.type],
        "name": f"{name} (measured)",
        "class": "gpu" if gpu else "cpu",
        "vendor": shape.vendor if shape else "",
        "peaks": peaks,
        "bandwidth": {"value": float(f"{bandwidth:.4g}"),
                      "derivation": f"measured: copy_ of {nbytes // 2 ** 20} MiB fp32 "
                                    f"(bytes read + written), {copy_note}"},
        "op_overhead": {"value": float(f"{overhead:.3g}"),
                        "derivation": "measured: median seconds per torch.add on a "
                                      "one-element tensor, over runs of 1000"},
        **({"multiprocessors": {
            "value": shape.units,
            "source": "torch.cuda.get_device_properties: multi_processor_count"}}
           if shape else {}),
        # what the launch-geometry bounds read (fxroof.launch_geometry)
        **({"compute_capability": {
            "value": ".".join(map(str, shape.capability)),
            "source": "torch.cuda.get_device_properties: major, minor"}}
           if shape and shape.capability else {}),
        **({"clock": {"value": shape.clock_hz,
                      "source": "torch.cuda.get_device_properties: clock_rate"}}
           if shape and shape.clock_hz else {}),
        "sources": [f"fxroof chips measure --device {device}"
                    f"{' --full' if not quick else ''} on {datetime.date.today().isoformat()}, "
                    f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
                    f"host allocator {host_allocator()}"],
    }


ONE_DIE_SUFFIX = "_gcd"  # chips.yaml's entry for one die of a multi-die package


def datasheet_chip(device_name: str, chips: dict):
    """The database chip a measured device is, from the name the driver reports
    ("NVIDIA A100-SXM4-80GB" -> a100_sxm_80gb, "Tesla T4" -> t4), or None."""
    name = device_name.lower().replace("-", " ").replace("_", " ")
    matches = []
    for chip in chips.values():
        # same model name, another board and clock: a PCIe board's driver name says so
        # ("NVIDIA H100 PCIe"), an SXM part's often does not ("NVIDIA H100 80GB HBM3")
        if ("pcie" in chip.id) != ("pcie" in name):
            continue
        # the model: "rtx_3090", "rtx_a6000", "rtx_6000_ada" (not the Turing "Quadro RTX
        # 6000"), the "rtx_8000" of "quadro_rtx_8000"; else the leading "a100", "h100", ...
        model = re.search(r"rtx_a?\d+(?:_ada)?", chip.id) or \
            re.match(r"[a-z]+\d+[a-z]*", chip.id)
        if model and re.search(rf"\b{model.group().replace('_', ' ')}\b", name):
            matches.append(chip)
    # several capacities of one model (A100 40/80 GB): the one whose size the name states
    sized = [c for c in matches if (m := re.search(r"(\d+)gb", c.id)) and
             re.search(rf"\b{m.group(1)}\s?gb", name)]
    # a package of two dies the driver lists as two devices (MI250X): one device is a die
    one_die = [c for c in matches if c.id.endswith(ONE_DIE_SUFFIX)]
    return (sized or one_die or matches or [None])[0]


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
    return os.path.join(user_chips_dir(), f"{chip_id}.yaml")


def check_target(path: str, force: bool) -> None:
    """Refuse, before measuring, a chip file path that is a folder, one that exists (unless
    ``force``) or one fxroof cannot write, creating its missing folders now (the default
    one, under FXROOF_CHIPS_DIR or ~/.config, often is missing): a folder that cannot be made
    must fail before minutes of measurement, not after."""
    if os.path.isdir(path):
        raise FxroofError(f"'{path}' is a folder: --out names the chip file to write, e.g. "
                          f"'{os.path.join(path, 'this-cpu.yaml')}'.")
    if os.path.exists(path) and not force:
        raise FxroofError(f"'{path}' already exists and fxroof does not overwrite it unless "
                          "asked: pass --force, or --out another path.")
    folder = existing = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:
        if not os.path.isdir(existing):
            raise FxroofError(f"Cannot write the chip file '{path}': '{existing}' is a file, "
                              "not a folder.")
        make_folder(folder, "the chip file's folder")
        check_writable(path, overwrite=True)
    except FxroofError as e:
        # the default path: say where its folder came from, which the user may not know
        user_folder = user_chips_dir()
        where = (f", or set FXROOF_CHIPS_DIR to a folder you can write (the user chip folder, "
                 f"'{user_folder}', is $FXROOF_CHIPS_DIR where set, else "
                 "~/.config/fxroof/chips)") if folder == os.path.abspath(user_folder) else ""
        raise FxroofError(f"{e} Nothing was measured; choose another --out{where}.") from None


def save(entry: dict, path: Optional[str] = None, force: bool = False) -> str:
    path = path or default_path(entry["id"])
    check_target(path, force)
    with atomic(path) as f:
        yaml.safe_dump({"schema_version": 1, "chips": [entry]}, f, sort_keys=False)
    return path
