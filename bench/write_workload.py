"""What the write benchmarks share: a service's request and write, the simulated clock, the ops.

:mod:`bench.writes` (the synthetic workload) and :mod:`bench.writes_pools` (the real-sized
pools) both drive services through these.
"""

from __future__ import annotations

from dataclasses import dataclass

GATE_OPS = frozenset({"write_prompts", "create_project"})
"""The simulator's write-gate operations (a service's metered writes) in its call log."""


class SimClock:
    """Simulated monotonic seconds shared by the simulator, the allocator and the services."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


@dataclass(frozen=True)
class Request:
    """One incoming request of a service: a burst of prompt batches, or one project."""

    at: float
    child: str
    prompts: tuple[int, ...]
    project: bool


@dataclass(frozen=True)
class Outcome:
    """One logical write: did it end refused, how long did the lag make it wait."""

    refused: bool
    waited_s: float
