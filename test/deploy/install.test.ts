/**
 * The install manifests with the real tools on the real control plane: `helm lint` and `helm template` for both
 * layouts with cert-manager on and off, every rendered object accepted by `kubectl apply --dry-run=server` (the
 * CRDs are installed by the test run), and `kubectl kustomize` of each overlay rendering exactly the objects
 * `helm template` does for the same choices.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isDeepStrictEqual } from 'node:util';
import { OVERLAYS } from '../../src/deploy/kustomize.js';
import { VARIANTS } from '../../src/deploy/model.js';
import { DEFAULT_NAMESPACE } from '../../src/deploy/values.js';
import { createTestNamespace, getTestCluster, type TestCluster } from '../support/cluster.js';
import {
  CHART,
  helmBinary,
  helmTemplate,
  identity,
  kustomizeObjects,
  runTool,
  toYamlStream,
  type Obj,
} from '../support/deploy.js';

/**
 * Groups whose CRDs come from other projects (cert-manager, prometheus-operator) and are not installed on the test
 * cluster: their objects cannot be dry-run here, and the test says which it left out.
 */
const FOREIGN_GROUPS = ['cert-manager.io/', 'monitoring.coreos.com/'];
const foreign = (o: Obj) => FOREIGN_GROUPS.some((g) => o.apiVersion.startsWith(g));

const variantSets = VARIANTS.map((v) => ({
  name: `layout=${v.layout} certManager=${v.certManager}`,
  set: { layout: v.layout, 'certManager.enabled': v.certManager },
}));

describe('install manifests (helm chart, kustomize) on the real control plane', () => {
  let cluster: TestCluster;
  let ns: { name: string; cleanup(): Promise<void> };
  before(async () => {
    cluster = await getTestCluster();
    ns = await createTestNamespace('install');
    await helmBinary();
  });
  after(() => ns?.cleanup());

  it('helm lint passes for both layouts, cert-manager on and off, monitoring objects on', async () => {
    for (const { name, set } of variantSets) {
      const args = ['lint', CHART, '--strict', '--namespace', DEFAULT_NAMESPACE];
      for (const [k, v] of Object.entries({
        ...set,
        'monitoring.serviceMonitor': true,
        'monitoring.prometheusRule': true,
      }))
        args.push('--set', `${k}=${String(v)}`);
      const r = await runTool(await helmBinary(), args);
      assert.ok(r.ok, `helm lint (${name}): ${r.stdout}${r.stderr}`);
      assert.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
    }
  });

  it('helm refuses values outside the schema, naming the value', async () => {
    const r = await runTool(await helmBinary(), ['template', 'x', CHART, '--set', 'layout=etcd']);
    assert.equal(r.ok, false);
    assert.match(r.stderr, /layout/);
    const r2 = await runTool(await helmBinary(), ['template', 'x', CHART, '--set', 'operator.replica=3']);
    assert.equal(r2.ok, false, 'a misspelt value is an error, not ignored');
    assert.match(r2.stderr, /replica/);
  });

  it('crds.serveV1alpha1=false leaves v1alpha1 defined but unserved, v1beta1 served and the storage version', async () => {
    const versions = async (set: Record<string, string | boolean>) =>
      (await helmTemplate(ns.name, set))
        .filter((o) => o.kind === 'CustomResourceDefinition')
        .flatMap((o) =>
          (
            o as unknown as { spec: { versions: Array<{ name: string; served: boolean; storage: boolean }> } }
          ).spec.versions.map(
            (v) => `${(o.metadata as { name: string }).name} ${v.name} served=${v.served} storage=${v.storage}`,
          ),
        );
    const served = await versions({});
    const unserved = await versions({ 'crds.serveV1alpha1': false });
    const alpha = served.filter((v) => / v1alpha1 /.test(v));
    assert.equal(alpha.length, 4, served.join('\n'));
    assert.ok(
      alpha.every((v) => v.endsWith('served=true storage=false')),
      alpha.join('\n'),
    );
    assert.deepEqual(
      unserved,
      served.map((v) => (/ v1alpha1 /.test(v) ? v.replace('served=true', 'served=false') : v)),
    );
    assert.ok(unserved.filter((v) => / v1beta1 /.test(v)).every((v) => v.endsWith('served=true storage=true')));
  });

  it('crds.v1beta1Only=true lists v1beta1 alone (served, storage) with no conversion, and the apiserver takes them', async () => {
    const crds = async (set: Record<string, string | boolean>) =>
      (await helmTemplate(ns.name, set)).filter((o) => o.kind === 'CustomResourceDefinition');
    const versions = (o: Obj) =>
      (o as unknown as { spec: { versions: Array<{ name: string; served: boolean; storage: boolean }> } }).spec
        .versions;
    const conversion = (o: Obj) => (o as unknown as { spec: { conversion?: unknown } }).spec.conversion;
    const name = (o: Obj) => (o.metadata as { name: string }).name;
    const all = await crds({});
    const only = await crds({ 'crds.v1beta1Only': true });
    assert.deepEqual(only.map(name).sort(), all.map(name).sort(), 'the same CRDs, each once');
    for (const o of only) {
      assert.deepEqual(
        versions(o).map((v) => `${v.name} served=${v.served} storage=${v.storage}`),
        ['v1beta1 served=true storage=true'],
        name(o),
      );
      assert.equal(conversion(o), undefined, `${name(o)}: no conversion webhook`);
      assert.equal(
        (o.metadata as { annotations?: Record<string, string> }).annotations?.['cert-manager.io/inject-ca-from'],
        undefined,
      );
    }
    // Each v1beta1 schema is the one the default CRDs carry: only v1alpha1 and the conversion stanza are gone.
    for (const o of only) {
      const full = all.find((a) => name(a) === name(o))!;
      assert.deepEqual(versions(o)[0], { ...versions(full).find((v) => v.name === 'v1beta1')!, served: true }, name(o));
    }
    // Stored objects are all v1beta1 (the storage version), so the apiserver takes v1alpha1's removal.
    const { accepted, failures } = await dryRun(cluster, only);
    assert.deepEqual(failures, []);
    assert.equal(accepted, only.length);
  });

  it('every object helm renders passes kubectl apply --dry-run=server, for each layout and cert-manager choice', async () => {
    const skipped = new Set<string>();
    for (const { name, set } of variantSets) {
      const objects = await helmTemplate(ns.name, {
        ...set,
        'monitoring.serviceMonitor': true,
        'monitoring.prometheusRule': true,
      });
      const kinds = new Set(objects.map((o) => o.kind));
      for (const k of ['CustomResourceDefinition', 'ServiceAccount', 'ClusterRole', 'DaemonSet'])
        assert.ok(kinds.has(k), `${name}: renders a ${k}`);
      assert.ok(kinds.has(set.layout === 'crd' ? 'Deployment' : 'APIService'), `${name}: the layout's components`);
      for (const o of objects.filter(foreign)) skipped.add(`${o.kind} ${o.apiVersion}`);
      const applied = await dryRun(
        cluster,
        objects.filter((o) => !foreign(o)),
      );
      assert.equal(applied.failures.length, 0, `${name}:\n${applied.failures.join('\n')}`);
      assert.equal(applied.accepted, objects.filter((o) => !foreign(o)).length, `${name}: every object accepted`);
    }
    // The objects of other projects' kinds are rendered (and linted above) but not dry-run: their CRDs are not here.
    assert.deepEqual([...skipped].sort(), [
      'Certificate cert-manager.io/v1',
      'Issuer cert-manager.io/v1',
      'PrometheusRule monitoring.coreos.com/v1',
      'ServiceMonitor monitoring.coreos.com/v1',
    ]);
  });

  for (const layout of Object.keys(OVERLAYS) as Array<keyof typeof OVERLAYS>) {
    it(`kubectl kustomize overlays/${layout} renders the objects helm template does with the same values`, async () => {
      const v = OVERLAYS[layout];
      const fromKustomize = await kustomizeObjects(layout);
      const fromHelm = await helmTemplate(DEFAULT_NAMESPACE, {
        layout: v.layout,
        'certManager.enabled': v.certManager,
      });
      const k = new Map(fromKustomize.map((o) => [identity(o), o]));
      const h = new Map(fromHelm.map((o) => [identity(o), o]));
      assert.deepEqual([...k.keys()].sort(), [...h.keys()].sort(), 'the same objects');
      for (const [id, o] of k) assert.ok(isDeepStrictEqual(o, h.get(id)), `${id} differs between kustomize and helm`);
      assert.ok(k.size > 15, `${k.size} objects`);
    });
  }
});

/** `kubectl apply --dry-run=server` of `objects`; how many it accepted and the errors it printed. */
async function dryRun(cluster: TestCluster, objects: Obj[]): Promise<{ accepted: number; failures: string[] }> {
  const kubectl = cluster.binaries.kubectl ?? 'kubectl';
  // The CRDs exist on the shared control plane, and other suites' operators rewrite their conversion clientConfig
  // (url instead of service): a dry-run apply would merge the two into an invalid object, so the chart's CRDs are
  // checked whole, as an install over them would write them (replace), and everything else as applied.
  const isCrd = (o: Obj) => o.kind === 'CustomResourceDefinition';
  let accepted = 0;
  const failures: string[] = [];
  for (const [verb, batch] of [
    ['replace', objects.filter(isCrd)],
    ['apply', objects.filter((o) => !isCrd(o))],
  ] as const) {
    if (!batch.length) continue;
    const args = [`--kubeconfig=${cluster.kubeconfigPath}`, verb, '--dry-run=server', '-f', '-'];
    const r = await runTool(kubectl, args, toYamlStream(batch));
    accepted += r.stdout.split('\n').filter((l) => /\(server dry run\)$/.test(l)).length;
    failures.push(...r.stderr.split('\n').filter((l) => l.trim() && !/^Warning:/.test(l)));
  }
  return { accepted, failures };
}
