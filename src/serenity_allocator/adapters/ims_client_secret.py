"""An IMS client pair kept in AWS Secrets Manager: ``{"client_id", "client_secret"}`` as JSON.

The consumer pair (the Allocator and the Sweep) lives in the secret ``IMS_CONSUMER_SECRET_ID``;
an emitter pair (a service, or the sweep CLI minting from an operator's access token) also
carries ``promise_definition_id``. Read once per container; no error here holds the secret's
content, only the secret's name and what is wrong with its shape.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from .aws_clients import aws_error_code, secretsmanager_client
from .ims_client import ImsClientPair
from .semrush_origin import ConfigurationError

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient


def read_client_pair(
    secret_id: str, *, emitter: bool = False, client: SecretsManagerClient | None = None
) -> ImsClientPair:
    """The IMS client pair stored in ``secret_id``.

    Args:
        secret_id: The secret's name or ARN.
        emitter: Also read ``promise_definition_id`` (an emitter pair mints with it).
        client: A ready Secrets Manager client (else a bounded one is built).

    Raises:
        ConfigurationError: the secret cannot be read or is not the expected JSON object.
    """
    try:
        answer = (client or secretsmanager_client()).get_secret_value(SecretId=secret_id)
    except (ClientError, BotoCoreError) as exc:
        raise ConfigurationError(
            f"could not read the IMS client secret {secret_id!r} ({aws_error_code(exc)})"
        ) from None
    try:
        document = json.loads(answer.get("SecretString") or "")
    except json.JSONDecodeError:
        # from None: the decoder's message quotes the document, which is the secret.
        raise ConfigurationError(f"the IMS client secret {secret_id!r} is not JSON") from None
    keys = ("client_id", "client_secret", "promise_definition_id")[: 3 if emitter else 2]
    if not isinstance(document, dict) or not all(
        isinstance(document.get(key), str) and document[key].strip() for key in keys
    ):
        raise ConfigurationError(
            f"the IMS client secret {secret_id!r} must be a JSON object with string "
            + ", ".join(keys)
        )
    return ImsClientPair(
        document["client_id"],
        document["client_secret"],
        document["promise_definition_id"] if emitter else None,
    )
