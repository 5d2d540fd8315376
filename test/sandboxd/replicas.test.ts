/**
 * Checkpoint replicas (docs/placement.md "Replicas", issue 33 item 1) on a private aggregated platform of three
 * sandboxd nodes with real microVMs (its own control plane: it kills a node, which no other file may share): a
 * snapshot taken through the Kubernetes API is on two nodes soon after, as SandboxSnapshot `nodeNames` and the
 * origin's `GET /v1/checkpoints` `copies` say; the origin's sandboxd is then killed with SIGKILL and its data dir
 * deleted, and a Sandbox created from the snapshot starts on another node with the files written before it. The
 * survivors copy it again until two nodes hold it.
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
import { killRecorded, readRecords } from '../../src/vmm/run-records.js';
import { sandboxManifest, TEST_TEMPLATE } from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';
import { call } from '../support/sandboxd-daemon.js';

const GROUP = 'agents.x-k8s.io';
const BASE = `/apis/${GROUP}/v1beta1`;
const SNAPSHOT_ANNOTATION = 'sandbox.cocoonstack.io/snapshot';
/** The stated bound: a snapshot of a small VM (256 MiB of RAM, mostly holes) is on two nodes within this. */
const REPLICATED_WITHIN_MS = 120_000;

describe('checkpoint replicas on three nodes (real microVMs, aggregated layout)', () => {
  let platform: Platform;
  let dataDir: string;
  let kubectl: (args: string[], input?: string) => Promise<string>;
  const ns = `replicas-${randomBytes(3).toString('hex')}`;

  const sh = async (name: string, script: string) => {
    const out = JSON.parse(
      await kubectl(
        ['create', '--raw', `${BASE}/namespaces/${ns}/sandboxes/${name}/exec`, '-f', '-'],
        JSON.stringify({ apiVersion: `${GROUP}/v1beta1`, kind: 'SandboxExecOptions', command: ['sh', '-c', script] }),
      ),
    );
    assert.equal(out.exitCode, 0, `${script}: ${out.stderr}`);
    return String(out.stdout).trim();
  };
  const create = async (manifest: object) => {
    for (let i = 0; ; i++) {
      try {
        return JSON.parse(await kubectl(['create', '-n', ns, '-o', 'json', '-f', '-'], JSON.stringify(manifest)));
      } catch (err) {
        // One warm VM per node: a create right after another may find the pool refilling.
        if (!/no warm sandbox/.test(String(err)) || i > 600) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  };
  const snapshotNodes = async (id: string): Promise<string[]> =>
    (JSON.parse(await kubectl(['get', 'sandboxsnapshot', id, '-n', ns, '-o', 'json'])) as { nodeNames: string[] })
      .nodeNames;

  before(async () => {
    const env = readClusterEnvironment();
    dataDir = await mkdtemp(join(tmpdir(), 'sbx-replicas-'));
    platform = await startPlatform({
      cacheDir: env.cacheDir,
      binDir: env.binDir,
      dataDir,
      layout: 'aggregated',
      simulatedNodes: 0,
      sandboxdNodes: 3,
      warm: 1,
      template: TEST_TEMPLATE,
      pools: `${TEST_TEMPLATE}=1`,
      // No placement flags: the defaults (--checkpoint-replicas 2, a recount every 30 s) are what is tested.
      etcdFsync: false,
      logger: createLogger({ level: 'warn', name: 'replicas' }),
      progress: (l) => process.stderr.write(`[replicas] ${l}\n`),
    });
    kubectl = (args, input) =>
      runKubectl(platform.cluster.binaries.kubectl ?? 'kubectl', platform.cluster.kubeconfigPath, args, input);
    await kubectl(['create', 'namespace', ns]);
  });
  after(async () => {
    await platform?.stop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('a snapshot is copied to a second node; with its node and data gone, a Sandbox is created from it elsewhere', async () => {
    const src = await create(sandboxManifest('src'));
    const origin: string = src.status.nodeName;
    const marker = `written-before-${randomBytes(4).toString('hex')}`;
    await sh('src', `mkdir -p /tmp && echo ${marker} > /tmp/marker`);
    const snap = JSON.parse(
      await kubectl(
        ['create', '--raw', `${BASE}/namespaces/${ns}/sandboxes/src/snapshot`, '-f', '-'],
        JSON.stringify({ apiVersion: `${GROUP}/v1beta1`, kind: 'SandboxSnapshotOptions', name: 'kept' }),
      ),
    );
    const id = snap.snapshotID as string;
    assert.match(id, /^ck_/);
    const t0 = Date.now();
    const holders = await eventually(() => snapshotNodes(id), {
      until: (n) => n.length >= 2,
      timeoutMs: REPLICATED_WITHIN_MS,
      intervalMs: 500,
      what: `snapshot ${id} held by two nodes (it is on ${origin})`,
    });
    process.stderr.write(`[replicas] ${id} on ${holders.join(',')} ${Date.now() - t0} ms after the snapshot\n`);
    assert.ok(holders.includes(origin), JSON.stringify(holders));
    assert.equal(holders.length, 2, `two copies, not three: ${JSON.stringify(holders)}`);

    // The origin's own view: where the copies are and how many it wants.
    const node0 = platform.sandboxd.find((n) => n.node === origin)!;
    const token = readFileSync(node0.tokenFile, 'utf8').trim();
    const other = platform.sandboxd.find((n) => n.node !== origin && holders.includes(n.node))!;
    const listed = await eventually(
      async () =>
        (await call(`http://${node0.address}`, 'GET', '/v1/checkpoints', undefined, token)).json.checkpoints as Array<{
          id: string;
          copies?: { nodes: string[]; want: number };
        }>,
      {
        until: (cks) => (cks.find((c) => c.id === id)?.copies?.nodes.length ?? 0) >= 2,
        timeoutMs: 30_000,
        what: 'the origin lists the copies',
      },
    );
    const copies = listed.find((c) => c.id === id)!.copies!;
    assert.deepEqual(copies.nodes, [node0.address, other.address].sort());
    assert.equal(copies.want, 2);

    // The origin dies (SIGKILL) and its disk is lost: its VMs are killed and its data dir removed.
    const proc = platform.components.find((c) => c.name === `sandboxd-${origin}`)!;
    process.kill(proc.pid, 'SIGKILL');
    await eventually(async () => isAlive(proc.pid), { until: (a) => !a, timeoutMs: 30_000, what: 'sandboxd gone' });
    for (const rec of readRecords(node0.vmRunRoot)) await killRecorded(rec, node0.vmRunRoot);
    await rm(join(dataDir, origin, 'data'), { recursive: true, force: true });
    await rm(node0.vmRunRoot, { recursive: true, force: true });

    const restored = await eventually(
      () =>
        create(sandboxManifest('restored', { annotations: { [SNAPSHOT_ANNOTATION]: id } })).catch((err: unknown) => ({
          err: String(err),
        })),
      {
        until: (r) => !('err' in r),
        timeoutMs: 120_000,
        intervalMs: 2000,
        what: 'a Sandbox from the snapshot once its node is gone',
      },
    );
    assert.notEqual(restored.status.nodeName, origin);
    assert.equal(await sh('restored', 'cat /tmp/marker'), marker);

    // The survivors notice the lost copy and make another: two nodes hold it again, neither of them the origin.
    const again = await eventually(() => snapshotNodes(id), {
      until: (n) => n.length >= 2 && !n.includes(origin),
      timeoutMs: REPLICATED_WITHIN_MS,
      intervalMs: 1000,
      what: `snapshot ${id} re-replicated after ${origin} was lost`,
    });
    assert.equal(again.length, 2, JSON.stringify(again));
  });
});

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
