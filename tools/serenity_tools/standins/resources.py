"""Create, on a local AWS endpoint (moto), the resources template.yaml declares.

The allocation FIFO queue (content-based deduplication off: the request id is the dedup id)
with a redrive policy to its FIFO DLQ, the sweep checkpoint bucket, the outcome event bus, the
request ledger table (key ``request_id``, TTL on ``expires_at``) and, when a token is given, the
Semrush token secret. Creating is idempotent, so ``local up`` can
run twice against the same server.

This is local tooling on a known local endpoint, so ``endpoint_url`` is passed explicitly here
(production code never does: it follows ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sqs import SQSClient

LOCAL_REGION = "us-east-1"


@dataclass(frozen=True)
class LocalResourceNames:
    """Names and settings of the local resources (defaults mirror template.yaml)."""

    queue_name: str = "serenity-allocator-local-allocation.fifo"
    dlq_name: str = "serenity-allocator-local-allocation-dlq.fifo"
    bucket: str = "serenity-allocator-local-sweep"
    bus: str = "serenity-allocator-local-outcomes"
    ledger_table: str = "serenity-allocator-local-request-ledger"
    secret_id: str = "serenity-allocator/local/semrush-token"  # noqa: S105 - a name, not a secret
    max_receive_count: int = 5
    visibility_timeout_s: int = 30
    """Short locally, so a failed message comes back within a demo's patience."""

    def with_suffix(self, suffix: str | None = None) -> LocalResourceNames:
        """The same names made unique with ``suffix`` (a short random one when absent).

        Lets tests and harness runs share one moto server without seeing each other's
        messages.
        """
        tag = (suffix or uuid.uuid4().hex[:10]).lower()
        return replace(
            self,
            queue_name=_fifo_name(self.queue_name, tag),
            dlq_name=_fifo_name(self.dlq_name, tag),
            bucket=f"{self.bucket}-{tag}"[:63],
            bus=f"{self.bus}-{tag}",
            ledger_table=f"{self.ledger_table}-{tag}",
            secret_id=f"{self.secret_id}-{tag}",
        )


@dataclass(frozen=True)
class LocalResources:
    """What was created: URLs, ARNs and names to put into the environment."""

    endpoint_url: str
    queue_url: str
    queue_arn: str
    dlq_url: str
    dlq_arn: str
    bucket: str
    bus_name: str
    ledger_table: str
    secret_id: str | None
    max_receive_count: int
    visibility_timeout_s: int

    def environment(self) -> dict[str, str]:
        """The contract environment variables pointing at these resources."""
        env = {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "QUEUE_URL": self.queue_url,
            "DLQ_URL": self.dlq_url,
            "MAX_RECEIVE_COUNT": str(self.max_receive_count),
            "OUTCOME_BUS_NAME": self.bus_name,
            "SWEEP_BUCKET": self.bucket,
            "REQUEST_LEDGER_TABLE": self.ledger_table,
        }
        if self.secret_id is not None:
            env["SEMRUSH_TOKEN_SECRET_ID"] = self.secret_id
        return env


def local_client(service: str, endpoint_url: str) -> Any:
    """A boto3 client on the local endpoint, with dummy credentials unless some are set."""
    import boto3

    # Explicit dummies: without them botocore would look for credentials (and may query the
    # instance metadata service, which is slow to time out off EC2).
    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=endpoint_url,
        region_name=os.environ.get("AWS_DEFAULT_REGION") or LOCAL_REGION,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID") or "testing",
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY") or "testing",
    )


def create_local_resources(
    endpoint_url: str, names: LocalResourceNames, *, token: str | None = None
) -> LocalResources:
    """Create (or find) the queue, DLQ, bucket, bus, ledger table and, with ``token``, the secret.

    Args:
        endpoint_url: The local AWS endpoint (a moto server).
        names: The resource names and queue settings.
        token: The Semrush token to store in the secret; no secret when absent.

    Returns:
        The created resources.
    """
    sqs: SQSClient = local_client("sqs", endpoint_url)
    s3: S3Client = local_client("s3", endpoint_url)
    events: EventBridgeClient = local_client("events", endpoint_url)

    dlq_url = sqs.create_queue(
        QueueName=names.dlq_name,
        Attributes={
            "FifoQueue": "true",
            "ContentBasedDeduplication": "false",
            "MessageRetentionPeriod": "1209600",
        },
    )["QueueUrl"]
    dlq_arn = _queue_arn(sqs, dlq_url)
    queue_url = sqs.create_queue(
        QueueName=names.queue_name,
        Attributes={
            "FifoQueue": "true",
            "ContentBasedDeduplication": "false",
            "VisibilityTimeout": str(names.visibility_timeout_s),
            # Short polling only: a long poll would hold the single-threaded broker.
            "ReceiveMessageWaitTimeSeconds": "0",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": names.max_receive_count}
            ),
        },
    )["QueueUrl"]
    queue_arn = _queue_arn(sqs, queue_url)

    try:
        s3.create_bucket(Bucket=names.bucket)
    except ClientError as exc:
        if _code(exc) != "BucketAlreadyOwnedByYou":
            raise

    try:
        events.create_event_bus(Name=names.bus)
    except ClientError as exc:
        if _code(exc) != "ResourceAlreadyExistsException":
            raise

    create_ledger_table(local_client("dynamodb", endpoint_url), names.ledger_table)

    secret_id: str | None = None
    if token is not None:
        secrets: SecretsManagerClient = local_client("secretsmanager", endpoint_url)
        try:
            secrets.create_secret(Name=names.secret_id, SecretString=token)
        except ClientError as exc:
            if _code(exc) != "ResourceExistsException":
                raise
            secrets.put_secret_value(SecretId=names.secret_id, SecretString=token)
        secret_id = names.secret_id

    return LocalResources(
        endpoint_url=endpoint_url,
        queue_url=queue_url,
        queue_arn=queue_arn,
        dlq_url=dlq_url,
        dlq_arn=dlq_arn,
        bucket=names.bucket,
        bus_name=names.bus,
        ledger_table=names.ledger_table,
        secret_id=secret_id,
        max_receive_count=names.max_receive_count,
        visibility_timeout_s=names.visibility_timeout_s,
    )


def create_ledger_table(dynamodb: DynamoDBClient, table_name: str) -> None:
    """Create (or find) the request ledger table as the template declares it (on demand, TTL)."""
    try:
        dynamodb.create_table(
            TableName=table_name,
            AttributeDefinitions=[{"AttributeName": "request_id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "request_id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
    except ClientError as exc:
        if _code(exc) != "ResourceInUseException":
            raise
        return
    dynamodb.update_time_to_live(
        TableName=table_name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"},
    )


def _fifo_name(name: str, tag: str) -> str:
    stem = name.removesuffix(".fifo")
    # SQS queue names are at most 80 characters, ".fifo" included.
    return f"{stem[: 80 - len('.fifo') - len(tag) - 1]}-{tag}.fifo"


def _queue_arn(sqs: SQSClient, queue_url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return attributes["Attributes"]["QueueArn"]


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
