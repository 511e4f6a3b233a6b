// Generated from docs/schemas by `npm run types`; do not edit by hand.

/**
 * The JSON body of one SQS FIFO message on the allocation queue. MessageGroupId must equal workspace_id and MessageDeduplicationId must equal request_id. Two rules this schema cannot state end with an `invalid` outcome: MessageGroupId != workspace_id, and an ensure whose parent_workspace_id equals its workspace_id. Generated from the pydantic models by `serenity-allocator message-schema --write`.
 */

export type AllocationRequest = (EnsureRequest | ReleaseRequest)

/**
 * Top the child up so it can take ``need`` more units before a metered write.
 */

export interface EnsureRequest {
brand_id?: (string | null)
ceiling?: (StrictCeiling | null)
include_drafted?: boolean
kind: "ensure"
need?: StrictTotals
org_id?: (string | null)
parent_workspace_id: string
request_id: string
version?: 1
workspace_id: string
}
/**
 * A ceiling as it arrives on the wire: integers only; an absent dimension is not enforced.
 */

export interface StrictCeiling {
projects?: (number | null)
prompts?: (number | null)
}
/**
 * Totals as they arrive on the wire: integers only, no coercion from strings or floats.
 */

export interface StrictTotals {
projects?: number
prompts?: number
}
/**
 * Hand the child's surplus back to the pool, never below ``floor``.
 */

export interface ReleaseRequest {
brand_id?: (string | null)
floor?: (StrictTotals | null)
kind: "release"
org_id?: (string | null)
request_id: string
run_id?: (string | null)
source?: ("service" | "sweep" | "reclaim")
version?: 1
workspace_id: string
}

/**
 * The terminal result of one request, published as an outcome event.
 * 
 * ``status`` says what happened; ``error_code`` is set for rejections and failures
 * (``orgPoolExhausted``, ``brandAiLimit``, ``workspaceBusy``, ...). Carries ids (it goes to
 * the owning service and the logs) but never a secret.
 */

export interface AllocationOutcome {
brand_id?: (string | null)
coalesced?: number
dead_lettered?: (true | null)
/**
 * Why a rejected, failed or invalid request ended so (null otherwise); whether anything was applied or retried, and the customer answer: docs/outcomes.md, generated from src/serenity_allocator/contract/outcomes.json.
 */
error_code?: ("orgPoolExhausted" | "brandAiLimit" | "tieredPrompts" | "accessDenied" | "needsReauth" | "noCredential" | "credentialUnreadable" | "workspaceBusy" | "settleTimeout" | "outOfTime" | "rateLimited" | "upstreamUnavailable" | "imsUnavailable" | "imsClientRefused" | "semrushScopeMissing" | "credentialStoreUnavailable" | "noBoundCredential" | "ledgerUnavailable" | "ledgerConflict" | "ledgerRecordUnreadable" | "groupBlocked" | "finalReceiveUnfinished" | "receivesExhausted" | "requestIdConflict" | "parentMismatch" | "invalidMessage" | string | null)
kind: ("ensure" | "release" | "unknown")
org_id?: (string | null)
receive_count?: number
request_id: string
run_id?: (string | null)
sequence_number?: (string | null)
source?: (string | null)
/**
 * What happened to the request; each value's answer: docs/outcomes.md, generated from src/serenity_allocator/contract/outcomes.json.
 */
status: (("hot-path" | "topped-up" | "rightsized" | "topped-up-after-reclaim" | "unmetered" | "disabled" | "released" | "nothing-to-release" | "requires-decommission" | "rejected" | "failed" | "invalid") & string)
supersedes?: ("deadLettered" | null)
totals_after?: (Totals | null)
totals_before?: (Totals | null)
workspace_id: string
}
/**
 * A pair of non-negative unit counts, one per dimension (needs, totals, floors, ceilings).
 */

export interface Totals {
projects?: number
prompts?: number
}

/**
 * What the ledger holds for one request id.
 * 
 * Built only from a record whose known fields agree with each other: an outcome stored for
 * another request, workspace or kind than the record's own binding does not validate (a
 * tampered or corrupted record is unreadable, never replayed).
 */

export interface LedgerRecord {
announced?: boolean
intent?: (TransferIntent | null)
kind?: (("ensure" | "release" | "unknown") | null)
outcome?: (AllocationOutcome | null)
provisional?: boolean
request_id: string
schema_version?: number
source_message_id?: (string | null)
state: ("intent" | "final" | "deadLettered")
updated_at?: (number | null)
workspace_id?: (string | null)
}
/**
 * The transfer a top-up or a release is about to send: the totals before and the target.
 */

export interface TransferIntent {
before: Totals
target: Totals
}
/**
 * A pair of non-negative unit counts, one per dimension (needs, totals, floors, ceilings).
 */

/** An outcome status of the callers' contract (docs/outcomes.md). */
export type OutcomeStatus = "hot-path" | "topped-up" | "rightsized" | "topped-up-after-reclaim" | "unmetered" | "disabled" | "released" | "nothing-to-release" | "requires-decommission" | "rejected" | "failed" | "invalid"
/** What a service answers its customer for an ensure's outcome (docs/outcomes.md). */
export type CustomerAnswer = "proceed" | "wait" | "quotaExceeded" | "accessDenied" | "needsReauth" | "noCredential" | "deadlineExceeded" | "configurationFault"
/** The exact error codes of the contract (the families upstream<status> and an unforeseen
 * failure's kind come on top: an outcome's error_code stays a string). */
export type KnownErrorCode = "orgPoolExhausted" | "brandAiLimit" | "tieredPrompts" | "accessDenied" | "needsReauth" | "noCredential" | "credentialUnreadable" | "workspaceBusy" | "settleTimeout" | "outOfTime" | "rateLimited" | "upstreamUnavailable" | "imsUnavailable" | "imsClientRefused" | "semrushScopeMissing" | "credentialStoreUnavailable" | "noBoundCredential" | "ledgerUnavailable" | "ledgerConflict" | "ledgerRecordUnreadable" | "groupBlocked" | "finalReceiveUnfinished" | "receivesExhausted" | "requestIdConflict" | "parentMismatch" | "invalidMessage"
/** "yes", "no" or "maybe": whether anything was applied, whether the worker retried it. */
export type Applied = "yes" | "no" | "maybe"
/** The callers' contract table (src/outcome-table.js). */
export interface OutcomeTable {
  about: string
  version: number
  answers: ReadonlyArray<{ answer: CustomerAnswer; http_status: number | null; says: string;
    meaning: string; python_error: string | null; node_error: string | null }>
  statuses: ReadonlyArray<{ status: OutcomeStatus; kinds: ReadonlyArray<string>; meaning: string;
    applied: Applied; answer: CustomerAnswer | "byCode"; unknown_code_answer: CustomerAnswer | null }>
  codes: ReadonlyArray<{ code: string; pattern: string | null; example: string | null;
    statuses: ReadonlyArray<OutcomeStatus>; kinds: ReadonlyArray<string>; meaning: string;
    applied: Applied; retried: Applied; answer: CustomerAnswer }>
}
