/**
 * A SIMULATED sandboxd node for benchmarks of the aggregated read path at fleet sizes this machine cannot boot:
 * it serves sandboxd's change feed (docs/sandboxd-api.md) over N records that have no VM behind them, and nothing
 * else. Every sandbox it reports is named `sim-<k>` and labelled `sandbox.cocoonstack.io/simulated: "true"`, and its
 * NodeInventory is annotated as a simulation, so nobody mistakes one for a real sandbox.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { KubeClient } from '../../src/kube/index.js';
import { NodeInventories } from '../../src/kube/index.js';

export interface SimulatedNode {
  name: string;
  address: string;
  close(): Promise<void>;
}

function rows(node: string, namespace: string, n: number, rv0: number): string[] {
  const out: string[] = [];
  for (let k = 0; k < n; k++) {
    const name = `sim-${String(k).padStart(6, '0')}`;
    out.push(
      JSON.stringify({
        type: 'ADDED',
        sandbox: {
          id: `sb_sim${node.replace(/\W/g, '')}${k.toString(16)}`,
          key: { template: 'sandbox/minimal', net: 'none', size: 'small' },
          deadline: '2099-01-01T00:00:00.000Z',
          claimed_at: '2026-12-01T00:00:00.000Z',
          hibernated: false,
          phase: 'Running',
          rv: rv0 + k,
          claim_ref: `${namespace}/${name}`,
          object: {
            metadata: {
              name,
              namespace,
              uid: `00000000-0000-4000-8000-${k.toString(16).padStart(12, '0')}`,
              creationTimestamp: '2026-12-01T00:00:00Z',
              labels: { 'sandbox.cocoonstack.io/simulated': 'true' },
            },
            spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'sandbox/minimal' }] } } },
          },
        },
      }),
    );
  }
  return out;
}

/** Start one on `host`, with `n` sandboxes in `namespace`, and publish its NodeInventory through `client`. */
export async function startSimulatedNode(opts: {
  client: KubeClient;
  host: string;
  name: string;
  namespace: string;
  sandboxes: number;
}): Promise<SimulatedNode> {
  const rv = Date.now() * 1000;
  const snapshot = [
    JSON.stringify({ type: 'BEGIN', rv: rv + opts.sandboxes }),
    ...rows(opts.name, opts.namespace, opts.sandboxes, rv),
    JSON.stringify({ type: 'SYNCED', rv: rv + opts.sandboxes, pools: [] }),
  ].join('\n');
  const pings = new Set<NodeJS.Timeout>();
  const server: Server = createServer((req, res) => {
    if (req.url?.startsWith('/v1/sandboxes?watch=1')) {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${snapshot}\n`);
      const t = setInterval(() => res.write('{"type":"PING"}\n'), 5000);
      pings.add(t);
      res.on('close', () => {
        clearInterval(t);
        pings.delete(t);
      });
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"simulated node: only the change feed"}');
  });
  await new Promise<void>((r) => server.listen(0, opts.host, r));
  const address = `${opts.host}:${(server.address() as AddressInfo).port}`;
  await opts.client.patch(
    NodeInventories,
    undefined,
    opts.name,
    {
      apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
      kind: 'NodeInventory',
      metadata: {
        name: opts.name,
        annotations: { 'sandbox.cocoonstack.io/simulation': 'bench: no VMs behind these sandboxes' },
      },
      node: opts.name,
      address,
    },
    'apply',
    { fieldManager: 'bench-simulated-node', force: true },
  );
  return {
    name: opts.name,
    address,
    close: async () => {
      for (const t of pings) clearInterval(t);
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await opts.client.delete(NodeInventories, undefined, opts.name).catch(() => undefined);
    },
  };
}
