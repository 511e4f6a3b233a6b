"""The credential handover with an in-memory store: minting rules and a take-back that fails."""

from __future__ import annotations

import logging

import pytest

from serenity_allocator.adapters.credential_store import (
    CredentialReceipt,
    CredentialStoreError,
    TokenCipherError,
)
from serenity_allocator.adapters.ims_client import MintedPromise
from serenity_allocator.adapters.request_authority import (
    CredentialHandover,
    CredentialHandoverError,
    UserCredential,
)

ACCESS = "access-canary-0123456789"
PROMISE = "promise-canary-9876543210"


class MemoryStore:
    """Records puts; ``fail_put`` / ``fail_discard`` raise the store's own errors."""

    def __init__(self, fail_put: Exception | None = None, fail_discard: bool = False) -> None:
        self.items: dict[str, tuple[str, str]] = {}
        self.fail_put = fail_put
        self.fail_discard = fail_discard

    def put(self, request_id: str, workspace_id: str, promise_token: str) -> CredentialReceipt:
        if self.fail_put is not None:
            raise self.fail_put
        self.items[request_id] = (workspace_id, promise_token)
        return CredentialReceipt(request_id, promise_token.encode())

    def discard(self, receipt: CredentialReceipt) -> bool:
        if self.fail_discard:
            raise CredentialStoreError("discard", receipt.request_id, "ThrottlingException")
        return self.items.pop(receipt.request_id, None) is not None


class Minter:
    def __init__(self) -> None:
        self.minted: list[str] = []

    def mint(self, access_token: str) -> MintedPromise:
        self.minted.append(access_token)
        return MintedPromise(PROMISE, 3600)


def test_handover_mints_from_an_access_token_and_stores_the_promise() -> None:
    store, minter = MemoryStore(), Minter()
    receipt = CredentialHandover(store, minter).write("r1", "c1", UserCredential.access(ACCESS))
    assert receipt == CredentialReceipt("r1", PROMISE.encode())
    assert (minter.minted, store.items) == ([ACCESS], {"r1": ("c1", PROMISE)})


def test_handover_without_a_minter_refuses_an_access_token() -> None:
    store = MemoryStore()
    with pytest.raises(ValueError, match="cannot mint"):
        CredentialHandover(store).write("r1", "c1", UserCredential.access(ACCESS))
    assert store.items == {}


@pytest.mark.parametrize(
    "failure",
    [
        CredentialStoreError("put", "r1", "ProvisionedThroughputExceededException"),
        TokenCipherError("Encrypt", "AccessDeniedException"),
    ],
)
def test_handover_write_failure_names_the_request_and_code(failure: Exception) -> None:
    handover = CredentialHandover(MemoryStore(fail_put=failure))
    with pytest.raises(CredentialHandoverError) as caught:
        handover.write("r1", "c1", UserCredential.promise(PROMISE))
    assert caught.value.reason == getattr(failure, "reason", None)
    assert PROMISE not in str(caught.value)


def test_handover_take_back_failure_is_logged_without_the_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    handover = CredentialHandover(MemoryStore(fail_discard=True))
    handover.take_back(CredentialReceipt("r1", PROMISE.encode()))
    [record] = caplog.records
    assert record.getMessage() == "credential record of an unsent request not removed"
    assert (record.__dict__["request_id"], record.__dict__["reason"]) == (
        "r1",
        "ThrottlingException",
    )
    assert PROMISE not in caplog.text
    assert repr(handover).endswith(", mints=False)")
