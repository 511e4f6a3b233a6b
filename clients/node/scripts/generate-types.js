// Generate types/contract.d.ts from the checked-in JSON Schemas (docs/schemas) and the callers'
// contract table (src/serenity_allocator/contract/outcomes.json), and src/outcome-table.js from
// that table. Run by `serenity-allocator message-schema --write` or `npm run types`; a test
// fails on drift.
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { compile } from 'json-schema-to-typescript';

const root = fileURLToPath(new URL('../../../', import.meta.url));
export const TYPES_FILE = fileURLToPath(new URL('../types/contract.d.ts', import.meta.url));
export const TABLE_MODULE = fileURLToPath(new URL('../src/outcome-table.js', import.meta.url));
export const TABLE_FILE = `${root}src/serenity_allocator/contract/outcomes.json`;
const SCHEMAS = [
  ['allocation-request-v1.schema.json', 'AllocationRequest'],
  ['allocation-outcome-v1.schema.json', 'AllocationOutcome'],
  ['ledger-record-v1.schema.json', 'LedgerRecord'],
];

// Property titles would become one alias per property (and clash across schemas): inline them,
// so only the $defs (EnsureRequest, StrictTotals, ...) are named types.
function inlineProperties(node, isDefinition = false) {
  if (Array.isArray(node)) return node.map((child) => inlineProperties(child));
  if (node === null || typeof node !== 'object') return node;
  const out = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === 'title' && !isDefinition) continue;
    if (key === '$defs') {
      out.$defs = Object.fromEntries(
        Object.entries(value).map(([name, def]) => [name, inlineProperties(def, true)]),
      );
    } else {
      out[key] = inlineProperties(value);
    }
  }
  return out;
}

const union = (names) => names.map((name) => JSON.stringify(name)).join(' | ');

/** The contract table's names as types: statuses, customer answers, exact error codes. */
export async function renderTableTypes() {
  const table = JSON.parse(await readFile(TABLE_FILE, 'utf8'));
  return [
    '/** An outcome status of the callers\' contract (docs/outcomes.md). */',
    `export type OutcomeStatus = ${union(table.statuses.map((row) => row.status))}`,
    '/** What a service answers its customer for an ensure\'s outcome (docs/outcomes.md). */',
    `export type CustomerAnswer = ${union(table.answers.map((row) => row.answer))}`,
    '/** The exact error codes of the contract (the families upstream<status> and an unforeseen',
    ' * failure\'s kind come on top: an outcome\'s error_code stays a string). */',
    `export type KnownErrorCode = ${union(table.codes.filter((row) => !row.pattern).map((row) => row.code))}`,
    '/** "yes", "no" or "maybe": whether anything was applied, whether the worker retried it. */',
    'export type Applied = "yes" | "no" | "maybe"',
    '/** The callers\' contract table (src/outcome-table.js). */',
    'export interface OutcomeTable {',
    '  about: string',
    '  version: number',
    '  answers: ReadonlyArray<{ answer: CustomerAnswer; http_status: number | null; says: string;',
    '    meaning: string; python_error: string | null; node_error: string | null }>',
    '  statuses: ReadonlyArray<{ status: OutcomeStatus; kinds: ReadonlyArray<string>; meaning: string;',
    '    applied: Applied; answer: CustomerAnswer | "byCode"; unknown_code_answer: CustomerAnswer | null }>',
    '  codes: ReadonlyArray<{ code: string; pattern: string | null; example: string | null;',
    '    statuses: ReadonlyArray<OutcomeStatus>; kinds: ReadonlyArray<string>; meaning: string;',
    '    applied: Applied; retried: Applied; answer: CustomerAnswer }>',
    '}',
    '',
  ].join('\n');
}

/** src/outcome-table.js: the contract table as a frozen module (the package ships no JSON). */
export async function renderTableModule() {
  const table = JSON.parse(await readFile(TABLE_FILE, 'utf8'));
  return [
    '// Generated from src/serenity_allocator/contract/outcomes.json by `npm run types`; do not',
    '// edit by hand (a test fails on drift). docs/outcomes.md is the same table, for reading.',
    'const freeze = (node) => {',
    '  if (node && typeof node === \'object\') Object.values(node).forEach(freeze);',
    '  return Object.freeze(node);',
    '};',
    '',
    `/** @type {import('../types/contract.js').OutcomeTable} */`,
    `export const OUTCOME_TABLE = freeze(${JSON.stringify(table, null, 2)});`,
    '',
  ].join('\n');
}

export async function renderTypes() {
  const parts = ['// Generated from docs/schemas by `npm run types`; do not edit by hand.\n'];
  const seen = new Set();
  for (const [file, name] of SCHEMAS) {
    const schema = JSON.parse(await readFile(`${root}docs/schemas/${file}`, 'utf8'));
    const ts = await compile({ ...inlineProperties(schema, true), title: name }, name, {
      bannerComment: '', additionalProperties: false, format: false, strictIndexSignatures: true,
    });
    // Each schema carries its own $defs: keep the first declaration of a shared name.
    for (const block of ts.split(/\n(?=export )/)) {
      const declared = /^export (?:interface|type) (\w+)/.exec(block.trim())?.[1];
      if (declared && seen.has(declared)) continue;
      if (declared) seen.add(declared);
      parts.push(`${block.trim()}\n`);
    }
  }
  parts.push(await renderTableTypes());
  return parts.join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await writeFile(TYPES_FILE, await renderTypes());
  console.log(`wrote ${TYPES_FILE}`);
  await writeFile(TABLE_MODULE, await renderTableModule());
  console.log(`wrote ${TABLE_MODULE}`);
}
