// Start `serenity-allocator local up` (moto + simulator + consumer processes) for a test and
// read what it prints: the same lines a developer copies into a service's environment.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { ROOT } from './repo.js';

const CLI = process.env.SERENITY_ALLOCATOR_CLI ?? `${ROOT}.venv/bin/serenity-allocator`;
const READY = '# Ctrl-C to stop';

function unquote(value) {
  return value.startsWith("'") && value.endsWith("'") ? value.slice(1, -1).replaceAll("'\"'\"'", "'") : value;
}

/** Every `export A=B [C=D ...]` line before the handlers' block, and the described parts. */
export function parseLocalUp(text) {
  const service = {};
  const parts = {};
  const [guide] = text.split('# environment for the handlers');
  for (const line of guide.split('\n')) {
    if (line.startsWith('export ')) {
      for (const pair of line.slice('export '.length).split(' ')) {
        const at = pair.indexOf('=');
        service[pair.slice(0, at)] = unquote(pair.slice(at + 1));
      }
    }
    const described = /^# {3}(\S.*?)\s{2,}(\S.*)$/.exec(line);
    if (described) parts[described[1]] = described[2];
  }
  return { service, parts, text };
}

/**
 * Start the stack (`credentials`: the consumers' mode, `static` or `ims`; null passes no flag,
 * so `local up`'s own default, IMS, applies); resolves once it prints READY. `stop()` ends the
 * process it started.
 */
export async function startLocalStack({
  consumers = 1, enforcementLagMs = 1500, token, credentials = 'static', timeoutMs = 90_000,
}) {
  const child = spawn(CLI, [
    'local', 'up', '--consumers', String(consumers), '--enforcement-lag-ms', String(enforcementLagMs),
    '--token', token, ...(credentials === null ? [] : ['--credentials', credentials]),
  ], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (chunk) => { stderr += chunk; });
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`local up not ready in ${timeoutMs} ms:\n${stderr}`)), timeoutMs);
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
      if (stdout.includes(READY)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`local up exited with ${code}:\n${stderr}`));
    });
  });
  await ready;
  return {
    ...parseLocalUp(stdout),
    async stop() {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/** A control or write-gate call on the simulator; resolves to `{status, body}`. */
export async function simulator(origin, method, path, { body, token } = {}) {
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const answer = await fetch(`${origin}${path}`, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: answer.status, body: await answer.text() };
}
