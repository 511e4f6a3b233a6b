"""``serenity-allocator sweep``: run a rightsizing sweep to its end, with progress and a report.

One loop drives every target: it sends the payload, gets one batch result back, shows the
progress, and sends the payload again with the run's ``run_id`` until the result says ``done``
or ``aborted``. What "send" means is a :class:`SweepInvoker`:

- :class:`LambdaInvoker` (``--function-name``) invokes the deployed Sweep function
  (RequestResponse); a function error stops the loop with Lambda's error payload.
- :class:`StateMachineInvoker` (``--state-machine-arn``) starts one execution of the sweep state
  machine (which loops the function itself) and returns each batch result as it appears in the
  execution history; a failed execution without a final result stops the loop.
- :class:`LocalInvoker` (``--local``) calls the same handler in-process, configured from the
  current environment (what ``serenity-allocator local up`` printed).

The payload is built from the flags and validated with the handler's own model before anything
is invoked, so a bad value is refused here, naming the flag and the payload field
(:mod:`.sweep_payloads`); the summary and the report are :mod:`.sweep_report`'s.

Exit codes: 0 when the run finished with no unexpected error; 1 when it aborted, finished with
unexpected errors, or an invocation failed; 2 for bad flags or configuration; 130 when
interrupted (the run resumes with ``--run-id``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from .sweep_credentials import configure as configure_tokens
from .sweep_credentials import hand_over, read_operator_token
from .sweep_invokers import (
    LAMBDA_MAX_TIMEOUT_S,
    LOCAL_FUNCTION_NAME,
    LambdaInvoker,
    LocalInvoker,
    StateMachineInvoker,
    SweepInvocationError,
    SweepInvoker,
)
from .sweep_payloads import SweepCliError, build_abandon_payload, build_payload, int_or_text
from .sweep_report import SweepRun, format_summary, write_report

__all__ = [
    "LAMBDA_MAX_TIMEOUT_S",
    "LOCAL_FUNCTION_NAME",
    "LambdaInvoker",
    "LocalInvoker",
    "ProgressDisplay",
    "StateMachineInvoker",
    "SweepCliError",
    "SweepInvocationError",
    "SweepInvoker",
    "SweepRun",
    "build_payload",
    "configure",
    "drive_sweep",
    "execute",
    "format_summary",
    "run",
    "write_report",
]

MAX_STALLED_BATCHES = 3
"""Batches in a row that process nothing (too little time left to start a target) before the
loop gives up instead of invoking forever."""

# ---------------------------------------------------------------- the loop


def drive_sweep(
    invoker: SweepInvoker,
    payload: Mapping[str, Any],
    *,
    on_batch: Callable[[SweepRun], None] | None = None,
    max_stalled: int = MAX_STALLED_BATCHES,
    record: SweepRun | None = None,
) -> SweepRun:
    """Invoke batch after batch, feeding back the run id, until the run is done or aborted.

    An invocation error ends the loop (recorded in ``SweepRun.error``), as do ``max_stalled``
    batches in a row that processed nothing. ``KeyboardInterrupt`` propagates; pass ``record``
    to keep what was seen so far.
    """
    sweep = record if record is not None else SweepRun(payload=dict(payload))
    request = dict(payload)
    stalled = 0
    while True:
        try:
            result = invoker.invoke(request)
        except SweepInvocationError as exc:
            sweep.error = exc.payload
            return sweep
        sweep.add(result)
        if on_batch is not None:
            on_batch(sweep)
        if result["done"] or result["aborted"]:
            return sweep
        # ``items`` lists this invocation's children: none means it had no time to start one.
        stalled = 0 if result.get("items") else stalled + 1
        if stalled >= max_stalled:
            sweep.error = {
                "errorType": "NoProgress",
                "errorMessage": f"{stalled} batches in a row processed nothing; "
                "check the function's remaining-time budget",
            }
            return sweep
        # Every later batch resumes the same run, with the same parameters.
        request = {**payload, "run_id": result["run_id"]}


# ---------------------------------------------------------------- progress and output


class ProgressDisplay:
    """Processed / total and the counts so far, on one line of a terminal, rewritten in place.

    When the stream is not a terminal (a log file, CI), each batch gets its own line instead.

    Args:
        stream: Where to write (stderr by default, so stdout keeps only the summary).
        is_tty: Override the terminal detection.
        width: Bar width in characters.
    """

    def __init__(self, stream: TextIO, *, is_tty: bool | None = None, width: int = 30) -> None:
        self._stream = stream
        self._tty = stream.isatty() if is_tty is None else is_tty
        self._width = width
        self._shown = 0
        self._batches = 0

    def update(self, run: SweepRun) -> None:
        """Show the run's state after its latest batch."""
        last = run.last
        if last is None:
            return
        self._batches += 1
        processed, total = int(last["processed"]), int(last["total"])
        counts = ", ".join(f"{name} {value}" for name, value in run.counts.items() if value)
        tail = f"  {counts}" if counts else ""
        if self._tty:
            filled = self._width if total == 0 else self._width * processed // total
            bar = "#" * filled + "-" * (self._width - filled)
            line = f"[{bar}] {processed}/{total}{tail}"
            # Pad over the previous line's tail: \r only moves the cursor.
            padding = " " * max(0, self._shown - len(line))
            self._stream.write(f"\r{line}{padding}")
            self._shown = len(line)
        else:
            self._stream.write(f"batch {self._batches}: {processed}/{total} processed{tail}\n")
        self._stream.flush()

    def close(self) -> None:
        """End the progress line (terminal only)."""
        if self._tty and self._shown:
            self._stream.write("\n")
            self._stream.flush()
            self._shown = 0


def _report_path(value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    if path.suffix.lower() not in {".json", ".csv"}:
        raise SweepCliError(f"--report {value}: the file name must end in .json or .csv")
    if not path.parent.is_dir():
        raise SweepCliError(f"--report {value}: no such directory {path.parent}")
    return path


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``sweep`` subcommand's arguments."""
    parser.add_argument(
        "--parent",
        dest="parents",
        action="append",
        metavar="ID",
        help="master workspace (org pool) to sweep; repeat or comma-separate for several "
        "(required, except with --abandon)",
    )
    parser.add_argument(
        "--workspace",
        dest="workspaces",
        action="append",
        metavar="ID[,ID...]",
        help="sweep only these children (an id that is not a child is reported, not swept)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="preview the targets; enqueue nothing"
    )
    numbers = (
        ("--limit", "at most N children in the whole run"),
        ("--rate-limit-ms", "pause between two targets (default 300)"),
        ("--max-consecutive-errors", "abort after N unexpected errors in a row (default 5)"),
        ("--batch-size", "at most N children per invocation (default 25)"),
        ("--max-attempts", "attempts per child before it ends failed (default 3)"),
        ("--rate-limit-backoff-s", "seconds one child may back off 429s (default 60)"),
        ("--floor-projects", "lowest projects total to keep (with --floor-prompts)"),
        ("--floor-prompts", "lowest prompts total to keep (with --floor-projects)"),
    )
    for flag, help_text in numbers:
        parser.add_argument(flag, type=int_or_text, metavar="N", help=help_text)
    parser.add_argument("--run-id", help="resume this run (absent: a new run)")
    parser.add_argument(
        "--abandon",
        action="store_true",
        help="end the unfinished run --run-id (or the run holding one --parent) for good and "
        "free its parents; also over an unreadable checkpoint or claim (one invocation)",
    )
    parser.add_argument("--reason", help="why the run is abandoned (with --abandon)")
    parser.add_argument(
        "--allow-when-disabled",
        action="store_true",
        help="run a real sweep even while SERENITY_DYNAMIC_ALLOCATION is off",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--function-name", help="invoke the deployed Sweep function in a loop")
    target.add_argument("--state-machine-arn", help="start the sweep state machine and follow it")
    target.add_argument(
        "--local",
        action="store_true",
        help="run the handler in-process against the local stack (environment as printed by "
        "'serenity-allocator local up')",
    )
    parser.add_argument("--report", metavar="FILE", help="write every child's line (.json/.csv)")
    configure_tokens(parser)
    parser.add_argument(
        "--poll-interval-s",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between polls of the state machine (default 5)",
    )


def _invoker(args: argparse.Namespace, stderr: TextIO) -> SweepInvoker:
    if args.function_name:
        return LambdaInvoker(args.function_name)
    if args.state_machine_arn:
        if args.poll_interval_s <= 0:
            raise SweepCliError("--poll-interval-s must be positive")
        return StateMachineInvoker(
            args.state_machine_arn,
            poll_interval_s=args.poll_interval_s,
            notify=lambda note: print(f"sweep: {note}", file=stderr),
        )
    from serenity_allocator.handlers.settings import SettingsError, SweepSettings

    try:
        # Checked before the first batch so a missing variable is a configuration error.
        SweepSettings.from_env(os.environ)
    except SettingsError as exc:
        raise SweepCliError(f"--local: {exc}") from None
    return LocalInvoker()


def execute(
    args: argparse.Namespace,
    invoker: SweepInvoker | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    is_tty: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Validate the flags, hand the operator's token over, drive the run, print the summary.

    ``invoker`` replaces the one the target flags choose and ``env`` the process environment
    (tests); see the module docstring for the exit codes.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    if args.abandon:
        return _abandon(args, invoker, out, err)
    try:
        payload = build_payload(args)
        report = _report_path(args.report)
        chosen = invoker or _invoker(args, err)
        _hand_over_token(args, payload, os.environ if env is None else env, err)
    except SweepCliError as exc:
        print(f"sweep: {exc}", file=err)
        return 2
    sweep = _drive(chosen, payload, ProgressDisplay(err, is_tty=is_tty))
    return _finish(sweep, report, out, err)


def _hand_over_token(
    args: argparse.Namespace, payload: dict[str, Any], env: Mapping[str, str], err: TextIO
) -> None:
    """With a token given: fix the run id, then put the token on the run's claim (encrypted).

    Raises:
        SweepCliError: see :func:`.sweep_credentials.hand_over`.
    """
    token = read_operator_token(args, env)
    if token is None:
        return
    if "run_id" not in payload:
        from serenity_allocator.handlers.sweep_runtime import new_run_id

        # The claim is written before the first invocation, so the run id is chosen here.
        payload["run_id"] = new_run_id()
    hand_over(args, env, payload["run_id"], token)
    print(
        f"sweep: run {payload['run_id']}: {token.kind} token from {token.source} handed over",
        file=err,
    )


def _drive(invoker: SweepInvoker, payload: dict[str, Any], progress: ProgressDisplay) -> SweepRun:
    """Run the sweep batch after batch; Ctrl-C stops it, and the run says it was interrupted."""
    sweep = SweepRun(payload=payload)
    try:
        drive_sweep(invoker, payload, on_batch=progress.update, record=sweep)
    except KeyboardInterrupt:
        sweep.interrupted = True
    finally:
        progress.close()
    return sweep


def _finish(sweep: SweepRun, report: Path | None, out: TextIO, err: TextIO) -> int:
    """Print the summary, write the report, say how to resume; the exit code."""
    print(format_summary(sweep), file=out)
    if sweep.error is not None:
        print("sweep: invocation failed:", json.dumps(sweep.error, default=str), file=err)
    if report is not None:
        write_report(report, sweep)
        print(f"sweep: report written to {report}", file=err)
    if sweep.succeeded:
        return 0
    if sweep.run_id and not sweep.done:
        print(f"sweep: resume with --run-id {sweep.run_id}", file=err)
    return 130 if sweep.interrupted else 1


def _abandon(
    args: argparse.Namespace, invoker: SweepInvoker | None, out: TextIO, err: TextIO
) -> int:
    """Send the abandon payload once; print what was freed."""
    try:
        payload = build_abandon_payload(args)
        if args.state_machine_arn and invoker is None:
            raise SweepCliError("--abandon invokes the function: use --function-name or --local")
        chosen = invoker or _invoker(args, err)
    except SweepCliError as exc:
        print(f"sweep: {exc}", file=err)
        return 2
    try:
        result = chosen.invoke(payload)
    except SweepInvocationError as exc:
        print("sweep: abandon failed:", json.dumps(exc.payload, default=str), file=err)
        return 1
    freed = ", ".join(result.get("released_parents") or []) or "none"
    if result.get("run_id") is None:
        print(f"unreadable claim cleared; parents freed: {freed}", file=out)
    else:
        print(f"run {result['run_id']} abandoned; parents freed: {freed}", file=out)
    if result.get("unreadable"):
        print(f"replaced an unreadable document ({result['unreadable']})", file=out)
    print(f"checkpoint kept at {result.get('checkpoint')}", file=out)
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the ``sweep`` subcommand; see the module docstring for the exit codes."""
    return execute(args)
