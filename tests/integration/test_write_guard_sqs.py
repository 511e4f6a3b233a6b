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


def served_request_ids(queue: SlowQueue) -> list[str]:
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
    # 15 s, and the write landed once the gate enforced it (15 + 9 = 24 s)
    assert answer.status_code == 200
    assert queue.served_at == [15.0]
    assert guard.history == [GuardedWrite("prompts", 9, 24.0, "recovered")]
    [ensure_id] = served_request_ids(queue)
    reader = guard.outcomes
    assert reader is not None
    outcome = reader.get_outcome(ensure_id)
    assert outcome is not None and outcome.status == "topped-up"
    assert outcome.totals_after is not None and outcome.totals_after.prompts == 200
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
