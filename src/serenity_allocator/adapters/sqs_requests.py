"""The requests the allocation queue accepts, built and validated before anything is sent.

Every message is built with the domain's request models (a service can only enqueue a valid
version-1 message), and its ids are checked against SQS's FIFO id rules, naming the field.
:func:`build_ensure` (its optional parts spelled out once, :class:`EnsureOptions`) makes every
ensure: every sender (the producer, the write guard, the tools) passes the
:class:`EnsureRequest` it returns. :func:`build_release` likewise, with
:class:`ReleaseOptions`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, TypedDict, Unpack

from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from ..domain.messages import EnsureRequest, ReleaseRequest
from ..domain.model import Totals
from .sqs_limits import FIFO_ID_PATTERN, is_valid_fifo_id

AllocationRequestModel = EnsureRequest | ReleaseRequest
TotalsInput = Totals | Mapping[str, int]


class EnsureOptions(TypedDict, total=False):
    """An ensure's optional parts, by name, spelled out here only.

    They are the keywords of :func:`build_ensure` and of
    :meth:`AllocationProducer.enqueue_ensure`.
    """

    include_drafted: bool
    """Count drafted units as used when sizing the top-up (default True, as the contract
    says: the schema, the worker's model and the Node client). The write gate meters prompts
    on used + drafted + batch; pass False only for a dimension without drafts."""
    ceiling: TotalsInput | None
    """A per-brand cap on the child's totals; a dimension left out is not enforced."""
    org_id: str | None
    """A label carried into logs and outcomes."""
    brand_id: str | None
    """A label carried into logs and outcomes."""
    request_id: str | None
    """The idempotency key (the message's deduplication id); a new UUID4 when absent."""


def build_ensure(
    workspace_id: str,
    parent_workspace_id: str,
    need: TotalsInput | None = None,
    **options: Unpack[EnsureOptions],
) -> EnsureRequest:
    """Build and validate an ensure request (every sender's, the producer's included).

    Args:
        workspace_id: The child workspace that will write.
        parent_workspace_id: Its master workspace (the org pool).
        need: Units the write will consume (absent: zero, i.e. just the block headroom).
        **options: The optional parts (:class:`EnsureOptions`).

    The result is what :meth:`AllocationProducer.enqueue` and the write guard's port take.

    Raises:
        TypeError: An option that is not one of :class:`EnsureOptions` (named).
        pydantic.ValidationError: An argument breaks the message contract (names the field).
    """
    _refuse_unknown(options, EnsureOptions.__optional_keys__, "build_ensure")
    fields: dict[str, Any] = {
        "kind": "ensure",
        "request_id": _request_id(options.get("request_id")),
        "workspace_id": workspace_id,
        "parent_workspace_id": parent_workspace_id,
        "include_drafted": options.get("include_drafted", True),
        "ceiling": _totals_input(options.get("ceiling")),
        "org_id": options.get("org_id"),
        "brand_id": options.get("brand_id"),
    }
    if need is not None:
        fields["need"] = _totals_input(need)
    request = EnsureRequest.model_validate(fields)
    check_fifo_ids(request)
    if request.parent_workspace_id == request.workspace_id:
        # The worker would refuse it (an ``invalid`` outcome); refuse before sending instead.
        raise ValidationError.from_exception_data(
            "EnsureRequest",
            [
                {
                    "type": "value_error",
                    "loc": ("parent_workspace_id",),
                    "input": parent_workspace_id,
                    "ctx": {"error": "must differ from workspace_id"},
                }
            ],
        )
    return request


class ReleaseOptions(TypedDict, total=False):
    """A release's optional parts, by name, spelled out here only.

    They are the keywords of :func:`build_release` and of
    :meth:`AllocationProducer.enqueue_release`.
    """

    floor: TotalsInput | None
    """The lowest totals to keep (absent: one block per dimension)."""
    source: str
    """``"service"`` (the default) or ``"sweep"``."""
    run_id: str | None
    """The sweep run that asked (sweep only)."""
    org_id: str | None
    """A label carried into logs and outcomes."""
    brand_id: str | None
    """A label carried into logs and outcomes."""
    request_id: str | None
    """The idempotency key (the message's deduplication id); a new UUID4 when absent."""


def build_release(workspace_id: str, **options: Unpack[ReleaseOptions]) -> ReleaseRequest:
    """Build and validate a release request (see :meth:`AllocationProducer.enqueue_release`).

    Args:
        workspace_id: The child workspace to lower.
        **options: The optional parts (:class:`ReleaseOptions`).

    Raises:
        TypeError: An option that is not one of :class:`ReleaseOptions` (named).
        pydantic.ValidationError: An argument breaks the message contract (names the field).
    """
    _refuse_unknown(options, ReleaseOptions.__optional_keys__, "build_release")
    request = ReleaseRequest.model_validate(
        {
            "kind": "release",
            "request_id": _request_id(options.get("request_id")),
            "workspace_id": workspace_id,
            "floor": _totals_input(options.get("floor")),
            "source": options.get("source", "service"),
            "run_id": options.get("run_id"),
            "org_id": options.get("org_id"),
            "brand_id": options.get("brand_id"),
        }
    )
    check_fifo_ids(request)
    return request


def _refuse_unknown(options: Mapping[str, object], known: frozenset[str], builder: str) -> None:
    # Unpack[...] is checked by type checkers only; a caller without one must hear it too.
    for name in options:
        if name not in known:
            raise TypeError(f"{builder}() got an unexpected keyword argument {name!r}")


def _request_id(request_id: str | None) -> str:
    return str(uuid.uuid4()) if request_id is None else request_id


def _totals_input(value: TotalsInput | None) -> dict[str, Any] | None:
    # The wire models are strict (no coercion), so a plain Totals is handed over as its fields.
    if value is None:
        return None
    if isinstance(value, Totals):
        return value.as_dict()
    return dict(value)


def check_fifo_ids(request: AllocationRequestModel) -> None:
    """Refuse ids SQS would reject as group or deduplication ids, naming the field."""
    errors: list[InitErrorDetails] = [
        {
            "type": "string_pattern_mismatch",
            "loc": (field,),
            "input": value,
            "ctx": {"pattern": FIFO_ID_PATTERN},
        }
        for field, value in (
            ("workspace_id", request.workspace_id),
            ("request_id", request.request_id),
        )
        if not is_valid_fifo_id(value)
    ]
    if errors:
        raise ValidationError.from_exception_data(type(request).__name__, errors)
