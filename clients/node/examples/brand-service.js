// An example brand service: front -> guarded write -> publish -> delete -> release -> outcome,
// against `serenity-allocator local up` (or a deployed stack: the same variables).
//
//   eval "$(serenity-allocator local up --token my-token ... | grep '^export')"   # or copy them
//   SIMULATOR_TOKEN=my-token CHILD=c1 MASTER=m1 node examples/brand-service.js
//
// Prints one JSON line per step. Variables: AWS_ENDPOINT_URL (local only), AWS_REGION,
// QUEUE_URL (stack output AllocationQueueUrl), REQUEST_LEDGER_TABLE (RequestLedgerTableName),
// SIMULATOR_ORIGIN and SIMULATOR_TOKEN (the write gateway and its bearer), CHILD, MASTER,
// PROMPTS (the burst, default 50), LAG_S (the gate's enforcement lag, default 9).
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { SQSClient } from '@aws-sdk/client-sqs';
import {
  AllocationProducer, EmfQuotaRetryRecorder, GuardPolicy, OutcomeReader, WriteGuard,
  WriteDeadlineExceededError, WriteQuotaExhaustedError,
} from '../src/index.js';

const env = process.env;
const log = (step, fields) => process.stdout.write(`${JSON.stringify({ step, ...fields })}\n`);

async function gateway(method, path, body) {
  const answer = await fetch(`${env.SIMULATOR_ORIGIN}/project-engine/v1/workspaces/${path}`, {
    method,
    headers: { authorization: `Bearer ${env.SIMULATOR_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(5000),
  });
  return { status: answer.status, body: await answer.text() }; // the RAW body: the classifier reads it
}

export async function main() {
  const [child, master, prompts] = [env.CHILD, env.MASTER, Number(env.PROMPTS ?? 50)];
  const producer = new AllocationProducer({ queueUrl: env.QUEUE_URL, sqs: new SQSClient({}) });
  const outcomes = new OutcomeReader({ tableName: env.REQUEST_LEDGER_TABLE, dynamodb: new DynamoDBClient({}) });
  const lagS = Number(env.LAG_S ?? 9);
  const guard = new WriteGuard({
    producer, workspaceId: child, parentWorkspaceId: master, outcomes,
    policy: new GuardPolicy({ intervalS: Math.min(3, lagS / 2 || 0.5), enforcementLagS: lagS }),
    recorder: new EmfQuotaRetryRecorder('local', { service: 'brand-service', emit: (line) => log('metric', JSON.parse(line)) }),
  });

  const fronted = await guard.front({ prompts });
  log('front', { request_id: fronted });
  try {
    const written = await guard.write(
      () => gateway('POST', `${child}/prompts`, { count: prompts }),
      { need: { prompts }, site: 'prompts.create', rollback: () => log('rollback', {}) },
    );
    log('write', { status: written.status, body: JSON.parse(written.body) });
  } catch (error) {
    if (error instanceof WriteQuotaExhaustedError) return log('refused', { http: 409, reason: error.reason });
    if (error instanceof WriteDeadlineExceededError) return log('refused', { http: 503, reason: error.code });
    throw error;
  }
  log('front outcome', { outcome: await outcomes.waitForOutcome(fronted, 30) });
  await gateway('POST', `${child}/prompts/publish`, { count: prompts });
  const deleted = await gateway('DELETE', `${child}/prompts`, { count: prompts });
  log('delete', { status: deleted.status, body: JSON.parse(deleted.body) });
  const released = await producer.enqueueRelease({ workspaceId: child });
  log('release', { request_id: released });
  log('release outcome', { outcome: await outcomes.waitForOutcome(released, 30) });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await main();
}
