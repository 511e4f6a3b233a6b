// Compiled (never run) by test/types.test.js: the declarations describe the API as used.
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { KMSClient } from '@aws-sdk/client-kms';
import { SQSClient } from '@aws-sdk/client-sqs';
import {
  AllocationProducer, CredentialHandover, EmfQuotaRetryRecorder, ImsEmitter, NeedsReauthError, GuardPolicy, OutcomeReader, WriteGuard, WriteQuotaExhaustedError,
  buildEnsure, type AllocationOutcome, type EnsureRequest, type LedgerRecord,
} from '../types/index.js';

const ims = new ImsEmitter({ host: 'https://ims.example.com', clientId: 'e', clientSecret: 's', promiseDefinitionId: 'p' });
const credentials = new CredentialHandover({
  tableName: 't', keyArn: 'k', kms: new KMSClient({}), dynamodb: new DynamoDBClient({}), ims,
});
const producer = new AllocationProducer({ queueUrl: 'q.fifo', sqs: new SQSClient({}), credentials });
const outcomes = new OutcomeReader({ tableName: 't', dynamodb: new DynamoDBClient({}) });
const recorder = new EmfQuotaRetryRecorder('prod', { service: 'brands' });
recorder.quotaVerdict(true);
const guard = new WriteGuard({
  producer, outcomes, workspaceId: 'c', parentWorkspaceId: 'm', policy: new GuardPolicy({ retries: 2 }), recorder,
});
const ensure: EnsureRequest = buildEnsure({ workspaceId: 'c', parentWorkspaceId: 'm', need: { prompts: 1 } });
const includeDrafted: boolean | undefined = ensure.include_drafted;

export async function handOver(accessToken: string): Promise<string> {
  try {
    await producer.enqueueRelease({ workspaceId: 'c' }, { credential: { promiseToken: 'pt' } });
    return await producer.enqueueEnsure({ workspaceId: 'c', parentWorkspaceId: 'm' }, { credential: { accessToken } });
  } catch (error) {
    if (error instanceof NeedsReauthError) return error.code;
    throw error;
  }
}

export async function flow(): Promise<string> {
  await guard.front({ prompts: 1 });
  try {
    const answer = await guard.write(async () => ({ status: 200, body: '{}' }), { need: { prompts: 1 }, site: 's' });
    const outcome: AllocationOutcome = await outcomes.waitForOutcome('r', 30);
    const record: LedgerRecord | null = await outcomes.getRecord('r');
    return `${answer.status} ${outcome.status} ${record?.state} ${includeDrafted}`;
  } catch (error) {
    if (error instanceof WriteQuotaExhaustedError) return error.reason ?? error.code;
    throw error;
  }
}
