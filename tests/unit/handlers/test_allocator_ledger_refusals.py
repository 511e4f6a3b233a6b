"""The worker over the in-memory ledger: a reused request id, an unreadable or unanswered record.

Each refusal affects only its own request: a request whose id is bound to another workspace or
kind is answered ``rejected / requestIdConflict`` (nothing applied, nothing of the other
request told); one whose record cannot be read fails alone (``ledgerRecordUnreadable``) and
nothing is written over the record; one the ledger left unanswered fails alone for a retry.
"""

from __future__ import annotations

import pytest

from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_allocator.handlers import allocator
from tests.fakes import sqs_record
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger
from tests.unit.handlers.allocator_rig import (
    FULL,
    MASTER,
    MAX_RECEIVE_COUNT,
    SENT_MS,
    Worker,
    failed_ids,
    family_gateway,
    new_worker,
    read_emf,
)

CHILD_A = "ws-child-a"
CHILD_B = "ws-child-b"
OTHER = AllocationOutcome(
    request_id="req-shared",
    kind="ensure",
    workspace_id=CHILD_A,
    status="topped-up",
    totals_before=Totals(projects=1, prompts=100),
    totals_after=Totals(projects=1, prompts=400),
    receive_count=1,
)
"""Child A's completed ensure, the first holder of the id ``req-shared``."""


def _ensure(
    message_id: str, child: str, request_id: str, *, prompts: int = 250, receive_count: int = 1
) -> dict[str, object]:
    body = {
        "version": 1,
        "kind": "ensure",
        "request_id": request_id,
        "workspace_id": child,
        "parent_workspace_id": MASTER,
        "need": {"projects": 0, "prompts": prompts},
    }
    return sqs_record(
        body,
        message_id=message_id,
        group_id=child,
        receive_count=receive_count,
        sent_timestamp_ms=SENT_MS,
        dedup_id=request_id,
    )


def _release(message_id: str, child: str, request_id: str) -> dict[str, object]:
    body = {"version": 1, "kind": "release", "request_id": request_id, "workspace_id": child}
    return sqs_record(body, message_id=message_id, group_id=child, dedup_id=request_id)


def _worker(ledger: InMemoryRequestLedger) -> Worker:
    worker = new_worker(family_gateway((CHILD_A, FULL, FULL), (CHILD_B, FULL, FULL)))
    worker.runtime.ledger = ledger
    return worker


def _conflict(request_id: str, child: str, kind: str = "ensure") -> AllocationOutcome:
    return AllocationOutcome(
        request_id=request_id,
        kind=kind,  # type: ignore[arg-type]
        workspace_id=child,
        status="rejected",
        error_code="requestIdConflict",
        receive_count=1,
        source="service" if kind == "release" else None,
    )


def test_a_request_id_bound_to_another_child_is_refused_without_applying_or_disclosing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the ledger holds child A's completed ensure under req-shared
    ledger = InMemoryRequestLedger()
    ledger.store_outcome(OTHER)
    before = ledger.entries["req-shared"]
    worker = _worker(ledger)

    # When child B's service sends an ensure that reuses the id
    response = worker.invoke(_ensure("m-1", CHILD_B, "req-shared"))

    # Then the record completes with its own refusal: child B's ids, no totals, nothing of A's
    assert failed_ids(response) == []
    assert worker.outcomes is not None
    assert worker.outcomes.published == [_conflict("req-shared", CHILD_B)]
    # nothing was applied or read upstream for child B, and A's record is untouched
    assert worker.gateway.transfers == []
    assert worker.gateway.calls == []
    assert ledger.entries["req-shared"] == before
    _, data = read_emf(capsys)
    assert [d.values for d in data if d.dimensions.get("Event") == "requestIdConflict"] == [(1.0,)]


def test_a_request_id_bound_to_another_kind_is_refused() -> None:
    # Given the ledger holds child A's ensure under req-shared
    ledger = InMemoryRequestLedger()
    ledger.store_outcome(OTHER)
    worker = _worker(ledger)

    # When a release on the same child reuses the id
    response = worker.invoke(_release("m-1", CHILD_A, "req-shared"))

    # Then it is refused with its own kind, and child A keeps its units
    assert failed_ids(response) == []
    assert worker.outcomes is not None
    assert worker.outcomes.published == [_conflict("req-shared", CHILD_A, "release")]
    assert worker.gateway.transfers == []


def test_a_request_id_reused_by_two_children_in_one_batch_applies_only_the_first() -> None:
    # Given one batch in which children A and B both send an ensure under req-shared
    ledger = InMemoryRequestLedger()
    worker = _worker(ledger)

    # When the batch runs
    response = worker.invoke(
        _ensure("m-1", CHILD_A, "req-shared"), _ensure("m-2", CHILD_B, "req-shared")
    )

    # Then A's ensure is applied and recorded; B's is refused with its own outcome
    assert failed_ids(response) == []
    assert worker.outcomes is not None
    [first, second] = worker.outcomes.published
    assert (first.workspace_id, first.status) == (CHILD_A, "topped-up")
    assert second == _conflict("req-shared", CHILD_B)
    assert [workspace for workspace, _ in worker.gateway.transfers] == [CHILD_A]
    stored = ledger.entries["req-shared"]
    assert (stored.workspace_id, stored.outcome) == (CHILD_A, first)


def test_an_unreadable_record_fails_only_its_own_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a ledger record that does not parse, beside a request with no record
    ledger = InMemoryRequestLedger()
    ledger.corrupt("req-bad", "record: unreadable field(s) state")
    worker = _worker(ledger)

    # When both arrive in one batch
    response = worker.invoke(
        _ensure("m-bad", CHILD_A, "req-bad"), _ensure("m-ok", CHILD_B, "req-ok")
    )

    # Then only the unreadable one fails, nothing applied for it, its record left as it was
    assert failed_ids(response) == ["m-bad"]
    assert [workspace for workspace, _ in worker.gateway.transfers] == [CHILD_B]
    assert worker.outcomes is not None
    assert [o.request_id for o in worker.outcomes.published] == ["req-ok"]
    assert ledger.unreadable == {"req-bad": "record: unreadable field(s) state"}
    assert "req-bad" not in ledger.entries
    [error] = [type(info[1]).__name__ for info in allocator.processor.exceptions]
    assert error == "LedgerRecordUnreadableError"
    _, data = read_emf(capsys)
    assert [d.values for d in data if d.dimensions.get("Event") == "unreadable"] == [(1.0,)]


def test_an_unreadable_record_on_its_final_receive_is_not_written_over_nor_announced() -> None:
    # Given an unreadable record whose request is on its last receive
    ledger = InMemoryRequestLedger()
    ledger.corrupt("req-bad")
    worker = _worker(ledger)

    # When it is delivered
    response = worker.invoke(_ensure("m-bad", CHILD_A, "req-bad", receive_count=MAX_RECEIVE_COUNT))

    # Then it fails (SQS moves it to the DLQ), no dead letter is written over the record and
    # none is announced: the DLQ audit reports the record for repair
    assert failed_ids(response) == ["m-bad"]
    assert ledger.writes == 0
    assert worker.outcomes is not None
    assert worker.outcomes.published == []


def test_an_id_the_ledger_left_unanswered_fails_alone_for_a_retry() -> None:
    # Given a lookup that DynamoDB throttled past its deadline for one id
    ledger = InMemoryRequestLedger()
    ledger.throttled = {"req-slow"}
    worker = _worker(ledger)

    # When it arrives beside another request
    response = worker.invoke(
        _ensure("m-slow", CHILD_A, "req-slow"), _ensure("m-ok", CHILD_B, "req-ok")
    )

    # Then only the unanswered one fails (nothing applied for it), for SQS to bring back
    assert failed_ids(response) == ["m-slow"]
    assert [workspace for workspace, _ in worker.gateway.transfers] == [CHILD_B]
    [error] = [info[1] for info in allocator.processor.exceptions]
    assert (type(error).__name__, str(error)) == (
        "LedgerUnavailableError",
        "unprocessed keys until the deadline",
    )


def test_a_final_receive_whose_outcome_went_out_is_flagged_announced() -> None:
    # Given two requests, one on its final receive
    ledger = InMemoryRequestLedger()
    worker = _worker(ledger)

    # When both complete and their outcomes are published
    response = worker.invoke(
        _ensure("m-1", CHILD_A, "req-first"),
        _ensure("m-2", CHILD_B, "req-last", receive_count=MAX_RECEIVE_COUNT),
    )

    # Then only the final receive's record is flagged (the DLQ audit leaves it alone), the
    # other needs no flag: its message cannot reach the DLQ with this outcome
    assert failed_ids(response) == []
    assert ledger.announced_calls == [["req-last"]]
    flags = {rid: entry.announced for rid, entry in ledger.entries.items()}
    assert flags == {"req-first": False, "req-last": True}
