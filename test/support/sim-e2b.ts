/**
 * The e2b control plane in-process over one simulated node (src/vmm/sim-driver.ts): the real E2bApi, SandboxStorage,
 * Fleet (fed by the node's change feed) and SandboxdClient, talking HTTP on 127.0.0.1 to the real sandboxd API of a
 * sim engine with warm pools. No cluster: the node is announced by a stand-in for the NodeInventory informer. For
 * the e2b surface's tests that need a node behind it (what is sent to it, what it then enforces and reports).
 */
import { join } from 'node:path';
import type { PoolKeyOf } from '../../src/api/pool-key.js';
import { ApiKeys } from '../../src/apiserver/e2b/api-keys.js';
import { E2bApi } from '../../src/apiserver/e2b/server.js';
import type { TemplateAlias } from '../../src/apiserver/e2b/templates.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import { Fleet, type InventoryObj } from '../../src/apiserver/sandboxes/fleet.js';
import { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SandboxStorage } from '../../src/apiserver/sandboxes/storage.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import type { Informer } from '../../src/kube/index.js';
import { silentLogger } from '../../src/log/logger.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { SandboxdApi } from '../../src/sandboxd/http-api.js';
import type { SimulatedMicrovmDriver } from '../../src/vmm/index.js';
import { eventually } from './eventually.js';
import { listenSandboxdApi, simNodeEngine } from './sim-node.js';

export const SIM_E2B_ROOT = 'root-token-of-the-sim-e2b-node';
export const SIM_E2B_KEY = 'sim-e2b-api-key';

export interface SimE2b {
  engine: NodeEngine;
  driver: SimulatedMicrovmDriver;
  /** The node's sandboxd API base URL (root token SIM_E2B_ROOT). */
  node: string;
  /** The e2b API base URL (X-API-KEY SIM_E2B_KEY). */
  url: string;
  store: SandboxStore;
  close(): Promise<void>;
}

/** Start it in `dir`, with `pools` kept `warm` VMs each; e2b namespace `e2b`. */
export async function startSimE2b(
  dir: string,
  templates: readonly TemplateAlias[],
  pools: ReadonlyArray<{ key: PoolKeyOf; warm: number }>,
): Promise<SimE2b> {
  const { engine, driver } = simNodeEngine(join(dir, 'node'));
  await engine.start();
  engine.setTargets(pools.map((p) => ({ key: p.key, warm: p.warm })));
  for (const p of pools) await eventually(() => engine.warmCount(p.key), { until: (n) => n === p.warm });
  let sandboxd: { api: SandboxdApi; port: number; base: string } | undefined;
  let e2b: E2bApi | undefined;
  let fleet: Fleet | undefined;
  const client = new SandboxdClient({ token: SIM_E2B_ROOT });
  try {
    sandboxd = await listenSandboxdApi({
      engine,
      auth: { rootToken: SIM_E2B_ROOT, tenants: new Map(), allowAnonymous: false },
    });
    const inventory = {
      metadata: { name: 'sim-node' },
      node: 'sim-node',
      address: `127.0.0.1:${sandboxd.port}`,
    } as unknown as InventoryObj;
    // The NodeInventory informer, announcing the one node once the Fleet has subscribed.
    const informer = {
      addHandler: (h: { onAdd: (o: InventoryObj) => void }) => queueMicrotask(() => h.onAdd(inventory)),
      list: () => [inventory],
    } as unknown as Informer<InventoryObj>;
    const store = new SandboxStore(silentLogger, new EventLog(256));
    fleet = new Fleet(informer, store, client, silentLogger);
    const f = fleet;
    await eventually(() => f.isSynced('sim-node'), { until: (s) => s });
    const storage = new SandboxStorage(store, fleet, client, { phase: () => 'active' }, silentLogger);
    e2b = new E2bApi({
      storage,
      store,
      fleet,
      client,
      keys: new ApiKeys([SIM_E2B_KEY], false),
      templates,
      namespace: 'e2b',
      domain: undefined,
      logger: silentLogger,
    });
    const { port } = await e2b.listen('127.0.0.1', 0);
    const [api, server, fl] = [sandboxd.api, e2b, fleet];
    return {
      engine,
      driver,
      node: sandboxd.base,
      url: `http://127.0.0.1:${port}`,
      store,
      close: async () => {
        await server.close();
        fl.stop();
        client.close();
        await api.close();
        await engine.close({ destroyVms: true });
      },
    };
  } catch (err) {
    await e2b?.close();
    fleet?.stop();
    client.close();
    await sandboxd?.api.close();
    await engine.close({ destroyVms: true });
    throw err;
  }
}
