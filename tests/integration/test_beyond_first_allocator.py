"""Beyond the first allocator (ADR 0006: unmetered parents, the tight-pool fallback, sibling
reclaim, the pool early warning) over real HTTP: moto FIFO + the simulator.

Each feature runs through the real ``lambda_handler`` with the production runtime built by
:mod:`tests.integration.allocator_harness`: unmetered parents make zero transfers, the
tight-pool fallback saves a request the block-rounded path would reject, sibling reclaim frees
units through the siblings' own message groups and serves the parked ensure, and the pool early
warning fires once per pool per interval (on an injected clock, never a real wait). Units are
conserved throughout: master.total + sum(children.total) is constant per family
(semrush-user-manager.md, "Resource semantics").
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from serenity_allocator.adapters.eventbridge_outcomes import POOL_LOW_DETAIL_TYPE
from serenity_allocator.domain.container_memory import PoolWatch
from serenity_allocator.producer import is_metered_quota
from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import SimulatorControlError, SimulatorServer
from tests.conftest import OutcomeCapture
from tests.fakes import POOL_EXHAUSTED_BODY
from tests.integration.allocator_harness import (
    AllocatorHarness,
    Invocation,
    allocator_harness,
    api_calls,
    emf_blobs,
    metric_values,
    totals_of,
    transfer_bodies,
    workspace,
)

MASTER = "ws-b1-master"
METERED_MASTER = "ws-b1-metered-master"
UNMETERED_MASTER = "ws-b1-unmetered-master"
CHILD = "ws-b1-child"
OTHER_CHILD = "ws-b1-other-child"
METERED_CHILD = "ws-b1-metered-child"
IDLE_SIBLING = "ws-b1-idle"
SMALL_IDLE_SIBLING = "ws-b1-idle-small"
DRAFTING_SIBLING = "ws-b1-drafting"
THIN_SIBLING = "ws-b1-thin"
NEED_230 = {"projects": 0, "prompts": 230}
FLOOR = (1, 100)
"""The release floor: one block per dimension (BLOCK_PROJECTS=1, BLOCK_PROMPTS=100)."""
RECLAIM_ON = {"SERENITY_SIBLING_RECLAIM": "true"}


class FakeClock:
    """A monotonic clock the test advances by hand."""

    def __init__(self, start: float = 10_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward without waiting."""
        self.now += seconds


# ---------------------------------------------------------------- helpers


def _master(
    workspace_id: str = MASTER,
    *,
    prompts: tuple[int, int],
    projects: tuple[int, int] = (0, 100),
    limits_enabled: bool | None = None,
) -> dict[str, Any]:
    entry = workspace(workspace_id, projects=projects, prompts=prompts)
    if limits_enabled is not None:
        entry["limits_enabled"] = limits_enabled
    return entry


def _child(
    workspace_id: str,
    *,
    prompts: tuple[int, int],
    parent_id: str = MASTER,
    drafted: int = 0,
    projects: tuple[int, int] = (1, 1),
) -> dict[str, Any]:
    return workspace(
        workspace_id,
        parent_id=parent_id,
        projects=projects,
        prompts=prompts,
        prompts_drafted=drafted,
    )


def _family_units(sim: SimulatorServer, master_id: str = MASTER) -> tuple[int, int]:
    """master.total + sum(children.total), per dimension: constant across transfers."""
    family = [w for w in sim.dump()["workspaces"] if master_id in (w["id"], w.get("parent_id"))]
    return (
        sum(w["ai"]["projects"]["total"] for w in family),
        sum(w["ai"]["prompts"]["total"] for w in family),
    )


def _assert_never_below_used_drafted_or_floor(sim: SimulatorServer, *ids: str) -> None:
    by_id = {w["id"]: w["ai"] for w in sim.dump()["workspaces"]}
    for workspace_id in ids:
        for dim, floor in zip(("projects", "prompts"), FLOOR, strict=True):
            usage = by_id[workspace_id][dim]
            assert usage["total"] >= max(floor, usage["used"] + usage["drafted"]), workspace_id


def _emf(capsys: pytest.CaptureFixture[str], name: str) -> list[tuple[float, str | None]]:
    """``(value, own dimension value)`` of every value of ``name`` printed since the last read."""
    own = {"SiblingReclaim": "Result", "TightPoolFallback": "Result", "HeadroomCheck": "Outcome"}
    values = metric_values(emf_blobs(capsys.readouterr().out), name)
    return [(value, dims.get(own.get(name, ""))) for value, dims in values]


def _pool_low_events(capture: OutcomeCapture) -> list[dict[str, Any]]:
    return [e["detail"] for e in capture.events() if e["detail-type"] == POOL_LOW_DETAIL_TYPE]


def _bodies(messages: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in messages]


@pytest.fixture
def reclaim_worker(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> Iterator[AllocatorHarness]:
    """The worker with sibling reclaim on (QUEUE_URL is set by the harness)."""
    with allocator_harness(local_resources, sim, RECLAIM_ON) as harness:
        yield harness


# ---------------------------------------------------------------- 1. unmetered parents


def test_worker_unmetered_parent_skips_the_top_up_and_caches_the_family_read(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a parent whose ai product has limits_enabled false, and two children at 0 prompts
    sim.seed(
        [
            _master(prompts=(0, 10_000), limits_enabled=False),
            _child(CHILD, prompts=(0, 0)),
            _child(OTHER_CHILD, prompts=(0, 0)),
        ]
    )
    units_before = _family_units(sim)
    with allocator_harness(local_resources, sim) as worker:
        first = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 250})

        # When an ensure that needs a top-up is handled
        first_invocation = worker.invoke()

        # Then it completes as unmetered after one family read and no transfer
        assert first_invocation.failed == []
        assert [(c["op"], c["workspace_id"]) for c in api_calls(sim)] == [
            ("read_resources", CHILD),
            ("family", MASTER),
        ]
        assert _emf(capsys, "HeadroomCheck") == [(1.0, "unmetered")]

        # When another child of the same parent asks within the cache TTL
        sim.clear_calls()
        second = worker.producer.enqueue_ensure(
            OTHER_CHILD, MASTER, {"projects": 0, "prompts": 250}
        )
        worker.invoke()

    # Then the cached answer served it: one read of the child, no second family call
    assert [(c["op"], c["workspace_id"]) for c in api_calls(sim)] == [
        ("read_resources", OTHER_CHILD)
    ]
    assert _emf(capsys, "HeadroomCheck") == [(1.0, "unmetered")]
    outcomes = {o["request_id"]: o for o in outcome_capture.outcomes()}
    assert {rid: o["status"] for rid, o in outcomes.items()} == {
        first: "unmetered",
        second: "unmetered",
    }
    assert outcomes[first]["totals_before"] == outcomes[first]["totals_after"]
    # and zero transfers overall: nothing moved
    assert transfer_bodies(sim) == []
    assert totals_of(sim)[CHILD] == totals_of(sim)[OTHER_CHILD] == (1, 0)
    assert _family_units(sim) == units_before


def test_worker_unmetered_child_can_exceed_zero_while_a_metered_one_gets_the_disguised_405(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a child at 0 prompts under an unmetered parent, and one under a metered parent
    sim.seed(
        [
            _master(prompts=(0, 10_000), limits_enabled=False),
            _master(METERED_MASTER, prompts=(0, 10_000)),
            _child(CHILD, prompts=(0, 0)),
            _child(METERED_CHILD, prompts=(0, 0), parent_id=METERED_MASTER),
        ]
    )
    with allocator_harness(local_resources, sim) as worker:
        worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 250})
        worker.invoke()
    [outcome] = outcome_capture.outcomes()
    assert outcome["status"] == "unmetered"

    # When the services write 250 prompts to each (a Project Engine write, used above total)
    accepted = sim.usage({"id": CHILD, "prompts": {"used": 250}})
    with pytest.raises(SimulatorControlError) as refused:
        sim.usage({"id": METERED_CHILD, "prompts": {"used": 250}})

    # Then the unmetered child exceeds its zero total, and the metered one is refused with the
    # disguised 405 that the producer's classifier recognises as a quota rejection
    assert accepted["ai"]["prompts"] == {"used": 250, "drafted": 0, "total": 0}
    assert refused.value.status == 405
    assert is_metered_quota(refused.value.status, refused.value.text)
    assert not is_metered_quota(405, json.dumps({"message": "method not allowed"}))
    assert transfer_bodies(sim) == []


# ---------------------------------------------------------------- 2. tight-pool fallback


def test_worker_tight_pool_fallback_tops_up_to_the_exact_required_total(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given 1000 free prompts at the pool's read, drained by another child before the sized
    # top-up of a child using 150 of 200 that needs 230 more lands (its first transfer meets
    # the pool-exhausted 422), with the exact 180 it lacks still free
    sim.seed([_master(prompts=(0, 1_000)), _child(CHILD, prompts=(150, 200))])
    sim.faults(fail_next=[_drained_since_the_read()])
    units_before = _family_units(sim)
    with allocator_harness(local_resources, sim) as worker:  # fallback ON by default
        worker.producer.enqueue_ensure(CHILD, MASTER, NEED_230)

        # When the worker handles the ensure
        invocation = worker.invoke()

    # Then the sized transfer (380 plus four blocks: 780, with the used project refilled
    # ahead) was refused and the exact one (380, the project as it was) went through
    assert invocation.failed == []
    assert [(status, body["prompts"]) for _, status, body in transfer_bodies(sim)] == [
        (422, 780),
        (200, 380),
    ]
    [outcome] = outcome_capture.outcomes()
    assert outcome["status"] == "topped-up"
    assert outcome["totals_after"] == {"projects": 1, "prompts": 380}
    assert totals_of(sim)[CHILD] == (1, 380)
    assert totals_of(sim)[MASTER] == (100, 820)
    assert _emf(capsys, "TightPoolFallback") == [(1.0, "saved")]
    assert _family_units(sim) == units_before


def test_worker_tight_pool_fallback_off_rejects_the_same_request(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the same pool drained between its read and the sized top-up, with the fallback
    # switched off
    sim.seed([_master(prompts=(0, 1_000)), _child(CHILD, prompts=(150, 200))])
    sim.faults(fail_next=[_drained_since_the_read()])
    units_before = _family_units(sim)
    overrides = {"SERENITY_TIGHT_POOL_FALLBACK": "false"}
    with allocator_harness(local_resources, sim, overrides) as worker:
        worker.producer.enqueue_ensure(CHILD, MASTER, NEED_230)

        # When the worker handles the ensure
        invocation = worker.invoke()

    # Then only the sized transfer was tried (380 plus four blocks: 780), and the request is
    # rejected, completed
    assert invocation.failed == []
    assert [(status, body["prompts"]) for _, status, body in transfer_bodies(sim)] == [(422, 780)]
    [outcome] = outcome_capture.outcomes()
    assert (outcome["status"], outcome["error_code"]) == ("rejected", "orgPoolExhausted")
    assert totals_of(sim)[CHILD] == (1, 200)
    assert _emf(capsys, "TightPoolFallback") == []
    assert _family_units(sim) == units_before


def _drained_since_the_read() -> dict[str, Any]:
    """The child's next transfer meets the pool-exhausted 422 (another child drained it)."""
    return {
        "status": 422,
        "count": 1,
        "op": "transfer",
        "workspace_id": CHILD,
        "body": POOL_EXHAUSTED_BODY,
    }


# ---------------------------------------------------------------- 3. sibling reclaim


def test_worker_sibling_reclaim_releases_eligible_siblings_then_serves_the_parked_ensure(
    reclaim_worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker = reclaim_worker
    # Given an empty pool, a child that needs 230 more prompts, and four siblings: two idle
    # with surplus (900 and 200 above the floor), one with pending drafts, one with less
    # than a block to give
    sim.seed(
        [
            _master(prompts=(0, 0)),
            _child(CHILD, prompts=(150, 200)),
            _child(IDLE_SIBLING, prompts=(100, 1000)),
            _child(SMALL_IDLE_SIBLING, prompts=(0, 300)),
            _child(DRAFTING_SIBLING, prompts=(100, 1000), drafted=50),
            _child(THIN_SIBLING, prompts=(150, 240)),
        ]
    )
    units_before = _family_units(sim)
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, NEED_230)

    # When the worker handles the ensure
    parked = worker.invoke()

    # Then it is parked: failed for redelivery, nothing moved, the reclaim counted
    assert parked.failed == parked.message_ids
    assert outcome_capture.outcomes() == []
    assert totals_of(sim)[CHILD] == (1, 200)
    parked_metrics = _emf(capsys, "SiblingReclaim")
    assert sorted(parked_metrics) == [(1.0, "parked"), (2.0, "enqueued")]

    # and the queue holds one reclaim release per eligible sibling, each in its own group
    releases = worker.receive()
    bodies = _bodies(releases)
    assert sorted(b["workspace_id"] for b in bodies) == sorted([IDLE_SIBLING, SMALL_IDLE_SIBLING])
    assert {(b["kind"], b["source"]) for b in bodies} == {("release", "reclaim")}
    assert [m["Attributes"]["MessageGroupId"] for m in releases] == [
        b["workspace_id"] for b in bodies
    ]

    # When the releases are handled through the real handler
    drained = worker.handle(releases)

    # Then each sibling went down to max(floor, used + drafted in blocks), the others untouched
    assert drained.failed == []
    assert totals_of(sim)[IDLE_SIBLING] == (1, 100)
    assert totals_of(sim)[SMALL_IDLE_SIBLING] == (1, 100)
    assert totals_of(sim)[DRAFTING_SIBLING] == (1, 1000)
    assert totals_of(sim)[THIN_SIBLING] == (1, 240)
    released = outcome_capture.outcomes()
    assert {(o["workspace_id"], o["status"], o["source"]) for o in released} == {
        (IDLE_SIBLING, "released", "reclaim"),
        (SMALL_IDLE_SIBLING, "released", "reclaim"),
    }

    # When the parked ensure comes back (its visibility timeout ended)
    worker.redeliver_failed(parked)
    served = worker.invoke()

    # Then it is served from the reclaimed units and says so (380 + 21: the 1100 reclaimed
    # less the 180 it lacks, shared by the five children, leave a level of 184, under four
    # blocks: 184² / 1600 = 21 of headroom; the used project refilled ahead from projects
    # that still have room, to 1 + four blocks = 5)
    assert served.message_ids == parked.message_ids
    assert served.receive_counts() == [2]
    assert served.failed == []
    [outcome] = [o for o in outcome_capture.outcomes() if o["request_id"] == request_id]
    assert outcome["status"] == "topped-up-after-reclaim"
    assert outcome["totals_after"] == {"projects": 5, "prompts": 401}
    assert totals_of(sim)[CHILD] == (5, 401)
    assert _emf(capsys, "SiblingReclaim") == [(1.0, "served")]
    assert _family_units(sim) == units_before
    _assert_never_below_used_drafted_or_floor(
        sim, IDLE_SIBLING, SMALL_IDLE_SIBLING, DRAFTING_SIBLING, THIN_SIBLING
    )
    assert worker.receive() == []


def test_worker_sibling_reclaim_with_nothing_reclaimable_rejects_at_once(
    reclaim_worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker = reclaim_worker
    # Given an empty pool and only siblings that cannot give (pending drafts, under a block)
    sim.seed(
        [
            _master(prompts=(0, 0)),
            _child(CHILD, prompts=(150, 200)),
            _child(DRAFTING_SIBLING, prompts=(100, 1000), drafted=50),
            _child(THIN_SIBLING, prompts=(150, 240)),
        ]
    )
    units_before = _family_units(sim)
    worker.producer.enqueue_ensure(CHILD, MASTER, NEED_230)

    # When the worker handles the ensure
    invocation = worker.invoke()

    # Then there is nothing to wait for: rejected (terminal), no release enqueued
    assert invocation.failed == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["status"], outcome["error_code"]) == ("rejected", "orgPoolExhausted")
    assert _emf(capsys, "SiblingReclaim") == [(1.0, "exhausted")]
    assert worker.receive() == []
    assert _family_units(sim) == units_before


def test_worker_sibling_reclaim_that_frees_nothing_rejects_after_max_parks(
    reclaim_worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker = reclaim_worker
    max_parks = worker.runtime.settings.sibling_reclaim_max_parks
    assert max_parks < worker.resources.max_receive_count  # rejected before the redrive
    # Given an empty pool and an idle sibling whose transfers keep answering "workspace not
    # ready" although its status reads created, so its releases never land
    sim.seed(
        [
            _master(prompts=(0, 0)),
            _child(CHILD, prompts=(150, 200)),
            _child(IDLE_SIBLING, prompts=(100, 1000)),
        ]
    )
    sim.faults(not_ready_next={IDLE_SIBLING: 1000})
    units_before = _family_units(sim)
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, NEED_230)

    # When the queue keeps delivering (the releases fail alongside)
    invocations: list[Invocation] = []
    for _receive in range(max_parks + 1):
        invocation = worker.invoke()
        invocations.append(invocation)
        worker.redeliver_failed(invocation)

    # Then the ensure was parked on each of its first max_parks receives and rejected on the
    # next one: a terminal outcome, once, and the message is gone from the queue
    ensure_outcomes = [o for o in outcome_capture.outcomes() if o["request_id"] == request_id]
    assert [(o["status"], o["error_code"], o["receive_count"]) for o in ensure_outcomes] == [
        ("rejected", "orgPoolExhausted", max_parks + 1)
    ]
    reclaim = Counter(result for _, result in _emf(capsys, "SiblingReclaim"))
    assert (reclaim["parked"], reclaim["exhausted"]) == (max_parks, 1)
    assert worker.runtime.parked == set()  # the container forgot the park
    left = _bodies(worker.receive())
    assert left and {(b["kind"], b["workspace_id"]) for b in left} == {("release", IDLE_SIBLING)}
    assert totals_of(sim)[CHILD] == (1, 200)
    assert totals_of(sim)[IDLE_SIBLING] == (1, 1000)
    assert _family_units(sim) == units_before


# ---------------------------------------------------------------- 4. pool early warning


def test_worker_pool_low_event_fires_once_per_pool_per_interval(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a pool whose free ratio drops from 0.905 under the 0.9 threshold after one top-up
    # (100 used at the master, 1050 total), and five children that each need one
    children = [f"ws-b1-drain-{n}" for n in range(5)]
    sim.seed(
        [
            _master(prompts=(100, 1050)),
            *(_child(child, prompts=(100, 100)) for child in children),
        ]
    )
    overrides = {"POOL_LOW_RATIO": "0.9", "POOL_LOW_INTERVAL_S": "600"}
    with allocator_harness(local_resources, sim, overrides) as worker:
        clock = FakeClock()
        settings = worker.runtime.settings
        worker.runtime.clock = clock
        worker.runtime.pool_watch = PoolWatch(
            clock, threshold=settings.pool_low_ratio, interval_s=settings.pool_low_interval_s
        )

        # When four batches a minute apart each top one child up: the 50 needed plus the tight
        # pool's fair headroom (levels of 180, 166, 152, 139 among five children, under four
        # blocks: 20, 17, 14, 12), so by 70, 67, 64, 62
        for child in children[:4]:
            worker.producer.enqueue_ensure(child, MASTER, {"projects": 0, "prompts": 50})
            assert worker.invoke().failed == []
            clock.advance(60)

        # Then exactly one pool-low event was published, from the first low read (the second
        # batch's), with the free ratio and the time to exhaustion at the measured drain rate
        [first] = _pool_low_events(outcome_capture)
        assert first == {
            "parent_workspace_id": MASTER,
            "dim": "prompts",
            "free": 880,
            "total": 980,
            "free_ratio": 0.898,
            "drain_units_per_hour": 4200.0,  # 70 prompts a minute
            "projected_seconds_to_exhaustion": 754.3,  # 880 free at 70 a minute
        }

        # When the interval has passed since that event and another batch reads the pool
        clock.advance(600)
        worker.producer.enqueue_ensure(children[4], MASTER, {"projects": 0, "prompts": 50})
        worker.invoke()

    # Then a second event is published, with the current numbers
    events = _pool_low_events(outcome_capture)
    assert len(events) == 2
    second = events[1]
    # (950 - 70 - 67 - 64 - 62 = 687 free, 1050 - 263 = 787 in all)
    assert (second["free"], second["total"], second["free_ratio"]) == (687, 787, 0.8729)
    assert second["projected_seconds_to_exhaustion"] is not None
    assert second["projected_seconds_to_exhaustion"] > 0
    assert [o["status"] for o in outcome_capture.outcomes()] == ["topped-up"] * 5


# ---------------------------------------------------------------- 5. all four together


def test_worker_all_features_on_every_request_ends_once_and_units_are_conserved(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given reclaim, fallback, the unmetered check and the early warning all on, a metered
    # family with 180 free prompts, an unmetered family, a zombie child and a malformed message
    tight, reclaims, hot, releasing, idle, zombie = (
        f"ws-b1-mix-{name}" for name in ("tight", "reclaims", "hot", "releasing", "idle", "zombie")
    )
    unmetered_a, unmetered_b = "ws-b1-mix-free-a", "ws-b1-mix-free-b"
    sim.seed(
        [
            _master(prompts=(100, 280)),
            _master(UNMETERED_MASTER, prompts=(0, 1000), limits_enabled=False),
            _child(tight, prompts=(150, 200)),  # +230: lacks all 180 free, sized exact (380)
            _child(reclaims, prompts=(100, 100)),  # +150: needs units freed by reclaim
            # +10, +20: under two blocks left over, no surplus back to the tight pool, and two
            # projects to spare (the projects' refill mark): nothing to refill
            _child(hot, prompts=(100, 300), projects=(1, 3)),
            _child(releasing, prompts=(100, 400)),
            _child(idle, prompts=(0, 500)),
            _child(zombie, prompts=(150, 200)),
            _child(unmetered_a, prompts=(0, 0), parent_id=UNMETERED_MASTER),
            _child(unmetered_b, prompts=(0, 0), parent_id=UNMETERED_MASTER),
        ]
    )
    sim.faults(stuck=[zombie])
    units_before = {m: _family_units(sim, m) for m in (MASTER, UNMETERED_MASTER)}
    overrides = {**RECLAIM_ON, "POOL_LOW_RATIO": "0.5"}
    with allocator_harness(local_resources, sim, overrides) as worker:
        send = worker.producer
        requested = {
            send.enqueue_ensure(tight, MASTER, NEED_230),
            send.enqueue_ensure(reclaims, MASTER, {"projects": 0, "prompts": 150}),
            send.enqueue_ensure(hot, MASTER, {"projects": 0, "prompts": 10}),
            send.enqueue_release(releasing),
            send.enqueue_ensure(zombie, MASTER, NEED_230),
            send.enqueue_ensure(unmetered_a, UNMETERED_MASTER, {"projects": 0, "prompts": 250}),
            send.enqueue_ensure(unmetered_b, UNMETERED_MASTER, {"projects": 0, "prompts": 250}),
            send.enqueue_ensure(hot, MASTER, {"projects": 0, "prompts": 20}),
        }
        malformed = '{"kind": "ensure", "workspace_id": "' + hot + '"'
        worker.send_raw(malformed, group_id=hot, dedup_id="d-b1-malformed")

        # When the queue is drained the way the event source mapping drains it, every failed
        # record coming back at once (no real wait)
        for _round in range(20):
            messages = worker.receive()
            if not messages:
                break
            worker.redeliver_failed(worker.handle(messages))
        else:
            pytest.fail("the queue never drained")
        dead = worker.drain_dlq()

    # Then every request has exactly one terminal outcome (reclaim releases included)
    outcomes = outcome_capture.outcomes()
    per_request = Counter(o["request_id"] for o in outcomes)
    assert set(per_request.values()) == {1}
    assert requested <= set(per_request)
    statuses = {o["workspace_id"]: o["status"] for o in outcomes if o["kind"] == "ensure"}
    assert statuses[tight] == "topped-up"
    assert statuses[reclaims] in ("topped-up", "topped-up-after-reclaim")
    assert statuses[hot] == "hot-path"
    assert statuses[unmetered_a] == statuses[unmetered_b] == "unmetered"
    assert [(o["status"], o["error_code"]) for o in outcomes if o["workspace_id"] == zombie] == [
        ("rejected", "workspaceBusy")
    ]
    # and the DLQ holds exactly what had to end there: the malformed body and the zombie's ensure
    dead_bodies = [m["Body"] for m in dead]
    assert len(dead_bodies) == 2
    assert malformed in dead_bodies
    assert [json.loads(b)["workspace_id"] for b in dead_bodies if b != malformed] == [zombie]
    # and units are conserved per family, no child under its used + drafted or its floor
    assert {m: _family_units(sim, m) for m in units_before} == units_before
    _assert_never_below_used_drafted_or_floor(sim, tight, reclaims, hot, releasing, idle)
    assert len(_pool_low_events(outcome_capture)) <= 1  # one pool, one interval
