"""Logging and metrics through Powertools: one instance of each, here (no X-Ray: ADR 0008).

Metrics follow the catalog below (docs/metrics.md). Every metric carries the ``service`` and
``Environment`` dimensions; some carry one more low-cardinality dimension of their own. Ids go
to logs, never to dimensions. Recording is best-effort: a metrics failure is logged and never
changes control flow.
"""

from __future__ import annotations

import json
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.base import MetricManager

from ..domain.messages import AllocationOutcome
from ..domain.model import AiResources, Dimension, Totals
from ..domain.pool_watch import PoolLowWarning

NAMESPACE = "SerenityAllocator"
SERVICE = "serenity-allocator"

# The namespace and service are fixed here rather than left to the environment: the alarms and
# the dashboard in template.yaml name these exact dimensions, so a stray variable must not move
# the metrics out from under them.
# A sweep batch that previews nothing has no metric of its own besides ColdStart; Powertools
# warns about that on every flush, which is noise, not a problem.
warnings.filterwarnings("ignore", message="No application metrics to publish")

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)


@dataclass(frozen=True)
class MetricSpec:
    """One catalog entry: the unit, the metric's own dimension and its allowed values."""

    unit: str
    dimension: str | None = None
    values: tuple[str, ...] = ()
    pager: bool = False
    """True when an alarm on this metric pages (see docs/metrics.md)."""


METRIC_CATALOG: dict[str, MetricSpec] = {
    "HeadroomCheck": MetricSpec("Count", "Outcome", ("hot-path", "topped-up", "unmetered")),
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
    # Pages on Matched=true: the first disguised 405 says enforcement is back (dormant watch).
    "MeteredQuotaClassifier": MetricSpec("Count", "Matched", ("true", "false"), pager=True),
    "InvalidMessage": MetricSpec("Count"),
    "CoalescedEnsures": MetricSpec("Count"),
    "QueueLagMs": MetricSpec("Milliseconds"),
    "DisabledNoop": MetricSpec("Count"),
    "TightPoolFallback": MetricSpec("Count", "Result", ("saved", "rejected")),
    "SiblingReclaim": MetricSpec("Count", "Result", ("enqueued", "parked", "served", "exhausted")),
    "RequestLedger": MetricSpec(
        "Count", "Event", ("replayed", "deadLettered", "superseded", "duplicate")
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


class MetricsObserver:
    """The domain's AllocationObserver, reporting through metrics and structured logs."""

    def __init__(self, recorder: MetricsRecorder, *, pool_low_ratio: float = 0.1) -> None:
        self._recorder = recorder
        self._pool_low_ratio = pool_low_ratio

    def headroom_checked(self, outcome: str) -> None:
        """Count one headroom check by outcome (the hot-path ratio)."""
        self._recorder.record("HeadroomCheck", dimension_value=outcome)

    def transfer_timed(self, path: str, latency_ms: float) -> None:
        """Record the latency of one transfer call (accepted or refused) on its path."""
        self._recorder.record("TopUpLatencyMs", latency_ms, dimension_value=path)

    def pool_checked(self, parent_id: str, pool: AiResources) -> None:
        """Record the pool's free ratio per dimension; log when it runs low (advisory only)."""
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

    def rejected(self, reason: str) -> None:
        """Count one allocation rejection by reason."""
        self._recorder.record("AllocationRejection", dimension_value=reason)

    def not_ready_retry(self) -> None:
        """Count one not-ready retry."""
        self._recorder.record("NotReadyRetry")

    def release_finished(self, outcome: str) -> None:
        """Count one release outcome."""
        self._recorder.record("ReleaseOutcome", dimension_value=outcome)

    def tight_pool_fallback(self, result: str) -> None:
        """Count one exact-totals fallback by result."""
        self._recorder.record("TightPoolFallback", dimension_value=result)

    def tiered_met(self, role: str) -> None:
        """Count one request that met a tiered workspace as its child or pool."""
        self._recorder.record("TieredWorkspace", dimension_value=role)


class WorkerReporter(MetricsObserver):
    """The Allocator's observer: the domain's measurements plus the worker's own events.

    Implements the application's ``WorkerObserver`` port over the module's Logger and a
    per-invocation :class:`MetricsRecorder`.
    """

    def message_started(
        self,
        message_id: str,
        workspace_id: str,
        request_id: str | None,
        kind: str | None,
        receive_count: int,
    ) -> None:
        """Put the record's ids on every later log line (ids go to logs, never to metrics)."""
        logger.append_keys(
            message_id=message_id,
            workspace_id=workspace_id,
            request_id=request_id,
            kind=kind,
            receive_count=receive_count,
        )

    def queue_lag(self, lag_ms: float) -> None:
        """Record how long the record waited on the queue."""
        self._recorder.record("QueueLagMs", lag_ms)

    def invalid_message(self, reason: str) -> None:
        """Count and log one invalid record."""
        self._recorder.record("InvalidMessage")
        logger.warning("invalid message", extra={"reason": reason})

    def disabled_noop(self) -> None:
        """Count one ensure completed with dynamic allocation off."""
        self._recorder.record("DisabledNoop")

    def coalesced(self, extra_requests: int) -> None:
        """Count the requests a combined top-up served behind its leader."""
        self._recorder.record("CoalescedEnsures", float(extra_requests))

    def reclaim(self, result: str, count: int = 1) -> None:
        """Count a sibling-reclaim step by result."""
        self._recorder.record("SiblingReclaim", float(count), dimension_value=result)

    def parked_for_reclaim(self, siblings: Sequence[str]) -> None:
        """Log which siblings an ensure is waiting for."""
        logger.info("ensure parked for sibling reclaim", extra={"siblings": list(siblings)})

    def ledger_event(self, event: str) -> None:
        """Count one request ledger event (``RequestLedger{Event}``) and log it."""
        self._recorder.record("RequestLedger", dimension_value=event)
        logger.info("request ledger", extra={"ledger_event": event})

    def completed(self, outcome: AllocationOutcome) -> None:
        """Log a request's terminal outcome."""
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

    def will_retry(
        self, error_code: str, *, final_receive: bool, expected: bool, error: Exception
    ) -> None:
        """Log a failure SQS will retry; an unexpected one with its trace."""
        extra = {"error_code": error_code, "final_receive": final_receive}
        if expected:
            logger.warning("request will be retried", extra=extra)
        else:
            logger.error("unexpected failure; request will be retried", exc_info=error, extra=extra)

    def outcomes_not_published(self, error: Exception) -> None:
        """Log outcomes that could not be published (their requests come back)."""
        logger.error("outcome events not published; requests will be retried", exc_info=error)

    def pool_low(self, warning: PoolLowWarning) -> None:
        """Log a pool running low."""
        logger.warning("org pool running low", extra=warning.model_dump())

    def pool_low_not_published(self, error: Exception) -> None:
        """Log a pool-low event that could not be published (advisory)."""
        logger.error("pool-low event not published", exc_info=error)

    def flush(self) -> None:
        """Print this invocation's dimensioned metrics."""
        self._recorder.flush()


def _totals(totals: Totals | None) -> dict[str, int] | None:
    return None if totals is None else totals.as_dict()
