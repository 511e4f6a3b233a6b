// The write guard, as the Python WriteGuard behaves (tests/unit/write_guard/test_cycles.py),
// with an injected clock (no real sleeps).
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
  for (const [field, value] of [['retries', -1], ['retries', 1.5], ['intervalS', -0.1], ['deadlineS', 0], ['enforcementLagS', Number.NaN],
    ['intervalS', 0], ['retries', 1e9], ['retries', 101], ['deadlineS', 1e308], ['deadlineS', 900.5], ['enforcementLagS', 1e308]]) {
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
        return next && { request_id: requestId, kind: 'ensure', workspace_id: 'child-1', ...next };
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

  it('a dead-lettered ensure is a refusal too, answered by its code (a parent mismatch is ours, never quota)', async () => {
    const outcomes = outcomesOf([{ status: 'invalid', error_code: 'parentMismatch', dead_lettered: true }]);
    const error = await rig({ answers: [QUOTA_405], outcomes }).write().catch((e) => e);
    assert.deepEqual([error.code, error.reason], ['configurationFault', 'parentMismatch']);
  });

  it('a refused ensure without an error code names its status as the reason (failed alone: try again)', async () => {
    const outcomes = outcomesOf([{ status: 'failed', error_code: null }]);
    const error = await rig({ answers: [QUOTA_405], outcomes }).write().catch((e) => e);
    assert.deepEqual([error.code, error.reason, error.attempts], ['deadlineExceeded', 'failed', 2]);
  });

  it('an applied ensure is looked up once in its cycle, then the lag runs on the clock', async () => {
    let lookups = 0;
    const outcomes = { async getOutcome(requestId) { lookups += 1; return { request_id: requestId, kind: 'ensure', workspace_id: 'child-1', status: 'hot-path' }; } };
    const policy = new GuardPolicy({ deadlineS: 60 });
    const error = await rig({ answers: [QUOTA_405], outcomes, policy }).write().catch((e) => e);
    // Seen applied at the first retry (t=103); lag + interval (12 s) later, at t=115: exhausted.
    assert.deepEqual([error.code, error.reason, error.attempts, error.waitedS, lookups], ['quotaExceeded', null, 6, 15, 1]);
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

// A recovery that follows the guard's front (ADR 0019), on a scripted gate and ledger: times
// are seconds after the guard is made, as in tests/unit/write_guard/test_cycles.py.
describe('a recovery that follows the guard\'s front', () => {
  const START = 100;

  function frontRig({ visibleAt = Infinity, status = 'topped-up', errorCode = null, byPosition = {}, failEnqueue = Infinity, withLookup = true, policy = new GuardPolicy(), concurrent = false } = {}) {
    const state = { now: START, ensures: [], ids: [], asked: [], metrics: [] };
    const producer = {
      async enqueueEnsure(input) {
        if (state.ensures.length + 1 >= failEnqueue) throw new Error('queue down');
        state.ensures.push(input.need);
        state.ids.push(`ens-${state.ensures.length}`);
        return state.ids.at(-1);
      },
    };
    const outcomes = {
      async getOutcome(requestId) {
        const at = state.now - START;
        const position = state.ids.indexOf(requestId);
        state.asked.push([at, position]);
        if (at < visibleAt) return null;
        const [s, code] = byPosition[position] ?? [status, errorCode];
        return { request_id: requestId, kind: 'ensure', workspace_id: 'child-1', status: s, error_code: code };
      },
    };
    const guard = new WriteGuard({
      producer, workspaceId: 'child-1', parentWorkspaceId: 'master-1', policy,
      outcomes: withLookup ? outcomes : null,
      recorder: { record: (o, a, s) => state.metrics.push([o, a, s]) },
      clock: () => state.now,
      // Concurrent writes share the clock: a sleep wakes at its own start + s, never earlier.
      sleep: concurrent
        ? async (s) => { const wake = state.now + s; await Promise.resolve(); state.now = Math.max(state.now, wake); }
        : async (s) => { state.now += s; },
      logger: { warn() {} },
    });
    const gate = (acceptsAt = Infinity) => {
      const attemptsAt = [];
      const call = async () => {
        const at = state.now - START;
        attemptsAt.push(at);
        return at >= acceptsAt ? OK : QUOTA_405;
      };
      return Object.assign(call, { attemptsAt });
    };
    return { state, guard, gate };
  }
  const refusalOf = (error) => [error.constructor.name, error.reason, error.attempts, error.waitedS];

  it('a 405 right after a pending front waits on the front and sends no second ensure', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 2 });
    assert.equal(await guard.front({ prompts: 50 }), 'ens-1');
    const answer = await guard.write(gate(9), { need: { prompts: 50 }, site: 's' });
    assert.equal(answer, OK);
    assert.deepEqual(state.ensures, [{ prompts: 50 }]);
    assert.deepEqual(state.asked, [[3, 0]]); // the front's outcome, once: applied
    assert.deepEqual(state.metrics, [['recovered', 4, 's']]);
  });

  it('a front refused for exactly the write ends the cycle with its code', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 2, status: 'rejected', errorCode: 'orgPoolExhausted' });
    await guard.front({ prompts: 50 });
    const error = await guard.write(gate(), { need: { prompts: 50 }, site: 's' }).catch((e) => e);
    assert.deepEqual(refusalOf(error), ['WriteQuotaExhaustedError', 'orgPoolExhausted', 2, 3]);
    assert.deepEqual(state.ensures, [{ prompts: 50 }]);
    assert.deepEqual(state.asked, [[3, 0]]);
    assert.deepEqual(state.metrics, [['exhausted', 2, 's']]);
  });

  it('the same units in another spelling are exactly the write: {projects: 0, prompts: 50} = {prompts: 50}', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0, status: 'failed' });
    await guard.front({ projects: 0, prompts: 50 });
    const error = await guard.write(gate(), { need: { prompts: 50 }, site: 's' }).catch((e) => e);
    // No error code: the status is the reason, as the Python guard says it; `failed` alone is "try again".
    assert.deepEqual(refusalOf(error), ['WriteDeadlineExceededError', 'failed', 2, 3]);
    assert.deepEqual(state.ensures, [{ projects: 0, prompts: 50 }]);
  });

  it('a front refused for a larger burst lets the write ask for its own units', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0, byPosition: { 0: ['rejected', 'brandAiLimit'] } });
    await guard.front({ prompts: 50 });
    const answer = await guard.write(gate(12), { need: { prompts: 25 }, site: 's' });
    // Refused at 3 s for 50: the cycle sent its own 25, saw it applied at 6 s, landed at 12 s.
    assert.equal(answer, OK);
    assert.deepEqual(state.ensures, [{ prompts: 50 }, { prompts: 25 }]);
    assert.deepEqual(state.asked, [[3, 0], [6, 1]]);
    assert.deepEqual(state.metrics, [['recovered', 5, 's']]);
  });

  it('a front known to be refused is not followed by the next write of the burst', async () => {
    const policy = new GuardPolicy({ deadlineS: 60 });
    const { state, guard, gate } = frontRig({ visibleAt: 0, byPosition: { 0: ['rejected', 'brandAiLimit'] }, policy });
    await guard.front({ prompts: 50 });
    await guard.write(gate(12), { need: { prompts: 25 }, site: 'first' }); // lands at 12 s
    const answer = await guard.write(gate(21), { need: { prompts: 25 }, site: 'second' });
    assert.equal(answer, OK);
    assert.deepEqual(state.ensures, [{ prompts: 50 }, { prompts: 25 }, { prompts: 25 }]);
    assert.deepEqual(state.asked, [[3, 0], [6, 1], [15, 2]]); // its own ensure at once
    assert.deepEqual(state.metrics, [['recovered', 5, 'first'], ['recovered', 4, 'second']]);
  });

  it('a front applied but not serving the write after the lag leads to its own ensure', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0, policy: new GuardPolicy({ deadlineS: 60 }) });
    await guard.front({ prompts: 50 });
    const call = gate();
    const error = await guard.write(call, { need: { prompts: 50 }, site: 's' }).catch((e) => e);
    // The front, seen applied at 3 s, had lag + interval (till 15 s); then the cycle's own,
    // sent at 15 s and seen applied at 18 s, had its own (till 30 s).
    assert.deepEqual(state.ensures, [{ prompts: 50 }, { prompts: 50 }]);
    assert.deepEqual(state.asked, [[3, 0], [18, 1]]);
    assert.deepEqual(call.attemptsAt, [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30]);
    assert.deepEqual(refusalOf(error), ['WriteQuotaExhaustedError', null, 11, 30]);
    assert.deepEqual(state.metrics, [['exhausted', 11, 's']]);
  });

  it('a second write following the same front does not restart its lag', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0 });
    await guard.front({ prompts: 50 });
    await guard.write(gate(9), { need: { prompts: 25 }, site: 'first' });
    const error = await guard.write(gate(), { need: { prompts: 25 }, site: 'second' }).catch((e) => e);
    // The lag counts from the first sighting (3 s): its own ensure at 15 s (not 24 s, past the
    // deadline), seen applied at 18 s, and no attempt could start before 20 s after that.
    assert.deepEqual(state.ensures, [{ prompts: 50 }, { prompts: 25 }]);
    assert.deepEqual(state.asked, [[3, 0], [18, 1]]);
    assert.deepEqual(refusalOf(error), ['WriteDeadlineExceededError', null, 4, 9]);
    assert.deepEqual(state.metrics, [['recovered', 4, 'first'], ['exhausted', 4, 'second']]);
  });

  it('two writes of the burst made at once both follow the front: one ensure, one lag', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0, concurrent: true });
    await guard.front({ prompts: 50 });
    const [first, second] = await Promise.all([
      guard.write(gate(9), { need: { prompts: 25 }, site: 'first' }),
      guard.write(gate(9), { need: { prompts: 25 }, site: 'second' }),
    ]);
    assert.deepEqual([first, second, state.now - START], [OK, OK, 9]);
    assert.deepEqual(state.ensures, [{ prompts: 50 }]);
    assert.deepEqual(state.asked, [[3, 0], [3, 0]]);
    assert.deepEqual(state.metrics, [['recovered', 4, 'first'], ['recovered', 4, 'second']]);
  });

  it('a front already spent when the cycle starts is not followed', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0 });
    await guard.front({ prompts: 50 });
    await guard.write(gate(15), { need: { prompts: 25 }, site: 'first' }); // lands at 15 s
    const error = await guard.write(gate(), { need: { prompts: 25 }, site: 'second' }).catch((e) => e);
    // Seen applied at 3 s, enforced by 15 s: the second write asks for its own 25 at once.
    assert.deepEqual(state.ensures, [{ prompts: 50 }, { prompts: 25 }]);
    assert.deepEqual(state.asked, [[3, 0], [18, 1]]);
    assert.deepEqual(refusalOf(error), ['WriteDeadlineExceededError', null, 2, 3]);
    assert.deepEqual(state.metrics, [['recovered', 6, 'first'], ['exhausted', 2, 'second']]);
  });

  it('a write the front does not cover sends its own ensure at once', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0 });
    await guard.front({ prompts: 10 });
    assert.equal(await guard.write(gate(9), { need: { prompts: 50 }, site: 's' }), OK);
    assert.deepEqual(state.ensures, [{ prompts: 10 }, { prompts: 50 }]);
    assert.deepEqual(state.asked, [[3, 1]]); // once: applied, not again in the cycle
    assert.deepEqual(state.metrics, [['recovered', 4, 's']]);
  });

  it('a front that covers one dimension but not the other is not followed', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0 });
    await guard.front({ prompts: 50 });
    assert.equal(await guard.write(gate(9), { need: { projects: 1, prompts: 5 }, site: 's' }), OK);
    assert.deepEqual(state.ensures, [{ prompts: 50 }, { projects: 1, prompts: 5 }]);
    assert.deepEqual(state.asked, [[3, 1]]);
  });

  it('without a lookup a fronted write still sends its own ensure', async () => {
    const { state, guard, gate } = frontRig({ withLookup: false });
    await guard.front({ prompts: 50 });
    assert.equal(await guard.write(gate(9), { need: { prompts: 50 }, site: 's' }), OK);
    assert.deepEqual(state.ensures, [{ prompts: 50 }, { prompts: 50 }]);
    assert.deepEqual(state.metrics, [['recovered', 4, 's']]);
  });

  it('a front pending until the deadline is deadlineExceeded, never quotaExceeded', async () => {
    const { state, guard, gate } = frontRig();
    await guard.front({ prompts: 50 });
    const call = gate();
    const error = await guard.write(call, { need: { prompts: 50 }, site: 's' }).catch((e) => e);
    assert.deepEqual(refusalOf(error), ['WriteDeadlineExceededError', null, 7, 18]);
    assert.deepEqual(call.attemptsAt, [0, 3, 6, 9, 12, 15, 18]);
    assert.deepEqual(state.ensures, [{ prompts: 50 }]);
    assert.deepEqual(state.asked, [[3, 0], [6, 0], [9, 0], [12, 0], [15, 0], [18, 0]]);
    assert.deepEqual(state.metrics, [['exhausted', 7, 's']]);
  });

  it('its own ensure failing to enqueue after the front abandons the cycle: every cycle counted once', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0, failEnqueue: 2 });
    await guard.front({ prompts: 50 });
    assert.equal(await guard.write(gate(9), { need: { prompts: 50 }, site: 'landed' }), OK);
    const failed = await guard.write(gate(), { need: { prompts: 60 }, site: 'unsent' }).catch((e) => e);
    assert.equal(failed.message, 'queue down');
    // The third write starts at 9 s and follows the front (applied at 3 s) till 15 s.
    const error = await guard.write(gate(), { need: { prompts: 50 }, site: 'spent' }).catch((e) => e);
    assert.equal(error.message, 'queue down');
    assert.deepEqual(state.ensures, [{ prompts: 50 }]);
    assert.deepEqual(state.metrics, [['recovered', 4, 'landed'], ['abandoned', 1, 'unsent'], ['abandoned', 3, 'spent']]);
  });

  it('a need that breaks the contract ends the cycle before anything is sent, even with a front', async () => {
    const { state, guard, gate } = frontRig({ visibleAt: 0 });
    await guard.front({ prompts: 50 });
    const error = await guard.write(gate(), { need: { prompts: 2.5 }, site: 's' }).catch((e) => e);
    assert.deepEqual([error.name, error.field], ['ContractError', 'need.prompts']);
    assert.deepEqual([state.ensures, state.metrics], [[{ prompts: 50 }], [['abandoned', 1, 's']]]);
  });
});
