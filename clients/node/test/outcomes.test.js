// The ledger's reading rule and the wait, over a fake DynamoDB client and an injected clock.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  AllocationProducer, EnqueueError, LedgerRecordUnreadableError, LedgerUnavailableError, OutcomeReader, OutcomeWaitTimeoutError,
  PROVISIONAL_GRACE_S, isSettled, itemToRecord,
} from '../src/index.js';

const OUTCOME = { request_id: 'r-1', kind: 'ensure', workspace_id: 'c-1', status: 'topped-up' };
const item = ({ state = 'final', provisional = false, updatedAt = 1000, outcome = OUTCOME, intent = null } = {}) => ({
  request_id: { S: 'r-1' }, state: { S: state }, status: { S: 'topped-up' },
  ...(outcome ? { outcome: { S: JSON.stringify(outcome) } } : {}),
  ...(intent ? { intent: { S: JSON.stringify(intent) } } : {}),
  provisional: { BOOL: provisional }, updated_at: { N: String(updatedAt) }, expires_at: { N: '9' },
});

function readerOver(items, { now = 1000 } = {}) {
  const state = { now, sleeps: [], gets: [] };
  const dynamodb = {
    async send(command) {
      state.gets.push(command.input);
      const next = items[Math.min(state.gets.length - 1, items.length - 1)];
      if (next instanceof Error) throw next;
      return next ? { Item: next } : {};
    },
  };
  const reader = new OutcomeReader({
    tableName: 'ledger', dynamodb, clock: () => state.now, wallClock: () => state.now,
    sleep: async (s) => { state.sleeps.push(s); state.now += s; },
  });
  return { reader, state };
}

describe('the reading rule', () => {
  const cases = [
    ['no outcome (an intent)', { state: 'intent', outcome: null }, 1000, false],
    ['final', {}, 1000, true],
    ['a published dead letter', { state: 'deadLettered' }, 1000, true],
    ['a provisional dead letter inside the grace', { state: 'deadLettered', provisional: true }, 1000 + PROVISIONAL_GRACE_S - 1, false],
    ['a provisional dead letter past the grace', { state: 'deadLettered', provisional: true }, 1000 + PROVISIONAL_GRACE_S, true],
    ['a provisional dead letter beside a moving intent, past the grace', { state: 'deadLettered', provisional: true, intent: { before: { prompts: 1 }, target: { prompts: 9 } } }, 1000 + PROVISIONAL_GRACE_S, false],
  ];
  for (const [name, shape, now, settled] of cases) {
    it(`${name}: ${settled ? 'the outcome' : 'pending'}`, () => {
      assert.equal(isSettled(itemToRecord(item(shape)), now), settled);
    });
  }

  it('decodes the item into the ledger record shape', () => {
    assert.deepEqual(itemToRecord(item()), {
      request_id: 'r-1', state: 'final', outcome: OUTCOME, provisional: false, updated_at: 1000,
    });
  });
});

describe('OutcomeReader', () => {
  it('getOutcome reads strongly consistently by request id', async () => {
    const { reader, state } = readerOver([item()]);
    assert.deepEqual(await reader.getOutcome('r-1'), OUTCOME);
    assert.deepEqual(state.gets, [{ TableName: 'ledger', Key: { request_id: { S: 'r-1' } }, ConsistentRead: true }]);
  });

  it('waitForOutcome backs off 0.2 s doubling to 2 s and never sleeps past the timeout', async () => {
    const { reader, state } = readerOver([null]);
    await assert.rejects(reader.waitForOutcome('r-1', 5), OutcomeWaitTimeoutError);
    assert.deepEqual(state.sleeps.map((s) => Number(s.toFixed(6))), [0.2, 0.4, 0.8, 1.6, 2]);
    assert.equal(state.gets.length, 6);
  });

  it('waitForOutcome returns once a provisional record ages past the grace', async () => {
    const { reader } = readerOver([item({ state: 'deadLettered', provisional: true, updatedAt: 900 })], { now: 900 });
    const outcome = await reader.waitForOutcome('r-1', PROVISIONAL_GRACE_S + 5);
    assert.deepEqual(outcome, OUTCOME);
  });

  it('a failed read is LedgerUnavailableError with the cause attached', async () => {
    const cause = new Error('ProvisionedThroughputExceededException');
    const { reader } = readerOver([cause]);
    await assert.rejects(reader.getOutcome('r-1'), (error) => error instanceof LedgerUnavailableError && error.cause === cause);
  });
});

describe('what the reader validates', () => {
  const broken = [
    ['a state it does not know', { state: { S: 'done' } }, 'state'],
    ['an outcome that is not JSON', { outcome: { S: '{"request_id": ' } }, 'outcome'],
    ['an outcome of another request id', { outcome: { S: JSON.stringify({ ...OUTCOME, request_id: 'r-2' }) } }, 'outcome.request_id'],
    ['an unknown status', { outcome: { S: JSON.stringify({ ...OUTCOME, status: 'applied' }) } }, 'outcome.status'],
    ['an outcome of another child than the binding', { workspace_id: { S: 'c-2' } }, 'outcome.workspace_id'],
    ['an outcome of another kind than the binding', { kind: { S: 'release' } }, 'outcome.kind'],
    ['totals that are not counts', { outcome: { S: JSON.stringify({ ...OUTCOME, totals_after: { prompts: -1 } }) } }, 'outcome.totals_after'],
    ['a terminal record without an outcome', { outcome: undefined }, 'outcome'],
    ['another id than the one asked', { request_id: { S: 'r-9' } }, 'request_id'],
  ];
  for (const [name, change, field] of broken) {
    it(`${name} is LedgerRecordUnreadableError naming ${field}`, async () => {
      const { reader } = readerOver([{ ...item(), ...change }]);
      await assert.rejects(reader.getOutcome('r-1'), (error) => error instanceof LedgerRecordUnreadableError
        && error.field === field && error.code === 'ledgerRecordUnreadable' && !error.message.includes('c-2'));
    });
  }
});

describe('AllocationProducer', () => {
  it('refuses a queue URL that is not FIFO', () => {
    assert.throws(() => new AllocationProducer({ queueUrl: 'https://sqs/q', sqs: {} }), /^TypeError: queueUrl:/);
  });

  it('sends group id = workspace id and dedup id = request id, and wraps a failed send', async () => {
    const sent = [];
    const sqs = { async send(command) { sent.push(command.input); if (sent.length > 1) throw new Error('AccessDenied'); } };
    const producer = new AllocationProducer({ queueUrl: 'https://sqs/q.fifo', sqs });
    assert.equal(await producer.enqueueRelease({ workspaceId: 'c-1', requestId: 'r-1' }), 'r-1');
    assert.deepEqual([sent[0].QueueUrl, sent[0].MessageGroupId, sent[0].MessageDeduplicationId], ['https://sqs/q.fifo', 'c-1', 'r-1']);
    await assert.rejects(
      producer.enqueueEnsure({ workspaceId: 'c-1', parentWorkspaceId: 'm-1', requestId: 'r-2' }),
      (error) => error instanceof EnqueueError && error.requestId === 'r-2',
    );
  });
});
