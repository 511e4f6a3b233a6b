"""The Sweep's rules: pure, over the domain's ports.

- :mod:`.model`: the checkpoint and its items (two contracts: the stored checkpoint, the report).
- :mod:`.runs`: target listing and verification, resumption, leases.
- :mod:`.run_claim`: a parent's claim by one run.
- :mod:`.failures`: failure accounting, the abort rule, backoff, error classification.
- :mod:`.errors`: the Sweep's typed errors.
"""
