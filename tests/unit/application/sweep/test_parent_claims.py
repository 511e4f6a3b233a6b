"""A parent's claim in memory, at its edges: unreadable claims and holders, finished holders,
a claim lost to a race (what was taken is given back), releases that skip or lose."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from serenity_allocator.application.sweep.parent_claims import (
    ClaimRead,
    claim_parents,
    clear_unreadable_claim,
    read_claim,
    release_parents,
)
from serenity_allocator.domain.sweep.errors import (
    CheckpointCorruptError,
    ParentClaimUnreadableError,
    ParentHeldError,
    ParentHolderUnreadableError,
)
from serenity_allocator.domain.sweep.model import (
    StoredCheckpoint,
    SweepCheckpoint,
    parent_claim_name,
)
from tests.fakes import InMemoryCheckpointStore

RUN = "rs-claims-1"
OTHER = "rs-claims-2"


class Store(InMemoryCheckpointStore):
    """The in-memory store; ``corrupt`` names read as a body that is not JSON (with a version),
    and ``before_save`` runs once before the next save of the name it is keyed by."""

    def __init__(self) -> None:
        super().__init__()
        self.corrupt: set[str] = set()
        self.before_save: dict[str, Callable[[], None]] = {}

    def load(self, run_id: str) -> StoredCheckpoint | None:
        if run_id in self.corrupt:
            raise CheckpointCorruptError(run_id, "not valid JSON", etag='"v-bad"')
        return super().load(run_id)

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        hook = self.before_save.pop(run_id, None)
        if hook is not None:
            hook()
        return super().save(run_id, body, expected_etag=expected_etag)

    def claim(self, parent_id: str, run_id: str | None) -> None:
        name = parent_claim_name(parent_id)
        etag = self.objects[name][1] if name in self.objects else None
        self.save(name, {"parent_workspace_id": parent_id, "run_id": run_id}, expected_etag=etag)

    def run(self, run_id: str, **fields: Any) -> None:
        checkpoint = SweepCheckpoint(
            run_id=run_id,
            dry_run=False,
            parent_workspace_ids=["m1", "m2"],
            payload_sha256="0" * 64,
            targets=[],
            **fields,
        )
        self.save(run_id, checkpoint.model_dump(mode="json"), expected_etag=None)

    def holder(self, parent_id: str) -> dict[str, Any]:
        return self.body(parent_claim_name(parent_id))


def _released(parent_id: str, by: str | None) -> dict[str, Any]:
    return {"parent_workspace_id": parent_id, "run_id": None, "released_by": by}


def test_read_claim_returns_a_corrupt_claim_with_its_version_and_problem() -> None:
    store = Store()
    store.corrupt.add(parent_claim_name("m1"))

    assert read_claim(store, "m1") == ClaimRead("m1", None, '"v-bad"', problem="not valid JSON")


def test_claim_parents_skips_a_parent_it_holds_and_claims_the_next() -> None:
    store = Store()
    store.run(RUN)
    store.claim("m1", RUN)

    claim_parents(store, RUN, ["m2", "m1"])

    assert store.holder("m2")["run_id"] == RUN


def test_claim_parents_check_only_checks_every_parent() -> None:
    store = Store()
    store.run(OTHER)
    store.claim("m2", OTHER)

    with pytest.raises(ParentHeldError) as refused:
        claim_parents(store, RUN, ["m1", "m2"], check_only=True)

    assert (refused.value.parent_id, refused.value.holder_run_id) == ("m2", OTHER)
    assert parent_claim_name("m1") not in store.objects


def test_a_refused_claim_gives_back_what_it_took_as_released_by_the_run() -> None:
    store = Store()
    store.run(OTHER)
    store.claim("m2", OTHER)

    with pytest.raises(ParentHeldError):
        claim_parents(store, RUN, ["m1", "m2"])

    assert store.holder("m1") == _released("m1", RUN)


def test_an_unreadable_claim_refuses_naming_its_parent_and_document() -> None:
    store = Store()
    store.corrupt.add(parent_claim_name("m1"))

    with pytest.raises(ParentClaimUnreadableError) as refused:
        claim_parents(store, RUN, ["m1"])

    assert (refused.value.parent_id, refused.value.location) == (
        "m1",
        "memory://checkpoints/parents/m1.json",
    )


def test_a_holder_whose_checkpoint_is_unreadable_refuses_naming_parent_and_holder() -> None:
    store = Store()
    store.save(OTHER, {"run_id": OTHER}, expected_etag=None)
    store.claim("m1", OTHER)

    with pytest.raises(ParentHolderUnreadableError) as refused:
        claim_parents(store, RUN, ["m1"])

    assert (refused.value.parent_id, refused.value.holder_run_id) == ("m1", OTHER)
    assert (
        "whose checkpoint is unreadable (dry_run: Field required; parent_workspace_ids: Field "
        "required; payload_sha256: Field required; targets: Field required); "
    ) in str(refused.value)


@pytest.mark.parametrize("holder", ["gone", "marker", "abandoned", "done"])
def test_a_parent_held_by_a_finished_or_vanished_run_is_taken(holder: str) -> None:
    store = Store()
    if holder == "marker":
        marker = {"run_id": OTHER, "state": "abandoned", "abandon_reason": "x", "unreadable": "y"}
        store.save(OTHER, marker, expected_etag=None)
    elif holder != "gone":
        store.run(OTHER, state=holder)
    store.claim("m1", OTHER)

    claim_parents(store, RUN, ["m1"])

    assert store.holder("m1")["run_id"] == RUN


@pytest.mark.parametrize(("meanwhile", "named"), [(OTHER, OTHER), (None, "(unknown)")])
def test_a_claim_lost_to_a_race_gives_back_what_it_took_and_names_the_winner(
    meanwhile: str | None, named: str
) -> None:
    # Given m2's claim written by someone else between this run's read and its write
    store = Store()
    store.before_save[parent_claim_name("m2")] = lambda: store.claim("m2", meanwhile)

    with pytest.raises(ParentHeldError) as refused:
        claim_parents(store, RUN, ["m1", "m2"])

    assert (refused.value.parent_id, refused.value.holder_run_id) == ("m2", named)
    assert store.holder("m1") == _released("m1", RUN)


def test_release_parents_frees_what_the_run_holds_past_what_it_does_not() -> None:
    store = Store()
    store.claim("m1", OTHER)
    store.claim("m2", RUN)

    assert release_parents(store, RUN, ["m2", "m1"]) == ["m2"]
    assert store.holder("m2") == _released("m2", RUN)
    assert store.holder("m1")["run_id"] == OTHER


def test_release_parents_reports_none_freed_when_the_release_loses_its_race() -> None:
    store = Store()
    store.claim("m1", RUN)
    store.before_save[parent_claim_name("m1")] = lambda: store.claim("m1", OTHER)

    assert release_parents(store, RUN, ["m1"]) == []
    assert store.holder("m1")["run_id"] == OTHER


def test_clear_unreadable_claim_refuses_without_a_version_or_after_a_lost_race() -> None:
    store = Store()
    assert clear_unreadable_claim(store, ClaimRead("m1", None, None, problem="x")) is False

    store.claim("m1", OTHER)
    stale = ClaimRead("m1", None, '"v-old"', problem="x")
    assert clear_unreadable_claim(store, stale) is False
    assert store.holder("m1")["run_id"] == OTHER
