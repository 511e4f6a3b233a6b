"""What the write benchmarks share: a service's request and write, and the gate's operations.

:mod:`bench.writes` (the synthetic workload) and :mod:`bench.writes_pools` (the real-sized
pools) both drive services through these.
"""

from __future__ import annotations

from dataclasses import dataclass

GATE_OPS = frozenset({"write_prompts", "create_project"})
"""The simulator's write-gate operations (a service's metered writes) in its call log."""


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
