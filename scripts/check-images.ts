/**
 * Runs the sandbox-operator image built by scripts/build-images.sh (buildah, vfs storage) the way the chart runs
 * it, on a control plane of its own: the chart's CRDs and RBAC installed, the entrypoint started in the image as
 * user 65532 with the Deployment's args (ports mapped to this machine) and a ServiceAccount token of the chart's
 * RBAC. Passes when the operator becomes ready, takes its leader Lease, writes its webhook certificate Secret and
 * injects the CRDs' caBundle. Not part of `npm test`: it needs the built image, which takes minutes to build; the
 * test suite runs the same entrypoints from the JS the image holds (test/deploy/components*.test.ts).
 *
 *   scripts/build-images.sh operator && flock /tmp/sbx-heavy.lock node --import tsx scripts/check-images.ts [image]
 */
import { execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { readClusterEnvironment, startCluster } from '../src/cluster/index.js';
import { freePort } from '../src/net/free-port.js';
import {
  containerOf,
  helmTemplate,
  hostArgs,
  installChartObjects,
  RBAC_AND_CONFIG,
  REPO,
  serviceAccountConfig,
  serviceToHost,
  toYamlStream,
} from '../test/support/deploy.js';

const NS = 'sandbox-system';
/** The Dockerfile's `USER` of the operator target. */
const IMAGE_USER = 65532;
const version = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }).version;
const image = process.argv[2] ?? `localhost/sandbox-operator:${version}`;
const buildahEnv = { ...process.env, STORAGE_DRIVER: 'vfs', BUILDAH_ISOLATION: 'chroot' };
const buildah = (args: string[]) => execFileSync('buildah', args, { env: buildahEnv, encoding: 'utf8' }).trim();

async function main(): Promise<string[]> {
  const failures: string[] = [];
  const env = readClusterEnvironment();
  const dir = mkdtempSync(join(tmpdir(), 'sbx-check-images-'));
  const cluster = await startCluster({ cacheDir: env.cacheDir, binDir: env.binDir, simulatedNodes: 0 });
  let container: string | undefined;
  try {
    const objects = await helmTemplate(NS);
    await installChartObjects(cluster.kubectl, objects, NS, RBAC_AND_CONFIG);
    const kubeconfig = await serviceAccountConfig(cluster, NS, 'sandbox-operator', dir);
    // The image's user reads it (mode 0600, as a mounted Secret with fsGroup would be readable to it).
    chownSync(kubeconfig, IMAGE_USER, IMAGE_USER);
    const host = cluster.hostAddress;
    const webhookPort = await freePort(host);
    const healthPort = await freePort();
    await cluster.kubectl(
      ['apply', '-f', '-'],
      toYamlStream(serviceToHost(NS, 'sandbox-webhook-service', host, webhookPort)),
    );
    const args = hostArgs(containerOf(objects, 'Deployment', 'sandbox-operator'), {
      override: {
        'webhook-port': String(webhookPort),
        'health-probe-bind-address': `127.0.0.1:${healthPort}`,
        'metrics-bind-address': '127.0.0.1:0',
      },
      add: ['--kubeconfig=/etc/sbx/kubeconfig', `--webhook-host=${host}`],
    });
    container = buildah(['from', image]);
    // buildah run shares this machine's network (chroot isolation), so the mapped ports are reachable as they are.
    const child = spawn(
      'buildah',
      [
        'run',
        '--user',
        `${IMAGE_USER}:${IMAGE_USER}`,
        '-v',
        `${kubeconfig}:/etc/sbx/kubeconfig:ro`,
        container,
        '--',
      ].concat(['node', '/app/dist/src/operator/main.js'], args),
      { env: buildahEnv, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let log = '';
    child.stdout.on('data', (d: Buffer) => (log += d.toString()));
    child.stderr.on('data', (d: Buffer) => (log += d.toString()));
    const exited = new Promise<void>((r) => child.on('exit', () => r()));
    let ready = false;
    for (let i = 0; i < 180 && !ready && child.exitCode === null; i++) {
      await sleep(1000);
      ready = await fetch(`http://127.0.0.1:${healthPort}/readyz`).then(
        (r) => r.status === 200,
        () => false,
      );
    }
    if (!ready) failures.push(`the operator in ${image} did not become ready:\n${log.slice(-3000)}`);
    else {
      const lease = await cluster.kubectl(['get', 'lease', '-n', NS, '-o', 'name']);
      if (!lease.trim()) failures.push('no leader Lease in the release namespace');
      await cluster
        .kubectl(['get', 'secret', '-n', NS, 'sandbox-webhook-certs', '-o', 'name'])
        .catch(() => failures.push('no webhook certificate Secret'));
      const crd = JSON.parse(
        await cluster.kubectl(['get', 'crd', 'sandboxtemplates.extensions.agents.x-k8s.io', '-o', 'json']),
      ) as { spec: { conversion?: { webhook?: { clientConfig?: { caBundle?: string } } } } };
      if (!crd.spec.conversion?.webhook?.clientConfig?.caBundle) failures.push('the CRDs got no caBundle');
    }
    child.kill('SIGTERM');
    await exited;
  } finally {
    if (container) buildah(['rm', container]);
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return failures;
}

const failures = await main();
for (const f of failures) process.stderr.write(`[check-images] FAILED: ${f}\n`);
process.stderr.write(failures.length ? '' : `[check-images] ${image}: ready, Lease, Secret and caBundle: ok\n`);
process.exitCode = failures.length ? 1 : 0;
