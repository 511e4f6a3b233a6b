"""A small delaying and answering HTTP proxy on loopback, in front of the moto server.

Point one service's endpoint variable (``AWS_ENDPOINT_URL_SQS``, ``..._EVENTBRIDGE``) at it.
Every request is forwarded to moto unchanged; the requests a rule picks are held back
first, as a slow or overloaded regional endpoint would. A held request is still forwarded when
its client has given up (a real endpoint may also complete a request its caller abandoned).
An ``answer`` may reply to a request itself instead of forwarding it, as a throttled endpoint
does (a ``BatchGetItem`` that leaves every key unprocessed: :func:`unprocessed_batch_get`).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

HoldRule = Callable[[Mapping[str, str], bytes], bool]
"""(request headers with lower-case names, request body) -> hold this request back?"""
Answer = Callable[[Mapping[str, str], bytes], bytes | tuple[int, bytes] | None]
"""(request headers, request body) -> a JSON reply sent instead of forwarding (200, or the
status given with it), or None."""


def never(headers: Mapping[str, str], body: bytes) -> bool:
    """Hold nothing."""
    return False


def unprocessed_batch_get(times: int | None = None) -> tuple[Answer, list[int]]:
    """An answer leaving every key of a ``BatchGetItem`` unprocessed (DynamoDB throttling).

    The first ``times`` calls are answered so (every call when None), later ones are
    forwarded. Returns the answer and a list that counts the calls it answered.
    """
    answered: list[int] = []

    def answer(headers: Mapping[str, str], body: bytes) -> bytes | None:
        if headers.get("x-amz-target", "") != "DynamoDB_20120810.BatchGetItem":
            return None
        if times is not None and len(answered) >= times:
            return None
        answered.append(1)
        request = json.loads(body)
        tables: dict[str, list[object]] = {name: [] for name in request["RequestItems"]}
        return json.dumps(
            {"Responses": tables, "UnprocessedKeys": request["RequestItems"]}
        ).encode()

    return answer, answered


def throttled(operation: str, *, body_contains: str = "") -> tuple[Answer, list[int]]:
    """An answer throttling every JSON-protocol call of ``operation`` whose body contains
    ``body_contains`` (400 ``ThrottlingException``, as DynamoDB and KMS answer); the list counts
    the calls it answered."""
    answered: list[int] = []
    pick = target_is(operation, body_contains=body_contains)

    def answer(headers: Mapping[str, str], body: bytes) -> tuple[int, bytes] | None:
        if not pick(headers, body):
            return None
        answered.append(1)
        error = {"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException"}
        return 400, json.dumps(
            {**error, "message": "Rate of requests exceeds the allowed throughput."}
        ).encode()

    return answer, answered


_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "host"})


def target_is(operation: str, *, body_contains: str = "") -> HoldRule:
    """Hold JSON-protocol calls of ``operation`` (``AmazonSQS.SendMessage``...) whose body
    contains ``body_contains``."""

    def rule(headers: Mapping[str, str], body: bytes) -> bool:
        return headers.get("x-amz-target", "") == operation and body_contains.encode() in body

    return rule


class FunctionClock:
    """The function's monotonic clock, moved only by the calls the proxy holds.

    Give it to the worker's runtime and to its Lambda context: the invocation's deadline then
    runs on this clock, and a held call costs the worker exactly its whole budget whatever the
    machine's speed, so a test can say which calls fit and which were never started.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.start = start
        self._now = start
        self._lock = threading.Lock()
        self.charged_at: list[float] = []
        """Seconds into the invocation at which each held call started, in order."""

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def charge(self, seconds: float) -> None:
        """A held call started now and will cost ``seconds``."""
        with self._lock:
            self.charged_at.append(self._now - self.start)
            self._now += seconds


def charging(rule: HoldRule, clock: FunctionClock, seconds: float) -> HoldRule:
    """``rule``, and each request it holds moves ``clock`` on by ``seconds`` as it arrives."""

    def charged(headers: Mapping[str, str], body: bytes) -> bool:
        if not rule(headers, body):
            return False
        clock.charge(seconds)
        return True

    return charged


class SlowProxy:
    """The running proxy: its URL and the operations it held back."""

    def __init__(self, server: ThreadingHTTPServer, delays: list[str]) -> None:
        self._server = server
        self.held: list[str] = delays

    @property
    def url(self) -> str:
        """The proxy's endpoint URL."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"


@contextmanager
def slow_proxy(
    upstream: str, delay_s: float, rule: HoldRule, reply_with: Answer | None = None
) -> Iterator[SlowProxy]:
    """Run a proxy to ``upstream`` that holds requests matching ``rule`` for ``delay_s``.

    A request ``reply_with`` answers gets that reply instead of being forwarded.
    """
    target = urlsplit(upstream)
    held: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            if rule(headers, body):
                held.append(headers.get("x-amz-target", self.path))
                time.sleep(delay_s)
            reply = reply_with(headers, body) if reply_with is not None else None
            if reply is not None:
                status, payload = reply if isinstance(reply, tuple) else (200, reply)
                self._send(status, [("Content-Type", "application/x-amz-json-1.0")], payload)
                return
            connection = http.client.HTTPConnection(target.hostname or "", target.port, timeout=30)
            try:
                forwarded = {k: v for k, v in headers.items() if k not in _HOP_BY_HOP}
                connection.request("POST", self.path, body=body, headers=forwarded)
                answer = connection.getresponse()
                status, answer_headers, payload = answer.status, answer.getheaders(), answer.read()
            except OSError:  # moto already stopped (a request held past the end of its test)
                status, answer_headers, payload = 502, [], b""
            finally:
                connection.close()
            self._send(status, answer_headers, payload)

        def _send(self, status: int, answer_headers: list[tuple[str, str]], payload: bytes) -> None:
            try:
                self.send_response(status)
                for name, value in answer_headers:
                    if name.lower() not in _HOP_BY_HOP | {"content-length"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client timed out and left; the upstream still got the request

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield SlowProxy(server, held)
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def slow_aws_service(
    endpoint_url: str,
    endpoint_variable: str,
    rule: HoldRule,
    *,
    monkeypatch: pytest.MonkeyPatch,
    clock: FunctionClock,
    hold_s: float,
    charge_s: float,
) -> Iterator[SlowProxy]:
    """One AWS service behind the proxy: held calls wait ``hold_s`` and cost ``charge_s``.

    ``endpoint_variable`` (``AWS_ENDPOINT_URL_SQS``, ...) points that service at the proxy, so
    the clients the worker builds from then on go through it; the other services stay direct.
    """
    with slow_proxy(endpoint_url, hold_s, charging(rule, clock, charge_s)) as proxy:
        monkeypatch.setenv(endpoint_variable, proxy.url)
        yield proxy
