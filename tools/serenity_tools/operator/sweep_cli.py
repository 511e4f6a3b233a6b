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
is invoked, so a bad value is refused here, naming the flag and the payload field.

Exit codes: 0 when the run finished with no unexpected error; 1 when it aborted, finished with
unexpected errors, or an invocation failed; 2 for bad flags or configuration; 130 when
interrupted (the run resumes with ``--run-id``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pydantic import ValidationError

from serenity_allocator.domain.sweep_model import (
    SweepAbandonRequest,
    SweepCounts,
    SweepParentAbandonRequest,
    SweepRequest,
)

from .sweep_invokers import (
    LAMBDA_MAX_TIMEOUT_S,
    LOCAL_FUNCTION_NAME,
    LambdaInvoker,
    LocalInvoker,
    StateMachineInvoker,
    SweepInvocationError,
    SweepInvoker,
)

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

if TYPE_CHECKING:
    pass

MAX_STALLED_BATCHES = 3
"""Batches in a row that process nothing (too little time left to start a target) before the
loop gives up instead of invoking forever."""

FIELD_FLAGS: dict[str, str] = {
    "dry_run": "--dry-run",
    "parent_workspace_ids": "--parent",
    "workspace_ids": "--workspace",
    "limit": "--limit",
    "rate_limit_ms": "--rate-limit-ms",
    "max_consecutive_errors": "--max-consecutive-errors",
    "batch_size": "--batch-size",
    "max_attempts": "--max-attempts",
    "rate_limit_backoff_s": "--rate-limit-backoff-s",
    "run_id": "--run-id",
    "floor": "--floor-projects/--floor-prompts",
    "allow_when_disabled": "--allow-when-disabled",
}
"""Which flag sets which payload field (for error messages)."""

FAILED_SHOWN = 20
"""Failed targets the summary names one by one (the report lists them all)."""

COUNT_NAMES = tuple(SweepCounts.model_fields)
"""The run's counters, in the order the domain declares them."""

REPORT_COLUMNS = (
    "workspace_id",
    "parent_workspace_id",
    "outcome",
    "before_projects",
    "before_prompts",
    "target_projects",
    "target_prompts",
    "units_returned_projects",
    "units_returned_prompts",
    "error_code",
    "request_id",
    "attempt",
    "final",
)


class SweepCliError(ValueError):
    """A flag or the configuration is unusable; nothing was invoked."""


# ---------------------------------------------------------------- the loop


@dataclass
class SweepRun:
    """What the loop saw of one run: the latest result, every item, and how it ended."""

    payload: dict[str, Any]
    results: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    interrupted: bool = False

    @property
    def last(self) -> dict[str, Any] | None:
        """The latest batch result, if any."""
        return self.results[-1] if self.results else None

    @property
    def run_id(self) -> str | None:
        """The run's id (from the latest result, else from the payload)."""
        if self.last is not None:
            return str(self.last["run_id"])
        run_id = self.payload.get("run_id")
        return None if run_id is None else str(run_id)

    @property
    def dry_run(self) -> bool:
        """Whether the run previews only."""
        if self.last is not None and "dry_run" in self.last:
            return bool(self.last["dry_run"])
        return bool(self.payload.get("dry_run", True))

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Every target that ended failed, and why (from the latest result)."""
        return list((self.last or {}).get("failed") or [])

    @property
    def counts(self) -> dict[str, int]:
        """The run's running counts (cumulative across invocations, from its checkpoint)."""
        counts = self.last["counts"] if self.last is not None else {}
        return {name: int(counts.get(name, 0)) for name in COUNT_NAMES}

    @property
    def done(self) -> bool:
        """The run processed every target."""
        return self.last is not None and bool(self.last["done"])

    @property
    def aborted(self) -> bool:
        """The run stopped after too many consecutive unexpected errors."""
        return self.last is not None and bool(self.last["aborted"])

    @property
    def succeeded(self) -> bool:
        """Finished, not aborted, no invocation error and no unexpected error."""
        return (
            self.error is None
            and not self.interrupted
            and self.done
            and not self.aborted
            and self.counts["unexpected_errors"] == 0
        )

    @property
    def status(self) -> str:
        """One word for the summary and the report."""
        if self.interrupted:
            return "interrupted"
        if self.error is not None:
            return "failed"
        if self.aborted:
            return "aborted"
        if self.done:
            return "done" if self.succeeded else "done-with-unexpected-errors"
        return "incomplete"

    def add(self, result: dict[str, Any]) -> None:
        """Take in one batch result."""
        self.results.append(result)
        self.items.extend(result.get("items") or [])


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


def format_summary(run: SweepRun) -> str:
    """The end-of-run table: status, progress, one row per count, where the checkpoint is."""
    last = run.last or {}
    rows = [
        *_status_rows(run, last),
        ("processed", f"{last.get('processed', 0)} / {last.get('total', '?')}"),
        *((name, str(value)) for name, value in run.counts.items()),
        *_failed_rows(run.failed),
    ]
    if last.get("checkpoint"):
        rows.append(("checkpoint", str(last["checkpoint"])))
    return _table(rows)


def _status_rows(run: SweepRun, last: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Which run, how it ended, and why when it was aborted or an invocation failed."""
    kind = "dry run" if run.dry_run else "real run"
    rows = [("run", f"{run.run_id or '-'} ({kind})"), ("status", run.status)]
    if last.get("abort_reason"):
        rows.append(("abort reason", str(last["abort_reason"])))
    if run.error is not None:
        rows.append(("error", f"{run.error.get('errorType')}: {run.error.get('errorMessage')}"))
    return rows


def _failed_rows(failed: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The first FAILED_SHOWN failed targets by name, then how many more the report holds."""
    rows = [
        (
            f"failed {target['workspace_id']}",
            f"{target['error_code']} after {target['attempts']} attempt(s)",
        )
        for target in failed[:FAILED_SHOWN]
    ]
    if len(failed) > FAILED_SHOWN:
        rows.append(("failed (more)", f"{len(failed) - FAILED_SHOWN} more in the report"))
    return rows


def _table(rows: Sequence[tuple[str, str]]) -> str:
    """Labels padded to one column, between two rules as wide as the widest row."""
    width = max(len(label) for label, _ in rows)
    rule = "-" * (width + 2 + max(len(value) for _, value in rows))
    return "\n".join([rule, *(f"{label:<{width}}  {value}" for label, value in rows), rule])


def _flat_item(item: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {column: "" for column in REPORT_COLUMNS}
    for key in (
        "workspace_id",
        "parent_workspace_id",
        "outcome",
        "error_code",
        "request_id",
        "attempt",
        "final",
    ):
        value = item.get(key)
        row[key] = "" if value is None else value
    for key in ("before", "target", "units_returned"):
        totals = item.get(key) or {}
        for dim in ("projects", "prompts"):
            value = totals.get(dim)
            row[f"{key}_{dim}"] = "" if value is None else value
    return row


def write_report(path: Path, run: SweepRun) -> None:
    """Write every per-child line of the run: JSON (with the summary) or CSV, by extension."""
    if path.suffix.lower() == ".csv":
        with path.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=REPORT_COLUMNS)
            writer.writeheader()
            for item in run.items:
                writer.writerow(_flat_item(item))
        return
    last = run.last or {}
    document = {
        "run_id": run.run_id,
        "dry_run": run.dry_run,
        "status": run.status,
        "done": run.done,
        "aborted": run.aborted,
        "abort_reason": last.get("abort_reason"),
        "processed": last.get("processed", 0),
        "remaining": last.get("remaining"),
        "total": last.get("total"),
        "counts": run.counts,
        "checkpoint": last.get("checkpoint"),
        "invocations": len(run.results),
        "error": run.error,
        "failed": run.failed,
        "failed_listed_all": last.get("failed_listed_all", True),
        "items": run.items,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- flags -> payload


def _int_or_text(value: str) -> int | str:
    # Non-numbers are passed on as text so the payload model refuses them, naming the field.
    try:
        return int(value)
    except ValueError:
        return value


def _split_ids(values: Sequence[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def build_payload(args: argparse.Namespace) -> dict[str, Any]:
    """The Sweep payload the flags describe, validated with the handler's model.

    Raises:
        SweepCliError: A flag value breaks the payload contract; the message names the flag
            and the payload field.
    """
    payload: dict[str, Any] = {
        "dry_run": bool(args.dry_run),
        "parent_workspace_ids": _split_ids(args.parents) or [],
    }
    workspaces = _split_ids(args.workspaces)
    if workspaces is not None:
        payload["workspace_ids"] = workspaces
    numbers = ("limit", "rate_limit_ms", "max_consecutive_errors", "batch_size", "max_attempts")
    for name in (*numbers, "rate_limit_backoff_s", "run_id"):
        value = getattr(args, name)
        if value is not None:
            payload[name] = value
    if (args.floor_projects is None) != (args.floor_prompts is None):
        raise SweepCliError("--floor-projects and --floor-prompts go together: give both")
    if args.floor_projects is not None:
        payload["floor"] = {"projects": args.floor_projects, "prompts": args.floor_prompts}
    if args.allow_when_disabled:
        payload["allow_when_disabled"] = True
    _validate(SweepRequest, payload)
    return payload


def build_abandon_payload(args: argparse.Namespace) -> dict[str, Any]:
    """The abandon payload the flags describe, validated.

    ``--abandon --run-id ID`` ends that run; ``--abandon --parent P`` ends the run holding P
    (or clears P's claim when it is unreadable); either with ``--reason TEXT``.

    Raises:
        SweepCliError: No run id or parent, or a flag that only a sweep takes.
    """
    parents = _split_ids(args.parents) or []
    if args.workspaces or args.dry_run or len(parents) > 1 or (parents and args.run_id):
        raise SweepCliError(
            "--abandon takes --run-id or one --parent (and --reason) only, not a sweep's flags"
        )
    model: type[SweepAbandonRequest] | type[SweepParentAbandonRequest] = SweepAbandonRequest
    payload: dict[str, Any] = {"abandon": True}
    if parents:
        model = SweepParentAbandonRequest
        payload["parent_workspace_id"] = parents[0]
    else:
        payload["run_id"] = args.run_id
    if args.reason is not None:
        payload["reason"] = args.reason
    _validate(model, payload)
    return payload


def _validate(
    model: type[SweepRequest] | type[SweepAbandonRequest] | type[SweepParentAbandonRequest],
    payload: Any,
) -> None:
    try:
        model.model_validate(payload)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            location = ".".join(str(part) for part in error["loc"]) or "payload"
            flag = FIELD_FLAGS.get(str(error["loc"][0]) if error["loc"] else "", "")
            where = f"{flag} (payload field {location})" if flag else f"payload field {location}"
            problems.append(f"{where}: {error['msg']}")
        raise SweepCliError("invalid sweep flags: " + "; ".join(problems)) from None


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
        parser.add_argument(flag, type=_int_or_text, metavar="N", help=help_text)
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
) -> int:
    """Validate the flags, drive the run, print progress and the summary, write the report.

    ``invoker`` replaces the one the target flags choose (tests); see the module docstring for
    the exit codes.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    if args.abandon:
        return _abandon(args, invoker, out, err)
    try:
        payload = build_payload(args)
        report = _report_path(args.report)
        chosen = invoker or _invoker(args, err)
    except SweepCliError as exc:
        print(f"sweep: {exc}", file=err)
        return 2
    sweep = _drive(chosen, payload, ProgressDisplay(err, is_tty=is_tty))
    return _finish(sweep, report, out, err)


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
