"""The request ledger on DynamoDB: one item per request id, conditional writes, consistent reads.

Item shape (table key ``request_id``, a string)::

    request_id     S  the request's idempotency key (the message's deduplication id)
    schema_version N  the record shape (absent: version 1, before the binding)
    workspace_id   S  the workspace the id is bound to (version 1: terminal records only)
    kind           S  ensure | release | unknown (an invalid body's): the id's kind (from version 2)
    state          S  intent | final | deadLettered
    status         S  the outcome's status (terminal records), for operators reading the table
    outcome        S  the terminal AllocationOutcome as JSON
    intent         S  a release's TransferIntent as JSON (kept once the record turns terminal)
    provisional    BOOL  a deadLettered record written as a final receive began (never published)
    announced      BOOL  the DLQ audit's publish of the terminal outcome was confirmed
    dead_letter    S  the last published dead-lettered outcome (kept when a redrive supersedes it)
    source_message_id  S  the SQS message id of the delivery that sent its dead letter to the
                   DLQ itself and completed (absent on any other record): that same message
                   coming back is a redelivery, replayed (docs/decisions/0020)
    expires_at     N  epoch seconds; the table's TTL attribute
    updated_at     N  epoch seconds

Every write is one ``UpdateItem`` with a condition, so the rules hold across containers:
an intent never overwrites a terminal record (beside a dead letter it is only added), a
``final`` record is written once and never replaced, a ``deadLettered`` one is replaced by a
later terminal outcome (a redrive, which removes its ``source_message_id``), and no write
touches a record bound to another workspace or kind (``RequestIdConflictError``). Reads are
strongly consistent (``BatchGetItem`` with ``ConsistentRead``), so the worker that runs right
after another sees its writes; keys left unprocessed under throttling are retried with
full-jitter backoff inside the caller's deadline. A reader ignores attributes and JSON fields
it does not know; an item it cannot interpret is reported unreadable, alone. Decision and
alternatives: docs/decisions/0009-request-ledger.md.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from ..domain.ledger import (
    LEDGER_SCHEMA_VERSION,
    CallDeadline,
    LedgerConflictError,
    LedgerEntry,
    LedgerRead,
    LedgerRecordUnreadableError,
    LedgerUnavailableError,
    RequestIdConflictError,
    RequestKind,
    TransferIntent,
    describe_unreadable,
    read_stored,
)
from ..domain.messages import AllocationOutcome
from .aws_clients import AWS_CALL_BUDGET_S, LazyClient, aws_error_code, dynamodb_client

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

DEFAULT_TTL_S = 30 * 24 * 3600
"""Thirty days: longer than the DLQ's 14-day retention, so a redrive still finds its record."""

_MAX_BATCH_GET_KEYS = 100  # BatchGetItem's per-call limit
BACKOFF_BASE_S = 0.05
"""The first wait before retrying unprocessed keys (doubled per retry, full jitter)."""
BACKOFF_CAP_S = 1.0
MAX_UNPROCESSED_RETRIES = 8
"""Retries of unprocessed keys when the caller gives no deadline (the operator tools)."""

# The binding: a write never touches a record of another workspace or kind. A version-1 intent
# carries neither attribute and is taken as the request's.
_BOUND = (
    "(attribute_not_exists(workspace_id) OR workspace_id = :ws)"
    " AND (attribute_not_exists(#kind) OR #kind = :kind)"
)
# A terminal outcome may replace: nothing, an intent, or a dead letter (a redrive, or the
# provisional record of the receive that is completing now). Never a final record.
_TERMINAL_CONDITION = (
    f"(attribute_not_exists(request_id) OR #state IN (:intent, :dead)) AND {_BOUND}"
)
# A provisional dead letter or an intent replaces only nothing or an intent.
_OPEN_CONDITION = f"(attribute_not_exists(request_id) OR #state = :intent) AND {_BOUND}"
# An intent joins a dead letter without replacing it: the provisional one of the final receive
# now applying, or a redriven message's, stays the terminal record until that delivery completes.
_DEAD_CONDITION = f"#state = :dead AND {_BOUND}"
_ANNOUNCE_CONDITION = "#state IN (:final, :dead)"

# DynamoDB refuses a request that passes a value its expressions do not use.
_STATE_VALUES: dict[str, dict[str, AttributeValueTypeDef]] = {
    _TERMINAL_CONDITION: {":intent": {"S": "intent"}, ":dead": {"S": "deadLettered"}},
    _OPEN_CONDITION: {":intent": {"S": "intent"}},
    _DEAD_CONDITION: {":dead": {"S": "deadLettered"}},
}
_COMMON_SET = (
    "schema_version = :ver, workspace_id = :ws, #kind = :kind, expires_at = :exp, updated_at = :now"
)


def full_jitter(ceiling_s: float) -> float:
    """A wait drawn uniformly from [0, ceiling_s] (AWS's "full jitter" backoff)."""
    return random.uniform(0.0, ceiling_s)  # noqa: S311 - spreading retries, not a secret


@dataclass(frozen=True)
class RequestLedgerConfig:
    """How a :class:`DynamoDbRequestLedger` keeps records and calls DynamoDB.

    ``ttl_s``: how long a record lives after its last write. ``call_budget_s``: the longest one
    call may take, retries included (sizes the client). ``wall_clock``: epoch seconds
    (injected so tests control expiry). ``jitter``: draws a backoff wait below its argument
    (injected so tests are exact). ``sleep``: sleeps between retries of unprocessed keys when
    the caller gives no deadline.
    """

    ttl_s: int = DEFAULT_TTL_S
    wall_clock: Callable[[], float] = time.time
    call_budget_s: float = AWS_CALL_BUDGET_S
    jitter: Callable[[float], float] = full_jitter
    sleep: Callable[[float], None] = time.sleep


LEDGER_DEFAULTS = RequestLedgerConfig()
"""Records live 30 days; the AWS call budget; real time."""


class DynamoDbRequestLedger:
    """The :class:`~serenity_allocator.domain.ledger.RequestLedger` port over boto3.

    Args:
        table_name: The ledger table (``REQUEST_LEDGER_TABLE``).
        client: An optional ready DynamoDB client; otherwise one is built on first use with
            bounded timeouts and retries (:func:`.aws_clients.dynamodb_client`), honouring
            ``AWS_ENDPOINT_URL``.
        config: The records' lifetime, the call budget and the injected time
            (:class:`RequestLedgerConfig`).
    """

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        *,
        config: RequestLedgerConfig = LEDGER_DEFAULTS,
    ) -> None:
        if not table_name.strip():
            raise ValueError("the request ledger table name is blank")
        self._table = table_name
        self._dynamodb = LazyClient(lambda: dynamodb_client(config.call_budget_s), client)
        self._ttl_s = config.ttl_s
        self._wall_clock = config.wall_clock
        self._jitter = config.jitter
        self._sleep = config.sleep

    @property
    def table_name(self) -> str:
        """The table this ledger reads and writes."""
        return self._table

    def _client(self) -> DynamoDBClient:
        return self._dynamodb.get()

    # -- reads -------------------------------------------------------------------------------

    def read_batch(
        self, request_ids: Sequence[str], deadline: CallDeadline | None = None
    ) -> LedgerRead:
        """Read the records of ``request_ids`` with strongly consistent reads.

        Keys DynamoDB leaves unprocessed are asked again after a full-jitter exponential wait
        while ``deadline`` leaves room for the wait and one more call (without a deadline: at
        most :data:`MAX_UNPROCESSED_RETRIES` times); those still unprocessed are reported as
        unanswered. An item that cannot be interpreted is reported as unreadable.

        Raises:
            LedgerUnavailableError: DynamoDB could not be read.
        """
        unique = list(dict.fromkeys(request_ids))
        read = LedgerRead()
        for start in range(0, len(unique), _MAX_BATCH_GET_KEYS):
            self._read_chunk(unique[start : start + _MAX_BATCH_GET_KEYS], read, deadline)
        return read

    def lookup(self, request_ids: Sequence[str]) -> dict[str, LedgerEntry]:
        """The readable records of ``request_ids`` (operators' and tests' shorthand).

        Raises:
            LedgerUnavailableError: DynamoDB could not be read, or left keys unprocessed.
        """
        read = self.read_batch(request_ids)
        if read.unanswered:
            raise LedgerUnavailableError("unprocessed keys")
        return read.entries

    def _read_chunk(
        self, request_ids: Sequence[str], read: LedgerRead, deadline: CallDeadline | None
    ) -> None:
        keys: list[dict[str, AttributeValueTypeDef]] = [
            {"request_id": {"S": rid}} for rid in request_ids
        ]
        retry = 0
        while True:
            try:
                response = self._client().batch_get_item(
                    RequestItems={self._table: {"Keys": keys, "ConsistentRead": True}}
                )
            except (ClientError, BotoCoreError) as exc:
                raise LedgerUnavailableError(aws_error_code(exc)) from exc
            for item in response.get("Responses", {}).get(self._table, []):
                add_item(read, item)
            unprocessed = response.get("UnprocessedKeys", {}).get(self._table)
            keys = list(unprocessed["Keys"]) if unprocessed else []
            if not keys:
                return
            wait = self._jitter(min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**retry))
            if not self._may_retry(retry, wait, deadline):
                read.unanswered.update(str(key["request_id"].get("S")) for key in keys)
                return
            (deadline.sleep if deadline is not None else self._sleep)(wait)
            retry += 1

    @staticmethod
    def _may_retry(retry: int, wait: float, deadline: CallDeadline | None) -> bool:
        if deadline is None:
            return retry < MAX_UNPROCESSED_RETRIES
        return deadline.fits(wait)

    def get(self, request_id: str) -> LedgerEntry | None:
        """Read one entry (strongly consistent); None when the ledger has no record.

        Raises:
            LedgerRecordUnreadableError: the record cannot be interpreted.
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

    def record_intent(
        self,
        request_id: str,
        intent: TransferIntent,
        *,
        workspace_id: str,
        kind: RequestKind = "release",
    ) -> None:
        """Record a transfer's intent before it is sent, bound to ``workspace_id`` and ``kind``.

        It replaces nothing or an earlier intent; beside a dead letter (a final receive's
        provisional one, or a redriven message's) it is added and the dead letter stays the
        terminal record until this delivery completes, so a crash still leaves one.

        Raises:
            LedgerConflictError: the request already has a ``final`` record.
            RequestIdConflictError: the id is bound to another workspace or kind.
            LedgerRecordUnreadableError: the record there cannot be read.
            LedgerUnavailableError: DynamoDB could not be written.
        """
        values: dict[str, AttributeValueTypeDef] = {
            ":body": {"S": intent.model_dump_json()},
            **_binding(workspace_id, kind),
        }
        if self._update(
            request_id,
            f"SET #state = :intent, intent = :body, {_COMMON_SET}",
            _OPEN_CONDITION,
            values,
        ):
            return
        if self._update(request_id, f"SET intent = :body, {_COMMON_SET}", _DEAD_CONDITION, values):
            return
        held = self.get(request_id)
        if held is not None and not held.belongs_to(workspace_id, kind):
            raise RequestIdConflictError(request_id)
        raise LedgerConflictError(request_id)

    def store_outcome(
        self,
        outcome: AllocationOutcome,
        *,
        dead_lettered: bool = False,
        provisional: bool = False,
        source_message_id: str | None = None,
    ) -> AllocationOutcome:
        """Store a terminal outcome once; return what the ledger holds afterwards.

        ``source_message_id`` is written only with a published dead letter; every other write
        removes the attribute (the record is no longer that message's dead letter).

        Raises:
            RequestIdConflictError: the id is bound to another workspace or kind.
            LedgerRecordUnreadableError: the record there cannot be read.
            LedgerUnavailableError: DynamoDB could not be written or read back.
        """
        state = "deadLettered" if dead_lettered or provisional else "final"
        expression = (
            "SET #state = :state, outcome = :body, #status = :status, provisional = :prov, "
            f"announced = :no, {_COMMON_SET}"
        )
        values: dict[str, AttributeValueTypeDef] = {
            ":state": {"S": state},
            ":body": {"S": outcome.model_dump_json(exclude_none=True)},
            ":status": {"S": outcome.status},
            ":prov": {"BOOL": provisional},
            ":no": {"BOOL": False},
            **_binding(outcome.workspace_id, outcome.kind),
        }
        if state == "deadLettered" and not provisional:
            expression += ", dead_letter = :body"
        if state == "deadLettered" and not provisional and source_message_id is not None:
            expression += ", source_message_id = :source"
            values[":source"] = {"S": source_message_id}
        else:
            expression += " REMOVE source_message_id"
        condition = _OPEN_CONDITION if provisional else _TERMINAL_CONDITION
        if self._update(outcome.request_id, expression, condition, values, status=True):
            return outcome
        return self._held_outcome(outcome)

    def _held_outcome(self, outcome: AllocationOutcome) -> AllocationOutcome:
        """The terminal outcome that made a conditional store fail, read back."""
        held = self.get(outcome.request_id)
        if held is not None and not held.belongs_to(outcome.workspace_id, outcome.kind):
            raise RequestIdConflictError(outcome.request_id)
        if held is None or held.outcome is None:
            # The condition failed yet no terminal record reads back: only possible if the
            # item expired in between; the caller's retry writes it again.
            raise LedgerUnavailableError("ledger record vanished")
        return held.outcome

    def mark_announced(self, request_ids: Sequence[str]) -> None:
        """Flag the terminal records of ``request_ids`` as announced (others are left alone).

        Raises:
            LedgerUnavailableError: DynamoDB could not be written.
        """
        for request_id in dict.fromkeys(request_ids):
            try:
                self._client().update_item(
                    TableName=self._table,
                    Key={"request_id": {"S": request_id}},
                    UpdateExpression="SET announced = :yes",
                    ConditionExpression=_ANNOUNCE_CONDITION,
                    ExpressionAttributeNames={"#state": "state"},
                    ExpressionAttributeValues={
                        ":yes": {"BOOL": True},
                        ":final": {"S": "final"},
                        ":dead": {"S": "deadLettered"},
                    },
                )
            except ClientError as exc:
                if aws_error_code(exc) != "ConditionalCheckFailedException":
                    raise LedgerUnavailableError(aws_error_code(exc)) from exc
            except BotoCoreError as exc:
                raise LedgerUnavailableError(aws_error_code(exc)) from exc

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
        names = {"#state": "state", "#kind": "kind"}
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
                    ":ver": {"N": str(LEDGER_SCHEMA_VERSION)},
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


def _binding(workspace_id: str, kind: str) -> dict[str, AttributeValueTypeDef]:
    return {":ws": {"S": workspace_id}, ":kind": {"S": kind}}


# -- reading one item (DynamoDB's attribute-value shape) into the domain's entry -------------
# Forward compatible: attributes and JSON fields this version does not know are ignored (a newer
# writer's additions). Refused, as LedgerRecordUnreadableError naming the attribute, only what
# this version cannot interpret: a known attribute of the wrong type or value, or parts that
# disagree (an outcome of another request, workspace or kind than the record's: tampered).


def add_item(read: LedgerRead, item: Mapping[str, Any]) -> None:
    """Put one item of a batch read into ``read``: its entry, or why it is unreadable."""
    request_id = _text(item, "request_id") or ""
    try:
        read.entries[request_id] = item_to_entry(item)
    except LedgerRecordUnreadableError as exc:
        read.unreadable[request_id] = str(exc)


def item_to_entry(item: Mapping[str, Any]) -> LedgerEntry:
    """A ledger item (DynamoDB's attribute-value shape) as the domain's entry.

    Attributes and JSON fields this version does not know are ignored (a newer writer's).

    Raises:
        LedgerRecordUnreadableError: a known attribute cannot be read, or the record's parts
            disagree (an outcome of another request, workspace or kind): names the attribute.
    """
    outcome = _text(item, "outcome")
    intent = _text(item, "intent")
    try:
        return LedgerEntry(
            request_id=_text(item, "request_id"),
            state=_text(item, "state"),
            workspace_id=_text(item, "workspace_id"),
            kind=_text(item, "kind"),
            outcome=read_stored(AllocationOutcome, outcome, "outcome") if outcome else None,
            intent=read_stored(TransferIntent, intent, "intent") if intent else None,
            provisional=_flag(item, "provisional"),
            announced=_flag(item, "announced"),
            source_message_id=_text(item, "source_message_id"),
            updated_at=_number(item, "updated_at"),
            schema_version=_version(item),
        )
    except ValidationError as exc:
        raise LedgerRecordUnreadableError(describe_unreadable(exc, "record")) from None


def _version(item: Mapping[str, Any]) -> Any:
    version = _number(item, "schema_version")
    return 1 if version is None else version  # written before records carried a version


def _text(item: Mapping[str, Any], name: str) -> Any:
    value = item.get(name)
    return value.get("S") if isinstance(value, Mapping) else None


def _flag(item: Mapping[str, Any], name: str) -> Any:
    value = item.get(name)
    return value.get("BOOL", False) if isinstance(value, Mapping) else False


def _number(item: Mapping[str, Any], name: str) -> Any:
    value = item.get(name)
    text = value.get("N") if isinstance(value, Mapping) else None
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return text  # not a whole number: the entry refuses it, naming the attribute
