"""A ledger record read back by any schema version, its liveness, and the caller's deadline."""

from __future__ import annotations

import json
from typing import Any

import pytest

from serenity_allocator.domain.ledger import (
    PROVISIONAL_GRACE_S,
    CallDeadline,
    LedgerEntry,
    LedgerRecordUnreadableError,
    TransferIntent,
    known_fields,
    read_stored,
)
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals

OUTCOME = {"request_id": "req-1", "kind": "ensure", "workspace_id": "c1", "status": "hot-path"}
RECORD = {
    "request_id": "req-1",
    "state": "final",
    "workspace_id": "c1",
    "kind": "ensure",
    "outcome": OUTCOME,
}
INTENT = TransferIntent(
    before=Totals(projects=1, prompts=100), target=Totals(projects=1, prompts=50)
)


def _unreadable(document: Any) -> str:
    with pytest.raises(LedgerRecordUnreadableError) as caught:
        read_stored(LedgerEntry, json.dumps(document), "req-1")
    return str(caught.value)


def test_a_record_is_read_back_whatever_a_later_version_added_to_it() -> None:
    # Given a record with fields this version does not know, in it and in its outcome
    stored = {**RECORD, "future": 1, "outcome": {**OUTCOME, "later": "x", "attempts": 3}}

    # When read / Then the known fields are read, the legacy ``attempts`` as the receive count
    entry = read_stored(LedgerEntry, json.dumps(stored), "req-1")
    assert entry == LedgerEntry(
        request_id="req-1",
        state="final",
        workspace_id="c1",
        kind="ensure",
        outcome=AllocationOutcome(**OUTCOME, receive_count=3),
    )


def test_known_fields_drops_unknown_keys_at_every_depth_and_keeps_what_is_no_object() -> None:
    document = {
        "request_id": "req-1",
        "unknown": {"a": 1},
        "intent": {"before": {"projects": 1, "tiers": []}, "target": {"prompts": 2}, "why": 0},
        "outcome": None,
    }

    assert known_fields(LedgerEntry, document) == {
        "request_id": "req-1",
        "intent": {"before": {"projects": 1}, "target": {"prompts": 2}},
        "outcome": None,
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "req-1: not valid JSON"),
        ("[]", "req-1: not a JSON object"),
        ("1", "req-1: not a JSON object"),
    ],
)
def test_a_record_that_is_no_json_object_is_unreadable(text: str, problem: str) -> None:
    with pytest.raises(LedgerRecordUnreadableError) as caught:
        read_stored(LedgerEntry, text, "req-1")
    assert str(caught.value) == problem


def test_an_unreadable_record_names_its_fields_sorted_never_their_values() -> None:
    stored = {
        **RECORD,
        "state": "secret-state",
        "intent": {"before": {"projects": "secret"}, "target": {}},
    }

    assert _unreadable(stored) == "req-1: unreadable field(s) intent.before.projects, state"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"request_id": "req-2"}, "outcome.request_id"),
        ({"workspace_id": "c2"}, "outcome.workspace_id"),
        ({"kind": "release"}, "outcome.kind"),
    ],
)
def test_an_outcome_bound_to_another_request_names_the_field_that_disagrees(
    change: dict[str, str], field: str
) -> None:
    # Given a record whose stored outcome is another request's, workspace's or kind's
    stored = {**RECORD, "outcome": {**OUTCOME, **change}}

    # Then unreadable, on the outcome's field at fault (never replayed)
    assert _unreadable(stored) == f"req-1: unreadable field(s) {field}"


def test_a_terminal_record_without_its_outcome_is_unreadable_on_the_outcome() -> None:
    assert _unreadable({**RECORD, "outcome": None}) == "req-1: unreadable field(s) outcome"


def _entry(state: str, *, provisional: bool = False, updated_at: int | None = 1_000) -> LedgerEntry:
    outcome = None if state == "intent" else AllocationOutcome(**OUTCOME)
    return LedgerEntry(
        request_id="req-1",
        state=state,  # type: ignore[arg-type]
        workspace_id="c1",
        kind="ensure",
        outcome=outcome,
        intent=INTENT if state == "intent" else None,
        provisional=provisional,
        updated_at=updated_at,
    )


@pytest.mark.parametrize(
    ("entry", "now_s", "live"),
    [
        (_entry("intent"), 1_000 + PROVISIONAL_GRACE_S - 1, True),  # an intent, in its grace
        (_entry("intent"), 1_000 + PROVISIONAL_GRACE_S, False),  # ... and at its end
        (_entry("deadLettered", provisional=True), 1_100, True),  # a provisional dead letter
        (_entry("deadLettered"), 1_000, False),  # a dead letter a receive completed
        (_entry("final"), 1_000, False),  # a final outcome
        (_entry("intent", updated_at=None), PROVISIONAL_GRACE_S - 1, True),  # no time: from 0
        (_entry("intent", updated_at=None), PROVISIONAL_GRACE_S, False),
    ],
)
def test_a_record_is_live_only_while_open_and_within_its_grace(
    entry: LedgerEntry, now_s: float, live: bool
) -> None:
    assert entry.is_live(now_s) is live


def test_a_call_deadline_fits_a_wait_and_one_attempt_ending_exactly_at_it() -> None:
    deadline = CallDeadline(clock=lambda: 10.0, sleep=lambda _: None, at=13.0, attempt_s=3.0)

    assert [deadline.fits(), deadline.fits(0.5)] == [True, False]
