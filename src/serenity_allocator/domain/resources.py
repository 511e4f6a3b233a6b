"""Block math: quota moves in whole blocks per dimension."""

from __future__ import annotations


def round_up_to_block(units: int, block: int) -> int:
    """Round ``units`` up to the next whole multiple of ``block``; 0 or negative gives 0."""
    if block < 1:
        raise ValueError("block must be a positive whole number")
    if units <= 0:
        return 0
    return -(-units // block) * block
