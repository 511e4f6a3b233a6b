"""Where the Semrush bearer token comes from: a fixed string or an AWS Secrets Manager secret.

The client asks for the token on every request and asks for a refreshed one after a 401, so a
rotated secret is picked up without a cold start. No message raised here ever holds the token
or the secret's content.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider
    from mypy_boto3_secretsmanager import SecretsManagerClient


class TokenProvider(Protocol):
    """Supplies the bearer token for the Semrush User Manager API."""

    def get_token(self, *, refresh: bool = False) -> str:
        """Return the current token; ``refresh=True`` bypasses any cache (after a 401)."""
        ...


class TokenProviderError(RuntimeError):
    """The token could not be obtained; the message never holds the token or secret content."""


class StaticTokenProvider:
    """A fixed token (local runs against the simulator, tests).

    Args:
        token: The bearer token; must be non-blank.
    """

    def __init__(self, token: str) -> None:
        if not token.strip():
            raise TokenProviderError("the Semrush token is blank")
        self._token = token

    def get_token(self, *, refresh: bool = False) -> str:
        """Return the fixed token; a refresh has nothing newer to fetch."""
        return self._token

    def __repr__(self) -> str:
        # The default dataclass-like repr would print the token into any debug output.
        return "StaticTokenProvider(token=***)"


class SecretsManagerTokenProvider:
    """The token stored in an AWS Secrets Manager secret, cached through Powertools Parameters.

    The secret string is either the raw token (``tok-...``) or a JSON object
    ``{"token": "tok-..."}``; surrounding whitespace is ignored. The endpoint follows boto3's
    usual resolution, so ``AWS_ENDPOINT_URL`` points it at a local moto server; its client has
    the bounded timeouts and retries of :mod:`.aws_clients`.

    A Powertools ``SecretsProvider`` of its own (rather than the module-level ``get_secret``,
    whose provider and cache are process globals) ties the boto3 client and the cache to this
    object: the handler caches one per container, and tests with their own endpoint never see
    another test's client or cached value. It is built on first use, so importing this module
    and constructing the provider cost nothing at cold start.

    Args:
        secret_id: Name or ARN of the secret.
        max_age_s: Seconds a fetched value is reused before Secrets Manager is asked again.
        boto3_client: An optional ready Secrets Manager client (otherwise one is built lazily).
    """

    def __init__(
        self,
        secret_id: str,
        max_age_s: int = 300,
        *,
        boto3_client: SecretsManagerClient | None = None,
    ) -> None:
        if not secret_id.strip():
            raise TokenProviderError("the Semrush token secret id is blank")
        if max_age_s < 0:
            raise TokenProviderError("the Semrush token cache age must not be negative")
        self._secret_id = secret_id
        self._max_age_s = max_age_s
        self._boto3_client = boto3_client
        self._provider: SecretsProvider | None = None
        self._refetch = False
        """Set when the last value read was malformed: the next read bypasses the cache."""

    def get_token(self, *, refresh: bool = False) -> str:
        """Return the token from the secret, fetching again when ``refresh`` or the cache aged.

        Raises:
            TokenProviderError: The secret could not be read or holds no token.
        """
        # Imported here: Powertools parameters pulls in boto3, which the cold start should only
        # pay for when a token is actually needed.
        from aws_lambda_powertools.utilities.parameters import GetParameterError, SecretsProvider

        if self._provider is None:
            from .aws_clients import secretsmanager_client

            client = self._boto3_client or secretsmanager_client()
            self._provider = SecretsProvider(boto3_client=client)
        try:
            value = self._provider.get(
                self._secret_id, max_age=self._max_age_s, force_fetch=refresh or self._refetch
            )
        except GetParameterError as exc:
            # The cause (a botocore error) names the secret and the failure, never its value.
            raise TokenProviderError("could not read the Semrush token secret") from exc
        try:
            token = _token_from_secret(value)
        except TokenProviderError:
            # Never serve a malformed value from the cache for its whole max age: a fixed
            # secret must be picked up by the next read.
            self._refetch = True
            raise
        self._refetch = False
        return token


def _token_from_secret(value: object) -> str:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise TokenProviderError("the Semrush token secret is not UTF-8 text") from None
    if not isinstance(value, str):
        raise TokenProviderError("the Semrush token secret is not a string")
    text = value.strip()
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            # from None: the decode error quotes the document, which is the secret.
            raise TokenProviderError("the Semrush token secret is not valid JSON") from None
        token = document.get("token") if isinstance(document, dict) else None
        if not isinstance(token, str):
            raise TokenProviderError('the Semrush token secret JSON has no string "token"')
        text = token.strip()
    if not text:
        raise TokenProviderError("the Semrush token secret is blank")
    return text
