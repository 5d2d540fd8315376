/**
 * The idle policy on the aggregated create (src/apiserver/sandboxes/create.ts; docs/sandboxd.md "Idle suspend"):
 * the annotation on the Sandbox or on its pod template (where a SandboxTemplate's pod template puts it) becomes the
 * claim's `idle_hibernate_seconds`; a bad value is a 422 naming the field, before anything is claimed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CocoonAnnotationKeys } from '../../src/api/index.js';
import { StatusFailure } from '../../src/apiserver/status.js';
import { createRequest, validationCreator } from './create-fixture.js';

const KEY = CocoonAnnotationKeys.idleHibernateSeconds;
const creator = validationCreator();

describe('the idle policy of an aggregated create', () => {
  it('is read from the Sandbox’s annotations', () => {
    const { policy } = creator.validate(createRequest({ name: 'a', annotations: { [KEY]: '300' } }));
    assert.deepEqual(policy, { idle_hibernate_seconds: 300 });
  });

  it('is read from the pod template’s annotations, the Sandbox’s own winning', () => {
    const req = createRequest({ name: 'b' });
    const body = req.body as { spec: { podTemplate: { metadata?: unknown } } };
    body.spec.podTemplate.metadata = { annotations: { [KEY]: '60' } };
    assert.deepEqual(creator.validate(req).policy, { idle_hibernate_seconds: 60 });
    (req.body as { metadata: Record<string, unknown> }).metadata.annotations = { [KEY]: '90' };
    assert.deepEqual(creator.validate(req).policy, { idle_hibernate_seconds: 90 });
  });

  it('0 or absent is no policy', () => {
    assert.deepEqual(creator.validate(createRequest({ name: 'c', annotations: { [KEY]: '0' } })).policy, {});
    assert.deepEqual(creator.validate(createRequest({ name: 'd' })).policy, {});
  });

  for (const bad of ['-1', '1.5', 'soon', '604801'])
    it(`refuses ${bad} with a 422 naming the field`, () => {
      assert.throws(
        () => creator.validate(createRequest({ name: 'e', annotations: { [KEY]: bad } })),
        (err: unknown) => {
          assert.ok(err instanceof StatusFailure);
          assert.equal(err.status.code, 422);
          assert.equal(err.status.details?.causes?.[0]?.field, `metadata.annotations[${KEY}]`);
          assert.match(err.status.message, /whole number of seconds from 0 \(never\) to 604800/);
          return true;
        },
      );
    });
});
