/**
 * Real QEMU microVMs (TCG here): template boot, clones, exec, files, streaming, signals, CoW divergence,
 * pause/resume, hibernate/restore, fork, and destroy leaving nothing behind.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { existsSync } from 'node:fs';
import { SandboxError } from '../../src/errors.js';
import { pidAlive, type QemuMicrovmDriver, type Template, type Vm } from '../../src/vmm/index.js';
import { assertNoLeaks, BUILD_TIMEOUT_MS, makeDriver, sleep, template } from './helpers.js';

describe('microVM lifecycle (sandbox/minimal)', { timeout: BUILD_TIMEOUT_MS + 10 * 60_000 }, () => {
  let driver: QemuMicrovmDriver;
  let runRoot: string;
  let tpl: Template;
  const pids = new Set<number>();
  let clones: Vm[] = [];

  before(
    async () => {
      ({ driver, runRoot } = makeDriver());
      tpl = await template(driver, 'sandbox/minimal');
    },
    { timeout: BUILD_TIMEOUT_MS },
  );

  after(async () => {
    await assertNoLeaks(driver, runRoot, pids);
  });

  it('boots a template (snapshot on disk, boot time measured)', () => {
    assert.ok(existsSync(tpl.memFile) && existsSync(tpl.stateFile));
    assert.ok(tpl.bootMs > 0);
  });

  it('clones 10 VMs that all answer', async () => {
    for (let i = 0; i < 10; i++) {
      const vm = await driver.clone(tpl);
      clones.push(vm);
      assert.equal(vm.state, 'running');
      assert.ok(vm.pid);
      pids.add(vm.pid);
    }
    const outs = await Promise.all(clones.map((vm) => vm.run(['echo', vm.id])));
    outs.forEach((r, i) => {
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout.toString(), `${clones[i]!.id}\n`);
    });
    assert.equal(new Set(clones.map((c) => c.pid)).size, 10);
  });

  it('runs echo, writes and reads a file', async () => {
    const vm = clones[0]!;
    const r = await vm.run(['echo', 'hello', 'world']);
    assert.deepEqual([r.exitCode, r.stdout.toString(), r.stderr.toString()], [0, 'hello world\n', '']);
    const bad = await vm.run(['sh', '-c', 'echo oops >&2; exit 7']);
    assert.deepEqual([bad.exitCode, bad.stderr.toString()], [7, 'oops\n']);
    await vm.files.write('/tmp/data.bin', Buffer.from('line1\nline2\n'));
    assert.equal((await vm.files.read('/tmp/data.bin')).toString(), 'line1\nline2\n');
    assert.equal((await vm.run(['cat', '/tmp/data.bin'])).stdout.toString(), 'line1\nline2\n');
    const st = await vm.files.stat('/tmp/data.bin');
    assert.deepEqual([st.type, st.size], ['file', 12]);
    await vm.files.mkdir('/tmp/d/e', { parents: true });
    await vm.files.move('/tmp/data.bin', '/tmp/d/e/moved.bin');
    const list = await vm.files.list('/tmp/d', { depth: 2 });
    assert.ok(list.entries.some((e) => e.path === '/tmp/d/e/moved.bin'));
    await vm.files.remove('/tmp/d', { recursive: true });
    assert.equal(await vm.files.exists('/tmp/d'), false);
    await assert.rejects(
      vm.files.read('/no/such/file'),
      (e: unknown) => e instanceof SandboxError && e.code === 'agent.enoent',
    );
  });

  it('streams a long command output as it is produced', async () => {
    const vm = clones[1]!;
    const arrivals: number[] = [];
    const t0 = Date.now();
    const p = vm.exec(['sh', '-c', 'for i in 1 2 3 4 5; do echo tick $i; sleep 0.3; done'], {
      onStdout: () => arrivals.push(Date.now() - t0),
    });
    const r = await p.wait();
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout.toString(), [1, 2, 3, 4, 5].map((i) => `tick ${i}\n`).join(''));
    assert.ok(arrivals.length >= 3, `expected several chunks, got ${arrivals.length}`);
    assert.ok(arrivals[arrivals.length - 1]! - arrivals[0]! >= 600, `chunks arrived together: ${arrivals.join(',')}`);
    // bulk output through the frame limit
    const big = await vm.run(['sh', '-c', 'head -c 3000000 /dev/zero | tr "\\0" x']);
    assert.equal(big.stdout.length, 3_000_000);
  });

  it('kills a running command by signal', async () => {
    const vm = clones[2]!;
    const p = vm.exec(['sh', '-c', 'echo started; sleep 60']);
    const pid = await p.pid;
    assert.ok(pid > 1);
    await sleep(200);
    await p.kill('SIGTERM');
    const r = await p.wait();
    assert.equal(r.signal, 'SIGTERM');
    assert.equal(r.exitCode, 143);
    assert.equal(r.stdout.toString(), 'started\n');
  });

  it('supports stdin and a pty', async () => {
    const vm = clones[3]!;
    const cat = vm.exec(['cat'], { stdin: true });
    cat.write('from stdin');
    cat.closeStdin();
    assert.equal((await cat.wait()).stdout.toString(), 'from stdin');
    const tty = await vm.run(['sh', '-c', 'tty; stty size'], { pty: { cols: 100, rows: 30 } });
    assert.match(tty.stdout.toString(), /\/dev\/pts\/\d+\r\n30 100\r\n/);
  });

  it('clones diverge independently (copy-on-write)', async () => {
    const [a, b, c] = [clones[4]!, clones[5]!, clones[6]!];
    await a.files.write('/tmp/who', 'A');
    await b.files.write('/tmp/who', 'B');
    assert.equal((await a.files.read('/tmp/who')).toString(), 'A');
    assert.equal((await b.files.read('/tmp/who')).toString(), 'B');
    assert.equal(await c.files.exists('/tmp/who'), false);
    // a fresh clone of the same template sees none of it
    const d = await driver.clone(tpl);
    pids.add(d.pid!);
    assert.equal(await d.files.exists('/tmp/who'), false);
    await d.destroy();
  });

  it('pause makes the agent unresponsive; resume brings it back with state intact', async () => {
    const vm = clones[7]!;
    await vm.files.write('/tmp/state', 'kept');
    await vm.pause();
    assert.equal(vm.state, 'paused');
    await assert.rejects(
      async () => vm.agent.ping(300),
      (e: unknown) => e instanceof SandboxError && e.code === 'vm.invalid-state',
    );
    // below the VM facade: the raw connection gets no answer while paused
    await vm.resume();
    assert.equal(vm.state, 'running');
    assert.equal((await vm.files.read('/tmp/state')).toString(), 'kept');
    await vm.pause();
    const raw = (vm as unknown as { _agent: { ping(ms: number): Promise<void> } })._agent;
    await assert.rejects(raw.ping(500), (e: unknown) => e instanceof SandboxError && e.code === 'agent.timeout');
    await assert.rejects(vm.pause(), (e: unknown) => e instanceof SandboxError && e.code === 'vm.invalid-state');
    await vm.resume();
    await vm.agent.ping(5000);
  });

  it('hibernate frees the VM memory; restore brings its state back', async () => {
    const vm = clones[8]!;
    await vm.files.write('/tmp/hib', 'before-hibernate');
    const oldPid = vm.pid!;
    await vm.hibernate();
    assert.equal(vm.state, 'hibernated');
    assert.equal(vm.pid, undefined);
    assert.equal(pidAlive(oldPid), false, 'QEMU still running after hibernate');
    assert.ok((vm.hibernatedBytes() ?? 0) > 0);
    await assert.rejects(
      async () => vm.run(['true']),
      (e: unknown) => e instanceof SandboxError && e.code === 'vm.invalid-state',
    );
    await vm.restore();
    assert.equal(vm.state, 'running');
    pids.add(vm.pid!);
    assert.notEqual(vm.pid, oldPid);
    assert.equal((await vm.files.read('/tmp/hib')).toString(), 'before-hibernate');
    assert.equal((await vm.run(['echo', 'alive'])).stdout.toString(), 'alive\n');
  });

  it('forks 3 children from a running VM; each keeps its files and diverges', async () => {
    const parent = clones[9]!;
    await parent.files.write('/tmp/parent', 'from-parent');
    const bg = parent.exec(['sh', '-c', 'echo $$ > /tmp/bgpid; sleep 600']);
    await bg.pid;
    const children = await parent.fork(3);
    for (const c of children) pids.add(c.pid!);
    assert.equal(children.length, 3);
    assert.equal(parent.state, 'running');
    for (const [i, c] of children.entries()) {
      assert.equal((await c.files.read('/tmp/parent')).toString(), 'from-parent');
      await c.files.write('/tmp/child', `child-${i}`);
      // the parent's background process was forked too
      const bgpid = (await c.files.read('/tmp/bgpid')).toString().trim();
      assert.equal((await c.run(['kill', '-0', bgpid])).exitCode, 0);
    }
    for (const [i, c] of children.entries()) assert.equal((await c.files.read('/tmp/child')).toString(), `child-${i}`);
    assert.equal(await parent.files.exists('/tmp/child'), false);
    await bg.kill('SIGKILL');
    await Promise.all(children.map((c) => c.destroy()));
  });

  it('destroying a VM leaves no process, socket or file behind', async () => {
    const vm = clones.pop()!;
    const pid = vm.pid!;
    const dir = vm.runDir;
    await vm.destroy();
    assert.equal(vm.state, 'destroyed');
    assert.equal(pidAlive(pid), false);
    assert.equal(existsSync(dir), false);
    await assert.rejects(
      async () => vm.run(['true']),
      (e: unknown) => e instanceof SandboxError && e.code === 'vm.invalid-state',
    );
    await Promise.all(clones.map((c) => c.destroy()));
    clones = [];
  });
});
