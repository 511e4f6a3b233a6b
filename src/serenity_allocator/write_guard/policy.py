"""How long a guarded write keeps trying, and the need of a model change."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..domain.model import Totals

MAX_RETRIES = 100
"""More retries than any deadline can hold at a sane pause: a larger number is a typo."""
MAX_SECONDS = 900.0
"""Fifteen minutes, the longest a Lambda runs: no request a guard serves waits longer."""


@dataclass(frozen=True)
class GuardPolicy:
    """How long a guarded write keeps trying after the disguised 405.

    With an outcome lookup (the ledger's ``OutcomeReader``) the guard waits for the ensure its
    recovery follows (its own, or the request's pending front): until the outcome is known,
    then ``enforcement_lag_s + interval_s`` more while the gate catches up, all inside
    ``deadline_s``; ``retries`` does not bound it. Without one, it
    makes at most ``retries`` retries: 4 x 3 s span the ~9 s lag plus 3 s of queue latency,
    which a loaded queue outlasts (docs/decisions/0003-async-worker-contract.md).

    Attributes:
        retries: Retries after the first attempt when there is no outcome lookup (at most
            :data:`MAX_RETRIES`).
        interval_s: Pause before each retry (> 0; this and every duration at most
            :data:`MAX_SECONDS`).
        deadline_s: One budget per incoming request, shared by every write the guard wraps.
        enforcement_lag_s: How long the write gate takes to enforce an applied top-up.
    """

    retries: int = 4
    interval_s: float = 3.0
    deadline_s: float = 20.0
    enforcement_lag_s: float = 9.0

    def __post_init__(self) -> None:
        integer = isinstance(self.retries, int) and not isinstance(self.retries, bool)
        if not integer or not 0 <= self.retries <= MAX_RETRIES:
            raise ValueError(f"GuardPolicy.retries must be an integer from 0 to {MAX_RETRIES}")
        # A zero pause would turn a cycle bounded only by the deadline into a busy loop.
        _check_seconds("interval_s", self.interval_s, allow_zero=False)
        _check_seconds("deadline_s", self.deadline_s, allow_zero=False)
        _check_seconds("enforcement_lag_s", self.enforcement_lag_s, allow_zero=True)


def _check_seconds(name: str, value: float, *, allow_zero: bool) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    low_ok = number and (value >= 0 if allow_zero else value > 0)
    if not number or not math.isfinite(value) or not low_ok or value > MAX_SECONDS:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(
            f"GuardPolicy.{name} must be a finite number of seconds {bound} and <= {MAX_SECONDS:g}"
        )


def model_change_need(
    published_prompts: int, models_before: Iterable[str], models_after: Iterable[str]
) -> Totals:
    """The need of changing a project's models: adding models re-meters its published prompts.

    Prompts are metered per model (semrush-user-manager.md), so the need is ``published prompts
    x models added``; a swap (as many models after as before) or a removal needs nothing.

    Raises:
        ValueError: ``published_prompts`` is not an integer >= 0.
    """
    if (
        isinstance(published_prompts, bool)
        or not isinstance(published_prompts, int)
        or published_prompts < 0
    ):
        raise ValueError("published_prompts must be an integer >= 0")
    added = max(0, len(set(models_after)) - len(set(models_before)))
    return Totals(projects=0, prompts=published_prompts * added)
