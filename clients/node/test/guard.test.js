// The write guard against GUARD-SPEC, with an injected clock (no real sleeps).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  GuardPolicy, WriteDeadlineExceededError, WriteGuard, WriteQuotaExhaustedError, WriteRefusedError,
} from '../src/index.js';

const QUOTA_405 = { status: 405, body: '<html><center><h1>405 Not Allowed</h1></center></html>' };
const OK = { status: 200, body: '{"ok": true}' };

function rig({ answers, outcomes = null, policy = new GuardPolicy(), recorder, rollback } = {}) {
  const state = { now: 100, ensures: [], metrics: [], calls: 0, sleeps: [], rollbacks: 0, warnings: [] };
  const producer = {
    async enqueueEnsure(input) {
      state.ensures.push(input);
      return `ens-${state.ensures.length}`;
    },
  };
  const guard = new WriteGuard({
    producer, workspaceId: 'child-1', parentWorkspaceId: 'master-1', policy, outcomes,
    recorder: recorder ?? { record: (o, a, s) => state.metrics.push([o, a, s]), rollbackFailed: (s) => state.metrics.push(['rollbackFailed', s]) },
    clock: () => state.now,
    sleep: async (s) => { state.sleeps.push(s); state.now += s; },
    logger: { warn: (message) => state.warnings.push(message) },
  });
  const call = async () => {
    const answer = answers[Math.min(state.calls, answers.length - 1)];
    state.calls += 1;
    if (answer instanceof Error) throw answer;
    return answer;
  };
  const write = (options = {}) => guard.write(call, { need: { prompts: 10 }, site: 'prompts.create', rollback, ...options });
  return { state, guard, write };
}

describe('GuardPolicy', () => {
  it('defaults to 4 retries 3 s apart in 20 s, with a 9 s lag', () => {
    assert.deepEqual({ ...new GuardPolicy() }, { retries: 4, intervalS: 3, deadlineS: 20, enforcementLagS: 9 });
  });
  for (const [field, value] of [['retries', -1], ['retries', 1.5], ['intervalS', -0.1], ['deadlineS', 0], ['enforcementLagS', Number.NaN]]) {
    it(`refuses ${field} = ${value} naming it`, () => {
      assert.throws(() => new GuardPolicy({ [field]: value }), new RegExp(`^RangeError: GuardPolicy\\.${field}:`));
    });
  }
});

describe('front', () => {
  it('enqueues one ensure counting drafts and resolves to its request id', async () => {
    const { state, guard } = rig({ answers: [OK] });
    assert.equal(await guard.front({ prompts: 250 }), 'ens-1');
    assert.deepEqual(state.ensures, [{
      workspaceId: 'child-1', parentWorkspaceId: 'master-1', need: { prompts: 250 }, includeDrafted: true,
      ceiling: undefined, orgId: undefined, brandId: undefined,
    }]);
  });
});

describe('write without outcomes', () => {
  it('returns a first answer that is not the 405 unchanged, with no cycle and no metric', async () => {
    const failed = { status: 500, body: 'boom' };
    const { state, write } = rig({ answers: [failed] });
    assert.equal(await write(), failed);
    assert.deepEqual([state.ensures.length, state.metrics, state.sleeps], [0, [], []]);
  });

  it('propagates an exception of the first attempt at once', async () => {
    const { state, write } = rig({ answers: [new TypeError('socket')] });
    await assert.rejects(write(), TypeError);
    assert.deepEqual([state.ensures.length, state.metrics], [0, []]);
  });

  it('recovers after the 405: one ensure, retries 3 s apart, one recovered metric', async () => {
    const { state, write } = rig({ answers: [QUOTA_405, QUOTA_405, QUOTA_405, OK] });
    assert.equal(await write(), OK);
    assert.deepEqual(state.ensures.map((e) => e.need), [{ prompts: 10 }]);
    assert.deepEqual(state.sleeps, [3, 3, 3]);
    assert.deepEqual(state.metrics, [['recovered', 4, 'prompts.create']]);
  });

  it('a non-quota failure after the 405 abandons the cycle and comes back unchanged', async () => {
    const failed = { status: 422, body: '{"message": "bad"}' };
    const { state, write } = rig({ answers: [QUOTA_405, failed] });
    assert.equal(await write(), failed);
    assert.deepEqual(state.metrics, [['abandoned', 2, 'prompts.create']]);
  });

  it('an exception after the 405 abandons the cycle and is re-raised', async () => {
    const { state, write } = rig({ answers: [QUOTA_405, new TypeError('reset')] });
    await assert.rejects(write(), TypeError);
    assert.deepEqual(state.metrics, [['abandoned', 2, 'prompts.create']]);
  });

  it('out of retries is quotaExceeded after 1 + 4 attempts, the rollback run once before', async () => {
    let rolledBack = 0;
    const { state, write } = rig({ answers: [QUOTA_405], rollback: () => { rolledBack += 1; } });
    const error = await write().catch((e) => e);
    assert.ok(error instanceof WriteQuotaExhaustedError && error instanceof WriteRefusedError);
    assert.deepEqual([error.code, error.reason, error.attempts, error.waitedS, error.answer], ['quotaExceeded', null, 5, 12, QUOTA_405]);
    assert.deepEqual([rolledBack, state.ensures.length, state.metrics], [1, 1, [['exhausted', 5, 'prompts.create']]]);
  });

  it('a deadline before the retries run out is deadlineExceeded, never quotaExceeded', async () => {
    const policy = new GuardPolicy({ deadlineS: 7 });
    const { state, write } = rig({ answers: [QUOTA_405], policy });
    const error = await write().catch((e) => e);
    assert.ok(error instanceof WriteDeadlineExceededError);
    // Sleeps at 100 and 103 fit (the attempt after starts before 107); one at 106 would not.
    assert.deepEqual([error.code, error.reason, error.attempts, state.sleeps], ['deadlineExceeded', null, 3, [3, 3]]);
    assert.deepEqual(state.metrics, [['exhausted', 3, 'prompts.create']]);
  });

  it('the deadline is fixed when the guard is made and shared by every write', async () => {
    const { state, guard, write } = rig({ answers: [OK] });
    state.now += 20;
    assert.equal(guard.timeLeftS, 0);
    const error = await write().catch((e) => e);
    assert.ok(error instanceof WriteDeadlineExceededError);
    assert.deepEqual([error.attempts, state.calls, state.metrics], [0, 0, []]);
  });

  it('a failing rollback is recorded and attached; the refusal is still raised', async () => {
    const broken = new Error('undo failed');
    const { state, write } = rig({ answers: [QUOTA_405], policy: new GuardPolicy({ retries: 0 }), rollback: () => { throw broken; } });
    const error = await write().catch((e) => e);
    assert.ok(error instanceof WriteQuotaExhaustedError);
    assert.equal(error.rollbackError, broken);
    assert.deepEqual(state.metrics, [['exhausted', 1, 'prompts.create'], ['rollbackFailed', 'prompts.create']]);
    assert.deepEqual(state.warnings, ['rollback after a refused write failed']);
  });

  it('a recorder that throws never changes the answer', async () => {
    const recorder = { record() { throw new Error('metrics down'); } };
    const { state, write } = rig({ answers: [QUOTA_405, OK], recorder });
    assert.equal(await write(), OK);
    assert.deepEqual(state.warnings, ['metric recorder failed']);
  });
});

describe('write with outcomes', () => {
  const outcomesOf = (sequence) => {
    let n = 0;
    return {
      async getOutcome(requestId) {
        const next = sequence[Math.min(n, sequence.length - 1)];
        n += 1;
        if (next instanceof Error) throw next;
        return next && { request_id: requestId, ...next };
      },
    };
  };

  it('a refused ensure ends the cycle at once with its error code as the reason', async () => {
    const outcomes = outcomesOf([{ status: 'rejected', error_code: 'orgPoolExhausted' }]);
    const { state, write } = rig({ answers: [QUOTA_405], outcomes });
    const error = await write().catch((e) => e);
    assert.ok(error instanceof WriteQuotaExhaustedError);
    assert.deepEqual([error.reason, error.attempts, state.metrics], ['orgPoolExhausted', 2, [['exhausted', 2, 'prompts.create']]]);
  });

  it('a dead-lettered ensure is a refusal too', async () => {
    const outcomes = outcomesOf([{ status: 'invalid', error_code: 'parentMismatch', dead_lettered: true }]);
    const error = await rig({ answers: [QUOTA_405], outcomes }).write().catch((e) => e);
    assert.deepEqual([error.code, error.reason], ['quotaExceeded', 'parentMismatch']);
  });

  it('an applied ensure keeps retrying for lag + interval after it is first seen, past retries', async () => {
    const outcomes = outcomesOf([null, { status: 'topped-up' }]);
    const policy = new GuardPolicy({ retries: 1, intervalS: 1, deadlineS: 60, enforcementLagS: 4 });
    const { state, write } = rig({ answers: [QUOTA_405], outcomes, policy });
    const error = await write().catch((e) => e);
    // Seen applied after attempt 3 (t=102); refused still at t=107 (5 s later) -> exhausted.
    assert.ok(error instanceof WriteQuotaExhaustedError);
    assert.deepEqual([error.reason, error.attempts, state.now], [null, 8, 107]);
  });

  it('an applied ensure whose write lands in the lag window recovers', async () => {
    const outcomes = outcomesOf([{ status: 'hot-path' }]);
    const { state, write } = rig({ answers: [QUOTA_405, QUOTA_405, QUOTA_405, OK], outcomes });
    assert.equal(await write(), OK);
    assert.deepEqual(state.metrics, [['recovered', 4, 'prompts.create']]);
  });

  it('a lookup error is unknown: logged, never raised; the deadline ends the wait', async () => {
    const outcomes = outcomesOf([new Error('throttled')]);
    const { state, write } = rig({ answers: [QUOTA_405], outcomes });
    const error = await write().catch((e) => e);
    assert.ok(error instanceof WriteDeadlineExceededError);
    assert.equal(error.attempts, 7);
    assert.ok(state.warnings.every((w) => w === 'outcome lookup failed; counted as unknown'));
    assert.equal(state.warnings.length, 6);
  });
});
