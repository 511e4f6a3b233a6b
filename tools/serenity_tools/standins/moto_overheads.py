"""moto without two of its avoidable costs; what it answers is unchanged.

Measured with py-spy on moto 5.2.5 over the integration tier and the harness scenarios:

- **A key pair for every key.** ``CreateKey`` builds an RSA-2048 key pair, for a
  ``SYMMETRIC_DEFAULT`` key too, although only ``Sign``, ``Verify`` and ``GetPublicKey`` ever
  read it. The local resources create one credentials key per test and per harness stack, so
  the pair (40 to 150 ms of CPU each) was the integration tier's largest single cost, about a
  tenth of every sampled stack. :func:`defer_moto_kms_key_pairs` builds it on first use.
- **A folder scan for every request.** The server's dispatcher lists moto's package folder and
  stats each of its entries (about 150) on every request, to learn whether the host names a
  service. That list never changes while a process runs; :func:`cache_moto_module_list`
  computes it once. It was about a tenth of the moto process's CPU in the harness scenarios.

The launchers in :mod:`.moto_server` apply both (:func:`trim_moto_overheads`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

_PATCH_MARK = "_serenity_trimmed"
_GENERATOR = "generate_private_key"
"""The name moto's KMS models module calls its key-pair generator by (imported from utils)."""


class DeferredKeyPair:
    """Stands in for moto's key pair and generates it on the first attribute read."""

    def __init__(self, key_spec: str, generate: Callable[[str], Any]) -> None:
        self._key_spec = key_spec
        self._generate = generate
        self._pair: Any = None

    @property
    def generated(self) -> bool:
        """Whether the pair exists yet (a symmetric key used only to encrypt never needs it)."""
        return self._pair is not None

    def __getattr__(self, name: str) -> Any:
        # Only called for names this class lacks: everything moto reads on its key pair.
        if self._pair is None:
            self._pair = self._generate(self._key_spec)
        return getattr(self._pair, name)


def defer_moto_kms_key_pairs() -> bool:
    """Make moto's ``CreateKey`` defer its key pair to the first use (idempotent).

    Affects the moto backends of THIS process only.

    Returns:
        True when the patch was installed now, False when it already was.
    """
    from moto.kms import models

    original = getattr(models, _GENERATOR)
    if getattr(original, _PATCH_MARK, False):
        return False

    def deferred(key_spec: str) -> Any:
        return DeferredKeyPair(key_spec, original)

    setattr(deferred, _PATCH_MARK, True)
    setattr(models, _GENERATOR, deferred)
    return True


def cache_moto_module_list() -> bool:
    """Make moto's list of its service folders a constant of the process (idempotent).

    Returns:
        True when the patch was installed now, False when it already was.
    """
    from moto import backends

    original = backends.list_of_moto_modules
    if getattr(original, _PATCH_MARK, False):
        return False

    @functools.cache
    def listed() -> tuple[str, ...]:
        return tuple(original())

    def list_of_moto_modules() -> Iterable[str]:
        return listed()

    setattr(list_of_moto_modules, _PATCH_MARK, True)
    backends.list_of_moto_modules = list_of_moto_modules
    return True


def trim_moto_overheads() -> None:
    """Both: key pairs on first use, the service folder list computed once."""
    defer_moto_kms_key_pairs()
    cache_moto_module_list()
