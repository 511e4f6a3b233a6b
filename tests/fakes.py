"""In-memory fakes of the domain's ports: a conserving gateway, a clock and a recording observer.

The gateway follows the upstream facts in ../shared/semrush-user-manager.md ("Resource
semantics"): transfers are absolute, units are conserved between a master and its children, a
raise beyond the master's free units is rejected whole with the pool-exhausted 422, and a
dimension set to 0 is silently ignored. Anything else an upstream can do (not ready, odd statuses,
500s, 403s) is scripted per workspace by the test that needs it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_allocator.domain.model import (
    AiResources,
    Dimension,
    DimensionUsage,
    Totals,
    WorkspaceRecord,
    WorkspaceStatus,
)
from serenity_allocator.domain.observations import AllocationEvent
from serenity_allocator.domain.sweep.errors import StaleCheckpointError
from serenity_allocator.domain.sweep.model import StoredCheckpoint
from serenity_allocator.domain.transfer import TransferContext

if TYPE_CHECKING:
    from serenity_allocator.application.sweep.ports import CheckpointStore, SurplusReleaseQueue
    from serenity_allocator.domain.ports import AllocationObserver, WorkspaceGateway

POOL_EXHAUSTED_BODY = '{"message": "insufficient available units in subscription"}'
NOT_READY_BODY = '{"message": "workspace not ready"}'
INVALID_ACCESS_BODY = '{"message": "invalid access attempt"}'

READ_RESOURCES = "read_resources"
TRANSFER = "transfer"
READ_STATUS = "read_status"
LIST_FAMILY = "list_family"


def pool_exhausted() -> UpstreamError:
    """The transfer's authoritative exhaustion answer."""
    return UpstreamError(422, POOL_EXHAUSTED_BODY, TRANSFER)


def not_ready() -> UpstreamError:
    """The transient answer of a child that is still settling."""
    return UpstreamError(422, NOT_READY_BODY, TRANSFER)


class FakeClock:
    """Monotonic seconds that only move when a test (or a sleep) moves them."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        """Return the current fake monotonic time."""
        return self.now

    def sleep(self, seconds: float) -> None:
        """Record the sleep and advance the clock by it, without waiting."""
        if seconds < 0:
            raise ValueError("cannot sleep a negative time")
        self.sleeps.append(seconds)
        self.now += seconds

    def advance(self, seconds: float) -> None:
        """Move time forward without recording a sleep (work taking time)."""
        self.now += seconds


class RecordingObserver:
    """An AllocationObserver that records every event, in order.

    ``calls`` names each event by its type in snake case with its fields as arguments
    (``Rejected("brandAiLimit")`` is ``("rejected", ("brandAiLimit",))``).
    """

    def __init__(self) -> None:
        self.events: list[AllocationEvent] = []

    def record(self, event: AllocationEvent, /) -> None:
        """Record."""
        self.events.append(event)

    @property
    def calls(self) -> list[tuple[str, tuple[object, ...]]]:
        """Every event as ``(name, fields)``, in order."""
        return [(event_name(event), event_fields(event)) for event in self.events]

    def names(self) -> list[str]:
        """The event names, in order."""
        return [name for name, _ in self.calls]

    def args_of(self, name: str) -> list[tuple[object, ...]]:
        """The fields of every event named ``name``, in order."""
        return [args for called, args in self.calls if called == name]


def event_name(event: object) -> str:
    """An event type's name in snake case (``TightPoolFallback``: ``tight_pool_fallback``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(event).__name__).lower()


def event_fields(event: object) -> tuple[object, ...]:
    """An event's field values, in declaration order (not copied)."""
    return tuple(getattr(event, f.name) for f in dataclasses.fields(event))  # type: ignore[arg-type]

    def tiered_met(self, role: str) -> None:
        """Record."""
        self.calls.append(("tiered_met", (role,)))


@dataclass
class _Usage:
    used: int = 0
    drafted: int = 0
    total: int = 0


@dataclass
class FakeWorkspace:
    """One workspace held by the fake: a master (no parent) is the org pool of its family."""

    id: str
    parent_id: str | None
    status: str = WorkspaceStatus.CREATED.value
    title: str = ""
    ai_limits_enabled: bool | None = True
    usage: dict[Dimension, _Usage] = field(
        default_factory=lambda: {dim: _Usage() for dim in Dimension}
    )

    def resources(self) -> AiResources:
        """The AI resources as the upstream would report them."""
        return AiResources(
            **{
                dim.value: DimensionUsage(used=u.used, drafted=u.drafted, total=u.total)
                for dim, u in self.usage.items()
            }
        )

    def totals(self) -> Totals:
        """The current totals."""
        return Totals(**{dim.value: u.total for dim, u in self.usage.items()})

    def record(self) -> WorkspaceRecord:
        """The family-listing view of this workspace."""
        return WorkspaceRecord(
            id=self.id,
            title=self.title,
            status=self.status,
            parent_id=self.parent_id,
            ai_limits_enabled=self.ai_limits_enabled,
        )


class InMemoryGateway:
    """A WorkspaceGateway over in-memory workspaces that conserves units across transfers.

    Seeding (``add_master`` / ``add_child``) sets state directly and is not a transfer; from then
    on, ``master.total + sum(children.total)`` only changes if a test edits state by hand.

    Every port call is appended to ``calls`` as ``(op, workspace_id)`` before anything else
    happens (scripted failures included), and each transfer body to ``transfers``.
    """

    def __init__(self, *, clock: FakeClock | None = None, latency_s: float = 0.0) -> None:
        self.workspaces: dict[str, FakeWorkspace] = {}
        self.calls: list[tuple[str, str]] = []
        self.transfers: list[tuple[str, Totals]] = []
        self._clock = clock
        self._latency_s = latency_s
        self._not_ready: dict[str, int] = {}
        self._statuses: dict[str, deque[str]] = {}
        self._errors: dict[tuple[str, str], deque[Exception]] = {}

    # ---- seeding and scripting -------------------------------------------------------------

    def add_master(
        self,
        workspace_id: str,
        *,
        total: Totals,
        used: Totals | None = None,
        ai_limits_enabled: bool | None = True,
    ) -> FakeWorkspace:
        """Seed a master workspace; its resources are the org pool (free = total - used)."""
        master = FakeWorkspace(id=workspace_id, parent_id=None, ai_limits_enabled=ai_limits_enabled)
        self._set(master, total=total, used=used or Totals())
        self.workspaces[workspace_id] = master
        return master

    def add_child(
        self,
        workspace_id: str,
        parent_id: str,
        *,
        total: Totals | None = None,
        used: Totals | None = None,
        drafted: Totals | None = None,
        status: str = WorkspaceStatus.CREATED.value,
    ) -> FakeWorkspace:
        """Seed a child under ``parent_id`` with the given totals and usage (no units move)."""
        if parent_id not in self.workspaces:
            raise KeyError(f"seed the parent {parent_id!r} first")
        child = FakeWorkspace(id=workspace_id, parent_id=parent_id, status=status)
        self._set(child, total=total or Totals(), used=used or Totals(), drafted=drafted)
        self.workspaces[workspace_id] = child
        return child

    def set_usage(
        self, workspace_id: str, *, used: Totals | None = None, drafted: Totals | None = None
    ) -> None:
        """Change a workspace's used/drafted counts (writes happening elsewhere)."""
        self._set(self.workspaces[workspace_id], used=used, drafted=drafted)

    def set_status(self, workspace_id: str, status: str) -> None:
        """Set the lasting status ``read_status`` reports once scripted statuses run out."""
        self.workspaces[workspace_id].status = status

    def script_not_ready(self, workspace_id: str, transfers: int) -> None:
        """Answer the next ``transfers`` transfers of ``workspace_id`` with 422 not ready."""
        self._not_ready[workspace_id] = self._not_ready.get(workspace_id, 0) + transfers

    def script_statuses(self, workspace_id: str, statuses: Iterable[str]) -> None:
        """Answer the next status reads of ``workspace_id`` with ``statuses``, in order."""
        self._statuses.setdefault(workspace_id, deque()).extend(statuses)

    def script_errors(self, op: str, workspace_id: str, errors: Iterable[Exception]) -> None:
        """Raise ``errors``, one per call, on the next calls of ``op`` for ``workspace_id``."""
        self._errors.setdefault((op, workspace_id), deque()).extend(errors)

    # ---- inspection ------------------------------------------------------------------------

    def totals_of(self, workspace_id: str) -> Totals:
        """The current totals of one workspace."""
        return self.workspaces[workspace_id].totals()

    def family_units(self, master_id: str) -> Totals:
        """Master total + every descendant's total: constant across transfers."""
        members = [self.workspaces[master_id], *self._descendants(master_id)]
        return Totals(
            **{dim.value: sum(member.usage[dim].total for member in members) for dim in Dimension}
        )

    def calls_of(self, op: str) -> list[str]:
        """The workspace ids of every call of ``op``, in order."""
        return [workspace_id for called, workspace_id in self.calls if called == op]

    # ---- WorkspaceGateway ------------------------------------------------------------------

    def read_resources(self, workspace_id: str) -> AiResources:
        """Return the workspace's AI resources (the org pool for a master)."""
        return self._call(READ_RESOURCES, workspace_id).resources()

    def transfer(self, workspace_id: str, totals: Totals) -> None:
        """Set the child's totals absolutely, conserving units with its master."""
        child = self._call(TRANSFER, workspace_id)
        self.transfers.append((workspace_id, totals))
        if self._not_ready.get(workspace_id, 0) > 0:
            self._not_ready[workspace_id] -= 1
            raise not_ready()
        master = self._master_of(child)
        # A dimension set to 0 is silently ignored by the gateway: it neither moves nor fails.
        deltas = {
            dim: totals.get(dim) - child.usage[dim].total
            for dim in Dimension
            if totals.get(dim) != 0
        }
        for dim, delta in deltas.items():
            pool = master.usage[dim]
            # All or nothing: one dimension short rejects the whole body.
            if delta > pool.total - pool.used:
                raise pool_exhausted()
        for dim, delta in deltas.items():
            child.usage[dim].total += delta
            master.usage[dim].total -= delta

    def read_status(self, workspace_id: str) -> str:
        """Return the next scripted status, else the workspace's lasting status."""
        workspace = self._call(READ_STATUS, workspace_id)
        scripted = self._statuses.get(workspace_id)
        return scripted.popleft() if scripted else workspace.status

    def list_family(self, parent_id: str) -> list[WorkspaceRecord]:
        """List the parent and all its descendants."""
        parent = self._call(LIST_FAMILY, parent_id)
        return [parent.record(), *(member.record() for member in self._descendants(parent_id))]

    # ---- internals -------------------------------------------------------------------------

    def _call(self, op: str, workspace_id: str) -> FakeWorkspace:
        self.calls.append((op, workspace_id))
        if self._clock is not None:
            self._clock.advance(self._latency_s)
        scripted = self._errors.get((op, workspace_id))
        if scripted:
            raise scripted.popleft()
        workspace = self.workspaces.get(workspace_id)
        if workspace is None:
            # The upstream answers an unknown or deleted id with 403, not 404.
            raise UpstreamError(403, INVALID_ACCESS_BODY, op)
        return workspace

    def _master_of(self, workspace: FakeWorkspace) -> FakeWorkspace:
        while workspace.parent_id is not None:
            workspace = self.workspaces[workspace.parent_id]
        return workspace

    def _descendants(self, parent_id: str) -> list[FakeWorkspace]:
        found: list[FakeWorkspace] = []
        frontier = [parent_id]
        while frontier:
            current = frontier.pop(0)
            children = [w for w in self.workspaces.values() if w.parent_id == current]
            found.extend(children)
            frontier.extend(child.id for child in children)
        return found

    @staticmethod
    def _set(
        workspace: FakeWorkspace,
        *,
        total: Totals | None = None,
        used: Totals | None = None,
        drafted: Totals | None = None,
    ) -> None:
        for dim in Dimension:
            usage = workspace.usage[dim]
            if total is not None:
                usage.total = total.get(dim)
            if used is not None:
                usage.used = used.get(dim)
            if drafted is not None:
                usage.drafted = drafted.get(dim)


def transfer_context(
    clock: FakeClock,
    observer: RecordingObserver | None = None,
    *,
    deadline: float | None = None,
) -> TransferContext:
    """A TransferContext on the fake clock (its ``sleep`` never waits)."""
    return TransferContext(
        clock=clock,
        sleep=clock.sleep,
        deadline=deadline,
        observer=observer if observer is not None else RecordingObserver(),
    )


# ==== Lambda, sweep and worker collaborators ===============================================


class SimulatedCrash(BaseException):
    """A process death (timeout, OOM kill): a BaseException, so no ``except Exception`` in the
    code under test can swallow it."""


class InMemoryCheckpointStore:
    """A CheckpointStore with S3-like conditional writes: every save names the version it replaces.

    ``save(expected_etag=None)`` succeeds only when the run has no checkpoint yet; otherwise the
    expected etag must be the current one. A losing write raises the domain's
    ``StaleCheckpointError`` and changes nothing. ``fail_after_saves`` makes the save after
    that many successful ones raise ``crash`` instead, once (a process dying before its write
    lands).
    """

    def __init__(
        self, *, fail_after_saves: int | None = None, crash: BaseException | None = None
    ) -> None:
        self.objects: dict[str, tuple[dict[str, Any], str]] = {}
        self.saves: list[str] = []
        """Run id of every successful save, in order."""
        self.conflicts = 0
        self._versions = itertools.count(1)
        self._fail_after_saves = fail_after_saves
        self._crash = crash
        self._crashed = False

    def load(self, run_id: str) -> StoredCheckpoint | None:
        """The stored body (a deep copy, as if read from S3) and its etag, or None."""
        stored = self.objects.get(run_id)
        if stored is None:
            return None
        body, etag = stored
        return StoredCheckpoint(body=json.loads(json.dumps(body)), etag=etag)

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        """Write when the condition holds; return the new etag."""
        if not self._crashed and len(self.saves) == self._fail_after_saves:
            self._crashed = True  # one crash: the resumed run finds a working store
            raise self._crash or SimulatedCrash("checkpoint store died")
        current = self.objects.get(run_id)
        if (current is None) != (expected_etag is None) or (
            current is not None and current[1] != expected_etag
        ):
            self.conflicts += 1
            raise StaleCheckpointError(f"checkpoint of {run_id!r} changed since it was read")
        etag = f'"v{next(self._versions)}"'
        # Round-trip through JSON: what S3 would hold, and no aliasing with the caller's dict.
        self.objects[run_id] = (json.loads(json.dumps(dict(body))), etag)
        self.saves.append(run_id)
        return etag

    def location(self, run_id: str) -> str:
        """A URI-like location for reports."""
        return f"memory://checkpoints/{run_id}.json"

    def body(self, run_id: str) -> dict[str, Any]:
        """The current stored body (test inspection)."""
        return self.objects[run_id][0]

    def etag(self, run_id: str) -> str:
        """The current etag (test inspection, or a competing writer)."""
        return self.objects[run_id][1]


@dataclass(frozen=True)
class EnqueuedRelease:
    """One ``enqueue_release`` call as the recording enqueuer saw it."""

    workspace_id: str
    floor: Totals | None
    source: str
    run_id: str | None
    request_id: str


class RecordingEnqueuer:
    """A SurplusReleaseQueue (sweep) and ``enqueue_many`` producer (sibling reclaim) that records.

    ``crash_after`` makes the call after that many successful enqueues raise ``crash`` AFTER
    recording it, once (the message reached the queue, then the process died before its
    checkpoint).
    """

    def __init__(
        self, *, crash_after: int | None = None, crash: BaseException | None = None
    ) -> None:
        self.releases: list[EnqueuedRelease] = []
        self.batches: list[list[EnsureRequest | ReleaseRequest]] = []
        self._crash_after = crash_after
        self._crash = crash

    def enqueue_release(
        self,
        workspace_id: str,
        *,
        floor: Totals | None = None,
        source: Literal["service", "sweep", "reclaim"] = "service",
        run_id: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Record one release; return its request id."""
        rid = request_id or f"generated-{len(self.releases) + 1}"
        self.releases.append(EnqueuedRelease(workspace_id, floor, source, run_id, rid))
        if self._crash_after is not None and len(self.releases) == self._crash_after + 1:
            raise self._crash or SimulatedCrash("died right after enqueueing")
        return rid

    def enqueue_many(self, requests: Sequence[EnsureRequest | ReleaseRequest]) -> list[str]:
        """Record ready-built requests (one call)."""
        self.batches.append(list(requests))
        return [request.request_id for request in requests]

    @property
    def many(self) -> list[EnsureRequest | ReleaseRequest]:
        """Every request passed to ``enqueue_many``, flattened in order."""
        return [request for batch in self.batches for request in batch]

    def enqueued_per_child(self) -> dict[str, int]:
        """How many ``enqueue_release`` calls each child got."""
        counts: dict[str, int] = {}
        for release in self.releases:
            counts[release.workspace_id] = counts.get(release.workspace_id, 0) + 1
        return counts


@dataclass(frozen=True)
class DeadLetter:
    """One ``send_invalid`` call."""

    body: str
    reason: str
    group_id: str | None
    dedup_id: str
    source_message_id: str


class RecordingDeadLetters:
    """The worker's dead-letter sender, in memory."""

    def __init__(self) -> None:
        self.sent: list[DeadLetter] = []

    def send_invalid(
        self,
        body: str,
        *,
        reason: str,
        group_id: str | None,
        dedup_id: str,
        source_message_id: str,
    ) -> None:
        """Record the invalid message and its reason."""
        self.sent.append(DeadLetter(body, reason, group_id, dedup_id, source_message_id))


class RecordingOutcomes:
    """The worker's outcome publisher, in memory; ``fail_calls`` names 1-based publish calls
    that raise (as a PutEvents outage would), ``fail_pool_low`` makes pool-low events fail."""

    def __init__(self, *, fail_calls: Iterable[int] = (), fail_pool_low: bool = False) -> None:
        self.published: list[AllocationOutcome] = []
        self.pool_low: list[dict[str, Any]] = []
        self.publish_calls = 0
        self._fail_calls = set(fail_calls)
        self._fail_pool_low = fail_pool_low

    def publish(self, outcomes: Sequence[AllocationOutcome]) -> None:
        """Record the outcomes, or raise for a scripted failing call."""
        self.publish_calls += 1
        if self.publish_calls in self._fail_calls:
            raise RuntimeError("PutEvents failed")
        self.published.extend(outcomes)

    def publish_pool_low(self, detail: Mapping[str, Any]) -> None:
        """Record one pool-low event detail."""
        if self._fail_pool_low:
            raise RuntimeError("PutEvents failed")
        self.pool_low.append(dict(detail))

    def by_request(self) -> dict[str, AllocationOutcome]:
        """The last published outcome of each request id."""
        return {outcome.request_id: outcome for outcome in self.published}


def sqs_record(
    body: Mapping[str, Any] | str,
    *,
    message_id: str,
    group_id: str,
    receive_count: int = 1,
    sent_timestamp_ms: int = 1_748_779_200_000,
    dedup_id: str | None = None,
) -> dict[str, Any]:
    """One SQS FIFO record as Lambda delivers it (``body`` dicts are JSON-encoded)."""
    text = body if isinstance(body, str) else json.dumps(dict(body))
    return {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": text,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": str(sent_timestamp_ms),
            "SenderId": "AROAEXAMPLE:unit",
            "ApproximateFirstReceiveTimestamp": str(sent_timestamp_ms + 10),
            "SequenceNumber": "18893920000000001000",
            "MessageGroupId": group_id,
            "MessageDeduplicationId": dedup_id or message_id,
        },
        "messageAttributes": {},
        "md5OfBody": "0" * 32,
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:serenity-unit.fifo",
        "awsRegion": "us-east-1",
    }


def sqs_event(*records: dict[str, Any]) -> dict[str, Any]:
    """An SQS event holding ``records`` in order."""
    return {"Records": list(records)}


if TYPE_CHECKING:
    # Structural conformance, checked by mypy: the fakes implement the domain's ports.
    _gateway: WorkspaceGateway = InMemoryGateway()
    _observer: AllocationObserver = RecordingObserver()
    _store: CheckpointStore = InMemoryCheckpointStore()
    _enqueuer: SurplusReleaseQueue = RecordingEnqueuer()
