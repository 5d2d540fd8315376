/**
 * Bad input against real QEMU: a missing kernel/image, QEMU crashing mid-clone, a guest that never
 * answers, refused actions. Each must fail with a clear error in bounded time and leak nothing.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SandboxError } from '../../src/errors.js';
import { AgentClient, ensureGuestImage } from '../../src/guest/index.js';
import { liveQemuPids, type QemuMicrovmDriver, type Template } from '../../src/vmm/index.js';
import { assertNoLeaks, BUILD_TIMEOUT_MS, makeDriver, template } from './helpers.js';

const isCode = (code: string) => (e: unknown) => e instanceof SandboxError && e.code === code && e.hint !== undefined;

describe('microVM failure modes', { timeout: BUILD_TIMEOUT_MS + 5 * 60_000 }, () => {
  let driver: QemuMicrovmDriver;
  let runRoot: string;
  let tpl: Template;
  let scratch: string;

  before(
    async () => {
      ({ driver, runRoot } = makeDriver());
      tpl = await template(driver, 'sandbox/minimal');
      scratch = mkdtempSync(join(tmpdir(), 'sbxf-'));
    },
    { timeout: BUILD_TIMEOUT_MS },
  );

  after(async () => {
    rmSync(scratch, { recursive: true, force: true });
    await assertNoLeaks(driver, runRoot);
  });

  it('a missing kernel is refused before QEMU starts', async () => {
    const img = await ensureGuestImage('sandbox/minimal');
    await assert.rejects(
      driver.createTemplate({
        name: 'test/missing',
        image: { kernel: join(scratch, 'no-vmlinux'), initramfs: img.initramfs, hash: 'x' },
      }),
      isCode('vm.image-missing'),
    );
    assert.deepEqual(liveQemuPids(), []);
  });

  it('a template whose snapshot files are gone is refused', async () => {
    await assert.rejects(driver.clone({ ...tpl, stateFile: join(scratch, 'nope') }), isCode('template.missing'));
  });

  it('a corrupt snapshot makes QEMU fail mid-clone: clear error, nothing left', async () => {
    const bad = join(scratch, 'bad.state');
    writeFileSync(bad, Buffer.alloc(4096, 0x5a));
    const t0 = Date.now();
    await assert.rejects(
      driver.clone({ ...tpl, stateFile: bad }, { readyTimeoutMs: 10_000 }),
      (e: unknown) => e instanceof SandboxError && (e.code === 'vm.process-exited' || e.code === 'vm.restore-failed'),
    );
    assert.ok(Date.now() - t0 < 10_000);
    assert.deepEqual(liveQemuPids(), []);
  });

  it('QEMU killed during a clone: clear error within bounded time, no leak', async () => {
    const t0 = Date.now();
    const clone = driver.clone(tpl, { id: 'vm-crashme' });
    // kill QEMU as soon as it exists
    const killer = (async () => {
      for (let i = 0; i < 500; i++) {
        const pid = liveQemuPids()[0];
        if (pid) {
          process.kill(pid, 'SIGKILL');
          return pid;
        }
        await new Promise((r) => setTimeout(r, 1));
      }
      return undefined;
    })();
    const killed = await killer;
    assert.ok(killed, 'QEMU never appeared');
    await assert.rejects(
      clone,
      (e: unknown) =>
        e instanceof SandboxError &&
        ['vm.process-exited', 'qmp.disconnected', 'agent.disconnected', 'qmp.unreachable'].includes(e.code),
    );
    assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`);
    assert.equal(existsSync(join(runRoot, 'vm-crashme')), false);
    assert.deepEqual(liveQemuPids(), []);
  });

  it('a crashed running VM is marked failed and can still be destroyed', async () => {
    const vm = await driver.clone(tpl);
    process.kill(vm.pid!, 'SIGKILL');
    for (let i = 0; i < 200 && vm.state !== 'failed'; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(vm.state, 'failed');
    await assert.rejects(async () => vm.run(['true']), isCode('vm.invalid-state'));
    await vm.destroy();
    assert.equal(existsSync(vm.runDir), false);
  });

  it('a guest that never answers (paused) times out on connect with agent.unresponsive', async () => {
    const vm = await driver.clone(tpl);
    await vm.pause();
    const t0 = Date.now();
    // a second host connection replaces the first; the frozen guest cannot answer its hello
    await assert.rejects(
      AgentClient.connect(vm.record.agentSocket, { connectTimeoutMs: 800 }),
      isCode('agent.unresponsive'),
    );
    assert.ok(Date.now() - t0 < 3000);
    await vm.destroy();
  });

  it('a guest without an agent fails the template boot within the deadline', async () => {
    const img = await ensureGuestImage('sandbox/minimal');
    // an initramfs whose init never starts the agent
    const dir = join(scratch, 'noagent');
    const { execFileSync } = await import('node:child_process');
    execFileSync('sh', [
      '-c',
      `mkdir -p ${dir}/bin && cp /bin/busybox ${dir}/bin/ && printf '#!/bin/busybox sh\\nexec /bin/busybox sleep 100000\\n' > ${dir}/init && chmod +x ${dir}/init && cd ${dir} && find . | cpio --quiet -o -H newc > ../noagent.cpio`,
    ]);
    const t0 = Date.now();
    await assert.rejects(
      driver.createTemplate(
        {
          name: 'test/noagent',
          image: { kernel: img.kernel, initramfs: join(scratch, 'noagent.cpio'), hash: `noagent-${Date.now()}` },
        },
        { bootTimeoutMs: 6000, progress: () => undefined },
      ),
      isCode('vm.boot-failed'),
    );
    assert.ok(Date.now() - t0 < 20_000, `took ${Date.now() - t0} ms`);
    assert.deepEqual(liveQemuPids(), []);
  });
});
