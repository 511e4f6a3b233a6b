"""The DLQ after a crash run: only requests that crashes took there, each ended truthfully.

In a run that kills containers, a valid request may rightly run out of receives: every one of
its receives was in a batch whose consumer died. It then ends in one of two truthful ways
(docs/decisions/0009-request-ledger.md), each with exactly one terminal ledger record and a
published outcome equal to it:
- never applied: one confirmed (not provisional) ``deadLettered`` record;
- applied, then every later receive died before its delete: its ``final`` record stands (the
  allocation happened; writing ``deadLettered`` over it would be false) and its message in the
  DLQ is a leftover the operator deletes (docs/runbooks/dlq-triage.md).
Anything else stays a violation: a receive a living consumer released (the worker failed it),
a provisional record, no record, no outcome or one unlike the record.

Invalid messages (a reason attribute) are not expected, with one exception under IMS: a
consumer killed after IMS answered its exchange and before it stored the rolled token leaves a
spent promise, and a later receive rightly ends the request ``failed / needsReauth`` in the DLQ
(ADR 0016). Such a letter is explained, never a violation, only when both show it: the
simulator logged the lost answer for the request's user (:mod:`.lost_answers`), and an earlier
receive of the request was in a batch whose consumer died. Its end must still be one truthful
dead letter (record and outcome).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from serenity_allocator.domain.ledger import LedgerEntry
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.invariants import InvariantResult, invariant_result
from serenity_tools.verification.lost_answers import explain_lost_answers

NAME = "DLQ contents"

_Batch = tuple[Any, Any]


@dataclass(frozen=True)
class CrashTraces:
    """Each request's receives in the consumers' traces, and which batches were released."""

    receives: Mapping[str, Sequence[_Batch]]
    """Request id -> the (process, batch) of each receive of its message, in trace order."""
    released: frozenset[_Batch]
    """Batches whose consumer lived to release them (delete or fail their records)."""

    def unexplained(self, request_id: str) -> list[str]:
        """Why the request's receives are not all explained by a crash (empty when they are)."""
        batches = self.receives.get(request_id, ())
        if not batches:
            return ["no receive in the traces"]
        return [
            f"receive {index} was released by a living consumer"
            for index, batch in enumerate(batches, start=1)
            if batch in self.released
        ]

    def died_before(self, request_id: str) -> bool:
        """True when a receive before the request's last one was in a batch whose consumer died."""
        return any(batch not in self.released for batch in self.receives.get(request_id, ())[:-1])


def read_crash_traces(events: Iterable[Mapping[str, Any]]) -> CrashTraces:
    """Index the receive and release lines of the traces.

    A batch never released is one whose consumer died: at a traced crash point, at a function
    timeout, or by a SIGKILL inside the handler.
    """
    receives: dict[str, list[_Batch]] = {}
    released: set[_Batch] = set()
    for event in events:
        batch = (event.get("pid"), event.get("batch"))
        kind = event.get("ev")
        if kind == "receive":
            for message in event.get("msgs", []):
                if isinstance(message.get("request_id"), str):
                    receives.setdefault(message["request_id"], []).append(batch)
        elif kind == "release":
            released.add(batch)
    return CrashTraces(receives, frozenset(released))


def check_crash_dead_letters(
    letters: Sequence[DeadLetter],
    ledger: Mapping[str, LedgerEntry] | None,
    outcomes: Sequence[AllocationOutcome],
    events: Iterable[Mapping[str, Any]],
    *,
    owners: Mapping[str, str] | None = None,
    ims_calls: Sequence[Mapping[str, Any]] = (),
) -> InvariantResult:
    """Every DLQ request was taken there by crashes and ended with one truthful dead letter.

    Args:
        letters: What the DLQ held at the end.
        ledger: The ledger table at the end, by request id (None: the run had no ledger, so
            no request in the DLQ can have ended truthfully).
        outcomes: Every outcome event published, in order.
        events: The consumers' trace events.
        owners: Request id -> the user it was enqueued for (IMS runs).
        ims_calls: The simulator's IMS call log (IMS runs).
    """
    traces = read_crash_traces(events)
    invalid = [letter for letter in letters if letter.reason is not None]
    unexplained, explained = _explain_lost_answers(invalid, traces, owners or {}, ims_calls)
    dead = sorted(_ids(letter for letter in letters if letter.reason is None))
    violations = [
        *(f"{letter.message_id}: invalid message ({letter.reason})" for letter in unexplained),
        # An explained letter must still end truthfully, as a crashed request's does.
        *_untruthful_ends(sorted(_ids(invalid) - _ids(unexplained)), ledger, outcomes),
        *_crash_problems(dead, traces, ledger, outcomes),
    ]
    result = invariant_result(NAME, violations, _covered(dead, traces, ledger, len(explained)))
    return replace(result, explained=tuple(explained)) if explained else result


def _untruthful_ends(
    request_ids: Sequence[str],
    ledger: Mapping[str, LedgerEntry] | None,
    outcomes: Sequence[AllocationOutcome],
) -> list[str]:
    """One line per problem with each request's end as a dead letter."""
    return [
        f"{request_id}: {problem}"
        for request_id in request_ids
        for problem in _untruthful(request_id, ledger, outcomes)
    ]


def _explain_lost_answers(
    invalid: Sequence[DeadLetter],
    traces: CrashTraces,
    owners: Mapping[str, str],
    ims_calls: Sequence[Mapping[str, Any]],
) -> tuple[list[DeadLetter], list[str]]:
    """The invalid letters left unexplained, and why the others are explained.

    Only a letter an earlier killed receive precedes may be a lost exchange answer.
    """
    crashed = [letter for letter in invalid if traces.died_before(letter.request_id or "")]
    kept, explained = explain_lost_answers(crashed, owners, ims_calls)
    return [letter for letter in invalid if letter not in crashed or letter in kept], explained


def _crash_problems(
    dead: Sequence[str],
    traces: CrashTraces,
    ledger: Mapping[str, LedgerEntry] | None,
    outcomes: Sequence[AllocationOutcome],
) -> list[str]:
    """Why the requests that ran out of receives are not all crashes' truthful dead letters."""
    unexplained = [f"{rid}: {problem}" for rid in dead for problem in traces.unexplained(rid)]
    return unexplained + _untruthful_ends(dead, ledger, outcomes)


def _ids(letters: Iterable[DeadLetter]) -> set[str]:
    return {letter.request_id or "" for letter in letters}


def _covered(
    dead: Sequence[str],
    traces: CrashTraces,
    ledger: Mapping[str, LedgerEntry] | None,
    lost_answers: int,
) -> str:
    """What the check saw, for the report."""
    seen = _seen(dead, traces, ledger)
    if lost_answers:
        seen += f"; but {lost_answers} needsReauth, each after its consumer lost an exchange answer"
    return seen


def _seen(
    dead: Sequence[str], traces: CrashTraces, ledger: Mapping[str, LedgerEntry] | None
) -> str:
    if not dead:
        return "empty: no request ran out of receives, no invalid message"
    receives = sum(len(traces.receives.get(rid, ())) for rid in dead)
    completed = sum(1 for rid in dead if _is_final((ledger or {}).get(rid)))
    return (
        f"{len(dead)} requests ran out of receives to crashes ({receives} receives, each in a "
        f"batch whose consumer died): {len(dead) - completed} with one deadLettered record, "
        f"{completed} completed before (final record); each with its outcome; no invalid message"
    )


def _untruthful(
    request_id: str,
    ledger: Mapping[str, LedgerEntry] | None,
    outcomes: Sequence[AllocationOutcome],
) -> list[str]:
    """What is missing from the request's end as a dead letter (empty when it is whole)."""
    entry = ledger.get(request_id) if ledger is not None else None
    if entry is None or entry.outcome is None:
        return ["no terminal ledger record"]
    published = [o for o in outcomes if o.request_id == request_id]
    problem = _record_problem(entry, entry.outcome, published)
    if problem is None and entry.outcome not in published:
        problem = f"no published outcome equals its record ({len(published)} published)"
    return [] if problem is None else [problem]


def _record_problem(
    entry: LedgerEntry, held: AllocationOutcome, published: Sequence[AllocationOutcome]
) -> str | None:
    """Why the record is not one truthful terminal record, or None when it is."""
    if entry.state == "final":
        # Applied and announced, then every later receive died before its delete: the
        # allocation happened, so its final record is the truth (its outcome is checked next).
        return None
    if entry.state != "deadLettered" or entry.provisional:
        kind = "provisional " if entry.provisional else ""
        return f"ledger record {kind}{entry.state}, not one confirmed deadLettered record"
    return None


def _is_final(entry: LedgerEntry | None) -> bool:
    return entry is not None and entry.state == "final"
