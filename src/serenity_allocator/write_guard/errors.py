"""What a guarded write answers: the HTTP answer it wraps, its report, and the two refusals.

The customer contract (semrush-user-manager.md, "Metered writes happen elsewhere"):
``WriteQuotaExhaustedError`` (code ``quotaExceeded``) is, together with the ensure outcomes
``orgPoolExhausted`` and ``brandAiLimit``, ONE customer answer: HTTP 409 "allocation exceeded".
``WriteDeadlineExceededError`` (code ``deadlineExceeded``) is not a quota answer: the request ran
out of time before the write could land, so the service answers "try again" (e.g. 503 with
``Retry-After``), never 409.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol


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


WriteOutcome = Literal["accepted", "recovered", "exhausted", "timed-out", "failed"]


@dataclass(frozen=True)
class GuardedWrite:
    """What one wrapped write took: attempts, time waited, and how it ended."""

    site: str
    attempts: int
    waited_s: float
    outcome: WriteOutcome
    """``accepted`` first time, ``recovered`` after a 405, ``exhausted`` refused for quota
    (:class:`WriteQuotaExhaustedError`), ``timed-out`` out of time
    (:class:`WriteDeadlineExceededError`), ``failed`` a non-quota answer (returned as is)."""


class WriteRefusedError(Exception):
    """A guarded write that finally did not land; catch this to handle both refusals.

    Attributes:
        code: The customer code (``quotaExceeded`` or ``deadlineExceeded``).
        reason: The recovery ensure's error code when its outcome refused (``orgPoolExhausted``,
            ``brandAiLimit``, ...), else None.
        answer: The last (disguised 405) answer; None when the deadline had passed before the
            first attempt.
        attempts: Attempts made.
        waited_s: Seconds spent waiting between attempts.
        rollback_error: What the rollback hook raised, if it did (the refusal still stands).
    """

    code: ClassVar[str] = "refused"
    _summary: ClassVar[str] = "metered write refused"

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


class WriteQuotaExhaustedError(WriteRefusedError):
    """Refused for quota; the customer answer is 409 "allocation exceeded".

    The ensure's outcome refused (the pool or the ceiling), or it was applied and the gate
    still refused after the lag, or (without an outcome lookup) the retries ran out.
    """

    code: ClassVar[str] = "quotaExceeded"
    _summary: ClassVar[str] = "metered write refused for quota"


class WriteDeadlineExceededError(WriteRefusedError):
    """Out of time: the request's deadline ran out before the write could land.

    "Too slow", never "no room": the customer answer is "try again" (e.g. 503 with
    ``Retry-After``), never 409.
    """

    code: ClassVar[str] = "deadlineExceeded"
    _summary: ClassVar[str] = "metered write out of time"
