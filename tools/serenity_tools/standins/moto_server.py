"""A local AWS (moto) that serves one request at a time, in a thread or in its own process.

moto's SQS backend is not safe under concurrent requests: measured with moto's threaded server
and 8 consumers, one FIFO group was handed to two consumers at once and delivered out of order.
So this broker runs moto's WSGI app under a single-threaded werkzeug server: requests are served
strictly one after another, and werkzeug answers HTTP/1.0 without keep-alive, so one client's
idle connection never holds the server.

Consequence for clients: use short polling (``WaitTimeSeconds=0``). A long poll on an empty
queue makes moto wait inside the request and holds every other client for that long.

moto 5.x also breaks FIFO order when several in-flight messages of one group become visible
together, and forgets a dedup id once its message is deleted; both launchers apply
:func:`.moto_fifo.patch_moto_fifo` (redelivery order, dedup window and scope, increasing
sequence numbers) unless told not to. Both always trim two of moto's avoidable costs, a key
pair built for every KMS key and a folder scan on every request (:mod:`.moto_overheads`).

Run it standalone with ``python -m serenity_tools.standins.moto_server --port 5000``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from serenity_tools.standins.moto_fifo import patch_moto_fifo
from serenity_tools.standins.moto_overheads import trim_moto_overheads

READY_PREFIX = "MOTO_READY "
_START_TIMEOUT_S = 60.0


class MotoServer:
    """A running moto server: its endpoint and how to stop it.

    Use as a context manager, or call :meth:`stop`. ``threaded`` is always False: the server
    handles one request at a time (see the module docstring).
    """

    def __init__(
        self,
        host: str,
        port: int,
        stopper: Callable[[], None],
        *,
        pid: int | None = None,
        wsgi_server: Any = None,
    ) -> None:
        self.host = host
        self.port = port
        self.pid = pid
        """The OS process id when the server runs in its own process; None when in a thread."""
        self.wsgi_server = wsgi_server
        """The werkzeug server when in a thread (for inspection); None when in a process."""
        self.threaded = False
        self._stopper = stopper
        self._stopped = False

    @property
    def endpoint_url(self) -> str:
        """The URL to hand to boto3 (``AWS_ENDPOINT_URL``)."""
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if not self._stopped:
            self._stopped = True
            self._stopper()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def make_single_threaded_server(host: str, port: int) -> Any:
    """Build (not start) a single-threaded werkzeug server around moto's WSGI app."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class _QuietHandler(MotoRequestHandler):
        # One access-log line per request would flood the output of every test and the demo.
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    app = DomainDispatcherApplication(create_backend_app)
    return make_server(host, port, app, threaded=False, processes=1, request_handler=_QuietHandler)


def start_moto_server(
    host: str = "127.0.0.1", port: int = 0, *, fifo_fix: bool = True
) -> MotoServer:
    """Start moto in a background thread of this process, on an ephemeral port by default.

    Args:
        host: The interface to bind.
        port: The port; 0 picks a free one.
        fifo_fix: Apply :func:`.moto_fifo.patch_moto_fifo` to this process's moto
            first (stock moto 5.x breaks FIFO order on redelivery).

    Returns:
        The running server (``.endpoint_url``, ``.stop()``).
    """
    if fifo_fix:
        patch_moto_fifo()
    trim_moto_overheads()
    server = make_single_threaded_server(host, port)
    thread = threading.Thread(target=server.serve_forever, name="moto-server", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

    return MotoServer(host, int(server.server_port), stop, wsgi_server=server)


def start_moto_server_process(
    host: str = "127.0.0.1", port: int = 0, *, fifo_fix: bool = True
) -> MotoServer:
    """Start moto in a separate OS process (``python -m serenity_tools.standins.moto_server``).

    The child binds first, then writes ``MOTO_READY <port>`` on its stdout pipe; this call
    returns once that line arrives, so the endpoint is accepting connections. The child exits
    by itself if this process dies (kill -9), so an orphan never holds the port.

    Args:
        host: The interface to bind.
        port: The port; 0 picks a free one.
        fifo_fix: Serve with the FIFO redelivery fix (:mod:`.moto_fifo`); False runs stock
            moto, to show the broker's own violation.

    Returns:
        The running server (``.endpoint_url``, ``.pid``, ``.stop()`` terminates the process).

    Raises:
        RuntimeError: The process exited or did not report ready in time.
    """
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serenity_tools.standins.moto_server",
            "--host",
            host,
            "--port",
            str(port),
            "--parent-pid",
            str(os.getpid()),
            *([] if fifo_fix else ["--stock-fifo"]),
        ],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None  # stdout=PIPE above
    ready: list[str] = []
    reader = threading.Thread(
        target=lambda: ready.append(process.stdout.readline()),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    reader.join(_START_TIMEOUT_S)
    line = ready[0] if ready else ""
    if not line.startswith(READY_PREFIX):
        process.kill()
        process.wait()
        raise RuntimeError(f"moto server process did not start (exit code {process.returncode})")
    actual_port = int(line[len(READY_PREFIX) :].strip())

    def stop() -> None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    return MotoServer(host, actual_port, stop, pid=process.pid)


def _exit_when_orphaned(parent_pid: int) -> None:
    # A broker whose parent died (kill -9) would otherwise hold its port forever.
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


def serve(host: str, port: int, *, fifo_fix: bool = True, parent_pid: int | None = None) -> None:
    """Serve in the foreground until terminated, announcing the port on stdout first."""
    if fifo_fix:
        patch_moto_fifo()
    trim_moto_overheads()
    if parent_pid is not None:
        threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    server = make_single_threaded_server(host, port)
    sys.stdout.write(f"{READY_PREFIX}{server.server_port}\n")
    sys.stdout.flush()
    # Nobody reads the pipe after the ready line: send later output nowhere so a full pipe
    # can never block the server.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    try:
        server.serve_forever()
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--host`` and ``--port`` (0 = ephemeral, printed on the ready line)."""
    parser = argparse.ArgumentParser(description="single-threaded moto server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--stock-fifo", action="store_true", help="no FIFO redelivery fix")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the broker with SIGTERM
    try:
        serve(args.host, args.port, fifo_fix=not args.stock_fifo, parent_pid=args.parent_pid)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
