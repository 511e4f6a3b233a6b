// The callers' contract table through the Node write guard: every status and code, with the
// customer answer pinned in tests/fixtures/guard-answers.json (the Python guard passes the same
// cases: tests/unit/write_guard/test_outcome_contract.py). The table module is the package's JSON.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { renderTableModule, TABLE_FILE, TABLE_MODULE } from '../scripts/generate-types.js';
import {
  GuardPolicy, OUTCOME_TABLE, REFUSALS, WriteGuard, WriteRefusedError, answerOf,
} from '../src/index.js';

const QUOTA_405 = { status: 405, body: '<html><center><h1>405 Not Allowed</h1></center></html>' };
const PINNED = JSON.parse(await readFile(new URL('../../../tests/fixtures/guard-answers.json', import.meta.url), 'utf8'));
const sample = (row) => row.example ?? row.code;

// (answer, reason) of one recovery whose ensure ends with `fields`: 'proceed' is read as applied
// (the lag, then quota without a reason: this gate never accepts), 'wait' as pending.
async function customerAnswer(fields) {
  let now = 1000;
  const producer = { async enqueueEnsure() { return 'ens-1'; } };
  const outcomes = {
    async getOutcome(requestId) {
      return { request_id: requestId, kind: 'ensure', workspace_id: 'child-1', ...fields };
    },
  };
  const guard = new WriteGuard({
    producer, workspaceId: 'child-1', parentWorkspaceId: 'master-1', outcomes,
    policy: new GuardPolicy({ deadlineS: 60 }), clock: () => now,
    sleep: async (s) => { now += s; }, logger: { warn() {} },
  });
  const error = await guard.write(async () => QUOTA_405, { need: { prompts: 1 }, site: 's' }).catch((e) => e);
  assert.ok(error instanceof WriteRefusedError, `not a refusal: ${error}`);
  if (error.code === 'quotaExceeded' && error.reason === null) return ['proceed', null];
  if (error.code === 'deadlineExceeded' && error.reason === null) return ['wait', null];
  return [error.code, error.reason];
}

describe('the contract table', () => {
  it('src/outcome-table.js is generated from the package\'s outcomes.json', async () => {
    assert.equal(await readFile(TABLE_MODULE, 'utf8'), await renderTableModule());
    assert.deepEqual(OUTCOME_TABLE, JSON.parse(await readFile(TABLE_FILE, 'utf8')));
  });

  it('every refusing answer has its error, named as the table names it', () => {
    const refusing = OUTCOME_TABLE.answers.filter((row) => row.node_error);
    assert.deepEqual(
      Object.fromEntries(Object.entries(REFUSALS).map(([code, Type]) => [code, Type.name])),
      Object.fromEntries(refusing.map((row) => [row.answer, row.node_error])),
    );
    for (const [code, Type] of Object.entries(REFUSALS)) {
      assert.equal(new Type({ attempts: 1, waitedS: 0 }).code, code);
    }
  });

  it('the pinned answers cover every code and status of the table', () => {
    assert.deepEqual(new Set(OUTCOME_TABLE.codes.map(sample)), new Set(Object.keys(PINNED.codes)));
    assert.deepEqual(new Set(OUTCOME_TABLE.statuses.map((row) => row.status)), new Set(Object.keys(PINNED.statuses)));
  });
});

describe('every status and code through the Node guard', () => {
  for (const row of OUTCOME_TABLE.codes) {
    it(`${row.code} gets ${PINNED.codes[sample(row)]}`, async () => {
      for (const status of row.statuses) {
        assert.deepEqual(await customerAnswer({ status, error_code: sample(row) }), [PINNED.codes[sample(row)], sample(row)]);
      }
    });
  }

  for (const [status, answer] of Object.entries(PINNED.statuses)) {
    it(`${status} without a code gets ${answer}`, async () => {
      const expected = ['proceed', 'wait'].includes(answer) ? [answer, null] : [answer, status];
      assert.deepEqual(await customerAnswer({ status, error_code: null }), expected);
    });
  }

  it('no code but a quota refusal is answered quotaExceeded', async () => {
    const quota = [];
    for (const row of OUTCOME_TABLE.codes) {
      for (const status of row.statuses) {
        const [answer] = await customerAnswer({ status, error_code: sample(row) });
        if (answer === 'quotaExceeded') quota.push(sample(row));
      }
    }
    for (const status of ['rejected', 'failed', 'invalid']) {
      assert.notEqual(answerOf({ status, error_code: 'someNewCode' }), 'quotaExceeded');
    }
    assert.deepEqual([...new Set(quota)].sort(), [...PINNED.quota_codes].sort());
  });

  it('an unknown status is neither applied nor refused', async () => {
    assert.deepEqual(await customerAnswer({ status: 'parked' }), ['wait', null]);
    assert.deepEqual(await customerAnswer({ status: 'parked', error_code: 'orgPoolExhausted' }), ['wait', null]);
  });

  for (const other of [{ request_id: 'another' }, { workspace_id: 'child-2' }, { kind: 'release' }]) {
    it(`an outcome of another ${Object.keys(other)[0]} is ignored`, async () => {
      assert.deepEqual(await customerAnswer({ status: 'rejected', error_code: 'orgPoolExhausted', ...other }), ['wait', null]);
    });
  }
});
