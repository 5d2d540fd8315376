/**
 * SandboxWarmPools in the aggregated layout are filled by the nodes: the driver in sandbox-apiserver spreads a
 * pool over the two nodes (3 + 3 for 6), follows `kubectl scale`, drains on delete, keeps its targets when the
 * template cannot be read, never touches the nodes' own pools, and is the one writer of the pool's status.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import {
  aggregatedNamespace,
  getAggregated,
  TEST_TEMPLATE,
  TEST_WARM,
  type AggregatedEnv,
} from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';

interface Pool {
  key: { template: string; net: string; size: string };
  warm: number;
  target: number;
  owner?: string;
}

describe('aggregated layout: the warm-pool driver', () => {
  let env: AggregatedEnv;
  let ns: { name: string; cleanup(): Promise<void> };
  let info: (node: (typeof env.sandboxd)[number]) => Promise<Pool[]>;
  before(async () => {
    env = await getAggregated();
    ns = await aggregatedNamespace('wpd');
    const tokens = new Map<string, string>();
    info = async (node) => {
      if (!tokens.has(node.node)) tokens.set(node.node, (await readFile(node.tokenFile, 'utf8')).trim());
      const res = await fetch(`http://${node.address}/v1/info`, {
        headers: { authorization: `Bearer ${tokens.get(node.node)}` },
      });
      return ((await res.json()) as { pools: Pool[] }).pools;
    };
  });
  after(async () => ns?.cleanup());

  /** A pool of its own key (size medium), so the nodes' own sandbox/minimal pools are not this test's. */
  const template = JSON.stringify({
    apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
    kind: 'SandboxTemplate',
    metadata: { name: 'tpl', annotations: { 'sandbox.cocoonstack.io/size': 'medium' } },
    spec: { podTemplate: { spec: { containers: [{ name: 'main', image: TEST_TEMPLATE }] } } },
  });
  const targets = async () =>
    Promise.all(
      env.sandboxd.map(async (n) =>
        (await info(n)).find((p) => p.key.size === 'medium' && p.key.template === TEST_TEMPLATE),
      ),
    );

  it('fills a pool of 6 as 3 + 3, follows scale, keeps targets while the template is unreadable, drains on delete', async () => {
    await env.kubectl(['apply', '-n', ns.name, '-f', '-'], template);
    await env.kubectl(
      ['apply', '-n', ns.name, '-f', '-'],
      JSON.stringify({
        apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
        kind: 'SandboxWarmPool',
        metadata: { name: 'pool' },
        spec: { replicas: 6, sandboxTemplateRef: { name: 'tpl' } },
      }),
    );
    const filled = await eventually(targets, {
      until: (ps) => ps.every((p) => p?.target === 3 && p.warm === 3),
      timeoutMs: 120_000,
      intervalMs: 1000,
      what: '3 + 3 warm',
    });
    assert.ok(filled.every((p) => p?.owner === 'warm-pool-driver'));
    const status = await eventually(
      async () => JSON.parse(await env.kubectl(['get', '-n', ns.name, 'sandboxwarmpool', 'pool', '-o', 'json'])),
      {
        until: (p) => p.status?.readyReplicas === 6 && p.status?.replicas === 6,
        timeoutMs: 30_000,
        what: 'status 6/6',
      },
    );
    assert.equal(status.metadata.annotations['sandbox.cocoonstack.io/served-by'], 'sandbox-apiserver');

    const t0 = Date.now();
    await env.kubectl(['scale', '-n', ns.name, 'sandboxwarmpool', 'pool', '--replicas=2']);
    await eventually(targets, {
      until: (ps) => ps.every((p) => p?.target === 1 && p.warm === 1),
      timeoutMs: 30_000,
      what: '1 + 1',
    });
    const moved = Date.now() - t0;
    assert.ok(moved < 10_000, `targets moved in ${moved} ms`);

    // The template goes away (unreadable) for 30 s: nothing drains.
    await env.kubectl(['delete', '-n', ns.name, 'sandboxtemplate', 'tpl']);
    const stopAt = Date.now() + 30_000;
    while (Date.now() < stopAt) {
      const ps = await targets();
      assert.ok(
        ps.every((p) => p?.target === 1),
        `targets changed while the template was unreadable: ${JSON.stringify(ps)}`,
      );
      await new Promise((r) => setTimeout(r, 2000));
    }
    await env.kubectl(['apply', '-n', ns.name, '-f', '-'], template);

    await env.kubectl(['delete', '-n', ns.name, 'sandboxwarmpool', 'pool']);
    await eventually(targets, {
      until: (ps) => ps.every((p) => !p || (p.target === 0 && p.warm === 0)),
      timeoutMs: 30_000,
      what: 'drained',
    });
  });

  it("never drains the nodes' own pools", async () => {
    for (const n of env.sandboxd) {
      const own = (await info(n)).find(
        (p) => p.key.template === TEST_TEMPLATE && p.key.size === 'small' && p.key.net === 'none',
      );
      assert.equal(own?.target, TEST_WARM, `${n.node}'s --pools target`);
      assert.equal(own?.owner, undefined);
    }
  });
});
