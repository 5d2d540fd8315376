/**
 * The aggregated layout as a cluster component: the APIService comes up Available quickly, kube-controller-manager's
 * namespace, garbage-collector and quota controllers work with sandboxes (metadata lists and watches), etcd holds
 * no per-sandbox object. (A node that goes down: node-down.alone.test.ts.)
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { aggregatedNamespace, getAggregated, sandboxManifest, type AggregatedEnv } from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';

const run = promisify(execFile);

/** Every key etcd holds, listed by etcd itself (its JSON gateway, from inside the cluster's network namespace). */
async function etcdKeys(env: AggregatedEnv): Promise<Set<string>> {
  const body = JSON.stringify({
    key: Buffer.from('\0').toString('base64'),
    range_end: Buffer.from('\0').toString('base64'),
    keys_only: true,
  });
  const { stdout } = await run(
    'ip',
    ['netns', 'exec', env.cluster.netns, 'curl', '-s', '-X', 'POST', 'http://127.0.0.1:2379/v3/kv/range', '-d', body],
    { maxBuffer: 64 * 1024 * 1024 },
  );
  const kvs = (JSON.parse(stdout) as { kvs?: Array<{ key: string }> }).kvs ?? [];
  return new Set(kvs.map((kv) => Buffer.from(kv.key, 'base64').toString()));
}

/**
 * The keys that appeared between two listings and could belong to this test: other test files share the cluster
 * and create namespaces and objects in them meanwhile, so a key in another namespace (or a namespace itself) is
 * theirs. What is left is this namespace's keys and cluster-scoped keys other than namespaces.
 */
function keysAddedBy(namespace: string, before: Set<string>, after: Set<string>, namespaces: Set<string>): string[] {
  return [...after].filter((key) => {
    if (before.has(key) || key.startsWith('/registry/namespaces/')) return false;
    const segments = key.split('/');
    return !segments.some((seg) => seg !== namespace && namespaces.has(seg));
  });
}

async function createMany(env: AggregatedEnv, namespace: string, n: number, prefix: string): Promise<void> {
  for (let i = 0; i < n; i++) {
    for (let attempt = 0; ; attempt++) {
      try {
        await env.kubectl(['create', '-n', namespace, '-f', '-'], JSON.stringify(sandboxManifest(`${prefix}${i}`)));
        break;
      } catch (err) {
        if (!/ServiceUnavailable|no warm sandbox/.test(String(err)) || attempt > 300) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
}

describe('aggregated layout: the cluster around it', () => {
  let env: AggregatedEnv;
  before(async () => {
    env = await getAggregated();
  });

  it('the APIService became Available within 10 s of the server being registered', () => {
    assert.ok(env.apiserver.apiServiceAvailableMs < 10_000, `${env.apiserver.apiServiceAvailableMs} ms`);
  });

  it('deleting a namespace releases its sandboxes and the namespace finishes terminating', async () => {
    const ns = await aggregatedNamespace('nsdel');
    await createMany(env, ns.name, 3, 'd');
    const ids = JSON.parse(await env.kubectl(['get', 'sandboxes', '-n', ns.name, '-o', 'json'])).items.map(
      (i: { metadata: { annotations: Record<string, string> } }) =>
        i.metadata.annotations['sandbox.cocoonstack.io/claim-id'],
    ) as string[];
    assert.equal(ids.length, 3);
    await env.kubectl(['delete', 'namespace', ns.name, '--timeout=60s']);
    await assert.rejects(env.kubectl(['get', 'namespace', ns.name]), /NotFound|not found/);
    // The VMs are released on their nodes (not just hidden): ask every node for each claim id.
    for (const node of env.sandboxd) {
      const token = (await readFile(node.tokenFile, 'utf8')).trim();
      const res = await fetch(`http://${node.address}/v1/sandboxes`, { headers: { authorization: `Bearer ${token}` } });
      const rows = ((await res.json()) as { sandboxes: Array<{ id: string }> }).sandboxes;
      for (const id of ids) assert.ok(!rows.some((r) => r.id === id), `${id} still claimed on ${node.node}`);
    }
  });

  it("kube-controller-manager's garbage collector and quota controller watch sandboxes without errors", async () => {
    const log = await readFile(join(env.cluster.dataDir, 'logs', 'kube-controller-manager.log'), 'utf8');
    const about = log.split('\n').filter((l) => /agents\.x-k8s\.io/.test(l) && /sandboxes/.test(l));
    const errors = about.filter(
      (l) => /^E\d{4}|failed|error/i.test(l) && !/forbidden: unable to create new content/i.test(l),
    );
    assert.deepEqual(errors, [], errors.join('\n'));
    // They do watch it: the server counts watch starts by controller identity.
    const ca = await readFile(env.apiserver.caFile);
    const [cert, key] = await Promise.all([readFile(env.cluster.pki.admin.cert), readFile(env.cluster.pki.admin.key)]);
    const metrics = () =>
      new Promise<string>((resolve, reject) => {
        const req = httpsRequest(`https://${env.apiserver.address}/metrics`, { ca, cert, key }, (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve(body));
        });
        req.on('error', reject);
        req.end();
      });
    // kube-controller-manager's metadata informers (shared by the garbage collector and the quota controller) run
    // as the controller manager itself.
    await eventually(metrics, {
      until: (m) => /sandbox_apiserver_watch_starts_total\{client="system:kube-controller-manager"\} [1-9]/.test(m),
      timeoutMs: 90_000,
      intervalMs: 2000,
      what: "kube-controller-manager's watch of sandboxes",
    });
    const kcm = await readFile(join(env.cluster.dataDir, 'logs', 'kube-controller-manager.log'), 'utf8');
    assert.match(
      kcm,
      /QuotaMonitor created object count evaluator.*sandboxes\.agents\.x-k8s\.io/,
      'quota monitors sandboxes',
    );
  });

  it('creating 200 sandboxes adds no object to etcd', async () => {
    const ns = await aggregatedNamespace('etcd');
    await new Promise((r) => setTimeout(r, 2000)); // the namespace's own objects (default ServiceAccount, root CA ConfigMap)
    const before = await etcdKeys(env);
    await createMany(env, ns.name, 200, 'e');
    const listed = JSON.parse(await env.kubectl(['get', 'sandboxes', '-n', ns.name, '-o', 'json'])).items.length;
    assert.equal(listed, 200);
    const after = await etcdKeys(env);
    const namespaces = new Set(
      [...after]
        .filter((k) => k.startsWith('/registry/namespaces/'))
        .map((k) => k.slice('/registry/namespaces/'.length)),
    );
    // A per-sandbox object would add 200; NodeInventory objects and node Leases are updated in place, never added.
    // A few cluster-scoped keys may come and go meanwhile (another file's APIService or ClusterRole), hence < 10.
    const added = keysAddedBy(ns.name, before, after, namespaces);
    assert.ok(added.length < 10, `etcd gained ${added.length} keys of this test:\n${added.join('\n')}`);
    assert.ok(!added.some((k) => k.includes(`/${ns.name}/`)), `keys in ${ns.name}:\n${added.join('\n')}`);
    await ns.cleanup();
  });
});
