"""Chrome / Perfetto trace of a timed graph: one track per phase, one slice per ATen node laid
end to end at its median time, named by module and op, with its costs as args.
Open the file in https://ui.perfetto.dev or chrome://tracing."""
from __future__ import annotations

import json

from fxroof.errors import UsageError
from fxroof.files import atomic, check_writable

_TRACKS = {"forward": 1, "backward": 2}


def trace_events(graph) -> list[dict]:
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": phase}}
              for phase, tid in _TRACKS.items()]
    clock_us = 0.0
    for r in graph.records():
        if r["time_s"] is None:
            continue
        duration_us = r["time_s"] * 1e6
        events.append({
            "name": f"{r['module'] or '(root)'} {r['op']}", "cat": r["layer_type"], "ph": "X",
            "pid": 0, "tid": _TRACKS[r["phase"]], "ts": round(clock_us, 3),
            "dur": round(duration_us, 3),
            "args": {"node": r["name"], "target": r["target"], "flops": r["flops"],
                     "bytes": r["bytes"], "shape": r["shape"]},
        })
        clock_us += duration_us
    return events


def write_trace(graph, path: str, overwrite: bool = False) -> None:
    if graph.timing is None:
        raise UsageError("A trace shows measured times, and this graph was not timed: time it "
                         "first (g.time(...)), or use fxroof profile --trace.")
    check_writable(path, overwrite)
    with atomic(path) as f:
        json.dump({"traceEvents": trace_events(graph), "displayTimeUnit": "ms",
                   "otherData": {"model": graph.model.name, **graph.timing.as_dict()}}, f)
