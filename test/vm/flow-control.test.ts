/**
 * Per-stream flow control in the agent protocol, in a real microVM: a stream whose consumer stalls (a process that
 * never reads stdin, a host that does not take a process's output or a TCP stream's data) holds back only itself;
 * other execs and signals in the same VM go through, and neither side buffers more than a stream's window.
 */
import assert from 'node:assert/strict';
import type { Duplex } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import type { QemuMicrovmDriver, Vm } from '../../src/vmm/index.js';
import { assertNoLeaks, BUILD_TIMEOUT_MS, makeDriver, sleep, template } from './helpers.js';

/** `p`, or a rejection naming `what` once `ms` have passed. */
async function within<T>(ms: number, what: string, p: Promise<T>): Promise<{ value: T; ms: number }> {
  const t0 = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not complete within ${ms} ms`)), ms);
  });
  try {
    const value = await Promise.race([p, late]);
    return { value, ms: Date.now() - t0 };
  } finally {
    clearTimeout(timer);
  }
}

/** What any stalled stream may leave buffered on the host: its window (256 KiB) and one frame in flight. */
const HOST_BUFFER_BOUND = 1 << 20;

describe('agent flow control (sandbox/minimal)', { timeout: BUILD_TIMEOUT_MS + 5 * 60_000 }, () => {
  let driver: QemuMicrovmDriver;
  let runRoot: string;
  let vm: Vm;
  const pids = new Set<number>();

  before(
    async () => {
      ({ driver, runRoot } = makeDriver());
      vm = await driver.clone(await template(driver, 'sandbox/minimal'));
      pids.add(vm.pid!);
    },
    { timeout: BUILD_TIMEOUT_MS },
  );

  after(async () => {
    await assertNoLeaks(driver, runRoot, pids);
  });

  it('a process that never reads stdin is sent 64 MiB: a second exec and a kill of the first complete within a second', async () => {
    const stuck = vm.exec(['sleep', '600'], { stdin: true });
    await stuck.pid;
    stuck.write(Buffer.alloc(64 << 20, 0x61));
    await sleep(500); // let the guest take what it will
    const second = await within(1000, 'a second exec', vm.run(['echo', 'still-serving']));
    assert.equal(second.value.stdout.toString(), 'still-serving\n');
    const killed = await within(
      1000,
      'killing the stalled process',
      stuck.kill('SIGKILL').then(() => stuck.wait()),
    );
    assert.equal(killed.value.signal, 'SIGKILL');
  });

  it('output the host does not take stops the process at its window, not the VM', async () => {
    let received = 0;
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const flood = vm.exec(['cat', '/dev/zero'], {
      collect: false,
      // The consumer never finishes a chunk until released: the host must not ask the guest for more.
      onStdout: (b) => {
        received += b.length;
        return released;
      },
    });
    await flood.pid;
    await sleep(1500);
    assert.ok(received <= HOST_BUFFER_BOUND, `the host took ${received} bytes from a stalled stream`);
    const second = await within(1000, 'an exec beside a stalled stream', vm.run(['echo', 'beside']));
    assert.equal(second.value.stdout.toString(), 'beside\n');
    const before = received;
    release();
    await sleep(300);
    assert.ok(received > before, 'output flows again once the consumer takes it');
    await within(1000, 'killing the flooding process', flood.kill('SIGKILL'));
    assert.equal((await flood.wait()).signal, 'SIGKILL');
  });

  it('a TCP stream the host does not read holds back only itself', async () => {
    const server = vm.exec(['sh', '-c', 'nc -l -p 8090 </dev/zero'], { collect: false });
    await server.pid;
    let tcp: Duplex;
    for (let i = 0; ; i++) {
      try {
        tcp = await vm.connectTcp(8090);
        break;
      } catch (err) {
        if (i > 50) throw err;
        await sleep(100); // nc not listening yet
      }
    }
    try {
      await sleep(1500); // nobody reads `tcp`
      assert.ok(
        tcp.readableLength <= HOST_BUFFER_BOUND,
        `the host buffered ${tcp.readableLength} bytes of an unread stream`,
      );
      const second = await within(1000, 'an exec beside an unread TCP stream', vm.run(['echo', 'beside-tcp']));
      assert.equal(second.value.stdout.toString(), 'beside-tcp\n');
      let got = 0;
      tcp.on('data', (b: Buffer) => (got += b.length));
      // Once read, the stream moves again: more than the bound within a few seconds (TCG under load is slow).
      for (let i = 0; i < 50 && got <= HOST_BUFFER_BOUND; i++) await sleep(100);
      assert.ok(got > HOST_BUFFER_BOUND, `data flows once read (${got} bytes)`);
    } finally {
      tcp.destroy();
      await server.kill('SIGKILL').catch(() => undefined);
      await server.wait().catch(() => undefined);
    }
  });
  it('a write whose source fails is cancelled in the guest: 1 100 failed uploads leave the agent answering', async () => {
    // More failures than the agent's 1 024 stream slots: before, each left its guest write waiting for input with
    // the file open, and the slots ran out ("too many concurrent operations" for every exec and read after).
    const failing = async function* () {
      yield Buffer.from('partial');
      throw new Error('the upload broke off');
    };
    for (let i = 0; i < 1_100; i++)
      await assert.rejects(vm.files.writeStream(`/tmp/failed-${i % 4}`, failing(), { timeoutMs: 0 }), /broke off/);
    const after = await within(5000, 'an exec after 1 100 failed uploads', vm.run(['echo', 'still-here']));
    assert.equal(after.value.stdout.toString(), 'still-here\n');
  });
});
