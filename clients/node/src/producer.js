// Enqueue allocation requests on the FIFO queue (AWS SDK v3, the caller's SQSClient), each
// optionally with its user's authority handed over first (./credentials.js).
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { buildEnsure, buildRelease, sqsEntry } from './contract.js';
import { CredentialHandoverError } from './credentials.js';

/**
 * The request was not enqueued; `requestId` is the one that was not sent. `reason` is the SQS
 * error's name, or `credential:<AWS code>` when its record could not be written (nothing sent).
 */
export class EnqueueError extends Error {
  constructor(requestId, cause, reason = cause?.name ?? 'error') {
    super(`allocation request ${requestId} was not enqueued: ${reason}`, { cause });
    this.name = 'EnqueueError';
    this.requestId = requestId;
    this.reason = reason;
  }
}

/**
 * True only when SQS surely did not take the message: one attempt, answered with a 4xx that is
 * not a throttle. A timeout, a dropped connection, a 5xx or a refusal after a retry may hide a
 * delivered message (its answer lost).
 */
function refusedBeforeDelivery(error) {
  const status = error?.$metadata?.httpStatusCode;
  const attempts = error?.$metadata?.attempts ?? 1;
  const throttled = /throttl/i.test(String(error?.name ?? ''));
  return Number.isInteger(status) && status >= 400 && status < 500 && attempts <= 1 && !throttled;
}

/**
 * Sends ensures and releases to the allocation queue.
 *
 * The producer needs `sqs:SendMessage` on the stack output `AllocationQueueArn`; `queueUrl`
 * is the stack output `AllocationQueueUrl`. With `credentials` (a CredentialHandover), an
 * enqueue given `{ credential }` writes the request's promise token to the credentials table
 * before the send (docs/credentials.md); without a credential it only sends, as before.
 */
export class AllocationProducer {
  #credentials;

  /**
   * @param {{queueUrl: string, sqs: import('@aws-sdk/client-sqs').SQSClient,
   *   timeoutMs?: number, credentials?: import('./credentials.js').CredentialHandover | null}}
   *   options `timeoutMs` bounds each send (default 5000).
   */
  constructor({ queueUrl, sqs, timeoutMs = 5000, credentials = null }) {
    if (typeof queueUrl !== 'string' || !queueUrl.endsWith('.fifo')) {
      throw new TypeError('queueUrl: must be the FIFO queue URL (AllocationQueueUrl)');
    }
    this.queueUrl = queueUrl;
    this.sqs = sqs;
    this.timeoutMs = timeoutMs;
    this.#credentials = credentials;
  }

  /** Enqueue one ensure; resolves to its request id. `options.credential`: see `send`. */
  async enqueueEnsure(input, options) {
    return this.send(buildEnsure(input), options);
  }

  /** Enqueue one release; resolves to its request id. `options.credential`: see `send`. */
  async enqueueRelease(input, options) {
    return this.send(buildRelease(input), options);
  }

  /**
   * Send a message built by buildEnsure/buildRelease; resolves to its request id.
   *
   * With `{ credential: { accessToken } }` (a promise token is minted with the emitter pair) or
   * `{ credential: { promiseToken } }`: mint, write the record, then send; a send SQS refused
   * outright deletes the record this call wrote (after a lost answer it stays, to its TTL).
   * Throws NeedsReauthError / ImsUnavailableError / ImsRequestError (nothing written or sent),
   * EnqueueError with reason `credential:<code>` (nothing sent) or with the SQS error.
   */
  async send(message, { credential } = {}) {
    if (credential === undefined) {
      await this.#sendOne(message);
      return message.request_id;
    }
    if (this.#credentials === null) throw new TypeError('credential: this producer has no credentials handover');
    this.#credentials.check(credential);
    let receipt;
    try {
      receipt = await this.#credentials.write(message.request_id, message.workspace_id, credential);
    } catch (error) {
      if (!(error instanceof CredentialHandoverError)) throw error;
      throw new EnqueueError(message.request_id, error, `credential:${error.reason}`);
    }
    try {
      await this.#sendOne(message);
    } catch (error) {
      // Only what this call wrote, and only when SQS refused outright: after a lost answer
      // the message may have been delivered and needs the record (its TTL removes it).
      if (receipt !== null && refusedBeforeDelivery(error.cause)) await this.#credentials.takeBack(receipt);
      throw error;
    }
    return message.request_id;
  }

  async #sendOne(message) {
    try {
      await this.sqs.send(
        new SendMessageCommand({ QueueUrl: this.queueUrl, ...sqsEntry(message) }),
        { abortSignal: AbortSignal.timeout(this.timeoutMs) },
      );
    } catch (error) {
      throw new EnqueueError(message.request_id, error);
    }
  }

  /**
   * The producer for one user (as Python's `acting_as`): every request it enqueues carries
   * that user's authority, handed over before it is sent. What a WriteGuard takes in IMS mode
   * (its front and recovery ensures are requests of their own). Only `{ accessToken }`: one
   * promise serves one request (the worker's exchange of the first kills it for the next).
   * @param {{accessToken: string}} credential
   */
  actingAs(credential) {
    if (credential?.promiseToken !== undefined || typeof credential?.accessToken !== 'string') {
      throw new TypeError('credential: actingAs takes the user\'s { accessToken } (a promise serves one request)');
    }
    if (this.#credentials === null) throw new TypeError('credential: this producer has no credentials handover');
    this.#credentials.check(credential);
    const producer = this;
    return Object.freeze({
      enqueueEnsure: (input) => producer.enqueueEnsure(input, { credential }),
      enqueueRelease: (input) => producer.enqueueRelease(input, { credential }),
      send: (message) => producer.send(message, { credential }),
      toJSON: () => ({ producer, credential: '***' }),
    });
  }

  toJSON() {
    return { queueUrl: this.queueUrl, timeoutMs: this.timeoutMs, credentials: this.#credentials };
  }
}
