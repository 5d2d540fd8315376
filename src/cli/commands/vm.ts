/**
 * `sbx vm ...`: try the microVM substrate by hand. VMs outlive the command (they are re-adopted from
 * their run dir by id), except `sbx vm run`, which clones, runs one command and destroys the VM.
 */
import type { Command } from 'commander';
import { SandboxError } from '../../errors.js';
import { listGuestTemplates } from '../../guest/index.js';
import { ensureTemplate, QemuMicrovmDriver, type Vm } from '../../vmm/index.js';

const progress = (l: string) => process.stderr.write(`sbx: ${l}\n`);

function driverFrom(opts: { accel?: string }): QemuMicrovmDriver {
  const accel = opts.accel as 'auto' | 'kvm' | 'tcg' | undefined;
  if (accel && !['auto', 'kvm', 'tcg'].includes(accel)) {
    throw new SandboxError('cli.usage', `--accel must be auto, kvm or tcg (got ${accel})`, {
      hint: 'use --accel auto',
    });
  }
  return new QemuMicrovmDriver({ accel });
}

async function withVm<T>(id: string, fn: (vm: Vm) => Promise<T>): Promise<T> {
  const driver = new QemuMicrovmDriver();
  const vm = await driver.adopt(id);
  return fn(vm);
}

async function runIn(vm: Vm, argv: string[]): Promise<number> {
  const r = await vm
    .exec(argv, { collect: false, onStdout: (b) => process.stdout.write(b), onStderr: (b) => process.stderr.write(b) })
    .wait();
  return r.exitCode;
}

export function register(program: Command): void {
  const vm = program
    .command('vm')
    .description('microVMs by hand: templates, clones, exec, pause/resume, fork (QEMU microvm)');
  vm.option('--accel <mode>', 'auto | kvm | tcg', 'auto');

  vm.command('templates')
    .description('list the named templates')
    .action(() => {
      for (const t of listGuestTemplates())
        process.stdout.write(`${t.name.padEnd(16)} ${t.memoryMiB} MiB  network=${t.network}  ${t.description}\n`);
    });

  vm.command('boot')
    .description('build (if missing) and boot + snapshot a template')
    .option('-t, --template <name>', 'template', 'sandbox/base')
    .action(async (o: { template: string }) => {
      const t = await ensureTemplate(driverFrom(vm.opts()), o.template, { progress });
      process.stdout.write(`${t.name} ready: ${t.dir} (cold boot ${t.bootMs} ms, ${t.accel})\n`);
    });

  vm.command('clone')
    .description('clone a running VM from a template; prints its id')
    .option('-t, --template <name>', 'template', 'sandbox/base')
    .action(async (o: { template: string }) => {
      const driver = driverFrom(vm.opts());
      const t = await ensureTemplate(driver, o.template, { progress });
      const started = performance.now();
      const v = await driver.clone(t);
      process.stderr.write(`sbx: cloned in ${(performance.now() - started).toFixed(1)} ms\n`);
      process.stdout.write(`${v.id}\n`);
      process.exit(0); // leave the VM running; it is re-adopted by id later
    });

  vm.command('list')
    .description('list VMs and their state')
    .action(() => {
      for (const r of new QemuMicrovmDriver().list()) {
        process.stdout.write(
          `${r.id}  ${r.alive ? r.state : r.state === 'hibernated' ? 'hibernated' : 'gone'}  pid=${r.pid ?? '-'}  template=${r.template.name}  ${r.createdAt}\n`,
        );
      }
    });

  vm.command('exec <id> <cmd...>')
    .description('run a command in a VM, stream its output, exit with its exit code')
    .action(async (id: string, cmd: string[]) => {
      const code = await withVm(id, (v) => runIn(v, cmd));
      process.exit(code);
    });

  for (const [name, desc] of [
    ['pause', 'freeze a VM (QMP stop)'],
    ['resume', 'continue a paused VM'],
    ['hibernate', 'save a VM to disk and stop its QEMU'],
    ['restore', 'bring a hibernated VM back'],
  ] as const) {
    vm.command(`${name} <id>`)
      .description(desc)
      .action(async (id: string) => {
        await withVm(id, (v) => v[name]());
        process.stdout.write(`${id}: ${name} done\n`);
        process.exit(0);
      });
  }

  vm.command('fork <id>')
    .description('fork N children from a running VM; prints their ids')
    .option('-n, --count <n>', 'children', '1')
    .action(async (id: string, o: { count: string }) => {
      const kids = await withVm(id, (v) => v.fork(Number(o.count)));
      for (const k of kids) process.stdout.write(`${k.id}\n`);
      process.exit(0);
    });

  vm.command('destroy <ids...>')
    .description('destroy VMs (process, sockets and files)')
    .action(async (ids: string[]) => {
      const driver = new QemuMicrovmDriver();
      for (const id of ids) {
        try {
          await (await driver.adopt(id)).destroy();
        } catch (err) {
          if (err instanceof SandboxError && err.code === 'vm.gone') driver.removeStale(id);
          else throw err;
        }
        process.stdout.write(`${id} destroyed\n`);
      }
      process.exit(0);
    });

  vm.command('run')
    .description('clone a VM from the template, run CMD, print its output, exit with its code, destroy the VM')
    .option('-t, --template <name>', 'template', 'sandbox/base')
    .argument('<cmd...>', 'command and arguments (after --)')
    .action(async (cmd: string[], o: { template: string }) => {
      const driver = driverFrom(vm.opts());
      const t = await ensureTemplate(driver, o.template, { progress });
      const v = await driver.clone(t);
      let code = 1;
      try {
        code = await runIn(v, cmd);
      } finally {
        await v.destroy();
      }
      process.exit(code);
    });
}
