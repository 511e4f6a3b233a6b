// Twenty requests on one child at once, fronted and wrapped as a new Node service would, against
// `serenity-allocator local up --credentials ims` with the real worker and the gate's real 9 s
// lag: one WriteGuard per request (the default policy, the ledger's outcome lookup), acting as
// the child's user. A top-up sized by the pool keeps room for as much again as a run asked for,
// so the fronts of the second batch find the room the first batch's writes have not used yet.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { KMSClient } from '@aws-sdk/client-kms';
import { SQSClient } from '@aws-sdk/client-sqs';
import {
  AllocationProducer, CredentialHandover, ImsEmitter, OutcomeReader, WriteGuard, WriteRefusedError,
} from '../src/index.js';
import { simulator, startLocalStack } from './support/stack.js';

const MASTER = 'm-busy';
const CHILD = 'c-busy';
const REQUESTS = 20;
const BATCH = 15; // 300 prompts in all on a child with none to spare
const TOKEN = 'node-concurrent-static';

describe('twenty fronted requests on one child (IMS mode, the gate\'s 9 s lag)', () => {
  let stack;
  let producer;
  let outcomes;
  let accessToken;

  before(async () => {
    stack = await startLocalStack({ consumers: 1, enforcementLagMs: 9000, token: TOKEN, credentials: 'ims' });
    const env = stack.service;
    const aws = { endpoint: env.AWS_ENDPOINT_URL, region: env.AWS_REGION, credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' } };
    const origin = env.SIMULATOR_ORIGIN;
    const seeded = await simulator(origin, 'POST', '/__seed', {
      body: {
        workspaces: [
          { id: MASTER, ai: { projects: { used: 0, drafted: 0, total: 50 }, prompts: { used: 0, drafted: 0, total: 5000 } } },
          { id: CHILD, parent_id: MASTER, ai: { projects: { used: 1, drafted: 0, total: 1 }, prompts: { used: 100, drafted: 0, total: 100 } } },
        ],
      },
    });
    assert.equal(seeded.status, 200, seeded.body);
    const clients = JSON.parse((await simulator(origin, 'GET', '/__ims/clients')).body);
    const emitter = {
      clientId: clients.emitter.client_id, clientSecret: clients.emitter.client_secret,
      promiseDefinitionId: clients.emitter.promise_definition_id,
    };
    const user = await simulator(origin, 'POST', '/__ims/users', { body: { user: 'node-busy-user', workspaces: [MASTER, CHILD] } });
    accessToken = JSON.parse(user.body).access_token;
    const dynamodb = new DynamoDBClient(aws);
    const credentials = new CredentialHandover({
      tableName: env.CREDENTIALS_TABLE, keyArn: env.CREDENTIALS_KEY_ARN, kms: new KMSClient(aws), dynamodb,
      ims: new ImsEmitter({ host: env.IMS_HOST, ...emitter }),
    });
    producer = new AllocationProducer({ queueUrl: env.QUEUE_URL, sqs: new SQSClient(aws), credentials });
    outcomes = new OutcomeReader({ tableName: env.REQUEST_LEDGER_TABLE, dynamodb });
  });

  after(async () => {
    await stack?.stop();
  });

  async function writePrompts(count) {
    const answer = await fetch(`${stack.service.SIMULATOR_ORIGIN}/project-engine/v1/workspaces/${CHILD}/prompts`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ count }),
      signal: AbortSignal.timeout(5000),
    });
    return { status: answer.status, body: await answer.text() };
  }

  async function oneRequest() {
    const guard = new WriteGuard({
      producer: producer.actingAs({ accessToken }), workspaceId: CHILD, parentWorkspaceId: MASTER, outcomes,
    });
    await guard.front({ prompts: BATCH });
    try {
      const answer = await guard.write(() => writePrompts(BATCH), { need: { prompts: BATCH }, site: 'prompts.create' });
      return String(answer.status);
    } catch (error) {
      if (error instanceof WriteRefusedError) return error.code;
      throw error;
    }
  }

  it('every write lands inside the default deadline: none deadlineExceeded, none refused', async () => {
    const answers = await Promise.all(Array.from({ length: REQUESTS }, oneRequest));
    assert.deepEqual(answers, Array(REQUESTS).fill('200'));
    const { workspaces } = JSON.parse((await simulator(stack.service.SIMULATOR_ORIGIN, 'GET', '/__dump')).body);
    const prompts = workspaces.find((w) => w.id === CHILD).ai.prompts;
    assert.equal(prompts.used + (prompts.drafted ?? 0), 100 + REQUESTS * BATCH);
  });
});
