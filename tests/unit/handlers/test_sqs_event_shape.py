"""The SQS event's shape, read at the handler edge: records to process, problems named once."""

from __future__ import annotations

from typing import Any

import pytest

from serenity_allocator.handlers.allocator_runtime import read_sqs_records


def _record(message_id: str = "m-1", **fields: Any) -> dict[str, Any]:
    return {"messageId": message_id, "body": "{}", "attributes": {}, **fields}


@pytest.mark.parametrize(
    ("event", "problems"),
    [
        (None, ["event: not an object"]),
        ([], ["event: not an object"]),
        ({}, ["Records: missing or not a list"]),
        ({"Records": None}, ["Records: missing or not a list"]),
        ({"Records": "abc"}, ["Records: missing or not a list"]),
        ({"Records": []}, []),
    ],
)
def test_read_sqs_records_names_an_event_without_records(
    event: object, problems: list[str]
) -> None:
    # Given an event with no usable Records / When read / Then nothing to process, one problem
    shape = read_sqs_records(event)
    assert (shape.records, shape.problems) == ([], problems)


def test_read_sqs_records_keeps_good_records_and_names_each_bad_one() -> None:
    # Given good records among an empty object, a non-object, a blank id, a repeated id and
    # non-object attributes
    event = {
        "Records": [
            {},
            _record("m-1"),
            7,
            _record(""),
            _record("m-1"),
            _record("m-2", attributes="x"),
            _record("m-3"),
        ]
    }

    # When read
    shape = read_sqs_records(event)

    # Then the good records go on in order, and each bad one is named by its index
    assert [r["messageId"] for r in shape.records] == ["m-1", "m-3"]
    assert shape.problems == [
        "Records[0]: messageId: missing or not a string",
        "Records[2]: not an object",
        "Records[3]: messageId: missing or not a string",
        "Records[4]: messageId: repeats an earlier record (that copy is processed)",
        "Records[5]: attributes: not an object",
    ]
