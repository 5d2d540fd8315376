/**
 * Deleting a snapshot through the Kubernetes API (issue 28 item 6): `sandboxsnapshots` (src/apiserver/sandboxes/
 * snapshots.ts) serves a namespace's checkpoints for get, list and delete, a delete reaches every node that holds a
 * copy, another namespace's snapshot reads as absent, discovery and the user roles carry the resource, and
 * `kubectl sandbox delete-snapshot` / `snapshots` call it. The nodes here are a recording fake: what is judged is
 * which requests the storage makes; the node's own delete (and its forwarding to peers) is docs/placement.md's.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { apiResourceList } from '../../src/apiserver/discovery.js';
import type { CheckpointRow } from '../../src/apiserver/sandboxes/checkpoints.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import type { Fleet } from '../../src/apiserver/sandboxes/fleet.js';
import { NodeHttpError, type SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SnapshotStorage } from '../../src/apiserver/sandboxes/snapshots.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { parseListOptions } from '../../src/apiserver/list-options.js';
import { StatusFailure } from '../../src/apiserver/status.js';
import { kubectlSandboxCommand } from '../../src/cli/kubectl-sandbox.js';
import { USER_ROLES } from '../../src/deploy/rbac.js';
import { silentLogger } from '../../src/log/logger.js';

const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' };
const row = (id: string, claimRef: string, name?: string): CheckpointRow => ({
  id,
  sandbox_id: `sb_${id}`,
  claim_ref: claimRef,
  created_at: '2026-12-01T00:00:00.000Z',
  key: KEY,
  ...(name ? { name } : {}),
});

function setup(failDeleteOn?: string) {
  const held: Record<string, CheckpointRow[]> = {
    'node-1': [row('ck_a1', 'team-a/a', 'before'), row('ck_b1', 'team-b/b')],
    // A pulled copy of team-a's snapshot (docs/placement.md): the same id on a second node.
    'node-2': [row('ck_a1', 'team-a/a', 'before')],
  };
  const calls: string[] = [];
  const client = {
    call: async (node: string, _address: string, method: string, path: string) => {
      calls.push(`${node} ${method} ${path}`);
      if (method === 'GET' && path === '/v1/checkpoints') return { checkpoints: held[node] };
      const m = /^\/v1\/checkpoints\/([^/?]+)$/.exec(path);
      if (method === 'DELETE' && m) {
        if (node === failDeleteOn) throw new NodeHttpError(node, 500, 'DELETE /v1/checkpoints failed (incident x)');
        held[node] = held[node]!.filter((c) => c.id !== decodeURIComponent(m[1]!));
        return undefined;
      }
      throw new Error(`unexpected ${method} ${path}`);
    },
  } as unknown as SandboxdClient;
  const fleet = {
    nodeNames: () => ['node-1', 'node-2'],
    address: (n: string) => `127.0.0.1:${n === 'node-1' ? 1 : 2}`,
    isSynced: () => true,
  } as unknown as Fleet;
  const storage = new SnapshotStorage(new SandboxStore(silentLogger, new EventLog(8)), fleet, client);
  return { storage, calls, held };
}

const everything = (storage: SnapshotStorage) => parseListOptions(new URLSearchParams(), storage.fields);

describe('sandboxsnapshots', () => {
  it("lists a namespace's snapshots once each, with every node that holds one", async () => {
    const { storage } = setup();
    const a = await storage.list('team-a', everything(storage));
    assert.deepEqual(
      a.items.map((i) => storage.renderer.toObject(i)),
      [
        {
          apiVersion: 'agents.x-k8s.io/v1beta1',
          kind: 'SandboxSnapshot',
          metadata: {
            name: 'ck_a1',
            namespace: 'team-a',
            uid: a.items[0] && storage.renderer.metadataOf(a.items[0]).uid,
            creationTimestamp: '2026-12-01T00:00:00Z',
          },
          snapshotName: 'before',
          sandboxName: 'a',
          nodeNames: ['node-1', 'node-2'],
          template: KEY.template,
          net: KEY.net,
          size: KEY.size,
        },
      ],
    );
    const all = await storage.list('', everything(storage));
    assert.deepEqual(
      all.items.map((i) => `${i.namespace}/${i.id}`),
      ['team-a/ck_a1', 'team-b/ck_b1'],
    );
  });

  it('shows its copies by node name from the newest count a holder made; none before any count', async () => {
    const { storage, held } = setup();
    const unrendered = storage.renderer.toObject(await storage.get('team-a', 'ck_a1')) as { copies?: unknown };
    assert.equal(unrendered.copies, undefined, 'no holder has counted: no copies, not a zero');
    const copiesCell = storage.renderer.columns.find((c) => c.name === 'Copies')!;
    assert.equal(copiesCell.cell(await storage.get('team-a', 'ck_a1'), Date.now()), '');
    held['node-1']![0] = {
      ...held['node-1']![0]!,
      copies: { nodes: ['127.0.0.1:1'], want: 2, checked_at: '2026-12-01T00:00:01.000Z' },
    };
    held['node-2']![0] = {
      ...held['node-2']![0]!,
      copies: { nodes: ['127.0.0.1:2', '127.0.0.1:1'], want: 2, checked_at: '2026-12-01T00:00:02.000Z' },
    };
    const item = await storage.get('team-a', 'ck_a1');
    assert.deepEqual((storage.renderer.toObject(item) as { copies?: unknown }).copies, {
      count: 2,
      want: 2,
      nodes: ['node-1', 'node-2'],
      checkedAt: '2026-12-01T00:00:02.000Z',
    });
    assert.equal(copiesCell.cell(item, Date.now()), '2/2');
  });

  it("reads another namespace's snapshot as absent, and does not delete it", async () => {
    const { storage, calls } = setup();
    await assert.rejects(storage.get('team-b', 'ck_a1'), (e: StatusFailure) => e.status.code === 404);
    await assert.rejects(
      storage.delete('team-b', 'ck_a1', { dryRun: false }),
      (e: StatusFailure) => e.status.code === 404 && e.status.details?.kind === 'sandboxsnapshots',
    );
    assert.ok(!calls.some((c) => c.includes('DELETE')), calls.join('\n'));
  });

  it('deletes from every node that holds a copy; dry run deletes nothing', async () => {
    const { storage, calls, held } = setup();
    const dry = await storage.delete('team-a', 'ck_a1', { dryRun: true });
    assert.equal(dry.metadata?.name, 'ck_a1');
    assert.ok(!calls.some((c) => c.includes('DELETE')));
    const uid = storage.renderer.metadataOf(await storage.get('team-a', 'ck_a1')).uid;
    await assert.rejects(
      storage.delete('team-a', 'ck_a1', { uid: 'not-it', dryRun: false }),
      (e: StatusFailure) => e.status.code === 409,
    );
    const gone = await storage.delete('team-a', 'ck_a1', { uid, dryRun: false });
    assert.equal(gone.kind, 'SandboxSnapshot');
    assert.deepEqual(calls.filter((c) => c.includes('DELETE')).sort(), [
      'node-1 DELETE /v1/checkpoints/ck_a1',
      'node-2 DELETE /v1/checkpoints/ck_a1',
    ]);
    assert.deepEqual(
      held['node-1']!.map((c) => c.id),
      ['ck_b1'],
    );
    assert.deepEqual(held['node-2'], []);
    await assert.rejects(storage.get('team-a', 'ck_a1'), (e: StatusFailure) => e.status.code === 404);
  });

  it('a node that fails its delete is named, and the delete is to be retried (503)', async () => {
    const { storage } = setup('node-2');
    await assert.rejects(
      storage.delete('team-a', 'ck_a1', { dryRun: false }),
      (e: StatusFailure) =>
        e.status.code === 503 &&
        /node node-2 did not delete its copy/.test(e.status.message) &&
        !!e.headers['retry-after'],
    );
  });

  it('is in discovery with get, list and delete; watch and create are 405', async () => {
    const { storage } = setup();
    const list = apiResourceList([storage.descriptor], 'agents.x-k8s.io', 'v1beta1');
    const r = list?.resources.find((x) => x.name === 'sandboxsnapshots');
    assert.deepEqual(r?.verbs, ['delete', 'get', 'list']);
    assert.equal(r?.kind, 'SandboxSnapshot');
    assert.throws(
      () => storage.watch(),
      (e: StatusFailure) => e.status.code === 405,
    );
    assert.throws(
      () => storage.create(),
      (e: StatusFailure) => e.status.code === 405,
    );
  });

  it('the edit role may delete snapshots; view may only read them', () => {
    const rules = (suffix: string) =>
      USER_ROLES.find((r) => r.suffix === suffix)!.rules.filter((r) => r.resources?.includes('sandboxsnapshots'));
    assert.deepEqual(
      rules('edit').flatMap((r) => r.verbs),
      ['get', 'list', 'delete'],
    );
    assert.deepEqual(
      rules('view').flatMap((r) => r.verbs),
      ['get', 'list'],
    );
  });
});

describe('kubectl sandbox snapshots / delete-snapshot', () => {
  it('lists and deletes through the sandboxsnapshots resource', async () => {
    const seen: string[] = [];
    const server = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      const body =
        req.method === 'GET'
          ? {
              kind: 'SandboxSnapshotList',
              items: [
                {
                  metadata: { name: 'ck_a1', creationTimestamp: '2026-12-01T00:00:00Z' },
                  snapshotName: 'before',
                  sandboxName: 'a',
                  nodeNames: ['node-1'],
                },
              ],
            }
          : { kind: 'SandboxSnapshot', metadata: { name: 'ck_a1' } };
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const dir = await mkdtemp(join(tmpdir(), 'sbx-kubectl-sandbox-'));
    const kubeconfig = join(dir, 'kubeconfig');
    const port = (server.address() as { port: number }).port;
    await writeFile(
      kubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'c', cluster: { server: `http://127.0.0.1:${port}`, 'insecure-skip-tls-verify': true } }],
        users: [{ name: 'u', user: { token: 't' } }],
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u', namespace: 'team-a' } }],
        'current-context': 'x',
      }),
    );
    const out: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((s: string) => (out.push(String(s)), true)) as typeof process.stdout.write;
    try {
      await kubectlSandboxCommand().parseAsync(['node', 'kubectl-sandbox', '--kubeconfig', kubeconfig, 'snapshots']);
      await kubectlSandboxCommand().parseAsync([
        'node',
        'kubectl-sandbox',
        '--kubeconfig',
        kubeconfig,
        'delete-snapshot',
        'ck_a1',
      ]);
    } finally {
      process.stdout.write = write;
      server.close();
      await rm(dir, { recursive: true, force: true });
    }
    assert.deepEqual(seen, [
      'GET /apis/agents.x-k8s.io/v1beta1/namespaces/team-a/sandboxsnapshots',
      'DELETE /apis/agents.x-k8s.io/v1beta1/namespaces/team-a/sandboxsnapshots/ck_a1',
    ]);
    assert.match(out.join(''), /^ck_a1\tbefore\ta\tnode-1\t2026-12-01T00:00:00Z\n/);
    assert.match(out.join(''), /sandboxsnapshot\/ck_a1 deleted/);
  });
});
