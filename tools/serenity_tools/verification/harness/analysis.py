"""What a drained run shows: the invariant checks over it, lost updates, latencies, counts."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.verification.checks import (
    BROKER_CHECKS,
    CORE_CHECKS,
    Check,
    RunRecord,
    check_dead_letters,
    run_checks,
)
from serenity_tools.verification.emf import MetricTotal, count_metrics_in_files
from serenity_tools.verification.harness.drain import DrainedRun
from serenity_tools.verification.harness.workload import Org, Request
from serenity_tools.verification.invariants import (
    InvariantResult,
    in_child_order,
    transfer_sequences,
    workspace_dim,
)
from serenity_tools.verification.replays import publish_failures

if TYPE_CHECKING:
    from serenity_tools.verification.emf import MetricKey


def run_record(
    org: Org,
    requests: Sequence[Request],
    run: DrainedRun,
    *,
    strict_transfers: bool = True,
    expected_dead: Collection[str] = (),
) -> RunRecord:
    """The record the checks read, from a drained run over ``org``."""
    return RunRecord(
        masters=org.masters,
        requests=requests,
        before=run.before,
        after=run.after,
        calls=run.calls,
        outcomes=run.outcomes,
        letters=run.letters,
        events=run.events,
        visibility_timeout_s=run.visibility_timeout_s,
        max_receive_count=run.max_receive_count,
        expected_dead=frozenset(expected_dead),
        strict_transfers=strict_transfers,
        drained=run.drained,
        ledger=run.ledger,
        publish_failures=publish_failures(run.pool.stdout_paths),
        identity=run.identity,
    )


def invariant_checks(record: RunRecord, extra: Iterable[Check] = ()) -> list[InvariantResult]:
    """Invariants 1-5 over every pool, the two broker checks, then ``extra``."""
    return run_checks(record, [*CORE_CHECKS, *BROKER_CHECKS, *extra])


def drain_checks(
    run: DrainedRun, *, expected_dead: set[str] | None = None
) -> list[InvariantResult]:
    """Everything was sent and drained; the DLQ holds exactly the expected requests."""
    return [
        queue_drained_check(run),
        check_dead_letters(run.letters, expected_dead or set(), expected_invalid=0),
    ]


def queue_drained_check(run: DrainedRun) -> InvariantResult:
    """Everything was sent and the queue drained in time."""
    return InvariantResult(
        "queue drained",
        run.drained,
        f"{len(run.enqueued_at)} sent, queue empty after {run.duration_s:.1f} s"
        if run.drained
        else "the queue did not drain in time" + ("" if run.sent_all else " (not all sent)"),
    )


@dataclass(frozen=True)
class LostUpdates:
    """What a queue without per-child serialization did to the children.

    Attributes:
        stale_ensures: Ensure transfers computed from a stale read (the child's total had
            moved between the worker's read and its absolute write: that move was lost).
        stale_releases: The same for releases (a release overwrote a concurrent top-up).
        out_of_order: Outcomes applied after an outcome of a LATER-enqueued request of the
            same child.
        violations: Each of them, one line each.
    """

    stale_ensures: int
    stale_releases: int
    out_of_order: int
    violations: tuple[str, ...]


def count_lost_updates(
    requests: Sequence[Request],
    outcomes: Sequence[AllocationOutcome],
    calls: Sequence[Mapping[str, Any]],
    before: Mapping[str, Mapping[str, Any]],
) -> LostUpdates:
    """Match each reported change to the simulator's transfers and count the stale ones.

    Per child, the simulator's call log gives the totals after each applied transfer; an
    outcome that reports ``before -> after`` is matched to the first unmatched transfer that
    set ``after``. It is stale when the total just before that transfer was not ``before``
    (or when no transfer set it: another worker's write already had).
    """
    position = {request.request_id: index for index, request in enumerate(requests)}
    sequences = transfer_sequences(calls, before)
    by_child: dict[str, list[AllocationOutcome]] = defaultdict(list)
    for outcome in in_child_order(outcomes):
        by_child[outcome.workspace_id].append(outcome)
    stale = Counter[str]()
    out_of_order: list[str] = []
    stale_lines: list[str] = []
    for child, child_outcomes in by_child.items():
        out_of_order += _out_of_order(child, child_outcomes, position)
        start = before.get(child, {})
        totals = [
            # A tiered child's prompts: its tightest tier, as the allocator reports them.
            (workspace_dim(start, "projects", "total"), workspace_dim(start, "prompts", "total")),
            *sequences.get(child, []),
        ]
        stale_lines += _stale_changes(child, child_outcomes, totals, stale)
    return LostUpdates(
        stale["ensure"], stale["release"], len(out_of_order), tuple(out_of_order + stale_lines)
    )


def _out_of_order(
    child: str, child_outcomes: Sequence[AllocationOutcome], position: Mapping[str, int]
) -> list[str]:
    """An outcome applied after one of a LATER-enqueued request of the same child."""
    violations: list[str] = []
    latest = -1
    for outcome in child_outcomes:
        enqueued = position.get(outcome.request_id, -1)
        if enqueued < latest:
            violations.append(f"{child}: {outcome.request_id[:8]} applied after a later one")
        latest = max(latest, enqueued)
    return violations


_Change = tuple[tuple[int, int], tuple[int, int]]


def _changes(
    child_outcomes: Sequence[AllocationOutcome],
) -> list[tuple[AllocationOutcome, _Change]]:
    """Each outcome that moved the child, once per transfer (coalesced members share one)."""
    changes: list[tuple[AllocationOutcome, _Change]] = []
    previous: _Change | None = None
    for outcome in child_outcomes:
        b, a = outcome.totals_before, outcome.totals_after
        if b is None or a is None or b == a:
            continue
        change = ((b.projects, b.prompts), (a.projects, a.prompts))
        if change != previous:  # coalesced members report their leader's transfer
            changes.append((outcome, change))
        previous = change
    return changes


def _stale_changes(
    child: str,
    child_outcomes: Sequence[AllocationOutcome],
    totals: Sequence[tuple[int, int]],
    stale: Counter[str],
) -> list[str]:
    """Changes computed from a read the child's totals had already moved past."""
    matched = [False] * len(totals)
    violations: list[str] = []
    for outcome, (read, wrote) in _changes(child_outcomes):
        index = next(
            (i for i in range(1, len(totals)) if not matched[i] and totals[i] == wrote), None
        )
        if index is not None:
            matched[index] = True
        if index is None or totals[index - 1] != read:
            stale[outcome.kind] += 1
            violations.append(
                f"{child}: {outcome.kind} {outcome.request_id[:8]} read "
                f"{read[1]} prompts, set {wrote[1]}, but the total was "
                f"{totals[index - 1][1] if index else 'already there'}"
            )
    return violations


def check_no_lost_updates(lost: LostUpdates) -> InvariantResult:
    """No stale-read transfer and no out-of-order application (what FIFO groups guarantee)."""
    total = lost.stale_ensures + lost.stale_releases + lost.out_of_order
    detail = (
        f"{lost.stale_ensures} stale ensures, {lost.stale_releases} stale releases, "
        f"{lost.out_of_order} out-of-order applications"
    )
    return InvariantResult("no lost updates (stale reads)", total == 0, detail, lost.violations)


def request_latencies(
    enqueued_at: Mapping[str, float], events: Sequence[Mapping[str, Any]]
) -> dict[str, float]:
    """Request id -> seconds from its send to the delete of its message (first delete)."""
    rid_of: dict[str, str] = {}
    done: dict[str, float] = {}
    for event in events:
        if event.get("ev") == "receive":
            for message in event.get("msgs", []):
                if isinstance(message.get("request_id"), str):
                    rid_of[str(message["id"])] = message["request_id"]
        elif event.get("ev") == "release":
            for message_id in event.get("deleted", []):
                rid = rid_of.get(message_id)
                if rid is not None and rid in enqueued_at:
                    done.setdefault(rid, float(event.get("t_done", event["t"])))
    return {rid: at - enqueued_at[rid] for rid, at in done.items()}


def redelivered(events: Sequence[Mapping[str, Any]], request_ids: set[str]) -> int:
    """How many of ``request_ids`` were received more than once."""
    return len(
        {
            m["request_id"]
            for e in events
            if e.get("ev") == "receive"
            for m in e.get("msgs", [])
            if m.get("request_id") in request_ids and int(m.get("receive_count", 1)) > 1
        }
    )


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` of the sorted values (nearest rank); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


_FEATURE_METRICS: tuple[tuple[str, str | None], ...] = (
    ("HeadroomCheck", "unmetered"),
    ("HeadroomCheck", "refilled"),
    ("HeadroomCheck", "rightsized"),
    ("TightPoolFallback", "saved"),
    ("TightPoolFallback", "rejected"),
    ("SiblingReclaim", "enqueued"),
    ("SiblingReclaim", "parked"),
    ("SiblingReclaim", "served"),
    ("SiblingReclaim", "exhausted"),
    ("CoalescedEnsures", None),
    ("InvalidMessage", None),
)


def feature_numbers(run: DrainedRun) -> dict[str, float]:
    """The allocation features and coalescing at work, counted from the EMF output."""
    totals: dict[MetricKey, MetricTotal] = count_metrics_in_files(run.pool.stdout_paths)
    numbers: dict[str, float] = {}
    for name, value in _FEATURE_METRICS:
        total = sum(t.total for k, t in totals.items() if k.name == name and k.value == value)
        numbers[f"{name}{'{' + value + '}' if value else ''}"] = total
    numbers["serenity.pool.low events"] = run.pool_low_events
    return numbers
