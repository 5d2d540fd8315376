/**
 * An e2b user's program for a deployment with `--e2b-domain` (test/aggregated/e2b-domain.test.ts): the repo's
 * unmodified JS SDK, configured as such a user configures it (E2B_API_URL, E2B_API_KEY, E2B_DOMAIN; no
 * E2B_SANDBOX_URL), so the SDK builds `https://49983-<id>.<domain>` for envd and the signed file URLs, and
 * `<port>-<id>.<domain>` for getHost. It prints one JSON line of what it built and got.
 */
/* global fetch, FormData, Blob, Response -- Node 20 globals */
import process from 'node:process';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox } from 'e2b';

const port = Number(process.env.SBX_GUEST_PORT);

/** The JS SDK does not retry a 503 (the shared pools refill in the background); capacity is not tested here. */
async function create() {
  for (let attempt = 0; ; attempt++) {
    try {
      return await Sandbox.create('base', { timeoutMs: 300_000, requestTimeoutMs: 60_000 });
    } catch (err) {
      if (!/503|busy/i.test(String(err)) || attempt > 60) throw err;
      await sleep(1000);
    }
  }
}

const sbx = await create();
const id = sbx.sandboxId;
const out = { id, envdApiUrl: sbx.envdApiUrl };
try {
  out.stdout = (await sbx.commands.run('echo over the domain')).stdout;
  await sbx.files.write('/tmp/a.txt', 'written over https');
  out.read = await sbx.files.read('/tmp/a.txt');

  out.uploadUrl = await sbx.uploadUrl('/tmp/up.txt');
  const form = new FormData();
  form.append('file', new Blob(['uploaded over https']), '/tmp/up.txt');
  const posted = await fetch(out.uploadUrl, { method: 'POST', body: form });
  out.upload = [posted.status, await posted.text()];
  out.downloadUrl = await sbx.downloadUrl('/tmp/up.txt');
  const got = await fetch(out.downloadUrl);
  out.download = [got.status, await got.text()];

  await sbx.commands.run(`mkdir -p /tmp/www && echo 'served by ${id}' > /tmp/www/index.html`);
  await sbx.commands.run(`exec python3 -m http.server ${port} --bind 0.0.0.0 --directory /tmp/www`, {
    background: true,
    timeoutMs: 0,
  });
  out.host = sbx.getHost(port);
  // The server starts in the background: asked until it answers (30 s).
  for (let i = 0; ; i++) {
    const r = await fetch(`https://${out.host}/index.html`).catch((err) => err);
    if (r instanceof Response && r.status === 200) {
      out.page = [r.status, await r.text()];
      break;
    }
    if (i > 60) {
      out.page = [r instanceof Response ? r.status : 0, r instanceof Response ? await r.text() : String(r)];
      break;
    }
    await sleep(500);
  }
} finally {
  out.killed = await sbx.kill();
}
process.stdout.write(`${JSON.stringify(out)}\n`);
