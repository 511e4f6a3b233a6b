// The client is a guest in its caller's process: a service's own Powertools Metrics, its
// globals and its environment are exactly as they were after the client met a disguised 405,
// and the client's own lines (the classifier's verdict, the recovery cycle) carry the
// deployment's environment and the caller's service name.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MetricUnit, Metrics } from '@aws-lambda-powertools/metrics';
import { EmfQuotaRetryRecorder, GuardPolicy, WriteGuard, isMeteredQuota } from '../src/index.js';
import { readJson } from './support/repo.js';

const DISGUISED_405 = readJson('tests/fixtures/metered-quota-classifier.json').cases
  .find((c) => c.metered_quota && c.status === 405).body;
const CALLER_TIMESTAMP = 1_780_000_000_000;

// Everything written to stdout while `action` runs, as parsed JSON lines.
async function stdoutLines(action) {
  const write = process.stdout.write;
  const lines = [];
  process.stdout.write = (chunk, ...rest) => {
    for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
    const callback = rest.find((arg) => typeof arg === 'function');
    if (callback) callback();
    return true;
  };
  try {
    await action();
  } finally {
    process.stdout.write = write;
  }
  return lines;
}

function callerMetrics() {
  const metrics = new Metrics({
    namespace: 'BrandsApp', serviceName: 'brands', defaultDimensions: { Environment: 'blue' },
  });
  metrics.addDimension('Tier', 'gold');
  metrics.addMetric('PromptsCreated', MetricUnit.Count, 3);
  metrics.setTimestamp(CALLER_TIMESTAMP);
  return metrics;
}

const CALLER_LINE = {
  _aws: {
    Timestamp: CALLER_TIMESTAMP,
    CloudWatchMetrics: [{
      Namespace: 'BrandsApp',
      Dimensions: [['service', 'Environment', 'Tier']],
      Metrics: [{ Name: 'PromptsCreated', Unit: 'Count' }],
    }],
  },
  service: 'brands',
  Environment: 'blue',
  Tier: 'gold',
  PromptsCreated: 3,
};

function guardedWrite(recorder, answers) {
  let now = 0;
  let calls = 0;
  const guard = new WriteGuard({
    producer: { enqueueEnsure: async () => 'ens-1' }, workspaceId: 'child-1', parentWorkspaceId: 'master-1',
    policy: new GuardPolicy(), recorder, clock: () => now, sleep: async (s) => { now += s; },
    logger: { warn() {} },
  });
  const call = async () => answers[Math.min(calls++, answers.length - 1)];
  return guard.write(call, { need: { prompts: 3 }, site: 'prompts.create' });
}

describe('a good guest', () => {
  it("leaves the caller's Powertools metrics, globals and environment as they were", async () => {
    // Given a service's own Powertools Metrics, with its own Environment and a dimension
    const env = { ...process.env };
    const globals = Object.getOwnPropertyNames(globalThis).sort();
    const consoleLog = console.log;
    const listeners = process.listenerCount('exit') + process.listenerCount('uncaughtException');
    const metrics = callerMetrics();

    // When the client classifies a disguised 405 and a guarded write recovers from one,
    // through the recorder the service built once, printing to stdout (the default)
    const ours = await stdoutLines(async () => {
      assert.equal(isMeteredQuota(405, DISGUISED_405), true);
      const recorder = new EmfQuotaRetryRecorder('prod', { service: 'brands', clockMs: () => 7 });
      const answer = await guardedWrite(recorder, [{ status: 405, body: DISGUISED_405 }, { status: 201, body: '{}' }]);
      assert.equal(answer.status, 201);
    });
    const theirs = await stdoutLines(() => metrics.publishStoredMetrics());

    // Then the service's metric line is exactly what it would have been
    assert.deepEqual(theirs, [CALLER_LINE]);
    // And nothing global moved
    assert.deepEqual({ ...process.env }, env);
    assert.deepEqual(Object.getOwnPropertyNames(globalThis).sort(), globals);
    assert.equal(console.log, consoleLog);
    assert.equal(process.listenerCount('exit') + process.listenerCount('uncaughtException'), listeners);
    // And the client's own lines: the 405's verdict and the cycle, Environment=prod, the
    // caller's service a property
    const directive = (name, own) => ({
      Timestamp: 7,
      CloudWatchMetrics: [{
        Namespace: 'SerenityAllocator', Dimensions: [['Environment', ...own]], Metrics: [{ Name: name, Unit: 'Count' }],
      }],
    });
    assert.deepEqual(ours, [
      {
        _aws: directive('MeteredQuotaClassifier', ['Matched']),
        Environment: 'prod', Matched: 'true', service: 'brands', MeteredQuotaClassifier: 1,
      },
      {
        _aws: directive('QuotaRetryOutcome', ['Outcome', 'Site']),
        Environment: 'prod', Outcome: 'recovered', Site: 'prompts.create', service: 'brands', QuotaRetryOutcome: 2,
      },
    ]);
  });

  it('a caller metrics line made without the client is the same line', async () => {
    // The control: the expected line is Powertools' own, not one the client shaped
    assert.deepEqual(await stdoutLines(() => callerMetrics().publishStoredMetrics()), [CALLER_LINE]);
  });
});

describe('the classifier verdict', () => {
  it('is recorded on every 405 a guarded write meets, and on nothing else', async () => {
    const verdicts = [];
    const recorder = { quotaVerdict: (m) => verdicts.push(m), record() {}, rollbackFailed() {} };
    await guardedWrite(recorder, [{ status: 405, body: DISGUISED_405 }, { status: 405, body: DISGUISED_405 }, { status: 200, body: '{}' }]);
    await guardedWrite(recorder, [{ status: 405, body: '{"message": "Method Not Allowed"}' }]);
    await guardedWrite(recorder, [{ status: 422, body: 'quota' }]);
    assert.deepEqual(verdicts, [true, true, false]);
  });

  it('a recorder without quotaVerdict (written before it) still gets its cycles', async () => {
    const cycles = [];
    await guardedWrite({ record: (...args) => cycles.push(args) }, [{ status: 405, body: DISGUISED_405 }, { status: 200, body: '{}' }]);
    assert.deepEqual(cycles, [['recovered', 2, 'prompts.create']]);
  });

  for (const [environment, options, named] of [['', { service: 'brands' }, 'environment'], ['prod', {}, 'service'], ['prod', { service: ' ' }, 'service']]) {
    it(`the recorder refuses a blank ${named}`, () => {
      assert.throws(() => new EmfQuotaRetryRecorder(environment, options), new RegExp(`^TypeError: EmfQuotaRetryRecorder: ${named} must be a non-blank string$`));
    });
  }
});
