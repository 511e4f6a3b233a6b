// Read a request's outcome from the request ledger (DynamoDB), following the reading rule:
// - no record, or state "intent": pending;
// - state "final": settled (the outcome);
// - state "deadLettered": settled, UNLESS provisional and younger than PROVISIONAL_GRACE_S
//   (a final receive wrote it as it began and may still replace it): pending until then;
//   a provisional one beside an intent that moves the child stays pending (it may have landed).
// The worker stores an outcome before it publishes it, so a strongly consistent read is at
// least as fresh as the outcome event.
import { GetItemCommand } from '@aws-sdk/client-dynamodb';

/** Three times the Allocator's 60 s timeout (adapters/ledger_outcome_reader.py). */
export const PROVISIONAL_GRACE_S = 180;

/** No terminal outcome was recorded within the caller's timeout. */
export class OutcomeWaitTimeoutError extends Error {
  constructor(requestId, timeoutS) {
    super(`no outcome for request ${requestId} within ${timeoutS} s`);
    this.name = 'OutcomeWaitTimeoutError';
    this.requestId = requestId;
    this.timeoutS = timeoutS;
  }
}

/** The ledger could not be read (the cause is attached). */
export class LedgerUnavailableError extends Error {
  constructor(cause) {
    super(`the request ledger could not be read: ${cause?.name ?? 'error'}`, { cause });
    this.name = 'LedgerUnavailableError';
    this.code = 'ledgerUnavailable';
  }
}

/**
 * The ledger holds a record that does not read as docs/schemas/ledger-record-v1 says; `field`
 * names what is wrong (never a value of the record).
 */
export class LedgerRecordUnreadableError extends Error {
  constructor(requestId, field) {
    super(`the ledger record of request ${requestId} is unreadable (${field})`);
    this.name = 'LedgerRecordUnreadableError';
    this.code = 'ledgerRecordUnreadable';
    this.requestId = requestId;
    this.field = field;
  }
}

const STATES = new Set(['intent', 'final', 'deadLettered']);
const KINDS = new Set(['ensure', 'release', 'unknown']);
const STATUSES = new Set([
  'hot-path', 'topped-up', 'topped-up-after-reclaim', 'unmetered', 'disabled', 'released',
  'nothing-to-release', 'requires-decommission', 'rejected', 'failed', 'invalid',
]);
const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);
const optionalString = (value) => value === undefined || value === null || typeof value === 'string';

function parsedObject(requestId, text, field) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    throw new LedgerRecordUnreadableError(requestId, field);
  }
  if (!isObject(value)) throw new LedgerRecordUnreadableError(requestId, field);
  return value;
}

function checkTotals(requestId, totals, field) {
  if (totals === undefined || totals === null) return;
  const whole = (n) => Number.isInteger(n) && n >= 0;
  if (!isObject(totals) || !whole(totals.projects ?? 0) || !whole(totals.prompts ?? 0)) {
    throw new LedgerRecordUnreadableError(requestId, field);
  }
}

// The outcome must be the record's own (request id, and the binding when the record has one)
// and have the fields a caller branches on: a tampered or corrupted record is unreadable.
function checkOutcome(record, outcome) {
  const id = record.request_id;
  if (outcome.request_id !== id) throw new LedgerRecordUnreadableError(id, 'outcome.request_id');
  if (typeof outcome.workspace_id !== 'string') throw new LedgerRecordUnreadableError(id, 'outcome.workspace_id');
  if (!KINDS.has(outcome.kind)) throw new LedgerRecordUnreadableError(id, 'outcome.kind');
  if (!STATUSES.has(outcome.status)) throw new LedgerRecordUnreadableError(id, 'outcome.status');
  if (!optionalString(outcome.error_code)) throw new LedgerRecordUnreadableError(id, 'outcome.error_code');
  checkTotals(id, outcome.totals_before, 'outcome.totals_before');
  checkTotals(id, outcome.totals_after, 'outcome.totals_after');
  if (record.workspace_id !== undefined && outcome.workspace_id !== record.workspace_id) {
    throw new LedgerRecordUnreadableError(id, 'outcome.workspace_id');
  }
  if (record.kind !== undefined && outcome.kind !== record.kind) throw new LedgerRecordUnreadableError(id, 'outcome.kind');
}

/**
 * One ledger item (DynamoDB attribute values) as the record docs/schemas/ledger-record-v1
 * describes: `outcome` and `intent` decoded from their JSON strings, and checked (throws
 * LedgerRecordUnreadableError naming the field).
 * @returns {import('../types/contract.js').LedgerRecord}
 */
export function itemToRecord(item, askedId = item?.request_id?.S) {
  const requestId = typeof askedId === 'string' ? askedId : '?';
  if (!isObject(item) || item.request_id?.S !== requestId) throw new LedgerRecordUnreadableError(requestId, 'request_id');
  if (!STATES.has(item.state?.S)) throw new LedgerRecordUnreadableError(requestId, 'state');
  const record = { request_id: requestId, state: item.state.S };
  for (const field of ['workspace_id', 'kind']) {
    if (item[field] === undefined) continue;
    if (typeof item[field].S !== 'string') throw new LedgerRecordUnreadableError(requestId, field);
    record[field] = item[field].S;
  }
  if (item.outcome?.S) record.outcome = parsedObject(requestId, item.outcome.S, 'outcome');
  if (item.intent?.S) record.intent = parsedObject(requestId, item.intent.S, 'intent');
  if (record.state !== 'intent' && !record.outcome) throw new LedgerRecordUnreadableError(requestId, 'outcome');
  if (record.outcome) checkOutcome(record, record.outcome);
  record.provisional = item.provisional?.BOOL ?? false;
  if (item.updated_at?.N !== undefined) {
    record.updated_at = Number(item.updated_at.N);
    if (!Number.isFinite(record.updated_at)) throw new LedgerRecordUnreadableError(requestId, 'updated_at');
  }
  return record;
}

/** True when the record binds its id to another child or kind than the asked request's. */
export function isBoundElsewhere(record, { workspaceId, kind } = {}) {
  const boundWorkspace = record.workspace_id ?? record.outcome?.workspace_id;
  const boundKind = record.kind ?? record.outcome?.kind;
  const otherChild = workspaceId !== undefined && boundWorkspace !== undefined && boundWorkspace !== workspaceId;
  const otherKind = kind !== undefined && boundKind !== undefined && boundKind !== kind;
  return otherChild || otherKind;
}

/**
 * True when the record holds the request's terminal outcome for a reader at `nowS`.
 * @param {import('../types/contract.js').LedgerRecord} record @param {number} nowS epoch s
 */
export function isSettled(record, nowS) {
  if (record.state === 'intent' || !record.outcome) return false;
  if (!record.provisional) return true;
  // Beside an intent that moves the child, a provisional dead letter proves no failure: the
  // transfer may have landed (a redrive's receive reads the child and tells).
  if (record.intent && !sameTotals(record.intent.before, record.intent.target)) return false;
  return nowS - (record.updated_at ?? 0) >= PROVISIONAL_GRACE_S;
}

function sameTotals(a, b) {
  return (a?.projects ?? 0) === (b?.projects ?? 0) && (a?.prompts ?? 0) === (b?.prompts ?? 0);
}

const sleepS = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));

/** Reads outcomes from the ledger table (stack output RequestLedgerTableName). */
export class OutcomeReader {
  /**
   * Needs `dynamodb:GetItem` on `RequestLedgerTableArn`.
   * @param {{tableName: string, dynamodb: import('@aws-sdk/client-dynamodb').DynamoDBClient,
   *   clock?: () => number, sleep?: (s: number) => Promise<void>, wallClock?: () => number,
   *   timeoutMs?: number}} options `clock`: monotonic seconds; `wallClock`: epoch seconds.
   */
  constructor({
    tableName, dynamodb, clock = () => performance.now() / 1000, sleep = sleepS,
    wallClock = () => Date.now() / 1000, timeoutMs = 5000,
  }) {
    if (typeof tableName !== 'string' || !tableName.trim()) {
      throw new TypeError('tableName: the request ledger table name is blank');
    }
    Object.assign(this, { tableName, dynamodb, clock, sleep, wallClock, timeoutMs });
  }

  /** The stored record (decoded), or null when the ledger has none. */
  async getRecord(requestId) {
    let answer;
    try {
      answer = await this.dynamodb.send(
        new GetItemCommand({
          TableName: this.tableName,
          Key: { request_id: { S: requestId } },
          ConsistentRead: true,
        }),
        { abortSignal: AbortSignal.timeout(this.timeoutMs) },
      );
    } catch (error) {
      throw new LedgerUnavailableError(error);
    }
    return answer.Item ? itemToRecord(answer.Item, requestId) : null;
  }

  /**
   * The request's terminal outcome, or null while it is pending (or unknown). An outcome with
   * `dead_lettered: true` is final until an operator redrives the message; the redrive's
   * outcome then replaces it (`supersedes: "deadLettered"`). Give the request's
   * `{ workspaceId, kind }`: a record the id is bound to for another child or kind is another
   * request's (a reused id); the answer is then `rejected / requestIdConflict`, as the worker
   * refuses that request, with nothing of the other request in it. Throws
   * LedgerUnavailableError, LedgerRecordUnreadableError.
   * @returns {Promise<import('../types/contract.js').AllocationOutcome | null>}
   */
  async getOutcome(requestId, { workspaceId, kind } = {}) {
    const record = await this.getRecord(requestId);
    if (record && isBoundElsewhere(record, { workspaceId, kind })) {
      return {
        request_id: requestId, kind: kind ?? 'unknown', workspace_id: workspaceId ?? '',
        status: 'rejected', error_code: 'requestIdConflict',
      };
    }
    return record && isSettled(record, this.wallClock()) ? record.outcome : null;
  }

  /**
   * Poll until the request has a terminal outcome; never sleeps past `timeoutS`. Delays
   * double from `firstDelayS` up to `maxDelayS`; the last poll is at the deadline.
   * `workspaceId`, `kind`: as `getOutcome` (a reused id answers `requestIdConflict` at once).
   */
  async waitForOutcome(requestId, timeoutS, { firstDelayS = 0.2, maxDelayS = 2.0, workspaceId, kind } = {}) {
    if (!(timeoutS >= 0)) throw new RangeError('timeoutS: must not be negative');
    const deadline = this.clock() + timeoutS;
    let delay = firstDelayS;
    for (;;) {
      const outcome = await this.getOutcome(requestId, { workspaceId, kind });
      if (outcome !== null) return outcome;
      const left = deadline - this.clock();
      if (left <= 0) throw new OutcomeWaitTimeoutError(requestId, timeoutS);
      await this.sleep(Math.min(delay, left));
      delay = Math.min(delay * 2, maxDelayS);
    }
  }
}
