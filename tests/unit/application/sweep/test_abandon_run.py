"""Abandoning a sweep run in memory, at its edges: an unreadable checkpoint replaced by the
abandoned marker (or refused when the store gives no version), an abandon by parent, a dry
run's checkpoint, the run's token ended, the lease and the race of the write."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal

import pytest

from serenity_allocator.application.sweep.abandon_run import abandon_sweep_run
from serenity_allocator.domain.sweep.errors import (
    CheckpointCorruptError,
    RunInProgressError,
    SweepRefusedError,
)
from serenity_allocator.domain.sweep.model import (
    StoredCheckpoint,
    SweepAbandonRequest,
    SweepAbandonResult,
    SweepParentAbandonRequest,
    parent_claim_name,
)
from tests.fakes import InMemoryCheckpointStore
from tests.unit.application.sweep.sweep_rig import MASTER, RUN, Rig, surplus_family

LOCATION = f"memory://checkpoints/{RUN}.json"


class UnreadableStore(InMemoryCheckpointStore):
    """Reads ``RUN`` as the S3 store reads a body that is not JSON (with or without a version);
    ``before_save`` runs once before the next save (a concurrent write)."""

    def __init__(self, *, etag: str | None = '"v-bad"') -> None:
        super().__init__()
        self.unreadable_etag = etag
        self.unreadable = False
        self.bad_version: str | None = None
        self.before_save: Callable[[], None] | None = None

    def load(self, run_id: str) -> StoredCheckpoint | None:
        if self.unreadable and run_id == RUN:
            self.bad_version = self.objects[run_id][1]
            raise CheckpointCorruptError(run_id, "not valid JSON", etag=self.unreadable_etag)
        return super().load(run_id)

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        hook, self.before_save = self.before_save, None
        if hook is not None:
            hook()
        if self.unreadable and run_id == RUN and expected_etag == self.unreadable_etag:
            self.unreadable = False
            expected_etag = self.bad_version  # the version the unreadable body was read at
        return super().save(run_id, body, expected_etag=expected_etag)


class RecordingRunTokens:
    def __init__(self) -> None:
        self.ended: list[tuple[str, str]] = []

    def end(self, run_id: str, reason: Literal["done", "aborted", "abandoned"]) -> None:
        self.ended.append((run_id, reason))


def _abandon(
    rig: Rig, tokens: RecordingRunTokens | None = None, **fields: Any
) -> SweepAbandonResult:
    body = {"abandon": True, **fields}
    model = SweepParentAbandonRequest if "parent_workspace_id" in fields else SweepAbandonRequest
    env = dataclasses.replace(rig.env(invocation_id="inv-abandon"), run_tokens=tokens)
    return abandon_sweep_run(model.model_validate(body), env)


def _unfinished(store: InMemoryCheckpointStore | None = None) -> Rig:
    rig = Rig(surplus_family(3), **({"store": store} if store is not None else {}))
    assert not rig.run(dry_run=False, batch_size=1).done
    rig.expire_lease()
    return rig


def test_an_unreadable_checkpoint_is_replaced_by_the_marker_and_its_token_ended() -> None:
    store = UnreadableStore()
    rig = _unfinished(store)
    store.unreadable = True
    tokens = RecordingRunTokens()

    result = _abandon(rig, tokens, run_id=RUN, reason="lost it")

    assert result.model_dump() == {
        "run_id": RUN,
        "dry_run": False,
        "abandoned": True,
        "released_parents": [],
        "processed": None,
        "total": None,
        "checkpoint": LOCATION,
        "unreadable": "not valid JSON",
    }
    assert rig.store.body(RUN) == {
        "run_id": RUN,
        "state": "abandoned",
        "abandon_reason": "lost it",
        "unreadable": "not valid JSON",
    }
    assert tokens.ended == [(RUN, "abandoned")]


def test_an_unreadable_checkpoint_without_a_version_is_refused_with_the_way_out() -> None:
    store = UnreadableStore(etag=None)
    rig = _unfinished(store)
    store.unreadable = True

    with pytest.raises(SweepRefusedError) as refused:
        _abandon(rig, run_id=RUN)

    assert str(refused.value) == (
        f"checkpoint {RUN!r} is unreadable (not valid JSON) and the store gave no version to "
        "replace; restore a good version from the bucket instead"
    )


def test_a_replacement_that_loses_its_race_is_a_run_in_progress() -> None:
    store = UnreadableStore()
    rig = _unfinished(store)
    store.unreadable = True
    store.before_save = lambda: store.objects.update({RUN: ({"run_id": RUN}, '"v-new"')})

    with pytest.raises(RunInProgressError) as caught:
        _abandon(rig, run_id=RUN)

    assert caught.value.run_id == RUN


def test_another_runs_checkpoint_under_the_name_is_replaced_as_unreadable() -> None:
    rig = _unfinished()
    body, etag = rig.store.objects[RUN]
    rig.store.objects[RUN] = ({**body, "run_id": "rs-copied"}, etag)

    result = _abandon(rig, run_id=RUN, reason="copied over")

    assert (result.run_id, result.unreadable, result.checkpoint) == (
        RUN,
        "it belongs to another run",
        LOCATION,
    )
    assert rig.store.body(RUN) == {
        "run_id": RUN,
        "state": "abandoned",
        "abandon_reason": "copied over",
        "unreadable": "it belongs to another run",
    }


def test_abandoning_a_readable_run_ends_its_token() -> None:
    rig = _unfinished()
    tokens = RecordingRunTokens()

    _abandon(rig, tokens, run_id=RUN)

    assert tokens.ended == [(RUN, "abandoned")]


def test_an_abandon_whose_write_loses_its_race_names_the_run() -> None:
    store = UnreadableStore()
    rig = _unfinished(store)
    body, _ = store.objects[RUN]
    store.before_save = lambda: store.objects.update({RUN: (body, '"v-meanwhile"')})

    with pytest.raises(RunInProgressError) as caught:
        _abandon(rig, run_id=RUN)

    assert caught.value.run_id == RUN


def test_a_lease_beyond_the_configured_longest_invocation_holds_nothing() -> None:
    # Given a run whose lease ends in 100 s, where no invocation may hold one past 50 s
    rig = Rig(surplus_family(3))
    assert not rig.run(dry_run=False, batch_size=1).done
    body, etag = rig.store.objects[RUN]
    rig.store.objects[RUN] = ({**body, "lease_until": rig.wall() + 100}, etag)
    env = dataclasses.replace(rig.env(invocation_id="inv-abandon"), max_lease_s=50.0)

    # When it is abandoned / Then the lease is no lock: the run is abandoned
    request = SweepAbandonRequest.model_validate({"abandon": True, "run_id": RUN})
    assert abandon_sweep_run(request, env).released_parents == [MASTER]


def test_a_held_lease_refuses_the_abandon_naming_the_run() -> None:
    rig = Rig(surplus_family(3))
    assert not rig.run(dry_run=False, batch_size=1).done
    body, etag = rig.store.objects[RUN]
    held = {**body, "lease_owner": "inv-other", "lease_until": rig.wall() + 100}
    rig.store.objects[RUN] = (held, etag)

    with pytest.raises(RunInProgressError) as caught:
        _abandon(rig, run_id=RUN)

    assert caught.value.run_id == RUN


def test_a_dry_runs_checkpoint_is_abandoned_under_its_own_name() -> None:
    rig = Rig(surplus_family(3))
    assert not rig.run(dry_run=True, batch_size=1).done
    rig.expire_lease()

    result = _abandon(rig, run_id=RUN)

    assert result.model_dump() == {
        "run_id": RUN,
        "dry_run": True,
        "abandoned": True,
        "released_parents": [],
        "processed": 1,
        "total": 3,
        "checkpoint": f"memory://checkpoints/dry/{RUN}.json",
        "unreadable": None,
    }
    assert rig.store.body(f"dry/{RUN}")["state"] == "abandoned"


def test_an_abandon_by_parent_abandons_its_holder_with_the_reason_given() -> None:
    rig = _unfinished()
    tokens = RecordingRunTokens()

    result = _abandon(rig, tokens, parent_workspace_id=MASTER, reason="by parent")

    assert (result.run_id, result.released_parents) == (RUN, [MASTER])
    assert rig.store.body(RUN)["abandon_reason"] == "by parent"
    assert tokens.ended == [(RUN, "abandoned")]


def test_an_abandon_by_parent_clears_an_unreadable_claim_and_says_what_it_was() -> None:
    rig = _unfinished()
    claim = parent_claim_name(MASTER)
    _, etag = rig.store.objects[claim]
    rig.store.objects[claim] = ({"parent_workspace_id": MASTER, "holder": RUN}, etag)

    result = _abandon(rig, parent_workspace_id=MASTER)

    assert result.model_dump() == {
        "run_id": None,
        "dry_run": False,
        "abandoned": True,
        "released_parents": [MASTER],
        "processed": None,
        "total": None,
        "checkpoint": f"memory://checkpoints/{claim}.json",
        "unreadable": "run_id: Field required; holder: Extra inputs are not permitted",
    }
    assert rig.store.body(claim) == {
        "parent_workspace_id": MASTER,
        "run_id": None,
        "released_by": None,
    }


def test_abandoning_over_the_abandoned_marker_again_names_its_checkpoint() -> None:
    store = UnreadableStore()
    rig = _unfinished(store)
    store.unreadable = True
    _abandon(rig, run_id=RUN)
    tokens = RecordingRunTokens()

    again = _abandon(rig, tokens, run_id=RUN)

    assert (again.run_id, again.checkpoint, again.unreadable) == (RUN, LOCATION, None)
    assert tokens.ended == [(RUN, "abandoned")]


def test_clearing_an_unreadable_claim_that_changed_meanwhile_is_refused() -> None:
    store = UnreadableStore()
    rig = _unfinished(store)
    claim = parent_claim_name(MASTER)
    _, etag = store.objects[claim]
    store.objects[claim] = ({"parent_workspace_id": MASTER, "holder": RUN}, etag)
    store.before_save = lambda: store.objects.update({claim: ({"x": 1}, '"v-meanwhile"')})

    with pytest.raises(SweepRefusedError) as refused:
        _abandon(rig, parent_workspace_id=MASTER)

    assert str(refused.value) == (
        f"the claim of parent {MASTER!r} changed while it was being cleared; read it again"
    )
