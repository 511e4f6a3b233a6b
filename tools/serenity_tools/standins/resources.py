"""Create, on a local AWS endpoint (moto, or any one given), the resources template.yaml declares.

The allocation FIFO queue with a redrive policy to its FIFO DLQ, the sweep checkpoint bucket,
the outcome event bus, the request ledger table and, when a token is given, the Semrush token
secret. The queue, DLQ and table settings are read from template.yaml
(:mod:`.template_resources`: deduplication scope per message group, throughput per group, the
redrive policy, the ledger's key and TTL); only the named local overrides differ. Creating is
idempotent, so ``local up`` can run twice against the same server.

This is local tooling on a known local endpoint, so ``endpoint_url`` is passed explicitly here
(production code never does: it follows ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from serenity_tools.standins.aws_endpoints import ServiceEndpoints
from serenity_tools.standins.template_resources import TemplateResources, template_resources

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
    endpoints: ServiceEndpoints | None = None
    """Each service's endpoint (None: every one is ``endpoint_url``)."""

    def endpoint(self, service: str) -> str:
        """The endpoint of one service (``sqs``, ``events``, ``s3``, ...)."""
        return self.endpoints.url(service) if self.endpoints else self.endpoint_url

    def environment(self) -> dict[str, str]:
        """The contract environment variables pointing at these resources."""
        endpoints = self.endpoints or ServiceEndpoints.single(self.endpoint_url)
        env = {
            **endpoints.environment(),
            "QUEUE_URL": self.queue_url,
            "DLQ_URL": self.dlq_url,
            "MAX_RECEIVE_COUNT": str(self.max_receive_count),
            "OUTCOME_BUS_NAME": self.bus_name,
            "SWEEP_BUCKET": self.bucket,
            "REQUEST_LEDGER_TABLE": self.ledger_table,
        }
        # No SEMRUSH_TOKEN_SECRET_ID: the fleet-wide token is gone (the settings refuse it);
        # local runs use SEMRUSH_TOKEN (loopback) or IMS mode against the simulator.
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
    endpoints: str | ServiceEndpoints,
    names: LocalResourceNames,
    *,
    token: str | None = None,
    template: TemplateResources | None = None,
) -> LocalResources:
    """Create (or find) the queue, DLQ, bucket, bus, ledger table and, with ``token``, the secret.

    Args:
        endpoints: The local AWS endpoint (a moto server), or one per service.
        names: The resource names and queue settings.
        token: The Semrush token to store in the secret; no secret when absent.
        template: The template's settings (default: template.yaml's).

    Returns:
        The created resources.
    """
    urls = ServiceEndpoints.single(endpoints) if isinstance(endpoints, str) else endpoints
    declared = template or template_resources()
    sqs: SQSClient = local_client("sqs", urls.url("sqs"))
    s3: S3Client = local_client("s3", urls.url("s3"))
    events: EventBridgeClient = local_client("events", urls.url("events"))

    dlq_attributes: Any = dict(declared.dlq_attributes)
    dlq_url = sqs.create_queue(QueueName=names.dlq_name, Attributes=dlq_attributes)["QueueUrl"]
    dlq_arn = _queue_arn(sqs, dlq_url)
    # The stubs type the keys as literals; these come from the template (a test checks them).
    queue_attributes: Any = declared.queue_create_attributes(
        dlq_arn,
        visibility_timeout_s=names.visibility_timeout_s,
        max_receive_count=names.max_receive_count,
    )
    queue_url = sqs.create_queue(QueueName=names.queue_name, Attributes=queue_attributes)[
        "QueueUrl"
    ]
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

    create_ledger_table(
        local_client("dynamodb", urls.url("dynamodb")), names.ledger_table, declared
    )

    secret_id: str | None = None
    if token is not None:
        secrets: SecretsManagerClient = local_client("secretsmanager", urls.url("secretsmanager"))
        try:
            secrets.create_secret(Name=names.secret_id, SecretString=token)
        except ClientError as exc:
            if _code(exc) != "ResourceExistsException":
                raise
            secrets.put_secret_value(SecretId=names.secret_id, SecretString=token)
        secret_id = names.secret_id

    return LocalResources(
        endpoint_url=urls.default,
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
        endpoints=urls,
    )


def create_ledger_table(
    dynamodb: DynamoDBClient, table_name: str, template: TemplateResources | None = None
) -> None:
    """Create (or find) the request ledger table as the template declares it (keys, TTL)."""
    declared = template or template_resources()
    try:
        dynamodb.create_table(
            TableName=table_name,
            AttributeDefinitions=[dict(a) for a in declared.table_attribute_definitions],  # type: ignore[misc]
            KeySchema=[dict(k) for k in declared.table_key_schema],  # type: ignore[misc]
            BillingMode=declared.table_billing_mode,  # type: ignore[arg-type]
        )
    except ClientError as exc:
        if _code(exc) != "ResourceInUseException":
            raise
        return
    if declared.table_ttl.get("Enabled"):
        dynamodb.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={
                "Enabled": True,
                "AttributeName": str(declared.table_ttl["AttributeName"]),
            },
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
