/**
 * A cordon of one of this daemon's virtual Nodes (`spec.unschedulable: true`: `kubectl cordon`, and the first step
 * of `kubectl drain`) drains the daemon; an uncordon ends that reason (docs/sandboxd.md "Draining"). Both virtual
 * nodes are fronts of one engine, so either one's cordon drains it. One informer per Node (a field selector on its
 * name): a cordon reaches the engine in milliseconds, before `kubectl drain` starts evicting the Pods.
 */
import { Informer, Nodes, type KubeClient } from '../../kube/index.js';
import type { Logger } from '../../log/logger.js';
import type { Node } from './types.js';

export type CordonListener = (node: string, cordoned: boolean) => void;

/** Watch `names` until `signal` aborts; `onChange` hears each Node's cordon state when it changes (first: when set). */
export async function watchCordons(
  client: KubeClient,
  names: readonly string[],
  onChange: CordonListener,
  signal: AbortSignal,
  log: Logger,
): Promise<void> {
  const runs = names.map((name) => {
    const inf = new Informer<Node>(client, Nodes, { fieldSelector: `metadata.name=${name}`, logger: log });
    let cordoned = false;
    const see = (node: Node | undefined) => {
      const now = node?.spec?.unschedulable === true;
      if (now === cordoned) return;
      cordoned = now;
      log.info({ node: name, cordoned }, now ? 'node cordoned: draining sandboxd' : 'node uncordoned');
      onChange(name, now);
    };
    inf.addHandler({ onAdd: see, onUpdate: (_old, node) => see(node), onDelete: () => see(undefined) });
    return inf.start(signal);
  });
  await Promise.all(runs);
}
