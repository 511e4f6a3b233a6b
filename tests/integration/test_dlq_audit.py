"""The DLQ audit: a request whose last receive never ran our code still ends with a record."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from serenity_allocator.adapters.dynamodb_request_ledger import DynamoDbRequestLedger
from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher
from serenity_allocator.application.audit_dead_letters import audit_dead_letters
from serenity_tools.operator.dlq_audit import peek_dead_letters
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
    letters = peek_dead_letters(local_client("sqs", resources.endpoint_url), resources.dlq_url)
    report = audit_dead_letters(
        letters,
        DynamoDbRequestLedger(
            resources.ledger_table, local_client("dynamodb", resources.endpoint_url)
        ),
        OutcomePublisher(resources.bus_name, events=local_client("events", resources.endpoint_url)),
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
    assert _audit(local_resources) == 1

    # Then the provisional record is confirmed as is, and announced once
    after = ledger.get(request_id)
    assert after is not None and (after.state, after.provisional) == ("deadLettered", False)
    assert after.outcome == before.outcome
    [outcome] = outcome_capture.outcomes()
    assert (outcome["error_code"], outcome["dead_lettered"]) == ("finalReceiveUnfinished", True)
