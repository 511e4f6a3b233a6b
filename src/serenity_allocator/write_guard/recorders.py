"""Where the guard's two metrics go: an injected recorder, so the guard needs no Powertools.

``QuotaRetryOutcome`` (one per recovery cycle: ``recovered``, ``exhausted`` or ``abandoned``,
the value the attempt number) and ``QuotaRollbackFailed`` (one per rollback hook that raised).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

QuotaRetryResult = Literal["recovered", "exhausted", "abandoned"]
"""How a recovery cycle ended: the write landed; it was finally refused (quota or deadline); a
non-quota answer or an exception ended it. The three add up to every cycle."""

METRIC_NAME = "QuotaRetryOutcome"
ROLLBACK_METRIC_NAME = "QuotaRollbackFailed"
METRIC_NAMESPACE = "SerenityAllocator"
"""The allocator's CloudWatch namespace (the same as ``adapters.observability.NAMESPACE``)."""


class QuotaRetryRecorder(Protocol):
    """Receives the guard's metrics; the guard logs and swallows anything it raises."""

    def record(self, outcome: QuotaRetryResult, attempt: int, site: str) -> None:
        """One ``QuotaRetryOutcome`` per cycle; ``attempt``: the attempt that ended it."""
        ...

    def record_rollback_failed(self, site: str) -> None:
        """One ``QuotaRollbackFailed``: the rollback hook of a refused write raised."""
        ...


class NullQuotaRetryRecorder:
    """Records nothing (the default: metrics are the service's choice)."""

    def record(self, outcome: QuotaRetryResult, attempt: int, site: str) -> None:
        """Drop the outcome."""

    def record_rollback_failed(self, site: str) -> None:
        """Drop the failure (the guard still logs it)."""


class EmfQuotaRetryRecorder:
    """Prints the guard's metrics as CloudWatch EMF lines; plain JSON, no Powertools.

    Dimensions ``Environment``, ``Site`` (a call-site name: a small fixed set per service, never
    an id) and, for ``QuotaRetryOutcome``, ``Outcome``.

    Args:
        environment: The service's environment name.
        service: The calling service's name (an EMF property, not a dimension).
        emit: Where the line goes (``print`` by default: Lambda ships stdout to CloudWatch).
        clock_ms: Wall-clock milliseconds for the EMF timestamp.
    """

    def __init__(
        self,
        environment: str,
        *,
        service: str = "unknown",
        emit: Callable[[str], None] = print,
        clock_ms: Callable[[], float] = lambda: time.time() * 1000.0,
    ) -> None:
        self._environment = environment
        self._service = service
        self._emit = emit
        self._clock_ms = clock_ms

    def record(self, outcome: QuotaRetryResult, attempt: int, site: str) -> None:
        """Print one ``QuotaRetryOutcome`` line."""
        self._print(METRIC_NAME, attempt, {"Outcome": outcome, "Site": site})

    def record_rollback_failed(self, site: str) -> None:
        """Print one ``QuotaRollbackFailed`` line (value 1)."""
        self._print(ROLLBACK_METRIC_NAME, 1, {"Site": site})

    def _print(self, name: str, value: int, dimensions: dict[str, str]) -> None:
        blob: dict[str, Any] = {
            "_aws": {
                "Timestamp": int(self._clock_ms()),
                "CloudWatchMetrics": [
                    {
                        "Namespace": METRIC_NAMESPACE,
                        "Dimensions": [["Environment", *dimensions]],
                        "Metrics": [{"Name": name, "Unit": "Count"}],
                    }
                ],
            },
            "Environment": self._environment,
            **dimensions,
            "service": self._service,
            name: value,
        }
        with contextlib.suppress(Exception):  # metrics never change the write's outcome
            self._emit(json.dumps(blob, separators=(",", ":")))
