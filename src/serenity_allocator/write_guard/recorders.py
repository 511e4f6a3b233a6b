"""The metrics a service's process emits through this library: self-contained EMF lines.

``MeteredQuotaClassifier`` (the classifier's verdict on every 405 a guarded write met: the
enforcement-is-back pager), ``QuotaRetryOutcome`` (one per recovery cycle: ``recovered``,
``exhausted`` or ``abandoned``, the value the attempt number) and ``QuotaRollbackFailed`` (one
per rollback hook that raised).

A guest in the caller's process: every line is built here from plain JSON and handed to the
``emit`` the caller chose. Nothing is shared with the caller's metrics (no Powertools
``Metrics`` and its process-wide metric set and default dimensions), and nothing is imported
that changes the process when imported (importing Powertools registers a botocore initializer
that rewrites every later boto3 client's User-Agent, and reconfigures its package logger; see
docs/metrics.md, "Metrics from a service's process").
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

QuotaRetryResult = Literal["recovered", "exhausted", "abandoned"]
"""How a recovery cycle ended: the write landed; it was finally refused (quota or deadline); a
non-quota answer or an exception ended it. The three add up to every cycle."""

CLASSIFIER_METRIC_NAME = "MeteredQuotaClassifier"
METRIC_NAME = "QuotaRetryOutcome"
ROLLBACK_METRIC_NAME = "QuotaRollbackFailed"
METRIC_NAMESPACE = "SerenityAllocator"
"""The allocator's CloudWatch namespace (the same as ``adapters.observability.NAMESPACE``)."""


@dataclass(frozen=True)
class ServiceMetricSpec:
    """One metric a service emits: its dimensions besides ``Environment``, and their values.

    ``dimensions`` maps each own dimension to its allowed values; an empty tuple means the
    service chooses the values (``Site``: a small fixed set of call-site names, never an id).
    ``service`` is a property of every line, never a dimension: the alarms match every service.
    """

    dimensions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    pager: bool = False


SERVICE_METRIC_CATALOG: dict[str, ServiceMetricSpec] = {
    # Pages on Matched=true: the first disguised 405 says enforcement is back (dormant watch).
    CLASSIFIER_METRIC_NAME: ServiceMetricSpec({"Matched": ("true", "false")}, pager=True),
    METRIC_NAME: ServiceMetricSpec(
        {"Outcome": ("recovered", "exhausted", "abandoned"), "Site": ()}, pager=True
    ),
    ROLLBACK_METRIC_NAME: ServiceMetricSpec({"Site": ()}),
}
"""What a service's process emits through the library (docs/metrics.md); the allocator's
functions emit ``adapters.observability.METRIC_CATALOG``."""


class QuotaRetryRecorder(Protocol):
    """Receives the guard's metrics; the guard logs and swallows anything it raises."""

    def record_quota_verdict(self, matched: bool) -> None:
        """One ``MeteredQuotaClassifier``: a write answered 405, and whether it was the quota's."""
        ...

    def record(self, outcome: QuotaRetryResult, attempt: int, site: str) -> None:
        """One ``QuotaRetryOutcome`` per cycle; ``attempt``: the attempt that ended it."""
        ...

    def record_rollback_failed(self, site: str) -> None:
        """One ``QuotaRollbackFailed``: the rollback hook of a refused write raised."""
        ...


class NullQuotaRetryRecorder:
    """Records nothing: a guard built without a recorder is invisible to the pager."""

    def record_quota_verdict(self, matched: bool) -> None:
        """Drop the verdict."""

    def record(self, outcome: QuotaRetryResult, attempt: int, site: str) -> None:
        """Drop the outcome."""

    def record_rollback_failed(self, site: str) -> None:
        """Drop the failure (the guard still logs it)."""


def _label(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"EmfQuotaRetryRecorder: {name} must be a non-blank string")
    return value


class EmfQuotaRetryRecorder:
    """Prints the guard's metrics as CloudWatch EMF lines; plain JSON, shared with nothing.

    Built once per process, where the service builds its producer: the deployment's
    environment and the service's name are set here, once, for every guard it is given to.
    Dimensions: ``Environment`` and the metric's own (``Matched``; ``Outcome`` and ``Site``;
    ``Site``); ``service`` is a property of the line, not a dimension.

    Args:
        environment: The deployment's environment, the stack's ``EnvironmentName`` (``dev`` or
            ``prod``): the enforcement-is-back alarms match only that value.
        service: The calling service's name (each line's ``service``).
        emit: Where the line goes (``print`` by default: Lambda ships stdout to CloudWatch).
        clock_ms: Wall-clock milliseconds for the EMF timestamp.

    Raises:
        ValueError: ``environment`` or ``service`` is blank (named).
    """

    def __init__(
        self,
        environment: str,
        *,
        service: str,
        emit: Callable[[str], None] = print,
        clock_ms: Callable[[], float] = lambda: time.time() * 1000.0,
    ) -> None:
        self._environment = _label("environment", environment)
        self._service = _label("service", service)
        self._emit = emit
        self._clock_ms = clock_ms

    def record_quota_verdict(self, matched: bool) -> None:
        """Print one ``MeteredQuotaClassifier`` line (value 1, ``Matched`` true or false)."""
        self._print(CLASSIFIER_METRIC_NAME, 1, {"Matched": "true" if matched else "false"})

    def record(self, outcome: QuotaRetryResult, attempt: int, site: str) -> None:
        """Print one ``QuotaRetryOutcome`` line."""
        self._print(METRIC_NAME, attempt, {"Outcome": outcome, "Site": _label("site", site)})

    def record_rollback_failed(self, site: str) -> None:
        """Print one ``QuotaRollbackFailed`` line (value 1)."""
        self._print(ROLLBACK_METRIC_NAME, 1, {"Site": _label("site", site)})

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
