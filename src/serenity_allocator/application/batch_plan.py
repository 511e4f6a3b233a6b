"""Planning a batch: validate every record up front, then coalesce consecutive ensures.

Validation happens here rather than through Powertools' ``model=``: with a model, a malformed
record behind a failed one raises for the whole invocation (Powertools 3.37).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pydantic import ValidationError

from ..domain.coalescing import EnsureRun, PlannedMessage, plan_ensure_runs
from ..domain.messages import EnsureRequest, ReleaseRequest, parse_request
from ..domain.validation import describe_validation_error


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


def read_message(inbound: InboundMessage) -> BatchMessage:
    """Validate one record's body and its group id; never raises."""
    if inbound.shape_error is not None:
        return BatchMessage(inbound, None, inbound.shape_error)
    try:
        request = parse_request(inbound.body)
    except ValidationError as exc:
        # The discriminator's tag (``ensure``/``release``) in a path adds nothing.
        reason = describe_validation_error(exc, whole="body", skip=("ensure", "release"))
        return BatchMessage(inbound, None, reason)
    if request.workspace_id != inbound.group_id:
        return BatchMessage(inbound, None, "MessageGroupId: must equal workspace_id")
    return BatchMessage(inbound, request)


def plan_batch(
    inbound: Sequence[InboundMessage],
    *,
    dynamic_allocation: bool,
    settled: frozenset[str] = frozenset(),
) -> BatchPlan:
    """Validate every record and plan the coalesced ensure runs (none when allocation is off).

    A request id seen earlier in the batch marks the later record a duplicate, and requests
    in ``settled`` (a final ledger record exists: they are replayed) join no run, so neither
    adds its need to a combined top-up.
    """
    messages = _mark_duplicates([read_message(m) for m in inbound])
    runs = plan_ensure_runs(
        [
            PlannedMessage(m.message_id, m.group_id, m.request)
            for m in messages.values()
            if (dynamic_allocation or not isinstance(m.request, EnsureRequest))
            and m.duplicate_of is None
            and (m.request is None or m.request.request_id not in settled)
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
