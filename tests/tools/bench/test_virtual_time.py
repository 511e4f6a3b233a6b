"""The write benchmarks' simulated time: requests side by side, one at a time, no real time."""

from __future__ import annotations

import pytest
from bench.virtual_time import VirtualTime


def test_a_task_that_sleeps_holds_up_no_other_task() -> None:
    # Given two requests, at 0 s and 1 s; the first sleeps 12 s, the second 3 s
    clock = VirtualTime(start=0.0)
    seen: list[tuple[str, float]] = []

    def request(name: str, pause: float) -> None:
        seen.append((f"{name} starts", clock()))
        clock.sleep(pause)
        seen.append((f"{name} ends", clock()))

    clock.spawn(0.0, lambda: request("first", 12.0))
    clock.spawn(1.0, lambda: request("second", 3.0))

    # When the simulation runs
    clock.run()

    # Then the second starts on time and ends before the first wakes
    assert seen == [
        ("first starts", 0.0),
        ("second starts", 1.0),
        ("second ends", 4.0),
        ("first ends", 12.0),
    ]


def test_an_action_runs_at_its_time_whatever_the_tasks_do() -> None:
    # Given a task asleep from 0 s to 10 s and an action due at 1.5 s (an ensure on the queue)
    clock = VirtualTime(start=0.0)
    ran: list[float] = []
    clock.spawn(0.0, lambda: clock.sleep(10.0))
    clock.at(1.5, lambda: ran.append(clock()))

    clock.run()

    assert ran == [1.5]
    assert clock() == 10.0


def test_events_at_one_time_run_in_the_order_they_were_scheduled() -> None:
    clock = VirtualTime(start=0.0)
    order: list[str] = []
    for name in ("a", "b", "c"):
        clock.at(5.0, lambda n=name: order.append(n))  # type: ignore[misc]

    clock.run()

    assert order == ["a", "b", "c"]


def test_sleep_outside_a_task_moves_the_clock_on() -> None:
    # The worker's own short waits run in the scheduler's thread
    clock = VirtualTime(start=100.0)
    clock.advance(2.5)
    assert clock() == 102.5


def test_a_tasks_exception_is_raised_by_run() -> None:
    clock = VirtualTime(start=0.0)

    def broken() -> None:
        clock.sleep(1.0)
        raise ValueError("the request broke")

    clock.spawn(0.0, broken)

    with pytest.raises(ValueError, match="the request broke"):
        clock.run()
