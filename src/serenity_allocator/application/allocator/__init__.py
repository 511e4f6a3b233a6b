"""The Allocator's use cases: one batch of SQS FIFO records applied over typed ports.

Arrows point one way: handlers -> application -> domain <- adapters. Nothing here imports
boto3, httpx, Powertools or ``os``; the handler wires adapters into :class:`.WorkerPorts`
and a :class:`.WorkerObserver`, reads the settings into a :class:`.WorkerConfig`, and hands
each record to :func:`.handle_message`.

One module per use case:

- :mod:`.invocation`: validate every record up front, coalesce consecutive ensures.
- :mod:`.handle_message`: the per-request flow (below).
- :mod:`.apply_ensure`: apply an ensure, alone or as one combined top-up for a run; park one
  the pool cannot cover, enqueueing sibling releases (:func:`.park_for_reclaim`); its verdict
  events (rejections, tight-pool fallback results) count only when the attempt's result
  stands (:class:`.AttemptObserver`), so a split coalesced run or a parked ensure is not a
  rejection.
- :mod:`.apply_release`: apply a release under the settle policy.
- :mod:`.apply_request`: apply one request as its user (IMS mode), an ensure or a release, to
  its terminal outcome; fail a parked ensure's record.
- :mod:`.dead_letter`: move an invalid record, or a request that failed for good into the DLQ,
  to the DLQ with its reason.
- :mod:`.final_receive`: what a failure means, read once (:func:`.failure_of`): terminal
  now, or retried, and what a request says on its last receive (also when it was skipped
  behind its failed group); :func:`.failure_now` acts on it (dead letter, retry counted).
- :mod:`.finish_batch`: publish the outcomes and pool warnings, flush the metrics, fail what
  could not be announced.
- :mod:`.request_ledger`: the request ledger as the worker uses it (ADR 0009).
- :mod:`.audit_dead_letters`: a terminal record for valid requests found in the DLQ.
- :mod:`.invocation`: the configuration, the ports and, for the two entry points only, one
  batch's plan, deadlines and state, whose :class:`.OutcomeBook` records outcomes (the domain
  builds them: :func:`serenity_allocator.domain.messages.build_outcome`).

Every use case is handed what it needs (configuration, ports, deadlines, observer: a request's
use cases and failure reading share one :class:`.RequestContext`); only
:func:`.handle_message` and :func:`.finish_batch` take the whole :class:`.Invocation`. Every
report is a typed event (``domain/observations.py``) through
:meth:`.WorkerObserver.record` (ADR 0014).

The per-request flow, and where the request ledger sits
-------------------------------------------------------
``handle_message`` takes one record: report it; dead-letter it if invalid; otherwise apply
it and record its terminal outcome, or raise so SQS redelivers it (recording the terminal
outcome first when this is its final receive). The ledger sits at these points and nowhere
else:

1. Before applying: the batch's request ids are read once (``start_batch``); in
   ``handle_message`` one call (:meth:`.LedgerView.decide`) answers with a decision value: a
   request whose id is bound elsewhere is refused, a later copy follows the first, a request
   with a final record is replayed (its stored outcome announced again, unchanged) and not
   applied; a final receive leaves a provisional dead letter first.
2. Inside a release (``apply_release``) and a top-up (``apply_ensure``): the intent (before,
   target) is recorded just before the transfer, so a later delivery whose child is at the
   target (:meth:`.LedgerView.landed`, one answer for both) reports what was done even when
   the terminal store failed.
3. When terminal (:meth:`.OutcomeBook.record`): every terminal outcome of the invocation enters
   through this one method (a completed request, a final receive, a skipped final receive), and
   the ledger stores it there, once, before it is announced.
"""

from __future__ import annotations

from .finish_batch import finish_batch
from .handle_message import handle_message
from .invocation import InboundMessage, Invocation, WorkerConfig, WorkerPorts, start_batch

__all__ = [
    "InboundMessage",
    "Invocation",
    "WorkerConfig",
    "WorkerPorts",
    "finish_batch",
    "handle_message",
    "start_batch",
]
