// The write guard (the same behaviour as the Python WriteGuard), one per incoming
// request and child workspace: front the burst, wrap every metered write, and on the
// disguised 405 enqueue ONE ensure and retry across the gate's enforcement lag, all inside one
// deadline fixed when the guard is made.
import { isMeteredQuota } from './classify.js';

/** Ensure statuses that mean "the room is there (or the child is not metered)". */
export const APPLIED_STATUSES = new Set([
  'hot-path', 'topped-up', 'topped-up-after-reclaim', 'unmetered', 'disabled',
]);

const sleepS = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));
const monotonicS = () => performance.now() / 1000;
const stderrLogger = {
  warn(message, fields) {
    process.stderr.write(`${JSON.stringify({ level: 'WARNING', message, ...fields })}\n`);
  },
};

function finite(name, value, { min, exclusive = false, integer = false }) {
  const ok = Number.isFinite(value) && (integer ? Number.isInteger(value) : true)
    && (exclusive ? value > min : value >= min);
  if (!ok) {
    const bound = exclusive ? `> ${min}` : `>= ${min}`;
    throw new RangeError(`GuardPolicy.${name}: must be ${integer ? 'an integer' : 'a number'} ${bound}`);
  }
  return value;
}

/** Retries, pause, the per-request deadline and the gate's lag (seconds). */
export class GuardPolicy {
  constructor({ retries = 4, intervalS = 3.0, deadlineS = 20.0, enforcementLagS = 9.0 } = {}) {
    this.retries = finite('retries', retries, { min: 0, integer: true });
    this.intervalS = finite('intervalS', intervalS, { min: 0 });
    this.deadlineS = finite('deadlineS', deadlineS, { min: 0, exclusive: true });
    this.enforcementLagS = finite('enforcementLagS', enforcementLagS, { min: 0 });
    Object.freeze(this);
  }
}

/** Base of both final refusals: `code`, `reason`, `answer`, `attempts`, `waitedS`. */
export class WriteRefusedError extends Error {
  constructor(message, { code, reason = null, answer = null, attempts, waitedS }) {
    super(message);
    this.name = 'WriteRefusedError';
    Object.assign(this, { code, reason, answer, attempts, waitedS, rollbackError: undefined });
  }
}

/** Still refused for quota: answer HTTP 409 "allocation exceeded". */
export class WriteQuotaExhaustedError extends WriteRefusedError {
  constructor(fields) {
    super(`metered write refused for quota after ${fields.attempts} attempt(s)`, {
      ...fields, code: 'quotaExceeded',
    });
    this.name = 'WriteQuotaExhaustedError';
  }
}

/** Out of time, not out of room: answer "try again" (e.g. 503 with Retry-After), never 409. */
export class WriteDeadlineExceededError extends WriteRefusedError {
  constructor(fields) {
    super(`metered write not accepted before the request's deadline (${fields.attempts} attempt(s))`, {
      ...fields, code: 'deadlineExceeded', reason: null,
    });
    this.name = 'WriteDeadlineExceededError';
  }
}

/** Records nothing (the default: metrics are the service's choice). */
export const nullRecorder = { record() {}, rollbackFailed() {} };

/**
 * Fronts and wraps the metered writes of ONE incoming request on one child workspace.
 * A wrapped `call` resolves to `{status, body}` (the HTTP status and the RAW body text).
 */
export class WriteGuard {
  constructor({
    producer, workspaceId, parentWorkspaceId, policy = new GuardPolicy(), recorder = nullRecorder,
    outcomes = null, includeDrafted = true, ceiling, orgId, brandId, clock = monotonicS,
    sleep = sleepS, logger = stderrLogger,
  }) {
    Object.assign(this, {
      producer, workspaceId, parentWorkspaceId, policy, recorder, outcomes, includeDrafted,
      ceiling, orgId, brandId, clock, sleep, logger,
    });
    this.deadline = clock() + policy.deadlineS;
  }

  /** Seconds left of the request's deadline. */
  get timeLeftS() {
    return this.deadline - this.clock();
  }

  /** Enqueue one ensure for the units about to be written; resolves to its request id. */
  async front(need) {
    return this.producer.enqueueEnsure({
      workspaceId: this.workspaceId, parentWorkspaceId: this.parentWorkspaceId, need,
      includeDrafted: this.includeDrafted, ceiling: this.ceiling, orgId: this.orgId,
      brandId: this.brandId,
    });
  }

  /**
   * Run a metered write; on the disguised 405, ensure once and retry within the deadline.
   * Resolves to the accepted answer or a non-quota answer unchanged; rejects with
   * WriteQuotaExhaustedError or WriteDeadlineExceededError (after `rollback`, once).
   * @param {() => Promise<{status: number, body: string}>} call
   * @param {{need: {projects?: number, prompts?: number}, site: string,
   *   rollback?: () => (void | Promise<void>)}} options
   */
  async write(call, { need, site, rollback } = {}) {
    if (!this.startsInTime(0)) {
      return this.refuse(WriteDeadlineExceededError, { attempts: 0, waitedS: 0 }, rollback, site);
    }
    const first = await call();
    if (!isMeteredQuota(first.status, first.body)) return first;
    return this.recover(call, { need, site, rollback }, first);
  }

  async recover(call, { need, site, rollback }, first) {
    const cycle = { answer: first, attempts: 1, waitedS: 0, appliedAt: null };
    let recoveryId;
    try {
      recoveryId = await this.front(need); // one ensure per recovery, not per attempt
    } catch (error) {
      this.recordCycle('abandoned', cycle.attempts, site);
      throw error;
    }
    for (;;) {
      if (!this.outcomes && cycle.attempts > this.policy.retries) {
        return this.exhausted(WriteQuotaExhaustedError, cycle, null, rollback, site);
      }
      if (!this.startsInTime(this.policy.intervalS)) {
        return this.exhausted(WriteDeadlineExceededError, cycle, null, rollback, site);
      }
      await this.sleep(this.policy.intervalS);
      cycle.waitedS += this.policy.intervalS;
      if (!this.startsInTime(0)) {
        return this.exhausted(WriteDeadlineExceededError, cycle, null, rollback, site);
      }
      cycle.attempts += 1;
      try {
        cycle.answer = await call();
      } catch (error) {
        this.recordCycle('abandoned', cycle.attempts, site);
        throw error;
      }
      if (!isMeteredQuota(cycle.answer.status, cycle.answer.body)) {
        this.recordCycle(cycle.answer.status < 400 ? 'recovered' : 'abandoned', cycle.attempts, site);
        return cycle.answer;
      }
      const refusal = this.outcomes ? await this.judge(recoveryId, cycle) : undefined;
      if (refusal !== undefined) {
        return this.exhausted(WriteQuotaExhaustedError, cycle, refusal, rollback, site);
      }
    }
  }

  // undefined: keep retrying; a string or null: the write is refused for quota with that reason.
  async judge(recoveryId, cycle) {
    const outcome = await this.lookup(recoveryId);
    if (outcome === null) return undefined;
    if (outcome.dead_lettered || !APPLIED_STATUSES.has(outcome.status)) {
      return outcome.error_code ?? null;
    }
    cycle.appliedAt ??= this.clock();
    const settled = this.clock() - cycle.appliedAt >= this.policy.enforcementLagS + this.policy.intervalS;
    return settled ? null : undefined;
  }

  async lookup(requestId) {
    try {
      return await this.outcomes.getOutcome(requestId);
    } catch (error) {
      this.warn('outcome lookup failed; counted as unknown', { request_id: requestId, error: error?.name });
      return null;
    }
  }

  startsInTime(pauseS) {
    return this.clock() + pauseS < this.deadline;
  }

  async exhausted(ErrorType, cycle, reason, rollback, site) {
    this.recordCycle('exhausted', cycle.attempts, site);
    const fields = { answer: cycle.answer, attempts: cycle.attempts, waitedS: cycle.waitedS, reason };
    return this.refuse(ErrorType, fields, rollback, site);
  }

  async refuse(ErrorType, fields, rollback, site) {
    const error = new ErrorType(fields);
    if (rollback) {
      try {
        await rollback();
      } catch (rollbackError) {
        error.rollbackError = rollbackError;
        this.safely(() => this.recorder.rollbackFailed?.(site));
        this.warn('rollback after a refused write failed', { site, error: rollbackError?.name });
      }
    }
    throw error;
  }

  recordCycle(outcome, attempt, site) {
    this.safely(() => this.recorder.record(outcome, attempt, site));
  }

  safely(action) {
    try {
      const result = action();
      if (result && typeof result.catch === 'function') result.catch(() => {});
    } catch (error) {
      this.warn('metric recorder failed', { error: error?.name });
    }
  }

  warn(message, fields) {
    try {
      this.logger.warn(message, fields);
    } catch {
      // A logger failure never changes the write's outcome.
    }
  }
}
