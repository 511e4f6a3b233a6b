"""A sweep batch in memory, at its edges: the kill switch's words, a run with no target, the
run's token ended when it is done or aborted, what a resume names when it refuses, and the
conditional writes of the checkpoint lost to another invocation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal

import pytest

from serenity_allocator.application.sweep.run_batch import run_sweep_batch
from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.sweep.errors import (
    CheckpointCorruptError,
    ParentClaimUnreadableError,
    RunInProgressError,
    SweepImsUnavailableError,
    SweepRefusedError,
)
from serenity_allocator.domain.sweep.model import SweepResult, parent_claim_name
from tests.fakes import READ_STATUS, InMemoryCheckpointStore, InMemoryGateway
from tests.unit.application.sweep.sweep_rig import (
    MASTER,
    POOL,
    RUN,
    Rig,
    surplus_family,
    sweep_request,
)


class RecordingRunTokens:
    def __init__(self) -> None:
        self.ended: list[tuple[str, str]] = []

    def end(self, run_id: str, reason: Literal["done", "aborted", "abandoned"]) -> None:
        self.ended.append((run_id, reason))


class HookedStore(InMemoryCheckpointStore):
    """Runs ``hook`` once, just before save number ``at`` of ``RUN`` (a concurrent write)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[], None] | None = None
        self.at = 1
        self.seen = 0

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        if run_id == RUN:
            self.seen += 1
            if self.seen == self.at and self.hook is not None:
                self.hook()
        return super().save(run_id, body, expected_etag=expected_etag)


def _run(rig: Rig, tokens: object = None, **payload: Any) -> SweepResult:
    env_fields = {k: payload.pop(k) for k in ("max_lease_s",) if k in payload}
    env = dataclasses.replace(rig.env(), run_tokens=tokens, **env_fields)
    return run_sweep_batch(sweep_request(**payload), RUN, env)


def _edit(rig: Rig, **fields: Any) -> None:
    body, etag = rig.store.objects[RUN]
    rig.store.objects[RUN] = ({**body, **fields}, etag)


def test_a_real_run_with_the_kill_switch_off_is_refused_saying_how_to_override() -> None:
    rig = Rig(surplus_family(1))

    with pytest.raises(SweepRefusedError) as refused:
        rig.run(dry_run=False, dynamic_allocation=False)

    assert str(refused.value) == (
        "a real sweep refuses to start while SERENITY_DYNAMIC_ALLOCATION is off; "
        "set allow_when_disabled to override"
    )


def test_a_run_with_no_target_is_done_at_once_and_stays_done() -> None:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=POOL)
    rig = Rig(gateway)

    first = rig.run()
    again = rig.run()

    assert (first.done, first.total, first.items) == (True, 0, [])
    assert (again.done, again.items) == (True, [])
    assert rig.store.body(f"dry/{RUN}")["state"] == "done"


@pytest.mark.parametrize(
    ("children", "errors", "ended"),
    [(1, 0, [(RUN, "done")]), (2, 1, [(RUN, "aborted")]), (3, 0, [])],
)
def test_the_runs_token_ends_once_it_is_done_or_aborted(
    children: int, errors: int, ended: list[tuple[str, str]]
) -> None:
    rig = Rig(surplus_family(children))
    for index in range(1, errors + 1):
        error = UpstreamError(500, "internal error", "read_status")
        rig.gateway.script_errors(READ_STATUS, f"k{index}", [error])
    tokens = RecordingRunTokens()

    _run(rig, tokens, dry_run=False, max_consecutive_errors=1, batch_size=2)

    assert tokens.ended == ended


def test_a_credential_stop_gives_the_runs_lease_back() -> None:
    rig = Rig(surplus_family(2))
    rig.gateway.script_errors(READ_STATUS, "k1", [SweepImsUnavailableError(RUN)])

    with pytest.raises(SweepImsUnavailableError):
        rig.run(dry_run=False)

    body = rig.store.body(RUN)
    assert (body["lease_owner"], body["lease_until"]) == (None, None)


def test_a_run_id_of_the_other_kind_is_refused_naming_that_kind() -> None:
    rig = Rig(surplus_family(3))
    rig.run(dry_run=False, batch_size=1)

    with pytest.raises(SweepRefusedError) as refused:
        rig.run(dry_run=True)

    assert str(refused.value) == f"run {RUN!r} is a real run; start a new run_id to change dry_run"


def test_a_real_run_on_an_unreadable_claim_is_refused_before_its_checkpoint_is_written() -> None:
    rig = Rig(surplus_family(1))
    rig.store.save(parent_claim_name(MASTER), {"holder": "x"}, expected_etag=None)

    with pytest.raises(ParentClaimUnreadableError):
        rig.run(dry_run=False)

    assert RUN not in rig.store.objects


def test_resuming_over_the_abandoned_marker_is_refused_saying_start_a_new_run() -> None:
    rig = Rig(surplus_family(1))
    marker = {"run_id": RUN, "state": "abandoned", "abandon_reason": "x", "unreadable": "y"}
    rig.store.save(RUN, marker, expected_etag=None)

    with pytest.raises(SweepRefusedError) as refused:
        rig.run(dry_run=False)

    assert str(refused.value) == f"run {RUN!r} was abandoned; start a new run_id"


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            {"counts": "none"},
            "counts: Input should be a valid dictionary or instance of SweepCounts",
        ),
        ({"run_id": "rs-copied"}, "it belongs to another run"),
        ({"targets": [["k1", MASTER], ["k9", MASTER]]}, "1 target(s) are not children"),
    ],
)
def test_a_resume_refusing_a_corrupt_checkpoint_names_it(
    edit: dict[str, Any], problem: str
) -> None:
    rig = Rig(surplus_family(3))
    rig.run(dry_run=False, batch_size=1)
    rig.expire_lease()
    _edit(rig, **edit)

    with pytest.raises(CheckpointCorruptError) as caught:
        rig.run(dry_run=False)

    assert caught.value.name == RUN
    assert caught.value.problem.startswith(problem)


def test_a_resume_refuses_a_checkpoint_holding_more_targets_than_the_runs_limit() -> None:
    rig = Rig(surplus_family(3))
    rig.run(dry_run=False, batch_size=1, limit=1)
    rig.expire_lease()
    rig.gateway.add_child("k9", MASTER)
    body, _ = rig.store.objects[RUN]
    _edit(rig, targets=[*body["targets"], ["k9", MASTER]], state="open")

    with pytest.raises(CheckpointCorruptError) as caught:
        rig.run(dry_run=False, batch_size=1, limit=1)

    assert caught.value.problem == "it holds more targets than the run's limit"


def test_the_invocation_holding_the_lease_may_resume_its_run() -> None:
    rig = Rig(surplus_family(3))
    rig.run(dry_run=False, batch_size=1)
    _edit(rig, lease_owner="inv-1", lease_until=rig.wall() + 100)

    result = rig.run(dry_run=False, batch_size=1, invocation_id="inv-1")

    assert result.processed == 2


def test_a_resume_holds_the_lease_to_the_configured_longest_invocation() -> None:
    # Given a lease 100 s ahead where no invocation may hold one past 50 s
    rig = Rig(surplus_family(3))
    rig.run(dry_run=False, batch_size=1)
    _edit(rig, lease_owner="inv-other", lease_until=rig.wall() + 100)

    with pytest.raises(CheckpointCorruptError) as caught:
        _run(rig, dry_run=False, batch_size=1, max_lease_s=50.0)

    assert caught.value.problem == "its lease lies beyond any invocation's deadline"


def _racing(at: int) -> tuple[Rig, HookedStore]:
    store = HookedStore()
    rig = Rig(surplus_family(3), store=store)
    store.at = at

    def write_meanwhile() -> None:
        if RUN in store.objects:
            body, etag = store.objects[RUN]
            store.objects[RUN] = (body, etag + "-meanwhile")
        else:
            store.objects[RUN] = ({"run_id": RUN}, '"v-meanwhile"')

    store.hook = write_meanwhile
    return rig, store


@pytest.mark.parametrize("at", [1, 2])
def test_a_checkpoint_write_lost_to_another_invocation_names_the_run(at: int) -> None:
    # at 1: creating the checkpoint; at 2: saving it after the first target
    rig, _ = _racing(at)

    with pytest.raises(RunInProgressError) as caught:
        rig.run(dry_run=False)

    assert caught.value.run_id == RUN
