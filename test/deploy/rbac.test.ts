/**
 * The generated RBAC is what the components need, checked against the real apiserver: the operator runs on a
 * ServiceAccount token bound to exactly the shipped ClusterRole/Role (from `kubectl kustomize`, moved to a test
 * namespace under unique names) instead of the admin certificate, the claim, template and Sandbox suites pass,
 * and no request is refused; then three rules are taken away one at a time and the test that needs each fails
 * with a 403 on that resource.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { serviceAccountKubeconfig } from '../../src/cluster/aggregated.js';
import type { PolicyRule } from '../../src/deploy/rbac.js';
import { createTestNamespace, getTestCluster, type TestCluster } from '../support/cluster.js';
import { isolateRbac, kustomizeObjects, REPO, toYamlStream, type Obj } from '../support/deploy.js';

/** The suites whose operator runs in the test process (startTestOperator), on the cluster. */
const SUITES = [
  'test/operator/claim-cold.test.ts',
  'test/operator/claim-lifecycle.test.ts',
  'test/operator/claim-warm.test.ts',
  'test/operator/claim-watch.test.ts',
  'test/operator/template-networkpolicy.test.ts',
  'test/operator/sandbox-lifecycle.test.ts',
];

interface Denied {
  verb: string;
  resource: string;
}

describe('generated RBAC: the operator on a ServiceAccount bound to it', () => {
  let cluster: TestCluster;
  let rendered: Obj[];
  let dir: string;
  let clusterInfo: string;
  const cleanups: Array<() => Promise<void>> = [];

  before(async () => {
    cluster = await getTestCluster();
    rendered = await kustomizeObjects('crd');
    dir = await mkdtemp(join(tmpdir(), 'sbx-rbac-'));
    // The suites run in child processes on this same cluster.
    clusterInfo = process.env.SBX_TEST_CLUSTER ?? join(dir, 'cluster.json');
    if (!process.env.SBX_TEST_CLUSTER) {
      const { kubectl: _k, ...info } = cluster;
      await writeFile(clusterInfo, JSON.stringify(info));
    }
  });
  after(async () => {
    for (const c of cleanups) await c();
    await rm(dir, { recursive: true, force: true });
  });

  /** A namespace with the operator's ServiceAccount bound to the shipped RBAC (less `drop`); its kubeconfig. */
  async function boundOperator(drop?: (rule: PolicyRule) => string[]): Promise<string> {
    const ns = await createTestNamespace('rbac');
    const suffix = randomBytes(4).toString('hex');
    const objects = isolateRbac(rendered, { component: 'sandbox-operator', namespace: ns.name, suffix, drop });
    assert.ok(objects.some((o) => o.kind === 'ClusterRole'));
    await cluster.kubectl(['apply', '-f', '-'], toYamlStream(objects));
    cleanups.push(async () => {
      await cluster.kubectl(['delete', '--ignore-not-found', '--wait=false', '-f', '-'], toYamlStream(objects));
      await ns.cleanup();
    });
    return serviceAccountKubeconfig(cluster.kubectl, {
      path: join(dir, `${suffix}.kubeconfig`),
      server: cluster.server,
      caPem: await readFile(cluster.pki.ca.cert, 'utf8'),
      namespace: ns.name,
      name: 'sandbox-operator',
      hours: 2,
    });
  }

  /** node's test runner over `files` with the operator on `kubeconfig`; its exit code, output and the 403s. */
  async function runSuites(kubeconfig: string, files: string[], namePattern?: string) {
    const deniedLog = join(dir, `denied-${randomBytes(4).toString('hex')}.jsonl`);
    await writeFile(deniedLog, '');
    const args = ['--import', 'tsx', '--test', '--test-concurrency=1', '--test-reporter=tap'];
    if (namePattern) args.push(`--test-name-pattern=${namePattern}`);
    // Without NODE_TEST_CONTEXT: node's runner skips the files of a runner started from inside a test.
    const { NODE_TEST_CONTEXT: _nested, ...env } = process.env;
    const child = spawn(process.execPath, [...args, ...files], {
      cwd: REPO,
      env: {
        ...env,
        SBX_TEST_CLUSTER: clusterInfo,
        SBX_TEST_OPERATOR_KUBECONFIG: kubeconfig,
        SBX_TEST_DENIED_LOG: deniedLog,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const code = await new Promise<number>((r) => child.on('close', (c) => r(c ?? 1)));
    const denied = (await readFile(deniedLog, 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Denied);
    const counts = (name: string) => Number(new RegExp(`^# ${name} (\\d+)$`, 'm').exec(output)?.[1] ?? NaN);
    return { code, output, denied, pass: counts('pass'), fail: counts('fail') + counts('cancelled') };
  }

  it('the claim, template and Sandbox suites pass and no request is refused', { timeout: 20 * 60_000 }, async () => {
    const kubeconfig = await boundOperator();
    const r = await runSuites(kubeconfig, SUITES);
    const failed = r.output.split('\n').filter((l) => /^\s*not ok /.test(l) && !/# SKIP/.test(l));
    assert.equal(r.code, 0, `suites failed under the generated RBAC: ${failed.join('; ')}\n${r.output.slice(-6000)}`);
    assert.ok(r.pass >= 12 && r.fail === 0, `${r.pass} passed, ${r.fail} failed`);
    assert.deepEqual(r.denied, [], 'no request answered 403');
  });

  const spotChecks: Array<{
    rule: string;
    drop: (r: PolicyRule) => string[];
    file: string;
    test: string;
    resource: string;
  }> = [
    {
      rule: 'create on sandboxes',
      drop: (r) => (r.resources.includes('sandboxes') ? ['create'] : []),
      file: 'test/operator/claim-cold.test.ts',
      test: 'an empty pool cold-starts a Sandbox named after the claim',
      resource: 'sandboxes',
    },
    {
      rule: 'patch on sandboxclaims/status and sandboxwarmpools/status',
      drop: (r) => (r.resources.includes('sandboxclaims/status') ? r.verbs : []),
      file: 'test/operator/claim-warm.test.ts',
      test: 'adopts a warm member; the pool refills',
      // The pool's status write is refused first: it never reports a ready member, so the claim is never bound.
      resource: 'sandboxwarmpools',
    },
    {
      rule: 'networkpolicies',
      drop: (r) => (r.resources.includes('networkpolicies') ? r.verbs : []),
      file: 'test/operator/template-networkpolicy.test.ts',
      test: 'Managed: one controlled NP with the secure default',
      resource: 'networkpolicies',
    },
  ];
  for (const s of spotChecks) {
    it(`without the rule for ${s.rule}, "${s.test}" fails on a 403`, { timeout: 10 * 60_000 }, async () => {
      const kubeconfig = await boundOperator(s.drop);
      const r = await runSuites(kubeconfig, [s.file], escapeRegExp(s.test));
      assert.notEqual(r.code, 0, `the test passed without the rule:\n${r.output.slice(-3000)}`);
      assert.ok(r.fail >= 1, `${r.fail} failed or cancelled:\n${r.output.slice(-3000)}`);
      assert.ok(
        r.denied.some((d) => d.resource === s.resource),
        `a 403 on ${s.resource} (got ${JSON.stringify(r.denied)})`,
      );
    });
  }
});

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
