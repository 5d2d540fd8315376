/**
 * The egress lane end to end through the e2b API (issue 30): a networked e2b sandbox (the alias `base-egress`,
 * sandbox/base on the egress lane, test/support/aggregated.ts) reaches a "public" address (a namespace this test
 * makes) and nothing of the platform's: not the host's loopback through QEMU user networking's 10.0.2.2, not the
 * cluster's kube-apiserver, not sandboxd's own address; `Sandbox.updateNetwork` cuts the public address within a
 * second of its answer and its allowOut wins back, never opening an internal range. Only loopback, the test
 * cluster's namespace and this test's namespace are contacted.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Sandbox } from 'e2b';
import {
  E2B_EGRESS_TEMPLATE,
  e2bOptions,
  getAggregated,
  whileE2bBusy,
  type AggregatedEnv,
} from '../support/aggregated.js';
import { eventually } from '../support/eventually.js';
import { testNetns, type TestNetns } from '../support/test-netns.js';

/** A second listener in the public namespace that reports when each connection arrives. */
const ARRIVALS_PORT = 8081;

/**
 * An HTTP/1.0 GET from inside the guest with bash's /dev/tcp (sandbox/base has neither curl nor python): `OK <the
 * answer>`, or `ERR <exit status> <why>` (124: the connect was still hanging after `timeoutS`, i.e. dropped).
 */
async function probe(sbx: Sandbox, host: string, port: number, timeoutS = 3): Promise<string> {
  const get = `exec 3<>/dev/tcp/${host}/${port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3`;
  const r = await sbx.commands.run(
    `out=$(timeout ${timeoutS} bash -c "${get}" 2>&1) && echo "OK $out" || echo "ERR $? $out"`,
  );
  return r.stdout.trim();
}

/** Whether this process (the host) connects to host:port: the control that a refused guest probe had a listener. */
function hostConnects(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port, timeout: 3000 });
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('timeout', () => (s.destroy(), resolve(false)));
    s.once('error', () => resolve(false));
  });
}

function hostPort(address: string): { host: string; port: number } {
  const u = new URL(address.includes('://') ? address : `http://${address}`);
  return { host: u.hostname, port: Number(u.port) };
}

describe('e2b network: a networked sandbox isolated from the platform, its egress rules live', () => {
  let env: AggregatedEnv;
  let pub: TestNetns;
  let loopback: Server;
  let loopbackPort: number;
  let sbx: Sandbox | undefined;
  let arrivalsServer: ChildProcess;
  /** Date.now() of each request the arrivals listener answered (the namespace shares this machine's clock). */
  const arrivals: number[] = [];

  before(async () => {
    env = await getAggregated();
    pub = testNetns('e2bpub', '203.0.113.220');
    loopback = createServer((_q, s) => s.end('host-loopback'));
    await new Promise<void>((r) => loopback.listen(0, '127.0.0.1', r));
    loopbackPort = (loopback.address() as AddressInfo).port;
    const server = `require('http').createServer((q, s) => { process.stdout.write(Date.now() + '\\n'); s.end('seen'); }).listen(${ARRIVALS_PORT}, ${JSON.stringify(pub.address)})`;
    arrivalsServer = spawn('nsenter', [`--net=/run/netns/${pub.name}`, '--', process.execPath, '-e', server], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let partial = '';
    arrivalsServer.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop()!;
      arrivals.push(...lines.map(Number));
    });
    await eventually(() => hostConnects(pub.address, ARRIVALS_PORT), {
      until: (up) => up,
      what: 'the arrivals listener',
    });
    arrivals.length = 0;
    sbx = await whileE2bBusy(() => Sandbox.create(E2B_EGRESS_TEMPLATE, { ...e2bOptions(env), timeoutMs: 300_000 }));
  });

  after(async () => {
    await sbx?.kill().catch(() => undefined);
    loopback?.close();
    arrivalsServer?.kill('SIGKILL');
    pub?.stop();
  });

  it("reaches the public address through NAT; the host's loopback, kube-apiserver and sandboxd do not answer", async () => {
    const s = sbx!;
    // The listener sees the node's address on its link: the sandbox's traffic was masqueraded on the node.
    const answer = await probe(s, pub.address, 8080);
    assert.ok(answer.startsWith('OK ') && answer.endsWith(`\r\n\r\ne2bpub:${pub.hostAddress}`), answer);
    const kube = hostPort(env.cluster.server);
    assert.equal(kube.host, env.cluster.apiAddress);
    const sandboxd = hostPort(env.sandboxd[0]!.address);
    // [what, where the guest tries, port, where the same listener answers the host (the control)]
    const refused: Array<[string, string, number, string]> = [
      // QEMU user networking's door to the host's 127.0.0.1 (what a guest read before issue 30)
      ['the host loopback via 10.0.2.2', '10.0.2.2', loopbackPort, '127.0.0.1'],
      ["the cluster's kube-apiserver", kube.host, kube.port, kube.host],
      ["sandboxd on the node's own address", sandboxd.host, sandboxd.port, sandboxd.host],
    ];
    for (const [what, host, port, control] of refused) {
      assert.ok(await hostConnects(control, port), `control: ${control}:${port} answers the host`);
      const seen = await probe(s, host, port);
      assert.match(seen, /^ERR /, `${what} (${host}:${port}) must be unreachable from the sandbox, saw: ${seen}`);
    }
    const info = await s.getInfo();
    assert.equal(info.allowInternetAccess, true);
  });

  it('updateNetwork: a denyOut cuts the public address within a second of its answer; allowOut wins back; no internal range opens', async (t) => {
    const s = sbx!;
    // The guest connects to the arrivals listener over and over (each try given a second); the listener, on this
    // machine's clock, says when each connection got through.
    const get = `exec 3<>/dev/tcp/${pub.address}/${ARRIVALS_PORT} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3`;
    const loop = await s.commands.run(`while :; do timeout 1 bash -c "${get}" >/dev/null 2>&1; sleep 0.05; done`, {
      background: true,
      timeoutMs: 0,
    });
    try {
      const seenAfter = (at: number) => arrivals.filter((a) => a > at);
      let mark = Date.now();
      await eventually(() => seenAfter(mark), {
        until: (a) => a.length >= 2,
        timeoutMs: 30_000,
        what: 'the guest loop',
      });

      await s.updateNetwork({ denyOut: [`${pub.address}/32`] });
      const answered = Date.now();
      // A direct try as well, with a timeout a reachable connect never needs (the first test's probes answer in ms).
      assert.match(await probe(s, pub.address, 8080), /^ERR 124/, 'the connect hangs: the namespace drops it');
      await new Promise((r) => setTimeout(r, 2000));
      const late = seenAfter(answered + 1000);
      t.diagnostic(`last arrival ${Math.max(...arrivals) - answered} ms after the update's answer`);
      assert.deepEqual(late, [], 'no connection gets through a second after updateNetwork answered');
      assert.deepEqual((await s.getInfo()).network?.denyOut, [`${pub.address}/32`]);

      // allowOut wins over denyOut (e2b's precedence): the loop, alive all along, gets through again.
      const kube = hostPort(env.cluster.server);
      await s.updateNetwork({ allowOut: [pub.address, `${kube.host}/32`], denyOut: ['0.0.0.0/0'] });
      mark = Date.now();
      await eventually(() => seenAfter(mark), { until: (a) => a.length >= 1, timeoutMs: 10_000, what: 'allowOut' });
      assert.match(await probe(s, pub.address, 8080), /^OK /);
      // A tenant's allow cannot open what the platform's layer keeps shut (the cluster's range).
      assert.match(await probe(s, kube.host, kube.port), /^ERR /, 'the platform layer keeps internal ranges shut');
      assert.equal((await s.getInfo()).allowInternetAccess, false, 'denyOut 0.0.0.0/0 with no allowOut of it');
    } finally {
      await loop.kill();
    }
  });
});
