"""Planning a batch: validate every record up front, then coalesce consecutive ensures.

Validation happens here rather than through Powertools' ``model=``: with a model, a malformed
record behind a failed one raises for the whole invocation (Powertools 3.37).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pydantic import ValidationError

from ...domain.coalescing import EnsureRun, PlannedMessage, plan_ensure_runs
from ...domain.messages import (
    REQUEST_ID_PATTERN,
    WORKSPACE_ID_PATTERN,
    AllocationOutcome,
    EnsureRequest,
    ReleaseRequest,
    cross_field_problem,
    describe_validation_error,
    parse_request,
)
from ...domain.observations import MessageStarted

INVALID_MESSAGE_CODE = "invalidMessage"
"""The error code of the ``invalid`` outcome of a message refused with a readable request id."""


@dataclass(frozen=True)
class InboundMessage:
    """One SQS record as the worker needs it, read from the event at the edge."""

    message_id: str
    group_id: str
    body: str
    receive_count: int = 1
    sent_timestamp_ms: float | None = None
    sequence_number: str | None = None
    """The record's SQS ``SequenceNumber`` (FIFO): the order key its outcome carries."""
    shape_error: str | None = None
    """Why the record's SQS envelope is malformed (a hand-made event); it is then invalid."""


@dataclass(frozen=True)
class BatchMessage:
    """One record of the batch: its request when valid, otherwise why it is invalid."""

    inbound: InboundMessage
    request: EnsureRequest | ReleaseRequest | None
    invalid_reason: str | None = None
    duplicate_of: str | None = None
    """The message id of an earlier record of this batch with the same request id: this one
    is not applied again and gets no outcome of its own."""
    invalid_outcome: AllocationOutcome | None = None
    """An invalid message whose request id can be read: the ``invalid`` outcome its caller
    hears (stored under that id and announced) besides the dead letter."""

    @property
    def message_id(self) -> str:
        """The SQS message id (the batch item identifier)."""
        return self.inbound.message_id

    @property
    def group_id(self) -> str:
        """The MessageGroupId (the child, for a valid message)."""
        return self.inbound.group_id

    @property
    def receive_count(self) -> int:
        """ApproximateReceiveCount of this delivery (1 = first)."""
        return self.inbound.receive_count


@dataclass(frozen=True)
class BatchPlan:
    """The batch in order, each message validated, and the coalesced ensure runs."""

    messages: dict[str, BatchMessage]
    order: tuple[str, ...]
    runs: dict[str, EnsureRun]

    def message(self, message_id: str) -> BatchMessage:
        """The planned message with this id (KeyError for an id not in the batch)."""
        return self.messages[message_id]


def message_keys(message: BatchMessage) -> MessageStarted:
    """The record's own ids, as every log line about it names them."""
    request = message.request
    return MessageStarted(
        message.message_id,
        request.workspace_id if request else message.group_id,
        request.request_id if request else None,
        request.kind if request else None,
        message.receive_count,
    )


def read_message(inbound: InboundMessage) -> BatchMessage:
    """Validate one record's body and its group id; never raises."""
    if inbound.shape_error is not None:
        outcome = _readable_outcome(inbound)
        return BatchMessage(inbound, None, inbound.shape_error, invalid_outcome=outcome)
    try:
        request = parse_request(inbound.body)
    except ValidationError as exc:
        # The discriminator's tag (``ensure``/``release``) in a path adds nothing.
        reason = describe_validation_error(exc, whole="body", skip=("ensure", "release"))
        return BatchMessage(inbound, None, reason, invalid_outcome=_readable_outcome(inbound))
    problem = cross_field_problem(request, inbound.group_id)
    if problem is not None:
        return BatchMessage(inbound, None, problem, invalid_outcome=_readable_outcome(inbound))
    return BatchMessage(inbound, request)


def _readable_outcome(inbound: InboundMessage) -> AllocationOutcome | None:
    """The ``invalid`` outcome of a refused body whose request id can be read, else None.

    Readable: the body is a JSON object whose ``request_id`` matches the contract's pattern
    (the id the caller waits on). The outcome carries the body's kind and workspace id when
    they are valid themselves, else ``unknown`` and the message's group id.
    """
    try:
        body = json.loads(inbound.body)
    except ValueError:
        return None
    if not isinstance(body, dict) or not _matches(REQUEST_ID_PATTERN, body.get("request_id")):
        return None
    kind = body.get("kind")
    workspace = body.get("workspace_id")
    if not isinstance(workspace, str) or not _matches(WORKSPACE_ID_PATTERN, workspace):
        workspace = inbound.group_id
    return AllocationOutcome(
        request_id=body["request_id"],
        kind=kind if kind in ("ensure", "release") else "unknown",
        workspace_id=workspace,
        status="invalid",
        error_code=INVALID_MESSAGE_CODE,
        receive_count=inbound.receive_count,
        dead_lettered=True,
    )


def _matches(pattern: str, value: object) -> bool:
    # The schema's patterns are anchored with ^...$ over ASCII; fullmatch without the anchors
    # keeps Python's "$ before a final newline" from letting "id\n" through.
    return isinstance(value, str) and re.fullmatch(pattern.strip("^$"), value) is not None


def plan_batch(
    inbound: Sequence[InboundMessage],
    *,
    dynamic_allocation: bool,
    standalone: frozenset[str] = frozenset(),
) -> BatchPlan:
    """Validate every record and plan the coalesced ensure runs (none when allocation is off).

    A request id seen earlier in the batch marks the later record a duplicate, and requests
    in ``standalone`` (a final ledger record exists: they are replayed; or a recorded intent:
    an earlier delivery may have applied them) join no run, so none adds its need to a
    combined top-up or leads one.
    """
    messages = _mark_duplicates([read_message(m) for m in inbound])
    runs = plan_ensure_runs(
        [
            PlannedMessage(m.message_id, m.group_id, m.request)
            for m in messages.values()
            if (dynamic_allocation or not isinstance(m.request, EnsureRequest))
            and m.duplicate_of is None
            and (m.request is None or m.request.request_id not in standalone)
        ]
    )
    return BatchPlan(messages=messages, order=tuple(messages), runs=runs)


def _mark_duplicates(messages: Sequence[BatchMessage]) -> dict[str, BatchMessage]:
    first_of: dict[str, str] = {}
    planned: dict[str, BatchMessage] = {}
    for read in messages:
        if read.message_id in planned:
            continue  # one SQS message, listed twice (a hand-made event): the first copy counts
        request = read.request
        if request is not None and request.request_id in first_of:
            planned[read.message_id] = replace(read, duplicate_of=first_of[request.request_id])
            continue
        if request is not None:
            first_of[request.request_id] = read.message_id
        planned[read.message_id] = read
    return planned
