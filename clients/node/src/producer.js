// Enqueue allocation requests on the FIFO queue (AWS SDK v3, the caller's SQSClient).
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { buildEnsure, buildRelease, sqsEntry } from './contract.js';

/** The queue refused or never got the message; `requestId` is the one that was not sent. */
export class EnqueueError extends Error {
  constructor(requestId, cause) {
    super(`allocation request ${requestId} was not enqueued: ${cause?.name ?? 'error'}`, { cause });
    this.name = 'EnqueueError';
    this.requestId = requestId;
  }
}

/**
 * Sends ensures and releases to the allocation queue.
 *
 * The producer needs `sqs:SendMessage` on the stack output `AllocationQueueArn`; `queueUrl`
 * is the stack output `AllocationQueueUrl`.
 */
export class AllocationProducer {
  /**
   * @param {{queueUrl: string, sqs: import('@aws-sdk/client-sqs').SQSClient,
   *   timeoutMs?: number}} options `timeoutMs` bounds each send (default 5000).
   */
  constructor({ queueUrl, sqs, timeoutMs = 5000 }) {
    if (typeof queueUrl !== 'string' || !queueUrl.endsWith('.fifo')) {
      throw new TypeError('queueUrl: must be the FIFO queue URL (AllocationQueueUrl)');
    }
    this.queueUrl = queueUrl;
    this.sqs = sqs;
    this.timeoutMs = timeoutMs;
  }

  /** Enqueue one ensure; resolves to its request id. */
  async enqueueEnsure(input) {
    return this.send(buildEnsure(input));
  }

  /** Enqueue one release; resolves to its request id. */
  async enqueueRelease(input) {
    return this.send(buildRelease(input));
  }

  /** Send a message built by buildEnsure/buildRelease; resolves to its request id. */
  async send(message) {
    try {
      await this.sqs.send(
        new SendMessageCommand({ QueueUrl: this.queueUrl, ...sqsEntry(message) }),
        { abortSignal: AbortSignal.timeout(this.timeoutMs) },
      );
    } catch (error) {
      throw new EnqueueError(message.request_id, error);
    }
    return message.request_id;
  }
}
