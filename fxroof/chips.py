"""The chip database: chips.yaml (shipped) plus the user's own YAML files.

``load_chips()`` returns Chip records whatever the file's layout details: ``peaks`` maps a
dtype to a dense peak in FLOP/s and ``bandwidth`` is bytes/s. Files are read with a safe loader
and validated; a bad entry raises FxroofError naming the file, chip and field. ``lint()``
catches the classic slips (a sparse figure quoted as dense, a bandwidth far off its class, a
peak per dtype that runs the wrong way).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import yaml

from fxroof.errors import FxroofError
from fxroof.suggest import did_you_mean


def _shipped() -> str:
    """chips.yaml beside the source tree (a checkout or editable install), else where
    setup.cfg's data_files put it (sys.prefix/share/fxroof)."""
    beside = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "chips.yaml")
    return beside if os.path.exists(beside) else os.path.join(sys.prefix, "share", "fxroof",
                                                               "chips.yaml")


SHIPPED = _shipped()
CLASSES = ("cpu", "gpu", "asic", "soc", "fpga")
DTYPES = ("fp64", "fp64_matrix", "fp32", "fp32_matrix", "tf32", "bf16", "fp16", "fp8", "int8")

# plausible bandwidth per class, bytes/s: a number outside is a unit slip (GB vs TB, bits)
BANDWIDTH_RANGE = {"cpu": (5e9, 2e12), "gpu": (5e10, 2e13), "asic": (1e10, 5e13),
                   "soc": (1e9, 1e12), "fpga": (1e9, 5e12)}
# chips whose working memory is on-chip SRAM (Groq, Cerebras) say so with
# `bandwidth: {memory: on-chip SRAM}`; their bandwidth is judged against this range instead
SRAM_BANDWIDTH_RANGE = (1e12, 1e17)


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

    def as_record(self) -> dict:
        return {"id": self.id, "name": self.name, "class": self.cls, "vendor": self.vendor,
                "peaks": dict(self.peaks), "units": dict(self.units),
                "bandwidth": self.bandwidth, "capacity": self.capacity, "tdp": self.tdp,
                "op_overhead_s": self.op_overhead_s}


def _bad(path, chip, field_name, problem) -> FxroofError:
    return FxroofError(f"{path}: chip '{chip}': field '{field_name}' {problem}. Fix the entry "
                       "(see the header of chips.yaml for the format and units).")


def _number(value, path, chip, name) -> float:
    if isinstance(value, str):  # YAML 1.1 reads 8.1e12 (no sign after e) as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _bad(path, chip, name, f"must be a positive number, not {value!r}")
    return float(value)


def _overhead(entry: dict, path: str, chip_id: str) -> Optional[float]:
    value = entry.get("op_overhead")
    if value is None:
        return None
    value = value.get("value") if isinstance(value, dict) else value
    return _number(value, path, chip_id, "op_overhead")


def parse_chip(entry: dict, path: str) -> Chip:
    chip_id = entry.get("id") if isinstance(entry, dict) else None
    if not isinstance(chip_id, str):
        raise FxroofError(f"{path}: every chip needs a string 'id'; found {entry!r:.80}.")
    for required in ("name", "class", "peaks", "bandwidth"):
        if required not in entry:
            raise _bad(path, chip_id, required, "is missing")
    if entry["class"] not in CLASSES:
        raise _bad(path, chip_id, "class", f"must be one of {', '.join(CLASSES)}")
    peaks, units = {}, {}
    for dtype, spec in (entry["peaks"] or {}).items():
        if dtype not in DTYPES:
            raise _bad(path, chip_id, f"peaks.{dtype}", f"is not a dtype fxroof knows "
                       f"({', '.join(DTYPES)})")
        if not isinstance(spec, dict) or spec.get("unit") not in ("vector", "matrix"):
            raise _bad(path, chip_id, f"peaks.{dtype}",
                       "needs {value: FLOP/s, unit: vector|matrix, derivation: ...}")
        peaks[dtype] = _number(spec.get("value"), path, chip_id, f"peaks.{dtype}.value")
        units[dtype] = spec["unit"]
    bandwidth = entry["bandwidth"]
    memory = bandwidth.get("memory") if isinstance(bandwidth, dict) else None
    bandwidth = bandwidth.get("value") if isinstance(bandwidth, dict) else bandwidth
    return Chip(chip_id, entry["name"], entry["class"], entry.get("vendor", ""), peaks, units,
                _number(bandwidth, path, chip_id, "bandwidth"),
                _number(entry["capacity"], path, chip_id, "capacity")
                if "capacity" in entry else None, entry.get("tdp"),
                {k: _number(v, path, chip_id, f"sparse.{k}")
                 for k, v in (entry.get("sparse") or {}).items()},
                list(entry.get("sources") or []), memory, _overhead(entry, path, chip_id))


def read_file(path: str) -> list[Chip]:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise FxroofError(f"Cannot read the chip file '{path}': {e.strerror}.") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise FxroofError(f"{path}{where} is not valid YAML: {getattr(e, 'problem', e)}.") from None
    if not isinstance(data, dict) or not isinstance(data.get("chips"), list):
        raise FxroofError(f"{path}: expected a mapping with a 'chips:' list.")
    return [parse_chip(entry, path) for entry in data["chips"]]


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
        chips.update({c.id: c for c in read_file(path)})
    return chips


def get_chip(chip_id: str, chips: Optional[dict] = None) -> Chip:
    chips = chips if chips is not None else load_chips()
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
    for slow, fast in _ORDER:
        if slow in chip.peaks and fast in chip.peaks and chip.peaks[fast] < chip.peaks[slow] \
                and chip.units.get(fast) == chip.units.get(slow):
            problems.append(f"{chip.id}: {fast} peak below {slow} on the same {chip.units[fast]}"
                            " unit: a dtype runs the wrong way")
    return problems
