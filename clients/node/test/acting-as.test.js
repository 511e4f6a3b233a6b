// A producer acting as one user (Python's `acting_as`): what a WriteGuard takes in IMS mode, so
// both guards are built the same way: WriteGuard(producer.actingAs(user), child, master, ...).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AllocationProducer, WriteGuard } from '../src/index.js';

function producerWith(credentials) {
  const sent = [];
  const sqs = { async send(command) { sent.push(JSON.parse(command.input.MessageBody)); } };
  const queueUrl = 'https://sqs.us-east-1.amazonaws.com/1/q.fifo';
  return { sent, producer: new AllocationProducer({ queueUrl, sqs, credentials }) };
}

describe('actingAs', () => {
  it('hands the user over before each ensure the guard sends, then sends it', async () => {
    const written = [];
    const credentials = {
      check() {},
      async write(requestId, workspaceId, credential) { written.push([requestId, workspaceId, credential]); return null; },
      async takeBack() {},
    };
    const { sent, producer } = producerWith(credentials);
    const guard = new WriteGuard({
      producer: producer.actingAs({ accessToken: 'user-token' }), workspaceId: 'child-1', parentWorkspaceId: 'master-1',
    });
    const requestId = await guard.front({ prompts: 5 });
    assert.deepEqual(written, [[requestId, 'child-1', { accessToken: 'user-token' }]]);
    assert.deepEqual(sent.map((body) => [body.request_id, body.include_drafted]), [[requestId, true]]);
  });

  it('refuses a promise token, and a producer without a handover, naming the credential', () => {
    const { producer } = producerWith({ check() {}, async write() { return null; }, async takeBack() {} });
    assert.throws(() => producer.actingAs({ promiseToken: 'p' }), /credential: actingAs takes/);
    assert.throws(() => producerWith(null).producer.actingAs({ accessToken: 't' }), /no credentials handover/);
  });

  it('never shows the token when serialized', () => {
    const { producer } = producerWith({ check() {}, async write() { return null; }, async takeBack() {} });
    assert.ok(!JSON.stringify(producer.actingAs({ accessToken: 'secret-token' })).includes('secret-token'));
  });
});
