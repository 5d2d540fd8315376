import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { applyMergePatch, mergePatch } from '../../src/kube/merge-patch.js';

describe('mergePatch (diff before write)', () => {
  const cases: Array<[string, unknown, unknown, unknown]> = [
    ['equal objects give no patch', { a: 1, b: { c: [1, 2] } }, { a: 1, b: { c: [1, 2] } }, undefined],
    ['changed scalar', { a: 1 }, { a: 2 }, { a: 2 }],
    ['removed key becomes null', { a: 1, b: 2 }, { a: 1 }, { b: null }],
    ['nested change only', { m: { x: 1, y: 2 } }, { m: { x: 1, y: 3 } }, { m: { y: 3 } }],
    ['arrays are replaced whole', { l: [1, 2] }, { l: [1] }, { l: [1] }],
    [
      'label removal',
      { metadata: { labels: { a: '1', b: '2' } } },
      { metadata: { labels: { a: '1' } } },
      { metadata: { labels: { b: null } } },
    ],
  ];
  for (const [name, from, to, want] of cases) it(name, () => assert.deepEqual(mergePatch(from, to), want));

  it('applying the patch reproduces the target (property, null-free JSON)', () => {
    const json = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: 'small' },
        fc.integer(),
        fc.string(),
        fc.boolean(),
        fc.array(tie('value'), { maxLength: 3 }),
        tie('object'),
      ),
      object: fc.dictionary(
        fc.string({ minLength: 1, maxLength: 4 }).filter((k) => k !== '__proto__'),
        tie('value'),
        { maxKeys: 4, noNullPrototype: true },
      ),
    }));
    fc.assert(
      fc.property(json.object, json.object, (a, b) => {
        const p = mergePatch(a, b);
        assert.deepEqual(p === undefined ? a : applyMergePatch(a, p), b);
      }),
      { numRuns: 2000 },
    );
  });
});
