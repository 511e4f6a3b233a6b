"""The write guard's recovery cycle on an injected clock, a scripted gate and a fake lookup.

Every branch of the cycle: the ensure's outcome refused, applied then the lag, unknown until
the deadline, a queue delay longer than the old retries x interval budget, a lookup that
fails, the deadline before an attempt and before a sleep, the three cycle outcomes adding up
to the cycles, the rollback hook, and recorders that raise. No HTTP: the gate is a script, so
each test says exactly when the gate starts accepting and when the ensure's outcome appears.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest
from serenity_allocator.producer import (
    GuardedWrite,
    GuardPolicy,
    WriteDeadlineExceededError,
    WriteGuard,
    WriteQuotaExhaustedError,
    WriteRefusedError,
    model_change_need,
)
from serenity_allocator.write_guard import EmfQuotaRetryRecorder, WriteConfigurationError
from serenity_tools.standins.simulator import DISGUISED_QUOTA_405
from tests.fakes import FakeClock

START = 1_000.0
CHILD, MASTER = "c1", "m1"


@dataclass(frozen=True)
class Answer:
    status_code: int
    text: str = "{}"


QUOTA = Answer(405, DISGUISED_QUOTA_405)


@dataclass
class ScriptedGate:
    """Refuses with the disguised 405 until ``accepts_at`` (seconds after START)."""

    clock: FakeClock
    accepts_at: float = float("inf")
    answer: Answer = Answer(200)
    attempts_at: list[float] = field(default_factory=list)

    def __call__(self) -> Answer:
        at = self.clock() - START
        self.attempts_at.append(at)
        return self.answer if at >= self.accepts_at else QUOTA


@dataclass
class Enqueuer:
    requests: list[EnsureRequest] = field(default_factory=list)

    def enqueue(self, request: EnsureRequest) -> str:
        self.requests.append(request)
        return request.request_id


class WrongRequestIdError(BaseException):
    """A lookup for another request than the latest ensure.

    A BaseException on purpose: the guard reads any ``Exception`` from a lookup as "unknown",
    which would hide a wrong id; this one escapes the guard and fails the test.
    """


@dataclass
class Lookup:
    """The ledger as the guard sees it: the outcome appears ``visible_at`` s after START."""

    clock: FakeClock
    enqueuer: Enqueuer
    status: str = "topped-up"
    error_code: str | None = None
    visible_at: float = float("inf")
    failing_until: float = -1.0
    by_position: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    """(status, error code) of the n-th ensure sent, where it differs from the default."""
    asked_at: list[float] = field(default_factory=list)

    def get_outcome(self, request_id: str) -> AllocationOutcome | None:
        at = self.clock() - START
        self.asked_at.append(at)
        if at < self.failing_until:
            raise ConnectionError("ledger unreachable")
        sent = [r.request_id for r in self.enqueuer.requests]
        if request_id != sent[-1]:  # the latest ensure: the recovery's, or the front it follows
            raise WrongRequestIdError(request_id)
        if at < self.visible_at:
            return None
        status, error_code = self.by_position.get(
            sent.index(request_id), (self.status, self.error_code)
        )
        return AllocationOutcome.model_validate(
            {
                "request_id": request_id,
                "kind": "ensure",
                "workspace_id": CHILD,
                "status": status,
                "error_code": error_code,
            }
        )


@dataclass
class Recorder:
    outcomes: list[tuple[str, int, str]] = field(default_factory=list)
    rollbacks_failed: list[str] = field(default_factory=list)
    verdicts: list[bool] = field(default_factory=list)
    raises: bool = False

    def record_quota_verdict(self, matched: bool) -> None:
        self.verdicts.append(matched)
        if self.raises:
            raise RuntimeError("metrics sink down")

    def record(self, outcome: str, attempt: int, site: str) -> None:
        self.outcomes.append((outcome, attempt, site))
        if self.raises:
            raise RuntimeError("metrics sink down")

    def record_rollback_failed(self, site: str) -> None:
        self.rollbacks_failed.append(site)
        if self.raises:
            raise RuntimeError("metrics sink down")


@dataclass
class Rig:
    clock: FakeClock
    enqueuer: Enqueuer
    recorder: Recorder
    lookup: Lookup

    def guard(self, *, with_lookup: bool = True, **options: Any) -> WriteGuard:
        return WriteGuard(
            self.enqueuer,
            CHILD,
            MASTER,
            recorder=self.recorder,
            outcomes=self.lookup if with_lookup else None,
            clock=self.clock,
            sleep=self.clock.sleep,
            **options,
        )

    def gate(self, accepts_at: float = float("inf"), answer: Answer = Answer(200)) -> ScriptedGate:
        return ScriptedGate(self.clock, accepts_at, answer)


@pytest.fixture
def rig() -> Rig:
    clock = FakeClock(START)
    enqueuer = Enqueuer()
    return Rig(clock, enqueuer, Recorder(), Lookup(clock, enqueuer))


# -- what the ensure's outcome says -------------------------------------------------------------


def test_an_ensure_refused_for_the_pool_ends_the_cycle_at_once_as_quota_exceeded(rig: Rig) -> None:
    # Given a gate that never accepts and an ensure the ledger records as refused at 2 s
    rig.lookup.status, rig.lookup.error_code = "rejected", "orgPoolExhausted"
    rig.lookup.visible_at = 2.0
    gate = rig.gate()

    # When the write is wrapped
    with pytest.raises(WriteQuotaExhaustedError) as raised:
        rig.guard().write(gate, need={"prompts": 50}, site="prompts")

    # Then the first retry's lookup ends it: quotaExceeded with the ensure's code, one cycle
    assert (raised.value.code, raised.value.reason) == ("quotaExceeded", "orgPoolExhausted")
    assert (raised.value.attempts, raised.value.waited_s) == (2, 3.0)
    assert gate.attempts_at == [0.0, 3.0]
    assert rig.recorder.outcomes == [("exhausted", 2, "prompts")]
    assert [r.need.prompts for r in rig.enqueuer.requests] == [50]


@pytest.mark.parametrize(
    ("status", "error_code", "dead_lettered", "reason", "refusal"),
    [
        ("rejected", "brandAiLimit", None, "brandAiLimit", WriteQuotaExhaustedError),
        ("failed", None, None, "failed", WriteDeadlineExceededError),
        ("invalid", "invalidMessage", None, "invalidMessage", WriteConfigurationError),
        (
            "failed",
            "finalReceiveUnfinished",
            True,
            "finalReceiveUnfinished",
            WriteDeadlineExceededError,
        ),
    ],
)
def test_every_non_success_outcome_is_a_refusal_naming_its_code(
    rig: Rig,
    status: str,
    error_code: str | None,
    dead_lettered: bool | None,
    reason: str,
    refusal: type[WriteRefusedError],
) -> None:
    # Given an ensure whose outcome is some non-success, visible from the start
    rig.lookup.status, rig.lookup.error_code, rig.lookup.visible_at = status, error_code, 0.0
    if dead_lettered:
        original = rig.lookup.get_outcome

        def dead_letter(request_id: str) -> AllocationOutcome | None:
            outcome = original(request_id)
            assert outcome is not None
            return outcome.model_copy(update={"dead_lettered": True})

        rig.lookup.get_outcome = dead_letter  # type: ignore[method-assign]

    # When a refused write is wrapped
    with pytest.raises(WriteRefusedError) as raised:
        rig.guard().write(rig.gate(), need={"prompts": 1}, site="s")

    # Then it ends after one retry with the contract table's answer (quota only for a quota
    # refusal) and the ensure's code (or its status) as the reason
    assert type(raised.value) is refusal
    assert (raised.value.reason, raised.value.attempts) == (reason, 2)


def test_an_applied_ensure_gets_the_gates_lag_then_quota_exceeded_without_a_reason(
    rig: Rig,
) -> None:
    # Given an ensure applied (seen at the 3 s lookup) and a gate that still never accepts
    rig.lookup.visible_at = 0.0
    gate = rig.gate()

    # When the write is wrapped with a deadline far away
    with pytest.raises(WriteQuotaExhaustedError) as raised:
        rig.guard(policy=GuardPolicy(deadline_s=60.0)).write(gate, need={"prompts": 5}, site="s")

    # Then it kept trying for lag + interval (9 + 3 s) after the lookup that saw it applied,
    # looked the outcome up once, and ends quotaExceeded with no reason
    assert gate.attempts_at == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]
    assert rig.lookup.asked_at == [3.0]
    assert (raised.value.reason, raised.value.attempts, raised.value.waited_s) == (None, 6, 15.0)
    assert rig.recorder.outcomes == [("exhausted", 6, "s")]


def test_an_applied_ensure_recovers_once_the_gate_enforces_it(rig: Rig) -> None:
    # Given an ensure applied at once and a gate enforcing it from 9 s
    rig.lookup.visible_at = 0.0
    gate = rig.gate(accepts_at=9.0)
    guard = rig.guard()

    # When the write is wrapped
    answer = guard.write(gate, need={"prompts": 5}, site="s")

    # Then the 4th attempt lands: recovered, one ensure
    assert answer.status_code == 200
    assert guard.history == [GuardedWrite("s", 4, 9.0, "recovered")]
    assert rig.recorder.outcomes == [("recovered", 4, "s")]
    assert len(rig.enqueuer.requests) == 1


def test_an_outcome_unknown_until_the_deadline_is_deadline_exceeded_never_quota(
    rig: Rig,
) -> None:
    # Given an ensure still pending throughout and a gate that never accepts
    gate = rig.gate()
    guard = rig.guard()  # the default 20 s deadline

    # When the write is wrapped
    with pytest.raises(WriteDeadlineExceededError) as raised:
        guard.write(gate, need={"prompts": 5}, site="s")

    # Then it retried past the 4 retries until no attempt could start before the deadline
    # (the last at 18 s: 21 s would be late), and says "too slow", not "no room"
    assert gate.attempts_at == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0, 18.0]
    assert (raised.value.code, raised.value.reason) == ("deadlineExceeded", None)
    assert (raised.value.attempts, raised.value.waited_s) == (7, 18.0)
    assert not isinstance(raised.value, WriteQuotaExhaustedError)
    assert isinstance(raised.value, WriteRefusedError)
    assert raised.value.answer == QUOTA
    assert guard.history == [GuardedWrite("s", 7, 18.0, "timed-out")]
    assert rig.recorder.outcomes == [("exhausted", 7, "s")]
    assert rig.clock.now - START == 18.0


def test_a_queue_delay_longer_than_the_old_retry_budget_still_recovers(rig: Rig) -> None:
    # Given an ensure that lands after 13 s of queue delay (more than 4 retries x 3 s = 12 s)
    # and a gate enforcing its top-up 4 s later
    rig.lookup.visible_at = 13.0
    with_lookup = rig.guard()

    # When the write is wrapped with the outcome lookup, and then without it (today's guard)
    answer = with_lookup.write(rig.gate(accepts_at=17.0), need={"prompts": 5}, site="s")
    rig.clock.now = START
    with pytest.raises(WriteQuotaExhaustedError) as without:
        rig.guard(with_lookup=False).write(rig.gate(accepts_at=17.0), need={"prompts": 5}, site="s")

    # Then the guard that waits for its ensure recovers at 18 s; the one counting retries gave
    # up at 12 s with the top-up on its way
    assert answer.status_code == 200
    assert with_lookup.history == [GuardedWrite("s", 7, 18.0, "recovered")]
    assert rig.lookup.asked_at == [3.0, 6.0, 9.0, 12.0, 15.0]
    assert (without.value.attempts, without.value.waited_s) == (5, 12.0)


def test_a_failing_lookup_counts_as_unknown_and_is_logged(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a ledger unreachable for the first 7 s, then the ensure applied, the gate at 10 s
    rig.lookup.failing_until, rig.lookup.visible_at = 7.0, 0.0
    guard = rig.guard()

    # When the write is wrapped
    with caplog.at_level(logging.WARNING, logger="serenity_allocator.write_guard.guard"):
        answer = guard.write(rig.gate(accepts_at=10.0), need={"prompts": 5}, site="s")

    # Then the two failed lookups were logged (with the request id, not raised) and it recovered
    assert answer.status_code == 200
    failed = [r for r in caplog.records if r.getMessage().startswith("outcome lookup failed")]
    assert [(r.__dict__["request_id"], r.__dict__["error"]) for r in failed] == [
        (rig.enqueuer.requests[0].request_id, "ConnectionError")
    ] * 2
    assert guard.history == [GuardedWrite("s", 5, 12.0, "recovered")]


# -- a recovery that follows the guard's front ---------------------------------------------------


def test_a_405_right_after_a_pending_front_waits_on_the_front_and_sends_no_second_ensure(
    rig: Rig,
) -> None:
    # Given a front for the 50-prompt batch, its outcome applied at 2 s, the gate enforcing at 9 s
    rig.lookup.visible_at = 2.0
    guard = rig.guard()
    front_id = guard.front({"prompts": 50})

    # When the batch is written at once (the front still queued) and meets the 405
    answer = guard.write(rig.gate(accepts_at=9.0), need={"prompts": 50}, site="s")

    # Then the cycle looked up the front's outcome (once: applied) and sent nothing of its own
    assert answer.status_code == 200
    assert [r.request_id for r in rig.enqueuer.requests] == [front_id]
    assert rig.lookup.asked_at == [3.0]
    assert guard.history == [GuardedWrite("s", 4, 9.0, "recovered")]
    assert rig.recorder.outcomes == [("recovered", 4, "s")]


def test_a_refused_front_for_exactly_the_write_ends_the_cycle_with_its_code(rig: Rig) -> None:
    # Given a front for the 50-prompt batch that the pool refuses (seen at the 3 s lookup)
    rig.lookup.status, rig.lookup.error_code = "rejected", "orgPoolExhausted"
    rig.lookup.visible_at = 2.0
    guard = rig.guard()
    guard.front({"prompts": 50})

    # When the batch meets the 405
    with pytest.raises(WriteQuotaExhaustedError) as raised:
        guard.write(rig.gate(), need={"prompts": 50}, site="s")

    # Then the front's refusal is the write's: no second ensure asking for the same 50
    assert (raised.value.reason, raised.value.attempts, raised.value.waited_s) == (
        "orgPoolExhausted",
        2,
        3.0,
    )
    assert [r.need.prompts for r in rig.enqueuer.requests] == [50]
    assert rig.recorder.outcomes == [("exhausted", 2, "s")]


def test_a_front_refused_for_a_larger_burst_lets_the_write_ask_for_its_own_units(
    rig: Rig,
) -> None:
    # Given a front for a burst of two 25-prompt batches refused for the ceiling, and the
    # write's own ensure applied; the gate enforcing from 12 s
    rig.lookup.visible_at = 0.0
    rig.lookup.by_position = {0: ("rejected", "brandAiLimit")}
    guard = rig.guard()
    guard.front({"prompts": 50})

    # When the first batch meets the 405
    answer = guard.write(rig.gate(accepts_at=12.0), need={"prompts": 25}, site="s")

    # Then the refusal at 3 s said nothing about 25 prompts: the cycle sent its own ensure
    # for them, saw it applied at 6 s, and the 5th attempt landed
    assert answer.status_code == 200
    assert [r.need.prompts for r in rig.enqueuer.requests] == [50, 25]
    assert rig.lookup.asked_at == [3.0, 6.0]
    assert guard.history == [GuardedWrite("s", 5, 12.0, "recovered")]
    assert rig.recorder.outcomes == [("recovered", 5, "s")]


def test_a_front_applied_but_not_serving_the_write_after_the_lag_leads_to_its_own_ensure(
    rig: Rig,
) -> None:
    # Given a front applied at once, a gate that never accepts and a far deadline
    rig.lookup.visible_at = 0.0
    guard = rig.guard(policy=GuardPolicy(deadline_s=60.0))
    guard.front({"prompts": 50})
    gate = rig.gate()

    # When the batch is written
    with pytest.raises(WriteQuotaExhaustedError) as raised:
        guard.write(gate, need={"prompts": 50}, site="s")

    # Then the front, seen applied at 3 s, had lag + interval (till 15 s); the cycle then sent
    # its own ensure, seen applied at 18 s, which had its lag + interval too (till 30 s)
    assert [r.need.prompts for r in rig.enqueuer.requests] == [50, 50]
    assert rig.lookup.asked_at == [3.0, 18.0]
    assert gate.attempts_at == [float(t) for t in range(0, 31, 3)]
    assert (raised.value.reason, raised.value.attempts, raised.value.waited_s) == (None, 11, 30.0)
    assert rig.recorder.outcomes == [("exhausted", 11, "s")]


def test_a_second_write_following_the_same_front_does_not_restart_its_lag(rig: Rig) -> None:
    # Given a burst of two 25-prompt batches fronted as 50, the front applied (seen at 3 s);
    # the first batch lands at 9 s, the second meets a gate that never accepts it
    rig.lookup.visible_at = 0.0
    guard = rig.guard()
    guard.front({"prompts": 50})
    guard.write(rig.gate(accepts_at=9.0), need={"prompts": 25}, site="first")

    # When the second batch is written at 9 s
    with pytest.raises(WriteDeadlineExceededError) as raised:
        guard.write(rig.gate(), need={"prompts": 25}, site="second")

    # Then its cycle counted the lag from the first sighting (3 s), sent its own ensure at
    # 15 s (not 24 s, past the deadline), saw it applied at 18 s, and ran out of time there
    assert [r.need.prompts for r in rig.enqueuer.requests] == [50, 25]
    assert rig.lookup.asked_at == [3.0, 18.0]
    assert (raised.value.attempts, raised.value.waited_s) == (4, 9.0)
    assert rig.recorder.outcomes == [("recovered", 4, "first"), ("exhausted", 4, "second")]


def test_a_write_the_front_does_not_cover_sends_its_own_ensure_at_once(rig: Rig) -> None:
    # Given a front for 10 prompts and a 50-prompt write, its ensure applied at once
    rig.lookup.visible_at = 0.0
    guard = rig.guard()
    guard.front({"prompts": 10})

    # When the write meets the 405
    guard.write(rig.gate(accepts_at=9.0), need={"prompts": 50}, site="s")

    # Then the cycle asked for the write's units at once, as without a front
    assert [r.need.prompts for r in rig.enqueuer.requests] == [10, 50]
    assert rig.lookup.asked_at == [3.0]
    assert guard.history == [GuardedWrite("s", 4, 9.0, "recovered")]


def test_without_a_lookup_a_fronted_write_still_sends_its_own_ensure(rig: Rig) -> None:
    # Given a guard without an outcome lookup and a front for the batch
    guard = rig.guard(with_lookup=False)
    guard.front({"prompts": 50})

    # When the batch meets the 405
    guard.write(rig.gate(accepts_at=9.0), need={"prompts": 50}, site="s")

    # Then it cannot tell a queued front from a refused or spent one: it ensures once more
    assert [r.need.prompts for r in rig.enqueuer.requests] == [50, 50]
    assert guard.history == [GuardedWrite("s", 4, 9.0, "recovered")]


# -- without a lookup: retries and the deadline ------------------------------------------------


def test_without_a_lookup_a_deadline_before_the_retries_run_out_is_deadline_exceeded(
    rig: Rig,
) -> None:
    # Given 10 retries but a 10 s deadline
    guard = rig.guard(with_lookup=False, policy=GuardPolicy(retries=10, deadline_s=10.0))

    # When a write is refused throughout
    with pytest.raises(WriteDeadlineExceededError) as raised:
        guard.write(rig.gate(), need={"prompts": 1}, site="s")

    # Then attempts at 0, 3, 6 and 9 s, then no sleep that would end at 12 s
    assert (raised.value.attempts, raised.value.waited_s) == (4, 9.0)
    assert rig.clock.sleeps == [3.0, 3.0, 3.0]


def test_no_attempt_starts_after_the_deadline(rig: Rig) -> None:
    # Given a guard whose request already used up its 20 s
    guard = rig.guard()
    gate = rig.gate(accepts_at=0.0)
    undone: list[str] = []
    rig.clock.advance(20.0)

    # When a write is wrapped
    with pytest.raises(WriteDeadlineExceededError) as raised:
        guard.write(gate, need={"prompts": 1}, site="late", rollback=lambda: undone.append("x"))

    # Then nothing was attempted or enqueued, no cycle recorded, and the rollback ran once
    assert gate.attempts_at == []
    assert (raised.value.attempts, raised.value.answer) == (0, None)
    assert rig.enqueuer.requests == []
    assert rig.recorder.outcomes == []
    assert undone == ["x"]
    assert guard.history == [GuardedWrite("late", 0, 0.0, "timed-out")]


def test_a_sleep_that_overruns_the_deadline_is_not_followed_by_an_attempt(rig: Rig) -> None:
    # Given a sleeper that oversleeps by 20 s, and a gate that would accept the retry
    def oversleep(seconds: float) -> None:
        rig.clock.sleep(seconds + 20.0)

    guard = WriteGuard(rig.enqueuer, CHILD, MASTER, outcomes=rig.lookup, recorder=rig.recorder,
                       clock=rig.clock, sleep=oversleep)  # fmt: skip
    gate = rig.gate(accepts_at=0.5)

    # When a write refused at once is wrapped
    with pytest.raises(WriteDeadlineExceededError) as raised:
        guard.write(gate, need={"prompts": 1}, site="s")

    # Then the clock read after the sleep (23 s) stopped it before a second attempt
    assert gate.attempts_at == [0.0]
    assert (raised.value.attempts, raised.value.waited_s) == (1, 3.0)
    assert rig.recorder.outcomes == [("exhausted", 1, "s")]


# -- the three cycle outcomes -------------------------------------------------------------------


def test_the_three_cycle_outcomes_add_up_to_every_cycle(rig: Rig) -> None:
    # Given one request's guard (a 120 s deadline) and five writes: accepted at once, recovered,
    # ended by a non-quota answer, ended by an exception, refused for the pool
    guard = rig.guard(policy=GuardPolicy(deadline_s=120.0))
    clock = rig.clock

    def at(offset: float) -> float:
        return clock() - START + offset

    accepted = guard.write(rig.gate(accepts_at=0.0), need={"prompts": 1}, site="a")
    recovered = guard.write(rig.gate(accepts_at=at(3.0)), need={"prompts": 1}, site="b")
    conflict = Answer(409, '{"message": "duplicate prompt"}')
    ended_by_answer = guard.write(
        rig.gate(accepts_at=at(3.0), answer=conflict), need={"prompts": 1}, site="c"
    )
    calls = iter([QUOTA])

    def then_raises() -> Answer:
        answer = next(calls, None)
        if answer is None:
            raise TimeoutError("gateway timeout")
        return answer

    with pytest.raises(TimeoutError):
        guard.write(then_raises, need={"prompts": 1}, site="d")
    rig.lookup.status, rig.lookup.error_code, rig.lookup.visible_at = (
        "rejected",
        "brandAiLimit",
        0.0,
    )
    with pytest.raises(WriteQuotaExhaustedError):
        guard.write(rig.gate(), need={"prompts": 1}, site="e")

    # Then four cycles (the first write made none): recovered, abandoned twice (the 409 comes
    # back unchanged; the exception of the 2nd attempt propagated), exhausted; one ensure each
    assert (accepted.status_code, recovered.status_code, ended_by_answer) == (200, 200, conflict)
    assert rig.recorder.outcomes == [
        ("recovered", 2, "b"),
        ("abandoned", 2, "c"),
        ("abandoned", 2, "d"),
        ("exhausted", 2, "e"),
    ]
    assert len(rig.enqueuer.requests) == 4
    assert [w.outcome for w in guard.history] == [
        "accepted",
        "recovered",
        "failed",
        "exhausted",
    ]


def test_an_enqueue_failure_abandons_the_cycle_and_propagates(rig: Rig) -> None:
    # Given a producer that cannot reach the queue
    class QueueDownError(RuntimeError):
        pass

    def refuse(request: EnsureRequest) -> str:
        raise QueueDownError("queue unreachable")

    rig.enqueuer.enqueue = refuse  # type: ignore[method-assign]

    # When a refused write is wrapped
    with pytest.raises(QueueDownError):
        rig.guard().write(rig.gate(), need={"prompts": 1}, site="s")

    # Then the cycle is counted as abandoned after the first attempt
    assert rig.recorder.outcomes == [("abandoned", 1, "s")]
    assert rig.clock.sleeps == []


# -- recorders that raise -----------------------------------------------------------------------


def test_a_raising_recorder_never_changes_an_accepted_write(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a recorder that raises on every call, and an ensure applied at once
    rig.recorder.raises, rig.lookup.visible_at = True, 0.0
    guard = rig.guard()

    # When a write recovers at 3 s
    with caplog.at_level(logging.WARNING, logger="serenity_allocator.write_guard.guard"):
        answer = guard.write(rig.gate(accepts_at=3.0), need={"prompts": 1}, site="s")

    # Then the caller gets the accepted answer (not the recorder's error, so it never writes
    # twice), and each failure (the 405's verdict, the cycle's outcome) is logged
    assert answer.status_code == 200
    assert (rig.recorder.verdicts, rig.recorder.outcomes) == ([True], [("recovered", 2, "s")])
    assert [(r.getMessage(), r.__dict__["error"]) for r in caplog.records] == [
        ("write guard metric not recorded", "RuntimeError")
    ] * 2


def test_a_raising_recorder_never_replaces_a_refusal(rig: Rig) -> None:
    # Given a recorder that raises, and an ensure refused for the ceiling
    rig.recorder.raises = True
    rig.lookup.status, rig.lookup.error_code, rig.lookup.visible_at = "rejected", "brandAiLimit", 0
    failing_rollback_calls: list[int] = []

    def rollback() -> None:
        failing_rollback_calls.append(1)
        raise OSError("delete failed")

    # When the write is refused
    with pytest.raises(WriteQuotaExhaustedError) as raised:
        rig.guard().write(rig.gate(), need={"prompts": 1}, site="s", rollback=rollback)

    # Then the caller gets the refusal, the rollback's error attached, both metrics attempted
    assert raised.value.reason == "brandAiLimit"
    assert isinstance(raised.value.rollback_error, OSError)
    assert rig.recorder.rollbacks_failed == ["s"]
    assert failing_rollback_calls == [1]


# -- the rollback hook --------------------------------------------------------------------------


def test_the_rollback_runs_once_on_a_refusal_and_never_on_a_landed_write(rig: Rig) -> None:
    # Given a rollback that counts its runs, and one write that recovers, one that times out
    runs: list[str] = []
    guard = rig.guard(policy=GuardPolicy(deadline_s=30.0))

    # When both are wrapped with it
    guard.write(rig.gate(accepts_at=3.0), need={"prompts": 1}, site="ok",
                rollback=lambda: runs.append("ok"))  # fmt: skip
    with pytest.raises(WriteDeadlineExceededError) as raised:
        guard.write(rig.gate(), need={"prompts": 1}, site="late",
                    rollback=lambda: runs.append("late"))  # fmt: skip

    # Then only the refused one rolled back, once, and nothing failed
    assert runs == ["late"]
    assert raised.value.rollback_error is None
    assert rig.recorder.rollbacks_failed == []


def test_a_failed_rollback_is_counted_and_logged_and_the_refusal_still_raised(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an ensure refused for the pool and a rollback that fails
    rig.lookup.status, rig.lookup.error_code, rig.lookup.visible_at = (
        "rejected",
        "orgPoolExhausted",
        0,
    )
    error = ConnectionError("project engine down")

    def rollback() -> None:
        raise error

    # When the write is refused
    with (
        caplog.at_level(logging.WARNING, logger="serenity_allocator.write_guard.guard"),
        pytest.raises(WriteQuotaExhaustedError) as raised,
    ):
        rig.guard().write(rig.gate(), need={"prompts": 1}, site="prompts", rollback=rollback)

    # Then the refusal is what the caller gets, carrying the rollback's error; one metric with
    # the site; one log line naming the site and the error's type (not its text)
    assert raised.value.rollback_error is error
    assert rig.recorder.rollbacks_failed == ["prompts"]
    [line] = [r for r in caplog.records if r.getMessage() == "rollback of a refused write failed"]
    assert (line.__dict__["site"], line.__dict__["error"]) == ("prompts", "ConnectionError")
    assert "project engine down" not in caplog.text


# -- policy, errors, the model-change need, the EMF line ---------------------------------------


@pytest.mark.parametrize(
    ("options", "field_name"),
    [
        ({"retries": -1}, "retries"),
        ({"retries": True}, "retries"),
        ({"interval_s": -0.1}, "interval_s"),
        ({"interval_s": 0}, "interval_s"),
        ({"interval_s": float("nan")}, "interval_s"),
        ({"deadline_s": 0.0}, "deadline_s"),
        ({"deadline_s": float("inf")}, "deadline_s"),
        ({"enforcement_lag_s": -1.0}, "enforcement_lag_s"),
        ({"retries": 10**9}, "retries"),
        ({"retries": 101}, "retries"),
        ({"deadline_s": 1e308}, "deadline_s"),
        ({"deadline_s": 900.5}, "deadline_s"),
        ({"interval_s": 1e9}, "interval_s"),
        ({"enforcement_lag_s": 1e308}, "enforcement_lag_s"),
    ],
)
def test_guard_policy_refuses_bad_values_naming_the_field(
    options: dict[str, Any], field_name: str
) -> None:
    with pytest.raises(ValueError, match=rf"^GuardPolicy\.{field_name} must be"):
        GuardPolicy(**options)


def test_guard_policy_takes_the_largest_sane_values() -> None:
    policy = GuardPolicy(retries=100, interval_s=900, deadline_s=900.0, enforcement_lag_s=0)
    assert (policy.retries, policy.deadline_s) == (100, 900.0)


def test_the_refusals_carry_the_customer_codes() -> None:
    quota = WriteQuotaExhaustedError(QUOTA, 5, 12.0, reason="orgPoolExhausted")
    late = WriteDeadlineExceededError(QUOTA, 7, 18.0)
    assert (quota.code, late.code) == ("quotaExceeded", "deadlineExceeded")
    assert str(quota) == "metered write refused for quota (orgPoolExhausted) after 5 attempt(s)"
    assert str(late) == "metered write out of time after 7 attempt(s)"


@pytest.mark.parametrize(
    ("before", "after", "prompts"),
    [
        (["gpt"], ["gpt", "claude", "gemini"], 240),
        (["gpt", "claude"], ["gpt", "gemini"], 0),
        (["gpt", "claude"], ["gpt"], 0),
        (["gpt"], ["gpt", "gpt"], 0),
    ],
)
def test_model_change_need_is_published_prompts_times_added_models(
    before: list[str], after: list[str], prompts: int
) -> None:
    need = model_change_need(120, before, after)
    assert need.as_dict() == {"projects": 0, "prompts": prompts}


def test_model_change_need_refuses_a_negative_count() -> None:
    with pytest.raises(ValueError, match=r"^published_prompts must be an integer >= 0$"):
        model_change_need(-1, [], ["gpt"])


def test_emf_recorder_prints_a_rollback_failure_with_its_site() -> None:
    lines: list[str] = []
    recorder = EmfQuotaRetryRecorder(
        "prod", service="brands", emit=lines.append, clock_ms=lambda: 7
    )
    recorder.record_rollback_failed("prompts.create")
    [blob] = [json.loads(line) for line in lines]
    assert blob["_aws"]["CloudWatchMetrics"] == [
        {
            "Namespace": "SerenityAllocator",
            "Dimensions": [["Environment", "Site"]],
            "Metrics": [{"Name": "QuotaRollbackFailed", "Unit": "Count"}],
        }
    ]
    assert (blob["Site"], blob["QuotaRollbackFailed"], blob["service"]) == (
        "prompts.create",
        1,
        "brands",
    )
    assert "Outcome" not in blob


# -- the classifier's verdict (the enforcement-is-back pager) ----------------------------------


def test_every_405_a_guarded_write_meets_records_the_classifiers_verdict(rig: Rig) -> None:
    # Given an ensure applied at once and a gate accepting from 6 s (two disguised 405s first)
    rig.lookup.visible_at = 0.0
    guard = rig.guard()

    # When one write recovers, one meets a genuine JSON 405, one a 422 and one is accepted
    guard.write(rig.gate(accepts_at=6.0), need={"prompts": 1}, site="s")
    method = guard.write(lambda: Answer(405, '{"message": "Method Not Allowed"}'),
                         need={"prompts": 1}, site="s")  # fmt: skip
    guard.write(lambda: Answer(422, "quota"), need={"prompts": 1}, site="s")
    guard.write(lambda: Answer(201), need={"prompts": 1}, site="s")

    # Then each 405 was counted once with its verdict (true, true, then the JSON one false)
    # and nothing else was: the metric counts 405s, not writes
    assert rig.recorder.verdicts == [True, True, False]
    assert method.status_code == 405
    assert rig.recorder.outcomes == [("recovered", 3, "s")]


def test_the_emf_recorder_prints_the_verdict_with_the_deployments_environment() -> None:
    # Given the recorder a service builds once, for prod
    lines: list[str] = []
    recorder = EmfQuotaRetryRecorder(
        "prod", service="brands", emit=lines.append, clock_ms=lambda: 9
    )

    # When two verdicts are recorded
    recorder.record_quota_verdict(True)
    recorder.record_quota_verdict(False)

    # Then two EMF lines, dimensions Environment and Matched, the caller's service a property
    assert [json.loads(line) for line in lines] == [
        {
            "_aws": {
                "Timestamp": 9,
                "CloudWatchMetrics": [
                    {
                        "Namespace": "SerenityAllocator",
                        "Dimensions": [["Environment", "Matched"]],
                        "Metrics": [{"Name": "MeteredQuotaClassifier", "Unit": "Count"}],
                    }
                ],
            },
            "Environment": "prod",
            "Matched": matched,
            "service": "brands",
            "MeteredQuotaClassifier": 1,
        }
        for matched in ("true", "false")
    ]


@pytest.mark.parametrize(
    ("environment", "service", "named"),
    [("", "brands", "environment"), ("prod", " ", "service"), (None, "brands", "environment")],
)
def test_the_emf_recorder_refuses_a_blank_environment_or_service(
    environment: Any, service: Any, named: str
) -> None:
    with pytest.raises(ValueError, match=rf"^EmfQuotaRetryRecorder: {named} must be a non-blank"):
        EmfQuotaRetryRecorder(environment, service=service)
