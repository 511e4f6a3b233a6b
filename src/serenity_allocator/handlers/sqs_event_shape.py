"""The shape of an SQS event, checked at the edge so a hand-made event cannot crash a batch.

A real event source mapping always sends ``{"Records": [...]}`` with a unique ``messageId`` per
record. A hand-made one (a test invoke, an operator's replay) may not. What cannot be a record
(no ``messageId``, not an object, a second copy of an id) can be neither processed nor
reported, so it is left out with one clear problem each; everything else goes on, and a record
whose envelope is malformed becomes an invalid message (to the DLQ with the field named).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SqsEventRecords:
    """The records to process, and the problems found in the event (one line each)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_sqs_records(event: object) -> SqsEventRecords:
    """Split ``event`` into processable records and problems; never raises."""
    if not isinstance(event, Mapping):
        return SqsEventRecords(problems=["event: not an object"])
    raw = event.get("Records")
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        return SqsEventRecords(problems=["Records: missing or not a list"])
    result = SqsEventRecords()
    seen: set[str] = set()
    for index, record in enumerate(raw):
        problem = _record_problem(record, seen)
        if problem is not None:
            result.problems.append(f"Records[{index}]: {problem}")
            continue
        seen.add(record["messageId"])
        result.records.append(dict(record))
    return result


def _record_problem(record: object, seen: set[str]) -> str | None:
    if not isinstance(record, Mapping):
        return "not an object"
    message_id = record.get("messageId")
    if not isinstance(message_id, str) or not message_id:
        return "messageId: missing or not a string"
    if message_id in seen:
        return "messageId: repeats an earlier record (that copy is processed)"
    if "attributes" in record and not isinstance(record["attributes"], Mapping):
        return "attributes: not an object"
    return None
