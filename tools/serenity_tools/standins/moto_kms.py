"""moto's KMS, without an RSA key pair generated for every symmetric key.

moto 5.x builds an RSA-2048 key pair inside every ``CreateKey``, a ``SYMMETRIC_DEFAULT`` key
too, although only ``Sign``, ``Verify`` and ``GetPublicKey`` ever read it. The local resources
create one credentials key per test and per harness stack, so that key pair was the single
largest cost of the integration tier: measured with py-spy over the tier on moto 5.2.5, moto's
``CreateKey`` held about a tenth of every sampled stack (one pair takes 40 to 150 ms of CPU).

:func:`defer_moto_kms_key_pairs` makes moto generate the pair the first time one of those
calls reads it. What moto answers is unchanged: the same key, the same pair kind, generated
on demand instead of up front.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_PATCH_MARK = "_serenity_deferred_key_pair"
_GENERATOR = "generate_private_key"
"""The name moto's KMS models module calls the generator by (imported from its utils)."""


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
