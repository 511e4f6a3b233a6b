"""A sweep run's claim on its operator's authority: the one promise token the run holds.

The run acts with its operator's IMS identity (never a fleet-wide credential). The token lives
KMS-encrypted on the run's claim document (:func:`run_claim_name`), never in the checkpoint,
the report, the payload or a log: the CLI writes a ``handover`` (a token minted from the
operator's access token, or a promise token brought along) before it invokes, and every batch
exchanges the current token first and stores the rolled one before any Semrush call. When the
run ends (done, aborted, abandoned) the token is invalidated and scrubbed; a dead promise is
scrubbed too, and a resume hands over a new one.

Both tokens are ciphertext here (base64 of KMS ``Encrypt`` under :func:`run_token_context`):
this module never sees a token in plain text.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from .model import RunId

RUN_TOKEN_PURPOSE: Final = "serenity-allocator/sweep-promise-token"  # noqa: S105 - a name
"""The ``purpose`` of a run token's encryption context (the Sweep role's KMS condition)."""

RunClaimEnd = Literal["done", "aborted", "abandoned", "needsReauth"]
"""Why a claim holds no token any more."""

Ciphertext = Field(default=None, min_length=1, max_length=12_000)


def run_claim_name(run_id: str) -> str:
    """Where a run's claim (its encrypted promise token) is stored, dry or real alike."""
    return f"runs/{run_id}"


def run_token_context(run_id: str) -> dict[str, str]:
    """The encryption context of a run's token: a ciphertext decrypts for that run only."""
    return {"purpose": RUN_TOKEN_PURPOSE, "run_id": run_id}


class RunClaim(BaseModel):
    """The run's claim document: the current token, a handed-over one, or why there is none."""

    model_config = ConfigDict(extra="forbid")

    run_id: RunId
    promise_token: str | None = Ciphertext
    """The token the next batch exchanges (rolled at every batch)."""
    handover: str | None = Ciphertext
    """A token the CLI handed over for the next batch; it supersedes ``promise_token``."""
    ended: RunClaimEnd | None = None
    """Set when the token was scrubbed: the run ended, or its promise was dead."""

    def next_token(self) -> str | None:
        """The ciphertext the next batch exchanges: a handover first, else the rolled token."""
        return self.handover or self.promise_token

    def holds_token(self) -> bool:
        """True while the claim holds any token ciphertext."""
        return self.next_token() is not None
