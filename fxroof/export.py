"""Exports of an AnnotatedGraph: JSON (versioned schema), CSV of nodes, networkx / GraphML.

JSON schema, version 1 (all FLOPs in FLOP, all sizes in bytes, times in seconds)::

    schema_version: 1
    fxroof_version: str
    model:   {name, batch, inputs: [{shape, dtype}], dtype, mode, backward, parameters, device,
              view, amp, loss, optimizer}
    totals:  {forward, [backward], [optimizer], overall}: each {nodes, flops, macs,
              bytes_read, bytes_written, bytes, intensity, [time_s]}
    memory:  {parameter_bytes, buffer_bytes, input_bytes, activation_bytes,
              saved_for_backward_bytes, gradient_bytes, optimizer_state_bytes, peak_bytes,
              peak_node}
    coverage: {nodes, costed_nodes, default_rule_ops: {target: count}}
    nodes:   [{name, phase, target, op, layer_type, module, forward_node, shape, dtype,
              layout (4-D outputs: "contiguous" | "channels_last"), flops, macs, bytes_read,
              bytes_written, bytes, intensity, op_class, rule, faulted_bytes (pages the
              step's allocations fault in at this node, fxroof.page_faults),
              saved_bytes_read, saved_bytes_written (bytes of the activations saved for
              backward it reads and writes, fxroof.memory), time_s,
              achieved_flops_per_s, achieved_bytes_per_s,
              + after g.roofline(chip): attainable_flops_per_s, bound, ideal_s (the roof
              time), predicted_s, low_s, high_s (the time model's expectation and band),
              time_model ("calibrated" | "ideal"), fraction_of_roof, gap_s}]
    chip:    (after g.roofline(chip)) the chip record the roof fields refer to
    timing:  (after the timing pass) {device, warmup, repeats, overhead_s, interpreted_s,
              eager_s, ratio}: per phase, seconds

Later passes extend it (the timing pass adds ``time_s`` per node and a ``timing`` section)
without changing the meaning of any key above. The training step (issue 15) added keys and a
third phase value, ``optimizer``, and changed the meaning of none, so the version stays 1.
"""
from __future__ import annotations

import csv
import json
import math
import operator
import os

import networkx as nx

from fxroof.cost_pass import is_costed
from fxroof.errors import FxroofError
from fxroof.files import atomic, atomic_path, check_writable
from fxroof.keys import INPUT, ORIGIN, PHASES
from fxroof.units import FLOAT_DTYPES
from fxroof.version import __version__
from op_costs import MATRIX, MEMORY, VECTOR, VIEW

SCHEMA_VERSION = 1


NODE_KEYS = ("name", "phase", "op", "op_class", "dtype", "layer_type", "flops", "bytes")
MAX_READ_BYTES = 2 ** 30  # 1 GiB: a schema-1 file of a 70B model is far below this
MAX_COUNT = 1e24  # FLOPs or bytes of one node: a 70B model's largest at 1M tokens is ~1e18
OP_CLASSES = (MATRIX, VECTOR, MEMORY, VIEW)


def read_json(path: str) -> dict:
    """An annotation written by ``write_json``, validated against schema version 1: every
    problem names the file, the field and what was expected."""
    def bad(problem: str) -> FxroofError:
        return FxroofError(f"'{path}' is not an fxroof annotation (schema_version "
                           f"{SCHEMA_VERSION}): {problem}. Pass a JSON written by `fxroof "
                           "annotate --json` (or g.to_json), or a model name.")

    if os.path.exists(path) and not os.path.isfile(path):  # a folder, a device, a pipe
        raise bad("it is not a regular file")
    if not os.path.isfile(path):
        raise FxroofError(f"No such file '{path}': pass a JSON written by `fxroof annotate "
                          "--json` or a model name.")
    if os.path.getsize(path) > MAX_READ_BYTES:
        raise bad(f"it is {os.path.getsize(path):,} bytes, more than any annotation")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except UnicodeDecodeError:
        raise bad("it is not text (UTF-8)") from None
    except json.JSONDecodeError as e:
        raise bad(f"it is not valid JSON (line {e.lineno}: {e.msg}; truncated?)") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise bad("its 'schema_version' is "
                  + (repr(data.get("schema_version")) if isinstance(data, dict) else "missing"))
    model, nodes = data.get("model"), data.get("nodes")
    if not isinstance(model, dict) or not {"name", "batch", "dtype"} <= set(model):
        raise bad("'model' must hold name, batch and dtype")
    if model["dtype"] not in FLOAT_DTYPES:  # it picks the roof drawn: fp32's for an unknown one
        raise bad(f"its model dtype is {model['dtype']!r:.30}, not one of "
                  f"{', '.join(FLOAT_DTYPES)}")
    if model["batch"] is not None and not (isinstance(model["batch"], int)
                                           and not isinstance(model["batch"], bool)
                                           and model["batch"] > 0):
        raise bad(f"its model batch is {model['batch']!r:.30}, not a positive integer")
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise bad("'nodes' must be a list of node records")
    for i, node in enumerate(nodes):
        missing = [k for k in NODE_KEYS if k not in node]
        if missing:
            raise bad(f"node {i} lacks {', '.join(missing)}")
        if not all(_count(node[k]) for k in ("flops", "bytes")):
            raise bad(f"node {i}'s flops and bytes must be whole numbers from 0 to "
                      f"{MAX_COUNT:.0e}, not {node['flops']!r:.20} and {node['bytes']!r:.20}")
        if node["op_class"] not in OP_CLASSES:  # it picks the node's roof: matrix or vector
            raise bad(f"node {i}'s op_class is {node['op_class']!r:.30}, not one of "
                      f"{', '.join(OP_CLASSES)}")
        if node["phase"] not in PHASES:
            raise bad(f"node {i}'s phase is {node['phase']!r:.30}, not one of "
                      f"{', '.join(PHASES)}")
    return data


def _count(value) -> bool:
    """A FLOP or byte count as JSON holds one: a whole number from 0 to MAX_COUNT (Python's
    json reads NaN and Infinity, which no annotation writes; 1e300 FLOPs over 1e-300 bytes
    made an infinite intensity that matplotlib could not place)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and 0 <= value <= MAX_COUNT and value == int(value)


def to_dict(graph) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "fxroof_version": __version__,
        "model": graph.model.as_dict(),
        "totals": graph.totals(),
        "memory": graph.memory.as_dict(),
        "coverage": graph.coverage(),
        "nodes": graph.records(),
        **({"timing": graph.timing.as_dict()} if graph.timing is not None else {}),
        **({"chip": graph.chip.as_record()} if graph.chip is not None else {}),
    }


def write_json(graph, path: str, overwrite: bool = False) -> None:
    check_writable(path, overwrite)
    data = to_dict(graph)  # everything computed before the file is opened
    with atomic(path) as f:
        json.dump(data, f, indent=1)


def write_csv(graph, path: str, overwrite: bool = False) -> None:
    """One row per node; the columns are the JSON node record's keys."""
    check_writable(path, overwrite)
    records = graph.records()
    with atomic(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]) if records else ["name"])
        writer.writeheader()
        for r in records:
            writer.writerow({**r, "shape": "x".join(map(str, r["shape"]))})


def to_networkx(graph):
    """A DiGraph over both phases: node attributes are the JSON node record (None -> ''),
    edges follow data flow, and each backward graph input is joined to the forward node it
    stands for (so a saved activation links the two phases)."""
    g = nx.DiGraph(model=graph.model.name, schema_version=SCHEMA_VERSION)
    for r in graph.records():
        g.add_node(f"{r['phase']}:{r['name']}", **{
            k: ("x".join(map(str, v)) if k == "shape" else ("" if v is None else v))
            for k, v in r.items()})
    for fx_graph in graph.capture.graphs():
        for node in fx_graph.nodes:
            if not is_costed(node):
                continue
            phase = node.meta[ORIGIN].phase
            for source in _costed_sources(node):
                kind = source.meta.get(INPUT)
                if kind is not None and kind.kind == "saved":
                    src = f"forward:{kind.label}"
                else:
                    src = f"{phase}:{source.name}"
                if src in g:
                    g.add_edge(src, f"{phase}:{node.name}")
    return g


def _costed_sources(node):
    """Inputs of ``node``, looking through getitem to the op that produced the tuple."""
    for arg in node.all_input_nodes:
        while arg.op == "call_function" and arg.target is operator.getitem:
            arg = arg.args[0]
        yield arg


def write_graphml(graph, path: str, overwrite: bool = False) -> None:
    check_writable(path, overwrite)
    g = to_networkx(graph)
    with atomic_path(path) as partial:
        nx.write_graphml(g, partial)
