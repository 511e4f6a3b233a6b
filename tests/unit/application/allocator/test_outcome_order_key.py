"""The order key: each outcome carries the SQS sequence number of the message behind it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serenity_allocator.application.allocator.invocation import OutcomeBook
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.handlers.allocator_runtime import inbound_message


def _outcome(request_id: str, sequence_number: str | None = None) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=request_id,
        kind="ensure",
        workspace_id="c1",
        status="hot-path",
        sequence_number=sequence_number,
    )


def test_a_fifo_record_hands_its_sequence_number_to_the_worker() -> None:
    record = {
        "messageId": "m1",
        "body": "{}",
        "attributes": {"MessageGroupId": "c1", "SequenceNumber": "18849496460467696128"},
    }
    assert inbound_message(record).sequence_number == "18849496460467696128"
    hand_made = {"messageId": "m2", "body": "{}", "attributes": {"SequenceNumber": "x1"}}
    assert inbound_message(hand_made).sequence_number is None
    assert inbound_message({"messageId": "m3", "body": "{}"}).sequence_number is None


def test_the_book_stamps_each_outcome_with_its_message_sequence_number() -> None:
    book = OutcomeBook(sequence_numbers={"m1": "0001", "m2": "0002"})

    first = book.record("m1", _outcome("r1"))
    # A replayed outcome is the stored one: it keeps the key it was stored with
    replayed = book.record("m2", _outcome("r2", "0002"), replayed=True)
    unknown = book.record("m9", _outcome("r9"))

    assert first is not None and first.sequence_number == "0001"
    assert replayed is not None and replayed.sequence_number == "0002"
    assert unknown is not None and unknown.sequence_number is None
    assert [o.sequence_number for _, o in book.entries] == ["0001", "0002", None]


def test_the_order_key_is_a_decimal_number() -> None:
    with pytest.raises(ValidationError, match="sequence_number"):
        _outcome("r1", "12a")
