"""The faults scenario's DLQ check: a needsReauth a lost IMS answer explains is not a violation.

ADR 0016: an exchange IMS processed whose answer never reached the record leaves a spent token,
and the next exchange ends ``needsReauth`` (the safe side). The simulator logs that refusal
``answer_lost``; any other ``needsReauth`` of a valid promise stays a violation.
"""

from __future__ import annotations

from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.harness.faults import dead_letter_check
from serenity_tools.verification.lost_answers import LOST_ANSWER

ZOMBIE = {"z-1"}
OWNERS = {"r-1": "u1", "r-2": "u2", "z-1": "uz"}


def _letter(request_id: str, reason: str | None) -> DeadLetter:
    return DeadLetter(f"m-{request_id}", "c1", "{}", request_id, reason, 1)


def _lost(user: str) -> dict[str, object]:
    return {"op": "ims_exchange", "status": 401, "user": user, "answer_lost": True}


def test_a_needs_reauth_after_a_lost_answer_is_explained_not_a_violation() -> None:
    letters = [_letter("z-1", None), _letter("r-1", "needsReauth")]
    result = dead_letter_check(letters, ZOMBIE, OWNERS, [_lost("u1")])
    assert result.passed
    assert result.explained == (f"r-1: {LOST_ANSWER}",)


def test_any_other_needs_reauth_stays_a_violation() -> None:
    letters = [_letter("z-1", None), _letter("r-1", "needsReauth"), _letter("r-2", "needsReauth")]
    # A plain 401 and a refusal not marked lost explain nothing for u1; u2's lost answer
    # explains u2's letter only
    calls = [
        {"op": "ims_exchange", "status": 401, "user": None},
        _lost("u2"),
        {"op": "ims_exchange", "status": 401, "user": "u1", "answer_lost": False},
    ]
    result = dead_letter_check(letters, ZOMBIE, OWNERS, calls)
    assert not result.passed
    assert result.violations == ("1 invalid messages, expected 0",)
    assert result.explained == (f"r-2: {LOST_ANSWER}",)
