/**
 * The virtual-kubelet part of sandboxd: Node objects + Lease heartbeats for the two runtimes the operator's
 * runtime adapter routes to (vk-cocoon and sandboxd), Pods bound to them turned into microVMs with their status
 * patched back, and a kubelet API (exec, logs, port-forward over WebSockets) so `kubectl exec -it <pod> -- sh`
 * reaches a shell inside the VM. See docs/virtual-kubelet.md.
 */
import { join } from 'node:path';
import { isNotFound, Nodes, type KubeClient } from '../../kube/index.js';
import { silentLogger, type Logger } from '../../log/logger.js';
import type { NodeEngine } from '../engine.js';
import { ClaimTable } from './claim-table.js';
import { KubeletServer, type KubeletTls } from './kubelet-server.js';
import { heartbeatNodeStatus, registerNode, renewLease, type NodeSpecInput } from './node-registration.js';
import { PodLifecycle } from './pod-lifecycle.js';
import { PodLogs } from './pod-logs.js';
import { watchCordons, type CordonListener } from './node-cordon.js';
import type { Node, VirtualNodeKind } from './types.js';
import type { RecordHandoff } from '../placement/handoff.js';

export type { KubeletTls } from './kubelet-server.js';
export type { VirtualNodeKind } from './types.js';
export { nodeProfile, PROVIDER_TAINT_KEY, WEBSOCKET_FEATURE } from './node-registration.js';

export interface VirtualNodeSpec {
  kind: VirtualNodeKind;
  /** @default `<nodeName>-vk` for vk-cocoon, `<nodeName>-sandboxd` for sandboxd */
  name?: string;
}

export interface VirtualNodesOptions {
  engine: NodeEngine;
  client: KubeClient;
  /** Base for the node names (usually the host's / sandboxd's node name). */
  nodeName: string;
  /** Which virtual nodes to register. @default both: vk-cocoon and sandboxd */
  nodes?: readonly VirtualNodeSpec[];
  /** The Node's InternalIP: an address of this host the apiserver can reach. */
  hostAddress: string;
  /** Where the kubelet API listens. @default hostAddress */
  listenAddress?: string;
  /** Node i's kubelet API listens on kubeletPortBase + i; 0 = an ephemeral port per node. */
  kubeletPortBase: number;
  /** Kubelet serving cert (cluster CA, IP SAN = hostAddress) and the CA of accepted clients. PEM or file paths. */
  tls: KubeletTls;
  /** Claims table and pod logs live here (e.g. `<sandboxd data dir>/vk`). */
  stateDir: string;
  logger?: Logger;
  /** Aborting it stops everything (like `stop()`). */
  signal?: AbortSignal;
  /** @default 10000 */
  leaseRenewMs?: number;
  /** @default 60000 */
  statusHeartbeatMs?: number;
  /** How often each bound pod is re-checked (VM health, lease). @default 30000 */
  podResyncMs?: number;
  /** Told when one of the Nodes is cordoned or uncordoned (node-cordon.ts); sandboxd drains on it. */
  onCordon?: CordonListener;
  /** Evicted Pods' sandboxes handed to their replacements (placement/handoff.ts); absent: released on eviction. */
  handoff?: RecordHandoff;
}

export interface VirtualNodeInfo {
  name: string;
  kind: VirtualNodeKind;
  port: number;
}

export interface VirtualNodes {
  readonly nodes: readonly VirtualNodeInfo[];
  /** Stop serving and heartbeating. VMs stay (they belong to the engine); with deleteNodes, the Node objects go too. */
  stop(opts?: { deleteNodes?: boolean }): Promise<void>;
}

/** Register the virtual nodes, start the kubelet APIs, heartbeats and the pod lifecycle; resolves once pods are synced. */
export async function startVirtualNodes(opts: VirtualNodesOptions): Promise<VirtualNodes> {
  const log = (opts.logger ?? silentLogger).child({ component: 'virtual-kubelet' });
  const specs = opts.nodes ?? [{ kind: 'vk-cocoon' }, { kind: 'sandboxd' }];
  const refs = specs.map((s) => ({
    kind: s.kind,
    name: s.name ?? `${opts.nodeName}-${s.kind === 'vk-cocoon' ? 'vk' : 'sandboxd'}`,
  }));
  const ctrl = new AbortController();
  const onOuterAbort = () => void stop();
  opts.signal?.addEventListener('abort', onOuterAbort, { once: true });

  const logs = new PodLogs(join(opts.stateDir, 'logs'));
  const claims = new ClaimTable(join(opts.stateDir, 'vk-claims.json'));
  const pods = new PodLifecycle({
    engine: opts.engine,
    client: opts.client,
    nodes: refs,
    hostAddress: opts.hostAddress,
    claims,
    logs,
    logger: log,
    ...(opts.podResyncMs ? { resyncMs: opts.podResyncMs } : {}),
    ...(opts.handoff ? { handoff: opts.handoff } : {}),
  });

  const servers: KubeletServer[] = [];
  const infos: VirtualNodeInfo[] = [];
  const inputs: Array<{ input: NodeSpecInput; node: Node; since: string }> = [];
  const timers: NodeJS.Timeout[] = [];
  let running: Promise<void> | undefined;
  let cordons: Promise<void> | undefined;
  let stopped: Promise<void> | undefined;

  async function stop(stopOpts: { deleteNodes?: boolean } = {}): Promise<void> {
    stopped ??= (async () => {
      opts.signal?.removeEventListener('abort', onOuterAbort);
      ctrl.abort();
      for (const t of timers) clearInterval(t);
      await Promise.all(servers.map((s) => s.close()));
      await running?.catch(() => undefined);
      await cordons?.catch(() => undefined);
      if (stopOpts.deleteNodes)
        for (const n of infos)
          await opts.client.delete(Nodes, undefined, n.name).catch((err: unknown) => {
            if (!isNotFound(err)) log.warn({ err, node: n.name }, 'could not delete the Node');
          });
      log.info('virtual nodes stopped');
    })();
    return stopped;
  }

  try {
    for (const [i, ref] of refs.entries()) {
      const server = new KubeletServer({
        nodeName: ref.name,
        listenAddress: opts.listenAddress ?? opts.hostAddress,
        port: opts.kubeletPortBase ? opts.kubeletPortBase + i : 0,
        tls: opts.tls,
        engine: opts.engine,
        pods,
        logs,
        logger: log,
      });
      servers.push(server);
      const port = await server.listen();
      const input: NodeSpecInput = {
        name: ref.name,
        kind: ref.kind,
        hostAddress: opts.hostAddress,
        kubeletPort: port,
        maxPods: opts.engine.maxClaims,
      };
      const node = await registerNode(opts.client, input, log);
      await renewLease(opts.client, node);
      inputs.push({ input, node, since: new Date().toISOString() });
      infos.push({ name: ref.name, kind: ref.kind, port });
    }
    const beat = (what: string, fn: (x: (typeof inputs)[number]) => Promise<void>) => () => {
      for (const x of inputs)
        fn(x).catch((err: unknown) => log.warn({ err, node: x.input.name }, `${what} failed; retrying next tick`));
    };
    timers.push(
      setInterval(
        beat('lease renewal', (x) => renewLease(opts.client, x.node)),
        opts.leaseRenewMs ?? 10_000,
      ),
    );
    timers.push(
      setInterval(
        beat('node status heartbeat', (x) => heartbeatNodeStatus(opts.client, x.input, x.since)),
        opts.statusHeartbeatMs ?? 60_000,
      ),
    );
    if (opts.onCordon)
      cordons = watchCordons(
        opts.client,
        infos.map((n) => n.name),
        opts.onCordon,
        ctrl.signal,
        log,
      );
    const synced = new Promise<void>((resolve) => pods.once('synced', resolve));
    running = pods.run(ctrl.signal);
    running.catch((err: unknown) => log.error({ err }, 'pod lifecycle stopped'));
    await Promise.race([synced, running]);
  } catch (err) {
    await stop();
    throw err;
  }
  log.info({ nodes: infos }, 'virtual nodes ready');
  return { nodes: infos, stop };
}
