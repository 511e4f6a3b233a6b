// Message v1, as docs/schemas/allocation-request-v1.schema.json states it: the same patterns
// and bounds, checked before anything is sent (no schema validator at run time). The two
// cross-field rules the schema cannot state (group id = workspace id, parent != child) are
// kept by construction: the group id IS the workspace id, and buildEnsure refuses a parent
// equal to the child.
import { randomUUID } from 'node:crypto';

/** The upstream's id alphabet (no '.', so never a '.' or '..' path segment). */
export const WORKSPACE_ID_PATTERN = /^[A-Za-z0-9_-]{1,128}$/;
/** SQS's MessageDeduplicationId alphabet and length: printable ASCII, 1 to 128. */
export const REQUEST_ID_PATTERN = /^[!-~]{1,128}$/;
/** Org, brand and run labels: the same alphabet as request ids. */
export const LABEL_PATTERN = REQUEST_ID_PATTERN;
/** The largest need, ceiling or floor per dimension. */
export const MAX_UNITS_PER_DIMENSION = 1_000_000;
const DIMENSIONS = ['projects', 'prompts'];
const SOURCES = ['service', 'sweep', 'reclaim'];

/** An argument breaks the message contract; `field` names it (a dotted path). */
export class ContractError extends Error {
  /** @param {string} field @param {string} problem */
  constructor(field, problem) {
    super(`${field}: ${problem}`);
    this.name = 'ContractError';
    this.field = field;
  }
}

function checkString(field, value, pattern, optional = false) {
  if (optional && (value === undefined || value === null)) return;
  if (typeof value !== 'string' || !pattern.test(value)) {
    throw new ContractError(field, `must match ${pattern.source}`);
  }
}

function checkTotals(field, totals, { nullable }) {
  if (totals === undefined || totals === null) return undefined;
  if (typeof totals !== 'object' || Array.isArray(totals)) {
    throw new ContractError(field, 'must be an object of projects and prompts');
  }
  const out = {};
  for (const [dim, value] of Object.entries(totals)) {
    if (!DIMENSIONS.includes(dim)) throw new ContractError(`${field}.${dim}`, 'unknown dimension');
    if (value === undefined || (nullable && value === null)) continue;
    if (!Number.isInteger(value) || value < 0 || value > MAX_UNITS_PER_DIMENSION) {
      throw new ContractError(`${field}.${dim}`, `must be an integer 0..${MAX_UNITS_PER_DIMENSION}`);
    }
    out[dim] = value;
  }
  return out;
}

function labels(body, { orgId, brandId }) {
  checkString('org_id', orgId, LABEL_PATTERN, true);
  checkString('brand_id', brandId, LABEL_PATTERN, true);
  if (orgId != null) body.org_id = orgId;
  if (brandId != null) body.brand_id = brandId;
  return body;
}

/** A fresh request id (a UUID: inside the deduplication alphabet). */
export function newRequestId() {
  return randomUUID();
}

/**
 * Build and check one ensure (message v1). Drafts are counted unless `includeDrafted` is
 * false (the write gate meters used + drafted + batch).
 * @param {import("../types/index.js").EnsureInput} input
 * @returns {import('../types/contract.js').EnsureRequest}
 */
export function buildEnsure({
  workspaceId, parentWorkspaceId, need, includeDrafted = true, ceiling, orgId, brandId,
  requestId = newRequestId(),
}) {
  checkString('request_id', requestId, REQUEST_ID_PATTERN);
  checkString('workspace_id', workspaceId, WORKSPACE_ID_PATTERN);
  checkString('parent_workspace_id', parentWorkspaceId, WORKSPACE_ID_PATTERN);
  if (parentWorkspaceId === workspaceId) {
    throw new ContractError('parent_workspace_id', 'must differ from workspace_id');
  }
  if (typeof includeDrafted !== 'boolean') {
    throw new ContractError('include_drafted', 'must be a boolean');
  }
  const body = {
    version: 1, kind: 'ensure', request_id: requestId, workspace_id: workspaceId,
    parent_workspace_id: parentWorkspaceId,
    need: { projects: 0, prompts: 0, ...checkTotals('need', need, { nullable: false }) },
    include_drafted: includeDrafted,
  };
  const cap = checkTotals('ceiling', ceiling, { nullable: true });
  if (cap !== undefined) body.ceiling = cap;
  return labels(body, { orgId, brandId });
}

/**
 * Build and check one release (message v1). Without a floor the worker keeps one block per
 * dimension.
 * @param {import('../types/index.js').ReleaseInput} input
 * @returns {import('../types/contract.js').ReleaseRequest}
 */
export function buildRelease({
  workspaceId, floor, source = 'service', runId, orgId, brandId, requestId = newRequestId(),
}) {
  checkString('request_id', requestId, REQUEST_ID_PATTERN);
  checkString('workspace_id', workspaceId, WORKSPACE_ID_PATTERN);
  if (!SOURCES.includes(source)) throw new ContractError('source', `must be one of ${SOURCES}`);
  checkString('run_id', runId, LABEL_PATTERN, true);
  const body = { version: 1, kind: 'release', request_id: requestId, workspace_id: workspaceId, source };
  const kept = checkTotals('floor', floor, { nullable: false });
  if (kept !== undefined) body.floor = { projects: 0, prompts: 0, ...kept };
  if (runId != null) body.run_id = runId;
  return labels(body, { orgId, brandId });
}

/**
 * The SendMessage parameters of one message: group id = workspace id, deduplication id =
 * request id, body = the message as JSON.
 * @param {{workspace_id: string, request_id: string}} message
 */
export function sqsEntry(message) {
  return {
    MessageBody: JSON.stringify(message),
    MessageGroupId: message.workspace_id,
    MessageDeduplicationId: message.request_id,
  };
}
