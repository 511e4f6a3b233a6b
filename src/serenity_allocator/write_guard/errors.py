"""What a guarded write answers: the HTTP answer it wraps, its report, and its refusals.

The customer contract is the callers' table (``serenity_allocator/contract/outcomes.json``,
docs/outcomes.md): each refusal below is one of its answers, with the error's ``code``.
``WriteQuotaExhaustedError`` (``quotaExceeded``): pool, ceiling and tiered refusals, HTTP 409
"allocation exceeded". ``WriteDeadlineExceededError`` (``deadlineExceeded``): too slow or a
transient failure, "try again" (503 with ``Retry-After``), never 409. The user's authority has
its own three (``accessDenied``, ``needsReauth``, ``noCredential``), and a fault of ours its own
(``configurationFault``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol


class HttpAnswer(Protocol):
    """What a wrapped write returns: an HTTP answer (``httpx.Response``, ``requests.Response``)."""

    @property
    def status_code(self) -> int:
        """The HTTP status."""
        ...

    @property
    def text(self) -> str:
        """The raw body text (never a redacted copy: the classifier reads its shape)."""
        ...


WriteOutcome = Literal["accepted", "recovered", "exhausted", "timed-out", "refused", "failed"]


@dataclass(frozen=True)
class GuardedWrite:
    """What one wrapped write took: attempts, time waited, and how it ended."""

    site: str
    attempts: int
    waited_s: float
    outcome: WriteOutcome
    """``accepted`` first time, ``recovered`` after a 405, ``exhausted`` refused for quota
    (:class:`WriteQuotaExhaustedError`), ``timed-out`` out of time
    (:class:`WriteDeadlineExceededError`), ``refused`` the ensure's outcome refused for a reason
    that is neither (the user's authority, a configuration fault), ``failed`` a non-quota answer
    (returned as is)."""


REFUSALS: dict[str, type[WriteRefusedError]] = {}
"""The refusal raised for each refusing answer of the contract table (tested equal to it): each
refusal below enters it as it is declared, with its ``code``."""


class WriteRefusedError(Exception):
    """A guarded write that finally did not land; catch this to handle both refusals.

    Attributes:
        code: The customer answer (an answer of the contract table: ``quotaExceeded``,
            ``deadlineExceeded``, ``accessDenied``, ...).
        reason: The awaited ensure's error code (or status) when its outcome refused
            (``orgPoolExhausted``, ``needsReauth``, ...), else None.
        answer: The last (disguised 405) answer; None when the deadline had passed before the
            first attempt.
        attempts: Attempts made.
        waited_s: Seconds spent waiting between attempts.
        rollback_error: What the rollback hook raised, if it did (the refusal still stands).
    """

    code: ClassVar[str] = "refused"
    _summary: ClassVar[str] = "metered write refused"

    def __init_subclass__(cls, *, code: str, summary: str, **kwargs: Any) -> None:
        # One declaration per refusal: its answer, its message, and its place in REFUSALS.
        super().__init_subclass__(**kwargs)
        cls.code = code
        cls._summary = summary
        REFUSALS[code] = cls

    def __init__(
        self,
        answer: HttpAnswer | None,
        attempts: int,
        waited_s: float,
        *,
        reason: str | None = None,
    ) -> None:
        because = f" ({reason})" if reason else ""
        super().__init__(f"{self._summary}{because} after {attempts} attempt(s)")
        self.answer = answer
        self.attempts = attempts
        self.waited_s = waited_s
        self.reason = reason
        self.rollback_error: Exception | None = None


class WriteQuotaExhaustedError(
    WriteRefusedError, code="quotaExceeded", summary="metered write refused for quota"
):
    """Refused for quota; the customer answer is 409 "allocation exceeded".

    The ensure's outcome refused (the pool or the ceiling), or it was applied and the gate
    still refused after the lag, or (without an outcome lookup) the retries ran out.
    """


class WriteDeadlineExceededError(
    WriteRefusedError, code="deadlineExceeded", summary="metered write out of time"
):
    """Out of time: the request's deadline ran out before the write could land.

    "Too slow", never "no room": the customer answer is "try again" (e.g. 503 with
    ``Retry-After``), never 409. Also the answer of an ensure ended by an infrastructure or
    transient failure (``reason`` its code: ``imsUnavailable``, ``upstream500``, ...).
    """


class WriteAccessDeniedError(
    WriteRefusedError,
    code="accessDenied",
    summary="metered write refused: the user cannot reach this workspace",
):
    """The ensure's user cannot reach this workspace: a permission answer (403), not quota."""


class WriteNeedsReauthError(
    WriteRefusedError,
    code="needsReauth",
    summary="metered write refused: the user must sign in again",
):
    """IMS refused the user's promise: the user signs in again (401), then the service retries."""


class WriteNoCredentialError(
    WriteRefusedError,
    code="noCredential",
    summary="metered write refused: no usable user authorization",
):
    """The ensure carried no usable user authority: hand it over again (401)."""


class WriteConfigurationError(
    WriteRefusedError,
    code="configurationFault",
    summary="metered write refused: the allocator refused the request as sent",
):
    """A fault of ours (wrong parent, reused request id, invalid message): 500, page the owner."""
