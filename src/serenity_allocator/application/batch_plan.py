"""Planning a batch: validate every record up front, then coalesce consecutive ensures.

Validation happens here rather than through Powertools' ``model=``: with a model, a malformed
record behind a failed one raises for the whole invocation (Powertools 3.37).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from ..domain.coalescing import EnsureRun, PlannedMessage, plan_ensure_runs
from ..domain.messages import EnsureRequest, ReleaseRequest, parse_request


@dataclass(frozen=True)
class InboundMessage:
    """One SQS record as the worker needs it, read from the event at the edge."""

    message_id: str
    group_id: str
    body: str
    receive_count: int = 1
    sent_timestamp_ms: float | None = None


@dataclass(frozen=True)
class BatchMessage:
    """One record of the batch: its request when valid, otherwise why it is invalid."""

    inbound: InboundMessage
    request: EnsureRequest | ReleaseRequest | None
    invalid_reason: str | None = None

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
    try:
        request = parse_request(inbound.body)
    except ValidationError as exc:
        return BatchMessage(inbound, None, describe_validation(exc))
    if request.workspace_id != inbound.group_id:
        return BatchMessage(inbound, None, "MessageGroupId: must equal workspace_id")
    return BatchMessage(inbound, request)


def plan_batch(inbound: Sequence[InboundMessage], *, dynamic_allocation: bool) -> BatchPlan:
    """Validate every record and plan the coalesced ensure runs (none when allocation is off)."""
    messages = {m.message_id: m for m in map(read_message, inbound)}
    runs = plan_ensure_runs(
        [
            PlannedMessage(m.message_id, m.group_id, m.request)
            for m in messages.values()
            if dynamic_allocation or not isinstance(m.request, EnsureRequest)
        ]
    )
    return BatchPlan(messages=messages, order=tuple(messages), runs=runs)


def describe_validation(exc: ValidationError) -> str:
    """One line naming every field at fault (the DLQ reason)."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = [str(p) for p in err["loc"]]
        if loc and loc[0] in ("ensure", "release"):  # the discriminator's tag adds nothing
            loc = loc[1:]
        if err["type"] == "json_invalid":
            return f"body: not valid JSON ({err['msg']})"
        problems.append(f"{'.'.join(loc) or 'body'}: {err['msg']}")
    return "; ".join(problems)
