"""The allocation request contract (version 1): the JSON body of each SQS FIFO message.

MessageGroupId must equal ``workspace_id`` (one child, one group: the serialization that
makes absolute transfers safe) and MessageDeduplicationId is ``request_id``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import InitErrorDetails

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
    source: Literal["service", "sweep", "reclaim"] = "service"
    run_id: OptionalLabel | None = None


AllocationRequest = Annotated[EnsureRequest | ReleaseRequest, Field(discriminator="kind")]
ALLOCATION_REQUEST: TypeAdapter[EnsureRequest | ReleaseRequest] = TypeAdapter(AllocationRequest)


_TAG_ERRORS = frozenset({"union_tag_invalid", "union_tag_not_found"})


def parse_request(body: str) -> EnsureRequest | ReleaseRequest:
    """Parse and validate one message body; raises ``pydantic.ValidationError`` naming the field."""
    try:
        return ALLOCATION_REQUEST.validate_json(body)
    except ValidationError as exc:
        errors = exc.errors()
        if not any(error["type"] in _TAG_ERRORS and not error["loc"] for error in errors):
            raise
        # pydantic reports a missing or unknown discriminator at the root (loc ``()``); put it
        # on ``kind`` so every rejection names the field to fix.
        raise ValidationError.from_exception_data(
            exc.title,
            [
                InitErrorDetails(
                    type=error["type"],
                    loc=("kind",)
                    if error["type"] in _TAG_ERRORS and not error["loc"]
                    else error["loc"],
                    input=error["input"],
                    ctx=error.get("ctx", {}),
                )
                for error in errors
            ],
            input_type="json",
        ) from None


OutcomeStatus = Literal[
    "hot-path",
    "topped-up",
    "topped-up-after-reclaim",
    "unmetered",
    "disabled",
    "released",
    "nothing-to-release",
    "requires-decommission",
    "rejected",
    "failed",
    "invalid",
]


class AllocationOutcome(BaseModel):
    """The terminal result of one request, published as an outcome event.

    ``status`` says what happened; ``error_code`` is set for rejections and failures
    (``orgPoolExhausted``, ``brandAiLimit``, ``workspaceBusy``, ...). Carries ids (it goes to
    the owning service and the logs) but never a secret.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    kind: Literal["ensure", "release", "unknown"]
    workspace_id: str
    status: OutcomeStatus
    error_code: str | None = None
    totals_before: Totals | None = None
    totals_after: Totals | None = None
    attempts: int = 0
    """SQS receive count of the message when it completed (1 = first delivery)."""
    coalesced: int = 1
    """How many ensures this result served (1 when not coalesced)."""
    source: str | None = None
    run_id: str | None = None
    org_id: str | None = None
    brand_id: str | None = None
