"""Simulated time in which services' requests run side by side, as they do in production.

A discrete-event simulation: each request is a task in a thread of its own, and tasks run one at
a time, each until it sleeps or ends; the clock then jumps to the next event. So a request that
waits out the gate's lag holds up no other request, and an ensure due on the queue is served on
time whatever the services are doing. Before, the services ran one after another on one clock:
every guard's pause pushed the whole org's clock ahead of the arrivals, and an ensure on its way
was served only when some guard next paused, so refills ahead were late and writes waited for
units the worker would have carved seconds earlier.

Deterministic: the events run in (time, order of scheduling); no real time passes.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Task:
    """One request's thread and the gate that lets it run."""

    gate: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))


class VirtualTime:
    """A simulated monotonic clock, its events, and the tasks that sleep on it.

    Called, it returns the time. :meth:`sleep` from a task suspends that task until its time
    comes; from anywhere else (the worker's own short waits, the simulator) it moves the clock
    on. :meth:`advance` is the same (the interface of the bench's other clocks).
    """

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._tasks: dict[int, _Task] = {}
        self._scheduler = threading.Semaphore(0)
        self._failure: BaseException | None = None

    def __call__(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action`` (briefly, in the scheduler's thread) once the clock reaches ``when``."""
        heapq.heappush(self._events, (max(when, self.now), next(self._order), action))

    def spawn(self, when: float, work: Callable[[], None]) -> None:
        """Start ``work`` as a task of its own at ``when``."""
        self.at(when, lambda: self._start(work))

    def sleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds``; outside a task, move the clock on."""
        task = self._tasks.get(threading.get_ident())
        if task is None:
            self.now += max(0.0, seconds)
            return
        self.at(self.now + max(0.0, seconds), lambda: self._resume(task))
        self._scheduler.release()
        task.gate.acquire()

    advance = sleep

    def run(self) -> None:
        """Run every event in time order until none is left; a task's exception is raised."""
        while self._events:
            when, _, action = heapq.heappop(self._events)
            self.now = max(self.now, when)
            action()
            if self._failure is not None:
                raise self._failure

    def _start(self, work: Callable[[], None]) -> None:
        task = _Task()

        def body() -> None:
            task.gate.acquire()
            try:
                work()
            except BaseException as exc:  # handed to run(), which raises it
                self._failure = self._failure or exc
            finally:
                self._tasks.pop(threading.get_ident(), None)
                self._scheduler.release()

        thread = threading.Thread(target=body, name="bench-request", daemon=True)
        thread.start()
        assert thread.ident is not None  # set by start()
        self._tasks[thread.ident] = task
        self._resume(task)

    def _resume(self, task: _Task) -> None:
        """Let ``task`` run until it sleeps or ends."""
        task.gate.release()
        self._scheduler.acquire()
