"""``serenity-allocator local redrive``: the DLQ's messages back onto the allocation queue.

On AWS an operator redrives with ``aws sqs start-message-move-task`` (docs/runbooks/dlq-triage.md);
moto does not run message move tasks, so on the local stack that command does nothing useful.
This is the hand redrive instead: receive each dead letter, send its body to the queue under its
own group id, delete it from the DLQ. A hand redrive needs a NEW deduplication id: the queue
dropped the first send's id for five minutes (SQS's deduplication window), so a copy sent under
the request id within that time would be accepted and silently discarded. The body, and so the
request id the ledger and the outcome are keyed on, stay exactly as they were.

What moves: messages the redrive policy moved (no ``serenity-invalid-reason``) and the worker's
refused-credential letters (reason ``noCredential`` or ``needsReauth``: write a new record,
then redrive). Invalid messages stay in the DLQ (fix the producer; the runbook says so too).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from serenity_tools.standins.aws_endpoints import endpoints_from_args

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

REDRIVEN_REASONS = frozenset({"noCredential", "needsReauth"})
"""Worker-sent letters a redrive replays (after a new credential record is written)."""
HOLD_S = 30
"""How long a letter left in the DLQ is held while the rest is read (released at the end)."""
_DEDUP_STEM_CHARS = 95


@dataclass(frozen=True)
class Redriven:
    """One message sent back to the queue."""

    request_id: str | None
    group_id: str
    deduplication_id: str


@dataclass
class RedriveReport:
    """What a redrive moved and what it left in the DLQ (with why)."""

    redriven: list[Redriven] = field(default_factory=list)
    left_invalid: list[dict[str, str]] = field(default_factory=list)

    def as_json(self) -> str:
        """The report as one JSON object."""
        return json.dumps(asdict(self), indent=2)


def fresh_deduplication_id(request_id: str | None) -> str:
    """A deduplication id no earlier send used: the request id (cut) and a random suffix.

    At most 128 printable ASCII characters, as SQS requires (the request id already is).
    """
    stem = (request_id or "message")[:_DEDUP_STEM_CHARS]
    return f"{stem}-redrive-{secrets.token_hex(8)}"


def redrive_dead_letters(
    sqs: SQSClient,
    dlq_url: str,
    queue_url: str,
    *,
    new_deduplication_id: Callable[[str | None], str] = fresh_deduplication_id,
) -> RedriveReport:
    """Move every redrivable letter of ``dlq_url`` to ``queue_url``; leave the invalid ones.

    Each letter is sent first and deleted from the DLQ only once the send succeeded: a failure
    in between leaves a copy in both queues (the ledger makes the replay harmless), never none.
    """
    report = RedriveReport()
    held: list[str] = []
    try:
        while messages := _receive(sqs, dlq_url):
            for message in messages:
                attributes: Mapping[str, Any] = message.get("MessageAttributes", {})
                reason = attributes.get("serenity-invalid-reason", {}).get("StringValue")
                if reason is not None and reason not in REDRIVEN_REASONS:
                    held.append(message["ReceiptHandle"])
                    report.left_invalid.append(
                        {"message_id": message["MessageId"], "reason": reason}
                    )
                    continue
                report.redriven.append(_send_back(sqs, queue_url, message, new_deduplication_id))
                sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=message["ReceiptHandle"])
    finally:
        for handle in held:
            sqs.change_message_visibility(
                QueueUrl=dlq_url, ReceiptHandle=handle, VisibilityTimeout=0
            )
    return report


def _receive(sqs: SQSClient, dlq_url: str) -> list[MessageTypeDef]:
    return sqs.receive_message(
        QueueUrl=dlq_url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=0,
        VisibilityTimeout=HOLD_S,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    ).get("Messages", [])


def _send_back(
    sqs: SQSClient,
    queue_url: str,
    message: MessageTypeDef,
    new_deduplication_id: Callable[[str | None], str],
) -> Redriven:
    from serenity_allocator.adapters.sqs import (
        BODY_ENCODING_ATTRIBUTE,
        decode_dead_letter_body,
    )
    from serenity_tools.standins.message_bodies import body_field

    attributes: Mapping[str, Any] = message.get("MessageAttributes", {})
    encoding = attributes.get(BODY_ENCODING_ATTRIBUTE, {}).get("StringValue")
    body = decode_dead_letter_body(message.get("Body", ""), encoding)
    request_id = body_field(body, "request_id")
    group_id = message.get("Attributes", {}).get("MessageGroupId", "")
    dedup_id = new_deduplication_id(request_id)
    sqs.send_message(
        QueueUrl=queue_url,
        MessageBody=body,
        MessageGroupId=group_id,
        MessageDeduplicationId=dedup_id,
    )
    return Redriven(request_id=request_id, group_id=group_id, deduplication_id=dedup_id)


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare ``local redrive``'s options (beside ``local up``'s, in one parser)."""
    parser.add_argument(
        "--dlq-url", default=None, help="the DLQ (default: $DLQ_URL, printed by local up)"
    )
    parser.add_argument(
        "--queue-url", default=None, help="the allocation queue (default: $QUEUE_URL)"
    )


def run(args: argparse.Namespace) -> int:
    """Redrive the local DLQ; print the report; 2 when a queue URL is missing."""
    from serenity_tools.standins.resources import local_client

    dlq_url = args.dlq_url or os.environ.get("DLQ_URL")
    queue_url = args.queue_url or os.environ.get("QUEUE_URL")
    endpoint = endpoints_from_args(args).by_service.get("sqs")
    if not dlq_url or not queue_url or not endpoint:
        print(
            "serenity-allocator local redrive: needs --dlq-url and --queue-url (or DLQ_URL and "
            "QUEUE_URL) and the local stack's endpoint (--aws-endpoint or AWS_ENDPOINT_URL): "
            "the export lines local up prints",
            file=sys.stderr,
        )
        return 2
    report = redrive_dead_letters(local_client("sqs", endpoint), dlq_url, queue_url)
    print(report.as_json())
    return 0
