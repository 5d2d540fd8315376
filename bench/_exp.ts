import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureTemplate, QemuMicrovmDriver } from '../src/vmm/index.js';
const driver = new QemuMicrovmDriver({ runRoot: mkdtempSync(join(tmpdir(), 'sbxe-')) });
const tpl = await ensureTemplate(driver, 'sandbox/minimal', { progress: () => undefined });
const vm = await driver.clone(tpl);
const time = async (label: string, f: () => Promise<unknown>, n = 15) => {
  const xs: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await f();
    xs.push(performance.now() - t);
  }
  console.log(label, xs.map((x) => x.toFixed(1)).join(' '));
};
await time('exec true', () => vm.run(['true']));
await time('ping', () => vm.agent.ping());
await time('exec /bin/true (abs)', () => vm.run(['/bin/true']));
const r = await vm.run(['sh', '-c', 'ls -la /bin/true; cat /proc/cmdline; cat /proc/meminfo | head -3']);
console.log(r.stdout.toString());
await time(
  'sh loop 50 true',
  () => vm.run(['sh', '-c', 'i=0; while [ $i -lt 50 ]; do /bin/true; i=$((i+1)); done']),
  3,
);
await time('sh loop 50 builtin', () => vm.run(['sh', '-c', 'i=0; while [ $i -lt 50 ]; do :; i=$((i+1)); done']), 3);
await vm.destroy();
await driver.destroyAll();
