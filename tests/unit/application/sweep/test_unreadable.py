"""Unreadable sweep documents in memory: what an abandon does with them, and what it leaves."""

from __future__ import annotations

from typing import Any

import pytest

from serenity_allocator.application.sweep.abandon_run import abandon_sweep_run
from serenity_allocator.domain.sweep.errors import ParentClaimUnreadableError, SweepRefusedError
from serenity_allocator.domain.sweep.model import (
    SweepAbandonRequest,
    SweepParentAbandonRequest,
    parent_claim_name,
)
from tests.unit.application.sweep.sweep_rig import MASTER, OTHER_MASTER, RUN, Rig, surplus_family

RUN_B = "rs-unit-2"
BROKEN_CLAIM = {"parent_workspace_id": MASTER, "holder": RUN}


def _abandon(rig: Rig, **fields: Any) -> Any:
    body = {"abandon": True, **fields}
    model = SweepParentAbandonRequest if "parent_workspace_id" in fields else SweepAbandonRequest
    return abandon_sweep_run(model.model_validate(body), rig.env(invocation_id="inv-abandon"))


def _overwrite(rig: Rig, name: str, body: dict[str, Any]) -> None:
    rig.store.objects[name] = (body, rig.store.etag(name) if name in rig.store.objects else '"x"')


def test_abandon_sweep_run_leaves_an_unreadable_claim_of_its_parent_alone() -> None:
    # Given an unfinished real run on m1 whose claim of m1 was overwritten unreadably
    rig = Rig(surplus_family(3))
    assert not rig.run(dry_run=False, batch_size=1).done
    _overwrite(rig, parent_claim_name(MASTER), BROKEN_CLAIM)

    # When the run is abandoned
    abandoned = _abandon(rig, run_id=RUN)

    # Then the run is abandoned, m1 is not reported freed and its claim is not touched
    assert (abandoned.run_id, abandoned.released_parents) == (RUN, [])
    assert rig.store.body(RUN)["state"] == "abandoned"
    assert rig.store.body(parent_claim_name(MASTER)) == BROKEN_CLAIM
    # And a new run on m1 is refused on that claim (not on the abandoned run)
    with pytest.raises(ParentClaimUnreadableError, match="holder: Extra inputs"):
        rig.run(RUN_B, dry_run=False, invocation_id="inv-B")


def test_abandon_sweep_run_over_its_own_abandoned_marker_is_idempotent() -> None:
    # Given a run whose unreadable checkpoint was already replaced by the abandoned marker
    rig = Rig(surplus_family(2))
    assert not rig.run(dry_run=False, batch_size=1).done
    _overwrite(rig, RUN, {**rig.store.body(RUN), "targets": "lost"})
    first = _abandon(rig, run_id=RUN, reason="lost")
    saves = len(rig.store.saves)

    # When it is abandoned again
    again = _abandon(rig, run_id=RUN)

    # Then nothing is written and the answer says the run is abandoned, freeing nothing new
    assert first.unreadable == "targets: Input should be a valid list"
    assert (again.run_id, again.released_parents, again.unreadable) == (RUN, [], None)
    assert len(rig.store.saves) == saves
    assert rig.store.body(RUN)["abandon_reason"] == "lost"


def test_abandon_sweep_run_by_parent_with_no_claim_is_refused() -> None:
    # Given no run ever claimed m2 / When the operator abandons whatever holds it
    rig = Rig(surplus_family(1))

    # Then it is refused, saying nothing holds it, and nothing is written
    with pytest.raises(SweepRefusedError, match=f"parent {OTHER_MASTER!r} is held by no run"):
        _abandon(rig, parent_workspace_id=OTHER_MASTER)
    assert rig.store.saves == []


def test_abandon_payloads_name_exactly_one_kind_of_target() -> None:
    # Given an abandon naming both a run and a parent / When validated / Then refused by name
    with pytest.raises(ValueError, match="run_id"):
        SweepParentAbandonRequest.model_validate(
            {"abandon": True, "parent_workspace_id": MASTER, "run_id": RUN}
        )


def test_run_sweep_batch_resume_refused_on_an_unreadable_claim_gives_its_lease_back() -> None:
    # Given an unfinished real run on m1 whose claim of m1 became unreadable
    rig = Rig(surplus_family(3))
    assert not rig.run(dry_run=False, batch_size=1).done
    _overwrite(rig, parent_claim_name(MASTER), BROKEN_CLAIM)
    enqueued = len(rig.enqueuer.releases)

    # When it is resumed / Then refused on the claim, nothing enqueued, the lease given back
    with pytest.raises(ParentClaimUnreadableError) as refused:
        rig.run(dry_run=False, invocation_id="inv-2")
    assert refused.value.location == f"memory://checkpoints/{parent_claim_name(MASTER)}.json"
    assert len(rig.enqueuer.releases) == enqueued
    body = rig.store.body(RUN)
    assert (body["lease_owner"], body["lease_until"]) == (None, None)

    # And once the operator cleared the claim, another invocation resumes it at once
    cleared = _abandon(rig, parent_workspace_id=MASTER)
    assert (cleared.run_id, cleared.released_parents) == (None, [MASTER])
    assert rig.run(dry_run=False, invocation_id="inv-3").done
