"""The request ledger on DynamoDB: one item per request id, conditional writes, consistent reads.

Item shape (table key ``request_id``, a string)::

    request_id   S  the request's idempotency key (the message's deduplication id)
    state        S  intent | final | deadLettered
    status       S  the outcome's status (terminal records), for operators reading the table
    workspace_id S  the child, for operators
    outcome      S  the terminal AllocationOutcome as JSON
    intent       S  a release's ReleaseIntent as JSON (kept once the record turns terminal)
    provisional  BOOL  a deadLettered record written as a final receive began (never published)
    dead_letter  S  the last published dead-lettered outcome (kept when a redrive supersedes it)
    expires_at   N  epoch seconds; the table's TTL attribute
    updated_at   N  epoch seconds

Every write is one ``UpdateItem`` with a condition, so the rules hold across containers:
an intent never overwrites a terminal record (beside a dead letter it is only added), a
``final`` record is written once and never replaced, a ``deadLettered`` one is replaced by a
later terminal outcome (a redrive). Reads are strongly consistent (``BatchGetItem`` with
``ConsistentRead``), so the worker that runs right after another sees its writes. Decision
and alternatives: docs/decisions/0009-request-ledger.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from ..domain.ledger import (
    LedgerConflictError,
    LedgerEntry,
    LedgerUnavailableError,
    ReleaseIntent,
)
from ..domain.messages import AllocationOutcome
from .aws_clients import AWS_CALL_BUDGET_S, LazyClient, aws_error_code, dynamodb_client

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

DEFAULT_TTL_S = 30 * 24 * 3600
"""Thirty days: longer than the DLQ's 14-day retention, so a redrive still finds its record."""

_MAX_BATCH_GET_KEYS = 100  # BatchGetItem's per-call limit

# A terminal outcome may replace: nothing, an intent, or a dead letter (a redrive, or the
# provisional record of the receive that is completing now). Never a final record.
_TERMINAL_CONDITION = "attribute_not_exists(request_id) OR #state IN (:intent, :dead)"
# A provisional dead letter or an intent replaces only nothing or an intent.
_OPEN_CONDITION = "attribute_not_exists(request_id) OR #state = :intent"
# An intent joins a dead letter without replacing it: the provisional one of the final receive
# now applying, or a redriven message's, stays the terminal record until that delivery completes.
_DEAD_CONDITION = "#state = :dead"

# DynamoDB refuses a request that passes a value its expressions do not use.
_STATE_VALUES: dict[str, dict[str, AttributeValueTypeDef]] = {
    _TERMINAL_CONDITION: {":intent": {"S": "intent"}, ":dead": {"S": "deadLettered"}},
    _OPEN_CONDITION: {":intent": {"S": "intent"}},
    _DEAD_CONDITION: {":dead": {"S": "deadLettered"}},
}


class DynamoDbRequestLedger:
    """The :class:`~serenity_allocator.domain.ledger.RequestLedger` port over boto3.

    Args:
        table_name: The ledger table (``REQUEST_LEDGER_TABLE``).
        client: An optional ready DynamoDB client; otherwise one is built on first use with
            bounded timeouts and retries (:func:`.aws_clients.dynamodb_client`), honouring
            ``AWS_ENDPOINT_URL``.
        call_budget_s: The longest one call may take, retries included (sizes the client).
        ttl_s: How long a record lives after its last write.
        wall_clock: Epoch seconds (injected so tests control expiry).
    """

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        *,
        ttl_s: int = DEFAULT_TTL_S,
        wall_clock: Callable[[], float] = time.time,
        call_budget_s: float = AWS_CALL_BUDGET_S,
    ) -> None:
        if not table_name.strip():
            raise ValueError("the request ledger table name is blank")
        self._table = table_name
        self._dynamodb = LazyClient(lambda: dynamodb_client(call_budget_s), client)
        self._ttl_s = ttl_s
        self._wall_clock = wall_clock

    @property
    def table_name(self) -> str:
        """The table this ledger reads and writes."""
        return self._table

    def _client(self) -> DynamoDBClient:
        return self._dynamodb.get()

    # -- reads -------------------------------------------------------------------------------

    def lookup(self, request_ids: Sequence[str]) -> dict[str, LedgerEntry]:
        """Read the entries of ``request_ids`` with strongly consistent reads.

        Raises:
            LedgerUnavailableError: DynamoDB could not be read.
        """
        unique = list(dict.fromkeys(request_ids))
        entries: dict[str, LedgerEntry] = {}
        for start in range(0, len(unique), _MAX_BATCH_GET_KEYS):
            keys: list[dict[str, AttributeValueTypeDef]] = [
                {"request_id": {"S": rid}} for rid in unique[start : start + _MAX_BATCH_GET_KEYS]
            ]
            while keys:
                try:
                    response = self._client().batch_get_item(
                        RequestItems={self._table: {"Keys": keys, "ConsistentRead": True}}
                    )
                except (ClientError, BotoCoreError) as exc:
                    raise LedgerUnavailableError(aws_error_code(exc)) from exc
                for item in response.get("Responses", {}).get(self._table, []):
                    entry = item_to_entry(item)
                    entries[entry.request_id] = entry
                # Unprocessed keys come back under throttling; the client's retries pace us.
                unprocessed = response.get("UnprocessedKeys", {}).get(self._table)
                keys = list(unprocessed["Keys"]) if unprocessed else []
        return entries

    def get(self, request_id: str) -> LedgerEntry | None:
        """Read one entry (strongly consistent); None when the ledger has no record.

        Raises:
            LedgerUnavailableError: DynamoDB could not be read.
        """
        try:
            response = self._client().get_item(
                TableName=self._table, Key={"request_id": {"S": request_id}}, ConsistentRead=True
            )
        except (ClientError, BotoCoreError) as exc:
            raise LedgerUnavailableError(aws_error_code(exc)) from exc
        item = response.get("Item")
        return None if item is None else item_to_entry(item)

    # -- writes ------------------------------------------------------------------------------

    def record_intent(self, request_id: str, intent: ReleaseIntent) -> None:
        """Record a release's intent before it transfers.

        It replaces nothing or an earlier intent; beside a dead letter (a final receive's
        provisional one, or a redriven message's) it is added and the dead letter stays the
        terminal record until this delivery completes, so a crash still leaves one.

        Raises:
            LedgerConflictError: the request already has a ``final`` record.
            LedgerUnavailableError: DynamoDB could not be written.
        """
        values: dict[str, AttributeValueTypeDef] = {":body": {"S": intent.model_dump_json()}}
        if self._update(
            request_id,
            "SET #state = :intent, intent = :body, expires_at = :exp, updated_at = :now",
            _OPEN_CONDITION,
            values,
        ):
            return
        if not self._update(
            request_id,
            "SET intent = :body, expires_at = :exp, updated_at = :now",
            _DEAD_CONDITION,
            values,
        ):
            raise LedgerConflictError(request_id)

    def store_outcome(
        self, outcome: AllocationOutcome, *, dead_lettered: bool = False, provisional: bool = False
    ) -> AllocationOutcome:
        """Store a terminal outcome once; return what the ledger holds afterwards.

        Raises:
            LedgerUnavailableError: DynamoDB could not be written or read back.
        """
        state = "deadLettered" if dead_lettered or provisional else "final"
        body = outcome.model_dump_json(exclude_none=True)
        expression = (
            "SET #state = :state, outcome = :body, #status = :status, workspace_id = :ws, "
            "provisional = :prov, expires_at = :exp, updated_at = :now"
        )
        values: dict[str, AttributeValueTypeDef] = {
            ":state": {"S": state},
            ":body": {"S": body},
            ":status": {"S": outcome.status},
            ":ws": {"S": outcome.workspace_id},
            ":prov": {"BOOL": provisional},
        }
        if state == "deadLettered" and not provisional:
            expression += ", dead_letter = :body"
        condition = _OPEN_CONDITION if provisional else _TERMINAL_CONDITION
        if self._update(outcome.request_id, expression, condition, values, status=True):
            return outcome
        held = self.get(outcome.request_id)
        if held is None or held.outcome is None:
            # The condition failed yet no terminal record reads back: only possible if the
            # item expired in between; the caller's retry writes it again.
            raise LedgerUnavailableError("ledger record vanished")
        return held.outcome

    def _update(
        self,
        request_id: str,
        expression: str,
        condition: str,
        values: dict[str, AttributeValueTypeDef],
        *,
        status: bool = False,
    ) -> bool:
        now = int(self._wall_clock())
        names = {"#state": "state"}
        if status:
            names["#status"] = "status"
        try:
            self._client().update_item(
                TableName=self._table,
                Key={"request_id": {"S": request_id}},
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={
                    **values,
                    **_STATE_VALUES[condition],
                    ":exp": {"N": str(now + self._ttl_s)},
                    ":now": {"N": str(now)},
                },
            )
        except ClientError as exc:
            if aws_error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise LedgerUnavailableError(aws_error_code(exc)) from exc
        except BotoCoreError as exc:
            raise LedgerUnavailableError(aws_error_code(exc)) from exc
        return True


def item_to_entry(item: Mapping[str, Any]) -> LedgerEntry:
    """A ledger item (DynamoDB's attribute-value shape) as the domain's entry."""
    outcome = item.get("outcome", {}).get("S")
    intent = item.get("intent", {}).get("S")
    return LedgerEntry(
        request_id=item["request_id"]["S"],
        state=item["state"]["S"],
        outcome=AllocationOutcome.model_validate_json(outcome) if outcome else None,
        intent=ReleaseIntent.model_validate_json(intent) if intent else None,
        provisional=bool(item.get("provisional", {}).get("BOOL", False)),
        updated_at=int(item["updated_at"]["N"]) if "updated_at" in item else None,
    )
