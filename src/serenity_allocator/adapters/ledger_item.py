"""Reading one request ledger item (DynamoDB's attribute-value shape) into the domain's entry.

Forward compatible: attributes and JSON fields this version does not know are ignored (a newer
writer's additions). Refused, as :class:`~serenity_allocator.domain.ledger.
LedgerRecordUnreadableError` naming the attribute, only what this version cannot interpret: a
known attribute of the wrong type or value, or parts that disagree (an outcome of another
request, workspace or kind than the record's binding: a tampered record).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..domain.ledger import (
    LedgerEntry,
    LedgerRead,
    LedgerRecordUnreadableError,
    TransferIntent,
    describe_unreadable,
    read_stored,
)
from ..domain.messages import AllocationOutcome


def add_item(read: LedgerRead, item: Mapping[str, Any]) -> None:
    """Put one item of a batch read into ``read``: its entry, or why it is unreadable."""
    request_id = _text(item, "request_id") or ""
    try:
        read.entries[request_id] = item_to_entry(item)
    except LedgerRecordUnreadableError as exc:
        read.unreadable[request_id] = str(exc)


def item_to_entry(item: Mapping[str, Any]) -> LedgerEntry:
    """A ledger item (DynamoDB's attribute-value shape) as the domain's entry.

    Attributes and JSON fields this version does not know are ignored (a newer writer's).

    Raises:
        LedgerRecordUnreadableError: a known attribute cannot be read, or the record's parts
            disagree (an outcome of another request, workspace or kind): names the attribute.
    """
    outcome = _text(item, "outcome")
    intent = _text(item, "intent")
    try:
        return LedgerEntry(
            request_id=_text(item, "request_id"),
            state=_text(item, "state"),
            workspace_id=_text(item, "workspace_id"),
            kind=_text(item, "kind"),
            outcome=read_stored(AllocationOutcome, outcome, "outcome") if outcome else None,
            intent=read_stored(TransferIntent, intent, "intent") if intent else None,
            provisional=_flag(item, "provisional"),
            announced=_flag(item, "announced"),
            source_message_id=_text(item, "source_message_id"),
            updated_at=_number(item, "updated_at"),
            schema_version=_version(item),
        )
    except ValidationError as exc:
        raise LedgerRecordUnreadableError(describe_unreadable(exc, "record")) from None


def _version(item: Mapping[str, Any]) -> Any:
    version = _number(item, "schema_version")
    return 1 if version is None else version  # written before records carried a version


def _text(item: Mapping[str, Any], name: str) -> Any:
    value = item.get(name)
    return value.get("S") if isinstance(value, Mapping) else None


def _flag(item: Mapping[str, Any], name: str) -> Any:
    value = item.get(name)
    return value.get("BOOL", False) if isinstance(value, Mapping) else False


def _number(item: Mapping[str, Any], name: str) -> Any:
    value = item.get(name)
    text = value.get("N") if isinstance(value, Mapping) else None
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return text  # not a whole number: the entry refuses it, naming the attribute
