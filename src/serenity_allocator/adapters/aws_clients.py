"""One way to build a boto3 client: lazily, with timeouts and retries that fit a Lambda.

botocore's defaults (60 s connect, 60 s read, legacy retries) let one slow call outlive the
Allocator's 60 s invocation. Every adapter builds its client here instead, with an explicit
``Config``: short connect and read timeouts and the ``standard`` retry mode with a bounded
number of attempts, so the worst case of one call is known (at most
:data:`AWS_CALL_BUDGET_S`, less for a function whose whole run is shorter) and a caller can check
that it still fits before making it.

boto3 is imported on first use only: building an adapter costs nothing at cold start. The
endpoint follows boto3's usual resolution (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_SQS``...),
so the same code talks to a local moto server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from botocore.config import Config
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sqs import SQSClient

CONNECT_TIMEOUT_S = 1.0
"""A TCP connect to a regional AWS endpoint takes milliseconds; a second means trouble."""
READ_TIMEOUT_S = 4.0
"""SendMessage(Batch), PutEvents, GetObject of a checkpoint answer in well under a second."""
MAX_ATTEMPTS = 2
"""Total attempts per call, the first included (botocore's ``total_max_attempts``; its
``max_attempts`` would count retries only)."""
MAX_RETRY_WAIT_S = 6.0
"""The standard mode's wait before the second attempt: at most 1 s (throttling scale x 2**0),
raised by an ``x-amz-retry-after`` header to at most 5 s more."""
AWS_CALL_BUDGET_S = MAX_ATTEMPTS * (CONNECT_TIMEOUT_S + READ_TIMEOUT_S) + MAX_RETRY_WAIT_S
"""The longest one AWS call may take with the most patient configuration (16 s)."""
_MIN_READ_S = 1.0
POOL_CONNECTIONS = 20
"""Connections a client keeps: the Allocator's credential calls of one batch run at once."""

ClientT = TypeVar("ClientT")


@dataclass(frozen=True)
class CallTimeouts:
    """Connect and read timeouts and total attempts of one AWS call."""

    connect_s: float
    read_s: float
    attempts: int

    @property
    def worst_case_s(self) -> float:
        """The longest one call can take: every attempt timing out, and the wait between."""
        wait = MAX_RETRY_WAIT_S if self.attempts > 1 else 0.0
        return self.attempts * (self.connect_s + self.read_s) + wait


def call_timeouts(budget_s: float = AWS_CALL_BUDGET_S) -> CallTimeouts:
    """The most patient timeouts whose worst case fits ``budget_s`` (a short function's too).

    From 16 s up: 1 s connect, 4 s read, two attempts. Down to 10 s: the read shrinks, still two
    attempts. Below that: one attempt sharing the budget (the queue is the longer retry loop).
    """
    if budget_s >= 2 * (CONNECT_TIMEOUT_S + _MIN_READ_S) + MAX_RETRY_WAIT_S:
        read_s = min(READ_TIMEOUT_S, (budget_s - MAX_RETRY_WAIT_S) / 2 - CONNECT_TIMEOUT_S)
        return CallTimeouts(CONNECT_TIMEOUT_S, read_s, MAX_ATTEMPTS)
    connect_s = min(CONNECT_TIMEOUT_S, budget_s / 4)
    return CallTimeouts(connect_s, max(budget_s - connect_s, 0.0), 1)


def client_config(budget_s: float = AWS_CALL_BUDGET_S) -> Config:
    """The botocore ``Config`` of a client whose every call ends within ``budget_s``."""
    from botocore.config import Config

    timeouts = call_timeouts(budget_s)
    return Config(
        # A batch's credential calls run at once (two per record of a FIFO batch of 10): each
        # keeps its connection rather than one discarded past botocore's default of 10.
        max_pool_connections=POOL_CONNECTIONS,
        connect_timeout=timeouts.connect_s,
        read_timeout=timeouts.read_s,
        retries={"mode": "standard", "total_max_attempts": timeouts.attempts},
    )


def aws_error_code(exc: Exception) -> str:
    """The AWS error code of a boto3 failure (``ThrottlingException``...), else its kind."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if code:
            return str(code)
    return type(exc).__name__


class LazyClient(Generic[ClientT]):
    """A client built on first use (or the ready one a caller handed in), then reused.

    Args:
        build: Builds the client (one of this module's ``*_client`` functions).
        ready: A ready client (tests, or a caller with its own configuration).
    """

    def __init__(self, build: Callable[[], ClientT], ready: ClientT | None = None) -> None:
        self._build = build
        self._client = ready
        # boto3's default session is not thread-safe: one thread builds, the others wait.
        self._lock = threading.Lock()

    def get(self) -> ClientT:
        """The client, built now if this is the first use (once, whatever the thread)."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._build()
                client = self._client
        return client


def sqs_client(budget_s: float = AWS_CALL_BUDGET_S) -> SQSClient:
    """An SQS client with the bounded configuration."""
    import boto3

    return boto3.client("sqs", config=client_config(budget_s))


def events_client(budget_s: float = AWS_CALL_BUDGET_S) -> EventBridgeClient:
    """An EventBridge client with the bounded configuration."""
    import boto3

    return boto3.client("events", config=client_config(budget_s))


def s3_client(budget_s: float = AWS_CALL_BUDGET_S) -> S3Client:
    """An S3 client with the bounded configuration."""
    import boto3

    return boto3.client("s3", config=client_config(budget_s))


def secretsmanager_client(budget_s: float = AWS_CALL_BUDGET_S) -> SecretsManagerClient:
    """A Secrets Manager client with the bounded configuration."""
    import boto3

    return boto3.client("secretsmanager", config=client_config(budget_s))


def dynamodb_client(budget_s: float = AWS_CALL_BUDGET_S) -> DynamoDBClient:
    """A DynamoDB client with the bounded configuration."""
    import boto3

    return boto3.client("dynamodb", config=client_config(budget_s))
