/**
 * `kubectl drain` of a sandboxd virtual node keeps a Sandbox's state (docs/virtual-kubelet.md "Draining the node",
 * issue 33 item 4) on a private CRD-layout platform: two sandboxd nodes with real microVMs and sandbox-operator (its
 * own control plane: it drains a node, which no other file may share). A Sandbox's Pod runs on one node with a file
 * written in its VM; `kubectl drain` cordons that node (the node hibernates its sandboxes and publishes their
 * records) and evicts the Pod; the node keeps the claim for the replacement instead of releasing it; the Sandbox
 * controller makes a new Pod of the same name, the scheduler puts it on the other node, and that node's virtual
 * kubelet resumes it from the record: the file is there. The old node then lets its claim go.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { readClusterEnvironment, runKubectl } from '../../src/cluster/index.js';
import { startPlatform, type Platform } from '../../src/cli/platform.js';
import { createLogger } from '../../src/log/logger.js';
import { TEST_TEMPLATE } from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';
import { call } from '../support/sandboxd-daemon.js';

interface PodObj {
  metadata: { uid: string };
  spec: { nodeName?: string };
  status?: { conditions?: Array<{ type: string; status: string }> };
}
const ready = (p: PodObj | undefined) =>
  p?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

describe('kubectl drain of a sandboxd node: the Sandbox resumes on the other node with its files (CRD layout)', () => {
  let platform: Platform;
  let dataDir: string;
  let kubectl: (args: string[], input?: string) => Promise<string>;
  const ns = `vkdrain-${randomBytes(3).toString('hex')}`;
  const pod = async (name: string) => JSON.parse(await kubectl(['get', 'pod', name, '-n', ns, '-o', 'json'])) as PodObj;
  const podOrUndefined = (name: string) => pod(name).catch(() => undefined);
  const exec = (name: string, script: string) => kubectl(['exec', '-n', ns, name, '--', 'sh', '-c', script]);

  before(async () => {
    const env = readClusterEnvironment();
    dataDir = await mkdtemp(join(tmpdir(), 'sbx-vkdrain-'));
    platform = await startPlatform({
      cacheDir: env.cacheDir,
      binDir: env.binDir,
      dataDir,
      layout: 'crd',
      simulatedNodes: 0,
      sandboxdNodes: 2,
      warm: 1,
      template: TEST_TEMPLATE,
      pools: `${TEST_TEMPLATE}=1`,
      etcdFsync: false,
      logger: createLogger({ level: 'warn', name: 'vkdrain' }),
      progress: (l) => process.stderr.write(`[vkdrain] ${l}\n`),
    });
    kubectl = (args, input) =>
      runKubectl(platform.cluster.binaries.kubectl ?? 'kubectl', platform.cluster.kubeconfigPath, args, input);
    await kubectl(['create', 'namespace', ns]);
  });
  after(async () => {
    await platform?.stop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('the evicted Pod’s replacement resumes the sandbox from its hibernation record on the other node', async () => {
    await kubectl(
      ['create', '-n', ns, '-f', '-'],
      JSON.stringify({
        apiVersion: 'agents.x-k8s.io/v1alpha1',
        kind: 'Sandbox',
        metadata: { name: 'agent' },
        spec: {
          podTemplate: {
            metadata: { annotations: { 'sandbox.cocoonstack.io/runtime': 'sandboxd' } },
            spec: { containers: [{ name: 'main', image: TEST_TEMPLATE }] },
          },
        },
      }),
    );
    const first = await eventually(() => podOrUndefined('agent'), {
      until: ready,
      timeoutMs: 180_000,
      intervalMs: 500,
      what: "the Sandbox's Pod Ready",
    });
    const origin = first!.spec.nodeName!;
    const marker = `before-the-drain-${randomBytes(4).toString('hex')}`;
    await exec('agent', `echo ${marker} > /root/marker`);

    const t0 = Date.now();
    await kubectl(['drain', origin, '--ignore-daemonsets', '--timeout=180s']);
    process.stderr.write(`[vkdrain] kubectl drain ${origin} returned after ${Date.now() - t0} ms\n`);

    const replacement = await eventually(() => podOrUndefined('agent'), {
      until: (p) => ready(p) && p!.metadata.uid !== first!.metadata.uid,
      timeoutMs: 180_000,
      intervalMs: 500,
      what: 'the replacement Pod Ready',
    });
    assert.notEqual(replacement!.spec.nodeName, origin, 'the replacement runs on the other node');
    assert.equal((await exec('agent', 'cat /root/marker')).trim(), marker, 'with the file written before the drain');

    const events = JSON.parse(
      await kubectl(['get', 'events', '-n', ns, '--field-selector', 'reason=SandboxResumedFromRecord', '-o', 'json']),
    ) as { items: Array<{ message?: string; involvedObject?: { uid?: string } }> };
    const mine = events.items.filter((e) => e.involvedObject?.uid === replacement!.metadata.uid);
    assert.equal(mine.length, 1, JSON.stringify(events.items));
    assert.match(
      mine[0]!.message ?? '',
      /resumed here from .*hibernation record ck_\w+ \((held here|fetched from a peer, [^)]+)\)/,
    );
    process.stderr.write(`[vkdrain] ${mine[0]!.message}; Ready ${Date.now() - t0} ms after the drain began\n`);

    // The drained node lets its kept claim go once the record is consumed: nothing of the sandbox is left there.
    const daemon = platform.sandboxd.find((d) => origin.startsWith(`${d.node}-`))!;
    const token = readFileSync(daemon.tokenFile, 'utf8').trim();
    await eventually(
      async () =>
        (
          (await call(`http://${daemon.address}`, 'GET', '/v1/sandboxes', undefined, token)).json.sandboxes as Array<{
            claim_ref?: string;
          }>
        ).filter((r) => r.claim_ref === `${ns}/agent`).length,
      { until: (n) => n === 0, timeoutMs: 30_000, what: 'the kept claim released on the drained node' },
    );
    await kubectl(['uncordon', origin]);
  });
});
