"""The local stack: everything the Allocator and the Sweep talk to, on this machine, no AWS.

- A moto server in its OWN process, single-threaded (moto's SQS backend is not safe under
  concurrent requests), with moto's FIFO redelivery order fixed (see :mod:`.moto_fifo`);
  or, for the services given an endpoint (:mod:`.aws_endpoints`, ``--aws-endpoint``), that
  endpoint instead (a second emulator on loopback), and moto only for the rest.
- The Semrush simulator (a thread of this process; latency and not-ready window configurable).
- The resources template.yaml declares (:func:`.resources.create_local_resources`): the FIFO
  queue with its redrive policy (maxReceiveCount 5) to the FIFO DLQ, the sweep bucket, the
  outcome bus, the request ledger, the credentials table and its KMS key, the IMS consumer
  pair's secret (the simulator's pair) and the static token's secret.
- Two credential modes for the handlers (:meth:`LocalStack.env`): ``"ims"`` (the real path:
  ``IMS_HOST`` is the simulator, the consumer pair comes from its secret, every request needs
  a promise token on the credentials table, written by a producer built with
  :mod:`.identities`) and ``"static"`` (the simulator's static bearer in ``SEMRUSH_TOKEN``;
  messages need no credential record), the class's default for tests and harness scenarios.
  ``serenity-allocator local up`` defaults to ``"ims"``, what every deployment runs
  (``--credentials static`` for the other).
- An outcome capture: a rule on the bus into a standard SQS queue (moto delivers EventBridge
  targets to SQS synchronously inside PutEvents).
- Consumer processes on demand (:mod:`.consumer`), one per simulated Lambda container.

Local timings are generous where a slow machine would otherwise look like a broken one, and
short only where waiting adds nothing:

- the queue's visibility timeout defaults to :data:`DEFAULT_VISIBILITY_TIMEOUT_S` (60 s) and
  the Lambda context timeout is one second below it, far above a batch's time even on a
  machine whose cores are busy with other work: a batch is never killed or handed out twice
  just because the CPU was shared (the Semrush per-request timeout is a third of the function
  timeout, at most 15 s as in production);
- a record the handler FAILED comes back after :data:`LOCAL_RETRY_DELAY_S` (2 s) instead of
  the rest of the visibility timeout: the consumer sets its visibility once the handler has
  returned (on AWS the record waits out the visibility timeout, 360 s). Parks, not-ready
  children and the zombie's five receives stay quick;
- a scenario ABOUT redelivery after a crash or a timeout (the harness's ``crash`` and
  ``faults``, the crash tests) sets a short visibility timeout explicitly: a killed
  container's batch comes back only when the visibility timeout has passed.

``serenity-allocator local up`` starts it all and runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shlex
import signal
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from serenity_tools.standins.aws_endpoints import (
    AwsEndpoints,
    ServiceEndpoints,
    add_endpoint_flag,
    endpoints_from_args,
)
from serenity_tools.standins.consumer import DEFAULT_HANDLER, CrashPlan
from serenity_tools.standins.consumer_pool import ConsumerPool, QueueDepth, queue_depth
from serenity_tools.standins.message_bodies import body_field
from serenity_tools.standins.outcome_capture import OutcomeCapture, create_outcome_capture
from serenity_tools.standins.resources import (
    LOCAL_REGION,
    LocalResourceNames,
    LocalResources,
    create_local_resources,
    local_client,
)
from serenity_tools.standins.traces import TraceSummary, read_trace_events, summarize_traces

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

    from serenity_tools.standins.moto_server import MotoServer
    from serenity_tools.standins.simulator import SimulatorServer

DEFAULT_VISIBILITY_TIMEOUT_S = 60
"""Generous: far above a batch's time on a busy machine (the function timeout is 1 s less)."""
LOCAL_RETRY_DELAY_S = 2
"""Seconds until a record the handler failed is visible again (a local time compression)."""
LOCAL_ENVIRONMENT = "local"
LOCAL_SAFETY_MARGIN_MS = 250
_SECRET_ENV_NAMES = frozenset({"SEMRUSH_TOKEN"})
_T = TypeVar("_T")
CredentialMode = Literal["static", "ims"]
"""How the handlers on a local stack get their Semrush authority (see :meth:`LocalStack.env`)."""


@dataclass(frozen=True)
class DeadLetter:
    """One message read from the DLQ."""

    message_id: str
    group_id: str
    body: str
    request_id: str | None
    reason: str | None
    """The worker's validation error for an invalid message; None for a redriven one."""
    receive_count: int


class LocalStack:
    """moto + simulator + resources + outcome capture; consumers on demand.

    Use as a context manager (or :meth:`start` / :meth:`stop`).

    Args:
        latency_ms: Simulator latency added to every Semrush request.
        not_ready_ms: Simulator not-ready window after a transfer.
        enforcement_lag_ms: How far the simulator's write gate lags transfers (default 9 s,
            the upstream's; 0 enforces a top-up at once).
        visibility_timeout_s: The queue's visibility timeout (whole seconds, >= 2); the
            function timeout is one second less.
        retry_delay_s: Seconds until a record the handler failed comes back (capped by the
            visibility timeout); None leaves it to the visibility timeout, as on AWS.
        max_receive_count: The redrive policy's maxReceiveCount (template: 5).
        work_dir: Where consumer traces and logs go (a new temporary directory when absent).
        names: Resource names (template-like local names by default).
        fifo_safe_broker: Run moto with the FIFO redelivery fix (default). False runs stock
            moto, whose FIFO violations the harness then has to report.
        host: Interface for moto and the simulator.
        moto_port: moto's port (0: ephemeral).
        simulator_port: The simulator's port (0: ephemeral).
        endpoints: AWS endpoints given for some services; moto serves the others (default:
            moto for all). On a given endpoint the resource names get a random suffix, so two
            runs on one emulator never see each other's messages.
        credentials: ``"static"`` (the simulator's bearer, no credential records) or ``"ims"``
            (each request's own user, exchanged from its promise token on the credentials
            table; the real path).
    """

    def __init__(
        self,
        *,
        latency_ms: float = 0.0,
        not_ready_ms: float = 0.0,
        enforcement_lag_ms: float | None = None,
        visibility_timeout_s: int = DEFAULT_VISIBILITY_TIMEOUT_S,
        max_receive_count: int = 5,
        retry_delay_s: int | None = LOCAL_RETRY_DELAY_S,
        work_dir: Path | None = None,
        names: LocalResourceNames | None = None,
        fifo_safe_broker: bool = True,
        host: str = "127.0.0.1",
        moto_port: int = 0,
        simulator_port: int = 0,
        token: str | None = None,
        endpoints: AwsEndpoints | None = None,
        credentials: CredentialMode = "static",
    ) -> None:
        if visibility_timeout_s < 2:
            raise ValueError("visibility_timeout_s must be at least 2 (the function needs 1 s)")
        self.latency_ms = latency_ms
        self.not_ready_ms = not_ready_ms
        self.enforcement_lag_ms = enforcement_lag_ms
        self.visibility_timeout_s = visibility_timeout_s
        self.retry_delay_s = (
            None if retry_delay_s is None else min(retry_delay_s, visibility_timeout_s)
        )
        self.endpoints = endpoints or AwsEndpoints()
        self.names = names or LocalResourceNames(
            visibility_timeout_s=visibility_timeout_s, max_receive_count=max_receive_count
        )
        if names is None and self.endpoints.given:
            self.names = self.names.with_suffix()
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="serenity-local-"))
        self.fifo_safe_broker = fifo_safe_broker
        self.credentials: CredentialMode = credentials
        self.region = LOCAL_REGION
        self._host = host
        self._moto_port = moto_port
        self._simulator_port = simulator_port
        # A fresh random bearer per stack unless one is given; the simulator accepts only it.
        self._token = token or f"local-{secrets.token_urlsafe(18)}"
        self._moto: MotoServer | None = None
        self._simulator: SimulatorServer | None = None
        self._resources: LocalResources | None = None
        self._outcomes: OutcomeCapture | None = None
        self._sqs: SQSClient | None = None
        self._pools: list[ConsumerPool] = []

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start moto and the simulator, create the resources and the outcome capture."""
        from serenity_tools.standins.moto_server import start_moto_server_process
        from serenity_tools.standins.simulator import DEFAULT_ENFORCEMENT_LAG_MS, start_simulator

        try:
            if self.endpoints.moto_services():
                self._moto = start_moto_server_process(
                    self._host, self._moto_port, fifo_fix=self.fifo_safe_broker
                )
            urls = self.endpoints.resolved(self._moto.endpoint_url if self._moto else None)
            self._simulator = start_simulator(
                self._host,
                self._simulator_port,
                accepted_tokens=[self._token],
                latency_ms=self.latency_ms,
                not_ready_ms=self.not_ready_ms,
                enforcement_lag_ms=(
                    DEFAULT_ENFORCEMENT_LAG_MS
                    if self.enforcement_lag_ms is None
                    else self.enforcement_lag_ms
                ),
            )
            self._resources = create_local_resources(
                urls,
                self.names,
                token=self._token,
                ims_consumer=self._simulator.ims_clients()["consumer"],
                ims_emitter=self._simulator.ims_clients()["emitter"],
            )
            self._outcomes = _outcome_capture(urls, self._resources.bus_name, self.names.bus)
            self._sqs = local_client("sqs", urls.url("sqs"))
        except BaseException:
            self.stop()
            raise
        self.work_dir.mkdir(parents=True, exist_ok=True)
        return self

    def stop(self) -> None:
        """Stop consumers, the simulator and moto (idempotent)."""
        self.stop_consumers()
        if self._simulator is not None:
            self._simulator.stop()
            self._simulator = None
        if self._moto is not None:
            self._moto.stop()
            self._moto = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- parts ----------------------------------------------------------------------------------

    @property
    def moto(self) -> MotoServer:
        """The running moto server (none runs when every service was given an endpoint)."""
        return _started(self._moto)

    @property
    def runs_moto(self) -> bool:
        """Whether a moto server was started (some service was given no endpoint)."""
        return self._moto is not None

    @property
    def simulator(self) -> SimulatorServer:
        """The running Semrush simulator."""
        return _started(self._simulator)

    @property
    def resources(self) -> LocalResources:
        """The created queue, DLQ, bucket, bus and secret."""
        return _started(self._resources)

    @property
    def outcomes(self) -> OutcomeCapture:
        """The outcome capture."""
        return _started(self._outcomes)

    @property
    def sqs(self) -> SQSClient:
        """An SQS client on moto, for the parent's own (light) calls."""
        return _started(self._sqs)

    @property
    def static_token(self) -> str:
        """The simulator's static bearer (the services' own write-gate calls use it)."""
        return self._token

    @property
    def function_timeout_s(self) -> float:
        """The Lambda context timeout: one second below the visibility timeout."""
        return float(self.visibility_timeout_s - 1)

    @property
    def semrush_timeout_s(self) -> float:
        """The Semrush per-request timeout: a third of the function's time, 0.5 s at least."""
        return round(max(0.5, min(15.0, self.function_timeout_s / 3)), 2)

    def client(self, service: str) -> Any:
        """A boto3 client for ``service`` on its endpoint (dummy credentials)."""
        return local_client(service, self.resources.endpoint(service))

    # -- environment ----------------------------------------------------------------------------

    def credential_env(self) -> dict[str, str]:
        """The variables of the stack's credential mode.

        ``ims``: the simulator as ``IMS_HOST``, the consumer pair's secret, the credentials
        table and key. ``static``: the simulator's bearer in ``SEMRUSH_TOKEN`` (loopback only:
        the settings refuse a plain token with any other base URL).
        """
        if self.credentials == "ims":
            return {"IMS_HOST": self.simulator.origin, **self.resources.credential_environment()}
        return {"SEMRUSH_TOKEN": self._token}

    def env(self, **overrides: str | None) -> dict[str, str]:
        """The exact environment the Allocator and Sweep handlers need on this stack.

        Args:
            **overrides: Variables to set (a value of None removes the variable).
        """
        resources = self.resources
        env = {
            "SEMRUSH_BASE_URL": self.simulator.origin,
            **self.credential_env(),
            "SEMRUSH_TIMEOUT_S": repr(self.semrush_timeout_s),
            # Its own setting since it stopped following SEMRUSH_TIMEOUT_S: a short stand-in
            # function needs short AWS calls too (16 s calls would leave it no time to apply).
            "AWS_CALL_BUDGET_S": repr(self.semrush_timeout_s),
            **resources.environment(),
            "ENVIRONMENT": LOCAL_ENVIRONMENT,
            "SERENITY_DYNAMIC_ALLOCATION": "true",
            "SAFETY_MARGIN_MS": str(LOCAL_SAFETY_MARGIN_MS),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "POWERTOOLS_SERVICE_NAME": "serenity-allocator",
            "POWERTOOLS_METRICS_NAMESPACE": "SerenityAllocator",
            "POWERTOOLS_LOG_LEVEL": "INFO",
        }
        for name, value in overrides.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = str(value)
        return env

    def printable_env(self, **overrides: str | None) -> dict[str, str]:
        """:meth:`env` without the bearer token (the secret in moto holds it)."""
        return {k: v for k, v in self.env(**overrides).items() if k not in _SECRET_ENV_NAMES}

    @contextlib.contextmanager
    def activated(self, **overrides: str | None) -> Iterator[dict[str, str]]:
        """Set :meth:`env` in ``os.environ`` for in-process handler calls; restore on exit.

        Variables the handlers or boto3 would otherwise pick up from the developer's shell
        (per-service endpoints, profiles) are removed for the duration.
        """
        env = self.env(**overrides)
        shadowed = [
            name
            for name in os.environ
            if name.startswith(("AWS_ENDPOINT_URL_", "AWS_PROFILE", "AWS_SESSION_TOKEN"))
        ]
        saved = {name: os.environ.get(name) for name in [*env, *shadowed]}
        try:
            for name in shadowed:
                os.environ.pop(name, None)
            os.environ.update(env)
            yield env
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    # -- consumers ------------------------------------------------------------------------------

    def start_consumers(
        self,
        count: int,
        *,
        crash: CrashPlan | None = None,
        idle_sleep_s: float = 0.1,
        handler: str = DEFAULT_HANDLER,
        queue: tuple[str, str] | None = None,
        **env_overrides: str | None,
    ) -> ConsumerPool:
        """Start ``count`` consumer processes (ready when this returns) and return their pool.

        Args:
            count: How many containers.
            crash: Optional crash injection for these consumers.
            idle_sleep_s: Pause after an empty receive.
            handler: ``MODULE:FUNCTION`` the containers call (default: the Allocator's).
            queue: (URL, ARN) of another queue on this moto to consume (default: the
                allocation queue).
            **env_overrides: Passed to :meth:`env` for these consumers.
        """
        queue_url, queue_arn = queue or (self.resources.queue_url, self.resources.queue_arn)
        pool = ConsumerPool(
            self.env(**env_overrides),
            queue_url=queue_url,
            queue_arn=queue_arn,
            region=self.region,
            work_dir=self.work_dir,
            function_timeout_s=self.function_timeout_s,
            idle_sleep_s=idle_sleep_s,
            crash=crash,
            name=f"pool-{len(self._pools) + 1}",
            handler=handler,
            retry_delay_s=self.retry_delay_s,
        )
        self._pools.append(pool)
        try:
            pool.start(count)
        except BaseException:
            pool.stop()
            raise
        return pool

    def stop_consumers(self) -> None:
        """Stop every consumer process this stack started."""
        for pool in self._pools:
            pool.stop()

    # -- queues ---------------------------------------------------------------------------------

    def queue_depth(self) -> QueueDepth:
        """The allocation queue's waiting and in-flight counts."""
        return queue_depth(self.sqs, self.resources.queue_url)

    def dlq_depth(self) -> QueueDepth:
        """The DLQ's waiting and in-flight counts."""
        return queue_depth(self.sqs, self.resources.dlq_url)

    def drain_queue(self, queue_url: str) -> list[MessageTypeDef]:
        """Receive AND delete every message of a queue on moto (every attribute included).

        A FIFO queue hides the later messages of a group from a reader that does not delete,
        so a complete read has to consume.
        """
        drained: list[MessageTypeDef] = []
        while True:
            messages = self.sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                return drained
            drained.extend(messages)
            self.sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]}
                    for index, message in enumerate(messages)
                ],
            )

    def read_dead_letters(
        self, dlq_url: str | None = None, *, earlier_reads: Mapping[str, int] | None = None
    ) -> list[DeadLetter]:
        """Read AND delete every message in the DLQ (or in ``dlq_url``, another DLQ on moto).

        Args:
            dlq_url: Another DLQ on moto (default: the allocation DLQ).
            earlier_reads: Message id -> times it was already received from the DLQ without
                being deleted (an audit that peeks): each counted one receive, like this read.
        """
        from serenity_allocator.adapters.sqs import REASON_ATTRIBUTE

        letters: list[DeadLetter] = []
        for message in self.drain_queue(dlq_url or self.resources.dlq_url):
            attributes = message.get("Attributes", {})
            reason: Mapping[str, Any] = message.get("MessageAttributes", {}).get(
                REASON_ATTRIBUTE, {}
            )
            letters.append(
                DeadLetter(
                    message_id=message["MessageId"],
                    group_id=attributes.get("MessageGroupId", ""),
                    body=message.get("Body", ""),
                    request_id=body_field(message.get("Body", ""), "request_id"),
                    reason=reason.get("StringValue"),
                    # The DLQ reads themselves counted one more receive each.
                    receive_count=int(attributes.get("ApproximateReceiveCount", "1"))
                    - 1
                    - (earlier_reads or {}).get(message["MessageId"], 0),
                )
            )
        return letters

    def describe(self) -> list[tuple[str, str]]:
        """(what, where) pairs for printing."""
        resources = self.resources
        return [
            *_endpoint_lines(self._moto, resources.endpoints),
            ("Semrush simulator", self.simulator.origin),
            ("allocation queue", resources.queue_url),
            ("dead-letter queue", resources.dlq_url),
            ("sweep bucket", resources.bucket),
            ("outcome bus", resources.bus_name),
            ("request ledger table", resources.ledger_table),
            ("outcome capture queue", self.outcomes.queue_url),
            ("token secret id", resources.secret_id or "-"),
            ("credentials table", resources.credentials_table),
            ("credentials key", resources.credentials_key_arn),
            ("IMS consumer secret", resources.consumer_secret_id or "-"),
            ("credential mode", self.credentials),
            ("visibility timeout", f"{self.visibility_timeout_s} s"),
            ("function timeout", f"{self.function_timeout_s} s"),
            ("failed record retry", f"{self.retry_delay_s} s" if self.retry_delay_s else "-"),
            ("work dir (traces, logs)", str(self.work_dir)),
        ]


# -- drain --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrainSummary:
    """The result of :func:`drain`."""

    drained: bool
    duration_s: float
    consumers: int
    restarts: int
    traces: TraceSummary
    trace_paths: list[Path]
    stdout_paths: list[Path]


def drain(
    stack: LocalStack,
    consumers: int = 4,
    timeout_s: float = 120.0,
    *,
    crash: CrashPlan | None = None,
) -> DrainSummary:
    """Run ``consumers`` consumer processes until the queue is empty with nothing in flight.

    Args:
        stack: A started local stack.
        consumers: How many containers to run.
        timeout_s: Give up after this long (``drained`` is then False).
        crash: Optional crash injection; dead consumers are replaced while draining.
    """
    started = time.monotonic()
    pool = stack.start_consumers(consumers, crash=crash)
    try:
        drained = pool.wait_drained(stack.queue_depth, timeout_s=timeout_s)
    finally:
        pool.stop()
    return DrainSummary(
        drained=drained,
        duration_s=time.monotonic() - started,
        consumers=consumers,
        restarts=pool.restarts,
        traces=summarize_traces(read_trace_events(pool.trace_paths)),
        trace_paths=pool.trace_paths,
        stdout_paths=pool.stdout_paths,
    )


def _outcome_capture(urls: ServiceEndpoints, bus_name: str, bus_stem: str) -> OutcomeCapture:
    # The bus delivers to a queue on its own emulator: the capture queue lives where the bus is.
    return create_outcome_capture(urls.url("events"), bus_name, f"{bus_stem}-capture"[:80])


def _endpoint_lines(
    moto: MotoServer | None, endpoints: ServiceEndpoints | None
) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    if moto is not None:
        lines += [("moto (AWS) endpoint", moto.endpoint_url), ("moto pid", str(moto.pid))]
    if endpoints is not None:
        lines += [
            (f"{service} endpoint", url)
            for service, url in endpoints.urls.items()
            if moto is None or url != moto.endpoint_url
        ]
    return lines


def _started(part: _T | None) -> _T:
    if part is None:
        raise RuntimeError("the local stack is not started")
    return part


# -- CLI: serenity-allocator local up ----------------------------------------------------------

_SIMULATOR_ROUTES = (
    ("POST", "/__seed", '{"workspaces": [{"id": "m1", "ai": {"prompts": {"used": 0, '
     '"drafted": 0, "total": 5000}, "projects": {...}}}, {"id": "c1", "parent_id": "m1", '
     '"ai": {...}}]}  (upserts; "limits_enabled": false = unmetered)'),
    ("POST", "/__usage", '{"id": "c1", "prompts": {"used": 10, "drafted": 0}}  (sets usage)'),
    ("GET", "/__dump", "-  (workspaces, call log, faults)"),
    ("POST", "/__faults", '{"enforcement_lag_ms": 0}  (and latency_ms, not_ready_ms, ...)'),
    ("POST", "/project-engine/v1/workspaces/{id}/prompts", '{"count": n}  (draft n; metered)'),
    ("POST", "/project-engine/v1/workspaces/{id}/prompts/publish", '{"count": n}  (not metered)'),
    ("POST", "/project-engine/v1/workspaces/{id}/projects", "{}  (one project; metered)"),
    ("DELETE", "/project-engine/v1/workspaces/{id}/prompts", '{"count": n}  (n published)'),
    ("DELETE", "/project-engine/v1/workspaces/{id}/projects", "{}  (one project)"),
)  # fmt: skip


def service_guide(stack: LocalStack) -> list[str]:
    """What a service on this machine needs: AWS settings, the bearer, the simulator's routes."""
    return guide_lines(
        stack.resources,
        region=stack.region,
        simulator_origin=stack.simulator.origin,
        enforcement_lag_ms=stack.enforcement_lag_ms,
    )


def guide_lines(
    resources: LocalResources,
    *,
    region: str,
    simulator_origin: str,
    enforcement_lag_ms: float | None,
) -> list[str]:
    """:func:`service_guide` from its parts: each service's endpoint as the stack uses it.

    ``AWS_ENDPOINT_URL`` is the default endpoint (moto when one runs) and every service
    elsewhere gets its ``AWS_ENDPOINT_URL_<SERVICE>`` (the same variables the handlers get), so
    a service configured from this guide talks to the endpoint the stack created its queue on.
    """
    endpoints = resources.endpoints or ServiceEndpoints.single(resources.endpoint_url)
    aws = " ".join(f"{name}={shlex.quote(url)}" for name, url in endpoints.environment().items())
    secrets = shlex.quote(endpoints.url("secretsmanager"))
    lag = enforcement_lag_ms
    lines = [
        "# for a service (any language; AWS SDKs read these, awscli v1 needs --endpoint-url):",
        f"export {aws} AWS_REGION={region} AWS_DEFAULT_REGION={region} "
        "AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing",
        f"export QUEUE_URL={shlex.quote(resources.queue_url)}",
        f"export DLQ_URL={shlex.quote(resources.dlq_url)}",
        f"export REQUEST_LEDGER_TABLE={shlex.quote(resources.ledger_table)}",
        f"export OUTCOME_BUS_NAME={shlex.quote(resources.bus_name)}",
        f"export SIMULATOR_ORIGIN={shlex.quote(simulator_origin)}",
        "# a request's promise token goes to the credentials table first (docs/credentials.md);",
        "# IMS is the simulator (users: POST /__ims/users, the emitter pair: GET /__ims/clients):",
        f"export IMS_HOST={shlex.quote(simulator_origin)}",
        f"export CREDENTIALS_TABLE={shlex.quote(resources.credentials_table)}",
        f"export CREDENTIALS_KEY_ARN={shlex.quote(resources.credentials_key_arn)}",
        "# the simulator's bearer (every route but /__*; pass --token to choose it):",
        f"#   aws --endpoint-url {secrets} secretsmanager get-secret-value "
        f"--secret-id {resources.secret_id or '-'} --query SecretString --output text",
        "# write gate: enforcement lag "
        f"{9000.0 if lag is None else lag:g} ms; a refusal is 405 text/html (the quota 405)",
        "# simulator routes (Authorization: Bearer <token>; /__* from loopback only):",
    ]
    lines += [f"#   {method:<6} {path}  {body}" for method, path, body in _SIMULATOR_ROUTES]
    return lines


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare ``serenity-allocator local up`` and its options."""
    from serenity_tools.standins import local_redrive

    parser.add_argument(
        "action",
        choices=["up", "redrive"],
        help="up: start the local stack; redrive: move the DLQ's messages back to the queue "
        "with new deduplication ids (start-message-move-task does not run on moto)",
    )
    parser.add_argument("--consumers", type=int, default=2, help="consumer processes (default 2)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="simulator latency")
    parser.add_argument("--not-ready-ms", type=float, default=0.0, help="not-ready window")
    parser.add_argument(
        "--enforcement-lag-ms",
        type=float,
        default=None,
        help="how far the write gate lags transfers (default 9000, the upstream's; 0: none)",
    )
    parser.add_argument(
        "--visibility-timeout-s",
        type=int,
        default=DEFAULT_VISIBILITY_TIMEOUT_S,
        help="queue visibility timeout (the function timeout is 1 s less; default: generous)",
    )
    parser.add_argument("--moto-port", type=int, default=0, help="moto port (0: ephemeral)")
    parser.add_argument("--simulator-port", type=int, default=0, help="simulator port")
    parser.add_argument("--work-dir", type=Path, default=None, help="traces and logs")
    parser.add_argument(
        "--token",
        default=None,
        help="the bearer the simulator accepts (default: a random one, kept in the moto secret)",
    )
    parser.add_argument(
        "--credentials",
        choices=["ims", "static"],
        default="ims",
        help="the consumers' authority: each request's own user from its promise token on the "
        "credentials table (default: what every deployment runs), or the static bearer "
        "(messages need no credential record)",
    )
    add_endpoint_flag(parser)
    local_redrive.configure(parser)


def run(args: argparse.Namespace) -> int:
    """``up``: start everything, print the environment, run until Ctrl-C; or ``redrive``."""
    if args.action == "redrive":
        from serenity_tools.standins import local_redrive

        return local_redrive.run(args)
    return _run_up(args)


def _run_up(args: argparse.Namespace) -> int:
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    with LocalStack(
        latency_ms=args.latency_ms,
        not_ready_ms=args.not_ready_ms,
        enforcement_lag_ms=args.enforcement_lag_ms,
        visibility_timeout_s=args.visibility_timeout_s,
        work_dir=args.work_dir,
        moto_port=args.moto_port,
        simulator_port=args.simulator_port,
        token=args.token,
        endpoints=endpoints_from_args(args),
        credentials=args.credentials,
    ) as stack:
        pool = stack.start_consumers(args.consumers) if args.consumers > 0 else None
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, request_stop)
            signal.signal(signal.SIGINT, request_stop)
        print("# serenity-allocator local stack is up")
        for what, where in stack.describe():
            print(f"#   {what:<24} {where}")
        print(f"#   {'consumers':<24} {args.consumers}")
        print("\n".join(service_guide(stack)))
        print("# environment for the handlers (the token lives in the local secret):")
        for name, value in stack.printable_env().items():
            print(f"export {name}={shlex.quote(value)}")
        print("# Ctrl-C to stop", flush=True)
        while not stopping.wait(1.0):
            if pool is not None:
                pool.restart_dead()  # a crashed container is replaced, as Lambda does
        print("# stopping", flush=True)
    return 0
