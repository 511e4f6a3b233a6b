"""The sweep under its operator's IMS identity, over real HTTP (simulator IMS + Semrush, moto).

The CLI hands the operator's token over onto the run claim (KMS-encrypted), every batch
exchanges the claim's token first and stores the rolled one before its first Semrush call, and
every end of the run (done, aborted, abandoned) invalidates the chain and scrubs the claim. A
dead promise stops the run with a refusal that says how to resume with a new token.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from serenity_allocator.adapters.credential_store import KmsTokenCipher
from serenity_allocator.adapters.http_edge import redact_secret
from serenity_allocator.adapters.s3_checkpoint_store import S3CheckpointStore
from serenity_allocator.application.sweep.run_tokens import hand_over_run_token
from serenity_allocator.domain.errors import NeedsReauthError
from serenity_allocator.domain.sweep.errors import (
    SweepImsUnavailableError,
    SweepNeedsReauthError,
    SweepReleaseCredentialError,
)
from serenity_tools.standins.moto_server import MotoServer
from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import SimulatorServer
from tests.integration.allocator_harness import api_calls, emf_blobs, metric_values
from tests.integration.sweep_ims_stack import (
    OPERATOR,
    ImsSweepStack,
    cli_env,
    ims_sweep_stack,
)
from tests.integration.sweep_stack import CHILDREN, MASTER, fail_status_reads, payload

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")

RUN_ID = "rs-ims-1"


@pytest.fixture
def ims(
    local_resources: LocalResources, sim: SimulatorServer, aws_env: MotoServer
) -> Iterator[ImsSweepStack]:
    with ims_sweep_stack(local_resources, sim, aws_env) as built:
        yield built


def _hand_over(ims: ImsSweepStack, run_id: str, token: str) -> None:
    store = S3CheckpointStore(ims.stack.resources.bucket)
    hand_over_run_token(store, KmsTokenCipher(ims.key_id), run_id, token)
    ims.handed.append(token)


def _is_dead(ims: ImsSweepStack, token: str) -> bool:
    with ims.consumer() as consumer:
        try:
            consumer.exchange(token)
        except NeedsReauthError:
            return True
    return False


def _scrubbed(run_id: str, ended: str) -> dict[str, object]:
    return {"run_id": run_id, "promise_token": None, "handover": None, "ended": ended}


def _ims_ops(sim: SimulatorServer) -> list[tuple[str, int]]:
    return [(call["op"], call["status"]) for call in sim.ims_calls()]


# ---------------------------------------------------------------- rolling, and the end: done


def test_cli_mints_and_every_batch_exchanges_the_previous_batchs_token_until_done(
    ims: ImsSweepStack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the operator's access token in the CLI's environment, one child per batch
    env = {**cli_env(ims.sim), "SWEEP_IMS_ACCESS_TOKEN": ims.operator_access}
    argv = ["--parent", MASTER, "--dry-run", "--batch-size", "1", "--rate-limit-ms", "0"]

    # When the CLI runs the sweep to its end
    code = ims.cli([*argv, "--run-id", RUN_ID], env)

    # Then it finished: five batches (one per child), each exchanging once
    assert code == 0, capsys.readouterr().err
    spy = ims.ims
    assert len(spy.exchanged) == len(CHILDREN) == 5
    # And each batch exchanged exactly the token the batch before it rolled and stored
    assert spy.exchanged[1:] == spy.rolled[:-1]
    # And the minted token died at its first exchange (the run never relied on it again)
    assert _is_dead(ims, spy.exchanged[0])
    # And the end of the run invalidated the last rolled token, killing the chain
    assert spy.invalidated == [spy.rolled[-1]]
    assert _is_dead(ims, spy.rolled[-1])
    # And the claim holds no token any more
    assert ims.claim(RUN_ID) == _scrubbed(RUN_ID, "done")
    # And IMS saw: one mint (the CLI), five exchanges, one invalidate, all answered
    minted, *exchanges, invalidated = _ims_ops(ims.sim)[:7]
    assert (minted, exchanges, invalidated) == (
        ("ims_mint", 200),
        [("ims_exchange", 200)] * 5,
        ("ims_invalidate", 200),
    )
    # And every Semrush call was made as the operator
    assert {call.get("user") for call in api_calls(ims.sim)} == {OPERATOR}


def test_each_batch_stores_the_rolled_token_before_its_first_semrush_call(
    ims: ImsSweepStack,
) -> None:
    # Given a handed-over promise token
    _hand_over(ims, RUN_ID, ims.mint())
    seen_at_first_call: list[str] = []
    real_list_family = ims.stack.runtime.gateway.list_family

    def list_family_noting_the_claim(parent_id: str) -> list[object]:
        families = real_list_family(parent_id)  # the token is exchanged inside this call
        if not seen_at_first_call:
            seen_at_first_call.append(ims.claim_token(RUN_ID))
        return list(families)

    ims.stack.runtime.gateway.list_family = list_family_noting_the_claim  # type: ignore[method-assign]

    # When one batch runs
    ims.stack.invoke(payload(run_id=RUN_ID, batch_size=1))

    # Then by the time the first Semrush answer was read, the claim held the rolled token
    assert seen_at_first_call == [ims.ims.rolled[0]]
    assert ims.claim_token(RUN_ID) == ims.ims.rolled[0]


# ---------------------------------------------------------------- aborted, abandoned


def test_an_aborted_run_invalidates_and_scrubs_its_token_and_resumes_with_a_new_one(
    ims: ImsSweepStack, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given the first child's status read failing unexpectedly, and an abort after one error
    fail_status_reads(ims.sim, [(500, "c-big")])
    env = {**cli_env(ims.sim), "SWEEP_IMS_ACCESS_TOKEN": ims.operator_access}
    argv = ["--parent", MASTER, "--dry-run", "--rate-limit-ms", "0", "--run-id", RUN_ID]

    # When the run aborts
    assert ims.cli([*argv, "--max-consecutive-errors", "1"], env) == 1

    # Then its token was invalidated and scrubbed
    assert ims.ims.invalidated == [ims.ims.rolled[-1]]
    assert _is_dead(ims, ims.ims.rolled[-1])
    assert ims.claim(RUN_ID) == _scrubbed(RUN_ID, "aborted")
    capsys.readouterr()

    # And a resume without a token is refused, saying how to give one
    assert ims.cli(argv, {}) == 1
    refused = capsys.readouterr().err
    assert "SweepNoCredentialError" in refused
    assert "SWEEP_IMS_ACCESS_TOKEN" in refused and f"--run-id {RUN_ID}" in refused

    # And a resume with a new promise token (from a file) runs the rest to the end
    token_file = tmp_path / "promise-token"
    token_file.write_text(ims.mint() + "\n", encoding="utf-8")
    assert ims.cli([*argv, "--promise-token-file", str(token_file)], {}) == 0
    assert ims.claim(RUN_ID) == _scrubbed(RUN_ID, "done")


def test_an_abandoned_run_invalidates_and_scrubs_its_token(ims: ImsSweepStack) -> None:
    # Given a real run one batch in
    _hand_over(ims, RUN_ID, ims.mint())
    first = ims.stack.invoke(payload(run_id=RUN_ID, dry_run=False, batch_size=1))
    assert (first["done"], first["processed"]) == (False, 1)

    # When the operator abandons it
    abandoned = ims.stack.invoke({"abandon": True, "run_id": RUN_ID})

    # Then the rolled token's chain is dead and the claim holds none
    assert abandoned["abandoned"] is True
    assert ims.ims.invalidated == [ims.ims.rolled[0]]
    assert _is_dead(ims, ims.ims.rolled[0])
    assert ims.claim(RUN_ID) == _scrubbed(RUN_ID, "abandoned")


# ---------------------------------------------------------------- a dead promise


def test_a_dead_promise_refuses_the_run_with_the_resume_hint_and_a_new_token_resumes_it(
    ims: ImsSweepStack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a promise token that is already dead (invalidated) handed over for a real run
    dead = ims.mint()
    with ims.consumer() as consumer:
        assert consumer.invalidate(dead)
    _hand_over(ims, RUN_ID, dead)
    argv = ["--parent", MASTER, "--rate-limit-ms", "0", "--run-id", RUN_ID]

    # When the CLI runs it
    assert ims.cli(argv, {}) == 1

    # Then the refusal says what happened and how to resume with a new token
    refused = capsys.readouterr().err
    assert "SweepNeedsReauthError" in refused and "needsReauth" in refused
    assert "SWEEP_IMS_ACCESS_TOKEN" in refused and f"--run-id {RUN_ID}" in refused
    # And nothing was done: no Semrush call, nothing enqueued, no checkpoint, the claim scrubbed
    assert api_calls(ims.sim) == []
    assert ims.stack.queued() == []
    assert ims.stack.checkpoint_keys() == [f"sweep/runs/{RUN_ID}.json"]
    assert ims.claim(RUN_ID) == _scrubbed(RUN_ID, "needsReauth")

    # When the operator resumes with a fresh access token
    env = {**cli_env(ims.sim), "SWEEP_IMS_ACCESS_TOKEN": ims.operator_access}
    assert ims.cli(argv, env) == 0

    # Then the run went through to the end and released its token
    assert ims.claim(RUN_ID) == _scrubbed(RUN_ID, "done")
    assert len(ims.stack.queued()) == 3  # c-big, c-drafted, c-small have surplus


def test_a_promise_dead_mid_run_stops_the_batch_and_gives_the_run_back_for_a_resume(
    ims: ImsSweepStack,
) -> None:
    # Given a run one batch in, whose chain then dies (invalidated outside the sweep)
    _hand_over(ims, RUN_ID, ims.mint())
    ims.stack.invoke(payload(run_id=RUN_ID, batch_size=1))
    with ims.consumer() as consumer:
        assert consumer.invalidate(ims.claim_token(RUN_ID))

    # When the next batch runs / Then it is refused with the resume hint
    with pytest.raises(SweepNeedsReauthError, match=f"--run-id {RUN_ID}"):
        ims.stack.invoke(payload(run_id=RUN_ID, batch_size=1))
    assert ims.claim(RUN_ID) == _scrubbed(RUN_ID, "needsReauth")
    # And the run is not left leased (the wall clock has not moved: a lease would refuse)
    assert ims.stack.checkpoint(RUN_ID, dry_run=True)["lease_owner"] is None

    # When a new token is handed over / Then the next batch goes on where the run stopped
    _hand_over(ims, RUN_ID, ims.mint())
    resumed = ims.stack.invoke(payload(run_id=RUN_ID, batch_size=1))
    assert resumed["processed"] == 2


def test_a_failed_invalidation_is_counted_and_the_claim_is_scrubbed_anyway(
    ims: ImsSweepStack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given IMS failing every attempt to invalidate (one call and two retries)
    _hand_over(ims, RUN_ID, ims.mint())
    ims.sim.faults(fail_next=[{"status": 503, "count": 3, "op": "ims_invalidate"}])

    # When the run ends
    capsys.readouterr()
    [result] = ims.stack.run_to_end(payload(run_id=RUN_ID))

    # Then the run's result stands, the claim holds no token, and the failure was counted
    assert result["done"] is True
    assert ims.claim(RUN_ID) == _scrubbed(RUN_ID, "done")
    outcomes = [
        dims["Outcome"]
        for _, dims in metric_values(emf_blobs(capsys.readouterr().out), "CredentialOutcome")
    ]
    assert sorted(outcomes) == ["exchanged", "invalidateFailed"]


# ---------------------------------------------------------------- releases carry the operator


def test_a_real_runs_releases_each_carry_a_credential_record_of_the_operator(
    ims: ImsSweepStack,
) -> None:
    # Given a real run with the operator's token
    _hand_over(ims, RUN_ID, ims.mint())

    # When it goes through
    [result] = ims.stack.run_to_end(payload(run_id=RUN_ID, dry_run=False))

    # Then every release it enqueued has its record, written before it was sent, holding a
    # live promise of the operator (minted from the batch's access token): the worker can run
    # the release as the operator
    messages = ims.stack.queued()
    assert result["counts"]["enqueued"] == len(messages) == 3
    store = ims.credentials.store()
    for message in messages:
        body = json.loads(message["Body"])
        stored = store.read(body["request_id"], body["workspace_id"])
        assert stored is not None
        assert redact_secret(message["Body"], stored.promise_token) == message["Body"]
        assert not _is_dead(ims, stored.promise_token)
    mints = [call for call in ims.sim.ims_calls() if call["op"] == "ims_mint"]
    assert [(call["status"], call["user"]) for call in mints] == [(200, OPERATOR)] * 4


def test_a_real_run_without_the_emitter_pair_stops_before_its_first_release(
    local_resources: LocalResources, sim: SimulatorServer, aws_env: MotoServer
) -> None:
    # Given the Sweep in IMS mode without the emitter pair and the credentials table
    missing = {
        "IMS_EMITTER_CLIENT_ID": "",
        "IMS_EMITTER_CLIENT_SECRET": "",
        "IMS_PROMISE_DEFINITION_ID": "",
        "CREDENTIALS_TABLE": "",
    }
    with ims_sweep_stack(local_resources, sim, aws_env, overrides=missing) as ims:
        _hand_over(ims, RUN_ID, ims.mint())

        # When a real run meets its first child with surplus / Then it stops, saying what to set
        with pytest.raises(SweepReleaseCredentialError, match="IMS_EMITTER_SECRET_ID"):
            ims.stack.invoke(payload(run_id=RUN_ID, dry_run=False))

        # And nothing was enqueued, and the run is given back for the resume
        assert ims.stack.queued() == []
        assert ims.stack.checkpoint(RUN_ID)["lease_owner"] is None
        # And a dry run needs neither
        _hand_over(ims, "rs-ims-dry", ims.mint())
        dry = ims.stack.invoke(payload(run_id="rs-ims-dry"))
        assert (dry["done"], dry["counts"]["would_release"]) == (True, 3)


# ---------------------------------------------------------------- accessDenied


def test_a_child_the_operator_cannot_reach_is_access_denied_in_its_own_count(
    local_resources: LocalResources,
    sim: SimulatorServer,
    aws_env: MotoServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an operator who is no member of c-lean
    reachable = [MASTER, *(child for child in CHILDREN if child != "c-lean")]
    with ims_sweep_stack(local_resources, sim, aws_env, memberships=reachable) as ims:
        _hand_over(ims, RUN_ID, ims.mint())

        # When the run goes through
        [result] = ims.stack.run_to_end(payload(run_id=RUN_ID))

    # Then c-lean ended access-denied, in its own count, and the run was not aborted
    [lean] = [item for item in result["items"] if item["workspace_id"] == "c-lean"]
    assert (lean["outcome"], lean["error_code"], lean["final"]) == (
        "access-denied",
        "accessDenied",
        True,
    )
    assert result["counts"]["access_denied"] == 1
    assert result["counts"]["unexpected_errors"] == 0
    assert (result["done"], result["aborted"]) == (True, False)
    # And it was counted as a credential outcome, beside the batch's one exchange
    outcomes = [
        dims["Outcome"]
        for _, dims in metric_values(emf_blobs(capsys.readouterr().out), "CredentialOutcome")
    ]
    assert sorted(outcomes) == ["accessDenied", "exchanged"]


def test_a_run_whose_every_target_is_denied_aborts(
    local_resources: LocalResources, sim: SimulatorServer, aws_env: MotoServer
) -> None:
    # Given an operator who can list the pool but reach none of its children
    with ims_sweep_stack(local_resources, sim, aws_env, memberships=[MASTER]) as ims:
        _hand_over(ims, RUN_ID, ims.mint())

        # When the run goes through
        results = ims.stack.run_to_end(payload(run_id=RUN_ID, max_consecutive_errors=3))

        # Then it aborted after the three denials the abort rule allows, saying why
        last = results[-1]
        assert (last["aborted"], last["processed"], last["counts"]["access_denied"]) == (
            True,
            3,
            3,
        )
        assert last["abort_reason"].startswith("accessDenied on every target so far (3)")
        # And its token was released like at any end
        assert ims.claim(RUN_ID) == _scrubbed(RUN_ID, "aborted")


# ---------------------------------------------------------------- IMS faults


def test_an_ims_fault_at_exchange_is_retried_within_the_batch(ims: ImsSweepStack) -> None:
    # Given IMS answering the first exchange with a 503
    _hand_over(ims, RUN_ID, ims.mint())
    ims.sim.faults(fail_next=[{"status": 503, "count": 1, "op": "ims_exchange"}])

    # When a batch runs / Then the exchange was retried after 1 s and the batch went on
    result = ims.stack.invoke(payload(run_id=RUN_ID, batch_size=1))
    assert result["processed"] == 1
    assert ims.ims_sleeps.calls == [1.0]
    assert [op for op in _ims_ops(ims.sim) if op[0] == "ims_exchange"] == [
        ("ims_exchange", 503),
        ("ims_exchange", 200),
    ]


def test_ims_unreachable_at_exchange_stops_the_batch_and_keeps_the_token(
    ims: ImsSweepStack,
) -> None:
    # Given IMS answering 503 to every attempt of the exchange (one call and two retries)
    token = ims.mint()
    _hand_over(ims, RUN_ID, token)
    ims.sim.faults(fail_next=[{"status": 503, "count": 3, "op": "ims_exchange"}])

    # When a batch runs / Then it stops, transiently, with the run id to resume
    with pytest.raises(SweepImsUnavailableError, match=f"--run-id {RUN_ID}"):
        ims.stack.invoke(payload(run_id=RUN_ID))
    assert api_calls(ims.sim) == []
    # And the handed-over token is still on the claim and alive: the resume goes on with it
    result = ims.stack.invoke(payload(run_id=RUN_ID))
    assert result["done"] is True
    assert (ims.ims.exchanged, len(ims.ims.rolled)) == ([token, token], 1)


# ---------------------------------------------------------------- nothing leaks


def test_no_token_in_the_checkpoint_the_claim_the_report_or_the_logs(
    ims: ImsSweepStack,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    service_log_lines: io.StringIO,
    tmp_path: Path,
) -> None:
    # Everything at INFO, ours at DEBUG (botocore's DEBUG logs request bodies, a KMS Encrypt's
    # plaintext included: docs/credentials.md says never to turn it on)
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="serenity-allocator")
    # Given a real run through the CLI, with a report in each format, one child denied 403
    ims.sim.faults(
        fail_next=[{"status": 403, "count": 1, "op": "status", "workspace_id": "c-lean"}]
    )
    env = {**cli_env(ims.sim), "SWEEP_IMS_ACCESS_TOKEN": ims.operator_access}
    argv = ["--parent", MASTER, "--rate-limit-ms", "0", "--batch-size", "2", "--run-id", RUN_ID]
    reports = [tmp_path / "report.json", tmp_path / "report.csv"]
    assert ims.cli([*argv, "--report", str(reports[0])], env) == 0
    first_tokens = ims.ims.every_token()
    assert ims.cli(["--parent", MASTER, "--dry-run", "--report", str(reports[1])], env) == 0

    # Then every token the runs held (access and promise, handed, rolled) is nowhere in plain
    # text or any encoding (base64, URL, JSON, hex: redact_secret's forms)
    tokens = {ims.operator_access, *ims.ims.every_token()}
    assert len(first_tokens) == 3 * 3  # three batches: exchanged, rolled, access each
    printed = capsys.readouterr()
    texts = {
        "checkpoint": json.dumps(ims.stack.checkpoint(RUN_ID)),
        "claim": json.dumps(ims.claim(RUN_ID)),
        "stdout": printed.out,
        "stderr": printed.err,
        "logs": "\n".join(record.getMessage() for record in caplog.records),
        "log lines": service_log_lines.getvalue(),
        **{path.name: path.read_text(encoding="utf-8") for path in reports},
    }
    for name, text in texts.items():
        for token in tokens:
            assert redact_secret(text, token) == text, f"a token in the {name}"
    # And the capture is not vacuous: the per-child log lines and the report lines are there
    assert texts["log lines"].count('"message":"sweep item"') == 2 * len(CHILDREN)
    assert "access-denied" in texts["report.json"]
