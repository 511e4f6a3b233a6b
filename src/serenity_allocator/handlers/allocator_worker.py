"""One Allocator invocation: plan the batch, apply each request, report outcomes.

Rules that shape this module:
- Raise only when a retry could succeed: an exception fails the record and SQS redelivers it
  (the queue is the long retry loop). Business refusals are returned outcomes.
- Invalid messages never reach Semrush: they go to the DLQ with their reason and complete;
  with no DLQ configured they fail, so the redrive policy moves them (nothing is dropped).
- On the final receive (ApproximateReceiveCount reaches the redrive maxReceiveCount) a request
  that is still failing gets its terminal outcome before SQS moves it to the DLQ.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..adapters.observability import MetricsObserver, MetricsRecorder, logger
from ..domain.allocation import EnsureResult, ensure_headroom, release_surplus
from ..domain.coalescing import EnsureRun, PlannedMessage, plan_ensure_runs
from ..domain.errors import (
    AllocationError,
    BrandAiLimitError,
    OrgPoolExhaustedError,
    ParkedForReclaimError,
    UpstreamError,
)
from ..domain.messages import (
    AllocationOutcome,
    EnsureRequest,
    OutcomeStatus,
    ReleaseRequest,
    parse_request,
)
from ..domain.metering import ParentMeteringCache
from ..domain.model import AiResources, Totals
from ..domain.pool_watch import PoolLowWarning, PoolWatch
from ..domain.ports import Clock, Sleeper, WorkspaceGateway
from ..domain.reclaim import choose_reclaim_siblings
from ..domain.transfer import FAIL_FAST, SETTLE, TransferContext, TransferPolicy
from .settings import AllocatorSettings
from .wiring import build_semrush_client, limit_gateway_time

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from ..adapters.eventbridge_outcomes import OutcomePublisher
    from ..adapters.sqs_dead_letter import DeadLetterSender
    from ..adapters.sqs_producer import AllocationProducer

# Upstream answers a retry cannot fix: the request completes with a ``failed`` outcome.
_TERMINAL_UPSTREAM_STATUSES = frozenset({400, 403, 404, 405, 409, 410, 413, 415})


class ReleaseIncompleteError(Exception):
    """A release met an expected, transient failure; the queue should bring it back."""

    def __init__(self, code: str) -> None:
        super().__init__(f"release incomplete: {code}")
        self.code = code


class InvalidMessageError(Exception):
    """An invalid message with no DLQ configured: fail it so the redrive policy moves it."""


@dataclass
class AllocatorRuntime:
    """Everything an invocation needs, built once per container and reused while warm."""

    settings: AllocatorSettings
    gateway: WorkspaceGateway
    dead_letters: DeadLetterSender | None = None
    outcomes: OutcomePublisher | None = None
    producer: AllocationProducer | None = None
    clock: Clock = time.monotonic
    sleep: Sleeper = time.sleep
    wall_clock_ms: Callable[[], float] = field(default=lambda: time.time() * 1000.0)
    metering: ParentMeteringCache | None = None
    pool_watch: PoolWatch | None = None
    parked: set[str] = field(default_factory=set)
    """Request ids this container parked for sibling reclaim (labels the later outcome)."""
    attempt_budget_s: float = 15.0
    """Time reserved for one upstream call (the client's per-request timeout)."""

    def __post_init__(self) -> None:
        settings = self.settings
        if self.metering is None and settings.unmetered_check:
            self.metering = ParentMeteringCache(
                self.gateway, self.clock, settings.unmetered_cache_ttl_s
            )
        if self.pool_watch is None:
            self.pool_watch = PoolWatch(
                self.clock,
                threshold=settings.pool_low_ratio,
                interval_s=settings.pool_low_interval_s,
            )

    @property
    def ensure_policy(self) -> TransferPolicy:
        """Fail-fast plus a few short in-handler not-ready retries; the queue retries longer."""
        return FAIL_FAST.model_copy(
            update={
                "not_ready_retries": self.settings.ensure_not_ready_retries,
                "retry_interval_s": self.settings.ensure_retry_interval_s,
                "attempt_budget_s": self.attempt_budget_s,
            }
        )

    @property
    def release_policy(self) -> TransferPolicy:
        """The settle policy, each attempt budgeted at the client's worst-case call time."""
        return SETTLE.model_copy(update={"attempt_budget_s": self.attempt_budget_s})


def build_runtime(settings: AllocatorSettings) -> AllocatorRuntime:
    """Wire the real adapters from settings (clients are created lazily inside them)."""
    client = build_semrush_client(settings.semrush)
    runtime = AllocatorRuntime(
        settings=settings, gateway=client, attempt_budget_s=settings.semrush.timeout_s
    )
    if settings.dlq_url:
        from ..adapters.sqs_dead_letter import DeadLetterSender

        runtime.dead_letters = DeadLetterSender(settings.dlq_url)
    if settings.outcome_bus_name:
        from ..adapters.eventbridge_outcomes import OutcomePublisher

        runtime.outcomes = OutcomePublisher(settings.outcome_bus_name)
    if settings.sibling_reclaim and settings.queue_url:
        from ..adapters.sqs_producer import AllocationProducer

        runtime.producer = AllocationProducer(settings.queue_url)
    return runtime


@dataclass
class _Message:
    """One record of the batch as the plan sees it."""

    message_id: str
    group_id: str
    body: str
    receive_count: int = 1
    request: EnsureRequest | ReleaseRequest | None = None
    invalid_reason: str | None = None
    handled: bool = False
    """Set when Powertools handed the record to us (False: skipped behind its failed group)."""


def _parse_record(raw: dict[str, Any]) -> _Message:
    attributes = raw.get("attributes") or {}
    message = _Message(
        message_id=str(raw.get("messageId", "")),
        group_id=str(attributes.get("MessageGroupId") or ""),
        body=str(raw.get("body") or ""),
        receive_count=int(attributes.get("ApproximateReceiveCount") or 1),
    )
    try:
        request = parse_request(message.body)
    except ValidationError as exc:
        message.invalid_reason = _describe_validation(exc)
        return message
    if request.workspace_id != message.group_id:
        message.invalid_reason = "MessageGroupId: must equal workspace_id"
        return message
    message.request = request
    return message


def _describe_validation(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = [str(p) for p in err["loc"]]
        if loc and loc[0] in ("ensure", "release"):  # the discriminator's tag adds nothing
            loc = loc[1:]
        if err["type"] == "json_invalid":
            return f"body: not valid JSON ({err['msg']})"
        problems.append(f"{'.'.join(loc) or 'body'}: {err['msg']}")
    return "; ".join(problems)


class _DeferredRejections:
    """Observer wrapper for a combined (coalesced) call: rejections count only if kept.

    When a combined top-up is refused, the run falls back to one call per request; counting
    the combined refusal too would report a rejection that no request received.
    """

    def __init__(self, inner: MetricsObserver) -> None:
        self._inner = inner
        self._held: list[Callable[[], None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def rejected(self, reason: str) -> None:
        self._held.append(lambda: self._inner.rejected(reason))

    def tight_pool_fallback(self, result: str) -> None:
        self._held.append(lambda: self._inner.tight_pool_fallback(result))

    def commit(self) -> None:
        for record in self._held:
            record()
        self._held.clear()


class _WorkerObserver(MetricsObserver):
    """Metrics plus the pool early warning fed by the advisory reads."""

    def __init__(self, recorder: MetricsRecorder, watch: PoolWatch | None, ratio: float) -> None:
        super().__init__(recorder, pool_low_ratio=ratio)
        self._watch = watch
        self.warnings: list[PoolLowWarning] = []

    def pool_checked(self, parent_id: str, pool: AiResources) -> None:
        super().pool_checked(parent_id, pool)
        if self._watch is not None:
            warning = self._watch.observe(parent_id, pool)
            if warning is not None:
                self.warnings.append(warning)


class BatchWorker:
    """Applies one batch: built per invocation, its ``handle_record`` given to Powertools."""

    def __init__(
        self, runtime: AllocatorRuntime, records: Sequence[dict[str, Any]], context: LambdaContext
    ) -> None:
        self._rt = runtime
        self._settings = runtime.settings
        self._messages = {m.message_id: m for m in map(_parse_record, records)}
        self._order = [m.message_id for m in self._messages.values()]
        self._runs = plan_ensure_runs(
            [
                PlannedMessage(m.message_id, m.group_id, m.request)
                for m in self._messages.values()
                if self._settings.dynamic_allocation or not isinstance(m.request, EnsureRequest)
            ]
        )
        self._run_results: dict[int, EnsureResult] = {}
        self._outcomes: list[tuple[str, AllocationOutcome]] = []
        self._recorder = MetricsRecorder(self._settings.environment)
        self._observer = _WorkerObserver(
            self._recorder, runtime.pool_watch, self._settings.pool_low_ratio
        )
        budget_s = (
            context.get_remaining_time_in_millis() - self._settings.safety_margin_ms
        ) / 1000.0
        self._deadline = runtime.clock() + budget_s
        limit_gateway_time(runtime.gateway, budget_s)

    # -- per record --------------------------------------------------------------------------

    def handle_record(self, record: SQSRecord) -> None:
        """Apply one record; raise to fail it (SQS redelivers), return to complete it."""
        message = self._messages[record.message_id]
        message.handled = True
        receive_count = message.receive_count
        request = message.request
        logger.append_keys(
            message_id=message.message_id,
            workspace_id=request.workspace_id if request else message.group_id,
            request_id=request.request_id if request else None,
            kind=request.kind if request else None,
            receive_count=receive_count,
        )
        self._record_queue_lag(record)
        if request is None:
            self._dead_letter(message, receive_count)
            return
        try:
            outcome = self._apply(message, request, receive_count)
        except Exception as exc:
            terminal = _terminal_outcome(request, exc, receive_count)
            if terminal is None:
                self._note_retry(message, request, exc, receive_count)
                raise
            outcome = terminal
        self._complete(message, outcome)

    def _apply(
        self, message: _Message, request: EnsureRequest | ReleaseRequest, receive_count: int
    ) -> AllocationOutcome:
        if isinstance(request, ReleaseRequest):
            return self._release(request, receive_count)
        if not self._settings.dynamic_allocation:
            self._recorder.record("DisabledNoop")
            return _outcome(request, "disabled", receive_count)
        return self._ensure(message, request, receive_count)

    # -- ensure ------------------------------------------------------------------------------

    def _ensure(
        self, message: _Message, request: EnsureRequest, receive_count: int
    ) -> AllocationOutcome:
        run = self._runs.get(message.message_id)
        coalesced = run is not None and len(run.members) > 1 and not run.split
        try:
            if run is not None and coalesced:
                result = self._ensure_run(run, message.message_id, receive_count)
            else:
                result = self._ensure_one(request, receive_count)
        except (BrandAiLimitError, OrgPoolExhaustedError) as exc:
            return _outcome(request, "rejected", receive_count, error_code=exc.code)
        status: OutcomeStatus = result.outcome
        if result.topped_up and request.request_id in self._rt.parked:
            self._recorder.record("SiblingReclaim", dimension_value="served")
            status = "topped-up-after-reclaim"
        return _outcome(
            request,
            status,
            receive_count,
            before=result.before,
            after=result.after,
            # Re-read split: a leader whose combined call was refused was served on its own.
            coalesced=len(run.members) if run is not None and coalesced and not run.split else 1,
        )

    def _ensure_run(self, run: EnsureRun, message_id: str, receive_count: int) -> EnsureResult:
        if message_id != run.leader:
            # The leader's combined call already covered this request (a failed leader fails
            # the rest of its group before we get here: skip_group_on_error).
            return self._run_results[id(run)]
        observer = _DeferredRejections(self._observer)
        try:
            result = self._call_ensure(
                run.requests[0], run.need, run.ceiling, run.include_drafted, observer
            )
        except (BrandAiLimitError, OrgPoolExhaustedError):
            # The sum does not fit; each request may on its own. Apply them one by one.
            run.split = True
            return self._ensure_one(run.requests[0], receive_count)
        except Exception:
            # Any other failure is the members' too: keep what it recorded (a busy rejection
            # is real), and if it completes the leader (a terminal upstream answer), let the
            # members behind it make their own call instead of reading a result never stored.
            observer.commit()
            run.split = True
            raise
        observer.commit()
        self._recorder.record("CoalescedEnsures", float(len(run.members) - 1))
        self._run_results[id(run)] = result
        return result

    def _ensure_one(self, request: EnsureRequest, receive_count: int) -> EnsureResult:
        try:
            return self._call_ensure(
                request, request.need, request.ceiling, request.include_drafted, self._observer
            )
        except OrgPoolExhaustedError:
            self._park_for_reclaim(request, receive_count)
            raise

    def _call_ensure(
        self,
        request: EnsureRequest,
        need: Totals,
        ceiling: Totals | None,
        include_drafted: bool,
        observer: Any,
    ) -> EnsureResult:
        metering = self._rt.metering
        return ensure_headroom(
            self._rt.gateway,
            request.workspace_id,
            request.parent_workspace_id,
            need,
            self._context(observer),
            ceiling=ceiling,
            blocks=self._settings.blocks,
            include_drafted=include_drafted,
            policy=self._rt.ensure_policy,
            is_unmetered=metering.is_unmetered if metering is not None else None,
            exact_fallback=self._settings.tight_pool_fallback,
        )

    def _park_for_reclaim(self, request: EnsureRequest, receive_count: int) -> None:
        """Enqueue sibling releases and fail the ensure for redelivery, a bounded number of times.

        Raises ParkedForReclaimError when parked; returns (and the caller rejects) otherwise.
        """
        producer = self._rt.producer
        if not self._settings.sibling_reclaim or producer is None:
            return
        if receive_count > self._settings.sibling_reclaim_max_parks:
            self._recorder.record("SiblingReclaim", dimension_value="exhausted")
            return
        candidates = choose_reclaim_siblings(
            self._rt.gateway,
            request.parent_workspace_id,
            request.workspace_id,
            floor=self._settings.blocks.as_totals(),
            blocks=self._settings.blocks,
            max_siblings=self._settings.sibling_reclaim_max_siblings,
        )
        if not candidates:
            self._recorder.record("SiblingReclaim", dimension_value="exhausted")
            return
        producer.enqueue_many(
            [
                ReleaseRequest(
                    kind="release",
                    request_id=_reclaim_request_id(
                        request.request_id, receive_count, c.workspace_id
                    ),
                    workspace_id=c.workspace_id,
                    source="reclaim",
                    org_id=request.org_id,
                )
                for c in candidates
            ]
        )
        self._recorder.record("SiblingReclaim", float(len(candidates)), "enqueued")
        self._recorder.record("SiblingReclaim", dimension_value="parked")
        self._rt.parked.add(request.request_id)
        logger.info(
            "ensure parked for sibling reclaim",
            extra={"siblings": [c.workspace_id for c in candidates]},
        )
        raise ParkedForReclaimError()

    # -- release -----------------------------------------------------------------------------

    def _release(self, request: ReleaseRequest, receive_count: int) -> AllocationOutcome:
        result = release_surplus(
            self._rt.gateway,
            request.workspace_id,
            self._context(self._observer),
            floor=request.floor or self._settings.blocks.as_totals(),
            blocks=self._settings.blocks,
            policy=self._rt.release_policy,
        )
        plan = result.plan
        if result.outcome == "error":
            raise ReleaseIncompleteError(result.error_code or "error")
        if result.outcome == "dry-run":  # the worker never previews; kept total for mypy
            raise AssertionError("release worker must not run dry")
        return _outcome(
            request,
            result.outcome,
            receive_count,
            before=plan.before if plan else None,
            after=plan.target
            if plan and result.outcome == "released"
            else (plan.before if plan else None),
        )

    # -- completion and failure --------------------------------------------------------------

    def _context(self, observer: Any) -> TransferContext:
        return TransferContext(
            clock=self._rt.clock, sleep=self._rt.sleep, deadline=self._deadline, observer=observer
        )

    def _forget_park(self, request: EnsureRequest | ReleaseRequest | None) -> None:
        # Any terminal outcome ends a park, not only a served one: otherwise a warm container
        # keeps every rejected id forever (and would label a later request reusing that
        # idempotency key as served after reclaim).
        if request is not None:
            self._rt.parked.discard(request.request_id)

    def _complete(self, message: _Message, outcome: AllocationOutcome) -> None:
        self._forget_park(message.request)
        logger.info(
            "allocation outcome",
            extra={
                "status": outcome.status,
                "error_code": outcome.error_code,
                "totals_before": _dump(outcome.totals_before),
                "totals_after": _dump(outcome.totals_after),
                "coalesced": outcome.coalesced,
            },
        )
        self._outcomes.append((message.message_id, outcome))

    def _note_retry(
        self,
        message: _Message,
        request: EnsureRequest | ReleaseRequest,
        exc: Exception,
        receive_count: int,
    ) -> None:
        code = _error_code(exc)
        final_receive = receive_count >= self._settings.max_receive_count
        extra = {"error_code": code, "final_receive": final_receive}
        if isinstance(exc, AllocationError | ReleaseIncompleteError | UpstreamError):
            logger.warning("request will be retried", extra=extra)
        else:
            logger.exception("unexpected failure; request will be retried", extra=extra)
        if final_receive:
            status: OutcomeStatus = "rejected" if code == "workspaceBusy" else "failed"
            if isinstance(exc, ParkedForReclaimError):
                status, code = "rejected", OrgPoolExhaustedError.code
            self._forget_park(request)
            # Terminal outcome now; SQS's redrive then moves the message to the DLQ.
            self._outcomes.append(
                (message.message_id, _outcome(request, status, receive_count, error_code=code))
            )

    def _dead_letter(self, message: _Message, receive_count: int) -> None:
        self._recorder.record("InvalidMessage")
        reason = message.invalid_reason or "invalid message"
        logger.warning("invalid message", extra={"reason": reason})
        if self._rt.dead_letters is None:
            raise InvalidMessageError(reason)
        self._rt.dead_letters.send_invalid(
            message.body,
            reason=reason,
            group_id=message.group_id or None,
            dedup_id=message.message_id,
            source_message_id=message.message_id,
        )

    def _record_queue_lag(self, record: SQSRecord) -> None:
        sent = record.attributes.sent_timestamp
        if sent:
            lag = max(0.0, self._rt.wall_clock_ms() - float(sent))
            self._recorder.record("QueueLagMs", lag)

    # -- end of invocation -------------------------------------------------------------------

    def finish(self, response: Mapping[str, Any]) -> dict[str, Any]:
        """Publish outcomes and warnings, flush metrics; amend the response if publishing failed."""
        failures: list[dict[str, str]] = list(response.get("batchItemFailures", []))
        self._announce_skipped_final_receives(failures)
        unpublished = self._publish_outcomes()
        if unpublished:
            # A group is held back from its first unpublished message on: FIFO order forbids
            # completing a later message while an earlier one is redelivered, and an earlier
            # message whose outcome went out must not be applied (and announced) twice.
            failed_ids = {f["itemIdentifier"] for f in failures}
            blocked_groups: set[str] = set()
            for message_id in self._order:
                group_id = self._messages[message_id].group_id
                if message_id in unpublished:
                    blocked_groups.add(group_id)
                if group_id in blocked_groups and message_id not in failed_ids:
                    failures.append({"itemIdentifier": message_id})
                    failed_ids.add(message_id)
        self._publish_pool_warnings()
        self._recorder.flush()
        return {"batchItemFailures": failures}

    def _announce_skipped_final_receives(self, failures: Sequence[Mapping[str, str]]) -> None:
        """Give a terminal outcome to final-receive records skipped behind a failed group.

        SQS moves such a record to the DLQ next; without this its service would never hear back.
        """
        for failure in failures:
            message = self._messages.get(failure["itemIdentifier"])
            if (
                message is None
                or message.handled
                or message.request is None
                or message.receive_count < self._settings.max_receive_count
            ):
                continue
            outcome = _outcome(
                message.request, "failed", message.receive_count, error_code="groupBlocked"
            )
            self._outcomes.append((message.message_id, outcome))

    def _publish_outcomes(self) -> set[str]:
        """Publish in chunks of 10; return the message ids whose outcome could not be sent."""
        publisher = self._rt.outcomes
        if publisher is None or not self._outcomes:
            return set()
        unpublished: set[str] = set()
        for start in range(0, len(self._outcomes), 10):
            chunk = self._outcomes[start : start + 10]
            try:
                publisher.publish([outcome for _, outcome in chunk])
            except Exception:
                logger.exception("outcome events not published; requests will be retried")
                unpublished.update(mid for mid, _ in chunk if mid in self._messages)
        return unpublished

    def _publish_pool_warnings(self) -> None:
        publisher = self._rt.outcomes
        for warning in self._observer.warnings:
            logger.warning("org pool running low", extra=warning.model_dump())
            if publisher is None:
                continue
            try:
                publisher.publish_pool_low(warning.model_dump())
            except Exception:  # an early warning is advisory; never fail requests over it
                logger.exception("pool-low event not published")


def _terminal_outcome(
    request: EnsureRequest | ReleaseRequest, exc: Exception, receive_count: int
) -> AllocationOutcome | None:
    """A failed outcome for upstream answers a retry cannot fix; None when a retry could."""
    if isinstance(exc, UpstreamError) and exc.status in _TERMINAL_UPSTREAM_STATUSES:
        return _outcome(request, "failed", receive_count, error_code=_error_code(exc))
    return None


def _error_code(exc: Exception) -> str:
    if isinstance(exc, AllocationError):
        return exc.code
    if isinstance(exc, ReleaseIncompleteError):
        return exc.code
    if isinstance(exc, UpstreamError):
        return f"upstream{exc.status}"
    return type(exc).__name__


def _outcome(
    request: EnsureRequest | ReleaseRequest,
    status: OutcomeStatus,
    receive_count: int,
    *,
    error_code: str | None = None,
    before: Totals | None = None,
    after: Totals | None = None,
    coalesced: int = 1,
) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=request.request_id,
        kind=request.kind,
        workspace_id=request.workspace_id,
        status=status,
        error_code=error_code,
        totals_before=before,
        totals_after=after,
        attempts=receive_count,
        coalesced=coalesced,
        source=request.source if isinstance(request, ReleaseRequest) else None,
        run_id=request.run_id if isinstance(request, ReleaseRequest) else None,
        org_id=request.org_id,
        brand_id=request.brand_id,
    )


def _reclaim_request_id(request_id: str, receive_count: int, sibling_id: str) -> str:
    # Deterministic per park (a redelivered park is deduplicated) and short whatever the ids.
    digest = hashlib.sha256(f"{request_id}|{receive_count}|{sibling_id}".encode()).hexdigest()
    return f"reclaim-{digest[:32]}"


def _dump(totals: Totals | None) -> dict[str, int] | None:
    return None if totals is None else totals.as_dict()
