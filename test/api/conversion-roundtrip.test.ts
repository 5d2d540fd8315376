/**
 * Property tests: for every kind, 10 000 random valid objects round-trip v1beta1 -> v1alpha1 -> v1beta1 and
 * v1alpha1 -> v1beta1 -> v1alpha1 to deep equality, through the same entry point the webhook uses.
 * `SBX_PROPERTY_RUNS` overrides the run count (e.g. for a quick local loop).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { convertObject, ConversionKeys } from '../../src/api/index.js';
import * as arb from './arbitraries.js';

const numRuns = Number(process.env['SBX_PROPERTY_RUNS'] ?? 10_000);

interface KindCase {
  kind: string;
  group: string;
  beta: fc.Arbitrary<object>;
  alpha: fc.Arbitrary<object>;
  stateKeys: string[];
}

const kinds: KindCase[] = [
  {
    kind: 'Sandbox',
    group: 'agents.x-k8s.io',
    beta: arb.sandboxV1beta1,
    alpha: arb.sandboxV1alpha1,
    stateKeys: [ConversionKeys.sandboxV1alpha1State, ConversionKeys.sandboxV1beta1State],
  },
  {
    kind: 'SandboxTemplate',
    group: 'extensions.agents.x-k8s.io',
    beta: arb.sandboxTemplateV1beta1,
    alpha: arb.sandboxTemplateV1alpha1,
    stateKeys: [ConversionKeys.sandboxTemplateV1alpha1State, ConversionKeys.sandboxTemplateV1beta1State],
  },
  {
    kind: 'SandboxWarmPool',
    group: 'extensions.agents.x-k8s.io',
    beta: arb.sandboxWarmPoolV1beta1,
    alpha: arb.sandboxWarmPoolV1alpha1,
    stateKeys: [ConversionKeys.sandboxWarmPoolV1alpha1State, ConversionKeys.sandboxWarmPoolV1beta1State],
  },
  {
    kind: 'SandboxClaim',
    group: 'extensions.agents.x-k8s.io',
    beta: arb.sandboxClaimV1beta1,
    alpha: arb.sandboxClaimV1alpha1,
    stateKeys: [ConversionKeys.sandboxClaimV1alpha1State, ConversionKeys.sandboxClaimV1beta1State],
  },
];

/** JSON in, JSON out, as over the wire (no shared references, no undefined members). */
const wire = (o: unknown): Record<string, unknown> => JSON.parse(JSON.stringify(o)) as Record<string, unknown>;

for (const k of kinds) {
  const beta = `${k.group}/v1beta1`;
  const alpha = `${k.group}/v1alpha1`;
  describe(`${k.kind} conversion`, () => {
    it(`v1beta1 -> v1alpha1 -> v1beta1 is the identity (${numRuns} objects)`, () => {
      fc.assert(
        fc.property(k.beta, (obj) => {
          const input = wire(obj);
          const view = wire(convertObject(input, alpha));
          assert.equal(view['apiVersion'], alpha);
          assert.equal(
            view['metadata'] &&
              (view['metadata'] as { annotations?: Record<string, string> }).annotations?.[k.stateKeys[0]!],
            undefined,
            'v1alpha1 readers never see the v1alpha1 state annotation',
          );
          assert.deepStrictEqual(wire(convertObject(view, beta)), input);
        }),
        { numRuns },
      );
    });

    it(`v1alpha1 -> v1beta1 -> v1alpha1 is the identity (${numRuns} objects, plain and hub-derived)`, () => {
      const alphaObjects = fc.oneof(
        k.alpha,
        k.beta.map((b) => wire(convertObject(wire(b), alpha))),
      );
      fc.assert(
        fc.property(alphaObjects, (obj) => {
          const input = wire(obj);
          const hub = wire(convertObject(input, beta));
          assert.equal(hub['apiVersion'], beta);
          assert.deepStrictEqual(wire(convertObject(hub, alpha)), input);
        }),
        { numRuns },
      );
    });

    it('state annotations never nest over repeated round trips', () => {
      fc.assert(
        fc.property(k.beta, (obj) => {
          let hub = wire(obj);
          const sizes: number[] = [];
          for (let i = 0; i < 4; i++) {
            const view = wire(convertObject(hub, alpha));
            hub = wire(convertObject(view, beta));
            sizes.push(JSON.stringify(view).length + JSON.stringify(hub).length);
          }
          assert.equal(new Set(sizes).size, 1, `sizes grow: ${sizes.join(', ')}`);
        }),
        { numRuns: Math.min(numRuns, 1000) },
      );
    });
  });
}
