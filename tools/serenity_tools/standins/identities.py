"""Users on the simulator's IMS, and the producer that hands their authority to the worker.

The real path of ``docs/credentials.md`` on a local stack: a user is created on the simulator
with ``POST /__ims/users`` (the pool and the children it may act on) and gets an IMS access
token; a service enqueues with ``credential=UserCredential.access(token)``, and the producer
mints a promise token with the emitter pair (``GET /__ims/clients``) and writes it, encrypted
with the stack's credentials key, to the credentials table before it sends the message.

:class:`LocalIdentities` keeps who each enqueued request belongs to (request id -> user) and
each user's memberships: what the identity invariant
(:func:`..verification.identity.check_user_tokens`) compares the simulator's call log with.
Tokens never leave this module's objects (no repr shows one).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serenity_allocator.adapters.credential_store import DynamoDbCredentialStore, KmsTokenCipher
from serenity_allocator.adapters.ims_client import ImsClient, ImsClientPair
from serenity_allocator.adapters.request_authority import CredentialHandover, UserCredential
from serenity_allocator.adapters.sqs import AllocationProducer
from serenity_allocator.domain.errors import ImsUnavailableError
from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest

if TYPE_CHECKING:
    from serenity_tools.standins.stack import LocalStack

Request = EnsureRequest | ReleaseRequest
_MINT_ATTEMPTS = 4


@dataclass(frozen=True)
class LocalUser:
    """One IMS user on the simulator: its name, memberships and live access token."""

    name: str
    workspaces: frozenset[str]
    access_token: str = field(repr=False)

    @property
    def credential(self) -> UserCredential:
        """The credential a service passes for this user (the producer mints from it)."""
        return UserCredential.access(self.access_token)


class LocalIdentities:
    """The users of one local run and the requests each one enqueued.

    Args:
        stack: A started local stack (its simulator serves IMS; its resources hold the
            credentials table and key).
    """

    def __init__(self, stack: LocalStack) -> None:
        self._stack = stack
        self._users: dict[str, LocalUser] = {}
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()
        clients = stack.simulator.ims_clients()
        emitter = clients["emitter"]
        self.emitter = ImsClientPair(
            emitter["client_id"], emitter["client_secret"], emitter["promise_definition_id"]
        )
        consumer = clients["consumer"]
        self.consumer = ImsClientPair(consumer["client_id"], consumer["client_secret"])

    # -- users ---------------------------------------------------------------------------------

    def add_user(
        self, name: str, workspaces: Iterable[str], *, semrush_record: bool = True
    ) -> LocalUser:
        """Create (or replace) ``name`` on the simulator with these memberships."""
        members = frozenset(workspaces)
        token = self._stack.simulator.ims_user(name, sorted(members), semrush_record=semrush_record)
        user = LocalUser(name, members, token)
        with self._lock:
            self._users[name] = user
        return user

    def user(self, name: str) -> LocalUser:
        """A user added before."""
        return self._users[name]

    @property
    def memberships(self) -> dict[str, frozenset[str]]:
        """User -> the workspaces it is a member of."""
        with self._lock:
            return {name: user.workspaces for name, user in self._users.items()}

    @property
    def owners(self) -> dict[str, str]:
        """Request id -> the user it was enqueued for (its credential's user)."""
        with self._lock:
            return dict(self._owners)

    def own(self, request_ids: Iterable[str], user: str) -> None:
        """Record that these requests run under ``user`` (a sweep's releases, say)."""
        with self._lock:
            self._owners.update((request_id, user) for request_id in request_ids)

    # -- producing -----------------------------------------------------------------------------

    def ims(self) -> ImsClient:
        """An IMS client with both pairs (the caller closes it)."""
        return ImsClient(self._stack.simulator.origin, emitter=self.emitter, consumer=self.consumer)

    def handover(self, ims: ImsClient | None = None) -> CredentialHandover:
        """The producer's handover: the stack's credentials table and key, minting with ``ims``."""
        resources = self._stack.resources
        cipher = KmsTokenCipher(resources.credentials_key_arn, self._stack.client("kms"))
        store = DynamoDbCredentialStore(
            resources.credentials_table, cipher, self._stack.client("dynamodb")
        )
        return CredentialHandover(store, ims or self.ims())

    def producer(self, sqs: Any | None = None) -> UserProducer:
        """A producer that enqueues each request under a user's credential."""
        handover = self.handover()
        sqs_client = sqs or self._stack.client("sqs")
        producer = AllocationProducer(
            self._stack.resources.queue_url, sqs_client, credentials=handover
        )
        return UserProducer(self, producer, handover)


@dataclass
class UserProducer:
    """The real producer with a credential handover, remembering whose each request is."""

    identities: LocalIdentities
    producer: AllocationProducer
    handover: CredentialHandover

    def enqueue(self, request: Request, user: str) -> str:
        """``producer.enqueue(request, credential=<user's access token>)``."""
        self.identities.own([request.request_id], user)
        return self.producer.enqueue(request, credential=self.identities.user(user).credential)

    def enqueue_promise(self, request: Request, user: str, promise_token: str) -> str:
        """Enqueue with a promise token the service minted itself (``UserCredential.promise``)."""
        self.identities.own([request.request_id], user)
        return self.producer.enqueue(request, credential=UserCredential.promise(promise_token))

    def enqueue_many(self, requests: Sequence[Request], users: Mapping[str, str]) -> list[str]:
        """Write every request's record (minting for its user), then send them in one batch.

        ``users``: request id -> user. A burst sent together can coalesce in the worker; the
        records are written first, exactly as :meth:`AllocationProducer.enqueue` does for one.
        """
        for request in requests:
            user = users[request.request_id]
            self.identities.own([request.request_id], user)
            credential = self.identities.user(user).credential
            for attempt in range(_MINT_ATTEMPTS):
                try:
                    self.handover.write(request.request_id, request.workspace_id, credential)
                    break
                except ImsUnavailableError:
                    # A service retries a mint IMS could not answer (injected 5xx/429/timeouts).
                    if attempt == _MINT_ATTEMPTS - 1:
                        raise
        return self.producer.enqueue_many(requests)


IMS_CALLS_FILE = "ims-calls.jsonl"


def keep_ims_calls(work_dir: Path, calls: Sequence[Mapping[str, Any]]) -> None:
    """Write the simulator's IMS call log to ``work_dir``, beside the traces.

    One call per line: its op, client id, status, user and time (never a token).
    """
    if calls:
        lines = "".join(json.dumps(call, separators=(",", ":")) + "\n" for call in calls)
        (work_dir / IMS_CALLS_FILE).write_text(lines, encoding="utf-8")
