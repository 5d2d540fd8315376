/**
 * The e2b API's authentication: `X-API-KEY` against the keys in `--e2b-api-key-file` (one per line, `#` comments
 * and blank lines skipped), each compared in constant time (digests, so neither length nor content leaks). No key
 * configured refuses to start unless `--e2b-allow-anonymous` (a development flag) is given.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { SandboxError } from '../../errors.js';

export function parseApiKeys(text: string): string[] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
}

export function readApiKeys(path: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new SandboxError('apiserver.flags', `--e2b-api-key-file ${path}: ${(err as Error).message}`);
  }
  return parseApiKeys(text);
}

const digest = (s: string) => createHash('sha256').update(s).digest();

export class ApiKeys {
  private readonly digests: Buffer[];

  constructor(
    keys: readonly string[],
    private readonly allowAnonymous: boolean,
  ) {
    if (keys.length === 0 && !allowAnonymous)
      throw new SandboxError('apiserver.flags', 'the e2b API has no API key configured', {
        hint: 'pass --e2b-api-key-file (one key per line), or --e2b-allow-anonymous for a throwaway local server',
      });
    this.digests = keys.map(digest);
  }

  /** Whether a request with this X-API-KEY value may use the API. */
  allows(given: string | string[] | undefined): boolean {
    if (this.digests.length === 0) return this.allowAnonymous;
    if (typeof given !== 'string' || !given) return false;
    const d = digest(given);
    let ok = false;
    // Every key is compared, so the time does not depend on which one matched.
    for (const k of this.digests) ok = timingSafeEqual(k, d) || ok;
    return ok;
  }
}
