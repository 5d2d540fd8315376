/**
 * Network namespaces a test makes for itself, each joined to the host by a veth pair, with an HTTP listener (and
 * optionally a DNS responder) inside: the "public" and "private" destinations a networked guest is tried against.
 * Nothing here contacts an address outside loopback and these namespaces.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export interface TestNetns {
  name: string;
  hostIf: string;
  /** The namespace's address (the listener's). */
  address: string;
  /** The host's address on the link. */
  hostAddress: string;
  stop(): void;
}

function sh(cmd: string): void {
  execFileSync('sh', ['-c', cmd], { stdio: ['ignore', 'ignore', 'pipe'] });
}

/**
 * A namespace on the /30 at `base` (host base+1, namespace base+2) serving HTTP on port 8080 (answers `<label>:<peer address>`)
 * and, with `dns`, answering every A query on UDP 53 with its own address.
 */
export function testNetns(label: string, base: string, opts: { dns?: boolean } = {}): TestNetns {
  const tag = randomBytes(3).toString('hex');
  const name = `sbxt-${label}-${tag}`;
  const hostIf = `sbxt${tag}`;
  const octets = base.split('.').map(Number);
  const at = (n: number) => [...octets.slice(0, 3), octets[3]! + n].join('.');
  const hostAddress = at(1);
  const address = at(2);
  sh(`ip netns add ${name}`);
  const procs: ChildProcess[] = [];
  const stop = () => {
    for (const p of procs) p.kill('SIGKILL');
    try {
      sh(`ip link del ${hostIf} 2>/dev/null; ip netns del ${name}`);
    } catch {
      /* already gone */
    }
  };
  try {
    sh(`ip link add ${hostIf} type veth peer name eth0 netns ${name}`);
    sh(`ip addr add ${hostAddress}/30 dev ${hostIf} && ip link set ${hostIf} up`);
    // Replies to a VM come back in on this link: it forwards, as a node's uplink does (net.ipv4.ip_forward=1).
    sh(`echo 1 > /proc/sys/net/ipv4/conf/${hostIf}/forwarding`);
    sh(
      `ip -n ${name} addr add ${address}/30 dev eth0 && ip -n ${name} link set eth0 up && ip -n ${name} link set lo up`,
    );
    sh(`ip -n ${name} route add default via ${hostAddress}`);
    const server = `
      require('http').createServer((q, s) => s.end(${JSON.stringify(label)} + ':' + q.socket.remoteAddress)).listen(8080, ${JSON.stringify(address)});
      if (${opts.dns ? 'true' : 'false'}) {
        const d = require('dgram').createSocket('udp4');
        d.on('message', (m, r) => {
          // header + the question as asked, then one A answer pointing at the question's name (0xc00c)
          let i = 12; while (m[i] !== 0 && i < m.length) i += m[i] + 1; const q = m.subarray(12, i + 5);
          const h = Buffer.from([m[0], m[1], 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
          const a = Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, ...${JSON.stringify(address)}.split('.').map(Number)]);
          d.send(Buffer.concat([h, q, a]), r.port, r.address);
        });
        d.bind(53, ${JSON.stringify(address)});
      }`;
    procs.push(
      spawn('nsenter', [`--net=/run/netns/${name}`, '--', process.execPath, '-e', server], { stdio: 'ignore' }),
    );
  } catch (err) {
    stop();
    throw err;
  }
  return { name, hostIf, address, hostAddress, stop };
}
