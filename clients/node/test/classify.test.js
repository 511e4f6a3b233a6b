// The classifier on the fixtures the Python tests share (tests/fixtures).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isMeteredQuota, modelChangeNeed } from '../src/index.js';
import { readJson } from './support/repo.js';

describe('isMeteredQuota', () => {
  for (const { name, status, body, metered_quota: expected } of readJson('tests/fixtures/metered-quota-classifier.json').cases) {
    it(`${name}: ${expected}`, () => {
      assert.equal(isMeteredQuota(status, body), expected);
    });
  }
});

describe('modelChangeNeed', () => {
  it('adding models re-meters the published prompts; a swap or a removal needs nothing', () => {
    assert.deepEqual(modelChangeNeed(40, ['a'], ['a', 'b', 'c']), { projects: 0, prompts: 80 });
    assert.deepEqual(modelChangeNeed(40, ['a', 'b'], ['a', 'c']), { projects: 0, prompts: 0 });
    assert.deepEqual(modelChangeNeed(40, ['a', 'b'], ['a']), { projects: 0, prompts: 0 });
  });
});
