/**
 * A deployment with `--e2b-domain <name>` and the router over HTTPS with a `*.<name>` wildcard certificate, used by
 * the unmodified JS SDK configured as its users configure it: E2B_API_URL, E2B_API_KEY, E2B_DOMAIN=<name>, and no
 * E2B_SANDBOX_URL. The SDK then builds every data-plane URL itself: `https://49983-<id>.<name>` for envd (commands,
 * files), the signed `uploadUrl` / `downloadUrl` on it (fetched with plain fetch), and `getHost(port)`, which reaches
 * a server started in the sandbox. The deployment is a second sandbox-apiserver process (the real binary, flags as
 * a deployment sets them, its own e2b namespace) on the shared aggregated platform's nodes; its router listens on
 * port 443 of a loopback address. The wildcard DNS record a deployment has is played by a preload in the SDK's
 * process that resolves `*.<name>` (and only that) to that address, and the certificate is checked against the test
 * CA (NODE_EXTRA_CA_CERTS). The Python SDK is not run here: its RPCs (pyqwest) resolve names in Rust, out of reach
 * of such a preload. docs/e2b.md "URLs the SDK builds".
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Components } from '../../src/cli/components.js';
import { freePort } from '../../src/net/free-port.js';
import { createCertificateAuthority, issueCertificate } from '../../src/pki/index.js';
import { getAggregated, type AggregatedEnv } from '../support/aggregated.js';

const run = promisify(execFile);
const REPO = fileURLToPath(new URL('../../', import.meta.url));
const SUPPORT = fileURLToPath(new URL('../support/', import.meta.url));
/** Where the sandbox's own server listens (getHost's port). */
const GUEST_PORT = 8000;

/** A loopback address (127.x.y.z, not 127.0.0.1) whose port 443 is free now: the wildcard name's A record. */
async function loopbackWith443(): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    const address = `127.${randomInt(1, 255)}.${randomInt(0, 256)}.${randomInt(1, 255)}`;
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(443, address, () => s.close(() => resolve(true)));
    });
    if (free) return address;
    if (attempt > 20) throw new Error('no loopback address with a free port 443');
  }
}

describe('e2b SDK against a deployment with --e2b-domain (wildcard name, TLS)', () => {
  let env: AggregatedEnv;
  let dir = '';
  let components: Components | undefined;
  const namespace = `e2b-dom-${randomBytes(3).toString('hex')}`;
  const domain = `sbx-${randomBytes(3).toString('hex')}.test`;
  let routerAddress = '';
  let apiUrl = '';
  const apiKey = `e2b_${randomBytes(20).toString('hex')}`;
  let caFile = '';

  before(async () => {
    env = await getAggregated();
    dir = await mkdtemp(join(tmpdir(), 'e2b-domain-'));
    await env.kubectl(['create', 'namespace', namespace]);
    const ca = createCertificateAuthority({ commonName: 'e2b domain test CA' }, { validityMs: 3_600_000 });
    const leaf = issueCertificate(ca, {
      subject: { commonName: `*.${domain}` },
      usages: ['server'],
      subjectAltNames: [`*.${domain}`],
      validityMs: 3_600_000,
    });
    caFile = join(dir, 'ca.crt');
    await writeFile(caFile, ca.certPem);
    await writeFile(join(dir, 'tls.crt'), leaf.certPem);
    await writeFile(join(dir, 'tls.key'), leaf.keyPem, { mode: 0o600 });
    await writeFile(join(dir, 'api-keys'), `${apiKey}\n`, { mode: 0o600 });
    routerAddress = await loopbackWith443();
    const e2bPort = await freePort();
    const securePort = await freePort();
    apiUrl = `http://127.0.0.1:${e2bPort}`;
    components = new Components(dir);
    const c = components.launch('sandbox-apiserver', 'sandbox-apiserver', [
      `--kubeconfig=${env.cluster.kubeconfigPath}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${securePort}`,
      `--cert-dir=${join(dir, 'certs')}`,
      '--tls-sans=127.0.0.1',
      `--sandboxd-token-file=${env.sandboxd[0]!.tokenFile}`,
      // The shared platform's own sandbox-apiserver drives pools and claims; this one serves only the e2b API.
      '--enable-warm-pool-driver=false',
      '--enable-claim-binder=false',
      `--e2b-listen=127.0.0.1:${e2bPort}`,
      `--e2b-sandbox-listen=${routerAddress}:443`,
      `--e2b-api-key-file=${join(dir, 'api-keys')}`,
      `--e2b-namespace=${namespace}`,
      `--e2b-domain=${domain}`,
      `--e2b-sandbox-tls-cert-file=${join(dir, 'tls.crt')}`,
      `--e2b-sandbox-tls-key-file=${join(dir, 'tls.key')}`,
    ]);
    const serverCa = join(dir, 'certs', 'ca.crt');
    await components.waitFile(c, serverCa, 60_000);
    await components.waitReady(c, `https://127.0.0.1:${securePort}/readyz`, 120_000, await readFile(serverCa, 'utf8'));
  });

  after(async () => {
    await components?.stop();
    await env?.kubectl(['delete', 'namespace', namespace, '--wait=false', '--ignore-not-found']);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('the SDK builds https://<port>-<id>.<domain> itself: commands, files, signed URLs and getHost all reach the sandbox', async () => {
    const resolveLog = join(dir, 'resolved');
    const childEnv: NodeJS.ProcessEnv = { ...process.env };
    // Only what a user of the deployment sets (and nothing of the test runner's own Node options).
    for (const k of Object.keys(childEnv)) if (/^E2B_|^NODE_OPTIONS$|^NODE_TEST/.test(k)) delete childEnv[k];
    Object.assign(childEnv, {
      E2B_API_URL: apiUrl,
      E2B_API_KEY: apiKey,
      E2B_DOMAIN: domain,
      NODE_EXTRA_CA_CERTS: caFile,
      SBX_RESOLVE_SUFFIX: domain,
      SBX_RESOLVE_ADDRESS: routerAddress,
      SBX_RESOLVE_LOG: resolveLog,
      SBX_GUEST_PORT: String(GUEST_PORT),
    });
    let stdout: string;
    try {
      ({ stdout } = await run(
        process.execPath,
        ['--import', join(SUPPORT, 'e2b-domain-resolve.mjs'), join(SUPPORT, 'e2b-domain-client.mjs')],
        { cwd: REPO, env: childEnv, timeout: 600_000, maxBuffer: 16 << 20 },
      ));
    } catch (err) {
      const e = err as Error & { stdout?: string; stderr?: string };
      throw new Error(`the SDK's program failed: ${e.message}\nstdout: ${e.stdout ?? ''}\nstderr: ${e.stderr ?? ''}`);
    }
    const out = JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as Record<string, unknown>;
    const id = out.id as string;
    const envd = `https://49983-${id}.${domain}`;
    assert.equal(out.envdApiUrl, envd, 'envd at the sandbox host the SDK built, no E2B_SANDBOX_URL');
    assert.equal(out.stdout, 'over the domain\n');
    assert.equal(out.read, 'written over https');
    for (const u of [out.uploadUrl, out.downloadUrl] as string[]) {
      const url = new URL(u);
      assert.equal(url.origin, envd, u);
      assert.equal(url.pathname, '/files');
      assert.ok(url.searchParams.get('signature'), u);
    }
    assert.equal((out.upload as [number, string])[0], 200, JSON.stringify(out.upload));
    assert.deepEqual(out.download, [200, 'uploaded over https']);
    assert.equal(out.host, `${GUEST_PORT}-${id}.${domain}`);
    assert.deepEqual(out.page, [200, `served by ${id}\n`]);
    assert.equal(out.killed, true);
    // Every name under the domain the SDK's process asked for is one of this sandbox's hosts.
    const resolved = new Set((await readFile(resolveLog, 'utf8')).trim().split('\n'));
    assert.deepEqual([...resolved].sort(), [`${GUEST_PORT}-${id}.${domain}`, `49983-${id}.${domain}`].sort());
  });
});
