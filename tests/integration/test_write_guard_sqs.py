"""The write guard over the real (moto) FIFO queue and request ledger, and the simulator.

Its ensures land on the queue as version-1 messages; a guard given the ledger's reader waits
for its recovery ensure, served by the real Allocator handler, however late the queue is,
inside the request's deadline. Time is injected: the guard's sleeps move the clock of the
simulator's write gate, nothing waits for real.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from serenity_allocator.producer import (
    AllocationProducer,
    GuardedWrite,
    GuardPolicy,
    OutcomeReader,
    WriteGuard,
    WriteQuotaExhaustedError,
)
from serenity_tools.standins.resources import LocalResources, local_client
from serenity_tools.standins.simulator import SimulatorServer, SimulatorState, start_simulator
from tests.fakes import FakeClock
from tests.integration.allocator_harness import AllocatorHarness, allocator_harness, workspace

MASTER, CHILD = "master-1", "child-1"


def test_write_guard_front_enqueues_an_ensure_counting_drafts_with_fifo_ids(
    local_resources: LocalResources,
) -> None:
    # Given a guard on the real producer, with a partial ceiling
    producer = AllocationProducer(local_resources.queue_url)
    guard = WriteGuard(producer, "child-1", "master-1", ceiling={"prompts": 5000})

    # When a 250-prompt batch is fronted
    request_id = guard.front({"prompts": 250})

    # Then one version-1 ensure is queued: drafts counted, need as given, the ceiling partial
    sqs = local_client("sqs", local_resources.endpoint_url)
    [message] = sqs.receive_message(
        QueueUrl=local_resources.queue_url,
        AttributeNames=["MessageGroupId", "MessageDeduplicationId"],
    )["Messages"]
    assert json.loads(message["Body"]) == {
        "version": 1,
        "kind": "ensure",
        "request_id": request_id,
        "workspace_id": "child-1",
        "parent_workspace_id": "master-1",
        "need": {"projects": 0, "prompts": 250},
        "include_drafted": True,
        "ceiling": {"prompts": 5000},
    }
    assert message["Attributes"]["MessageGroupId"] == "child-1"
    assert message["Attributes"]["MessageDeduplicationId"] == request_id


# -- a guard that waits for its ensure, over moto's queue and ledger and the simulator ----------

START = 1_000.0
LANDS_AFTER_S = 13.0
"""The recovery ensure is served only once this much (injected) time has passed: more than
today's 4 retries x 3 s, so a guard counting retries would give up with the top-up on its way."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def gate_sim(clock: FakeClock) -> Iterator[SimulatorServer]:
    # The gate's default 9 s lag, on the test's clock
    with start_simulator(state=SimulatorState(clock=clock, sleep=clock.sleep)) as server:
        yield server


@dataclass
class SlowQueue:
    """The guard's sleep: time passes; the worker serves the queue once LANDS_AFTER_S passed."""

    clock: FakeClock
    worker: AllocatorHarness
    served_at: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)
        if not self.served_at and self.clock() - START >= LANDS_AFTER_S:
            invocation = self.worker.invoke()
            assert invocation.failed == []
            self.served_at.append(self.clock() - START)


@dataclass
class ServingQueue:
    """The guard's sleep: time passes, then the worker serves whatever waits on the queue."""

    clock: FakeClock
    worker: AllocatorHarness
    served_at: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)
        self.serve()

    def serve(self) -> None:
        messages = self.worker.receive()
        if messages:
            invocation = self.worker.handle(messages)
            assert invocation.failed == []
            self.served_at.append(self.clock() - START)


@contextmanager
def slow_guarded_write(
    local_resources: LocalResources, gate_sim: SimulatorServer, clock: FakeClock, *, pool: int
) -> Iterator[tuple[WriteGuard, SlowQueue, Callable[[], httpx.Response]]]:
    """A full child (100 of 100 prompts) under a pool of ``pool`` prompts; a guard with the
    ledger's real reader and a 30 s deadline; and its 50-prompt write over HTTP."""
    gate_sim.seed(
        [
            workspace(MASTER, projects=(0, 50), prompts=(0, pool)),
            workspace(CHILD, parent_id=MASTER, projects=(1, 1), prompts=(100, 100)),
        ]
    )
    reader = OutcomeReader(
        local_resources.ledger_table, local_client("dynamodb", local_resources.endpoint_url)
    )
    with (
        allocator_harness(
            local_resources, gate_sim, {"REQUEST_LEDGER_TABLE": local_resources.ledger_table}
        ) as worker,
        httpx.Client(base_url=gate_sim.write_url, trust_env=False) as http,
    ):
        queue = SlowQueue(clock, worker)
        guard = WriteGuard(
            AllocationProducer(local_resources.queue_url), CHILD, MASTER,
            policy=GuardPolicy(deadline_s=30.0), outcomes=reader,
            clock=clock, sleep=queue.sleep,
        )  # fmt: skip

        def write() -> httpx.Response:
            return http.post(
                f"/v1/workspaces/{CHILD}/prompts",
                json={"count": 50},
                headers={"Authorization": "Bearer tok"},
            )

        yield guard, queue, write


def served_request_ids(queue: SlowQueue | ServingQueue) -> list[str]:
    """The request ids of the messages the worker was given."""
    return [
        json.loads(record["body"])["request_id"]
        for invocation in queue.worker.invocations
        for record in invocation.event["Records"]
    ]


def test_write_guard_waits_for_an_ensure_served_after_the_old_retry_budget(
    local_resources: LocalResources, gate_sim: SimulatorServer, clock: FakeClock
) -> None:
    # Given a full child (100 of 100 prompts) under a roomy pool, the gate's 9 s lag, and a
    # queue whose consumer serves the recovery ensure only after 13 s
    with slow_guarded_write(local_resources, gate_sim, clock, pool=10_000) as (guard, queue, write):
        # When a 50-prompt write is wrapped
        answer = guard.write(write, need={"prompts": 50}, site="prompts")

    # Then the guard kept going past 12 s while the ledger had no outcome, saw the top-up at
    # 15 s (150 plus four blocks: 550), and the write landed once the gate enforced it
    # (15 + 9 = 24 s)
    assert answer.status_code == 200
    assert queue.served_at == [15.0]
    assert guard.history == [GuardedWrite("prompts", 9, 24.0, "recovered")]
    [ensure_id] = served_request_ids(queue)
    reader = guard.outcomes
    assert reader is not None
    outcome = reader.get_outcome(ensure_id)
    assert outcome is not None and outcome.status == "topped-up"
    assert outcome.totals_after is not None and outcome.totals_after.prompts == 550
    writes = [(c["t"] - START, c["status"]) for c in gate_sim.calls() if c["op"] == "write_prompts"]
    assert writes == [(float(t), 405) for t in range(0, 24, 3)] + [(24.0, 200)]


def test_write_guard_stops_at_the_ensures_refusal_read_from_the_ledger(
    local_resources: LocalResources, gate_sim: SimulatorServer, clock: FakeClock
) -> None:
    # Given a full child under a pool with 20 prompts free (less than a block), and the same
    # slow queue
    # When a 50-prompt write is wrapped
    with (
        slow_guarded_write(local_resources, gate_sim, clock, pool=20) as (guard, queue, write),
        pytest.raises(WriteQuotaExhaustedError) as raised,
    ):
        guard.write(write, need={"prompts": 50}, site="prompts")

    # Then the first lookup after the ensure was served (15 s) read its refusal: quotaExceeded
    # with the pool's code, not a deadline and not a wait for the gate's lag
    assert (raised.value.code, raised.value.reason) == ("quotaExceeded", "orgPoolExhausted")
    assert (raised.value.attempts, raised.value.waited_s) == (6, 15.0)
    assert guard.history == [GuardedWrite("prompts", 6, 15.0, "exhausted")]
    assert queue.served_at == [15.0]
    assert len(served_request_ids(queue)) == 1


# -- a recovery that follows the guard's front, served by the real handler (coalescing) ---------


@contextmanager
def fronted_guard(
    local_resources: LocalResources, gate_sim: SimulatorServer, clock: FakeClock
) -> Iterator[tuple[WriteGuard, ServingQueue, httpx.Client]]:
    """A full child (100 of 100 prompts) under a roomy pool, one-prompt blocks (so a carve is
    the need plus as much again as it asked, no block rounding), a worker serving the queue at
    each of the guard's pauses, and a guard with the ledger's real reader and a 60 s deadline."""
    gate_sim.seed(
        [
            workspace(MASTER, projects=(0, 50), prompts=(0, 10_000)),
            workspace(CHILD, parent_id=MASTER, projects=(1, 1), prompts=(100, 100)),
        ]
    )
    reader = OutcomeReader(
        local_resources.ledger_table, local_client("dynamodb", local_resources.endpoint_url)
    )
    env = {"REQUEST_LEDGER_TABLE": local_resources.ledger_table, "BLOCK_PROMPTS": "1"}
    with (
        allocator_harness(local_resources, gate_sim, env) as worker,
        httpx.Client(
            base_url=gate_sim.write_url, trust_env=False, headers={"Authorization": "Bearer tok"}
        ) as http,
    ):
        queue = ServingQueue(clock, worker)
        guard = WriteGuard(
            AllocationProducer(local_resources.queue_url), CHILD, MASTER,
            policy=GuardPolicy(deadline_s=60.0), outcomes=reader,
            clock=clock, sleep=queue.sleep,
        )  # fmt: skip
        yield guard, queue, http


def prompts_total(sim: SimulatorServer) -> int:
    by_id = {w["id"]: w for w in sim.dump()["workspaces"]}
    total: int = by_id[CHILD]["ai"]["prompts"]["total"]
    return total


def test_write_guard_405_after_a_pending_front_sends_no_second_ensure_and_carves_once(
    local_resources: LocalResources, gate_sim: SimulatorServer, clock: FakeClock
) -> None:
    with fronted_guard(local_resources, gate_sim, clock) as (guard, queue, http):
        # Given a front for a 60-prompt batch, still on the queue
        front_id = guard.front({"prompts": 60})

        # When the batch is written at once and meets the disguised 405
        answer = guard.write(
            lambda: http.post(f"/v1/workspaces/{CHILD}/prompts", json={"count": 60}),
            need={"prompts": 60},
            site="prompts",
        )

    # Then the worker got the front alone (a second ensure would have been coalesced with it
    # and carved 120 plus as much again): the child was carved the 60 once, plus the 60 asked
    # again (block 1: 160 + 60), and the write landed 9 s after it
    assert answer.status_code == 200
    assert served_request_ids(queue) == [front_id]
    assert queue.served_at == [3.0]
    assert prompts_total(gate_sim) == 220
    outcome = guard.outcomes.get_outcome(front_id) if guard.outcomes else None
    assert outcome is not None
    assert (outcome.status, outcome.coalesced) == ("topped-up", 1)
    assert guard.history == [GuardedWrite("prompts", 5, 12.0, "recovered")]
    writes = [(c["t"] - START, c["status"]) for c in gate_sim.calls() if c["op"] == "write_prompts"]
    assert writes == [(0.0, 405), (3.0, 405), (6.0, 405), (9.0, 405), (12.0, 200)]


def test_write_guard_front_applied_but_spent_by_another_write_leads_to_a_recovery_ensure(
    local_resources: LocalResources, gate_sim: SimulatorServer, clock: FakeClock
) -> None:
    with fronted_guard(local_resources, gate_sim, clock) as (guard, queue, http):
        # Given a front for 50 prompts served at once (the child at 200: the 150 needed plus
        # the 50 asked again), and 10 s later another write of 100 the front did not count,
        # which takes all of that room
        front_id = guard.front({"prompts": 50})
        queue.serve()
        clock.advance(10.0)
        other = http.post(f"/v1/workspaces/{CHILD}/prompts", json={"count": 100})

        # When the guard's 50-prompt batch is written and meets the 405
        answer = guard.write(
            lambda: http.post(f"/v1/workspaces/{CHILD}/prompts", json={"count": 50}),
            need={"prompts": 50},
            site="prompts",
        )

    # Then the guard saw its front applied at 13 s, gave the gate its lag + one interval, and
    # at 25 s, still refused, sent its own ensure (200 used + 50, plus the 50 asked again):
    # served at 28 s, enforced from 37 s
    assert other.status_code == 200
    assert answer.status_code == 200
    [recovery_id] = [rid for rid in served_request_ids(queue) if rid != front_id]
    assert served_request_ids(queue) == [front_id, recovery_id]
    assert queue.served_at == [0.0, 28.0]
    assert prompts_total(gate_sim) == 300
    assert guard.history == [GuardedWrite("prompts", 10, 27.0, "recovered")]
    writes = [(c["t"] - START, c["status"]) for c in gate_sim.calls() if c["op"] == "write_prompts"]
    assert writes == [(10.0, 200)] + [(float(t), 405) for t in range(10, 35, 3)] + [(37.0, 200)]
