"""The sweep's refusals: why a batch or an abandon would not act, each naming what to do.

Every one is raised before anything is enqueued for the target or run it names; a refusal that
concerns one parent or one run never blocks another.
"""

from __future__ import annotations


class SweepRefusedError(Exception):
    """The sweep will not start (kill switch off, run mismatch); the message says why."""


class RunInProgressError(SweepRefusedError):
    """Another invocation holds this run (or wrote its checkpoint first)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} already in progress in another invocation")


class ParentHeldError(SweepRefusedError):
    """A parent belongs to another unfinished real run."""

    def __init__(self, parent_id: str, holder_run_id: str) -> None:
        self.parent_id = parent_id
        self.holder_run_id = holder_run_id
        super().__init__(
            f"parent {parent_id!r} belongs to unfinished run {holder_run_id!r}; wait until it is "
            f'done or abandon it with {{"abandon": true, "run_id": "{holder_run_id}"}}'
        )


class ParentHolderUnreadableError(ParentHeldError):
    """A parent's claim names a run whose checkpoint cannot be read: abandoning it frees it."""

    def __init__(self, parent_id: str, holder_run_id: str, problem: str) -> None:
        self.parent_id = parent_id
        self.holder_run_id = holder_run_id
        SweepRefusedError.__init__(
            self,
            f"parent {parent_id!r} belongs to run {holder_run_id!r}, whose checkpoint is "
            f"unreadable ({problem}); nothing was enqueued: abandon that run to free the "
            f'parent with {{"abandon": true, "run_id": "{holder_run_id}"}}',
        )


class ParentClaimUnreadableError(SweepRefusedError):
    """A parent's claim document cannot be read: only runs on that parent are refused."""

    def __init__(self, parent_id: str, location: str, problem: str) -> None:
        self.parent_id = parent_id
        self.location = location
        super().__init__(
            f"the claim of parent {parent_id!r} ({location}) is unreadable: {problem}; nothing "
            "was enqueued: once no real run of that parent is in progress, clear it with "
            f'{{"abandon": true, "parent_workspace_id": "{parent_id}"}}'
        )


class CheckpointCorruptError(Exception):
    """A stored checkpoint (or claim) cannot be trusted: nothing was enqueued.

    Attributes:
        name: The document's storage name.
        problem: What is wrong with it (the field, or "not valid JSON").
        etag: The version of the unreadable document when the store knows it, so an abandon can
            replace exactly that version.
    """

    def __init__(self, name: str, problem: str, *, etag: str | None = None) -> None:
        self.name = name
        self.problem = problem
        self.etag = etag
        super().__init__(
            f"checkpoint {name!r} is corrupt: {problem}; nothing was enqueued (restore a good "
            "version, or end the run with an abandon: runbook sweep.md)"
        )


class StaleCheckpointError(Exception):
    """A conditional write lost: the document changed (or appeared) since it was read."""


RESUME_WITH_TOKEN = (
    "resume with a new token: set SWEEP_IMS_ACCESS_TOKEN (your IMS access token) or "  # noqa: S105
    "SWEEP_PROMISE_TOKEN, or pass --access-token-file/--promise-token-file, and run "
    "serenity-allocator sweep ... --run-id {run_id} (runbook sweep.md#tokens-the-run-acts-as-you)"
)


class RunCredentialStopError(Exception):
    """A stop of a run by its credential: it names the run, and the run stays resumable.

    Args:
        run_id: The run stopped (kept on the error as ``run_id``).
        says: What happened and what to do, after ``run '<id>'`` in the message.
    """

    def __init__(self, run_id: str, says: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r}{says}")


class SweepNeedsReauthError(RunCredentialStopError, SweepRefusedError):
    """IMS refused the run's promise token (401/403 at exchange): the promise is dead.

    The token was scrubbed from the claim; the run is kept and resumes with a new token.
    """

    code = "needsReauth"

    def __init__(self, run_id: str) -> None:
        super().__init__(
            run_id,
            " stopped: IMS refused its promise token (needsReauth: expired, invalidated or the "
            "operator lost access); nothing more was done by this call; "
            + RESUME_WITH_TOKEN.format(run_id=run_id),
        )


class SweepNoCredentialError(RunCredentialStopError, SweepRefusedError):
    """The run's claim holds no usable token (none handed over, scrubbed, undecryptable)."""

    code = "noCredential"

    def __init__(self, run_id: str, why: str) -> None:
        super().__init__(
            run_id,
            f" holds no promise token ({why}); nothing was done by this call; "
            + RESUME_WITH_TOKEN.format(run_id=run_id),
        )


class SweepImsUnavailableError(RunCredentialStopError, RuntimeError):
    """IMS could not exchange the run's token within the batch's deadline (429/5xx/timeouts).

    Transient: the claim still holds the token it held, and the run resumes by its run id.
    """

    code = "imsUnavailable"

    def __init__(self, run_id: str) -> None:
        super().__init__(
            run_id,
            ": IMS could not be reached to exchange the run's token; nothing more was done by "
            f"this call; resume with --run-id {run_id} once IMS answers",
        )


class SweepReleaseCredentialError(RunCredentialStopError, SweepRefusedError):
    """IMS mode, a real run, and no way to hand each release the operator's authority.

    The worker runs every request as its user: a release without a credential record would be
    dead-lettered ``noCredential``. The batch stops before its first release.
    """

    code = "noCredential"

    def __init__(self, run_id: str) -> None:
        super().__init__(
            run_id,
            ": a real sweep in IMS mode hands each release its operator's authority (a promise "
            "token minted for it): set IMS_EMITTER_SECRET_ID and CREDENTIALS_TABLE on the "
            f"Sweep; nothing was enqueued; resume with --run-id {run_id} once they are set (a "
            "dry run needs neither)",
        )
