"""The Allocator Lambda in memory: what one record's path reports and keeps (ledger events,
the record a booked outcome belongs to, the failure logs, the applying deadline)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from serenity_allocator.adapters.observability import logger
from serenity_allocator.domain.container_memory import InFlightUnits
from serenity_allocator.domain.errors import WorkspaceBusyError
from serenity_allocator.domain.ledger import LedgerEntry
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from tests.fakes import READ_STATUS, RecordingOutcomes
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger, intent_entry
from tests.unit.handlers.allocator_rig import (
    FULL,
    MAX_RECEIVE_COUNT,
    QUEUE_LAG_MS,
    SENT_MS,
    Worker,
    ensure_record,
    failed_ids,
    family_gateway,
    metric_total,
    new_worker,
    read_emf,
    release_record,
)

SEQUENCE_NUMBER = "18893920000000001000"
"""The SequenceNumber every rig record carries."""


def _worker(
    ledger: InMemoryRequestLedger | None = None, outcomes: RecordingOutcomes | None = None
) -> Worker:
    worker = new_worker(family_gateway(("c1", FULL, FULL), ("c2", FULL, FULL)), outcomes=outcomes)
    worker.runtime.ledger = ledger
    return worker


def _logs(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    stream = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", stream)
    return stream


def _lines(stream: io.StringIO, message: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("message") == message]


def _final(request_id: str, workspace_id: str = "c1") -> LedgerEntry:
    return LedgerEntry(
        request_id=request_id,
        state="final",
        workspace_id=workspace_id,
        kind="ensure",
        outcome=AllocationOutcome(
            request_id=request_id,
            kind="ensure",
            workspace_id=workspace_id,
            status="topped-up",
            totals_before=FULL,
            totals_after=Totals(projects=1, prompts=200),
            receive_count=1,
        ),
    )


# ==== a second record of one request ======================================================


def test_a_second_record_of_a_request_is_counted_as_a_duplicate_and_not_applied(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given one batch carrying the same ensure twice
    worker = _worker()
    copy = ensure_record("m1", "c1", 100)
    copy["messageId"] = "m1-copy"

    # When it runs
    response = worker.invoke(ensure_record("m1", "c1", 100), copy)

    # Then one transfer (100 + 100 = 200, plus four blocks: 600, the project refilled ahead to
    # 1 + 4 = 5), one outcome, and the copy counted as a duplicate
    _, data = read_emf(capsys)
    assert failed_ids(response) == []
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=600))]
    assert worker.outcomes is not None and len(worker.outcomes.published) == 1
    assert metric_total(data, "RequestLedger", "duplicate") == 1


# ==== replays ===============================================================================


def test_a_replay_is_counted_stored_nowhere_and_tied_to_its_own_record(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a request the ledger holds as final, and an outcome bus that refuses the first
    # publish
    ledger = InMemoryRequestLedger()
    ledger.entries["req-m1"] = _final("req-m1")
    worker = _worker(ledger, RecordingOutcomes(fail_calls=[1]))

    # When the request comes back, then again
    refused = worker.invoke(ensure_record("m1", "c1", 100, receive_count=2))
    published = worker.invoke(ensure_record("m1", "c1", 100, receive_count=3))

    # Then nothing is applied or stored; the refused publish fails its own record, and the
    # stored outcome is announced as it is, counted as a replay each time
    _, data = read_emf(capsys)
    assert failed_ids(refused) == ["m1"]
    assert failed_ids(published) == []
    assert worker.gateway.transfers == []
    assert ledger.stores == 0
    assert worker.outcomes is not None
    assert worker.outcomes.published == [_final("req-m1").outcome]
    assert metric_total(data, "RequestLedger", "replayed") == 2


# ==== a request id bound to another request ================================================


def test_a_refused_request_id_is_logged_and_its_refusal_tied_to_its_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an id the ledger binds to c1, reused by c2, and a bus refusing the first publish
    ledger = InMemoryRequestLedger()
    ledger.entries["req-m1"] = _final("req-m1")
    worker = _worker(ledger, RecordingOutcomes(fail_calls=[1]))
    stream = _logs(monkeypatch)

    # When c2's ensure comes under that id
    response = worker.invoke(ensure_record("m1", "c2", 100))

    # Then it is refused without applying, its outcome logged; the publish that failed fails
    # its record
    assert failed_ids(response) == ["m1"]
    assert worker.gateway.transfers == []
    assert ledger.stores == 0
    [line] = _lines(stream, "allocation outcome")
    assert (line["status"], line["error_code"]) == ("rejected", "requestIdConflict")


def test_without_a_ledger_an_id_reused_by_two_children_in_one_batch_is_refused_once() -> None:
    # Given no ledger, and one batch in which c1 and c2 send an ensure under one id
    worker = _worker()
    other = ensure_record("m2", "c2", 100)
    other["body"] = other["body"].replace('"req-m2"', '"req-m1"')

    # When it runs
    response = worker.invoke(ensure_record("m1", "c1", 100), other)

    # Then c1's ensure is applied (100 + 100 = 200, plus four blocks: 600) and c2's refused
    # with its own ids
    assert failed_ids(response) == []
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=600))]
    assert worker.outcomes is not None
    [first, second] = worker.outcomes.published
    assert (first.workspace_id, first.status) == ("c1", "topped-up")
    assert (second.workspace_id, second.status, second.error_code) == (
        "c2",
        "rejected",
        "requestIdConflict",
    )


# ==== final receives ========================================================================


def test_a_final_receive_failure_is_a_counted_dead_letter_tied_to_its_record(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a busy child and a ledger
    ledger = InMemoryRequestLedger()
    worker = _worker(ledger)
    worker.gateway.script_errors("transfer", "c1", [WorkspaceBusyError()])
    worker.runtime.parked.add("req-m1")
    stream = _logs(monkeypatch)

    # When the ensure fails on its final receive
    response = worker.invoke(ensure_record("m1", "c1", 100, receive_count=MAX_RECEIVE_COUNT))

    # Then its terminal outcome is stored, carries its record's order key, ends its park, is
    # counted as a dead letter, and the failure is logged with its reason
    _, data = read_emf(capsys)
    assert failed_ids(response) == ["m1"]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code, outcome.dead_lettered) == (
        "rejected",
        "workspaceBusy",
        True,
    )
    assert outcome.sequence_number == SEQUENCE_NUMBER
    assert ledger.entries["req-m1"].state == "deadLettered"
    assert "req-m1" not in worker.runtime.parked
    assert metric_total(data, "RequestLedger", "deadLettered") == 1
    [failed] = _lines(stream, "record failed; SQS will redeliver it")
    assert (failed["message_id"], failed["reason"]) == ("m1", "workspaceBusy")


def test_a_redrive_after_an_announced_dead_letter_is_counted_as_superseding_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an ensure dead-lettered (and announced) on its final receive
    ledger = InMemoryRequestLedger()
    worker = _worker(ledger)
    worker.gateway.script_errors("transfer", "c1", [WorkspaceBusyError()])
    worker.invoke(ensure_record("m1", "c1", 100, receive_count=MAX_RECEIVE_COUNT))
    read_emf(capsys)

    # When an operator redrives it and it succeeds
    redriven = ensure_record("m1", "c1", 100)
    redriven["messageId"] = "m1-redriven"
    response = worker.invoke(redriven)

    # Then its outcome supersedes the dead letter, counted so
    _, data = read_emf(capsys)
    assert failed_ids(response) == []
    assert worker.outcome("req-m1").supersedes == "deadLettered"
    assert metric_total(data, "RequestLedger", "superseded") == 1
    assert metric_total(data, "RequestLedger", "deadLettered") == 0


def test_without_a_ledger_no_ledger_event_is_counted(capsys: pytest.CaptureFixture[str]) -> None:
    # Given no ledger and a busy child
    worker = _worker()
    worker.gateway.script_errors("transfer", "c1", [WorkspaceBusyError()])

    # When the ensure fails on its final receive (a dead-lettered outcome)
    worker.invoke(ensure_record("m1", "c1", 100, receive_count=MAX_RECEIVE_COUNT))

    # Then its outcome is dead-lettered, and no RequestLedger metric is emitted
    _, data = read_emf(capsys)
    assert worker.outcome("req-m1").dead_lettered is True
    assert [d for d in data if d.name == "RequestLedger"] == []


def test_a_parent_mismatch_with_a_ledger_is_a_counted_dead_letter(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a ledger, and an ensure naming a parent that is not the child's
    ledger = InMemoryRequestLedger()
    worker = _worker(ledger)
    worker.gateway.add_master("other-master", total=Totals(projects=5, prompts=500))

    # When it needs a top-up
    worker.invoke(ensure_record("m1", "c1", 100, parent="other-master"))

    # Then its invalid outcome is stored as a dead letter and counted so
    _, data = read_emf(capsys)
    assert ledger.entries["req-m1"].state == "deadLettered"
    assert worker.outcome("req-m1").error_code == "parentMismatch"
    assert metric_total(data, "RequestLedger", "deadLettered") == 1


# ==== a dead letter the worker sent itself, redelivered (ADR 0020) ==========================


def test_a_parent_mismatch_redelivered_as_the_same_message_is_replayed_not_dead_lettered_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an ensure naming a parent that is not the child's, dead-lettered and completed
    ledger = InMemoryRequestLedger()
    worker = _worker(ledger)
    worker.gateway.add_master("other-master", total=Totals(projects=5, prompts=500))
    worker.invoke(ensure_record("m1", "c1", 100, parent="other-master"))
    stored = ledger.entries["req-m1"]
    read_emf(capsys)

    # When the consumer died before the delete and SQS delivers the same message again
    response = worker.invoke(ensure_record("m1", "c1", 100, parent="other-master", receive_count=2))

    # Then the stored outcome is published again, identical; one DLQ copy, the ledger as it was
    _, data = read_emf(capsys)
    assert failed_ids(response) == []
    assert stored.source_message_id == "m1"
    assert worker.outcomes is not None
    [first, again] = worker.outcomes.published
    assert first == again == stored.outcome
    assert worker.dead_letters is not None and len(worker.dead_letters.sent) == 1
    assert (ledger.entries["req-m1"], ledger.stores) == (stored, 1)
    assert metric_total(data, "RequestLedger", "replayed") == 1
    assert metric_total(data, "RequestLedger", "deadLettered") == 0


def test_an_invalid_message_redelivered_as_the_same_message_is_replayed_not_sent_again() -> None:
    # Given a message in another child's group (invalid, its request id readable), completed
    ledger = InMemoryRequestLedger()
    worker = _worker(ledger)
    worker.invoke(ensure_record("m1", "c1", 100, group="c2"))
    stored = ledger.entries["req-m1"]

    # When SQS delivers the same message again (the delete never happened)
    response = worker.invoke(ensure_record("m1", "c1", 100, group="c2", receive_count=2))

    # Then its invalid outcome is published again as stored, and nothing is sent or written
    assert failed_ids(response) == []
    assert worker.outcomes is not None
    [first, again] = worker.outcomes.published
    assert first == again == stored.outcome
    assert (first.status, first.receive_count) == ("invalid", 1)
    assert worker.dead_letters is not None and len(worker.dead_letters.sent) == 1
    assert (ledger.entries["req-m1"], ledger.stores) == (stored, 1)


def test_a_dead_letter_sent_by_another_message_is_applied_and_superseded() -> None:
    # Given a refusal dead-lettered by message m1 (its record completed)
    ledger = InMemoryRequestLedger()
    refusal = AllocationOutcome(
        request_id="req-m1",
        kind="ensure",
        workspace_id="c1",
        status="failed",
        error_code="needsReauth",
        receive_count=1,
        dead_lettered=True,
    )
    ledger.entries["req-m1"] = LedgerEntry(
        request_id="req-m1",
        state="deadLettered",
        workspace_id="c1",
        kind="ensure",
        outcome=refusal,
        source_message_id="m1",
    )
    worker = _worker(ledger)

    # When m1 comes back, then an operator's redrive of its DLQ copy (a new message)
    worker.invoke(ensure_record("m1", "c1", 100, receive_count=2))
    redriven = ensure_record("m1", "c1", 100)
    redriven["messageId"] = "m1-redriven"
    worker.invoke(redriven)

    # Then m1 replays the refusal, applying nothing; the redrive is applied (100 + 100 = 200,
    # plus four blocks: 600) and supersedes it
    assert worker.outcomes is not None
    [replayed, applied] = worker.outcomes.published
    assert replayed == refusal
    assert (applied.status, applied.supersedes) == ("topped-up", "deadLettered")
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=600))]
    assert (ledger.entries["req-m1"].state, ledger.entries["req-m1"].source_message_id) == (
        "final",
        None,
    )


def test_a_final_receive_dead_letter_is_applied_again_by_the_same_message_id() -> None:
    # Given an ensure dead-lettered by SQS's redrive (its final receive failed its record)
    ledger = InMemoryRequestLedger()
    worker = _worker(ledger)
    worker.gateway.script_errors("transfer", "c1", [WorkspaceBusyError()])
    worker.invoke(ensure_record("m1", "c1", 100, receive_count=MAX_RECEIVE_COUNT))
    assert ledger.entries["req-m1"].source_message_id is None

    # When a message with the same id reaches the worker (a redrive that kept the id)
    response = worker.invoke(ensure_record("m1", "c1", 100))

    # Then today's rule holds: it is applied, and its outcome supersedes the dead letter
    assert failed_ids(response) == []
    assert (worker.outcome("req-m1").status, worker.outcome("req-m1").supersedes) == (
        "topped-up",
        "deadLettered",
    )


# ==== an unexpected failure =================================================================


def test_an_unexpected_failure_is_logged_with_its_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a gateway that fails in a way no rule foresees
    worker = _worker()
    worker.gateway.script_errors("read_resources", "c1", [RuntimeError("gateway broke")])
    stream = _logs(monkeypatch)

    # When an ensure comes
    response = worker.invoke(ensure_record("m1", "c1", 100))

    # Then the record fails and the log line carries the error's trace
    assert failed_ids(response) == ["m1"]
    [line] = _lines(stream, "unexpected failure; request will be retried")
    assert "RuntimeError: gateway broke" in line["exception"]


# ==== the applying deadline bounds a release ===============================================


def test_a_release_stops_polling_its_settle_at_the_applying_deadline() -> None:
    # Given a child whose status never settles after a release's transfer
    worker = _worker()
    worker.gateway.add_child("wide", "ws-master", total=Totals(projects=3, prompts=400))
    worker.gateway.script_statuses("wide", ["transferring"] * 40)

    # When a release runs with little time left in the invocation
    response = worker.invoke(release_record("m1", "wide"), remaining_ms=40_000)

    # Then the settle polls (1 s apart) stop by the applying deadline, short of their 30:
    # 40 s left - 3 s safety margin - 16 s kept for the outcome publish = 21 s of applying,
    # so a poll at each second from 0 to 21; the release fails for a retry
    assert failed_ids(response) == ["m1"]
    assert len(worker.gateway.calls_of(READ_STATUS)) == 22


# ==== finishing the batch ===================================================================


def test_a_final_receive_skipped_behind_its_group_gets_an_outcome_with_its_order_key() -> None:
    # Given a busy child and two ensures of it, the second on its final receive
    worker = _worker()
    worker.gateway.script_errors("transfer", "c1", [WorkspaceBusyError()])

    # When the first fails (its group is held back behind it)
    response = worker.invoke(
        ensure_record("m1", "c1", 100),
        ensure_record("m2", "c1", 100, receive_count=MAX_RECEIVE_COUNT),
    )

    # Then the skipped final receive still ends with a groupBlocked outcome, in order
    assert failed_ids(response) == ["m1", "m2"]
    outcome = worker.outcome("req-m2")
    assert (outcome.status, outcome.error_code) == ("failed", "groupBlocked")
    assert outcome.sequence_number == SEQUENCE_NUMBER


def test_a_copy_completed_behind_an_unpublished_outcome_fails_as_not_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given one batch carrying an ensure twice, and a bus that refuses the publish
    worker = _worker(outcomes=RecordingOutcomes(fail_calls=[1]))
    copy = ensure_record("m1", "c1", 100)
    copy["messageId"] = "m1-copy"
    stream = _logs(monkeypatch)

    # When it runs
    response = worker.invoke(ensure_record("m1", "c1", 100), copy)

    # Then both records fail, each logged as not published (the copy completed with the first)
    assert failed_ids(response) == ["m1", "m1-copy"]
    assert [
        (line["message_id"], line["reason"])
        for line in _lines(stream, "record failed; SQS will redeliver it")
    ] == [("m1", "outcomeNotPublished"), ("m1-copy", "outcomeNotPublished")]


def _warnings(stream: io.StringIO) -> list[dict[str, Any]]:
    # The batch's warnings (they carry the free ratio), not the pool reads' own lines.
    return [line for line in _lines(stream, "org pool running low") if "free_ratio" in line]


def _two_low_pools() -> Worker:
    gateway = family_gateway(
        ("c1", FULL, FULL),
        pool_total=Totals(projects=50, prompts=1_000),
        pool_used=Totals(projects=0, prompts=900),
    )
    gateway.add_master(
        "ws-master-2",
        total=Totals(projects=50, prompts=1_000),
        used=Totals(projects=0, prompts=900),
    )
    gateway.add_child("c2", "ws-master-2", total=FULL, used=FULL)
    return new_worker(gateway, outcomes=RecordingOutcomes(fail_pool_low=True), POOL_LOW_RATIO="0.5")


def test_every_low_pool_of_a_batch_is_logged_and_a_refused_warning_with_its_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given two pools under the threshold and a bus refusing pool-low events
    worker = _two_low_pools()
    stream = _logs(monkeypatch)

    # When one batch tops a child of each up
    response = worker.invoke(
        ensure_record("m1", "c1", 50), ensure_record("m2", "c2", 50, parent="ws-master-2")
    )

    # Then both requests complete, each pool's warning is logged, and each refusal with why
    assert failed_ids(response) == []
    assert [line["parent_workspace_id"] for line in _warnings(stream)] == [
        "ws-master",
        "ws-master-2",
    ]
    refused = _lines(stream, "pool-low event not published")
    assert len(refused) == 2
    assert all("Traceback" in line["exception"] for line in refused)


def test_without_an_outcome_bus_every_low_pool_is_still_logged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given two low pools and no outcome bus at all
    worker = _two_low_pools()
    worker.runtime.outcomes = None
    stream = _logs(monkeypatch)

    # When one batch tops a child of each up
    worker.invoke(
        ensure_record("m1", "c1", 50), ensure_record("m2", "c2", 50, parent="ws-master-2")
    )

    # Then each pool's warning is still logged
    assert [line["parent_workspace_id"] for line in _warnings(stream)] == [
        "ws-master",
        "ws-master-2",
    ]


# ==== invalid messages ======================================================================


def test_an_invalid_message_is_logged_with_its_reason_and_without_a_dlq_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a worker with no DLQ and a record whose group is not its workspace
    worker = new_worker(family_gateway(("c1", FULL, FULL)), dlq=False)
    stream = _logs(monkeypatch)

    # When it arrives
    response = worker.invoke(ensure_record("m1", "c1", 100, group="c2"))

    # Then its reason is logged, and it fails (left to SQS's redrive), logged so
    assert failed_ids(response) == ["m1"]
    [logged] = _lines(stream, "invalid message")
    assert logged["reason"] == "MessageGroupId: must equal workspace_id"
    [failure] = _lines(stream, "record failed; SQS will redeliver it")
    assert (failure["message_id"], failure["reason"]) == ("m1", "InvalidMessageError")


# ==== planning the batch around the ledger ==================================================


def test_ensures_behind_a_replay_still_share_one_top_up() -> None:
    # Given a request the ledger holds as final (no intent), and two fresh ensures behind it
    ledger = InMemoryRequestLedger()
    ledger.entries["req-m1"] = _final("req-m1")
    worker = _worker(ledger)

    # When the three come in one batch
    response = worker.invoke(
        ensure_record("m1", "c1", 100, receive_count=2),
        ensure_record("m2", "c1", 100),
        ensure_record("m3", "c1", 100),
    )

    # Then the replay is announced and the two fresh ones are served by one combined top-up
    # (100 used + 100 + 100 = 300, plus four blocks: 700; project to 1 + 4 = 5)
    assert failed_ids(response) == []
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=700))]
    assert worker.outcome("req-m1") == _final("req-m1").outcome
    assert [worker.outcome(rid).status for rid in ("req-m2", "req-m3")] == ["topped-up"] * 2


def test_a_request_with_a_recorded_intent_joins_no_run() -> None:
    # Given an ensure whose earlier delivery recorded an intent that did not land
    ledger = InMemoryRequestLedger()
    ledger.entries["req-m1"] = intent_entry(
        "req-m1", "c1", "ensure", FULL, Totals(projects=2, prompts=300)
    )
    worker = _worker(ledger)
    # (no units counted on their way between requests: this is about runs, not concurrency)
    worker.runtime.in_flight = InFlightUnits(worker.clock, window_s=0)

    # When it comes back with a fresh ensure of the same child behind it
    response = worker.invoke(
        ensure_record("m1", "c1", 100, receive_count=2), ensure_record("m2", "c1", 100)
    )

    # Then each is applied on its own, never as one run: the first tops up for its own need
    # (200 plus four blocks: 600; the sum would be 300 -> 700), and the second then finds the
    # room it needs with 400 left, over its two-block refill mark (hot path)
    assert failed_ids(response) == []
    assert worker.gateway.transfers == [("c1", Totals(projects=5, prompts=600))]
    assert [
        (worker.outcome(rid).status, worker.outcome(rid).coalesced) for rid in ("req-m1", "req-m2")
    ] == [("topped-up", 1), ("hot-path", 1)]


def test_no_ledger_lookup_is_started_that_would_not_fit_the_applying_deadline() -> None:
    # Given a ledger and an invocation with too little time left for one ledger call
    ledger = InMemoryRequestLedger()
    worker = _worker(ledger)

    # When an ensure comes (remaining 10 s - 3 s margin - 16 s for the publish: no time)
    response = worker.invoke(ensure_record("m1", "c1", 100), remaining_ms=10_000)

    # Then the batch's lookup is not made and the request fails for a retry, unapplied
    assert failed_ids(response) == ["m1"]
    assert ledger.lookups == []
    assert worker.gateway.transfers == []


# ==== a park ================================================================================


def _reclaim_worker() -> Worker:
    # A dry pool, an idle sibling with surplus, and sibling reclaim on.
    gateway = family_gateway(
        ("c1", FULL, FULL),
        ("s-big", Totals(projects=1, prompts=1_000), FULL),
        pool_total=Totals(projects=5, prompts=100),
        pool_used=Totals(projects=5, prompts=100),
    )
    return new_worker(
        gateway,
        producer=True,
        SERENITY_SIBLING_RECLAIM="true",
        QUEUE_URL="https://sqs.us-east-1.amazonaws.com/123456789012/serenity-unit.fifo",
    )


def test_a_park_whose_enqueue_would_not_fit_fails_out_of_time_and_parks_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given reclaim on, and 34.5 s left: 15.5 s of applying (34.5 - 3 margin - 16 publish),
    # room for the transfer attempt (15 s) but not for the sibling enqueue (16 s)
    worker = _reclaim_worker()
    stream = _logs(monkeypatch)

    # When an ensure the pool cannot cover arrives
    response = worker.invoke(ensure_record("m1", "c1", 250), remaining_ms=34_500)

    # Then nothing is enqueued nor parked, and the record fails for a retry, out of time
    assert failed_ids(response) == ["m1"]
    assert worker.producer is not None and worker.producer.many == []
    assert "req-m1" not in worker.runtime.parked
    [failure] = _lines(stream, "record failed; SQS will redeliver it")
    assert (failure["message_id"], failure["reason"]) == ("m1", "outOfTime")


def test_a_parked_ensure_fails_its_record_as_parked_and_its_rejection_is_not_counted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a dry pool, an idle sibling with surplus, and sibling reclaim on
    worker = _reclaim_worker()
    stream = _logs(monkeypatch)

    # When an ensure the pool cannot cover arrives (not on its final receive)
    response = worker.invoke(ensure_record("m1", "c1", 250))

    # Then it is parked: its record fails as parked (nothing else went wrong), and the pool's
    # refusal is not counted as a rejection while it waits
    _, data = read_emf(capsys)
    assert failed_ids(response) == ["m1"]
    [failure] = _lines(stream, "record failed; SQS will redeliver it")
    assert (failure["message_id"], failure["reason"]) == ("m1", "parkedForReclaim")
    assert "req-m1" in worker.runtime.parked
    [parked] = _lines(stream, "ensure parked for sibling reclaim")
    assert parked["siblings"] == ["s-big"]
    assert metric_total(data, "AllocationRejection", "orgPoolExhausted") == 0
    assert metric_total(data, "SiblingReclaim", "parked") == 1


def test_a_parked_ensure_whose_recorded_top_up_landed_says_it_was_served_after_reclaim(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an ensure this container parked, whose later delivery recorded its top-up's intent
    # and topped the child up before its store failed
    target = Totals(projects=1, prompts=200)
    ledger = InMemoryRequestLedger()
    ledger.entries["req-m1"] = intent_entry("req-m1", "c1", "ensure", FULL, target)
    worker = new_worker(family_gateway(("c1", target, FULL)))
    worker.runtime.ledger = ledger
    worker.runtime.parked.add("req-m1")

    # When it comes back
    response = worker.invoke(ensure_record("m1", "c1", 100, receive_count=3))

    # Then nothing moves again and its one outcome says what the top-up did, after reclaim
    _, data = read_emf(capsys)
    assert failed_ids(response) == []
    assert worker.gateway.transfers == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.coalesced) == ("topped-up-after-reclaim", 1)
    assert (outcome.totals_before, outcome.totals_after) == (FULL, target)
    assert metric_total(data, "SiblingReclaim", "served") == 1
    assert "req-m1" not in worker.runtime.parked


def test_a_record_sent_after_the_workers_clock_reads_reports_no_negative_queue_lag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a record stamped 5 s after the worker's wall clock (clocks drift apart)
    worker = _worker()
    record = ensure_record("m1", "c1", 0)
    record["attributes"]["SentTimestamp"] = str(SENT_MS + QUEUE_LAG_MS + 5_000)

    # When it is handled / Then its queue lag is floored at zero, not below nor above
    worker.invoke(record)
    _, data = read_emf(capsys)
    assert [d.values for d in data if d.name == "QueueLagMs"] == [(0.0,)]


def test_a_release_settles_under_the_configured_polls() -> None:
    # Given three settle polls configured, and a child whose status never settles
    worker = new_worker(family_gateway(("c1", FULL, FULL)), SETTLE_POLL_ATTEMPTS="3")
    worker.gateway.add_child("wide", "ws-master", total=Totals(projects=3, prompts=400))
    worker.gateway.script_statuses("wide", ["transferring"] * 10)

    # When a release runs / Then it polls three times, then fails for a retry
    response = worker.invoke(release_record("m1", "wide"))
    assert failed_ids(response) == ["m1"]
    assert len(worker.gateway.calls_of(READ_STATUS)) == 3
