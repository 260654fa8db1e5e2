"""Rollups: plain rows over node records. Totals are exact integer sums of the nodes.

Every row: key, nodes, flops, macs, bytes_read, bytes_written, bytes, flops_share,
macs_share, bytes_share (shares of the grand total of the records given, in [0, 1]), and
time_s when nodes carry it.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterable, Optional

from fxroof.errors import UsageError
from fxroof.suggest import did_you_mean

SUMMED = ("flops", "macs", "bytes_read", "bytes_written", "bytes")
GROUPINGS = ("layer_type", "module", "op", "phase")


def module_at_depth(path: str, depth: Optional[int]) -> str:
    """'layer3.1.conv2' at depth 2 -> 'layer3.1'; the root module's own code is '(root)'."""
    if not path:
        return "(root)"
    parts = path.split(".")
    return ".".join(parts[:depth]) if depth else path


def key_function(by: str, depth: Optional[int] = None) -> Callable[[dict], str]:
    if by == "module":
        return lambda r: module_at_depth(r["module"], depth)
    if by in GROUPINGS:
        return lambda r: r[by]
    raise UsageError(f"Cannot group by '{by}'.{did_you_mean(by, GROUPINGS)} Choose one of "
                     f"{', '.join(GROUPINGS)}.")


SORTABLE = ("flops", "macs", "bytes", "bytes_read", "bytes_written", "intensity", "time_s",
            "nodes", "predicted_s", "ideal_s", "gap_s", "time_share", "flops_share",
            "macs_share", "bytes_share")


def check_sort(sort: str, available: Iterable[str]) -> str:
    """``sort`` if it names a numeric field of the rows, else a clear error."""
    known = [k for k in SORTABLE if k in set(available)]
    if sort not in known:
        raise UsageError(f"Cannot sort by '{sort}'.{did_you_mean(sort, known)} Sort by one of "
                         f"{', '.join(known)}.")
    return sort


def total(records: Iterable[dict]) -> dict:
    row = {k: 0 for k in SUMMED}
    row["nodes"] = 0
    timed = 0.0
    has_time = False
    for r in records:
        row["nodes"] += 1
        for k in SUMMED:
            row[k] += r[k]
        if r.get("time_s") is not None:
            has_time = True
            timed += r["time_s"]
    row["intensity"] = row["flops"] / row["bytes"] if row["bytes"] else None
    if has_time:
        row["time_s"] = timed
    return row


def breakdown(records: list[dict], by: str = "layer_type", depth: Optional[int] = None,
              sort: str = "flops") -> list[dict]:
    key = key_function(by, depth)
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise UsageError(f"depth must be a positive integer (module path levels), not {depth!r}.")
    check_sort(sort, ("nodes", *SUMMED, "intensity", "time_s", "flops_share", "macs_share",
                      "bytes_share", "time_share"))
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[key(r)].append(r)
    grand = total(records)
    rows = []
    for name, members in groups.items():
        row = {"key": name, **total(members)}
        row["flops_share"] = row["flops"] / grand["flops"] if grand["flops"] else 0.0
        row["macs_share"] = row["macs"] / grand["macs"] if grand["macs"] else 0.0
        row["bytes_share"] = row["bytes"] / grand["bytes"] if grand["bytes"] else 0.0
        if "time_s" in row and grand.get("time_s"):
            row["time_share"] = row["time_s"] / grand["time_s"]
        rows.append(row)
    rows.sort(key=lambda r: (-(r.get(sort) or 0), r["key"]))
    return rows
