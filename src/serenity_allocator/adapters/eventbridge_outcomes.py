"""Outcome events on EventBridge: one event per completed request, plus pool-low warnings.

Owning services subscribe with a rule on ``source = serenity.allocator``. Delivery is
at-least-once (a retried entry or a redelivered message can publish twice), so consumers key on
``detail.request_id``. Events carry ids and totals, never a secret.

The EventBridge client is built on first use with bounded timeouts and retries
(:mod:`.aws_clients`); the endpoint follows ``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_EVENTBRIDGE``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from ..domain.messages import AllocationOutcome
from .aws_clients import AWS_CALL_BUDGET_S, LazyClient, aws_error_code, events_client

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

_log = logging.getLogger(__name__)

EVENT_SOURCE = "serenity.allocator"
OUTCOME_DETAIL_TYPE = "serenity.allocation.outcome"
POOL_LOW_DETAIL_TYPE = "serenity.pool.low"
MAX_PUT_EVENTS_ENTRIES = 10
"""PutEvents takes at most 10 entries per call."""


class OutcomePublishError(RuntimeError):
    """Some events were not published after one retry.

    Attributes:
        request_ids: The request ids of the outcomes not published (empty for a pool-low event).
        reason: The EventBridge error codes, or the kind of failure.
    """

    def __init__(self, request_ids: Sequence[str], reason: str) -> None:
        self.request_ids = tuple(request_ids)
        self.reason = reason
        listed = ", ".join(self.request_ids) if self.request_ids else "pool-low event"
        super().__init__(f"events not published ({reason}): {listed}")


class OutcomePublisher:
    """Publishes allocation outcomes and pool-low warnings to an EventBridge bus.

    Args:
        bus_name: The bus name or ARN (``OUTCOME_BUS_NAME``).
        events: An optional ready EventBridge client; otherwise one is built on first use
            (:func:`.aws_clients.events_client`), honouring the standard endpoint variables.
        call_budget_s: The longest one call may take, retries included (sizes the client's
            timeouts and attempts).
    """

    def __init__(
        self,
        bus_name: str,
        events: EventBridgeClient | None = None,
        *,
        call_budget_s: float = AWS_CALL_BUDGET_S,
    ) -> None:
        if not bus_name.strip():
            raise ValueError("the outcome bus name is blank")
        self._bus_name = bus_name
        self._events = LazyClient(lambda: events_client(call_budget_s), events)

    @property
    def bus_name(self) -> str:
        """The bus this publisher writes to."""
        return self._bus_name

    def _client(self) -> EventBridgeClient:
        return self._events.get()

    def publish(self, outcomes: Sequence[AllocationOutcome]) -> None:
        """Publish one ``serenity.allocation.outcome`` event per outcome, 10 per PutEvents.

        Every chunk is attempted; entries EventBridge refuses in a call that answered are sent
        once more.

        Raises:
            OutcomePublishError: Some outcomes were not published (lists their request ids).
        """
        unpublished: list[str] = []
        reasons: set[str] = set()
        for start in range(0, len(outcomes), MAX_PUT_EVENTS_ENTRIES):
            chunk = outcomes[start : start + MAX_PUT_EVENTS_ENTRIES]
            entries = [
                self._entry(OUTCOME_DETAIL_TYPE, outcome.model_dump_json(exclude_none=True))
                for outcome in chunk
            ]
            failed_indexes, reason = self._put_with_one_retry(entries)
            if failed_indexes:
                unpublished.extend(chunk[index].request_id for index in failed_indexes)
                reasons.add(reason)
        if unpublished:
            raise OutcomePublishError(unpublished, ", ".join(sorted(reasons)))

    def publish_pool_low(self, detail: Mapping[str, Any]) -> None:
        """Publish one ``serenity.pool.low`` event with ``detail`` (a JSON object).

        Raises:
            OutcomePublishError: The event was not published after one retry.
        """
        entry = self._entry(POOL_LOW_DETAIL_TYPE, json.dumps(dict(detail), default=str))
        failed_indexes, reason = self._put_with_one_retry([entry])
        if failed_indexes:
            raise OutcomePublishError([], reason)

    def _entry(self, detail_type: str, detail: str) -> PutEventsRequestEntryTypeDef:
        return {
            "Source": EVENT_SOURCE,
            "DetailType": detail_type,
            "Detail": detail,
            "EventBusName": self._bus_name,
        }

    def _put_with_one_retry(
        self, entries: list[PutEventsRequestEntryTypeDef]
    ) -> tuple[list[int], str]:
        """PutEvents, then once more for the entries it refused; return (failed indexes, reason).

        Only entries of a call that answered are sent again; a call that failed as a whole
        (after the client's own bounded retries) is not repeated.
        """
        pending = list(range(len(entries)))
        reason = ""
        for _attempt in range(2):
            try:
                response = self._client().put_events(Entries=[entries[index] for index in pending])
            except (ClientError, BotoCoreError) as exc:
                # botocore has already retried throttling and connection errors within the
                # client's bounded budget; a call of our own on top would double it.
                reason = aws_error_code(exc)
                _log.warning("PutEvents failed", extra={"entries": len(pending), "code": reason})
                return pending, reason
            if not response.get("FailedEntryCount"):
                return [], ""
            # Result entries line up with request entries; a failed one carries an ErrorCode.
            results = response.get("Entries", [])
            still_failed = [
                index
                for index, result in zip(pending, results, strict=False)
                if result.get("ErrorCode")
            ]
            reason = ", ".join(
                sorted({str(result["ErrorCode"]) for result in results if result.get("ErrorCode")})
            )
            pending = still_failed
            if not pending:
                return [], ""
            _log.warning(
                "PutEvents entries failed", extra={"failed": len(pending), "codes": reason}
            )
        return pending, reason
