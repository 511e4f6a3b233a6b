"""Unreadable sweep documents over moto S3: a corrupt checkpoint or claim locks nothing for good.

A checkpoint or a parent claim that does not parse refuses only the runs it concerns, with an
error naming the document and what is wrong with it, and the documented abandon clears it
without restoring S3 versions by hand (runbook sweep.md). The documents are real S3 objects
overwritten behind the sweep's back.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from serenity_allocator.domain.sweep.errors import (
    CheckpointCorruptError,
    ParentClaimUnreadableError,
    ParentHolderUnreadableError,
    SweepRefusedError,
)
from serenity_tools.standins.resources import LocalResources
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

RUN_A = "rs-unreadable-a"
RUN_B = "rs-unreadable-b"
RUN_OTHER = "rs-unreadable-other"
NOT_JSON = b'{"run_id": "rs-unreadable-a", "targets": [truncated'


@pytest.fixture
def stack(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[SweepStack]:
    """The fleet seeded, the kill switch on, the bucket versioned as deployed (template.yaml)."""
    with seeded_stack(local_resources, sim) as built:
        built.s3.put_bucket_versioning(
            Bucket=local_resources.bucket, VersioningConfiguration={"Status": "Enabled"}
        )
        yield built


def _put(stack: SweepStack, key: str, body: bytes) -> None:
    stack.s3.put_object(Bucket=stack.resources.bucket, Key=f"sweep/{key}.json", Body=body)


def _document(stack: SweepStack, key: str) -> Any:
    stored = stack.s3.get_object(Bucket=stack.resources.bucket, Key=f"sweep/{key}.json")
    return json.loads(stored["Body"].read())


def _versions(stack: SweepStack, key: str) -> list[bytes]:
    """The body of every stored version of a document."""
    bucket, full_key = stack.resources.bucket, f"sweep/{key}.json"
    listed = stack.s3.list_object_versions(Bucket=bucket, Prefix=full_key)["Versions"]
    return [
        stack.s3.get_object(Bucket=bucket, Key=full_key, VersionId=v["VersionId"])["Body"].read()
        for v in listed
        if v["Key"] == full_key
    ]


def _negative_count(stack: SweepStack) -> bytes:
    body = stack.checkpoint(RUN_A)
    body["counts"]["enqueued"] = -1
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("corrupt", "problem"),
    [
        (lambda _stack: NOT_JSON, "not valid JSON"),
        (_negative_count, "counts.enqueued: Input should be greater than or equal to 0"),
    ],
    ids=["not-json", "negative-count"],
)
def test_sweep_corrupt_checkpoint_refuses_its_run_and_parent_until_abandoned(
    stack: SweepStack, corrupt: Any, problem: str
) -> None:
    # Given an unfinished real run A holding m1 whose S3 checkpoint became unreadable
    stack.invoke(payload(dry_run=False, run_id=RUN_A, batch_size=1))
    stack.queued()
    unreadable = corrupt(stack)
    _put(stack, RUN_A, unreadable)

    # When A is resumed / Then it is refused, naming the checkpoint and the problem
    with pytest.raises(CheckpointCorruptError) as corrupt_run:
        stack.invoke(payload(dry_run=False, run_id=RUN_A))
    assert str(corrupt_run.value).startswith(f"checkpoint {RUN_A!r} is corrupt: {problem}")
    # And a new run on m1 is refused, naming A and the abandon that frees m1
    with pytest.raises(ParentHolderUnreadableError) as held:
        stack.invoke(payload(dry_run=False, run_id=RUN_B))
    assert (held.value.parent_id, held.value.holder_run_id) == (MASTER, RUN_A)
    assert problem in str(held.value)
    assert f'{{"abandon": true, "run_id": "{RUN_A}"}}' in str(held.value)
    assert groups_of(stack.queued()) == Counter()
    # And a run on another parent is not affected
    other = stack.invoke(
        payload(dry_run=False, run_id=RUN_OTHER, parent_workspace_ids=[OTHER_MASTER])
    )
    assert (other["done"], other["counts"]["enqueued"]) == (True, 1)
    assert groups_of(stack.queued()) == Counter({OTHER_CHILD: 1})

    # When the operator abandons A with the documented payload
    abandoned = stack.invoke({"abandon": True, "run_id": RUN_A, "reason": "checkpoint lost"})

    # Then the unreadable checkpoint is replaced by an abandoned marker (the bucket keeps it)
    assert abandoned == {
        "run_id": RUN_A,
        "dry_run": False,
        "abandoned": True,
        "released_parents": [],
        "checkpoint": f"s3://{stack.resources.bucket}/sweep/{RUN_A}.json",
        "unreadable": problem,
    }
    assert _document(stack, RUN_A) == {
        "run_id": RUN_A,
        "state": "abandoned",
        "abandon_reason": "checkpoint lost",
        "unreadable": problem,
    }
    assert unreadable in _versions(stack, RUN_A)
    # And B now takes m1 over and runs to its end, while A can never be resumed
    taken_over = stack.invoke(payload(dry_run=False, run_id=RUN_B))
    assert (taken_over["done"], taken_over["counts"]["enqueued"]) == (True, len(EXPECTED))
    # (A's release of its first target, received above, still holds that child's FIFO group)
    first_of_a = stack.checkpoint(RUN_B)["targets"][0][0]
    assert groups_of(stack.queued()) == Counter(dict.fromkeys(EXPECTED, 1)) - Counter(
        {first_of_a: 1}
    )
    with pytest.raises(SweepRefusedError, match=f"run {RUN_A!r} was abandoned"):
        stack.invoke(payload(dry_run=False, run_id=RUN_A))


@pytest.mark.parametrize(
    ("claim", "problem"),
    [
        (b"\x00\x01 not a claim", "not valid JSON"),
        (
            json.dumps({"parent_workspace_id": MASTER, "run_id": 7}).encode(),
            "run_id: Input should be a valid string",
        ),
    ],
    ids=["not-json", "run-id-not-a-string"],
)
def test_sweep_corrupt_claim_refuses_only_its_parent_until_cleared(
    stack: SweepStack, claim: bytes, problem: str
) -> None:
    # Given m1's parent claim overwritten with something the sweep cannot read
    _put(stack, f"parents/{MASTER}", claim)
    location = f"s3://{stack.resources.bucket}/sweep/parents/{MASTER}.json"

    # When a real run on m1 starts / Then it is refused, naming the claim, the problem and the
    # abandon that clears it, and nothing is written or enqueued
    with pytest.raises(ParentClaimUnreadableError) as refused:
        stack.invoke(payload(dry_run=False, run_id=RUN_A))
    assert (refused.value.parent_id, refused.value.location) == (MASTER, location)
    assert str(refused.value) == (
        f"the claim of parent {MASTER!r} ({location}) is unreadable: {problem}; nothing was "
        "enqueued: once no real run of that parent is in progress, clear it with "
        f'{{"abandon": true, "parent_workspace_id": "{MASTER}"}}'
    )
    assert f"sweep/{RUN_A}.json" not in stack.checkpoint_keys()
    assert groups_of(stack.queued()) == Counter()
    # And a run on another parent, and a dry run on m1, are not affected
    other = stack.invoke(
        payload(dry_run=False, run_id=RUN_OTHER, parent_workspace_ids=[OTHER_MASTER])
    )
    assert (other["done"], other["counts"]["enqueued"]) == (True, 1)
    assert stack.invoke(payload(dry_run=True, run_id=RUN_B))["done"] is True
    assert groups_of(stack.queued()) == Counter({OTHER_CHILD: 1})

    # When the operator clears it with the documented payload
    cleared = stack.invoke({"abandon": True, "parent_workspace_id": MASTER})

    # Then the claim is overwritten as released (the bucket keeps the unreadable version)
    assert cleared == {
        "dry_run": False,
        "abandoned": True,
        "released_parents": [MASTER],
        "checkpoint": location,
        "unreadable": problem,
    }
    assert _document(stack, f"parents/{MASTER}") == {
        "parent_workspace_id": MASTER,
        "run_id": None,
        "released_by": None,
    }
    assert claim in _versions(stack, f"parents/{MASTER}")
    # And a real run on m1 now runs to its end
    assert stack.invoke(payload(dry_run=False, run_id=RUN_A))["done"] is True
    assert groups_of(stack.queued()) == Counter(dict.fromkeys(EXPECTED, 1))


def test_sweep_abandon_by_parent_abandons_the_run_that_holds_it(stack: SweepStack) -> None:
    # Given an unfinished real run A holding m1
    stack.invoke(payload(dry_run=False, run_id=RUN_A, batch_size=2))

    # When the operator abandons whatever holds m1
    abandoned = stack.invoke({"abandon": True, "parent_workspace_id": MASTER})

    # Then A is abandoned and m1 freed, as an abandon of A by its run id would have
    assert abandoned == {
        "run_id": RUN_A,
        "dry_run": False,
        "abandoned": True,
        "released_parents": [MASTER],
        "processed": 2,
        "total": 5,
        "checkpoint": f"s3://{stack.resources.bucket}/sweep/{RUN_A}.json",
    }
    assert stack.checkpoint(RUN_A)["state"] == "abandoned"
    # And with nothing holding m1 any more, a second one is refused, saying so
    with pytest.raises(SweepRefusedError, match=f"parent {MASTER!r} is held by no run"):
        stack.invoke({"abandon": True, "parent_workspace_id": MASTER})
