"""A service waits for its request's outcome by reading the ledger (moto server, injected time)."""

from __future__ import annotations

from typing import Any

import pytest

from serenity_allocator.adapters.dynamodb_request_ledger import (
    DynamoDbRequestLedger,
    RequestLedgerConfig,
)
from serenity_allocator.domain.ledger import TransferIntent
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_allocator.producer import OutcomeReader, OutcomeWaitTimeoutError
from serenity_tools.standins.resources import LocalResources, local_client

WRITTEN_AT = 1_800_000_000.0


class FakeTime:
    """A monotonic clock that only moves when the reader sleeps; runs a hook on each sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep: Any = None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))


def _outcome(**fields: Any) -> AllocationOutcome:
    values: dict[str, Any] = {
        "request_id": "req-1",
        "kind": "ensure",
        "workspace_id": "child-1",
        "status": "topped-up",
        "totals_before": Totals(projects=1, prompts=100),
        "totals_after": Totals(projects=1, prompts=400),
        "receive_count": 1,
    }
    values.update(fields)
    return AllocationOutcome(**values)


@pytest.fixture
def dynamodb(local_resources: LocalResources) -> Any:
    return local_client("dynamodb", local_resources.endpoint_url)


@pytest.fixture
def writer(local_resources: LocalResources, dynamodb: Any) -> DynamoDbRequestLedger:
    return DynamoDbRequestLedger(
        local_resources.ledger_table,
        dynamodb,
        config=RequestLedgerConfig(wall_clock=lambda: WRITTEN_AT),
    )


def _reader(
    local_resources: LocalResources, dynamodb: Any, time: FakeTime, wall: float = WRITTEN_AT
) -> OutcomeReader:
    return OutcomeReader(
        local_resources.ledger_table,
        dynamodb,
        clock=time.clock,
        sleep=time.sleep,
        wall_clock=lambda: wall,
    )


def test_get_outcome_is_none_while_pending_and_the_outcome_once_stored(
    local_resources: LocalResources, dynamodb: Any, writer: DynamoDbRequestLedger
) -> None:
    # Given a reader and a request the worker has not finished (unknown, then a bare intent)
    reader = _reader(local_resources, dynamodb, FakeTime())
    assert reader.get_outcome("req-1") is None
    writer.record_intent(
        "req-1",
        TransferIntent(before=Totals(prompts=500), target=Totals(prompts=100)),
        workspace_id="child-1",
    )
    assert reader.get_outcome("req-1") is None

    # When the worker stores the terminal outcome / Then the reader sees exactly it
    released = _outcome(kind="release", status="released")
    writer.store_outcome(released)
    assert reader.get_outcome("req-1") == released


def test_wait_for_outcome_backs_off_until_the_worker_stores_it(
    local_resources: LocalResources, dynamodb: Any, writer: DynamoDbRequestLedger
) -> None:
    # Given a worker that stores the outcome during the reader's third sleep
    time = FakeTime()
    time.on_sleep = lambda n: writer.store_outcome(_outcome()) if n == 3 else None
    reader = _reader(local_resources, dynamodb, time)

    # When the service waits up to 30 s
    outcome = reader.wait_for_outcome("req-1", 30)

    # Then it gets the outcome after doubling delays, without a real sleep
    assert outcome == _outcome()
    assert time.sleeps == [0.2, 0.4, 0.8]


def test_wait_for_outcome_times_out_without_sleeping_past_the_deadline(
    local_resources: LocalResources, dynamodb: Any
) -> None:
    # Given a request that never completes
    time = FakeTime()
    reader = _reader(local_resources, dynamodb, time)

    # When the service waits 5 s / Then it is told so, after sleeping exactly 5 s in total
    with pytest.raises(OutcomeWaitTimeoutError) as raised:
        reader.wait_for_outcome("req-1", 5)
    assert raised.value.request_id == "req-1"
    assert time.sleeps == [0.2, 0.4, 0.8, 1.6, 2.0]
    assert sum(time.sleeps) == pytest.approx(5.0)


def test_get_outcome_holds_back_a_provisional_dead_letter_until_its_receive_cannot_finish(
    local_resources: LocalResources, dynamodb: Any, writer: DynamoDbRequestLedger
) -> None:
    # Given a provisional dead letter written as a final receive began
    dead = _outcome(status="failed", error_code="finalReceiveUnfinished", dead_lettered=True)
    writer.store_outcome(dead, provisional=True)

    # When read while that receive may still finish / Then it is pending
    assert (
        _reader(local_resources, dynamodb, FakeTime(), WRITTEN_AT + 60).get_outcome("req-1") is None
    )

    # When read after three function timeouts / Then the dead letter stands
    late = _reader(local_resources, dynamodb, FakeTime(), WRITTEN_AT + 180)
    assert late.get_outcome("req-1") == dead


def test_a_reused_request_id_never_gets_the_other_requests_outcome(
    local_resources: LocalResources, dynamodb: Any, writer: DynamoDbRequestLedger
) -> None:
    # Given the id's record is another child's final outcome (totals and all)
    writer.store_outcome(_outcome())
    reader = _reader(local_resources, dynamodb, FakeTime())
    conflict = AllocationOutcome(
        request_id="req-1",
        kind="ensure",
        workspace_id="child-2",
        status="rejected",
        error_code="requestIdConflict",
    )
    # When a request of another child (or another kind) asks by the same id
    # Then it is refused as the worker refuses it, with nothing of the other request
    assert reader.get_outcome("req-1", workspace_id="child-2", kind="ensure") == conflict
    assert reader.wait_for_outcome("req-1", 5, workspace_id="child-2", kind="ensure") == conflict
    released = reader.get_outcome("req-1", workspace_id="child-1", kind="release")
    assert released is not None
    assert (released.status, released.error_code, released.totals_after) == (
        "rejected",
        "requestIdConflict",
        None,
    )
    # And the request the record belongs to reads its own outcome
    assert reader.get_outcome("req-1", workspace_id="child-1", kind="ensure") == _outcome()
