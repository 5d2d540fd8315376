/**
 * The e2b API end to end with the unmodified e2b SDK (npm e2b, pinned) against the aggregated layout exactly as
 * `sbx up --layout aggregated` starts it: the control plane on E2B_API_URL, the data plane through the router on
 * E2B_SANDBOX_URL, real microVMs (template sandbox/base through the alias `base`). Each sandbox is also an ordinary
 * sandbox of the Kubernetes API (kubectl sees it, with the SDK's metadata as labels).
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { CommandExitError, NotFoundError, Sandbox, SandboxError } from 'e2b';
import { e2bOptions, getAggregated, rawGet, whileE2bBusy, type AggregatedEnv } from '../support/aggregated.js';
import { pySdk, runPython } from '../support/e2b-sdks.js';
import { eventually } from '../support/eventually.js';

/**
 * The Python SDK's snapshot list, and the raw rows through its generated wire model (SnapshotInfo.from_dict, which
 * keeps keys it does not model in additional_properties).
 */
const PY_LIST_SNAPSHOTS = `
import json, os, httpx
from e2b import Sandbox
from e2b.api.client.models.snapshot_info import SnapshotInfo
sid, snap = os.environ['SDK_SANDBOX'], os.environ['SDK_SNAPSHOT']
items = Sandbox.list_snapshots(sandbox_id=sid).next_items()
raw = httpx.get(os.environ['E2B_API_URL'] + '/snapshots', params={'sandboxID': sid},
                headers={'X-API-Key': os.environ['E2B_API_KEY']}).json()
wire = [SnapshotInfo.from_dict(r) for r in raw]
print(json.dumps({'sdk': [[s.snapshot_id, *s.names] for s in items if s.snapshot_id == snap],
                  'extra': [w.additional_properties for w in wire if w.snapshot_id == snap]}))
`;

let env: AggregatedEnv;
const opts = () => e2bOptions(env);
const created: Sandbox[] = [];

/** Sandbox.create, retried while the warm pool refills (ServiceBusyError: 503 + Retry-After). */
async function create(extra: Parameters<typeof Sandbox.create>[1] = {}): Promise<Sandbox> {
  const s = await whileE2bBusy(() => Sandbox.create('base', { ...opts(), ...extra }));
  created.push(s);
  return s;
}

async function kubectlSandbox(id: string): Promise<Record<string, unknown> | undefined> {
  try {
    return JSON.parse(await env.kubectl(['get', 'sandbox', id, '-n', env.e2b.namespace, '-o', 'json'])) as Record<
      string,
      unknown
    >;
  } catch (err) {
    if (/NotFound|not found/.test(String(err))) return undefined;
    throw err;
  }
}

/** Claims of the e2b namespace still held on any node. */
async function e2bClaims(): Promise<string[]> {
  const out: string[] = [];
  for (const node of env.sandboxd) {
    const token = (await readFile(node.tokenFile, 'utf8')).trim();
    const res = await fetch(`http://${node.address}/v1/sandboxes`, { headers: { authorization: `Bearer ${token}` } });
    const rows = ((await res.json()) as { sandboxes: Array<{ id: string; claim_ref?: string }> }).sandboxes;
    out.push(...rows.filter((r) => r.claim_ref?.startsWith(`${env.e2b.namespace}/`)).map((r) => r.claim_ref!));
  }
  return out;
}

describe('e2b SDK against the aggregated layout', () => {
  before(async () => {
    env = await getAggregated();
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
  });

  it('create with metadata and envs; run, stream, fail, background+kill, stdin, pty; getInfo is what was created', async () => {
    const t0 = Date.now();
    const sbx = await create({
      metadata: { owner: 'acceptance', 'k y': 'v&w=1' },
      envs: { GREETING: 'hello' },
      timeoutMs: 600_000,
    });
    const r = await sbx.commands.run('echo hi; echo $GREETING');
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'hi\nhello\n');
    await assert.rejects(sbx.commands.run('exit 7'), (e: unknown) => e instanceof CommandExitError && e.exitCode === 7);
    const chunks: string[] = [];
    await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.2; done', { onStdout: (d) => void chunks.push(d) });
    assert.equal(chunks.join(''), '1\n2\n3\n');
    assert.ok(chunks.length >= 2, JSON.stringify(chunks));
    const bg = await sbx.commands.run('sleep 600', { background: true });
    assert.equal(await sbx.commands.kill(bg.pid), true);
    await assert.rejects(bg.wait(), CommandExitError);
    const cat = await sbx.commands.run('cat', { background: true, stdin: true });
    await sbx.commands.sendStdin(cat.pid, 'via stdin\n');
    await sbx.commands.closeStdin(cat.pid);
    assert.equal((await cat.wait()).stdout, 'via stdin\n');
    let out = '';
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void (out += Buffer.from(d).toString()) });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo pty-$((6*7))\n'));
    await eventually(async () => out, { until: (o) => o.includes('pty-42'), timeoutMs: 30_000, what: 'pty output' });
    await sbx.pty.kill(pty.pid);

    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, 'base');
    assert.deepEqual(info.metadata, { owner: 'acceptance', 'k y': 'v&w=1' });
    assert.equal(info.state, 'running');
    assert.equal(info.cpuCount, 1);
    assert.equal(info.memoryMB, 256);
    assert.ok(Math.abs(info.startedAt.getTime() - t0) < 60_000, `startedAt ${info.startedAt.toISOString()}`);
    const lease = info.endAt.getTime() - info.startedAt.getTime();
    assert.ok(lease > 590_000 && lease < 660_000, `lease ${lease} ms`);
    // The same sandbox through the Kubernetes API, metadata as labels and annotations.
    const k = (await kubectlSandbox(sbx.sandboxId)) as {
      metadata: { labels: Record<string, string>; annotations: Record<string, string> };
    };
    assert.equal(k.metadata.labels.owner, 'acceptance');
    assert.deepEqual(JSON.parse(k.metadata.annotations['e2b.dev/metadata']!), { owner: 'acceptance', 'k y': 'v&w=1' });
    const m = await sbx.getMetrics();
    assert.equal(m.length, 1);
    assert.equal(m[0]!.cpuCount, 1);
    assert.ok(m[0]!.memTotal > 100 << 20 && m[0]!.memUsed > 0 && m[0]!.diskTotal > 0, JSON.stringify(m));
  });

  it('files through the router: text, 5 MiB binary, list, makeDir, rename, remove, exists, watchDir', async () => {
    const sbx = await create();
    await sbx.files.write('/tmp/a.txt', 'text body');
    assert.equal(await sbx.files.read('/tmp/a.txt'), 'text body');
    const blob = Buffer.alloc(5 << 20);
    for (let i = 0; i < blob.length; i += 4) blob.writeUInt32LE((i * 2246822519) >>> 0, i);
    await sbx.files.write('/tmp/blob', blob.buffer.slice(blob.byteOffset, blob.byteOffset + blob.length));
    assert.ok(Buffer.from(await sbx.files.read('/tmp/blob', { format: 'bytes' })).equals(blob));
    assert.ok((await sbx.files.list('/tmp')).some((e) => e.name === 'blob' && e.size === blob.length));
    assert.equal(await sbx.files.makeDir('/tmp/d'), true);
    await sbx.files.rename('/tmp/a.txt', '/tmp/d/a.txt');
    assert.equal(await sbx.files.exists('/tmp/a.txt'), false);
    assert.equal(await sbx.files.exists('/tmp/d/a.txt'), true);
    await sbx.files.remove('/tmp/d');
    assert.equal(await sbx.files.exists('/tmp/d'), false);
    const events: string[] = [];
    const w = await sbx.files.watchDir('/tmp', (e) => void events.push(`${e.type}:${e.name}`));
    await sbx.files.write('/tmp/watched', 'x');
    await eventually(async () => events, {
      until: (ev) => ev.some((e) => e.includes('watched')),
      timeoutMs: 20_000,
      what: 'a watch event',
    });
    await w.stop();
    // A signed download URL, routed by host (<port>-<id>.<domain>) as the SDK builds it.
    const url = new URL(await sbx.downloadUrl('/tmp/watched', { useSignatureExpiration: 60 }));
    const host = `49983-${sbx.sandboxId}.e2b.local`;
    const res = await rawGet(`${env.e2b.sandboxUrl}${url.pathname}${url.search}`, { host });
    assert.equal(res.status, 200, res.body);
    assert.equal(res.body, 'x');
    url.searchParams.set('signature', 'v1_forged');
    const forged = await rawGet(`${env.e2b.sandboxUrl}${url.pathname}${url.search}`, { host });
    assert.equal(forged.status, 401);
  });

  it('list filters by metadata and state and pages with X-Next-Token', async () => {
    const tag = `t${Date.now()}`;
    const a = await create({ metadata: { tag } });
    const b = await create({ metadata: { tag } });
    const p = Sandbox.list({ ...opts(), query: { metadata: { tag }, state: ['running'] }, limit: 1 });
    const first = await p.nextItems();
    assert.equal(first.length, 1);
    assert.equal(p.hasNext, true);
    const second = await p.nextItems();
    assert.equal(second.length, 1);
    assert.deepEqual([first[0]!.sandboxId, second[0]!.sandboxId].sort(), [a.sandboxId, b.sandboxId].sort());
    if (p.hasNext) assert.equal((await p.nextItems()).length, 0);
    const paused = await Sandbox.list({ ...opts(), query: { metadata: { tag }, state: ['paused'] } }).nextItems();
    assert.equal(paused.length, 0);
  });

  it('setTimeout moves the lease: the sandbox lives past its old deadline', async () => {
    const sbx = await create({ timeoutMs: 8_000 });
    await sbx.setTimeout(120_000);
    const info = await sbx.getInfo();
    assert.ok(info.endAt.getTime() - Date.now() > 100_000, info.endAt.toISOString());
    await new Promise((r) => setTimeout(r, 12_000));
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n');
  });

  it('at the lease end the VM is gone: 502 "was not found", gone from both APIs', async () => {
    const sbx = await create({ timeoutMs: 4_000 });
    await eventually(() => sbx.isRunning(), {
      until: (r) => r === false,
      timeoutMs: 30_000,
      what: 'the sandbox to expire',
    });
    const res = await fetch(`${env.e2b.sandboxUrl}/health`, { headers: { 'e2b-sandbox-id': sbx.sandboxId } });
    assert.equal(res.status, 502);
    assert.match(((await res.json()) as { message: string }).message, /was not found/);
    await assert.rejects(sbx.getInfo(), NotFoundError);
    assert.equal(await kubectlSandbox(sbx.sandboxId), undefined);
  });

  it('pause → connect: the running command and its memory are intact; kubectl shows the pause', async () => {
    const sbx = await create({ timeoutMs: 300_000 });
    const counter = await sbx.commands.run('n=0; while true; do n=$((n+1)); echo $n > /tmp/n; sleep 0.2; done', {
      background: true,
      timeoutMs: 0,
    });
    await new Promise((r) => setTimeout(r, 1500));
    const before = Number((await sbx.commands.run('cat /tmp/n')).stdout);
    assert.equal(await sbx.pause(), true);
    assert.equal(await sbx.pause(), false); // already paused: 409
    assert.equal((await sbx.getInfo()).state, 'paused');
    const k = (await kubectlSandbox(sbx.sandboxId)) as { metadata: { labels: Record<string, string> } };
    // The node's pause mode decides which (memory-resident by default); either is "paused" to the SDK.
    assert.ok(['Paused', 'Hibernated'].includes(k.metadata.labels['sandbox.cocoonstack.io/phase']!), JSON.stringify(k));
    const back = await Sandbox.connect(sbx.sandboxId, opts());
    assert.equal((await back.getInfo()).state, 'running');
    const at = Number((await back.commands.run('cat /tmp/n')).stdout);
    assert.ok(at >= before, `${at} < ${before}`);
    await new Promise((r) => setTimeout(r, 1000));
    const later = Number((await back.commands.run('cat /tmp/n')).stdout);
    assert.ok(later > at, `the loop did not go on: ${at} then ${later}`);
    assert.equal(
      (await back.commands.run(`kill -0 ${counter.pid} && echo same-process`, { user: 'root' })).stdout,
      'same-process\n',
    );
  });

  it('pause through the Kubernetes subresource is "paused" to the SDK; the SDK resumes it', async () => {
    const sbx = await create({ timeoutMs: 300_000 });
    await sbx.files.write('/tmp/kept', 'before the pause');
    const path = `/apis/agents.x-k8s.io/v1beta1/namespaces/${env.e2b.namespace}/sandboxes/${sbx.sandboxId}/pause`;
    const paused = JSON.parse(
      await env.kubectl(
        ['create', '--raw', path, '-f', '-'],
        JSON.stringify({ apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'SandboxPauseOptions' }),
      ),
    ) as { kind: string };
    assert.equal(paused.kind, 'SandboxPauseOptions');
    assert.equal((await sbx.getInfo()).state, 'paused');
    const listed = await Sandbox.list({ ...opts(), query: { state: ['paused'] } }).nextItems();
    assert.ok(
      listed.some((s) => s.sandboxId === sbx.sandboxId),
      JSON.stringify(listed.map((s) => s.sandboxId)),
    );
    const back = await Sandbox.connect(sbx.sandboxId, opts());
    assert.equal((await back.getInfo()).state, 'running');
    assert.equal(await back.files.read('/tmp/kept'), 'before the pause');
  });

  it('autoPause: at the lease end the sandbox pauses instead of dying, and connect resumes it', async () => {
    const sbx = await create({ timeoutMs: 5_000, lifecycle: { onTimeout: 'pause' } });
    await sbx.files.write('/tmp/kept', 'kept');
    await eventually(() => sbx.getInfo(), {
      until: (i) => i.state === 'paused',
      timeoutMs: 60_000,
      what: 'the auto-pause',
    });
    const back = await Sandbox.connect(sbx.sandboxId, { ...opts(), timeoutMs: 60_000 });
    assert.equal(await back.files.read('/tmp/kept'), 'kept');
  });

  it('snapshots: create, list, create a sandbox from one, delete; fork: children are sandboxes of both APIs', async () => {
    const sbx = await create();
    await sbx.files.write('/tmp/forked', 'from parent');
    const snap = await sbx.createSnapshot({ name: 'acceptance' } as never);
    assert.match(snap.snapshotId, /^ck_/);
    // Replicated to the other node (--checkpoint-replicas 2 by default, docs/placement.md "Replicas"), it is still
    // one snapshot, and the row says where its copies are, by node name, once a holder has counted them.
    const nodes = env.sandboxd.map((n) => n.node).sort();
    const rows = await eventually(
      async () =>
        (await (
          await fetch(`${env.e2b.apiUrl}/snapshots?sandboxID=${sbx.sandboxId}`, {
            headers: { 'x-api-key': env.e2b.apiKey },
          })
        ).json()) as Array<Record<string, unknown>>,
      {
        until: (r) => r.some((s) => s.snapshotID === snap.snapshotId && s.copies === 2),
        timeoutMs: 120_000,
        intervalMs: 500,
        what: `snapshot ${snap.snapshotId} counted on two nodes`,
      },
    );
    const row = rows.filter((s) => s.snapshotID === snap.snapshotId);
    assert.equal(row.length, 1, `listed once, not once per node: ${JSON.stringify(rows)}`);
    assert.deepEqual([row[0]!.copies, row[0]!.copiesWanted, row[0]!.copyNodes], [2, 2, nodes]);
    const listed = await Sandbox.listSnapshots({ ...opts(), sandboxId: sbx.sandboxId }).nextItems();
    assert.deepEqual(
      listed.filter((s) => s.snapshotId === snap.snapshotId),
      [{ snapshotId: snap.snapshotId, names: ['acceptance'] }],
      'the JS SDK lists it once and keeps only the fields it models',
    );
    // The Python SDKs, oldest and newest served: the list parses, and the generated model keeps our extra keys.
    for (const version of ['2.40.0', '2.63.0']) {
      const py = (await runPython(await pySdk(version), PY_LIST_SNAPSHOTS, {
        E2B_API_URL: env.e2b.apiUrl,
        E2B_API_KEY: env.e2b.apiKey,
        SDK_SANDBOX: sbx.sandboxId,
        SDK_SNAPSHOT: snap.snapshotId,
      })) as { sdk: string[][]; extra: Array<Record<string, unknown>> };
      assert.deepEqual(py.sdk, [[snap.snapshotId, 'acceptance']], `Python ${version}`);
      // The values are the node's latest count (a recount may land between the reads above and this one).
      assert.equal(py.extra.length, 1, `Python ${version}: ${JSON.stringify(py.extra)}`);
      const { copies, copiesWanted, copyNodes } = py.extra[0]!;
      assert.equal(copiesWanted, 2, `Python ${version}`);
      assert.ok(Array.isArray(copyNodes) && copyNodes.every((n) => nodes.includes(n as string)), String(copyNodes));
      assert.equal(copies, (copyNodes as unknown[]).length, `Python ${version}`);
    }
    // A snapshot is a template: a sandbox created from it starts with the files the parent had.
    const restored = await Sandbox.create(snap.snapshotId, opts());
    created.push(restored);
    assert.equal(await restored.files.read('/tmp/forked'), 'from parent');
    assert.equal((await restored.getInfo()).templateId, snap.snapshotId);
    assert.equal(
      (await restored.commands.run('id -un')).stdout.trim(),
      'user',
      'commands still run as the default user',
    );
    // It keeps the lane of the sandbox it was taken of; network rules are checked as on any create: a domain name is
    // no address (no egress proxy runs here), a 400 naming the entry, and nothing is claimed.
    const h = { 'x-api-key': env.e2b.apiKey, 'content-type': 'application/json' };
    const other = await fetch(`${env.e2b.apiUrl}/v2/sandboxes`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ templateID: snap.snapshotId, network: { denyOut: ['example.com'] } }),
    });
    assert.equal(other.status, 400);
    assert.match(((await other.json()) as { message: string }).message, /^network\.denyOut\[0\]: /);
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts()), true);
    const gone = await fetch(`${env.e2b.apiUrl}/v2/sandboxes`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ templateID: snap.snapshotId }),
    });
    assert.equal(gone.status, 404, 'a deleted snapshot is no template');
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts()), false);
    const children = await sbx.fork();
    assert.equal(children.length, 1);
    const child = children[0]!;
    assert.ok(!(child instanceof Error), String(child));
    created.push(child as Sandbox);
    assert.equal(await (child as Sandbox).files.read('/tmp/forked'), 'from parent');
    assert.ok(await kubectlSandbox((child as Sandbox).sandboxId));
  });

  it('kill: gone from kubectl get sandboxes; a second kill is false', async () => {
    const sbx = await create();
    assert.ok(await kubectlSandbox(sbx.sandboxId));
    assert.equal(await sbx.kill(), true);
    assert.equal(await kubectlSandbox(sbx.sandboxId), undefined);
    assert.equal(await Sandbox.kill(sbx.sandboxId, opts()), false);
  });

  it('bad input: wrong API key 401, wrong envd token 401, unknown sandbox 404, body over 1 MiB 413', async () => {
    const bad = await fetch(`${env.e2b.apiUrl}/v2/sandboxes`, { headers: { 'x-api-key': 'wrong' } });
    assert.equal(bad.status, 401);
    assert.deepEqual(Object.keys((await bad.json()) as object).sort(), ['code', 'message']);
    await assert.rejects(Sandbox.list({ ...opts(), apiKey: 'wrong' }).nextItems(), /401|Unauthorized|authentication/i);
    const h = { 'x-api-key': env.e2b.apiKey, 'content-type': 'application/json' };
    const missing = await fetch(`${env.e2b.apiUrl}/sandboxes/inope`, { headers: h });
    assert.equal(missing.status, 404);
    assert.equal(((await missing.json()) as { code: number }).code, 404);
    await assert.rejects(Sandbox.getInfo('inope', opts()), NotFoundError);
    const big = await fetch(`${env.e2b.apiUrl}/v2/sandboxes`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ templateID: 'base', metadata: { x: 'y'.repeat(1 << 20) } }),
    });
    assert.equal(big.status, 413);
    const unknown = await fetch(`${env.e2b.apiUrl}/v2/sandboxes`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ templateID: 'nope' }),
    });
    assert.equal(unknown.status, 404);
    const sbx = await create();
    const wrongToken = await fetch(`${env.e2b.sandboxUrl}/filesystem.Filesystem/Stat`, {
      method: 'POST',
      headers: {
        'e2b-sandbox-id': sbx.sandboxId,
        'x-access-token': 'wrong',
        'content-type': 'application/json',
        'connect-protocol-version': '1',
      },
      body: JSON.stringify({ path: '/' }),
    });
    assert.equal(wrongToken.status, 401);
    const nul = await fetch(`${env.e2b.sandboxUrl}/files?path=%2Ftmp%2F%00x`, {
      headers: { 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': 'wrong' },
    });
    assert.equal(nul.status, 401);
    await assert.rejects(
      sbx.files.read('/tmp/\0x'),
      (e: unknown) => e instanceof SandboxError && /400|NUL|invalid/i.test(String(e)),
    );
  });

  it('20 concurrent SDK clients creating, running and killing leave no VM behind', async () => {
    const before = await e2bClaims();
    const results = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const s = await create({ metadata: { burst: String(i) } });
        const r = await s.commands.run(`echo ${i}`);
        assert.equal(await s.kill(), true);
        return r.stdout;
      }),
    );
    assert.deepEqual(results.sort(), Array.from({ length: 20 }, (_, i) => `${i}\n`).sort());
    const leftover = (await e2bClaims()).filter((c) => !before.includes(c));
    assert.deepEqual(leftover, [], 'claims left on the nodes');
    assert.equal((await Sandbox.list({ ...opts(), query: { metadata: { burst: '0' } } }).nextItems()).length, 0);
  });
});
