/**
 * Published e2b SDKs of several versions (JS and Python, installed from npm and PyPI by this test into caches keyed
 * by version, test/support/e2b-sdks.ts) against the aggregated platform, exactly as their users call them:
 * - old SDKs (JS ≤ 2.45, Python ≤ 2.45) send `allow_internet_access: true` on every create; a create of a template
 *   whose pool no node keeps warm (egress lane) is served by a clone or boot on a node, never 503 (the JS SDK does not
 *   retry a 503);
 * - a burst of creates larger than the warm pool all succeed (the misses are clones);
 * - the signed `uploadUrl` / `downloadUrl` the SDK builds on E2B_SANDBOX_URL (no sandbox id in them) reach the sandbox.
 * docs/e2b.md "Tests and benchmark" has the table of versions.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import {
  E2B_EGRESS_TEMPLATE,
  E2B_UNPOOLED_TEMPLATE,
  e2bOptions,
  getAggregated,
  type AggregatedEnv,
} from '../support/aggregated.js';
import { jsSdk, pySdk, runPython } from '../support/e2b-sdks.js';
import { eventually } from '../support/eventually.js';

/** JS 2.45.0 (the last that sends allow_internet_access on every create; npm has no 2.40.x), 2.46.1, the newest. */
const JS_VERSIONS = ['2.45.0', '2.46.1', '2.51.0'];
const PY_VERSIONS = ['2.40.0', '2.45.1', '2.63.0'];

let env: AggregatedEnv;
const killers: Array<() => Promise<unknown>> = [];

/** One SDK's round trip: create, a command, a file, and the signed URLs fetched as a browser would (no headers). */
async function jsRoundTrip(version: string, template: string): Promise<void> {
  const { Sandbox } = await jsSdk(version);
  // No retry: a 503 here is the failure this test is about.
  const sbx = await Sandbox.create(template, { ...e2bOptions(env), timeoutMs: 300_000 });
  killers.push(() => sbx.kill());
  const r = await sbx.commands.run(`echo js-${version}`);
  assert.equal(r.stdout, `js-${version}\n`);
  await sbx.files.write('/tmp/a.txt', `written by ${version}`);
  assert.equal(await sbx.files.read('/tmp/a.txt'), `written by ${version}`);

  const up = await sbx.uploadUrl('/tmp/up.txt');
  assert.ok(!up.includes(sbx.sandboxId), `the SDK's upload URL names no sandbox: ${up}`);
  const form = new FormData();
  form.append('file', new Blob([`uploaded by ${version}`]), '/tmp/up.txt');
  const posted = await fetch(up, { method: 'POST', body: form });
  assert.equal(posted.status, 200, await posted.clone().text());
  const down = await sbx.downloadUrl('/tmp/up.txt');
  const got = await fetch(down);
  assert.equal(got.status, 200);
  assert.equal(await got.text(), `uploaded by ${version}`);
  // A signature of no sandbox here is refused, not sent to some sandbox.
  const forged = new URL(down);
  forged.searchParams.set('signature', 'v1_forged');
  assert.equal((await fetch(forged)).status, 400);
  assert.equal(await sbx.kill(), true);
}

const PY_SCRIPT = `
import json, os, httpx
from e2b import Sandbox
version, template = os.environ['SDK_VERSION'], os.environ['SDK_TEMPLATE']
sbx = Sandbox.create(template, timeout=300)
out = {"id": sbx.sandbox_id}
try:
    out["stdout"] = sbx.commands.run("echo py-" + version).stdout
    sbx.files.write("/tmp/a.txt", "written by " + version)
    out["read"] = sbx.files.read("/tmp/a.txt")
    up = sbx.upload_url("/tmp/up.txt")
    out["up"] = up
    r = httpx.post(up, files={"file": ("/tmp/up.txt", b"uploaded by " + version.encode())})
    out["upload_status"] = r.status_code
    d = httpx.get(sbx.download_url("/tmp/up.txt"))
    out["download_status"], out["downloaded"] = d.status_code, d.text
finally:
    sbx.kill()
print(json.dumps(out))
`;

async function pyRoundTrip(version: string, template: string): Promise<void> {
  const python = await pySdk(version);
  const out = (await runPython(python, PY_SCRIPT, {
    E2B_API_URL: env.e2b.apiUrl,
    E2B_SANDBOX_URL: env.e2b.sandboxUrl,
    E2B_API_KEY: env.e2b.apiKey,
    SDK_VERSION: version,
    SDK_TEMPLATE: template,
  })) as Record<string, unknown>;
  assert.equal(out.stdout, `py-${version}\n`);
  assert.equal(out.read, `written by ${version}`);
  assert.ok(!String(out.up).includes(String(out.id)), String(out.up));
  assert.equal(out.upload_status, 200, JSON.stringify(out));
  assert.deepEqual([out.download_status, out.downloaded], [200, `uploaded by ${version}`]);
}

/** Warm VMs of sandbox/base on the egress lane (small), summed over the nodes. */
async function warmEgress(): Promise<number> {
  let total = 0;
  for (const node of env.sandboxd) {
    const token = (await readFile(node.tokenFile, 'utf8')).trim();
    const res = await fetch(`http://${node.address}/v1/info`, { headers: { authorization: `Bearer ${token}` } });
    const info = (await res.json()) as {
      pools: Array<{ key: { template: string; net: string; size: string }; warm: number }>;
    };
    for (const p of info.pools)
      if (p.key.template === 'sandbox/base' && p.key.net === 'egress' && p.key.size === 'small') total += p.warm;
  }
  return total;
}

describe('e2b SDK versions against the aggregated layout', () => {
  before(async () => {
    env = await getAggregated();
  });
  after(async () => {
    await Promise.allSettled(killers.map((k) => k()));
  });

  for (const v of JS_VERSIONS)
    it(`JS e2b ${v}: create of a template no node keeps warm (egress lane), command, files, signed URLs`, async () => {
      await jsRoundTrip(v, E2B_UNPOOLED_TEMPLATE);
    });

  for (const v of PY_VERSIONS)
    it(`Python e2b ${v}: create of a template no node keeps warm (egress lane), command, files, signed URLs`, async () => {
      await pyRoundTrip(v, E2B_UNPOOLED_TEMPLATE);
    });

  it('a burst of N+3 concurrent creates against a pool of N warm all succeed (JS 2.45.0 and 2.51.0)', async () => {
    const n = await eventually(warmEgress, { until: (w) => w >= 2, timeoutMs: 300_000, what: 'the egress pool full' });
    const sdks = [await jsSdk('2.45.0'), await jsSdk('2.51.0')];
    const results = await Promise.allSettled(
      Array.from({ length: n + 3 }, async (_, i) => {
        const { Sandbox } = sdks[i % 2]!;
        const sbx = await Sandbox.create(E2B_EGRESS_TEMPLATE, { ...e2bOptions(env), timeoutMs: 300_000 });
        killers.push(() => sbx.kill());
        return (await sbx.commands.run(`echo ${i}`)).stdout;
      }),
    );
    const failed = results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : []));
    assert.deepEqual(failed, [], `${failed.length} of ${n + 3} creates failed`);
    assert.deepEqual(
      results.map((r) => (r as PromiseFulfilledResult<string>).value),
      Array.from({ length: n + 3 }, (_, i) => `${i}\n`),
    );
  });
});
