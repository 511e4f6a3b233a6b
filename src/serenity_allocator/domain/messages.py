"""The allocation request contract (version 1): the JSON body of each SQS FIFO message.

MessageGroupId must equal ``workspace_id`` (one child, one group: the serialization that
makes absolute transfers safe) and MessageDeduplicationId is ``request_id``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from .ceiling import Ceiling
from .model import Totals

MAX_UNITS_PER_DIMENSION = 1_000_000
"""The largest need, ceiling or floor a message may carry per dimension (docs/configuration.md).

Far above any real org pool and far below int64, so no arithmetic on it can overflow upstream."""

WORKSPACE_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
"""The upstream's id alphabet. No '.', so an id can never be a '.' or '..' path segment (httpx
collapses those), and no control, space or bidi characters can reach a URL path."""

# Surrounding whitespace is stripped first; the stripped id is checked and is the one used
# (URL segment, group id), so nothing outside the alphabet ever reaches the upstream.
WorkspaceId = Annotated[str, StringConstraints(strip_whitespace=True, pattern=WORKSPACE_ID_PATTERN)]
RequestId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
OptionalLabel = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)
]


def _exactly_int_one(value: object) -> object:
    # A Literal[1] alone accepts 1.0 and True (they compare equal to 1); the contract says the
    # integer 1.
    if type(value) is not int:
        raise ValueError("must be the integer 1")
    return value


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    version: Annotated[Literal[1], BeforeValidator(_exactly_int_one)] = 1
    request_id: RequestId
    workspace_id: WorkspaceId
    org_id: OptionalLabel | None = None
    brand_id: OptionalLabel | None = None


BoundedCount = Annotated[int, Field(ge=0, le=MAX_UNITS_PER_DIMENSION)]


class StrictTotals(Totals):
    """Totals as they arrive on the wire: integers only, no coercion from strings or floats."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    projects: BoundedCount = 0
    prompts: BoundedCount = 0


class StrictCeiling(Ceiling):
    """A ceiling as it arrives on the wire: integers only; an absent dimension is not enforced."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    projects: BoundedCount | None = None
    prompts: BoundedCount | None = None


class EnsureRequest(_Message):
    """Top the child up so it can take ``need`` more units before a metered write."""

    kind: Literal["ensure"]
    parent_workspace_id: WorkspaceId
    need: StrictTotals = Field(default_factory=StrictTotals)
    include_drafted: bool = False
    ceiling: StrictCeiling | None = None
    """Per-brand cap; a dimension left out (or 0) is not enforced."""

    @field_validator("parent_workspace_id")
    @classmethod
    def _parent_is_not_the_child(cls, value: str, info: ValidationInfo) -> str:
        # A master is never its own child; a transfer on it would move the pool itself.
        if value == info.data.get("workspace_id"):
            raise ValueError("must differ from workspace_id")
        return value


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
        tag_errors = [e for e in exc.errors() if e["type"] in _TAG_ERRORS and not e["loc"]]
        if not tag_errors:
            raise
        # pydantic reports a missing or unknown discriminator as the union's one error, at the
        # root (loc ``()``); put it on ``kind`` so every rejection names the field to fix.
        raise ValidationError.from_exception_data(
            exc.title,
            [
                InitErrorDetails(
                    type=error["type"],
                    loc=("kind",),
                    input=error["input"],
                    ctx=error.get("ctx", {}),
                )
                for error in tag_errors
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
    receive_count: int = 0
    """SQS receive count of the message when it completed (1 = first delivery)."""
    coalesced: int = 1
    """How many ensures this result served (1 when not coalesced)."""
    source: str | None = None
    run_id: str | None = None
    org_id: str | None = None
    brand_id: str | None = None
    dead_lettered: Literal[True] | None = None
    """True when the request ends in the DLQ with this outcome (operators may redrive it);
    absent otherwise, so outcome events of completed requests keep their shape."""
    supersedes: Literal["deadLettered"] | None = None
    """Set on the outcome of a redriven request: it replaces the earlier dead-lettered one."""
    sequence_number: str | None = Field(default=None, pattern=r"^[0-9]{1,40}$")
    """The order key: the SQS ``SequenceNumber`` of the message that produced this outcome.
    It increases with the request's position in its child's message group, so a caller orders
    a child's outcomes by it (compared as integers), never by their arrival: EventBridge
    promises no delivery order. A replayed outcome carries its first delivery's number (the
    message keeps it); absent where no message is known (an outcome the DLQ audit records)."""

    @model_validator(mode="before")
    @classmethod
    def _read_legacy_receive_count(cls, data: object) -> object:
        # Outcomes stored before ``receive_count`` was named for what it is carry ``attempts``.
        if isinstance(data, dict) and "attempts" in data and "receive_count" not in data:
            data = {**data, "receive_count": data["attempts"]}
            del data["attempts"]
        return data
