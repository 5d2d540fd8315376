/**
 * The root metadata of a Sandbox created through sandbox-apiserver (src/apiserver/sandboxes/create.ts): values of
 * the wrong JSON type are a 400, as upstream's decoder answers, and label and annotation keys and values that are
 * not valid are a 422 naming the field. Before, the schema check ran without metadata: a number where an annotation
 * string belongs reached `.trim()` and answered 500, and any label was stored.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CocoonAnnotationKeys } from '../../src/api/index.js';
import { StatusFailure } from '../../src/apiserver/status.js';
import { createRequest, validationCreator } from './create-fixture.js';

const creator = validationCreator();
const validate = (metadata: Record<string, unknown>) => creator.validate(createRequest(metadata));
const failure = (metadata: Record<string, unknown>) => {
  try {
    validate(metadata);
  } catch (err) {
    assert.ok(err instanceof StatusFailure, String(err));
    return err.status;
  }
  assert.fail(`accepted ${JSON.stringify(metadata)}`);
};

describe('create: root metadata', () => {
  it('accepts valid labels and annotations', () => {
    const out = validate({ name: 'a', labels: { 'team.example.com/name': 'blue', tier: '' }, annotations: { n: 'x' } });
    assert.equal(out.name, 'a');
  });

  it('answers 400 for a value of the wrong JSON type, naming it', () => {
    for (const [metadata, want] of [
      [
        { name: 'a', annotations: { [CocoonAnnotationKeys.ttlSeconds]: 5 } },
        /metadata\.annotations\[.*ttl-seconds\]: must be a string, not number/,
      ],
      [{ name: 'a', labels: { x: null } }, /metadata\.labels\[x\]: must be a string, not null/],
      [{ name: 'a', labels: ['x'] }, /metadata\.labels: must be an object of strings/],
      [{ generateName: 7 }, /metadata\.generateName: must be a string, not number/],
      [{ name: 123 }, /metadata\.name: must be a string, not number/],
    ] as const) {
      const s = failure(metadata);
      assert.equal(s.code, 400, JSON.stringify(metadata));
      assert.match(s.message ?? '', want);
    }
  });

  it('answers 422 naming metadata.labels or metadata.annotations for invalid keys and values', () => {
    for (const [metadata, field] of [
      [{ name: 'a', labels: { 'bad key!': 'x' } }, 'metadata.labels'],
      [{ name: 'a', labels: { ok: 'not a valid value' } }, 'metadata.labels'],
      [{ name: 'a', annotations: { 'a/b/c': 'x' } }, 'metadata.annotations'],
      [{ name: 'a', annotations: { big: 'x'.repeat(256 * 1024) } }, 'metadata.annotations'],
    ] as const) {
      const s = failure(metadata);
      assert.equal(s.code, 422, JSON.stringify(metadata).slice(0, 100));
      assert.deepEqual(
        s.details?.causes?.map((c) => c.field),
        [field],
      );
    }
  });
});
