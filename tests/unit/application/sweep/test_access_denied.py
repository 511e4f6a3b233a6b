"""The sweep's access-denied rule in memory: a 401/403 target is terminal at once, never an
error toward the streak, and a run whose every target so far was denied aborts."""

from __future__ import annotations

from serenity_allocator.domain.errors import RateLimitedError, UpstreamError
from serenity_allocator.domain.sweep.failures import backoff_delay, record_success
from serenity_allocator.domain.sweep.model import SweepCheckpoint, SweepRequest
from tests.fakes import READ_STATUS
from tests.unit.application.sweep.sweep_rig import MASTER, RUN, Rig, surplus_family, sweep_request

DENIED_ABORT = (
    "accessDenied on every target so far ({}): the operator's token cannot reach these "
    "children; resume with the token of a user who can"
)


def _deny(rig: Rig, *children_and_status: tuple[str, int]) -> None:
    for child, status in children_and_status:
        error = UpstreamError(status, "forbidden", "read_status")
        rig.gateway.script_errors(READ_STATUS, child, [error])


def test_a_denied_target_is_terminal_at_once_and_the_run_goes_on() -> None:
    # Given three children of which the first answers 403 and the last 401
    rig = Rig(surplus_family(3))
    _deny(rig, ("k1", 403), ("k3", 401))

    # When a real run sweeps them
    result = rig.run(dry_run=False)

    # Then both are access-denied, final on their first attempt; the run is done, not aborted
    denied = [
        i.model_dump(include={"workspace_id", "outcome", "error_code", "attempt", "final"})
        for i in result.items
        if i.outcome != "enqueued"
    ]
    assert denied == [
        {
            "workspace_id": w,
            "outcome": "access-denied",
            "error_code": "accessDenied",
            "attempt": 1,
            "final": True,
        }
        for w in ("k1", "k3")
    ]
    assert (result.done, result.aborted, result.processed) == (True, False, 3)
    assert (result.counts.access_denied, result.counts.enqueued) == (2, 1)
    assert result.counts.failed_attempts == 0
    assert rig.store.body(RUN)["processed"] == ["k1", "k2", "k3"]


def test_a_run_whose_every_target_was_denied_aborts_when_it_is_done() -> None:
    rig = Rig(surplus_family(1))
    _deny(rig, ("k1", 403))

    result = rig.run(dry_run=False)

    assert (result.done, result.aborted) == (True, True)
    assert result.abort_reason == DENIED_ABORT.format(1)


def test_a_run_denied_on_max_consecutive_errors_targets_in_a_row_aborts_there() -> None:
    # Given four children, all denied, and an abort after two errors in a row
    rig = Rig(surplus_family(4))
    _deny(rig, *((f"k{i}", 403) for i in range(1, 5)))

    result = rig.run(dry_run=False, max_consecutive_errors=2)

    # Then the run aborts after the second denial, its last two targets left
    assert result.abort_reason == DENIED_ABORT.format(2)
    assert (result.done, result.processed, result.remaining) == (False, 2, 2)


def test_a_denied_target_neither_ends_nor_extends_the_error_streak() -> None:
    # Given a 500, a 403 then a 500, and an abort after two errors in a row
    rig = Rig(surplus_family(4))
    for child in ("k1", "k3"):
        error = UpstreamError(500, "internal error", "read_status")
        rig.gateway.script_errors(READ_STATUS, child, [error])
    _deny(rig, ("k2", 403))

    result = rig.run(dry_run=False, max_consecutive_errors=2)

    # Then the second 500 is the second error in a row
    assert result.abort_reason == "2 consecutive failed attempts (last: upstream500)"
    assert [i.workspace_id for i in result.items] == ["k1", "k2", "k3"]


def test_a_success_ends_the_error_streak() -> None:
    checkpoint = SweepCheckpoint(
        run_id=RUN,
        dry_run=False,
        parent_workspace_ids=[MASTER],
        payload_sha256="0" * 64,
        targets=[("k1", MASTER)],
        error_streak=2,
    )

    record_success(checkpoint, "k1", "enqueued")

    assert (checkpoint.error_streak, checkpoint.processed) == (0, ["k1"])
    assert checkpoint.counts.enqueued == 1


def _request(rate_limit_ms: int) -> SweepRequest:
    return sweep_request(rate_limit_ms=rate_limit_ms)


def test_backoff_delay_takes_a_retry_after_of_zero_or_a_fraction_as_given() -> None:
    for seconds in (0, 0.5):
        exc = UpstreamError(429, "slow down", "read_status", retry_after_s=seconds)
        assert backoff_delay(exc, _request(2_000), 3) == seconds


def test_backoff_delay_doubles_the_rate_limit_pause_up_to_its_ceiling() -> None:
    request = _request(2_000)

    delays = [backoff_delay(RateLimitedError(), request, retry) for retry in range(5)]

    assert delays == [2.0, 4.0, 8.0, 16.0, 30.0]
    assert backoff_delay(RateLimitedError(), _request(0), 0) == 1.0
