/**
 * The envd features the SDKs gate above envd 0.5.7 (docs/e2b.md "envd versions"), through the unmodified SDKs against
 * the aggregated layout: file metadata (0.6.2: `X-Metadata-*` on upload, `metadata` on every entry), entries in watch
 * events (0.6.3) and watches that allow network mounts (0.6.4). With envd 0.5.7 advertised, each of these calls was
 * refused by the SDK itself ("File metadata requires envd 0.6.2 or later", "You need to update the template ...").
 * What each expectation is comes from e2b's envd (e2b-dev/infra packages/envd) and its SDK tests.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FileType, FilesystemEventType, Sandbox, type FilesystemEvent } from 'e2b';
import { e2bOptions, getAggregated, whileE2bBusy, type AggregatedEnv } from '../support/aggregated.js';
import { pySdk, runPython } from '../support/e2b-sdks.js';
import { eventually } from '../support/eventually.js';

let env: AggregatedEnv;
let sbx: Sandbox;

describe('envd 0.6.x features through the e2b SDKs (aggregated layout)', () => {
  before(async () => {
    env = await getAggregated();
    sbx = await whileE2bBusy(() => Sandbox.create('base', { ...e2bOptions(env), timeoutMs: 600_000 }));
  });
  after(async () => {
    await sbx?.kill().catch(() => undefined);
  });

  it('JS: write with metadata returns it (keys lowercased); getInfo, list and rename report it; a symlink its target’s', async () => {
    const meta = { Author: 'mish', purpose: 'upload test ~!' };
    const written = await sbx.files.write('/home/user/meta/a.txt', 'with metadata', { metadata: meta });
    assert.deepEqual(written.metadata, { author: 'mish', purpose: 'upload test ~!' });
    const info = await sbx.files.getInfo('/home/user/meta/a.txt');
    assert.deepEqual(info.metadata, { author: 'mish', purpose: 'upload test ~!' });
    assert.equal(info.type, FileType.FILE);

    const listed = await sbx.files.list('/home/user/meta');
    assert.deepEqual(listed.find((e) => e.name === 'a.txt')?.metadata, info.metadata, JSON.stringify(listed));

    // It is kept with the file: a rename keeps it, and a symlink reports its target's (as its type and mode).
    const moved = await sbx.files.rename('/home/user/meta/a.txt', '/home/user/meta/b.txt');
    assert.deepEqual(moved.metadata, info.metadata);
    await sbx.commands.run('ln -sfn /home/user/meta/b.txt /home/user/meta/link');
    const link = await sbx.files.getInfo('/home/user/meta/link');
    assert.equal(link.symlinkTarget, '/home/user/meta/b.txt');
    assert.deepEqual(link.metadata, info.metadata);

    // The octet-stream upload (useOctetStream) carries it the same way; several files share one set.
    const streamed = await sbx.files.write('/home/user/meta/c.bin', new Blob(['x']), {
      metadata: { k: 'v' },
      useOctetStream: true,
    });
    assert.deepEqual(streamed.metadata, { k: 'v' });
    const many = await sbx.files.write(
      [
        { path: '/home/user/meta/d1', data: '1' },
        { path: '/home/user/meta/d2', data: '2' },
      ],
      { metadata: { batch: '7' } },
    );
    assert.deepEqual(
      many.map((w) => w.metadata),
      [{ batch: '7' }, { batch: '7' }],
    );

    // An upload replaces the set: an overwrite without metadata leaves none, one with other keys only those.
    const plain = await sbx.files.write('/home/user/meta/b.txt', 'no metadata now');
    assert.equal(plain.metadata, undefined);
    assert.equal((await sbx.files.getInfo('/home/user/meta/b.txt')).metadata, undefined);
    await sbx.files.write('/home/user/meta/c.bin', 'y', { metadata: { other: '1' } });
    assert.deepEqual((await sbx.files.getInfo('/home/user/meta/c.bin')).metadata, { other: '1' });
    // A file that never had any reports none.
    assert.equal((await sbx.files.getInfo('/home/user/meta')).metadata, undefined);
  });

  it('envd refuses metadata its rules refuse (400 naming it); the SDK refuses non-ASCII before sending', async () => {
    await assert.rejects(
      sbx.files.write('/home/user/meta/long', 'x', { metadata: { ['k'.repeat(247)]: 'v' } }),
      /exceeds 246 bytes/,
    );
    await assert.rejects(
      sbx.files.write('/home/user/meta/big', 'x', { metadata: { a: 'v'.repeat(2100), b: 'v'.repeat(2100) } }),
      /exceeds 4096/,
    );
    await assert.rejects(sbx.files.write('/home/user/meta/bad', 'x', { metadata: { k: 'caf\u00e9' } }), /printable/);
  });

  it('JS: watch with includeEntry, recursive and allowNetworkMounts: entries carry the metadata once it is set', async () => {
    await sbx.files.makeDir('/home/user/w/sub');
    const events: FilesystemEvent[] = [];
    const w = await sbx.files.watchDir('/home/user/w', (e) => void events.push(e), {
      recursive: true,
      includeEntry: true,
      allowNetworkMounts: true,
    });
    try {
      await sbx.files.write('/home/user/w/sub/one.txt', 'watched', { metadata: { tag: 'x' } });
      await sbx.files.makeDir('/home/user/w/marker');
      await eventually(async () => events, {
        until: (ev) => ev.some((e) => e.name === 'marker' && e.type === FilesystemEventType.CREATE),
        timeoutMs: 30_000,
        what: 'the marker event',
      });
    } finally {
      await w.stop();
    }
    const mine = events.filter((e) => e.name === 'sub/one.txt');
    // CREATE, CHMOD (the owner), WRITE, then CHMOD again: setting the attributes, as fsnotify reports it on e2b.
    assert.deepEqual(
      mine.map((e) => e.type),
      [FilesystemEventType.CREATE, FilesystemEventType.CHMOD, FilesystemEventType.WRITE, FilesystemEventType.CHMOD],
    );
    const last = mine.at(-1)!;
    assert.equal(last.entry?.path, '/home/user/w/sub/one.txt');
    assert.deepEqual(last.entry?.metadata, { tag: 'x' });
  });

  it('Python 2.63: write with metadata, get_info and list report it, a symlink is one; a polled watch with include_entry and allow_network_mounts', async () => {
    const python = await pySdk('2.63.0');
    const out = (await runPython(python, PY_SCRIPT, {
      E2B_API_URL: env.e2b.apiUrl,
      E2B_SANDBOX_URL: env.e2b.sandboxUrl,
      E2B_API_KEY: env.e2b.apiKey,
      SBX_ID: sbx.sandboxId,
    })) as Record<string, unknown>;
    assert.deepEqual(out.written, { author: 'py' });
    assert.deepEqual(out.info, { author: 'py' });
    assert.deepEqual(out.listed, { author: 'py' });
    // A symlink is one to this SDK by is_symlink (its type field being its target's, as envd reports it).
    assert.deepEqual(out.link, ['symlink', '/home/user/py/p.txt', { author: 'py' }]);
    assert.ok((out.events as string[]).includes('create:p2.txt'), JSON.stringify(out));
    assert.deepEqual(out.entry_meta, { k: 'v' }, JSON.stringify(out));
  });
});

const PY_SCRIPT = `
import json, os, time
from e2b import Sandbox
sbx = Sandbox.connect(os.environ['SBX_ID'])
out = {}
w = sbx.files.write("/home/user/py/p.txt", "from python", metadata={"Author": "py"})
out["written"] = w.metadata
out["info"] = sbx.files.get_info("/home/user/py/p.txt").metadata
out["listed"] = [e.metadata for e in sbx.files.list("/home/user/py") if e.name == "p.txt"][0]
sbx.commands.run("ln -sfn /home/user/py/p.txt /home/user/py/link")
link = sbx.files.get_info("/home/user/py/link")
out["link"] = [link.type.value, link.symlink_target, link.metadata]
h = sbx.files.watch_dir("/home/user/py", include_entry=True, allow_network_mounts=True)
sbx.files.write("/home/user/py/p2.txt", "watched", metadata={"k": "v"})
sbx.files.make_dir("/home/user/py/marker")
events = []
for _ in range(60):
    events += h.get_new_events()
    if any(e.name == "marker" for e in events):
        break
    time.sleep(0.5)
h.stop()
out["events"] = [e.type.value + ":" + e.name for e in events]
mine = [e for e in events if e.name == "p2.txt" and e.entry is not None]
out["entry_meta"] = mine[-1].entry.metadata if mine else None
print(json.dumps(out))
`;
