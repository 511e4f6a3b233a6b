"""Apply an ensure: alone, or as one combined top-up for a run of consecutive ensures.

A run's leader makes the combined call; the members behind it share its result (the run keeps
it: :class:`~serenity_allocator.domain.coalescing.EnsureRun`). When the sum does not fit
(brand limit, pool exhausted) the run splits and each request is applied on its own, in order.
A refusal is a returned ``rejected`` ending, a park for sibling reclaim a returned
:class:`Parked`; anything a retry could fix raises.

Two parts of an ensure's application live below it: the observer an attempt reports through
(:class:`AttemptObserver`, verdicts held until the attempt's result stands) and the park for
sibling reclaim (:func:`park_for_reclaim`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ...domain.allocation import (
    EnsureAsk,
    EnsureHooks,
    EnsureResult,
    EnsureRules,
    ReclaimRules,
    choose_reclaim_siblings,
    ensure_headroom,
    reclaim_request_id,
)
from ...domain.coalescing import EnsureRun
from ...domain.container_memory import PoolWatch
from ...domain.errors import (
    BrandAiLimitError,
    OrgPoolExhaustedError,
    OutOfTimeError,
    TieredPromptsError,
)
from ...domain.messages import (
    EnsureRequest,
    OutcomeStatus,
    ReleaseRequest,
    ServingCall,
)
from ...domain.model import Dimension, Totals
from ...domain.observations import (
    VERDICTS,
    AllocationEvent,
    Coalesced,
    DisabledNoop,
    ParkedForReclaim,
    PoolChecked,
    PoolLowWarning,
    Reclaim,
)
from ...domain.sizing import Ceiling, combine_ceilings
from ...domain.transfer import TransferContext
from ..credentials.request_credentials import MemberRecordGoneError
from ..ports import WorkerObserver
from .invocation import BatchMessage, RequestContext
from .request_ledger import record_transfer_intent


def apply_ensure(
    message: BatchMessage, request: EnsureRequest, run: EnsureRun | None, batch: RequestContext
) -> EnsureEnding | Parked:
    """How one ensure ended, or :class:`.Parked`; raises when a retry could succeed.

    ``request`` is the message's request; ``run`` the coalesced run it belongs to (None: it
    stands alone). With a request ledger, the top-up's intent (totals before, target) is
    recorded for every request it serves just before its transfer; a redelivery whose recorded
    top-up landed (:meth:`.LedgerView.landed`) reports it (made before a store failed or the
    function died), never ``hot-path``. In IMS mode (``batch.credentials``) a run's leader first
    admits only the members whose own users can read the child; one that left is applied alone.
    Its outcome is built from the returned :class:`EnsureEnding` by :func:`.apply_request`.
    """
    receive_count = message.receive_count
    ports, observer = batch.ports, batch.observer
    if batch.config.dynamic_allocation:
        ensurer = _Ensurer(batch, receive_count)
        ended = ensurer.ensure(message.message_id, request, run)
    else:
        observer.record(DisabledNoop())
        ended = _Ended("disabled")
    if isinstance(ended, Parked):
        return ended
    status, result = ended.status, ended.result
    if result is not None and result.topped_up and request.request_id in ports.parked:
        observer.record(Reclaim("served"))
        status = "topped-up-after-reclaim"
    return EnsureEnding(
        status,
        ended.error_code,
        ServingCall(result.before, result.after, ended.coalesced) if result is not None else None,
    )


@dataclass(frozen=True)
class EnsureEnding:
    """How an ensure ended, for its outcome: its status and code, and the call that served it."""

    status: OutcomeStatus
    error_code: str | None = None
    served: ServingCall | None = None


class _Asked(Protocol):
    """What one ensure call asks for: one request's, or a coalesced run's combined, ask."""

    @property
    def need(self) -> Totals: ...

    @property
    def ceiling(self) -> Ceiling | None: ...

    @property
    def include_drafted(self) -> bool: ...


@dataclass(frozen=True)
class _Ended:
    """How one ensure ended, short of its outcome: a status, with what served it, if anything."""

    status: OutcomeStatus
    error_code: str | None = None
    result: EnsureResult | None = None
    coalesced: int = 1
    """Requests the call that served this one covered (1: its own call)."""


def _combined_run(run: EnsureRun | None, message_id: str) -> EnsureRun | None:
    """The run whose one combined call serves this message, or None (it stands alone)."""
    if run is not None and run.combined and run.includes(message_id):
        return run
    return None


def _served_by_leader(run: EnsureRun | None) -> bool:
    """True for a run whose leader's combined call already stood (its members share it)."""
    return run is not None and run.result is not None


@dataclass
class _Ensurer:
    """One ensure message's attempt(s), over what the use case was handed."""

    batch: RequestContext
    receive_count: int

    def ensure(
        self, message_id: str, request: EnsureRequest, run: EnsureRun | None
    ) -> _Ended | Parked:
        """How the ensure of ``request`` (in ``run``, if coalesced) ended, or :class:`.Parked`."""
        combined = _combined_run(run, message_id)
        # A member behind a leader that stood is served by it; the intent the leader just
        # recorded for it is that same top-up, not an earlier delivery's.
        landed = (
            None
            if _served_by_leader(combined)
            else self.batch.ledger.landed(request, self.batch.ports.gateway)
        )
        if landed is not None:
            # Not counted again in HeadroomCheck: the delivery that transferred counted it.
            raised = any(landed.target.get(d) > landed.before.get(d) for d in Dimension)
            served = EnsureResult(
                outcome="topped-up" if raised else "rightsized",
                before=landed.before,
                after=landed.target,
            )
            return _Ended(served.outcome, result=served)
        try:
            result = self._apply(combined, message_id, request)
        except (BrandAiLimitError, OrgPoolExhaustedError, TieredPromptsError) as exc:
            return _Ended("rejected", error_code=exc.code)
        if isinstance(result, Parked):
            return result
        # Re-read split: a leader whose combined call was refused was served on its own.
        coalesced = len(combined.members) if combined is not None and combined.combined else 1
        return _Ended(result.outcome, result=result, coalesced=coalesced)

    def _apply(
        self, run: EnsureRun | None, message_id: str, request: EnsureRequest
    ) -> EnsureResult | Parked:
        if run is not None:
            if message_id != run.leader:
                # The leader's combined call already covered this request (a failed leader
                # fails the rest of its group before we get here: skip_group_on_error).
                if run.result is None:
                    raise AssertionError("a run member was handled before its leader's result")
                return run.result
            combined = self._apply_combined(run, request)
            if combined is not None:
                return combined
        return self.apply_one(request)

    def _apply_combined(self, run: EnsureRun, request: EnsureRequest) -> EnsureResult | None:
        """The leader's one call for the whole run; None when the run split (apply it alone)."""
        if self.batch.credentials is not None:
            # Each member's own user must reach the child before it joins the combined call.
            self.batch.credentials.admit(run, self.batch.ports.gateway)
            if not run.combined:
                return None
        attempt = self._attempt_observer()
        try:
            result = self._call(
                request,
                run,
                attempt,
                served=list(run.requests),
            )
        except (
            BrandAiLimitError,
            OrgPoolExhaustedError,
            TieredPromptsError,
            MemberRecordGoneError,
        ):
            # The sum does not fit (a tiered child's tiers may cover each need alone, never
            # the sum), or a member's record is gone (found before the transfer): each request
            # may on its own. No request received this refusal.
            attempt.discard()
            run.split_up()
            return None
        except Exception:
            # Any other failure is the members' too: keep what it recorded (a busy rejection is
            # real), and if it completes the leader (a terminal upstream answer), let the
            # members behind it make their own call instead of reading a result never stored.
            attempt.commit()
            run.split_up()
            raise
        attempt.commit()
        self.batch.observer.record(Coalesced(len(run.members) - 1))
        run.served(result)
        return result

    def apply_one(self, request: EnsureRequest) -> EnsureResult | Parked:
        attempt = self._attempt_observer()
        try:
            result = self._call(
                request,
                request,
                attempt,
                served=[request],
            )
        except OrgPoolExhaustedError:
            parked = self._park(request, attempt)
            if parked is not None:
                return parked
            attempt.commit()
            raise
        except Exception:
            attempt.commit()
            raise
        attempt.commit()
        return result

    def _park(self, request: EnsureRequest, attempt: AttemptObserver) -> Parked | None:
        # Parked (or about to be) is waiting, not rejected, unless this receive is its last.
        try:
            parked = park_for_reclaim(request, self.receive_count, self.batch)
        except OutOfTimeError:
            self._settle(attempt)
            raise
        if parked is not None:
            self._settle(attempt)
        return parked

    def _settle(self, attempt: AttemptObserver) -> None:
        if self.batch.config.is_final_receive(self.receive_count):
            attempt.commit()
        else:
            attempt.discard()

    def _attempt_observer(self) -> AttemptObserver:
        return AttemptObserver(
            self.batch.observer, self.batch.ports.pool_watch, self.batch.pool_warnings
        )

    def _call(
        self,
        request: EnsureRequest,
        asked: _Asked,
        attempt: AttemptObserver,
        *,
        served: list[EnsureRequest],
    ) -> EnsureResult:
        """One ensure call for what ``asked`` asks (one request or a run), serving ``served``."""
        config, ports = self.batch.config, self.batch.ports
        ledger, credentials = self.batch.ledger, self.batch.credentials

        def record_intent(before: Totals, target: Totals) -> None:
            if credentials is not None:
                # The rolls stored beside the reads: stored before anything is applied.
                credentials.rolls_stored(served)
            for member in served:
                record_transfer_intent(ledger, member, before, target)

        ask = EnsureAsk(
            child_id=request.workspace_id,
            parent_id=request.parent_workspace_id,
            need=asked.need,
            include_drafted=asked.include_drafted,
            ceiling=combine_ceilings(asked.ceiling, config.ceiling_backstop),
        )
        rules = EnsureRules(
            policy=config.ensure_policy,
            blocks=config.blocks,
            exact_fallback=config.tight_pool_fallback,
        )
        ctx = TransferContext(
            clock=ports.clock,
            sleep=ports.sleep,
            deadline=self.batch.deadlines.applying,
            observer=attempt,
        )
        hooks = EnsureHooks(
            is_unmetered=ports.is_unmetered,
            family=ports.parent_links,
            last_pool_free=watch.last_free if (watch := ports.pool_watch) else None,
            in_flight=ports.in_flight,
            before_transfer=record_intent,
        )
        return ensure_headroom(ports.gateway, ask, rules, ctx, hooks)


# The observer one ensure attempt reports through: verdicts count only when they stand.
# Measurements (headroom checks, transfer latency, pool reads, not-ready retries) describe what
# happened and go straight to the worker's observer. Verdicts (a rejection, a tight-pool
# fallback's result) are held until the attempt's fate is known, because two things can
# overturn them: a combined (coalesced) top-up that is refused falls back to one call per
# request, so no request received the combined refusal; and an ensure parked for sibling
# reclaim is waiting, not rejected (it may well be served on its next receive).


@dataclass
class AttemptObserver:
    """The domain's ``AllocationObserver`` for one attempt; call :meth:`commit` or :meth:`discard`.

    Args:
        sink: The invocation's observer (metrics and logs).
        pool_watch: The container's pool early warning, fed by the advisory pool reads.
        warnings: The invocation's list of pool-low warnings to publish at the end.
    """

    sink: WorkerObserver
    pool_watch: PoolWatch | None
    warnings: list[PoolLowWarning]
    _held: list[AllocationEvent] = field(default_factory=list)

    def record(self, event: AllocationEvent, /) -> None:
        """Hold a verdict until the attempt's result stands; pass a measurement on at once.

        A pool read also feeds the pool early warning.
        """
        if isinstance(event, VERDICTS):
            self._held.append(event)
            return
        self.sink.record(event)
        if isinstance(event, PoolChecked) and self.pool_watch is not None:
            warning = self.pool_watch.observe(event.parent_id, event.pool)
            if warning is not None:
                self.warnings.append(warning)

    def commit(self) -> None:
        """The attempt's result stands: report the held verdicts, in order."""
        for event in self._held:
            self.sink.record(event)
        self._held.clear()

    def discard(self) -> None:
        """The attempt's result was overturned (split run, parked ensure): forget the verdicts."""
        self._held.clear()


# Park an ensure the pool cannot cover: enqueue releases on its richest siblings, retry later.
# A bounded number of times per request (its receive count against the configured maximum),
# so a pool nobody can refill rejects the ensure instead of cycling it through the queue.
# Whether the ensure was parked is the returned value; the record is failed (so SQS brings it
# back) in one place, handle_message.


@dataclass(frozen=True)
class Parked:
    """The ensure waits for the releases enqueued on ``siblings``; it comes back later."""

    siblings: tuple[str, ...]


def park_for_reclaim(
    request: EnsureRequest, receive_count: int, batch: RequestContext
) -> Parked | None:
    """Enqueue sibling releases when reclaim can help; None when it cannot (reject the ensure).

    Reclaim cannot help when it is off, the request was parked often enough, or no sibling
    has surplus.

    Raises:
        OutOfTimeError: Enqueueing would not fit before the deadline; the ensure comes back.
    """
    config, observer, enqueuer = batch.config, batch.observer, batch.ports.enqueuer
    if not config.sibling_reclaim or enqueuer is None:
        return None
    if receive_count > config.sibling_reclaim_max_parks:
        observer.record(Reclaim("exhausted"))
        return None
    candidates = choose_reclaim_siblings(
        batch.ports.gateway,
        request.parent_workspace_id,
        request.workspace_id,
        ReclaimRules(
            floor=config.blocks.as_totals(),
            blocks=config.blocks,
            max_siblings=config.sibling_reclaim_max_siblings,
        ),
    )
    if not candidates:
        observer.record(Reclaim("exhausted"))
        return None
    if not batch.deadlines.fits_aws_call():
        raise OutOfTimeError()
    enqueuer.enqueue_many(
        [
            ReleaseRequest(
                kind="release",
                request_id=reclaim_request_id(request.request_id, receive_count, c.workspace_id),
                workspace_id=c.workspace_id,
                source="reclaim",
                org_id=request.org_id,
            )
            for c in candidates
        ]
    )
    observer.record(Reclaim("enqueued", len(candidates)))
    observer.record(Reclaim("parked"))
    parked = Parked(tuple(c.workspace_id for c in candidates))
    observer.record(ParkedForReclaim(parked.siblings))
    return parked
