"""The ledger adapter on moto under throttling and with records it did not write itself.

Throttling is injected by the answering proxy: a ``BatchGetItem`` it answers leaves every key
unprocessed, as DynamoDB does when a table is throttled. The waits run on an injected clock
(a sleep moves it), so which retries fit the deadline is exact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from serenity_allocator.adapters.dynamodb_request_ledger import (
    MAX_UNPROCESSED_RETRIES,
    DynamoDbRequestLedger,
    RequestLedgerConfig,
)
from serenity_allocator.domain.ledger import (
    CallDeadline,
    LedgerUnavailableError,
)
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_tools.standins.resources import LocalResources, local_client
from tests.integration.slow_aws_proxy import never, slow_proxy, unprocessed_batch_get

NOW = 1_800_000_000


class StepClock:
    """Monotonic seconds that only a sleep moves; records every sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _outcome(request_id: str = "req-1", **fields: Any) -> AllocationOutcome:
    values: dict[str, Any] = {
        "request_id": request_id,
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
def direct(local_resources: LocalResources) -> DynamoDbRequestLedger:
    """The ledger straight on moto (to seed records)."""
    client = local_client("dynamodb", local_resources.endpoint_url)
    return DynamoDbRequestLedger(
        local_resources.ledger_table, client, config=RequestLedgerConfig(wall_clock=lambda: NOW)
    )


def _through(local_resources: LocalResources, url: str, clock: StepClock) -> DynamoDbRequestLedger:
    client = local_client("dynamodb", url)
    return DynamoDbRequestLedger(
        local_resources.ledger_table,
        client,
        config=RequestLedgerConfig(
            wall_clock=lambda: NOW, jitter=lambda ceiling: ceiling, sleep=clock.sleep
        ),
    )


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


@pytest.fixture
def throttled_three_times(local_resources: LocalResources) -> Iterator[tuple[str, list[int]]]:
    answer, answered = unprocessed_batch_get(times=3)
    with slow_proxy(local_resources.endpoint_url, 0.0, never, answer) as proxy:
        yield proxy.url, answered


@pytest.fixture
def always_throttled(local_resources: LocalResources) -> Iterator[tuple[str, list[int]]]:
    answer, answered = unprocessed_batch_get()
    with slow_proxy(local_resources.endpoint_url, 0.0, never, answer) as proxy:
        yield proxy.url, answered


def test_unprocessed_keys_are_asked_again_after_growing_waits_until_answered(
    local_resources: LocalResources,
    direct: DynamoDbRequestLedger,
    throttled_three_times: tuple[str, list[int]],
    clock: StepClock,
) -> None:
    # Given a stored record and a table that throttles the first three reads
    direct.store_outcome(_outcome())
    url, answered = throttled_three_times
    ledger = _through(local_resources, url, clock)

    # When the batch is read with a deadline 10 s away (one attempt may take 2 s)
    read = ledger.read_batch(["req-1"], CallDeadline(clock, clock.sleep, 10.0, 2.0))

    # Then it waited 50, 100, 200 ms between the throttled reads and got the record
    assert clock.sleeps == [0.05, 0.1, 0.2]
    assert len(answered) == 3
    assert read.entries["req-1"].outcome == _outcome()
    assert (read.unanswered, read.unreadable) == (set(), {})


def test_unprocessed_keys_are_given_up_before_the_deadline_and_reported(
    local_resources: LocalResources,
    direct: DynamoDbRequestLedger,
    always_throttled: tuple[str, list[int]],
    clock: StepClock,
) -> None:
    # Given a table that throttles every read
    direct.store_outcome(_outcome())
    url, answered = always_throttled
    ledger = _through(local_resources, url, clock)

    # When the batch is read with 3 s left and a 2 s attempt
    read = ledger.read_batch(["req-1", "req-2"], CallDeadline(clock, clock.sleep, 3.0, 2.0))

    # Then it retried while a wait and one more attempt still fitted (0.05 + 0.1 + 0.2 +
    # 0.4 = 0.75 s; a fifth wait of 0.8 s would end at 3.55 s), and reports both ids
    # unanswered, not absent
    assert clock.sleeps == [0.05, 0.1, 0.2, 0.4]
    assert clock.now + 2.0 <= 3.0
    assert len(answered) == 5
    assert (read.entries, read.unanswered) == ({}, {"req-1", "req-2"})


def test_unprocessed_keys_without_a_deadline_are_retried_a_bounded_number_of_times(
    local_resources: LocalResources,
    always_throttled: tuple[str, list[int]],
    clock: StepClock,
) -> None:
    # Given a table that throttles every read, and an operator tool that gives no deadline
    url, answered = always_throttled
    ledger = _through(local_resources, url, clock)

    # When it looks a record up / Then it gives up after the bounded retries, capped waits
    with pytest.raises(LedgerUnavailableError, match="unprocessed keys"):
        ledger.lookup(["req-1"])
    assert len(answered) == MAX_UNPROCESSED_RETRIES + 1
    assert clock.sleeps == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


def _put(local_resources: LocalResources, item: dict[str, Any]) -> None:
    local_client("dynamodb", local_resources.endpoint_url).put_item(
        TableName=local_resources.ledger_table, Item=item
    )


def _item(outcome: dict[str, Any], **attributes: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "request_id": {"S": "req-1"},
        "schema_version": {"N": "2"},
        "state": {"S": "final"},
        "workspace_id": {"S": "child-1"},
        "kind": {"S": "ensure"},
        "outcome": {"S": json.dumps(outcome)},
        "updated_at": {"N": str(NOW)},
    }
    item.update(attributes)
    return item


STORED = json.loads(_outcome().model_dump_json(exclude_none=True))


def test_a_record_of_a_newer_version_is_read_ignoring_what_it_does_not_know(
    local_resources: LocalResources, direct: DynamoDbRequestLedger
) -> None:
    # Given a record written by a later version: a higher schema version, a new attribute,
    # new fields in its outcome and in the outcome's totals
    outcome = {**STORED, "priority": "high", "totals_after": {**STORED["totals_after"], "x": 1}}
    _put(
        local_resources,
        _item(outcome, schema_version={"N": "7"}, archived_by={"S": "ops"}),
    )

    # When this version reads it / Then it reads what it knows, unchanged
    entry = direct.read_batch(["req-1"]).entries["req-1"]
    assert (entry.state, entry.outcome, entry.schema_version) == ("final", _outcome(), 7)


def test_a_record_from_before_the_binding_is_bound_by_its_outcome(
    local_resources: LocalResources, direct: DynamoDbRequestLedger
) -> None:
    # Given a version-1 record: no schema version, no kind attribute
    item = _item(STORED)
    del item["schema_version"], item["kind"]
    _put(local_resources, item)

    # When it is read / Then it is version 1, bound by its outcome's workspace and kind
    entry = direct.read_batch(["req-1"]).entries["req-1"]
    assert (entry.schema_version, entry.kind, entry.bound_kind) == (1, None, "ensure")
    assert entry.belongs_to("child-1", "ensure") is True
    assert entry.belongs_to("child-1", "release") is False


@pytest.mark.parametrize(
    ("outcome", "attributes", "reason"),
    [
        (
            {**STORED, "workspace_id": "child-2"},
            {},
            "record: unreadable field(s) outcome.workspace_id",
        ),
        ({**STORED, "request_id": "req-9"}, {}, "record: unreadable field(s) outcome.request_id"),
        ({**STORED, "kind": "release"}, {}, "record: unreadable field(s) outcome.kind"),
        ({**STORED, "status": "teleported"}, {}, "outcome: unreadable field(s) status"),
        (STORED, {"state": {"S": "archived"}}, "record: unreadable field(s) state"),
        (STORED, {"schema_version": {"N": "1.5"}}, "record: unreadable field(s) schema_version"),
        (STORED, {"kind": {"S": "sweep"}}, "record: unreadable field(s) kind"),
    ],
)
def test_a_tampered_or_corrupt_record_is_reported_unreadable_alone(
    local_resources: LocalResources,
    direct: DynamoDbRequestLedger,
    outcome: dict[str, Any],
    attributes: dict[str, Any],
    reason: str,
) -> None:
    # Given a record whose parts disagree or hold what this version cannot read, and a
    # readable one beside it
    _put(local_resources, _item(outcome, **attributes))
    direct.store_outcome(_outcome("req-2"))

    # When both are read
    read = direct.read_batch(["req-1", "req-2"])

    # Then the other one is read, and this one is reported naming the field, never a value
    assert list(read.entries) == ["req-2"]
    assert read.unreadable == {"req-1": reason}


def test_an_outcome_that_is_not_json_is_unreadable(
    local_resources: LocalResources, direct: DynamoDbRequestLedger
) -> None:
    # Given a record whose outcome is not JSON (deeply nested, or cut off)
    item = _item(STORED)
    item["outcome"] = {"S": "[" * 100_000}
    _put(local_resources, item)

    # When it is read / Then it is unreadable, and nothing raises
    assert direct.read_batch(["req-1"]).unreadable == {"req-1": "outcome: not valid JSON"}
