/**
 * Bulk TCP transfers for bench/vm-network: a byte counter (node) run in a network namespace, and the python3 programs
 * that send to it, from a guest or from the host, with the guest-side floors beside them; and how busy a QEMU's
 * threads were meanwhile. Nothing here contacts an address the caller does not pass in.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { TestNetns } from '../../test/support/test-netns.js';

/** The counter's port in its namespace. */
export const SINK_PORT = 9000;

/** Counts each connection's bytes; prints `{bytes, ms}` (accept to the sender's end) and closes. */
export const SINK = `
const net = require('node:net');
net.createServer((c) => {
  const t = performance.now(); let bytes = 0;
  c.on('data', (b) => { bytes += b.length; });
  c.on('end', () => { console.log(JSON.stringify({ bytes, ms: performance.now() - t })); c.end(); });
  c.on('error', () => undefined);
}).listen(${SINK_PORT}, process.argv[1], () => console.log('listening'));
`;

/** Sends argv[3] bytes to argv[1]:argv[2] in 64 KiB writes, waits for the counter to close, prints seconds. */
export const SENDER = `
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = memoryview(bytearray(1 << 16))
s = socket.create_connection((host, port))
t = time.perf_counter()
left = n
while left > 0:
    left -= s.send(buf[:min(left, len(buf))])
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(time.perf_counter() - t)
`;

/** The same writes to /dev/null: what the sender's own loop costs in the guest. */
export const DEVNULL = `
import os, sys, time
n = int(sys.argv[1]); buf = memoryview(bytearray(1 << 16)); fd = os.open('/dev/null', os.O_WRONLY)
t = time.perf_counter(); left = n
while left > 0:
    left -= os.write(fd, buf[:min(left, len(buf))])
print(time.perf_counter() - t)
`;

/** The same transfer over the guest's loopback (a forked reader in the same guest): its TCP stack without a NIC. */
export const LOOPBACK = `
import os, socket, sys, time
n = int(sys.argv[1])
ls = socket.socket(); ls.bind(('127.0.0.1', 0)); ls.listen(1)
if os.fork() == 0:
    c, _ = ls.accept()
    while c.recv(1 << 16): pass
    c.close(); os._exit(0)
buf = memoryview(bytearray(1 << 16))
s = socket.create_connection(ls.getsockname())
t = time.perf_counter(); left = n
while left > 0:
    left -= s.send(buf[:min(left, len(buf))])
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(time.perf_counter() - t)
`;

export class Sink {
  private readonly lines: string[] = [];
  private wake: (() => void) | undefined;
  private constructor(private readonly child: ChildProcess) {
    createInterface({ input: child.stdout! }).on('line', (l) => {
      this.lines.push(l);
      this.wake?.();
    });
  }

  static async start(ns: TestNetns): Promise<Sink> {
    const child = spawn('nsenter', [`--net=/run/netns/${ns.name}`, '--', process.execPath, '-e', SINK, ns.address], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const sink = new Sink(child);
    if ((await sink.next(10_000)) !== 'listening') throw new Error('byte counter did not start');
    return sink;
  }

  async next(ms = 300_000): Promise<string> {
    const end = Date.now() + ms;
    while (!this.lines.length) {
      if (Date.now() > end || this.child.exitCode !== null) throw new Error('byte counter: no answer');
      await new Promise<void>((r) => {
        this.wake = r;
        setTimeout(r, 200);
      });
    }
    return this.lines.shift()!;
  }

  /** MiB/s of the transfer it just counted (it must have seen all `expected` bytes). */
  async mibps(expected: number): Promise<number> {
    const { bytes, ms } = JSON.parse(await this.next()) as { bytes: number; ms: number };
    if (bytes !== expected) throw new Error(`byte counter saw ${bytes} of ${expected} bytes`);
    return bytes / 2 ** 20 / (ms / 1000);
  }

  stop(): void {
    this.child.kill('SIGKILL');
  }
}

/** Per thread of `pid`: ns on a CPU and ns runnable but waiting for one, so far (schedstat). */
export function threadSched(pid: number): Map<string, [number, number]> {
  const out = new Map<string, [number, number]>();
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      const [run, wait] = readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ').map(Number);
      out.set(t, [run!, wait!]);
    } catch {
      /* the thread ended */
    }
  }
  return out;
}

/**
 * The QEMU thread that ran most between two samples over `ms`: its share of a core on a CPU, and waiting for one
 * (the two together near 100 %: it was never idle, so the guest's CPU, not the network, set the pace).
 */
export function busiestThread(before: Map<string, [number, number]>, after: Map<string, [number, number]>, ms: number) {
  let best: [number, number] = [0, 0];
  for (const [t, [run, wait]] of after) {
    const [run0, wait0] = before.get(t) ?? [0, 0];
    if (run - run0 > best[0]) best = [run - run0, wait - wait0];
  }
  return { runPct: (best[0] / 1e6 / ms) * 100, waitPct: (best[1] / 1e6 / ms) * 100 };
}
