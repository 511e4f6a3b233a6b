"""Invariant 6, the request ledger: one terminal record per request, outcomes equal to it.

Exactly one terminal record per request, and every outcome event published equals its
request's ledger record (docs/decisions/0009-request-ledger.md).

A published ``dead_lettered`` outcome may differ from the record only when a redrive replaced
it explicitly (the record's outcome says ``supersedes: deadLettered``).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from serenity_allocator.domain.ledger import PROVISIONAL_GRACE_S, LedgerEntry
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_tools.standins.resources import local_client
from serenity_tools.verification.invariants import InvariantResult, invariant_result

if TYPE_CHECKING:
    from serenity_tools.standins.resources import LocalResources

INVARIANT_NAME = "6 ledger: one terminal record, outcomes equal it"


def read_ledger_table(resources: LocalResources) -> dict[str, LedgerEntry]:
    """Every item of the local ledger table, by request id (a Scan: local tooling only)."""
    from serenity_allocator.adapters.dynamodb_request_ledger import item_to_entry

    dynamodb: Any = local_client("dynamodb", resources.endpoint("dynamodb"))
    entries: dict[str, LedgerEntry] = {}
    for page in dynamodb.get_paginator("scan").paginate(
        TableName=resources.ledger_table, ConsistentRead=True
    ):
        for item in page.get("Items", []):
            entry = item_to_entry(item)
            entries[entry.request_id] = entry
    return entries


def audit_local_dead_letters(resources: LocalResources) -> dict[str, int]:
    """Run the DLQ audit on the local stack, as an operator would; return its reads per message.

    The audit receives each DLQ message at least once without deleting it (a group re-read
    more than once): the returned count per message id is what a later read subtracts from
    ``ApproximateReceiveCount``.

    The harness runs it after the drain and before it reads outcomes and the DLQ: a request
    whose final receive died before our code ran has its terminal record only from the audit.
    """
    from serenity_allocator.adapters.dynamodb_request_ledger import DynamoDbRequestLedger
    from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher
    from serenity_allocator.application.allocator.audit_dead_letters import audit_dead_letters
    from serenity_tools.operator.dlq_audit import peek_dead_letters

    read = peek_dead_letters(
        local_client("sqs", resources.endpoint("sqs")), resources.dlq_url, wait_s=0
    )
    audit_dead_letters(
        read.letters,
        DynamoDbRequestLedger(
            resources.ledger_table, local_client("dynamodb", resources.endpoint("dynamodb"))
        ),
        OutcomePublisher(
            resources.bus_name, events=local_client("events", resources.endpoint("events"))
        ),
        # After the drain no receive is still writing: nothing the audit finds is live.
        now_s=time.time() + PROVISIONAL_GRACE_S,
    )
    return read.reads


def check_ledger(
    requests: Iterable[EnsureRequest | ReleaseRequest],
    outcomes: Sequence[AllocationOutcome],
    ledger: Mapping[str, LedgerEntry],
    dead_lettered: Collection[str] = (),
) -> InvariantResult:
    """Exactly one terminal record per request; every published outcome equals its record.

    Args:
        requests: The valid requests enqueued.
        outcomes: Every outcome event published, in order.
        ledger: The ledger table at the end of the run, by request id.
        dead_lettered: Request ids found in the DLQ. Their record is terminal like any other:
            ``deadLettered``, or ``final`` when the request completed and only the delete of
            its message was lost (a crash after the handler on the final receive).
    """
    request_ids = list(dict.fromkeys(r.request_id for r in requests))
    violations = [*_without_terminal_record(request_ids, ledger), *_unlike_record(outcomes, ledger)]
    in_dlq = sum(1 for rid in request_ids if rid in dead_lettered)
    covered = (
        f"{len(request_ids)} requests with one terminal record each ({in_dlq} in the DLQ); "
        f"{len(outcomes)} outcome events equal their record"
    )
    return invariant_result(INVARIANT_NAME, violations, covered)


def _without_terminal_record(
    request_ids: Iterable[str], ledger: Mapping[str, LedgerEntry]
) -> list[str]:
    violations = []
    for request_id in request_ids:
        entry = ledger.get(request_id)
        if entry is None or not entry.is_terminal or entry.outcome is None:
            state = "no record" if entry is None else f"state {entry.state}"
            violations.append(f"{request_id}: {state}, not one terminal record")
    return violations


def _unlike_record(
    outcomes: Iterable[AllocationOutcome], ledger: Mapping[str, LedgerEntry]
) -> list[str]:
    violations = []
    for outcome in outcomes:
        entry = ledger.get(outcome.request_id)
        held = entry.outcome if entry is not None else None
        if not _matches_record(outcome, held):
            violations.append(
                f"{outcome.request_id}: published {outcome.status}/{outcome.error_code}"
                f" but the ledger holds "
                + (f"{held.status}/{held.error_code}" if held is not None else "nothing")
            )
    return violations


def _matches_record(outcome: AllocationOutcome, held: AllocationOutcome | None) -> bool:
    if held == outcome:
        return True
    # A redrive replaced the dead letter, explicitly.
    return bool(outcome.dead_lettered) and held is not None and held.supersedes == "deadLettered"
