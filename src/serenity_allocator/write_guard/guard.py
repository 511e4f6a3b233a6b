"""The write guard: front a metered write, recover from the disguised 405, and know why it ended.

One recovery cycle per write that meets the 405: at most ONE ensure of its own, then a retry
every ``interval_s``. With an outcome lookup the cycle lasts as long as the ensure's outcome says
it may, read through the callers' contract table (:func:`answer_of`; refused: stop at once with
the table's answer; applied: the gate's lag more; unknown, or an outcome of another request,
child or kind: keep going), inside the request's deadline; without one, ``retries`` retries.
The deadline is fixed once, when the guard is built, and checked before every attempt and every
sleep.

With an outcome lookup, a cycle whose units a front of this guard already asked for follows that
front instead of sending its own ensure (ADR 0019): the worker sums the ensures it coalesces, so a
second one for the same units would be carved twice. The cycle sends its own only once the front
can no longer serve the write: applied and the gate's lag over, or refused for more than the write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Generic, NoReturn, Protocol, TypeVar

from ..adapters.sqs import TotalsInput, build_ensure
from ..contract.outcome_table import CustomerAnswer, outcome_table
from ..domain.errors import QUOTA_SHAPED_STATUS, is_metered_quota
from ..domain.messages import AllocationOutcome, EnsureRequest
from ..domain.model import Totals
from .errors import (
    REFUSALS,
    GuardedWrite,
    HttpAnswer,
    WriteDeadlineExceededError,
    WriteOutcome,
    WriteQuotaExhaustedError,
    WriteRefusedError,
)
from .policy import GuardPolicy
from .recorders import NullQuotaRetryRecorder, QuotaRetryRecorder, QuotaRetryResult

_log = logging.getLogger(__name__)

AnswerT = TypeVar("AnswerT", bound=HttpAnswer)


class EnsureEnqueuer(Protocol):
    """Sends one ready-built ensure (``AllocationProducer.enqueue``); returns its request id."""

    def enqueue(self, request: EnsureRequest) -> str:
        """Enqueue ``request``; return its request id."""
        ...


class OutcomeLookup(Protocol):
    """Reads a request's terminal outcome (the ledger's ``OutcomeReader``); None while pending."""

    def get_outcome(self, request_id: str) -> AllocationOutcome | None:
        """The outcome, or None while the request is pending or unknown."""
        ...


def answer_of(outcome: AllocationOutcome) -> CustomerAnswer:
    """What the callers' contract answers for an ensure's outcome (docs/outcomes.md).

    ``proceed``: the room is there (or needs none); ``wait``: neither applied nor refused (an
    unknown status); any other answer is a refusal, raised as :data:`.REFUSALS` says.
    """
    return outcome_table().answer(outcome.status, outcome.error_code)


def _is_about(outcome: AllocationOutcome, request_id: str, workspace_id: str) -> bool:
    """True when ``outcome`` is the awaited ensure's: its request id, child and kind."""
    return (
        outcome.request_id == request_id
        and outcome.workspace_id == workspace_id
        and outcome.kind == "ensure"
    )


@dataclass
class _Front:
    """A front this guard sent: its units and what its outcome said so far."""

    request_id: str
    need: Totals
    applied_at: float | None = None
    """When a lookup first saw it applied (shared by every cycle that follows it)."""
    refused: bool = False

    def covers(self, need: Totals) -> bool:
        """True when this front asked for every unit ``need`` asks for."""
        return self.need.projects >= need.projects and self.need.prompts >= need.prompts


@dataclass
class _Cycle(Generic[AnswerT]):
    """One recovery: the write's last answer, its attempts and waits, what the ensure said."""

    site: str
    answer: AnswerT
    own: EnsureRequest | None = None
    """The cycle's own ensure, sized on the write; sent unless the cycle follows a front."""
    attempts: int = 1
    waited_s: float = 0.0
    request_id: str = ""
    applied_at: float | None = None
    """When a lookup first saw the ensure applied (the gate's lag runs from there)."""
    following: _Front | None = None
    """The guard's front whose outcome the cycle waits on instead of its own ensure."""


@dataclass
class WriteGuard:
    """Fronts and wraps the metered writes of ONE incoming request on one child workspace.

    Args:
        producer: Enqueues ensures (an ``AllocationProducer``).
        workspace_id: The child that writes.
        parent_workspace_id: Its master (the org pool).
        policy: Retries, pause, the per-request deadline and the gate's lag.
        recorder: Receives ``MeteredQuotaClassifier`` per 405 answer (the enforcement-is-back
            pager: without a recorder the pager cannot see this service),
            ``QuotaRetryOutcome`` per cycle and ``QuotaRollbackFailed``.
        outcomes: Reads the outcome of the ensure a recovery waits on (``OutcomeReader``): its
            own, or the pending front it follows; without it the cycle is bounded by
            ``policy.retries`` and always sends its own ensure.
        include_drafted: Size prompt top-ups on used + drafted + batch (the write gate's rule);
            opt out explicitly only for a dimension without drafts.
        ceiling: Optional per-brand ceiling for the ensures (a dimension left out is not enforced).
        org_id: Optional label for the ensures.
        brand_id: Optional label for the ensures.
        clock: Monotonic seconds; the request's deadline starts when the guard is made.
        sleep: Sleeps between attempts (injected in tests).
    """

    producer: EnsureEnqueuer
    workspace_id: str
    parent_workspace_id: str
    _: KW_ONLY
    policy: GuardPolicy = field(default_factory=GuardPolicy)
    recorder: QuotaRetryRecorder = field(default_factory=NullQuotaRetryRecorder)
    outcomes: OutcomeLookup | None = None
    include_drafted: bool = True
    ceiling: TotalsInput | None = None
    org_id: str | None = None
    brand_id: str | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    history: list[GuardedWrite] = field(default_factory=list)
    """Every wrapped write of this request that came back or was refused, in order."""

    def __post_init__(self) -> None:
        self._deadline = self.clock() + self.policy.deadline_s
        self._fronts: list[_Front] = []

    @property
    def time_left_s(self) -> float:
        """Seconds left of the request's deadline."""
        return self._deadline - self.clock()

    def front(self, need: TotalsInput) -> str:
        """Enqueue the ensure for the batch about to be written; return its request id.

        Sent BEFORE the write, it gives the allocator and the gate's lag a head start. With an
        outcome lookup, a wrapped write whose need it covers waits on it rather than asking again.

        Raises:
            pydantic.ValidationError: ``need`` or the guard's ids break the message contract.
            EnqueueError: The ensure could not be enqueued (from the producer).
        """
        request = self._ensure(need)
        request_id = self.producer.enqueue(request)
        self._fronts.append(_Front(request_id, request.need))
        return request_id

    def _ensure(self, need: TotalsInput) -> EnsureRequest:
        return build_ensure(
            self.workspace_id,
            self.parent_workspace_id,
            need,
            include_drafted=self.include_drafted,
            ceiling=self.ceiling,
            org_id=self.org_id,
            brand_id=self.brand_id,
        )

    def write(
        self,
        call: Callable[[], AnswerT],
        *,
        need: TotalsInput,
        site: str,
        rollback: Callable[[], object] | None = None,
    ) -> AnswerT:
        """Run a metered write; on the disguised 405, ensure once and retry until it lands.

        With an outcome lookup, a 405 whose need a pending front of this guard covers follows
        that front (no second ensure for the same units); see the module's docstring.

        Args:
            call: Makes the write and returns its HTTP answer. An exception it raises
                propagates at once (never retried).
            need: Units this write consumes (sizes the recovery's ensure).
            site: A call-site name for the metric (a fixed label, never an id).
            rollback: Undoes what the request staged (e.g. deletes its drafted prompts) when
                the write is finally refused; run once, before the refusal is raised.

        Returns:
            The accepted answer, or a non-quota failure answer unchanged.

        Raises:
            WriteQuotaExhaustedError: Refused for quota (code ``quotaExceeded``).
            WriteDeadlineExceededError: The request's deadline ran out (``deadlineExceeded``).
            EnqueueError: The recovery's ensure could not be enqueued (from the producer).
        """
        if self.clock() >= self._deadline:
            refusal = WriteDeadlineExceededError(None, 0, 0.0)
            self._finish_refused(refusal, site, "timed-out", rollback)
        answer = call()
        if not self._is_quota(answer):
            outcome: WriteOutcome = "accepted" if answer.status_code < 400 else "failed"
            self.history.append(GuardedWrite(site, 1, 0.0, outcome))
            return answer
        return self._recover(call, _Cycle(site, answer), need, rollback)

    def _is_quota(self, answer: HttpAnswer) -> bool:
        """Classify one answer; every 405 records the verdict (the enforcement-is-back pager)."""
        matched = is_metered_quota(answer.status_code, answer.text)
        if answer.status_code == QUOTA_SHAPED_STATUS:
            _safely(lambda: self.recorder.record_quota_verdict(matched))
        return matched

    def _recover(
        self,
        call: Callable[[], AnswerT],
        cycle: _Cycle[AnswerT],
        need: TotalsInput,
        rollback: Callable[[], object] | None,
    ) -> AnswerT:
        try:
            self._start(cycle, need)  # one ensure for this recovery at most, never per attempt
            refusal = self._retry(call, cycle)
        except Exception:
            self._record(cycle, "abandoned")
            raise
        if refusal is None:
            landed = cycle.answer.status_code < 400
            self._record(cycle, "recovered" if landed else "abandoned")
            self._report(cycle, "recovered" if landed else "failed")
            return cycle.answer
        self._record(cycle, "exhausted")
        self._report(cycle, _reported(refusal))
        self._finish_refused(refusal, cycle.site, None, rollback)

    def _retry(
        self, call: Callable[[], AnswerT], cycle: _Cycle[AnswerT]
    ) -> WriteRefusedError | None:
        """Sleep and attempt until the write lands (None) or the cycle is refused."""
        while True:
            refusal = self._refusal_before_sleep(cycle)
            if refusal is not None:
                return refusal
            self.sleep(self.policy.interval_s)
            cycle.waited_s += self.policy.interval_s
            if self.clock() >= self._deadline:  # the sleep overran: no attempt after the deadline
                return self._refusal(WriteDeadlineExceededError, cycle)
            cycle.attempts += 1
            cycle.answer = call()
            if not self._is_quota(cycle.answer):
                return None
            refusal = self._judge_ensure(cycle)
            if refusal is not None:
                return refusal

    def _refusal_before_sleep(self, cycle: _Cycle[AnswerT]) -> WriteRefusedError | None:
        if self.outcomes is None and cycle.attempts > self.policy.retries:
            return self._refusal(WriteQuotaExhaustedError, cycle)
        # A sleep only if the attempt after it would still start before the deadline.
        if self.clock() + self.policy.interval_s >= self._deadline:
            return self._refusal(WriteDeadlineExceededError, cycle)
        return None

    def _start(self, cycle: _Cycle[AnswerT], need: TotalsInput) -> None:
        """Follow a front that already asked for the write's units, or send the cycle's own."""
        cycle.own = self._ensure(need)
        front = self._front_to_follow(cycle.own.need)
        if front is None:
            self._send_own(cycle)
            return
        cycle.following = front
        cycle.request_id = front.request_id
        cycle.applied_at = front.applied_at

    def _front_to_follow(self, need: Totals) -> _Front | None:
        """The latest front covering ``need`` that may still serve the write, if any.

        Only with an outcome lookup: without one the guard cannot tell a front on its way from
        one refused or already spent, so the cycle sends its own ensure (ADR 0019).
        """
        if self.outcomes is None:
            return None
        now = self.clock()
        for front in reversed(self._fronts):
            spent = front.applied_at is not None and self._gate_had_its_lag(front.applied_at, now)
            if front.covers(need) and not front.refused and not spent:
                return front
        return None

    def _send_own(self, cycle: _Cycle[AnswerT]) -> None:
        assert cycle.own is not None  # built by _start before anything is sent
        cycle.request_id = self.producer.enqueue(cycle.own)
        cycle.following, cycle.applied_at = None, None

    def _gate_had_its_lag(self, applied_at: float, now: float) -> bool:
        return now - applied_at >= self.policy.enforcement_lag_s + self.policy.interval_s

    def _judge_ensure(self, cycle: _Cycle[AnswerT]) -> WriteRefusedError | None:
        """After a 405 retry: what the awaited ensure's outcome says about going on."""
        lookup = self.outcomes
        if lookup is None:
            return None
        now = self.clock()
        if cycle.applied_at is not None:
            if not self._gate_had_its_lag(cycle.applied_at, now):
                return None
            if cycle.following is not None:  # the front was enforced and did not serve the write
                self._send_own(cycle)
                return None
            return self._refusal(WriteQuotaExhaustedError, cycle)
        outcome = self._awaited_outcome(lookup, cycle.request_id)
        answer = "wait" if outcome is None else answer_of(outcome)
        if outcome is None or answer == "wait":
            return None
        if answer != "proceed":
            return self._judge_refused(cycle, outcome, answer)
        cycle.applied_at = now
        if cycle.following is not None:
            cycle.following.applied_at = now
        return None

    def _awaited_outcome(self, lookup: OutcomeLookup, request_id: str) -> AllocationOutcome | None:
        """The awaited ensure's outcome; one of another request, child or kind is ignored."""
        outcome = _lookup(lookup, request_id)
        if outcome is None or _is_about(outcome, request_id, self.workspace_id):
            return outcome
        _safe_log("outcome of another request ignored", ValueError(), request_id=request_id)
        return None

    def _judge_refused(
        self, cycle: _Cycle[AnswerT], outcome: AllocationOutcome, answer: CustomerAnswer
    ) -> WriteRefusedError | None:
        """A front refused for quota asked for more than the write: the write asks for its own.

        Any other refusal (the user's authority, a transient failure, a fault of ours) would
        meet the write's own ensure too: it ends the cycle with the table's answer.
        """
        front = cycle.following
        if front is not None:
            front.refused = True
            larger = cycle.own is not None and front.need != cycle.own.need
            if answer == "quotaExceeded" and larger:
                self._send_own(cycle)
                return None
        reason = outcome.error_code or outcome.status
        return self._refusal(REFUSALS[answer], cycle, reason=reason)

    def _refusal(
        self,
        kind: type[WriteRefusedError],
        cycle: _Cycle[AnswerT],
        *,
        reason: str | None = None,
    ) -> WriteRefusedError:
        return kind(cycle.answer, cycle.attempts, cycle.waited_s, reason=reason)

    def _finish_refused(
        self,
        refusal: WriteRefusedError,
        site: str,
        report: WriteOutcome | None,
        rollback: Callable[[], object] | None,
    ) -> NoReturn:
        """Report (when not yet reported), run the rollback once, raise the refusal."""
        if report is not None:
            self.history.append(GuardedWrite(site, refusal.attempts, refusal.waited_s, report))
        if rollback is not None:
            try:
                rollback()
            except Exception as exc:  # never hides the refusal: attached, counted, logged
                refusal.rollback_error = exc
                _safely(lambda: self.recorder.record_rollback_failed(site))
                _safe_log("rollback of a refused write failed", exc, site=site)
        raise refusal

    def _record(self, cycle: _Cycle[AnswerT], outcome: QuotaRetryResult) -> None:
        _safely(lambda: self.recorder.record(outcome, cycle.attempts, cycle.site))

    def _report(self, cycle: _Cycle[AnswerT], outcome: WriteOutcome) -> None:
        self.history.append(GuardedWrite(cycle.site, cycle.attempts, cycle.waited_s, outcome))


def _reported(refusal: WriteRefusedError) -> WriteOutcome:
    if isinstance(refusal, WriteDeadlineExceededError):
        return "timed-out"
    return "exhausted" if isinstance(refusal, WriteQuotaExhaustedError) else "refused"


def _lookup(lookup: OutcomeLookup, request_id: str) -> AllocationOutcome | None:
    try:
        return lookup.get_outcome(request_id)
    except Exception as exc:  # a lookup error is "unknown": the deadline still bounds the cycle
        _safe_log("outcome lookup failed; counted as unknown", exc, request_id=request_id)
        return None


def _safely(action: Callable[[], None]) -> None:
    """Run a metric call; a failure is logged and swallowed (it never changes the write)."""
    try:
        action()
    except Exception as exc:
        _safe_log("write guard metric not recorded", exc)


def _safe_log(message: str, exc: Exception, **fields: str) -> None:
    # The error's type only: a message could carry what the caller's client put in it.
    try:
        _log.warning(message, extra={**fields, "error": type(exc).__name__})
    except Exception:  # a broken log handler must not change the write either
        return
