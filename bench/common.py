"""Helpers shared by the measurements: quiet output, environments, fakes of AWS sinks, stats."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

# Production runs Powertools at INFO; set before any handler module creates its Logger.
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "INFO")
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "serenity-allocator")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "SerenityAllocator")

BENCH_TOKEN = "bench-token"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/bench-allocation.fifo"
MAX_RECEIVE_COUNT = 5  # template.yaml's Constants.Queue.MaxReceiveCount


def note(message: str) -> None:
    """Progress on stderr (stdout is where the handlers print their logs and EMF)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def silenced() -> Iterator[None]:
    """Send fd 1 and 2 to /dev/null: logs and EMF are still formatted and written, unseen.

    Powertools' Logger holds the ``sys.stdout`` object it found at import, so swapping
    ``sys.stdout`` would not reach it; redirecting the file descriptors does, and keeps the
    real cost of a write per log line.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        for fd in (saved_out, saved_err, devnull):
            os.close(fd)


def allocator_env(origin: str, **overrides: str) -> dict[str, str]:
    """The Allocator's environment against a loopback simulator (no AWS: no DLQ, no bus)."""
    env = {
        "SEMRUSH_BASE_URL": origin,
        "SEMRUSH_TOKEN": BENCH_TOKEN,
        "ENVIRONMENT": "bench",
        "SERENITY_DYNAMIC_ALLOCATION": "true",
        "MAX_RECEIVE_COUNT": str(MAX_RECEIVE_COUNT),
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    env.update(overrides)
    return env


class RecordingEvents:
    """An EventBridge client stand-in for the real OutcomePublisher: keeps the event details.

    The publisher still builds and serializes every entry as it would for EventBridge.
    """

    def __init__(self, latency_s: float = 0.0) -> None:
        self.outcomes: list[dict[str, Any]] = []
        self.pool_low: list[dict[str, Any]] = []
        self.latency_s = latency_s
        """One AWS round trip per PutEvents (0: in process)."""

    def put_events(self, Entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:  # noqa: N803
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        for entry in Entries:
            detail = json.loads(entry["Detail"])
            if entry["DetailType"] == "serenity.pool.low":
                self.pool_low.append(detail)
            else:
                self.outcomes.append(detail)
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "bench"} for _ in Entries]}


def median(values: Sequence[float]) -> float:
    """The median (0.0 for no values)."""
    return float(statistics.median(values)) if values else 0.0


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator`` rounded, None when the denominator is 0."""
    return round(numerator / denominator, 3) if denominator else None
