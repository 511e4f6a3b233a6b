"""The Sweep's releases in IMS mode: each one carries its operator's authority to the worker.

The worker runs every request as its user, from a credential record written before the message
(docs/credentials.md). A real run's release is such a request: it is enqueued through the
producer's hand-over with the batch's access token (the operator's, from the run's promise):
the producer mints a promise token for the release with the emitter pair and writes the record
first. Without the emitter pair or the credentials table (no :class:`OperatorHandover`) a real
run stops before its first release rather than enqueue releases the worker would dead-letter
``noCredential``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..domain.model import Totals
from ..domain.sweep.errors import SweepReleaseCredentialError
from .ims_client import ImsClient
from .request_authority import UserCredential
from .semrush import TokenProvider
from .sqs import AllocationProducer

Source = Literal["service", "sweep", "reclaim"]


@dataclass(frozen=True)
class OperatorHandover:
    """What a release needs to carry the operator's authority.

    Args:
        producer: The producer, with a ``CredentialHandover`` that mints (the emitter pair).
        tokens: The Semrush client's token holder (the batch's session is bound to it).
        minter: The emitter's IMS client inside that hand-over, bounded by ``limit_time``.
    """

    producer: AllocationProducer
    tokens: TokenProvider
    minter: ImsClient


class OperatorReleaseQueue:
    """A ``SurplusReleaseQueue`` whose releases carry the bound batch's operator token.

    ``handover`` None (IMS mode without the emitter pair or the credentials table): every
    release is refused, so a real run stops at its first one.
    """

    def __init__(self, handover: OperatorHandover | None) -> None:
        self._handover = handover

    def limit_time(self, seconds: float | None) -> None:
        """Bound every later mint (retries and sleeps included) to the invocation's deadline."""
        if self._handover is not None:
            self._handover.minter.limit_time(seconds)

    def enqueue_release(
        self,
        workspace_id: str,
        *,
        floor: Totals | None = None,
        source: Source = "service",
        run_id: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Mint the release's promise from the operator's token, write its record, send it.

        Raises:
            SweepReleaseCredentialError: no hand-over (the run stops, resumable once
                configured): the worker would dead-letter a release without a credential record.
        """
        if self._handover is None:
            raise SweepReleaseCredentialError(run_id or "(unknown)")
        return self._handover.producer.enqueue_release(
            workspace_id,
            floor=floor,
            source=source,
            run_id=run_id,
            request_id=request_id,
            credential=UserCredential.access(self._handover.tokens.get_token()),
        )

    def __repr__(self) -> str:
        producer = None if self._handover is None else self._handover.producer
        return f"OperatorReleaseQueue(producer={producer!r})"
