"""The op surface: every float32 sample of every op in PyTorch's own op test database
(``torch.testing._internal.common_methods_invocations.op_db``) through ``fxroof.analyze``,
forward and, where the op is differentiable, backward.

Per sample it records the outcome -- ``analysed``, a clear ``FxroofError`` (a one-paragraph
message, e.g. an op whose result depends on tensor values), or a ``raw`` exception (a bug: a
cost rule or pass that crashed) -- the ATen ops reached, and which of them fell to the default
(bytes-only) rule. Targets (issue 12): 0 raw exceptions; >= 98% of the distinct ATen ops
reached have a rule. Prints one JSON line per op with problems and a summary line.

    python benchmarks/bench_opinfo.py [--ops add mm ...] [--max-samples N] [--json out.json]

Needs ``expecttest`` (in fxroof's test extras), which PyTorch's test helpers import.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils import _pytree as pytree

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fxroof  # noqa: E402
from benchmarks import script_main  # noqa: E402
from op_costs import DEFAULT_RULE  # noqa: E402


class OpModule(nn.Module):
    """Calls one OpInfo op on a sample; the sample's tensors are its inputs."""

    def __init__(self, op, spec, constants):
        super().__init__()
        self.op, self.spec, self.constants = op, spec, constants

    def forward(self, *tensors):
        leaves = iter(tensors)
        flat = [next(leaves) if c is _TENSOR else c for c in self.constants]
        args, kwargs = pytree.tree_unflatten(flat, self.spec)
        return self.op(*args, **kwargs)


_TENSOR = object()


@dataclass
class Outcome:
    analysed: int = 0
    clear_errors: list = field(default_factory=list)
    raw_errors: list = field(default_factory=list)
    reached: Counter = field(default_factory=Counter)
    default: Counter = field(default_factory=Counter)


def run_sample(opinfo, sample, backward: bool, outcome: Outcome) -> None:
    flat, spec = pytree.tree_flatten(((sample.input, *sample.args), sample.kwargs))
    tensors = [x for x in flat if isinstance(x, torch.Tensor)]
    constants = [_TENSOR if isinstance(x, torch.Tensor) else x for x in flat]
    module = OpModule(opinfo.op, spec, constants)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = fxroof.analyze(module, *tensors, backward=backward)
    except fxroof.FxroofError as e:
        outcome.clear_errors.append(str(e)[:200])
        return
    except Exception as e:  # noqa: BLE001 -- exactly what this sweep exists to count
        outcome.raw_errors.append(f"{type(e).__name__}: {str(e)[:200]}")
        return
    outcome.analysed += 1
    for r in g.records():
        outcome.reached[r["target"]] += 1
        if r["rule"] == DEFAULT_RULE:
            outcome.default[r["target"]] += 1


def sweep_op(opinfo, max_samples: int | None = None) -> Outcome:
    outcome = Outcome()
    backward = bool(opinfo.supports_autograd)
    try:
        samples = list(opinfo.sample_inputs("cpu", torch.float32, requires_grad=backward))
    except Exception as e:  # noqa: BLE001 -- a sample generator failing is PyTorch's, not ours
        outcome.clear_errors.append(f"no samples: {type(e).__name__}")
        return outcome
    for sample in samples[:max_samples]:
        has_grad = any(isinstance(x, torch.Tensor) and x.requires_grad
                       for x in pytree.tree_leaves((sample.input, sample.args, sample.kwargs)))
        run_sample(opinfo, sample, backward and has_grad, outcome)
    return outcome


def float32_ops(names=None):
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]
    if names:
        ops = [op for op in ops if op.name in names or op.full_name in names]
    return ops


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", help="OpInfo names (default: all)")
    parser.add_argument("--max-samples", type=int, default=None)
    parser.add_argument("--json", help="write the full per-op results here")
    args = parser.parse_args()
    if args.json and (os.path.isdir(args.json)
                      or not os.path.isdir(os.path.dirname(os.path.abspath(args.json)))):
        parser.error(f"--json {args.json}: name a file in an existing folder")
    ops = float32_ops(args.ops)
    if args.ops and not ops:
        parser.error(f"--ops: none of {args.ops} is an OpInfo name with float32 samples "
                     "(e.g. add, mm, nn.functional.conv2d)")
    start = time.perf_counter()
    reached, default, totals, per_op = Counter(), Counter(), Counter(), {}
    for opinfo in ops:
        outcome = sweep_op(opinfo, args.max_samples)
        reached.update(outcome.reached)
        default.update(outcome.default)
        totals.update(analysed=outcome.analysed, clear=len(outcome.clear_errors),
                      raw=len(outcome.raw_errors))
        per_op[opinfo.full_name] = {"analysed": outcome.analysed,
                                    "clear_errors": outcome.clear_errors[:3],
                                    "raw_errors": outcome.raw_errors[:3],
                                    "default_rule_ops": dict(outcome.default)}
        if outcome.raw_errors or outcome.default:
            print(json.dumps({"op": opinfo.full_name, **per_op[opinfo.full_name]}), flush=True)
    ruled = len(reached) - len(default)
    summary = {"ops": len(per_op), "samples": dict(totals),
               "distinct_aten_ops": len(reached), "with_rule": ruled,
               "with_rule_fraction": round(ruled / max(len(reached), 1), 4),
               "default_rule_ops": sorted(default),
               "target_met": totals["raw"] == 0 and ruled >= 0.98 * len(reached),
               "seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps(summary))
    if args.json:  # atomically: an interrupted run leaves the old file or none
        tmp = f"{args.json}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"summary": summary, "ops": per_op}, f, indent=1)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    script_main(main, __file__)
