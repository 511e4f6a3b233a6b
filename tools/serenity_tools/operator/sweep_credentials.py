"""The operator's IMS authority for a sweep run: read it safely, hand it over onto the run claim.

A run acts with its operator's identity. The CLI takes the operator's IMS ACCESS token (and
mints a promise token from it with the emitter pair) or a PROMISE token, from an environment
variable or a file, never from a flag value (which would land in shell history):

- ``SWEEP_IMS_ACCESS_TOKEN`` or ``--access-token-file PATH``: the operator's access token;
- ``SWEEP_PROMISE_TOKEN`` or ``--promise-token-file PATH``: a promise token minted elsewhere.

Before the first invocation it writes the promise token, KMS-encrypted under the run's context,
onto the run's claim in the sweep bucket (``sweep/runs/<run_id>.json``), so the token never
travels in a Lambda payload or a Step Functions history. A resume with a token hands the new one
over the same way (the first batch exchanges it and invalidates the old chain).

Minting needs ``IMS_HOST`` and the emitter pair: ``IMS_EMITTER_SECRET_ID`` (a Secrets Manager
secret ``{"client_id", "client_secret", "promise_definition_id"}``) or, with a loopback
``IMS_HOST`` only, ``IMS_EMITTER_CLIENT_ID``, ``IMS_EMITTER_CLIENT_SECRET`` and
``IMS_PROMISE_DEFINITION_ID``. The claim needs ``--sweep-bucket`` (or ``SWEEP_BUCKET``) and
``--credentials-key-arn`` (or ``CREDENTIALS_KEY_ARN``): stack outputs ``SweepBucketName`` and
``CredentialsKeyArn``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .sweep_payloads import SweepCliError

if TYPE_CHECKING:
    from serenity_allocator.adapters.ims_client import ImsClientPair

ACCESS_TOKEN_ENV = "SWEEP_IMS_ACCESS_TOKEN"  # noqa: S105 - a variable's name, not a secret
PROMISE_TOKEN_ENV = "SWEEP_PROMISE_TOKEN"  # noqa: S105 - a variable's name, not a secret


@dataclass(frozen=True)
class OperatorToken:
    """The operator's token as given; its value never shows in a repr."""

    kind: Literal["access", "promise"]
    value: str = field(repr=False)
    source: str
    """Where it came from (a variable's name or a file's path), for messages."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the token and claim flags of ``sweep``."""
    parser.add_argument(
        "--access-token-file",
        metavar="PATH",
        help=f"file holding your IMS access token (or set {ACCESS_TOKEN_ENV}); a promise token "
        "is minted from it and handed to the run",
    )
    parser.add_argument(
        "--promise-token-file",
        metavar="PATH",
        help=f"file holding a promise token to hand to the run (or set {PROMISE_TOKEN_ENV})",
    )
    parser.add_argument(
        "--sweep-bucket",
        metavar="NAME",
        help="the sweep bucket, where the run claim holds the token (default: $SWEEP_BUCKET)",
    )
    parser.add_argument(
        "--credentials-key-arn",
        metavar="ARN",
        help="the KMS key the token is encrypted with (default: $CREDENTIALS_KEY_ARN)",
    )


def read_operator_token(args: argparse.Namespace, env: Mapping[str, str]) -> OperatorToken | None:
    """The one token given (file or variable), or None when none is.

    Raises:
        SweepCliError: more than one given, an unreadable or blank file, a blank variable.
    """
    given: list[tuple[Literal["access", "promise"], str, str]] = []
    sources: tuple[tuple[Literal["access", "promise"], str | None, str], ...] = (
        ("access", args.access_token_file, ACCESS_TOKEN_ENV),
        ("promise", args.promise_token_file, PROMISE_TOKEN_ENV),
    )
    for kind, path, variable in sources:
        if path is not None:
            given.append((kind, f"--{kind}-token-file", _read_file(path, kind)))
        if variable in env:
            given.append((kind, variable, env[variable]))
    if len(given) > 1:
        named = ", ".join(source for _, source, _ in given)
        raise SweepCliError(f"give one token, not several ({named})")
    if not given:
        return None
    kind, source, value = given[0]
    text = value.strip()
    if not text:
        raise SweepCliError(f"{source}: the token is blank")
    return OperatorToken(kind, text, source)


def _read_file(path: str, kind: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        # Neither the content nor the path is shown: a token typed where the path goes (or an
        # abbreviated --access-token VALUE) must not be printed back.
        raise SweepCliError(
            f"--{kind}-token-file: cannot read the file ({type(exc).__name__})"
        ) from None


def hand_over(
    args: argparse.Namespace, env: Mapping[str, str], run_id: str, token: OperatorToken
) -> None:
    """Mint (from an access token) and write the promise token onto the run's claim.

    Raises:
        SweepCliError: a missing setting, IMS refusing the access token, or AWS refusing.
    """
    from serenity_allocator.adapters.credential_store import KmsTokenCipher, TokenCipherError
    from serenity_allocator.adapters.s3_checkpoint_store import (
        CheckpointStoreError,
        S3CheckpointStore,
    )
    from serenity_allocator.application.sweep.run_tokens import hand_over_run_token
    from serenity_allocator.domain.sweep.errors import RunInProgressError

    bucket = args.sweep_bucket or env.get("SWEEP_BUCKET", "")
    key = args.credentials_key_arn or env.get("CREDENTIALS_KEY_ARN", "")
    if not bucket.strip() or not key.strip():
        raise SweepCliError(
            "handing a token to the run needs --sweep-bucket and --credentials-key-arn "
            "(or SWEEP_BUCKET and CREDENTIALS_KEY_ARN): stack outputs SweepBucketName and "
            "CredentialsKeyArn"
        )
    promise = token.value if token.kind == "promise" else _mint(env, token)
    try:
        hand_over_run_token(S3CheckpointStore(bucket), KmsTokenCipher(key), run_id, promise)
    except (CheckpointStoreError, TokenCipherError) as exc:
        raise SweepCliError(f"could not hand the token to run {run_id}: {exc}") from None
    except RunInProgressError:
        raise SweepCliError(
            f"run {run_id}'s claim changed while the token was handed over (a batch is "
            "running); wait for it and try again"
        ) from None


def _mint(env: Mapping[str, str], token: OperatorToken) -> str:
    """A promise token minted from the operator's access token with the emitter pair."""
    from serenity_allocator.adapters.http_edge import ConfigurationError
    from serenity_allocator.adapters.ims_client import ImsClient, ImsRequestError
    from serenity_allocator.domain.errors import ImsUnavailableError, NeedsReauthError

    try:
        with ImsClient(env.get("IMS_HOST", ""), emitter=_emitter_pair(env)) as ims:
            return ims.mint(token.value).promise_token
    except ConfigurationError as exc:
        raise SweepCliError(f"minting a promise token: {exc}") from None
    except NeedsReauthError:
        raise SweepCliError(
            f"IMS refused the access token from {token.source} (needsReauth): log in again "
            "and take a fresh access token"
        ) from None
    except (ImsUnavailableError, ImsRequestError) as exc:
        raise SweepCliError(f"IMS could not mint a promise token: {exc}") from None


def _emitter_pair(env: Mapping[str, str]) -> ImsClientPair:
    from serenity_allocator.adapters.http_edge import ConfigurationError, is_loopback_origin
    from serenity_allocator.adapters.ims_client import ImsClientPair

    if env.get("IMS_EMITTER_SECRET_ID", "").strip():
        from serenity_allocator.adapters.ims_client import read_ims_pair

        return read_ims_pair(env["IMS_EMITTER_SECRET_ID"], "emitter")
    names = ("IMS_EMITTER_CLIENT_ID", "IMS_EMITTER_CLIENT_SECRET", "IMS_PROMISE_DEFINITION_ID")
    if not all(env.get(name, "").strip() for name in names):
        raise ConfigurationError(
            "an access token is minted with the emitter pair: set IMS_EMITTER_SECRET_ID (or, "
            "with a loopback IMS_HOST, " + ", ".join(names) + ")"
        )
    if not is_loopback_origin(env.get("IMS_HOST", "")):
        raise ConfigurationError(
            "IMS_EMITTER_CLIENT_ID/_SECRET are accepted only with a loopback IMS_HOST; "
            "use IMS_EMITTER_SECRET_ID"
        )
    return ImsClientPair(*(env[name] for name in names))
