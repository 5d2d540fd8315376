/**
 * The e2b API's pure pieces, without VMs or a cluster: API keys, the SDK's metadata filter encoding, v1 file
 * signatures as the SDK computes them, path and user resolution, the alias table, request targets, exit mapping,
 * and list paging over a store of sandboxes.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import { Code, ConnectError } from '@connectrpc/connect';
import { ApiKeys, parseApiKeys } from '../../src/apiserver/e2b/api-keys.js';
import { metadataFilter } from '../../src/apiserver/e2b/http.js';
import { listSandboxes, listSnapshots } from '../../src/apiserver/e2b/queries.js';
import type { CheckpointRow } from '../../src/apiserver/sandboxes/checkpoints.js';
import type { Fleet } from '../../src/apiserver/sandboxes/fleet.js';
import type { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { routeTarget } from '../../src/apiserver/e2b/router.js';
import { parseTemplateAliases } from '../../src/apiserver/e2b/templates.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';
import { fileSignature } from '../../src/api/envd.js';
import { signatureProblem } from '../../src/api/envd-access.js';
import { entryInfo, permissionString } from '../../src/sandboxd/envd/entry-info.js';
import { metadataFromHeaders } from '../../src/sandboxd/envd/metadata.js';
import { ENVD_VERSION } from '../../src/api/envd.js';
import { httpFailure, toConnectError } from '../../src/sandboxd/envd/errors.js';
import { endEvent } from '../../src/sandboxd/envd/processes.js';
import { agentError } from '../../src/guest/agent-errors.js';
import { targetOf } from '../../src/sandboxd/envd/server.js';
import { basicAuthUser, resolvePath } from '../../src/sandboxd/envd/users.js';
import type { IncomingMessage } from 'node:http';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { HttpFailure } from '../../src/sandboxd/envd/errors.js';
import { FileType } from '../../src/sandboxd/envd/gen/filesystem.gen.js';

const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;

describe('e2b API units', () => {
  it('API keys: file format, any configured key, nothing anonymous unless allowed', () => {
    const keys = parseApiKeys('# comment\n\n  k1  \nk2\n');
    assert.deepEqual(keys, ['k1', 'k2']);
    const a = new ApiKeys(keys, false);
    assert.equal(a.allows('k1'), true);
    assert.equal(a.allows('k2'), true);
    assert.equal(a.allows('k3'), false);
    assert.equal(a.allows(undefined), false);
    assert.equal(a.allows(''), false);
    assert.throws(() => new ApiKeys([], false), /no API key/);
    assert.equal(new ApiKeys([], true).allows(undefined), true);
  });

  it('GET /snapshots lists a replicated snapshot once, with its copies by node name once a holder has counted', async () => {
    const row = (id: string, created: string, copies?: CheckpointRow['copies']): CheckpointRow => ({
      id,
      name: `n-${id}`,
      sandbox_id: `sb_${id}`,
      claim_ref: 'e2b/x',
      created_at: created,
      key: { template: 'sandbox/base', net: 'none', size: 'small' },
      ...(copies ? { copies } : {}),
    });
    const counted = { nodes: ['10.0.0.1:1', '10.0.0.1:2'], want: 2, checked_at: '2026-12-01T00:00:09.000Z' };
    const held: Record<string, CheckpointRow[]> = {
      'node-1': [row('ck_a', '2026-12-01T00:00:00.000Z', counted), row('ck_b', '2026-12-01T00:00:01.000Z')],
      'node-2': [row('ck_a', '2026-12-01T00:00:00.000Z', { ...counted, checked_at: '2026-12-01T00:00:03.000Z' })],
    };
    const fleet = {
      nodeNames: () => ['node-1', 'node-2'],
      address: (n: string) => `10.0.0.1:${n.slice(-1)}`,
      isSynced: () => true,
    } as unknown as Fleet;
    const client = { call: async (node: string) => ({ checkpoints: held[node] }) } as unknown as SandboxdClient;
    const store = new SandboxStore(silentLogger);
    const listed = await listSnapshots(fleet, client, store, 'e2b', new URLSearchParams());
    assert.deepEqual(listed, [
      { snapshotID: 'ck_b', names: ['n-ck_b'], createdAt: '2026-12-01T00:00:01.000Z' },
      {
        snapshotID: 'ck_a',
        names: ['n-ck_a'],
        createdAt: '2026-12-01T00:00:00.000Z',
        copies: 2,
        copiesWanted: 2,
        copyNodes: ['node-1', 'node-2'],
      },
    ]);
    assert.deepEqual(await listSnapshots(fleet, client, store, 'other', new URLSearchParams()), []);
  });

  it('decodes the metadata filter exactly as both SDKs encode it', () => {
    // What arrives on the wire for {'k y': 'v&w=1', simple: 'x'} (e2b-sdk-current.md), after URL parsing.
    const q = new URLSearchParams('metadata=k%252520y%3Dv%252526w%25253D1%26simple%3Dx');
    assert.deepEqual(metadataFilter(q.get('metadata')), { 'k y': 'v&w=1', simple: 'x' });
    assert.deepEqual(metadataFilter(null), {});
  });

  it('v1 file signatures match the SDK algorithm; expiry and forgeries are refused', () => {
    const sdk = (raw: string) => `v1_${createHash('sha256').update(raw).digest('base64').replace(/=+$/, '')}`;
    assert.equal(fileSignature('/tmp/a', 'read', '', 'tok'), sdk('/tmp/a:read::tok'));
    assert.equal(fileSignature('/tmp/a', 'write', 'root', 'tok', 99), sdk('/tmp/a:write:root:tok:99'));
    const exp = Math.floor(Date.now() / 1000) + 60;
    const ok = new URLSearchParams({
      path: '/tmp/a',
      signature: fileSignature('/tmp/a', 'read', '', 'tok', exp),
      signature_expiration: String(exp),
    });
    assert.equal(signatureProblem(ok, 'read', 'tok'), undefined);
    assert.equal(signatureProblem(ok, 'write', 'tok'), 'invalid signature');
    assert.equal(signatureProblem(ok, 'read', 'other'), 'invalid signature');
    const old = new URLSearchParams({
      path: '/tmp/a',
      signature: fileSignature('/tmp/a', 'read', '', 'tok', 5),
      signature_expiration: '5',
    });
    assert.equal(signatureProblem(old, 'read', 'tok'), 'signature is already expired');
  });

  it('paths: home-relative, ~, normalised; empty and NUL refused as invalid_argument', () => {
    const u = { name: 'user', uid: 1000, gid: 1000, home: '/home/user' };
    assert.equal(resolvePath('a/b', u), '/home/user/a/b');
    assert.equal(resolvePath('~', u), '/home/user');
    assert.equal(resolvePath('~/x', u), '/home/user/x');
    assert.equal(resolvePath('/tmp/../etc//./hosts', u), '/etc/hosts');
    for (const bad of ['', '/tmp/a\0b'])
      assert.throws(
        () => resolvePath(bad, u),
        (e: unknown) => e instanceof ConnectError && e.code === Code.InvalidArgument,
      );
    assert.equal(basicAuthUser(`Basic ${Buffer.from('root:').toString('base64')}`), 'root');
    assert.equal(basicAuthUser(undefined), undefined);
  });

  it('the alias table: defaults per entry, errors name the entry', () => {
    const t = parseTemplateAliases(
      'templates:\n  base: sandbox/base\n  py: { template: sandbox/python, net: egress, size: medium }\n',
      'f',
    );
    assert.deepEqual(t, [
      { id: 'base', template: 'sandbox/base', size: 'small', net: 'none' },
      { id: 'py', template: 'sandbox/python', size: 'medium', net: 'egress' },
    ]);
    assert.throws(() => parseTemplateAliases('templates: { x: { size: small } }', 'f'), /templates\.x\.template/);
    assert.throws(
      () => parseTemplateAliases('templates: { x: { template: a, size: huge } }', 'f'),
      /templates\.x\.size/,
    );
  });

  it('request targets: headers first, then <port>-<id>. hosts', () => {
    assert.deepEqual(routeTarget(req({ 'e2b-sandbox-id': 'iabc', 'e2b-sandbox-port': '3000' })), {
      id: 'iabc',
      port: 3000,
    });
    assert.deepEqual(routeTarget(req({ host: '49983-iabc.e2b.local' })), { id: 'iabc', port: 49983 });
    // The local platform's getHost: the domain is localhost:<router port>, so the Host carries a port.
    assert.deepEqual(routeTarget(req({ host: '8080-iabc.localhost:41234' })), { id: 'iabc', port: 8080 });
    assert.equal(routeTarget(req({ host: '127.0.0.1:8080' })), undefined);
    assert.deepEqual(targetOf(req({ 'e2b-sandbox-id': 'sb_1' })), { id: 'sb_1', port: 49983 });
  });

  it("agent errors as the SDK's errors: a missing path is not_found (exists() is false), an existing one already_exists", () => {
    const missing = agentError('file.stat', { code: 'ENOENT', message: 'lstat /tmp/x: no such file or directory' });
    assert.equal(toConnectError(missing).code, Code.NotFound);
    assert.equal(httpFailure(missing).status, 404);
    assert.equal(
      toConnectError(agentError('file.mkdir', { code: 'EEXIST', message: 'exists' })).code,
      Code.AlreadyExists,
    );
    assert.equal(toConnectError(agentError('file.read', { code: 'EWHATEVER', message: 'odd' })).code, Code.Internal);
  });

  it('exits as envd reports them: a signal is -1, not exited, "signal: killed"', () => {
    const base = { timedOut: false, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), truncated: false };
    assert.deepEqual(endEvent({ ...base, exitCode: 0 }).value, { exitCode: 0, exited: true, status: 'exit status 0' });
    assert.deepEqual(endEvent({ ...base, exitCode: 3 }).value, {
      exitCode: 3,
      exited: true,
      status: 'exit status 3',
      error: 'exit status 3',
    });
    assert.equal(endEvent({ ...base, exitCode: 137, signal: 'SIGKILL' }).value.status, 'signal: killed');
    assert.equal(permissionString('dir', 0o755), 'drwxr-xr-x');
    assert.equal(permissionString('file', 0o640), '-rw-r-----');
  });

  /** A store of e2b sandboxes `i0..i{n-1}`, claimed at `claimedAt(i)` (ms), `i4` hibernated. */
  function e2bStore(n: number, claimedAt: (i: number) => number): SandboxStore {
    const store = new SandboxStore(silentLogger);
    for (let i = 0; i < n; i++)
      store.upsert('n1', '127.0.0.1:1', {
        id: `sb_${i}`,
        key: { template: 'sandbox/base', net: 'none', size: 'small' },
        deadline: new Date(Date.now() + 60_000).toISOString(),
        claimed_at: new Date(claimedAt(i)).toISOString(),
        hibernated: i === 4,
        rv: i + 1,
        vcpus: 1,
        memory_mib: 256,
        object: {
          metadata: {
            name: `i${i}`,
            namespace: 'e2b',
            uid: `u${i}`,
            // whole seconds, as a create writes it
            creationTimestamp: new Date(Math.floor(claimedAt(i) / 1000) * 1000).toISOString().replace('.000', ''),
            annotations: { 'e2b.dev/template-id': 'base', 'e2b.dev/metadata': JSON.stringify({ n: String(i % 2) }) },
          },
          spec: { podTemplate: { spec: { containers: [] } } },
        } as never,
      });
    return store;
  }

  /** Every page of a listing, in order. */
  function allPages(store: SandboxStore, query: Record<string, string>): string[][] {
    const pages: string[][] = [];
    let token: string | undefined;
    do {
      const page = listSandboxes(
        store,
        'e2b',
        new URLSearchParams({ ...query, ...(token ? { nextToken: token } : {}) }),
      );
      pages.push(page.items.map((i) => i.sandboxID));
      token = page.nextToken;
    } while (token);
    return pages;
  }

  it('lists page by the last sandbox served and filter by state and metadata', () => {
    const t0 = Date.parse('2026-01-01T00:00:00Z');
    const store = e2bStore(5, (i) => t0 + i * 1000);
    assert.deepEqual(allPages(store, { limit: '2', state: 'running', order: 'asc' }).flat(), ['i0', 'i1', 'i2', 'i3']);
    const odd = listSandboxes(store, 'e2b', new URLSearchParams({ metadata: 'n=1' }));
    assert.deepEqual(
      odd.items.map((i) => i.sandboxID),
      ['i3', 'i1'],
    );
    const item = odd.items[0]!;
    assert.equal(item.cpuCount, 1);
    assert.equal(item.memoryMB, 256);
    assert.equal(item.templateID, 'base');
    assert.throws(
      () =>
        listSandboxes(store, 'e2b', new URLSearchParams({ nextToken: Buffer.from('other/x').toString('base64url') })),
      /nextToken/,
    );
    assert.throws(() => listSandboxes(store, 'e2b', new URLSearchParams({ order: 'sideways' })), /order/);
  });

  // Start times unrelated to the ids' order (the store walks keys), several within one second.
  const T0 = Date.parse('2026-01-01T00:00:00Z');
  const STARTS = [T0 + 1500, T0 + 250, T0 + 4000, T0 + 900, T0 + 1100, T0 + 3999, T0 + 50];
  const BY_START = [...STARTS.keys()].sort((a, b) => STARTS[a]! - STARTS[b]!).map((i) => `i${i}`);
  const NEWEST = [...BY_START].reverse();

  it("lists in e2b's order: newest start first by default", () => {
    const one = listSandboxes(
      e2bStore(STARTS.length, (i) => STARTS[i]!),
      'e2b',
      new URLSearchParams(),
    );
    assert.deepEqual(
      one.items.map((i) => i.sandboxID),
      NEWEST,
    );
    assert.equal(one.nextToken, undefined);
  });

  it('`order` applies to the whole listing: every page is a slice of one order, whatever is created in between', () => {
    const store = e2bStore(STARTS.length, (i) => STARTS[i]!);
    for (const limit of ['1', '2', '3']) {
      assert.deepEqual(allPages(store, { limit }).flat(), NEWEST, `desc, limit ${limit}`);
      assert.deepEqual(allPages(store, { limit, order: 'asc' }).flat(), BY_START, `asc, limit ${limit}`);
    }
    const first = listSandboxes(store, 'e2b', new URLSearchParams({ limit: '3' }));
    store.upsert('n1', '127.0.0.1:1', {
      id: 'sb_new',
      key: { template: 'sandbox/base', net: 'none', size: 'small' },
      deadline: new Date(Date.now() + 60_000).toISOString(),
      claimed_at: new Date(T0 + 9000).toISOString(),
      hibernated: false,
      rv: 99,
      object: {
        metadata: { name: 'inew', namespace: 'e2b', uid: 'unew', creationTimestamp: new Date(T0 + 9000).toISOString() },
        spec: { podTemplate: { spec: { containers: [] } } },
      } as never,
    });
    const rest = listSandboxes(store, 'e2b', new URLSearchParams({ nextToken: first.nextToken! }));
    assert.deepEqual(
      [...first.items, ...rest.items].map((i) => i.sandboxID),
      NEWEST,
    );
  });

  it("startedAt keeps the milliseconds of the node's claim time (creationTimestamp has whole seconds)", () => {
    const items = listSandboxes(
      e2bStore(STARTS.length, (i) => STARTS[i]!),
      'e2b',
      new URLSearchParams(),
    ).items;
    assert.equal(items.find((i) => i.sandboxID === 'i1')!.startedAt, new Date(T0 + 250).toISOString());
  });

  it('startedAfter is inclusive: a sandbox started at that very instant is listed', () => {
    const after = listSandboxes(
      e2bStore(STARTS.length, (i) => STARTS[i]!),
      'e2b',
      new URLSearchParams({ startedAfter: new Date(T0 + 1100).toISOString() }),
    );
    assert.deepEqual(after.items.map((i) => i.sandboxID).sort(), ['i0', 'i2', 'i4', 'i5']);
  });
});

describe('envd versions and the features they gate', () => {
  const cmp = (a: string, b: string) => {
    const [x, y] = [a.split('.').map(Number), b.split('.').map(Number)];
    for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
    return 0;
  };

  it("the advertised envd version is at least every gate of the pinned SDK (each is served: docs/e2b.md 'envd versions')", async () => {
    // The SDK's own bundle, as installed: its gates are compareVersions(version, "x.y.z") and ENVD_* constants.
    const entry = createRequire(import.meta.url).resolve('e2b');
    const src = await readFile(entry.replace(/index\.js$/, 'index.mjs'), 'utf8');
    const gates = new Set<string>();
    for (const m of src.matchAll(/compareVersions\([^,()]+,\s*"(\d+\.\d+\.\d+)"\)/g)) gates.add(m[1]!);
    for (const m of src.matchAll(/const ENVD_[A-Z_]+ = "(\d+\.\d+\.\d+)"/g)) if (m[1] !== '99.99.99') gates.add(m[1]!);
    for (const g of ['0.5.7', '0.6.2', '0.6.3', '0.6.4']) assert.ok(gates.has(g), `gate ${g} found in the SDK bundle`);
    const above = [...gates].filter((g) => cmp(g, ENVD_VERSION) > 0);
    assert.deepEqual(above, [], `gates above the advertised envd ${ENVD_VERSION}`);
  });

  it('file metadata from X-Metadata-* headers as envd 0.6.2 takes them', () => {
    assert.deepEqual(metadataFromHeaders({ 'x-access-token': ['t'] }), {});
    // Keys lowercased (the SDK sends them as given), the first of repeated values, an empty key ignored.
    assert.deepEqual(
      metadataFromHeaders({
        'x-metadata-author': ['mish', 'second'],
        'X-Metadata-Purpose': ['upload'],
        'x-metadata-': ['ignored'],
        'content-type': ['application/octet-stream'],
      }),
      { author: 'mish', purpose: 'upload' },
    );
    const refused = (h: NodeJS.Dict<string[]>, why: RegExp) =>
      assert.throws(
        () => metadataFromHeaders(h),
        (e: unknown) => e instanceof HttpFailure && e.status === 400 && why.test(e.message),
      );
    refused({ 'x-metadata-k': ['caf\u00e9'] }, /printable US-ASCII/);
    refused({ 'x-metadata-k': ['tab\there'] }, /printable US-ASCII/);
    refused({ [`x-metadata-${'k'.repeat(247)}`]: ['v'] }, /exceeds 246 bytes/);
    refused({ 'x-metadata-a': ['v'.repeat(2000)], 'x-metadata-b': ['v'.repeat(2100)] }, /exceeds 4096/);
    assert.deepEqual(metadataFromHeaders({ [`x-metadata-${'k'.repeat(246)}`]: ['v'] }), { ['k'.repeat(246)]: 'v' });
    // A key named like an object's own machinery is a pair like any other.
    assert.deepEqual(Object.keys(metadataFromHeaders({ 'x-metadata-__proto__': ['v'] })), ['__proto__']);
  });

  it("EntryInfo carries the guest's metadata (a symlink's is its target's) and marks a symlink as one", () => {
    const names = { user: (uid?: number) => String(uid), group: (gid?: number) => String(gid) };
    const st = { path: '/home/user/a.txt', name: 'a.txt', type: 'file' as const, size: 1, mode: 0o644, mtimeMs: 0 };
    assert.deepEqual(entryInfo({ ...st, metadata: { author: 'mish' } }, names).metadata, { author: 'mish' });
    assert.deepEqual(entryInfo(st, names).metadata, {});
    const link = {
      ...st,
      path: '/home/user/l',
      type: 'symlink' as const,
      target: 'a.txt',
      metadata: { author: 'mish' },
    };
    const e = entryInfo(link, names, { path: '/home/user/a.txt', stat: { ...st, metadata: { author: 'mish' } } });
    assert.deepEqual([e.metadata, e.symlinkTarget], [{ author: 'mish' }, '/home/user/a.txt']);
    // The link is marked as one (is_symlink, which the Python SDK 2.63 reads), its type being its target's.
    assert.deepEqual([e.isSymlink, e.type], [true, FileType.FILE]);
    assert.equal(entryInfo(st, names).isSymlink, false);
  });
});
