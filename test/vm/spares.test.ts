/**
 * Spare VMMs: QEMU processes started ahead of demand with a template's state loaded and the guest paused.
 * A clone takes one (no QEMU start-up, no state load on its path); spares never leak, not even from a
 * process that died without cleaning up.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pidAlive, QemuMicrovmDriver, type Template } from '../../src/vmm/index.js';
import { assertNoLeaks, BUILD_TIMEOUT_MS, sleep, template } from './helpers.js';

const SPARE = 'sbx.spare';

/** Wait until the driver holds a loaded spare of `tpl` (other than `notId`); its id. */
async function waitForSpare(driver: QemuMicrovmDriver, tpl: Template, notId?: string): Promise<string> {
  for (let i = 0; i < 300; i++) {
    const spare = driver.list().find((r) => r.labels[SPARE] === 'true' && r.alive && r.id !== notId);
    if (spare && driver.readySpares(tpl) > 0) return spare.id;
    await sleep(50);
  }
  throw new Error('no spare VMM was ready within 15 s');
}

describe('spare VMMs', { timeout: BUILD_TIMEOUT_MS + 5 * 60_000 }, () => {
  const runRoot = mkdtempSync(join(tmpdir(), 'sbxs-'));
  const driver = new QemuMicrovmDriver({ runRoot, spareVmms: 1 });
  let tpl: Template;

  before(async () => {
    tpl = await template(driver, 'sandbox/minimal');
  });
  after(async () => {
    await assertNoLeaks(driver, runRoot);
  });

  it('a clone takes the loaded spare, gets its labels, a fresh clock and seed, and a new spare starts', async () => {
    const first = await driver.clone(tpl);
    const spareId = await waitForSpare(driver, tpl);
    assert.notEqual(spareId, first.id);
    assert.deepEqual(
      driver.running().map((v) => v.id),
      [first.id],
      'spares are not listed as running VMs',
    );
    // A spare that waited paused still wakes with the host's clock (hello sets it).
    await sleep(1500);
    const vm = await driver.clone(tpl, { labels: { team: 'a' } });
    assert.equal(vm.id, spareId, 'the clone is the spare');
    assert.equal(vm.state, 'running');
    assert.deepEqual(vm.record.labels, { team: 'a' });
    const r = await vm.run(['sh', '-c', 'date +%s; cat /proc/sys/kernel/random/uuid']);
    const [guestSecs, uuid] = r.stdout.toString().trim().split('\n');
    assert.ok(Math.abs(Number(guestSecs) - Date.now() / 1000) < 3, `guest clock ${guestSecs} is the host's`);
    const other = await first.run(['cat', '/proc/sys/kernel/random/uuid']);
    assert.notEqual(uuid, other.stdout.toString().trim(), 'clones do not share random numbers');
    const next = await waitForSpare(driver, tpl, spareId);
    assert.notEqual(next, spareId);
    await Promise.all([first.destroy(), vm.destroy()]);
  });

  it('a fork starts no spare VMM of its one-operation template (nor does anything else of it stay)', async () => {
    const parent = await driver.clone(tpl);
    const spareOf = (name: string) =>
      driver.list().filter((r) => r.labels[SPARE] === 'true' && r.template.name === name);
    const kids = await parent.fork(2);
    const forkTemplate = kids[0]!.record.template.name;
    assert.match(forkTemplate, /@fork-/);
    assert.deepEqual(spareOf(forkTemplate), [], 'no spare of the fork template was started');
    await sleep(1000);
    assert.deepEqual(spareOf(forkTemplate), [], 'nor later');
    for (const k of kids) assert.equal((await k.run(['echo', 'ok'])).stdout.toString().trim(), 'ok');
    await Promise.all([parent.destroy(), ...kids.map((k) => k.destroy())]);
  });

  it('a spare whose QEMU died is skipped: the clone starts its own QEMU', async () => {
    const spareId = await waitForSpare(driver, tpl);
    const pid = driver.get(spareId)!.pid!;
    process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 100 && pidAlive(pid); i++) await sleep(20);
    await sleep(100);
    const vm = await driver.clone(tpl);
    assert.notEqual(vm.id, spareId);
    assert.equal((await vm.run(['echo', 'ok'])).stdout.toString().trim(), 'ok');
    await vm.destroy();
  });

  it('close() destroys the spares and no clone starts one again, not even one finishing during the close', async () => {
    const root = mkdtempSync(join(tmpdir(), 'sbxs-'));
    const d = new QemuMicrovmDriver({ runRoot: root, spareVmms: 1 });
    const vm = await d.clone(tpl);
    await waitForSpare(d, tpl);
    const inFlight = d.clone(tpl); // takes the spare; its replacement would start when it finishes
    await d.close();
    const late = await inFlight;
    const again = await d.clone(tpl);
    await sleep(1000);
    assert.equal(d.readySpares(tpl), 0);
    assert.deepEqual(
      d.list().filter((r) => r.labels[SPARE] === 'true' && r.alive),
      [],
      'no spare VMM process after close',
    );
    const pids = [vm.pid, late.pid, again.pid];
    await Promise.all([vm.destroy(), late.destroy(), again.destroy()]);
    await d.destroyAll();
    for (const pid of pids) assert.equal(pid !== undefined && pidAlive(pid), false, `QEMU ${pid} gone`);
    assert.deepEqual(readdirSync(root), [], 'run root empty');
    rmSync(root, { recursive: true, force: true });
  });

  it('spares left by a process that died are reaped by the next one on the same run root', async () => {
    const spareId = await waitForSpare(driver, tpl);
    const pid = driver.get(spareId)!.pid!;
    // A second driver on the same run root stands in for the restarted daemon.
    const successor = new QemuMicrovmDriver({ runRoot, spareVmms: 1 });
    const mine = new Set(
      driver
        .list()
        .filter((r) => r.labels[SPARE] === 'true')
        .map((r) => r.id),
    );
    const reaped = await successor.reapOrphanSpares();
    assert.ok(reaped >= 1 && mine.has(spareId), `reaped ${reaped}`);
    assert.equal(pidAlive(pid), false, 'the orphaned spare QEMU was killed');
    assert.equal(
      driver.list().some((r) => r.id === spareId),
      false,
      'its run dir is gone',
    );
    await driver.destroySpares();
  });
});
