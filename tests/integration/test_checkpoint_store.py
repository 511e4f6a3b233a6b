"""The S3 checkpoint store against a moto server over real HTTP."""

from __future__ import annotations

import boto3
import pytest

from serenity_allocator.adapters.s3_checkpoint_store import (
    CheckpointCorruptError,
    S3CheckpointStore,
    S3PreconditionFailedError,
    StoredCheckpoint,
)
from serenity_allocator.domain.sweep.errors import StaleCheckpointError
from serenity_tools.standins.resources import LocalResources

# ---------------------------------------------------------------- checkpoints


def test_checkpoint_store_creates_loads_and_updates(local_resources: LocalResources) -> None:
    # Given a store on the test's bucket, and a run without a checkpoint
    store = S3CheckpointStore(local_resources.bucket)
    assert store.load("rs-1") is None

    # When the first checkpoint is created and then updated with the ETag it returned
    first_etag = store.save(
        "rs-1", {"processed": ["c1"], "counts": {"enqueued": 1}}, expected_etag=None
    )
    loaded = store.load("rs-1")
    assert loaded == StoredCheckpoint(
        body={"processed": ["c1"], "counts": {"enqueued": 1}}, etag=first_etag
    )
    second_etag = store.save("rs-1", {"processed": ["c1", "c2"]}, expected_etag=loaded.etag)

    # Then the stored body is the update, under the documented key, with a new ETag
    assert second_etag != first_etag
    assert store.load("rs-1") == StoredCheckpoint(
        body={"processed": ["c1", "c2"]}, etag=second_etag
    )
    s3 = boto3.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=local_resources.bucket)["Contents"]]
    assert keys == ["sweep/rs-1.json"]
    assert store.location("rs-1") == f"s3://{local_resources.bucket}/sweep/rs-1.json"


def test_checkpoint_store_refuses_a_stale_etag_write(local_resources: LocalResources) -> None:
    # Given two invocations of one run that both read the same checkpoint
    store = S3CheckpointStore(local_resources.bucket, prefix="runs/")
    store.save("rs-2", {"processed": []}, expected_etag=None)
    read_by_a = store.load("rs-2")
    read_by_b = store.load("rs-2")
    assert read_by_a is not None and read_by_b is not None

    # When A saves first, then B saves with the ETag it read (now stale)
    store.save("rs-2", {"processed": ["from-a"]}, expected_etag=read_by_a.etag)
    with pytest.raises(S3PreconditionFailedError) as raised:
        store.save("rs-2", {"processed": ["from-b"]}, expected_etag=read_by_b.etag)

    # Then B is refused (the domain's StaleCheckpointError), and A's checkpoint stands intact
    assert isinstance(raised.value, StaleCheckpointError)
    assert raised.value.name == "rs-2"
    stored = store.load("rs-2")
    assert stored is not None and stored.body == {"processed": ["from-a"]}


def test_checkpoint_store_refuses_to_create_over_an_existing_run(
    local_resources: LocalResources,
) -> None:
    # Given a run that already has a checkpoint
    store = S3CheckpointStore(local_resources.bucket)
    store.save("rs-3", {"processed": ["c1"]}, expected_etag=None)

    # When a second runner tries to start the same run from scratch / Then it is refused
    with pytest.raises(S3PreconditionFailedError):
        store.save("rs-3", {"processed": []}, expected_etag=None)
    stored = store.load("rs-3")
    assert stored is not None and stored.body == {"processed": ["c1"]}


def test_checkpoint_store_refuses_an_update_after_the_checkpoint_vanished(
    local_resources: LocalResources,
) -> None:
    # Given a checkpoint that was read and then deleted by someone else
    store = S3CheckpointStore(local_resources.bucket)
    etag = store.save("rs-4", {"processed": []}, expected_etag=None)
    boto3.client("s3").delete_object(Bucket=local_resources.bucket, Key="sweep/rs-4.json")

    # When the runner saves with the ETag it holds / Then it is refused, not silently recreated
    with pytest.raises(S3PreconditionFailedError):
        store.save("rs-4", {"processed": ["c1"]}, expected_etag=etag)


def test_checkpoint_store_reports_a_corrupt_checkpoint(local_resources: LocalResources) -> None:
    # Given an object at the run's key that is not a JSON object
    boto3.client("s3").put_object(
        Bucket=local_resources.bucket, Key="sweep/rs-5.json", Body=b"[1, 2"
    )

    # When it is loaded / Then the store says so instead of resuming from garbage
    with pytest.raises(CheckpointCorruptError):
        S3CheckpointStore(local_resources.bucket).load("rs-5")


def test_checkpoint_store_rejects_run_ids_that_escape_the_prefix() -> None:
    # Given a store / When a run id holds a slash or is blank / Then it is refused up front
    store = S3CheckpointStore("bucket")
    for name in ("../other", " ", "a//b", "dry/..", ""):
        with pytest.raises(ValueError, match="checkpoint name"):
            store.key(name)
