/**
 * bench/vm/exec-cost: where a warm exec's time goes inside one clone (`node --import tsx bench/vm/exec-cost.ts`).
 * Prints, per call: the agent's `exec true` (bare name and absolute path), an agent ping (the transport alone), and
 * busybox `sh` running `/bin/true` 50 times in a loop (the guest kernel's own fork + exec + exit + wait, no agent),
 * next to the same loop with a shell builtin (the shell's own cost). First, the first `exec true` in each of 8 fresh
 * clones (what TCG's empty translation cache costs a new VM).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureTemplate, QemuMicrovmDriver } from '../../src/vmm/index.js';
import { median } from '../machine.js';

const runRoot = mkdtempSync(join(tmpdir(), 'sbxe-'));
const driver = new QemuMicrovmDriver({ runRoot });
try {
  const tpl = await ensureTemplate(driver, 'sandbox/minimal', { progress: (l) => process.stderr.write(`${l}\n`) });
  const firsts: number[] = [];
  for (let i = 0; i < 8; i++) {
    const fresh = await driver.clone(tpl);
    const t = performance.now();
    await fresh.run(['true']);
    firsts.push(performance.now() - t);
    await fresh.destroy();
  }
  console.log(
    `first exec true in a fresh clone (ms, in call order): ${firsts.map((x) => x.toFixed(1)).join(' ')}; ` +
      `median ${median(firsts).toFixed(1)}`,
  );
  const vm = await driver.clone(tpl);
  const time = async (label: string, f: () => Promise<unknown>, n = 15) => {
    const xs: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await f();
      xs.push(performance.now() - t);
    }
    console.log(
      `${label} (ms, in call order): ${xs.map((x) => x.toFixed(1)).join(' ')}; median ${median(xs).toFixed(1)}`,
    );
  };
  await time('exec true', () => vm.run(['true']));
  await time('agent ping', () => vm.agent.ping());
  await time('exec /bin/true', () => vm.run(['/bin/true']));
  const loop = (body: string) => ['sh', '-c', `i=0; while [ $i -lt 50 ]; do ${body}; i=$((i+1)); done`];
  await time('sh: 50 x /bin/true', () => vm.run(loop('/bin/true')), 3);
  await time('sh: 50 x builtin :', () => vm.run(loop(':')), 3);
  await vm.destroy();
} finally {
  await driver.destroyAll();
  rmSync(runRoot, { recursive: true, force: true });
}
