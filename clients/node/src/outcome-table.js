// Generated from src/serenity_allocator/contract/outcomes.json by `npm run types`; do not
// edit by hand (a test fails on drift). docs/outcomes.md is the same table, for reading.
const freeze = (node) => {
  if (node && typeof node === 'object') Object.values(node).forEach(freeze);
  return Object.freeze(node);
};

/** @type {import('../types/contract.js').OutcomeTable} */
export const OUTCOME_TABLE = freeze({
  "about": "The callers' contract: every status and error code an outcome can carry, what it means, whether anything was applied, whether the worker retried it, and what a service answers its customer. The one source of truth: the outcome schema, docs/outcomes.md, the README's outcomes table, the Python and the Node guards and the Node types are generated from it or tested equal to it. Adding a code is one row in codes (exact codes before the pattern rows, which match in order).",
  "version": 1,
  "answers": [
    {
      "answer": "proceed",
      "http_status": null,
      "says": "the write goes ahead",
      "meaning": "The room is there, or the child needs none: the guard keeps retrying the write while the gate enforces the top-up (its lag), then answers quotaExceeded if the gate still refuses.",
      "python_error": null,
      "node_error": null
    },
    {
      "answer": "wait",
      "http_status": null,
      "says": "nothing yet",
      "meaning": "Not an ensure's answer (an unknown status, a release's status): neither applied nor refused. The guard keeps waiting as for a pending ensure, then answers deadlineExceeded at the deadline.",
      "python_error": null,
      "node_error": null
    },
    {
      "answer": "quotaExceeded",
      "http_status": 409,
      "says": "allocation exceeded",
      "meaning": "No room: the pool, the brand's ceiling or the tiered prompt shape refused the top-up. One customer answer whatever the code.",
      "python_error": "WriteQuotaExhaustedError",
      "node_error": "WriteQuotaExhaustedError"
    },
    {
      "answer": "accessDenied",
      "http_status": 403,
      "says": "you cannot reach this workspace",
      "meaning": "Semrush refused the requesting user on this child with a fresh token: a permission answer, never a quota one.",
      "python_error": "WriteAccessDeniedError",
      "node_error": "WriteAccessDeniedError"
    },
    {
      "answer": "needsReauth",
      "http_status": 401,
      "says": "sign in again",
      "meaning": "IMS refused the user's promise token: the user signs in again, the service mints a new promise and sends again.",
      "python_error": "WriteNeedsReauthError",
      "node_error": "WriteNeedsReauthError"
    },
    {
      "answer": "noCredential",
      "http_status": 401,
      "says": "authorize again",
      "meaning": "The request carried no usable user authority (never handed over, expired or scrubbed): hand the user's token over again and send again.",
      "python_error": "WriteNoCredentialError",
      "node_error": "WriteNoCredentialError"
    },
    {
      "answer": "deadlineExceeded",
      "http_status": 503,
      "says": "try again",
      "meaning": "Too slow, not out of room: the deadline ran out, or an infrastructure or transient failure ended the ensure. Answer with Retry-After, never 409.",
      "python_error": "WriteDeadlineExceededError",
      "node_error": "WriteDeadlineExceededError"
    },
    {
      "answer": "configurationFault",
      "http_status": 500,
      "says": "internal error",
      "meaning": "Ours, not the customer's: the service sent something the worker refuses (a wrong parent, a reused request id, an invalid message) or the upstream refused the call as such. Retrying does not help; page the owner.",
      "python_error": "WriteConfigurationError",
      "node_error": "WriteConfigurationError"
    }
  ],
  "statuses": [
    {
      "status": "hot-path",
      "kinds": [
        "ensure"
      ],
      "meaning": "The child already had the room: nothing was transferred.",
      "applied": "no",
      "answer": "proceed",
      "unknown_code_answer": null
    },
    {
      "status": "topped-up",
      "kinds": [
        "ensure"
      ],
      "meaning": "The child was topped up from the pool.",
      "applied": "yes",
      "answer": "proceed",
      "unknown_code_answer": null
    },
    {
      "status": "rightsized",
      "kinds": [
        "ensure"
      ],
      "meaning": "The child held more than its fair share of a tight pool: the surplus above this request's need and its share went back to the pool (the request's room is there).",
      "applied": "yes",
      "answer": "proceed",
      "unknown_code_answer": null
    },
    {
      "status": "topped-up-after-reclaim",
      "kinds": [
        "ensure"
      ],
      "meaning": "The child was topped up once surplus reclaimed from its siblings reached the pool.",
      "applied": "yes",
      "answer": "proceed",
      "unknown_code_answer": null
    },
    {
      "status": "unmetered",
      "kinds": [
        "ensure"
      ],
      "meaning": "The pool is not metered: the child needs no top-up, nothing was transferred.",
      "applied": "no",
      "answer": "proceed",
      "unknown_code_answer": null
    },
    {
      "status": "disabled",
      "kinds": [
        "ensure"
      ],
      "meaning": "Dynamic allocation is switched off in this deployment: nothing was transferred, the write meets the child's quota as it is.",
      "applied": "no",
      "answer": "proceed",
      "unknown_code_answer": null
    },
    {
      "status": "released",
      "kinds": [
        "release"
      ],
      "meaning": "The child's surplus went back to the pool.",
      "applied": "yes",
      "answer": "wait",
      "unknown_code_answer": null
    },
    {
      "status": "nothing-to-release",
      "kinds": [
        "release"
      ],
      "meaning": "The child held no surplus above its floor: nothing was transferred.",
      "applied": "no",
      "answer": "wait",
      "unknown_code_answer": null
    },
    {
      "status": "requires-decommission",
      "kinds": [
        "release"
      ],
      "meaning": "Only decommissioning the child would free more: nothing was transferred.",
      "applied": "no",
      "answer": "wait",
      "unknown_code_answer": null
    },
    {
      "status": "rejected",
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "Refused: the error code says why (no room, the user's authority, a busy child, a reused request id).",
      "applied": "no",
      "answer": "byCode",
      "unknown_code_answer": "deadlineExceeded"
    },
    {
      "status": "failed",
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "Ended without its change: the error code says why (the user's authority, infrastructure, the receives ran out).",
      "applied": "maybe",
      "answer": "byCode",
      "unknown_code_answer": "deadlineExceeded"
    },
    {
      "status": "invalid",
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The message breaks the contract: dead-lettered with its reason, nothing applied.",
      "applied": "no",
      "answer": "byCode",
      "unknown_code_answer": "configurationFault"
    }
  ],
  "codes": [
    {
      "code": "orgPoolExhausted",
      "pattern": null,
      "statuses": [
        "rejected"
      ],
      "kinds": [
        "ensure"
      ],
      "meaning": "The org pool has too few free units for the top-up (with sibling reclaim on, after waiting across receives for the surplus reclaimed from siblings).",
      "applied": "no",
      "retried": "maybe",
      "answer": "quotaExceeded",
      "example": null
    },
    {
      "code": "brandAiLimit",
      "pattern": null,
      "statuses": [
        "rejected"
      ],
      "kinds": [
        "ensure"
      ],
      "meaning": "The top-up would take the child above its brand's ceiling.",
      "applied": "no",
      "retried": "no",
      "answer": "quotaExceeded",
      "example": null
    },
    {
      "code": "tieredPrompts",
      "pattern": null,
      "statuses": [
        "rejected"
      ],
      "kinds": [
        "ensure"
      ],
      "meaning": "The child (or its pool) holds tiered prompt quota (daily and weekly): the allocator never sends it a flat prompts transfer.",
      "applied": "no",
      "retried": "no",
      "answer": "quotaExceeded",
      "example": null
    },
    {
      "code": "accessDenied",
      "pattern": null,
      "statuses": [
        "rejected"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "Semrush refused the requesting user on this child with a freshly exchanged token.",
      "applied": "no",
      "retried": "no",
      "answer": "accessDenied",
      "example": null
    },
    {
      "code": "needsReauth",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "IMS refused the user's promise token: dead-lettered; the user signs in again, a new promise is handed over, then a redrive runs it.",
      "applied": "no",
      "retried": "no",
      "answer": "needsReauth",
      "example": null
    },
    {
      "code": "noCredential",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "No usable credential record for the request (absent, expired, scrubbed or not decryptable): dead-lettered; a new hand-over and a redrive run it.",
      "applied": "no",
      "retried": "no",
      "answer": "noCredential",
      "example": null
    },
    {
      "code": "credentialUnreadable",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The request's credential record cannot be read (its ciphertext is not one our key made for this request, e.g. base64-encoded twice, or an attribute is malformed): ended on its first receive, dead-lettered, the record scrubbed; a correct hand-over and a redrive run it.",
      "applied": "no",
      "retried": "no",
      "answer": "noCredential",
      "example": null
    },
    {
      "code": "workspaceBusy",
      "pattern": null,
      "statuses": [
        "rejected"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The child stayed busy settling an earlier change through every receive.",
      "applied": "no",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "settleTimeout",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "A transfer was accepted but the child did not settle in time, on the last receive.",
      "applied": "maybe",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "outOfTime",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "Not enough of the invocation was left to start the call safely, on the last receive.",
      "applied": "no",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "rateLimited",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "Semrush kept answering 429 through the client's retries, on the last receive.",
      "applied": "no",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "upstreamUnavailable",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "Semrush could not be reached (connection error or timeout after retries), on the last receive; a transfer that timed out may have landed.",
      "applied": "maybe",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "imsUnavailable",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "IMS kept answering 429/5xx or could not be reached, on the last receive.",
      "applied": "no",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "imsClientRefused",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "IMS refused the deployment's own client pair (invalid_client: a wrong or rotated consumer secret), on the last receive: our configuration fault, not the user's. The user's promise is kept (neither invalidated nor scrubbed), so a redrive after the pair is fixed runs.",
      "applied": "no",
      "retried": "yes",
      "answer": "configurationFault",
      "example": null
    },
    {
      "code": "semrushScopeMissing",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "IMS exchanged the promise but the access token lacks the semrush scope (the deployment's IMS pair is not the one whose promise definition carries it), on the last receive: our configuration fault, told apart from a non-member before any Semrush call. The rolled promise is kept, so a redrive after the pair is fixed runs.",
      "applied": "no",
      "retried": "yes",
      "answer": "configurationFault",
      "example": null
    },
    {
      "code": "credentialStoreUnavailable",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The credentials table or its KMS key could not be read or written, on the last receive.",
      "applied": "no",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "noBoundCredential",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The worker refused a Semrush call with no request's user bound (IMS mode fails closed), on the last receive.",
      "applied": "no",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "ledgerUnavailable",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The request ledger could not be read or written, on the last receive.",
      "applied": "no",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "ledgerConflict",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The ledger refused a write because another delivery of the request wrote first, on the last receive.",
      "applied": "maybe",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "ledgerRecordUnreadable",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The request's ledger record does not parse: nothing applied or written over it, on the last receive.",
      "applied": "no",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "groupBlocked",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "Skipped behind a failed record of its child on its last receive: dead-lettered unapplied.",
      "applied": "no",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "finalReceiveUnfinished",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The last receive began (its provisional dead letter stored) and never finished: the function died or timed out.",
      "applied": "maybe",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "receivesExhausted",
      "pattern": null,
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The message reached the DLQ without a terminal outcome (recorded by dlq-audit): the worker never saw its last receive.",
      "applied": "maybe",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": null
    },
    {
      "code": "requestIdConflict",
      "pattern": null,
      "statuses": [
        "rejected"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The request id is already bound to another workspace or kind: nothing applied (a reused idempotency key).",
      "applied": "no",
      "retried": "no",
      "answer": "configurationFault",
      "example": null
    },
    {
      "code": "parentMismatch",
      "pattern": null,
      "statuses": [
        "invalid"
      ],
      "kinds": [
        "ensure"
      ],
      "meaning": "parent_workspace_id is not the child's parent upstream: dead-lettered before any transfer.",
      "applied": "no",
      "retried": "no",
      "answer": "configurationFault",
      "example": null
    },
    {
      "code": "invalidMessage",
      "pattern": null,
      "statuses": [
        "invalid"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "The body breaks message v1 (its request id could still be read): dead-lettered with its reason.",
      "applied": "no",
      "retried": "no",
      "answer": "configurationFault",
      "example": null
    },
    {
      "code": "upstream<4xx>",
      "pattern": "^upstream(400|403|404|405|409|410|413|415)$",
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "Semrush answered a status no retry fixes (400, 403, 404, 405, 409, 410, 413, 415); in IMS mode a 401 or 403 of the user is accessDenied instead.",
      "applied": "no",
      "retried": "no",
      "answer": "configurationFault",
      "example": "upstream404"
    },
    {
      "code": "upstream<status>",
      "pattern": "^upstream[0-9]{3}$",
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "Semrush kept answering another status (a 5xx, an unexpected 4xx), on the last receive; a transfer it answered so may have landed.",
      "applied": "maybe",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": "upstream502"
    },
    {
      "code": "<UnforeseenError>",
      "pattern": "^[A-Z][A-Za-z0-9_]*$",
      "statuses": [
        "failed"
      ],
      "kinds": [
        "ensure",
        "release"
      ],
      "meaning": "An unforeseen failure, named by its kind (e.g. MalformedResponseError), on the last receive: a bug or an answer breaking the documented shape.",
      "applied": "maybe",
      "retried": "yes",
      "answer": "deadlineExceeded",
      "example": "MalformedResponseError"
    }
  ]
});
