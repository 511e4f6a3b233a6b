"""Verification over the local stack: the demo, the reliability harness, the invariant checks."""
