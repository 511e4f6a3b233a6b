// The disguised quota 405, told apart by the SHAPE of its body (never its words): a 405 with
// a non-empty body that is not a JSON object or array. Live, the refusal is a bare nginx
// text/html page; a genuine Method-Not-Allowed is always JSON. Shared fixtures:
// tests/fixtures/metered-quota-classifier.json (the Python classifier passes the same cases).

/** The status the write gate disguises its quota refusal as (its body's shape tells them apart). */
export const QUOTA_SHAPED_STATUS = 405;

// Python's str.strip() whitespace (str.isspace), so both clients call the same bodies empty.
const BLANK = /^[\t\n\v\f\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/;

function isJsonContainer(body) {
  try {
    const parsed = JSON.parse(body);
    return typeof parsed === 'object' && parsed !== null;
  } catch {
    return false;
  }
}

/**
 * True for the write gate's disguised quota refusal.
 * @param {number} status The HTTP status of the write.
 * @param {string} rawBody The raw body text (never a redacted copy).
 */
export function isMeteredQuota(status, rawBody) {
  if (status !== QUOTA_SHAPED_STATUS || typeof rawBody !== 'string') return false;
  return !BLANK.test(rawBody) && !isJsonContainer(rawBody);
}

/**
 * The need of a model change: adding models re-meters the published prompts; a swap or a
 * removal needs nothing.
 * @param {number} publishedPrompts @param {string[]} modelsBefore @param {string[]} modelsAfter
 */
export function modelChangeNeed(publishedPrompts, modelsBefore, modelsAfter) {
  const added = Math.max(0, new Set(modelsAfter).size - new Set(modelsBefore).size);
  return { projects: 0, prompts: publishedPrompts * added };
}
