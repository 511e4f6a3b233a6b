// The checked-in contract under ajv's defaults (Ajv2020, strict), the differential corpus,
// what the client builds, and the generated types.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import Ajv2020 from 'ajv/dist/2020.js';
import { buildEnsure, buildRelease, ContractError, sqsEntry } from '../src/index.js';
import { renderTypes, TYPES_FILE } from '../scripts/generate-types.js';
import { readJson, schema } from './support/repo.js';

const NAMES = ['allocation-request-v1', 'allocation-outcome-v1', 'ledger-record-v1'];
const compile = (name) => new Ajv2020({ strict: true, allErrors: true }).compile(schema(name));

function ajvAccepts(validate, body) {
  let value;
  try {
    value = JSON.parse(body);
  } catch {
    return false;
  }
  return validate(value);
}

describe('the schemas', () => {
  for (const name of NAMES) {
    it(`${name} compiles under Ajv2020 with every strict check throwing`, () => {
      assert.equal(typeof compile(name), 'function');
    });
  }
});

describe('the differential corpus', () => {
  const corpus = readJson('docs/schemas/allocation-request-v1.corpus.json');

  it('has over a thousand distinct bodies, accepted and refused', () => {
    assert.ok(corpus.length >= 1000, `${corpus.length} bodies`);
    assert.equal(new Set(corpus.map((entry) => entry.body)).size, corpus.length);
    assert.deepEqual(new Set(corpus.map((entry) => entry.accepted)), new Set([true, false]));
  });

  it('ajv gives the worker\'s verdict on every body (0 disagreements)', () => {
    const validate = compile('allocation-request-v1');
    const disagreements = corpus.filter((entry) => ajvAccepts(validate, entry.body) !== entry.accepted);
    assert.deepEqual(disagreements.map((entry) => entry.body), []);
  });
});

describe('what the client builds', () => {
  const validate = compile('allocation-request-v1');

  it('a default ensure is the body the Python producer sends (tests/fixtures/default-ensure.json)', () => {
    const { input, body } = readJson('tests/fixtures/default-ensure.json');
    const ensure = buildEnsure({
      workspaceId: input.workspace_id, parentWorkspaceId: input.parent_workspace_id,
      need: input.need, requestId: input.request_id,
    });
    assert.deepEqual(JSON.parse(sqsEntry(ensure).MessageBody), body);
  });

  it('an ensure is valid message v1, counting drafts by default, and its SQS ids follow it', () => {
    const ensure = buildEnsure({
      workspaceId: 'child-1', parentWorkspaceId: 'master-1', need: { prompts: 250 },
      ceiling: { prompts: 900 }, brandId: 'brand-7', requestId: 'req-1',
    });
    assert.ok(validate(ensure), JSON.stringify(validate.errors));
    assert.deepEqual(ensure, {
      version: 1, kind: 'ensure', request_id: 'req-1', workspace_id: 'child-1',
      parent_workspace_id: 'master-1', need: { projects: 0, prompts: 250 },
      include_drafted: true, ceiling: { prompts: 900 }, brand_id: 'brand-7',
    });
    assert.deepEqual(sqsEntry(ensure), {
      MessageBody: JSON.stringify(ensure), MessageGroupId: 'child-1', MessageDeduplicationId: 'req-1',
    });
  });

  it('a release is valid message v1 with a fresh UUID request id', () => {
    const release = buildRelease({ workspaceId: 'child-1', floor: { prompts: 10 } });
    assert.ok(validate(release), JSON.stringify(validate.errors));
    assert.match(release.request_id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.deepEqual(release.floor, { projects: 0, prompts: 10 });
  });

  const refusals = [
    [{ workspaceId: ' child-1' }, 'workspace_id'],
    [{ requestId: 'req 1' }, 'request_id'],
    [{ requestId: 'r'.repeat(129) }, 'request_id'],
    [{ parentWorkspaceId: 'child-1' }, 'parent_workspace_id'],
    [{ need: { prompts: 2.5 } }, 'need.prompts'],
    [{ need: { prompts: 1_000_001 } }, 'need.prompts'],
    [{ need: { models: 1 } }, 'need.models'],
    [{ includeDrafted: 'yes' }, 'include_drafted'],
    [{ brandId: 'br\u00e4nd' }, 'brand_id'],
  ];
  for (const [override, field] of refusals) {
    it(`refuses ${JSON.stringify(override)} naming ${field}`, () => {
      const input = { workspaceId: 'child-1', parentWorkspaceId: 'master-1', ...override };
      assert.throws(() => buildEnsure(input), (error) => error instanceof ContractError && error.field === field);
    });
  }
});

describe('the generated types', () => {
  it('types/contract.d.ts is what the schemas generate now (npm run types)', async () => {
    assert.equal(readFileSync(TYPES_FILE, 'utf8'), await renderTypes());
  });
});
