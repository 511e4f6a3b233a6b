"""The sweep's failure rules: how an attempt's error is classified, counted and backed off.

An expected failure (a typed upstream refusal) is retried on a later invocation until the
target has used ``max_attempts``; an unexpected one (a degraded gateway, a bug, a rate limit
past its backoff budget) also counts toward the run's abort: ``max_consecutive_errors`` of them
in a row abort the run. A 429 is backed off within the target's budget before it counts at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import (
    AllocationError,
    RateLimitedError,
    UpstreamError,
    UpstreamUnavailableError,
    error_code_of,
    is_rate_limited,
)
from .model import (
    SweepCheckpoint,
    SweepCountName,
    SweepItem,
    SweepRequest,
    TargetFailure,
)

MAX_BACKOFF_S = 30.0
"""Ceiling on one 429 backoff pause that the answer did not set with ``Retry-After``."""


@dataclass(frozen=True)
class AttemptFailure:
    """A failed attempt's typed code and whether it counts toward the run's abort."""

    error_code: str
    counts_toward_abort: bool


# ---------------------------------------------------------------- classification


def is_rate_limited_error(exc: Exception) -> bool:
    """True for a 429 (typed, or an upstream answer the classifier calls rate-limited)."""
    if isinstance(exc, RateLimitedError):
        return True
    return isinstance(exc, UpstreamError) and is_rate_limited(exc.status, exc.body)


def is_access_denied(exc: Exception) -> bool:
    """True for a Semrush 401/403: the operator's token may not reach this workspace.

    The client has already refreshed once after a 401 (a fresh exchange), so this is the
    answer for a fresh token too (ims-promise-tokens.md: "cannot reach this workspace").
    """
    return isinstance(exc, UpstreamError) and exc.status in (401, 403)


def classify_failure(exc: Exception) -> AttemptFailure:
    """The code of a failed attempt and whether it is the degraded gateway the abort is for."""
    if is_rate_limited_error(exc):
        # Past its backoff budget a rate-limited target is the degraded gateway the abort is for.
        return AttemptFailure("rateLimited", counts_toward_abort=True)
    code = expected_error_code(exc)
    if code is None:
        # No typed code: a degraded gateway or a bug. These abort a run.
        return AttemptFailure(error_code_of(exc), counts_toward_abort=True)
    return AttemptFailure(code, counts_toward_abort=False)


def expected_error_code(exc: Exception) -> str | None:
    """The typed code of an expected failure, or None for an unexpected one."""
    if isinstance(exc, UpstreamUnavailableError):
        # Coded, but a gateway that does not answer is the degraded gateway the abort exists
        # for: counted as expected, an unreachable upstream would walk the whole fleet.
        return None
    if isinstance(exc, AllocationError):
        return exc.code
    return None


# ---------------------------------------------------------------- backoff


def backoff_delay(exc: Exception, request: SweepRequest, retry: int) -> float:
    """The pause before retrying a rate-limited attempt: ``Retry-After`` first, else doubling."""
    retry_after = getattr(exc, "retry_after_s", None)
    if isinstance(retry_after, (int, float)) and retry_after >= 0:
        return float(retry_after)
    base = max(1.0, request.rate_limit_ms / 1000.0)
    return float(min(base * 2**retry, MAX_BACKOFF_S))


# ---------------------------------------------------------------- accounting


def attempts_so_far(checkpoint: SweepCheckpoint, child_id: str) -> int:
    """Failed attempts a target has used (the pending order puts fresh targets first)."""
    failure = checkpoint.failures.get(child_id)
    return 0 if failure is None else failure.attempts


def finish_target(checkpoint: SweepCheckpoint, child_id: str, count: SweepCountName) -> None:
    """Give a target its terminal result."""
    checkpoint.counts.add(count)
    checkpoint.processed.append(child_id)


def record_success(checkpoint: SweepCheckpoint, child_id: str, count: SweepCountName) -> None:
    """A terminal result that is not a failure: it ends the run's error streak."""
    finish_target(checkpoint, child_id, count)
    checkpoint.error_streak = 0


def record_failure(
    request: SweepRequest, checkpoint: SweepCheckpoint, item: SweepItem, failure: AttemptFailure
) -> SweepItem:
    """Count a failed attempt; the target ends failed once it has no attempt left."""
    child_id = item.workspace_id
    previous = checkpoint.failures.get(child_id)
    attempts = 1 if previous is None else previous.attempts + 1
    final = attempts >= request.max_attempts
    checkpoint.failures[child_id] = TargetFailure(
        attempts=attempts, error_code=failure.error_code, final=final
    )
    checkpoint.counts.add("failed_attempts")
    if failure.counts_toward_abort:
        checkpoint.error_streak += 1
    else:
        checkpoint.error_streak = 0
    kind: SweepCountName = "unexpected_errors" if failure.counts_toward_abort else "expected_errors"
    if final:
        finish_target(checkpoint, child_id, kind)
    return item.model_copy(
        update={
            "outcome": kind.replace("_errors", "-error"),
            "error_code": failure.error_code,
            "attempt": attempts,
            "final": final,
        }
    )


def record_access_denied(checkpoint: SweepCheckpoint, item: SweepItem) -> SweepItem:
    """A target the operator may not reach: terminal at once, never toward the abort.

    The same token would be refused again; it neither counts toward the error streak nor ends
    it as a success would.
    """
    finish_target(checkpoint, item.workspace_id, "access_denied")
    return item.model_copy(update={"outcome": "access-denied", "error_code": "accessDenied"})


def note_progress(request: SweepRequest, checkpoint: SweepCheckpoint, item: SweepItem) -> None:
    """Abort after too many failed attempts in a row; done once every target is terminal.

    A run whose every target so far was denied (at least ``max_consecutive_errors`` of them,
    or all of its targets) aborts too: the operator's identity cannot reach these children.
    """
    if checkpoint.error_streak >= request.max_consecutive_errors:
        checkpoint.aborted = (
            f"{checkpoint.error_streak} consecutive failed attempts "
            f"(last: {item.error_code or 'unknown'})"
        )
    if len(checkpoint.processed) == len(checkpoint.targets):
        checkpoint.state = "done"  # every target has a terminal result
    denied = checkpoint.counts.access_denied
    all_denied = denied > 0 and denied == len(checkpoint.processed)
    enough = denied >= request.max_consecutive_errors or checkpoint.state == "done"
    if all_denied and enough and checkpoint.aborted is None:
        checkpoint.aborted = (
            f"accessDenied on every target so far ({denied}): the operator's token cannot "
            "reach these children; resume with the token of a user who can"
        )
