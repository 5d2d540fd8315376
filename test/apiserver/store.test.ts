/**
 * The aggregated server's view, without a cluster: how node rows become entries and events, how a claim's own
 * answer and the node's feed are reconciled (no duplicate, no resurrection, no loss of a claim made while a
 * snapshot was in flight), resourceVersions and the watch ring, selectors and paging.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseListOptions } from '../../src/apiserver/list-options.js';
import { parseFieldSelector, parseLabelSelector } from '../../src/apiserver/selectors.js';
import type { NodeRow } from '../../src/apiserver/sandboxes/entry.js';
import { EventLog, type StoreEvent } from '../../src/apiserver/sandboxes/event-log.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';
import { StatusFailure } from '../../src/apiserver/status.js';

let n = 0;
function row(name: string, rv: number, extra: Partial<NodeRow> = {}, namespace = 'ns'): NodeRow {
  return {
    id: extra.id ?? `sb_${(++n).toString(16).padStart(4, '0')}`,
    key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
    deadline: '2030-01-01T00:00:00.000Z',
    claimed_at: '2026-12-01T00:00:00.000Z',
    hibernated: false,
    rv,
    object: {
      metadata: {
        name,
        namespace,
        uid: `uid-${name}`,
        creationTimestamp: '2026-12-01T00:00:00Z',
        labels: { app: name },
      },
      spec: { podTemplate: { spec: { containers: [{ name: 'c', image: 'sandbox/minimal' }] } } },
    },
    ...extra,
  };
}

function recording(): { store: SandboxStore; events: StoreEvent[] } {
  const store = new SandboxStore(silentLogger, new EventLog(8));
  const events: StoreEvent[] = [];
  store.log.subscribe({ deliver: (e) => events.push(e) });
  return { store, events };
}

describe('SandboxStore', () => {
  it('turns rows into ADDED, MODIFIED and DELETED with increasing resourceVersions', () => {
    const { store, events } = recording();
    const r = row('a', 1);
    store.upsert('node-0', '10.0.0.1:7777', r);
    store.upsert('node-0', '10.0.0.1:7777', { ...r, rv: 2, hibernated: true });
    store.remove(r.id);
    assert.deepEqual(
      events.map((e) => e.type),
      ['ADDED', 'MODIFIED', 'DELETED'],
    );
    assert.equal(events[1]!.next.phase, 'Hibernated');
    const rvs = events.map((e) => e.rv);
    assert.ok(rvs[0]! < rvs[1]! && rvs[1]! < rvs[2]!);
    assert.equal(store.get('ns/a'), undefined);
  });

  it('serves only rows with a Kubernetes identity', () => {
    const { store, events } = recording();
    const podClaim = { ...row('p', 1), object: undefined };
    assert.equal(store.upsert('node-0', 'a:1', podClaim), undefined);
    assert.equal(events.length, 0);
  });

  it("applies the claim's own answer once: the feed's copy of the same change is no event", () => {
    const { store, events } = recording();
    const r = row('b', 5);
    store.upsert('node-0', 'a:1', r); // the create's answer
    store.upsert('node-0', 'a:1', r); // the feed's ADDED for it
    store.upsert('node-0', 'a:1', { ...r, rv: 6 }); // a change readers cannot see (same content)
    assert.equal(events.length, 1);
    assert.equal(store.getByClaim(r.id)!.nodeRv, 6);
  });

  it('a released claim is not brought back by a feed line sent before the release', () => {
    const { store } = recording();
    const r = row('c', 7);
    store.upsert('node-0', 'a:1', r);
    store.remove(r.id, { tombstone: true });
    store.upsert('node-0', 'a:1', { ...r, rv: 8, hibernated: true });
    assert.equal(store.get('ns/c'), undefined);
  });

  it('a snapshot drops what the node no longer has, but keeps a claim made after the snapshot was taken', () => {
    const { store } = recording();
    const gone = row('gone', 10);
    const kept = row('kept', 11);
    const newer = row('newer', 30);
    for (const r of [gone, kept, newer]) store.upsert('node-0', 'a:1', r);
    const removed = store.reconcileNode('node-0', 20, new Set([kept.id]));
    assert.equal(removed, 1);
    assert.equal(store.get('ns/gone'), undefined);
    assert.ok(store.get('ns/kept'));
    assert.ok(store.get('ns/newer'), 'changed after the snapshot (rv 30 > 20): kept');
  });

  it('refuses a second live claim under a served name', () => {
    const { store } = recording();
    store.upsert('node-0', 'a:1', row('dup', 1));
    assert.equal(store.upsert('node-1', 'b:1', row('dup', 1)), undefined);
    assert.equal(store.get('ns/dup')!.node, 'node-0');
  });

  it('removing a node deletes its sandboxes', () => {
    const { store, events } = recording();
    store.upsert('node-0', 'a:1', row('x', 1));
    store.upsert('node-1', 'b:1', row('y', 1));
    store.removeNode('node-0');
    assert.equal(store.get('ns/x'), undefined);
    assert.ok(store.get('ns/y'));
    assert.equal(events.at(-1)!.type, 'DELETED');
  });

  it('keys come in list order, by namespace range, resumable after a key', () => {
    const { store } = recording();
    for (const [ns, name] of [
      ['b', 'x'],
      ['a', 'z'],
      ['a-b', 'y'],
      ['a', 'y'],
    ])
      store.upsert('node-0', 'a:1', row(name!, 1, {}, ns));
    assert.deepEqual([...store.keysFrom('')], ['a-b/y', 'a/y', 'a/z', 'b/x']);
    assert.deepEqual([...store.keysFrom('a')], ['a/y', 'a/z']);
    assert.deepEqual([...store.keysFrom('a', 'a/y')], ['a/z']);
    assert.deepEqual([...store.keysFrom('', 'a/z')], ['b/x']);
  });
});

describe('EventLog', () => {
  it('replays the events after a version, and refuses versions it no longer holds or never issued', () => {
    const { store, events } = recording();
    for (let i = 0; i < 12; i++) store.upsert('node-0', 'a:1', row(`e${i}`, 1));
    const log = store.log;
    const recent = events.at(-3)!.rv.toString();
    assert.deepEqual(
      log.since(recent)!.map((e) => e.next.name),
      ['e10', 'e11'],
    );
    assert.equal(log.since(events[0]!.rv.toString()), undefined, 'older than the 8-event ring');
    assert.equal(log.since('12345'), undefined, "another incarnation's version");
    assert.deepEqual(log.since(log.versions.current.toString()), []);
  });
});

describe('selectors and list options', () => {
  it('parses label selectors the way kube-apiserver does', () => {
    const s = parseLabelSelector('app in (a, b),!gone,tier!=db,env');
    assert.equal(s.matches({ app: 'a', env: 'x' }), true);
    assert.equal(s.matches({ app: 'c', env: 'x' }), false);
    assert.equal(s.matches({ app: 'a', env: 'x', gone: '1' }), false);
    assert.equal(s.matches({ app: 'b', env: 'x', tier: 'db' }), false);
    assert.equal(parseLabelSelector('n>3').matches({ n: '4' }), true);
    assert.throws(() => parseLabelSelector('app in ()'), StatusFailure);
    assert.throws(() => parseLabelSelector('bad key=1'), StatusFailure);
  });

  it('parses field selectors over the supported fields only', () => {
    const f = parseFieldSelector('metadata.name=a\\,b,status.phase!=Hibernated', ['metadata.name', 'status.phase']);
    assert.equal(f.equal('metadata.name'), 'a,b');
    assert.equal(
      f.matches((k) => (k === 'metadata.name' ? 'a,b' : 'Running')),
      true,
    );
    assert.throws(() => parseFieldSelector('spec.x=1', ['metadata.name']), /field label not supported/);
  });

  it('rejects list options as apimachinery does (422 ListOptions)', () => {
    const q = (s: string) => new URLSearchParams(s);
    assert.throws(
      () => parseListOptions(q('resourceVersionMatch=NotOlderThan'), []),
      (e: StatusFailure) => e.httpCode === 422,
    );
    assert.throws(() => parseListOptions(q('sendInitialEvents=true'), []), /forbidden for list/);
    assert.throws(
      () => parseListOptions(q('watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=1'), []),
      /unless sendInitialEvents/,
    );
    const wl = parseListOptions(
      q('watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true'),
      [],
    );
    assert.equal(wl.sendInitialEvents, true);
  });
});
