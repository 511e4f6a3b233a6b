"""An IMS client pair kept in AWS Secrets Manager: the worker's consumer, the Sweep's emitter.

The secret's string is a JSON object with string ``client_id`` and ``client_secret``, and for
an emitter also ``promise_definition_id``; or an object of such pairs by NAME (a deployment may
hold several: ims-promise-tokens.md), of which the deployment names the one whose promise
definition carries the ``semrush`` scope (``IMS_PAIR_NAME``, default ``SEMRUSH``): an unknown
name is a configuration error. Read once per container (a pair does not rotate per
request) through Powertools Parameters over a Secrets Manager client with bounded timeouts and
retries (:mod:`.aws_clients`). No error raised here holds the secret's content: its role, its
name and what is wrong with its shape only.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final, Literal

from .aws_clients import AWS_CALL_BUDGET_S
from .http_edge import ConfigurationError
from .ims_client import ImsClientPair

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

PairRole = Literal["consumer", "emitter"]

DEFAULT_PAIR_NAME: Final = "SEMRUSH"
"""The dedicated Semrush pair's name (the shared doc's example)."""

PAIR_KEYS: Final[dict[PairRole, tuple[str, ...]]] = {
    "consumer": ("client_id", "client_secret"),
    "emitter": ("client_id", "client_secret", "promise_definition_id"),
}


class ImsPairSecretError(ConfigurationError):
    """The pair could not be read or is malformed (never quotes the secret)."""


def read_ims_pair(
    secret_id: str,
    role: PairRole,
    *,
    call_budget_s: float = AWS_CALL_BUDGET_S,
    client: SecretsManagerClient | None = None,
    pair_name: str = DEFAULT_PAIR_NAME,
) -> ImsClientPair:
    """The ``role`` pair stored in ``secret_id`` (the one named ``pair_name`` if it holds many).

    Raises:
        ImsPairSecretError: The secret could not be read, or is not that JSON object.
    """
    from aws_lambda_powertools.utilities.parameters import GetParameterError, SecretsProvider

    from .aws_clients import secretsmanager_client

    what = f"the IMS {role} secret {secret_id!r}"
    provider = SecretsProvider(boto3_client=client or secretsmanager_client(call_budget_s))
    try:
        value = provider.get(secret_id, force_fetch=True)
    except GetParameterError:
        # from None: the cause is botocore's, which names the secret and the failure only,
        # but a Powertools transform error could quote the value.
        raise ImsPairSecretError(f"could not read {what}") from None
    return _pair_from(value, PAIR_KEYS[role], what, pair_name)


def _pair_from(value: object, keys: tuple[str, ...], what: str, pair_name: str) -> ImsClientPair:
    document, what = _named_pair(_json_of(value, what), what, pair_name)
    if not isinstance(document, dict) or not all(
        isinstance(document.get(key), str) and document[key].strip() for key in keys
    ):
        raise ImsPairSecretError(
            f"{what} must be a JSON object with non-blank string " + ", ".join(keys)
        )
    return ImsClientPair(*(document[key].strip() for key in keys))


def _json_of(value: object, what: str) -> object:
    """The secret's JSON document (None when it is not a string at all)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    try:
        return json.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError:
        # from None: the decode error quotes the document, which is the secret.
        raise ImsPairSecretError(f"{what} is not JSON") from None


def _named_pair(document: object, what: str, pair_name: str) -> tuple[object, str]:
    """The deployment's pair of a secret of pairs by name, ``what`` then naming it.

    The deployment's is the one whose promise definition gives semrush; a secret of one pair
    is that pair.
    """
    if not isinstance(document, dict) or "client_id" in document:
        return document, what
    if pair_name not in document:
        raise ImsPairSecretError(f"{what} holds no pair named {pair_name!r} (IMS_PAIR_NAME)")
    return document[pair_name], f"{what} pair {pair_name!r}"
