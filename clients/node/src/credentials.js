// Hand a request's user authority to the worker: its IMS promise token, KMS-encrypted, on the
// credentials table BEFORE the message is sent (docs/credentials.md, ADR 0016). The Python
// library's CredentialHandover, DynamoDbCredentialStore.put/discard and ImsClient.mint, in JS.
// No error, message or JSON of anything here holds a token or the emitter's secret: tokens
// and clients live in private fields, errors name request ids and AWS/IMS codes only.
import { DeleteItemCommand, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { EncryptCommand } from '@aws-sdk/client-kms';

export const PROMISE_TOKEN_PURPOSE = 'serenity-allocator/promise-token';
/** A record lives a day after its write (the table's TTL attribute `expires_at`). */
export const CREDENTIAL_TTL_S = 86_400;
/** KMS Encrypt's plaintext limit. */
export const MAX_TOKEN_BYTES = 4096;
/** The upstream's IMS client: at most two retries of a 429/5xx, 1 s then 2 s (`1 s x 2^n`). */
export const IMS_RETRY_DELAYS_S = Object.freeze([1, 2]);
/** +/-20 % on each of those delays; IMS's `Retry-After` wins when it is longer (the upstream's client). */
export const IMS_RETRY_JITTER = 0.2;
/** OAuth's codes for a refusal of the client pair itself: the deployment's configuration, never the user's. */
export const IMS_PAIR_REFUSALS = Object.freeze(['invalid_client', 'unauthorized_client']);
const TOKEN_PATH = '/ims/token/v4';
const CONDITION_FAILED = 'ConditionalCheckFailedException';
// Write only where no live token is held: a new request, a scrubbed one, or one past expiry.
const PUT_CONDITION = 'attribute_not_exists(request_id) OR attribute_not_exists(promise_token) OR expires_at <= :now';
const ERROR_CODE = /^[a-z_]{1,40}$/;
const stderrLogger = {
  warn(message, fields) {
    process.stderr.write(`${JSON.stringify({ level: 'WARNING', message, ...fields })}\n`);
  },
};

/** The encryption context the worker decrypts a request's token under, exactly. */
export function encryptionContext(requestId, workspaceId) {
  return { purpose: PROMISE_TOKEN_PURPOSE, request_id: requestId, workspace_id: workspaceId };
}

/** IMS refused the user's access token at mint (401/403): the user must log in again. */
export class NeedsReauthError extends Error {
  constructor() {
    super('IMS refused the access token (needsReauth): the user must log in again');
    this.name = 'NeedsReauthError';
    this.code = 'needsReauth';
  }
}

/**
 * IMS refused the EMITTER pair itself (`invalid_client`): a wrong or rotated secret of this
 * service's deployment. A configuration fault: never tell the user to sign in again.
 */
export class ImsClientRefusedError extends Error {
  constructor() {
    super("IMS refused this service's client pair (imsClientRefused): fix the emitter secret");
    this.name = 'ImsClientRefusedError';
    this.code = 'imsClientRefused';
  }
}

/** IMS answered 429/5xx or nothing, after the retries or at the deadline: try again later. */
export class ImsUnavailableError extends Error {
  constructor() {
    super('IMS could not mint a promise token in time (imsUnavailable)');
    this.name = 'ImsUnavailableError';
    this.code = 'imsUnavailable';
  }
}

/** IMS refused for a reason a retry cannot fix (a 400), or answered 2xx without a token. */
export class ImsRequestError extends Error {
  constructor(status, error) {
    super(`IMS mint answered ${status}${error ? ` (${error})` : ''}`);
    this.name = 'ImsRequestError';
    this.code = 'imsRequestRefused';
    this.status = status;
    this.error = error;
  }
}

/** The record could not be written (KMS or DynamoDB refused); `reason` is the AWS code. */
export class CredentialHandoverError extends Error {
  constructor(requestId, reason) {
    super(`credential for request ${requestId} not stored (${reason})`);
    this.name = 'CredentialHandoverError';
    this.requestId = requestId;
    this.reason = reason;
  }
}

function nonBlank(value, field) {
  if (typeof value !== 'string' || !value.trim()) throw new TypeError(`${field}: must be a non-blank string`);
  return value;
}

const awsCode = (error) => (typeof error?.name === 'string' && /^[A-Za-z.]{1,64}$/.test(error.name) ? error.name : 'error');

/**
 * Mints promise tokens from users' access tokens with the EMITTER pair (POST /ims/token/v4,
 * form-encoded, grant_type=promise), over global fetch. Redirects are never followed.
 */
export class ImsEmitter {
  #clientSecret;

  /**
   * @param {{host: string, clientId: string, clientSecret: string, promiseDefinitionId: string,
   *   timeoutMs?: number, deadlineMs?: number, sleep?: (s: number) => Promise<void>,
   *   clock?: () => number, jitter?: () => number}} options `host`: an origin, or a bare host
   *   (the upstream's `IMS_HOST`, always https); `timeoutMs` bounds one attempt (default 5000,
   *   as the Python client), `deadlineMs` one mint with its retries (default 10000); `clock` is
   *   in ms; `jitter` draws in [0, 1) for the retry jitter.
   */
  constructor({
    host, clientId, clientSecret, promiseDefinitionId, timeoutMs = 5000, deadlineMs = 10_000,
    sleep = (s) => new Promise((resolve) => { setTimeout(resolve, s * 1000); }),
    clock = () => performance.now(), jitter = Math.random,
  }) {
    this.origin = imsOrigin(host);
    this.clientId = nonBlank(clientId, 'clientId');
    this.#clientSecret = nonBlank(clientSecret, 'clientSecret');
    this.promiseDefinitionId = nonBlank(promiseDefinitionId, 'promiseDefinitionId');
    if (!(timeoutMs > 0) || !(deadlineMs > 0)) throw new TypeError('timeoutMs, deadlineMs: must be positive');
    this.timeoutMs = timeoutMs;
    this.deadlineMs = deadlineMs;
    this.sleep = sleep;
    this.clock = clock;
    this.jitter = jitter;
  }

  /** A promise token of the access token's user. Throws NeedsReauthError, ImsClientRefusedError, ImsUnavailableError, ImsRequestError. */
  async mint(accessToken) {
    const form = {
      client_id: this.clientId, client_secret: this.#clientSecret, grant_type: 'promise',
      promise_definition_id: this.promiseDefinitionId,
      authenticating_token: nonBlank(accessToken, 'credential.accessToken'),
    };
    const deadline = this.clock() + this.deadlineMs;
    for (let retry = 0; ; retry += 1) {
      const left = deadline - this.clock();
      if (left <= 0) throw new ImsUnavailableError();
      const { token, retryAfterS } = await this.#attempt(form, Math.min(this.timeoutMs, left));
      if (token !== null) return token;
      const base = IMS_RETRY_DELAYS_S[retry];
      if (base === undefined) throw new ImsUnavailableError();
      const pause = Math.max(base * (1 + IMS_RETRY_JITTER * (2 * this.jitter() - 1)), retryAfterS ?? 0);
      if (this.clock() + pause * 1000 >= deadline) throw new ImsUnavailableError();
      await this.sleep(pause);
    }
  }

  /** `{token}`; token null when worth retrying (no answer, 429, 5xx, with its Retry-After); otherwise throws. */
  async #attempt(form, timeoutMs) {
    let response;
    let body;
    try {
      response = await fetch(`${this.origin}${TOKEN_PATH}`, {
        method: 'POST', body: new URLSearchParams(form), redirect: 'manual',
        headers: { accept: 'application/json' }, signal: AbortSignal.timeout(timeoutMs),
      });
      body = await response.text();
    } catch {
      return { token: null }; // a transport failure or our timeout (fetch's errors carry no form field)
    }
    const { status } = response;
    if (status === 429 || (status >= 500 && status <= 599)) {
      return { token: null, retryAfterS: retryAfterS(response.headers.get('retry-after')) };
    }
    const parsed = parseObject(body);
    // Matched against our own constants: nothing of the answer is kept.
    if (status >= 400 && IMS_PAIR_REFUSALS.includes(parsed?.error)) throw new ImsClientRefusedError();
    if (status === 401 || status === 403) throw new NeedsReauthError();
    if (status < 200 || status >= 300) throw new ImsRequestError(status, errorCode(parsed, form));
    const token = parsed?.promise_token;
    if (typeof token !== 'string' || !token) throw new ImsRequestError(status, 'no_promise_token');
    return { token };
  }

  toJSON() {
    return { origin: this.origin, clientId: this.clientId, promiseDefinitionId: this.promiseDefinitionId };
  }
}

/** The delay-seconds form of `Retry-After`; null for none, an HTTP-date or garbage. */
function retryAfterS(value) {
  if (value === null || !/^\s*\d+(\.\d+)?\s*$/.test(value)) return null;
  return Number(value);
}

function imsOrigin(host) {
  let url;
  const text = nonBlank(host, 'ims.host').trim();
  try {
    // The upstream's IMS_HOST is a bare host (always https there).
    url = new URL(text.includes('://') ? text : `https://${text}`);
  } catch {
    throw new TypeError('ims.host: must be an origin like https://ims.example.com');
  }
  const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname);
  const bare = (url.pathname === '/' || url.pathname === '') && !url.search && !url.hash && !url.username && !url.password;
  if (!bare || !(url.protocol === 'https:' || (loopback && url.protocol === 'http:'))) {
    throw new TypeError('ims.host: must be an https origin (http only for loopback), no path or user-info');
  }
  return url.origin;
}

function parseObject(text) {
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

// IMS's short `error` code, unless it is anything else or holds a value we sent (could echo).
function errorCode(body, form) {
  const code = body?.error;
  if (typeof code !== 'string' || !ERROR_CODE.test(code)) return null;
  return Object.values(form).some((value) => code.includes(value) || value.includes(code)) ? null : code;
}

/** Exactly one of `{accessToken}` and `{promiseToken}`, non-blank. */
function checkedCredential(credential) {
  const given = ['accessToken', 'promiseToken'].filter((key) => credential?.[key] !== undefined);
  if (given.length !== 1) throw new TypeError('credential: give exactly one of accessToken and promiseToken');
  nonBlank(credential[given[0]], `credential.${given[0]}`);
  return given[0];
}

/**
 * Writes a request's promise token before its message is sent, and takes it back when the send
 * fails. Needs `dynamodb:PutItem`/`DeleteItem` on the table and `kms:Encrypt` (the managed
 * policy `ProducerCredentialsPolicyArn`); it never reads a record back.
 */
export class CredentialHandover {
  #kms;
  #dynamodb;
  #ims;

  /**
   * @param {{tableName: string, keyArn: string, kms: import('@aws-sdk/client-kms').KMSClient,
   *   dynamodb: import('@aws-sdk/client-dynamodb').DynamoDBClient,
   *   ims?: {mint(accessToken: string): Promise<string>} | null, timeoutMs?: number,
   *   wallClock?: () => number}} options `tableName`/`keyArn`: stack outputs
   *   CredentialsTableName/CredentialsKeyArn; `ims`: an ImsEmitter (needed for access tokens);
   *   `timeoutMs` bounds each AWS call (default 5000); `wallClock` is epoch seconds; `logger`
   *   hears of a record a failed send could not take back (default: JSON lines on stderr).
   */
  constructor({
    tableName, keyArn, kms, dynamodb, ims = null, timeoutMs = 5000, wallClock = () => Date.now() / 1000,
    logger = stderrLogger,
  }) {
    this.tableName = nonBlank(tableName, 'tableName');
    this.keyArn = nonBlank(keyArn, 'keyArn');
    this.#kms = kms;
    this.#dynamodb = dynamodb;
    this.#ims = ims;
    this.timeoutMs = timeoutMs;
    this.wallClock = wallClock;
    this.logger = logger;
  }

  /** Check a credential's shape (and that it can be minted) before anything is called. */
  check(credential) {
    if (checkedCredential(credential) === 'accessToken' && this.#ims === null) {
      throw new TypeError('credential.accessToken: this handover cannot mint (no ims emitter configured)');
    }
  }

  /**
   * Mint if needed, encrypt, write. Resolves to the receipt of what was written, or null when
   * the request already holds a live token (kept, never overwritten).
   */
  async write(requestId, workspaceId, credential) {
    this.check(credential);
    const token = credential.promiseToken ?? await this.#ims.mint(credential.accessToken);
    const plaintext = Buffer.from(token, 'utf8');
    if (plaintext.length > MAX_TOKEN_BYTES) throw new TypeError(`credential: the promise token is longer than ${MAX_TOKEN_BYTES} bytes`);
    const ciphertext = await this.#call(requestId, this.#kms, new EncryptCommand({
      KeyId: this.keyArn, Plaintext: plaintext, EncryptionContext: encryptionContext(requestId, workspaceId),
    })).then((answer) => answer.CiphertextBlob);
    const now = Math.floor(this.wallClock());
    try {
      await this.#call(requestId, this.#dynamodb, new PutItemCommand({
        TableName: this.tableName,
        Item: {
          request_id: { S: requestId }, workspace_id: { S: workspaceId }, promise_token: { B: ciphertext },
          expires_at: { N: String(now + CREDENTIAL_TTL_S) }, written_at: { N: String(now) },
        },
        ConditionExpression: PUT_CONDITION,
        ExpressionAttributeValues: { ':now': { N: String(now) } },
      }));
    } catch (error) {
      if (error.reason === CONDITION_FAILED) return null; // a retried enqueue: the stored one stays
      throw error;
    }
    return Object.freeze({ requestId, ciphertext });
  }

  /** Delete exactly what `write` wrote (best effort: the record expires anyway); true if deleted. */
  async takeBack(receipt) {
    try {
      await this.#call(receipt.requestId, this.#dynamodb, new DeleteItemCommand({
        TableName: this.tableName, Key: { request_id: { S: receipt.requestId } },
        ConditionExpression: 'promise_token = :ours', ExpressionAttributeValues: { ':ours': { B: receipt.ciphertext } },
      }));
      return true;
    } catch (error) {
      if (error.reason !== CONDITION_FAILED) { // a condition failure: the record holds another token now
        try {
          this.logger.warn('credential record of an unsent request not removed', { request_id: receipt.requestId, reason: error.reason });
        } catch {
          // A logger failure never changes the enqueue's outcome.
        }
      }
      return false;
    }
  }

  async #call(requestId, client, command) {
    try {
      return await client.send(command, { abortSignal: AbortSignal.timeout(this.timeoutMs) });
    } catch (error) {
      throw new CredentialHandoverError(requestId, awsCode(error)); // no cause: keep SDK detail out
    }
  }

  toJSON() {
    return { tableName: this.tableName, keyArn: this.keyArn, mints: this.#ims !== null };
  }
}
