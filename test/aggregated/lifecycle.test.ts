/**
 * Lifecycle verbs of aggregated sandboxes on real microVMs, through kube-apiserver: pause freezes the guest (its
 * uptime stops), resume continues the same process with its memory, fork makes children that share the parent's
 * state but not each other's later writes, snapshot + create-from-snapshot carries files over; each verb through
 * `kubectl create --raw`, the kubectl plugin and @kubernetes/client-node; per-subresource RBAC; and bad input.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import {
  aggregatedNamespace,
  createSandbox,
  getAggregated,
  sandboxManifest,
  type AggregatedEnv,
} from '../support/aggregated.js';

const run = promisify(execFile);
const GROUP = 'agents.x-k8s.io';
const BASE = `/apis/${GROUP}/v1beta1`;

describe('aggregated sandboxes: lifecycle verbs', () => {
  let env: AggregatedEnv;
  let ns: { name: string; cleanup(): Promise<void> };
  let path: (name: string, sub?: string) => string;
  before(async () => {
    env = await getAggregated();
    ns = await aggregatedNamespace('life');
    path = (name, sub) => `${BASE}/namespaces/${ns.name}/sandboxes/${name}${sub ? `/${sub}` : ''}`;
  });
  after(async () => ns?.cleanup());

  const create = async (name: string, annotations?: Record<string, string>) => {
    for (let i = 0; ; i++) {
      try {
        return JSON.parse(
          await env.kubectl(
            ['create', '-n', ns.name, '-o', 'json', '-f', '-'],
            JSON.stringify(sandboxManifest(name, { annotations })),
          ),
        ) as { metadata: { name: string } };
      } catch (err) {
        if (!/no warm sandbox/.test(String(err)) || i > 100) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  };
  /** POST a request kind to a subresource with kubectl create --raw; the response kind, parsed. */
  const raw = async (name: string, sub: string, kind: string, fields: Record<string, unknown> = {}) =>
    JSON.parse(
      await env.kubectl(
        ['create', '--raw', path(name, sub), '-f', '-'],
        JSON.stringify({ apiVersion: `${GROUP}/v1beta1`, kind, ...fields }),
      ),
    );
  const sh = async (name: string, script: string) => {
    const out = await raw(name, 'exec', 'SandboxExecOptions', { command: ['sh', '-c', script] });
    assert.equal(out.exitCode, 0, `${script}: ${out.stderr}`);
    return String(out.stdout).trim();
  };
  const plugin = (...args: string[]) =>
    run(`${env.pluginDir}/kubectl-sandbox`, ['-n', ns.name, ...args], {
      env: { ...process.env, KUBECONFIG: env.cluster.kubeconfigPath },
    });
  const phase = async (name: string) =>
    JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandbox', name, '-o', 'json'])).metadata.labels[
      'sandbox.cocoonstack.io/phase'
    ];

  it('pause stops the guest clock; resume continues the same process with its memory', async () => {
    await create('clock');
    await sh(
      'clock',
      'mkdir -p /tmp && (i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $! > /tmp/pid',
    );
    await new Promise((r) => setTimeout(r, 500));
    // The loop's first write can take longer than that on a loaded machine (CI once read no /tmp/n yet).
    const before = await sh(
      'clock',
      'while [ ! -s /tmp/n ]; do sleep 0.05; done; cut -d" " -f1 /proc/uptime; cat /tmp/pid; cat /tmp/n',
    );
    const w0 = Date.now();
    const [up0, pid0, n0] = before.split('\n').map(Number);
    const paused = await raw('clock', 'pause', 'SandboxPauseOptions');
    const pausedAt = Date.now();
    assert.equal(paused.kind, 'SandboxPauseOptions');
    assert.ok(['Memory', 'Hibernate'].includes(paused.mode), JSON.stringify(paused));
    assert.equal(
      await phase('clock'),
      paused.mode === 'Memory' ? 'Paused' : 'Hibernated',
      'readers see the phase at once',
    );
    const ready = JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandbox', 'clock', '-o', 'json'])).status
      .conditions[0];
    assert.equal(ready.status, 'False');
    await new Promise((r) => setTimeout(r, 3000 - (Date.now() - pausedAt)));
    const resumeAt = Date.now();
    await raw('clock', 'resume', 'SandboxResumeOptions');
    assert.equal(await phase('clock'), 'Running');
    const afterOut = await sh(
      'clock',
      'cut -d" " -f1 /proc/uptime; cat /tmp/pid; kill -0 $(cat /tmp/pid) && echo alive; cat /tmp/n',
    );
    const w1 = Date.now();
    const [up1, pid1, alive] = afterOut.split('\n');
    // The guest's clock missed (almost) all of the time it was paused; everything else it saw.
    const missed = (w1 - w0) / 1000 - (Number(up1) - up0!);
    const pausedFor = (resumeAt - pausedAt) / 1000;
    assert.ok(
      missed >= 0.8 * pausedFor,
      `the guest clock missed ${missed.toFixed(2)} s of ${pausedFor.toFixed(2)} s paused`,
    );
    assert.equal(Number(pid1), pid0, 'the same process');
    assert.equal(alive, 'alive');
    await new Promise((r) => setTimeout(r, 500));
    const n2 = Number(await sh('clock', 'cat /tmp/n'));
    assert.ok(n2 > n0!, `the counter went on from ${n0} (now ${n2})`);
  });

  it('pause and resume through the kubectl plugin and @kubernetes/client-node, idempotent', async () => {
    await create('plug');
    const p1 = await plugin('pause', 'plug');
    assert.match(p1.stdout, /sandbox\/plug paused/);
    await plugin('pause', 'plug'); // idempotent
    await plugin('resume', 'plug');
    const kc = new KubeConfig();
    kc.loadFromFile(env.cluster.kubeconfigPath);
    const api = kc.makeApiClient(CustomObjectsApi);
    // client-node has no typed subresource POST for custom resources; its generic request path does it.
    const res = await fetchWithClientNode(kc, path('plug', 'pause'), {
      apiVersion: `${GROUP}/v1beta1`,
      kind: 'SandboxPauseOptions',
    });
    assert.equal(res.status, 201);
    await fetchWithClientNode(kc, path('plug', 'resume'), {
      apiVersion: `${GROUP}/v1beta1`,
      kind: 'SandboxResumeOptions',
    });
    const got = (await api.getNamespacedCustomObject({
      group: GROUP,
      version: 'v1beta1',
      namespace: ns.name,
      plural: 'sandboxes',
      name: 'plug',
    })) as {
      metadata: { labels: Record<string, string> };
    };
    assert.equal(got.metadata.labels['sandbox.cocoonstack.io/phase'], 'Running');
    const out = await plugin('exec', 'plug', '--', 'sh', '-c', 'echo hi; exit 3').catch(
      (e: { code: number; stdout: string }) => e,
    );
    assert.equal((out as { code?: number }).code, 3);
    assert.match((out as { stdout: string }).stdout, /hi/);
  });

  it('fork 2: both children see what the parent wrote before; later writes stay where they were made', async () => {
    await create('parent');
    await sh('parent', 'mkdir -p /tmp && echo before-fork > /tmp/f');
    const out = await raw('parent', 'fork', 'SandboxForkOptions', { count: 2 });
    assert.equal(out.kind, 'SandboxForkResult');
    const kids = out.children as Array<{ name: string; namespace: string; token: string; sandboxID: string }>;
    assert.equal(kids.length, 2);
    for (const k of kids) {
      assert.equal(k.namespace, ns.name);
      assert.match(k.name, /^parent-fork-[a-z0-9]{5}$/);
      assert.ok(k.token, 'the child token is in the fork answer');
      const obj = JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandbox', k.name, '-o', 'json']));
      assert.equal(obj.metadata.labels['sandbox.cocoonstack.io/forked-from'], 'parent');
      assert.equal(obj.metadata.annotations['sandbox.cocoonstack.io/token'], undefined, 'no token on reads');
      assert.equal(await sh(k.name, 'cat /tmp/f'), 'before-fork');
    }
    await sh(kids[0]!.name, 'echo child-0 > /tmp/f');
    assert.equal(await sh(kids[1]!.name, 'cat /tmp/f'), 'before-fork');
    assert.equal(await sh('parent', 'cat /tmp/f'), 'before-fork');
    const viaPlugin = await plugin('fork', 'parent', '--count', '1');
    assert.match(viaPlugin.stdout, /forked from parent/);
  });

  it('snapshot, then a Sandbox created from it has the parent’s file; another namespace cannot clone it', async () => {
    await create('snap-src');
    await sh('snap-src', 'mkdir -p /tmp && echo snapped > /tmp/s');
    const snap = await raw('snap-src', 'snapshot', 'SandboxSnapshotOptions', { name: 'mine' });
    assert.equal(snap.kind, 'SandboxSnapshotResult');
    assert.match(snap.snapshotID, /^ck_/);
    await create('from-snap', { 'sandbox.cocoonstack.io/snapshot': snap.snapshotID });
    assert.equal(await sh('from-snap', 'cat /tmp/s'), 'snapped');
    // Another namespace cannot clone it, even knowing its id: it reads as absent there (422, the field named).
    const other = await aggregatedNamespace('life-other');
    try {
      await assert.rejects(
        env.kubectl(
          ['create', '-n', other.name, '-f', '-'],
          JSON.stringify(
            sandboxManifest('thief', { annotations: { 'sandbox.cocoonstack.io/snapshot': snap.snapshotID } }),
          ),
        ),
        (err: Error) =>
          /is invalid.*metadata\.annotations\[sandbox\.cocoonstack\.io\/snapshot\].*is on no reachable node/s.test(
            err.message,
          ),
      );
    } finally {
      await other.cleanup();
    }
    // Nor can the e2b API, which serves another namespace: the snapshot is not in its list, and deleting it there
    // is a 404 that leaves it in place (a Sandbox is still created from it here).
    assert.notEqual(env.e2b.namespace, ns.name);
    const e2b = { 'x-api-key': env.e2b.apiKey };
    const listed = (await (await fetch(`${env.e2b.apiUrl}/snapshots`, { headers: e2b })).json()) as Array<{
      snapshotID: string;
    }>;
    assert.ok(!listed.some((x) => x.snapshotID === snap.snapshotID), JSON.stringify(listed));
    const del = await fetch(`${env.e2b.apiUrl}/templates/${snap.snapshotID}`, { method: 'DELETE', headers: e2b });
    assert.equal(del.status, 404);
    assert.deepEqual(Object.keys((await del.json()) as object).sort(), ['code', 'message']);
    await create('from-snap-2', { 'sandbox.cocoonstack.io/snapshot': snap.snapshotID });
    assert.equal(await sh('from-snap-2', 'cat /tmp/s'), 'snapped');
    const id = (await plugin('snapshot', 'snap-src')).stdout.trim();
    assert.match(id, /^ck_/);
  });

  it('RBAC per subresource: allowed to pause only, a user cannot fork or delete', async () => {
    await create('rbac');
    await env.kubectl([
      'create',
      'role',
      'pauser',
      '-n',
      ns.name,
      '--verb=create',
      '--resource=sandboxes.agents.x-k8s.io/pause',
    ]);
    await env.kubectl(['create', 'rolebinding', 'pauser', '-n', ns.name, '--role=pauser', '--user=pauser']);
    const as = ['--as=pauser'];
    await env.kubectl(['create', '--raw', path('rbac', 'pause'), ...as, '-f', '-'], '{}');
    await assert.rejects(
      env.kubectl(['create', '--raw', path('rbac', 'fork'), ...as, '-f', '-'], '{}'),
      /Forbidden|forbidden/,
    );
    await assert.rejects(env.kubectl(['delete', '-n', ns.name, 'sandbox', 'rbac', ...as]), /Forbidden|forbidden/);
    await raw('rbac', 'resume', 'SandboxResumeOptions');
  });

  it('refuses bad input with the right Status', async () => {
    await create('bad');
    await assert.rejects(
      raw('bad', 'fork', 'SandboxForkOptions', { count: 0 }),
      /count.*(>= 1|1\.\.|minimum|greater than or equal to 1)/i,
    );
    // Bounded by the schema, before a child is named: a count of 10^8 once spun the event loop naming children.
    for (const count of [17, 100_000_000])
      await assert.rejects(
        raw('bad', 'fork', 'SandboxForkOptions', { count }),
        /count in body should be less than or equal to 16/,
      );
    await assert.rejects(
      raw('bad', 'exec', 'SandboxExecOptions', { command: ['true'], timeoutSeconds: 3_000_000 }),
      /timeoutSeconds in body should be less than or equal to 86400/,
    );
    await assert.rejects(raw('nope', 'pause', 'SandboxPauseOptions'), /NotFound|not found/);
    await assert.rejects(raw('bad', 'fork', 'SandboxForkOptions', { bogus: 1 }), /unknown field "bogus"/);
    await raw('bad', 'pause', 'SandboxPauseOptions');
    await assert.rejects(raw('bad', 'fork', 'SandboxForkOptions', { count: 1 }), /resume it first/);
    await raw('bad', 'resume', 'SandboxResumeOptions');
    const egress = sandboxManifest('eg', { annotations: { 'sandbox.cocoonstack.io/net': 'egress' } });
    await createSandbox(env, ns.name, egress);
    // Every verb on the egress lane (issue 30): a networked VM pauses and resumes like any other.
    await raw('eg', 'pause', 'SandboxPauseOptions');
    await raw('eg', 'resume', 'SandboxResumeOptions');
  });
});

/** A POST through @kubernetes/client-node's own transport (its auth and TLS), for a subresource it has no method for. */
async function fetchWithClientNode(
  kc: KubeConfig,
  path: string,
  body: unknown,
): Promise<{ status: number; body: string }> {
  const { request } = await import('node:https');
  const opts: Record<string, unknown> = {};
  await kc.applyToHTTPSOptions(opts as never);
  const server = kc.getCurrentCluster()!.server;
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      `${server}${path}`,
      {
        ...opts,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
      },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}
