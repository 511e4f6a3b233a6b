// Paths into the repository the tests share with the Python tests.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
export const readJson = (relative) => JSON.parse(readFileSync(`${ROOT}${relative}`, 'utf8'));
export const schema = (name) => readJson(`docs/schemas/${name}.schema.json`);
