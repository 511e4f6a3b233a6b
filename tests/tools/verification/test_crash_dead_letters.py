"""The crash scenario's DLQ check: only requests crashes took there, each a truthful dead letter."""

from __future__ import annotations

from typing import Any

from serenity_allocator.domain.ledger import LedgerEntry
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.crash_dead_letters import NAME, check_crash_dead_letters
from serenity_tools.verification.harness.crash import _explained
from serenity_tools.verification.invariants import InvariantResult

DEAD = AllocationOutcome(
    request_id="req-d",
    kind="ensure",
    workspace_id="child-1",
    status="failed",
    error_code="receivesExhausted",
    receive_count=5,
    dead_lettered=True,
)


def _letter(request_id: str = "req-d", reason: str | None = None) -> DeadLetter:
    return DeadLetter(
        message_id=f"m-{request_id}",
        group_id="child-1",
        body="{}",
        request_id=request_id,
        reason=reason,
        receive_count=5,
    )


def _record(state: Any = "deadLettered", *, provisional: bool = False) -> dict[str, LedgerEntry]:
    return {
        "req-d": LedgerEntry(request_id="req-d", state=state, outcome=DEAD, provisional=provisional)
    }


def _receives(released: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """Five receives of req-d, each in its own batch; the ``released`` ones lived to release."""
    events: list[dict[str, Any]] = []
    for batch in range(1, 6):
        message = {"id": "m-req-d", "group": "child-1", "request_id": "req-d"}
        events.append({"ev": "receive", "pid": 100 + batch, "batch": batch, "msgs": [message]})
        if batch in released:
            events.append({"ev": "release", "pid": 100 + batch, "batch": batch})
        else:
            events.append({"ev": "crash", "pid": 100 + batch, "at": "during_handler"})
    return events


def test_check_crash_dead_letters_accepts_a_crashed_request_with_one_dead_letter() -> None:
    # Given a request whose five receives all died, one confirmed dead letter and its outcome
    # When checked
    result = check_crash_dead_letters([_letter()], _record(), [DEAD], _receives())

    # Then it passes and says what it covered
    assert result.passed
    assert result.detail == (
        "1 requests ran out of receives to crashes (5 receives, each in a batch whose consumer "
        "died): 1 with one deadLettered record, 0 completed before (final record); each with its "
        "outcome; no invalid message"
    )


def test_check_crash_dead_letters_flags_a_receive_a_living_consumer_released() -> None:
    # Given a dead-lettered request whose third receive was released (the worker failed it)
    # When checked
    result = check_crash_dead_letters([_letter()], _record(), [DEAD], _receives(released=(3,)))

    # Then that receive is named
    assert result.violations == ("req-d: receive 3 was released by a living consumer",)


def test_check_crash_dead_letters_flags_a_request_that_did_not_end_as_one_dead_letter() -> None:
    # Given the same crashed request, ended three wrong ways
    completed = DEAD.model_copy(update={"status": "topped-up", "dead_lettered": None})
    cases = [
        ({}, [DEAD], "req-d: no terminal ledger record"),
        (
            _record(provisional=True),
            [DEAD],
            "req-d: ledger record provisional deadLettered, not one confirmed deadLettered record",
        ),
        (_record(), [completed], "req-d: no published outcome equals its record (1 published)"),
    ]

    # When each is checked / Then each is a violation naming what is missing
    for ledger, outcomes, violation in cases:
        result = check_crash_dead_letters([_letter()], ledger, outcomes, _receives())
        assert (result.passed, result.violations) == (False, (violation,))


def test_check_crash_dead_letters_flags_an_invalid_message_and_a_run_without_a_ledger() -> None:
    # Given an invalid message in the DLQ, and a crashed request in a run without a ledger
    letters = [_letter("req-x", reason="invalidJson"), _letter()]

    # When checked
    result = check_crash_dead_letters(letters, None, [DEAD], _receives())

    # Then both are violations
    assert result.violations == (
        "m-req-x: invalid message (invalidJson)",
        "req-d: no terminal ledger record",
    )


def test_check_crash_dead_letters_passes_an_empty_dlq_saying_so() -> None:
    # Given a run that left nothing in the DLQ / When checked
    result = check_crash_dead_letters([], {}, [DEAD], _receives())

    # Then it passes and says the DLQ was empty
    assert (result.passed, result.detail) == (
        True,
        "empty: no request ran out of receives, no invalid message",
    )


def test_check_crash_dead_letters_accepts_a_completed_request_whose_deletes_all_died() -> None:
    # Given a request applied and announced on its first receive (final record, its outcome
    # published twice: once per receive that got as far as publishing), whose every receive
    # then died before its delete
    completed = DEAD.model_copy(update={"status": "topped-up", "dead_lettered": None})
    ledger = {"req-d": LedgerEntry(request_id="req-d", state="final", outcome=completed)}

    # When checked
    result = check_crash_dead_letters([_letter()], ledger, [completed, completed], _receives())

    # Then its final record is the truth: it passes, counted as completed before
    assert (result.passed, result.detail) == (
        True,
        "1 requests ran out of receives to crashes (5 receives, each in a batch whose consumer "
        "died): 0 with one deadLettered record, 1 completed before (final record); each with its "
        "outcome; no invalid message",
    )


def test_check_crash_dead_letters_flags_a_completed_request_without_its_outcome() -> None:
    # Given a final record whose outcome was never published
    completed = DEAD.model_copy(update={"status": "topped-up", "dead_lettered": None})
    ledger = {"req-d": LedgerEntry(request_id="req-d", state="final", outcome=completed)}

    # When checked
    result = check_crash_dead_letters([_letter()], ledger, [], _receives())

    # Then it is a violation
    assert result.violations == ("req-d: no published outcome equals its record (0 published)",)


REAUTH = DEAD.model_copy(update={"error_code": "needsReauth", "receive_count": 2})
LOST = [{"op": "ims_exchange", "status": 401, "user": "u-1", "answer_lost": True}]


def _reauth_record() -> dict[str, LedgerEntry]:
    return {"req-d": LedgerEntry(request_id="req-d", state="deadLettered", outcome=REAUTH)}


def _two_receives(first_released: bool) -> list[dict[str, Any]]:
    """req-d received twice: the first batch's consumer died (unless released), the second
    dead-lettered it and lived."""
    events = _receives(released=(2,))[:4]
    if first_released:
        events[1] = {"ev": "release", "pid": 101, "batch": 1}
    return events


def test_a_needs_reauth_letter_after_a_killed_exchange_is_explained() -> None:
    # Given a needsReauth dead letter whose first receive died with its consumer, and the
    # simulator's log of the lost exchange answer for the request's user
    letters = [_letter(reason="needsReauth")]

    # When checked
    result = check_crash_dead_letters(
        letters,
        _reauth_record(),
        [REAUTH],
        _two_receives(first_released=False),
        owners={"req-d": "u-1"},
        ims_calls=LOST,
    )

    # Then it passes, the letter explained (ADR 0016's safe side), never a violation
    assert result.passed is True
    assert result.explained == (
        "req-d: needsReauth after IMS processed its exchange and the answer never reached the "
        "record (ADR 0016: the safe side)",
    )
    assert result.detail.endswith(
        "; but 1 needsReauth, each after its consumer lost an exchange answer"
    )


def test_a_needs_reauth_letter_without_a_killed_receive_or_a_lost_answer_stays_a_violation() -> (
    None
):
    # Given the same letter, once with its first receive released by a living consumer and
    # once without a lost answer logged for its user
    letters = [_letter(reason="needsReauth")]
    cases = [
        (_two_receives(first_released=True), LOST),
        (_two_receives(first_released=False), []),
    ]

    for events, calls in cases:
        # When checked
        result = check_crash_dead_letters(
            letters, _reauth_record(), [REAUTH], events, owners={"req-d": "u-1"}, ims_calls=calls
        )

        # Then it is an invalid message, as before
        assert result.violations == ("m-req-d: invalid message (needsReauth)",)


def test_an_explained_needs_reauth_letter_must_still_end_truthfully() -> None:
    # Given an explained needsReauth letter whose outcome was never published
    letters = [_letter(reason="needsReauth")]

    # When checked
    result = check_crash_dead_letters(
        letters,
        _reauth_record(),
        [],
        _two_receives(first_released=False),
        owners={"req-d": "u-1"},
        ims_calls=LOST,
    )

    # Then its missing outcome is the violation
    assert result.violations == ("req-d: no published outcome equals its record (0 published)",)


def test_the_crash_numbers_count_lost_answers_apart_from_explained_replays() -> None:
    # Given the outcome check's two explained replays and the DLQ check's one lost answer
    checks = [
        InvariantResult(
            "one terminal outcome", True, "ok", explained=("r-1: replay", "r-2: replay")
        ),
        InvariantResult(NAME, True, "ok", explained=("r-3: lost answer",)),
    ]

    # Then each is counted where it belongs: a lost answer is no replay
    assert _explained(checks) == {
        "identical replays explained": 2,
        "needsReauth after a lost exchange answer": 1,
    }
