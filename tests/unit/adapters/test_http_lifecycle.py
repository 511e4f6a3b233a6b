"""The TLS context the Semrush and IMS clients share."""

from __future__ import annotations

import ssl

from serenity_allocator.adapters.http_edge import tls_context
from serenity_allocator.adapters.ims_client import ImsClient
from serenity_allocator.adapters.semrush import SemrushClient, StaticTokenProvider


def test_tls_context_is_built_once_and_still_verifies_every_peer() -> None:
    # Given the process's context, asked for twice
    first, second = tls_context(), tls_context()

    # Then it is one object, and sharing it weakened nothing: certificates and host names
    # are checked, and the CA bundle is loaded
    assert first is second
    assert first.verify_mode == ssl.CERT_REQUIRED
    assert first.check_hostname is True
    assert first.cert_store_stats()["x509_ca"] > 0


def test_clients_built_without_an_http_client_use_the_shared_context() -> None:
    # Given a Semrush client and an IMS client that build their own httpx clients
    semrush = SemrushClient("https://www.semrush.com", StaticTokenProvider("token"))
    ims = ImsClient("https://ims-na1.adobelogin.com")

    # Then both verify with the one context (their transports hold it)
    with semrush, ims:
        for client in (semrush, ims):
            pool = client._http._transport._pool  # type: ignore[attr-defined]
            assert pool._ssl_context is tls_context()
