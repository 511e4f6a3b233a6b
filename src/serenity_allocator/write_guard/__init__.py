"""The service-side write guard: front a metered write, and recover from the disguised 405.

Facts (semrush-user-manager.md, "Metered writes happen elsewhere"): the write gateway refuses a
write over quota with a disguised 405 (a bare HTML page); prompts are metered cumulatively at
the write (``used + drafted + batch``); and the gateway enforces a top-up about 9 s after it.
The upstream retries the write with backoff inside one per-request deadline, calling ensure once
per recovery. Ours is queued, so the guard waits for its ensure: it reads the ensure's outcome
from the request ledger and keeps retrying until the gate has had the lag to enforce it, inside
the deadline (docs/decisions/0003-async-worker-contract.md, item 3). A recovery whose units the
request's pending front already asked for waits on the front's outcome instead of sending a
second ensure, which the worker's coalescing would add to the front (ADR 0019).

A service makes one :class:`WriteGuard` per incoming request and workspace::

    guard = WriteGuard(producer, child_id, master_id, outcomes=OutcomeReader(ledger_table),
                       recorder=recorder)  # EmfQuotaRetryRecorder("prod", service="brands")
    guard.front({"prompts": len(batch)})            # before writing: size the top-up early
    answer = guard.write(lambda: post_prompts(batch), need={"prompts": len(batch)},
                         site="prompts.create")      # every metered write, wrapped

The guard needs no Powertools: its metrics go through an injected recorder, built once per
process with the deployment's environment and the service's name. It records the classifier's
verdict on every 405 (``MeteredQuotaClassifier``, the enforcement-is-back pager), so a guard
without a recorder is invisible to that alarm.
"""

from __future__ import annotations

from .errors import (
    REFUSALS,
    GuardedWrite,
    HttpAnswer,
    WriteAccessDeniedError,
    WriteConfigurationError,
    WriteDeadlineExceededError,
    WriteNeedsReauthError,
    WriteNoCredentialError,
    WriteOutcome,
    WriteQuotaExhaustedError,
    WriteRefusedError,
)
from .guard import EnsureEnqueuer, OutcomeLookup, WriteGuard, answer_of
from .policy import GuardPolicy, model_change_need
from .recorders import (
    CLASSIFIER_METRIC_NAME,
    METRIC_NAME,
    METRIC_NAMESPACE,
    ROLLBACK_METRIC_NAME,
    SERVICE_METRIC_CATALOG,
    EmfQuotaRetryRecorder,
    NullQuotaRetryRecorder,
    QuotaRetryRecorder,
    QuotaRetryResult,
    ServiceMetricSpec,
)

__all__ = [
    "CLASSIFIER_METRIC_NAME",
    "METRIC_NAME",
    "METRIC_NAMESPACE",
    "REFUSALS",
    "ROLLBACK_METRIC_NAME",
    "SERVICE_METRIC_CATALOG",
    "EmfQuotaRetryRecorder",
    "EnsureEnqueuer",
    "GuardPolicy",
    "GuardedWrite",
    "HttpAnswer",
    "NullQuotaRetryRecorder",
    "OutcomeLookup",
    "QuotaRetryRecorder",
    "QuotaRetryResult",
    "ServiceMetricSpec",
    "WriteAccessDeniedError",
    "WriteConfigurationError",
    "WriteDeadlineExceededError",
    "WriteGuard",
    "WriteNeedsReauthError",
    "WriteNoCredentialError",
    "WriteOutcome",
    "WriteQuotaExhaustedError",
    "WriteRefusedError",
    "answer_of",
    "model_change_need",
]
