"""``serenity-allocator dlq-audit``: every valid request in the DLQ gets a terminal record.

Reads the DLQ WITHOUT consuming it (:func:`peek_dead_letters`) and runs the application's
:func:`audit_dead_letters`: a valid request with no terminal ledger record gets a ``failed /
receivesExhausted`` dead letter, stored and announced; a terminal record whose announcement is
not confirmed is announced again; what cannot be read is reported, and the audit goes on. Run
it when the DLQ alarm fires, before triage (docs/runbooks/dlq-triage.md); running it twice
announces nothing twice.

What the read guarantees (FIFO hides a group's later messages while earlier ones are held):
every message of a group with at most 10 messages is read, because each group is read again
from its head while all other groups stay held; a group whose re-read returns 10 may hold
more (SQS returns at most 10 per receive and nothing past a held message), and the report
says how many messages were left unread (the queue's approximate count less those read) and
which groups were cut at 10. Exit status 0 only when nothing was left unread or unrecorded.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from serenity_allocator.adapters.sqs import REASON_ATTRIBUTE
from serenity_allocator.application.allocator.audit_dead_letters import (
    DeadLetterAudit,
    DeadLetterCopy,
    audit_dead_letters,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

PEEK_VISIBILITY_S = 30
"""How long a peeked message is hidden if the audit dies before making it visible again."""
MAX_PER_RECEIVE = 10
"""SQS's most messages per receive: a group re-read returning this many may hold more."""
MAX_GROUP_READS = 3
"""Re-reads of one group while each finds messages the last did not (SQS may answer short)."""


@dataclass
class DlqRead:
    """What one peek read, and what it could not."""

    letters: list[DeadLetterCopy] = field(default_factory=list)
    approximate_total: int = 0
    """The DLQ's approximate message count as the read began."""
    groups_cut_at_ten: list[str] = field(default_factory=list)
    """Groups whose re-read returned 10 messages: later ones of theirs may be unread."""
    limit_reached: bool = False
    reads: dict[str, int] = field(default_factory=dict)
    """Message id -> times this read received it (each counted one receive on the DLQ)."""

    @property
    def left_unread(self) -> int:
        """Messages not read: the approximate count less those read.

        At least one per group cut at ten (and one at the limit) when that count says none.
        """
        estimate = max(0, self.approximate_total - len(self.letters))
        if self.limit_reached or self.groups_cut_at_ten:
            return max(estimate, len(self.groups_cut_at_ten), int(self.limit_reached))
        return estimate


class _Peek:
    """One read of the DLQ: the handles it holds, and the copies it saw, by group."""

    def __init__(self, sqs: SQSClient, dlq_url: str, limit: int, wait_s: int) -> None:
        self.sqs, self.url, self.limit, self.wait_s = sqs, dlq_url, limit, wait_s
        self.handles: dict[str, str] = {}
        self.groups: dict[str, dict[str, DeadLetterCopy]] = {}
        self.seen: dict[str, DeadLetterCopy] = {}
        self.reads: dict[str, int] = {}
        """How often this peek received each message (each one counted a receive on the DLQ)."""

    def receive_until_empty(self) -> dict[str, int]:
        """Receive (holding) until SQS returns nothing; the most one receive gave per group."""
        most: dict[str, int] = {}
        while len(self.seen) < self.limit:
            answer = self.sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=MAX_PER_RECEIVE,
                VisibilityTimeout=PEEK_VISIBILITY_S,
                WaitTimeSeconds=self.wait_s,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            messages = answer.get("Messages", [])
            if not messages:
                break
            counts: dict[str, int] = {}
            for message in messages:
                message_id = message["MessageId"]
                self.reads[message_id] = self.reads.get(message_id, 0) + 1
                copy = _copy(message, self.reads[message_id])
                self.handles[copy.message_id] = message["ReceiptHandle"]
                self.seen.setdefault(copy.message_id, copy)
                self.groups.setdefault(copy.group_id, {}).setdefault(copy.message_id, copy)
                counts[copy.group_id] = counts.get(copy.group_id, 0) + 1
            for group, count in counts.items():
                most[group] = max(most.get(group, 0), count)
        return most

    def release(self, message_ids: Sequence[str]) -> None:
        """Make these messages visible again.

        Twice: moto frees a FIFO group's hold only when the change finds the message visible
        already (harmless on SQS).
        """
        for _pass in range(2):
            for message_id in message_ids:
                try:
                    self.sqs.change_message_visibility(
                        QueueUrl=self.url,
                        ReceiptHandle=self.handles[message_id],
                        VisibilityTimeout=0,
                    )
                except ClientError:
                    # Visible again already (its 30 s ran out during a long audit): a stale
                    # handle must not stop the others from being released.
                    continue

    def reread_group(self, group: str) -> bool:
        """Read ``group`` again from its head, every other group held; True when cut at ten."""
        for _read in range(MAX_GROUP_READS):
            before = len(self.groups[group])
            self.release(list(self.groups[group]))
            most = self.receive_until_empty()
            if most.get(group, 0) >= MAX_PER_RECEIVE:
                return True
            if len(self.groups[group]) == before or len(self.seen) >= self.limit:
                return False
        return False


def peek_dead_letters(
    sqs: SQSClient, dlq_url: str, limit: int = 1000, *, wait_s: int = 1
) -> DlqRead:
    """Read up to ``limit`` DLQ messages and leave every one of them in the queue, visible.

    First every group's head is received and held; then each group is released alone and read
    again from its head, so messages a held earlier one hid are seen too.

    Args:
        sqs: An SQS client.
        dlq_url: The DLQ.
        limit: The most messages to read.
        wait_s: Long-poll seconds per receive (so an empty answer means empty on SQS).
    """
    read = DlqRead(approximate_total=_approximate_count(sqs, dlq_url))
    peek = _Peek(sqs, dlq_url, limit, wait_s)
    try:
        peek.receive_until_empty()
        for group in list(peek.groups):
            if len(peek.seen) >= limit:
                break
            if peek.reread_group(group):
                read.groups_cut_at_ten.append(group)
    finally:
        # Back in the queue for the operators' triage and redrive.
        peek.release(list(peek.handles))
    read.letters = list(peek.seen.values())
    read.reads = dict(peek.reads)
    read.limit_reached = len(peek.seen) >= limit
    return read


def _approximate_count(sqs: SQSClient, dlq_url: str) -> int:
    answer = sqs.get_queue_attributes(
        QueueUrl=dlq_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )
    values = answer.get("Attributes", {})
    return _whole(values.get("ApproximateNumberOfMessages", "0"), 0) + _whole(
        values.get("ApproximateNumberOfMessagesNotVisible", "0"), 0
    )


def _copy(message: Any, reads: int) -> DeadLetterCopy:
    attributes = message.get("Attributes", {})
    reason = message.get("MessageAttributes", {}).get(REASON_ATTRIBUTE, {})
    return DeadLetterCopy(
        message_id=message["MessageId"],
        body=message.get("Body", ""),
        reason=reason.get("StringValue"),
        # Each of this peek's reads counted one more receive, on the DLQ.
        receive_count=max(1, _whole(attributes.get("ApproximateReceiveCount")) - reads),
        group_id=str(attributes.get("MessageGroupId", "")),
    )


def _whole(value: object, default: int = 1) -> int:
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() else default


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
    parser.add_argument(
        "--wait-s", type=int, default=1, help="long-poll seconds per receive (0: short poll)"
    )


def run(args: argparse.Namespace) -> int:
    """Audit the DLQ; print what was recorded as JSON; 0 on success."""
    import boto3

    from serenity_allocator.adapters.dynamodb_request_ledger import DynamoDbRequestLedger
    from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher

    read = peek_dead_letters(boto3.client("sqs"), args.dlq_url, args.limit, wait_s=args.wait_s)
    report = audit_dead_letters(
        read.letters,
        DynamoDbRequestLedger(args.ledger_table),
        OutcomePublisher(args.bus) if args.bus else None,
        now_s=time.time(),
    )
    summary = audit_summary(read, report)
    print(json.dumps(summary, indent=2))
    return 0 if summary["complete"] else 1


def audit_summary(read: DlqRead, report: DeadLetterAudit) -> dict[str, Any]:
    """The audit's report: what it read, recorded, announced, and what it could not."""
    unsettled = (
        report.unreadable
        or report.unanswered
        or report.unannounced
        or report.live
        or report.transfer_unconfirmed
    )
    return {
        "dlq_messages_read": len(read.letters),
        "left_unread": read.left_unread,
        "groups_cut_at_ten": read.groups_cut_at_ten,
        "already_terminal": report.already_terminal,
        "invalid": report.invalid,
        "unparseable_message_ids": report.unparseable,
        "recorded": [_brief(o) for o in report.recorded],
        "reannounced": [_brief(o) for o in report.reannounced],
        "announced": report.announced,
        "unreadable_records": report.unreadable,
        "request_id_conflicts": report.conflicts,
        "unanswered": report.unanswered,
        "unannounced": report.unannounced,
        "live": report.live,
        "transfer_unconfirmed": report.transfer_unconfirmed,
        # What each one's final receive recorded it would transfer: the child holding the
        # target totals now means it landed (a redrive's receive reads it and reports so).
        "unconfirmed_intents": {
            request_id: intent.model_dump(mode="json")
            for request_id, intent in report.unconfirmed_intents.items()
        },
        "complete": read.left_unread == 0 and not unsettled,
    }


def _brief(outcome: Any) -> dict[str, Any]:
    return {
        "request_id": outcome.request_id,
        "workspace_id": outcome.workspace_id,
        "error_code": outcome.error_code,
    }
