"""What Amazon SQS accepts in ids, bodies and attributes, checked before a send.

SQS refuses a whole ``SendMessage`` over one bad character; checking first lets a caller get a
clear error naming the field (the producer) or pick a safe encoding (the dead-letter sender).
Sources: the SQS API reference for ``SendMessage`` (``MessageBody``, ``MessageGroupId``,
``MessageDeduplicationId``) and for ``SendMessageBatch`` (at most 10 entries per call).
"""

from __future__ import annotations

import re

MAX_BATCH_ENTRIES = 10
"""SendMessageBatch and PutEvents both take at most 10 entries per call."""

MAX_FIFO_ID_LENGTH = 128

# Group and deduplication ids: alphanumerics and ASCII punctuation, 1..128 characters.
_FIFO_ID = re.compile(r"[A-Za-z0-9!-/:-@\[-`{-~]{1,128}")
FIFO_ID_PATTERN = _FIFO_ID.pattern

# Message bodies and String attribute values: XML 1.0 characters only.
_NOT_SQS_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def is_valid_fifo_id(value: str) -> bool:
    """True when ``value`` is usable as a MessageGroupId or MessageDeduplicationId."""
    return _FIFO_ID.fullmatch(value) is not None


def is_sqs_text(value: str) -> bool:
    """True when every character of ``value`` is one SQS accepts in a body or String attribute."""
    return _NOT_SQS_TEXT.search(value) is None


def to_sqs_text(value: str, replacement: str = "?") -> str:
    """``value`` with every character SQS refuses replaced (for diagnostics, never bodies)."""
    return _NOT_SQS_TEXT.sub(replacement, value)
