"""The service-facing producer API: enqueue allocation requests and classify quota failures.

A service calls :func:`AllocationProducer.enqueue_ensure` before a metered write (or when
:func:`is_metered_quota` says a write was refused for quota), and
:func:`AllocationProducer.enqueue_release` when a child no longer needs its headroom::

    from serenity_allocator.producer import AllocationProducer, is_metered_quota

    producer = AllocationProducer(queue_url)
    request_id = producer.enqueue_ensure("child-1", "master-1", {"projects": 0, "prompts": 250})

The group id (the workspace id) and the deduplication id (the request id) are set for you.

Every metered write should go through a :class:`WriteGuard` (one per incoming request): it
fronts the ensure sized on the batch (drafts counted) and retries a write refused with the
disguised 405 across the gate's enforcement lag, calling ensure once per recovery. Given the
request ledger's reader, it waits for that ensure's outcome instead of a fixed number of
retries::

    reader = OutcomeReader(ledger_table_name)         # dynamodb:GetItem on the ledger
    recorder = EmfQuotaRetryRecorder("prod", service="brands")  # once, with the producer
    guard = WriteGuard(producer, "child-1", "master-1", outcomes=reader, recorder=recorder)
    guard.front({"prompts": 250})
    answer = guard.write(lambda: post_prompts(batch), need={"prompts": 250}, site="prompts")

It raises the refusal the callers' contract table (docs/outcomes.md) gives the ensure's
outcome: :class:`WriteQuotaExhaustedError` (``quotaExceeded``: answer 409 "allocation
exceeded") for the pool, ceiling and tiered refusals only; :class:`WriteDeadlineExceededError`
(``deadlineExceeded``: answer "try again") for the deadline and transient failures; the user's
authority its own (:class:`WriteAccessDeniedError`, :class:`WriteNeedsReauthError`,
:class:`WriteNoCredentialError`); a fault of ours :class:`WriteConfigurationError`; all are a
:class:`WriteRefusedError` (its ``code`` the answer, its ``reason`` the outcome's code).
Adding models to a project re-meters its published
prompts: front ``model_change_need(published, models_before, models_after)``.

To wait for a result without an EventBridge rule, read the request ledger (stack output
``RequestLedgerTableName``; grant the service ``dynamodb:GetItem`` on it)::

    outcome = reader.wait_for_outcome(request_id, timeout_s=30)  # or reader.get_outcome(...)

To run a request under the requesting user's own authority (IMS promise tokens, written to the
credentials table before the message is sent; docs/credentials.md), build the producer with a
:class:`CredentialHandover` and pass a :class:`UserCredential` (the IMS client is imported
from its own module, so a producer that never mints never loads httpx)::

    from serenity_allocator.adapters.ims_client import ImsClient, ImsClientPair

    store = DynamoDbCredentialStore(credentials_table, KmsTokenCipher(credentials_key_arn))
    ims = ImsClient(ims_host, emitter=ImsClientPair(client_id, client_secret, definition_id))
    producer = AllocationProducer(queue_url, credentials=CredentialHandover(store, ims))
    producer.enqueue_ensure("child-1", "master-1", need, credential=UserCredential.access(tok))
"""

from __future__ import annotations

from . import write_guard
from .adapters.credential_store import DynamoDbCredentialStore, KmsTokenCipher
from .adapters.ledger_outcome_reader import OutcomeReader, OutcomeWaitTimeoutError
from .adapters.request_authority import (
    CredentialHandover,
    CredentialHandoverError,
    UserCredential,
)
from .adapters.sqs import (
    AllocationProducer,
    EnqueueError,
    EnsureOptions,
    ReleaseOptions,
    build_ensure,
    build_release,
)
from .domain.errors import is_metered_quota
from .domain.ledger import LedgerUnavailableError
from .domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from .domain.model import Totals
from .write_guard import *  # noqa: F403 - the write guard's whole public surface, re-exported

__all__ = [
    "AllocationOutcome",
    "AllocationProducer",
    "CredentialHandover",
    "CredentialHandoverError",
    "DynamoDbCredentialStore",
    "EnqueueError",
    "EnsureOptions",
    "EnsureRequest",
    "KmsTokenCipher",
    "LedgerUnavailableError",
    "OutcomeReader",
    "OutcomeWaitTimeoutError",
    "ReleaseOptions",
    "ReleaseRequest",
    "Totals",
    "UserCredential",
    "build_ensure",
    "build_release",
    "is_metered_quota",
]
__all__ += write_guard.__all__
