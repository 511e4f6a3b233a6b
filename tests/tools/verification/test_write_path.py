"""The write-path verification pieces over real HTTP to the simulator, on an injected clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from serenity_allocator.adapters.semrush import (
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_allocator.adapters.sqs import build_ensure
from serenity_tools.standins.simulator import SimulatorServer, SimulatorState, start_simulator
from serenity_tools.verification.write_path import (
    INVARIANT_NAME,
    GateClient,
    GuardedServiceWriter,
    InProcessAllocator,
    WriteRecord,
    as_metered_writes,
    check_guarded_writes,
    percentile,
    simulator_ai_reader,
    summarize_writes,
)
from tests.fakes import FakeClock

MASTER, CHILD = "m1", "c1"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim(clock: FakeClock) -> Iterator[SimulatorServer]:
    with start_simulator(state=SimulatorState(clock=clock, sleep=clock.sleep)) as server:
        yield server


@pytest.fixture
def allocator(sim: SimulatorServer, clock: FakeClock) -> Iterator[InProcessAllocator]:
    with SemrushClient(
        sim.origin, StaticTokenProvider("tok"), config=SemrushClientConfig(max_retries=0)
    ) as client:
        yield InProcessAllocator(client, clock, clock.advance)


@pytest.fixture
def writer(
    sim: SimulatorServer, allocator: InProcessAllocator, clock: FakeClock
) -> Iterator[GuardedServiceWriter]:
    gate = GateClient(sim.write_url, "tok")
    yield GuardedServiceWriter(
        gate, allocator, simulator_ai_reader(sim.dump), clock=clock, sleep=allocator.sleep
    )
    gate.close()


def seed(sim: SimulatorServer, *, pool_prompts: int, child_prompts: tuple[int, int]) -> None:
    used, total = child_prompts
    sim.seed(
        [
            {"id": MASTER, "ai": {"projects": {"used": 0, "total": 10},
                                  "prompts": {"used": 0, "total": pool_prompts}}},
            {"id": CHILD, "parent_id": MASTER, "ai": {
                "projects": {"used": 1, "total": 1}, "prompts": {"used": used, "total": total}}},
        ]
    )  # fmt: skip


def test_guarded_service_writer_fronts_then_recovers_inside_the_lag(
    sim: SimulatorServer, writer: GuardedServiceWriter, allocator: InProcessAllocator
) -> None:
    # Given a full child, a pool with room and the gate's 9 s lag
    seed(sim, pool_prompts=1000, child_prompts=(100, 100))

    # When a service writes 50 prompts and then creates a project, fronting each
    prompts = writer.write_prompts(CHILD, MASTER, 50)
    project = writer.create_project(CHILD, MASTER)

    # Then the prompts land after 3 pauses (the front's top-up is enforced 9 s later), with 2
    # ensures (the front and the recovery's); the project lands at once, the prompts' top-up
    # having refilled the child's one used project ahead, with its one front
    assert (prompts.outcome, prompts.attempts, prompts.waited_s) == ("recovered", 4, 9.0)
    assert (project.outcome, project.attempts) == ("accepted", 1)
    assert allocator.enqueued == 3
    assert check_guarded_writes(writer.records).passed


def test_guarded_service_writer_refusal_on_a_short_pool_is_not_a_violation(
    sim: SimulatorServer, writer: GuardedServiceWriter
) -> None:
    # Given a full child and a pool with 20 free prompts
    seed(sim, pool_prompts=20, child_prompts=(100, 100))

    # When it writes 50 prompts
    record = writer.write_prompts(CHILD, MASTER, 50)

    # Then the write ends refused, short by 50 with 20 free: the pool had no room
    assert (record.outcome, record.short_by, record.pool_free) == ("exhausted", 50, 20)
    result = check_guarded_writes(writer.records)
    assert result.passed
    assert result.name == INVARIANT_NAME


def test_check_guarded_writes_flags_a_refusal_the_lag_caused(
    sim: SimulatorServer, writer: GuardedServiceWriter
) -> None:
    # Given a gate lagging 20 s, longer than the guard's 12 s of retries
    seed(sim, pool_prompts=1000, child_prompts=(100, 100))
    sim.faults(enforcement_lag_ms=20_000)

    # When a fronted write is refused throughout
    record = writer.write_prompts(CHILD, MASTER, 50)

    # Then the child's total covered it and the check reports the violation. Short by -400:
    # the front's ensure raised the child to 150 plus four blocks (550, the pool keeping 550);
    # the recovery's own ensure (50, carving its front's 50 as units still on their way: the
    # worker cannot tell a recovery from another request's front; docs/decisions/0027) then
    # found 350 left, over its two-block refill mark, and moved nothing
    assert (record.outcome, record.short_by, record.pool_free) == ("exhausted", -400, 550)
    result = check_guarded_writes(writer.records)
    assert not result.passed
    assert result.violations == (
        "c1 prompts x50: refused after 5 attempts (12.0 s), short -400, pool free 550",
    )


def test_in_process_allocator_applies_an_ensure_after_its_queue_latency(
    sim: SimulatorServer, allocator: InProcessAllocator
) -> None:
    # Given a queue latency of 2 s and a full child
    seed(sim, pool_prompts=1000, child_prompts=(100, 100))
    allocator.latency_s = 2.0

    # When an ensure is enqueued, then 1.9 s and 2 s pass
    allocator.enqueue(build_ensure(CHILD, MASTER, {"prompts": 1}))
    allocator.sleep(1.9)
    early = [c["op"] for c in sim.calls()]
    allocator.sleep(0.1)

    # Then nothing ran before the latency; at 2 s the ensure topped the child up
    assert early == []
    assert allocator.applied == ["topped-up"]


def test_summarize_writes_counts_retries_and_wait_percentiles() -> None:
    # Given one first-time write and three retried ones
    records = [
        WriteRecord("c", "m", "prompts", 1, 1, 0.0, "accepted", True),
        WriteRecord("c", "m", "prompts", 1, 2, 3.0, "recovered", True),
        WriteRecord("c", "m", "prompts", 1, 4, 9.0, "recovered", True),
        WriteRecord("c", "m", "project", 1, 4, 9.0, "exhausted", True, short_by=1, pool_free=0),
    ]

    # When summarized
    summary = summarize_writes(records)

    # Then the counts and the nearest-rank waits of the retried writes
    assert (summary.writes, summary.first_time, summary.retried) == (4, 1, 3)
    assert (summary.recovered, summary.exhausted, summary.refused_with_room) == (2, 1, 0)
    assert (summary.wait_p50_s, summary.wait_p95_s, summary.wait_max_s) == (9.0, 9.0, 9.0)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([], 95) == 0.0


def test_a_write_out_of_time_with_pool_room_is_a_violation_and_a_refused_write() -> None:
    # Given a write refused for quota with the pool short, and one out of time with room
    records = [
        WriteRecord("c1", "m", "prompts", 50, 5, 12.0, "exhausted", True, short_by=50, pool_free=9),
        WriteRecord(
            "c2", "m", "prompts", 50, 7, 18.0, "timed-out", True, short_by=-50, pool_free=900
        ),
    ]

    # When checked, summarized and counted as metered writes
    result = check_guarded_writes(records)
    summary = summarize_writes(records)
    writes = as_metered_writes(records)

    # Then only the one out of time with room is a violation, and both did not land
    assert result.violations == (
        "c2 prompts x50: out of time after 7 attempts (18.0 s), short -50, pool free 900",
    )
    assert (summary.exhausted, summary.timed_out, summary.refused_with_room) == (1, 1, 1)
    assert (writes.accepted, writes.refused) == (0, ("c1", "c2"))
