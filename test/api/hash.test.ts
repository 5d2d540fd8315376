import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fnv1a32 } from '../../src/api/index.js';

describe('fnv1a32', () => {
  const cases: [string, string][] = [
    ['', '811c9dc5'],
    ['my-sandbox', '374de8f5'],
    ['pool', '91dd7983'],
    ['tpl', '9d22159f'],
  ];
  for (const [input, expected] of cases) {
    it(`hash(${JSON.stringify(input)}) = ${expected}`, () => assert.equal(fnv1a32(input), expected));
  }
  it('hashes UTF-8 bytes, always 8 hex digits', () => {
    assert.match(fnv1a32('sandbox-ü-日本'), /^[0-9a-f]{8}$/);
    assert.notEqual(fnv1a32('ü'), fnv1a32('\u00fc'.normalize('NFD')));
  });
});
