"""The Allocator Lambda in memory: the ledger (replays, store failures, intents), failure logs."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from serenity_allocator.adapters.observability import logger
from serenity_allocator.domain.container_memory import InFlightUnits
from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.ledger import TransferIntent
from serenity_allocator.domain.model import Totals
from tests.fakes import READ_RESOURCES, RecordingOutcomes, sqs_record
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger, StoreFailsOnce
from tests.unit.handlers.allocator_rig import (
    FULL,
    MAX_RECEIVE_COUNT,
    Worker,
    ensure_record,
    failed_ids,
    family_gateway,
    new_worker,
)


def _ledger_worker(
    outcomes: RecordingOutcomes | None = None,
) -> tuple[Worker, InMemoryRequestLedger]:
    worker = new_worker(family_gateway(("c1", FULL, FULL)), outcomes=outcomes)
    ledger = InMemoryRequestLedger()
    worker.runtime.ledger = ledger
    return worker, ledger


# ==== a replayed request joins no coalesced run ============================================


def test_lambda_handler_replayed_ensure_joins_no_run_and_the_next_ensure_is_applied() -> None:
    # Given an ensure that topped c1 up (stored final) whose outcome could not be published
    outcomes = RecordingOutcomes(fail_calls=[1])
    worker, ledger = _ledger_worker(outcomes)
    # (no units counted on their way between requests: this is about runs, not concurrency)
    worker.runtime.in_flight = InFlightUnits(worker.clock, window_s=0)
    first = worker.invoke(ensure_record("m1", "c1", 100))
    assert failed_ids(first) == ["m1"]
    assert ledger.entries["req-m1"].state == "final"
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=600))]

    # When it comes back in one batch with a fresh ensure of the same child behind it
    second = worker.invoke(
        ensure_record("m1", "c1", 100, receive_count=2), ensure_record("m2", "c1", 300)
    )

    # Then the replay is announced as stored and the fresh ensure is applied on its own for
    # its own need (100 used + 300 = 400 fits in 600 but leaves 200, under the 300 it asked:
    # refilled to 400 plus four blocks, 800), not as a member of a run led by the replay
    assert failed_ids(second) == []
    assert worker.gateway.transfers == [
        ("c1", Totals(projects=5, prompts=600)),
        ("c1", Totals(projects=5, prompts=800)),
    ]
    replayed, fresh = worker.outcome("req-m1"), worker.outcome("req-m2")
    assert (replayed.status, replayed.receive_count, replayed.coalesced) == ("topped-up", 1, 1)
    assert (fresh.status, fresh.coalesced) == ("topped-up", 1)
    assert (fresh.totals_before, fresh.totals_after) == (
        Totals(projects=5, prompts=600),
        Totals(projects=5, prompts=800),
    )
    assert ledger.entries["req-m2"].state == "final"


# ==== a store that fails after the transfer ================================================


def _later_receive(receive_count: int) -> dict[str, Any]:
    if receive_count < MAX_RECEIVE_COUNT:
        return ensure_record("m1", "c1", 100, receive_count=receive_count + 1)
    # After the final receive SQS moved it to the DLQ; an operator redrives it (a new message).
    redriven = ensure_record("m1", "c1", 100)
    redriven["messageId"] = "m1-redriven"
    return redriven


@pytest.mark.parametrize(
    "receive_count", [1, 3, MAX_RECEIVE_COUNT], ids=["first", "middle", "final"]
)
def test_lambda_handler_store_failing_after_the_transfer_is_logged_and_later_told_truthfully(
    receive_count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a full child and a ledger whose terminal store fails (on a final receive, at its
    # second try too)
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    ledger = StoreFailsOnce()
    ledger.failing_stores = 2 if receive_count == MAX_RECEIVE_COUNT else 1
    worker.runtime.ledger = ledger
    logs = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", logs)

    # When an ensure tops the child up on this receive (100 + 100 = 200, plus four blocks:
    # 600, its project refilled ahead to 1 + 4 = 5) and its outcome cannot be stored
    first = worker.invoke(ensure_record("m1", "c1", 100, receive_count=receive_count))

    # Then the record fails, logged once with its request id and why; nothing is announced;
    # the ledger holds the top-up's intent recorded before the transfer
    assert failed_ids(first) == ["m1"]
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=600))]
    assert worker.outcomes is not None and worker.outcomes.published == []
    failures = [
        (line["request_id"], line["reason"])
        for line in map(json.loads, logs.getvalue().splitlines())
        if line["message"] == "record failed; SQS will redeliver it"
    ]
    assert failures == [("req-m1", "ledgerUnavailable")]
    entry = ledger.entries["req-m1"]
    assert entry.intent == TransferIntent(before=FULL, target=Totals(projects=5, prompts=600))
    assert entry.state == ("deadLettered" if receive_count == MAX_RECEIVE_COUNT else "intent")

    # When the request comes back (redelivered, or redriven after its final receive)
    later = worker.invoke(_later_receive(receive_count))

    # Then it is not transferred again, and it says what was done: topped up to 600
    assert failed_ids(later) == []
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=600))]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.totals_before, outcome.totals_after) == (
        "topped-up",
        FULL,
        Totals(projects=5, prompts=600),
    )
    assert outcome.supersedes == ("deadLettered" if receive_count == MAX_RECEIVE_COUNT else None)
    assert ledger.entries["req-m1"].state == "final"
    assert ledger.entries["req-m1"].outcome == outcome


def test_lambda_handler_final_receive_whose_store_fails_once_is_stored_again_and_reported() -> None:
    # Given a full child and a ledger whose terminal store fails once (throttled)
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    ledger = StoreFailsOnce()
    worker.runtime.ledger = ledger

    # When an ensure tops the child up on its final receive (100 used + 100, plus four blocks:
    # 600; the project refilled ahead to 1 + 4 = 5)
    answer = worker.invoke(ensure_record("m1", "c1", 100, receive_count=MAX_RECEIVE_COUNT))

    # Then its outcome is stored at the second try: the record completes (no DLQ), and what
    # was applied is announced, never a failure or nothing
    assert failed_ids(answer) == []
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=600))]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.totals_before, outcome.totals_after, outcome.dead_lettered) == (
        "topped-up",
        FULL,
        Totals(projects=5, prompts=600),
        None,
    )
    entry = ledger.entries["req-m1"]
    assert (entry.state, entry.provisional, entry.outcome) == ("final", False, outcome)


def test_lambda_handler_coalesced_run_records_every_members_intent_before_its_transfer() -> None:
    # Given a full child and a ledger whose first terminal store fails (the leader's)
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    ledger = StoreFailsOnce()
    worker.runtime.ledger = ledger

    # When two ensures of the child are served by one combined top-up (100 used + 100 + 100
    # = 300, plus four blocks: 700; the project refilled ahead to 1 + 4 = 5)
    first = worker.invoke(ensure_record("m1", "c1", 100), ensure_record("m2", "c1", 100))

    # Then both requests hold the combined intent and both come back (FIFO: the group fails)
    target = Totals(projects=5, prompts=700)
    assert failed_ids(first) == ["m1", "m2"]
    assert worker.gateway.transfers == [("c1", target)]
    assert [ledger.entries[rid].intent for rid in ("req-m1", "req-m2")] == [
        TransferIntent(before=FULL, target=target)
    ] * 2

    # When both come back / Then neither is applied again and both say what the top-up did
    later = worker.invoke(
        ensure_record("m1", "c1", 100, receive_count=2),
        ensure_record("m2", "c1", 100, receive_count=2),
    )
    assert failed_ids(later) == []
    assert worker.gateway.transfers == [("c1", target)]
    assert [
        (o.request_id, o.status, o.totals_before, o.totals_after)
        for o in (worker.outcome("req-m1"), worker.outcome("req-m2"))
    ] == [("req-m1", "topped-up", FULL, target), ("req-m2", "topped-up", FULL, target)]


# ==== every failed record is logged once, with why =========================================


def _failure_lines(logs: io.StringIO) -> list[tuple[str, str | None, str]]:
    return [
        (line["message_id"], line.get("request_id"), line["reason"])
        for line in map(json.loads, logs.getvalue().splitlines())
        if line["message"] == "record failed; SQS will redeliver it"
    ]


def test_lambda_handler_logs_each_failed_record_with_its_request_id_and_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given c1 whose first read fails (its second ensure is then skipped behind it), and c2
    # whose top-up succeeds but whose outcome cannot be published
    worker = new_worker(
        family_gateway(("c1", FULL, FULL), ("c2", FULL, FULL)),
        outcomes=RecordingOutcomes(fail_calls=[1]),
    )
    worker.gateway.script_errors(READ_RESOURCES, "c1", [UpstreamError(503, "busy", "read")])
    logs = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", logs)

    # When one batch holds all three
    response = worker.invoke(
        ensure_record("m1", "c1", 100),
        ensure_record("m2", "c1", 100),
        ensure_record("m3", "c2", 100),
    )

    # Then each failed record says once why it failed, with its own ids
    assert failed_ids(response) == ["m1", "m2", "m3"]
    assert _failure_lines(logs) == [
        ("m1", "req-m1", "upstream503"),
        ("m2", "req-m2", "skippedBehindFailedGroup"),
        ("m3", "req-m3", "outcomeNotPublished"),
    ]


def test_lambda_handler_failure_lines_carry_each_records_own_workspace_and_receive_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given c1 whose read fails on its third receive, then c2's ensure on its first that
    # succeeds, so c2 is the last record the logger saw when the failures are reported
    worker = new_worker(family_gateway(("c1", FULL, FULL), ("c2", FULL, FULL)))
    worker.gateway.script_errors(READ_RESOURCES, "c1", [UpstreamError(503, "busy", "read")])
    logs = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", logs)

    # When one batch holds both
    response = worker.invoke(
        ensure_record("m1", "c1", 100, receive_count=3), ensure_record("m2", "c2", 100)
    )

    # Then c1's failure line names c1 and its third receive, not c2's keys (issue 34 item 4)
    assert failed_ids(response) == ["m1"]
    [line] = [
        line
        for line in map(json.loads, logs.getvalue().splitlines())
        if line["message"] == "record failed; SQS will redeliver it"
    ]
    assert (line["message_id"], line["workspace_id"], line["request_id"], line["kind"]) == (
        "m1",
        "c1",
        "req-m1",
        "ensure",
    )
    assert line["receive_count"] == 3


def test_lambda_handler_logs_an_invalid_record_without_a_request_id() -> None:
    # Given no DLQ (an invalid record then fails so the redrive policy moves it)
    worker = new_worker(family_gateway(("c1", FULL, FULL)), dlq=False)
    logs = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logger.registered_handler, "stream", logs)
        response = worker.invoke(sqs_record("not json", message_id="m1", group_id="c1"))

    # Then its failure line has no request id and names the error
    assert failed_ids(response) == ["m1"]
    assert _failure_lines(logs) == [("m1", None, "InvalidMessageError")]


def test_lambda_handler_coalesced_member_with_a_ledger_is_served_by_its_leader() -> None:
    # Given a full child and a ledger (the leader records both members' intents first)
    worker, ledger = _ledger_worker()

    # When two ensures of the child are served by one combined top-up (100 used + 100 + 100
    # = 300, plus four blocks: 700; the project refilled ahead to 1 + 4 = 5)
    result = worker.invoke(ensure_record("m1", "c1", 100), ensure_record("m2", "c1", 100))

    # Then the member reports the run it was served by (coalesced 2, like the leader), not a
    # landed earlier top-up of its own, and pays no read of the child of its own
    target = Totals(projects=5, prompts=700)
    assert failed_ids(result) == []
    assert worker.gateway.transfers == [("c1", target)]
    assert [
        (o.request_id, o.status, o.coalesced, o.totals_before, o.totals_after)
        for o in (worker.outcome("req-m1"), worker.outcome("req-m2"))
    ] == [
        ("req-m1", "topped-up", 2, FULL, target),
        ("req-m2", "topped-up", 2, FULL, target),
    ]
    unledgered = new_worker(family_gateway(("c1", FULL, FULL)))
    unledgered.invoke(ensure_record("m1", "c1", 100), ensure_record("m2", "c1", 100))
    reads = worker.gateway.calls_of(READ_RESOURCES)
    assert reads == unledgered.gateway.calls_of(READ_RESOURCES)
    assert [entry.state for entry in ledger.entries.values()] == ["final", "final"]
