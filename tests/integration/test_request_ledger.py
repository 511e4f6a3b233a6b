"""The DynamoDB request ledger on a real moto server: conditional writes, consistent reads."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.config import Config

from serenity_allocator.adapters.dynamodb_request_ledger import (
    DynamoDbRequestLedger,
    RequestLedgerConfig,
)
from serenity_allocator.domain.ledger import (
    LedgerConflictError,
    LedgerUnavailableError,
    TransferIntent,
)
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_tools.standins.resources import LocalResources

NOW = 1_800_000_000.0


def _outcome(request_id: str = "req-1", **fields: Any) -> AllocationOutcome:
    values: dict[str, Any] = {
        "request_id": request_id,
        "kind": "release",
        "workspace_id": "child-1",
        "status": "released",
        "totals_before": Totals(projects=3, prompts=500),
        "totals_after": Totals(projects=1, prompts=100),
        "receive_count": 1,
    }
    values.update(fields)
    return AllocationOutcome(**values)


@pytest.fixture
def dynamodb(local_resources: LocalResources) -> Any:
    # A client of its own, not local_client's shared one: a test registers an event handler.
    return boto3.client("dynamodb", endpoint_url=local_resources.endpoint_url)


@pytest.fixture
def ledger(local_resources: LocalResources, dynamodb: Any) -> DynamoDbRequestLedger:
    return DynamoDbRequestLedger(
        local_resources.ledger_table,
        dynamodb,
        config=RequestLedgerConfig(ttl_s=3600, wall_clock=lambda: NOW),
    )


def _raw(dynamodb: Any, table: str, request_id: str) -> dict[str, Any]:
    item: dict[str, Any] = dynamodb.get_item(
        TableName=table, Key={"request_id": {"S": request_id}}, ConsistentRead=True
    )["Item"]
    return item


def test_request_ledger_stores_a_terminal_outcome_once(ledger: DynamoDbRequestLedger) -> None:
    # Given a request whose terminal outcome is stored
    first = _outcome(status="released")
    assert ledger.store_outcome(first) == first

    # When a second delivery tries to store a different outcome for the same request
    held = ledger.store_outcome(_outcome(status="nothing-to-release", receive_count=2))

    # Then the ledger keeps and returns the first one
    assert held == first
    entry = ledger.lookup(["req-1"])["req-1"]
    assert (entry.state, entry.outcome) == ("final", first)
    assert entry.is_replayable


def test_request_ledger_keeps_a_release_intent_when_it_turns_terminal(
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a release's intent recorded before its transfer
    intent = TransferIntent(
        before=Totals(projects=3, prompts=500), target=Totals(projects=1, prompts=100)
    )
    ledger.record_intent("req-1", intent, workspace_id="child-1")
    assert ledger.lookup(["req-1"])["req-1"].state == "intent"

    # When its outcome is stored
    ledger.store_outcome(_outcome())

    # Then the record is terminal and still carries the intent
    entry = ledger.lookup(["req-1"])["req-1"]
    assert (entry.state, entry.intent) == ("final", intent)


def test_request_ledger_refuses_an_intent_over_a_terminal_record(
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a completed request
    ledger.store_outcome(_outcome())

    # When a late delivery tries to record an intent / Then the ledger refuses it
    with pytest.raises(LedgerConflictError):
        ledger.record_intent(
            "req-1",
            TransferIntent(before=Totals(prompts=400), target=Totals(prompts=100)),
            workspace_id="child-1",
        )
    assert ledger.lookup(["req-1"])["req-1"].state == "final"


def test_request_ledger_adds_an_intent_beside_a_provisional_dead_letter(
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a final receive's provisional dead letter over an earlier receive's intent
    earlier = TransferIntent(before=Totals(prompts=500), target=Totals(prompts=100))
    ledger.record_intent("req-1", earlier, workspace_id="child-1")
    provisional = _outcome(status="failed", error_code="finalReceiveUnfinished", dead_lettered=True)
    ledger.store_outcome(provisional, provisional=True)

    # When that receive records its release's intent before transferring
    intent = TransferIntent(before=Totals(prompts=450), target=Totals(prompts=100))
    ledger.record_intent("req-1", intent, workspace_id="child-1")

    # Then the intent is kept beside the dead letter, which stays the terminal record (a crash
    # from here on still leaves one) until the receive stores its outcome
    entry = ledger.lookup(["req-1"])["req-1"]
    assert (entry.state, entry.provisional, entry.intent) == ("deadLettered", True, intent)
    assert entry.outcome == provisional
    ledger.store_outcome(_outcome(receive_count=5))
    final = ledger.lookup(["req-1"])["req-1"]
    assert (final.state, final.provisional, final.intent) == ("final", False, intent)


def test_request_ledger_redrive_supersedes_a_dead_letter_and_keeps_it(
    ledger: DynamoDbRequestLedger, dynamodb: Any, local_resources: LocalResources
) -> None:
    # Given a request that ended in the DLQ with a published dead-lettered outcome
    dead = _outcome(
        status="failed", error_code="workspaceBusy", receive_count=5, dead_lettered=True
    )
    ledger.store_outcome(dead, dead_lettered=True)
    entry = ledger.lookup(["req-1"])["req-1"]
    assert (entry.state, entry.was_announced_dead, entry.is_replayable) == (
        "deadLettered",
        True,
        False,
    )

    # When an operator's redrive completes it
    redriven = _outcome(receive_count=1, supersedes="deadLettered")
    held = ledger.store_outcome(redriven)

    # Then the redrive's outcome is the record, and the dead letter it replaced is kept
    assert held == redriven
    assert ledger.lookup(["req-1"])["req-1"].state == "final"
    raw = _raw(dynamodb, local_resources.ledger_table, "req-1")
    assert AllocationOutcome.model_validate_json(raw["dead_letter"]["S"]) == dead


def test_request_ledger_provisional_dead_letter_never_replaces_a_terminal_record(
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a completed request
    done = _outcome()
    ledger.store_outcome(done)

    # When a final receive tries to leave a provisional dead letter
    held = ledger.store_outcome(
        _outcome(status="failed", error_code="finalReceiveUnfinished", dead_lettered=True),
        provisional=True,
    )

    # Then the completed outcome stands
    assert held == done
    assert ledger.lookup(["req-1"])["req-1"].outcome == done


def test_request_ledger_final_outcome_replaces_its_own_provisional_dead_letter(
    ledger: DynamoDbRequestLedger,
) -> None:
    # Given a provisional dead letter written as the final receive began
    provisional = _outcome(status="failed", error_code="finalReceiveUnfinished", dead_lettered=True)
    ledger.store_outcome(provisional, provisional=True)
    entry = ledger.lookup(["req-1"])["req-1"]
    assert (entry.state, entry.provisional, entry.is_replayable) == ("deadLettered", True, False)

    # When that receive completes
    done = _outcome(receive_count=5)
    held = ledger.store_outcome(done)

    # Then its outcome replaces the provisional record
    assert held == done
    entry = ledger.lookup(["req-1"])["req-1"]
    assert (entry.state, entry.provisional, entry.outcome) == ("final", False, done)


def test_request_ledger_sets_the_ttl_attribute_from_the_wall_clock(
    ledger: DynamoDbRequestLedger, dynamodb: Any, local_resources: LocalResources
) -> None:
    # Given a ledger with a one-hour TTL at a fixed wall clock / When an outcome is stored
    ledger.store_outcome(_outcome())

    # Then the item expires one hour after the write, and the table's TTL reads that attribute
    raw = _raw(dynamodb, local_resources.ledger_table, "req-1")
    assert raw["expires_at"] == {"N": str(int(NOW) + 3600)}
    ttl = dynamodb.describe_time_to_live(TableName=local_resources.ledger_table)
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"


def test_request_ledger_lookup_reads_many_ids_consistently(
    ledger: DynamoDbRequestLedger, dynamodb: Any
) -> None:
    # Given 3 stored requests among 150 ids, and a hook recording every read's parameters
    for rid in ("req-0", "req-77", "req-149"):
        ledger.store_outcome(_outcome(rid))
    reads: list[dict[str, Any]] = []
    dynamodb.meta.events.register(
        "provide-client-params.dynamodb.BatchGetItem", lambda params, **_: reads.append(params)
    )

    # When the ledger looks up all 150 (more than one BatchGetItem holds)
    found = ledger.lookup([f"req-{i}" for i in range(150)])

    # Then exactly the stored ones come back, over two strongly consistent reads
    assert sorted(found) == ["req-0", "req-149", "req-77"]
    assert len(reads) == 2
    assert all(
        table["ConsistentRead"] is True
        for params in reads
        for table in params["RequestItems"].values()
    )


def test_request_ledger_unreachable_is_a_retryable_error(local_resources: LocalResources) -> None:
    # Given a ledger whose endpoint refuses connections, with one short attempt
    import boto3

    client = boto3.client(
        "dynamodb",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(connect_timeout=0.5, read_timeout=0.5, retries={"max_attempts": 1}),
    )
    ledger = DynamoDbRequestLedger(local_resources.ledger_table, client)

    # When it is read or written / Then the error says the ledger is unavailable
    with pytest.raises(LedgerUnavailableError):
        ledger.lookup(["req-1"])
    with pytest.raises(LedgerUnavailableError):
        ledger.store_outcome(_outcome())
