"""The allocation request contract (version 1): the JSON body of each SQS FIFO message.

MessageGroupId must equal ``workspace_id`` (one child, one group: the serialization that
makes absolute transfers safe) and MessageDeduplicationId is ``request_id``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

from .model import Totals

WorkspaceId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
RequestId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
OptionalLabel = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)
]


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    version: Literal[1] = 1
    request_id: RequestId
    workspace_id: WorkspaceId
    org_id: OptionalLabel | None = None
    brand_id: OptionalLabel | None = None


class StrictTotals(Totals):
    """Totals as they arrive on the wire: integers only, no coercion from strings or floats."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class EnsureRequest(_Message):
    """Top the child up so it can take ``need`` more units before a metered write."""

    kind: Literal["ensure"]
    parent_workspace_id: WorkspaceId
    need: StrictTotals = Field(default_factory=StrictTotals)
    include_drafted: bool = False
    ceiling: StrictTotals | None = None


class ReleaseRequest(_Message):
    """Hand the child's surplus back to the pool, never below ``floor``."""

    kind: Literal["release"]
    floor: StrictTotals | None = None
    """Absent: one block per dimension (the worker's configured blocks)."""
    source: Literal["service", "sweep"] = "service"
    run_id: OptionalLabel | None = None


AllocationRequest = Annotated[EnsureRequest | ReleaseRequest, Field(discriminator="kind")]
ALLOCATION_REQUEST: TypeAdapter[EnsureRequest | ReleaseRequest] = TypeAdapter(AllocationRequest)


def parse_request(body: str) -> EnsureRequest | ReleaseRequest:
    """Parse and validate one message body; raises ``pydantic.ValidationError`` naming the field."""
    return ALLOCATION_REQUEST.validate_json(body)
