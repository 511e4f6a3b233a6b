// serenity-allocator's Node client: message v1, the producer, the write guard, the outcomes.
export {
  ContractError, LABEL_PATTERN, MAX_UNITS_PER_DIMENSION, REQUEST_ID_PATTERN,
  WORKSPACE_ID_PATTERN, buildEnsure, buildRelease, newRequestId, sqsEntry,
} from './contract.js';
export { AllocationProducer, EnqueueError } from './producer.js';
export { isMeteredQuota, modelChangeNeed } from './classify.js';
export {
  APPLIED_STATUSES, GuardPolicy, WriteDeadlineExceededError, WriteGuard,
  WriteQuotaExhaustedError, WriteRefusedError, nullRecorder,
} from './guard.js';
export {
  LedgerUnavailableError, OutcomeReader, OutcomeWaitTimeoutError, PROVISIONAL_GRACE_S,
  isSettled, itemToRecord,
} from './outcomes.js';
export { EmfQuotaRetryRecorder, METRIC_NAMESPACE } from './metrics.js';
