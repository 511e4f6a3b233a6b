// One guarded write into the write gate's disguised 405, as a service would make it, for the
// Python alarm test (tests/unit/write_guard/test_enforcement_alarm_reach.py): the guard's EMF
// lines go to stdout, where Lambda would ship them. The child is full and no ensure is applied, so every
// attempt meets the 405 and the cycle ends exhausted. Time is injected: nothing waits.
// Env: WRITE_URL (the gate), CHILD, ENVIRONMENT, SERVICE.
import { EmfQuotaRetryRecorder, WriteGuard, WriteQuotaExhaustedError } from '../../src/index.js';

const { WRITE_URL, CHILD, ENVIRONMENT, SERVICE } = process.env;
let now = 0;
const guard = new WriteGuard({
  producer: { enqueueEnsure: async () => 'ens-1' }, workspaceId: CHILD, parentWorkspaceId: 'master',
  recorder: new EmfQuotaRetryRecorder(ENVIRONMENT, { service: SERVICE }),
  clock: () => now, sleep: async (s) => { now += s; }, logger: { warn() {} },
});
try {
  await guard.write(async () => {
    const answer = await fetch(`${WRITE_URL}/v1/workspaces/${CHILD}/prompts`, {
      method: 'POST', headers: { authorization: 'Bearer tok', 'content-type': 'application/json' },
      body: JSON.stringify({ count: 50 }),
    });
    return { status: answer.status, body: await answer.text() };
  }, { need: { prompts: 50 }, site: 'prompts.create' });
} catch (error) {
  if (!(error instanceof WriteQuotaExhaustedError)) throw error;
}
