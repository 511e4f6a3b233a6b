"""The service-side write guard: front a metered write, and recover from the disguised 405.

Facts (semrush-user-manager.md, "Metered writes happen elsewhere"): the write gateway refuses a
write over quota with a disguised 405 (a bare HTML page); prompts are metered cumulatively at
the write (``used + drafted + batch``); and the gateway enforces a top-up about 9 s after it.
The upstream's answer to the lag is to retry the write with backoff (3 attempts, 3 s apart,
bounded by one per-request deadline), calling ensure once per recovery, not per attempt.
Our ensure is queued, so the default policy retries once more (see :class:`GuardPolicy`).

A service makes one :class:`WriteGuard` per incoming request and workspace::

    guard = WriteGuard(producer, child_id, master_id, recorder=EmfQuotaRetryRecorder("prod"))
    guard.front({"prompts": len(batch)})            # before writing: size the top-up early
    answer = guard.write(lambda: post_prompts(batch), need={"prompts": len(batch)},
                         site="prompts.create")      # every metered write, wrapped

The guard needs no Powertools: the outcome metric goes through an injected recorder.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

from .domain.classify import is_metered_quota
from .domain.model import Totals

QuotaRetryResult = Literal["recovered", "exhausted"]
WriteOutcome = Literal["accepted", "recovered", "exhausted", "failed"]
TotalsInput = Totals | Mapping[str, int]

METRIC_NAME = "QuotaRetryOutcome"
METRIC_NAMESPACE = "SerenityAllocator"
"""The allocator's CloudWatch namespace (the same as ``adapters.observability.NAMESPACE``)."""


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


AnswerT = TypeVar("AnswerT", bound=HttpAnswer)


class EnsureEnqueuer(Protocol):
    """The part of :class:`~serenity_allocator.producer.AllocationProducer` the guard uses."""

    def enqueue_ensure(
        self,
        workspace_id: str,
        parent_workspace_id: str,
        need: TotalsInput | None = None,
        *,
        include_drafted: bool = False,
        ceiling: Mapping[str, int] | None = None,
        org_id: str | None = None,
        brand_id: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Enqueue one ensure; return its request id."""
        ...


class QuotaRetryRecorder(Protocol):
    """Receives one ``QuotaRetryOutcome`` per recovery (a wrapped write that met the 405)."""

    def record(self, outcome: QuotaRetryResult, attempt: int, site: str) -> None:
        """``attempt``: the attempt that succeeded, or the attempts made when exhausted."""
        ...


class NullQuotaRetryRecorder:
    """Records nothing (the default: metrics are the service's choice)."""

    def record(self, outcome: QuotaRetryResult, attempt: int, site: str) -> None:
        """Drop the outcome."""


class EmfQuotaRetryRecorder:
    """Prints ``QuotaRetryOutcome`` as a CloudWatch EMF line; plain JSON, no Powertools.

    Dimensions ``Environment``, ``Outcome`` and ``Site`` (a call-site name: a small fixed set
    per service, never an id); the value is the attempt number.

    Args:
        environment: The service's environment name.
        service: The calling service's name (an EMF property, not a dimension).
        emit: Where the line goes (``print`` by default: Lambda ships stdout to CloudWatch).
        clock_ms: Wall-clock milliseconds for the EMF timestamp.
    """

    def __init__(
        self,
        environment: str,
        *,
        service: str = "unknown",
        emit: Callable[[str], None] = print,
        clock_ms: Callable[[], float] = lambda: time.time() * 1000.0,
    ) -> None:
        self._environment = environment
        self._service = service
        self._emit = emit
        self._clock_ms = clock_ms

    def record(self, outcome: QuotaRetryResult, attempt: int, site: str) -> None:
        """Print one EMF line (best-effort: a metric never changes the write's outcome)."""
        blob = {
            "_aws": {
                "Timestamp": int(self._clock_ms()),
                "CloudWatchMetrics": [
                    {
                        "Namespace": METRIC_NAMESPACE,
                        "Dimensions": [["Environment", "Outcome", "Site"]],
                        "Metrics": [{"Name": METRIC_NAME, "Unit": "Count"}],
                    }
                ],
            },
            "Environment": self._environment,
            "Outcome": outcome,
            "Site": site,
            "service": self._service,
            METRIC_NAME: attempt,
        }
        with contextlib.suppress(Exception):  # metrics never change the write's outcome
            self._emit(json.dumps(blob, separators=(",", ":")))


@dataclass(frozen=True)
class GuardPolicy:
    """How long a guarded write keeps trying after the disguised 405.

    The upstream advises 3 retries 3 s apart, which spans the ~9 s lag when the ensure runs
    synchronously before the write. Ours is queued, so the top-up lands a queue latency later:
    4 retries (12 s) span the lag plus up to 3 s of queue latency (docs/benchmarks/writes.md:
    with 3 retries one write in eight still ended refused with the pool having room).

    Attributes:
        retries: Retries after the first attempt.
        interval_s: Pause before each retry.
        deadline_s: One budget per incoming request, shared by every write the guard wraps.
    """

    retries: int = 4
    interval_s: float = 3.0
    deadline_s: float = 20.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.interval_s < 0 or self.deadline_s <= 0:
            raise ValueError("GuardPolicy: retries and interval_s >= 0, deadline_s > 0")


@dataclass(frozen=True)
class GuardedWrite:
    """What one wrapped write took: attempts, time waited, and how it ended."""

    site: str
    attempts: int
    waited_s: float
    outcome: WriteOutcome
    """``accepted`` first time, ``recovered`` after a 405, ``exhausted`` out of retries or
    time, ``failed`` a non-quota answer (returned to the caller as is)."""


class WriteQuotaExhaustedError(Exception):
    """The write was still refused for quota after every retry the policy and deadline allow.

    Attributes:
        answer: The last (disguised 405) answer.
        attempts: Attempts made.
        waited_s: Seconds spent waiting between attempts.
    """

    def __init__(self, answer: HttpAnswer, attempts: int, waited_s: float) -> None:
        super().__init__(f"metered write refused for quota after {attempts} attempt(s)")
        self.answer = answer
        self.attempts = attempts
        self.waited_s = waited_s


@dataclass
class WriteGuard:
    """Fronts and wraps the metered writes of ONE incoming request on one child workspace.

    Args:
        producer: Enqueues ensures (an ``AllocationProducer``).
        workspace_id: The child that writes.
        parent_workspace_id: Its master (the org pool).
        policy: Retries, pause and the per-request deadline.
        recorder: Receives ``QuotaRetryOutcome`` per recovery.
        include_drafted: Size prompt top-ups on used + drafted + batch (the write gate's rule);
            opt out explicitly only for a dimension without drafts.
        ceiling: Optional per-brand ceiling for the ensures (a dimension left out is not enforced).
        org_id: Optional label for the ensures.
        brand_id: Optional label for the ensures.
        clock: Monotonic seconds; the request's deadline starts when the guard is made.
        sleep: Sleeps between attempts (injected in tests).
    """

    producer: EnsureEnqueuer
    workspace_id: str
    parent_workspace_id: str
    policy: GuardPolicy = field(default_factory=GuardPolicy)
    recorder: QuotaRetryRecorder = field(default_factory=NullQuotaRetryRecorder)
    include_drafted: bool = True
    ceiling: Mapping[str, int] | None = None
    org_id: str | None = None
    brand_id: str | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    history: list[GuardedWrite] = field(default_factory=list)
    """Every wrapped write of this request, in order."""

    def __post_init__(self) -> None:
        self._deadline = self.clock() + self.policy.deadline_s

    @property
    def time_left_s(self) -> float:
        """Seconds left of the request's deadline."""
        return self._deadline - self.clock()

    def front(self, need: TotalsInput) -> str:
        """Enqueue the ensure for the batch about to be written; return its request id.

        Sent BEFORE the write, it gives the allocator and the gate's lag a head start.
        """
        return self.producer.enqueue_ensure(
            self.workspace_id,
            self.parent_workspace_id,
            need,
            include_drafted=self.include_drafted,
            ceiling=self.ceiling,
            org_id=self.org_id,
            brand_id=self.brand_id,
        )

    def write(self, call: Callable[[], AnswerT], *, need: TotalsInput, site: str) -> AnswerT:
        """Run a metered write; on the disguised 405, ensure once and retry within the deadline.

        Args:
            call: Makes the write and returns its HTTP answer. An exception it raises
                propagates at once (never retried here).
            need: Units this write consumes (sizes the recovery's ensure).
            site: A call-site name for the metric (a fixed label, never an id).

        Returns:
            The accepted answer, or a non-quota failure answer unchanged.

        Raises:
            WriteQuotaExhaustedError: Still refused after the retries or the deadline.
            EnqueueError: The recovery's ensure could not be enqueued (from the producer);
                the write is not retried without it.
        """
        answer = call()
        if not is_metered_quota(answer.status_code, answer.text):
            outcome: WriteOutcome = "accepted" if answer.status_code < 400 else "failed"
            self.history.append(GuardedWrite(site, 1, 0.0, outcome))
            return answer
        self.front(need)  # one ensure for this recovery, not one per attempt
        attempts, waited = 1, 0.0
        while attempts <= self.policy.retries and self._fits(self.policy.interval_s):
            self.sleep(self.policy.interval_s)
            waited += self.policy.interval_s
            attempts += 1
            answer = call()
            if not is_metered_quota(answer.status_code, answer.text):
                self.recorder.record("recovered", attempts, site)
                outcome = "recovered" if answer.status_code < 400 else "failed"
                self.history.append(GuardedWrite(site, attempts, waited, outcome))
                return answer
        self.recorder.record("exhausted", attempts, site)
        self.history.append(GuardedWrite(site, attempts, waited, "exhausted"))
        raise WriteQuotaExhaustedError(answer, attempts, waited)

    def _fits(self, pause_s: float) -> bool:
        # A retry must start before the deadline; the write's own timeout is the caller's.
        return self.clock() + pause_s < self._deadline
