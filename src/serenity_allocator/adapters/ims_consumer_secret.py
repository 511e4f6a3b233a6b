"""The IMS consumer pair from AWS Secrets Manager, read through Powertools Parameters.

The secret's string is JSON ``{"client_id": "...", "client_secret": "..."}``. Read once per
container (the pair does not rotate per request) with a Secrets Manager client of bounded
timeouts and retries (:mod:`.aws_clients`). No message raised here holds the secret's content.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .aws_clients import AWS_CALL_BUDGET_S
from .ims_client import ImsClientPair

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient


class ConsumerSecretError(RuntimeError):
    """The consumer pair could not be read or is malformed (never quotes the secret)."""


def read_consumer_pair(
    secret_id: str,
    *,
    call_budget_s: float = AWS_CALL_BUDGET_S,
    boto3_client: SecretsManagerClient | None = None,
) -> ImsClientPair:
    """The consumer pair stored in ``secret_id``.

    Raises:
        ConsumerSecretError: The secret could not be read, or is not the JSON pair.
    """
    from aws_lambda_powertools.utilities.parameters import GetParameterError, SecretsProvider

    from .aws_clients import secretsmanager_client

    provider = SecretsProvider(boto3_client=boto3_client or secretsmanager_client(call_budget_s))
    try:
        value = provider.get(secret_id, force_fetch=True)
    except GetParameterError as exc:
        # The cause names the secret and the AWS failure, never the value.
        raise ConsumerSecretError("could not read the IMS consumer secret") from exc
    return _pair_from(value)


def _pair_from(value: object) -> ImsClientPair:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise ConsumerSecretError("the IMS consumer secret is not a string")
    try:
        document = json.loads(value)
    except json.JSONDecodeError:
        # from None: the decode error quotes the document, which is the secret.
        raise ConsumerSecretError("the IMS consumer secret is not valid JSON") from None
    client_id = document.get("client_id") if isinstance(document, dict) else None
    client_secret = document.get("client_secret") if isinstance(document, dict) else None
    if not isinstance(client_id, str) or not isinstance(client_secret, str):
        raise ConsumerSecretError(
            'the IMS consumer secret needs string "client_id" and "client_secret"'
        )
    try:
        return ImsClientPair(client_id.strip(), client_secret.strip())
    except ValueError:
        raise ConsumerSecretError("the IMS consumer secret holds a blank pair") from None
