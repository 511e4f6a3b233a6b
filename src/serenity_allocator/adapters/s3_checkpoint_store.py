"""Sweep checkpoints in S3, written with conditional writes so two runners never interleave.

Each save names the version it replaces: ``If-None-Match: *`` for the first write of a run,
``If-Match: <etag>`` afterwards (S3 conditional writes, GA since 2024-11). A second invocation
of the same run that read an older checkpoint gets 412 PreconditionFailed on its next save and
stops; S3 answers 409 ConditionalRequestConflict when two conditional writes race on the same
key, which means the same. Either way the stored checkpoint is always one complete JSON
document: a PUT replaces the object atomically.

The S3 client is built on first use with bounded timeouts and retries (:mod:`.aws_clients`);
the endpoint follows ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from ..domain.sweep.errors import CheckpointCorruptError, StaleCheckpointError
from ..domain.sweep.model import StoredCheckpoint
from .aws_clients import LazyClient, aws_error_code, s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# 412: the condition did not hold; 409: a concurrent conditional write won the race; 404 on an
# If-Match write: the checkpoint this runner read has been deleted since.
_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"})
_CONFLICT_STATUSES = frozenset({409, 412})

# Names are the domain's: "<run_id>", "dry/<run_id>", "parents/<quoted parent id>". No empty,
# "." or ".." segment, nothing outside the unreserved alphabet and "%".
_NAME = re.compile(r"^(?!.*(?:^|/)\.{1,2}(?:/|$))[A-Za-z0-9._~%-]+(?:/[A-Za-z0-9._~%-]+)*$")


class CheckpointStoreError(RuntimeError):
    """The checkpoint could not be read or written (S3 refused or was unreachable)."""


class S3PreconditionFailedError(CheckpointStoreError, StaleCheckpointError):
    """S3 refused a conditional write (412/409): the object changed since it was read.

    Also the domain's ``StaleCheckpointError``, which the sweep turns into "run already in
    progress" (a checkpoint) or "parent held" (a parent claim).

    Attributes:
        name: The document whose write lost.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__("the object changed since it was read (conditional write refused)")


__all__ = [
    "CheckpointCorruptError",
    "CheckpointStoreError",
    "S3CheckpointStore",
    "S3PreconditionFailedError",
    "StoredCheckpoint",
]


class S3CheckpointStore:
    """Loads and conditionally saves the sweep's JSON documents: checkpoints, parent claims.

    Implements the domain's ``CheckpointStore`` port; :meth:`load` returns the domain's
    ``StoredCheckpoint`` (the body and the ETag the next save must match).

    Args:
        bucket: The bucket (``SWEEP_BUCKET``).
        prefix: Key prefix; the key is ``f"{prefix}{name}.json"``.
        s3: An optional ready S3 client; otherwise one is built on first use (explicit timeouts,
            standard retries), honouring the standard endpoint variables.
    """

    def __init__(self, bucket: str, prefix: str = "sweep/", s3: S3Client | None = None) -> None:
        if not bucket.strip():
            raise ValueError("the checkpoint bucket name is blank")
        self._bucket = bucket
        self._prefix = prefix
        # The bounded client's worst case (16 s) fits a sweep target's 20 s budget.
        self._s3: LazyClient[S3Client] = LazyClient(s3_client, s3)

    def _client(self) -> S3Client:
        return self._s3.get()

    def key(self, name: str) -> str:
        """The object key of a document (a run's checkpoint or a parent's claim)."""
        if not _NAME.fullmatch(name):
            raise ValueError("a checkpoint name must be path segments of [A-Za-z0-9._~%-]")
        return f"{self._prefix}{name}.json"

    def location(self, name: str) -> str:
        """Where a document lives, as an ``s3://`` URI (for results and logs)."""
        return f"s3://{self._bucket}/{self.key(name)}"

    def load(self, name: str) -> StoredCheckpoint | None:
        """Read a document; ``None`` when there is none yet.

        Raises:
            CheckpointCorruptError: The object is not a JSON object (the domain's error, with
                the object's ETag so an abandon can replace exactly that version).
            CheckpointStoreError: S3 refused or could not be reached.
        """
        key = self.key(name)
        try:
            response = self._client().get_object(Bucket=self._bucket, Key=key)
            raw = response["Body"].read()
        except ClientError as exc:
            if aws_error_code(exc) in {"NoSuchKey", "404"}:
                return None
            raise CheckpointStoreError(
                f"could not read the checkpoint ({aws_error_code(exc)})"
            ) from exc
        except BotoCoreError as exc:
            raise CheckpointStoreError("could not read the checkpoint") from exc
        etag = response["ETag"]
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointCorruptError(name, "not valid JSON", etag=etag) from exc
        if not isinstance(body, dict):
            raise CheckpointCorruptError(name, "not a JSON object", etag=etag)
        return StoredCheckpoint(body=body, etag=etag)

    def save(self, name: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        """Write a document only if it is still the version the caller read.

        Args:
            name: The document (see :meth:`key`).
            body: The checkpoint, a JSON-serializable mapping.
            expected_etag: The ETag from :meth:`load`; ``None`` to create the checkpoint, which
                must not exist yet.

        Returns:
            The new ETag, to pass as ``expected_etag`` to the next save.

        Raises:
            S3PreconditionFailedError: The document exists (create) or moved on (update).
            CheckpointStoreError: S3 refused for another reason or could not be reached.
        """
        key = self.key(name)
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
                raise S3PreconditionFailedError(name) from exc
            raise CheckpointStoreError(
                f"could not write the checkpoint ({aws_error_code(exc)})"
            ) from exc
        except BotoCoreError as exc:
            raise CheckpointStoreError("could not write the checkpoint") from exc
        return response["ETag"]


def _is_conflict(exc: ClientError) -> bool:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return aws_error_code(exc) in _CONFLICT_CODES or status in _CONFLICT_STATUSES
