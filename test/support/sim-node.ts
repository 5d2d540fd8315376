/**
 * A node in-process over the simulated VMM (src/vmm/sim-driver.ts): the real NodeEngine with the defaults the tests
 * share (no priming, a 1 ms refill delay, its run dir under `dir`), and its HTTP API on an ephemeral port.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeEngine, type EngineOptions } from '../../src/sandboxd/engine.js';
import { SandboxdApi, type ApiServerOptions } from '../../src/sandboxd/http-api.js';
import { SimulatedMicrovmDriver } from '../../src/vmm/index.js';

export type SimNodeOptions = Partial<Omit<EngineOptions, 'dataDir' | 'driver'>> & {
  /** How long a clone takes (default 1). */
  cloneMs?: number;
};

/** A NodeEngine with its data in `dir` (default node name `sim-node`); not started. */
export function simNodeEngine(
  dir: string,
  opts: SimNodeOptions = {},
): { driver: SimulatedMicrovmDriver; engine: NodeEngine } {
  const { cloneMs = 1, ...extra } = opts;
  const driver = new SimulatedMicrovmDriver({ root: join(dir, 'sim'), cloneMs });
  const engine = new NodeEngine({
    dataDir: dir,
    nodeName: 'sim-node',
    advertiseAddr: '127.0.0.1:7777',
    driver,
    primeWarmVms: false,
    refillDelayMs: 1,
    runRoot: join(dir, 'run'),
    ...extra,
  });
  return { driver, engine };
}

/** A node's HTTP API listening on 127.0.0.1 (an ephemeral port), and its base URL. */
export async function listenSandboxdApi(
  opts: ApiServerOptions,
): Promise<{ api: SandboxdApi; port: number; base: string }> {
  const api = new SandboxdApi(opts);
  const { port } = await api.listen('127.0.0.1', 0);
  return { api, port, base: `http://127.0.0.1:${port}` };
}

export interface SimNode {
  dir: string;
  driver: SimulatedMicrovmDriver;
  engine: NodeEngine;
  api: SandboxdApi;
  base: string;
  /** Close the API, destroy every VM, remove the dir. */
  close(): Promise<void>;
}

/** A started simulated node in a fresh temp dir (`<prefix>…`), its API taking `rootToken` and no tenant tokens. */
export async function startSimNode(prefix: string, rootToken: string, opts: SimNodeOptions = {}): Promise<SimNode> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const { driver, engine } = simNodeEngine(dir, opts);
  await engine.start();
  const { api, base } = await listenSandboxdApi({
    engine,
    auth: { rootToken, tenants: new Map(), allowAnonymous: false },
  });
  const close = async () => {
    await api.close();
    await engine.close({ destroyVms: true });
    await rm(dir, { recursive: true, force: true });
  };
  return { dir, driver, engine, api, base, close };
}
