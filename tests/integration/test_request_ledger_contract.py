"""One contract, two ledgers: the in-memory fake must behave as the DynamoDB adapter on moto.

The unit tests of the ledger use cases run over ``tests/unit/application/allocator/ledger_fake.py``;
every scenario here runs against both, so the fake cannot drift from the adapter's conditional
rules.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from serenity_allocator.adapters.dynamodb_request_ledger import (
    DynamoDbRequestLedger,
    RequestLedgerConfig,
)
from serenity_allocator.domain.ledger import (
    LEDGER_SCHEMA_VERSION,
    LedgerConflictError,
    LedgerRecordUnreadableError,
    RequestIdConflictError,
    RequestLedger,
    TransferIntent,
)
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_tools.standins.resources import local_client
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger

NOW = 1_800_000_000
INTENT = TransferIntent(
    before=Totals(projects=3, prompts=500), target=Totals(projects=1, prompts=100)
)
LATER_INTENT = TransferIntent(
    before=Totals(projects=3, prompts=500), target=Totals(projects=2, prompts=200)
)


def _outcome(status: str = "released", **fields: Any) -> AllocationOutcome:
    values: dict[str, Any] = {
        "request_id": "req-1",
        "kind": "release",
        "workspace_id": "child-1",
        "status": status,
        "receive_count": 1,
    }
    values.update(fields)
    return AllocationOutcome(**values)


DEAD = _outcome("failed", error_code="receivesExhausted", dead_lettered=True, receive_count=5)


@pytest.fixture(params=["in-memory", "dynamodb"])
def ledger(request: pytest.FixtureRequest) -> RequestLedger:
    if request.param == "in-memory":
        return InMemoryRequestLedger(now=NOW)
    resources = request.getfixturevalue("local_resources")
    client = local_client("dynamodb", resources.endpoint_url)
    return DynamoDbRequestLedger(
        resources.ledger_table, client, config=RequestLedgerConfig(wall_clock=lambda: NOW)
    )


def _state(
    ledger: RequestLedger,
) -> tuple[str, AllocationOutcome | None, TransferIntent | None, bool]:
    entry = ledger.read_batch(["req-1"]).entries["req-1"]
    return entry.state, entry.outcome, entry.intent, entry.provisional


UNREADABLE = "record: unreadable field(s) state"


def _plant_unreadable(ledger: RequestLedger, request: pytest.FixtureRequest) -> None:
    """Put a record this version cannot interpret under req-1 (a state it does not know)."""
    if isinstance(ledger, InMemoryRequestLedger):
        ledger.corrupt("req-1", UNREADABLE)
        return
    resources = request.getfixturevalue("local_resources")
    local_client("dynamodb", resources.endpoint_url).put_item(
        TableName=resources.ledger_table,
        Item={
            "request_id": {"S": "req-1"},
            "schema_version": {"N": "2"},
            "state": {"S": "archived"},
            "workspace_id": {"S": "child-1"},
            "kind": {"S": "release"},
        },
    )


def test_ledger_contract_lookup_leaves_out_unknown_ids(ledger: RequestLedger) -> None:
    # Given one stored request
    ledger.store_outcome(_outcome())

    # When the ledger is asked for it and an unknown id
    read = ledger.read_batch(["req-1", "req-unknown"])

    # Then only the stored one is returned, with its update time, version and binding
    assert list(read.entries) == ["req-1"]
    entry = read.entries["req-1"]
    assert (entry.updated_at, entry.schema_version) == (NOW, LEDGER_SCHEMA_VERSION)
    assert (entry.workspace_id, entry.kind, entry.announced) == ("child-1", "release", False)
    assert (read.unreadable, read.unanswered) == ({}, set())


def test_ledger_contract_final_outcome_is_stored_once(ledger: RequestLedger) -> None:
    # Given a final outcome
    first = _outcome()
    assert ledger.store_outcome(first) == first

    # When another delivery stores a different final outcome, or a dead letter
    second = ledger.store_outcome(_outcome("nothing-to-release", receive_count=2))
    third = ledger.store_outcome(DEAD, dead_lettered=True)

    # Then the first one is held and returned each time
    assert (second, third) == (first, first)
    assert _state(ledger) == ("final", first, None, False)


def test_ledger_contract_intent_is_replaced_and_kept_when_terminal(ledger: RequestLedger) -> None:
    # Given an intent replaced by a later one
    ledger.record_intent("req-1", INTENT, workspace_id="child-1")
    ledger.record_intent("req-1", LATER_INTENT, workspace_id="child-1")
    assert _state(ledger) == ("intent", None, LATER_INTENT, False)

    # When the request completes
    ledger.store_outcome(_outcome())

    # Then the record is final and keeps the intent
    assert _state(ledger) == ("final", _outcome(), LATER_INTENT, False)


def test_ledger_contract_intent_over_a_final_record_conflicts(ledger: RequestLedger) -> None:
    # Given a final record
    ledger.store_outcome(_outcome())

    # When an intent is recorded, Then it is refused and the record is unchanged
    with pytest.raises(LedgerConflictError):
        ledger.record_intent("req-1", INTENT, workspace_id="child-1")
    assert _state(ledger) == ("final", _outcome(), None, False)


def test_ledger_contract_intent_beside_a_provisional_dead_letter(ledger: RequestLedger) -> None:
    # Given the provisional dead letter of a final receive
    ledger.store_outcome(DEAD, provisional=True)

    # When that receive records its release intent
    ledger.record_intent("req-1", INTENT, workspace_id="child-1")

    # Then the dead letter stays terminal and provisional, with the intent beside it
    assert _state(ledger) == ("deadLettered", DEAD, INTENT, True)


def test_ledger_contract_provisional_dead_letter_never_replaces_a_terminal_record(
    ledger: RequestLedger,
) -> None:
    # Given a published dead letter
    ledger.store_outcome(DEAD, dead_lettered=True)

    # When a provisional one is written over it
    provisional = DEAD.model_copy(update={"error_code": "finalReceiveUnfinished"})
    held = ledger.store_outcome(provisional, provisional=True)

    # Then the published dead letter is held and returned
    assert held == DEAD
    assert _state(ledger) == ("deadLettered", DEAD, None, False)


def test_ledger_contract_provisional_dead_letter_replaces_an_intent(ledger: RequestLedger) -> None:
    # Given an intent from an earlier receive
    ledger.record_intent("req-1", INTENT, workspace_id="child-1")

    # When the final receive begins
    held = ledger.store_outcome(DEAD, provisional=True)

    # Then the provisional dead letter is stored and keeps the intent
    assert held == DEAD
    assert _state(ledger) == ("deadLettered", DEAD, INTENT, True)


def test_ledger_contract_redrive_supersedes_a_dead_letter(ledger: RequestLedger) -> None:
    # Given a published dead letter
    ledger.store_outcome(DEAD, dead_lettered=True)

    # When a redriven delivery completes
    redriven = _outcome(supersedes="deadLettered", receive_count=1)
    held = ledger.store_outcome(redriven)

    # Then its final outcome replaces the dead letter
    assert held == redriven
    assert _state(ledger) == ("final", redriven, None, False)


def _source(ledger: RequestLedger) -> str | None:
    return ledger.read_batch(["req-1"]).entries["req-1"].source_message_id


def test_ledger_contract_a_dead_letter_keeps_its_source_message_until_a_redrive_replaces_it(
    ledger: RequestLedger,
) -> None:
    # Given a dead letter the worker sent itself, stored with its message id
    refusal = _outcome("failed", error_code="needsReauth", dead_lettered=True)
    ledger.store_outcome(refusal, dead_lettered=True, source_message_id="m-1")
    bound = _source(ledger)

    # When an intent joins it (a redrive applying), then the redrive's final outcome is stored
    ledger.record_intent("req-1", INTENT, workspace_id="child-1")
    beside_intent = _source(ledger)
    ledger.store_outcome(_outcome(supersedes="deadLettered"), source_message_id="m-2")

    # Then the id is kept with the dead letter, also beside the intent, and cleared by the
    # final record (only a published dead letter keeps one)
    assert (bound, beside_intent, _source(ledger)) == ("m-1", "m-1", None)


def test_ledger_contract_a_provisional_or_unbound_dead_letter_names_no_message(
    ledger: RequestLedger,
) -> None:
    # Given a provisional dead letter stored with a message id (which it must not keep)
    ledger.store_outcome(DEAD, provisional=True, source_message_id="m-1")
    provisional = _source(ledger)

    # When a bound dead letter is replaced by an unbound one (a later final receive failing)
    ledger.store_outcome(DEAD, dead_lettered=True, source_message_id="m-1")
    ledger.store_outcome(DEAD, dead_lettered=True)

    # Then neither names a message
    assert (provisional, _source(ledger)) == (None, None)


def test_ledger_contract_final_outcome_replaces_its_own_provisional_dead_letter(
    ledger: RequestLedger,
) -> None:
    # Given the provisional dead letter of a final receive
    ledger.store_outcome(DEAD, provisional=True)

    # When that receive completes
    held = ledger.store_outcome(_outcome(receive_count=5))

    # Then the final outcome is stored and no longer provisional
    assert held == _outcome(receive_count=5)
    assert _state(ledger) == ("final", _outcome(receive_count=5), None, False)


def test_ledger_contract_refuses_a_write_for_another_workspace(ledger: RequestLedger) -> None:
    # Given child-1's intent, then its final outcome, under req-1
    ledger.record_intent("req-1", INTENT, workspace_id="child-1")
    ledger.store_outcome(_outcome())

    # When child-2's request writes under the same id, Then each write is refused as a
    # conflict and returns nothing of child-1's record
    with pytest.raises(RequestIdConflictError, match=r"^req-1$"):
        ledger.store_outcome(_outcome(workspace_id="child-2"))
    with pytest.raises(RequestIdConflictError):
        ledger.store_outcome(_outcome("failed", workspace_id="child-2"), provisional=True)
    with pytest.raises(RequestIdConflictError):
        ledger.record_intent("req-1", LATER_INTENT, workspace_id="child-2")

    # and the record is child-1's, unchanged
    assert _state(ledger) == ("final", _outcome(), INTENT, False)


def test_ledger_contract_refuses_a_write_for_another_kind(ledger: RequestLedger) -> None:
    # Given a release's dead letter under req-1 (replaceable by a redrive of that release)
    ledger.store_outcome(DEAD, dead_lettered=True)

    # When an ensure of the same child completes under the id / Then it is refused
    with pytest.raises(RequestIdConflictError):
        ledger.store_outcome(_outcome("topped-up", kind="ensure"))
    assert _state(ledger) == ("deadLettered", DEAD, None, False)


def test_ledger_contract_reads_back_an_invalid_body_of_unknown_kind_and_binds_its_id(
    ledger: RequestLedger,
) -> None:
    # Given the invalid outcome of a refused body whose request id was readable, its kind not
    invalid = _outcome("invalid", kind="unknown", error_code="invalidMessage", dead_lettered=True)
    assert ledger.store_outcome(invalid, dead_lettered=True) == invalid

    # When the ledger is read / Then the record is readable: that outcome, dead-lettered
    read = ledger.read_batch(["req-1"])
    assert read.unreadable == {}
    assert _state(ledger) == ("deadLettered", invalid, None, False)
    assert read.entries["req-1"].kind == "unknown"

    # and no request of either kind may write under the id
    with pytest.raises(RequestIdConflictError):
        ledger.store_outcome(_outcome("topped-up", kind="ensure"))
    with pytest.raises(RequestIdConflictError):
        ledger.record_intent("req-1", INTENT, workspace_id="child-1")
    assert _state(ledger) == ("deadLettered", invalid, None, False)


def test_ledger_contract_announced_flag_is_for_terminal_records_and_reset_by_a_rewrite(
    ledger: RequestLedger,
) -> None:
    # Given an intent: flagging it does nothing
    ledger.record_intent("req-1", INTENT, workspace_id="child-1")
    ledger.mark_announced(["req-1", "req-unknown"])
    assert ledger.read_batch(["req-1"]).entries["req-1"].announced is False

    # When it turns into a published dead letter and is flagged
    ledger.store_outcome(DEAD, dead_lettered=True)
    ledger.mark_announced(["req-1"])
    assert ledger.read_batch(["req-1"]).entries["req-1"].announced is True

    # Then a redrive's outcome replaces it unflagged (its own publish is yet to be confirmed)
    ledger.store_outcome(_outcome(supersedes="deadLettered"))
    entry = ledger.read_batch(["req-1", "req-unknown"]).entries["req-1"]
    assert (entry.state, entry.announced) == ("final", False)


def test_ledger_contract_an_unreadable_record_is_reported_and_never_written_over(
    ledger: RequestLedger, request: pytest.FixtureRequest
) -> None:
    # Given a record this version cannot interpret, beside a readable one
    _plant_unreadable(ledger, request)
    ledger.store_outcome(_outcome(request_id="req-2"))

    # When both are read
    read = ledger.read_batch(["req-1", "req-2"])

    # Then the readable one is returned and the other reported, naming the field only
    assert list(read.entries) == ["req-2"]
    assert read.unreadable == {"req-1": UNREADABLE}

    # and every write to it is refused as unreadable, leaving it as it was
    with pytest.raises(LedgerRecordUnreadableError, match=re.escape(UNREADABLE)):
        ledger.store_outcome(_outcome())
    with pytest.raises(LedgerRecordUnreadableError):
        ledger.record_intent("req-1", INTENT, workspace_id="child-1")
    assert ledger.read_batch(["req-1"]).unreadable == {"req-1": UNREADABLE}
