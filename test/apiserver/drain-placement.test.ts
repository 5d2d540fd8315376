/**
 * sandbox-apiserver's placement honours a draining node (docs/sandboxd.md "Draining"): the real Fleet (fed by the
 * nodes' change feeds over HTTP), SandboxdClient and SandboxCreator over two simulated sandboxd nodes in this process
 * (no cluster, no VM: src/vmm/sim-driver.ts). A node drained with `POST /v1/drain` is dropped from the candidates
 * within its feed's next line; every create then lands on the other node; with both drained a create is a clean 503
 * and no claim is made anywhere; undrained, creates land again.
 *
 *   node --import tsx --test test/apiserver/drain-placement.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxCreator } from '../../src/apiserver/sandboxes/create.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import { Fleet, type InventoryObj } from '../../src/apiserver/sandboxes/fleet.js';
import { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { StatusFailure } from '../../src/apiserver/status.js';
import type { Informer } from '../../src/kube/index.js';
import { silentLogger } from '../../src/log/logger.js';
import { NodeDrain } from '../../src/sandboxd/drain.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { SandboxdApi } from '../../src/sandboxd/http-api.js';
import { eventually } from '../support/eventually.js';
import { listenSandboxdApi, simNodeEngine } from '../support/sim-node.js';

const ROOT = 'root-token-of-the-drain-placement-nodes';
const KEY = { template: 'sandbox/minimal', net: 'none', size: 'small' } as const;

interface Node {
  name: string;
  engine: NodeEngine;
  drain: NodeDrain;
  api: SandboxdApi;
  base: string;
}

describe('sandbox-apiserver places no create on a draining node (sim nodes)', () => {
  let dir: string;
  const nodes: Node[] = [];
  let fleet: Fleet;
  let client: SandboxdClient;
  let creator: SandboxCreator;
  let n = 0;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'drain-placement-'));
    for (const name of ['node-a', 'node-b']) {
      const { engine } = simNodeEngine(join(dir, name), { nodeName: name });
      await engine.start();
      engine.setTargets([{ key: KEY, warm: 3 }]);
      const drain = new NodeDrain({ engine, dataDir: join(dir, name), logger: silentLogger });
      const { api, base } = await listenSandboxdApi({
        engine,
        drain,
        auth: { rootToken: ROOT, tenants: new Map(), allowAnonymous: false },
      });
      nodes.push({ name, engine, drain, api, base });
    }
    const inventories = nodes.map(
      (nd) => ({ metadata: { name: nd.name }, node: nd.name, address: nd.base.replace('http://', '') }) as InventoryObj,
    );
    const informer = {
      addHandler: (h: { onAdd: (o: InventoryObj) => void }) =>
        queueMicrotask(() => inventories.forEach((i) => h.onAdd(i))),
      list: () => inventories,
    } as unknown as Informer<InventoryObj>;
    client = new SandboxdClient({ token: ROOT });
    const store = new SandboxStore(silentLogger, new EventLog(64));
    fleet = new Fleet(informer, store, client, silentLogger);
    creator = new SandboxCreator(store, fleet, client, { phase: () => 'active' }, silentLogger);
    await eventually(
      () =>
        fleet
          .candidates(KEY)
          .map((c) => c.node)
          .sort(),
      {
        until: (c) => c.join() === 'node-a,node-b',
        what: 'both nodes synced with warm VMs',
      },
    );
  });

  after(async () => {
    fleet?.stop();
    client?.close();
    for (const nd of nodes) {
      await nd.api.close();
      await nd.drain.close();
      await nd.engine.close({ destroyVms: true });
    }
    await rm(dir, { recursive: true, force: true });
  });

  const create = () =>
    creator.create({
      namespace: 'ns',
      body: {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind: 'Sandbox',
        metadata: { name: `s${n++}` },
        spec: { podTemplate: { spec: { containers: [{ name: 'c', image: KEY.template }] } } },
      },
      dryRun: false,
      fieldValidation: 'Strict',
      warnings: [],
    });
  const drainCall = async (nd: Node, method: 'POST' | 'DELETE') => {
    const res = await fetch(`${nd.base}/v1/drain`, { method, headers: { authorization: `Bearer ${ROOT}` } });
    assert.equal(res.status, 200, await res.text());
  };
  const claims = () => nodes.map((nd) => nd.engine.claimedCount);

  it('a drained node leaves the candidates; every create lands on the other node', async () => {
    await drainCall(nodes[0]!, 'POST');
    await eventually(() => fleet.candidates(KEY).map((c) => c.node), {
      until: (c) => c.join() === 'node-b',
      what: 'node-a gone from the candidates',
    });
    assert.deepEqual(
      fleet.provisioners(KEY).map((c) => c.node),
      ['node-b'],
      'nor does it provision on a miss',
    );
    for (let i = 0; i < 3; i++) {
      const made = await create();
      assert.equal(made.entry?.node, 'node-b');
    }
    assert.deepEqual(claims(), [0, 3]);
  });

  it('with every node draining a create is a clean 503 and claims nothing', async () => {
    await drainCall(nodes[1]!, 'POST');
    await eventually(() => fleet.candidates(KEY).length, { until: (c) => c === 0, what: 'no candidate left' });
    await assert.rejects(create(), (err: unknown) => err instanceof StatusFailure && err.status.code === 503);
    assert.deepEqual(claims(), [0, 3], 'nothing claimed, nothing lost');
  });

  it('undrained, creates land again', async () => {
    await drainCall(nodes[0]!, 'DELETE');
    await drainCall(nodes[1]!, 'DELETE');
    await eventually(() => fleet.candidates(KEY).length, {
      until: (c) => c === 2,
      timeoutMs: 10_000,
      what: 'both nodes candidates again (pools refilled)',
    });
    const made = await create();
    assert.ok(['node-a', 'node-b'].includes(made.entry?.node ?? ''));
  });
});
