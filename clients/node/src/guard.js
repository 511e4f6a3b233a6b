// The write guard (the same behaviour as the Python WriteGuard), one per incoming
// request and child workspace: front the burst, wrap every metered write, and on the
// disguised 405 wait for ONE ensure (the request's pending front when it covers the write,
// else the recovery's own) while retrying across the gate's enforcement lag, all inside one
// deadline fixed when the guard is made.
// An ensure's outcome is read through the callers' contract table (./answers.js): refused
// stops at once with the table's answer, applied gives the gate its lag, and an unknown status
// or an outcome of another request, child or kind keeps the guard waiting.
import { answerOf } from './answers.js';
import { QUOTA_SHAPED_STATUS, isMeteredQuota } from './classify.js';
import { buildEnsure } from './contract.js';

const sleepS = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));
const monotonicS = () => performance.now() / 1000;
const stderrLogger = {
  warn(message, fields) {
    process.stderr.write(`${JSON.stringify({ level: 'WARNING', message, ...fields })}\n`);
  },
};

/** More retries than any deadline holds at a sane pause: a larger number is a typo. */
export const MAX_RETRIES = 100;
/** Fifteen minutes, the longest a Lambda runs: no request a guard serves waits longer. */
export const MAX_SECONDS = 900;

function finite(name, value, { min, max, exclusive = false, integer = false }) {
  const ok = Number.isFinite(value) && (integer ? Number.isInteger(value) : true)
    && (exclusive ? value > min : value >= min) && value <= max;
  if (!ok) {
    const bound = exclusive ? `> ${min}` : `>= ${min}`;
    throw new RangeError(`GuardPolicy.${name}: must be ${integer ? 'an integer' : 'a number'} ${bound} and <= ${max}`);
  }
  return value;
}

/** Retries, pause, the per-request deadline and the gate's lag (seconds). */
export class GuardPolicy {
  constructor({ retries = 4, intervalS = 3.0, deadlineS = 20.0, enforcementLagS = 9.0 } = {}) {
    this.retries = finite('retries', retries, { min: 0, max: MAX_RETRIES, integer: true });
    // A zero pause would turn a cycle bounded only by the deadline into a busy loop.
    this.intervalS = finite('intervalS', intervalS, { min: 0, max: MAX_SECONDS, exclusive: true });
    this.deadlineS = finite('deadlineS', deadlineS, { min: 0, max: MAX_SECONDS, exclusive: true });
    this.enforcementLagS = finite('enforcementLagS', enforcementLagS, { min: 0, max: MAX_SECONDS });
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

/**
 * Out of time, not out of room: answer "try again" (e.g. 503 with Retry-After), never 409.
 * Also the answer of an ensure ended by a transient failure (`reason` its code).
 */
export class WriteDeadlineExceededError extends WriteRefusedError {
  constructor(fields) {
    super(`metered write not accepted before the request's deadline (${fields.attempts} attempt(s))`, {
      ...fields, code: 'deadlineExceeded',
    });
    this.name = 'WriteDeadlineExceededError';
  }
}

function refusal(name, code, summary) {
  const Refusal = class extends WriteRefusedError {
    constructor(fields) {
      super(`${summary} after ${fields.attempts} attempt(s)`, { ...fields, code });
      this.name = name;
    }
  };
  Object.defineProperty(Refusal, 'name', { value: name });
  return Refusal;
}

/** The ensure's user cannot reach this workspace: a permission answer (403), not quota. */
export const WriteAccessDeniedError = refusal(
  'WriteAccessDeniedError', 'accessDenied', 'metered write refused: the user cannot reach this workspace',
);
/** IMS refused the user's promise: the user signs in again (401). */
export const WriteNeedsReauthError = refusal(
  'WriteNeedsReauthError', 'needsReauth', 'metered write refused: the user must sign in again',
);
/** The ensure carried no usable user authority: hand it over again (401). */
export const WriteNoCredentialError = refusal(
  'WriteNoCredentialError', 'noCredential', 'metered write refused: no usable user authorization',
);
/** A fault of ours (wrong parent, reused request id, invalid message): 500, page the owner. */
export const WriteConfigurationError = refusal(
  'WriteConfigurationError', 'configurationFault', 'metered write refused: the allocator refused the request as sent',
);

/** The refusal raised for each refusing answer of the contract table (tested equal to it). */
export const REFUSALS = Object.freeze({
  quotaExceeded: WriteQuotaExhaustedError,
  deadlineExceeded: WriteDeadlineExceededError,
  accessDenied: WriteAccessDeniedError,
  needsReauth: WriteNeedsReauthError,
  noCredential: WriteNoCredentialError,
  configurationFault: WriteConfigurationError,
});

/** Records nothing: a guard built without a recorder is invisible to the pager. */
export const nullRecorder = { quotaVerdict() {}, record() {}, rollbackFailed() {} };

/** Does a front that asked for `asked` cover every unit of `need`? (both normalized) */
const covers = (asked, need) => asked.projects >= need.projects && asked.prompts >= need.prompts;
const sameUnits = (a, b) => a.projects === b.projects && a.prompts === b.prompts;

/**
 * Fronts and wraps the metered writes of ONE incoming request on one child workspace.
 * A wrapped `call` resolves to `{status, body}` (the HTTP status and the RAW body text).
 *
 * With `outcomes`, a recovery whose units a front of this guard already asked for follows that
 * front instead of sending its own ensure (ADR 0019): the worker sums the ensures it coalesces,
 * so a second one for the same units would be carved twice. The recovery sends its own only
 * once the front can no longer serve the write: applied and the gate's lag over, or refused
 * for more than the write.
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
    // The fronts sent: {requestId, need, appliedAt, refused}, appliedAt and refused shared
    // by every cycle that follows the front.
    this.fronts = [];
  }

  /** Seconds left of the request's deadline. */
  get timeLeftS() {
    return this.deadline - this.clock();
  }

  /**
   * Enqueue one ensure for the units about to be written; resolves to its request id. With
   * `outcomes`, a wrapped write whose need it covers waits on it rather than asking again.
   */
  async front(need) {
    const input = this.ensureInput(need);
    const units = buildEnsure(input).need; // checks the need first, as the producer would
    const requestId = await this.producer.enqueueEnsure(input);
    this.fronts.push({ requestId, need: units, appliedAt: null, refused: false });
    return requestId;
  }

  ensureInput(need) {
    return {
      workspaceId: this.workspaceId, parentWorkspaceId: this.parentWorkspaceId, need,
      includeDrafted: this.includeDrafted, ceiling: this.ceiling, orgId: this.orgId,
      brandId: this.brandId,
    };
  }

  /**
   * Run a metered write; on the disguised 405, ensure once at most and retry within the
   * deadline (following a pending front that covers `need`, with `outcomes`).
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
    if (!this.isQuota(first)) return first;
    return this.recover(call, { need, site, rollback }, first);
  }

  // Classify one answer; every 405 records the verdict (the enforcement-is-back pager).
  isQuota(answer) {
    const matched = isMeteredQuota(answer.status, answer.body);
    if (answer.status === QUOTA_SHAPED_STATUS) this.safely(() => this.recorder.quotaVerdict?.(matched));
    return matched;
  }

  async recover(call, { need, site, rollback }, first) {
    const cycle = {
      answer: first, attempts: 1, waitedS: 0,
      own: null, // the recovery's own ensure (its input), sent unless it follows a front
      ownNeed: null, // its need, normalized ({projects, prompts})
      requestId: null, // the ensure the cycle waits on: its own, or the front's
      appliedAt: null, // when a lookup first saw that ensure applied (the lag runs from there)
      following: null, // the front followed instead of the cycle's own ensure
    };
    let refusal;
    try {
      await this.start(cycle, need); // one ensure for this recovery at most, never per attempt
      refusal = await this.retry(call, cycle);
    } catch (error) {
      this.recordCycle('abandoned', cycle.attempts, site);
      throw error;
    }
    if (refusal === null) {
      this.recordCycle(cycle.answer.status < 400 ? 'recovered' : 'abandoned', cycle.attempts, site);
      return cycle.answer;
    }
    return this.exhausted(refusal.kind, cycle, refusal.reason, rollback, site);
  }

  // Sleep and attempt until the write lands (null) or the cycle is refused ({kind, reason}).
  async retry(call, cycle) {
    for (;;) {
      if (!this.outcomes && cycle.attempts > this.policy.retries) {
        return { kind: WriteQuotaExhaustedError, reason: null };
      }
      if (!this.startsInTime(this.policy.intervalS)) {
        return { kind: WriteDeadlineExceededError, reason: null };
      }
      await this.sleep(this.policy.intervalS);
      cycle.waitedS += this.policy.intervalS;
      if (!this.startsInTime(0)) return { kind: WriteDeadlineExceededError, reason: null };
      cycle.attempts += 1;
      cycle.answer = await call();
      if (!this.isQuota(cycle.answer)) return null;
      if (this.outcomes) {
        const refused = await this.judge(cycle);
        if (refused !== undefined) return refused;
      }
    }
  }

  // Follow a front that already asked for the write's units, or send the cycle's own ensure.
  async start(cycle, need) {
    cycle.own = this.ensureInput(need);
    cycle.ownNeed = buildEnsure(cycle.own).need; // a need that breaks the contract ends it here
    const front = this.frontToFollow(cycle.ownNeed);
    if (front === null) {
      await this.sendOwn(cycle);
      return;
    }
    cycle.following = front;
    cycle.requestId = front.requestId;
    cycle.appliedAt = front.appliedAt;
  }

  // The latest front covering `units` that may still serve the write. Only with `outcomes`:
  // without them a front on its way cannot be told from one refused or already spent.
  frontToFollow(units) {
    if (!this.outcomes) return null;
    const now = this.clock();
    for (const front of [...this.fronts].reverse()) {
      const spent = front.appliedAt !== null && this.gateHadItsLag(front.appliedAt, now);
      if (covers(front.need, units) && !front.refused && !spent) return front;
    }
    return null;
  }

  async sendOwn(cycle) {
    cycle.following = null;
    cycle.appliedAt = null;
    cycle.requestId = await this.producer.enqueueEnsure(cycle.own);
  }

  gateHadItsLag(appliedAt, now) {
    return now - appliedAt >= this.policy.enforcementLagS + this.policy.intervalS;
  }

  // After a 405 retry, what the awaited ensure (its own, or the front it follows) says:
  // undefined: keep retrying; {kind, reason}: refused, with the table's answer.
  async judge(cycle) {
    const now = this.clock();
    if (cycle.appliedAt !== null) {
      if (!this.gateHadItsLag(cycle.appliedAt, now)) return undefined;
      if (cycle.following !== null) { // the front was enforced and did not serve the write
        await this.sendOwn(cycle);
        return undefined;
      }
      return { kind: WriteQuotaExhaustedError, reason: null };
    }
    const outcome = await this.awaitedOutcome(cycle.requestId);
    const answer = outcome === null ? 'wait' : answerOf(outcome);
    if (answer === 'wait') return undefined;
    if (answer !== 'proceed') return this.judgeRefused(cycle, outcome, answer);
    const front = cycle.following;
    if (front !== null) {
      front.appliedAt ??= now; // the first sighting starts the lag for every cycle following it
      cycle.appliedAt = front.appliedAt;
    } else {
      cycle.appliedAt = now;
    }
    return undefined;
  }

  // A front refused for quota asked for more than the write: the write asks for its own units.
  // Any other refusal (the user's authority, a transient failure, a fault of ours) would meet
  // the write's own ensure too: it ends the cycle with the table's answer.
  async judgeRefused(cycle, outcome, answer) {
    const front = cycle.following;
    if (front !== null) {
      front.refused = true;
      if (answer === 'quotaExceeded' && !sameUnits(front.need, cycle.ownNeed)) {
        await this.sendOwn(cycle);
        return undefined;
      }
    }
    return { kind: REFUSALS[answer], reason: outcome.error_code || outcome.status };
  }

  // The awaited ensure's outcome; one of another request, child or kind is ignored.
  async awaitedOutcome(requestId) {
    const outcome = await this.lookup(requestId);
    if (outcome === null) return null;
    const ours = outcome.request_id === requestId && outcome.workspace_id === this.workspaceId
      && outcome.kind === 'ensure';
    if (ours) return outcome;
    this.warn('outcome of another request ignored', { request_id: requestId });
    return null;
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
