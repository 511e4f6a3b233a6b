"""The worker with its request ledger, parent check and duplicate handling (moto + simulator).

Each test reproduces a finding: a replay applied or announced differently, a release under-
reported after a partial application, a trusted foreign parent, a request id applied twice in
one batch, a request that ends in the DLQ without an outcome.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from serenity_allocator.adapters.dynamodb_request_ledger import DynamoDbRequestLedger
from serenity_allocator.adapters.sqs import REASON_ATTRIBUTE
from serenity_allocator.domain.container_memory import InFlightUnits
from serenity_allocator.domain.ledger import LedgerUnavailableError
from serenity_allocator.domain.model import AiResources, Totals
from serenity_allocator.domain.ports import WorkspaceGateway
from serenity_allocator.producer import OutcomeReader
from serenity_tools.standins.resources import LocalResources, local_client
from serenity_tools.standins.simulator import SimulatorServer
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import (
    AllocatorHarness,
    allocator_harness,
    api_calls,
    emf_blobs,
    metric_values,
    totals_of,
    transfer_bodies,
    workspace,
)

MASTER = "ws-master"
FOREIGN_MASTER = "ws-foreign-master"
CHILD = "ws-child-a"
SIBLING = "ws-child-b"
POOL = (100, 10_000)


@pytest.fixture
def worker(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> Iterator[AllocatorHarness]:
    """The worker with the ledger table of the local stack."""
    overrides = {"REQUEST_LEDGER_TABLE": local_resources.ledger_table}
    with allocator_harness(local_resources, sim, overrides) as harness:
        yield harness


@pytest.fixture
def ledger(local_resources: LocalResources) -> DynamoDbRequestLedger:
    client = local_client("dynamodb", local_resources.endpoint_url)
    return DynamoDbRequestLedger(local_resources.ledger_table, client)


def _seed(sim: SimulatorServer, *children: dict[str, Any]) -> None:
    sim.seed(
        [
            workspace(MASTER, projects=(0, POOL[0]), prompts=(0, POOL[1])),
            {
                **workspace(FOREIGN_MASTER, projects=(0, 50), prompts=(0, 5000)),
                "limits_enabled": False,
            },
            *children,
        ]
    )


def _child(workspace_id: str = CHILD, *, prompts: tuple[int, int]) -> dict[str, Any]:
    return workspace(workspace_id, parent_id=MASTER, projects=(1, 1), prompts=prompts)


class FailingOutcomeSink:
    """An outcome bus that refuses every publish (PutEvents failing after the work was done)."""

    def publish(self, outcomes: Any) -> None:
        raise ConnectionError("outcome bus unreachable")

    def publish_pool_low(self, detail: Any) -> None:
        raise ConnectionError("outcome bus unreachable")


def _apply_without_publishing(worker: AllocatorHarness) -> Any:
    real = worker.runtime.outcomes
    worker.runtime.outcomes = FailingOutcomeSink()
    try:
        invocation = worker.invoke()
    finally:
        worker.runtime.outcomes = real
    assert invocation.failed == invocation.message_ids
    worker.redeliver_failed(invocation)
    return invocation


def _dims(event: str) -> dict[str, str]:
    return {"Environment": "integration", "Event": event, "service": "serenity-allocator"}


def _ledger_outcome(ledger: DynamoDbRequestLedger, request_id: str) -> dict[str, Any]:
    entry = ledger.get(request_id)
    assert entry is not None and entry.outcome is not None
    stored: dict[str, Any] = json.loads(entry.outcome.model_dump_json(exclude_none=True))
    return stored


# ---------------------------------------------------------------- replays


def test_worker_release_replayed_after_a_failed_publish_reports_the_true_release(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a child holding 500 prompts of which 100 are used, and an outcome bus that fails
    _seed(sim, _child(prompts=(100, 500)))
    request_id = worker.producer.enqueue_release(CHILD)

    # When the release transfers but its outcome cannot be published (the record fails)
    _apply_without_publishing(worker)
    assert totals_of(sim)[CHILD] == (1, 100)
    assert ledger.get(request_id).intent is not None  # type: ignore[union-attr]

    # And SQS redelivers it to a worker whose bus works
    second = worker.invoke()

    # Then the replay reports what the first delivery did: released 500 -> 100, one transfer
    assert second.failed == []
    assert transfer_bodies(sim) == [(CHILD, 200, {"projects": 1, "prompts": 100})]
    [outcome] = outcome_capture.outcomes()
    assert (outcome["request_id"], outcome["status"]) == (request_id, "released")
    assert outcome["totals_before"] == {"projects": 1, "prompts": 500}
    assert outcome["totals_after"] == {"projects": 1, "prompts": 100}
    assert _ledger_outcome(ledger, request_id) == outcome


def test_worker_replayed_ensure_is_not_applied_again_and_announces_the_stored_outcome(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an ensure that topped the child up, whose outcome is stored but was not published
    _seed(sim, _child(prompts=(150, 200)))
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    _apply_without_publishing(worker)
    stored = _ledger_outcome(ledger, request_id)
    calls_after_first = len(api_calls(sim))

    # When SQS redelivers it
    second = worker.invoke()

    # Then nothing is read or moved again (the one transfer is the first delivery's: 380 plus
    # four blocks, 780, and the used project refilled ahead to 1 + 4 = 5) and the outcome
    # published is the stored one, as is
    assert second.failed == []
    assert len(api_calls(sim)) == calls_after_first
    assert transfer_bodies(sim) == [(CHILD, 200, {"projects": 5, "prompts": 780})]
    [outcome] = outcome_capture.outcomes()
    assert outcome == stored
    assert (outcome["status"], outcome["receive_count"]) == ("topped-up", 1)
    # And the replay is counted as one (RequestLedger{Event=replayed})
    blobs = emf_blobs(capsys.readouterr().out)
    assert metric_values(blobs, "RequestLedger") == [(1.0, _dims("replayed"))]


def test_worker_without_a_ledger_table_applies_a_replay_again(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given the worker with no ledger (REQUEST_LEDGER_TABLE unset: the documented opt-out)
    with allocator_harness(local_resources, sim) as worker:
        _seed(sim, _child(prompts=(100, 500)))
        worker.producer.enqueue_release(CHILD)

        # When a release's publish fails and it is redelivered
        _apply_without_publishing(worker)
        worker.invoke()

    # Then the replay re-plans from the lowered child (what the ledger exists to prevent)
    [outcome] = outcome_capture.outcomes()
    assert outcome["status"] == "nothing-to-release"


def test_worker_replayed_ensure_joins_no_run_and_the_next_ensure_of_its_child_is_applied(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given an ensure that topped the child up (stored final) whose outcome was not published
    # (no units counted on their way between requests: this is about runs, not concurrency)
    worker.runtime.in_flight = InFlightUnits(worker.runtime.clock, window_s=0)
    _seed(sim, _child(prompts=(150, 200)))
    first_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    _apply_without_publishing(worker)

    # When it comes back in one batch with a fresh ensure of the same child behind it
    second_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 500})
    second = worker.invoke()

    # Then the replay is announced as stored (its 380 plus four blocks: 780) and the fresh
    # ensure is applied on its own for its own need (150 used + 500 = 650 fits in 780 but
    # leaves 130, under the 500 it asked: refilled to 650 plus the 500 asked, 1150), not as a
    # member of a run led by the replay (150 + 230 + 500 = 880, plus 730: 1610)
    assert len(second.message_ids) == 2
    assert second.failed == []
    assert transfer_bodies(sim) == [
        (CHILD, 200, {"projects": 5, "prompts": 780}),
        (CHILD, 200, {"projects": 5, "prompts": 1150}),
    ]
    by_id = {o["request_id"]: o for o in outcome_capture.outcomes()}
    assert (by_id[first_id]["status"], by_id[first_id]["receive_count"]) == ("topped-up", 1)
    fresh = by_id[second_id]
    assert (fresh["status"], fresh["coalesced"]) == ("topped-up", 1)
    assert (fresh["totals_before"], fresh["totals_after"]) == (
        {"projects": 5, "prompts": 780},
        {"projects": 5, "prompts": 1150},
    )
    assert _ledger_outcome(ledger, second_id) == fresh


# ---------------------------------------------------------------- one request, two records


def test_worker_applies_a_request_id_repeated_in_one_batch_once_with_one_outcome(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given two 300-prompt ensures with one request id, sent as two messages (distinct dedup ids)
    _seed(sim, _child(prompts=(100, 100)))
    body = json.dumps(
        {
            "kind": "ensure",
            "request_id": "req-twice",
            "workspace_id": CHILD,
            "parent_workspace_id": MASTER,
            "need": {"projects": 0, "prompts": 300},
        }
    )
    worker.send_raw(body, group_id=CHILD, dedup_id="copy-1")
    worker.send_raw(body, group_id=CHILD, dedup_id="copy-2")

    # When one batch holds both
    invocation = worker.invoke()

    # Then the child rises for ONE need of 300 (100 used + 300 = 400, plus four blocks, more
    # than the 300 asked: 800; the used project refilled ahead to 1 + 4 = 5), with one outcome
    assert len(invocation.message_ids) == 2
    assert invocation.failed == []
    assert transfer_bodies(sim) == [(CHILD, 200, {"projects": 5, "prompts": 800})]
    outcomes = outcome_capture.outcomes()
    assert [(o["request_id"], o["status"], o["coalesced"]) for o in outcomes] == [
        ("req-twice", "topped-up", 1)
    ]


# ---------------------------------------------------------------- parent check


def test_worker_refuses_an_ensure_naming_a_foreign_parent(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a short child of MASTER, sibling reclaim on, and an ensure naming another org's
    # unmetered master as its parent
    overrides = {
        "REQUEST_LEDGER_TABLE": local_resources.ledger_table,
        "SERENITY_SIBLING_RECLAIM": "true",
    }
    _seed(sim, _child(prompts=(100, 100)), _child(SIBLING, prompts=(0, 900)))
    with allocator_harness(local_resources, sim, overrides) as worker:
        request_id = worker.producer.enqueue_ensure(
            CHILD, FOREIGN_MASTER, {"projects": 0, "prompts": 300}
        )

        # When the worker handles it
        invocation = worker.invoke()
        dead = worker.drain_dlq()
        queued_after = worker.receive()

    # Then it is invalid: to the DLQ with reason parentMismatch, no transfer, no reclaim,
    # no unmetered shortcut, and the service hears back with an invalid outcome
    assert invocation.failed == []
    assert transfer_bodies(sim) == []
    assert [m["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"] for m in dead] == [
        "parentMismatch: parent_workspace_id is not the parent of workspace_id"
    ]
    assert queued_after == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["request_id"], outcome["status"], outcome["error_code"]) == (
        request_id,
        "invalid",
        "parentMismatch",
    )
    assert outcome["dead_lettered"] is True
    assert _ledger_outcome(ledger, request_id) == outcome


def test_worker_gives_every_refused_body_with_a_readable_request_id_an_invalid_outcome(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given three schema-valid bodies broken across fields (the child as its own parent, a
    # foreign group id) or in one field (a fractional need), and one with no readable id
    _seed(sim, _child(prompts=(100, 100)))
    own_parent = {"kind": "ensure", "request_id": "req-own-parent", "workspace_id": CHILD,
                  "parent_workspace_id": CHILD}  # fmt: skip
    foreign_group = {"kind": "release", "request_id": "req-foreign-group", "workspace_id": CHILD}
    fractional = {"kind": "ensure", "request_id": "req-fraction", "workspace_id": CHILD,
                  "parent_workspace_id": MASTER, "need": {"prompts": 2.5}}  # fmt: skip
    unreadable = {"kind": "release", "request_id": "req with a space", "workspace_id": CHILD}
    worker.send_raw(json.dumps(own_parent), group_id=CHILD, dedup_id="d-1")
    worker.send_raw(json.dumps(foreign_group), group_id=SIBLING, dedup_id="d-2")
    worker.send_raw(json.dumps(fractional), group_id=CHILD, dedup_id="d-3")
    worker.send_raw(json.dumps(unreadable), group_id=CHILD, dedup_id="d-4")

    # When the worker handles them
    invocation = worker.invoke()
    dead = worker.drain_dlq()

    # Then all four are dead-lettered with their reason, nothing is transferred, and each
    # readable request id has one invalid outcome, stored under the id sent and announced
    assert invocation.failed == []
    assert transfer_bodies(sim) == []
    assert sorted(m["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"] for m in dead) == [
        "MessageGroupId: must equal workspace_id",
        "need.prompts: Input should be a valid integer",
        "parent_workspace_id: must differ from workspace_id",
        "request_id: String should match pattern '^[!-~]{1,128}$'",
    ]
    announced = {o["request_id"]: o for o in outcome_capture.outcomes()}
    assert sorted(announced) == ["req-foreign-group", "req-fraction", "req-own-parent"]
    for request_id, outcome in announced.items():
        assert (outcome["status"], outcome["error_code"], outcome["dead_lettered"]) == (
            "invalid",
            "invalidMessage",
            True,
        )
        assert outcome["workspace_id"] == CHILD
        assert _ledger_outcome(ledger, request_id) == outcome
    assert ledger.get("req with a space") is None


def test_worker_parent_mismatch_delivered_again_after_a_crash_before_the_delete_is_replayed(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given an ensure naming a foreign parent: dead-lettered parentMismatch, stored, published,
    # its record completed, and the consumer died before the delete
    _seed(sim, _child(prompts=(100, 100)))
    request_id = worker.producer.enqueue_ensure(
        CHILD, FOREIGN_MASTER, {"projects": 0, "prompts": 300}
    )
    first = worker.die_before_the_delete()
    record = ledger.get(request_id)

    # When SQS delivers the same message again
    second = worker.invoke()
    record_after_replay = ledger.get(request_id)
    dead_letters = worker.drain_dlq()

    # Then the stored outcome is published again, identical; one DLQ copy; the ledger as it was
    assert first.failed == second.failed == []
    assert (second.message_ids, second.receive_counts()) == (first.message_ids, [2])
    [refused, replayed] = outcome_capture.outcomes()
    assert replayed == refused
    assert (refused["status"], refused["error_code"]) == ("invalid", "parentMismatch")
    assert [m["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"] for m in dead_letters] == [
        "parentMismatch: parent_workspace_id is not the parent of workspace_id"
    ]
    assert record is not None and record.source_message_id == first.message_ids[0]
    assert record_after_replay == record

    # And a redrive of the DLQ copy (a new message) is applied again: refused again, its own
    # dead letter, the record now bound to the redriven message
    redriven_id = worker.send_raw(dead_letters[0]["Body"], group_id=CHILD, dedup_id="redrive-1")
    redrive = worker.invoke()
    assert redrive.failed == []
    assert len(worker.drain_dlq()) == 1
    assert outcome_capture.outcomes()[-1]["receive_count"] == 1
    assert ledger.get(request_id).source_message_id == redriven_id  # type: ignore[union-attr]
    assert transfer_bodies(sim) == []


def test_worker_invalid_message_delivered_again_after_a_crash_before_the_delete_is_replayed(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a message in another child's group (invalid, its request id readable): dead-
    # lettered, its invalid outcome stored and published, and the consumer died before the
    # delete
    _seed(sim, _child(prompts=(100, 100)))
    body = {"kind": "release", "request_id": "req-foreign-group", "workspace_id": CHILD}
    message_id = worker.send_raw(json.dumps(body), group_id=SIBLING, dedup_id="d-1")
    first = worker.die_before_the_delete()
    record = ledger.get("req-foreign-group")

    # When SQS delivers the same message again
    second = worker.invoke()

    # Then its invalid outcome is published again as stored: one content, one DLQ copy, the
    # ledger untouched
    assert first.failed == second.failed == []
    assert (second.message_ids, second.receive_counts()) == ([message_id], [2])
    [invalid, replayed] = outcome_capture.outcomes()
    assert replayed == invalid
    assert (invalid["status"], invalid["receive_count"]) == ("invalid", 1)
    assert [
        m["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"] for m in worker.drain_dlq()
    ] == ["MessageGroupId: must equal workspace_id"]
    assert record is not None and record.source_message_id == message_id
    assert ledger.get("req-foreign-group") == record
    assert worker.receive() == []


def test_worker_checks_a_parent_once_per_container(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given two top-ups of one child in two invocations of one warm container
    _seed(sim, _child(prompts=(100, 100)))
    worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 100})
    worker.invoke()
    worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 300})

    # When the second is handled
    worker.invoke()

    # Then the family was listed once (the first time), and both were topped up
    assert [c["workspace_id"] for c in api_calls(sim, "family")] == [MASTER]
    assert [o["status"] for o in outcome_capture.outcomes()] == ["topped-up", "topped-up"]


# ---------------------------------------------------------------- the DLQ


def _run_to_the_dlq(worker: AllocatorHarness) -> None:
    for invocation in worker.redeliver_each(worker.resources.max_receive_count):
        assert invocation.failed == invocation.message_ids
    assert worker.receive() == []  # the next receive moved it to the DLQ


def test_worker_dead_letters_a_request_with_a_terminal_record_and_a_redrive_supersedes_it(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a zombie child whose ensure fails on every receive until the DLQ
    _seed(sim, _child(prompts=(150, 200)))
    sim.faults(stuck=[CHILD])
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    _run_to_the_dlq(worker)

    # Then its terminal record and its outcome say dead-lettered, and the DLQ still holds it
    [dead_outcome] = outcome_capture.outcomes()
    assert (dead_outcome["status"], dead_outcome["error_code"]) == ("rejected", "workspaceBusy")
    assert dead_outcome["dead_lettered"] is True
    entry = ledger.get(request_id)
    assert entry is not None and (entry.state, entry.provisional) == ("deadLettered", False)
    assert _ledger_outcome(ledger, request_id) == dead_outcome
    [dead] = worker.drain_dlq()

    # When the child recovers and an operator redrives the message
    sim.faults(stuck=[])
    worker.send_raw(dead["Body"], group_id=CHILD, dedup_id="redrive-1")
    worker.invoke()

    # Then it is applied and its outcome supersedes the dead letter, explicitly
    redriven = outcome_capture.outcomes()[-1]
    assert (redriven["status"], redriven["supersedes"]) == ("topped-up", "deadLettered")
    assert "dead_lettered" not in redriven
    assert ledger.get(request_id).state == "final"  # type: ignore[union-attr]
    assert _ledger_outcome(ledger, request_id) == redriven


class CrashingGateway:
    """The real gateway, except that a transfer kills the process (no except clause runs)."""

    def __init__(self, inner: WorkspaceGateway) -> None:
        self._inner = inner

    def read_resources(self, workspace_id: str) -> AiResources:
        return self._inner.read_resources(workspace_id)

    def transfer(self, workspace_id: str, totals: Totals) -> None:
        raise SystemExit("container killed mid-transfer")

    def read_status(self, workspace_id: str) -> str:
        return self._inner.read_status(workspace_id)

    def list_family(self, parent_id: str) -> Any:
        return self._inner.list_family(parent_id)


def test_worker_final_receive_that_crashes_still_leaves_a_dead_lettered_record(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    local_resources: LocalResources,
) -> None:
    # Given an ensure that failed on every receive but the last (a zombie child)
    _seed(sim, _child(prompts=(150, 200)))
    sim.faults(stuck=[CHILD])
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    worker.redeliver_each(worker.resources.max_receive_count - 1)

    # When the container dies during the final receive (nothing after the transfer runs)
    worker.runtime.gateway = CrashingGateway(worker.runtime.gateway)
    with pytest.raises(SystemExit):
        worker.invoke()

    # Then no outcome event went out; the ledger holds the provisional dead letter (a terminal
    # record), but beside the intent of a transfer that may have landed it is no proof of
    # failure: a reader keeps it pending (a redrive's receive reads the child and tells)
    assert outcome_capture.outcomes() == []
    client = local_client("dynamodb", local_resources.endpoint_url)
    entry = DynamoDbRequestLedger(local_resources.ledger_table, client).get(request_id)
    assert entry is not None and entry.outcome is not None
    assert (entry.state, entry.outcome.error_code, entry.may_have_transferred) == (
        "deadLettered",
        "finalReceiveUnfinished",
        True,
    )
    reader = OutcomeReader(local_resources.ledger_table, client, wall_clock=lambda: 4e9)
    assert reader.get_outcome(request_id) is None


# ---------------------------------------------------------------- a release's final receive


def _release_failing_until_its_final_receive(
    worker: AllocatorHarness, sim: SimulatorServer, ledger: DynamoDbRequestLedger
) -> str:
    """A release whose intent is recorded and whose transfer fails on every earlier receive."""
    _seed(sim, _child(prompts=(100, 500)))
    sim.faults(fail_next=[{"status": 503, "count": 1_000, "op": "transfer"}])
    request_id = worker.producer.enqueue_release(CHILD)
    for invocation in worker.redeliver_each(worker.resources.max_receive_count - 1):
        assert invocation.failed == invocation.message_ids
    entry = ledger.get(request_id)
    assert entry is not None and entry.state == "intent"
    assert totals_of(sim)[CHILD] == (1, 500)
    sim.faults(fail_next=[])
    return request_id


def test_worker_release_recovering_on_its_final_receive_records_its_intent_and_releases(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a release with a recorded intent whose transfer failed (503) on every receive but
    # the last, and an upstream that has recovered
    request_id = _release_failing_until_its_final_receive(worker, sim, ledger)

    # When its final receive runs (a provisional dead letter is written first)
    final = worker.invoke()

    # Then the intent is recorded over the provisional dead letter (no ledger conflict), the
    # release transfers once, and its one terminal record and one outcome say released 500->100
    assert final.receive_counts() == [worker.resources.max_receive_count]
    assert (final.failed, final.exceptions) == ([], [])
    landed = [body for body in transfer_bodies(sim) if body[1] == 200]
    assert landed == [(CHILD, 200, {"projects": 1, "prompts": 100})]
    [outcome] = outcome_capture.outcomes()
    assert (outcome["request_id"], outcome["status"]) == (request_id, "released")
    assert outcome["totals_before"] == {"projects": 1, "prompts": 500}
    assert outcome["totals_after"] == {"projects": 1, "prompts": 100}
    assert "dead_lettered" not in outcome
    entry = ledger.get(request_id)
    assert entry is not None and (entry.state, entry.provisional) == ("final", False)
    assert _ledger_outcome(ledger, request_id) == outcome
    assert worker.drain_dlq() == []


class TransferThenCrashGateway(CrashingGateway):
    """The real gateway, except that the process dies right after a transfer lands."""

    def transfer(self, workspace_id: str, totals: Totals) -> None:
        self._inner.transfer(workspace_id, totals)
        raise SystemExit("container killed after the transfer")


def test_worker_release_whose_final_receive_crashed_after_transferring_is_redriven_truthfully(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a release with a recorded intent whose transfer failed on every receive but the last
    request_id = _release_failing_until_its_final_receive(worker, sim, ledger)

    # When its final receive transfers and the container dies before anything else runs
    real_gateway = worker.runtime.gateway
    worker.runtime.gateway = TransferThenCrashGateway(real_gateway)
    [message] = worker.receive()
    with pytest.raises(SystemExit):
        worker.handle([message])
    worker.runtime.gateway = real_gateway

    # Then the transfer landed, no outcome went out, and the ledger holds the provisional dead
    # letter (with the intent) that stands for the message SQS moves to the DLQ
    assert totals_of(sim)[CHILD] == (1, 100)
    assert outcome_capture.outcomes() == []
    crashed = ledger.get(request_id)
    assert crashed is not None and (crashed.state, crashed.provisional) == ("deadLettered", True)
    assert crashed.intent is not None

    # When its visibility timeout ends, SQS moves it to the DLQ, and an operator redrives it
    worker.sqs.change_message_visibility(
        QueueUrl=worker.resources.queue_url,
        ReceiptHandle=message["ReceiptHandle"],
        VisibilityTimeout=0,
    )
    worker.redrive_from_the_dlq(group_id=CHILD, dedup_id="redrive-after-crash")
    redriven = worker.invoke()

    # Then it is not transferred again and its one terminal record and one outcome tell the
    # truth: released 500 -> 100, superseding the dead letter readers saw
    assert redriven.failed == []
    landed = [body for body in transfer_bodies(sim) if body[1] == 200]
    assert landed == [(CHILD, 200, {"projects": 1, "prompts": 100})]
    [outcome] = outcome_capture.outcomes()
    assert (outcome["status"], outcome["supersedes"]) == ("released", "deadLettered")
    assert outcome["totals_before"] == {"projects": 1, "prompts": 500}
    assert outcome["totals_after"] == {"projects": 1, "prompts": 100}
    entry = ledger.get(request_id)
    assert entry is not None and (entry.state, entry.provisional) == ("final", False)
    assert _ledger_outcome(ledger, request_id) == outcome


def _put_raw(resources: LocalResources, item: dict[str, Any]) -> None:
    local_client("dynamodb", resources.endpoint_url).put_item(
        TableName=resources.ledger_table, Item=item
    )


def _final_item(request_id: str, outcome: dict[str, Any], **attributes: Any) -> dict[str, Any]:
    return {
        "request_id": {"S": request_id},
        "state": {"S": "final"},
        "workspace_id": {"S": CHILD},
        "kind": {"S": "ensure"},
        "outcome": {"S": json.dumps(outcome)},
        **attributes,
    }


def test_worker_replays_a_record_of_a_newer_version_and_fails_a_tampered_one_alone(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    local_resources: LocalResources,
) -> None:
    # Given two ensures of one child whose ledger records were written elsewhere: one by a
    # newer version (a higher schema version, fields this version does not know), one
    # tampered (its stored outcome names another workspace)
    _seed(sim, _child(prompts=(150, 200)))
    newer_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 10})
    tampered_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 20})
    known = {
        "kind": "ensure",
        "workspace_id": CHILD,
        "status": "hot-path",
        "totals_before": {"projects": 1, "prompts": 200},
        "totals_after": {"projects": 1, "prompts": 200},
        "receive_count": 1,
    }
    _put_raw(
        local_resources,
        _final_item(
            newer_id,
            {**known, "request_id": newer_id, "latency_class": "fast"},
            schema_version={"N": "3"},
            shard={"S": "a"},
        ),
    )
    _put_raw(
        local_resources,
        _final_item(tampered_id, {**known, "request_id": tampered_id, "workspace_id": SIBLING}),
    )

    # When both are delivered in one batch
    invocation = worker.invoke()

    # Then the newer record is replayed with the fields this version knows, nothing applied;
    # the tampered one fails alone, named by its field, never replayed
    [_, second] = [m["messageId"] for m in invocation.event["Records"]]
    assert invocation.failed == [second]
    assert [o["request_id"] for o in outcome_capture.outcomes()] == [newer_id]
    assert outcome_capture.outcomes()[0]["status"] == "hot-path"
    assert "latency_class" not in outcome_capture.outcomes()[0]
    assert transfer_bodies(sim) == []
    assert any(
        "LedgerRecordUnreadableError" in text
        and "record: unreadable field(s) outcome.workspace_id" in text
        for text in invocation.exceptions
    )


# ------------------------------------------------------- a store failing after the transfer


class StoreFailsOnce:
    """The real ledger, except that its next terminal store fails (DynamoDB throttling it)."""

    def __init__(self, inner: DynamoDbRequestLedger) -> None:
        self._inner = inner
        self.failing_stores = 1

    def store_outcome(
        self,
        outcome: Any,
        *,
        dead_lettered: bool = False,
        provisional: bool = False,
        source_message_id: str | None = None,
    ) -> Any:
        if not provisional and self.failing_stores > 0:
            self.failing_stores -= 1
            raise LedgerUnavailableError("ProvisionedThroughputExceededException")
        return self._inner.store_outcome(
            outcome,
            dead_lettered=dead_lettered,
            provisional=provisional,
            source_message_id=source_message_id,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize("failed_receives", [0, 2, 4], ids=["first", "middle", "final"])
def test_worker_ensure_whose_store_failed_after_its_transfer_is_later_reported_truthfully(
    failed_receives: int,
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given an ensure of a 150/200 child that failed on its earlier receives (a stuck child)
    final = failed_receives == worker.resources.max_receive_count - 1
    _seed(sim, _child(prompts=(150, 200)))
    sim.faults(stuck=[CHILD] if failed_receives else [])
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    worker.redeliver_each(failed_receives)
    sim.faults(stuck=[])

    # When this receive tops the child up (380 plus four blocks: 780, the used project refilled
    # ahead to 1 + 4 = 5) and then cannot store the outcome (a final receive stores it a second
    # time: that fails too here)
    real_ledger = worker.runtime.ledger
    failing = StoreFailsOnce(ledger)
    failing.failing_stores = 2 if final else 1
    worker.runtime.ledger = failing  # type: ignore[assignment]
    applied = worker.invoke()
    worker.runtime.ledger = real_ledger

    # Then the record fails with nothing announced, and the ledger holds the top-up's intent
    assert applied.failed == applied.message_ids
    assert applied.receive_counts() == [failed_receives + 1]
    assert totals_of(sim)[CHILD] == (5, 780)
    assert outcome_capture.outcomes() == []
    entry = ledger.get(request_id)
    assert entry is not None and entry.intent is not None
    assert (entry.intent.before, entry.intent.target) == (
        Totals(projects=1, prompts=200),
        Totals(projects=5, prompts=780),
    )

    # When it comes back: redelivered, or redriven from the DLQ after its final receive
    worker.redeliver_failed(applied)
    if final:
        worker.redrive_from_the_dlq(group_id=CHILD, dedup_id="redrive-after-store-failure")
    later = worker.invoke()

    # Then it is not transferred again and says what it did: topped up 200 -> 780
    assert later.failed == []
    landed = [body for body in transfer_bodies(sim) if body[1] == 200]
    assert landed == [(CHILD, 200, {"projects": 5, "prompts": 780})]
    [outcome] = outcome_capture.outcomes()
    assert (outcome["request_id"], outcome["status"]) == (request_id, "topped-up")
    assert outcome["totals_before"] == {"projects": 1, "prompts": 200}
    assert outcome["totals_after"] == {"projects": 5, "prompts": 780}
    assert outcome.get("supersedes") == ("deadLettered" if final else None)
    assert _ledger_outcome(ledger, request_id) == outcome
