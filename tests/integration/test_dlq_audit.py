"""The DLQ audit: a request whose last receive never ran our code still ends with a record."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from serenity_allocator.adapters.dynamodb_request_ledger import (
    DynamoDbRequestLedger,
    RequestLedgerConfig,
)
from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher
from serenity_allocator.application.allocator.audit_dead_letters import audit_dead_letters
from serenity_allocator.domain.ledger import PROVISIONAL_GRACE_S, TransferIntent
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_allocator.producer import OutcomeReader
from serenity_tools.operator import dlq_audit
from serenity_tools.operator.dlq_audit import audit_summary, peek_dead_letters
from serenity_tools.standins.resources import LocalResources, local_client
from serenity_tools.standins.simulator import SimulatorServer
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import AllocatorHarness, allocator_harness, workspace

MASTER = "ws-master"
CHILD = "ws-child-a"


@pytest.fixture
def worker(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> Iterator[AllocatorHarness]:
    overrides = {"REQUEST_LEDGER_TABLE": local_resources.ledger_table}
    with allocator_harness(local_resources, sim, overrides) as harness:
        yield harness


def _audit(resources: LocalResources) -> int:
    read = peek_dead_letters(
        local_client("sqs", resources.endpoint_url), resources.dlq_url, wait_s=0
    )
    report = audit_dead_letters(
        read.letters,
        DynamoDbRequestLedger(
            resources.ledger_table, local_client("dynamodb", resources.endpoint_url)
        ),
        OutcomePublisher(resources.bus_name, events=local_client("events", resources.endpoint_url)),
        now_s=time.time() + PROVISIONAL_GRACE_S,  # run after any receive could still write
    )
    return len(report.recorded)


def test_dlq_audit_records_a_request_whose_final_receive_never_ran(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    local_resources: LocalResources,
) -> None:
    # Given an ensure on a zombie child that failed every receive but the last, and a last
    # receive that died before the handler ran (received, never handled)
    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            workspace(CHILD, parent_id=MASTER, projects=(1, 1), prompts=(150, 200)),
        ]
    )
    sim.faults(stuck=[CHILD])
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    for _ in range(worker.resources.max_receive_count - 1):
        worker.redeliver_failed(worker.invoke())
    [last] = worker.receive()
    worker.sqs.change_message_visibility(
        QueueUrl=local_resources.queue_url, ReceiptHandle=last["ReceiptHandle"], VisibilityTimeout=0
    )
    assert worker.receive() == []  # the redrive policy moved it to the DLQ
    ledger = DynamoDbRequestLedger(
        local_resources.ledger_table, local_client("dynamodb", local_resources.endpoint_url)
    )
    # (no terminal record: only the intent each refused top-up recorded before its transfer)
    entry = ledger.get(request_id)
    assert entry is not None and (entry.state, entry.outcome) == ("intent", None)
    assert outcome_capture.outcomes() == []

    # When an operator runs the audit, twice
    recorded = _audit(local_resources)
    again = _audit(local_resources)

    # Then the request has a terminal dead letter and its service heard it once; the DLQ
    # still holds the message for triage and redrive
    assert (recorded, again) == (1, 0)
    entry = ledger.get(request_id)
    assert entry is not None and entry.state == "deadLettered" and entry.outcome is not None
    [outcome] = outcome_capture.outcomes()
    assert outcome == json.loads(entry.outcome.model_dump_json(exclude_none=True))
    assert (outcome["status"], outcome["error_code"], outcome["dead_lettered"]) == (
        "failed",
        "receivesExhausted",
        True,
    )
    [dead] = worker.drain_dlq()
    assert json.loads(dead["Body"])["request_id"] == request_id


def test_dlq_audit_leaves_alone_a_request_the_worker_already_dead_lettered(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    local_resources: LocalResources,
) -> None:
    # Given a request whose final receive ran and recorded its dead letter
    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            workspace(CHILD, parent_id=MASTER, projects=(1, 1), prompts=(150, 200)),
        ]
    )
    sim.faults(stuck=[CHILD])
    worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    for _ in range(worker.resources.max_receive_count):
        worker.redeliver_failed(worker.invoke())
    assert worker.receive() == []
    [published] = outcome_capture.outcomes()

    # When the audit runs / Then it records and announces nothing more
    assert _audit(local_resources) == 0
    assert outcome_capture.outcomes() == [published]


def test_dlq_audit_announces_the_provisional_dead_letter_of_a_crashed_final_receive(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    local_resources: LocalResources,
) -> None:
    # Given an ensure whose final receive died mid-transfer, leaving its provisional record
    from tests.integration.test_request_ledger_worker import CrashingGateway

    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            workspace(CHILD, parent_id=MASTER, projects=(1, 1), prompts=(150, 200)),
        ]
    )
    sim.faults(stuck=[CHILD])
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    for _ in range(worker.resources.max_receive_count - 1):
        worker.redeliver_failed(worker.invoke())
    worker.runtime.gateway = CrashingGateway(worker.runtime.gateway)
    [last] = worker.receive()
    with pytest.raises(SystemExit):
        worker.handle([last])
    ledger = DynamoDbRequestLedger(
        local_resources.ledger_table, local_client("dynamodb", local_resources.endpoint_url)
    )
    before = ledger.get(request_id)
    assert before is not None and before.provisional

    # When the audit runs (the message is in the DLQ once its receive has run out)
    for _pass in range(2):  # twice: moto frees the FIFO group only on a visible message
        worker.sqs.change_message_visibility(
            QueueUrl=local_resources.queue_url,
            ReceiptHandle=last["ReceiptHandle"],
            VisibilityTimeout=0,
        )
    assert worker.receive() == []
    assert _audit(local_resources) == 0

    # Then nothing is confirmed or announced: its intent says the transfer may have landed
    # (only a read of the child tells; a redrive's receive makes it)
    after = ledger.get(request_id)
    assert after is not None and after.may_have_transferred
    assert after.outcome == before.outcome
    assert outcome_capture.outcomes() == []


GROUPS = tuple(f"ws-dlq-{g}" for g in "abcd")


def _dead_body(child: str, n: int) -> str:
    return json.dumps(
        {
            "version": 1,
            "kind": "ensure",
            "request_id": f"req-{child}-{n}",
            "workspace_id": child,
            "parent_workspace_id": MASTER,
            "need": {"projects": 0, "prompts": 10},
        }
    )


def _fill_dlq(resources: LocalResources, per_group: dict[str, int]) -> None:
    """Messages as the redrive policy leaves them: the original bodies, no reason attribute."""
    sqs = local_client("sqs", resources.endpoint_url)
    for child, count in per_group.items():
        for n in range(count):
            sqs.send_message(
                QueueUrl=resources.dlq_url,
                MessageBody=_dead_body(child, n),
                MessageGroupId=child,
                MessageDeduplicationId=f"{child}-{n}",
            )


def _run(
    resources: LocalResources, *, bus: bool = True, now_s: float | None = None
) -> dict[str, Any]:
    read = peek_dead_letters(
        local_client("sqs", resources.endpoint_url), resources.dlq_url, wait_s=0
    )
    report = audit_dead_letters(
        read.letters,
        DynamoDbRequestLedger(
            resources.ledger_table, local_client("dynamodb", resources.endpoint_url)
        ),
        OutcomePublisher(resources.bus_name, events=local_client("events", resources.endpoint_url))
        if bus
        else None,
        now_s=time.time() + PROVISIONAL_GRACE_S if now_s is None else now_s,
    )
    return audit_summary(read, report)


def test_dlq_audit_reads_every_message_of_four_groups_of_six(
    local_resources: LocalResources, outcome_capture: OutcomeCapture
) -> None:
    # Given 24 requests in the DLQ, six in each of four groups: more than one receive returns,
    # and FIFO hides a group's later messages while its first ones are held
    _fill_dlq(local_resources, dict.fromkeys(GROUPS, 6))
    expected = {f"req-{child}-{n}" for child in GROUPS for n in range(6)}

    # When the audit runs, twice
    first = _run(local_resources)
    second = _run(local_resources)

    # Then the first run read all 24, recorded and announced each once, and left none unread
    assert (first["dlq_messages_read"], first["left_unread"], first["complete"]) == (24, 0, True)
    assert {r["request_id"] for r in first["recorded"]} == expected
    assert sorted(o["request_id"] for o in outcome_capture.outcomes()) == sorted(expected)
    # the second read all 24 again and announced nothing
    assert (second["dlq_messages_read"], second["already_terminal"]) == (24, 24)
    assert (second["recorded"], second["reannounced"]) == ([], [])
    assert len(outcome_capture.outcomes()) == 24
    # and the DLQ still holds every message, for triage and redrive
    sqs = local_client("sqs", local_resources.endpoint_url)
    drained = []
    while batch := sqs.receive_message(
        QueueUrl=local_resources.dlq_url, MaxNumberOfMessages=10
    ).get("Messages", []):
        drained.extend(json.loads(m["Body"])["request_id"] for m in batch)
        for m in batch:
            sqs.delete_message(QueueUrl=local_resources.dlq_url, ReceiptHandle=m["ReceiptHandle"])
    assert sorted(drained) == sorted(expected)


def test_dlq_audit_says_how_many_it_left_unread_behind_a_group_longer_than_ten(
    local_resources: LocalResources, outcome_capture: OutcomeCapture
) -> None:
    # Given a group of twelve beside a group of three
    _fill_dlq(local_resources, {GROUPS[0]: 12, GROUPS[1]: 3})

    # When the audit runs
    summary = _run(local_resources)

    # Then it read the first ten of the long group and the whole short one, and says two were
    # left unread, behind which group
    assert (summary["dlq_messages_read"], summary["left_unread"]) == (13, 2)
    assert (summary["groups_cut_at_ten"], summary["complete"]) == ([GROUPS[0]], False)
    assert len(summary["recorded"]) == 13


def test_dlq_audit_announces_once_what_an_earlier_run_without_a_bus_recorded(
    local_resources: LocalResources, outcome_capture: OutcomeCapture
) -> None:
    # Given an audit that ran without a bus (it recorded, announced nothing)
    _fill_dlq(local_resources, {GROUPS[0]: 2})
    silent = _run(local_resources, bus=False)
    assert (len(silent["recorded"]), silent["announced"]) == (2, False)
    assert outcome_capture.outcomes() == []

    # When it runs with the bus, twice
    loud = _run(local_resources)
    again = _run(local_resources)

    # Then the first re-announces the two stored records unchanged, the second nothing
    assert [r["request_id"] for r in loud["reannounced"]] == [
        f"req-{GROUPS[0]}-0",
        f"req-{GROUPS[0]}-1",
    ]
    assert (loud["recorded"], loud["announced"]) == ([], True)
    assert (again["reannounced"], again["already_terminal"]) == ([], 2)
    assert len(outcome_capture.outcomes()) == 2


def test_dlq_audit_reports_an_unreadable_record_and_an_unparseable_body_and_goes_on(
    local_resources: LocalResources, outcome_capture: OutcomeCapture
) -> None:
    # Given two requests in the DLQ, one of them with a ledger record that does not parse,
    # and a body without a reason that is not a request at all
    _fill_dlq(local_resources, {GROUPS[0]: 2})
    sqs = local_client("sqs", local_resources.endpoint_url)
    sqs.send_message(
        QueueUrl=local_resources.dlq_url,
        MessageBody="{not json",
        MessageGroupId=GROUPS[1],
        MessageDeduplicationId="garbage",
    )
    local_client("dynamodb", local_resources.endpoint_url).put_item(
        TableName=local_resources.ledger_table,
        Item={"request_id": {"S": f"req-{GROUPS[0]}-0"}, "state": {"S": "archived"}},
    )

    # When the audit runs
    summary = _run(local_resources)

    # Then the other request is recorded and announced; the two it could not act on are named
    assert [r["request_id"] for r in summary["recorded"]] == [f"req-{GROUPS[0]}-1"]
    assert summary["unreadable_records"] == {
        f"req-{GROUPS[0]}-0": "record: unreadable field(s) state"
    }
    assert len(summary["unparseable_message_ids"]) == 1
    assert (summary["invalid"], summary["complete"]) == (1, False)
    assert [o["request_id"] for o in outcome_capture.outcomes()] == [f"req-{GROUPS[0]}-1"]


def test_dlq_audit_command_prints_its_report_and_exits_nonzero_until_complete(
    local_resources: LocalResources,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a DLQ with one request
    _fill_dlq(local_resources, {GROUPS[0]: 1})
    args = argparse.Namespace(
        dlq_url=local_resources.dlq_url,
        ledger_table=local_resources.ledger_table,
        bus=local_resources.bus_name,
        limit=1000,
        wait_s=0,
    )

    # When the operator runs the command, then again after a second request arrived whose
    # ledger record does not parse
    clean = dlq_audit.run(args)
    first = json.loads(capsys.readouterr().out)
    _fill_dlq(local_resources, {GROUPS[1]: 1})
    local_client("dynamodb", local_resources.endpoint_url).put_item(
        TableName=local_resources.ledger_table,
        Item={"request_id": {"S": f"req-{GROUPS[1]}-0"}, "state": {"S": "archived"}},
    )
    broken = dlq_audit.run(args)
    second = json.loads(capsys.readouterr().out)

    # Then the first is complete (exit 0); the second names what it could not act on (exit 1)
    assert (clean, first["complete"], len(first["recorded"])) == (0, True, 1)
    assert (broken, second["complete"], second["already_terminal"]) == (1, False, 1)
    assert list(second["unreadable_records"]) == [f"req-{GROUPS[1]}-0"]


def _ledger(resources: LocalResources, now: float) -> DynamoDbRequestLedger:
    return DynamoDbRequestLedger(
        resources.ledger_table,
        local_client("dynamodb", resources.endpoint_url),
        config=RequestLedgerConfig(wall_clock=lambda: now),
    )


def _letter_to_dlq(resources: LocalResources, n: int, *, reason: str | None = None) -> str:
    body = _dead_body(CHILD, n)
    attributes = {} if reason is None else {"serenity-invalid-reason": reason}
    local_client("sqs", resources.endpoint_url).send_message(
        QueueUrl=resources.dlq_url,
        MessageBody=body,
        MessageGroupId=CHILD,
        MessageDeduplicationId=f"letter-{n}",
        MessageAttributes={
            name: {"DataType": "String", "StringValue": value} for name, value in attributes.items()
        },
    )
    return str(json.loads(body)["request_id"])


def test_dlq_audit_records_a_refusal_whose_own_store_failed(
    local_resources: LocalResources, outcome_capture: OutcomeCapture
) -> None:
    # Given refusals the worker dead-lettered with their code, whose ledger stores failed
    refused = {
        _letter_to_dlq(local_resources, 1, reason="noCredential"): "noCredential",
        _letter_to_dlq(local_resources, 2, reason="needsReauth"): "needsReauth",
    }
    invalid = _letter_to_dlq(local_resources, 3, reason="MessageGroupId: must equal workspace_id")

    # When the audit runs
    summary = _run(local_resources)

    # Then each refusal gets its own failed dead letter, stored and announced; an invalid
    # message stays the worker's
    assert summary["complete"] and summary["invalid"] == 1
    announced = {o["request_id"]: o for o in outcome_capture.outcomes()}
    assert {rid: announced[rid]["error_code"] for rid in refused} == refused
    assert all(announced[rid]["status"] == "failed" for rid in refused)
    ledger = _ledger(local_resources, time.time())
    for request_id, code in refused.items():
        entry = ledger.get(request_id)
        assert entry is not None and entry.outcome is not None
        assert (entry.state, entry.outcome.error_code) == ("deadLettered", code)
    assert ledger.get(invalid) is None


def test_dlq_audit_leaves_a_live_requests_copy_unannounced(
    local_resources: LocalResources, outcome_capture: OutcomeCapture
) -> None:
    # Given DLQ copies of requests a receive is working on right now: one between its intent
    # and its outcome, one in a final receive that has written its provisional dead letter
    now = 1_900_000_000.0
    ledger = _ledger(local_resources, now)
    applying = _letter_to_dlq(local_resources, 1)
    ledger.record_intent(
        applying,
        TransferIntent(before=Totals(prompts=150), target=Totals(prompts=380)),
        workspace_id=CHILD,
        kind="ensure",
    )
    finishing = _letter_to_dlq(local_resources, 2)
    provisional = AllocationOutcome(
        request_id=finishing,
        kind="ensure",
        workspace_id=CHILD,
        status="failed",
        error_code="finalReceiveUnfinished",
        dead_lettered=True,
    )
    ledger.store_outcome(provisional, provisional=True)

    # When the audit runs inside the grace
    summary = _run(local_resources, now_s=now + 30)

    # Then neither is recorded or announced; both are reported live (run again later)
    assert (summary["live"], summary["recorded"], summary["complete"]) == (
        sorted([applying, finishing]),
        [],
        False,
    )
    assert outcome_capture.outcomes() == []
    held = ledger.get(applying)
    assert held is not None and held.state == "intent"


def test_final_receive_whose_outcome_store_failed_is_never_reported_failed(
    local_resources: LocalResources, outcome_capture: OutcomeCapture
) -> None:
    # Given a final receive that left its provisional dead letter, recorded its top-up's
    # intent, made the transfer, and could not store the applied outcome (the ledger failed)
    written = 1_900_000_000.0
    ledger = _ledger(local_resources, written)
    request_id = _letter_to_dlq(local_resources, 1)
    ledger.store_outcome(
        AllocationOutcome(
            request_id=request_id,
            kind="ensure",
            workspace_id=CHILD,
            status="failed",
            error_code="finalReceiveUnfinished",
            dead_lettered=True,
        ),
        provisional=True,
    )
    ledger.record_intent(
        request_id,
        TransferIntent(before=Totals(prompts=150), target=Totals(prompts=380)),
        workspace_id=CHILD,
        kind="ensure",
    )
    later = written + PROVISIONAL_GRACE_S + 60

    # When the audit runs past the grace, and a service reads the outcome
    summary = _run(local_resources, now_s=later)
    reader = OutcomeReader(
        local_resources.ledger_table,
        local_client("dynamodb", local_resources.endpoint_url),
        wall_clock=lambda: later,
    )

    # Then nothing says failed: the audit reports the transfer unconfirmed (redrive: the
    # receive reads the child against the intent), the reader still sees it pending
    assert (summary["transfer_unconfirmed"], summary["recorded"], summary["complete"]) == (
        [request_id],
        [],
        False,
    )
    assert summary["unconfirmed_intents"] == {
        request_id: {
            "before": {"projects": 0, "prompts": 150},
            "target": {"projects": 0, "prompts": 380},
        }
    }
    assert outcome_capture.outcomes() == []
    assert reader.get_outcome(request_id, workspace_id=CHILD, kind="ensure") is None
    entry = ledger.get(request_id)
    assert entry is not None and (entry.state, entry.provisional) == ("deadLettered", True)
