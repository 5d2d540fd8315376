/**
 * Templates: a cold boot snapshotted once (cached on disk by content hash), or a VM's full state materialised
 * into one (checkpoint); read back from their directory (`mem`, `state`, `template.json`); and the named ones
 * (`sandbox/base`, ...) built from a guest image first.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import {
  AgentClient,
  cachedArtifact,
  contentHash,
  ensureGuestImage,
  stderrProgress,
  type GuestImageArtifact,
  type Progress,
} from '../guest/index.js';
import { migrateToFile, waitIncoming } from './migration.js';
import type { QemuProcess } from './process.js';
import type { LaunchPlan } from './qemu-argv.js';
import type { QemuMicrovmDriver } from './qemu-driver.js';
import { QmpClient } from './qmp.js';
import { newId } from './run-records.js';
import type { Template, TemplateSpec, VmRecord } from './types.js';
import { tailOf, unlessExited, withDeadline } from './waits.js';

export function templateFromImage(img: GuestImageArtifact): TemplateSpec {
  const image: TemplateSpec['image'] = { kernel: img.kernel, initramfs: img.initramfs, hash: img.hash };
  if (img.rootfs) {
    image.rootfs = img.rootfs;
    image.rootfsType = img.rootfsType ?? 'ext4';
  }
  return { name: img.def.name, image, memoryMiB: img.def.memoryMiB, network: img.def.network, warmup: img.def.warmup };
}

/** Build what is missing (kernel, initramfs, rootfs, snapshot) for a named template, with progress. */
export async function ensureTemplate(
  driver: QemuMicrovmDriver,
  name: string,
  opts: { progress?: Progress } = {},
): Promise<Template> {
  const img = await ensureGuestImage(name, opts);
  return driver.createTemplate(templateFromImage(img), opts);
}

function slug(name: string): string {
  return name.replace(/[^a-zA-Z0-9._-]+/g, '_').replace(/^_+|_+$/g, '') || 'template';
}

export function templateHash(driver: QemuMicrovmDriver, spec: TemplateSpec, accel: 'kvm' | 'tcg'): string {
  const network = spec.network ?? 'none';
  return contentHash([
    // Bump when qemuArgv's devices change (qemu-argv.ts): a snapshot only loads into the same device layout.
    'template-v3',
    spec.name,
    spec.image.hash,
    String(spec.memoryMiB ?? 128),
    String(spec.vcpus ?? 1),
    network,
    accel,
    driver.qemuVersion(),
    driver.kernelCmdline({ image: spec.image, network }, accel),
    JSON.stringify(spec.warmup ?? []),
  ]);
}

/** The template of `spec` under one accelerator: the cached one, or a cold boot snapshotted now. */
export async function buildTemplate(
  driver: QemuMicrovmDriver,
  spec: TemplateSpec,
  accel: 'kvm' | 'tcg',
  opts: { progress?: Progress; bootTimeoutMs?: number },
): Promise<Template> {
  const progress = opts.progress ?? stderrProgress;
  for (const f of [spec.image.kernel, spec.image.initramfs, ...(spec.image.rootfs ? [spec.image.rootfs] : [])]) {
    if (!existsSync(f)) {
      throw new SandboxError('vm.image-missing', `guest image file ${f} does not exist`, {
        hint: 'rebuild the guest image (ensureGuestImage) or fix the path',
      });
    }
  }
  const hash = templateHash(driver, spec, accel);
  const dir = await cachedArtifact(
    slug(spec.name),
    hash,
    async (tmp) => {
      progress(`template ${spec.name}: cold boot (${accel})`);
      const t = await bootAndSnapshot(driver, spec, accel, tmp, hash, opts.bootTimeoutMs ?? 90_000);
      writeTemplateJson(tmp, t);
      progress(`template ${spec.name}: booted in ${t.bootMs} ms, snapshotted`);
    },
    { progress, root: driver.options.templateRoot },
  );
  return loadTemplate(dir);
}

export function loadTemplate(dir: string): Template {
  let t: Template;
  try {
    t = JSON.parse(readFileSync(join(dir, 'template.json'), 'utf8')) as Template;
  } catch (err) {
    throw new SandboxError('template.invalid', `no valid template in ${dir}`, {
      cause: err,
      hint: 'remove the directory and create the template again',
    });
  }
  return { ...t, dir, memFile: join(dir, 'mem'), stateFile: join(dir, 'state') };
}

/** The paths in a template are where it is now: loadTemplate() puts them back. */
function writeTemplateJson(dir: string, t: Template): void {
  writeFileSync(join(dir, 'template.json'), JSON.stringify({ ...t, dir: undefined }, null, 2));
}

/**
 * Write the device state into `stateFile` and quit QEMU. `x-ignore-shared` leaves the RAM out: it is already in
 * the template's shared RAM file. `what` names the migration in errors, `phase` the step QEMU may die in.
 */
async function snapshotDevicesAndQuit(
  driver: QemuMicrovmDriver,
  proc: QemuProcess,
  qmp: QmpClient,
  stateFile: string,
  logFile: string,
  names: { what: string; phase: string; notExited: string },
): Promise<void> {
  await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: true }] });
  await unlessExited(
    proc,
    migrateToFile(qmp, stateFile, driver.options.runRoot, { what: names.what }),
    names.phase,
    logFile,
  );
  await qmp.execute('quit').catch(() => undefined);
  await withDeadline(proc.exited, 10_000, () => new SandboxError('vm.stop-timeout', names.notExited));
}

async function bootAndSnapshot(
  driver: QemuMicrovmDriver,
  spec: TemplateSpec,
  accel: 'kvm' | 'tcg',
  outDir: string,
  hash: string,
  bootTimeoutMs: number,
): Promise<Template> {
  const network = spec.network ?? 'none';
  const memoryMiB = spec.memoryMiB ?? 128;
  const vcpus = spec.vcpus ?? 1;
  const cmdline = driver.kernelCmdline({ image: spec.image, network }, accel);
  const id = newId('tpl');
  const runDir = join(driver.options.runRoot, id);
  mkdirSync(runDir, { recursive: true });
  const memFile = join(outDir, 'mem');
  const logFile = join(runDir, 'qemu.log');
  const started = performance.now();
  const { proc } = driver.launch({
    id,
    runDir,
    accel,
    memoryMiB,
    vcpus,
    network,
    image: spec.image,
    cmdline,
    mem: { kind: 'file', path: memFile, share: true },
    incoming: false,
  });
  let qmp: QmpClient | undefined;
  let agent: AgentClient | undefined;
  try {
    qmp = await unlessExited(
      proc,
      QmpClient.connect(join(runDir, 'qmp.sock'), { timeoutMs: 10_000 }),
      'template boot',
      logFile,
    );
    agent = await unlessExited(
      proc,
      AgentClient.connect(join(runDir, 'agent.sock'), { connectTimeoutMs: bootTimeoutMs }),
      'template boot',
      logFile,
    ).catch((err: unknown) => {
      let consoleTail = '';
      try {
        consoleTail = readFileSync(join(runDir, 'console.log'), 'utf8').slice(-600);
      } catch {
        /* none */
      }
      throw new SandboxError(
        'vm.boot-failed',
        `template ${spec.name} did not boot: ${(err as Error).message}${consoleTail ? `\nconsole: ${consoleTail}` : ''}${tailOf(logFile, 'qemu.log')}${proc.alive ? '' : ' (QEMU exited)'}`,
        {
          cause: err,
          hint: 'check the kernel/initramfs; under TCG the TSC arguments must be present',
        },
      );
    });
    const bootMs = Math.round(performance.now() - started);
    for (const cmd of spec.warmup ?? []) {
      const r = await agent.run(cmd, { timeoutMs: 120_000 });
      if (r.exitCode !== 0) {
        throw new SandboxError(
          'template.warmup-failed',
          `warmup ${cmd.join(' ')} exited ${r.exitCode}: ${r.stderr.toString().slice(0, 500)}`,
          { hint: 'fix the template warmup command' },
        );
      }
    }
    await agent.sync();
    // Snapshot with the host still connected: the agent sits in a plain read() of its port, and a clone
    // (whose host dials before the state loads) wakes straight from it on the first bytes, with no
    // port-open event or signal to handle first. Closed only after QEMU has quit.
    await qmp.execute('stop');
    await snapshotDevicesAndQuit(driver, proc, qmp, join(outDir, 'state'), logFile, {
      what: `template ${spec.name} snapshot`,
      phase: 'template snapshot',
      notExited: 'template QEMU did not exit after quit',
    });
    return {
      name: spec.name,
      hash,
      dir: outDir,
      memFile,
      stateFile: join(outDir, 'state'),
      memoryMiB,
      vcpus,
      network,
      accel,
      image: spec.image,
      cmdline,
      createdAt: new Date().toISOString(),
      bootMs,
    };
  } finally {
    agent?.close();
    qmp?.close();
    await proc.kill();
    rmSync(runDir, { recursive: true, force: true });
  }
}

/** Materialise a full-state file into a new template (shared RAM file + device state). */
export async function materialiseTemplate(...args: Parameters<typeof materialiseOnce>): Promise<Template> {
  try {
    return await materialiseOnce(...args);
  } catch (err) {
    // The full state is still on disk: a save whose stream did not end (migrateToFile) is made once more with a
    // fresh QEMU rather than failing the checkpoint or the fork.
    if ((err as SandboxError).code !== 'vm.migration-timeout') throw err;
    args[0].log.warn({ template: args[1], err }, 'saving the checkpoint template failed; trying once more');
    return materialiseOnce(...args);
  }
}

async function materialiseOnce(
  driver: QemuMicrovmDriver,
  name: string,
  from: VmRecord,
  fullState: string,
  image: Template['image'],
  cmdline: string,
): Promise<Template> {
  const hash = randomBytes(8).toString('hex');
  const dir = join(driver.options.templateRoot, `${slug(name)}-${hash}`);
  mkdirSync(dir, { recursive: true });
  const id = newId('mat');
  const runDir = join(driver.options.runRoot, id);
  mkdirSync(runDir, { recursive: true });
  const plan: LaunchPlan = {
    id,
    runDir,
    accel: from.accel,
    memoryMiB: from.memoryMiB,
    vcpus: from.vcpus,
    network: from.network,
    image,
    cmdline,
    mem: { kind: 'file', path: join(dir, 'mem'), share: true },
    incoming: true,
  };
  let proc: QemuProcess | undefined;
  let qmp: QmpClient | undefined;
  const logFile = join(runDir, 'qemu.log');
  try {
    // QEMU has its own copy once launched; ours is closed then and only then. Closing it again later would close
    // whatever file or socket had been given the same number meanwhile (a fork's state file, the claim table).
    const fd = openSync(fullState, 'r');
    try {
      proc = driver.launch(plan, [fd]).proc;
    } finally {
      closeSync(fd);
    }
    qmp = await unlessExited(proc, QmpClient.connect(join(runDir, 'qmp.sock')), 'checkpoint', logFile);
    await qmp.execute('migrate-incoming', { uri: 'fd:3' });
    await unlessExited(proc, waitIncoming(qmp, 60_000), 'checkpoint load', logFile);
    await snapshotDevicesAndQuit(driver, proc, qmp, join(dir, 'state'), logFile, {
      what: 'checkpoint',
      phase: 'checkpoint',
      notExited: 'checkpoint QEMU did not exit',
    });
    const t: Template = {
      name,
      hash,
      dir,
      memFile: join(dir, 'mem'),
      stateFile: join(dir, 'state'),
      memoryMiB: from.memoryMiB,
      vcpus: from.vcpus,
      network: from.network,
      accel: from.accel,
      image,
      cmdline,
      createdAt: new Date().toISOString(),
      bootMs: 0,
    };
    writeTemplateJson(dir, t);
    return t;
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  } finally {
    qmp?.close();
    await proc?.kill();
    rmSync(runDir, { recursive: true, force: true });
  }
}
