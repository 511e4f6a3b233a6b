"""Finish a batch: publish its outcomes and pool warnings, flush the metrics, amend failures.

An outcome that cannot be published fails its record so the request comes back: an outcome is
never silently lost. FIFO order then holds back the rest of that record's group. Every record
reported as failed is logged once, with its request id and why (:class:`.RecordFailed`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...domain.errors import OutOfTimeError
from ...domain.messages import AllocationOutcome
from ...domain.observations import (
    MessageStarted,
    OutcomesNotPublished,
    PoolLow,
    PoolLowNotPublished,
    RecordFailed,
)
from .final_receive import skipped_final_receives
from .invocation import PUBLISH_CHUNK, Invocation, message_keys
from .request_ledger import confirm_announced

SKIPPED_BEHIND_GROUP = "skippedBehindFailedGroup"
"""Why a record never handed over failed: an earlier record of its group failed."""
OUTCOME_NOT_PUBLISHED = "outcomeNotPublished"
"""Why a completed record failed: its outcome (or an earlier one of its group) was not sent."""


def finish_batch(inv: Invocation, failed: Sequence[str]) -> list[str]:
    """Publish, warn, flush; return the message ids to report as batch item failures."""
    # From here every call may use the finishing deadline (Deadlines.fits_aws_call).
    inv.deadlines.start_announcing()
    state = inv.state
    failures = list(failed)
    skipped = [
        inv.plan.message(message_id)
        for message_id in failures
        if message_id in inv.plan.messages and message_id not in state.handled
    ]
    for message_id, outcome in skipped_final_receives(
        skipped, max_receive_count=inv.config.max_receive_count
    ):
        held = state.book.record(message_id, outcome)
        if state.credentials is not None:
            # Terminal too; IMS calls were bounded by the applying phase, so scrub only.
            state.credentials.end(held or outcome, invalidate=False)
    unpublished = _publish_outcomes(inv)
    if state.credentials is not None:
        state.credentials.await_ends()  # the ends ran beside the publishing; all done by now
    if unpublished:
        failures = _hold_back_groups(inv, failures, unpublished)
    _publish_pool_warnings(inv)
    _report_failures(inv, failures, unpublished)
    inv.observer.flush()
    return failures


def _publish_outcomes(inv: Invocation) -> set[str]:
    """Publish in chunks; return the message ids whose outcome could not be sent."""
    sink = inv.ports.outcomes
    entries = inv.state.book.entries
    if sink is None or not entries:
        return set()
    unpublished: set[str] = set()
    for start in range(0, len(entries), PUBLISH_CHUNK):
        chunk = entries[start : start + PUBLISH_CHUNK]
        try:
            if not inv.deadlines.fits_aws_call():
                # Fail these records now rather than let the function time out mid-publish,
                # which would bring the WHOLE batch back, published outcomes included.
                raise OutOfTimeError()
            sink.publish([outcome for _, outcome in chunk])
            _confirm_final_receives(inv, chunk)
        except Exception as exc:  # the records come back; nothing is lost
            inv.observer.record(OutcomesNotPublished(exc))
            unpublished.update(mid for mid, _ in chunk if mid in inv.plan.messages)
    return unpublished


def _confirm_final_receives(
    inv: Invocation, chunk: Sequence[tuple[str, AllocationOutcome]]
) -> None:
    # A final receive's message may reach the DLQ even though its outcome went out; the flag
    # tells the DLQ audit not to announce it again.
    confirm_announced(
        inv.state.ledger,
        (
            outcome
            for message_id, outcome in chunk
            if message_id in inv.plan.messages
            and inv.config.is_final_receive(inv.plan.message(message_id).receive_count)
        ),
    )


def _hold_back_groups(inv: Invocation, failures: list[str], unpublished: set[str]) -> list[str]:
    # A group is held back from its first unpublished message on: FIFO order forbids completing
    # a later message while an earlier one is redelivered, and an earlier message whose outcome
    # went out must not be applied (and announced) twice.
    amended = list(failures)
    failed_ids = set(failures)
    blocked_groups: set[str] = set()
    for message_id in inv.plan.order:
        group_id = inv.plan.message(message_id).group_id
        if message_id in unpublished:
            blocked_groups.add(group_id)
        if group_id in blocked_groups and message_id not in failed_ids:
            amended.append(message_id)
            failed_ids.add(message_id)
    return amended


def _publish_pool_warnings(inv: Invocation) -> None:
    sink = inv.ports.outcomes
    for warning in inv.state.pool_warnings:
        inv.observer.record(PoolLow(warning))
        if sink is None:
            continue
        try:
            if not inv.deadlines.fits_aws_call():
                raise OutOfTimeError()
            sink.publish_pool_low(warning.model_dump())
        except Exception as exc:  # an early warning is advisory; never fail requests over it
            inv.observer.record(PoolLowNotPublished(exc))


def _report_failures(inv: Invocation, failures: Sequence[str], unpublished: set[str]) -> None:
    # One line per failed record, whatever failed it: its own error, its group's, or the
    # publish of its outcome. None is left silent (a failed store after applying included).
    reasons = inv.state.failure_reasons
    for message_id in failures:
        message = inv.plan.messages.get(message_id)
        if message_id in reasons:
            reason = reasons[message_id]
        elif message_id in inv.state.handled or message_id in unpublished:
            reason = OUTCOME_NOT_PUBLISHED
        else:
            reason = SKIPPED_BEHIND_GROUP
        keys = (
            message_keys(message)
            if message is not None
            else MessageStarted(message_id, "", None, None, 0)
        )
        inv.observer.record(RecordFailed(keys, reason))
