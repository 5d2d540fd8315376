/**
 * Debian-package templates: sandbox/base (read-only ext4 root + tmpfs copy-on-write layer, no NIC) and
 * sandbox/python (python3, egress lane), and port-forward through the agent.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { QemuMicrovmDriver, Vm } from '../../src/vmm/index.js';
import { assertNoLeaks, BUILD_TIMEOUT_MS, makeDriver, sleep, template } from './helpers.js';

/** One request to a guest port through the agent's tcp.connect; the whole answer. */
async function viaAgent(vm: Pick<Vm, 'connectTcp'>, port: number, request: string): Promise<string> {
  const sock = await vm.connectTcp(port);
  return new Promise<string>((resolve, reject) => {
    let acc = '';
    sock.on('data', (d: Buffer) => (acc += d.toString()));
    sock.on('end', () => resolve(acc));
    sock.on('error', reject);
    sock.end(request);
  });
}

describe('Debian templates', { timeout: BUILD_TIMEOUT_MS + 10 * 60_000 }, () => {
  let driver: QemuMicrovmDriver;
  let runRoot: string;

  before(() => {
    ({ driver, runRoot } = makeDriver());
  });

  after(async () => {
    await assertNoLeaks(driver, runRoot);
  });

  it(
    'sandbox/base: Debian userland on a read-only root with a per-VM writable layer, no NIC',
    { timeout: BUILD_TIMEOUT_MS },
    async () => {
      const tpl = await template(driver, 'sandbox/base');
      const [a, b] = [await driver.clone(tpl), await driver.clone(tpl)];
      const r = await a.run(['bash', '-c', 'echo "$BASH_VERSION"; cat /etc/debian_version; ls /sys/class/net']);
      assert.equal(r.exitCode, 0, r.stderr.toString());
      const [bash, debian, nics] = [
        r.stdout.toString().split('\n')[0]!,
        r.stdout.toString().split('\n')[1]!,
        r.stdout.toString().split('\n').slice(2).join(' ').trim(),
      ];
      assert.match(bash, /^5\./);
      assert.match(debian, /^12\./);
      assert.ok(!/\beth\d/.test(nics), `no NIC expected on the none lane, got: ${nics}`);
      // a file of the read-only root, replaced in a's copy-on-write layer only
      await a.files.write('/etc/debian_version', 'changed in a');
      assert.equal((await a.files.read('/etc/debian_version')).toString(), 'changed in a');
      assert.match((await b.files.read('/etc/debian_version')).toString(), /^12\./);
      await Promise.all([a.destroy(), b.destroy()]);
    },
  );

  it(
    "sandbox/base: the tools e2b's base template has, for its default user: git, python3 and python, sudo, curl, tput",
    { timeout: BUILD_TIMEOUT_MS },
    async () => {
      const tpl = await template(driver, 'sandbox/base');
      const vm = await driver.clone(tpl);
      const script = [
        'set -e',
        'id -un',
        'git init -q /tmp/repo && git -C /tmp/repo -c user.name=u -c user.email=u@x commit -q --allow-empty -m first',
        'git -C /tmp/repo log --format=%s',
        'python --version',
        'python3 -c "import sys; print(sys.version_info[0])"',
        'sudo -n id -u',
        'curl --version | head -1 | cut -d" " -f1',
        'TERM=xterm tput cols',
      ].join('\n');
      const r = await vm.run(['bash', '-c', script], {
        uid: 1000,
        gid: 1000,
        env: { HOME: '/home/user', PATH: '/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' },
      });
      assert.equal(r.exitCode, 0, `${r.stdout.toString()}\n${r.stderr.toString()}`);
      const lines = r.stdout.toString().trim().split('\n');
      assert.equal(lines[0], 'user');
      assert.equal(lines[1], 'first');
      assert.match(lines[2]!, /^Python 3\.11\./);
      assert.equal(lines[3], '3');
      assert.equal(lines[4], '0', 'sudo -n as user runs as root');
      assert.equal(lines[5], 'curl');
      assert.equal(lines[6], '80');
      await vm.destroy();
    },
  );

  it(
    'sandbox/python: python3 runs on the egress lane; a guest port answers through the agent',
    { timeout: BUILD_TIMEOUT_MS },
    async () => {
      const tpl = await template(driver, 'sandbox/python');
      assert.equal(tpl.network, 'egress');
      const vm = await driver.clone(tpl);
      const py = await vm.run(['python3', '-c', 'import sys, json; print(json.dumps({"v": sys.version_info[:2]}))']);
      assert.equal(py.exitCode, 0, py.stderr.toString());
      assert.deepEqual(JSON.parse(py.stdout.toString()), { v: [3, 11] });
      await vm.files.write('/srv/hello.txt', 'hello from the guest', { parents: true });
      const server = vm.exec(['python3', '-m', 'http.server', '8000', '--bind', '0.0.0.0', '--directory', '/srv'], {
        collect: false,
      });
      await server.pid;
      // Reached through the agent's tcp.connect (port-forward needs no NIC); the server takes seconds to start
      // under TCG on a busy host.
      let body = '';
      for (let deadline = Date.now() + 90_000; !/hello from the guest$/.test(body) && Date.now() < deadline;) {
        body = await viaAgent(vm, 8000, 'GET /hello.txt HTTP/1.0\r\n\r\n').catch(() => '');
        if (!body) await sleep(300);
      }
      assert.match(body, /hello from the guest$/);
      await server.kill('SIGKILL');
      await vm.destroy();
    },
  );
});
