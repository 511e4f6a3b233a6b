"""Which redeliveries a run explains, read from the consumers' traces.

SQS delivers a message again when the consumer that held it did not delete it: the container
died in the middle of the batch (a crash point, a function timeout, a SIGKILL inside the
handler), its delete call failed, or the handler FAILED the record. The last one republishes
an outcome when the record failed after its outcome had reached the bus: a PutEvents that
timed out (or answered late) but landed fails its chunk's records, and their redelivery
publishes the stored outcome again (ADR 0009's at-least-once). Each cause is named, so an
identical repeat is reported with why it happened; check 3 judges repeats by content.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serenity_tools.verification.tables import format_table

_MAX_ROWS = 20
PUBLISH_LANDED = (
    "record failed after its outcome reached the bus (a PutEvents that timed out but landed, "
    "or its group held back behind one); the redelivery republished the stored outcome"
)
"""Why a record the handler failed may publish its outcome twice."""
NOT_PUBLISHED_LOG = "outcome events not published; requests will be retried"
"""The worker's log line (``observability.outcomes_not_published``) for a failed PutEvents."""
_PUBLISH_ERROR = re.compile(r"events not published \(([^)]*)\): (.+)$")


@dataclass(frozen=True)
class ReplayCauses:
    """What the traces say about interrupted batches.

    Attributes:
        by_request: Request id -> why its message may have been delivered again.
        interrupted_groups: Message groups (children) of a batch whose consumer died: one of
            their transfers may have been applied without an outcome reporting it.
        interrupted_batches: Batches whose consumer died before releasing them.
    """

    by_request: Mapping[str, str] = field(default_factory=dict)
    interrupted_groups: frozenset[str] = frozenset()
    interrupted_batches: int = 0


def publish_failures(log_paths: Iterable[Path]) -> dict[str, str]:
    """Request id -> why the worker logged its PutEvents as failed, from consumer stdout logs.

    The worker logs ``OutcomePublishError`` with the failure's kind and every request id of
    the chunk. When such a request's outcome is on the bus twice, identical, the failed call
    had landed: that is the named cause ("PutEvents ... timed out but landed").
    """
    failures: dict[str, str] = {}
    for path in log_paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            found = _publish_error(line)
            if found is not None:
                reason, request_ids = found
                why = f"PutEvents failed ({reason}) but its events had landed; the record came back"
                failures.update(
                    (rid, f"{why} and republished the stored outcome") for rid in request_ids
                )
    return failures


def _publish_error(line: str) -> tuple[str, list[str]] | None:
    if NOT_PUBLISHED_LOG not in line:
        return None
    try:
        logged = json.loads(line)
    except ValueError:
        return None
    exception = str(logged.get("exception") or "").strip().splitlines()
    matched = _PUBLISH_ERROR.search(exception[-1]) if exception else None
    if matched is None:
        return None
    return matched.group(1), [rid.strip() for rid in matched.group(2).split(",")]


def explain_replays(
    events: Iterable[Mapping[str, Any]], published_failed: Mapping[str, str] | None = None
) -> ReplayCauses:
    """Read the receive, release and crash lines of the traces and name each interruption.

    A batch received and never released belongs to a consumer that died holding it: its
    ``crash`` line says where (``function_timeout`` when the local Lambda timeout killed it);
    a death without a line is a SIGKILL from inside the handler. A message whose delete failed
    comes back too, and so does a record the handler failed; ``published_failed``
    (:func:`publish_failures`) names the ones whose PutEvents failed but landed.
    """
    receives, released, crashed_at = _read_traces(events)
    causes: dict[str, str] = {}
    failed: dict[str, str] = {}
    groups: set[str] = set()
    interrupted = 0
    for key, receive in receives.items():
        release = released.get(key)
        consumer = f"consumer {receive.get('consumer')}"
        if release is None:
            interrupted += 1
            why = crashed_at.get(key[0], "SIGKILL inside the handler, no trace line")
            groups.update(str(m.get("group")) for m in receive.get("msgs", []))
            _blame(causes, receive, None, f"{consumer} died: {why}")
        else:
            _blame(causes, receive, set(release.get("delete_failed", [])), "delete failed")
            _blame(failed, receive, set(release.get("failures", [])), PUBLISH_LANDED)
    # A death or a lost delete says more than a failed record: it wins where both happened.
    named = {rid: why for rid, why in (published_failed or {}).items() if rid in failed}
    return ReplayCauses({**failed, **named, **causes}, frozenset(groups), interrupted)


_Batch = tuple[Any, Any]


def _read_traces(
    events: Iterable[Mapping[str, Any]],
) -> tuple[dict[_Batch, Mapping[str, Any]], dict[_Batch, Mapping[str, Any]], dict[Any, str]]:
    """(receives, releases, crash point by pid), batches keyed by (pid, batch)."""
    receives: dict[_Batch, Mapping[str, Any]] = {}
    released: dict[_Batch, Mapping[str, Any]] = {}
    crashed_at: dict[Any, str] = {}
    for event in events:
        key = (event.get("pid"), event.get("batch"))
        kind = event.get("ev")
        if kind == "receive":
            receives[key] = event
        elif kind == "release":
            released[key] = event
        elif kind == "crash":
            crashed_at[event.get("pid")] = str(event.get("at"))
    return receives, released, crashed_at


def _blame(
    causes: dict[str, str], receive: Mapping[str, Any], only: set[str] | None, why: str
) -> None:
    for message in receive.get("msgs", []):
        rid = message.get("request_id")
        if isinstance(rid, str) and (only is None or message.get("id") in only):
            causes.setdefault(rid, why)


def _cause(line: str) -> str:
    # "<request>: <n> outcomes (<cause>)": the cause may hold parentheses itself.
    _, _, cause = line.partition(" outcomes (")
    return cause.removesuffix(")") or line


def explained_table(explained: Iterable[str], title: str = "Explained replays") -> str:
    """The explained replays: a count per cause, then the first requests with theirs."""
    lines = list(explained)
    why = Counter(_cause(line) for line in lines)
    rows: list[list[object]] = [[cause, count] for cause, count in why.most_common()]
    rows += [[line, ""] for line in lines[:_MAX_ROWS]]
    more = f", first {_MAX_ROWS} listed" if len(lines) > _MAX_ROWS else ""
    return format_table(
        ["cause / request", "replays"],
        rows,
        title=f"{title} ({len(lines)}: not violations{more})",
    )
