"""``serenity-allocator dlq-audit``: give every valid request in the DLQ a terminal record.

Reads the DLQ WITHOUT consuming it: each message is received with a short visibility timeout,
then made visible again at once. In a FIFO DLQ that is at most the first 10 messages of each
child's group until earlier ones are redriven or deleted, so run it again after triage. It runs
the application's :func:`audit_dead_letters`: a valid request with no terminal ledger record
gets a ``failed / receivesExhausted`` dead letter, stored in the ledger and announced on the
outcome bus. Run it when the DLQ alarm fires, before triage (docs/runbooks/dlq-triage.md);
running it twice changes nothing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from serenity_allocator.adapters.sqs_dead_letter import REASON_ATTRIBUTE
from serenity_allocator.application.audit_dead_letters import DeadLetterCopy, audit_dead_letters

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

PEEK_VISIBILITY_S = 30
"""How long a peeked message is hidden if the audit dies before making it visible again."""


def peek_dead_letters(sqs: SQSClient, dlq_url: str, limit: int = 1000) -> list[DeadLetterCopy]:
    """Read up to ``limit`` DLQ messages and leave every one of them in the queue, visible.

    Args:
        sqs: An SQS client.
        dlq_url: The DLQ.
        limit: The most messages to read.
    """
    seen: dict[str, DeadLetterCopy] = {}
    handles: list[str] = []
    try:
        while len(seen) < limit:
            answer = sqs.receive_message(
                QueueUrl=dlq_url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=PEEK_VISIBILITY_S,
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            messages = answer.get("Messages", [])
            if not messages:
                break
            for message in messages:
                handles.append(message["ReceiptHandle"])
                seen.setdefault(message["MessageId"], _copy(message))
    finally:
        # Back in the queue for the operators' triage and redrive. Twice: moto frees a FIFO
        # group's hold only when the change finds the message visible already (harmless on SQS).
        for _pass in range(2):
            for handle in handles:
                sqs.change_message_visibility(
                    QueueUrl=dlq_url, ReceiptHandle=handle, VisibilityTimeout=0
                )
    return list(seen.values())


def _copy(message: Any) -> DeadLetterCopy:
    attributes = message.get("Attributes", {})
    reason = message.get("MessageAttributes", {}).get(REASON_ATTRIBUTE, {})
    return DeadLetterCopy(
        message_id=message["MessageId"],
        body=message.get("Body", ""),
        reason=reason.get("StringValue"),
        # This read counted one more receive, on the DLQ.
        receive_count=max(1, int(attributes.get("ApproximateReceiveCount", "1")) - 1),
    )


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``dlq-audit`` options."""
    parser.add_argument("--dlq-url", required=True, help="the allocation DLQ (DLQ_URL)")
    parser.add_argument(
        "--ledger-table", required=True, help="the request ledger (RequestLedgerTableName)"
    )
    parser.add_argument(
        "--bus", default=None, help="the outcome bus (OutcomeBusName); absent: record only"
    )
    parser.add_argument("--limit", type=int, default=1000, help="most DLQ messages to read")


def run(args: argparse.Namespace) -> int:
    """Audit the DLQ; print what was recorded as JSON; 0 on success."""
    import boto3

    from serenity_allocator.adapters.dynamodb_request_ledger import DynamoDbRequestLedger
    from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher

    letters = peek_dead_letters(boto3.client("sqs"), args.dlq_url, args.limit)
    report = audit_dead_letters(
        letters,
        DynamoDbRequestLedger(args.ledger_table),
        OutcomePublisher(args.bus) if args.bus else None,
    )
    print(json.dumps(_summary(report.recorded, len(letters), report.already_terminal), indent=2))
    return 0


def _summary(recorded: Sequence[Any], read: int, already: int) -> dict[str, Any]:
    return {
        "dlq_messages_read": read,
        "already_terminal": already,
        "recorded": [
            {"request_id": o.request_id, "workspace_id": o.workspace_id, "error_code": o.error_code}
            for o in recorded
        ],
    }
