"""The simulator over HTTP: the threaded server, its request handler, and the server handle."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from . import control
from .ims import IMS_PREFIX, ImsConfig
from .model import (
    API_PREFIX,
    DEFAULT_ENFORCEMENT_LAG_MS,
    PROJECT_ENGINE_PREFIX,
    SimResponse,
    SimulatorControlError,
)
from .state import SimulatorState


@dataclass(frozen=True)
class TlsFiles:
    """A PEM certificate and its key: the simulator then serves HTTPS.

    For a client that always builds ``https://`` + a bare ``IMS_HOST``, as the upstream's IMS
    client does.
    """

    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        """The context the server wraps its socket with."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A context trusting exactly this certificate (loopback only: no name check)."""
        context = ssl.create_default_context(cafile=str(self.cert))
        context.check_hostname = False
        return context


class _SimulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Benchmarks open bursts of connections; the default backlog of 5 would refuse some.
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], state: SimulatorState) -> None:
        self.state = state
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _SimulatorHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (e.g. after its own timeout) is normal here, not an error.
        pass


class _SimulatorHTTPServerV6(_SimulatorHTTPServer):
    address_family = socket.AF_INET6


class _SimulatorHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: thousands of calls must not pay a connect each
    disable_nagle_algorithm = True  # small responses on kept-alive sockets would wait ~40 ms
    server: _SimulatorHTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request access log: benchmarks push thousands of requests."""

    def do_GET(self) -> None:
        """Serve a GET."""
        self._dispatch("GET")

    def do_POST(self) -> None:
        """Serve a POST."""
        self._dispatch("POST")

    def do_PUT(self) -> None:
        """Serve a PUT (always a plain 405 or 404)."""
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        """Serve a PATCH (always a plain 405 or 404)."""
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        """Serve a DELETE (always a plain 405 or 404)."""
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        try:
            raw_body = self._read_body()
        except ValueError:
            self._send(SimResponse(400, {"message": "bad Content-Length"}))
            return
        path = urlsplit(self.path).path
        state = self.server.state
        if path.startswith("/__"):
            response = self._control(method, path, raw_body)
        elif path.startswith(API_PREFIX + "/"):
            response = state.handle_api(
                method,
                path[len(API_PREFIX) :],
                authorization=self.headers.get("Authorization"),
                body=raw_body,
            )
        elif path.startswith(IMS_PREFIX + "/"):
            response = state.handle_ims(
                method, path, body=raw_body, content_type=self.headers.get("Content-Type")
            )
        elif path.startswith(PROJECT_ENGINE_PREFIX + "/"):
            response = state.handle_write(
                method,
                path[len(PROJECT_ENGINE_PREFIX) :],
                authorization=self.headers.get("Authorization"),
                body=raw_body,
            )
        else:
            response = SimResponse(404, {"message": "not found"})
        self._send(response)

    def _control(self, method: str, path: str, raw_body: bytes) -> SimResponse:
        refusal = control.control_refusal(str(self.client_address[0]), self.headers)
        if refusal is not None:
            return refusal
        # No auth and never logged: the refusal above is the control routes' only gate.
        return control.handle_control(self.server.state, method, path, raw_body)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError("negative Content-Length")
        return self.rfile.read(length) if length else b""

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # Drain trailers up to the blank line that ends the message.
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    def _send(self, response: SimResponse) -> None:
        if isinstance(response.body, str):
            payload = response.body.encode("utf-8")
            content_type = "text/html; charset=utf-8"
        else:
            payload = json.dumps(response.body, separators=(",", ":")).encode("utf-8")
            content_type = "application/json"
        content_type = response.content_type or content_type
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its own timeout): nothing left to answer.
            self.close_connection = True


# ---------------------------------------------------------------------------------------------
# The server handle
# ---------------------------------------------------------------------------------------------


class SimulatorServer:
    """A running simulator: its URLs, its state, and helpers calling the control routes over HTTP.

    Use it as a context manager (``with start_simulator() as sim:``) or call :meth:`stop`.
    """

    def __init__(
        self, httpd: _SimulatorHTTPServer, thread: threading.Thread, tls: TlsFiles | None = None
    ) -> None:
        self._httpd = httpd
        self._thread = thread
        self.state = httpd.state
        address = httpd.server_address
        self.host = str(address[0])
        self.port = int(address[1])
        # A wildcard bind is reached through loopback, which control routes also require.
        reach = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        scheme = "https" if tls is not None else "http"
        self.origin = (
            f"{scheme}://[{reach}]:{self.port}"
            if ":" in reach
            else f"{scheme}://{reach}:{self.port}"
        )
        self.api_url = self.origin + API_PREFIX
        self.write_url = self.origin + PROJECT_ENGINE_PREFIX
        """Base of the Project Engine write gate (``{write_url}/v1/workspaces/{id}/prompts``)."""
        # Control calls must never go through a proxy taken from the environment.
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if tls is not None:
            handlers.append(urllib.request.HTTPSHandler(context=tls.client_context()))
        self._opener = urllib.request.build_opener(*handlers)

    def stop(self) -> None:
        """Stop serving, close idle kept-alive connections and release the port."""
        self._httpd.shutdown()
        with self._httpd.connections_lock:
            open_connections = list(self._httpd.connections)
        for connection in open_connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> SimulatorServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def reset(self) -> None:
        """``POST /__reset``."""
        self._control("POST", "/__reset", {})

    def seed(self, workspaces: list[dict[str, Any]]) -> int:
        """``POST /__seed``; return how many workspaces were seeded."""
        answer = self._control("POST", "/__seed", {"workspaces": workspaces})
        return int(answer["seeded"])

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /__usage``; a refused metered write raises :class:`SimulatorControlError` 405."""
        answer: dict[str, Any] = self._control("POST", "/__usage", body)
        return answer

    def faults(self, **kwargs: Any) -> dict[str, Any]:
        """``POST /__faults`` with the given keys; return the whole fault configuration."""
        answer: dict[str, Any] = self._control("POST", "/__faults", kwargs)
        return answer

    def set_auth(self, tokens: list[str] | None) -> None:
        """``POST /__auth``: accept only ``tokens``, or any non-empty bearer when ``None``."""
        self._control("POST", "/__auth", {"tokens": tokens})

    def dump(self) -> dict[str, Any]:
        """``GET /__dump``: workspaces (seed shape), the call log and the faults."""
        answer: dict[str, Any] = self._control("GET", "/__dump", None)
        return answer

    def calls(self) -> list[dict[str, Any]]:
        """``GET /__calls``: the call log of the five API operations."""
        calls: list[dict[str, Any]] = self._control("GET", "/__calls", None)["calls"]
        return calls

    def clear_calls(self) -> None:
        """``POST /__calls/clear``."""
        self._control("POST", "/__calls/clear", {})

    def ims_user(self, user: str, workspaces: list[str], *, semrush_record: bool = True) -> str:
        """``POST /__ims/users``: create or replace ``user``; return a new access token."""
        body = {"user": user, "workspaces": workspaces, "semrush_record": semrush_record}
        return str(self._control("POST", "/__ims/users", body)["access_token"])

    def ims_clients(self) -> dict[str, Any]:
        """``GET /__ims/clients``: the emitter and consumer client pairs."""
        answer: dict[str, Any] = self._control("GET", "/__ims/clients", None)
        return answer

    def ims_calls(self) -> list[dict[str, Any]]:
        """``GET /__ims/calls``: the IMS call log (ops, client ids, statuses, users)."""
        calls: list[dict[str, Any]] = self._control("GET", "/__ims/calls", None)["calls"]
        return calls

    def _control(self, method: str, route: str, payload: Any) -> Any:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(  # noqa: S310 - the URL is our own loopback origin
            self.origin + route,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with self._opener.open(request, timeout=30) as answer:
                text = answer.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", errors="replace")
            try:
                body = json.loads(text)
            except json.JSONDecodeError:
                body = text
            raise SimulatorControlError(exc.code, body, text) from exc
        return json.loads(text) if text else None


def start_simulator(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    accepted_tokens: Iterable[str] | None = None,
    state: SimulatorState | None = None,
    latency_ms: float = 0.0,
    not_ready_ms: float = 0.0,
    enforcement_lag_ms: float = DEFAULT_ENFORCEMENT_LAG_MS,
    ims_config: ImsConfig | None = None,
    tls: TlsFiles | None = None,
) -> SimulatorServer:
    """Serve a simulator on a background thread and return its handle (port 0: ephemeral).

    Args:
        host: interface to bind; ``127.0.0.1`` by default.
        port: TCP port, 0 for an ephemeral one (read ``.port`` / ``.origin``).
        accepted_tokens: bearer tokens to accept; ``None`` accepts any non-empty bearer.
        state: a prepared :class:`SimulatorState` (e.g. with an injected clock); when given,
            ``latency_ms``/``not_ready_ms`` are ignored and ``accepted_tokens`` (if not None)
            replaces its accepted tokens.
        latency_ms: added latency per API request (new state only).
        not_ready_ms: not-ready window after a transfer or a creation (new state only).
        enforcement_lag_ms: how far the write gate lags transfers (new state only).
        ims_config: IMS client pairs and times to live (new state only; local defaults).
        tls: serve HTTPS with this certificate (default plain HTTP).
    """
    if state is None:
        state = SimulatorState(
            accepted_tokens=accepted_tokens,
            latency_ms=latency_ms,
            not_ready_ms=not_ready_ms,
            enforcement_lag_ms=enforcement_lag_ms,
            ims_config=ims_config,
        )
    elif accepted_tokens is not None:
        state.set_auth(accepted_tokens)
    server_class = _SimulatorHTTPServerV6 if ":" in host else _SimulatorHTTPServer
    httpd = server_class((host, port), state)
    if tls is not None:
        httpd.socket = tls.server_context().wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.05},
        name=f"semrush-simulator-{httpd.server_address[1]}",
        daemon=True,
    )
    thread.start()
    return SimulatorServer(httpd, thread, tls)
