// Contract: the upstream's published IMS client (@adobe/spacecat-shared-ims-client, a dev
// dependency) talks to our simulator unchanged: it sends multipart/form-data to
// `https://${IMS_HOST}` (a bare host), reads IMS's answer fields, and sees IMS's refusals.
// The simulator serves HTTPS with a certificate made here; the client runs in a child process
// that trusts exactly that certificate (NODE_EXTRA_CA_CERTS).
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ROOT } from './support/repo.js';

const run = promisify(execFile);
const CLI = process.env.SERENITY_ALLOCATOR_CLI ?? `${ROOT}.venv/bin/serenity-allocator`;
const SCENARIO = new URL('./support/upstream-ims-scenario.js', import.meta.url).pathname;

describe('the upstream IMS client against the simulator', () => {
  let dir;
  let simulator;
  let host;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'upstream-ims-'));
    await run('openssl', [
      'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
      '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'),
    ], { timeout: 30_000 });
    simulator = spawn(CLI, [
      'simulator', '--port', '0', '--tls-cert', join(dir, 'cert.pem'), '--tls-key', join(dir, 'key.pem'),
    ], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    host = await new Promise((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`simulator not up:\n${out}`)), 60_000);
      simulator.stdout.on('data', (chunk) => {
        out += chunk;
        const listening = /listening on https:\/\/(\S+) /.exec(out);
        if (listening) {
          clearTimeout(timer);
          resolve(listening[1]);
        }
      });
      simulator.once('exit', (code) => reject(new Error(`simulator exited with ${code}:\n${out}`)));
    });
  });

  after(async () => {
    if (simulator && simulator.exitCode === null) {
      const exited = new Promise((resolve) => { simulator.once('exit', resolve); });
      simulator.kill('SIGTERM');
      await exited;
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('mints, exchanges, rolls and invalidates, and meets each refusal IMS gives', async () => {
    // Given the published client, unchanged, configured with a bare IMS_HOST
    assert.match(host, /^127\.0\.0\.1:\d+$/);
    const { stdout } = await run(process.execPath, [SCENARIO, host], {
      cwd: new URL('..', import.meta.url).pathname,
      env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, 'cert.pem') },
      timeout: 60_000,
    });
    const report = JSON.parse(stdout);

    // Then each call was answered as IMS answers it (fields and types as the client reads them)
    assert.deepEqual(report.mint, { token_type: 'promise_token', expires_in: 3600 });
    assert.deepEqual(report.exchange, {
      token_type: 'access_token', expires_in: 300, promise_token_expires_in: 3600, rolled: true,
    });
    assert.deepEqual(report.roll, { rolled: true, fresh_access: true });
    // And the refusals: a spent promise and a wrong pair are 401s; the wrong pair did not
    // touch the promise, which the right pair then exchanges
    assert.deepEqual(report.spent, { ok: false, status: 401, message: null });
    assert.deepEqual(report.wrong_pair, { ok: false, status: 401, message: null });
    assert.deepEqual(report.after_wrong_pair, { ok: true, value: 'access_token' });
    // And an invalidated chain is dead (its token refused at exchange)
    assert.deepEqual(report.invalidate, { ok: true, value: 401 });
    // And an unknown token cannot be invalidated (400), a dead user token cannot mint (401)
    assert.deepEqual(report.invalidate_unknown, { ok: false, status: 400, message: null });
    assert.deepEqual(report.mint_dead_user, { ok: false, status: 401, message: null });
    // And the simulator saw every call the client made as the multipart form it sent: none
    // answered "bad form"
    assert.deepEqual(report.calls, [
      ['ims_mint', 200],
      ['ims_exchange', 200],
      ['ims_exchange', 200],
      ['ims_exchange', 401],
      ['ims_exchange', 401],
      ['ims_exchange', 200],
      ['ims_invalidate', 200],
      ['ims_exchange', 401],
      ['ims_invalidate', 400],
      ['ims_mint', 401],
    ]);
  });
});
