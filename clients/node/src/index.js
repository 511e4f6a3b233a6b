// serenity-allocator's Node client: message v1, the producer, the write guard, the outcomes.
export {
  ContractError, LABEL_PATTERN, MAX_UNITS_PER_DIMENSION, REQUEST_ID_PATTERN,
  WORKSPACE_ID_PATTERN, buildEnsure, buildRelease, newRequestId, sqsEntry,
} from './contract.js';
export { AllocationProducer, EnqueueError } from './producer.js';
export {
  CREDENTIAL_TTL_S, CredentialHandover, CredentialHandoverError, IMS_RETRY_DELAYS_S, ImsEmitter,
  ImsClientRefusedError, ImsRequestError, ImsUnavailableError, MAX_TOKEN_BYTES, NeedsReauthError, PROMISE_TOKEN_PURPOSE,
  encryptionContext,
} from './credentials.js';
export { isMeteredQuota, modelChangeNeed } from './classify.js';
export {
  GuardPolicy, REFUSALS, WriteAccessDeniedError, WriteConfigurationError,
  WriteDeadlineExceededError, WriteGuard, WriteNeedsReauthError, WriteNoCredentialError,
  WriteQuotaExhaustedError, WriteRefusedError, nullRecorder,
} from './guard.js';
export { answerOf, codeRow } from './answers.js';
export { OUTCOME_TABLE } from './outcome-table.js';
export {
  LedgerRecordUnreadableError, LedgerUnavailableError, OutcomeReader, OutcomeWaitTimeoutError,
  PROVISIONAL_GRACE_S, isSettled, itemToRecord,
} from './outcomes.js';
export { EmfQuotaRetryRecorder, METRIC_NAMESPACE } from './metrics.js';
