// The client's API. The message, outcome and ledger record types are generated from the
// schemas (./contract.d.ts); this file declares the functions and classes around them.
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { KMSClient } from '@aws-sdk/client-kms';
import type {
  AllocationOutcome, CustomerAnswer, EnsureRequest, LedgerRecord, OutcomeTable, ReleaseRequest,
} from './contract.js';

export type {
  AllocationOutcome, AllocationRequest, Applied, CustomerAnswer, EnsureRequest, KnownErrorCode,
  LedgerRecord, OutcomeStatus, OutcomeTable, ReleaseRequest,
} from './contract.js';

export interface Need { projects?: number; prompts?: number }

export interface EnsureInput {
  workspaceId: string;
  parentWorkspaceId: string;
  need?: Need;
  /** Default true: the write gate meters used + drafted + batch. */
  includeDrafted?: boolean;
  ceiling?: { projects?: number | null; prompts?: number | null };
  orgId?: string;
  brandId?: string;
  requestId?: string;
}

export interface ReleaseInput {
  workspaceId: string;
  floor?: Need;
  source?: 'service' | 'sweep' | 'reclaim';
  runId?: string;
  orgId?: string;
  brandId?: string;
  requestId?: string;
}

export const WORKSPACE_ID_PATTERN: RegExp;
export const REQUEST_ID_PATTERN: RegExp;
export const LABEL_PATTERN: RegExp;
export const MAX_UNITS_PER_DIMENSION: number;
export class ContractError extends Error { field: string }
export function newRequestId(): string;
export function buildEnsure(input: EnsureInput): EnsureRequest;
export function buildRelease(input: ReleaseInput): ReleaseRequest;
export function sqsEntry(message: EnsureRequest | ReleaseRequest): {
  MessageBody: string; MessageGroupId: string; MessageDeduplicationId: string;
};

/** The user authority a request runs under: exactly one of the two tokens. */
export type UserCredential = { accessToken: string; promiseToken?: never } | { promiseToken: string; accessToken?: never };
export interface EnqueueOptions {
  /** Hand the user's authority over (the producer needs `credentials`); absent: send only. */
  credential?: UserCredential;
}

export const PROMISE_TOKEN_PURPOSE: 'serenity-allocator/promise-token';
export const CREDENTIAL_TTL_S: number;
export const MAX_TOKEN_BYTES: number;
export const IMS_RETRY_DELAYS_S: readonly number[];
export function encryptionContext(requestId: string, workspaceId: string): {
  purpose: 'serenity-allocator/promise-token'; request_id: string; workspace_id: string;
};
export class NeedsReauthError extends Error { code: 'needsReauth' }
export class ImsUnavailableError extends Error { code: 'imsUnavailable' }
/** IMS refused the emitter pair itself (`invalid_client`): the service's configuration, not the user's. */
export class ImsClientRefusedError extends Error { code: 'imsClientRefused' }
export class ImsRequestError extends Error { code: 'imsRequestRefused'; status: number; error: string | null }
export class CredentialHandoverError extends Error { requestId: string; reason: string }
export interface PromiseMinter { mint(accessToken: string): Promise<string> }
export class ImsEmitter implements PromiseMinter {
  constructor(options: {
    host: string; clientId: string; clientSecret: string; promiseDefinitionId: string;
    timeoutMs?: number; deadlineMs?: number; sleep?: (seconds: number) => Promise<void>; clock?: () => number;
  });
  readonly origin: string;
  mint(accessToken: string): Promise<string>;
}
export interface CredentialReceipt { readonly requestId: string; readonly ciphertext: Uint8Array }
export class CredentialHandover {
  constructor(options: {
    tableName: string; keyArn: string; kms: KMSClient; dynamodb: DynamoDBClient;
    ims?: PromiseMinter | null; timeoutMs?: number; wallClock?: () => number; logger?: Logger;
  });
  readonly tableName: string;
  readonly keyArn: string;
  check(credential: UserCredential): void;
  write(requestId: string, workspaceId: string, credential: UserCredential): Promise<CredentialReceipt | null>;
  takeBack(receipt: CredentialReceipt): Promise<boolean>;
}

export class EnqueueError extends Error { requestId: string; reason: string }
export class AllocationProducer {
  constructor(options: { queueUrl: string; sqs: SQSClient; timeoutMs?: number; credentials?: CredentialHandover | null });
  enqueueEnsure(input: EnsureInput, options?: EnqueueOptions): Promise<string>;
  enqueueRelease(input: ReleaseInput, options?: EnqueueOptions): Promise<string>;
  send(message: EnsureRequest | ReleaseRequest, options?: EnqueueOptions): Promise<string>;
  /** The producer for one user (Python's `acting_as`): what a WriteGuard takes in IMS mode. */
  actingAs(credential: { accessToken: string }): UserProducer;
}
export interface UserProducer {
  enqueueEnsure(input: EnsureInput): Promise<string>;
  enqueueRelease(input: ReleaseInput): Promise<string>;
  send(message: EnsureRequest | ReleaseRequest): Promise<string>;
}

export function isMeteredQuota(status: number, rawBody: string): boolean;
export function modelChangeNeed(
  publishedPrompts: number, modelsBefore: string[], modelsAfter: string[],
): { projects: 0; prompts: number };

export type CycleOutcome = 'recovered' | 'exhausted' | 'abandoned';
export interface QuotaRetryRecorder {
  /** One MeteredQuotaClassifier per 405 a guarded write met (the enforcement-is-back pager). */
  quotaVerdict?(matched: boolean): void;
  record(outcome: CycleOutcome, attempt: number, site: string): void;
  rollbackFailed?(site: string): void;
}
export interface OutcomeLookup { getOutcome(requestId: string): Promise<AllocationOutcome | null> }
export interface Logger { warn(message: string, fields?: Record<string, unknown>): void }
export interface HttpAnswer { status: number; body: string }

/** The callers' contract table (docs/outcomes.md), generated from the package's outcomes.json. */
export const OUTCOME_TABLE: OutcomeTable;
/** What the contract answers for an ensure's outcome ('wait' for a status it does not know). */
export function answerOf(outcome: { status: string; error_code?: string | null }): CustomerAnswer;
export function codeRow(code: string): OutcomeTable['codes'][number] | null;
export const nullRecorder: QuotaRetryRecorder;
export class GuardPolicy {
  constructor(options?: { retries?: number; intervalS?: number; deadlineS?: number; enforcementLagS?: number });
  readonly retries: number;
  readonly intervalS: number;
  readonly deadlineS: number;
  readonly enforcementLagS: number;
}
export type RefusalCode = Exclude<CustomerAnswer, 'proceed' | 'wait'>;
export class WriteRefusedError extends Error {
  code: RefusalCode;
  reason: string | null;
  answer: HttpAnswer | null;
  attempts: number;
  waitedS: number;
  rollbackError?: unknown;
}
export class WriteQuotaExhaustedError extends WriteRefusedError { code: 'quotaExceeded' }
export class WriteDeadlineExceededError extends WriteRefusedError { code: 'deadlineExceeded' }
export class WriteAccessDeniedError extends WriteRefusedError { code: 'accessDenied' }
export class WriteNeedsReauthError extends WriteRefusedError { code: 'needsReauth' }
export class WriteNoCredentialError extends WriteRefusedError { code: 'noCredential' }
export class WriteConfigurationError extends WriteRefusedError { code: 'configurationFault' }
export const REFUSALS: Readonly<Record<RefusalCode, new (...args: never[]) => WriteRefusedError>>;
export class WriteGuard {
  constructor(options: {
    producer: { enqueueEnsure(input: EnsureInput): Promise<string> };
    workspaceId: string;
    parentWorkspaceId: string;
    policy?: GuardPolicy;
    recorder?: QuotaRetryRecorder;
    outcomes?: OutcomeLookup | null;
    includeDrafted?: boolean;
    ceiling?: EnsureInput['ceiling'];
    orgId?: string;
    brandId?: string;
    clock?: () => number;
    sleep?: (seconds: number) => Promise<void>;
    logger?: Logger;
  });
  readonly deadline: number;
  readonly timeLeftS: number;
  front(need: Need): Promise<string>;
  write<A extends HttpAnswer>(
    call: () => Promise<A>,
    options: { need: Need; site: string; rollback?: () => void | Promise<void> },
  ): Promise<A>;
}

export const PROVISIONAL_GRACE_S: number;
export class OutcomeWaitTimeoutError extends Error { requestId: string; timeoutS: number }
export class LedgerUnavailableError extends Error { code: 'ledgerUnavailable' }
export class LedgerRecordUnreadableError extends Error {
  code: 'ledgerRecordUnreadable'; requestId: string; field: string;
}
/** The request an outcome is asked for: a record bound to another child or kind is not its. */
export interface AskedRequest { workspaceId?: string; kind?: 'ensure' | 'release' }
export function itemToRecord(item: Record<string, unknown>, askedId?: string): LedgerRecord;
export function isSettled(record: LedgerRecord, nowS: number): boolean;
export class OutcomeReader implements OutcomeLookup {
  constructor(options: {
    tableName: string; dynamodb: DynamoDBClient; clock?: () => number;
    sleep?: (seconds: number) => Promise<void>; wallClock?: () => number; timeoutMs?: number;
  });
  getRecord(requestId: string): Promise<LedgerRecord | null>;
  getOutcome(requestId: string, asked?: AskedRequest): Promise<AllocationOutcome | null>;
  waitForOutcome(
    requestId: string, timeoutS: number,
    options?: { firstDelayS?: number; maxDelayS?: number } & AskedRequest,
  ): Promise<AllocationOutcome>;
}

export const METRIC_NAMESPACE: 'SerenityAllocator';
export class EmfQuotaRetryRecorder implements QuotaRetryRecorder {
  /** `environment`: the stack's EnvironmentName; `service`: the calling service's name. */
  constructor(environment: string, options: { service: string; emit?: (line: string) => void; clockMs?: () => number });
  quotaVerdict(matched: boolean): void;
  record(outcome: CycleOutcome, attempt: number, site: string): void;
  rollbackFailed(site: string): void;
}
