// Read a request's outcome from the request ledger (DynamoDB), following the reading rule:
// - no record, or state "intent": pending;
// - state "final": settled (the outcome);
// - state "deadLettered": settled, UNLESS provisional and younger than PROVISIONAL_GRACE_S
//   (a final receive wrote it as it began and may still replace it): pending until then.
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
 * One ledger item (DynamoDB attribute values) as the record docs/schemas/ledger-record-v1
 * describes: `outcome` and `intent` decoded from their JSON strings.
 * @returns {import('../types/contract.js').LedgerRecord}
 */
export function itemToRecord(item) {
  const record = { request_id: item.request_id.S, state: item.state.S };
  if (item.outcome?.S) record.outcome = JSON.parse(item.outcome.S);
  if (item.intent?.S) record.intent = JSON.parse(item.intent.S);
  record.provisional = item.provisional?.BOOL ?? false;
  if (item.updated_at?.N !== undefined) record.updated_at = Number(item.updated_at.N);
  return record;
}

/**
 * True when the record holds the request's terminal outcome for a reader at `nowS`.
 * @param {import('../types/contract.js').LedgerRecord} record @param {number} nowS epoch s
 */
export function isSettled(record, nowS) {
  if (record.state === 'intent' || !record.outcome) return false;
  if (!record.provisional) return true;
  return nowS - (record.updated_at ?? 0) >= PROVISIONAL_GRACE_S;
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
    return answer.Item ? itemToRecord(answer.Item) : null;
  }

  /**
   * The request's terminal outcome, or null while it is pending (or unknown). An outcome with
   * `dead_lettered: true` is final until an operator redrives the message; the redrive's
   * outcome then replaces it (`supersedes: "deadLettered"`).
   * @returns {Promise<import('../types/contract.js').AllocationOutcome | null>}
   */
  async getOutcome(requestId) {
    const record = await this.getRecord(requestId);
    return record && isSettled(record, this.wallClock()) ? record.outcome : null;
  }

  /**
   * Poll until the request has a terminal outcome; never sleeps past `timeoutS`. Delays
   * double from `firstDelayS` up to `maxDelayS`; the last poll is at the deadline.
   */
  async waitForOutcome(requestId, timeoutS, { firstDelayS = 0.2, maxDelayS = 2.0 } = {}) {
    if (!(timeoutS >= 0)) throw new RangeError('timeoutS: must not be negative');
    const deadline = this.clock() + timeoutS;
    let delay = firstDelayS;
    for (;;) {
      const outcome = await this.getOutcome(requestId);
      if (outcome !== null) return outcome;
      const left = deadline - this.clock();
      if (left <= 0) throw new OutcomeWaitTimeoutError(requestId, timeoutS);
      await this.sleep(Math.min(delay, left));
      delay = Math.min(delay * 2, maxDelayS);
    }
  }
}
