"""Every dead letter carries its order key (ADR 0018), the DLQ audit's included.

A final receive leaves its provisional dead letter as the batch starts, stamped with the
message's SQS SequenceNumber; the audit that confirms it, or records a dead letter beside it,
announces it with that number, never with the DLQ copy's own.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from serenity_allocator.application.allocator import InboundMessage, handle_message
from serenity_allocator.application.allocator.audit_dead_letters import (
    DeadLetterCopy,
    audit_dead_letters,
)
from serenity_allocator.application.allocator.request_ledger import FINAL_RECEIVE_UNFINISHED
from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.messages import AllocationOutcome
from tests.fakes import READ_RESOURCES, RecordingOutcomes
from tests.unit.application.allocator.ledger_fake import InMemoryRequestLedger
from tests.unit.application.allocator.test_handle_message_paths import (
    MAX_RECEIVE_COUNT,
    _batch,
    _ensure,
    _gateway,
)

NOW = 4_000_000_000.0
"""Long after every record the fake ledger writes: none is live."""


def _final(message_id: str, sequence_number: str, child: str = "c1") -> InboundMessage:
    inbound = _ensure(message_id, child, receive_count=MAX_RECEIVE_COUNT)
    return replace(inbound, sequence_number=sequence_number)


def _copy_of(inbound: InboundMessage) -> DeadLetterCopy:
    # What the DLQ holds once SQS moved the message (its own SequenceNumber is not read).
    return DeadLetterCopy(
        message_id=inbound.message_id,
        body=inbound.body,
        reason=None,
        receive_count=MAX_RECEIVE_COUNT,
        group_id=inbound.group_id,
    )


def test_a_final_receive_leaves_its_provisional_dead_letter_with_its_order_key_at_batch_start() -> (
    None
):
    # Given a batch of two final receives, on two children
    ledger = InMemoryRequestLedger()
    first, second = _final("m1", "0000000000000000107"), _final("m2", "0000000000000000108", "c2")

    # When the batch starts and the function dies before any record's turn
    _batch([first, second], gateway=_gateway("c1", "c2"), ledger=ledger)

    # Then each request already has its provisional dead letter, carrying its own order key
    for request_id, number in (
        ("req-m1", "0000000000000000107"),
        ("req-m2", "0000000000000000108"),
    ):
        entry = ledger.entries[request_id]
        assert (entry.state, entry.provisional) == ("deadLettered", True)
        assert entry.outcome is not None
        assert entry.outcome.error_code == FINAL_RECEIVE_UNFINISHED
        assert entry.outcome.sequence_number == number


def test_a_final_receive_reaching_its_turn_writes_no_second_provisional_record() -> None:
    # Given a final receive whose provisional record the batch start wrote
    ledger = InMemoryRequestLedger()
    invocation, _ = _batch([_final("m1", "0000000000000000042")], ledger=ledger)
    stores_at_start = ledger.stores

    # When its turn comes and it completes
    handle_message(invocation, "m1")

    # Then its terminal outcome replaced the provisional one in one more write, with its key
    entry = ledger.entries["req-m1"]
    assert (entry.state, entry.provisional, ledger.stores - stores_at_start) == ("final", False, 1)
    assert entry.outcome is not None and entry.outcome.sequence_number == "0000000000000000042"


def test_the_audit_announces_a_crashed_final_receive_in_its_childs_order() -> None:
    # Given a final receive that died after the batch start, then SQS moved it to the DLQ
    ledger = InMemoryRequestLedger()
    inbound = _final("m1", "0000000000000000042")
    _batch([inbound], ledger=ledger)
    outcomes = RecordingOutcomes()

    # When the DLQ is audited
    audit = audit_dead_letters([_copy_of(inbound)], ledger, outcomes, now_s=NOW)

    # Then the confirmed dead letter is announced with the source message's order key
    assert [o.sequence_number for o in audit.recorded] == ["0000000000000000042"]
    assert [(o.request_id, o.sequence_number) for o in outcomes.published] == [
        ("req-m1", "0000000000000000042")
    ]


def test_the_audit_takes_the_order_key_of_the_record_a_receive_left() -> None:
    # Given a refusal the worker dead-lettered whose provisional record holds its order key
    ledger = InMemoryRequestLedger()
    inbound = _final("m1", "0000000000000000042")
    _batch([inbound], ledger=ledger)
    letter = replace(_copy_of(inbound), reason="needsReauth")
    outcomes = RecordingOutcomes()

    # When the DLQ is audited
    audit = audit_dead_letters([letter], ledger, outcomes, now_s=NOW)

    # Then the refusal is recorded with its code and the source message's order key
    assert [(o.error_code, o.sequence_number) for o in audit.recorded] == [
        ("needsReauth", "0000000000000000042")
    ]


def test_a_dead_letter_no_receive_recorded_carries_no_borrowed_order_key() -> None:
    # Given a request whose every receive died before the worker read it (no record)
    ledger = InMemoryRequestLedger()
    body = json.loads(_ensure("m1").body)

    # When the DLQ is audited
    audit = audit_dead_letters(
        [DeadLetterCopy(message_id="m1", body=json.dumps(body), reason=None, receive_count=5)],
        ledger,
        RecordingOutcomes(),
        now_s=NOW,
    )

    # Then it is recorded without a key (the DLQ copy's own number is another queue's)
    assert [o.sequence_number for o in audit.recorded] == [None]


def test_a_final_receive_that_fails_keeps_its_order_key_on_the_outcome_it_records() -> None:
    # Given a final receive whose child cannot be read (a retry could fix it; none is left)
    gateway = _gateway("c1")
    gateway.script_errors(READ_RESOURCES, "c1", [UpstreamError(503, "unavailable", "read")])
    ledger = InMemoryRequestLedger()
    invocation, _ = _batch([_final("m1", "0000000000000000042")], gateway=gateway, ledger=ledger)

    # When its turn comes, the record fails (SQS moves it to the DLQ next)
    with pytest.raises(UpstreamError):
        handle_message(invocation, "m1")

    # Then its dead letter replaced the provisional one, with the same order key
    entry = ledger.entries["req-m1"]
    outcome: AllocationOutcome | None = entry.outcome
    assert (entry.state, entry.provisional) == ("deadLettered", False)
    assert outcome is not None and outcome.sequence_number == "0000000000000000042"
    assert outcome.error_code != FINAL_RECEIVE_UNFINISHED
