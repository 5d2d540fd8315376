/**
 * Idle suspend through the e2b API (docs/e2b.md "Idle suspend"): a sandbox of a template whose alias sets
 * `idleHibernateSeconds` is suspended by its node when idle (the Sandbox's phase `Suspended`), stays `running` to
 * e2b, and the SDK's next command runs in it with its files: the node wakes it for the request, the SDK sees latency.
 * The real JS SDK against the shared aggregated platform with real microVMs.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Sandbox } from 'e2b';
import {
  E2B_IDLE_SECONDS,
  E2B_IDLE_TEMPLATE,
  e2bOptions,
  getAggregated,
  whileE2bBusy,
  type AggregatedEnv,
} from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';

let env: AggregatedEnv;
const created: Sandbox[] = [];

describe('e2b idle suspend (aggregated layout, real microVMs)', () => {
  before(async () => {
    env = await getAggregated();
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
  });

  it('a sandbox idle for its template’s policy is suspended, reads as running, and the next command wakes it', async () => {
    const sbx = await whileE2bBusy(() => Sandbox.create(E2B_IDLE_TEMPLATE, { ...e2bOptions(env), timeoutMs: 600_000 }));
    created.push(sbx);
    await sbx.files.write('/home/user/note', 'written before the suspend');
    const phase = async () =>
      JSON.parse(await env.kubectl(['get', 'sandbox', sbx.sandboxId, '-n', env.e2b.namespace, '-o', 'json'])).metadata
        .labels['sandbox.cocoonstack.io/phase'] as string;
    const t0 = Date.now();
    await eventually(phase, {
      until: (p) => p === 'Suspended',
      timeoutMs: 90_000,
      intervalMs: 250,
      what: 'the sandbox suspended by its idle policy',
    });
    assert.ok(Date.now() - t0 >= (E2B_IDLE_SECONDS - 1) * 1000, 'not before its policy');
    const info = await Sandbox.getInfo(sbx.sandboxId, e2bOptions(env));
    assert.equal(info.state, 'running', 'a suspended sandbox is running to e2b');
    const w0 = performance.now();
    const r = await sbx.commands.run('cat /home/user/note');
    console.log(
      `# first command on a suspended e2b sandbox (wake + command): ${(performance.now() - w0).toFixed(0)} ms`,
    );
    assert.equal(r.stdout, 'written before the suspend');
    assert.notEqual(await phase(), 'Suspended');
  });
});
