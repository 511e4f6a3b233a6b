"""The Sweep's use cases (ADR 0014): the rules live in :mod:`serenity_allocator.domain.sweep`.

- :mod:`.start_run`: start a run (dry or real) and claim its parents.
- :mod:`.resume_run`: resume a run from its checkpoint.
- :mod:`.run_batch`: one batch of targets: list, verify, enqueue each release.
- :mod:`.abandon_run`: end a run, its claims and token, and clear what cannot be read.
- :mod:`.target`: one target of a batch, verified and released.
- :mod:`.parent_claims`: one unfinished real run per parent.
- :mod:`.run_checkpoint`: the checkpoint bound to its run and payload.
- :mod:`.run_tokens`: the operator's standing promise for the run's releases.
- :mod:`.ports`: the Sweep's ports and its environment.
"""
