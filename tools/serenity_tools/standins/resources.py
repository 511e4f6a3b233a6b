"""Create, on a local AWS endpoint (moto, or any one given), the resources template.yaml declares.

The allocation FIFO queue with a redrive policy to its FIFO DLQ, the sweep checkpoint bucket,
the outcome event bus, the request ledger table, the credentials table and its KMS key (where
producers write a request's encrypted promise token), when given the IMS consumer pair its
Secrets Manager secret, and, when a token is given, the static Semrush token's secret. The
queue, DLQ, table and key settings are read from template.yaml (:mod:`.template_resources`:
deduplication scope per message group, throughput per group, the redrive policy, the tables'
keys and TTLs, the key's usage); only the named local overrides differ. Creating is
idempotent, so ``local up`` can run twice against the same server.

This is local tooling on a known local endpoint, so ``endpoint_url`` is passed explicitly here
(production code never does: it follows ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from serenity_tools.standins.aws_endpoints import ServiceEndpoints
from serenity_tools.standins.template_resources import (
    TableSpec,
    TemplateResources,
    template_resources,
)

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
    credentials_table: str = "serenity-allocator-local-credentials"
    consumer_secret_id: str = "serenity-allocator/local/ims-consumer"  # noqa: S105 - a name
    emitter_secret_id: str = "serenity-allocator/local/ims-emitter"  # noqa: S105 - a name
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
            credentials_table=f"{self.credentials_table}-{tag}",
            consumer_secret_id=f"{self.consumer_secret_id}-{tag}",
            emitter_secret_id=f"{self.emitter_secret_id}-{tag}",
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
    credentials_table: str = ""
    credentials_key_arn: str = ""
    consumer_secret_id: str | None = None
    """The IMS consumer pair's secret (JSON ``{"client_id", "client_secret"}``), when made."""
    emitter_secret_id: str | None = None
    """The IMS emitter pair's secret (JSON ``{"client_id", "client_secret",
    "promise_definition_id"}``: the Sweep mints its releases' promises with it), when made."""

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

    def credential_environment(self) -> dict[str, str]:
        """The IMS-mode variables naming these resources (the IMS origin comes on top)."""
        if not self.credentials_table or self.consumer_secret_id is None:
            raise RuntimeError("these resources have no credentials table or consumer secret")
        env = {
            "IMS_CONSUMER_SECRET_ID": self.consumer_secret_id,
            "CREDENTIALS_TABLE": self.credentials_table,
            "CREDENTIALS_KEY_ARN": self.credentials_key_arn,
        }
        if self.emitter_secret_id is not None:
            # The Sweep's releases carry its operator's authority: it mints one per release.
            env["IMS_EMITTER_SECRET_ID"] = self.emitter_secret_id
        return env


def local_client(service: str, endpoint_url: str) -> Any:
    """A boto3 client on the local endpoint, with dummy credentials unless some are set.

    One client per service, endpoint, region and credentials, shared by every caller of this
    process (boto3 clients are thread-safe): building one costs milliseconds of CPU, and each
    test's resources took six. A caller that registers event handlers builds its own.
    """
    # Explicit dummies: without them botocore would look for credentials (and may query the
    # instance metadata service, which is slow to time out off EC2).
    return _shared_client(
        service,
        endpoint_url,
        os.environ.get("AWS_DEFAULT_REGION") or LOCAL_REGION,
        os.environ.get("AWS_ACCESS_KEY_ID") or "testing",
        os.environ.get("AWS_SECRET_ACCESS_KEY") or "testing",
    )


@functools.lru_cache(maxsize=64)
def _shared_client(
    service: str, endpoint_url: str, region: str, access_key_id: str, secret_access_key: str
) -> Any:
    import boto3

    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
    )


def create_local_resources(
    endpoints: str | ServiceEndpoints,
    names: LocalResourceNames,
    *,
    token: str | None = None,
    ims_consumer: Mapping[str, str] | None = None,
    ims_emitter: Mapping[str, str] | None = None,
    template: TemplateResources | None = None,
) -> LocalResources:
    """Create (or find) the queues, bucket, bus, tables, credentials key and secrets.

    Args:
        endpoints: The local AWS endpoint (a moto server), or one per service.
        names: The resource names and queue settings.
        token: The Semrush token to store in the secret; no secret when absent.
        ims_consumer: The IMS consumer pair (``{"client_id", "client_secret"}``) to store in
            the consumer secret; no consumer secret when absent.
        ims_emitter: The IMS emitter pair (with its ``promise_definition_id``) to store in the
            emitter secret; none when absent.
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

    dynamodb: DynamoDBClient = local_client("dynamodb", urls.url("dynamodb"))
    create_ledger_table(dynamodb, names.ledger_table, declared)
    create_table(dynamodb, names.credentials_table, declared.credentials_table)
    key_arn = create_credentials_key(local_client("kms", urls.url("kms")), names, declared)

    secrets: SecretsManagerClient = local_client("secretsmanager", urls.url("secretsmanager"))
    secret_id = _stored(secrets, names.secret_id, token)
    consumer_secret_id = _stored(
        secrets, names.consumer_secret_id, _pair_json(ims_consumer, _CONSUMER_KEYS)
    )
    emitter_secret_id = _stored(
        secrets, names.emitter_secret_id, _pair_json(ims_emitter, _EMITTER_KEYS)
    )

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
        credentials_table=names.credentials_table,
        credentials_key_arn=key_arn,
        consumer_secret_id=consumer_secret_id,
        emitter_secret_id=emitter_secret_id,
    )


_CONSUMER_KEYS = ("client_id", "client_secret")
_EMITTER_KEYS = ("client_id", "client_secret", "promise_definition_id")


def _pair_json(pair: Mapping[str, str] | None, keys: tuple[str, ...]) -> str | None:
    return None if pair is None else json.dumps({key: pair[key] for key in keys})


def _stored(secrets: SecretsManagerClient, name: str, value: str | None) -> str | None:
    """Store ``value`` as the secret ``name`` and return the name; None (nothing) for None."""
    if value is None:
        return None
    put_secret(secrets, name, value)
    return name


def put_secret(secrets: SecretsManagerClient, name: str, value: str) -> None:
    """Create the secret ``name`` holding ``value``, or store ``value`` as its new version."""
    try:
        secrets.create_secret(Name=name, SecretString=value)
    except ClientError as exc:
        if _code(exc) != "ResourceExistsException":
            raise
        secrets.put_secret_value(SecretId=name, SecretString=value)


def create_ledger_table(
    dynamodb: DynamoDBClient, table_name: str, template: TemplateResources | None = None
) -> None:
    """Create (or find) the request ledger table as the template declares it (keys, TTL)."""
    create_table(dynamodb, table_name, (template or template_resources()).ledger_table)


def create_table(dynamodb: DynamoDBClient, table_name: str, spec: TableSpec) -> None:
    """Create (or find) a table with the template's keys, billing mode and TTL."""
    try:
        dynamodb.create_table(
            TableName=table_name,
            AttributeDefinitions=[dict(a) for a in spec.attribute_definitions],  # type: ignore[misc]
            KeySchema=[dict(k) for k in spec.key_schema],  # type: ignore[misc]
            BillingMode=spec.billing_mode,  # type: ignore[arg-type]
        )
    except ClientError as exc:
        if _code(exc) != "ResourceInUseException":
            raise
        return
    if spec.ttl.get("Enabled"):
        dynamodb.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={
                "Enabled": True,
                "AttributeName": str(spec.ttl["AttributeName"]),
            },
        )


def create_credentials_key(
    kms: Any, names: LocalResourceNames, template: TemplateResources | None = None
) -> str:
    """Find (by its local alias) or create the credentials key as the template declares it.

    Returns:
        The key's ARN (``CREDENTIALS_KEY_ARN``).
    """
    spec = (template or template_resources()).credentials_key
    alias = f"alias/{names.credentials_table}"
    try:
        return str(kms.describe_key(KeyId=alias)["KeyMetadata"]["Arn"])
    except ClientError as exc:
        if _code(exc) != "NotFoundException":
            raise
    metadata = kms.create_key(
        Description=spec.description,
        KeyUsage=spec.key_usage,
        KeySpec=spec.key_spec,
    )["KeyMetadata"]
    # An alias makes the key findable again, so creating stays idempotent (``local up`` twice).
    kms.create_alias(AliasName=alias, TargetKeyId=metadata["KeyId"])
    return str(metadata["Arn"])


def _fifo_name(name: str, tag: str) -> str:
    stem = name.removesuffix(".fifo")
    # SQS queue names are at most 80 characters, ".fifo" included.
    return f"{stem[: 80 - len('.fifo') - len(tag) - 1]}-{tag}.fifo"


def _queue_arn(sqs: SQSClient, queue_url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return attributes["Attributes"]["QueueArn"]


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
