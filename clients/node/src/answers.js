// The callers' contract, read from its table (./outcome-table.js, generated from
// src/serenity_allocator/contract/outcomes.json): what a service answers for an ensure's
// outcome. The same reading as the Python write guard's `answer_of`.
import { OUTCOME_TABLE } from './outcome-table.js';

const PATTERNS = OUTCOME_TABLE.codes
  .filter((row) => row.pattern)
  .map((row) => ({ row, pattern: new RegExp(row.pattern) }));

/** The table's row for `code`: its exact row first, else the first pattern that matches. */
export function codeRow(code) {
  const exact = OUTCOME_TABLE.codes.find((row) => !row.pattern && row.code === code);
  return exact ?? PATTERNS.find(({ pattern }) => pattern.test(code))?.row ?? null;
}

/**
 * What the contract answers for an ensure's outcome: 'proceed' (the room is there), 'wait'
 * (neither applied nor refused: an unknown status) or a refusal's answer ('quotaExceeded',
 * 'deadlineExceeded', 'accessDenied', 'needsReauth', 'noCredential', 'configurationFault').
 * @param {{status: string, error_code?: string | null}} outcome
 * @returns {import('../types/contract.js').CustomerAnswer}
 */
export function answerOf(outcome) {
  const row = OUTCOME_TABLE.statuses.find((status) => status.status === outcome.status);
  if (!row) return 'wait';
  if (row.answer !== 'byCode') return row.answer;
  const code = typeof outcome.error_code === 'string' && outcome.error_code ? outcome.error_code : null;
  return (code && codeRow(code)?.answer) || row.unknown_code_answer;
}
