// Generate types/contract.d.ts from the checked-in JSON Schemas (docs/schemas). Run by
// `serenity-allocator message-schema --write` or `npm run types`; a test fails on drift.
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { compile } from 'json-schema-to-typescript';

const root = fileURLToPath(new URL('../../../', import.meta.url));
export const TYPES_FILE = fileURLToPath(new URL('../types/contract.d.ts', import.meta.url));
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
  return parts.join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await writeFile(TYPES_FILE, await renderTypes());
  console.log(`wrote ${TYPES_FILE}`);
}
