"""The checks a run must pass, as lists of small functions over one record of the run.

A check is ``def check_something(run: RunRecord) -> InvariantResult``: it reads what the run
left behind (:class:`RunRecord`) and never raises on a violation. The demo runs
:data:`DEMO_CHECKS`; each harness scenario runs :data:`CORE_CHECKS` and :data:`BROKER_CHECKS`
plus its own. To add an invariant, write the function and append it to the lists that should
run it; if it needs an observation the record lacks, add a field with a default to
:class:`RunRecord` and fill it where the run is recorded (``demo.run_demo``,
``harness.drain.drain_workload``).

Replays: outcome events are at-least-once (ADR 0009), so an identical repeat is reported with
its cause, never a violation: :attr:`RunRecord.replays` (:func:`.replays.explain_replays`)
names the batches whose consumer died and the records that failed after their outcome went
out (a PutEvents that timed out but landed). Two events with different content for one
request are a violation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from serenity_allocator.domain.ledger import LedgerEntry
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.identity import NAME as IDENTITY_NAME
from serenity_tools.verification.identity import IdentityRecord, check_user_tokens
from serenity_tools.verification.invariants import (
    InvariantResult,
    check_bounds,
    check_conservation,
    check_fifo_delivery,
    check_group_exclusivity,
    check_headroom,
    check_order,
    check_terminal_outcomes,
)
from serenity_tools.verification.ledger_check import check_ledger
from serenity_tools.verification.replays import ReplayCauses, explain_replays
from serenity_tools.verification.write_path import (
    INVARIANT_NAME,
    WriteRecord,
    check_guarded_writes,
)
from serenity_tools.verification.writes import MeteredWrites

Request = EnsureRequest | ReleaseRequest
Workspaces = Mapping[str, Mapping[str, Any]]


@dataclass
class RunRecord:
    """Everything a check reads about one drained run.

    Attributes:
        masters: The org pools (master workspace ids) the run used.
        requests: Every request enqueued, each child's in its enqueue order.
        before: Workspaces at the start, by id.
        after: Workspaces at the end, by id.
        calls: The simulator's call log.
        outcomes: Outcome events, in publication order.
        letters: What the DLQ held at the end.
        events: The consumers' trace events (receive, release, crash), by time.
        visibility_timeout_s: The queue's visibility timeout.
        max_receive_count: The redrive policy's maxReceiveCount.
        expected_dead: Request ids the run expects in the DLQ (redriven, no reason).
        expected_invalid: Invalid messages the run expects in the DLQ (with a reason).
        strict_transfers: Every applied transfer must be reported by an outcome (False where
            a timed-out call may land after the client gave up).
        writes: The services' metered writes after the drain, when the run made them.
        drained: The queue emptied in time.
    """

    masters: Sequence[str]
    requests: Sequence[Request]
    before: Workspaces
    after: Workspaces
    calls: Sequence[Mapping[str, Any]]
    outcomes: Sequence[AllocationOutcome]
    letters: Sequence[DeadLetter]
    events: Sequence[Mapping[str, Any]]
    visibility_timeout_s: float
    max_receive_count: int
    expected_dead: frozenset[str] = frozenset()
    expected_invalid: int = 0
    strict_transfers: bool = True
    writes: MeteredWrites | None = None
    guarded_writes: Sequence[WriteRecord] | None = None
    """The services' guarded writes on the write gate, when the run made them."""
    drained: bool = True
    ledger: Mapping[str, LedgerEntry] | None = None
    """The request ledger table at the end, by request id (None: the run had no ledger)."""
    publish_failures: Mapping[str, str] = field(default_factory=dict)
    """Request id -> the PutEvents failure the worker logged (:func:`.replays.publish_failures`)."""
    identity: IdentityRecord | None = None
    """Whose each request is and who is a member of what (None: a static-token run)."""
    sibling_reclaim: bool = False
    """Sibling reclaim was on (a parked ensure may read its pool's other children)."""

    @cached_property
    def replays(self) -> ReplayCauses:
        """The interrupted batches and the replays they explain."""
        return explain_replays(self.events, self.publish_failures)

    @property
    def dead_lettered(self) -> set[str]:
        """Request ids found in the DLQ."""
        return {letter.request_id or "" for letter in self.letters}


Check = Callable[[RunRecord], InvariantResult]


def _merged(name: str, results: Sequence[InvariantResult]) -> InvariantResult:
    violations = tuple(v for r in results for v in r.violations)
    if not violations:
        return InvariantResult(name, True, "; ".join(r.detail for r in results))
    failed = "; ".join(r.detail for r in results if not r.passed)
    return InvariantResult(name, False, failed, violations)


def conservation(run: RunRecord) -> InvariantResult:
    """1. Per pool, master + children totals are unchanged."""
    results = [check_conservation(m, run.before, run.after) for m in run.masters]
    if len(results) == 1:
        return results[0]
    prefix = "master + children totals: "
    labelled = [
        replace(r, detail=f"{m} {r.detail.removeprefix(prefix)}")
        for m, r in zip(run.masters, results, strict=True)
    ]
    return _merged("1 conservation", labelled)


def _one_family(workspaces: Workspaces, masters: Iterable[str]) -> dict[str, Mapping[str, Any]]:
    # check_bounds looks at one parent's children; present every pool's children as one family
    # so each outcome is checked once.
    pools = set(masters)
    return {
        wid: {**w, "parent_id": "*"} if w.get("parent_id") in pools else w
        for wid, w in workspaces.items()
    }


def bounds(run: RunRecord) -> InvariantResult:
    """2. No child below its usage, no ensure past its ceiling, no release below its floor."""
    family = _one_family(run.after, run.masters)
    return check_bounds(family, run.requests, run.outcomes, parent_id="*")


def terminal_outcomes(run: RunRecord) -> InvariantResult:
    """3. One terminal ledger record per request, or the DLQ; events judged by content."""
    return check_terminal_outcomes(
        run.requests,
        run.outcomes,
        run.dead_lettered,
        replay_causes=run.replays.by_request,
        ledger=run.ledger,
    )


def order(run: RunRecord) -> InvariantResult:
    """4. Per child, applied in enqueue order (lenient where a batch was interrupted)."""
    return check_order(
        run.requests,
        run.outcomes,
        run.calls,
        run.before,
        strict_transfers=run.strict_transfers,
        lenient_children=run.replays.interrupted_groups,
    )


def headroom(run: RunRecord) -> InvariantResult:
    """5. Every applied ensure left total >= used + need."""
    return check_headroom(run.requests, run.outcomes, run.before)


def ledger_records(run: RunRecord) -> InvariantResult:
    """6. Exactly one terminal ledger record per request; every outcome equals its record."""
    if run.ledger is None:
        return InvariantResult("6 ledger", True, "no ledger in this run")
    return check_ledger(run.requests, run.outcomes, run.ledger, run.dead_lettered)


def user_tokens(run: RunRecord) -> InvariantResult:
    """7. Every call of a request under its own user's token; applied for members only."""
    if run.identity is None:
        return InvariantResult(IDENTITY_NAME, True, "static-token run: no user tokens to check")
    return check_user_tokens(
        run.calls,
        run.events,
        run.requests,
        run.outcomes,
        run.before,
        run.identity,
        visibility_timeout_s=run.visibility_timeout_s,
        siblings=run.sibling_reclaim,
    )


def group_exclusivity(run: RunRecord) -> InvariantResult:
    """BROKER: no message group held by two consumers at once."""
    return check_group_exclusivity(run.events, run.visibility_timeout_s)


def fifo_delivery(run: RunRecord) -> InvariantResult:
    """BROKER: each group delivered in enqueue order."""
    return check_fifo_delivery(run.events, run.requests, run.max_receive_count)


def dead_letters(run: RunRecord) -> InvariantResult:
    """The DLQ holds exactly the expected requests and invalid messages, with reasons."""
    return check_dead_letters(run.letters, set(run.expected_dead), run.expected_invalid)


def writes_accepted(run: RunRecord) -> InvariantResult:
    """The metered gateway accepted every write an applied ensure prepared for."""
    if run.writes is None:
        return InvariantResult("writes after ensure accepted", True, "no writes made")
    return run.writes.result()


def guarded_writes_fit_the_pool(run: RunRecord) -> InvariantResult:
    """No guarded write ended refused while its org pool had room for it."""
    if run.guarded_writes is None:
        return InvariantResult(INVARIANT_NAME, True, "no guarded writes made")
    return check_guarded_writes(run.guarded_writes)


def queue_drained(run: RunRecord) -> InvariantResult:
    """The queue emptied within the run's budget."""
    detail = "queue empty, nothing in flight" if run.drained else "the queue did not drain in time"
    return InvariantResult("queue drained", run.drained, detail)


def check_dead_letters(
    letters: Sequence[DeadLetter], expected_request_ids: set[str], expected_invalid: int
) -> InvariantResult:
    """The DLQ holds exactly the expected requests and the malformed messages, with reasons."""
    got_ids = {letter.request_id for letter in letters if letter.reason is None}
    invalid = [letter for letter in letters if letter.reason is not None]
    violations = []
    if got_ids != expected_request_ids:
        violations.append(
            f"redriven {sorted(map(str, got_ids))}, expected {sorted(expected_request_ids)}"
        )
    if len(invalid) != expected_invalid:
        violations.append(f"{len(invalid)} invalid messages, expected {expected_invalid}")
    detail = (
        f"{len(got_ids)} redriven (zombie), {len(invalid)} invalid with its reason, nothing else"
    )
    if violations:
        return InvariantResult("DLQ contents", False, "; ".join(violations), tuple(violations))
    return InvariantResult("DLQ contents", True, detail)


CORE_CHECKS: tuple[Check, ...] = (
    conservation,
    bounds,
    terminal_outcomes,
    order,
    headroom,
    ledger_records,
    user_tokens,
)
"""Invariants 1-7."""

BROKER_CHECKS: tuple[Check, ...] = (group_exclusivity, fifo_delivery)
"""What the broker must do for the invariants to mean anything."""

DEMO_CHECKS: list[Check] = [
    *CORE_CHECKS,
    dead_letters,
    writes_accepted,
    guarded_writes_fit_the_pool,
    *BROKER_CHECKS,
    queue_drained,
]
"""What ``make demo`` checks, in report order."""


def run_checks(run: RunRecord, checks: Iterable[Check]) -> list[InvariantResult]:
    """Each check's verdict, in order."""
    return [check(run) for check in checks]


def explained_lines(results: Iterable[InvariantResult]) -> list[str]:
    """Every explained item of every result (for the explained-replays table)."""
    return [line for result in results for line in result.explained]
