// Drives the upstream's published IMS client (@adobe/spacecat-shared-ims-client), unchanged,
// against the simulator: mint, exchange, roll, invalidate and the refusals. Run as a child
// process with NODE_EXTRA_CA_CERTS naming the simulator's certificate (the client always builds
// `https://` + its bare IMS_HOST); prints one JSON report on stdout. No token is printed: each
// step reports statuses, token types and lifetimes, and whether tokens differ.
import { ImsPromiseClient } from '@adobe/spacecat-shared-ims-client';

const [host] = process.argv.slice(2);
const origin = `https://${host}`;
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

async function control(method, path, body) {
  const answer = await fetch(`${origin}${path}`, {
    method, headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return answer.json();
}

/** `{ok: true, value}` or `{ok: false, status}` (the client's errors name the status only). */
async function attempt(call) {
  try {
    return { ok: true, value: await call() };
  } catch (error) {
    const status = /status: (\d{3})/.exec(error.message);
    return { ok: false, status: status ? Number(status[1]) : null, message: status ? null : error.message };
  }
}

const clients = await control('GET', '/__ims/clients');
const { access_token: login } = await control('POST', '/__ims/users', { user: 'upstream-user', workspaces: ['c1'] });
const env = {
  IMS_HOST: host,
  IMS_PROMISE_EMITTER_CLIENT_ID: clients.emitter.client_id,
  IMS_PROMISE_EMITTER_CLIENT_SECRET: clients.emitter.client_secret,
  IMS_PROMISE_EMITTER_DEFINITION_ID: clients.emitter.promise_definition_id,
  IMS_PROMISE_CONSUMER_CLIENT_ID: clients.consumer.client_id,
  IMS_PROMISE_CONSUMER_CLIENT_SECRET: clients.consumer.client_secret,
};
const emitter = ImsPromiseClient.createFrom({ env, log: quiet }, ImsPromiseClient.CLIENT_TYPE.EMITTER);
const consumer = ImsPromiseClient.createFrom({ env, log: quiet }, ImsPromiseClient.CLIENT_TYPE.CONSUMER);
const wrongConsumer = ImsPromiseClient.createFrom(
  { env: { ...env, IMS_PROMISE_CONSUMER_CLIENT_SECRET: 'rotated-away' }, log: quiet },
  ImsPromiseClient.CLIENT_TYPE.CONSUMER,
);

const report = {};
const minted = await emitter.getPromiseToken(login);
report.mint = { token_type: minted.token_type, expires_in: minted.expires_in };
const first = await consumer.exchangeToken(minted.promise_token);
report.exchange = {
  token_type: first.token_type,
  expires_in: first.expires_in,
  promise_token_expires_in: first.promise_token_expires_in,
  rolled: first.promise_token !== minted.promise_token,
};
const second = await consumer.exchangeToken(first.promise_token);
report.roll = { rolled: second.promise_token !== first.promise_token, fresh_access: second.access_token !== first.access_token };
report.spent = await attempt(() => consumer.exchangeToken(minted.promise_token));
report.wrong_pair = await attempt(() => wrongConsumer.exchangeToken(second.promise_token));
const third = await attempt(() => consumer.exchangeToken(second.promise_token));
report.after_wrong_pair = third.ok ? { ok: true, value: third.value.token_type } : third;
report.invalidate = await attempt(async () => {
  const live = third.value.promise_token;
  await consumer.invalidatePromiseToken(live);
  return (await attempt(() => consumer.exchangeToken(live))).status;
});
report.invalidate_unknown = await attempt(() => consumer.invalidatePromiseToken('sim-ims-pt-never-issued'));
report.mint_dead_user = await attempt(() => emitter.getPromiseToken('sim-ims-at-never-issued'));
const { calls } = await control('GET', '/__ims/calls');
report.calls = calls.map((call) => [call.op, call.status]);
process.stdout.write(JSON.stringify(report));
