"""The metric catalog, and the observer that turns domain events into metrics and log lines.

One Powertools Logger and one Metrics serve both Lambdas (:mod:`.telemetry`; no X-Ray: ADR
0008). Metrics follow the catalog below (docs/metrics.md). Every metric carries the ``service``
and ``Environment`` dimensions; some carry one more low-cardinality dimension of their own. Ids
go to logs, never to dimensions. Recording is best-effort: a metrics failure is logged and
never changes control flow.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, get_args

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.base import MetricManager

from ..domain.model import AiResources, Dimension, Totals
from ..domain.observations import (
    Coalesced,
    Completed,
    CredentialNotScrubbed,
    CredentialOutcome,
    CredentialOutcomeName,
    DisabledNoop,
    HeadroomChecked,
    InvalidMessage,
    LedgerEvent,
    MessageStarted,
    NotReadyRetry,
    OutcomesNotPublished,
    ParkedForReclaim,
    PoolChecked,
    PoolLow,
    PoolLowNotPublished,
    QueueLag,
    Reclaim,
    RecordFailed,
    Rejected,
    ReleaseFinished,
    TieredWorkspaceMet,
    TightPoolFallback,
    TransferTimed,
    WillRetry,
    WorkerEvent,
)
from .telemetry import NAMESPACE, SERVICE, logger, metrics, pin_wire_loggers

# The instances live in .telemetry, which a handler imports at init without the domain; they are
# exported here too, so the code that reports through them after init imports one module.
__all__ = [
    "DERIVED_METRICS",
    "EVENT_METRICS",
    "METRIC_CATALOG",
    "NAMESPACE",
    "SERVICE",
    "EventMetric",
    "MetricSpec",
    "MetricsObserver",
    "MetricsRecorder",
    "logger",
    "metrics",
    "pin_wire_loggers",
]


@dataclass(frozen=True)
class MetricSpec:
    """One catalog entry: the unit, the metric's own dimension and its allowed values."""

    unit: str
    dimension: str | None = None
    values: tuple[str, ...] = ()
    pager: bool = False
    """True when an alarm on this metric pages (see docs/metrics.md)."""


METRIC_CATALOG: dict[str, MetricSpec] = {
    "HeadroomCheck": MetricSpec(
        "Count", "Outcome", ("hot-path", "topped-up", "refilled", "rightsized", "unmetered")
    ),
    "TopUpLatencyMs": MetricSpec("Milliseconds", "Path", ("settle", "fail-fast")),
    "PoolFreeRatio": MetricSpec("Percent", "Dim", ("projects", "prompts")),
    "AllocationRejection": MetricSpec(
        "Count",
        "Reason",
        ("orgPoolExhausted", "brandAiLimit", "workspaceBusy", "tieredPrompts"),
        pager=True,
    ),
    "TieredWorkspace": MetricSpec("Count", "Role", ("child", "pool")),
    "NotReadyRetry": MetricSpec("Count"),
    "ReleaseOutcome": MetricSpec(
        "Count",
        "Outcome",
        ("released", "nothing-to-release", "requires-decommission", "error", "dry-run"),
    ),
    "InvalidMessage": MetricSpec("Count"),
    "CoalescedEnsures": MetricSpec("Count"),
    "QueueLagMs": MetricSpec("Milliseconds"),
    "DisabledNoop": MetricSpec("Count"),
    "TightPoolFallback": MetricSpec("Count", "Result", ("saved", "rejected")),
    "SiblingReclaim": MetricSpec("Count", "Result", ("enqueued", "parked", "served", "exhausted")),
    "RequestLedger": MetricSpec(
        "Count",
        "Event",
        ("replayed", "deadLettered", "superseded", "duplicate", "unreadable", "requestIdConflict"),
    ),
    # The domain's vocabulary is the one list: a new credential outcome is one word there.
    "CredentialOutcome": MetricSpec(
        "Count", "Outcome", get_args(CredentialOutcomeName), pager=True
    ),
}


class MetricsRecorder:
    """Records catalog metrics for one invocation and flushes them as EMF.

    Metrics without an own dimension go on the module's ``Metrics`` (flushed by its
    ``log_metrics`` decorator); the others are grouped per (name, dimension value) and flushed
    as one EMF blob each, values batched, so a batch of ten messages prints a handful of lines.
    """

    def __init__(self, environment: str, service: str | None = None) -> None:
        self._environment = environment
        self._service = service or SERVICE
        self._pending: dict[tuple[str, str], list[float]] = defaultdict(list)
        if metrics.default_dimensions.get("Environment") != environment:
            metrics.set_default_dimensions(Environment=environment)

    def record(self, name: str, value: float = 1.0, dimension_value: str | None = None) -> None:
        """Record one value of a catalog metric (best-effort)."""
        try:
            spec = METRIC_CATALOG[name]
            if spec.dimension is None:
                metrics.add_metric(name=name, unit=MetricUnit(spec.unit), value=value)
                return
            if dimension_value not in spec.values:
                raise ValueError(f"{name}: {spec.dimension}={dimension_value!r} is not in catalog")
            self._pending[(name, dimension_value)].append(value)
        except Exception:  # metrics never change control flow
            logger.exception("metric not recorded", extra={"metric": name})

    def flush(self) -> None:
        """Print the dimensioned metrics recorded so far as EMF and forget them (best-effort)."""
        pending, self._pending = self._pending, defaultdict(list)
        for (name, dimension_value), values in pending.items():
            try:
                self._emit(name, dimension_value, values)
            except Exception:  # metrics never change control flow
                logger.exception("metric not flushed", extra={"metric": name})

    def _emit(self, name: str, dimension_value: str, values: list[float]) -> None:
        spec = METRIC_CATALOG[name]
        # A MetricManager keeps every value of a metric (SingleMetric keeps one), so one EMF
        # blob carries the whole invocation's values for this dimension set.
        blob = MetricManager(namespace=NAMESPACE, service=self._service)
        blob.add_dimension(name="Environment", value=self._environment)
        blob.add_dimension(name=spec.dimension or "", value=dimension_value)
        for value in values:
            blob.add_metric(name=name, unit=MetricUnit(spec.unit), value=value)
        print(_dumps(blob.serialize_metric_set()))


def _dumps(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"))


@dataclass(frozen=True)
class EventMetric:
    """How one event type becomes one catalog metric.

    ``value`` names the event's field holding the metric's value (None: the event counts one);
    ``dimension`` names the field holding the metric's own dimension value (None: the metric
    has no dimension of its own). ``tests/unit/adapters/test_observability.py`` checks every row
    against :data:`METRIC_CATALOG`.
    """

    metric: str
    value: str | None = None
    dimension: str | None = None


EVENT_METRICS: dict[type[object], EventMetric] = {
    HeadroomChecked: EventMetric("HeadroomCheck", dimension="outcome"),
    TransferTimed: EventMetric("TopUpLatencyMs", value="latency_ms", dimension="path"),
    Rejected: EventMetric("AllocationRejection", dimension="reason"),
    NotReadyRetry: EventMetric("NotReadyRetry"),
    ReleaseFinished: EventMetric("ReleaseOutcome", dimension="outcome"),
    TightPoolFallback: EventMetric("TightPoolFallback", dimension="result"),
    TieredWorkspaceMet: EventMetric("TieredWorkspace", dimension="role"),
    QueueLag: EventMetric("QueueLagMs", value="lag_ms"),
    InvalidMessage: EventMetric("InvalidMessage"),
    DisabledNoop: EventMetric("DisabledNoop"),
    Coalesced: EventMetric("CoalescedEnsures", value="extra_requests"),
    Reclaim: EventMetric("SiblingReclaim", value="count", dimension="result"),
    LedgerEvent: EventMetric("RequestLedger", dimension="event"),
    CredentialOutcome: EventMetric("CredentialOutcome", dimension="outcome"),
}
"""The one table from the observer vocabulary to the metric catalog.

``PoolFreeRatio`` is derived from :class:`PoolChecked` (one value per dimension, see
:meth:`MetricsObserver.record`). What a service's process emits through the library
(``MeteredQuotaClassifier``, ``QuotaRetryOutcome``, ``QuotaRollbackFailed``) is
``write_guard.recorders.SERVICE_METRIC_CATALOG``, never this module's. Adding a metric: a new
event value where it happens, and one catalog entry plus one row here.
"""

DERIVED_METRICS = {"PoolFreeRatio": PoolChecked}
"""Catalog metrics computed from an event rather than read from one field."""


class MetricsObserver:
    """The observer of both Lambdas: every event through :data:`EVENT_METRICS` and its log line.

    Implements the domain's ``AllocationObserver`` and the application's ``WorkerObserver``
    over the module's Logger and a per-invocation :class:`MetricsRecorder`.
    """

    def __init__(self, recorder: MetricsRecorder, *, pool_low_ratio: float = 0.1) -> None:
        self._recorder = recorder
        self._pool_low_ratio = pool_low_ratio

    def record(self, event: WorkerEvent, /) -> None:
        """Count the event's metric (if it has one) and write its log line (if it has one)."""
        rule = EVENT_METRICS.get(type(event))
        if rule is not None:
            value = 1.0 if rule.value is None else float(getattr(event, rule.value))
            dimension = None if rule.dimension is None else str(getattr(event, rule.dimension))
            self._recorder.record(rule.metric, value, dimension_value=dimension)
        if isinstance(event, PoolChecked):
            self._pool_checked(event.parent_id, event.pool)
        log_line = _LOG_LINES.get(type(event))
        if log_line is not None:
            log_line(event)

    def flush(self) -> None:
        """Print this invocation's dimensioned metrics."""
        self._recorder.flush()

    def _pool_checked(self, parent_id: str, pool: AiResources) -> None:
        # The pool's free ratio per dimension; a log line when it runs low (advisory only).
        for dim in Dimension:
            usage = pool.get(dim)
            if usage.total <= 0:  # no ratio of an empty pool
                continue
            ratio = usage.free / usage.total
            self._recorder.record("PoolFreeRatio", 100.0 * ratio, dimension_value=dim.value)
            if ratio < self._pool_low_ratio:
                logger.warning(
                    "org pool running low",
                    extra={
                        "parent_workspace_id": parent_id,
                        "dim": dim.value,
                        "free": usage.free,
                        "total": usage.total,
                    },
                )


def _message_started(event: MessageStarted) -> None:
    # The record's keys (its fields) on every later log line (ids go to logs, never to metrics).
    logger.append_keys(**asdict(event))


def _completed(event: Completed) -> None:
    outcome = event.outcome
    logger.info(
        "allocation outcome",
        extra={
            "status": outcome.status,
            "error_code": outcome.error_code,
            "totals_before": _totals(outcome.totals_before),
            "totals_after": _totals(outcome.totals_after),
            "coalesced": outcome.coalesced,
        },
    )


def _will_retry(event: WillRetry) -> None:
    # An unexpected failure (no rule foresaw it) is logged with its trace.
    extra = {"error_code": event.error_code, "final_receive": event.final_receive}
    if event.expected:
        logger.warning("request will be retried", extra=extra)
    else:
        logger.error(
            "unexpected failure; request will be retried", exc_info=event.error, extra=extra
        )


def _record_failed(event: RecordFailed) -> None:
    # Said with the record's own ids: the failure may be reported after later records ran.
    logger.warning(
        "record failed; SQS will redeliver it",
        extra={**asdict(event.record), "reason": event.reason},
    )


def _credential_outcome(event: CredentialOutcome) -> None:
    extra = {"credential_outcome": event.outcome, "reason": event.reason}
    if event.outcome == "exchanged":
        logger.info("request credential exchanged", extra=extra)
    else:
        logger.warning("request credential", extra=extra)


_LOG_LINES: dict[type[object], Callable[[Any], None]] = {
    MessageStarted: _message_started,
    InvalidMessage: lambda e: logger.warning("invalid message", extra={"reason": e.reason}),
    ParkedForReclaim: lambda e: logger.info(
        "ensure parked for sibling reclaim", extra={"siblings": list(e.siblings)}
    ),
    LedgerEvent: lambda e: logger.info("request ledger", extra={"ledger_event": e.event}),
    Completed: _completed,
    WillRetry: _will_retry,
    RecordFailed: _record_failed,
    OutcomesNotPublished: lambda e: logger.error(
        "outcome events not published; requests will be retried", exc_info=e.error
    ),
    PoolLow: lambda e: logger.warning("org pool running low", extra=e.warning.model_dump()),
    PoolLowNotPublished: lambda e: logger.error("pool-low event not published", exc_info=e.error),
    CredentialOutcome: _credential_outcome,
    CredentialNotScrubbed: lambda e: logger.warning(
        "credential record not scrubbed; it expires with its TTL",
        extra={"credential_request_id": e.request_id, "reason": e.reason},
    ),
}
"""The log line of each event that has one (a metric failure never stops a log line)."""


def _totals(totals: Totals | None) -> dict[str, int] | None:
    return None if totals is None else totals.as_dict()
