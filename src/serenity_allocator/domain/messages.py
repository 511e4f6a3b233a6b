"""The allocation request contract (version 1): the JSON body of each SQS FIFO message.

MessageGroupId must equal ``workspace_id`` (one child, one group: the serialization that
makes absolute transfers safe) and MessageDeduplicationId is ``request_id``.

The parser accepts exactly what the generated JSON Schema (docs/schemas) accepts: every rule on
a single field is a schema rule (patterns, bounds), nothing is rewritten (no stripping: the id
the caller sent is the id its outcome is stored under), and a number is read with JSON's
semantics (one number type: ``250.0`` and ``2.5e2`` are the integer 250). The two rules a schema
cannot state, a parent equal to the child and a group id that is not the workspace id, are
checked by the worker after parsing (:func:`cross_field_problem`) and end with an ``invalid``
outcome under the request id (docs/decisions/0003-async-worker-contract.md).

The contract's other side is here too: the outcome event a request ends with
(:class:`AllocationOutcome`), built in one shape by :func:`build_outcome` for every path that
ends a request; and the one way an input's faults are told (:func:`describe_validation_error`:
every field at fault, never its value), for a message, a sweep payload or the environment.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails

from .model import Totals
from .sizing import Ceiling

MAX_UNITS_PER_DIMENSION = 1_000_000
"""The largest need, ceiling or floor a message may carry per dimension (docs/configuration.md).

Far above any real org pool and far below int64, so no arithmetic on it can overflow upstream."""

WORKSPACE_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
"""The upstream's id alphabet. No '.', so an id can never be a '.' or '..' path segment (httpx
collapses those), and no control, space or bidi characters can reach a URL path."""

REQUEST_ID_PATTERN = r"^[!-~]{1,128}$"
"""SQS's MessageDeduplicationId alphabet and length: 1 to 128 ASCII letters, digits and
punctuation (U+0021 to U+007E), so every valid request id is also a valid deduplication id."""

LABEL_PATTERN = REQUEST_ID_PATTERN
"""Org, brand and run labels: the same printable-ASCII alphabet (no space, no control)."""

WorkspaceId = Annotated[str, StringConstraints(pattern=WORKSPACE_ID_PATTERN)]
RequestId = Annotated[str, StringConstraints(pattern=REQUEST_ID_PATTERN)]
OptionalLabel = Annotated[str, StringConstraints(pattern=LABEL_PATTERN)]


def _json_integer(value: object) -> object:
    # JSON has one number type: an integral float (250.0, 2.5e2) is that integer, as the
    # schema's "integer" says. A bool stays a bool, so the strict int check still refuses it.
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def _exactly_int_one(value: object) -> object:
    # A Literal[1] alone accepts True (it compares equal to 1); the contract says the number 1.
    value = _json_integer(value)
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


BoundedCount = Annotated[
    int, Field(ge=0, le=MAX_UNITS_PER_DIMENSION), BeforeValidator(_json_integer)
]


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
    include_drafted: bool = True
    """Count drafted prompts as used when sizing a prompt top-up: the write gate meters
    ``used + drafted + batch``, so an ensure that leaves drafts out can be topped up and still
    see its write refused. Send ``false`` only when the child has no drafts by construction."""
    ceiling: StrictCeiling | None = None
    """Per-brand cap; a dimension left out (or 0) is not enforced."""


class ReleaseRequest(_Message):
    """Hand the child's surplus back to the pool, never below ``floor``."""

    kind: Literal["release"]
    floor: StrictTotals | None = None
    """Absent: one block per dimension (the worker's configured blocks)."""
    source: Literal["service", "sweep", "reclaim"] = "service"
    run_id: OptionalLabel | None = None


AllocationRequest = Annotated[EnsureRequest | ReleaseRequest, Field(discriminator="kind")]
ALLOCATION_REQUEST: TypeAdapter[EnsureRequest | ReleaseRequest] = TypeAdapter(AllocationRequest)


def cross_field_problem(request: EnsureRequest | ReleaseRequest, group_id: str) -> str | None:
    """What makes a schema-valid request invalid, as ``field: message``; None when nothing.

    The two rules JSON Schema cannot state: the message's group id is its workspace id (one
    child, one group), and an ensure's parent is not the child itself (a master is never its
    own child; a transfer on it would move the pool itself).
    """
    if request.workspace_id != group_id:
        return "MessageGroupId: must equal workspace_id"
    if isinstance(request, EnsureRequest) and request.parent_workspace_id == request.workspace_id:
        return "parent_workspace_id: must differ from workspace_id"
    return None


_TAG_ERRORS = frozenset({"union_tag_invalid", "union_tag_not_found"})


def _refuse_constant(name: str) -> object:
    # NaN and Infinity are not JSON (RFC 8259); Python's json module reads them unless told.
    raise ValueError(f"{name} is not a JSON value")


def read_json(body: str) -> object:
    """The body as JSON exactly as RFC 8259 and ``JSON.parse`` read it, else ``ValueError``.

    Python's ``json`` module with NaN/Infinity refused: the last of duplicate keys wins and a
    lone surrogate escape is a (lone) character, as in JavaScript, so the schema's verdict on
    ``JSON.parse(body)`` and the worker's verdict agree on every body.
    """
    try:
        return json.loads(body, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


def parse_request(body: str) -> EnsureRequest | ReleaseRequest:
    """Parse and validate one message body; raises ``pydantic.ValidationError`` naming the field."""
    try:
        data = read_json(body)
    except ValueError as exc:
        raise ValidationError.from_exception_data(
            "AllocationRequest",
            [InitErrorDetails(type="json_invalid", loc=(), input=body, ctx={"error": str(exc)})],
            input_type="json",
        ) from None
    try:
        return ALLOCATION_REQUEST.validate_python(data)
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
    "rightsized",
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


# A request's terminal outcome: one shape for every path that ends a request.


@dataclass(frozen=True)
class ServingCall:
    """The call that served a request: the child's totals before and after it.

    ``covered``: how many requests it served (1: the request's own call; more: a coalesced
    run's one call).
    """

    before: Totals
    after: Totals
    covered: int = 1


def build_outcome(
    request: EnsureRequest | ReleaseRequest,
    status: OutcomeStatus,
    receive_count: int,
    *,
    error_code: str | None = None,
    served: ServingCall | None = None,
) -> AllocationOutcome:
    """The outcome event of ``request``, labelled with the receive it completed on.

    ``served``: the call that served it, if one did (its totals are the outcome's).
    """
    return AllocationOutcome(
        request_id=request.request_id,
        kind=request.kind,
        workspace_id=request.workspace_id,
        status=status,
        error_code=error_code,
        totals_before=served.before if served is not None else None,
        totals_after=served.after if served is not None else None,
        receive_count=receive_count,
        coalesced=served.covered if served is not None else 1,
        source=request.source if isinstance(request, ReleaseRequest) else None,
        run_id=request.run_id if isinstance(request, ReleaseRequest) else None,
        org_id=request.org_id,
        brand_id=request.brand_id,
    )


# One way to say what is wrong with an input: every field at fault, never its value.


def not_a_dot_segment(value: str) -> str:
    """Refuse ``.`` and ``..``: an id used in a path or key must never name a directory step.

    For an ``AfterValidator`` on id fields, so the refusal is a ``ValidationError`` naming the
    field, not a later ``ValueError`` from the store that builds the key.
    """
    if value in (".", ".."):
        raise ValueError("must not be '.' or '..'")
    return value


def describe_validation_error(
    exc: ValidationError, *, whole: str = "document", skip: Collection[str] = ()
) -> str:
    """Every problem as ``field.path: message``, joined with ``; `` (values never quoted).

    Args:
        exc: The pydantic error.
        whole: The name of the input itself, for a problem with no field path (``body``,
            ``environment``...); input that is not JSON at all is reported on it alone.
        skip: Leading path parts that add nothing (a discriminated union's tags).
    """
    problems = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        if err["type"] == "json_invalid":
            return f"{whole}: not valid JSON ({err['msg']})"
        loc = [str(part) for part in err["loc"]]
        if loc and loc[0] in skip:
            loc = loc[1:]
        problems.append(f"{'.'.join(loc) or whole}: {err['msg']}")
    return "; ".join(problems)
