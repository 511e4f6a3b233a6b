"""The rightsizing sweep end to end over real HTTP: the Semrush simulator and a moto server.

The Sweep handler runs with the production runtime, ``build_sweep_runtime(SweepSettings
.from_env(env))``: the real Semrush client, the S3 checkpoint store and the SQS producer. Only
time is faked: the sweep's sleep and the client's backoff sleep record instead of waiting, and
the wall clock that dates leases is a hand-moved fake. The releases it enqueues are drained
through the REAL Allocator handler, received and deleted the way the event source mapping does,
so "the children end at the targets the dry run predicted" is checked on the simulator's state.

The pure in-memory cases of the sweep live in tests/unit/test_domain_sweep.py and
tests/unit/test_sweep_handler.py; these show the same rules hold on the real wire formats.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from serenity_allocator.adapters.semrush_client import SemrushClient
from serenity_allocator.adapters.token_provider import StaticTokenProvider
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sweep import (
    CheckpointStore,
    ReleaseEnqueuer,
    RunInProgressError,
    StoredCheckpoint,
    SweepRefusedError,
)
from serenity_allocator.handlers import sweep as sweep_handler
from serenity_allocator.handlers.settings import SweepSettings
from serenity_allocator.handlers.sweep import (
    SweepPayloadError,
    SweepRuntime,
    build_sweep_runtime,
    lambda_handler,
    parse_sweep_request,
)
from serenity_tools.operator import sweep_cli
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.resources import LocalResources, local_client
from tests.infrastructure._template import EVENTS_DIR, load_template
from tests.infrastructure.test_state_machine import run_execution
from tests.integration.allocator_harness import (
    AllocatorHarness,
    RecordingSleep,
    allocator_harness,
    api_calls,
    totals_of,
    workspace,
)
from tests.integration.sqs_events import receive_messages

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageTypeDef

    from serenity_tools.standins.simulator import SimulatorServer

# The handler flushes its metrics decorator even when a batch recorded none; that is fine here.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")

TOKEN = "tok-sweep-integration"
ENVIRONMENT = "integration"
FUNCTION_NAME = "SweepFunction"
FUNCTION_TIMEOUT_S = 900.0
"""The template's SweepFunction Timeout."""
CLIENT_RETRIES = 3
"""The Semrush client's default retries: a failing read costs 1 + 3 requests."""

MASTER = "m1"
OTHER_MASTER = "m2"
ZOMBIE = "c-zombie"
CHILDREN = ("c-big", "c-drafted", "c-lean", ZOMBIE, "c-small")
"""The master's children, in the order the family listing (and so the sweep) walks them."""
OTHER_CHILD = "d-other"

EXPECTED: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    # child: ((target projects, prompts), (units returned projects, prompts)), default floor
    # of one block (1 project, 100 prompts): target = max(floor, used + drafted in blocks).
    "c-big": ((2, 200), (8, 800)),  # used 2/150 of 10/1000
    "c-drafted": ((1, 200), (3, 300)),  # 120 prompts drafted of 500, nothing used
    "c-small": ((1, 100), (2, 0)),  # prompts already at the floor
}
LEAN_TOTALS = (2, 200)
ZOMBIE_TOTALS = (5, 500)
POOL = (100, 10_000)


def _seed_fleet(sim: SimulatorServer) -> None:
    sim.seed(
        [
            workspace(MASTER, projects=(0, POOL[0]), prompts=(0, POOL[1])),
            workspace("c-big", parent_id=MASTER, projects=(2, 10), prompts=(150, 1000)),
            workspace(
                "c-drafted",
                parent_id=MASTER,
                projects=(0, 4),
                prompts=(0, 500),
                prompts_drafted=120,
            ),
            workspace("c-lean", parent_id=MASTER, projects=(2, 2), prompts=(180, 200)),
            workspace(ZOMBIE, parent_id=MASTER, projects=(0, 5), prompts=(0, 500)),
            workspace("c-small", parent_id=MASTER, projects=(1, 3), prompts=(0, 100)),
            workspace(OTHER_MASTER, projects=(0, 50), prompts=(0, 5000)),
            workspace(OTHER_CHILD, parent_id=OTHER_MASTER, projects=(0, 6), prompts=(0, 600)),
        ]
    )
    # A zombie: "not ready" forever (simulator fault), so the sweep must leave it alone.
    sim.faults(stuck=[ZOMBIE])


# ---------------------------------------------------------------- the stack


class ProcessDied(BaseException):
    """Stands for the process being killed: not an Exception, so no handler code catches it."""


class WallClock:
    """Epoch seconds that move only when the test says so (leases are dated with it)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def sweep_env(resources: LocalResources, sim: SimulatorServer) -> dict[str, str]:
    """The Sweep function's contract environment, pointed at moto and the simulator."""
    return {
        "SEMRUSH_BASE_URL": sim.origin,
        "SEMRUSH_TOKEN": TOKEN,
        "SWEEP_BUCKET": resources.bucket,
        "QUEUE_URL": resources.queue_url,
        "ENVIRONMENT": ENVIRONMENT,
        "SERENITY_DYNAMIC_ALLOCATION": "true",
    }


@dataclass
class SweepStack:
    """The Sweep handler on the production runtime, plus what a test needs to look at."""

    sim: SimulatorServer
    resources: LocalResources
    runtime: SweepRuntime
    sleeps: RecordingSleep
    client_sleeps: RecordingSleep
    wall: WallClock
    sqs: Any
    s3: Any
    invocations: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)

    def invoke(
        self, payload: Mapping[str, Any], *, request_id: str | None = None
    ) -> dict[str, Any]:
        """One Lambda invocation (a fresh context and request id unless one is given)."""
        self.invocations += 1
        context = LocalLambdaContext(
            FUNCTION_NAME,
            FUNCTION_TIMEOUT_S,
            aws_request_id=request_id or f"req-{self.invocations}",
        )
        result = lambda_handler(dict(payload), context, runtime=self.runtime)
        self.results.append(result)
        return result

    def run_to_end(
        self, payload: Mapping[str, Any], max_invocations: int = 20
    ) -> list[dict[str, Any]]:
        """Invoke, feeding back the run id, until done or aborted (what the state machine does)."""
        results = [self.invoke(payload)]
        while not (results[-1]["done"] or results[-1]["aborted"]):
            assert len(results) < max_invocations, "the run never finished"
            results.append(self.invoke({**payload, "run_id": results[-1]["run_id"]}))
        return results

    def queued(self) -> list[MessageTypeDef]:
        """Receive every visible message of the allocation queue (they stay in flight)."""
        received: list[MessageTypeDef] = []
        while batch := receive_messages(self.sqs, self.resources.queue_url):
            received.extend(batch)
        return received

    def checkpoint(self, run_id: str) -> dict[str, Any]:
        """The run's checkpoint as stored in S3."""
        body = self.s3.get_object(Bucket=self.resources.bucket, Key=f"sweep/{run_id}.json")["Body"]
        document: dict[str, Any] = json.loads(body.read())
        return document

    def checkpoint_keys(self) -> list[str]:
        """Every object key in the sweep bucket."""
        listed = self.s3.list_objects_v2(Bucket=self.resources.bucket)
        return [item["Key"] for item in listed.get("Contents", [])]


def make_stack(
    resources: LocalResources, sim: SimulatorServer, overrides: Mapping[str, str] | None = None
) -> SweepStack:
    """The production runtime from the environment, with time faked."""
    settings = SweepSettings.from_env({**sweep_env(resources, sim), **(overrides or {})})
    runtime = build_sweep_runtime(settings)
    client_sleeps = RecordingSleep()
    built = runtime.gateway
    if isinstance(built, SemrushClient):
        built.close()
    # The same client production builds, with its backoff sleep recorded instead of slept.
    assert settings.semrush.token is not None
    runtime.gateway = SemrushClient(
        settings.semrush.base_url,
        StaticTokenProvider(settings.semrush.token),
        timeout_s=settings.semrush.timeout_s,
        sleep=client_sleeps,
    )
    sleeps = RecordingSleep()
    wall = WallClock()
    runtime.sleep = sleeps
    runtime.wall_clock = wall
    return SweepStack(
        sim=sim,
        resources=resources,
        runtime=runtime,
        sleeps=sleeps,
        client_sleeps=client_sleeps,
        wall=wall,
        sqs=local_client("sqs", resources.endpoint_url),
        s3=local_client("s3", resources.endpoint_url),
    )


@pytest.fixture
def stack(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[SweepStack]:
    """The fleet seeded, the kill switch on."""
    _seed_fleet(sim)
    built = make_stack(local_resources, sim)
    yield built
    if isinstance(built.runtime.gateway, SemrushClient):
        built.runtime.gateway.close()


@pytest.fixture
def worker(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[AllocatorHarness]:
    """The real Allocator worker on the same queue and simulator."""
    with allocator_harness(local_resources, sim) as harness:
        yield harness


def drain(worker: AllocatorHarness, messages: list[MessageTypeDef]) -> None:
    """Hand received messages to the worker in event-sized batches; all must complete."""
    for start in range(0, len(messages), 10):
        invocation = worker.handle(messages[start : start + 10])
        assert invocation.failed == []
    assert receive_messages(worker.sqs, worker.resources.queue_url) == []


def payload(**fields: Any) -> dict[str, Any]:
    """A sweep payload over the master, no pause between targets unless asked."""
    return {"parent_workspace_ids": [MASTER], "rate_limit_ms": 0, **fields}


def items_by_child(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every item of every result, by child id (each child must appear once)."""
    items = [item for result in results for item in result["items"]]
    ids = [item["workspace_id"] for item in items]
    assert len(ids) == len(set(ids)), f"a child was processed twice: {ids}"
    return {item["workspace_id"]: item for item in items}


def totals(pair: tuple[int, int]) -> dict[str, int]:
    return {"projects": pair[0], "prompts": pair[1]}


def groups_of(messages: list[MessageTypeDef]) -> Counter[str]:
    return Counter(message["Attributes"]["MessageGroupId"] for message in messages)


# ---------------------------------------------------------------- dry run and real run


def test_sweep_dry_run_transfers_nothing_and_reports_exact_targets(stack: SweepStack) -> None:
    # Given the seeded fleet
    # When a dry run covers the master in one invocation
    result = stack.invoke(payload(dry_run=True))

    # Then the run is done and every child got its line
    assert (result["done"], result["aborted"], result["dry_run"]) == (True, False, True)
    assert (result["processed"], result["remaining"], result["total"]) == (5, 0, 5)
    items = items_by_child([result])
    assert list(items) == list(CHILDREN)
    # And the surplus children carry the exact target and the units they would return
    for child, (target, returned) in EXPECTED.items():
        assert items[child]["outcome"] == "would-release"
        assert items[child]["target"] == totals(target)
        assert items[child]["units_returned"] == totals(returned)
    assert items["c-lean"]["outcome"] == "nothing-to-release"
    assert items[ZOMBIE]["outcome"] == "skipped-not-created"
    assert result["counts"] == {
        "would_release": 3,
        "enqueued": 0,
        "nothing_to_release": 1,
        "requires_decommission": 0,
        "skipped_not_created": 1,
        "not_a_child": 0,
        "expected_errors": 0,
        "unexpected_errors": 0,
    }
    # And nothing moved: no transfer reached Semrush, nothing was enqueued
    assert api_calls(stack.sim, "transfer") == []
    assert totals_of(stack.sim)["c-big"] == (10, 1000)
    assert stack.queued() == []
    # And the checkpoint is in S3 where the result says
    assert result["checkpoint"] == f"s3://{stack.resources.bucket}/sweep/{result['run_id']}.json"
    assert stack.checkpoint(result["run_id"])["processed"] == list(CHILDREN)


def test_sweep_real_run_enqueues_one_release_per_surplus_child_and_worker_lands_on_dry_run_targets(
    stack: SweepStack, worker: AllocatorHarness
) -> None:
    # Given what a dry run predicts
    preview = items_by_child([stack.invoke(payload(dry_run=True))])
    pool_before = totals_of(stack.sim)[MASTER]

    # When the real run goes through
    result = stack.invoke(payload(dry_run=False, run_id="rs-real-1"))

    # Then it enqueued exactly the surplus children, once each, and touched nothing upstream
    assert result["done"] is True
    assert result["counts"]["enqueued"] == 3
    assert api_calls(stack.sim, "transfer") == []
    messages = stack.queued()
    assert groups_of(messages) == Counter(dict.fromkeys(EXPECTED, 1))
    for message in messages:
        body = json.loads(message["Body"])
        child = message["Attributes"]["MessageGroupId"]
        assert body["kind"] == "release"
        assert body["workspace_id"] == child
        assert (body["source"], body["run_id"]) == ("sweep", "rs-real-1")
        assert body["request_id"] == f"rs-real-1.{child}"
        assert body["floor"] == {"projects": 1, "prompts": 100}
        assert message["Attributes"]["MessageDeduplicationId"] == body["request_id"]
    items = items_by_child([result])
    assert {c for c, i in items.items() if i["outcome"] == "enqueued"} == set(EXPECTED)

    # When the worker drains the queue
    drain(worker, messages)

    # Then each child sits exactly at the target the dry run predicted
    after = totals_of(stack.sim)
    for child in EXPECTED:
        target = preview[child]["target"]
        assert after[child] == (target["projects"], target["prompts"])
    assert after["c-lean"] == LEAN_TOTALS
    assert after[ZOMBIE] == ZOMBIE_TOTALS
    # And the master got back exactly the predicted units
    returned_projects = sum(preview[c]["units_returned"]["projects"] for c in EXPECTED)
    returned_prompts = sum(preview[c]["units_returned"]["prompts"] for c in EXPECTED)
    assert (returned_projects, returned_prompts) == (13, 1100)
    assert after[MASTER] == (pool_before[0] + returned_projects, pool_before[1] + returned_prompts)


# ---------------------------------------------------------------- targets


def test_sweep_allow_list_sweeps_named_children_and_reports_strangers(stack: SweepStack) -> None:
    # Given an allow-list with one child of the master, a child of another master and an
    # unknown id
    request = payload(dry_run=True, workspace_ids=["c-big", OTHER_CHILD, "ws-nobody"])

    # When the run goes through
    result = stack.invoke(request)

    # Then only the master's child is swept; the others are reported, in the order given
    items = items_by_child([result])
    assert [(i["workspace_id"], i["outcome"]) for i in result["items"]] == [
        ("c-big", "would-release"),
        (OTHER_CHILD, "not-a-child"),
        ("ws-nobody", "not-a-child"),
    ]
    assert items["c-big"]["target"] == totals(EXPECTED["c-big"][0])
    assert result["counts"]["not_a_child"] == 2
    # And Semrush never heard of the strangers
    touched = {call["workspace_id"] for call in api_calls(stack.sim)}
    assert touched == {MASTER, "c-big"}


def test_sweep_several_parents_sweep_the_children_of_each(stack: SweepStack) -> None:
    # When a run names both masters
    result = stack.invoke(payload(dry_run=True, parent_workspace_ids=[MASTER, OTHER_MASTER]))
    # Then every child of both is a target, the masters themselves are not
    items = items_by_child([result])
    assert list(items) == [*CHILDREN, OTHER_CHILD]
    assert items[OTHER_CHILD]["parent_workspace_id"] == OTHER_MASTER
    assert items[OTHER_CHILD]["target"] == {"projects": 1, "prompts": 100}


def test_sweep_limit_bounds_the_whole_run_across_invocations(stack: SweepStack) -> None:
    # When a run is limited to two children, one per invocation
    results = stack.run_to_end(payload(dry_run=True, limit=2, batch_size=1))
    # Then it took two invocations and swept only the first two children
    assert [(r["processed"], r["total"], r["done"]) for r in results] == [
        (1, 2, False),
        (2, 2, True),
    ]
    assert list(items_by_child(results)) == ["c-big", "c-drafted"]
    assert {call["workspace_id"] for call in api_calls(stack.sim, "status")} == {
        "c-big",
        "c-drafted",
    }


def test_sweep_batches_resume_by_run_id_and_pause_between_targets(stack: SweepStack) -> None:
    # When a run of five children goes two per invocation, with a 250 ms pause between targets
    results = stack.run_to_end(payload(dry_run=True, batch_size=2, rate_limit_ms=250))

    # Then three invocations shared one generated run id and each child was seen once
    run_ids = {r["run_id"] for r in results}
    assert len(run_ids) == 1 and run_ids.pop().startswith("rs-")
    assert [(r["processed"], r["remaining"], r["done"]) for r in results] == [
        (2, 3, False),
        (4, 1, False),
        (5, 0, True),
    ]
    assert list(items_by_child(results)) == list(CHILDREN)
    # And the counts are the run's, carried across invocations by the checkpoint
    assert results[-1]["counts"]["would_release"] == 3
    # And the pause came between two targets of one invocation, never before the first
    assert stack.sleeps.calls == [0.25, 0.25]
    # And the finished checkpoint holds every child and no lease
    stored = stack.checkpoint(results[0]["run_id"])
    assert stored["processed"] == list(CHILDREN)
    assert (stored["lease_owner"], stored["lease_until"]) == (None, None)


def test_sweep_skips_a_zombie_child_and_reports_it(stack: SweepStack) -> None:
    # When a real run meets the child stuck "not ready"
    result = stack.invoke(payload(dry_run=False))
    # Then it is skipped and reported with its status, neither read nor enqueued
    zombie = items_by_child([result])[ZOMBIE]
    assert (zombie["outcome"], zombie["error_code"]) == ("skipped-not-created", "not ready")
    assert result["counts"]["skipped_not_created"] == 1
    assert [c["op"] for c in api_calls(stack.sim) if c["workspace_id"] == ZOMBIE] == ["status"]
    assert ZOMBIE not in groups_of(stack.queued())


# ---------------------------------------------------------------- crash, resume, concurrency


class CrashingStore:
    """The real checkpoint store, with the process dying at the N-th save."""

    def __init__(self, inner: CheckpointStore, die_at_save: int) -> None:
        self._inner = inner
        self._die_at_save = die_at_save
        self.saves = 0

    def load(self, run_id: str) -> StoredCheckpoint | None:
        return self._inner.load(run_id)

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        self.saves += 1
        if self.saves == self._die_at_save:
            raise ProcessDied
        return self._inner.save(run_id, body, expected_etag=expected_etag)

    def location(self, run_id: str) -> str:
        return self._inner.location(run_id)


class CrashingEnqueuer:
    """The real producer, with the process dying at the N-th release (before or after sending)."""

    def __init__(self, inner: ReleaseEnqueuer, die_at_call: int, *, after_send: bool) -> None:
        self._inner = inner
        self._die_at_call = die_at_call
        self._after_send = after_send
        self.calls = 0

    def enqueue_release(self, workspace_id: str, **kwargs: Any) -> str:
        self.calls += 1
        if self.calls == self._die_at_call and not self._after_send:
            raise ProcessDied
        request_id = self._inner.enqueue_release(workspace_id, **kwargs)
        if self.calls == self._die_at_call:
            raise ProcessDied
        return request_id


@pytest.mark.parametrize(
    "crash_point",
    ["before-second-enqueue", "after-second-enqueue", "before-second-checkpoint"],
)
def test_sweep_crash_between_targets_then_resume_enqueues_no_child_twice(
    stack: SweepStack, worker: AllocatorHarness, crash_point: str
) -> None:
    # Given a real run whose process dies around its second target (c-drafted)
    store, enqueuer = stack.runtime.store, stack.runtime.enqueuer
    if crash_point == "before-second-checkpoint":
        # Save 1 takes the lease, save 2 follows target 1, save 3 would follow target 2.
        stack.runtime.store = CrashingStore(store, die_at_save=3)
    else:
        stack.runtime.enqueuer = CrashingEnqueuer(
            enqueuer, die_at_call=2, after_send=crash_point == "after-second-enqueue"
        )
    request = payload(dry_run=False, run_id="rs-crash-1")
    with pytest.raises(ProcessDied):
        stack.invoke(request, request_id="dead-invocation")
    stack.runtime.store, stack.runtime.enqueuer = store, enqueuer

    # When the run is resumed at once, the dead invocation still holds the lease
    with pytest.raises(RunInProgressError, match="already in progress"):
        stack.invoke(request)
    # And once its lease has run out (the dead invocation's Lambda deadline), it resumes
    stack.wall.now += FUNCTION_TIMEOUT_S + 1
    result = stack.invoke(request)

    # Then the run finished with every child processed once and counted once
    assert result["done"] is True
    stored = stack.checkpoint("rs-crash-1")
    assert stored["processed"] == list(CHILDREN)
    assert result["counts"]["enqueued"] == 3
    # And every surplus child is on the queue exactly once (a re-sent release carries the same
    # deduplication id, which the FIFO queue drops)
    messages = stack.queued()
    assert groups_of(messages) == Counter(dict.fromkeys(EXPECTED, 1))
    # And once applied, the children are at their targets
    drain(worker, messages)
    after = totals_of(stack.sim)
    assert {child: after[child] for child in EXPECTED} == {c: t for c, (t, _) in EXPECTED.items()}


class HookedGateway:
    """The real gateway, calling ``hook`` once, just before the N-th status read."""

    def __init__(self, inner: Any, at_status_read: int, hook: Any) -> None:
        self._inner = inner
        self._at = at_status_read
        self._hook = hook
        self.status_reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def read_status(self, workspace_id: str) -> str:
        self.status_reads += 1
        if self.status_reads == self._at:
            self._hook()
        status: str = self._inner.read_status(workspace_id)
        return status


def test_sweep_second_invocation_of_a_running_run_is_refused(stack: SweepStack) -> None:
    # Given a real run whose first invocation is between targets when a second one starts
    request = payload(dry_run=False, run_id="rs-concurrent-1")
    refusals: list[BaseException] = []

    def second_invocation() -> None:
        try:
            stack.invoke(request, request_id="second")
        except RunInProgressError as exc:
            refusals.append(exc)

    stack.runtime.gateway = HookedGateway(stack.runtime.gateway, 2, second_invocation)

    # When the first invocation runs
    result = stack.invoke(request, request_id="first")

    # Then the second was refused, naming the run, and left no trace
    assert len(refusals) == 1
    assert str(refusals[0]) == "run 'rs-concurrent-1' already in progress in another invocation"
    # And the first finished the whole run alone: each surplus child enqueued once
    assert result["done"] is True
    assert list(items_by_child([result])) == list(CHILDREN)
    assert groups_of(stack.queued()) == Counter(dict.fromkeys(EXPECTED, 1))


def test_sweep_invocation_that_lost_its_checkpoint_to_another_stops(stack: SweepStack) -> None:
    # Given a first invocation that is still working after its lease ran out (a hang), and a
    # second invocation that takes the run over meanwhile and sweeps one child
    request = payload(dry_run=False, run_id="rs-takeover-1")

    def take_over() -> None:
        stack.wall.now += FUNCTION_TIMEOUT_S + 1
        taken = stack.invoke({**request, "batch_size": 1}, request_id="second")
        assert [item["workspace_id"] for item in taken["items"]] == ["c-drafted"]

    stack.runtime.gateway = HookedGateway(stack.runtime.gateway, 2, take_over)

    # When the first invocation writes its next checkpoint (conditional on the ETag it read)
    with pytest.raises(RunInProgressError, match="already in progress"):
        stack.invoke(request, request_id="first")

    # Then the stored checkpoint is the second invocation's; the two never interleaved
    stored = stack.checkpoint("rs-takeover-1")
    assert stored["processed"] == ["c-big", "c-drafted"]
    # And the child both worked on is on the queue once (same deduplication id)
    assert groups_of(stack.queued()) == Counter({"c-big": 1, "c-drafted": 1})


# ---------------------------------------------------------------- errors and abort


def _fail_status_reads(sim: SimulatorServer, rules: list[tuple[int, str]]) -> None:
    """Make each (status, child) status read fail through every client retry, in order."""
    sim.faults(
        fail_next=[
            {"status": status, "count": CLIENT_RETRIES + 1, "op": "status", "workspace_id": child}
            for status, child in rules
        ]
    )


def test_sweep_aborts_after_n_consecutive_unexpected_errors(stack: SweepStack) -> None:
    # Given a gateway answering 500 to the first three children's reads, through every retry
    _fail_status_reads(stack.sim, [(500, "c-big"), (500, "c-drafted"), (500, "c-lean")])

    # When a real run allowing three consecutive unexpected errors goes through
    result = stack.invoke(payload(dry_run=False, run_id="rs-abort-1", max_consecutive_errors=3))

    # Then it aborted after the third, saying why, and kept its checkpoint
    assert (result["aborted"], result["done"]) == (True, False)
    assert result["abort_reason"] == "3 consecutive unexpected errors (last: upstream500)"
    assert (result["processed"], result["remaining"]) == (3, 2)
    assert result["counts"]["unexpected_errors"] == 3
    assert [i["outcome"] for i in result["items"]] == ["unexpected-error"] * 3
    assert stack.checkpoint("rs-abort-1")["aborted"] == result["abort_reason"]
    # And the client retried each read (sleeping through the injected sleeper, never for real)
    assert stack.client_sleeps.calls == [0.5, 1.0, 2.0] * 3
    # And nothing after the abort was touched or enqueued
    assert {c["workspace_id"] for c in api_calls(stack.sim, "status")} == {
        "c-big",
        "c-drafted",
        "c-lean",
    }
    assert stack.queued() == []

    # When the operator resumes the aborted run
    resumed = stack.invoke(payload(dry_run=False, run_id="rs-abort-1", max_consecutive_errors=3))
    # Then it finishes the rest, and its final counts still show the unexpected errors
    assert (resumed["done"], resumed["aborted"]) == (True, False)
    assert [i["workspace_id"] for i in resumed["items"]] == [ZOMBIE, "c-small"]
    assert resumed["counts"]["unexpected_errors"] == 3


def test_sweep_does_not_abort_on_expected_errors_and_they_reset_the_streak(
    stack: SweepStack,
) -> None:
    # Given 429s through every retry (rate limited: an expected outcome) on three children in a row
    _fail_status_reads(stack.sim, [(429, "c-big"), (429, "c-drafted"), (429, "c-lean")])

    # When a run allowing only two consecutive unexpected errors goes through
    result = stack.invoke(payload(dry_run=True, max_consecutive_errors=2))

    # Then the expected errors never aborted it
    assert (result["done"], result["aborted"]) == (True, False)
    assert [i["error_code"] for i in result["items"][:3]] == ["rateLimited"] * 3
    assert result["counts"]["expected_errors"] == 3
    assert result["counts"]["unexpected_errors"] == 0
    assert result["counts"]["would_release"] == 1  # c-small

    # Given unexpected, expected, unexpected in a row on a new run
    _fail_status_reads(stack.sim, [(500, "c-big"), (429, "c-drafted"), (500, "c-lean")])

    # When it goes through with the same threshold of two
    mixed = stack.invoke(payload(dry_run=True, max_consecutive_errors=2))

    # Then the expected one in the middle reset the streak: no abort
    assert (mixed["done"], mixed["aborted"]) == (True, False)
    assert [i["outcome"] for i in mixed["items"][:3]] == [
        "unexpected-error",
        "expected-error",
        "unexpected-error",
    ]
    assert mixed["counts"]["unexpected_errors"] == 2


# ---------------------------------------------------------------- refusals


def test_sweep_real_run_refused_while_kill_switch_off_unless_allowed(
    local_resources: LocalResources, sim: SimulatorServer
) -> None:
    # Given the kill switch off
    _seed_fleet(sim)
    stack = make_stack(local_resources, sim, {"SERENITY_DYNAMIC_ALLOCATION": "false"})
    sim.clear_calls()

    # When a real run is asked for
    with pytest.raises(SweepRefusedError, match="SERENITY_DYNAMIC_ALLOCATION is off"):
        stack.invoke(payload(dry_run=False))
    # Then it refused before any upstream call, checkpoint or message
    assert sim.calls() == []
    assert stack.checkpoint_keys() == []
    assert stack.queued() == []

    # When a dry run is asked for, it runs (it changes nothing)
    assert stack.invoke(payload(dry_run=True))["done"] is True
    # And a real run that explicitly allows it runs too
    allowed = stack.invoke(payload(dry_run=False, allow_when_disabled=True))
    assert allowed["counts"]["enqueued"] == 3


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"limit": -1}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"limit": 2.5}, "limit"),
        ({"rate_limit_ms": -300}, "rate_limit_ms"),
        ({"rate_limit_ms": "fast"}, "rate_limit_ms"),
        ({"max_consecutive_errors": 0}, "max_consecutive_errors"),
        ({"max_consecutive_errors": "5"}, "max_consecutive_errors"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": None}, "batch_size"),
        ({"run_id": "rs/../other"}, "run_id"),
        ({"run_id": ""}, "run_id"),
        ({"floor": {"projects": -1, "prompts": 100}}, "floor.projects"),
        ({"floor": {"projects": 1, "prompts": "many"}}, "floor.prompts"),
        ({"floor": {"projects": 1, "prompts": 100, "weekly": 1}}, "floor.weekly"),
        ({"parent_workspace_ids": []}, "parent_workspace_ids"),
        ({"parent_workspace_ids": MASTER}, "parent_workspace_ids"),
        ({"parent_workspace_ids": [""]}, "parent_workspace_ids.0"),
        ({"workspace_ids": []}, "workspace_ids"),
        ({"dry_run": "false"}, "dry_run"),
        ({"allow_when_disabled": 1}, "allow_when_disabled"),
        ({"dryrun": True}, "dryrun"),
    ],
)
def test_sweep_invalid_payload_field_is_named_and_makes_no_upstream_call(
    stack: SweepStack, fields: dict[str, Any], named: str
) -> None:
    # Given a payload with one bad field
    request = {**payload(dry_run=False), **fields}
    stack.sim.clear_calls()
    # When it is invoked
    with pytest.raises(SweepPayloadError) as raised:
        stack.invoke(request)
    # Then the error names the field
    assert f"{named}: " in str(raised.value)
    # And nothing was called, written or enqueued
    assert stack.sim.calls() == []
    assert stack.checkpoint_keys() == []
    assert stack.queued() == []


def test_sweep_payload_missing_its_parents_is_refused_naming_the_field(stack: SweepStack) -> None:
    stack.sim.clear_calls()
    with pytest.raises(SweepPayloadError, match="parent_workspace_ids: Field required"):
        stack.invoke({"dry_run": True})
    assert stack.sim.calls() == []


@pytest.mark.parametrize("name", ["sweep-dry-run.json", "sweep-real.json", "sweep-resume.json"])
def test_sweep_sample_events_validate_as_payloads(name: str) -> None:
    # Given a sample event shipped for `sam local invoke` / `serenity-allocator invoke`
    event = json.loads((EVENTS_DIR / name).read_text(encoding="utf-8"))
    # When the handler's parser reads it
    request = parse_sweep_request(event)
    # Then it is a valid payload of the kind its name says
    assert request.dry_run is (name == "sweep-dry-run.json")
    assert (request.run_id is not None) is (name == "sweep-resume.json")
    assert request.floor == Totals(projects=1, prompts=100)


# ---------------------------------------------------------------- the state machine loop


@pytest.fixture(scope="module")
def definition() -> dict[str, Any]:
    """The sweep state machine's Definition, read from template.yaml by cfn-lint's loader."""
    value: dict[str, Any] = load_template()["Resources"]["SweepStateMachine"]["Properties"][
        "Definition"
    ]
    return value


def test_state_machine_loops_real_batches_until_done_then_succeeds(
    stack: SweepStack, definition: dict[str, Any]
) -> None:
    # Given an execution input for a run of five children, two per batch
    execution_input = {"dry_run": False, "parent_workspace_ids": [MASTER], "batch_size": 2}

    # When the definition runs with the REAL handler as its Task
    execution = run_execution(definition, execution_input, stack.invoke)

    # Then it went invoke -> wait -> invoke -> wait -> invoke -> Succeed
    assert len(execution.payloads) == 3 and execution.waits == 2
    assert (execution.status, execution.end_state) == ("SUCCEEDED", "Finished")
    # And every batch after the first resumed the run the first one started
    run_id = stack.results[0]["run_id"]
    assert execution.payloads[0] == execution_input
    assert execution.payloads[1:] == [{**execution_input, "run_id": run_id}] * 2
    assert [r["processed"] for r in stack.results] == [2, 4, 5]
    assert stack.results[-1]["counts"]["enqueued"] == 3


def test_state_machine_fails_when_the_real_run_aborts(
    stack: SweepStack, definition: dict[str, Any]
) -> None:
    # Given a gateway failing the first two children's reads
    _fail_status_reads(stack.sim, [(500, "c-big"), (500, "c-drafted")])
    execution_input = {
        "dry_run": True,
        "parent_workspace_ids": [MASTER],
        "batch_size": 25,
        "max_consecutive_errors": 2,
    }
    # When the definition runs with the real handler
    execution = run_execution(definition, execution_input, stack.invoke)
    # Then the first batch aborted and the execution failed there, without waiting
    assert stack.results[-1]["aborted"] is True
    assert (execution.status, execution.end_state, execution.error) == (
        "FAILED",
        "Aborted",
        "SweepAborted",
    )
    assert len(execution.payloads) == 1 and execution.waits == 0


def test_state_machine_fails_when_the_run_finishes_with_unexpected_errors(
    stack: SweepStack, definition: dict[str, Any]
) -> None:
    # Given one child whose reads fail (not enough in a row to abort)
    _fail_status_reads(stack.sim, [(500, "c-lean")])
    execution_input = {"dry_run": True, "parent_workspace_ids": [MASTER], "batch_size": 3}
    # When the definition runs with the real handler
    execution = run_execution(definition, execution_input, stack.invoke)
    # Then the run finished, and the execution failed for the unexpected error
    assert stack.results[-1]["done"] is True
    assert (execution.status, execution.end_state) == ("FAILED", "FinishedWithUnexpectedErrors")
    assert execution.waits == 1


# ---------------------------------------------------------------- the operator CLI, --local


def _cli(argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    sweep_cli.configure(parser)
    out, err = io.StringIO(), io.StringIO()
    code = sweep_cli.execute(parser.parse_args(argv), stdout=out, stderr=err, is_tty=False)
    return code, out.getvalue(), err.getvalue()


def test_sweep_cli_local_dry_run_then_real_run_against_the_local_stack(
    local_resources: LocalResources,
    sim: SimulatorServer,
    worker: AllocatorHarness,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # Given the local stack's environment in this process (what `local up` prints)
    _seed_fleet(sim)
    for name, value in sweep_env(local_resources, sim).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sweep_handler, "_runtime", None)
    common = ["--local", "--parent", MASTER, "--batch-size", "2", "--rate-limit-ms", "0"]

    # When the operator previews with a JSON report
    report = tmp_path / "dry.json"
    code, out, err = _cli([*common, "--dry-run", "--report", str(report)])

    # Then it finished cleanly over three batches, and the report has every child's target
    assert code == 0, err
    assert err.count("batch ") == 3
    assert re.search(r"^status\s+done$", out, re.MULTILINE), out
    document = json.loads(report.read_text(encoding="utf-8"))
    assert (document["status"], document["invocations"], document["dry_run"]) == ("done", 3, True)
    targets = {
        item["workspace_id"]: (item["target"]["projects"], item["target"]["prompts"])
        for item in document["items"]
        if item["outcome"] == "would-release"
    }
    assert targets == {child: target for child, (target, _) in EXPECTED.items()}
    assert api_calls(sim, "transfer") == []

    # When the operator runs it for real, with a CSV report
    csv_report = tmp_path / "real.csv"
    code, out, err = _cli([*common, "--report", str(csv_report)])

    # Then the surplus children are enqueued; drained by the worker they land on the targets
    assert code == 0, err
    rows = csv_report.read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + len(CHILDREN)
    messages = receive_all(worker)
    assert groups_of(messages) == Counter(dict.fromkeys(EXPECTED, 1))
    drain(worker, messages)
    after = totals_of(sim)
    assert {child: after[child] for child in EXPECTED} == targets


def receive_all(worker: AllocatorHarness) -> list[MessageTypeDef]:
    received: list[MessageTypeDef] = []
    while batch := worker.receive():
        received.extend(batch)
    return received
