/**
 * The egress lane isolates (issue 30): a real microVM in its own namespace reaches a "public" address (one in a
 * namespace this test makes) through NAT on the node, and nothing of the node's: not its loopback, not its
 * addresses, not a private range; a tenant's deny applies within a second, a template NetworkPolicy that allows a
 * private CIDR opens exactly that; every verb (pause, hibernate, checkpoint + clone, fork) keeps outbound working;
 * nothing is left when VMs go, even when their daemon died. Only loopback and this test's namespaces are contacted.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { e2bTenantLayer, networkPolicyEgressLayer } from '../../src/api/vm-network.js';
import { QemuMicrovmDriver, type Template, type Vm } from '../../src/vmm/index.js';
import { testNetns, type TestNetns } from '../support/test-netns.js';
import { assertNoLeaks, BUILD_TIMEOUT_MS, makeDriver, template } from './helpers.js';

/** `label:peer` from the listener, or `ERR ...` (timeout, refused) as the guest saw it. */
async function probe(vm: Vm, url: string, timeoutS = 2): Promise<string> {
  const code = [
    'import urllib.request',
    'try:',
    `  print(urllib.request.urlopen(${JSON.stringify(url)}, timeout=${timeoutS}).read().decode())`,
    'except Exception as e:',
    "  print('ERR', e)",
  ].join('\n');
  const r = await vm.run(['python3', '-c', code]);
  return r.stdout.toString().trim();
}

function netnsOf(vm: Vm): string {
  assert.ok(vm.record.netns, `VM ${vm.id} has no network namespace`);
  return vm.record.netns.name;
}

describe('egress lane: a namespace, a TAP and a policy per VM', { timeout: BUILD_TIMEOUT_MS + 10 * 60_000 }, () => {
  let driver: QemuMicrovmDriver;
  let runRoot: string;
  let tpl: Template;
  let pub: TestNetns;
  let priv: TestNetns;
  let loopback: Server;
  let loopbackPort: number;

  before(async () => {
    pub = testNetns('pub', '203.0.113.200', { dns: true });
    priv = testNetns('priv', '10.251.7.0');
    ({ runRoot } = makeDriver());
    // The guest's DNS goes to the "public" namespace's responder: no real resolver is ever asked.
    driver = new QemuMicrovmDriver({ runRoot, accel: 'auto', vmResolver: pub.address });
    loopback = createServer((_q, s) => s.end('host-loopback'));
    await new Promise<void>((r) => loopback.listen(0, '0.0.0.0', r));
    loopbackPort = (loopback.address() as AddressInfo).port;
    tpl = await template(driver, 'sandbox/python');
    assert.equal(tpl.network, 'egress');
  });

  after(async () => {
    await assertNoLeaks(driver, runRoot);
    loopback?.close();
    pub?.stop();
    priv?.stop();
  });

  it('reaches a public address through NAT; the node, its loopback and private ranges are unreachable', async () => {
    const vm = await driver.clone(tpl);
    try {
      const ns = vm.record.netns!;
      assert.ok(existsSync(`/run/netns/${netnsOf(vm)}`));
      // The listener sees the node's address on its link: the VM's traffic was masqueraded on the node.
      assert.equal(await probe(vm, `http://${pub.address}:8080/`), `pub:${pub.hostAddress}`);
      const refused = [
        `http://10.0.2.2:${loopbackPort}/`, // user networking's door to the host loopback
        `http://127.0.0.1:${loopbackPort}/`, // the guest's own loopback, not the host's
        `http://${ns.hostAddress}:${loopbackPort}/`, // the node end of the VM's own veth
        `http://${pub.hostAddress}:${loopbackPort}/`, // another address of the node
        `http://${priv.address}:8080/`, // a private range
      ];
      for (const url of refused) assert.match(await probe(vm, url), /^ERR/, `${url} must be unreachable`);
      // DNS: the guest's 10.0.2.3 is forwarded to the resolver the node names.
      const dns = await vm.run(['python3', '-c', 'import socket; print(socket.gethostbyname("anything.example"))']);
      assert.equal(dns.stdout.toString().trim(), pub.address, dns.stderr.toString());
    } finally {
      await vm.destroy();
    }
  });

  it("a tenant's denyOut cuts a destination within a second; allowOut wins over it; a NetworkPolicy opens a private CIDR", async () => {
    const vm = await driver.clone(tpl);
    try {
      assert.match(await probe(vm, `http://${pub.address}:8080/`), /^pub:/);
      await vm.setNetworkPolicy({ tenant: e2bTenantLayer({ denyOut: [`${pub.address}/32`] }) });
      assert.match(await probe(vm, `http://${pub.address}:8080/`, 1), /^ERR/, 'denied within a second');
      await vm.setNetworkPolicy({
        tenant: e2bTenantLayer({ allowOut: [pub.address], denyOut: ['0.0.0.0/0'] }),
      });
      assert.match(await probe(vm, `http://${pub.address}:8080/`), /^pub:/);
      // The tenant cannot open a private range the template keeps shut.
      await vm.setNetworkPolicy({ tenant: e2bTenantLayer({ allowOut: [priv.address], denyOut: ['0.0.0.0/0'] }) });
      assert.match(await probe(vm, `http://${priv.address}:8080/`), /^ERR/);
      // The platform engineer can: a template NetworkPolicy allowing 10.251.7.0/30 (and nothing else).
      const template = networkPolicyEgressLayer('NetworkPolicy test/np', [
        { to: [{ ipBlock: { cidr: '10.251.7.0/30' } }], ports: [{ protocol: 'TCP', port: 8080 }] },
      ]);
      await vm.setNetworkPolicy({ template });
      assert.equal(await probe(vm, `http://${priv.address}:8080/`), `priv:${priv.hostAddress}`);
      assert.match(await probe(vm, `http://${pub.address}:8080/`), /^ERR/, 'the policy allows only its CIDR');
      assert.deepEqual(vm.record.netPolicy, { template });
    } finally {
      await vm.destroy();
    }
  });

  it('pause, hibernate, checkpoint + clone and fork keep outbound working, each clone in a namespace of its own', async () => {
    const vm = await driver.clone(tpl);
    const made: Vm[] = [vm];
    try {
      const url = `http://${pub.address}:8080/`;
      await vm.pause();
      await vm.resume();
      assert.match(await probe(vm, url), /^pub:/, 'after pause/resume');
      await vm.hibernate();
      await vm.restore();
      assert.match(await probe(vm, url), /^pub:/, 'after hibernate/restore');
      const ck = await vm.checkpoint('net-ck');
      try {
        const clone = await driver.clone(ck, { keepSpares: false });
        made.push(clone);
        assert.notEqual(netnsOf(clone), netnsOf(vm));
        assert.match(await probe(clone, url), /^pub:/, 'a clone of a checkpoint');
      } finally {
        driver.deleteTemplate(ck);
      }
      const children = (await vm.fork(2)) as Vm[];
      made.push(...children);
      for (const c of children) assert.match(await probe(c, url), /^pub:/, `fork child ${c.id}`);
      assert.equal(new Set(made.map(netnsOf)).size, made.length, 'one namespace per VM');
      assert.match(await probe(vm, url), /^pub:/, 'the parent after its fork');
    } finally {
      await Promise.all(made.map((v) => v.destroy()));
    }
    for (const v of made) assert.ok(!existsSync(`/run/netns/${v.record.netns!.name}`), `${v.id}'s namespace removed`);
  });

  it("the VM's namespace address is its own (a pod address): a peer reaches a guest port; an ingress layer picks the peers", async () => {
    const vm = await driver.clone(tpl);
    try {
      const podAddress = vm.record.netns!.nsAddress;
      await vm.files.write('/srv/who', 'the guest', { parents: true });
      const server = vm.exec(['python3', '-m', 'http.server', '8000', '--bind', '0.0.0.0', '--directory', '/srv'], {
        collect: false,
      });
      await server.pid;
      // A client in another namespace (as a pod of the cluster would be), routed to the VM through the node.
      const fetchFrom = (ns: TestNetns, timeoutS = 3) => {
        try {
          const get = `fetch('http://${podAddress}:8000/who', { signal: AbortSignal.timeout(${timeoutS * 1000}) }).then((r) => r.text()).then((t) => process.stdout.write(t))`;
          return execFileSync('nsenter', [`--net=/run/netns/${ns.name}`, '--', process.execPath, '-e', get], {
            encoding: 'utf8',
            stdio: ['ignore', 'pipe', 'ignore'],
          });
        } catch {
          return 'ERR';
        }
      };
      let body = 'ERR';
      // python3 -m http.server takes seconds to start under TCG
      for (let deadline = Date.now() + 90_000; body !== 'the guest' && Date.now() < deadline;)
        body = fetchFrom(priv, 2);
      assert.equal(body, 'the guest');
      assert.equal(fetchFrom(pub), 'the guest');
      // Only the private peer may connect now; the guest's egress rules did not stop its answers.
      await vm.setNetworkPolicy({
        ingress: {
          source: 'NetworkPolicy test/in',
          rules: [{ action: 'allow', to: ['10.251.7.0/30'] }],
          otherwise: 'deny',
        },
      });
      assert.equal(fetchFrom(priv), 'the guest');
      assert.equal(fetchFrom(pub, 2), 'ERR');
      await server.kill('SIGKILL');
    } finally {
      await vm.destroy();
    }
  });

  it('a namespace whose VM is gone (its daemon died mid-way) is removed when the next daemon starts', async () => {
    const vm = await driver.clone(tpl);
    const ns = netnsOf(vm);
    const pid = vm.pid!;
    // What a crash leaves: QEMU killed and its run dir gone, the namespace and slot still there.
    process.kill(pid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 300));
    rmSync(join(runRoot, vm.id), { recursive: true, force: true });
    driver.forget(vm.id);
    assert.ok(existsSync(`/run/netns/${ns}`));
    const next = new QemuMicrovmDriver({ runRoot, accel: 'auto', vmResolver: pub.address });
    await next.reapOrphanSpares();
    assert.ok(!existsSync(`/run/netns/${ns}`), 'namespace removed');
    const slots = readdirSync(driver.options.vmNetworkSlotDir).filter((f) =>
      readFileSync(join(driver.options.vmNetworkSlotDir, f), 'utf8').includes(ns),
    );
    assert.deepEqual(slots, [], 'slot freed');
  });
});
