"""An IMS emitter pair kept in AWS Secrets Manager.

The secret's string is JSON ``{"client_id", "client_secret", "promise_definition_id"}``. The
Sweep (a real run's releases) and the sweep CLI (an operator's access token) mint promise
tokens with it. No error here holds the secret's content: the name and the shape's fault only.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from .aws_clients import AWS_CALL_BUDGET_S, aws_error_code, secretsmanager_client
from .ims_client import ImsClientPair
from .semrush_origin import ConfigurationError

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

EMITTER_KEYS: Final = ("client_id", "client_secret", "promise_definition_id")


def read_emitter_pair(
    secret_id: str,
    *,
    call_budget_s: float = AWS_CALL_BUDGET_S,
    client: SecretsManagerClient | None = None,
) -> ImsClientPair:
    """The emitter pair stored in ``secret_id``.

    Raises:
        ConfigurationError: the secret cannot be read or is not that JSON object.
    """
    try:
        answer = (client or secretsmanager_client(call_budget_s)).get_secret_value(
            SecretId=secret_id
        )
    except (ClientError, BotoCoreError) as exc:
        raise ConfigurationError(
            f"could not read the IMS emitter secret {secret_id!r} ({aws_error_code(exc)})"
        ) from None
    try:
        document = json.loads(answer.get("SecretString") or "")
    except json.JSONDecodeError:
        # from None: the decoder's message quotes the document, which is the secret.
        raise ConfigurationError(f"the IMS emitter secret {secret_id!r} is not JSON") from None
    if not isinstance(document, dict) or not all(
        isinstance(document.get(key), str) and document[key].strip() for key in EMITTER_KEYS
    ):
        raise ConfigurationError(
            f"the IMS emitter secret {secret_id!r} must be a JSON object with string "
            + ", ".join(EMITTER_KEYS)
        )
    return ImsClientPair(*(document[key].strip() for key in EMITTER_KEYS))
