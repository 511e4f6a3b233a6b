"""The sweep's refusals carry what they name and say what to do, word for word."""

from __future__ import annotations

from serenity_allocator.domain.sweep.errors import (
    RESUME_WITH_TOKEN,
    CheckpointCorruptError,
    ParentClaimUnreadableError,
    ParentHeldError,
    ParentHolderUnreadableError,
    RunInProgressError,
    SweepImsUnavailableError,
    SweepNeedsReauthError,
    SweepNoCredentialError,
    SweepReleaseCredentialError,
)

RESUME = RESUME_WITH_TOKEN.format(run_id="rs-1")


def test_run_in_progress_error_names_its_run() -> None:
    error = RunInProgressError("rs-1")

    assert error.run_id == "rs-1"
    assert str(error) == "run 'rs-1' already in progress in another invocation"


def test_parent_held_error_names_the_parent_its_holder_and_the_abandon_payload() -> None:
    error = ParentHeldError("m1", "rs-1")

    assert (error.parent_id, error.holder_run_id) == ("m1", "rs-1")
    assert str(error) == (
        "parent 'm1' belongs to unfinished run 'rs-1'; wait until it is done or abandon it "
        'with {"abandon": true, "run_id": "rs-1"}'
    )


def test_parent_holder_unreadable_error_says_the_holder_must_be_abandoned() -> None:
    error = ParentHolderUnreadableError("m1", "rs-1", "targets: lost")

    assert isinstance(error, ParentHeldError)
    assert (error.parent_id, error.holder_run_id) == ("m1", "rs-1")
    assert str(error) == (
        "parent 'm1' belongs to run 'rs-1', whose checkpoint is unreadable (targets: lost); "
        "nothing was enqueued: abandon that run to free the parent with "
        '{"abandon": true, "run_id": "rs-1"}'
    )


def test_parent_claim_unreadable_error_says_how_to_clear_the_claim() -> None:
    error = ParentClaimUnreadableError("m1", "s3://b/parents/m1", "holder: missing")

    assert (error.parent_id, error.location) == ("m1", "s3://b/parents/m1")
    assert str(error) == (
        "the claim of parent 'm1' (s3://b/parents/m1) is unreadable: holder: missing; nothing "
        "was enqueued: once no real run of that parent is in progress, clear it with "
        '{"abandon": true, "parent_workspace_id": "m1"}'
    )


def test_checkpoint_corrupt_error_keeps_its_name_problem_and_version() -> None:
    error = CheckpointCorruptError("dry/rs-1", "not valid JSON", etag='"e1"')

    assert (error.name, error.problem, error.etag) == ("dry/rs-1", "not valid JSON", '"e1"')
    assert CheckpointCorruptError("rs-1", "x").etag is None
    assert str(error) == (
        "checkpoint 'dry/rs-1' is corrupt: not valid JSON; nothing was enqueued (restore a good "
        "version, or end the run with an abandon: runbook sweep.md)"
    )


def test_sweep_needs_reauth_error_says_to_resume_with_a_new_token() -> None:
    error = SweepNeedsReauthError("rs-1")

    assert (error.run_id, error.code) == ("rs-1", "needsReauth")
    assert str(error) == (
        "run 'rs-1' stopped: IMS refused its promise token (needsReauth: expired, "
        "invalidated or the operator lost access); nothing more was done by this call; " + RESUME
    )
    assert "--run-id rs-1 " in str(error)


def test_sweep_no_credential_error_says_why_and_to_resume_with_a_new_token() -> None:
    error = SweepNoCredentialError("rs-1", "scrubbed")

    assert (error.run_id, error.code) == ("rs-1", "noCredential")
    assert str(error) == (
        "run 'rs-1' holds no promise token (scrubbed); nothing was done by this call; " + RESUME
    )
    assert "--run-id rs-1 " in str(error)


def test_sweep_ims_unavailable_error_says_to_resume_once_ims_answers() -> None:
    error = SweepImsUnavailableError("rs-1")

    assert (error.run_id, error.code) == ("rs-1", "imsUnavailable")
    assert str(error) == (
        "run 'rs-1': IMS could not be reached to exchange the run's token; nothing more was "
        "done by this call; resume with --run-id rs-1 once IMS answers"
    )


def test_sweep_release_credential_error_names_the_settings_a_real_run_needs() -> None:
    error = SweepReleaseCredentialError("rs-1")

    assert (error.run_id, error.code) == ("rs-1", "noCredential")
    assert str(error) == (
        "run 'rs-1': a real sweep in IMS mode hands each release its operator's authority (a "
        "promise token minted for it): set IMS_EMITTER_SECRET_ID and CREDENTIALS_TABLE on the "
        "Sweep; nothing was enqueued; resume with --run-id rs-1 once they are set (a dry run "
        "needs neither)"
    )
