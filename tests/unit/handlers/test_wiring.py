"""What both runtimes share each invocation: IMS readied (a refused pair read again, bounded)."""

from __future__ import annotations

from serenity_allocator.handlers.settings import ready_ims


class RecordingLimit:
    """An IMS stand-in (not an ImsClient: it has no pair to read again) recording its limits."""

    def __init__(self) -> None:
        self.limits: list[float | None] = []

    def limit_time(self, seconds: float | None) -> None:
        self.limits.append(seconds)


def test_ready_ims_bounds_the_calls_to_the_seconds_given_never_below_zero() -> None:
    # Given an IMS client that records its limits, and no settings to read a pair from
    ims = RecordingLimit()

    # When two invocations ready it, the second already past its time
    ready_ims(ims, None, call_budget_s=2.0, seconds=7.5)
    ready_ims(ims, None, call_budget_s=2.0, seconds=-1.0)

    # Then each is bounded to its own time, the late one to nothing
    assert ims.limits == [7.5, 0.0]
