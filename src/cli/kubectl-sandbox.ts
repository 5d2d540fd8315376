/**
 * `kubectl sandbox` (the plugin executable `kubectl-sandbox`): the lifecycle verbs of aggregated-layout sandboxes
 * without typing `kubectl create --raw`: pause, resume, fork, snapshot and exec NAME, and the snapshots those take
 * (`snapshots`, `delete-snapshot ID`: the resource `sandboxsnapshots`). It talks to the same subresources
 * (`sandboxes/{name}/pause` ...) with the kubeconfig kubectl uses, so RBAC decides as for any client.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { Command } from 'commander';
import { errorMessage } from '../errors.js';
import { SLOW_VERB_TIMEOUT_MS } from '../apiserver/sandboxes/actions.js';
import { SNAPSHOTS } from '../apiserver/sandboxes/snapshots.js';
import { collectionPath, KubeClient, objectPath, Sandboxes, type ResourceType } from '../kube/index.js';

/** sandbox-apiserver's snapshots (get, list, delete). */
const SandboxSnapshots: ResourceType = {
  group: SNAPSHOTS.group,
  version: Sandboxes.version,
  kind: 'SandboxSnapshot',
  plural: SNAPSHOTS.resource,
  namespaced: true,
};

/**
 * sandbox-apiserver gives a node's fork, snapshot or exec SLOW_VERB_TIMEOUT_MS; the client waits a little longer, so
 * a verb that is slow (a loaded machine) gets the server's answer, success or a Status, instead of giving up first.
 */
const VERB_TIMEOUT_MS = SLOW_VERB_TIMEOUT_MS + 10_000;

interface Global {
  namespace?: string;
  kubeconfig?: string;
}

async function connect(g: Global): Promise<{ client: KubeClient; namespace: string }> {
  const kc = new KubeConfig();
  if (g.kubeconfig) kc.loadFromFile(g.kubeconfig);
  else kc.loadFromDefault();
  const namespace = g.namespace ?? kc.getContextObject(kc.getCurrentContext())?.namespace ?? 'default';
  return {
    client: await KubeClient.fromKubeconfig(kc, { userAgent: 'kubectl-sandbox', timeoutMs: VERB_TIMEOUT_MS }),
    namespace,
  };
}

/** One request with the plugin's client; the answer parsed. */
async function call(
  g: Global,
  method: 'GET' | 'POST' | 'DELETE',
  path: (namespace: string) => string,
  body?: unknown,
): Promise<Record<string, unknown>> {
  const { client, namespace } = await connect(g);
  try {
    return JSON.parse(await client.raw(method, path(namespace), body)) as Record<string, unknown>;
  } finally {
    client.close();
  }
}

/** POST the request kind to a subresource; the answer is the response kind. */
function act(g: Global, name: string, sub: string, kind: string, fields: Record<string, unknown> = {}) {
  const body = { apiVersion: 'agents.x-k8s.io/v1beta1', kind, ...fields };
  return call(g, 'POST', (ns) => objectPath(Sandboxes, ns, name, sub), body);
}

const int = (flag: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${flag} must be a whole number (got "${v}")`);
  return n;
};

export function kubectlSandboxCommand(): Command {
  const program = new Command('kubectl-sandbox')
    .description('Lifecycle verbs of sandboxes served by sandbox-apiserver (the aggregated layout)')
    .option('-n, --namespace <ns>', 'the namespace (default: the kubeconfig context’s)')
    .option('--kubeconfig <path>', 'kubeconfig (default: $KUBECONFIG or ~/.kube/config)');
  const g = () => program.opts<Global>();
  program
    .command('pause <name>')
    .description('pause a sandbox (its processes stop, memory is kept)')
    .action(async (name: string) => {
      const out = await act(g(), name, 'pause', 'SandboxPauseOptions');
      process.stdout.write(`sandbox/${name} paused (${String(out.mode ?? 'Memory').toLowerCase()})\n`);
    });
  program
    .command('resume <name>')
    .description('resume a paused sandbox where it stopped')
    .action(async (name: string) => {
      await act(g(), name, 'resume', 'SandboxResumeOptions');
      process.stdout.write(`sandbox/${name} resumed\n`);
    });
  program
    .command('fork <name>')
    .description('fork a sandbox into children in its namespace')
    .option('--count <n>', 'children to make', int('count'), 1)
    .option('--ttl <seconds>', "each child's lease (default: the node's)", int('ttl'))
    .action(async (name: string, o: { count: number; ttl?: number }) => {
      const out = await act(g(), name, 'fork', 'SandboxForkOptions', {
        count: o.count,
        ...(o.ttl ? { ttlSeconds: o.ttl } : {}),
      });
      for (const c of out.children as Array<{ name: string; sandboxID: string; nodeName: string }>)
        process.stdout.write(`sandbox/${c.name} forked from ${name} (claim ${c.sandboxID} on ${c.nodeName})\n`);
    });
  program
    .command('snapshot <name>')
    .description('snapshot a sandbox; start a new one from it with the annotation sandbox.cocoonstack.io/snapshot')
    .option('--label <label>', 'a name for the snapshot')
    .action(async (name: string, o: { label?: string }) => {
      const out = await act(g(), name, 'snapshot', 'SandboxSnapshotOptions', o.label ? { name: o.label } : {});
      process.stdout.write(`${String(out.snapshotID)}\n`);
    });
  program
    .command('snapshots')
    .description("list the namespace's snapshots (ID, name, sandbox, nodes)")
    .action(async () => {
      const out = await call(g(), 'GET', (ns) => collectionPath(SandboxSnapshots, ns));
      const items = (out.items ?? []) as Array<{
        metadata: { name: string; creationTimestamp?: string };
        snapshotName?: string;
        sandboxName?: string;
        nodeNames?: string[];
      }>;
      for (const i of items)
        process.stdout.write(
          `${i.metadata.name}\t${i.snapshotName ?? '-'}\t${i.sandboxName ?? '-'}\t${(i.nodeNames ?? []).join(',')}\t${i.metadata.creationTimestamp ?? ''}\n`,
        );
    });
  program
    .command('delete-snapshot <id>')
    .description('delete a snapshot from every node that holds it (frees its place in the checkpoint quota)')
    .action(async (id: string) => {
      await call(g(), 'DELETE', (ns) => objectPath(SandboxSnapshots, ns, id));
      process.stdout.write(`sandboxsnapshot/${id} deleted\n`);
    });
  program
    .command('exec <name> <command...>')
    .description('run a command in a sandbox (use -- before its arguments); exits with its exit code')
    .option('--timeout <seconds>', 'give up after this long', int('timeout'), 60)
    .action(async (name: string, command: string[], o: { timeout: number }) => {
      const out = await act(g(), name, 'exec', 'SandboxExecOptions', { command, timeoutSeconds: o.timeout });
      process.stdout.write(String(out.stdout ?? ''));
      process.stderr.write(String(out.stderr ?? ''));
      process.exitCode = Number(out.exitCode ?? 1);
    });
  return program;
}

export async function main(argv: string[] = process.argv): Promise<void> {
  try {
    await kubectlSandboxCommand().parseAsync(argv);
  } catch (err) {
    process.stderr.write(`kubectl-sandbox: ${errorMessage(err)}\n`);
    process.exitCode = 1;
  }
}
