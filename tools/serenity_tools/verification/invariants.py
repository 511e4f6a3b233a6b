"""The invariants every local scenario must keep, as checks over what the run left behind.

Inputs are plain observations, gathered after the run:

- ``requests``: every request enqueued, in enqueue order (per child, the order of this list is
  the order the producer sent them; give each child's requests from one sender);
- ``outcomes``: the outcome events, in publication order (:class:`.outcome_capture.OutcomeCapture`);
- workspaces in the simulator's seed shape (``{"id", "parent_id", "ai": {dim: {used, drafted,
  total}}}``), before and after, indexed by id with :func:`workspaces_by_id`;
- the simulator's call log and the consumers' trace events (:func:`.consumer.read_trace_events`).

The numbered checks are the allocator's invariants 1-5. Two more check the BROKER, not our code:
:func:`check_group_exclusivity` (no message group held by two consumers at once) and
:func:`check_fifo_delivery` (each group delivered in enqueue order). When one of those fails,
an order violation in invariant 4 is the broker's, and the report says so.

Each check returns an :class:`InvariantResult`; none raises on a violation.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from serenity_allocator.domain.ledger import LedgerEntry
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_allocator.domain.model import DEFAULT_BLOCKS, Dimension, Totals

Request = EnsureRequest | ReleaseRequest
Workspaces = Mapping[str, Mapping[str, Any]]
DIMENSIONS = ("projects", "prompts")
_MAX_LISTED = 5
_DEFAULT_FLOOR = DEFAULT_BLOCKS.as_totals()
_APPLIED_ENSURE = frozenset({"hot-path", "topped-up", "topped-up-after-reclaim"})


@dataclass(frozen=True)
class InvariantResult:
    """One check's verdict.

    Attributes:
        name: What was checked (short, for a table row).
        passed: True when no violation was found.
        detail: One line: what was covered, or the first violations.
        violations: Every violation found, one line each.
        explained: What the check accepted because the run's traces explain it (a replay after
            a traced crash or function timeout), one line each: reported, never a violation.
    """

    name: str
    passed: bool
    detail: str
    violations: tuple[str, ...] = field(default=())
    explained: tuple[str, ...] = field(default=())


def invariant_result(name: str, violations: Sequence[str], covered: str) -> InvariantResult:
    """A passing result saying what was ``covered``, or a failing one listing ``violations``."""
    if not violations:
        return InvariantResult(name, True, covered)
    shown = "; ".join(violations[:_MAX_LISTED])
    more = f" (+{len(violations) - _MAX_LISTED} more)" if len(violations) > _MAX_LISTED else ""
    return InvariantResult(
        name, False, f"{len(violations)} violation(s): {shown}{more}", tuple(violations)
    )


def workspaces_by_id(workspaces: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Index seed-shape workspaces (e.g. ``simulator.dump()["workspaces"]``) by id."""
    return {str(workspace["id"]): workspace for workspace in workspaces}


def workspace_dim(workspace: Mapping[str, Any], dim: str, key: str) -> int:
    """One count of a seed-shape workspace (0 when absent); a tiered one's tightest tier."""
    ai = workspace.get("ai", {})
    if dim == "prompts" and "prompts" not in ai and "daily_prompts" in ai:
        # A tiered workspace: its prompts are the tightest tier, as the allocator reads them.
        daily, weekly = ai["daily_prompts"], ai["weekly_prompts"]
        free = {name: tier["total"] - tier["used"] for name, tier in (("d", daily), ("w", weekly))}
        return int((weekly if free["w"] < free["d"] else daily).get(key, 0))
    return int(ai.get(dim, {}).get(key, 0))


def _children(workspaces: Workspaces, parent_id: str) -> list[Mapping[str, Any]]:
    return [w for w in workspaces.values() if w.get("parent_id") == parent_id]


def first_outcomes(outcomes: Iterable[AllocationOutcome]) -> dict[str, AllocationOutcome]:
    """The first outcome of each request id, in publication order."""
    first: dict[str, AllocationOutcome] = {}
    for outcome in outcomes:
        first.setdefault(outcome.request_id, outcome)
    return first


def in_child_order(outcomes: Iterable[AllocationOutcome]) -> list[AllocationOutcome]:
    """The first outcome of each request, sorted by its order key (``sequence_number``).

    The key is the SQS sequence number of the message behind the outcome, so within a child
    this is the order of its message group whatever order the bus delivered the events in.
    Outcomes without a key (none from the worker) keep their arrival order, after the rest.
    """
    first = list(first_outcomes(outcomes).values())
    return sorted(
        first,
        key=lambda o: (o.sequence_number is None, int(o.sequence_number or 0)),
    )


# -- 1. conservation ------------------------------------------------------------------------------


def check_conservation(parent_id: str, before: Workspaces, after: Workspaces) -> InvariantResult:
    """1. master total + sum of its children's totals is unchanged, per dimension."""
    name = "1 conservation"

    def pool_sum(workspaces: Workspaces, dim: str) -> int:
        master = workspaces.get(parent_id)
        own = workspace_dim(master, dim, "total") if master is not None else 0
        return own + sum(
            workspace_dim(child, dim, "total") for child in _children(workspaces, parent_id)
        )

    violations = []
    sums = []
    for dim in DIMENSIONS:
        start, end = pool_sum(before, dim), pool_sum(after, dim)
        sums.append(f"{dim} {start}->{end}")
        if start != end:
            violations.append(f"{dim}: master+children total was {start}, is {end}")
    return invariant_result(name, violations, "master + children totals: " + ", ".join(sums))


# -- 2. bounds ------------------------------------------------------------------------------------


def check_bounds(
    after: Workspaces,
    requests: Sequence[Request],
    outcomes: Iterable[AllocationOutcome],
    *,
    parent_id: str,
    default_floor: Totals = _DEFAULT_FLOOR,
    metered_below_used: Collection[str] = (),
) -> InvariantResult:
    """2. No child below its usage, no ensure past its ceiling, no release below its floor.

    Args:
        after: The workspaces at the end.
        requests: Every request enqueued.
        outcomes: The outcome events.
        parent_id: The master whose children are checked.
        default_floor: The floor of a release that names none (one block per dimension).
        metered_below_used: Children the scenario metered below their total on purpose.
    """
    name = "2 bounds (used, ceiling, floor)"
    by_id = {request.request_id: request for request in requests}
    children = _children(after, parent_id)
    violations = _below_used(children, metered_below_used)
    ceilings = floors = 0
    for outcome in first_outcomes(outcomes).values():
        request = by_id.get(outcome.request_id)
        if isinstance(request, EnsureRequest) and request.ceiling is not None:
            ceilings += 1
            violations += _past_ceiling(outcome, request)
        if isinstance(request, ReleaseRequest) and outcome.status == "released":
            floors += 1
            violations += _below_floor(outcome, request, request.floor or default_floor)
    return invariant_result(
        name,
        violations,
        f"{len(children)} children total >= used; {ceilings} ceilinged ensures; "
        f"{floors} releases above floor",
    )


def _below_used(
    children: Iterable[Mapping[str, Any]], metered_below_used: Collection[str]
) -> list[str]:
    return [
        f"{child['id']} {dim} total {workspace_dim(child, dim, 'total')} < used "
        f"{workspace_dim(child, dim, 'used')}"
        for child in children
        if child["id"] not in metered_below_used
        for dim in DIMENSIONS
        if workspace_dim(child, dim, "total") < workspace_dim(child, dim, "used")
    ]


def _past_ceiling(outcome: AllocationOutcome, request: EnsureRequest) -> list[str]:
    before, result, ceiling = outcome.totals_before, outcome.totals_after, request.ceiling
    if before is None or result is None or ceiling is None:
        return []
    # A dimension the ceiling leaves out is not enforced (never a cap of 0).
    return [
        f"{outcome.request_id} raised {request.workspace_id} {dim} to "
        f"{getattr(result, dim)} past ceiling {limit}"
        for dim in DIMENSIONS
        if (limit := ceiling.limit(Dimension(dim))) is not None
        and getattr(before, dim) < getattr(result, dim) > limit
    ]


def _below_floor(outcome: AllocationOutcome, request: ReleaseRequest, floor: Totals) -> list[str]:
    before, result = outcome.totals_before, outcome.totals_after
    if before is None or result is None:
        return []
    return [
        f"{outcome.request_id} lowered {request.workspace_id} {dim} to "
        f"{getattr(result, dim)} below floor {getattr(floor, dim)}"
        for dim in DIMENSIONS
        if getattr(before, dim) > getattr(result, dim) < getattr(floor, dim)
    ]


# -- 3. exactly one terminal outcome --------------------------------------------------------------


def check_terminal_outcomes(
    requests: Sequence[Request],
    outcomes: Iterable[AllocationOutcome],
    dead_lettered: Collection[str],
    *,
    allow_replays: bool = False,
    replay_causes: Mapping[str, str] | None = None,
    ledger: Mapping[str, LedgerEntry] | None = None,
) -> InvariantResult:
    """3. Every request has one terminal result, or sits in the DLQ; none is lost.

    Judged by the contract (ADR 0009): the ledger holds exactly one terminal record per
    request, and its outcome EVENTS are at-least-once. So events are compared by content:
    identical repeats are the promised at-least-once and are reported (count and cause: a
    crash or timeout that brought the batch back, a record failed after its outcome went out,
    typically a PutEvents that timed out but landed, or a publish retried by botocore after a
    timed-out attempt that had landed). Two events with DIFFERENT content for one request are
    a violation (except the documented redrive that supersedes a dead letter), and so is a
    request with no event and no DLQ entry.

    Args:
        requests: Every request enqueued.
        outcomes: The outcome events.
        dead_lettered: Request ids found in the DLQ.
        allow_replays: Accept differing repeats too (still counted in the detail).
        replay_causes: Request id -> why its message was delivered again
            (:func:`.replays.explain_replays`).
        ledger: The ledger table at the end, by request id; None when the run had none.
    """
    name = "3 one terminal outcome or DLQ"
    by_request: dict[str, list[AllocationOutcome]] = defaultdict(list)
    for outcome in outcomes:
        by_request[outcome.request_id].append(outcome)
    counts = Counter({rid: len(events) for rid, events in by_request.items()})
    known = {request.request_id for request in requests}
    missing_records, records = _ledger_records(known, ledger)
    violations = _lost(known, counts, dead_lettered) + missing_records
    replayed = sorted(rid for rid in known if counts[rid] > 1)
    explained, differing = _split_replays(replayed, by_request, replay_causes or {})
    violations += [] if allow_replays else differing
    covered = _terminal_coverage(known, counts, dead_lettered, len(replayed), len(explained))
    result = invariant_result(name, violations, covered + records)
    return replace(result, explained=tuple(explained))


def _terminal(ledger: Mapping[str, LedgerEntry], request_id: str) -> bool:
    entry = ledger.get(request_id)
    return entry is not None and entry.is_terminal


def _ledger_records(
    known: set[str], ledger: Mapping[str, LedgerEntry] | None
) -> tuple[list[str], str]:
    """(violations, coverage suffix): exactly one terminal ledger record per request."""
    if ledger is None:
        return [], ""
    missing = [rid for rid in sorted(known) if not _terminal(ledger, rid)]
    violations = [f"{rid}: no terminal ledger record" for rid in missing]
    return violations, f"; {len(known) - len(missing)} terminal ledger records"


def _lost(known: set[str], counts: Counter[str], dead_lettered: Collection[str]) -> list[str]:
    lost = sorted(rid for rid in known if counts[rid] == 0 and rid not in dead_lettered)
    return [f"{rid}: no outcome and not in the DLQ" for rid in lost]


def _terminal_coverage(
    known: set[str],
    counts: Counter[str],
    dead_lettered: Collection[str],
    replayed: int,
    explained: int,
) -> str:
    with_outcome = sum(1 for rid in known if counts[rid] > 0)
    in_dlq = len(known & set(dead_lettered))
    unknown = len(set(counts) - known)
    return (
        f"{len(known)} requests: {with_outcome} with an outcome, {in_dlq} in the DLQ, "
        f"{replayed} repeated ({explained} identical: at-least-once), "
        f"{unknown} outcomes of other requests"
    )


UNTRACED_REPEAT = (
    "no record failed or came back: a PutEvents retried after a timed-out attempt that had "
    "landed, or the bus delivering twice"
)
"""The cause of an identical repeat the consumers' traces do not explain."""


def _split_replays(
    replayed: Sequence[str],
    by_request: Mapping[str, Sequence[AllocationOutcome]],
    causes: Mapping[str, str],
) -> tuple[list[str], list[str]]:
    """(explained, violations): identical repeats with their cause, differing ones."""
    explained: list[str] = []
    differing: list[str] = []
    for rid in replayed:
        events = by_request[rid]
        contents = _distinct_contents(events)
        if len(contents) == 1:
            why = causes.get(rid, UNTRACED_REPEAT)
            explained.append(f"{rid}: {len(events)} identical outcomes ({why})")
        else:
            shown = ", ".join(
                f"{o.status}/{o.error_code or '-'}/r{o.receive_count}" for o in contents
            )
            differing.append(
                f"{rid}: {len(events)} outcomes with {len(contents)} different contents ({shown})"
            )
    return explained, differing


def _distinct_contents(events: Sequence[AllocationOutcome]) -> list[AllocationOutcome]:
    distinct: list[AllocationOutcome] = []
    for event in events:
        if event in distinct or _supersedes_dead_letter(event, distinct):
            continue
        distinct.append(event)
    return distinct


def _supersedes_dead_letter(event: AllocationOutcome, earlier: Sequence[AllocationOutcome]) -> bool:
    # An operator's redrive replaces a dead-lettered outcome explicitly (ADR 0009).
    return event.supersedes == "deadLettered" and all(e.dead_lettered for e in earlier)


# -- 4. order per child ---------------------------------------------------------------------------


def check_order(
    requests: Sequence[Request],
    outcomes: Iterable[AllocationOutcome],
    calls: Iterable[Mapping[str, Any]],
    before: Workspaces,
    *,
    strict_transfers: bool = True,
    lenient_children: Collection[str] = (),
) -> InvariantResult:
    """4. Per child, requests were applied in enqueue order.

    Two views must agree: the children's outcomes, ordered by their order key (the SQS
    sequence number each carries, :func:`in_child_order`; never by arrival, which EventBridge
    does not promise), follow the enqueue order, and the totals the outcomes report after each
    change follow the sequence of transfers the simulator applied to that child (its call log).

    Args:
        requests: Every request enqueued, in enqueue order.
        outcomes: The outcome events, in any order.
        calls: The simulator's call log.
        before: The workspaces at the start (each child's totals before the first transfer).
        strict_transfers: The two sequences must be equal. False accepts transfers no outcome
            reports (a crash after a transfer, a response lost to a timeout), as long as the
            reported ones appear in the simulator's order.
        lenient_children: Children checked as if ``strict_transfers`` were False: a batch of
            theirs was interrupted (its consumer died), so a transfer may have no outcome.
    """
    name = "4 per-child order"
    enqueued: dict[str, list[str]] = defaultdict(list)
    for request in requests:
        enqueued[request.workspace_id].append(request.request_id)
    known = {request.request_id for request in requests}
    applied: dict[str, list[AllocationOutcome]] = defaultdict(list)
    unplaced: list[str] = []
    for outcome in in_child_order(outcomes):
        if outcome.request_id not in known:
            continue
        if is_unplaced_dead_letter(outcome):
            unplaced.append(outcome.request_id)
            continue
        applied[outcome.workspace_id].append(outcome)
    transfers = transfer_sequences(calls, before)
    violations: list[str] = []
    for child, outcome_list in applied.items():
        violations += _outcome_order(child, outcome_list, enqueued[child])
        strict = strict_transfers and child not in lenient_children
        violations += _transfer_order(child, outcome_list, transfers.get(child, []), strict)
    placed_nowhere = (
        f"; {len(unplaced)} dead letter(s) without an order key, placed nowhere (no receive "
        f"reached the ledger; they applied nothing): {', '.join(unplaced[:5])}"
        if unplaced
        else ""
    )
    return invariant_result(
        name,
        violations,
        f"{len(applied)} children: outcome order = enqueue order, reported totals = applied "
        f"transfers{placed_nowhere}",
    )


def is_unplaced_dead_letter(outcome: AllocationOutcome) -> bool:
    """True for a dead letter without an order key that applied nothing.

    The DLQ audit's letter of a request no receive of which reached the ledger (every receive
    died before its batch started): nobody knows its message's SQS sequence number (the DLQ
    copy's own number is the DLQ's, ADR 0018), so no caller can place it, and as a ``failed``
    outcome with no totals it changes nothing a later outcome reports. Any other outcome
    without a key is ordered as before (after the keyed ones, in arrival order).
    """
    return (
        outcome.sequence_number is None
        and outcome.status == "failed"
        and bool(outcome.dead_lettered)
        and outcome.totals_before is None
        and outcome.totals_after is None
    )


def _outcome_order(
    child: str, outcome_list: Sequence[AllocationOutcome], enqueued: Sequence[str]
) -> list[str]:
    order = [outcome.request_id for outcome in outcome_list]
    expected = [rid for rid in enqueued if rid in set(order)]
    if order == expected:
        return []
    position = next(
        (i for i, (a, b) in enumerate(zip(order, expected, strict=False)) if a != b),
        min(len(order), len(expected)),
    )
    if position >= len(expected):
        # An outcome on this child for a request enqueued for another one: reported, not a crash.
        return [
            f"{child}: outcome #{position + 1} is {order[position]}, enqueued for another child"
        ]
    return [
        f"{child}: outcome #{position + 1} is {order[position]}, enqueue order says "
        f"{expected[position]}"
    ]


def _transfer_order(
    child: str,
    outcome_list: Sequence[AllocationOutcome],
    applied_totals: Sequence[tuple[int, int]],
    strict: bool,
) -> list[str]:
    reported = _reported_changes(outcome_list)
    agrees = (
        reported == list(applied_totals) if strict else _is_subsequence(reported, applied_totals)
    )
    if agrees:
        return []
    return [
        f"{child}: outcomes report totals {_fmt_seq(reported)}, simulator applied "
        f"{_fmt_seq(applied_totals)}"
    ]


def transfer_sequences(
    calls: Iterable[Mapping[str, Any]], before: Workspaces
) -> dict[str, list[tuple[int, int]]]:
    """Per child, its distinct totals after each successful transfer (0 keeps a dimension)."""
    state: dict[str, dict[str, int]] = {}
    sequences: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for call in sorted(calls, key=lambda c: int(c.get("seq", 0))):
        if call.get("op") != "transfer" or call.get("status") != 200:
            continue
        child = str(call.get("workspace_id"))
        if child not in state:
            start = before.get(child, {})
            state[child] = {dim: workspace_dim(start, dim, "total") for dim in DIMENSIONS}
        state[child].update(_sent_totals(call))
        totals = (state[child]["projects"], state[child]["prompts"])
        # A re-sent absolute transfer (a retry after a lost response) moves nothing.
        if not sequences[child] or sequences[child][-1] != totals:
            sequences[child].append(totals)
    return sequences


def _sent_totals(call: Mapping[str, Any]) -> dict[str, int]:
    """The absolute totals a transfer call set (a 0 keeps that dimension)."""
    body = call.get("body") or {}
    sent = (body.get("resources") or {}).get("ai") or {}
    return {
        dim: sent[dim] for dim in DIMENSIONS if isinstance(sent.get(dim), int) and sent[dim] != 0
    }


def _reported_changes(outcome_list: Sequence[AllocationOutcome]) -> list[tuple[int, int]]:
    changes: list[tuple[int, int]] = []
    for outcome in outcome_list:
        before, after = outcome.totals_before, outcome.totals_after
        if before is None or after is None or before == after:
            continue
        totals = (after.projects, after.prompts)
        # Coalesced ensures each report the one transfer their leader made.
        if not changes or changes[-1] != totals:
            changes.append(totals)
    return changes


def _is_subsequence(short: Sequence[Any], long: Sequence[Any]) -> bool:
    remaining = iter(long)
    return all(any(item == candidate for candidate in remaining) for item in short)


def _fmt_seq(seq: Sequence[tuple[int, int]]) -> str:
    return "[" + ", ".join(f"{p}/{q}" for p, q in seq) + "]"


# -- 5. headroom ----------------------------------------------------------------------------------


def check_headroom(
    requests: Sequence[Request],
    outcomes: Iterable[AllocationOutcome],
    usage: Workspaces,
) -> InvariantResult:
    """5. Every hot-path or topped-up ensure left total >= used + need (+ drafted when asked).

    Args:
        requests: Every request enqueued.
        outcomes: The outcome events.
        usage: The workspaces' usage at the time the ensures ran (usage does not move during a
            scenario unless it meters on purpose; pass the snapshot that applies).
    """
    name = "5 headroom after ensure"
    by_id = {request.request_id: request for request in requests}
    violations: list[str] = []
    checked = 0
    for outcome in first_outcomes(outcomes).values():
        request = by_id.get(outcome.request_id)
        if not isinstance(request, EnsureRequest) or outcome.status not in _APPLIED_ENSURE:
            continue
        checked += 1
        child = usage.get(request.workspace_id, {})
        after = outcome.totals_after
        required = {
            "projects": workspace_dim(child, "projects", "used") + request.need.projects,
            "prompts": workspace_dim(child, "prompts", "used")
            + request.need.prompts
            + (workspace_dim(child, "prompts", "drafted") if request.include_drafted else 0),
        }
        if after is None:
            violations.append(f"{outcome.request_id}: {outcome.status} without totals_after")
            continue
        for dim in DIMENSIONS:
            if getattr(after, dim) < required[dim]:
                violations.append(
                    f"{outcome.request_id} ({request.workspace_id}) {dim}: total "
                    f"{getattr(after, dim)} < used + need {required[dim]}"
                )
    return invariant_result(name, violations, f"{checked} applied ensures cover used + need")


# -- the broker -----------------------------------------------------------------------------------


def check_group_exclusivity(
    events: Iterable[Mapping[str, Any]], visibility_timeout_s: float
) -> InvariantResult:
    """BROKER: no message group was ever held by two consumers at once.

    A consumer holds a group from the end of the receive that delivered it to the start of its
    delete (the broker can hand the group out again only after processing that delete). A
    consumer that never released (it crashed) holds the group until the visibility timeout
    counted from the START of its receive. These bounds are conservative: an overlap they show
    is real.
    """
    name = "broker: one holder per group"
    intervals = _holds(events, visibility_timeout_s)
    violations: list[str] = []
    for group, spans in intervals.items():
        violations += _overlaps(group, spans)
    holds = sum(len(spans) for spans in intervals.values())
    return invariant_result(
        name, violations, f"{holds} holds of {len(intervals)} groups, no overlap"
    )


def _holds(
    events: Iterable[Mapping[str, Any]], visibility_timeout_s: float
) -> dict[str, list[tuple[float, float, str]]]:
    """Per group, (start, end, holder) of every hold: receive to release, or to the timeout."""
    intervals: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    open_batches: dict[tuple[Any, Any], Mapping[str, Any]] = {}
    for event in sorted(events, key=lambda e: float(e.get("t", 0.0))):
        key = (event.get("pid"), event.get("batch"))
        if event.get("ev") == "receive":
            open_batches[key] = event
        elif event.get("ev") == "release" and key in open_batches:
            received = open_batches.pop(key)
            holder = f"consumer {received.get('consumer')} (pid {received.get('pid')})"
            for group in received.get("groups", {}):
                intervals[group].append((float(received["t"]), float(event["t"]), holder))
    for received in open_batches.values():
        holder = f"consumer {received.get('consumer')} (pid {received.get('pid')}, crashed)"
        until = float(received.get("t_req", received["t"])) + visibility_timeout_s
        for group in received.get("groups", {}):
            intervals[group].append((float(received["t"]), until, holder))
    return intervals


def _overlaps(group: str, spans: list[tuple[float, float, str]]) -> list[str]:
    spans = sorted(spans)
    violations: list[str] = []
    held_until, holder = spans[0][1], spans[0][2]
    for start, end, who in spans[1:]:
        if start < held_until:
            violations.append(
                f"group {group}: {who} received it at {start:.3f} while {holder} held it "
                f"until {held_until:.3f}"
            )
        if end > held_until:
            held_until, holder = end, who
    return violations


def check_fifo_delivery(
    events: Iterable[Mapping[str, Any]],
    requests: Sequence[Request],
    max_receive_count: int,
) -> InvariantResult:
    """BROKER: every receive delivered the oldest unfinished messages of each of its groups.

    A message is finished once a consumer deleted it, or once it failed on its
    ``max_receive_count``-th receive (the redrive moves it to the DLQ). Messages of a batch
    whose consumer crashed are uncertain (the crash may have come after the delete), so their
    absence from a later receive is not counted against the broker.
    """
    name = "broker: FIFO delivery order"
    replay = _FifoReplay(requests, max_receive_count)
    for event in sorted(events, key=lambda e: float(e.get("t", 0.0))):
        if event.get("ev") == "receive":
            replay.receive(event)
        elif event.get("ev") == "release":
            replay.release(event)
    return invariant_result(
        name, replay.violations, f"{replay.receives} receives delivered groups in enqueue order"
    )


class _FifoReplay:
    """Replays the receives and releases against each group's enqueue order."""

    def __init__(self, requests: Sequence[Request], max_receive_count: int) -> None:
        self.order: dict[str, list[str]] = defaultdict(list)
        for request in requests:
            self.order[request.workspace_id].append(request.request_id)
        self.known = {request.request_id for request in requests}
        self.max_receive_count = max_receive_count
        self.finished: set[str] = set()
        self.uncertain: set[str] = set()
        self.open_batches: dict[tuple[Any, Any], Mapping[str, Any]] = {}
        self.violations: list[str] = []
        self.receives = 0

    def receive(self, event: Mapping[str, Any]) -> None:
        self.receives += 1
        delivered: dict[str, list[str]] = defaultdict(list)
        for message in event.get("msgs", []):
            rid = message.get("request_id")
            if rid in self.known:
                delivered[str(message.get("group"))].append(rid)
        _forget_dead_holders(self.open_batches, set(delivered), self.uncertain)
        self.open_batches[(event.get("pid"), event.get("batch"))] = event
        for group, rids in delivered.items():
            self.uncertain.difference_update(rids)
            pending = [
                r for r in self.order[group] if r not in self.finished and r not in self.uncertain
            ]
            if rids != pending[: len(rids)]:
                self.violations.append(
                    f"group {group}: consumer {event.get('consumer')} got "
                    f"{_short(rids)} while {_short(pending[: len(rids)])} were due"
                )

    def release(self, event: Mapping[str, Any]) -> None:
        received = self.open_batches.pop((event.get("pid"), event.get("batch")), None)
        if received is None:
            return
        deleted = set(event.get("deleted", []))
        for message in received.get("msgs", []):
            final = int(message.get("receive_count", 0)) >= self.max_receive_count
            if message.get("id") in deleted or final:
                self.finished.add(str(message.get("request_id")))


def _forget_dead_holders(
    open_batches: dict[tuple[Any, Any], Mapping[str, Any]], groups: set[str], uncertain: set[str]
) -> None:
    """A batch still open when its group is delivered again belongs to a dead consumer."""
    for key, batch in list(open_batches.items()):
        messages = batch.get("msgs", [])
        if any(str(m.get("group")) in groups for m in messages):
            uncertain.update(str(m.get("request_id")) for m in messages)
            del open_batches[key]


def _short(rids: Sequence[str]) -> str:
    return "[" + ", ".join(rid[:8] for rid in rids) + "]"
