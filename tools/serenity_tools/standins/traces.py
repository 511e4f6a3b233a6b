"""The consumers' JSON-lines traces: written as they work, read and counted afterwards.

Every receive and release (and a crash, just before the SIGKILL) is one line with a monotonic
timestamp (``time.monotonic`` is system-wide on Linux), so the checks can compare consumers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO


class TraceWriter:
    """Appends one JSON object per line and flushes it, so a SIGKILL loses nothing written."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self._file: TextIO = path.open("a", encoding="utf-8")
        self._clock = clock
        self._lock = threading.Lock()

    def write(self, event: dict[str, Any]) -> None:
        """Write ``event`` (a ``t`` is added when absent) as one line."""
        event.setdefault("t", self._clock())
        line = json.dumps(event, separators=(",", ":")) + "\n"
        with self._lock:  # the crash timer thread may write too
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def read_trace_events(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every event of the given trace files, ordered by time (a torn last line is skipped)."""
    events: list[dict[str, Any]] = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    events.sort(key=lambda event: float(event.get("t", 0.0)))
    return events


@dataclass(frozen=True)
class ConsumerStats:
    """What one consumer slot did (all its generations)."""

    batches: int
    received: int
    deleted: int


@dataclass(frozen=True)
class TraceSummary:
    """Counts over a set of trace files."""

    batches: int
    received: int
    deleted: int
    item_failures: int
    handler_errors: int
    crashes: int
    per_consumer: dict[int, ConsumerStats]


def summarize_traces(events: Iterable[Mapping[str, Any]]) -> TraceSummary:
    """Count batches, messages and failures per consumer slot."""
    batches: dict[int, int] = {}
    received: dict[int, int] = {}
    deleted: dict[int, int] = {}
    failures = errors = crashes = 0
    for event in events:
        slot = int(event.get("consumer", -1))
        kind = event.get("ev")
        if kind == "receive":
            batches[slot] = batches.get(slot, 0) + 1
            received[slot] = received.get(slot, 0) + len(event.get("msgs", []))
        elif kind == "release":
            deleted[slot] = deleted.get(slot, 0) + len(event.get("deleted", []))
            failures += len(event.get("failures", [])) if not event.get("error") else 0
            errors += 1 if event.get("error") else 0
        elif kind == "crash":
            crashes += 1
    slots = sorted(set(batches) | set(deleted))
    return TraceSummary(
        batches=sum(batches.values()),
        received=sum(received.values()),
        deleted=sum(deleted.values()),
        item_failures=failures,
        handler_errors=errors,
        crashes=crashes,
        per_consumer={
            slot: ConsumerStats(batches.get(slot, 0), received.get(slot, 0), deleted.get(slot, 0))
            for slot in slots
        },
    )
