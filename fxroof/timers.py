"""Per-node timers for the timing pass (fxroof.timing): a wall clock on the CPU, CUDA events
on a GPU.

Both follow one protocol: ``start(key)`` / ``stop(key)`` around each node, ``collect()`` once
per iteration returning {key: seconds}. The CUDA timer records an event pair per node and
synchronises once, in ``collect``, so timing does not serialise the host with the device
between nodes. Event and synchronise factories are injectable so the pairing logic is tested
without a GPU.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Hashable, NamedTuple, Optional

import torch


class CpuTimer:
    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._open: dict[Hashable, float] = {}
        self._done: dict[Hashable, float] = {}

    def start(self, key) -> None:
        self._open[key] = self._clock()

    def stop(self, key) -> None:
        self._done[key] = self._clock() - self._open.pop(key)

    def collect(self) -> dict:
        done, self._done = self._done, {}
        return done


class CudaTimer:
    def __init__(self, event_factory: Optional[Callable] = None,
                 synchronize: Optional[Callable[[], None]] = None):
        self._event = event_factory or (lambda: torch.cuda.Event(enable_timing=True))
        self._synchronize = synchronize or torch.cuda.synchronize
        self._pairs: dict[Hashable, list] = {}

    def start(self, key) -> None:
        event = self._event()
        event.record()
        self._pairs[key] = [event, None]

    def stop(self, key) -> None:
        event = self._event()
        event.record()
        self._pairs[key][1] = event

    def collect(self) -> dict:
        self._synchronize()  # once per iteration: every event pair is complete after this
        pairs, self._pairs = self._pairs, {}
        unmatched = [k for k, (_, end) in pairs.items() if end is None]
        if unmatched:
            raise RuntimeError(f"timer started but never stopped for {unmatched[:3]}")
        return {k: start.elapsed_time(end) / 1e3 for k, (start, end) in pairs.items()}  # ms->s


class Summary(NamedTuple):
    """Statistics of repeated timings, in seconds. The one quartile definition fxroof uses
    everywhere: ``statistics.quantiles(method="inclusive")`` (numpy's default, linear)."""

    median_s: float
    min_s: float
    max_s: float
    iqr_s: float   # interquartile range: the spread
    samples: int
    q1_s: float = 0.0
    q3_s: float = 0.0


def summarize(samples: list[float]) -> Summary:
    if not samples:
        raise ValueError("no timing samples")
    ordered = sorted(samples)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return Summary(statistics.median(ordered), ordered[0], ordered[-1], q3 - q1, len(ordered),
                   q1, q3)
