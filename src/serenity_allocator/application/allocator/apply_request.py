"""Apply one request as its user: an ensure or a release, to the request's terminal outcome.

In IMS mode a request that makes a Semrush call runs with its user's access token bound
(:meth:`.RequestCredentials.act_as`), for its calls only. A release's outcome is built at the
end of its use case; an ensure's here, once, from how it ended (:class:`.EnsureEnding`). An
ensure parked for sibling reclaim comes back as a value (:class:`.Parked`) and its record is
failed here (:class:`.ParkedForReclaimError`), the one place a record is failed on purpose: SQS
brings it back.
"""

from __future__ import annotations

from ...domain.coalescing import EnsureRun
from ...domain.errors import ParkedForReclaimError
from ...domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest, build_outcome
from ...domain.transfer import TransferContext
from .apply_ensure import Parked, apply_ensure
from .apply_release import ReleaseCall, apply_release
from .invocation import BatchMessage, RequestContext


def apply_request(
    message: BatchMessage,
    request: EnsureRequest | ReleaseRequest,
    run: EnsureRun | None,
    context: RequestContext,
) -> AllocationOutcome:
    """The request's terminal outcome; raises when a retry could succeed, or it was parked.

    ``request`` is the message's; ``run`` the coalesced run it belongs to (None: it stands
    alone). A static-mode request, or an ensure with dynamic allocation off (no Semrush call
    to make), runs with no user bound.
    """
    no_call = isinstance(request, EnsureRequest) and not context.config.dynamic_allocation
    credentials = None if no_call else context.credentials
    if credentials is not None:
        try:
            credentials.act_as(request)
        except Exception:
            if run is not None and run.combined and run.leader == message.message_id:
                run.split_up()  # the members behind it make their own calls, as their own users
            raise
    try:
        return _applied(message, request, run, context)
    finally:
        if credentials is not None:
            credentials.step_aside()


def _applied(
    message: BatchMessage,
    request: EnsureRequest | ReleaseRequest,
    run: EnsureRun | None,
    context: RequestContext,
) -> AllocationOutcome:
    if isinstance(request, EnsureRequest):
        ended = apply_ensure(message, request, run, context)
    else:
        ports = context.ports
        return apply_release(
            request,
            message.receive_count,
            config=context.config,
            ledger=context.ledger,
            call=ReleaseCall(
                ports.gateway,
                TransferContext(
                    clock=ports.clock,
                    sleep=ports.sleep,
                    deadline=context.deadlines.applying,
                    observer=context.observer,
                ),
                context.credentials,
                ports.in_flight,
            ),
        )
    if isinstance(ended, Parked):
        # Labels the outcome of a later receive (served after reclaim).
        context.ports.parked.add(request.request_id)
        raise ParkedForReclaimError()
    return build_outcome(
        request,
        ended.status,
        message.receive_count,
        error_code=ended.error_code,
        served=ended.served,
    )
