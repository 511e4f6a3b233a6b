"""Typed errors of the allocation domain, and the classifiers that tell upstream answers apart.

Each coded error carries a stable ``code`` and a generic message: no workspace ids and no pool
numbers, because messages can reach clients; ids go to the logs through the caller.

The classifiers are all in this one place. The upstream uses one status (422) for two meanings
that only the message text tells apart (semrush-user-manager.md, "The two 422s share a status
code"), and disguises a metered-quota rejection as a 405 on the Project Engine gateway.
Matching on text is the upstream's contract for the 422s, so it is done here and nowhere else:
always status AND text. The 405 is told apart by the SHAPE of its body instead ("Metered writes
happen elsewhere"). Every classifier reads the RAW upstream body: redaction is for what is
logged or stored, and a redacted body may no longer say what it said (a short token can be a
substring of the text).
"""

from __future__ import annotations

import json
from typing import ClassVar


class AllocationError(Exception):
    """An expected allocation failure with a stable code."""

    code: ClassVar[str] = "allocationError"
    message: ClassVar[str] = "allocation failed"
    transient: ClassVar[bool] = False
    """True when a later retry could succeed (the queue should redeliver the request)."""

    def __init__(self) -> None:
        super().__init__(self.message)


class OrgPoolExhaustedError(AllocationError):
    """The org pool cannot cover the top-up (the transfer's authoritative 422)."""

    code = "orgPoolExhausted"
    message = "the organization pool has too few free units for this top-up"


class BrandAiLimitError(AllocationError):
    """The top-up would take a child above its per-brand ceiling."""

    code = "brandAiLimit"
    message = "the top-up would exceed the brand's AI ceiling"

    def __init__(self, dimension: str, requested: int, ceiling: int) -> None:
        super().__init__()
        self.dimension = dimension
        self.requested = requested
        self.ceiling = ceiling


class TieredPromptsError(AllocationError):
    """The ensure needs a prompts transfer on a workspace in the tiered prompt shape.

    Terminal: the transfer takes only a flat ``prompts`` number whose effect on a daily/weekly
    tiered workspace nobody knows, so the allocator never sends one (semrush-user-manager.md,
    "The tiered prompt shape"). A retry would meet the same shape.
    """

    code = "tieredPrompts"
    message = "the workspace's prompt quota is tiered; the allocator cannot top it up"


class WorkspaceBusyError(AllocationError):
    """The child stayed ``not ready`` through every allowed retry."""

    code = "workspaceBusy"
    message = "the workspace is busy settling a previous change"
    transient = True


class SettleTimeoutError(AllocationError):
    """A transfer was accepted but the child did not return to ``created`` in time."""

    code = "settleTimeout"
    message = "the workspace did not settle after the transfer"
    transient = True


class OutOfTimeError(AllocationError):
    """Not enough time is left before the caller's deadline to attempt the call safely."""

    code = "outOfTime"
    message = "not enough time left to attempt the transfer"
    transient = True


class RateLimitedError(AllocationError):
    """The upstream kept answering 429 after the client's own retries."""

    code = "rateLimited"
    message = "the upstream is rate limiting requests"
    transient = True


class UpstreamUnavailableError(AllocationError):
    """The upstream could not be reached (connection error or timeout after retries)."""

    code = "upstreamUnavailable"
    message = "the upstream could not be reached"
    transient = True


class UpstreamError(Exception):
    """A non-success answer from the upstream, carrying its status and body text.

    Raised by gateway adapters; the classifiers below read ``body``, the RAW
    answer (a redacted copy can stop saying what it said, e.g. when a short token is a
    substring of the message). ``body`` is for classification only: log or store the string
    form, which holds the status and a bounded excerpt of ``shown``, never a URL or a token.

    Args:
        status: The HTTP status.
        body: The raw body text, as the upstream sent it.
        operation: The operation's name, for the message.
        shown: The body as it may be logged (secrets redacted); ``body`` when not given.
        retry_after_s: The answer's ``Retry-After`` in seconds (a 429/503), when it had one.
    """

    def __init__(
        self,
        status: int,
        body: str,
        operation: str = "",
        *,
        shown: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.operation = operation
        self.retry_after_s = retry_after_s
        shown = body if shown is None else shown
        excerpt = shown if len(shown) <= 200 else shown[:200] + "..."
        where = f"{operation}: " if operation else ""
        super().__init__(f"{where}upstream answered {status}: {excerpt}")


class MalformedResponseError(ValueError):
    """The upstream answered 2xx with a body that breaks the documented shape."""


class MalformedExchangeError(MalformedResponseError):
    """A 2xx exchange answer without a usable access token but WITH the rolled promise token.

    IMS processed the exchange (the token passed in is spent), so the rolled one is the
    promise's only life: the caller stores it before failing, and the request (or the sweep
    run) comes back with a live token instead of a spent one. Never shows the token.
    """

    def __init__(self, rolled: str) -> None:
        self.rolled = rolled
        super().__init__("IMS exchange: answer has no access_token (the rolled token is kept)")

    def __repr__(self) -> str:
        return "MalformedExchangeError(rolled=***)"


class WiringError(ValueError):
    """A caller passed an argument that can only come from a programming error (blank id)."""


class NeedsReauthError(AllocationError):
    """IMS refused the user's token (401/403 at mint or exchange): the promise is dead.

    Terminal, never retried (ims-promise-tokens.md: "a rejected exchange is terminal"): a human
    re-mints a promise token for the user and redrives the request.
    """

    code = "needsReauth"
    message = "the user's authorization must be renewed before this request can run"


class ImsClientRefusedError(AllocationError):
    """IMS refused the deployment's client pair itself (``invalid_client``): a configuration fault.

    Not the user's: a wrong or rotated consumer (or emitter) secret refuses every request
    alike. Transient, so every promise is kept (nothing invalidated, nothing scrubbed): the
    record comes back, the container re-reads the pair, and after the pair is fixed the next
    receive (or a redrive of the dead letter) runs. Alarmed as configuration
    (runbooks/credentials.md#imsclientrefused).
    """

    code = "imsClientRefused"
    message = "the identity service refused this deployment's client pair (configuration)"
    transient = True


class SemrushScopeMissingError(AllocationError):
    """IMS exchanged the promise, but the access token lacks the ``semrush`` scope.

    The exchange answer's ``scope`` names what the token holds; without ``semrush`` Semrush
    refuses it like a non-member for EVERY request (ims-promise-tokens.md): the promise was
    minted or exchanged with a pair whose definition lacks the scope (not the deployment's
    Semrush pair). Our configuration, told apart from a user who is not a member before any
    Semrush call: transient, the rolled promise kept on the record, alarmed
    (runbooks/credentials.md#semrushscopemissing).
    """

    code = "semrushScopeMissing"
    message = "the exchanged token lacks the semrush scope (the deployment's IMS pair)"
    transient = True


class ImsUnavailableError(AllocationError):
    """IMS kept answering 429/5xx or could not be reached within the retries and the deadline."""

    code = "imsUnavailable"
    message = "the identity service could not be reached"
    transient = True


class NoCredentialError(AllocationError):
    """IMS mode: the request has no usable credential record.

    Absent, expired, scrubbed, or not decryptable for this request and child. Terminal:
    dead-lettered with this reason; a new record (re-mint) and a redrive run it.
    """

    code = "noCredential"
    message = "the request carries no usable user authorization"


class CredentialUnreadableError(AllocationError):
    """IMS mode: the request's credential record is there but the worker cannot read it.

    Its ciphertext is not one our key made for this request and child (KMS: invalid, e.g. the
    ciphertext base64-encoded twice by a CLI recipe), or an attribute is malformed. The
    caller's error, not a store outage: terminal at once, dead-lettered with this reason and
    the record scrubbed; a correct hand-over and a redrive run it.
    """

    code = "credentialUnreadable"
    message = "the request's credential record cannot be read"


class CredentialNotOwnedError(AllocationError):
    """IMS mode: the credential record under this request id was written for another child.

    Another request's record (the id reused across children): this request is refused as a
    request id conflict, and the record is left to its own request (never exchanged, ended or
    scrubbed for this one).
    """

    code = "requestIdConflict"
    message = "the request id is bound to another request"


class AccessDeniedError(AllocationError):
    """Semrush refused the request's own user with a freshly exchanged token.

    A 403, or a 401 after one re-exchange and retry: this user cannot reach this workspace.
    Terminal, a rejection, never retried.
    """

    code = "accessDenied"
    message = "the requesting user cannot reach this workspace"


class CredentialStoreUnavailableError(AllocationError):
    """The credentials table or its KMS key could not be read or written (throttled, down)."""

    code = "credentialStoreUnavailable"
    message = "the credential store could not be reached"
    transient = True


class ParkedForReclaimError(AllocationError):
    """The pool is exhausted, sibling releases were enqueued: retry the ensure after them."""

    code = "parkedForReclaim"
    message = "waiting for surplus reclaimed from sibling workspaces"
    transient = True


PARENT_MISMATCH = "parentMismatch"


class ParentMismatchError(Exception):
    """The message names a parent that is not the child's parent upstream: it is invalid."""

    code = PARENT_MISMATCH

    def __init__(self) -> None:
        super().__init__(
            f"{PARENT_MISMATCH}: parent_workspace_id is not the parent of workspace_id"
        )


def error_code_of(exc: BaseException) -> str:
    """The stable code a failure is reported under (outcomes, logs, sweep reports).

    A typed error's ``code``; ``upstream<status>`` for an upstream answer; otherwise the
    exception's kind (a bug or an unforeseen failure, named without its message).
    """
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        return code
    if isinstance(exc, UpstreamError):
        return f"upstream{exc.status}"
    return type(exc).__name__


# The classifiers: always the raw body, always status and text (or shape), never words alone.

QUOTA_SHAPED_STATUS = 405
"""The status the write gate disguises its quota refusal as (its body's shape tells them apart)."""

_POOL_EXHAUSTED = "insufficient available units"
_NOT_READY = "workspace not ready"


def is_pool_exhausted(status: int, body: str) -> bool:
    """422 ``insufficient available units in subscription``: terminal exhaustion."""
    return status == 422 and _POOL_EXHAUSTED in body.lower()


def is_not_ready(status: int, body: str) -> bool:
    """422 ``workspace not ready``: the child is settling; transient."""
    return status == 422 and _NOT_READY in body.lower()


def is_metered_quota(status: int, body: str) -> bool:
    """A disguised quota rejection from a metered write, recognised by shape.

    Live, the refusal is a bare nginx ``text/html`` page with no quota wording, while a genuine
    Method-Not-Allowed always comes back as JSON. So: status 405 AND a non-empty body that is
    not a JSON object or array. Words are never matched (a JSON 405 saying "quota" is a real
    method error); an empty body carries no signal.

    Args:
        status: The HTTP status of the write.
        body: The raw response body text (never a redacted copy).
    """
    return status == QUOTA_SHAPED_STATUS and bool(body.strip()) and not _is_json_container(body)


def is_rate_limited(status: int, body: str = "") -> bool:
    """429 from the upstream's rate limiter."""
    return status == 429


def _is_json_container(body: str) -> bool:
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    except RecursionError:
        # Nested deeper than the parser recurses: only a body opening an object or array gets
        # here, so it is JSON-shaped (not the nginx page), and no further work is spent on it.
        return body.lstrip()[:1] in ("[", "{")
    return isinstance(parsed, dict | list)
