"""Amazon SQS: the allocation queue's producer side (what services send) and the dead letters.

Every message is built and validated with the domain's request models, so a service can only
enqueue a valid version-1 message, and the FIFO ids are derived, never passed: MessageGroupId is
the request's ``workspace_id`` (one child, one group, the serialization the worker relies on)
and MessageDeduplicationId is its ``request_id`` (so a retried send within SQS's five-minute
deduplication window is harmless).

In order: what Amazon SQS accepts in ids, bodies and attributes (checked before a send: SQS
refuses a whole ``SendMessage`` over one bad character, so a caller gets a clear error naming
the field, or the dead-letter sender picks a safe encoding; sources: the SQS API reference for
``SendMessage`` and ``SendMessageBatch``); the requests, built and validated before anything
is sent (:func:`build_ensure` with :class:`EnsureOptions`, :func:`build_release` with
:class:`ReleaseOptions`: every sender, the producer, the write guard and the tools, passes the
request they return); the producer that sends them.

The SQS client is built on first use with bounded timeouts and retries (:mod:`.aws_clients`);
the endpoint follows boto3's configuration (``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_SQS``,
boto3 >= 1.28), so the same code talks to a local moto server.

At the end, the dead letters: an invalid allocation message (bad JSON, schema error, group id
not the workspace id) can never succeed, so the worker moves it to the FIFO DLQ itself, right
away, instead of letting it burn receives and delay its group. The body goes unchanged so an
operator sees exactly what the service sent; the validation error travels as a message
attribute, in the encoding SQS accepts.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypedDict, Unpack

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from serenity_allocator.adapters.aws_clients import (
    AWS_CALL_BUDGET_S,
    LazyClient,
    aws_error_code,
    sqs_client,
)
from serenity_allocator.adapters.request_authority import (
    CredentialHandover,
    CredentialHandoverError,
    UserCredential,
)
from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest
from serenity_allocator.domain.model import Totals

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import (
        MessageAttributeValueTypeDef,
        SendMessageBatchRequestEntryTypeDef,
    )

_log = logging.getLogger(__name__)

__all__ = [
    "AllocationProducer",
    "AllocationRequestModel",
    "EnqueueError",
    "EnsureOptions",
    "ReleaseOptions",
    "TotalsInput",
    "build_ensure",
    "build_release",
]

# -- what SQS accepts ------------------------------------------------------------------------

MAX_BATCH_ENTRIES = 10
"""SendMessageBatch and PutEvents both take at most 10 entries per call."""

MAX_FIFO_ID_LENGTH = 128

# Group and deduplication ids: alphanumerics and ASCII punctuation, 1..128 characters.
_FIFO_ID = re.compile(r"[A-Za-z0-9!-/:-@\[-`{-~]{1,128}")
FIFO_ID_PATTERN = _FIFO_ID.pattern

# Message bodies and String attribute values: XML 1.0 characters only.
_NOT_SQS_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def is_valid_fifo_id(value: str) -> bool:
    """True when ``value`` is usable as a MessageGroupId or MessageDeduplicationId."""
    return _FIFO_ID.fullmatch(value) is not None


def is_sqs_text(value: str) -> bool:
    """True when every character of ``value`` is one SQS accepts in a body or String attribute."""
    return _NOT_SQS_TEXT.search(value) is None


def to_sqs_text(value: str, replacement: str = "?") -> str:
    """``value`` with every character SQS refuses replaced (for diagnostics, never bodies)."""
    return _NOT_SQS_TEXT.sub(replacement, value)


# -- the requests ----------------------------------------------------------------------------

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


# -- the producer ----------------------------------------------------------------------------


class EnqueueError(RuntimeError):
    """One or more requests could not be enqueued; nothing listed here reached the queue.

    Attributes:
        failed_request_ids: The request ids that were not enqueued, in the caller's order
            (a failed batch also lists the requests after it, which were not attempted).
        reason: The SQS error code or the kind of failure.
    """

    def __init__(self, failed_request_ids: Sequence[str], reason: str) -> None:
        self.failed_request_ids = tuple(failed_request_ids)
        self.reason = reason
        super().__init__(
            f"{len(self.failed_request_ids)} allocation request(s) not enqueued ({reason}): "
            + ", ".join(self.failed_request_ids)
        )


class AllocationProducer:
    """Enqueues ensure and release requests on the allocation FIFO queue.

    Args:
        queue_url: The allocation queue's URL (``QUEUE_URL``).
        sqs: An optional ready SQS client; otherwise one is built on first use
            (:func:`.aws_clients.sqs_client`), honouring the standard endpoint variables.
        call_budget_s: The longest one call may take, retries included (sizes the client's
            timeouts and attempts).
        credentials: Opt-in: where a request's user authority is handed over
            (:class:`.request_authority.CredentialHandover`). Without it, requests carry no
            credential (the worker's local static-token mode) and passing one is an error.
    """

    def __init__(
        self,
        queue_url: str,
        sqs: SQSClient | None = None,
        *,
        call_budget_s: float = AWS_CALL_BUDGET_S,
        credentials: CredentialHandover | None = None,
    ) -> None:
        if not queue_url.strip():
            raise ValueError("the allocation queue URL is blank")
        self._queue_url = queue_url
        self._sqs = LazyClient(lambda: sqs_client(call_budget_s), sqs)
        self._credentials = credentials

    @property
    def queue_url(self) -> str:
        """The queue this producer sends to."""
        return self._queue_url

    def _client(self) -> SQSClient:
        return self._sqs.get()

    def enqueue_ensure(
        self,
        workspace_id: str,
        parent_workspace_id: str,
        need: TotalsInput | None = None,
        *,
        credential: UserCredential | None = None,
        **options: Unpack[EnsureOptions],
    ) -> str:
        """Ask for headroom on a child before a metered write: ``enqueue(build_ensure(...))``.

        ``workspace_id``, ``parent_workspace_id``, ``need`` and ``**options`` are the request's,
        as :func:`build_ensure` takes them (its optional parts: ``include_drafted``,
        ``ceiling``, ``org_id``, ``brand_id``, ``request_id``); ``credential`` is the user
        authority the request runs under. It returns and raises what :func:`build_ensure` and
        :meth:`enqueue` do: the request id, or ``TypeError`` and ``pydantic.ValidationError``
        for a request that breaks the contract, ``EnqueueError`` when it was not enqueued.
        """
        return self.enqueue(
            build_ensure(workspace_id, parent_workspace_id, need, **options),
            credential=credential,
        )

    def enqueue_release(
        self,
        workspace_id: str,
        *,
        credential: UserCredential | None = None,
        **options: Unpack[ReleaseOptions],
    ) -> str:
        """Hand a child's surplus back to its pool, never below ``floor``.

        ``workspace_id`` and ``**options`` are the request's, as :func:`build_release` takes
        them (its optional parts: ``floor`` (absent: one block per dimension), ``source``
        (``"service"`` or ``"sweep"``), ``run_id`` (sweep only), ``org_id``, ``brand_id``,
        ``request_id``); ``credential`` as :meth:`enqueue_ensure` says. It returns and raises
        what :func:`build_release` and :meth:`enqueue` do.
        """
        return self.enqueue(build_release(workspace_id, **options), credential=credential)

    def enqueue(
        self, request: AllocationRequestModel, *, credential: UserCredential | None = None
    ) -> str:
        """Enqueue one ready-built request (:func:`build_ensure`, :func:`build_release`).

        This is the request value every sender passes (the write guard's port is this method):
        the parameters of an ensure are spelled out once, in :func:`build_ensure`.

        With a ``credential`` (a producer built with ``credentials``), the request's promise
        token (minted here from an access token, or the one given) is written to the
        credentials table BEFORE the message is sent, and removed again if the send fails; the
        message is the same version-1 message, with no token in it.

        Returns:
            The request id (the message's deduplication id).

        Raises:
            pydantic.ValidationError: The request's ids are unusable as SQS FIFO ids.
            ValueError: A credential given to a producer without ``credentials``.
            NeedsReauthError: IMS refused the user's access token at mint.
            ImsUnavailableError: IMS could not mint in time.
            EnqueueError: SQS, DynamoDB or KMS refused or could not be reached; the request
                was not enqueued (a credential problem's reason starts ``credential:``).
        """
        if not isinstance(request, EnsureRequest | ReleaseRequest):
            raise TypeError(f"not an allocation request: {type(request).__name__}")
        check_fifo_ids(request)
        if credential is None:
            self._send_one(request)
            return request.request_id
        if self._credentials is None:
            raise ValueError("credential given, but this producer has no credential store")
        try:
            receipt = self._credentials.write(request.request_id, request.workspace_id, credential)
        except CredentialHandoverError as exc:
            raise EnqueueError([request.request_id], f"credential:{exc.reason}") from None
        try:
            self._send_one(request)
        except EnqueueError as exc:
            # Only what this call wrote (an older record is not ours), and only when SQS
            # answered a refusal: a lost answer may hide a delivered message that needs it.
            if receipt is not None and refused_before_delivery(exc.__cause__):
                self._credentials.take_back(receipt)
            raise
        return request.request_id

    def acting_as(self, credential: UserCredential) -> UserProducer:
        """The producer for one user: every request it enqueues carries that user's authority.

        What a :class:`~serenity_allocator.write_guard.WriteGuard` takes in IMS mode (its front
        and recovery ensures are requests of their own, each handed over before it is sent).

        Raises:
            ValueError: A promise token (one promise serves one request: the worker's exchange
                of the first kills it for the next; give the user's access token, minted per
                request) or a producer without ``credentials``.
        """
        if credential.promise_token is not None:
            raise ValueError(
                "credential: a producer acting as a user sends several requests; give the "
                "user's access token (UserCredential.access) so each gets its own promise token"
            )
        if self._credentials is None:
            raise ValueError("credential given, but this producer has no credential store")
        return UserProducer(self, credential)

    def enqueue_many(self, requests: Sequence[AllocationRequestModel]) -> list[str]:
        """Enqueue ready-built requests with SendMessageBatch, at most 10 per call.

        Every request is checked before anything is sent. Entries SQS fails are retried once
        (safe: the deduplication id is the request id); if any still fails, sending stops and
        :class:`EnqueueError` lists the failed requests and the ones not attempted. Order within
        one workspace is the order given, except that a retried entry lands after any later
        entry of the same workspace that succeeded in the same call.

        Args:
            requests: Ensure and release requests, in the order they should apply.

        Returns:
            The request ids, in the order given.

        Raises:
            pydantic.ValidationError: A request's ids are unusable as SQS FIFO ids (names the
                field); nothing was sent.
            EnqueueError: Some requests were not enqueued (the ones before them were).
        """
        for request in requests:
            if not isinstance(request, EnsureRequest | ReleaseRequest):
                raise TypeError(f"not an allocation request: {type(request).__name__}")
            check_fifo_ids(request)
        ordered_ids = [request.request_id for request in requests]
        for start in range(0, len(requests), MAX_BATCH_ENTRIES):
            chunk = requests[start : start + MAX_BATCH_ENTRIES]
            # Stop at the first chunk that fails: sending later requests of the same workspace
            # ahead of a failed one would reorder that workspace's group.
            not_attempted = ordered_ids[start + len(chunk) :]
            try:
                failed, reason = self._send_chunk(chunk)
            except EnqueueError as exc:
                raise EnqueueError(
                    [*exc.failed_request_ids, *not_attempted], exc.reason
                ) from exc.__cause__
            if failed:
                raise EnqueueError([*failed, *not_attempted], reason)
        return ordered_ids

    def _send_one(self, request: AllocationRequestModel) -> None:
        entry = _entry(request)
        try:
            self._client().send_message(
                QueueUrl=self._queue_url,
                MessageBody=entry["MessageBody"],
                MessageGroupId=entry["MessageGroupId"],
                MessageDeduplicationId=entry["MessageDeduplicationId"],
            )
        except (ClientError, BotoCoreError) as exc:
            raise EnqueueError([request.request_id], aws_error_code(exc)) from exc

    def _send_chunk(self, chunk: Sequence[AllocationRequestModel]) -> tuple[list[str], str]:
        """Send one batch, retry its failed entries once; return (still failed ids, reason)."""
        # Entry ids only need to be unique within the call; the index maps answers back.
        pending: dict[str, SendMessageBatchRequestEntryTypeDef] = {
            str(index): _entry(request, str(index)) for index, request in enumerate(chunk)
        }
        reason = ""
        for _attempt in range(2):
            try:
                response = self._client().send_message_batch(
                    QueueUrl=self._queue_url, Entries=list(pending.values())
                )
            except (ClientError, BotoCoreError) as exc:
                failed_ids = [chunk[int(entry_id)].request_id for entry_id in pending]
                raise EnqueueError(failed_ids, aws_error_code(exc)) from exc
            failed = response.get("Failed", [])
            if not failed:
                return [], ""
            reason = ", ".join(sorted({item["Code"] for item in failed}))
            pending = {item["Id"]: pending[item["Id"]] for item in failed}
            _log.warning(
                "allocation requests failed in SendMessageBatch",
                extra={"failed": len(failed), "codes": reason},
            )
        return [chunk[int(entry_id)].request_id for entry_id in sorted(pending, key=int)], reason


_THROTTLING_MARK: Final = "throttl"


def refused_before_delivery(error: BaseException | None) -> bool:
    """True only when SQS surely did not take the message: one attempt, answered with a refusal.

    A timeout, a dropped connection or a 5xx may hide a delivered message (SQS applied it, the
    answer was lost), and so may a refusal after a retry (the earlier attempt may have landed).
    A throttle is not a refusal of the message either (the same send may pass a moment later).
    """
    if not isinstance(error, ClientError):
        return False
    metadata = error.response.get("ResponseMetadata", {})
    status = int(metadata.get("HTTPStatusCode", 0))
    answered_once = int(metadata.get("RetryAttempts", 0)) == 0
    throttled = _THROTTLING_MARK in aws_error_code(error).lower()
    return answered_once and 400 <= status < 500 and not throttled


class UserProducer:
    """An :class:`AllocationProducer` acting as one user (:meth:`AllocationProducer.acting_as`)."""

    def __init__(self, producer: AllocationProducer, credential: UserCredential) -> None:
        self._producer = producer
        self._credential = credential

    def enqueue(self, request: AllocationRequestModel) -> str:
        """Enqueue ``request`` with the user's authority handed over first; its request id."""
        return self._producer.enqueue(request, credential=self._credential)

    def __repr__(self) -> str:
        return "UserProducer(credential=***)"


def _entry(
    request: AllocationRequestModel, entry_id: str = ""
) -> SendMessageBatchRequestEntryTypeDef:
    return {
        "Id": entry_id,
        "MessageBody": request.model_dump_json(exclude_none=True),
        "MessageGroupId": request.workspace_id,
        "MessageDeduplicationId": request.request_id,
    }


REASON_ATTRIBUTE = "serenity-invalid-reason"
SOURCE_MESSAGE_ID_ATTRIBUTE = "serenity-source-message-id"
SOURCE_DEDUP_ID_ATTRIBUTE = "serenity-source-dedup-id"
BODY_ENCODING_ATTRIBUTE = "serenity-body-encoding"
"""Absent: the body is the original text. ``base64``: the original UTF-8 bytes, base64-encoded
(the original held characters SQS refuses). ``empty``: the original body was empty."""

FALLBACK_GROUP_ID = "invalid"
MAX_REASON_CHARS = 1024
"""Validation errors can echo a whole body back; attributes count toward the message size."""

_EMPTY_BODY_PLACEHOLDER = "(empty)"


class DeadLetterError(RuntimeError):
    """The invalid message could not be sent to the DLQ; the caller must not complete it."""


class DeadLetterSender:
    """Sends invalid messages to the allocation FIFO DLQ.

    Args:
        dlq_url: The DLQ's URL (``DLQ_URL``).
        sqs: An optional ready SQS client; otherwise one is built on first use
            (:func:`.aws_clients.sqs_client`), honouring the standard endpoint variables.
        call_budget_s: The longest one call may take, retries included (sizes the client's
            timeouts and attempts).
    """

    def __init__(
        self,
        dlq_url: str,
        sqs: SQSClient | None = None,
        *,
        call_budget_s: float = AWS_CALL_BUDGET_S,
    ) -> None:
        if not dlq_url.strip():
            raise ValueError("the dead-letter queue URL is blank")
        self._dlq_url = dlq_url
        self._sqs = LazyClient(lambda: sqs_client(call_budget_s), sqs)

    @property
    def dlq_url(self) -> str:
        """The queue this sender writes to."""
        return self._dlq_url

    def _client(self) -> SQSClient:
        return self._sqs.get()

    def send_invalid(
        self,
        body: str,
        *,
        reason: str,
        group_id: str | None,
        dedup_id: str,
        source_message_id: str,
    ) -> None:
        """Send one invalid message's original body to the DLQ with its reason.

        The DLQ deduplication id is derived from ``source_message_id``, which SQS keeps across
        redeliveries, so dead-lettering the same message twice (a crash before its delete)
        stores it once. The group is the original one, so the DLQ keeps per-child order;
        ``"invalid"`` when the original had none.

        Args:
            body: The original message body, sent unchanged when SQS accepts its characters.
            reason: The validation error text (truncated to 1024 characters).
            group_id: The original MessageGroupId, if any.
            dedup_id: The original MessageDeduplicationId, kept as an attribute for tracing.
            source_message_id: The original SQS message id.

        Raises:
            DeadLetterError: SQS refused or could not be reached.
        """
        message_body, encoding = _encode_body(body)
        attributes: dict[str, MessageAttributeValueTypeDef] = {
            REASON_ATTRIBUTE: _string(reason[:MAX_REASON_CHARS] or "unknown"),
            SOURCE_MESSAGE_ID_ATTRIBUTE: _string(source_message_id or "unknown"),
        }
        if dedup_id.strip():
            attributes[SOURCE_DEDUP_ID_ATTRIBUTE] = _string(dedup_id[:MAX_REASON_CHARS])
        if encoding is not None:
            attributes[BODY_ENCODING_ATTRIBUTE] = _string(encoding)
        try:
            self._client().send_message(
                QueueUrl=self._dlq_url,
                MessageBody=message_body,
                MessageGroupId=_group_id(group_id),
                MessageDeduplicationId=_dedup_id(source_message_id),
                MessageAttributes=attributes,
            )
        except (ClientError, BotoCoreError) as exc:
            raise DeadLetterError("could not send the invalid message to the DLQ") from exc


def decode_dead_letter_body(body: str, encoding: str | None) -> str:
    """The original body of a dead letter, given its ``serenity-body-encoding`` attribute."""
    if encoding == "base64":
        return base64.b64decode(body).decode("utf-8", errors="surrogatepass")
    if encoding == "empty":
        return ""
    return body


def _encode_body(body: str) -> tuple[str, str | None]:
    if not body:
        # SQS refuses an empty body; only a hand-made event can carry one.
        return _EMPTY_BODY_PLACEHOLDER, "empty"
    if is_sqs_text(body):
        return body, None
    # surrogatepass: a lone surrogate cannot be UTF-8 encoded otherwise, and must round-trip.
    raw = body.encode("utf-8", errors="surrogatepass")
    return base64.b64encode(raw).decode("ascii"), "base64"


def _group_id(group_id: str | None) -> str:
    if group_id is None or not group_id.strip() or not is_valid_fifo_id(group_id):
        return FALLBACK_GROUP_ID
    return group_id


def _dedup_id(source_message_id: str) -> str:
    if is_valid_fifo_id(source_message_id):
        return source_message_id
    # Still deterministic, so a redelivery of the same message deduplicates.
    return hashlib.sha256(source_message_id.encode("utf-8", errors="surrogatepass")).hexdigest()


def _string(value: str) -> MessageAttributeValueTypeDef:
    # Attribute values obey the same character rules as bodies; they are diagnostics, so
    # replacing a refused character is fine here (never done to the body).
    return {"DataType": "String", "StringValue": to_sqs_text(value)}
