/**
 * The aggregated API through real kubectl 1.36 and the real kube-aggregator: discovery, tables, YAML, watch,
 * selectors, paging, create/wait/delete, explain, can-i (issue: sandbox-apiserver acceptance, kubectl part).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { parse } from 'yaml';
import {
  aggregatedNamespace,
  createSandbox,
  getAggregated,
  sandboxManifest,
  type AggregatedEnv,
} from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';

describe('sandbox-apiserver through kubectl', () => {
  let env: AggregatedEnv;
  let ns: { name: string; cleanup(): Promise<void> };
  before(async () => {
    env = await getAggregated();
    ns = await aggregatedNamespace('kctl');
  });
  after(async () => ns?.cleanup());

  const create = async (name: string, extra: Parameters<typeof sandboxManifest>[1] = {}) =>
    JSON.parse(await createSandbox(env, ns.name, sandboxManifest(name, extra), ['-o', 'json']));

  it('lists sandboxes in api-resources', async () => {
    const out = await env.kubectl(['api-resources', '--api-group=agents.x-k8s.io', '-o', 'wide']);
    const line = out.split('\n').find((l) => l.startsWith('sandboxes '));
    assert.ok(line, out);
    for (const verb of ['create', 'delete', 'get', 'list', 'watch']) assert.match(line!, new RegExp(verb));
    assert.match(line!, /true\s+Sandbox/); // namespaced
  });

  it('creates with Ready in the response, and the claim annotations (token only here)', async () => {
    const obj = await create('first');
    assert.equal(obj.metadata.name, 'first');
    assert.ok(obj.metadata.uid);
    const ready = obj.status.conditions.find((c: { type: string }) => c.type === 'Ready');
    assert.equal(ready.status, 'True');
    const a = obj.metadata.annotations;
    assert.match(a['sandbox.cocoonstack.io/claim-id'], /^sb_[0-9a-f]+$/);
    assert.ok(a['sandbox.cocoonstack.io/token']);
    assert.ok(env.sandboxd.some((n) => n.node === obj.status.nodeName));
    const got = JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandbox', 'first', '-o', 'json']));
    assert.equal(got.metadata.uid, obj.metadata.uid, 'uid is stable across reads');
    assert.equal(got.metadata.annotations['sandbox.cocoonstack.io/token'], undefined, 'no token on get');
    const yaml = parse(await env.kubectl(['get', '-n', ns.name, 'sandbox', 'first', '-o', 'yaml']));
    assert.equal(yaml.spec.podTemplate.spec.containers[0].image, 'sandbox/minimal');
  });

  it('prints a table with node, phase, claim, deadline and age, -o wide adds more', async () => {
    await create('tabled');
    const out = await env.kubectl(['get', 'sandboxes', '-A', '-o', 'wide']);
    const [header, ...rows] = out.trim().split('\n');
    for (const col of ['NAMESPACE', 'NAME', 'PHASE', 'NODE', 'CLAIM', 'DEADLINE', 'AGE', 'TEMPLATE', 'ADDRESS'])
      assert.match(header!, new RegExp(`\\b${col}\\b`), header);
    const row = rows.find((r) => r.includes(' tabled '));
    assert.ok(row, out);
    assert.match(row!, /Running/);
    assert.match(row!, /sb_[0-9a-f]+/);
    assert.match(row!, /in \d/);
    const narrow = (await env.kubectl(['get', 'sandboxes', '-n', ns.name])).split('\n')[0]!;
    assert.doesNotMatch(narrow, /TEMPLATE/);
  });

  it('filters by label and field selectors', async () => {
    const a = await create('sel-a', { labels: { team: 'blue' } });
    await create('sel-b', { labels: { team: 'red' } });
    const byLabel = JSON.parse(await env.kubectl(['get', 'sandboxes', '-n', ns.name, '-l', 'team=blue', '-o', 'json']));
    assert.deepEqual(
      byLabel.items.map((i: { metadata: { name: string } }) => i.metadata.name),
      ['sel-a'],
    );
    const node = a.status.nodeName as string;
    const byNode = JSON.parse(
      await env.kubectl(['get', 'sandboxes', '-A', '-l', `sandbox.cocoonstack.io/node=${node}`, '-o', 'json']),
    );
    assert.ok(byNode.items.length >= 1);
    assert.ok(byNode.items.every((i: { status: { nodeName: string } }) => i.status.nodeName === node));
    const byField = JSON.parse(
      await env.kubectl(['get', 'sandboxes', '-n', ns.name, '--field-selector', 'metadata.name=sel-b', '-o', 'json']),
    );
    assert.deepEqual(
      byField.items.map((i: { metadata: { name: string } }) => i.metadata.name),
      ['sel-b'],
    );
    const byPhase = JSON.parse(
      await env.kubectl([
        'get',
        'sandboxes',
        '-n',
        ns.name,
        '--field-selector',
        'status.phase=Running,metadata.name!=sel-b',
        '-o',
        'json',
      ]),
    );
    assert.ok(byPhase.items.every((i: { metadata: { name: string } }) => i.metadata.name !== 'sel-b'));
    await assert.rejects(
      env.kubectl(['get', 'sandboxes', '-n', ns.name, '--field-selector', 'spec.foo=bar']),
      /field label not supported/,
    );
  });

  it('pages with --chunk-size=2 over 5 sandboxes', async () => {
    const pns = await aggregatedNamespace('page');
    try {
      for (let i = 0; i < 5; i++) await createSandbox(env, pns.name, sandboxManifest(`p${i}`));
      const out = await env.kubectl(['get', 'sandboxes', '-n', pns.name, '--chunk-size=2', '-o', 'name']);
      const names = out.split('\n').filter((l) => l.startsWith('sandbox'));
      assert.deepEqual(
        names.map((n) => n.split('/')[1]),
        ['p0', 'p1', 'p2', 'p3', 'p4'],
      );
      const page = JSON.parse(
        await env.kubectl(['get', '--raw', `/apis/agents.x-k8s.io/v1beta1/namespaces/${pns.name}/sandboxes?limit=2`]),
      );
      assert.equal(page.items.length, 2);
      assert.ok(page.metadata.continue, 'a continue token');
      const next = JSON.parse(
        await env.kubectl([
          'get',
          '--raw',
          `/apis/agents.x-k8s.io/v1beta1/namespaces/${pns.name}/sandboxes?limit=2&continue=${page.metadata.continue}`,
        ]),
      );
      assert.deepEqual(
        next.items.map((i: { metadata: { name: string } }) => i.metadata.name),
        ['p2', 'p3'],
      );
    } finally {
      await pns.cleanup();
    }
  });

  it('waits for Ready, deletes (kubectl waits for the 404), and get says NotFound', async () => {
    await create('waited');
    await env.kubectl(['wait', '-n', ns.name, '--for=condition=Ready', 'sandbox/waited', '--timeout=30s']);
    const out = await env.kubectl(['delete', '-n', ns.name, 'sandbox', 'waited', '--timeout=30s']);
    assert.match(out, /deleted/);
    await assert.rejects(env.kubectl(['get', '-n', ns.name, 'sandbox', 'waited']), /NotFound|not found/);
  });

  it('watches with -w: sees a create and a delete pushed, not polled', async () => {
    const child = spawn(
      env.cluster.binaries.kubectl!,
      [`--kubeconfig=${env.cluster.kubeconfigPath}`, 'get', 'sandboxes', '-n', ns.name, '-w', '--output-watch-events'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    try {
      await eventually(() => out, {
        until: (o) => /ADDED\s+first\s/.test(o),
        what: 'the initial list',
        timeoutMs: 15_000,
      });
      await create('watched');
      await eventually(() => out, {
        until: (o) => /ADDED\s+watched\s+Running/.test(o),
        what: 'ADDED watched',
        timeoutMs: 5000,
      });
      await env.kubectl(['delete', '-n', ns.name, 'sandbox', 'watched', '--wait=false']);
      await eventually(() => out, {
        until: (o) => /DELETED\s+watched\s/.test(o),
        what: 'DELETED watched',
        timeoutMs: 5000,
      });
    } finally {
      child.kill();
    }
  });

  it('explains sandbox.spec from the OpenAPI the server publishes', async () => {
    const out = await env.kubectl(['explain', 'sandbox.spec']);
    assert.match(out, /KIND:\s+Sandbox/);
    assert.match(out, /podTemplate/);
    assert.match(out, /shutdownTime/);
  });

  it('answers can-i from RBAC', async () => {
    assert.equal((await env.kubectl(['auth', 'can-i', 'create', 'sandboxes', '-n', ns.name])).trim(), 'yes');
    const no = await env
      .kubectl(['auth', 'can-i', 'create', 'sandboxes', '-n', ns.name, '--as=nobody-in-particular'])
      .catch((e: Error) => e.message);
    assert.match(no, /no/);
  });
});
