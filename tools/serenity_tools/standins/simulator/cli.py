"""The ``serenity-allocator simulator`` subcommand: serve the simulator until interrupted."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path
from types import FrameType

from .ims import ImsConfig
from .model import DEFAULT_ENFORCEMENT_LAG_MS, SimulatorRequestError
from .server import TlsFiles, start_simulator


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``serenity-allocator simulator`` options."""
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    parser.add_argument("--port", type=int, default=8765, help="TCP port (0: ephemeral)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="latency per API request")
    parser.add_argument(
        "--not-ready-ms", type=float, default=0.0, help="not-ready window after a transfer"
    )
    parser.add_argument(
        "--enforcement-lag-ms",
        type=float,
        default=DEFAULT_ENFORCEMENT_LAG_MS,
        help="how far the write gate lags transfers (0: no lag)",
    )
    parser.add_argument(
        "--token",
        dest="tokens",
        action="append",
        default=None,
        help="accept only this bearer (repeatable); default: any non-empty bearer",
    )
    parser.add_argument(
        "--ims-config",
        type=Path,
        default=None,
        help='JSON file: {"emitter", "consumer", "promise_ttl_s", "access_ttl_s", '
        '"exchanged_ttl_s"} (IMS)',
    )
    parser.add_argument(
        "--tls-cert", type=Path, default=None, help="PEM certificate: serve HTTPS (with --tls-key)"
    )
    parser.add_argument("--tls-key", type=Path, default=None, help="PEM key of --tls-cert")
    parser.add_argument(
        "--seed-file", type=Path, default=None, help="JSON file: a list of seed workspaces"
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted (Ctrl-C or SIGTERM); return the exit code."""
    try:
        ims_config = _ims_config(args.ims_config)
    except SimulatorRequestError as exc:
        print(f"semrush simulator: bad IMS config: {exc.message}", flush=True)
        return 2
    if (args.tls_cert is None) != (args.tls_key is None):
        print("semrush simulator: --tls-cert and --tls-key go together", flush=True)
        return 2
    tls = None if args.tls_cert is None else TlsFiles(args.tls_cert, args.tls_key)
    server = start_simulator(
        args.host,
        args.port,
        accepted_tokens=args.tokens,
        latency_ms=args.latency_ms,
        not_ready_ms=args.not_ready_ms,
        enforcement_lag_ms=args.enforcement_lag_ms,
        ims_config=ims_config,
        tls=tls,
    )
    stopping = threading.Event()

    def _request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    try:
        if args.seed_file is not None:
            seeded = json.loads(args.seed_file.read_text(encoding="utf-8"))
            workspaces = seeded.get("workspaces") if isinstance(seeded, dict) else seeded
            server.state.seed(workspaces)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _request_stop)
            signal.signal(signal.SIGINT, _request_stop)
        # One line a harness can wait for and parse (the port may have been ephemeral).
        print(f"semrush simulator listening on {server.origin} api={server.api_url}", flush=True)
        while not stopping.wait(0.5):
            pass
    except SimulatorRequestError as exc:
        print(f"semrush simulator: bad seed file: {exc.message}", flush=True)
        return 2
    finally:
        server.stop()
    return 0


def _ims_config(path: Path | None) -> ImsConfig:
    if path is None:
        return ImsConfig()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SimulatorRequestError(400, f"{path} is not readable JSON") from exc
    return ImsConfig.from_mapping(raw)
