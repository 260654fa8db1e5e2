"""The chip database: chips.yaml (shipped) plus the user's own YAML files.

``load_chips()`` returns Chip records whatever the file's layout details: ``peaks`` maps a
dtype to a dense peak in FLOP/s and ``bandwidth`` is bytes/s. Files are read with a safe loader
and validated; a bad entry raises FxroofError naming the file, chip and field. ``lint()``
catches the classic slips (a sparse figure quoted as dense, a bandwidth far off its class, a
peak per dtype that runs the wrong way).
"""
from __future__ import annotations

import logging
import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Optional

import yaml

from fxroof.calibration import parse_params
from fxroof.op_classes import MEASURED_CLASSES as CALIBRATED_CLASSES
from fxroof.errors import FxroofError, UsageError
from fxroof.files import read_text
from fxroof.suggest import did_you_mean
from fxroof.units import op_unit


def _shipped() -> str:
    """chips.yaml beside the source tree (a checkout or editable install), else where
    setup.cfg's data_files put it (sys.prefix/share/fxroof)."""
    beside = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "chips.yaml")
    return beside if os.path.exists(beside) else os.path.join(sys.prefix, "share", "fxroof",
                                                               "chips.yaml")


log = logging.getLogger(__name__)
SHIPPED = _shipped()
CLASSES = ("cpu", "gpu", "asic", "soc", "fpga")
DTYPES = ("fp64", "fp64_matrix", "fp32", "fp32_matrix", "tf32", "bf16", "fp16", "fp8", "int8")

# plausible bandwidth per class, bytes/s: a number outside is a unit slip (GB vs TB, bits)
BANDWIDTH_RANGE = {"cpu": (5e9, 2e12), "gpu": (5e10, 2e13), "asic": (1e10, 5e13),
                   "soc": (1e9, 1e12), "fpga": (1e9, 5e12)}
# chips whose working memory is on-chip SRAM (Groq, Cerebras) say so with
# `bandwidth: {memory: on-chip SRAM}`; their bandwidth is judged against this range instead
SRAM_BANDWIDTH_RANGE = (1e12, 1e17)
PEAK_RANGE = (1e8, 1e18)        # FLOP/s: a microcontroller to beyond a wafer-scale engine
CAPACITY_RANGE = (1e6, 1e14)    # bytes: 1 MB to 100 TB


@dataclass
class Chip:
    id: str
    name: str
    cls: str
    vendor: str
    peaks: dict                      # dtype -> dense FLOP/s
    units: dict                      # dtype -> "vector" | "matrix"
    bandwidth: float                 # bytes/s
    capacity: Optional[float] = None  # bytes
    tdp: Optional[float] = None
    sparse: dict = field(default_factory=dict)
    sources: list = field(default_factory=list)
    memory: Optional[str] = None      # e.g. "HBM3", "on-chip SRAM"
    op_overhead_s: Optional[float] = None  # measured chips: seconds of dispatch per eager op
    calibration: dict = field(default_factory=dict)  # op class -> calibration.Params (measured)
    compute_capability: Optional[tuple] = None  # CUDA (major, minor): what dispatch rules read
    multiprocessors: Optional[int] = None  # a GPU's SMs (CUs): the waves its tiles run in
    clock: Optional[float] = None  # Hz: a GPU's SM boost clock, where its entry states one

    def as_record(self) -> dict:
        return {"id": self.id, "name": self.name, "class": self.cls, "vendor": self.vendor,
                "peaks": dict(self.peaks), "units": dict(self.units),
                "bandwidth": self.bandwidth, "capacity": self.capacity, "tdp": self.tdp,
                "op_overhead_s": self.op_overhead_s}


MAX_FILE_BYTES = 4 * 2 ** 20  # a chips file is text: hundreds of chips fit in far less
MAX_EXPANDED_NODES = 10 ** 6  # YAML values after aliases expand: a "billion laughs" is refused
SCHEMA_VERSION = 1  # of a chips file (fxroof chips measure writes it)
# The fields a chip entry may have: any other is a slip (a misspelled tdp would silently leave
# a 70 W board priced as a datacenter GPU), named by a warning.
FIELDS = ("id", "name", "class", "vendor", "peaks", "bandwidth", "capacity", "tdp", "sparse",
          "sources", "op_overhead", "calibration", "compute_capability", "multiprocessors",
          "clock")


def _bad(path, chip, field_name, problem) -> FxroofError:
    return FxroofError(f"{path}: chip '{chip}': field '{field_name}' {problem}. Fix the entry "
                       "(see the header of chips.yaml for the format and units).")


def _number(value, path, chip, name) -> float:
    if isinstance(value, str):  # YAML 1.1 reads 8.1e12 (no sign after e) as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise _bad(path, chip, name, f"must be a positive finite number, not {value!r:.40}")
    return float(value)


def _mapping(entry: dict, key: str, path: str, chip_id: str, required: bool = False) -> dict:
    value = entry.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise _bad(path, chip_id, key, f"must be a mapping (dtype: ...), not "
                                       f"{type(value).__name__}")
    return value


def _overhead(entry: dict, path: str, chip_id: str) -> Optional[float]:
    value = entry.get("op_overhead")
    if value is None:
        return None
    value = value.get("value") if isinstance(value, dict) else value
    return _number(value, path, chip_id, "op_overhead")


def _peaks(entry: dict, path: str, chip_id: str) -> tuple[dict, dict]:
    peaks, units = {}, {}
    for dtype, spec in _mapping(entry, "peaks", path, chip_id, required=True).items():
        if dtype not in DTYPES:
            raise _bad(path, chip_id, f"peaks.{dtype}", f"is not a dtype fxroof knows "
                       f"({', '.join(DTYPES)})")
        if not isinstance(spec, dict) or spec.get("unit") not in ("vector", "matrix"):
            raise _bad(path, chip_id, f"peaks.{dtype}",
                       "needs {value: FLOP/s, unit: vector|matrix, derivation: ...}")
        peaks[dtype] = _number(spec.get("value"), path, chip_id, f"peaks.{dtype}.value")
        units[dtype] = spec["unit"]
    return peaks, units


def parse_chip(entry: dict, path: str) -> Chip:
    chip_id = entry.get("id") if isinstance(entry, dict) else None
    if not isinstance(chip_id, str):
        raise FxroofError(f"{path}: every chip needs a string 'id'; found {entry!r:.80}.")
    for required in ("name", "class", "peaks", "bandwidth"):
        if required not in entry:
            raise _bad(path, chip_id, required, "is missing")
    if entry["class"] not in CLASSES:
        raise _bad(path, chip_id, "class", f"must be one of {', '.join(CLASSES)}, not "
                                           f"{entry['class']!r:.40}")
    peaks, units = _peaks(entry, path, chip_id)
    bandwidth = entry["bandwidth"]
    memory = bandwidth.get("memory") if isinstance(bandwidth, dict) else None
    bandwidth = bandwidth.get("value") if isinstance(bandwidth, dict) else bandwidth
    return Chip(chip_id, str(entry["name"]), entry["class"], str(entry.get("vendor", "")),
                peaks, units, _number(bandwidth, path, chip_id, "bandwidth"),
                _number(entry["capacity"], path, chip_id, "capacity")
                if entry.get("capacity") is not None else None,
                _number(entry["tdp"], path, chip_id, "tdp") if entry.get("tdp") is not None
                else None,
                {k: _number(v, path, chip_id, f"sparse.{k}")
                 for k, v in _mapping(entry, "sparse", path, chip_id).items()},
                list(entry.get("sources") or []), memory, _overhead(entry, path, chip_id),
                _calibration(entry, path, chip_id), _capability(entry, path, chip_id),
                _multiprocessors(entry, path, chip_id), _clock(entry, path, chip_id))


def _capability(entry: dict, path: str, chip_id: str) -> Optional[tuple]:
    """``compute_capability: {value: "8.9", source: ...}`` -> (8, 9)."""
    value = entry.get("compute_capability")
    if value is None:
        return None
    text = str(value.get("value") if isinstance(value, dict) else value)
    match = re.fullmatch(r"(\d+)\.(\d+)", text)
    if match is None:
        raise _bad(path, chip_id, "compute_capability", f"must be major.minor like \"8.9\", "
                                                        f"not {text!r:.20}")
    return int(match.group(1)), int(match.group(2))


def _multiprocessors(entry: dict, path: str, chip_id: str) -> Optional[int]:
    """``multiprocessors: {value: 132, source: ...}`` -> 132: a whole number of SMs."""
    value = entry.get("multiprocessors")
    if value is None:
        return None
    value = value.get("value") if isinstance(value, dict) else value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
        raise _bad(path, chip_id, "multiprocessors", f"must be a whole number of "
                                                     f"multiprocessors (SMs, CUs) from 1 to "
                                                     f"100000, not {value!r:.40}")
    return value


def _clock(entry: dict, path: str, chip_id: str) -> Optional[float]:
    """``clock: {value: 1.98e9, source: ...}`` -> 1.98e9 Hz, the SM boost clock."""
    value = entry.get("clock")
    if value is None:
        return None
    value = _number(value.get("value") if isinstance(value, dict) else value,
                    path, chip_id, "clock")
    if not 1e6 <= value <= 1e11:
        raise _bad(path, chip_id, "clock", f"is the SM clock in Hz (1.98 GHz is 1.98e9), "
                                           f"not {value:g}")
    return value


def _calibration(entry: dict, path: str, chip_id: str) -> dict:
    """A measured chip's time model per op class (fxroof.calibration), validated."""
    found = {}
    for op_class, params in _mapping(entry, "calibration", path, chip_id).items():
        if op_class not in CALIBRATED_CLASSES:
            raise _bad(path, chip_id, f"calibration.{op_class}", "is not an op class of the "
                       f"time model ({', '.join(CALIBRATED_CLASSES)})")
        found[op_class] = parse_params(params, f"{path}: chip '{chip_id}': "
                                               f"calibration.{op_class}")
    return found


def _load_yaml(path: str):
    """The YAML document in ``path``: safe loader, bounded size and alias count."""
    try:
        text = read_text(path, MAX_FILE_BYTES, "a chips file")
    except OSError as e:
        raise FxroofError(f"Cannot read the chip file '{path}': {e.strerror}.") from None
    except UnicodeDecodeError:
        raise FxroofError(f"'{path}' is not a text file (not UTF-8): a chips file is YAML "
                          "text.") from None
    try:
        expanded = _expanded_size(yaml.compose(text, Loader=yaml.SafeLoader))
        if expanded > MAX_EXPANDED_NODES:
            raise FxroofError(f"'{path}' expands to {expanded:.3g} YAML values once its aliases "
                              f"are resolved (at most {MAX_EXPANDED_NODES:,}): write the values "
                              "out instead of nesting aliases.")
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise FxroofError(f"{path}{where} is not valid YAML: {getattr(e, 'problem', e)}.") \
            from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names one key twice: YAML keeps the
    last without a word, so which value a chip gets would be an accident of order."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float)):
                continue  # a list or mapping as a key: no chips file has one to repeat
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice in one mapping; keep one",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _expanded_size(root) -> int:
    """How many values the document holds once every alias is expanded, counted on the
    composed node graph (where an alias is a shared node), without expanding anything."""
    sizes: dict = {}

    def size(node) -> int:
        if id(node) not in sizes:
            sizes[id(node)] = 0  # a recursive alias counts once
            children = node.value if isinstance(node, yaml.SequenceNode) else \
                [v for pair in node.value for v in pair] \
                if isinstance(node, yaml.MappingNode) else []
            sizes[id(node)] = 1 + sum(size(child) for child in children)
        return sizes[id(node)]

    return size(root) if root is not None else 0


def read_file(path: str, warn: bool = False) -> list[Chip]:
    """The chips in a YAML file, validated; with ``warn``, each lint problem is logged as a
    warning (user files: the shipped database is linted by the test suite)."""
    data = _load_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("chips"), list):
        raise FxroofError(f"{path}: expected a mapping with a 'chips:' list.")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise FxroofError(f"{path}: schema_version is {version!r:.20}, and this fxroof reads "
                          f"chips files of schema {SCHEMA_VERSION}. Use the fxroof that wrote "
                          "it, or measure the chip again (`fxroof chips measure --force`).")
    chips = [parse_chip(entry, path) for entry in data["chips"]]
    ids = [chip.id for chip in chips]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:  # which entry would win is an accident of order: refuse instead
        raise FxroofError(f"{path}: more than one entry has the chip id "
                          f"{' or '.join(repr(i) for i in twice)}. Give each entry its own id "
                          "(a later file may replace a chip of an earlier one; one file may "
                          "not hold two).")
    if warn:
        for entry, chip in zip(data["chips"], chips):
            for problem in lint(chip) + _unknown_fields(entry):
                _warn_once(f"{path}: {problem}")
    return chips


_warned: set = set()


def forget_warnings() -> None:
    """Start a command afresh: the problems already said are said again (fxroof.cli)."""
    _warned.clear()


def _warn_once(message: str) -> None:
    """A command may load the chips more than once (its target, then every chip to price):
    each problem of a file is said once a command."""
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def _unknown_fields(entry: dict) -> list[str]:
    return [f"{entry['id']}: unknown field '{key}' is ignored.{did_you_mean(str(key), FIELDS)}"
            for key in entry if key not in FIELDS]


def user_chips_dir() -> str:
    """Where `fxroof chips measure` saves and every command looks for the user's own chips:
    $FXROOF_CHIPS_DIR, else ~/.config/fxroof/chips."""
    return os.environ.get("FXROOF_CHIPS_DIR") or os.path.join(
        os.path.expanduser("~"), ".config", "fxroof", "chips")


def user_chip_files() -> list[str]:
    """YAML files in the user chip folder."""
    folder = user_chips_dir()
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if f.endswith((".yaml", ".yml")))


def load_chips(extra: Optional[list[str]] = None) -> dict[str, Chip]:
    """Shipped chips, then the user chip folder, then ``extra`` files; a later chip with the
    same id replaces an earlier one."""
    chips = {c.id: c for c in read_file(SHIPPED)}
    for path in user_chip_files() + list(extra or []):
        chips.update({c.id: c for c in read_file(path, warn=True)})
    return chips


# the ids `fxroof chips measure --device cpu | cuda` saves under
MEASURED_IDS = {"cpu": "this-cpu", "cuda": "this-gpu"}


def resolve_chip(chip, chips: Optional[dict] = None) -> Chip:
    """A Chip as it is, or the chip a chip id names."""
    if isinstance(chip, Chip):
        return chip
    if not isinstance(chip, str):
        raise UsageError(f"A chip is a Chip or a chip id (`fxroof chips list`), not "
                         f"{type(chip).__name__} {chip!r:.40}.")
    return get_chip(chip, chips)


def get_chip(chip_id: str, chips: Optional[dict] = None) -> Chip:
    chips = chips if chips is not None else load_chips()
    device = next((d for d, measured in MEASURED_IDS.items() if measured == chip_id), None)
    if device and chip_id not in chips:
        raise FxroofError(
            f"There is no '{chip_id}' chip yet: it is this machine's "
            f"{'GPU' if device == 'cuda' else 'CPU'} as `fxroof chips measure --device "
            f"{device}` measures it (saved under "
            f"{user_chips_dir()}). Measure it first, or name a chip from `fxroof chips list`.")
    if chip_id not in chips:
        raise FxroofError(f"Unknown chip '{chip_id}'.{did_you_mean(chip_id, chips, cutoff=0.4)}"
                          " Known chips: "
                          f"{', '.join(sorted(chips))}.")
    return chips[chip_id]


# lower-precision peaks must not be below higher-precision ones on the same engine
_ORDER = [("fp64", "fp32"), ("fp32", "tf32"), ("tf32", "bf16"), ("tf32", "fp16"),
          ("bf16", "fp8"), ("fp16", "fp8")]


def lint(chip: Chip) -> list[str]:
    problems = []
    on_chip = (chip.memory or "").lower().startswith("on-chip")
    low, high = SRAM_BANDWIDTH_RANGE if on_chip else BANDWIDTH_RANGE[chip.cls]
    if not low <= chip.bandwidth <= high:
        problems.append(f"{chip.id}: bandwidth {chip.bandwidth:.3g} B/s is outside "
                        f"{low:.0e}..{high:.0e} for a {chip.cls} (GB vs TB, or bits?)")
    for dtype, dense in chip.peaks.items():
        if dtype in chip.sparse and abs(dense - chip.sparse[dtype]) <= 0.01 * dense:
            problems.append(f"{chip.id}: peak {dtype} equals its sparse figure: quote it dense")
    for dtype, peak in chip.peaks.items():
        if not PEAK_RANGE[0] <= peak <= PEAK_RANGE[1]:
            problems.append(f"{chip.id}: peak {dtype} {peak:.3g} {op_unit(dtype)}/s is outside "
                            f"{PEAK_RANGE[0]:.0e}..{PEAK_RANGE[1]:.0e}: a unit slip (TFLOP/s "
                            "written as FLOP/s?)")
    if chip.capacity is not None and not CAPACITY_RANGE[0] <= chip.capacity <= CAPACITY_RANGE[1]:
        problems.append(f"{chip.id}: capacity {chip.capacity:.3g} bytes is outside "
                        f"{CAPACITY_RANGE[0]:.0e}..{CAPACITY_RANGE[1]:.0e} (GB written as bytes?)")
    # a measured chip's peaks are what torch.mm ran at, on whichever engine it uses: on an
    # H100 or H200, fp64 GEMMs run on tensor cores and fp32 ones (TF32 off) on the CUDA
    # cores, so fp64 is faster there -- a finding, not a slip (`chips measure` writes
    # op_overhead; a datasheet entry has none)
    datasheet = chip.op_overhead_s is None
    for slow, fast in _ORDER if datasheet else ():
        if slow in chip.peaks and fast in chip.peaks and chip.peaks[fast] < chip.peaks[slow] \
                and chip.units.get(fast) == chip.units.get(slow):
            problems.append(f"{chip.id}: {fast} peak below {slow} on the same {chip.units[fast]}"
                            " unit: a dtype runs the wrong way")
    return problems
