"""The service-side write guard over real HTTP to the simulator's write gate.

The allocator is replaced by an instant one (ensures applied at once with the real domain use
case and the real Semrush client), so what is left to test is the guard: the gate's lag, one
ensure per recovery, the retries, the shared deadline and the metric. Time is the simulator's
injected clock, advanced by the guard's sleeps: nothing waits for real.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from serenity_allocator.adapters.semrush import (
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_allocator.domain.allocation import EnsureAsk, EnsureRules, ensure_headroom
from serenity_allocator.domain.errors import AllocationError
from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest
from serenity_allocator.domain.transfer import FAIL_FAST, TransferContext
from serenity_allocator.producer import (
    EmfQuotaRetryRecorder,
    GuardedWrite,
    GuardPolicy,
    WriteDeadlineExceededError,
    WriteGuard,
    WriteQuotaExhaustedError,
)
from serenity_tools.standins.simulator import SimulatorServer, SimulatorState, start_simulator
from tests.fakes import FakeClock

MASTER, CHILD = "m1", "c1"


@dataclass
class InstantAllocator:
    """Applies each ensure at once through the real use case, and answers its outcome."""

    client: SemrushClient
    clock: FakeClock
    ensures: list[dict[str, Any]] = field(default_factory=list)
    outcomes: dict[str, AllocationOutcome] = field(default_factory=dict)

    def enqueue(self, request: EnsureRequest) -> str:
        totals = request.need
        include_drafted = request.include_drafted
        self.ensures.append({"need": totals.as_dict(), "include_drafted": include_drafted})
        ctx = TransferContext(clock=self.clock, sleep=self.clock.sleep)
        status, code = "rejected", None
        try:
            ask = EnsureAsk(
                request.workspace_id,
                request.parent_workspace_id,
                totals,
                include_drafted=include_drafted,
            )
            result = ensure_headroom(self.client, ask, EnsureRules(policy=FAIL_FAST), ctx)
            status = result.outcome
        except AllocationError as exc:
            code = exc.code
        self.outcomes[request.request_id] = AllocationOutcome(
            request_id=request.request_id,
            kind="ensure",
            workspace_id=request.workspace_id,
            status=status,
            error_code=code,
        )
        return request.request_id

    def get_outcome(self, request_id: str) -> AllocationOutcome | None:
        return self.outcomes.get(request_id)


@dataclass
class RecordingRecorder:
    outcomes: list[tuple[str, int, str]] = field(default_factory=list)
    rollbacks_failed: list[str] = field(default_factory=list)
    verdicts: list[bool] = field(default_factory=list)

    def record_quota_verdict(self, matched: bool) -> None:
        self.verdicts.append(matched)

    def record(self, outcome: str, attempt: int, site: str) -> None:
        self.outcomes.append((outcome, attempt, site))

    def record_rollback_failed(self, site: str) -> None:
        self.rollbacks_failed.append(site)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim(clock: FakeClock) -> Iterator[SimulatorServer]:
    with start_simulator(state=SimulatorState(clock=clock, sleep=clock.sleep)) as server:
        yield server


@pytest.fixture
def allocator(sim: SimulatorServer, clock: FakeClock) -> Iterator[InstantAllocator]:
    with SemrushClient(
        sim.origin, StaticTokenProvider("tok"), config=SemrushClientConfig(max_retries=0)
    ) as client:
        yield InstantAllocator(client, clock)


@pytest.fixture
def http(sim: SimulatorServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=sim.write_url, headers={"Authorization": "Bearer tok"}, trust_env=False
    ) as client:
        yield client


def seed(sim: SimulatorServer, prompts: tuple[int, int, int], pool_prompts: int = 10_000) -> None:
    used, drafted, total = prompts
    sim.seed(
        [
            {"id": MASTER, "ai": {"projects": {"used": 0, "total": 50},
                                  "prompts": {"used": 0, "total": pool_prompts}}},
            {"id": CHILD, "parent_id": MASTER, "ai": {
                "projects": {"used": 1, "total": 1},
                "prompts": {"used": used, "drafted": drafted, "total": total}}},
        ]
    )  # fmt: skip


def prompts_writer(http: httpx.Client, count: int) -> Any:
    return lambda: http.post(f"/v1/workspaces/{CHILD}/prompts", json={"count": count})


def guard_for(allocator: InstantAllocator, clock: FakeClock, **options: Any) -> WriteGuard:
    return WriteGuard(allocator, CHILD, MASTER, clock=clock, sleep=clock.sleep, **options)


def test_write_guard_recovers_a_write_refused_inside_the_lag_with_one_ensure(
    sim: SimulatorServer, allocator: InstantAllocator, clock: FakeClock, http: httpx.Client
) -> None:
    # Given a full child (100 of 100 prompts) and the gate's default 9 s lag
    seed(sim, (100, 0, 100))
    recorder = RecordingRecorder()
    guard = guard_for(allocator, clock, recorder=recorder)

    # When a 50-prompt write is wrapped without fronting it first
    answer = guard.write(prompts_writer(http, 50), need={"prompts": 50}, site="prompts")

    # Then one ensure topped the child up, and the 4th attempt (9 s later) was accepted
    assert answer.status_code == 200
    assert allocator.ensures == [{"need": {"projects": 0, "prompts": 50}, "include_drafted": True}]
    assert clock.sleeps == [3.0, 3.0, 3.0]
    assert guard.history == [GuardedWrite("prompts", 4, 9.0, "recovered")]
    assert recorder.outcomes == [("recovered", 4, "prompts")]
    assert [c["status"] for c in sim.calls() if c["op"] == "write_prompts"] == [405, 405, 405, 200]


def test_write_guard_fronted_write_lands_after_the_lag_without_retry(
    sim: SimulatorServer, allocator: InstantAllocator, clock: FakeClock, http: httpx.Client
) -> None:
    # Given a full child, fronted for the batch 10 s before the write
    seed(sim, (100, 0, 100))
    guard = guard_for(allocator, clock)
    guard.front({"prompts": 50})
    clock.advance(10.0)

    # When the write is wrapped
    answer = guard.write(prompts_writer(http, 50), need={"prompts": 50}, site="prompts")

    # Then it is accepted first time, with no second ensure
    assert answer.status_code == 200
    assert len(allocator.ensures) == 1
    assert guard.history == [GuardedWrite("prompts", 1, 0.0, "accepted")]


def test_write_guard_exhausts_when_the_lag_outlasts_the_retries(
    sim: SimulatorServer, allocator: InstantAllocator, clock: FakeClock, http: httpx.Client
) -> None:
    # Given a full child and a gate lagging 20 s
    seed(sim, (100, 0, 100))
    sim.faults(enforcement_lag_ms=20_000)
    recorder = RecordingRecorder()
    guard = guard_for(allocator, clock, recorder=recorder)

    # When a write is wrapped
    with pytest.raises(WriteQuotaExhaustedError) as raised:
        guard.write(prompts_writer(http, 50), need={"prompts": 50}, site="prompts")

    # Then 1 + 4 attempts, one ensure, and the exhausted outcome with the attempts made
    assert (raised.value.attempts, raised.value.waited_s) == (5, 12.0)
    assert raised.value.answer.status_code == 405
    assert len(allocator.ensures) == 1
    assert recorder.outcomes == [("exhausted", 5, "prompts")]


def test_write_guard_deadline_is_shared_by_every_write_of_the_request(
    sim: SimulatorServer, allocator: InstantAllocator, clock: FakeClock, http: httpx.Client
) -> None:
    # Given a full child and a request deadline of 10 s
    seed(sim, (100, 0, 100))
    guard = guard_for(allocator, clock, policy=GuardPolicy(deadline_s=10.0))

    # When a first write recovers (9 s of waiting; its top-up leaves 150 + four blocks = 550)
    # and a second one, of 450 (past the 400 left), is refused too
    guard.write(prompts_writer(http, 50), need={"prompts": 50}, site="first")
    with pytest.raises(WriteDeadlineExceededError) as raised:
        guard.write(prompts_writer(http, 450), need={"prompts": 450}, site="second")

    # Then the second gets no retry (the 1 s left cannot hold a 3 s pause) and ends out of
    # time, never reported as "no room"
    assert (raised.value.attempts, raised.value.code) == (1, "deadlineExceeded")
    assert [w.outcome for w in guard.history] == ["recovered", "timed-out"]
    assert len(allocator.ensures) == 2


def test_write_guard_non_quota_answers_and_errors_propagate_at_once(
    sim: SimulatorServer, allocator: InstantAllocator, clock: FakeClock, http: httpx.Client
) -> None:
    # Given a seeded child
    seed(sim, (0, 0, 100))
    guard = guard_for(allocator, clock)

    # When a write gets the gateway's JSON 405 (a real method error), and another one raises
    wrong_method = guard.write(
        lambda: http.get(f"/v1/workspaces/{CHILD}/prompts"), need={"prompts": 1}, site="get"
    )

    def broken() -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(httpx.ConnectError):
        guard.write(broken, need={"prompts": 1}, site="broken")

    # Then the JSON 405 comes back unchanged, nothing was retried or ensured
    assert wrong_method.status_code == 405
    assert allocator.ensures == []
    assert clock.sleeps == []
    assert guard.history == [GuardedWrite("get", 1, 0.0, "failed")]


@pytest.mark.parametrize(("include_drafted", "expected_total"), [(True, 610), (False, 550)])
def test_write_guard_front_counts_drafted_prompts_by_default(
    sim: SimulatorServer,
    allocator: InstantAllocator,
    clock: FakeClock,
    include_drafted: bool,
    expected_total: int,
) -> None:
    # Given 100 used and 60 drafted of 200 prompts
    seed(sim, (100, 60, 200))
    guard = guard_for(allocator, clock, include_drafted=include_drafted)

    # When a 50-prompt batch is fronted (100 + 60 + 50 = 210 with drafts)
    guard.front({"prompts": 50})

    # Then by default the top-up covers the drafts (210 plus four blocks: 610); opting out
    # sizes it on 150 alone (50 left, under two blocks: refilled to 150 plus four blocks, 550)
    by_id = {w["id"]: w for w in sim.dump()["workspaces"]}
    assert by_id[CHILD]["ai"]["prompts"]["total"] == expected_total


def test_emf_quota_retry_recorder_prints_one_emf_line_per_outcome() -> None:
    # Given a recorder printing into a list
    lines: list[str] = []
    recorder = EmfQuotaRetryRecorder(
        "prod", service="brands", emit=lines.append, clock_ms=lambda: 5.0
    )

    # When a recovery is recorded
    recorder.record("recovered", 3, "prompts.create")

    # Then one EMF blob with the outcome and site as dimensions and the attempt as the value
    [blob] = [json.loads(line) for line in lines]
    [directive] = blob["_aws"]["CloudWatchMetrics"]
    assert directive == {
        "Namespace": "SerenityAllocator",
        "Dimensions": [["Environment", "Outcome", "Site"]],
        "Metrics": [{"Name": "QuotaRetryOutcome", "Unit": "Count"}],
    }
    assert (blob["Environment"], blob["Outcome"], blob["Site"]) == (
        "prod",
        "recovered",
        "prompts.create",
    )
    assert (blob["QuotaRetryOutcome"], blob["_aws"]["Timestamp"]) == (3, 5)


def drafted_of(sim: SimulatorServer) -> int:
    by_id = {w["id"]: w for w in sim.dump()["workspaces"]}
    drafted: int = by_id[CHILD]["ai"]["prompts"]["drafted"]
    return drafted


def test_write_guard_rollback_deletes_the_requests_drafts_when_the_pool_refuses(
    sim: SimulatorServer, allocator: InstantAllocator, clock: FakeClock, http: httpx.Client
) -> None:
    # Given a child at 100 used + 5 drafted of 115 prompts under a pool with 20 free (less than
    # a 100-prompt block), and a guard reading the ensures' outcomes
    seed(sim, (100, 5, 115), pool_prompts=20)
    recorder = RecordingRecorder()
    guard = guard_for(allocator, clock, recorder=recorder, outcomes=allocator)
    staged: list[int] = []

    def rollback() -> None:  # what the service staged in this request, deleted again
        for count in staged:
            answer = http.post(f"/v1/workspaces/{CHILD}/prompts/discard", json={"count": count})
            answer.raise_for_status()

    # When the request drafts 10 prompts (they fit), then 50 more that need a top-up
    first = guard.write(prompts_writer(http, 10), need={"prompts": 10}, site="prompts",
                        rollback=rollback)  # fmt: skip
    staged.append(10)
    drafted_before_refusal = drafted_of(sim)
    with pytest.raises(WriteQuotaExhaustedError) as raised:
        guard.write(prompts_writer(http, 50), need={"prompts": 50}, site="prompts",
                    rollback=rollback)  # fmt: skip

    # Then the ensure's refusal ended the cycle after one retry (not four), the refused batch
    # left nothing (refused whole), and the rollback deleted the 10 the request had drafted:
    # the child's drafted count is back where it was before the request
    assert first.status_code == 200
    assert drafted_before_refusal == 15
    assert (raised.value.code, raised.value.reason, raised.value.attempts) == (
        "quotaExceeded",
        "orgPoolExhausted",
        2,
    )
    assert raised.value.rollback_error is None
    assert drafted_of(sim) == 5
    assert [(c["op"], c["status"]) for c in sim.calls() if c["op"] != "read_resources"] == [
        ("write_prompts", 200),
        ("write_prompts", 405),
        ("write_prompts", 405),
        ("discard_drafts", 200),
    ]
    assert recorder.outcomes == [("exhausted", 2, "prompts")]
    assert recorder.rollbacks_failed == []


def test_write_guard_failed_rollback_leaves_the_drafts_and_still_refuses(
    sim: SimulatorServer, allocator: InstantAllocator, clock: FakeClock, http: httpx.Client
) -> None:
    # Given the same short pool, and a rollback that deletes more than was drafted (a 400)
    seed(sim, (100, 5, 115), pool_prompts=20)
    recorder = RecordingRecorder()
    guard = guard_for(allocator, clock, recorder=recorder, outcomes=allocator)

    def rollback() -> None:
        answer = http.post(f"/v1/workspaces/{CHILD}/prompts/discard", json={"count": 99})
        answer.raise_for_status()

    # When the write is refused
    with pytest.raises(WriteQuotaExhaustedError) as raised:
        guard.write(prompts_writer(http, 50), need={"prompts": 50}, site="prompts",
                    rollback=rollback)  # fmt: skip

    # Then the refusal is raised with the rollback's HTTP error attached and counted
    assert isinstance(raised.value.rollback_error, httpx.HTTPStatusError)
    assert raised.value.rollback_error.response.status_code == 400
    assert recorder.rollbacks_failed == ["prompts"]
    assert drafted_of(sim) == 5
