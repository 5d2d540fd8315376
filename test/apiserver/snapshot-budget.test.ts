/**
 * The checkpoint budget one tenant must not exhaust (issue 28 item 6), over a real sandboxd (the simulated VMM,
 * src/vmm/sim-driver.ts) reached through sandbox-apiserver's real node client, its `snapshot` verb and the e2b API:
 * - a per-namespace quota on each node (--max-checkpoints-per-namespace), 403 on every path that takes a
 *   checkpoint, charged to the namespace (or tenant) that owns the sandbox, never to one a tenant names;
 * - snapshot names bounded and validated on every path (a 240-byte name was a 500 with a host path): 400 on
 *   sandboxd and e2b, 422 with a field cause on the Kubernetes API;
 * - a node's 5xx text is not relayed to clients (logged in full with an incident id);
 * - a default checkpoint TTL, expired checkpoints deleted, logged and counted.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, mock } from 'node:test';
import pino from 'pino';
import { ApiKeys } from '../../src/apiserver/e2b/api-keys.js';
import { E2bApi, type E2bApiOptions } from '../../src/apiserver/e2b/server.js';
import { SandboxActions } from '../../src/apiserver/sandboxes/actions.js';
import type { NodeRow } from '../../src/apiserver/sandboxes/entry.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import type { Fleet } from '../../src/apiserver/sandboxes/fleet.js';
import { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { StatusFailure } from '../../src/apiserver/status.js';
import { PREBUILT_ENV } from '../../src/guest/prebuilt.js';
import { silentLogger } from '../../src/log/logger.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { sandboxdCommand, toSandboxdConfig } from '../../src/sandboxd/options.js';
import { call } from '../support/sandboxd-daemon.js';
import { listenSandboxdApi, simNodeEngine, type SimNodeOptions } from '../support/sim-node.js';

const ROOT = 'root-token-for-budget-tests';
const TENANT = 'tenant-token-for-budget-tests';
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;
const NODE = 'sim-node';
const E2B_KEY = 'e2b-key-for-budget-tests';
const LONG = 'x'.repeat(240);

/**
 * The simulated VMM runs no guest, so it needs no guest image: a prebuilt-images manifest (src/guest/prebuilt.ts)
 * naming files that are never read keeps these tests from building a kernel.
 */
async function fakeGuestImages(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  const t = { kernel: 'vmlinux-sim', initramfs: 'initramfs-sim', hash: 'sim-image' };
  await writeFile(join(dir, 'images.json'), JSON.stringify({ templates: { [KEY.template]: t } }));
  process.env[PREBUILT_ENV] = dir;
}

const simEngine = (dir: string, extra: SimNodeOptions = {}) => simNodeEngine(dir, { nodeName: NODE, ...extra }).engine;

const fleetOf = (address: string) =>
  ({
    nodeNames: () => [NODE],
    address: (n: string) => (n === NODE ? address : undefined),
    isSynced: () => true,
  }) as unknown as Fleet;

/** The e2b API in-process over `store` and the node at `address` (the paths here need no create). */
async function e2bApi(store: SandboxStore, client: SandboxdClient, address: string) {
  const e2b = new E2bApi({
    storage: {},
    store,
    fleet: fleetOf(address),
    client,
    keys: new ApiKeys([E2B_KEY], false),
    templates: [],
    namespace: 'e2b',
    domain: undefined,
    logger: silentLogger,
  } as unknown as E2bApiOptions);
  return { e2b, e2bBase: `http://127.0.0.1:${(await e2b.listen('127.0.0.1', 0)).port}` };
}

describe('checkpoint budget, names and relayed errors', () => {
  let dir: string;
  let engine: NodeEngine;
  let api: SandboxdApi;
  let base: string;
  let address: string;
  let client: SandboxdClient;
  let store: SandboxStore;
  let actions: SandboxActions;
  let e2b: E2bApi;
  let e2bBase: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-ck-budget-'));
    await fakeGuestImages(join(dir, 'images'));
    engine = simEngine(dir, { maxCheckpointsPerNamespace: 2 });
    await engine.start();
    let port: number;
    ({ api, port, base } = await listenSandboxdApi({
      engine,
      auth: { rootToken: ROOT, tenants: new Map([[TENANT, 'acme']]), allowAnonymous: false },
    }));
    address = `127.0.0.1:${port}`;
    client = new SandboxdClient({ token: ROOT });
    store = new SandboxStore(silentLogger, new EventLog(64));
    actions = new SandboxActions(store, client);
    ({ e2b, e2bBase } = await e2bApi(store, client, address));
  });

  after(async () => {
    await e2b?.close();
    client?.close();
    await api?.close();
    await engine?.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  });

  /** A Sandbox `namespace/name` claimed on the node as sandbox-apiserver claims it, indexed in the store. */
  async function sandbox(namespace: string, name: string): Promise<string> {
    const r = await call(
      base,
      'POST',
      '/v1/claim',
      {
        ...KEY,
        claim_ref: `${namespace}/${name}`,
        object: {
          metadata: { name, namespace, uid: `uid-${name}`, creationTimestamp: '2026-12-01T00:00:00Z' },
          spec: { podTemplate: { spec: { containers: [{ name: 'c', image: KEY.template }] } } },
        },
      },
      ROOT,
    );
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.ok(store.upsert(NODE, address, r.json.sandbox as NodeRow));
    return r.json.id as string;
  }

  const snapshot = (namespace: string, name: string, body: Record<string, unknown> = {}) =>
    actions.act(namespace, name, 'snapshot', body) as Promise<{ snapshotID: string }>;

  const e2bSnapshot = async (id: string, body: unknown) => {
    const res = await fetch(`${e2bBase}/sandboxes/${id}/snapshots`, {
      method: 'POST',
      headers: { 'x-api-key': E2B_KEY, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as { code?: number; message?: string } };
  };

  it('refuses a 240-byte snapshot name on every path: sandboxd 400, Kubernetes 422 naming the field, e2b 400', async () => {
    const claim = await sandbox('team-n', 'n');
    const node = await call(base, 'POST', `/v1/sandboxes/${claim}/checkpoint`, { name: LONG }, ROOT);
    assert.equal(node.status, 400, JSON.stringify(node.json));
    assert.match(String(node.json.error), /^name: must be no more than 63 characters/);

    const err = await snapshot('team-n', 'n', { name: LONG }).then(
      () => assert.fail('a 240-byte name was accepted'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof StatusFailure, String(err));
    assert.equal(err.status.code, 422);
    assert.equal(err.status.reason, 'Invalid');
    assert.equal(err.status.details?.causes?.[0]?.field, 'name');
    assert.equal(err.status.details?.causes?.[0]?.reason, 'FieldValueInvalid');
    // Neither is an upper-case or a path-like name a name.
    for (const bad of ['Before', '../x', 'a/b', ''])
      await assert.rejects(snapshot('team-n', 'n', { name: bad }), (e: StatusFailure) => e.status.code === 422);

    await sandbox('e2b', 'ilongname');
    const e = await e2bSnapshot('ilongname', { name: LONG });
    assert.equal(e.status, 400);
    assert.equal(e.json.code, 400);
    assert.match(String(e.json.message), /^name: must be no more than 63 characters/);
    assert.equal(engine.listCheckpoints().length, 0, 'no refused name left a checkpoint');
    // A good name is fine on all three.
    assert.ok((await snapshot('team-n', 'n', { name: 'before-upgrade.1' })).snapshotID);
  });

  it('holds each namespace to --max-checkpoints-per-namespace: 403 on the node, the Kubernetes verb and e2b, others unaffected', async () => {
    await sandbox('team-a', 'a');
    await sandbox('team-b', 'b');
    await snapshot('team-a', 'a');
    await snapshot('team-a', 'a');
    const err = await snapshot('team-a', 'a').then(
      () => assert.fail('a third checkpoint of team-a was taken'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof StatusFailure, String(err));
    assert.equal(err.status.code, 403);
    assert.equal(err.status.reason, 'Forbidden');
    assert.match(err.status.message, /namespace team-a holds 2 of its 2 checkpoints on node sim-node/);
    assert.match(err.status.message, /--max-checkpoints-per-namespace/);
    // Another namespace on the same node still has its own budget.
    await snapshot('team-b', 'b');
    await snapshot('team-b', 'b');

    await sandbox('e2b', 'iquota');
    assert.equal((await e2bSnapshot('iquota', {})).status, 201);
    assert.equal((await e2bSnapshot('iquota', {})).status, 201);
    const over = await e2bSnapshot('iquota', {});
    assert.equal(over.status, 403, JSON.stringify(over.json));
    assert.equal(over.json.code, 403);
    assert.match(String(over.json.message), /namespace e2b holds 2 of its 2 checkpoints/);
  });

  it("charges a tenant's checkpoints to the tenant, whichever token takes them", async () => {
    await sandbox('team-c', 'c');
    const t = await call(base, 'POST', '/v1/claim', { ...KEY }, TENANT);
    assert.equal(t.status, 200, JSON.stringify(t.json));
    const tid = t.json.id as string;
    const token = t.json.token as string;
    const r1 = await call(base, 'POST', `/v1/sandboxes/${tid}/checkpoint`, { token }, TENANT);
    assert.equal(r1.status, 200, JSON.stringify(r1.json));
    const r2 = await call(base, 'POST', `/v1/sandboxes/${tid}/checkpoint`, {}, token);
    assert.equal(r2.status, 200, JSON.stringify(r2.json));
    const third = await call(base, 'POST', `/v1/sandboxes/${tid}/checkpoint`, {}, token);
    assert.equal(third.status, 403);
    assert.match(String(third.json.error), /tenant acme holds 2 of its 2 checkpoints/);
    await snapshot('team-c', 'c');
    await snapshot('team-c', 'c');
  });
});

describe("a node's server error is not relayed", () => {
  const HOST_PATH = '/var/lib/sandboxd/templates/secret-layout';
  let node: Server;
  let address: string;

  before(async () => {
    node = createServer((req, res) => {
      const body = JSON.stringify({ error: `ENAMETOOLONG: name too long, mkdir '${HOST_PATH}'` });
      res.writeHead(500, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
      req.resume();
    });
    await new Promise<void>((r) => node.listen(0, '127.0.0.1', r));
    address = `127.0.0.1:${(node.address() as { port: number }).port}`;
  });
  after(() => new Promise<void>((r) => node.close(() => r())));

  it('the Kubernetes verb and the e2b API answer a generic message with an incident id; the log has the text', async () => {
    const lines: string[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(s) });
    const client = new SandboxdClient({ token: ROOT, log });
    const store = new SandboxStore(silentLogger, new EventLog(8));
    const row = (namespace: string, name: string, id: string): NodeRow =>
      ({
        id,
        key: KEY,
        deadline: '2030-01-01T00:00:00.000Z',
        claimed_at: '2026-12-01T00:00:00.000Z',
        hibernated: false,
        rv: 1,
        object: {
          metadata: { name, namespace, uid: `uid-${name}`, creationTimestamp: '2026-12-01T00:00:00Z' },
          spec: { podTemplate: { spec: { containers: [{ name: 'c', image: KEY.template }] } } },
        },
      }) as unknown as NodeRow;
    store.upsert(NODE, address, row('team-a', 'a', 'sb_a'));
    store.upsert(NODE, address, row('e2b', 'ie2b', 'sb_e'));
    const { e2b, e2bBase } = await e2bApi(store, client, address);
    try {
      const err = await new SandboxActions(store, client).act('team-a', 'a', 'snapshot', { name: 'ok' }).then(
        () => assert.fail('the node failed, the verb did not'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof StatusFailure, String(err));
      assert.equal(err.status.code, 500);
      assert.doesNotMatch(err.status.message, /var\/lib|ENAMETOOLONG/);
      const incident = /incident ([0-9a-f]+)/.exec(err.status.message)?.[1];
      assert.ok(incident, err.status.message);

      const res = await fetch(`${e2bBase}/sandboxes/ie2b/snapshots`, {
        method: 'POST',
        headers: { 'x-api-key': E2B_KEY, 'content-type': 'application/json' },
        body: '{}',
      });
      const text = await res.text();
      assert.equal(res.status, 500);
      assert.doesNotMatch(text, /var\/lib|ENAMETOOLONG/);
      assert.match(text, /incident [0-9a-f]+/);

      // The operator still has the node's text, under the id the client was given.
      const logged = lines.map((l) => JSON.parse(l) as { incident?: string; error?: string; node?: string });
      const entry = logged.find((l) => l.incident === incident);
      assert.ok(entry, lines.join(''));
      assert.match(String(entry.error), /ENAMETOOLONG/);
      assert.equal(entry.node, NODE);
    } finally {
      await e2b.close();
      client.close();
    }
  });
});

describe('checkpoint TTL by default', () => {
  it('sandboxd defaults: a week of TTL, 32 checkpoints per namespace under the node cap of 256', () => {
    const c = toSandboxdConfig(sandboxdCommand().parse(['node', 'sandboxd', '--allow-anonymous']).opts());
    assert.equal(c.checkpointTtlHours, 168);
    assert.equal(c.maxCheckpoints, 256);
    assert.equal(c.maxCheckpointsPerNamespace, 32);
    assert.throws(
      () =>
        toSandboxdConfig(
          sandboxdCommand()
            .parse(['node', 'sandboxd', '--allow-anonymous', '--max-checkpoints-per-namespace=-1'])
            .opts(),
        ),
      /--max-checkpoints-per-namespace: must be an integer >= 0/,
    );
  });

  it('an engine given no TTL deletes a checkpoint after a week, and logs and counts it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sbx-ck-ttl-'));
    await fakeGuestImages(join(dir, 'images'));
    const engine = simEngine(dir);
    const api = new SandboxdApi({ engine, auth: { rootToken: ROOT, tenants: new Map(), allowAnonymous: false } });
    try {
      await engine.start();
      engine.setTargets([{ key: KEY, warm: 1 }]);
      const rec = await engine.claim({ key: KEY, claimRef: 'team-t/t' });
      const ck = await engine.checkpoint(rec.id, 'aging');
      const day = 86_400_000;
      // Six days on: kept. Eight: the reaper's sweep (every second) deletes it.
      mock.timers.enable({ apis: ['Date'], now: Date.now() + 6 * day });
      await new Promise((r) => setTimeout(r, 1500));
      assert.ok(engine.checkpointStore.get(ck.id), 'deleted before its week was out');
      mock.timers.reset();
      mock.timers.enable({ apis: ['Date'], now: Date.now() + 8 * day });
      // Mocked, Date stands still, so the wait is counted on performance.now() (eventually() reads Date).
      const t0 = performance.now();
      while (engine.checkpointStore.get(ck.id) && performance.now() - t0 < 5000)
        await new Promise((r) => setTimeout(r, 50));
      assert.equal(engine.checkpointStore.get(ck.id), undefined, 'still kept 8 days after it was taken');
      const metrics = await api.registry.metrics();
      assert.match(metrics, /^sandboxd_checkpoints_expired_total 1$/m);
    } finally {
      mock.timers.reset();
      await api.close();
      await engine.close({ destroyVms: true });
      await rm(dir, { recursive: true, force: true });
    }
  });
});
