/**
 * Shared fixtures of the VM tests: one driver per test file with its own run dir, templates built
 * through the cached build functions (a cold cache builds the kernel: minutes), and a leak check that
 * every QEMU process, socket and file is gone.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureTemplate, liveQemuPids, pidAlive, QemuMicrovmDriver, type Template } from '../../src/vmm/index.js';

/** A cold cache builds the kernel (~5 min on 2 busy cores) before the first boot. */
export const BUILD_TIMEOUT_MS = 30 * 60_000;

export function makeDriver(): { driver: QemuMicrovmDriver; runRoot: string } {
  // Short path: unix socket paths are limited to 107 bytes.
  const runRoot = mkdtempSync(join(tmpdir(), 'sbxt-'));
  const driver = new QemuMicrovmDriver({ runRoot, accel: 'auto' });
  return { driver, runRoot };
}

const templates = new Map<string, Promise<Template>>();
export function template(driver: QemuMicrovmDriver, name: string): Promise<Template> {
  let t = templates.get(name);
  if (!t) {
    t = ensureTemplate(driver, name, { progress: (l) => process.stderr.write(`  [build] ${l}\n`) });
    templates.set(name, t);
  }
  return t;
}

/** Every QEMU we started has exited, and the run root holds nothing. */
export async function assertNoLeaks(
  driver: QemuMicrovmDriver,
  runRoot: string,
  pidsSeen: Iterable<number> = [],
): Promise<void> {
  await driver.destroyAll();
  assert.deepEqual(liveQemuPids(), [], 'QEMU processes still tracked as alive');
  for (const pid of pidsSeen) assert.equal(pidAlive(pid), false, `QEMU pid ${pid} still alive`);
  const left = existsSync(runRoot) ? readdirSync(runRoot) : [];
  assert.deepEqual(left, [], `run root not empty: ${left.join(', ')}`);
  rmSync(runRoot, { recursive: true, force: true });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
