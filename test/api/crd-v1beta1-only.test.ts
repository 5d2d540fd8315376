/**
 * The v1beta1-only CRD set (docs/api.md "Migrating to v1beta1"; the chart's `crds.v1beta1Only`): every kind lists
 * v1beta1 alone, served and stored, with no conversion stanza, and that version is the very one the default CRDs
 * carry. The default set still lists v1alpha1 (served, deprecated) with webhook conversion.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildAllCrds } from '../../src/api/crd.js';
import { buildParts } from '../../src/deploy/parts.js';

type Crd = {
  metadata: { name: string };
  spec: { versions: Array<{ name: string; served: boolean; storage: boolean }>; conversion?: { strategy: string } };
};

describe('CRDs with v1beta1 only', () => {
  const all = buildAllCrds() as unknown as Crd[];
  const only = buildAllCrds({ v1beta1Only: true }) as unknown as Crd[];

  it('list v1beta1 alone, served and the storage version, with no conversion', () => {
    assert.deepEqual(
      only.map((c) => c.metadata.name),
      all.map((c) => c.metadata.name),
    );
    for (const c of only) {
      assert.deepEqual(
        c.spec.versions.map((v) => `${v.name} served=${v.served} storage=${v.storage}`),
        ['v1beta1 served=true storage=true'],
        c.metadata.name,
      );
      assert.equal(c.spec.conversion, undefined, c.metadata.name);
    }
  });

  it('keep the default CRDs v1beta1 exactly; the default still serves v1alpha1 through the webhook', () => {
    for (const c of only) {
      const full = all.find((a) => a.metadata.name === c.metadata.name)!;
      assert.deepEqual(c.spec.versions[0], { ...full.spec.versions.find((v) => v.name === 'v1beta1'), served: true });
      if (full.spec.versions.length > 1) {
        assert.equal(full.spec.conversion?.strategy, 'Webhook', c.metadata.name);
        assert.ok(full.spec.versions.some((v) => v.name === 'v1alpha1' && v.served && !v.storage));
      }
    }
  });

  it('the chart renders one of the two per kind, on crds.v1beta1Only; kustomize ships the default', () => {
    for (const layout of ['crd', 'aggregated'] as const) {
      const crds = buildParts({ layout, certManager: false }).filter((p) => p.file.startsWith('crds/'));
      const multi = crds.filter((p) => p.file.endsWith('.v1beta1-only.yaml'));
      assert.ok(multi.length >= 3, `${layout}: a v1beta1-only file per kind with v1alpha1`);
      for (const p of multi) {
        assert.equal(p.when?.expr, '.Values.crds.v1beta1Only', p.file);
        assert.equal(p.when?.value, false, `${p.file}: not in the default rendering`);
        const twin = crds.find((q) => q.file === p.file.replace('.v1beta1-only.yaml', '.yaml'));
        assert.equal(twin?.when?.expr, 'not .Values.crds.v1beta1Only', `${p.file}: its twin is the default`);
        assert.equal(twin?.when?.value, true);
      }
    }
  });
});
