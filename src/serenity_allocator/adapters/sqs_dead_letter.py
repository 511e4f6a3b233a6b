"""Dead-lettering of invalid allocation messages: the original body, with the reason attached.

An invalid message (bad JSON, schema error, group id not the workspace id) can never succeed,
so the worker moves it to the FIFO DLQ itself, right away, instead of letting it burn receives
and delay its group. The body goes unchanged so an operator sees exactly what the service sent;
the validation error travels as a message attribute.

The SQS client is built on first use with bounded timeouts and retries (:mod:`.aws_clients`);
the endpoint follows ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_SQS``.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from .aws_clients import AWS_CALL_BUDGET_S, LazyClient, sqs_client
from .sqs_producer import is_sqs_text, is_valid_fifo_id, to_sqs_text

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageAttributeValueTypeDef

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
