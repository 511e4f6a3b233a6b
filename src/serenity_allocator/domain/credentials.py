"""What ending a request's user authority did: a value the broker port answers (no token)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CredentialEnd:
    """The result of invalidating and scrubbing a request's promise token.

    ``invalidated``: True when IMS confirmed, False when it did not (best effort: logged and
    counted, the outcome stands), None when no token was invalidated (none held, or dead).
    ``scrub_error``: why the record kept its token (an AWS code), None when scrubbed.
    """

    invalidated: bool | None
    scrub_error: str | None = None
