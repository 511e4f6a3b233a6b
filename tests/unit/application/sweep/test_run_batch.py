"""The rightsizing sweep over in-memory collaborators: previews, enqueues, checkpoints, leases."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from serenity_allocator.domain.allocation import plan_release
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sweep.errors import RunInProgressError, SweepRefusedError
from serenity_allocator.domain.sweep.model import (
    StoredCheckpoint,
    SweepItem,
    SweepRequest,
    checkpoint_name,
)
from serenity_allocator.domain.sweep.runs import release_request_id
from tests.fakes import (
    LIST_FAMILY,
    READ_RESOURCES,
    READ_STATUS,
    FakeClock,
    InMemoryCheckpointStore,
    InMemoryGateway,
    RecordingEnqueuer,
    SimulatedCrash,
)
from tests.unit.application.sweep.sweep_rig import (
    BLOCKS,
    FLOOR,
    MASTER,
    OTHER_MASTER,
    POOL,
    RUN,
    WITH_SURPLUS,
    Rig,
    mixed_family,
    outcomes,
    surplus_family,
)

# ==== dry run ===============================================================================


def test_run_sweep_batch_dry_run_makes_no_transfer_and_no_enqueue() -> None:
    # Given a family with surplus on several children
    rig = Rig(mixed_family())

    # When the sweep runs dry
    result = rig.run(dry_run=True)

    # Then nothing changed upstream or in the queue, and every child was reported
    assert rig.gateway.transfers == []
    assert rig.enqueuer.releases == [] and rig.enqueuer.batches == []
    assert result.done and not result.aborted
    assert result.dry_run is True
    assert outcomes(result) == {
        "c1": "would-release",
        "c2": "nothing-to-release",
        "c3": "would-release",
        "c4": "would-release",
        "c5": "skipped-not-created",
    }
    assert result.counts.would_release == 3
    assert result.counts.enqueued == 0


def test_run_sweep_batch_dry_run_reports_exact_targets() -> None:
    # Given the family and what plan_release says for each child
    gateway = mixed_family()
    expected = {
        child: plan_release(gateway.workspaces[child].resources(), FLOOR, BLOCKS)
        for child in ("c1", "c2", "c3", "c4")
    }
    rig = Rig(gateway)

    # When the sweep runs dry
    result = rig.run(dry_run=True)

    # Then each line carries exactly the target a real release would set
    items = {item.workspace_id: item for item in result.items}
    for child, plan in expected.items():
        assert items[child].before == plan.before
        assert items[child].target == plan.target
        assert items[child].units_returned == plan.units_returned
    assert items["c1"].target == Totals(projects=1, prompts=200)
    assert items["c3"].target == Totals(projects=2, prompts=300)
    assert items["c4"].target == Totals(projects=1, prompts=400)


def test_run_sweep_batch_dry_run_records_each_preview_natural_outcome() -> None:
    # Given a family / When the sweep runs dry
    rig = Rig(mixed_family())
    rig.run(dry_run=True)

    # Then every previewed child is visible (the zombie is not): dry-run where a real release
    # would release, its natural outcome where it would not (c2 sits at the floor)
    assert rig.observer.args_of("release_finished") == [
        ("dry-run",),
        ("nothing-to-release",),
        ("dry-run",),
        ("dry-run",),
    ]


def test_run_sweep_batch_real_run_records_no_dry_run_outcome() -> None:
    # Given a family / When the sweep runs for real
    rig = Rig(mixed_family())
    rig.run(dry_run=False)

    # Then the previews are not reported as releases: the worker reports what it applies
    assert rig.observer.args_of("release_finished") == []


# ==== real run ==============================================================================


def test_run_sweep_batch_real_run_enqueues_one_release_per_child_with_surplus() -> None:
    # Given a family with surplus on c1, c3, c4 only
    rig = Rig(mixed_family())

    # When the sweep runs for real
    result = rig.run(dry_run=False)

    # Then exactly one release per child with surplus, from the sweep, with run id and floor
    assert [r.workspace_id for r in rig.enqueuer.releases] == WITH_SURPLUS
    for release in rig.enqueuer.releases:
        assert release.source == "sweep"
        assert release.run_id == RUN
        assert release.floor == FLOOR
        assert release.request_id == release_request_id(RUN, release.workspace_id)
    # ... the sweep itself never transferred
    assert rig.gateway.transfers == []
    assert result.counts.enqueued == 3
    assert result.counts.nothing_to_release == 1
    assert result.counts.skipped_not_created == 1
    items = {item.workspace_id: item for item in result.items}
    assert items["c1"].outcome == "enqueued"
    assert items["c1"].request_id == f"{RUN}.c1"
    assert items["c2"].request_id is None


def test_run_sweep_batch_real_run_passes_the_requested_floor() -> None:
    # Given a floor above one block
    rig = Rig(mixed_family())

    # When the sweep runs for real with it
    rig.run(dry_run=False, floor={"projects": 1, "prompts": 500})

    # Then the releases carry it (c3's 300 prompts no longer lower, its projects still do)
    assert {r.workspace_id: r.floor for r in rig.enqueuer.releases} == {
        "c1": Totals(projects=1, prompts=500),
        "c3": Totals(projects=1, prompts=500),
        "c4": Totals(projects=1, prompts=500),
    }


def test_run_sweep_batch_real_run_enqueues_nothing_for_requires_decommission() -> None:
    # Given a child that uses nothing, swept with a zero floor: its target would be 0
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=POOL)
    gateway.add_child("idle", MASTER, total=Totals(projects=2, prompts=300))
    rig = Rig(gateway)

    # When the sweep runs for real
    result = rig.run(dry_run=False, floor={"projects": 0, "prompts": 0})

    # Then it is reported as requiring decommission and no release is enqueued
    assert outcomes(result) == {"idle": "requires-decommission"}
    assert result.counts.requires_decommission == 1
    assert rig.enqueuer.releases == []


def test_run_sweep_batch_targets_direct_children_of_every_listed_parent() -> None:
    # Given two pools, one with a grandchild
    gateway = surplus_family(2)
    gateway.add_master(OTHER_MASTER, total=POOL)
    gateway.add_child("d1", OTHER_MASTER, total=Totals(projects=1, prompts=900))
    gateway.add_child("grandchild", "k1", total=Totals(projects=1, prompts=900))
    rig = Rig(gateway)

    # When both pools are swept
    result = rig.run(dry_run=True, parent_workspace_ids=[MASTER, OTHER_MASTER])

    # Then the targets are the direct children of each, parents and grandchildren excluded
    assert [(i.workspace_id, i.parent_workspace_id) for i in result.items] == [
        ("k1", MASTER),
        ("k2", MASTER),
        ("d1", OTHER_MASTER),
    ]
    assert result.total == 3


# ==== allow-list and limit ==================================================================


def test_run_sweep_batch_workspace_ids_narrows_and_reports_not_a_child() -> None:
    # Given a family, an allow-list of one real child and one stranger
    rig = Rig(mixed_family())

    # When the sweep runs with the allow-list
    result = rig.run(dry_run=False, workspace_ids=["c4", "stranger"])

    # Then only c4 is swept, the stranger is reported and never called upstream
    assert outcomes(result) == {"c4": "enqueued", "stranger": "not-a-child"}
    assert result.counts.not_a_child == 1
    assert [r.workspace_id for r in rig.enqueuer.releases] == ["c4"]
    touched = {ws for op, ws in rig.gateway.calls if op != LIST_FAMILY}
    assert touched == {"c4"}


def test_run_sweep_batch_limit_bounds_the_run() -> None:
    # Given five children with surplus
    rig = Rig(surplus_family(5))

    # When the run is limited to two
    result = rig.run(dry_run=False, limit=2)

    # Then the run is two targets long and done after them
    assert result.total == 2
    assert result.done and result.remaining == 0
    assert [r.workspace_id for r in rig.enqueuer.releases] == ["k1", "k2"]


def test_run_sweep_batch_rate_limit_pauses_between_targets_only() -> None:
    # Given three targets and a 300 ms rate limit
    rig = Rig(surplus_family(3))

    # When the sweep runs
    rig.run(dry_run=True, rate_limit_ms=300)

    # Then it paused between targets, not before the first
    assert rig.clock.sleeps == [0.3, 0.3]


# ==== batches and resume ====================================================================


def test_run_sweep_batch_batch_size_and_resume_cover_every_child_once() -> None:
    # Given five children with surplus and a batch size of two
    rig = Rig(surplus_family(5))
    results = []

    # When the same run is invoked until done, each time by a new invocation
    for attempt in range(1, 10):
        result = rig.run(dry_run=False, batch_size=2, invocation_id=f"inv-{attempt}")
        results.append(result)
        if result.done:
            break

    # Then three invocations covered every child exactly once, in order
    assert [(r.processed, r.remaining, r.done) for r in results] == [
        (2, 3, False),
        (4, 1, False),
        (5, 0, True),
    ]
    assert [[i.workspace_id for i in r.items] for r in results] == [
        ["k1", "k2"],
        ["k3", "k4"],
        ["k5"],
    ]
    assert rig.enqueuer.enqueued_per_child() == {f"k{i}": 1 for i in range(1, 6)}
    assert results[-1].counts.enqueued == 5
    # ... and each invocation re-read the family before acting (a checkpoint is not trusted)
    assert rig.gateway.calls_of(LIST_FAMILY) == [MASTER, MASTER, MASTER]


def test_run_sweep_batch_finished_run_releases_its_lease() -> None:
    # Given a finished invocation
    rig = Rig(surplus_family(2))
    rig.run(dry_run=True, batch_size=1)

    # When another invocation resumes right away (no lease expiry)
    result = rig.run(dry_run=True, invocation_id="inv-2")

    # Then it is accepted: the first let go of the run when it stopped
    assert result.done
    assert rig.store.body(checkpoint_name(RUN, dry_run=True))["lease_owner"] is None


def _assert_each_child_enqueued_under_one_id(enqueuer: RecordingEnqueuer, children: int) -> None:
    ids_per_child: dict[str, set[str]] = {}
    for release in enqueuer.releases:
        ids_per_child.setdefault(release.workspace_id, set()).add(release.request_id)
    assert set(ids_per_child) == {f"k{i}" for i in range(1, children + 1)}
    # One deterministic id per child: the FIFO queue deduplicates a re-enqueued target.
    assert all(len(ids) == 1 for ids in ids_per_child.values())
    distinct_ids = {r.request_id for r in enqueuer.releases}
    assert len(distinct_ids) == len(ids_per_child)


def test_run_sweep_batch_crash_after_enqueue_then_resume_enqueues_no_child_twice() -> None:
    # Given an invocation that dies right after enqueueing the third child's release
    rig = Rig(surplus_family(5), enqueuer=RecordingEnqueuer(crash_after=2))
    with pytest.raises(SimulatedCrash):
        rig.run(dry_run=False)
    assert rig.store.body(RUN)["processed"] == ["k1", "k2"]

    # When the run is resumed once the crashed invocation's lease has expired
    rig.expire_lease()
    result = rig.run(dry_run=False, invocation_id="inv-2")

    # Then every child is covered; only the one in flight was seen twice, under the same id
    assert result.done
    assert [i.workspace_id for i in result.items] == ["k3", "k4", "k5"]
    assert rig.enqueuer.enqueued_per_child() == {"k1": 1, "k2": 1, "k3": 2, "k4": 1, "k5": 1}
    _assert_each_child_enqueued_under_one_id(rig.enqueuer, 5)
    # ... and the counts do not count the in-flight target twice
    assert result.counts.enqueued == 5


def test_run_sweep_batch_crash_before_checkpoint_write_then_resume_no_child_twice() -> None:
    # Given a store that dies on the write after the third target (saves: open, parent
    # claim, k1, k2)
    rig = Rig(surplus_family(5), store=InMemoryCheckpointStore(fail_after_saves=4))
    with pytest.raises(SimulatedCrash):
        rig.run(dry_run=False)

    # When resumed after the lease expired
    rig.expire_lease()
    result = rig.run(dry_run=False, invocation_id="inv-2")

    # Then the in-flight target (k3) is re-previewed and re-enqueued under the same id only
    assert result.done
    assert rig.enqueuer.enqueued_per_child() == {"k1": 1, "k2": 1, "k3": 2, "k4": 1, "k5": 1}
    _assert_each_child_enqueued_under_one_id(rig.enqueuer, 5)
    assert result.counts.enqueued == 5


def test_run_sweep_batch_crash_between_targets_then_resume_processes_each_child_once() -> None:
    # Given an invocation that dies in the pause between the second and third target
    pauses: list[float] = []

    def dying_sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 2:
            raise SimulatedCrash("killed between targets")

    rig = Rig(surplus_family(5))
    with pytest.raises(SimulatedCrash):
        rig.run(dry_run=False, rate_limit_ms=100, sleep=dying_sleep)

    # When resumed after the lease expired
    rig.expire_lease()
    result = rig.run(dry_run=False, invocation_id="inv-2")

    # Then nothing was in flight, so each child was enqueued exactly once
    assert result.done
    assert rig.enqueuer.enqueued_per_child() == {f"k{i}": 1 for i in range(1, 6)}


# ==== concurrency ===========================================================================


def test_run_sweep_batch_concurrent_invocation_of_same_run_refused() -> None:
    # Given invocation A working on the run, and invocation B started while A is mid-batch
    rig = Rig(surplus_family(3))
    refusals: list[Exception] = []
    writes_before_b: list[int] = []

    def start_b_during_a(item: SweepItem) -> None:
        if item.workspace_id != "k1":
            return
        writes_before_b.append(len(rig.store.saves))
        with pytest.raises(RunInProgressError) as refused:
            rig.run(dry_run=False, invocation_id="inv-B")
        refusals.append(refused.value)

    # When A runs
    result = rig.run(dry_run=False, invocation_id="inv-A", on_item=start_b_during_a)

    # Then B was refused without writing anything, and A finished the run alone
    assert len(refusals) == 1
    assert "already in progress" in str(refusals[0])
    assert rig.store.conflicts == 0
    assert result.done
    assert rig.enqueuer.enqueued_per_child() == {"k1": 1, "k2": 1, "k3": 1}


def test_run_sweep_batch_accepted_after_the_lease_expires() -> None:
    # Given an invocation that crashed holding the run's lease
    rig = Rig(surplus_family(3), enqueuer=RecordingEnqueuer(crash_after=0))
    with pytest.raises(SimulatedCrash):
        rig.run(dry_run=False, invocation_id="inv-A", budget_s=600)
    lease_until = rig.store.body(RUN)["lease_until"]
    assert rig.store.body(RUN)["lease_owner"] == "inv-A"

    # When B tries before and after the lease's end
    with pytest.raises(RunInProgressError):
        rig.run(dry_run=False, invocation_id="inv-B")
    rig.wall.now = lease_until + 0.001
    result = rig.run(dry_run=False, invocation_id="inv-B")

    # Then it is refused while the lease is held and accepted once it has expired
    assert result.done
    assert [i.workspace_id for i in result.items] == ["k1", "k2", "k3"]


def test_run_sweep_batch_stale_etag_write_refused() -> None:
    # Given invocation A, and another writer that updates the checkpoint behind A's back
    rig = Rig(surplus_family(3))

    def foreign_write(item: SweepItem) -> None:
        if item.workspace_id == "k1":
            body = rig.store.body(RUN)
            body["lease_owner"] = "inv-other"
            rig.store.save(RUN, body, expected_etag=rig.store.etag(RUN))

    # When A tries to write its checkpoint after the first target
    with pytest.raises(RunInProgressError):
        rig.run(dry_run=False, invocation_id="inv-A", on_item=foreign_write)

    # Then A's stale write lost and the other writer's checkpoint stands; A went no further
    assert rig.store.conflicts == 1
    assert rig.store.body(RUN)["lease_owner"] == "inv-other"
    assert rig.store.body(RUN)["processed"] == []
    assert [r.workspace_id for r in rig.enqueuer.releases] == ["k1"]


class _StaleReadStore(InMemoryCheckpointStore):
    """Reads never see an existing checkpoint (two invocations read before either wrote)."""

    def load(self, run_id: str) -> StoredCheckpoint | None:
        return None


def test_run_sweep_batch_second_creator_of_a_new_run_refused() -> None:
    # Given a run that invocation A already created, and B that read before A's write
    rig = Rig(surplus_family(2), store=_StaleReadStore())
    rig.run(dry_run=True, invocation_id="inv-A", batch_size=1)

    # When B creates the same run / Then its create-only write loses
    with pytest.raises(RunInProgressError):
        rig.run(dry_run=True, invocation_id="inv-B")
    assert rig.store.conflicts == 1


# ==== zombies, kill switch, dry/real mismatch ===============================================


def test_run_sweep_batch_zombie_skipped_and_reported() -> None:
    # Given a child that is not in created status
    rig = Rig(mixed_family())

    # When swept for real
    result = rig.run(dry_run=False)

    # Then it is skipped with its status, its resources never read, nothing enqueued for it
    zombie = next(i for i in result.items if i.workspace_id == "c5")
    assert (zombie.outcome, zombie.error_code) == ("skipped-not-created", "not ready")
    assert result.counts.skipped_not_created == 1
    assert sorted(rig.gateway.calls_of(READ_RESOURCES)) == ["c1", "c2", "c3", "c4"]
    assert [r.workspace_id for r in rig.enqueuer.releases] == WITH_SURPLUS


def test_run_sweep_batch_real_run_refused_while_kill_switch_off() -> None:
    # Given the kill switch off
    rig = Rig(mixed_family())

    # When a real run starts / Then it is refused before any call or write
    with pytest.raises(SweepRefusedError, match="SERENITY_DYNAMIC_ALLOCATION"):
        rig.run(dry_run=False, dynamic_allocation=False)
    assert rig.gateway.calls == []
    assert rig.store.saves == []


def test_run_sweep_batch_real_run_allowed_when_disabled_if_asked() -> None:
    # Given the kill switch off and an explicit override
    rig = Rig(mixed_family())

    # When a real run starts / Then it proceeds
    result = rig.run(dry_run=False, dynamic_allocation=False, allow_when_disabled=True)
    assert result.done
    assert result.counts.enqueued == 3


def test_run_sweep_batch_dry_run_allowed_while_kill_switch_off() -> None:
    # Given the kill switch off / When a dry run starts / Then it previews as usual
    result = Rig(mixed_family()).run(dry_run=True, dynamic_allocation=False)
    assert result.done
    assert result.counts.would_release == 3


@pytest.mark.parametrize(("first", "second"), [(True, False), (False, True)])
def test_run_sweep_batch_changing_dry_run_on_the_same_run_id_refused(
    first: bool, second: bool
) -> None:
    # Given a run started with one dry_run value
    rig = Rig(surplus_family(2))
    rig.run(dry_run=first, batch_size=1)
    saves = len(rig.store.saves)

    # When the same run id is invoked with the other value
    with pytest.raises(SweepRefusedError, match="new run_id"):
        rig.run(dry_run=second, invocation_id="inv-2")

    # Then nothing was written or enqueued by the refused invocation
    assert len(rig.store.saves) == saves
    assert len(rig.enqueuer.releases) == (0 if first else 1)


# ==== deadline ==============================================================================


def test_run_sweep_batch_stops_before_the_deadline_and_next_invocation_resumes() -> None:
    # Given upstream calls that take 5 s each (a target costs 10 s) and 45 s of budget
    clock = FakeClock()
    gateway = InMemoryGateway(clock=clock, latency_s=5.0)
    seeded = surplus_family(6)
    gateway.workspaces = seeded.workspaces
    rig = Rig(gateway, clock=clock)
    deadline = clock() + 45

    # When an invocation runs (a target is started only when 20 s remain)
    first = rig.run(dry_run=False, budget_s=45)

    # Then it stopped without starting a target it could not finish, before its deadline
    assert (first.processed, first.done) == (3, False)
    assert clock() <= deadline
    assert rig.store.body(RUN)["lease_owner"] is None

    # When the next invocation runs with a fresh budget / Then it completes the run
    second = rig.run(dry_run=False, budget_s=600, invocation_id="inv-2")
    assert second.done
    assert [i.workspace_id for i in second.items] == ["k4", "k5", "k6"]
    assert rig.enqueuer.enqueued_per_child() == {f"k{i}": 1 for i in range(1, 7)}


def test_run_sweep_batch_deadline_counts_the_rate_limit_pause() -> None:
    # Given 30 s of budget, 20 s per target and a 15 s pause between targets
    rig = Rig(surplus_family(3))

    # When the sweep runs
    result = rig.run(dry_run=True, budget_s=30, rate_limit_ms=15_000)

    # Then after the first target it stops rather than pause into a target it cannot finish
    assert result.processed == 1
    assert rig.clock.sleeps == []


def test_run_sweep_batch_no_time_for_any_target_makes_no_upstream_call_per_target() -> None:
    # Given less budget than one target needs
    rig = Rig(surplus_family(2))

    # When the sweep runs / Then it only listed the targets and stopped
    result = rig.run(dry_run=False, budget_s=10)
    assert (result.processed, result.remaining, result.done) == (0, 2, False)
    assert rig.gateway.calls_of(READ_STATUS) == []


# ==== payload ===============================================================================


def test_sweep_request_defaults_to_a_dry_run() -> None:
    # Given a payload that forgets dry_run / When parsed / Then it previews
    request = SweepRequest.model_validate({"parent_workspace_ids": [MASTER]})
    assert request.dry_run is True
    assert (request.rate_limit_ms, request.max_consecutive_errors, request.batch_size) == (
        300,
        5,
        25,
    )


@pytest.mark.parametrize(
    ("override", "field_name"),
    [
        ({"limit": "ten"}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": -1}, "limit"),
        ({"rate_limit_ms": -1}, "rate_limit_ms"),
        ({"rate_limit_ms": 1.5}, "rate_limit_ms"),
        ({"max_consecutive_errors": -3}, "max_consecutive_errors"),
        ({"max_consecutive_errors": 0}, "max_consecutive_errors"),
        ({"batch_size": 0}, "batch_size"),
        ({"parent_workspace_ids": []}, "parent_workspace_ids"),
        ({"parent_workspace_ids": ["  "]}, "parent_workspace_ids"),
        ({"workspace_ids": []}, "workspace_ids"),
        ({"run_id": "has space"}, "run_id"),
        ({"run_id": "../etc"}, "run_id"),
        ({"run_id": "x" * 65}, "run_id"),
        ({"dry_run": "false"}, "dry_run"),
        ({"floor": {"projects": -1, "prompts": 100}}, "floor"),
        ({"unknown_key": 1}, "unknown_key"),
    ],
)
def test_sweep_request_invalid_field_named(override: dict[str, Any], field_name: str) -> None:
    # Given a payload with one bad field
    payload: dict[str, Any] = {"parent_workspace_ids": [MASTER], **override}

    # When validated / Then the error names that field
    with pytest.raises(ValidationError) as raised:
        SweepRequest.model_validate(payload)
    locs = [str(error["loc"][0]) for error in raised.value.errors()]
    assert field_name in locs


def test_sweep_request_missing_parents_named() -> None:
    # Given a payload without parent_workspace_ids / When validated / Then it is named
    with pytest.raises(ValidationError) as raised:
        SweepRequest.model_validate({"dry_run": True})
    assert [e["loc"] for e in raised.value.errors()] == [("parent_workspace_ids",)]


def test_release_request_id_is_deterministic_per_run_and_child() -> None:
    # Given a run and a child / When the id is built twice / Then it is the same, and distinct
    assert release_request_id("rs-1", "c1") == release_request_id("rs-1", "c1") == "rs-1.c1"
    assert release_request_id("rs-1", "c1") != release_request_id("rs-2", "c1")
