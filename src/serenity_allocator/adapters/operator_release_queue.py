"""The Sweep's releases in IMS mode: each one carries its operator's authority to the worker.

The worker runs every request as its user, from a credential record written before the message
(docs/credentials.md). A real run's release is such a request: it is enqueued through the
producer's hand-over with the batch's access token (the operator's, from the run's promise):
the producer mints a promise token for the release with the emitter pair and writes the record
first. Without the emitter pair or the credentials table a real run stops before its first
release (:class:`ReleasesWithoutCredentials`) rather than enqueue releases the worker would
dead-letter ``noCredential``.
"""

from __future__ import annotations

from typing import Literal

from ..domain.model import Totals
from ..domain.sweep.errors import SweepReleaseCredentialError
from .ims_client import ImsClient
from .request_authority import UserCredential
from .semrush_client import TokenProvider
from .sqs_producer import AllocationProducer

Source = Literal["service", "sweep", "reclaim"]


class OperatorReleaseQueue:
    """A ``SurplusReleaseQueue`` whose releases carry the bound batch's operator token.

    Args:
        producer: The producer, with a ``CredentialHandover`` that mints (the emitter pair).
        tokens: The Semrush client's token holder (the batch's session is bound to it).
        minter: The emitter's IMS client inside that hand-over, bounded by :meth:`limit_time`.
    """

    def __init__(
        self, producer: AllocationProducer, tokens: TokenProvider, minter: ImsClient
    ) -> None:
        self._producer = producer
        self._tokens = tokens
        self._minter = minter

    def limit_time(self, seconds: float | None) -> None:
        """Bound every later mint (retries and sleeps included) to the invocation's deadline."""
        self._minter.limit_time(seconds)

    def enqueue_release(
        self,
        workspace_id: str,
        *,
        floor: Totals | None = None,
        source: Source = "service",
        run_id: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Mint the release's promise from the operator's token, write its record, send it."""
        credential = UserCredential.access(self._tokens.get_token())
        return self._producer.enqueue_release(
            workspace_id,
            floor=floor,
            source=source,
            run_id=run_id,
            request_id=request_id,
            credential=credential,
        )

    def __repr__(self) -> str:
        return f"OperatorReleaseQueue(producer={self._producer!r})"


class ReleasesWithoutCredentials:
    """IMS mode without the emitter pair or the table: a real run's first release stops it."""

    def enqueue_release(
        self,
        workspace_id: str,
        *,
        floor: Totals | None = None,
        source: Source = "service",
        run_id: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Refuse: the worker would dead-letter a release without a credential record.

        Raises:
            SweepReleaseCredentialError: always (the run stops, resumable once configured).
        """
        raise SweepReleaseCredentialError(run_id or "(unknown)")
