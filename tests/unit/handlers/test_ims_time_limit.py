"""The IMS client's time limit each invocation: the invocation's deadline less one AWS call.

An exchange spends the token it carries and its rolled token must then be stored (one AWS
call), so the IMS client (its retries included) may run until one AWS call before the
invocation's own deadline, never later: a retried exchange answered at the very end would
leave its rolled token unstored when the function stops (needsReauth next receive).
"""

from __future__ import annotations

from tests.unit.handlers.allocator_rig import (
    FULL,
    FUNCTION_TIMEOUT_MS,
    ensure_record,
    family_gateway,
    new_worker,
)


class RecordingLimit:
    """An IMS client stand-in that records each time limit it is given."""

    def __init__(self) -> None:
        self.limits: list[float | None] = []

    def limit_time(self, seconds: float | None) -> None:
        self.limits.append(seconds)


def test_each_invocation_limits_ims_to_its_deadline_less_the_rolls_store() -> None:
    # Given a worker whose IMS client records its time limits
    worker = new_worker(family_gateway(("c1", FULL, FULL)))
    ims = RecordingLimit()
    worker.runtime.ims = ims
    budget_s = (FUNCTION_TIMEOUT_MS - worker.runtime.settings.safety_margin_ms) / 1000.0

    # When a batch is handled (the fake clock does not move)
    worker.invoke(ensure_record("m1", "c1", 100))

    # Then IMS may run until one AWS call before the invocation's end, no later, and the
    # limit is not shortened to the applying phase (which also keeps the publish's reserve)
    assert ims.limits == [budget_s - worker.runtime.aws_call_budget_s]
