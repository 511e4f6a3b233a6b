"""The rightsizing sweep end to end over real HTTP: the Semrush simulator and a moto server.

The Sweep handler runs with the production runtime, ``build_sweep_runtime(SweepSettings
.from_env(env))``: the real Semrush client, the S3 checkpoint store and the SQS producer. Only
time is faked: the sweep's sleep and the client's backoff sleep record instead of waiting, and
the wall clock that dates leases is a hand-moved fake. The releases it enqueues are drained
through the REAL Allocator handler, received and deleted the way the event source mapping does,
so "the children end at the targets the dry run predicted" is checked on the simulator's state.

The pure in-memory cases of the sweep live in tests/unit/application/sweep/test_run_batch.py and
tests/unit/handlers/test_sweep.py; these show the same rules hold on the real wire formats.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

from serenity_allocator.application.sweep.ports import CheckpointStore, SurplusReleaseQueue
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sweep.errors import RunInProgressError, SweepRefusedError
from serenity_allocator.domain.sweep.model import StoredCheckpoint
from serenity_allocator.handlers.sweep import (
    SweepPayloadError,
    parse_sweep_request,
)
from serenity_tools.standins.resources import LocalResources
from tests.infrastructure._template import EVENTS_DIR
from tests.integration.allocator_harness import (
    AllocatorHarness,
    allocator_harness,
    api_calls,
    totals_of,
)
from tests.integration.sweep_stack import (
    CHILDREN,
    CLIENT_RETRIES,
    EXPECTED,
    FUNCTION_TIMEOUT_S,
    LEAN_TOTALS,
    MASTER,
    OTHER_CHILD,
    OTHER_MASTER,
    ZOMBIE,
    ZOMBIE_TOTALS,
    ProcessDied,
    SweepStack,
    drain,
    fail_status_reads,
    groups_of,
    items_by_child,
    make_stack,
    payload,
    seed_fleet,
    seeded_stack,
    totals,
)

if TYPE_CHECKING:
    from serenity_tools.standins.simulator import SimulatorServer

# The handler flushes its metrics decorator even when a batch recorded none; that is fine here.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


@pytest.fixture
def stack(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[SweepStack]:
    """The fleet seeded, the kill switch on."""
    with seeded_stack(local_resources, sim) as built:
        yield built


@pytest.fixture
def worker(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[AllocatorHarness]:
    """The real Allocator worker on the same queue and simulator."""
    with allocator_harness(local_resources, sim) as harness:
        yield harness


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
        "access_denied": 0,
        "expected_errors": 0,
        "unexpected_errors": 0,
        "failed_attempts": 0,
        "tiered": 0,
    }
    # And nothing moved: no transfer reached Semrush, nothing was enqueued
    assert api_calls(stack.sim, "transfer") == []
    assert totals_of(stack.sim)["c-big"] == (10, 1000)
    assert stack.queued() == []
    # And the checkpoint is in S3 where the result says, under the dry runs' own prefix
    key = f"sweep/dry/{result['run_id']}.json"
    assert result["checkpoint"] == f"s3://{stack.resources.bucket}/{key}"
    assert stack.checkpoint(result["run_id"], dry_run=True)["processed"] == list(CHILDREN)


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
    stored = stack.checkpoint(results[0]["run_id"], dry_run=True)
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
    assert groups_of(stack.queued()) == Counter(dict.fromkeys(EXPECTED, 1))  # not the zombie


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

    def __init__(self, inner: SurplusReleaseQueue, die_at_call: int, *, after_send: bool) -> None:
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


def test_sweep_aborts_after_n_consecutive_unexpected_errors(stack: SweepStack) -> None:
    # Given a gateway answering 500 to the first three children's reads, through every retry
    fail_status_reads(stack.sim, [(500, "c-big"), (500, "c-drafted"), (500, "c-lean")])

    # When a real run allowing three consecutive unexpected errors goes through
    result = stack.invoke(payload(dry_run=False, run_id="rs-abort-1", max_consecutive_errors=3))

    # Then it aborted after the third, saying why, and kept its checkpoint; the three failed
    # targets are not done (they have attempts left)
    assert (result["aborted"], result["done"]) == (True, False)
    assert result["abort_reason"] == "3 consecutive failed attempts (last: upstream500)"
    assert (result["processed"], result["remaining"]) == (0, 5)
    assert result["counts"]["failed_attempts"] == 3
    assert [i["outcome"] for i in result["items"]] == ["unexpected-error"] * 3
    assert stack.checkpoint("rs-abort-1")["aborted"] == result["abort_reason"]
    # And the client retried each read SEMRUSH_MAX_RETRIES (2) times, sleeping through the
    # injected sleeper, never for real
    assert stack.client_sleeps.calls == [0.5, 1.0] * 3
    # And nothing after the abort was touched or enqueued
    assert {c["workspace_id"] for c in api_calls(stack.sim, "status")} == {
        "c-big",
        "c-drafted",
        "c-lean",
    }
    assert stack.queued() == []

    # When the operator resumes the aborted run (the upstream has recovered)
    resumed = stack.invoke(payload(dry_run=False, run_id="rs-abort-1", max_consecutive_errors=3))

    # Then the fresh targets go first, the failed ones are retried, and the run is done
    assert (resumed["done"], resumed["aborted"]) == (True, False)
    assert [i["workspace_id"] for i in resumed["items"]] == [
        ZOMBIE,
        "c-small",
        "c-big",
        "c-drafted",
        "c-lean",
    ]
    assert (resumed["counts"]["enqueued"], resumed["counts"]["unexpected_errors"]) == (3, 0)
    assert groups_of(stack.queued()) == Counter(dict.fromkeys(EXPECTED, 1))


def test_sweep_rate_limited_past_the_client_backs_off_honouring_retry_after(
    stack: SweepStack,
) -> None:
    # Given 429s with Retry-After: 4 through every client retry on c-big's first read
    stack.sim.faults(
        fail_next=[
            {
                "status": 429,
                "count": CLIENT_RETRIES + 1,
                "op": "status",
                "workspace_id": "c-big",
                "retry_after": 4,
            }
        ]
    )

    # When a dry run goes through
    result = stack.invoke(payload(dry_run=True))

    # Then the sweep waited the 4 s the upstream asked for, and c-big got its preview
    assert stack.sleeps.calls == [4.0]
    assert items_by_child([result])["c-big"]["outcome"] == "would-release"
    assert (result["done"], result["counts"]["failed_attempts"]) == (True, 0)


def test_sweep_rate_limited_throughout_aborts_and_is_never_done(stack: SweepStack) -> None:
    # Given an upstream that rate limits every status read, for a long while
    stack.sim.faults(fail_next=[{"status": 429, "count": 1_000, "op": "status"}])

    # When a real run with a 5 s backoff budget per target goes through
    result = stack.invoke(payload(dry_run=False, max_consecutive_errors=2, rate_limit_backoff_s=5))

    # Then the rate limiting counted toward the abort once each budget was spent: aborted,
    # not done, nothing marked processed, nothing enqueued
    assert (result["aborted"], result["done"], result["processed"]) == (True, False, 0)
    assert result["abort_reason"] == "2 consecutive failed attempts (last: rateLimited)"
    assert [i["error_code"] for i in result["items"]] == ["rateLimited", "rateLimited"]
    assert stack.sleeps.calls == [1.0, 2.0, 1.0, 2.0]
    assert stack.queued() == []


def test_sweep_expected_errors_never_abort_and_reset_the_streak(stack: SweepStack) -> None:
    # Given unexpected, rate limited (past the client), unexpected in a row
    fail_status_reads(stack.sim, [(500, "c-big"), (429, "c-drafted"), (500, "c-lean")])

    # When a run allowing only two consecutive failed attempts goes through
    mixed = stack.invoke(payload(dry_run=True, max_consecutive_errors=2))

    # Then the backed-off 429 succeeded in the middle and reset the streak: no abort; the
    # two failed targets are left for the next invocation, so the run is not done yet
    assert (mixed["done"], mixed["aborted"]) == (False, False)
    assert [i["outcome"] for i in mixed["items"][:3]] == [
        "unexpected-error",
        "would-release",
        "unexpected-error",
    ]
    assert mixed["counts"]["failed_attempts"] == 2

    # When the next invocation runs / Then it retries the two and the run is done
    again = stack.invoke(payload(dry_run=True, max_consecutive_errors=2, run_id=mixed["run_id"]))
    assert (again["done"], again["counts"]["would_release"]) == (True, 3)


# ---------------------------------------------------------------- refusals


def test_sweep_real_run_refused_while_kill_switch_off_unless_allowed(
    local_resources: LocalResources, sim: SimulatorServer
) -> None:
    # Given the kill switch off
    seed_fleet(sim)
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
