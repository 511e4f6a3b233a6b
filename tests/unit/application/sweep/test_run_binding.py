"""The sweep's run boundaries: one real run per parent, abandon, checkpoints bound to their run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from serenity_allocator.application.sweep.abandon_run import abandon_sweep_run
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sweep.errors import (
    CheckpointCorruptError,
    ParentHeldError,
    RunInProgressError,
    SweepRefusedError,
)
from serenity_allocator.domain.sweep.model import (
    SweepAbandonRequest,
    checkpoint_name,
    parent_claim_name,
)
from tests.fakes import LIST_FAMILY, READ_STATUS
from tests.unit.application.sweep.sweep_rig import (
    EPOCH,
    MASTER,
    OTHER_MASTER,
    POOL,
    RUN,
    Rig,
    surplus_family,
)

RUN_B = "rs-unit-2"


def _abandon(rig: Rig, run_id: str, reason: str | None = None) -> Any:
    request = SweepAbandonRequest.model_validate(
        {"abandon": True, "run_id": run_id, **({"reason": reason} if reason else {})}
    )
    return abandon_sweep_run(request, rig.env(invocation_id="inv-abandon"))


def _unfinished_real_run(rig: Rig, run_id: str = RUN) -> None:
    result = rig.run(run_id, dry_run=False, batch_size=1)
    assert not result.done


# ==== one run per parent ====================================================================


def test_run_sweep_batch_second_real_run_on_a_held_parent_refused_naming_the_holder() -> None:
    # Given an unfinished real run A on m1 (one of three children done)
    rig = Rig(surplus_family(3))
    _unfinished_real_run(rig)
    saves = len(rig.store.saves)

    # When a real run B with another run id names m1
    with pytest.raises(ParentHeldError) as refused:
        rig.run(RUN_B, dry_run=False, invocation_id="inv-B")

    # Then B is refused, naming A and the way out, and B wrote and enqueued nothing
    assert refused.value.holder_run_id == RUN
    assert f"unfinished run {RUN!r}" in str(refused.value)
    assert '{"abandon": true, "run_id": "rs-unit-1"}' in str(refused.value)
    assert len(rig.store.saves) == saves
    assert sorted(rig.store.objects) == [parent_claim_name(MASTER), RUN]  # nothing for B
    assert rig.enqueuer.enqueued_per_child() == {"k1": 1}


def test_run_sweep_batch_parent_free_again_once_its_run_is_done() -> None:
    # Given a real run A that finished
    rig = Rig(surplus_family(2))
    assert rig.run(dry_run=False).done
    assert rig.store.body(parent_claim_name(MASTER)) == {
        "parent_workspace_id": MASTER,
        "run_id": None,
        "released_by": RUN,
    }

    # When a real run B names the same parent / Then it runs
    result = rig.run(RUN_B, dry_run=False, invocation_id="inv-B")
    assert result.done
    assert rig.store.body(parent_claim_name(MASTER))["released_by"] == RUN_B


def test_run_sweep_batch_a_claim_left_by_a_finished_run_is_taken_over() -> None:
    # Given run A done, but its claim still naming it (it died before releasing)
    rig = Rig(surplus_family(1))
    assert rig.run(dry_run=False).done
    name = parent_claim_name(MASTER)
    claim = {"parent_workspace_id": MASTER, "run_id": RUN}
    rig.store.save(name, claim, expected_etag=rig.store.etag(name))

    # When run B names the parent / Then A's finished state frees it
    assert rig.run(RUN_B, dry_run=False, invocation_id="inv-B").done


def test_run_sweep_batch_refused_run_releases_the_parents_it_claimed_first() -> None:
    # Given run A holding m2 only
    rig = Rig(surplus_family(2))
    rig.gateway.add_master(OTHER_MASTER, total=POOL)
    rig.gateway.add_child("d1", OTHER_MASTER, total=Totals(projects=1, prompts=900))
    rig.gateway.add_child("d2", OTHER_MASTER, total=Totals(projects=1, prompts=900))
    assert not rig.run(dry_run=False, parent_workspace_ids=[OTHER_MASTER], batch_size=1).done

    # When B (m1 and m2) is refused while claiming, after its precheck passed (a race)
    held = rig.store.objects.pop(parent_claim_name(OTHER_MASTER))
    original_load = rig.store.load

    def racing_load(name: str) -> Any:
        if name == parent_claim_name(OTHER_MASTER) and checkpoint_name(RUN_B, False) in (
            rig.store.objects
        ):
            rig.store.objects[name] = held  # A's claim lands between B's read and B's write
        return original_load(name)

    rig.store.load = racing_load  # type: ignore[method-assign,assignment]
    with pytest.raises(ParentHeldError):
        rig.run(RUN_B, dry_run=False, parent_workspace_ids=[MASTER, OTHER_MASTER])

    # Then B holds nothing: m1, which it claimed first, is released again
    assert rig.store.body(parent_claim_name(MASTER))["run_id"] is None
    assert rig.store.body(parent_claim_name(OTHER_MASTER))["run_id"] == RUN
    assert rig.enqueuer.enqueued_per_child() == {"d1": 1}


def test_run_sweep_batch_dry_runs_never_hold_parents() -> None:
    # Given an unfinished dry run on m1
    rig = Rig(surplus_family(3))
    assert not rig.run(dry_run=True, batch_size=1).done
    assert sorted(rig.store.objects) == [checkpoint_name(RUN, dry_run=True)]  # no claim

    # When a real run names m1 / Then it runs
    assert rig.run(RUN_B, dry_run=False, invocation_id="inv-B").done


# ==== abandon ===============================================================================


def test_abandon_sweep_run_frees_its_parents_and_ends_the_run_for_good() -> None:
    # Given an unfinished real run A holding m1
    rig = Rig(surplus_family(3))
    _unfinished_real_run(rig)

    # When an operator abandons it
    abandoned = _abandon(rig, RUN, "superseded")

    # Then its parents are free, its checkpoint is kept and marked, a new run goes ahead
    assert (abandoned.released_parents, abandoned.processed, abandoned.total) == ([MASTER], 1, 3)
    body = rig.store.body(RUN)
    assert (body["state"], body["abandon_reason"]) == ("abandoned", "superseded")
    assert rig.run(RUN_B, dry_run=False, invocation_id="inv-B").done
    # ... and A can never be resumed
    with pytest.raises(SweepRefusedError, match="was abandoned"):
        rig.run(dry_run=False, invocation_id="inv-A2")


def test_abandon_sweep_run_refused_while_an_invocation_holds_the_run() -> None:
    # Given an invocation of A in progress (it abandons in the middle of its batch)
    rig = Rig(surplus_family(2))
    refusals: list[Exception] = []

    def abandon_mid_batch(item: Any) -> None:
        with pytest.raises(RunInProgressError) as refused:
            _abandon(rig, RUN)
        refusals.append(refused.value)

    # When A runs / Then the abandon was refused and A finished
    assert rig.run(dry_run=False, batch_size=1, on_item=abandon_mid_batch).processed == 1
    assert len(refusals) == 1
    assert rig.store.body(RUN)["state"] == "open"


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        (lambda rig: None, "there is no run"),
        (lambda rig: rig.run(dry_run=False), "is done"),
    ],
    ids=["unknown", "done"],
)
def test_abandon_sweep_run_refused_for_no_or_a_finished_run(
    prepare: Callable[[Rig], Any], message: str
) -> None:
    # Given no run, or a finished one / When abandoned / Then refused, saying why
    rig = Rig(surplus_family(1))
    prepare(rig)
    with pytest.raises(SweepRefusedError, match=message):
        _abandon(rig, RUN)


# ==== checkpoints bound to their run ========================================================


@pytest.mark.parametrize(
    "change",
    [
        {"parent_workspace_ids": [MASTER, OTHER_MASTER]},
        {"workspace_ids": ["k1"]},
        {"floor": {"projects": 1, "prompts": 500}},
        {"limit": 1},
    ],
    ids=["parents", "workspace-ids", "floor", "limit"],
)
def test_run_sweep_batch_resume_with_another_payload_refused(change: dict[str, Any]) -> None:
    # Given an unfinished run
    rig = Rig(surplus_family(3))
    rig.gateway.add_master(OTHER_MASTER, total=POOL)
    _unfinished_real_run(rig)

    # When it is resumed with a payload that changes what the run is
    with pytest.raises(SweepRefusedError, match="another payload"):
        rig.run(dry_run=False, invocation_id="inv-2", **change)

    # Then nothing more was enqueued
    assert rig.enqueuer.enqueued_per_child() == {"k1": 1}


def test_run_sweep_batch_resume_may_change_the_pacing() -> None:
    # Given an unfinished run / When resumed slower, in smaller batches / Then accepted
    rig = Rig(surplus_family(3))
    _unfinished_real_run(rig)
    result = rig.run(dry_run=False, invocation_id="inv-2", rate_limit_ms=2_000, max_attempts=5)
    assert result.done


def test_run_sweep_batch_dry_and_real_runs_never_share_a_name() -> None:
    # Given a dry run and a real run / Then their checkpoints live under different names
    rig = Rig(surplus_family(1))
    rig.run("rs-dry", dry_run=True)
    rig.run("rs-real", dry_run=False, invocation_id="inv-2")
    assert sorted(rig.store.objects) == ["dry/rs-dry", parent_claim_name(MASTER), "rs-real"]


def _tamper(rig: Rig, name: str, edit: Callable[[dict[str, Any]], None]) -> None:
    body = rig.store.body(name)
    edit(body)
    rig.store.save(name, body, expected_etag=rig.store.etag(name))


def _add_processed(body: dict[str, Any]) -> None:
    body["processed"].append("not-a-target")
    body["counts"]["enqueued"] += 1


def _negative(body: dict[str, Any]) -> None:
    body["counts"]["enqueued"] = -1


def _foreign_run(body: dict[str, Any]) -> None:
    body["run_id"] = "rs-someone-else"


def _malformed_target(body: dict[str, Any]) -> None:
    body["targets"][1] = ["k2"]


def _future_lease(body: dict[str, Any]) -> None:
    body["lease_owner"], body["lease_until"] = "inv-x", 1_767_000_000.0 + 10 * 365 * 86_400


def _flip_dry(body: dict[str, Any]) -> None:
    body["dry_run"] = False


def _counts_off(body: dict[str, Any]) -> None:
    body["counts"]["enqueued"] += 5


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (_add_processed, "processed"),
        (_negative, "counts.enqueued"),
        (_foreign_run, "another run"),
        (_malformed_target, "targets.1"),
        (_future_lease, "lease"),
        (_counts_off, "counts"),
    ],
    ids=["processed-non-target", "negative-count", "foreign-run", "malformed", "lease", "counts"],
)
def test_run_sweep_batch_tampered_checkpoint_is_corrupt_and_nothing_enqueued(
    edit: Callable[[dict[str, Any]], None], problem: str
) -> None:
    # Given an unfinished real run whose checkpoint was then edited
    rig = Rig(surplus_family(3))
    _unfinished_real_run(rig)
    _tamper(rig, RUN, edit)
    rig.expire_lease()

    # When it is resumed / Then it is refused as corrupt, naming the problem, nothing sent
    with pytest.raises(CheckpointCorruptError, match=problem) as corrupt:
        rig.run(dry_run=False, invocation_id="inv-2")
    assert "validation error" not in str(corrupt.value)  # ours, not a raw pydantic error
    assert rig.enqueuer.enqueued_per_child() == {"k1": 1}


def test_run_sweep_batch_injected_target_not_a_child_upstream_is_corrupt() -> None:
    # Given an unfinished run whose checkpoint gained a target m1 does not have upstream
    rig = Rig(surplus_family(3))
    rig.gateway.add_master(OTHER_MASTER, total=POOL)
    rig.gateway.add_child("victim", OTHER_MASTER, total=Totals(projects=1, prompts=900))
    _unfinished_real_run(rig)
    _tamper(rig, RUN, lambda body: body["targets"].append(["victim", MASTER]))

    # When resumed / Then corrupt (re-verified upstream), and no release for the victim
    with pytest.raises(CheckpointCorruptError, match="not children of their parent"):
        rig.run(dry_run=False, invocation_id="inv-2")
    assert rig.enqueuer.enqueued_per_child() == {"k1": 1}  # from the first run, none for victim
    assert rig.gateway.calls_of(LIST_FAMILY)[-1] == MASTER
    assert rig.gateway.calls_of(READ_STATUS) == ["k1"]  # the first run's only


def test_run_sweep_batch_checkpoint_copied_under_another_run_id_is_corrupt() -> None:
    # Given run A's checkpoint copied under run B's name
    rig = Rig(surplus_family(3))
    _unfinished_real_run(rig)
    rig.store.save(RUN_B, rig.store.body(RUN), expected_etag=None)

    # When run B is invoked / Then the copy does not drive it
    with pytest.raises(CheckpointCorruptError, match="another run"):
        rig.run(RUN_B, dry_run=False, invocation_id="inv-B")
    assert rig.enqueuer.enqueued_per_child() == {"k1": 1}


def test_run_sweep_batch_dry_checkpoint_flipped_to_real_is_corrupt() -> None:
    # Given an unfinished dry run whose checkpoint was flipped to dry_run=false
    rig = Rig(surplus_family(3))
    assert not rig.run(dry_run=True, batch_size=1).done
    dry_name = checkpoint_name(RUN, dry_run=True)
    _tamper(rig, dry_name, _flip_dry)

    # When resumed as a dry run or as a real run / Then neither goes on as a real run
    with pytest.raises(CheckpointCorruptError, match="another run"):
        rig.run(dry_run=True, invocation_id="inv-2")
    with pytest.raises(SweepRefusedError, match="is a dry run"):
        rig.run(dry_run=False, invocation_id="inv-3")
    assert rig.enqueuer.releases == []


def test_run_sweep_batch_child_id_outside_the_alphabet_refused_naming_the_field() -> None:
    # Given an upstream that lists a child whose id the sweep cannot carry
    rig = Rig(surplus_family(1))
    rig.gateway.add_child("bad id", MASTER, total=Totals(projects=1, prompts=900))

    # When a run starts / Then it is refused with our message, not a raw validation error
    with pytest.raises(SweepRefusedError) as refused:
        rig.run(dry_run=True)
    assert str(refused.value) == (
        "the upstream listed children the sweep cannot take: targets.1.0: String should match "
        "pattern '^[A-Za-z0-9_-]{1,128}$'"
    )
    assert rig.store.saves == []


def test_run_sweep_batch_lease_is_capped_at_the_longest_invocation() -> None:
    # Given an environment that claims a lease a day long (a misconfigured deadline)
    rig = Rig(surplus_family(2))
    leases: list[float] = []

    def look(item: Any) -> None:
        leases.append(rig.store.body(RUN)["lease_until"])

    # When an invocation works on the run
    rig.run(dry_run=False, batch_size=1, budget_s=86_400, on_item=look)

    # Then the lease it held was no longer than Lambda's longest invocation plus a minute
    assert leases == [EPOCH + 960.0]
