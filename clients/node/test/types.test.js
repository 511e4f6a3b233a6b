// The TypeScript declarations compile, strict, against a file that uses the API.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { it } from 'node:test';
import { promisify } from 'node:util';

it('types/index.d.ts and types/contract.d.ts compile under tsc --strict', async () => {
  const tsc = new URL('../node_modules/typescript/bin/tsc', import.meta.url).pathname;
  const { stdout } = await promisify(execFile)(process.execPath, [
    tsc, '--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext',
    '--target', 'es2022', '--skipLibCheck', 'false', '--types', 'node', 'test/types-usage.ts',
  ], { cwd: new URL('..', import.meta.url).pathname }).catch((error) => {
    assert.fail(`tsc failed:\n${error.stdout}${error.stderr}`);
  });
  assert.equal(stdout, '');
});
