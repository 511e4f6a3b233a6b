"""Sweep runs over moto S3 and the simulator: one real run per parent, abandon, sound checkpoints.

The parent claims and the checkpoints are real S3 objects written with conditional writes on
the moto server; a tampered checkpoint is a real object edited behind the sweep's back.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from serenity_allocator.domain.sweep.errors import (
    CheckpointCorruptError,
    ParentHeldError,
    SweepRefusedError,
)
from serenity_allocator.handlers.sweep import SweepPayloadError
from serenity_tools.standins.resources import LocalResources
from tests.infrastructure._template import load_template
from tests.integration.sweep_stack import (
    EXPECTED,
    MASTER,
    OTHER_CHILD,
    OTHER_MASTER,
    SweepStack,
    groups_of,
    payload,
    seeded_stack,
)

if TYPE_CHECKING:
    from serenity_tools.standins.simulator import SimulatorServer

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")

RUN_A = "rs-run-a"
RUN_B = "rs-run-b"


@pytest.fixture
def stack(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[SweepStack]:
    """The fleet seeded, the kill switch on."""
    with seeded_stack(local_resources, sim) as built:
        yield built


class _OnSecondStatusRead:
    """The real gateway, calling ``hook`` once, just before its second status read."""

    def __init__(self, inner: Any, hook: Any) -> None:
        self._inner = inner
        self._hook = hook
        self._reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def read_status(self, workspace_id: str) -> str:
        self._reads += 1
        if self._reads == 2:
            self._hook()
        status: str = self._inner.read_status(workspace_id)
        return status


def _put_checkpoint(stack: SweepStack, run_id: str, body: dict[str, Any]) -> None:
    stack.s3.put_object(
        Bucket=stack.resources.bucket, Key=f"sweep/{run_id}.json", Body=json.dumps(body).encode()
    )


def test_sweep_two_real_runs_on_one_parent_at_once_one_is_refused(stack: SweepStack) -> None:
    # Given real run A working on m1, and real run B (another run id) started mid-batch
    refusals: list[ParentHeldError] = []

    def start_b() -> None:
        with pytest.raises(ParentHeldError) as refused:
            stack.invoke(payload(dry_run=False, run_id=RUN_B), request_id="inv-b")
        refusals.append(refused.value)

    stack.runtime.gateway = _OnSecondStatusRead(stack.runtime.gateway, start_b)

    # When A runs
    result = stack.invoke(payload(dry_run=False, run_id=RUN_A), request_id="inv-a")

    # Then B was refused, naming A, and each surplus child is on the queue exactly once
    assert [r.holder_run_id for r in refusals] == [RUN_A]
    assert str(refusals[0]).startswith(f"parent {MASTER!r} belongs to unfinished run {RUN_A!r}")
    assert result["done"] is True
    assert groups_of(stack.queued()) == Counter(dict.fromkeys(EXPECTED, 1))
    assert f"sweep/{RUN_B}.json" not in stack.checkpoint_keys()
    # And A, done, released m1 (the claim object is kept, naming who released it)
    assert _claim(stack, MASTER) == {
        "parent_workspace_id": MASTER,
        "run_id": None,
        "released_by": RUN_A,
    }


def _claim(stack: SweepStack, parent: str) -> dict[str, Any]:
    key = f"sweep/parents/{parent}.json"
    document: dict[str, Any] = json.loads(
        stack.s3.get_object(Bucket=stack.resources.bucket, Key=key)["Body"].read()
    )
    return document


def test_sweep_abandon_payload_frees_the_parent_for_another_run(stack: SweepStack) -> None:
    # Given an unfinished real run A (one batch of two), and B refused because of it
    first = stack.invoke(payload(dry_run=False, run_id=RUN_A, batch_size=2))
    assert first["done"] is False
    with pytest.raises(ParentHeldError):
        stack.invoke(payload(dry_run=False, run_id=RUN_B))

    # When the operator abandons A with the documented payload
    abandoned = stack.invoke({"abandon": True, "run_id": RUN_A, "reason": "superseded by B"})

    # Then A's parent is free, B runs to its end, and A's checkpoint stays, marked
    assert abandoned == {
        "run_id": RUN_A,
        "dry_run": False,
        "abandoned": True,
        "released_parents": [MASTER],
        "processed": 2,
        "total": 5,
        "checkpoint": f"s3://{stack.resources.bucket}/sweep/{RUN_A}.json",
    }
    assert stack.invoke(payload(dry_run=False, run_id=RUN_B))["done"] is True
    assert stack.checkpoint(RUN_A)["state"] == "abandoned"


def test_sweep_abandon_payload_with_a_bad_field_is_named(stack: SweepStack) -> None:
    # Given an abandon payload without its run id / When invoked / Then refused, naming it
    with pytest.raises(SweepPayloadError, match="invalid abandon payload: run_id: Field required"):
        stack.invoke({"abandon": True})


def test_sweep_checkpoint_with_an_injected_target_is_corrupt_and_nothing_enqueued(
    stack: SweepStack,
) -> None:
    # Given an unfinished real run whose S3 checkpoint gained a child of ANOTHER pool
    first = stack.invoke(payload(dry_run=False, run_id=RUN_A, batch_size=1))
    enqueued_before = groups_of(stack.queued())
    body = stack.checkpoint(RUN_A)
    body["targets"].append([OTHER_CHILD, MASTER])
    body["lease_owner"], body["lease_until"] = None, None
    _put_checkpoint(stack, RUN_A, body)

    # When the run is resumed
    with pytest.raises(CheckpointCorruptError, match="not children of their parent") as corrupt:
        stack.invoke(payload(dry_run=False, run_id=RUN_A))

    # Then nothing more was enqueued, and certainly nothing for the injected child
    assert first["processed"] == 1
    assert str(corrupt.value).startswith(f"checkpoint {RUN_A!r} is corrupt")
    assert groups_of(stack.queued()) == Counter()
    assert enqueued_before == Counter({"c-big": 1})  # the first target only, no OTHER_CHILD


def test_sweep_real_checkpoint_with_a_negative_count_is_corrupt(stack: SweepStack) -> None:
    # Given an unfinished real run whose checkpoint holds a negative count
    stack.invoke(payload(dry_run=False, run_id=RUN_A, batch_size=1))
    stack.queued()
    body = stack.checkpoint(RUN_A)
    body["counts"]["enqueued"] = -3
    body["lease_owner"], body["lease_until"] = None, None
    _put_checkpoint(stack, RUN_A, body)

    # When resumed / Then refused with the field named, not a raw validation error
    with pytest.raises(CheckpointCorruptError) as corrupt:
        stack.invoke(payload(dry_run=False, run_id=RUN_A))
    assert "counts.enqueued: Input should be greater than or equal to 0" in str(corrupt.value)
    assert groups_of(stack.queued()) == Counter()


def test_sweep_lease_far_in_the_future_is_corrupt_not_a_lock_forever(stack: SweepStack) -> None:
    # Given an unfinished run whose lease was set ten years ahead
    stack.invoke(payload(dry_run=True, run_id=RUN_A, batch_size=1))
    key = f"sweep/dry/{RUN_A}.json"
    body = stack.checkpoint(RUN_A, dry_run=True)
    body["lease_owner"], body["lease_until"] = "someone", stack.wall() + 10 * 365 * 86_400
    stack.s3.put_object(Bucket=stack.resources.bucket, Key=key, Body=json.dumps(body).encode())

    # When resumed / Then it is reported corrupt (not "in progress" until 2036)
    with pytest.raises(CheckpointCorruptError, match="lease lies beyond"):
        stack.invoke(payload(dry_run=True, run_id=RUN_A))


def test_sweep_bucket_keeps_every_checkpoint_version() -> None:
    # Given the deployed template / Then the sweep bucket is versioned, so an overwritten
    # (or tampered) checkpoint's earlier versions survive for the runbook's restore
    bucket = load_template()["Resources"]["SweepBucket"]["Properties"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    rules = bucket["LifecycleConfiguration"]["Rules"]
    assert [r["NoncurrentVersionExpiration"]["NoncurrentDays"] for r in rules] == [90]


def _processed_stranger(body: dict[str, Any]) -> None:
    body["processed"].append("c-stranger")
    body["counts"]["enqueued"] += 1


def _foreign_run_id(body: dict[str, Any]) -> None:
    body["run_id"] = "rs-someone-else"


def _malformed_target(body: dict[str, Any]) -> None:
    body["targets"][2] = {"child": "c-lean"}


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (_processed_stranger, "processed: "),
        (_foreign_run_id, "it belongs to another run"),
        (_malformed_target, "targets.2: "),
    ],
    ids=["processed-non-target", "foreign-run-id", "malformed-target"],
)
def test_sweep_tampered_real_checkpoint_is_corrupt_and_nothing_enqueued(
    stack: SweepStack, edit: Any, problem: str
) -> None:
    # Given an unfinished real run whose S3 checkpoint was edited
    stack.invoke(payload(dry_run=False, run_id=RUN_A, batch_size=1))
    stack.queued()
    body = stack.checkpoint(RUN_A)
    edit(body)
    body["lease_owner"], body["lease_until"] = None, None
    _put_checkpoint(stack, RUN_A, body)

    # When resumed / Then refused as corrupt, naming the problem, and nothing enqueued
    with pytest.raises(CheckpointCorruptError, match=problem):
        stack.invoke(payload(dry_run=False, run_id=RUN_A))
    assert groups_of(stack.queued()) == Counter()


def test_sweep_checkpoint_copied_under_another_run_id_drives_nothing(stack: SweepStack) -> None:
    # Given run A's checkpoint copied to run B's key
    stack.invoke(payload(dry_run=False, run_id=RUN_A, batch_size=1))
    stack.queued()
    _put_checkpoint(stack, RUN_B, stack.checkpoint(RUN_A))

    # When run B is invoked / Then the copy is refused as corrupt and nothing is enqueued
    with pytest.raises(CheckpointCorruptError, match="another run"):
        stack.invoke(payload(dry_run=False, run_id=RUN_B))
    assert groups_of(stack.queued()) == Counter()


def test_sweep_dry_checkpoint_flipped_to_real_never_runs_for_real(stack: SweepStack) -> None:
    # Given an unfinished dry run whose checkpoint was flipped to dry_run=false
    stack.invoke(payload(dry_run=True, run_id=RUN_A, batch_size=2))
    body = stack.checkpoint(RUN_A, dry_run=True)
    body["dry_run"], body["lease_owner"], body["lease_until"] = False, None, None
    stack.s3.put_object(
        Bucket=stack.resources.bucket, Key=f"sweep/dry/{RUN_A}.json", Body=json.dumps(body).encode()
    )

    # When resumed as a dry run, or as a real run / Then neither goes on, nothing is enqueued
    with pytest.raises(CheckpointCorruptError, match="another run"):
        stack.invoke(payload(dry_run=True, run_id=RUN_A))
    with pytest.raises(SweepRefusedError, match="is a dry run"):
        stack.invoke(payload(dry_run=False, run_id=RUN_A))
    assert stack.queued() == []


def test_sweep_resume_with_other_parents_is_refused(stack: SweepStack) -> None:
    # Given an unfinished real run on m1
    stack.invoke(payload(dry_run=False, run_id=RUN_A, batch_size=1))
    stack.queued()

    # When it is resumed naming m1 and m2 / Then refused, and nothing more is enqueued
    with pytest.raises(SweepRefusedError, match="started with another payload"):
        stack.invoke(
            payload(dry_run=False, run_id=RUN_A, parent_workspace_ids=[MASTER, OTHER_MASTER])
        )
    assert groups_of(stack.queued()) == Counter()
