// Against `serenity-allocator local up --credentials static` (moto + simulator + consumer
// processes): the example service end to end and a cross-field refusal. The docs' snippets run
// in IMS mode in doc-snippets.test.js.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DeleteMessageCommand, ReceiveMessageCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import Ajv2020 from 'ajv/dist/2020.js';
import { OutcomeReader } from '../src/index.js';
import { ROOT, schema } from './support/repo.js';
import { simulator, startLocalStack } from './support/stack.js';

const run = promisify(execFile);
const TOKEN = 'node-client-test-token';
const LAG_MS = 1500;
const MASTER = 'm-node';
const ajv = new Ajv2020({ strict: true });
const validOutcome = ajv.compile(schema('allocation-outcome-v1'));
const validRecord = new Ajv2020({ strict: true }).compile(schema('ledger-record-v1'));

const workspace = (id, prompts, parent) => ({
  id, ...(parent ? { parent_id: parent } : {}),
  ai: { projects: { used: 1, drafted: 0, total: parent ? 1 : 50 }, prompts },
});

describe('on the local stack', () => {
  let stack;
  let env;
  let reader;
  let sqs;

  before(async () => {
    stack = await startLocalStack({ consumers: 1, enforcementLagMs: LAG_MS, token: TOKEN });
    env = { ...process.env, ...stack.service, SIMULATOR_TOKEN: TOKEN };
    const aws = { endpoint: env.AWS_ENDPOINT_URL, region: env.AWS_REGION, credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' } };
    reader = new OutcomeReader({ tableName: env.REQUEST_LEDGER_TABLE, dynamodb: new DynamoDBClient(aws) });
    sqs = new SQSClient(aws);
    const seeded = await simulator(env.SIMULATOR_ORIGIN, 'POST', '/__seed', {
      body: {
        workspaces: [
          workspace(MASTER, { used: 0, drafted: 0, total: 5000 }),
          workspace('c-example', { used: 100, drafted: 0, total: 100 }, MASTER),
          workspace('c-readme', { used: 0, drafted: 0, total: 0 }, MASTER),
        ],
      },
    });
    assert.equal(seeded.status, 200, seeded.body);
  });

  after(async () => {
    await stack?.stop();
  });

  async function capturedDetails() {
    const details = {};
    for (;;) {
      const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({
        QueueUrl: stack.parts['outcome capture queue'], MaxNumberOfMessages: 10, WaitTimeSeconds: 0,
      }));
      if (Messages.length === 0) return details;
      for (const message of Messages) {
        const event = JSON.parse(message.Body);
        details[event.detail.request_id] = event.detail;
        await sqs.send(new DeleteMessageCommand({ QueueUrl: stack.parts['outcome capture queue'], ReceiptHandle: message.ReceiptHandle }));
      }
    }
  }

  it('local up prints what a service needs', () => {
    for (const name of ['AWS_ENDPOINT_URL', 'AWS_REGION', 'QUEUE_URL', 'REQUEST_LEDGER_TABLE', 'OUTCOME_BUS_NAME', 'SIMULATOR_ORIGIN']) {
      assert.ok(stack.service[name], `${name} printed`);
    }
    assert.match(stack.text, /secretsmanager get-secret-value --secret-id \S+ --query SecretString/);
    assert.match(stack.text, /enforcement lag 1500 ms/);
    assert.match(stack.text, /DELETE \/project-engine\/v1\/workspaces\/\{id\}\/prompts {2}\{"count": n\}/);
  });

  it('the example service: front, a guarded write across the lag, publish, delete, release, outcomes', async () => {
    const { stdout } = await run(process.execPath, ['examples/brand-service.js'], {
      cwd: `${ROOT}clients/node`, timeout: 120_000,
      env: { ...env, CHILD: 'c-example', MASTER, PROMPTS: '50', LAG_S: String(LAG_MS / 1000) },
    });
    const steps = stdout.trim().split('\n').map((line) => JSON.parse(line));
    const byStep = Object.fromEntries(steps.map((s) => [s.step, s]));
    // The first write comes before the gate enforces the top-up: refused, then recovered.
    assert.equal(byStep.metric.Outcome, 'recovered');
    assert.ok(byStep.metric.QuotaRetryOutcome >= 2);
    assert.equal(byStep.write.status, 200);
    assert.deepEqual(byStep.write.body.prompts.drafted, 50);
    assert.equal(byStep['front outcome'].outcome.status, 'topped-up');
    assert.deepEqual(byStep.delete.body.prompts.used, 100);
    assert.equal(byStep['release outcome'].outcome.status, 'released');
    assert.equal(byStep.rollback, undefined);

    // Every outcome is in the ledger as its schema says, and its event equals the record.
    const details = await capturedDetails();
    // The recovery followed the pending front (ADR 0019): the child's only ensure is the front.
    const ensures = Object.values(details).filter((d) => d.kind === 'ensure' && d.workspace_id === 'c-example');
    assert.deepEqual(ensures.map((d) => d.request_id), [byStep.front.request_id]);
    for (const step of ['front outcome', 'release outcome']) {
      const { outcome } = byStep[step];
      const record = await reader.getRecord(outcome.request_id);
      assert.ok(validRecord(record), JSON.stringify(validRecord.errors));
      assert.ok(validOutcome(details[outcome.request_id]), JSON.stringify(validOutcome.errors));
      assert.deepEqual(details[outcome.request_id], record.outcome);
      assert.deepEqual(outcome, record.outcome);
    }
  });

  it('a schema-valid ensure naming its child as parent ends invalid, stored and announced', async () => {
    const body = { kind: 'ensure', request_id: 'req-own-parent', workspace_id: 'c-readme', parent_workspace_id: 'c-readme' };
    await sqs.send(new SendMessageCommand({
      QueueUrl: env.QUEUE_URL, MessageBody: JSON.stringify(body), MessageGroupId: 'c-readme', MessageDeduplicationId: 'req-own-parent',
    }));
    const outcome = await reader.waitForOutcome('req-own-parent', 30);
    assert.deepEqual([outcome.status, outcome.error_code, outcome.dead_lettered], ['invalid', 'invalidMessage', true]);
    const record = await reader.getRecord('req-own-parent');
    assert.deepEqual([record.state, record.provisional], ['deadLettered', false]);
  });
});
