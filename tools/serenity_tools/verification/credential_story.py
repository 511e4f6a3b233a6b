"""Who acts in a local run under IMS: each brand's users, an intruder, a lapsed user, an operator.

The real path of ``docs/credentials.md``: every child's service acts for a user who is a member
of the child and its pool (``POST /__ims/users``), and enqueues with that user's access token
(the producer mints the promise token and writes it to the credentials table first). A burst
child has two users, so a coalesced top-up has members of two users (the leader's token makes
the combined transfer; each member is admitted by its own read).

Besides them, the outcomes the credential model adds, one request each:

- ``accessDenied``: the intruder (a member of the pool and of one idle child) asks for a child
  it is not a member of; Semrush refuses its token and nothing of it is applied;
- ``needsReauth``: the lapsed user's service minted a promise token itself, then the user's
  session was revoked (the chain invalidated) before the worker ran; the exchange is refused
  and the request is dead-lettered with that reason (re-mint, then redrive);
- ``noCredential``: a legacy sender enqueues without writing a record; dead-lettered with that
  reason (redrive after a new record).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serenity_allocator.adapters.sqs import AllocationProducer, build_ensure
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_tools.standins.identities import LocalIdentities, UserProducer
from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.invariants import (
    DIMENSIONS,
    InvariantResult,
    first_outcomes,
    invariant_result,
    workspace_dim,
)

Request = EnsureRequest | ReleaseRequest
INTRUDER = "user-intruder"
LAPSED = "user-lapsed"
OPERATOR = "user-operator"
EXPECTED_REFUSALS = {
    "accessDenied": ("rejected", "accessDenied"),
    "needsReauth": ("failed", "needsReauth"),
    "noCredential": ("failed", "noCredential"),
}
"""Each credential outcome the story provokes: (status, error_code)."""


def user_of(child: str, second: bool = False) -> str:
    """The user a child's service acts for (``second``: its other user, for a burst)."""
    return f"user-{child}" + ("-b" if second else "")


def add_brand_users(
    identities: LocalIdentities,
    workspaces: Iterable[Mapping[str, Any]],
    *,
    two_users: Iterable[str] = (),
) -> None:
    """One user per child (a member of the child and its pool); two for ``two_users``."""
    doubled = set(two_users)
    for workspace in workspaces:
        parent = workspace.get("parent_id")
        if not parent:
            continue
        child = str(workspace["id"])
        identities.add_user(user_of(child), [str(parent), child])
        if child in doubled:
            identities.add_user(user_of(child, second=True), [str(parent), child])


def add_operator(identities: LocalIdentities, master: str, children: Iterable[str]) -> None:
    """The sweep's operator: a member of the pool and every child of it."""
    identities.add_user(OPERATOR, [master, *children])


def burst_users(requests: Sequence[Request]) -> dict[str, str]:
    """A burst's requests, alternating between the child's two users (the first leads)."""
    return {
        request.request_id: user_of(request.workspace_id, second=bool(index % 2))
        for index, request in enumerate(requests)
    }


@dataclass(frozen=True)
class Refusals:
    """The story's three refused requests, by outcome code."""

    requests: Mapping[str, EnsureRequest]

    @property
    def all(self) -> list[EnsureRequest]:
        """The three requests, in the order they were sent."""
        return list(self.requests.values())

    @property
    def dead_lettered(self) -> dict[str, str]:
        """Request id -> the DLQ reason it must carry."""
        return {self.requests[code].request_id: code for code in ("needsReauth", "noCredential")}


def send_refusals(
    identities: LocalIdentities,
    producer: UserProducer,
    legacy: AllocationProducer,
    *,
    master: str,
    denied_child: str,
    idle_children: Sequence[str],
) -> Refusals:
    """Send the three refused requests (intruder, lapsed, legacy), each on its own child.

    ``denied_child`` is a child the intruder is not a member of; ``idle_children`` are three
    children no other request of the run touches (the intruder's own, the lapsed user's, and
    the legacy sender's).
    """
    own, lapsed_child, legacy_child = idle_children[:3]
    identities.add_user(INTRUDER, [master, own])
    identities.add_user(LAPSED, [master, lapsed_child])
    denied = build_ensure(denied_child, master, {"prompts": 50})
    producer.enqueue(denied, INTRUDER)

    revoked = build_ensure(lapsed_child, master, {"prompts": 50})
    ims = identities.ims()
    try:
        # The service minted the promise itself; then the user's session was revoked.
        promise = ims.mint(identities.user(LAPSED).access_token).promise_token
        producer.enqueue_promise(revoked, LAPSED, promise)
        ims.invalidate(promise)
    finally:
        ims.close()

    missing = build_ensure(legacy_child, master, {"prompts": 50})
    legacy.enqueue(missing)  # no credential: the legacy sender writes no record
    return Refusals({"accessDenied": denied, "needsReauth": revoked, "noCredential": missing})


def check_refusals(
    refusals: Refusals,
    outcomes: Iterable[AllocationOutcome],
    before: Mapping[str, Mapping[str, Any]],
    after: Mapping[str, Mapping[str, Any]],
    letters: Sequence[DeadLetter],
) -> InvariantResult:
    """Each refused request ends with its code and nothing of it applied.

    The dead-lettered ones carry their reason; the ``accessDenied`` one is never in the DLQ.
    """
    first = first_outcomes(outcomes)
    reasons = {letter.request_id: letter.reason for letter in letters}
    violations: list[str] = []
    for code, request in refusals.requests.items():
        rid, child = request.request_id, request.workspace_id
        got = first.get(rid)
        expected = EXPECTED_REFUSALS[code]
        if got is None or (got.status, got.error_code) != expected:
            shown = "no outcome" if got is None else f"{got.status}/{got.error_code}"
            violations.append(f"{code} request {rid}: {shown}, expected {'/'.join(expected)}")
        moved = [
            dim
            for dim in DIMENSIONS
            if workspace_dim(before.get(child, {}), dim, "total")
            != workspace_dim(after.get(child, {}), dim, "total")
        ]
        if moved:
            violations.append(f"{code} request {rid}: {child} {', '.join(moved)} changed")
        wanted = refusals.dead_lettered.get(rid)
        if reasons.get(rid) != wanted:
            violations.append(f"{code} request {rid}: DLQ reason {reasons.get(rid)}, not {wanted}")
    return invariant_result(
        "credential outcomes",
        violations,
        "accessDenied (rejected, nothing applied, not in the DLQ), needsReauth and noCredential "
        "(failed, in the DLQ with that reason)",
    )


def check_scrubbed(
    items: Sequence[Mapping[str, Any]], not_scrubbed: Mapping[str, str]
) -> InvariantResult:
    """No credentials-table item still holds a promise token once every request is terminal.

    A record the worker reported as not scrubbed (``not_scrubbed``: request id -> its logged
    reason, :func:`not_scrubbed_records`) is explained, not a violation: its promise was
    invalidated at the end and the record expires with its TTL (the scrub is best effort).
    """
    held = sorted(str(item["request_id"]["S"]) for item in items if "promise_token" in item)
    reported = [f"{rid} ({not_scrubbed[rid]})" for rid in held if rid in not_scrubbed]
    return invariant_result(
        "no promise token at rest",
        [f"{rid}: record still holds its promise token" for rid in held if rid not in not_scrubbed],
        f"{len(items)} credential records, none holding a token unreported; "
        f"{len(reported)} reported not scrubbed, invalidated, left to their TTL"
        + (f": {', '.join(reported[:3])}" if reported else ""),
    )


NOT_SCRUBBED_LOG = "credential record not scrubbed; it expires with its TTL"
"""The worker's warning when a terminal request's record kept its token."""


def not_scrubbed_records(paths: Iterable[Path]) -> dict[str, str]:
    """Request id -> reason, from the consumers' logs (the worker's not-scrubbed warnings)."""
    found: dict[str, str] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if NOT_SCRUBBED_LOG not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            rid = entry.get("credential_request_id") or entry.get("request_id")
            if isinstance(rid, str):
                found[rid] = str(entry.get("reason", "unknown"))
    return found


def credential_items(dynamodb: Any, table: str) -> list[dict[str, Any]]:
    """Every item of the credentials table (a local scan; never decrypted)."""
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = dynamodb.scan(**kwargs)
        items += page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def hand_run_token(identities: LocalIdentities, store: Any, cipher: Any, run_id: str) -> None:
    """What ``serenity-allocator sweep`` does before a run's first batch.

    It mints the operator's promise token and puts it, KMS-encrypted, on the run's claim.
    """
    from serenity_allocator.application.sweep.run_tokens import hand_over_run_token

    with identities.ims() as ims:
        promise = ims.mint(identities.user(OPERATOR).access_token).promise_token
    hand_over_run_token(store, cipher, run_id, promise)


def run_claim(store: Any, run_id: str) -> dict[str, Any] | None:
    """The run's claim document as stored (ciphertexts only), or None."""
    from serenity_allocator.domain.sweep.run_claim import run_claim_name

    stored = store.load(run_claim_name(run_id))
    return None if stored is None else dict(stored.body)


def _claims_not_ended(claims: Sequence[Mapping[str, Any] | None]) -> list[str]:
    return [
        f"run {index + 1}: its claim still holds a token or never ended"
        for index, claim in enumerate(claims)
        if claim is None
        or claim.get("promise_token")
        or claim.get("handover")
        or not claim.get("ended")
    ]


def check_sweep_rolled(
    runs: Sequence[Sequence[Mapping[str, Any]]],
    exchanged: int,
    claims: Sequence[Mapping[str, Any] | None],
) -> InvariantResult:
    """Each sweep run outlived several batches on one promise because every batch rolled it.

    The simulator spends a promise token at its exchange, so a run that did not store the
    rolled one would be refused at its second batch. ``exchanged`` is the Sweep's own
    ``CredentialOutcome{Outcome=exchanged}`` count; ``claims`` the runs' claims at the end
    (ended, no token left on them).
    """
    batches = [len(results) for results in runs]
    violations = [
        f"run {index + 1}: not done after {len(results)} batches"
        for index, results in enumerate(runs)
        if not results or not results[-1].get("done")
    ]
    violations += [f"run {i + 1}: one batch only" for i, count in enumerate(batches) if count < 2]
    if exchanged != sum(batches):
        violations.append(f"{exchanged} exchanges for {sum(batches)} batches (one each)")
    violations += _claims_not_ended(claims)
    return invariant_result(
        "sweep token rolled per batch",
        violations,
        f"{len(runs)} runs of {'+'.join(map(str, batches))} batches on one promise each: "
        f"{exchanged} exchanges (rolled, stored each time); claims ended, no token left",
    )
