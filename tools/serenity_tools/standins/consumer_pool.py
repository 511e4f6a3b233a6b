"""The parent side of the consumers: start, watch, restart and stop consumer processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from serenity_tools.standins.consumer import DEFAULT_HANDLER, CrashPlan

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


@dataclass(frozen=True)
class QueueDepth:
    """The queue's approximate counts: visible (waiting) and not visible (in flight)."""

    visible: int
    in_flight: int

    @property
    def is_empty(self) -> bool:
        """True when nothing waits and nothing is in flight."""
        return self.visible == 0 and self.in_flight == 0


def queue_depth(sqs: SQSClient, queue_url: str) -> QueueDepth:
    """One GetQueueAttributes call (moto computes both counts exactly)."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return QueueDepth(
        visible=int(attributes.get("ApproximateNumberOfMessages", "0")),
        in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", "0")),
    )


@dataclass
class ConsumerProcess:
    """One consumer OS process and its files."""

    index: int
    generation: int
    process: subprocess.Popen[bytes]
    trace_path: Path
    stdout_path: Path

    @property
    def pid(self) -> int:
        """The OS process id."""
        return self.process.pid

    def is_alive(self) -> bool:
        """True while the process runs."""
        return self.process.poll() is None

    def kill(self) -> None:
        """Kill it with SIGKILL (the harness's crash)."""
        if self.is_alive():
            self.process.kill()
            self.process.wait()


_CONTRACT_PREFIXES = ("AWS_", "SEMRUSH_", "SERENITY_", "POWERTOOLS_")
_CONTRACT_NAMES = frozenset(
    {
        "QUEUE_URL",
        "DLQ_URL",
        "MAX_RECEIVE_COUNT",
        "OUTCOME_BUS_NAME",
        "REQUEST_LEDGER_TABLE",
        "ENVIRONMENT",
        "BLOCK_PROJECTS",
        "BLOCK_PROMPTS",
        "SAFETY_MARGIN_MS",
        "ENSURE_NOT_READY_RETRIES",
        "ENSURE_RETRY_INTERVAL_S",
        "UNMETERED_CACHE_TTL_S",
        "SIBLING_RECLAIM_MAX_SIBLINGS",
        "SIBLING_RECLAIM_MAX_PARKS",
        "POOL_LOW_RATIO",
        "POOL_LOW_INTERVAL_S",
        "SWEEP_BUCKET",
    }
)


def container_environment(stack_env: Mapping[str, str]) -> dict[str, str]:
    """The process environment of a consumer: this one's, cleaned, plus ``stack_env``.

    Every contract, Powertools and AWS variable is dropped first, so a developer's real
    credentials or endpoints never reach a local container.
    """
    base = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(_CONTRACT_PREFIXES) and name not in _CONTRACT_NAMES
    }
    return {**base, **stack_env}


class ConsumerPool:
    """Starts, watches, restarts and stops consumer processes.

    Args:
        env: The environment of every consumer (usually ``LocalStack.env()``).
        queue_url: The allocation queue.
        queue_arn: Its ARN.
        region: The records' region.
        work_dir: Where trace and stdout files go.
        function_timeout_s: The Lambda context timeout (below the visibility timeout).
        idle_sleep_s: Pause after an empty receive.
        crash: Optional crash injection for every consumer.
        name: The pool's subdirectory of ``work_dir``.
        handler: ``MODULE:FUNCTION`` of the handler (default: the Allocator's).
        retry_delay_s: Seconds until a failed record comes back (None: the visibility timeout).
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        queue_url: str,
        queue_arn: str,
        region: str,
        work_dir: Path,
        function_timeout_s: float,
        idle_sleep_s: float = 0.1,
        crash: CrashPlan | None = None,
        name: str = "consumers",
        handler: str = DEFAULT_HANDLER,
        retry_delay_s: int | None = None,
    ) -> None:
        self._env = container_environment({**env, **(crash.environment() if crash else {})})
        self._queue_url = queue_url
        self._queue_arn = queue_arn
        self._region = region
        self._dir = work_dir / name
        self._dir.mkdir(parents=True, exist_ok=True)
        self._function_timeout_s = function_timeout_s
        self._idle_sleep_s = idle_sleep_s
        self._handler = handler
        self._retry_delay_s = retry_delay_s
        self.processes: list[ConsumerProcess] = []
        """Every process started, in start order (restarted ones included)."""
        self.restarts = 0

    @property
    def trace_paths(self) -> list[Path]:
        """Trace files of every process started."""
        return [process.trace_path for process in self.processes]

    @property
    def stdout_paths(self) -> list[Path]:
        """Handler stdout files of every process started."""
        return [process.stdout_path for process in self.processes]

    def live(self) -> list[ConsumerProcess]:
        """The current process of each slot that still runs."""
        current: dict[int, ConsumerProcess] = {}
        for process in self.processes:
            current[process.index] = process
        return [process for process in current.values() if process.is_alive()]

    def start(self, count: int, *, ready_timeout_s: float = 60.0) -> list[ConsumerProcess]:
        """Start ``count`` more consumers and wait until each is ready to receive."""
        first = 1 + max((process.index for process in self.processes), default=-1)
        started = [self._spawn(index, 0) for index in range(first, first + count)]
        self.wait_ready(started, timeout_s=ready_timeout_s)
        return started

    def _spawn(self, index: int, generation: int) -> ConsumerProcess:
        stem = f"consumer-{index:02d}-g{generation}"
        trace_path = self._dir / f"{stem}.trace.jsonl"
        stdout_path = self._dir / f"{stem}.stdout.log"
        with stdout_path.open("wb") as stdout:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "serenity_tools.standins.consumer",
                    "--index",
                    str(index),
                    "--generation",
                    str(generation),
                    "--trace",
                    str(trace_path),
                    "--queue-url",
                    self._queue_url,
                    "--queue-arn",
                    self._queue_arn,
                    "--region",
                    self._region,
                    "--function-timeout-s",
                    repr(self._function_timeout_s),
                    "--idle-sleep-s",
                    repr(self._idle_sleep_s),
                    "--parent-pid",
                    str(os.getpid()),
                    "--handler",
                    self._handler,
                    *(
                        ["--retry-delay-s", str(self._retry_delay_s)]
                        if self._retry_delay_s is not None
                        else []
                    ),
                ],
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                # Own session: a Ctrl-C in the terminal reaches the parent only, which then
                # stops the consumers cleanly with SIGTERM.
                start_new_session=True,
            )
        consumer = ConsumerProcess(index, generation, process, trace_path, stdout_path)
        self.processes.append(consumer)
        return consumer

    def wait_ready(self, processes: Sequence[ConsumerProcess], *, timeout_s: float) -> None:
        """Wait until each process has written its ``start`` trace line.

        Raises:
            RuntimeError: A process exited first, or the timeout passed.
        """
        deadline = time.monotonic() + timeout_s
        pending = list(processes)
        while pending:
            pending = [p for p in pending if not _has_started(p.trace_path)]
            for process in pending:
                if not process.is_alive():
                    tail = _tail(process.stdout_path)
                    raise RuntimeError(
                        f"consumer {process.index} exited before it was ready:\n{tail}"
                    )
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"{len(pending)} consumer(s) not ready in {timeout_s} s")
            if pending:
                time.sleep(0.05)

    def restart_dead(self) -> list[ConsumerProcess]:
        """Replace every slot whose current process died (a crashed container is replaced)."""
        current: dict[int, ConsumerProcess] = {}
        for process in self.processes:
            current[process.index] = process
        restarted = [
            self._spawn(process.index, process.generation + 1)
            for process in current.values()
            if not process.is_alive()
        ]
        self.restarts += len(restarted)
        return restarted

    def kill(self, index: int) -> None:
        """Kill the current process of slot ``index`` with SIGKILL."""
        for process in reversed(self.processes):
            if process.index == index:
                process.kill()
                return

    def wait_drained(
        self,
        depth: Callable[[], QueueDepth],
        *,
        timeout_s: float,
        poll_s: float = 0.25,
        restart_dead: bool = True,
    ) -> bool:
        """Wait until the queue is empty with nothing in flight; return False on timeout.

        The parent polls lightly (one GetQueueAttributes per ``poll_s``): the broker is
        single-threaded and serves the consumers too.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            if restart_dead:
                self.restart_dead()
            if depth().is_empty:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_s)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM every live consumer (each finishes its batch), then kill stragglers."""
        alive = [process for process in self.processes if process.is_alive()]
        for process in alive:
            process.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in alive:
            try:
                process.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()


def _has_started(trace_path: Path) -> bool:
    try:
        with trace_path.open("rb") as handle:
            return b'"ev":"start"' in handle.read(4096)
    except FileNotFoundError:
        return False


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""
