// The producer's credential handover against `serenity-allocator local up --credentials ims`
// (moto's DynamoDB, KMS and SQS; the simulator's IMS; a consumer running every request as its
// user): the worker applies a request the Node client handed over, the Python store decrypts
// the record, and every failure leaves nothing behind and no token in any error.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { inspect, promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { KMSClient } from '@aws-sdk/client-kms';
import { CreateQueueCommand, ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import {
  AllocationProducer, CredentialHandover, EnqueueError, IMS_RETRY_DELAYS_S, ImsEmitter,
  ImsClientRefusedError, ImsUnavailableError, NeedsReauthError, OutcomeReader,
} from '../src/index.js';
import { ROOT } from './support/repo.js';
import { simulator, startLocalStack } from './support/stack.js';

const run = promisify(execFile);
const MASTER = 'm-cred';
const CHILD = 'c-cred';

// The Python worker side's read of a record: DynamoDbCredentialStore over KmsTokenCipher.
const PYTHON_READ = `
import json, sys
from serenity_allocator.adapters.credential_store import CredentialRecordNotOwnedError, DynamoDbCredentialStore
from serenity_allocator.adapters.credential_store import KmsTokenCipher, TokenCipherError
table, key, request_id, *children = sys.argv[1:]
store = DynamoDbCredentialStore(table, KmsTokenCipher(key))
out = {}
for child in children:
    try:
        found = store.read(request_id, child)
        out[child] = None if found is None else found.promise_token
    except TokenCipherError as exc:
        out[child] = exc.reason
    except CredentialRecordNotOwnedError:
        out[child] = "notOwned"
print(json.dumps(out))
`;

describe('the credential handover on the local stack (IMS mode)', () => {
  let stack;
  let aws;
  let dynamodb;
  let sqs;
  let emitterPair;
  let accessToken;
  let sideQueue; // a FIFO queue nobody consumes: what was sent stays to be read
  const errors = [];
  const secrets = [];

  const handover = ({
    sleep, ims = true, db = dynamodb, logger, pair = emitterPair, jitter = () => 0.5,
  } = {}) => new CredentialHandover({
    tableName: stack.service.CREDENTIALS_TABLE, keyArn: stack.service.CREDENTIALS_KEY_ARN,
    kms: new KMSClient(aws), dynamodb: db, logger,
    ims: ims ? new ImsEmitter({ host: stack.service.IMS_HOST, ...pair, sleep, jitter }) : null,
  });
  const producer = (options = {}) => new AllocationProducer({
    queueUrl: options.queueUrl ?? sideQueue, sqs, credentials: handover(options),
  });

  async function record(requestId) {
    const { Item } = await dynamodb.send(new GetItemCommand({
      TableName: stack.service.CREDENTIALS_TABLE, Key: { request_id: { S: requestId } }, ConsistentRead: true,
    }));
    return Item ?? null;
  }

  async function pythonRead(requestId, ...children) {
    const { stdout } = await run(`${ROOT}.venv/bin/python`, ['-c', PYTHON_READ, stack.service.CREDENTIALS_TABLE,
      stack.service.CREDENTIALS_KEY_ARN, requestId, ...children], { env: { ...process.env, ...stack.service }, timeout: 30_000 });
    return JSON.parse(stdout);
  }

  async function sentRequestIds() {
    const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({
      QueueUrl: sideQueue, MaxNumberOfMessages: 10, WaitTimeSeconds: 0, VisibilityTimeout: 0,
    }));
    return Messages.map((m) => JSON.parse(m.Body).request_id).sort();
  }

  async function rejection(promise) {
    try {
      await promise;
    } catch (error) {
      errors.push(error);
      return error;
    }
    return assert.fail('expected a rejection');
  }

  before(async () => {
    stack = await startLocalStack({ consumers: 1, token: 'node-cred-static', credentials: 'ims' });
    aws = { endpoint: stack.service.AWS_ENDPOINT_URL, region: stack.service.AWS_REGION, credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' } };
    dynamodb = new DynamoDBClient(aws);
    sqs = new SQSClient(aws);
    ({ QueueUrl: sideQueue } = await sqs.send(new CreateQueueCommand({
      QueueName: 'node-credentials-side.fifo', Attributes: { FifoQueue: 'true' },
    })));
    const origin = stack.service.SIMULATOR_ORIGIN;
    const seeded = await simulator(origin, 'POST', '/__seed', {
      body: {
        workspaces: [
          { id: MASTER, ai: { projects: { used: 1, drafted: 0, total: 50 }, prompts: { used: 0, drafted: 0, total: 5000 } } },
          { id: CHILD, parent_id: MASTER, ai: { projects: { used: 1, drafted: 0, total: 1 }, prompts: { used: 0, drafted: 0, total: 0 } } },
        ],
      },
    });
    assert.equal(seeded.status, 200, seeded.body);
    const clients = JSON.parse((await simulator(origin, 'GET', '/__ims/clients')).body);
    emitterPair = {
      clientId: clients.emitter.client_id, clientSecret: clients.emitter.client_secret,
      promiseDefinitionId: clients.emitter.promise_definition_id,
    };
    const user = await simulator(origin, 'POST', '/__ims/users', { body: { user: 'node-user', workspaces: [MASTER, CHILD] } });
    accessToken = JSON.parse(user.body).access_token;
    secrets.push(accessToken, emitterPair.clientSecret);
  });

  after(async () => {
    await stack?.stop();
  });

  it('the worker applies an ensure handed over with the user\'s access token, as that user', async () => {
    const reader = new OutcomeReader({ tableName: stack.service.REQUEST_LEDGER_TABLE, dynamodb });
    const queued = producer({ queueUrl: stack.service.QUEUE_URL });
    const requestId = await queued.enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, need: { prompts: 250 } }, { credential: { accessToken } },
    );
    const outcome = await reader.waitForOutcome(requestId, 30);
    assert.deepEqual([outcome.status, outcome.workspace_id, outcome.totals_after.prompts >= 250], ['topped-up', CHILD, true]);
    // The same id asked for another child or kind (a reused id) never reads this outcome.
    const conflict = { request_id: requestId, status: 'rejected', error_code: 'requestIdConflict' };
    assert.deepEqual(await reader.getOutcome(requestId, { workspaceId: 'c-other', kind: 'ensure' }),
      { ...conflict, kind: 'ensure', workspace_id: 'c-other' });
    assert.deepEqual(await reader.waitForOutcome(requestId, 1, { workspaceId: CHILD, kind: 'release' }),
      { ...conflict, kind: 'release', workspace_id: CHILD });
    assert.deepEqual(await reader.getOutcome(requestId, { workspaceId: CHILD, kind: 'ensure' }), outcome);
    const { calls } = JSON.parse((await simulator(stack.service.SIMULATOR_ORIGIN, 'GET', '/__ims/calls')).body);
    assert.deepEqual(calls.slice(0, 2).map((c) => [c.op, c.status, c.user]), [['ims_mint', 200, 'node-user'], ['ims_exchange', 200, 'node-user']]);
  });

  it('writes the record Python decrypts under the exact context; a retry keeps the stored token', async () => {
    const requestId = 'req-node-cred-retry';
    const input = { workspaceId: CHILD, floor: { prompts: 0 }, requestId };
    const sent = await producer().enqueueRelease(input, { credential: { promiseToken: 'pt-node-first' } });
    assert.equal(sent, requestId);
    const item = await record(requestId);
    assert.deepEqual(
      [item.workspace_id.S, Number(item.expires_at.N) - Number(item.written_at.N), item.promise_token.B.length > 0],
      [CHILD, 86400, true],
    );
    // A retried enqueue with another token keeps the stored one and sends again (deduplicated).
    assert.equal(await producer().enqueueRelease(input, { credential: { promiseToken: 'pt-node-second' } }), requestId);
    assert.deepEqual(await sentRequestIds(), [requestId]);
    // A retry whose send fails does not delete the record it did not write.
    const failed = await rejection(producer({ queueUrl: `${stack.service.AWS_ENDPOINT_URL}/000000000000/missing.fifo` })
      .enqueueRelease(input, { credential: { promiseToken: 'pt-node-third' } }));
    assert.equal(failed.requestId, requestId);
    // The Python worker side reads the first token; for another child the record is not that
    // request's: refused before any decrypt (the worker's rejected / requestIdConflict).
    assert.deepEqual(await pythonRead(requestId, CHILD, 'c-other'), { [CHILD]: 'pt-node-first', 'c-other': 'notOwned' });
  });

  it('a refused mint writes and sends nothing', async () => {
    const requestId = 'req-node-cred-refused';
    const dead = 'sim-ims-at-not-a-live-token';
    secrets.push(dead);
    const error = await rejection(producer().enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, requestId }, { credential: { accessToken: dead } },
    ));
    assert.ok(error instanceof NeedsReauthError);
    assert.deepEqual([error.code, error.name], ['needsReauth', 'NeedsReauthError']);
    assert.equal(await record(requestId), null);
    assert.ok(!(await sentRequestIds()).includes(requestId));
  });

  it('a refused emitter pair is the configuration fault imsClientRefused, never needsReauth', async () => {
    const requestId = 'req-node-cred-pair';
    const rotated = { ...emitterPair, clientSecret: 'rotated-away' };
    secrets.push(rotated.clientSecret);
    const error = await rejection(producer({ pair: rotated }).enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, requestId }, { credential: { accessToken } },
    ));
    assert.ok(error instanceof ImsClientRefusedError);
    assert.deepEqual([error.code, error.name], ['imsClientRefused', 'ImsClientRefusedError']);
    assert.equal(await record(requestId), null);
  });

  it('IMS 429 waits its Retry-After when longer than the backoff, and the backoff has +/-20 % jitter', async () => {
    const origin = stack.service.SIMULATOR_ORIGIN;
    const slept = [];
    const sleep = async (s) => { slept.push(s); };
    await simulator(origin, 'POST', '/__faults', { body: { fail_next: [{ status: 429, op: 'ims_mint', count: 2, retry_after: 3 }] } });
    assert.equal(await producer({ sleep }).enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, requestId: 'req-node-cred-429' }, { credential: { accessToken } },
    ), 'req-node-cred-429');
    assert.deepEqual(slept, [3, 3]);
    slept.length = 0;
    const draws = [0, 1];
    await simulator(origin, 'POST', '/__faults', { body: { fail_next: [{ status: 503, op: 'ims_mint', count: 2 }] } });
    await producer({ sleep, jitter: () => draws.shift() }).enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, requestId: 'req-node-cred-jitter' }, { credential: { accessToken } },
    );
    assert.deepEqual(slept.map((s) => Math.round(s * 100) / 100), [0.8, 2.4]);
  });

  it('IMS 503 is retried twice, 1 s then 2 s; a third 503 is imsUnavailable with nothing written', async () => {
    const origin = stack.service.SIMULATOR_ORIGIN;
    const slept = [];
    const sleep = async (s) => { slept.push(s); };
    await simulator(origin, 'POST', '/__faults', { body: { fail_next: [{ status: 503, op: 'ims_mint', count: 2 }] } });
    assert.equal(await producer({ sleep }).enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, requestId: 'req-node-cred-503' }, { credential: { accessToken } },
    ), 'req-node-cred-503');
    assert.deepEqual(slept, [...IMS_RETRY_DELAYS_S]);
    assert.equal((await record('req-node-cred-503')).workspace_id.S, CHILD);

    slept.length = 0;
    await simulator(origin, 'POST', '/__faults', { body: { fail_next: [{ status: 503, op: 'ims_mint', count: 3 }] } });
    const error = await rejection(producer({ sleep }).enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, requestId: 'req-node-cred-down' }, { credential: { accessToken } },
    ));
    assert.deepEqual([error instanceof ImsUnavailableError, error.code, slept], [true, 'imsUnavailable', [1, 2]]);
    assert.equal(await record('req-node-cred-down'), null);
  });

  it('a failed send deletes exactly the record this call wrote', async () => {
    const requestId = 'req-node-cred-unsent';
    const commands = [];
    const spy = { send: (command, options) => { commands.push(command.constructor.name); return dynamodb.send(command, options); } };
    const error = await rejection(producer({ db: spy, queueUrl: `${stack.service.AWS_ENDPOINT_URL}/000000000000/missing.fifo` })
      .enqueueEnsure({ workspaceId: CHILD, parentWorkspaceId: MASTER, requestId }, { credential: { accessToken } }));
    assert.ok(error instanceof EnqueueError);
    assert.equal(error.requestId, requestId);
    assert.deepEqual(commands, ['PutItemCommand', 'DeleteItemCommand']);
    assert.equal(await record(requestId), null);

    // A take-back DynamoDB refuses is logged (ids and the code only); the send's error stands.
    const warned = [];
    const refusing = {
      send: (command, options) => (command.constructor.name === 'DeleteItemCommand'
        ? Promise.reject(Object.assign(new Error('throttled'), { name: 'ProvisionedThroughputExceededException' }))
        : dynamodb.send(command, options)),
    };
    const kept = await rejection(producer({
      db: refusing, logger: { warn: (message, fields) => warned.push([message, fields]) },
      queueUrl: `${stack.service.AWS_ENDPOINT_URL}/000000000000/missing.fifo`,
    }).enqueueEnsure({ workspaceId: CHILD, parentWorkspaceId: MASTER, requestId: 'req-node-cred-kept' }, { credential: { accessToken } }));
    assert.equal(kept.name, 'EnqueueError');
    assert.deepEqual(warned, [['credential record of an unsent request not removed',
      { request_id: 'req-node-cred-kept', reason: 'ProvisionedThroughputExceededException' }]]);
    assert.equal((await record('req-node-cred-kept')).workspace_id.S, CHILD);
  });

  it('a send whose answer is lost keeps the record the delivered message needs (also sent twice)', async () => {
    // The real SQS client delivers, then the answer is lost (a timeout after the send landed);
    // `meanwhile` is a second enqueue of the same request id while the first is in flight.
    const losing = (meanwhile = null) => ({
      async send(command, options) {
        if (meanwhile) { const now = meanwhile; meanwhile = null; await now(); }
        await sqs.send(command, options);
        throw Object.assign(new Error('socket hang up'), { name: 'TimeoutError' });
      },
    });
    const lostProducer = (sqsClient) => new AllocationProducer({ queueUrl: sideQueue, sqs: sqsClient, credentials: handover() });
    const lost = await rejection(lostProducer(losing()).enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, requestId: 'req-node-cred-lost' }, { credential: { promiseToken: 'pt-node-lost' } },
    ));
    assert.deepEqual([lost.name, lost.reason], ['EnqueueError', 'TimeoutError']);
    const twice = await rejection(lostProducer(losing(() => producer().enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, requestId: 'req-node-cred-twice' }, { credential: { promiseToken: 'pt-node-twice-2' } },
    ))).enqueueEnsure(
      { workspaceId: CHILD, parentWorkspaceId: MASTER, requestId: 'req-node-cred-twice' }, { credential: { promiseToken: 'pt-node-twice-1' } },
    ));
    assert.equal(twice.name, 'EnqueueError');
    secrets.push('pt-node-lost', 'pt-node-twice-1', 'pt-node-twice-2');
    const sent = await sentRequestIds();
    assert.ok(sent.includes('req-node-cred-lost') && sent.includes('req-node-cred-twice'), sent.join());
    assert.deepEqual(await pythonRead('req-node-cred-lost', CHILD), { [CHILD]: 'pt-node-lost' });
    assert.deepEqual(await pythonRead('req-node-cred-twice', CHILD), { [CHILD]: 'pt-node-twice-1' });
  });

  it('a record that cannot be written is EnqueueError credential:<code>, nothing sent', async () => {
    const requestId = 'req-node-cred-notable';
    const broken = new CredentialHandover({
      tableName: 'no-such-table', keyArn: stack.service.CREDENTIALS_KEY_ARN, kms: new KMSClient(aws), dynamodb,
    });
    const error = await rejection(new AllocationProducer({ queueUrl: sideQueue, sqs, credentials: broken })
      .enqueueEnsure({ workspaceId: CHILD, parentWorkspaceId: MASTER, requestId }, { credential: { promiseToken: 'pt-node-notable' } }));
    secrets.push('pt-node-notable');
    assert.deepEqual([error.name, error.reason], ['EnqueueError', 'credential:ResourceNotFoundException']);
    assert.ok(!(await sentRequestIds()).includes(requestId));
  });

  it('a credential is checked before any call; a producer without a handover refuses one', async () => {
    const plain = new AllocationProducer({ queueUrl: sideQueue, sqs });
    await assert.rejects(plain.enqueueEnsure({ workspaceId: CHILD, parentWorkspaceId: MASTER }, { credential: { promiseToken: 'x' } }),
      { name: 'TypeError', message: 'credential: this producer has no credentials handover' });
    await assert.rejects(producer().enqueueEnsure({ workspaceId: CHILD, parentWorkspaceId: MASTER }, { credential: { accessToken, promiseToken: 'x' } }),
      { name: 'TypeError', message: 'credential: give exactly one of accessToken and promiseToken' });
    await assert.rejects(producer({ ims: false }).enqueueEnsure({ workspaceId: CHILD, parentWorkspaceId: MASTER }, { credential: { accessToken } }),
      { name: 'TypeError', message: 'credential.accessToken: this handover cannot mint (no ims emitter configured)' });
  });

  it('no token or client secret in any error, its JSON, its inspection, or the producer\'s', () => {
    assert.equal(errors.length, 9);
    const tokens = [...secrets, 'pt-node-first', 'pt-node-second', 'pt-node-third'];
    const views = errors.flatMap((e) => [e.message, e.stack, JSON.stringify(e), inspect(e, { depth: 5 }), String(e.cause?.message ?? '')]);
    const seen = producer();
    views.push(JSON.stringify(seen), inspect(seen, { depth: 3 }), JSON.stringify(handover()));
    for (const view of views) {
      for (const token of tokens) assert.ok(!view.includes(token), `a token shows in: ${view.slice(0, 80)}`);
    }
    assert.deepEqual(JSON.parse(JSON.stringify(handover())).mints, true);
  });
});
