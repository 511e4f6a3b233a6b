"""Sweep checkpoints in S3, written with conditional writes so two runners never interleave.

Each save names the version it replaces: ``If-None-Match: *`` for the first write of a run,
``If-Match: <etag>`` afterwards (S3 conditional writes, GA since 2024-11). A second invocation
of the same run that read an older checkpoint gets 412 PreconditionFailed on its next save and
stops; S3 answers 409 ConditionalRequestConflict when two conditional writes race on the same
key, which means the same. Either way the stored checkpoint is always one complete JSON
document: a PUT replaces the object atomically.

The S3 client is built on first use with plain ``boto3.client("s3")``, so the endpoint follows
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from ..domain import sweep
from ..domain.sweep import StoredCheckpoint

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# 412: the condition did not hold; 409: a concurrent conditional write won the race; 404 on an
# If-Match write: the checkpoint this runner read has been deleted since.
_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"})
_CONFLICT_STATUSES = frozenset({409, 412})


class CheckpointStoreError(RuntimeError):
    """The checkpoint could not be read or written (S3 refused or was unreachable)."""


class CheckpointConflictError(CheckpointStoreError, sweep.CheckpointConflictError):
    """The checkpoint changed since it was read: another invocation of this run is in progress.

    Also the domain's ``CheckpointConflictError``, which the sweep turns into "run already in
    progress".

    Attributes:
        run_id: The run whose checkpoint moved on.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(
            "the sweep checkpoint changed since it was read: the run is already in progress "
            "in another invocation"
        )


class CheckpointCorruptError(CheckpointStoreError):
    """The stored checkpoint is not a JSON object (written by something else)."""


__all__ = [
    "CheckpointConflictError",
    "CheckpointCorruptError",
    "CheckpointStoreError",
    "S3CheckpointStore",
    "StoredCheckpoint",
]


class S3CheckpointStore:
    """Loads and conditionally saves one JSON checkpoint per sweep run.

    Implements the domain's ``CheckpointStore`` port; :meth:`load` returns the domain's
    ``StoredCheckpoint`` (the body and the ETag the next save must match).

    Args:
        bucket: The bucket (``SWEEP_BUCKET``).
        prefix: Key prefix; the key is ``f"{prefix}{run_id}.json"``.
        s3: An optional ready S3 client; otherwise ``boto3.client("s3")`` is built on first use,
            honouring the standard endpoint variables.
    """

    def __init__(self, bucket: str, prefix: str = "sweep/", s3: S3Client | None = None) -> None:
        if not bucket.strip():
            raise ValueError("the checkpoint bucket name is blank")
        self._bucket = bucket
        self._prefix = prefix
        self._s3 = s3

    def _client(self) -> S3Client:
        if self._s3 is None:
            import boto3

            self._s3 = boto3.client("s3")
        return self._s3

    def key(self, run_id: str) -> str:
        """The object key of a run's checkpoint."""
        if not run_id.strip() or "/" in run_id:
            raise ValueError("a sweep run id must be non-blank and hold no '/'")
        return f"{self._prefix}{run_id}.json"

    def location(self, run_id: str) -> str:
        """Where a run's checkpoint lives, as an ``s3://`` URI (for results and logs)."""
        return f"s3://{self._bucket}/{self.key(run_id)}"

    def load(self, run_id: str) -> StoredCheckpoint | None:
        """Read a run's checkpoint; ``None`` when the run has none yet.

        Raises:
            CheckpointCorruptError: The object is not a JSON object.
            CheckpointStoreError: S3 refused or could not be reached.
        """
        key = self.key(run_id)
        try:
            response = self._client().get_object(Bucket=self._bucket, Key=key)
            raw = response["Body"].read()
        except ClientError as exc:
            if _error_code(exc) in {"NoSuchKey", "404"}:
                return None
            raise CheckpointStoreError(
                f"could not read the checkpoint ({_error_code(exc)})"
            ) from exc
        except BotoCoreError as exc:
            raise CheckpointStoreError("could not read the checkpoint") from exc
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointCorruptError("the checkpoint is not valid JSON") from exc
        if not isinstance(body, dict):
            raise CheckpointCorruptError("the checkpoint is not a JSON object")
        return StoredCheckpoint(body=body, etag=response["ETag"])

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        """Write a run's checkpoint only if it is still the version the caller read.

        Args:
            run_id: The sweep run.
            body: The checkpoint, a JSON-serializable mapping.
            expected_etag: The ETag from :meth:`load`; ``None`` to create the checkpoint, which
                must not exist yet.

        Returns:
            The new ETag, to pass as ``expected_etag`` to the next save.

        Raises:
            CheckpointConflictError: The checkpoint exists (create) or moved on (update).
            CheckpointStoreError: S3 refused for another reason or could not be reached.
        """
        key = self.key(run_id)
        data = json.dumps(dict(body), separators=(",", ":"), sort_keys=True).encode("utf-8")
        try:
            if expected_etag is None:
                response = self._client().put_object(
                    Bucket=self._bucket,
                    Key=key,
                    Body=data,
                    ContentType="application/json",
                    IfNoneMatch="*",
                )
            else:
                response = self._client().put_object(
                    Bucket=self._bucket,
                    Key=key,
                    Body=data,
                    ContentType="application/json",
                    IfMatch=expected_etag,
                )
        except ClientError as exc:
            if _is_conflict(exc):
                raise CheckpointConflictError(run_id) from exc
            raise CheckpointStoreError(
                f"could not write the checkpoint ({_error_code(exc)})"
            ) from exc
        except BotoCoreError as exc:
            raise CheckpointStoreError("could not write the checkpoint") from exc
        return response["ETag"]


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _is_conflict(exc: ClientError) -> bool:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return _error_code(exc) in _CONFLICT_CODES or status in _CONFLICT_STATUSES
