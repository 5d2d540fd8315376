/**
 * The sandboxd image's runtime contract without a container engine: guest images exported with
 * `build-guest-images --export` (as the Dockerfile's guest stage does) and SBX_GUEST_IMAGES pointing at them (as
 * the image sets it), an empty cache dir (the image has no guest build cache, Go, kernel source or apt): sandboxd
 * fills a warm pool from the exported images, builds nothing, and a claimed VM runs a command.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ensureGuestImage } from '../../src/guest/images.js';
import { exportGuestImages, PREBUILT_ENV } from '../../src/guest/prebuilt.js';
import { eventually } from '../support/eventually.js';
import { call, SandboxdProcess } from '../support/sandboxd-daemon.js';

const TEMPLATE = 'sandbox/minimal';

describe('sandboxd from prebuilt guest images (SBX_GUEST_IMAGES)', { timeout: 10 * 60_000 }, () => {
  let dir: string;
  let daemon: SandboxdProcess | undefined;
  const token = randomBytes(16).toString('hex');

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbx-prebuilt-'));
    // Built (or found) in this machine's cache, then exported the way the image's guest stage exports them.
    const manifest = exportGuestImages(join(dir, 'images'), [await ensureGuestImage(TEMPLATE)]);
    assert.ok(JSON.parse(await readFile(manifest, 'utf8')).templates[TEMPLATE]);
    process.env[PREBUILT_ENV] = join(dir, 'images');
    process.env.SBX_CACHE_DIR = join(dir, 'empty-cache');
  });
  after(async () => {
    await daemon?.remove();
    await rm(dir, { recursive: true, force: true });
  });

  it('fills a warm pool from them, builds nothing, and a claimed VM runs a command', async () => {
    daemon = await SandboxdProcess.create(`prebuilt-${randomBytes(3).toString('hex')}`, token);
    await daemon.start(['--vk-nodes=', `--pools=${TEMPLATE}=1`, '--destroy-on-exit=true']);
    await eventually(() => call(daemon!.base, 'GET', '/v1/info', undefined, token), {
      until: (r) => (r.json.pools as Array<{ warm: number }> | undefined)?.[0]?.warm === 1,
      what: 'one warm VM',
      timeoutMs: 5 * 60_000,
      intervalMs: 1000,
    });
    const claim = await call(daemon.base, 'POST', '/v1/claim', { template: TEMPLATE, no_redirect: true }, token);
    assert.equal(claim.status, 200, JSON.stringify(claim.json));
    const exec = await call(
      daemon.base,
      'POST',
      `/v1/sandboxes/${String(claim.json.id)}/exec`,
      { argv: ['echo', 'prebuilt'] },
      token,
    );
    assert.equal(exec.status, 200, JSON.stringify(exec.json));
    assert.match(JSON.stringify(exec.json), /prebuilt/);
    assert.equal(existsSync(join(dir, 'empty-cache', 'guest')), false, 'no guest image was built or cached');
  });
});
