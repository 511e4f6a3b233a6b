"""The sweep's failures: bounded attempts, 429 backoff, the consecutive-error abort."""

from __future__ import annotations

from typing import Any

import pytest

from serenity_allocator.domain.errors import (
    BrandAiLimitError,
    OrgPoolExhaustedError,
    RateLimitedError,
    UpstreamError,
    UpstreamUnavailableError,
    WorkspaceBusyError,
)
from serenity_allocator.domain.model import Totals
from tests.fakes import READ_STATUS, InMemoryGateway, RecordingEnqueuer
from tests.unit.application.sweep.sweep_rig import MASTER, RUN, Rig, outcomes, surplus_family

# ==== errors and abort ======================================================================


def _fail_status(gateway: InMemoryGateway, child: str, error: Exception) -> None:
    gateway.script_errors(READ_STATUS, child, [error])


def test_run_sweep_batch_aborts_after_n_consecutive_unexpected_errors() -> None:
    # Given an upstream answering 500 for the first three children
    rig = Rig(surplus_family(5))
    for child in ("k1", "k2", "k3"):
        _fail_status(rig.gateway, child, UpstreamError(500, "internal error", "read_status"))

    # When the sweep runs with max_consecutive_errors = 3
    result = rig.run(dry_run=False, max_consecutive_errors=3)

    # Then it aborts after the third, says why, and keeps the checkpoint; the failed targets
    # are not done (they have attempts left), so nothing counts as processed
    assert result.aborted and not result.done
    assert result.abort_reason == "3 consecutive failed attempts (last: upstream500)"
    assert (result.processed, result.remaining) == (0, 5)
    assert (result.counts.failed_attempts, result.counts.unexpected_errors) == (3, 0)
    assert [(i.outcome, i.attempt, i.final) for i in result.items] == [
        ("unexpected-error", 1, False)
    ] * 3
    assert rig.enqueuer.releases == []
    assert rig.store.body(RUN)["aborted"] == result.abort_reason
    assert rig.store.body(RUN)["failures"]["k1"] == {
        "attempts": 1,
        "error_code": "upstream500",
        "final": False,
    }
    assert rig.gateway.calls_of(READ_STATUS) == ["k1", "k2", "k3"]  # k4 never started


def test_run_sweep_batch_resuming_an_aborted_run_retries_the_failed_targets() -> None:
    # Given a run aborted by unexpected errors that have since cleared
    rig = Rig(surplus_family(4))
    for child in ("k1", "k2"):
        _fail_status(rig.gateway, child, UpstreamError(502, "bad gateway", "read_status"))
    assert rig.run(dry_run=False, max_consecutive_errors=2).aborted

    # When the operator resumes it
    result = rig.run(dry_run=False, max_consecutive_errors=2, invocation_id="inv-2")

    # Then fresh targets go first, then the failed ones are retried and released: done
    # means every target has a terminal result
    assert result.done and not result.aborted
    assert [r.workspace_id for r in rig.enqueuer.releases] == ["k3", "k4", "k1", "k2"]
    assert [(i.workspace_id, i.attempt) for i in result.items[2:]] == [("k1", 1), ("k2", 1)]
    assert (result.counts.enqueued, result.counts.unexpected_errors) == (4, 0)
    assert result.counts.failed_attempts == 2
    assert result.failed == []


@pytest.mark.parametrize(
    "error",
    [WorkspaceBusyError(), OrgPoolExhaustedError(), BrandAiLimitError("prompts", 600, 500)],
    ids=["busy", "pool-exhausted", "brand-limit"],
)
def test_run_sweep_batch_expected_errors_never_abort(error: Exception) -> None:
    # Given the same expected error, once, on the first three children
    rig = Rig(surplus_family(4))
    for child in ("k1", "k2", "k3"):
        _fail_status(rig.gateway, child, error)

    # When the sweep runs with max_consecutive_errors = 2
    result = rig.run(dry_run=False, max_consecutive_errors=2)

    # Then it carries on to the end of the targets without aborting, but is not done: the
    # three failed targets have attempts left
    assert not result.aborted and not result.done
    assert (result.processed, result.remaining) == (1, 3)
    assert {(i.outcome, i.final) for i in result.items[:3]} == {("expected-error", False)}
    assert [r.workspace_id for r in rig.enqueuer.releases] == ["k4"]

    # When the next invocation runs / Then it retries them and the run is done
    again = rig.run(dry_run=False, max_consecutive_errors=2, invocation_id="inv-2")
    assert again.done
    assert [r.workspace_id for r in rig.enqueuer.releases] == ["k4", "k1", "k2", "k3"]
    assert again.counts.expected_errors == 0


def test_run_sweep_batch_a_target_failing_every_attempt_ends_failed_and_is_reported() -> None:
    # Given a child whose status read always fails
    rig = Rig(surplus_family(2))
    _fail_status(rig.gateway, "k1", WorkspaceBusyError())
    _fail_status(rig.gateway, "k1", WorkspaceBusyError())

    # When the run is invoked until done with two attempts per target
    first = rig.run(dry_run=False, max_attempts=2)
    second = rig.run(dry_run=False, max_attempts=2, invocation_id="inv-2")

    # Then the first left it pending, the second made it terminal: failed, and why
    assert (first.done, first.remaining) == (False, 1)
    assert (second.done, second.remaining) == (True, 0)
    assert [(i.workspace_id, i.attempt, i.final) for i in second.items] == [("k1", 2, True)]
    assert [f.model_dump() for f in second.failed] == [
        {
            "workspace_id": "k1",
            "parent_workspace_id": MASTER,
            "error_code": "workspaceBusy",
            "attempts": 2,
        }
    ]
    assert (second.counts.expected_errors, second.counts.enqueued) == (1, 1)
    assert second.counts.failed_attempts == 2
    assert rig.store.body(RUN)["processed"] == ["k2", "k1"]


def test_run_sweep_batch_429_backs_off_honouring_retry_after_then_proceeds() -> None:
    # Given a child rate limited once with Retry-After: 7
    rig = Rig(surplus_family(1))
    _fail_status(rig.gateway, "k1", UpstreamError(429, "", "read_status", retry_after_s=7.0))

    # When the sweep runs
    result = rig.run(dry_run=False)

    # Then it waited the 7 s the upstream asked for and released the child in one attempt
    assert rig.clock.sleeps == [7.0]
    assert result.done
    assert outcomes(result) == {"k1": "enqueued"}
    assert result.counts.failed_attempts == 0


@pytest.mark.parametrize(
    "error",
    [RateLimitedError(), UpstreamError(429, "too many requests", "read_status")],
    ids=["rate-limited", "429"],
)
def test_run_sweep_batch_rate_limited_throughout_aborts_and_is_not_done(error: Exception) -> None:
    # Given an upstream that rate limits every call
    rig = Rig(surplus_family(4))
    for child in ("k1", "k2", "k3", "k4"):
        rig.gateway.script_errors(READ_STATUS, child, [error] * 50)

    # When the sweep runs with a 10 s backoff budget per target and max_consecutive_errors = 2
    result = rig.run(dry_run=False, max_consecutive_errors=2, rate_limit_backoff_s=10)

    # Then each target backed off 1 + 2 + 4 s (the next 8 s would pass 10), then counted toward
    # the abort; the run aborted, is not done, and nothing is marked processed
    assert rig.clock.sleeps == [1.0, 2.0, 4.0, 1.0, 2.0, 4.0]
    assert result.aborted and not result.done
    assert result.abort_reason == "2 consecutive failed attempts (last: rateLimited)"
    assert result.processed == 0
    assert [i.error_code for i in result.items] == ["rateLimited", "rateLimited"]
    assert rig.enqueuer.releases == []


def test_run_sweep_batch_unreachable_upstream_counts_toward_abort() -> None:
    # Given an upstream that does not answer at all (coded, but a degraded gateway)
    rig = Rig(surplus_family(4))
    for child in ("k1", "k2"):
        _fail_status(rig.gateway, child, UpstreamUnavailableError())

    # When the sweep runs with max_consecutive_errors = 2
    result = rig.run(dry_run=False, max_consecutive_errors=2)

    # Then it aborts rather than walk the whole fleet against a dead upstream
    assert result.aborted
    assert result.abort_reason == "2 consecutive failed attempts (last: upstreamUnavailable)"


def test_run_sweep_batch_error_streak_resets_on_expected_outcome() -> None:
    # Given 500, 500, nothing-to-release, busy, 500, 500, then a child with surplus
    gateway = surplus_family(7)
    gateway.set_usage("k3", used=Totals(projects=1, prompts=1_000))  # uses all: nothing to give
    for child in ("k1", "k2", "k5", "k6"):
        _fail_status(gateway, child, UpstreamError(500, "internal error", "read_status"))
    _fail_status(gateway, "k4", WorkspaceBusyError())
    rig = Rig(gateway)

    # When the sweep runs with max_consecutive_errors = 3
    result = rig.run(dry_run=False, max_consecutive_errors=3)

    # Then never three unexpected in a row: no abort, and the last child is enqueued
    assert not result.aborted
    assert [i.outcome for i in result.items] == [
        "unexpected-error",
        "unexpected-error",
        "nothing-to-release",
        "expected-error",
        "unexpected-error",
        "unexpected-error",
        "enqueued",
    ]
    assert result.counts.failed_attempts == 5


def test_run_sweep_batch_enqueue_failure_is_an_unexpected_error() -> None:
    # Given a queue that refuses every send
    class RefusingEnqueuer(RecordingEnqueuer):
        def enqueue_release(self, workspace_id: str, **kwargs: Any) -> str:
            raise RuntimeError("SQS refused")

    rig = Rig(surplus_family(3), enqueuer=RefusingEnqueuer())

    # When the sweep runs / Then the failures count toward the abort
    result = rig.run(dry_run=False, max_consecutive_errors=2)
    assert result.aborted
    assert result.items[0].error_code == "RuntimeError"
