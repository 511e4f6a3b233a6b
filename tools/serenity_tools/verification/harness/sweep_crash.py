"""Scenario ``sweep-crash``: the sweep dies between targets and around its checkpoint; resumed.

The Sweep handler runs in this process (as ``serenity-allocator sweep --local`` does) on the
production runtime, whose store and enqueuer are wrapped to raise :class:`SimulatedCrash` at a
chosen point and whose wall clock (the lease's) is moved past the dead invocation's lease
before resuming. No child is enqueued twice and the checkpoint always parses, without
duplicates.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serenity_tools.verification.harness.config import HarnessConfig
from serenity_tools.verification.harness.drain import local_stack
from serenity_tools.verification.harness.results import ScenarioResult
from serenity_tools.verification.harness.workload import SWEPT_KINDS, plan_org
from serenity_tools.verification.invariants import InvariantResult, invariant_result

SWEEP_CRASH_POINTS = ("after-enqueue", "before-checkpoint-write", "after-checkpoint-write")
_SWEEP_TIMEOUT_S = 900.0


class SimulatedCrash(BaseException):
    """The sweep invocation dies here; a BaseException, so no ``except Exception`` stops it."""

    def __init__(self, point: str) -> None:
        super().__init__(point)
        self.point = point


class SweepCrashTrigger:
    """Arms one crash at a time: the n-th time a point is reached, :class:`SimulatedCrash`."""

    def __init__(self) -> None:
        self._armed: tuple[str, int] | None = None
        self.fired: list[str] = []

    def arm(self, point: str, occurrence: int) -> None:
        """Crash at the ``occurrence``-th time ``point`` is reached from now on."""
        self._armed = (point, occurrence)

    def disarm(self) -> None:
        """Cancel the armed crash."""
        self._armed = None

    def reached(self, point: str) -> None:
        """Called at each point; raises when the armed crash is due."""
        if self._armed is None or self._armed[0] != point:
            return
        remaining = self._armed[1] - 1
        if remaining > 0:
            self._armed = (point, remaining)
            return
        self._armed = None
        self.fired.append(point)
        raise SimulatedCrash(point)


class CrashingCheckpointStore:
    """A checkpoint store that can die just before or just after a write."""

    def __init__(self, inner: Any, trigger: SweepCrashTrigger) -> None:
        self._inner = inner
        self._trigger = trigger

    def load(self, run_id: str) -> Any:
        """Read through."""
        return self._inner.load(run_id)

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        """Write through, with a crash point on each side of the write."""
        self._trigger.reached("before-checkpoint-write")
        etag: str = self._inner.save(run_id, body, expected_etag=expected_etag)
        self._trigger.reached("after-checkpoint-write")
        return etag

    def location(self, run_id: str) -> str:
        """Read through."""
        location: str = self._inner.location(run_id)
        return location


class CountingEnqueuer:
    """Counts every release the sweep sends per child; can die right after a send."""

    def __init__(self, inner: Any, trigger: SweepCrashTrigger) -> None:
        self._inner = inner
        self._trigger = trigger
        self.sent: Counter[str] = Counter()

    def enqueue_release(self, workspace_id: str, **kwargs: Any) -> str:
        """Send through, count, then maybe crash (between the enqueue and its checkpoint)."""
        request_id: str = self._inner.enqueue_release(workspace_id, **kwargs)
        self.sent[workspace_id] += 1
        self._trigger.reached("after-enqueue")
        return request_id


class ManualWallClock:
    """Epoch seconds that move only when told (the sweep lease's clock)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        """The current (manual) epoch seconds."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move forward (e.g. past a dead invocation's lease) without waiting."""
        self.now += seconds


def _checkpoint_problems(store: Any, run_id: str) -> list[str]:
    from serenity_allocator.domain.sweep.model import SweepCheckpoint

    try:
        stored = store.load(run_id)
        if stored is None:
            return []
        checkpoint = SweepCheckpoint.model_validate(stored.body)
    except Exception as exc:
        return [f"checkpoint unreadable: {type(exc).__name__}: {exc}"]
    dupes = [child for child, n in Counter(checkpoint.processed).items() if n > 1]
    return [f"checkpoint lists {child} as processed twice" for child in dupes]


@dataclass
class _SweepDriver:
    """Invokes the sweep until it is done, crashing it at armed points and resuming it."""

    invoker: Any
    payload: dict[str, Any]
    trigger: SweepCrashTrigger
    store: Any
    wall: ManualWallClock
    rng: random.Random
    crashes_wanted: int
    problems: list[str] = field(default_factory=list)
    refused: int = 0
    probes: int = 0
    invocations: int = 0
    final: dict[str, Any] | None = None

    @property
    def run_id(self) -> str:
        return str(self.payload["run_id"])

    def drive(self) -> None:
        """Invoke (crashing as armed) until done, failed, or out of invocations."""
        from serenity_tools.operator.sweep_cli import drive_sweep

        for _ in range(self.crashes_wanted * 3 + 10):
            self._arm_next()
            self.invocations += 1
            try:
                sweep = drive_sweep(self.invoker, self.payload)
            except SimulatedCrash:
                self._after_crash()
                continue
            if sweep.error is not None:
                self.problems.append(f"sweep failed: {sweep.error}")
                return
            self.final = sweep.last
            if sweep.done:
                return
        self.problems.append(f"the sweep did not finish in {self.invocations} invocations")

    def _arm_next(self) -> None:
        fired = len(self.trigger.fired)
        if fired < self.crashes_wanted:
            point = SWEEP_CRASH_POINTS[fired % len(SWEEP_CRASH_POINTS)]
            self.trigger.arm(point, self.rng.randint(1, 3))

    def _after_crash(self) -> None:
        from serenity_tools.operator.sweep_cli import drive_sweep

        self.problems += _checkpoint_problems(self.store, self.run_id)
        stored = self.store.load(self.run_id)
        lease_until = stored.body.get("lease_until") if stored is not None else None
        if lease_until is not None and lease_until > self.wall():
            # Resuming at once must be refused: the dead invocation's lease holds.
            self.trigger.disarm()
            self.probes += 1
            probe = drive_sweep(self.invoker, self.payload)
            self.refused += int((probe.error or {}).get("errorType") == "RunInProgressError")
        self.wall.advance(_SWEEP_TIMEOUT_S + 1)  # the lease ends at the dead one's deadline


def _enqueue_violations(
    per_child: Counter[str], expected: set[str], final: Mapping[str, Any] | None
) -> list[str]:
    twice = sorted(child for child, n in per_child.items() if n > 1)
    violations = [f"{child}: {per_child[child]} release messages" for child in twice]
    if set(per_child) != expected:
        violations.append(
            f"released {len(per_child)} children, expected the {len(expected)} with surplus"
        )
    counts = (final or {}).get("counts", {})
    if counts.get("enqueued") != len(per_child):
        violations.append(
            f"the run counts {counts.get('enqueued')} enqueued, the queue holds {len(per_child)}"
        )
    return violations


def _sweep_checks(
    driver: _SweepDriver,
    enqueuer: CountingEnqueuer,
    per_child: Counter[str],
    expected: set[str],
    processed: list[str],
) -> list[InvariantResult]:
    fired = Counter(driver.trigger.fired)
    crashes = len(driver.trigger.fired)
    return [
        invariant_result(
            "no child enqueued twice",
            _enqueue_violations(per_child, expected, driver.final),
            f"{len(per_child)} children, one release message each; "
            f"{sum(n - 1 for n in enqueuer.sent.values() if n > 1)} re-sends deduplicated",
        ),
        invariant_result(
            "checkpoint never corrupted",
            driver.problems,
            f"read after each of {crashes} crashes and at the end: parses, "
            f"{len(processed)} processed, no duplicates",
        ),
        invariant_result(
            "resume refused while the lease holds",
            []
            if driver.refused == driver.probes
            else [f"{driver.probes - driver.refused} immediate resumes accepted"],
            f"{driver.refused} of {driver.probes} immediate resumes refused (RunInProgressError)",
        ),
        invariant_result(
            "crashes injected",
            [] if crashes >= min(3, driver.crashes_wanted) else ["fewer than 3 crashes"],
            f"{crashes} crashes: " + ", ".join(f"{p} {n}" for p, n in sorted(fired.items())),
        ),
    ]


def run_sweep_crash(config: HarnessConfig) -> ScenarioResult:
    """Scenario 6: kill the sweep between targets and around its checkpoint; resume by run id.

    The Sweep handler runs in this process (as ``serenity-allocator sweep --local`` does) on
    the production runtime, whose store and enqueuer are wrapped to raise
    :class:`SimulatedCrash` at a chosen point and whose wall clock (the lease's) is moved past
    the dead invocation's lease before resuming.
    """
    from functools import partial

    from serenity_allocator.handlers.settings import SweepSettings
    from serenity_allocator.handlers.sweep import lambda_handler
    from serenity_allocator.handlers.sweep_runtime import build_sweep_runtime
    from serenity_tools.operator.sweep_cli import LocalInvoker

    started = time.monotonic()
    rng = random.Random(config.seed)
    org = plan_org(config.children, rng)
    expected = {child for child, kind in org.kinds.items() if kind in SWEPT_KINDS}
    payload: dict[str, Any] = {
        "parent_workspace_ids": list(org.masters),
        "dry_run": False,
        "rate_limit_ms": 0,
        "batch_size": max(5, config.children // 3),
        "run_id": f"harness-{config.seed}-{uuid.uuid4().hex[:6]}",
    }
    trigger = SweepCrashTrigger()
    # Static: the crashing in-process sweep is about its checkpoint, not its run token (the
    # demo runs the sweep under its operator's promise token).
    with local_stack(config, "sweep-crash", credentials="static") as stack, stack.activated():
        stack.simulator.seed(list(org.workspaces))
        runtime = build_sweep_runtime(SweepSettings.from_env(os.environ))
        inner_store = runtime.store
        wall = ManualWallClock()
        runtime.wall_clock = wall
        runtime.store = CrashingCheckpointStore(inner_store, trigger)
        enqueuer = CountingEnqueuer(runtime.enqueuer, trigger)
        runtime.enqueuer = enqueuer
        invoker = LocalInvoker(partial(lambda_handler, runtime=runtime), timeout_s=_SWEEP_TIMEOUT_S)
        driver = _SweepDriver(
            invoker, payload, trigger, inner_store, wall, rng, max(3, config.children // 4)
        )
        with _handler_output(stack.work_dir / "sweep.stdout.log"):
            driver.drive()
        driver.problems += _checkpoint_problems(inner_store, driver.run_id)
        stored = inner_store.load(driver.run_id)
        messages = stack.drain_queue(stack.resources.queue_url)

    per_child = Counter(m.get("Attributes", {}).get("MessageGroupId", "") for m in messages)
    processed = (stored.body if stored is not None else {}).get("processed", [])
    if sorted(processed) != sorted(org.kinds):
        driver.problems.append(f"processed {len(processed)} of {len(org.kinds)} targets")
    checks = _sweep_checks(driver, enqueuer, per_child, expected, processed)
    numbers = {
        "targets": len(org.kinds),
        "children with surplus": len(expected),
        "invocations": driver.invocations,
        **{f"crashes {p}": n for p, n in sorted(Counter(trigger.fired).items())},
        "immediate resumes refused": driver.refused,
        "release sends": sum(enqueuer.sent.values()),
        "release messages in the queue": len(messages),
    }
    return ScenarioResult(
        "sweep-crash", config, time.monotonic() - started, checks, numbers=numbers
    )


@contextlib.contextmanager
def _handler_output(path: Path) -> Iterator[None]:
    from serenity_tools.verification.demo import handler_output_to

    # LocalInvoker sends the handler's stdout (EMF) to stderr: keep both off the report.
    with (
        handler_output_to(path),
        path.open("a", encoding="utf-8") as sink,
        contextlib.redirect_stderr(sink),
    ):
        yield
