"""Every status and code of the callers' contract through the Python write guard.

The customer answer each one gets is pinned apart from the table (tests/fixtures/
guard-answers.json), so a table row that answers a non-quota code ``quotaExceeded`` fails;
clients/node/test/contract-table.test.js runs the same cases through the Node guard.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from serenity_allocator.contract.outcome_table import outcome_table
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest
from serenity_allocator.producer import GuardPolicy, WriteGuard, WriteRefusedError
from serenity_tools.standins.simulator import DISGUISED_QUOTA_405
from tests.fakes import FakeClock

CHILD, MASTER = "c1", "m1"
PINNED = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "guard-answers.json").read_text(encoding="utf-8")
)
QUOTA_CODES = set(PINNED["quota_codes"])
ANSWERS: dict[str, str] = PINNED["codes"]
"""The customer answer of every code of the contract (a pattern row by its example)."""
STATUS_ANSWERS: dict[str, str] = PINNED["statuses"]
"""The answer of every status with no code (a refusal status: an absent or unknown code)."""


@dataclass(frozen=True)
class Answer:
    status_code: int = 405
    text: str = DISGUISED_QUOTA_405


@dataclass
class Enqueuer:
    requests: list[EnsureRequest] = field(default_factory=list)

    def enqueue(self, request: EnsureRequest) -> str:
        self.requests.append(request)
        return request.request_id


@dataclass
class Ledger:
    """Answers every lookup with ``fields`` over the awaited ensure's own ids."""

    fields: dict[str, object]

    def get_outcome(self, request_id: str) -> AllocationOutcome | None:
        base = {"request_id": request_id, "kind": "ensure", "workspace_id": CHILD}
        # model_construct: an unknown status cannot be validated, and must still be read.
        return AllocationOutcome.model_construct(**{**base, **self.fields})


def customer_answer(**fields: object) -> tuple[str, str | None]:
    """(answer, reason) of one recovery whose ensure ends with ``fields``.

    ``proceed``: treated as applied (the gate's lag, then quota without a reason, since this gate
    never accepts); ``wait``: treated as pending until the deadline.
    """
    clock = FakeClock()
    guard = WriteGuard(
        Enqueuer(), CHILD, MASTER, outcomes=Ledger(fields), clock=clock, sleep=clock.sleep,
        policy=GuardPolicy(deadline_s=60.0),
    )  # fmt: skip
    with pytest.raises(WriteRefusedError) as raised:
        guard.write(Answer, need={"prompts": 1}, site="s")
    refusal = raised.value
    if refusal.code == "quotaExceeded" and refusal.reason is None:
        return "proceed", None
    if refusal.code == "deadlineExceeded" and refusal.reason is None:
        return "wait", None
    return refusal.code, refusal.reason


def test_the_pinned_answers_cover_every_code_and_status_of_the_table() -> None:
    table = outcome_table()
    assert {row.sample for row in table.codes} == set(ANSWERS)
    assert {row.status for row in table.statuses} == set(STATUS_ANSWERS)


@pytest.mark.parametrize("row", outcome_table().codes, ids=lambda row: row.code)
def test_every_code_through_the_guard_gets_its_customer_answer(row: object) -> None:
    # Given an ensure refused with the row's code, under each status the code comes with
    code = row.sample  # type: ignore[attr-defined]
    for status in row.statuses:  # type: ignore[attr-defined]
        # When a write meets the 405 / Then the guard answers as the contract says, naming it
        assert customer_answer(status=status, error_code=code) == (ANSWERS[code], code)


@pytest.mark.parametrize("status", sorted(STATUS_ANSWERS))
def test_every_status_without_a_code_through_the_guard(status: str) -> None:
    # Given an ensure ending with the status alone / When the write meets the 405
    answer, reason = customer_answer(status=status)
    # Then the answer is the status's; a refusal names the status as its reason
    assert answer == STATUS_ANSWERS[status]
    assert reason == (None if answer in {"proceed", "wait"} else status)


def test_no_code_but_a_quota_refusal_is_answered_quota_exceeded() -> None:
    # Given every code of the table under every status it comes with, and codes in no row
    answered = {
        code: customer_answer(status=status, error_code=code)[0]
        for row in outcome_table().codes
        for status in row.statuses
        for code in [row.sample]
    }
    strays = {
        code: customer_answer(status=status, error_code=code)[0]
        for status in ("rejected", "failed", "invalid")
        for code in ("someNewCode", "")
    }
    # Then quotaExceeded answers exactly the pool, the ceiling and the tiered refusals
    assert {code for code, answer in answered.items() if answer == "quotaExceeded"} == QUOTA_CODES
    assert "quotaExceeded" not in strays.values()


def test_an_unknown_status_is_neither_applied_nor_refused() -> None:
    # Given an outcome with a status no table row knows, with or without a quota code
    # When the write meets the 405 / Then the guard waits until the deadline ("try again")
    assert customer_answer(status="parked") == ("wait", None)
    assert customer_answer(status="parked", error_code="orgPoolExhausted") == ("wait", None)


@pytest.mark.parametrize(
    "other",
    [{"request_id": "another"}, {"workspace_id": "c2"}, {"kind": "release"}],
    ids=["request id", "workspace", "kind"],
)
def test_an_outcome_of_another_request_workspace_or_kind_is_ignored(
    other: dict[str, object],
) -> None:
    # Given the ledger hands back a pool refusal that is not the awaited ensure's
    fields = {"status": "rejected", "error_code": "orgPoolExhausted", **other}
    # When the write meets the 405 / Then it is not believed: the guard waits to its deadline
    assert customer_answer(**fields) == ("wait", None)
