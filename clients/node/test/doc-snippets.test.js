// Every shell and JS block of the docs a caller or an operator reads, against `local up` in IMS
// mode (its default, as deployed): a block marked `<!-- snippet: NAME -->` runs here verbatim;
// every other one is marked `<!-- needs: deployed|fragment|background|make -->` and is checked
// for syntax (`sh -n`, `node --check`). A block with neither marker fails the first test.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ReceiveMessageCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { OutcomeReader } from '../src/index.js';
import { ROOT } from './support/repo.js';
import { simulator, startLocalStack } from './support/stack.js';

const run = promisify(execFile);

export const DOCS = [
  'README.md', 'clients/node/README.md', 'docs/calling.md', 'docs/local-stack.md', 'docs/credentials.md',
  'docs/operating.md',
  ...readdirSync(`${ROOT}docs/runbooks`).filter((name) => name.endsWith('.md')).map((name) => `docs/runbooks/${name}`),
];
const FENCE = /^```(sh|bash|shell|js|javascript|mjs)\s*$/;
const MARKER = /^<!-- (?:snippet: ([a-z0-9-]+)|needs: (deployed|fragment|background|make)) -->$/;
/** Every snippet this file runs, by name (each runner below takes its blocks from here). */
const RUN_HERE = [
  'local-seed', 'local-user', 'mint-promise', 'write-credential-record', 'send-ensure', 'read-outcome',
  'local-fault', 'local-redrive', 'node-install', 'readme-node',
];

/** Every shell or JS block of `path`: `{path, line, lang, code, name, needs}`. */
export function blocks(path) {
  const lines = readFileSync(`${ROOT}${path}`, 'utf8').split('\n');
  const found = [];
  let previous = '';
  for (let index = 0; index < lines.length; index += 1) {
    const fence = FENCE.exec(lines[index]);
    if (fence) {
      const end = lines.findIndex((line, at) => at > index && /^```\s*$/.test(line));
      assert.ok(end > index, `${path}:${index + 1}: unclosed block`);
      const marker = MARKER.exec(previous);
      found.push({
        path, line: index + 1, lang: fence[1], code: `${lines.slice(index + 1, end).join('\n')}\n`,
        name: marker?.[1] ?? null, needs: marker?.[2] ?? null, marker: previous,
      });
      index = end;
      previous = '';
    } else if (lines[index].trim() !== '') {
      previous = lines[index].trim();
    }
  }
  return found;
}

const ALL = DOCS.flatMap(blocks);
const snippet = (name) => {
  const [found] = ALL.filter((b) => b.name === name);
  assert.ok(found, `a block marked snippet: ${name}`);
  return found.code;
};

/** A JS block as a module `node --check` reads: its imports first, the rest in an async function. */
function asModule(code) {
  const imports = code.match(/^import[\s\S]*?from\s+['"][^'"]+['"];?\s*$/gm) ?? [];
  let body = code;
  for (const statement of imports) body = body.replace(statement, '');
  return `${imports.join('\n')}\nexport async function block() {\n${body}\n}\n`;
}

describe('the docs\' blocks', () => {
  it('every shell and JS block is run here or marked as needing something else', () => {
    const unmarked = ALL.filter((b) => !b.name && !b.needs).map((b) => `${b.path}:${b.line} (${b.marker})`);
    assert.deepEqual(unmarked, []);
    const names = ALL.filter((b) => b.name).map((b) => b.name);
    assert.deepEqual([...names].sort(), [...RUN_HERE].sort(), 'each snippet name once, each run here');
  });

  it('every marked block parses (sh -n, node --check)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'doc-blocks-'));
    try {
      for (const [index, block] of ALL.filter((b) => b.needs).entries()) {
        const where = `${block.path}:${block.line}`;
        if (block.lang === 'js' || block.lang === 'javascript' || block.lang === 'mjs') {
          const file = join(dir, `block-${index}.mjs`);
          writeFileSync(file, asModule(block.code));
          await run(process.execPath, ['--check', file]).catch((error) => assert.fail(`${where}: ${error.stderr}`));
        } else {
          await run('sh', ['-n', '-c', block.code]).catch((error) => assert.fail(`${where}: ${error.stderr}`));
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the docs\' snippets on `local up` (IMS mode)', () => {
  let stack;
  let env;
  let reader;
  let sqs;
  let emitter;

  before(async () => {
    stack = await startLocalStack({ consumers: 1, enforcementLagMs: 1500, token: 'doc-snippets-static', credentials: null });
    assert.match(stack.text, /# {3}credential mode {10}ims\n/);
    env = { ...process.env, ...stack.service, PATH: `${ROOT}.venv/bin:${process.env.PATH}` };
    const aws = { endpoint: env.AWS_ENDPOINT_URL, region: env.AWS_REGION, credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' } };
    reader = new OutcomeReader({ tableName: env.REQUEST_LEDGER_TABLE, dynamodb: new DynamoDBClient(aws) });
    sqs = new SQSClient(aws);
    const pair = JSON.parse((await simulator(env.SIMULATOR_ORIGIN, 'GET', '/__ims/clients')).body).emitter;
    emitter = {
      IMS_EMITTER_CLIENT_ID: pair.client_id, IMS_EMITTER_CLIENT_SECRET: pair.client_secret,
      IMS_PROMISE_DEFINITION_ID: pair.promise_definition_id,
    };
  });

  after(async () => {
    await stack?.stop();
  });

  /** Run named snippets, in order, in one POSIX shell; resolves to the stdout's lines. */
  async function shell(names, extra) {
    const { stdout } = await run('sh', ['-c', `set -e\n${names.map(snippet).join('')}`], {
      env: { ...env, ...extra }, timeout: 90_000,
    });
    return stdout.trim().split('\n');
  }

  /** The shell's variables for one new child and pool, with that awscli first on PATH. */
  const cliEnv = (child, master, awsCliDir) => ({ CHILD: child, MASTER: master, PATH: `${awsCliDir}:${env.PATH}` });

  const clis = [['v1', process.env.AWS_CLI_DIR], ['v2', process.env.AWS_CLI_V2_DIR]];
  for (const [version, dir] of clis) {
    it(`seed, a user, mint, the credential record, send, read: verbatim, with awscli ${version}`, { skip: dir ? false : `set AWS_CLI_${version === 'v1' ? '' : 'V2_'}DIR` }, async () => {
      const where = cliEnv(`c-doc-${version}`, `m-doc-${version}`, dir);
      const { stdout: cli } = await run(`${dir}/aws`, ['--version'], { env: { ...env, ...where } });
      assert.match(cli, version === 'v1' ? /^aws-cli\/1\./ : /^aws-cli\/2\./);
      const lines = await shell(
        ['local-seed', 'local-user', 'mint-promise', 'write-credential-record', 'send-ensure'], where,
      );
      assert.equal(lines[0], '{"seeded":2}');
      const requestId = lines.at(-1);
      assert.match(requestId, /^req-[0-9a-f]{32}$/);
      const outcome = await reader.waitForOutcome(requestId, 30);
      assert.deepEqual([outcome.status, outcome.workspace_id, outcome.totals_after.prompts >= 250], ['topped-up', where.CHILD, true]);
      const [read] = await shell(['read-outcome'], { ...where, REQUEST_ID: requestId });
      const [state, provisional, , stored] = read.split('\t');
      assert.deepEqual([state, provisional, JSON.parse(stored)], ['final', 'False', outcome]);
    });
  }

  it('a fault for the next transfer, as docs/local-stack.md shows it, then cleared', async () => {
    const [answer] = await shell(['local-fault'], { CHILD: 'c-doc-fault' });
    assert.deepEqual(JSON.parse(answer), [{ status: 503, count: 1, op: 'transfer', workspace_id: 'c-doc-fault', retry_after: null }]);
    const cleared = await simulator(env.SIMULATOR_ORIGIN, 'POST', '/__faults', { body: { fail_next: [] } });
    assert.deepEqual(JSON.parse(cleared.body).fail_next, []);
  });

  it('a request sent without its record ends noCredential; its record written, local redrive applies it', { skip: process.env.AWS_CLI_DIR ? false : 'set AWS_CLI_DIR' }, async () => {
    const where = cliEnv('c-doc-redrive', 'm-doc-redrive', process.env.AWS_CLI_DIR);
    await shell(['local-seed'], where);
    const requestId = 'req-doc-redrive-1';
    await sqs.send(new SendMessageCommand({
      QueueUrl: env.QUEUE_URL, MessageGroupId: where.CHILD, MessageDeduplicationId: requestId,
      MessageBody: JSON.stringify({ version: 1, kind: 'ensure', request_id: requestId, workspace_id: where.CHILD, parent_workspace_id: where.MASTER, need: { projects: 0, prompts: 100 } }),
    }));
    const refused = await reader.waitForOutcome(requestId, 30);
    assert.deepEqual([refused.status, refused.error_code, refused.dead_lettered], ['failed', 'noCredential', true]);

    // the operator's fix, verbatim: a user, a promise, the record for THIS request id, redrive
    await shell(['local-user', 'mint-promise', 'write-credential-record'], { ...where, REQUEST_ID: requestId });
    const report = JSON.parse((await shell(['local-redrive'], where)).join('\n'));
    assert.deepEqual(report.redriven.map((r) => [r.request_id, r.group_id]), [[requestId, where.CHILD]]);
    assert.match(report.redriven[0].deduplication_id, /^req-doc-redrive-1-redrive-[0-9a-f]{16}$/);

    let applied;
    for (let waited = 0; waited < 60 && applied?.status !== 'topped-up'; waited += 1) {
      applied = await reader.getOutcome(requestId);
      if (applied?.status !== 'topped-up') await new Promise((resolve) => { setTimeout(resolve, 500); });
    }
    assert.deepEqual([applied.status, applied.supersedes], ['topped-up', 'deadLettered']);
    const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({ QueueUrl: env.DLQ_URL, WaitTimeSeconds: 0 }));
    assert.deepEqual(Messages, []);
  });

  it('the Node client installs from a clone without node_modules, and the README\'s Node block runs in it', async () => {
    const clone = mkdtempSync(join(tmpdir(), 'clone-'));
    const service = mkdtempSync(join(tmpdir(), 'service-'));
    try {
      cpSync(`${ROOT}clients/node`, `${clone}/clients/node`, {
        recursive: true, filter: (source) => !source.includes('node_modules'),
      });
      await run('sh', ['-c', snippet('node-install')], {
        cwd: service, env: { ...env, SERENITY_ALLOCATOR: clone, npm_config_audit: 'false', npm_config_fund: 'false' }, timeout: 180_000,
      });
      const user = await simulator(env.SIMULATOR_ORIGIN, 'POST', '/__seed', {
        body: {
          workspaces: [
            { id: 'm-doc-node', ai: { projects: { used: 1, drafted: 0, total: 50 }, prompts: { used: 0, drafted: 0, total: 5000 } } },
            { id: 'c-doc-node', parent_id: 'm-doc-node', ai: { projects: { used: 1, drafted: 0, total: 1 }, prompts: { used: 0, drafted: 0, total: 0 } } },
          ],
        },
      });
      assert.equal(user.status, 200, user.body);
      const token = JSON.parse((await simulator(env.SIMULATOR_ORIGIN, 'POST', '/__ims/users', {
        body: { user: 'u-doc-node', workspaces: ['m-doc-node', 'c-doc-node'] },
      })).body).access_token;
      writeFileSync(`${service}/service.mjs`, snippet('readme-node'));
      const { stdout } = await run(process.execPath, ['service.mjs'], {
        cwd: service, timeout: 60_000,
        env: { ...env, ...emitter, ACCESS_TOKEN: token, CHILD: 'c-doc-node', MASTER: 'm-doc-node' },
      });
      assert.equal(stdout, 'topped-up\n');
    } finally {
      rmSync(clone, { recursive: true, force: true });
      rmSync(service, { recursive: true, force: true });
    }
  });
});
